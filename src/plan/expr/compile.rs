//! The walk over sqlparser's AST: one method per kind of node, each
//! type-checking its operands and returning a [`Node`]. Operators and
//! functions live in their own files as further `impl Compiler` blocks.

use std::cell::Cell;
use std::fmt::Display;

use sqlparser::ast::{BinaryOperator, CastKind, Expr, InTarget, Spanned, UnaryOperator, Value};

use super::ExprError;
use super::arith::ArithOp;
use super::compare::CmpOp;
use super::names::resolve_field;
use super::node::{KBool, KInt, KStr, Node, Operand};
use super::parse::byte_offset;
use crate::data::{DataType, Schema};

const SUPPORTED: &str = "supported are literals, field names, arithmetic (+ - * / %), ||, \
comparisons, AND/OR/NOT, IS [NOT] NULL/TRUE/FALSE, BETWEEN, IN (list), LIKE/ILIKE, CASE, CAST/TRY_CAST \
and scalar functions";

pub(crate) struct Compiler<'a> {
    text: &'a str,
    schema: &'a Schema,
    /// Where the innermost node with a known position starts: sqlparser
    /// gives a few nodes no span, and their errors point at the parent.
    last_offset: Cell<usize>,
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
            last_offset: Cell::new(0),
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
    pub(crate) fn at(&self, node: &impl Spanned) -> usize {
        byte_offset(self.text, node.span().start).unwrap_or(self.last_offset.get())
    }

    pub(crate) fn error(&self, offset: usize, message: impl Into<String>) -> ExprError {
        ExprError {
            offset,
            message: message.into(),
        }
    }

    /// Compiles one expression.
    pub(crate) fn expr(&self, e: &Expr) -> Result<Node, ExprError> {
        let at = self.at(e);
        let outer = self.last_offset.replace(at);
        let refs = self.field_refs.get();
        let node = self.expr_at(e, at);
        self.last_offset.set(outer);
        let node = node?;
        Ok(if self.field_refs.get() == refs {
            node.fold()
        } else {
            node
        })
    }

    fn expr_at(&self, e: &Expr, at: usize) -> Result<Node, ExprError> {
        match e {
            Expr::Identifier(ident) => self.field(&ident.value, at),
            // A dotted name can only be a field whose name contains dots.
            Expr::CompoundIdentifier(parts) => {
                let name: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
                self.field(&name.join("."), at)
            }
            Expr::Value(v) => self.literal(&v.value, at, false),
            Expr::Nested(inner) => self.expr(inner),
            Expr::UnaryOp { op, expr } => self.unary(*op, expr, at),
            Expr::BinaryOp { left, op, right } => self.binary(left, op, right, at),
            Expr::IsNull(x) => self.is_null(x, false),
            Expr::IsNotNull(x) => self.is_null(x, true),
            Expr::IsTrue(x) => self.is_bool(x, Some(true), false),
            Expr::IsNotTrue(x) => self.is_bool(x, Some(true), true),
            Expr::IsFalse(x) => self.is_bool(x, Some(false), false),
            Expr::IsNotFalse(x) => self.is_bool(x, Some(false), true),
            Expr::IsUnknown(x) => self.is_bool(x, None, false),
            Expr::IsNotUnknown(x) => self.is_bool(x, None, true),
            Expr::IsDistinctFrom(a, b) => self.distinct(a, b, true, at),
            Expr::IsNotDistinctFrom(a, b) => self.distinct(a, b, false, at),
            Expr::Between { expr, negated, low, high } => self.between(expr, low, high, *negated, at),
            Expr::In { expr, target, negated, .. } => match target {
                InTarget::List(list) => self.in_list(expr, list, *negated, at),
                InTarget::Subquery(_) => Err(self.error(at, "subqueries are not supported")),
                _ => Err(self.error(at, "IN needs a list of values, such as `x IN (1, 2, 3)`")),
            },
            Expr::Like { any: true, .. } | Expr::ILike { any: true, .. } => {
                Err(self.error(at, "LIKE ANY is not supported; combine LIKEs with OR"))
            }
            Expr::Like { negated, expr, pattern, escape_char, .. } => {
                self.like(expr, pattern, escape_char.as_deref(), *negated, false)
            }
            Expr::ILike { negated, expr, pattern, escape_char, .. } => {
                self.like(expr, pattern, escape_char.as_deref(), *negated, true)
            }
            Expr::Cast { kind, expr, data_type, format } => {
                if format.is_some() {
                    return Err(self.error(at, "CAST ... FORMAT is not supported"));
                }
                let is_try = matches!(kind, CastKind::TryCast | CastKind::SafeCast);
                self.cast(expr, data_type, is_try, at)
            }
            Expr::Case { operand, conditions, else_result, .. } => {
                self.case(operand.as_deref(), conditions, else_result.as_deref(), at)
            }
            Expr::Function(f) => self.function(f, at),
            Expr::Substring { expr, substring_from, substring_for, .. } => {
                self.substring(expr, substring_from.as_deref(), substring_for.as_deref())
            }
            Expr::Trim { trim_where, trim_what, expr, trim_characters } => {
                self.trim(expr, *trim_where, trim_what.as_deref(), trim_characters.as_deref(), at)
            }
            Expr::Position { expr, r#in } => self.position(expr, r#in),
            Expr::Ceil { expr, field } => self.ceil_floor(expr, field, true, at),
            Expr::Floor { expr, field } => self.ceil_floor(expr, field, false, at),
            Expr::Subquery(_) | Expr::Exists { .. } => Err(self.error(at, "subqueries are not supported")),
            Expr::Wildcard(_) | Expr::QualifiedWildcard(..) => {
                Err(self.error(at, "`*` is only allowed in count(*)"))
            }
            Expr::SimilarTo { .. } | Expr::RLike { .. } => Err(self.error(
                at,
                "regular expressions are not supported; use LIKE with `%` and `_`",
            )),
            Expr::TypedString(_) | Expr::Interval(_) => Err(self.error(
                at,
                "typed literals (DATE '...', INTERVAL ...) are not supported; times are int epoch milliseconds",
            )),
            _ => Err(self.error(at, format!("`{e}` is not supported here; {SUPPORTED}"))),
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

    /// A literal; `negate` for a minus sign in front of a number, so that
    /// `-9223372036854775808` is an int.
    fn literal(&self, v: &Value, at: usize, negate: bool) -> Result<Node, ExprError> {
        let sign = if negate { "-" } else { "" };
        match v {
            Value::Number(digits, _) => {
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
            _ if negate => Err(self.error(at, "unary `-` needs a number")),
            Value::SingleQuotedString(s)
            | Value::EscapedStringLiteral(s)
            | Value::UnicodeStringLiteral(s)
            | Value::NationalStringLiteral(s)
            | Value::TripleSingleQuotedString(s) => Ok(Node::Str(Operand::Const(Some(s.clone())))),
            Value::DollarQuotedString(s) => Ok(Node::Str(Operand::Const(Some(s.value.clone())))),
            Value::Boolean(b) => Ok(Node::Bool(Operand::Const(Some(*b)))),
            Value::Null => Ok(Node::Null),
            Value::Placeholder(p) => {
                Err(self.error(at, format!("placeholders such as `{p}` are not supported")))
            }
            other => Err(self.error(
                at,
                format!("literal `{other}` is not supported; use 'single-quoted' strings"),
            )),
        }
    }

    fn unary(&self, op: UnaryOperator, expr: &Expr, at: usize) -> Result<Node, ExprError> {
        match op {
            UnaryOperator::Minus => {
                if let Expr::Value(v) = expr
                    && let Value::Number(..) = v.value
                {
                    return self.literal(&v.value, at, true);
                }
                let x = self.expr(expr)?;
                self.negate(expr, x)
            }
            UnaryOperator::Plus => {
                let x = self.expr(expr)?;
                self.need_numeric(expr, &x, "unary `+`")?;
                Ok(x)
            }
            UnaryOperator::Not => self.not(expr),
            other => Err(self.error(
                at,
                format!("operator `{other}` is not supported; {SUPPORTED}"),
            )),
        }
    }

    fn binary(
        &self,
        left: &Expr,
        op: &BinaryOperator,
        right: &Expr,
        at: usize,
    ) -> Result<Node, ExprError> {
        use BinaryOperator as B;
        match op {
            B::Plus => self.arith(ArithOp::Add, left, right),
            B::Minus => self.arith(ArithOp::Sub, left, right),
            B::Multiply => self.arith(ArithOp::Mul, left, right),
            B::Divide => self.arith(ArithOp::Div, left, right),
            B::Modulo => self.arith(ArithOp::Rem, left, right),
            B::StringConcat => self.concat_op(left, right, at),
            B::Eq => self.compare(CmpOp::Eq, left, right, at),
            B::NotEq => self.compare(CmpOp::NotEq, left, right, at),
            B::Lt => self.compare(CmpOp::Lt, left, right, at),
            B::LtEq => self.compare(CmpOp::LtEq, left, right, at),
            B::Gt => self.compare(CmpOp::Gt, left, right, at),
            B::GtEq => self.compare(CmpOp::GtEq, left, right, at),
            B::Spaceship => self.distinct(left, right, false, at),
            B::And => self.and_or(left, right, true),
            B::Or => self.and_or(left, right, false),
            B::BitwiseXor => Err(self.error(at, "operator `^` is not supported; use power(x, y)")),
            other => Err(self.error(
                at,
                format!("operator `{other}` is not supported; {SUPPORTED}"),
            )),
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
                    self.at(*e),
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
