//! The state one decision builds up as its methods run: every node's facts,
//! the verdicts and notes so far, budgets left, and the simulated cluster.

use rand::SeedableRng;

use super::blockers::{Pdbs, node_do_not_disrupt, pod_do_not_disrupt};
use super::budget::Budgets;
use super::decision::{Command, Reason, Replacement, Target};
use super::observe;
use super::simulate::{Outcome, Simulator};
use super::snapshot::{NodeFacts, Snapshot, node_facts};
use crate::config::hash::fnv1a;
use crate::model::claim::DisruptionState;
use crate::model::{Claim, Phase};
use crate::packing::NewClaim;
use crate::provisioning::plan::{new_claim, random_suffix};
use crate::termination::drain::{is_mirror, pod_protection, tolerates_disruption};

#[derive(Debug)]
pub struct Context<'s, 'a> {
    pub s: &'s Snapshot<'a>,
    pub facts: Vec<NodeFacts<'a>>,
    /// Each node's bookkeeping as of now (what [`observe`] computes).
    pub states: Vec<Option<DisruptionState>>,
    pub pdbs: Pdbs<'a>,
    pub budgets: Budgets<'a>,
    /// The simulated cluster, built on first use: a decision that needs no
    /// re-scheduling (nothing empty to place, nothing to consolidate) does
    /// not pay for the pools' instance types.
    sim: Option<Simulator<'a>>,
    /// Removals committed before the simulator was built, replayed into it.
    removed_unsimulated: Vec<(String, String)>,
    /// Per node: the command that removes it.
    pub verdicts: Vec<Option<(Reason, usize)>>,
    /// Per node: why methods passed it over.
    pub notes: Vec<Vec<String>>,
    pub commands: Vec<Command>,
    /// Per voluntary reason, the nodes its method found candidates before
    /// the budgets (Karpenter's `eligible_nodes` gauge).
    pub eligible: std::collections::BTreeMap<Reason, std::collections::BTreeSet<usize>>,
    /// Per node: the pending pods the provisioner's solve would place on
    /// it, on the cluster as the snapshot shows it (before any move of
    /// this decision). Such a node is nominated for them.
    pub pending_placed: std::collections::BTreeMap<String, Vec<crate::model::PodKey>>,
    rng: rand_chacha::ChaCha8Rng,
}

/// How a method wants to remove some nodes.
#[derive(Debug)]
pub struct Proposal {
    pub reason: Reason,
    pub method: &'static str,
    pub targets: Vec<usize>,
    /// The simulation of the targets' pods, and the new claims to launch
    /// (each with the options to offer, possibly narrowed).
    pub outcome: Option<Outcome>,
    pub replacements: Vec<NewClaim>,
    pub replacement_price: Option<f64>,
    pub savings: f64,
    pub summary: String,
}

impl<'s, 'a> Context<'s, 'a> {
    pub fn new(s: &'s Snapshot<'a>) -> Self {
        let facts = node_facts(s);
        let states = facts
            .iter()
            .map(|f| {
                f.claim
                    .map(|c| observe::next_state(&c.disruption, f, s.now))
            })
            .collect();
        let budgets = Budgets::new(&facts, s.now);
        let n = facts.len();
        let mut cx = Context {
            s,
            pdbs: Pdbs::new(s.pdbs),
            facts,
            states,
            budgets,
            sim: None,
            removed_unsimulated: Vec::new(),
            verdicts: vec![None; n],
            notes: vec![Vec::new(); n],
            commands: Vec::new(),
            eligible: Default::default(),
            pending_placed: Default::default(),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(s.seed),
        };
        cx.pending_placed = cx.place_pending();
        cx
    }

    /// Where the pending pods would go now: the provisioner's solve on the
    /// simulated cluster (the same check of a pod against a node's
    /// requirements, taints and free room). The room they take there is
    /// held for the rest of the decision, so no move counts on it; pods
    /// that need a new node hold nothing (the provisioner launches for
    /// them). A pod that cannot be simulated (its spec unreadable) is left
    /// out: the provisioner reports it.
    fn place_pending(&mut self) -> std::collections::BTreeMap<String, Vec<crate::model::PodKey>> {
        let mut placed: std::collections::BTreeMap<String, Vec<crate::model::PodKey>> =
            Default::default();
        let pending: Vec<&'a k8s_openapi::api::core::v1::Pod> = self
            .s
            .pending
            .iter()
            .filter(|p| {
                super::snapshot::node_of_pod(p).is_none()
                    && p.metadata.deletion_timestamp.is_none()
                    && !super::snapshot::is_node_bound(p)
                    && !super::snapshot::finished(p)
            })
            .collect();
        if pending.is_empty() {
            return placed;
        }
        let outcome = match self.sim().simulate(&[], &pending) {
            Ok(o) => o,
            Err(_) => {
                let volumes = self.s.volumes;
                let readable: Vec<&k8s_openapi::api::core::v1::Pod> = pending
                    .into_iter()
                    .filter(|p| {
                        crate::scheduling::SchedPod::from_pod_with_volumes(p, volumes).is_ok()
                    })
                    .collect();
                match self.sim().simulate(&[], &readable) {
                    Ok(o) => o,
                    Err(_) => return placed,
                }
            }
        };
        self.sim().hold(&outcome);
        for (k, node) in &outcome.bindings {
            placed
                .entry(node.clone())
                .or_default()
                .push(outcome.keys[*k].clone());
        }
        placed
    }

    pub fn note(&mut self, i: usize, text: impl Into<String>) {
        let text = text.into();
        if !self.notes[i].contains(&text) {
            self.notes[i].push(text);
        }
    }

    /// Whether node `i` can be considered at all: one of our registered
    /// nodes, with a NodePool, initialized (Ready, or was before it lost
    /// it: a node still booting is no candidate, as in Karpenter), not
    /// disrupting, not yet decided.
    pub fn open(&self, i: usize) -> bool {
        let f = &self.facts[i];
        self.verdicts[i].is_none()
            && f.disrupting.is_none()
            && f.pool.is_some()
            && f.claim.is_some_and(|c| c.phase() == Phase::Registered)
            && (f.ready || crate::provisioning::plan::lost_readiness(f.node, self.s.now))
    }

    /// Why node `i` may not be disrupted voluntarily (do-not-disrupt on the
    /// node or a pod, a PDB).
    pub fn blocked(&self, i: usize) -> Option<String> {
        self.node_blocked(i).or_else(|| self.pods_blocked(i))
    }

    /// `karpenter.sh/do-not-disrupt` on the node itself.
    pub fn node_blocked(&self, i: usize) -> Option<String> {
        node_do_not_disrupt(&self.facts[i], self.s.now)
    }

    /// A pod whose eviction would be refused: an active do-not-disrupt
    /// (DaemonSet and mirror pods included, as in Karpenter), or a PDB that
    /// allows none (over the pods a drain would evict: DaemonSet pods too,
    /// not mirror pods or pods that tolerate the disrupted taint).
    pub fn pods_blocked(&self, i: usize) -> Option<String> {
        let f = &self.facts[i];
        pod_do_not_disrupt(f, self.s.now).or_else(|| {
            let evictable: Vec<&k8s_openapi::api::core::v1::Pod> = f
                .pods
                .iter()
                .copied()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| !is_mirror(p) && !tolerates_disruption(p))
                .collect();
            self.pdbs.blocking(&evictable)
        })
    }

    /// Why node `i` may not be disrupted for `reason` (a voluntary one).
    /// Drift and repair are Karpenter's "eventual" disruptions: when the
    /// NodePool bounds the drain (`terminationGracePeriod`), pods that
    /// would refuse eviction do not stop them — the deadline will delete
    /// them; a do-not-disrupt on the node still does (drift).
    pub fn blocked_for(&self, i: usize, reason: Reason) -> Option<String> {
        let bounded = self.facts[i]
            .pool
            .is_some_and(|p| p.termination_grace_period.is_some());
        match reason {
            Reason::Drifted | Reason::Unhealthy if bounded => {
                if reason == Reason::Drifted {
                    self.node_blocked(i)
                } else {
                    None
                }
            }
            Reason::Unhealthy => self.pods_blocked(i).map(|why| {
                format!("{why}; repair needs the NodePool's terminationGracePeriod to get past it")
            }),
            _ => self.blocked(i),
        }
    }

    /// Node `i` was launched as the replacement of a removal whose node
    /// still holds pods (not DaemonSet or static ones): they are headed for
    /// it. Karpenter calls such a node nominated and does not disrupt it
    /// voluntarily; it is a candidate again once the old node is empty or
    /// gone. (A claim's own planned pods end with its registration, so the
    /// removal's list of replacements is what says it.)
    pub fn nominated(&self, i: usize) -> Option<String> {
        self.nominated_for_replaced(i)
            .or_else(|| self.nominated_for_pending(i))
    }

    /// A pending pod would be placed on node `i` now (Karpenter nominates
    /// the node its provisioner picks for a pod). Such a pod is typically
    /// one a removal evicted, re-created and not yet bound to the
    /// replacement. The node is a candidate again once the pod is bound
    /// (it then holds it) or gone.
    pub fn nominated_for_pending(&self, i: usize) -> Option<String> {
        let pods = self.pending_placed.get(&self.facts[i].name)?;
        let first = pods.first()?;
        Some(match pods.len() {
            1 => format!("nominated for pending pods: {first} would be placed on it"),
            n => format!("nominated for pending pods: {n} ({first}, …) would be placed on it"),
        })
    }

    /// Node `i` was launched for the pods of a removal that have not moved yet.
    fn nominated_for_replaced(&self, i: usize) -> Option<String> {
        let claim = self.facts[i].claim?;
        let removal = self
            .s
            .in_flight
            .iter()
            .find(|f| f.replacements.contains(&claim.id))?;
        let old = self
            .facts
            .iter()
            .find(|f| f.name == removal.node && f.name != self.facts[i].name)?;
        let moving = old
            .pods
            .iter()
            .filter(|p| !super::snapshot::is_node_bound(p))
            .count();
        (moving > 0).then(|| {
            format!(
                "launched for the pods of {} (being removed), {moving} of which have not moved yet",
                old.name
            )
        })
    }

    /// [`Self::open`], [`Self::blocked_for`] and the budget for `reason`;
    /// notes the reason when the node is shut out.
    pub fn eligible(&mut self, i: usize, reason: Reason) -> bool {
        if !self.open(i) {
            return false;
        }
        if !reason.is_forceful() {
            if let Some(why) = self.blocked_for(i, reason) {
                self.note(i, why);
                return false;
            }
            if reason != Reason::Unhealthy
                && let Some(why) = self.nominated(i)
            {
                self.note(i, why);
                return false;
            }
            // A candidate, as Karpenter counts them: before the budgets.
            self.eligible.entry(reason).or_default().insert(i);
            let pool = self.pool_name(i);
            if self.budgets.remaining(&pool, reason) == 0 {
                let why = self.budgets.exhausted(&pool, reason);
                self.note(i, why);
                return false;
            }
        }
        true
    }

    /// The pool the node's claim names (it may no longer exist).
    pub fn pool_name(&self, i: usize) -> String {
        self.facts[i]
            .claim
            .map(|c| c.pool.clone())
            .unwrap_or_default()
    }

    /// (node, claim id) of node `i`.
    pub fn key(&self, i: usize) -> (&str, &str) {
        let f = &self.facts[i];
        (f.name.as_str(), f.claim.map_or("", |c| c.id.as_str()))
    }

    /// The simulated cluster (built now if it was not yet).
    pub fn sim(&mut self) -> &mut Simulator<'a> {
        let (s, facts, removed) = (self.s, &self.facts, &mut self.removed_unsimulated);
        self.sim.get_or_insert_with(|| {
            let mut sim = Simulator::new(s, facts);
            for (node, claim) in removed.drain(..) {
                if let Ok(empty) = sim.simulate(&[], &[]) {
                    sim.commit(&[(node.as_str(), claim.as_str())], &empty, &[]);
                }
            }
            sim
        })
    }

    /// Why node `i` is not empty though it runs no pod to move: it holds
    /// chunks of CapacityBuffers (Karpenter's emptiness check of buffer pods).
    pub fn holds_buffer(&mut self, i: usize) -> Option<String> {
        if self.s.buffers.is_empty() {
            return None;
        }
        let name = self.facts[i].name.clone();
        let (n, buffers) = self.sim().buffer_held(&name);
        (n > 0).then(|| {
            let names: Vec<String> = buffers.into_iter().collect();
            format!(
                "holds {n} chunk(s) of capacity buffer {}: not empty",
                names.join(", ")
            )
        })
    }

    /// The reschedulable pods of node `i` a drain would move now: not those
    /// with an active do-not-disrupt or a PDB that allows no eviction (they
    /// stay until the removal's deadline).
    pub fn movable(&self, i: usize) -> Vec<&'a k8s_openapi::api::core::v1::Pod> {
        let now = self.s.now;
        self.facts[i]
            .reschedulable
            .iter()
            .copied()
            .filter(|p| pod_protection(p, now).is_none())
            .filter(|p| self.pdbs.blocking(&[p]).is_none())
            .collect()
    }

    /// Simulates the removal of `targets` with only `pods` to place (a
    /// drift leaves the pods that refuse eviction to its deadline).
    pub fn simulate_pods(
        &mut self,
        targets: &[usize],
        pods: &[&'a k8s_openapi::api::core::v1::Pod],
    ) -> Result<Outcome, String> {
        self.simulate_removal(targets, pods, &std::collections::BTreeSet::new())
    }

    /// The removal of `targets` with `pods` to place, no pod moving onto
    /// the nodes of `closed`.
    fn simulate_removal(
        &mut self,
        targets: &[usize],
        pods: &[&'a k8s_openapi::api::core::v1::Pod],
        closed: &std::collections::BTreeSet<String>,
    ) -> Result<Outcome, String> {
        let remove: Vec<(String, String)> = targets
            .iter()
            .map(|i| (self.key(*i).0.to_owned(), self.key(*i).1.to_owned()))
            .collect();
        let remove_refs: Vec<(&str, &str)> = remove
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        self.sim().simulate_closed(&remove_refs, pods, closed)
    }

    /// The pods the removal of `targets` must place again.
    fn reschedulable_of(&self, targets: &[usize]) -> Vec<&'a k8s_openapi::api::core::v1::Pod> {
        targets
            .iter()
            .flat_map(|i| self.facts[*i].reschedulable.iter().copied())
            .collect()
    }

    /// Nodes under their pool's `consolidateAfter` window (a nonzero one):
    /// their pods changed (or, with no change seen, they registered) less
    /// than `consolidateAfter` ago. Karpenter's consolidation does not move
    /// running pods onto them; pending pods and the pods of nodes already
    /// going may still land there.
    pub fn under_consolidate_after(&self) -> std::collections::BTreeSet<String> {
        let now = self.s.now;
        self.facts
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                let Some(after) = f.pool.and_then(|p| p.disruption.consolidate_after) else {
                    return false;
                };
                let Some(registered) = f.claim.and_then(|c| c.registered_at) else {
                    return false;
                };
                let since = self.states[*i]
                    .as_ref()
                    .and_then(|s| s.last_pod_event_at)
                    .unwrap_or(registered);
                after > crate::model::SignedDuration::ZERO && now.duration_since(since) < after
            })
            .map(|(_, f)| f.name.clone())
            .collect()
    }

    /// [`Self::simulate`] as consolidation simulates: no pod moves onto a
    /// node [`Self::under_consolidate_after`].
    pub fn simulate_consolidation(&mut self, targets: &[usize]) -> Result<Outcome, String> {
        let closed = self.under_consolidate_after();
        let pods = self.reschedulable_of(targets);
        self.simulate_removal(targets, &pods, &closed)
    }

    /// Simulates the removal of `targets`: their pods placed on the rest.
    pub fn simulate(&mut self, targets: &[usize]) -> Result<Outcome, String> {
        let pods = self.reschedulable_of(targets);
        self.simulate_pods(targets, &pods)
    }

    /// Turns a proposal into a command: the verdicts, the budgets and the
    /// simulated cluster all move on.
    pub fn commit(&mut self, p: Proposal) -> usize {
        let index = self.commands.len();
        let now = self.s.now;
        let mut targets = Vec::new();
        for i in &p.targets {
            let f = &self.facts[*i];
            targets.push(Target {
                node: f.name.clone(),
                claim_id: f.claim.map(|c| c.id.clone()).unwrap_or_default(),
                pool: f
                    .pool
                    .map(|p| p.name.clone())
                    .or_else(|| f.claim.map(|c| c.pool.clone()))
                    .unwrap_or_default(),
                instance_id: f.claim.and_then(|c| c.instance_id().map(str::to_owned)),
                instance_type: f.instance_type.clone(),
                capacity_type: f.capacity_type.clone(),
                zone: f.zone.clone(),
                price: f.price,
                pods: f.pod_keys(),
                pods_fingerprint: observe::fingerprint(f),
            });
        }
        let mut claims: Vec<(NewClaim, Claim)> = Vec::new();
        if let Some(outcome) = &p.outcome {
            for planned in &p.replacements {
                let Some(input) = self.sim.as_ref().and_then(|sim| sim.pool(&planned.pool)) else {
                    continue;
                };
                let class = input
                    .pool()
                    .node_class
                    .as_deref()
                    .and_then(|n| self.s.classes.iter().find(|c| c.name == n));
                let id = format!("{}-{}", input.pool().name, random_suffix(&mut self.rng));
                // A replacement's chunks of CapacityBuffers hold room; nothing is nominated for them.
                let pods = planned
                    .pods
                    .iter()
                    .map(|k| outcome.keys[*k].clone())
                    .filter(|k| !crate::provisioning::buffers::is_virtual_key(k))
                    .collect();
                let claim = new_claim(input, planned, pods, id, now, class);
                claims.push((planned.clone(), claim));
            }
            let remove: Vec<(String, String)> = p
                .targets
                .iter()
                .map(|i| (self.key(*i).0.to_owned(), self.key(*i).1.to_owned()))
                .collect();
            let refs: Vec<(&str, &str)> = remove
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            self.sim().commit(&refs, outcome, &claims);
        } else {
            let remove: Vec<(String, String)> = p
                .targets
                .iter()
                .map(|i| (self.key(*i).0.to_owned(), self.key(*i).1.to_owned()))
                .collect();
            let refs: Vec<(&str, &str)> = remove
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            match self.sim.as_mut() {
                Some(sim) => {
                    if let Ok(empty) = sim.simulate(&[], &[]) {
                        sim.commit(&refs, &empty, &[]);
                    }
                }
                None => self.removed_unsimulated.extend(remove.iter().cloned()),
            }
        }
        let replacement = (!claims.is_empty()).then(|| Replacement {
            price: p
                .replacement_price
                .unwrap_or_else(|| claims.iter().map(|(n, _)| n.price()).sum()),
            claims: claims.into_iter().map(|(_, c)| c).collect(),
        });
        // The NodePool's terminationGracePeriod bounds every drain (repair's
        // too: AWS's repair policies set no bound of their own).
        let deadline = self.facts[p.targets[0]]
            .pool
            .and_then(|pool| pool.termination_grace_period)
            .and_then(|d| now.checked_add(d).ok());
        let validate_at = (!p.reason.is_forceful())
            .then(|| {
                now.checked_add(crate::model::SignedDuration::from_secs(
                    self.s.tuning.validation_delay_secs,
                ))
                .ok()
            })
            .flatten();
        let ids: Vec<&str> = targets.iter().map(|t| t.claim_id.as_str()).collect();
        let id = format!(
            "{}-{:012x}",
            p.reason.as_str().to_lowercase(),
            fnv1a(ids.join(",").as_bytes()) & 0xffff_ffff_ffff
        );
        for i in &p.targets {
            self.verdicts[*i] = Some((p.reason, index));
            let pool = self.pool_name(*i);
            self.budgets.take(&pool, &self.facts[*i], p.reason);
        }
        self.commands.push(Command {
            id,
            reason: p.reason,
            method: p.method,
            targets,
            replacement,
            deadline,
            validate_at,
            savings: p.savings,
            summary: p.summary,
        });
        index
    }
}
