//! Helpers shared by the integration tests: compact builders for pods,
//! instance types and NodePools, and a checker that verifies every hard
//! constraint of a plan independently of the solver.

pub mod aws;
pub mod contract;

use std::collections::BTreeMap;

pub mod eks_authenticator;
pub mod fault_proxy;
pub mod interruption;
pub mod karpenter;
pub mod kube_harness;
pub mod kube_world;
pub mod real;
pub mod scale_up;
pub mod sim;

use k8s_openapi::api::core::v1::Pod;
use nodewright::cloud::{InstanceType, Offering};
use nodewright::config::{NodePool, NodePoolSpec};
use nodewright::packing::{Plan, PoolInput, SolveOptions, solve};
use nodewright::resources::{GIB, MIB, Resources};
use nodewright::scheduling::SchedPod;
use nodewright::scheduling::labels;
use nodewright::scheduling::requirements::{Requirement, Requirements};

/// A pod from a JSON `spec` fragment, with requests `cpu`/`memory`.
pub fn pod(name: &str, cpu: &str, memory: &str, extra_spec: serde_json::Value) -> SchedPod {
    pod_with_labels(name, cpu, memory, serde_json::json!({}), extra_spec)
}

pub fn pod_with_labels(
    name: &str,
    cpu: &str,
    memory: &str,
    labels: serde_json::Value,
    extra_spec: serde_json::Value,
) -> SchedPod {
    let mut spec = serde_json::json!({
        "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
        "spec": spec,
    }))
    .expect("valid pod json");
    SchedPod::from_pod(&p).expect("valid pod")
}

/// An instance type with EKS-like facts, offered in the given zones as spot
/// (at 30 % of `price`) and on-demand.
pub fn instance_type(
    name: &str,
    vcpu: i64,
    memory_gib: i64,
    arch: &str,
    price: f64,
    zones: &[&str],
) -> InstanceType {
    let mut reqs = Requirements::new();
    reqs.add(labels::ARCH, Requirement::single(arch));
    reqs.add(labels::OS, Requirement::single("linux"));
    let family = name.split('.').next().unwrap_or(name);
    reqs.add(labels::INSTANCE_FAMILY, Requirement::single(family));
    reqs.add(labels::INSTANCE_CATEGORY, Requirement::single(&family[..1]));
    reqs.add(labels::INSTANCE_CPU, Requirement::single(vcpu.to_string()));
    let offerings = zones
        .iter()
        .flat_map(|z| {
            [
                Offering::new(z, labels::CAPACITY_TYPE_SPOT, price * 0.3),
                Offering::new(z, labels::CAPACITY_TYPE_ON_DEMAND, price),
            ]
        })
        .collect();
    InstanceType::new(
        name,
        reqs,
        offerings,
        Resources::new(vcpu * 1000, memory_gib * GIB, 110),
        Resources::new(100, 256 * MIB, 0),
    )
}

pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// A small catalog: c5/m5/r5 (amd64) and c6g/m6g (arm64) in three sizes.
pub fn catalog() -> Vec<InstanceType> {
    let mut out = Vec::new();
    for (fam, arch, mem_per_cpu, price_per_cpu) in [
        ("c5", "amd64", 2, 0.0425),
        ("m5", "amd64", 4, 0.048),
        ("r5", "amd64", 8, 0.063),
        ("c6g", "arm64", 2, 0.034),
        ("m6g", "arm64", 4, 0.0385),
    ] {
        for (size, cpu) in [("large", 2), ("xlarge", 4), ("2xlarge", 8)] {
            out.push(instance_type(
                &format!("{fam}.{size}"),
                cpu,
                cpu * mem_per_cpu,
                arch,
                price_per_cpu * cpu as f64,
                &ZONES,
            ));
        }
    }
    out
}

/// A NodePool from a Karpenter v1 `spec` in JSON.
pub fn nodepool(name: &str, spec: serde_json::Value) -> NodePool {
    let spec: NodePoolSpec = serde_json::from_value(spec).expect("nodepool spec json");
    NodePool::from_spec(name, &spec).expect("valid nodepool")
}

pub fn solve_simple(pods: &[SchedPod], pools: Vec<NodePool>) -> (Plan, Vec<PoolInput>) {
    let inputs: Vec<PoolInput> = pools
        .into_iter()
        .map(|p| PoolInput::new(p, catalog()))
        .collect();
    let plan = solve(pods, &[], &inputs, &[], &SolveOptions::default());
    check_plan(pods, &inputs, &plan);
    (plan, inputs)
}

/// The claim holding pod `name`, if any.
pub fn claim_of<'a>(
    plan: &'a Plan,
    pods: &[SchedPod],
    name: &str,
) -> Option<&'a nodewright::packing::NewClaim> {
    plan.claims
        .iter()
        .find(|c| c.pods.iter().any(|i| pods[*i].pod.name == name))
}

/// Checks, independently of the solver, that a plan respects every hard
/// constraint it can be judged on: each pod placed at most once, each
/// claim's cheapest option holds its pods, matches every pod's node
/// requirements and the pool's, the pool's taints are tolerated, limits hold,
/// hostname anti-affinity and spreads hold.
pub fn check_plan(pods: &[SchedPod], pools: &[PoolInput], plan: &Plan) {
    let mut seen = vec![false; pods.len()];
    let placed = plan
        .bindings
        .iter()
        .map(|(i, _)| *i)
        .chain(plan.claims.iter().flat_map(|c| c.pods.iter().copied()));
    for i in placed.chain(plan.unschedulable.iter().map(|(i, _)| *i)) {
        assert!(!seen[i], "pod {} appears twice in the plan", pods[i].pod);
        seen[i] = true;
    }
    assert!(seen.iter().all(|s| *s), "every pod is placed or reported");
    let mut limit_use: BTreeMap<&str, Resources> = BTreeMap::new();
    let mut node_count: BTreeMap<&str, i64> = BTreeMap::new();
    for c in &plan.claims {
        assert!(!c.options.is_empty(), "a claim has launch options");
        assert!(c.options.len() <= nodewright::packing::MAX_INSTANCE_TYPES);
        assert!(
            c.options.windows(2).all(|w| w[0].price <= w[1].price),
            "options cheapest first"
        );
        let pool = pools
            .iter()
            .find(|p| p.pool().name == c.pool)
            .expect("claim names a pool");
        let mut sum = Resources::default();
        for &i in &c.pods {
            sum.add(&pods[i].requests);
        }
        let mut max_capacity = Resources::default();
        for o in &c.options {
            let t = pool
                .instance_types()
                .iter()
                .find(|t| *t.name == *o.instance_type)
                .expect("known type");
            assert!(
                sum.fits_in(t.allocatable()),
                "claim pods fit {}: {sum} vs {}",
                t.name,
                t.allocatable()
            );
            max_capacity.max_each(&t.capacity);
            let off = t
                .offerings
                .iter()
                .find(|x| *x.zone == *o.zone && *x.capacity_type == *o.capacity_type)
                .expect("offering exists");
            assert!(off.available);
            assert!(pool.pool().requirements.allows(labels::ZONE, Some(&o.zone)));
            assert!(
                pool.pool()
                    .requirements
                    .allows(labels::CAPACITY_TYPE, Some(&o.capacity_type))
            );
            assert!(
                pool.pool()
                    .requirements
                    .allows(labels::INSTANCE_TYPE, Some(&o.instance_type))
            );
            for &i in &c.pods {
                let p = &pods[i];
                let mut node_labels = t.requirements.single_valued_labels();
                node_labels.insert(labels::ZONE.into(), o.zone.to_string());
                node_labels.insert(labels::CAPACITY_TYPE.into(), o.capacity_type.to_string());
                node_labels.insert(labels::NODEPOOL.into(), c.pool.clone());
                node_labels.extend(pool.pool().labels.clone());
                for (k, r) in p.node_selector.iter() {
                    assert!(
                        r.has(node_labels.get(k).map(String::as_str).unwrap_or("")),
                        "{} nodeSelector {k} on {}",
                        p.pod,
                        t.name
                    );
                }
                if !p.required_terms.is_empty() {
                    let any = p.required_terms.iter().any(|term| {
                        term.iter().all(|(k, r)| match node_labels.get(k) {
                            Some(v) => r.has(v),
                            None => r.allows_absence(),
                        })
                    });
                    assert!(any, "{} required node affinity on {}", p.pod, t.name);
                }
                for taint in &pool.pool().taints {
                    if taint.effect != nodewright::scheduling::taints::Effect::PreferNoSchedule {
                        assert!(
                            p.tolerations.iter().any(|tol| tol.tolerates(taint)),
                            "{} tolerates {taint}",
                            p.pod
                        );
                    }
                }
            }
        }
        // Hostname anti-affinity and spreads: count per claim.
        for &i in &c.pods {
            let p = &pods[i];
            for t in p
                .affinity
                .iter()
                .filter(|t| t.anti && t.weight.is_none() && t.key == labels::HOSTNAME)
            {
                let others = c
                    .pods
                    .iter()
                    .filter(|&&j| j != i && t.selector.matches(&pods[j].labels))
                    .count();
                assert_eq!(others, 0, "{} anti-affinity on hostname violated", p.pod);
            }
            for s in p
                .spreads
                .iter()
                .filter(|s| s.hard && s.key == labels::HOSTNAME)
            {
                let count = c
                    .pods
                    .iter()
                    .filter(|&&j| s.selector.matches(&pods[j].labels))
                    .count();
                assert!(
                    count as u32 <= s.max_skew,
                    "{} hostname spread: {count} > {}",
                    p.pod,
                    s.max_skew
                );
            }
        }
        limit_use
            .entry(c.pool.as_str())
            .or_default()
            .add(&max_capacity);
        *node_count.entry(c.pool.as_str()).or_default() += 1;
    }
    for p in pools {
        let used = limit_use
            .get(p.pool().name.as_str())
            .cloned()
            .unwrap_or_default();
        let nodes = node_count.get(p.pool().name.as_str()).copied().unwrap_or(0);
        for (res, limit) in &p.pool().limits.resources {
            let v = if res == "nodes" { nodes } else { used.get(res) };
            assert!(
                v <= *limit,
                "pool {} limit {res}: {v} > {limit}",
                p.pool().name
            );
        }
    }
}

/// A claim record for store and drift tests: version 1, nothing launched,
/// reserving `reservation` in `pool` (NodeClass `default`).
pub fn claim_record(
    id: &str,
    pool: &str,
    created_at: nodewright::model::Timestamp,
    reservation: nodewright::model::Usage,
) -> nodewright::model::claim::Claim {
    nodewright::model::claim::Claim {
        id: id.into(),
        pool: pool.into(),
        node_class: Some("default".into()),
        version: 1,
        created_at,
        options: vec![],
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        taints: vec![],
        kubelet: Default::default(),
        pods: vec![],
        requests: Default::default(),
        reservation,
        launch_attempts: 0,
        instance: None,
        running_at: None,
        node_name: None,
        registered_at: None,
        stamp: Default::default(),
        disruption: Default::default(),
    }
}
