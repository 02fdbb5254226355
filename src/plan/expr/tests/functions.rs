//! String, math and conditional functions; CASE.

use super::*;

#[test]
fn string_functions() {
    for (text, want) in [
        ("lower(name)", s("hello world")),
        ("LOWER('ÄÖÜ')", s("äöü")),
        ("upper(name)", s("HELLO WORLD")),
        ("Upper('straße')", s("STRASSE")),
        ("length(name)", I(11)),
        ("char_length('ünï')", I(3)),
        ("character_length('')", I(0)),
        ("concat(sensor, '-', n, '-', temp, ok)", s("a1-7-31.5true")),
        ("concat('a', NULL, 'b')", s("ab")),
        ("concat(NULL)", s("")),
        ("substring(name, 1, 5)", s("Hello")),
        ("substring(name, 7)", s("World")),
        ("substr(name, 7, 100)", s("World")),
        ("substring(name FROM 2 FOR 3)", s("ell")),
        ("substring(name FROM 7)", s("World")),
        ("substring(name, 0, 3)", s("He")),
        ("substring(name, -5, 3)", s("")),
        ("substring(name, 20)", s("")),
        ("substring('ünïcødé', 2, 3)", s("nïc")),
        ("trim('  a b  ')", s("a b")),
        ("ltrim('  a  ')", s("a  ")),
        ("rtrim('  a  ')", s("  a")),
        ("trim('xxaxx', 'x')", s("a")),
        ("ltrim('xyaxy', 'yx')", s("axy")),
        ("TRIM(BOTH 'x' FROM 'xxaxx')", s("a")),
        ("TRIM(LEADING 'x' FROM 'xxaxx')", s("axx")),
        ("TRIM(TRAILING 'x' FROM 'xxaxx')", s("xxa")),
        ("TRIM(LEADING FROM '  a  ')", s("a  ")),
        ("TRIM('é' FROM 'éaé')", s("a")),
        ("trim(e'\\ta ')", s("\ta")),
        ("replace(name, 'l', 'L')", s("HeLLo WorLd")),
        ("replace(name, 'xyz', 'L')", s("Hello World")),
        ("replace(name, '', 'L')", s("Hello World")),
        ("replace('ünï', 'n', '')", s("üï")),
        ("starts_with(name, 'Hell')", B(true)),
        ("starts_with(name, 'hell')", B(false)),
        ("ends_with(name, 'World')", B(true)),
        ("ends_with(name, '')", B(true)),
        ("position('World' IN name)", I(7)),
        ("position('x' IN name)", I(0)),
        ("position('' IN name)", I(1)),
        ("position('c' IN 'ünïcødé')", I(4)),
        ("position('World', name)", I(7)),
        ("lpad(sensor, 5)", s("   a1")),
        ("lpad(sensor, 5, 'xy')", s("xyxa1")),
        ("rpad(sensor, 5, 'xy')", s("a1xyx")),
        ("lpad(name, 3)", s("Hel")),
        ("rpad(name, 3, '-')", s("Hel")),
        ("lpad(sensor, 5, '')", s("a1")),
        ("lpad(sensor, -1)", s("")),
        ("rpad('ü', 3, 'ö')", s("üöö")),
    ] {
        assert_eq!(eval(text), want, "{text}");
    }
    assert_eq!(eval_at("trim(name)", 2), s("padded"));
    assert_eq!(eval_at("upper(sensor)", 2), s("ÜNÏCØDÉ"));
}

#[test]
fn string_functions_propagate_null() {
    for text in [
        "lower(name)",
        "upper(name)",
        "length(name)",
        "substring(name, 2)",
        "substring(sensor, n)",
        "substring(sensor, 1, n)",
        "trim(name)",
        "replace(name, 'a', 'b')",
        "replace(sensor, 'a', name)",
        "starts_with(name, 'a')",
        "ends_with(sensor, name)",
        "position('a' IN name)",
        "lpad(name, 3)",
        "rpad(sensor, n)",
    ] {
        assert_eq!(eval_at(text, 1), Null, "{text}");
    }
    assert_eq!(eval_at("concat(sensor, name, n)", 1), s("b2"));
}

#[test]
fn string_function_errors() {
    assert_eq!(
        eval_err("substring(name, 1, -1)"),
        "negative substring length not allowed"
    );
    assert_eq!(
        eval_err("lpad(name, 10000000)"),
        "requested length too large"
    );
    assert_err("upper(name, 1)", 0, "`upper` takes 1 argument, got 2");
    assert_err("upper()", 0, "`upper` takes 1 argument, got 0");
    assert_err("lpad(name)", 0, "`lpad` takes 2 or 3 arguments, got 1");
    assert_err("concat()", 0, "`concat` takes at least 1 argument, got 0");
    assert_err("upper(n)", 6, "`upper` needs a string, got int");
    assert_err("length(temp)", 7, "`length` needs a string, got float");
    assert_err(
        "substring(name, 1.5)",
        16,
        "`substring` needs an int, got float",
    );
    assert_err(
        "replace(name, 1, 'a')",
        14,
        "`replace` needs a string, got int",
    );
}

#[test]
fn math_functions() {
    for (text, want) in [
        ("abs(-5)", I(5)),
        ("abs(n - 10)", I(3)),
        ("abs(-temp)", F(31.5)),
        ("sign(n)", I(1)),
        ("sign(-n)", I(-1)),
        ("sign(0)", I(0)),
        ("sign(-temp)", F(-1.0)),
        ("sign(0.0)", F(0.0)),
        ("round(temp)", F(32.0)),
        ("round(-2.5)", F(-3.0)),
        ("round(2.4)", F(2.0)),
        ("round(1.23456, 2)", F(1.23)),
        ("round(1.005e-3, 4)", F(0.001)),
        ("round(-1.25, 1)", F(-1.3)),
        ("round(1234.5, -2)", F(1200.0)),
        ("round(1250.0, -2)", F(1300.0)),
        ("round(1.5, 400)", F(1.5)),
        ("round(1.5, -400)", F(0.0)),
        ("round(n)", I(7)),
        ("round(1250, -2)", I(1300)),
        ("round(-1250, -2)", I(-1300)),
        ("round(1249, -2)", I(1200)),
        ("round(n, 2)", I(7)),
        ("round(n, -30)", I(0)),
        ("floor(temp)", F(31.0)),
        ("floor(-temp)", F(-32.0)),
        ("FLOOR(n)", I(7)),
        ("ceil(temp)", F(32.0)),
        ("CEILING(-temp)", F(-31.0)),
        ("ceil(n)", I(7)),
        ("sqrt(16)", F(4.0)),
        ("sqrt(x * 10)", F(5.0)),
        ("power(2, 10)", F(1024.0)),
        ("pow(n, 2)", F(49.0)),
        ("exp(0)", F(1.0)),
        ("ln(1)", F(0.0)),
        ("log10(1000)", F(3.0)),
        ("mod(n, 4)", I(3)),
        ("mod(-n, 4)", I(-3)),
        ("mod(temp, 10)", F(1.5)),
        ("greatest(1, n, 3)", I(7)),
        ("least(1, n, 3)", I(1)),
        ("greatest(1, temp, n)", F(31.5)),
        ("least(sensor, name)", s("Hello World")),
        ("greatest(NULL, 2, NULL)", I(2)),
        ("least(n, x)", F(2.5)),
    ] {
        assert_eq!(eval(text), want, "{text}");
    }
    assert_eq!(type_of("abs(n)"), DataType::Int);
    assert_eq!(type_of("round(temp, 1)"), DataType::Float);
    assert_eq!(type_of("sqrt(n)"), DataType::Float);
    assert_eq!(type_of("power(n, n)"), DataType::Float);
    assert_eq!(type_of("greatest(n, 1.5)"), DataType::Float);
    assert_eq!(eval_at("greatest(n, x)", 1), Null);
    assert_eq!(eval_at("least(n, 3)", 1), I(3));
    assert_eq!(eval_at("abs(n)", 1), Null);
    assert_eq!(eval_at("round(x)", 1), Null);
    assert_eq!(eval_at("power(n, 2)", 1), Null);
}

#[test]
fn math_errors() {
    assert_eq!(
        eval_err("sqrt(-temp)"),
        "cannot take square root of a negative number"
    );
    assert_eq!(eval_err("ln(0)"), "cannot take logarithm of zero");
    assert_eq!(
        eval_err("log10(-n)"),
        "cannot take logarithm of a negative number"
    );
    assert_eq!(
        eval_err("power(0, -1)"),
        "zero raised to a negative power is undefined"
    );
    assert_eq!(
        eval_err("power(-8, 1.0 / 3)"),
        "a negative number raised to a non-integer power gives a complex result"
    );
    assert_eq!(
        eval_err("abs(-9223372036854775808 + n - 7)"),
        "integer overflow in `abs`"
    );
    assert_eq!(
        eval_err("round(-9223372036854775807 + n - 7, -1)"),
        "integer overflow in `round`"
    );
    assert_err("sqrt('a')", 5, "`sqrt` needs a number, got string");
    assert_err(
        "round(temp, 1.5)",
        12,
        "the digits of `round` needs an int, got float",
    );
    assert_err("power(1)", 0, "`power` takes 2 arguments, got 1");
    assert_err("ceil(temp, 2)", 0, "`ceil` takes 1 argument, got 2");
    assert_err(
        "greatest(n, 'a')",
        12,
        "the arguments of `greatest` must have the same type: int and string",
    );
    assert_err(
        "log(10)",
        0,
        "unknown function `log`; supported functions: ",
    );
    assert_err("sqr(2)", 0, "unknown function `sqr` (did you mean `sqrt`?)");
}

#[test]
fn conditional_functions() {
    for (text, want) in [
        ("coalesce(n, 0)", I(7)),
        ("coalesce(NULL, n)", I(7)),
        ("coalesce(NULL, NULL)", Null),
        ("coalesce(name, sensor, 'x')", s("Hello World")),
        ("coalesce(n, 1.5)", F(7.0)),
        ("nullif(n, 7)", Null),
        ("nullif(n, 8)", I(7)),
        ("nullif(sensor, 'a1')", Null),
        ("nullif(sensor, name)", s("a1")),
        ("nullif(n, 7.0)", Null),
        ("nullif(NULL, 1)", Null),
        ("if(ok, 'yes', 'no')", s("yes")),
        ("if(n > 10, 1, 2.5)", F(2.5)),
        ("if(NULL, 1, 2)", I(2)),
    ] {
        assert_eq!(eval(text), want, "{text}");
    }
    assert_eq!(eval_at("coalesce(n, 0)", 1), I(0));
    assert_eq!(eval_at("coalesce(name, sensor)", 1), s("b2"));
    assert_eq!(eval_at("coalesce(x, n, temp)", 1), F(20.0));
    assert_eq!(eval_at("nullif(n, 7)", 1), Null);
    assert_eq!(eval_at("if(ok, 'yes', 'no')", 1), s("no"));
    assert_eq!(eval_at("if(ok, 'yes', 'no')", 2), s("no"));
    // Only the branch taken is evaluated.
    assert_eq!(eval("if(n > 0, n, n / 0)"), I(7));
    assert_eq!(eval("coalesce(n, n / 0)"), I(7));
    assert_err(
        "coalesce(n, 'a')",
        12,
        "the arguments of `coalesce` must have the same type: int and string",
    );
    assert_err(
        "if(n, 1, 2)",
        3,
        "the condition of `if` needs a bool, got int",
    );
    assert_err("nullif(n, 'a')", 0, "cannot compare int with string");
}

#[test]
fn case_expressions() {
    let grade = "CASE WHEN temp > 40 THEN 'hot' WHEN temp > 25 THEN 'warm' ELSE 'cold' END";
    assert_eq!(eval_at(grade, 0), s("warm"));
    assert_eq!(eval_at(grade, 1), s("cold"));
    assert_eq!(eval("CASE WHEN n > 100 THEN 1 END"), Null);
    assert_eq!(type_of("CASE WHEN n > 100 THEN 1 END"), DataType::Int);
    assert_eq!(eval("CASE WHEN ok THEN 1 ELSE 2.5 END"), F(1.0));
    assert_eq!(type_of("CASE WHEN ok THEN 1 ELSE 2.5 END"), DataType::Float);
    assert_eq!(type_of("CASE WHEN ok THEN NULL ELSE 2 END"), DataType::Int);
    assert_eq!(
        eval_at("CASE WHEN ok THEN 'y' WHEN NOT ok THEN 'n' ELSE '?' END", 1),
        s("?")
    );
    assert_eq!(
        eval_at("CASE WHEN ok THEN 'y' WHEN NOT ok THEN 'n' ELSE '?' END", 2),
        s("n")
    );
    assert_eq!(
        eval("CASE WHEN FALSE THEN 1 WHEN TRUE THEN 2 ELSE 3 END"),
        I(2)
    );
    assert_eq!(eval("CASE WHEN NULL THEN 1 ELSE n END"), I(7));
    assert_eq!(eval("CASE WHEN n > 0 THEN n ELSE n / 0 END"), I(7));
    assert_eq!(eval("CASE WHEN TRUE THEN NULL END"), Null);
    // Simple CASE.
    let simple = "CASE n WHEN 1 THEN 'one' WHEN 7 THEN 'seven' ELSE 'many' END";
    assert_eq!(eval_at(simple, 0), s("seven"));
    assert_eq!(eval_at(simple, 1), s("many"));
    assert_eq!(eval_at(simple, 2), s("many"));
    assert_eq!(
        eval("CASE sensor WHEN 'a1' THEN 1.5 WHEN name THEN 2 END"),
        F(1.5)
    );
    assert_eq!(eval("CASE n WHEN 7.0 THEN TRUE END"), B(true));
    assert_eq!(eval("CASE n WHEN NULL THEN 1 ELSE 0 END"), I(0));
    assert_eq!(eval("CASE NULL WHEN 1 THEN 1 ELSE 0 END"), I(0));
}

#[test]
fn case_errors() {
    assert_err(
        "CASE WHEN ok THEN 1 ELSE 'x' END",
        25,
        "CASE results must have the same type: int and string",
    );
    assert_err(
        "CASE WHEN n THEN 1 END",
        10,
        "a CASE WHEN condition needs a bool, got int",
    );
    assert_err(
        "CASE n WHEN 'a' THEN 1 END",
        0,
        "cannot compare int with string",
    );
    assert_err("CASE WHEN tmp > 1 THEN 1 END", 10, "unknown field `tmp`");
}

#[test]
fn function_names_ignore_case_and_unknown_ones_are_listed() {
    assert_eq!(eval("LOWER(sensor)"), s("a1"));
    assert_eq!(eval("Coalesce(n, 1)"), I(7));
    let e = err("lowr(sensor)");
    assert_eq!(e.offset, 0);
    assert!(
        e.message.starts_with(
            "unknown function `lowr` (did you mean `lower`?); supported functions: abs, "
        ),
        "{}",
        e.message
    );
    assert_err("n + foo.bar(1)", 4, "unknown function `foo.bar`");
}

#[test]
fn aggregates_are_rejected_in_scalar_expressions() {
    assert_err(
        "sum(temp)",
        0,
        "aggregate function `sum` is only allowed in a window's `aggregates`",
    );
    assert_err(
        "1 + COUNT(*)",
        4,
        "aggregate function `count` is only allowed in a window's `aggregates`",
    );
    assert_err(
        "upper(first(sensor))",
        6,
        "aggregate function `first` is only allowed",
    );
}

#[test]
fn unsupported_call_forms() {
    assert_err(
        "upper(DISTINCT sensor)",
        0,
        "DISTINCT is only allowed in count(DISTINCT x)",
    );
    assert_err("upper(*)", 0, "`*` is only allowed in count(*)");
    assert_err("abs(n) OVER (PARTITION BY sensor)", 0, "window functions");
    assert_err(
        "abs(n) FILTER (WHERE ok)",
        0,
        "FILTER (WHERE ...) is not supported",
    );
    assert_err(
        "current_timestamp",
        0,
        "unknown field `current_timestamp`; fields here:",
    );
}
