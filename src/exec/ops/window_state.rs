//! Aggregate state shared by the window operators: accumulators for every
//! aggregate of a `window` transform, folded from evaluated argument columns
//! and finished into output columns.

use hashbrown::HashSet;

use crate::data::{Batch, Column, DataType, ValueRef};
use crate::kernel::agg::{Acc, AggValue};
use crate::plan::expr::{AggCall, AggFunc};

/// A value owned by an accumulator (`first`, `last`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Owned {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Box<str>),
}

impl Owned {
    /// The owned copy of a value; `None` for NULL.
    pub(super) fn from_value(v: ValueRef<'_>) -> Option<Owned> {
        Owned::from_ref(v)
    }

    fn from_ref(v: ValueRef<'_>) -> Option<Owned> {
        match v {
            ValueRef::Null => None,
            ValueRef::Bool(b) => Some(Owned::Bool(b)),
            ValueRef::Int(i) => Some(Owned::Int(i)),
            ValueRef::Float(f) => Some(Owned::Float(f)),
            ValueRef::Str(s) => Some(Owned::Str(s.into())),
        }
    }

    fn as_ref(&self) -> ValueRef<'_> {
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

/// One running aggregate.
#[derive(Clone, Debug)]
pub(super) enum AccState {
    Num(Acc),
    MinStr(Option<Box<str>>),
    MaxStr(Option<Box<str>>),
    /// `first`: the value with the earliest event time (ties: the smaller
    /// value), so the result does not depend on arrival order.
    First(Option<(i64, Owned)>),
    /// `last`: the value with the latest event time (ties: the larger value).
    Last(Option<(i64, Owned)>),
    Distinct(HashSet<Box<[u8]>>),
}

/// The aggregates of one window operator.
pub(super) struct Aggregates<'p> {
    calls: &'p [AggCall],
}

/// Each aggregate's argument evaluated over a batch; `None` for `count(*)`.
pub(super) struct Args {
    columns: Vec<Option<Column>>,
    /// Rows whose arguments failed to evaluate (already dead-lettered).
    pub(super) failed: Vec<bool>,
    pub(super) any_failed: bool,
}

impl<'p> Aggregates<'p> {
    pub(super) fn new(calls: &'p [AggCall]) -> Self {
        Aggregates { calls }
    }

    pub(super) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Appends a fresh accumulator for every aggregate.
    pub(super) fn init(&self, out: &mut Vec<AccState>) {
        for call in self.calls {
            let arg_type = call.arg.as_ref().map(|a| a.data_type());
            out.push(match (call.func, arg_type) {
                (AggFunc::CountRows | AggFunc::Count, _) => AccState::Num(Acc::Count(0)),
                (AggFunc::Sum, Some(DataType::Float)) => AccState::Num(Acc::SumFloat(None)),
                (AggFunc::Sum, _) => AccState::Num(Acc::SumInt(None)),
                (AggFunc::Min, Some(DataType::Float)) => AccState::Num(Acc::MinFloat(None)),
                (AggFunc::Max, Some(DataType::Float)) => AccState::Num(Acc::MaxFloat(None)),
                (AggFunc::Min, Some(DataType::Str)) => AccState::MinStr(None),
                (AggFunc::Max, Some(DataType::Str)) => AccState::MaxStr(None),
                (AggFunc::Min, _) => AccState::Num(Acc::MinInt(None)),
                (AggFunc::Max, _) => AccState::Num(Acc::MaxInt(None)),
                (AggFunc::Avg, Some(DataType::Float)) => {
                    AccState::Num(Acc::AvgFloat { sum: 0.0, n: 0 })
                }
                (AggFunc::Avg, _) => AccState::Num(Acc::AvgInt { sum: 0, n: 0 }),
                (AggFunc::First, _) => AccState::First(None),
                (AggFunc::Last, _) => AccState::Last(None),
                (AggFunc::CountDistinct, _) => AccState::Distinct(HashSet::new()),
            });
        }
    }

    /// Evaluates every argument over `batch`. A row whose evaluation fails
    /// is reported through `dead_letter` and marked failed.
    pub(super) fn eval(&self, batch: &Batch, mut dead_letter: impl FnMut(usize, &str)) -> Args {
        let n = batch.len();
        let mut args = Args {
            columns: Vec::with_capacity(self.calls.len()),
            failed: vec![false; n],
            any_failed: false,
        };
        for call in self.calls {
            let Some(arg) = &call.arg else {
                args.columns.push(None);
                continue;
            };
            let mut col = Column::new(arg.data_type(), n);
            for row in 0..n {
                if let Err(e) = arg.eval_into(batch, row, &mut col) {
                    col.push_null();
                    if !args.failed[row] {
                        args.failed[row] = true;
                        args.any_failed = true;
                        dead_letter(row, &e.0);
                    }
                }
            }
            args.columns.push(Some(col));
        }
        args
    }

    /// Folds row `row` (with event time `ts`) into `accs`.
    #[inline]
    pub(super) fn update(&self, accs: &mut [AccState], args: &Args, row: usize, ts: i64) {
        for (acc, col) in accs.iter_mut().zip(&args.columns) {
            let Some(col) = col else {
                if let AccState::Num(a) = acc {
                    a.add_row();
                }
                continue;
            };
            if col.is_null(row) {
                continue;
            }
            match acc {
                AccState::Num(a @ Acc::Count(_)) => a.add_row(),
                AccState::Num(a) => match col.data_type() {
                    DataType::Int => a.add_int(col.ints()[row]),
                    DataType::Float => a.add_float(col.floats()[row]),
                    _ => {}
                },
                AccState::MinStr(m) => {
                    let v = col.str(row).unwrap_or_default();
                    if m.as_deref().is_none_or(|cur| v < cur) {
                        *m = Some(v.into());
                    }
                }
                AccState::MaxStr(m) => {
                    let v = col.str(row).unwrap_or_default();
                    if m.as_deref().is_none_or(|cur| v > cur) {
                        *m = Some(v.into());
                    }
                }
                AccState::First(slot) => {
                    let v = col.get(row);
                    let better = match slot {
                        None => true,
                        Some((t, cur)) => {
                            ts < *t || (ts == *t && value_cmp(v, cur.as_ref()).is_lt())
                        }
                    };
                    if better {
                        *slot = Owned::from_ref(v).map(|o| (ts, o));
                    }
                }
                AccState::Last(slot) => {
                    let v = col.get(row);
                    let better = match slot {
                        None => true,
                        Some((t, cur)) => {
                            ts > *t || (ts == *t && value_cmp(v, cur.as_ref()).is_gt())
                        }
                    };
                    if better {
                        *slot = Owned::from_ref(v).map(|o| (ts, o));
                    }
                }
                AccState::Distinct(set) => {
                    let mut key = Vec::new();
                    crate::data::encode_value(col.get(row), &mut key);
                    set.insert(key.into_boxed_slice());
                }
            }
        }
    }

    /// Merges `from` into `into` (session windows joining).
    pub(super) fn merge(&self, into: &mut [AccState], from: &[AccState]) {
        for (a, b) in into.iter_mut().zip(from) {
            match (a, b) {
                (AccState::Num(x), AccState::Num(y)) => x.merge(y),
                (AccState::MinStr(x), AccState::MinStr(Some(y))) => {
                    if x.as_deref().is_none_or(|cur| &**y < cur) {
                        *x = Some(y.clone());
                    }
                }
                (AccState::MaxStr(x), AccState::MaxStr(Some(y))) => {
                    if x.as_deref().is_none_or(|cur| &**y > cur) {
                        *x = Some(y.clone());
                    }
                }
                (AccState::First(x), AccState::First(Some((t, v)))) => {
                    let better = x.as_ref().is_none_or(|(ct, cv)| {
                        t < ct || (t == ct && value_cmp(v.as_ref(), cv.as_ref()).is_lt())
                    });
                    if better {
                        *x = Some((*t, v.clone()));
                    }
                }
                (AccState::Last(x), AccState::Last(Some((t, v)))) => {
                    let better = x.as_ref().is_none_or(|(ct, cv)| {
                        t > ct || (t == ct && value_cmp(v.as_ref(), cv.as_ref()).is_gt())
                    });
                    if better {
                        *x = Some((*t, v.clone()));
                    }
                }
                (AccState::Distinct(x), AccState::Distinct(y)) => x.extend(y.iter().cloned()),
                _ => {}
            }
        }
    }

    /// Appends every aggregate's value to its output column.
    pub(super) fn finish(&self, accs: &[AccState], out: &mut [Column]) {
        for (acc, col) in accs.iter().zip(out.iter_mut()) {
            match acc {
                AccState::Num(a) => match a.finish() {
                    AggValue::Null => col.push_null(),
                    AggValue::Int(i) => col.push_value(ValueRef::Int(i)),
                    AggValue::Float(f) => col.push_float(f),
                },
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
