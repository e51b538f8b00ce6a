//! The shape of each configuration document, checked on the raw value
//! before it is read into its typed spec, so that every mistake of a
//! document is reported at once: an unknown field, a value of the wrong
//! type, a missing required field and a duplicate key each become an error
//! naming its path, the offending part is taken out, and the rest is read
//! and validated as usual — one typo never hides the other errors (the API
//! server's strict field validation, which `kubectl apply` uses, refuses
//! unknown fields the same way).

use serde_json::{Map, Value};

/// What a value must look like.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A string.
    Str,
    /// A string, or a number or boolean kept as its text (`pid: 100`).
    Text,
    Bool,
    /// An integer.
    Int,
    /// An integer that fits 32 bits.
    Int32,
    /// Any number.
    Number,
    /// A Go duration string (`30s`, `1m30s`, `300ms`), as the kubelet reads them.
    GoDuration,
    /// A number or a string (quantities, `maxPods` that may be an expression).
    IntOrString,
    /// Anything (checked by the typed validation, or kept as written).
    Any,
    List(&'static Kind),
    /// String keys to values of a kind.
    Map(&'static Kind),
    Object(&'static [Field]),
}

/// One field of an object.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
}

/// An optional field.
pub const fn opt(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

/// A required field.
pub const fn req(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

/// `(field path, reason)` of each problem found.
pub type Problems = Vec<(String, String)>;

/// Checks `value` (at `path`) against `kind`, taking out what does not fit
/// (unknown fields, values of the wrong type) so the rest reads into its
/// typed form; returns every problem found.
pub fn check(value: &mut Value, kind: &Kind, path: &str) -> Problems {
    let mut out = Vec::new();
    if !walk(value, kind, path, &mut out) {
        *value = neutral(kind);
    }
    out
}

/// Whether a validation error at `field` is already said by one of the
/// schema's `problems` (the same field, or a part of one it took out).
pub fn already_reported(field: &str, problems: &Problems) -> bool {
    problems.iter().any(|(p, _)| {
        field == p
            || (field.starts_with(p.as_str())
                && matches!(field.as_bytes().get(p.len()), Some(b'.' | b'[')))
    })
}

/// A value of `kind` that reads as "nothing written", put in place of one
/// of the wrong type so indices of a list do not shift.
fn neutral(kind: &Kind) -> Value {
    match kind {
        Kind::Str | Kind::Text | Kind::GoDuration => Value::String(String::new()),
        Kind::Bool => Value::Bool(false),
        Kind::Int | Kind::Int32 | Kind::Number | Kind::IntOrString => Value::from(0),
        Kind::Any => Value::Null,
        Kind::List(_) => Value::Array(Vec::new()),
        Kind::Map(_) | Kind::Object(_) => Value::Object(Map::new()),
    }
}

fn type_name(kind: &Kind) -> &'static str {
    match kind {
        Kind::Str => "a string",
        Kind::Text => "a string",
        Kind::Bool => "true or false",
        Kind::Int => "an integer",
        Kind::Int32 => "a 32-bit integer",
        Kind::Number => "a number",
        Kind::GoDuration => "a duration (like 30s, 1m30s or 300ms)",
        Kind::IntOrString => "a number or a string",
        Kind::Any => "a value",
        Kind::List(_) => "a list",
        Kind::Map(_) | Kind::Object(_) => "an object",
    }
}

fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Checks one value; `false` when its type is wrong (the caller replaces it).
fn walk(value: &mut Value, kind: &Kind, path: &str, out: &mut Problems) -> bool {
    let wrong = |out: &mut Problems, v: &Value| {
        out.push((
            path.to_owned(),
            format!("expected {}, got {}", type_name(kind), shown(v)),
        ));
        false
    };
    match kind {
        Kind::Any => true,
        Kind::Str => value.is_string() || wrong(out, value),
        Kind::Text => match value {
            Value::String(_) => true,
            Value::Number(_) | Value::Bool(_) => {
                let text = value.to_string();
                *value = Value::String(text);
                true
            }
            other => wrong(out, other),
        },
        Kind::Bool => value.is_boolean() || wrong(out, value),
        Kind::Int => {
            value.is_i64() || value.is_u64() && value.as_i64().is_some() || wrong(out, value)
        }
        Kind::Int32 => {
            value.as_i64().is_some_and(|v| i32::try_from(v).is_ok()) || wrong(out, value)
        }
        Kind::Number => value.is_number() || wrong(out, value),
        Kind::GoDuration => {
            value
                .as_str()
                .and_then(super::syntax::go_duration)
                .is_some()
                || wrong(out, value)
        }
        Kind::IntOrString => value.is_number() || value.is_string() || wrong(out, value),
        Kind::List(item) => {
            let Some(items) = value.as_array_mut() else {
                return wrong(out, value);
            };
            for (i, v) in items.iter_mut().enumerate() {
                let p = format!("{path}[{i}]");
                if v.is_null() {
                    out.push((p, format!("expected {}, got null", type_name(item))));
                    *v = neutral(item);
                } else if !walk(v, item, &p, out) {
                    *v = neutral(item);
                }
            }
            true
        }
        Kind::Map(item) => {
            let Some(map) = value.as_object_mut() else {
                return wrong(out, value);
            };
            let mut drop = Vec::new();
            for (k, v) in map.iter_mut() {
                let p = format!("{path}[{k}]");
                if !walk(v, item, &p, out) {
                    drop.push(k.clone());
                }
            }
            for k in drop {
                map.remove(&k);
            }
            true
        }
        Kind::Object(fields) => {
            let Some(map) = value.as_object_mut() else {
                return wrong(out, value);
            };
            let mut drop = Vec::new();
            let mut mistyped = Vec::new();
            for (k, v) in map.iter_mut() {
                let p = format!("{path}.{k}");
                let Some(f) = fields.iter().find(|f| f.name == k) else {
                    out.push((p, unknown_field(k, fields)));
                    drop.push(k.clone());
                    continue;
                };
                // null is "not written", as the API server reads it.
                if v.is_null() {
                    drop.push(k.clone());
                    continue;
                }
                if !walk(v, &f.kind, &p, out) {
                    drop.push(k.clone());
                    mistyped.push(k.clone());
                }
            }
            for k in drop {
                map.remove(&k);
            }
            for f in fields.iter().filter(|f| f.required) {
                if !map.contains_key(f.name) && !mistyped.iter().any(|m| m == f.name) {
                    out.push((format!("{path}.{}", f.name), "required".into()));
                }
            }
            true
        }
    }
}

fn unknown_field(name: &str, fields: &[Field]) -> String {
    let near = fields
        .iter()
        .map(|f| {
            (
                crate::scheduling::labels::edit_distance(
                    &name.to_ascii_lowercase(),
                    &f.name.to_ascii_lowercase(),
                ),
                f.name,
            )
        })
        .filter(|(d, _)| *d <= 2 || *d <= name.len() / 4)
        .min_by_key(|(d, _)| *d);
    match near {
        Some((_, f)) => format!("unknown field {name:?} (did you mean {f:?}?)"),
        None => {
            let known: Vec<&str> = fields.iter().map(|f| f.name).collect();
            format!("unknown field {name:?} (known: {})", known.join(", "))
        }
    }
}

// ---- duplicate keys ------------------------------------------------------------

/// A document read from YAML or JSON with its duplicate keys marked, not
/// silently collapsed onto the last value: each repeated key leaves a
/// marker entry that [`take_duplicates`] turns into paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Marked(pub Value);

const DUPLICATE_MARK: &str = "\u{0}duplicate\u{0}";

impl<'de> serde::Deserialize<'de> for Marked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MarkedVisitor).map(Marked)
    }
}

struct MarkedVisitor;

impl<'de> serde::de::Visitor<'de> for MarkedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::Deserialize::deserialize(d).map(|Marked(v)| v)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Marked(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<KeyText>()? {
            let Marked(v) = map.next_value()?;
            if out.contains_key(&key.0) {
                out.insert(format!("{DUPLICATE_MARK}{}", key.0), Value::Null);
            }
            out.insert(key.0, v);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key: YAML allows numbers and booleans as keys; they are kept as text.
struct KeyText(String);

impl<'de> serde::Deserialize<'de> for KeyText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Marked::deserialize(d)?.0 {
            Value::String(s) => Ok(KeyText(s)),
            Value::Null => Ok(KeyText("null".into())),
            Value::Bool(b) => Ok(KeyText(b.to_string())),
            Value::Number(n) => Ok(KeyText(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "a mapping key must be a string, got {other}"
            ))),
        }
    }
}

/// Removes the duplicate markers of a [`Marked`] value and returns the path
/// of each key written twice (`spec.template.spec.requirements[0].key`).
pub fn take_duplicates(value: &mut Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    collect_duplicates(value, path, &mut out);
    out
}

fn collect_duplicates(value: &mut Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let marks: Vec<String> = map
                .keys()
                .filter(|k| k.starts_with(DUPLICATE_MARK))
                .cloned()
                .collect();
            for m in marks {
                map.remove(&m);
                let key = &m[DUPLICATE_MARK.len()..];
                let p = join(path, key);
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            for (k, v) in map.iter_mut() {
                collect_duplicates(v, &join(path, k), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                collect_duplicates(v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TAINT: Kind = Kind::Object(&[
        req("key", Kind::Str),
        opt("value", Kind::Str),
        req("effect", Kind::Str),
    ]);
    const SPEC: Kind = Kind::Object(&[
        opt("taints", Kind::List(&TAINT)),
        opt("weight", Kind::Int32),
        opt("labels", Kind::Map(&Kind::Str)),
        opt("tags", Kind::Map(&Kind::Text)),
    ]);

    #[test]
    fn every_problem_at_once_and_the_rest_kept() {
        let mut v = json!({
            "taints": [{"key": "a", "effect": "NoSchedule", "vaule": "x"}, "oops", {"key": 1}],
            "weigth": 3,
            "weight": "ten",
            "labels": {"a": "b", "c": 5},
            "tags": {"pid": 100},
        });
        let problems = check(&mut v, &SPEC, "spec");
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.labels[c]",
                "spec.taints[0].vaule",
                "spec.taints[1]",
                "spec.taints[2].key",
                "spec.taints[2].effect",
                "spec.weight",
                "spec.weigth",
            ],
            "{problems:#?}"
        );
        assert!(
            problems[1].1.contains("did you mean \"value\""),
            "{}",
            problems[1].1
        );
        assert!(
            problems[6].1.contains("did you mean \"weight\""),
            "{}",
            problems[6].1
        );
        // What is left reads: indices kept, bad parts gone, text kept as text.
        assert_eq!(
            v,
            json!({"taints": [{"key": "a", "effect": "NoSchedule"}, {}, {}], "labels": {"a": "b"}, "tags": {"pid": "100"}})
        );
        assert!(already_reported("spec.taints[2].key", &problems));
        assert!(already_reported("spec.taints[1].effect", &problems));
        assert!(!already_reported("spec.taints[0].key", &problems));
        assert!(!already_reported("spec.taints[10]", &problems));
    }

    #[test]
    fn duplicate_keys_are_marked_with_their_path() {
        let yaml = "spec:\n  a: 1\n  b:\n    - {x: 1, x: 2}\n  a: 3\n";
        let Marked(mut v) = serde_norway::from_str(yaml).expect("reads");
        assert_eq!(take_duplicates(&mut v, ""), ["spec.a", "spec.b[0].x"]);
        assert_eq!(v, json!({"spec": {"a": 3, "b": [{"x": 2}]}}));
        let Marked(mut j) = serde_json::from_str(r#"{"a": {"k": 1, "k": 2}}"#).expect("reads");
        assert_eq!(take_duplicates(&mut j, "doc"), ["doc.a.k"]);
    }
}
