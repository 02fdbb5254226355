//! Aggregate calls of a window's `aggregates`: exactly one call such as
//! `count(*)`, `avg(temp)` or `sum(price * qty)`, whose argument is a scalar
//! expression compiled like any other.

use sqlparser::ast::{DuplicateTreatment, Expr, FunctionArg, FunctionArgExpr, FunctionArguments};

use super::compile::{Compiler, type_name};
use super::functions::{AGGREGATES, function_name};
use super::names::resolve_field;
use super::parse::parse;
use super::{AggCall, AggFunc, ExprError};
use crate::data::{DataType, Schema};

const EXPECTED: &str = "expected an aggregate such as count(*), sum(x), avg(x)";

pub(crate) fn compile_aggregate(text: &str, schema: &Schema) -> Result<AggCall, ExprError> {
    let expr = parse(text)?;
    let top = Compiler::new(text, schema);
    let mut e = &expr;
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    let at = top.at(e);
    let Expr::Function(f) = e else {
        return Err(top.error(at, format!("{EXPECTED}; found `{e}`")));
    };
    let name = function_name(f).unwrap_or_else(|| f.name.to_string());
    if !AGGREGATES.contains(&name.as_str()) {
        return Err(top.error(
            at,
            format!(
                "`{name}` is not an aggregate function; {EXPECTED} (aggregates: {})",
                AGGREGATES.join(", ")
            ),
        ));
    }
    if f.over.is_some() {
        return Err(top.error(
            at,
            "OVER is not supported: the window is the transform's own",
        ));
    }
    if f.filter.is_some() || !f.within_group.is_empty() || f.null_treatment.is_some() {
        return Err(top.error(
            at,
            format!("this form of `{name}(...)` is not supported; {EXPECTED}"),
        ));
    }
    let FunctionArguments::List(list) = &f.args else {
        return Err(top.error(at, format!("`{name}` takes 1 argument, got 0")));
    };
    if !list.clauses.is_empty() {
        return Err(top.error(
            at,
            format!("clauses such as ORDER BY inside `{name}(...)` are not supported"),
        ));
    }
    if list.args.len() != 1 {
        return Err(top.error(
            at,
            format!("`{name}` takes 1 argument, got {}", list.args.len()),
        ));
    }
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    let arg = match &list.args[0] {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(arg)) => arg,
        FunctionArg::Unnamed(FunctionArgExpr::Wildcard) if name == "count" && !distinct => {
            return Ok(AggCall {
                func: AggFunc::CountRows,
                arg: None,
                field: None,
                output: DataType::Int,
            });
        }
        FunctionArg::Unnamed(_) => return Err(top.error(at, "`*` is only allowed in count(*)")),
        _ => {
            return Err(top.error(
                at,
                format!("`{name}` takes a positional argument, not a named one"),
            ));
        }
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
    while let Expr::Nested(inner) = bare {
        bare = inner;
    }
    let field = match bare {
        Expr::Identifier(ident) => resolve_field(schema, &ident.value).ok().map(|(i, _)| i),
        _ => None,
    };
    Ok(AggCall {
        func,
        arg: Some(compiled),
        field,
        output,
    })
}
