//! Diagnostics that point at a place in the pipeline file.

use std::fmt;
use std::ops::Range;

/// A value from the file together with the bytes it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sp<T> {
    pub(crate) value: T,
    pub(crate) span: Range<usize>,
}

impl<T> Sp<T> {
    pub(crate) fn new(value: T, span: Range<usize>) -> Sp<T> {
        Sp { value, span }
    }
}

impl<T> std::ops::Deref for Sp<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// Where in the config a problem is: which component and which field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Context {
    /// `sources.readings`, `transforms.hot`, `node`, ...
    pub(crate) component: Option<String>,
    pub(crate) field: Option<String>,
}

/// One problem found in a config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Diagnostic {
    pub(crate) span: Range<usize>,
    pub(crate) context: Context,
    pub(crate) message: String,
}

/// All problems of one file, rendered as `FILE:LINE:COL: error: ...`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Diagnostics {
    pub(crate) file: String,
    pub(crate) text: String,
    pub(crate) errors: Vec<Diagnostic>,
    pub(crate) warnings: Vec<Diagnostic>,
}

impl Diagnostics {
    pub(crate) fn new(file: &str, text: &str) -> Diagnostics {
        Diagnostics {
            file: file.to_string(),
            text: text.to_string(),
            ..Default::default()
        }
    }

    pub(crate) fn error(
        &mut self,
        span: Range<usize>,
        context: &Context,
        message: impl Into<String>,
    ) {
        self.errors.push(Diagnostic {
            span,
            context: context.clone(),
            message: message.into(),
        });
    }

    pub(crate) fn warning(
        &mut self,
        span: Range<usize>,
        context: &Context,
        message: impl Into<String>,
    ) {
        self.warnings.push(Diagnostic {
            span,
            context: context.clone(),
            message: message.into(),
        });
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Line and column (both 1-based, column in characters) of byte `offset`.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    fn render_one(&self, out: &mut impl fmt::Write, level: &str, d: &Diagnostic) -> fmt::Result {
        let (line, col) = self.line_col(d.span.start);
        write!(out, "{}:{}:{}: {}: ", self.file, line, col, level)?;
        match (&d.context.component, &d.context.field) {
            (Some(c), Some(f)) => write!(out, "{c}: field `{f}`: ")?,
            (Some(c), None) => write!(out, "{c}: ")?,
            (None, Some(f)) => write!(out, "field `{f}`: ")?,
            (None, None) => {}
        }
        writeln!(out, "{}", d.message)
    }

    /// Errors first in file order, then warnings.
    pub(crate) fn render(&self) -> String {
        let mut errors: Vec<&Diagnostic> = self.errors.iter().collect();
        crate::cold_sort::sort_by_key(&mut errors, |d| d.span.start);
        let mut out = String::new();
        for d in errors {
            let _ = self.render_one(&mut out, "error", d);
        }
        for d in &self.warnings {
            let _ = self.render_one(&mut out, "warning", d);
        }
        out
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The closest of `candidates` to `word`, if it is close enough to be a
/// likely typo.
pub(crate) fn suggest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, c)| d <= 2.max(c.len() / 3) && d < c.len().max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != cb) as usize)
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters() {
        let d = Diagnostics::new("f.toml", "a = 1\nbé = \"x\"\n");
        assert_eq!(d.line_col(0), (1, 1));
        assert_eq!(d.line_col(6), (2, 1));
        // `=` after the two-byte é is the 4th character of line 2.
        assert_eq!(d.line_col(10), (2, 4));
    }

    #[test]
    fn suggestions_catch_typos_only() {
        assert_eq!(
            suggest("conditon", ["condition", "inputs"]),
            Some("condition")
        );
        assert_eq!(suggest("zzz", ["condition", "inputs"]), None);
    }
}
