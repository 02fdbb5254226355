//! CAST, TRY_CAST and `::`.

use super::*;

#[test]
fn casts_between_types() {
    for (text, want) in [
        ("CAST(n AS DOUBLE)", F(7.0)),
        ("CAST(n AS FLOAT)", F(7.0)),
        ("CAST(n AS REAL)", F(7.0)),
        ("CAST(n AS DECIMAL(10, 2))", F(7.0)),
        ("CAST(n AS NUMERIC)", F(7.0)),
        ("CAST(temp AS INT)", I(31)),
        ("CAST(-temp AS BIGINT)", I(-31)),
        ("CAST(2.99 AS SMALLINT)", I(2)),
        ("CAST(-2.99 AS INTEGER)", I(-2)),
        ("CAST(n AS VARCHAR)", s("7")),
        ("CAST(temp AS TEXT)", s("31.5")),
        ("CAST(1e30 AS STRING)", s("1e30")),
        ("CAST(2.0 AS CHAR)", s("2.0")),
        ("CAST(ok AS VARCHAR(5))", s("true")),
        ("CAST(ok AS INT)", I(1)),
        ("CAST(NOT ok AS DOUBLE)", F(0.0)),
        ("CAST(n AS BOOLEAN)", B(true)),
        ("CAST(0 AS BOOL)", B(false)),
        ("CAST(' 42 ' AS INT)", I(42)),
        ("CAST('-42' AS INT)", I(-42)),
        ("CAST('1.5' AS DOUBLE)", F(1.5)),
        ("CAST('1e3' AS DOUBLE)", F(1000.0)),
        ("CAST('yes' AS BOOLEAN)", B(true)),
        ("CAST('F' AS BOOLEAN)", B(false)),
        ("CAST(sensor AS VARCHAR)", s("a1")),
        ("CAST(n AS INT)", I(7)),
        ("n::double", F(7.0)),
        ("'12'::int + 1", I(13)),
        ("CAST(NULL AS INT)", Null),
    ] {
        assert_eq!(eval(text), want, "{text}");
    }
    assert_eq!(type_of("CAST(NULL AS INT)"), DataType::Int);
    assert_eq!(type_of("CAST(sensor AS DOUBLE)"), DataType::Float);
    assert_eq!(eval_at("CAST(n AS VARCHAR)", 1), Null);
}

#[test]
fn failed_casts_are_errors_or_null() {
    assert_eq!(eval_err("CAST('abc' AS INT)"), "cannot cast 'abc' to int");
    assert_eq!(
        eval_err("CAST(name AS INT)"),
        "cannot cast 'Hello World' to int"
    );
    assert_eq!(eval_err("CAST('1.5' AS INT)"), "cannot cast '1.5' to int");
    assert_eq!(eval_err("CAST('x' AS DOUBLE)"), "cannot cast 'x' to float");
    assert_eq!(
        eval_err("CAST('maybe' AS BOOLEAN)"),
        "cannot cast 'maybe' to bool"
    );
    assert_eq!(
        eval_err("CAST(1e19 AS INT)"),
        "cannot cast 1e19 to int: out of range"
    );
    assert_eq!(
        eval_err("CAST(CAST('NaN' AS DOUBLE) AS INT)"),
        "cannot cast NaN to int: out of range"
    );
    let long = "x".repeat(100);
    assert_eq!(
        eval_err(&format!("CAST('{long}' AS INT)")),
        format!("cannot cast '{}...' to int", "x".repeat(40))
    );
    assert_eq!(eval("TRY_CAST('abc' AS INT)"), Null);
    assert_eq!(eval("TRY_CAST(name AS INT)"), Null);
    assert_eq!(eval("TRY_CAST('12' AS INT)"), I(12));
    assert_eq!(eval("TRY_CAST('x' AS DOUBLE)"), Null);
    assert_eq!(eval("TRY_CAST('maybe' AS BOOLEAN)"), Null);
    assert_eq!(eval("TRY_CAST(1e19 AS INT)"), Null);
    assert_eq!(eval("TRY_CAST(temp AS INT)"), I(31));
}

#[test]
fn float_to_int_limits() {
    assert_eq!(eval("CAST(-9223372036854775808.0 AS INT)"), I(i64::MIN));
    assert_eq!(
        eval("CAST(9223372036854774784.0 AS INT)"),
        I(9_223_372_036_854_774_784)
    );
    assert_eq!(
        eval_err("CAST(9223372036854775808.0 AS INT)"),
        "cannot cast 9.223372036854776e18 to int: out of range"
    );
}

#[test]
fn unsupported_casts() {
    assert_err(
        "CAST(n AS DATE)",
        10,
        "cannot cast to DATE: the supported types are INT",
    );
    assert_err("CAST(temp AS BOOLEAN)", 5, "cannot cast float to bool");
}
