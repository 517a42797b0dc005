//! The rule condition language: a small, typed expression over the fields of one observation
//! of a GPU (a sample's METRICS.md fields, `efficiency`, `state`, `duration_in_state_s`, …).
//!
//! ```text
//! condition := or
//! or        := and  ( ("||" | "or")  and )*
//! and       := not  ( ("&&" | "and") not )*
//! not       := ("!" | "not") not | cmp
//! cmp       := sum  ( ("==" | "!=" | "<" | "<=" | ">" | ">=") sum )?
//! sum       := prod ( ("+" | "-") prod )*
//! prod      := unary ( ("*" | "/") unary )*
//! unary     := "-" unary | atom
//! atom      := NUMBER | STRING | "true" | "false" | IDENT | "(" or ")"
//! NUMBER    := digits [ "." digits ] [ ("e" | "E") ["+" | "-"] digits ]
//! STRING    := '"' chars '"' | "'" chars "'"
//! IDENT     := [A-Za-z_][A-Za-z0-9_]*      (a field name; next to `state`, a state name)
//! ```
//! Types are checked when the condition is parsed: `&&`, `||`, `!` take booleans, arithmetic
//! and `<`/`>` take numbers, `==`/`!=` compare like with like (`state == stalled` compares the
//! state with a METRICS.md state name, `host == "node-1"` text with text). The whole condition
//! must be a boolean.
//!
//! Absent is never 0 (METRICS.md): a field the GPU did not report is *unknown*, a comparison
//! with it is unknown, and logic is Kleene's three-valued logic (`unknown && false` = false,
//! `unknown || true` = true, `!unknown` = unknown). A rule matches only when its condition is
//! definitely true, so a GPU without SM activity never matches `sm_active_pct < 30`, nor
//! `!(sm_active_pct >= 30)`. Division by zero is unknown too.

use std::fmt;

use crate::rules::fields::{self, FieldType, Observation, Value};
use crate::state::WorkloadState;

/// Longest condition accepted, in characters.
pub const MAX_CONDITION_CHARS: usize = 2_000;
/// Deepest nesting accepted (parentheses and unary operators).
const MAX_DEPTH: usize = 64;

/// A condition that does not parse or type-check. `position` is the 0-based character offset
/// of the offending token in the condition (`column` is the same, 1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub position: usize,
    pub message: String,
}

impl ParseError {
    fn new(position: usize, message: impl Into<String>) -> Self {
        ParseError { position, message: message.into() }
    }

    /// 1-based column of the error.
    pub fn column(&self) -> usize {
        self.position + 1
    }

    /// The condition with a caret under the error, for messages and logs.
    pub fn pointer(&self, condition: &str) -> String {
        let width = condition.chars().count();
        format!("{condition}\n{}^", " ".repeat(self.position.min(width)))
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at column {})", self.message, self.column())
    }
}

impl std::error::Error for ParseError {}

/// Three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    pub fn is_true(self) -> bool {
        self == Truth::True
    }

    fn of(b: bool) -> Truth {
        if b { Truth::True } else { Truth::False }
    }

    fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// A checked expression node.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Num(f64),
    Text(String),
    Bool(bool),
    State(WorkloadState),
    Field(&'static str),
    Neg(Box<Node>),
    Arith(ArithOp, Box<Node>, Box<Node>),
    Cmp(CmpOp, Box<Node>, Box<Node>),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
}

/// A parsed, type-checked condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    source: String,
    root: Node,
    fields: Vec<&'static str>,
}

impl Condition {
    /// Parse and type-check `source`.
    pub fn parse(source: &str) -> Result<Condition, ParseError> {
        let chars = source.chars().count();
        if chars > MAX_CONDITION_CHARS {
            return Err(ParseError::new(
                MAX_CONDITION_CHARS,
                format!("condition longer than {MAX_CONDITION_CHARS} characters"),
            ));
        }
        let tokens = lex(source)?;
        let mut p = Parser { tokens, at: 0, depth: 0, end: chars };
        if p.peek().is_none() {
            return Err(ParseError::new(0, "empty condition: write e.g. `gpu_util_pct >= 80 && sm_active_pct < 30`"));
        }
        let ast = p.or()?;
        if let Some(t) = p.peek() {
            let hint = match &t.kind {
                Tok::RParen => "unbalanced `)`".to_string(),
                _ => format!("unexpected {} after a complete condition (missing `&&` or `||`?)", t.kind),
            };
            return Err(ParseError::new(t.pos, hint));
        }
        let (root, ty) = check(&ast)?;
        if ty != FieldType::Bool {
            return Err(ParseError::new(
                ast.pos,
                format!("the condition is a {}, not true/false: compare it, e.g. `… > 0`", ty.name()),
            ));
        }
        let mut fields = Vec::new();
        collect_fields(&root, &mut fields);
        Ok(Condition { source: source.to_string(), root, fields })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The fields the condition reads, in order of first use (no repeats).
    pub fn fields(&self) -> &[&'static str] {
        &self.fields
    }

    /// Evaluate over one observation.
    pub fn eval(&self, obs: &Observation<'_>) -> Truth {
        truth(&self.root, obs)
    }

    /// True when the condition is definitely true for `obs`.
    pub fn matches(&self, obs: &Observation<'_>) -> bool {
        self.eval(obs).is_true()
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn collect_fields(n: &Node, out: &mut Vec<&'static str>) {
    match n {
        Node::Field(name) => {
            if !out.contains(name) {
                out.push(name);
            }
        }
        Node::Neg(a) | Node::Not(a) => collect_fields(a, out),
        Node::Arith(_, a, b) | Node::Cmp(_, a, b) | Node::And(a, b) | Node::Or(a, b) => {
            collect_fields(a, out);
            collect_fields(b, out);
        }
        Node::Num(_) | Node::Text(_) | Node::Bool(_) | Node::State(_) => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

fn num(n: &Node, obs: &Observation<'_>) -> Option<f64> {
    match n {
        Node::Num(v) => Some(*v),
        Node::Field(name) => match obs.value(name) {
            Value::Num(v) if v.is_finite() => Some(v),
            _ => None,
        },
        Node::Neg(a) => num(a, obs).map(|v| -v),
        Node::Arith(op, a, b) => {
            let (a, b) = (num(a, obs)?, num(b, obs)?);
            let v = match op {
                ArithOp::Add => a + b,
                ArithOp::Sub => a - b,
                ArithOp::Mul => a * b,
                ArithOp::Div if b == 0.0 => return None,
                ArithOp::Div => a / b,
            };
            v.is_finite().then_some(v)
        }
        _ => None,
    }
}

/// A value for `==` / `!=`.
#[derive(PartialEq)]
enum Scalar<'a> {
    Num(f64),
    Text(std::borrow::Cow<'a, str>),
    Bool(bool),
    State(WorkloadState),
}

fn scalar<'a>(n: &'a Node, obs: &Observation<'a>) -> Option<Scalar<'a>> {
    match n {
        Node::Text(s) => Some(Scalar::Text(s.as_str().into())),
        Node::State(s) => Some(Scalar::State(*s)),
        Node::Bool(b) => Some(Scalar::Bool(*b)),
        Node::Field(name) => match obs.value(name) {
            Value::Num(v) => v.is_finite().then_some(Scalar::Num(v)),
            Value::Bool(b) => Some(Scalar::Bool(b)),
            Value::Text(t) => Some(Scalar::Text(t)),
            Value::State(s) => Some(Scalar::State(s)),
            Value::Absent => None,
        },
        Node::Num(_) | Node::Neg(_) | Node::Arith(..) => num(n, obs).map(Scalar::Num),
        Node::Cmp(..) | Node::Not(_) | Node::And(..) | Node::Or(..) => match truth(n, obs) {
            Truth::True => Some(Scalar::Bool(true)),
            Truth::False => Some(Scalar::Bool(false)),
            Truth::Unknown => None,
        },
    }
}

fn truth(n: &Node, obs: &Observation<'_>) -> Truth {
    match n {
        Node::Bool(b) => Truth::of(*b),
        Node::Field(name) => match obs.value(name) {
            Value::Bool(b) => Truth::of(b),
            _ => Truth::Unknown,
        },
        Node::Not(a) => truth(a, obs).not(),
        Node::And(a, b) => match truth(a, obs) {
            Truth::False => Truth::False,
            ta => match (ta, truth(b, obs)) {
                (_, Truth::False) => Truth::False,
                (Truth::True, Truth::True) => Truth::True,
                _ => Truth::Unknown,
            },
        },
        Node::Or(a, b) => match truth(a, obs) {
            Truth::True => Truth::True,
            ta => match (ta, truth(b, obs)) {
                (_, Truth::True) => Truth::True,
                (Truth::False, Truth::False) => Truth::False,
                _ => Truth::Unknown,
            },
        },
        Node::Cmp(op, a, b) => match op {
            CmpOp::Eq | CmpOp::Ne => match (scalar(a, obs), scalar(b, obs)) {
                (Some(x), Some(y)) => Truth::of((x == y) == (*op == CmpOp::Eq)),
                _ => Truth::Unknown,
            },
            _ => match (num(a, obs), num(b, obs)) {
                (Some(x), Some(y)) => Truth::of(match op {
                    CmpOp::Lt => x < y,
                    CmpOp::Le => x <= y,
                    CmpOp::Gt => x > y,
                    CmpOp::Ge => x >= y,
                    CmpOp::Eq | CmpOp::Ne => unreachable!("handled above"),
                }),
                _ => Truth::Unknown,
            },
        },
        Node::Num(_) | Node::Text(_) | Node::State(_) | Node::Neg(_) | Node::Arith(..) => Truth::Unknown,
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    AndAnd,
    OrOr,
    Bang,
    Cmp(CmpOp),
    Plus,
    Minus,
    Star,
    Slash,
    LParen,
    RParen,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Num(v) => write!(f, "number {v}"),
            Tok::Str(s) => write!(f, "text {s:?}"),
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::AndAnd => f.write_str("`&&`"),
            Tok::OrOr => f.write_str("`||`"),
            Tok::Bang => f.write_str("`!`"),
            Tok::Cmp(op) => write!(f, "`{}`", op.as_str()),
            Tok::Plus => f.write_str("`+`"),
            Tok::Minus => f.write_str("`-`"),
            Tok::Star => f.write_str("`*`"),
            Tok::Slash => f.write_str("`/`"),
            Tok::LParen => f.write_str("`(`"),
            Tok::RParen => f.write_str("`)`"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Tok,
    pos: usize,
}

fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let pos = i;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let kind = match c {
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            '+' => Tok::Plus,
            '-' => Tok::Minus,
            '*' => Tok::Star,
            '/' => Tok::Slash,
            '&' if next == Some('&') => {
                i += 1;
                Tok::AndAnd
            }
            '&' => return Err(ParseError::new(pos, "`&` is not an operator: use `&&` for “and”")),
            '|' if next == Some('|') => {
                i += 1;
                Tok::OrOr
            }
            '|' => return Err(ParseError::new(pos, "`|` is not an operator: use `||` for “or”")),
            '=' if next == Some('=') => {
                i += 1;
                Tok::Cmp(CmpOp::Eq)
            }
            '=' => return Err(ParseError::new(pos, "`=` is not an operator: use `==` to compare")),
            '!' if next == Some('=') => {
                i += 1;
                Tok::Cmp(CmpOp::Ne)
            }
            '!' => Tok::Bang,
            '<' if next == Some('=') => {
                i += 1;
                Tok::Cmp(CmpOp::Le)
            }
            '<' => Tok::Cmp(CmpOp::Lt),
            '>' if next == Some('=') => {
                i += 1;
                Tok::Cmp(CmpOp::Ge)
            }
            '>' => Tok::Cmp(CmpOp::Gt),
            '"' | '\'' => {
                let quote = c;
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(ParseError::new(pos, "text not closed: add the closing quote")),
                        Some(&ch) if ch == quote => break,
                        Some('\\') if chars.get(i + 1).is_some() => {
                            s.push(chars[i + 1]);
                            i += 2;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                Tok::Str(s)
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.' || chars[i] == '_') {
                    i += 1;
                }
                if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                    let mut j = i + 1;
                    if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                        j += 1;
                    }
                    if j < chars.len() && chars[j].is_ascii_digit() {
                        i = j;
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                }
                if i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '%') {
                    let what = if chars[i] == '%' {
                        "write percentages as plain numbers (`80`, not `80%`)".to_string()
                    } else {
                        format!("unexpected `{}` right after a number", chars[i])
                    };
                    return Err(ParseError::new(i, what));
                }
                let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
                let v: f64 = text.parse().map_err(|_| ParseError::new(start, format!("`{text}` is not a number")))?;
                out.push(Token { kind: Tok::Num(v), pos: start });
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let kind = match word.as_str() {
                    "and" | "AND" => Tok::AndAnd,
                    "or" | "OR" => Tok::OrOr,
                    "not" | "NOT" => Tok::Bang,
                    _ => Tok::Ident(word),
                };
                out.push(Token { kind, pos: start });
                continue;
            }
            other => return Err(ParseError::new(pos, format!("unexpected character `{other}`"))),
        };
        out.push(Token { kind, pos });
        i += 1;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Parser (to an untyped tree with positions), then a checker (to typed nodes).

#[derive(Debug, Clone)]
struct Ast {
    pos: usize,
    kind: AstKind,
}

#[derive(Debug, Clone)]
enum AstKind {
    Num(f64),
    Str(String),
    Ident(String),
    Neg(Box<Ast>),
    Not(Box<Ast>),
    Arith(ArithOp, Box<Ast>, Box<Ast>),
    Cmp(CmpOp, Box<Ast>, Box<Ast>, usize),
    And(Box<Ast>, Box<Ast>),
    Or(Box<Ast>, Box<Ast>),
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn eat(&mut self, kind: &Tok) -> bool {
        if self.peek().is_some_and(|t| &t.kind == kind) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn deeper(&mut self, pos: usize) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::new(pos, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Ast, ParseError> {
        let mut lhs = self.and()?;
        while self.eat(&Tok::OrOr) {
            let rhs = self.and()?;
            lhs = Ast { pos: lhs.pos, kind: AstKind::Or(Box::new(lhs), Box::new(rhs)) };
        }
        Ok(lhs)
    }

    fn and(&mut self) -> Result<Ast, ParseError> {
        let mut lhs = self.not()?;
        while self.eat(&Tok::AndAnd) {
            let rhs = self.not()?;
            lhs = Ast { pos: lhs.pos, kind: AstKind::And(Box::new(lhs), Box::new(rhs)) };
        }
        Ok(lhs)
    }

    fn not(&mut self) -> Result<Ast, ParseError> {
        if let Some(t) = self.peek().filter(|t| t.kind == Tok::Bang) {
            let pos = t.pos;
            self.at += 1;
            self.deeper(pos)?;
            let inner = self.not()?;
            self.depth -= 1;
            return Ok(Ast { pos, kind: AstKind::Not(Box::new(inner)) });
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Ast, ParseError> {
        let lhs = self.sum()?;
        if let Some(Token { kind: Tok::Cmp(op), pos }) = self.peek().cloned() {
            self.at += 1;
            let rhs = self.sum()?;
            if let Some(Token { kind: Tok::Cmp(_), pos: p2 }) = self.peek() {
                return Err(ParseError::new(
                    *p2,
                    "comparisons do not chain: write `a < b && b < c` instead of `a < b < c`",
                ));
            }
            return Ok(Ast { pos: lhs.pos, kind: AstKind::Cmp(op, Box::new(lhs), Box::new(rhs), pos) });
        }
        Ok(lhs)
    }

    fn sum(&mut self) -> Result<Ast, ParseError> {
        let mut lhs = self.prod()?;
        loop {
            let op = match self.peek().map(|t| &t.kind) {
                Some(Tok::Plus) => ArithOp::Add,
                Some(Tok::Minus) => ArithOp::Sub,
                _ => return Ok(lhs),
            };
            self.at += 1;
            let rhs = self.prod()?;
            lhs = Ast { pos: lhs.pos, kind: AstKind::Arith(op, Box::new(lhs), Box::new(rhs)) };
        }
    }

    fn prod(&mut self) -> Result<Ast, ParseError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek().map(|t| &t.kind) {
                Some(Tok::Star) => ArithOp::Mul,
                Some(Tok::Slash) => ArithOp::Div,
                _ => return Ok(lhs),
            };
            self.at += 1;
            let rhs = self.unary()?;
            lhs = Ast { pos: lhs.pos, kind: AstKind::Arith(op, Box::new(lhs), Box::new(rhs)) };
        }
    }

    fn unary(&mut self) -> Result<Ast, ParseError> {
        if let Some(t) = self.peek().filter(|t| t.kind == Tok::Minus) {
            let pos = t.pos;
            self.at += 1;
            self.deeper(pos)?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Ast { pos, kind: AstKind::Neg(Box::new(inner)) });
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Ast, ParseError> {
        let end = self.end;
        let Some(t) = self.next() else {
            return Err(ParseError::new(end, "the condition ends too early: a value or field is missing"));
        };
        Ok(match t.kind {
            Tok::Num(v) => Ast { pos: t.pos, kind: AstKind::Num(v) },
            Tok::Str(s) => Ast { pos: t.pos, kind: AstKind::Str(s) },
            Tok::Ident(s) => Ast { pos: t.pos, kind: AstKind::Ident(s) },
            Tok::LParen => {
                self.deeper(t.pos)?;
                let inner = self.or()?;
                self.depth -= 1;
                match self.next() {
                    Some(Token { kind: Tok::RParen, .. }) => inner,
                    Some(other) => {
                        return Err(ParseError::new(other.pos, format!("expected `)` but found {}", other.kind)));
                    }
                    None => return Err(ParseError::new(t.pos, "`(` is never closed")),
                }
            }
            other => {
                return Err(ParseError::new(t.pos, format!("expected a field, number or `(` but found {other}")));
            }
        })
    }
}

fn check(a: &Ast) -> Result<(Node, FieldType), ParseError> {
    use FieldType as T;
    match &a.kind {
        AstKind::Num(v) => Ok((Node::Num(*v), T::Number)),
        AstKind::Str(s) => Ok((Node::Text(s.clone()), T::Text)),
        AstKind::Ident(name) => match name.as_str() {
            "true" => Ok((Node::Bool(true), T::Bool)),
            "false" => Ok((Node::Bool(false), T::Bool)),
            _ => match fields::field(name) {
                Some(def) => Ok((Node::Field(def.name), def.ty)),
                None => Err(unknown_field(a.pos, name)),
            },
        },
        AstKind::Neg(inner) => {
            let (n, ty) = check(inner)?;
            expect(inner, ty, T::Number, "`-`")?;
            Ok((Node::Neg(Box::new(n)), T::Number))
        }
        AstKind::Not(inner) => {
            let (n, ty) = check(inner)?;
            expect(inner, ty, T::Bool, "`!`")?;
            Ok((Node::Not(Box::new(n)), T::Bool))
        }
        AstKind::Arith(op, l, r) => {
            let (ln, lt) = check(l)?;
            let (rn, rt) = check(r)?;
            let name = match op {
                ArithOp::Add => "`+`",
                ArithOp::Sub => "`-`",
                ArithOp::Mul => "`*`",
                ArithOp::Div => "`/`",
            };
            expect(l, lt, T::Number, name)?;
            expect(r, rt, T::Number, name)?;
            Ok((Node::Arith(*op, Box::new(ln), Box::new(rn)), T::Number))
        }
        AstKind::And(l, r) | AstKind::Or(l, r) => {
            let name = if matches!(a.kind, AstKind::And(..)) { "`&&`" } else { "`||`" };
            let (ln, lt) = check(l)?;
            expect(l, lt, T::Bool, name)?;
            let (rn, rt) = check(r)?;
            expect(r, rt, T::Bool, name)?;
            let node = if matches!(a.kind, AstKind::And(..)) {
                Node::And(Box::new(ln), Box::new(rn))
            } else {
                Node::Or(Box::new(ln), Box::new(rn))
            };
            Ok((node, T::Bool))
        }
        AstKind::Cmp(op, l, r, op_pos) => {
            // Next to `state`, a bare word or a text is a state name.
            let (ln, lt) = check_operand(l, r)?;
            let (rn, rt) = check_operand(r, l)?;
            match op {
                CmpOp::Eq | CmpOp::Ne => {
                    if lt != rt {
                        let at = if lt == T::State { r.pos } else { *op_pos };
                        return Err(ParseError::new(
                            at,
                            format!("cannot compare a {} with a {} using `{}`", lt.name(), rt.name(), op.as_str()),
                        ));
                    }
                }
                _ => {
                    expect(l, lt, T::Number, op.as_str())?;
                    expect(r, rt, T::Number, op.as_str())?;
                }
            }
            Ok((Node::Cmp(*op, Box::new(ln), Box::new(rn)), T::Bool))
        }
    }
}

fn is_state_field(a: &Ast) -> bool {
    matches!(&a.kind, AstKind::Ident(n) if n == "state")
}

fn check_operand(a: &Ast, other: &Ast) -> Result<(Node, FieldType), ParseError> {
    if is_state_field(other) {
        let name = match &a.kind {
            AstKind::Ident(n) if fields::field(n).is_none() => Some(n),
            AstKind::Str(s) => Some(s),
            _ => None,
        };
        if let Some(name) = name {
            return match WorkloadState::parse(name) {
                Some(s) => Ok((Node::State(s), FieldType::State)),
                None => Err(ParseError::new(
                    a.pos,
                    format!(
                        "`{name}` is not a workload state; states are {}",
                        WorkloadState::ALL.map(|s| s.as_str()).join(", ")
                    ),
                )),
            };
        }
    }
    check(a)
}

fn expect(a: &Ast, got: FieldType, want: FieldType, op: &str) -> Result<(), ParseError> {
    if got == want {
        return Ok(());
    }
    let hint = match (got, want) {
        (FieldType::Number, FieldType::Bool) => ": compare it, e.g. `… >= 80`",
        (FieldType::State, _) => ": compare the state with `==`, e.g. `state == stalled`",
        _ => "",
    };
    Err(ParseError::new(a.pos, format!("{op} needs a {} here, but this is a {}{hint}", want.name(), got.name())))
}

fn unknown_field(pos: usize, name: &str) -> ParseError {
    let mut msg = format!("unknown field `{name}`");
    if let Some(s) = fields::closest(name) {
        msg.push_str(&format!(": did you mean `{s}`?"));
    } else if WorkloadState::parse(name).is_some() {
        msg.push_str(&format!(": a state name is compared with the state, e.g. `state == {name}`"));
    } else {
        msg.push_str(" (see the field list of GET /api/v1/alert-rules/fields)");
    }
    ParseError::new(pos, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;

    fn obs(sample: &Sample) -> Observation<'_> {
        Observation::of_sample(sample, WorkloadState::Active, 0.0, "node-1", Some("ml"))
    }

    fn s(util: Option<f64>, sm: Option<f64>) -> Sample {
        Sample { ts_ms: 1, uuid: "GPU-1".into(), gpu_util_pct: util, sm_active_pct: sm, ..Default::default() }
    }

    #[test]
    fn the_hollow_rule() {
        let c = Condition::parse("gpu_util_pct >= 80 && sm_active_pct < 30").unwrap();
        assert!(c.matches(&obs(&s(Some(100.0), Some(0.8)))));
        assert!(!c.matches(&obs(&s(Some(100.0), Some(97.0)))));
        assert!(!c.matches(&obs(&s(Some(60.0), Some(9.0)))));
        assert_eq!(c.fields(), ["gpu_util_pct", "sm_active_pct"]);
    }

    #[test]
    fn absent_is_unknown_not_zero() {
        let c = Condition::parse("gpu_util_pct >= 80 && sm_active_pct < 30").unwrap();
        assert_eq!(c.eval(&obs(&s(Some(100.0), None))), Truth::Unknown);
        let neg = Condition::parse("!(sm_active_pct >= 30)").unwrap();
        assert_eq!(neg.eval(&obs(&s(Some(100.0), None))), Truth::Unknown);
        assert!(!neg.matches(&obs(&s(Some(100.0), None))));
        // Kleene: unknown || true = true, unknown && false = false.
        let or = Condition::parse("sm_active_pct < 30 || gpu_util_pct > 50").unwrap();
        assert!(or.matches(&obs(&s(Some(100.0), None))));
        let and = Condition::parse("sm_active_pct < 30 && gpu_util_pct > 500").unwrap();
        assert_eq!(and.eval(&obs(&s(Some(100.0), None))), Truth::False);
        // Division by zero is unknown.
        let div = Condition::parse("sm_active_pct / gpu_util_pct < 0.3").unwrap();
        assert_eq!(div.eval(&obs(&s(Some(0.0), Some(0.0)))), Truth::Unknown);
        assert!(div.matches(&obs(&s(Some(60.0), Some(9.0)))));
    }

    #[test]
    fn precedence_and_arithmetic() {
        let c = Condition::parse("gpu_util_pct - sm_active_pct * 2 > 10 || false && true").unwrap();
        assert!(c.matches(&obs(&s(Some(100.0), Some(40.0)))));
        assert!(!c.matches(&obs(&s(Some(100.0), Some(46.0)))));
        let neg = Condition::parse("-gpu_util_pct < -50").unwrap();
        assert!(neg.matches(&obs(&s(Some(60.0), None))));
        let words = Condition::parse("gpu_util_pct >= 50 and not (efficiency >= 30) or false").unwrap();
        assert!(words.matches(&obs(&s(Some(60.0), Some(9.0)))));
        assert!(Condition::parse("1_000 > 2.5e2 && .5 < 1").unwrap().matches(&obs(&s(None, None))));
    }

    #[test]
    fn state_text_and_bool_fields() {
        let sample = s(Some(100.0), Some(0.7));
        let o = Observation::of_sample(&sample, WorkloadState::Stalled, 42.0, "node-1", Some("ml"));
        assert!(Condition::parse("state == stalled && duration_in_state_s >= 40").unwrap().matches(&o));
        assert!(Condition::parse("state == \"stalled\"").unwrap().matches(&o));
        assert!(Condition::parse("stalled == state").unwrap().matches(&o));
        assert!(Condition::parse("state != idle_held").unwrap().matches(&o));
        assert!(Condition::parse("host == 'node-1' && team == \"ml\"").unwrap().matches(&o));
        assert!(!Condition::parse("team != \"ml\"").unwrap().matches(&o));
        let t = Sample { throttle_reasons: Some(0x40), ..sample.clone() };
        let o = obs(&t);
        assert!(Condition::parse("thermal_throttle || hw_slowdown").unwrap().matches(&o));
        assert!(!Condition::parse("power_throttle").unwrap().matches(&o));
        assert!(Condition::parse("thermal_throttle == true").unwrap().matches(&o));
        let none = s(None, None);
        assert_eq!(Condition::parse("thermal_throttle").unwrap().eval(&obs(&none)), Truth::Unknown);
    }

    fn err(src: &str) -> ParseError {
        Condition::parse(src).expect_err(src)
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = err("gpu_util_pct >= 80 && sm_actve_pct < 30");
        assert_eq!(e.position, 22);
        assert!(e.message.contains("unknown field `sm_actve_pct`") && e.message.contains("sm_active_pct"), "{e}");
        assert_eq!(
            e.pointer("gpu_util_pct >= 80 && sm_actve_pct < 30").lines().nth(1),
            Some(&*format!("{}^", " ".repeat(22)))
        );
        assert_eq!(err("gpu_util_pct >= 80 &&").position, 21);
        assert_eq!(err("gpu_util_pct = 80").position, 13);
        assert_eq!(err("(gpu_util_pct > 1").position, 0);
        assert_eq!(err("gpu_util_pct > 1)").position, 16);
        assert_eq!(err("gpu_util_pct > 1 sm_active_pct < 2").position, 17);
        assert_eq!(err("gpu_util_pct >= 80%").position, 18);
        assert_eq!(err("state == busy").position, 9);
        assert!(err("state == busy").message.contains("idle_held"));
        assert_eq!(err("gpu_util_pct && true").position, 0);
        assert_eq!(err("gpu_util_pct").position, 0);
        assert_eq!(err("state > 3").position, 0);
        assert_eq!(err("host == 3").position, 5);
        assert_eq!(err("1 < 2 < 3").position, 6);
        assert_eq!(err("a # b").position, 2);
        assert_eq!(err("gpu_util_pct > 1 # b").position, 17);
        assert_eq!(err("host == \"x").position, 8);
        assert_eq!(err("").position, 0);
        assert_eq!(err("   ").position, 0);
        assert_eq!(err("héllo > 1").position, 1, "positions count characters, not bytes");
        let deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
        assert!(err(&deep).message.contains("nested"));
        assert!(err(&"1".repeat(3000)).message.contains("longer"));
    }
}
