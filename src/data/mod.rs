//! Columnar record batches: the unit that flows between operators.
//!
//! A batch holds up to `batch_size` records as typed columns (with a null
//! bitmap where needed), plus two metadata columns every record carries: its
//! event time (for timed streams) and its ingestion time (for latency).
//! Expressions are compiled into closures that read these columns by index.

mod batch;
mod column;
mod key;
mod schema;
pub(crate) mod wire;

pub(crate) use batch::{Batch, BatchBuilder};
pub(crate) use column::{Column, ValueRef};
pub(crate) use key::{ByteKey, GroupKey, KeySpec, WordKey, encode_value};
pub(crate) use schema::{DataType, Field, Schema, SchemaRef};
