//! NodePools: the Karpenter v1 `NodePool` spec as users write it, and the
//! validated form the decisions use.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::disruption::{
    DISRUPTION, Disruption, DisruptionSpec, parse_duration, parse_duration_or_never,
};
use super::nodeclass::{KUBELET, KubeletSpec, NodeClass};
use super::overlay::NodeOverlay;
use super::schema::{Kind, opt, req};
use super::syntax;
use crate::cloud::KubeletConfig;
use crate::resources::{self, Resources};
use crate::scheduling::labels;
use crate::scheduling::requirements::{Operator, Requirement, Requirements};
use crate::scheduling::taints::{Effect, Taint};

/// `spec` of a Karpenter v1 NodePool, as written in YAML or JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolSpec {
    #[serde(default)]
    pub template: NodeClaimTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<DisruptionSpec>,
    /// Resource name → quantity (`cpu: "1000"`, `memory: 1000Gi`, `nodes: "50"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Static capacity (Karpenter v1.8+): the pool keeps exactly this many
    /// nodes whatever the pods ask for; `nodewright config scale` changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplate {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    #[serde(default)]
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<RequirementSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<NodeClassRef>,
    /// A duration or `Never`; `720h` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    /// How long a draining node may wait for pods before it is terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    /// Not part of Karpenter v1 (which moved kubelet settings to the
    /// EC2NodeClass); kept so v1beta1 NodePools convert without loss. It
    /// overrides the NodeClass's settings field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequirementSpec {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintSpec {
    #[serde(default)]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: String,
    /// Kubernetes' `timeAdded` (an RFC 3339 time); kept, not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeClassRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: String,
}

/// The shape of a NodeSelectorRequirement with `minValues`.
pub(crate) const REQUIREMENT: Kind = Kind::Object(&[
    req("key", Kind::Str),
    req("operator", Kind::Str),
    opt("values", Kind::List(&Kind::Str)),
    opt("minValues", Kind::Int),
]);
/// The shape of a Kubernetes taint.
pub(crate) const TAINT: Kind = Kind::Object(&[
    req("key", Kind::Str),
    opt("value", Kind::Str),
    req("effect", Kind::Str),
    opt("timeAdded", Kind::Str),
]);
const TEMPLATE_SPEC: Kind = Kind::Object(&[
    req("requirements", Kind::List(&REQUIREMENT)),
    opt("taints", Kind::List(&TAINT)),
    opt("startupTaints", Kind::List(&TAINT)),
    req(
        "nodeClassRef",
        Kind::Object(&[
            req("group", Kind::Str),
            req("kind", Kind::Str),
            req("name", Kind::Str),
        ]),
    ),
    opt("expireAfter", Kind::Str),
    opt("terminationGracePeriod", Kind::Str),
    opt("kubelet", KUBELET),
]);
/// The shape of a v1 NodePool's `spec`, as Karpenter's CRD declares it.
pub const NODEPOOL_SPEC: Kind = Kind::Object(&[
    req(
        "template",
        Kind::Object(&[
            opt(
                "metadata",
                Kind::Object(&[
                    opt("labels", Kind::Map(&Kind::Str)),
                    opt("annotations", Kind::Map(&Kind::Str)),
                ]),
            ),
            req("spec", TEMPLATE_SPEC),
        ]),
    ),
    opt("disruption", DISRUPTION),
    opt("limits", Kind::Map(&Kind::IntOrString)),
    opt("weight", Kind::Int32),
    opt("replicas", Kind::Int),
]);

/// A validated NodePool.
#[derive(Debug, Clone)]
pub struct NodePool {
    pub name: String,
    /// Higher weights are tried first.
    pub weight: i32,
    /// Template requirements ∩ template labels ∩ `karpenter.sh/nodepool In [name]`.
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    /// The NodePool's own annotations (`metadata.annotations`), e.g. the
    /// rebalance-policy override; not the nodes' template annotations.
    pub annotations: BTreeMap<String, String>,
    /// The template's annotations (`spec.template.metadata.annotations`),
    /// which its nodes carry: copied onto each claim, put on its Node at
    /// registration (Karpenter's way to pin a pool:
    /// `karpenter.sh/do-not-disrupt: "true"` there).
    pub template_annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub limits: Limits,
    /// What the allocatable math uses: `launch_kubelet`'s maxPods and podsPerCore.
    pub kubelet: KubeletConfig,
    /// The kubelet settings nodes launch with: the template's, and once
    /// [`ConfigSet`](super::ConfigSet) resolved the NodeClass, the class's
    /// filling what the template leaves unset.
    pub launch_kubelet: KubeletSpec,
    pub node_class: Option<String>,
    /// The validated NodeClass `node_class` names, once
    /// [`ConfigSet::resolve`](super::ConfigSet::resolve) found it: what a launch uses.
    pub resolved_class: Option<Arc<NodeClass>>,
    pub disruption: Disruption,
    /// `None` is `Never`.
    pub expire_after: Option<SignedDuration>,
    pub termination_grace_period: Option<SignedDuration>,
    /// Static capacity: exactly this many nodes, whatever the pods ask for.
    pub replicas: Option<u64>,
    /// The configuration's NodeOverlays, applied to this pool's catalog
    /// where their requirements select it ([`ConfigSet::resolve`](super::ConfigSet::resolve) sets them).
    pub overlays: Arc<[NodeOverlay]>,
}

impl NodePool {
    /// The resolved NodeClass, if it is the one named `name` (a claim's record).
    pub fn class_named(&self, name: Option<&str>) -> Option<NodeClass> {
        self.resolved_class
            .as_deref()
            .filter(|c| Some(c.name.as_str()) == name)
            .cloned()
    }
}

/// Karpenter v1's default `expireAfter`.
pub const DEFAULT_EXPIRE_AFTER: SignedDuration = SignedDuration::from_hours(720);
/// The NodeClass kind and group a v1 `nodeClassRef` may name.
pub const NODE_CLASS_GROUP: &str = "karpenter.k8s.aws";
pub const NODE_CLASS_KIND: &str = "EC2NodeClass";

/// Upper bounds on what a NodePool may launch, in [`Resources`] units; `nodes` counts nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub resources: BTreeMap<String, i64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// The first limit that `usage` (plus one more node of `node_capacity`) would exceed.
    pub fn exceeded_by(
        &self,
        usage: &Resources,
        nodes: i64,
        node_capacity: &Resources,
    ) -> Option<(&str, i64)> {
        self.resources.iter().find_map(|(name, limit)| {
            let would = if name == "nodes" {
                nodes + 1
            } else {
                usage.get(name) + node_capacity.get(name)
            };
            (would > *limit).then_some((name.as_str(), *limit))
        })
    }
}

impl NodePool {
    /// Validates a spec; the first error (see [`NodePool::from_spec_all`]).
    pub fn from_spec(name: &str, spec: &NodePoolSpec) -> Result<NodePool, ConfigError> {
        Self::from_spec_all(name, spec).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Validates a spec; every error, each naming its field and reason (a
    /// pool with five mistakes gets five), never an empty list. The rules
    /// are Karpenter v1.15's: its CRD's patterns and CEL rules and its
    /// NodePool runtime validation.
    pub fn from_spec_all(name: &str, spec: &NodePoolSpec) -> Result<NodePool, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut bad = |field: String, reason: String| {
            errors.push(ConfigError {
                item: format!("nodepool/{name}"),
                field,
                reason,
            })
        };
        if name.is_empty() {
            bad("metadata.name".into(), "must not be empty".into());
        }
        let t = &spec.template;
        let mut requirements = Requirements::new();
        let mut checked = Vec::new();
        for (i, r) in t.spec.requirements.iter().enumerate() {
            let field = format!("spec.template.spec.requirements[{i}]");
            match check_requirement(r, &field) {
                Ok(req) => {
                    checked.push((labels::normalize(&r.key).to_owned(), req));
                }
                Err(problems) => {
                    for (f, why) in problems {
                        bad(f, why);
                    }
                }
            }
        }
        for (key, req) in checked {
            requirements.add(&key, req);
        }
        if t.metadata.labels.len() > 100 {
            bad(
                "spec.template.metadata.labels".into(),
                format!("at most 100 labels, got {}", t.metadata.labels.len()),
            );
        }
        for (k, v) in &t.metadata.labels {
            let field = format!("spec.template.metadata.labels[{k}]");
            let mut ok = true;
            for why in label_key_problems(k)
                .into_iter()
                .chain(syntax::label_value(v).err())
            {
                bad(field.clone(), why);
                ok = false;
            }
            if ok {
                requirements.add(labels::normalize(k), Requirement::single(v.clone()));
            }
        }
        requirements.add(labels::NODEPOOL, Requirement::single(name));
        let mut seen_taints = BTreeSet::new();
        let taints = taints_from_spec(
            &t.spec.taints,
            "spec.template.spec.taints",
            &mut seen_taints,
            &mut bad,
        );
        let startup_taints = taints_from_spec(
            &t.spec.startup_taints,
            "spec.template.spec.startupTaints",
            &mut seen_taints,
            &mut bad,
        );
        let mut limits = Limits::default();
        for (res, q) in &spec.limits {
            let field = format!("spec.limits.{res}");
            let text = match q {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => {
                    bad(field, format!("expected a quantity, got {other}"));
                    continue;
                }
            };
            if let Err(why) = syntax::quantity(&text) {
                bad(field, why);
                continue;
            }
            let value = if res == resources::CPU {
                resources::parse_milli(&text)
            } else {
                resources::parse_whole(&text)
            };
            match value {
                Ok(v) => {
                    limits.resources.insert(res.clone(), v);
                }
                Err(e) => bad(field, e.to_string()),
            }
        }
        if let Some(w) = spec.weight
            && !(1..=100).contains(&w)
        {
            bad(
                "spec.weight".into(),
                format!("must be between 1 and 100 (omit it for the lowest priority), got {w}"),
            );
        }
        let replicas = match spec.replicas {
            None => None,
            Some(r) if r < 0 => {
                bad(
                    "spec.replicas".into(),
                    format!("must not be negative, got {r}"),
                );
                None
            }
            Some(r) => {
                if let Some(other) = spec.limits.keys().find(|k| *k != "nodes") {
                    bad(
                        format!("spec.limits.{other}"),
                        "a static NodePool (replicas set) takes only limits.nodes".into(),
                    );
                }
                if spec.weight.is_some() {
                    bad(
                        "spec.weight".into(),
                        "not supported on a static NodePool (replicas set)".into(),
                    );
                }
                Some(r as u64)
            }
        };
        let weight = spec.weight.unwrap_or(0);
        let launch_kubelet = t.spec.kubelet.clone().unwrap_or_default();
        for (f, r) in launch_kubelet.problems("spec.template.spec.kubelet") {
            bad(f, r);
        }
        // A missing reference is the set's to report (ConfigSet::resolve):
        // a pool read on its own (tests, benchmarks) needs no class.
        match &t.spec.node_class_ref {
            None => {}
            Some(r) => {
                let field = "spec.template.spec.nodeClassRef";
                if r.name.is_empty() {
                    bad(format!("{field}.name"), "must not be empty".into());
                }
                match r.group.as_deref() {
                    None | Some("") => bad(format!("{field}.group"), "must not be empty".into()),
                    Some(g) if g != NODE_CLASS_GROUP => bad(
                        format!("{field}.group"),
                        format!("unsupported group {g:?} (expected {NODE_CLASS_GROUP})"),
                    ),
                    _ => {}
                }
                match r.kind.as_deref() {
                    None | Some("") => bad(format!("{field}.kind"), "must not be empty".into()),
                    Some(k) if k != NODE_CLASS_KIND => bad(
                        format!("{field}.kind"),
                        format!("unsupported kind {k:?} (expected {NODE_CLASS_KIND})"),
                    ),
                    _ => {}
                }
            }
        }
        let disruption = Disruption::from_spec_all(spec.disruption.as_ref(), "spec.disruption")
            .unwrap_or_else(|problems| {
                for (f, r) in problems {
                    bad(f, r);
                }
                Disruption::default()
            });
        let expire_after = match t.spec.expire_after.as_deref() {
            None => Some(DEFAULT_EXPIRE_AFTER),
            Some(s) => parse_duration_or_never(s).unwrap_or_else(|r| {
                bad("spec.template.spec.expireAfter".into(), r);
                None
            }),
        };
        let termination_grace_period = match t.spec.termination_grace_period.as_deref() {
            None => None,
            Some(s) => parse_duration(s)
                .map_err(|r| bad("spec.template.spec.terminationGracePeriod".into(), r))
                .ok(),
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(NodePool {
            name: name.to_owned(),
            weight,
            requirements,
            labels: t.metadata.labels.clone(),
            annotations: BTreeMap::new(),
            template_annotations: t.metadata.annotations.clone(),
            taints,
            startup_taints,
            limits,
            kubelet: launch_kubelet.to_kubelet_config(),
            launch_kubelet,
            node_class: t.spec.node_class_ref.as_ref().map(|r| r.name.clone()),
            resolved_class: None,
            disruption,
            expire_after,
            termination_grace_period,
            replicas,
            overlays: Arc::from(Vec::new()),
        })
    }

    /// What a valid spec does that is allowed but probably not meant:
    /// values Karpenter ignores, requirements no node can meet, limits that
    /// allow nothing. Each names its field, as errors do.
    pub fn warnings(name: &str, spec: &NodePoolSpec) -> Vec<ConfigError> {
        let mut out = Vec::new();
        let mut warn = |field: String, reason: String| {
            out.push(ConfigError {
                item: format!("nodepool/{name}"),
                field,
                reason,
            })
        };
        let t = &spec.template;
        let mut requirements = Requirements::new();
        let mut wants_a_value = BTreeSet::new();
        for (i, r) in t.spec.requirements.iter().enumerate() {
            let field = format!("spec.template.spec.requirements[{i}]");
            let key = labels::normalize(&r.key);
            if let (Some(known), "In") = (labels::known_values(key), r.operator.as_str()) {
                let unknown: Vec<&String> = r
                    .values
                    .iter()
                    .filter(|v| !known.contains(&v.as_str()))
                    .collect();
                if !unknown.is_empty() && unknown.len() < r.values.len() {
                    warn(
                        format!("{field}.values"),
                        format!("{unknown:?} ignored: {key} takes {}", known.join(", ")),
                    );
                }
            }
            if matches!(r.operator.as_str(), "Exists" | "DoesNotExist") && !r.values.is_empty() {
                warn(
                    format!("{field}.values"),
                    format!("ignored: operator {} takes no values", r.operator),
                );
            }
            if let Ok(req) = check_requirement(r, &field) {
                if r.operator != "DoesNotExist" {
                    wants_a_value.insert(key.to_owned());
                }
                requirements.add(key, req);
            }
        }
        for (k, v) in &t.metadata.labels {
            let key = labels::normalize(k);
            if let Some(known) = labels::known_values(key)
                && !known.contains(&v.as_str())
            {
                warn(
                    format!("spec.template.metadata.labels[{k}]"),
                    format!(
                        "{v:?} is none of {}: this NodePool launches no node",
                        known.join(", ")
                    ),
                );
            }
            if requirements.get(key).is_some_and(|r| !r.has(v)) {
                warn(
                    format!("spec.template.metadata.labels[{k}]"),
                    format!(
                        "value {v:?} is not allowed by the requirements on {key}: this NodePool launches no node"
                    ),
                );
            }
        }
        for (k, r) in requirements.iter() {
            // An empty set reads as DoesNotExist: fine if that was asked for.
            if r.is_empty() && wants_a_value.contains(k) {
                warn(
                    "spec.template.spec.requirements".into(),
                    format!(
                        "the requirements on {k} allow no value: this NodePool launches no node"
                    ),
                );
            }
        }
        for (res, q) in &spec.limits {
            let text = match q {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if resources::parse_milli(&text).is_ok_and(|v| v < 0) {
                warn(
                    format!("spec.limits.{res}"),
                    "negative: this NodePool launches no node".into(),
                );
            }
        }
        if spec.replicas.is_some()
            && let Some(d) = &spec.disruption
            && (d.consolidation_policy.is_some() || d.consolidate_after.is_some())
        {
            warn(
                "spec.disruption".into(),
                "consolidationPolicy and consolidateAfter are ignored on a static NodePool (replicas set)".into(),
            );
        }
        out
    }

    /// A NodePool with no requirements, taints or limits (the benchmark's and most tests' pool).
    pub fn open(name: &str) -> NodePool {
        let mut requirements = Requirements::new();
        requirements.add(labels::NODEPOOL, Requirement::single(name));
        NodePool {
            name: name.to_owned(),
            weight: 0,
            requirements,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            template_annotations: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Limits::default(),
            kubelet: KubeletConfig::default(),
            launch_kubelet: KubeletSpec::default(),
            node_class: None,
            resolved_class: None,
            disruption: Disruption::default(),
            expire_after: Some(DEFAULT_EXPIRE_AFTER),
            termination_grace_period: None,
            replicas: None,
            overlays: Arc::from(Vec::new()),
        }
    }
}

/// The problems of a label key a NodePool sets or requires: its syntax
/// (a qualified name) and the domains Karpenter keeps for itself.
fn label_key_problems(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Err(why) = syntax::qualified_name(key) {
        out.push(why);
    } else if key.len() > 316 {
        out.push(format!("longer than 316 characters ({})", key.len()));
    }
    out.extend(labels::restriction(labels::normalize(key)));
    out
}

/// A requirement's operator, read, and the syntax of each of its values
/// (the checks NodePools and NodeOverlays share); problems go to `problems`.
pub(super) fn operator_and_values(
    operator: &str,
    values: &[String],
    field: &str,
    problems: &mut Vec<(String, String)>,
) -> Option<Operator> {
    let op = match Operator::parse(operator) {
        Ok(op) => Some(op),
        Err(e) => {
            problems.push((format!("{field}.operator"), e.to_string()));
            None
        }
    };
    for (j, v) in values.iter().enumerate() {
        if let Err(why) = syntax::label_value(v) {
            problems.push((format!("{field}.values[{j}]"), why));
        }
    }
    op
}

/// One requirement as Karpenter v1.15 checks it (CRD and runtime rules),
/// read into a [`Requirement`]; or every problem with its field.
fn check_requirement(
    r: &RequirementSpec,
    field: &str,
) -> Result<Requirement, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let key = labels::normalize(&r.key);
    if r.key.is_empty() {
        problems.push((format!("{field}.key"), "required".into()));
    } else {
        for why in label_key_problems(&r.key) {
            problems.push((format!("{field}.key"), why));
        }
    }
    let op = operator_and_values(&r.operator, &r.values, field, &mut problems);
    let values = format!("{field}.values");
    let int = match (op, r.values.as_slice()) {
        (Some(Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte), [v]) => {
            match v.parse::<i64>() {
                Ok(n) if n >= 0 => Some(n),
                _ => {
                    problems.push((
                        values.clone(),
                        format!(
                            "operator {} takes a single non-negative integer, got {v:?}",
                            r.operator
                        ),
                    ));
                    None
                }
            }
        }
        (Some(op @ (Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte)), vs) => {
            problems.push((
                values.clone(),
                format!(
                    "operator {op} takes a single non-negative integer, got {} values",
                    vs.len()
                ),
            ));
            None
        }
        _ => None,
    };
    if op == Some(Operator::In) && r.values.is_empty() {
        problems.push((
            values.clone(),
            "operator In needs at least one value".into(),
        ));
    }
    if let Some(m) = r.min_values {
        if !(1..=50).contains(&m) {
            problems.push((
                format!("{field}.minValues"),
                format!("must be between 1 and 50, got {m}"),
            ));
        } else if op == Some(Operator::In) && m as usize > r.values.len() {
            problems.push((
                format!("{field}.minValues"),
                format!(
                    "{m} asks for more values than the {} listed",
                    r.values.len()
                ),
            ));
        }
    }
    if let (Some(known), Some(Operator::In)) = (labels::known_values(key), op) {
        let valid = r
            .values
            .iter()
            .filter(|v| known.contains(&v.as_str()))
            .count();
        if !r.values.is_empty() && valid == 0 {
            problems.push((
                values.clone(),
                format!(
                    "no valid value in {:?} for {key} (expected one of {})",
                    r.values,
                    known.join(", ")
                ),
            ));
        } else if let Some(m) = r.min_values
            && valid < m as usize
            && (1..=50).contains(&m)
        {
            problems.push((
                values.clone(),
                format!(
                    "minValues {m} asks for more than the {valid} valid value(s) for {key} ({})",
                    known.join(", ")
                ),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let min_values = r.min_values.map(|m| m as u32);
    let req = match (op, int) {
        (Some(Operator::In), _) => Requirement::any_of(r.values.iter().cloned()),
        (Some(Operator::NotIn), _) => Requirement::none_of(r.values.iter().cloned()),
        (Some(Operator::Exists), _) => Requirement::exists(),
        (Some(Operator::DoesNotExist), _) => Requirement::does_not_exist(),
        (Some(op), Some(n)) => Requirement::new(key, op, &[n.to_string()])
            .map_err(|e| vec![(values.clone(), e.to_string())])?,
        _ => Requirement::exists(),
    };
    Ok(req.with_min_values(min_values))
}

/// A NodePool's taints (or startup taints) as Karpenter checks them: a
/// qualified-name key, a value that is one too when set, a known effect,
/// and no key/effect pair twice across both lists.
fn taints_from_spec(
    specs: &[TaintSpec],
    field: &str,
    seen: &mut BTreeSet<(String, String)>,
    bad: &mut impl FnMut(String, String),
) -> Vec<Taint> {
    let mut out = Vec::new();
    for (i, t) in specs.iter().enumerate() {
        let mut ok = true;
        let mut fail = |f: String, r: String| {
            bad(f, r);
            ok = false;
        };
        if t.key.is_empty() {
            fail(format!("{field}[{i}].key"), "required".into());
        } else if let Err(why) = syntax::qualified_name(&t.key) {
            fail(format!("{field}[{i}].key"), why);
        }
        if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty())
            && let Err(why) = syntax::qualified_name(v)
        {
            fail(format!("{field}[{i}].value"), why);
        }
        let effect = Effect::parse(&t.effect);
        if effect.is_none() {
            fail(
                format!("{field}[{i}].effect"),
                format!(
                    "unknown effect {:?} (NoSchedule, PreferNoSchedule, NoExecute)",
                    t.effect
                ),
            );
        }
        if !seen.insert((t.key.clone(), t.effect.clone())) {
            fail(
                format!("{field}[{i}]"),
                format!("duplicate taint key and effect {}:{}", t.key, t.effect),
            );
        }
        if let (true, Some(effect)) = (ok, effect) {
            out.push(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> NodePoolSpec {
        serde_json::from_value(json).expect("spec parses")
    }

    #[test]
    fn reads_a_karpenter_nodepool() {
        let s = spec(serde_json::json!({
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 10}
                    ],
                    "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                }
            },
            "limits": {"cpu": 1000, "memory": "1000Gi"},
            "weight": 10
        }));
        let p = NodePool::from_spec("default", &s).expect("valid");
        assert_eq!(p.weight, 10);
        assert_eq!(p.limits.resources.get("cpu"), Some(&1_000_000));
        assert_eq!(
            p.limits.resources.get("memory"),
            Some(&(1000 * resources::GIB))
        );
        assert!(
            p.requirements
                .allows(labels::INSTANCE_GENERATION, Some("3"))
        );
        assert!(
            !p.requirements
                .allows(labels::INSTANCE_GENERATION, Some("2"))
        );
        assert!(p.requirements.allows("team", Some("a")));
        assert!(p.requirements.allows(labels::NODEPOOL, Some("default")));
        assert_eq!(
            p.requirements
                .get(labels::INSTANCE_TYPE)
                .and_then(|r| r.min_values),
            Some(10)
        );
        assert_eq!(p.taints[0].to_string(), "dedicated=gpu:NoSchedule");
        assert_eq!(p.node_class.as_deref(), Some("default"));
    }

    #[test]
    fn invalid_items_name_the_field_and_reason() {
        let cases = [
            (
                serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "Within", "values": ["x"]}]}}}),
                "spec.template.spec.requirements[0].operator",
                "unknown operator",
            ),
            (
                serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "In", "values": ["x"], "minValues": 2}]}}}),
                "spec.template.spec.requirements[0].minValues",
                "asks for more values than the 1 listed",
            ),
            (
                serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "Exists", "minValues": 51}]}}}),
                "spec.template.spec.requirements[0].minValues",
                "between 1 and 50",
            ),
            (
                serde_json::json!({"template": {"spec": {"taints": [{"key": "a", "effect": "Sometimes"}]}}}),
                "spec.template.spec.taints[0].effect",
                "unknown effect",
            ),
            (
                serde_json::json!({"limits": {"cpu": "lots"}}),
                "spec.limits.cpu",
                "is not a quantity",
            ),
            (
                serde_json::json!({"weight": 101}),
                "spec.weight",
                "between 1 and 100",
            ),
            (
                serde_json::json!({"template": {"metadata": {"labels": {"karpenter.sh/nodepool": "x"}}}}),
                "spec.template.metadata.labels[karpenter.sh/nodepool]",
                "restricted",
            ),
        ];
        for (json, field, reason) in cases {
            let e = NodePool::from_spec("p", &spec(json.clone())).expect_err(&json.to_string());
            assert_eq!(e.field, field, "{json}");
            assert!(e.reason.contains(reason), "{json}: {}", e.reason);
            assert_eq!(e.item, "nodepool/p");
        }
    }

    /// Every mistake of a pool at once, as Karpenter's admission and runtime
    /// validation would list them.
    #[test]
    fn every_mistake_is_an_error() {
        let json = serde_json::json!({
            "template": {
                "metadata": {"labels": {"spaces are not allowed": "a", "team": "/a"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "Inn", "values": ["m5"]},
                        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["-4"]},
                        {"key": "sigs.k8s.io/thing", "operator": "Exists"}
                    ],
                    "expireAfter": "forever"
                }
            },
            "limits": {"cpu": "8Gx"}
        });
        let errors = NodePool::from_spec_all("p", &spec(json)).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.requirements[0].operator",
                // "-4" is neither a label value nor a non-negative integer.
                "spec.template.spec.requirements[1].values[0]",
                "spec.template.spec.requirements[1].values",
                "spec.template.metadata.labels[spaces are not allowed]",
                "spec.template.metadata.labels[team]",
                "spec.limits.cpu",
                "spec.template.spec.expireAfter",
            ],
            "{errors:#?}"
        );
        assert!(errors[0].reason.contains("Inn"), "{}", errors[0].reason);
        assert!(
            errors[2].reason.contains("non-negative"),
            "{}",
            errors[2].reason
        );
        // The first of them is what `from_spec` reports.
        assert_eq!(
            NodePool::from_spec("p", &spec(serde_json::json!({"weight": 101})))
                .expect_err("weight")
                .field,
            "spec.weight"
        );
    }

    #[test]
    fn disruption_and_lifetimes() {
        let open = NodePool::open("o");
        assert_eq!(open.disruption, Disruption::default());
        assert_eq!(open.expire_after, Some(DEFAULT_EXPIRE_AFTER));
        let defaults = NodePool::from_spec("p", &spec(serde_json::json!({}))).expect("valid");
        assert_eq!(defaults.disruption, open.disruption);
        assert_eq!(defaults.expire_after, Some(SignedDuration::from_hours(720)));
        assert_eq!(defaults.termination_grace_period, None);
        let p = NodePool::from_spec(
            "p",
            &spec(serde_json::json!({
                "template": {"spec": {"expireAfter": "Never", "terminationGracePeriod": "1h30m", "kubelet": {"maxPods": 20, "clusterDNS": ["10.0.0.10"]}}},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m", "budgets": [{"nodes": "3"}]}
            })),
        )
        .expect("valid");
        assert_eq!(p.expire_after, None);
        assert_eq!(
            p.termination_grace_period,
            Some(SignedDuration::from_mins(90))
        );
        assert_eq!(
            p.disruption.consolidate_after,
            Some(SignedDuration::from_mins(5))
        );
        assert_eq!(
            p.disruption.budgets[0].nodes,
            super::super::disruption::BudgetNodes::Count(3)
        );
        assert_eq!(
            p.kubelet,
            KubeletConfig {
                max_pods: Some(20),
                ..Default::default()
            }
        );
        assert_eq!(p.launch_kubelet.cluster_dns, vec!["10.0.0.10".to_string()]);
    }

    #[test]
    fn invalid_disruption_and_template_fields() {
        let cases = [
            (
                serde_json::json!({"disruption": {"consolidateAfter": "soon"}}),
                "spec.disruption.consolidateAfter",
                "expected a duration",
            ),
            (
                serde_json::json!({"disruption": {"budgets": [{"nodes": "10%", "schedule": "@weekly"}]}}),
                "spec.disruption.budgets[0].duration",
                "required",
            ),
            (
                serde_json::json!({"template": {"spec": {"expireAfter": "1y"}}}),
                "spec.template.spec.expireAfter",
                "expected a duration",
            ),
            (
                serde_json::json!({"template": {"spec": {"terminationGracePeriod": "Never"}}}),
                "spec.template.spec.terminationGracePeriod",
                "expected a duration",
            ),
            (
                serde_json::json!({"template": {"spec": {"kubelet": {"podsPerCore": -2}}}}),
                "spec.template.spec.kubelet.podsPerCore",
                "between 0",
            ),
            (
                serde_json::json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.sh", "name": "x"}}}}),
                "spec.template.spec.nodeClassRef.group",
                "unsupported group",
            ),
            (
                serde_json::json!({"template": {"spec": {"nodeClassRef": {"name": ""}}}}),
                "spec.template.spec.nodeClassRef.name",
                "empty",
            ),
        ];
        for (json, field, reason) in cases {
            let e = NodePool::from_spec("p", &spec(json.clone())).expect_err(&json.to_string());
            assert_eq!(e.field, field, "{json}");
            assert!(e.reason.contains(reason), "{json}: {}", e.reason);
        }
        // Typos in the template are refused when read, not ignored.
        for json in [
            serde_json::json!({"template": {"spec": {"requirement": []}}}),
            serde_json::json!({"template": {"metadata": {"label": {}}}}),
            serde_json::json!({"disruption": {"expireAfter": "720h"}}),
        ] {
            assert!(
                serde_json::from_value::<NodePoolSpec>(json.clone()).is_err(),
                "{json}"
            );
        }
    }

    #[test]
    fn specs_round_trip_through_json() {
        let s = spec(serde_json::json!({
            "template": {"spec": {"expireAfter": "720h", "kubelet": {"maxPods": 20},
                                  "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s", "budgets": [{"nodes": "10%"}, {"nodes": 2}]},
            "limits": {"cpu": 1000}
        }));
        let json = serde_json::to_value(&s).expect("serializes");
        assert_eq!(spec(json), s);
    }

    #[test]
    fn limits_exceeded() {
        let mut l = Limits::default();
        l.resources.insert("cpu".into(), 4000);
        l.resources.insert("nodes".into(), 2);
        let node = Resources::new(2000, 0, 0);
        assert_eq!(l.exceeded_by(&Resources::new(2000, 0, 0), 1, &node), None);
        assert_eq!(
            l.exceeded_by(&Resources::new(2001, 0, 0), 1, &node),
            Some(("cpu", 4000))
        );
        assert_eq!(
            l.exceeded_by(&Resources::new(0, 0, 0), 2, &node),
            Some(("nodes", 2))
        );
    }
}
