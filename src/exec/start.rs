//! Starting a run: channels for every exchange, an operator instance per
//! node and worker, writer threads for sinks, reader threads for sources.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::checkpoint::{Checkpoints, NodeInfo, decode_positions};
use super::cluster_checkpoint::RestorePoint;
use super::committer::spawn_committer;
use super::live::{CacheBudget, LiveSettings};
use super::metrics::{Latency, OpMetrics};
use super::operator::{Operator, SourceTask};
use super::ops;
use super::worker::{Edge, NodeState, Port, Route, SourceState, Worker};
use super::{Cluster, Running, Shared, even_assignment};
use crate::config::{NetProtocol, WindowKind};
use crate::data::{ByteKey, WordKey};
use crate::io::codec::{Encoder, Format};
use crate::io::dead_letter::DeadLetter;
use crate::io::{
    self, BlackholeSink, ExactlyOnce, GeneratorTask, HttpSourceArgs, LineReaderArgs, Tap, Target,
    TcpSourceArgs, UdpSourceArgs, WriterSink,
};
use crate::kernel::hash::hash_bytes;
use crate::kernel::watermark::BoundedOutOfOrderness;
use crate::plan::{NodeKind, OpSpec, Plan, state_signature};
use crate::state::{CheckpointRecord, Store};

/// Starts every thread of a run on this node alone. `taps` attach a
/// function to blackhole sinks by id.
pub(crate) fn start(
    plan: Arc<Plan>,
    stop: Arc<AtomicBool>,
    taps: HashMap<String, Tap>,
) -> Result<Running, String> {
    start_with(plan, stop, taps, None)
}

/// Starts a run; with `cluster`, this node's part of a distributed run:
/// its workers own the bins the assignment gives them, and exchanges reach
/// the other members' workers over the mesh.
pub(crate) fn start_with(
    plan: Arc<Plan>,
    stop: Arc<AtomicBool>,
    taps: HashMap<String, Tap>,
    cluster: Option<Cluster>,
) -> Result<Running, String> {
    let workers = plan.node.workers;
    let (global_workers, first_worker, assignment) = match &cluster {
        None => (workers, 0, even_assignment(plan.node.bins, workers)),
        Some(c) => {
            let a = &c.assignment;
            if a.members[c.me].workers as usize != workers {
                return Err(format!(
                    "the assignment gives this node {} workers, `[node] workers` is {workers}",
                    a.members[c.me].workers
                ));
            }
            if a.owner.len() != plan.node.bins as usize {
                return Err(format!(
                    "the assignment has {} bins, `[node] bins` is {}",
                    a.owner.len(),
                    plan.node.bins
                ));
            }
            (a.total_workers(), a.first[c.me], a.owner.clone())
        }
    };
    // Every member of a distributed run resumes from the same checkpoint
    // (a newcomer joins with none).
    let point = cluster.as_ref().map(|c| match (&c.join, c.restore) {
        (None, Some(point)) => point,
        _ => RestorePoint::Fresh,
    });
    let (checkpoints, restored) = open_state(&plan, point)?;
    let ingest = io::IngestControl::new(stop.clone());
    // Keyed nodes (those with exchange inputs) and the edge each one's
    // migrating bin state travels on: its first exchange input.
    let mut keyed = Vec::new();
    let mut state_edge = vec![None; plan.nodes.len()];
    let mut next_edge = 0;
    for (i, node) in plan.nodes.iter().enumerate() {
        let ports: Vec<usize> = (0..node.inputs.len())
            .filter(|&p| node.inputs[p].exchange.is_some())
            .collect();
        if let Some(_first) = ports.first() {
            state_edge[i] = Some(next_edge);
            next_edge += ports.len();
            keyed.push(crate::migrate::KeyedNode { node: i, ports });
        }
    }
    // A node that joins a running run starts at the run's assignment
    // epoch, without the workers of members that left before it came.
    let (epoch, gone) = match &cluster {
        Some(c) => {
            let a = &c.assignment;
            let mut gone = vec![false; global_workers];
            for (node, &left) in c.left.iter().enumerate() {
                if left {
                    let range = a.first[node]..a.first[node] + a.members[node].workers as usize;
                    gone[range].iter_mut().for_each(|g| *g = true);
                }
            }
            (c.join.as_ref().map_or(0, |j| j.welcome.epoch), gone)
        }
        None => (0, vec![false; global_workers]),
    };
    let joining = cluster.as_ref().is_some_and(|c| c.join.is_some());
    let joined = cluster.as_ref().and_then(|c| {
        let w = &c.join.as_ref()?.welcome;
        Some((w.sponsor as usize, w.node, w.epoch))
    });
    let held_spilled = Arc::new(AtomicU64::new(0));
    let (migration, mut migrations) = super::migration::setup(
        workers,
        first_worker,
        global_workers,
        &assignment,
        epoch,
        &gone,
        &keyed,
        state_edge,
        &super::migration::Hold {
            memory: plan.node.migration.hold_memory,
            data_dir: &plan.node.data_dir,
            spilled: held_spilled.clone(),
        },
    );
    let shared = Arc::new(Shared {
        workers,
        global_workers,
        first_worker,
        bins: plan.node.bins,
        assignment,
        channel_capacity: plan.node.channel_capacity,
        watermark_interval: Duration::from_millis(plan.node.watermark_interval_ms),
        dead_letter: Arc::new(DeadLetter::new(plan.node.dead_letter.clone())),
        stop,
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
        halted: AtomicBool::new(false),
        last_barrier: AtomicU64::new(u64::MAX),
        threads: OnceLock::new(),
        checkpoints,
        restored,
        ingest,
        migration,
        held_spilled,
        probe: OnceLock::new(),
        finishing: std::sync::atomic::AtomicUsize::new(0),
        left: AtomicBool::new(false),
        ended_exchange: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        total_workers: global_workers.into(),
        join: OnceLock::new(),
        live: Arc::new(LiveSettings::new(
            plan.node.checkpoint_interval_ms.unwrap_or(0) as u64,
            plan.node.cache_bytes,
            plan.node.flush_interval_ms,
            plan.node.batch_size,
        )),
        recorders: recorders(&plan, workers),
        run_stamp: cluster.as_ref().map(|c| c.run.clone()),
    });
    // If a later step fails (a port taken by another source), what already
    // started (listening sources, readers) sees the stop flag and ends.
    let mut stop_on_error = StopOnError(Some(shared.stop.clone()));
    let positions = |id: &str| -> Option<Vec<(u32, Vec<u8>)>> {
        shared
            .restored
            .as_ref()
            .and_then(|r| r.source(id))
            .map(decode_positions)
    };
    let checkpoint = shared.checkpoints.as_ref().map_or(0, |c| c.requested());
    let fail: Arc<dyn Fn(String) + Send + Sync> = {
        let shared = shared.clone();
        Arc::new(move |m| shared.fail(m))
    };
    let n = plan.nodes.len();
    // Keyed operators count their input and state per bin as well.
    let metrics: Vec<Vec<Arc<OpMetrics>>> = (0..n)
        .map(|i| {
            let keyed = plan.nodes[i].inputs.iter().any(|p| p.exchange.is_some());
            (0..workers)
                .map(|_| {
                    Arc::new(if keyed {
                        OpMetrics::keyed(plan.node.bins)
                    } else {
                        OpMetrics::default()
                    })
                })
                .collect()
        })
        .collect();
    let latency: Vec<Option<Arc<Latency>>> = plan
        .nodes
        .iter()
        .map(|node| {
            matches!(
                node.op,
                OpSpec::Stdout { .. }
                    | OpSpec::FileSink { .. }
                    | OpSpec::Blackhole
                    | OpSpec::MqttSink(_)
                    | OpSpec::NetSink(_)
            )
            .then(Arc::default)
        })
        .collect();

    // One channel per (exchange edge, receiving worker).
    let mut edge_of: HashMap<(usize, usize), usize> = HashMap::new();
    let mut channels: Vec<Vec<(flume::Sender<_>, flume::Receiver<_>)>> = Vec::new();
    let mut edge_targets = Vec::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        for (port, input) in node.inputs.iter().enumerate() {
            if let Some(key) = &input.exchange {
                edge_of.insert((i, port), channels.len());
                channels.push(
                    (0..workers)
                        .map(|_| flume::bounded(plan.node.channel_capacity))
                        .collect(),
                );
                edge_targets.push((i, port, key.clone()));
            }
        }
    }

    // Sink writers, shared by every worker's instance of the sink.
    let mut helpers = Vec::new();
    let mut writers = HashMap::new();
    let mut shutdowns = Vec::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        if let OpSpec::NetSink(s) = &node.op {
            // Delivered records and given-up ones are counted by the
            // writer thread, on worker 0's counters of the sink.
            let (tx, rx) = flume::bounded(plan.node.channel_capacity);
            let spawn = match s.protocol {
                NetProtocol::Http => io::spawn_http_sink,
                NetProtocol::Tcp => io::spawn_tcp_sink,
                NetProtocol::Udp => io::spawn_udp_sink,
            };
            let handle = spawn(
                &node.id,
                s.clone(),
                rx,
                metrics[i][0].clone(),
                shared.ingest.clone(),
            )
            .map_err(|e| format!("sinks.{}: cannot start: {e}", node.id))?;
            shutdowns.push(tx.clone());
            writers.insert(i, tx);
            helpers.push(handle);
            continue;
        }
        let (target, format, exact) = match &node.op {
            OpSpec::Stdout { format } => (Target::Stdout, *format, false),
            OpSpec::FileSink {
                path,
                format,
                exactly_once,
            } => (Target::File(path.clone()), *format, *exactly_once),
            _ => continue,
        };
        let exactly_once = exact.then(|| ExactlyOnce {
            node: i,
            checkpoints: shared
                .checkpoints
                .clone()
                .expect("exactly_once needs checkpoints (checked by the plan)"),
            restored: shared
                .restored
                .as_ref()
                .and_then(|r| r.sink(&node.id))
                .map(<[u8]>::to_vec),
            instances: workers,
        });
        let input = &node.inputs[0];
        let schema = &plan.nodes[input.from].outputs[input.from_port].schema;
        let mut header = Vec::new();
        Encoder::new(format).header(schema, &mut header);
        let what = match &target {
            Target::Stdout => "stdout".to_string(),
            Target::File(p) => p.display().to_string(),
        };
        let stop: Arc<dyn Fn() + Send + Sync> = {
            let shared = shared.clone();
            Arc::new(move || shared.request_stop())
        };
        let (tx, handle) = io::spawn_writer(
            &node.id,
            target,
            header,
            plan.node.channel_capacity,
            shared.live.flush_interval_ms.clone(),
            io::WriterHooks {
                fail: fail.clone(),
                stop,
            },
            exactly_once,
        )
        .map_err(|e| format!("sinks.{}: cannot open {what}: {e}", node.id))?;
        shutdowns.push(tx.clone());
        writers.insert(i, tx);
        helpers.push(handle);
    }

    // MQTT sinks: one connector thread each, fed by every worker.
    let mut mqtt_sinks = HashMap::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let OpSpec::MqttSink(p) = &node.op else {
            continue;
        };
        let (tx, handle) = io::spawn_mqtt_sink(io::MqttSinkArgs {
            component: node.id.clone(),
            plan: p.clone(),
            capacity: plan.node.channel_capacity,
            instances: workers,
            checkpoints: shared.checkpoints.clone().map(|cp| (i, cp)),
            fail: fail.clone(),
        })
        .map_err(|e| format!("cannot start the MQTT thread of sinks.{}: {e}", node.id))?;
        mqtt_sinks.insert(i, tx);
        helpers.push(handle);
    }

    // MQTT sources: one connector thread each, feeding one worker chosen
    // by id. With checkpoints, messages are acknowledged to the broker
    // when the checkpoint holding them commits.
    let mut mqtt_sources: HashMap<(usize, usize), io::MqttSource> = HashMap::new();
    let mut mqtt_starts = Vec::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let OpSpec::MqttSource(p) = &node.op else {
            continue;
        };
        let owner = (hash_bytes(node.id.as_bytes()) % workers as u64) as usize;
        let at_commit = shared.checkpoints.is_some();
        let (source, acks, start) = io::new_mqtt_source(p, plan.node.channel_capacity, at_commit);
        if let Some(cp) = &shared.checkpoints {
            cp.register_source(i, Box::new(move |pos| acks.ack_position(pos)));
        }
        mqtt_sources.insert((i, owner), source);
        mqtt_starts.push((i, owner, start));
    }

    // Line sources are read by one worker each, chosen by id.
    let mut readers = Vec::new();
    let mut line_sources: HashMap<(usize, usize), io::LineSource> = HashMap::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let (OpSpec::FileSource(p) | OpSpec::Stdin(p)) = &node.op else {
            continue;
        };
        let owner = (hash_bytes(node.id.as_bytes()) % workers as u64) as usize;
        let resume = positions(&node.id)
            .and_then(|p| p.into_iter().next())
            .and_then(|(_, pos)| io::decode_file_position(&pos));
        let input = io::open_input(p, resume).map_err(|e| match &p.path {
            Some(path) => format!("sources.{}: cannot open {}: {e}", node.id, path.display()),
            None => format!("sources.{}: cannot read stdin: {e}", node.id),
        })?;
        let replayable = p.path.is_some();
        let (tx, source) = io::line_channel(plan.node.channel_capacity, replayable, resume);
        line_sources.insert((i, owner), source);
        readers.push((i, owner, input, tx, resume));
    }

    // The remote half of every exchange (a distributed run).
    let remote = match &cluster {
        None => None,
        Some(c) => {
            let edges = edge_targets
                .iter()
                .enumerate()
                .map(|(e, (node, port, _))| {
                    let input = &plan.nodes[*node].inputs[*port];
                    super::remote::RemoteEdge {
                        schema: plan.nodes[input.from].outputs[input.from_port]
                            .schema
                            .clone(),
                        inboxes: channels[e].iter().map(|(tx, _)| tx.clone()).collect(),
                    }
                })
                .collect();
            Some(super::remote::RemoteExchange::start(c, &shared, edges)?)
        }
    };
    // Network sources listen before any worker starts, so a taken port
    // fails the start; they are read by one worker each, like line sources.
    let mut net_tasks: HashMap<(usize, usize), Box<dyn SourceTask>> = HashMap::new();
    let mut http_sources = Vec::new();
    let mut net_readers = Vec::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let OpSpec::NetSource(p) = &node.op else {
            continue;
        };
        let owner = (hash_bytes(node.id.as_bytes()) % workers as u64) as usize;
        let s = &p.settings;
        let listen_error = |e: std::io::Error| {
            format!(
                "sources.{}: cannot listen on {}://{}: {e}",
                node.id,
                s.protocol.name(),
                s.address
            )
        };
        match s.protocol {
            NetProtocol::Http => {
                let (task, source, handle) = io::start_http_source(HttpSourceArgs {
                    component: node.id.clone(),
                    plan: p.clone(),
                    batch_size: shared.live.batch_size.clone(),
                    dead_letter: shared.dead_letter.clone(),
                    metrics: metrics[i][owner].clone(),
                    control: shared.ingest.clone(),
                })
                .map_err(listen_error)?;
                net_tasks.insert((i, owner), shared.ingest.task(Box::new(task)));
                http_sources.push((owner, source));
                helpers.push(handle);
            }
            NetProtocol::Tcp | NetProtocol::Udp => {
                let socket = match s.protocol {
                    NetProtocol::Tcp => {
                        NetSocket::Tcp(io::bind_tcp_source(p).map_err(listen_error)?)
                    }
                    _ => NetSocket::Udp(io::bind_udp_source(p).map_err(listen_error)?),
                };
                let (tx, source) = io::line_channel(plan.node.channel_capacity, false, None);
                net_tasks.insert((i, owner), shared.ingest.task(Box::new(source.draining())));
                net_readers.push((i, owner, socket, tx));
            }
        }
    }

    let mut handles = Vec::new();
    let mut receivers: Vec<Vec<Option<flume::Receiver<_>>>> = channels
        .iter()
        .map(|per_worker| per_worker.iter().map(|(_, rx)| Some(rx.clone())).collect())
        .collect();
    // One alignment per generator, shared by this node's workers.
    let alignments: HashMap<usize, Arc<super::align::Alignment>> = plan
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| match &node.op {
            OpSpec::Generator(g) => g
                .max_drift_ms
                .map(|drift| (i, Arc::new(super::align::Alignment::new(workers, drift)))),
            _ => None,
        })
        .collect();
    for w in 0..workers {
        let edges: Vec<Edge> = edge_targets
            .iter()
            .enumerate()
            .map(|(e, (node, port, key))| Edge {
                node: *node,
                port: *port,
                key: key.clone(),
                senders: (0..global_workers)
                    .map(|g| match g.checked_sub(first_worker) {
                        Some(l) if l < workers => channels[e][l].0.clone(),
                        _ => remote
                            .as_ref()
                            .expect("remote workers need a cluster")
                            .queues[e][w][g]
                            .clone()
                            .expect("a queue per remote worker"),
                    })
                    .collect(),
                inbox: receivers[e][w].take().expect("one inbox per worker"),
            })
            .collect();
        let mut drain_order: Vec<usize> = (0..edges.len()).collect();
        crate::cold_sort::sort_by_key(&mut drain_order, |&e| std::cmp::Reverse(edges[e].node));
        let mut nodes = Vec::with_capacity(n);
        let mut sources = Vec::new();
        for (i, node) in plan.nodes.iter().enumerate() {
            let routes = node
                .outputs
                .iter()
                .map(|o| {
                    o.consumers
                        .iter()
                        .map(|&(c, cp)| match edge_of.get(&(c, cp)) {
                            Some(&edge) => Route::Exchange { edge },
                            None => Route::Local { node: c, port: cp },
                        })
                        .collect()
                })
                .collect();
            let ports = node
                .inputs
                .iter()
                .map(|input| {
                    let mut port = Port::new(
                        if input.exchange.is_some() {
                            global_workers
                        } else {
                            1
                        },
                        checkpoint,
                    );
                    if input.exchange.is_some() {
                        // Members that left before this node joined send
                        // nothing more.
                        for (w, _) in gone.iter().enumerate().filter(|(_, g)| **g) {
                            port.ended[w] = true;
                            port.watermarks[w] = crate::kernel::watermark::WATERMARK_END;
                        }
                    }
                    port
                })
                .collect();
            let op = instantiate(&plan, i, &shared, &writers, &mqtt_sinks, &latency, &taps);
            let source_task: Option<(Box<dyn SourceTask>, Option<i64>)> = match &node.op {
                // The run's generated stream is split over the members it
                // started with: a node that joins has no share of it.
                OpSpec::Generator(g) if joining => {
                    Some((Box::new(EmptySource), Some(g.max_out_of_orderness_ms)))
                }
                OpSpec::Generator(g) => Some((
                    Box::new(
                        GeneratorTask::new(
                            &g.spec,
                            g.rate,
                            &g.rate_steps,
                            g.count,
                            // Each node generates its slice of the stream.
                            first_worker + w,
                            global_workers,
                            shared.live.batch_size.clone(),
                            positions(&node.id).as_deref(),
                        )
                        .lingering(shared.live.flush_interval_ms.clone()),
                    ),
                    Some(g.max_out_of_orderness_ms),
                )),
                OpSpec::NetSource(p) => Some((
                    net_tasks
                        .remove(&(i, w))
                        .unwrap_or_else(|| Box::new(EmptySource)),
                    p.lines.event_time.map(|_| p.lines.max_out_of_orderness_ms),
                )),
                OpSpec::FileSource(p) | OpSpec::Stdin(p) => {
                    let task: Box<dyn SourceTask> = match line_sources.remove(&(i, w)) {
                        Some(s) => Box::new(s),
                        None => Box::new(EmptySource),
                    };
                    Some((task, p.event_time.map(|_| p.max_out_of_orderness_ms)))
                }
                OpSpec::MqttSource(p) => {
                    let task: Box<dyn SourceTask> = match mqtt_sources.remove(&(i, w)) {
                        Some(s) => Box::new(s),
                        None => Box::new(EmptySource),
                    };
                    Some((task, p.event_time.map(|_| p.max_out_of_orderness_ms)))
                }
                _ => None,
            };
            if let Some((task, delay)) = source_task {
                sources.push(SourceState {
                    node: i,
                    task,
                    watermark: delay.map(BoundedOutOfOrderness::new),
                    held_watermark: None,
                    watermark_sent: None,
                    recorder: shared.recorders.get(&node.id).cloned(),
                    // Untimed shares have no watermark to align.
                    align: alignments.get(&i).filter(|_| delay.is_some()).cloned(),
                });
            }
            nodes.push(NodeState {
                component: node.id.as_str().into(),
                op,
                ports,
                watermark: crate::kernel::watermark::WATERMARK_START,
                ended: false,
                routes,
                metrics: metrics[i][w].clone(),
                emitted: Vec::new(),
                passed: checkpoint,
                pending: checkpoint,
            });
        }
        let names: Vec<Arc<str>> = nodes.iter().map(|n| n.component.clone()).collect();
        let beat = super::heartbeat::Heartbeat::register(format!("eddy-worker-{w}"), names.clone());
        let worker = Worker {
            id: w,
            global: first_worker + w,
            shared: shared.clone(),
            nodes,
            sources,
            edges,
            drain_order,
            rows_by_worker: vec![Vec::new(); global_workers],
            injected: checkpoint,
            mig: std::mem::replace(
                &mut migrations[w],
                super::migration::WorkerMigration::fixed(w, workers, &[0], &[]),
            ),
            trace: crate::trace::LaneTrace::worker(first_worker + w, names),
            beat,
        };
        let shared_for_thread = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("eddy-worker-{w}"))
            .spawn(move || {
                shared_for_thread.threads.wait();
                let result =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker.run()));
                if let Err(panic) = result {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                    shared_for_thread.fail(format!(
                        "worker {w} failed: {}",
                        what.unwrap_or_else(|| "panic".into())
                    ));
                }
            })
            .map_err(|e| format!("cannot start worker thread: {e}"))?;
        handles.push(handle);
    }
    let _ = shared
        .threads
        .set(handles.iter().map(|h| h.thread().clone()).collect());
    drop(writers);
    drop(mqtt_sinks);

    for (i, owner, start) in mqtt_starts {
        let node = &plan.nodes[i];
        let OpSpec::MqttSource(p) = &node.op else {
            unreachable!()
        };
        let args = io::MqttSourceArgs {
            component: node.id.clone(),
            plan: p.clone(),
            batch_size: shared.live.batch_size.clone(),
            worker: handles[owner].thread().clone(),
            dead_letter: shared.dead_letter.clone(),
            metrics: metrics[i][owner].clone(),
            stop: shared.stop.clone(),
            fail: fail.clone(),
        };
        helpers
            .push(io::spawn_mqtt_source(start, args).map_err(|e| {
                format!("cannot start the MQTT thread of sources.{}: {e}", node.id)
            })?);
    }

    for (i, owner, input, tx, resume) in readers {
        let node = &plan.nodes[i];
        let (OpSpec::FileSource(p) | OpSpec::Stdin(p)) = &node.op else {
            unreachable!()
        };
        let args = LineReaderArgs {
            component: node.id.clone(),
            plan: Arc::new(p.clone()),
            input,
            resume,
            batch_size: shared.live.batch_size.clone(),
            tx,
            worker: handles[owner].thread().clone(),
            dead_letter: shared.dead_letter.clone(),
            metrics: metrics[i][owner].clone(),
            stop: shared.stop.clone(),
            fail: fail.clone(),
            max_line_bytes: None,
        };
        helpers.push(
            io::spawn_line_reader(args).map_err(|e| format!("cannot start reader thread: {e}"))?,
        );
    }

    for (owner, source) in &http_sources {
        source.set_worker(handles[*owner].thread().clone());
    }
    for (i, owner, socket, tx) in net_readers {
        let node = &plan.nodes[i];
        let OpSpec::NetSource(p) = &node.op else {
            unreachable!()
        };
        let worker = handles[owner].thread().clone();
        let started = match socket {
            NetSocket::Tcp(listener) => io::spawn_tcp_source(TcpSourceArgs {
                component: node.id.clone(),
                plan: p.clone(),
                listener,
                batch_size: shared.live.batch_size.clone(),
                tx,
                worker,
                dead_letter: shared.dead_letter.clone(),
                metrics: metrics[i][owner].clone(),
                control: shared.ingest.clone(),
            }),
            NetSocket::Udp(socket) => io::spawn_udp_source(UdpSourceArgs {
                component: node.id.clone(),
                plan: p.clone(),
                socket,
                batch_size: shared.live.batch_size.clone(),
                tx,
                worker,
                dead_letter: shared.dead_letter.clone(),
                metrics: metrics[i][owner].clone(),
                control: shared.ingest.clone(),
            }),
        };
        helpers.push(started.map_err(|e| format!("cannot start reader thread: {e}"))?);
    }

    let committer_quit = Arc::new(AtomicBool::new(false));
    let committer = match (&shared.checkpoints, plan.node.checkpoint_interval_ms) {
        (Some(_), Some(_)) => Some(
            if point.is_some() {
                super::cluster_checkpoint::spawn(shared.clone(), committer_quit.clone())
            } else {
                spawn_committer(shared.clone(), committer_quit.clone())
            }
            .map_err(|e| format!("cannot start the checkpoint thread: {e}"))?,
        ),
        _ => None,
    };
    if let Some(hook) = shared.join.get() {
        let _ = hook.strategy.set(plan.node.migration.strategy);
    }
    if let Some((sponsor, node, epoch)) = joined {
        tracing::info!(
            "joined run at epoch {epoch} as member {node} (workers {first_worker}-{}); its bins come from the others (sponsor: member {sponsor})",
            first_worker + workers - 1
        );
        shared.join_started(sponsor);
    }
    stop_on_error.0 = None;
    Ok(Running {
        reporter: super::Reporter {
            plan,
            shared: shared.clone(),
            started: Instant::now(),
            metrics,
            latency,
        },
        shared,
        workers: handles,
        helpers,
        committer,
        committer_quit,
        shutdowns,
        remote,
    })
}

/// The checkpoints of a run (none without `[checkpoint]`) and the one it
/// resumes from.
type OpenedState = (Option<Arc<Checkpoints>>, Option<Arc<CheckpointRecord>>);

/// Opens the store and picks the checkpoint to resume from. A run that
/// had completed is not resumed: the pipeline starts over. A member of a
/// distributed run resumes from `cluster`, which every member holds.
fn open_state(plan: &Plan, cluster: Option<RestorePoint>) -> Result<OpenedState, String> {
    if plan.node.checkpoint_interval_ms.is_none() {
        return Ok((None, None));
    }
    let store = Store::open(&plan.node.data_dir, plan.node.cache_bytes).map_err(|e| e.0)?;
    let signatures: Vec<u64> = (0..plan.nodes.len())
        .map(|n| state_signature(plan, n))
        .collect();
    let restored = match cluster {
        None => store.restore_point(),
        Some(RestorePoint::Fresh) => store.reset().and_then(|()| store.restore_point()),
        Some(RestorePoint::Checkpoint(id)) => store.restore_point_upto(id),
    }
    .map_err(|e| e.0)?;
    if let Some(RestorePoint::Checkpoint(id)) = cluster
        && restored.record.as_ref().map(|r| r.id) != Some(id)
    {
        return Err(format!(
            "cluster checkpoint {id} in {} is damaged or gone ({}), and the other members resume from it; remove every member's data dir to start over",
            store.dir().display(),
            restored.warnings.join("; ")
        ));
    }
    for w in &restored.warnings {
        tracing::warn!("{w}");
    }
    let age = |r: &CheckpointRecord| {
        Duration::from_millis((crate::state::now_ms() - r.time_ms).max(0) as u64)
    };
    let record = match restored.record {
        Some(r) if r.completed => {
            tracing::info!(
                checkpoint = r.id,
                "the previous run completed {:.0?} ago; starting from the beginning",
                age(&r)
            );
            store.reset().map_err(|e| e.0)?;
            None
        }
        Some(r) if r.bins != plan.node.bins => {
            return Err(format!(
                "the state in {} is partitioned into {} bins, but `[node] bins` is {}; set it back, or remove {} to start over",
                store.dir().display(),
                r.bins,
                plan.node.bins,
                store.dir().display()
            ));
        }
        Some(r) => {
            let r = fit_to_plan(r, plan, &signatures);
            store.rebase(r.clone());
            let (keys, bytes) = r.totals();
            let bins: usize = r.operators.iter().map(|o| o.bins.len()).sum();
            tracing::info!(
                checkpoint = r.id,
                keys,
                bytes,
                "restoring checkpoint {} taken {:.1?} ago: {keys} keys in {bins} bins of {} operators",
                r.id,
                age(&r),
                r.operators.len()
            );
            Some(r)
        }
        None => None,
    };
    let last = store.latest().map_or(0, |r| r.id);
    let nodes = plan
        .nodes
        .iter()
        .zip(&signatures)
        .map(|(n, &signature)| NodeInfo {
            id: n.id.clone(),
            signature,
            stateful: matches!(n.op, OpSpec::Window(_) | OpSpec::Join(_)),
            source: n.kind == NodeKind::Source,
            // An MQTT sink hands over an (empty) piece once the broker
            // has acknowledged what came before the barrier.
            exact_sink: matches!(
                n.op,
                OpSpec::FileSink {
                    exactly_once: true,
                    ..
                } | OpSpec::MqttSink(_)
            ),
        })
        .collect();
    let mut checkpoints = Checkpoints::new(
        Arc::new(store),
        nodes,
        plan.node.workers,
        plan.node.bins,
        last,
    );
    if cluster.is_some() {
        checkpoints = checkpoints.into_cluster();
    }
    Ok((Some(Arc::new(checkpoints)), record.map(Arc::new)))
}

/// Keeps of checkpoint `r` what `plan` can use: the state, position or
/// pending commit of every component whose state signature is the one
/// recorded. The rest is left out, and said: the pipeline file changed
/// since `r` was taken (a restart or a reload with a new file).
fn fit_to_plan(mut r: CheckpointRecord, plan: &Plan, signatures: &[u64]) -> CheckpointRecord {
    let id = r.id;
    let recorded: std::collections::HashMap<String, u64> = r.signatures.iter().cloned().collect();
    let fits = |component: &str, what: &str| -> bool {
        let Some(n) = plan.nodes.iter().position(|n| n.id == component) else {
            tracing::info!(
                "{component} is no longer in the pipeline; its {what} in checkpoint {id} is dropped"
            );
            return false;
        };
        // State installed by `eddy state import` has no signature: the
        // user vouches for it.
        if recorded.get(component).is_none_or(|s| *s == signatures[n]) {
            return true;
        }
        tracing::warn!(
            "{component} changed since checkpoint {id} in a way its {what} does not survive; it starts anew"
        );
        false
    };
    r.operators.retain(|o| fits(&o.id, "state"));
    r.sources.retain(|(s, _)| fits(s, "position"));
    r.sinks.retain(|(s, _)| fits(s, "pending output"));
    r
}

/// Bytes of recent records kept per source for profiling runs.
const RECORD_BYTES: usize = 4 << 20;

/// With profiling runs on, a recorder for every source they cannot drive
/// themselves (all but generators), by component id.
fn recorders(
    plan: &Plan,
    workers: usize,
) -> std::collections::BTreeMap<String, Arc<super::recorder::Recorder>> {
    let tune = &plan.node.tune;
    if !(tune.enabled && tune.profile) {
        return Default::default();
    }
    plan.nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Source && !matches!(n.op, OpSpec::Generator(_)))
        .map(|n| {
            let r =
                super::recorder::Recorder::new(n.outputs[0].schema.clone(), workers, RECORD_BYTES);
            (n.id.clone(), Arc::new(r))
        })
        .collect()
}

/// The operator instance of node `i` on worker `w` (`None` for sources).
fn instantiate(
    plan: &Plan,
    i: usize,
    shared: &Shared,
    writers: &HashMap<usize, io::SinkWriterHandle>,
    mqtt_sinks: &HashMap<usize, flume::Sender<io::SinkMsg>>,
    latency: &[Option<Arc<Latency>>],
    taps: &HashMap<String, Tap>,
) -> Option<Box<dyn Operator>> {
    let node = &plan.nodes[i];
    let bins = plan.node.bins;
    let batch = plan.node.batch_size;
    // `[state] cache_bytes` is per worker, shared by its stateful operators.
    let stateful = plan
        .nodes
        .iter()
        .filter(|n| matches!(n.op, OpSpec::Window(_) | OpSpec::Join(_)))
        .count()
        .max(1) as u64;
    let state = || {
        shared.checkpoints.as_ref().map(|cp| ops::StateAccess {
            checkpoints: cp.clone(),
            op: node.id.clone(),
            budget: CacheBudget::new(shared.live.clone(), stateful),
        })
    };
    let out_schema = || node.outputs[0].schema.clone();
    Some(match &node.op {
        OpSpec::Generator(_)
        | OpSpec::FileSource(_)
        | OpSpec::Stdin(_)
        | OpSpec::MqttSource(_)
        | OpSpec::NetSource(_) => {
            return None;
        }
        OpSpec::MqttSink(p) => Box::new(io::MqttSink::new(
            p.clone(),
            mqtt_sinks[&i].clone(),
            latency[i].clone().expect("sinks have latency"),
        )),
        OpSpec::NetSink(_) => Box::new(WriterSink::new(
            Format::Json,
            writers[&i].clone(),
            latency[i].clone().expect("sinks have latency"),
        )),
        OpSpec::Filter(c) => Box::new(ops::Filter::new(c.clone())),
        OpSpec::Map(cols, cost) => Box::new(ops::Map::new(cols.clone(), out_schema(), *cost)),
        OpSpec::Project(keep) => Box::new(ops::Project::new(keep.clone(), out_schema())),
        OpSpec::Window(w) => match w.kind {
            WindowKind::Session { .. } => Box::new(ops::SessionWindow::new(w.clone(), bins, batch)),
            _ => match w.key.word_fields() {
                Some(0 | 1) => Box::new(ops::Window::<WordKey<1>>::new(
                    w.clone(),
                    bins,
                    batch,
                    state(),
                )),
                Some(_) => Box::new(ops::Window::<WordKey<2>>::new(
                    w.clone(),
                    bins,
                    batch,
                    state(),
                )),
                None => Box::new(ops::Window::<ByteKey>::new(w.clone(), bins, batch, state())),
            },
        },
        OpSpec::Join(j) => Box::new(ops::Join::new(j.clone(), bins, batch)),
        OpSpec::Stdout { format } | OpSpec::FileSink { format, .. } => {
            let writer = writers[&i].clone();
            Box::new(WriterSink::new(
                *format,
                writer,
                latency[i].clone().expect("sinks have latency"),
            ))
        }
        OpSpec::Blackhole => Box::new(BlackholeSink::new(
            latency[i].clone().expect("sinks have latency"),
            taps.get(&node.id).cloned(),
        )),
    })
}

/// Sets the stop flag when dropped while armed.
struct StopOnError(Option<Arc<AtomicBool>>);

impl Drop for StopOnError {
    fn drop(&mut self) {
        if let Some(stop) = &self.0 {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The bound socket of a `tcp` or `udp` source, until its thread starts.
enum NetSocket {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

/// A line source on a worker that does not read it.
struct EmptySource;

impl SourceTask for EmptySource {
    fn poll(&mut self, _stop: bool) -> super::operator::SourcePoll {
        super::operator::SourcePoll::Ended
    }
}
