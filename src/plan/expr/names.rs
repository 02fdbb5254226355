//! Resolving field names against the schema, and "did you mean" hints.

use crate::data::{DataType, Schema};

/// The column index and type of field `name`: an exact match, or else the
/// only case-insensitive one (identifiers are often written in another case
/// than the source's field names).
pub(crate) fn resolve_field(schema: &Schema, name: &str) -> Result<(usize, DataType), String> {
    if let Some((i, f)) = schema.field(name) {
        return Ok((i, f.ty));
    }
    let lower = name.to_lowercase();
    let matches: Vec<(usize, DataType, &str)> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.name.to_lowercase() == lower)
        .map(|(i, f)| (i, f.ty, f.name.as_str()))
        .collect();
    match matches[..] {
        [(i, ty, _)] => Ok((i, ty)),
        [] => Err(unknown_field(schema, name)),
        _ => {
            let names: Vec<String> = matches.iter().map(|(_, _, n)| format!("`{n}`")).collect();
            Err(format!(
                "field name `{name}` is ambiguous: it matches {} in different case; write the exact name in double quotes",
                names.join(", ")
            ))
        }
    }
}

fn unknown_field(schema: &Schema, name: &str) -> String {
    if schema.len() == 0 {
        return format!("unknown field `{name}`; this stream has no fields");
    }
    let mut message = format!("unknown field `{name}`; fields here: {}", schema.describe());
    if let Some(s) = suggest(name, schema.fields().iter().map(|f| f.name.as_str())) {
        message.push_str(&format!(" (did you mean `{s}`?)"));
    }
    message
}

/// The candidate closest to `name`, if it is close enough to be a likely
/// typo (case differences are free).
pub(crate) fn suggest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let len = name.chars().count();
    // Short names tolerate one edit, longer ones a few; anything more
    // suggests unrelated names.
    let limit = match len {
        0..=3 => 1,
        4..=6 => 2,
        _ => 3,
    };
    let name = name.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&name, &c.to_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Levenshtein distance in chars.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}
