//! The compiler's intermediate form: a typed operand that is either a column,
//! a constant or a closure.
//!
//! Keeping columns and constants visible (instead of boxing everything into
//! closures right away) lets each operator read them inline: `temp > 30`
//! becomes one closure that reads column `temp` and compares it with a
//! captured `30.0`, with no further indirect call. The per-row cost of that
//! is a well-predicted branch on the operand's variant.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

use super::{BoolFn, Compiled, EvalError, EvalResult, FloatFn, IntFn, StrFn};
use crate::data::{Batch, Column, DataType, Schema};

/// One of the four value types, as seen by generic operator code.
pub(crate) trait Kind: Sized + 'static {
    /// A constant of this kind, owned by the closure that uses it.
    type Value: Clone + Send + Sync + 'static;
    /// What evaluation yields. For strings a `Cow` that borrows either the
    /// batch or a constant, so neither is copied.
    type Ref<'a>: PartialOrd;
    /// The boxed closure of this kind (`IntFn`, ...).
    type Fn: Send + Sync + 'static;
    const TYPE: DataType;

    fn read(col: &Column, row: usize) -> Option<Self::Ref<'_>>;
    fn borrow(v: &Self::Value) -> Self::Ref<'_>;
    /// A result that does not borrow the constant: free except for strings.
    fn detach<'b>(v: &Self::Value) -> Self::Ref<'b>;
    fn to_value(r: Self::Ref<'_>) -> Self::Value;
    /// A computed value as a result.
    fn own<'b>(v: Self::Value) -> Self::Ref<'b>;
    /// Compares results of different lifetimes (a result for the caller
    /// with a borrowed constant), which `PartialOrd` on `Ref` cannot.
    fn compare(a: &Self::Ref<'_>, b: &Self::Ref<'_>) -> Option<Ordering>;
    fn call<'b>(f: &Self::Fn, batch: &'b Batch, row: usize) -> EvalResult<Self::Ref<'b>>;
    fn boxed<F>(f: F) -> Self::Fn
    where
        F: for<'b> Fn(&'b Batch, usize) -> EvalResult<Self::Ref<'b>> + Send + Sync + 'static;
    fn node(op: Operand<Self>) -> Node;
    /// The operand of `node`, which the type checker has made sure is of
    /// this kind, an int where this is float (widened), or an untyped NULL.
    fn operand(node: Node) -> Operand<Self>;
}

pub(crate) struct KBool;
pub(crate) struct KInt;
pub(crate) struct KFloat;
pub(crate) struct KStr;

/// A typed value source inside a compiled expression.
pub(crate) enum Operand<K: Kind> {
    /// The column at this index of the batch.
    Col(usize),
    /// A constant; `None` is a NULL of this type.
    Const(Option<K::Value>),
    Dyn(K::Fn),
}

impl<K: Kind> Operand<K> {
    /// Evaluates for `row`, borrowing constants.
    #[inline(always)]
    pub(crate) fn eval<'a>(&'a self, batch: &'a Batch, row: usize) -> EvalResult<K::Ref<'a>> {
        match self {
            Operand::Col(i) => Ok(K::read(batch.column(*i), row)),
            Operand::Const(v) => Ok(v.as_ref().map(K::borrow)),
            Operand::Dyn(f) => K::call(f, batch, row),
        }
    }

    /// Evaluates for `row` into a result that may outlive `self` (it can only
    /// borrow the batch), as a closure's return value must.
    #[inline(always)]
    pub(crate) fn eval_detached<'b>(&self, batch: &'b Batch, row: usize) -> EvalResult<K::Ref<'b>> {
        match self {
            Operand::Col(i) => Ok(K::read(batch.column(*i), row)),
            Operand::Const(v) => Ok(v.as_ref().map(K::detach)),
            Operand::Dyn(f) => K::call(f, batch, row),
        }
    }

    /// A closure operand.
    pub(crate) fn new<F>(f: F) -> Operand<K>
    where
        F: for<'b> Fn(&'b Batch, usize) -> EvalResult<K::Ref<'b>> + Send + Sync + 'static,
    {
        Operand::Dyn(K::boxed(f))
    }

    pub(crate) fn is_const(&self) -> bool {
        matches!(self, Operand::Const(_))
    }

    /// The constant value, if this is a constant: `Some(None)` for NULL.
    pub(crate) fn as_const(&self) -> Option<Option<&K::Value>> {
        match self {
            Operand::Const(v) => Some(v.as_ref()),
            _ => None,
        }
    }

    pub(crate) fn into_fn(self) -> K::Fn {
        match self {
            Operand::Dyn(f) => f,
            op => K::boxed(move |b, r| op.eval_detached(b, r)),
        }
    }

    /// Replaces a closure by its value, computed now. Only called for
    /// closures that read no column; a closure that fails (`1 / 0`) stays,
    /// so the error is reported per record as usual.
    pub(crate) fn fold(self) -> Operand<K> {
        let Operand::Dyn(f) = self else { return self };
        let batch = empty_batch();
        let folded = K::call(&f, &batch, 0).map(|v| v.map(K::to_value));
        match folded {
            Ok(v) => Operand::Const(v),
            Err(_) => Operand::Dyn(f),
        }
    }
}

fn empty_batch() -> Batch {
    Batch::new(
        Arc::new(Schema::default()),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    )
}

/// A compiled (sub)expression and its type.
pub(crate) enum Node {
    /// The untyped `NULL` literal; it takes the type its context needs.
    Null,
    Bool(Operand<KBool>),
    Int(Operand<KInt>),
    Float(Operand<KFloat>),
    Str(Operand<KStr>),
}

impl Node {
    /// `None` for the untyped NULL.
    pub(crate) fn ty(&self) -> Option<DataType> {
        match self {
            Node::Null => None,
            Node::Bool(_) => Some(DataType::Bool),
            Node::Int(_) => Some(DataType::Int),
            Node::Float(_) => Some(DataType::Float),
            Node::Str(_) => Some(DataType::Str),
        }
    }

    pub(crate) fn is_const(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Bool(o) => o.is_const(),
            Node::Int(o) => o.is_const(),
            Node::Float(o) => o.is_const(),
            Node::Str(o) => o.is_const(),
        }
    }

    /// Whether this is a constant NULL, typed or not.
    pub(crate) fn is_null_const(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Bool(o) => matches!(o.as_const(), Some(None)),
            Node::Int(o) => matches!(o.as_const(), Some(None)),
            Node::Float(o) => matches!(o.as_const(), Some(None)),
            Node::Str(o) => matches!(o.as_const(), Some(None)),
        }
    }

    /// A NULL constant of type `ty` (untyped if `None`).
    pub(crate) fn null_of(ty: Option<DataType>) -> Node {
        match ty {
            None => Node::Null,
            Some(DataType::Bool) => Node::Bool(Operand::Const(None)),
            Some(DataType::Int) => Node::Int(Operand::Const(None)),
            Some(DataType::Float) => Node::Float(Operand::Const(None)),
            Some(DataType::Str) => Node::Str(Operand::Const(None)),
        }
    }

    pub(crate) fn fold(self) -> Node {
        match self {
            Node::Null => Node::Null,
            Node::Bool(o) => Node::Bool(o.fold()),
            Node::Int(o) => Node::Int(o.fold()),
            Node::Float(o) => Node::Float(o.fold()),
            Node::Str(o) => Node::Str(o.fold()),
        }
    }

    /// The final closure. An untyped NULL becomes a string column of NULLs,
    /// as an unknown-typed literal resolves to text in Postgres.
    pub(crate) fn into_compiled(self) -> Compiled {
        match self {
            Node::Null => Compiled::Str(Box::new(|_, _| Ok(None))),
            Node::Bool(o) => Compiled::Bool(o.into_fn()),
            Node::Int(o) => Compiled::Int(o.into_fn()),
            Node::Float(o) => Compiled::Float(o.into_fn()),
            Node::Str(o) => Compiled::Str(o.into_fn()),
        }
    }
}

/// The common type of values that are compared or unified: equal types,
/// int with float (as float), or NULL with anything. `None` if they do not
/// go together; `Some(None)` if all are untyped NULLs.
pub(crate) fn common_type(
    types: impl IntoIterator<Item = Option<DataType>>,
) -> Option<Option<DataType>> {
    let mut common: Option<DataType> = None;
    for ty in types.into_iter().flatten() {
        common = Some(match (common, ty) {
            (None, t) => t,
            (Some(a), b) if a == b => a,
            (Some(a), b) if a.is_numeric() && b.is_numeric() => DataType::Float,
            _ => return None,
        });
    }
    Some(common)
}

fn mismatch(kind: DataType, node: &Node) -> ! {
    // The type checker converts operands only to types it has checked; this
    // is a compiler bug, not bad input.
    panic!(
        "expression compiler: {:?} operand used as {kind}",
        node.ty()
    )
}

impl Kind for KBool {
    type Value = bool;
    type Ref<'a> = bool;
    type Fn = BoolFn;
    const TYPE: DataType = DataType::Bool;

    #[inline(always)]
    fn read(col: &Column, row: usize) -> Option<bool> {
        col.bool(row)
    }
    #[inline(always)]
    fn borrow(v: &bool) -> bool {
        *v
    }
    #[inline(always)]
    fn detach<'b>(v: &bool) -> Self::Ref<'b> {
        *v
    }
    fn to_value(r: bool) -> bool {
        r
    }
    fn own<'b>(v: bool) -> Self::Ref<'b> {
        v
    }
    #[inline(always)]
    fn compare(a: &bool, b: &bool) -> Option<Ordering> {
        a.partial_cmp(b)
    }
    #[inline(always)]
    fn call(f: &BoolFn, batch: &Batch, row: usize) -> EvalResult<bool> {
        f(batch, row)
    }
    fn boxed<F>(f: F) -> BoolFn
    where
        F: for<'b> Fn(&'b Batch, usize) -> EvalResult<bool> + Send + Sync + 'static,
    {
        Box::new(f)
    }
    fn node(op: Operand<Self>) -> Node {
        Node::Bool(op)
    }
    fn operand(node: Node) -> Operand<Self> {
        match node {
            Node::Bool(o) => o,
            Node::Null => Operand::Const(None),
            other => mismatch(Self::TYPE, &other),
        }
    }
}

impl Kind for KInt {
    type Value = i64;
    type Ref<'a> = i64;
    type Fn = IntFn;
    const TYPE: DataType = DataType::Int;

    #[inline(always)]
    fn read(col: &Column, row: usize) -> Option<i64> {
        col.int(row)
    }
    #[inline(always)]
    fn borrow(v: &i64) -> i64 {
        *v
    }
    #[inline(always)]
    fn detach<'b>(v: &i64) -> Self::Ref<'b> {
        *v
    }
    fn to_value(r: i64) -> i64 {
        r
    }
    fn own<'b>(v: i64) -> Self::Ref<'b> {
        v
    }
    #[inline(always)]
    fn compare(a: &i64, b: &i64) -> Option<Ordering> {
        a.partial_cmp(b)
    }
    #[inline(always)]
    fn call(f: &IntFn, batch: &Batch, row: usize) -> EvalResult<i64> {
        f(batch, row)
    }
    fn boxed<F>(f: F) -> IntFn
    where
        F: for<'b> Fn(&'b Batch, usize) -> EvalResult<i64> + Send + Sync + 'static,
    {
        Box::new(f)
    }
    fn node(op: Operand<Self>) -> Node {
        Node::Int(op)
    }
    fn operand(node: Node) -> Operand<Self> {
        match node {
            Node::Int(o) => o,
            Node::Null => Operand::Const(None),
            other => mismatch(Self::TYPE, &other),
        }
    }
}

impl Kind for KFloat {
    type Value = f64;
    type Ref<'a> = f64;
    type Fn = FloatFn;
    const TYPE: DataType = DataType::Float;

    #[inline(always)]
    fn read(col: &Column, row: usize) -> Option<f64> {
        col.float(row)
    }
    #[inline(always)]
    fn borrow(v: &f64) -> f64 {
        *v
    }
    #[inline(always)]
    fn detach<'b>(v: &f64) -> Self::Ref<'b> {
        *v
    }
    fn to_value(r: f64) -> f64 {
        r
    }
    fn own<'b>(v: f64) -> Self::Ref<'b> {
        v
    }
    #[inline(always)]
    fn compare(a: &f64, b: &f64) -> Option<Ordering> {
        a.partial_cmp(b)
    }
    #[inline(always)]
    fn call(f: &FloatFn, batch: &Batch, row: usize) -> EvalResult<f64> {
        f(batch, row)
    }
    fn boxed<F>(f: F) -> FloatFn
    where
        F: for<'b> Fn(&'b Batch, usize) -> EvalResult<f64> + Send + Sync + 'static,
    {
        Box::new(f)
    }
    fn node(op: Operand<Self>) -> Node {
        Node::Float(op)
    }
    /// Ints widen to floats (int vs float compares and computes as float).
    fn operand(node: Node) -> Operand<Self> {
        match node {
            Node::Float(o) => o,
            Node::Null => Operand::Const(None),
            Node::Int(Operand::Const(v)) => Operand::Const(v.map(|x| x as f64)),
            Node::Int(Operand::Col(i)) => {
                Operand::new(move |b, r| Ok(b.column(i).int(r).map(|x| x as f64)))
            }
            Node::Int(Operand::Dyn(f)) => Operand::new(move |b, r| Ok(f(b, r)?.map(|x| x as f64))),
            other => mismatch(Self::TYPE, &other),
        }
    }
}

impl Kind for KStr {
    type Value = String;
    type Ref<'a> = Cow<'a, str>;
    type Fn = StrFn;
    const TYPE: DataType = DataType::Str;

    #[inline(always)]
    fn read(col: &Column, row: usize) -> Option<Cow<'_, str>> {
        col.str(row).map(Cow::Borrowed)
    }
    #[inline(always)]
    fn borrow(v: &String) -> Cow<'_, str> {
        Cow::Borrowed(v)
    }
    #[inline(always)]
    fn detach<'b>(v: &String) -> Cow<'b, str> {
        Cow::Owned(v.clone())
    }
    fn to_value(r: Cow<'_, str>) -> String {
        r.into_owned()
    }
    fn own<'b>(v: String) -> Cow<'b, str> {
        Cow::Owned(v)
    }
    #[inline(always)]
    fn compare(a: &Cow<'_, str>, b: &Cow<'_, str>) -> Option<Ordering> {
        Some(a.as_ref().cmp(b.as_ref()))
    }
    #[inline(always)]
    fn call<'b>(f: &StrFn, batch: &'b Batch, row: usize) -> EvalResult<Cow<'b, str>> {
        f(batch, row)
    }
    fn boxed<F>(f: F) -> StrFn
    where
        F: for<'b> Fn(&'b Batch, usize) -> EvalResult<Cow<'b, str>> + Send + Sync + 'static,
    {
        Box::new(f)
    }
    fn node(op: Operand<Self>) -> Node {
        Node::Str(op)
    }
    fn operand(node: Node) -> Operand<Self> {
        match node {
            Node::Str(o) => o,
            Node::Null => Operand::Const(None),
            other => mismatch(Self::TYPE, &other),
        }
    }
}

/// `f(x)` for a non-NULL `x`; NULL otherwise.
pub(crate) fn map1<A: Kind, R: Kind>(
    x: Operand<A>,
    f: impl for<'x> Fn(A::Ref<'x>) -> Result<R::Value, EvalError> + Send + Sync + 'static,
) -> Operand<R> {
    Operand::new(move |b, r| match x.eval(b, r)? {
        Some(v) => f(v).map(|v| Some(R::own(v))),
        None => Ok(None),
    })
}

/// `f(x)` for a non-NULL `x`, where `f` may itself give NULL.
pub(crate) fn map1_opt<A: Kind, R: Kind>(
    x: Operand<A>,
    f: impl for<'x> Fn(A::Ref<'x>) -> Result<Option<R::Value>, EvalError> + Send + Sync + 'static,
) -> Operand<R> {
    Operand::new(move |b, r| match x.eval(b, r)? {
        Some(v) => f(v).map(|v| v.map(R::own)),
        None => Ok(None),
    })
}

/// `f(x, y)` if neither is NULL; NULL otherwise.
pub(crate) fn map2<A: Kind, B: Kind, R: Kind>(
    x: Operand<A>,
    y: Operand<B>,
    f: impl for<'x> Fn(A::Ref<'x>, B::Ref<'x>) -> Result<R::Value, EvalError> + Send + Sync + 'static,
) -> Operand<R> {
    match (x, y) {
        // `field op constant`, the common case, reads the column directly.
        (Operand::Col(i), Operand::Const(Some(c))) => {
            Operand::new(move |b, r| match A::read(b.column(i), r) {
                Some(v) => f(v, B::borrow(&c)).map(|v| Some(R::own(v))),
                None => Ok(None),
            })
        }
        (x, y) => Operand::new(move |b, r| {
            let Some(v) = x.eval(b, r)? else {
                return Ok(None);
            };
            let Some(w) = y.eval(b, r)? else {
                return Ok(None);
            };
            f(v, w).map(|v| Some(R::own(v)))
        }),
    }
}

/// Runs `$body` with `$K` bound to the kind of the data type `$ty`.
macro_rules! with_kind {
    ($ty:expr, $K:ident => $body:expr) => {
        match $ty {
            $crate::data::DataType::Bool => {
                type $K = $crate::plan::expr::node::KBool;
                $body
            }
            $crate::data::DataType::Int => {
                type $K = $crate::plan::expr::node::KInt;
                $body
            }
            $crate::data::DataType::Float => {
                type $K = $crate::plan::expr::node::KFloat;
                $body
            }
            $crate::data::DataType::Str => {
                type $K = $crate::plan::expr::node::KStr;
                $body
            }
        }
    };
}
pub(crate) use with_kind;
