//! `mqtt` sink: publishes each record as one JSON message, to a fixed topic
//! or to one built from the record's fields (`"out/{sensor}"`).
//!
//! Every worker's instance encodes its batches and hands the messages to
//! the sink's connector thread over a bounded channel (a slow broker slows
//! the pipeline; nothing piles up). The connector publishes them; rumqttc
//! keeps QoS 1 messages until the broker acknowledges them and sends them
//! again after a reconnect.
//!
//! With checkpoints, a checkpoint is only committed once the broker has
//! acknowledged every QoS 1 message sent before its barrier (the sink
//! hands the checkpoint an empty piece then, as an exactly-once file sink
//! hands its bytes). So after a crash, what the restored checkpoint covers
//! is on the broker, and what comes after it is replayed by the sources:
//! at-least-once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, EventLoop, Outgoing, Packet};

use super::mqtt_conn::{Backoff, MqttConn, qos_of};
use crate::data::{Batch, ValueRef};
use crate::exec::checkpoint::{Checkpoints, FINAL, Snapshot};
use crate::exec::clock::now_ns;
use crate::exec::metrics::Latency;
use crate::exec::operator::{OpCtx, Operator};
use crate::io::codec::{Encoder, Format};

/// A part of a topic template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TopicPart {
    Text(String),
    /// The value of input field `index` (named `name`).
    Field {
        index: usize,
        name: String,
    },
}

/// A planned `mqtt` sink.
#[derive(Clone, Debug)]
pub(crate) struct MqttSinkPlan {
    pub(crate) conn: MqttConn,
    pub(crate) topic: Vec<TopicPart>,
    pub(crate) qos: u8,
    pub(crate) retain: bool,
}

/// Splits `"out/{sensor}/temp"` into text and `{field}` parts (field
/// names unresolved: index 0). `{{` and `}}` are literal braces.
pub(crate) fn parse_topic(template: &str) -> Result<Vec<TopicPart>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                if name.is_empty() {
                    return Err("`{}` names no field; write e.g. \"out/{sensor}\"".into());
                }
                if !text.is_empty() {
                    parts.push(TopicPart::Text(std::mem::take(&mut text)));
                }
                parts.push(TopicPart::Field {
                    index: 0,
                    name: name.trim().to_string(),
                });
            }
            '}' => return Err("a `}` without its `{`; write `}}` for a brace".into()),
            '+' | '#' => {
                return Err("a topic to publish to cannot hold the wildcards `+` or `#`".into());
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(TopicPart::Text(text));
    }
    if parts.is_empty() {
        return Err("the topic is empty".into());
    }
    Ok(parts)
}

/// What sink instances tell the connector.
pub(crate) enum SinkMsg {
    /// `(topic, payload)` messages.
    Messages(Vec<(String, Vec<u8>)>),
    /// The instance passed barrier N: what it sent before belongs to N.
    Seal(u64),
    /// The instance ended.
    Ended,
}

/// The sink on one worker.
pub(crate) struct MqttSink {
    plan: Arc<MqttSinkPlan>,
    encoder: Encoder,
    tx: flume::Sender<SinkMsg>,
    latency: Arc<Latency>,
    bytes: Vec<u8>,
}

impl MqttSink {
    pub(crate) fn new(
        plan: Arc<MqttSinkPlan>,
        tx: flume::Sender<SinkMsg>,
        latency: Arc<Latency>,
    ) -> MqttSink {
        MqttSink {
            plan,
            encoder: Encoder::new(Format::Json),
            tx,
            latency,
            bytes: Vec::new(),
        }
    }

    /// The topic of row `row`, or why there is none.
    fn topic(&self, batch: &Batch, row: usize) -> Result<String, String> {
        let mut topic = String::new();
        for part in &self.plan.topic {
            match part {
                TopicPart::Text(t) => topic.push_str(t),
                TopicPart::Field { index, name } => {
                    let value = match batch.column(*index).get(row) {
                        ValueRef::Null => return Err(format!("topic field `{name}` is null")),
                        ValueRef::Str(s) => s.to_string(),
                        ValueRef::Int(i) => i.to_string(),
                        ValueRef::Float(f) => f.to_string(),
                        ValueRef::Bool(b) => b.to_string(),
                    };
                    if value.is_empty() || value.contains(['+', '#', '\0']) {
                        return Err(format!(
                            "topic field `{name}` = {value:?} cannot be part of a topic"
                        ));
                    }
                    topic.push_str(&value);
                }
            }
        }
        Ok(topic)
    }
}

impl Operator for MqttSink {
    fn on_batch(&mut self, _port: usize, batch: Batch, ctx: &mut OpCtx<'_>) {
        self.latency.record_batch(batch.ingest_ns(), now_ns());
        self.bytes.clear();
        self.encoder.encode(&batch, &mut self.bytes);
        let fixed = match self.plan.topic.as_slice() {
            [TopicPart::Text(t)] => Some(t.as_str()),
            _ => None,
        };
        let mut messages = Vec::with_capacity(batch.len());
        // The JSON encoder writes one line per row, in row order.
        for (row, line) in self
            .bytes
            .split(|&b| b == b'\n')
            .take(batch.len())
            .enumerate()
        {
            let topic = match fixed {
                Some(t) => t.to_string(),
                None => match self.topic(&batch, row) {
                    Ok(t) => t,
                    Err(reason) => {
                        ctx.dead_letter(&batch, row, &reason);
                        continue;
                    }
                },
            };
            messages.push((topic, line.to_vec()));
        }
        let waited = Instant::now();
        // The connector only ends when the run fails, which it reports.
        let _ = self.tx.send(SinkMsg::Messages(messages));
        ctx.blocked_ns += waited.elapsed().as_nanos() as u64;
    }

    fn on_end(&mut self, _ctx: &mut OpCtx<'_>) {
        let _ = self.tx.send(SinkMsg::Ended);
    }

    fn snapshot(&mut self, checkpoint: u64) -> Snapshot {
        if checkpoint != FINAL {
            let _ = self.tx.send(SinkMsg::Seal(checkpoint));
        }
        Snapshot::default()
    }
}

/// How long the connector keeps trying to get the last messages
/// acknowledged once the pipeline is done.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the connector thread needs.
pub(crate) struct MqttSinkArgs {
    pub(crate) component: String,
    pub(crate) plan: Arc<MqttSinkPlan>,
    pub(crate) capacity: usize,
    /// Sink instances (one per worker).
    pub(crate) instances: usize,
    /// With checkpoints: this node's index, to hand over its pieces.
    pub(crate) checkpoints: Option<(usize, Arc<Checkpoints>)>,
    pub(crate) fail: Arc<dyn Fn(String) + Send + Sync>,
}

/// Counts shared by the two tasks of the connector.
#[derive(Default)]
struct Progress {
    /// Messages handed to the client.
    published: AtomicU64,
    /// Messages the broker acknowledged (QoS 1) or that were written to
    /// the socket (QoS 0).
    confirmed: AtomicU64,
    failed: AtomicBool,
}

/// Starts the connector thread; returns the channel that sink instances
/// send to. The thread is named `eddy-write-...` so that the end of a run
/// waits for it to deliver what it holds.
pub(crate) fn spawn_mqtt_sink(
    args: MqttSinkArgs,
) -> std::io::Result<(flume::Sender<SinkMsg>, std::thread::JoinHandle<()>)> {
    let mut options = args.plan.conn.options();
    // Messages in flight before the client waits for acknowledgements.
    options.set_inflight(1000);
    let (client, eventloop) = AsyncClient::new(options, 1024);
    let (tx, rx) = flume::bounded(args.capacity);
    let name = format!("eddy-write-mqtt-{}", args.component);
    let handle = super::mqtt_conn::spawn_connector(name, move || async move {
        let progress = Arc::new(Progress::default());
        let driver = tokio::spawn(drive(
            eventloop,
            args.plan.clone(),
            args.component.clone(),
            progress.clone(),
            args.fail.clone(),
        ));
        feed(&args, &client, rx, &progress).await;
        // The pipeline is done: wait (a while) for the last acks.
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while !progress.failed.load(Relaxed)
            && progress.confirmed.load(Relaxed) < progress.published.load(Relaxed)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let missing = progress
            .published
            .load(Relaxed)
            .saturating_sub(progress.confirmed.load(Relaxed));
        if missing > 0 && !progress.failed.load(Relaxed) {
            tracing::error!(sink = %args.component, "{missing} MQTT messages were not acknowledged by the broker within {DRAIN_TIMEOUT:?}");
        }
        let _ = client.try_disconnect();
        let _ = tokio::time::timeout(Duration::from_millis(500), driver).await;
    })?;
    Ok((tx, handle))
}

/// Publishes what the sink instances send, and hands the checkpoints their
/// pieces once the broker has confirmed everything before a barrier.
async fn feed(
    args: &MqttSinkArgs,
    client: &AsyncClient,
    rx: flume::Receiver<SinkMsg>,
    progress: &Progress,
) {
    let qos = qos_of(args.plan.qos);
    let mut seals: std::collections::BTreeMap<u64, usize> = Default::default();
    let mut ended = 0;
    // Checkpoints sealed by every live instance, with the count of
    // messages that must be confirmed first.
    let mut due: Vec<(u64, u64)> = Vec::new();
    loop {
        // Hand over pieces whose messages are all confirmed.
        if let Some((node, cp)) = &args.checkpoints {
            let confirmed = progress.confirmed.load(Relaxed);
            due.retain(|&(id, need)| {
                if confirmed >= need {
                    cp.submit_piece(*node, id, Vec::new());
                    false
                } else {
                    true
                }
            });
        }
        if progress.failed.load(Relaxed) {
            return;
        }
        let msg = if due.is_empty() {
            rx.recv_async().await
        } else {
            // Something waits for acks: look again soon.
            match tokio::time::timeout(Duration::from_millis(5), rx.recv_async()).await {
                Ok(m) => m,
                Err(_) => continue,
            }
        };
        let Ok(msg) = msg else {
            // Every instance is gone. The end of the run waits for the
            // pieces still due: hand them over once confirmed, or, after
            // a while, fail the run and hand them over so it can end.
            let deadline = Instant::now() + DRAIN_TIMEOUT;
            while !due.is_empty() && !progress.failed.load(Relaxed) {
                let confirmed = progress.confirmed.load(Relaxed);
                let late = Instant::now() >= deadline;
                if late {
                    (args.fail)(format!(
                        "sinks.{}: the broker at {} did not acknowledge {} messages within {DRAIN_TIMEOUT:?}",
                        args.component,
                        args.plan.conn.address(),
                        progress.published.load(Relaxed).saturating_sub(confirmed)
                    ));
                }
                if let Some((node, cp)) = &args.checkpoints {
                    due.retain(|&(id, need)| {
                        let ready = confirmed >= need || late;
                        if ready {
                            cp.submit_piece(*node, id, Vec::new());
                        }
                        !ready
                    });
                } else {
                    due.clear();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            return;
        };
        match msg {
            SinkMsg::Messages(messages) => {
                for (topic, payload) in messages {
                    if client
                        .publish(topic, qos, args.plan.retain, payload)
                        .await
                        .is_err()
                    {
                        return;
                    }
                    progress.published.fetch_add(1, Relaxed);
                }
            }
            SinkMsg::Seal(id) => *seals.entry(id).or_default() += 1,
            SinkMsg::Ended => {
                ended += 1;
                if ended == args.instances {
                    due.push((FINAL, progress.published.load(Relaxed)));
                }
            }
        }
        let live = args.instances - ended;
        let ready: Vec<u64> = seals
            .iter()
            .filter(|&(_, &n)| live > 0 && n >= live)
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            seals.remove(&id);
            due.push((id, progress.published.load(Relaxed)));
        }
    }
}

/// Drives the connection: reconnects, counts confirmations.
async fn drive(
    mut eventloop: EventLoop,
    plan: Arc<MqttSinkPlan>,
    component: String,
    progress: Arc<Progress>,
    fail: Arc<dyn Fn(String) + Send + Sync>,
) {
    let mut backoff = Backoff::new(plan.conn.retries);
    let qos0 = plan.qos == 0;
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                backoff.connected();
                tracing::info!(sink = %component, broker = %plan.conn.address(), "connected to the MQTT broker");
            }
            Ok(Event::Incoming(Packet::PubAck(_))) if !qos0 => {
                progress.confirmed.fetch_add(1, Relaxed);
            }
            Ok(Event::Outgoing(Outgoing::Publish(_))) if qos0 => {
                progress.confirmed.fetch_add(1, Relaxed);
            }
            Ok(Event::Outgoing(Outgoing::Disconnect)) => return,
            Ok(_) => {}
            Err(rumqttc::ConnectionError::RequestsDone) => return,
            Err(e) => {
                let Some(wait) = backoff.failed() else {
                    progress.failed.store(true, Relaxed);
                    fail(format!(
                        "sinks.{component}: cannot reach the broker at {} ({} attempts in a row): {e}",
                        plan.conn.address(),
                        backoff.failures()
                    ));
                    return;
                };
                tracing::warn!(sink = %component, broker = %plan.conn.address(), error = %e, "MQTT connection lost; reconnecting in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_templates() {
        assert_eq!(
            parse_topic("out/all").unwrap(),
            vec![TopicPart::Text("out/all".into())]
        );
        assert_eq!(
            parse_topic("out/{sensor}/t").unwrap(),
            vec![
                TopicPart::Text("out/".into()),
                TopicPart::Field {
                    index: 0,
                    name: "sensor".into()
                },
                TopicPart::Text("/t".into()),
            ]
        );
        assert_eq!(
            parse_topic("a{{b}}").unwrap(),
            vec![TopicPart::Text("a{b}".into())]
        );
        assert!(parse_topic("out/+").is_err());
        assert!(parse_topic("out/{}").is_err());
        assert!(parse_topic("").is_err());
        assert!(parse_topic("a}").is_err());
    }
}
