//! Aggregate state shared by the window operators.
//!
//! Numeric aggregates (`count`, `sum`, `min`/`max` of numbers, `avg`) are
//! kernel accumulators: fixed-size, kept back to back per key. The others
//! (`first`, `last`, string `min`/`max`, `count_distinct`) own values and
//! live beside them. Arguments that are bare fields are read from the
//! batch's column; others are evaluated once per batch.

use hashbrown::HashSet;

use crate::data::{Batch, Column, DataType, ValueRef};
use crate::kernel::agg::{AggValue, NumAgg, NumLayout};
use crate::plan::expr::{AggCall, AggFunc};

/// A value owned by an accumulator (`first`, `last`) or a stored row.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) enum Owned {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Box<str>),
}

impl Owned {
    /// The owned copy of a value; `None` for NULL.
    pub(super) fn from_value(v: ValueRef<'_>) -> Option<Owned> {
        match v {
            ValueRef::Null => None,
            ValueRef::Bool(b) => Some(Owned::Bool(b)),
            ValueRef::Int(i) => Some(Owned::Int(i)),
            ValueRef::Float(f) => Some(Owned::Float(f)),
            ValueRef::Str(s) => Some(Owned::Str(s.into())),
        }
    }

    pub(super) fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Owned::Bool(b) => ValueRef::Bool(*b),
            Owned::Int(i) => ValueRef::Int(*i),
            Owned::Float(f) => ValueRef::Float(*f),
            Owned::Str(s) => ValueRef::Str(s),
        }
    }
}

/// A total order on values of one type, for deterministic tie-breaks.
fn value_cmp(a: ValueRef<'_>, b: ValueRef<'_>) -> std::cmp::Ordering {
    match (a, b) {
        (ValueRef::Bool(x), ValueRef::Bool(y)) => x.cmp(&y),
        (ValueRef::Int(x), ValueRef::Int(y)) => x.cmp(&y),
        (ValueRef::Float(x), ValueRef::Float(y)) => x.total_cmp(&y),
        (ValueRef::Str(x), ValueRef::Str(y)) => x.cmp(y),
        _ => std::cmp::Ordering::Equal,
    }
}

/// A running aggregate that owns values.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum AccState {
    MinStr(Option<Box<str>>),
    MaxStr(Option<Box<str>>),
    /// `first`: the value with the earliest event time (ties: the smaller
    /// value), so the result does not depend on arrival order.
    First(Option<(i64, Owned)>),
    /// `last`: the value with the latest event time (ties: the larger value).
    Last(Option<(i64, Owned)>),
    Distinct(HashSet<Box<[u8]>>),
}

/// Where an aggregate's input comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// `count(*)`: every row.
    Rows,
    /// A column of the input batch.
    Field(usize),
    /// The `i`-th evaluated argument.
    Evaluated(usize),
}

/// How a numeric aggregate folds its input.
#[derive(Clone, Copy, Debug)]
enum Fold {
    Rows,
    NonNull,
    Int,
    Float,
}

#[derive(Clone, Debug)]
struct NumInput {
    source: Source,
    fold: Fold,
}

#[derive(Clone, Debug)]
struct OtherAgg {
    init: AccState,
    source: Source,
}

/// The aggregates of one window operator: which are numeric, where their
/// inputs come from, and the output order.
pub(super) struct Aggregates {
    layout: NumLayout,
    num: Vec<NumInput>,
    other: Vec<OtherAgg>,
    /// Output position → (numeric?, index in `num` or `other`).
    order: Vec<(bool, usize)>,
    /// Aggregate indices whose arguments must be evaluated.
    evaluated: Vec<usize>,
}

/// The input column of every aggregate for one batch.
pub(super) struct Inputs<'a> {
    num: Vec<Option<&'a Column>>,
    other: Vec<Option<&'a Column>>,
}

/// Arguments evaluated over one batch; `failed` rows were dead-lettered.
pub(super) struct Args {
    columns: Vec<Column>,
    pub(super) failed: Vec<bool>,
    pub(super) any_failed: bool,
}

impl Aggregates {
    pub(super) fn new(calls: &[AggCall]) -> Aggregates {
        let mut kinds = Vec::new();
        let mut a = Aggregates {
            layout: NumLayout::new(&[]).expect("empty layout"),
            num: Vec::new(),
            other: Vec::new(),
            order: Vec::new(),
            evaluated: Vec::new(),
        };
        for (i, call) in calls.iter().enumerate() {
            let source = match (&call.arg, call.field) {
                (None, _) => Source::Rows,
                (Some(_), Some(col)) => Source::Field(col),
                (Some(_), None) => {
                    a.evaluated.push(i);
                    Source::Evaluated(a.evaluated.len() - 1)
                }
            };
            let arg_type = call.arg.as_ref().map(|c| c.data_type());
            let float = arg_type == Some(DataType::Float);
            let num = match call.func {
                AggFunc::CountRows => Some((NumAgg::Count, Fold::Rows)),
                AggFunc::Count => Some((NumAgg::Count, Fold::NonNull)),
                AggFunc::Sum if float => Some((NumAgg::SumFloat, Fold::Float)),
                AggFunc::Sum => Some((NumAgg::SumInt, Fold::Int)),
                AggFunc::Avg if float => Some((NumAgg::AvgFloat, Fold::Float)),
                AggFunc::Avg => Some((NumAgg::AvgInt, Fold::Int)),
                AggFunc::Min if float => Some((NumAgg::MinFloat, Fold::Float)),
                AggFunc::Max if float => Some((NumAgg::MaxFloat, Fold::Float)),
                AggFunc::Min if arg_type == Some(DataType::Int) => {
                    Some((NumAgg::MinInt, Fold::Int))
                }
                AggFunc::Max if arg_type == Some(DataType::Int) => {
                    Some((NumAgg::MaxInt, Fold::Int))
                }
                _ => None,
            };
            match num {
                Some((kind, fold)) => {
                    a.order.push((true, a.num.len()));
                    a.num.push(NumInput { source, fold });
                    kinds.push(kind);
                }
                None => {
                    let init = match call.func {
                        AggFunc::Min => AccState::MinStr(None),
                        AggFunc::Max => AccState::MaxStr(None),
                        AggFunc::First => AccState::First(None),
                        AggFunc::Last => AccState::Last(None),
                        _ => AccState::Distinct(HashSet::new()),
                    };
                    a.order.push((false, a.other.len()));
                    a.other.push(OtherAgg { init, source });
                }
            }
        }
        // The plan allows at most MAX_NUM_AGGS aggregates.
        a.layout = NumLayout::new(&kinds).expect("the plan limits the number of aggregates");
        a
    }

    /// Words of numeric state per key.
    pub(super) fn num_len(&self) -> usize {
        self.layout.words()
    }

    pub(super) fn other_len(&self) -> usize {
        self.other.len()
    }

    /// Appends fresh accumulators for one key.
    #[inline]
    pub(super) fn init(&self, num: &mut Vec<u64>, other: &mut Vec<AccState>) {
        num.resize(num.len() + self.layout.words(), 0);
        self.init_other(other);
    }

    /// Appends fresh value-owning accumulators for one key.
    #[inline]
    pub(super) fn init_other(&self, other: &mut Vec<AccState>) {
        other.extend(self.other.iter().map(|a| a.init.clone()));
    }

    /// Sets one key's value-owning accumulators back to fresh ones.
    pub(super) fn reset_other(&self, other: &mut [AccState]) {
        for (slot, agg) in other.iter_mut().zip(&self.other) {
            *slot = agg.init.clone();
        }
    }

    /// Evaluates the arguments that are not bare fields. A row whose
    /// evaluation fails is reported through `dead_letter` and marked.
    pub(super) fn eval(
        &self,
        calls: &[AggCall],
        batch: &Batch,
        mut dead_letter: impl FnMut(usize, &str),
    ) -> Args {
        let n = batch.len();
        let mut args = Args {
            columns: Vec::with_capacity(self.evaluated.len()),
            failed: Vec::new(),
            any_failed: false,
        };
        for &i in &self.evaluated {
            let arg = calls[i]
                .arg
                .as_ref()
                .expect("evaluated aggregates have an argument");
            let mut col = Column::new(arg.data_type(), n);
            for row in 0..n {
                if let Err(e) = arg.eval_into(batch, row, &mut col) {
                    col.push_null();
                    if args.failed.is_empty() {
                        args.failed = vec![false; n];
                    }
                    if !args.failed[row] {
                        args.failed[row] = true;
                        args.any_failed = true;
                        dead_letter(row, &e.0);
                    }
                }
            }
            args.columns.push(col);
        }
        args
    }

    fn column<'a>(source: Source, batch: &'a Batch, args: &'a Args) -> Option<&'a Column> {
        match source {
            Source::Rows => None,
            Source::Field(c) => Some(batch.column(c)),
            Source::Evaluated(i) => Some(&args.columns[i]),
        }
    }

    /// Every aggregate's input column for one batch, resolved once.
    pub(super) fn inputs<'a>(&self, batch: &'a Batch, args: &'a Args) -> Inputs<'a> {
        Inputs {
            num: self
                .num
                .iter()
                .map(|a| Self::column(a.source, batch, args))
                .collect(),
            other: self
                .other
                .iter()
                .map(|a| Self::column(a.source, batch, args))
                .collect(),
        }
    }

    /// Folds row `row` (with event time `ts`) into one key's accumulators.
    #[inline]
    pub(super) fn update(
        &self,
        num: &mut [u64],
        other: &mut [AccState],
        inputs: &Inputs<'_>,
        row: usize,
        ts: i64,
    ) {
        for (i, (agg, col)) in self.num.iter().zip(&inputs.num).enumerate() {
            let Some(col) = col else {
                self.layout.add_row(num, i);
                continue;
            };
            if col.is_null(row) {
                continue;
            }
            match agg.fold {
                Fold::Rows | Fold::NonNull => self.layout.add_row(num, i),
                Fold::Int => self.layout.add_int(num, i, col.ints()[row]),
                Fold::Float => self.layout.add_float(num, i, col.floats()[row]),
            }
        }
        for (acc, col) in other.iter_mut().zip(&inputs.other) {
            let Some(col) = col else { continue };
            let v = col.get(row);
            if v == ValueRef::Null {
                continue;
            }
            update_other(acc, v, ts);
        }
    }

    /// Merges one key's accumulators into another's (sessions joining).
    pub(super) fn merge(
        &self,
        num: &mut [u64],
        other: &mut [AccState],
        from_num: &[u64],
        from_other: &[AccState],
    ) {
        if !self.layout.is_empty() {
            self.layout.merge(num, from_num);
        }
        for (a, b) in other.iter_mut().zip(from_other) {
            merge_other(a, b);
        }
    }

    /// Appends every aggregate's value, in output order, to `out`.
    pub(super) fn finish(&self, num: &[u64], other: &[AccState], out: &mut [Column]) {
        for (&(is_num, i), col) in self.order.iter().zip(out.iter_mut()) {
            if is_num {
                match self.layout.finish(num, i) {
                    AggValue::Null => col.push_null(),
                    AggValue::Int(v) => col.push_value(ValueRef::Int(v)),
                    AggValue::Float(v) => col.push_float(v),
                }
                continue;
            }
            match &other[i] {
                AccState::MinStr(s) | AccState::MaxStr(s) => match s {
                    Some(s) => col.push_str(s),
                    None => col.push_null(),
                },
                AccState::First(v) | AccState::Last(v) => match v {
                    Some((_, o)) => col.push_value(o.as_ref()),
                    None => col.push_null(),
                },
                AccState::Distinct(set) => col.push_int(set.len() as i64),
            }
        }
    }
}

fn update_other(acc: &mut AccState, v: ValueRef<'_>, ts: i64) {
    match (acc, v) {
        (AccState::MinStr(m), ValueRef::Str(s)) => keep_str(m, s, std::cmp::Ordering::Less),
        (AccState::MaxStr(m), ValueRef::Str(s)) => keep_str(m, s, std::cmp::Ordering::Greater),
        (AccState::First(slot), v) => keep_timed(slot, ts, v, std::cmp::Ordering::Less),
        (AccState::Last(slot), v) => keep_timed(slot, ts, v, std::cmp::Ordering::Greater),
        (AccState::Distinct(set), v) => {
            let mut key = Vec::new();
            crate::data::encode_value(v, &mut key);
            set.insert(key.into_boxed_slice());
        }
        _ => {}
    }
}

fn merge_other(a: &mut AccState, b: &AccState) {
    match (a, b) {
        (AccState::MinStr(x), AccState::MinStr(Some(y))) => {
            keep_str(x, y, std::cmp::Ordering::Less)
        }
        (AccState::MaxStr(x), AccState::MaxStr(Some(y))) => {
            keep_str(x, y, std::cmp::Ordering::Greater)
        }
        (AccState::First(x), AccState::First(Some((t, v)))) => {
            keep_timed(x, *t, v.as_ref(), std::cmp::Ordering::Less)
        }
        (AccState::Last(x), AccState::Last(Some((t, v)))) => {
            keep_timed(x, *t, v.as_ref(), std::cmp::Ordering::Greater)
        }
        (AccState::Distinct(x), AccState::Distinct(y)) => x.extend(y.iter().cloned()),
        _ => {}
    }
}

/// `min`/`max` of strings: keeps `s` if it orders `wins` against the
/// current value.
fn keep_str(slot: &mut Option<Box<str>>, s: &str, wins: std::cmp::Ordering) {
    if slot.as_deref().is_none_or(|cur| s.cmp(cur) == wins) {
        *slot = Some(s.into());
    }
}

/// `first` (`wins` = Less) and `last` (Greater): keeps `(ts, v)` if its
/// time orders `wins` against the current one; on equal times the value
/// decides, so the result never depends on arrival order.
fn keep_timed(slot: &mut Option<(i64, Owned)>, ts: i64, v: ValueRef<'_>, wins: std::cmp::Ordering) {
    let better = match slot {
        None => true,
        Some((t, cur)) => ts.cmp(t).then_with(|| value_cmp(v, cur.as_ref())) == wins,
    };
    if better {
        *slot = Owned::from_value(v).map(|o| (ts, o));
    }
}
