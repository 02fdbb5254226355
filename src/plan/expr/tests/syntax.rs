//! The grammar eddy's own parser accepts: precedence, literal forms, SQL's
//! special call forms, and the errors for what it does not accept.

use super::*;

#[test]
fn precedence_follows_postgresql() {
    // * over +, + over comparison, comparison over NOT over AND over OR.
    assert_eq!(eval("1 + 2 * 3"), I(7));
    assert_eq!(eval("(1 + 2) * 3"), I(9));
    assert_eq!(eval("10 - 4 - 3"), I(3)); // left-associative
    assert_eq!(eval("2 * 3 % 4"), I(2));
    assert_eq!(eval("n + 1 = 8"), B(true));
    assert_eq!(eval("NOT n = 8 AND ok"), B(true));
    assert_eq!(eval("ok OR ok AND NOT ok"), B(true));
    assert_eq!(eval("NOT ok OR ok"), B(true));
    // `||` binds tighter than comparisons, looser than arithmetic.
    assert_eq!(eval("'a' || 'b' = 'ab'"), B(true));
    assert_eq!(eval("'n' || n + 1"), s("n8"));
    // Unary minus binds tighter than `*`, `::` tighter than unary minus.
    assert_eq!(eval("-n * 2"), I(-14));
    assert_eq!(eval("-temp::int"), I(-31));
    // IS applies to the whole comparison; BETWEEN's AND is its own.
    assert_eq!(eval("n = 7 IS TRUE"), B(true));
    assert_eq!(eval("n BETWEEN 1 AND 10 AND ok"), B(true));
    assert_eq!(eval("n NOT BETWEEN 1 AND 5 AND NOT n NOT IN (7)"), B(true));
    assert_eq!(
        eval("sensor NOT LIKE 'b%' AND name ILIKE 'hello%'"),
        B(true)
    );
}

#[test]
fn literal_forms() {
    assert_eq!(eval("1.5e1"), F(15.0));
    assert_eq!(eval(".5 + 5."), F(5.5));
    assert_eq!(eval("2E-1"), F(0.2));
    assert_eq!(eval("'it''s'"), s("it's"));
    assert_eq!(eval("E'a\\tb\\\\c\\'d'"), s("a\tb\\c'd"));
    assert_eq!(eval("N'ñ'"), s("ñ"));
    assert_eq!(eval("'é' || 'ü'"), s("éü"));
    assert_eq!(eval("TRUE AND NOT FALSE"), B(true));
    assert_eq!(eval("NULL IS NULL"), B(true));
    // A comment runs to the end of its line.
    assert_eq!(eval("n -- the count\n + 1"), I(8));
}

#[test]
fn names_quoted_and_keywords() {
    assert_eq!(eval("\"Mixed Case\" + 1"), I(2));
    assert_eq!(eval("`Mixed Case`"), I(1));
    assert_err("\"n\"\"\"", 0, "unknown field");
    // Words that are SQL keywords elsewhere are names here unless they
    // shape an expression.
    assert_err("select + 1", 0, "subqueries are not supported");
    assert_err(
        "n AND",
        5,
        "expected an expression, found the end of the text",
    );
    assert_err("n + AND", 4, "expected an expression, found `AND`");
}

#[test]
fn cast_forms() {
    assert_eq!(eval("CAST(n AS DOUBLE PRECISION)"), F(7.0));
    assert_eq!(eval("cast(n as varchar(10))"), s("7"));
    assert_eq!(eval("n::text || '!'"), s("7!"));
    assert_eq!(eval("TRY_CAST(sensor AS INT)"), Null);
    assert_eq!(eval("CAST('1.5' AS DECIMAL(10, 2))"), F(1.5));
    assert_eq!(eval("n::bigint = 7 AND ok"), B(true));
    assert_err("CAST(n AS)", 9, "expected a type name, found `)`");
    assert_err("CAST(n, INT)", 6, "expected AS, found `,`");
}

#[test]
fn special_call_forms() {
    assert_eq!(eval("SUBSTRING(name FROM 7)"), s("World"));
    assert_eq!(eval("SUBSTRING(name FROM 1 FOR 5)"), s("Hello"));
    assert_eq!(eval("substring(name, 1, 5)"), s("Hello"));
    assert_eq!(eval("POSITION('W' IN name)"), I(7));
    assert_eq!(eval("position('W', name)"), I(7));
    assert_eq!(eval("TRIM(LEADING 'H' FROM name)"), s("ello World"));
    assert_eq!(eval("TRIM(BOTH FROM '  x ')"), s("x"));
    assert_eq!(eval("TRIM('d' FROM name)"), s("Hello Worl"));
}

#[test]
fn is_distinct_and_null_safe_equality() {
    assert_eq!(eval_at("n IS DISTINCT FROM NULL", 1), B(false));
    assert_eq!(eval_at("n IS NOT DISTINCT FROM NULL", 1), B(true));
    assert_eq!(eval_at("n <=> NULL", 1), B(true));
    assert_eq!(eval("n <=> 7"), B(true));
}

#[test]
fn call_errors_name_the_call() {
    assert_err("upper(name => 'a')", 0, "takes positional arguments");
    assert_err("upper(sensor ORDER BY n)", 0, "clauses such as ORDER BY");
    assert_err(
        "upper(sensor",
        12,
        "expected `,` or `)`, found the end of the text",
    );
    assert_err(
        "lower(sensor) WITHIN GROUP (ORDER BY n)",
        0,
        "this form of `lower(...)`",
    );
    assert_err("a.b(1)", 0, "unknown function `a.b`");
    // A missing operator is not mistaken for a typed literal.
    assert_err(
        "sensor 'a'",
        7,
        "unexpected `'a'` after the end of the expression",
    );
    assert_err("TIMESTAMP '2026-01-01'", 0, "typed literals");
    assert_err("upper(*)", 0, "`*` is only allowed in count(*)");
    assert_err("n + *", 4, "`*` is only allowed in count(*)");
}

#[test]
fn unterminated_quotes_point_at_the_quote() {
    assert_err("n = 'abc", 4, "unterminated string literal");
    assert_err("\"abc + 1", 0, "unterminated quoted name");
    assert_err("E'abc\\'", 0, "unterminated string literal");
}

/// Token soup, seeded: whatever the text, parsing and compiling return a
/// result (never panic), and an error's offset is a char boundary inside
/// the text, since the caller turns it into a line and column.
#[test]
fn random_token_soup_never_panics_and_errors_point_inside() {
    const PIECES: &[&str] = &[
        "n",
        "temp",
        "sensor",
        "\"Mixed Case\"",
        "1",
        "2.5",
        ".5",
        "1e3",
        "'a'",
        "'é''",
        "E'\\t'",
        "N'x'",
        "x'AB'",
        "NULL",
        "TRUE",
        "(",
        ")",
        ",",
        ".",
        "+",
        "-",
        "*",
        "/",
        "%",
        "||",
        "=",
        "<>",
        "<=>",
        "::",
        "int",
        "AND",
        "OR",
        "NOT",
        "IS",
        "DISTINCT",
        "FROM",
        "BETWEEN",
        "IN",
        "LIKE",
        "ESCAPE",
        "CASE",
        "WHEN",
        "THEN",
        "ELSE",
        "END",
        "CAST",
        "AS",
        "TRIM",
        "LEADING",
        "SUBSTRING",
        "FOR",
        "POSITION",
        "upper",
        "count",
        "SELECT",
        "$1",
        "^",
        "[",
        "ü",
        "--",
        "\n",
        "\"",
        "'",
        "`",
        "=>",
        "OVER",
        "ORDER",
    ];
    let mut rng = super::property::Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let len = rng.below(12);
        let text: Vec<&str> = (0..len)
            .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
            .collect();
        let text = text.join(if rng.below(2) == 0 { " " } else { "" });
        if let Err(e) = compile(&text, &schema()) {
            assert!(
                e.offset <= text.len() && text.is_char_boundary(e.offset),
                "`{text}`: offset {} of {:?}",
                e.offset,
                e.message
            );
        }
    }
}
