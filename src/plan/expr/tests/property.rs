//! Random arithmetic and comparison expressions over int and float fields,
//! compiled and checked against a direct reference evaluator.

use super::*;

/// xorshift64*: small, seeded, good enough to pick expression shapes.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A value of the reference evaluator.
#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// What evaluating gives: a value or an error (division by zero, overflow).
type R = Result<V, ()>;

#[derive(Clone, Debug)]
enum E {
    Field(usize),
    Int(i64),
    Float(f64),
    Null,
    Neg(Box<E>),
    Arith(&'static str, Box<E>, Box<E>),
    Cmp(&'static str, Box<E>, Box<E>),
    Logic(&'static str, Box<E>, Box<E>),
    Not(Box<E>),
    IsNull(Box<E>),
}

const FIELDS: [(&str, DataType); 4] = [
    ("a", DataType::Int),
    ("b", DataType::Int),
    ("f", DataType::Float),
    ("g", DataType::Float),
];

fn gen_num(rng: &mut Rng, depth: u32) -> E {
    if depth == 0 || rng.below(3) == 0 {
        return match rng.below(8) {
            0..=3 => E::Field(rng.below(4) as usize),
            4 | 5 => E::Int(rng.below(21) as i64 - 10),
            6 => E::Float((rng.below(41) as f64 - 20.0) / 4.0),
            _ => {
                if rng.below(4) == 0 {
                    E::Null
                } else {
                    E::Int(i64::MAX - rng.below(3) as i64)
                }
            }
        };
    }
    match rng.below(6) {
        0 => E::Neg(Box::new(gen_num(rng, depth - 1))),
        n => {
            let op = ["+", "-", "*", "/", "%"][(n - 1) as usize];
            E::Arith(
                op,
                Box::new(gen_num(rng, depth - 1)),
                Box::new(gen_num(rng, depth - 1)),
            )
        }
    }
}

fn gen_bool(rng: &mut Rng, depth: u32) -> E {
    if depth == 0 || rng.below(3) == 0 {
        let op = ["=", "<>", "<", "<=", ">", ">="][rng.below(6) as usize];
        return E::Cmp(op, Box::new(gen_num(rng, 2)), Box::new(gen_num(rng, 2)));
    }
    match rng.below(4) {
        0 => E::Not(Box::new(gen_bool(rng, depth - 1))),
        1 => E::IsNull(Box::new(gen_num(rng, 2))),
        n => {
            let op = if n == 2 { "AND" } else { "OR" };
            E::Logic(
                op,
                Box::new(gen_bool(rng, depth - 1)),
                Box::new(gen_bool(rng, depth - 1)),
            )
        }
    }
}

/// SQL text, fully parenthesised so precedence is not under test here.
fn text(e: &E) -> String {
    match e {
        E::Field(i) => FIELDS[*i].0.to_string(),
        E::Int(v) if *v < 0 => format!("({v})"),
        E::Int(v) => v.to_string(),
        E::Float(v) if *v < 0.0 => format!("({v:?})"),
        E::Float(v) => format!("{v:?}"),
        E::Null => "NULL".into(),
        E::Neg(x) => format!("(-{})", text(x)),
        E::Arith(op, a, b) | E::Cmp(op, a, b) | E::Logic(op, a, b) => {
            format!("({} {op} {})", text(a), text(b))
        }
        E::Not(x) => format!("(NOT {})", text(x)),
        E::IsNull(x) => format!("({} IS NULL)", text(x)),
    }
}

fn reference(e: &E, row: &[V]) -> R {
    Ok(match e {
        E::Field(i) => row[*i],
        E::Int(v) => V::Int(*v),
        E::Float(v) => V::Float(*v),
        E::Null => V::Null,
        E::Neg(x) => match reference(x, row)? {
            V::Int(v) => V::Int(v.checked_neg().ok_or(())?),
            V::Float(v) => V::Float(-v),
            other => other,
        },
        E::Arith(op, a, b) => {
            // A NULL left operand decides without evaluating the right one.
            let x = reference(a, row)?;
            if x == V::Null {
                return Ok(V::Null);
            }
            match (x, reference(b, row)?) {
                (_, V::Null) => V::Null,
                (V::Int(x), V::Int(y)) => V::Int(match *op {
                    "+" => x.checked_add(y).ok_or(())?,
                    "-" => x.checked_sub(y).ok_or(())?,
                    "*" => x.checked_mul(y).ok_or(())?,
                    "/" if y == 0 => return Err(()),
                    "/" => x.checked_div(y).ok_or(())?,
                    _ if y == 0 => return Err(()),
                    _ => x.wrapping_rem(y),
                }),
                (x, y) => {
                    let (x, y) = (as_float(x), as_float(y));
                    V::Float(match *op {
                        "+" => x + y,
                        "-" => x - y,
                        "*" => x * y,
                        _ if y == 0.0 => return Err(()),
                        "/" => x / y,
                        _ => x % y,
                    })
                }
            }
        }
        E::Cmp(op, a, b) => {
            let x = reference(a, row)?;
            if x == V::Null {
                return Ok(V::Null);
            }
            let ord = match (x, reference(b, row)?) {
                (_, V::Null) => return Ok(V::Null),
                (V::Int(x), V::Int(y)) => x.partial_cmp(&y),
                (x, y) => as_float(x).partial_cmp(&as_float(y)),
            };
            use std::cmp::Ordering::*;
            V::Bool(match *op {
                "=" => ord == Some(Equal),
                // IEEE 754: NaN is unequal to everything.
                "<>" => ord != Some(Equal),
                "<" => ord == Some(Less),
                "<=" => matches!(ord, Some(Less | Equal)),
                ">" => ord == Some(Greater),
                _ => matches!(ord, Some(Greater | Equal)),
            })
        }
        E::Logic(op, _, _) => {
            // Chains of one operator are one n-ary node in the compiled
            // form: a constant deciding term settles it at compile time,
            // wherever it stands; otherwise terms run left to right,
            // stopping at the first deciding value.
            let decisive = *op == "OR";
            let mut terms = Vec::new();
            flatten(e, op, &mut terms);
            if terms
                .iter()
                .any(|t| !has_field(t) && reference(t, row).map(as_bool) == Ok(Some(decisive)))
            {
                return Ok(V::Bool(decisive));
            }
            let mut unknown = false;
            for t in terms {
                match as_bool(reference(t, row)?) {
                    Some(v) if v == decisive => return Ok(V::Bool(v)),
                    Some(_) => {}
                    None => unknown = true,
                }
            }
            if unknown { V::Null } else { V::Bool(!decisive) }
        }
        E::Not(x) => as_bool(reference(x, row)?).map_or(V::Null, |v| V::Bool(!v)),
        E::IsNull(x) => V::Bool(reference(x, row)? == V::Null),
    })
}

fn flatten<'e>(e: &'e E, op: &str, out: &mut Vec<&'e E>) {
    match e {
        E::Logic(o, a, b) if *o == op => {
            flatten(a, op, out);
            flatten(b, op, out);
        }
        _ => out.push(e),
    }
}

fn has_field(e: &E) -> bool {
    match e {
        E::Field(_) => true,
        E::Int(_) | E::Float(_) | E::Null => false,
        E::Neg(x) | E::Not(x) | E::IsNull(x) => has_field(x),
        E::Arith(_, a, b) | E::Cmp(_, a, b) | E::Logic(_, a, b) => has_field(a) || has_field(b),
    }
}

fn as_float(v: V) -> f64 {
    match v {
        V::Int(x) => x as f64,
        V::Float(x) => x,
        other => panic!("not a number: {other:?}"),
    }
}

fn as_bool(v: V) -> Option<bool> {
    match v {
        V::Bool(b) => Some(b),
        V::Null => None,
        other => panic!("not a bool: {other:?}"),
    }
}

fn same(got: &Result<Val, EvalError>, want: &R) -> bool {
    match (got, want) {
        (Err(_), Err(())) => true,
        (Ok(Null), Ok(V::Null)) => true,
        (Ok(I(a)), Ok(V::Int(b))) => a == b,
        (Ok(B(a)), Ok(V::Bool(b))) => a == b,
        (Ok(F(a)), Ok(V::Float(b))) => a == b || (a.is_nan() && b.is_nan()),
        _ => false,
    }
}

#[test]
fn random_expressions_match_the_reference_evaluator() {
    let schema = Schema::new(FIELDS.iter().map(|(n, t)| Field::new(*n, *t)).collect());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Rows with small values, zeros, NULLs and extremes.
    let mut data: Vec<Vec<V>> = vec![
        vec![V::Int(0), V::Int(0), V::Float(0.0), V::Float(-0.0)],
        vec![V::Null, V::Int(3), V::Null, V::Float(2.5)],
        vec![
            V::Int(i64::MAX),
            V::Int(i64::MIN),
            V::Float(1e300),
            V::Float(-1e-300),
        ],
        vec![
            V::Int(-1),
            V::Int(-7),
            V::Float(f64::NAN),
            V::Float(f64::INFINITY),
        ],
    ];
    for _ in 0..12 {
        data.push(vec![
            V::Int(rng.below(21) as i64 - 10),
            V::Int(rng.below(2001) as i64 - 1000),
            V::Float((rng.below(81) as f64 - 40.0) / 8.0),
            if rng.below(5) == 0 {
                V::Null
            } else {
                V::Float(rng.below(1000) as f64 / 3.0)
            },
        ]);
    }
    let cells: Vec<Vec<ValueRef<'_>>> = data
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| match *v {
                    V::Null => ValueRef::Null,
                    V::Int(x) => ValueRef::Int(x),
                    V::Float(x) => ValueRef::Float(x),
                    V::Bool(x) => ValueRef::Bool(x),
                })
                .collect()
        })
        .collect();
    let batch = rows(schema.clone(), &cells);
    let mut checked = 0;
    for i in 0..1500 {
        let e = if i % 2 == 0 {
            gen_num(&mut rng, 4)
        } else {
            gen_bool(&mut rng, 3)
        };
        let sql = text(&e);
        let compiled = compile(&sql, &schema).unwrap_or_else(|err| panic!("`{sql}`: {err:?}"));
        for (r, row) in data.iter().enumerate() {
            let want = reference(&e, row);
            let got = run(&compiled, &batch, r);
            assert!(
                same(&got, &want),
                "`{sql}` on row {r} {row:?}: compiled {got:?}, reference {want:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 1500 * data.len());
}
