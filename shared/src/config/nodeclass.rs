//! NodeClasses: the Karpenter v1 `EC2NodeClass` spec as users write it, and
//! the validated form the launch decisions use.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize};

use super::ConfigError;
use super::schema::{Kind, opt, req};
use super::syntax;
use crate::cloud::expression::Expression;
use crate::cloud::{EphemeralStorage, KubeletConfig, KubeletExpressions, Reserved, Threshold};
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
    /// `AL2`, `AL2023`, `Bottlerocket`, `Windows2019`, `Windows2022`,
    /// `Windows2025`, `Custom`; optional when an `alias` term names the family.
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
    /// On-demand capacity reservations (and capacity blocks) nodes may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTermSpec>,
    /// The network interfaces of each instance (EFA and multi-card types).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterfaceSpec>,
    /// The placement group instances launch into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelectorSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptionsSpec>,
    /// IPv4 prefixes (/28) assigned to the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTrackingSpec>,
    /// nodewright's extension, not Karpenter v1: with neither `role` nor
    /// `instanceProfile`, use the instance profile of nodewright's settings.
    /// The v1alpha5 conversions set it when the old form relied on Karpenter's
    /// `aws.defaultInstanceProfile` setting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_instance_profile: bool,
    /// nodewright's extension, not Karpenter v1: with no
    /// `subnetSelectorTerms` / `securityGroupSelectorTerms`, the subnets and
    /// security groups tagged `kubernetes.io/cluster/<cluster name>` (any
    /// value), as Karpenter v0.5 defaulted a Provisioner's selectors. The
    /// v1alpha5 conversion sets it for a provider that names neither.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_discovery: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationSelectorTermSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The account that owns the reservation (12 digits), with `tags`.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "string_map"
    )]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkInterfaceSpec {
    #[serde(default)]
    pub network_card_index: i64,
    #[serde(default)]
    pub device_index: i64,
    /// `interface` or `efa-only`.
    #[serde(default)]
    pub interface_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlacementGroupSelectorSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuOptionsSpec {
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectionTrackingSpec {
    /// Seconds, 60–432000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_established_timeout: Option<i64>,
    /// Seconds, 60–180.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_stream_timeout: Option<i64>,
    /// Seconds, 30–60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_timeout: Option<i64>,
}

const SELECTOR_TAGS: Kind = Kind::Map(&Kind::Text);
/// The shape of a v1 EC2NodeClass's `spec`, as Karpenter's CRD declares it.
pub const NODECLASS_SPEC: Kind = Kind::Object(&[
    opt("amiFamily", Kind::Str),
    opt(
        "amiSelectorTerms",
        Kind::List(&Kind::Object(&[
            opt("alias", Kind::Str),
            opt("id", Kind::Str),
            opt("name", Kind::Str),
            opt("owner", Kind::Str),
            opt("ssmParameter", Kind::Str),
            opt("tags", SELECTOR_TAGS),
        ])),
    ),
    opt("associatePublicIPAddress", Kind::Bool),
    opt(
        "blockDeviceMappings",
        Kind::List(&Kind::Object(&[
            opt("deviceName", Kind::Str),
            opt(
                "ebs",
                Kind::Object(&[
                    opt("deleteOnTermination", Kind::Bool),
                    opt("encrypted", Kind::Bool),
                    opt("iops", Kind::Int),
                    opt("kmsKeyID", Kind::Str),
                    opt("snapshotID", Kind::Str),
                    opt("throughput", Kind::Int),
                    opt("volumeInitializationRate", Kind::Int32),
                    opt("volumeSize", Kind::Str),
                    opt("volumeType", Kind::Str),
                ]),
            ),
            opt("rootVolume", Kind::Bool),
        ])),
    ),
    opt(
        "capacityReservationSelectorTerms",
        Kind::List(&Kind::Object(&[
            opt("id", Kind::Str),
            opt("instanceMatchCriteria", Kind::Str),
            opt("ownerID", Kind::Str),
            opt("tags", SELECTOR_TAGS),
        ])),
    ),
    opt(
        "connectionTracking",
        Kind::Object(&[
            opt("tcpEstablishedTimeout", Kind::Int32),
            opt("udpStreamTimeout", Kind::Int32),
            opt("udpTimeout", Kind::Int32),
        ]),
    ),
    opt("context", Kind::Str),
    opt(
        "cpuOptions",
        Kind::Object(&[opt("nestedVirtualization", Kind::Str)]),
    ),
    opt("detailedMonitoring", Kind::Bool),
    opt("instanceProfile", Kind::Str),
    opt("instanceStorePolicy", Kind::Str),
    opt("ipPrefixCount", Kind::Int32),
    opt("kubelet", KUBELET),
    opt(
        "metadataOptions",
        Kind::Object(&[
            opt("httpEndpoint", Kind::Str),
            opt("httpProtocolIPv6", Kind::Str),
            opt("httpPutResponseHopLimit", Kind::Int),
            opt("httpTokens", Kind::Str),
        ]),
    ),
    opt(
        "networkInterfaces",
        Kind::List(&Kind::Object(&[
            req("deviceIndex", Kind::Int32),
            req("interfaceType", Kind::Str),
            req("networkCardIndex", Kind::Int32),
        ])),
    ),
    opt(
        "placementGroupSelector",
        Kind::Object(&[opt("id", Kind::Str), opt("name", Kind::Str)]),
    ),
    opt("role", Kind::Str),
    opt(
        "securityGroupSelectorTerms",
        Kind::List(&Kind::Object(&[
            opt("id", Kind::Str),
            opt("name", Kind::Str),
            opt("tags", SELECTOR_TAGS),
        ])),
    ),
    opt(
        "subnetSelectorTerms",
        Kind::List(&Kind::Object(&[
            opt("id", Kind::Str),
            opt("tags", SELECTOR_TAGS),
        ])),
    ),
    opt("tags", Kind::Map(&Kind::Text)),
    opt("userData", Kind::Str),
    opt("defaultInstanceProfile", Kind::Bool),
    opt("clusterDiscovery", Kind::Bool),
]);

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
/// on the NodePool). Kept as written after validation. The fields the
/// decisions read are typed; since Karpenter v1.15 any other field of the
/// kubelet's `KubeletConfiguration` (v1beta1) may be set too and is passed
/// through to the node on AL2023 (`other`), checked against the kubelet's
/// own schema ([`KUBELET`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSpec {
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// A count, or an expression of the instance type (`nodeClassCEL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<MaxPods>,
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
    /// Every other `KubeletConfiguration` field, as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `maxPods`: a number, or a string — an expression evaluated per instance
/// type (`cloud::expression`; only with the Settings gate `nodeClassCEL`),
/// as Karpenter's int-or-string field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxPods {
    Count(i64),
    Expression(String),
}

impl MaxPods {
    /// The count when it is one.
    pub fn count(&self) -> Option<i64> {
        match self {
            MaxPods::Count(n) => Some(*n),
            MaxPods::Expression(_) => None,
        }
    }
}

impl From<i64> for MaxPods {
    fn from(n: i64) -> Self {
        MaxPods::Count(n)
    }
}

/// A `kubeReserved` / `systemReserved` value that is no quantity: read as
/// an expression (Karpenter's disambiguation).
fn reserved_expression(key: &str, v: &str) -> Option<Expression> {
    let quantity = if key == "cpu" {
        resources::parse_milli(v)
    } else {
        resources::parse_whole(v)
    };
    match quantity {
        Ok(_) => None,
        Err(_) => Expression::parse(v).ok(),
    }
}

/// The kubelet's fields the launch path sets itself: a value written here
/// would be overwritten at boot, so it is refused rather than dropped.
const KARPENTER_OWNED_KUBELET: [(&str, &str); 1] = [(
    "registerWithTaints",
    "set from the NodePool's taints so the node registers with them",
)];

const GO_DURATION: Kind = Kind::GoDuration;
const STR_MAP: Kind = Kind::Map(&Kind::Str);
const OUTPUT_ROUTING: Kind = Kind::Object(&[
    opt("splitStream", Kind::Bool),
    opt("infoBufferSize", Kind::IntOrString),
]);
/// The shape of the kubelet's `KubeletConfiguration` (kubelet.config.k8s.io
/// v1beta1, Kubernetes 1.35), the fields `spec.kubelet` may hold.
pub const KUBELET: Kind = Kind::Object(&[
    opt("kind", Kind::Str),
    opt("apiVersion", Kind::Str),
    opt("enableServer", Kind::Bool),
    opt("staticPodPath", Kind::Str),
    opt("podLogsDir", Kind::Str),
    opt("syncFrequency", GO_DURATION),
    opt("fileCheckFrequency", GO_DURATION),
    opt("httpCheckFrequency", GO_DURATION),
    opt("staticPodURL", Kind::Str),
    opt("staticPodURLHeader", Kind::Map(&Kind::List(&Kind::Str))),
    opt("address", Kind::Str),
    opt("port", Kind::Int32),
    opt("readOnlyPort", Kind::Int32),
    opt("tlsCertFile", Kind::Str),
    opt("tlsPrivateKeyFile", Kind::Str),
    opt("tlsCipherSuites", Kind::List(&Kind::Str)),
    opt("tlsCurvePreferences", Kind::List(&Kind::Int32)),
    opt("tlsMinVersion", Kind::Str),
    opt("rotateCertificates", Kind::Bool),
    opt("serverTLSBootstrap", Kind::Bool),
    opt(
        "authentication",
        Kind::Object(&[
            opt("x509", Kind::Object(&[opt("clientCAFile", Kind::Str)])),
            opt(
                "webhook",
                Kind::Object(&[opt("enabled", Kind::Bool), opt("cacheTTL", GO_DURATION)]),
            ),
            opt("anonymous", Kind::Object(&[opt("enabled", Kind::Bool)])),
        ]),
    ),
    opt(
        "authorization",
        Kind::Object(&[
            opt("mode", Kind::Str),
            opt(
                "webhook",
                Kind::Object(&[
                    opt("cacheAuthorizedTTL", GO_DURATION),
                    opt("cacheUnauthorizedTTL", GO_DURATION),
                ]),
            ),
        ]),
    ),
    opt("registryPullQPS", Kind::Int32),
    opt("registryBurst", Kind::Int32),
    opt("imagePullCredentialsVerificationPolicy", Kind::Str),
    opt(
        "preloadedImagesVerificationAllowlist",
        Kind::List(&Kind::Str),
    ),
    opt("eventRecordQPS", Kind::Int32),
    opt("eventBurst", Kind::Int32),
    opt("enableDebuggingHandlers", Kind::Bool),
    opt("enableContentionProfiling", Kind::Bool),
    opt("healthzPort", Kind::Int32),
    opt("healthzBindAddress", Kind::Str),
    opt("oomScoreAdj", Kind::Int32),
    opt("clusterDomain", Kind::Str),
    opt("clusterDNS", Kind::List(&Kind::Str)),
    opt("streamingConnectionIdleTimeout", GO_DURATION),
    opt("nodeStatusUpdateFrequency", GO_DURATION),
    opt("nodeStatusReportFrequency", GO_DURATION),
    opt("nodeLeaseDurationSeconds", Kind::Int32),
    opt("imageMinimumGCAge", GO_DURATION),
    opt("imageMaximumGCAge", GO_DURATION),
    opt("imageGCHighThresholdPercent", Kind::Int32),
    opt("imageGCLowThresholdPercent", Kind::Int32),
    opt("volumeStatsAggPeriod", GO_DURATION),
    opt("kubeletCgroups", Kind::Str),
    opt("systemCgroups", Kind::Str),
    opt("cgroupRoot", Kind::Str),
    opt("cgroupsPerQOS", Kind::Bool),
    opt("cgroupDriver", Kind::Str),
    opt("cpuManagerPolicy", Kind::Str),
    opt("singleProcessOOMKill", Kind::Bool),
    opt("cpuManagerPolicyOptions", STR_MAP),
    opt("cpuManagerReconcilePeriod", GO_DURATION),
    opt("memoryManagerPolicy", Kind::Str),
    opt("topologyManagerPolicy", Kind::Str),
    opt("topologyManagerScope", Kind::Str),
    opt("topologyManagerPolicyOptions", STR_MAP),
    opt("qosReserved", STR_MAP),
    opt("runtimeRequestTimeout", GO_DURATION),
    opt("hairpinMode", Kind::Str),
    opt("maxPods", Kind::IntOrString),
    opt("podCIDR", Kind::Str),
    opt("podPidsLimit", Kind::Int),
    opt("resolvConf", Kind::Str),
    opt("runOnce", Kind::Bool),
    opt("cpuCFSQuota", Kind::Bool),
    opt("cpuCFSQuotaPeriod", GO_DURATION),
    opt("nodeStatusMaxImages", Kind::Int32),
    opt("maxOpenFiles", Kind::Int),
    opt("contentType", Kind::Str),
    opt("kubeAPIQPS", Kind::Int32),
    opt("kubeAPIBurst", Kind::Int32),
    opt("serializeImagePulls", Kind::Bool),
    opt("maxParallelImagePulls", Kind::Int32),
    opt("evictionHard", STR_MAP),
    opt("evictionSoft", STR_MAP),
    opt("evictionSoftGracePeriod", STR_MAP),
    opt("evictionPressureTransitionPeriod", GO_DURATION),
    opt("evictionMaxPodGracePeriod", Kind::Int32),
    opt("evictionMinimumReclaim", STR_MAP),
    opt("mergeDefaultEvictionSettings", Kind::Bool),
    opt("podsPerCore", Kind::Int32),
    opt("enableControllerAttachDetach", Kind::Bool),
    opt("protectKernelDefaults", Kind::Bool),
    opt("makeIPTablesUtilChains", Kind::Bool),
    opt("iptablesMasqueradeBit", Kind::Int32),
    opt("iptablesDropBit", Kind::Int32),
    opt("featureGates", Kind::Map(&Kind::Bool)),
    opt("failSwapOn", Kind::Bool),
    opt(
        "memorySwap",
        Kind::Object(&[opt("swapBehavior", Kind::Str)]),
    ),
    opt("containerLogMaxSize", Kind::Str),
    opt("containerLogMaxFiles", Kind::Int32),
    opt("containerLogMaxWorkers", Kind::Int32),
    opt("containerLogMonitorInterval", GO_DURATION),
    opt("configMapAndSecretChangeDetectionStrategy", Kind::Str),
    opt("systemReserved", STR_MAP),
    opt("kubeReserved", STR_MAP),
    opt("reservedSystemCPUs", Kind::Str),
    opt("showHiddenMetricsForVersion", Kind::Str),
    opt("systemReservedCgroup", Kind::Str),
    opt("kubeReservedCgroup", Kind::Str),
    opt("enforceNodeAllocatable", Kind::List(&Kind::Str)),
    opt("allowedUnsafeSysctls", Kind::List(&Kind::Str)),
    opt("defaultPodSysctls", STR_MAP),
    opt("volumePluginDir", Kind::Str),
    opt("providerID", Kind::Str),
    opt("kernelMemcgNotification", Kind::Bool),
    opt(
        "logging",
        Kind::Object(&[
            opt("format", Kind::Str),
            opt("flushFrequency", Kind::IntOrString),
            opt("verbosity", Kind::Int),
            opt(
                "vmodule",
                Kind::List(&Kind::Object(&[
                    opt("filePattern", Kind::Str),
                    opt("verbosity", Kind::Int),
                ])),
            ),
            opt(
                "options",
                Kind::Object(&[opt("text", OUTPUT_ROUTING), opt("json", OUTPUT_ROUTING)]),
            ),
        ]),
    ),
    opt("enableSystemLogHandler", Kind::Bool),
    opt("enableSystemLogQuery", Kind::Bool),
    opt("shutdownGracePeriod", GO_DURATION),
    opt("shutdownGracePeriodCriticalPods", GO_DURATION),
    opt(
        "shutdownGracePeriodByPodPriority",
        Kind::List(&Kind::Object(&[
            req("priority", Kind::Int32),
            req("shutdownGracePeriodSeconds", Kind::Int),
        ])),
    ),
    opt(
        "crashLoopBackOff",
        Kind::Object(&[opt("maxContainerRestartPeriod", GO_DURATION)]),
    ),
    opt(
        "reservedMemory",
        Kind::List(&Kind::Object(&[
            req("numaNode", Kind::Int32),
            req("limits", Kind::Map(&Kind::IntOrString)),
        ])),
    ),
    opt("enableProfilingHandler", Kind::Bool),
    opt("enableDebugFlagsHandler", Kind::Bool),
    opt("seccompDefault", Kind::Bool),
    opt("memoryThrottlingFactor", Kind::Number),
    opt("memoryReservationPolicy", Kind::Str),
    opt("registerWithTaints", Kind::List(&super::nodepool::TAINT)),
    opt("registerNode", Kind::Bool),
    opt(
        "tracing",
        Kind::Object(&[
            opt("endpoint", Kind::Str),
            opt("samplingRatePerMillion", Kind::Int32),
        ]),
    ),
    opt("localStorageCapacityIsolation", Kind::Bool),
    opt("containerRuntimeEndpoint", Kind::Str),
    opt("imageServiceEndpoint", Kind::Str),
    opt("failCgroupV1", Kind::Bool),
    opt(
        "userNamespaces",
        Kind::Object(&[opt("idsPerPod", Kind::Int)]),
    ),
]);

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
            ephemeral_bytes: map
                .get("ephemeral-storage")
                .and_then(|v| resources::parse_whole(v).ok()),
        };
        let expressions = |map: &BTreeMap<String, String>| {
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), reserved_expression(k, v)?)))
                .collect()
        };
        const SIGNAL: &str = "memory.available";
        let threshold =
            |map: &BTreeMap<String, String>| map.get(SIGNAL).and_then(|v| parse_threshold(v));
        KubeletConfig {
            max_pods: self
                .max_pods
                .as_ref()
                .and_then(MaxPods::count)
                .and_then(|v| u32::try_from(v).ok()),
            pods_per_core: self.pods_per_core.and_then(|v| u32::try_from(v).ok()),
            kube_reserved: reserved(&self.kube_reserved),
            system_reserved: reserved(&self.system_reserved),
            eviction_hard_memory: threshold(&self.eviction_hard),
            eviction_soft_memory: threshold(&self.eviction_soft),
            bottlerocket: false,
            windows_build: None,
            efa_only_enis: 0,
            reserved_enis: 0,
            ephemeral_storage: None,
            expressions: KubeletExpressions {
                max_pods: match &self.max_pods {
                    Some(MaxPods::Expression(e)) => Expression::parse(e).ok(),
                    _ => None,
                },
                kube_reserved: expressions(&self.kube_reserved),
                system_reserved: expressions(&self.system_reserved),
            },
        }
    }

    /// The fields written as expressions (`spec.kubelet.…` under `prefix`),
    /// which only the Settings gate `nodeClassCEL` lets through.
    pub fn expression_fields(&self, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(MaxPods::Expression(_)) = self.max_pods {
            out.push(format!("{prefix}.maxPods"));
        }
        for (name, map) in [
            ("systemReserved", &self.system_reserved),
            ("kubeReserved", &self.kube_reserved),
        ] {
            for (k, v) in map {
                if reserved_expression(k, v).is_some() {
                    out.push(format!("{prefix}.{name}[{k}]"));
                }
            }
        }
        out
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
            max_pods: self.max_pods.clone().or_else(|| base.max_pods.clone()),
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
            other: {
                let mut m = base.other.clone();
                m.extend(self.other.clone());
                m
            },
        }
    }

    /// Checks every field; the first error (see [`KubeletSpec::problems`]).
    pub fn validate(&self, prefix: &str) -> Result<(), (String, String)> {
        match self.problems(prefix).into_iter().next() {
            Some(p) => Err(p),
            None => Ok(()),
        }
    }

    /// Every problem of the settings, as `(field, reason)` under `prefix`
    /// (e.g. `spec.kubelet`): Karpenter v1.15's semantic rules on top of the
    /// kubelet schema the raw document was checked against.
    pub fn problems(&self, prefix: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, ip) in self.cluster_dns.iter().enumerate() {
            if ip.parse::<IpAddr>().is_err() {
                out.push((
                    format!("{prefix}.clusterDNS[{i}]"),
                    format!("{ip:?} is not an IP address"),
                ));
            }
        }
        if let Some(MaxPods::Expression(e)) = &self.max_pods
            && let Err(why) = Expression::parse(e)
        {
            out.push((
                format!("{prefix}.maxPods"),
                format!("{e:?} is not an expression giving a number: {why}"),
            ));
        }
        for (name, v) in [
            ("maxPods", self.max_pods.as_ref().and_then(MaxPods::count)),
            ("podsPerCore", self.pods_per_core),
            (
                "evictionMaxPodGracePeriod",
                self.eviction_max_pod_grace_period,
            ),
        ] {
            if let Some(v) = v
                && !(0..=i64::from(i32::MAX)).contains(&v)
            {
                out.push((
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
                    out.push((
                        field.clone(),
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
                    Ok(_) => out.push((field, "must not be negative".into())),
                    Err(e) => {
                        if let Err(why) = Expression::parse(v) {
                            out.push((
                                field,
                                format!("{e}, nor an expression giving a number: {why}"),
                            ))
                        }
                    }
                }
            }
        }
        let mut thresholds = vec![
            ("evictionHard", &self.eviction_hard),
            ("evictionSoft", &self.eviction_soft),
        ];
        let minimum_reclaim: Option<BTreeMap<String, String>> = self
            .other
            .get("evictionMinimumReclaim")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        if let Some(m) = &minimum_reclaim {
            thresholds.push(("evictionMinimumReclaim", m));
        }
        for (name, map) in thresholds {
            for (k, v) in map {
                let field = format!("{prefix}.{name}[{k}]");
                if let Err(r) = check_signal(k) {
                    out.push((field.clone(), r));
                }
                if let Err(r) = check_threshold(v) {
                    out.push((field, r));
                }
            }
        }
        for (k, v) in &self.eviction_soft_grace_period {
            let field = format!("{prefix}.evictionSoftGracePeriod[{k}]");
            if let Err(r) = check_signal(k) {
                out.push((field.clone(), r));
            }
            match syntax::go_duration(v) {
                Some(d) if d >= 0.0 => {}
                Some(_) => out.push((field.clone(), format!("{v:?} must not be negative"))),
                None => out.push((
                    field.clone(),
                    format!("{v:?} is not a duration (like 30s or 1m30s)"),
                )),
            }
            if !self.eviction_soft.contains_key(k) {
                out.push((field, format!("has no matching evictionSoft[{k}]")));
            }
        }
        for k in self.eviction_soft.keys() {
            if !self.eviction_soft_grace_period.contains_key(k) {
                out.push((
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
                out.push((
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
            out.push((
                format!("{prefix}.imageGCHighThresholdPercent"),
                format!("must be greater than imageGCLowThresholdPercent ({high} <= {low})"),
            ));
        }
        for (field, why) in KARPENTER_OWNED_KUBELET {
            if self.other.contains_key(field) {
                out.push((format!("{prefix}.{field}"), format!("cannot be set: {why}")));
            }
        }
        out
    }

    /// The fields set beyond those the launch path maps for every family
    /// (only AL2023 passes them through to the kubelet).
    pub fn passthrough_fields(&self) -> Vec<&str> {
        self.other.keys().map(String::as_str).collect()
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
    Windows2025,
    /// User data is passed through unchanged; the AMI must be selected.
    Custom,
}

impl AmiFamily {
    pub const ALL: [AmiFamily; 7] = [
        AmiFamily::AL2,
        AmiFamily::AL2023,
        AmiFamily::Bottlerocket,
        AmiFamily::Windows2019,
        AmiFamily::Windows2022,
        AmiFamily::Windows2025,
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
            AmiFamily::Windows2025 => "Windows2025",
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
            AmiFamily::Windows2025 => Some("windows2025"),
            AmiFamily::Custom => None,
        }
    }

    pub fn is_windows(self) -> bool {
        matches!(
            self,
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025
        )
    }

    /// The Windows Server build a Windows family's nodes run (their
    /// `node.kubernetes.io/windows-build` label); none for the others.
    pub fn windows_build(self) -> Option<&'static str> {
        match self {
            AmiFamily::Windows2019 => Some("10.0.17763"),
            AmiFamily::Windows2022 => Some("10.0.20348"),
            AmiFamily::Windows2025 => Some("10.0.26100"),
            _ => None,
        }
    }

    /// The Windows Server version of a Windows family (`2022`).
    pub fn windows_version(self) -> Option<&'static str> {
        match self {
            AmiFamily::Windows2019 => Some("2019"),
            AmiFamily::Windows2022 => Some("2022"),
            AmiFamily::Windows2025 => Some("2025"),
            _ => None,
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

/// The tag key prefix EKS subnets and security groups are discovered by
/// (`kubernetes.io/cluster/<cluster name>`).
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

/// A validated subnet or security group selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorTerm {
    Id(String),
    /// Security groups only: the group name.
    Name(String),
    /// Every tag must be present with the value (`*`: any value).
    Tags(BTreeMap<String, String>),
    /// The cluster's discovery tag, `kubernetes.io/cluster/<cluster name>`
    /// with any value (a converted Karpenter v0.5 Provisioner's default).
    ClusterTag,
}

impl SelectorTerm {
    /// The term for a cluster: [`SelectorTerm::ClusterTag`] becomes its tag.
    pub fn for_cluster(&self, cluster: &str) -> SelectorTerm {
        match self {
            SelectorTerm::ClusterTag => SelectorTerm::Tags(
                [(
                    format!("{CLUSTER_TAG_PREFIX}{cluster}"),
                    ANY_TAG_VALUE.to_owned(),
                )]
                .into(),
            ),
            other => other.clone(),
        }
    }

    /// Whether a resource with this id, name and tags matches the term
    /// ([`SelectorTerm::ClusterTag`]: any cluster's tag; use
    /// [`SelectorTerm::for_cluster`] to name one).
    pub fn matches(&self, id: &str, name: Option<&str>, tags: &BTreeMap<String, String>) -> bool {
        match self {
            SelectorTerm::Id(want) => want == id,
            SelectorTerm::Name(want) => name == Some(want.as_str()),
            SelectorTerm::Tags(want) => want.iter().all(|(k, v)| {
                tags.get(k)
                    .is_some_and(|have| v == ANY_TAG_VALUE || have == v)
            }),
            SelectorTerm::ClusterTag => tags.keys().any(|k| k.starts_with(CLUSTER_TAG_PREFIX)),
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
            SelectorTerm::ClusterTag => write!(f, "{{tags[{CLUSTER_TAG_PREFIX}<cluster>]=*}}"),
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
    /// The on-demand capacity reservations nodes may launch into.
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTermSpec>,
    pub network_interfaces: Vec<NetworkInterfaceSpec>,
    pub placement_group_selector: Option<PlacementGroupSelectorSpec>,
    pub cpu_options: Option<CpuOptionsSpec>,
    pub ip_prefix_count: Option<i32>,
    pub connection_tracking: Option<ConnectionTrackingSpec>,
}

const MAX_TERMS: usize = 30;

impl NodeClass {
    /// Validates a spec; the first error (see [`NodeClass::from_spec_all`]).
    pub fn from_spec(name: &str, spec: &EC2NodeClassSpec) -> Result<NodeClass, ConfigError> {
        Self::from_spec_all(name, spec).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Validates a spec; every error, each naming its field and reason,
    /// never an empty list. The rules are Karpenter v1.15's: its CRD's
    /// patterns and CEL rules and its NodeClass validation.
    pub fn from_spec_all(
        name: &str,
        spec: &EC2NodeClassSpec,
    ) -> Result<NodeClass, Vec<ConfigError>> {
        let mut problems: Vec<(String, String)> = Vec::new();
        let mut bad = |p: (String, String)| problems.push(p);
        if name.is_empty() {
            bad(("metadata.name".into(), "must not be empty".into()));
        }
        let family = match spec.ami_family.as_deref() {
            None => None,
            Some(s) => AmiFamily::parse(s).or_else(|| {
                let hint = if s == "Ubuntu" { "; v1 dropped Ubuntu: use Custom with amiSelectorTerms" } else { "" };
                bad(("spec.amiFamily".into(), format!("unknown AMI family {s:?} (AL2, AL2023, Bottlerocket, Windows2019, Windows2022, Windows2025, Custom){hint}")));
                None
            }),
        };
        let ami_selector_terms = ami_terms(&spec.ami_selector_terms, &mut bad);
        let alias_family = ami_selector_terms.iter().find_map(|t| match t {
            AmiSelector::Alias { family, .. } => Some(*family),
            _ => None,
        });
        let ami_family = match (family, alias_family) {
            (None, None) => {
                // Said once: an unknown family or unreadable terms were reported above.
                if spec.ami_family.is_none() && !spec.ami_selector_terms.is_empty() {
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
        let discovery = spec.cluster_discovery;
        let subnet_selector_terms = selector_terms(
            "spec.subnetSelectorTerms",
            "subnet-",
            discovery,
            spec.subnet_selector_terms
                .iter()
                .map(|t| (t.id.as_deref(), None, &t.tags)),
            &mut bad,
        );
        let security_group_selector_terms = selector_terms(
            "spec.securityGroupSelectorTerms",
            "sg-",
            discovery,
            spec.security_group_selector_terms
                .iter()
                .map(|t| (t.id.as_deref(), t.name.as_deref(), &t.tags)),
            &mut bad,
        );
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
            } else if RESERVED_TAG_KEYS.contains(&k.as_str())
                || k.starts_with("kubernetes.io/cluster")
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
        for p in kubelet.problems("spec.kubelet") {
            bad(p);
        }
        kubelet_family_problems(&kubelet, ami_family, &mut bad);
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
        block_device_problems(&spec.block_device_mappings, &mut bad);
        capacity_reservation_problems(&spec.capacity_reservation_selector_terms, &mut bad);
        network_interface_problems(&spec.network_interfaces, &mut bad);
        if let Some(pg) = &spec.placement_group_selector {
            let f = "spec.placementGroupSelector";
            match (&pg.id, &pg.name) {
                (None, None) => bad((f.into(), "expected one of name or id".into())),
                (Some(_), Some(_)) => bad((
                    format!("{f}.id"),
                    "name and id are mutually exclusive".into(),
                )),
                (Some(id), None) if !id_form(id, "pg-") => bad((
                    format!("{f}.id"),
                    format!("{id:?} is not a placement group id (pg-…)"),
                )),
                (None, Some(n)) if n.is_empty() => {
                    bad((format!("{f}.name"), "must not be empty".into()))
                }
                _ => {}
            }
        }
        if let Some(v) = spec
            .cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization.as_deref())
            && !matches!(v, "enabled" | "disabled")
        {
            bad((
                "spec.cpuOptions.nestedVirtualization".into(),
                format!("{v:?} is not one of enabled, disabled"),
            ));
        }
        if let Some(n) = spec.ip_prefix_count
            && n < 0
        {
            bad((
                "spec.ipPrefixCount".into(),
                format!("must not be negative, got {n}"),
            ));
        }
        if let Some(ct) = &spec.connection_tracking {
            let f = "spec.connectionTracking";
            if ct.tcp_established_timeout.is_none()
                && ct.udp_stream_timeout.is_none()
                && ct.udp_timeout.is_none()
            {
                bad((
                    f.into(),
                    "at least one of tcpEstablishedTimeout, udpStreamTimeout, udpTimeout".into(),
                ));
            }
            for (name, v, lo, hi) in [
                (
                    "tcpEstablishedTimeout",
                    ct.tcp_established_timeout,
                    60,
                    432_000,
                ),
                ("udpStreamTimeout", ct.udp_stream_timeout, 60, 180),
                ("udpTimeout", ct.udp_timeout, 30, 60),
            ] {
                if let Some(v) = v
                    && !(lo..=hi).contains(&v)
                {
                    bad((
                        format!("{f}.{name}"),
                        format!("must be between {lo} and {hi} seconds, got {v}"),
                    ));
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems
                .into_iter()
                .map(|(field, reason)| ConfigError {
                    item: format!("nodeclass/{name}"),
                    field,
                    reason,
                })
                .collect());
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
            capacity_reservation_selector_terms: spec.capacity_reservation_selector_terms.clone(),
            network_interfaces: spec.network_interfaces.clone(),
            placement_group_selector: spec.placement_group_selector.clone(),
            cpu_options: spec.cpu_options.clone(),
            ip_prefix_count: spec.ip_prefix_count,
            connection_tracking: spec.connection_tracking.clone(),
        })
    }

    /// What a valid spec does that is allowed but probably not meant.
    pub fn warnings(name: &str, spec: &EC2NodeClassSpec) -> Vec<ConfigError> {
        let mut out = Vec::new();
        if spec.cluster_discovery
            && (spec.subnet_selector_terms.is_empty()
                || spec.security_group_selector_terms.is_empty())
        {
            out.push(ConfigError {
                item: format!("nodeclass/{name}"),
                field: "spec.clusterDiscovery".into(),
                reason: "subnets or security groups are those tagged kubernetes.io/cluster/<cluster name>".into(),
            });
        }
        // Accepted as Karpenter v1.15 accepts them, but the launch path does
        // not apply them yet: say so rather than drop them in silence.
        let mut not_applied = |field: &str, reason: &str| {
            out.push(ConfigError {
                item: format!("nodeclass/{name}"),
                field: field.into(),
                reason: reason.into(),
            });
        };
        if spec.context.is_some() {
            not_applied(
                "spec.context",
                "not applied yet: launches pass no EC2 Fleet context",
            );
        }
        if spec
            .cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization.as_deref())
            == Some("enabled")
        {
            not_applied(
                "spec.cpuOptions.nestedVirtualization",
                "enabled is not supported by the launch path yet: every launch of this class fails with this reason",
            );
        }
        out
    }
}

/// `<prefix><lowercase letters and digits>`, as EC2 ids are.
fn id_form(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// The kubelet fields a family cannot apply (Karpenter v1.15): only AL2023
/// passes every field through; the others apply the ones Karpenter maps,
/// Bottlerocket has no podsPerCore, and one cluster DNS address at most.
/// Custom owns its user data and is exempt.
fn kubelet_family_problems(
    k: &KubeletSpec,
    family: AmiFamily,
    bad: &mut impl FnMut((String, String)),
) {
    if matches!(family, AmiFamily::AL2023 | AmiFamily::Custom) {
        return;
    }
    let mut unsupported: Vec<&str> = k.passthrough_fields();
    if family == AmiFamily::Bottlerocket && k.pods_per_core.is_some() {
        unsupported.push("podsPerCore");
    }
    for f in unsupported {
        if KARPENTER_OWNED_KUBELET.iter().any(|(o, _)| *o == f) {
            continue;
        }
        bad((
            format!("spec.kubelet.{f}"),
            format!(
                "not applied by the {family} AMI family (only AL2023 passes every kubelet field through): it would be dropped"
            ),
        ));
    }
    if k.cluster_dns.len() > 1 {
        bad((
            "spec.kubelet.clusterDNS".into(),
            format!(
                "the {family} AMI family takes one address, got {}",
                k.cluster_dns.len()
            ),
        ));
    }
}

/// `blockDeviceMappings` by Karpenter's CRD: at most 50, one root volume
/// at most, and each `ebs` with a size or a snapshot, a size EBS allows
/// (1 Gi–58 Ti), a known volume type, and an initialization rate (100–300
/// MiB/s) only with a snapshot.
fn block_device_problems(bdms: &[serde_json::Value], bad: &mut impl FnMut((String, String))) {
    const F: &str = "spec.blockDeviceMappings";
    if bdms.len() > 50 {
        bad((F.into(), format!("at most 50 mappings, got {}", bdms.len())));
    }
    let roots = bdms
        .iter()
        .filter(|b| b.get("rootVolume").and_then(serde_json::Value::as_bool) == Some(true))
        .count();
    if roots > 1 {
        bad((
            F.into(),
            format!("at most one mapping may be the rootVolume, got {roots}"),
        ));
    }
    for (i, b) in bdms.iter().enumerate() {
        let Some(ebs) = b.get("ebs").and_then(serde_json::Value::as_object) else {
            continue;
        };
        let f = format!("{F}[{i}].ebs");
        let snapshot = ebs.get("snapshotID").and_then(serde_json::Value::as_str);
        let size = ebs.get("volumeSize");
        if snapshot.is_none() && size.is_none() {
            bad((f.clone(), "snapshotID or volumeSize must be set".into()));
        }
        if let Some(size) = size {
            match size.as_str().map(volume_size_gib) {
                Some(Ok(_)) => {}
                Some(Err(why)) => bad((format!("{f}.volumeSize"), why)),
                None => bad((
                    format!("{f}.volumeSize"),
                    format!("expected a size like 20Gi, got {size}"),
                )),
            }
        }
        if let Some(t) = ebs.get("volumeType").and_then(serde_json::Value::as_str)
            && !["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"].contains(&t)
        {
            bad((
                format!("{f}.volumeType"),
                format!("{t:?} is not one of standard, io1, io2, gp2, sc1, st1, gp3"),
            ));
        }
        if let Some(rate) = ebs
            .get("volumeInitializationRate")
            .and_then(serde_json::Value::as_i64)
        {
            if !(100..=300).contains(&rate) {
                bad((
                    format!("{f}.volumeInitializationRate"),
                    format!("must be between 100 and 300 MiB/s, got {rate}"),
                ));
            }
            if snapshot.is_none_or(str::is_empty) {
                bad((
                    format!("{f}.volumeInitializationRate"),
                    "needs snapshotID (it is the rate the snapshot is read at)".into(),
                ));
            }
        }
    }
}

/// The EBS volume size of the AWS provider's default root volume.
const DEFAULT_VOLUME_BYTES: i64 = 20 << 30;

/// A node's ephemeral storage from its NodeClass, by the AWS provider's
/// rule: with `instanceStorePolicy: RAID0`, the type's instance store;
/// otherwise the `volumeSize` of the mapping marked `rootVolume`, else (a
/// Custom family) of the last mapping, else of the family's ephemeral
/// device (`/dev/xvda`; Bottlerocket's data volume `/dev/xvdb`), else the
/// 20 GiB default.
pub fn ephemeral_storage(class: &NodeClass) -> EphemeralStorage {
    let size = |m: &serde_json::Value| {
        m.get("ebs")
            .and_then(|e| e.get("volumeSize"))
            .and_then(serde_json::Value::as_str)
            .and_then(volume_size_bytes)
    };
    let bdms = &class.block_device_mappings;
    let root = bdms
        .iter()
        .find(|m| m.get("rootVolume").and_then(serde_json::Value::as_bool) == Some(true))
        .and_then(size);
    let device = match class.ami_family {
        AmiFamily::Bottlerocket => "/dev/xvdb",
        f if f.is_windows() => "/dev/sda1",
        _ => "/dev/xvda",
    };
    // Windows AMIs boot from a 50 GiB volume (Karpenter's default for them).
    let default = if class.ami_family.is_windows() {
        50 << 30
    } else {
        DEFAULT_VOLUME_BYTES
    };
    let bytes = root
        .or_else(|| match class.ami_family {
            AmiFamily::Custom => bdms.last().and_then(size),
            _ => bdms
                .iter()
                .find(|m| m.get("deviceName").and_then(serde_json::Value::as_str) == Some(device))
                .and_then(size),
        })
        .unwrap_or(default);
    if class.instance_store_policy.as_deref() == Some("RAID0") {
        EphemeralStorage::InstanceStore(bytes)
    } else {
        EphemeralStorage::Volume(bytes)
    }
}

/// A valid `volumeSize` in bytes (`20Gi`, `100G`, `1Ti`, `1T`).
fn volume_size_bytes(s: &str) -> Option<i64> {
    volume_size_gib(s).ok()?;
    let end = s.find(|c: char| !c.is_ascii_digit())?;
    let n: i64 = s[..end].parse().ok()?;
    match &s[end..] {
        "Gi" => Some(n << 30),
        "G" => Some(n * 1_000_000_000),
        "Ti" => Some(n << 40),
        "T" => Some(n * 1_000_000_000_000),
        _ => None,
    }
}

/// An EBS volume size as Karpenter's CRD allows it, in GiB: `1Gi`–`59000Gi`,
/// `1G`–`64000G`, `1Ti`–`58Ti`, `1T`–`64T`.
pub fn volume_size_gib(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not an EBS volume size (1Gi to 58Ti, or 1G to 64T)");
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(end);
    if digits.is_empty() || digits.starts_with('0') {
        return Err(bad());
    }
    let n: i64 = digits.parse().map_err(|_| bad())?;
    let (max, gib) = match unit {
        "Gi" => (59_000, n),
        "G" => (64_000, (n as u64 * 1_000_000_000).div_ceil(1 << 30) as i64),
        "Ti" => (58, n * 1024),
        "T" => (64, (n as u64 * 1_000_000_000_000).div_ceil(1 << 30) as i64),
        _ => return Err(bad()),
    };
    if n > max {
        return Err(bad());
    }
    Ok(gib)
}

/// `capacityReservationSelectorTerms` by Karpenter's CRD.
fn capacity_reservation_problems(
    terms: &[CapacityReservationSelectorTermSpec],
    bad: &mut impl FnMut((String, String)),
) {
    const F: &str = "spec.capacityReservationSelectorTerms";
    if terms.len() > MAX_TERMS {
        bad((
            F.into(),
            format!("at most {MAX_TERMS} terms, got {}", terms.len()),
        ));
    }
    for (i, t) in terms.iter().enumerate() {
        let f = format!("{F}[{i}]");
        if t.id.is_none() && t.tags.is_empty() && t.instance_match_criteria.is_none() {
            bad((
                f.clone(),
                "expected one of id, tags or instanceMatchCriteria".into(),
            ));
        }
        if let Some(id) = &t.id {
            if !id_form(id, "cr-") {
                bad((
                    format!("{f}.id"),
                    format!("{id:?} is not a capacity reservation id (cr-…)"),
                ));
            }
            if !t.tags.is_empty() || t.owner_id.is_some() || t.instance_match_criteria.is_some() {
                bad((
                    format!("{f}.id"),
                    "id cannot be combined with tags, ownerID or instanceMatchCriteria in the same term".into(),
                ));
            }
        }
        if let Some(o) = &t.owner_id
            && !(o.len() == 12 && o.bytes().all(|b| b.is_ascii_digit()))
        {
            bad((
                format!("{f}.ownerID"),
                format!("{o:?} is not an account id (12 digits)"),
            ));
        }
        if let Some(m) = &t.instance_match_criteria
            && !matches!(m.as_str(), "open" | "targeted")
        {
            bad((
                format!("{f}.instanceMatchCriteria"),
                format!("{m:?} is not one of open, targeted"),
            ));
        }
        check_term_tags(&t.tags, &f, bad);
    }
}

/// `networkInterfaces` by Karpenter's CRD: a primary `interface` at card 0
/// device 0, no card/device pair twice, one `efa-only` per card at most.
fn network_interface_problems(
    nis: &[NetworkInterfaceSpec],
    bad: &mut impl FnMut((String, String)),
) {
    const F: &str = "spec.networkInterfaces";
    if nis.is_empty() {
        return;
    }
    if nis.len() > 150 {
        bad((
            F.into(),
            format!("at most 150 interfaces, got {}", nis.len()),
        ));
    }
    for (i, n) in nis.iter().enumerate() {
        let f = format!("{F}[{i}]");
        if !matches!(n.interface_type.as_str(), "interface" | "efa-only") {
            bad((
                format!("{f}.interfaceType"),
                format!("{:?} is not one of interface, efa-only", n.interface_type),
            ));
        }
        for (name, v) in [
            ("networkCardIndex", n.network_card_index),
            ("deviceIndex", n.device_index),
        ] {
            if v < 0 {
                bad((
                    format!("{f}.{name}"),
                    format!("must not be negative, got {v}"),
                ));
            }
        }
        if nis[..i].iter().any(|o| {
            o.network_card_index == n.network_card_index && o.device_index == n.device_index
        }) {
            bad((
                f.clone(),
                format!(
                    "network card {} device {} is listed twice",
                    n.network_card_index, n.device_index
                ),
            ));
        }
        if n.interface_type == "efa-only"
            && nis[..i].iter().any(|o| {
                o.interface_type == "efa-only" && o.network_card_index == n.network_card_index
            })
        {
            bad((
                f.clone(),
                format!(
                    "network card {} has more than one efa-only interface",
                    n.network_card_index
                ),
            ));
        }
    }
    if !nis.iter().any(|n| {
        n.network_card_index == 0 && n.device_index == 0 && n.interface_type == "interface"
    }) {
        bad((
            F.into(),
            "needs a primary interface: networkCardIndex 0, deviceIndex 0, interfaceType interface"
                .into(),
        ));
    }
}

/// `metadataOptions` as EC2 takes them (Karpenter's schema): each field
/// one of its values, the hop limit 1–64.
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

/// Selector tags: at most 20, no empty key or value.
fn check_term_tags(
    tags: &BTreeMap<String, String>,
    field: &str,
    bad: &mut impl FnMut((String, String)),
) {
    if tags.len() > 20 {
        bad((
            format!("{field}.tags"),
            format!("at most 20 tags, got {}", tags.len()),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            bad((
                format!("{field}.tags[{k}]"),
                "empty tag keys and values are not supported (use \"*\" for any value)".into(),
            ));
        }
    }
}

/// The AMI selector terms, by Karpenter's CRD: 1 to 30 terms, each with
/// one of alias, id, name, ssmParameter or tags; id and alias alone in
/// their term; an alias alone in the list.
fn ami_terms(
    terms: &[AmiSelectorTermSpec],
    bad: &mut impl FnMut((String, String)),
) -> Vec<AmiSelector> {
    const FIELD: &str = "spec.amiSelectorTerms";
    if terms.is_empty() {
        bad((
            FIELD.into(),
            "at least one term is required (e.g. alias: al2023@latest)".into(),
        ));
    }
    if terms.len() > MAX_TERMS {
        bad((
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
        let mut exclusive = |name: &str| -> bool {
            let o = others(name);
            if o.is_empty() {
                true
            } else {
                bad((
                    format!("{field}.{name}"),
                    format!(
                        "{name} cannot be combined with {} in the same term",
                        o.join(", ")
                    ),
                ));
                false
            }
        };
        if let Some(alias) = &t.alias {
            let alone = exclusive("alias");
            if terms.len() > 1 {
                bad((
                    format!("{field}.alias"),
                    "an alias must be the only AMI selector term".into(),
                ));
            }
            match parse_alias(alias) {
                Ok(a) if alone => out.push(a),
                Ok(_) => {}
                Err(r) => bad((format!("{field}.alias"), r)),
            }
        } else if let Some(id) = &t.id {
            let alone = exclusive("id");
            if !id_form(id, "ami-") {
                bad((
                    format!("{field}.id"),
                    format!("{id:?} is not an AMI id (ami-…)"),
                ));
            } else if alone {
                out.push(AmiSelector::Id(id.clone()));
            }
        } else if let Some(p) = &t.ssm_parameter {
            if exclusive("ssmParameter") {
                out.push(AmiSelector::SsmParameter(p.clone()));
            }
        } else if t.name.is_some() || !t.tags.is_empty() {
            check_term_tags(&t.tags, &field, bad);
            out.push(AmiSelector::Query {
                name: t.name.clone(),
                owner: t.owner.clone(),
                tags: t.tags.clone(),
            });
        } else {
            bad((
                field,
                "expected one of alias, id, name, ssmParameter or tags".into(),
            ));
        }
    }
    out
}

/// `<family>@<version>`: the families Karpenter knows, `latest` or a
/// pinned release (`vYYYYMMDD` for AL2/AL2023; `[v]X.Y.Z` for
/// Bottlerocket; Windows only `latest`).
fn parse_alias(alias: &str) -> Result<AmiSelector, String> {
    if alias.len() > 30 {
        return Err(format!("{alias:?} is longer than 30 characters"));
    }
    let Some((family, version)) = alias.split_once('@') else {
        return Err(format!(
            "{alias:?} is not <family>@<version> (e.g. al2023@latest)"
        ));
    };
    if family.is_empty() || version.is_empty() {
        return Err(format!(
            "{alias:?} is not <family>@<version> (e.g. al2023@latest)"
        ));
    }
    let family = AmiFamily::from_alias_name(family).ok_or_else(|| {
        format!("{alias:?}: unknown family {family:?} (al2, al2023, bottlerocket, windows2019, windows2022, windows2025)")
    })?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let version_ok = version == "latest"
        || match family {
            AmiFamily::AL2 | AmiFamily::AL2023 => version
                .strip_prefix('v')
                .is_some_and(|d| d.len() == 8 && digits(d)),
            AmiFamily::Bottlerocket => {
                let v = version.strip_prefix('v').unwrap_or(version);
                v.split('.').count() == 3 && v.split('.').all(digits)
            }
            _ => false,
        };
    if !version_ok {
        let expected = match family {
            AmiFamily::AL2 | AmiFamily::AL2023 => "latest or vYYYYMMDD",
            AmiFamily::Bottlerocket => "latest or [v]<major>.<minor>.<patch>",
            _ => "latest (the only version for Windows)",
        };
        return Err(format!("{alias:?}: version {version:?} is not {expected}"));
    }
    Ok(AmiSelector::Alias {
        family,
        version: version.to_owned(),
    })
}

/// Subnet or security group terms as (id, name, tags): 1 to 30 (none with
/// `cluster_discovery`: the cluster's tag), each one of id, name
/// (security groups) or tags.
fn selector_terms<'a>(
    field: &str,
    id_prefix: &str,
    cluster_discovery: bool,
    terms: impl ExactSizeIterator<
        Item = (
            Option<&'a str>,
            Option<&'a str>,
            &'a BTreeMap<String, String>,
        ),
    >,
    bad: &mut impl FnMut((String, String)),
) -> Vec<SelectorTerm> {
    if terms.len() == 0 {
        if cluster_discovery {
            return vec![SelectorTerm::ClusterTag];
        }
        bad((field.into(), "at least one term is required".into()));
        return Vec::new();
    }
    if terms.len() > MAX_TERMS {
        bad((
            field.into(),
            format!("at most {MAX_TERMS} terms, got {}", terms.len()),
        ));
    }
    let sg = field.contains("securityGroup");
    let mut out = Vec::new();
    for (i, (id, name, tags)) in terms.enumerate() {
        let f = format!("{field}[{i}]");
        match (id, name, tags.is_empty()) {
            (Some(id), None, true) => {
                if id_form(id, id_prefix) {
                    out.push(SelectorTerm::Id(id.to_owned()));
                } else {
                    bad((
                        format!("{f}.id"),
                        format!("{id:?} is not an id ({id_prefix}…)"),
                    ));
                }
            }
            (None, Some(name), true) if !name.is_empty() => {
                out.push(SelectorTerm::Name(name.to_owned()))
            }
            (None, None, false) => {
                check_term_tags(tags, &f, bad);
                out.push(SelectorTerm::Tags(tags.clone()));
            }
            (_, Some(""), _) => bad((format!("{f}.name"), "must not be empty".into())),
            (Some(_), _, _) => bad((
                format!("{f}.id"),
                "id cannot be combined with other fields in the same term".into(),
            )),
            (None, Some(_), _) => bad((
                format!("{f}.name"),
                "name cannot be combined with other fields in the same term".into(),
            )),
            (None, None, true) => bad((
                f,
                if sg {
                    "expected one of id, name or tags"
                } else {
                    "expected id or tags"
                }
                .into(),
            )),
        }
    }
    out
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

    /// aws/karpenter-provider-aws `pkg/providers/instancetype/suite_test.go`,
    /// Describe "InstanceTypeProvider" / Context "Ephemeral Storage": a
    /// mapping of the family's ephemeral device with a snapshot and no
    /// `volumeSize` leaves the 20 GiB default.
    fn snapshot_only(alias: &str, device: &str) -> NodeClass {
        NodeClass::from_spec(
            "c",
            &with(serde_json::json!({
                "amiSelectorTerms": [{"alias": alias}],
                "blockDeviceMappings": [{"deviceName": device, "ebs": {"snapshotID": "snap-xxxxxxxx", "volumeInitializationRate": 100}}]
            })),
        )
        .expect("valid")
    }

    #[test]
    fn should_default_to_ebs_defaults_when_volume_size_is_not_defined_in_block_device_mappings_for_al2_root_volume()
     {
        let c = snapshot_only("al2@latest", "/dev/xvda");
        assert_eq!(c.ami_family, AmiFamily::AL2);
        assert_eq!(ephemeral_storage(&c), EphemeralStorage::Volume(20 << 30));
    }

    #[test]
    fn should_default_to_ebs_defaults_when_volume_size_is_not_defined_in_block_device_mappings_for_al2023_root_volume()
     {
        let c = snapshot_only("al2023@latest", "/dev/xvda");
        assert_eq!(c.ami_family, AmiFamily::AL2023);
        assert_eq!(ephemeral_storage(&c), EphemeralStorage::Volume(20 << 30));
    }

    #[test]
    fn should_default_to_ebs_defaults_when_volume_size_is_not_defined_in_block_device_mappings_for_bottlerocket_root_volume()
     {
        let c = snapshot_only("bottlerocket@latest", "/dev/xvdb");
        assert_eq!(c.ami_family, AmiFamily::Bottlerocket);
        assert_eq!(ephemeral_storage(&c), EphemeralStorage::Volume(20 << 30));
    }

    /// The size written wins: the `rootVolume` mapping's, else the family's
    /// ephemeral device's (Bottlerocket's data volume, not its OS volume);
    /// `RAID0` takes the instance store of a type that has one.
    #[test]
    fn ephemeral_storage_follows_the_mapping_the_kubelet_uses() {
        let class =
            |patch: serde_json::Value| NodeClass::from_spec("c", &with(patch)).expect("valid");
        let root = class(serde_json::json!({"blockDeviceMappings": [
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "50Gi"}},
            {"deviceName": "/dev/xvdc", "rootVolume": true, "ebs": {"volumeSize": "100G"}}
        ]}));
        assert_eq!(
            ephemeral_storage(&root),
            EphemeralStorage::Volume(100_000_000_000)
        );
        let bottlerocket = class(
            serde_json::json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}},
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Ti"}}
            ]}),
        );
        assert_eq!(
            ephemeral_storage(&bottlerocket),
            EphemeralStorage::Volume(1 << 40)
        );
        let raid = class(serde_json::json!({"instanceStorePolicy": "RAID0"}));
        let store = ephemeral_storage(&raid);
        assert_eq!(store, EphemeralStorage::InstanceStore(20 << 30));
        assert_eq!(store.bytes(7600), 7_600_000_000_000);
        assert_eq!(
            store.bytes(0),
            20 << 30,
            "a type without instance store keeps the volume"
        );
        assert_eq!(EphemeralStorage::Volume(20 << 30).bytes(7600), 20 << 30);
    }

    /// Every mistake of a class at once, `metadataOptions` included.
    /// Fields Karpenter v1.15 accepts that launches do not apply yet are
    /// accepted with a warning naming each, never dropped in silence.
    #[test]
    fn fields_not_applied_yet_are_named_in_warnings() {
        let s = with(serde_json::json!({
            "capacityReservationSelectorTerms": [{"id": "cr-0123456789abcdef0"}],
            "context": "arn:aws:ec2:us-east-1:111122223333:context/x",
            "cpuOptions": {"nestedVirtualization": "enabled"}
        }));
        assert!(NodeClass::from_spec("c", &s).is_ok());
        let fields: Vec<String> = NodeClass::warnings("c", &s)
            .into_iter()
            .map(|w| w.field)
            .collect();
        assert_eq!(
            fields,
            ["spec.context", "spec.cpuOptions.nestedVirtualization"]
        );
        let plain = with(serde_json::json!({"cpuOptions": {"nestedVirtualization": "disabled"}}));
        assert!(NodeClass::warnings("c", &plain).is_empty());
    }

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
                    memory_bytes: Some(256 << 20),
                    ephemeral_bytes: None,
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
            max_pods: Some(110.into()),
            cluster_dns: vec!["10.0.0.10".into()],
            ..KubeletSpec::default()
        };
        let pool = KubeletSpec {
            max_pods: Some(20.into()),
            ..KubeletSpec::default()
        };
        let merged = pool.merged_over(&class);
        assert_eq!(merged.max_pods, Some(MaxPods::Count(20)));
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
