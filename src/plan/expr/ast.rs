//! The syntax tree of one expression, as `parse` builds it and `compile`
//! walks it. Every node keeps the byte range of its source text, so errors
//! point at the right place and messages can quote what the user wrote.

pub(crate) struct Expr {
    /// Byte offset where the node starts in the expression text.
    pub(crate) start: usize,
    /// Byte offset just past the node's last character.
    pub(crate) end: usize,
    pub(crate) kind: ExprKind,
}

pub(crate) enum ExprKind {
    /// A field name; dotted names (`a.b`) are one field whose name has dots.
    Field(String),
    /// A number literal as written; the compiler decides int or float.
    Number(String),
    Str(String),
    Bool(bool),
    Null,
    /// A parenthesised expression.
    Nested(Box<Expr>),
    Unary {
        op: UnaryOp,
        expr: Box<Expr>,
    },
    Binary {
        left: Box<Expr>,
        op: BinaryOp,
        right: Box<Expr>,
    },
    IsNull {
        expr: Box<Expr>,
        negated: bool,
    },
    /// `IS [NOT] TRUE | FALSE | UNKNOWN`; `value` is `None` for UNKNOWN.
    IsBool {
        expr: Box<Expr>,
        value: Option<bool>,
        negated: bool,
    },
    /// `a IS [NOT] DISTINCT FROM b`; `a <=> b` is the negated form.
    IsDistinctFrom {
        left: Box<Expr>,
        right: Box<Expr>,
        negated: bool,
    },
    Between {
        expr: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    InList {
        expr: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
    },
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        escape: Option<Box<Expr>>,
        negated: bool,
        ilike: bool,
    },
    /// `CAST(x AS t)`, `TRY_CAST(x AS t)` and `x::t`.
    Cast {
        expr: Box<Expr>,
        to: TypeName,
        is_try: bool,
    },
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<CaseWhen>,
        else_result: Option<Box<Expr>>,
    },
    Function(Function),
    /// `SUBSTRING(s FROM start [FOR length])`.
    Substring {
        expr: Box<Expr>,
        from: Option<Box<Expr>>,
        length: Option<Box<Expr>>,
    },
    /// `TRIM([BOTH | LEADING | TRAILING] [chars] FROM s)`.
    Trim {
        side: TrimSide,
        chars: Option<Box<Expr>>,
        expr: Box<Expr>,
    },
    /// `POSITION(needle IN haystack)`.
    Position {
        needle: Box<Expr>,
        haystack: Box<Expr>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryOp {
    Minus,
    Plus,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Arith(ArithOp),
    Cmp(CmpOp),
    Concat,
    And,
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrimSide {
    Both,
    Leading,
    Trailing,
}

pub(crate) struct CaseWhen {
    pub(crate) condition: Expr,
    pub(crate) result: Expr,
}

/// A call such as `upper(s)`, `count(*)` or `count(DISTINCT x)`.
pub(crate) struct Function {
    /// Lower-cased; a quoted or dotted name is kept as written.
    pub(crate) name: String,
    pub(crate) args: Vec<Expr>,
    /// `f(*)`: `args` is empty.
    pub(crate) star: bool,
    pub(crate) distinct: bool,
}

/// A type name in a cast: upper-cased words (`DOUBLE PRECISION`), without
/// any length or precision (`VARCHAR(10)` is `VARCHAR`).
pub(crate) struct TypeName {
    /// Byte offset where the type name starts.
    pub(crate) at: usize,
    pub(crate) name: String,
    /// The type as written, for messages.
    pub(crate) text: String,
}
