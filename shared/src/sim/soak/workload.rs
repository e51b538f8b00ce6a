//! The soak's seeded workload: Deployments on daily curves, batch Jobs
//! (the soak plays their controller), a DaemonSet, and the NodePools.

use super::*;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::disruption::snapshot::DO_NOT_DISRUPT;
use crate::model::{PodKey, SignedDuration, Timestamp};
use crate::ports::Cluster;
use crate::scheduling::labels;
use crate::sim::controllers::{is_terminating, node_of};
use crate::sim::rng::Rng;

/// A Deployment following a daily curve.
#[derive(Debug, Clone)]
pub(super) struct Scaled {
    name: String,
    base: f64,
    phase: f64,
}

/// A batch Job's pod, as the soak's Job controller tracks it.
#[derive(Debug, Clone)]
pub(super) struct JobPod {
    job: String,
    /// The pod's current name (a new one after each early removal).
    name: String,
    attempt: u32,
    /// How long it runs once bound.
    runtime: SignedDuration,
    /// When it was first seen bound (its run started).
    started: Option<Timestamp>,
    cpu: &'static str,
    memory: &'static str,
    arm64: bool,
    /// `karpenter.sh/do-not-disrupt: "true"`, as batch users are told to set.
    keep: bool,
}

/// The seeded workload: its objects, and what it changes over time.
#[derive(Debug)]
pub struct Workload {
    rng: Rng,
    deployments: Vec<Scaled>,
    jobs: Vec<JobPod>,
    next_job: u64,
    /// Figures.
    pub job_pods_created: usize,
    pub job_pods_completed: usize,
    pub job_pods_rerun: usize,
}

/// Which Deployments the soak runs: name, cpu, memory, base replicas
/// (min, max), node selector, a PDB, do-not-disrupt.
pub(super) type DeploymentShape = (
    &'static str,
    &'static str,
    &'static str,
    (f64, f64),
    Option<(&'static str, &'static str)>,
    Option<serde_json::Value>,
    bool,
);

pub(super) fn deployment_shapes() -> Vec<DeploymentShape> {
    vec![
        (
            "web",
            "250m",
            "512Mi",
            (6.0, 10.0),
            None,
            Some(json!({"maxUnavailable": 1})),
            false,
        ),
        (
            "api",
            "500m",
            "1Gi",
            (4.0, 8.0),
            None,
            Some(json!({"minAvailable": "50%"})),
            false,
        ),
        (
            "cache",
            "1",
            "4Gi",
            (2.0, 3.0),
            None,
            Some(json!({"minAvailable": 1})),
            true,
        ),
        (
            "worker-arm",
            "1",
            "2Gi",
            (3.0, 6.0),
            Some((labels::ARCH, "arm64")),
            None,
            false,
        ),
        (
            "billing",
            "500m",
            "1Gi",
            (2.0, 4.0),
            Some((labels::CAPACITY_TYPE, "on-demand")),
            Some(json!({"maxUnavailable": 1})),
            false,
        ),
        (
            "ml",
            "2",
            "8Gi",
            (1.0, 3.0),
            Some((labels::ARCH, "amd64")),
            None,
            false,
        ),
        ("queue", "250m", "256Mi", (3.0, 6.0), None, None, false),
        ("search", "1", "2Gi", (2.0, 5.0), None, None, false),
    ]
}

pub(super) fn config_objects() -> Vec<serde_json::Value> {
    let class = json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"});
    vec![
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"}, "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "soak"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "soak"}}]}}),
        json!({"apiVersion": "nodewright.io/v1alpha1", "kind": "Settings", "metadata": {"name": "default"}, "spec": {
            "featureGates": {"nodeRepair": true}}}),
        // Spot first, both architectures, a CPU limit the daily peak reaches.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "annotations": {"nodewright.io/rebalance-policy": "Replace"}}, "spec": {
            "weight": 50,
            "limits": {"cpu": "48", "memory": "192Gi"},
            "template": {"spec": {"nodeClassRef": class, "expireAfter": "12h", "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8", "16"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m",
                "budgets": [{"nodes": "20%"}]}}}),
        // On-demand amd64, the fallback when spot's limit is reached.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "on-demand"}, "spec": {
            "weight": 10,
            "limits": {"cpu": "200"},
            "template": {"spec": {"nodeClassRef": class, "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8", "16"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m",
                "budgets": [{"nodes": "1"}, {"nodes": "0", "schedule": "0 */6 * * *", "duration": "1h", "reasons": ["Underutilized", "Drifted"]}]}}}),
        // Spot arm64 for batch pods only (tainted), emptied quickly.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "batch-arm"}, "spec": {
            "weight": 80,
            "limits": {"cpu": "16"},
            "template": {"spec": {"nodeClassRef": class,
                "taints": [{"key": "batch", "value": "true", "effect": "NoSchedule"}],
                "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2", "4", "8"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m", "budgets": [{"nodes": "2"}]}}}),
    ]
}

impl Workload {
    pub(super) fn new(seed: u64) -> (Workload, Vec<serde_json::Value>) {
        let mut rng = Rng::new(seed);
        let mut objects = config_objects();
        objects.push(json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent", "namespace": "kube-system"}, "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {"metadata": {"labels": {"app": "node-agent"}}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}));
        let mut deployments = Vec::new();
        for (name, cpu, memory, (lo, hi), selector, pdb, dnd) in deployment_shapes() {
            let base = lo + rng.unit() * (hi - lo);
            let phase = rng.unit() * std::f64::consts::TAU;
            let mut template = json!({"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": rng.range(5, 30),
                "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}});
            if let Some((k, v)) = selector {
                template["spec"]["nodeSelector"] = json!({k: v});
            }
            if dnd {
                template["metadata"]["annotations"] = json!({DO_NOT_DISRUPT: "true"});
            }
            objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": {
                "replicas": base.round() as i32, "selector": {"matchLabels": {"app": name}}, "template": template}}));
            if let Some(mut spec) = pdb {
                spec["selector"] = json!({"matchLabels": {"app": name}});
                objects.push(
                    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
                );
            }
            deployments.push(Scaled {
                name: name.to_owned(),
                base,
                phase,
            });
        }
        let w = Workload {
            rng,
            deployments,
            jobs: Vec::new(),
            next_job: 1,
            job_pods_created: 0,
            job_pods_completed: 0,
            job_pods_rerun: 0,
        };
        (w, objects)
    }

    /// Replicas of a Deployment at `minute`: a daily sine (±60 %) with ±20 % noise.
    pub(super) fn replicas(&mut self, i: usize, minute: i64) -> i32 {
        let d = &self.deployments[i];
        let day = minute as f64 / (24.0 * 60.0) * std::f64::consts::TAU;
        let level = d.base * (1.0 + 0.6 * (day + d.phase).sin());
        (level * (0.8 + 0.4 * self.rng.unit())).round().max(0.0) as i32
    }

    pub(super) fn job_pod(p: &JobPod) -> serde_json::Value {
        let mut spec = json!({"restartPolicy": "Never", "terminationGracePeriodSeconds": 10,
            "tolerations": [{"key": "batch", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "containers": [{"name": "job", "image": "batch", "resources": {"requests": {"cpu": p.cpu, "memory": p.memory}}}]});
        if p.arm64 {
            spec["nodeSelector"] = json!({labels::ARCH: "arm64"});
        }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": p.name, "namespace": "batch",
            "labels": {"job-name": p.job}}, "spec": spec});
        if p.keep {
            pod["metadata"]["annotations"] = json!({DO_NOT_DISRUPT: "true"});
        }
        pod
    }

    /// What changes at the start of `minute`: Deployments re-scaled every
    /// 15 minutes; a new Job every 20 minutes or so.
    pub(super) fn at_minute(&mut self, sim: &SoakSim, minute: i64) -> Result<(), SoakError> {
        if minute > 0 && minute % 15 == 0 {
            for i in 0..self.deployments.len() {
                let n = self.replicas(i, minute);
                sim.cluster
                    .inner()
                    .scale("default", &self.deployments[i].name, n)
                    .map_err(|e| SoakError::Setup(e.to_string()))?;
            }
        }
        if minute % 5 == 0 && self.rng.chance(0.25) {
            let job = format!("job-{:04}", self.next_job);
            self.next_job += 1;
            let cpu = *self.rng.pick(&["500m", "1", "2"]);
            let memory = *self.rng.pick(&["1Gi", "2Gi", "4Gi"]);
            let arm64 = self.rng.chance(0.5);
            let keep = self.rng.chance(0.5);
            for k in 0..self.rng.range(1, 6) {
                let runtime = SignedDuration::from_mins(self.rng.range(5, 45) as i64);
                let p = JobPod {
                    job: job.clone(),
                    name: format!("{job}-{k}-0"),
                    attempt: 0,
                    runtime,
                    started: None,
                    cpu,
                    memory,
                    arm64,
                    keep,
                };
                sim.cluster
                    .inner()
                    .apply(&Self::job_pod(&p))
                    .map_err(|e| SoakError::Setup(e.to_string()))?;
                self.job_pods_created += 1;
                self.jobs.push(p);
            }
        }
        Ok(())
    }

    /// The Job controller: a pod that ran its time completes (and is
    /// cleaned up); one that vanished early runs again under a new name.
    pub(super) async fn reconcile_jobs(&mut self, sim: &SoakSim) -> Result<(), SoakError> {
        let now = sim.now();
        let pods: BTreeMap<String, Pod> = sim
            .cluster
            .inner()
            .all_pods()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some("batch"))
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        let mut keep = Vec::new();
        for mut j in std::mem::take(&mut self.jobs) {
            match pods.get(&j.name) {
                Some(p) if is_terminating(p) => keep.push(j),
                Some(p) => {
                    if node_of(p).is_some() && j.started.is_none() {
                        j.started = Some(now);
                    }
                    if j.started
                        .is_some_and(|s| now.duration_since(s) >= j.runtime)
                    {
                        let _ = sim
                            .cluster
                            .inner()
                            .delete_pod(&PodKey::of(p), Some(0))
                            .await;
                        self.job_pods_completed += 1;
                    } else {
                        keep.push(j);
                    }
                }
                None => {
                    // Evicted or its node went away: the Job makes a new pod.
                    j.attempt += 1;
                    let stem = j
                        .name
                        .rsplit_once('-')
                        .map_or(j.name.clone(), |(s, _)| s.to_owned());
                    j.name = format!("{stem}-{}", j.attempt);
                    j.started = None;
                    sim.cluster
                        .inner()
                        .apply(&Self::job_pod(&j))
                        .map_err(|e| SoakError::Setup(e.to_string()))?;
                    self.job_pods_rerun += 1;
                    keep.push(j);
                }
            }
        }
        self.jobs = keep;
        Ok(())
    }
}
