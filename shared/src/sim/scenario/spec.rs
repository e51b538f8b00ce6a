//! The scenario file's schema: the objects, actions and expectations a
//! file may hold, as serde reads them.

use super::*;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_region")]
    pub region: String,
    /// Karpenter configuration and workload objects, in any order.
    pub objects: Vec<serde_json::Value>,
    #[serde(default)]
    pub actions: Vec<Action>,
    /// How long to simulate, e.g. `5m`.
    pub run: String,
    /// The simulator's pace, for long scenarios (days): coarser steps and
    /// ticks, so a quiet month runs in seconds. Defaults: the functions'.
    #[serde(default)]
    pub simulator: Pace,
    /// The in-memory EC2's spot capacity pools: how many instances each
    /// spot (instance type, zone) holds at once. Default: deep pools, their
    /// depths seeded per pool (see `sim::pools`).
    #[serde(default)]
    pub spot_pools: SpotPoolsSpec,
    /// Capacity reservations (and capacity blocks) the in-memory EC2 holds,
    /// for NodeClasses' `capacityReservationSelectorTerms` to select.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<ReservationSpec>,
    #[serde(default)]
    pub expect: Expect,
}

/// One capacity reservation of a scenario.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationSpec {
    /// `cr-` and 17 hex digits.
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// How many instances it holds.
    pub count: u32,
    /// `default` (an on-demand capacity reservation) or `capacity-block`.
    #[serde(default)]
    pub reservation_type: crate::cloud::ReservationType,
    #[serde(rename = "ownerID", default = "default_owner")]
    pub owner_id: String,
    /// `open` or `targeted` (default).
    #[serde(default = "targeted")]
    pub instance_match_criteria: String,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// An interruptible reservation (its owner may take the instances back).
    #[serde(default)]
    pub interruptible: bool,
    /// When it ends, from the start of the run (a capacity block needs one).
    #[serde(default)]
    pub ends_after: Option<String>,
}

fn default_owner() -> String {
    "000000000000".to_owned()
}

fn targeted() -> String {
    "targeted".to_owned()
}

/// Spot pool depths (each optional): `spotPools: {depth: 3}` makes every
/// pool hold 3 instances; `offerings` sets single pools over that.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpotPoolsSpec {
    /// Every spot pool's depth (default: drawn per pool from `seed`).
    pub depth: Option<u64>,
    /// The seed the default depths are drawn from (default: the simulator's).
    pub seed: Option<u64>,
    /// Single pools' depths, over `depth`.
    #[serde(default)]
    pub offerings: Vec<PoolDepthSpec>,
}

/// One spot pool's depth.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolDepthSpec {
    pub instance_type: String,
    pub zone: String,
    pub depth: u64,
}

impl SpotPoolsSpec {
    /// The depths to give the in-memory EC2; `None` when the scenario sets
    /// nothing (the cloud keeps the depths it has).
    pub fn depths(&self) -> Option<PoolDepths> {
        if self.depth.is_none() && self.seed.is_none() && self.offerings.is_empty() {
            return None;
        }
        let offerings = self
            .offerings
            .iter()
            .map(|o| (spot_key(&o.instance_type, &o.zone), o.depth))
            .collect();
        Some(PoolDepths {
            seed: self.seed.unwrap_or(pools::DEFAULT_SEED),
            all: self.depth,
            offerings,
        })
    }

    /// Every invalid value, as `spotPools.<field>: <reason>`: depths out of
    /// range, pools the region does not sell as spot, pools given twice.
    pub fn errors(&self, region: &str) -> Vec<String> {
        let mut errors: Vec<String> = self
            .depth
            .and_then(depth_error)
            .map(|e| format!("spotPools.depth: {e}"))
            .into_iter()
            .collect();
        let sold = crate::sim::catalog::catalog(region).ok();
        let mut seen: BTreeMap<OfferingKey, usize> = BTreeMap::new();
        for (i, o) in self.offerings.iter().enumerate() {
            let field = format!("spotPools.offerings[{i}]");
            if let Some(e) = depth_error(o.depth) {
                errors.push(format!("{field}.depth: {e}"));
            }
            let key = spot_key(&o.instance_type, &o.zone);
            let offered = |c: &crate::model::CloudCatalog| {
                c.offerings.iter().any(|p| {
                    p.capacity_type == key.capacity_type
                        && p.instance_type == key.instance_type
                        && p.zone == key.zone
                })
            };
            if sold.as_ref().is_some_and(|c| !offered(c)) {
                errors.push(format!(
                    "{field}: {} is not offered as spot in {} (region {region})",
                    o.instance_type, o.zone
                ));
            }
            if let Some(first) = seen.insert(key, i) {
                errors.push(format!(
                    "{field}: {} in {} is already given at spotPools.offerings[{first}]",
                    o.instance_type, o.zone
                ));
            }
        }
        errors
    }
}

/// Why a pool depth is refused, if it is.
fn depth_error(depth: u64) -> Option<String> {
    match depth {
        0 => Some(
            "0 is not a depth: at least 1 (a pool without capacity is a removeCapacity action)"
                .to_owned(),
        ),
        d if d > pools::MAX_DEPTH => Some(format!(
            "{d} is deeper than the most allowed, {}",
            pools::MAX_DEPTH
        )),
        _ => None,
    }
}

fn spot_key(instance_type: &str, zone: &str) -> OfferingKey {
    OfferingKey {
        capacity_type: CAPACITY_TYPE_SPOT.to_owned(),
        instance_type: instance_type.to_owned(),
        zone: zone.to_owned(),
    }
}

/// How often the simulated functions tick (each is optional).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pace {
    /// The loop's step when nothing is due sooner (default 1s).
    pub step: Option<String>,
    /// The provisioner's poll between ticks (default 1s).
    pub provisioner_poll: Option<String>,
    /// Time between two disruption decisions (default 10s).
    pub disruption_every: Option<String>,
    /// The disruption function's poll between ticks (default 2s).
    pub disruption_poll: Option<String>,
    /// Run the disruption function at all (default true).
    pub disruption: Option<bool>,
    /// How long the simulated CSI attacher takes to detach a volume once
    /// no pod on its node uses it (default 10s); a drained node waits for
    /// it before its instance goes.
    pub detach: Option<String>,
}

fn default_region() -> String {
    "us-east-1".to_owned()
}

/// One timed action: `at` and exactly one verb (`{at: 90s, scale: {...}}`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    /// Simulated time from the start, e.g. `90s`.
    pub at: String,
    #[serde(flatten)]
    pub what: ActionKind,
}

/// The verbs an action may have, as written.
pub const ACTION_VERBS: [&str; 16] = [
    "scale",
    "apply",
    "removeCapacity",
    "restoreCapacity",
    "neverRegister",
    "interrupt",
    "rebalance",
    "scheduledChange",
    "impairInstance",
    "recoverInstance",
    "enqueue",
    "kubernetesVersion",
    "nodeNotReady",
    "plan",
    "expect",
    "deletePods",
];

/// Read by hand (serde's `flatten` cannot refuse unknown keys): `at`, then
/// exactly one verb; no verb, two verbs or an unknown key is an error that
/// says which.
impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map: BTreeMap<String, serde_json::Value> = BTreeMap::deserialize(d)?;
        let at = match map.remove("at") {
            Some(serde_json::Value::String(s)) => s,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "action: `at` must be a duration like 90s, not {other}"
                )));
            }
            None => {
                return Err(D::Error::custom(
                    "action without `at` (when it happens, e.g. `at: 90s`)",
                ));
            }
        };
        let unknown: Vec<&String> = map
            .keys()
            .filter(|k| !ACTION_VERBS.contains(&k.as_str()))
            .collect();
        if !unknown.is_empty() {
            return Err(D::Error::custom(format!(
                "action at {at}: unknown key(s) {unknown:?} (an action is `at` and one of: {})",
                ACTION_VERBS.join(", ")
            )));
        }
        if map.len() > 1 {
            return Err(D::Error::custom(format!(
                "action at {at} has {} verbs ({}): one action per entry",
                map.len(),
                map.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let Some((verb, body)) = map.into_iter().next() else {
            return Err(D::Error::custom(format!(
                "action at {at} has no verb (one of: {})",
                ACTION_VERBS.join(", ")
            )));
        };
        let what: ActionKind = serde_json::from_value(serde_json::json!({ verb.clone(): body }))
            .map_err(|e| D::Error::custom(format!("action at {at}: {verb}: {e}")))?;
        Ok(Action { at, what })
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ActionKind {
    /// Set a Deployment's replicas.
    Scale {
        deployment: String,
        replicas: i32,
        #[serde(default = "default_namespace")]
        namespace: String,
    },
    /// Add or replace objects (configuration or workloads).
    Apply(Vec<serde_json::Value>),
    /// Launches of these offerings fail for lack of capacity from now on.
    RemoveCapacity(Vec<OfferingSpec>),
    /// Launches of these offerings find capacity again (the shortage is over).
    RestoreCapacity(Vec<OfferingSpec>),
    /// Nodes of these instance types never register.
    NeverRegister(Vec<String>),
    /// EC2 sends a spot interruption warning for the matching instances
    /// (and takes them back two minutes later).
    Interrupt(InstanceSelector),
    /// EC2 recommends rebalancing away from the matching instances.
    Rebalance(InstanceSelector),
    /// AWS Health schedules maintenance of the matching instances (`in` from now, default 10m).
    ScheduledChange(InstanceSelector),
    /// EC2's status checks of the matching instances fail (or EC2
    /// schedules an event for them), as DescribeInstanceStatus reports.
    ImpairInstance(ImpairSpec),
    /// The matching instances' checks pass again and their events are over.
    RecoverInstance(InstanceSelector),
    /// A raw message on the interruption queue (a foreign or malformed event).
    Enqueue(serde_json::Value),
    /// The cluster moves to this Kubernetes version: NodeClasses resolve to
    /// its AMI from now on (nodes on the old one drift).
    KubernetesVersion(String),
    /// The kubelets of the matching nodes stop reporting Ready (node repair).
    NodeNotReady(InstanceSelector),
    /// Record the dry-run plan (provisioning and disruption, nothing acted
    /// on) at this time; `nodewright simulate` prints it.
    Plan {},
    /// Check expectations now (e.g. "not before": the node is still there);
    /// failures are reported with the final ones, prefixed by the time.
    Expect(Box<Expect>),
    /// Delete the matching pods through the API, as `kubectl delete pod`
    /// does: gracefully (their own grace period, or `gracePeriodSeconds`).
    DeletePods(PodSelector),
}

/// Which pods a `deletePods` action deletes: those of the namespace that
/// carry every label (and have the name, when given).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSelector {
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub name: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

/// Which instances an interruption action hits: those whose nodes carry
/// every label, and/or of a type and zone.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceSelector {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    /// The node of this name only.
    pub node: Option<String>,
    /// For `scheduledChange`: when the maintenance starts, from now.
    #[serde(default, rename = "in")]
    pub after: Option<String>,
}

/// Which instances an `impairInstance` action hits (as [`InstanceSelector`])
/// and what EC2 reports of them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImpairSpec {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub node: Option<String>,
    /// `systemStatus` or `instanceStatus` (a failed reachability check), or
    /// a scheduled event's code (`instance-retirement`, `system-maintenance`,
    /// `system-reboot`, `instance-reboot`, `instance-stop`).
    pub check: String,
    /// How long ago the check began failing (default: now).
    pub since: Option<String>,
}

impl ImpairSpec {
    pub(super) fn selector(&self) -> InstanceSelector {
        InstanceSelector {
            labels: self.labels.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            node: self.node.clone(),
            after: None,
        }
    }

    /// The check EC2 reports, failing since `now - since`.
    pub(super) fn status_check(&self, now: Timestamp) -> Result<crate::model::StatusCheck, String> {
        use crate::model::{StatusCategory, StatusCheck};
        const EVENTS: [&str; 5] = [
            "instance-retirement",
            "system-maintenance",
            "system-reboot",
            "instance-reboot",
            "instance-stop",
        ];
        let since = match &self.since {
            Some(d) => now - parse_duration(d).map_err(|e| e.to_string())?,
            None => now,
        };
        let (category, name, impaired_since) = match self.check.as_str() {
            "systemStatus" => (StatusCategory::SystemStatus, "reachability", Some(since)),
            "instanceStatus" => (StatusCategory::InstanceStatus, "reachability", Some(since)),
            code if EVENTS.contains(&code) => (StatusCategory::EventStatus, code, None),
            other => {
                return Err(format!(
                    "impairInstance: check {other:?} is not systemStatus, instanceStatus or an event code ({})",
                    EVENTS.join(", ")
                ));
            }
        };
        Ok(StatusCheck {
            category,
            name: name.to_owned(),
            failed: true,
            impaired_since,
        })
    }
}

fn default_namespace() -> String {
    "default".to_owned()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OfferingSpec {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Nodes at the end.
    pub nodes: Option<usize>,
    pub pods: Option<PodCounts>,
    #[serde(default)]
    pub nodes_with: Vec<NodesWith>,
    /// Instances launched over the whole run.
    pub launches: Option<usize>,
    /// Kubernetes Events by reason → how many were published.
    #[serde(default)]
    pub events: BTreeMap<String, usize>,
    /// Pool → resource → the most its reservations may ever reach (`cpu: 1000`).
    #[serde(default)]
    pub peak_usage_at_most: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    /// No PodDisruptionBudget went below its minimum once it had been met.
    pub pdbs_held: Option<bool>,
    /// Replacement claims that removals planned over the run.
    pub replacements: Option<usize>,
    /// Distinct nodes that got a removal command over the run.
    pub removed_nodes: Option<usize>,
    /// No pod waited longer than this many seconds for a node: over the
    /// whole run (`maxPendingSeconds: 90`), or among pods whose wait began
    /// in a window (`maxPendingSeconds: {seconds: 90, from: 5m, until: 8m}`,
    /// times from the start; `until` defaults to the end of the run).
    pub max_pending_seconds: Option<PendingBound>,
    /// Removal reason (`Drifted`, `Expired`, `Empty`, `Underutilized`,
    /// `Unhealthy`, `SpotInterrupted`, …) → how many nodes got a removal for it.
    #[serde(default)]
    pub removed_for: BTreeMap<String, usize>,
    /// Nodes whose removal was undone because its replacement failed (the node stays, untainted).
    pub rolled_back: Option<usize>,
    /// Nodes that carry the `karpenter.sh/disrupted` taint at the end.
    pub tainted_nodes: Option<usize>,
    /// Pools none of whose nodes got a removal command over the run.
    #[serde(default)]
    pub untouched_pools: Vec<String>,
    /// Pool → the most removal commands it ever had at once (budgets).
    #[serde(default)]
    pub max_concurrent_removals: BTreeMap<String, usize>,
    /// The fleet's $/hour (every instance not terminated, at its launch
    /// price) at most this multiple of the LP lower bound of the pods now
    /// running or pending on the NodePools (`workload::fleet_bound`).
    pub cost_over_bound_at_most: Option<f64>,
    /// Where sets of pods landed: bound or not, their nodes' labels, how
    /// many nodes hold them (`sim::placement`).
    #[serde(default)]
    pub placements: Vec<placement::Placement>,
    /// Bound pods per domain of a node label, in any order.
    #[serde(default)]
    pub spread: Vec<placement::SpreadExpect>,
    /// What every launch offered EC2 (in-memory cloud only).
    pub launch_options: Option<placement::LaunchOptionsExpect>,
    /// Metrics the run published (Karpenter's names, `handlers::metrics`):
    /// per entry, the figures of that name whose labels include `labels`.
    #[serde(default)]
    pub metrics: Vec<MetricExpect>,
}

/// `metrics`: figures of one metric with some labels, summed (`total`:
/// a counter's increase) and/or counted (`observations`: a histogram's
/// samples, a gauge's readings).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricExpect {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub total: Option<f64>,
    pub observations: Option<usize>,
    /// The last figure published (a gauge's value now).
    pub last: Option<f64>,
}

/// `maxPendingSeconds`: a bound for the whole run, or for the pods whose
/// wait began in a window.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PendingBound {
    Run(u64),
    Window(PendingWindow),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingWindow {
    pub seconds: u64,
    /// From this time on (from the start of the run, e.g. `5m`).
    pub from: String,
    /// Before this time (default: the end of the run).
    pub until: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodCounts {
    pub bound: Option<usize>,
    pub pending: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodesWith {
    pub labels: BTreeMap<String, String>,
    /// Label keys the nodes must not have.
    #[serde(default)]
    pub without_labels: Vec<String>,
    pub count: usize,
    /// Non-DaemonSet pods on each such node.
    pub pods: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario: {0}")]
    Parse(String),
    #[error("scenario: {0}")]
    Config(#[from] ConfigError),
    #[error("scenario action at {at}: {reason}")]
    Action { at: String, reason: String },
    /// Objects that fail validation, every one (as `kubectl apply` or
    /// `nodewright config apply` would refuse them).
    #[error("scenario: {} invalid object(s):\n  {}", .0.len(), .0.join("\n  "))]
    Invalid(Vec<String>),
}
