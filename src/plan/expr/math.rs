//! Math functions. `abs`, `sign`, `round`, `floor` and `ceil` keep an int
//! argument's type; the others compute in float. Domain errors (square
//! root or logarithm of a negative number, ...) are errors for the record,
//! as in Postgres, rather than NaN.

use std::borrow::Cow;

use super::ast::Expr;

use super::compile::Compiler;
use super::node::{KFloat, Kind, Node, Operand, map1, map2};
use super::{EvalError, ExprError};

fn fail(message: &'static str) -> EvalError {
    EvalError(Cow::Borrowed(message))
}

impl Compiler<'_> {
    /// Compiles a numeric argument of function `name`.
    fn numeric_arg(&self, e: &Expr, name: &str) -> Result<Node, ExprError> {
        let node = self.expr(e)?;
        self.need_numeric(e, &node, format!("`{name}`"))?;
        Ok(node)
    }

    pub(crate) fn abs(&self, arg: &Expr) -> Result<Node, ExprError> {
        Ok(match self.numeric_arg(arg, "abs")? {
            Node::Int(x) => Node::Int(map1(x, |v: i64| {
                v.checked_abs().ok_or(fail("integer overflow in `abs`"))
            })),
            Node::Float(x) => Node::Float(map1(x, |v: f64| Ok(v.abs()))),
            other => other,
        })
    }

    /// -1, 0 or 1 (NaN stays NaN).
    pub(crate) fn sign(&self, arg: &Expr) -> Result<Node, ExprError> {
        Ok(match self.numeric_arg(arg, "sign")? {
            Node::Int(x) => Node::Int(map1(x, |v: i64| Ok(v.signum()))),
            Node::Float(x) => Node::Float(map1(x, |v: f64| {
                Ok(if v > 0.0 {
                    1.0
                } else if v < 0.0 {
                    -1.0
                } else {
                    v * 0.0
                })
            })),
            other => other,
        })
    }

    /// `round(x[, digits])`: halves round away from zero. A negative
    /// `digits` rounds to tens, hundreds, ... (also for ints).
    pub(crate) fn round(&self, arg: &Expr, digits: Option<&Expr>) -> Result<Node, ExprError> {
        let x = self.numeric_arg(arg, "round")?;
        let digits = match digits {
            Some(e) => {
                let d = self.expr(e)?;
                self.need_int(e, d, "the digits of `round`")?
            }
            None => Operand::Const(Some(0)),
        };
        Ok(match x {
            Node::Int(x) => Node::Int(map2(x, digits, |v: i64, d: i64| round_int(v, d))),
            Node::Float(x) => Node::Float(map2(x, digits, |v: f64, d: i64| Ok(round_float(v, d)))),
            other => other,
        })
    }

    pub(crate) fn ceil_floor_fn(
        &self,
        name: &str,
        arg: &Expr,
        ceil: bool,
    ) -> Result<Node, ExprError> {
        Ok(match self.numeric_arg(arg, name)? {
            Node::Float(x) if ceil => Node::Float(map1(x, |v: f64| Ok(v.ceil()))),
            Node::Float(x) => Node::Float(map1(x, |v: f64| Ok(v.floor()))),
            // Ints are already whole.
            other => other,
        })
    }

    /// `sqrt`, `exp`, `ln`, `log10`: float results.
    pub(crate) fn float_fn(&self, name: &str, arg: &Expr) -> Result<Node, ExprError> {
        let x = self.numeric_arg(arg, name)?;
        let x = KFloat::operand(x);
        Ok(Node::Float(match name {
            "sqrt" => map1(x, |v: f64| {
                if v < 0.0 {
                    Err(fail("cannot take square root of a negative number"))
                } else {
                    Ok(v.sqrt())
                }
            }),
            "exp" => map1(x, |v: f64| Ok(v.exp())),
            "ln" => map1(x, |v: f64| log_domain(v).map(|v| v.ln())),
            "log10" => map1(x, |v: f64| log_domain(v).map(|v| v.log10())),
            _ => unreachable!("float function `{name}`"),
        }))
    }

    pub(crate) fn power(
        &self,
        name: &str,
        base: &Expr,
        exponent: &Expr,
    ) -> Result<Node, ExprError> {
        let a = KFloat::operand(self.numeric_arg(base, name)?);
        let b = KFloat::operand(self.numeric_arg(exponent, name)?);
        Ok(Node::Float(map2(a, b, |x: f64, y: f64| {
            if x == 0.0 && y < 0.0 {
                return Err(fail("zero raised to a negative power is undefined"));
            }
            if x < 0.0 && y.fract() != 0.0 {
                return Err(fail(
                    "a negative number raised to a non-integer power gives a complex result",
                ));
            }
            Ok(x.powf(y))
        })))
    }
}

fn log_domain(v: f64) -> Result<f64, EvalError> {
    if v == 0.0 {
        Err(fail("cannot take logarithm of zero"))
    } else if v < 0.0 {
        Err(fail("cannot take logarithm of a negative number"))
    } else {
        Ok(v)
    }
}

fn round_int(v: i64, digits: i64) -> Result<i64, EvalError> {
    if digits >= 0 {
        return Ok(v);
    }
    // 10^19 exceeds i64: everything rounds to 0.
    let Some(unit) = u32::try_from(-digits)
        .ok()
        .and_then(|d| 10i64.checked_pow(d))
    else {
        return Ok(0);
    };
    let rest = v % unit;
    let down = v - rest;
    if rest.unsigned_abs() * 2 >= unit.unsigned_abs() {
        down.checked_add(if v < 0 { -unit } else { unit })
            .ok_or(fail("integer overflow in `round`"))
    } else {
        Ok(down)
    }
}

fn round_float(v: f64, digits: i64) -> f64 {
    if digits == 0 || !v.is_finite() {
        return v.round();
    }
    let d = digits.clamp(-400, 400) as i32;
    let scale = 10f64.powi(d.abs());
    if d > 0 {
        let scaled = v * scale;
        // Beyond f64's precision there is nothing left to round.
        if !scaled.is_finite() || scaled.abs() >= 4_503_599_627_370_496.0 {
            v
        } else {
            scaled.round() / scale
        }
    } else if scale.is_finite() {
        (v / scale).round() * scale
    } else {
        0.0
    }
}
