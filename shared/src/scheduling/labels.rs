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

/// Deprecated aliases still found in older manifests, mapped to the current key.
pub const ALIASES: [(&str, &str); 4] = [
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
];

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";

/// Keys whose values the cloud provides; a pod may require them even when the
/// NodePool is silent about them.
pub const WELL_KNOWN: [&str; 19] = [
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
];

/// Labels of the `kubernetes.io` domains a NodePool may set or require.
const KUBERNETES_IO_ALLOWED: [&str; 10] = [
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    ZONE,
    REGION,
    ARCH,
    OS,
    "node.kubernetes.io/windows-build",
];

/// The `karpenter.k8s.aws` labels a NodePool may set or require besides
/// the well-known ones ([`WELL_KNOWN`]): instance-type facts the provider
/// labels nodes with that the solver does not reason about.
const KARPENTER_AWS_ALSO_ALLOWED: [&str; 9] = [
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
];

/// Why a NodePool may not set `key` as a template label or requirement,
/// by Karpenter's v1 schema rules: `kubernetes.io/hostname` and
/// `karpenter.sh/nodepool` are the system's; the `kubernetes.io`, `k8s.io`,
/// `karpenter.sh` and `karpenter.k8s.aws` domains (and their subdomains)
/// are reserved except for their well-known labels, `node.kubernetes.io`,
/// `node-restriction.kubernetes.io` and `kops.k8s.io`.
pub fn restriction(key: &str) -> Option<String> {
    if key == HOSTNAME || key == NODEPOOL {
        return Some(format!("label {key:?} is restricted"));
    }
    let (domain, _) = key.split_once('/')?;
    let under = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    let allowed = if under("kubernetes.io") {
        KUBERNETES_IO_ALLOWED.contains(&key)
            || under("node.kubernetes.io")
            || under("node-restriction.kubernetes.io")
    } else if under("k8s.io") {
        under("kops.k8s.io")
    } else if under("karpenter.sh") {
        key == CAPACITY_TYPE
    } else if under("karpenter.k8s.aws") {
        is_well_known(key) || KARPENTER_AWS_ALSO_ALLOWED.contains(&key)
    } else {
        true
    };
    let reserved = [
        "kubernetes.io",
        "k8s.io",
        "karpenter.sh",
        "karpenter.k8s.aws",
    ]
    .into_iter()
    .find(|d| under(d));
    match (allowed, reserved) {
        (false, Some(d)) => Some(format!(
            "label domain {d:?} is restricted ({key:?} is not one of its well-known labels)"
        )),
        _ => None,
    }
}

pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
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

fn edit_distance(a: &str, b: &str) -> usize {
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
            "node-restriction.kubernetes.io/team",
            "kops.k8s.io/instancegroup",
            "karpenter.sh/capacity-type",
            "karpenter.k8s.aws/instance-family",
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
            ("kubernetes.io/team", "\"kubernetes.io\""),
            ("foo.kubernetes.io/x", "\"kubernetes.io\""),
            ("k8s.io/x", "\"k8s.io\""),
            ("sigs.k8s.io/x", "\"k8s.io\""),
            ("karpenter.sh/do-not-disrupt", "\"karpenter.sh\""),
            ("karpenter.k8s.aws/ec2nodeclass", "\"karpenter.k8s.aws\""),
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
