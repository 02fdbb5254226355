//! Sources and sinks, and the record formats they read and write.
//!
//! Nothing here blocks a worker thread: sources that read files or stdin
//! decode on their own thread and hand over batches through a bounded
//! channel; sinks that write hand bytes to a writer thread the same way.

pub(crate) mod codec;
pub(crate) mod dead_letter;
pub(crate) mod generator;
mod generator_source;
mod line_source;
mod mqtt_conn;
mod mqtt_sink;
mod mqtt_source;
mod sinks;
mod writer;

pub(crate) use generator_source::GeneratorTask;
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
pub(crate) use writer::{
    ExactlyOnce, SinkWriter as SinkWriterHandle, Target, WriterMsg, spawn_writer,
};
