//! `mqtt` source: subscribes to topic filters on a broker and decodes each
//! message's payload (JSON, one record per line) into batches.
//!
//! The connector thread (see `mqtt_conn.rs`) polls the broker, decodes,
//! and hands a batch over a bounded channel each time the messages read
//! from the socket so far are decoded (or a batch is full). When the
//! pipeline is slow, the channel fills, the connector stops reading, and
//! the broker holds the messages.
//!
//! Delivery: QoS 1 messages are acknowledged to the broker only once they
//! are safe. With checkpoints, that is when the checkpoint that contains
//! them is committed, so a crash at any time leaves every unacknowledged
//! message on the broker (with a persistent session) to be delivered again
//! after the restart: at-least-once, with duplicates limited to messages
//! whose checkpoint committed but whose acknowledgement had not reached
//! the broker yet. Without checkpoints a message is acknowledged when a
//! worker takes its batch; a crash then loses what was in the pipeline.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

use rumqttc::{AsyncClient, Event, EventLoop, Packet, Publish, QoS, SubscribeReasonCode};

use super::mqtt_conn::{Backoff, MqttConn, qos_of};
use crate::data::{Batch, BatchBuilder, Column, DataType, SchemaRef};
use crate::exec::clock::now_ns;
use crate::exec::live::BatchSize;
use crate::exec::metrics::OpMetrics;
use crate::exec::operator::{SourcePoll, SourceTask};
use crate::io::codec::{Decoder, Format};
use crate::io::dead_letter::DeadLetter;

/// A planned `mqtt` source.
#[derive(Clone, Debug)]
pub(crate) struct MqttSourcePlan {
    pub(crate) conn: MqttConn,
    pub(crate) topics: Vec<String>,
    /// 0 or 1.
    pub(crate) qos: u8,
    /// The fields decoded from the payload.
    pub(crate) payload_schema: SchemaRef,
    /// What the source emits: the payload's fields, then the topic if
    /// `topic_field` is set.
    pub(crate) schema: SchemaRef,
    pub(crate) topic_field: Option<String>,
    pub(crate) format: Format,
    /// Index of the event-time field in `payload_schema`.
    pub(crate) event_time: Option<usize>,
    pub(crate) max_out_of_orderness_ms: i64,
}

/// Requests sent to the broker at once: the acknowledgements waiting at
/// most (one per unacknowledged message, and MQTT numbers at most 65535
/// of those) plus the subscriptions.
const REQUEST_CAPACITY: usize = 65_536 + 64;

/// Delivered QoS 1 messages not yet acknowledged, in delivery order, and
/// how to acknowledge them.
pub(crate) struct Acks {
    client: AsyncClient,
    /// `(sequence number, packet id, connection)` of each message.
    pending: Mutex<VecDeque<(u64, u16, u64)>>,
    /// Counts connections: an ack is only sent on the connection that
    /// delivered the message (after a reconnect the broker delivers it
    /// again, and the id may be reused).
    connection: AtomicU64,
    /// Sequence number of the last record handed to the pipeline.
    taken: AtomicU64,
}

impl Acks {
    /// Acknowledges every message up to sequence number `seq` (the
    /// position of a committed checkpoint, or the last batch taken).
    /// MQTT wants acks in delivery order, which this keeps.
    pub(crate) fn ack_through(&self, seq: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.connection.load(Relaxed);
        while let Some(&(s, pkid, conn)) = pending.front() {
            if s > seq {
                break;
            }
            pending.pop_front();
            if conn != current {
                continue;
            }
            let mut p = Publish::new("", QoS::AtLeastOnce, Vec::new());
            p.pkid = pkid;
            if let Err(e) = self.client.try_ack(&p) {
                tracing::debug!("MQTT ack of packet {pkid} not queued: {e}");
            }
        }
    }

    /// Acknowledges what a committed checkpoint's position covers.
    pub(crate) fn ack_position(&self, position: &[(u32, Vec<u8>)]) {
        if let Some(seq) = position.iter().find_map(|(_, p)| decode_seq(p)) {
            self.ack_through(seq);
        }
    }
}

fn decode_seq(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// The worker side: batches from the connector thread.
pub(crate) struct MqttSource {
    rx: flume::Receiver<(Batch, u64)>,
    acks: Arc<Acks>,
    /// Acknowledge when a batch is taken (no checkpoints).
    ack_on_take: bool,
}

impl SourceTask for MqttSource {
    fn poll(&mut self, stop: bool) -> SourcePoll {
        if stop {
            return SourcePoll::Ended;
        }
        match self.rx.try_recv() {
            Ok((b, seq)) => {
                self.acks.taken.store(seq, Relaxed);
                if self.ack_on_take {
                    self.acks.ack_through(seq);
                }
                if b.is_empty() {
                    // Only messages with no valid record: nothing to pass
                    // on, but the position moves past them.
                    return SourcePoll::Pending(None);
                }
                SourcePoll::Batch(b)
            }
            Err(flume::TryRecvError::Empty) => SourcePoll::Pending(None),
            Err(flume::TryRecvError::Disconnected) => SourcePoll::Ended,
        }
    }

    /// The sequence number of the last record taken: a committed
    /// checkpoint with this position acknowledges everything up to it.
    /// It means nothing to a restarted run, whose broker session replays
    /// what was not acknowledged.
    fn position(&self) -> Vec<(u32, Vec<u8>)> {
        vec![(0, self.acks.taken.load(Relaxed).to_le_bytes().to_vec())]
    }
}

/// Everything the connector thread needs.
pub(crate) struct MqttSourceArgs {
    pub(crate) component: String,
    pub(crate) plan: Arc<MqttSourcePlan>,
    pub(crate) batch_size: BatchSize,
    pub(crate) worker: Thread,
    pub(crate) dead_letter: Arc<DeadLetter>,
    pub(crate) metrics: Arc<OpMetrics>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) fail: Arc<dyn Fn(String) + Send + Sync>,
}

/// The connector's half before its thread starts (which needs the worker
/// thread to wake).
pub(crate) struct MqttConnectorStart {
    client: AsyncClient,
    eventloop: EventLoop,
    acks: Arc<Acks>,
    tx: flume::Sender<(Batch, u64)>,
}

/// Creates the worker's task and the shared acks. `ack_at_commit`: with
/// checkpoints, acknowledge when a checkpoint commits (the caller makes
/// the checkpoints call [`Acks::ack_position`]) instead of on take.
pub(crate) fn new_mqtt_source(
    plan: &MqttSourcePlan,
    capacity: usize,
    ack_at_commit: bool,
) -> (MqttSource, Arc<Acks>, MqttConnectorStart) {
    let mut options = plan.conn.options();
    options.set_manual_acks(true);
    let (client, eventloop) = AsyncClient::new(options, REQUEST_CAPACITY);
    let acks = Arc::new(Acks {
        client: client.clone(),
        pending: Mutex::new(VecDeque::new()),
        connection: AtomicU64::new(0),
        taken: AtomicU64::new(0),
    });
    let (tx, rx) = flume::bounded(capacity);
    let source = MqttSource {
        rx,
        acks: acks.clone(),
        ack_on_take: !ack_at_commit,
    };
    let start = MqttConnectorStart {
        client,
        eventloop,
        acks: acks.clone(),
        tx,
    };
    (source, acks, start)
}

/// Starts the connector thread.
pub(crate) fn spawn_mqtt_source(
    start: MqttConnectorStart,
    args: MqttSourceArgs,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let name = format!("eddy-mqtt-{}", args.component);
    super::mqtt_conn::spawn_connector(name, move || {
        Connector::new(args, start.client, start.acks, start.tx).run(start.eventloop)
    })
}

struct Connector {
    args: MqttSourceArgs,
    client: AsyncClient,
    acks: Arc<Acks>,
    tx: flume::Sender<(Batch, u64)>,
    decoder: Decoder,
    builder: BatchBuilder,
    /// The topic of each row in `builder`, when the topic is a field.
    topics: Option<Column>,
    /// Sequence number of the last record decoded.
    seq: u64,
}

impl Connector {
    fn new(
        args: MqttSourceArgs,
        client: AsyncClient,
        acks: Arc<Acks>,
        tx: flume::Sender<(Batch, u64)>,
    ) -> Connector {
        let plan = &args.plan;
        let decoder = Decoder::new(plan.format, plan.payload_schema.clone(), plan.event_time);
        let builder = BatchBuilder::new(
            plan.payload_schema.clone(),
            args.batch_size.get(),
            plan.event_time.is_some(),
        );
        let topics = plan
            .topic_field
            .as_ref()
            .map(|_| Column::new(DataType::Str, args.batch_size.get()));
        Connector {
            args,
            client,
            acks,
            tx,
            decoder,
            builder,
            topics,
            seq: 0,
        }
    }

    fn name(&self) -> String {
        format!("sources.{}", self.args.component)
    }

    async fn run(mut self, mut eventloop: EventLoop) {
        let mut backoff = Backoff::new(self.args.plan.conn.retries);
        let mut first = true;
        loop {
            if self.args.stop.load(Relaxed) && self.tx.is_disconnected() {
                return;
            }
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    self.message(&p);
                    // Messages read from the socket at once make one batch.
                    let drained = eventloop.state.events.is_empty();
                    if (drained || self.builder.len() >= self.args.batch_size.get())
                        && !self.flush().await
                    {
                        return;
                    }
                }
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    backoff.connected();
                    self.connected(ack.session_present, first).await;
                    first = false;
                }
                Ok(Event::Incoming(Packet::SubAck(ack))) => {
                    if ack
                        .return_codes
                        .iter()
                        .any(|c| matches!(c, SubscribeReasonCode::Failure))
                    {
                        (self.args.fail)(format!(
                            "{}: the broker at {} refused the subscription to {:?}",
                            self.name(),
                            self.args.plan.conn.address(),
                            self.args.plan.topics
                        ));
                        return;
                    }
                    tracing::info!(source = %self.args.component, topics = ?self.args.plan.topics, "subscribed");
                }
                Ok(_) => {
                    // A publish read while other events were queued (an
                    // outgoing acknowledgement, a ping) left its batch
                    // open: the event that drains the queue closes it.
                    // Waiting for the next publish instead kept a
                    // stream's last messages in the builder for good
                    // (`tests/mqtt.rs` lost the last 3 to 8 of 100k in
                    // about a third of its runs).
                    if eventloop.state.events.is_empty() && !self.flush().await {
                        return;
                    }
                }
                Err(e) => {
                    if !self.flush().await {
                        return;
                    }
                    let Some(wait) = backoff.failed() else {
                        (self.args.fail)(format!(
                            "{}: cannot reach the broker at {} ({} attempts in a row): {e}",
                            self.name(),
                            self.args.plan.conn.address(),
                            backoff.failures()
                        ));
                        return;
                    };
                    tracing::warn!(source = %self.args.component, broker = %self.args.plan.conn.address(), error = %e, "MQTT connection lost; reconnecting in {wait:?}");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// A new connection: acks still pending belong to the old one (the
    /// broker delivers those messages again). Subscribes on the first
    /// connection (the topics may have changed since the session began)
    /// and whenever the broker kept no session; not on every reconnect,
    /// since subscribing again makes the broker send retained messages
    /// again.
    async fn connected(&mut self, session_present: bool, first: bool) {
        self.acks.connection.fetch_add(1, Relaxed);
        self.acks
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        tracing::info!(source = %self.args.component, broker = %self.args.plan.conn.address(), session_present, "connected to the MQTT broker");
        if session_present && !first {
            return;
        }
        let qos = qos_of(self.args.plan.qos);
        let filters: Vec<rumqttc::SubscribeFilter> = self
            .args
            .plan
            .topics
            .iter()
            .map(|t| rumqttc::SubscribeFilter::new(t.clone(), qos))
            .collect();
        if let Err(e) = self.client.subscribe_many(filters).await {
            tracing::warn!(source = %self.args.component, "cannot subscribe: {e}");
        }
    }

    /// Decodes one message: each non-blank line of its payload is a record.
    fn message(&mut self, p: &Publish) {
        let mut decoded = 0u64;
        for (i, line) in p.payload.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match self.decoder.decode(line, &mut self.builder, now_ns()) {
                Ok(()) => {
                    decoded += 1;
                    if let Some(t) = &mut self.topics {
                        t.push_str(&p.topic);
                    }
                }
                Err(reason) => {
                    OpMetrics::add(&self.args.metrics.errors, 1);
                    self.args.dead_letter.record_message(
                        &self.args.component,
                        &p.topic,
                        i as u64 + 1,
                        &reason,
                        line,
                    );
                }
            }
        }
        // A message that decoded to nothing is still acknowledged with the
        // records around it.
        self.seq += decoded.max(1);
        if p.qos != QoS::AtMostOnce {
            let conn = self.acks.connection.load(Relaxed);
            self.acks
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back((self.seq, p.pkid, conn));
        }
    }

    /// Hands the rows decoded so far to the worker, waiting for space.
    /// Returns false once the pipeline is gone.
    async fn flush(&mut self) -> bool {
        if self.builder.is_empty() {
            // Messages with no valid record: they are safe to acknowledge
            // as soon as everything before them is.
            let pending_only = self
                .acks
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .back()
                .is_some_and(|&(s, _, _)| s > self.acks.taken.load(Relaxed));
            if !pending_only {
                return true;
            }
        }
        let batch = self.builder.take();
        let batch = match &mut self.topics {
            Some(t) => {
                let topics = std::mem::replace(t, Column::new(DataType::Str, batch.len().max(16)));
                let mut columns = batch.columns().to_vec();
                columns.push(Arc::new(topics));
                batch.with_columns(self.args.plan.schema.clone(), columns)
            }
            None => batch,
        };
        let ok = self.tx.send_async((batch, self.seq)).await.is_ok();
        self.args.worker.unpark();
        ok
    }
}
