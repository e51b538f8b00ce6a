//! A scale-up beside the real control plane, as Karpenter's performance
//! suite measures one (kubernetes-sigs/karpenter,
//! test/suites/performance/basic_test.go, "Basic Deployment" / "should
//! efficiently scale two deployments with different resource profiles"):
//! two Deployments of 500 pods each, 900m/3100Mi and 3500m/28Gi, on a
//! NodePool of on-demand c/m/r types (their test caps sizes below 32xlarge
//! under kwok; the embedded catalog's types are taken as they come),
//! consolidation after 30 s, budget 100 %.
//!
//! The pods are created by the real ReplicaSet controller, marked
//! Unschedulable by the real kube-scheduler, provisioned by nodewright's
//! handlers (in this process, on a wall clock, with the in-memory EC2 and
//! store), their Nodes created by the registrar after the boot delay and
//! made Ready by kwok, and bound by nodewright or kube-scheduler.
//!
//! Figures, not assertions on time: from the first pod's creation to the
//! last pod Running (API timestamps, whole seconds), the nodes and
//! launches, the reserved utilization (requests over allocatable, as
//! Karpenter's report computes it), and peak resident memory: this
//! process's (the four functions' handlers and the emulated AWS — an
//! upper bound of what one function needs) and the control plane's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use nodewright::model::{SignedDuration, Timestamp};
use nodewright::resources::Resources;
use nodewright::scheduling::SchedPod;
use nodewright::sim::ClusterDriver;
use nodewright::sim::scenario;
use serde_json::json;

use crate::kube_harness::KubeEnv;
use crate::sim::{KubeSim, control_plane_settings, on_control_plane};

/// The shapes of Karpenter's basic performance test: name, CPU, memory.
pub const SHAPES: [(&str, &str, &str); 2] = [
    ("small-resource-app", "900m", "3100Mi"),
    ("large-resource-app", "3500m", "28Gi"),
];

/// What a scale-up measured.
#[derive(Debug, Clone)]
pub struct Figures {
    pub pods: usize,
    /// First pod created → last pod Running (API timestamps).
    pub seconds: f64,
    pub nodes: usize,
    pub launches: usize,
    /// Requested over allocatable, CPU and memory, over every node.
    pub cpu_utilization: f64,
    pub memory_utilization: f64,
    /// Peak resident memory of this process (VmHWM), bytes.
    pub process_peak_rss: Option<u64>,
    /// Peak resident memory of each control-plane process, bytes.
    pub control_plane_peak_rss: BTreeMap<String, u64>,
    /// Instance type → nodes.
    pub types: BTreeMap<String, usize>,
}

fn objects(pods: usize) -> Vec<serde_json::Value> {
    let mut out = vec![
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                ]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                "budgets": [{"nodes": "100%"}]}}}),
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}}),
    ];
    let mut left = pods;
    for (i, (name, cpu, memory)) in SHAPES.iter().enumerate() {
        let replicas = if i + 1 == SHAPES.len() {
            left
        } else {
            pods / 2
        };
        left -= replicas;
        out.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": {"replicas": replicas.to_string()}}, "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}}));
    }
    out
}

fn is_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn ready_at(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// Peak resident memory (VmHWM) of a process, in bytes (Linux).
pub fn peak_rss(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Scales the two Deployments to `pods` in all and runs until every pod
/// runs (panics after `give_up`, naming what is left).
pub async fn run(pods: usize, give_up: Duration) -> (KubeSim, Figures) {
    let mut sim = on_control_plane("us-east-1", control_plane_settings()).await;
    let objects = objects(pods);
    let s = scenario::Scenario {
        name: "scale-up".to_owned(),
        description: String::new(),
        region: "us-east-1".to_owned(),
        objects: objects.clone(),
        actions: Vec::new(),
        run: "0s".to_owned(),
        simulator: Default::default(),
        spot_pools: Default::default(),
        capacity_reservations: Vec::new(),
        expect: Default::default(),
    };
    scenario::load(&mut sim, &s).await.expect("loads");
    sim.run_for(SignedDuration::from_secs(2)).await;
    for d in objects.iter().filter(|o| o["kind"] == "Deployment") {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let replicas: i32 = d["spec"]["template"]["metadata"]["annotations"]["replicas"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        sim.cluster
            .scale("default", name, replicas)
            .await
            .expect("scale");
    }
    let started = Instant::now();
    let all = loop {
        sim.run_for(SignedDuration::from_secs(2)).await;
        let now = sim.cluster.all_pods().await;
        if now.len() == pods && now.iter().all(is_running) {
            break now;
        }
        if started.elapsed() > give_up {
            let pending = now.iter().filter(|p| !is_running(p)).count();
            panic!(
                "after {give_up:?}: {} pod(s), {pending} not running; nodes {}, launches {}",
                now.len(),
                sim.cluster.all_nodes().await.len(),
                sim.cloud.inner().launches()
            );
        }
    };
    let first = all
        .iter()
        .filter_map(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .min()
        .expect("pods have creation times");
    let last = all.iter().filter_map(ready_at).max().unwrap_or(first);
    let nodes = sim.cluster.all_nodes().await;
    let mut requested = Resources::default();
    for p in &all {
        if let Ok(sp) = SchedPod::from_pod(p) {
            requested.add(&sp.requests);
        }
    }
    let mut allocatable = Resources::default();
    let mut types = BTreeMap::new();
    for n in &nodes {
        if let Some(a) = n.status.as_ref().and_then(|s| s.allocatable.as_ref())
            && let Ok(r) = Resources::from_list(a)
        {
            allocatable.add(&r);
        }
        let ty = n
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(nodewright::scheduling::labels::INSTANCE_TYPE))
            .cloned()
            .unwrap_or_default();
        *types.entry(ty).or_insert(0) += 1;
    }
    let ratio = |a: i64, b: i64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    let env = KubeEnv::control_plane();
    let figures = Figures {
        pods,
        seconds: last.duration_since(first).as_secs_f64(),
        nodes: nodes.len(),
        launches: sim.cloud.inner().launches(),
        cpu_utilization: ratio(requested.cpu_millis, allocatable.cpu_millis),
        memory_utilization: ratio(requested.memory_bytes, allocatable.memory_bytes),
        process_peak_rss: peak_rss("self"),
        control_plane_peak_rss: env
            .pids
            .iter()
            .filter_map(|(name, pid)| Some((name.clone(), peak_rss(pid)?)))
            .collect(),
        types,
    };
    (sim, figures)
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        writeln!(
            f,
            "{} pods: first pod created → last pod Running in {:.0} s",
            self.pods, self.seconds
        )?;
        writeln!(
            f,
            "{} nodes, {} launches; reserved utilization: CPU {:.0} %, memory {:.0} %",
            self.nodes,
            self.launches,
            self.cpu_utilization * 100.0,
            self.memory_utilization * 100.0
        )?;
        let types: Vec<String> = self
            .types
            .iter()
            .map(|(t, n)| format!("{n} × {t}"))
            .collect();
        writeln!(f, "types: {}", types.join(", "))?;
        if let Some(p) = self.process_peak_rss {
            writeln!(
                f,
                "peak RSS of this process (the functions' handlers and the emulated AWS): {:.0} MiB",
                mib(p)
            )?;
        }
        let cp: Vec<String> = self
            .control_plane_peak_rss
            .iter()
            .map(|(n, b)| format!("{n} {:.0} MiB", mib(*b)))
            .collect();
        write!(f, "control plane peak RSS: {}", cp.join(", "))
    }
}
