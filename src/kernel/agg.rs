//! Numeric aggregates on fixed-size words: no allocation, no enum per value.
//!
//! One key's numeric accumulators are a row of `u64` words: word 0 holds a
//! "has seen a value" bit per aggregate, then each aggregate's words. All
//! zeros is the empty state, so a new key costs a `memset`. The engine adds
//! `first`, `last`, `count_distinct` and string `min`/`max`, which own
//! values, beside this row.

/// The result of an aggregate: SQL semantics, so an empty `sum` is NULL.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AggValue {
    Null,
    Int(i64),
    Float(f64),
}

/// A numeric aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NumAgg {
    Count,
    /// Integer sums wrap on overflow, as Java's `long` does in Flink.
    SumInt,
    SumFloat,
    MinInt,
    MaxInt,
    MinFloat,
    MaxFloat,
    AvgInt,
    AvgFloat,
}

impl NumAgg {
    /// Words of state, besides its presence bit.
    pub const fn words(self) -> usize {
        match self {
            NumAgg::AvgInt | NumAgg::AvgFloat => 2,
            _ => 1,
        }
    }
}

/// Most numeric aggregates one row can hold: one presence bit each.
pub const MAX_NUM_AGGS: usize = 64;

/// Where each aggregate's words are in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumLayout {
    aggs: heapless::Vec<(NumAgg, u16), MAX_NUM_AGGS>,
    words: usize,
}

impl NumLayout {
    /// `None` if there are more than [`MAX_NUM_AGGS`] aggregates.
    pub fn new(kinds: &[NumAgg]) -> Option<NumLayout> {
        let mut aggs = heapless::Vec::new();
        let mut words = 1;
        for &k in kinds {
            aggs.push((k, words as u16)).ok()?;
            words += k.words();
        }
        Some(NumLayout { aggs, words })
    }

    /// Words per row (0 when there is no numeric aggregate).
    pub fn words(&self) -> usize {
        if self.aggs.is_empty() { 0 } else { self.words }
    }

    pub fn len(&self) -> usize {
        self.aggs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.aggs.is_empty()
    }

    /// Counts one row for aggregate `i` (`count(*)`, or `count(x)` for a
    /// non-null `x`).
    #[inline]
    pub fn add_row(&self, row: &mut [u64], i: usize) {
        let (_, at) = self.aggs[i];
        row[at as usize] += 1;
    }

    /// Folds an integer into aggregate `i`.
    #[inline]
    pub fn add_int(&self, row: &mut [u64], i: usize, v: i64) {
        let (kind, at) = self.aggs[i];
        let at = at as usize;
        let seen = row[0] >> i & 1 == 1;
        match kind {
            NumAgg::Count => row[at] += 1,
            NumAgg::SumInt => row[at] = (row[at] as i64).wrapping_add(v) as u64,
            NumAgg::MinInt if !seen || v < row[at] as i64 => row[at] = v as u64,
            NumAgg::MaxInt if !seen || v > row[at] as i64 => row[at] = v as u64,
            NumAgg::MinInt | NumAgg::MaxInt => {}
            NumAgg::AvgInt => {
                row[at] = (row[at] as i64).wrapping_add(v) as u64;
                row[at + 1] += 1;
            }
            NumAgg::SumFloat | NumAgg::MinFloat | NumAgg::MaxFloat | NumAgg::AvgFloat => {
                return self.add_float(row, i, v as f64);
            }
        }
        row[0] |= 1 << i;
    }

    /// Folds a float into aggregate `i`.
    #[inline]
    pub fn add_float(&self, row: &mut [u64], i: usize, v: f64) {
        let (kind, at) = self.aggs[i];
        let at = at as usize;
        let seen = row[0] >> i & 1 == 1;
        let cur = f64::from_bits(row[at]);
        match kind {
            NumAgg::Count => row[at] += 1,
            NumAgg::SumFloat => row[at] = (cur + v).to_bits(),
            NumAgg::MinFloat if !seen || v < cur => row[at] = v.to_bits(),
            NumAgg::MaxFloat if !seen || v > cur => row[at] = v.to_bits(),
            NumAgg::MinFloat | NumAgg::MaxFloat => {}
            NumAgg::AvgFloat => {
                row[at] = (cur + v).to_bits();
                row[at + 1] += 1;
            }
            // Integer aggregates are only ever built for integer inputs.
            NumAgg::SumInt | NumAgg::MinInt | NumAgg::MaxInt | NumAgg::AvgInt => {
                debug_assert!(false, "float folded into an integer aggregate")
            }
        }
        row[0] |= 1 << i;
    }

    /// Merges row `from` into row `into` (session windows joining).
    pub fn merge(&self, into: &mut [u64], from: &[u64]) {
        for (i, &(kind, at)) in self.aggs.iter().enumerate() {
            let at = at as usize;
            if from[0] >> i & 1 == 0 && kind != NumAgg::Count {
                continue;
            }
            let seen = into[0] >> i & 1 == 1;
            let (a, b) = (into[at], from[at]);
            let (fa, fb) = (f64::from_bits(a), f64::from_bits(b));
            into[at] = match kind {
                NumAgg::Count => a + b,
                NumAgg::SumInt => (a as i64).wrapping_add(b as i64) as u64,
                NumAgg::SumFloat => (fa + fb).to_bits(),
                NumAgg::MinInt if seen => (a as i64).min(b as i64) as u64,
                NumAgg::MaxInt if seen => (a as i64).max(b as i64) as u64,
                NumAgg::MinFloat if seen => fa.min(fb).to_bits(),
                NumAgg::MaxFloat if seen => fa.max(fb).to_bits(),
                NumAgg::MinInt | NumAgg::MaxInt | NumAgg::MinFloat | NumAgg::MaxFloat => b,
                NumAgg::AvgInt => {
                    into[at + 1] += from[at + 1];
                    (a as i64).wrapping_add(b as i64) as u64
                }
                NumAgg::AvgFloat => {
                    into[at + 1] += from[at + 1];
                    (fa + fb).to_bits()
                }
            };
            into[0] |= from[0] & (1 << i);
        }
    }

    /// Aggregate `i`'s value now.
    pub fn finish(&self, row: &[u64], i: usize) -> AggValue {
        let (kind, at) = self.aggs[i];
        let at = at as usize;
        if kind == NumAgg::Count {
            return AggValue::Int(row[at] as i64);
        }
        if row[0] >> i & 1 == 0 {
            return AggValue::Null;
        }
        let w = row[at];
        match kind {
            NumAgg::Count => AggValue::Int(w as i64),
            NumAgg::SumInt | NumAgg::MinInt | NumAgg::MaxInt => AggValue::Int(w as i64),
            NumAgg::SumFloat | NumAgg::MinFloat | NumAgg::MaxFloat => {
                AggValue::Float(f64::from_bits(w))
            }
            NumAgg::AvgInt => AggValue::Float(w as i64 as f64 / row[at + 1] as f64),
            NumAgg::AvgFloat => AggValue::Float(f64::from_bits(w) / row[at + 1] as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [NumAgg; 9] = [
        NumAgg::Count,
        NumAgg::SumInt,
        NumAgg::SumFloat,
        NumAgg::MinInt,
        NumAgg::MaxInt,
        NumAgg::MinFloat,
        NumAgg::MaxFloat,
        NumAgg::AvgInt,
        NumAgg::AvgFloat,
    ];

    #[test]
    fn empty_aggregates_follow_sql() {
        let l = NumLayout::new(&ALL).unwrap();
        let row = [0u64; 16];
        assert_eq!(l.finish(&row, 0), AggValue::Int(0));
        for (i, kind) in ALL.iter().enumerate().skip(1) {
            assert_eq!(l.finish(&row, i), AggValue::Null, "{kind:?}");
        }
    }

    #[test]
    fn folding_and_merging_agree() {
        let l = NumLayout::new(&ALL).unwrap();
        let values = [5i64, -3, 12, 7, 0];
        let fold = |vals: &[i64]| {
            let mut row = [0u64; 16];
            for &v in vals {
                for i in 0..ALL.len() {
                    l.add_int(&mut row, i, v);
                }
            }
            row
        };
        let whole = fold(&values);
        let mut left = fold(&values[..2]);
        let right = fold(&values[2..]);
        l.merge(&mut left, &right);
        let mut empty_left = fold(&[]);
        l.merge(&mut empty_left, &whole);
        for (i, kind) in ALL.iter().enumerate() {
            assert_eq!(l.finish(&left, i), l.finish(&whole, i), "{kind:?}");
            assert_eq!(
                l.finish(&empty_left, i),
                l.finish(&whole, i),
                "{kind:?} merged into empty"
            );
        }
        assert_eq!(l.finish(&whole, 0), AggValue::Int(5));
        assert_eq!(l.finish(&whole, 1), AggValue::Int(21));
        assert_eq!(l.finish(&whole, 3), AggValue::Int(-3));
        assert_eq!(l.finish(&whole, 4), AggValue::Int(12));
        assert_eq!(l.finish(&whole, 7), AggValue::Float(21.0 / 5.0));
        assert_eq!(l.finish(&whole, 8), AggValue::Float(21.0 / 5.0));
    }

    #[test]
    fn negative_and_float_extremes() {
        let l = NumLayout::new(&[NumAgg::MaxInt, NumAgg::MinFloat]).unwrap();
        let mut row = [0u64; 3];
        l.add_int(&mut row, 0, -7);
        l.add_int(&mut row, 0, -9);
        l.add_float(&mut row, 1, -0.5);
        l.add_float(&mut row, 1, 3.0);
        assert_eq!(
            l.finish(&row, 0),
            AggValue::Int(-7),
            "a max of negatives is not 0"
        );
        assert_eq!(l.finish(&row, 1), AggValue::Float(-0.5));
        assert_eq!(l.words(), 3);
    }

    #[test]
    fn more_than_64_aggregates_are_refused() {
        assert!(NumLayout::new(&[NumAgg::Count; 64]).is_some());
        assert!(NumLayout::new(&[NumAgg::Count; 65]).is_none());
    }
}
