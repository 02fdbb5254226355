//! Framed streams between real QUIC endpoints on loopback: frames sent both
//! ways over one stream per (sender worker, receiver worker) pair arrive
//! complete and in order; a state stream carries chunks apart from data; a
//! peer sending a malformed frame loses its connection (named in the log
//! and counted), and other peers are unaffected.

mod mesh_common;

use std::collections::BTreeMap;
use std::time::Duration;

use eddy::daemon::cluster::mesh::{DataBatch, Frame, MeshError, Peer, StateChunk, StreamKind};
use mesh_common::*;

const BATCHES: u64 = 300;
const WORKERS: u16 = 2;

fn batch(from: &str, s: u16, r: u16, seq: u64) -> Frame {
    Frame::Data(DataBatch {
        seq,
        records: 32,
        // Recognisable contents, a little over 1 KiB, different per frame.
        bytes: format!("{from}:{s}->{r}:{seq}:").repeat(64).into_bytes(),
    })
}

/// Sends `BATCHES` frames on each worker pair's stream to `peer`.
async fn send_all(peer: Peer, from: &'static str) {
    let mut tasks = Vec::new();
    for s in 0..WORKERS {
        for r in 0..WORKERS {
            let peer = peer.clone();
            tasks.push(smol::spawn(async move {
                let mut tx = peer.open_data_stream(s, r).await.expect("open data stream");
                for seq in 0..BATCHES {
                    tx.send(&batch(from, s, r, seq)).await.expect("send");
                }
                tx.finish().expect("finish");
            }));
        }
    }
    for t in tasks {
        t.await;
    }
}

/// Accepts the peer's `WORKERS²` data streams and checks every frame is
/// there, in order.
async fn receive_all(peer: Peer, from: &'static str) -> BTreeMap<(u16, u16), u64> {
    let mut tasks = Vec::new();
    for _ in 0..WORKERS * WORKERS {
        let (kind, mut rx) = peer.accept_stream().await.expect("accept stream");
        let StreamKind::Data {
            sender_worker: s,
            receiver_worker: r,
        } = kind
        else {
            panic!("expected a data stream, got {kind:?}");
        };
        tasks.push(smol::spawn(async move {
            let mut next = 0;
            while let Some(frame) = rx.recv().await.expect("recv") {
                assert_eq!(
                    frame,
                    batch(from, s, r, next),
                    "stream {s}->{r} out of order"
                );
                next += 1;
            }
            ((s, r), next)
        }));
    }
    let mut got = BTreeMap::new();
    for t in tasks {
        let (k, n) = t.await;
        got.insert(k, n);
    }
    got
}

#[test]
fn frames_flow_both_ways_in_order_on_per_worker_pair_streams() {
    logs();
    smol::block_on(async {
        let ca = TestCa::new("blue");
        let a = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
        let b = bind(&ca.identity("node-b"), [127, 0, 0, 2]);
        let a_to_b = a.connect(b.local_addr()).await.expect("connect");
        let b_to_a = b.accept().await.expect("accept");

        let sending = (
            smol::spawn(send_all(a_to_b.clone(), "a")),
            smol::spawn(send_all(b_to_a.clone(), "b")),
        );
        let (at_b, at_a) = smol::future::zip(
            receive_all(b_to_a.clone(), "a"),
            receive_all(a_to_b.clone(), "b"),
        )
        .await;
        sending.0.await;
        sending.1.await;
        let expected: BTreeMap<(u16, u16), u64> = (0..WORKERS)
            .flat_map(|s| (0..WORKERS).map(move |r| ((s, r), BATCHES)))
            .collect();
        assert_eq!(at_b, expected);
        assert_eq!(at_a, expected);

        // A state transfer on its own stream.
        let mut tx = a_to_b
            .open_stream(StreamKind::State { transfer_id: 7 })
            .await
            .expect("state");
        for i in 0..3u32 {
            tx.send(&Frame::StateChunk(StateChunk {
                bin: 5,
                index: i,
                last: i == 2,
                bytes: vec![i as u8; 100_000],
            }))
            .await
            .expect("chunk");
        }
        tx.finish().expect("finish");
        let (kind, mut rx) = b_to_a.accept_stream().await.expect("accept");
        assert_eq!(kind, StreamKind::State { transfer_id: 7 });
        let mut chunks = 0;
        while let Some(Frame::StateChunk(c)) = rx.recv().await.expect("recv") {
            assert_eq!((c.bin, c.index, c.bytes.len()), (5, chunks, 100_000));
            chunks += 1;
        }
        assert_eq!(chunks, 3);

        // The control stream of the handshake stays usable.
        let (mut ctl_a, _) = a_to_b.take_control().expect("control");
        let (_, mut ctl_b) = b_to_a.take_control().expect("control");
        ctl_a
            .send(&Frame::Membership(vec![1, 2, 3]))
            .await
            .expect("control send");
        assert_eq!(
            ctl_b.recv().await.expect("recv"),
            Some(Frame::Membership(vec![1, 2, 3]))
        );

        let m = b.metrics().snapshot();
        assert!(m.frames_received >= BATCHES * 4, "{m:?}");
        assert_eq!(m.malformed_frames, 0);
    });
}

#[test]
fn a_malformed_frame_closes_only_that_peers_connection() {
    logs();
    smol::block_on(async {
        let ca = TestCa::new("blue");
        let b = bind(&ca.identity("node-b"), [127, 0, 0, 2]);
        let bad = bind(&ca.identity("node-bad"), [127, 0, 0, 3]);
        let good = bind(&ca.identity("node-good"), [127, 0, 0, 4]);

        let bad_to_b = bad.connect(b.local_addr()).await.expect("connect");
        let b_from_bad = b.accept().await.expect("accept");
        let good_to_b = good.connect(b.local_addr()).await.expect("connect");
        let b_from_good = b.accept().await.expect("accept");

        // A length prefix far over the limit: refused before any buffering.
        let mut tx = bad_to_b.open_data_stream(0, 0).await.expect("open");
        tx.send_raw(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
            .await
            .expect("raw");
        let (_, mut rx) = b_from_bad.accept_stream().await.expect("stream");
        let err = rx.recv().await.expect_err("malformed");
        assert!(matches!(err, MeshError::Malformed { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("node-bad") && text.contains(&bad.local_addr().to_string()),
            "{text}"
        );
        assert!(text.contains("exceeds the limit"), "{text}");
        wait_for_log(
            &[
                "closing the connection to node-bad",
                &bad.local_addr().to_string(),
                "exceeds the limit",
            ],
            Duration::from_secs(5),
        );
        assert_eq!(b.metrics().snapshot().malformed_frames, 1);
        // The bad peer is told why.
        let why = smol::future::or(bad_to_b.closed(), async {
            smol::Timer::after(Duration::from_secs(5)).await;
            "not closed".to_string()
        })
        .await;
        assert!(why.contains("exceeds the limit"), "{why}");

        // Garbage inside a well-sized frame on another connection counts too.
        let bad2 = bad.connect(b.local_addr()).await.expect("reconnect");
        let b_from_bad2 = b.accept().await.expect("accept");
        let mut tx = bad2.open_data_stream(0, 1).await.expect("open");
        tx.send_raw(&[0, 0, 0, 3, 0xee, 0xee, 0xee])
            .await
            .expect("raw");
        let (_, mut rx) = b_from_bad2.accept_stream().await.expect("stream");
        let err = rx.recv().await.expect_err("malformed");
        assert!(err.to_string().contains("malformed frame"), "{err}");
        assert_eq!(b.metrics().snapshot().malformed_frames, 2);

        // The good peer is unaffected.
        let mut tx = good_to_b.open_data_stream(1, 1).await.expect("open");
        tx.send(&batch("g", 1, 1, 0)).await.expect("send");
        let (_, mut rx) = b_from_good.accept_stream().await.expect("stream");
        assert_eq!(rx.recv().await.expect("recv"), Some(batch("g", 1, 1, 0)));
        assert!(!b_from_good.is_closed());
    });
}
