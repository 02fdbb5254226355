//! [`KeyedTumbling`]: keyed tumbling windows in fixed-capacity maps.

use core::fmt;

use heapless::index_map::{Entry, FnvIndexMap};

use crate::kernel::agg::{AggValue, MAX_NUM_AGGS, NumAgg, NumLayout};
use crate::kernel::watermark::WATERMARK_START;
use crate::kernel::window::{Window, tumbling_start};

/// A record's value, folded into every aggregate of its key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl From<i64> for Num {
    fn from(v: i64) -> Num {
        Num::Int(v)
    }
}

impl From<f64> for Num {
    fn from(v: f64) -> Num {
        Num::Float(v)
    }
}

/// Why a record or a configuration was refused. A refused record changes
/// nothing: no accumulator, window or counter of the window moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixedError {
    /// The window starting at `window_start` already holds `KEYS` keys and
    /// `key` is not one of them.
    KeysFull { window_start: i64, key: i64 },
    /// `WINDOWS` windows are open and none is `window_start`: the watermark
    /// lags the records by more windows than there are slots.
    WindowsFull { window_start: i64 },
    /// A float reached an integer aggregate (`SumInt`, `MinInt`, ...): pick
    /// the aggregates from the value's type, as the daemon's planner does.
    FloatIntoIntAggregate,
    /// Configuration: a row of `WORDS` words cannot hold the aggregates.
    RowTooSmall { needed: usize, have: usize },
    /// Configuration: more aggregates than a row has presence bits for
    /// ([`MAX_NUM_AGGS`]), or than the output frame holds.
    TooManyAggregates { aggregates: usize, max: usize },
    /// Configuration: the window size must be positive and the allowed
    /// lateness and the out-of-orderness must not be negative.
    BadDuration,
}

impl fmt::Display for FixedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FixedError::KeysFull { window_start, key } => write!(
                f,
                "window starting at {window_start} ms is full: no room for key {key}"
            ),
            FixedError::WindowsFull { window_start } => write!(
                f,
                "every window slot is open: no room for the window starting at {window_start} ms"
            ),
            FixedError::FloatIntoIntAggregate => {
                f.write_str("a float value reached an integer aggregate")
            }
            FixedError::RowTooSmall { needed, have } => write!(
                f,
                "the aggregates need rows of {needed} words, the window has {have}"
            ),
            FixedError::TooManyAggregates { aggregates, max } => {
                write!(f, "{aggregates} aggregates, at most {max} fit")
            }
            FixedError::BadDuration => f.write_str(
                "the window size must be positive, lateness and out-of-orderness not negative",
            ),
        }
    }
}

impl core::error::Error for FixedError {}

/// What became of a record the window was handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Folded into its window.
    Folded,
    /// Its window is past its allowed lateness: counted and dropped.
    Late,
}

/// Words of one key's row for these aggregates: what `WORDS` must be at
/// least. `const`, so a capacity can be written as
/// `const WORDS: usize = row_words(&AGGS);`.
pub const fn row_words(aggs: &[NumAgg]) -> usize {
    if aggs.is_empty() {
        return 0;
    }
    let mut words = 1;
    let mut i = 0;
    while i < aggs.len() {
        words += aggs[i].words();
        i += 1;
    }
    words
}

/// One result row, handed to the caller's `emit` when a window fires (or
/// fires again, `update`, for a late record within the allowed lateness).
/// It borrows the window's state: encode or copy it inside `emit`.
#[derive(Clone, Copy, Debug)]
pub struct Fired<'a> {
    pub key: i64,
    pub window: Window,
    /// `true` when the window had fired before and a late record (within
    /// the allowed lateness) changed this key's row.
    pub update: bool,
    row: &'a [u64],
    layout: &'a NumLayout,
}

impl Fired<'_> {
    /// Number of aggregates.
    pub fn len(&self) -> usize {
        self.layout.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    /// Aggregate `i`'s value, computed as the daemon computes it (`avg` as
    /// an `f64` sum divided by the count; an empty aggregate is NULL).
    pub fn value(&self, i: usize) -> AggValue {
        self.layout.finish(self.row, i)
    }

    /// Every aggregate's value, in order.
    pub fn values(&self) -> impl Iterator<Item = AggValue> + '_ {
        (0..self.len()).map(|i| self.value(i))
    }
}

/// One window slot: free, or an open window and its keys' rows.
struct Slot<const KEYS: usize, const WORDS: usize> {
    open: bool,
    fired: bool,
    start: i64,
    end: i64,
    rows: FnvIndexMap<i64, [u64; WORDS], KEYS>,
}

impl<const KEYS: usize, const WORDS: usize> Slot<KEYS, WORDS> {
    const FREE: Self = Slot {
        open: false,
        fired: false,
        start: 0,
        end: 0,
        rows: FnvIndexMap::new(),
    };
}

/// Keyed tumbling event-time windows with room for `KEYS` keys in each of
/// `WINDOWS` open windows, every key's accumulators being a row of `WORDS`
/// words.
///
/// `KEYS` must be a power of two greater than 1 (a compile-time check of
/// `heapless`'s index map). `WINDOWS` bounds how far apart, in windows, the
/// oldest open window and the newest record can be: with out-of-orderness
/// `d` and allowed lateness `l`, `(d + l) / size + 2` slots are always
/// enough. State is about `WINDOWS * KEYS * (WORDS * 8 + 20)` bytes.
///
/// Feed records with [`handle_record`](Self::handle_record) and advance
/// time with [`handle_watermark`](Self::handle_watermark); rows come out
/// through the `emit` callbacks, windows in order of their start and each
/// window's keys in the order they first appeared in it.
pub struct KeyedTumbling<const KEYS: usize, const WINDOWS: usize, const WORDS: usize> {
    layout: NumLayout,
    /// Whether every aggregate takes floats (no integer aggregate).
    floats_ok: bool,
    size_ms: i64,
    lateness_ms: i64,
    watermark: i64,
    /// The smallest watermark at which some open window fires or expires.
    next_due: i64,
    /// The slot the last record went to: records mostly share a window.
    last: usize,
    late: u64,
    slots: [Slot<KEYS, WORDS>; WINDOWS],
}

impl<const KEYS: usize, const WINDOWS: usize, const WORDS: usize>
    KeyedTumbling<KEYS, WINDOWS, WORDS>
{
    /// Windows of `size_ms` computing `aggs` for every key, keeping each
    /// window `allowed_lateness_ms` after it fires. Fails if `WORDS` is
    /// less than [`row_words`]`(aggs)` or a duration is out of range.
    pub fn new(
        size_ms: i64,
        allowed_lateness_ms: i64,
        aggs: &[NumAgg],
    ) -> Result<Self, FixedError> {
        if size_ms <= 0 || allowed_lateness_ms < 0 {
            return Err(FixedError::BadDuration);
        }
        let layout = NumLayout::new(aggs).ok_or(FixedError::TooManyAggregates {
            aggregates: aggs.len(),
            max: MAX_NUM_AGGS,
        })?;
        if layout.words() > WORDS {
            return Err(FixedError::RowTooSmall {
                needed: layout.words(),
                have: WORDS,
            });
        }
        let floats_ok = aggs.iter().all(|k| {
            matches!(
                k,
                NumAgg::Count
                    | NumAgg::SumFloat
                    | NumAgg::MinFloat
                    | NumAgg::MaxFloat
                    | NumAgg::AvgFloat
            )
        });
        Ok(KeyedTumbling {
            layout,
            floats_ok,
            size_ms,
            lateness_ms: allowed_lateness_ms,
            watermark: WATERMARK_START,
            next_due: i64::MAX,
            last: 0,
            late: 0,
            slots: [Slot::FREE; WINDOWS],
        })
    }

    /// The window `ts` belongs to.
    #[inline]
    pub fn window_of(&self, ts: i64) -> Window {
        let start = tumbling_start(ts, self.size_ms);
        Window {
            start,
            end: start.saturating_add(self.size_ms),
        }
    }

    /// Whether a window ending at `end` is past its allowed lateness at
    /// `watermark` (the daemon's rule).
    #[inline]
    fn expired(&self, end: i64, watermark: i64) -> bool {
        (end - 1).saturating_add(self.lateness_ms) <= watermark
    }

    /// Folds `value` into `key`'s row of the window holding `ts`. A record
    /// for a window that has fired but is within the allowed lateness emits
    /// the key's updated row at once. On an error nothing changed.
    #[inline]
    pub fn handle_record(
        &mut self,
        key: i64,
        ts: i64,
        value: Num,
        emit: &mut impl FnMut(Fired<'_>),
    ) -> Result<Accepted, FixedError> {
        if matches!(value, Num::Float(_)) && !self.floats_ok {
            return Err(FixedError::FloatIntoIntAggregate);
        }
        let window = self.window_of(ts);
        if self.expired(window.end, self.watermark) {
            self.late += 1;
            return Ok(Accepted::Late);
        }
        let s = self.slot_for(window)?;
        let (layout, slot) = (&self.layout, &mut self.slots[s]);
        let row = match slot.rows.entry(key) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => v.insert([0; WORDS]).map_err(|_| FixedError::KeysFull {
                window_start: window.start,
                key,
            })?,
        };
        if !slot.open {
            // A free slot takes the window only once the key is in.
            slot.open = true;
            slot.fired = false;
            slot.start = window.start;
            slot.end = window.end;
            self.next_due = self.next_due.min(window.end - 1);
        }
        for i in 0..layout.len() {
            match value {
                Num::Int(v) => layout.add_int(row, i, v),
                Num::Float(v) => layout.add_float(row, i, v),
            }
        }
        if slot.fired {
            emit(Fired {
                key,
                window,
                update: true,
                row,
                layout,
            });
        }
        self.last = s;
        Ok(Accepted::Folded)
    }

    /// The slot holding `window`, or a free one (not yet marked open).
    #[inline]
    fn slot_for(&self, window: Window) -> Result<usize, FixedError> {
        let last = &self.slots[self.last];
        if last.open && last.start == window.start {
            return Ok(self.last);
        }
        let mut free = None;
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.open {
                if slot.start == window.start {
                    return Ok(i);
                }
            } else if free.is_none() {
                free = Some(i);
            }
        }
        free.ok_or(FixedError::WindowsFull {
            window_start: window.start,
        })
    }

    /// Advances the watermark: fires, in order of their start, the windows
    /// whose last millisecond it has reached, then frees the windows past
    /// their allowed lateness. An older watermark than the current one is
    /// ignored.
    #[inline]
    pub fn handle_watermark(&mut self, watermark: i64, emit: &mut impl FnMut(Fired<'_>)) {
        if watermark <= self.watermark {
            return;
        }
        self.watermark = watermark;
        if watermark < self.next_due {
            return;
        }
        self.drive_watermark(emit);
    }

    fn drive_watermark(&mut self, emit: &mut impl FnMut(Fired<'_>)) {
        let watermark = self.watermark;
        loop {
            let next = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.open && !s.fired && s.end - 1 <= watermark)
                .min_by_key(|(_, s)| s.start)
                .map(|(i, _)| i);
            let Some(i) = next else { break };
            let (layout, slot) = (&self.layout, &mut self.slots[i]);
            slot.fired = true;
            let window = Window {
                start: slot.start,
                end: slot.end,
            };
            for (&key, row) in slot.rows.iter() {
                emit(Fired {
                    key,
                    window,
                    update: false,
                    row,
                    layout,
                });
            }
        }
        let mut next_due = i64::MAX;
        for i in 0..WINDOWS {
            let (open, end, fired) = {
                let s = &self.slots[i];
                (s.open, s.end, s.fired)
            };
            if !open {
                continue;
            }
            if self.expired(end, watermark) {
                let slot = &mut self.slots[i];
                slot.open = false;
                slot.rows.clear();
                continue;
            }
            let due = if fired {
                (end - 1).saturating_add(self.lateness_ms)
            } else {
                end - 1
            };
            next_due = next_due.min(due);
        }
        self.next_due = next_due;
    }

    /// The current watermark.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Records dropped as late so far.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Windows open now (fired ones within their allowed lateness included).
    pub fn open_windows(&self) -> usize {
        self.slots.iter().filter(|s| s.open).count()
    }

    /// Keys of the open window starting at `start`, if it is open.
    pub fn keys_in(&self, start: i64) -> Option<usize> {
        self.slots
            .iter()
            .find(|s| s.open && s.start == start)
            .map(|s| s.rows.len())
    }

    /// The accumulator layout of every row.
    pub fn layout(&self) -> &NumLayout {
        &self.layout
    }
}
