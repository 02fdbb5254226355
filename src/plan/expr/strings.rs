//! String functions. Positions and lengths count characters, not bytes.
//! Results that are a piece of the input (`substring`, `trim`, unchanged
//! `lower`/`replace`) borrow it rather than copy it.

use std::borrow::Cow;
use std::ops::Range;

use super::ast::{Expr, TrimSide};

use super::cast::to_text;
use super::compile::Compiler;
use super::node::{KBool, KInt, KStr, Node, Operand, map2};
use super::{EvalError, ExprError};

/// `s[range]`, still borrowing if `s` does.
fn slice_cow(s: Cow<'_, str>, range: Range<usize>) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(t) => Cow::Borrowed(&t[range]),
        Cow::Owned(mut t) => {
            t.truncate(range.end);
            t.drain(..range.start);
            Cow::Owned(t)
        }
    }
}

/// The byte range of `t` within `s`, where `t` is a slice of `s`.
fn sub_range(s: &str, t: &str) -> Range<usize> {
    let start = t.as_ptr() as usize - s.as_ptr() as usize;
    start..start + t.len()
}

/// The byte range of the characters numbered `from..to` (0-based, `to`
/// exclusive, `None` for the end) of `s`, clamped to `s`.
fn char_range(s: &str, from: usize, to: Option<usize>) -> Range<usize> {
    let mut ends = s
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()));
    let start = ends.nth(from).unwrap_or(s.len());
    let end = match to {
        Some(to) if to > from => ends.nth(to - from - 1).unwrap_or(s.len()),
        Some(_) => start,
        None => s.len(),
    };
    start..end
}

/// Longest result `lpad`/`rpad` may build, so a bad length in one record
/// cannot exhaust memory.
const MAX_PAD: i64 = 1 << 20;

impl Compiler<'_> {
    fn str_arg(&self, e: &Expr, name: &str) -> Result<Operand<KStr>, ExprError> {
        let node = self.expr(e)?;
        self.need_str(e, node, format!("`{name}`"))
    }

    fn int_arg(&self, e: &Expr, name: &str) -> Result<Operand<KInt>, ExprError> {
        let node = self.expr(e)?;
        self.need_int(e, node, format!("`{name}`"))
    }

    pub(crate) fn change_case(
        &self,
        arg: &Expr,
        name: &str,
        upper: bool,
    ) -> Result<Node, ExprError> {
        let x = self.str_arg(arg, name)?;
        // Text that is already in the wanted case is returned as is.
        Ok(Node::Str(if upper {
            Operand::new(move |b, r| {
                Ok(x.eval_detached(b, r)?.map(|s| {
                    if s.bytes().all(|c| c.is_ascii() && !c.is_ascii_lowercase()) {
                        s
                    } else {
                        Cow::Owned(s.to_uppercase())
                    }
                }))
            })
        } else {
            Operand::new(move |b, r| {
                Ok(x.eval_detached(b, r)?.map(|s| {
                    if s.bytes().all(|c| c.is_ascii() && !c.is_ascii_uppercase()) {
                        s
                    } else {
                        Cow::Owned(s.to_lowercase())
                    }
                }))
            })
        }))
    }

    pub(crate) fn length(&self, arg: &Expr, name: &str) -> Result<Node, ExprError> {
        let x = self.str_arg(arg, name)?;
        Ok(Node::Int(Operand::new(move |b, r| {
            Ok(x.eval(b, r)?.map(|s| s.chars().count() as i64))
        })))
    }

    /// `concat(...)`: NULL arguments are skipped (as in Postgres), other
    /// types converted to text; never NULL.
    pub(crate) fn concat_fn(&self, args: &[&Expr]) -> Result<Node, ExprError> {
        let parts = args
            .iter()
            .map(|e| Ok(to_text(self.expr(e)?)))
            .collect::<Result<Vec<_>, ExprError>>()?;
        Ok(Node::Str(Operand::new(move |b, r| {
            let mut out = String::new();
            for p in &parts {
                if let Some(s) = p.eval(b, r)? {
                    out.push_str(&s);
                }
            }
            Ok(Some(Cow::Owned(out)))
        })))
    }

    /// `substring(s, from[, count])` / `SUBSTRING(s FROM from FOR count)`,
    /// with Postgres' rules: positions start at 1, a start before 1 still
    /// counts toward `count`, a negative count is an error.
    pub(crate) fn substring(
        &self,
        expr: &Expr,
        from: Option<&Expr>,
        count: Option<&Expr>,
    ) -> Result<Node, ExprError> {
        let x = self.str_arg(expr, "substring")?;
        let from = match from {
            Some(e) => self.int_arg(e, "substring")?,
            None => Operand::Const(Some(1)),
        };
        let count = count.map(|e| self.int_arg(e, "substring")).transpose()?;
        Ok(Node::Str(Operand::new(move |b, r| {
            let Some(s) = x.eval_detached(b, r)? else {
                return Ok(None);
            };
            let Some(start) = from.eval(b, r)? else {
                return Ok(None);
            };
            let end = match &count {
                None => None,
                Some(c) => match c.eval(b, r)? {
                    None => return Ok(None),
                    Some(n) if n < 0 => {
                        return Err(EvalError(Cow::Borrowed(
                            "negative substring length not allowed",
                        )));
                    }
                    Some(n) => Some(start.saturating_add(n)),
                },
            };
            // 1-based [start, end) to 0-based char indices, clamped at 0.
            let first = usize::try_from(start.max(1) - 1).unwrap_or(usize::MAX);
            let last = end.map(|e| usize::try_from(e.max(1) - 1).unwrap_or(usize::MAX));
            let range = char_range(&s, first, last);
            Ok(Some(slice_cow(s, range)))
        })))
    }

    /// Removes the characters in `chars` (default: spaces, as in standard
    /// SQL) from one or both ends.
    pub(crate) fn trim_fn(
        &self,
        name: &str,
        expr: &Expr,
        chars: Option<&Expr>,
        side: TrimSide,
    ) -> Result<Node, ExprError> {
        let x = self.str_arg(expr, name)?;
        let set = match chars {
            Some(e) => self.str_arg(e, name)?,
            None => Operand::Const(Some(" ".to_string())),
        };
        Ok(Node::Str(Operand::new(move |b, r| {
            let Some(s) = x.eval_detached(b, r)? else {
                return Ok(None);
            };
            let Some(set) = set.eval(b, r)? else {
                return Ok(None);
            };
            let strip = |c: char| set.contains(c);
            let kept = match side {
                TrimSide::Both => s.trim_matches(strip),
                TrimSide::Leading => s.trim_start_matches(strip),
                TrimSide::Trailing => s.trim_end_matches(strip),
            };
            let range = sub_range(&s, kept);
            Ok(Some(slice_cow(s, range)))
        })))
    }

    pub(crate) fn replace(&self, expr: &Expr, from: &Expr, to: &Expr) -> Result<Node, ExprError> {
        let x = self.str_arg(expr, "replace")?;
        let from = self.str_arg(from, "replace")?;
        let to = self.str_arg(to, "replace")?;
        Ok(Node::Str(Operand::new(move |b, r| {
            let Some(s) = x.eval_detached(b, r)? else {
                return Ok(None);
            };
            let Some(f) = from.eval(b, r)? else {
                return Ok(None);
            };
            let Some(t) = to.eval(b, r)? else {
                return Ok(None);
            };
            if f.is_empty() || !s.contains(&*f) {
                return Ok(Some(s));
            }
            Ok(Some(Cow::Owned(s.replace(&*f, &t))))
        })))
    }

    pub(crate) fn starts_ends_with(
        &self,
        name: &str,
        expr: &Expr,
        affix: &Expr,
        starts: bool,
    ) -> Result<Node, ExprError> {
        let x = self.str_arg(expr, name)?;
        let p = self.str_arg(affix, name)?;
        Ok(Node::Bool(if starts {
            map2::<KStr, KStr, KBool>(x, p, |s, p| Ok(s.starts_with(&*p)))
        } else {
            map2::<KStr, KStr, KBool>(x, p, |s, p| Ok(s.ends_with(&*p)))
        }))
    }

    /// `position(sub IN s)`: the 1-based character position of the first
    /// `sub` in `s`, 0 if none.
    pub(crate) fn position(&self, sub: &Expr, within: &Expr) -> Result<Node, ExprError> {
        let sub = self.str_arg(sub, "position")?;
        let s = self.str_arg(within, "position")?;
        Ok(Node::Int(map2::<KStr, KStr, KInt>(s, sub, |s, sub| {
            Ok(s.find(&*sub)
                .map_or(0, |i| s[..i].chars().count() as i64 + 1))
        })))
    }

    /// `lpad(s, n[, fill])` / `rpad`: pads with `fill` (default a space) to
    /// `n` characters, or cuts `s` to its first `n`, as Postgres does.
    pub(crate) fn pad(
        &self,
        name: &str,
        expr: &Expr,
        len: &Expr,
        fill: Option<&Expr>,
        left: bool,
    ) -> Result<Node, ExprError> {
        let x = self.str_arg(expr, name)?;
        let n = self.int_arg(len, name)?;
        let fill = match fill {
            Some(e) => self.str_arg(e, name)?,
            None => Operand::Const(Some(" ".to_string())),
        };
        Ok(Node::Str(Operand::new(move |b, r| {
            let Some(s) = x.eval_detached(b, r)? else {
                return Ok(None);
            };
            let Some(n) = n.eval(b, r)? else {
                return Ok(None);
            };
            let Some(fill) = fill.eval(b, r)? else {
                return Ok(None);
            };
            if n > MAX_PAD {
                return Err(EvalError(Cow::Borrowed("requested length too large")));
            }
            let n = usize::try_from(n).unwrap_or(0);
            let have = s.chars().count();
            if have >= n || fill.is_empty() {
                let range = char_range(&s, 0, Some(n.min(have)));
                return Ok(Some(slice_cow(s, range)));
            }
            let padding: String = fill.chars().cycle().take(n - have).collect();
            let mut out = String::with_capacity(s.len() + padding.len());
            if left {
                out.push_str(&padding);
                out.push_str(&s);
            } else {
                out.push_str(&s);
                out.push_str(&padding);
            }
            Ok(Some(Cow::Owned(out)))
        })))
    }
}
