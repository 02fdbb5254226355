//! The walk over the expression's syntax tree: one method per kind of node, each
//! type-checking its operands and returning a [`Node`]. Operators and
//! functions live in their own files as further `impl Compiler` blocks.

use std::cell::Cell;
use std::fmt::Display;

use super::ExprError;
use super::ast::{BinaryOp, Expr, ExprKind, UnaryOp};
use super::names::resolve_field;
use super::node::{KBool, KInt, KStr, Node, Operand};
use crate::data::{DataType, Schema};

pub(crate) struct Compiler<'a> {
    text: &'a str,
    schema: &'a Schema,
    /// Field references compiled so far. A subtree that adds none is
    /// constant, and is evaluated once, here, instead of per record.
    field_refs: Cell<usize>,
    /// The aggregate whose argument is being compiled, to explain nesting.
    aggregate: Option<String>,
}

impl<'a> Compiler<'a> {
    pub(crate) fn new(text: &'a str, schema: &'a Schema) -> Compiler<'a> {
        Compiler {
            text,
            schema,
            field_refs: Cell::new(0),
            aggregate: None,
        }
    }

    /// A compiler for the argument of aggregate `name`.
    pub(crate) fn for_aggregate_arg(text: &'a str, schema: &'a Schema, name: &str) -> Compiler<'a> {
        Compiler {
            aggregate: Some(name.to_string()),
            ..Compiler::new(text, schema)
        }
    }

    pub(crate) fn aggregate(&self) -> Option<&str> {
        self.aggregate.as_deref()
    }

    /// The byte offset where `node` starts.
    pub(crate) fn at(&self, node: &Expr) -> usize {
        node.start
    }

    /// The source text of `node`, for messages.
    pub(crate) fn source(&self, node: &Expr) -> &'a str {
        &self.text[node.start..node.end]
    }

    pub(crate) fn error(&self, offset: usize, message: impl Into<String>) -> ExprError {
        ExprError {
            offset,
            message: message.into(),
        }
    }

    /// Compiles one expression.
    pub(crate) fn expr(&self, e: &Expr) -> Result<Node, ExprError> {
        let refs = self.field_refs.get();
        let node = self.expr_at(e, e.start)?;
        Ok(if self.field_refs.get() == refs {
            node.fold()
        } else {
            node
        })
    }

    fn expr_at(&self, e: &Expr, at: usize) -> Result<Node, ExprError> {
        match &e.kind {
            ExprKind::Field(name) => self.field(name, at),
            ExprKind::Number(digits) => self.number(digits, at, false),
            ExprKind::Str(s) => Ok(Node::Str(Operand::Const(Some(s.clone())))),
            ExprKind::Bool(b) => Ok(Node::Bool(Operand::Const(Some(*b)))),
            ExprKind::Null => Ok(Node::Null),
            ExprKind::Nested(inner) => self.expr(inner),
            ExprKind::Unary { op, expr } => self.unary(*op, expr),
            ExprKind::Binary { left, op, right } => self.binary(left, *op, right, at),
            ExprKind::IsNull { expr, negated } => self.is_null(expr, *negated),
            ExprKind::IsBool {
                expr,
                value,
                negated,
            } => self.is_bool(expr, *value, *negated),
            ExprKind::IsDistinctFrom {
                left,
                right,
                negated,
            } => self.distinct(left, right, !negated, at),
            ExprKind::Between {
                expr,
                low,
                high,
                negated,
            } => self.between(expr, low, high, *negated, at),
            ExprKind::InList {
                expr,
                list,
                negated,
            } => self.in_list(expr, list, *negated, at),
            ExprKind::Like {
                expr,
                pattern,
                escape,
                negated,
                ilike,
            } => self.like(expr, pattern, escape.as_deref(), *negated, *ilike),
            ExprKind::Cast { expr, to, is_try } => self.cast(expr, to, *is_try, at),
            ExprKind::Case {
                operand,
                whens,
                else_result,
            } => self.case(operand.as_deref(), whens, else_result.as_deref(), at),
            ExprKind::Function(f) => self.function(f, at),
            ExprKind::Substring { expr, from, length } => {
                self.substring(expr, from.as_deref(), length.as_deref())
            }
            ExprKind::Trim { side, chars, expr } => {
                self.trim_fn("trim", expr, chars.as_deref(), *side)
            }
            ExprKind::Position { needle, haystack } => self.position(needle, haystack),
        }
    }

    pub(crate) fn field(&self, name: &str, at: usize) -> Result<Node, ExprError> {
        let (i, ty) = resolve_field(self.schema, name).map_err(|m| self.error(at, m))?;
        self.field_refs.set(self.field_refs.get() + 1);
        Ok(match ty {
            DataType::Bool => Node::Bool(Operand::Col(i)),
            DataType::Int => Node::Int(Operand::Col(i)),
            DataType::Float => Node::Float(Operand::Col(i)),
            DataType::Str => Node::Str(Operand::Col(i)),
        })
    }

    /// A number literal; `negate` for a minus sign in front of it, so
    /// that `-9223372036854775808` is an int.
    fn number(&self, digits: &str, at: usize, negate: bool) -> Result<Node, ExprError> {
        let sign = if negate { "-" } else { "" };
        let text = format!("{sign}{digits}");
        let is_integer = digits.bytes().all(|b| b.is_ascii_digit());
        if is_integer {
            return text.parse::<i64>().map(|x| Node::Int(Operand::Const(Some(x)))).map_err(|_| {
                self.error(at, format!("integer {text} is out of range for int (64-bit); write {text}.0 for a float"))
            });
        }
        text.parse::<f64>()
            .map(|x| Node::Float(Operand::Const(Some(x))))
            .map_err(|_| self.error(at, format!("invalid number `{text}`")))
    }

    fn unary(&self, op: UnaryOp, expr: &Expr) -> Result<Node, ExprError> {
        match op {
            UnaryOp::Minus => {
                if let ExprKind::Number(digits) = &expr.kind {
                    return self.number(digits, expr.start, true);
                }
                let x = self.expr(expr)?;
                self.negate(expr, x)
            }
            UnaryOp::Plus => {
                let x = self.expr(expr)?;
                self.need_numeric(expr, &x, "unary `+`")?;
                Ok(x)
            }
            UnaryOp::Not => self.not(expr),
        }
    }

    fn binary(
        &self,
        left: &Expr,
        op: BinaryOp,
        right: &Expr,
        at: usize,
    ) -> Result<Node, ExprError> {
        match op {
            BinaryOp::Arith(op) => self.arith(op, left, right),
            BinaryOp::Cmp(op) => self.compare(op, left, right, at),
            BinaryOp::Concat => self.concat_op(left, right, at),
            BinaryOp::And => self.and_or(left, right, true),
            BinaryOp::Or => self.and_or(left, right, false),
        }
    }

    // Type checks shared by operators and functions. `what` names the
    // operator or function in the message: "`upper` needs a string, got int".

    pub(crate) fn need_bool(
        &self,
        e: &Expr,
        node: Node,
        what: impl Display,
    ) -> Result<Operand<KBool>, ExprError> {
        match node {
            Node::Bool(o) => Ok(o),
            Node::Null => Ok(Operand::Const(None)),
            other => Err(self.type_error(e, &other, what, "a bool")),
        }
    }

    pub(crate) fn need_str(
        &self,
        e: &Expr,
        node: Node,
        what: impl Display,
    ) -> Result<Operand<KStr>, ExprError> {
        match node {
            Node::Str(o) => Ok(o),
            Node::Null => Ok(Operand::Const(None)),
            other => Err(self.type_error(e, &other, what, "a string")),
        }
    }

    pub(crate) fn need_int(
        &self,
        e: &Expr,
        node: Node,
        what: impl Display,
    ) -> Result<Operand<KInt>, ExprError> {
        match node {
            Node::Int(o) => Ok(o),
            Node::Null => Ok(Operand::Const(None)),
            other => Err(self.type_error(e, &other, what, "an int")),
        }
    }

    pub(crate) fn need_numeric(
        &self,
        e: &Expr,
        node: &Node,
        what: impl Display,
    ) -> Result<(), ExprError> {
        match node.ty() {
            None | Some(DataType::Int | DataType::Float) => Ok(()),
            Some(_) => Err(self.type_error(e, node, what, "a number")),
        }
    }

    fn type_error(&self, e: &Expr, node: &Node, what: impl Display, wanted: &str) -> ExprError {
        self.error(
            self.at(e),
            format!("{what} needs {wanted}, got {}", type_name(node.ty())),
        )
    }

    /// Compiles `exprs` and finds their common type; see [`Self::unify_nodes`].
    pub(crate) fn unify(
        &self,
        exprs: &[&Expr],
        what: &str,
    ) -> Result<(Vec<Node>, Option<DataType>), ExprError> {
        let nodes = exprs
            .iter()
            .map(|e| self.expr(e))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = self.unify_nodes(exprs, &nodes, what)?;
        Ok((nodes, ty))
    }

    /// The common type (see [`common_type`](super::node::common_type)) of
    /// `nodes`, compiled from `exprs`; `what` describes them in the error:
    /// "CASE results", "the arguments of `coalesce`".
    pub(crate) fn unify_nodes(
        &self,
        exprs: &[&Expr],
        nodes: &[Node],
        what: &str,
    ) -> Result<Option<DataType>, ExprError> {
        let mut common: Option<DataType> = None;
        for (e, node) in exprs.iter().zip(nodes) {
            common = super::node::common_type([common, node.ty()]).ok_or_else(|| {
                self.error(
                    self.at(e),
                    format!(
                        "{what} must have the same type: {} and {}",
                        type_name(common),
                        type_name(node.ty())
                    ),
                )
            })?;
        }
        Ok(common)
    }
}

/// A type for messages: "int", ..., or "NULL" for the untyped NULL.
pub(crate) fn type_name(ty: Option<DataType>) -> &'static str {
    ty.map_or("NULL", DataType::name)
}
