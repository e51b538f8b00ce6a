//! The scheduling simulation behind every disruption that moves pods: the
//! candidates' pods re-solved on the rest of the cluster with the solver and
//! the cluster view the provisioner uses, so "their pods fit elsewhere"
//! means what the next provisioning pass would do.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use super::snapshot::{NodeFacts, Snapshot};
use crate::model::claim::UNREGISTERED_TAINT_KEY;
use crate::model::{Claim, PodKey, Usage};
use crate::packing::{ExistingNode, NewClaim, PoolInput, SolveOptions, solve};
use crate::provisioning::plan::{self, daemon_pods, instance_types, resources_of};
use crate::resources::Resources;
use crate::scheduling::SchedPod;
use crate::scheduling::labels;
use crate::scheduling::volumes::VolumeIndex;

/// The result of placing some pods.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub keys: Vec<PodKey>,
    /// (pod index, node name).
    pub bindings: Vec<(usize, String)>,
    pub claims: Vec<NewClaim>,
    pub unschedulable: Vec<(PodKey, String)>,
    pods: Vec<SchedPod>,
}

/// The cluster as this decision has changed it so far.
#[derive(Debug)]
pub struct Simulator<'a> {
    nodes: Vec<ExistingNode>,
    pools: Vec<PoolInput>,
    daemons: Vec<SchedPod>,
    volumes: &'a VolumeIndex,
    /// Claim id → its reservation, for the pools' limits.
    reservations: BTreeMap<String, (String, Usage)>,
    removed: BTreeSet<String>,
    /// Per node: the CapacityBuffer chunks (virtual pods) it holds, by
    /// uid. They take their room like pods; a move that removes the node
    /// places them again, with the pods it moves.
    holding: BTreeMap<String, Vec<SchedPod>>,
    /// The Settings' scheduling policies, as the provisioner solves.
    options: SolveOptions,
}

fn pods_of(pods: &[&Pod], volumes: &VolumeIndex) -> Result<(Vec<SchedPod>, Vec<PodKey>), String> {
    let mut out = Vec::with_capacity(pods.len());
    let mut keys = Vec::with_capacity(pods.len());
    for p in pods {
        out.push(
            SchedPod::from_pod_with_volumes(p, volumes)
                .map_err(|e| format!("pod {} cannot be simulated: {e}", PodKey::of(p)))?,
        );
        keys.push(PodKey::of(p));
    }
    Ok((out, keys))
}

impl<'a> Simulator<'a> {
    /// The cluster of `s`, with nodes already disrupting closed to new pods
    /// and `carry` (pods of removals that launched no replacement) placed
    /// first, so no move counts on the room they will take.
    pub fn new(s: &Snapshot<'a>, facts: &[NodeFacts<'_>]) -> Self {
        let scheduled: Vec<Pod> = s
            .pods
            .iter()
            .filter(|p| super::snapshot::node_of_pod(p).is_some())
            .filter(|p| !super::snapshot::finished(p))
            .cloned()
            .collect();
        let usage = BTreeMap::new();
        let view = plan::Snapshot {
            now: s.now,
            pending: &[],
            scheduled: &scheduled,
            nominated: &[],
            nodes: s.nodes,
            daemon_sets: s.daemon_sets,
            claims: s.claims,
            pools: s.pools,
            node_classes: s.classes,
            catalog: s.catalog,
            unavailable: s.unavailable,
            usage: &usage,
            volumes: s.volumes,
            settings: s.settings,
            seed: s.seed,
        };
        let mut nodes = plan::existing_nodes(&view);
        // A claim without a node yet holds the room its pods were promised,
        // and takes no pods of a disruption: a node that has not come up is
        // no place to move running pods to (Karpenter never schedules them
        // onto an uninitialized node) — it may never come up.
        for n in &mut nodes {
            if let Some(c) = s
                .claims
                .iter()
                .find(|c| c.id == n.name && c.node_name.is_none())
            {
                if n.pods.is_empty() {
                    n.requested = resources_of(&c.requests);
                }
                n.unschedulable = true;
            }
        }
        // Nodes going away, and NotReady ones, take no pods in a simulation
        // (moving pods onto a node that may be repaired next is churn); nor
        // do Karpenter's nodes of a pool handed over with `replace`, which
        // all go (`super::handover`).
        let handed_over: Vec<&str> = s
            .pools
            .iter()
            .filter(|p| {
                super::handover::karpenter_nodes(p)
                    == crate::config::settings::KarpenterNodes::Replace
            })
            .map(|p| p.name.as_str())
            .collect();
        let disrupting: BTreeSet<&str> = facts
            .iter()
            .filter(|f| {
                f.disrupting.is_some()
                    || f.unhealthy_since.is_some()
                    || handed_over
                        .iter()
                        .any(|p| super::handover::is_karpenters(f.node, p, s.claims))
            })
            .map(|f| f.name.as_str())
            .collect();
        for n in &mut nodes {
            if disrupting.contains(n.name.as_str()) {
                n.unschedulable = true;
            }
        }
        let mut reservations = BTreeMap::new();
        let mut in_use: BTreeMap<String, Resources> = BTreeMap::new();
        let mut nodes_in_use: BTreeMap<String, i64> = BTreeMap::new();
        for c in s.claims {
            reservations.insert(c.id.clone(), (c.pool.clone(), c.reservation.clone()));
            in_use
                .entry(c.pool.clone())
                .or_default()
                .add(&resources_of(&c.reservation));
            *nodes_in_use.entry(c.pool.clone()).or_default() += c
                .reservation
                .get(crate::model::claim::NODES)
                .copied()
                .unwrap_or(0);
        }
        let mut pools: Vec<PoolInput> = s
            .pools
            .iter()
            .map(|pool| {
                let mut input =
                    PoolInput::new(pool.clone(), instance_types(pool, s.catalog, s.unavailable));
                input.in_use = in_use.get(&pool.name).cloned().unwrap_or_default();
                input.nodes_in_use = nodes_in_use.get(&pool.name).copied().unwrap_or(0);
                input
            })
            .collect();
        pools.sort_by(|a, b| {
            b.pool()
                .weight
                .cmp(&a.pool().weight)
                .then_with(|| a.pool().name.cmp(&b.pool().name))
        });
        let mut sim = Simulator {
            nodes,
            pools,
            daemons: daemon_pods(s.daemon_sets),
            volumes: s.volumes,
            reservations,
            removed: BTreeSet::new(),
            holding: BTreeMap::new(),
            options: plan::solve_options(s.settings),
        };

        let in_flight_no_replacement: BTreeSet<&str> = s
            .in_flight
            .iter()
            .filter(|f| !f.replace)
            .map(|f| f.node.as_str())
            .collect();
        let carry: Vec<&Pod> = facts
            .iter()
            .filter(|f| in_flight_no_replacement.contains(f.name.as_str()))
            .flat_map(|f| f.reschedulable.iter().copied())
            .collect();
        if !carry.is_empty()
            && let Ok(outcome) = sim.simulate(&[], &carry)
        {
            sim.apply_bindings(&outcome);
        }
        // Then the CapacityBuffers' chunks, on the room real pods leave
        // (as the provisioner places them). A chunk that fits on no node
        // now is the provisioner's to launch for: no node holds it, and
        // no move is judged on it.
        let buffers: Vec<&Pod> = s.buffers.iter().collect();
        if !buffers.is_empty()
            && let Ok(outcome) = sim.simulate(&[], &buffers)
        {
            sim.apply_bindings(&outcome);
        }
        sim
    }

    /// How many CapacityBuffer chunks node `name` holds, and of which buffers.
    pub fn buffer_held(&self, name: &str) -> (usize, BTreeSet<String>) {
        let held = self.holding.get(name).map_or(&[][..], Vec::as_slice);
        let buffers = held
            .iter()
            .filter_map(|p| {
                crate::provisioning::buffers::buffer_of_key(&PodKey {
                    namespace: String::new(),
                    name: String::new(),
                    uid: p.uid.clone(),
                })
                .map(str::to_owned)
            })
            .collect();
        (held.len(), buffers)
    }

    pub fn pool(&self, name: &str) -> Option<&PoolInput> {
        self.pools.iter().find(|p| p.pool().name == name)
    }

    /// Places `pods` with the nodes of `remove` (and their claims' reservations) gone.
    /// The CapacityBuffer chunks the removed nodes hold are placed too
    /// (after `pods`, their keys last in the outcome).
    pub fn simulate(&mut self, remove: &[(&str, &str)], pods: &[&Pod]) -> Result<Outcome, String> {
        self.simulate_closed(remove, pods, &BTreeSet::new())
    }

    /// [`Self::simulate`] with the nodes of `closed` taking no pod (they
    /// still count for topology).
    pub fn simulate_closed(
        &mut self,
        remove: &[(&str, &str)],
        pods: &[&Pod],
        closed: &BTreeSet<String>,
    ) -> Result<Outcome, String> {
        let (mut sched, mut keys) = pods_of(pods, self.volumes)?;
        let names: BTreeSet<&str> = remove.iter().map(|(node, _)| *node).collect();
        for node in &names {
            for chunk in self.holding.get(*node).into_iter().flatten() {
                keys.push(PodKey {
                    namespace: chunk.pod.namespace.clone(),
                    name: chunk.pod.name.clone(),
                    uid: chunk.uid.clone(),
                });
                sched.push(chunk.clone());
            }
        }
        let nodes: Vec<ExistingNode> = self
            .nodes
            .iter()
            .filter(|n| !names.contains(n.name.as_str()) && !self.removed.contains(&n.name))
            .map(|n| {
                let mut n = n.clone();
                if closed.contains(&n.name) {
                    n.unschedulable = true;
                }
                n
            })
            .collect();
        let freed = self.freed(remove);
        for (pool, r) in &freed {
            if let Some(p) = self.pools.iter_mut().find(|p| &p.pool().name == pool) {
                p.in_use = p.in_use.saturating_sub(r);
                p.nodes_in_use -= 1;
            }
        }
        let plan = solve(&sched, &nodes, &self.pools, &self.daemons, &self.options);
        for (pool, r) in &freed {
            if let Some(p) = self.pools.iter_mut().find(|p| &p.pool().name == pool) {
                p.in_use.add(r);
                p.nodes_in_use += 1;
            }
        }
        Ok(Outcome {
            unschedulable: plan
                .unschedulable
                .iter()
                .map(|(i, why)| (keys[*i].clone(), why.clone()))
                .collect(),
            bindings: plan.bindings,
            claims: plan.claims,
            keys,
            pods: sched,
        })
    }

    fn freed(&self, remove: &[(&str, &str)]) -> Vec<(String, Resources)> {
        remove
            .iter()
            .filter_map(|(_, claim)| self.reservations.get(*claim))
            .map(|(pool, u)| (pool.clone(), resources_of(u)))
            .collect()
    }

    /// Holds the room `outcome`'s pods take on the nodes it bound them to,
    /// for every move after it, removing nothing: the pending pods the
    /// provisioner will bind there (Karpenter simulates them beside the
    /// candidates' pods). Pods the outcome puts on new claims hold nothing:
    /// the provisioner launches for them.
    pub fn hold(&mut self, outcome: &Outcome) {
        self.apply_bindings(outcome);
    }

    fn apply_bindings(&mut self, outcome: &Outcome) {
        for (i, node) in &outcome.bindings {
            if let Some(n) = self.nodes.iter_mut().find(|n| &n.name == node) {
                let pod = &outcome.pods[*i];
                n.requested.add(&pod.requests);
                n.pods.push(pod.clone());
                if crate::provisioning::buffers::is_virtual_key(&outcome.keys[*i]) {
                    self.holding
                        .entry(node.clone())
                        .or_default()
                        .push(pod.clone());
                }
            }
        }
    }

    /// Makes a decided move part of the cluster for the moves after it:
    /// `remove` gone, the pods bound where the simulation put them, and the
    /// replacement claims as nodes holding their pods.
    pub fn commit(
        &mut self,
        remove: &[(&str, &str)],
        outcome: &Outcome,
        claims: &[(NewClaim, Claim)],
    ) {
        for (pool, r) in self.freed(remove) {
            if let Some(p) = self.pools.iter_mut().find(|p| p.pool().name == pool) {
                p.in_use = p.in_use.saturating_sub(&r);
                p.nodes_in_use -= 1;
            }
        }
        for (node, claim) in remove {
            self.removed.insert((*node).to_owned());
            self.reservations.remove(*claim);
            self.holding.remove(*node);
        }
        self.apply_bindings(outcome);
        for (planned, claim) in claims {
            let Some(input) = self.pools.iter_mut().find(|p| p.pool().name == claim.pool) else {
                continue;
            };
            input.in_use.add(&resources_of(&claim.reservation));
            input.nodes_in_use += 1;
            let Some(option) = planned.options.first() else {
                continue;
            };
            let Some(it) = input
                .instance_types()
                .iter()
                .find(|t| *t.name == *option.instance_type)
            else {
                continue;
            };
            let mut node_labels = it.requirements.single_valued_labels();
            node_labels.extend(claim.labels.clone());
            node_labels.insert(labels::ZONE.to_owned(), option.zone.to_string());
            node_labels.insert(
                labels::CAPACITY_TYPE.to_owned(),
                option.capacity_type.to_string(),
            );
            node_labels.insert(labels::HOSTNAME.to_owned(), claim.id.clone());
            let pods: Vec<SchedPod> = planned
                .pods
                .iter()
                .map(|i| outcome.pods[*i].clone())
                .collect();
            let chunks: Vec<SchedPod> = planned
                .pods
                .iter()
                .filter(|i| crate::provisioning::buffers::is_virtual_key(&outcome.keys[**i]))
                .map(|i| outcome.pods[*i].clone())
                .collect();
            if !chunks.is_empty() {
                self.holding.insert(claim.id.clone(), chunks);
            }
            let mut requested = Resources::default();
            for p in &pods {
                requested.add(&p.requests);
            }
            self.nodes.push(ExistingNode {
                name: claim.id.clone(),
                labels: node_labels,
                taints: claim
                    .taints
                    .iter()
                    .filter(|t| t.key != UNREGISTERED_TAINT_KEY)
                    .cloned()
                    .collect(),
                allocatable: it.allocatable().clone(),
                requested,
                pods,
                unschedulable: false,
                volume_limits: Default::default(),
            });
            self.reservations.insert(
                claim.id.clone(),
                (claim.pool.clone(), claim.reservation.clone()),
            );
        }
    }
}
