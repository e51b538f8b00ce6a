//! The fleet at a glance, in the spirit of eks-node-viewer: per NodePool,
//! each node with its type, zone, capacity type, age and pods, CPU and
//! memory requested against allocatable as bars, and $/hour per node, pool
//! and fleet with the spot savings; then pending pods and why, claims in
//! flight and removals in progress with their step. A pure function of a
//! [`FleetSnapshot`], so the simulator's end-of-run view and the live
//! `nodewright status` (`status_live.rs`) render the same thing.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::model::claim::Claim;
use nodewright::model::{Command, Instance, Timestamp};
use nodewright::resources::{Resources, format_bytes, format_cpu};
use nodewright::scheduling::{SchedPod, labels};
use serde_json::json;

/// Everything the view shows, read once.
#[derive(Debug, Clone, Default)]
pub struct FleetSnapshot {
    pub now: Option<Timestamp>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub instances: Vec<Instance>,
    /// (instance type, zone) → on-demand $/hour, for spot savings.
    pub on_demand: HashMap<(String, String), f64>,
    pub claims: Vec<Claim>,
    /// `namespace/name` → why it is pending (the provisioner's latest word).
    pub pending_reasons: BTreeMap<String, String>,
    /// Removals in progress (the drain-and-terminate machine's commands).
    pub commands: Vec<Command>,
    /// Pools being handed over from Karpenter (`nodewright.io/karpenter-nodes:
    /// replace`), as `disruption::handover::status` reads them.
    pub handovers: Vec<nodewright::disruption::handover::Handover>,
    /// The CapacityBuffers: chunks wanted, placed, launching, fitting nowhere.
    pub buffers: Vec<nodewright::provisioning::buffers::BufferStatus>,
}

/// One node's line.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub name: String,
    pub pool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub age_seconds: Option<i64>,
    pub pods: usize,
    pub requested: Resources,
    pub allocatable: Resources,
    pub price: f64,
    pub on_demand_price: f64,
}

fn label<'n>(n: &'n Node, key: &str) -> &'n str {
    n.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

pub fn pod_node(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

pub fn pod_name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// (instance type, zone) → on-demand $/hour, from a catalog's offerings.
pub fn on_demand_prices(
    catalog: &nodewright::model::CloudCatalog,
) -> HashMap<(String, String), f64> {
    catalog
        .offerings
        .iter()
        .filter(|o| o.capacity_type == "on-demand")
        .map(|o| ((o.instance_type.clone(), o.zone.clone()), o.price))
        .collect()
}

/// The scheduler's word on a pod it could not place (`PodScheduled=False`).
pub fn scheduler_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .and_then(|c| c.message.clone())
}

impl FleetSnapshot {
    pub fn rows(&self) -> Vec<NodeRow> {
        let mut rows: Vec<NodeRow> = self
            .nodes
            .iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let pid = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .unwrap_or_default();
                let instance = self.instances.iter().find(|i| i.provider_id == pid);
                let (it, zone) = (
                    label(n, labels::INSTANCE_TYPE).to_owned(),
                    label(n, labels::ZONE).to_owned(),
                );
                let price = instance.map_or(0.0, |i| i.price);
                let on_demand_price = self
                    .on_demand
                    .get(&(it.clone(), zone.clone()))
                    .copied()
                    .unwrap_or(price);
                let allocatable = n
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| Resources::from_list(a).ok())
                    .unwrap_or_default();
                let on: Vec<&Pod> = self
                    .pods
                    .iter()
                    .filter(|p| pod_node(p) == Some(name.as_str()))
                    .collect();
                let mut requested = Resources::default();
                for p in &on {
                    if let Ok(sp) = SchedPod::from_pod(p) {
                        requested.add(&sp.requests);
                    }
                }
                let created = n
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_second());
                NodeRow {
                    pool: label(n, labels::NODEPOOL).to_owned(),
                    instance_type: it,
                    zone,
                    capacity_type: label(n, labels::CAPACITY_TYPE).to_owned(),
                    age_seconds: self.now.zip(created).map(|(now, c)| now.as_second() - c),
                    pods: on.len(),
                    requested,
                    allocatable,
                    price,
                    on_demand_price,
                    name,
                }
            })
            .collect();
        rows.sort_by(|a, b| (&a.pool, &a.name).cmp(&(&b.pool, &b.name)));
        rows
    }

    pub fn pending(&self) -> Vec<(String, String)> {
        self.pods
            .iter()
            .filter(|p| pod_node(p).is_none())
            .map(|p| {
                let name = pod_name(p);
                let reason = self
                    .pending_reasons
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| "no reason recorded yet".to_owned());
                (name, reason)
            })
            .collect()
    }

    /// Claims launched or launching whose node has not registered.
    pub fn in_flight(&self) -> Vec<&Claim> {
        self.claims
            .iter()
            .filter(|c| c.node_name.is_none())
            .collect()
    }
}

/// The distinct spot capacity pools (instance type, zone) the nodes are
/// on: how far EC2 spread the fleet (nodes in one pool can be reclaimed
/// together).
pub fn spot_pools(rows: &[NodeRow]) -> usize {
    rows.iter()
        .filter(|r| r.capacity_type == labels::CAPACITY_TYPE_SPOT)
        .map(|r| (r.instance_type.as_str(), r.zone.as_str()))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// `████░░░░` for `used` of `total`, `width` cells.
pub fn bar(used: i64, total: i64, width: usize) -> String {
    let share = if total > 0 {
        (used as f64 / total as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let full = (share * width as f64).round() as usize;
    (0..width)
        .map(|i| if i < full { '█' } else { '░' })
        .collect()
}

fn pct(used: i64, total: i64) -> f64 {
    if total > 0 {
        used as f64 * 100.0 / total as f64
    } else {
        0.0
    }
}

fn age(s: Option<i64>) -> String {
    match s {
        None => "-".to_owned(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m", s / 60),
        Some(s) if s < 172_800 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86_400),
    }
}

/// The text view.
pub fn render(snap: &FleetSnapshot) -> String {
    let rows = snap.rows();
    let mut out = String::new();
    let mut pools: BTreeMap<&str, Vec<&NodeRow>> = BTreeMap::new();
    for r in &rows {
        pools.entry(r.pool.as_str()).or_default().push(r);
    }
    let (mut fleet, mut fleet_od) = (0.0, 0.0);
    for (pool, rows) in &pools {
        let cost: f64 = rows.iter().map(|r| r.price).sum();
        let od: f64 = rows.iter().map(|r| r.on_demand_price).sum();
        fleet += cost;
        fleet_od += od;
        let shown = if pool.is_empty() {
            "(no NodePool)"
        } else {
            pool
        };
        out.push_str(&format!(
            "NodePool {shown}: {} node(s), ${cost:.4}/hour\n",
            rows.len()
        ));
        for r in rows {
            out.push_str(&format!(
                "  {:<44} {:<14} {:<12} {:<9} {:>4} {:>3} pods  cpu {} {:>3.0}% {}/{}  mem {} {:>3.0}% {}/{}  ${:.4}/h\n",
                r.name,
                r.instance_type,
                r.zone,
                r.capacity_type,
                age(r.age_seconds),
                r.pods,
                bar(r.requested.cpu_millis, r.allocatable.cpu_millis, 10),
                pct(r.requested.cpu_millis, r.allocatable.cpu_millis),
                format_cpu(r.requested.cpu_millis),
                format_cpu(r.allocatable.cpu_millis),
                bar(r.requested.memory_bytes, r.allocatable.memory_bytes, 10),
                pct(r.requested.memory_bytes, r.allocatable.memory_bytes),
                format_bytes(r.requested.memory_bytes),
                format_bytes(r.allocatable.memory_bytes),
                r.price,
            ));
        }
    }
    let savings = if fleet_od > 0.0 {
        (fleet_od - fleet) / fleet_od * 100.0
    } else {
        0.0
    };
    out.push_str(&format!(
        "fleet: {} node(s), {} pod(s), ${fleet:.4}/hour (${:.2}/month); spot saves {savings:.0}% against on-demand (${fleet_od:.4}/hour)\n",
        rows.len(),
        snap.pods.len(),
        fleet * 730.0
    ));
    out.push_str(&format!(
        "spot pools: {} distinct (instance type, zone)\n",
        spot_pools(&rows)
    ));
    let pending = snap.pending();
    out.push_str(&format!("pending pods: {}\n", pending.len()));
    for (name, reason) in &pending {
        out.push_str(&format!("  {name}: {reason}\n"));
    }
    let flight = snap.in_flight();
    out.push_str(&format!("claims in flight: {}\n", flight.len()));
    for c in flight {
        let instance = c
            .instance
            .as_ref()
            .map_or_else(|| "launching".to_owned(), |i| format!("{i:?}"));
        out.push_str(&format!(
            "  {} (NodePool {}, {} pod(s)): {instance}\n",
            c.id,
            c.pool,
            c.pods.len()
        ));
    }
    for b in &snap.buffers {
        let (condition, message) = b.condition();
        let condition = if b.not_ready.is_some() {
            format!("{condition}: {message}")
        } else {
            condition.to_owned()
        };
        out.push_str(&format!(
            "capacity buffer {}: {} chunk(s) wanted, {} placed, {} launching, {} fitting nowhere ({condition})\n",
            b.buffer, b.wanted, b.placed, b.launching, b.unplaced
        ));
    }
    out.push_str(&format!("removals in progress: {}\n", snap.commands.len()));
    for c in &snap.commands {
        let node = c.spec.node.as_deref().unwrap_or("(no node)");
        let deadline = c
            .spec
            .deadline
            .map_or_else(|| "no deadline".to_owned(), |d| format!("deadline {d}"));
        out.push_str(&format!(
            "  {} (NodePool {}, node {node}): {}, step {:?}, {deadline}, {} replacement(s)\n",
            c.id,
            c.spec.pool,
            c.spec.reason,
            c.step,
            c.replacements.len()
        ));
    }
    out.push_str(&render_handovers(&snap.handovers));
    out
}

/// Per pool handed over from Karpenter: its nodes left, those going, the
/// next one and why it waits.
pub fn render_handovers(handovers: &[nodewright::disruption::handover::Handover]) -> String {
    let mut out = String::new();
    for h in handovers {
        out.push_str(&format!(
            "handover from Karpenter, NodePool {}: {} Karpenter node(s) left",
            h.pool, h.remaining
        ));
        if !h.start.is_empty() {
            out.push_str(&format!("; starting now: {}", h.start.join(", ")));
        }
        if !h.in_progress.is_empty() {
            out.push_str(&format!("; in progress: {}", h.in_progress.join(", ")));
        }
        out.push_str(&format!("; next: {}", h.next.as_deref().unwrap_or("none")));
        if let Some(why) = &h.waiting {
            out.push_str(&format!("; waits: {why}"));
        }
        out.push('\n');
    }
    out
}

/// The same view for scripts.
pub fn to_json(snap: &FleetSnapshot) -> serde_json::Value {
    let rows = snap.rows();
    let fleet: f64 = rows.iter().map(|r| r.price).sum();
    let fleet_od: f64 = rows.iter().map(|r| r.on_demand_price).sum();
    json!({
        "nodes": rows.iter().map(|r| json!({
            "name": r.name, "nodepool": r.pool, "instance_type": r.instance_type, "zone": r.zone,
            "capacity_type": r.capacity_type, "age_seconds": r.age_seconds, "pods": r.pods,
            "cpu_requested_millis": r.requested.cpu_millis, "cpu_allocatable_millis": r.allocatable.cpu_millis,
            "memory_requested_bytes": r.requested.memory_bytes, "memory_allocatable_bytes": r.allocatable.memory_bytes,
            "price_per_hour": r.price, "on_demand_price_per_hour": r.on_demand_price,
        })).collect::<Vec<_>>(),
        "cost_per_hour": fleet,
        "on_demand_cost_per_hour": fleet_od,
        "spot_pools": spot_pools(&rows),
        "pending": snap.pending().into_iter().map(|(n, r)| json!({"name": n, "reason": r})).collect::<Vec<_>>(),
        "claims_in_flight": snap.in_flight().iter().map(|c| json!({"id": c.id, "nodepool": c.pool, "pods": c.pods.len()})).collect::<Vec<_>>(),
        "buffers": snap.buffers.iter().map(|b| json!({
            "buffer": b.buffer, "wanted": b.wanted, "placed": b.placed, "launching": b.launching,
            "unplaced": b.unplaced, "condition": b.condition().0, "reason": b.reason,
            "not_ready": b.not_ready,
        })).collect::<Vec<_>>(),
        "removals": snap.commands.iter().map(|c| json!({
            "nodeclaim": c.id, "nodepool": c.spec.pool, "node": c.spec.node, "reason": c.spec.reason.as_str(),
            "step": format!("{:?}", c.step), "deadline": c.spec.deadline.map(|d| d.to_string()), "replacements": c.replacements,
        })).collect::<Vec<_>>(),
        "handovers": snap.handovers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_line_says_what_is_left_the_next_and_why_it_waits() {
        let h = nodewright::disruption::handover::Handover {
            pool: "web".into(),
            start: vec![],
            in_progress: vec!["k1 (deleted; Karpenter draining it)".into()],
            remaining: 2,
            next: Some("k2".into()),
            waiting: Some("budget for Drifted in NodePool web (1 of 3 nodes, 1 going)".into()),
        };
        assert_eq!(
            render_handovers(&[h]),
            "handover from Karpenter, NodePool web: 2 Karpenter node(s) left; in progress: k1 (deleted; Karpenter draining it); next: k2; waits: budget for Drifted in NodePool web (1 of 3 nodes, 1 going)\n"
        );
    }

    #[test]
    fn bars_and_ages() {
        assert_eq!(bar(500, 1000, 10), "█████░░░░░");
        assert_eq!(bar(5, 0, 4), "░░░░");
        assert_eq!(bar(2000, 1000, 4), "████");
        assert_eq!(age(Some(90)), "90s");
        assert_eq!(age(Some(3600)), "60m");
    }

    #[test]
    fn spot_pools_count_distinct_spot_types_and_zones() {
        let row = |t: &str, zone: &str, capacity: &str| NodeRow {
            name: format!("{t}-{zone}-{capacity}"),
            pool: "p".into(),
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type: capacity.into(),
            age_seconds: None,
            pods: 0,
            requested: Resources::default(),
            allocatable: Resources::default(),
            price: 0.0,
            on_demand_price: 0.0,
        };
        let rows = [
            row("m5.large", "a", "spot"),
            row("m5.large", "a", "spot"),
            row("m5.large", "b", "spot"),
            row("c5.large", "a", "spot"),
            row("r5.large", "a", "on-demand"),
        ];
        assert_eq!(spot_pools(&rows), 3);
        assert_eq!(spot_pools(&rows[4..]), 0);
    }

    #[test]
    fn numbers_come_from_the_objects() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "general", "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-east-1a", "karpenter.sh/capacity-type": "spot"}},
            "spec": {"providerID": "aws:///us-east-1a/i-1"},
            "status": {"allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}}
        }))
        .expect("node");
        let pod = |name: &str, node: Option<&str>| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}))
            .expect("pod")
        };
        let instance: Instance = serde_json::from_value(json!({"id": "i-1", "instance_type": "m5.large", "zone": "us-east-1a",
            "capacity_type": "spot", "state": "running", "launched_at": "2026-01-01T00:00:00Z", "claim_id": null, "pool": "general",
            "provider_id": "aws:///us-east-1a/i-1", "price": 0.04}))
        .expect("instance");
        let snap = FleetSnapshot {
            nodes: vec![node],
            pods: vec![pod("a", Some("n1")), pod("b", Some("n1")), pod("c", None)],
            instances: vec![instance],
            on_demand: [(("m5.large".to_owned(), "us-east-1a".to_owned()), 0.096)].into(),
            pending_reasons: [(
                "default/c".to_owned(),
                "NodePool general limit cpu 1 reached".to_owned(),
            )]
            .into(),
            ..Default::default()
        };
        let rows = snap.rows();
        assert_eq!(rows[0].requested.cpu_millis, 1000);
        assert_eq!(rows[0].allocatable.cpu_millis, 1930);
        assert_eq!(rows[0].pods, 2);
        let text = render(&snap);
        assert!(
            text.contains("NodePool general: 1 node(s), $0.0400/hour"),
            "{text}"
        );
        assert!(text.contains("52%"), "{text}");
        assert!(text.contains("spot saves 58%"), "{text}");
        assert!(
            text.contains("default/c: NodePool general limit cpu 1 reached"),
            "{text}"
        );
        assert!(text.contains("spot pools: 1 distinct"), "{text}");
        let v = to_json(&snap);
        assert_eq!(v["spot_pools"], 1);
        assert_eq!(v["nodes"][0]["memory_requested_bytes"], 2_i64 << 30);
        assert_eq!(v["pending"][0]["name"], "default/c");
    }
}
