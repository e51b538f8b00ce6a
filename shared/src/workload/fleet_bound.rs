//! The LP lower bound on fleet cost for a cluster's pods, as its NodePools
//! constrain them: each pod only on the pools and instance types its node
//! selector, required node affinity and tolerations admit; every node
//! paying for its DaemonSet pods and its kube-reserved; each pool within its
//! limits.
//!
//! Columns are (pool, instance type, capacity type), each at its cheapest
//! offering in any zone the pool allows; with [`FleetBound::with_zones`],
//! (pool, instance type, capacity type, zone) at that zone's price, so a
//! zone-pinned pod uses only its zone's offerings. Pods of one size that admit the
//! same columns form one group; the LP splits each group over its columns
//! (a share of its pods, so of each resource alike: pods of one size can
//! only be split that way):
//!
//! minimise Σ price_c·x_c subject to
//!   Σ_c y_gc = 1                                  for each group g,
//!   Σ_g req_g,r·y_gc ≤ allocatable_c,r·x_c        for each column c, r ∈ {cpu, memory, pods},
//!   Σ_{c ∈ pool} capacity_c,r·x_c ≤ limit_p,r     for each limited pool p and resource r,
//!   x, y ≥ 0.
//!
//! Any fleet that runs the pods is a solution (x_c its nodes of that column,
//! y_gc the share of group g on them), so none costs less. It stays a
//! relaxation: a pod may be split over nodes, topology spreads and pod
//! (anti-)affinity are not seen (nor zones, but for `with_zones`' pins), a
//! pending pod counts as if placed.

use std::collections::{BTreeMap, HashMap};

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOutcome, Variable};

use crate::config::NodePool;
use crate::model::CloudCatalog;
use crate::resources::{GIB, Resources};
use crate::scheduling::labels;
use crate::scheduling::pod::SchedPod;
use crate::scheduling::requirements::{Requirement, Requirements, Undefined};
use crate::scheduling::taints::{Taint, first_untolerated};

/// One (pool, instance type, capacity type) a node can be.
#[derive(Debug, Clone)]
struct Column {
    pool: usize,
    /// The labels a node of this column has, as requirements.
    node: Requirements,
    price: f64,
    capacity: Resources,
    /// Capacity less kube-reserved, system-reserved and the eviction threshold.
    allocatable: Resources,
}

/// The bound's static part (columns from pools × catalog) and a memo of
/// which columns each pod shape admits.
#[derive(Debug)]
pub struct FleetBound {
    columns: Vec<Column>,
    taints: Vec<Vec<Taint>>,
    /// Per pool: its cpu, memory and node-count limits, if any.
    limits: Vec<[Option<f64>; 3]>,
    /// Pod shape (selector, affinity, tolerations, volumes) → its admit set.
    shapes: HashMap<String, usize>,
    admit_sets: Vec<Vec<bool>>,
    /// The last question and its answer: most checks see the same pods.
    last: Option<(BoundKey, Option<f64>)>,
}

/// Requests per admit set: the groups, then the DaemonSets.
type BoundKey = (Vec<(usize, Resources, i64)>, Vec<(usize, Resources)>);

impl FleetBound {
    /// Columns at their cheapest offering in any zone the pool allows: a
    /// zone-pinned pod is bounded as if it could run in the cheapest zone.
    pub fn new(pools: &[NodePool], catalog: &CloudCatalog) -> Self {
        Self::build(pools, catalog, false)
    }

    /// One column per zone as well (pool, type, capacity type, zone), at
    /// that zone's price and labelled with it: a pod pinned to a zone (node
    /// selector or required affinity on `topology.kubernetes.io/zone`) can
    /// only use its zone's offerings. Tighter than [`FleetBound::new`] when
    /// pods are pinned, equal when none is, and larger (a column per
    /// offered zone) for the LP.
    pub fn with_zones(pools: &[NodePool], catalog: &CloudCatalog) -> Self {
        Self::build(pools, catalog, true)
    }

    fn build(pools: &[NodePool], catalog: &CloudCatalog, zonal: bool) -> Self {
        let mut columns = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            for info in &catalog.instance_types {
                let reqs = info.requirements();
                if !reqs.intersects(&pool.requirements) {
                    continue;
                }
                let node = reqs.intersection(&pool.requirements);
                for capacity_type in [labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND] {
                    if !pool
                        .requirements
                        .allows(labels::CAPACITY_TYPE, Some(capacity_type))
                    {
                        continue;
                    }
                    // The cheapest offering per zone (one entry, zone-blind,
                    // unless `zonal`).
                    let mut prices: BTreeMap<Option<&str>, f64> = BTreeMap::new();
                    for o in catalog.offerings.iter().filter(|o| {
                        o.instance_type == info.name
                            && o.capacity_type == capacity_type
                            && pool.requirements.allows(labels::ZONE, Some(&o.zone))
                    }) {
                        let zone = zonal.then_some(o.zone.as_str());
                        let price = prices.entry(zone).or_insert(o.price);
                        *price = price.min(o.price);
                    }
                    let capacity = info.capacity(&pool.kubelet);
                    let allocatable = capacity.saturating_sub(&info.overhead(&pool.kubelet));
                    for (zone, price) in prices {
                        let mut node = node.clone();
                        node.add(labels::CAPACITY_TYPE, Requirement::single(capacity_type));
                        if let Some(zone) = zone {
                            node.add(labels::ZONE, Requirement::single(zone));
                        }
                        columns.push(Column {
                            pool: p,
                            node,
                            price,
                            capacity: capacity.clone(),
                            allocatable: allocatable.clone(),
                        });
                    }
                }
            }
        }
        let limits = pools
            .iter()
            .map(|pool| {
                let limit = |name: &str| pool.limits.resources.get(name).map(|v| *v as f64);
                [
                    limit("cpu").map(|m| m / 1000.0),
                    limit("memory").map(|b| b / GIB as f64),
                    limit("nodes"),
                ]
            })
            .collect();
        FleetBound {
            columns,
            taints: pools.iter().map(|p| p.taints.clone()).collect(),
            limits,
            shapes: HashMap::new(),
            admit_sets: Vec::new(),
            last: None,
        }
    }

    /// The bound in USD per hour for these pods (DaemonSet pods among them
    /// are charged to every node they would run on, once per DaemonSet;
    /// pods no column admits, or no node of it can hold, are left out; when the pods need more than the
    /// pools' limits allow, the limits are left out). `None` only when the
    /// LP has no solution even then.
    pub fn bound(&mut self, pods: &[SchedPod]) -> Option<f64> {
        let mut daemons: BTreeMap<String, (usize, Resources)> = BTreeMap::new();
        // (admit set, cpu, memory, pods of one pod) → how many such pods.
        let mut groups: BTreeMap<(usize, i64, i64, i64), i64> = BTreeMap::new();
        for p in pods {
            let set = self.admit_set(p);
            if p.daemon {
                daemons
                    .entry(daemon_key(p))
                    .or_insert((set, p.requests.clone()));
            } else if self.admit_sets[set].iter().any(|a| *a) {
                let r = &p.requests;
                *groups
                    .entry((set, r.cpu_millis, r.memory_bytes, r.pods))
                    .or_default() += 1;
            }
        }
        let groups = groups
            .into_iter()
            .map(|((set, cpu, memory, pods), n)| (set, Resources::new(cpu, memory, pods), n));
        let key = (
            groups.collect::<Vec<_>>(),
            daemons.into_values().collect::<Vec<_>>(),
        );
        if let Some((k, b)) = &self.last
            && *k == key
        {
            return *b;
        }
        // Pods beyond the limits (pending, or on nodes launched before a
        // limit was lowered) make the limits infeasible: bound them without.
        let b = self
            .solve(&key.0, &key.1, true)
            .or_else(|| self.solve(&key.0, &key.1, false));
        self.last = Some((key, b));
        b
    }

    fn solve(
        &self,
        groups: &[(usize, Resources, i64)],
        daemons: &[(usize, Resources)],
        with_limits: bool,
    ) -> Option<f64> {
        if groups.is_empty() {
            return Some(0.0);
        }
        // Each node's allocatable, less the DaemonSets that would run on it.
        let mut allocatable: Vec<Resources> =
            self.columns.iter().map(|c| c.allocatable.clone()).collect();
        for (set, requests) in daemons {
            for (c, a) in allocatable.iter_mut().enumerate() {
                if self.admit_sets[*set][c] {
                    *a = a.saturating_sub(requests);
                }
            }
        }
        // A pod is never split over nodes: its group may use only the
        // columns one such pod fits on (else 3.5-CPU pods would fill tiny
        // burstable nodes in fractions, a fleet no one can launch).
        let groups: Vec<(Vec<bool>, Resources)> = groups
            .iter()
            .map(|(set, one, n)| {
                let admits = self.admit_sets[*set]
                    .iter()
                    .zip(&allocatable)
                    .map(|(a, room)| *a && one.fits_in(room))
                    .collect();
                (
                    admits,
                    Resources::new(one.cpu_millis * n, one.memory_bytes * n, one.pods * n),
                )
            })
            // Pods no node can hold are left out, as those no column admits.
            .filter(|(admits, _): &(Vec<bool>, Resources)| admits.iter().any(|a| *a))
            .collect();
        if groups.is_empty() {
            return Some(0.0);
        }
        let groups: Vec<(&Vec<bool>, &Resources)> = groups.iter().map(|(a, r)| (a, r)).collect();
        let kept = self.undominated(&groups, &allocatable);

        let mut lp = Problem::new(OptimizationDirection::Minimize);
        let x: Vec<Variable> = kept
            .iter()
            .map(|&c| lp.add_var(self.columns[c].price, (0.0, f64::INFINITY)))
            .collect();
        // Per kept column: (group, its share variable) for each group it admits.
        let mut shares: Vec<Vec<(usize, Variable)>> = vec![Vec::new(); kept.len()];
        for (g, (admits, _)) in groups.iter().enumerate() {
            let row: Vec<Variable> = kept
                .iter()
                .enumerate()
                .filter(|(_, c)| admits[**c])
                .map(|(k, _)| {
                    let v = lp.add_var(0.0, (0.0, 1.0));
                    shares[k].push((g, v));
                    v
                })
                .collect();
            if row.is_empty() {
                return None;
            }
            lp.add_constraint(row.into_iter().map(|v| (v, 1.0)), ComparisonOp::Eq, 1.0);
        }
        for (k, &c) in kept.iter().enumerate() {
            for unit in UNITS {
                let mut expr: Vec<(Variable, f64)> = vec![(x[k], -unit(&allocatable[c]))];
                expr.extend(shares[k].iter().map(|(g, v)| (*v, unit(groups[*g].1))));
                lp.add_constraint(expr, ComparisonOp::Le, 0.0);
            }
        }
        let per_node: [fn(&Resources) -> f64; 3] = [UNITS[0], UNITS[1], |_| 1.0];
        for (p, limits) in self.limits.iter().enumerate().filter(|_| with_limits) {
            for (limit, unit) in limits.iter().zip(per_node) {
                let Some(limit) = limit else { continue };
                let expr: Vec<_> = kept
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| self.columns[**c].pool == p)
                    .map(|(k, c)| (x[k], unit(&self.columns[*c].capacity)))
                    .collect();
                if !expr.is_empty() {
                    lp.add_constraint(expr, ComparisonOp::Le, *limit);
                }
            }
        }
        match lp.solve() {
            Ok(SolveOutcome::Solution(s)) => Some(s.objective()),
            _ => None,
        }
    }

    /// The index in `admit_sets` of the columns `pod` admits; pod shapes
    /// that admit the same columns share one.
    fn admit_set(&mut self, pod: &SchedPod) -> usize {
        let key = format!(
            "{:?}|{:?}|{:?}|{:?}",
            pod.node_selector, pod.required_terms, pod.tolerations, pod.volume
        );
        if let Some(set) = self.shapes.get(&key) {
            return *set;
        }
        let admits: Vec<bool> = self
            .columns
            .iter()
            .map(|c| admits_column(pod, c, &self.taints[c.pool]))
            .collect();
        let set = match self.admit_sets.iter().position(|s| *s == admits) {
            Some(set) => set,
            None => {
                self.admit_sets.push(admits);
                self.admit_sets.len() - 1
            }
        };
        self.shapes.insert(key, set);
        set
    }

    /// The columns worth the LP's time: a column is dropped when another of
    /// its pool, admitted by the same groups, gives at least as much of every
    /// resource for no more money and no more of the pool's limits, once
    /// scaled (the LP buys fractions of nodes, so only ratios matter).
    fn undominated(
        &self,
        groups: &[(&Vec<bool>, &Resources)],
        allocatable: &[Resources],
    ) -> Vec<usize> {
        let usable: Vec<usize> = (0..self.columns.len())
            .filter(|&c| {
                groups.iter().any(|(a, _)| a[c]) && UNITS.iter().all(|u| u(&allocatable[c]) > 0.0)
            })
            .collect();
        // Columns compete only with those of their pool admitted by the same
        // groups: bucketed once, not compared pair by pair (with a column
        // per zone there are thousands).
        let mut buckets: HashMap<(usize, Vec<bool>), Vec<usize>> = HashMap::new();
        for &c in &usable {
            let signature = (
                self.columns[c].pool,
                groups.iter().map(|(a, _)| a[c]).collect::<Vec<_>>(),
            );
            buckets.entry(signature).or_default().push(c);
        }
        let mut bucket_of: HashMap<usize, &Vec<usize>> = HashMap::new();
        for bucket in buckets.values() {
            for &c in bucket {
                bucket_of.insert(c, bucket);
            }
        }
        usable
            .iter()
            .copied()
            .filter(|&j| {
                !bucket_of[&j].iter().any(|&i| {
                    if i == j {
                        return false;
                    }
                    // λ copies of i cover one of j.
                    let lambda = UNITS
                        .iter()
                        .map(|u| u(&allocatable[j]) / u(&allocatable[i]))
                        .fold(0.0, f64::max);
                    let (ci, cj) = (&self.columns[i], &self.columns[j]);
                    let cheaper = lambda * ci.price;
                    let limits_ok = UNITS[..2]
                        .iter()
                        .all(|u| lambda * u(&ci.capacity) <= u(&cj.capacity) + 1e-9)
                        && lambda <= 1.0 + 1e-9;
                    let limited = self.limits[ci.pool].iter().any(Option::is_some);
                    // Ties go to the lower index, so of two equal columns one stays.
                    (cheaper < cj.price - 1e-12 || (cheaper <= cj.price + 1e-12 && i < j))
                        && (!limited || limits_ok)
                })
            })
            .collect()
    }
}

/// cores, GiB, pods: coefficients near 1.
const UNITS: [fn(&Resources) -> f64; 3] = [
    |r| r.cpu_millis as f64 / 1000.0,
    |r| r.memory_bytes as f64 / GIB as f64,
    |r| r.pods as f64,
];

fn daemon_key(p: &SchedPod) -> String {
    format!("{}|{:?}|{:?}", p.pod.namespace, p.labels, p.requests)
}

/// Whether `pod` may run on a node of `column` in a pool with `taints`.
fn admits_column(pod: &SchedPod, column: &Column, taints: &[Taint]) -> bool {
    let fits = |r: &Requirements| column.node.compatible(r, Undefined::WellKnownOnly).is_ok();
    first_untolerated(taints, &pod.tolerations, true).is_none()
        && fits(&pod.node_selector)
        && fits(&pod.volume)
        && (pod.required_terms.is_empty() || pod.required_terms.iter().any(fits))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::NodePoolSpec;
    use crate::workload::lower_bound::{Candidate, lp_lower_bound};

    fn pod(name: &str, cpu: &str, memory: &str, spec: serde_json::Value) -> SchedPod {
        let mut spec = spec;
        spec["containers"] =
            json!([{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]);
        let p = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": name}}, "spec": spec})).expect("pod");
        SchedPod::from_pod(&p).expect("valid pod")
    }

    fn pods(n: usize, cpu: &str, memory: &str, spec: serde_json::Value) -> Vec<SchedPod> {
        (0..n)
            .map(|i| pod(&format!("p{i}"), cpu, memory, spec.clone()))
            .collect()
    }

    fn pool(name: &str, spec: serde_json::Value) -> NodePool {
        let mut spec = spec;
        spec["template"]["spec"]["nodeClassRef"] =
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"});
        let spec: NodePoolSpec = serde_json::from_value(spec).expect("pool spec");
        NodePool::from_spec(name, &spec).expect("valid pool")
    }

    fn catalog() -> CloudCatalog {
        crate::sim::catalog::catalog("us-east-1").expect("embedded catalog")
    }

    fn requirements(capacity_types: &[&str]) -> serde_json::Value {
        json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8", "16"]}])
    }

    /// The old bound: every pod at the cheapest allocatable any pool offers.
    fn pooled_bound(pods: &[SchedPod], pools: &[NodePool], catalog: &CloudCatalog) -> f64 {
        let fb = FleetBound::new(pools, catalog);
        let candidates: Vec<Candidate> = fb
            .columns
            .iter()
            .map(|c| Candidate {
                price: c.price,
                allocatable: c.allocatable.clone(),
            })
            .collect();
        let mut total = Resources::default();
        pods.iter()
            .filter(|p| !p.daemon)
            .for_each(|p| total.add(&p.requests));
        lp_lower_bound(&total, &candidates).expect("feasible")
    }

    /// What a plan of `n` nodes of the cheapest on-demand type with at least
    /// `cpu` cores costs: an integral fleet the bound may not exceed.
    fn on_demand_plan(catalog: &CloudCatalog, name: &str, n: usize) -> f64 {
        let price = catalog
            .offerings
            .iter()
            .filter(|o| o.instance_type == name && o.capacity_type == "on-demand")
            .map(|o| o.price)
            .min_by(f64::total_cmp);
        price.expect("offered") * n as f64
    }

    #[test]
    fn pods_that_need_on_demand_are_priced_on_demand() {
        let catalog = catalog();
        let pools = [pool(
            "general",
            json!({"template": {"spec": {"requirements": requirements(&["spot", "on-demand"])}}}),
        )];
        let free = pods(20, "1", "2Gi", json!({}));
        let pinned = pods(
            20,
            "1",
            "2Gi",
            json!({"nodeSelector": {"karpenter.sh/capacity-type": "on-demand"}}),
        );
        let mut fb = FleetBound::new(&pools, &catalog);
        let (b_free, b_pinned) = (
            fb.bound(&free).expect("feasible"),
            fb.bound(&pinned).expect("feasible"),
        );
        // Tighter than the bound that pools every pod's cpu and memory apart
        // (which may take cpu from one type and memory from another).
        let pooled = pooled_bound(&free, &pools, &catalog);
        assert!(b_free >= pooled - 1e-9, "{b_free} vs {pooled}");
        assert!(
            b_free <= on_demand_plan(&catalog, "m5.4xlarge", 2),
            "{b_free}"
        );
        assert!(
            b_pinned > 1.5 * b_free,
            "on-demand {b_pinned} vs spot {b_free}"
        );
        // 20 × (1 cpu, 2 GiB) fit on 2 m5.4xlarge (16 cpu, 64 GiB) nodes.
        assert!(
            b_pinned <= on_demand_plan(&catalog, "m5.4xlarge", 2),
            "{b_pinned}"
        );
    }

    #[test]
    fn every_node_pays_for_its_daemonsets() {
        let catalog = catalog();
        let pools = [pool(
            "general",
            json!({"template": {"spec": {"requirements": requirements(&["on-demand"])}}}),
        )];
        let mut app = pods(20, "1", "2Gi", json!({}));
        let mut fb = FleetBound::new(&pools, &catalog);
        let without = fb.bound(&app).expect("feasible");
        // One DaemonSet, its pod on three nodes: charged per node, not per pod seen.
        for i in 0..3 {
            let mut d = pod(
                &format!("agent-{i}"),
                "500m",
                "512Mi",
                json!({"tolerations": [{"operator": "Exists"}]}),
            );
            d.daemon = true;
            d.labels = [("app".to_owned(), "agent".to_owned())].into();
            app.push(d);
        }
        let with = fb.bound(&app).expect("feasible");
        assert!(with > without, "{with} vs {without}");
        // A 16-cpu node keeps ≈ 15.3 cores after kube-reserved; the agent takes 0.5 of them.
        assert!(with < without * 1.1, "{with} vs {without}");
        assert!(with <= on_demand_plan(&catalog, "m5.4xlarge", 2), "{with}");
    }

    #[test]
    fn a_pool_limit_pushes_pods_to_the_dearer_pool() {
        let catalog = catalog();
        let spot = pool(
            "spot",
            json!({"limits": {"cpu": "8"}, "template": {"spec": {"requirements": requirements(&["spot"])}}}),
        );
        let od = pool(
            "od",
            json!({"template": {"spec": {"requirements": requirements(&["on-demand"])}}}),
        );
        let unlimited = pool(
            "spot",
            json!({"template": {"spec": {"requirements": requirements(&["spot"])}}}),
        );
        let app = pods(24, "1", "2Gi", json!({}));
        let limited = FleetBound::new(&[spot, od.clone()], &catalog).clone_bound(&app);
        let free = FleetBound::new(&[unlimited, od], &catalog).clone_bound(&app);
        assert!(limited > free * 1.5, "limited {limited} vs free {free}");
        // Spot's 8 cores hold at most 8 pods' cpu; 16+ cores go on-demand.
        assert!(
            limited <= on_demand_plan(&catalog, "m5.4xlarge", 2),
            "{limited}"
        );
        // More than the only pool's limit allows: bounded without the limit.
        let spot = pool(
            "spot",
            json!({"limits": {"cpu": "8"}, "template": {"spec": {"requirements": requirements(&["spot"])}}}),
        );
        let over = FleetBound::new(std::slice::from_ref(&spot), &catalog).clone_bound(&app);
        assert!((over - free).abs() < 1e-6, "{over} vs {free}");
    }

    #[test]
    fn pods_no_pool_admits_are_left_out_and_taints_need_tolerations() {
        let catalog = catalog();
        let mut spec =
            json!({"template": {"spec": {"requirements": requirements(&["on-demand"])}}});
        spec["template"]["spec"]["taints"] =
            json!([{"key": "batch", "value": "true", "effect": "NoSchedule"}]);
        let pools = [pool("batch", spec)];
        let mut fb = FleetBound::new(&pools, &catalog);
        assert_eq!(fb.bound(&pods(5, "1", "2Gi", json!({}))), Some(0.0));
        let tolerating = pods(
            5,
            "1",
            "2Gi",
            json!({"tolerations": [{"key": "batch", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}),
        );
        assert!(fb.bound(&tolerating).expect("feasible") > 0.0);
        // An arm64 pod on a pool of amd64 and arm64 types costs at least the arm64 bound.
        let arm = pods(
            5,
            "1",
            "2Gi",
            json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}, "tolerations": [{"operator": "Exists"}]}),
        );
        let any = pods(
            5,
            "1",
            "2Gi",
            json!({"tolerations": [{"operator": "Exists"}]}),
        );
        assert!(fb.bound(&arm).expect("feasible") >= fb.bound(&any).expect("feasible") - 1e-9);
    }

    #[test]
    fn a_pod_is_never_split_over_nodes() {
        let catalog = catalog();
        // The whole catalog, spot: small burstable types are the cheapest per core.
        let pools = [crate::workload::w2::pool(
            crate::workload::w2::Capacity::SpotAndOnDemand,
            crate::workload::w2::PoolRequirements::Open,
        )];
        let mut fb = FleetBound::new(&pools, &catalog);
        // The same 21 cores and 6 GiB: as 3.5-core pods, which no 2- or
        // 4-vCPU node holds, and as 42 half-core pods, which those take.
        let big = pods(6, "3500m", "1Gi", json!({}));
        let small = pods(42, "500m", "146Mi", json!({}));
        let (b_big, b_small) = (
            fb.bound(&big).expect("feasible"),
            fb.bound(&small).expect("feasible"),
        );
        assert!(b_big > b_small * 1.05, "{b_big} vs {b_small}");
        // A pod no node can hold is left out, as one no column admits.
        let mut with_huge = big.clone();
        with_huge.push(pod("huge", "5000", "1Gi", json!({})));
        assert_eq!(fb.bound(&with_huge), Some(b_big));
    }

    #[test]
    fn with_zones_a_pinned_pod_pays_its_zones_price() {
        let catalog = catalog();
        let pools = [pool(
            "general",
            json!({"template": {"spec": {"requirements": requirements(&["spot", "on-demand"])}}}),
        )];
        // Spot prices differ per zone: the pods pinned to the dearest zone
        // (for the type the zone-blind bound buys) cost more once zones are seen.
        let zones = crate::workload::w2::zones(&pools[0], &catalog);
        let free = pods(40, "1", "2Gi", json!({}));
        let (mut blind, mut zonal) = (
            FleetBound::new(&pools, &catalog),
            FleetBound::with_zones(&pools, &catalog),
        );
        let (b_free, z_free) = (
            blind.bound(&free).expect("feasible"),
            zonal.bound(&free).expect("feasible"),
        );
        // No pin: the cheapest zone either way.
        assert!((b_free - z_free).abs() < 1e-6, "{b_free} vs {z_free}");
        let mut dearest = (0.0, String::new());
        for zone in &zones {
            let pinned = pods(
                40,
                "1",
                "2Gi",
                json!({"nodeSelector": {"topology.kubernetes.io/zone": zone}}),
            );
            let (b, z) = (
                blind.bound(&pinned).expect("feasible"),
                zonal.bound(&pinned).expect("feasible"),
            );
            // Still a bound on the same fleets, never below the zone-blind one.
            assert!((b - b_free).abs() < 1e-6, "{zone}: {b} vs {b_free}");
            assert!(z >= b - 1e-9, "{zone}: {z} vs {b}");
            if z > dearest.0 {
                dearest = (z, zone.clone());
            }
        }
        assert!(
            dearest.0 > b_free * 1.01,
            "some zone is dearer than the cheapest: {dearest:?} vs {b_free}"
        );
        // 40 × (1 cpu, 2 GiB) fit on 3 m5.4xlarge (16 cpu) on-demand in any zone.
        assert!(
            dearest.0 <= on_demand_plan(&catalog, "m5.4xlarge", 3),
            "{dearest:?}"
        );
    }

    impl FleetBound {
        fn clone_bound(mut self, pods: &[SchedPod]) -> f64 {
            self.bound(pods).expect("feasible")
        }
    }
}
