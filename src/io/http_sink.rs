//! `http` sink: JSON lines `POST`ed to `url` in batches of at most
//! `batch_records` records and `batch_bytes` bytes, sent when full or when
//! the oldest record has waited `batch_timeout`.
//!
//! A small HTTP/1.1 client on a plain `std` TCP stream (http:// only; no
//! TLS), keeping its connection alive between requests. A batch answered
//! 2xx is delivered. One that fails with a connection error, a timeout,
//! 408, 429 or 5xx is sent again after a wait that doubles from
//! `retry_initial_backoff` to `retry_max_backoff`, at most `max_retries`
//! times; then, or at once on another status (the peer refused the
//! request itself), the batch is given up: logged, and its records counted
//! in `component_errors_total`. The channel to this thread is bounded, so
//! while a batch is being retried the pipeline slows down instead of
//! buffering without bound. Delivery is at least once: a batch whose answer
//! was lost is sent again.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::backoff::Backoff;
use super::writer::WriterMsg;
use crate::config::{HttpUrl, NetSinkSettings};
use crate::exec::metrics::OpMetrics;
use crate::io::ingest::IngestControl;

/// Longest answer head read from the peer; an answer's body is read and
/// discarded up to this many bytes too.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Starts the writer thread; it ends on `Shutdown` or when every sender is
/// gone, after sending what it holds.
pub(crate) fn spawn_http_sink(
    component: &str,
    settings: Arc<NetSinkSettings>,
    rx: flume::Receiver<WriterMsg>,
    metrics: Arc<OpMetrics>,
    control: IngestControl,
) -> std::io::Result<JoinHandle<()>> {
    let url = settings
        .url
        .clone()
        .ok_or_else(|| std::io::Error::other("an http sink has a url (checked by the config)"))?;
    let mut sink = HttpSink {
        component: component.to_string(),
        backoff: Backoff::new(settings.retry_initial_backoff, settings.retry_max_backoff),
        settings,
        url,
        conn: None,
        metrics,
        control,
        body: Vec::new(),
        records: 0,
        oldest: None,
    };
    std::thread::Builder::new()
        .name(format!("eddy-write-{component}"))
        .spawn(move || sink.run(rx))
}

struct HttpSink {
    component: String,
    settings: Arc<NetSinkSettings>,
    url: HttpUrl,
    conn: Option<BufReader<TcpStream>>,
    backoff: Backoff,
    metrics: Arc<OpMetrics>,
    /// While eddy stops, a failed batch is not retried: a dead peer must
    /// not hold the stop for `max_retries` backoffs per queued batch.
    control: IngestControl,
    /// The batch being filled.
    body: Vec<u8>,
    records: u64,
    /// When its first record arrived.
    oldest: Option<Instant>,
}

/// Why a request failed, and whether to try it again.
struct Failure {
    message: String,
    retry: bool,
}

impl HttpSink {
    fn run(&mut self, rx: flume::Receiver<WriterMsg>) {
        loop {
            let msg = match self.oldest {
                None => rx.recv().map_err(|_| flume::RecvTimeoutError::Disconnected),
                Some(t) => rx.recv_deadline(t + self.settings.batch_timeout),
            };
            match msg {
                Ok(WriterMsg::Data(bytes)) => self.add(&bytes),
                Ok(WriterMsg::Seal(_) | WriterMsg::Ended | WriterMsg::Commit(_)) => {}
                Err(flume::RecvTimeoutError::Timeout) => self.send_batch(),
                Ok(WriterMsg::Shutdown) | Err(flume::RecvTimeoutError::Disconnected) => break,
            }
        }
        self.send_batch();
    }

    /// Adds lines to the batch, sending each batch that fills up.
    fn add(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room_records = (self.settings.batch_records - self.records) as usize;
            let room_bytes = (self.settings.batch_bytes as usize).saturating_sub(self.body.len());
            // Whole lines that fit both limits (at least one line, so a
            // line larger than `batch_bytes` still goes, alone).
            let mut end = 0;
            let mut n = 0u64;
            for nl in memchr::memchr_iter(b'\n', bytes) {
                if n as usize == room_records
                    || (nl + 1 > room_bytes && !(n == 0 && self.records == 0))
                {
                    break;
                }
                end = nl + 1;
                n += 1;
            }
            if n == 0 && self.records == 0 {
                // No newline: not produced by the encoder; keep as is.
                end = bytes.len();
            }
            if end > 0 {
                self.body.extend_from_slice(&bytes[..end]);
                self.records += n;
                self.oldest.get_or_insert_with(Instant::now);
            }
            bytes = &bytes[end..];
            if !bytes.is_empty() || self.records >= self.settings.batch_records {
                self.send_batch();
            }
        }
    }

    fn send_batch(&mut self) {
        self.oldest = None;
        if self.body.is_empty() {
            return;
        }
        let body = std::mem::take(&mut self.body);
        let records = std::mem::take(&mut self.records);
        let mut failures = 0u64;
        loop {
            match self.post(&body) {
                Ok(()) => {
                    self.backoff.reset();
                    OpMetrics::add(&self.metrics.records_out, records);
                    break;
                }
                Err(f)
                    if !f.retry
                        || failures >= self.settings.max_retries
                        || self.control.should_close() =>
                {
                    OpMetrics::add(&self.metrics.errors, records);
                    let why = if !f.retry {
                        "not retried: the peer refused the request itself".to_string()
                    } else if failures >= self.settings.max_retries {
                        format!("gave up after {} attempts (max_retries)", failures + 1)
                    } else {
                        "not retried because eddy is stopping".to_string()
                    };
                    tracing::error!(sink = %self.component, url = %self.url_text(), "cannot deliver a batch of {records} records: {}; {why}", f.message);
                    break;
                }
                Err(f) => {
                    failures += 1;
                    let wait = self.backoff.next_wait();
                    tracing::warn!(sink = %self.component, url = %self.url_text(), "{}; retry {failures} of {} in {wait:?}", f.message, self.settings.max_retries);
                    std::thread::sleep(wait);
                }
            }
        }
        // Reuse the allocation for the next batch.
        self.body = body;
        self.body.clear();
    }

    fn url_text(&self) -> String {
        format!("http://{}{}", self.url.authority(), self.url.target)
    }

    /// One request. A kept-alive connection that turns out to be closed is
    /// replaced once without counting as a failure.
    fn post(&mut self, body: &[u8]) -> Result<(), Failure> {
        let reused = self.conn.is_some();
        match self.try_post(body) {
            Err(f) if reused && f.retry && f.message.starts_with("connection:") => {
                self.conn = None;
                self.try_post(body)
            }
            other => other,
        }
    }

    fn try_post(&mut self, body: &[u8]) -> Result<(), Failure> {
        let io = |e: std::io::Error| Failure {
            message: format!("connection: {e}"),
            retry: true,
        };
        if self.conn.is_none() {
            self.conn = Some(BufReader::new(self.connect().map_err(|e| Failure {
                message: format!("cannot connect: {e}"),
                retry: true,
            })?));
        }
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nUser-Agent: eddy/{}\r\n",
            self.url.target,
            self.url.authority(),
            body.len(),
            env!("CARGO_PKG_VERSION")
        );
        for (name, value) in &self.settings.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let result = (|| {
            let conn = self.conn.as_mut().expect("connected above");
            let stream = conn.get_mut();
            stream.write_all(head.as_bytes()).map_err(io)?;
            stream.write_all(body).map_err(io)?;
            stream.flush().map_err(io)?;
            read_answer(conn).map_err(io)
        })();
        let (status, keep) = match result {
            Ok(a) => a,
            Err(f) => {
                self.conn = None;
                return Err(f);
            }
        };
        if !keep {
            self.conn = None;
        }
        match status {
            200..=299 => Ok(()),
            408 | 429 | 500..=599 => Err(Failure {
                message: format!("answered {status}"),
                retry: true,
            }),
            _ => Err(Failure {
                message: format!("answered {status}"),
                retry: false,
            }),
        }
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in (self.url.host.as_str(), self.url.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.settings.timeout) {
                Ok(s) => {
                    s.set_read_timeout(Some(self.settings.timeout))?;
                    s.set_write_timeout(Some(self.settings.timeout))?;
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the host resolved to nothing")
        }))
    }
}

/// Reads an answer: its status, and whether the connection stays usable.
/// The body is read (by `Content-Length`, chunked, or to the end) and
/// dropped.
fn read_answer(conn: &mut BufReader<TcpStream>) -> std::io::Result<(u16, bool)> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    loop {
        let mut line = String::new();
        read_line(conn, &mut line)?;
        let mut parts = line.split_whitespace();
        let version = parts.next().unwrap_or_default();
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("malformed status line"))?;
        if !version.starts_with("HTTP/1.") {
            return Err(bad("not an HTTP/1 answer"));
        }
        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut keep = version == "HTTP/1.1";
        let mut head_bytes = line.len();
        loop {
            let mut h = String::new();
            read_line(conn, &mut h)?;
            head_bytes += h.len();
            if head_bytes > MAX_ANSWER_BYTES {
                return Err(bad("the answer's head is too long"));
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let Some((name, value)) = h.split_once(':') else {
                return Err(bad("malformed header line"));
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => {
                    length = Some(value.parse().map_err(|_| bad("bad Content-Length"))?)
                }
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                "connection" => {
                    let v = value.to_ascii_lowercase();
                    if v.contains("close") {
                        keep = false;
                    } else if v.contains("keep-alive") {
                        keep = true;
                    }
                }
                _ => {}
            }
        }
        // 1xx answers are followed by the real one.
        if (100..200).contains(&status) {
            continue;
        }
        if status == 204 || status == 304 {
            return Ok((status, keep));
        }
        if chunked {
            skip_chunked(conn)?;
        } else if let Some(n) = length {
            if n > MAX_ANSWER_BYTES {
                return Ok((status, false));
            }
            std::io::copy(&mut conn.by_ref().take(n as u64), &mut std::io::sink())?;
        } else {
            // Delimited by the end of the connection.
            std::io::copy(
                &mut conn.by_ref().take(MAX_ANSWER_BYTES as u64),
                &mut std::io::sink(),
            )?;
            keep = false;
        }
        return Ok((status, keep));
    }
}

fn read_line(conn: &mut BufReader<TcpStream>, line: &mut String) -> std::io::Result<()> {
    let n = conn.by_ref().take(8 << 10).read_line(line)?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the peer closed the connection before answering",
        ));
    }
    Ok(())
}

fn skip_chunked(conn: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    let mut total = 0usize;
    loop {
        let mut size = String::new();
        read_line(conn, &mut size)?;
        let hex = size.trim().split(';').next().unwrap_or_default();
        let n = usize::from_str_radix(hex, 16)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size"))?;
        total += n;
        if total > MAX_ANSWER_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the answer's body is too long",
            ));
        }
        if n == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut t = String::new();
                read_line(conn, &mut t)?;
                if t.trim().is_empty() {
                    return Ok(());
                }
            }
        }
        std::io::copy(&mut conn.by_ref().take(n as u64 + 2), &mut std::io::sink())?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A peer that writes `answers` as one stream; the client side reads.
    fn answers(raw: &'static [u8]) -> BufReader<TcpStream> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(raw).unwrap();
        });
        let c = TcpStream::connect(a).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        BufReader::new(c)
    }

    #[test]
    fn answers_are_read_whole_whatever_their_framing() {
        let mut c = answers(
            b"HTTP/1.1 100 Continue\r\n\r\n\
              HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nabcd\r\n0\r\nTrailer: 1\r\n\r\n\
              HTTP/1.1 503 Busy\r\nContent-Length: 3\r\nRetry-After: 1\r\n\r\nno!\
              HTTP/1.0 204 No Content\r\n\r\n\
              HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nuntil the end",
        );
        assert_eq!(read_answer(&mut c).unwrap(), (200, true));
        assert_eq!(read_answer(&mut c).unwrap(), (503, true));
        assert_eq!(read_answer(&mut c).unwrap(), (204, false));
        assert_eq!(read_answer(&mut c).unwrap(), (500, false));
        assert!(read_answer(&mut c).is_err(), "the peer closed");
    }

    #[test]
    fn a_malformed_answer_is_an_error() {
        let mut c = answers(b"SMTP ready\r\n\r\n");
        assert!(read_answer(&mut c).is_err());
    }
}
