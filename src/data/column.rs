//! One typed column of a batch, with an optional null bitmap.

use super::DataType;

/// A borrowed value of any type, for the places that are not type-specialised
/// (formatting, key encoding, tests).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ValueRef<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

#[derive(Clone, Debug, PartialEq)]
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Float(Vec<f64>),
    /// Strings back to back; row `i` is `data[offsets[i]..offsets[i + 1]]`.
    Str {
        offsets: Vec<u32>,
        data: String,
    },
}

/// A column of one type. Nulls, when there are any, are marked in a bitmap
/// and hold a placeholder value (0, 0.0, false or "") in `values`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Column {
    values: Values,
    /// Bit `i` set means row `i` is null. `None` while the column has no null.
    nulls: Option<Vec<u64>>,
    len: usize,
}

impl Column {
    pub(crate) fn new(ty: DataType, capacity: usize) -> Column {
        let values = match ty {
            DataType::Bool => Values::Bool(Vec::with_capacity(capacity)),
            DataType::Int => Values::Int(Vec::with_capacity(capacity)),
            DataType::Float => Values::Float(Vec::with_capacity(capacity)),
            DataType::Str => {
                let mut offsets = Vec::with_capacity(capacity + 1);
                offsets.push(0);
                Values::Str {
                    offsets,
                    data: String::with_capacity(capacity * 8),
                }
            }
        };
        Column {
            values,
            nulls: None,
            len: 0,
        }
    }

    pub(crate) fn data_type(&self) -> DataType {
        match self.values {
            Values::Bool(_) => DataType::Bool,
            Values::Int(_) => DataType::Int,
            Values::Float(_) => DataType::Float,
            Values::Str { .. } => DataType::Str,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes its values and null bitmap take on the heap (by length, not
    /// capacity: what a copy of it would take).
    pub(crate) fn heap_bytes(&self) -> usize {
        let values = match &self.values {
            Values::Bool(v) => v.len(),
            Values::Int(v) => v.len() * 8,
            Values::Float(v) => v.len() * 8,
            Values::Str { offsets, data } => offsets.len() * 4 + data.len(),
        };
        values + self.nulls.as_ref().map_or(0, |n| n.len() * 8)
    }

    #[inline]
    pub(crate) fn is_null(&self, row: usize) -> bool {
        match &self.nulls {
            None => false,
            Some(bits) => bits[row / 64] >> (row % 64) & 1 == 1,
        }
    }

    pub(crate) fn has_nulls(&self) -> bool {
        self.nulls.is_some()
    }

    /// The integer at `row`; `None` if null or if the column is not `int`.
    #[inline]
    pub(crate) fn int(&self, row: usize) -> Option<i64> {
        match &self.values {
            Values::Int(v) if !self.is_null(row) => Some(v[row]),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn float(&self, row: usize) -> Option<f64> {
        match &self.values {
            Values::Float(v) if !self.is_null(row) => Some(v[row]),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn bool(&self, row: usize) -> Option<bool> {
        match &self.values {
            Values::Bool(v) if !self.is_null(row) => Some(v[row]),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn str(&self, row: usize) -> Option<&str> {
        match &self.values {
            Values::Str { offsets, data } if !self.is_null(row) => {
                Some(&data[offsets[row] as usize..offsets[row + 1] as usize])
            }
            _ => None,
        }
    }

    /// All integer values (placeholders where null); empty for other types.
    #[inline]
    pub(crate) fn ints(&self) -> &[i64] {
        match &self.values {
            Values::Int(v) => v,
            _ => &[],
        }
    }

    #[inline]
    pub(crate) fn floats(&self) -> &[f64] {
        match &self.values {
            Values::Float(v) => v,
            _ => &[],
        }
    }

    pub(crate) fn get(&self, row: usize) -> ValueRef<'_> {
        if self.is_null(row) {
            return ValueRef::Null;
        }
        match &self.values {
            Values::Bool(v) => ValueRef::Bool(v[row]),
            Values::Int(v) => ValueRef::Int(v[row]),
            Values::Float(v) => ValueRef::Float(v[row]),
            Values::Str { offsets, data } => {
                ValueRef::Str(&data[offsets[row] as usize..offsets[row + 1] as usize])
            }
        }
    }

    pub(crate) fn push_null(&mut self) {
        let row = self.len;
        match &mut self.values {
            Values::Bool(v) => v.push(false),
            Values::Int(v) => v.push(0),
            Values::Float(v) => v.push(0.0),
            Values::Str { offsets, data } => offsets.push(data.len() as u32),
        }
        self.len += 1;
        let bits = self.nulls.get_or_insert_with(Vec::new);
        bits.resize(self.len.div_ceil(64), 0);
        bits[row / 64] |= 1 << (row % 64);
    }

    #[inline(always)]
    fn pushed(&mut self) {
        self.len += 1;
        if let Some(bits) = &mut self.nulls {
            bits.resize(self.len.div_ceil(64), 0);
        }
    }

    /// Appends an integer. Panics if the column is not `int`: the plan
    /// guarantees types, so a mismatch is a bug, not bad input.
    #[inline(always)]
    pub(crate) fn push_int(&mut self, x: i64) {
        match &mut self.values {
            Values::Int(v) => v.push(x),
            _ => type_mismatch(DataType::Int, self.data_type()),
        }
        self.pushed();
    }

    #[inline(always)]
    pub(crate) fn push_float(&mut self, x: f64) {
        match &mut self.values {
            Values::Float(v) => v.push(x),
            _ => type_mismatch(DataType::Float, self.data_type()),
        }
        self.pushed();
    }

    #[inline(always)]
    pub(crate) fn push_bool(&mut self, x: bool) {
        match &mut self.values {
            Values::Bool(v) => v.push(x),
            _ => type_mismatch(DataType::Bool, self.data_type()),
        }
        self.pushed();
    }

    #[inline(always)]
    pub(crate) fn push_str(&mut self, x: &str) {
        match &mut self.values {
            Values::Str { offsets, data } => {
                data.push_str(x);
                offsets.push(data.len() as u32);
            }
            _ => type_mismatch(DataType::Str, self.data_type()),
        }
        self.pushed();
    }

    /// Appends non-null integers (a generator filling a whole column).
    #[inline]
    pub(crate) fn extend_ints(&mut self, values: impl ExactSizeIterator<Item = i64>) {
        let n = values.len();
        match &mut self.values {
            Values::Int(v) => v.extend(values),
            _ => type_mismatch(DataType::Int, self.data_type()),
        }
        self.len += n;
        if let Some(bits) = &mut self.nulls {
            bits.resize(self.len.div_ceil(64), 0);
        }
    }

    /// Appends a value of the column's type, or null. Ints widen to floats.
    pub(crate) fn push_value(&mut self, v: ValueRef<'_>) {
        match (v, self.data_type()) {
            (ValueRef::Null, _) => self.push_null(),
            (ValueRef::Int(x), DataType::Float) => self.push_float(x as f64),
            (ValueRef::Int(x), _) => self.push_int(x),
            (ValueRef::Float(x), _) => self.push_float(x),
            (ValueRef::Bool(x), _) => self.push_bool(x),
            (ValueRef::Str(x), _) => self.push_str(x),
        }
    }

    /// Appends row `row` of `other`, a column of the same type.
    #[inline]
    pub(crate) fn push_from(&mut self, other: &Column, row: usize) {
        if other.is_null(row) {
            self.push_null();
            return;
        }
        match (&mut self.values, &other.values) {
            (Values::Bool(a), Values::Bool(b)) => a.push(b[row]),
            (Values::Int(a), Values::Int(b)) => a.push(b[row]),
            (Values::Float(a), Values::Float(b)) => a.push(b[row]),
            (
                Values::Str { offsets, data },
                Values::Str {
                    offsets: bo,
                    data: bd,
                },
            ) => {
                data.push_str(&bd[bo[row] as usize..bo[row + 1] as usize]);
                offsets.push(data.len() as u32);
            }
            _ => type_mismatch(self.data_type(), other.data_type()),
        }
        self.pushed();
    }

    /// A new column holding the rows `rows` of `self`, in that order.
    pub(crate) fn gather(&self, rows: &[u32]) -> Column {
        let mut out = Column::new(self.data_type(), rows.len());
        match (&mut out.values, &self.values) {
            (Values::Int(a), Values::Int(b)) if self.nulls.is_none() => {
                a.extend(rows.iter().map(|&r| b[r as usize]));
                out.len = rows.len();
            }
            (Values::Float(a), Values::Float(b)) if self.nulls.is_none() => {
                a.extend(rows.iter().map(|&r| b[r as usize]));
                out.len = rows.len();
            }
            _ => rows.iter().for_each(|&r| out.push_from(self, r as usize)),
        }
        out
    }

    /// Drops rows from `len` on; used to undo a partly parsed record.
    pub(crate) fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        match &mut self.values {
            Values::Bool(v) => v.truncate(len),
            Values::Int(v) => v.truncate(len),
            Values::Float(v) => v.truncate(len),
            Values::Str { offsets, data } => {
                offsets.truncate(len + 1);
                data.truncate(offsets[len] as usize);
            }
        }
        self.len = len;
        if let Some(bits) = &mut self.nulls {
            bits.truncate(len.div_ceil(64));
            if !len.is_multiple_of(64) {
                let last = bits.len() - 1;
                bits[last] &= (1u64 << (len % 64)) - 1;
            }
            if bits.iter().all(|&w| w == 0) {
                self.nulls = None;
            }
        }
    }
}

impl Column {
    /// The column as it goes on the wire, borrowed.
    pub(crate) fn wire(&self) -> super::wire::ColumnRef<'_> {
        use super::wire::ValuesRef;
        super::wire::ColumnRef {
            values: match &self.values {
                Values::Bool(v) => ValuesRef::Bool(v),
                Values::Int(v) => ValuesRef::Int(v),
                Values::Float(v) => ValuesRef::Float(v),
                Values::Str { offsets, data } => ValuesRef::Str { offsets, data },
            },
            nulls: self.nulls.as_deref(),
        }
    }

    /// A column from the wire, checked: type `ty`, `len` rows, string
    /// offsets in order and on character boundaries, a null bitmap of the
    /// right size.
    pub(crate) fn from_wire(
        w: super::wire::WireColumn,
        ty: DataType,
        len: usize,
    ) -> Result<Column, String> {
        use super::wire::WireValues;
        let found = super::wire::type_of(&w.values);
        if found != ty {
            return Err(format!("{found} values where {ty} is expected"));
        }
        let rows = match &w.values {
            WireValues::Bool(v) => v.len(),
            WireValues::Int(v) => v.len(),
            WireValues::Float(v) => v.len(),
            WireValues::Str { offsets, data } => {
                let ordered = offsets.first() == Some(&0)
                    && offsets.windows(2).all(|p| p[0] <= p[1])
                    && offsets.last().is_some_and(|&l| l as usize == data.len())
                    && offsets.iter().all(|&o| data.is_char_boundary(o as usize));
                if !ordered {
                    return Err("string offsets are out of order".into());
                }
                offsets.len() - 1
            }
        };
        if rows != len {
            return Err(format!("{rows} values for {len} rows"));
        }
        if let Some(bits) = &w.nulls
            && bits.len() != len.div_ceil(64)
        {
            return Err(format!(
                "a null bitmap of {} words for {len} rows",
                bits.len()
            ));
        }
        let values = match w.values {
            WireValues::Bool(v) => Values::Bool(v),
            WireValues::Int(v) => Values::Int(v),
            WireValues::Float(v) => Values::Float(v),
            WireValues::Str { offsets, data } => Values::Str { offsets, data },
        };
        Ok(Column {
            values,
            nulls: w.nulls,
            len,
        })
    }
}

#[cold]
#[inline(never)]
fn type_mismatch(expected: DataType, found: DataType) -> ! {
    panic!("column type mismatch: pushing {expected} into a {found} column (plan bug)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_survive_gather_and_truncate() {
        let mut c = Column::new(DataType::Str, 4);
        c.push_str("a");
        c.push_null();
        c.push_str("ccc");
        assert_eq!(c.get(0), ValueRef::Str("a"));
        assert_eq!(c.get(1), ValueRef::Null);
        assert_eq!(c.str(2), Some("ccc"));
        let g = c.gather(&[2, 1, 0]);
        assert_eq!(g.get(0), ValueRef::Str("ccc"));
        assert!(g.is_null(1));
        c.truncate(1);
        assert_eq!(c.len(), 1);
        assert!(!c.has_nulls());
        c.push_str("d");
        assert_eq!(c.str(1), Some("d"));
    }

    #[test]
    fn many_rows_cross_bitmap_words() {
        let mut c = Column::new(DataType::Int, 0);
        for i in 0..200 {
            if i % 3 == 0 {
                c.push_null()
            } else {
                c.push_int(i)
            }
        }
        for i in 0..200 {
            assert_eq!(c.int(i as usize), if i % 3 == 0 { None } else { Some(i) });
        }
        c.truncate(65);
        assert!(c.is_null(63));
        assert!(!c.is_null(64));
        c.push_null();
        assert!(c.is_null(65));
    }
}
