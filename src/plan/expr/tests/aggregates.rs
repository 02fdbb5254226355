//! `compile_aggregate`.

use super::super::{AggCall, AggFunc, compile_aggregate};
use super::*;

#[track_caller]
fn agg(text: &str) -> AggCall {
    compile_aggregate(text, &schema()).unwrap_or_else(|e| panic!("`{text}`: {e:?}"))
}

#[track_caller]
fn agg_err(text: &str, offset: usize, part: &str) {
    match compile_aggregate(text, &schema()) {
        Ok(a) => panic!("`{text}` compiled to {:?}", a.func),
        Err(e) => {
            assert!(
                e.message.contains(part),
                "`{text}`: {:?} lacks {part:?}",
                e.message
            );
            assert_eq!(e.offset, offset, "`{text}`: {:?}", e.message);
        }
    }
}

#[test]
fn aggregate_functions_and_output_types() {
    for (text, func, output) in [
        ("count(*)", AggFunc::CountRows, DataType::Int),
        ("COUNT(*)", AggFunc::CountRows, DataType::Int),
        ("count(name)", AggFunc::Count, DataType::Int),
        (
            "count(DISTINCT sensor)",
            AggFunc::CountDistinct,
            DataType::Int,
        ),
        (
            "count_distinct(temp)",
            AggFunc::CountDistinct,
            DataType::Int,
        ),
        ("sum(n)", AggFunc::Sum, DataType::Int),
        ("sum(temp)", AggFunc::Sum, DataType::Float),
        ("sum(n * 2)", AggFunc::Sum, DataType::Int),
        ("sum(n * 1.5)", AggFunc::Sum, DataType::Float),
        ("avg(n)", AggFunc::Avg, DataType::Float),
        ("avg(temp)", AggFunc::Avg, DataType::Float),
        ("min(ts)", AggFunc::Min, DataType::Int),
        ("max(temp)", AggFunc::Max, DataType::Float),
        ("max(sensor)", AggFunc::Max, DataType::Str),
        ("first(ok)", AggFunc::First, DataType::Bool),
        ("last(sensor)", AggFunc::Last, DataType::Str),
        ("last(upper(sensor))", AggFunc::Last, DataType::Str),
        ("(avg(humidity))", AggFunc::Avg, DataType::Float),
    ] {
        let a = agg(text);
        assert_eq!(a.func, func, "{text}");
        assert_eq!(a.output, output, "{text}");
        assert_eq!(a.arg.is_none(), func == AggFunc::CountRows, "{text}");
    }
}

#[test]
fn aggregate_arguments_are_compiled_expressions() {
    let a = agg("sum(n * 2)");
    let arg = a.arg.expect("an argument");
    assert_eq!(arg.data_type(), DataType::Int);
    assert_eq!(run(&arg, &batch(), 0).unwrap(), I(14));
    assert_eq!(run(&arg, &batch(), 1).unwrap(), Null);
    // avg(int) takes the int argument; the aggregate computes in float.
    let a = agg("avg(n)");
    assert_eq!(a.arg.expect("an argument").data_type(), DataType::Int);
}

#[test]
fn aggregate_errors() {
    let expected = "expected an aggregate such as count(*), sum(x), avg(x)";
    agg_err("temp + 1", 0, expected);
    agg_err(
        "upper(sensor)",
        0,
        "`upper` is not an aggregate function; expected an aggregate",
    );
    agg_err("sum(n) + 1", 0, expected);
    agg_err("sum(sensor)", 4, "`sum` needs a number, got string");
    agg_err("avg(ok)", 4, "`avg` needs a number, got bool");
    agg_err("min(ok)", 4, "`min` needs a number or a string, got bool");
    agg_err("max(NULL)", 4, "`max` needs a number or a string, got NULL");
    agg_err("sum(n, ts)", 0, "`sum` takes 1 argument, got 2");
    agg_err("count()", 0, "`count` takes 1 argument, got 0");
    agg_err(
        "avg(sum(n))",
        4,
        "aggregate functions cannot be nested: `sum` inside `avg`",
    );
    agg_err("sum(*)", 0, "`*` is only allowed in count(*)");
    agg_err("count(DISTINCT *)", 15, "`*` is only allowed in count(*)");
    agg_err(
        "sum(DISTINCT n)",
        0,
        "DISTINCT is only allowed in count(DISTINCT x)",
    );
    agg_err("sum(tmp)", 4, "unknown field `tmp`");
    agg_err(
        "sum(n) OVER ()",
        0,
        "OVER ...`) are not supported: windows are the `window` transform's",
    );
    agg_err("count(*) FILTER (WHERE ok)", 0, "not supported");
    agg_err(
        "sum(",
        4,
        "expected an expression, found the end of the text",
    );
}
