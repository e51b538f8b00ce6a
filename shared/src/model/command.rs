//! A removal command: "remove this node, with or without replacement
//! first, by this deadline, for this reason", and where it is. One per
//! claim (the command's id is the claim's), so two invocations that decide
//! to remove the same node at once cannot both start: the second create is
//! a conditional-write conflict.

use serde::{Deserialize, Serialize};

use super::{OfferingKey, Timestamp};

/// The taint a node being removed carries, so nothing new lands on it.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";

/// Why a node is being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemovalReason {
    /// EC2 Spot Instance Interruption Warning.
    SpotInterrupted,
    /// AWS Health scheduled change.
    ScheduledChange,
    /// EC2 Capacity Reservation Instance Interruption Warning.
    CapacityReservationInterrupted,
    /// Its capacity block ends within 40 minutes (EC2 then takes it back).
    CapacityBlockExpiring,
    /// The instance is stopping or shutting down.
    InstanceStopping,
    /// EC2 rebalance recommendation under the `Replace` policy.
    Rebalance,
    Expired,
    Drifted,
    Empty,
    Underutilized,
    /// Node repair: an unhealthy condition for too long.
    Unhealthy,
    /// Above its static NodePool's replicas (the replicas were lowered).
    ScaledDown,
    /// EC2's instance status check has failed (forceful: the pods are
    /// deleted at once, whatever their PodDisruptionBudgets).
    InstanceStatus,
    /// EC2's system status check has failed (forceful, as `InstanceStatus`).
    SystemStatus,
    /// EC2 lists a scheduled event (maintenance, retirement, reboot, stop)
    /// for the instance: drained gracefully.
    EventStatus,
}

impl RemovalReason {
    /// The word Karpenter users see in logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::SpotInterrupted => "SpotInterrupted",
            RemovalReason::ScheduledChange => "ScheduledChange",
            RemovalReason::CapacityReservationInterrupted => "CapacityReservationInterrupted",
            RemovalReason::CapacityBlockExpiring => "CapacityBlockExpiring",
            RemovalReason::InstanceStopping => "InstanceStopping",
            RemovalReason::Rebalance => "RebalanceRecommendation",
            RemovalReason::Expired => "Expired",
            RemovalReason::Drifted => "Drifted",
            RemovalReason::Empty => "Empty",
            RemovalReason::Underutilized => "Underutilized",
            RemovalReason::Unhealthy => "Unhealthy",
            RemovalReason::ScaledDown => "ScaledDown",
            RemovalReason::InstanceStatus => "InstanceStatus",
            RemovalReason::SystemStatus => "SystemStatus",
            RemovalReason::EventStatus => "EventStatus",
        }
    }

    /// Forceful reasons are not limited by disruption budgets (repair is
    /// voluntary since Karpenter 1.15).
    pub fn is_forceful(self) -> bool {
        !matches!(
            self,
            RemovalReason::Drifted
                | RemovalReason::Empty
                | RemovalReason::Underutilized
                | RemovalReason::Unhealthy
        )
    }

    /// A voluntary removal (drift, emptiness, consolidation) is undone when
    /// its replacement cannot be had — the node is untainted and the command
    /// deleted — instead of draining the pods onto nothing. Forceful ones
    /// drain anyway: the node goes whatever happens.
    pub fn rolls_back(self) -> bool {
        !self.is_forceful()
    }
}

impl std::fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to remove, and how: the input every removal path shares
/// (interruption, expiration, drift, consolidation, repair).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemovalSpec {
    /// The claim of the node; the command's id.
    pub claim_id: String,
    pub pool: String,
    /// The Node, when the claim registered one.
    pub node: Option<String>,
    pub instance_id: Option<String>,
    pub reason: RemovalReason,
    /// Launch capacity for the node's reschedulable pods before draining.
    pub replace: bool,
    /// After this, pods still on the node are deleted whatever their PDBs
    /// say; `None`: PDBs are always respected.
    pub deadline: Option<Timestamp>,
    /// Offerings the replacement must not use (the one being interrupted).
    #[serde(default)]
    pub avoid: Vec<OfferingKey>,
    /// When the triggering event happened (for reaction-time metrics).
    #[serde(default)]
    pub event_at: Option<Timestamp>,
    /// A node Karpenter launched, for a pool handed over to nodewright
    /// (`disruption::handover`): its replacements are launched and
    /// initialized first, then the Node is deleted and Karpenter (through
    /// its termination finalizer) drains it and terminates its instance.
    /// nodewright neither taints, drains nor terminates it; the command
    /// ends when the Node is gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handover: bool,
}

/// Where a command is. Steps only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Taint `karpenter.sh/disrupted:NoSchedule`.
    Taint,
    /// Create and launch replacement claims (when the spec asks for them).
    Replace,
    /// Wait for the replacements to register, or give up after a bound.
    AwaitReplacement,
    /// Evict in tiers; after the deadline, delete what is left.
    Drain,
    /// Terminate the instance.
    Terminate,
    /// Delete the Node.
    DeleteNode,
    /// Release the claim (and its limit reservation), then the command.
    Release,
}

/// When each milestone was reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Milestones {
    pub tainted_at: Option<Timestamp>,
    /// Every pod that had to go had an eviction (or deletion) issued.
    pub evictions_issued_at: Option<Timestamp>,
    pub drained_at: Option<Timestamp>,
    /// Drained, the removal began waiting for VolumeAttachments to go (its
    /// `AwaitingVolumeDetachment` Event was published).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_volumes_at: Option<Timestamp>,
    pub terminated_at: Option<Timestamp>,
}

/// A removal in progress, as stored (`command#<id>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// The claim id.
    pub id: String,
    /// Bumped by every write; writes are conditional on it.
    pub version: u64,
    pub spec: RemovalSpec,
    pub step: Step,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Replacement claims planned for the node's pods (ids; written here
    /// before they are created, so two invocations never plan twice).
    #[serde(default)]
    pub replacements: Vec<String>,
    /// The planned replacement claims, kept until they are launched.
    #[serde(default)]
    pub planned: Vec<crate::model::claim::Claim>,
    /// Replacements whose launch was attempted (launched or given up on).
    #[serde(default)]
    pub launched: Vec<String>,
    /// Planning rounds so far (a round whose launches all found no
    /// capacity plans again on other offerings).
    #[serde(default)]
    pub replacement_rounds: u32,
    /// Pods already reported as blocked by a PodDisruptionBudget (uids), so
    /// each gets one `FailedDraining` event, not one per pass.
    #[serde(default)]
    pub reported_blocked: Vec<String>,
    /// When replacement launches began (the wait is bounded from here).
    #[serde(default)]
    pub replacing_since: Option<Timestamp>,
    #[serde(default)]
    pub milestones: Milestones,
    /// Evictions a PodDisruptionBudget refused, over the command's life.
    #[serde(default)]
    pub evictions_blocked: u64,
    /// The replacement was decided with the removal (a consolidation's one
    /// cheaper node, possibly shared by several removals): `planned` holds
    /// it from the start and the machine launches it as given instead of
    /// planning one.
    #[serde(default)]
    pub given_replacement: bool,
}

impl Command {
    /// A new command at its first step.
    pub fn new(spec: RemovalSpec, now: Timestamp) -> Command {
        Command {
            id: spec.claim_id.clone(),
            version: 1,
            spec,
            step: Step::Taint,
            created_at: now,
            updated_at: now,
            replacements: Vec::new(),
            planned: Vec::new(),
            launched: Vec::new(),
            replacement_rounds: 0,
            reported_blocked: Vec::new(),
            replacing_since: None,
            milestones: Milestones::default(),
            evictions_blocked: 0,
            given_replacement: false,
        }
    }

    /// A new command whose replacement claims are already decided.
    pub fn with_replacement(
        spec: RemovalSpec,
        claims: Vec<crate::model::claim::Claim>,
        now: Timestamp,
    ) -> Command {
        let mut c = Command::new(spec, now);
        c.given_replacement = !claims.is_empty();
        c.replacements = claims.iter().map(|r| r.id.clone()).collect();
        c.planned = claims;
        c
    }

    /// The same command one version later, at `now` (for a conditional write).
    pub fn next(&self, now: Timestamp) -> Command {
        let mut next = self.clone();
        next.version += 1;
        next.updated_at = now;
        next
    }
}
