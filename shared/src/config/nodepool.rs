//! NodePools: the Karpenter v1 `NodePool` spec as users write it, and the
//! validated form the decisions use.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::disruption::{Disruption, DisruptionSpec, parse_duration, parse_duration_or_never};
use super::nodeclass::{KubeletSpec, NodeClass};
use crate::cloud::KubeletConfig;
use crate::resources::{self, Resources};
use crate::scheduling::labels;
use crate::scheduling::requirements::{Operator, Requirement, RequirementError, Requirements};
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
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintSpec {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeClassRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
}

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
    /// pool with five mistakes gets five), never an empty list.
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
        for (i, r) in t.spec.requirements.iter().enumerate() {
            let field = format!("spec.template.spec.requirements[{i}]");
            if let Some(why) = labels::restriction(&r.key) {
                bad(format!("{field}.key"), why);
                continue;
            }
            match requirement_from_spec(r) {
                Ok(req) => requirements.add(labels::normalize(&r.key), req),
                Err(e) => bad(field, e.to_string()),
            }
        }
        for (k, v) in &t.metadata.labels {
            let field = format!("spec.template.metadata.labels[{k}]");
            if let Some(why) = labels::restriction(k) {
                bad(field, why);
                continue;
            }
            if requirements.get(k).is_some_and(|r| !r.has(v)) {
                bad(
                    field,
                    format!("value {v:?} conflicts with the requirements on {k}"),
                );
                continue;
            }
            requirements.add(labels::normalize(k), Requirement::single(v.clone()));
        }
        for (k, r) in requirements.iter() {
            if r.is_empty() && !r.allows_absence() {
                bad(
                    "spec.template.spec.requirements".into(),
                    format!("requirements on {k} allow no value"),
                );
            }
        }
        requirements.add(labels::NODEPOOL, Requirement::single(name));
        let taints = taints_from_spec(&t.spec.taints, "spec.template.spec.taints").unwrap_or_else(
            |(f, r)| {
                bad(f, r);
                Vec::new()
            },
        );
        let startup_taints =
            taints_from_spec(&t.spec.startup_taints, "spec.template.spec.startupTaints")
                .unwrap_or_else(|(f, r)| {
                    bad(f, r);
                    Vec::new()
                });
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
            let value = if res == resources::CPU {
                resources::parse_milli(&text)
            } else {
                resources::parse_whole(&text)
            };
            match value {
                Ok(v) if v < 0 => bad(field, "must not be negative".into()),
                Ok(v) => {
                    limits.resources.insert(res.clone(), v);
                }
                Err(e) => bad(field, e.to_string()),
            }
        }
        let weight = spec.weight.unwrap_or(0);
        if !(0..=100).contains(&weight) {
            bad(
                "spec.weight".into(),
                format!("must be between 0 and 100, got {weight}"),
            );
        }
        let launch_kubelet = t.spec.kubelet.clone().unwrap_or_default();
        if let Err((f, r)) = launch_kubelet.validate("spec.template.spec.kubelet") {
            bad(f, r);
        }
        if let Some(r) = &t.spec.node_class_ref {
            let field = "spec.template.spec.nodeClassRef";
            if r.name.is_empty() {
                bad(format!("{field}.name"), "must not be empty".into());
            }
            if let Some(g) = r.group.as_deref().filter(|g| *g != NODE_CLASS_GROUP) {
                bad(
                    format!("{field}.group"),
                    format!("unsupported group {g:?} (expected {NODE_CLASS_GROUP})"),
                );
            }
            if let Some(k) = r.kind.as_deref().filter(|k| *k != NODE_CLASS_KIND) {
                bad(
                    format!("{field}.kind"),
                    format!("unsupported kind {k:?} (expected {NODE_CLASS_KIND})"),
                );
            }
        }
        let disruption = Disruption::from_spec(spec.disruption.as_ref(), "spec.disruption")
            .unwrap_or_else(|(f, r)| {
                bad(f, r);
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
        })
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
        }
    }
}

fn requirement_from_spec(r: &RequirementSpec) -> Result<Requirement, RequirementError> {
    if r.key.is_empty() {
        return Err(RequirementError::EmptyKey);
    }
    let op = Operator::parse(&r.operator)?;
    let req = Requirement::new(&r.key, op, &r.values)?;
    let min_values = match r.min_values {
        None => None,
        Some(v) if (1..=50).contains(&v) => Some(v as u32),
        Some(v) => {
            return Err(RequirementError::MinValuesOutOfRange {
                key: r.key.clone(),
                value: v,
            });
        }
    };
    if let (Some(m), Operator::In) = (min_values, op)
        && (m as usize) > r.values.len()
    {
        return Err(RequirementError::MinValuesAboveValues {
            key: r.key.clone(),
            min_values: m,
            available: r.values.len(),
        });
    }
    Ok(req.with_min_values(min_values))
}

fn taints_from_spec(specs: &[TaintSpec], field: &str) -> Result<Vec<Taint>, (String, String)> {
    specs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let effect = Effect::parse(&t.effect).ok_or_else(|| {
                (
                    format!("{field}[{i}].effect"),
                    format!(
                        "unknown effect {:?} (NoSchedule, PreferNoSchedule, NoExecute)",
                        t.effect
                    ),
                )
            })?;
            if t.key.is_empty() {
                return Err((format!("{field}[{i}].key"), "must not be empty".into()));
            }
            Ok(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect,
            })
        })
        .collect()
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
                "spec.template.spec.requirements[0]",
                "unknown operator",
            ),
            (
                serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "In", "values": ["x"], "minValues": 2}]}}}),
                "spec.template.spec.requirements[0]",
                "minValues 2",
            ),
            (
                serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "Exists", "minValues": 51}]}}}),
                "spec.template.spec.requirements[0]",
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
                "malformed quantity",
            ),
            (
                serde_json::json!({"weight": 101}),
                "spec.weight",
                "between 0 and 100",
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

    /// Every mistake of a pool at once, as a webhook would list them.
    #[test]
    fn five_mistakes_are_five_errors() {
        let json = serde_json::json!({
            "template": {
                "metadata": {"labels": {"kubernetes.io/team": "a"}},
                "spec": {
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "Inn", "values": ["m5"]},
                        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["four"]},
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
                "spec.template.spec.requirements[0]",
                "spec.template.spec.requirements[1]",
                "spec.template.spec.requirements[2].key",
                "spec.template.metadata.labels[kubernetes.io/team]",
                "spec.limits.cpu",
                "spec.template.spec.expireAfter",
            ],
            "{errors:#?}"
        );
        assert!(errors[0].reason.contains("Inn"), "{}", errors[0].reason);
        assert!(errors[1].reason.contains("integer"), "{}", errors[1].reason);
        assert!(
            errors[2].reason.contains("\"k8s.io\" is restricted"),
            "{}",
            errors[2].reason
        );
        assert!(
            errors[3].reason.contains("\"kubernetes.io\" is restricted"),
            "{}",
            errors[3].reason
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
