//! Aggregate calls of a window's `aggregates`: exactly one call such as
//! `count(*)`, `avg(temp)` or `sum(price * qty)`, whose argument is a scalar
//! expression compiled like any other.

use super::ast::ExprKind;
use super::compile::{Compiler, type_name};
use super::functions::AGGREGATES;
use super::names::resolve_field;
use super::parse::parse;
use super::{AggCall, AggFunc, ExprError};
use crate::data::{DataType, Schema};

const EXPECTED: &str = "expected an aggregate such as count(*), sum(x), avg(x)";

pub(crate) fn compile_aggregate(text: &str, schema: &Schema) -> Result<AggCall, ExprError> {
    let expr = parse(text)?;
    let top = Compiler::new(text, schema);
    let mut e = &expr;
    while let ExprKind::Nested(inner) = &e.kind {
        e = inner;
    }
    let at = top.at(e);
    let ExprKind::Function(f) = &e.kind else {
        return Err(top.error(at, format!("{EXPECTED}; found `{}`", top.source(e))));
    };
    let name = f.name.clone();
    if !AGGREGATES.contains(&name.as_str()) {
        return Err(top.error(
            at,
            format!(
                "`{name}` is not an aggregate function; {EXPECTED} (aggregates: {})",
                AGGREGATES.join(", ")
            ),
        ));
    }
    let distinct = f.distinct;
    if f.star {
        if name == "count" && !distinct {
            return Ok(AggCall {
                func: AggFunc::CountRows,
                arg: None,
                field: None,
                output: DataType::Int,
            });
        }
        return Err(top.error(at, "`*` is only allowed in count(*)"));
    }
    let [arg] = &f.args[..] else {
        return Err(top.error(
            at,
            format!("`{name}` takes 1 argument, got {}", f.args.len()),
        ));
    };
    let func = match name.as_str() {
        "count" if distinct => AggFunc::CountDistinct,
        "count_distinct" => AggFunc::CountDistinct,
        _ if distinct => return Err(top.error(at, "DISTINCT is only allowed in count(DISTINCT x)")),
        "count" => AggFunc::Count,
        "sum" => AggFunc::Sum,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        "avg" => AggFunc::Avg,
        "first" => AggFunc::First,
        "last" => AggFunc::Last,
        _ => unreachable!("`{name}` is in AGGREGATES"),
    };

    let inner = Compiler::for_aggregate_arg(text, schema, &name);
    let node = inner.expr(arg)?;
    let ty = node.ty();
    let wrong = |wanted: &str| {
        Err(top.error(
            top.at(arg),
            format!("`{name}` needs {wanted}, got {}", type_name(ty)),
        ))
    };
    let output = match (func, ty) {
        (AggFunc::Count | AggFunc::CountDistinct, _) => DataType::Int,
        (AggFunc::Sum, Some(t @ (DataType::Int | DataType::Float))) => t,
        (AggFunc::Sum, _) => return wrong("a number"),
        (AggFunc::Avg, Some(DataType::Int | DataType::Float)) => DataType::Float,
        (AggFunc::Avg, _) => return wrong("a number"),
        (
            AggFunc::Min | AggFunc::Max,
            Some(t @ (DataType::Int | DataType::Float | DataType::Str)),
        ) => t,
        (AggFunc::Min | AggFunc::Max, _) => return wrong("a number or a string"),
        (AggFunc::First | AggFunc::Last, Some(t)) => t,
        // An untyped NULL argument: a string column of NULLs, like
        // `compile("NULL")`.
        (AggFunc::First | AggFunc::Last, None) => DataType::Str,
        (AggFunc::CountRows, _) => unreachable!("count(*) returned above"),
    };
    let compiled = node.into_compiled();
    debug_assert!(
        matches!(func, AggFunc::Count | AggFunc::CountDistinct)
            || compiled.data_type() == output
            || func == AggFunc::Avg
    );
    // A bare field is read straight from its column, with no evaluation.
    let mut bare = arg;
    while let ExprKind::Nested(inner) = &bare.kind {
        bare = inner;
    }
    let field = match &bare.kind {
        ExprKind::Field(name) => resolve_field(schema, name).ok().map(|(i, _)| i),
        _ => None,
    };
    Ok(AggCall {
        func,
        arg: Some(compiled),
        field,
        output,
    })
}
