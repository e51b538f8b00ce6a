//! Unit tests of the disruption decision: each case a world of a few nodes
//! and a `check` of what becomes of each node and why.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::cloud::InstanceTypeInfo;
use crate::config::{NodeClass, NodePool, NodePoolSpec, Settings};
use crate::model::claim::{ClaimInstance, reservation_of};
use crate::model::{Claim, CloudCatalog, PricedOffering, ResolvedClass, SignedDuration, Timestamp};
use crate::resources::{MIB, Resources};
use crate::scheduling::labels;
use crate::scheduling::volumes::VolumeIndex;
use crate::sim::cluster::SimCluster;

const ZONE: &str = "us-east-1a";

fn t0() -> Timestamp {
    "2026-01-05T10:00:00Z".parse().expect("timestamp")
}

fn secs(s: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(s))
        .expect("time")
}

fn info(name: &str, vcpu: u32, memory_mib: u64) -> InstanceTypeInfo {
    InstanceTypeInfo {
        name: name.into(),
        vcpu,
        memory_mib,
        arch: "amd64".into(),
        hypervisor: Some("nitro".into()),
        bare_metal: false,
        gpu_count: 0,
        gpu_name: None,
        gpu_manufacturer: None,
        local_nvme_gb: 0,
        max_enis: 4,
        ipv4_per_eni: 15,
        network_bandwidth_mbps: None,
        ..Default::default()
    }
}

/// (name, vCPU, MiB, on-demand $/h, spot $/h)
const TYPES: &[(&str, u32, u64, f64, f64)] = &[
    ("m5.large", 2, 8192, 0.096, 0.040),
    ("m5.xlarge", 4, 16384, 0.192, 0.080),
    ("m5a.xlarge", 4, 16384, 0.186, 0.078),
    ("c5.xlarge", 4, 8192, 0.170, 0.070),
    ("m5.2xlarge", 8, 32768, 0.384, 0.160),
];

fn catalog(types: &[&str]) -> CloudCatalog {
    let mut c = CloudCatalog {
        region: "us-east-1".into(),
        ..Default::default()
    };
    for (name, vcpu, mib, od, spot) in TYPES
        .iter()
        .filter(|t| types.is_empty() || types.contains(&t.0))
    {
        c.instance_types.push(info(name, *vcpu, *mib));
        for (ct, price) in [("on-demand", od), ("spot", spot)] {
            c.offerings.push(PricedOffering {
                reservation_ids: Vec::new(),
                instance_type: (*name).into(),
                zone: ZONE.into(),
                capacity_type: ct.into(),
                price: *price,
            });
        }
    }
    c
}

fn pool(name: &str, spec: serde_json::Value) -> NodePool {
    let spec: NodePoolSpec = serde_json::from_value(spec).expect("nodepool spec");
    NodePool::from_spec(name, &spec).expect("valid nodepool")
}

fn class(json: serde_json::Value) -> NodeClass {
    let mut base = serde_json::json!({
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]
    });
    if let (Some(o), Some(p)) = (base.as_object_mut(), json.as_object()) {
        for (k, v) in p {
            o.insert(k.clone(), v.clone());
        }
    }
    NodeClass::from_spec(
        "default",
        &serde_json::from_value(base).expect("class spec"),
    )
    .expect("valid class")
}

/// A cluster, our claims and the configuration.
struct World {
    now: Timestamp,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    pending: Vec<Pod>,
    claims: Vec<Claim>,
    pools: Vec<NodePool>,
    invalid_pools: Vec<String>,
    classes: Vec<NodeClass>,
    resolved: BTreeMap<String, ResolvedClass>,
    catalog: CloudCatalog,
    pdbs: Vec<PodDisruptionBudget>,
    in_flight: Vec<InFlight>,
    buffers: Vec<Pod>,
    volumes: VolumeIndex,
    settings: Settings,
    tuning: Tuning,
}

impl World {
    /// One pool `default` (WhenEmptyOrUnderutilized, consolidateAfter 0s,
    /// on-demand only) over the whole test catalog.
    fn new() -> World {
        World::with_pool(serde_json::json!({
            "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
        }))
    }

    fn with_pool(spec: serde_json::Value) -> World {
        World {
            now: t0(),
            nodes: vec![],
            pods: vec![],
            pending: vec![],
            claims: vec![],
            pools: vec![pool("default", spec)],
            invalid_pools: vec![],
            classes: vec![class(serde_json::json!({}))],
            resolved: BTreeMap::new(),
            catalog: catalog(&[]),
            pdbs: vec![],
            in_flight: vec![],
            buffers: vec![],
            volumes: VolumeIndex::default(),
            settings: Settings::default(),
            tuning: Tuning::default(),
        }
    }

    /// A registered, Ready node of the first pool launched at `launched`, with its claim.
    fn node_at(
        &mut self,
        name: &str,
        instance_type: &str,
        capacity_type: &str,
        launched: Timestamp,
    ) -> &mut Self {
        self.node_in(0, name, instance_type, capacity_type, launched)
    }

    /// A registered, Ready node of `self.pools[pool]` launched at `launched`, with its claim.
    fn node_in(
        &mut self,
        pool: usize,
        name: &str,
        instance_type: &str,
        capacity_type: &str,
        launched: Timestamp,
    ) -> &mut Self {
        let (_, vcpu, mib, od, spot) = *TYPES
            .iter()
            .find(|t| t.0 == instance_type)
            .expect("known type");
        let price = if capacity_type == "spot" { spot } else { od };
        let it = info(instance_type, vcpu, mib);
        let pool = self.pools[pool].clone();
        let capacity = it.capacity(&pool.kubelet);
        let allocatable = capacity.saturating_sub(&it.overhead(&pool.kubelet));
        let mut node_labels = it.requirements().single_valued_labels();
        node_labels.extend(pool.labels.clone());
        node_labels.insert(labels::NODEPOOL.into(), pool.name.clone());
        node_labels.insert(labels::INSTANCE_TYPE.into(), instance_type.into());
        node_labels.insert(labels::ZONE.into(), ZONE.into());
        node_labels.insert(labels::CAPACITY_TYPE.into(), capacity_type.into());
        node_labels.insert(labels::HOSTNAME.into(), name.into());
        let provider = format!("aws:///{ZONE}/i-{name}");
        let node = SimCluster::ready_node(
            name,
            node_labels.clone(),
            vec![],
            &provider,
            &capacity,
            &allocatable,
            launched,
        );
        let class = self
            .classes
            .iter()
            .find(|c| Some(&c.name) == pool.node_class.as_ref());
        let mut claim = Claim {
            id: format!("{}-{name}", pool.name),
            pool: pool.name.clone(),
            node_class: pool.node_class.clone(),
            version: 1,
            created_at: launched,
            options: vec![],
            labels: node_labels,
            annotations: Default::default(),
            taints: vec![],
            kubelet: pool.kubelet.clone(),
            pods: vec![],
            requests: Default::default(),
            reservation: reservation_of(&capacity),
            launch_attempts: 1,
            instance: Some(ClaimInstance {
                id: format!("i-{name}"),
                instance_type: instance_type.into(),
                zone: ZONE.into(),
                capacity_type: capacity_type.into(),
                price,
                provider_id: provider,
                launched_at: launched,
                capacity_reservation_id: None,
                capacity_reservation_type: None,
                capacity_reservation_interruptible: false,
            }),
            running_at: Some(launched),
            node_name: Some(name.into()),
            registered_at: Some(launched),
            stamp: Default::default(),
            disruption: Default::default(),
        };
        claim.stamp.nodepool_hash = Some(crate::config::hash::pool_hash(&pool));
        claim.stamp.nodeclass_hash = class.map(crate::config::hash::class_hash);
        // Observed long ago with no pods: quiet since launch.
        claim.disruption.last_pod_event_at = Some(launched);
        self.nodes.push(node);
        self.claims.push(claim);
        self
    }

    fn node(&mut self, name: &str, instance_type: &str) -> &mut Self {
        self.node_at(name, instance_type, "on-demand", t0())
    }

    fn pod_on(&mut self, node: &str, name: &str, cpu_millis: i64, memory_mib: i64) -> &mut Self {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "inflate"},
                         "creationTimestamp": t0().to_string()},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause",
                     "resources": {"requests": {"cpu": format!("{cpu_millis}m"), "memory": format!("{memory_mib}Mi")}}}]},
            "status": {"phase": "Running", "startTime": t0().to_string()}
        }))
        .expect("pod");
        self.pods.push(pod);
        self
    }

    /// A pod with no node yet (re-created by its controller, say).
    fn pending_pod(&mut self, name: &str, cpu_millis: i64, memory_mib: i64) -> &mut Self {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "inflate"},
                         "creationTimestamp": t0().to_string()},
            "spec": {"containers": [{"name": "c", "image": "pause",
                     "resources": {"requests": {"cpu": format!("{cpu_millis}m"), "memory": format!("{memory_mib}Mi")}}}]},
            "status": {"phase": "Pending"}
        }))
        .expect("pod");
        self.pending.push(pod);
        self
    }

    fn pods_on(&mut self, node: &str, n: usize, cpu_millis: i64, memory_mib: i64) -> &mut Self {
        for k in 0..n {
            self.pod_on(node, &format!("{node}-p{k}"), cpu_millis, memory_mib);
        }
        self
    }

    /// The claims' bookkeeping as `observe` would have left it at `at`.
    fn observed_at(&mut self, at: Timestamp) -> &mut Self {
        let snapshot = self.snapshot();
        let facts = snapshot::node_facts(&snapshot);
        let updates = observe(&facts, at);
        for u in updates {
            if let Some(c) = self.claims.iter_mut().find(|c| c.id == u.claim_id) {
                c.disruption = u.disruption;
            }
        }
        self
    }

    fn at(&mut self, now: Timestamp) -> &mut Self {
        self.now = now;
        self
    }

    fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            now: self.now,
            nodes: &self.nodes,
            pods: &self.pods,
            pending: &self.pending,
            claims: &self.claims,
            pools: &self.pools,
            invalid_pools: &self.invalid_pools,
            classes: &self.classes,
            resolved: &self.resolved,
            catalog: &self.catalog,
            pdbs: &self.pdbs,
            daemon_sets: &[],
            unavailable: &[],
            in_flight: &self.in_flight,
            buffers: &self.buffers,
            volumes: &self.volumes,
            settings: &self.settings,
            tuning: self.tuning,
            seed: 7,
        }
    }

    fn decide(&self) -> Plan {
        decide(&self.snapshot())
    }

    fn annotate_node(&mut self, node: &str, key: &str, value: &str) -> &mut Self {
        let n = self
            .nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some(node))
            .expect("node");
        n.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    fn annotate_pod(&mut self, pod: &str, key: &str, value: &str) -> &mut Self {
        let p = self
            .pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(pod))
            .expect("pod");
        p.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    fn not_ready(&mut self, node: &str, since: Timestamp) -> &mut Self {
        let n = self
            .nodes
            .iter_mut()
            .find(|n| n.metadata.name.as_deref() == Some(node))
            .expect("node");
        if let Some(st) = n.status.as_mut() {
            st.conditions = Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                last_transition_time: Some(Time(since)),
                ..Default::default()
            }]);
        }
        self
    }

    fn pdb(&mut self, name: &str, allowed: i32) -> &mut Self {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "inflate"}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}
        }))
        .expect("pdb");
        self.pdbs.push(pdb);
        self
    }

    /// Node `node` (claim `default-<node>`) is being removed for `reason`:
    /// a removal in flight, replaced first when `replace`.
    fn removing(&mut self, node: &str, reason: Reason, replace: bool) -> &mut Self {
        self.in_flight.push(InFlight {
            node: node.into(),
            claim_id: format!("default-{node}"),
            reason,
            replace,
            replacements: vec![],
        });
        self
    }

    fn budgets(&mut self, budgets: serde_json::Value) -> &mut Self {
        let mut d = crate::config::disruption::DisruptionSpec {
            consolidation_policy: Some(self.pools[0].disruption.policy.as_str().into()),
            consolidate_after: Some("0s".into()),
            ..Default::default()
        };
        d.budgets = Some(serde_json::from_value(budgets).expect("budgets"));
        self.pools[0].disruption =
            crate::config::Disruption::from_spec(Some(&d), "spec.disruption")
                .expect("valid budgets");
        self
    }
}

/// What a node's decision should be: `Some(reason)` removed for it, `None`
/// kept; and a piece of the reason text.
type Expect<'e> = (&'e str, Option<Reason>, &'e str);

fn check(plan: &Plan, expected: &[Expect<'_>]) {
    for (node, reason, text) in expected {
        let d = plan
            .decision(node)
            .unwrap_or_else(|| panic!("no decision for {node}: {plan:#?}"));
        let got = match d.verdict {
            Verdict::Disrupt { reason, .. } => Some(reason),
            Verdict::Keep => None,
        };
        assert_eq!(got, *reason, "{node}: {}", d.reason);
        assert!(
            d.reason.contains(text),
            "{node}: expected {text:?} in {:?}",
            d.reason
        );
    }
}

fn disrupted(plan: &Plan) -> Vec<&str> {
    plan.commands.iter().flat_map(|c| c.nodes()).collect()
}

// ------------------------------------------------------------ emptiness

fn when_empty_30s() -> serde_json::Value {
    serde_json::json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
                       "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}})
}

#[test]
fn empty_node_goes_30s_after_its_last_pod_left_and_not_before() {
    let mut w = World::with_pool(when_empty_30s());
    w.node("a", "m5.xlarge")
        .pods_on("a", 1, 500, 512)
        .observed_at(secs(0));
    // The pod leaves; the next observation (t = 10 s) sees the node empty.
    w.pods.clear();
    w.observed_at(secs(10));
    check(
        &w.at(secs(39)).decide(),
        &[("a", None, "empty for 29s, consolidateAfter is 30s")],
    );
    let plan = w.at(secs(40)).decide();
    check(&plan, &[("a", Some(Reason::Empty), "empty for 30s")]);
    let removals = plan.removals();
    assert_eq!(removals.len(), 1);
    assert!(!removals[0].replace);
    assert_eq!(removals[0].claim_id, "default-a");
}

#[test]
fn a_node_with_pods_is_not_empty_and_when_empty_never_consolidates_it() {
    let mut w = World::with_pool(when_empty_30s());
    w.node("a", "m5.xlarge")
        .pods_on("a", 1, 100, 100)
        .observed_at(secs(0));
    check(
        &w.at(secs(3600)).decide(),
        &[("a", None, "consolidates only empty nodes (WhenEmpty)")],
    );
}

#[test]
fn observe_measures_from_the_first_empty_sighting() {
    let mut w = World::with_pool(when_empty_30s());
    w.node("a", "m5.xlarge")
        .pods_on("a", 1, 100, 100)
        .observed_at(secs(0));
    let before = w.claims[0].disruption.clone();
    assert_eq!(before.empty_since, None);
    w.pods.clear();
    w.observed_at(secs(5)).observed_at(secs(20));
    assert_eq!(w.claims[0].disruption.empty_since, Some(secs(5)));
    assert_eq!(w.claims[0].disruption.last_pod_event_at, Some(secs(5)));
    // A pod comes back: no longer empty.
    w.pod_on("a", "back", 100, 100).observed_at(secs(30));
    assert_eq!(w.claims[0].disruption.empty_since, None);
    assert_eq!(w.claims[0].disruption.last_pod_event_at, Some(secs(30)));
}

#[test]
fn daemonset_and_finished_pods_do_not_keep_a_node_busy() {
    let mut w = World::with_pool(when_empty_30s());
    w.node("a", "m5.xlarge");
    let ds: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds1",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d"}]},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"}
    }))
    .expect("pod");
    w.pods.push(ds);
    w.pod_on("a", "job", 100, 100);
    w.pods[1].status.as_mut().expect("status").phase = Some("Succeeded".into());
    w.observed_at(secs(0));
    check(
        &w.at(secs(30)).decide(),
        &[("a", Some(Reason::Empty), "empty for 30s")],
    );
}

// ------------------------------------------------------------ expiration

#[test]
fn expiration_at_720h_and_not_before() {
    let mut w = World::new();
    w.node("a", "m5.xlarge").pods_on("a", 2, 1000, 1024);
    // Too busy to consolidate: nothing else would fit.
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("b", "m5.xlarge").pods_on("b", 3, 1000, 1024);
    let just_before = t0()
        .checked_add(SignedDuration::from_hours(720) - SignedDuration::from_secs(1))
        .expect("t");
    check(
        &w.at(just_before).decide(),
        &[("a", None, ""), ("b", None, "")],
    );
    let plan = w
        .at(t0()
            .checked_add(SignedDuration::from_hours(720))
            .expect("t"))
        .decide();
    check(
        &plan,
        &[
            ("a", Some(Reason::Expired), "expireAfter is 720h"),
            ("b", Some(Reason::Expired), "expired"),
        ],
    );
    // Forceful: budgets (10 % of 2 nodes = 1) do not limit it, and the pods need replacements first.
    assert_eq!(plan.commands.len(), 2);
    assert!(plan.removals().iter().all(|r| r.replace));
    assert!(plan.commands.iter().all(|c| c.validate_at.is_none()));
}

/// Karpenter (pkg/controllers/nodeclaim/expiration/suite_test.go): It("should delete NodeClaims
/// if the nodeClaim is expired but the node isn't"). Age counts from the claim (its launch), not
/// from the Node: a claim 721 hours old whose Node registered an hour ago expires.
#[test]
fn expiration_counts_from_the_claim_not_the_node() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    let now = t0()
        .checked_add(SignedDuration::from_hours(721))
        .expect("t");
    w.nodes[0].metadata.creation_timestamp = Some(Time(
        now.checked_sub(SignedDuration::from_hours(1)).expect("t"),
    ));
    check(
        &w.at(now).decide(),
        &[("a", Some(Reason::Expired), "expired")],
    );
}

#[test]
fn expiration_ignores_do_not_disrupt_and_pdbs() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge")
        .pods_on("a", 3, 1000, 1024)
        .pdb("inflate-pdb", 0)
        .annotate_node("a", snapshot::DO_NOT_DISRUPT, "true");
    check(
        &w.at(t0()
            .checked_add(SignedDuration::from_hours(721))
            .expect("t"))
            .decide(),
        &[("a", Some(Reason::Expired), "expired")],
    );
}

// ------------------------------------------------------------ drift

#[test]
fn drift_after_a_nodepool_label_change() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    check(&w.decide(), &[("a", None, "")]);
    w.pools[0].labels.insert("team".into(), "b".into());
    let plan = w.decide();
    check(
        &plan,
        &[(
            "a",
            Some(Reason::Drifted),
            "NodePool default template changed",
        )],
    );
    assert!(plan.removals()[0].replace, "its pods need a new node first");
    let replacement = plan.commands[0].replacement.as_ref().expect("replacement");
    assert_eq!(
        replacement.claims[0].labels.get("team").map(String::as_str),
        Some("b")
    );
    assert!(plan.commands[0].validate_at.is_some());
}

#[test]
fn drift_after_a_nodeclass_change() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    w.classes[0] = class(serde_json::json!({"tags": {"team": "b"}}));
    check(
        &w.decide(),
        &[("a", Some(Reason::Drifted), "NodeClass default changed")],
    );
}

#[test]
fn drift_when_the_resolved_ami_changes() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    w.claims[0].stamp.image_id = Some("ami-120".into());
    w.resolved.insert(
        "default".into(),
        ResolvedClass {
            image_ids: vec!["ami-120".into()],
            ..Default::default()
        },
    );
    check(&w.decide(), &[("a", None, "")]);
    w.resolved.insert(
        "default".into(),
        ResolvedClass {
            image_ids: vec!["ami-121".into()],
            ..Default::default()
        },
    );
    check(
        &w.decide(),
        &[(
            "a",
            Some(Reason::Drifted),
            "AMI ami-120 is no longer what NodeClass default resolves to",
        )],
    );
}

#[test]
fn drift_when_requirements_no_longer_allow_the_node() {
    let mut w = World::new();
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    w.pools[0].requirements.add(
        labels::INSTANCE_TYPE,
        crate::scheduling::Requirement::single("m5.2xlarge"),
    );
    check(
        &w.decide(),
        &[(
            "a",
            Some(Reason::Drifted),
            "label node.kubernetes.io/instance-type=m5.xlarge no longer allowed",
        )],
    );
}

#[test]
fn drift_waits_for_a_pdb_and_for_the_budget() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge")
        .pods_on("a", 3, 1000, 1024)
        .pdb("inflate-pdb", 0);
    w.pools[0].labels.insert("team".into(), "b".into());
    check(
        &w.decide(),
        &[(
            "a",
            None,
            "drifted (NodePool default template changed since launch), but pod default/a-p0 blocked by PDB inflate-pdb",
        )],
    );
    w.pdbs.clear();
    w.budgets(serde_json::json!([{"nodes": "0", "reasons": ["Drifted"]}]));
    check(&w.decide(), &[("a", None, "budget for Drifted exhausted")]);
}

// ------------------------------------------------------------ consolidation

/// Source walkthrough: three 4-CPU/16 GB nodes at 50 %, 30 % and 20 %.
fn three_nodes() -> World {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge", "c5.xlarge", "m5.large"]);
    w.node("a", "m5.xlarge").pods_on("a", 4, 500, 2048); // 2 CPU, 8 GiB
    w.node("b", "m5.xlarge").pods_on("b", 3, 400, 1600); // 1.2 CPU, 4.8 GiB
    w.node("c", "m5.xlarge").pods_on("c", 2, 400, 1600); // 0.8 CPU, 3.2 GiB
    w
}

#[test]
fn consolidation_example_moves_the_20_percent_node() {
    let w = three_nodes();
    let plan = w.decide();
    check(
        &plan,
        &[
            (
                "c",
                Some(Reason::Underutilized),
                "its pods fit on other nodes",
            ),
            ("a", None, "one consolidation at a time"),
            ("b", None, "one consolidation at a time"),
        ],
    );
    let cmd = &plan.commands[0];
    assert_eq!(cmd.method, "single-node-consolidation");
    assert!(cmd.replacement.is_none());
    assert_eq!(cmd.targets[0].pods.len(), 2);
    assert!((cmd.savings - 0.192).abs() < 1e-9);
    assert_eq!(
        cmd.validate_at,
        Some(t0().checked_add(SignedDuration::from_secs(15)).expect("t"))
    );
    // Re-validation on the same cluster passes; once the pods changed it fails.
    assert_eq!(validate(cmd, &w.snapshot()), Ok(()));
    let mut changed = three_nodes();
    changed.pod_on("c", "late", 100, 100);
    assert!(
        validate(cmd, &changed.snapshot())
            .expect_err("pods changed")
            .contains("pods on node c changed")
    );
}

#[test]
fn replacement_under_the_threshold_moves_nothing() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge", "m5a.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 2048);
    check(
        &w.decide(),
        &[("a", None, "savings 3.1 % below threshold 10 %")],
    );
    // With the threshold at 0 the balanced score still refuses 3 % for every pod…
    w.settings.consolidation_savings_threshold = 0.0;
    check(
        &w.decide(),
        &[("a", None, "balanced score 0.03 below 0.50")],
    );
    // …and without it (Karpenter's WhenEmptyOrUnderutilized) it is replaced.
    w.tuning.balanced = false;
    let plan = w.decide();
    check(
        &plan,
        &[(
            "a",
            Some(Reason::Underutilized),
            "replaced by one on-demand node (m5a.xlarge",
        )],
    );
    let r = plan.commands[0].replacement.as_ref().expect("replacement");
    assert_eq!(r.claims.len(), 1);
    assert!(
        r.claims[0]
            .options
            .iter()
            .all(|o| o.instance_type != "m5.xlarge")
    );
    assert!(plan.removals()[0].replace);
}

#[test]
fn never_replaced_by_the_same_type_and_capacity_type() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.settings.consolidation_savings_threshold = 0.0;
    w.tuning.balanced = false;
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 2048);
    check(
        &w.decide(),
        &[(
            "a",
            None,
            "the only replacement that fits is the same instance type and capacity type",
        )],
    );
}

#[test]
fn replaced_by_a_cheaper_smaller_node() {
    let mut w = World::new();
    w.node("a", "m5.2xlarge").pods_on("a", 2, 500, 1024);
    let plan = w.decide();
    check(
        &plan,
        &[(
            "a",
            Some(Reason::Underutilized),
            "replaced by one on-demand node (m5.large",
        )],
    );
    let r = plan.commands[0].replacement.as_ref().expect("replacement");
    assert!(r.price <= 0.384 * 0.9);
    assert_eq!(r.claims[0].pods.len(), 2);
    assert!(r.claims[0].stamp.nodepool_hash.is_some());
}

fn spot_pool() -> serde_json::Value {
    serde_json::json!({"template": {"spec": {
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}})
}

#[test]
fn on_demand_to_spot_where_the_pool_allows_spot() {
    let mut w = World::with_pool(spot_pool());
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 2048);
    let plan = w.decide();
    check(
        &plan,
        &[(
            "a",
            Some(Reason::Underutilized),
            "replaced by one spot node (m5.xlarge",
        )],
    );
}

#[test]
fn spot_to_spot_needs_the_gate_and_15_cheaper_types() {
    let mut w = World::with_pool(spot_pool());
    w.node_at("a", "m5.2xlarge", "spot", t0())
        .pods_on("a", 2, 500, 1024);
    check(
        &w.decide(),
        &[("a", None, "spot-to-spot consolidation is off")],
    );
    w.settings.spot_to_spot_consolidation = true;
    check(
        &w.decide(),
        &[("a", None, "needs 15 cheaper spot instance types")],
    );
}

#[test]
fn consolidate_after_is_measured_from_the_last_pod_event() {
    let mut w = three_nodes();
    w.pools[0].disruption.consolidate_after = Some(SignedDuration::from_secs(60));
    w.observed_at(secs(0));
    w.pod_on("c", "new", 100, 100).observed_at(secs(30));
    check(
        &w.at(secs(60)).decide(),
        &[("c", None, "pods changed 30s ago, consolidateAfter is 1m")],
    );
    assert!(!disrupted(&w.at(secs(90)).decide()).is_empty());
}

#[test]
fn multi_node_replaces_two_nodes_with_one_cheaper_node() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge", "m5.large"]);
    w.node("a", "m5.xlarge").pods_on("a", 2, 400, 1024);
    w.node("b", "m5.xlarge").pods_on("b", 2, 400, 1024);
    w.budgets(serde_json::json!([{"nodes": "100%"}]));
    let plan = w.decide();
    assert_eq!(plan.commands.len(), 1, "{plan:#?}");
    let cmd = &plan.commands[0];
    assert_eq!(cmd.method, "multi-node-consolidation");
    let removals = plan.removals();
    assert_eq!(removals.len(), 2);
    assert!(
        removals
            .iter()
            .all(|r| r.replace && r.reason == crate::model::RemovalReason::Underutilized)
    );
    assert_eq!(
        removals
            .iter()
            .map(|r| r.claim_id.as_str())
            .collect::<Vec<_>>(),
        cmd.targets
            .iter()
            .map(|t| t.claim_id.as_str())
            .collect::<Vec<_>>()
    );
    let r = cmd.replacement.as_ref().expect("one replacement");
    assert_eq!(r.claims.len(), 1);
    assert_eq!(r.claims[0].pods.len(), 4);
    assert_eq!(r.claims[0].options[0].instance_type, "m5.large");
    assert!((cmd.savings - (0.384 - 0.096)).abs() < 1e-9);
    assert_eq!(validate(cmd, &w.snapshot()), Ok(()));
    // Once one of them is already being removed, the planned move no longer holds.
    w.removing("a", Reason::Drifted, true);
    assert!(
        validate(cmd, &w.snapshot())
            .expect_err("disrupting")
            .contains("already being disrupted")
    );
}

#[test]
fn drift_is_revalidated() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    w.pools[0].labels.insert("team".into(), "b".into());
    let plan = w.decide();
    let cmd = plan.commands[0].clone();
    assert_eq!(validate(&cmd, &w.snapshot()), Ok(()));
    w.pools[0].labels.remove("team");
    assert!(
        validate(&cmd, &w.snapshot())
            .expect_err("reverted")
            .contains("no longer drifted")
    );
}

#[test]
fn balanced_prefers_fewer_pods_at_equal_savings() {
    // b and c cost the same; c holds fewer pods.
    let w = three_nodes();
    let plan = w.decide();
    assert_eq!(disrupted(&plan), ["c"]);
}

// ------------------------------------------------------------ blockers

#[test]
fn do_not_disrupt_true_on_a_pod() {
    let mut w = three_nodes();
    w.annotate_pod("c-p0", snapshot::DO_NOT_DISRUPT, "true");
    let plan = w.decide();
    check(&plan, &[("c", None, "do-not-disrupt on pod default/c-p0")]);
    assert!(!disrupted(&plan).contains(&"c"));
}

#[test]
fn do_not_disrupt_with_a_duration_expires() {
    let mut w = three_nodes();
    w.annotate_node("c", snapshot::DO_NOT_DISRUPT, "30m");
    check(
        &w.at(secs(600)).decide(),
        &[("c", None, "do-not-disrupt on node c until 10:30:00 UTC")],
    );
    check(
        &w.at(secs(1800)).decide(),
        &[("c", Some(Reason::Underutilized), "")],
    );
    let mut w = three_nodes();
    w.annotate_pod("c-p1", snapshot::DO_NOT_DISRUPT, "1h");
    check(
        &w.at(secs(3599)).decide(),
        &[(
            "c",
            None,
            "do-not-disrupt on pod default/c-p1 until 11:00:00",
        )],
    );
}

#[test]
fn a_pdb_that_allows_nothing_blocks_consolidation() {
    let mut w = three_nodes();
    w.pdb("inflate-pdb", 0);
    let plan = w.decide();
    assert!(plan.commands.is_empty());
    check(
        &plan,
        &[("c", None, "pod default/c-p0 blocked by PDB inflate-pdb")],
    );
    let mut w = three_nodes();
    w.pdb("inflate-pdb", 1);
    assert_eq!(disrupted(&w.decide()), ["c"]);
}

// ------------------------------------------------------------ budgets

fn empties(n: usize) -> World {
    let mut w = World::new();
    for k in 0..n {
        w.node(&format!("n{k:02}"), "m5.large");
    }
    w.observed_at(secs(0));
    w
}

#[test]
fn budgets_zero_one_and_ten_percent() {
    let mut w = empties(12);
    // Default 10 % of 12 nodes, rounded up: 2.
    assert_eq!(w.decide().commands.len(), 2);
    w.budgets(serde_json::json!([{"nodes": "0"}]));
    let plan = w.decide();
    assert!(plan.commands.is_empty());
    check(
        &plan,
        &[(
            "n00",
            None,
            "budget for Empty exhausted in NodePool default (0 of 12 nodes allowed, 0 disrupting)",
        )],
    );
    w.budgets(serde_json::json!([{"nodes": "1"}]));
    assert_eq!(w.decide().commands.len(), 1);
    w.budgets(serde_json::json!([{"nodes": "10%"}, {"nodes": "5", "reasons": ["Empty"]}]));
    assert_eq!(
        w.decide().commands.len(),
        2,
        "the minimum of the active budgets"
    );
}

#[test]
fn budgets_count_nodes_already_disrupting() {
    let mut w = empties(12);
    w.removing("n11", Reason::Drifted, true);
    let plan = w.decide();
    assert_eq!(plan.commands.len(), 1);
    check(&plan, &[("n11", None, "already being disrupted (Drifted)")]);
}

#[test]
fn a_budget_schedule_window() {
    let mut w = empties(4);
    // No disruption from 09:00 for 8 hours, every day.
    w.budgets(serde_json::json!([{"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}, {"nodes": "100%"}]));
    check(
        &w.at(secs(0)).decide(),
        &[("n00", None, "budget for Empty exhausted")],
    ); // 10:00
    let evening = secs(8 * 3600); // 18:00
    assert_eq!(w.at(evening).decide().commands.len(), 4);
}

#[test]
fn nodes_of_a_deleted_pool_drift_but_an_invalid_pool_is_left_alone() {
    let mut w = empties(0);
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    w.pools.clear();
    check(
        &w.decide(),
        &[(
            "a",
            Some(Reason::Drifted),
            "NodePool default no longer exists",
        )],
    );
    // A NodePool that failed validation (say, a bad cron) is not a deleted one.
    w.invalid_pools.push("default".into());
    check(&w.decide(), &[("a", None, "failed validation")]);
}

/// Karpenter `pkg/controllers/disruption/consolidation_test.go`,
/// Consolidation / Delete / It("can delete nodes while an invalid node pool
/// exists"): a pool whose instance types cannot be resolved does not stop
/// the others' disruption. Here the pool `bad` failed validation (it names
/// a missing EC2NodeClass, so it is left out of the configuration and
/// listed as invalid); of two m5.xlarge of `default`, `b`'s pod fits on `a`
/// and `b` is deleted with no replacement.
#[test]
fn can_delete_nodes_while_an_invalid_node_pool_exists() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 2, 500, 512);
    w.node("b", "m5.xlarge").pods_on("b", 1, 500, 512);
    w.invalid_pools.push("bad".into());
    let plan = w.decide();
    check(
        &plan,
        &[(
            "b",
            Some(Reason::Underutilized),
            "its pods fit on other nodes",
        )],
    );
    assert_eq!(disrupted(&plan), vec!["b"]);
    assert!(plan.commands[0].replacement.is_none());
}

#[test]
fn a_bad_cron_is_refused_by_validation() {
    let d = crate::config::disruption::DisruptionSpec {
        budgets: Some(vec![
            serde_json::from_value(
                serde_json::json!({"nodes": "0", "schedule": "61 * * * *", "duration": "1h"}),
            )
            .expect("spec"),
        ]),
        ..Default::default()
    };
    assert!(crate::config::Disruption::from_spec(Some(&d), "spec.disruption").is_err());
}

// ------------------------------------------------------------ repair

/// A node whose repairs were rolled back (their replacement failed) is
/// not repaired again before its claim's retry time; the backoff doubles
/// from 5 minutes to at most an hour.
#[test]
fn a_repair_rolled_back_waits_for_its_retry_time() {
    use crate::model::claim::repair_backoff;
    let mut w = empties(0);
    w.catalog = catalog(&["m5.xlarge"]);
    for k in 0..5 {
        w.node(&format!("n{k}"), "m5.xlarge")
            .pods_on(&format!("n{k}"), 1, 3000, 1024);
    }
    w.not_ready("n0", secs(100));
    w.settings.node_repair = true;
    let claim = w
        .claims
        .iter_mut()
        .find(|c| c.node_name.as_deref() == Some("n0"))
        .expect("claim of n0");
    claim.disruption.repair_failures = 2;
    claim.disruption.repair_retry_at = Some(secs(2500));
    check(
        &w.at(secs(1900)).decide(),
        &[(
            "n0",
            None,
            "Ready=Unknown, 2 repair(s) rolled back (replacement failed): retried after 10m",
        )],
    );
    check(
        &w.at(secs(2500)).decide(),
        &[("n0", Some(Reason::Unhealthy), "unhealthy: Ready=Unknown")],
    );
    let mins = |n| repair_backoff(n).as_secs() / 60;
    assert_eq!([1, 2, 3, 4, 5, 40].map(mins), [5, 10, 20, 40, 60, 60]);
}

#[test]
fn repair_after_30_minutes_behind_its_gate() {
    let mut w = empties(0);
    w.catalog = catalog(&["m5.xlarge"]);
    for k in 0..5 {
        w.node(&format!("n{k}"), "m5.xlarge")
            .pods_on(&format!("n{k}"), 1, 3000, 1024);
    }
    // Ready at registration, lost at 100 s (not a node that never came up).
    w.not_ready("n0", secs(100));
    w.settings.node_repair = false;
    check(
        &w.at(secs(1900)).decide(),
        &[("n0", None, "node repair is off")],
    );
    w.settings.node_repair = true;
    check(
        &w.at(secs(1899)).decide(),
        &[("n0", None, "Ready=Unknown, repaired after 1s")],
    );
    let plan = w.at(secs(1900)).decide();
    check(
        &plan,
        &[(
            "n0",
            Some(Reason::Unhealthy),
            "unhealthy: Ready=Unknown past its toleration; 1 replacement node(s) first",
        )],
    );
    // Voluntary (Karpenter 1.15): re-validated, a replacement first, no
    // deadline but the pool's terminationGracePeriod (none here).
    let command = &plan.commands[0];
    assert!(command.validate_at.is_some());
    assert_eq!(
        command.replacement.as_ref().map(|r| r.claims.len()),
        Some(1)
    );
    assert_eq!(plan.removals()[0].deadline, None);
    // Budgets cap it: nodes "0" for Unhealthy.
    w.budgets(serde_json::json!([{"nodes": "0", "reasons": ["Unhealthy"]}]));
    check(
        &w.decide(),
        &[("n0", None, "budget for Unhealthy exhausted")],
    );
    w.budgets(serde_json::json!([{"nodes": "10%"}]));
    // do-not-repair vetoes it; do-not-disrupt does not.
    w.annotate_node("n0", "karpenter.sh/do-not-disrupt", "true");
    check(&w.decide(), &[("n0", Some(Reason::Unhealthy), "unhealthy")]);
    w.annotate_node("n0", "karpenter.sh/do-not-repair", "true");
    check(
        &w.decide(),
        &[(
            "n0",
            None,
            "repair is blocked through the \"karpenter.sh/do-not-repair\" annotation",
        )],
    );
    w.annotate_node("n0", "karpenter.sh/do-not-repair", "false");
    check(&w.decide(), &[("n0", Some(Reason::Unhealthy), "unhealthy")]);
    // 2 of 5 unhealthy (more than 20 % of 5, rounded up: 1): paused.
    w.not_ready("n1", secs(100));
    check(
        &w.decide(),
        &[("n0", None, "2 of 5 nodes of NodePool default are unhealthy")],
    );
}

/// The circuit breaker rounds up: one unhealthy node of three is not more
/// than 20 % of the pool (ceil(0.6) = 1), so it is repaired.
#[test]
fn repair_rounds_the_unhealthy_share_up_in_small_pools() {
    let mut w = empties(0);
    w.catalog = catalog(&["m5.xlarge"]);
    for k in 0..3 {
        w.node(&format!("n{k}"), "m5.xlarge")
            .pods_on(&format!("n{k}"), 1, 3000, 1024);
    }
    w.not_ready("n0", secs(0));
    w.settings.node_repair = true;
    check(
        &w.at(secs(1800)).decide(),
        &[("n0", Some(Reason::Unhealthy), "unhealthy")],
    );
}

#[test]
fn pods_are_not_moved_onto_a_not_ready_node() {
    let mut w = three_nodes();
    w.not_ready("a", secs(0));
    w.not_ready("b", secs(0));
    // c's pods would fit on a or b, but both are NotReady: a new (cheaper) node takes them.
    let plan = w.decide();
    assert_eq!(disrupted(&plan), ["c"]);
    let r = plan.commands[0]
        .replacement
        .as_ref()
        .expect("c is replaced, not deleted");
    assert_eq!(r.claims[0].pods.len(), 2);
}

/// Karpenter `pkg/controllers/disruption/consolidation_test.go`,
/// Consolidation / Delete / It("should consider initialized nodes before
/// uninitialized nodes"): among many nodes that have not come up, one
/// initialized node has room; a small node's pod is moved there and the
/// small node deleted (never planned onto an uninitialized one). Here five
/// m5.xlarge whose Ready condition is still Unknown (not initialized) and
/// one Ready m5.xlarge `z` each run a 2-CPU pod; the m5.large `small` runs a
/// 1-CPU pod: `small` is deleted with no replacement, the only place its pod
/// can go being `z`.
#[test]
fn should_consider_initialized_nodes_before_uninitialized_nodes() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge", "m5.large"]);
    for k in 0..5 {
        let name = format!("u{k}");
        w.node(&name, "m5.xlarge").pods_on(&name, 1, 2000, 2048);
        w.not_ready(&name, secs(0));
    }
    w.node("z", "m5.xlarge").pods_on("z", 1, 2000, 2048);
    w.node("small", "m5.large").pods_on("small", 1, 1000, 1024);
    let plan = w.decide();
    check(
        &plan,
        &[(
            "small",
            Some(Reason::Underutilized),
            "its pods fit on other nodes",
        )],
    );
    assert_eq!(disrupted(&plan), ["small"]);
    assert!(plan.commands[0].replacement.is_none());
    // With `z` not initialized either, the pod has nowhere to go but a new
    // node: `small` is not deleted.
    w.not_ready("z", secs(0));
    let plan = w.decide();
    assert!(
        plan.commands
            .iter()
            .all(|c| !c.nodes().any(|n| n == "small") || c.replacement.is_some()),
        "{plan:#?}"
    );
}

/// Karpenter `pkg/controllers/disruption/suite_test.go`, It("should not
/// consider candidates that are nominated"): a node a pending pod is
/// nominated to is no candidate. Two ways pods are headed for a node here:
/// - a replacement: empty `a` was launched for `b`'s pods while `b` drifts
///   away; until they have left `b`, `a` is kept;
/// - a pending pod: once `b`'s command is done and `b` gone, its pods are
///   re-created pending before they are bound to `a`; while one pends and
///   would be placed on `a`, `a` is kept (with `consolidateAfter: 0s` it
///   would otherwise be decided Empty at once).
///
/// Once the pod is bound (`a` holds it) or gone, `a` is a node like any
/// other (empty: removed). Where we differ on purpose: Karpenter nominates
/// the node its own scheduling simulation picked for a pod, for a window
/// (`nominationWindow`, twice the batch's max duration, at least 10 s);
/// we protect the node the provisioner's solve would place a pending pod
/// on now, re-solved every decision, for as long as the pod pends (and
/// we bind pods ourselves, so the window is short).
#[test]
fn should_not_consider_candidates_that_are_nominated() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.budgets(serde_json::json!([{"nodes": "100%"}]));
    w.node("a", "m5.xlarge");
    w.node("b", "m5.xlarge").pods_on("b", 2, 500, 512);
    w.in_flight.push(InFlight {
        node: "b".into(),
        claim_id: "default-b".into(),
        reason: Reason::Drifted,
        replace: true,
        replacements: vec!["default-a".into()],
    });
    check(&w.decide(), &[("a", None, "launched for the pods of b")]);
    // `b`'s command has finished and `b` is gone; its pods pend, re-created.
    w.in_flight.clear();
    w.pods.clear();
    w.nodes.retain(|n| n.metadata.name.as_deref() != Some("b"));
    w.claims.retain(|c| c.id != "default-b");
    w.pending_pod("b-p0", 500, 512)
        .pending_pod("b-p1", 500, 512);
    let plan = w.decide();
    check(
        &plan,
        &[("a", None, "nominated for pending pods: 2 (default/b-p0, …)")],
    );
    assert!(plan.commands.is_empty(), "{plan:#?}");
    // One bound, one still pending: `a` holds a pod and is still nominated.
    let bound = w.pending.remove(0);
    w.pod_on("a", bound.metadata.name.as_deref().expect("name"), 500, 512);
    check(
        &w.decide(),
        &[(
            "a",
            None,
            "nominated for pending pods: default/b-p1 would be",
        )],
    );
    // Both bound: `a` is an ordinary node with pods (nowhere else to go).
    w.pending.clear();
    w.pod_on("a", "b-p1", 500, 512);
    let plan = w.decide();
    assert!(plan.commands.is_empty(), "{plan:#?}");
    let d = plan.decision("a").expect("a");
    assert!(!d.reason.contains("nominated"), "{}", d.reason);
    // The pods gone: `a` is empty like any other.
    w.pods.clear();
    check(&w.decide(), &[("a", Some(Reason::Empty), "empty")]);
}

/// The negative of [`should_not_consider_candidates_that_are_nominated`]:
/// a pending pod that would not be placed on `a` — too big for it, or not
/// tolerating its taint — nominates nothing, and empty `a` is removed.
#[test]
fn a_pending_pod_that_does_not_fit_a_node_does_not_nominate_it() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge");
    // m5.xlarge: 4 vCPU; this pod asks for 8.
    w.pending_pod("big", 8000, 512);
    check(&w.decide(), &[("a", Some(Reason::Empty), "empty")]);
    // A pod small enough, but `a` carries a taint it does not tolerate.
    w.pending.clear();
    w.pending_pod("small", 500, 512);
    check(
        &w.decide(),
        &[("a", None, "nominated for pending pods: default/small")],
    );
    let a = w
        .nodes
        .iter_mut()
        .find(|n| n.metadata.name.as_deref() == Some("a"))
        .expect("a");
    a.spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new)
        .push(k8s_openapi::api::core::v1::Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
    check(&w.decide(), &[("a", Some(Reason::Empty), "empty")]);
}

/// Re-validation (15 s after the decision) drops an Empty command for a
/// node that a pending pod has since been nominated to.
#[test]
fn an_empty_command_is_dropped_when_a_pending_pod_is_nominated_to_its_node() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge");
    let plan = w.decide();
    check(&plan, &[("a", Some(Reason::Empty), "empty")]);
    let cmd = &plan.commands[0];
    assert_eq!(validate(cmd, &w.snapshot()), Ok(()));
    w.pending_pod("p", 500, 512);
    let err = validate(cmd, &w.snapshot()).expect_err("nominated");
    assert!(err.contains("nominated for pending pods"), "{err}");
}

/// Karpenter `pkg/controllers/disruption/emptiness_test.go`, It("considers
/// pending pods when consolidating"): a large node whose one small pod a
/// cheaper node would hold is not replaced while a pending pod that only
/// the large node can hold waits for it. Here an m5.2xlarge (8 vCPU) runs
/// a 1-CPU pod, for which an m5.large (2 vCPU) would do, and a 6-CPU pod
/// pends.
#[test]
fn considers_pending_pods_when_consolidating() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.large", "m5.2xlarge"]);
    w.node("big", "m5.2xlarge").pods_on("big", 1, 1000, 512);
    // Without the pending pod the node is replaced by the cheaper one.
    let plan = w.decide();
    check(&plan, &[("big", Some(Reason::Underutilized), "m5.large")]);
    w.pending_pod("huge", 6000, 512);
    let plan = w.decide();
    check(
        &plan,
        &[("big", None, "nominated for pending pods: default/huge")],
    );
    assert!(plan.commands.is_empty(), "{plan:#?}");
}

/// Karpenter `pkg/controllers/disruption/consolidation_test.go`, Delete /
/// It("can delete nodes with a permanently pending pod"): a pending pod no
/// node can hold (its node selector matches no node and no NodePool)
/// nominates nothing and blocks nothing: `b`'s pod moves beside `a`'s and
/// `b` goes; the pod stays pending.
#[test]
fn can_delete_nodes_with_a_permanently_pending_pod() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 2, 500, 512);
    w.node("b", "m5.xlarge").pods_on("b", 1, 500, 512);
    w.pending_pod("pending", 500, 512);
    w.pending[0].spec.as_mut().expect("spec").node_selector =
        Some([("non-existent".to_owned(), "node-label".to_owned())].into());
    let plan = w.decide();
    check(
        &plan,
        &[(
            "b",
            Some(Reason::Underutilized),
            "its pods fit on other nodes",
        )],
    );
    assert_eq!(disrupted(&plan), ["b"]);
    let a = plan.decision("a").expect("a");
    assert!(!a.reason.contains("nominated"), "{}", a.reason);
}

/// A move does not count on the room a pending pod will take. Karpenter
/// simulates the pending pods together with the candidates' pods
/// (`SimulateScheduling`, `pkg/controllers/disruption/helpers.go`); we
/// place the pending pods first and hold their room for the whole
/// decision. Two 4-vCPU nodes run one pod each, 1 and 1.5 CPU: either pod
/// fits beside the other, so one node goes. With a 2-CPU pod pending,
/// whichever node it would be placed on keeps too little room for the
/// other node's pod, and nothing moves.
#[test]
fn a_move_does_not_count_on_the_room_a_pending_pod_will_take() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 1, 1000, 512);
    w.node("b", "m5.xlarge").pods_on("b", 1, 1500, 512);
    assert_eq!(disrupted(&w.decide()).len(), 1);
    w.pending_pod("p", 2000, 512);
    let plan = w.decide();
    assert!(plan.commands.is_empty(), "{plan:#?}");
    let nominated: Vec<&str> = ["a", "b"]
        .into_iter()
        .filter(|n| {
            plan.decision(n)
                .expect("decision")
                .reason
                .contains("nominated for pending pods: default/p")
        })
        .collect();
    assert_eq!(nominated.len(), 1, "{plan:#?}");
}

/// Karpenter `pkg/controllers/node/termination/suite_test.go`,
/// Termination / Reconciliation / It("should delete nodes with duplicate
/// nodeclaims"): a Node two NodeClaims point at is still removed. Here the
/// empty node `a` has a second claim of ours naming the same instance (a
/// copy under another id, as a restored state could hold): `a` is removed
/// as empty all the same, once.
#[test]
fn should_delete_nodes_with_duplicate_nodeclaims() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge");
    let mut twin = w.claims[0].clone();
    twin.id = "default-a-2".into();
    w.claims.push(twin);
    let plan = w.decide();
    check(&plan, &[("a", Some(Reason::Empty), "empty")]);
    assert_eq!(disrupted(&plan), ["a"]);
}

// ------------------------------------------------------------ output

#[test]
fn every_node_gets_a_reason_and_foreign_nodes_are_never_touched() {
    let mut w = three_nodes();
    let foreign = SimCluster::ready_node(
        "foreign",
        BTreeMap::new(),
        vec![],
        "aws:///x/i-foreign",
        &Resources::new(4000, 16384 * MIB, 110),
        &Resources::new(4000, 16384 * MIB, 110),
        t0(),
    );
    w.nodes.push(foreign);
    let plan = w.decide();
    assert_eq!(plan.nodes.len(), 4);
    assert!(plan.nodes.iter().all(|d| !d.reason.is_empty()));
    check(&plan, &[("foreign", None, "not launched by nodewright")]);
}

// ------------------------------------------------------------ properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random small clusters: no budget is exceeded, no do-not-disrupt node
    /// is disrupted voluntarily, and the decision is deterministic.
    #[test]
    fn decisions_respect_budgets_and_blockers(
        loads in proptest::collection::vec(0usize..5, 1..8),
        blocked in proptest::collection::vec(any::<bool>(), 8),
        budget in 0usize..3,
        age_hours in 0i64..800,
    ) {
        let mut w = World::new();
        w.budgets(serde_json::json!([{"nodes": budget.to_string()}]));
        for (k, n) in loads.iter().enumerate() {
            let name = format!("n{k}");
            w.node(&name, "m5.xlarge").pods_on(&name, *n, 400, 1024);
            if blocked[k] {
                w.annotate_node(&name, snapshot::DO_NOT_DISRUPT, "true");
            }
        }
        w.observed_at(secs(0));
        w.at(t0().checked_add(SignedDuration::from_hours(age_hours)).expect("t"));
        let plan = w.decide();
        let voluntary: Vec<&Command> = plan.commands.iter().filter(|c| !c.reason.is_forceful()).collect();
        let voluntary_nodes: usize = voluntary.iter().map(|c| c.targets.len()).sum();
        prop_assert!(voluntary_nodes <= budget, "{voluntary_nodes} > {budget}");
        for c in &voluntary {
            for t in &c.targets {
                let k: usize = t.node[1..].parse().expect("index");
                prop_assert!(!blocked[k], "do-not-disrupt node {} disrupted for {:?}", t.node, c.reason);
            }
        }
        prop_assert_eq!(&plan, &w.decide());
        // Every node has exactly one decision, and no node is in two commands.
        prop_assert_eq!(plan.nodes.len(), loads.len());
        let mut seen = std::collections::BTreeSet::new();
        for n in disrupted(&plan) {
            prop_assert!(seen.insert(n.to_owned()));
        }
    }
}

/// `consolidationPolicy: Balanced` (Karpenter's balanced_integration_test.go,
/// "Balanced Consolidation / Single-Node"): a move must save at least half
/// as large a share of the pool's cost as the share of the pool's
/// disruption it causes (k = 2). A node whose replacement saves 3 % of the
/// pool's cost is kept; an oversized one is replaced.
#[test]
fn balanced_keeps_a_well_packed_node_and_replaces_an_oversized_one() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge", "m5a.xlarge"]);
    w.pools[0].disruption.policy = crate::config::ConsolidationPolicy::Balanced;
    // Only the policy's own score: no savings threshold, no pod-level score.
    w.settings.consolidation_savings_threshold = 0.0;
    w.tuning.balanced = false;
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 2048);
    check(
        &w.decide(),
        &[(
            "a",
            None,
            "NodePool default is Balanced: saving 3.1 % of its cost does not justify 100.0 % of its disruption (score 0.03 below 0.50)",
        )],
    );
    // The same pool under WhenEmptyOrUnderutilized replaces it.
    w.pools[0].disruption.policy = crate::config::ConsolidationPolicy::WhenEmptyOrUnderutilized;
    check(&w.decide(), &[("a", Some(Reason::Underutilized), "")]);

    let mut w = World::new();
    w.pools[0].disruption.policy = crate::config::ConsolidationPolicy::Balanced;
    w.settings.consolidation_savings_threshold = 0.0;
    w.tuning.balanced = false;
    w.node("a", "m5.2xlarge").pods_on("a", 2, 500, 1024);
    check(
        &w.decide(),
        &[(
            "a",
            Some(Reason::Underutilized),
            "replaced by one on-demand node",
        )],
    );
}

/// Every node of a Balanced pool weighs 1 besides its pods' eviction
/// costs (Karpenter's `node_disruption_cost = 1 + Σ pod eviction costs`):
/// a node with 1 pod beside one with 2 causes 2/5 of the pool's
/// disruption, not 1/3 (its share of the pods).
#[test]
fn balanced_counts_each_node_besides_its_pods() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.large", "m5.xlarge", "m5.2xlarge"]);
    w.pools[0].disruption.policy = crate::config::ConsolidationPolicy::Balanced;
    w.settings.consolidation_savings_threshold = 0.0;
    w.tuning.balanced = false;
    // a could be an m5.large (saving $0.096/h, 16.7 % of the pool's
    // $0.576/h); b is full.
    w.node("a", "m5.xlarge").pods_on("a", 1, 500, 1024);
    w.node("b", "m5.2xlarge").pods_on("b", 2, 3900, 4096);
    check(
        &w.decide(),
        &[(
            "a",
            None,
            "NodePool default is Balanced: saving 16.7 % of its cost does not justify 40.0 % of its disruption (score 0.42 below 0.50)",
        )],
    );
}

// ------------------------------------------------------------ Karpenter's Balanced tests
//
// Translations of kubernetes-sigs/karpenter pkg/controllers/disruption/
// balanced_integration_test.go, the cluster-level cases of
// balanced_scoring_test.go (ShouldDisrupt, sortCandidates,
// EmitBalancedMultiNodeEvents) and singlenodeconsolidation_test.go
// (Candidate Shuffling). The score's arithmetic is tested in
// `disruption::balanced`. Karpenter's fake catalog (32-CPU nodes) becomes
// the test catalog's m5 types; Karpenter's ConsolidationApproved event
// becomes the command's summary (the decision's reason), which names each
// Balanced pool's score, threshold and k. Where nodewright differs on
// purpose (its savings threshold, its own pod-level score), the test says so.

mod balanced_karpenter {
    use super::*;
    use crate::config::ConsolidationPolicy;

    /// One Balanced pool `default`, budget 100 %, consolidateAfter 0s, on-demand.
    fn world() -> World {
        let mut w = World::new();
        w.pools[0].disruption.policy = ConsolidationPolicy::Balanced;
        w.budgets(serde_json::json!([{"nodes": "100%"}]));
        w
    }

    fn only_policy_score(w: &mut World) {
        w.settings.consolidation_savings_threshold = 0.0;
        w.tuning.balanced = false;
    }

    fn second_pool(w: &mut World, name: &str, policy: &str) {
        w.pools.push(pool(
            name,
            serde_json::json!({
                "template": {"spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                }},
                "disruption": {"consolidationPolicy": policy, "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}
            }),
        ));
    }

    fn command_of<'p>(plan: &'p Plan, node: &str) -> &'p Command {
        plan.commands
            .iter()
            .find(|c| c.nodes().any(|n| n == node))
            .unwrap_or_else(|| panic!("no command for {node}: {plan:#?}"))
    }

    /// Integration "Single-Node" / It("should approve replacing an oversized node"), and
    /// balanced_scoring_test.go EmitBalancedMultiNodeEvents / It("should emit approved event
    /// for approved pool results"): the approved move says its score, `>= threshold 0.50`, `k: 2`.
    #[test]
    fn balanced_an_approved_move_says_its_score_threshold_and_k() {
        let mut w = world();
        w.node("a", "m5.2xlarge").pod_on("a", "p", 500, 512);
        let plan = w.decide();
        check(
            &plan,
            &[(
                "a",
                Some(Reason::Underutilized),
                "NodePool default is Balanced: saving",
            )],
        );
        let cmd = command_of(&plan, "a");
        assert!(cmd.replacement.is_some());
        assert!(
            cmd.summary.contains(">= threshold 0.50, k: 2"),
            "{}",
            cmd.summary
        );
    }

    /// balanced_scoring_test.go EmitBalancedMultiNodeEvents / It("should not emit events for
    /// rejected pool results"): a refused move leaves no approval, only the refusal as the reason.
    #[test]
    fn balanced_a_refused_move_says_why_and_claims_no_approval() {
        let mut w = world();
        only_policy_score(&mut w);
        w.catalog = catalog(&["m5.xlarge", "m5a.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 2048);
        let plan = w.decide();
        check(&plan, &[("a", None, "does not justify")]);
        assert!(plan.commands.is_empty());
        let reason = &plan.decision("a").expect("a").reason;
        assert!(!reason.contains(">= threshold"), "{reason}");
    }

    /// Integration "Multi-Node" / It("should approve consolidating multiple underutilized nodes"):
    /// three m5.2xlarge holding one 1-CPU pod each go in one command.
    #[test]
    fn balanced_consolidates_several_underutilized_nodes_at_once() {
        let mut w = world();
        for n in ["a", "b", "c"] {
            w.node(n, "m5.2xlarge")
                .pod_on(n, &format!("{n}-p"), 1000, 1024);
        }
        let plan = w.decide();
        assert_eq!(plan.commands.len(), 1, "{plan:#?}");
        let cmd = &plan.commands[0];
        assert_eq!(cmd.method, "multi-node-consolidation");
        assert!(cmd.targets.len() >= 2, "{:?}", disrupted(&plan));
        assert!(cmd.summary.contains("k: 2"), "{}", cmd.summary);
    }

    /// Integration "Budgets" / It("should block disruption when budget is 0%").
    #[test]
    fn balanced_a_budget_of_zero_blocks_the_move() {
        let mut w = world();
        w.budgets(serde_json::json!([{"nodes": "0%"}]));
        w.node("a", "m5.2xlarge").pod_on("a", "p", 500, 512);
        let plan = w.decide();
        assert!(plan.commands.is_empty(), "{plan:#?}");
        assert!(
            !plan
                .decision("a")
                .expect("a")
                .reason
                .contains(">= threshold")
        );
    }

    /// Integration "Priority Ordering" / It("should consolidate empty nodes before non-empty nodes
    /// when budget is limited"): with a budget of one node, the empty node goes (emptiness runs
    /// before consolidation), the underutilized one stays.
    #[test]
    fn balanced_an_empty_node_goes_before_an_underutilized_one() {
        let mut w = world();
        w.budgets(serde_json::json!([{"nodes": "1"}]));
        w.node("empty", "m5.2xlarge");
        w.node("used", "m5.2xlarge").pod_on("used", "p", 500, 512);
        let plan = w.decide();
        assert_eq!(plan.commands.len(), 1, "{plan:#?}");
        assert_eq!(disrupted(&plan), ["empty"]);
        check(&plan, &[("used", None, "")]);
    }

    /// Integration "Decision and Savings" / It("should choose delete when pods fit on existing
    /// nodes"): a's one pod fits on b (five pods); a is deleted, saving its whole price.
    #[test]
    fn balanced_deletes_when_the_pods_fit_on_other_nodes() {
        let mut w = world();
        w.node("a", "m5.2xlarge").pod_on("a", "p", 1000, 1024);
        w.node("b", "m5.2xlarge").pods_on("b", 5, 1000, 1024);
        let plan = w.decide();
        let cmd = command_of(&plan, "a");
        assert!(cmd.replacement.is_none(), "{cmd:#?}");
        assert!((cmd.savings - 0.384).abs() < 1e-9, "{}", cmd.savings);
        check(&plan, &[("b", None, "")]);
    }

    /// Integration "Decision and Savings" / It("should choose replace when pods need a new cheaper
    /// node"): a 2-CPU pod on an m5.2xlarge moves to a cheaper new node.
    #[test]
    fn balanced_replaces_when_the_pods_need_a_new_cheaper_node() {
        let mut w = world();
        w.node("a", "m5.2xlarge").pod_on("a", "p", 2000, 1024);
        let plan = w.decide();
        let cmd = command_of(&plan, "a");
        assert!(cmd.replacement.is_some(), "{cmd:#?}");
        assert!(cmd.savings > 0.0 && cmd.savings < 0.384, "{}", cmd.savings);
    }

    /// Integration "Ratio Sort in Multi-Node" / It("should select highest-ratio candidates first
    /// when nodes have heterogeneous prices and pod counts"): b (m5.2xlarge, 3 pods: $0.096/h per
    /// unit of disruption) comes before c (m5.large, 1 pod: $0.048) and a (m5.2xlarge, 10 pods:
    /// $0.035), though c has fewer pods.
    #[test]
    fn balanced_multi_node_takes_the_highest_savings_ratio_first() {
        let mut w = world();
        w.node("a", "m5.2xlarge").pods_on("a", 10, 50, 64);
        w.node("b", "m5.2xlarge").pods_on("b", 3, 50, 64);
        w.node("c", "m5.large").pods_on("c", 1, 50, 64);
        let plan = w.decide();
        let cmd = command_of(&plan, "b");
        let order: Vec<&str> = cmd.nodes().collect();
        let (ib, ic) = (
            order.iter().position(|n| *n == "b"),
            order.iter().position(|n| *n == "c"),
        );
        if let (Some(ib), Some(ic)) = (ib, ic) {
            assert!(ib < ic, "{order:?}");
        }
        assert_eq!(order.first(), Some(&"b"), "{order:?}");
    }

    /// Integration "Mixed-Policy NodePools" / It("should apply scoring to Balanced pools while
    /// non-Balanced pools consolidate normally"), and balanced_scoring_test.go
    /// EmitBalancedMultiNodeEvents / It("should skip pools missing from perPoolResults"): both
    /// nodes go; only the Balanced pool's score is reported.
    #[test]
    fn balanced_and_other_pools_consolidate_together_and_only_balanced_is_scored() {
        let mut w = world();
        second_pool(&mut w, "other", "WhenEmptyOrUnderutilized");
        w.node("bal", "m5.2xlarge").pod_on("bal", "p1", 500, 512);
        w.node_in(1, "def", "m5.2xlarge", "on-demand", t0())
            .pod_on("def", "p2", 500, 512);
        let plan = w.decide();
        let mut gone = disrupted(&plan);
        gone.sort_unstable();
        assert_eq!(gone, ["bal", "def"], "{plan:#?}");
        let summaries: Vec<&str> = plan.commands.iter().map(|c| c.summary.as_str()).collect();
        assert!(
            summaries
                .iter()
                .any(|s| s.contains("NodePool default is Balanced") && s.contains("k: 2")),
            "{summaries:?}"
        );
        assert!(
            !summaries
                .iter()
                .any(|s| s.contains("NodePool other is Balanced")),
            "{summaries:?}"
        );
    }

    /// balanced_scoring_test.go ShouldDisrupt / It("should accept Balanced candidates") and
    /// It("should accept WhenEmptyOrUnderutilized candidates"): a node in use is a consolidation
    /// candidate under both policies (here: an oversized one is replaced under both).
    #[test]
    fn balanced_and_when_empty_or_underutilized_nodes_are_candidates() {
        for policy in [
            ConsolidationPolicy::Balanced,
            ConsolidationPolicy::WhenEmptyOrUnderutilized,
        ] {
            let mut w = world();
            w.pools[0].disruption.policy = policy;
            w.node("a", "m5.2xlarge").pod_on("a", "p", 500, 512);
            check(
                &w.decide(),
                &[("a", Some(Reason::Underutilized), "underutilized")],
            );
        }
    }

    /// balanced_scoring_test.go ScoreMove / It("should REJECT a move when EstimatedSavings excludes
    /// spot offerings for an on-demand-only NodePool"): a's replacement at on-demand prices saves
    /// too little for its disruption; a spot price (which the pool does not allow) would have
    /// passed: with spot allowed the same move is taken.
    #[test]
    fn balanced_savings_use_only_the_capacity_types_the_pool_allows() {
        let build = |spot: bool| {
            let mut w = world();
            only_policy_score(&mut w);
            if spot {
                w.pools[0].requirements = pool(
                    "default",
                    serde_json::json!({"template": {"spec": {
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]}],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}),
                )
                .requirements;
            }
            // (No spot m5.2xlarge: the dearest spot option a replacement
            // may get is then an m5.xlarge.)
            w.catalog
                .offerings
                .retain(|o| !(o.instance_type == "m5.2xlarge" && o.capacity_type == "spot"));
            // a: 2.5 CPU on an m5.2xlarge; b: full.
            w.node("a", "m5.2xlarge").pods_on("a", 5, 500, 256);
            w.node("b", "m5.2xlarge").pods_on("b", 1, 7800, 1024);
            w
        };
        check(&build(false).decide(), &[("a", None, "does not justify")]);
        let plan = build(true).decide();
        check(&plan, &[("a", Some(Reason::Underutilized), "spot")]);
    }

    /// balanced_test.go It("should reject when nodepool cost is zero"), on a cluster: a Balanced
    /// pool whose nodes have no known price has nothing to weigh a move against; nothing moves.
    /// (nodewright used to skip the score and delete.)
    #[test]
    fn balanced_a_pool_without_a_known_price_is_not_consolidated() {
        let mut w = world();
        only_policy_score(&mut w);
        w.node("a", "m5.xlarge").pod_on("a", "p1", 200, 256);
        w.node("b", "m5.xlarge").pod_on("b", "p2", 200, 256);
        for c in &mut w.claims {
            if let Some(i) = c.instance.as_mut() {
                i.price = 0.0;
            }
        }
        let plan = w.decide();
        assert!(plan.commands.is_empty(), "{plan:#?}");
        check(
            &plan,
            &[
                ("a", None, "does not justify"),
                ("b", None, "does not justify"),
            ],
        );
    }

    /// balanced_adversarial_test.go It("should use source pricing that ignores availability"):
    /// a's m5.2xlarge on-demand offering is no longer offered (as if out of capacity), yet a is
    /// priced at what its claim was launched at, $0.384/h, and its savings count from there.
    #[test]
    fn balanced_a_node_is_priced_at_what_it_was_launched_at() {
        let mut w = world();
        w.catalog
            .offerings
            .retain(|o| !(o.instance_type == "m5.2xlarge" && o.capacity_type == "on-demand"));
        w.node("a", "m5.2xlarge").pod_on("a", "p", 500, 512);
        let plan = w.decide();
        let cmd = command_of(&plan, "a");
        assert!(
            (cmd.targets[0].price - 0.384).abs() < 1e-12,
            "{}",
            cmd.targets[0].price
        );
        let replacement = cmd.replacement.as_ref().expect("a replacement");
        assert!(
            (cmd.savings - (0.384 - replacement.price)).abs() < 1e-9,
            "{cmd:#?}"
        );
    }

    /// Candidates ranked, seen through the single-node pass limited to `n` evaluations.
    fn evaluated(w: &mut World, n: usize) -> Vec<String> {
        w.tuning.max_multi_node = 1;
        w.tuning.max_single_node = n;
        let plan = w.decide();
        let mut out: Vec<String> = plan
            .nodes
            .iter()
            .filter(|d| !d.reason.contains("not evaluated this pass"))
            .map(|d| d.node.clone())
            .collect();
        out.sort();
        out
    }

    /// balanced_scoring_test.go sortCandidates / It("should sort Balanced candidates by savings
    /// ratio (highest first)"): a (m5.2xlarge, 1 pod: ratio 0.192) before c (m5.xlarge, 3 pods:
    /// 0.048) before b (m5.large, 8 pods: 0.011).
    #[test]
    fn balanced_candidates_are_ranked_by_savings_ratio() {
        let mut w = world();
        w.node("a", "m5.2xlarge").pods_on("a", 1, 100, 128);
        w.node("b", "m5.large").pods_on("b", 8, 100, 128);
        w.node("c", "m5.xlarge").pods_on("c", 3, 100, 128);
        assert_eq!(evaluated(&mut w, 1), ["a"]);
        assert_eq!(evaluated(&mut w, 2), ["a", "c"]);
    }

    /// balanced_scoring_test.go sortCandidates / It("should sort non-Balanced candidates by
    /// savings ratio descending"), and singlenodeconsolidation_test.go Candidate Shuffling /
    /// It("should sort candidates by savings ratio with different disruption costs"): at one
    /// price, the fewer pods (the lower disruption) the higher the ratio.
    #[test]
    fn other_policies_rank_candidates_by_savings_ratio_too() {
        let mut w = World::new();
        w.budgets(serde_json::json!([{"nodes": "100%"}]));
        w.node("a", "m5.xlarge").pods_on("a", 9, 100, 128);
        w.node("b", "m5.xlarge").pods_on("b", 1, 100, 128);
        w.node("c", "m5.xlarge").pods_on("c", 4, 100, 128);
        assert_eq!(evaluated(&mut w, 1), ["b"]);
        assert_eq!(evaluated(&mut w, 2), ["b", "c"]);
    }

    /// balanced_scoring_test.go sortCandidates / It("should sort all candidates by savings ratio
    /// when any uses Balanced"), and singlenodeconsolidation_test.go Candidate Shuffling /
    /// It("should sort candidates by savings ratio descending"): across pools, one ranking by
    /// ratio: the Balanced pool's m5.2xlarge (2 pods: ratio 0.128) before the other pool's
    /// m5.large (1 pod: 0.048), though the m5.large has fewer pods to move.
    #[test]
    fn candidates_of_all_pools_share_one_ranking() {
        let mut w = world();
        second_pool(&mut w, "other", "WhenEmptyOrUnderutilized");
        w.node("bal", "m5.2xlarge").pods_on("bal", 2, 100, 128);
        w.node_in(1, "def", "m5.large", "on-demand", t0())
            .pods_on("def", 1, 100, 128);
        assert_eq!(evaluated(&mut w, 1), ["bal"]);
    }
}

// ------------------------------------------------------------ Karpenter's candidate rules
//
// Translations of kubernetes-sigs/karpenter pkg/controllers/disruption/
// suite_test.go ("Candidate Filtering", "BuildDisruptionBudgetMapping",
// "Pod Eviction Cost") and pkg/utils/pod/suite_test.go: which nodes a
// disruption may take, what counts against budgets, what a pod costs to
// evict. "Graceful" disruption (consolidation) is looked at on node c of
// `three_nodes`, which consolidation would delete; "eventual" disruption
// (drift) on a node whose NodePool's labels changed. Each test names the
// `It` it translates.

mod karpenter {
    use super::*;

    fn pod_mut<'w>(w: &'w mut World, name: &str) -> &'w mut Pod {
        w.pods
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .expect("pod")
    }

    fn own(w: &mut World, name: &str, kind: &str) {
        pod_mut(w, name).metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: if kind == "Node" { "v1" } else { "apps/v1" }.into(),
                kind: kind.into(),
                name: "owner".into(),
                uid: "owner-uid".into(),
                ..Default::default()
            },
        ]);
    }

    fn terminating(w: &mut World, name: &str) {
        pod_mut(w, name).metadata.deletion_timestamp = Some(Time(t0()));
    }

    fn terminal(w: &mut World, name: &str) {
        pod_mut(w, name)
            .status
            .get_or_insert_with(Default::default)
            .phase = Some("Succeeded".into());
    }

    fn dnd(w: &mut World, name: &str) {
        w.annotate_pod(name, snapshot::DO_NOT_DISRUPT, "true");
    }

    /// A PDB over node c's pods that allows no eviction.
    fn blocking_pdb(w: &mut World) {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-pdb", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "c"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}
        }))
        .expect("pdb");
        w.pdbs.push(pdb);
        for p in ["c-p0", "c-p1"] {
            pod_mut(w, p)
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert("app".into(), "c".into());
        }
    }

    /// Whether consolidation (graceful) takes node c.
    fn graceful(w: &World) -> bool {
        disrupted(&w.decide()).contains(&"c")
    }

    /// One node `d` with one pod `d-p0`, its NodePool drifted (labels
    /// changed), with or without a terminationGracePeriod.
    fn drifted_world(tgp: bool) -> World {
        let mut spec = serde_json::json!({
            "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}
        });
        if tgp {
            spec["template"]["spec"]["terminationGracePeriod"] = "5m".into();
        }
        let mut w = World::with_pool(spec);
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("d", "m5.xlarge").pods_on("d", 1, 500, 512);
        w.pools[0].labels.insert("team".into(), "b".into());
        w
    }

    /// Whether drift (eventual) takes node d.
    fn eventual(w: &World) -> bool {
        disrupted(&w.decide()).contains(&"d")
    }

    #[test]
    fn baseline_c_consolidates_and_d_drifts() {
        assert!(graceful(&three_nodes()));
        assert!(eventual(&drifted_world(false)));
    }

    /// should not consider candidates that have do-not-disrupt pods scheduled and no terminationGracePeriod
    #[test]
    fn do_not_disrupt_pods_and_no_termination_grace_period() {
        let mut w = drifted_world(false);
        dnd(&mut w, "d-p0");
        assert!(!eventual(&w));
        let mut w = three_nodes();
        dnd(&mut w, "c-p0");
        assert!(!graceful(&w));
    }

    /// should not consider candidates that have do-not-disrupt mirror pods scheduled
    #[test]
    fn do_not_disrupt_mirror_pods() {
        let mut w = three_nodes();
        own(&mut w, "c-p0", "Node");
        dnd(&mut w, "c-p0");
        assert!(!graceful(&w));
    }

    /// should not consider candidates that have do-not-disrupt daemonset pods scheduled
    #[test]
    fn do_not_disrupt_daemonset_pods() {
        let mut w = three_nodes();
        own(&mut w, "c-p0", "DaemonSet");
        dnd(&mut w, "c-p0");
        assert!(!graceful(&w));
    }

    /// should consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for eventual disruption
    #[test]
    fn do_not_disrupt_pods_with_a_termination_grace_period_eventual() {
        let mut w = drifted_world(true);
        dnd(&mut w, "d-p0");
        let plan = w.decide();
        assert!(disrupted(&plan).contains(&"d"));
        // No room is planned for the pod that stays until the deadline.
        assert!(plan.commands[0].replacement.is_none());
        assert!(plan.removals()[0].deadline.is_some());
    }

    /// should consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for eventual disruption
    #[test]
    fn pdb_blocked_pods_with_a_termination_grace_period_eventual() {
        let mut w = drifted_world(true);
        w.pdb("inflate", 0);
        assert!(eventual(&w));
    }

    /// should not consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for graceful disruption
    /// (and: ... without a terminationGracePeriod set for graceful disruption)
    #[test]
    fn do_not_disrupt_pods_graceful_with_or_without_termination_grace_period() {
        for tgp in [None, Some("5m")] {
            let mut w = three_nodes();
            if let Some(d) = tgp {
                w.pools[0].termination_grace_period =
                    Some(crate::config::disruption::parse_duration(d).expect("duration"));
            }
            dnd(&mut w, "c-p1");
            assert!(!graceful(&w), "{tgp:?}");
        }
    }

    /// should not consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for graceful disruption
    /// (and: ... fully blocking PDBs without a terminationGracePeriod set for graceful disruption; ... fully blocking PDBs)
    #[test]
    fn pdb_blocked_pods_graceful_with_or_without_termination_grace_period() {
        for tgp in [None, Some("5m")] {
            let mut w = three_nodes();
            if let Some(d) = tgp {
                w.pools[0].termination_grace_period =
                    Some(crate::config::disruption::parse_duration(d).expect("duration"));
            }
            blocking_pdb(&mut w);
            assert!(!graceful(&w), "{tgp:?}");
        }
    }

    /// should not consider candidates that have do-not-disrupt pods scheduled without a terminationGracePeriod set for eventual disruption
    #[test]
    fn do_not_disrupt_pods_eventual_without_termination_grace_period() {
        let mut w = drifted_world(false);
        dnd(&mut w, "d-p0");
        assert!(!eventual(&w));
    }

    /// should not consider candidates that have PDB-blocked pods scheduled without a terminationGracePeriod set for eventual disruption
    #[test]
    fn pdb_blocked_pods_eventual_without_termination_grace_period() {
        let mut w = drifted_world(false);
        w.pdb("inflate", 0);
        assert!(!eventual(&w));
    }

    /// should consider candidates that have do-not-disrupt terminating pods
    #[test]
    fn do_not_disrupt_terminating_pods() {
        let mut w = three_nodes();
        dnd(&mut w, "c-p0");
        terminating(&mut w, "c-p0");
        assert!(graceful(&w));
    }

    /// should consider candidates that have do-not-disrupt terminal pods
    #[test]
    fn do_not_disrupt_terminal_pods() {
        let mut w = three_nodes();
        dnd(&mut w, "c-p0");
        terminal(&mut w, "c-p0");
        assert!(graceful(&w));
    }

    /// should not consider candidates that have do-not-disrupt on nodes
    #[test]
    fn do_not_disrupt_on_nodes() {
        let mut w = three_nodes();
        w.annotate_node("c", snapshot::DO_NOT_DISRUPT, "true");
        assert!(!graceful(&w));
        let mut w = drifted_world(true);
        w.annotate_node("d", snapshot::DO_NOT_DISRUPT, "true");
        assert!(!eventual(&w), "a terminationGracePeriod does not lift it");
    }

    /// should not consider candidates that have multiple PDBs on the same pod
    #[test]
    fn multiple_pdbs_on_the_same_pod() {
        let mut w = three_nodes();
        w.pdb("one", 5).pdb("two", 5);
        assert!(!graceful(&w));
    }

    /// should not consider candidates that have fully blocking PDBs on daemonset pods
    #[test]
    fn fully_blocking_pdbs_on_daemonset_pods() {
        let mut w = three_nodes();
        blocking_pdb(&mut w);
        own(&mut w, "c-p0", "DaemonSet");
        own(&mut w, "c-p1", "DaemonSet");
        // Both pods are now DaemonSet pods: c is empty, and still blocked.
        assert!(!disrupted(&w.decide()).contains(&"c"));
    }

    /// should consider candidates that have fully blocking PDBs on mirror pods
    #[test]
    fn fully_blocking_pdbs_on_mirror_pods() {
        let mut w = three_nodes();
        blocking_pdb(&mut w);
        own(&mut w, "c-p0", "Node");
        own(&mut w, "c-p1", "Node");
        assert!(disrupted(&w.decide()).contains(&"c"));
    }

    /// should consider candidates that have fully blocking PDBs on terminal pods
    #[test]
    fn fully_blocking_pdbs_on_terminal_pods() {
        let mut w = three_nodes();
        blocking_pdb(&mut w);
        terminal(&mut w, "c-p0");
        terminal(&mut w, "c-p1");
        assert!(disrupted(&w.decide()).contains(&"c"));
    }

    /// should consider candidates that have fully blocking PDBs on terminating pods
    #[test]
    fn fully_blocking_pdbs_on_terminating_pods() {
        let mut w = three_nodes();
        blocking_pdb(&mut w);
        terminating(&mut w, "c-p0");
        terminating(&mut w, "c-p1");
        assert!(disrupted(&w.decide()).contains(&"c"));
    }

    /// should not consider candidate that has just a NodeClaim representation
    /// (a claim whose node has not registered is never disrupted)
    #[test]
    fn a_claim_without_a_node_is_never_a_candidate() {
        let mut w = empties(2);
        w.claims[0].node_name = None;
        w.nodes.remove(0);
        let plan = w.decide();
        assert_eq!(disrupted(&plan), ["n01"]);
        assert_eq!(plan.nodes.len(), 1);
    }

    /// should not consider candidates that are deleting
    #[test]
    fn a_deleting_node_is_not_a_candidate() {
        let mut w = empties(2);
        w.nodes[0].metadata.deletion_timestamp = Some(Time(t0()));
        let plan = w.decide();
        check(&plan, &[("n00", None, "being deleted")]);
    }

    /// should not consider candidates that are MarkedForDeletion / actively being processed in the queue
    #[test]
    fn a_node_with_a_removal_in_flight_is_not_a_candidate() {
        let mut w = empties(2);
        w.removing("n00", Reason::Empty, false);
        check(&w.decide(), &[("n00", None, "already being disrupted")]);
    }

    /// should not consider candidates that aren't yet initialized
    #[test]
    fn a_booting_node_is_not_a_candidate() {
        let mut w = empties(1);
        w.not_ready("n00", t0());
        w.settings.node_repair = true;
        // NotReady since it registered, a minute ago: booting.
        assert!(w.at(secs(60)).decide().commands.is_empty());
    }

    /// should consider candidates that do not have the karpenter.sh/capacity-type label
    /// (and: ... topology.kubernetes.io/zone label; ... node.kubernetes.io/instance-type label)
    #[test]
    fn nodes_without_well_known_labels_are_candidates() {
        for key in [labels::CAPACITY_TYPE, labels::ZONE, labels::INSTANCE_TYPE] {
            let mut w = empties(1);
            w.nodes[0]
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .remove(key);
            assert_eq!(disrupted(&w.decide()), ["n00"], "{key}");
        }
    }

    /// should consider candidates that have an instance type that cannot be resolved
    #[test]
    fn a_node_of_an_unknown_instance_type_is_a_candidate() {
        let mut w = empties(1);
        w.catalog = catalog(&["m5.xlarge"]);
        assert_eq!(disrupted(&w.decide()), ["n00"]);
    }

    /// should not consider nodes that are not managed as part of disruption count
    /// (and: ... not initialized ...; should consider not ready nodes to the disruption count;
    /// should consider nodes with a deletion timestamp set and MarkedForDeletion to the disruption count)
    #[test]
    fn what_counts_against_budgets() {
        let ten = |w: &mut World| {
            for k in 0..10 {
                w.node(&format!("n{k:02}"), "m5.large");
            }
            w.observed_at(secs(0));
        };
        let mut w = World::new();
        ten(&mut w);
        w.budgets(serde_json::json!([{"nodes": "100%"}]));
        // A foreign node and a booting one do not count: all ten go.
        w.nodes.push(SimCluster::ready_node(
            "foreign",
            BTreeMap::new(),
            vec![],
            "aws:///x/i-foreign",
            &Resources::new(4000, 16384 * MIB, 110),
            &Resources::new(4000, 16384 * MIB, 110),
            t0(),
        ));
        assert_eq!(w.at(secs(30)).decide().commands.len(), 10);
        // Two that lost readiness count as disrupting: 8 of 10.
        let mut w = World::new();
        ten(&mut w);
        w.budgets(serde_json::json!([{"nodes": "80%"}]));
        w.not_ready("n00", secs(600)).not_ready("n01", secs(600));
        let plan = w.at(secs(700)).decide();
        assert_eq!(plan.commands.len(), 6, "80 % of 10, less the two NotReady");
        // A deleting node counts as disrupting.
        let mut w = World::new();
        ten(&mut w);
        w.budgets(serde_json::json!([{"nodes": "50%"}]));
        w.nodes[0].metadata.deletion_timestamp = Some(Time(t0()));
        assert_eq!(w.decide().commands.len(), 4);
    }

    /// should have a standard disruptionCost for a pod with no priority or disruptionCost specified;
    /// ... higher for a positive deletion cost; ... lower for a negative one; higher costs for
    /// higher deletion costs; higher for a higher priority; lower for a lower priority
    #[test]
    fn pod_eviction_cost() {
        use crate::disruption::consolidation::eviction_cost;
        let pod = |cost: Option<i32>, priority: Option<i32>| -> Pod {
            let mut p = Pod::default();
            if let Some(c) = cost {
                p.metadata.annotations =
                    Some([(snapshot::POD_DELETION_COST.to_owned(), c.to_string())].into());
            }
            p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                priority,
                ..Default::default()
            });
            p
        };
        assert_eq!(eviction_cost(&pod(None, None)), 1.0);
        assert!(eviction_cost(&pod(Some(100), None)) > 1.0);
        assert!(eviction_cost(&pod(Some(-100), None)) < 1.0);
        assert!(eviction_cost(&pod(Some(200), None)) > eviction_cost(&pod(Some(100), None)));
        assert!(eviction_cost(&pod(None, Some(1_000_000))) > 1.0);
        assert!(eviction_cost(&pod(None, Some(-1_000_000))) < 1.0);
    }

    // pkg/controllers/disruption/consolidation_test.go, Context("TTL"): a
    // consolidation decided on one snapshot acts only if it still holds on
    // the snapshot 15 s later.

    /// should not delete node if pods schedule with karpenter.sh/do-not-disrupt set to true during the TTL wait
    /// (and: should not replace node if a pod schedules with do-not-disrupt during the TTL wait)
    #[test]
    fn a_do_not_disrupt_pod_arriving_during_the_wait_cancels_the_move() {
        let plan = three_nodes().decide();
        let cmd = &plan.commands[0];
        let mut later = three_nodes();
        later.pod_on("c", "late", 100, 100);
        later.annotate_pod("late", snapshot::DO_NOT_DISRUPT, "true");
        assert!(validate(cmd, &later.snapshot()).is_err());
        let mut w = World::new();
        w.node("a", "m5.2xlarge").pods_on("a", 2, 500, 1024);
        let plan = w.decide();
        assert!(plan.commands[0].replacement.is_some(), "a replace");
        w.annotate_pod("a-p0", snapshot::DO_NOT_DISRUPT, "true");
        let why = validate(&plan.commands[0], &w.snapshot()).expect_err("blocked");
        assert!(why.contains("do-not-disrupt"), "{why}");
    }

    /// should not delete node if pods schedule with a blocking PDB during the TTL wait
    /// (and: should not replace node if a pod schedules with a blocking PDB during the TTL wait)
    #[test]
    fn a_blocking_pdb_arriving_during_the_wait_cancels_the_move() {
        let plan = three_nodes().decide();
        let mut later = three_nodes();
        later.pdb("late", 0);
        let why = validate(&plan.commands[0], &later.snapshot()).expect_err("blocked");
        assert!(why.contains("PDB"), "{why}");
        let mut w = World::new();
        w.node("a", "m5.2xlarge").pods_on("a", 2, 500, 1024);
        let plan = w.decide();
        w.pdb("late", 0);
        assert!(validate(&plan.commands[0], &w.snapshot()).is_err());
    }

    /// should not consolidate if the action becomes invalid during the node TTL wait
    #[test]
    fn a_move_that_no_longer_fits_is_dropped() {
        let plan = three_nodes().decide();
        let mut later = three_nodes();
        // b is gone and a has filled up: c's pods fit nowhere now.
        for k in 0..3 {
            later.pod_on("a", &format!("a-late{k}"), 500, 2048);
        }
        later
            .nodes
            .retain(|n| n.metadata.name.as_deref() != Some("b"));
        later.claims.retain(|c| c.id != "default-b");
        assert!(validate(&plan.commands[0], &later.snapshot()).is_err());
    }

    /// should not consolidate if the action picks different instance types after the node TTL wait
    #[test]
    fn a_replacement_that_would_cost_more_after_the_wait_is_dropped() {
        let mut w = World::new();
        w.node("a", "m5.2xlarge").pods_on("a", 2, 500, 1024);
        let plan = w.decide();
        assert!(plan.commands[0].replacement.is_some());
        // The cheap types are gone from the catalog: the same move would need dearer ones.
        w.catalog = catalog(&["m5.xlarge", "m5a.xlarge", "m5.2xlarge"]);
        let why = validate(&plan.commands[0], &w.snapshot()).expect_err("dearer now");
        assert!(why.contains("cost"), "{why}");
    }

    /// pkg/controllers/disruption/consolidation_test.go: can delete nodes, when non-Karpenter capacity can fit pods
    #[test]
    fn pods_move_onto_a_node_nodewright_did_not_launch() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 1, 500, 512);
        let mut foreign = SimCluster::ready_node(
            "foreign",
            [(labels::HOSTNAME.to_owned(), "foreign".to_owned())].into(),
            vec![],
            "aws:///x/i-foreign",
            &Resources::new(4000, 16384 * MIB, 110),
            &Resources::new(4000, 16384 * MIB, 110),
            t0(),
        );
        foreign.metadata.creation_timestamp = Some(Time(t0()));
        w.nodes.push(foreign);
        let plan = w.decide();
        assert_eq!(disrupted(&plan), ["a"]);
        assert!(
            plan.commands[0].replacement.is_none(),
            "its pod fits on the foreign node"
        );
    }

    // pkg/controllers/nodeclaim/disruption/drift_test.go

    fn drifted_node(w: &World) -> Option<String> {
        let plan = w.decide();
        plan.commands
            .iter()
            .find(|c| c.reason == Reason::Drifted)
            .map(|c| c.summary.clone())
    }

    /// should not return drifted if karpenter.sh/nodepool-hash annotation is not present on the NodeClaim
    /// (and: ... not present on the NodePool — every validated pool has a hash here)
    #[test]
    fn no_stamp_no_static_drift() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
        w.claims[0].stamp.nodepool_hash = None;
        w.pools[0].labels.insert("team".into(), "b".into());
        assert_eq!(drifted_node(&w), None);
    }

    /// should not return drifted if the NodeClaim's karpenter.sh/nodepool-hash-version annotation does not match the NodePool's
    /// (and: ... hash-version annotation is not present on the NodeClaim)
    #[test]
    fn a_stamp_of_another_hash_version_is_not_compared_but_restamped() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
        w.claims[0].stamp.nodepool_hash = Some("v1:0123456789abcdef".into());
        w.pools[0].labels.insert("team".into(), "b".into());
        let plan = w.decide();
        assert!(plan.commands.iter().all(|c| c.reason != Reason::Drifted));
        let update = plan
            .claim_updates
            .iter()
            .find(|u| u.claim_id == "default-a")
            .expect("bookkeeping");
        assert_eq!(
            update.nodepool_hash,
            Some(crate::config::hash::pool_hash(&w.pools[0]))
        );
    }

    /// should detect static drift before cloud provider drift; should detect node requirement drift before cloud provider drift
    #[test]
    fn static_and_requirement_drift_are_reported_before_the_ami() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
        w.claims[0].stamp.image_id = Some("ami-old".into());
        w.resolved.insert(
            "default".into(),
            ResolvedClass {
                image_ids: vec!["ami-new".into()],
                ..Default::default()
            },
        );
        assert!(drifted_node(&w).expect("AMI drift").contains("AMI ami-old"));
        w.pools[0].labels.insert("team".into(), "b".into());
        assert!(
            drifted_node(&w)
                .expect("static drift")
                .contains("template changed")
        );
    }

    /// should detect stale instance type drift if the instance type doesn't exist (and: label doesn't
    /// exist; offerings don't exist; offerings aren't compatible). Deliberate difference: nodewright does
    /// not drift a node because the catalog no longer lists its type or offering — a DescribeInstanceTypes
    /// or pricing gap must not replace a fleet; such nodes expire.
    #[test]
    fn a_type_missing_from_the_catalog_is_not_drift_here() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
        w.catalog = catalog(&["c5.xlarge"]);
        assert_eq!(drifted_node(&w), None);
    }

    /// should detect stale instance type drift if the instance type label doesn't exist.
    /// Deliberate difference, as above: a node without the label is not drifted here.
    #[test]
    fn a_node_without_an_instance_type_label_is_not_drift_here() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
        w.nodes[0]
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .remove(labels::INSTANCE_TYPE);
        assert_eq!(drifted_node(&w), None);
    }

    /// Reserved Capacity / InstanceTypeNotFound: shouldn't drift when a matching instance type exists
    /// with reserved and on-demand offerings; with reserved offerings; with on-demand offerings;
    /// should drift when a matching instance type exists but the only offering is spot; ... but there
    /// are no compatible offerings. A node launched into a capacity reservation, two hours old, its
    /// type's offerings narrowed to each set in turn (the catalog's reserved offerings are the
    /// reservations themselves, so "reserved" leaves only the type). Deliberate difference for the
    /// last two: nodewright never drifts a node for what the catalog offers today (a pricing or
    /// DescribeInstanceTypes gap must not replace a fleet); such nodes expire.
    #[test]
    fn a_reserved_node_does_not_drift_for_its_types_offerings_here() {
        let offered: [&[&str]; 5] = [
            &["reserved", "on-demand"],
            &["reserved"],
            &["on-demand"],
            &["spot"],
            &[],
        ];
        for kept in offered {
            let mut w = World::with_pool(serde_json::json!({
                "template": {"spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand", "spot"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
                }},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}
            }));
            w.catalog = catalog(&["m5.xlarge"]);
            w.node_at("a", "m5.xlarge", "reserved", t0())
                .pods_on("a", 3, 1000, 1024);
            w.catalog
                .offerings
                .retain(|o| kept.contains(&o.capacity_type.as_str()));
            w.at(secs(2 * 3600));
            assert_eq!(drifted_node(&w), None, "offerings {kept:?}");
            check(&w.decide(), &[("a", None, "")]);
        }
    }

    /// should remove the status condition from the nodeClaim when the nodeClaim launch condition is
    /// unknown (and: ... is false). A claim whose launch has not succeeded (no instance yet, or its
    /// launch failed) is never drifted, though its pool's template changed since it was written.
    #[test]
    fn a_claim_not_launched_is_never_drifted() {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge"]);
        w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
        let mut pending = w.claims[0].clone();
        pending.id = "default-pending".into();
        pending.instance = None;
        pending.running_at = None;
        pending.node_name = None;
        pending.registered_at = None;
        w.claims.push(pending);
        w.pools[0].labels.insert("team".into(), "b".into());
        let plan = w.decide();
        let drifted: Vec<&str> = plan
            .commands
            .iter()
            .filter(|c| c.reason == Reason::Drifted)
            .flat_map(|c| c.targets.iter().map(|t| t.claim_id.as_str()))
            .collect();
        assert_eq!(drifted, ["default-a"], "only the launched claim drifts");
    }

    /// should not consider candidates that are not owned by a NodePool (no karpenter.sh/nodepool label)
    /// (and: should not consider candidates that has just a Node representation — a Node carrying
    /// the NodePool label but with no claim of ours)
    #[test]
    fn nodes_without_a_claim_of_ours_are_never_candidates() {
        for pool_label in [None, Some("default")] {
            let mut w = empties(1);
            let mut node_labels: BTreeMap<String, String> =
                [(labels::HOSTNAME.to_owned(), "lone".to_owned())].into();
            if let Some(p) = pool_label {
                node_labels.insert(labels::NODEPOOL.to_owned(), p.to_owned());
            }
            w.nodes.push(SimCluster::ready_node(
                "lone",
                node_labels,
                vec![],
                "aws:///x/i-lone",
                &Resources::new(4000, 16384 * MIB, 110),
                &Resources::new(4000, 16384 * MIB, 110),
                t0(),
            ));
            w.budgets(serde_json::json!([{"nodes": "100%"}]));
            assert_eq!(disrupted(&w.decide()), ["n00"], "{pool_label:?}");
        }
    }

    /// BuildDisruptionBudgetMapping: should not consider nodes that are not initialized as part of
    /// disruption count. Ten Ready nodes and one still booting (NotReady since it registered) under a
    /// 100 % budget: every reason may disrupt ten, the booting node counted in no total.
    #[test]
    fn a_booting_node_is_not_counted_in_the_budgets() {
        let mut w = empties(10);
        w.node("boot", "m5.large").not_ready("boot", t0());
        w.budgets(serde_json::json!([{"nodes": "100%"}]));
        let s = w.snapshot();
        let facts = snapshot::node_facts(&s);
        let budgets = budget::Budgets::new(&facts, s.now);
        for reason in [Reason::Empty, Reason::Drifted, Reason::Underutilized] {
            assert_eq!(budgets.remaining("default", reason), 10, "{reason:?}");
        }
    }

    /// BuildDisruptionBudgetMapping: should not consider nodes that have the terminating status
    /// condition as part of disruption count. Ten nodes and an eleventh whose instance is being
    /// terminated (its removal in flight) under a 100 % budget: ten may still disrupt. nodewright
    /// counts the going node in the pool's total and as disrupting, which leaves the same ten.
    #[test]
    fn a_terminating_node_leaves_the_others_budget_whole() {
        let mut w = empties(10);
        w.node("going", "m5.large");
        w.budgets(serde_json::json!([{"nodes": "100%"}]));
        w.removing("going", Reason::Expired, false);
        let s = w.snapshot();
        let facts = snapshot::node_facts(&s);
        let budgets = budget::Budgets::new(&facts, s.now);
        for reason in [Reason::Empty, Reason::Drifted, Reason::Underutilized] {
            assert_eq!(budgets.remaining("default", reason), 10, "{reason:?}");
        }
    }

    /// should not return a negative disruption value (more nodes disrupting than the budget
    /// allows leaves nothing, not a negative allowance)
    #[test]
    fn more_disrupting_than_allowed_leaves_a_budget_of_zero() {
        let mut w = empties(10);
        w.budgets(serde_json::json!([{"nodes": "10%"}]));
        for k in 0..9 {
            w.removing(&format!("n{k:02}"), Reason::Drifted, false);
        }
        let plan = w.decide();
        assert!(plan.commands.is_empty());
        check(
            &plan,
            &[(
                "n09",
                None,
                "budget for Empty exhausted in NodePool default (1 of 10 nodes allowed, 9 disrupting)",
            )],
        );
    }
}

// ------------------------------------------------------------ handover from Karpenter

impl World {
    /// A Ready node Karpenter launched for the pool at `launched`: no claim
    /// of ours, Karpenter's termination finalizer.
    fn karpenter_node(
        &mut self,
        name: &str,
        instance_type: &str,
        launched: Timestamp,
    ) -> &mut Self {
        self.node_at(name, instance_type, "on-demand", launched);
        self.claims.pop();
        let node = self.nodes.last_mut().expect("node");
        node.metadata.finalizers = Some(vec![handover::KARPENTER_TERMINATION_FINALIZER.into()]);
        self
    }

    /// The pool annotated `nodewright.io/karpenter-nodes: replace`, budget `nodes`.
    fn handed_over(&mut self, nodes: &str) -> &mut Self {
        self.budgets(serde_json::json!([{ "nodes": nodes }]));
        self.pools[0].annotations.insert(
            crate::config::settings::KARPENTER_NODES_ANNOTATION.into(),
            "replace".into(),
        );
        self
    }
}

/// Karpenter's drift (`pkg/controllers/disruption/drift_test.go`, "should
/// replace drifted nodes" and "should drift one non-empty node at a time,
/// starting with the earliest drift"; `pkg/controllers/disruption/
/// queue_test.go`, "should only finish a command when all replacements are
/// initialized" — the machine's half, in `termination::machine`): the
/// candidate's pods are simulated first and replacements launched before
/// the node goes. Here the candidate is a node of Karpenter's in a pool
/// handed over, oldest first; we differ on purpose in that Karpenter, not
/// us, drains and terminates it (we delete its Node once the replacements
/// are initialized), and in that we then bind pods to the nodes we launched.
#[test]
fn a_handed_over_karpenter_node_gets_its_replacement_first_oldest_first_within_the_budget() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.handed_over("1")
        .karpenter_node("k-new", "m5.xlarge", secs(-600))
        .karpenter_node("k-old", "m5.xlarge", secs(-1200))
        .pods_on("k-old", 2, 1500, 1024)
        .pods_on("k-new", 2, 1500, 1024);
    let plan = w.decide();
    assert_eq!(plan.commands.len(), 1, "{:#?}", plan.commands);
    let c = &plan.commands[0];
    assert_eq!(c.method, handover::METHOD);
    assert_eq!(c.id, handover::command_id("k-old"));
    assert_eq!(
        c.validate_at, None,
        "nothing goes before its replacement is up"
    );
    let replacement = c.replacement.as_ref().expect("a replacement first");
    // k-new's room is not counted on: it is handed over next.
    let placed: Vec<&str> = replacement
        .claims
        .iter()
        .flat_map(|k| k.pods.iter().map(|p| p.uid.as_str()))
        .collect();
    assert_eq!(placed.len(), 2, "{replacement:#?}");
    assert!(
        placed.iter().all(|u| u.starts_with("uid-k-old")),
        "{placed:?}"
    );
    let removals = c.removals();
    assert_eq!(removals.len(), 1);
    assert!(removals[0].handover && removals[0].replace);
    assert_eq!(removals[0].claim_id, "handover-k-old");
    assert_eq!(removals[0].pool, "default");
    assert_eq!(
        removals[0].instance_id, None,
        "Karpenter terminates its own instance"
    );
    let h = &plan.handovers[0];
    assert_eq!(h.start, vec!["k-old".to_owned()]);
    assert_eq!(h.remaining, 2);
    assert_eq!(h.next.as_deref(), Some("k-new"));
    assert!(
        h.waiting.as_deref().is_some_and(|w| w.contains("budget")),
        "{h:?}"
    );
    check(
        &plan,
        &[("k-old", Some(Reason::Drifted), "handed over from Karpenter")],
    );
}

#[test]
fn a_handover_in_flight_holds_the_next_and_pods_that_fit_need_no_launch() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.handed_over("1")
        .karpenter_node("k1", "m5.xlarge", secs(-1200))
        .karpenter_node("k2", "m5.xlarge", secs(-600))
        .pods_on("k1", 1, 500, 512)
        .pods_on("k2", 1, 500, 512)
        .node_at("ours", "m5.xlarge", "on-demand", secs(-300))
        .pods_on("ours", 1, 500, 512);
    w.in_flight.push(InFlight {
        node: "k1".into(),
        claim_id: handover::command_id("k1"),
        reason: Reason::Drifted,
        replace: true,
        replacements: vec![],
    });
    let plan = w.decide();
    assert!(plan.commands.is_empty(), "{:#?}", plan.commands);
    let h = &plan.handovers[0];
    assert_eq!(h.in_progress, vec!["k1".to_owned()]);
    assert_eq!(h.next.as_deref(), Some("k2"));
    assert!(
        h.waiting.as_deref().is_some_and(|w| w.contains("1 going")),
        "{h:?}"
    );
    // k1 gone: k2's pod fits on nodewright's node, nothing to launch.
    w.in_flight.clear();
    w.nodes.retain(|n| n.metadata.name.as_deref() != Some("k1"));
    w.pods
        .retain(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some("k1"));
    let plan = w.decide();
    let c = plan
        .commands
        .iter()
        .find(|c| c.method == handover::METHOD)
        .expect("k2 handed over");
    assert_eq!(c.targets[0].node, "k2");
    assert!(c.replacement.is_none(), "{c:#?}");
    assert!(c.removals().iter().all(|r| r.handover && !r.replace));
}

#[test]
fn karpenter_still_launching_pauses_the_handover_and_says_how_to_stop_it() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.handed_over("100%")
        .node_at("ours", "m5.xlarge", "on-demand", secs(-3600))
        .pods_on("ours", 1, 500, 512)
        .karpenter_node("k-late", "m5.xlarge", secs(-60))
        .pods_on("k-late", 1, 500, 512);
    let plan = w.decide();
    assert!(plan.commands.iter().all(|c| c.method != handover::METHOD));
    let why = plan.handovers[0].waiting.clone().expect("paused");
    assert!(why.contains("kubectl patch nodepool default"), "{why}");
    assert_eq!(plan.handovers[0].next.as_deref(), Some("k-late"));
    // Ten quiet minutes later the handover goes on.
    let later = secs(-60) + handover::KARPENTER_QUIET;
    let plan = w.at(later).decide();
    assert!(
        plan.commands.iter().any(|c| c.method == handover::METHOD),
        "{:#?}",
        plan.handovers
    );
}

#[test]
fn no_handover_without_replace_or_without_karpenters_finalizer_or_past_do_not_disrupt() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.karpenter_node("k1", "m5.xlarge", secs(-600));
    assert!(w.decide().handovers.is_empty(), "not annotated: none");
    w.handed_over("100%");
    w.nodes[0].metadata.finalizers = None;
    assert!(
        w.decide().handovers.is_empty(),
        "no finalizer: not Karpenter's to drain"
    );
    w.karpenter_node("k2", "m5.xlarge", secs(-500))
        .pods_on("k2", 1, 500, 512)
        .annotate_pod("k2-p0", "karpenter.sh/do-not-disrupt", "true");
    let plan = w.decide();
    assert!(plan.commands.is_empty(), "{:#?}", plan.commands);
    let why = plan.handovers[0].waiting.clone().expect("blocked");
    assert!(why.contains("do-not-disrupt"), "{why}");
}

/// CapacityBuffers, translated from Karpenter's
/// `pkg/controllers/disruption/emptiness_test.go` Context("Buffer pod
/// protection") and `consolidation_test.go` Context("Buffer Pods").
/// Karpenter's tests set the provisioner's per-node buffer pod counts
/// directly; ours give the decision a buffer whose chunks the placement
/// puts on the nodes (a 3-CPU chunk fills an empty m5.xlarge's room).
mod buffers {
    use super::*;
    use crate::config::{BufferSource, CapacityBuffer};
    use crate::provisioning::buffers::{resolve, virtual_pods};

    fn buffer(w: &mut World, replicas: u32, cpu_millis: i64) {
        let template = serde_json::from_value(serde_json::json!({"spec": {"containers": [
            {"name": "c", "image": "pause", "resources": {"requests": {"cpu": format!("{cpu_millis}m"), "memory": "256Mi"}}}]}}))
        .expect("template");
        let b = CapacityBuffer {
            name: "spare".into(),
            namespace: "default".into(),
            source: BufferSource::Template(Box::new(template)),
            replicas: Some(replicas),
            percentage: None,
            limits: None,
            limit_names: vec![],
        };
        w.buffers = virtual_pods(&resolve(&[b], &Default::default()));
    }

    fn empties(names: &[&str]) -> World {
        let mut w = World::new();
        w.catalog = catalog(&["m5.xlarge", "m5.large"]);
        for n in names {
            w.node(n, "m5.xlarge");
        }
        w.observed_at(secs(0));
        w.at(secs(60));
        w
    }

    const HOLDS: &str = "holds 1 chunk(s) of capacity buffer default/spare: not empty";

    /// emptiness_test.go: should not disrupt a node that hosts virtual buffer pods;
    /// consolidation_test.go: should not empty-consolidate a node with only buffer pods
    #[test]
    fn a_node_holding_a_chunk_is_not_empty() {
        let mut w = empties(&["a"]);
        buffer(&mut w, 1, 3000);
        let plan = w.decide();
        assert!(plan.commands.is_empty(), "{plan:#?}");
        check(&plan, &[("a", None, HOLDS)]);
    }

    /// emptiness_test.go: should disrupt a node once buffer pods are cleared;
    /// consolidation_test.go: should consolidate a buffer node once buffer pods are cleared
    #[test]
    fn a_node_goes_once_its_buffer_is_gone() {
        let mut w = empties(&["a"]);
        buffer(&mut w, 1, 3000);
        assert!(w.decide().commands.is_empty());
        buffer(&mut w, 0, 3000);
        check(&w.decide(), &[("a", Some(Reason::Empty), "empty for")]);
    }

    /// emptiness_test.go: should only protect the specific node with buffer pods, not others
    #[test]
    fn only_the_node_holding_the_chunk_is_protected() {
        let mut w = empties(&["a", "b"]);
        buffer(&mut w, 1, 3000);
        let plan = w.decide();
        let gone = disrupted(&plan);
        assert_eq!(gone.len(), 1, "{plan:#?}");
        let kept = if gone[0] == "a" { "b" } else { "a" };
        check(
            &plan,
            &[
                (kept, None, HOLDS),
                (gone[0], Some(Reason::Empty), "empty for"),
            ],
        );
    }

    /// emptiness_test.go: should protect multiple nodes that each host buffer pods
    #[test]
    fn every_node_holding_chunks_is_protected() {
        let mut w = empties(&["a", "b"]);
        buffer(&mut w, 2, 3000);
        let plan = w.decide();
        assert!(plan.commands.is_empty(), "{plan:#?}");
        check(&plan, &[("a", None, HOLDS), ("b", None, HOLDS)]);
    }

    /// emptiness_test.go: should not protect a node with zero buffer pod count
    /// (a buffer whose chunk fits on no node protects nothing)
    #[test]
    fn a_chunk_that_fits_nowhere_protects_nothing() {
        let mut w = empties(&["a"]);
        buffer(&mut w, 1, 64_000);
        check(&w.decide(), &[("a", Some(Reason::Empty), "empty for")]);
    }

    /// emptiness_test.go: should not consider a node with real pods AND buffer pods as empty;
    /// consolidation_test.go: should skip buffer-only nodes in single-node consolidation
    /// but protect via emptiness
    #[test]
    fn a_buffer_only_node_is_no_consolidation_candidate() {
        let mut w = empties(&["a", "b"]);
        w.pod_on("b", "real", 500, 512);
        w.observed_at(secs(0));
        buffer(&mut w, 1, 3000);
        let plan = w.decide();
        // The chunk is on a (b's room is short of 3 CPU beside its pod), or
        // on b, whose pod then fits on a neither: nothing moves.
        for c in &plan.commands {
            for n in c.nodes() {
                assert_ne!(n, "a", "{plan:#?}");
            }
        }
        let a = plan.decision("a").expect("a");
        assert!(matches!(a.verdict, Verdict::Keep), "{}", a.reason);
    }

    /// consolidation_test.go: should allow consolidation of a node with real pods and
    /// buffer pods to a cheaper instance (the replacement holds the pod and the chunk)
    #[test]
    fn a_replacement_must_hold_the_pods_and_the_chunks() {
        let mut w = empties(&["a"]);
        w.catalog = catalog(&["m5.2xlarge", "m5.xlarge", "m5.large"]);
        w.nodes.clear();
        w.claims.clear();
        w.node("a", "m5.2xlarge");
        w.pod_on("a", "real", 500, 512);
        w.observed_at(secs(0));
        w.at(secs(60));
        // 1 CPU chunk: pod + chunk fit an m5.large (cheaper) — replaced by it.
        buffer(&mut w, 1, 1000);
        let plan = w.decide();
        assert_eq!(disrupted(&plan), ["a"], "{plan:#?}");
        let replacement = plan.commands[0].replacement.as_ref().expect("replacement");
        assert!(replacement.claims[0].pods.iter().all(|k| k.name == "real"));
        // 3 CPU chunk: pod + chunk need an m5.xlarge, still cheaper — so
        // the replacement is no m5.large.
        buffer(&mut w, 1, 3000);
        let plan = w.decide();
        assert_eq!(disrupted(&plan), ["a"], "{plan:#?}");
        let claim = &plan.commands[0]
            .replacement
            .as_ref()
            .expect("replacement")
            .claims[0];
        assert!(
            claim.options.iter().all(|o| o.instance_type != "m5.large"),
            "{:?}",
            claim.options
        );
    }
}

// ------------------------------------------------------------ Karpenter's static drift
//
// Translations of kubernetes-sigs/karpenter pkg/controllers/disruption/
// staticdrift_test.go: a static NodePool (`spec.replicas`) whose template
// changed. Karpenter's fake nodes become m5.xlarge holding one small pod
// each; "drifted" is a changed pool label (Karpenter sets the Drifted
// condition by hand).

mod static_drift {
    use super::*;

    fn static_pool(replicas: u32, budget: &str, limit: Option<u32>) -> serde_json::Value {
        let mut spec = serde_json::json!({
            "replicas": replicas,
            "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s", "budgets": [{"nodes": budget}]}
        });
        if let Some(l) = limit {
            spec["limits"] = serde_json::json!({"nodes": l.to_string()});
        }
        spec
    }

    /// A static pool of `nodes` nodes, each with one small pod, its template changed.
    fn drifted(replicas: u32, nodes: usize, budget: &str, limit: Option<u32>) -> World {
        let mut w = World::with_pool(static_pool(replicas, budget, limit));
        w.catalog = catalog(&["m5.xlarge"]);
        for k in 0..nodes {
            let n = format!("n{k}");
            w.node(&n, "m5.xlarge").pods_on(&n, 1, 100, 128);
        }
        w.pools[0].labels.insert("team".into(), "b".into());
        w
    }

    fn drifts(plan: &Plan) -> usize {
        plan.commands
            .iter()
            .filter(|c| c.reason == Reason::Drifted)
            .count()
    }

    /// Budgets / It("should respect disruption budgets (Nodes Count) for static drift"):
    /// three drifted nodes, a budget of one node: one drift.
    #[test]
    fn a_node_count_budget_bounds_static_drift() {
        let plan = drifted(3, 3, "1", None).decide();
        assert_eq!(drifts(&plan), 1, "{plan:#?}");
        assert_eq!(
            plan.nodes
                .iter()
                .filter(|d| d.reason.contains("budget for Drifted exhausted"))
                .count(),
            2
        );
    }

    /// Budgets / It("should respect disruption budgets (Nodes Percentage) for static drift"):
    /// four drifted nodes, a budget of 50 %: two drifts.
    #[test]
    fn a_percentage_budget_bounds_static_drift() {
        assert_eq!(drifts(&drifted(4, 4, "50%", None).decide()), 2);
    }

    /// Budgets / It("should respect budgets for multiple static nodepools"): each static pool's
    /// drift is bounded by its own budget (one of three, and two of three).
    #[test]
    fn each_static_pool_has_its_own_budget() {
        let mut w = drifted(3, 3, "1", None);
        w.pools.push(pool("other", static_pool(3, "2", None)));
        for k in 0..3 {
            let n = format!("o{k}");
            w.node_in(1, &n, "m5.xlarge", "on-demand", t0())
                .pods_on(&n, 1, 100, 128);
        }
        // Its template changes after its nodes were launched.
        w.pools[1].labels.insert("team".into(), "b".into());
        let plan = w.decide();
        let per_pool = |p: &str| {
            plan.commands
                .iter()
                .filter(|c| c.reason == Reason::Drifted && c.targets.iter().any(|t| t.pool == p))
                .count()
        };
        assert_eq!(per_pool("default"), 1, "{plan:#?}");
        assert_eq!(per_pool("other"), 2, "{plan:#?}");
    }

    /// Limits and Scaling / It("should drift nodes when we can acquire limits") and Edge Cases /
    /// It("should handle missing node limits gracefully"): with room under `limits.nodes`, or no
    /// limit, every drifted node of a budget of 100 % drifts.
    #[test]
    fn static_drift_within_limits_or_without_them() {
        assert_eq!(drifts(&drifted(3, 3, "100%", Some(6)).decide()), 3);
        assert_eq!(drifts(&drifted(5, 5, "100%", None).decide()), 5);
    }

    /// Limits and Scaling / It("should wait until nodes are deprovisioned when we are overscaled"):
    /// three nodes for two replicas: drift waits for the scale-down; at two nodes it drifts.
    /// (Failed before: nodewright drifted an overscaled static pool.)
    #[test]
    fn an_overscaled_static_pool_drifts_after_its_scale_down() {
        let plan = drifted(2, 3, "100%", None).decide();
        assert_eq!(drifts(&plan), 0, "{plan:#?}");
        check(
            &plan,
            &[(
                "n0",
                None,
                "has 3 node(s) for 2 replica(s): waiting for its scale-down",
            )],
        );
        assert_eq!(drifts(&drifted(2, 2, "100%", None).decide()), 2);
    }

    /// Edge Cases / It("should handle zero replicas"): a static pool of 0 replicas drifts nothing
    /// (its node is the scale-down's to remove).
    #[test]
    fn zero_replicas_drift_nothing() {
        let plan = drifted(0, 1, "100%", None).decide();
        assert_eq!(drifts(&plan), 0, "{plan:#?}");
    }

    /// Edge Cases / It("should ignore nodes without the drifted status condition") and
    /// It("should ignore nodes with the drifted status condition set to false"): a static pool's
    /// node whose template did not change is not drifted.
    #[test]
    fn an_undrifted_static_node_stays() {
        let mut w = drifted(3, 3, "100%", None);
        w.pools[0].labels.remove("team");
        let plan = w.decide();
        assert_eq!(drifts(&plan), 0, "{plan:#?}");
        assert!(plan.commands.is_empty());
    }

    /// Edge Cases / It("should ignore nodes with the karpenter.sh/do-not-disrupt annotation").
    #[test]
    fn a_do_not_disrupt_static_node_is_not_drifted() {
        let mut w = drifted(1, 1, "100%", None);
        w.annotate_node("n0", "karpenter.sh/do-not-disrupt", "true");
        let plan = w.decide();
        assert_eq!(drifts(&plan), 0, "{plan:#?}");
        check(&plan, &[("n0", None, "do-not-disrupt")]);
    }
}

// ------------------------------------------------------------ eligible nodes
//
// Karpenter's `karpenter_voluntary_disruption_eligible_nodes{reason}`: the
// candidates of each voluntary method at a decision, before the budgets.

/// consolidation_test.go, Metrics: "should correctly report eligible nodes"
/// — a node whose pod carries do-not-disrupt is no consolidation
/// candidate (0); without the annotation it is (1).
#[test]
fn consolidation_metrics_should_correctly_report_eligible_nodes() {
    let mut w = three_nodes();
    for pod in ["a-p0", "b-p0", "c-p0"] {
        w.annotate_pod(pod, snapshot::DO_NOT_DISRUPT, "true");
    }
    let plan = w.decide();
    assert_eq!(plan.eligible.get(&Reason::Underutilized), Some(&0));
    let mut w = three_nodes();
    w.annotate_pod("a-p0", snapshot::DO_NOT_DISRUPT, "true");
    w.annotate_pod("b-p0", snapshot::DO_NOT_DISRUPT, "true");
    let plan = w.decide();
    assert_eq!(plan.eligible.get(&Reason::Underutilized), Some(&1));
}

/// drift_test.go, Metrics: "should correctly report eligible drifted
/// nodes" — a drifted node whose pod carries do-not-disrupt is no drift
/// candidate (0); once the annotation is gone it is (1). A node that has
/// not drifted is never one.
#[test]
fn drift_metrics_should_correctly_report_eligible_drifted_nodes() {
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    assert_eq!(w.decide().eligible.get(&Reason::Drifted), Some(&0));
    w.pools[0].labels.insert("team".into(), "b".into());
    w.annotate_pod("a-p0", snapshot::DO_NOT_DISRUPT, "true");
    assert_eq!(w.decide().eligible.get(&Reason::Drifted), Some(&0));
    let mut w = World::new();
    w.catalog = catalog(&["m5.xlarge"]);
    w.node("a", "m5.xlarge").pods_on("a", 3, 1000, 1024);
    w.pools[0].labels.insert("team".into(), "b".into());
    assert_eq!(w.decide().eligible.get(&Reason::Drifted), Some(&1));
}

/// emptiness_test.go, Metrics: "should correctly report eligible nodes"
/// — a node with a pod is no emptiness candidate (0); once the pod is
/// gone (and consolidateAfter has passed) it is (1).
#[test]
fn emptiness_metrics_should_correctly_report_eligible_nodes() {
    let mut w = World::with_pool(when_empty_30s());
    w.node("a", "m5.xlarge")
        .pods_on("a", 1, 500, 512)
        .observed_at(secs(0));
    assert_eq!(
        w.at(secs(5)).decide().eligible.get(&Reason::Empty),
        Some(&0)
    );
    w.pods.clear();
    w.observed_at(secs(10));
    assert_eq!(
        w.at(secs(40)).decide().eligible.get(&Reason::Empty),
        Some(&1)
    );
}

/// The gauge counts candidates before the budgets: a budget of zero
/// nodes stops the removal, not the count.
#[test]
fn eligible_nodes_are_counted_before_the_budgets() {
    let mut w = World::with_pool(when_empty_30s());
    w.budgets(serde_json::json!([{"nodes": "0"}]));
    w.node("a", "m5.xlarge")
        .pods_on("a", 1, 500, 512)
        .observed_at(secs(0));
    w.pods.clear();
    w.observed_at(secs(10));
    let plan = w.at(secs(40)).decide();
    assert!(disrupted(&plan).is_empty(), "the budget allows nothing");
    assert_eq!(plan.eligible.get(&Reason::Empty), Some(&1));
}
