//! Reading configuration files: a YAML (or JSON) stream of Kubernetes-style
//! documents holding NodePools and NodeClasses in any supported schema
//! version, converted to the v1 forms, and [`ConfigSet`], the validated whole.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ConfigError;
use super::buffer::{CAPACITYBUFFER_SPEC, CapacityBuffer, CapacityBufferSpec};
use super::convert::{
    self, AwsProviderSpec, LegacyRef, ProvisionerConsolidation, ProvisionerLimits, ProvisionerSpec,
    V1beta1Disruption, V1beta1NodePoolSpec, V1beta1Template, V1beta1TemplateSpec,
};
use super::disruption::{BudgetSpec, DisruptionSpec};
use super::nodeclass::{
    AmiSelectorTermSpec, EC2NodeClassSpec, KubeletSpec, NODECLASS_SPEC, NodeClass,
    SecurityGroupSelectorTermSpec, SubnetSelectorTermSpec,
};
use super::nodepool::{
    NODE_CLASS_GROUP, NODE_CLASS_KIND, NODEPOOL_SPEC, NodeClaimTemplate, NodeClaimTemplateSpec,
    NodeClassRef, NodePool, NodePoolSpec, RequirementSpec, TaintSpec, TemplateMetadata,
};
use super::overlay::{NODEOVERLAY_SPEC, NodeOverlay, NodeOverlaySpec};
use super::schema::{self, Kind, Marked};
use super::settings::{
    FeatureGatesSpec, KARPENTER_NODES_ANNOTATION, KarpenterNodes, REBALANCE_ANNOTATION,
    RebalancePolicy, SETTINGS_NAME, SETTINGS_SPEC, Settings, SettingsSpec,
};
use crate::config::{ConfigItem, ConfigKind};

pub const NODEPOOL_V1: &str = "karpenter.sh/v1";
pub const NODEPOOL_V1BETA1: &str = "karpenter.sh/v1beta1";
pub const PROVISIONER_V1ALPHA5: &str = "karpenter.sh/v1alpha5";
pub const EC2NODECLASS_V1: &str = "karpenter.k8s.aws/v1";
pub const EC2NODECLASS_V1BETA1: &str = "karpenter.k8s.aws/v1beta1";
pub const AWSNODETEMPLATE_V1ALPHA1: &str = "karpenter.k8s.aws/v1alpha1";
pub const SETTINGS_V1ALPHA1: &str = "nodewright.io/v1alpha1";
pub const NODEOVERLAY_V1ALPHA1: &str = "karpenter.sh/v1alpha1";
pub const CAPACITYBUFFER_V1BETA1: &str = "autoscaling.x-k8s.io/v1beta1";

const SUPPORTED: &str = "karpenter.sh/v1 NodePool, karpenter.k8s.aws/v1 EC2NodeClass, karpenter.sh/v1beta1 NodePool, \
karpenter.k8s.aws/v1beta1 EC2NodeClass, karpenter.sh/v1alpha5 Provisioner, karpenter.k8s.aws/v1alpha1 AWSNodeTemplate, \
karpenter.sh/v1alpha1 NodeOverlay, autoscaling.x-k8s.io/v1beta1 CapacityBuffer (with the v1 PodTemplate it names), \
nodewright.io/v1alpha1 Settings";

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
    NodeClass {
        name: String,
        spec: EC2NodeClassSpec,
    },
    /// `nodewright.io/v1alpha1` `Settings` (one, named `default`).
    Settings { name: String, spec: SettingsSpec },
    /// `karpenter.sh/v1alpha1` `NodeOverlay`.
    NodeOverlay { name: String, spec: NodeOverlaySpec },
    /// `autoscaling.x-k8s.io/v1beta1` `CapacityBuffer`.
    CapacityBuffer {
        name: String,
        spec: CapacityBufferSpec,
    },
}

impl ConfigDocument {
    pub fn name(&self) -> &str {
        match self {
            ConfigDocument::NodePool { name, .. }
            | ConfigDocument::NodeClass { name, .. }
            | ConfigDocument::Settings { name, .. }
            | ConfigDocument::NodeOverlay { name, .. }
            | ConfigDocument::CapacityBuffer { name, .. } => name,
        }
    }

    /// `nodepool/<name>`, `nodeclass/<name>`, `settings/<name>`: how errors name it.
    pub fn item_name(&self) -> String {
        let kind = match self {
            ConfigDocument::NodePool { .. } => "nodepool",
            ConfigDocument::NodeClass { .. } => "nodeclass",
            ConfigDocument::Settings { .. } => "settings",
            ConfigDocument::NodeOverlay { .. } => "nodeoverlay",
            ConfigDocument::CapacityBuffer { .. } => "capacitybuffer",
        };
        format!("{kind}/{}", self.name())
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

/// What reading a stream of documents yields: every document that reads
/// (with what did not fit taken out), every error, and every warning.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub docs: Vec<Document>,
    pub errors: Vec<ConfigError>,
    /// What is allowed but probably not meant, or a default an older form
    /// relied on (named like errors).
    pub warnings: Vec<ConfigError>,
    /// The v1 `PodTemplate`s of the stream by (namespace, name): what the
    /// CapacityBuffers name.
    pub pod_templates: BTreeMap<(String, String), Value>,
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
    let mut out = Parsed::default();
    let mut value = value.clone();
    let dups = schema::take_duplicates(&mut value, "");
    read_object(
        &value,
        &format!("document[{index}]"),
        false,
        &dups,
        &mut out,
    );
    if let Some(e) = out.errors.into_iter().next() {
        return Err(e);
    }
    Ok(out
        .docs
        .into_iter()
        .filter_map(|d| match d {
            Document::Config(c) => Some(c),
            Document::Other(_) => None,
        })
        .collect())
}

fn parse(text: &str, keep_others: bool) -> Result<Vec<Document>, ConfigError> {
    let (docs, mut errors) = parse_all(text, keep_others);
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(errors.swap_remove(0))
    }
}

/// Every document that reads, and an error for each mistake (a YAML
/// syntax error ends the stream: what follows it cannot be trusted).
pub fn parse_all(text: &str, keep_others: bool) -> (Vec<Document>, Vec<ConfigError>) {
    let p = parse_checked(text, keep_others);
    (p.docs, p.errors)
}

/// [`parse_all`] with the warnings: every document, every mistake of each
/// (an unknown field or a duplicate key does not hide the others).
pub fn parse_checked(text: &str, keep_others: bool) -> Parsed {
    let mut out = Parsed::default();
    let (values, syntax) = raw_documents_lenient(text);
    for (i, mut value) in values.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        let dups = schema::take_duplicates(&mut value, "");
        read_object(
            &value,
            &format!("document[{i}]"),
            keep_others,
            &dups,
            &mut out,
        );
    }
    out.errors.extend(syntax);
    // A buffer's template comes from the PodTemplate it names, in this file.
    for d in &mut out.docs {
        if let Document::Config(ConfigDocument::CapacityBuffer { spec, .. }) = d
            && spec.pod_template.is_none()
            && let Some(r) = &spec.pod_template_ref
        {
            let ns = spec.namespace.clone().unwrap_or_else(|| "default".into());
            spec.pod_template = out.pod_templates.get(&(ns, r.name.clone())).cloned();
        }
    }
    out
}

/// [`parse_all`] keeping only configuration documents; others are errors.
pub fn parse_config_all(text: &str) -> (Vec<ConfigDocument>, Vec<ConfigError>) {
    let (docs, errors) = parse_all(text, false);
    (config_only(docs), errors)
}

/// The configuration documents of a stream's documents.
pub fn config_only(docs: Vec<Document>) -> Vec<ConfigDocument> {
    docs.into_iter()
        .filter_map(|d| {
            if let Document::Config(c) = d {
                Some(c)
            } else {
                None
            }
        })
        .collect()
}

/// The errors of reading documents, then those of validating them
/// together, less what the first already said (a missing or mistyped field
/// is not reported again as invalid).
pub fn merge_errors(read: Vec<ConfigError>, set: Vec<ConfigError>) -> Vec<ConfigError> {
    let mut out = read;
    for e in set {
        let repeated = out.iter().any(|r| {
            r.item == e.item
                && (r.field == e.field
                    || (e.field.starts_with(r.field.as_str())
                        && matches!(e.field.as_bytes().get(r.field.len()), Some(b'.' | b'['))))
        });
        if !repeated {
            out.push(e);
        }
    }
    out
}

/// The documents of a YAML stream, or of JSON (one object, or an array of
/// them), up to the first syntax error (returned with them). Repeated keys
/// are marked ([`schema::Marked`]), not collapsed.
fn raw_documents_lenient(text: &str) -> (Vec<Value>, Option<ConfigError>) {
    let trimmed = text.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(Marked(v)) = serde_json::from_str::<Marked>(text)
    {
        return (
            match v {
                Value::Array(items) => items,
                other => vec![other],
            },
            None,
        );
    }
    let mut out = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        match Marked::deserialize(de) {
            Ok(Marked(value)) => out.push(value),
            Err(e) => {
                let field = e.location().map_or_else(
                    || "(document)".to_owned(),
                    |l| format!("line {} column {}", l.line(), l.column()),
                );
                return (
                    out,
                    Some(ConfigError {
                        item: format!("document[{i}]"),
                        field,
                        reason: e.to_string(),
                    }),
                );
            }
        }
    }
    (out, None)
}

/// How errors name a document of this kind (`nodepool/<name>`).
fn item_kind(kind: &str) -> &'static str {
    match kind {
        "NodePool" => "nodepool",
        "EC2NodeClass" => "nodeclass",
        "Provisioner" => "provisioner",
        "AWSNodeTemplate" => "awsnodetemplate",
        "Settings" => "settings",
        "NodeOverlay" => "nodeoverlay",
        "CapacityBuffer" => "capacitybuffer",
        _ => "document",
    }
}

/// The top-level fields of a Kubernetes object.
const TOP_LEVEL: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

fn read_object(value: &Value, at: &str, keep_others: bool, dups: &[String], out: &mut Parsed) {
    let doc_err = |field: &str, reason: String| ConfigError {
        item: at.to_owned(),
        field: field.to_owned(),
        reason,
    };
    let Some(obj) = value.as_object() else {
        out.errors.push(doc_err(
            "(document)",
            format!(
                "expected an object with apiVersion and kind, got {}",
                kind_of(value)
            ),
        ));
        return;
    };
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version.is_empty() {
        out.errors.push(doc_err("apiVersion", "required".into()));
        return;
    }
    if kind.is_empty() {
        out.errors.push(doc_err("kind", "required".into()));
        return;
    }
    if kind.ends_with("List")
        && let Some(items) = obj.get("items").and_then(Value::as_array)
    {
        for (j, item) in items.iter().enumerate() {
            let prefix = format!("items[{j}].");
            let item_dups: Vec<String> = dups
                .iter()
                .filter_map(|d| d.strip_prefix(&prefix).map(str::to_owned))
                .collect();
            read_object(
                item,
                &format!("{at}.items[{j}]"),
                keep_others,
                &item_dups,
                out,
            );
        }
        return;
    }
    let karpenter_kind = matches!(
        kind,
        "NodePool"
            | "EC2NodeClass"
            | "Provisioner"
            | "AWSNodeTemplate"
            | "Settings"
            | "NodeOverlay"
            | "CapacityBuffer"
    ) && matches!(
        api_version.split('/').next(),
        Some("karpenter.sh" | "karpenter.k8s.aws" | "nodewright.io" | "autoscaling.x-k8s.io")
    );
    if (api_version, kind) == ("v1", "PodTemplate") {
        let meta = obj.get("metadata");
        let field = |f: &str| {
            meta.and_then(|m| m.get(f))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let key = (
            field("namespace").unwrap_or_else(|| "default".into()),
            field("name").unwrap_or_default(),
        );
        out.pod_templates
            .insert(key, obj.get("template").cloned().unwrap_or(Value::Null));
        if keep_others {
            out.docs.push(Document::Other(value.clone()));
        }
        return;
    }
    let known = matches!(
        (api_version, kind),
        (NODEPOOL_V1 | NODEPOOL_V1BETA1, "NodePool")
            | (PROVISIONER_V1ALPHA5, "Provisioner")
            | (EC2NODECLASS_V1 | EC2NODECLASS_V1BETA1, "EC2NodeClass")
            | (AWSNODETEMPLATE_V1ALPHA1, "AWSNodeTemplate")
            | (SETTINGS_V1ALPHA1, "Settings")
            | (NODEOVERLAY_V1ALPHA1, "NodeOverlay")
            | (CAPACITYBUFFER_V1BETA1, "CapacityBuffer")
    );
    if !known {
        if keep_others && !karpenter_kind {
            out.docs.push(Document::Other(value.clone()));
            return;
        }
        out.errors.push(doc_err(
            "kind",
            format!("unsupported apiVersion/kind {api_version}/{kind} (supported: {SUPPORTED})"),
        ));
        return;
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Err(r) = check_name(name, kind == "NodePool" || kind == "Provisioner") {
        out.errors.push(doc_err("metadata.name", r));
        return;
    }
    let item = format!("{}/{name}", item_kind(kind));
    let problem = |field: String, reason: String| ConfigError {
        item: item.clone(),
        field,
        reason,
    };
    for d in dups {
        out.errors.push(problem(
            d.clone(),
            "duplicate key: written more than once in the same object".into(),
        ));
    }
    for k in obj.keys().filter(|k| !TOP_LEVEL.contains(&k.as_str())) {
        out.errors.push(problem(
            k.clone(),
            format!("unknown field {k:?} (apiVersion, kind, metadata, spec)"),
        ));
    }
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
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    if matches!(kind, "NodePool" | "Provisioner")
        && annotations
            .get(KARPENTER_NODES_ANNOTATION)
            .and_then(|v| KarpenterNodes::parse(v))
            == Some(KarpenterNodes::Replace)
    {
        out.warnings.push(ConfigError {
            item: item.clone(),
            field: format!("metadata.annotations[{KARPENTER_NODES_ANNOTATION}]"),
            reason: format!(
                "Karpenter's nodes of this pool are replaced by nodewright's (handover): Karpenter's NodePool {name} must launch nothing any more, or the pods drained from its nodes may land on new Karpenter nodes (the handover pauses while it sees Karpenter launch); stop it with {}",
                super::settings::stop_karpenter_command(&name)
            ),
        });
    }
    let result: Result<(), ConfigError> = (|| {
        match (api_version, kind) {
            (NODEPOOL_V1, _) => {
                let spec =
                    checked::<NodePoolSpec>(spec, &item, &NODEPOOL_SPEC, locate_nodepool, out);
                if let Some(spec) = spec {
                    out.warnings.extend(NodePool::warnings(&name, &spec));
                    out.docs.push(Document::Config(ConfigDocument::NodePool {
                        name,
                        spec,
                        annotations: annotations.clone(),
                        source_api_version: api_version.into(),
                    }));
                }
            }
            (NODEPOOL_V1BETA1, _) => {
                let old = typed(spec, &item, locate_v1beta1_nodepool)?;
                let spec = convert::v1beta1_nodepool_to_v1(&name, &old)?;
                out.warnings.extend(NodePool::warnings(&name, &spec));
                out.docs.push(Document::Config(ConfigDocument::NodePool {
                    name,
                    spec,
                    annotations: annotations.clone(),
                    source_api_version: api_version.into(),
                }));
            }
            (PROVISIONER_V1ALPHA5, _) => {
                let old = typed(spec, &item, locate_provisioner)?;
                let converted = convert::provisioner_to_v1(&name, &old)?;
                for (field, reason) in converted.warnings {
                    out.warnings.push(problem(field, reason));
                }
                if let Some(class) = converted.node_class {
                    out.docs.push(Document::Config(ConfigDocument::NodeClass {
                        name: name.clone(),
                        spec: class,
                    }));
                }
                out.warnings
                    .extend(NodePool::warnings(&name, &converted.node_pool));
                out.docs.push(Document::Config(ConfigDocument::NodePool {
                    name,
                    spec: converted.node_pool,
                    annotations,
                    source_api_version: api_version.into(),
                }));
            }
            (SETTINGS_V1ALPHA1, _) => {
                if name != SETTINGS_NAME {
                    return Err(doc_err(
                        "metadata.name",
                        format!("{name:?}: the one Settings item is named {SETTINGS_NAME:?}"),
                    ));
                }
                let spec =
                    checked::<SettingsSpec>(spec, &item, &SETTINGS_SPEC, locate_settings, out);
                if let Some(spec) = spec {
                    out.docs
                        .push(Document::Config(ConfigDocument::Settings { name, spec }));
                }
            }
            (EC2NODECLASS_V1, _) => {
                let spec = checked::<EC2NodeClassSpec>(
                    spec,
                    &item,
                    &NODECLASS_SPEC,
                    locate_nodeclass,
                    out,
                );
                if let Some(spec) = spec {
                    out.warnings.extend(NodeClass::warnings(&name, &spec));
                    out.docs
                        .push(Document::Config(ConfigDocument::NodeClass { name, spec }));
                }
            }
            (NODEOVERLAY_V1ALPHA1, _) => {
                let spec =
                    checked::<NodeOverlaySpec>(spec, &item, &NODEOVERLAY_SPEC, leaf_probe, out);
                if let Some(spec) = spec {
                    out.docs
                        .push(Document::Config(ConfigDocument::NodeOverlay { name, spec }));
                }
            }
            (CAPACITYBUFFER_V1BETA1, _) => {
                let spec = checked::<CapacityBufferSpec>(
                    spec,
                    &item,
                    &CAPACITYBUFFER_SPEC,
                    leaf_probe,
                    out,
                );
                if let Some(mut spec) = spec {
                    out.warnings.extend(super::buffer::warnings(&name, &spec));
                    spec.namespace = Some(
                        obj.get("metadata")
                            .and_then(|m| m.get("namespace"))
                            .and_then(Value::as_str)
                            .unwrap_or("default")
                            .to_owned(),
                    );
                    out.docs
                        .push(Document::Config(ConfigDocument::CapacityBuffer {
                            name,
                            spec,
                        }));
                }
            }
            (EC2NODECLASS_V1BETA1, _) => {
                let old = typed(spec, &item, locate_nodeclass)?;
                let spec = convert::v1beta1_nodeclass_to_v1(&name, &old)?;
                out.docs
                    .push(Document::Config(ConfigDocument::NodeClass { name, spec }));
            }
            _ => {
                let old = typed(spec, &item, locate_provider)?;
                let spec = convert::aws_node_template_to_v1(&name, &old)?;
                out.docs
                    .push(Document::Config(ConfigDocument::NodeClass { name, spec }));
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        out.errors.push(e);
    }
}

/// Reads a spec after checking its shape: every problem the schema finds
/// becomes an error of `item`, what did not fit is taken out, and the rest
/// is read (`None` only when that still fails, which its error says).
fn checked<T: DeserializeOwned>(
    spec: &Value,
    item: &str,
    kind: &Kind,
    locate: Probe,
    out: &mut Parsed,
) -> Option<T> {
    let mut cleaned = spec.clone();
    for (field, reason) in schema::check(&mut cleaned, kind, "spec") {
        out.errors.push(ConfigError {
            item: item.to_owned(),
            field,
            reason,
        });
    }
    match typed(&cleaned, item, locate) {
        Ok(t) => Some(t),
        Err(e) => {
            out.errors.push(e);
            None
        }
    }
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
        let (field, reason) =
            locate(spec, "spec").unwrap_or_else(|| ("spec".into(), e.to_string()));
        ConfigError {
            item: item.to_owned(),
            field,
            reason,
        }
    })
}

/// No narrowing: the schema already named what does not fit.
fn leaf_probe(_: &Value, _: &str) -> Option<(String, String)> {
    None
}

fn leaf<T: DeserializeOwned>(v: &Value, path: &str) -> Option<(String, String)> {
    serde_json::from_value::<T>(v.clone())
        .err()
        .map(|e| (path.to_owned(), e.to_string()))
}

fn each<T: DeserializeOwned>(v: &Value, path: &str) -> Option<(String, String)> {
    if let Some(items) = v.as_array()
        && let Some(e) = items
            .iter()
            .enumerate()
            .find_map(|(i, x)| leaf::<T>(x, &format!("{path}[{i}]")))
    {
        return Some(e);
    }
    leaf::<Vec<T>>(v, path)
}

/// The failing child, or the object itself (unknown or missing fields).
fn object<T: DeserializeOwned>(
    v: &Value,
    path: &str,
    children: &[(&str, Probe)],
) -> Option<(String, String)> {
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
        object::<NodeClaimTemplate>(
            v,
            p,
            &[
                ("metadata", leaf::<TemplateMetadata>),
                ("spec", template_spec),
            ],
        )
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
            &[
                ("consolidationPolicy", leaf::<String>),
                ("consolidateAfter", leaf::<String>),
                ("budgets", each::<BudgetSpec>),
            ],
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
        object::<V1beta1Template>(
            v,
            p,
            &[
                ("metadata", leaf::<TemplateMetadata>),
                ("spec", template_spec),
            ],
        )
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
        &[
            ("template", template),
            ("disruption", disruption),
            ("limits", leaf::<BTreeMap<String, Value>>),
            ("weight", leaf::<i32>),
        ],
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

fn locate_settings(v: &Value, p: &str) -> Option<(String, String)> {
    object::<SettingsSpec>(v, p, &[("featureGates", leaf::<FeatureGatesSpec>)])
}

fn locate_nodeclass(v: &Value, p: &str) -> Option<(String, String)> {
    object::<EC2NodeClassSpec>(
        v,
        p,
        &[
            ("amiSelectorTerms", each::<AmiSelectorTermSpec>),
            ("subnetSelectorTerms", each::<SubnetSelectorTermSpec>),
            (
                "securityGroupSelectorTerms",
                each::<SecurityGroupSelectorTermSpec>,
            ),
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

// ---- stored items -------------------------------------------------------------

/// What a stored NodePool spec may leave out that a file must write.
fn stored_pool_defaults(spec: &mut Value) {
    let Some(t) = spec
        .as_object_mut()
        .map(|o| o.entry("template").or_insert_with(|| serde_json::json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let Some(ts) = t
        .entry("spec")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
    else {
        return;
    };
    ts.entry("requirements")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(r) = ts.get_mut("nodeClassRef").and_then(Value::as_object_mut) {
        r.entry("group")
            .or_insert_with(|| Value::from(NODE_CLASS_GROUP));
        r.entry("kind")
            .or_insert_with(|| Value::from(NODE_CLASS_KIND));
    }
}

impl ConfigDocument {
    /// A stored item (its v1 spec as JSON) read back; the first problem
    /// (see [`ConfigDocument::from_item_all`]).
    pub fn from_item(item: &ConfigItem) -> Result<ConfigDocument, ConfigError> {
        Self::from_item_all(item).map_err(|mut e| e.swap_remove(0))
    }

    /// A stored item read back, checked against its kind's schema: every
    /// problem with its field path. Stored specs leave out empty lists
    /// (`requirements: []`), and items written before the reference's
    /// `group` and `kind` were required lack them: both are filled in.
    pub fn from_item_all(item: &ConfigItem) -> Result<ConfigDocument, Vec<ConfigError>> {
        let name = item.name.clone();
        if let Some(reason) = item.unreadable_reason() {
            return Err(vec![ConfigError {
                item: format!("{}/{name}", item.kind.as_str()),
                field: "body".to_owned(),
                reason: format!(
                    "the stored item cannot be read ({reason}); apply it again or delete it"
                ),
            }]);
        }
        let label = format!("{}/{name}", item.kind.as_str());
        let mut spec = item.spec.clone();
        let kind = match item.kind {
            ConfigKind::NodePool => {
                stored_pool_defaults(&mut spec);
                &NODEPOOL_SPEC
            }
            ConfigKind::NodeClass => &NODECLASS_SPEC,
            ConfigKind::Settings => &SETTINGS_SPEC,
            ConfigKind::NodeOverlay => &NODEOVERLAY_SPEC,
            ConfigKind::CapacityBuffer => &CAPACITYBUFFER_SPEC,
        };
        let problems = schema::check(&mut spec, kind, "spec");
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|(field, reason)| ConfigError {
                    item: label.clone(),
                    field,
                    reason,
                })
                .collect());
        }
        let one = |e| vec![e];
        Ok(match item.kind {
            ConfigKind::NodePool => ConfigDocument::NodePool {
                spec: typed(&spec, &label, locate_nodepool).map_err(one)?,
                annotations: item.annotations.clone(),
                name,
                source_api_version: NODEPOOL_V1.to_owned(),
            },
            ConfigKind::NodeClass => ConfigDocument::NodeClass {
                spec: typed(&spec, &label, locate_nodeclass).map_err(one)?,
                name,
            },
            ConfigKind::Settings => ConfigDocument::Settings {
                spec: typed(&spec, &label, locate_settings).map_err(one)?,
                name,
            },
            ConfigKind::NodeOverlay => ConfigDocument::NodeOverlay {
                spec: typed(&spec, &label, leaf_probe).map_err(one)?,
                name,
            },
            ConfigKind::CapacityBuffer => ConfigDocument::CapacityBuffer {
                spec: typed(&spec, &label, leaf_probe).map_err(one)?,
                name,
            },
        })
    }

    pub fn kind(&self) -> ConfigKind {
        match self {
            ConfigDocument::NodePool { .. } => ConfigKind::NodePool,
            ConfigDocument::NodeClass { .. } => ConfigKind::NodeClass,
            ConfigDocument::Settings { .. } => ConfigKind::Settings,
            ConfigDocument::NodeOverlay { .. } => ConfigKind::NodeOverlay,
            ConfigDocument::CapacityBuffer { .. } => ConfigKind::CapacityBuffer,
        }
    }

    /// The spec as stored (v1, JSON).
    pub fn spec_json(&self) -> Value {
        let v = match self {
            ConfigDocument::NodePool { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::NodeClass { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::Settings { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::NodeOverlay { spec, .. } => serde_json::to_value(spec),
            ConfigDocument::CapacityBuffer { spec, .. } => serde_json::to_value(spec),
        };
        // These specs are plain maps and strings: serializing cannot fail.
        v.unwrap_or_default()
    }

    /// The item to store, at `version`.
    pub fn to_item(&self, version: u64, now: jiff::Timestamp) -> ConfigItem {
        let annotations = match self {
            ConfigDocument::NodePool { annotations, .. } => annotations.clone(),
            _ => BTreeMap::new(),
        };
        ConfigItem {
            kind: self.kind(),
            name: self.name().to_owned(),
            spec: self.spec_json(),
            annotations,
            version,
            updated_at: now,
        }
    }

    /// The v1 YAML document a user can keep (`config get`, `config convert`).
    pub fn to_manifest(&self) -> Value {
        let (api_version, kind) = match self {
            ConfigDocument::NodePool { .. } => (NODEPOOL_V1, "NodePool"),
            ConfigDocument::NodeClass { .. } => (EC2NODECLASS_V1, "EC2NodeClass"),
            ConfigDocument::Settings { .. } => (SETTINGS_V1ALPHA1, "Settings"),
            ConfigDocument::NodeOverlay { .. } => (NODEOVERLAY_V1ALPHA1, "NodeOverlay"),
            ConfigDocument::CapacityBuffer { .. } => (CAPACITYBUFFER_V1BETA1, "CapacityBuffer"),
        };
        serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": self.name()}, "spec": self.spec_json()})
    }
}

/// Stored items → what is valid and what is not: the same validation the
/// CLI applies before writing, so the functions, the CLI and the simulator
/// agree. An item that does not read is an error and left out.
pub fn resolve_items(items: &[ConfigItem]) -> Resolved {
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for item in items {
        match ConfigDocument::from_item_all(item) {
            Ok(d) => docs.push(d),
            Err(e) => errors.extend(e),
        }
    }
    let mut r = ConfigSet::resolve(&docs);
    // A pool naming a class whose item does not read: not ready, not missing.
    let unreadable: BTreeSet<String> = errors
        .iter()
        .filter_map(|e: &ConfigError| e.item.strip_prefix("nodeclass/").map(str::to_owned))
        .collect();
    for e in std::mem::take(&mut r.errors) {
        let class_unreadable = e.field == "spec.template.spec.nodeClassRef.name"
            && unreadable
                .iter()
                .any(|c| e.reason.starts_with(&format!("EC2NodeClass {c:?} ")));
        if class_unreadable {
            let reason = e.reason.replacen("does not exist", "is invalid", 1);
            r.not_ready.push(ConfigError { reason, ..e });
        } else {
            r.errors.push(e);
        }
    }
    errors.extend(r.errors);
    // Each item's errors together, items in order (stable: fields keep theirs).
    errors.sort_by(|a, b| a.item.cmp(&b.item));
    r.errors = errors;
    r
}

// ---- the validated set ------------------------------------------------------

/// Every NodePool, NodeClass and the Settings of a configuration, validated together.
#[derive(Debug, Clone, Default)]
pub struct ConfigSet {
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<NodeClass>,
    pub settings: Settings,
    /// Every valid NodeOverlay (each pool also holds them, `NodePool::overlays`).
    pub node_overlays: Vec<NodeOverlay>,
    pub capacity_buffers: Vec<CapacityBuffer>,
}

/// What [`ConfigSet::resolve`] makes of documents that may not all be valid.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The valid part: pools whose NodeClass is valid, valid classes, the
    /// settings (defaults when absent or invalid).
    pub set: ConfigSet,
    /// Each invalid document's error, and each reference to a class that
    /// does not exist.
    pub errors: Vec<ConfigError>,
    /// Pools left out because their NodeClass is itself invalid (its error is
    /// in `errors`): Karpenter's "NodeClass not ready".
    pub not_ready: Vec<ConfigError>,
}

impl ConfigSet {
    /// Validates every document and the references between them; all errors
    /// are returned, not only the first. Each NodePool must name an existing
    /// NodeClass; its kubelet settings become the class's with the pool's
    /// own (a v1beta1 compatibility field) on top.
    pub fn from_documents(docs: &[ConfigDocument]) -> Result<ConfigSet, Vec<ConfigError>> {
        let r = ConfigSet::resolve(docs);
        if r.errors.is_empty() {
            Ok(r.set)
        } else {
            Err(r.errors)
        }
    }

    /// The lenient form the functions use on stored items: whatever is
    /// valid, and what is not. The one place NodePools meet their NodeClass.
    pub fn resolve(docs: &[ConfigDocument]) -> Resolved {
        let mut r = Resolved::default();
        let duplicate = |item: String| ConfigError {
            item,
            field: "metadata.name".into(),
            reason: "defined more than once".into(),
        };
        let mut class_names = BTreeSet::new();
        let mut overlay_names = BTreeSet::new();
        let mut buffer_names = BTreeSet::new();
        let mut settings_seen = false;
        for doc in docs {
            match doc {
                ConfigDocument::NodeClass { name, spec } => {
                    if !class_names.insert(name.as_str()) {
                        r.errors.push(duplicate(format!("nodeclass/{name}")));
                        continue;
                    }
                    match NodeClass::from_spec_all(name, spec) {
                        Ok(c) => r.set.node_classes.push(c),
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::Settings { name, spec } => {
                    if std::mem::replace(&mut settings_seen, true) {
                        r.errors.push(duplicate(format!("settings/{name}")));
                        continue;
                    }
                    match Settings::from_spec(spec) {
                        Ok(s) => r.set.settings = s,
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::NodeOverlay { name, spec } => {
                    if !overlay_names.insert(name.as_str()) {
                        r.errors.push(duplicate(format!("nodeoverlay/{name}")));
                        continue;
                    }
                    match NodeOverlay::from_spec_all(name, spec) {
                        Ok(o) => r.set.node_overlays.push(o),
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::CapacityBuffer { name, spec } => {
                    if !buffer_names.insert(name.as_str()) {
                        r.errors.push(duplicate(format!("capacitybuffer/{name}")));
                        continue;
                    }
                    match CapacityBuffer::from_spec_all(name, spec) {
                        Ok(b) => r.set.capacity_buffers.push(b),
                        Err(e) => r.errors.extend(e),
                    }
                }
                ConfigDocument::NodePool { .. } => {}
            }
        }
        // Kubelet expressions need the Settings gate (Karpenter's
        // NodeClassCEL): without it the class is refused, every such field
        // named, rather than launched with defaults the user did not ask for.
        if !r.set.settings.node_class_cel {
            let classes = std::mem::take(&mut r.set.node_classes);
            for c in classes {
                let fields = c.kubelet.expression_fields("spec.kubelet");
                if fields.is_empty() {
                    r.set.node_classes.push(c);
                    continue;
                }
                r.errors.extend(fields.into_iter().map(|field| ConfigError {
                    item: format!("nodeclass/{}", c.name),
                    field,
                    reason: "an expression, and the settings' featureGates.nodeClassCEL is off (Karpenter's KubeletExpressionsDisabled): set it to true, or write a value".into(),
                }));
            }
        }
        let overlays: std::sync::Arc<[NodeOverlay]> = r.set.node_overlays.clone().into();
        let mut pool_names = BTreeSet::new();
        for doc in docs {
            let ConfigDocument::NodePool {
                name,
                spec,
                annotations,
                ..
            } = doc
            else {
                continue;
            };
            if !pool_names.insert(name.as_str()) {
                r.errors.push(duplicate(format!("nodepool/{name}")));
                continue;
            }
            // An annotation we act on is validated as its Settings field is:
            // a value we cannot read is refused, never taken for the default.
            let bad_annotation = annotations
                .get(REBALANCE_ANNOTATION)
                .filter(|v| RebalancePolicy::parse(v).is_none())
                .map(|v| ConfigError {
                    item: format!("nodepool/{name}"),
                    field: format!("metadata.annotations[{REBALANCE_ANNOTATION}]"),
                    reason: format!("unknown policy {v:?}: expected Ignore, Cordon or Replace"),
                })
                .or_else(|| {
                    annotations
                        .get(KARPENTER_NODES_ANNOTATION)
                        .filter(|v| KarpenterNodes::parse(v).is_none())
                        .map(|v| ConfigError {
                            item: format!("nodepool/{name}"),
                            field: format!("metadata.annotations[{KARPENTER_NODES_ANNOTATION}]"),
                            reason: format!("unknown value {v:?}: expected none or replace"),
                        })
                });
            let mut pool = match NodePool::from_spec_all(name, spec) {
                Ok(mut p) if bad_annotation.is_none() => {
                    p.annotations.clone_from(annotations);
                    p.overlays = overlays.clone();
                    p
                }
                Ok(_) => {
                    r.errors.extend(bad_annotation);
                    continue;
                }
                Err(e) => {
                    r.errors.extend(bad_annotation);
                    r.errors.extend(e);
                    continue;
                }
            };
            let err = |field: &str, reason: String| ConfigError {
                item: format!("nodepool/{name}"),
                field: field.into(),
                reason,
            };
            match pool.node_class.as_deref() {
                None => r.errors.push(err("spec.template.spec.nodeClassRef", "required: the EC2NodeClass nodes launch with".into())),
                Some(class) if !class_names.contains(class) => r.errors.push(err(
                    "spec.template.spec.nodeClassRef.name",
                    format!("EC2NodeClass {class:?} does not exist: no nodes are launched for this NodePool"),
                )),
                Some(class) => match r.set.node_classes.iter().find(|c| c.name == class) {
                    Some(c) => {
                        pool.launch_kubelet = pool.launch_kubelet.merged_over(&c.kubelet);
                        let own = pool.launch_kubelet.expression_fields("spec.template.spec.kubelet");
                        if !r.set.settings.node_class_cel && !own.is_empty() {
                            r.errors.extend(own.into_iter().map(|field| err(&field, "an expression, and the settings' featureGates.nodeClassCEL is off (Karpenter's KubeletExpressionsDisabled): set it to true, or write a value".into())));
                            continue;
                        }
                        pool.kubelet = pool.launch_kubelet.to_kubelet_config();
                        pool.kubelet.bottlerocket =
                            c.ami_family == super::nodeclass::AmiFamily::Bottlerocket;
                        pool.kubelet.windows_build =
                            c.ami_family.windows_build().map(str::to_owned);
                        pool.kubelet.efa_only_enis = c
                            .network_interfaces
                            .iter()
                            .filter(|ni| {
                                ni.network_card_index == 0 && ni.interface_type == "efa-only"
                            })
                            .count() as u32;
                        pool.kubelet.reserved_enis = r.set.settings.reserved_enis;
                        pool.kubelet.ephemeral_storage =
                            Some(super::nodeclass::ephemeral_storage(c));
                        pool.resolved_class = Some(std::sync::Arc::new(c.clone()));
                        r.set.node_pools.push(pool);
                    }
                    None => r.not_ready.push(err(
                        "spec.template.spec.nodeClassRef.name",
                        format!("EC2NodeClass {class:?} is invalid: no nodes are launched for this NodePool"),
                    )),
                },
            }
        }
        r
    }

    /// Reads and validates a stream of configuration documents; every
    /// error at once (a document that does not read, and the set's own).
    pub fn parse(text: &str) -> Result<ConfigSet, Vec<ConfigError>> {
        let (docs, errors) = parse_config_all(text);
        match ConfigSet::from_documents(&docs) {
            Ok(set) if errors.is_empty() => Ok(set),
            Ok(_) => Err(errors),
            Err(e) => Err(merge_errors(errors, e)),
        }
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
        // The second Provisioner has no subnet or security group selectors:
        // Karpenter v0.5 discovered them by the cluster's tag, and so do we,
        // with a warning naming each field.
        let parsed = parse_checked(V1ALPHA5, false);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        let warned: Vec<(&str, &str)> = parsed
            .warnings
            .iter()
            .map(|w| (w.item.as_str(), w.field.as_str()))
            .collect();
        assert_eq!(
            warned,
            [
                ("provisioner/t101", "spec.provider.subnetSelector"),
                ("provisioner/t101", "spec.provider.securityGroupSelector")
            ]
        );
        assert!(
            parsed.warnings[0]
                .reason
                .contains("kubernetes.io/cluster/<cluster name>")
        );

        // The first converts (to a NodeClass and a NodePool) and validates.
        let first = V1ALPHA5.split("\n---\n").next().expect("first document");
        let docs = parse_documents(first).expect("default converts");
        assert_eq!(docs.len(), 2, "an inline provider yields a NodeClass too");
        assert!(matches!(&docs[0], ConfigDocument::NodeClass { name, .. } if name == "default"));
        assert!(
            matches!(&docs[1], ConfigDocument::NodePool { source_api_version, .. } if source_api_version == PROVISIONER_V1ALPHA5)
        );
        let set = ConfigSet::from_documents(&docs).expect("valid");
        let pool = set.node_pool("default").expect("pool");
        assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(
            pool.disruption.consolidate_after,
            Some(SignedDuration::from_secs(30))
        );
        assert_eq!(pool.expire_after, Some(SignedDuration::from_secs(1800)));
        assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
        assert!(
            pool.requirements
                .allows(labels::CAPACITY_TYPE, Some("spot"))
        );
        assert!(
            pool.requirements
                .allows(labels::CAPACITY_TYPE, Some("on-demand"))
        );
        assert!(pool.requirements.allows(labels::ARCH, Some("arm64")));
        let class = set.node_class_of(pool).expect("class");
        let any: BTreeMap<String, String> = [(
            "kubernetes.io/cluster/karpenter-demo".to_string(),
            "*".to_string(),
        )]
        .into();
        assert_eq!(
            class.subnet_selector_terms,
            vec![SelectorTerm::Tags(any.clone())]
        );
        assert_eq!(
            class.security_group_selector_terms,
            vec![SelectorTerm::Tags(any)]
        );
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
            Some(NodeIdentity::InstanceProfile(
                "KarpenterNodeInstanceProfile-t101-karpenter".into()
            ))
        );
    }

    #[test]
    fn walkthrough_v1beta1() {
        let docs = parse_documents(V1BETA1).expect("parses");
        assert_eq!(docs.len(), 2);
        let set = ConfigSet::from_documents(&docs).expect("valid");
        let class = set.node_class("default").expect("class");
        assert_eq!(class.ami_family, AmiFamily::AL2);
        assert_eq!(
            class.ami_selector_terms,
            vec![AmiSelector::Alias {
                family: AmiFamily::AL2,
                version: "latest".into()
            }]
        );
        assert_eq!(
            class.identity,
            NodeIdentity::Role("karpenter-t101-karpenter".into())
        );
        assert_eq!(
            class.tags.get("karpenter.sh/discovery").map(String::as_str),
            Some("t101-karpenter")
        );
        let pool = set.node_pool("default").expect("pool");
        assert_eq!(pool.node_class.as_deref(), Some("default"));
        assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(
            pool.disruption.consolidate_after,
            Some(SignedDuration::from_secs(30))
        );
        assert_eq!(pool.expire_after, Some(SignedDuration::from_hours(720)));
        assert_eq!(pool.disruption.budgets.len(), 1);
        assert_eq!(pool.disruption.budgets[0].nodes, BudgetNodes::Percent(10));
        assert!(
            pool.requirements
                .allows(labels::INSTANCE_GENERATION, Some("3"))
        );
        assert!(
            !pool
                .requirements
                .allows(labels::INSTANCE_GENERATION, Some("2"))
        );
        assert!(pool.requirements.allows(labels::INSTANCE_CPU, Some("16")));
        assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
    }

    #[test]
    fn v1_documents_and_others_in_one_stream() {
        let docs = parse_stream(V1).expect("parses");
        let others: Vec<&Value> = docs
            .iter()
            .filter_map(|d| {
                if let Document::Other(v) = d {
                    Some(v)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(others.len(), 1);
        assert_eq!(others[0]["kind"], "Deployment");
        let config: Vec<ConfigDocument> = docs
            .into_iter()
            .filter_map(|d| {
                if let Document::Config(c) = d {
                    Some(c)
                } else {
                    None
                }
            })
            .collect();
        let set = ConfigSet::from_documents(&config).expect("valid");
        let pool = set.node_pool("general").expect("pool");
        assert_eq!(
            pool.kubelet.max_pods,
            Some(58),
            "the class's maxPods reaches the allocatable math"
        );
        assert_eq!(
            pool.launch_kubelet.pods_per_core,
            Some(4),
            "the pool's own setting wins"
        );
        assert_eq!(
            pool.termination_grace_period,
            Some(SignedDuration::from_hours(24))
        );
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
        assert_eq!(
            converted
                .iter()
                .map(ConfigDocument::name)
                .collect::<Vec<_>>(),
            vec!["default", "default"]
        );
        // What a store keeps (the v1 spec as JSON) reads back to the same spec.
        for doc in &converted {
            match doc {
                ConfigDocument::NodePool { spec, .. } => {
                    let back: NodePoolSpec =
                        serde_json::from_value(serde_json::to_value(spec).expect("json"))
                            .expect("reads back");
                    assert_eq!(&back, spec);
                }
                ConfigDocument::NodeClass { spec, .. } => {
                    let back: EC2NodeClassSpec =
                        serde_json::from_value(serde_json::to_value(spec).expect("json"))
                            .expect("reads back");
                    assert_eq!(&back, spec);
                    assert!(NodeClass::from_spec("default", &back).is_ok());
                }
                other => panic!("only a NodePool and a NodeClass in a Provisioner, got {other:?}"),
            }
            // And through the stored item, the one way the functions read it.
            let back = ConfigDocument::from_item(&doc.to_item(3, jiff::Timestamp::UNIX_EPOCH))
                .expect("item reads back");
            assert_eq!(back.spec_json(), doc.spec_json());
        }
        // t101's provider names no subnets or security groups: the cluster's tag.
        let t101 = from_value(&docs[1], 1).expect("t101 converts");
        assert!(
            matches!(&t101[0], ConfigDocument::NodeClass { spec, .. } if spec.cluster_discovery)
        );
        let e = from_value(&serde_json::json!({"apiVersion": "v1", "kind": "Pod"}), 4)
            .expect_err("a pod");
        assert_eq!((e.item.as_str(), e.field.as_str()), ("document[4]", "kind"));
    }

    #[test]
    fn empty_documents_are_skipped() {
        assert_eq!(parse_documents("").expect("empty"), vec![]);
        assert_eq!(
            parse_documents("---\n---\n# just a comment\n").expect("empty"),
            vec![]
        );
    }

    #[test]
    fn document_errors_name_the_position() {
        let cases = [
            (
                "---\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: x}\n",
                "document[1]",
                "kind",
                "karpenter.sh/v1/NodeClaim",
            ),
            (
                "apiVersion: karpenter.sh/v2\nkind: NodePool\nmetadata: {name: x}\n",
                "document[0]",
                "kind",
                "unsupported apiVersion/kind",
            ),
            (
                "kind: NodePool\nmetadata: {name: x}\n",
                "document[0]",
                "apiVersion",
                "required",
            ),
            (
                "apiVersion: karpenter.sh/v1\nkind: NodePool\n",
                "document[0]",
                "metadata.name",
                "required",
            ),
            (
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: Default}\n",
                "document[0]",
                "metadata.name",
                "not a valid name",
            ),
            (
                "- a\n- b\n",
                "document[0]",
                "(document)",
                "expected an object",
            ),
            (
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {limits: [1}\n",
                "document[0]",
                "line 4 column",
                "",
            ),
        ];
        for (text, item, field, reason) in cases {
            let e = parse_documents(text).expect_err(text);
            assert_eq!(e.item, item, "{text}");
            assert!(e.field.starts_with(field), "{text}: {}", e.field);
            assert!(e.reason.contains(reason), "{text}: {}", e.reason);
        }
        // A Karpenter kind of an unknown version is refused even when keeping others.
        let e =
            parse_stream("apiVersion: karpenter.sh/v1beta2\nkind: NodePool\nmetadata: {name: x}\n")
                .expect_err("v1beta2");
        assert_eq!(e.field, "kind");
    }

    #[test]
    fn spec_errors_name_the_narrowest_field() {
        let pool = |spec: &str| {
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n{spec}"
            )
        };
        let cases = [
            (pool("  template:\n    spec:\n      requirements:\n        - {key: a, operator: In, values: [x]}\n        - {key: b, operator: In, value: [x]}\n"), "nodepool/p", "spec.template.spec.requirements[1].value", "unknown field \"value\" (did you mean \"values\"?)"),
            (pool("  disruption:\n    expireAfter: 720h\n"), "nodepool/p", "spec.disruption.expireAfter", "unknown field \"expireAfter\""),
            (pool("  disruption:\n    budgets:\n      - nodes: 10%\n        reason: [Empty]\n"), "nodepool/p", "spec.disruption.budgets[0].reason", "did you mean \"reasons\""),
            (pool("  weight: heavy\n"), "nodepool/p", "spec.weight", "expected a 32-bit integer, got \"heavy\""),
            (pool("  template:\n    spec:\n      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: c}\n"), "nodepool/p", "spec.template.spec.nodeClassRef.apiVersion", "unknown field \"apiVersion\""),
            ("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  subnetSelectorTerms:\n    - tags: {a: b}\n    - tag: {a: b}\n".to_owned(), "nodeclass/c", "spec.subnetSelectorTerms[1].tag", "did you mean \"tags\""),
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
        let pool = |name: &str, tmpl: &str| {
            let reqs = if tmpl.contains("requirements") {
                ""
            } else {
                "      requirements: []\n"
            };
            format!(
                "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n{reqs}{tmpl}"
            )
        };
        let ref_c = "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}\n";
        let cases = [
            (
                format!(
                    "{class}{}",
                    pool(
                        "p",
                        "      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}\n"
                    )
                ),
                "nodepool/p",
                "spec.template.spec.nodeClassRef.name",
                "does not exist",
            ),
            (
                format!("{class}{}", pool("p", "      requirements: []\n")),
                "nodepool/p",
                "spec.template.spec.nodeClassRef",
                "required",
            ),
            (
                format!("{class}{}{}", pool("p", ref_c), pool("p", ref_c)),
                "nodepool/p",
                "metadata.name",
                "more than once",
            ),
            (
                format!("{class}---\n{class}{}", pool("p", ref_c)),
                "nodeclass/c",
                "metadata.name",
                "more than once",
            ),
            (
                format!(
                    "{class}{}",
                    pool(
                        "p",
                        &format!(
                            "{ref_c}      requirements:\n        - {{key: a, operator: In, values: [x]}}\n        - {{key: b, operator: Within, values: [x]}}\n"
                        )
                    )
                ),
                "nodepool/p",
                "spec.template.spec.requirements[1].operator",
                "unknown operator",
            ),
            (
                format!(
                    "{class}{}",
                    pool("p", &format!("{ref_c}      expireAfter: 30d\n"))
                ),
                "nodepool/p",
                "spec.template.spec.expireAfter",
                "expected a duration",
            ),
            (
                format!(
                    "{class}{}",
                    pool(
                        "p",
                        &format!("{ref_c}      terminationGracePeriod: Never\n")
                    )
                ),
                "nodepool/p",
                "spec.template.spec.terminationGracePeriod",
                "expected a duration",
            ),
            (
                format!(
                    "{class}{}",
                    pool(
                        "p",
                        "      nodeClassRef: {group: karpenter.k8s.aws, kind: AWSNodeTemplate, name: c}\n"
                    )
                ),
                "nodepool/p",
                "spec.template.spec.nodeClassRef.kind",
                "unsupported kind",
            ),
            (
                class.replace("role: r", "role: r\n  instanceProfile: p") + &pool("p", ref_c),
                "nodeclass/c",
                "spec.instanceProfile",
                "not both",
            ),
        ];
        for (text, item, field, reason) in cases {
            let e = one_error(&text);
            assert_eq!((e.item.as_str(), e.field.as_str()), (item, field), "{text}");
            assert!(e.reason.contains(reason), "{text}: {}", e.reason);
        }
    }

    #[test]
    fn all_errors_are_collected() {
        let text = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec: {weight: 500, template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: b}\nspec: {template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}}}}\n";
        let errors = ConfigSet::parse(text).expect_err("five errors");
        let got: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.item.as_str(), e.field.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("nodeclass/c", "spec.amiSelectorTerms"),
                ("nodeclass/c", "spec.subnetSelectorTerms"),
                ("nodeclass/c", "spec.securityGroupSelectorTerms"),
                ("nodepool/a", "spec.weight"),
                ("nodepool/b", "spec.template.spec.nodeClassRef.name"),
            ]
        );
    }

    /// The NodePool's rebalance-policy annotation is read like the Settings
    /// field: `replace` (lower case) is refused naming the field, not taken
    /// for the default `Ignore`.
    #[test]
    fn an_unreadable_rebalance_policy_annotation_is_refused_naming_it() {
        let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}\n---\n";
        let pool = |value: &str| {
            format!(
                "{class}apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p, annotations: {{nodewright.io/rebalance-policy: {value}}}}}\nspec: {{template: {{spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}, requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]}}}}}}\n"
            )
        };
        let e = one_error(&pool("replace"));
        assert_eq!(
            (e.item.as_str(), e.field.as_str()),
            (
                "nodepool/p",
                "metadata.annotations[nodewright.io/rebalance-policy]"
            )
        );
        assert!(e.reason.contains("\"replace\""), "{e}");
        for ok in ["Ignore", "Cordon", "Replace"] {
            let set = ConfigSet::parse(&pool(ok)).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
            assert_eq!(set.node_pools[0].annotations[REBALANCE_ANNOTATION], ok);
        }
    }

    /// What nodewright does with Karpenter's nodes of a pool handed over
    /// (`config import --adopt`): `none` or `replace`; anything else (a
    /// typo would otherwise leave them alone silently) is refused naming it.
    #[test]
    fn an_unreadable_karpenter_nodes_annotation_is_refused_naming_it() {
        let class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}\n---\n";
        let pool = |value: &str| {
            format!(
                "{class}apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p, annotations: {{nodewright.io/karpenter-nodes: {value}}}}}\nspec: {{template: {{spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}, requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]}}}}}}\n"
            )
        };
        let e = one_error(&pool("Replace"));
        assert_eq!(
            (e.item.as_str(), e.field.as_str()),
            (
                "nodepool/p",
                "metadata.annotations[nodewright.io/karpenter-nodes]"
            )
        );
        assert!(e.reason.contains("\"Replace\""), "{e}");
        for ok in ["none", "replace"] {
            let set = ConfigSet::parse(&pool(ok)).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
            assert_eq!(
                crate::disruption::handover::karpenter_nodes(&set.node_pools[0]).as_str(),
                ok
            );
        }
    }
}

#[cfg(test)]
mod never_panics {
    //! Random YAML/JSON into the importer and the validator: errors, never a panic.
    use super::*;
    use proptest::prelude::*;

    /// JSON values shaped like configuration: the keys the schema uses, and
    /// values of every type at every place.
    fn value() -> impl Strategy<Value = Value> {
        let keys = prop::sample::select(vec![
            "apiVersion",
            "kind",
            "metadata",
            "name",
            "spec",
            "template",
            "requirements",
            "key",
            "operator",
            "values",
            "minValues",
            "limits",
            "cpu",
            "memory",
            "disruption",
            "budgets",
            "nodes",
            "schedule",
            "duration",
            "consolidateAfter",
            "consolidationPolicy",
            "expireAfter",
            "nodeClassRef",
            "kubelet",
            "maxPods",
            "systemReserved",
            "evictionHard",
            "amiSelectorTerms",
            "alias",
            "subnetSelectorTerms",
            "tags",
            "id",
            "securityGroupSelectorTerms",
            "role",
            "provider",
            "subnetSelector",
            "ttlSecondsAfterEmpty",
            "weight",
            "taints",
            "effect",
            "items",
            "batchIdleDuration",
            "rebalancePolicy",
            "featureGates",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            prop::sample::select(vec![
                "karpenter.sh/v1",
                "karpenter.k8s.aws/v1",
                "karpenter.sh/v1beta1",
                "karpenter.sh/v1alpha5",
                "karpenter.k8s.aws/v1alpha1",
                "karpenter.k8s.aws/v1beta1",
                "nodewright.io/v1alpha1",
                "NodePool",
                "EC2NodeClass",
                "Provisioner",
                "AWSNodeTemplate",
                "Settings",
                "List",
                "In",
                "NotIn",
                "Gt",
                "Lt",
                "Exists",
                "1x",
                "8Gx",
                "-1",
                "100%",
                "0 0 * * *",
                "@daily",
                "10m",
                "Never",
                "default",
                "al2023@latest",
                "",
                "kubernetes.io/arch",
                "karpenter.sh/nodepool",
                "WhenEmpty",
                "*",
            ])
            .prop_map(Value::from),
            "[a-z0-9./%@* -]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(keys.clone(), inner, 0..6).prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    fn exercise(text: &str) {
        let (docs, _) = parse_all(text, true);
        let config: Vec<ConfigDocument> = docs
            .into_iter()
            .filter_map(|d| {
                if let Document::Config(c) = d {
                    Some(c)
                } else {
                    None
                }
            })
            .collect();
        let _ = ConfigSet::from_documents(&config);
        let items: Vec<ConfigItem> = config
            .iter()
            .map(|d| d.to_item(1, jiff::Timestamp::UNIX_EPOCH))
            .collect();
        let _ = resolve_items(&items);
        let _ = ConfigSet::parse(text);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn structured_documents(v in value()) {
            exercise(&v.to_string());
            exercise(&serde_norway::to_string(&v).unwrap_or_default());
        }

        #[test]
        fn arbitrary_text(text in "\\PC{0,200}") {
            exercise(&text);
        }

        #[test]
        fn stored_items_with_any_spec(spec in value(), kind in 0..3u8) {
            let kind = [ConfigKind::NodePool, ConfigKind::NodeClass, ConfigKind::Settings][kind as usize];
            let item = ConfigItem { kind, name: "x".into(), spec, annotations: BTreeMap::new(), version: 1, updated_at: jiff::Timestamp::UNIX_EPOCH };
            let r = resolve_items(&[item]);
            // Whatever it is, it is valid or reported, never both, never lost.
            prop_assert!(r.errors.len() + r.set.node_pools.len() + r.set.node_classes.len() + r.not_ready.len() >= usize::from(kind != ConfigKind::Settings));
        }

        #[test]
        fn near_valid_nodepools(reqs in prop::collection::vec(value(), 0..4), limits in value(), disruption in value()) {
            let doc = serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
                "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"},
                "requirements": reqs}}, "limits": limits, "disruption": disruption}});
            exercise(&doc.to_string());
        }
    }
}

/// Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
/// Context "Undecodable Kubelet Configuration": a kubelet block that cannot
/// be read (clusterDNS a bare string, not a list) is refused, so no
/// instance type is ever computed from defaults the user never set (the
/// pool is left out, its NodeClass's error says why), and correcting it is
/// enough: nothing about the refusal is remembered.
#[cfg(test)]
mod undecodable_kubelet {
    use super::*;

    fn docs(kubelet: &str) -> Result<Resolved, ConfigError> {
        let text = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms:\n  - alias: al2023@latest\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  kubelet:\n    {kubelet}\n"
        );
        parse_documents(&text).map(|d| ConfigSet::resolve(&d))
    }

    #[test]
    fn an_unreadable_kubelet_block_is_refused_not_defaulted() {
        match docs("clusterDNS: 10.0.0.10") {
            Err(e) => assert!(e.field.contains("clusterDNS"), "{e:?}"),
            Ok(r) => {
                assert!(
                    r.set.node_pool("default").is_none(),
                    "no pool is resolved on a kubelet block that cannot be read"
                );
                assert!(
                    r.errors.iter().any(|e| e.field.contains("clusterDNS")),
                    "{:?}",
                    r.errors
                );
            }
        }
        // Corrected, the same documents resolve: the pool is back.
        let r = docs("clusterDNS: [10.0.0.10]").expect("parses");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let pool = r.set.node_pool("default").expect("pool");
        assert_eq!(
            pool.launch_kubelet.cluster_dns,
            vec!["10.0.0.10".to_owned()]
        );
    }
}

/// Karpenter's RESERVED_ENIS as the `Settings` item's `reservedENIs`: it
/// reaches every pool's allocatable math; a negative count is refused.
#[cfg(test)]
mod reserved_enis {
    use super::*;

    fn resolve(settings: &str) -> Resolved {
        let text = format!(
            "apiVersion: nodewright.io/v1alpha1\nkind: Settings\nmetadata: {{name: default}}\nspec: {settings}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms:\n  - alias: al2023@latest\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n  securityGroupSelectorTerms:\n  - tags: {{karpenter.sh/discovery: demo}}\n"
        );
        ConfigSet::resolve(&parse_documents(&text).expect("documents"))
    }

    #[test]
    fn reserved_enis_reach_the_pools_and_a_negative_count_is_refused() {
        let r = resolve("{reservedENIs: 1}");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.set.settings.reserved_enis, 1);
        assert_eq!(
            r.set
                .node_pool("default")
                .expect("pool")
                .kubelet
                .reserved_enis,
            1
        );
        let r = resolve("{}");
        assert_eq!(
            r.set
                .node_pool("default")
                .expect("pool")
                .kubelet
                .reserved_enis,
            0
        );
        let r = resolve("{reservedENIs: -1}");
        assert!(
            r.errors.iter().any(|e| e.field == "spec.reservedENIs"),
            "{:?}",
            r.errors
        );
    }
}
