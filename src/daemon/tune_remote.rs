//! Profiling runs on the spare capacity of peers. The tuner places each
//! run ([`choose`]): on this node, or on the member of the mesh with the
//! most idle cores, as the members' gossiped summaries say. A run placed on
//! a peer is asked of it over the mesh ([`ask`]): one
//! [`StreamKind::Profile`] stream carries the candidate, the asker's
//! pipeline file and its sources' recorded input; the peer makes the run
//! exactly as it would make its own (`tune_profile::run`, under its own
//! `tune_cap` cap: its idlest cores, `nice`, the asker's memory ceiling,
//! output discarded) and answers on a stream of its own. Every member with
//! a mesh serves such requests ([`Server`]), one at a time: a second one
//! is answered "busy". Only members of the cluster can ask (mutual TLS).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::tune_cap::Cap;
use super::tune_profile::{Profile, Recorded};
use super::tune_store::Measured;
use crate::config::ProfileOn;
use crate::mesh::driver::MeshNode;
use crate::mesh::frame::{Frame, ProfileAsk, ProfileMeasured, ProfileMsg, StreamKind};
use crate::mesh::membership::MemberState;
use crate::mesh::streams::FrameReceiver;

/// A peer is preferred to this node only with this many more idle cores:
/// a run made here costs no transfer, and idle time measured over a
/// second is noisy.
const PEER_MARGIN_CORES: f32 = 0.5;
/// The longest run a peer makes for another.
const MAX_DURATION: Duration = Duration::from_secs(600);
/// The most recorded input a request may carry (a source records 4 MiB).
const MAX_RECORDED_BYTES: usize = 64 << 20;
/// Chunks of recorded input per frame.
const LINES_CHUNK: usize = 1 << 20;
/// Beyond the run's own length, how long an asker waits for the answer:
/// the restart that measures recovery may take 120 s, the stop 60 s.
const ANSWER_SLACK: Duration = Duration::from_secs(240);
/// How long a request or an answer may take to travel.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the tuner makes a profiling run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Place {
    Local,
    Peer { name: String, addr: SocketAddr },
}

/// A member as placement sees it: from its latest gossiped summary.
#[derive(Clone, Debug)]
pub(crate) struct Spare {
    pub(crate) name: String,
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) idle_cores: f32,
    pub(crate) local: bool,
    pub(crate) alive: bool,
}

/// Where to make the next run under `on`, given the members' spare cores.
/// `auto` takes the member with the most idle cores, this node unless a
/// peer has [`PEER_MARGIN_CORES`] more; `peers` the idlest peer.
pub(crate) fn choose(on: ProfileOn, members: &[Spare]) -> Result<Place, String> {
    let mut peers: Vec<&Spare> = members
        .iter()
        .filter(|m| !m.local && m.alive && m.addr.is_some())
        .collect();
    peers.sort_by(|a, b| {
        b.idle_cores
            .total_cmp(&a.idle_cores)
            .then_with(|| a.name.cmp(&b.name))
    });
    let best = peers.first().map(|p| Place::Peer {
        name: p.name.clone(),
        addr: p.addr.expect("filtered"),
    });
    match on {
        ProfileOn::Local => Ok(Place::Local),
        ProfileOn::Peers => best.ok_or_else(|| {
            "profile_on = \"peers\": no alive peer has published its idle cores yet".to_string()
        }),
        ProfileOn::Auto => {
            let here = members.iter().find(|m| m.local).map(|m| m.idle_cores);
            match (here, peers.first(), best) {
                (Some(here), Some(p), Some(best)) if p.idle_cores >= here + PEER_MARGIN_CORES => {
                    Ok(best)
                }
                _ => Ok(Place::Local),
            }
        }
    }
}

/// The runs this node made for peers (`GET /tune`'s `profiling.served`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ServedView {
    pub(crate) runs: u64,
    pub(crate) cpu_s: f64,
    /// Who asked last, and why that run failed if it did.
    pub(crate) last_asker: Option<String>,
    pub(crate) last_error: Option<String>,
}

static SERVED: Mutex<ServedView> = Mutex::new(ServedView {
    runs: 0,
    cpu_s: 0.0,
    last_asker: None,
    last_error: None,
});

pub(crate) fn served() -> ServedView {
    lock(&SERVED).clone()
}

type Answer = Result<ProfileMeasured, String>;

/// Requests this node sent, waiting for their answers: id to the peer
/// asked and where its answer goes.
static PENDING: Mutex<BTreeMap<u64, (String, flume::Sender<Answer>)>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes `p` on the peer `name` at `addr` and waits for what it measured.
/// `stop` (this node is stopping) and the peer going down end the wait.
pub(crate) fn ask(
    mesh: &MeshNode,
    (name, addr): (&str, SocketAddr),
    p: &Profile<'_>,
    memory_bytes: u64,
    stop: &AtomicBool,
) -> Result<(Measured, String), String> {
    let pipeline = std::fs::read_to_string(p.pipeline)
        .map_err(|e| format!("cannot read {}: {e}", p.pipeline.display()))?;
    let id =
        (u64::from(std::process::id()) << 32).wrapping_add(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let ask = ProfileAsk {
        id,
        pipeline,
        settings: p.settings.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        rate: p.rate,
        duration_ms: p.duration.as_millis() as u64,
        memory_bytes,
        sources: p
            .recorded
            .iter()
            .map(|(id, r)| (id.clone(), r.fields.clone()))
            .collect(),
    };
    let (tx, rx) = flume::bounded(1);
    lock(&PENDING).insert(id, (name.to_string(), tx));
    let answer = send_ask(mesh, addr, ask, p.recorded)
        .and_then(|()| wait_answer(mesh, name, &rx, p.duration + ANSWER_SLACK, stop));
    lock(&PENDING).remove(&id);
    let m = answer.map_err(|e| format!("the run on {name}: {e}"))?;
    Ok((
        Measured {
            settings: p.settings.clone(),
            rate: p.rate,
            cpu_s: m.cpu_s,
            peak_memory_bytes: m.peak_memory_bytes,
            latency_p99_ms: m.latency_p99_ms,
            recovery_s: Some(m.recovery_s),
            fell_behind: m.fell_behind,
            in_place: false,
        },
        m.cap,
    ))
}

fn send_ask(
    mesh: &MeshNode,
    addr: SocketAddr,
    ask: ProfileAsk,
    recorded: &BTreeMap<String, Recorded>,
) -> Result<(), String> {
    let sent = smol::block_on(crate::mesh::endpoint::with_timeout(
        TRANSFER_TIMEOUT,
        async {
            let peer = mesh.connect(addr).await.map_err(|e| e.to_string())?;
            let mut tx = peer
                .open_stream(StreamKind::Profile)
                .await
                .map_err(|e| e.to_string())?;
            let chunk = LINES_CHUNK.min(tx.max_frame_bytes() / 2);
            tx.send(&Frame::Profile(ProfileMsg::Ask(ask)))
                .await
                .map_err(|e| e.to_string())?;
            for (source, r) in recorded {
                for bytes in r.lines.chunks(chunk) {
                    let msg = ProfileMsg::Lines {
                        source: source.clone(),
                        bytes: bytes.to_vec(),
                    };
                    tx.send(&Frame::Profile(msg))
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            tx.finish_and_wait().await.map_err(|e| e.to_string())
        },
    ));
    sent.unwrap_or_else(|| {
        Err(format!(
            "the request took over {TRANSFER_TIMEOUT:?} to send"
        ))
    })
    .map_err(|e| format!("cannot send the request: {e}"))
}

fn wait_answer(
    mesh: &MeshNode,
    name: &str,
    rx: &flume::Receiver<Answer>,
    limit: Duration,
    stop: &AtomicBool,
) -> Result<ProfileMeasured, String> {
    let until = Instant::now() + limit;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(answer) => return answer,
            Err(flume::RecvTimeoutError::Disconnected) => return Err("no answer".into()),
            Err(flume::RecvTimeoutError::Timeout) => {}
        }
        if stop.load(Ordering::Relaxed) {
            return Err("this node is stopping".into());
        }
        if Instant::now() > until {
            return Err(format!("no answer within {limit:?}"));
        }
        let down = mesh
            .members()
            .iter()
            .any(|m| m.id.name == name && m.state == MemberState::Down);
        if down {
            return Err("the peer went down".into());
        }
    }
}

/// Serves the profiling requests of peers and takes the answers to this
/// node's, until dropped.
pub(crate) struct Server {
    stop: Arc<AtomicBool>,
    _task: smol::Task<()>,
}

impl Server {
    /// Serves on `mesh`; runs use `data_dir/tune-profile-peer`.
    pub(crate) fn start(mesh: Arc<MeshNode>, data_dir: &Path) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicBool::new(false));
        let streams = mesh.profile_streams();
        let scratch = data_dir.join("tune-profile-peer");
        let task = {
            let stop = stop.clone();
            smol::spawn(async move {
                while let Ok(s) = streams.recv_async().await {
                    let served = Served {
                        mesh: mesh.clone(),
                        scratch: scratch.clone(),
                        busy: busy.clone(),
                        stop: stop.clone(),
                    };
                    smol::spawn(served.handle(s.receiver)).detach();
                }
            })
        };
        Server { stop, _task: task }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one request needs to be served.
struct Served {
    mesh: Arc<MeshNode>,
    scratch: PathBuf,
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Served {
    async fn handle(self, mut rx: FrameReceiver) {
        let peer = rx.peer().clone();
        let read =
            crate::mesh::endpoint::with_timeout(TRANSFER_TIMEOUT, read_message(&mut rx)).await;
        let msg = match read {
            Some(Ok(m)) => m,
            Some(Err((id, e))) => {
                tracing::warn!("tuner: a profiling message from {peer}: {e}");
                // The asker would otherwise wait out its whole limit.
                if let Some(id) = id {
                    answer(&self.mesh, &peer.name, peer.addr, id, Err(e)).await;
                }
                return;
            }
            None => {
                tracing::warn!(
                    "tuner: a profiling message from {peer} took over {TRANSFER_TIMEOUT:?}"
                );
                return;
            }
        };
        match msg {
            Message::Answer { id, outcome } => match lock(&PENDING).get(&id) {
                Some((asked, tx)) if *asked == peer.name => {
                    let _ = tx.try_send(outcome);
                }
                _ => tracing::debug!("tuner: an answer from {peer} to no request of ours ({id})"),
            },
            Message::Ask(ask, lines) => {
                let (id, asker, from) = (ask.id, peer.name.clone(), peer.addr);
                let reply = |outcome: Answer| {
                    let (mesh, asker) = (self.mesh.clone(), asker.clone());
                    async move { answer(&mesh, &asker, from, id, outcome).await }
                };
                if ask.duration_ms > MAX_DURATION.as_millis() as u64 {
                    reply(Err(format!(
                        "runs longer than {MAX_DURATION:?} are not made for peers"
                    )))
                    .await;
                    return;
                }
                if self.busy.swap(true, Ordering::AcqRel) {
                    reply(Err("busy with a run for another member".into())).await;
                    return;
                }
                let (busy, mesh) = (self.busy.clone(), self.mesh.clone());
                let thread = std::thread::Builder::new()
                    .name("eddy-profile-peer".into())
                    .spawn(move || {
                        let outcome = self.run(&asker, ask, lines);
                        self.busy.store(false, Ordering::Release);
                        smol::block_on(answer(&self.mesh, &asker, from, id, outcome));
                    });
                if let Err(e) = thread {
                    busy.store(false, Ordering::Release);
                    let why = format!("cannot start a thread for the run: {e}");
                    answer(&mesh, &peer.name, from, id, Err(why)).await;
                }
            }
        }
    }

    /// Makes the run asked for, as this node would make its own.
    fn run(&self, asker: &str, ask: ProfileAsk, mut lines: HashMap<String, Vec<u8>>) -> Answer {
        let file = self.scratch.with_extension("toml");
        if let Some(dir) = file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(&file, &ask.pipeline)
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        let recorded: BTreeMap<String, Recorded> = ask
            .sources
            .into_iter()
            .map(|(id, fields)| {
                let lines = lines.remove(&id).unwrap_or_default();
                (id, Recorded { fields, lines })
            })
            .collect();
        let settings: BTreeMap<String, u64> = ask.settings.into_iter().collect();
        let profile = Profile {
            pipeline: &file,
            settings: &settings,
            rate: ask.rate,
            duration: Duration::from_millis(ask.duration_ms),
            scratch: self.scratch.clone(),
            recorded: &recorded,
        };
        let workers = settings.get("workers").copied().unwrap_or(1) as usize;
        let cap = Cap::for_run(workers, ask.memory_bytes, profile.duration);
        tracing::info!(
            "tuner: making a profiling run for {asker} at {:.0} records/s ({})",
            ask.rate,
            cap.describe()
        );
        let outcome = super::tune_profile::run(&profile, &cap, &self.stop);
        let _ = std::fs::remove_file(&file);
        let mut served = lock(&SERVED);
        served.last_asker = Some(asker.to_string());
        match &outcome {
            Ok(m) => {
                served.runs += 1;
                served.cpu_s += m.cpu_s;
                served.last_error = None;
            }
            Err(e) => served.last_error = Some(e.clone()),
        }
        outcome.map(|m| ProfileMeasured {
            cpu_s: m.cpu_s,
            peak_memory_bytes: m.peak_memory_bytes,
            latency_p99_ms: m.latency_p99_ms,
            // A profiling run always times its recovery.
            recovery_s: m.recovery_s.unwrap_or_default(),
            fell_behind: m.fell_behind,
            cap: format!("on {}: {}", self.mesh.identity().name, cap.describe()),
        })
    }
}

/// Sends the outcome of request `id` to the member `name` (at its
/// membership address, else where its request came from).
async fn answer(mesh: &MeshNode, name: &str, from: SocketAddr, id: u64, outcome: Answer) {
    let addr = mesh
        .members()
        .into_iter()
        .find(|m| m.id.name == name)
        .map_or(from, |m| m.id.addr);
    let sent = crate::mesh::endpoint::with_timeout(TRANSFER_TIMEOUT, async {
        let peer = mesh.connect(addr).await.map_err(|e| e.to_string())?;
        let mut tx = peer
            .open_stream(StreamKind::Profile)
            .await
            .map_err(|e| e.to_string())?;
        tx.send(&Frame::Profile(ProfileMsg::Answer { id, outcome }))
            .await
            .map_err(|e| e.to_string())?;
        tx.finish_and_wait().await.map_err(|e| e.to_string())
    })
    .await;
    match sent {
        Some(Ok(())) => {}
        Some(Err(e)) => tracing::warn!("tuner: cannot answer {name}'s profiling request: {e}"),
        None => tracing::warn!("tuner: answering {name}'s profiling request took too long"),
    }
}

enum Message {
    Ask(ProfileAsk, HashMap<String, Vec<u8>>),
    Answer { id: u64, outcome: Answer },
}

/// One message: an `Ask` with its `Lines` up to the end of the stream, or
/// an `Answer`. An error comes with the request's id once it is known.
async fn read_message(rx: &mut FrameReceiver) -> Result<Message, (Option<u64>, String)> {
    let first = rx.recv().await.map_err(|e| (None, e.to_string()))?;
    let ask = match first {
        Some(Frame::Profile(ProfileMsg::Answer { id, outcome })) => {
            return Ok(Message::Answer { id, outcome });
        }
        Some(Frame::Profile(ProfileMsg::Ask(ask))) => ask,
        other => {
            let e = format!("expected a request or an answer, got {other:?}");
            return Err((None, e));
        }
    };
    let id = Some(ask.id);
    let mut lines: HashMap<String, Vec<u8>> = HashMap::new();
    let mut total = 0;
    loop {
        match rx.recv().await.map_err(|e| (id, e.to_string()))? {
            None => return Ok(Message::Ask(ask, lines)),
            Some(Frame::Profile(ProfileMsg::Lines { source, bytes })) => {
                if !ask.sources.iter().any(|(id, _)| *id == source) {
                    let e = format!("records of `{source}`, a source the request did not name");
                    return Err((id, e));
                }
                total += bytes.len();
                if total > MAX_RECORDED_BYTES {
                    let e = format!("over {} MiB of recorded input", MAX_RECORDED_BYTES >> 20);
                    return Err((id, e));
                }
                lines.entry(source).or_default().extend_from_slice(&bytes);
            }
            Some(other) => return Err((id, format!("expected recorded input, got {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, idle: f32, local: bool, alive: bool) -> Spare {
        Spare {
            name: name.into(),
            addr: Some(format!("127.0.0.{}:7400", name.len()).parse().unwrap()),
            idle_cores: idle,
            local,
            alive,
        }
    }

    fn peer(place: Place) -> String {
        match place {
            Place::Peer { name, .. } => name,
            Place::Local => "local".into(),
        }
    }

    /// The whole way over real QUIC, in one process: a request, the peer's
    /// answer on a stream of its own, delivered to the waiting asker. (The
    /// peer refuses this one: making it would start this test binary.)
    #[test]
    fn a_peer_answers_a_request_with_why_it_makes_no_run() {
        use crate::mesh::{ca, discovery::StaticSeeds, driver::NodeOptions};
        let ca = ca::generate_ca("blue", 1).expect("ca");
        let node = |name: &str| {
            let cert = ca::issue_node(&ca, "blue", name, 1).expect("cert");
            let id = crate::mesh::identity::NodeIdentity::from_pem(&ca.cert_pem, &cert, None)
                .expect("identity");
            let seeds = StaticSeeds::new(Vec::new(), None, Duration::from_secs(1));
            let options = NodeOptions::new("127.0.0.1:0".parse().unwrap());
            Arc::new(MeshNode::start(&id, options, Box::new(seeds)).expect("mesh node"))
        };
        let (a, b) = (node("a"), node("b"));
        let dir = tempfile::tempdir().unwrap();
        let _serves = (
            Server::start(a.clone(), dir.path()),
            Server::start(b.clone(), dir.path()),
        );
        let pipeline = dir.path().join("p.toml");
        std::fs::write(&pipeline, "[sources.g]\ntype = \"generator\"\n").unwrap();
        let settings = BTreeMap::from([("workers".to_string(), 1)]);
        let recorded = BTreeMap::from([(
            "m".to_string(),
            Recorded {
                fields: vec![("k".into(), "string".into())],
                lines: b"{\"k\":\"x\"}\n".repeat(300_000),
            },
        )]);
        let profile = Profile {
            pipeline: &pipeline,
            settings: &settings,
            rate: 10.0,
            duration: MAX_DURATION + Duration::from_secs(1),
            scratch: dir.path().join("scratch"),
            recorded: &recorded,
        };
        let stop = AtomicBool::new(false);
        let e = ask(&a, ("b", b.identity().addr), &profile, 1 << 30, &stop).unwrap_err();
        assert!(
            e.starts_with("the run on b: runs longer than 600s are not made for peers"),
            "{e}"
        );
        // A request the peer cannot read is answered too, not left to
        // time out.
        let too_much = BTreeMap::from([(
            "m".to_string(),
            Recorded {
                fields: vec![("k".into(), "string".into())],
                lines: vec![b'x'; MAX_RECORDED_BYTES + 1],
            },
        )]);
        let profile = Profile {
            pipeline: &pipeline,
            settings: &settings,
            rate: 10.0,
            duration: Duration::from_secs(1),
            scratch: dir.path().join("scratch"),
            recorded: &too_much,
        };
        let e = ask(&a, ("b", b.identity().addr), &profile, 1 << 30, &stop).unwrap_err();
        assert_eq!(e, "the run on b: over 64 MiB of recorded input");
        assert!(lock(&PENDING).is_empty());
    }

    #[test]
    fn runs_go_where_the_most_cores_are_idle() {
        let here = member("me", 0.4, true, true);
        let members = [
            here.clone(),
            member("b", 1.7, false, true),
            member("c", 3.5, false, false),
            member("dd", 1.7, false, true),
        ];
        // The idlest alive peer (ties by name); a down one is never asked.
        assert_eq!(peer(choose(ProfileOn::Auto, &members).unwrap()), "b");
        assert_eq!(peer(choose(ProfileOn::Peers, &members).unwrap()), "b");
        assert_eq!(choose(ProfileOn::Local, &members).unwrap(), Place::Local);
        // A peer must be half a core idler than this node.
        let busy_peers = [member("me", 1.4, true, true), member("b", 1.7, false, true)];
        assert_eq!(choose(ProfileOn::Auto, &busy_peers).unwrap(), Place::Local);
        assert_eq!(peer(choose(ProfileOn::Peers, &busy_peers).unwrap()), "b");
        // Alone, or before the first summaries: here, or an error naming
        // the setting.
        assert_eq!(
            choose(ProfileOn::Auto, std::slice::from_ref(&here)).unwrap(),
            Place::Local
        );
        assert_eq!(choose(ProfileOn::Auto, &[]).unwrap(), Place::Local);
        let e = choose(ProfileOn::Peers, &[here]).unwrap_err();
        assert!(e.contains("profile_on = \"peers\""), "{e}");
    }
}
