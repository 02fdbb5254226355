//! LIKE and ILIKE.

use super::super::like::{Pattern, Shape};
use super::*;

#[track_caller]
fn like(text: &str, pattern: &str) -> bool {
    let e = format!(
        "'{}' LIKE '{}'",
        text.replace('\'', "''"),
        pattern.replace('\'', "''")
    );
    // The constant is folded; check it against a column too.
    let folded = eval(&e) == B(true);
    let schema = Schema::new(vec![
        Field::new("t", DataType::Str),
        Field::new("p", DataType::Str),
    ]);
    let one = rows(
        schema.clone(),
        &[vec![ValueRef::Str(text), ValueRef::Str(pattern)]],
    );
    let quoted = pattern.replace('\'', "''");
    let by_column = run(
        &compile(&format!("t LIKE '{quoted}'"), &schema).unwrap(),
        &one,
        0,
    )
    .unwrap()
        == B(true);
    let dynamic = run(&compile("t LIKE p", &schema).unwrap(), &one, 0).unwrap() == B(true);
    assert_eq!(folded, by_column, "{text} LIKE {pattern}: folded vs column");
    assert_eq!(
        folded, dynamic,
        "{text} LIKE {pattern}: constant vs per-record pattern"
    );
    folded
}

#[test]
fn like_fast_paths() {
    assert!(like("abc", "abc"));
    assert!(!like("abc", "ab"));
    assert!(like("abc", "ab%"));
    assert!(!like("xabc", "ab%"));
    assert!(like("xabc", "%bc"));
    assert!(!like("abcx", "%bc"));
    assert!(like("xabcx", "%bc%"));
    assert!(!like("xacbx", "%bc%"));
    assert!(like("", "%"));
    assert!(like("anything", "%%"));
    assert!(like("", ""));
    assert!(!like("a", ""));
    assert!(
        matches!(Pattern::new("ab%", None, false).map(|p| p.shape), Ok(Shape::Prefix(p)) if p == "ab")
    );
    assert!(
        matches!(Pattern::new("%ab", None, false).map(|p| p.shape), Ok(Shape::Suffix(p)) if p == "ab")
    );
    assert!(
        matches!(Pattern::new("%ab%", None, false).map(|p| p.shape), Ok(Shape::Contains(p)) if p == "ab")
    );
    assert!(
        matches!(Pattern::new("ab", None, false).map(|p| p.shape), Ok(Shape::Exact(p)) if p == "ab")
    );
    assert!(matches!(
        Pattern::new("%%", None, false).map(|p| p.shape),
        Ok(Shape::Any)
    ));
}

#[test]
fn like_general_patterns() {
    assert!(like("abc", "a_c"));
    assert!(!like("abbc", "a_c"));
    assert!(like("abc", "___"));
    assert!(!like("abc", "____"));
    assert!(like("abc", "_%"));
    assert!(!like("", "_%"));
    assert!(like("abc", "%_"));
    assert!(like("abcdef", "a%d%f"));
    assert!(like("abcdef", "a%c_e%"));
    assert!(!like("abcdef", "a%d%e"));
    assert!(like("aaa", "a%a"));
    assert!(!like("a", "a%a"));
    assert!(like("abab", "%ab%ab%"));
    assert!(!like("abab", "%ab%ab%ab%"));
    assert!(like("mississippi", "m%iss%pi"));
    assert!(like("mississippi", "%ss_ss%"));
    assert!(!like("mississippi", "%ss_ss_ss%"));
    assert!(like("x.y", "x.y"));
    assert!(like("a[b]*", "a[b]*"));
    assert!(like("abc", "%%b%%"));
    assert!(like("ab", "a%%b"));
}

#[test]
fn like_counts_characters_not_bytes() {
    assert!(like("ünï", "___"));
    assert!(!like("ünï", "__"));
    assert!(like("ünïcødé", "ü%é"));
    assert!(like("ünïcødé", "_n_c%"));
    assert!(like("ünïcødé", "%ø__"));
    assert!(like("日本語", "日_語"));
    assert!(like("日本語", "%本%"));
    assert!(!like("日本語", "%本"));
    assert_eq!(eval_at("sensor LIKE '_n%'", 2), B(true));
}

#[test]
fn like_escapes() {
    assert_eq!(eval("'100%' LIKE '100!%' ESCAPE '!'"), B(true));
    assert_eq!(eval("'1000' LIKE '100!%' ESCAPE '!'"), B(false));
    assert_eq!(eval("'a_b' LIKE 'a!_b' ESCAPE '!'"), B(true));
    assert_eq!(eval("'axb' LIKE 'a!_b' ESCAPE '!'"), B(false));
    assert_eq!(eval("'a!b' LIKE 'a!!b' ESCAPE '!'"), B(true));
    assert_eq!(eval("'50% off' LIKE '%!%%' ESCAPE '!'"), B(true));
    assert_eq!(eval("'a\\b' LIKE 'a\\b'"), B(true)); // no escape unless ESCAPE
    assert_eq!(eval("'a%' LIKE 'a\\%' ESCAPE '\\'"), B(true));
    assert_eq!(eval("'a%' LIKE 'a%' ESCAPE ''"), B(true));
    assert_err(
        "sensor LIKE 'a!' ESCAPE '!'",
        12,
        "must not end with its escape character",
    );
    assert_err(
        "sensor LIKE 'a' ESCAPE 'ab'",
        23,
        "ESCAPE needs a string of one character",
    );
}

#[test]
fn like_nulls_and_negation() {
    assert_eq!(eval_at("name LIKE 'H%'", 1), Null);
    assert_eq!(eval_at("name NOT LIKE 'H%'", 1), Null);
    assert_eq!(eval("name LIKE NULL"), Null);
    assert_eq!(eval("name LIKE 'H%'"), B(true));
    assert_eq!(eval("name NOT LIKE 'H%'"), B(false));
    assert_eq!(eval("name NOT LIKE '%x%'"), B(true));
    assert_eq!(eval("name NOT LIKE 'H_llo%'"), B(false));
}

#[test]
fn ilike_ignores_case() {
    assert_eq!(eval("name ILIKE 'hello%'"), B(true));
    assert_eq!(eval("name LIKE 'hello%'"), B(false));
    assert_eq!(eval("name ILIKE '%WORLD'"), B(true));
    assert_eq!(eval("name NOT ILIKE '%o w%'"), B(false));
    assert_eq!(eval("'ÜNÏ' ILIKE 'ünï'"), B(true));
    assert_eq!(eval("'ÜNÏ' ILIKE '_n_'"), B(true));
    assert_eq!(eval("sensor ILIKE name"), B(false));
    assert_eq!(eval("name ILIKE lower(name)"), B(true));
}

#[test]
fn like_type_errors() {
    assert_err("n LIKE 'a%'", 0, "LIKE needs a string, got int");
    assert_err(
        "sensor LIKE 1",
        12,
        "the pattern of LIKE needs a string, got int",
    );
    assert_err(
        "sensor LIKE ANY ('a%', 'b%')",
        12,
        "LIKE ANY is not supported",
    );
    assert_err(
        "sensor SIMILAR TO 'a'",
        7,
        "regular expressions are not supported",
    );
}
