//! Placing one pod: existing nodes, then the claims planned so far
//! (skipping those that refused its class), then a new claim from each
//! NodePool by weight.

use std::collections::BTreeMap;

use fixedbitset::FixedBitSet;

use super::Solver;
use super::solve::Strategy;
use crate::resources::Resources;
use crate::scheduling::pod::HostPort;
use crate::scheduling::requirements::Requirements;
use crate::scheduling::taints::first_untolerated;
use crate::scheduling::topology::{Candidate, HostId};
use crate::scheduling::volumes::{Attachment, within_limits};

#[derive(Debug, Clone)]
pub(super) struct NodeState {
    pub(super) used: Resources,
    pub(super) ports: Vec<HostPort>,
    /// The volumes its pods attach, sorted (held to `volume_limits`).
    pub(super) volumes: Vec<Attachment>,
}

/// A refusal; `permanent` ones let the class cursor move past the host.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refused {
    pub(super) permanent: bool,
    /// The refusal holds while the claim keeps its pods, whatever the
    /// topology counts do (a price refusal: narrowing can only raise it).
    pub(super) stable: bool,
    /// A permanent refusal that holds for every class placed alike (see
    /// `AlikeKey`), whatever its topology: remembered once for all of them.
    pub(super) alike: bool,
}

pub(super) const FINAL: Refused = Refused {
    permanent: true,
    stable: true,
    alike: false,
};

/// Refused for its requests, node requirements, tolerations, ports or
/// guidance: every class alike is refused too, for good.
pub(super) const FINAL_ALIKE: Refused = Refused {
    permanent: true,
    stable: true,
    alike: true,
};

pub(super) const FOR_NOW: Refused = Refused {
    permanent: false,
    stable: false,
    alike: false,
};

impl<'a> Solver<'a> {
    pub(super) fn place(&mut self, i: usize, k: usize) -> bool {
        self.admit_memo.clear();
        // Existing nodes first.
        let mut advancing = true;
        for n in self.classes[k].node_cursor..self.nodes.len() {
            match self.try_node(i, k, n) {
                Ok(()) => return true,
                Err(r) if r.permanent && advancing => self.classes[k].node_cursor = n + 1,
                Err(_) => advancing = false,
            }
        }
        // Then claims planned in this solve.
        if self.strategy == Strategy::Karpenter {
            // Claims by pod count, then age; a bucket per count.
            let mut count = 0;
            while count < self.by_pods.len() {
                let mut pos = 0;
                while pos < self.by_pods[count].len() {
                    let ci = self.by_pods[count][pos] as usize;
                    if !self.classes[k].refused.contains(ci) && !self.refused_for_now(k, ci) {
                        match self.try_claim(i, k, ci) {
                            Ok(()) => return true,
                            Err(r) if r.permanent => self.refuse(k, ci),
                            Err(r) => self.refuse_for_now(k, ci, r),
                        }
                    }
                    pos += 1;
                }
                count += 1;
            }
        } else {
            let mut advancing = true;
            let a = self.classes[k].alike as usize;
            let mut ci = self.classes[k]
                .claim_cursor
                .max(self.classes.alike[a].cursor);
            self.classes[k].claim_cursor = ci;
            while ci < self.claims.len() {
                // Claims refused for good are skipped a word at a time: a pod
                // in a spread of its own may have thousands behind it.
                let free = next_unrefused(
                    &[&self.classes.alike[a].refused, &self.classes[k].refused],
                    ci,
                    self.claims.len(),
                );
                if free > ci {
                    if self.classes.alike[a].cursor == ci {
                        self.classes.alike[a].cursor =
                            next_unrefused(&[&self.classes.alike[a].refused], ci, free);
                    }
                    if advancing {
                        self.classes[k].claim_cursor = free;
                    }
                    ci = free;
                    continue;
                }
                if self.refused_for_now(k, ci) {
                    advancing = false;
                } else {
                    match self.try_claim(i, k, ci) {
                        Ok(()) => return true,
                        Err(r) if r.permanent => {
                            if r.alike {
                                self.refuse_alike(a, ci);
                            }
                            if advancing {
                                self.classes[k].claim_cursor = ci + 1;
                            } else if !r.alike {
                                self.refuse(k, ci);
                            }
                        }
                        Err(r) => {
                            advancing = false;
                            self.refuse_for_now(k, ci, r);
                        }
                    }
                }
                ci += 1;
            }
        }
        // Then a new claim, NodePools by weight.
        for oi in 0..self.pool_order.len() {
            let p = self.pool_order[oi];
            if self.new_claim(i, k, p) {
                return true;
            }
        }
        false
    }

    pub(super) fn refused_for_now(&self, k: usize, ci: usize) -> bool {
        let pods = Some(&(self.claims[ci].pods.len() as u32));
        let cls = &self.classes[k];
        cls.refused_at.get(&(ci as u32)) == pods
            || self
                .classes
                .alike
                .get(cls.alike as usize)
                .is_some_and(|a| a.refused_at.get(&(ci as u32)) == pods)
    }

    /// Remembers a transient refusal while the claim's pods stay the same:
    /// without topology any refusal depends only on the claim, and a stable
    /// one does whatever the topology counts — for every class alike
    /// (pods of many apps in zone spreads, each app's a class of its own,
    /// would otherwise each judge every claim's price anew).
    pub(super) fn refuse_for_now(&mut self, k: usize, ci: usize, r: Refused) {
        let pods = self.claims[ci].pods.len() as u32;
        if r.stable {
            let a = self.classes[k].alike as usize;
            if let Some(alike) = self.classes.alike.get_mut(a) {
                alike.refused_at.insert(ci as u32, pods);
                return;
            }
        }
        if self.classes[k].shape.topo.is_empty() || r.stable {
            self.classes[k].refused_at.insert(ci as u32, pods);
        }
    }

    /// Remembers that claim `ci` refuses class `k` for good.
    /// Remembers that claim `ci` refuses every class of `AlikeKey` `a` for good.
    pub(super) fn refuse_alike(&mut self, a: usize, ci: usize) {
        let alike = &mut self.classes.alike[a];
        if alike.cursor == ci {
            alike.cursor = ci + 1;
        } else {
            if alike.refused.len() <= ci {
                alike.refused.grow(self.claims.len().max(ci + 1));
            }
            alike.refused.insert(ci);
        }
    }

    pub(super) fn refuse(&mut self, k: usize, ci: usize) {
        let refused = &mut self.classes[k].refused;
        if refused.len() <= ci {
            refused.grow(self.claims.len().max(ci + 1));
        }
        refused.insert(ci);
    }

    pub(super) fn try_node(&mut self, i: usize, k: usize, n: usize) -> Result<(), Refused> {
        let node = &self.nodes[n];
        let cls = &self.classes[k];
        let state = &self.node_state[n];
        if node.unschedulable || !state.used.fits_with(&cls.shape.requests, &node.allocatable) {
            return Err(FINAL);
        }
        if first_untolerated(
            &node.taints,
            &cls.shape.constraints.tolerations,
            cls.shape.constraints.ignore_prefer_no_schedule,
        )
        .is_some()
        {
            return Err(FINAL);
        }
        if !labels_satisfy(&node.labels, &cls.shape.constraints.node)
            || ports_conflict(&state.ports, &cls.shape.ports)
        {
            return Err(FINAL);
        }
        // Attach limits are per pod (pods of a class may use other
        // claims): a refusal for now, which another pod of the class may
        // not meet.
        let wanted = &self.pods[i].attachments;
        if !within_limits(&node.volume_limits, &state.volumes, wanted) {
            return Err(FOR_NOW);
        }
        let cand = Candidate::Node {
            host: n as HostId,
            labels: &node.labels,
        };
        if !cls.shape.topo.is_empty() {
            self.topology
                .admit(&cls.shape.topo, &cls.shape.constraints, cand)
                .map_err(|r| Refused {
                    permanent: r.permanent,
                    stable: false,
                    alike: false,
                })?;
        }
        let state = &mut self.node_state[n];
        state.used.add(&cls.shape.requests);
        state.ports.extend(cls.shape.ports.iter().copied());
        if !wanted.is_empty() {
            state.volumes.extend(wanted.iter().cloned());
            state.volumes.sort();
            state.volumes.dedup();
        }
        if !cls.shape.topo.is_empty() {
            self.topology.record(&cls.shape.topo, cand, &node.taints);
        }
        self.bindings.push((i, node.name.clone()));
        Ok(())
    }
}

/// The first index in `from..end` in none of the sets (`end` when none), a
/// word at a time.
pub(super) fn next_unrefused(sets: &[&FixedBitSet], from: usize, end: usize) -> usize {
    let bits = usize::BITS as usize;
    let mut word = from / bits;
    let mut mask = usize::MAX << (from % bits);
    while word * bits < end {
        let refused = sets.iter().fold(0, |all, set| {
            all | set.as_slice().get(word).copied().unwrap_or(0)
        });
        let free = !refused & mask;
        if free != 0 {
            return (word * bits + free.trailing_zeros() as usize).min(end);
        }
        word += 1;
        mask = usize::MAX;
    }
    end
}

/// True when `r` equals `max` in some resource (removing it may lower the maximum).
/// A node with these labels meets the requirements (a missing label meets
/// only those that allow absence).
pub(super) fn labels_satisfy(node_labels: &BTreeMap<String, String>, reqs: &Requirements) -> bool {
    reqs.iter().all(|(key, r)| match node_labels.get(key) {
        Some(v) => r.has(v),
        None => r.allows_absence(),
    })
}

pub(super) fn ports_conflict(used: &[HostPort], wanted: &[HostPort]) -> bool {
    wanted.iter().any(|w| used.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The word-at-a-time skip finds what a bit-by-bit scan finds, sets
        /// shorter than the range included.
        #[test]
        fn next_unrefused_is_the_first_index_in_no_set(
            a in proptest::collection::vec(proptest::bool::ANY, 0..200),
            b in proptest::collection::vec(proptest::bool::ANY, 0..200),
            from in 0usize..220,
            len in 0usize..220,
        ) {
            let set = |bits: &[bool]| bits.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| i).collect::<FixedBitSet>();
            let (a, b) = (set(&a), set(&b));
            let end = from + len;
            let expected = (from..end).find(|&i| !a.contains(i) && !b.contains(i)).unwrap_or(end);
            proptest::prop_assert_eq!(next_unrefused(&[&a, &b], from, end), expected);
        }
    }
}
