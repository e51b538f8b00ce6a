//! NodeClasses: the Karpenter v1 `EC2NodeClass` spec as users write it, and
//! the validated form the launch decisions use.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize};

use super::ConfigError;
use super::disruption::parse_duration;
use crate::cloud::{KubeletConfig, Reserved, Threshold};
use crate::resources;

/// Tag keys Karpenter sets itself; a NodeClass may not set them.
pub const RESERVED_TAG_KEYS: [&str; 4] = [
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
    "eks:eks-cluster-name",
];
/// Tag keys with this prefix are reserved too.
pub const RESERVED_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// A selector tag value that matches any value of the key.
pub const ANY_TAG_VALUE: &str = "*";

/// `spec` of a Karpenter v1 EC2NodeClass, as written in YAML or JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EC2NodeClassSpec {
    /// `AL2`, `AL2023`, `Bottlerocket`, `Windows2019`, `Windows2022`, `Custom`;
    /// optional when an `alias` term names the family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ami_selector_terms: Vec<AmiSelectorTermSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_selector_terms: Vec<SubnetSelectorTermSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTermSpec>,
    /// IAM role for the nodes; exactly one of `role` and `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Tags for the instances, volumes and launch templates.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletSpec>,
    /// Kept as written; handed to the launch adapter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<serde_json::Value>,
    /// `RAID0` to stripe the instance stores into one volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<String>,
    /// Kept as written; handed to the launch adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<serde_json::Value>,
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// The EC2 Fleet context (reserved capacity, e.g. Outposts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// nodewright's extension, not Karpenter v1: with neither `role` nor
    /// `instanceProfile`, use the instance profile of nodewright's settings.
    /// The v1alpha5 conversions set it when the old form relied on Karpenter's
    /// `aws.defaultInstanceProfile` setting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_instance_profile: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmiSelectorTermSpec {
    /// `<family>@<version>`: `al2023@latest`, `al2@v20240807`, `bottlerocket@v1.20.3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetSelectorTermSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Tag key → value; the value `*` matches any value.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroupSelectorTermSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tag key → value; the value `*` matches any value.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub tags: BTreeMap<String, String>,
}

/// The kubelet settings of an EC2NodeClass (Karpenter v1; v1beta1 had them
/// on the NodePool). Kept as written after validation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeletSpec {
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub system_reserved: BTreeMap<String, String>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub eviction_hard: BTreeMap<String, String>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i64>,
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i64>,
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i64>,
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];
const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

impl KubeletSpec {
    /// The settings the allocatable math uses.
    /// Values that do not parse are left out: [`KubeletSpec::validate`]
    /// rejects them first.
    pub fn to_kubelet_config(&self) -> KubeletConfig {
        let reserved = |map: &BTreeMap<String, String>| Reserved {
            cpu_millis: map.get("cpu").and_then(|v| resources::parse_milli(v).ok()),
            memory_bytes: map
                .get("memory")
                .and_then(|v| resources::parse_whole(v).ok()),
        };
        const SIGNAL: &str = "memory.available";
        let threshold =
            |map: &BTreeMap<String, String>| map.get(SIGNAL).and_then(|v| parse_threshold(v));
        KubeletConfig {
            max_pods: self.max_pods.and_then(|v| u32::try_from(v).ok()),
            pods_per_core: self.pods_per_core.and_then(|v| u32::try_from(v).ok()),
            kube_reserved: reserved(&self.kube_reserved),
            system_reserved: reserved(&self.system_reserved),
            eviction_hard_memory: threshold(&self.eviction_hard),
            eviction_soft_memory: threshold(&self.eviction_soft),
        }
    }

    /// Whether only `maxPods` and `podsPerCore` are set.
    pub fn is_allocatable_only(&self) -> bool {
        KubeletSpec {
            max_pods: None,
            pods_per_core: None,
            ..self.clone()
        } == KubeletSpec::default()
    }

    /// These settings with `base`'s filling every field left unset here.
    pub fn merged_over(&self, base: &KubeletSpec) -> KubeletSpec {
        fn map(
            a: &BTreeMap<String, String>,
            b: &BTreeMap<String, String>,
        ) -> BTreeMap<String, String> {
            if a.is_empty() { b.clone() } else { a.clone() }
        }
        KubeletSpec {
            cluster_dns: if self.cluster_dns.is_empty() {
                base.cluster_dns.clone()
            } else {
                self.cluster_dns.clone()
            },
            max_pods: self.max_pods.or(base.max_pods),
            pods_per_core: self.pods_per_core.or(base.pods_per_core),
            system_reserved: map(&self.system_reserved, &base.system_reserved),
            kube_reserved: map(&self.kube_reserved, &base.kube_reserved),
            eviction_hard: map(&self.eviction_hard, &base.eviction_hard),
            eviction_soft: map(&self.eviction_soft, &base.eviction_soft),
            eviction_soft_grace_period: map(
                &self.eviction_soft_grace_period,
                &base.eviction_soft_grace_period,
            ),
            eviction_max_pod_grace_period: self
                .eviction_max_pod_grace_period
                .or(base.eviction_max_pod_grace_period),
            image_gc_high_threshold_percent: self
                .image_gc_high_threshold_percent
                .or(base.image_gc_high_threshold_percent),
            image_gc_low_threshold_percent: self
                .image_gc_low_threshold_percent
                .or(base.image_gc_low_threshold_percent),
            cpu_cfs_quota: self.cpu_cfs_quota.or(base.cpu_cfs_quota),
        }
    }

    /// Checks every field; errors are `(field, reason)` under `prefix`
    /// (e.g. `spec.kubelet`).
    pub fn validate(&self, prefix: &str) -> Result<(), (String, String)> {
        for (i, ip) in self.cluster_dns.iter().enumerate() {
            if ip.parse::<IpAddr>().is_err() {
                return Err((
                    format!("{prefix}.clusterDNS[{i}]"),
                    format!("{ip:?} is not an IP address"),
                ));
            }
        }
        for (name, v) in [
            ("maxPods", self.max_pods),
            ("podsPerCore", self.pods_per_core),
            (
                "evictionMaxPodGracePeriod",
                self.eviction_max_pod_grace_period,
            ),
        ] {
            if let Some(v) = v
                && !(0..=i64::from(i32::MAX)).contains(&v)
            {
                return Err((
                    format!("{prefix}.{name}"),
                    format!("must be between 0 and {}, got {v}", i32::MAX),
                ));
            }
        }
        for (name, map) in [
            ("systemReserved", &self.system_reserved),
            ("kubeReserved", &self.kube_reserved),
        ] {
            for (k, v) in map {
                let field = format!("{prefix}.{name}[{k}]");
                if !RESERVED_RESOURCES.contains(&k.as_str()) {
                    return Err((
                        field,
                        format!("unknown resource {k:?} (cpu, memory, ephemeral-storage, pid)"),
                    ));
                }
                let parsed = if k == "cpu" {
                    resources::parse_milli(v)
                } else {
                    resources::parse_whole(v)
                };
                match parsed {
                    Ok(q) if q >= 0 => {}
                    Ok(_) => return Err((field, "must not be negative".into())),
                    Err(e) => return Err((field, e.to_string())),
                }
            }
        }
        for (name, map) in [
            ("evictionHard", &self.eviction_hard),
            ("evictionSoft", &self.eviction_soft),
        ] {
            for (k, v) in map {
                let field = format!("{prefix}.{name}[{k}]");
                check_signal(k).map_err(|r| (field.clone(), r))?;
                check_threshold(v).map_err(|r| (field, r))?;
            }
        }
        for (k, v) in &self.eviction_soft_grace_period {
            let field = format!("{prefix}.evictionSoftGracePeriod[{k}]");
            check_signal(k).map_err(|r| (field.clone(), r))?;
            parse_duration(v).map_err(|r| (field.clone(), r))?;
            if !self.eviction_soft.contains_key(k) {
                return Err((field, format!("has no matching evictionSoft[{k}]")));
            }
        }
        for k in self.eviction_soft.keys() {
            if !self.eviction_soft_grace_period.contains_key(k) {
                return Err((
                    format!("{prefix}.evictionSoft[{k}]"),
                    format!("has no matching evictionSoftGracePeriod[{k}]"),
                ));
            }
        }
        for (name, v) in [
            (
                "imageGCHighThresholdPercent",
                self.image_gc_high_threshold_percent,
            ),
            (
                "imageGCLowThresholdPercent",
                self.image_gc_low_threshold_percent,
            ),
        ] {
            if let Some(v) = v
                && !(0..=100).contains(&v)
            {
                return Err((
                    format!("{prefix}.{name}"),
                    format!("must be between 0 and 100, got {v}"),
                ));
            }
        }
        if let (Some(high), Some(low)) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        ) && high <= low
        {
            return Err((
                format!("{prefix}.imageGCHighThresholdPercent"),
                format!("must be greater than imageGCLowThresholdPercent ({high} <= {low})"),
            ));
        }
        Ok(())
    }
}

fn check_signal(k: &str) -> Result<(), String> {
    if EVICTION_SIGNALS.contains(&k) {
        Ok(())
    } else {
        Err(format!(
            "unknown eviction signal {k:?} ({})",
            EVICTION_SIGNALS.join(", ")
        ))
    }
}

/// A percentage (`10%`, `7.5%`) or a quantity (`100Mi`).
/// `10%` or `500Mi` as a [`Threshold`].
fn parse_threshold(v: &str) -> Option<Threshold> {
    match v.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| p.is_finite())
            .map(|p| Threshold::Basis((p * 100.0).round() as i64)),
        None => resources::parse_whole(v).ok().map(Threshold::Bytes),
    }
}

fn check_threshold(v: &str) -> Result<(), String> {
    if let Some(p) = v.strip_suffix('%') {
        return match p.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(()),
            _ => Err(format!("{v:?}: a percentage is between 0% and 100%")),
        };
    }
    match resources::parse_whole(v) {
        Ok(q) if q >= 0 => Ok(()),
        Ok(_) => Err(format!("{v:?} must not be negative")),
        Err(e) => Err(e.to_string()),
    }
}

/// The AMI family: which bootstrap (user data) format nodes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    /// User data is passed through unchanged; the AMI must be selected.
    Custom,
}

impl AmiFamily {
    pub const ALL: [AmiFamily; 6] = [
        AmiFamily::AL2,
        AmiFamily::AL2023,
        AmiFamily::Bottlerocket,
        AmiFamily::Windows2019,
        AmiFamily::Windows2022,
        AmiFamily::Custom,
    ];

    /// The `amiFamily` spelling (`AL2023`).
    pub fn parse(s: &str) -> Option<AmiFamily> {
        AmiFamily::ALL.into_iter().find(|f| f.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AmiFamily::AL2 => "AL2",
            AmiFamily::AL2023 => "AL2023",
            AmiFamily::Bottlerocket => "Bottlerocket",
            AmiFamily::Windows2019 => "Windows2019",
            AmiFamily::Windows2022 => "Windows2022",
            AmiFamily::Custom => "Custom",
        }
    }

    /// The alias spelling (`al2023`); Custom has none.
    pub fn alias_name(self) -> Option<&'static str> {
        match self {
            AmiFamily::AL2 => Some("al2"),
            AmiFamily::AL2023 => Some("al2023"),
            AmiFamily::Bottlerocket => Some("bottlerocket"),
            AmiFamily::Windows2019 => Some("windows2019"),
            AmiFamily::Windows2022 => Some("windows2022"),
            AmiFamily::Custom => None,
        }
    }

    fn from_alias_name(s: &str) -> Option<AmiFamily> {
        AmiFamily::ALL
            .into_iter()
            .find(|f| f.alias_name() == Some(s))
    }
}

impl fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated AMI selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AmiSelector {
    /// The EKS-optimized AMI of a family at a version (`latest` or pinned).
    Alias {
        family: AmiFamily,
        version: String,
    },
    Id(String),
    /// An SSM parameter holding the AMI id.
    SsmParameter(String),
    /// AMIs matching every given part (`*` tag values match any value).
    Query {
        name: Option<String>,
        owner: Option<String>,
        tags: BTreeMap<String, String>,
    },
}

/// A validated subnet or security group selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorTerm {
    Id(String),
    /// Security groups only: the group name.
    Name(String),
    /// Every tag must be present with the value (`*`: any value).
    Tags(BTreeMap<String, String>),
}

impl SelectorTerm {
    /// Whether a resource with this id, name and tags matches the term.
    pub fn matches(&self, id: &str, name: Option<&str>, tags: &BTreeMap<String, String>) -> bool {
        match self {
            SelectorTerm::Id(want) => want == id,
            SelectorTerm::Name(want) => name == Some(want.as_str()),
            SelectorTerm::Tags(want) => want.iter().all(|(k, v)| {
                tags.get(k)
                    .is_some_and(|have| v == ANY_TAG_VALUE || have == v)
            }),
        }
    }
}

/// `{id=…}`, `{name=…}` or `{tags[key]=value, …}`, for messages.
impl fmt::Display for SelectorTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectorTerm::Id(id) => write!(f, "{{id={id}}}"),
            SelectorTerm::Name(name) => write!(f, "{{name={name}}}"),
            SelectorTerm::Tags(tags) => {
                let parts: Vec<String> =
                    tags.iter().map(|(k, v)| format!("tags[{k}]={v}")).collect();
                write!(f, "{{{}}}", parts.join(", "))
            }
        }
    }
}

/// How nodes get their IAM identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeIdentity {
    /// A role; an instance profile is created for it.
    Role(String),
    /// An existing instance profile.
    InstanceProfile(String),
    /// The instance profile of nodewright's settings (a converted v1alpha5
    /// NodeClass that relied on `aws.defaultInstanceProfile`).
    DefaultInstanceProfile,
}

/// A validated EC2NodeClass.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClass {
    pub name: String,
    /// The bootstrap format: `amiFamily` if set, else the alias's family.
    pub ami_family: AmiFamily,
    pub ami_selector_terms: Vec<AmiSelector>,
    pub subnet_selector_terms: Vec<SelectorTerm>,
    pub security_group_selector_terms: Vec<SelectorTerm>,
    pub identity: NodeIdentity,
    pub tags: BTreeMap<String, String>,
    pub user_data: Option<String>,
    /// The kubelet settings as written (defaults when absent).
    pub kubelet: KubeletSpec,
    pub block_device_mappings: Vec<serde_json::Value>,
    pub instance_store_policy: Option<String>,
    pub metadata_options: Option<serde_json::Value>,
    pub associate_public_ip_address: Option<bool>,
    pub detailed_monitoring: bool,
    pub context: Option<String>,
}

const MAX_TERMS: usize = 30;

impl NodeClass {
    /// Validates a spec; the first error (see [`NodeClass::from_spec_all`]).
    pub fn from_spec(name: &str, spec: &EC2NodeClassSpec) -> Result<NodeClass, ConfigError> {
        Self::from_spec_all(name, spec).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Validates a spec; every error, each naming its field and reason,
    /// never an empty list.
    pub fn from_spec_all(
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<NodeClass, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut bad = |(field, reason): (String, String)| {
            errors.push(ConfigError {
                item: format!("nodeclass/{name}"),
                field,
                reason,
            })
        };
        if name.is_empty() {
            bad(("metadata.name".into(), "must not be empty".into()));
        }
        let family = match spec.ami_family.as_deref() {
            None => None,
            Some(s) => AmiFamily::parse(s).or_else(|| {
                let hint = if s == "Ubuntu" { "; v1 dropped Ubuntu: use Custom with amiSelectorTerms" } else { "" };
                bad(("spec.amiFamily".into(), format!("unknown AMI family {s:?} (AL2, AL2023, Bottlerocket, Windows2019, Windows2022, Custom){hint}")));
                None
            }),
        };
        let ami_selector_terms = ami_terms(&spec.ami_selector_terms).unwrap_or_else(|e| {
            bad(e);
            Vec::new()
        });
        let alias_family = ami_selector_terms.iter().find_map(|t| match t {
            AmiSelector::Alias { family, .. } => Some(*family),
            _ => None,
        });
        let ami_family = match (family, alias_family) {
            (None, None) => {
                // Said once: an unknown family or unreadable terms were reported above.
                if spec.ami_family.is_none() && !ami_selector_terms.is_empty() {
                    bad((
                        "spec.amiFamily".into(),
                        "required when amiSelectorTerms has no alias".into(),
                    ));
                }
                AmiFamily::Custom
            }
            (Some(f), Some(a)) if f != a && f != AmiFamily::Custom => {
                bad((
                    "spec.amiFamily".into(),
                    format!(
                        "{f} conflicts with the alias's family {a} (leave amiFamily unset, or use {a} or Custom)"
                    ),
                ));
                f
            }
            (Some(f), _) => f,
            (None, Some(a)) => a,
        };
        let subnet_selector_terms = selector_terms(
            "spec.subnetSelectorTerms",
            spec.subnet_selector_terms
                .iter()
                .map(|t| (t.id.as_deref(), None, &t.tags)),
        )
        .unwrap_or_else(|e| {
            bad(e);
            Vec::new()
        });
        let security_group_selector_terms = selector_terms(
            "spec.securityGroupSelectorTerms",
            spec.security_group_selector_terms
                .iter()
                .map(|t| (t.id.as_deref(), t.name.as_deref(), &t.tags)),
        )
        .unwrap_or_else(|e| {
            bad(e);
            Vec::new()
        });
        let identity = match (&spec.role, &spec.instance_profile) {
            (Some(role), None) => NodeIdentity::Role(role.clone()),
            (None, Some(profile)) => NodeIdentity::InstanceProfile(profile.clone()),
            (Some(role), Some(_)) => {
                bad((
                    "spec.instanceProfile".into(),
                    "exactly one of role and instanceProfile may be set, not both".into(),
                ));
                NodeIdentity::Role(role.clone())
            }
            (None, None) if spec.default_instance_profile => NodeIdentity::DefaultInstanceProfile,
            (None, None) => {
                bad((
                    "spec.role".into(),
                    "exactly one of role and instanceProfile is required".into(),
                ));
                NodeIdentity::DefaultInstanceProfile
            }
        };
        if spec.default_instance_profile && identity != NodeIdentity::DefaultInstanceProfile {
            bad((
                "spec.defaultInstanceProfile".into(),
                "cannot be combined with role or instanceProfile".into(),
            ));
        }
        match &identity {
            NodeIdentity::Role(r) if r.is_empty() => {
                bad(("spec.role".into(), "must not be empty".into()))
            }
            NodeIdentity::InstanceProfile(p) if p.is_empty() => {
                bad(("spec.instanceProfile".into(), "must not be empty".into()))
            }
            _ => {}
        }
        for k in spec.tags.keys() {
            let field = format!("spec.tags[{k}]");
            if k.is_empty() {
                bad((field, "tag keys must not be empty".into()));
            } else if RESERVED_TAG_KEYS.contains(&k.as_str()) || k.starts_with(RESERVED_TAG_PREFIX)
            {
                bad((
                    field,
                    format!(
                        "tag {k:?} is reserved: Karpenter sets it on the instances it launches"
                    ),
                ));
            }
        }
        let kubelet = spec.kubelet.clone().unwrap_or_default();
        if let Err(e) = kubelet.validate("spec.kubelet") {
            bad(e);
        }
        if let Some(p) = &spec.instance_store_policy
            && p != "RAID0"
        {
            bad((
                "spec.instanceStorePolicy".into(),
                format!("unknown policy {p:?} (RAID0)"),
            ));
        }
        if let Some(m) = &spec.metadata_options {
            for e in metadata_options_errors(m) {
                bad(e);
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(NodeClass {
            name: name.to_owned(),
            ami_family,
            ami_selector_terms,
            subnet_selector_terms,
            security_group_selector_terms,
            identity,
            tags: spec.tags.clone(),
            user_data: spec.user_data.clone(),
            kubelet,
            block_device_mappings: spec.block_device_mappings.clone(),
            instance_store_policy: spec.instance_store_policy.clone(),
            metadata_options: spec.metadata_options.clone(),
            associate_public_ip_address: spec.associate_public_ip_address,
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            context: spec.context.clone(),
        })
    }
}

/// `metadataOptions` as EC2 takes them (Karpenter's schema): each field
/// one of its values, the hop limit 1–64, nothing else.
fn metadata_options_errors(m: &serde_json::Value) -> Vec<(String, String)> {
    const FIELD: &str = "spec.metadataOptions";
    let Some(fields) = m.as_object() else {
        return vec![(FIELD.into(), format!("expected an object, got {m}"))];
    };
    let mut out = Vec::new();
    for (k, v) in fields {
        let field = format!("{FIELD}.{k}");
        let one_of = |allowed: &[&str]| match v.as_str() {
            Some(s) if allowed.contains(&s) => None,
            _ => Some((
                field.clone(),
                format!("{v} is not one of {}", allowed.join(", ")),
            )),
        };
        let problem = match k.as_str() {
            "httpEndpoint" | "httpProtocolIPv6" => one_of(&["enabled", "disabled"]),
            "httpTokens" => one_of(&["required", "optional"]),
            "httpPutResponseHopLimit" => match v.as_i64() {
                Some(1..=64) => None,
                _ => Some((field.clone(), format!("{v} is not an integer from 1 to 64"))),
            },
            _ => Some((field.clone(), "unknown field (httpEndpoint, httpProtocolIPv6, httpPutResponseHopLimit, httpTokens)".into())),
        };
        out.extend(problem);
    }
    out
}

fn check_term_tags(tags: &BTreeMap<String, String>, field: &str) -> Result<(), (String, String)> {
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            return Err((
                format!("{field}.tags[{k}]"),
                "empty tag keys and values are not supported (use \"*\" for any value)".into(),
            ));
        }
    }
    Ok(())
}

fn ami_terms(terms: &[AmiSelectorTermSpec]) -> Result<Vec<AmiSelector>, (String, String)> {
    const FIELD: &str = "spec.amiSelectorTerms";
    if terms.is_empty() {
        return Err((
            FIELD.into(),
            "at least one term is required (e.g. alias: al2023@latest)".into(),
        ));
    }
    if terms.len() > MAX_TERMS {
        return Err((
            FIELD.into(),
            format!("at most {MAX_TERMS} terms, got {}", terms.len()),
        ));
    }
    let mut out = Vec::with_capacity(terms.len());
    for (i, t) in terms.iter().enumerate() {
        let field = format!("{FIELD}[{i}]");
        let others = |except: &str| {
            [
                ("alias", t.alias.is_some()),
                ("id", t.id.is_some()),
                ("name", t.name.is_some()),
                ("owner", t.owner.is_some()),
                ("ssmParameter", t.ssm_parameter.is_some()),
                ("tags", !t.tags.is_empty()),
            ]
            .into_iter()
            .filter(|(n, set)| *set && *n != except)
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
        };
        let exclusive = |name: &str| -> Result<(), (String, String)> {
            let o = others(name);
            if o.is_empty() {
                Ok(())
            } else {
                Err((
                    format!("{field}.{name}"),
                    format!(
                        "{name} cannot be combined with {} in the same term",
                        o.join(", ")
                    ),
                ))
            }
        };
        if let Some(alias) = &t.alias {
            exclusive("alias")?;
            if terms.len() > 1 {
                return Err((
                    format!("{field}.alias"),
                    "an alias must be the only AMI selector term".into(),
                ));
            }
            out.push(parse_alias(alias).map_err(|r| (format!("{field}.alias"), r))?);
        } else if let Some(id) = &t.id {
            exclusive("id")?;
            if !id.starts_with("ami-") {
                return Err((
                    format!("{field}.id"),
                    format!("{id:?} is not an AMI id (ami-…)"),
                ));
            }
            out.push(AmiSelector::Id(id.clone()));
        } else if let Some(p) = &t.ssm_parameter {
            exclusive("ssmParameter")?;
            out.push(AmiSelector::SsmParameter(p.clone()));
        } else if t.name.is_some() || !t.tags.is_empty() {
            check_term_tags(&t.tags, &field)?;
            out.push(AmiSelector::Query {
                name: t.name.clone(),
                owner: t.owner.clone(),
                tags: t.tags.clone(),
            });
        } else {
            return Err((
                field,
                "expected one of alias, id, name, ssmParameter or tags".into(),
            ));
        }
    }
    Ok(out)
}

fn parse_alias(alias: &str) -> Result<AmiSelector, String> {
    let Some((family, version)) = alias.split_once('@') else {
        return Err(format!(
            "{alias:?} is not <family>@<version> (e.g. al2023@latest)"
        ));
    };
    let family = AmiFamily::from_alias_name(family).ok_or_else(|| {
        format!("{alias:?}: unknown family {family:?} (al2, al2023, bottlerocket, windows2019, windows2022)")
    })?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let version_ok = version == "latest"
        || match family {
            AmiFamily::AL2 | AmiFamily::AL2023 => version
                .strip_prefix('v')
                .is_some_and(|d| d.len() == 8 && digits(d)),
            AmiFamily::Bottlerocket => version
                .strip_prefix('v')
                .is_some_and(|d| d.split('.').all(digits)),
            _ => false,
        };
    if !version_ok {
        let expected = match family {
            AmiFamily::AL2 | AmiFamily::AL2023 => "latest or vYYYYMMDD",
            AmiFamily::Bottlerocket => "latest or v<major>.<minor>.<patch>",
            _ => "latest (the only version for Windows)",
        };
        return Err(format!("{alias:?}: version {version:?} is not {expected}"));
    }
    Ok(AmiSelector::Alias {
        family,
        version: version.to_owned(),
    })
}

/// Subnet or security group terms as (id, name, tags).
fn selector_terms<'a>(
    field: &str,
    terms: impl ExactSizeIterator<
        Item = (
            Option<&'a str>,
            Option<&'a str>,
            &'a BTreeMap<String, String>,
        ),
    >,
) -> Result<Vec<SelectorTerm>, (String, String)> {
    if terms.len() == 0 {
        return Err((field.into(), "at least one term is required".into()));
    }
    if terms.len() > MAX_TERMS {
        return Err((
            field.into(),
            format!("at most {MAX_TERMS} terms, got {}", terms.len()),
        ));
    }
    let sg = field.contains("securityGroup");
    terms
        .enumerate()
        .map(|(i, (id, name, tags))| {
            let f = format!("{field}[{i}]");
            match (id, name, tags.is_empty()) {
                (Some(id), None, true) if !id.is_empty() => Ok(SelectorTerm::Id(id.to_owned())),
                (None, Some(name), true) if !name.is_empty() => {
                    Ok(SelectorTerm::Name(name.to_owned()))
                }
                (None, None, false) => {
                    check_term_tags(tags, &f)?;
                    Ok(SelectorTerm::Tags(tags.clone()))
                }
                (Some(""), _, _) => Err((format!("{f}.id"), "must not be empty".into())),
                (_, Some(""), _) => Err((format!("{f}.name"), "must not be empty".into())),
                (Some(_), _, _) => Err((
                    format!("{f}.id"),
                    "id cannot be combined with other fields in the same term".into(),
                )),
                (None, Some(_), _) => Err((
                    format!("{f}.name"),
                    "name cannot be combined with other fields in the same term".into(),
                )),
                (None, None, true) => Err((
                    f,
                    if sg {
                        "expected one of id, name or tags"
                    } else {
                        "expected id or tags"
                    }
                    .into(),
                )),
            }
        })
        .collect()
}

/// A string map whose values may be written as YAML numbers or booleans
/// (`pid: 100`, `team: 42`); they are kept as their text.
pub(crate) fn string_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw: BTreeMap<String, serde_json::Value> = BTreeMap::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            serde_json::Value::Number(n) => Ok((k, n.to_string())),
            serde_json::Value::Bool(b) => Ok((k, b.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "{k}: expected a string, got {other}"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> EC2NodeClassSpec {
        serde_json::from_value(json).expect("spec parses")
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}, {"id": "subnet-0123"}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}, {"name": "eks-nodes"}]
        })
    }

    fn with(patch: serde_json::Value) -> EC2NodeClassSpec {
        let mut v = base();
        if let (Some(obj), Some(p)) = (v.as_object_mut(), patch.as_object()) {
            for (k, val) in p {
                if val.is_null() {
                    obj.remove(k);
                } else {
                    obj.insert(k.clone(), val.clone());
                }
            }
        }
        spec(v)
    }

    /// Every mistake of a class at once, `metadataOptions` included.
    #[test]
    fn every_mistake_of_a_class_is_reported() {
        let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            "tags": {"karpenter.sh/nodepool": "x"},
            "instanceStorePolicy": "RAID5",
            "metadataOptions": {"httpTokens": "maybe", "httpPutResponseHopLimit": 0, "httpEndpoint": "enabled"}
        }))
        .expect("parses");
        let errors = NodeClass::from_spec_all("c", &spec).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.subnetSelectorTerms",
                "spec.tags[karpenter.sh/nodepool]",
                "spec.instanceStorePolicy",
                "spec.metadataOptions.httpPutResponseHopLimit",
                "spec.metadataOptions.httpTokens",
            ],
            "{errors:#?}"
        );
        assert!(errors.iter().all(|e| e.item == "nodeclass/c"));
    }

    #[test]
    fn reads_a_v1_ec2nodeclass() {
        let s = with(serde_json::json!({
            "tags": {"team": "a", "cost-center": 42},
            "userData": "#!/bin/bash\necho hi",
            "kubelet": {"maxPods": 58, "clusterDNS": ["10.100.0.10"], "kubeReserved": {"cpu": "100m", "memory": "256Mi"},
                        "evictionSoft": {"memory.available": "5%"}, "evictionSoftGracePeriod": {"memory.available": "1m"},
                        "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}],
            "metadataOptions": {"httpTokens": "required"},
            "associatePublicIPAddress": false,
            "detailedMonitoring": true
        }));
        let c = NodeClass::from_spec("default", &s).expect("valid");
        assert_eq!(c.ami_family, AmiFamily::AL2023);
        assert_eq!(
            c.ami_selector_terms,
            vec![AmiSelector::Alias {
                family: AmiFamily::AL2023,
                version: "latest".into()
            }]
        );
        assert_eq!(
            c.subnet_selector_terms[1],
            SelectorTerm::Id("subnet-0123".into())
        );
        assert_eq!(
            c.security_group_selector_terms[1],
            SelectorTerm::Name("eks-nodes".into())
        );
        assert_eq!(c.identity, NodeIdentity::Role("KarpenterNodeRole".into()));
        assert_eq!(c.tags.get("cost-center").map(String::as_str), Some("42"));
        assert_eq!(
            c.kubelet.to_kubelet_config(),
            KubeletConfig {
                max_pods: Some(58),
                kube_reserved: Reserved {
                    cpu_millis: Some(100),
                    memory_bytes: Some(256 << 20)
                },
                eviction_soft_memory: Some(Threshold::Basis(500)),
                ..Default::default()
            }
        );
        assert!(c.detailed_monitoring);
        assert_eq!(c.associate_public_ip_address, Some(false));
        assert_eq!(c.block_device_mappings.len(), 1);
        // Round trip keeps the v1 spellings.
        let json = serde_json::to_value(&s).expect("serializes");
        assert!(json.get("associatePublicIPAddress").is_some());
        assert!(json["kubelet"].get("clusterDNS").is_some());
        assert!(json["kubelet"].get("imageGCHighThresholdPercent").is_some());
        assert_eq!(spec(json), s);
    }

    #[test]
    fn aliases_set_the_family() {
        for (alias, family) in [
            ("al2@v20240807", AmiFamily::AL2),
            ("bottlerocket@latest", AmiFamily::Bottlerocket),
            ("bottlerocket@v1.20.3", AmiFamily::Bottlerocket),
            ("windows2022@latest", AmiFamily::Windows2022),
        ] {
            let c = NodeClass::from_spec(
                "c",
                &with(serde_json::json!({"amiSelectorTerms": [{"alias": alias}]})),
            )
            .expect(alias);
            assert_eq!(c.ami_family, family, "{alias}");
        }
        // Custom with an alias: the alias picks the AMI, user data stays custom.
        let c = NodeClass::from_spec("c", &with(serde_json::json!({"amiFamily": "Custom"})))
            .expect("valid");
        assert_eq!(c.ami_family, AmiFamily::Custom);
        let c = NodeClass::from_spec("c", &with(serde_json::json!({"amiFamily": "AL2", "amiSelectorTerms": [{"name": "my-ami-*", "owner": "self"}, {"id": "ami-123"}]}))).expect("valid");
        assert_eq!(c.ami_family, AmiFamily::AL2);
        assert_eq!(c.ami_selector_terms[1], AmiSelector::Id("ami-123".into()));
    }

    #[test]
    fn selector_terms_match_ids_names_and_tags() {
        let tags: BTreeMap<String, String> = [(
            "kubernetes.io/cluster/demo".to_string(),
            "shared".to_string(),
        )]
        .into();
        let any = SelectorTerm::Tags(
            [("kubernetes.io/cluster/demo".to_string(), "*".to_string())].into(),
        );
        assert!(any.matches("subnet-1", None, &tags));
        assert!(!any.matches("subnet-1", None, &BTreeMap::new()));
        let exact = SelectorTerm::Tags(
            [(
                "kubernetes.io/cluster/demo".to_string(),
                "owned".to_string(),
            )]
            .into(),
        );
        assert!(!exact.matches("subnet-1", None, &tags));
        assert!(SelectorTerm::Id("sg-1".into()).matches("sg-1", None, &tags));
        assert!(SelectorTerm::Name("web".into()).matches("sg-1", Some("web"), &tags));
        assert_eq!(any.to_string(), "{tags[kubernetes.io/cluster/demo]=*}");
        assert_eq!(SelectorTerm::Id("sg-1".into()).to_string(), "{id=sg-1}");
    }

    #[test]
    fn invalid_items_name_the_field_and_reason() {
        let cases = [
            (
                serde_json::json!({"amiSelectorTerms": null}),
                "spec.amiSelectorTerms",
                "at least one term",
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
                "spec.amiSelectorTerms[0].alias",
                "unknown family",
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"alias": "al2023"}]}),
                "spec.amiSelectorTerms[0].alias",
                "<family>@<version>",
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"alias": "al2023@2024"}]}),
                "spec.amiSelectorTerms[0].alias",
                "vYYYYMMDD",
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"alias": "windows2019@v1"}]}),
                "spec.amiSelectorTerms[0].alias",
                "only version",
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"alias": "al2@latest", "id": "ami-1"}]}),
                "spec.amiSelectorTerms[0].alias",
                "cannot be combined with id",
            ),
            (
                serde_json::json!({"amiFamily": "AL2", "amiSelectorTerms": [{"id": "ami-1"}, {"alias": "al2@latest"}]}),
                "spec.amiSelectorTerms[1].alias",
                "only AMI selector term",
            ),
            (
                serde_json::json!({"amiFamily": "AL2", "amiSelectorTerms": [{"owner": "self"}]}),
                "spec.amiSelectorTerms[0]",
                "expected one of",
            ),
            (
                serde_json::json!({"amiSelectorTerms": [{"id": "ami-1"}]}),
                "spec.amiFamily",
                "required when amiSelectorTerms has no alias",
            ),
            (
                serde_json::json!({"amiFamily": "AL2"}),
                "spec.amiFamily",
                "conflicts with the alias's family AL2023",
            ),
            (
                serde_json::json!({"amiFamily": "Ubuntu"}),
                "spec.amiFamily",
                "dropped Ubuntu",
            ),
            (
                serde_json::json!({"subnetSelectorTerms": []}),
                "spec.subnetSelectorTerms",
                "at least one term",
            ),
            (
                serde_json::json!({"subnetSelectorTerms": [{"id": "subnet-1"}, {}]}),
                "spec.subnetSelectorTerms[1]",
                "expected id or tags",
            ),
            (
                serde_json::json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}),
                "spec.subnetSelectorTerms[0].id",
                "cannot be combined",
            ),
            (
                serde_json::json!({"securityGroupSelectorTerms": null}),
                "spec.securityGroupSelectorTerms",
                "at least one term",
            ),
            (
                serde_json::json!({"securityGroupSelectorTerms": [{}]}),
                "spec.securityGroupSelectorTerms[0]",
                "expected one of id, name or tags",
            ),
            (
                serde_json::json!({"securityGroupSelectorTerms": [{"tags": {"a": ""}}]}),
                "spec.securityGroupSelectorTerms[0].tags[a]",
                "empty tag",
            ),
            (
                serde_json::json!({"role": null}),
                "spec.role",
                "exactly one of role and instanceProfile is required",
            ),
            (
                serde_json::json!({"instanceProfile": "p"}),
                "spec.instanceProfile",
                "not both",
            ),
            (
                serde_json::json!({"tags": {"kubernetes.io/cluster/demo": "owned"}}),
                "spec.tags[kubernetes.io/cluster/demo]",
                "reserved",
            ),
            (
                serde_json::json!({"tags": {"karpenter.sh/nodepool": "x"}}),
                "spec.tags[karpenter.sh/nodepool]",
                "reserved",
            ),
            (
                serde_json::json!({"tags": {"karpenter.sh/nodeclaim": "x"}}),
                "spec.tags[karpenter.sh/nodeclaim]",
                "reserved",
            ),
            (
                serde_json::json!({"tags": {"karpenter.k8s.aws/ec2nodeclass": "x"}}),
                "spec.tags[karpenter.k8s.aws/ec2nodeclass]",
                "reserved",
            ),
            (
                serde_json::json!({"kubelet": {"maxPods": -1}}),
                "spec.kubelet.maxPods",
                "between 0",
            ),
            (
                serde_json::json!({"kubelet": {"clusterDNS": ["dns"]}}),
                "spec.kubelet.clusterDNS[0]",
                "not an IP",
            ),
            (
                serde_json::json!({"kubelet": {"kubeReserved": {"gpu": "1"}}}),
                "spec.kubelet.kubeReserved[gpu]",
                "unknown resource",
            ),
            (
                serde_json::json!({"kubelet": {"evictionHard": {"memory.free": "1Gi"}}}),
                "spec.kubelet.evictionHard[memory.free]",
                "unknown eviction signal",
            ),
            (
                serde_json::json!({"kubelet": {"evictionHard": {"memory.available": "120%"}}}),
                "spec.kubelet.evictionHard[memory.available]",
                "between 0% and 100%",
            ),
            (
                serde_json::json!({"kubelet": {"evictionSoft": {"memory.available": "1Gi"}}}),
                "spec.kubelet.evictionSoft[memory.available]",
                "no matching evictionSoftGracePeriod",
            ),
            (
                serde_json::json!({"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}}),
                "spec.kubelet.imageGCHighThresholdPercent",
                "greater than",
            ),
            (
                serde_json::json!({"instanceStorePolicy": "RAID5"}),
                "spec.instanceStorePolicy",
                "unknown policy",
            ),
        ];
        for (patch, field, reason) in cases {
            let e = NodeClass::from_spec("c", &with(patch.clone())).expect_err(&patch.to_string());
            assert_eq!(e.item, "nodeclass/c");
            assert_eq!(e.field, field, "{patch}");
            assert!(e.reason.contains(reason), "{patch}: {}", e.reason);
        }
    }

    #[test]
    fn kubelet_merge_prefers_the_override() {
        let class = KubeletSpec {
            max_pods: Some(110),
            cluster_dns: vec!["10.0.0.10".into()],
            ..KubeletSpec::default()
        };
        let pool = KubeletSpec {
            max_pods: Some(20),
            ..KubeletSpec::default()
        };
        let merged = pool.merged_over(&class);
        assert_eq!(merged.max_pods, Some(20));
        assert_eq!(merged.cluster_dns, vec!["10.0.0.10".to_string()]);
        assert!(pool.is_allocatable_only());
        assert!(!merged.is_allocatable_only());
    }

    #[test]
    fn default_instance_profile_extension() {
        let s = with(serde_json::json!({"role": null, "defaultInstanceProfile": true}));
        let c = NodeClass::from_spec("c", &s).expect("valid");
        assert_eq!(c.identity, NodeIdentity::DefaultInstanceProfile);
        let json = serde_json::to_value(&s).expect("serializes");
        assert_eq!(
            json["defaultInstanceProfile"], true,
            "survives a round trip through a store"
        );
        let e = NodeClass::from_spec(
            "c",
            &with(serde_json::json!({"defaultInstanceProfile": true})),
        )
        .expect_err("with role");
        assert_eq!(e.field, "spec.defaultInstanceProfile");
        assert!(
            serde_json::to_value(with(serde_json::json!({})))
                .expect("serializes")
                .get("defaultInstanceProfile")
                .is_none()
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let mut v = base();
        v["subnetSelector"] = serde_json::json!({"a": "b"});
        assert!(serde_json::from_value::<EC2NodeClassSpec>(v).is_err());
    }
}
