//! Kubelet expressions: `maxPods`, `kubeReserved` and `systemReserved`
//! written as a formula of the instance type, evaluated per type (Karpenter's
//! `NodeClassCEL` feature gate; nodewright's Settings `featureGates.nodeClassCEL`).
//!
//! The language is the part of CEL those fields are documented with:
//! integer and double literals, the variables below, `+ - * / %`, unary `-`,
//! comparisons, `&& || !`, `cond ? a : b`, parentheses, and the functions
//! `min(a, b)`, `max(a, b)`, `int(x)` and `double(x)`. As in CEL, ints are
//! 64-bit and an overflow or a division by zero is an evaluation error, and
//! int and double do not mix in arithmetic (`vcpus * 1.5` is refused when the
//! expression is read; `double(vcpus) * 1.5` is fine); `min` and `max` take
//! either. An expression must give a number: an int, or a double, truncated.
//!
//! Variables: `vcpus`, `memory_mib`, `default_enis` (the type's ENIs),
//! `ips_per_eni` (IPv4 addresses per ENI), `max_pods` (the pods the node
//! runs: the `maxPods` expression's result when there is one) and
//! `instance_type` (its name, a string).
//!
//! A small evaluator rather than a CEL crate: the documented subset is a
//! dozen rules, it is checked when the configuration is read (types
//! included), and it adds no dependency to every function's build.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The values an expression sees for one instance type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vars {
    pub vcpus: i64,
    pub memory_mib: i64,
    pub default_enis: i64,
    pub ips_per_eni: i64,
    pub max_pods: i64,
    pub instance_type: String,
}

/// A parsed and type-checked expression; equal when its text is.
#[derive(Clone)]
pub struct Expression {
    source: String,
    root: Arc<Node>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.source)
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}
impl Eq for Expression {}

impl Serialize for Expression {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for Expression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Expression::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Int,
    Double,
    Bool,
    Str,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Type::Int => "int",
            Type::Double => "double",
            Type::Bool => "bool",
            Type::Str => "string",
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(String),
}

#[derive(Debug)]
enum Node {
    Int(i64),
    Double(f64),
    Str(String),
    Var(&'static str),
    Neg(Box<Node>),
    Not(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Call(&'static str, Vec<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
            Op::Div => "/",
            Op::Rem => "%",
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::And => "&&",
            Op::Or => "||",
        }
    }
}

const VARIABLES: [(&str, Type); 6] = [
    ("vcpus", Type::Int),
    ("memory_mib", Type::Int),
    ("default_enis", Type::Int),
    ("ips_per_eni", Type::Int),
    ("max_pods", Type::Int),
    ("instance_type", Type::Str),
];
const FUNCTIONS: [&str; 4] = ["min", "max", "int", "double"];

/// Why an expression is refused when the configuration is read, or gives no
/// number for one instance type. The text is CEL's own wording where CEL has
/// one (`no matching overload for …`, `division by zero`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpressionError {
    /// Not a sentence of the language: a character, a token or an end out
    /// of place, an unknown name.
    #[error("{0}")]
    Syntax(String),
    /// Well formed, but its types do not fit (`vcpus * 1.5`, a bool where a
    /// number goes, an expression that gives no number).
    #[error("{0}")]
    Type(String),
    /// The values of one instance type make it fail: an overflow, a
    /// division by zero, a result that is not a 64-bit integer.
    #[error("{0}")]
    Eval(String),
}

impl Expression {
    /// Reads and type-checks `source`; why when it is not an expression
    /// giving a number (a [`ExpressionError::Syntax`] or `Type` error).
    pub fn parse(source: &str) -> Result<Expression, ExpressionError> {
        let tokens = lex(source)?;
        let mut p = Parser { tokens, at: 0 };
        let root = p.cond()?;
        if let Some(t) = p.tokens.get(p.at) {
            return Err(ExpressionError::Syntax(format!(
                "unexpected {t} after the expression"
            )));
        }
        match check(&root)? {
            Type::Int | Type::Double => Ok(Expression {
                source: source.to_owned(),
                root: Arc::new(root),
            }),
            t => Err(ExpressionError::Type(format!(
                "the expression gives a {t}, not a number"
            ))),
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The value for one instance type: an int, or a double truncated
    /// towards zero; an overflow, a division by zero or a result that is not
    /// finite is an error.
    pub fn eval(&self, vars: &Vars) -> Result<i64, ExpressionError> {
        match eval(&self.root, vars)? {
            Value::Int(i) => Ok(i),
            Value::Double(d) if d.is_finite() => {
                if d >= i64::MIN as f64 && d < i64::MAX as f64 {
                    Ok(d.trunc() as i64)
                } else {
                    Err(ExpressionError::Eval(format!(
                        "{d} does not fit a 64-bit integer"
                    )))
                }
            }
            Value::Double(d) => Err(ExpressionError::Eval(format!(
                "the result is not a finite number ({d})"
            ))),
            // `parse` refused any other type.
            other => Err(ExpressionError::Eval(format!(
                "the result {other:?} is not a number"
            ))),
        }
    }
}

// ------------------------------------------------------------------ lexer

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Int(i64),
    Double(f64),
    Str(String),
    Ident(String),
    Sym(&'static str),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Int(i) => write!(f, "{i}"),
            Token::Double(d) => write!(f, "{d}"),
            Token::Str(s) => write!(f, "{s:?}"),
            Token::Ident(s) => write!(f, "{s:?}"),
            Token::Sym(s) => write!(f, "{s:?}"),
        }
    }
}

fn lex(src: &str) -> Result<Vec<Token>, ExpressionError> {
    const SYMBOLS: [&str; 21] = [
        "==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "!", "(", ")", ",",
        "?", ":", "[", "]",
    ];
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let mut double = false;
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                double = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                double = true;
                i += 1;
                if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
                    i += 1;
                }
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let text = &src[start..i];
            if i < bytes.len() && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
                return Err(ExpressionError::Syntax(format!(
                    "{:?} is not a number",
                    &src[start..=i]
                )));
            }
            out.push(if double {
                Token::Double(
                    text.parse().map_err(|_| {
                        ExpressionError::Syntax(format!("{text:?} is not a number"))
                    })?,
                )
            } else {
                Token::Int(text.parse().map_err(|_| {
                    ExpressionError::Syntax(format!("{text} does not fit a 64-bit integer"))
                })?)
            });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token::Ident(src[start..i].to_owned()));
        } else if c == b'"' || c == b'\'' {
            let end = src[i + 1..]
                .find(c as char)
                .ok_or_else(|| ExpressionError::Syntax("a string is not closed".to_owned()))?;
            out.push(Token::Str(src[i + 1..i + 1 + end].to_owned()));
            i += end + 2;
        } else if let Some(s) = SYMBOLS.iter().find(|s| src[i..].starts_with(**s)) {
            out.push(Token::Sym(s));
            i += s.len();
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(ExpressionError::Syntax(format!(
                "unexpected character {ch:?}"
            )));
        }
    }
    if out.is_empty() {
        return Err(ExpressionError::Syntax("the expression is empty".into()));
    }
    Ok(out)
}

// ------------------------------------------------------------------ parser

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek_sym(&self) -> Option<&'static str> {
        match self.tokens.get(self.at) {
            Some(Token::Sym(s)) => Some(s),
            _ => None,
        }
    }

    fn eat(&mut self, sym: &str) -> bool {
        if self.peek_sym() == Some(sym) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, sym: &str) -> Result<(), ExpressionError> {
        if self.eat(sym) {
            return Ok(());
        }
        Err(match self.tokens.get(self.at) {
            Some(t) => ExpressionError::Syntax(format!("expected {sym:?}, found {t}")),
            None => ExpressionError::Syntax(format!("expected {sym:?} at the end")),
        })
    }

    fn cond(&mut self) -> Result<Node, ExpressionError> {
        let c = self.or()?;
        if self.eat("?") {
            let a = self.cond()?;
            self.expect(":")?;
            let b = self.cond()?;
            return Ok(Node::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }

    fn binary(
        &mut self,
        ops: &[(&str, Op)],
        next: fn(&mut Parser) -> Result<Node, ExpressionError>,
        chain: bool,
    ) -> Result<Node, ExpressionError> {
        let mut left = next(self)?;
        loop {
            let Some(op) = ops
                .iter()
                .find(|(s, _)| self.peek_sym() == Some(*s))
                .map(|(_, op)| *op)
            else {
                return Ok(left);
            };
            self.at += 1;
            let right = next(self)?;
            left = Node::Binary(op, Box::new(left), Box::new(right));
            if !chain {
                return Ok(left);
            }
        }
    }

    fn or(&mut self) -> Result<Node, ExpressionError> {
        self.binary(&[("||", Op::Or)], Parser::and, true)
    }

    fn and(&mut self) -> Result<Node, ExpressionError> {
        self.binary(&[("&&", Op::And)], Parser::rel, true)
    }

    fn rel(&mut self) -> Result<Node, ExpressionError> {
        self.binary(
            &[
                ("==", Op::Eq),
                ("!=", Op::Ne),
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("<", Op::Lt),
                (">", Op::Gt),
            ],
            Parser::add,
            false,
        )
    }

    fn add(&mut self) -> Result<Node, ExpressionError> {
        self.binary(&[("+", Op::Add), ("-", Op::Sub)], Parser::mul, true)
    }

    fn mul(&mut self) -> Result<Node, ExpressionError> {
        self.binary(
            &[("*", Op::Mul), ("/", Op::Div), ("%", Op::Rem)],
            Parser::unary,
            true,
        )
    }

    fn unary(&mut self) -> Result<Node, ExpressionError> {
        if self.eat("-") {
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        if self.eat("!") {
            return Ok(Node::Not(Box::new(self.unary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Node, ExpressionError> {
        let Some(t) = self.tokens.get(self.at).cloned() else {
            return Err(ExpressionError::Syntax(
                "the expression ends too early".into(),
            ));
        };
        self.at += 1;
        match t {
            Token::Int(i) => Ok(Node::Int(i)),
            Token::Double(d) => Ok(Node::Double(d)),
            Token::Str(s) => Ok(Node::Str(s)),
            Token::Sym("(") => {
                let e = self.cond()?;
                self.expect(")")?;
                Ok(e)
            }
            Token::Ident(name) if self.eat("(") => {
                let Some(f) = FUNCTIONS.iter().find(|f| **f == name) else {
                    return Err(ExpressionError::Syntax(format!(
                        "unknown function {name:?} (min, max, int, double)"
                    )));
                };
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        args.push(self.cond()?);
                        if self.eat(")") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Node::Call(f, args))
            }
            Token::Ident(name) => match name.as_str() {
                "true" => Ok(Node::Binary(
                    Op::Eq,
                    Box::new(Node::Int(0)),
                    Box::new(Node::Int(0)),
                )),
                "false" => Ok(Node::Binary(
                    Op::Ne,
                    Box::new(Node::Int(0)),
                    Box::new(Node::Int(0)),
                )),
                _ => VARIABLES
                    .iter()
                    .find(|(v, _)| *v == name)
                    .map(|(v, _)| Node::Var(v))
                    .ok_or_else(|| {
                        ExpressionError::Syntax(format!(
                            "undeclared reference to {name:?} (vcpus, memory_mib, default_enis, ips_per_eni, max_pods, instance_type)"
                        ))
                    }),
            },
            t => Err(ExpressionError::Syntax(format!("unexpected {t}"))),
        }
    }
}

// ------------------------------------------------------------------ types

fn check(n: &Node) -> Result<Type, ExpressionError> {
    Ok(match n {
        Node::Int(_) => Type::Int,
        Node::Double(_) => Type::Double,
        Node::Str(_) => Type::Str,
        Node::Var(v) => VARIABLES
            .iter()
            .find(|(name, _)| name == v)
            .map_or(Type::Int, |(_, t)| *t),
        Node::Neg(a) => match check(a)? {
            t @ (Type::Int | Type::Double) => t,
            t => {
                return Err(ExpressionError::Type(format!(
                    "no matching overload for '-' on {t}"
                )));
            }
        },
        Node::Not(a) => match check(a)? {
            Type::Bool => Type::Bool,
            t => {
                return Err(ExpressionError::Type(format!(
                    "no matching overload for '!' on {t}"
                )));
            }
        },
        Node::Binary(op, a, b) => {
            let (ta, tb) = (check(a)?, check(b)?);
            let mismatch = || {
                ExpressionError::Type(format!(
                    "no matching overload for '{}' on {ta} and {tb}",
                    op.symbol()
                ))
            };
            match op {
                Op::Add | Op::Sub | Op::Mul | Op::Div => match (ta, tb) {
                    (Type::Int, Type::Int) => Type::Int,
                    (Type::Double, Type::Double) => Type::Double,
                    _ => return Err(mismatch()),
                },
                Op::Rem => match (ta, tb) {
                    (Type::Int, Type::Int) => Type::Int,
                    _ => return Err(mismatch()),
                },
                Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge => {
                    if ta != tb || (ta == Type::Bool && !matches!(op, Op::Eq | Op::Ne)) {
                        return Err(mismatch());
                    }
                    Type::Bool
                }
                Op::And | Op::Or => match (ta, tb) {
                    (Type::Bool, Type::Bool) => Type::Bool,
                    _ => return Err(mismatch()),
                },
            }
        }
        Node::Cond(c, a, b) => {
            let (tc, ta, tb) = (check(c)?, check(a)?, check(b)?);
            if tc != Type::Bool {
                return Err(ExpressionError::Type(format!(
                    "the condition of '?' is a {tc}, not a bool"
                )));
            }
            if ta != tb {
                return Err(ExpressionError::Type(format!(
                    "the branches of '?' differ: {ta} and {tb}"
                )));
            }
            ta
        }
        Node::Call(f, args) => {
            let types = args.iter().map(check).collect::<Result<Vec<_>, _>>()?;
            let number = |t: &Type| matches!(t, Type::Int | Type::Double);
            match (*f, types.as_slice()) {
                ("min" | "max", [a, b]) if number(a) && number(b) => {
                    if *a == Type::Int && *b == Type::Int {
                        Type::Int
                    } else {
                        Type::Double
                    }
                }
                ("int", [a]) if number(a) => Type::Int,
                ("double", [a]) if number(a) => Type::Double,
                _ => {
                    let list: Vec<String> = types.iter().map(Type::to_string).collect();
                    return Err(ExpressionError::Type(format!(
                        "no matching overload for {f}({})",
                        list.join(", ")
                    )));
                }
            }
        }
    })
}

// ------------------------------------------------------------------ evaluation

fn overflow(op: &str) -> ExpressionError {
    ExpressionError::Eval(format!("integer overflow in '{op}'"))
}

fn eval(n: &Node, v: &Vars) -> Result<Value, ExpressionError> {
    Ok(match n {
        Node::Int(i) => Value::Int(*i),
        Node::Double(d) => Value::Double(*d),
        Node::Str(s) => Value::Str(s.clone()),
        Node::Var(name) => match *name {
            "vcpus" => Value::Int(v.vcpus),
            "memory_mib" => Value::Int(v.memory_mib),
            "default_enis" => Value::Int(v.default_enis),
            "ips_per_eni" => Value::Int(v.ips_per_eni),
            "max_pods" => Value::Int(v.max_pods),
            _ => Value::Str(v.instance_type.clone()),
        },
        Node::Neg(a) => match eval(a, v)? {
            Value::Int(i) => Value::Int(i.checked_neg().ok_or_else(|| overflow("-"))?),
            Value::Double(d) => Value::Double(-d),
            other => {
                return Err(ExpressionError::Eval(format!(
                    "no matching overload for '-' on {other:?}"
                )));
            }
        },
        Node::Not(a) => match eval(a, v)? {
            Value::Bool(b) => Value::Bool(!b),
            other => {
                return Err(ExpressionError::Eval(format!(
                    "no matching overload for '!' on {other:?}"
                )));
            }
        },
        Node::Binary(Op::And, a, b) => Value::Bool(truth(eval(a, v)?)? && truth(eval(b, v)?)?),
        Node::Binary(Op::Or, a, b) => Value::Bool(truth(eval(a, v)?)? || truth(eval(b, v)?)?),
        Node::Binary(op, a, b) => binary(*op, eval(a, v)?, eval(b, v)?)?,
        Node::Cond(c, a, b) => {
            if truth(eval(c, v)?)? {
                eval(a, v)?
            } else {
                eval(b, v)?
            }
        }
        Node::Call(f, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, v))
                .collect::<Result<Vec<_>, _>>()?;
            call(f, vals)?
        }
    })
}

fn truth(v: Value) -> Result<bool, ExpressionError> {
    match v {
        Value::Bool(b) => Ok(b),
        other => Err(ExpressionError::Eval(format!("{other:?} is not a bool"))),
    }
}

fn binary(op: Op, a: Value, b: Value) -> Result<Value, ExpressionError> {
    use Value::{Bool, Double, Int, Str};
    let s = op.symbol();
    Ok(match (op, a, b) {
        (Op::Add, Int(x), Int(y)) => Int(x.checked_add(y).ok_or_else(|| overflow(s))?),
        (Op::Sub, Int(x), Int(y)) => Int(x.checked_sub(y).ok_or_else(|| overflow(s))?),
        (Op::Mul, Int(x), Int(y)) => Int(x.checked_mul(y).ok_or_else(|| overflow(s))?),
        (Op::Div | Op::Rem, Int(_), Int(0)) => {
            return Err(if op == Op::Div {
                ExpressionError::Eval("division by zero".into())
            } else {
                ExpressionError::Eval("modulus by zero".into())
            });
        }
        (Op::Div, Int(x), Int(y)) => Int(x.checked_div(y).ok_or_else(|| overflow(s))?),
        (Op::Rem, Int(x), Int(y)) => Int(x.checked_rem(y).ok_or_else(|| overflow(s))?),
        (Op::Add, Double(x), Double(y)) => Double(x + y),
        (Op::Sub, Double(x), Double(y)) => Double(x - y),
        (Op::Mul, Double(x), Double(y)) => Double(x * y),
        (Op::Div, Double(x), Double(y)) => Double(x / y),
        (op, Int(x), Int(y)) => Bool(compare(op, x.cmp(&y))),
        (op, Double(x), Double(y)) => match x.partial_cmp(&y) {
            Some(o) => Bool(compare(op, o)),
            None => Bool(op == Op::Ne),
        },
        (op, Str(x), Str(y)) => Bool(compare(op, x.cmp(&y))),
        (op @ (Op::Eq | Op::Ne), Bool(x), Bool(y)) => Bool((x == y) == (op == Op::Eq)),
        (_, a, b) => {
            return Err(ExpressionError::Eval(format!(
                "no matching overload for '{s}' on {a:?} and {b:?}"
            )));
        }
    })
}

fn compare(op: Op, o: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    match op {
        Op::Eq => o == Equal,
        Op::Ne => o != Equal,
        Op::Lt => o == Less,
        Op::Le => o != Greater,
        Op::Gt => o == Greater,
        Op::Ge => o != Less,
        _ => false,
    }
}

fn as_double(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Double(d) => *d,
        _ => f64::NAN,
    }
}

fn call(f: &str, args: Vec<Value>) -> Result<Value, ExpressionError> {
    use Value::{Double, Int};
    Ok(match (f, args.as_slice()) {
        ("min", [Int(a), Int(b)]) => Int(*a.min(b)),
        ("max", [Int(a), Int(b)]) => Int(*a.max(b)),
        ("min", [a, b]) => Double(as_double(a).min(as_double(b))),
        ("max", [a, b]) => Double(as_double(a).max(as_double(b))),
        ("int", [Int(a)]) => Int(*a),
        ("int", [Double(d)]) => {
            if d.is_finite() && *d >= i64::MIN as f64 && *d < i64::MAX as f64 {
                Int(d.trunc() as i64)
            } else {
                return Err(ExpressionError::Eval(format!("int({d}) is out of range")));
            }
        }
        ("double", [a]) => Double(as_double(a)),
        _ => {
            return Err(ExpressionError::Eval(format!(
                "no matching overload for {f}({args:?})"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m5_large() -> Vars {
        Vars {
            vcpus: 2,
            memory_mib: 8192,
            default_enis: 3,
            ips_per_eni: 10,
            max_pods: 29,
            instance_type: "m5.large".into(),
        }
    }

    fn value(src: &str) -> Result<i64, String> {
        Expression::parse(src)
            .and_then(|e| e.eval(&m5_large()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn documented_formulas_evaluate_per_type() {
        assert_eq!(value("min(110, vcpus * 8)"), Ok(16));
        assert_eq!(
            value("((default_enis - 1) * (ips_per_eni - 1)) + 2"),
            Ok(20)
        );
        assert_eq!(
            value("min(250, ((default_enis - 1) * (ips_per_eni - 1)) * 16 + 2)"),
            Ok(250)
        );
        assert_eq!(value("max(60, vcpus * 30)"), Ok(60));
        assert_eq!(value("11 * max_pods + 255"), Ok(574));
        assert_eq!(value("memory_mib / 100"), Ok(81));
        assert_eq!(value("max(100, memory_mib / 64)"), Ok(128));
        assert_eq!(value("-3 + 10 % 4"), Ok(-1));
        assert_eq!(value("double(memory_mib) * 0.015"), Ok(122));
        assert_eq!(value("max(1, 2.5)"), Ok(2));
        assert_eq!(
            value("instance_type == 'm5.large' && vcpus >= 2 ? 7 : 9"),
            Ok(7)
        );
        assert_eq!(value("!(vcpus > 4) ? 1 : 0"), Ok(1));
    }

    #[test]
    fn reading_refuses_what_cel_would_not_compile() {
        for (src, why) in [
            ("", "empty"),
            ("vcpus *", "ends too early"),
            ("cores * 2", "undeclared reference to \"cores\""),
            (
                "vcpus * 1.5",
                "no matching overload for '*' on int and double",
            ),
            ("floor(vcpus)", "unknown function"),
            ("instance_type", "gives a string"),
            ("vcpus > 2", "gives a bool"),
            ("vcpus ? 1 : 2", "condition of '?' is a int"),
            ("(vcpus", "expected \")\""),
            ("2 $ 3", "unexpected character"),
            ("max(1)", "no matching overload for max(int)"),
            ("99999999999999999999", "does not fit"),
            ("1 2", "unexpected 2"),
        ] {
            let e = Expression::parse(src).expect_err(src);
            assert!(e.to_string().contains(why), "{src:?}: {e}");
        }
    }

    #[test]
    fn errors_say_whether_the_text_its_types_or_a_types_values_failed() {
        for (src, syntax) in [("2 $ 3", true), ("(vcpus", true), ("vcpus * 1.5", false)] {
            match Expression::parse(src) {
                Err(ExpressionError::Syntax(_)) => assert!(syntax, "{src:?}"),
                Err(ExpressionError::Type(_)) => assert!(!syntax, "{src:?}"),
                other => panic!("{src:?}: {other:?}"),
            }
        }
        let e = Expression::parse("1 / (vcpus - vcpus)").expect("reads");
        assert_eq!(
            e.eval(&m5_large()),
            Err(ExpressionError::Eval("division by zero".into()))
        );
    }

    #[test]
    fn evaluation_errors_are_errors_never_a_number() {
        assert_eq!(value("1 / (vcpus - vcpus)"), Err("division by zero".into()));
        assert_eq!(value("1 % (vcpus - vcpus)"), Err("modulus by zero".into()));
        assert!(
            value("9223372036854775807 + vcpus")
                .unwrap_err()
                .contains("overflow")
        );
        assert!(
            value("-9223372036854775807 - vcpus")
                .unwrap_err()
                .contains("overflow")
        );
        assert!(
            value("double(vcpus) / 0.0")
                .unwrap_err()
                .contains("not a finite")
        );
        assert!(value("int(1e300)").unwrap_err().contains("out of range"));
    }

    #[test]
    fn equal_when_the_text_is_and_serialized_as_it() {
        let a = Expression::parse("vcpus * 8").unwrap();
        assert_eq!(a, Expression::parse("vcpus * 8").unwrap());
        assert_ne!(a, Expression::parse("vcpus*8").unwrap());
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, "\"vcpus * 8\"");
        assert_eq!(serde_json::from_str::<Expression>(&json).unwrap(), a);
        assert!(serde_json::from_str::<Expression>("\"vcpus *\"").is_err());
    }
}
