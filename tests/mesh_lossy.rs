//! The mesh over a lossy, slow link: real QUIC endpoints talk through a
//! UDP relay that drops 10% of the datagrams each way and delays the rest
//! by 50 ms (the issue's `netem loss 10% delay 50ms`; this kernel has no
//! netem, so the relay does in user space what netem would do in the
//! kernel). Every frame still arrives, in order per stream.

mod common;
mod mesh_common;

use std::collections::{BTreeMap, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eddy::daemon::cluster::mesh::{DataBatch, Frame, StreamKind};
use mesh_common::*;

const LOSS: f64 = 0.10;
const DELAY: Duration = Duration::from_millis(50);
const STREAMS: u16 = 4;
const BATCHES: u64 = 150;

/// A datagram waiting out its delay.
struct Delayed {
    at: Instant,
    via: Arc<UdpSocket>,
    to: SocketAddr,
    bytes: Vec<u8>,
}

/// A UDP relay between one client and `target` that loses and delays
/// datagrams in both directions.
struct LossyRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl LossyRelay {
    fn start(target: SocketAddr, seed: u64) -> LossyRelay {
        let front = Arc::new(UdpSocket::bind("127.0.0.5:0").unwrap());
        let back = Arc::new(UdpSocket::bind("127.0.0.5:0").unwrap());
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        }
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU64::new(0));
        let queue = Arc::new((Mutex::new(VecDeque::<Delayed>::new()), Condvar::new()));
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let rng = Arc::new(Mutex::new(common::Rng::new(seed)));
        let mut threads = Vec::new();
        // One reader per side: drop or queue with the delay. The delay is
        // constant, so the queue stays in delivery order.
        for from_client in [true, false] {
            let (inbound, outbound) = if from_client {
                (front.clone(), back.clone())
            } else {
                (back.clone(), front.clone())
            };
            let (stop, dropped, forwarded, queue, client, rng) = (
                stop.clone(),
                dropped.clone(),
                forwarded.clone(),
                queue.clone(),
                client.clone(),
                rng.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = inbound.recv_from(&mut buf) else {
                        continue;
                    };
                    let to = if from_client {
                        *client.lock().unwrap() = Some(from);
                        target
                    } else {
                        match *client.lock().unwrap() {
                            Some(c) => c,
                            None => continue,
                        }
                    };
                    let lost = rng.lock().unwrap().below(1_000_000) < (LOSS * 1e6) as u64;
                    if lost {
                        dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    forwarded.fetch_add(1, Ordering::Relaxed);
                    let (q, ready) = &*queue;
                    q.lock().unwrap().push_back(Delayed {
                        at: Instant::now() + DELAY,
                        via: outbound.clone(),
                        to,
                        bytes: buf[..n].to_vec(),
                    });
                    ready.notify_one();
                }
            }));
        }
        let stop2 = stop.clone();
        threads.push(std::thread::spawn(move || {
            let (q, ready) = &*queue;
            let mut q = q.lock().unwrap();
            while !stop2.load(Ordering::Relaxed) {
                let now = Instant::now();
                match q.front() {
                    Some(d) if d.at <= now => {
                        let d = q.pop_front().unwrap();
                        drop(q);
                        let _ = d.via.send_to(&d.bytes, d.to);
                        q = queue.0.lock().unwrap();
                    }
                    Some(d) => {
                        let wait = d.at - now;
                        q = ready.wait_timeout(q, wait).unwrap().0;
                    }
                    None => q = ready.wait_timeout(q, Duration::from_millis(50)).unwrap().0,
                }
            }
        }));
        LossyRelay {
            addr,
            stop,
            dropped,
            forwarded,
            threads,
        }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn batch(stream: u16, seq: u64) -> Frame {
    Frame::Data(DataBatch {
        seq,
        records: 16,
        bytes: format!("{stream}:{seq}:").repeat(100).into_bytes(),
    })
}

#[test]
fn every_frame_arrives_in_order_over_a_link_with_loss_and_delay() {
    logs();
    let started = Instant::now();
    smol::block_on(async {
        let ca = TestCa::new("blue");
        let a = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
        let b = bind(&ca.identity("node-b"), [127, 0, 0, 2]);
        let relay = LossyRelay::start(b.local_addr(), 0x5eed);
        let (a_to_b, b_from_a) =
            smol::future::zip(async { a.connect(relay.addr).await }, b.accept()).await;
        let (a_to_b, b_from_a) = (a_to_b.expect("connect"), b_from_a.expect("accept"));

        let senders: Vec<_> = (0..STREAMS)
            .map(|s| {
                let peer = a_to_b.clone();
                smol::spawn(async move {
                    let mut tx = peer.open_data_stream(s, 0).await.expect("open");
                    for seq in 0..BATCHES {
                        tx.send(&batch(s, seq)).await.expect("send");
                    }
                    tx.finish().expect("finish");
                })
            })
            .collect();
        let mut receivers = Vec::new();
        for _ in 0..STREAMS {
            let (kind, mut rx) = b_from_a.accept_stream().await.expect("accept stream");
            let StreamKind::Data {
                sender_worker: s, ..
            } = kind
            else {
                panic!("expected a data stream, got {kind:?}");
            };
            receivers.push(smol::spawn(async move {
                let mut next = 0;
                while let Some(frame) = rx.recv().await.expect("recv") {
                    assert_eq!(frame, batch(s, next), "stream {s} out of order");
                    next += 1;
                }
                (s, next)
            }));
        }
        for s in senders {
            s.await;
        }
        let mut got = BTreeMap::new();
        for r in receivers {
            let (s, n) = r.await;
            got.insert(s, n);
        }
        let expected: BTreeMap<u16, u64> = (0..STREAMS).map(|s| (s, BATCHES)).collect();
        assert_eq!(got, expected);
        let (dropped, forwarded) = (
            relay.dropped.load(Ordering::Relaxed),
            relay.forwarded.load(Ordering::Relaxed),
        );
        let share = dropped as f64 / (dropped + forwarded) as f64;
        eprintln!(
            "{} frames over the lossy link in {:.1?}: {dropped} of {} datagrams dropped ({:.1}%)",
            STREAMS as u64 * BATCHES,
            started.elapsed(),
            dropped + forwarded,
            share * 100.0
        );
        assert!(
            dropped > 0 && (0.05..0.15).contains(&share),
            "the relay did not lose about 10%: {dropped} of {}",
            dropped + forwarded
        );
    });
}
