//! The checkpoint record: what one checkpoint consists of.

use serde::{Deserialize, Serialize};

/// One complete checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckpointRecord {
    pub(crate) id: u64,
    /// Wall-clock time it was taken, epoch ms.
    pub(crate) time_ms: i64,
    /// The bin count the state is partitioned by.
    pub(crate) bins: u32,
    /// Whether every source had ended: the run was complete.
    pub(crate) completed: bool,
    pub(crate) operators: Vec<OperatorRecord>,
    /// Source id → its position, in the source's own encoding.
    pub(crate) sources: Vec<(String, Vec<u8>)>,
    /// Sink id → its pending commit, in the sink's own encoding.
    pub(crate) sinks: Vec<(String, Vec<u8>)>,
    /// Component id → the signature of its state (see
    /// `plan::state_signature`): state is installed only where it matches.
    pub(crate) signatures: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OperatorRecord {
    /// The component id; also the name of its sled tree.
    pub(crate) id: String,
    /// The operator's input watermark at the checkpoint.
    pub(crate) watermark: i64,
    /// Every non-empty bin and the version that holds its state.
    pub(crate) bins: Vec<BinRecord>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BinRecord {
    pub(crate) bin: u32,
    pub(crate) version: u64,
    pub(crate) chunks: u32,
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

impl CheckpointRecord {
    pub(crate) fn operator(&self, id: &str) -> Option<&OperatorRecord> {
        self.operators.iter().find(|o| o.id == id)
    }

    pub(crate) fn source(&self, id: &str) -> Option<&[u8]> {
        self.sources
            .iter()
            .find(|(s, _)| s == id)
            .map(|(_, p)| p.as_slice())
    }

    pub(crate) fn sink(&self, id: &str) -> Option<&[u8]> {
        self.sinks
            .iter()
            .find(|(s, _)| s == id)
            .map(|(_, p)| p.as_slice())
    }

    /// Keys and bytes of state in all.
    pub(crate) fn totals(&self) -> (u64, u64) {
        self.operators
            .iter()
            .flat_map(|o| &o.bins)
            .fold((0, 0), |(k, b), r| (k + r.entries, b + r.bytes))
    }
}
