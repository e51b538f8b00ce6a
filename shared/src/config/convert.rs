//! Older Karpenter schemas converted to the v1 forms:
//!
//! - `karpenter.sh/v1alpha5 Provisioner` → v1 `NodePool` (and an
//!   `EC2NodeClass` when the AWS settings are inline in `spec.provider`);
//! - `karpenter.sh/v1beta1 NodePool` → v1 `NodePool`;
//! - `karpenter.k8s.aws/v1beta1 EC2NodeClass` → v1 `EC2NodeClass`;
//! - `karpenter.k8s.aws/v1alpha1 AWSNodeTemplate` → v1 `EC2NodeClass`.
//!
//! Conversions keep the behaviour the old form had, including its defaults
//! where v1 changed them (expiry, consolidation, instance metadata hop limit).
//! What v1 cannot express (launch templates, Ubuntu) is a [`ConfigError`]
//! naming the field in the old form. The result is validated later like any
//! v1 document.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::disruption::{BudgetSpec, DisruptionSpec};
use super::nodeclass::{
    AmiFamily, AmiSelectorTermSpec, EC2NodeClassSpec, KubeletSpec, SecurityGroupSelectorTermSpec,
    SubnetSelectorTermSpec, string_map,
};
use super::nodepool::{
    NODE_CLASS_GROUP, NODE_CLASS_KIND, NodeClaimTemplate, NodeClaimTemplateSpec, NodeClassRef,
    NodePoolSpec, RequirementSpec, TaintSpec, TemplateMetadata,
};

/// `spec` of a `karpenter.sh/v1alpha5 Provisioner`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionerSpec {
    #[serde(default)]
    pub requirements: Vec<RequirementSpec>,
    #[serde(default, deserialize_with = "string_map")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "string_map")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    #[serde(default)]
    pub startup_taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ProvisionerLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// v1alpha5's kubelet settings (also `containerRuntime`, dropped: v1 nodes run containerd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_configuration: Option<serde_json::Value>,
    /// The AWS settings inline (`extensions.karpenter.sh/v1alpha1 AWS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AwsProviderSpec>,
    /// An `AWSNodeTemplate` by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_ref: Option<LegacyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_empty: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_until_expired: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation: Option<ProvisionerConsolidation>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisionerLimits {
    #[serde(default)]
    pub resources: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisionerConsolidation {
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A v1alpha5/v1beta1 object reference (`apiVersion`, `kind`, `name`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LegacyRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
}

/// The AWS settings of v1alpha5: a Provisioner's inline `spec.provider`, or
/// the `spec` of a `karpenter.k8s.aws/v1alpha1 AWSNodeTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsProviderSpec {
    /// Inline providers carried `apiVersion: extensions.karpenter.sh/v1alpha1, kind: AWS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Tag key → value (`*`: any value); `aws::ids` (or `aws-ids`) lists ids.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_string_map"
    )]
    pub subnet_selector: Option<BTreeMap<String, String>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_string_map"
    )]
    pub security_group_selector: Option<BTreeMap<String, String>>,
    /// Tags, plus `aws::ids`, `aws::name`, `aws::owners`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_string_map"
    )]
    pub ami_selector: Option<BTreeMap<String, String>>,
    /// `AL2` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, deserialize_with = "string_map")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<serde_json::Value>,
    #[serde(default)]
    pub block_device_mappings: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// `spec` of a `karpenter.sh/v1beta1 NodePool`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct V1beta1NodePoolSpec {
    #[serde(default)]
    pub template: V1beta1Template,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<V1beta1Disruption>,
    #[serde(default)]
    pub limits: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct V1beta1Template {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    #[serde(default)]
    pub spec: V1beta1TemplateSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct V1beta1TemplateSpec {
    #[serde(default)]
    pub requirements: Vec<RequirementSpec>,
    #[serde(default)]
    pub taints: Vec<TaintSpec>,
    #[serde(default)]
    pub startup_taints: Vec<TaintSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<LegacyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<serde_json::Value>,
    /// Deprecated and ignored by Karpenter v1beta1 itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct V1beta1Disruption {
    /// `WhenEmpty` or `WhenUnderutilized` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
    /// `720h` when absent; moved to `template.spec.expireAfter` in v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<BudgetSpec>>,
}

/// A converted Provisioner: its NodePool, and its NodeClass (named like the
/// Provisioner) when the AWS settings were inline.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertedProvisioner {
    pub node_pool: NodePoolSpec,
    pub node_class: Option<EC2NodeClassSpec>,
    /// `(field, reason)` of each default the old form relied on.
    pub warnings: Vec<(String, String)>,
}

type Fail = (String, String);
/// Selector terms as (id, tags).
type IdOrTags = Vec<(Option<String>, BTreeMap<String, String>)>;

/// `karpenter.sh/v1alpha5 Provisioner` → v1.
///
/// Disruption: `ttlSecondsAfterEmpty: N` becomes `WhenEmpty` after `Ns`;
/// `consolidation.enabled: true` becomes `WhenEmptyOrUnderutilized` after
/// `0s`; with neither, v1alpha5 removed no node for being empty or
/// underutilized, so consolidation is `Never`. Budgets keep v1's default
/// (10 %), as Karpenter's own migration did.
///
/// Expiry: v1alpha5 documented `ttlSecondsUntilExpired` as "if omitted, the
/// feature is disabled and nodes will never expire" (it had no default, unlike
/// v1's 720h), so absence becomes `expireAfter: Never`.
pub fn provisioner_to_v1(
    name: &str,
    spec: &ProvisionerSpec,
) -> Result<ConvertedProvisioner, ConfigError> {
    let err = |(field, reason): Fail| ConfigError {
        item: format!("provisioner/{name}"),
        field,
        reason,
    };
    let mut warnings = Vec::new();
    let consolidation = spec
        .consolidation
        .as_ref()
        .and_then(|c| c.enabled)
        .unwrap_or(false);
    let (policy, after) = match (spec.ttl_seconds_after_empty, consolidation) {
        (Some(_), true) => {
            return Err(err((
                "spec.ttlSecondsAfterEmpty".into(),
                "ttlSecondsAfterEmpty and consolidation.enabled are mutually exclusive".into(),
            )));
        }
        (Some(n), false) => (
            "WhenEmpty",
            seconds(n, "spec.ttlSecondsAfterEmpty").map_err(err)?,
        ),
        (None, true) => ("WhenEmptyOrUnderutilized", "0s".to_owned()),
        (None, false) => ("WhenEmpty", "Never".to_owned()),
    };
    let expire_after = match spec.ttl_seconds_until_expired {
        Some(n) => seconds(n, "spec.ttlSecondsUntilExpired").map_err(err)?,
        None => "Never".to_owned(),
    };
    let kubelet = match &spec.kubelet_configuration {
        None => None,
        Some(v) => Some(legacy_kubelet(v, "spec.kubeletConfiguration").map_err(err)?),
    };
    let (node_class, class_name) = match (&spec.provider, &spec.provider_ref) {
        (Some(_), Some(_)) => {
            return Err(err((
                "spec.providerRef".into(),
                "provider and providerRef are mutually exclusive".into(),
            )));
        }
        (Some(provider), None) => (
            Some(aws_provider_to_v1(provider, "spec.provider", Some(&mut warnings)).map_err(err)?),
            name.to_owned(),
        ),
        (None, Some(r)) => {
            if let Some(kind) = r.kind.as_deref().filter(|k| *k != "AWSNodeTemplate") {
                return Err(err((
                    "spec.providerRef.kind".into(),
                    format!("unsupported kind {kind:?} (expected AWSNodeTemplate)"),
                )));
            }
            (None, r.name.clone())
        }
        (None, None) => {
            return Err(err((
                "spec.providerRef".into(),
                "one of provider (inline AWS settings) and providerRef (an AWSNodeTemplate) is required".into(),
            )));
        }
    };
    let node_pool = NodePoolSpec {
        template: NodeClaimTemplate {
            metadata: TemplateMetadata {
                labels: spec.labels.clone(),
                annotations: spec.annotations.clone(),
            },
            spec: NodeClaimTemplateSpec {
                requirements: spec.requirements.clone(),
                taints: spec.taints.clone(),
                startup_taints: spec.startup_taints.clone(),
                node_class_ref: Some(v1_ref(&class_name)),
                expire_after: Some(expire_after),
                termination_grace_period: None,
                kubelet,
            },
        },
        disruption: Some(DisruptionSpec {
            consolidation_policy: Some(policy.to_owned()),
            consolidate_after: Some(after),
            budgets: None,
        }),
        limits: spec
            .limits
            .as_ref()
            .map(|l| l.resources.clone())
            .unwrap_or_default(),
        weight: spec.weight,
        replicas: None,
    };
    Ok(ConvertedProvisioner {
        node_pool,
        node_class,
        warnings,
    })
}

/// `karpenter.sh/v1beta1 NodePool` → v1: `WhenUnderutilized` becomes
/// `WhenEmptyOrUnderutilized` (after `0s`, the only delay v1beta1 allowed
/// with it), `disruption.expireAfter` moves to `template.spec.expireAfter`
/// (v1beta1's default, 720h, is v1's too), and the `nodeClassRef`'s
/// `apiVersion` becomes a `group`.
pub fn v1beta1_nodepool_to_v1(
    name: &str,
    spec: &V1beta1NodePoolSpec,
) -> Result<NodePoolSpec, ConfigError> {
    let err = |(field, reason): Fail| ConfigError {
        item: format!("nodepool/{name}"),
        field,
        reason,
    };
    let d = spec.disruption.clone().unwrap_or_default();
    let (policy, after) = match (
        d.consolidation_policy
            .as_deref()
            .unwrap_or("WhenUnderutilized"),
        d.consolidate_after,
    ) {
        ("WhenUnderutilized", None) => ("WhenEmptyOrUnderutilized", "0s".to_owned()),
        ("WhenUnderutilized", Some(_)) => {
            return Err(err((
                "spec.disruption.consolidateAfter".into(),
                "cannot be combined with consolidationPolicy WhenUnderutilized in v1beta1".into(),
            )));
        }
        ("WhenEmpty", Some(after)) => ("WhenEmpty", after),
        ("WhenEmpty", None) => {
            return Err(err((
                "spec.disruption.consolidateAfter".into(),
                "required with consolidationPolicy WhenEmpty".into(),
            )));
        }
        (other, _) => {
            return Err(err((
                "spec.disruption.consolidationPolicy".into(),
                format!("unknown policy {other:?}: expected WhenEmpty or WhenUnderutilized"),
            )));
        }
    };
    let t = &spec.template.spec;
    let node_class_ref = match &t.node_class_ref {
        None => None,
        Some(r) => {
            Some(ref_to_v1(r, "EC2NodeClass", "spec.template.spec.nodeClassRef").map_err(err)?)
        }
    };
    let kubelet = match &t.kubelet {
        None => None,
        Some(v) => Some(legacy_kubelet(v, "spec.template.spec.kubelet").map_err(err)?),
    };
    Ok(NodePoolSpec {
        template: NodeClaimTemplate {
            metadata: spec.template.metadata.clone(),
            spec: NodeClaimTemplateSpec {
                requirements: t.requirements.clone(),
                taints: t.taints.clone(),
                startup_taints: t.startup_taints.clone(),
                node_class_ref,
                expire_after: d.expire_after,
                termination_grace_period: None,
                kubelet,
            },
        },
        disruption: Some(DisruptionSpec {
            consolidation_policy: Some(policy.to_owned()),
            consolidate_after: Some(after),
            budgets: d.budgets,
        }),
        limits: spec.limits.clone(),
        weight: spec.weight,
        replicas: None,
    })
}

/// `karpenter.k8s.aws/v1beta1 EC2NodeClass` (read with the v1 struct, whose
/// fields are a superset) → v1: without `amiSelectorTerms`, v1beta1 used the
/// family's latest EKS-optimized AMI, which v1 spells `alias: <family>@latest`;
/// without `metadataOptions`, v1beta1's defaults (hop limit 2) are kept.
pub fn v1beta1_nodeclass_to_v1(
    name: &str,
    spec: &EC2NodeClassSpec,
) -> Result<EC2NodeClassSpec, ConfigError> {
    let err = |(field, reason): Fail| ConfigError {
        item: format!("nodeclass/{name}"),
        field,
        reason,
    };
    let Some(family) = spec.ami_family.as_deref() else {
        return Err(err(("spec.amiFamily".into(), "required in v1beta1".into())));
    };
    let family = legacy_family(family, "spec.amiFamily").map_err(err)?;
    let mut out = spec.clone();
    if out.ami_selector_terms.is_empty() {
        out.ami_selector_terms = vec![latest_alias(family, "spec.amiSelectorTerms").map_err(err)?];
    }
    out.metadata_options
        .get_or_insert_with(legacy_metadata_options);
    Ok(out)
}

/// `karpenter.k8s.aws/v1alpha1 AWSNodeTemplate` → v1 EC2NodeClass.
pub fn aws_node_template_to_v1(
    name: &str,
    spec: &AwsProviderSpec,
) -> Result<EC2NodeClassSpec, ConfigError> {
    aws_provider_to_v1(spec, "spec", None).map_err(|(field, reason)| ConfigError {
        item: format!("awsnodetemplate/{name}"),
        field,
        reason,
    })
}

/// v1alpha5 AWS settings → v1 EC2NodeClass; `prefix` is where they were
/// written (`spec.provider` inline, `spec` in an AWSNodeTemplate).
///
/// Inline settings (`defaults` given) may leave out the subnet and security
/// group selectors: Karpenter v0.5 (the walkthroughs' era) defaulted each
/// to the resources tagged `kubernetes.io/cluster/<cluster name>`, which
/// the class keeps as `clusterDiscovery`, and a warning says so. Later
/// versions, and every AWSNodeTemplate, required them.
fn aws_provider_to_v1(
    p: &AwsProviderSpec,
    prefix: &str,
    defaults: Option<&mut Vec<(String, String)>>,
) -> Result<EC2NodeClassSpec, Fail> {
    if p.launch_template.is_some() {
        return Err((
            format!("{prefix}.launchTemplate"),
            "launch templates are not supported (Karpenter v1 removed them): set the AMI, security groups, user data and block devices in the node class instead".into(),
        ));
    }
    let family = legacy_family(
        p.ami_family.as_deref().unwrap_or("AL2"),
        &format!("{prefix}.amiFamily"),
    )?;
    let subnet_field = format!("{prefix}.subnetSelector");
    let sg_field = format!("{prefix}.securityGroupSelector");
    let empty = BTreeMap::new();
    let (subnets, groups, cluster_discovery) = match (
        &p.subnet_selector,
        &p.security_group_selector,
        defaults,
    ) {
        (Some(s), Some(g), _) => (s, g, false),
        (s, g, Some(warnings)) => {
            for (field, what, given) in [
                (&subnet_field, "subnets", s.is_some()),
                (&sg_field, "security groups", g.is_some()),
            ] {
                if !given {
                    warnings.push((
                            field.clone(),
                            format!("not set: the {what} tagged kubernetes.io/cluster/<cluster name> (any value) are used, as Karpenter v0.5 defaulted it"),
                        ));
                }
            }
            (
                s.as_ref().unwrap_or(&empty),
                g.as_ref().unwrap_or(&empty),
                true,
            )
        }
        (None, _, None) => {
            return Err((
                subnet_field,
                "required: the subnets to launch nodes in (tags, or aws::ids)".into(),
            ));
        }
        (_, None, None) => {
            return Err((
                sg_field,
                "required: the security groups of the nodes (tags, or aws::ids)".into(),
            ));
        }
    };
    let subnet_selector_terms = selector_terms_or_none(subnets, &subnet_field)?
        .into_iter()
        .map(|(id, tags)| SubnetSelectorTermSpec { id, tags })
        .collect();
    let security_group_selector_terms = selector_terms_or_none(groups, &sg_field)?
        .into_iter()
        .map(|(id, tags)| SecurityGroupSelectorTermSpec {
            id,
            name: None,
            tags,
        })
        .collect();
    let ami_field = format!("{prefix}.amiSelector");
    let ami_selector_terms = match &p.ami_selector {
        Some(sel) => ami_terms(sel, &ami_field)?,
        None => vec![latest_alias(family, &ami_field)?],
    };
    Ok(EC2NodeClassSpec {
        ami_family: Some(family.as_str().to_owned()),
        ami_selector_terms,
        subnet_selector_terms,
        security_group_selector_terms,
        role: None,
        instance_profile: p.instance_profile.clone(),
        tags: p.tags.clone(),
        user_data: p.user_data.clone(),
        kubelet: None,
        block_device_mappings: p.block_device_mappings.clone(),
        instance_store_policy: None,
        metadata_options: Some(
            p.metadata_options
                .clone()
                .unwrap_or_else(legacy_metadata_options),
        ),
        associate_public_ip_address: None,
        detailed_monitoring: p.detailed_monitoring,
        context: p.context.clone(),
        // Without one, v1alpha5 used the aws.defaultInstanceProfile setting.
        default_instance_profile: p.instance_profile.is_none(),
        cluster_discovery,
        ..EC2NodeClassSpec::default()
    })
}

/// [`selector_terms`], or none for an empty selector (the cluster's tag).
fn selector_terms_or_none(sel: &BTreeMap<String, String>, field: &str) -> Result<IdOrTags, Fail> {
    if sel.is_empty() {
        Ok(Vec::new())
    } else {
        selector_terms(sel, field)
    }
}

fn seconds(n: i64, field: &str) -> Result<String, Fail> {
    if n < 0 {
        return Err((field.into(), format!("must not be negative, got {n}")));
    }
    Ok(format!("{n}s"))
}

fn v1_ref(name: &str) -> NodeClassRef {
    NodeClassRef {
        group: Some(NODE_CLASS_GROUP.into()),
        kind: Some(NODE_CLASS_KIND.into()),
        name: name.into(),
    }
}

/// `{apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name}` → `{group, kind, name}`.
fn ref_to_v1(r: &LegacyRef, expected_kind: &str, field: &str) -> Result<NodeClassRef, Fail> {
    if let Some(kind) = r.kind.as_deref().filter(|k| *k != expected_kind) {
        return Err((
            format!("{field}.kind"),
            format!("unsupported kind {kind:?} (expected {expected_kind})"),
        ));
    }
    if let Some(api) = &r.api_version {
        let group = api.split_once('/').map_or(api.as_str(), |(g, _)| g);
        if group != NODE_CLASS_GROUP {
            return Err((
                format!("{field}.apiVersion"),
                format!("unsupported API group {group:?} (expected {NODE_CLASS_GROUP})"),
            ));
        }
    }
    if r.name.is_empty() {
        return Err((format!("{field}.name"), "must not be empty".into()));
    }
    Ok(v1_ref(&r.name))
}

/// Kubelet settings of v1alpha5/v1beta1 (the v1 fields, plus v1alpha5's
/// `containerRuntime`, which v1 no longer has: its nodes run containerd).
fn legacy_kubelet(v: &serde_json::Value, field: &str) -> Result<KubeletSpec, Fail> {
    let mut v = v.clone();
    if let Some(obj) = v.as_object_mut()
        && let Some(runtime) = obj.remove("containerRuntime")
        && runtime.as_str() != Some("containerd")
    {
        return Err((
            format!("{field}.containerRuntime"),
            format!("unsupported runtime {runtime} (nodes run containerd; remove the setting)"),
        ));
    }
    let kubelet: KubeletSpec =
        serde_json::from_value(v).map_err(|e| (field.to_owned(), e.to_string()))?;
    // These versions' kubelet block had a fixed set of fields; only v1's
    // EC2NodeClass passes any KubeletConfiguration field through.
    if let Some(name) = kubelet.other.keys().next() {
        return Err((
            field.into(),
            format!(
                "unknown field {name:?} (this version's kubelet settings are clusterDNS, maxPods, podsPerCore, systemReserved, kubeReserved, evictionHard, evictionSoft, evictionSoftGracePeriod, evictionMaxPodGracePeriod, imageGCHighThresholdPercent, imageGCLowThresholdPercent and cpuCFSQuota)"
            ),
        ));
    }
    Ok(kubelet)
}

fn legacy_family(s: &str, field: &str) -> Result<AmiFamily, Fail> {
    AmiFamily::parse(s).ok_or_else(|| {
        let hint = if s == "Ubuntu" { "; v1 dropped Ubuntu: use Custom with an AMI selector" } else { "" };
        (field.into(), format!("unknown AMI family {s:?} (AL2, AL2023, Bottlerocket, Windows2019, Windows2022, Custom){hint}"))
    })
}

fn latest_alias(family: AmiFamily, field: &str) -> Result<AmiSelectorTermSpec, Fail> {
    match family.alias_name() {
        Some(alias) => Ok(AmiSelectorTermSpec {
            alias: Some(format!("{alias}@latest")),
            ..AmiSelectorTermSpec::default()
        }),
        None => Err((
            field.into(),
            "required with amiFamily Custom: Custom nodes need their AMI selected".into(),
        )),
    }
}

/// v1alpha5's `metadataOptions` defaults (v1 lowered the hop limit to 1).
fn legacy_metadata_options() -> serde_json::Value {
    serde_json::json!({
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 2,
        "httpTokens": "required"
    })
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

const ID_KEYS: [&str; 2] = ["aws::ids", "aws-ids"];

/// A v1alpha5 selector map → (id, tags) terms: `aws::ids` gives one id
/// term per id; the other keys are one tags term (`*` values kept: any value).
fn selector_terms(map: &BTreeMap<String, String>, field: &str) -> Result<IdOrTags, Fail> {
    if map.is_empty() {
        return Err((
            field.into(),
            "must select something (tags, or aws::ids)".into(),
        ));
    }
    let mut ids = Vec::new();
    let mut tags = BTreeMap::new();
    for (k, v) in map {
        if ID_KEYS.contains(&k.as_str()) {
            ids.extend(split_list(v));
        } else if k.starts_with("aws::") {
            return Err((
                format!("{field}[{k}]"),
                format!("unsupported selector key {k:?} (aws::ids or tags)"),
            ));
        } else {
            tags.insert(k.clone(), v.clone());
        }
    }
    if !ids.is_empty() && !tags.is_empty() {
        return Err((
            field.into(),
            "aws::ids cannot be combined with tags: v1 selector terms match ids or tags, not both; list only the ids".into(),
        ));
    }
    if ids.is_empty() && tags.is_empty() {
        return Err((field.into(), "aws::ids lists no id".into()));
    }
    Ok(if tags.is_empty() {
        ids.into_iter()
            .map(|id| (Some(id), BTreeMap::new()))
            .collect()
    } else {
        vec![(None, tags)]
    })
}

/// A v1alpha5 `amiSelector` → v1 AMI terms: `aws::ids` → one id term each;
/// `aws::name`, `aws::owners` and tags → one term per owner.
fn ami_terms(
    map: &BTreeMap<String, String>,
    field: &str,
) -> Result<Vec<AmiSelectorTermSpec>, Fail> {
    let mut ids = Vec::new();
    let mut name = None;
    let mut owners = Vec::new();
    let mut tags = BTreeMap::new();
    for (k, v) in map {
        match k.as_str() {
            "aws::ids" | "aws-ids" => ids.extend(split_list(v)),
            "aws::name" => name = Some(v.clone()),
            "aws::owners" => owners.extend(split_list(v)),
            other if other.starts_with("aws::") => {
                return Err((
                    format!("{field}[{k}]"),
                    format!(
                        "unsupported selector key {k:?} (aws::ids, aws::name, aws::owners or tags)"
                    ),
                ));
            }
            _ => {
                tags.insert(k.clone(), v.clone());
            }
        }
    }
    if !ids.is_empty() {
        if name.is_some() || !owners.is_empty() || !tags.is_empty() {
            return Err((field.into(), "aws::ids cannot be combined with other keys: v1 id terms stand alone; list only the ids".into()));
        }
        return Ok(ids
            .into_iter()
            .map(|id| AmiSelectorTermSpec {
                id: Some(id),
                ..AmiSelectorTermSpec::default()
            })
            .collect());
    }
    if name.is_none() && tags.is_empty() {
        return Err((
            field.into(),
            "must select something (tags, aws::name or aws::ids)".into(),
        ));
    }
    let owners: Vec<Option<String>> = if owners.is_empty() {
        vec![None]
    } else {
        owners.into_iter().map(Some).collect()
    };
    Ok(owners
        .into_iter()
        .map(|owner| AmiSelectorTermSpec {
            name: name.clone(),
            owner,
            tags: tags.clone(),
            ..AmiSelectorTermSpec::default()
        })
        .collect())
}

fn opt_string_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    string_map(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::disruption::{ConsolidationPolicy, format_duration};
    use crate::config::nodeclass::{AmiSelector, NodeClass, NodeIdentity, SelectorTerm};
    use crate::config::nodepool::NodePool;
    use jiff::SignedDuration;

    fn provisioner(json: serde_json::Value) -> ProvisionerSpec {
        serde_json::from_value(json).expect("provisioner spec")
    }

    fn inline() -> serde_json::Value {
        serde_json::json!({
            "subnetSelector": {"kubernetes.io/cluster/demo": "*"},
            "securityGroupSelector": {"kubernetes.io/cluster/demo": "*"},
            "instanceProfile": "KarpenterNodeInstanceProfile"
        })
    }

    #[test]
    fn provisioner_with_inline_provider() {
        let c = provisioner_to_v1(
            "default",
            &provisioner(serde_json::json!({
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                "labels": {"team": "a"},
                "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
                "limits": {"resources": {"cpu": 1000, "memory": "1000Gi"}},
                "weight": 5,
                "kubeletConfiguration": {"maxPods": 30, "containerRuntime": "containerd", "clusterDNS": ["10.0.0.10"]},
                "provider": inline(),
                "ttlSecondsAfterEmpty": 30,
                "ttlSecondsUntilExpired": 1800
            })),
        )
        .expect("converts");
        let pool = NodePool::from_spec("default", &c.node_pool).expect("valid pool");
        assert_eq!(pool.disruption.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(
            pool.disruption.consolidate_after,
            Some(SignedDuration::from_secs(30))
        );
        assert_eq!(pool.expire_after, Some(SignedDuration::from_secs(1800)));
        assert_eq!(pool.kubelet.max_pods, Some(30));
        assert_eq!(
            pool.launch_kubelet.cluster_dns,
            vec!["10.0.0.10".to_string()]
        );
        assert_eq!(pool.node_class.as_deref(), Some("default"));
        assert_eq!(pool.limits.resources.get("cpu"), Some(&1_000_000));
        assert_eq!(pool.weight, 5);
        assert_eq!(pool.labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(pool.taints.len(), 1);
        let class = NodeClass::from_spec("default", &c.node_class.expect("inline provider"))
            .expect("valid class");
        assert_eq!(class.ami_family, AmiFamily::AL2);
        assert_eq!(
            class.ami_selector_terms,
            vec![AmiSelector::Alias {
                family: AmiFamily::AL2,
                version: "latest".into()
            }]
        );
        let any: BTreeMap<String, String> =
            [("kubernetes.io/cluster/demo".to_string(), "*".to_string())].into();
        assert_eq!(
            class.subnet_selector_terms,
            vec![SelectorTerm::Tags(any.clone())]
        );
        assert_eq!(
            class.security_group_selector_terms,
            vec![SelectorTerm::Tags(any)]
        );
        assert_eq!(
            class.identity,
            NodeIdentity::InstanceProfile("KarpenterNodeInstanceProfile".into())
        );
        assert_eq!(
            class
                .metadata_options
                .as_ref()
                .and_then(|m| m.get("httpPutResponseHopLimit")),
            Some(&serde_json::json!(2))
        );
    }

    #[test]
    fn provisioner_disruption_and_expiry_defaults() {
        let with = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"providerRef": {"name": "tmpl"}});
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            let c = provisioner_to_v1("p", &provisioner(v)).expect("converts");
            assert!(c.node_class.is_none());
            NodePool::from_spec("p", &c.node_pool).expect("valid")
        };
        let none = with(serde_json::json!({}));
        assert_eq!(none.disruption.policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(
            none.disruption.consolidate_after, None,
            "no emptiness TTL, no consolidation: Never"
        );
        assert_eq!(
            none.expire_after, None,
            "v1alpha5 nodes never expired by default"
        );
        assert_eq!(none.node_class.as_deref(), Some("tmpl"));
        let consolidating = with(
            serde_json::json!({"consolidation": {"enabled": true}, "ttlSecondsUntilExpired": 2592000}),
        );
        assert_eq!(
            consolidating.disruption.policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(
            consolidating.disruption.consolidate_after,
            Some(SignedDuration::ZERO)
        );
        assert_eq!(
            consolidating.expire_after.map(format_duration).as_deref(),
            Some("720h")
        );
    }

    /// Karpenter v0.5 discovered a Provisioner's subnets and security groups
    /// by the cluster's tag when its provider named none; an AWSNodeTemplate
    /// (v0.14 and later) always had to.
    #[test]
    fn inline_providers_default_their_selectors_to_the_cluster_tag() {
        let p = provisioner_to_v1(
            "p",
            &provisioner(serde_json::json!({"provider": {"securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}})),
        )
        .expect("converts");
        let class = p.node_class.expect("a class");
        assert!(class.cluster_discovery && class.subnet_selector_terms.is_empty());
        assert_eq!(class.security_group_selector_terms.len(), 1);
        assert_eq!(
            p.warnings
                .iter()
                .map(|(f, _)| f.as_str())
                .collect::<Vec<_>>(),
            ["spec.provider.subnetSelector"]
        );
        let valid = NodeClass::from_spec("p", &class).expect("valid");
        assert_eq!(
            valid.subnet_selector_terms,
            [crate::config::nodeclass::SelectorTerm::ClusterTag]
        );
        let template: AwsProviderSpec =
            serde_json::from_value(serde_json::json!({"securityGroupSelector": {"a": "b"}}))
                .expect("spec");
        let e = aws_node_template_to_v1("t", &template).expect_err("selectors required");
        assert_eq!(e.field, "spec.subnetSelector");
    }

    #[test]
    fn provisioner_errors_name_the_old_field() {
        let cases = [
            (
                serde_json::json!({"provider": {"launchTemplate": "lt", "subnetSelector": {"a": "b"}}}),
                "spec.provider.launchTemplate",
                "not supported",
            ),
            (
                serde_json::json!({"provider": {"amiFamily": "Ubuntu", "subnetSelector": {"a": "b"}}}),
                "spec.provider.amiFamily",
                "dropped Ubuntu",
            ),
            (
                serde_json::json!({"provider": {"amiFamily": "Custom", "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}}),
                "spec.provider.amiSelector",
                "Custom",
            ),
            (
                serde_json::json!({"provider": {"subnetSelector": {"aws::ids": "subnet-1", "a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}}),
                "spec.provider.subnetSelector",
                "cannot be combined",
            ),
            (
                serde_json::json!({"provider": {"subnetSelector": {"aws::bogus": "x"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}}),
                "spec.provider.subnetSelector[aws::bogus]",
                "unsupported selector key",
            ),
            (
                serde_json::json!({"provider": inline(), "providerRef": {"name": "x"}}),
                "spec.providerRef",
                "mutually exclusive",
            ),
            (serde_json::json!({}), "spec.providerRef", "is required"),
            (
                serde_json::json!({"providerRef": {"kind": "EC2NodeClass", "name": "x"}}),
                "spec.providerRef.kind",
                "AWSNodeTemplate",
            ),
            (
                serde_json::json!({"providerRef": {"name": "x"}, "ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": true}}),
                "spec.ttlSecondsAfterEmpty",
                "mutually exclusive",
            ),
            (
                serde_json::json!({"providerRef": {"name": "x"}, "ttlSecondsUntilExpired": -1}),
                "spec.ttlSecondsUntilExpired",
                "negative",
            ),
            (
                serde_json::json!({"providerRef": {"name": "x"}, "kubeletConfiguration": {"containerRuntime": "dockerd"}}),
                "spec.kubeletConfiguration.containerRuntime",
                "containerd",
            ),
            (
                serde_json::json!({"providerRef": {"name": "x"}, "kubeletConfiguration": {"maxPod": 3}}),
                "spec.kubeletConfiguration",
                "unknown field",
            ),
        ];
        for (json, field, reason) in cases {
            let e =
                provisioner_to_v1("p", &provisioner(json.clone())).expect_err(&json.to_string());
            assert_eq!(e.item, "provisioner/p");
            assert_eq!(e.field, field, "{json}");
            assert!(e.reason.contains(reason), "{json}: {}", e.reason);
        }
    }

    #[test]
    fn aws_node_template_selectors() {
        let spec: AwsProviderSpec = serde_json::from_value(serde_json::json!({
            "subnetSelector": {"aws::ids": "subnet-1, subnet-2"},
            "securityGroupSelector": {"aws-ids": "sg-1"},
            "amiSelector": {"aws::name": "my-ami-*", "aws::owners": "self,123456789012", "team": "a"},
            "amiFamily": "Bottlerocket",
            "instanceProfile": "prof",
            "userData": "[settings]",
            "tags": {"team": "a"},
            "detailedMonitoring": true,
            "metadataOptions": {"httpTokens": "optional"}
        }))
        .expect("template");
        let v1 = aws_node_template_to_v1("t", &spec).expect("converts");
        let class = NodeClass::from_spec("t", &v1).expect("valid");
        assert_eq!(
            class.subnet_selector_terms,
            vec![
                SelectorTerm::Id("subnet-1".into()),
                SelectorTerm::Id("subnet-2".into())
            ]
        );
        assert_eq!(
            class.security_group_selector_terms,
            vec![SelectorTerm::Id("sg-1".into())]
        );
        assert_eq!(class.ami_family, AmiFamily::Bottlerocket);
        assert_eq!(class.ami_selector_terms.len(), 2);
        assert_eq!(
            class.ami_selector_terms[1],
            AmiSelector::Query {
                name: Some("my-ami-*".into()),
                owner: Some("123456789012".into()),
                tags: [("team".to_string(), "a".to_string())].into()
            }
        );
        assert_eq!(class.user_data.as_deref(), Some("[settings]"));
        assert!(class.detailed_monitoring);
        assert_eq!(
            class.metadata_options,
            Some(serde_json::json!({"httpTokens": "optional"}))
        );
        let ids: AwsProviderSpec = serde_json::from_value(serde_json::json!({
            "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p",
            "amiSelector": {"aws::ids": "ami-1", "team": "a"}
        }))
        .expect("template");
        let e = aws_node_template_to_v1("t", &ids).expect_err("ids with tags");
        assert_eq!(
            (e.item.as_str(), e.field.as_str()),
            ("awsnodetemplate/t", "spec.amiSelector")
        );
    }

    #[test]
    fn v1beta1_nodepool() {
        let spec: V1beta1NodePoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {
                "nodeClassRef": {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"},
                "kubelet": {"maxPods": 110, "systemReserved": {"cpu": "100m"}},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
            }},
            "disruption": {"expireAfter": "Never", "budgets": [{"nodes": "1"}]}
        }))
        .expect("v1beta1 spec");
        let v1 = v1beta1_nodepool_to_v1("default", &spec).expect("converts");
        assert_eq!(v1.template.spec.node_class_ref, Some(v1_ref("default")));
        assert_eq!(v1.template.spec.expire_after.as_deref(), Some("Never"));
        let pool = NodePool::from_spec("default", &v1).expect("valid");
        assert_eq!(
            pool.disruption.policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(
            pool.disruption.consolidate_after,
            Some(SignedDuration::ZERO)
        );
        assert_eq!(pool.disruption.budgets.len(), 1);
        assert_eq!(pool.expire_after, None);
        assert_eq!(pool.kubelet.max_pods, Some(110));
        assert_eq!(
            pool.launch_kubelet
                .system_reserved
                .get("cpu")
                .map(String::as_str),
            Some("100m")
        );
        // No disruption block: v1beta1's defaults (WhenUnderutilized, 720h).
        let bare = v1beta1_nodepool_to_v1("p", &V1beta1NodePoolSpec::default()).expect("converts");
        let pool = NodePool::from_spec("p", &bare).expect("valid");
        assert_eq!(pool.expire_after, Some(SignedDuration::from_hours(720)));
        assert_eq!(
            pool.disruption.policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
    }

    #[test]
    fn v1beta1_nodepool_errors() {
        let cases = [
            (
                serde_json::json!({"disruption": {"consolidationPolicy": "WhenEmpty"}}),
                "spec.disruption.consolidateAfter",
                "required",
            ),
            (
                serde_json::json!({"disruption": {"consolidateAfter": "30s"}}),
                "spec.disruption.consolidateAfter",
                "WhenUnderutilized",
            ),
            (
                serde_json::json!({"disruption": {"consolidationPolicy": "Always"}}),
                "spec.disruption.consolidationPolicy",
                "unknown policy",
            ),
            (
                serde_json::json!({"template": {"spec": {"nodeClassRef": {"kind": "AWSNodeTemplate", "name": "x"}}}}),
                "spec.template.spec.nodeClassRef.kind",
                "EC2NodeClass",
            ),
            (
                serde_json::json!({"template": {"spec": {"nodeClassRef": {"apiVersion": "example.com/v1", "name": "x"}}}}),
                "spec.template.spec.nodeClassRef.apiVersion",
                "API group",
            ),
        ];
        for (json, field, reason) in cases {
            let spec: V1beta1NodePoolSpec =
                serde_json::from_value(json.clone()).expect("v1beta1 spec");
            let e = v1beta1_nodepool_to_v1("p", &spec).expect_err(&json.to_string());
            assert_eq!(e.item, "nodepool/p");
            assert_eq!(e.field, field, "{json}");
            assert!(e.reason.contains(reason), "{json}: {}", e.reason);
        }
    }

    #[test]
    fn v1beta1_nodeclass() {
        let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "amiFamily": "AL2023", "role": "r",
            "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"id": "sg-1"}]
        }))
        .expect("spec");
        let class =
            NodeClass::from_spec("c", &v1beta1_nodeclass_to_v1("c", &spec).expect("converts"))
                .expect("valid");
        assert_eq!(
            class.ami_selector_terms,
            vec![AmiSelector::Alias {
                family: AmiFamily::AL2023,
                version: "latest".into()
            }]
        );
        let custom = EC2NodeClassSpec {
            ami_family: Some("Custom".into()),
            ..spec.clone()
        };
        let e = v1beta1_nodeclass_to_v1("c", &custom).expect_err("custom needs terms");
        assert_eq!(e.field, "spec.amiSelectorTerms");
        let e = v1beta1_nodeclass_to_v1(
            "c",
            &EC2NodeClassSpec {
                ami_family: None,
                ..spec
            },
        )
        .expect_err("family required");
        assert_eq!(
            (e.item.as_str(), e.field.as_str()),
            ("nodeclass/c", "spec.amiFamily")
        );
    }
}
