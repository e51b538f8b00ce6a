//! Metrics as CloudWatch Embedded Metric Format lines: one JSON object per
//! line on stdout, which CloudWatch Logs turns into metrics with no API
//! call. Outside Lambda the same figures go to the debug log.
//!
//! Where Karpenter has a metric for the same thing, nodewright publishes it
//! under Karpenter's Prometheus name and with its labels as dimensions
//! ([`karpenter`]): a counter as one EMF value per event (sum it per
//! period, as `increase()` would), a gauge as its value when read, a
//! histogram as one value per observation (its percentiles are
//! CloudWatch's). So a Karpenter alert translates name for name.
//! `shared/docs/operations.md` maps each Karpenter metric to ours.

use std::collections::BTreeMap;

use crate::model::RemovalReason;

/// Karpenter's metrics that nodewright publishes, by their Prometheus names
/// (kubernetes-sigs/karpenter `pkg/metrics`, `pkg/controllers/…/metrics.go`;
/// aws/karpenter-provider-aws `pkg/controllers/interruption/metrics.go`).
pub mod karpenter {
    /// Counter {reason, nodepool, min_values_relaxed}: a claim launched
    /// (`provisioned`, or the disruption reason of a replacement).
    pub const NODECLAIMS_CREATED: &str = "karpenter_nodeclaims_created_total";
    /// Counter {nodepool, capacity_type, zone}: a claim's instance terminated and the claim released.
    pub const NODECLAIMS_TERMINATED: &str = "karpenter_nodeclaims_terminated_total";
    /// Counter {reason, nodepool, capacity_type, termination_mode}: a removal started.
    pub const NODECLAIMS_DISRUPTED: &str = "karpenter_nodeclaims_disrupted_total";
    /// Counter {reason, nodepool, capacity_type, termination_mode}: a
    /// removal started, by the node's reschedulable pods.
    pub const PODS_DISRUPTION_INITIATED: &str = "karpenter_pods_disruption_initiated_total";
    /// Counter {nodepool, zone}: a claim's Node registered.
    pub const NODES_CREATED: &str = "karpenter_nodes_created_total";
    /// Counter {nodepool, zone}: a removed claim's Node deleted.
    pub const NODES_TERMINATED: &str = "karpenter_nodes_terminated_total";
    /// Counter {nodepool}: a node drained by a removal.
    pub const NODES_DRAINED: &str = "karpenter_nodes_drained_total";
    /// Histogram {nodepool}: a removal's start to its release, seconds.
    pub const NODES_TERMINATION_DURATION: &str = "karpenter_nodes_termination_duration_seconds";
    /// Histogram {nodepool}: a removed node's registration to its release, seconds.
    pub const NODES_LIFETIME: &str = "karpenter_nodes_lifetime_duration_seconds";
    /// Histogram: a pod's creation to Ready, seconds.
    pub const PODS_STARTUP: &str = "karpenter_pods_startup_duration_seconds";
    /// Counter {reason}: pods evicted by a drain, by the voluntary
    /// disruption's reason (`Empty`, `Underutilized`, `Drifted`,
    /// `Unhealthy`; none for a forceful removal).
    pub const PODS_DRAINED: &str = "karpenter_pods_drained_total";
    /// Counter {code}: eviction requests by the API server's answer.
    pub const PODS_EVICTION_REQUESTS: &str = "karpenter_pods_eviction_requests_total";
    /// Counter {decision, reason, consolidation_type}: a disruption command decided.
    pub const DISRUPTION_DECISIONS: &str = "karpenter_voluntary_disruption_decisions_total";
    /// Counter {nodepool, decision, reason, consolidation_type}: a disruption
    /// command decided, once per pool among its targets.
    pub const DISRUPTION_DECISIONS_BY_NODEPOOL: &str =
        "karpenter_voluntary_disruption_decisions_by_nodepool_total";
    /// Counter {consolidation_type}: a voluntary command that no longer
    /// held when re-validated, and was dropped.
    pub const DISRUPTION_FAILED_VALIDATIONS: &str =
        "karpenter_voluntary_disruption_failed_validations_total";
    /// Gauge {reason}: the nodes a voluntary method found candidates at
    /// the last decision, before the budgets.
    pub const DISRUPTION_ELIGIBLE_NODES: &str = "karpenter_voluntary_disruption_eligible_nodes";
    /// Histogram {controller}: one solve, seconds.
    pub const SCHEDULING_DURATION: &str = "karpenter_scheduler_scheduling_duration_seconds";
    /// Gauge {controller}: pods waiting for capacity (marked Unschedulable, no node).
    pub const SCHEDULER_QUEUE_DEPTH: &str = "karpenter_scheduler_queue_depth";
    /// Gauge {nodepool, resource_type}: what a pool's claims reserve.
    pub const NODEPOOLS_USAGE: &str = "karpenter_nodepools_usage";
    /// Gauge {nodepool, resource_type}: a pool's limit.
    pub const NODEPOOLS_LIMIT: &str = "karpenter_nodepools_limit";
    /// Gauge {nodepool}: what a pool's instances cost, $ per hour, at launch prices.
    pub const NODEPOOLS_COST: &str = "karpenter_nodepools_cost_total";
    /// Counter {message_type}: interruption-queue messages received.
    pub const INTERRUPTION_RECEIVED: &str = "karpenter_interruption_received_messages_total";
    /// Counter: interruption-queue messages deleted (handled, ignored or unreadable).
    pub const INTERRUPTION_DELETED: &str = "karpenter_interruption_deleted_messages_total";
    /// Histogram: an interruption event's time to its handling, seconds.
    pub const INTERRUPTION_QUEUE_DURATION: &str =
        "karpenter_interruption_message_queue_duration_seconds";
    /// Counter {category}: an instance of ours EC2 reports unhealthy
    /// (`InstanceStatus`, `SystemStatus`, `EventStatus`), once per instance
    /// and category while it stays so.
    pub const INSTANCE_STATUS_UNHEALTHY: &str =
        "karpenter_interruption_instance_status_unhealthy_total";

    /// Every name above (the dashboard is checked against it;
    /// `shared/docs/operations.md` lists each).
    pub const ALL: [&str; 25] = [
        NODECLAIMS_CREATED,
        NODECLAIMS_TERMINATED,
        NODECLAIMS_DISRUPTED,
        PODS_DISRUPTION_INITIATED,
        NODES_CREATED,
        NODES_TERMINATED,
        NODES_DRAINED,
        NODES_TERMINATION_DURATION,
        NODES_LIFETIME,
        PODS_STARTUP,
        PODS_EVICTION_REQUESTS,
        PODS_DRAINED,
        DISRUPTION_DECISIONS,
        DISRUPTION_DECISIONS_BY_NODEPOOL,
        DISRUPTION_FAILED_VALIDATIONS,
        DISRUPTION_ELIGIBLE_NODES,
        SCHEDULING_DURATION,
        SCHEDULER_QUEUE_DEPTH,
        NODEPOOLS_USAGE,
        NODEPOOLS_LIMIT,
        NODEPOOLS_COST,
        INTERRUPTION_RECEIVED,
        INTERRUPTION_DELETED,
        INTERRUPTION_QUEUE_DURATION,
        INSTANCE_STATUS_UNHEALTHY,
    ];
}

/// nodewright's own metrics, where Karpenter has none.
pub mod own {
    /// Counter {message_type}: interruption messages dropped unread (not
    /// JSON, not an event we parse); Karpenter deletes these silently.
    pub const INTERRUPTION_DROPPED: &str = "nodewright_interruption_dropped_messages_total";
    /// Counter {function}: invocations or ticks that failed.
    pub const ERRORS: &str = "nodewright_errors_total";

    pub const ALL: [&str; 2] = [INTERRUPTION_DROPPED, ERRORS];
}

/// Karpenter's `reason` label for a removal (snake case, as its
/// disruption and interruption controllers write it).
pub fn reason_label(reason: RemovalReason) -> &'static str {
    match reason {
        RemovalReason::SpotInterrupted => "spot_interrupted",
        RemovalReason::ScheduledChange => "scheduled_change",
        RemovalReason::CapacityReservationInterrupted => "capacity_reservation_interrupted",
        RemovalReason::CapacityBlockExpiring => "capacity_block_expiring",
        RemovalReason::InstanceStopping => "instance_stopped",
        RemovalReason::Rebalance => "rebalance_recommendation",
        RemovalReason::Expired => "expired",
        RemovalReason::Drifted => "drifted",
        RemovalReason::Empty => "empty",
        RemovalReason::Underutilized => "underutilized",
        RemovalReason::Unhealthy => "unhealthy",
        // Karpenter's static deprovisioning deletes claims without a reason
        // label; ours names it.
        RemovalReason::ScaledDown => "scaled_down",
        RemovalReason::InstanceStatus => "instance_status",
        RemovalReason::SystemStatus => "system_status",
        RemovalReason::EventStatus => "event_status",
    }
}

/// One figure of a metric with labels: `labels` become the EMF dimensions.
pub fn record(
    timestamp_ms: i64,
    name: &'static str,
    labels: &[(&str, &str)],
    value: f64,
    unit: &'static str,
) {
    let dims: BTreeMap<&str, String> = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    emit(timestamp_ms, &dims, &[Metric { name, value, unit }]);
}

/// A counter's increment by `by`.
pub fn count(timestamp_ms: i64, name: &'static str, labels: &[(&str, &str)], by: f64) {
    record(timestamp_ms, name, labels, by, "Count");
}

/// A duration observed.
pub fn seconds(timestamp_ms: i64, name: &'static str, labels: &[(&str, &str)], value: f64) {
    record(timestamp_ms, name, labels, value, "Seconds");
}

/// A gauge's value now.
pub fn gauge(timestamp_ms: i64, name: &'static str, labels: &[(&str, &str)], value: f64) {
    record(timestamp_ms, name, labels, value, "None");
}

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "nodewright";

/// One figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub value: f64,
    /// `Seconds`, `Count`, …
    pub unit: &'static str,
}

impl Metric {
    pub fn seconds(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            value,
            unit: "Seconds",
        }
    }

    pub fn count(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            value,
            unit: "Count",
        }
    }
}

/// The EMF document for `metrics` with `dimensions` (e.g. function, reason).
pub fn emf_line(
    timestamp_ms: i64,
    dimensions: &BTreeMap<&str, String>,
    metrics: &[Metric],
) -> String {
    let mut doc = serde_json::Map::new();
    let definitions: Vec<serde_json::Value> = metrics
        .iter()
        .map(|m| serde_json::json!({"Name": m.name, "Unit": m.unit}))
        .collect();
    doc.insert(
        "_aws".to_owned(),
        serde_json::json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions.keys().collect::<Vec<_>>()],
                "Metrics": definitions,
            }]
        }),
    );
    for (k, v) in dimensions {
        doc.insert((*k).to_owned(), serde_json::Value::String(v.clone()));
    }
    for m in metrics {
        doc.insert(m.name.to_owned(), serde_json::json!(m.value));
    }
    serde_json::Value::Object(doc).to_string()
}

/// Publishes `metrics`: an EMF line on stdout inside Lambda, a debug log
/// elsewhere (and to this thread's [`capture`], if one is open).
pub fn emit(timestamp_ms: i64, dimensions: &BTreeMap<&str, String>, metrics: &[Metric]) {
    if metrics.is_empty() {
        return;
    }
    // Clusters of one account and region share the namespace: each
    // function's figures carry its cluster (the Terraform module's
    // dashboard and users' alarms select it).
    let mut dimensions = dimensions.clone();
    if let Ok(cluster) = std::env::var("NODEWRIGHT_CLUSTER_NAME")
        && !cluster.is_empty()
    {
        dimensions.insert("cluster", cluster);
    }
    let line = emf_line(timestamp_ms, &dimensions, metrics);
    CAPTURED.with(|c| {
        if let Some(lines) = c.borrow_mut().as_mut() {
            lines.push(line.clone());
        }
    });
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        println!("{line}");
    } else {
        tracing::debug!(metrics = %line, "metrics");
    }
}

thread_local! {
    static CAPTURED: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
}

/// A capture that spans `await`s (a scenario's run on a current-thread
/// runtime): what this thread publishes from [`Capture::start`] to
/// [`Capture::finish`]. A capture already open still sees every line.
#[derive(Debug)]
pub struct Capture {
    before: Option<Vec<String>>,
}

impl Capture {
    pub fn start() -> Capture {
        Capture {
            before: CAPTURED.with(|c| c.borrow_mut().replace(Vec::new())),
        }
    }

    /// What was published since `start`, as parsed EMF documents; the
    /// capture that was open before gets the lines too.
    pub fn finish(self) -> Vec<serde_json::Value> {
        let lines = CAPTURED
            .with(|c| std::mem::replace(&mut *c.borrow_mut(), self.before))
            .unwrap_or_default();
        CAPTURED.with(|c| {
            if let Some(outer) = c.borrow_mut().as_mut() {
                outer.extend(lines.iter().cloned());
            }
        });
        parse_lines(&lines)
    }
}

/// What the capture open on this thread holds so far, parsed (none open: nothing).
pub fn captured_so_far() -> Vec<serde_json::Value> {
    CAPTURED.with(|c| c.borrow().as_deref().map(parse_lines).unwrap_or_default())
}

fn parse_lines(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Runs `f` and returns what it published on this thread, as parsed EMF
/// documents (tests: which metric, which dimensions, which value).
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, Vec<serde_json::Value>) {
    let before = CAPTURED.with(|c| c.borrow_mut().replace(Vec::new()));
    let out = f();
    let lines = CAPTURED
        .with(|c| std::mem::replace(&mut *c.borrow_mut(), before))
        .unwrap_or_default();
    let docs = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out, docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_and_carries_every_metric() {
        let dims: BTreeMap<&str, String> = [("Function", "interruption".to_owned())].into();
        let line = emf_line(
            1_700_000_000_000,
            &dims,
            &[
                Metric::seconds("TimeToTainted", 0.25),
                Metric::count("EvictionsBlocked", 3.0),
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][0],
            "Function"
        );
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Name"],
            "EvictionsBlocked"
        );
        assert_eq!(v["Function"], "interruption");
        assert_eq!(v["TimeToTainted"], 0.25);
        assert_eq!(v["EvictionsBlocked"], 3.0);
    }

    #[test]
    fn the_names_are_karpenters_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for name in karpenter::ALL {
            assert!(name.starts_with("karpenter_"), "{name}");
            assert!(seen.insert(name), "{name} twice");
        }
        for name in own::ALL {
            assert!(name.starts_with("nodewright_"), "{name}");
            assert!(seen.insert(name), "{name} twice");
        }
    }

    /// The first walkthrough on the simulator publishes Karpenter's
    /// counters for its launch and its node, and the pending-pods gauge.
    #[test]
    fn a_walkthrough_publishes_karpenters_counters() {
        use crate::sim::scenario::{self, WALKTHROUGH_1};
        use crate::sim::{SimClock, SimCloud, SimSettings, Simulation, catalog};
        let ((), docs) = capture(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(async {
                    let s = scenario::parse(WALKTHROUGH_1).expect("parses");
                    let clock = SimClock::default();
                    let cloud =
                        SimCloud::new(catalog::catalog(&s.region).expect("region"), clock.clone());
                    let mut sim = Simulation::new(
                        clock,
                        cloud.clone(),
                        Some(cloud),
                        crate::sim::MemStore::new(),
                        SimSettings::default(),
                    );
                    scenario::load(&mut sim, &s).await.expect("loads");
                    scenario::run(&mut sim, &s).await.expect("runs");
                })
        });
        let with = |name: &str| -> Vec<&serde_json::Value> {
            docs.iter().filter(|d| d.get(name).is_some()).collect()
        };
        let created = with(karpenter::NODECLAIMS_CREATED);
        assert_eq!(created.len(), 1, "one launch: {docs:#?}");
        assert_eq!(created[0]["reason"], "provisioned");
        assert_eq!(created[0]["nodepool"], "default");
        assert_eq!(created[0][karpenter::NODECLAIMS_CREATED], 1.0);
        let dims = &created[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0];
        assert!(
            dims.as_array()
                .is_some_and(|d| d.iter().any(|x| x == "nodepool")),
            "labels are dimensions: {dims}"
        );
        let nodes = with(karpenter::NODES_CREATED);
        assert_eq!(nodes.len(), 1, "{docs:#?}");
        assert_eq!(nodes[0]["zone"], "ap-south-1a");
        assert!(
            with(karpenter::SCHEDULER_QUEUE_DEPTH)
                .iter()
                .any(|d| d[karpenter::SCHEDULER_QUEUE_DEPTH] == 3.0),
            "the three pods were seen waiting: {docs:#?}"
        );
        assert!(!with(karpenter::SCHEDULING_DURATION).is_empty());
    }

    #[test]
    fn every_removal_reason_has_karpenters_label() {
        use crate::model::RemovalReason::*;
        for (r, label) in [
            (SpotInterrupted, "spot_interrupted"),
            (Expired, "expired"),
            (Drifted, "drifted"),
            (Empty, "empty"),
            (Underutilized, "underutilized"),
            (Rebalance, "rebalance_recommendation"),
        ] {
            assert_eq!(reason_label(r), label);
        }
    }
}
