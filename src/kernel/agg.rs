//! Numeric aggregate accumulators: fixed-size, `Copy`, no allocation.
//!
//! These are the aggregates both the daemon and the firmware compute. The
//! engine adds `first`, `last`, `count_distinct` and string `min`/`max`, which
//! need owned values, on top of them.

/// The result of an aggregate: SQL semantics, so an empty `sum` is NULL.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AggValue {
    Null,
    Int(i64),
    Float(f64),
}

/// One running aggregate.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Acc {
    Count(u64),
    SumInt(Option<i64>),
    SumFloat(Option<f64>),
    MinInt(Option<i64>),
    MaxInt(Option<i64>),
    MinFloat(Option<f64>),
    MaxFloat(Option<f64>),
    /// Wraps on overflow like `SumInt`, keeping the accumulator 24 bytes.
    AvgInt { sum: i64, n: u64 },
    AvgFloat { sum: f64, n: u64 },
}

impl Acc {
    /// Counts one row (`count(*)`, or `count(x)` for a non-null `x`).
    #[inline]
    pub fn add_row(&mut self) {
        if let Acc::Count(n) = self {
            *n += 1;
        }
    }

    /// Folds an integer into the aggregate. Integer sums wrap on overflow, as
    /// Java's `long` does in Flink.
    #[inline]
    pub fn add_int(&mut self, v: i64) {
        match self {
            Acc::Count(n) => *n += 1,
            Acc::SumInt(s) => *s = Some(s.unwrap_or(0).wrapping_add(v)),
            Acc::SumFloat(s) => *s = Some(s.unwrap_or(0.0) + v as f64),
            Acc::MinInt(m) => *m = Some(m.map_or(v, |m| m.min(v))),
            Acc::MaxInt(m) => *m = Some(m.map_or(v, |m| m.max(v))),
            Acc::MinFloat(m) => *m = Some(m.map_or(v as f64, |m| m.min(v as f64))),
            Acc::MaxFloat(m) => *m = Some(m.map_or(v as f64, |m| m.max(v as f64))),
            Acc::AvgInt { sum, n } => {
                *sum = sum.wrapping_add(v);
                *n += 1;
            }
            Acc::AvgFloat { sum, n } => {
                *sum += v as f64;
                *n += 1;
            }
        }
    }

    /// Folds a float into the aggregate.
    #[inline]
    pub fn add_float(&mut self, v: f64) {
        match self {
            Acc::Count(n) => *n += 1,
            Acc::SumFloat(s) => *s = Some(s.unwrap_or(0.0) + v),
            Acc::MinFloat(m) => *m = Some(m.map_or(v, |m| m.min(v))),
            Acc::MaxFloat(m) => *m = Some(m.map_or(v, |m| m.max(v))),
            Acc::AvgFloat { sum, n } => {
                *sum += v;
                *n += 1;
            }
            // Integer accumulators are only ever built for integer inputs.
            Acc::SumInt(_) | Acc::MinInt(_) | Acc::MaxInt(_) | Acc::AvgInt { .. } => {
                debug_assert!(false, "float folded into an integer aggregate")
            }
        }
    }

    /// Merges another accumulator of the same kind (session windows merging).
    pub fn merge(&mut self, other: &Acc) {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::SumInt(a), Acc::SumInt(b)) => *a = merge_opt(*a, *b, |x, y| x.wrapping_add(y)),
            (Acc::SumFloat(a), Acc::SumFloat(b)) => *a = merge_opt(*a, *b, |x, y| x + y),
            (Acc::MinInt(a), Acc::MinInt(b)) => *a = merge_opt(*a, *b, i64::min),
            (Acc::MaxInt(a), Acc::MaxInt(b)) => *a = merge_opt(*a, *b, i64::max),
            (Acc::MinFloat(a), Acc::MinFloat(b)) => *a = merge_opt(*a, *b, f64::min),
            (Acc::MaxFloat(a), Acc::MaxFloat(b)) => *a = merge_opt(*a, *b, f64::max),
            (Acc::AvgInt { sum, n }, Acc::AvgInt { sum: s2, n: n2 }) => {
                *sum = sum.wrapping_add(*s2);
                *n += n2;
            }
            (Acc::AvgFloat { sum, n }, Acc::AvgFloat { sum: s2, n: n2 }) => {
                *sum += s2;
                *n += n2;
            }
            _ => debug_assert!(false, "merging accumulators of different kinds"),
        }
    }

    /// The aggregate's value now.
    pub fn finish(&self) -> AggValue {
        match *self {
            Acc::Count(n) => AggValue::Int(n as i64),
            Acc::SumInt(s) | Acc::MinInt(s) | Acc::MaxInt(s) => {
                s.map_or(AggValue::Null, AggValue::Int)
            }
            Acc::SumFloat(s) | Acc::MinFloat(s) | Acc::MaxFloat(s) => {
                s.map_or(AggValue::Null, AggValue::Float)
            }
            Acc::AvgInt { sum, n } => {
                if n == 0 {
                    AggValue::Null
                } else {
                    AggValue::Float(sum as f64 / n as f64)
                }
            }
            Acc::AvgFloat { sum, n } => {
                if n == 0 {
                    AggValue::Null
                } else {
                    AggValue::Float(sum / n as f64)
                }
            }
        }
    }
}

#[inline]
fn merge_opt<T: Copy>(a: Option<T>, b: Option<T>, f: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(f(x, y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulators_stay_small() {
        // State is these, per key and window: keep them to three words.
        assert!(core::mem::size_of::<Acc>() <= 24);
    }

    #[test]
    fn empty_aggregates_follow_sql() {
        assert_eq!(Acc::Count(0).finish(), AggValue::Int(0));
        assert_eq!(Acc::SumInt(None).finish(), AggValue::Null);
        assert_eq!(Acc::AvgFloat { sum: 0.0, n: 0 }.finish(), AggValue::Null);
    }

    #[test]
    fn folding_and_merging_agree() {
        let values = [5i64, -3, 12, 7, 0];
        let kinds = [
            Acc::Count(0),
            Acc::SumInt(None),
            Acc::MinInt(None),
            Acc::MaxInt(None),
            Acc::AvgInt { sum: 0, n: 0 },
            Acc::SumFloat(None),
            Acc::MaxFloat(None),
        ];
        for kind in kinds {
            let mut whole = kind;
            values.iter().for_each(|&v| whole.add_int(v));
            let (mut left, mut right) = (kind, kind);
            values[..2].iter().for_each(|&v| left.add_int(v));
            values[2..].iter().for_each(|&v| right.add_int(v));
            left.merge(&right);
            assert_eq!(left.finish(), whole.finish(), "{kind:?}");
        }
        let mut avg = Acc::AvgInt { sum: 0, n: 0 };
        values.iter().for_each(|&v| avg.add_int(v));
        assert_eq!(avg.finish(), AggValue::Float(21.0 / 5.0));
    }
}
