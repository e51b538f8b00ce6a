//! Scenario files: Karpenter-style objects (NodePools, NodeClasses, or the
//! older Provisioner forms), workloads (Deployments, DaemonSets, PDBs,
//! Pods), timed actions and expectations — so every scenario is also a test.
//!
//! ```yaml
//! name: walkthrough-1
//! region: ap-south-1
//! objects: [ {apiVersion: karpenter.sh/v1alpha5, kind: Provisioner, ...}, {kind: Deployment, ...} ]
//! actions:
//!   - at: 0s
//!     scale: {deployment: inflate, replicas: 3}
//! run: 3m
//! expect:
//!   nodes: 1
//!   pods: {bound: 3, pending: 0}
//!   nodesWith: [{labels: {node.kubernetes.io/instance-type: r6gd.xlarge}, count: 1, pods: 3}]
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cloud::SimCloud;
use super::controllers::node_of;
use super::driver::ClusterDriver;
use super::placement;
use super::pools::{self, PoolDepths};
use super::simulation::Simulation;
use crate::config::{self, ConfigDocument, ConfigError, ConfigItem};
use crate::model::{OfferingKey, SignedDuration, Timestamp};
use crate::ports::{Cloud, Store};
use crate::resources;
use crate::scheduling::labels::CAPACITY_TYPE_SPOT;

/// The built-in scenario: the first source walkthrough.
pub const WALKTHROUGH_1: &str = include_str!("scenarios/walkthrough-1.yaml");

/// Every scenario shipped with the simulator: (name, text).
pub const BUILT_IN: [(&str, &str); 2] = [
    ("walkthrough-1", WALKTHROUGH_1),
    (
        "walkthrough-3",
        include_str!("scenarios/walkthrough-3.yaml"),
    ),
];

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
        let sold = super::catalog::catalog(region).ok();
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
    fn selector(&self) -> InstanceSelector {
        InstanceSelector {
            labels: self.labels.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            node: self.node.clone(),
            after: None,
        }
    }

    /// The check EC2 reports, failing since `now - since`.
    fn status_check(&self, now: Timestamp) -> Result<crate::model::StatusCheck, String> {
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

pub fn parse(yaml: &str) -> Result<Scenario, ScenarioError> {
    serde_norway::from_str(yaml).map_err(|e| ScenarioError::Parse(e.to_string()))
}

/// Go-style durations: `90s`, `5m`, `1h30m`, `1.5s`.
pub fn parse_duration(s: &str) -> Result<SignedDuration, ScenarioError> {
    let bad = || ScenarioError::Parse(format!("{s:?} is not a duration like 30s, 5m or 1h30m"));
    let mut total = 0.0f64;
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                'h' => 3600.0,
                'm' => 60.0,
                's' => 1.0,
                _ => return Err(bad()),
            }
        };
        total += num.parse::<f64>().map_err(|_| bad())? * unit;
        num.clear();
        any = true;
    }
    if !num.is_empty() || !any {
        return Err(bad());
    }
    // A scenario runs simulated time; a century is already more than any
    // scenario means (and far more digits would not fit a duration at all).
    const CENTURY_SECS: f64 = 100.0 * 365.25 * 86_400.0;
    if !(0.0..=CENTURY_SECS).contains(&total) {
        return Err(ScenarioError::Parse(format!(
            "{s:?} is longer than a century"
        )));
    }
    SignedDuration::try_from_secs_f64(total).map_err(|_| bad())
}

/// Configuration objects → the Store's items; workload objects → left over.
/// Every configuration object is validated, alone and as a set (names,
/// references), and every pod template's requests and limits parse; all
/// errors are returned at once.
pub fn split_objects(
    objects: &[serde_json::Value],
    now: Timestamp,
) -> Result<(Vec<ConfigItem>, Vec<serde_json::Value>), ScenarioError> {
    let (docs, workloads, errors) = read_objects(objects, "objects");
    let mut errors = errors;
    if let Err(e) = config::ConfigSet::from_documents(&docs) {
        errors.extend(e.iter().map(ToString::to_string));
    }
    if !errors.is_empty() {
        return Err(ScenarioError::Invalid(errors));
    }
    Ok((docs.iter().map(|d| d.to_item(1, now)).collect(), workloads))
}

/// Reads objects: configuration documents, workloads, and an error (as
/// text) for each object that does not read.
fn read_objects(
    objects: &[serde_json::Value],
    at: &str,
) -> (Vec<ConfigDocument>, Vec<serde_json::Value>, Vec<String>) {
    let mut docs = Vec::new();
    let mut workloads = Vec::new();
    let mut errors = Vec::new();
    // The v1 PodTemplates CapacityBuffers name, by (namespace, name): a
    // buffer takes its template from those beside it, as `config apply` does.
    let is_template = |o: &serde_json::Value| {
        o.get("apiVersion").and_then(|v| v.as_str()) == Some("v1")
            && o.get("kind").and_then(|v| v.as_str()) == Some("PodTemplate")
    };
    let templates: BTreeMap<(String, String), serde_json::Value> = objects
        .iter()
        .filter(|o| is_template(o))
        .filter_map(|o| {
            let ns = o
                .pointer("/metadata/namespace")
                .and_then(|v| v.as_str())
                .unwrap_or("default");
            let name = o.pointer("/metadata/name").and_then(|v| v.as_str())?;
            Some(((ns.to_owned(), name.to_owned()), o.get("template")?.clone()))
        })
        .collect();
    for (i, o) in objects.iter().enumerate() {
        let api = o
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        if is_template(o) {
            continue;
        }
        if api.starts_with("autoscaling.x-k8s.io") {
            match config::document::from_value(o, i) {
                Ok(d) => docs.extend(d.into_iter().map(|mut d| {
                    if let ConfigDocument::CapacityBuffer { spec, .. } = &mut d
                        && spec.pod_template.is_none()
                        && let Some(r) = &spec.pod_template_ref
                    {
                        let ns = spec.namespace.clone().unwrap_or_else(|| "default".into());
                        spec.pod_template = templates.get(&(ns, r.name.clone())).cloned();
                    }
                    d
                })),
                Err(e) => errors.push(format!(
                    "{}",
                    ConfigError {
                        item: e.item.replacen("document", at, 1),
                        ..e
                    }
                )),
            }
        } else if api.starts_with("karpenter.") || api.starts_with("nodewright.io") {
            match config::document::from_value(o, i) {
                Ok(d) => docs.extend(d),
                Err(e) => errors.push(format!(
                    "{}",
                    ConfigError {
                        item: e.item.replacen("document", at, 1),
                        ..e
                    }
                )),
            }
        } else {
            errors.extend(
                workload_errors(o)
                    .into_iter()
                    .map(|e| format!("{at}[{i}]: {e}")),
            );
            workloads.push(o.clone());
        }
    }
    (docs, workloads, errors)
}

/// Malformed requests and limits in a workload's pod spec (`cpu: 1x`), each
/// as `<kind>/<name>: <field>: <reason>`.
pub fn workload_errors(o: &serde_json::Value) -> Vec<String> {
    let kind = o.get("kind").and_then(|v| v.as_str()).unwrap_or("object");
    let name = o
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let (spec, path) = match kind {
        "Pod" => (o.pointer("/spec"), "spec"),
        _ => (o.pointer("/spec/template/spec"), "spec.template.spec"),
    };
    let mut errors = Vec::new();
    let Some(spec) = spec else { return errors };
    for list in ["initContainers", "containers"] {
        for (ci, c) in spec
            .get(list)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .enumerate()
        {
            for part in ["requests", "limits"] {
                let Some(map) = c
                    .pointer(&format!("/resources/{part}"))
                    .and_then(|v| v.as_object())
                else {
                    continue;
                };
                for (res, q) in map {
                    let text = match q {
                        serde_json::Value::String(t) => t.clone(),
                        other => other.to_string(),
                    };
                    if let Err(e) = resources::Resources::default().set(res, &text) {
                        errors.push(format!(
                            "{}/{name}: {path}.{list}[{ci}].resources.{part}.{res}: {e}",
                            kind.to_lowercase()
                        ));
                    }
                }
            }
        }
    }
    errors
}

/// Checks a whole scenario before it runs: its objects, and each `apply`
/// action's objects on top of what came before; every error at once.
pub fn validate(scenario: &Scenario) -> Result<(), ScenarioError> {
    let (mut docs, _, mut errors) = read_objects(&scenario.objects, "objects");
    let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut check = |docs: &[ConfigDocument], errors: &mut Vec<String>| {
        if let Err(e) = config::ConfigSet::from_documents(docs) {
            for e in e {
                let text = e.to_string();
                if seen.insert(text.clone()) {
                    errors.push(text);
                }
            }
        }
    };
    check(&docs, &mut errors);
    let run = parse_duration(&scenario.run).ok();
    for (ai, action) in scenario.actions.iter().enumerate() {
        match parse_duration(&action.at) {
            Err(e) => errors.push(format!("actions[{ai}].at: {e}")),
            Ok(at) if run.is_some_and(|r| at > r) => errors.push(format!(
                "actions[{ai}].at: {} is after the end of the run ({}): it would never happen",
                action.at, scenario.run
            )),
            Ok(_) => {}
        }
        if let ActionKind::Apply(objects) = &action.what {
            let (new, _, e) = read_objects(objects, &format!("actions[{ai}].apply"));
            errors.extend(e);
            // Later documents replace earlier ones of the same kind and name.
            docs.retain(|d| {
                !new.iter()
                    .any(|n| n.kind() == d.kind() && n.name() == d.name())
            });
            docs.extend(new);
            check(&docs, &mut errors);
        }
    }
    if let Err(e) = parse_duration(&scenario.run) {
        errors.push(format!("run: {e}"));
    }
    let windows = std::iter::once(("expect".to_owned(), &scenario.expect)).chain(
        scenario
            .actions
            .iter()
            .enumerate()
            .filter_map(|(ai, a)| match &a.what {
                ActionKind::Expect(e) => Some((format!("actions[{ai}].expect"), &**e)),
                _ => None,
            }),
    );
    for (field, expect) in windows {
        if let Some(PendingBound::Window(w)) = &expect.max_pending_seconds {
            for (name, value) in [("from", Some(&w.from)), ("until", w.until.as_ref())] {
                if let Some(Err(e)) = value.map(|v| parse_duration(v)) {
                    errors.push(format!("{field}.maxPendingSeconds.{name}: {e}"));
                }
            }
        }
    }
    errors.extend(scenario.spot_pools.errors(&scenario.region));
    for (i, r) in scenario.capacity_reservations.iter().enumerate() {
        if let Some(Err(e)) = r.ends_after.as_ref().map(|v| parse_duration(v)) {
            errors.push(format!("capacityReservations[{i}].endsAfter: {e}"));
        }
        if r.reservation_type == crate::cloud::ReservationType::CapacityBlock
            && r.ends_after.is_none()
        {
            errors.push(format!(
                "capacityReservations[{i}]: a capacity block needs endsAfter"
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ScenarioError::Invalid(errors))
    }
}

/// Writes configuration items, replacing what is stored under the same name.
pub async fn put_config<S: Store>(store: &S, items: Vec<ConfigItem>) -> Result<(), ScenarioError> {
    let stored = store
        .config_items()
        .await
        .map_err(|e| ScenarioError::Parse(e.to_string()))?;
    for mut item in items {
        item.version = stored
            .iter()
            .find(|s| s.kind == item.kind && s.name == item.name)
            .map_or(1, |s| s.version + 1);
        store
            .put_config_item(&item)
            .await
            .map_err(|e| ScenarioError::Parse(e.to_string()))?;
    }
    Ok(())
}

/// Loads a scenario into a simulation: configuration into the store, workloads into the cluster.
pub async fn load<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    scenario: &Scenario,
) -> Result<(), ScenarioError> {
    validate(scenario)?;
    if let Some(depths) = scenario.spot_pools.depths() {
        let sim_cloud = sim.sim_cloud.as_ref().ok_or_else(|| {
            ScenarioError::Parse("spotPools needs the in-memory cloud".to_owned())
        })?;
        sim_cloud.set_spot_pools(depths);
    }
    if !scenario.capacity_reservations.is_empty() {
        let sim_cloud = sim.sim_cloud.as_ref().ok_or_else(|| {
            ScenarioError::Parse("capacityReservations needs the in-memory cloud".to_owned())
        })?;
        let start = sim.now();
        for r in &scenario.capacity_reservations {
            let end_time = match &r.ends_after {
                Some(d) => Some(start + parse_duration(d)?),
                None => None,
            };
            sim_cloud.add_reservation(crate::cloud::CapacityReservation {
                id: r.id.clone(),
                instance_type: r.instance_type.clone(),
                zone: r.zone.clone(),
                owner_id: r.owner_id.clone(),
                reservation_type: r.reservation_type,
                instance_match_criteria: r.instance_match_criteria.clone(),
                interruptible: r.interruptible,
                total: r.count,
                available: r.count,
                end_time,
                tags: r.tags.clone(),
            });
        }
    }
    let pace = &scenario.simulator;
    let set = |text: &Option<String>, field: &mut SignedDuration| -> Result<(), ScenarioError> {
        if let Some(t) = text {
            *field = parse_duration(t)?;
        }
        Ok(())
    };
    set(&pace.step, &mut sim.settings.step)?;
    set(&pace.provisioner_poll, &mut sim.settings.provisioner.poll)?;
    set(
        &pace.disruption_every,
        &mut sim.settings.disruption.decide_every,
    )?;
    set(&pace.disruption_poll, &mut sim.settings.disruption.poll)?;
    if let Some(on) = pace.disruption {
        sim.settings.disruption_enabled = on;
    }
    if let Some(d) = &pace.detach {
        sim.cluster
            .set_detach_time(parse_duration(d)?)
            .await
            .map_err(ScenarioError::Parse)?;
    }
    let (items, workloads) = split_objects(&scenario.objects, sim.now())?;
    put_config(&sim.store, items).await?;
    for w in workloads {
        sim.cluster.apply(&w).await.map_err(ScenarioError::Parse)?;
    }
    sim.track_pending |= scenario.expect.max_pending_seconds.is_some()
        || scenario
            .actions
            .iter()
            .any(|a| matches!(&a.what, ActionKind::Expect(e) if e.max_pending_seconds.is_some()));
    Ok(())
}

/// The instance ids an interruption action names, from the nodes' labels
/// and provider ids, or from the in-memory cloud's instances.
async fn select_instances<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    selector: &InstanceSelector,
) -> Vec<String> {
    let nodes = sim.cluster.all_nodes().await;
    let mut ids = Vec::new();
    for n in nodes {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let matches = selector
            .labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && selector
                .instance_type
                .as_ref()
                .is_none_or(|t| labels.get(crate::scheduling::labels::INSTANCE_TYPE) == Some(t))
            && selector
                .zone
                .as_ref()
                .is_none_or(|z| labels.get(crate::scheduling::labels::ZONE) == Some(z))
            && selector
                .node
                .as_ref()
                .is_none_or(|name| n.metadata.name.as_ref() == Some(name));
        let provider = n
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        if matches
            && let Some(id) = provider
                .rsplit('/')
                .next()
                .filter(|id| id.starts_with("i-"))
        {
            ids.push(id.to_owned());
        }
    }
    ids.sort();
    ids
}

/// The names of the nodes an action's selector matches.
async fn select_nodes<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    selector: &InstanceSelector,
) -> Vec<String> {
    let mut names: Vec<String> =
        sim.cluster
            .all_nodes()
            .await
            .into_iter()
            .filter(|n| {
                let labels = n.metadata.labels.clone().unwrap_or_default();
                selector
                    .labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
                    && selector.instance_type.as_ref().is_none_or(|t| {
                        labels.get(crate::scheduling::labels::INSTANCE_TYPE) == Some(t)
                    })
                    && selector
                        .zone
                        .as_ref()
                        .is_none_or(|z| labels.get(crate::scheduling::labels::ZONE) == Some(z))
                    && selector
                        .node
                        .as_ref()
                        .is_none_or(|name| n.metadata.name.as_ref() == Some(name))
            })
            .filter_map(|n| n.metadata.name)
            .collect();
    names.sort();
    names
}

/// Runs a loaded scenario's actions and then until its end.
pub async fn run<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    scenario: &Scenario,
) -> Result<(), ScenarioError> {
    let capture = crate::handlers::metrics::Capture::start();
    let ran = run_actions(sim, scenario).await;
    let metrics = capture.finish();
    sim.metrics.extend(metrics);
    ran
}

async fn run_actions<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    scenario: &Scenario,
) -> Result<(), ScenarioError> {
    let start = sim.now();
    sim.scenario_start = Some(start);
    let mut actions: Vec<(SignedDuration, &Action)> = scenario
        .actions
        .iter()
        .map(|a| Ok((parse_duration(&a.at)?, a)))
        .collect::<Result<_, ScenarioError>>()?;
    actions.sort_by_key(|(t, _)| *t);
    for (at, action) in actions {
        sim.run_until(start + at).await;
        apply_action(sim, action).await?;
    }
    sim.run_until(start + parse_duration(&scenario.run)?).await;
    Ok(())
}

async fn apply_action<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &mut Simulation<C, S, K>,
    action: &Action,
) -> Result<(), ScenarioError> {
    let err = |reason: String| ScenarioError::Action {
        at: action.at.clone(),
        reason,
    };
    match &action.what {
        ActionKind::Scale {
            deployment,
            replicas,
            namespace,
        } => sim
            .cluster
            .scale(namespace, deployment, *replicas)
            .await
            .map_err(err),
        ActionKind::Apply(objects) => {
            // Validated with what came before by `validate`: only read here.
            let (docs, workloads, errors) = read_objects(objects, "apply");
            if !errors.is_empty() {
                return Err(ScenarioError::Invalid(errors));
            }
            let items: Vec<ConfigItem> = docs.iter().map(|d| d.to_item(1, sim.now())).collect();
            put_config(&sim.store, items).await?;
            for w in workloads {
                sim.cluster.apply(&w).await.map_err(err)?;
            }
            Ok(())
        }
        ActionKind::RemoveCapacity(offerings) => {
            let sim_cloud: &SimCloud = sim
                .sim_cloud
                .as_ref()
                .ok_or_else(|| err("removeCapacity needs the in-memory cloud".to_owned()))?;
            for o in offerings {
                sim_cloud.remove_capacity(OfferingKey {
                    capacity_type: o.capacity_type.clone(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                });
            }
            Ok(())
        }
        ActionKind::RestoreCapacity(offerings) => {
            let sim_cloud: &SimCloud = sim
                .sim_cloud
                .as_ref()
                .ok_or_else(|| err("restoreCapacity needs the in-memory cloud".to_owned()))?;
            for o in offerings {
                sim_cloud.restore_capacity(&OfferingKey {
                    capacity_type: o.capacity_type.clone(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                });
            }
            Ok(())
        }
        ActionKind::NeverRegister(types) => {
            sim.never_register.extend(types.iter().cloned());
            Ok(())
        }
        ActionKind::Interrupt(selector)
        | ActionKind::Rebalance(selector)
        | ActionKind::ScheduledChange(selector) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("interruptions need the in-memory cloud".to_owned()))?;
            let ids = select_instances(sim, selector).await;
            if ids.is_empty() {
                return Err(err(format!("no instance matches {selector:?}")));
            }
            match &action.what {
                ActionKind::Interrupt(_) => {
                    for id in &ids {
                        if !sim_cloud.interrupt_spot(id) {
                            return Err(err(format!("instance {id} is not live spot capacity")));
                        }
                    }
                }
                ActionKind::Rebalance(_) => {
                    for id in &ids {
                        sim_cloud.recommend_rebalance(id);
                    }
                }
                _ => {
                    let after = parse_duration(selector.after.as_deref().unwrap_or("10m"))?;
                    sim_cloud.schedule_change(&ids, sim.now() + after);
                }
            }
            Ok(())
        }
        ActionKind::ImpairInstance(spec) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("impairInstance needs the in-memory cloud".to_owned()))?;
            let check = spec.status_check(sim.now()).map_err(err)?;
            let selector = spec.selector();
            let ids = select_instances(sim, &selector).await;
            if ids.is_empty() {
                return Err(err(format!("no instance matches {selector:?}")));
            }
            for id in &ids {
                if !sim_cloud.impair(id, check.clone()) {
                    return Err(err(format!("instance {id} is not live")));
                }
            }
            Ok(())
        }
        ActionKind::RecoverInstance(selector) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("recoverInstance needs the in-memory cloud".to_owned()))?;
            for id in select_instances(sim, selector).await {
                sim_cloud.recover(&id);
            }
            Ok(())
        }
        ActionKind::KubernetesVersion(version) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("kubernetesVersion needs the in-memory cloud".to_owned()))?;
            sim_cloud.set_kubernetes_version(version);
            Ok(())
        }
        ActionKind::NodeNotReady(selector) => {
            let names = select_nodes(sim, selector).await;
            if names.is_empty() {
                return Err(err(format!("no node matches {selector:?}")));
            }
            for name in names {
                sim.cluster
                    .set_node_ready(&name, false)
                    .await
                    .map_err(err)?;
            }
            Ok(())
        }
        ActionKind::Expect(expect) => {
            let failures = check_now(sim, expect).await;
            sim.failures.extend(
                failures
                    .into_iter()
                    .map(|f| format!("at {}: {f}", action.at)),
            );
            Ok(())
        }
        ActionKind::DeletePods(selector) => {
            let pods: Vec<crate::model::PodKey> = sim
                .cluster
                .all_pods()
                .await
                .iter()
                .filter(|p| {
                    p.metadata.namespace.as_deref().unwrap_or("default") == selector.namespace
                })
                .filter(|p| {
                    selector
                        .name
                        .as_ref()
                        .is_none_or(|n| p.metadata.name.as_ref() == Some(n))
                })
                .filter(|p| {
                    let labels = p.metadata.labels.clone().unwrap_or_default();
                    selector
                        .labels
                        .iter()
                        .all(|(k, v)| labels.get(k) == Some(v))
                })
                .map(crate::model::PodKey::of)
                .collect();
            if pods.is_empty() {
                return Err(err(format!("no pod matches {selector:?}")));
            }
            let port = sim.cluster.port();
            for pod in &pods {
                crate::ports::Cluster::delete_pod(&port, pod, selector.grace_period_seconds)
                    .await
                    .map_err(|e| err(e.to_string()))?;
            }
            Ok(())
        }
        ActionKind::Plan {} => {
            let plan = crate::handlers::disruption::dry_run(&sim.ports(), sim.disruption_tuning())
                .await
                .map_err(|e| err(e.to_string()))?;
            sim.dry_runs.push(plan);
            Ok(())
        }
        ActionKind::Enqueue(body) => {
            let sim_cloud = sim
                .sim_cloud
                .clone()
                .ok_or_else(|| err("enqueue needs the in-memory cloud".to_owned()))?;
            let text = match body {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            sim_cloud.enqueue(text);
            Ok(())
        }
    }
}

/// `costOverBoundAtMost`: the fleet's price against the LP bound of the
/// pods (DaemonSet pods included, each node pays for its own) on the pools.
async fn check_cost<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    pods: &[k8s_openapi::api::core::v1::Pod],
    at_most: f64,
) -> Option<String> {
    let (instances, catalog, config) = match (
        sim.cloud.instances().await,
        sim.cloud.catalog().await,
        crate::handlers::config::load(&sim.store).await,
    ) {
        (Ok(i), Ok(c), Ok(l)) => (i, c, l),
        _ => {
            return Some(
                "costOverBoundAtMost: the fleet, catalog or configuration could not be read"
                    .to_owned(),
            );
        }
    };
    let fleet: f64 = instances
        .iter()
        .filter(|i| i.state != crate::model::InstanceState::Terminated)
        .map(|i| i.price)
        .sum();
    let pods: Vec<crate::scheduling::SchedPod> = pods
        .iter()
        .filter(|p| !super::controllers::is_finished(p) && !super::controllers::is_terminating(p))
        .filter_map(|p| crate::scheduling::SchedPod::from_pod(p).ok())
        .collect();
    match crate::workload::fleet_bound::FleetBound::new(&config.pools, &catalog).bound(&pods) {
        Some(bound) if bound > 0.0 && fleet <= at_most * bound + 1e-9 => None,
        Some(bound) if bound > 0.0 => Some(format!(
            "fleet costs {fleet:.4} $/hour, {:.4} × the lower bound {bound:.4}, above {at_most}",
            fleet / bound
        )),
        _ => Some(format!(
            "costOverBoundAtMost: no lower bound for the pods on the pools (fleet {fleet:.4} $/hour)"
        )),
    }
}

/// Checks the expectations at the end of a run; returns every failed one,
/// with those of the run's `expect` actions first.
pub async fn check<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    expect: &Expect,
) -> Vec<String> {
    let mut failures = sim.failures.clone();
    failures.extend(check_now(sim, expect).await);
    failures
}

/// The `metrics` expectations against the published EMF documents.
fn check_metrics(want: &[MetricExpect], docs: &[serde_json::Value]) -> Vec<String> {
    let mut failures = Vec::new();
    for m in want {
        let values: Vec<f64> = docs
            .iter()
            .filter(|d| {
                m.labels
                    .iter()
                    .all(|(k, v)| d.get(k).and_then(|x| x.as_str()) == Some(v.as_str()))
            })
            .filter_map(|d| d.get(&m.name).and_then(serde_json::Value::as_f64))
            .collect();
        let what = if m.labels.is_empty() {
            m.name.clone()
        } else {
            format!("{} {:?}", m.name, m.labels)
        };
        if let Some(total) = m.total {
            let got: f64 = values.iter().sum();
            if (got - total).abs() > 1e-9 {
                failures.push(format!("expected {what} to total {total}, found {got}"));
            }
        }
        if let Some(n) = m.observations
            && values.len() != n
        {
            failures.push(format!(
                "expected {n} figure(s) of {what}, found {}",
                values.len()
            ));
        }
        if let Some(last) = m.last {
            match values.last() {
                Some(v) if (v - last).abs() <= 1e-9 => {}
                got => failures.push(format!("expected {what} last at {last}, found {got:?}")),
            }
        }
    }
    failures
}

/// Checks the expectations against the simulation as it is now.
pub async fn check_now<C: Cloud + Clone, S: Store + Clone, K: ClusterDriver>(
    sim: &Simulation<C, S, K>,
    expect: &Expect,
) -> Vec<String> {
    let mut failures = Vec::new();
    let nodes = sim.cluster.all_nodes().await;
    let pods = sim.cluster.all_pods().await;
    let is_daemon = |p: &k8s_openapi::api::core::v1::Pod| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet")
    };
    let bound = pods
        .iter()
        .filter(|p| !is_daemon(p) && node_of(p).is_some())
        .count();
    let pending = pods.iter().filter(|p| node_of(p).is_none()).count();
    if let Some(n) = expect.nodes
        && nodes.len() != n
    {
        failures.push(format!("expected {n} node(s), found {}", nodes.len()));
    }
    if let Some(pc) = &expect.pods {
        if let Some(b) = pc.bound
            && b != bound
        {
            failures.push(format!("expected {b} bound pod(s), found {bound}"));
        }
        if let Some(p) = pc.pending
            && p != pending
        {
            failures.push(format!("expected {p} pending pod(s), found {pending}"));
        }
    }
    for nw in &expect.nodes_with {
        let matching: Vec<_> = nodes
            .iter()
            .filter(|n| {
                let labels = n.metadata.labels.clone().unwrap_or_default();
                nw.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                    && nw.without_labels.iter().all(|k| !labels.contains_key(k))
            })
            .collect();
        if matching.len() != nw.count {
            failures.push(format!(
                "expected {} node(s) with {:?}{}, found {}",
                nw.count,
                nw.labels,
                if nw.without_labels.is_empty() {
                    String::new()
                } else {
                    format!(" and none of {:?}", nw.without_labels)
                },
                matching.len()
            ));
        }
        if let Some(want) = nw.pods {
            for n in matching {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                let on = pods
                    .iter()
                    .filter(|p| !is_daemon(p) && node_of(p) == Some(name))
                    .count();
                if on != want {
                    failures.push(format!("expected {want} pod(s) on node {name}, found {on}"));
                }
            }
        }
    }
    failures.extend(placement::check_pods(
        &expect.placements,
        &expect.spread,
        &nodes,
        &pods,
    ));
    if let Some(want) = &expect.launch_options {
        match (&sim.sim_cloud, sim.cloud.catalog().await) {
            (Some(c), Ok(catalog)) => {
                let requests: Vec<_> = c.all_instances().into_iter().map(|i| i.request).collect();
                failures.extend(placement::check_launches(want, &requests, &catalog));
            }
            _ => {
                failures.push("launchOptions: needs the in-memory cloud and its catalog".to_owned())
            }
        }
    }
    if let Some(at_most) = expect.cost_over_bound_at_most {
        failures.extend(check_cost(sim, &pods, at_most).await);
    }
    if let Some(l) = expect.launches {
        let launched = match &sim.sim_cloud {
            Some(c) => c.launches(),
            None => sim.cloud.instances().await.map(|v| v.len()).unwrap_or(0),
        };
        if launched != l {
            failures.push(format!("expected {l} launch(es), found {launched}"));
        }
    }
    if !expect.metrics.is_empty() {
        let mut docs = sim.metrics.clone();
        docs.extend(crate::handlers::metrics::captured_so_far());
        failures.extend(check_metrics(&expect.metrics, &docs));
    }
    let events = sim.cluster.events().await;
    for (reason, want) in &expect.events {
        let got = events.iter().filter(|(_, e)| &e.reason == reason).count();
        if got != *want {
            failures.push(format!("expected {want} {reason} event(s), found {got}"));
        }
    }
    for (pool, limits) in &expect.peak_usage_at_most {
        for (resource, value) in limits {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut r = resources::Resources::default();
            let limit = if resource == "nodes" {
                text.parse::<i64>().ok()
            } else {
                r.set(resource, &text).ok().map(|()| r.get(resource))
            };
            let Some(limit) = limit else {
                failures.push(format!(
                    "peakUsageAtMost.{pool}.{resource}: {text:?} is not a quantity"
                ));
                continue;
            };
            let peak = sim
                .peak_usage
                .get(pool)
                .and_then(|u| u.get(resource))
                .copied()
                .unwrap_or(0);
            if peak > limit {
                failures.push(format!(
                    "pool {pool} reserved {peak} of {resource}, above {limit}"
                ));
            }
        }
    }
    if expect.pdbs_held == Some(true) {
        for (pdb, (min, lowest)) in &sim.pdb_floors {
            if lowest < min {
                failures.push(format!("PodDisruptionBudget {pdb} went down to {lowest} healthy pod(s), below its minimum {min}"));
            }
        }
    }
    if let Some(want) = expect.replacements
        && sim.replacements.len() != want
    {
        failures.push(format!(
            "expected {want} replacement(s), found {}",
            sim.replacements.len()
        ));
    }
    if let Some(want) = expect.removed_nodes
        && sim.removed_nodes.len() != want
    {
        failures.push(format!(
            "expected {want} removed node(s), found {:?}",
            sim.removed_nodes
        ));
    }
    for (reason, want) in &expect.removed_for {
        let got = sim
            .removal_reasons
            .values()
            .filter(|r| *r == reason)
            .count();
        if got != *want {
            failures.push(format!(
                "expected {want} node(s) removed for {reason}, found {got} (removals: {:?})",
                sim.removal_reasons
            ));
        }
    }
    if let Some(want) = expect.rolled_back
        && sim.rolled_back.len() != want
    {
        failures.push(format!(
            "expected {want} rolled-back removal(s), found {:?}",
            sim.rolled_back
        ));
    }
    if let Some(want) = expect.tainted_nodes {
        let key = crate::model::DISRUPTED_TAINT_KEY;
        let tainted = nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key == key))
            })
            .count();
        if tainted != want {
            failures.push(format!(
                "expected {want} node(s) with the {key} taint, found {tainted}"
            ));
        }
    }
    for (pool, want) in &expect.max_concurrent_removals {
        let got = sim.max_concurrent.get(pool).copied().unwrap_or(0);
        if got > *want {
            failures.push(format!(
                "pool {pool} had {got} removals at once, more than {want}"
            ));
        }
    }
    for pool in &expect.untouched_pools {
        let prefix = format!("{pool}-");
        let touched: Vec<&String> = sim
            .removed_nodes
            .iter()
            .filter(|id| id.starts_with(&prefix))
            .collect();
        if !touched.is_empty() {
            failures.push(format!(
                "expected no removal in pool {pool}, found {touched:?}"
            ));
        }
    }
    match &expect.max_pending_seconds {
        None => {}
        Some(PendingBound::Run(max)) => {
            if let Some((waited, pod)) = &sim.longest_pending
                && waited.as_secs() > i64::try_from(*max).unwrap_or(i64::MAX)
            {
                failures.push(format!(
                    "pod {pod} waited {}s for a node, more than {max}s",
                    waited.as_secs()
                ));
            }
        }
        Some(PendingBound::Window(w)) => {
            let start = sim.scenario_start.unwrap_or(sim.now());
            let from = parse_duration(&w.from).map(|d| start + d);
            let until = w
                .until
                .as_deref()
                .map(|u| parse_duration(u).map(|d| start + d))
                .transpose();
            match (from, until) {
                (Ok(from), Ok(until)) => {
                    if let Some((waited, pod)) =
                        sim.longest_wait_begun(from, until.unwrap_or(Timestamp::MAX))
                        && waited.as_secs() > i64::try_from(w.seconds).unwrap_or(i64::MAX)
                    {
                        failures.push(format!(
                            "pod {pod} began waiting between {} and {} and waited {}s for a node, more than {}s",
                            w.from,
                            w.until.as_deref().unwrap_or("the end"),
                            waited.as_secs(),
                            w.seconds
                        ));
                    }
                }
                (Err(e), _) | (_, Err(e)) => failures.push(format!("maxPendingSeconds: {e}")),
            }
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `scenario` fuzz target: a 120-digit `at:` made the
    /// duration conversion panic instead of refusing the file.
    #[test]
    fn durations_parse_and_absurd_ones_are_refused() {
        assert_eq!(
            parse_duration("1h30m").expect("parses"),
            SignedDuration::from_mins(90)
        );
        assert_eq!(
            parse_duration("1.5s").expect("parses"),
            SignedDuration::from_millis(1500)
        );
        assert_eq!(
            parse_duration("250ms").expect("parses"),
            SignedDuration::from_millis(250)
        );
        let huge = format!("{}m", "8".repeat(120));
        assert!(
            parse_duration(&huge)
                .expect_err("too long")
                .to_string()
                .contains("longer than a century")
        );
        assert!(
            parse_duration("101y").is_err()
                && parse_duration("").is_err()
                && parse_duration("5").is_err()
        );
    }

    #[test]
    fn a_scenario_with_invalid_objects_is_refused_naming_every_error() {
        let text = r#"
name: mistakes
run: 1m
objects:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: c}
    spec: {role: r, subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: op}
    spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c},
           requirements: [{key: karpenter.sh/capacity-type, operator: Inn, values: [spot]}]}}}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: limit}
    spec: {limits: {memory: 8Gx}, template: {spec: {requirements: [], nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}}}
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: noref}
    spec: {template: {spec: {requirements: []}}}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: inflate}
    spec:
      replicas: 1
      selector: {matchLabels: {app: inflate}}
      template:
        metadata: {labels: {app: inflate}}
        spec: {containers: [{name: c, image: pause, resources: {requests: {cpu: 1x}}}]}
"#;
        let s = parse(text).expect("parses");
        let Err(ScenarioError::Invalid(errors)) = validate(&s) else {
            panic!("must be refused")
        };
        assert_eq!(errors.len(), 5, "{errors:#?}");
        let all = errors.join("\n");
        for want in [
            "nodeclass/c: spec.amiSelectorTerms",
            "nodepool/op",
            "Inn",
            "nodepool/limit: spec.limits",
            "8Gx",
            "nodepool/noref: spec.template.spec.nodeClassRef",
            "deployment/inflate: spec.template.spec.containers[0].resources.requests.cpu",
        ] {
            assert!(all.contains(want), "{want} in:\n{all}");
        }
        assert!(split_objects(&s.objects, Timestamp::UNIX_EPOCH).is_err());
    }

    /// The source walkthroughs' YAML, as users pasted it.
    const WALKTHROUGH_YAML: [(&str, &str); 4] = [
        (
            "01",
            include_str!("../../../tests/fixtures/walkthrough-yaml/01-provisioner-v1alpha5.yaml"),
        ),
        (
            "02",
            include_str!(
                "../../../tests/fixtures/walkthrough-yaml/02-provisioner-v1alpha5-expiry.yaml"
            ),
        ),
        (
            "03",
            include_str!(
                "../../../tests/fixtures/walkthrough-yaml/03-provisioner-v1alpha5-instanceprofile.yaml"
            ),
        ),
        (
            "04",
            include_str!(
                "../../../tests/fixtures/walkthrough-yaml/04-nodeclass-nodepool-v1beta1.yaml"
            ),
        ),
    ];
    const WORKLOAD_YAML: &str =
        include_str!("../../../tests/fixtures/walkthrough-yaml/05-workload-inflate.yaml");

    fn values(text: &str) -> Vec<serde_json::Value> {
        use serde::Deserialize;
        serde_norway::Deserializer::from_str(text)
            .map(|d| serde_json::Value::deserialize(d).expect("yaml"))
            .filter(|v| !v.is_null())
            .collect()
    }

    #[test]
    fn every_walkthrough_document_validates_and_drives_a_scenario() {
        for (name, text) in WALKTHROUGH_YAML {
            // 03 is a Provisioner of Karpenter v0.5's days without subnet
            // and security group selectors: they default to the cluster's
            // discovery tag, as that version did (and a warning says so).
            let text = text.to_owned();
            let set = config::ConfigSet::parse(&text).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            if name == "03" {
                let class = set
                    .node_class("default")
                    .expect("the inline provider's class");
                assert_eq!(
                    class.subnet_selector_terms,
                    [config::nodeclass::SelectorTerm::ClusterTag]
                );
                assert_eq!(
                    class.security_group_selector_terms,
                    [config::nodeclass::SelectorTerm::ClusterTag]
                );
                let warned = config::document::parse_checked(&text, false).warnings;
                assert_eq!(
                    warned.iter().map(|w| w.field.as_str()).collect::<Vec<_>>(),
                    [
                        "spec.provider.subnetSelector",
                        "spec.provider.securityGroupSelector"
                    ]
                );
            }
            let mut objects = values(&text);
            // policy/v1beta1 PodDisruptionBudgets are gone since Kubernetes
            // 1.25 (the API server refuses them as the simulator does): v1.
            objects.extend(values(
                &WORKLOAD_YAML.replace("policy/v1beta1", "policy/v1"),
            ));
            let scenario = Scenario {
                name: format!("walkthrough-yaml-{name}"),
                description: String::new(),
                region: "ap-south-1".into(),
                objects,
                actions: vec![Action {
                    at: "0s".into(),
                    what: ActionKind::Scale {
                        deployment: "inflate".into(),
                        replicas: 3,
                        namespace: "default".into(),
                    },
                }],
                run: "3m".into(),
                simulator: Pace::default(),
                spot_pools: SpotPoolsSpec::default(),
                capacity_reservations: Vec::new(),
                expect: Expect {
                    pods: Some(PodCounts {
                        bound: Some(3),
                        pending: Some(0),
                    }),
                    ..Default::default()
                },
            };
            validate(&scenario).unwrap_or_else(|e| panic!("{name}: {e}"));
            let failures = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime")
                .block_on(async {
                    let clock = super::super::SimClock::default();
                    let cloud = SimCloud::new(
                        super::super::catalog::catalog("ap-south-1").expect("region"),
                        clock.clone(),
                    );
                    let mut sim = Simulation::new(
                        clock,
                        cloud.clone(),
                        Some(cloud),
                        super::super::MemStore::new(),
                        Default::default(),
                    );
                    load(&mut sim, &scenario).await.expect("loads");
                    run(&mut sim, &scenario).await.expect("runs");
                    check(&sim, &scenario.expect).await
                });
            assert!(failures.is_empty(), "{name}: {failures:?}");
        }
    }

    fn run_in_memory(scenario: &Scenario) -> (SimCloud, Vec<String>) {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(async {
                let clock = super::super::SimClock::default();
                let cloud = SimCloud::new(
                    super::super::catalog::catalog(&scenario.region).expect("region"),
                    clock.clone(),
                );
                let mut sim = Simulation::new(
                    clock,
                    cloud.clone(),
                    Some(cloud.clone()),
                    super::super::MemStore::new(),
                    Default::default(),
                );
                load(&mut sim, scenario).await.expect("loads");
                run(&mut sim, scenario).await.expect("runs");
                (cloud, check(&sim, &scenario.expect).await)
            })
    }

    /// `tests/scenarios/spot-pools.yaml`: pools of depth 2 spread six spot
    /// nodes over at least three pools, none holding more than 2.
    #[test]
    fn shallow_spot_pools_spread_a_scenario_fleet() {
        let s = parse(include_str!("../../../tests/scenarios/spot-pools.yaml")).expect("parses");
        assert_eq!(s.spot_pools.depth, Some(2));
        let (cloud, failures) = run_in_memory(&s);
        assert!(failures.is_empty(), "{failures:?}");
        let mut per_pool: BTreeMap<(String, String), usize> = BTreeMap::new();
        for i in cloud
            .all_instances()
            .iter()
            .filter(|i| !i.instance.state.is_gone_or_going())
        {
            assert_eq!(i.instance.capacity_type, CAPACITY_TYPE_SPOT);
            *per_pool
                .entry((i.instance.instance_type.clone(), i.instance.zone.clone()))
                .or_default() += 1;
        }
        assert_eq!(per_pool.values().sum::<usize>(), 6, "{per_pool:?}");
        assert!(
            per_pool.len() >= 3 && per_pool.values().all(|n| *n <= 2),
            "{per_pool:?}"
        );
    }

    #[test]
    fn invalid_spot_pool_depths_are_refused_naming_the_field() {
        let text = r#"
name: pools
run: 1m
objects: []
spotPools:
  depth: 0
  offerings:
    - {instanceType: m5.large, zone: us-east-1a, depth: 2000000}
    - {instanceType: m5.large, zone: us-east-1a, depth: 1}
    - {instanceType: m5.large, zone: eu-west-1a, depth: 1}
"#;
        let s = parse(text).expect("parses");
        let Err(ScenarioError::Invalid(errors)) = validate(&s) else {
            panic!("must be refused")
        };
        let all = errors.join("\n");
        assert_eq!(errors.len(), 4, "{all}");
        for want in [
            "spotPools.depth: 0 is not a depth",
            "spotPools.offerings[0].depth: 2000000 is deeper than the most allowed",
            "spotPools.offerings[1]: m5.large in us-east-1a is already given at spotPools.offerings[0]",
            "spotPools.offerings[2]: m5.large is not offered as spot in eu-west-1a",
        ] {
            assert!(all.contains(want), "{want} in:\n{all}");
        }
        assert!(
            parse("name: p\nrun: 1m\nobjects: []\nspotPools: {depth: -1}\n")
                .expect_err("not a depth")
                .to_string()
                .contains("spotPools")
        );
        assert!(
            parse("name: p\nrun: 1m\nobjects: []\nspotPools: {deep: 3}\n").is_err(),
            "unknown fields are refused"
        );
        let ok = parse("name: p\nrun: 1m\nobjects: []\nspotPools: {depth: 3, seed: 9, offerings: [{instanceType: m5.large, zone: us-east-1a, depth: 1}]}\n").expect("parses");
        validate(&ok).expect("valid");
        let depths = ok.spot_pools.depths().expect("depths");
        assert_eq!(
            (
                depths.seed,
                depths.all,
                depths.offerings.values().copied().collect::<Vec<_>>()
            ),
            (9, Some(3), vec![1])
        );
        assert!(
            SpotPoolsSpec::default().depths().is_none(),
            "nothing set: the cloud keeps its depths"
        );
    }

    /// Actions are read strictly: one verb each, known keys only, and none
    /// timed after the run ends (it would silently never happen).
    #[test]
    fn malformed_actions_are_refused_saying_what_is_wrong() {
        let scenario =
            |actions: &str| format!("name: a\nrun: 5m\nobjects: []\nactions:\n{actions}");
        let no_verb = parse(&scenario("  - {at: 1m}\n")).expect_err("no verb");
        assert!(
            no_verb.to_string().contains("action at 1m has no verb"),
            "{no_verb}"
        );
        let unknown = parse(&scenario(
            "  - {at: 1m, scale: {deployment: d, replicas: 1}, node: x}\n",
        ))
        .expect_err("unknown key");
        assert!(
            unknown.to_string().contains("unknown key(s) [\"node\"]"),
            "{unknown}"
        );
        let two = parse(&scenario("  - {at: 1m, plan: {}, expect: {nodes: 1}}\n"))
            .expect_err("two verbs");
        assert!(two.to_string().contains("has 2 verbs"), "{two}");
        let bad_body = parse(&scenario(
            "  - {at: 1m, scale: {deployment: d, replicaz: 1}}\n",
        ))
        .expect_err("unknown field in the verb");
        assert!(
            bad_body.to_string().contains("action at 1m: scale"),
            "{bad_body}"
        );
        let late = parse(&scenario(
            "  - {at: 6m, plan: {}}\n  - {at: 5m, plan: {}}\n",
        ))
        .expect("parses");
        let Err(ScenarioError::Invalid(errors)) = validate(&late) else {
            panic!("an action after the run is refused")
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("actions[0].at: 6m is after the end of the run (5m)"),
            "{errors:?}"
        );
        let window = parse("name: a\nrun: 5m\nobjects: []\nexpect: {maxPendingSeconds: {seconds: 9, from: soon}}\n")
            .expect("parses");
        let Err(ScenarioError::Invalid(errors)) = validate(&window) else {
            panic!("a window that is not a duration is refused")
        };
        assert!(
            errors[0].starts_with("expect.maxPendingSeconds.from"),
            "{errors:?}"
        );
        let ok = parse(&scenario(
            "  - {at: 5m, expect: {maxPendingSeconds: {seconds: 9, from: 1m, until: 2m}}}\n",
        ))
        .expect("parses");
        validate(&ok).expect("valid");
    }

    #[test]
    fn the_built_in_scenarios_validate() {
        for (name, text) in BUILT_IN {
            let s = parse(text).expect(name);
            validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
