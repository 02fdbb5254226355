//! SQL expressions compiled into typed closures over a batch's columns.
//!
//! The syntax tree is walked once, at plan time; per record only closures
//! run.
//!
//! Layout: `lex` and `parse` (text to the syntax tree in `ast`), `compile` (the AST walk and
//! type checks) with one file per group of operators (`arith`, `compare`,
//! `logic`, `like`, `cast`, `conditional`) and functions (`functions`
//! dispatches to `strings` and `math`), `node` (the typed intermediate form
//! the operators build on), `names` (field lookup) and `aggregate`.

use std::borrow::Cow;

mod aggregate;
mod arith;
mod ast;
mod cast;
mod compare;
mod compile;
mod conditional;
mod functions;
mod lex;
mod like;
mod logic;
mod math;
mod names;
mod node;
mod parse;
mod strings;
#[cfg(test)]
mod tests;

use crate::data::{Batch, Column, DataType, Schema};

/// Why an expression was rejected at plan time. `offset` is the byte offset
/// inside the expression text where the problem starts, so the caller can
/// point at the file's line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExprError {
    pub(crate) offset: usize,
    pub(crate) message: String,
}

/// Why evaluating an expression failed for one record (division by zero, a
/// failed CAST, ...). The record goes to the dead-letter output with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EvalError(pub(crate) Cow<'static, str>);

pub(crate) type EvalResult<T> = Result<Option<T>, EvalError>;
pub(crate) type BoolFn = Box<dyn Fn(&Batch, usize) -> EvalResult<bool> + Send + Sync>;
pub(crate) type IntFn = Box<dyn Fn(&Batch, usize) -> EvalResult<i64> + Send + Sync>;
pub(crate) type FloatFn = Box<dyn Fn(&Batch, usize) -> EvalResult<f64> + Send + Sync>;
pub(crate) type StrFn =
    Box<dyn for<'b> Fn(&'b Batch, usize) -> EvalResult<Cow<'b, str>> + Send + Sync>;

/// A compiled expression; `None` results are SQL NULL.
pub(crate) enum Compiled {
    Bool(BoolFn),
    Int(IntFn),
    Float(FloatFn),
    Str(StrFn),
}

impl Compiled {
    pub(crate) fn data_type(&self) -> DataType {
        match self {
            Compiled::Bool(_) => DataType::Bool,
            Compiled::Int(_) => DataType::Int,
            Compiled::Float(_) => DataType::Float,
            Compiled::Str(_) => DataType::Str,
        }
    }

    /// Evaluates row `row` and appends the result to `out`, a column of
    /// this expression's type.
    pub(crate) fn eval_into(
        &self,
        batch: &Batch,
        row: usize,
        out: &mut Column,
    ) -> Result<(), EvalError> {
        match self {
            Compiled::Bool(f) => match f(batch, row)? {
                Some(v) => out.push_bool(v),
                None => out.push_null(),
            },
            Compiled::Int(f) => match f(batch, row)? {
                Some(v) => out.push_int(v),
                None => out.push_null(),
            },
            Compiled::Float(f) => match f(batch, row)? {
                Some(v) => out.push_float(v),
                None => out.push_null(),
            },
            Compiled::Str(f) => match f(batch, row)? {
                Some(s) => out.push_str(&s),
                None => out.push_null(),
            },
        }
        Ok(())
    }
}

/// Parses `text` as one SQL expression and compiles it against `schema`.
pub(crate) fn compile(text: &str, schema: &Schema) -> Result<Compiled, ExprError> {
    let expr = parse::parse(text)?;
    Ok(compile::Compiler::new(text, schema)
        .expr(&expr)?
        .into_compiled())
}

/// The aggregate functions of a `window` transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AggFunc {
    /// `count(*)`
    CountRows,
    /// `count(x)`: rows where `x` is not null
    Count,
    Sum,
    Min,
    Max,
    Avg,
    First,
    Last,
    /// `count_distinct(x)` or `count(DISTINCT x)`
    CountDistinct,
}

/// One aggregate call such as `avg(temp)` or `count(*)`.
pub(crate) struct AggCall {
    pub(crate) func: AggFunc,
    /// The argument; `None` only for `count(*)`.
    pub(crate) arg: Option<Compiled>,
    /// The argument's column when it is a bare field (`sum(price)`), so it
    /// can be read directly instead of evaluated.
    pub(crate) field: Option<usize>,
    /// The type of the aggregate's result.
    pub(crate) output: DataType,
}

/// Parses and type-checks an aggregate call against the window's input.
pub(crate) fn compile_aggregate(text: &str, schema: &Schema) -> Result<AggCall, ExprError> {
    aggregate::compile_aggregate(text, schema)
}
