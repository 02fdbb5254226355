//! `map`: computes fields from expressions, replacing or adding them.
//! Every expression sees the input record, not fields computed beside it.

use std::sync::Arc;

use crate::data::{Batch, Column, SchemaRef};
use crate::exec::operator::{OpCtx, Operator};
use crate::plan::MapColumn;

pub(crate) struct Map {
    columns: Arc<Vec<MapColumn>>,
    output: SchemaRef,
    failed: Vec<bool>,
    /// Test-only busy time per record (`cost_per_record`).
    cost_per_record_ns: u64,
}

impl Map {
    pub(crate) fn new(
        columns: Arc<Vec<MapColumn>>,
        output: SchemaRef,
        cost_per_record_ns: u64,
    ) -> Map {
        Map {
            columns,
            output,
            failed: Vec::new(),
            cost_per_record_ns,
        }
    }
}

impl Operator for Map {
    fn on_batch(&mut self, _port: usize, batch: Batch, ctx: &mut OpCtx<'_>) {
        let n = batch.len();
        if self.cost_per_record_ns > 0 {
            // Busy, not asleep: the time must count as processing.
            let until = std::time::Instant::now()
                + std::time::Duration::from_nanos(self.cost_per_record_ns * n as u64);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        self.failed.clear();
        self.failed.resize(n, false);
        let mut any_failed = false;
        let mut out = Vec::with_capacity(self.columns.len());
        for (i, source) in self.columns.iter().enumerate() {
            match source {
                MapColumn::Input(c) => out.push(batch.columns()[*c].clone()),
                MapColumn::Expr(expr) => {
                    let mut col = Column::new(self.output.fields()[i].ty, n);
                    for row in 0..n {
                        if let Err(e) = expr.eval_into(&batch, row, &mut col) {
                            // Keep the column aligned; the row is dropped below.
                            col.push_null();
                            if !self.failed[row] {
                                self.failed[row] = true;
                                any_failed = true;
                                ctx.dead_letter(&batch, row, &e.0);
                            }
                        }
                    }
                    out.push(Arc::new(col));
                }
            }
        }
        let mapped = batch.with_columns(self.output.clone(), out);
        if any_failed {
            let good: Vec<u32> = (0..n as u32)
                .filter(|&r| !self.failed[r as usize])
                .collect();
            ctx.emit(mapped.take_rows(&good));
        } else {
            ctx.emit(mapped);
        }
    }
}
