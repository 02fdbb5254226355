//! Comparisons, `IS [NOT] DISTINCT FROM`, `BETWEEN` and `IN`.
//!
//! Operands are brought to their common type first (int vs float compares
//! as float). Floats compare as IEEE 754 (NaN is unequal to everything).
//! Constant IN-lists become a sorted array or a hash set, built once.

use std::borrow::Borrow;
use std::hash::Hash;

use super::ast::{CmpOp, Expr};
use hashbrown::HashSet;

use super::ExprError;
use super::compile::{Compiler, type_name};
use super::logic::and3;
use super::node::{KBool, KFloat, KInt, KStr, Kind, Node, Operand, common_type, with_kind};
use crate::data::DataType;

/// A comparison as a type, so each operator gets its own inlined closure.
trait Test: Send + Sync + 'static {
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool;
}
struct Eq_;
struct Ne;
struct Lt;
struct Le;
struct Gt;
struct Ge;
impl Test for Eq_ {
    #[inline(always)]
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
        a == b
    }
}
impl Test for Ne {
    #[inline(always)]
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
        a != b
    }
}
impl Test for Lt {
    #[inline(always)]
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
        a < b
    }
}
impl Test for Le {
    #[inline(always)]
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
        a <= b
    }
}
impl Test for Gt {
    #[inline(always)]
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
        a > b
    }
}
impl Test for Ge {
    #[inline(always)]
    fn test<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
        a >= b
    }
}

fn cmp_with<K: Kind, T: Test>(a: Operand<K>, b: Operand<K>) -> Operand<KBool> {
    match (a, b) {
        // `field op constant` is the common case: read the column directly,
        // without looking at the operands' variants per record.
        (Operand::Col(i), Operand::Const(Some(c))) => Operand::new(move |batch, r| {
            Ok(K::read(batch.column(i), r).map(|x| T::test(&x, &K::borrow(&c))))
        }),
        (a, b) => Operand::new(move |batch, r| {
            let Some(x) = a.eval(batch, r)? else {
                return Ok(None);
            };
            let Some(y) = b.eval(batch, r)? else {
                return Ok(None);
            };
            Ok(Some(T::test(&x, &y)))
        }),
    }
}

fn cmp_kind<K: Kind>(op: CmpOp, a: Operand<K>, b: Operand<K>) -> Operand<KBool> {
    match op {
        CmpOp::Eq => cmp_with::<K, Eq_>(a, b),
        CmpOp::NotEq => cmp_with::<K, Ne>(a, b),
        CmpOp::Lt => cmp_with::<K, Lt>(a, b),
        CmpOp::LtEq => cmp_with::<K, Le>(a, b),
        CmpOp::Gt => cmp_with::<K, Gt>(a, b),
        CmpOp::GtEq => cmp_with::<K, Ge>(a, b),
    }
}

impl Compiler<'_> {
    pub(crate) fn compare(
        &self,
        op: CmpOp,
        left: &Expr,
        right: &Expr,
        at: usize,
    ) -> Result<Node, ExprError> {
        let a = self.expr(left)?;
        let b = self.expr(right)?;
        let ty = self.comparable(&[&a, &b], at)?;
        let Some(ty) = ty else {
            return Ok(Node::Bool(Operand::Const(None)));
        };
        Ok(Node::Bool(
            with_kind!(ty, K => cmp_kind::<K>(op, K::operand(a), K::operand(b))),
        ))
    }

    /// The common type of compared operands, or "cannot compare".
    pub(crate) fn comparable(
        &self,
        nodes: &[&Node],
        at: usize,
    ) -> Result<Option<DataType>, ExprError> {
        common_type(nodes.iter().map(|n| n.ty())).ok_or_else(|| {
            let mut types = nodes.iter().filter_map(|n| n.ty());
            let first = types.next();
            let other = types.find(|t| {
                Some(*t) != first && !(t.is_numeric() && first.is_some_and(DataType::is_numeric))
            });
            self.error(
                at,
                format!(
                    "cannot compare {} with {}",
                    type_name(first),
                    type_name(other)
                ),
            )
        })
    }

    /// `a IS [NOT] DISTINCT FROM b` (and `<=>`): equality where NULL equals
    /// NULL; never NULL itself.
    pub(crate) fn distinct(
        &self,
        left: &Expr,
        right: &Expr,
        distinct: bool,
        at: usize,
    ) -> Result<Node, ExprError> {
        let a = self.expr(left)?;
        let b = self.expr(right)?;
        let Some(ty) = self.comparable(&[&a, &b], at)? else {
            return Ok(Node::Bool(Operand::Const(Some(!distinct))));
        };
        fn build<K: Kind>(a: Operand<K>, b: Operand<K>, distinct: bool) -> Operand<KBool> {
            Operand::new(move |batch, r| {
                let same = match (a.eval(batch, r)?, b.eval(batch, r)?) {
                    (None, None) => true,
                    (Some(x), Some(y)) => x == y,
                    _ => false,
                };
                Ok(Some(same != distinct))
            })
        }
        Ok(Node::Bool(
            with_kind!(ty, K => build::<K>(K::operand(a), K::operand(b), distinct)),
        ))
    }

    /// `x [NOT] BETWEEN low AND high`, i.e. `x >= low AND x <= high`, with
    /// `x` evaluated once.
    pub(crate) fn between(
        &self,
        expr: &Expr,
        low: &Expr,
        high: &Expr,
        negated: bool,
        at: usize,
    ) -> Result<Node, ExprError> {
        let x = self.expr(expr)?;
        let lo = self.expr(low)?;
        let hi = self.expr(high)?;
        let Some(ty) = self.comparable(&[&x, &lo, &hi], at)? else {
            return Ok(Node::Bool(Operand::Const(None)));
        };
        fn build<K: Kind>(
            x: Operand<K>,
            lo: Operand<K>,
            hi: Operand<K>,
            negated: bool,
        ) -> Operand<KBool> {
            match (x, lo, hi) {
                // `field BETWEEN constant AND constant`, the common case.
                (Operand::Col(i), Operand::Const(Some(lo)), Operand::Const(Some(hi))) => {
                    Operand::new(move |batch, r| {
                        Ok(K::read(batch.column(i), r)
                            .map(|v| (v >= K::borrow(&lo) && v <= K::borrow(&hi)) != negated))
                    })
                }
                (x, lo, hi) => Operand::new(move |batch, r| {
                    let Some(v) = x.eval(batch, r)? else {
                        return Ok(None);
                    };
                    let ge = lo.eval(batch, r)?.map(|l| v >= l);
                    if ge == Some(false) {
                        return Ok(Some(negated));
                    }
                    let le = hi.eval(batch, r)?.map(|h| v <= h);
                    Ok(and3(ge, le).map(|b| b != negated))
                }),
            }
        }
        Ok(Node::Bool(
            with_kind!(ty, K => build::<K>(K::operand(x), K::operand(lo), K::operand(hi), negated)),
        ))
    }

    /// `x [NOT] IN (a, b, ...)`: true if `x` equals an element; else NULL if
    /// `x` or an element is NULL; else false.
    pub(crate) fn in_list(
        &self,
        expr: &Expr,
        list: &[Expr],
        negated: bool,
        at: usize,
    ) -> Result<Node, ExprError> {
        let x = self.expr(expr)?;
        let items = list
            .iter()
            .map(|e| self.expr(e))
            .collect::<Result<Vec<_>, _>>()?;
        let mut all: Vec<&Node> = vec![&x];
        all.extend(items.iter());
        let Some(ty) = self.comparable(&all, at)? else {
            return Ok(Node::Bool(Operand::Const(None)));
        };
        if items.iter().all(Node::is_const) {
            let has_null = items.iter().any(Node::is_null_const);
            let op = match ty {
                DataType::Bool => {
                    let values: Vec<bool> = const_values::<KBool>(items);
                    let (t, f) = (values.contains(&true), values.contains(&false));
                    set_test(
                        KBool::operand(x),
                        has_null,
                        negated,
                        move |v: bool| if v { t } else { f },
                    )
                }
                DataType::Int => {
                    let set = ConstSet::new(const_values::<KInt>(items));
                    set_test(KInt::operand(x), has_null, negated, move |v: i64| {
                        set.contains(&v)
                    })
                }
                DataType::Float => {
                    // Compare bit patterns of normalised values: -0.0 is
                    // 0.0, and NaN (unequal to everything) is left out.
                    let values = const_values::<KFloat>(items);
                    let set = ConstSet::new(
                        values
                            .into_iter()
                            .filter(|v| !v.is_nan())
                            .map(float_key)
                            .collect(),
                    );
                    set_test(KFloat::operand(x), has_null, negated, move |v: f64| {
                        set.contains(&float_key(v))
                    })
                }
                DataType::Str => {
                    let values = const_values::<KStr>(items);
                    let set =
                        ConstSet::new(values.into_iter().map(String::into_boxed_str).collect());
                    set_test(KStr::operand(x), has_null, negated, move |v| {
                        set.contains::<str>(&v)
                    })
                }
            };
            return Ok(Node::Bool(op));
        }
        fn build<K: Kind>(x: Operand<K>, items: Vec<Operand<K>>, negated: bool) -> Operand<KBool> {
            Operand::new(move |batch, r| {
                let Some(v) = x.eval(batch, r)? else {
                    return Ok(None);
                };
                let mut saw_null = false;
                for item in &items {
                    match item.eval(batch, r)? {
                        Some(i) if i == v => return Ok(Some(!negated)),
                        Some(_) => {}
                        None => saw_null = true,
                    }
                }
                Ok(if saw_null { None } else { Some(negated) })
            })
        }
        Ok(Node::Bool(with_kind!(ty, K => {
            build::<K>(K::operand(x), items.into_iter().map(K::operand).collect(), negated)
        })))
    }
}

/// The non-NULL values of constant nodes.
fn const_values<K: Kind>(items: Vec<Node>) -> Vec<K::Value> {
    items
        .into_iter()
        .filter_map(|n| K::operand(n).as_const().flatten().cloned())
        .collect()
}

fn float_key(v: f64) -> u64 {
    if v == 0.0 { 0 } else { v.to_bits() }
}

/// The IN test against a constant set, with SQL's NULL rules.
fn set_test<K: Kind>(
    x: Operand<K>,
    has_null: bool,
    negated: bool,
    contains: impl for<'x> Fn(K::Ref<'x>) -> bool + Send + Sync + 'static,
) -> Operand<KBool> {
    Operand::new(move |batch, r| {
        let Some(v) = x.eval(batch, r)? else {
            return Ok(None);
        };
        Ok(if contains(v) {
            Some(!negated)
        } else if has_null {
            None
        } else {
            Some(negated)
        })
    })
}

/// A set of constants: scanned while tiny, bisected while small (no
/// hashing, fewer cache misses), hashed beyond that.
enum ConstSet<T> {
    Tiny(Vec<T>),
    Sorted(Vec<T>),
    Hashed(HashSet<T>),
}

const TINY_MAX: usize = 8;
const SORTED_MAX: usize = 32;

impl<T: Ord + Hash + Eq> ConstSet<T> {
    fn new(mut values: Vec<T>) -> ConstSet<T> {
        crate::cold_sort::sort(&mut values);
        values.dedup();
        if values.len() <= TINY_MAX {
            ConstSet::Tiny(values)
        } else if values.len() <= SORTED_MAX {
            ConstSet::Sorted(values)
        } else {
            ConstSet::Hashed(values.into_iter().collect())
        }
    }

    #[inline]
    fn contains<Q: Ord + Hash + Eq + ?Sized>(&self, q: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        match self {
            ConstSet::Tiny(v) => v.iter().any(|e| e.borrow() == q),
            ConstSet::Sorted(v) => v.binary_search_by(|e| e.borrow().cmp(q)).is_ok(),
            ConstSet::Hashed(s) => s.contains(q),
        }
    }
}
