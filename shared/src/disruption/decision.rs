//! What the disruption decision returns: a verdict with a reason for every
//! node, and the commands to carry out.

use serde::{Deserialize, Serialize};

use crate::config::DisruptionReason;
use crate::model::{Claim, PodKey, RemovalReason, RemovalSpec, Timestamp};

/// Why a node is removed, as Karpenter's users name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    Empty,
    Expired,
    Drifted,
    Underutilized,
    Unhealthy,
    Interrupted,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Expired => "Expired",
            Reason::Drifted => "Drifted",
            Reason::Underutilized => "Underutilized",
            Reason::Unhealthy => "Unhealthy",
            Reason::Interrupted => "Interrupted",
        }
    }

    /// As Karpenter's metrics label it (`reason`).
    pub fn metric_label(self) -> &'static str {
        match self {
            Reason::Empty => "empty",
            Reason::Expired => "expired",
            Reason::Drifted => "drifted",
            Reason::Underutilized => "underutilized",
            Reason::Unhealthy => "unhealthy",
            Reason::Interrupted => "interrupted",
        }
    }

    /// The budget reason that caps it; `None` for the forceful ones
    /// (expiration, interruption), which budgets do not limit. Repair is
    /// voluntary since Karpenter 1.15 (reason `Unhealthy`).
    pub fn budget_reason(self) -> Option<DisruptionReason> {
        match self {
            Reason::Empty => Some(DisruptionReason::Empty),
            Reason::Drifted => Some(DisruptionReason::Drifted),
            Reason::Underutilized => Some(DisruptionReason::Underutilized),
            Reason::Unhealthy => Some(DisruptionReason::Unhealthy),
            Reason::Expired | Reason::Interrupted => None,
        }
    }

    /// Forceful: not limited by budgets, do-not-disrupt or PDBs at decision
    /// time (the drain still honours PDBs until its deadline).
    pub fn is_forceful(self) -> bool {
        self.budget_reason().is_none()
    }
}

impl From<Reason> for RemovalReason {
    fn from(r: Reason) -> RemovalReason {
        match r {
            Reason::Empty => RemovalReason::Empty,
            Reason::Expired => RemovalReason::Expired,
            Reason::Drifted => RemovalReason::Drifted,
            Reason::Underutilized => RemovalReason::Underutilized,
            Reason::Unhealthy => RemovalReason::Unhealthy,
            Reason::Interrupted => RemovalReason::SpotInterrupted,
        }
    }
}

/// What becomes of one node.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Removed by `commands[command]`.
    Disrupt { reason: Reason, command: usize },
    /// Left alone.
    Keep,
}

/// The verdict for one node and the reason, in words a Karpenter user recognises.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDecision {
    pub node: String,
    pub claim_id: Option<String>,
    pub pool: Option<String>,
    pub verdict: Verdict,
    pub reason: String,
    /// `reason` without what the consolidation methods said: what a pass
    /// that skipped them would give (so a change of it is a change).
    pub base_reason: String,
}

/// A node one command removes.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub node: String,
    pub claim_id: String,
    pub pool: String,
    /// The claim's instance (what the removal terminates).
    pub instance_id: Option<String>,
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    pub price: f64,
    /// The pods the drain will evict.
    pub pods: Vec<PodKey>,
    /// What the re-validation compares: the claim's pod fingerprint when decided.
    pub pods_fingerprint: String,
}

/// The nodes to launch before draining: claims ready to be written (ids
/// seeded by the snapshot), built exactly as the provisioner builds them.
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    pub claims: Vec<Claim>,
    /// What the replacement is expected to cost, USD per hour (for a
    /// consolidation: the dearest option offered, so the saving holds
    /// whichever option the fleet buys).
    pub price: f64,
}

/// One disruption: remove `targets`, after launching `replacement` if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Deterministic: reason and the targets' claim ids.
    pub id: String,
    pub reason: Reason,
    /// The method that chose it (`emptiness`, `expiration`, `drift`,
    /// `multi-node-consolidation`, `single-node-consolidation`, `repair`).
    pub method: &'static str,
    pub targets: Vec<Target>,
    pub replacement: Option<Replacement>,
    /// When the drain gives up on PDBs and deletes what is left
    /// (the pool's terminationGracePeriod; `now` for repair).
    pub deadline: Option<Timestamp>,
    /// Voluntary moves are re-checked with [`super::validate`] at this time
    /// before acting (Karpenter's 15 s); forceful ones act at once.
    pub validate_at: Option<Timestamp>,
    /// USD per hour saved (consolidation), for the log and the plan.
    pub savings: f64,
    pub summary: String,
}

impl Command {
    /// The drain-and-terminate machine's input: one removal per target (the
    /// machine keeps one command per claim). Every removal of a command with
    /// a replacement waits for it; the claims themselves are handed to the
    /// machine with the removals (`handlers::termination::start_replacing`),
    /// so several targets share one replacement.
    pub fn removals(&self) -> Vec<RemovalSpec> {
        let replace = self
            .replacement
            .as_ref()
            .is_some_and(|r| !r.claims.is_empty());
        self.targets
            .iter()
            .map(|t| RemovalSpec {
                claim_id: t.claim_id.clone(),
                pool: t.pool.clone(),
                node: Some(t.node.clone()),
                instance_id: t.instance_id.clone(),
                reason: self.reason.into(),
                replace,
                deadline: self.deadline,
                avoid: Vec::new(),
                event_at: None,
                handover: self.method == super::handover::METHOD,
            })
            .collect()
    }

    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.targets.iter().map(|t| t.node.as_str())
    }
}

/// A change to a claim's disruption bookkeeping (see [`super::observe`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimUpdate {
    pub claim_id: String,
    pub disruption: crate::model::claim::DisruptionState,
    /// A re-stamped pool hash (the claim's was of another hash version).
    pub nodepool_hash: Option<String>,
}

/// The whole decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub now: Timestamp,
    /// One per node of the snapshot, by node name.
    pub nodes: Vec<NodeDecision>,
    pub commands: Vec<Command>,
    /// Bookkeeping the handler writes back (conditional on the claim's version).
    pub claim_updates: Vec<ClaimUpdate>,
    /// Pools being handed over from Karpenter (`super::handover`): their
    /// commands are among `commands` (method `handover`).
    pub handovers: Vec<super::handover::Handover>,
    /// Per voluntary reason whose method ran this decision, how many nodes
    /// were its candidates before the budgets (Karpenter's
    /// `karpenter_voluntary_disruption_eligible_nodes`). Consolidation's
    /// reason is absent when its pass was skipped.
    pub eligible: std::collections::BTreeMap<Reason, usize>,
}

impl Plan {
    /// Every removal of every command.
    pub fn removals(&self) -> Vec<RemovalSpec> {
        self.commands.iter().flat_map(Command::removals).collect()
    }

    pub fn decision(&self, node: &str) -> Option<&NodeDecision> {
        self.nodes.iter().find(|d| d.node == node)
    }
}
