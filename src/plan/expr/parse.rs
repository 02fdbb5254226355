//! Parsing one expression with sqlparser, and mapping sqlparser's
//! line/column positions to byte offsets in the expression text.

use sqlparser::ast::Expr;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Token};

use super::ExprError;

/// Parses `text` as exactly one SQL expression.
pub(crate) fn parse(text: &str) -> Result<Expr, ExprError> {
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(text)
        .map_err(|e| parser_error(text, e))?;
    let expr = parser.parse_expr().map_err(|e| parser_error(text, e))?;
    // `parse_expr` stops at the first token that cannot continue the
    // expression; anything left over is a mistake (`a b`, `SELECT 1`, `x;`).
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(ExprError {
            offset: byte_offset(text, next.span.start).unwrap_or(0),
            message: format!(
                "unexpected `{}` after the end of the expression",
                next.token
            ),
        });
    }
    Ok(expr)
}

/// The byte offset of a 1-based line and column (counted in chars, as
/// sqlparser's tokenizer does); `None` for sqlparser's "unknown" location.
pub(crate) fn byte_offset(text: &str, loc: Location) -> Option<usize> {
    if loc.line == 0 || loc.column == 0 {
        return None;
    }
    let mut line_start = 0;
    for _ in 1..loc.line {
        match text[line_start..].find('\n') {
            Some(i) => line_start += i + 1,
            None => return Some(text.len()),
        }
    }
    let line = &text[line_start..];
    let column = usize::try_from(loc.column - 1).unwrap_or(usize::MAX);
    Some(
        line_start
            + line
                .char_indices()
                .nth(column)
                .map_or(line.len(), |(i, _)| i),
    )
}

/// sqlparser reports positions inside its message ("... at Line: 1,
/// Column: 7"); move it to `offset` and keep the rest of the message.
fn parser_error(text: &str, e: ParserError) -> ExprError {
    let message = match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m,
        ParserError::RecursionLimitExceeded => {
            return ExprError {
                offset: 0,
                message: "expression is nested too deeply".into(),
            };
        }
    };
    if let Some(at) = message.rfind(" at Line: ")
        && let Some(loc) = parse_location(&message[at + " at Line: ".len()..])
    {
        return ExprError {
            offset: byte_offset(text, loc).unwrap_or(0),
            message: message[..at].to_string(),
        };
    }
    // Errors at the end of the input carry no position: point at the end.
    let offset = if message.ends_with("found: EOF") {
        text.len()
    } else {
        0
    };
    ExprError { offset, message }
}

/// Parses "1, Column: 7".
fn parse_location(s: &str) -> Option<Location> {
    let (line, column) = s.split_once(", Column: ")?;
    Some(Location {
        line: line.trim().parse().ok()?,
        column: column.trim().parse().ok()?,
    })
}
