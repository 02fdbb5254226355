//! `filter`: keeps the records whose condition is true (not false, not NULL).

use std::sync::Arc;

use crate::data::Batch;
use crate::exec::operator::{OpCtx, Operator};
use crate::plan::expr::Compiled;

pub(crate) struct Filter {
    condition: Arc<Compiled>,
    keep: Vec<u32>,
}

impl Filter {
    pub(crate) fn new(condition: Arc<Compiled>) -> Filter {
        Filter {
            condition,
            keep: Vec::new(),
        }
    }
}

impl Operator for Filter {
    fn on_batch(&mut self, _port: usize, batch: Batch, ctx: &mut OpCtx<'_>) {
        let Compiled::Bool(condition) = &*self.condition else {
            unreachable!("the plan checks that a condition is boolean")
        };
        self.keep.clear();
        for row in 0..batch.len() {
            match condition(&batch, row) {
                Ok(Some(true)) => self.keep.push(row as u32),
                Ok(_) => {}
                Err(e) => ctx.dead_letter(&batch, row, &e.0),
            }
        }
        if self.keep.len() == batch.len() {
            ctx.emit(batch);
        } else if !self.keep.is_empty() {
            ctx.emit(batch.take_rows(&self.keep));
        }
    }
}
