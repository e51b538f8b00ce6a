//! W2: realistic pod mixes on a real catalog (the simulator's embedded
//! regions, their published on-demand prices and the spot model), where
//! per-node overheads make large nodes cheaper per usable core and families
//! differ in CPU:memory ratio — the case W1's linear prices cannot show.
//!
//! Mixes (pods in equal parts, in this order, named `w2-<index>`):
//! - `shapes`: 3.5 CPU/2 GiB, 0.5 CPU/14 GiB and 0.25 CPU/256 MiB — CPU-heavy,
//!   memory-heavy and small pods that pack best together.
//! - `web`: typical web and API pods, 100m/128 Mi to 2 CPU/8 GiB, drawn.
//! - `arch`: `web` pods, a third arm64-only, a third amd64-only.
//! - `zonal`: `web` pods, a quarter pinned to one zone each, a quarter in
//!   zone spreads and a quarter in hostname spreads (maxSkew 1, per app of
//!   ten pods), a quarter free.
//! - `mixed`: all of the above.
//!
//! Every node also runs two DaemonSets (a node agent, 100m/128 Mi, and a log
//! shipper, 200m/256 Mi). The NodePool allows spot and on-demand, or only
//! on-demand; its requirements are either a walkthrough's (c/m/r, 4–32
//! vCPU, nitro, generation > 2) or only linux on either architecture.
#![allow(
    clippy::expect_used,
    reason = "the benchmark's objects are built from constants: a failure is a bug in this file"
)]

use serde_json::json;

use crate::config::{NodePool, NodePoolSpec};
use crate::model::CloudCatalog;
use crate::scheduling::labels;
use k8s_openapi::api::core::v1::Pod;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    Shapes,
    Web,
    Arch,
    Zonal,
    Mixed,
}

impl Mix {
    pub const ALL: [Mix; 5] = [Mix::Shapes, Mix::Web, Mix::Arch, Mix::Zonal, Mix::Mixed];

    /// Whether pods of this mix carry zone pins or spreads (where the LP
    /// bound, which sees no zones, is loose).
    pub fn has_topology(self) -> bool {
        matches!(self, Mix::Zonal | Mix::Mixed)
    }

    pub fn name(self) -> &'static str {
        match self {
            Mix::Shapes => "shapes",
            Mix::Web => "web",
            Mix::Arch => "arch",
            Mix::Zonal => "zonal",
            Mix::Mixed => "mixed",
        }
    }
}

impl std::str::FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mix::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown W2 mix {s:?} (shapes, web, arch, zonal, mixed)"))
    }
}

/// The NodePool's capacity types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    SpotAndOnDemand,
    OnDemand,
}

/// The NodePool's instance requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolRequirements {
    /// c/m/r, 4–32 vCPU, nitro, generation > 2.
    Walkthrough,
    /// Linux, amd64 or arm64: the whole catalog.
    Open,
}

/// The one NodePool the benchmark plans for.
pub fn pool(capacity: Capacity, requirements: PoolRequirements) -> NodePool {
    let capacity_types: &[&str] = match capacity {
        Capacity::SpotAndOnDemand => &["spot", "on-demand"],
        Capacity::OnDemand => &["on-demand"],
    };
    let mut reqs = vec![
        json!({"key": labels::CAPACITY_TYPE, "operator": "In", "values": capacity_types}),
        json!({"key": labels::ARCH, "operator": "In", "values": ["amd64", "arm64"]}),
        json!({"key": labels::OS, "operator": "In", "values": ["linux"]}),
    ];
    if requirements == PoolRequirements::Walkthrough {
        reqs.extend([
            json!({"key": labels::INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m", "r"]}),
            json!({"key": labels::INSTANCE_CPU, "operator": "In", "values": ["4", "8", "16", "32"]}),
            json!({"key": labels::INSTANCE_HYPERVISOR, "operator": "In", "values": ["nitro"]}),
            json!({"key": labels::INSTANCE_GENERATION, "operator": "Gt", "values": ["2"]}),
        ]);
    }
    let spec: NodePoolSpec = serde_json::from_value(json!({"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": reqs}}}))
    .expect("the benchmark's NodePool spec is valid");
    NodePool::from_spec("default", &spec).expect("the benchmark's NodePool is valid")
}

/// The two DaemonSets' pods (as each node runs them).
pub fn daemon_pods() -> Vec<Pod> {
    [("node-agent", "100m", "128Mi"), ("log-shipper", "200m", "256Mi")]
        .into_iter()
        .map(|(name, cpu, memory)| {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "kube-system", "labels": {"app": name}},
                "spec": {"tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": name, "image": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}))
            .expect("daemon pod")
        })
        .collect()
}

/// The zones in which the catalog offers some type the pool allows, sorted:
/// where a zone-pinned pod can run.
pub fn zones(pool: &NodePool, catalog: &CloudCatalog) -> Vec<String> {
    let allowed: std::collections::HashSet<&str> = catalog
        .instance_types
        .iter()
        .filter(|t| t.requirements().intersects(&pool.requirements))
        .map(|t| t.name.as_str())
        .collect();
    let mut zones: Vec<String> = catalog
        .offerings
        .iter()
        .filter(|o| {
            allowed.contains(o.instance_type.as_str())
                && pool
                    .requirements
                    .allows(labels::CAPACITY_TYPE, Some(&o.capacity_type))
        })
        .map(|o| o.zone.clone())
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

/// `n` pending pods of the mix, from a seeded RNG; zone-pinned pods draw
/// from `zones` (see [`zones`]).
pub fn pods(n: usize, mix: Mix, seed: u64, zones: &[String]) -> Vec<Pod> {
    pods_lazily(n, mix, seed, zones).collect()
}

/// The same pods as [`pods`], made one at a time as they are taken, so a
/// reader may hold a page of them rather than the whole list.
pub fn pods_lazily(
    n: usize,
    mix: Mix,
    seed: u64,
    zones: &[String],
) -> impl Iterator<Item = Pod> + use<> {
    let mut g = Generator {
        rng: ChaCha8Rng::seed_from_u64(seed),
        next: 0,
        zones: zones.to_vec(),
    };
    let parts: Vec<Part> = match mix {
        Mix::Shapes => vec![Part::CpuHeavy, Part::MemoryHeavy, Part::Small],
        Mix::Web => vec![Part::Web],
        Mix::Arch => vec![Part::Arm64, Part::Amd64, Part::Web],
        Mix::Zonal => vec![
            Part::ZonePinned,
            Part::ZoneSpread,
            Part::HostSpread,
            Part::Web,
        ],
        Mix::Mixed => vec![
            Part::CpuHeavy,
            Part::MemoryHeavy,
            Part::Small,
            Part::Web,
            Part::Arm64,
            Part::Amd64,
            Part::ZonePinned,
            Part::ZoneSpread,
            Part::HostSpread,
        ],
    };
    (0..n).map(move |i| g.pod(parts[i * parts.len() / n.max(1)], i))
}

#[derive(Debug, Clone, Copy)]
enum Part {
    CpuHeavy,
    MemoryHeavy,
    Small,
    Web,
    Arm64,
    Amd64,
    ZonePinned,
    ZoneSpread,
    HostSpread,
}

/// Typical web and API requests, drawn uniformly.
const WEB: [(&str, &str); 8] = [
    ("100m", "128Mi"),
    ("250m", "256Mi"),
    ("250m", "512Mi"),
    ("500m", "512Mi"),
    ("500m", "1Gi"),
    ("1", "2Gi"),
    ("1", "4Gi"),
    ("2", "8Gi"),
];

struct Generator {
    rng: ChaCha8Rng,
    next: usize,
    zones: Vec<String>,
}

impl Generator {
    fn pod(&mut self, part: Part, index: usize) -> Pod {
        let (cpu, memory) = match part {
            Part::CpuHeavy => ("3500m", "2Gi"),
            Part::MemoryHeavy => ("500m", "14Gi"),
            Part::Small => ("250m", "256Mi"),
            _ => WEB[self.rng.random_range(0..WEB.len())],
        };
        // Apps of ten pods, so spreads count peers.
        let app = format!("app-{}", index / 10);
        let mut spec = json!({"containers": [{"name": "app", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
        let spread = |key: &str| json!([{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]);
        match part {
            Part::Arm64 => spec["nodeSelector"] = json!({labels::ARCH: "arm64"}),
            Part::Amd64 => spec["nodeSelector"] = json!({labels::ARCH: "amd64"}),
            Part::ZonePinned => {
                let zone = &self.zones[self.rng.random_range(0..self.zones.len())];
                spec["nodeSelector"] = json!({labels::ZONE: zone});
            }
            Part::ZoneSpread => spec["topologySpreadConstraints"] = spread(labels::ZONE),
            Part::HostSpread => spec["topologySpreadConstraints"] = spread(labels::HOSTNAME),
            _ => {}
        }
        let name = format!("w2-{}", self.next);
        self.next += 1;
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": app}},
            "spec": spec,
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}))
        .expect("W2 pod")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::SchedPod;

    #[test]
    fn mixes_are_seeded_and_in_equal_parts() {
        let catalog = crate::sim::catalog::catalog("us-east-1").expect("catalog");
        let walkthrough = zones(
            &pool(Capacity::SpotAndOnDemand, PoolRequirements::Walkthrough),
            &catalog,
        );
        // us-east-1e offers none of the walkthrough's types.
        assert!(
            !walkthrough.is_empty() && !walkthrough.iter().any(|z| z == "us-east-1e"),
            "{walkthrough:?}"
        );
        let a = pods(90, Mix::Mixed, 7, &walkthrough);
        let b = pods(90, Mix::Mixed, 7, &walkthrough);
        assert_eq!(
            serde_json::to_string(&a).ok(),
            serde_json::to_string(&b).ok()
        );
        let sched: Vec<SchedPod> = a
            .iter()
            .map(|p| SchedPod::from_pod(p).expect("valid"))
            .collect();
        let arm = sched
            .iter()
            .filter(|p| {
                p.node_selector
                    .get(labels::ARCH)
                    .and_then(|r| r.single_value())
                    == Some("arm64")
            })
            .count();
        let pinned = sched
            .iter()
            .filter(|p| p.node_selector.contains_key(labels::ZONE))
            .count();
        let spread = sched.iter().filter(|p| !p.spreads.is_empty()).count();
        assert_eq!((arm, pinned, spread), (10, 10, 20));
        assert!(sched.iter().take(10).all(|p| p.requests.cpu_millis == 3500));
        assert!(
            pool(Capacity::OnDemand, PoolRequirements::Walkthrough)
                .requirements
                .allows(labels::INSTANCE_CPU, Some("16"))
        );
        assert!(
            !pool(Capacity::OnDemand, PoolRequirements::Walkthrough)
                .requirements
                .allows(labels::CAPACITY_TYPE, Some("spot"))
        );
    }
}
