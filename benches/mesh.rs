//! Record batches over the mesh: one QUIC stream on loopback (eddy's framed
//! streams, mutual TLS, encryption) against a plain TCP stream carrying the
//! same length-prefixed postcard frames, measured side by side and
//! alternated in one run; the figure that matters is the ratio.
//!
//! Then the added latency of one remote hop at half load: batches paced at
//! half the measured QUIC maximum for a few seconds, each carrying its send
//! time (same host clock), one-way latency p50/p99/max, TCP alongside.
//!
//! `cargo bench --bench mesh -- [--quick] [--load F]`: `--load` paces the
//! latency test at F times the QUIC maximum instead of half.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use eddy::daemon::cluster::mesh::{
    DataBatch, EndpointOptions, Frame, MeshEndpoint, NodeIdentity, decode, encode_to_vec,
    generate_ca, issue_node,
};

const RECORDS: u32 = 1024;
const RECORD_BYTES: usize = 32;
const MAX_FRAME: usize = 1 << 20;
/// The datagram size eddy's endpoints reach on loopback (MTU discovery's
/// bound in `src/mesh/endpoint.rs`), less QUIC's header and tag.
const MTU: u16 = 6_450;

fn frame(seq: u64) -> Frame {
    Frame::Data(DataBatch {
        seq,
        records: RECORDS,
        bytes: vec![(seq % 251) as u8; RECORDS as usize * RECORD_BYTES],
    })
}

fn payload_bytes(frames: u64) -> f64 {
    (frames * u64::from(RECORDS) * RECORD_BYTES as u64) as f64
}

/// Where the tasks that write and read the stream run.
#[derive(Clone, Copy, PartialEq)]
enum Tasks {
    /// smol's global executor, a thread apart from QUIC's.
    Apart,
    /// Each on its endpoint's QUIC thread (`MeshEndpoint::spawn`).
    OnQuicThread,
}

/// MB/s of record payload through one QUIC stream.
fn quic(frames: u64, a: &MeshEndpoint, b: &MeshEndpoint, tasks: Tasks) -> f64 {
    smol::block_on(async {
        let to_b = a.connect(b.local_addr()).await.expect("connect");
        let from_a = b.accept().await.expect("accept");
        let start = Instant::now();
        let send = async move {
            let mut tx = to_b.open_data_stream(0, 0).await.expect("open");
            for seq in 0..frames {
                tx.send(&frame(seq)).await.expect("send");
            }
            tx.finish().expect("finish");
            to_b
        };
        let receive = async move {
            let (_, mut rx) = from_a.accept_stream().await.expect("accept stream");
            let mut n = 0;
            while let Some(f) = rx.recv().await.expect("recv") {
                if let Frame::Data(d) = f {
                    assert_eq!(d.seq, n);
                    n += 1;
                }
            }
            assert_eq!(n, frames);
            from_a
        };
        let (sender, receiver) = match tasks {
            Tasks::Apart => (smol::spawn(send), smol::spawn(receive)),
            Tasks::OnQuicThread => (a.spawn(send), b.spawn(receive)),
        };
        let _from_a = receiver.await;
        let secs = start.elapsed().as_secs_f64();
        sender.await.close("done");
        payload_bytes(frames) / secs / 1e6
    })
}

/// MB/s of record payload through one TCP stream, same frames.
fn tcp(frames: u64) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        for seq in 0..frames {
            s.write_all(&encode_to_vec(&frame(seq), MAX_FRAME).expect("encode"))
                .expect("write");
        }
    });
    let (mut s, _) = listener.accept().expect("accept");
    let mut buf = Vec::with_capacity(256 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut n = 0;
    loop {
        let mut used = 0;
        while let Ok((f, len)) = decode(&buf[used..], MAX_FRAME) {
            if let Frame::Data(d) = f {
                assert_eq!(d.seq, n);
                n += 1;
            }
            used += len;
        }
        buf.drain(..used);
        let r = s.read(&mut chunk).expect("read");
        if r == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..r]);
    }
    writer.join().expect("writer");
    assert_eq!(n, frames);
    payload_bytes(frames) / start.elapsed().as_secs_f64() / 1e6
}

/// Nanoseconds since the first call: the clock both ends of a hop read.
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A batch stamped with its send time in its first 8 bytes.
fn stamped(seq: u64) -> Frame {
    let mut f = frame(seq);
    if let Frame::Data(d) = &mut f {
        d.bytes[..8].copy_from_slice(&now_ns().to_le_bytes());
    }
    f
}

/// One-way latency of a received batch, in µs.
fn latency_us(d: &DataBatch) -> f64 {
    let mut sent = [0u8; 8];
    sent.copy_from_slice(&d.bytes[..8]);
    now_ns().saturating_sub(u64::from_le_bytes(sent)) as f64 / 1e3
}

/// Sleeps until `deadline`: batches leave on a fixed schedule, so a late
/// one is followed by the next at once (open loop) rather than the load
/// dropping.
fn pace(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// Latencies (µs) of `frames` batches sent every `every` through QUIC.
fn quic_latency(
    frames: u64,
    every: Duration,
    a: &MeshEndpoint,
    b: &MeshEndpoint,
    tasks: Tasks,
) -> Vec<f64> {
    smol::block_on(async {
        let to_b = a.connect(b.local_addr()).await.expect("connect");
        let from_a = b.accept().await.expect("accept");
        let mut tx = to_b.open_data_stream(0, 0).await.expect("open");
        // The sender is a thread of its own, so the pacing sleep blocks only
        // it; the QUIC work runs on the executor as in the throughput test.
        // On the QUIC thread, as eddy's exchange does it: the thread (a
        // worker) hands its batches to a task through a bounded queue.
        let sender = match tasks {
            Tasks::Apart => std::thread::spawn(move || {
                let start = Instant::now();
                smol::block_on(async {
                    for seq in 0..frames {
                        pace(start + every * seq as u32);
                        tx.send(&stamped(seq)).await.expect("send");
                    }
                    tx.finish().expect("finish");
                });
                to_b
            }),
            Tasks::OnQuicThread => {
                let (queue, batches) = flume::bounded::<Frame>(64);
                let task = a.spawn(async move {
                    while let Ok(f) = batches.recv_async().await {
                        tx.send(&f).await.expect("send");
                    }
                    tx.finish().expect("finish");
                });
                std::thread::spawn(move || {
                    let start = Instant::now();
                    for seq in 0..frames {
                        pace(start + every * seq as u32);
                        queue.send(stamped(seq)).expect("queue");
                    }
                    drop(queue);
                    smol::block_on(task);
                    to_b
                })
            }
        };
        let receive = async move {
            let (_, mut rx) = from_a.accept_stream().await.expect("accept stream");
            let mut lat = Vec::with_capacity(frames as usize);
            while let Some(f) = rx.recv().await.expect("recv") {
                if let Frame::Data(d) = f {
                    lat.push(latency_us(&d));
                }
            }
            (from_a, lat)
        };
        let (_from_a, lat) = match tasks {
            Tasks::Apart => receive.await,
            Tasks::OnQuicThread => b.spawn(receive).await,
        };
        assert_eq!(lat.len() as u64, frames);
        sender.join().expect("sender").close("done");
        lat
    })
}

/// Latencies (µs) of the same paced batches through TCP.
fn tcp_latency(frames: u64, every: Duration) -> Vec<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let writer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let start = Instant::now();
        for seq in 0..frames {
            pace(start + every * seq as u32);
            s.write_all(&encode_to_vec(&stamped(seq), MAX_FRAME).expect("encode"))
                .expect("write");
        }
    });
    let (mut s, _) = listener.accept().expect("accept");
    let mut buf = Vec::with_capacity(256 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut lat = Vec::with_capacity(frames as usize);
    loop {
        let mut used = 0;
        while let Ok((f, len)) = decode(&buf[used..], MAX_FRAME) {
            if let Frame::Data(d) = f {
                lat.push(latency_us(&d));
            }
            used += len;
        }
        buf.drain(..used);
        let r = s.read(&mut chunk).expect("read");
        if r == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..r]);
    }
    writer.join().expect("writer");
    assert_eq!(lat.len() as u64, frames);
    lat
}

/// `p50 / p99 / max` in µs.
fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// Single-core throughput (MB/s of payload) of QUIC packet protection with
/// `suite`, as quinn applies it: seal `packet`-byte payloads in place, then
/// open them again. A byte crossing a hop is sealed once and opened once,
/// work plain TCP does not do at all.
fn packet_crypto(suite: rustls::SupportedCipherSuite, packet: usize, secs: f64) -> (f64, f64) {
    use rustls::Side;
    use rustls::quic::{Keys, Version};
    let quic = suite
        .tls13()
        .and_then(|s| s.quic_suite())
        .expect("a TLS 1.3 suite with QUIC keys");
    let keys = Keys::initial(
        Version::V1,
        quic.suite,
        quic.quic,
        b"eddybench",
        Side::Client,
    );
    let peer = Keys::initial(
        Version::V1,
        quic.suite,
        quic.quic,
        b"eddybench",
        Side::Server,
    );
    let header = [0x40u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    let mut payload = vec![7u8; packet];
    let mut sealed = Vec::with_capacity(packet + 16);
    let (mut n, start) = (0u64, Instant::now());
    while start.elapsed().as_secs_f64() < secs {
        for _ in 0..64 {
            keys.local
                .packet
                .encrypt_in_place(n, &header, &mut payload)
                .expect("seal");
            n += 1;
        }
    }
    let seal = (n as usize * packet) as f64 / start.elapsed().as_secs_f64() / 1e6;
    // Open needs what was really sealed: seal one packet per number.
    let (mut m, start) = (0u64, Instant::now());
    while start.elapsed().as_secs_f64() < secs {
        sealed.clear();
        sealed.extend_from_slice(&payload);
        let tag = keys
            .local
            .packet
            .encrypt_in_place(m, &header, &mut sealed)
            .expect("seal");
        sealed.extend_from_slice(tag.as_ref());
        peer.remote
            .packet
            .decrypt_in_place(m, &header, &mut sealed)
            .expect("open");
        m += 1;
    }
    let both = (m as usize * packet) as f64 / start.elapsed().as_secs_f64() / 1e6;
    (seal, both)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (runs, frames) = if quick { (3, 256) } else { (5, 2048) };
    let args: Vec<String> = std::env::args().collect();
    let load: f64 = args
        .iter()
        .position(|a| a == "--load")
        .and_then(|i| args.get(i + 1))
        .map_or(0.5, |f| {
            f.parse().expect("--load takes a fraction, e.g. 0.25")
        });
    let ca = generate_ca("bench", 1).expect("ca");
    let id = |n: &str| {
        NodeIdentity::from_pem(
            &ca.cert_pem,
            &issue_node(&ca, "bench", n, 1).expect("node"),
            None,
        )
        .expect("id")
    };
    let (ia, ib) = (id("a"), id("b"));
    let opts = EndpointOptions {
        max_frame_bytes: MAX_FRAME,
        ..EndpointOptions::default()
    };
    let (a, b) = smol::block_on(async {
        (
            MeshEndpoint::bind(&ia, "127.0.0.1:0".parse().expect("addr"), opts.clone())
                .expect("bind"),
            MeshEndpoint::bind(&ib, "127.0.0.2:0".parse().expect("addr"), opts).expect("bind"),
        )
    });
    let mut q = Vec::new();
    let mut qc = Vec::new();
    let mut t = Vec::new();
    for run in 0..runs {
        q.push(quic(frames, &a, &b, Tasks::OnQuicThread));
        qc.push(quic(frames, &a, &b, Tasks::Apart));
        t.push(tcp(frames));
        println!(
            "run {run}: QUIC {:.1} MB/s (stream tasks apart from QUIC's threads: {:.1}), TCP {:.1} MB/s",
            q[run], qc[run], t[run]
        );
    }
    // `q` is what eddy's exchange does: its stream tasks run on the QUIC
    // threads. `qc` is how they ran before, for comparison.
    let (qm, qcm, tm) = (median(q), median(qc), median(t));
    // What encryption alone allows. QUIC seals and opens every byte, work
    // TCP does not do; both also copy every byte into and out of the kernel.
    // TCP's whole path costs at most `cores / TCP rate` of CPU a byte (both
    // ends busy on every core), so, when CPU is what limits, QUIC/TCP is at
    // most that cost over that cost plus sealing and opening.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let tcp_ns = cores * 1e3 / tm;
    for (name, suite) in [
        (
            "AES-128-GCM (eddy's first choice)",
            rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
        ),
        (
            "AES-256-GCM",
            rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
        ),
    ] {
        let secs = if quick { 0.2 } else { 0.5 };
        let (seal, both) = packet_crypto(suite, usize::from(MTU), secs);
        println!(
            "{name} on one core, {MTU}-byte packets: seal {seal:.0} MB/s, seal+open {both:.0} MB/s \
             ({:.2} ns/byte); TCP's path costs at most {tcp_ns:.2} ns/byte on {cores} cores: \
             QUIC/TCP <= {:.2} while CPU-bound",
            1e3 / both,
            tcp_ns / (tcp_ns + 1e3 / both)
        );
    }
    let recs = |mbs: f64| mbs * 1e6 / RECORD_BYTES as f64 / 1e6;
    println!(
        "record batches ({RECORDS} x {RECORD_BYTES} B per frame, {frames} frames, median of {runs}): \
         QUIC {qm:.1} MB/s ({:.2} M records/s), TCP {tm:.1} MB/s ({:.2} M records/s), QUIC/TCP = {:.2}",
        recs(qm),
        recs(tm),
        qm / tm
    );
    println!(
        "  with the stream tasks apart from QUIC's threads: QUIC {qcm:.1} MB/s ({:.2} M records/s), QUIC/TCP = {:.2}",
        recs(qcm),
        qcm / tm
    );

    // Half load (or `--load`): of the QUIC maximum just measured, for a
    // few seconds.
    let secs = if quick { 1.0 } else { 3.0 };
    let rate = qm * load;
    let frame_mb = payload_bytes(1) / 1e6;
    let every = Duration::from_secs_f64(frame_mb / rate);
    let n = (secs / every.as_secs_f64()).ceil() as u64;
    let ql = quic_latency(n, every, &a, &b, Tasks::OnQuicThread);
    let qcl = quic_latency(n, every, &a, &b, Tasks::Apart);
    let tl = tcp_latency(n, every);
    println!(
        "one hop at {load} of that load ({rate:.1} MB/s, a batch every {:.0} µs, {n} batches, {secs} s): \
         QUIC {}; stream tasks apart from QUIC's threads {}; TCP {}",
        every.as_secs_f64() * 1e6,
        percentiles(ql),
        percentiles(qcl),
        percentiles(tl)
    );
}
