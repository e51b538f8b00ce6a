//! Table tests of the solver, one per constraint kind, as a Karpenter user
//! would write them. Every plan also goes through `check_plan`, which
//! re-verifies all hard constraints independently.

use nodewright::packing::{ExistingNode, PoolInput, SolveOptions, Strategy, solve};
use nodewright::scheduling::labels;
use nodewright_tests::*;
use serde_json::json;

fn open_pool() -> nodewright::config::NodePool {
    nodepool("default", json!({}))
}

#[test]
fn cheapest_offering_wins_and_spot_when_allowed() {
    let pods = vec![pod("a", "1", "1Gi", json!({}))];
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    let c = &plan.claims[0];
    assert_eq!(
        c.options[0].capacity_type.as_ref(),
        labels::CAPACITY_TYPE_SPOT,
        "spot is cheaper"
    );
    assert_eq!(
        c.options[0].instance_type.as_ref(),
        "c6g.large",
        "cheapest type that holds 1 CPU"
    );

    let od = nodepool(
        "od",
        json!({"template": {"spec": {"requirements": [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}),
    );
    let (plan, _) = solve_simple(&pods, vec![od]);
    assert!(
        plan.claims[0]
            .options
            .iter()
            .all(|o| o.capacity_type.as_ref() == labels::CAPACITY_TYPE_ON_DEMAND)
    );
}

#[test]
fn layered_constraints_intersect() {
    // NodePool: amd64 only, categories c and m. Pod: zone b, instance-cpu ≥ 4.
    let pool = nodepool(
        "p",
        json!({"template": {"spec": {"requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}]}}}),
    );
    let pods = vec![pod(
        "a",
        "500m",
        "1Gi",
        json!({
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1b"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]}]}]}}}
        }),
    )];
    let (plan, _) = solve_simple(&pods, vec![pool]);
    let c = &plan.claims[0];
    assert!(c.options.iter().all(|o| o.zone.as_ref() == "us-east-1b"));
    for o in &c.options {
        assert!(
            ["c5.xlarge", "c5.2xlarge", "m5.xlarge", "m5.2xlarge"]
                .contains(&o.instance_type.as_ref()),
            "{}",
            o.instance_type
        );
    }
}

#[test]
fn arm64_vs_amd64_choice() {
    let pods = vec![
        pod(
            "arm",
            "1",
            "1Gi",
            json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
        ),
        pod(
            "amd",
            "1",
            "1Gi",
            json!({"nodeSelector": {"kubernetes.io/arch": "amd64"}}),
        ),
    ];
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert_eq!(plan.claims.len(), 2, "one node per architecture");
    let graviton = |o: &nodewright::packing::LaunchOption| {
        o.instance_type
            .split('.')
            .next()
            .is_some_and(|f| f.ends_with('g'))
    };
    assert!(
        claim_of(&plan, &pods, "arm")
            .expect("placed")
            .options
            .iter()
            .all(graviton)
    );
    assert!(
        !claim_of(&plan, &pods, "amd")
            .expect("placed")
            .options
            .iter()
            .any(graviton)
    );
}

#[test]
fn impossible_pods_are_reported_with_a_reason() {
    let cases = [
        (
            json!({"nodeSelector": {"kubernetes.io/arch": "arm64", "node.kubernetes.io/instance-type": "c5.large"}}),
            "1",
            "no instance type satisfies arch=arm64 and instance-type=c5.large",
        ),
        (json!({}), "64", "has room for requests cpu=64"),
        (
            json!({"nodeSelector": {"team": "a"}}),
            "1",
            "label \"team\" does not have known values",
        ),
        (
            json!({"nodeSelector": {"kubernetes.io/archh": "arm64"}}),
            "1",
            "typo of \"kubernetes.io/arch\"",
        ),
    ];
    for (spec, cpu, reason) in cases {
        let pods = vec![pod("x", cpu, "1Gi", spec.clone())];
        let (plan, _) = solve_simple(&pods, vec![open_pool()]);
        assert!(
            plan.claims.is_empty(),
            "{spec}: nothing launched for an impossible pod"
        );
        assert_eq!(plan.unschedulable.len(), 1, "{spec}");
        assert!(
            plan.unschedulable[0].1.contains(reason),
            "{spec}: {}",
            plan.unschedulable[0].1
        );
    }
}

#[test]
fn taints_need_tolerations() {
    let gpu = nodepool(
        "gpu",
        json!({"weight": 50, "template": {"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}}),
    );
    let pods = vec![
        pod("plain", "1", "1Gi", json!({})),
        pod(
            "a-tolerant",
            "1",
            "1Gi",
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}),
        ),
    ];
    let (plan, _) = solve_simple(&pods, vec![gpu.clone()]);
    assert_eq!(plan.unschedulable.len(), 1);
    assert!(
        plan.unschedulable[0]
            .1
            .contains("did not tolerate taint dedicated=gpu:NoSchedule of NodePool gpu"),
        "{}",
        plan.unschedulable[0].1
    );
    // With a second pool, the plain pod lands there; the heavier pool is tried first for the tolerant one
    // (which sorts first by name, so no claim exists yet when it is placed).
    let (plan, _) = solve_simple(&pods, vec![gpu, open_pool()]);
    assert_eq!(
        claim_of(&plan, &pods, "a-tolerant").expect("placed").pool,
        "gpu"
    );
    assert_eq!(
        claim_of(&plan, &pods, "plain").expect("placed").pool,
        "default"
    );
}

#[test]
fn limits_are_never_exceeded() {
    let pool = nodepool("small", json!({"limits": {"cpu": "8"}}));
    let pods: Vec<_> = (0..20)
        .map(|i| pod(&format!("p{i}"), "1", "1Gi", json!({})))
        .collect();
    let (plan, _) = solve_simple(&pods, vec![pool]);
    // check_plan verified Σ max capacity ≤ 8 CPU; some pods must be left over.
    assert!(
        plan.scheduled() <= 8 && plan.scheduled() > 0,
        "{}",
        plan.scheduled()
    );
    assert!(
        plan.unschedulable
            .iter()
            .all(|(_, r)| r.contains("NodePool small limit cpu 8 reached")),
        "{:?}",
        plan.unschedulable.first()
    );
}

#[test]
fn hostname_anti_affinity_gives_each_pod_its_own_node() {
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
    let pods: Vec<_> = (0..4)
        .map(|i| {
            pod_with_labels(
                &format!("db{i}"),
                "250m",
                "256Mi",
                json!({"app": "db"}),
                anti.clone(),
            )
        })
        .collect();
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert_eq!(plan.claims.len(), 4);
    assert!(plan.claims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn a_preferred_anti_affinity_binds_only_its_own_pod() {
    // The lead prefers no peer in its zone; the follower, pinned to the same
    // zone, has no such term. As in Karpenter (and kube-scheduler, where a
    // preference is only a score), the lead's preference never repels the
    // follower, whichever is placed first.
    let zone = json!({"topology.kubernetes.io/zone": "us-east-1a"});
    let lead = pod_with_labels(
        "lead",
        "2",
        "1Gi",
        json!({"app": "x"}),
        json!({"nodeSelector": zone, "affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm":
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "x"}}}}]}}}),
    );
    let follower = pod_with_labels(
        "follower",
        "1",
        "1Gi",
        json!({"app": "x"}),
        json!({"nodeSelector": zone}),
    );
    let pods = vec![lead, follower];
    for strategy in [Strategy::Karpenter, Strategy::Guided, Strategy::Best] {
        let pools = vec![PoolInput::new(open_pool(), catalog())];
        let plan = solve(
            &pods,
            &[],
            &pools,
            &[],
            &SolveOptions {
                strategy,
                ..SolveOptions::default()
            },
        );
        check_plan(&pods, &pools, &plan);
        assert!(
            plan.unschedulable.is_empty(),
            "{strategy:?}: {:?}",
            plan.unschedulable
        );
    }
}

#[test]
fn zone_spread_balances_within_max_skew() {
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let pods: Vec<_> = (0..7)
        .map(|i| {
            pod_with_labels(
                &format!("w{i}"),
                "500m",
                "512Mi",
                json!({"app": "web"}),
                spread.clone(),
            )
        })
        .collect();
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    let mut per_zone = std::collections::BTreeMap::new();
    for c in &plan.claims {
        let zone = c
            .requirements
            .get(labels::ZONE)
            .and_then(|r| r.single_value())
            .expect("spread pins the zone")
            .to_owned();
        assert!(c.options.iter().all(|o| *o.zone == *zone));
        *per_zone.entry(zone).or_insert(0) += c.pods.len();
    }
    assert_eq!(per_zone.len(), 3, "{per_zone:?}");
    let (min, max) = (
        per_zone.values().min().copied().unwrap_or(0),
        per_zone.values().max().copied().unwrap_or(0),
    );
    assert!(max - min <= 1, "{per_zone:?}");
}

#[test]
fn hostname_spread_limits_pods_per_node() {
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "api"}}}]});
    let pods: Vec<_> = (0..6)
        .map(|i| {
            pod_with_labels(
                &format!("a{i}"),
                "100m",
                "128Mi",
                json!({"app": "api"}),
                spread.clone(),
            )
        })
        .collect();
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert_eq!(plan.claims.len(), 3, "at most two per node");
}

#[test]
fn zone_affinity_follows_peers() {
    let leader = pod_with_labels(
        "leader",
        "1",
        "1Gi",
        json!({"app": "cache"}),
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1c"}}),
    );
    let follower = pod_with_labels(
        "follower",
        "1",
        "1Gi",
        json!({"app": "client"}),
        json!({"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "cache"}}}]}}}),
    );
    // The follower sorts first (same size, name order) and must wait for its peer.
    let pods = vec![follower, leader];
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let c = claim_of(&plan, &pods, "follower").expect("placed");
    assert!(c.options.iter().all(|o| o.zone.as_ref() == "us-east-1c"));
}

#[test]
fn preferences_are_kept_when_satisfiable_and_relaxed_when_not() {
    let prefer = |zone: &str| {
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}}]}}})
    };
    let pods = vec![pod("kept", "1", "1Gi", prefer("us-east-1b"))];
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert!(
        plan.claims[0]
            .options
            .iter()
            .all(|o| o.zone.as_ref() == "us-east-1b"),
        "a satisfiable preference holds"
    );
    let pods = vec![pod("relaxed", "1", "1Gi", prefer("mars-1a"))];
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert!(
        plan.unschedulable.is_empty(),
        "an unsatisfiable preference is dropped, not fatal"
    );
    assert_eq!(plan.claims.len(), 1);
}

#[test]
fn existing_nodes_are_used_first() {
    let node = ExistingNode {
        name: "node-1".into(),
        labels: [
            (labels::ZONE, "us-east-1a"),
            (labels::ARCH, "amd64"),
            (labels::HOSTNAME, "node-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        allocatable: nodewright::resources::Resources::new(2000, 4 << 30, 110),
        requested: nodewright::resources::Resources::new(500, 1 << 30, 3),
        ..Default::default()
    };
    let pods = vec![
        pod("fits", "1", "1Gi", json!({})),
        pod("too-big", "1", "1Gi", json!({})),
    ];
    let pools = vec![PoolInput::new(open_pool(), catalog())];
    let plan = solve(&pods, &[node], &pools, &[], &SolveOptions::default());
    assert_eq!(
        plan.bindings.len(),
        1,
        "one pod fits the node's free 1.5 CPU"
    );
    assert_eq!(plan.claims.len(), 1);
}

#[test]
fn daemonset_overhead_is_honoured() {
    let ds = pod("ds", "1500m", "1Gi", json!({}));
    // 2-CPU types have 1.9 CPU allocatable: with the DaemonSet, a 1-CPU pod no longer fits them.
    let pods = vec![pod("a", "1", "1Gi", json!({}))];
    let pools = vec![PoolInput::new(open_pool(), catalog())];
    let plan = solve(&pods, &[], &pools, &[ds], &SolveOptions::default());
    assert!(
        plan.claims[0]
            .options
            .iter()
            .all(|o| !o.instance_type.ends_with(".large")),
        "{:?}",
        plan.claims[0].options[0]
    );
}

#[test]
fn host_ports_conflict() {
    let hp = json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": {"requests": {"cpu": "100m"}}}]});
    let pods: Vec<_> = (0..3)
        .map(|i| pod(&format!("h{i}"), "100m", "64Mi", hp.clone()))
        .collect();
    let (plan, _) = solve_simple(&pods, vec![open_pool()]);
    assert_eq!(plan.claims.len(), 3, "one host port 8080 per node");
}

#[test]
fn min_values_keeps_enough_types() {
    let pool = nodepool(
        "p",
        json!({"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 3}]}}}),
    );
    let pods = vec![pod("a", "1", "1Gi", json!({}))];
    let inputs = vec![PoolInput::new(pool, catalog())];
    let plan = solve(
        &pods,
        &[],
        &inputs,
        &[],
        &nodewright::packing::SolveOptions {
            max_instance_types: 2,
            ..Default::default()
        },
    );
    let families: std::collections::BTreeSet<_> = plan.claims[0]
        .options
        .iter()
        .map(|o| o.instance_type.split('.').next().unwrap_or("").to_owned())
        .collect();
    assert!(families.len() >= 3, "{families:?}");
}

#[test]
fn min_values_that_cannot_be_met_are_named() {
    // Only m5 and c5 exist in the catalog for this pool: minValues 5 of families cannot hold.
    let pool = nodepool(
        "p",
        json!({"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5", "t3", "m6i"], "minValues": 5},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]}]}}}),
    );
    let pods = vec![pod("a", "100m", "128Mi", json!({}))];
    let plan = solve(
        &pods,
        &[],
        &[PoolInput::new(pool, catalog())],
        &[],
        &SolveOptions::default(),
    );
    assert!(plan.claims.is_empty());
    let reason = &plan.unschedulable[0].1;
    assert!(
        reason.contains("minValues 5 of karpenter.k8s.aws/instance-family"),
        "{reason}"
    );
}

/// A volume's zone holds on the node, but a zone spread still counts every
/// zone the pod's own affinity allows (kube-scheduler's nodeAffinityPolicy
/// does not look at volumes): a pod whose volume is in the crowded zone waits.
#[test]
fn volume_zones_bind_the_pod_but_not_the_domains_its_spread_counts() {
    use nodewright::scheduling::requirements::Requirement;
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "db"}}}]});
    let running = vec![
        pod_with_labels("db-0", "100m", "128Mi", json!({"app": "db"}), json!({})),
        pod_with_labels("db-1", "100m", "128Mi", json!({"app": "db"}), json!({})),
    ];
    let node = ExistingNode {
        name: "node-a".into(),
        labels: [
            (labels::ZONE, "us-east-1a"),
            (labels::ARCH, "amd64"),
            (labels::HOSTNAME, "node-a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        allocatable: nodewright::resources::Resources::new(4000, 8 << 30, 110),
        requested: nodewright::resources::Resources::new(200, 256 << 20, 2),
        pods: running,
        ..Default::default()
    };
    let with_volume_in = |zone: &str| {
        let mut p = pod_with_labels(
            "db-2",
            "100m",
            "128Mi",
            json!({"app": "db"}),
            spread.clone(),
        );
        p.volume.add(labels::ZONE, Requirement::single(zone));
        p
    };
    let pools = vec![PoolInput::new(open_pool(), catalog())];
    let solve_one = |p| {
        solve(
            &[p],
            std::slice::from_ref(&node),
            &pools,
            &[],
            &SolveOptions::default(),
        )
    };

    // Zones b and c hold none: a third pod in zone a would skew by 3.
    let plan = solve_one(with_volume_in("us-east-1a"));
    assert!(
        plan.bindings.is_empty() && plan.claims.is_empty(),
        "{:?} {:?}",
        plan.bindings,
        plan.claims
    );
    assert_eq!(plan.unschedulable.len(), 1);
    // Its volume in zone b: a new node there.
    let plan = solve_one(with_volume_in("us-east-1b"));
    assert_eq!(plan.claims.len(), 1, "{:?}", plan.unschedulable);
    assert!(
        plan.claims[0]
            .options
            .iter()
            .all(|o| o.zone.as_ref() == "us-east-1b")
    );
}

/// Eleven 1-CPU pods: the guide fills a c6g.2xlarge (7 of them) and sends
/// the other four to a second one, where they leave half of it idle. The
/// repair splits that node into a c6g.xlarge and a c6g.large, a quarter
/// cheaper; every strategy alone leaves a dearer plan.
#[test]
fn a_half_empty_node_is_split_onto_smaller_ones() {
    let pool = nodepool(
        "graviton",
        json!({"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c6g"]}]}}}),
    );
    let pods: Vec<_> = (0..11)
        .map(|i| pod(&format!("p{i}"), "1", "1Gi", json!({})))
        .collect();
    let (plan, inputs) = solve_simple(&pods, vec![pool]);
    let price = |name: &str| {
        let it = inputs[0]
            .instance_types()
            .iter()
            .find(|t| t.name == name)
            .expect("type");
        it.offerings
            .iter()
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    };
    let mut types: Vec<&str> = plan
        .claims
        .iter()
        .map(|c| c.options[0].instance_type.as_ref())
        .collect();
    types.sort();
    assert_eq!(types, ["c6g.2xlarge", "c6g.large", "c6g.xlarge"]);
    let expected = price("c6g.2xlarge") + price("c6g.xlarge") + price("c6g.large");
    assert!(
        (plan.cost_per_hour() - expected).abs() < 1e-9,
        "{} vs {expected}",
        plan.cost_per_hour()
    );
    for strategy in [Strategy::Karpenter, Strategy::Standalone] {
        let alone = solve(
            &pods,
            &[],
            &inputs,
            &[],
            &SolveOptions {
                strategy,
                ..SolveOptions::default()
            },
        );
        assert!(
            alone.cost_per_hour() > plan.cost_per_hour() + 1e-9,
            "{strategy:?}: {}",
            alone.cost_per_hour()
        );
    }
}
