//! What a lane logs: spans of one activity, and the two ends of a message.

use serde::Serialize;

/// The activity types of SnailTrail's program activity graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[repr(u8)]
pub(crate) enum Kind {
    /// An operator's code (per operator).
    Processing = 0,
    Serialization = 1,
    Deserialization = 2,
    /// Splitting and copying batches for an exchange.
    BufferManagement = 3,
    Scheduling = 4,
    /// An operator's snapshot for a checkpoint.
    Checkpoint = 5,
    Migration = 6,
    /// Nothing to do: parked for input or for space downstream. Waiting
    /// edges carry no critical paths.
    Waiting = 7,
    /// Time no span covers (the worker loop itself).
    Unknown = 8,
    /// The send end of a data message (an instant); with the receive end
    /// it makes a `DataMessage` edge.
    DataSend = 9,
    DataRecv = 10,
    ControlSend = 11,
    ControlRecv = 12,
    /// The edge between a send and its receive.
    DataMessage = 13,
    ControlMessage = 14,
    /// QUIC's own work on an endpoint's thread: UDP sends and receives,
    /// packet encryption and decryption, acknowledgements and timers.
    Transport = 15,
}

impl Kind {
    pub(crate) const COUNT: usize = 16;
    pub(crate) const ALL: [Kind; Kind::COUNT] = [
        Kind::Processing,
        Kind::Serialization,
        Kind::Deserialization,
        Kind::BufferManagement,
        Kind::Scheduling,
        Kind::Checkpoint,
        Kind::Migration,
        Kind::Waiting,
        Kind::Unknown,
        Kind::DataSend,
        Kind::DataRecv,
        Kind::ControlSend,
        Kind::ControlRecv,
        Kind::DataMessage,
        Kind::ControlMessage,
        Kind::Transport,
    ];

    pub(crate) fn from_u8(v: u8) -> Kind {
        Kind::ALL.get(v as usize).copied().unwrap_or(Kind::Unknown)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Processing => "processing",
            Kind::Serialization => "serialization",
            Kind::Deserialization => "deserialization",
            Kind::BufferManagement => "buffer management",
            Kind::Scheduling => "scheduling",
            Kind::Checkpoint => "checkpoint",
            Kind::Migration => "migration",
            Kind::Waiting => "waiting",
            Kind::Unknown => "unknown",
            Kind::DataSend => "data send",
            Kind::DataRecv => "data receive",
            Kind::ControlSend => "control send",
            Kind::ControlRecv => "control receive",
            Kind::DataMessage => "data message",
            Kind::ControlMessage => "control message",
            Kind::Transport => "transport",
        }
    }

    /// Whether this is one end of a message (an instant, not a span).
    pub(crate) fn is_instant(self) -> bool {
        matches!(
            self,
            Kind::DataSend | Kind::DataRecv | Kind::ControlSend | Kind::ControlRecv
        )
    }

    pub(crate) fn is_send(self) -> bool {
        matches!(self, Kind::DataSend | Kind::ControlSend)
    }
}

/// No operator: the span is not an operator's (waiting, messages).
pub(crate) const NO_OP: u16 = u16::MAX;

/// The top bit of a message id says it carries data, not a marker.
pub(crate) const DATA_BIT: u64 = 1 << 63;

/// One logged activity. Instants have `start == end` and a message id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    /// Nanoseconds on the process clock (`exec::clock`).
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) kind: Kind,
    /// The operator's index in its lane's operator names, or [`NO_OP`].
    pub(crate) op: u16,
    /// The message id of a send or receive end, else 0.
    pub(crate) id: u64,
}

impl Event {
    pub(crate) fn span(start: u64, end: u64, kind: Kind, op: u16) -> Event {
        Event {
            start,
            end,
            kind,
            op,
            id: 0,
        }
    }

    /// A message end.
    pub(crate) fn instant(t: u64, kind: Kind, id: u64) -> Event {
        Event {
            start: t,
            end: t,
            kind,
            op: NO_OP,
            id,
        }
    }
}
