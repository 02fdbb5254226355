//! `CAST(x AS t)`, `TRY_CAST` and `x::t`, and the conversion to text used
//! by `||` and `concat`.
//!
//! The target type is resolved at plan time; per record only the one
//! conversion runs. A failed conversion is an error for the record (CAST)
//! or NULL (TRY_CAST).

use std::borrow::Cow;

use super::ast::{Expr, TypeName};
use super::compile::{Compiler, type_name};
use super::node::{KBool, KFloat, KInt, KStr, Kind, Node, Operand, map1, map1_opt};
use super::{EvalError, ExprError};
use crate::data::DataType;

const TARGETS: &str = "INT/INTEGER/BIGINT/SMALLINT, DOUBLE/FLOAT/REAL/DECIMAL/NUMERIC, \
VARCHAR/CHAR/TEXT/STRING and BOOLEAN";

/// The eddy type a SQL type name maps to.
fn target_type(t: &TypeName) -> Option<DataType> {
    Some(match t.name.as_str() {
        "INT" | "INTEGER" | "BIGINT" | "SMALLINT" | "TINYINT" | "INT2" | "INT4" | "INT8"
        | "INT64" | "SIGNED" | "SIGNED INTEGER" => DataType::Int,
        "DOUBLE" | "DOUBLE PRECISION" | "FLOAT" | "FLOAT4" | "FLOAT8" | "FLOAT64" | "REAL"
        | "DECIMAL" | "DEC" | "NUMERIC" => DataType::Float,
        "VARCHAR" | "CHAR" | "CHARACTER" | "CHARACTER VARYING" | "CHAR VARYING" | "NVARCHAR"
        | "TEXT" | "STRING" => DataType::Str,
        "BOOLEAN" | "BOOL" => DataType::Bool,
        _ => return None,
    })
}

impl Compiler<'_> {
    pub(crate) fn cast(
        &self,
        expr: &Expr,
        target: &TypeName,
        is_try: bool,
        at: usize,
    ) -> Result<Node, ExprError> {
        let Some(to) = target_type(target) else {
            return Err(self.error(
                target.at,
                format!(
                    "cannot cast to {}: the supported types are {TARGETS}",
                    target.text
                ),
            ));
        };
        let x = self.expr(expr)?;
        let Some(from) = x.ty() else {
            return Ok(Node::null_of(Some(to)));
        };
        if from == DataType::Float && to == DataType::Bool {
            return Err(self.error(
                self.at(expr),
                "cannot cast float to bool; compare it instead, e.g. `x <> 0`",
            ));
        }
        // A failed conversion gives NULL in TRY_CAST.
        fn fallible<A: Kind, R: Kind>(
            x: Operand<A>,
            is_try: bool,
            f: impl for<'x> Fn(A::Ref<'x>) -> Result<R::Value, EvalError> + Send + Sync + 'static,
        ) -> Operand<R> {
            if is_try {
                map1_opt::<A, R>(x, move |v| Ok(f(v).ok()))
            } else {
                map1(x, f)
            }
        }
        Ok(match (x, to) {
            (x, to) if x.ty() == Some(to) => x,
            (Node::Int(a), DataType::Float) => Node::Float(KFloat::operand(Node::Int(a))),
            (Node::Int(a), DataType::Bool) => Node::Bool(map1(a, |v: i64| Ok(v != 0))),
            (Node::Bool(a), DataType::Int) => Node::Int(map1(a, |v: bool| Ok(i64::from(v)))),
            (Node::Bool(a), DataType::Float) => {
                Node::Float(map1(a, |v: bool| Ok(f64::from(u8::from(v)))))
            }
            (Node::Float(a), DataType::Int) => {
                Node::Int(fallible::<KFloat, KInt>(a, is_try, float_to_int))
            }
            (Node::Str(a), DataType::Int) => {
                Node::Int(fallible::<KStr, KInt>(a, is_try, |s| parse_int(&s)))
            }
            (Node::Str(a), DataType::Float) => {
                Node::Float(fallible::<KStr, KFloat>(a, is_try, |s| parse_float(&s)))
            }
            (Node::Str(a), DataType::Bool) => {
                Node::Bool(fallible::<KStr, KBool>(a, is_try, |s| parse_bool(&s)))
            }
            (x, DataType::Str) => Node::Str(to_text(x)),
            (x, to) => {
                return Err(self.error(at, format!("cannot cast {} to {to}", type_name(x.ty()))));
            }
        })
    }
}

/// Any value as text, as `CAST(x AS VARCHAR)` gives it.
pub(crate) fn to_text(x: Node) -> Operand<KStr> {
    match x {
        Node::Null => Operand::Const(None),
        Node::Str(a) => a,
        Node::Bool(a) => map1(
            a,
            |v: bool| Ok(if v { "true" } else { "false" }.to_string()),
        ),
        Node::Int(a) => map1(a, |v: i64| Ok(v.to_string())),
        Node::Float(a) => map1(a, |v: f64| Ok(float_text(v))),
    }
}

/// Floats print as the shortest text that reads back as the same number,
/// always with a `.` or exponent so they read as floats: `1.0`, `0.1`,
/// `1e30`, `NaN`, `inf`.
pub(crate) fn float_text(v: f64) -> String {
    ryu::Buffer::new().format(v).to_string()
}

/// Truncates toward zero, as Flink does; out of range or NaN fails.
fn float_to_int(v: f64) -> Result<i64, EvalError> {
    // 2^63 is exactly representable; every float below it (and at or above
    // -2^63) truncates to an i64. NaN is in no range.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if !(-LIMIT..LIMIT).contains(&v) {
        return Err(EvalError(Cow::Owned(format!(
            "cannot cast {} to int: out of range",
            float_text(v)
        ))));
    }
    Ok(v.trunc() as i64)
}

fn parse_int(s: &str) -> Result<i64, EvalError> {
    s.trim().parse().map_err(|_| cannot_cast(s, "int"))
}

fn parse_float(s: &str) -> Result<f64, EvalError> {
    s.trim().parse().map_err(|_| cannot_cast(s, "float"))
}

/// The spellings Postgres accepts.
fn parse_bool(s: &str) -> Result<bool, EvalError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "yes" | "y" | "on" | "1" => Ok(true),
        "false" | "f" | "no" | "n" | "off" | "0" => Ok(false),
        _ => Err(cannot_cast(s, "bool")),
    }
}

fn cannot_cast(s: &str, to: &str) -> EvalError {
    // Quote at most a bounded prefix: the message goes to the dead-letter
    // output with the record, which already has the whole value.
    const MAX: usize = 40;
    let shown = match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    };
    EvalError(Cow::Owned(format!("cannot cast '{shown}' to {to}")))
}
