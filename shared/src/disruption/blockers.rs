//! What keeps a node from voluntary disruption: `karpenter.sh/do-not-disrupt`
//! on the node or one of its pods (`"true"`, or a duration measured from the
//! node's creation / the pod's start, as in Karpenter 1.12+), and a
//! PodDisruptionBudget that allows no eviction of one of its pods.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::snapshot::{DO_NOT_DISRUPT, NodeFacts};
use crate::model::{PodKey, SignedDuration, Timestamp};
use crate::scheduling::selector::LabelSelector;
use crate::termination::drain::{pod_protection, protected_until};

fn until_text(until: Option<Timestamp>) -> String {
    match until {
        None => String::new(),
        Some(t) => format!(" until {}", t.strftime("%H:%M:%S UTC %Y-%m-%d")),
    }
}

/// `karpenter.sh/do-not-disrupt` on the node, counted from its creation.
pub fn node_do_not_disrupt(facts: &NodeFacts<'_>, now: Timestamp) -> Option<String> {
    let v = facts
        .node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DO_NOT_DISRUPT))?;
    let created = facts
        .node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(facts.created_at, |t| t.0);
    protected_until(v, created, now)
        .map(|until| format!("do-not-disrupt on node {}{}", facts.name, until_text(until)))
}

/// An active `karpenter.sh/do-not-disrupt` on one of the node's pods that
/// is neither finished nor terminating (DaemonSet and mirror pods count).
pub fn pod_do_not_disrupt(facts: &NodeFacts<'_>, now: Timestamp) -> Option<String> {
    facts
        .pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find_map(|p| {
            pod_protection(p, now).map(|until| {
                format!(
                    "do-not-disrupt on pod {}{}",
                    PodKey::of(p),
                    until_text(until)
                )
            })
        })
}

/// Why `facts`' node must not be voluntarily disrupted now, if anything stops it.
pub fn do_not_disrupt(facts: &NodeFacts<'_>, now: Timestamp) -> Option<String> {
    node_do_not_disrupt(facts, now).or_else(|| pod_do_not_disrupt(facts, now))
}

/// The PDBs of the snapshot, read once.
#[derive(Debug)]
pub struct Pdbs<'a> {
    items: Vec<(&'a PodDisruptionBudget, Option<LabelSelector>)>,
}

impl<'a> Pdbs<'a> {
    pub fn new(pdbs: &'a [PodDisruptionBudget]) -> Self {
        let items = pdbs
            .iter()
            .map(|pdb| {
                let selector = pdb
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .and_then(|s| LabelSelector::from_k8s(s).ok());
                (pdb, selector)
            })
            .collect();
        Pdbs { items }
    }

    fn matching(&self, p: &Pod) -> Vec<&'a PodDisruptionBudget> {
        let ns = p.metadata.namespace.as_deref().unwrap_or("default");
        let labels = p.metadata.labels.clone().unwrap_or_default();
        self.items
            .iter()
            .filter(|(pdb, _)| pdb.metadata.namespace.as_deref().unwrap_or("default") == ns)
            // A PDB without a selector (or one we cannot read) selects nothing, as in policy/v1.
            .filter(|(_, sel)| sel.as_ref().is_some_and(|s| s.matches(&labels)))
            .map(|(pdb, _)| *pdb)
            .collect()
    }

    /// The first of `pods` whose eviction a PDB refuses now, worded.
    pub fn blocking(&self, pods: &[&Pod]) -> Option<String> {
        for p in pods {
            let matching = self.matching(p);
            if matching.len() > 1 {
                let names: Vec<&str> = matching
                    .iter()
                    .map(|b| b.metadata.name.as_deref().unwrap_or(""))
                    .collect();
                return Some(format!(
                    "pod {} is selected by more than one PDB ({}): the eviction API refuses it",
                    PodKey::of(p),
                    names.join(", ")
                ));
            }
            if let Some(pdb) = matching.first() {
                let allowed = pdb.status.as_ref().map(|s| s.disruptions_allowed);
                if allowed.unwrap_or(0) <= 0 {
                    return Some(format!(
                        "pod {} blocked by PDB {}{}",
                        PodKey::of(p),
                        pdb.metadata.name.as_deref().unwrap_or(""),
                        if allowed.is_none() {
                            " (no status yet)"
                        } else {
                            " (0 disruptions allowed)"
                        }
                    ));
                }
            }
        }
        None
    }
}

/// Seconds as a short duration for messages (`30s`, `5m`, `2h10m`).
pub fn short(d: SignedDuration) -> String {
    crate::config::disruption::format_duration(SignedDuration::from_secs(d.as_secs().max(0)))
}
