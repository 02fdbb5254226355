//! `select` and `drop`: keep some fields. Costs a reference count per column.

use std::sync::Arc;

use crate::data::{Batch, SchemaRef};
use crate::exec::operator::{OpCtx, Operator};

pub(crate) struct Project {
    keep: Arc<Vec<usize>>,
    output: SchemaRef,
}

impl Project {
    pub(crate) fn new(keep: Arc<Vec<usize>>, output: SchemaRef) -> Project {
        Project { keep, output }
    }
}

impl Operator for Project {
    fn on_batch(&mut self, _port: usize, batch: Batch, ctx: &mut OpCtx<'_>) {
        let columns = self
            .keep
            .iter()
            .map(|&i| batch.columns()[i].clone())
            .collect();
        ctx.emit(batch.with_columns(self.output.clone(), columns));
    }
}
