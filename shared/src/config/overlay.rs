//! NodeOverlays (Karpenter `karpenter.sh/v1alpha1`, v1.7+): price and
//! capacity overrides for the instance types (and offerings) their
//! requirements select, per NodePool, weighed against each other. They are
//! applied to a pool's catalog before the packer sees it
//! ([`crate::provisioning::plan::instance_types`]), so the planner, `plan`
//! and consolidation all price with them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::schema::{Kind, opt, req};
use super::syntax;
use crate::resources::{self, Resources};
use crate::scheduling::labels;
use crate::scheduling::requirements::{Operator, Requirement, Requirements};

/// `spec` of a NodeOverlay, as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverlaySpec {
    #[serde(default)]
    pub requirements: Vec<OverlayRequirementSpec>,
    /// `+10%`, `-15%`, `+0.5`, `-0.1`: a change of the offerings' price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_adjustment: Option<String>,
    /// `0.432`: the offerings' price, USD per hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// Extended resources the selected types have (`smarter-devices/fuse: 1`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, serde_json::Value>,
    /// 1–10000; higher weights win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// A node selector requirement (no `minValues`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverlayRequirementSpec {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The shape of a NodeOverlay's `spec`, as Karpenter's CRD declares it.
pub const NODEOVERLAY_SPEC: Kind = Kind::Object(&[
    req(
        "requirements",
        Kind::List(&Kind::Object(&[
            req("key", Kind::Str),
            req("operator", Kind::Str),
            opt("values", Kind::List(&Kind::Str)),
        ])),
    ),
    opt("priceAdjustment", Kind::Str),
    opt("price", Kind::Str),
    opt("capacity", Kind::Map(&Kind::IntOrString)),
    opt("weight", Kind::Int32),
]);

/// How an overlay changes a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// The price, whatever it was.
    Set(f64),
    /// Plus (or minus) this many dollars, never below zero.
    Add(f64),
    /// Plus (or minus) this percentage, never below zero.
    Percent(f64),
}

impl PriceChange {
    pub fn apply(self, price: f64) -> f64 {
        match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => (price + d).max(0.0),
            PriceChange::Percent(p) => (price * (1.0 + p / 100.0)).max(0.0),
        }
    }
}

/// A validated NodeOverlay.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeOverlay {
    pub name: String,
    /// What it applies to: a pool (`karpenter.sh/nodepool`), its template
    /// labels, instance-type facts, and offerings (zone, capacity type).
    pub requirements: Requirements,
    pub price: Option<PriceChange>,
    /// Extended resources added to (or replacing) a type's capacity.
    pub capacity: Resources,
    pub weight: i32,
}

/// Resources an overlay may not change: what the instance type itself
/// reports (and the AWS devices Karpenter counts).
const RESTRICTED_CAPACITY: [&str; 9] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "pods",
    "vpc.amazonaws.com/pod-eni",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "habana.ai/gaudi",
    "vpc.amazonaws.com/efa",
];

impl NodeOverlay {
    /// Validates a spec; every error, each naming its field and reason
    /// (Karpenter v1.15's CRD rules and its NodeOverlay runtime validation).
    pub fn from_spec_all(
        name: &str,
        spec: &NodeOverlaySpec,
    ) -> Result<NodeOverlay, Vec<ConfigError>> {
        let mut problems: Vec<(String, String)> = Vec::new();
        let mut requirements = Requirements::new();
        if spec.requirements.len() > 100 {
            problems.push((
                "spec.requirements".into(),
                format!("at most 100 requirements, got {}", spec.requirements.len()),
            ));
        }
        for (i, r) in spec.requirements.iter().enumerate() {
            let field = format!("spec.requirements[{i}]");
            match check_requirement(r, &field) {
                Ok(req) => requirements.add(labels::normalize(&r.key), req),
                Err(p) => problems.extend(p),
            }
        }
        let price = match (&spec.price, &spec.price_adjustment) {
            (Some(_), Some(_)) => {
                problems.push((
                    "spec.priceAdjustment".into(),
                    "price and priceAdjustment cannot both be set".into(),
                ));
                None
            }
            (Some(p), None) => match parse_price(p) {
                Some(v) => Some(PriceChange::Set(v)),
                None => {
                    problems.push((
                        "spec.price".into(),
                        format!("{p:?} is not a price (digits, an optional fraction: 0.432)"),
                    ));
                    None
                }
            },
            (None, Some(a)) => match parse_adjustment(a) {
                Some(c) => Some(c),
                None => {
                    problems.push((
                        "spec.priceAdjustment".into(),
                        format!(
                            "{a:?} is not an adjustment (+0.5, -0.1, +10%, -15%; at most -100%)"
                        ),
                    ));
                    None
                }
            },
            (None, None) => None,
        };
        let mut capacity = Resources::default();
        for (res, q) in &spec.capacity {
            let field = format!("spec.capacity[{res}]");
            if RESTRICTED_CAPACITY.contains(&res.as_str()) {
                problems.push((
                    field,
                    format!(
                        "{res} is the instance type's own: an overlay adds extended resources only"
                    ),
                ));
                continue;
            }
            let text = match q {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match syntax::quantity(&text)
                .and_then(|()| resources::parse_whole(&text).map_err(|e| e.to_string()))
            {
                Ok(v) => capacity.set_extended(res, v),
                Err(why) => problems.push((field, why)),
            }
        }
        let weight = spec.weight.unwrap_or(0);
        if let Some(w) = spec.weight
            && !(1..=10_000).contains(&w)
        {
            problems.push((
                "spec.weight".into(),
                format!("must be between 1 and 10000, got {w}"),
            ));
        }
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|(field, reason)| ConfigError {
                    item: format!("nodeoverlay/{name}"),
                    field,
                    reason,
                })
                .collect());
        }
        Ok(NodeOverlay {
            name: name.to_owned(),
            requirements,
            price,
            capacity,
            weight,
        })
    }
}

fn check_requirement(
    r: &OverlayRequirementSpec,
    field: &str,
) -> Result<Requirement, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let key = labels::normalize(&r.key);
    if r.key.is_empty() {
        problems.push((format!("{field}.key"), "required".into()));
    } else {
        if let Err(why) = syntax::qualified_name(&r.key) {
            problems.push((format!("{field}.key"), why));
        }
        // An overlay may select a pool by name; otherwise the NodePool's rules.
        if key != labels::NODEPOOL
            && let Some(why) = labels::restriction(key)
        {
            problems.push((format!("{field}.key"), why));
        }
    }
    let op = super::nodepool::operator_and_values(&r.operator, &r.values, field, &mut problems);
    let values = format!("{field}.values");
    match (op, r.values.as_slice()) {
        (Some(op @ (Operator::In | Operator::NotIn)), []) => problems.push((
            values.clone(),
            format!("operator {op} needs at least one value"),
        )),
        (Some(Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte), [v])
            if v.parse::<i64>().is_ok_and(|n| n >= 0) => {}
        (Some(op @ (Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte)), _) => problems
            .push((
                values.clone(),
                format!("operator {op} takes a single non-negative integer"),
            )),
        _ => {}
    }
    if let (Some(known), Some(Operator::In)) = (labels::known_values(key), op)
        && !r.values.is_empty()
        && !r.values.iter().any(|v| known.contains(&v.as_str()))
    {
        problems.push((
            values.clone(),
            format!(
                "no valid value in {:?} for {key} (expected one of {})",
                r.values,
                known.join(", ")
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let op = op.unwrap_or(Operator::Exists);
    Ok(match op {
        Operator::In => Requirement::any_of(r.values.iter().cloned()),
        Operator::NotIn => Requirement::none_of(r.values.iter().cloned()),
        Operator::Exists => Requirement::exists(),
        Operator::DoesNotExist => Requirement::does_not_exist(),
        op => Requirement::new(key, op, &r.values).map_err(|e| vec![(values, e.to_string())])?,
    })
}

/// Karpenter's `price` pattern: `^\d+(\.\d+)?$`.
fn parse_price(s: &str) -> Option<f64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, "0"));
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    (digits(int) && digits(frac)).then(|| s.parse().ok())?
}

/// Karpenter's `priceAdjustment` pattern: a signed amount (`+0.5`, `-.5`,
/// `-43`), a positive percentage (`+10%`, `+100.102%`), or a negative one
/// of at most two integer digits (`-15%`, `-1.5%`) or `-100%`.
fn parse_adjustment(s: &str) -> Option<PriceChange> {
    // `\d*\.?\d+`: digits, an optional point, then at least one digit.
    let amount = |d: &str| -> Option<f64> {
        let ok = match d.split_once('.') {
            Some((i, f)) => {
                i.bytes().all(|b| b.is_ascii_digit())
                    && !f.is_empty()
                    && f.bytes().all(|b| b.is_ascii_digit())
            }
            None => !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()),
        };
        if ok { d.parse().ok() } else { None }
    };
    if let Some(p) = s.strip_suffix('%') {
        if let Some(up) = p.strip_prefix('+') {
            return amount(up).map(PriceChange::Percent);
        }
        let down = p.strip_prefix('-')?;
        if down == "100" {
            return Some(PriceChange::Percent(-100.0));
        }
        let (i, f) = down.split_once('.').unwrap_or((down, ""));
        let int_ok = (1..=2).contains(&i.len()) && i.bytes().all(|b| b.is_ascii_digit());
        let frac_ok =
            !down.contains('.') || (!f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
        return (int_ok && frac_ok)
            .then(|| down.parse::<f64>().ok().map(|v| PriceChange::Percent(-v)))?;
    }
    if let Some(up) = s.strip_prefix('+') {
        return amount(up).map(PriceChange::Add);
    }
    amount(s.strip_prefix('-')?).map(|v| PriceChange::Add(-v))
}

/// The overlays in the order they are weighed: higher weight first, then
/// name (later names first, as Karpenter orders ties).
pub fn by_weight(overlays: &[NodeOverlay]) -> Vec<&NodeOverlay> {
    let mut out: Vec<&NodeOverlay> = overlays.iter().collect();
    out.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_patterns_follow_the_crd() {
        for ok in ["43", "34.43", "0.432", "0"] {
            assert!(parse_price(ok).is_some(), "{ok}");
        }
        for bad in [
            "+42",
            ".5",
            "42.",
            "42%",
            "3,14",
            "1e10",
            "0x42",
            "forty-two",
            "42a",
            "42 ",
            " 42",
            "42.0.0",
            "-",
            ".",
            "-.42",
        ] {
            assert!(parse_price(bad).is_none(), "{bad}");
        }
        for (ok, change) in [
            ("+1%", PriceChange::Percent(1.0)),
            ("-1%", PriceChange::Percent(-1.0)),
            ("-100%", PriceChange::Percent(-100.0)),
            ("+100.102%", PriceChange::Percent(100.102)),
            ("+298%", PriceChange::Percent(298.0)),
            ("+43", PriceChange::Add(43.0)),
            ("-43", PriceChange::Add(-43.0)),
            ("+34.43", PriceChange::Add(34.43)),
            ("-34.43", PriceChange::Add(-34.43)),
            ("-.5", PriceChange::Add(-0.5)),
        ] {
            assert_eq!(parse_adjustment(ok), Some(change), "{ok}");
        }
        for bad in [
            "1%", "1", "1.3", "-101.1%", "-129%", "-100.0%", "+", "%", "10",
        ] {
            assert_eq!(parse_adjustment(bad), None, "{bad}");
        }
        assert_eq!(PriceChange::Add(-5.0).apply(1.0), 0.0);
        assert!((PriceChange::Percent(-15.0).apply(2.0) - 1.7).abs() < 1e-9);
        assert_eq!(PriceChange::Set(0.25).apply(9.0), 0.25);
    }

    #[test]
    fn ties_are_broken_by_name_as_karpenter_orders_them() {
        let o = |name: &str, weight| NodeOverlay {
            name: name.into(),
            requirements: Requirements::new(),
            price: None,
            capacity: Resources::default(),
            weight,
        };
        let all = [o("a", 1), o("b", 1), o("c", 10)];
        let names: Vec<&str> = by_weight(&all).iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["c", "b", "a"]);
    }
}
