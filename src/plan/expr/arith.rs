//! Arithmetic (`+ - * / %`, unary minus) and `||`.
//!
//! Int with int stays int, with checked operations: overflow is an error for
//! the record rather than a silently wrapped value. Anything with a float is
//! computed as float. Division and modulo by zero are errors for both, as in
//! Postgres.

use std::borrow::Cow;

use super::ast::{ArithOp, Expr};

use super::compile::{Compiler, type_name};
use super::node::{KFloat, KInt, Kind, Node, Operand, map2};
use super::{EvalError, ExprError};
use crate::data::DataType;

impl ArithOp {
    fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        }
    }
}

pub(crate) const DIVISION_BY_ZERO: EvalError = EvalError(Cow::Borrowed("division by zero"));

fn overflow(op: ArithOp) -> EvalError {
    EvalError(Cow::Borrowed(match op {
        ArithOp::Add => "integer overflow in `+`",
        ArithOp::Sub => "integer overflow in `-`",
        ArithOp::Mul => "integer overflow in `*`",
        ArithOp::Div => "integer overflow in `/`",
        ArithOp::Rem => "integer overflow in `%`",
    }))
}

impl Compiler<'_> {
    pub(crate) fn arith(&self, op: ArithOp, left: &Expr, right: &Expr) -> Result<Node, ExprError> {
        let a = self.expr(left)?;
        let b = self.expr(right)?;
        self.arith_nodes(op, (left, a), (right, b), &format!("`{}`", op.symbol()))
    }

    /// `a op b` for compiled operands; `what` names the operator or function
    /// in type errors.
    pub(crate) fn arith_nodes(
        &self,
        op: ArithOp,
        (left, a): (&Expr, Node),
        (right, b): (&Expr, Node),
        what: &str,
    ) -> Result<Node, ExprError> {
        for (e, n) in [(left, &a), (right, &b)] {
            if n.ty() == Some(DataType::Str) && op == ArithOp::Add {
                return Err(self.error(
                    self.at(e),
                    format!("{what} needs a number, got string (use `||` to concatenate strings)"),
                ));
            }
            self.need_numeric(e, n, what)?;
        }
        Ok(match (a.ty(), b.ty()) {
            (None, None) => Node::Null,
            (Some(DataType::Float), _) | (_, Some(DataType::Float)) => {
                Node::Float(float_arith(op, KFloat::operand(a), KFloat::operand(b)))
            }
            _ => Node::Int(int_arith(op, KInt::operand(a), KInt::operand(b))),
        })
    }

    pub(crate) fn negate(&self, e: &Expr, x: Node) -> Result<Node, ExprError> {
        self.need_numeric(e, &x, "unary `-`")?;
        Ok(match x {
            Node::Int(a) => Node::Int(Operand::new(move |b, r| match a.eval(b, r)? {
                Some(x) => x
                    .checked_neg()
                    .map(Some)
                    .ok_or(EvalError(Cow::Borrowed("integer overflow in unary `-`"))),
                None => Ok(None),
            })),
            Node::Float(a) => Node::Float(Operand::new(move |b, r| Ok(a.eval(b, r)?.map(|x| -x)))),
            other => other,
        })
    }

    /// `a || b`: string concatenation; a non-string side is converted to
    /// text as by CAST. NULL on either side gives NULL (unlike `concat`).
    pub(crate) fn concat_op(
        &self,
        left: &Expr,
        right: &Expr,
        at: usize,
    ) -> Result<Node, ExprError> {
        let a = self.expr(left)?;
        let b = self.expr(right)?;
        // One side must be text (or an untyped NULL); `1 || 2` is a mistake.
        let textual = |n: &Node| matches!(n.ty(), None | Some(DataType::Str));
        if !textual(&a) && !textual(&b) {
            return Err(self.error(
                at,
                format!(
                    "`||` concatenates strings, got {} and {} (use CAST(x AS VARCHAR))",
                    type_name(a.ty()),
                    type_name(b.ty())
                ),
            ));
        }
        let a = super::cast::to_text(a);
        let b = super::cast::to_text(b);
        Ok(Node::Str(Operand::new(move |batch, r| {
            let Some(x) = a.eval(batch, r)? else {
                return Ok(None);
            };
            let Some(y) = b.eval(batch, r)? else {
                return Ok(None);
            };
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(&x);
            s.push_str(&y);
            Ok(Some(Cow::Owned(s)))
        })))
    }
}

pub(crate) fn int_arith(op: ArithOp, a: Operand<KInt>, b: Operand<KInt>) -> Operand<KInt> {
    match op {
        ArithOp::Add => map2(a, b, move |x: i64, y: i64| {
            x.checked_add(y).ok_or_else(|| overflow(op))
        }),
        ArithOp::Sub => map2(a, b, move |x: i64, y: i64| {
            x.checked_sub(y).ok_or_else(|| overflow(op))
        }),
        ArithOp::Mul => map2(a, b, move |x: i64, y: i64| {
            x.checked_mul(y).ok_or_else(|| overflow(op))
        }),
        ArithOp::Div => map2(a, b, move |x: i64, y: i64| {
            if y == 0 {
                return Err(DIVISION_BY_ZERO);
            }
            x.checked_div(y).ok_or_else(|| overflow(op))
        }),
        // `i64::MIN % -1` overflows in the CPU but is 0 mathematically.
        ArithOp::Rem => map2(a, b, |x: i64, y: i64| {
            if y == 0 {
                Err(DIVISION_BY_ZERO)
            } else {
                Ok(x.wrapping_rem(y))
            }
        }),
    }
}

pub(crate) fn float_arith(op: ArithOp, a: Operand<KFloat>, b: Operand<KFloat>) -> Operand<KFloat> {
    match op {
        ArithOp::Add => map2(a, b, |x: f64, y: f64| Ok(x + y)),
        ArithOp::Sub => map2(a, b, |x: f64, y: f64| Ok(x - y)),
        ArithOp::Mul => map2(a, b, |x: f64, y: f64| Ok(x * y)),
        ArithOp::Div => map2(a, b, |x: f64, y: f64| {
            if y == 0.0 {
                Err(DIVISION_BY_ZERO)
            } else {
                Ok(x / y)
            }
        }),
        ArithOp::Rem => map2(a, b, |x: f64, y: f64| {
            if y == 0.0 {
                Err(DIVISION_BY_ZERO)
            } else {
                Ok(x % y)
            }
        }),
    }
}
