//! Starting a run: channels for every exchange, an operator instance per
//! node and worker, writer threads for sinks, reader threads for sources.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use super::metrics::{Latency, OpMetrics};
use super::operator::{Operator, SourceTask};
use super::ops;
use super::worker::{Edge, NodeState, Port, Route, SourceState, Worker};
use super::{Running, Shared, even_assignment};
use crate::config::WindowKind;
use crate::data::{ByteKey, WordKey};
use crate::io::codec::Encoder;
use crate::io::dead_letter::DeadLetter;
use crate::io::{self, BlackholeSink, GeneratorTask, LineReaderArgs, Tap, Target, WriterSink};
use crate::kernel::hash::hash_bytes;
use crate::kernel::watermark::BoundedOutOfOrderness;
use crate::plan::{OpSpec, Plan};

/// Starts every thread of a run. `taps` attach a function to blackhole
/// sinks by id.
pub(crate) fn start(
    plan: Arc<Plan>,
    stop: Arc<AtomicBool>,
    taps: HashMap<String, Tap>,
) -> Result<Running, String> {
    let workers = plan.node.workers;
    let shared = Arc::new(Shared {
        workers,
        bins: plan.node.bins,
        assignment: even_assignment(plan.node.bins, workers),
        channel_capacity: plan.node.channel_capacity,
        dead_letter: Arc::new(DeadLetter::new(plan.node.dead_letter.clone())),
        stop,
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
        threads: OnceLock::new(),
    });
    let fail: Arc<dyn Fn(String) + Send + Sync> = {
        let shared = shared.clone();
        Arc::new(move |m| shared.fail(m))
    };
    let n = plan.nodes.len();
    let metrics: Vec<Vec<Arc<OpMetrics>>> = (0..n)
        .map(|_| (0..workers).map(|_| Arc::default()).collect())
        .collect();
    let latency: Vec<Option<Arc<Latency>>> = plan
        .nodes
        .iter()
        .map(|node| {
            matches!(
                node.op,
                OpSpec::Stdout { .. } | OpSpec::FileSink { .. } | OpSpec::Blackhole
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
    for (i, node) in plan.nodes.iter().enumerate() {
        let (target, format) = match &node.op {
            OpSpec::Stdout { format } => (Target::Stdout, *format),
            OpSpec::FileSink { path, format } => (Target::File(path.clone()), *format),
            _ => continue,
        };
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
            fail.clone(),
            stop,
        )
        .map_err(|e| format!("sinks.{}: cannot open {what}: {e}", node.id))?;
        writers.insert(i, tx);
        helpers.push(handle);
    }

    // Line sources are read by one worker each, chosen by id.
    let mut readers = Vec::new();
    let mut line_sources: HashMap<(usize, usize), io::LineSource> = HashMap::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let (OpSpec::FileSource(p) | OpSpec::Stdin(p)) = &node.op else {
            continue;
        };
        let owner = (hash_bytes(node.id.as_bytes()) % workers as u64) as usize;
        let input = io::open_input(p).map_err(|e| match &p.path {
            Some(path) => format!("sources.{}: cannot open {}: {e}", node.id, path.display()),
            None => format!("sources.{}: cannot read stdin: {e}", node.id),
        })?;
        let (tx, source) = io::line_channel(plan.node.channel_capacity);
        line_sources.insert((i, owner), source);
        readers.push((i, owner, input, tx));
    }

    let mut handles = Vec::new();
    let mut receivers: Vec<Vec<Option<flume::Receiver<_>>>> = channels
        .iter()
        .map(|per_worker| per_worker.iter().map(|(_, rx)| Some(rx.clone())).collect())
        .collect();
    for w in 0..workers {
        let edges: Vec<Edge> = edge_targets
            .iter()
            .enumerate()
            .map(|(e, (node, port, key))| Edge {
                node: *node,
                port: *port,
                key: key.clone(),
                senders: channels[e].iter().map(|(tx, _)| tx.clone()).collect(),
                inbox: receivers[e][w].take().expect("one inbox per worker"),
            })
            .collect();
        let mut drain_order: Vec<usize> = (0..edges.len()).collect();
        drain_order.sort_by_key(|&e| std::cmp::Reverse(edges[e].node));
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
                .map(|input| Port::new(if input.exchange.is_some() { workers } else { 1 }))
                .collect();
            let op = instantiate(&plan, i, w, &writers, &latency, &taps);
            let source_task: Option<(Box<dyn SourceTask>, Option<i64>)> = match &node.op {
                OpSpec::Generator(g) => Some((
                    Box::new(GeneratorTask::new(
                        &g.spec,
                        g.rate,
                        g.count,
                        w,
                        workers,
                        plan.node.batch_size,
                    )),
                    Some(g.max_out_of_orderness_ms),
                )),
                OpSpec::FileSource(p) | OpSpec::Stdin(p) => {
                    let task: Box<dyn SourceTask> = match line_sources.remove(&(i, w)) {
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
            });
        }
        let worker = Worker {
            id: w,
            shared: shared.clone(),
            nodes,
            sources,
            edges,
            drain_order,
            rows_by_worker: vec![Vec::new(); workers],
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

    for (i, owner, input, tx) in readers {
        let node = &plan.nodes[i];
        let (OpSpec::FileSource(p) | OpSpec::Stdin(p)) = &node.op else {
            unreachable!()
        };
        let args = LineReaderArgs {
            component: node.id.clone(),
            plan: Arc::new(p.clone()),
            input,
            batch_size: plan.node.batch_size,
            tx,
            worker: handles[owner].thread().clone(),
            dead_letter: shared.dead_letter.clone(),
            metrics: metrics[i][owner].clone(),
            stop: shared.stop.clone(),
            fail: fail.clone(),
        };
        helpers.push(
            io::spawn_line_reader(args).map_err(|e| format!("cannot start reader thread: {e}"))?,
        );
    }

    Ok(Running {
        plan,
        shared,
        started: Instant::now(),
        workers: handles,
        helpers,
        metrics,
        latency,
    })
}

/// The operator instance of node `i` on worker `w` (`None` for sources).
fn instantiate(
    plan: &Plan,
    i: usize,
    _w: usize,
    writers: &HashMap<usize, io::SinkWriterHandle>,
    latency: &[Option<Arc<Latency>>],
    taps: &HashMap<String, Tap>,
) -> Option<Box<dyn Operator>> {
    let node = &plan.nodes[i];
    let bins = plan.node.bins;
    let batch = plan.node.batch_size;
    let out_schema = || node.outputs[0].schema.clone();
    Some(match &node.op {
        OpSpec::Generator(_) | OpSpec::FileSource(_) | OpSpec::Stdin(_) => return None,
        OpSpec::Filter(c) => Box::new(ops::Filter::new(c.clone())),
        OpSpec::Map(cols) => Box::new(ops::Map::new(cols.clone(), out_schema())),
        OpSpec::Project(keep) => Box::new(ops::Project::new(keep.clone(), out_schema())),
        OpSpec::Window(w) => match w.kind {
            WindowKind::Session { .. } => Box::new(ops::SessionWindow::new(w.clone(), bins, batch)),
            _ => match w.key.word_fields() {
                Some(0 | 1) => Box::new(ops::Window::<WordKey<1>>::new(w.clone(), batch)),
                Some(_) => Box::new(ops::Window::<WordKey<2>>::new(w.clone(), batch)),
                None => Box::new(ops::Window::<ByteKey>::new(w.clone(), batch)),
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

/// A line source on a worker that does not read it.
struct EmptySource;

impl SourceTask for EmptySource {
    fn poll(&mut self, _stop: bool) -> super::operator::SourcePoll {
        super::operator::SourcePoll::Ended
    }
}
