//! Sources and sinks, and the record formats they read and write.
//!
//! Nothing here blocks a worker thread: sources that read files or stdin
//! decode on their own thread and hand over batches through a bounded
//! channel; sinks that write hand bytes to a writer thread the same way.

mod backoff;
pub(crate) mod codec;
pub(crate) mod dead_letter;
pub(crate) mod generator;
mod generator_source;
mod http_sink;
mod http_source;
mod ingest;

mod line_source;
mod mqtt_conn;
mod mqtt_sink;
mod mqtt_source;
mod sinks;
mod tcp_sink;
mod tcp_source;
mod udp_sink;
mod udp_source;
mod writer;

pub(crate) use generator_source::GeneratorTask;
pub(crate) use http_sink::spawn_http_sink;
pub(crate) use http_source::{HttpSourceArgs, start_http_source};
pub(crate) use ingest::IngestControl;
pub(crate) use line_source::{
    LineReaderArgs, LineSource, decode_file_position, line_channel, open_input, spawn_line_reader,
};
pub(crate) use mqtt_conn::{MqttConn, check_filter, parse_url};
pub(crate) use mqtt_sink::{
    MqttSink, MqttSinkArgs, MqttSinkPlan, SinkMsg, TopicPart, parse_topic, spawn_mqtt_sink,
};
pub(crate) use mqtt_source::{
    MqttSource, MqttSourceArgs, MqttSourcePlan, new_mqtt_source, spawn_mqtt_source,
};
pub(crate) use sinks::{BlackholeSink, Tap, WriterSink};
pub(crate) use tcp_sink::spawn_tcp_sink;
pub(crate) use tcp_source::{TcpSourceArgs, bind_tcp_source, spawn_tcp_source};
pub(crate) use udp_sink::spawn_udp_sink;
pub(crate) use udp_source::{UdpSourceArgs, bind_udp_source, spawn_udp_source};
pub(crate) use writer::{
    ExactlyOnce, SinkWriter as SinkWriterHandle, Target, WriterHooks, WriterMsg, spawn_writer,
};
