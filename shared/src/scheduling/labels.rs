//! Well-known node label keys and the typo hint for near misses.
//!
//! A well-known key is one whose values come from the instance type or the
//! offering, so a NodePool that does not mention it still allows any value.
//! Any other key must be defined by the NodePool (requirements or labels) for
//! a pod to require it.

pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// The zone's id (`use1-az1`), the same physical zone in every account.
/// Not well-known to the solver: a pod's requirement on it is read as one
/// on the zone it names (`provisioning::plan`), where the catalog knows
/// the zones' ids.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// A Windows node's build; nodewright's nodes are Linux and have none.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
/// The labels of a node launched into a capacity reservation.
pub const CAPACITY_RESERVATION: [&str; 3] = [
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// The labels of a node launched into a placement group.
pub const PLACEMENT_GROUP: [&str; 2] = [
    "karpenter.k8s.aws/placement-group-id",
    "karpenter.k8s.aws/placement-group-partition",
];
/// `true` for the flex types (`c7i-flex`), which trade peak for price.
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// Whether Nitro Enclaves can run on the type (Karpenter's key name).
pub const INSTANCE_NITRO_ENCLAVES_SUPPORTED: &str = "karpenter.k8s.aws/nitro-sandbox";

/// Deprecated aliases still found in older manifests, and the EBS CSI
/// driver's zone key, mapped to the current key (Karpenter normalises them
/// the same way).
pub const ALIASES: [(&str, &str); 6] = [
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("topology.ebs.csi.aws.com/zone", ZONE),
];

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";

/// Keys whose values the cloud provides; a pod may require them even when the
/// NodePool is silent about them.
pub const WELL_KNOWN: [&str; 37] = [
    ARCH,
    OS,
    HOSTNAME,
    INSTANCE_TYPE,
    ZONE,
    REGION,
    CAPACITY_TYPE,
    NODEPOOL,
    INSTANCE_CATEGORY,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_MEMORY,
    INSTANCE_HYPERVISOR,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_NAME,
    INSTANCE_LOCAL_NVME,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_TENANCY,
    CAPACITY_RESERVATION[0],
    CAPACITY_RESERVATION[1],
    CAPACITY_RESERVATION[2],
    WINDOWS_BUILD,
    PLACEMENT_GROUP[0],
    PLACEMENT_GROUP[1],
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    INSTANCE_NITRO_ENCLAVES_SUPPORTED,
];

/// `karpenter.k8s.aws/instance-tenancy`: `default` or `dedicated` instances.
pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
/// Shared hardware, the tenancy a claim gets unless it allows only dedicated.
pub const TENANCY_DEFAULT: &str = "default";
/// Single-tenant hardware (`Placement.Tenancy: dedicated`).
pub const TENANCY_DEDICATED: &str = "dedicated";
/// The capacity type of an on-demand capacity reservation's offering.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";

/// The `karpenter.k8s.aws` labels a NodePool may set or require (Karpenter
/// AWS's well-known labels): instance-type and offering facts nodes are
/// labelled with, whether or not the solver reasons about them.
const KARPENTER_AWS_ALLOWED: [&str; 28] = [
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
    INSTANCE_HYPERVISOR,
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/nitro-sandbox",
    INSTANCE_CATEGORY,
    "karpenter.k8s.aws/instance-capability-flex",
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_LOCAL_NVME,
    INSTANCE_CPU,
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    INSTANCE_MEMORY,
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_GPU_NAME,
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    INSTANCE_GPU_COUNT,
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    INSTANCE_TENANCY,
    "karpenter.k8s.aws/placement-group-id",
    "karpenter.k8s.aws/placement-group-partition",
];

/// Why a NodePool may not set `key` as a template label or requirement,
/// by Karpenter v1.15's rules: `kubernetes.io/hostname` and
/// `karpenter.sh/nodepool` are the system's; the `karpenter.sh` and
/// `karpenter.k8s.aws` domains (and every domain ending in them) are
/// reserved except for their well-known labels. Since Karpenter v1.9 the
/// `kubernetes.io` and `k8s.io` domains are open.
pub fn restriction(key: &str) -> Option<String> {
    if key == HOSTNAME || key == NODEPOOL {
        return Some(format!("label {key:?} is restricted"));
    }
    let (domain, _) = key.split_once('/')?;
    if domain.ends_with("karpenter.sh") && key != CAPACITY_TYPE {
        return Some(format!(
            "label domain \"karpenter.sh\" is restricted ({key:?} is not one of its well-known labels)"
        ));
    }
    if domain.ends_with("karpenter.k8s.aws") && !KARPENTER_AWS_ALLOWED.contains(&key) {
        return Some(format!(
            "label domain \"karpenter.k8s.aws\" is restricted ({key:?} is not one of its well-known labels)"
        ));
    }
    None
}

/// The values a well-known key can take, where they are a known set: a
/// requirement `In` none of them can never be met.
pub fn known_values(key: &str) -> Option<&'static [&'static str]> {
    match key {
        CAPACITY_TYPE => Some(&[
            CAPACITY_TYPE_ON_DEMAND,
            CAPACITY_TYPE_SPOT,
            CAPACITY_TYPE_RESERVED,
        ]),
        INSTANCE_TENANCY => Some(&["default", "dedicated"]),
        _ => None,
    }
}

pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

/// True when a node's value for `key` comes from its instance type, its
/// offering or the system (well-known keys, their deprecated aliases, the
/// provider's other instance facts, the hostname), never from a NodePool
/// requirement turned into a label.
pub fn is_provided_by_cloud(key: &str) -> bool {
    is_well_known(key)
        || KARPENTER_AWS_ALLOWED.contains(&key)
        || ALIASES.iter().any(|(old, _)| *old == key)
        || key.starts_with("karpenter.k8s.aws/")
        || key.starts_with("karpenter.sh/")
        || key.starts_with("topology.k8s.aws/")
}

/// The current name of a key (`beta.kubernetes.io/arch` → `kubernetes.io/arch`).
pub fn normalize(key: &str) -> &str {
    ALIASES
        .iter()
        .find(|(old, _)| *old == key)
        .map(|(_, new)| *new)
        .unwrap_or(key)
}

/// The well-known key that `key` most likely meant, if it looks like a typo of one.
pub fn typo_hint(key: &str) -> Option<&'static str> {
    if is_well_known(key) {
        return None;
    }
    let best = WELL_KNOWN
        .iter()
        .map(|wk| (edit_distance(key, wk), *wk))
        .min_by_key(|(d, _)| *d)?;
    if best.0 <= 3 {
        return Some(best.1);
    }
    // Same name after the prefix ("karpenter.sh/instance-family") or no prefix at all ("zone").
    let name = key.rsplit('/').next().unwrap_or(key);
    WELL_KNOWN
        .iter()
        .copied()
        .find(|wk| wk.rsplit('/').next() == Some(name))
}

pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_domains_allow_only_their_well_known_labels() {
        for ok in [
            "kubernetes.io/arch",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "example.node.kubernetes.io/x",
            "kubernetes.io/team",
            "subdomain.k8s.io/test",
            "kops.k8s.io/instancegroup",
            "karpenter.sh/capacity-type",
            "karpenter.k8s.aws/instance-family",
            "karpenter.k8s.aws/instance-tenancy",
            "topology.k8s.aws/zone-id",
            "team",
            "example.com/team",
            "beta.kubernetes.io/arch",
        ] {
            assert_eq!(restriction(ok), None, "{ok}");
        }
        for (bad, domain) in [
            ("kubernetes.io/hostname", "kubernetes.io/hostname"),
            ("karpenter.sh/nodepool", "karpenter.sh/nodepool"),
            ("karpenter.sh/do-not-disrupt", "\"karpenter.sh\""),
            ("sub.karpenter.sh/x", "\"karpenter.sh\""),
            ("karpenter.k8s.aws/ec2nodeclass", "\"karpenter.k8s.aws\""),
            ("karpenter.k8s.aws/test", "\"karpenter.k8s.aws\""),
        ] {
            let why = restriction(bad).unwrap_or_else(|| panic!("{bad} should be restricted"));
            assert!(why.contains(domain), "{bad}: {why}");
        }
    }

    #[test]
    fn hints_near_misses() {
        assert_eq!(typo_hint("kubernetes.io/archh"), Some(ARCH));
        assert_eq!(typo_hint("topology.kubernetes.io/zon"), Some(ZONE));
        assert_eq!(
            typo_hint("karpenter.sh/instance-family"),
            Some(INSTANCE_FAMILY)
        );
        assert_eq!(typo_hint("karpenter.sh/capacity_type"), Some(CAPACITY_TYPE));
        assert_eq!(typo_hint("team"), None);
        assert_eq!(typo_hint(ZONE), None);
        assert_eq!(normalize("failure-domain.beta.kubernetes.io/zone"), ZONE);
    }
}
