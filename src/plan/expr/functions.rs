//! Function calls: checking the call's form and arity, and dispatching by
//! (case-insensitive) name to the string, math and conditional functions.

use super::ast::{ArithOp, Expr, Function, TrimSide};

use super::ExprError;
use super::compile::Compiler;
use super::names::suggest;
use super::node::Node;

/// The scalar functions, for "unknown function" messages.
const FUNCTIONS: &[&str] = &[
    "abs",
    "ceil",
    "ceiling",
    "char_length",
    "character_length",
    "coalesce",
    "concat",
    "ends_with",
    "exp",
    "floor",
    "greatest",
    "if",
    "least",
    "length",
    "ln",
    "log10",
    "lower",
    "lpad",
    "ltrim",
    "mod",
    "nullif",
    "position",
    "pow",
    "power",
    "replace",
    "round",
    "rpad",
    "rtrim",
    "sign",
    "sqrt",
    "starts_with",
    "substr",
    "substring",
    "trim",
    "upper",
];

/// The aggregate functions of a window's `aggregates`.
pub(crate) const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "first",
    "last",
    "count_distinct",
];

impl Compiler<'_> {
    pub(crate) fn function(&self, f: &Function, at: usize) -> Result<Node, ExprError> {
        let name = f.name.clone();
        if AGGREGATES.contains(&name.as_str()) {
            let message = match self.aggregate() {
                Some(outer) => {
                    format!("aggregate functions cannot be nested: `{name}` inside `{outer}`")
                }
                None => format!(
                    "aggregate function `{name}` is only allowed in a window's `aggregates`"
                ),
            };
            return Err(self.error(at, message));
        }
        if !FUNCTIONS.contains(&name.as_str()) {
            let mut message = format!("unknown function `{name}`");
            if let Some(s) = suggest(&name, FUNCTIONS.iter().copied()) {
                message.push_str(&format!(" (did you mean `{s}`?)"));
            }
            message.push_str(&format!("; supported functions: {}", FUNCTIONS.join(", ")));
            return Err(self.error(at, message));
        }
        let args = self.plain_args(f, at)?;
        let n = args.len();
        let arity = |min: usize, max: Option<usize>| self.arity(&name, n, min, max, at);
        match name.as_str() {
            "lower" | "upper" => {
                arity(1, Some(1))?;
                self.change_case(args[0], &name, name == "upper")
            }
            "length" | "char_length" | "character_length" => {
                arity(1, Some(1))?;
                self.length(args[0], &name)
            }
            "concat" => {
                arity(1, None)?;
                self.concat_fn(&args)
            }
            "substring" | "substr" => {
                arity(2, Some(3))?;
                self.substring(args[0], Some(args[1]), args.get(2).copied())
            }
            "trim" | "ltrim" | "rtrim" => {
                arity(1, Some(2))?;
                let side = match name.as_str() {
                    "ltrim" => TrimSide::Leading,
                    "rtrim" => TrimSide::Trailing,
                    _ => TrimSide::Both,
                };
                self.trim_fn(&name, args[0], args.get(1).copied(), side)
            }
            "replace" => {
                arity(3, Some(3))?;
                self.replace(args[0], args[1], args[2])
            }
            "starts_with" | "ends_with" => {
                arity(2, Some(2))?;
                self.starts_ends_with(&name, args[0], args[1], name == "starts_with")
            }
            "position" => {
                arity(2, Some(2))?;
                self.position(args[0], args[1])
            }
            "lpad" | "rpad" => {
                arity(2, Some(3))?;
                self.pad(
                    &name,
                    args[0],
                    args[1],
                    args.get(2).copied(),
                    name == "lpad",
                )
            }
            "abs" => {
                arity(1, Some(1))?;
                self.abs(args[0])
            }
            "sign" => {
                arity(1, Some(1))?;
                self.sign(args[0])
            }
            "round" => {
                arity(1, Some(2))?;
                self.round(args[0], args.get(1).copied())
            }
            "floor" | "ceil" | "ceiling" => {
                arity(1, Some(1))?;
                self.ceil_floor_fn(&name, args[0], name != "floor")
            }
            "sqrt" | "exp" | "ln" | "log10" => {
                arity(1, Some(1))?;
                self.float_fn(&name, args[0])
            }
            "power" | "pow" => {
                arity(2, Some(2))?;
                self.power(&name, args[0], args[1])
            }
            "mod" => {
                arity(2, Some(2))?;
                let (a, b) = (self.expr(args[0])?, self.expr(args[1])?);
                self.arith_nodes(ArithOp::Rem, (args[0], a), (args[1], b), "`mod`")
            }
            "greatest" | "least" => {
                arity(1, None)?;
                self.extreme(&name, &args, name == "greatest")
            }
            "coalesce" => {
                arity(1, None)?;
                self.coalesce(&args)
            }
            "nullif" => {
                arity(2, Some(2))?;
                self.nullif(args[0], args[1], at)
            }
            "if" => {
                arity(3, Some(3))?;
                self.if_fn(args[0], args[1], args[2])
            }
            _ => unreachable!("`{name}` is in FUNCTIONS but not dispatched"),
        }
    }

    /// The arguments of a plain call `name(a, b, ...)`; the SQL extras
    /// (DISTINCT, FILTER, OVER, named arguments, ...) are errors here.
    /// The arguments of a plain call: no `*`, no DISTINCT.
    pub(crate) fn plain_args<'f>(
        &self,
        f: &'f Function,
        at: usize,
    ) -> Result<Vec<&'f Expr>, ExprError> {
        if f.star {
            return Err(self.error(at, "`*` is only allowed in count(*)"));
        }
        if f.distinct {
            return Err(self.error(at, "DISTINCT is only allowed in count(DISTINCT x)"));
        }
        Ok(f.args.iter().collect())
    }

    pub(crate) fn arity(
        &self,
        name: &str,
        got: usize,
        min: usize,
        max: Option<usize>,
        at: usize,
    ) -> Result<(), ExprError> {
        if got >= min && max.is_none_or(|m| got <= m) {
            return Ok(());
        }
        let plural = |n: usize| if n == 1 { "argument" } else { "arguments" };
        let takes = match max {
            Some(m) if m == min => format!("{min} {}", plural(min)),
            Some(m) if m == min + 1 => format!("{min} or {m} arguments"),
            Some(m) => format!("{min} to {m} arguments"),
            None => format!("at least {min} {}", plural(min)),
        };
        Err(self.error(at, format!("`{name}` takes {takes}, got {got}")))
    }
}
