//! Property tests: the requirement algebra behaves as set algebra, and
//! every plan respects every hard constraint, places no pod twice and is
//! deterministic; the best plan never costs more than Karpenter's, nor (on
//! batches this small) more than one node per pod.

use nodewright::packing::{PoolInput, SolveOptions, Strategy as Solving, solve};
use nodewright::scheduling::SchedPod;
use nodewright::scheduling::requirements::{Operator, Requirement};
use nodewright_tests::*;
use proptest::prelude::*;
use serde_json::json;

const VALUES: [&str; 6] = ["1", "2", "3", "7", "a", "b"];

fn requirement() -> impl Strategy<Value = Requirement> {
    let ops = prop_oneof![
        Just(Operator::In),
        Just(Operator::NotIn),
        Just(Operator::Exists),
        Just(Operator::DoesNotExist),
        Just(Operator::Gt),
        Just(Operator::Lt),
        Just(Operator::Gte),
        Just(Operator::Lte),
    ];
    (
        ops,
        proptest::sample::subsequence(VALUES.to_vec(), 1..4),
        0i64..8,
    )
        .prop_map(|(op, vals, n)| {
            let values: Vec<String> = match op {
                Operator::In | Operator::NotIn => vals.iter().map(|s| s.to_string()).collect(),
                Operator::Exists | Operator::DoesNotExist => vec![],
                _ => vec![n.to_string()],
            };
            Requirement::new("k", op, &values).expect("well-formed")
        })
}

proptest! {
    #[test]
    fn intersection_is_set_intersection(a in requirement(), b in requirement()) {
        let i = a.intersection(&b);
        for v in VALUES.iter().chain(["0", "5", "100", "zz"].iter()) {
            prop_assert_eq!(i.has(v), a.has(v) && b.has(v), "value {}", v);
        }
        prop_assert_eq!(a.compatible(&b), b.compatible(&a));
        prop_assert_eq!(&i, &b.intersection(&a));
        if VALUES.iter().any(|v| a.has(v) && b.has(v)) {
            prop_assert!(a.intersects(&b));
        }
        // Intersection is idempotent and narrows.
        prop_assert_eq!(&i.intersection(&i), &i);
    }
}

/// A random pending pod: size, optional architecture, zone, anti-affinity
/// group and zone spread.
fn pending_pod(index: usize) -> impl Strategy<Value = SchedPod> {
    (
        prop::sample::select(vec!["100m", "250m", "500m", "1", "1500m", "3"]),
        prop::sample::select(vec!["128Mi", "512Mi", "1Gi", "2Gi", "6Gi"]),
        prop::option::of(prop::sample::select(vec!["amd64", "arm64"])),
        prop::option::of(prop::sample::select(ZONES.to_vec())),
        prop::option::of(0u8..2),
        any::<bool>(),
    )
        .prop_map(move |(cpu, mem, arch, zone, anti, spread)| {
            constrained_pod(
                &format!("p{index:03}"),
                (cpu, mem),
                arch,
                zone,
                anti,
                spread,
            )
        })
}

/// A pending pod with an optional architecture and zone (node selector), a
/// hostname anti-affinity group, and a zone spread over the "free" pods.
fn constrained_pod(
    name: &str,
    (cpu, mem): (&str, &str),
    arch: Option<&str>,
    zone: Option<&str>,
    anti: Option<u8>,
    spread: bool,
) -> SchedPod {
    let mut selector = serde_json::Map::new();
    if let Some(a) = arch {
        selector.insert("kubernetes.io/arch".into(), json!(a));
    }
    if let Some(z) = zone {
        selector.insert("topology.kubernetes.io/zone".into(), json!(z));
    }
    let mut spec = json!({"nodeSelector": selector});
    let labels = match anti {
        Some(g) => json!({"group": format!("g{g}")}),
        None => json!({"group": "free"}),
    };
    if let Some(g) = anti {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"group": format!("g{g}")}}}]}});
    }
    if spread {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"group": "free"}}}]);
    }
    pod_with_labels(name, cpu, mem, labels, spec)
}

fn pods(max: usize) -> impl Strategy<Value = Vec<SchedPod>> {
    (1..max).prop_flat_map(|n| (0..n).map(pending_pod).collect::<Vec<_>>())
}

/// The cost of giving every scheduled pod its own cheapest node.
fn one_node_per_pod(pods: &[SchedPod], placed: &[usize], pool: &PoolInput) -> f64 {
    placed
        .iter()
        .map(|&i| {
            let p = &pods[i];
            let mut reqs = pool.pool().requirements.intersection(&p.node_selector);
            if let Some(t) = p.required_terms.first() {
                reqs.add_all(t);
            }
            pool.instance_types()
                .iter()
                .filter(|t| t.requirements.intersects(&reqs) && p.requests.fits_in(t.allocatable()))
                .filter_map(|t| t.cheapest_offering(&reqs).map(|o| o.price))
                .min_by(f64::total_cmp)
                .unwrap_or(f64::INFINITY)
        })
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn plans_respect_every_constraint(pods in pods(40), cpu_limit in prop::option::of(4u32..40)) {
        let spec = match cpu_limit {
            Some(l) => json!({"limits": {"cpu": l.to_string()}}),
            None => json!({}),
        };
        let pools = vec![PoolInput::new(nodepool("default", spec), catalog())];
        // The most pods any single strategy schedules; Best comes last.
        let mut most = 0;
        for strategy in [Solving::Guided, Solving::Karpenter, Solving::Standalone, Solving::Best] {
            let options = SolveOptions { strategy, ..SolveOptions::default() };
            let plan = solve(&pods, &[], &pools, &[], &options);
            check_plan(&pods, &pools, &plan);
            if strategy == Solving::Best {
                prop_assert!(plan.scheduled() >= most, "Best schedules {} < {}", plan.scheduled(), most);
            }
            most = most.max(plan.scheduled());
            if cpu_limit.is_none() {
                prop_assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
            }
            // Deterministic.
            let again = solve(&pods, &[], &pools, &[], &options);
            prop_assert_eq!(plan.claims.len(), again.claims.len());
            for (a, b) in plan.claims.iter().zip(&again.claims) {
                prop_assert_eq!(&a.pods, &b.pods);
                prop_assert_eq!(&a.options, &b.options);
            }
            // Karpenter's algorithm grows claims whatever the price, and
            // the guided one to the types the program chose. Under a limit
            // the bound does not apply: one node per pod may not fit in it,
            // and Best rightly keeps a dearer plan that schedules more pods.
            if cpu_limit.is_none() && matches!(strategy, Solving::Standalone | Solving::Best) {
                let placed: Vec<usize> = plan.claims.iter().flat_map(|c| c.pods.iter().copied()).collect();
                let trivial = one_node_per_pod(&pods, &placed, &pools[0]);
                prop_assert!(plan.cost_per_hour() <= trivial + 1e-9, "{:?}: plan {} > one node per pod {}", strategy, plan.cost_per_hour(), trivial);
            }
        }
    }

    #[test]
    fn best_is_never_costlier_than_karpenters_order(pods in pods(60)) {
        let pools = vec![PoolInput::new(nodepool("default", json!({})), catalog())];
        let best = solve(&pods, &[], &pools, &[], &SolveOptions::default());
        let karpenter = solve(&pods, &[], &pools, &[], &SolveOptions { strategy: Solving::Karpenter, ..SolveOptions::default() });
        prop_assert!(best.scheduled() >= karpenter.scheduled());
        prop_assert!(best.cost_per_hour() <= karpenter.cost_per_hour() + 1e-9);
    }
}

// ---- The same guarantees on a real catalog ----
// us-east-1 as the simulator embeds it (hundreds of types, published
// on-demand prices, per-zone spot), the W2 NodePool with the walkthrough's
// requirements or none, and two DaemonSets on every node: capacity is
// judged after their overhead, which the small catalog above never tests.

mod real_catalog {
    use super::*;
    use nodewright::provisioning::plan::instance_types;
    use nodewright::resources::Resources;
    use nodewright::workload::w2::{self, Capacity, PoolRequirements};
    use std::sync::OnceLock;

    /// The catalog, the pools (walkthrough, open) and the DaemonSet pods, built once.
    fn fixture() -> &'static (Vec<PoolInput>, Vec<SchedPod>, Vec<String>) {
        static FIXTURE: OnceLock<(Vec<PoolInput>, Vec<SchedPod>, Vec<String>)> = OnceLock::new();
        FIXTURE.get_or_init(|| {
            let catalog = nodewright::sim::catalog::catalog("us-east-1").expect("embedded region");
            let pools: Vec<PoolInput> = [PoolRequirements::Walkthrough, PoolRequirements::Open]
                .into_iter()
                .map(|r| {
                    let pool = w2::pool(Capacity::SpotAndOnDemand, r);
                    PoolInput::new(pool.clone(), instance_types(&pool, &catalog, &[]))
                })
                .collect();
            let zones = w2::zones(pools[0].pool(), &catalog);
            let daemons = w2::daemon_pods()
                .iter()
                .map(|p| SchedPod::from_pod(p).expect("daemon pod"))
                .collect();
            (pools, daemons, zones)
        })
    }

    /// A pod of the W2 shapes, with an optional architecture, zone pin,
    /// hostname anti-affinity group or zone spread.
    fn pod(index: usize) -> impl Strategy<Value = SchedPod> {
        (
            prop::sample::select(vec![
                ("3500m", "2Gi"),
                ("500m", "14Gi"),
                ("250m", "256Mi"),
                ("100m", "128Mi"),
                ("2", "8Gi"),
                ("1", "2Gi"),
            ]),
            prop::option::of(prop::sample::select(vec!["amd64", "arm64"])),
            prop::option::of(0usize..3),
            prop::option::of(0u8..2),
            any::<bool>(),
        )
            .prop_map(move |(shape, arch, zone, anti, spread)| {
                let zones = &fixture().2;
                let zone = zone.map(|z| zones[z % zones.len()].as_str());
                constrained_pod(&format!("r{index:03}"), shape, arch, zone, anti, spread)
            })
    }

    fn pods(max: usize) -> impl Strategy<Value = Vec<SchedPod>> {
        (1..max).prop_flat_map(|n| (0..n).map(pod).collect::<Vec<_>>())
    }

    /// Each claim's pods and the DaemonSet pods together fit every type it
    /// may launch as: capacity after overhead.
    fn check_overhead(
        pods: &[SchedPod],
        daemons: &[SchedPod],
        pool: &PoolInput,
        plan: &nodewright::packing::Plan,
    ) {
        for c in &plan.claims {
            let mut sum = daemons.iter().fold(Resources::default(), |mut s, d| {
                s.add(&d.requests);
                s
            });
            for &i in &c.pods {
                sum.add(&pods[i].requests);
            }
            for o in &c.options {
                let t = pool
                    .instance_types()
                    .iter()
                    .find(|t| *t.name == *o.instance_type)
                    .expect("known type");
                assert!(
                    sum.fits_in(t.allocatable()),
                    "pods and DaemonSets fit {}: {sum} vs {}",
                    t.name,
                    t.allocatable()
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn plans_on_the_real_catalog_respect_every_constraint(
            pods in pods(60),
            open in any::<bool>(),
            cpu_limit in prop::option::of(16u32..200),
        ) {
            let (pools, daemons, _) = fixture();
            let base = &pools[usize::from(open)];
            let mut node_pool = base.pool().clone();
            if let Some(l) = cpu_limit {
                node_pool.limits.resources.insert("cpu".into(), i64::from(l) * 1000);
            }
            let mut pool = PoolInput::new(node_pool, base.instance_types().to_vec());
            pool.in_use = base.in_use.clone();
            pool.nodes_in_use = base.nodes_in_use;
            let pools = vec![pool];
            let karpenter = solve(&pods, &[], &pools, daemons, &SolveOptions { strategy: Solving::Karpenter, ..SolveOptions::default() });
            let plan = solve(&pods, &[], &pools, daemons, &SolveOptions::default());
            check_plan(&pods, &pools, &plan);
            check_overhead(&pods, daemons, &pools[0], &plan);
            if cpu_limit.is_none() {
                let failed: Vec<_> = plan.unschedulable.iter().map(|(i, why)| (why, &pods[*i].requests, &pods[*i].node_selector, pods[*i].spreads.len(), pods[*i].affinity.len())).collect();
                prop_assert!(plan.unschedulable.is_empty(), "open {}: {:?}", open, failed);
            }
            let again = solve(&pods, &[], &pools, daemons, &SolveOptions::default());
            prop_assert_eq!(plan.claims.len(), again.claims.len());
            for (a, b) in plan.claims.iter().zip(&again.claims) {
                prop_assert_eq!(&a.pods, &b.pods);
                prop_assert_eq!(&a.options, &b.options);
            }
            prop_assert!(plan.scheduled() >= karpenter.scheduled());
            if plan.scheduled() == karpenter.scheduled() {
                prop_assert!(plan.cost_per_hour() <= karpenter.cost_per_hour() + 1e-9,
                    "plan {} > Karpenter's order {}", plan.cost_per_hour(), karpenter.cost_per_hour());
            }
        }
    }
}
