//! Parse errors, unsupported syntax and error positions.

use super::*;

#[test]
fn parse_errors_say_what_was_expected_and_where() {
    let e = err("temp > ");
    assert_eq!(
        e.message,
        "expected an expression, found the end of the text"
    );
    assert_eq!(e.offset, 7);
    let e = err("temp > )");
    assert_eq!(e.message, "expected an expression, found `)`");
    assert_eq!(e.offset, 7);
    let e = err("'é' = )");
    assert_eq!(e.offset, 7); // column 7, byte 7 (é is two bytes)
    let e = err("a = 'unterminated");
    assert_eq!(e.message, "unterminated string literal");
    assert_eq!(e.offset, 4);
    let e = err("temp >\n  (1 +\n  )");
    assert_eq!(e.offset, 16);
    let e = err("");
    assert_eq!(
        e.message,
        "expected an expression, found the end of the text"
    );
}

#[test]
fn trailing_input_is_an_error() {
    assert_err(
        "temp > 1 temp",
        9,
        "unexpected `temp` after the end of the expression",
    );
    assert_err(
        "temp > 1;",
        8,
        "unexpected `;` after the end of the expression",
    );
    assert_err("SELECT 1", 0, "subqueries are not supported");
}

#[test]
fn offsets_point_at_the_offending_node() {
    assert_err("temp > 30 AND tmp < 3", 14, "unknown field `tmp`");
    assert_err("ok AND\n  nope", 9, "unknown field `nope`");
    assert_err("'ü' || upper(ñ)", 14, "unknown field `ñ`");
    assert_err("n + 1 > 'a'", 0, "cannot compare int with string");
    assert_err("upper(sensor, 'x')", 0, "`upper` takes 1 argument, got 2");
    assert_err(
        "coalesce(n, 1) + upper(2)",
        23,
        "`upper` needs a string, got int",
    );
}

#[test]
fn unsupported_syntax_says_what_is_supported() {
    assert_err("(SELECT 1)", 1, "subqueries are not supported");
    assert_err("EXISTS (SELECT 1)", 8, "subqueries are not supported");
    assert_err("n ^ 2", 2, "operator `^` is not supported; use power(x, y)");
    assert_err(
        "n & 2",
        2,
        "operator `&` is not supported; supported are literals",
    );
    assert_err("sensor ~ 'a'", 7, "operator `~` is not supported");
    assert_err("$1 > n", 0, "placeholders such as `$1` are not supported");
    assert_err(
        "ARRAY[1, 2]",
        5,
        "unexpected `[` after the end of the expression",
    );
    assert_err("INTERVAL '1' DAY", 0, "typed literals");
    assert_err("x'AB'", 0, "literal `X'AB'` is not supported");
    assert_err("n = ANY(ts)", 4, "unknown function `any`");
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
    let e = err(&deep);
    assert!(e.message.starts_with("expression is nested too deeply"));
    // A long chain of operators nests as deeply as parentheses do.
    let chain = vec!["n"; 100_000].join(" + ");
    assert!(
        err(&chain)
            .message
            .starts_with("expression is nested too deeply")
    );
    let or_chain = vec!["ok"; 100_000].join(" OR ");
    assert!(
        err(&or_chain)
            .message
            .starts_with("expression is nested too deeply")
    );
    // Right at the limit the compiler still has stack to spare.
    let at_limit = vec!["n"; 120].join(" + ");
    assert_eq!(eval(&at_limit), I(840));
    let parens = format!("{}n{}", "(".repeat(120), ")".repeat(120));
    assert_eq!(eval(&parens), I(7));
    let minus = format!("{}n", "- ".repeat(120));
    assert_eq!(eval(&minus), I(7));
    let nots = format!("{}ok", "NOT ".repeat(121));
    assert_eq!(eval(&nots), B(false));
    // Within the limit nesting is fine.
    let ok = format!("{}n{}", "(".repeat(20), " + 1)".repeat(20));
    assert_eq!(eval(&ok), I(27));
}
