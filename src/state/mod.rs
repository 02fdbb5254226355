//! Durable keyed state on sled: bins, checkpoints, restore.
//!
//! Layout: one sled tree per stateful operator, named by its component id.
//! A bin's state is a sequence of checksummed chunks keyed
//! `bin (u32 BE) | version (u64 BE) | chunk (u32 BE)`, so a bin is one
//! contiguous key range and a version is the id of the checkpoint that
//! wrote it. A checkpoint record (tree `checkpoints`) lists, for every
//! operator, the version of each bin, plus source positions, sink commits
//! and watermarks.
//!
//! A checkpoint becomes visible atomically: its chunks are written and
//! flushed first (unreferenced until then), then its record, which is one
//! insert. The two newest checkpoints are kept, so a record or chunk that
//! fails its checksum falls back to the one before.
//!
//! [`transfer`] moves one bin between stores as a stream of its chunks;
//! [`inspect`] describes what a data dir holds.

#[doc(hidden)]
pub mod bench;
mod chunk;
mod chunk_log;
mod entries;
pub(crate) mod inspect;
mod lock;
mod record;
mod run_file;
mod store;
pub(crate) mod transfer;

pub(crate) use entries::BinEntries;

pub(crate) use record::{BinRecord, CheckpointRecord, OperatorRecord};
pub(crate) use run_file::{Run, RunFile};
pub(crate) use store::{BinContent, BinWrite, Store, StoreError, now_ms, open_sled};
