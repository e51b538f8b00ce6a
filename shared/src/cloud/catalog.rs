//! From EC2 facts about an instance type to the packer's [`InstanceType`]:
//! well-known label requirements and allocatable capacity with EKS's math.
//!
//! The facts come from DescribeInstanceTypes (or a shipped catalog); the
//! numbers follow what Karpenter's AWS provider computes, so a node we plan
//! holds exactly what the kubelet will let it hold:
//! - memory capacity = MiB − 64 MiB on arm64 − ceil(7.5 % VM overhead)
//! - kube-reserved memory = 11 MiB × the ENI-limited pods + 255 MiB (on
//!   Bottlerocket: × the node's max pods); eviction threshold 100 MiB
//! - kube-reserved CPU = 6 % of the first core, 1 % of the second, 0.5 % of
//!   cores 3–4, 0.25 % of every core above 4
//! - maxPods = ENIs × (IPv4 per ENI − 1) + 2 unless the kubelet config says otherwise
//! - `vpc.amazonaws.com/pod-eni` = the type's branch ENIs when it can trunk
//!   (`shared/data/trunk-branch-enis.csv`), else 0
//! - Windows nodes (the Windows AMI families): `kubernetes.io/os=windows` on
//!   amd64 only, `node.kubernetes.io/windows-build`, 110 pods unless maxPods
//!   (no ENI-limited density; reserved ENIs do not count), kube-reserved
//!   memory from those pods, and `vpc.amazonaws.com/PrivateIPv4Address` =
//!   IPv4 per ENI − 1 (what the VPC resource controller advertises)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::expression::{Expression, ExpressionError, Vars};
use super::instance_type::{InstanceType, Offering};
use crate::resources::{MIB, Resources};
use crate::scheduling::labels;
use crate::scheduling::requirements::{Operator, Requirement, Requirements};

/// What EC2 tells us about one instance type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceTypeInfo {
    pub name: String,
    pub vcpu: u32,
    pub memory_mib: u64,
    /// `amd64` or `arm64`.
    pub arch: String,
    #[serde(default)]
    pub hypervisor: Option<String>,
    #[serde(default)]
    pub bare_metal: bool,
    #[serde(default)]
    pub gpu_count: u32,
    #[serde(default)]
    pub gpu_name: Option<String>,
    /// `NVIDIA`, `AMD`, or `AWS` (Neuron); decides the extended resource name.
    #[serde(default)]
    pub gpu_manufacturer: Option<String>,
    #[serde(default)]
    pub local_nvme_gb: u64,
    #[serde(default)]
    pub max_enis: u32,
    #[serde(default)]
    pub ipv4_per_eni: u32,
    #[serde(default)]
    pub network_bandwidth_mbps: Option<u64>,
    /// The processor's maker as EC2 names it (`Intel`, `AMD`, `AWS`).
    #[serde(default)]
    pub cpu_manufacturer: Option<String>,
    /// The processor's sustained clock speed, MHz (rounded).
    #[serde(default)]
    pub sustained_clock_mhz: Option<u32>,
    /// Maximum EBS bandwidth, Mbps, for types EBS-optimized by default.
    #[serde(default)]
    pub ebs_bandwidth_mbps: Option<u64>,
    /// Memory of one GPU, MiB.
    #[serde(default)]
    pub gpu_memory_mib: Option<u64>,
    /// Whether the network encrypts traffic between such instances.
    #[serde(default)]
    pub encryption_in_transit: Option<bool>,
    /// Whether Nitro Enclaves can run on it.
    #[serde(default)]
    pub nitro_enclaves: Option<bool>,
    /// NeuronCores over all Neuron devices (`aws.amazon.com/neuroncore`).
    #[serde(default)]
    pub neuron_cores: u32,
    /// EFA interfaces it can attach (`vpc.amazonaws.com/efa`).
    #[serde(default)]
    pub efa_interfaces: u32,
}

/// The kubelet settings of a NodePool / NodeClass that change allocatable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<u32>,
    /// `kubeReserved`: replaces the EKS default of each resource it names.
    #[serde(default, skip_serializing_if = "Reserved::is_empty")]
    pub kube_reserved: Reserved,
    /// `systemReserved`: kept on top of kube-reserved (no default).
    #[serde(default, skip_serializing_if = "Reserved::is_empty")]
    pub system_reserved: Reserved,
    /// `evictionHard["memory.available"]`: replaces the 100 MiB default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard_memory: Option<Threshold>,
    /// `evictionSoft["memory.available"]`: a warning threshold; it does not
    /// reduce allocatable (only the hard one does, as Karpenter computes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_soft_memory: Option<Threshold>,
    /// The nodes run Bottlerocket (the NodeClass's AMI family): it has no
    /// podsPerCore, and it sizes the default kube-reserved memory from the
    /// max pods the node runs, where the EKS AMIs size it from the
    /// ENI-limited count (as Karpenter computes both).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bottlerocket: bool,
    /// The nodes run Windows Server (a Windows AMI family): its build
    /// (`10.0.20348` for 2022), the `node.kubernetes.io/windows-build` of
    /// every node. Windows has no ENI-limited pod density: 110 pods unless
    /// `maxPods`, kube-reserved memory from them, `reservedENIs` ignored;
    /// only amd64 types run it; the VPC resource controller gives each
    /// node `vpc.amazonaws.com/PrivateIPv4Address` (as Karpenter computes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows_build: Option<String>,
    /// EFA-only interfaces the NodeClass puts on the default network card:
    /// ENIs that hold no pod IPs, so fewer pods fit (as Karpenter counts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub efa_only_enis: u32,
    /// ENIs the settings keep out of the max-pods math (`reservedENIs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserved_enis: u32,
    /// Where the node's ephemeral storage lives (from the NodeClass:
    /// `config::nodeclass::ephemeral_storage`); `None`: not modelled, no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<EphemeralStorage>,
    /// `maxPods`, `kubeReserved` and `systemReserved` written as
    /// expressions of the instance type (the `nodeClassCEL` gate): resolved
    /// per type by [`InstanceTypeInfo::resolve_kubelet`] before any other
    /// use; empty when the gate is off.
    #[serde(default, skip_serializing_if = "KubeletExpressions::is_empty")]
    pub expressions: KubeletExpressions,
}

/// The kubelet fields given as expressions (`cloud::expression`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletExpressions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<Expression>,
    /// Resource name (`cpu`, `memory`, `ephemeral-storage`, `pid`) → expression.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, Expression>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, Expression>,
}

impl KubeletExpressions {
    pub fn is_empty(&self) -> bool {
        self.max_pods.is_none() && self.kube_reserved.is_empty() && self.system_reserved.is_empty()
    }
}

/// A kubelet expression that gives no usable value for one instance type:
/// which field, the expression, the type, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resolving {field} {expression:?} for instance type {instance_type}: {source}")]
pub struct KubeletError {
    pub field: &'static str,
    pub expression: String,
    pub instance_type: String,
    pub source: ExpressionError,
}

/// A kubelet configuration resolved for one instance type: what the
/// allocatable math reads, and the reserved values the expressions gave,
/// as the quantities the node's user data carries (`kube` and `system`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedKubelet {
    pub config: KubeletConfig,
    pub kube_reserved: BTreeMap<String, String>,
    pub system_reserved: BTreeMap<String, String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A node's ephemeral storage (the kubelet's nodefs), as the AWS provider
/// sizes it from the NodeClass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EphemeralStorage {
    /// The EBS volume the kubelet uses (the root volume; Bottlerocket's
    /// data volume), in bytes.
    Volume(i64),
    /// `instanceStorePolicy: RAID0`: the type's instance store (its total
    /// size in GB) when it has one, else the volume (bytes).
    InstanceStore(i64),
}

impl EphemeralStorage {
    /// Capacity in bytes on a type with `local_nvme_gb` of instance store.
    pub fn bytes(self, local_nvme_gb: u64) -> i64 {
        match self {
            EphemeralStorage::InstanceStore(_) if local_nvme_gb > 0 => i64::try_from(local_nvme_gb)
                .unwrap_or(i64::MAX / 1_000_000_000)
                .saturating_mul(1_000_000_000),
            EphemeralStorage::Volume(b) | EphemeralStorage::InstanceStore(b) => b,
        }
    }
}

/// CPU and memory a kubelet setting reserves (`None`: not set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reserved {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_bytes: Option<i64>,
}

impl Reserved {
    pub fn is_empty(&self) -> bool {
        self.cpu_millis.is_none() && self.memory_bytes.is_none() && self.ephemeral_bytes.is_none()
    }
}

/// An eviction threshold: an amount, or a share of capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Threshold {
    Bytes(i64),
    /// Hundredths of a percent (`10%` = 1000), so the type stays `Eq`.
    Basis(i64),
}

impl Threshold {
    /// The amount for a capacity: a share is rounded up, and `100%`
    /// disables the threshold (0), as the kubelet reads it.
    pub fn of(&self, capacity: i64) -> i64 {
        match *self {
            Threshold::Bytes(b) => b,
            Threshold::Basis(10_000) => 0,
            Threshold::Basis(bp) => {
                let scaled = capacity as i128 * bp as i128;
                (scaled / 10_000 + i128::from(scaled % 10_000 != 0)) as i64
            }
        }
    }
}

/// The extended resource of a pod's own branch ENI (security groups for pods).
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";

/// Branch ENIs per trunking-compatible type (what the VPC resource
/// controller advertises as `vpc.amazonaws.com/pod-eni`); EC2's API does not
/// report them, so both catalogs read this table.
const TRUNK_BRANCH_ENIS: &str = include_str!("../../data/trunk-branch-enis.csv");

/// The branch ENIs a node of `instance_type` offers pods; 0 for a type that
/// cannot trunk (or that the table does not know).
pub fn trunk_branch_enis(instance_type: &str) -> u32 {
    static TABLE: std::sync::OnceLock<std::collections::HashMap<&'static str, u32>> =
        std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| {
            TRUNK_BRANCH_ENIS
                .lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("instance_type,"))
                .filter_map(|l| {
                    let (name, n) = l.split_once(',')?;
                    Some((name, n.trim().parse().ok()?))
                })
                .collect()
        })
        .get(instance_type)
        .copied()
        .unwrap_or(0)
}

/// The extended resource of a Windows node's pod IPv4 addresses.
pub const PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

/// The EKS default when the ENI limit is unknown.
pub const DEFAULT_MAX_PODS: i64 = 110;
/// Share of memory the hypervisor keeps (Karpenter's VM_MEMORY_OVERHEAD_PERCENT).
pub const VM_MEMORY_OVERHEAD: f64 = 0.075;

impl InstanceTypeInfo {
    /// `m5.large` → (`m`, `m5`, 5, `large`).
    pub fn name_parts(&self) -> (String, String, Option<u32>, String) {
        let (family, size) = self.name.split_once('.').unwrap_or((&self.name, ""));
        let category: String = family
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let generation = family[category.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok();
        (category, family.to_owned(), generation, size.to_owned())
    }

    /// ENI-limited max pods, overridden by the kubelet config.
    pub fn max_pods(&self, kubelet: &KubeletConfig) -> i64 {
        let mut max = match (self.max_enis, self.ipv4_per_eni) {
            // Windows nodes' pods do not take ENI addresses from the VPC CNI.
            _ if kubelet.windows_build.is_some() => DEFAULT_MAX_PODS,
            (e, i) if e > 0 && i > 1 => {
                // No ENI left for pods is no pod at all (as Karpenter counts).
                match e
                    .saturating_sub(kubelet.efa_only_enis)
                    .saturating_sub(kubelet.reserved_enis)
                {
                    0 => 0,
                    usable => i64::from(usable) * (i64::from(i) - 1) + 2,
                }
            }
            _ => DEFAULT_MAX_PODS,
        };
        if let Some(m) = kubelet.max_pods {
            max = i64::from(m);
        }
        // podsPerCore 0 is unset; Bottlerocket has no such setting.
        if let Some(ppc) = kubelet
            .pods_per_core
            .filter(|p| *p > 0 && !kubelet.bottlerocket)
        {
            max = max.min(i64::from(ppc) * i64::from(self.vcpu));
        }
        max
    }

    pub fn capacity(&self, kubelet: &KubeletConfig) -> Resources {
        let mib = self.memory_mib as i64;
        let arm_reserve = if self.arch == "arm64" { 64 } else { 0 };
        let vm_overhead = (mib as f64 * VM_MEMORY_OVERHEAD).ceil() as i64;
        let mut r = Resources::new(
            i64::from(self.vcpu) * 1000,
            (mib - arm_reserve - vm_overhead).max(0) * MIB,
            self.max_pods(kubelet),
        );
        if self.gpu_count > 0 {
            let name = match self.gpu_manufacturer.as_deref() {
                Some("AMD") => "amd.com/gpu",
                Some("AWS") => "aws.amazon.com/neuron",
                Some("Habana") => "habana.ai/gaudi",
                _ => "nvidia.com/gpu",
            };
            r.set_extended(name, i64::from(self.gpu_count));
        }
        r.set_extended("aws.amazon.com/neuroncore", i64::from(self.neuron_cores));
        r.set_extended("vpc.amazonaws.com/efa", i64::from(self.efa_interfaces));
        r.set_extended(POD_ENI, i64::from(trunk_branch_enis(&self.name)));
        if self.runs_windows(kubelet) {
            // The VPC resource controller's per-node IPv4 addresses for
            // Windows pods: one ENI's addresses less the primary. A type
            // whose ENI facts are unknown gets none (nothing advertises it).
            r.set_extended(
                PRIVATE_IPV4_ADDRESS,
                i64::from(self.ipv4_per_eni.saturating_sub(1)),
            );
        }
        if let Some(e) = kubelet.ephemeral_storage {
            r.ephemeral_bytes = e.bytes(self.local_nvme_gb);
        }
        r
    }

    /// kube-reserved (the EKS defaults, or the kubelet's `kubeReserved` per
    /// resource) + `systemReserved` + the memory eviction threshold
    /// (100 MiB, or the kubelet's), as Karpenter computes allocatable.
    pub fn overhead(&self, kubelet: &KubeletConfig) -> Resources {
        let kube_cpu = kubelet
            .kube_reserved
            .cpu_millis
            .unwrap_or_else(|| kube_reserved_cpu_millis(self.vcpu));
        // The EKS AMIs size the default from the ENI-limited pod count,
        // whatever maxPods or podsPerCore say; Bottlerocket from the max
        // pods the node runs.
        let sizing_pods = if kubelet.bottlerocket || kubelet.windows_build.is_some() {
            self.max_pods(kubelet)
        } else {
            self.max_pods(&KubeletConfig::default())
        };
        let kube_memory = kubelet
            .kube_reserved
            .memory_bytes
            .unwrap_or((11 * sizing_pods + 255) * MIB);
        let capacity_memory = self.capacity(kubelet).memory_bytes;
        let eviction = kubelet
            .eviction_hard_memory
            .map_or(100 * MIB, |t| t.of(capacity_memory));
        let cpu = kube_cpu + kubelet.system_reserved.cpu_millis.unwrap_or(0);
        let memory = kube_memory + kubelet.system_reserved.memory_bytes.unwrap_or(0) + eviction;
        let mut r = Resources::new(cpu, memory, 0);
        // Ephemeral storage: 1 GiB kube-reserved (or the kubelet's) and the
        // 10 % nodefs eviction threshold (the AWS provider's defaults).
        if let Some(e) = kubelet.ephemeral_storage {
            let capacity = e.bytes(self.local_nvme_gb);
            r.ephemeral_bytes = kubelet.kube_reserved.ephemeral_bytes.unwrap_or(1 << 30)
                + kubelet.system_reserved.ephemeral_bytes.unwrap_or(0)
                + (capacity + 9) / 10;
        }
        r
    }

    /// Whether nodes of this type run Windows with these settings: a
    /// Windows family on amd64 (the only architecture Windows AMIs have).
    pub fn runs_windows(&self, kubelet: &KubeletConfig) -> bool {
        kubelet.windows_build.is_some() && self.arch == "amd64"
    }

    /// The requirements every node of this type satisfies with the
    /// NodeClass's settings: [`InstanceTypeInfo::requirements`], and under
    /// a Windows family `kubernetes.io/os=windows` and the build (an arm64
    /// type gets no OS at all: nothing that asks for one runs there).
    pub fn requirements_for(&self, kubelet: &KubeletConfig) -> Requirements {
        let mut r = self.requirements();
        if let Some(build) = &kubelet.windows_build {
            let os = if self.runs_windows(kubelet) {
                Requirement::single("windows")
            } else {
                Requirement::does_not_exist()
            };
            r.remove(labels::OS);
            r.add(labels::OS, os);
            r.remove(labels::WINDOWS_BUILD);
            r.add(labels::WINDOWS_BUILD, Requirement::single(build.clone()));
        }
        r
    }

    /// The requirements every node of this type satisfies on the Linux
    /// families (before offerings).
    pub fn requirements(&self) -> Requirements {
        let (category, family, generation, size) = self.name_parts();
        let flex = family.contains("-flex");
        let mut r = Requirements::new();
        r.add(labels::ARCH, Requirement::single(&self.arch));
        r.add(labels::OS, Requirement::single("linux"));
        r.add(labels::INSTANCE_CATEGORY, Requirement::single(category));
        r.add(labels::INSTANCE_FAMILY, Requirement::single(family));
        if let Some(g) = generation {
            r.add(
                labels::INSTANCE_GENERATION,
                Requirement::single(g.to_string()),
            );
        }
        if !size.is_empty() {
            r.add(labels::INSTANCE_SIZE, Requirement::single(size));
        }
        r.add(
            labels::INSTANCE_CPU,
            Requirement::single(self.vcpu.to_string()),
        );
        r.add(
            labels::INSTANCE_MEMORY,
            Requirement::single(self.memory_mib.to_string()),
        );
        // Absent values are DoesNotExist so that `Exists`/`In` pods skip these types.
        let optional =
            |v: Option<String>| v.map_or_else(Requirement::does_not_exist, Requirement::single);
        r.add(
            labels::INSTANCE_HYPERVISOR,
            optional(self.hypervisor.clone().filter(|h| !h.is_empty())),
        );
        // GPUs carry the GPU labels; AWS's own accelerators (Neuron,
        // Inferentia) the accelerator ones, as Karpenter labels them. A type
        // without either has none of them.
        let accelerator = self.gpu_manufacturer.as_deref() == Some("AWS");
        let device = self.gpu_count > 0;
        let kabob = |v: &str| v.trim().to_lowercase().replace(' ', "-");
        let gpu = |v: Option<String>| optional(v.filter(|_| device && !accelerator));
        let acc = |v: Option<String>| optional(v.filter(|_| device && accelerator));
        r.add(
            labels::INSTANCE_GPU_COUNT,
            gpu(Some(self.gpu_count.to_string())),
        );
        r.add(
            labels::INSTANCE_GPU_NAME,
            gpu(self.gpu_name.as_deref().map(kabob)),
        );
        r.add(
            labels::INSTANCE_GPU_MANUFACTURER,
            gpu(self.gpu_manufacturer.as_deref().map(kabob)),
        );
        r.add(
            labels::INSTANCE_GPU_MEMORY,
            gpu(self.gpu_memory_mib.map(|m| m.to_string())),
        );
        r.add(
            labels::INSTANCE_ACCELERATOR_NAME,
            acc(self.gpu_name.as_deref().map(kabob)),
        );
        r.add(
            labels::INSTANCE_ACCELERATOR_MANUFACTURER,
            acc(Some("aws".to_owned())),
        );
        r.add(
            labels::INSTANCE_ACCELERATOR_COUNT,
            acc(Some(self.gpu_count.to_string())),
        );
        r.add(
            labels::INSTANCE_CPU_MANUFACTURER,
            optional(self.cpu_manufacturer.as_deref().map(kabob)),
        );
        r.add(
            labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            optional(self.sustained_clock_mhz.map(|m| m.to_string())),
        );
        r.add(
            labels::INSTANCE_EBS_BANDWIDTH,
            optional(self.ebs_bandwidth_mbps.map(|b| b.to_string())),
        );
        // Every type launches on shared or dedicated hardware, as in
        // Karpenter (instancetype/types.go); the claim's requirements pick
        // (`provisioning::plan::tenancy`), at the same price.
        r.add(
            labels::INSTANCE_TENANCY,
            Requirement::new(
                labels::INSTANCE_TENANCY,
                Operator::In,
                &[
                    labels::TENANCY_DEFAULT.into(),
                    labels::TENANCY_DEDICATED.into(),
                ],
            )
            .unwrap_or_else(|_| Requirement::single(labels::TENANCY_DEFAULT)),
        );
        r.add(labels::WINDOWS_BUILD, Requirement::does_not_exist());
        // No capacity reservations are used: no node carries their labels.
        for key in labels::CAPACITY_RESERVATION {
            r.add(key, Requirement::does_not_exist());
        }
        // Placement groups are not configured: no node carries their labels.
        for key in labels::PLACEMENT_GROUP {
            r.add(key, Requirement::does_not_exist());
        }
        r.add(
            labels::INSTANCE_CAPABILITY_FLEX,
            Requirement::single(flex.to_string()),
        );
        r.add(
            labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            optional(self.encryption_in_transit.map(|b| b.to_string())),
        );
        r.add(
            labels::INSTANCE_NITRO_ENCLAVES_SUPPORTED,
            optional(self.nitro_enclaves.map(|b| b.to_string())),
        );
        r.add(
            labels::INSTANCE_LOCAL_NVME,
            optional((self.local_nvme_gb > 0).then(|| self.local_nvme_gb.to_string())),
        );
        r.add(
            labels::INSTANCE_NETWORK_BANDWIDTH,
            optional(self.network_bandwidth_mbps.map(|b| b.to_string())),
        );
        r
    }

    /// The kubelet configuration for this type: its expressions evaluated
    /// (as Karpenter's resolver does): `maxPods` first, then `kubeReserved`
    /// and `systemReserved`, whose `max_pods` is the resolved count. A
    /// `maxPods` expression that fails, or gives a count outside
    /// 0..=2147483647, is an error (the type cannot be offered); a reserved
    /// expression that fails or is negative is left out, so that resource
    /// keeps its default. Results: cpu in millicores rounded up to 10m,
    /// memory in MiB rounded up to 16 MiB, ephemeral-storage in GiB, pid a
    /// count.
    pub fn resolve_kubelet(
        &self,
        kubelet: &KubeletConfig,
    ) -> Result<ResolvedKubelet, KubeletError> {
        let mut config = kubelet.clone();
        let exprs = std::mem::take(&mut config.expressions);
        let mut out = ResolvedKubelet::default();
        if exprs.is_empty() {
            out.config = config;
            return Ok(out);
        }
        let mut vars = Vars {
            vcpus: i64::from(self.vcpu),
            memory_mib: i64::try_from(self.memory_mib).unwrap_or(i64::MAX),
            default_enis: i64::from(self.max_enis),
            ips_per_eni: i64::from(self.ipv4_per_eni),
            max_pods: self.max_pods(&config),
            instance_type: self.name.clone(),
        };
        if let Some(e) = &exprs.max_pods {
            let why = |source: ExpressionError| KubeletError {
                field: "maxPods",
                expression: e.source().to_owned(),
                instance_type: self.name.clone(),
                source,
            };
            let v = e.eval(&vars).map_err(why)?;
            let count = u32::try_from(v)
                .ok()
                .filter(|c| i32::try_from(*c).is_ok())
                .ok_or_else(|| {
                    why(ExpressionError::Eval(format!(
                        "{v} is not between 0 and {}",
                        i32::MAX
                    )))
                })?;
            config.max_pods = Some(count);
            vars.max_pods = self.max_pods(&config);
        }
        for (exprs, reserved, strings) in [
            (
                &exprs.kube_reserved,
                &mut config.kube_reserved,
                &mut out.kube_reserved,
            ),
            (
                &exprs.system_reserved,
                &mut config.system_reserved,
                &mut out.system_reserved,
            ),
        ] {
            for (key, e) in exprs {
                let Some(v) = e.eval(&vars).ok().filter(|v| *v >= 0) else {
                    continue;
                };
                let round_up =
                    |v: i64, step: i64| (v / step + i64::from(v % step != 0)).saturating_mul(step);
                let text = match key.as_str() {
                    "cpu" => {
                        let m = round_up(v, 10);
                        reserved.cpu_millis = Some(m);
                        format!("{m}m")
                    }
                    "memory" => {
                        let mib = round_up(v, 16);
                        reserved.memory_bytes = Some(mib.saturating_mul(MIB));
                        format!("{mib}Mi")
                    }
                    "ephemeral-storage" => {
                        reserved.ephemeral_bytes = Some(v.saturating_mul(1 << 30));
                        format!("{v}Gi")
                    }
                    _ => v.to_string(),
                };
                strings.insert(key.clone(), text);
            }
        }
        out.config = config;
        Ok(out)
    }

    /// The packer's view of this type with the given offerings.
    pub fn to_instance_type(
        &self,
        offerings: Vec<Offering>,
        kubelet: &KubeletConfig,
    ) -> InstanceType {
        InstanceType::new(
            &self.name,
            self.requirements_for(kubelet),
            offerings,
            self.capacity(kubelet),
            self.overhead(kubelet),
        )
    }
}

/// Kube-reserved CPU in millicores for a number of vCPUs.
pub fn kube_reserved_cpu_millis(vcpu: u32) -> i64 {
    // (first core, share in 1/10000 of a core) bands.
    let mut reserved_hundredths_of_milli = 0i64; // in 1/100 millicore
    for core in 1..=i64::from(vcpu) {
        reserved_hundredths_of_milli += match core {
            1 => 6000,    // 6 % of 1000m = 60m
            2 => 1000,    // 1 % = 10m
            3 | 4 => 500, // 0.5 % = 5m
            _ => 250,     // 0.25 % = 2.5m
        };
    }
    (reserved_hundredths_of_milli + 99) / 100
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, vcpu: u32, mib: u64, arch: &str, enis: u32, ips: u32) -> InstanceTypeInfo {
        InstanceTypeInfo {
            name: name.into(),
            vcpu,
            memory_mib: mib,
            arch: arch.into(),
            hypervisor: Some("nitro".into()),
            bare_metal: false,
            gpu_count: 0,
            gpu_name: None,
            gpu_manufacturer: None,
            local_nvme_gb: 0,
            max_enis: enis,
            ipv4_per_eni: ips,
            network_bandwidth_mbps: None,
            ..Default::default()
        }
    }

    /// Ephemeral storage: the volume (or RAID0 instance store) less 1 GiB
    /// kube-reserved and the 10 % nodefs eviction threshold; not modelled
    /// (0, no limit) when no NodeClass says.
    #[test]
    fn ephemeral_storage_is_the_volume_less_reserve_and_eviction() {
        let m5 = info("m5.large", 2, 8192, "amd64", 3, 10);
        let kubelet = KubeletConfig {
            ephemeral_storage: Some(EphemeralStorage::Volume(20 << 30)),
            ..KubeletConfig::default()
        };
        let it = m5.to_instance_type(vec![], &kubelet);
        assert_eq!(it.capacity.ephemeral_bytes, 20 << 30);
        assert_eq!(
            it.allocatable().ephemeral_bytes,
            (20 << 30) - (1 << 30) - (2 << 30)
        );
        let nvme = InstanceTypeInfo {
            local_nvme_gb: 7600,
            ..info("m6idn.32xlarge", 128, 524_288, "amd64", 16, 50)
        };
        let raid = KubeletConfig {
            ephemeral_storage: Some(EphemeralStorage::InstanceStore(20 << 30)),
            ..KubeletConfig::default()
        };
        let it = nvme.to_instance_type(vec![], &raid);
        assert_eq!(it.capacity.ephemeral_bytes, 7_600_000_000_000);
        let unmodelled = m5.to_instance_type(vec![], &KubeletConfig::default());
        assert_eq!(unmodelled.capacity.ephemeral_bytes, 0);
        assert_eq!(unmodelled.allocatable().ephemeral_bytes, 0);
    }

    #[test]
    fn network_and_enclave_facts_become_labels() {
        let flex = InstanceTypeInfo {
            encryption_in_transit: Some(true),
            nitro_enclaves: Some(false),
            ..info("c7i-flex.large", 2, 4096, "amd64", 3, 10)
        };
        let r = flex.requirements();
        let has =
            |r: &Requirements, key: &str, v: &str| r.allows(key, Some(v)) && !r.allows(key, None);
        assert!(has(&r, labels::INSTANCE_CAPABILITY_FLEX, "true"));
        assert!(has(
            &r,
            labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            "true"
        ));
        assert!(has(&r, labels::INSTANCE_NITRO_ENCLAVES_SUPPORTED, "false"));
        assert!(has(&r, labels::INSTANCE_FAMILY, "c7i-flex"));
        for key in labels::PLACEMENT_GROUP {
            assert!(r.allows(key, None) && !r.allows(key, Some("pg-1")), "{key}");
        }
        let plain = info("m5.large", 2, 8192, "amd64", 3, 10).requirements();
        assert!(has(&plain, labels::INSTANCE_CAPABILITY_FLEX, "false"));
        assert!(
            plain.allows(labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, None)
                && !plain.allows(
                    labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
                    Some("false")
                ),
            "an unknown fact is no label"
        );
    }

    #[test]
    fn kube_reserved_cpu_bands() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }

    #[test]
    fn m5_large_allocatable() {
        // m5.large: 2 vCPU, 8 GiB, 3 ENIs × 10 IPv4 → 29 pods.
        let it = info("m5.large", 2, 8192, "amd64", 3, 10);
        let kc = KubeletConfig::default();
        assert_eq!(it.max_pods(&kc), 29);
        let t = it.to_instance_type(vec![Offering::new("us-east-1a", "on-demand", 0.096)], &kc);
        assert_eq!(t.capacity.memory_bytes, (8192 - 615) * MIB);
        assert_eq!(t.allocatable().cpu_millis, 1930);
        assert_eq!(
            t.allocatable().memory_bytes,
            (8192 - 615 - (11 * 29 + 255) - 100) * MIB
        );
        assert_eq!(t.allocatable().pods, 29);
        assert!(
            t.requirements
                .get(labels::INSTANCE_FAMILY)
                .is_some_and(|r| r.has("m5"))
        );
        assert!(
            t.requirements
                .get(labels::INSTANCE_GENERATION)
                .is_some_and(|r| r.has("5"))
        );
        assert!(
            t.requirements
                .get(labels::ZONE)
                .is_some_and(|r| r.has("us-east-1a"))
        );
    }

    #[test]
    fn reserved_and_eviction_settings_change_allocatable() {
        let it = info("m5.large", 2, 8192, "amd64", 3, 10);
        let capacity = (8192 - 615) * MIB;
        // systemReserved adds to the default kube-reserved.
        let kc = KubeletConfig {
            system_reserved: Reserved {
                cpu_millis: Some(300),
                memory_bytes: Some(200 * MIB),
                ephemeral_bytes: None,
            },
            ..Default::default()
        };
        let t = it.to_instance_type(vec![], &kc);
        assert_eq!(t.allocatable().cpu_millis, 2000 - 70 - 300);
        assert_eq!(
            t.allocatable().memory_bytes,
            capacity - (11 * 29 + 255) * MIB - 200 * MIB - 100 * MIB
        );
        // kubeReserved replaces the default per resource; evictionHard replaces 100Mi.
        let kc = KubeletConfig {
            kube_reserved: Reserved {
                cpu_millis: Some(500),
                memory_bytes: None,
                ephemeral_bytes: None,
            },
            eviction_hard_memory: Some(Threshold::Basis(1000)),
            ..Default::default()
        };
        let t = it.to_instance_type(vec![], &kc);
        assert_eq!(t.allocatable().cpu_millis, 1500);
        assert_eq!(
            t.allocatable().memory_bytes,
            capacity - (11 * 29 + 255) * MIB - (capacity + 9) / 10,
            "a share of memory is rounded up"
        );
        // Only the hard threshold counts; 100% disables it.
        let kc = KubeletConfig {
            eviction_soft_memory: Some(Threshold::Bytes(500 * MIB)),
            ..Default::default()
        };
        assert_eq!(it.overhead(&kc).memory_bytes, (11 * 29 + 255 + 100) * MIB);
        let kc = KubeletConfig {
            eviction_hard_memory: Some(Threshold::Basis(10_000)),
            eviction_soft_memory: Some(Threshold::Basis(1000)),
            ..Default::default()
        };
        assert_eq!(it.overhead(&kc).memory_bytes, (11 * 29 + 255) * MIB);
        // A share is rounded up.
        assert_eq!(Threshold::Basis(500).of(1001), 51);
        // maxPods does not change the default kube-reserved memory.
        let kc = KubeletConfig {
            max_pods: Some(10),
            ..Default::default()
        };
        assert_eq!(it.max_pods(&kc), 10);
        assert_eq!(it.overhead(&kc).memory_bytes, (11 * 29 + 255 + 100) * MIB);
    }

    #[test]
    fn arm64_reserve_and_kubelet_overrides() {
        let it = info("r6gd.xlarge", 4, 32768, "arm64", 4, 15);
        let kc = KubeletConfig::default();
        assert_eq!(it.capacity(&kc).memory_bytes, (32768 - 64 - 2458) * MIB);
        assert_eq!(it.max_pods(&kc), 58);
        assert_eq!(
            it.max_pods(&KubeletConfig {
                max_pods: Some(20),
                ..Default::default()
            }),
            20
        );
        assert_eq!(
            it.max_pods(&KubeletConfig {
                pods_per_core: Some(4),
                ..Default::default()
            }),
            16
        );
        assert_eq!(
            info("x.big", 2, 1024, "amd64", 0, 0).max_pods(&kc),
            DEFAULT_MAX_PODS
        );
        assert_eq!(
            it.name_parts(),
            ("r".into(), "r6gd".into(), Some(6), "xlarge".into())
        );
    }
    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Describe "InstanceTypeProvider" / Context "Overhead" / "Eviction
    // Thresholds": the memory eviction threshold in the overhead is the
    // hard one (an amount or a share), never the soft one, on every AMI
    // family. Karpenter's fake type is translated onto m5.large; its VM
    // overhead (set to 0 there) does not change the threshold.
    #[test]
    fn eviction_threshold_is_the_hard_one_whatever_the_soft_one_says() {
        let it = info("m5.large", 2, 8192, "amd64", 3, 10);
        let reserved = KubeletConfig {
            system_reserved: Reserved {
                cpu_millis: None,
                memory_bytes: Some(20 << 30),
                ephemeral_bytes: None,
            },
            kube_reserved: Reserved {
                cpu_millis: None,
                memory_bytes: Some(10 << 30),
                ephemeral_bytes: None,
            },
            ..Default::default()
        };
        let eviction = |kc: &KubeletConfig| it.overhead(kc).memory_bytes - (30 << 30);
        // "should override eviction threshold when specified as a quantity"
        let kc = KubeletConfig {
            eviction_hard_memory: Some(Threshold::Bytes(500 * MIB)),
            ..reserved.clone()
        };
        assert_eq!(eviction(&kc), 500 * MIB);
        // "should use default threshold when evictionSoft is 100% (ignored)"
        let kc = KubeletConfig {
            eviction_soft_memory: Some(Threshold::Basis(10_000)),
            ..reserved.clone()
        };
        assert_eq!(eviction(&kc), 100 * MIB);
        // "should ignore eviction threshold when using Bottlerocket AMI"
        // (the soft one: 1Gi hard and 10Gi soft give 1Gi).
        let kc = KubeletConfig {
            eviction_hard_memory: Some(Threshold::Bytes(1 << 30)),
            eviction_soft_memory: Some(Threshold::Bytes(10 << 30)),
            bottlerocket: true,
            ..reserved.clone()
        };
        assert_eq!(eviction(&kc), 1 << 30);
        // "should use only evictionHard value with mixed percentage/value types"
        let kc = KubeletConfig {
            eviction_hard_memory: Some(Threshold::Bytes(1 << 30)),
            eviction_soft_memory: Some(Threshold::Basis(1000)),
            ..reserved.clone()
        };
        assert_eq!(eviction(&kc), 1 << 30);
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Context "Overhead" / DescribeTable "should set max-pods to
    // user-defined value if specified", entries al2, al2023, bottlerocket
    // (latest), on t3.large as Karpenter's (3 ENIs × 12 IPv4: 35 pods):
    // maxPods 10 gives 10 pods on each; kube-reserved memory stays
    // 11 × 35 + 255 = 640 MiB on AL2 and AL2023 and follows the 10 pods on
    // Bottlerocket (11 × 10 + 255 = 365 MiB). The Windows entries:
    // `windows_max_pods_is_the_users_or_110_and_sizes_kube_reserved`; the
    // Custom one is not implemented (Custom is refused at launch).
    #[test]
    fn user_max_pods_sizes_kube_reserved_on_bottlerocket_only() {
        let t3 = info("t3.large", 2, 8192, "amd64", 3, 12);
        assert_eq!(t3.max_pods(&KubeletConfig::default()), 35);
        for (family, bottlerocket, kube_reserved_mib) in [
            ("al2", false, 640),
            ("al2023", false, 640),
            ("bottlerocket", true, 365),
        ] {
            let kc = KubeletConfig {
                max_pods: Some(10),
                bottlerocket,
                ..Default::default()
            };
            assert_eq!(t3.capacity(&kc).pods, 10, "{family}");
            assert_eq!(
                t3.overhead(&kc).memory_bytes,
                (kube_reserved_mib + 100) * MIB,
                "{family}: kube-reserved memory and the 100Mi eviction threshold"
            );
        }
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Context "Overhead" / It "should ignore pods-per-core when using
    // Bottlerocket AMI": podsPerCore 1 leaves every type at its ENI-limited
    // pods on Bottlerocket (and limits them elsewhere). nodewright also
    // refuses podsPerCore in a Bottlerocket EC2NodeClass (`config::nodeclass`):
    // this is the math for a NodePool's own setting.
    #[test]
    fn pods_per_core_is_ignored_on_bottlerocket() {
        for it in [
            info("t3.large", 2, 8192, "amd64", 3, 12),
            info("m5.4xlarge", 16, 65536, "amd64", 8, 30),
            info("r6gd.xlarge", 4, 32768, "arm64", 4, 15),
        ] {
            let limited = it.max_pods(&KubeletConfig::default());
            let ppc = |bottlerocket| KubeletConfig {
                pods_per_core: Some(1),
                bottlerocket,
                ..Default::default()
            };
            assert_eq!(it.capacity(&ppc(true)).pods, limited, "{}", it.name);
            assert_eq!(
                it.capacity(&ppc(false)).pods,
                i64::from(it.vcpu),
                "{}",
                it.name
            );
        }
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Context "Overhead" / It "should take limited pod density to be the
    // default pods number when pods-per-core is 0": podsPerCore 0 is unset,
    // t3.large keeps its 35 ENI-limited pods and a large type its own
    // (Karpenter's fake m6idn.32xlarge has 394; the simulator's, from
    // DescribeInstanceTypes, 16 ENIs × 50 IPv4: 786).
    #[test]
    fn pods_per_core_zero_leaves_the_eni_limited_pods() {
        let kc = KubeletConfig {
            pods_per_core: Some(0),
            ..Default::default()
        };
        assert_eq!(
            info("t3.large", 2, 8192, "amd64", 3, 12).capacity(&kc).pods,
            35
        );
        assert_eq!(
            info("m6idn.32xlarge", 128, 524_288, "amd64", 16, 50)
                .capacity(&kc)
                .pods,
            786
        );
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Context "Overhead" / It "shouldn't report more resources than are
    // actually available on instances": the allocatable we plan with is at
    // most what a kubelet reported on a real node of each type (figures
    // Karpenter recorded by launching them), here with the simulator's
    // catalog facts of those types and the default kubelet settings.
    #[test]
    fn allocatable_is_at_most_what_the_kubelet_reports() {
        let catalog = crate::sim::catalog::catalog("us-west-2").expect("us-west-2");
        let kc = KubeletConfig::default();
        for (name, memory_kib, cpu_millis) in [
            ("t4g.small", 1_408_312i64, 1930),
            ("t4g.medium", 3_377_496, 1930),
            ("t4g.xlarge", 15_136_012, 3920),
            ("m5.large", 7_220_184, 1930),
        ] {
            let it = catalog
                .instance_types
                .iter()
                .find(|i| i.name == name)
                .unwrap_or_else(|| panic!("{name} in the catalog"))
                .to_instance_type(vec![], &kc);
            let a = it.allocatable();
            assert!(a.memory_bytes > 0 && a.cpu_millis > 0, "{name}");
            assert!(
                a.memory_bytes <= memory_kib * 1024,
                "{name}: memory {} over the kubelet's {}",
                a.memory_bytes,
                memory_kib * 1024
            );
            assert!(
                a.cpu_millis <= cpu_millis,
                "{name}: cpu {}m over the kubelet's {cpu_millis}m",
                a.cpu_millis
            );
        }
    }
    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Describe "InstanceTypeProvider" / It "should not set pods to 110 if
    // using ENI-based pod density": on the Linux AMI families every type
    // whose ENI facts are known gets its ENI-limited pods, never the 110
    // default, over the simulator's whole catalog. (110 is what Windows
    // nodes get: `windows_gives_every_type_110_pods`.)
    #[test]
    fn eni_facts_give_eni_limited_pods_never_the_default() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("us-east-1");
        let kc = KubeletConfig::default();
        let mut counted = 0;
        for info in &catalog.instance_types {
            if info.max_enis > 0 && info.ipv4_per_eni > 1 {
                counted += 1;
                let pods = info.capacity(&kc).pods;
                assert_eq!(
                    pods,
                    i64::from(info.max_enis) * (i64::from(info.ipv4_per_eni) - 1) + 2,
                    "{}",
                    info.name
                );
                assert_ne!(pods, DEFAULT_MAX_PODS, "{}", info.name);
            }
        }
        assert!(counted > 500, "{counted} types with ENI facts");
    }
    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Context "Overhead" / DescribeTable "should reserve ENIs when
    // aws.reservedENIs is set and use it in max-pods calculation", entries
    // al2, al2023, bottlerocket (latest), and It "should reserve ENIs when
    // aws.reservedENIs is set and not go below 0 ENIs in max-pods
    // calculation". t3.large (3 ENIs × 12 IPv4): one reserved ENI leaves
    // 2 × 11 + 2 = 24 pods; kube-reserved memory stays 11 × 35 + 255 =
    // 640 MiB on AL2 and AL2023 and follows the 24 pods on Bottlerocket
    // (519 MiB). A million reserved ENIs leave none for pods: 0 pods, not 2.
    #[test]
    fn reserved_enis_come_off_the_max_pods() {
        let t3 = info("t3.large", 2, 8192, "amd64", 3, 12);
        for (family, bottlerocket, kube_reserved_mib) in [
            ("al2", false, 640),
            ("al2023", false, 640),
            ("bottlerocket", true, 519),
        ] {
            let kc = KubeletConfig {
                reserved_enis: 1,
                bottlerocket,
                ..Default::default()
            };
            assert_eq!(t3.capacity(&kc).pods, 24, "{family}");
            assert_eq!(
                t3.overhead(&kc).memory_bytes,
                (kube_reserved_mib + 100) * MIB,
                "{family}"
            );
        }
        let kc = KubeletConfig {
            reserved_enis: 1_000_000,
            ..Default::default()
        };
        assert_eq!(t3.capacity(&kc).pods, 0);
    }

    fn windows(family: crate::config::AmiFamily) -> KubeletConfig {
        KubeletConfig {
            windows_build: family.windows_build().map(str::to_owned),
            ..Default::default()
        }
    }

    const WINDOWS: [crate::config::AmiFamily; 3] = [
        crate::config::AmiFamily::Windows2019,
        crate::config::AmiFamily::Windows2022,
        crate::config::AmiFamily::Windows2025,
    ];

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Context "Overhead" / DescribeTable "should set max-pods to
    // user-defined value if specified", entries windows2019, windows2022,
    // windows2025 (latest), and DescribeTable "should reserve ENIs when
    // aws.reservedENIs is set and use it in max-pods calculation", the same
    // three entries, on t3.large (3 ENIs × 12 IPv4). Windows has no
    // ENI-limited pod density: maxPods 10 gives 10 pods and kube-reserved
    // memory 11 × 10 + 255 = 365 MiB; one reserved ENI changes nothing,
    // 110 pods and 11 × 110 + 255 = 1465 MiB.
    #[test]
    fn windows_max_pods_is_the_users_or_110_and_sizes_kube_reserved() {
        let t3 = info("t3.large", 2, 8192, "amd64", 3, 12);
        for family in WINDOWS {
            let kc = KubeletConfig {
                max_pods: Some(10),
                ..windows(family)
            };
            assert_eq!(t3.capacity(&kc).pods, 10, "{family}");
            assert_eq!(
                t3.overhead(&kc).memory_bytes,
                (365 + 100) * MIB,
                "{family}: kube-reserved memory and the 100Mi eviction threshold"
            );
            let kc = KubeletConfig {
                reserved_enis: 1,
                ..windows(family)
            };
            assert_eq!(t3.capacity(&kc).pods, 110, "{family}");
            assert_eq!(
                t3.overhead(&kc).memory_bytes,
                (1465 + 100) * MIB,
                "{family}"
            );
            // podsPerCore still applies on Windows (as Karpenter's flags say).
            let kc = KubeletConfig {
                pods_per_core: Some(4),
                ..windows(family)
            };
            assert_eq!(t3.capacity(&kc).pods, 8, "{family}");
        }
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Describe "InstanceTypeProvider" / It "should set pods to 110 if AMI
    // Family doesn't support" (ENI-limited pod density): under Windows2022
    // (Karpenter's Windows class) every amd64 type of the simulator's
    // catalog gets 110 pods, whatever its ENIs; the same types on AL2023
    // get their ENI-limited count.
    #[test]
    fn windows_gives_every_type_110_pods() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("us-east-1");
        let kc = windows(crate::config::AmiFamily::Windows2022);
        let mut counted = 0;
        for info in catalog.instance_types.iter().filter(|i| i.arch == "amd64") {
            counted += 1;
            assert_eq!(info.capacity(&kc).pods, DEFAULT_MAX_PODS, "{}", info.name);
        }
        assert!(counted > 400, "{counted} amd64 types");
        let m5 = catalog
            .instance_types
            .iter()
            .find(|i| i.name == "m5.large")
            .expect("m5.large");
        assert_eq!(m5.capacity(&KubeletConfig::default()).pods, 29);
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Describe "InstanceTypeProvider" / It "should not launch instance type
    // for vpc.amazonaws.com/PrivateIPv4Address if VPC resource controller
    // doesn't advertise it". Karpenter reads the per-ENI IPv4 count from
    // its VPC limits table and advertises none for a type missing there;
    // nodewright reads the same fact from DescribeInstanceTypes, and a type
    // whose ENI facts are unknown advertises none: a pod requesting one
    // address does not fit it. A known type on Windows advertises its IPv4
    // per ENI less one (t3.large: 11); no Linux node advertises any, nor an
    // arm64 type under a Windows class (no Windows AMI runs there: no OS).
    #[test]
    fn windows_nodes_advertise_private_ipv4_addresses_from_the_eni_facts() {
        let kc = windows(crate::config::AmiFamily::Windows2022);
        let request = {
            let mut r = Resources::new(0, 0, 1);
            r.set_extended(PRIVATE_IPV4_ADDRESS, 1);
            r
        };
        let t3 = info("t3.large", 2, 8192, "amd64", 3, 12).to_instance_type(vec![], &kc);
        assert_eq!(t3.capacity.extended(PRIVATE_IPV4_ADDRESS), 11);
        assert!(request.fits_in(t3.allocatable()));
        let unknown = info("test", 2, 8192, "amd64", 0, 0).to_instance_type(vec![], &kc);
        assert_eq!(unknown.capacity.extended(PRIVATE_IPV4_ADDRESS), 0);
        assert!(!request.fits_in(unknown.allocatable()));
        let linux = info("t3.large", 2, 8192, "amd64", 3, 12)
            .to_instance_type(vec![], &KubeletConfig::default());
        assert_eq!(linux.capacity.extended(PRIVATE_IPV4_ADDRESS), 0);
        // The labels: windows and its build on amd64; no OS on arm64.
        let r = t3.requirements;
        assert_eq!(
            r.get(labels::OS).and_then(Requirement::single_value),
            Some("windows")
        );
        assert_eq!(
            r.get(labels::WINDOWS_BUILD)
                .and_then(Requirement::single_value),
            Some("10.0.20348")
        );
        let graviton = info("m6g.large", 2, 8192, "arm64", 3, 10);
        assert_eq!(graviton.capacity(&kc).extended(PRIVATE_IPV4_ADDRESS), 0);
        let r = graviton.requirements_for(&kc);
        assert!(r.allows(labels::OS, None) && !r.allows(labels::OS, Some("windows")));
        let linux = info("m6g.large", 2, 8192, "arm64", 3, 10).requirements();
        assert!(linux.allows(labels::OS, Some("linux")));
        assert!(linux.allows(labels::WINDOWS_BUILD, None));
    }

    // Karpenter's AWS provider, pkg/providers/instancetype/suite_test.go,
    // Describe "InstanceTypeProvider" / It "should launch
    // vpc.amazonaws.com/pod-eni on a compatible instance type" and It
    // "should not launch AWS Pod ENI on a t3" (the catalog side; the
    // scenarios launch): a trunking-compatible type advertises its branch
    // ENIs (m5.large 9, c5.4xlarge 54, as the VPC resource controller's
    // limits say), a t3 none, and so does every type of the simulator's
    // catalog that cannot trunk; the table is read, not empty.
    #[test]
    fn trunking_types_advertise_their_branch_enis_as_pod_eni() {
        let kc = KubeletConfig::default();
        let m5 = info("m5.large", 2, 8192, "amd64", 3, 10);
        assert_eq!(m5.capacity(&kc).extended(POD_ENI), 9);
        assert_eq!(trunk_branch_enis("c5.4xlarge"), 54);
        let t3 = info("t3.large", 2, 8192, "amd64", 3, 12);
        assert_eq!(t3.capacity(&kc).extended(POD_ENI), 0);
        assert_eq!(trunk_branch_enis("no-such.type"), 0);
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("us-east-1");
        let trunking = catalog
            .instance_types
            .iter()
            .filter(|i| i.capacity(&kc).extended(POD_ENI) > 0)
            .count();
        assert!(trunking > 300, "{trunking} trunking types");
        assert!(
            catalog
                .instance_types
                .iter()
                .filter(|i| i.name.starts_with("t3."))
                .all(|i| i.capacity(&kc).extended(POD_ENI) == 0)
        );
    }
}
