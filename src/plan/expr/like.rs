//! `LIKE` and `ILIKE`: `%` matches any run of characters, `_` exactly one
//! character (not byte), and `ESCAPE 'c'` makes `c%`, `c_` and `cc`
//! literal. As in the SQL standard there is no escape character unless
//! one is given.
//!
//! A constant pattern is compiled once. The common shapes (`abc`, `abc%`,
//! `%abc`, `%abc%`) become a plain string comparison; the rest a matcher
//! over the literal pieces between `%`s. ILIKE compares characters after
//! simple (one-to-one) lower-casing, on the fly, so it allocates nothing
//! and `_` still counts the text's characters.

use std::borrow::Cow;

use super::ast::{Expr, ExprKind};

use super::compile::Compiler;
use super::node::{KBool, KStr, Node, Operand};
use super::{EvalError, ExprError};

/// One element of a pattern between `%`s.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Part {
    Lit(String),
    /// This many `_`.
    AnyChars(usize),
}

/// A run of pattern elements without `%`.
type Segment = Vec<Part>;

/// The shape of a compiled pattern.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Shape {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    /// `%` alone: every string.
    Any,
    /// The general case: `segments` were separated by `%`s. With no `%`,
    /// there is one segment that must match the whole text.
    General {
        segments: Vec<Segment>,
        has_percent: bool,
    },
}

/// A compiled LIKE pattern; `fold` for ILIKE (literals are stored folded).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Pattern {
    pub(crate) shape: Shape,
    fold: bool,
}

/// ILIKE's character comparison: the lower case of `c` where that is a
/// single character (nearly always), else `c` itself.
#[inline]
fn fold_char(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

impl Pattern {
    /// Compiles `pattern`; `escape` is the escape character, if any.
    pub(crate) fn new(pattern: &str, escape: Option<char>, fold: bool) -> Result<Pattern, String> {
        let mut segments: Vec<Segment> = vec![Vec::new()];
        let mut lit = String::new();
        let flush = |lit: &mut String, seg: &mut Segment| {
            if !lit.is_empty() {
                seg.push(Part::Lit(std::mem::take(lit)));
            }
        };
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            if Some(c) == escape {
                match chars.next() {
                    Some(next) => lit.push(if fold { fold_char(next) } else { next }),
                    None => {
                        return Err("a LIKE pattern must not end with its escape character".into());
                    }
                }
            } else if c == '%' {
                let seg = segments.last_mut().expect("at least one segment");
                flush(&mut lit, seg);
                // `%%` is the same as `%`.
                let empty = seg.is_empty();
                if !(empty && segments.len() > 1) {
                    segments.push(Vec::new());
                }
            } else if c == '_' {
                let seg = segments.last_mut().expect("at least one segment");
                flush(&mut lit, seg);
                match seg.last_mut() {
                    Some(Part::AnyChars(n)) => *n += 1,
                    _ => seg.push(Part::AnyChars(1)),
                }
            } else {
                lit.push(if fold { fold_char(c) } else { c });
            }
        }
        flush(&mut lit, segments.last_mut().expect("at least one segment"));

        let has_percent = segments.len() > 1;
        let lit_of = |seg: &Segment| match &seg[..] {
            [] => Some(String::new()),
            [Part::Lit(s)] => Some(s.clone()),
            _ => None,
        };
        let shape = match &segments[..] {
            [only] => match lit_of(only) {
                Some(s) => Shape::Exact(s),
                None => Shape::General {
                    segments,
                    has_percent,
                },
            },
            [first, last] => match (lit_of(first), lit_of(last)) {
                (Some(f), Some(l)) if f.is_empty() && l.is_empty() => Shape::Any,
                (Some(f), Some(l)) if l.is_empty() => Shape::Prefix(f),
                (Some(f), Some(l)) if f.is_empty() => Shape::Suffix(l),
                _ => Shape::General {
                    segments,
                    has_percent,
                },
            },
            [first, middle, last] if first.is_empty() && last.is_empty() => match lit_of(middle) {
                Some(m) => Shape::Contains(m),
                None => Shape::General {
                    segments,
                    has_percent,
                },
            },
            _ => Shape::General {
                segments,
                has_percent,
            },
        };
        Ok(Pattern { shape, fold })
    }

    pub(crate) fn matches(&self, s: &str) -> bool {
        let fold = self.fold;
        match &self.shape {
            Shape::Exact(p) if !fold => s == p,
            Shape::Prefix(p) if !fold => s.starts_with(p.as_str()),
            Shape::Suffix(p) if !fold => s.ends_with(p.as_str()),
            Shape::Contains(p) if !fold => s.contains(p.as_str()),
            Shape::Exact(p) => lit_at(s, 0, p, true) == Some(s.len()),
            Shape::Prefix(p) => lit_at(s, 0, p, true).is_some(),
            Shape::Suffix(p) => lit_back(s, s.len(), p, true).is_some(),
            Shape::Contains(p) => s
                .char_indices()
                .map(|(i, _)| i)
                .chain([s.len()])
                .any(|i| lit_at(s, i, p, true).is_some()),
            Shape::Any => true,
            Shape::General {
                segments,
                has_percent,
            } => general_match(segments, *has_percent, s, fold),
        }
    }
}

fn general_match(segments: &[Segment], has_percent: bool, s: &str, fold: bool) -> bool {
    let (first, rest) = segments.split_first().expect("at least one segment");
    let Some(mut pos) = match_at(first, s, 0, fold) else {
        return false;
    };
    if !has_percent {
        return pos == s.len();
    }
    let (last, middle) = rest.split_last().expect("a segment after `%`");
    // The last segment is anchored at the end; `_` has a fixed length in
    // characters, so where it starts is determined.
    let Some(end) = match_back(last, s, s.len(), fold) else {
        return false;
    };
    if end < pos {
        return false;
    }
    // Middle segments: the leftmost match of each leaves the most room for
    // the next, so greedy search without backtracking is exact.
    let s = &s[..end];
    for seg in middle {
        match find(seg, s, pos, fold) {
            Some(next) => pos = next,
            None => return false,
        }
    }
    true
}

/// If literal `lit` matches `s` at byte `pos`, the byte position after it.
/// Works on bytes: `pos` is a char boundary, and so is the end of a match.
#[inline]
fn lit_at(s: &str, mut pos: usize, lit: &str, fold: bool) -> Option<usize> {
    let b = s.as_bytes();
    if !fold {
        let end = pos.checked_add(lit.len()).filter(|&e| e <= b.len())?;
        return bytes_eq(&b[pos..end], lit.as_bytes()).then_some(end);
    }
    for p in lit.chars() {
        let &lead = b.get(pos)?;
        if lead.is_ascii() {
            if char::from(lead.to_ascii_lowercase()) != p {
                return None;
            }
            pos += 1;
        } else {
            let c = s[pos..].chars().next()?;
            if fold_char(c) != p {
                return None;
            }
            pos += c.len_utf8();
        }
    }
    Some(pos)
}

/// If literal `lit` matches `s` ending at byte `end`, where it starts.
#[inline]
fn lit_back(s: &str, mut end: usize, lit: &str, fold: bool) -> Option<usize> {
    let b = s.as_bytes();
    if !fold {
        let start = end.checked_sub(lit.len())?;
        return bytes_eq(&b[start..end], lit.as_bytes()).then_some(start);
    }
    for p in lit.chars().rev() {
        let c = s[..end].chars().next_back()?;
        if fold_char(c) != p {
            return None;
        }
        end -= c.len_utf8();
    }
    Some(end)
}

/// The byte after `n` characters from byte `pos`, if there are that many.
#[inline]
fn skip_chars(b: &[u8], mut pos: usize, n: usize) -> Option<usize> {
    for _ in 0..n {
        let &lead = b.get(pos)?;
        pos += match lead {
            0..0xE0 => 1 + usize::from(lead >= 0x80),
            0xE0..0xF0 => 3,
            _ => 4,
        };
    }
    Some(pos)
}

/// The start of the `n`th character before byte `end`, if there are that
/// many.
#[inline]
fn skip_chars_back(b: &[u8], mut end: usize, n: usize) -> Option<usize> {
    for _ in 0..n {
        end = end.checked_sub(1)?;
        // Step over UTF-8 continuation bytes (0b10xx_xxxx).
        while b[end] & 0xC0 == 0x80 {
            end -= 1;
        }
    }
    Some(end)
}

/// Where `seg` ends if it matches `s` at byte `pos`.
fn match_at(seg: &[Part], s: &str, mut pos: usize, fold: bool) -> Option<usize> {
    for part in seg {
        pos = match part {
            Part::Lit(l) => lit_at(s, pos, l, fold)?,
            Part::AnyChars(n) => skip_chars(s.as_bytes(), pos, *n)?,
        };
    }
    Some(pos)
}

/// Where `seg` starts if it matches `s` ending at byte `end`.
fn match_back(seg: &[Part], s: &str, mut end: usize, fold: bool) -> Option<usize> {
    for part in seg.iter().rev() {
        end = match part {
            Part::Lit(l) => lit_back(s, end, l, fold)?,
            Part::AnyChars(n) => skip_chars_back(s.as_bytes(), end, *n)?,
        };
    }
    Some(end)
}

/// Where the leftmost match of `seg` in `s` at or after byte `from` ends.
fn find(seg: &[Part], s: &str, from: usize, fold: bool) -> Option<usize> {
    match seg.first() {
        // Jump between occurrences of the leading literal.
        Some(Part::Lit(l)) if !fold => {
            let mut start = from;
            while let Some(i) = s[start..].find(l.as_str()) {
                if let Some(end) = match_at(seg, s, start + i, fold) {
                    return Some(end);
                }
                start += i + s[start + i..].chars().next().map_or(1, char::len_utf8);
            }
            None
        }
        _ => s[from..]
            .char_indices()
            .map(|(i, _)| from + i)
            .chain(std::iter::once(s.len()))
            .find_map(|start| match_at(seg, s, start, fold)),
    }
}

impl Compiler<'_> {
    pub(crate) fn like(
        &self,
        expr: &Expr,
        pattern: &Expr,
        escape: Option<&Expr>,
        negated: bool,
        ilike: bool,
    ) -> Result<Node, ExprError> {
        let what = match (ilike, negated) {
            (false, false) => "LIKE",
            (false, true) => "NOT LIKE",
            (true, false) => "ILIKE",
            (true, true) => "NOT ILIKE",
        };
        let x = self.expr(expr)?;
        let x = self.need_str(expr, x, what)?;
        let p = self.expr(pattern)?;
        let p = self.need_str(pattern, p, format!("the pattern of {what}"))?;
        let escape = match escape {
            None => None,
            Some(e) => self.escape_char(e)?,
        };
        let op = match p {
            Operand::Const(None) => Operand::Const(None),
            Operand::Const(Some(text)) => {
                let compiled = Pattern::new(&text, escape, ilike)
                    .map_err(|m| self.error(self.at(pattern), m))?;
                const_like(x, compiled, negated)
            }
            // A pattern that changes per record is compiled per record.
            p => Operand::new(move |b, r| {
                let Some(s) = x.eval(b, r)? else {
                    return Ok(None);
                };
                let Some(p) = p.eval(b, r)? else {
                    return Ok(None);
                };
                let compiled =
                    Pattern::new(&p, escape, ilike).map_err(|m| EvalError(Cow::Owned(m)))?;
                Ok(Some(compiled.matches(&s) != negated))
            }),
        };
        Ok(Node::Bool(op))
    }

    /// The escape character of `ESCAPE 'c'`; `ESCAPE ''` means none.
    fn escape_char(&self, e: &Expr) -> Result<Option<char>, ExprError> {
        if let ExprKind::Str(s) = &e.kind {
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (None, _) => return Ok(None),
                (Some(c), None) => return Ok(Some(c)),
                _ => {}
            }
        }
        Err(self.error(
            self.at(e),
            "ESCAPE needs a string of one character, such as ESCAPE '!'",
        ))
    }
}

/// LIKE against a constant pattern, with a closure per pattern shape so the
/// common ones are a single string comparison.
fn const_like(x: Operand<KStr>, pattern: Pattern, negated: bool) -> Operand<KBool> {
    if pattern.fold {
        return Operand::new(move |b, r| Ok(x.eval(b, r)?.map(|s| pattern.matches(&s) != negated)));
    }
    match pattern.shape {
        Shape::Exact(p) => str_test(x, move |s| bytes_eq(s, p.as_bytes()) != negated),
        Shape::Prefix(p) => str_test(x, move |s| {
            (s.len() >= p.len() && bytes_eq(&s[..p.len()], p.as_bytes())) != negated
        }),
        Shape::Suffix(p) => str_test(x, move |s| {
            (s.len() >= p.len() && bytes_eq(&s[s.len() - p.len()..], p.as_bytes())) != negated
        }),
        Shape::Contains(p) => {
            Operand::new(move |b, r| Ok(x.eval(b, r)?.map(|s| s.contains(p.as_str()) != negated)))
        }
        Shape::Any => Operand::new(move |b, r| Ok(x.eval(b, r)?.map(|_| !negated))),
        _ => Operand::new(move |b, r| Ok(x.eval(b, r)?.map(|s| pattern.matches(&s) != negated))),
    }
}

/// A test on the bytes of a string operand, reading a field directly.
fn str_test(
    x: Operand<KStr>,
    test: impl Fn(&[u8]) -> bool + Send + Sync + 'static,
) -> Operand<KBool> {
    match x {
        Operand::Col(i) => {
            Operand::new(move |b, r| Ok(b.column(i).str(r).map(|s| test(s.as_bytes()))))
        }
        x => Operand::new(move |b, r| Ok(x.eval(b, r)?.map(|s| test(s.as_bytes())))),
    }
}

/// Byte equality for the short literals of LIKE patterns, where a plain
/// loop is faster than a call to `memcmp`.
#[inline(always)]
fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}
