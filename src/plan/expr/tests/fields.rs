//! Literals and field references.

use super::*;

#[test]
fn literals_have_their_types() {
    assert_eq!(eval("42"), I(42));
    assert_eq!(eval("-42"), I(-42));
    assert_eq!(eval("-9223372036854775808"), I(i64::MIN));
    assert_eq!(eval("9223372036854775807"), I(i64::MAX));
    assert_eq!(eval("1.5"), F(1.5));
    assert_eq!(eval("1e3"), F(1000.0));
    assert_eq!(eval("2.5E-1"), F(0.25));
    assert_eq!(eval(".5"), F(0.5));
    assert_eq!(eval("'it''s'"), s("it's"));
    assert_eq!(eval("''"), s(""));
    assert_eq!(eval("TRUE"), B(true));
    assert_eq!(eval("false"), B(false));
    assert_eq!(eval("NULL"), Null);
    assert_eq!(type_of("NULL"), DataType::Str);
    assert_eq!(type_of("1e3"), DataType::Float);
    assert_eq!(type_of("(((7)))"), DataType::Int);
}

#[test]
fn out_of_range_integer_literal_is_an_error() {
    assert_err("9223372036854775808", 0, "out of range for int");
    assert_err("x + -9223372036854775809", 5, "out of range for int");
}

#[test]
fn fields_read_their_column() {
    assert_eq!(eval("sensor"), s("a1"));
    assert_eq!(eval("temp"), F(31.5));
    assert_eq!(eval("ts"), I(1000));
    assert_eq!(eval("ok"), B(true));
    assert_eq!(eval_at("n", 1), Null);
    assert_eq!(eval_at("name", 1), Null);
    assert_eq!(eval_at("sensor", 2), s("ünïcødé"));
    assert_eq!(type_of("humidity"), DataType::Float);
    assert_eq!(type_of("ok"), DataType::Bool);
}

#[test]
fn string_fields_are_borrowed_from_the_batch() {
    let batch = batch();
    let Compiled::Str(f) = compiled("sensor") else {
        panic!("not a string")
    };
    assert!(matches!(
        f(&batch, 0),
        Ok(Some(std::borrow::Cow::Borrowed("a1")))
    ));
    let Compiled::Str(f) = compiled("coalesce(name, sensor)") else {
        panic!("not a string")
    };
    assert!(matches!(
        f(&batch, 1),
        Ok(Some(std::borrow::Cow::Borrowed("b2")))
    ));
    let Compiled::Str(f) = compiled("trim(name)") else {
        panic!("not a string")
    };
    assert!(matches!(
        f(&batch, 2),
        Ok(Some(std::borrow::Cow::Borrowed("padded")))
    ));
}

#[test]
fn names_match_exactly_then_ignoring_case() {
    assert_eq!(eval("\"temp\""), F(31.5));
    assert_eq!(eval("TEMP"), F(31.5));
    assert_eq!(eval("\"Temp\""), F(31.5));
    assert_eq!(eval("\"Mixed Case\""), I(1));
    assert_eq!(eval("\"mixed case\""), I(1));
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int),
        Field::new("A", DataType::Float),
    ]);
    let one = rows(
        schema.clone(),
        &[vec![ValueRef::Int(1), ValueRef::Float(2.0)]],
    );
    assert_eq!(run(&compile("a", &schema).unwrap(), &one, 0).unwrap(), I(1));
    assert_eq!(
        run(&compile("A", &schema).unwrap(), &one, 0).unwrap(),
        F(2.0)
    );
    let e = compile("\"a \"", &schema).err().unwrap();
    assert!(e.message.starts_with("unknown field `a `"), "{}", e.message);
    let schema = Schema::new(vec![
        Field::new("Ab", DataType::Int),
        Field::new("aB", DataType::Float),
    ]);
    let e = compile("ab", &schema).err().unwrap();
    assert!(e.message.contains("ambiguous"), "{}", e.message);
}

#[test]
fn dotted_names_match_fields_with_dots() {
    let schema = Schema::new(vec![Field::new("loc.lat", DataType::Float)]);
    let one = rows(schema.clone(), &[vec![ValueRef::Float(1.25)]]);
    assert_eq!(
        run(&compile("loc.lat", &schema).unwrap(), &one, 0).unwrap(),
        F(1.25)
    );
    let e = compile("loc.lon", &schema).err().unwrap();
    assert!(
        e.message.starts_with("unknown field `loc.lon`"),
        "{}",
        e.message
    );
}

#[test]
fn unknown_field_lists_fields_and_suggests() {
    let e = err("temp > 30 AND tmp < 3");
    assert_eq!(e.offset, 14);
    assert_eq!(
        e.message,
        format!(
            "unknown field `tmp`; fields here: {} (did you mean `temp`?)",
            schema().describe()
        )
    );
    let e = err("humidty");
    assert!(
        e.message.ends_with("(did you mean `humidity`?)"),
        "{}",
        e.message
    );
    let e = err("zzz");
    assert!(!e.message.contains("did you mean"), "{}", e.message);
    let e = compile("a", &Schema::default()).err().unwrap();
    assert_eq!(e.message, "unknown field `a`; this stream has no fields");
}

#[test]
fn constant_subexpressions_are_folded() {
    use super::super::compile::Compiler;
    use super::super::node::{Node, Operand};
    let schema = schema();
    let text = "upper('a' || 'b') = 'AB' AND 2 * 3 + 1 = 7";
    let expr = super::super::parse::parse(text).unwrap();
    let node = Compiler::new(text, &schema).expr(&expr).unwrap();
    assert!(matches!(node, Node::Bool(Operand::Const(Some(true)))));
    // A failing constant stays a closure: the error is per record.
    let text = "1 / 0";
    let expr = super::super::parse::parse(text).unwrap();
    let node = Compiler::new(text, &schema).expr(&expr).unwrap();
    assert!(matches!(node, Node::Int(Operand::Dyn(_))));
    assert_eq!(eval_err("1 / 0"), "division by zero");
}

#[test]
fn eval_into_appends_values_and_nulls() {
    use crate::data::Column;
    let batch = batch();
    for (text, ty) in [
        ("n * 2", DataType::Int),
        ("x + 1", DataType::Float),
        ("ok", DataType::Bool),
        ("upper(name)", DataType::Str),
    ] {
        let c = compiled(text);
        let mut out = Column::new(ty, 3);
        for row in 0..batch.len() {
            c.eval_into(&batch, row, &mut out).unwrap();
        }
        assert_eq!(out.len(), 3);
        assert!(out.is_null(1), "{text}");
        assert_eq!(
            out.get(0),
            match run(&c, &batch, 0).unwrap() {
                I(v) => ValueRef::Int(v),
                F(v) => ValueRef::Float(v),
                B(v) => ValueRef::Bool(v),
                Val::S(ref v) => return assert_eq!(out.str(0), Some(v.as_str())),
                Null => ValueRef::Null,
            },
            "{text}"
        );
    }
    let mut out = Column::new(DataType::Int, 1);
    assert_eq!(
        compiled("n / 0").eval_into(&batch, 0, &mut out),
        Err(EvalError("division by zero".into()))
    );
}

#[test]
fn sql_special_words_are_plain_field_names() {
    let schema = Schema::new(vec![
        Field::new("user", DataType::Str),
        Field::new("current_date", DataType::Int),
    ]);
    let one = rows(
        schema.clone(),
        &[vec![ValueRef::Str("ann"), ValueRef::Int(20240101)]],
    );
    assert_eq!(
        run(&compile("user = 'ann'", &schema).unwrap(), &one, 0).unwrap(),
        B(true)
    );
    assert_eq!(
        run(&compile("current_date + 1", &schema).unwrap(), &one, 0).unwrap(),
        I(20240102)
    );
}
