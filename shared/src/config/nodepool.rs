//! NodePools: the Karpenter v1 `NodePool` spec as users write it, and the
//! validated form the decisions use.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;
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
    pub disruption: Option<serde_json::Value>,
    /// Resource name → quantity (`cpu: "1000"`, `memory: 1000Gi`, `nodes: "50"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    #[serde(default)]
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<RequirementSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<NodeClassRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub limits: Limits,
    pub kubelet: KubeletConfig,
    pub node_class: Option<String>,
}

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
    pub fn exceeded_by(&self, usage: &Resources, nodes: i64, node_capacity: &Resources) -> Option<(&str, i64)> {
        self.resources.iter().find_map(|(name, limit)| {
            let would = if name == "nodes" { nodes + 1 } else { usage.get(name) + node_capacity.get(name) };
            (would > *limit).then_some((name.as_str(), *limit))
        })
    }
}

impl NodePool {
    /// Validates a spec; every error names the field and the reason.
    pub fn from_spec(name: &str, spec: &NodePoolSpec) -> Result<NodePool, ConfigError> {
        let err = |field: String, reason: String| ConfigError { item: format!("nodepool/{name}"), field, reason };
        if name.is_empty() {
            return Err(err("metadata.name".into(), "must not be empty".into()));
        }
        let t = &spec.template;
        let mut requirements = Requirements::new();
        for (i, r) in t.spec.requirements.iter().enumerate() {
            let field = format!("spec.template.spec.requirements[{i}]");
            let req = requirement_from_spec(r).map_err(|e| err(field.clone(), e.to_string()))?;
            if r.key == labels::NODEPOOL || r.key == labels::HOSTNAME {
                return Err(err(format!("{field}.key"), format!("{} is restricted", r.key)));
            }
            requirements.add(labels::normalize(&r.key), req);
        }
        for (k, v) in &t.metadata.labels {
            if k == labels::NODEPOOL || k == labels::HOSTNAME {
                return Err(err(format!("spec.template.metadata.labels[{k}]"), "label is restricted".into()));
            }
            let compatible = requirements.get(k).is_none_or(|r| r.has(v));
            if !compatible {
                return Err(err(
                    format!("spec.template.metadata.labels[{k}]"),
                    format!("value {v:?} conflicts with the requirements on {k}"),
                ));
            }
            requirements.add(labels::normalize(k), Requirement::single(v.clone()));
        }
        for (k, r) in requirements.iter() {
            if r.is_empty() && !r.allows_absence() {
                return Err(err("spec.template.spec.requirements".into(), format!("requirements on {k} allow no value")));
            }
        }
        requirements.add(labels::NODEPOOL, Requirement::single(name));
        let taints = taints_from_spec(&t.spec.taints, "spec.template.spec.taints").map_err(|(f, r)| err(f, r))?;
        let startup_taints =
            taints_from_spec(&t.spec.startup_taints, "spec.template.spec.startupTaints").map_err(|(f, r)| err(f, r))?;
        let mut limits = Limits::default();
        for (res, q) in &spec.limits {
            let field = format!("spec.limits.{res}");
            let text = match q {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => return Err(err(field, format!("expected a quantity, got {other}"))),
            };
            let value = if res == resources::CPU {
                resources::parse_milli(&text)
            } else {
                resources::parse_whole(&text)
            }
            .map_err(|e| err(field.clone(), e.to_string()))?;
            if value < 0 {
                return Err(err(field, "must not be negative".into()));
            }
            limits.resources.insert(res.clone(), value);
        }
        let weight = spec.weight.unwrap_or(0);
        if !(0..=100).contains(&weight) {
            return Err(err("spec.weight".into(), format!("must be between 0 and 100, got {weight}")));
        }
        Ok(NodePool {
            name: name.to_owned(),
            weight,
            requirements,
            labels: t.metadata.labels.clone(),
            taints,
            startup_taints,
            limits,
            kubelet: t.spec.kubelet.clone().unwrap_or_default(),
            node_class: t.spec.node_class_ref.as_ref().map(|r| r.name.clone()),
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
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Limits::default(),
            kubelet: KubeletConfig::default(),
            node_class: None,
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
        Some(v) => return Err(RequirementError::MinValuesOutOfRange { key: r.key.clone(), value: v }),
    };
    if let (Some(m), Operator::In) = (min_values, op) {
        if (m as usize) > r.values.len() {
            return Err(RequirementError::MinValuesAboveValues {
                key: r.key.clone(),
                min_values: m,
                available: r.values.len(),
            });
        }
    }
    Ok(req.with_min_values(min_values))
}

fn taints_from_spec(specs: &[TaintSpec], field: &str) -> Result<Vec<Taint>, (String, String)> {
    specs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let effect = Effect::parse(&t.effect).ok_or_else(|| {
                (format!("{field}[{i}].effect"), format!("unknown effect {:?} (NoSchedule, PreferNoSchedule, NoExecute)", t.effect))
            })?;
            if t.key.is_empty() {
                return Err((format!("{field}[{i}].key"), "must not be empty".into()));
            }
            Ok(Taint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect })
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
        assert_eq!(p.limits.resources.get("memory"), Some(&(1000 * resources::GIB)));
        assert!(p.requirements.allows(labels::INSTANCE_GENERATION, Some("3")));
        assert!(!p.requirements.allows(labels::INSTANCE_GENERATION, Some("2")));
        assert!(p.requirements.allows("team", Some("a")));
        assert!(p.requirements.allows(labels::NODEPOOL, Some("default")));
        assert_eq!(p.requirements.get(labels::INSTANCE_TYPE).and_then(|r| r.min_values), Some(10));
        assert_eq!(p.taints[0].to_string(), "dedicated=gpu:NoSchedule");
        assert_eq!(p.node_class.as_deref(), Some("default"));
    }

    #[test]
    fn invalid_items_name_the_field_and_reason() {
        let cases = [
            (serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "Within", "values": ["x"]}]}}}), "spec.template.spec.requirements[0]", "unknown operator"),
            (serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "In", "values": ["x"], "minValues": 2}]}}}), "spec.template.spec.requirements[0]", "minValues 2"),
            (serde_json::json!({"template": {"spec": {"requirements": [{"key": "a", "operator": "Exists", "minValues": 51}]}}}), "spec.template.spec.requirements[0]", "between 1 and 50"),
            (serde_json::json!({"template": {"spec": {"taints": [{"key": "a", "effect": "Sometimes"}]}}}), "spec.template.spec.taints[0].effect", "unknown effect"),
            (serde_json::json!({"limits": {"cpu": "lots"}}), "spec.limits.cpu", "malformed quantity"),
            (serde_json::json!({"weight": 101}), "spec.weight", "between 0 and 100"),
            (serde_json::json!({"template": {"metadata": {"labels": {"karpenter.sh/nodepool": "x"}}}}), "spec.template.metadata.labels[karpenter.sh/nodepool]", "restricted"),
        ];
        for (json, field, reason) in cases {
            let e = NodePool::from_spec("p", &spec(json.clone())).expect_err(&json.to_string());
            assert_eq!(e.field, field, "{json}");
            assert!(e.reason.contains(reason), "{json}: {}", e.reason);
            assert_eq!(e.item, "nodepool/p");
        }
    }

    #[test]
    fn limits_exceeded() {
        let mut l = Limits::default();
        l.resources.insert("cpu".into(), 4000);
        l.resources.insert("nodes".into(), 2);
        let node = Resources::new(2000, 0, 0);
        assert_eq!(l.exceeded_by(&Resources::new(2000, 0, 0), 1, &node), None);
        assert_eq!(l.exceeded_by(&Resources::new(2001, 0, 0), 1, &node), Some(("cpu", 4000)));
        assert_eq!(l.exceeded_by(&Resources::new(0, 0, 0), 2, &node), Some(("nodes", 2)));
    }
}
