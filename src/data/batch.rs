//! A batch of records and the builder that sources and operators fill.

use std::sync::Arc;

use super::{Column, SchemaRef};

/// Up to `batch_size` records of one stream.
///
/// Columns are shared (`Arc`) so that fan-out and pass-through fields cost a
/// reference count, not a copy.
#[derive(Clone, Debug)]
pub(crate) struct Batch {
    schema: SchemaRef,
    columns: Vec<Arc<Column>>,
    /// Event time (epoch ms) per row; empty for untimed streams.
    event_time: Vec<i64>,
    /// Ingestion time per row on the process clock (`exec::clock`), in ns.
    ingest_ns: Vec<u64>,
    /// Stable key hash per row, set by a keyed exchange; empty otherwise.
    key_hash: Vec<u64>,
    len: usize,
}

impl Batch {
    /// Assembles a batch; every column and metadata vector must have `len`
    /// rows (`event_time` may be empty for untimed streams).
    pub(crate) fn new(
        schema: SchemaRef,
        columns: Vec<Arc<Column>>,
        event_time: Vec<i64>,
        ingest_ns: Vec<u64>,
    ) -> Batch {
        let len = ingest_ns.len();
        debug_assert_eq!(schema.len(), columns.len());
        debug_assert!(
            columns.iter().all(|c| c.len() == len),
            "column lengths differ"
        );
        debug_assert!(event_time.is_empty() || event_time.len() == len);
        Batch {
            schema,
            columns,
            event_time,
            ingest_ns,
            key_hash: Vec::new(),
            len,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes its rows take on the heap, columns and row metadata (see
    /// [`Column::heap_bytes`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        let meta = (self.event_time.len() + self.ingest_ns.len() + self.key_hash.len()) * 8;
        meta + self.columns.iter().map(|c| c.heap_bytes()).sum::<usize>()
    }

    #[inline]
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    #[inline]
    pub(crate) fn column(&self, i: usize) -> &Column {
        &self.columns[i]
    }

    #[inline]
    pub(crate) fn columns(&self) -> &[Arc<Column>] {
        &self.columns
    }

    #[inline]
    pub(crate) fn event_time(&self) -> &[i64] {
        &self.event_time
    }

    #[inline]
    pub(crate) fn ingest_ns(&self) -> &[u64] {
        &self.ingest_ns
    }

    #[inline]
    pub(crate) fn key_hash(&self) -> &[u64] {
        &self.key_hash
    }

    pub(crate) fn set_key_hash(&mut self, hashes: Vec<u64>) {
        debug_assert_eq!(hashes.len(), self.len);
        self.key_hash = hashes;
    }

    /// The same rows with other columns (a `map`, `select` or `drop`).
    pub(crate) fn with_columns(self, schema: SchemaRef, columns: Vec<Arc<Column>>) -> Batch {
        debug_assert!(columns.iter().all(|c| c.len() == self.len));
        Batch {
            schema,
            columns,
            ..self
        }
    }

    /// A new batch of the rows `rows`, in that order (a `filter`, or one
    /// worker's share at an exchange).
    pub(crate) fn take_rows(&self, rows: &[u32]) -> Batch {
        Batch {
            schema: self.schema.clone(),
            columns: self
                .columns
                .iter()
                .map(|c| Arc::new(c.gather(rows)))
                .collect(),
            event_time: if self.event_time.is_empty() {
                Vec::new()
            } else {
                rows.iter().map(|&r| self.event_time[r as usize]).collect()
            },
            ingest_ns: rows.iter().map(|&r| self.ingest_ns[r as usize]).collect(),
            key_hash: if self.key_hash.is_empty() {
                Vec::new()
            } else {
                rows.iter().map(|&r| self.key_hash[r as usize]).collect()
            },
            len: rows.len(),
        }
    }
}

/// Builds a batch row by row. A row is written field by field and then
/// either finished or aborted, so a record that fails half way leaves no
/// trace.
pub(crate) struct BatchBuilder {
    schema: SchemaRef,
    columns: Vec<Column>,
    event_time: Vec<i64>,
    ingest_ns: Vec<u64>,
    timed: bool,
}

impl BatchBuilder {
    pub(crate) fn new(schema: SchemaRef, capacity: usize, timed: bool) -> BatchBuilder {
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::new(f.ty, capacity))
            .collect();
        BatchBuilder {
            schema,
            columns,
            event_time: Vec::with_capacity(if timed { capacity } else { 0 }),
            ingest_ns: Vec::with_capacity(capacity),
            timed,
        }
    }

    /// Finished rows so far.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.ingest_ns.len()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.ingest_ns.is_empty()
    }

    #[inline(always)]
    pub(crate) fn column_mut(&mut self, i: usize) -> &mut Column {
        &mut self.columns[i]
    }

    pub(crate) fn columns_mut(&mut self) -> &mut [Column] {
        &mut self.columns
    }

    /// Completes the row whose fields were just pushed into every column.
    /// `event_time` is ignored for untimed streams.
    #[inline(always)]
    pub(crate) fn finish_row(&mut self, event_time: i64, ingest_ns: u64) {
        if self.timed {
            self.event_time.push(event_time);
        }
        self.ingest_ns.push(ingest_ns);
        debug_assert!(
            self.columns.iter().all(|c| c.len() == self.ingest_ns.len()),
            "a field was not written"
        );
    }

    /// Completes the row just written, taking its event time from the
    /// value just pushed into the int column `time_column`.
    #[inline]
    pub(crate) fn finish_row_from(&mut self, time_column: usize, ingest_ns: u64) {
        let time = self.columns[time_column]
            .ints()
            .last()
            .copied()
            .unwrap_or_default();
        self.finish_row(time, ingest_ns);
    }

    /// Completes the rows just appended to every column in bulk, taking
    /// their event times from the int column `time_column`.
    pub(crate) fn finish_rows(&mut self, time_column: usize, ingest_ns: u64) {
        let done = self.ingest_ns.len();
        let n = self.columns[time_column].len() - done;
        if self.timed {
            self.event_time
                .extend_from_slice(&self.columns[time_column].ints()[done..]);
        }
        self.ingest_ns.resize(done + n, ingest_ns);
        debug_assert!(
            self.columns.iter().all(|c| c.len() == self.ingest_ns.len()),
            "a column was not filled"
        );
    }

    /// Undoes the fields written since the last finished row.
    pub(crate) fn abort_row(&mut self) {
        let len = self.len();
        self.columns.iter_mut().for_each(|c| c.truncate(len));
    }

    /// Takes the finished rows as a batch and starts over, keeping capacity
    /// hints.
    pub(crate) fn take(&mut self) -> Batch {
        let cap = self.len().max(16);
        let columns = self
            .columns
            .iter_mut()
            .map(|c| {
                let ty = c.data_type();
                Arc::new(std::mem::replace(c, Column::new(ty, cap)))
            })
            .collect();
        let event_time = std::mem::replace(
            &mut self.event_time,
            Vec::with_capacity(if self.timed { cap } else { 0 }),
        );
        let ingest_ns = std::mem::replace(&mut self.ingest_ns, Vec::with_capacity(cap));
        Batch::new(self.schema.clone(), columns, event_time, ingest_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{DataType, Field, Schema, ValueRef};

    #[test]
    fn aborted_rows_leave_no_trace() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int),
            Field::new("b", DataType::Str),
        ]));
        let mut b = BatchBuilder::new(schema, 4, true);
        b.column_mut(0).push_int(1);
        b.column_mut(1).push_str("x");
        b.finish_row(10, 1);
        b.column_mut(0).push_int(2);
        b.abort_row();
        b.column_mut(0).push_int(3);
        b.column_mut(1).push_null();
        b.finish_row(30, 3);
        let batch = b.take();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.column(0).get(1), ValueRef::Int(3));
        assert_eq!(batch.column(1).get(1), ValueRef::Null);
        assert_eq!(batch.event_time(), &[10, 30]);
        let picked = batch.take_rows(&[1]);
        assert_eq!(picked.event_time(), &[30]);
        assert_eq!(picked.column(0).get(0), ValueRef::Int(3));
        assert!(b.is_empty());
    }
}
