//! Reading configuration files: a YAML (or JSON) stream of Kubernetes-style
//! documents holding NodePools and NodeClasses in any supported schema
//! version, converted to the v1 forms, and [`ConfigSet`], the validated whole.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ConfigError;
use super::convert::{
    self, AwsProviderSpec, LegacyRef, ProvisionerConsolidation, ProvisionerLimits, ProvisionerSpec, V1beta1Disruption,
    V1beta1NodePoolSpec, V1beta1Template, V1beta1TemplateSpec,
};
use super::disruption::{BudgetSpec, DisruptionSpec};
use super::nodeclass::{
    AmiSelectorTermSpec, EC2NodeClassSpec, KubeletSpec, NodeClass, SecurityGroupSelectorTermSpec, SubnetSelectorTermSpec,
};
use super::nodepool::{
    NodeClaimTemplate, NodeClaimTemplateSpec, NodeClassRef, NodePool, NodePoolSpec, RequirementSpec, TaintSpec, TemplateMetadata,
};

pub const NODEPOOL_V1: &str = "karpenter.sh/v1";
pub const NODEPOOL_V1BETA1: &str = "karpenter.sh/v1beta1";
pub const PROVISIONER_V1ALPHA5: &str = "karpenter.sh/v1alpha5";
pub const EC2NODECLASS_V1: &str = "karpenter.k8s.aws/v1";
pub const EC2NODECLASS_V1BETA1: &str = "karpenter.k8s.aws/v1beta1";
pub const AWSNODETEMPLATE_V1ALPHA1: &str = "karpenter.k8s.aws/v1alpha1";

const SUPPORTED: &str = "karpenter.sh/v1 NodePool, karpenter.k8s.aws/v1 EC2NodeClass, karpenter.sh/v1beta1 NodePool, \
karpenter.k8s.aws/v1beta1 EC2NodeClass, karpenter.sh/v1alpha5 Provisioner, karpenter.k8s.aws/v1alpha1 AWSNodeTemplate";

/// A configuration document in its v1 form.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigDocument {
    NodePool {
        name: String,
        spec: NodePoolSpec,
        /// The NodePool's `metadata.annotations` (e.g. the rebalance-policy override).
        annotations: BTreeMap<String, String>,
        /// The `apiVersion` it was written in (`karpenter.sh/v1alpha5` for a Provisioner).
        source_api_version: String,
    },
    NodeClass { name: String, spec: EC2NodeClassSpec },
}

impl ConfigDocument {
    pub fn name(&self) -> &str {
        match self {
            ConfigDocument::NodePool { name, .. } | ConfigDocument::NodeClass { name, .. } => name,
        }
    }
}

/// A document of a mixed stream: configuration, or anything else (a
/// Deployment, a Pod…) kept as written.
#[derive(Debug, Clone, PartialEq)]
// Streams are small and mostly configuration; boxing would only add noise.
#[allow(clippy::large_enum_variant)]
pub enum Document {
    Config(ConfigDocument),
    Other(Value),
}

/// Reads a stream of configuration documents; empty documents are skipped,
/// anything that is not a NodePool or NodeClass of a supported version is an
/// error naming its `apiVersion`, `kind` and position (`document[2]`).
pub fn parse_documents(text: &str) -> Result<Vec<ConfigDocument>, ConfigError> {
    let mut out = Vec::new();
    for d in parse(text, false)? {
        match d {
            Document::Config(c) => out.push(c),
            // Not produced when others are refused; kept total for safety.
            Document::Other(_) => {}
        }
    }
    Ok(out)
}

/// Like [`parse_documents`], but documents of other kinds come back as
/// [`Document::Other`], so one file can carry a scenario's workloads too.
/// Karpenter kinds of an unsupported version are still errors.
pub fn parse_stream(text: &str) -> Result<Vec<Document>, ConfigError> {
    parse(text, true)
}

/// Reads one already-parsed object (a YAML/JSON document as a value) as
/// configuration; `index` is its position in its stream, for error messages.
/// A Provisioner with inline AWS settings yields a NodeClass and a NodePool;
/// a `List` yields its items.
pub fn from_value(value: &Value, index: usize) -> Result<Vec<ConfigDocument>, ConfigError> {
    let mut out = Vec::new();
    read_object(value, &format!("document[{index}]"), false, &mut out)?;
    Ok(out
        .into_iter()
        .filter_map(|d| match d {
            Document::Config(c) => Some(c),
            Document::Other(_) => None,
        })
        .collect())
}

fn parse(text: &str, keep_others: bool) -> Result<Vec<Document>, ConfigError> {
    let mut out = Vec::new();
    for (i, value) in raw_documents(text)?.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        read_object(&value, &format!("document[{i}]"), keep_others, &mut out)?;
    }
    Ok(out)
}

/// The documents of a YAML stream, or of JSON (one object, or an array of them).
fn raw_documents(text: &str) -> Result<Vec<Value>, ConfigError> {
    let trimmed = text.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(v) = serde_json::from_str::<Value>(text)
    {
        return Ok(match v {
            Value::Array(items) => items,
            other => vec![other],
        });
    }
    let mut out = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(de).map_err(|e| ConfigError {
            item: format!("document[{i}]"),
            field: e.location().map_or_else(|| "(document)".to_owned(), |l| format!("line {} column {}", l.line(), l.column())),
            reason: e.to_string(),
        })?;
        out.push(value);
    }
    Ok(out)
}

fn read_object(value: &Value, at: &str, keep_others: bool, out: &mut Vec<Document>) -> Result<(), ConfigError> {
    let doc_err = |field: &str, reason: String| ConfigError { item: at.to_owned(), field: field.to_owned(), reason };
    let Some(obj) = value.as_object() else {
        return Err(doc_err("(document)", format!("expected an object with apiVersion and kind, got {}", kind_of(value))));
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version.is_empty() {
        return Err(doc_err("apiVersion", "required".into()));
    }
    if kind.is_empty() {
        return Err(doc_err("kind", "required".into()));
    }
    if kind.ends_with("List")
        && let Some(items) = obj.get("items").and_then(Value::as_array)
    {
        for (j, item) in items.iter().enumerate() {
            read_object(item, &format!("{at}.items[{j}]"), keep_others, out)?;
        }
        return Ok(());
    }
    let karpenter_kind = matches!(kind, "NodePool" | "EC2NodeClass" | "Provisioner" | "AWSNodeTemplate")
        && matches!(api_version.split('/').next(), Some("karpenter.sh" | "karpenter.k8s.aws"));
    let known = matches!(
        (api_version, kind),
        (NODEPOOL_V1 | NODEPOOL_V1BETA1, "NodePool")
            | (PROVISIONER_V1ALPHA5, "Provisioner")
            | (EC2NODECLASS_V1 | EC2NODECLASS_V1BETA1, "EC2NodeClass")
            | (AWSNODETEMPLATE_V1ALPHA1, "AWSNodeTemplate")
    );
    if !known {
        if keep_others && !karpenter_kind {
            out.push(Document::Other(value.clone()));
            return Ok(());
        }
        return Err(doc_err("kind", format!("unsupported apiVersion/kind {api_version}/{kind} (supported: {SUPPORTED})")));
    }
    let name = obj.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or_default();
    check_name(name, kind == "NodePool" || kind == "Provisioner").map_err(|r| doc_err("metadata.name", r))?;
    let empty = Value::Object(serde_json::Map::new());
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => &empty,
        Some(s) => s,
    };
    let name = name.to_owned();
    let annotations: BTreeMap<String, String> = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .map(|a| a.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    match (api_version, kind) {
        (NODEPOOL_V1, _) => {
            let spec = typed(spec, &format!("nodepool/{name}"), locate_nodepool)?;
            out.push(Document::Config(ConfigDocument::NodePool { name, spec, annotations: annotations.clone(), source_api_version: api_version.into() }));
        }
        (NODEPOOL_V1BETA1, _) => {
            let old = typed(spec, &format!("nodepool/{name}"), locate_v1beta1_nodepool)?;
            let spec = convert::v1beta1_nodepool_to_v1(&name, &old)?;
            out.push(Document::Config(ConfigDocument::NodePool { name, spec, annotations: annotations.clone(), source_api_version: api_version.into() }));
        }
        (PROVISIONER_V1ALPHA5, _) => {
            let old = typed(spec, &format!("provisioner/{name}"), locate_provisioner)?;
            let converted = convert::provisioner_to_v1(&name, &old)?;
            if let Some(class) = converted.node_class {
                out.push(Document::Config(ConfigDocument::NodeClass { name: name.clone(), spec: class }));
            }
            out.push(Document::Config(ConfigDocument::NodePool {
                name,
                spec: converted.node_pool,
                annotations,
                source_api_version: api_version.into(),
            }));
        }
        (EC2NODECLASS_V1, _) => {
            let spec = typed(spec, &format!("nodeclass/{name}"), locate_nodeclass)?;
            out.push(Document::Config(ConfigDocument::NodeClass { name, spec }));
        }
        (EC2NODECLASS_V1BETA1, _) => {
            let old = typed(spec, &format!("nodeclass/{name}"), locate_nodeclass)?;
            let spec = convert::v1beta1_nodeclass_to_v1(&name, &old)?;
            out.push(Document::Config(ConfigDocument::NodeClass { name, spec }));
        }
        _ => {
            let old = typed(spec, &format!("awsnodetemplate/{name}"), locate_provider)?;
            let spec = convert::aws_node_template_to_v1(&name, &old)?;
            out.push(Document::Config(ConfigDocument::NodeClass { name, spec }));
        }
    }
    Ok(())
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A DNS-1123 subdomain, as Kubernetes names are; a NodePool's name is also
/// a label value (`karpenter.sh/nodepool`), so at most 63 characters.
fn check_name(name: &str, label_value: bool) -> Result<(), String> {
    if name.is_empty() {
        return Err("required".into());
    }
    let max = if label_value { 63 } else { 253 };
    if name.len() > max {
        return Err(format!("{name:?} is longer than {max} characters"));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum);
    if !ok {
        return Err(format!(
            "{name:?} is not a valid name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

// ---- typed reading with field paths ----------------------------------------

/// `(field, reason)` of the narrowest part of a value that fails to read.
type Probe = fn(&Value, &str) -> Option<(String, String)>;

fn typed<T: DeserializeOwned>(spec: &Value, item: &str, locate: Probe) -> Result<T, ConfigError> {
    serde_json::from_value(spec.clone()).map_err(|e| {
        let (field, reason) = locate(spec, "spec").unwrap_or_else(|| ("spec".into(), e.to_string()));
        ConfigError { item: item.to_owned(), field, reason }
    })
}

fn leaf<T: DeserializeOwned>(v: &Value, path: &str) -> Option<(String, String)> {
    serde_json::from_value::<T>(v.clone()).err().map(|e| (path.to_owned(), e.to_string()))
}

fn each<T: DeserializeOwned>(v: &Value, path: &str) -> Option<(String, String)> {
    if let Some(items) = v.as_array()
        && let Some(e) = items.iter().enumerate().find_map(|(i, x)| leaf::<T>(x, &format!("{path}[{i}]")))
    {
        return Some(e);
    }
    leaf::<Vec<T>>(v, path)
}

/// The failing child, or the object itself (unknown or missing fields).
fn object<T: DeserializeOwned>(v: &Value, path: &str, children: &[(&str, Probe)]) -> Option<(String, String)> {
    let whole = leaf::<T>(v, path)?;
    if let Some(obj) = v.as_object() {
        for (key, probe) in children {
            if let Some(child) = obj.get(*key)
                && let Some(e) = probe(child, &format!("{path}.{key}"))
            {
                return Some(e);
            }
        }
    }
    Some(whole)
}

fn locate_nodepool(v: &Value, p: &str) -> Option<(String, String)> {
    fn template(v: &Value, p: &str) -> Option<(String, String)> {
        object::<NodeClaimTemplate>(v, p, &[("metadata", leaf::<TemplateMetadata>), ("spec", template_spec)])
    }
    fn template_spec(v: &Value, p: &str) -> Option<(String, String)> {
        object::<NodeClaimTemplateSpec>(
            v,
            p,
            &[
                ("requirements", each::<RequirementSpec>),
                ("taints", each::<TaintSpec>),
                ("startupTaints", each::<TaintSpec>),
                ("nodeClassRef", leaf::<NodeClassRef>),
                ("expireAfter", leaf::<String>),
                ("terminationGracePeriod", leaf::<String>),
                ("kubelet", leaf::<KubeletSpec>),
            ],
        )
    }
    fn disruption(v: &Value, p: &str) -> Option<(String, String)> {
        object::<DisruptionSpec>(
            v,
            p,
            &[("consolidationPolicy", leaf::<String>), ("consolidateAfter", leaf::<String>), ("budgets", each::<BudgetSpec>)],
        )
    }
    object::<NodePoolSpec>(
        v,
        p,
        &[
            ("template", template),
            ("disruption", disruption),
            ("limits", leaf::<BTreeMap<String, Value>>),
            ("weight", leaf::<i32>),
        ],
    )
}

fn locate_v1beta1_nodepool(v: &Value, p: &str) -> Option<(String, String)> {
    fn template(v: &Value, p: &str) -> Option<(String, String)> {
        object::<V1beta1Template>(v, p, &[("metadata", leaf::<TemplateMetadata>), ("spec", template_spec)])
    }
    fn template_spec(v: &Value, p: &str) -> Option<(String, String)> {
        object::<V1beta1TemplateSpec>(
            v,
            p,
            &[
                ("requirements", each::<RequirementSpec>),
                ("taints", each::<TaintSpec>),
                ("startupTaints", each::<TaintSpec>),
                ("nodeClassRef", leaf::<LegacyRef>),
            ],
        )
    }
    fn disruption(v: &Value, p: &str) -> Option<(String, String)> {
        object::<V1beta1Disruption>(v, p, &[("budgets", each::<BudgetSpec>)])
    }
    object::<V1beta1NodePoolSpec>(
        v,
        p,
        &[("template", template), ("disruption", disruption), ("limits", leaf::<BTreeMap<String, Value>>), ("weight", leaf::<i32>)],
    )
}

fn locate_provider(v: &Value, p: &str) -> Option<(String, String)> {
    object::<AwsProviderSpec>(v, p, &[])
}

fn locate_provisioner(v: &Value, p: &str) -> Option<(String, String)> {
    object::<ProvisionerSpec>(
        v,
        p,
        &[
            ("requirements", each::<RequirementSpec>),
            ("taints", each::<TaintSpec>),
            ("startupTaints", each::<TaintSpec>),
            ("limits", leaf::<ProvisionerLimits>),
            ("weight", leaf::<i32>),
            ("provider", locate_provider),
            ("providerRef", leaf::<LegacyRef>),
            ("ttlSecondsAfterEmpty", leaf::<i64>),
            ("ttlSecondsUntilExpired", leaf::<i64>),
            ("consolidation", leaf::<ProvisionerConsolidation>),
        ],
    )
}

fn locate_nodeclass(v: &Value, p: &str) -> Option<(String, String)> {
    object::<EC2NodeClassSpec>(
        v,
        p,
        &[
            ("amiSelectorTerms", each::<AmiSelectorTermSpec>),
            ("subnetSelectorTerms", each::<SubnetSelectorTermSpec>),
            ("securityGroupSelectorTerms", each::<SecurityGroupSelectorTermSpec>),
            ("kubelet", leaf::<KubeletSpec>),
            ("amiFamily", leaf::<String>),
            ("role", leaf::<String>),
            ("instanceProfile", leaf::<String>),
            ("userData", leaf::<String>),
            ("associatePublicIPAddress", leaf::<bool>),
            ("detailedMonitoring", leaf::<bool>),
        ],
    )
}

// ---- the validated set ------------------------------------------------------

/// Every NodePool and NodeClass of a configuration, validated together.
#[derive(Debug, Clone, Default)]
pub struct ConfigSet {
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<NodeClass>,
}

impl ConfigSet {
    /// Validates every document and the references between them; all errors
    /// are returned, not only the first. Each NodePool must name an existing
    /// NodeClass; its kubelet settings become the class's with the pool's
    /// own (a v1beta1 compatibility field) on top.
    pub fn from_documents(docs: &[ConfigDocument]) -> Result<ConfigSet, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut set = ConfigSet::default();
        let mut class_names = BTreeSet::new();
        let duplicate = |item: String| ConfigError { item, field: "metadata.name".into(), reason: "defined more than once".into() };
        for doc in docs {
            if let ConfigDocument::NodeClass { name, spec } = doc {
                if !class_names.insert(name.as_str()) {
                    errors.push(duplicate(format!("nodeclass/{name}")));
                    continue;
                }
                match NodeClass::from_spec(name, spec) {
                    Ok(c) => set.node_classes.push(c),
                    Err(e) => errors.push(e),
                }
            }
        }
        let mut pool_names = BTreeSet::new();
        for doc in docs {
            let ConfigDocument::NodePool { name, spec, .. } = doc else { continue };
            if !pool_names.insert(name.as_str()) {
                errors.push(duplicate(format!("nodepool/{name}")));
                continue;
            }
            let mut pool = match NodePool::from_spec(name, spec) {
                Ok(p) => p,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let err = |field: &str, reason: String| ConfigError { item: format!("nodepool/{name}"), field: field.into(), reason };
            match pool.node_class.as_deref() {
                None => errors.push(err("spec.template.spec.nodeClassRef", "required: the EC2NodeClass nodes launch with".into())),
                Some(class) if !class_names.contains(class) => errors.push(err(
                    "spec.template.spec.nodeClassRef.name",
                    format!("EC2NodeClass {class:?} does not exist"),
                )),
                Some(class) => {
                    if let Some(c) = set.node_classes.iter().find(|c| c.name == class) {
                        pool.launch_kubelet = pool.launch_kubelet.merged_over(&c.kubelet);
                        pool.kubelet = pool.launch_kubelet.to_kubelet_config();
                    }
                    set.node_pools.push(pool);
                }
            }
        }
        if errors.is_empty() { Ok(set) } else { Err(errors) }
    }

    /// Reads and validates a stream of configuration documents.
    pub fn parse(text: &str) -> Result<ConfigSet, Vec<ConfigError>> {
        let docs = parse_documents(text).map_err(|e| vec![e])?;
        ConfigSet::from_documents(&docs)
    }

    pub fn node_pool(&self, name: &str) -> Option<&NodePool> {
        self.node_pools.iter().find(|p| p.name == name)
    }

    pub fn node_class(&self, name: &str) -> Option<&NodeClass> {
        self.node_classes.iter().find(|c| c.name == name)
    }

    /// The NodeClass a NodePool launches with.
    pub fn node_class_of(&self, pool: &NodePool) -> Option<&NodeClass> {
        pool.node_class.as_deref().and_then(|n| self.node_class(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::disruption::{BudgetNodes, ConsolidationPolicy};
    use crate::config::nodeclass::{AmiFamily, AmiSelector, NodeIdentity, SelectorTerm};
    use crate::scheduling::labels;
    use jiff::SignedDuration;

    const V1ALPHA5: &str = include_str!("testdata/walkthrough-v1alpha5.yaml");
    const V1BETA1: &str = include_str!("testdata/walkthrough-v1beta1.yaml");
    const V1: &str = include_str!("testdata/v1.yaml");

    fn one_error(text: &str) -> ConfigError {
        match ConfigSet::parse(text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(mut errors) => {
                assert_eq!(errors.len(), 1, "{errors:?}");
                errors.remove(0)
            }
        }
    }

    #[test]
    fn walkthrough_v1alpha5_provisioners() {
        // The second Provisioner has no subnet or security group selectors,
        // which Karpenter required: the error names the field.
        let e = parse_documents(V1ALPHA5).expect_err("t101 has no subnetSelector");
        assert_eq!(e.item, "provisioner/t101");
        assert_eq!(e.field, "spec.provider.subnetSelector");
        assert!(e.reason.contains("required"), "{}", e.reason);

        // The first converts (to a NodeClass and a NodePool) and validates.
        let first = V1ALPHA5.split("\n---\n").next().expect("first document");
        let docs = parse_documents(first).expect("default converts");
        assert_eq!(docs.len(), 2, "an inline provider yields a NodeClass too");
        assert!(matches!(&docs[0], ConfigDocument::NodeClass { name, .. } if name == "default"));
        assert!(matches!(&docs[1], ConfigDocument::NodePool { source_api_version, .. } if source_api_version == PROVISIONER_V1ALPHA5));
        let set = ConfigSet::from_documents(&docs).expect("valid");
        let pool = set.node_pool("default").expect("pool");
        assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(pool.disruption.consolidate_after, Some(SignedDuration::from_secs(30)));
        assert_eq!(pool.expire_after, Some(SignedDuration::from_secs(1800)));
        assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
        assert!(pool.requirements.allows(labels::CAPACITY_TYPE, Some("spot")));
        assert!(pool.requirements.allows(labels::CAPACITY_TYPE, Some("on-demand")));
        assert!(pool.requirements.allows(labels::ARCH, Some("arm64")));
        let class = set.node_class_of(pool).expect("class");
        let any: BTreeMap<String, String> = [("kubernetes.io/cluster/karpenter-demo".to_string(), "*".to_string())].into();
        assert_eq!(class.subnet_selector_terms, vec![SelectorTerm::Tags(any.clone())]);
        assert_eq!(class.security_group_selector_terms, vec![SelectorTerm::Tags(any)]);
        assert_eq!(class.ami_family, AmiFamily::AL2);
        // The walkthrough relied on the aws.defaultInstanceProfile setting.
        assert_eq!(class.identity, NodeIdentity::DefaultInstanceProfile);
    }

    #[test]
    fn walkthrough_t101_with_selectors_validates() {
        let t101 = V1ALPHA5.split("\n---\n").nth(1).expect("second document").replace(
            "    instanceProfile:",
            "    subnetSelector:\n      karpenter.sh/discovery: t101\n    securityGroupSelector:\n      karpenter.sh/discovery: t101\n    instanceProfile:",
        );
        let set = ConfigSet::parse(&t101).expect("valid");
        let pool = set.node_pool("t101").expect("pool");
        assert_eq!(pool.expire_after, Some(SignedDuration::from_hours(720)));
        assert_eq!(pool.disruption.consolidate_after, None);
        assert_eq!(
            set.node_class("t101").map(|c| c.identity.clone()),
            Some(NodeIdentity::InstanceProfile("KarpenterNodeInstanceProfile-t101-karpenter".into()))
        );
    }

    #[test]
    fn walkthrough_v1beta1() {
        let docs = parse_documents(V1BETA1).expect("parses");
        assert_eq!(docs.len(), 2);
        let set = ConfigSet::from_documents(&docs).expect("valid");
        let class = set.node_class("default").expect("class");
        assert_eq!(class.ami_family, AmiFamily::AL2);
        assert_eq!(class.ami_selector_terms, vec![AmiSelector::Alias { family: AmiFamily::AL2, version: "latest".into() }]);
        assert_eq!(class.identity, NodeIdentity::Role("karpenter-t101-karpenter".into()));
        assert_eq!(class.tags.get("karpenter.sh/discovery").map(String::as_str), Some("t101-karpenter"));
        let pool = set.node_pool("default").expect("pool");
        assert_eq!(pool.node_class.as_deref(), Some("default"));
        assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(pool.disruption.consolidate_after, Some(SignedDuration::from_secs(30)));
        assert_eq!(pool.expire_after, Some(SignedDuration::from_hours(720)));
        assert_eq!(pool.disruption.budgets.len(), 1);
        assert_eq!(pool.disruption.budgets[0].nodes, BudgetNodes::Percent(10));
        assert!(pool.requirements.allows(labels::INSTANCE_GENERATION, Some("3")));
        assert!(!pool.requirements.allows(labels::INSTANCE_GENERATION, Some("2")));
        assert!(pool.requirements.allows(labels::INSTANCE_CPU, Some("16")));
        assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
    }

    #[test]
    fn v1_documents_and_others_in_one_stream() {
        let docs = parse_stream(V1).expect("parses");
        let others: Vec<&Value> = docs.iter().filter_map(|d| if let Document::Other(v) = d { Some(v) } else { None }).collect();
        assert_eq!(others.len(), 1);
        assert_eq!(others[0]["kind"], "Deployment");
        let config: Vec<ConfigDocument> =
            docs.into_iter().filter_map(|d| if let Document::Config(c) = d { Some(c) } else { None }).collect();
        let set = ConfigSet::from_documents(&config).expect("valid");
        let pool = set.node_pool("general").expect("pool");
        assert_eq!(pool.kubelet.max_pods, Some(58), "the class's maxPods reaches the allocatable math");
        assert_eq!(pool.launch_kubelet.pods_per_core, Some(4), "the pool's own setting wins");
        assert_eq!(pool.termination_grace_period, Some(SignedDuration::from_hours(24)));
        assert_eq!(pool.expire_after, None);
        assert_eq!(pool.disruption.budgets.len(), 2);
        assert!(set.node_class("al2023").is_some());
        // Without keeping others, the Deployment is an error naming its position.
        let e = parse_documents(V1).expect_err("Deployment");
        assert_eq!(e.item, "document[3]");
        assert_eq!(e.field, "kind");
        assert!(e.reason.contains("apps/v1/Deployment"), "{}", e.reason);
    }

    #[test]
    fn json_and_lists() {
        let json = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
             "spec": {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "role": "r",
                      "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}},
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
             "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}, "requirements": []}}}}
        ]}"#;
        let set = ConfigSet::parse(json).expect("valid");
        assert_eq!(set.node_pools.len(), 1);
        assert_eq!(set.node_classes[0].ami_family, AmiFamily::Bottlerocket);
    }

    #[test]
    fn from_value_reads_one_object() {
        let docs: Vec<Value> = serde_norway::Deserializer::from_str(V1ALPHA5)
            .map(|d| Value::deserialize(d).expect("yaml"))
            .collect();
        let converted = from_value(&docs[0], 0).expect("converts");
        assert_eq!(converted.iter().map(ConfigDocument::name).collect::<Vec<_>>(), vec!["default", "default"]);
        // What a store keeps (the v1 spec as JSON) reads back to the same spec.
        for doc in &converted {
            match doc {
                ConfigDocument::NodePool { spec, .. } => {
                    let back: NodePoolSpec = serde_json::from_value(serde_json::to_value(spec).expect("json")).expect("reads back");
                    assert_eq!(&back, spec);
                }
                ConfigDocument::NodeClass { spec, .. } => {
                    let back: EC2NodeClassSpec = serde_json::from_value(serde_json::to_value(spec).expect("json")).expect("reads back");
                    assert_eq!(&back, spec);
                    assert!(NodeClass::from_spec("default", &back).is_ok());
                }
            }
        }
        let e = from_value(&docs[1], 1).expect_err("t101");
        assert_eq!(e.field, "spec.provider.subnetSelector");
        let e = from_value(&serde_json::json!({"apiVersion": "v1", "kind": "Pod"}), 4).expect_err("a pod");
        assert_eq!((e.item.as_str(), e.field.as_str()), ("document[4]", "kind"));
    }

    #[test]
    fn empty_documents_are_skipped() {
        assert_eq!(parse_documents("").expect("empty"), vec![]);
        assert_eq!(parse_documents("---\n---\n# just a comment\n").expect("empty"), vec![]);
    }

    #[test]
    fn document_errors_name_the_position() {
        let cases = [
            ("---\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: x}\n", "document[1]", "kind", "karpenter.sh/v1/NodeClaim"),
            ("apiVersion: karpenter.sh/v2\nkind: NodePool\nmetadata: {name: x}\n", "document[0]", "kind", "unsupported apiVersion/kind"),
            ("kind: NodePool\nmetadata: {name: x}\n", "document[0]", "apiVersion", "required"),
            ("apiVersion: karpenter.sh/v1\nkind: NodePool\n", "document[0]", "metadata.name", "required"),
            ("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: Default}\n", "document[0]", "metadata.name", "not a valid name"),
            ("- a\n- b\n", "document[0]", "(document)", "expected an object"),
            ("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {limits: [1}\n", "document[0]", "line 4 column", ""),
        ];
        for (text, item, field, reason) in cases {
            let e = parse_documents(text).expect_err(text);
            assert_eq!(e.item, item, "{text}");
            assert!(e.field.starts_with(field), "{text}: {}", e.field);
            assert!(e.reason.contains(reason), "{text}: {}", e.reason);
        }
        // A Karpenter kind of an unknown version is refused even when keeping others.
        let e = parse_stream("apiVersion: karpenter.sh/v1beta2\nkind: NodePool\nmetadata: {name: x}\n").expect_err("v1beta2");
        assert_eq!(e.field, "kind");
    }

    #[test]
    fn spec_errors_name_the_narrowest_field() {
        let pool = |spec: &str| format!("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n{spec}");
        let cases = [
            (pool("  template:\n    spec:\n      requirements:\n        - {key: a, operator: In, values: [x]}\n        - {key: b, operator: In, value: [x]}\n"), "nodepool/p", "spec.template.spec.requirements[1]", "unknown field `value`"),
            (pool("  disruption:\n    expireAfter: 720h\n"), "nodepool/p", "spec.disruption", "unknown field `expireAfter`"),
            (pool("  disruption:\n    budgets:\n      - nodes: 10%\n        reason: [Empty]\n"), "nodepool/p", "spec.disruption.budgets[0]", "unknown field `reason`"),
            (pool("  weight: heavy\n"), "nodepool/p", "spec.weight", "invalid type"),
            (pool("  template:\n    spec:\n      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: c}\n"), "nodepool/p", "spec.template.spec.nodeClassRef", "unknown field `apiVersion`"),
            ("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  subnetSelectorTerms:\n    - tags: {a: b}\n    - tag: {a: b}\n".to_owned(), "nodeclass/c", "spec.subnetSelectorTerms[1]", "unknown field `tag`"),
            ("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  provider:\n    subnetSelectors: {a: b}\n".to_owned(), "provisioner/p", "spec.provider", "unknown field `subnetSelectors`"),
        ];
        for (text, item, field, reason) in cases {
            let e = parse_documents(&text).expect_err(&text);
            assert_eq!((e.item.as_str(), e.field.as_str()), (item, field), "{text}");
            assert!(e.reason.contains(reason), "{text}: {}", e.reason);
        }
    }

    #[test]
    fn invalid_items_in_a_set() {
        let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  amiSelectorTerms: [{alias: al2023@latest}]\n  role: r\n  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n";
        let pool = |name: &str, tmpl: &str| format!("---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n{tmpl}");
        let ref_c = "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}\n";
        let cases = [
            (format!("{class}{}", pool("p", "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}\n")), "nodepool/p", "spec.template.spec.nodeClassRef.name", "does not exist"),
            (format!("{class}{}", pool("p", "      requirements: []\n")), "nodepool/p", "spec.template.spec.nodeClassRef", "required"),
            (format!("{class}{}{}", pool("p", ref_c), pool("p", ref_c)), "nodepool/p", "metadata.name", "more than once"),
            (format!("{class}---\n{class}{}", pool("p", ref_c)), "nodeclass/c", "metadata.name", "more than once"),
            (format!("{class}{}", pool("p", &format!("{ref_c}      requirements:\n        - {{key: a, operator: In, values: [x]}}\n        - {{key: b, operator: Within, values: [x]}}\n"))), "nodepool/p", "spec.template.spec.requirements[1]", "unknown operator"),
            (format!("{class}{}", pool("p", &format!("{ref_c}      expireAfter: 30d\n"))), "nodepool/p", "spec.template.spec.expireAfter", "expected a duration"),
            (format!("{class}{}", pool("p", &format!("{ref_c}      terminationGracePeriod: Never\n"))), "nodepool/p", "spec.template.spec.terminationGracePeriod", "expected a duration"),
            (format!("{class}{}", pool("p", "      nodeClassRef: {group: karpenter.k8s.aws, kind: AWSNodeTemplate, name: c}\n")), "nodepool/p", "spec.template.spec.nodeClassRef.kind", "unsupported kind"),
            (class.replace("role: r", "role: r\n  instanceProfile: p") + &pool("p", ref_c), "nodeclass/c", "spec.instanceProfile", "not both"),
        ];
        for (text, item, field, reason) in cases {
            let e = one_error(&text);
            assert_eq!((e.item.as_str(), e.field.as_str()), (item, field), "{text}");
            assert!(e.reason.contains(reason), "{text}: {}", e.reason);
        }
    }

    #[test]
    fn all_errors_are_collected() {
        let text = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec: {weight: 500, template: {spec: {nodeClassRef: {name: c}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: b}\nspec: {template: {spec: {nodeClassRef: {name: d}}}}\n";
        let errors = ConfigSet::parse(text).expect_err("three errors");
        let got: Vec<(&str, &str)> = errors.iter().map(|e| (e.item.as_str(), e.field.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("nodeclass/c", "spec.amiSelectorTerms"),
                ("nodepool/a", "spec.weight"),
                ("nodepool/b", "spec.template.spec.nodeClassRef.name"),
            ]
        );
    }
}
