//! `AND`, `OR`, `NOT` and the `IS` tests, with SQL's three-valued logic:
//! `NULL AND false` is false, `NULL AND true` is NULL, and so on.

use super::ast::{BinaryOp, Expr, ExprKind};

use super::ExprError;
use super::compile::Compiler;
use super::node::{KBool, Kind, Node, Operand, with_kind};

/// Three-valued AND.
#[inline(always)]
pub(crate) fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

impl Compiler<'_> {
    /// A chain of `AND`s (`is_and`) or `OR`s, flattened into one n-ary node
    /// so a conjunction of n terms costs one closure call per term, and
    /// evaluated left to right, stopping at the first deciding term.
    pub(crate) fn and_or(
        &self,
        left: &Expr,
        right: &Expr,
        is_and: bool,
    ) -> Result<Node, ExprError> {
        let op = if is_and { BinaryOp::And } else { BinaryOp::Or };
        let mut terms = Vec::new();
        flatten(left, op, &mut terms);
        flatten(right, op, &mut terms);
        let what = if is_and { "`AND`" } else { "`OR`" };
        // The value that decides the result on its own: false for AND.
        let decisive = !is_and;
        let mut ops: Vec<Operand<KBool>> = Vec::with_capacity(terms.len());
        let mut null_const = false;
        let mut decided = false;
        // Every term is compiled, even after a deciding constant, so that
        // type errors are reported wherever they are.
        for term in terms {
            let node = self.expr(term)?;
            match self.need_bool(term, node, what)? {
                Operand::Const(Some(v)) if v == decisive => decided = true,
                Operand::Const(Some(_)) => {}
                Operand::Const(None) => null_const = true,
                op => ops.push(op),
            }
        }
        if decided {
            return Ok(Node::Bool(Operand::Const(Some(decisive))));
        }
        let op = match (ops.len(), null_const) {
            (0, true) => Operand::Const(None),
            (0, false) => Operand::Const(Some(!decisive)),
            (1, false) => ops.pop().expect("one term"),
            (2, false) => {
                let b = ops.pop().expect("two terms");
                let a = ops.pop().expect("two terms");
                Operand::new(move |batch, r| {
                    let x = a.eval(batch, r)?;
                    if x == Some(decisive) {
                        return Ok(x);
                    }
                    let y = b.eval(batch, r)?;
                    if y == Some(decisive) {
                        return Ok(y);
                    }
                    Ok(if x.is_none() || y.is_none() {
                        None
                    } else {
                        Some(!decisive)
                    })
                })
            }
            _ => Operand::new(move |batch, r| {
                let mut unknown = null_const;
                for op in &ops {
                    match op.eval(batch, r)? {
                        Some(v) if v == decisive => return Ok(Some(v)),
                        Some(_) => {}
                        None => unknown = true,
                    }
                }
                Ok(if unknown { None } else { Some(!decisive) })
            }),
        };
        Ok(Node::Bool(op))
    }

    pub(crate) fn not(&self, expr: &Expr) -> Result<Node, ExprError> {
        let node = self.expr(expr)?;
        let x = self.need_bool(expr, node, "`NOT`")?;
        Ok(Node::Bool(Operand::new(move |b, r| {
            Ok(x.eval(b, r)?.map(|v| !v))
        })))
    }

    /// `x IS [NOT] NULL`: never NULL itself.
    pub(crate) fn is_null(&self, expr: &Expr, negated: bool) -> Result<Node, ExprError> {
        fn build<K: Kind>(x: Operand<K>, negated: bool) -> Operand<KBool> {
            match x {
                // The common case reads only the null bitmap.
                Operand::Col(i) => {
                    Operand::new(move |b, r| Ok(Some(b.column(i).is_null(r) != negated)))
                }
                x => Operand::new(move |b, r| Ok(Some(x.eval(b, r)?.is_none() != negated))),
            }
        }
        let node = self.expr(expr)?;
        Ok(Node::Bool(match node.ty() {
            None => Operand::Const(Some(!negated)),
            Some(ty) => with_kind!(ty, K => build::<K>(K::operand(node), negated)),
        }))
    }

    /// `x IS [NOT] TRUE/FALSE/UNKNOWN` (`value` `None` for UNKNOWN): never
    /// NULL itself.
    pub(crate) fn is_bool(
        &self,
        expr: &Expr,
        value: Option<bool>,
        negated: bool,
    ) -> Result<Node, ExprError> {
        let node = self.expr(expr)?;
        let what = match value {
            Some(true) => "IS TRUE",
            Some(false) => "IS FALSE",
            None => "IS UNKNOWN",
        };
        let x = self.need_bool(expr, node, what)?;
        Ok(Node::Bool(Operand::new(move |b, r| {
            Ok(Some((x.eval(b, r)? == value) != negated))
        })))
    }
}

/// Collects the terms of a chain of `op`, looking through parentheses.
fn flatten<'e>(e: &'e Expr, op: BinaryOp, out: &mut Vec<&'e Expr>) {
    match &e.kind {
        ExprKind::Binary { left, op: o, right } if *o == op => {
            flatten(left, op, out);
            flatten(right, op, out);
        }
        ExprKind::Nested(inner) if matches!(&inner.kind, ExprKind::Binary { op: o, .. } if *o == op) => {
            flatten(inner, op, out)
        }
        _ => out.push(e),
    }
}
