//! Reading configuration files: a YAML (or JSON) stream of Kubernetes-style
//! documents holding NodePools and NodeClasses in any supported schema
//! version, converted to the v1 forms, and [`ConfigSet`], the validated whole.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ConfigError;
use super::convert::{
    self, AwsProviderSpec, LegacyRef, ProvisionerConsolidation, ProvisionerLimits, ProvisionerSpec,
    V1beta1Disruption, V1beta1NodePoolSpec, V1beta1Template, V1beta1TemplateSpec,
};
use super::disruption::{BudgetSpec, DisruptionSpec};
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
use crate::config::buffer::{CAPACITYBUFFER_SPEC, CapacityBuffer, CapacityBufferSpec};
use crate::config::nodeclass::{
    AmiSelectorTermSpec, EC2NodeClassSpec, KubeletSpec, NODECLASS_SPEC, NodeClass,
    SecurityGroupSelectorTermSpec, SubnetSelectorTermSpec,
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

mod fields;
mod read;
mod set;
mod stored;
#[cfg(test)]
mod tests;

use fields::*;
use read::*;
pub use set::*;
pub use stored::*;
