//! W1: Karpenter's scheduling benchmark workload.
//!
//! - Instance type *i* (1…n) has *i* vCPU, 2·*i* GiB memory and 10·*i* pods,
//!   kube-reserved 100m CPU and 10 MiB (Karpenter's fake provider), price
//!   0.1 × vCPU + 0.1 × memory bytes / 10⁹, offered on-demand in
//!   `test-zone-1…3` and spot in `test-zone-1…2` (five offerings, as
//!   Karpenter's fake types have).
//! - Pods request CPU from {100, 250, 500, 1000, 1500}m and memory from
//!   {100, 256, 512, 1024, 2048, 4096}Mi, uniformly.
//! - `karpenter` mix: fifths of generic pods, zone spread (maxSkew 1,
//!   DoNotSchedule, selector `my-label` of 7 values), hostname spread (same),
//!   zone pod affinity to itself (one `my-affinity` value of 7 drawn for both
//!   the pod's label and its selector, as Karpenter draws it since
//!   kubernetes-sigs/karpenter#1938), and hostname anti-affinity all against
//!   each other (`app=nginx`); the remainder generic.
//! - `generic` mix: only generic pods (the cost-quality case).
//! - `preferences` mix (Karpenter's `BenchmarkRespectPreferences` and, solved
//!   with preferences ignored, `BenchmarkIgnorePreferences`): one CPU and
//!   memory draw for every pod; each prefers zone 1 (weight 1), prefers no
//!   peer in its zone (weight 10: unsatisfiable after three pods, so relaxed
//!   first, heaviest first) and no peer on its node (weight 1: satisfiable,
//!   so one pod per node).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PodCondition, PodSpec, PodStatus, PreferredSchedulingTerm,
    ResourceRequirements, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cloud::{InstanceType, Offering};
use crate::resources::{GIB, MIB, Resources};
use crate::scheduling::labels;
use crate::scheduling::requirements::{Requirement, Requirements};

pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
const CPU_CHOICES: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEMORY_CHOICES: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    Karpenter,
    Generic,
    Preferences,
}

impl std::str::FromStr for Mix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "karpenter" => Ok(Mix::Karpenter),
            "generic" => Ok(Mix::Generic),
            "preferences" => Ok(Mix::Preferences),
            other => Err(format!(
                "unknown mix {other:?} (karpenter, generic, preferences)"
            )),
        }
    }
}

/// The synthetic instance types `fake-it-1 … fake-it-n`.
pub fn instance_types(n: usize) -> Vec<InstanceType> {
    (1..=n as i64)
        .map(|i| {
            let memory = 2 * i * GIB;
            let price = 0.1 * i as f64 + 0.1 * memory as f64 / 1e9;
            let on_demand = ZONES
                .iter()
                .map(|z| Offering::new(z, labels::CAPACITY_TYPE_ON_DEMAND, price));
            let spot = ZONES[..2]
                .iter()
                .map(|z| Offering::new(z, labels::CAPACITY_TYPE_SPOT, price));
            let offerings = on_demand.chain(spot).collect();
            let mut reqs = Requirements::new();
            reqs.add(labels::ARCH, Requirement::single("amd64"));
            reqs.add(labels::OS, Requirement::single("linux"));
            reqs.add(labels::INSTANCE_CPU, Requirement::single(i.to_string()));
            InstanceType::new(
                &format!("fake-it-{i}"),
                reqs,
                offerings,
                Resources::new(i * 1000, memory, 10 * i),
                Resources::new(100, 10 * MIB, 0),
            )
        })
        .collect()
}

/// `n` pending pods of the mix, named `w1-<index>`, from a seeded RNG.
pub fn pods(n: usize, mix: Mix, seed: u64) -> Vec<Pod> {
    pods_lazily(n, mix, seed).collect()
}

/// The same pods as [`pods`], made one at a time as they are taken, so a
/// reader may hold a page of them rather than the whole list (as the
/// Kubernetes adapter reads a listing in pages).
pub fn pods_lazily(n: usize, mix: Mix, seed: u64) -> impl Iterator<Item = Pod> {
    let mut g = Generator {
        rng: ChaCha8Rng::seed_from_u64(seed),
        next: 0,
    };
    // The preference pods share one draw, made before any pod.
    let shared_requests = match mix {
        Mix::Preferences => g.requests(),
        Mix::Generic | Mix::Karpenter => (0, 0),
    };
    // Karpenter's mix: fifths of generic, zone spread, hostname spread,
    // zone affinity and anti-affinity pods, in that order; the remainder generic.
    let fifth = n / 5;
    (0..n).map(move |i| match mix {
        Mix::Generic => g.generic(),
        Mix::Preferences => g.preferences(shared_requests),
        Mix::Karpenter => match i.checked_div(fifth).unwrap_or(5) {
            1 => g.spread(labels::ZONE),
            2 => g.spread(labels::HOSTNAME),
            3 => g.zone_affinity(),
            4 => g.anti_affinity(),
            _ => g.generic(),
        },
    })
}

struct Generator {
    rng: ChaCha8Rng,
    next: usize,
}

impl Generator {
    fn label_value(&mut self) -> String {
        LABEL_VALUES[self.rng.random_range(0..LABEL_VALUES.len())].to_owned()
    }

    /// A CPU (millicores) and memory (MiB) draw.
    fn requests(&mut self) -> (i64, i64) {
        let cpu = CPU_CHOICES[self.rng.random_range(0..CPU_CHOICES.len())];
        let mem = MEMORY_CHOICES[self.rng.random_range(0..MEMORY_CHOICES.len())];
        (cpu, mem)
    }

    fn pod(
        &mut self,
        labels: BTreeMap<String, String>,
        affinity: Option<Affinity>,
        spread: Vec<TopologySpreadConstraint>,
    ) -> Pod {
        let requests = self.requests();
        self.pod_with(requests, labels, affinity, spread)
    }

    fn pod_with(
        &mut self,
        (cpu, mem): (i64, i64),
        labels: BTreeMap<String, String>,
        affinity: Option<Affinity>,
        spread: Vec<TopologySpreadConstraint>,
    ) -> Pod {
        let name = format!("w1-{}", self.next);
        self.next += 1;
        let requests = BTreeMap::from([
            ("cpu".to_owned(), Quantity(format!("{cpu}m"))),
            ("memory".to_owned(), Quantity(format!("{mem}Mi"))),
        ]);
        Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some("default".to_owned()),
                uid: Some(format!("uid-{name}")),
                labels: Some(labels),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".to_owned(),
                    image: Some("registry.k8s.io/pause:3.9".to_owned()),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                affinity,
                topology_spread_constraints: (!spread.is_empty()).then_some(spread),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Pending".to_owned()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".to_owned(),
                    status: "False".to_owned(),
                    reason: Some("Unschedulable".to_owned()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn my_label(&mut self) -> BTreeMap<String, String> {
        BTreeMap::from([("my-label".to_owned(), self.label_value())])
    }

    fn generic(&mut self) -> Pod {
        let labels = self.my_label();
        self.pod(labels, None, Vec::new())
    }

    fn spread(&mut self, key: &str) -> Pod {
        let labels = self.my_label();
        let selector = selector(self.my_label());
        let spread = TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.to_owned(),
            when_unsatisfiable: "DoNotSchedule".to_owned(),
            label_selector: Some(selector),
            ..Default::default()
        };
        self.pod(labels, None, vec![spread])
    }

    fn zone_affinity(&mut self) -> Pod {
        let labels = BTreeMap::from([("my-affinity".to_owned(), self.label_value())]);
        let affinity = Affinity {
            pod_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(
                    labels::ZONE,
                    labels.clone(),
                )]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.pod(labels, Some(affinity), Vec::new())
    }

    fn anti_affinity(&mut self) -> Pod {
        let labels = BTreeMap::from([("app".to_owned(), "nginx".to_owned())]);
        let affinity = Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(
                    labels::HOSTNAME,
                    labels.clone(),
                )]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.pod(labels, Some(affinity), Vec::new())
    }

    fn preferences(&mut self, requests: (i64, i64)) -> Pod {
        let labels = BTreeMap::from([("app".to_owned(), "preferences".to_owned())]);
        let zone_one = NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: labels::ZONE.to_owned(),
                operator: "In".to_owned(),
                values: Some(vec![ZONES[0].to_owned()]),
            }]),
            ..Default::default()
        };
        let apart = |weight: i32, key: &str| WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: term(key, labels.clone()),
        };
        let affinity = Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    PreferredSchedulingTerm {
                        weight: 1,
                        preference: zone_one,
                    },
                ]),
                ..Default::default()
            }),
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    apart(10, labels::ZONE),
                    apart(1, labels::HOSTNAME),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.pod_with(requests, labels.clone(), Some(affinity), Vec::new())
    }
}

fn selector(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    }
}

fn term(key: &str, labels: BTreeMap<String, String>) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.to_owned(),
        label_selector: Some(selector(labels)),
        ..Default::default()
    }
}
