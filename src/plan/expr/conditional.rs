//! `CASE`, `if`, `coalesce`, `nullif`, `greatest` and `least`.
//!
//! Results are unified to one type (int with float gives float; otherwise
//! the types must match) and evaluated lazily: only the branch taken runs,
//! so `CASE WHEN d <> 0 THEN n / d END` cannot fail on `d = 0`.

use std::cmp::Ordering;

use super::ast::{CaseWhen, Expr};

use super::ExprError;
use super::compile::Compiler;
use super::node::{KBool, Kind, Node, Operand, with_kind};

impl Compiler<'_> {
    pub(crate) fn case(
        &self,
        operand: Option<&Expr>,
        whens: &[CaseWhen],
        else_result: Option<&Expr>,
        at: usize,
    ) -> Result<Node, ExprError> {
        // Compiled in source order, so the first mistake is reported first.
        let x = operand.map(|e| self.expr(e)).transpose()?;
        let mut conditions = Vec::with_capacity(whens.len());
        let mut results: Vec<&Expr> = Vec::with_capacity(whens.len() + 1);
        let mut values = Vec::with_capacity(whens.len() + 1);
        for w in whens {
            conditions.push(self.expr(&w.condition)?);
            results.push(&w.result);
            values.push(self.expr(&w.result)?);
        }
        if let Some(e) = else_result {
            results.push(e);
            values.push(self.expr(e)?);
        }
        let ty = self.unify_nodes(&results, &values, "CASE results")?;
        let else_value = if else_result.is_some() {
            values.pop().expect("else")
        } else {
            Node::null_of(ty)
        };

        let Some(x) = x else {
            let conditions = whens
                .iter()
                .zip(conditions)
                .map(|(w, c)| self.need_bool(&w.condition, c, "a CASE WHEN condition"))
                .collect::<Result<Vec<_>, _>>()?;
            let Some(ty) = ty else { return Ok(Node::Null) };
            return Ok(with_kind!(ty, K => searched::<K>(conditions, values, else_value)));
        };

        // Simple CASE: `CASE x WHEN a THEN ... WHEN b THEN ...`.
        let mut all: Vec<&Node> = vec![&x];
        all.extend(conditions.iter());
        let key_ty = self.comparable(&all, at)?;
        let Some(ty) = ty else { return Ok(Node::Null) };
        // A NULL operand or all-NULL keys: no WHEN matches.
        let Some(key_ty) = key_ty else {
            return Ok(else_value);
        };
        Ok(
            with_kind!(key_ty, C => with_kind!(ty, R => simple::<C, R>(x, conditions, values, else_value))),
        )
    }

    /// `if(cond, a, b)`: `CASE WHEN cond THEN a ELSE b END`.
    pub(crate) fn if_fn(
        &self,
        cond: &Expr,
        then: &Expr,
        otherwise: &Expr,
    ) -> Result<Node, ExprError> {
        let c = self.expr(cond)?;
        let c = self.need_bool(cond, c, "the condition of `if`")?;
        let (mut values, ty) = self.unify(&[then, otherwise], "the results of `if`")?;
        let Some(ty) = ty else { return Ok(Node::Null) };
        let otherwise = values.pop().expect("two values");
        Ok(with_kind!(ty, K => searched::<K>(vec![c], values, otherwise)))
    }

    /// The first non-NULL argument.
    pub(crate) fn coalesce(&self, args: &[&Expr]) -> Result<Node, ExprError> {
        let (values, ty) = self.unify(args, "the arguments of `coalesce`")?;
        let Some(ty) = ty else { return Ok(Node::Null) };
        fn build<K: Kind>(values: Vec<Node>) -> Node {
            let mut ops = Vec::new();
            for op in values.into_iter().map(K::operand) {
                match op.as_const() {
                    // A NULL constant never wins; a non-NULL one always does,
                    // so nothing after it is needed.
                    Some(None) => continue,
                    Some(Some(_)) => {
                        ops.push(op);
                        break;
                    }
                    None => ops.push(op),
                }
            }
            if ops.len() <= 1 {
                return K::node(ops.pop().unwrap_or(Operand::Const(None)));
            }
            K::node(Operand::new(move |b, r| {
                for op in &ops {
                    if let Some(v) = op.eval_detached(b, r)? {
                        return Ok(Some(v));
                    }
                }
                Ok(None)
            }))
        }
        Ok(with_kind!(ty, K => build::<K>(values)))
    }

    /// `nullif(a, b)`: NULL if `a = b`, else `a`.
    pub(crate) fn nullif(&self, a: &Expr, b: &Expr, at: usize) -> Result<Node, ExprError> {
        let x = self.expr(a)?;
        let y = self.expr(b)?;
        let Some(ty) = self.comparable(&[&x, &y], at)? else {
            return Ok(Node::Null);
        };
        fn build<K: Kind>(x: Operand<K>, y: Operand<K>) -> Node {
            K::node(Operand::new(move |b, r| {
                let Some(v) = x.eval_detached(b, r)? else {
                    return Ok(None);
                };
                match y.eval(b, r)? {
                    Some(w) if K::compare(&v, &w) == Some(Ordering::Equal) => Ok(None),
                    _ => Ok(Some(v)),
                }
            }))
        }
        Ok(with_kind!(ty, K => build::<K>(K::operand(x), K::operand(y))))
    }

    /// `greatest(...)` / `least(...)`: NULL arguments are ignored, as in
    /// Postgres; NULL only if all are NULL.
    pub(crate) fn extreme(
        &self,
        name: &str,
        args: &[&Expr],
        greatest: bool,
    ) -> Result<Node, ExprError> {
        let (values, ty) = self.unify(args, &format!("the arguments of `{name}`"))?;
        let Some(ty) = ty else { return Ok(Node::Null) };
        let wanted = if greatest {
            Ordering::Greater
        } else {
            Ordering::Less
        };
        fn build<K: Kind>(values: Vec<Node>, wanted: Ordering) -> Node {
            let ops: Vec<Operand<K>> = values.into_iter().map(K::operand).collect();
            K::node(Operand::new(move |b, r| {
                let mut best: Option<K::Ref<'_>> = None;
                for op in &ops {
                    if let Some(v) = op.eval_detached(b, r)? {
                        best = match best {
                            Some(cur) if K::compare(&v, &cur) != Some(wanted) => Some(cur),
                            _ => Some(v),
                        };
                    }
                }
                Ok(best)
            }))
        }
        Ok(with_kind!(ty, K => build::<K>(values, wanted)))
    }
}

/// A searched CASE over already type-checked parts. Constant conditions are
/// settled now: false/NULL branches are dropped, a true one ends the list.
fn searched<K: Kind>(conditions: Vec<Operand<KBool>>, values: Vec<Node>, else_value: Node) -> Node {
    let mut branches: Vec<(Operand<KBool>, Operand<K>)> = Vec::new();
    let mut otherwise = K::operand(else_value);
    for (c, v) in conditions.into_iter().zip(values) {
        match c.as_const() {
            Some(Some(true)) => {
                otherwise = K::operand(v);
                break;
            }
            Some(_) => {}
            None => branches.push((c, K::operand(v))),
        }
    }
    if branches.is_empty() {
        return K::node(otherwise);
    }
    K::node(Operand::new(move |b, r| {
        for (c, v) in &branches {
            if c.eval(b, r)? == Some(true) {
                return v.eval_detached(b, r);
            }
        }
        otherwise.eval_detached(b, r)
    }))
}

/// A simple CASE: the operand (kind `C`) is evaluated once and compared
/// with each key in turn; results are of kind `R`.
fn simple<C: Kind, R: Kind>(x: Node, keys: Vec<Node>, values: Vec<Node>, else_value: Node) -> Node {
    let x = C::operand(x);
    let branches: Vec<(Operand<C>, Operand<R>)> = keys
        .into_iter()
        .map(C::operand)
        .zip(values.into_iter().map(R::operand))
        .collect();
    let otherwise = R::operand(else_value);
    R::node(Operand::new(move |b, r| {
        if let Some(v) = x.eval(b, r)? {
            for (key, value) in &branches {
                if let Some(k) = key.eval(b, r)?
                    && k == v
                {
                    return value.eval_detached(b, r);
                }
            }
        }
        otherwise.eval_detached(b, r)
    }))
}
