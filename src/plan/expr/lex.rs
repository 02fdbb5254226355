//! The tokenizer of the expression parser: words, quoted names, numbers,
//! string literals and operators, each with its byte range in the text.

use super::ExprError;

pub(super) fn error(offset: usize, message: impl Into<String>) -> ExprError {
    ExprError {
        offset,
        message: message.into(),
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// A bare word: a keyword, a field or a function name.
    Word(String),
    /// `"name"` or `` `name` ``: always a name, never a keyword.
    Quoted(String),
    Number(String),
    Str(String),
    /// Operators and punctuation, as written.
    Punct(&'static str),
    /// Any other character.
    Other(char),
    Eof,
}

impl Tok {
    pub(super) fn text(&self) -> String {
        match self {
            Tok::Word(w) | Tok::Number(w) => w.clone(),
            Tok::Quoted(q) => format!("\"{q}\""),
            Tok::Str(s) => format!("'{s}'"),
            Tok::Punct(p) => (*p).to_string(),
            Tok::Other(c) => c.to_string(),
            Tok::Eof => "EOF".into(),
        }
    }

    /// Whether this is the keyword `kw` (given in upper case).
    pub(super) fn is(&self, kw: &str) -> bool {
        matches!(self, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
    }
}

#[derive(Clone, Debug)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Longest first, so `<=>` wins over `<=` and `<`.
const PUNCT: &[&str] = &[
    "<=>", "||", "::", "=>", "<=", ">=", "<>", "!=", "==", "<<", ">>", "!~", "~*", "+", "-", "*",
    "/", "%", "=", "<", ">", "(", ")", ",", ".", "^", "&", "|", "~", "#", "[", "]", ";", ":", "?",
    "@", "!", "$", "{", "}",
];

pub(super) fn tokenize(text: &str) -> Result<Vec<Token>, ExprError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().expect("in bounds");
        let start = i;
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if text[i..].starts_with("--") {
            i = text[i..].find('\n').map_or(text.len(), |n| i + n);
            continue;
        }
        let tok = if c.is_ascii_digit()
            || (c == '.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            i = number_end(bytes, i);
            Tok::Number(text[start..i].to_string())
        } else if c == '\'' {
            let (s, end) =
                quoted(text, i, '\'').ok_or_else(|| error(start, "unterminated string literal"))?;
            i = end;
            Tok::Str(s)
        } else if c == '"' || c == '`' {
            let (s, end) =
                quoted(text, i, c).ok_or_else(|| error(start, "unterminated quoted name"))?;
            i = end;
            Tok::Quoted(s)
        } else if c.is_alphabetic() || c == '_' {
            i += text[i..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(text.len() - i);
            let word = &text[start..i];
            // `E'\n'` (backslash escapes) and `N'x'` are strings;
            // other prefixes (`X'AB'`, `B'01'`) are literals eddy lacks.
            let prefixed = bytes.get(i) == Some(&b'\'');
            if prefixed && (word.eq_ignore_ascii_case("e") || word.eq_ignore_ascii_case("n")) {
                let literal = if word.eq_ignore_ascii_case("e") {
                    escaped(text, i)
                } else {
                    quoted(text, i, '\'')
                };
                let (s, end) =
                    literal.ok_or_else(|| error(start, "unterminated string literal"))?;
                i = end;
                tokens.push(Token {
                    tok: Tok::Str(s),
                    start,
                    end,
                });
                continue;
            }
            if prefixed {
                let end = quoted(text, i, '\'').map_or(text.len(), |(_, e)| e);
                return Err(error(
                    start,
                    format!(
                        "literal `{}{}` is not supported; use 'single-quoted' strings",
                        word.to_uppercase(),
                        &text[i..end]
                    ),
                ));
            }
            Tok::Word(word.to_string())
        } else if c == '$' || c == '?' {
            let end = text[i + 1..]
                .find(|c: char| !c.is_alphanumeric())
                .map_or(text.len(), |n| i + 1 + n);
            return Err(error(
                start,
                format!(
                    "placeholders such as `{}` are not supported",
                    &text[start..end]
                ),
            ));
        } else if let Some(p) = PUNCT.iter().find(|p| text[i..].starts_with(**p)) {
            i += p.len();
            Tok::Punct(p)
        } else {
            i += c.len_utf8();
            Tok::Other(c)
        };
        tokens.push(Token { tok, start, end: i });
    }
    tokens.push(Token {
        tok: Tok::Eof,
        start: text.len(),
        end: text.len(),
    });
    Ok(tokens)
}

/// The end of the number starting at `i`: digits, an optional fraction and
/// an optional exponent (`12`, `1.5`, `.5`, `5.`, `1e-3`).
fn number_end(bytes: &[u8], mut i: usize) -> usize {
    let digits = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    i = digits(i);
    if bytes.get(i) == Some(&b'.') {
        i = digits(i + 1);
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(i + 1), Some(b'+' | b'-')));
        if bytes.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            i = digits(i + 1 + sign);
        }
    }
    i
}

/// The contents of the literal quoted by `q` at `start` (a doubled quote
/// stands for one) and the offset past its closing quote.
fn quoted(text: &str, start: usize, q: char) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = text[start + 1..].char_indices().peekable();
    while let Some((n, c)) = chars.next() {
        if c != q {
            out.push(c);
        } else if chars.peek().is_some_and(|&(_, next)| next == q) {
            out.push(q);
            chars.next();
        } else {
            return Some((out, start + 1 + n + 1));
        }
    }
    None
}

/// The contents of the `E'...'` string whose quote is at `start`, with
/// C-style backslash escapes, and the offset past its closing quote.
fn escaped(text: &str, start: usize) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((n, c)) = chars.next() {
        match c {
            '\\' => {
                let (_, e) = chars.next()?;
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    '0' => '\0',
                    other => other,
                });
            }
            '\'' if text[start + 1 + n + 1..].starts_with('\'') => {
                out.push('\'');
                chars.next();
            }
            '\'' => return Some((out, start + 1 + n + 1)),
            c => out.push(c),
        }
    }
    None
}
