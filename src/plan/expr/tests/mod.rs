//! Tests of the expression compiler: helpers here, cases by topic in the
//! submodules.

use std::sync::Arc;

use super::{Compiled, EvalError, ExprError, compile};
use crate::data::{Batch, BatchBuilder, DataType, Field, Schema, ValueRef};

mod aggregates;
mod bench;
mod casts;
mod errors;
mod fields;
mod functions;
mod like;
mod operators;
mod property;
mod syntax;

/// An owned result value, for assertions.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Val {
    Null,
    B(bool),
    I(i64),
    F(f64),
    S(String),
}

pub(super) use Val::{B, F, I, Null};

pub(super) fn s(text: &str) -> Val {
    Val::S(text.to_string())
}

/// The fields of the test stream.
pub(super) fn schema() -> Schema {
    Schema::new(vec![
        Field::new("sensor", DataType::Str),
        Field::new("temp", DataType::Float),
        Field::new("humidity", DataType::Float),
        Field::new("ts", DataType::Int),
        Field::new("n", DataType::Int),
        Field::new("ok", DataType::Bool),
        Field::new("name", DataType::Str),
        Field::new("x", DataType::Float),
        Field::new("Mixed Case", DataType::Int),
    ])
}

/// Row 0 has a value in every field, row 1 NULL in the nullable ones
/// (`n`, `ok`, `name`, `x`), row 2 multi-byte text and negative numbers.
pub(super) fn batch() -> Batch {
    use ValueRef as V;
    rows(
        schema(),
        &[
            vec![
                V::Str("a1"),
                V::Float(31.5),
                V::Float(70.0),
                V::Int(1000),
                V::Int(7),
                V::Bool(true),
                V::Str("Hello World"),
                V::Float(2.5),
                V::Int(1),
            ],
            vec![
                V::Str("b2"),
                V::Float(20.0),
                V::Float(90.0),
                V::Int(2000),
                V::Null,
                V::Null,
                V::Null,
                V::Null,
                V::Int(2),
            ],
            vec![
                V::Str("ünïcødé"),
                V::Float(-4.25),
                V::Float(10.0),
                V::Int(-3000),
                V::Int(-2),
                V::Bool(false),
                V::Str("  padded  "),
                V::Float(-0.0),
                V::Int(3),
            ],
        ],
    )
}

pub(super) fn rows(schema: Schema, rows: &[Vec<ValueRef<'_>>]) -> Batch {
    let mut b = BatchBuilder::new(Arc::new(schema), rows.len(), false);
    for (i, row) in rows.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            b.column_mut(c).push_value(*v);
        }
        b.finish_row(0, i as u64);
    }
    b.take()
}

/// Evaluates a compiled expression for one row.
pub(super) fn run(c: &Compiled, batch: &Batch, row: usize) -> Result<Val, EvalError> {
    Ok(match c {
        Compiled::Bool(f) => f(batch, row)?.map_or(Null, B),
        Compiled::Int(f) => f(batch, row)?.map_or(Null, I),
        Compiled::Float(f) => f(batch, row)?.map_or(Null, F),
        Compiled::Str(f) => f(batch, row)?.map_or(Null, |v| Val::S(v.into_owned())),
    })
}

#[track_caller]
pub(super) fn compiled(text: &str) -> Compiled {
    compile(text, &schema()).unwrap_or_else(|e| panic!("`{text}` failed to compile: {e:?}"))
}

/// `text` evaluated for `row` of the test batch; panics on errors.
#[track_caller]
pub(super) fn eval_at(text: &str, row: usize) -> Val {
    run(&compiled(text), &batch(), row)
        .unwrap_or_else(|e| panic!("`{text}` failed on row {row}: {e:?}"))
}

/// `text` evaluated for row 0.
#[track_caller]
pub(super) fn eval(text: &str) -> Val {
    eval_at(text, 0)
}

/// The evaluation error of `text` on row 0.
#[track_caller]
pub(super) fn eval_err(text: &str) -> String {
    match run(&compiled(text), &batch(), 0) {
        Ok(v) => panic!("`{text}` gave {v:?}, expected an error"),
        Err(e) => e.0.into_owned(),
    }
}

/// The type `text` compiles to.
#[track_caller]
pub(super) fn type_of(text: &str) -> DataType {
    compiled(text).data_type()
}

/// The compile error of `text`.
#[track_caller]
pub(super) fn err(text: &str) -> ExprError {
    match compile(text, &schema()) {
        Ok(c) => panic!(
            "`{text}` compiled to {:?}, expected an error",
            c.data_type()
        ),
        Err(e) => e,
    }
}

/// Asserts the compile error's message contains `part` and its offset.
#[track_caller]
pub(super) fn assert_err(text: &str, offset: usize, part: &str) {
    let e = err(text);
    assert!(
        e.message.contains(part),
        "`{text}`: message {:?} lacks {part:?}",
        e.message
    );
    assert_eq!(e.offset, offset, "`{text}`: offset of {:?}", e.message);
}
