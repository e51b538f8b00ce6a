//! The requirements algebra: node selector requirements as sets of label
//! values, and their intersection and compatibility.
//!
//! Every operator becomes one shape — a value set, a complement flag and
//! inclusive integer bounds — so intersecting two requirements is set algebra:
//!
//! | operator       | complement | values | bounds      |
//! |----------------|------------|--------|-------------|
//! | `In [a b]`     | no         | {a, b} |             |
//! | `NotIn [a]`    | yes        | {a}    |             |
//! | `Exists`       | yes        | {}     |             |
//! | `DoesNotExist` | no         | {}     |             |
//! | `Gt 3`         | yes        | {}     | ≥ 4         |
//! | `Lte 8`        | yes        | {}     | ≤ 8         |
//!
//! A finite set (no complement) never keeps bounds: they are applied to its
//! values. Absence of a key in [`Requirements`] means "no constraint".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::labels;

/// A requirement operator, as written in manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub fn parse(s: &str) -> Result<Self, RequirementError> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            other => return Err(RequirementError::UnknownOperator(other.to_owned())),
        })
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A requirement that cannot be built from what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error(
        "unknown operator {0:?} (expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)"
    )]
    UnknownOperator(String),
    #[error("key {key}: operator {operator} needs at least one value")]
    MissingValues { key: String, operator: Operator },
    #[error("key {key}: operator {operator} takes no values")]
    UnexpectedValues { key: String, operator: Operator },
    #[error("key {key}: operator {operator} needs exactly one integer value, got {values:?}")]
    NotAnInteger {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
    #[error("key {key}: minValues must be between 1 and 50, got {value}")]
    MinValuesOutOfRange { key: String, value: i64 },
    #[error(
        "key {key}: minValues {min_values} asks for more values than the {available} that operator In lists"
    )]
    MinValuesAboveValues {
        key: String,
        min_values: u32,
        available: usize,
    },
    #[error("empty requirement key")]
    EmptyKey,
}

/// One key's constraint: a set of allowed values (or its complement) with
/// optional inclusive integer bounds and an optional `minValues`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    complement: bool,
    values: BTreeSet<String>,
    gte: Option<i64>,
    lte: Option<i64>,
    /// At least this many distinct values must remain among the instance types kept.
    pub min_values: Option<u32>,
}

impl Requirement {
    /// Builds a requirement from an operator and its values, checking their shape.
    pub fn new(key: &str, operator: Operator, values: &[String]) -> Result<Self, RequirementError> {
        let int = || -> Result<i64, RequirementError> {
            match values {
                [v] => v
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| RequirementError::NotAnInteger {
                        key: key.to_owned(),
                        operator,
                        values: values.to_vec(),
                    }),
                _ => Err(RequirementError::NotAnInteger {
                    key: key.to_owned(),
                    operator,
                    values: values.to_vec(),
                }),
            }
        };
        let no_values = || {
            if values.is_empty() {
                Ok(())
            } else {
                Err(RequirementError::UnexpectedValues {
                    key: key.to_owned(),
                    operator,
                })
            }
        };
        Ok(match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(RequirementError::MissingValues {
                        key: key.to_owned(),
                        operator,
                    });
                }
                Requirement {
                    complement: operator == Operator::NotIn,
                    values: values.iter().cloned().collect(),
                    ..Requirement::exists()
                }
            }
            Operator::Exists => {
                no_values()?;
                Requirement::exists()
            }
            Operator::DoesNotExist => {
                no_values()?;
                Requirement::does_not_exist()
            }
            Operator::Gt => Requirement::bounded(int()?.checked_add(1), None),
            Operator::Gte => Requirement::bounded(Some(int()?), None),
            Operator::Lt => Requirement::bounded(None, int()?.checked_sub(1)),
            Operator::Lte => Requirement::bounded(None, Some(int()?)),
        })
    }

    /// `In [values]`.
    pub fn any_of<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Requirement {
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            ..Requirement::exists()
        }
    }

    /// `In [value]`.
    pub fn single(value: impl Into<String>) -> Self {
        Requirement::any_of([value.into()])
    }

    /// `NotIn [values]`.
    pub fn none_of<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Requirement {
            complement: true,
            values: values.into_iter().map(Into::into).collect(),
            ..Requirement::exists()
        }
    }

    pub fn exists() -> Self {
        Requirement {
            complement: true,
            values: BTreeSet::new(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    pub fn does_not_exist() -> Self {
        Requirement {
            complement: false,
            ..Requirement::exists()
        }
    }

    fn bounded(gte: Option<i64>, lte: Option<i64>) -> Self {
        Requirement {
            gte,
            lte,
            ..Requirement::exists()
        }
        .normalized()
    }

    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    /// The operator this requirement reads as.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, true) if self.gte.is_some() || self.lte.is_some() => {
                if self.gte.is_some() {
                    Operator::Gte
                } else {
                    Operator::Lte
                }
            }
            (true, true) => Operator::Exists,
            (true, false) => Operator::NotIn,
            (false, true) => Operator::DoesNotExist,
            (false, false) => Operator::In,
        }
    }

    /// The allowed values when the set is finite (`In`), else `None`.
    pub fn finite_values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// The single allowed value, if exactly one is allowed.
    pub fn single_value(&self) -> Option<&str> {
        match self.finite_values() {
            Some(v) if v.len() == 1 => v.iter().next().map(String::as_str),
            _ => None,
        }
    }

    /// A value a node's label could take to satisfy the requirement, chosen
    /// deterministically: the first allowed value of an `In`, else the
    /// smallest non-negative integer within the bounds that is not excluded
    /// (as Karpenter picks some integer for `NotIn`/`Exists`/`Gt`/`Lt`);
    /// `None` when only absence satisfies it (`DoesNotExist`).
    pub fn any_value(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().next().cloned();
        }
        let low = self.gte.unwrap_or(0).max(0);
        let high = self.lte.unwrap_or(i64::MAX);
        (low..=high)
            .take(self.values.len() + 1)
            .map(|v| v.to_string())
            .find(|v| !self.values.contains(v))
    }

    /// True when a node whose label has this value satisfies the requirement.
    #[inline]
    pub fn has(&self, value: &str) -> bool {
        if self.complement {
            !self.values.contains(value) && self.within_bounds(value)
        } else {
            self.values.contains(value)
        }
    }

    fn within_bounds(&self, value: &str) -> bool {
        within(self.gte, self.lte, value)
    }

    /// True when no value at all satisfies it.
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// True when a node without this label satisfies it (`NotIn`, `DoesNotExist`).
    pub fn allows_absence(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// The values both allow.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        let min_values = max_opt(self.min_values, other.min_values);
        let mut out = match (self.complement, other.complement) {
            (true, true) => Requirement {
                complement: true,
                values: self.values.union(&other.values).cloned().collect(),
                gte,
                lte,
                min_values,
            },
            (true, false) => Requirement {
                complement: false,
                values: other
                    .values
                    .iter()
                    .filter(|v| self.has(v) && within(gte, lte, v))
                    .cloned()
                    .collect(),
                gte: None,
                lte: None,
                min_values,
            },
            (false, true) => Requirement {
                complement: false,
                values: self
                    .values
                    .iter()
                    .filter(|v| other.has(v) && within(gte, lte, v))
                    .cloned()
                    .collect(),
                gte: None,
                lte: None,
                min_values,
            },
            (false, false) => Requirement {
                complement: false,
                values: self.values.intersection(&other.values).cloned().collect(),
                gte: None,
                lte: None,
                min_values,
            },
        };
        out = out.normalized();
        out
    }

    /// True when some value satisfies both, without building the intersection.
    #[inline]
    pub fn intersects(&self, other: &Requirement) -> bool {
        match (self.complement, other.complement) {
            (true, true) => {
                bounds_non_empty(max_opt(self.gte, other.gte), min_opt(self.lte, other.lte))
            }
            (true, false) => other.values.iter().any(|v| self.has(v)),
            (false, true) => self.values.iter().any(|v| other.has(v)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (self, other)
                } else {
                    (other, self)
                };
                small.values.iter().any(|v| large.values.contains(v))
            }
        }
    }

    /// Karpenter's compatibility of one key: some value in common, or both
    /// accept a node without the label.
    #[inline]
    pub fn compatible(&self, other: &Requirement) -> bool {
        self.intersects(other) || (self.allows_absence() && other.allows_absence())
    }

    /// Bounds that leave no integer turn the requirement into `DoesNotExist`.
    fn normalized(mut self) -> Self {
        if self.complement && !bounds_non_empty(self.gte, self.lte) {
            self.complement = false;
            self.values.clear();
            self.gte = None;
            self.lte = None;
        }
        self
    }

    /// Formats as `key Operator [values]`.
    pub fn describe(&self, key: &str) -> String {
        let op = self.operator();
        match op {
            Operator::Exists | Operator::DoesNotExist => format!("{key} {op}"),
            Operator::Gte | Operator::Lte => {
                let mut parts = Vec::new();
                if let Some(g) = self.gte {
                    parts.push(format!("{key} >= {g}"));
                }
                if let Some(l) = self.lte {
                    parts.push(format!("{key} <= {l}"));
                }
                parts.join(" and ")
            }
            Operator::In | Operator::NotIn | Operator::Gt | Operator::Lt => {
                let vals: Vec<&str> = self.values.iter().map(String::as_str).collect();
                format!("{key} {op} [{}]", vals.join(" "))
            }
        }
    }
}

fn within(gte: Option<i64>, lte: Option<i64>, value: &str) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    match value.parse::<i64>() {
        Ok(v) => gte.is_none_or(|g| v >= g) && lte.is_none_or(|l| v <= l),
        Err(_) => false,
    }
}

fn bounds_non_empty(gte: Option<i64>, lte: Option<i64>) -> bool {
    match (gte, lte) {
        (Some(g), Some(l)) => g <= l,
        _ => true,
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Which keys a set of requirements may constrain when the other side does
/// not mention them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undefined {
    /// Only well-known keys (the cloud provides their values) or keys whose
    /// requirement accepts absence. A NodePool must define custom labels.
    /// The hostname is the exception: a new node's is not known before it
    /// registers, so only a requirement that accepts absence holds on it.
    WellKnownOnly,
    /// Any key: only keys both sides mention are compared.
    Allow,
}

/// Why two sets of requirements cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    #[error("{incoming} not in {existing}{}", hint_suffix(.hint))]
    Conflict {
        key: String,
        existing: String,
        incoming: String,
        hint: Option<&'static str>,
    },
    #[error("label {key:?} does not have known values{}", hint_suffix(.hint))]
    Undefined {
        key: String,
        hint: Option<&'static str>,
    },
}

impl Incompatible {
    pub fn key(&self) -> &str {
        match self {
            Incompatible::Conflict { key, .. } | Incompatible::Undefined { key, .. } => key,
        }
    }
}

fn hint_suffix(hint: &Option<&'static str>) -> String {
    hint.map(|h| format!(" (typo of {h:?}?)"))
        .unwrap_or_default()
}

/// Requirements on many keys. All of them must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    pub fn new() -> Self {
        Requirements(BTreeMap::new())
    }

    /// Reads Kubernetes node selector requirements (node affinity terms).
    pub fn from_node_selector(reqs: &[NodeSelectorRequirement]) -> Result<Self, RequirementError> {
        let mut out = Requirements::new();
        for r in reqs {
            if r.key.is_empty() {
                return Err(RequirementError::EmptyKey);
            }
            let op = Operator::parse(&r.operator)?;
            let values = r.values.as_deref().unwrap_or(&[]);
            out.add(
                labels::normalize(&r.key),
                Requirement::new(&r.key, op, values)?,
            );
        }
        Ok(out)
    }

    /// `key In [value]` for every label.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Requirements::new();
        for (k, v) in labels {
            out.add(labels::normalize(k), Requirement::single(v.clone()));
        }
        out
    }

    /// Adds a requirement, intersecting with what the key already has.
    pub fn add(&mut self, key: &str, req: Requirement) {
        match self.0.get_mut(key) {
            Some(existing) => *existing = existing.intersection(&req),
            None => {
                self.0.insert(key.to_owned(), req);
            }
        }
    }

    /// Intersects every requirement of `other` into `self`.
    pub fn add_all(&mut self, other: &Requirements) {
        for (k, r) in &other.0 {
            self.add(k, r.clone());
        }
    }

    pub fn intersection(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(key)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// True when a node with label `key=value` (or without `key`, if `value`
    /// is `None`) satisfies the requirement on `key`.
    pub fn allows(&self, key: &str, value: Option<&str>) -> bool {
        match (self.0.get(key), value) {
            (None, _) => true,
            (Some(r), Some(v)) => r.has(v),
            (Some(r), None) => r.allows_absence(),
        }
    }

    /// True when a node with these labels satisfies every requirement
    /// (what the kubelet's node-affinity admission checks).
    pub fn satisfied_by(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, r)| match labels.get(k) {
            Some(v) => r.has(v),
            None => r.allows_absence(),
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Requirement)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks that `incoming` can hold together with `self` (the node side).
    /// Keys only `incoming` mentions are judged by `undefined`.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        undefined: Undefined,
    ) -> Result<(), Incompatible> {
        for (key, inc) in &incoming.0 {
            match self.0.get(key) {
                Some(existing) => {
                    if !existing.compatible(inc) {
                        return Err(Incompatible::Conflict {
                            key: key.clone(),
                            existing: existing.describe(key),
                            incoming: inc.describe(key),
                            hint: labels::typo_hint(key),
                        });
                    }
                }
                None => {
                    let allowed = match undefined {
                        Undefined::Allow => true,
                        Undefined::WellKnownOnly => {
                            (labels::is_well_known(key) && key != labels::HOSTNAME)
                                || inc.allows_absence()
                        }
                    };
                    if !allowed {
                        return Err(Incompatible::Undefined {
                            key: key.clone(),
                            hint: labels::typo_hint(key),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Like [`Requirements::compatible`] with [`Undefined::Allow`], as a bool and without allocating.
    #[inline]
    pub fn intersects(&self, other: &Requirements) -> bool {
        let (small, large) = if self.0.len() <= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        small
            .0
            .iter()
            .all(|(k, r)| large.0.get(k).is_none_or(|o| o.compatible(r)))
    }

    /// The labels a node made from these requirements carries: every key
    /// with exactly one allowed value.
    pub fn single_valued_labels(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter_map(|(k, r)| r.single_value().map(|v| (k.clone(), v.to_owned())))
            .collect()
    }

    /// A short human summary such as `arch=arm64 and instance-type=c5.large`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(k, r)| {
                let short = k.rsplit('/').next().unwrap_or(k);
                match r.single_value() {
                    Some(v) => format!("{short}={v}"),
                    None => r.describe(short),
                }
            })
            .collect();
        parts.join(" and ")
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, r)| r.describe(k)).collect();
        write!(f, "{}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: &str, values: &[&str]) -> Requirement {
        let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Requirement::new("k", Operator::parse(op).expect("operator"), &values).expect("valid")
    }

    /// One line per case: left, right, whether compatible, and values the intersection must / must not have.
    fn check(
        a: (&str, &[&str]),
        b: (&str, &[&str]),
        compatible: bool,
        has: &[&str],
        has_not: &[&str],
    ) {
        let (ra, rb) = (req(a.0, a.1), req(b.0, b.1));
        assert_eq!(ra.compatible(&rb), compatible, "{a:?} vs {b:?}");
        assert_eq!(rb.compatible(&ra), compatible, "symmetric {b:?} vs {a:?}");
        let i = ra.intersection(&rb);
        assert_eq!(
            i,
            rb.intersection(&ra),
            "intersection commutes for {a:?} {b:?}"
        );
        for v in has {
            assert!(i.has(v), "{a:?} ∩ {b:?} should have {v}");
        }
        for v in has_not {
            assert!(!i.has(v), "{a:?} ∩ {b:?} should not have {v}");
        }
    }

    #[test]
    fn operator_algebra() {
        check(
            ("In", &["a", "b"]),
            ("In", &["b", "c"]),
            true,
            &["b"],
            &["a", "c"],
        );
        check(("In", &["a"]), ("In", &["b"]), false, &[], &["a", "b"]);
        check(("In", &["a", "b"]), ("NotIn", &["a"]), true, &["b"], &["a"]);
        check(("In", &["a"]), ("NotIn", &["a"]), false, &[], &["a"]);
        check(
            ("NotIn", &["a"]),
            ("NotIn", &["b"]),
            true,
            &["c"],
            &["a", "b"],
        );
        check(("Exists", &[]), ("In", &["a"]), true, &["a"], &["b"]);
        check(("Exists", &[]), ("DoesNotExist", &[]), false, &[], &["a"]);
        check(
            ("DoesNotExist", &[]),
            ("DoesNotExist", &[]),
            true,
            &[],
            &["a"],
        );
        check(
            ("DoesNotExist", &[]),
            ("NotIn", &["a"]),
            true,
            &[],
            &["a", "b"],
        );
        check(("DoesNotExist", &[]), ("In", &["a"]), false, &[], &["a"]);
        check(
            ("Gt", &["2"]),
            ("In", &["1", "3", "x"]),
            true,
            &["3"],
            &["1", "x"],
        );
        check(("Gt", &["2"]), ("Lt", &["4"]), true, &["3"], &["2", "4"]);
        check(("Gt", &["3"]), ("Lt", &["4"]), false, &[], &["3", "4"]);
        check(("Gte", &["3"]), ("Lte", &["3"]), true, &["3"], &["2", "4"]);
        check(("Gt", &["2"]), ("NotIn", &["3"]), true, &["4"], &["3", "2"]);
        check(
            ("Lt", &["10"]),
            ("Exists", &[]),
            true,
            &["9", "-5"],
            &["10", "abc"],
        );
    }

    #[test]
    fn gt_is_gte_plus_one() {
        assert_eq!(req("Gt", &["4"]), req("Gte", &["5"]));
        assert_eq!(req("Lt", &["4"]), req("Lte", &["3"]));
        assert_eq!(req("Gt", &["4"]).operator(), Operator::Gte);
    }

    #[test]
    fn malformed_requirements_are_errors() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(
            matches!(Operator::parse("Within"), Err(RequirementError::UnknownOperator(o)) if o == "Within")
        );
        assert!(matches!(
            Requirement::new("k", Operator::In, &[]),
            Err(RequirementError::MissingValues { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Operator::Exists, &v(&["a"])),
            Err(RequirementError::UnexpectedValues { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Operator::Gt, &v(&["four"])),
            Err(RequirementError::NotAnInteger { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Operator::Lt, &v(&["1", "2"])),
            Err(RequirementError::NotAnInteger { .. })
        ));
    }

    #[test]
    fn undefined_custom_keys_need_the_node_side() {
        let mut pool = Requirements::new();
        pool.add(labels::ARCH, Requirement::any_of(["arm64", "amd64"]));
        let mut pod = Requirements::new();
        pod.add("team", Requirement::single("a"));
        let err = pool
            .compatible(&pod, Undefined::WellKnownOnly)
            .expect_err("custom key undefined");
        assert_eq!(err.key(), "team");
        assert!(pool.compatible(&pod, Undefined::Allow).is_ok());

        let mut pod = Requirements::new();
        pod.add("team", Requirement::none_of(["a"]));
        assert!(
            pool.compatible(&pod, Undefined::WellKnownOnly).is_ok(),
            "NotIn accepts absence"
        );

        let mut pod = Requirements::new();
        pod.add(labels::ZONE, Requirement::single("us-east-1a"));
        assert!(
            pool.compatible(&pod, Undefined::WellKnownOnly).is_ok(),
            "well-known keys come from the cloud"
        );

        let mut pod = Requirements::new();
        pod.add(labels::HOSTNAME, Requirement::single("red-node"));
        let err = pool
            .compatible(&pod, Undefined::WellKnownOnly)
            .expect_err("a new node's hostname cannot be chosen");
        assert_eq!(err.key(), labels::HOSTNAME);
        let mut pod = Requirements::new();
        pod.add(labels::HOSTNAME, Requirement::none_of(["red-node"]));
        assert!(
            pool.compatible(&pod, Undefined::WellKnownOnly).is_ok(),
            "a new node is not the one named"
        );
    }

    #[test]
    fn conflict_names_the_key_and_both_sides_with_a_typo_hint() {
        let mut node = Requirements::new();
        node.add("kubernetes.io/arc", Requirement::single("amd64"));
        let mut pod = Requirements::new();
        pod.add("kubernetes.io/arc", Requirement::single("arm64"));
        let err = node
            .compatible(&pod, Undefined::WellKnownOnly)
            .expect_err("conflict");
        let msg = err.to_string();
        assert!(
            msg.contains("kubernetes.io/arc In [arm64] not in kubernetes.io/arc In [amd64]"),
            "{msg}"
        );
        assert!(msg.contains("typo of \"kubernetes.io/arch\""), "{msg}");
    }

    #[test]
    fn min_values_takes_the_larger() {
        let a = Requirement::exists().with_min_values(Some(3));
        let b = Requirement::any_of(["a", "b", "c", "d"]).with_min_values(Some(2));
        assert_eq!(a.intersection(&b).min_values, Some(3));
    }

    #[test]
    fn summary_is_short() {
        let mut r = Requirements::new();
        r.add(labels::ARCH, Requirement::single("arm64"));
        r.add(labels::INSTANCE_TYPE, Requirement::single("c5.large"));
        assert_eq!(r.summary(), "arch=arm64 and instance-type=c5.large");
    }
}
