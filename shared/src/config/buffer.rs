//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`, Karpenter v1.13+ behind
//! its CapacityBuffer gate): spare capacity kept ready as virtual pods of a
//! pod template. The provisioner plans for them as for pending pods (they
//! are never bound), and a node holding buffer pods is not empty.
//!
//! A buffer's chunk is shaped like a `PodTemplate` (`podTemplateRef`) or
//! like the pods of a workload (`scalableRef`: a Deployment, ReplicaSet or
//! StatefulSet, whose replicas `percentage` takes a share of). Karpenter
//! reads the `PodTemplate` a buffer names from the cluster; nodewright's
//! configuration lives outside it, so the file that applies a buffer
//! carries its `PodTemplate` too, and the template is stored with the
//! buffer. A workload is read from the cluster at each decision
//! (`provisioning::buffers::resolve`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::schema::{Kind, opt, req};
use super::syntax;
use crate::resources::Resources;

/// The only provisioning strategy (and the default).
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// `spec` of a CapacityBuffer, as written (plus what nodewright stores).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityBufferSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// How many chunks (pods of the template) to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// A share of `scalableRef`'s replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i64>,
    /// The chunks' total requests stay within these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, serde_json::Value>,
    /// nodewright's: the buffer's namespace (`metadata.namespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// nodewright's: the named `PodTemplate`'s `template`, copied from the
    /// file that applied the buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectRef {
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalableRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

/// The shape of a CapacityBuffer's `spec`, as its CRD declares it.
pub const CAPACITYBUFFER_SPEC: Kind = Kind::Object(&[
    opt("provisioningStrategy", Kind::Str),
    opt("podTemplateRef", Kind::Object(&[req("name", Kind::Str)])),
    opt(
        "scalableRef",
        Kind::Object(&[
            opt("apiGroup", Kind::Str),
            req("kind", Kind::Str),
            req("name", Kind::Str),
        ]),
    ),
    opt("replicas", Kind::Int32),
    opt("percentage", Kind::Int32),
    opt("limits", Kind::Map(&Kind::IntOrString)),
    opt("namespace", Kind::Str),
    opt("podTemplate", Kind::Any),
]);

/// Where a buffer's chunk takes its shape from.
#[derive(Debug, Clone, PartialEq)]
pub enum BufferSource {
    /// The `PodTemplate` applied with the buffer (`podTemplateRef`).
    Template(Box<PodTemplateSpec>),
    /// A workload in the buffer's namespace (`scalableRef`), read from the
    /// cluster: its pod template, and its replicas for `percentage`.
    Workload(ScalableRef),
}

/// A workload kind a CapacityBuffer's `scalableRef` may name: the `apps`
/// kinds with a scale subresource that Karpenter resolves (its
/// `ResolveScalableRef`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalableKind {
    Deployment,
    ReplicaSet,
    StatefulSet,
}

impl ScalableKind {
    /// The kind a `scalableRef` names (`apiGroup` empty or absent is
    /// `apps`), or why it is not supported.
    pub fn of(api_group: Option<&str>, kind: &str) -> Result<ScalableKind, String> {
        let group = api_group.filter(|g| !g.is_empty()).unwrap_or("apps");
        if group != "apps" {
            return Err(format!(
                "unsupported scalableRef API group {group:?}: only apps (Deployment, ReplicaSet, StatefulSet)"
            ));
        }
        match kind {
            "Deployment" => Ok(ScalableKind::Deployment),
            "ReplicaSet" => Ok(ScalableKind::ReplicaSet),
            "StatefulSet" => Ok(ScalableKind::StatefulSet),
            other => Err(format!(
                "unsupported scalableRef kind {other:?}: only Deployment, ReplicaSet, StatefulSet (apps)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ScalableKind::Deployment => "Deployment",
            ScalableKind::ReplicaSet => "ReplicaSet",
            ScalableKind::StatefulSet => "StatefulSet",
        }
    }

    /// The resource, as the API names it (`deployments.apps`).
    pub fn resource(self) -> &'static str {
        match self {
            ScalableKind::Deployment => "deployments.apps",
            ScalableKind::ReplicaSet => "replicasets.apps",
            ScalableKind::StatefulSet => "statefulsets.apps",
        }
    }
}

/// A validated CapacityBuffer.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityBuffer {
    pub name: String,
    pub namespace: String,
    /// The shape of one chunk.
    pub source: BufferSource,
    pub replicas: Option<u32>,
    /// A share of the workload's replicas, in percent (with `scalableRef`;
    /// beside `podTemplateRef` it sizes nothing, as in Karpenter).
    pub percentage: Option<u32>,
    /// The chunks' total requests stay within these (`Resources` units).
    pub limits: Option<Resources>,
    /// The resources `limits` names (a limit of 0 is a limit).
    pub limit_names: Vec<String>,
}

impl CapacityBuffer {
    /// Validates a spec; every error with its field (the CRD's rules, and
    /// what nodewright needs: the pod template itself).
    pub fn from_spec_all(
        name: &str,
        spec: &CapacityBufferSpec,
    ) -> Result<CapacityBuffer, Vec<ConfigError>> {
        let mut problems: Vec<(String, String)> = Vec::new();
        if let Some(s) = spec.provisioning_strategy.as_deref()
            && s != ACTIVE_CAPACITY
        {
            problems.push((
                "spec.provisioningStrategy".into(),
                format!("{s:?} is not supported (only {ACTIVE_CAPACITY})"),
            ));
        }
        if spec.pod_template_ref.is_some() && spec.scalable_ref.is_some() {
            problems.push((
                "spec.scalableRef".into(),
                "podTemplateRef and scalableRef are mutually exclusive".into(),
            ));
        } else if spec.pod_template_ref.is_none() && spec.scalable_ref.is_none() {
            problems.push((
                "spec.podTemplateRef".into(),
                "required (or scalableRef): the PodTemplate, or the workload, each chunk of the buffer is shaped like".into(),
            ));
        }
        if let Some(r) = &spec.scalable_ref {
            for (field, v) in [("kind", &r.kind), ("name", &r.name)] {
                if v.is_empty() {
                    problems.push((
                        format!("spec.scalableRef.{field}"),
                        "must not be empty".into(),
                    ));
                }
            }
        }
        if let Some(r) = &spec.pod_template_ref {
            if r.name.is_empty() {
                problems.push((
                    "spec.podTemplateRef.name".into(),
                    "must not be empty".into(),
                ));
            }
            if spec.replicas.is_none() && spec.limits.is_empty() {
                problems.push((
                    "spec.replicas".into(),
                    "replicas or limits must be set with podTemplateRef".into(),
                ));
            }
        }
        for (field, v) in [("replicas", spec.replicas), ("percentage", spec.percentage)] {
            if let Some(v) = v
                && v < 0
            {
                problems.push((
                    format!("spec.{field}"),
                    format!("must not be negative, got {v}"),
                ));
            }
        }
        let mut limits = Resources::default();
        for (res, q) in &spec.limits {
            let field = format!("spec.limits.{res}");
            let text = match q {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let parsed = syntax::quantity(&text)
                .and_then(|()| limits.set(res, &text).map_err(|e| e.to_string()));
            if let Err(why) = parsed {
                problems.push((field, why));
            }
        }
        let template = match (&spec.pod_template, &spec.pod_template_ref) {
            (Some(t), _) => match serde_json::from_value::<PodTemplateSpec>(t.clone()) {
                Ok(t) => Some(t),
                Err(e) => {
                    problems.push((
                        "spec.podTemplateRef".into(),
                        format!("the PodTemplate's template does not read: {e}"),
                    ));
                    None
                }
            },
            (None, Some(r)) => {
                problems.push((
                    "spec.podTemplateRef.name".into(),
                    format!(
                        "PodTemplate {:?} is not in the file: apply the PodTemplate (v1) with the buffer that names it",
                        r.name
                    ),
                ));
                None
            }
            (None, None) => None,
        };
        let source = match (template, &spec.scalable_ref) {
            (Some(t), _) => Some(BufferSource::Template(Box::new(t))),
            (None, Some(r)) => Some(BufferSource::Workload(r.clone())),
            (None, None) => None,
        };
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|(field, reason)| ConfigError {
                    item: format!("capacitybuffer/{name}"),
                    field,
                    reason,
                })
                .collect());
        }
        Ok(CapacityBuffer {
            name: name.to_owned(),
            namespace: spec.namespace.clone().unwrap_or_else(|| "default".into()),
            source: source.unwrap_or_else(|| BufferSource::Template(Box::default())),
            replicas: spec.replicas.map(|r| r as u32),
            percentage: spec.percentage.map(|p| p as u32),
            limits: (!spec.limits.is_empty()).then_some(limits),
            limit_names: spec.limits.keys().cloned().collect(),
        })
    }
}

/// What a valid buffer does that its writer may not expect: `percentage`
/// beside `podTemplateRef` sizes nothing (Karpenter's CRD: "only
/// applicable if `scalableRef` is set"), and a `scalableRef` of a kind
/// Karpenter does not resolve makes no chunk (its controller's
/// `ResolutionFailed`).
pub fn warnings(name: &str, spec: &CapacityBufferSpec) -> Vec<ConfigError> {
    let item = format!("capacitybuffer/{name}");
    let mut out = Vec::new();
    if spec.pod_template_ref.is_some() && spec.percentage.is_some() {
        out.push(ConfigError {
            item: item.clone(),
            field: "spec.percentage".into(),
            reason: "ignored beside podTemplateRef: a percentage sizes a buffer from its scalableRef's replicas".into(),
        });
    }
    if let Some(r) = &spec.scalable_ref
        && spec.pod_template_ref.is_none()
        && !r.kind.is_empty()
        && let Err(why) = ScalableKind::of(r.api_group.as_deref(), &r.kind)
    {
        out.push(ConfigError {
            item,
            field: "spec.scalableRef".into(),
            reason: format!("{why}: the buffer makes no chunk (ResolutionFailed)"),
        });
    }
    out
}
