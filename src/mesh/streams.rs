//! Framed QUIC streams. A [`FrameSender`] writes frames and waits on QUIC
//! flow control, so a slow receiver slows the sender instead of growing a
//! queue; a [`FrameReceiver`] reads chunks into a bounded [`FrameBuf`] and
//! closes only its own connection on a malformed frame.

use std::net::SocketAddr;
use std::sync::Arc;

use super::endpoint::{ERR_PROTOCOL, MeshError};
use super::frame::{self, Frame, FrameBuf};
use super::metrics::MeshMetrics;

/// Largest chunk read from a stream at once.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Names a peer in logs and errors: `node-b (127.0.0.2:7400)`.
#[derive(Clone, Debug)]
pub struct PeerLabel {
    pub name: String,
    pub addr: SocketAddr,
}

impl std::fmt::Display for PeerLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.addr)
    }
}

/// The sending half of a framed stream.
pub struct FrameSender {
    send: quinn::SendStream,
    /// The frames being encoded; handed to quinn as it is (no copy), so a
    /// new one is allocated for every write, with the last write's size.
    buf: Vec<u8>,
    last_len: usize,
    max_frame_bytes: usize,
    peer: PeerLabel,
    metrics: Arc<MeshMetrics>,
}

impl FrameSender {
    pub(crate) fn new(
        send: quinn::SendStream,
        max_frame_bytes: usize,
        peer: PeerLabel,
        metrics: Arc<MeshMetrics>,
    ) -> FrameSender {
        FrameSender {
            send,
            buf: Vec::new(),
            last_len: 0,
            max_frame_bytes,
            peer,
            metrics,
        }
    }

    /// The largest frame the peer accepts (length prefix excluded).
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// Sends one frame; returns when QUIC has accepted it (flow control may
    /// make this wait: that is the backpressure).
    pub async fn send(&mut self, frame: &Frame) -> Result<(), MeshError> {
        self.send_many(std::slice::from_ref(frame)).await
    }

    /// Sends several frames in one write.
    pub async fn send_many(&mut self, frames: &[Frame]) -> Result<(), MeshError> {
        self.buf.clear();
        // Most writes on a stream are alike: start at the last one's size
        // (bounded, so one huge batch does not make every buffer huge).
        self.buf.reserve(self.last_len.min(4 * READ_CHUNK_BYTES));
        for f in frames {
            frame::encode(f, self.max_frame_bytes, &mut self.buf).map_err(|e| {
                MeshError::FrameTooLarge {
                    peer: self.peer.clone(),
                    error: e,
                }
            })?;
        }
        self.write_buf().await?;
        MeshMetrics::bump(&self.metrics.frames_sent, frames.len() as u64);
        Ok(())
    }

    /// Writes bytes as they are, unframed. Only for tests that play a peer
    /// sending garbage.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), MeshError> {
        self.buf.clear();
        self.buf.extend_from_slice(bytes);
        self.write_buf().await
    }

    /// Hands the encoded frames to quinn without copying them: quinn keeps
    /// the buffer until the peer acknowledges it.
    async fn write_buf(&mut self) -> Result<(), MeshError> {
        let len = self.buf.len();
        self.last_len = len;
        let bytes = bytes::Bytes::from(std::mem::take(&mut self.buf));
        self.send
            .write_chunk(bytes)
            .await
            .map_err(|e| MeshError::Stream {
                peer: self.peer.clone(),
                reason: e.to_string(),
            })?;
        MeshMetrics::bump(&self.metrics.bytes_sent, len as u64);
        Ok(())
    }

    /// Ends the stream cleanly: the receiver sees `Ok(None)` after the last
    /// frame.
    pub fn finish(mut self) -> Result<(), MeshError> {
        self.send.finish().map_err(|e| MeshError::Stream {
            peer: self.peer.clone(),
            reason: e.to_string(),
        })
    }

    pub fn peer(&self) -> &PeerLabel {
        &self.peer
    }

    /// Ends the stream and waits until the peer has read all of it (or
    /// stopped it), so the data is delivered before the connection may
    /// close.
    pub async fn finish_and_wait(mut self) -> Result<(), MeshError> {
        let stream_error = |reason: String| MeshError::Stream {
            peer: self.peer.clone(),
            reason,
        };
        self.send
            .finish()
            .map_err(|e| stream_error(e.to_string()))?;
        match self.send.stopped().await {
            Ok(None) => Ok(()),
            Ok(Some(code)) => Err(stream_error(format!("stopped by the peer ({code})"))),
            Err(e) => Err(stream_error(e.to_string())),
        }
    }
}

/// The receiving half of a framed stream.
pub struct FrameReceiver {
    recv: quinn::RecvStream,
    buf: FrameBuf,
    conn: quinn::Connection,
    peer: PeerLabel,
    metrics: Arc<MeshMetrics>,
}

impl FrameReceiver {
    pub(crate) fn new(
        recv: quinn::RecvStream,
        max_frame_bytes: usize,
        conn: quinn::Connection,
        peer: PeerLabel,
        metrics: Arc<MeshMetrics>,
    ) -> FrameReceiver {
        FrameReceiver {
            recv,
            buf: FrameBuf::new(max_frame_bytes),
            conn,
            peer,
            metrics,
        }
    }

    /// The next frame; `Ok(None)` when the sender finished the stream
    /// between frames. A malformed or oversized frame, or a stream that ends
    /// mid-frame, closes the connection (and only it), is counted in
    /// `malformed_frames`, logged with the peer, and returned as
    /// [`MeshError::Malformed`].
    pub async fn recv(&mut self) -> Result<Option<Frame>, MeshError> {
        loop {
            match self.buf.next_frame() {
                Ok(Some(f)) => {
                    MeshMetrics::bump(&self.metrics.frames_received, 1);
                    return Ok(Some(f));
                }
                Ok(None) => {}
                Err(e) => return Err(self.malformed(e.to_string())),
            }
            match self.recv.read_chunk(READ_CHUNK_BYTES, true).await {
                Ok(Some(chunk)) => {
                    MeshMetrics::bump(&self.metrics.bytes_received, chunk.bytes.len() as u64);
                    self.buf.extend(&chunk.bytes);
                }
                Ok(None) if self.buf.pending() == 0 => return Ok(None),
                Ok(None) => {
                    let n = self.buf.pending();
                    return Err(self
                        .malformed(format!("stream ended in the middle of a frame ({n} bytes)")));
                }
                Err(e) => {
                    return Err(MeshError::Stream {
                        peer: self.peer.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
    }

    fn malformed(&self, reason: String) -> MeshError {
        MeshMetrics::bump(&self.metrics.malformed_frames, 1);
        tracing::warn!(
            peer = %self.peer.name,
            addr = %self.peer.addr,
            "closing the connection to {}: {reason}",
            self.peer
        );
        self.conn.close(ERR_PROTOCOL, reason.as_bytes());
        MeshError::Malformed {
            peer: self.peer.clone(),
            reason,
        }
    }

    pub fn peer(&self) -> &PeerLabel {
        &self.peer
    }
}
