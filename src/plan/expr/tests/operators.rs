//! Arithmetic, comparisons, logic, IS, BETWEEN, IN.

use super::*;

#[test]
fn int_arithmetic_stays_int() {
    assert_eq!(eval("1 + 2 * 3"), I(7));
    assert_eq!(eval("(1 + 2) * 3"), I(9));
    assert_eq!(eval("ts - 1"), I(999));
    assert_eq!(eval("7 / 2"), I(3));
    assert_eq!(eval("-7 / 2"), I(-3));
    assert_eq!(eval("7 % 3"), I(1));
    assert_eq!(eval("-7 % 3"), I(-1));
    assert_eq!(eval("-9223372036854775808 % -1"), I(0));
    assert_eq!(eval("- n"), I(-7));
    assert_eq!(eval("+n"), I(7));
    assert_eq!(type_of("n * 2"), DataType::Int);
}

#[test]
fn float_promotion() {
    assert_eq!(eval("7 / 2.0"), F(3.5));
    assert_eq!(eval("n + 0.5"), F(7.5));
    assert_eq!(eval("temp * 2"), F(63.0));
    assert_eq!(eval("temp - n"), F(24.5));
    assert_eq!(eval("7.5 % 2"), F(1.5));
    assert_eq!(eval("-temp"), F(-31.5));
    assert_eq!(type_of("n * 1.0"), DataType::Float);
    assert_eq!(type_of("temp + ts"), DataType::Float);
}

#[test]
fn arithmetic_errors() {
    assert_eq!(eval_err("n / 0"), "division by zero");
    assert_eq!(eval_err("n % 0"), "division by zero");
    assert_eq!(eval_err("temp / 0"), "division by zero");
    assert_eq!(eval_err("temp / 0.0"), "division by zero");
    assert_eq!(eval_err("temp % 0"), "division by zero");
    assert_eq!(eval_err("mod(n, 0)"), "division by zero");
    assert_eq!(
        eval_err("9223372036854775807 + n"),
        "integer overflow in `+`"
    );
    assert_eq!(
        eval_err("-9223372036854775808 - n"),
        "integer overflow in `-`"
    );
    assert_eq!(
        eval_err("ts * 9223372036854775807"),
        "integer overflow in `*`"
    );
    assert_eq!(
        eval_err("(-9223372036854775807 - 1 + n - 7) / -1"),
        "integer overflow in `/`"
    );
    assert_eq!(
        eval_err("-(-9223372036854775807 - 1 + n - 7)"),
        "integer overflow in unary `-`"
    );
    // NULL operands win over errors that would need them.
    assert_eq!(eval_at("n / 0", 1), Null);
}

#[test]
fn arithmetic_propagates_null() {
    assert_eq!(eval_at("n + 1", 1), Null);
    assert_eq!(eval_at("1 - n", 1), Null);
    assert_eq!(eval_at("x * temp", 1), Null);
    assert_eq!(eval("NULL + 1"), Null);
    assert_eq!(type_of("NULL + 1"), DataType::Int);
    assert_eq!(type_of("NULL * 1.5"), DataType::Float);
    assert_eq!(eval("-NULL"), Null);
}

#[test]
fn arithmetic_type_errors() {
    assert_err(
        "n + 'a'",
        4,
        "`+` needs a number, got string (use `||` to concatenate strings)",
    );
    assert_err("sensor * 2", 0, "`*` needs a number, got string");
    assert_err("ok - 1", 0, "`-` needs a number, got bool");
    assert_err("-sensor", 1, "unary `-` needs a number, got string");
    assert_err("mod(n, 'a')", 7, "`mod` needs a number, got string");
}

#[test]
fn string_concatenation() {
    assert_eq!(eval("sensor || '-' || name"), s("a1-Hello World"));
    assert_eq!(eval("sensor || n"), s("a17"));
    assert_eq!(eval("'t=' || temp"), s("t=31.5"));
    assert_eq!(eval("'b=' || ok"), s("b=true"));
    assert_eq!(eval_at("sensor || name", 1), Null);
    assert_eq!(eval("sensor || NULL"), Null);
    assert_err("n || 1", 0, "`||` concatenates strings, got int and int");
}

#[test]
fn comparisons() {
    for (text, want) in [
        ("temp > 30", true),
        ("temp >= 31.5", true),
        ("temp < 31.5", false),
        ("temp <= 31.5", true),
        ("temp = 31.5", true),
        ("temp <> 31.5", false),
        ("temp != 31", true),
        ("n = 7", true),
        ("n = 7.0", true),
        ("n < 7.5", true),
        ("7.5 > n", true),
        ("30 < temp", true),
        ("ts > n", true),
        ("sensor = 'a1'", true),
        ("sensor < 'b'", true),
        ("'b' > sensor", true),
        ("sensor >= 'a1'", true),
        ("name = sensor", false),
        ("ok = TRUE", true),
        ("FALSE < TRUE", true),
        ("ok <> false", true),
        ("'ä' > 'z'", true),
    ] {
        assert_eq!(eval(text), B(want), "{text}");
    }
}

#[test]
fn comparisons_with_null_are_null() {
    assert_eq!(eval_at("n = 7", 1), Null);
    assert_eq!(eval_at("7 <> n", 1), Null);
    assert_eq!(eval_at("name = 'x'", 1), Null);
    assert_eq!(eval("n = NULL"), Null);
    assert_eq!(eval("NULL = NULL"), Null);
    assert_eq!(type_of("NULL = NULL"), DataType::Bool);
}

#[test]
fn comparison_type_errors() {
    assert_err("sensor = 1", 0, "cannot compare string with int");
    assert_err("temp > 'x'", 0, "cannot compare float with string");
    assert_err("n < 1 AND ok > 1", 10, "cannot compare bool with int");
}

#[test]
fn float_comparisons_follow_ieee() {
    assert_eq!(eval("x = -x"), B(false));
    assert_eq!(eval_at("x = 0", 2), B(true)); // -0.0 = 0
    assert_eq!(eval("sqrt(x) > 0"), B(true));
    let nan = "CAST('NaN' AS DOUBLE)";
    assert_eq!(eval(&format!("{nan} = {nan}")), B(false));
    assert_eq!(eval(&format!("{nan} > 1")), B(false));
}

/// Every combination of true, false and NULL.
#[test]
fn three_valued_and_or_not() {
    let values = [("TRUE", Some(true)), ("FALSE", Some(false)), ("NULL", None)];
    let and = |a: Option<bool>, b: Option<bool>| match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    };
    let or = |a: Option<bool>, b: Option<bool>| match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    };
    let val = |v: Option<bool>| v.map_or(Null, B);
    // Columns (not constants) too, so the per-record closures are tested:
    // `ok` is true, NULL and false in rows 0, 1 and 2.
    let col = |v: Option<bool>| match v {
        Some(true) => ("ok", 0),
        None => ("ok", 1),
        Some(false) => ("ok", 2),
    };
    for (a_text, a) in values {
        assert_eq!(eval(&format!("NOT {a_text}")), val(a.map(|v| !v)));
        let (c, row) = col(a);
        assert_eq!(eval_at(&format!("NOT {c}"), row), val(a.map(|v| !v)));
        for (b_text, b) in values {
            assert_eq!(
                eval(&format!("{a_text} AND {b_text}")),
                val(and(a, b)),
                "{a_text} AND {b_text}"
            );
            assert_eq!(
                eval(&format!("{a_text} OR {b_text}")),
                val(or(a, b)),
                "{a_text} OR {b_text}"
            );
            assert_eq!(
                eval_at(&format!("{c} AND {b_text}"), row),
                val(and(a, b)),
                "{c}={a:?} AND {b_text}"
            );
            assert_eq!(
                eval_at(&format!("{c} OR {b_text}"), row),
                val(or(a, b)),
                "{c}={a:?} OR {b_text}"
            );
            let cmp = |v: Option<bool>| match v {
                Some(true) => "n > 0",
                Some(false) => "n < 0",
                None => "n = NULL",
            };
            // Two and three non-constant terms.
            let (x, y) = (cmp(a), cmp(b));
            assert_eq!(eval(&format!("{x} AND {y}")), val(and(a, b)), "{x} AND {y}");
            assert_eq!(eval(&format!("{x} OR {y}")), val(or(a, b)), "{x} OR {y}");
            for (c_text, c3) in values {
                let z = cmp(c3);
                assert_eq!(
                    eval(&format!("{x} AND {y} AND {z}")),
                    val(and(and(a, b), c3))
                );
                assert_eq!(eval(&format!("{x} OR ({y} OR {z})")), val(or(or(a, b), c3)));
                assert_eq!(
                    eval(&format!("{x} AND {y} AND {c_text}")),
                    val(and(and(a, b), c3))
                );
            }
        }
    }
}

#[test]
fn and_or_short_circuit_left_to_right() {
    assert_eq!(eval("n = 7 OR 10 / 0 > 1"), B(true));
    assert_eq!(eval("n = 0 OR 10 / n > 1"), B(false));
    assert_eq!(eval("ts <> 1000 AND ts / 0 > 1"), B(false));
    assert_eq!(eval_err("ts / 0 > 1 AND ts <> 1000"), "division by zero");
}

#[test]
fn logic_type_errors() {
    assert_err("ok AND n", 7, "`AND` needs a bool, got int");
    assert_err("n OR ok", 0, "`OR` needs a bool, got int");
    assert_err("NOT sensor", 4, "`NOT` needs a bool, got string");
    assert_err("FALSE AND 'x'", 10, "`AND` needs a bool, got string");
}

#[test]
fn is_tests_are_never_null() {
    for (text, row, want) in [
        ("n IS NULL", 0, false),
        ("n IS NULL", 1, true),
        ("n IS NOT NULL", 1, false),
        ("n + 1 IS NULL", 1, true),
        ("name IS NOT NULL", 0, true),
        ("NULL IS NULL", 0, true),
        ("ok IS TRUE", 0, true),
        ("ok IS TRUE", 1, false),
        ("ok IS NOT TRUE", 1, true),
        ("ok IS FALSE", 2, true),
        ("ok IS FALSE", 1, false),
        ("ok IS NOT FALSE", 1, true),
        ("ok IS NOT FALSE", 2, false),
        ("ok IS UNKNOWN", 1, true),
        ("ok IS NOT UNKNOWN", 1, false),
        ("n > 0 IS TRUE", 1, false),
        ("n IS DISTINCT FROM 7", 0, false),
        ("n IS DISTINCT FROM 7", 1, true),
        ("n IS NOT DISTINCT FROM NULL", 1, true),
        ("x IS NOT DISTINCT FROM n", 1, true),
        ("x IS DISTINCT FROM n", 0, true),
        ("NULL IS NOT DISTINCT FROM NULL", 0, true),
        ("name <=> NULL", 1, true),
    ] {
        assert_eq!(eval_at(text, row), B(want), "{text} on row {row}");
    }
    assert_err("n IS TRUE", 0, "IS TRUE needs a bool, got int");
}

#[test]
fn between() {
    assert_eq!(eval("temp BETWEEN 30 AND 32"), B(true));
    assert_eq!(eval("temp BETWEEN 31.5 AND 31.5"), B(true));
    assert_eq!(eval("temp BETWEEN 32 AND 30"), B(false));
    assert_eq!(eval("temp NOT BETWEEN 30 AND 32"), B(false));
    assert_eq!(eval("n BETWEEN 1 AND 10"), B(true));
    assert_eq!(eval("n BETWEEN 7.5 AND 10"), B(false));
    assert_eq!(eval("sensor BETWEEN 'a' AND 'b'"), B(true));
    assert_eq!(eval("n BETWEEN n - 1 AND n + 1"), B(true));
    assert_eq!(eval_at("n BETWEEN 1 AND 10", 1), Null);
    assert_eq!(eval("n BETWEEN NULL AND 10"), Null);
    assert_eq!(eval("n BETWEEN NULL AND 5"), B(false));
    assert_eq!(eval("n BETWEEN 8 AND NULL"), B(false));
    assert_eq!(eval("n NOT BETWEEN 8 AND NULL"), B(true));
    assert_eq!(eval("n NOT BETWEEN 1 AND NULL"), Null);
    assert_err("n BETWEEN 'a' AND 3", 0, "cannot compare int with string");
}

#[test]
fn in_lists() {
    assert_eq!(eval("n IN (1, 7, 9)"), B(true));
    assert_eq!(eval("n IN (1, 2)"), B(false));
    assert_eq!(eval("n NOT IN (1, 2)"), B(true));
    assert_eq!(eval("n IN (7.0)"), B(true));
    assert_eq!(eval("temp IN (31.5, 1)"), B(true));
    assert_eq!(eval_at("x IN (0)", 2), B(true)); // -0.0
    assert_eq!(eval("sensor IN ('x', 'a1')"), B(true));
    assert_eq!(eval("sensor NOT IN ('x', 'a1')"), B(false));
    assert_eq!(eval("ok IN (FALSE)"), B(false));
    assert_eq!(eval("ok IN (TRUE, FALSE)"), B(true));
    // Non-constant elements.
    assert_eq!(eval("n IN (ts, n)"), B(true));
    assert_eq!(
        eval("sensor IN (name, upper(sensor), lower('A1'))"),
        B(true)
    );
    assert_eq!(eval("n IN (n + 1, ts)"), B(false));
}

#[test]
fn in_lists_with_nulls() {
    assert_eq!(eval("n IN (7, NULL)"), B(true));
    assert_eq!(eval("n IN (1, NULL)"), Null);
    assert_eq!(eval("n NOT IN (1, NULL)"), Null);
    assert_eq!(eval("n NOT IN (7, NULL)"), B(false));
    assert_eq!(eval_at("n IN (1, 2)", 1), Null);
    assert_eq!(eval_at("n NOT IN (1, 2)", 1), Null);
    assert_eq!(eval("n IN (ts, x, NULL)"), Null);
    assert_eq!(eval_at("n IN (ts, x)", 1), Null);
    assert_eq!(eval("NULL IN (1, 2)"), Null);
    assert_eq!(eval_at("7 IN (n, 7)", 1), B(true));
    assert_eq!(eval_at("7 IN (n, 8)", 1), Null);
}

#[test]
fn large_in_lists_use_a_hash_set() {
    let ints: Vec<String> = (0..100).map(|i| (i * 3).to_string()).collect();
    let list = ints.join(", ");
    assert_eq!(eval(&format!("ts IN ({list})")), B(false));
    assert_eq!(eval(&format!("ts / 10 - 1 IN ({list})")), B(true));
    assert_eq!(
        eval(&format!("ts / 10 - 1 NOT IN ({list}, NULL)")),
        B(false)
    );
    assert_eq!(eval(&format!("ts NOT IN ({list}, NULL)")), Null);
    let strs: Vec<String> = (0..40).map(|i| format!("'s{i}'")).collect();
    assert_eq!(eval(&format!("'s' || n IN ({})", strs.join(", "))), B(true));
    assert_eq!(eval(&format!("sensor IN ({})", strs.join(", "))), B(false));
    let floats: Vec<String> = (0..40).map(|i| format!("{i}.5")).collect();
    assert_eq!(eval(&format!("temp IN ({})", floats.join(", "))), B(true));
    assert_eq!(
        eval(&format!("temp + 0.25 IN ({})", floats.join(", "))),
        B(false)
    );
}

#[test]
fn in_type_errors() {
    assert_err("n IN (1, 'a')", 0, "cannot compare int with string");
    assert_err("n IN (SELECT 1)", 6, "subqueries are not supported");
}
