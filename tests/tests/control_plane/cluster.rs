//! What the scenarios beside the control plane share: their files, the
//! cluster's own Events, pod and node facts.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use nodewright::model::Timestamp;
use nodewright::sim::scenario::{self, Scenario};

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A scenario under `tests/scenarios/control-plane/`.
pub fn scenario(name: &str) -> Scenario {
    let path = format!(
        "{}/scenarios/control-plane/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    scenario::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One Event as the cluster's components published it.
#[derive(Debug, Clone)]
pub struct SeenEvent {
    pub at: Timestamp,
    /// `default-scheduler`, `nodewright`, the controllers' names, …
    pub by: String,
    pub name: String,
    pub reason: String,
}

/// Every Event since `since`, whoever published it (core/v1 Events that
/// the controllers still write included, through events.k8s.io/v1).
pub async fn events_since(admin: &kube::Client, since: Timestamp) -> Vec<SeenEvent> {
    let api: Api<Event> = Api::all(admin.clone());
    let events = api
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items;
    let mut out: Vec<SeenEvent> = events
        .into_iter()
        .filter_map(|e| {
            let at = e
                .event_time
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0))
                .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
            (at >= since).then(|| {
                let regarding = e.regarding.clone().unwrap_or_default();
                SeenEvent {
                    at,
                    by: e
                        .reporting_controller
                        .clone()
                        .filter(|c| !c.is_empty())
                        .or_else(|| {
                            e.deprecated_source
                                .as_ref()
                                .and_then(|s| s.component.clone())
                        })
                        .unwrap_or_default(),
                    name: regarding.name.unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                }
            })
        })
        .collect();
    out.sort_by_key(|e| e.at);
    out
}

pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn app(p: &Pod) -> &str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app"))
        .map_or("", String::as_str)
}

pub fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect()
}

pub fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
