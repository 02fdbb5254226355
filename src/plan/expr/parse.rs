//! Text to [`Expr`]: a precedence-climbing parser, over `lex`'s tokens, for the
//! SQL expressions eddy evaluates, and nothing more. A general SQL parser
//! (sqlparser) used to do this; it brought a whole query language that
//! only led to "not supported" errors, and 1 MB of the binary.
//!
//! Precedence, loosest first, as in PostgreSQL: OR, AND, NOT, IS,
//! LIKE/ILIKE, comparisons with BETWEEN and IN, `||`, `+ -`, `* / %`,
//! unary `+ -`, `::`.

use super::ExprError;
use super::ast::{
    ArithOp, BinaryOp, CaseWhen, CmpOp, Expr, ExprKind, Function, TrimSide, TypeName, UnaryOp,
};
use super::lex::{Tok, Token, error, tokenize};

/// What eddy's expressions are, for messages about what they are not.
const SUPPORTED: &str = "supported are literals, field names, arithmetic (+ - * / %), ||, \
comparisons, AND/OR/NOT, IS [NOT] NULL/TRUE/FALSE, BETWEEN, IN (list), LIKE/ILIKE, CASE, CAST/TRY_CAST \
and scalar functions";

/// Trees deeper than this are refused instead of overflowing the stack.
/// 128 levels of a debug build's compiler fit in a 2 MiB thread stack.
const MAX_DEPTH: usize = 128;

/// Parses `text` as exactly one expression.
pub(crate) fn parse(text: &str) -> Result<Expr, ExprError> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        text,
        tokens,
        pos: 0,
        depth: 0,
    };
    let expr = p.expr(0)?;
    let next = p.peek();
    if next.tok != Tok::Eof {
        return Err(ExprError {
            offset: next.start,
            message: format!(
                "unexpected `{}` after the end of the expression",
                next.tok.text()
            ),
        });
    }
    Ok(expr)
}

// Binding strengths: an operator binds its right side tighter than `prec`.
const OR: u8 = 5;
const AND: u8 = 10;
const NOT: u8 = 15;
const IS: u8 = 17;
const LIKE: u8 = 19;
const CMP: u8 = 20;
const CONCAT: u8 = 25;
const ADD: u8 = 30;
const MUL: u8 = 40;
const CAST: u8 = 50;

/// Words that cannot be field names: they end or shape an expression.
const RESERVED: &[&str] = &[
    "AND", "OR", "NOT", "IS", "NULL", "TRUE", "FALSE", "BETWEEN", "IN", "LIKE", "ILIKE", "ESCAPE",
    "CASE", "WHEN", "THEN", "ELSE", "END", "AS", "FROM", "FOR", "DISTINCT", "SELECT", "WITH",
];

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        let last = self.tokens.len() - 1;
        &self.tokens[(self.pos + ahead).min(last)].tok
    }

    fn next(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if t.tok != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    /// The end offset of the last token consumed.
    fn last_end(&self) -> usize {
        self.pos.checked_sub(1).map_or(0, |p| self.tokens[p].end)
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        let hit = self.peek().tok.is(kw);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let hit = matches!(self.peek().tok, Tok::Punct(q) if q == p);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expected(&self, what: &str) -> ExprError {
        let t = self.peek();
        error(
            t.start,
            match t.tok {
                Tok::Eof => format!("expected {what}, found the end of the text"),
                _ => format!("expected {what}, found `{}`", t.tok.text()),
            },
        )
    }

    fn expect_keyword(&mut self, kw: &str) -> Result<(), ExprError> {
        if self.eat_keyword(kw) {
            Ok(())
        } else {
            Err(self.expected(kw))
        }
    }

    fn expect_punct(&mut self, p: &str) -> Result<(), ExprError> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{p}`")))
        }
    }

    /// An expression whose operators all bind tighter than `prec`.
    fn expr(&mut self, prec: u8) -> Result<Expr, ExprError> {
        let outer = self.depth;
        self.deeper()?;
        let mut left = self.prefix()?;
        while let Some(op_prec) = self.infix_prec()?
            && op_prec > prec
        {
            // Each operator in a chain (`a + b + c`) nests the tree one
            // level deeper, as a parenthesis does.
            self.deeper()?;
            left = self.infix(left, op_prec)?;
        }
        self.depth = outer;
        Ok(left)
    }

    /// Counts one level of the tree being built; compiling and dropping
    /// it recurse once per level, so a bound here keeps both off the end
    /// of the stack.
    fn deeper(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(error(
                self.peek().start,
                format!(
                    "expression is nested too deeply (at most {MAX_DEPTH} levels of operators and parentheses)"
                ),
            ));
        }
        Ok(())
    }

    fn node(&self, start: usize, kind: ExprKind) -> Expr {
        Expr {
            start,
            end: self.last_end(),
            kind,
        }
    }

    fn prefix(&mut self) -> Result<Expr, ExprError> {
        let t = self.next();
        let start = t.start;
        let at_eof = t.tok == Tok::Eof;
        let kind = match t.tok {
            Tok::Number(n) => ExprKind::Number(n),
            Tok::Str(s) => ExprKind::Str(s),
            Tok::Punct("-") => unary(UnaryOp::Minus, self.expr(MUL)?),
            Tok::Punct("+") => unary(UnaryOp::Plus, self.expr(MUL)?),
            Tok::Punct("(") => {
                self.no_subquery()?;
                let inner = self.expr(0)?;
                self.expect_punct(")")?;
                ExprKind::Nested(Box::new(inner))
            }
            Tok::Punct("*") => return Err(error(start, "`*` is only allowed in count(*)")),
            Tok::Quoted(name) => self.name(name, start)?,
            Tok::Word(w) => match w.to_ascii_uppercase().as_str() {
                "NULL" => ExprKind::Null,
                "TRUE" => ExprKind::Bool(true),
                "FALSE" => ExprKind::Bool(false),
                "NOT" => unary(UnaryOp::Not, self.expr(NOT)?),
                "CASE" => self.case()?,
                "SELECT" | "WITH" => return Err(error(start, "subqueries are not supported")),
                "INTERVAL" | "DATE" | "TIME" | "TIMESTAMP"
                    if matches!(self.peek().tok, Tok::Str(_)) =>
                {
                    return Err(error(
                        start,
                        "typed literals (DATE '...', INTERVAL ...) are not supported; \
                         times are int epoch milliseconds",
                    ));
                }
                kw if RESERVED.contains(&kw) => {
                    self.pos -= 1;
                    return Err(self.expected("an expression"));
                }
                _ if self.peek().tok == Tok::Punct("(") => self.call(w, start)?,
                _ => self.name(w, start)?,
            },
            _ => {
                self.pos -= usize::from(!at_eof);
                return Err(self.expected("an expression"));
            }
        };
        Ok(self.node(start, kind))
    }

    /// After `(`: a query there is a subquery, which eddy does not run.
    fn no_subquery(&self) -> Result<(), ExprError> {
        let t = self.peek();
        if t.tok.is("SELECT") || t.tok.is("WITH") {
            return Err(error(t.start, "subqueries are not supported"));
        }
        Ok(())
    }

    /// A field name, possibly dotted (`a.b`, `"a"."b"`).
    fn name(&mut self, first: String, start: usize) -> Result<ExprKind, ExprError> {
        let mut name = first;
        while self.peek().tok == Tok::Punct(".") {
            self.pos += 1;
            match self.next().tok {
                Tok::Word(w) | Tok::Quoted(w) => {
                    name.push('.');
                    name.push_str(&w);
                }
                Tok::Punct("*") => {
                    return Err(error(start, "`*` is only allowed in count(*)"));
                }
                Tok::Eof => return Err(self.expected("a name after `.`")),
                _ => {
                    self.pos -= 1;
                    return Err(self.expected("a name after `.`"));
                }
            }
        }
        if self.peek().tok == Tok::Punct("(") {
            return Err(error(start, format!("unknown function `{name}`")));
        }
        Ok(ExprKind::Field(name))
    }

    /// `word(`: a function call, or one of SQL's special forms.
    fn call(&mut self, word: String, start: usize) -> Result<ExprKind, ExprError> {
        let upper = word.to_ascii_uppercase();
        self.expect_punct("(")?;
        match upper.as_str() {
            "CAST" | "TRY_CAST" => return self.cast_call(upper == "TRY_CAST"),
            "EXISTS" => {
                self.no_subquery()?;
            }
            "SUBSTRING" | "SUBSTR" => {
                let first = self.expr(0)?;
                if self.peek().tok.is("FROM") || self.peek().tok.is("FOR") {
                    let from = self.eat_keyword("FROM").then(|| self.expr(0)).transpose()?;
                    let length = self.eat_keyword("FOR").then(|| self.expr(0)).transpose()?;
                    self.expect_punct(")")?;
                    return Ok(ExprKind::Substring {
                        expr: Box::new(first),
                        from: from.map(Box::new),
                        length: length.map(Box::new),
                    });
                }
                return Ok(ExprKind::Function(self.finish_call(
                    word,
                    start,
                    vec![first],
                )?));
            }
            "TRIM" => {
                let side = if self.eat_keyword("BOTH") {
                    Some(TrimSide::Both)
                } else if self.eat_keyword("LEADING") {
                    Some(TrimSide::Leading)
                } else if self.eat_keyword("TRAILING") {
                    Some(TrimSide::Trailing)
                } else {
                    None
                };
                if side.is_some() && self.eat_keyword("FROM") {
                    let expr = self.expr(0)?;
                    self.expect_punct(")")?;
                    return Ok(trim(side, None, expr));
                }
                let first = self.expr(0)?;
                if side.is_some() || self.peek().tok.is("FROM") {
                    self.expect_keyword("FROM")?;
                    let expr = self.expr(0)?;
                    self.expect_punct(")")?;
                    return Ok(trim(side, Some(first), expr));
                }
                return Ok(ExprKind::Function(self.finish_call(
                    word,
                    start,
                    vec![first],
                )?));
            }
            "POSITION" => {
                // `IN` here is POSITION's, not the IN-list operator.
                let needle = self.expr(CMP)?;
                if self.eat_keyword("IN") {
                    let haystack = self.expr(0)?;
                    self.expect_punct(")")?;
                    return Ok(ExprKind::Position {
                        needle: Box::new(needle),
                        haystack: Box::new(haystack),
                    });
                }
                return Ok(ExprKind::Function(self.finish_call(
                    word,
                    start,
                    vec![needle],
                )?));
            }
            _ => {}
        }
        let mut star = false;
        let mut distinct = false;
        let mut args = Vec::new();
        if self.eat_punct("*") {
            star = true;
        } else if self.peek().tok != Tok::Punct(")") {
            distinct = self.eat_keyword("DISTINCT");
            args.push(self.expr(0)?);
        }
        let mut f = self.finish_call(word, start, args)?;
        f.star = star;
        f.distinct = distinct;
        Ok(ExprKind::Function(f))
    }

    /// Parses `, arg`* `)` after the arguments in `args`, and refuses what
    /// may follow a call in SQL but not in eddy.
    fn finish_call(
        &mut self,
        word: String,
        start: usize,
        mut args: Vec<Expr>,
    ) -> Result<Function, ExprError> {
        let name = word.to_lowercase();
        loop {
            let t = self.peek();
            match &t.tok {
                Tok::Punct(")") => break,
                Tok::Punct(",") if !args.is_empty() => {
                    self.pos += 1;
                    args.push(self.expr(0)?);
                }
                Tok::Punct("=>") if !args.is_empty() => {
                    return Err(error(
                        start,
                        format!("`{name}` takes positional arguments, not named ones"),
                    ));
                }
                t if t.is("ORDER") => {
                    return Err(error(
                        start,
                        format!("clauses such as ORDER BY inside `{name}(...)` are not supported"),
                    ));
                }
                _ => return Err(self.expected("`,` or `)`")),
            }
        }
        self.pos += 1;
        if self.peek().tok.is("OVER") {
            return Err(error(
                start,
                format!(
                    "window functions (`{name}(...) OVER ...`) are not supported: \
                     windows are the `window` transform's"
                ),
            ));
        }
        if self.peek().tok.is("FILTER") {
            return Err(error(
                start,
                "FILTER (WHERE ...) is not supported; use CASE inside the call",
            ));
        }
        if self.peek().tok.is("WITHIN") {
            return Err(error(
                start,
                format!("this form of `{name}(...)` is not supported"),
            ));
        }
        Ok(Function {
            name,
            args,
            star: false,
            distinct: false,
        })
    }

    /// After `CAST(`: `x AS type)`.
    fn cast_call(&mut self, is_try: bool) -> Result<ExprKind, ExprError> {
        let expr = self.expr(0)?;
        self.expect_keyword("AS")?;
        let to = self.type_name()?;
        self.expect_punct(")")?;
        Ok(ExprKind::Cast {
            expr: Box::new(expr),
            to,
            is_try,
        })
    }

    /// A type name: words (`DOUBLE PRECISION`) and an optional, ignored
    /// length or precision (`VARCHAR(10)`, `DECIMAL(10, 2)`).
    fn type_name(&mut self) -> Result<TypeName, ExprError> {
        let start = self.peek().start;
        let mut words = Vec::new();
        while let Tok::Word(w) = &self.peek().tok {
            let upper = w.to_ascii_uppercase();
            // `x::int AND ...`: a type name never continues with a keyword.
            if !words.is_empty() && RESERVED.contains(&upper.as_str()) {
                break;
            }
            words.push(upper);
            self.pos += 1;
        }
        if words.is_empty() {
            return Err(self.expected("a type name"));
        }
        if self.eat_punct("(") {
            while !matches!(self.peek().tok, Tok::Punct(")") | Tok::Eof) {
                self.pos += 1;
            }
            self.expect_punct(")")?;
        }
        Ok(TypeName {
            at: start,
            name: words.join(" "),
            text: self.text[start..self.last_end()].to_string(),
        })
    }

    /// `CASE [operand] WHEN c THEN r ... [ELSE e] END`, after `CASE`.
    fn case(&mut self) -> Result<ExprKind, ExprError> {
        let operand = if self.peek().tok.is("WHEN") {
            None
        } else {
            Some(Box::new(self.expr(0)?))
        };
        let mut whens = Vec::new();
        while self.eat_keyword("WHEN") {
            let condition = self.expr(0)?;
            self.expect_keyword("THEN")?;
            let result = self.expr(0)?;
            whens.push(CaseWhen { condition, result });
        }
        if whens.is_empty() {
            return Err(self.expected("WHEN"));
        }
        let else_result = if self.eat_keyword("ELSE") {
            Some(Box::new(self.expr(0)?))
        } else {
            None
        };
        self.expect_keyword("END")?;
        Ok(ExprKind::Case {
            operand,
            whens,
            else_result,
        })
    }

    /// How tightly the next token binds as an infix operator; `None` if it
    /// is not one. Operators eddy does not have are errors here.
    fn infix_prec(&self) -> Result<Option<u8>, ExprError> {
        let t = self.peek();
        Ok(Some(match &t.tok {
            Tok::Word(w) => match w.to_ascii_uppercase().as_str() {
                "OR" => OR,
                "AND" => AND,
                "IS" => IS,
                "LIKE" | "ILIKE" => LIKE,
                "BETWEEN" | "IN" => CMP,
                "NOT" if self.peek_at(1).is("LIKE") || self.peek_at(1).is("ILIKE") => LIKE,
                "NOT" if self.peek_at(1).is("BETWEEN") || self.peek_at(1).is("IN") => CMP,
                "SIMILAR" | "RLIKE" | "REGEXP" => {
                    return Err(error(
                        t.start,
                        "regular expressions are not supported; use LIKE with `%` and `_`",
                    ));
                }
                _ => return Ok(None),
            },
            Tok::Punct(p) => match *p {
                "=" | "==" | "<>" | "!=" | "<" | "<=" | ">" | ">=" | "<=>" => CMP,
                "||" => CONCAT,
                "+" | "-" => ADD,
                "*" | "/" | "%" => MUL,
                "::" => CAST,
                "^" => {
                    return Err(error(
                        t.start,
                        "operator `^` is not supported; use power(x, y)",
                    ));
                }
                "~" | "!~" | "~*" => {
                    return Err(error(
                        t.start,
                        format!(
                            "operator `{p}` is not supported; for patterns use LIKE with `%` and `_`"
                        ),
                    ));
                }
                "&" | "|" | "#" | "<<" | ">>" | "@" | "!" => {
                    return Err(error(
                        t.start,
                        format!("operator `{p}` is not supported; {SUPPORTED}"),
                    ));
                }
                _ => return Ok(None),
            },
            _ => return Ok(None),
        }))
    }

    fn infix(&mut self, left: Expr, prec: u8) -> Result<Expr, ExprError> {
        let start = left.start;
        let t = self.next();
        let left = Box::new(left);
        let kind = match t.tok {
            Tok::Punct("::") => ExprKind::Cast {
                expr: left,
                to: self.type_name()?,
                is_try: false,
            },
            Tok::Punct("<=>") => ExprKind::IsDistinctFrom {
                left,
                right: Box::new(self.expr(prec)?),
                negated: true,
            },
            Tok::Punct(p) => {
                let op = match p {
                    "=" | "==" => BinaryOp::Cmp(CmpOp::Eq),
                    "<>" | "!=" => BinaryOp::Cmp(CmpOp::NotEq),
                    "<" => BinaryOp::Cmp(CmpOp::Lt),
                    "<=" => BinaryOp::Cmp(CmpOp::LtEq),
                    ">" => BinaryOp::Cmp(CmpOp::Gt),
                    ">=" => BinaryOp::Cmp(CmpOp::GtEq),
                    "||" => BinaryOp::Concat,
                    "+" => BinaryOp::Arith(ArithOp::Add),
                    "-" => BinaryOp::Arith(ArithOp::Sub),
                    "*" => BinaryOp::Arith(ArithOp::Mul),
                    "/" => BinaryOp::Arith(ArithOp::Div),
                    "%" => BinaryOp::Arith(ArithOp::Rem),
                    _ => unreachable!("`{p}` has an infix precedence"),
                };
                binary(left, op, self.expr(prec)?)
            }
            Tok::Word(w) => {
                let upper = w.to_ascii_uppercase();
                let negated = upper == "NOT";
                let word = if negated {
                    self.next().tok.text().to_ascii_uppercase()
                } else {
                    upper
                };
                match word.as_str() {
                    "OR" => binary(left, BinaryOp::Or, self.expr(prec)?),
                    "AND" => binary(left, BinaryOp::And, self.expr(prec)?),
                    "IS" => self.is(left)?,
                    "LIKE" | "ILIKE" => {
                        let next = self.peek();
                        if (next.tok.is("ANY") || next.tok.is("ALL") || next.tok.is("SOME"))
                            && *self.peek_at(1) == Tok::Punct("(")
                        {
                            return Err(error(
                                next.start,
                                format!(
                                    "{word} {} is not supported; combine LIKEs with OR",
                                    next.tok.text().to_uppercase()
                                ),
                            ));
                        }
                        let pattern = Box::new(self.expr(prec)?);
                        let escape = if self.eat_keyword("ESCAPE") {
                            Some(Box::new(self.expr(prec)?))
                        } else {
                            None
                        };
                        ExprKind::Like {
                            expr: left,
                            pattern,
                            escape,
                            negated,
                            ilike: word == "ILIKE",
                        }
                    }
                    "BETWEEN" => {
                        let low = Box::new(self.expr(prec)?);
                        self.expect_keyword("AND")?;
                        let high = Box::new(self.expr(prec)?);
                        ExprKind::Between {
                            expr: left,
                            low,
                            high,
                            negated,
                        }
                    }
                    "IN" => {
                        self.expect_punct("(")?;
                        self.no_subquery()?;
                        let mut list = vec![self.expr(0)?];
                        while self.eat_punct(",") {
                            list.push(self.expr(0)?);
                        }
                        self.expect_punct(")")?;
                        ExprKind::InList {
                            expr: left,
                            list,
                            negated,
                        }
                    }
                    _ => unreachable!("`{word}` has an infix precedence"),
                }
            }
            _ => unreachable!("only words and punctuation are infix operators"),
        };
        Ok(self.node(start, kind))
    }

    /// After `IS`: `[NOT] NULL | TRUE | FALSE | UNKNOWN | DISTINCT FROM x`.
    fn is(&mut self, left: Box<Expr>) -> Result<ExprKind, ExprError> {
        let negated = self.eat_keyword("NOT");
        let expr = left;
        Ok(if self.eat_keyword("NULL") {
            ExprKind::IsNull { expr, negated }
        } else if self.eat_keyword("TRUE") {
            ExprKind::IsBool {
                expr,
                value: Some(true),
                negated,
            }
        } else if self.eat_keyword("FALSE") {
            ExprKind::IsBool {
                expr,
                value: Some(false),
                negated,
            }
        } else if self.eat_keyword("UNKNOWN") {
            ExprKind::IsBool {
                expr,
                value: None,
                negated,
            }
        } else if self.eat_keyword("DISTINCT") {
            self.expect_keyword("FROM")?;
            ExprKind::IsDistinctFrom {
                left: expr,
                right: Box::new(self.expr(IS)?),
                negated,
            }
        } else {
            return Err(self.expected("NULL, TRUE, FALSE, UNKNOWN or DISTINCT FROM after IS"));
        })
    }
}

fn unary(op: UnaryOp, expr: Expr) -> ExprKind {
    ExprKind::Unary {
        op,
        expr: Box::new(expr),
    }
}

fn binary(left: Box<Expr>, op: BinaryOp, right: Expr) -> ExprKind {
    ExprKind::Binary {
        left,
        op,
        right: Box::new(right),
    }
}

fn trim(side: Option<TrimSide>, chars: Option<Expr>, expr: Expr) -> ExprKind {
    ExprKind::Trim {
        side: side.unwrap_or(TrimSide::Both),
        chars: chars.map(Box::new),
        expr: Box::new(expr),
    }
}
