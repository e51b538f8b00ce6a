//! CapacityBuffers as virtual pods (Karpenter v1.15's CapacityBuffer
//! controller and virtual pod store), pure.
//!
//! A buffer resolves ([`resolve`]) to a pod template — its stored
//! `PodTemplate`, or the template of the workload its `scalableRef` names,
//! which the handler reads from the cluster and passes in — and a number of
//! chunks (the larger of `replicas` and `percentage` of the workload's
//! replicas, capped by what fits in `limits`, or only `limits`: as many
//! chunks as fit). A workload that is not there makes no chunk, and the
//! buffer's status says why (Karpenter's `ScalableRefNotFound`). Each chunk
//! is a virtual pod of the template. Virtual pods exist only in
//! memory: the provisioner plans for them after the real pods (launching
//! nodes that hold them, binding nothing), and disruption places them on
//! the cluster so a node holding buffer room is not empty, and a move that
//! would leave buffer room unplaceable is not taken. Real pods take buffer
//! room like any free room; the next provisioning pass finds the buffer no
//! longer fits and launches again (the refill).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::config::buffer::ScalableKind;
use crate::config::{BufferSource, CapacityBuffer};
use crate::model::{PodKey, ScalableWorkload};
use crate::resources::Resources;
use crate::scheduling::SchedPod;

/// Marks a virtual pod (Karpenter's `FakePodAnnotationKey`).
pub const VIRTUAL_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The buffer a virtual pod belongs to.
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
/// Every virtual pod's uid starts with this (no Kubernetes uid does).
pub const UID_PREFIX: &str = "capacity-buffer:";

/// Karpenter's `ReadyForProvisioning=False` reasons.
pub const SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
pub const RESOLUTION_FAILED: &str = "ResolutionFailed";

/// A workload a buffer's `scalableRef` names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkloadKey {
    pub kind: ScalableKind,
    pub namespace: String,
    pub name: String,
}

/// What the handler read of a workload.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadRead {
    Found(Box<ScalableWorkload>),
    /// No such object.
    Missing,
    /// The read failed (the error, as text).
    Failed(String),
}

/// The workloads the buffers name (each once), for the handler to read;
/// a kind Karpenter does not resolve is never read.
pub fn workloads_named(buffers: &[CapacityBuffer]) -> Vec<WorkloadKey> {
    let mut keys: Vec<WorkloadKey> = buffers
        .iter()
        .filter_map(|b| match &b.source {
            BufferSource::Workload(r) => ScalableKind::of(r.api_group.as_deref(), &r.kind)
                .ok()
                .map(|kind| WorkloadKey {
                    kind,
                    namespace: b.namespace.clone(),
                    name: r.name.clone(),
                }),
            BufferSource::Template(_) => None,
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Why a buffer makes no chunk (Karpenter's `ReadyForProvisioning=False`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotReady {
    pub reason: String,
    pub message: String,
}

/// A buffer with its chunk's shape and count settled.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedBuffer {
    pub name: String,
    pub namespace: String,
    /// The shape of one chunk.
    pub template: PodTemplateSpec,
    /// How many chunks it wants.
    pub chunks: u32,
    /// Set when its workload could not be resolved: no chunk.
    pub not_ready: Option<NotReady>,
}

/// Every buffer resolved against the workloads the handler read (Karpenter's
/// `resolveAndUpdateStatus`): a `podTemplateRef` buffer from its stored
/// template; a `scalableRef` buffer from its workload's template and
/// replicas. A workload that does not exist, of a kind not resolved, or
/// whose read failed: the buffer makes no chunk and says why.
pub fn resolve(
    buffers: &[CapacityBuffer],
    workloads: &BTreeMap<WorkloadKey, WorkloadRead>,
) -> Vec<ResolvedBuffer> {
    buffers
        .iter()
        .map(|b| {
            let resolved = |template: PodTemplateSpec, chunks: u32| ResolvedBuffer {
                name: b.name.clone(),
                namespace: b.namespace.clone(),
                template,
                chunks,
                not_ready: None,
            };
            let not_ready = |reason: &str, message: String| ResolvedBuffer {
                name: b.name.clone(),
                namespace: b.namespace.clone(),
                template: PodTemplateSpec::default(),
                chunks: 0,
                not_ready: Some(NotReady {
                    reason: reason.to_owned(),
                    message,
                }),
            };
            let r = match &b.source {
                BufferSource::Template(t) => {
                    let chunks = replicas(b, t, None);
                    return resolved((**t).clone(), chunks);
                }
                BufferSource::Workload(r) => r,
            };
            let kind = match ScalableKind::of(r.api_group.as_deref(), &r.kind) {
                Ok(k) => k,
                Err(why) => return not_ready(RESOLUTION_FAILED, why),
            };
            let key = WorkloadKey {
                kind,
                namespace: b.namespace.clone(),
                name: r.name.clone(),
            };
            match workloads.get(&key) {
                Some(WorkloadRead::Found(w)) => {
                    let chunks = replicas(b, &w.template, Some(w.replicas));
                    resolved(w.template.clone(), chunks)
                }
                Some(WorkloadRead::Failed(e)) => not_ready(RESOLUTION_FAILED, e.clone()),
                Some(WorkloadRead::Missing) | None => not_ready(
                    SCALABLE_REF_NOT_FOUND,
                    format!("{} {:?} not found", kind.resource(), r.name),
                ),
            }
        })
        .collect()
}

/// How many chunks a buffer wants (Karpenter's `computeReplicas`):
/// `replicas` and `percentage` of the workload's replicas together give
/// the larger; `limits` caps that, or alone gives as many chunks as fit.
/// A limit on a resource the template does not request constrains
/// nothing (`calculateLimitReplicas`). `workload_replicas` is `None` for a
/// `podTemplateRef` buffer (its `percentage` sizes nothing).
pub fn replicas(
    b: &CapacityBuffer,
    template: &PodTemplateSpec,
    workload_replicas: Option<i32>,
) -> u32 {
    let mut candidates: Vec<u32> = Vec::new();
    if let (Some(p), Some(w)) = (b.percentage, workload_replicas)
        && w > 0
    {
        candidates.push(percentage_replicas(w, p));
    }
    candidates.extend(b.replicas);
    let desired = candidates.iter().copied().max();
    let by_limits = b
        .limits
        .as_ref()
        .and_then(|l| limit_replicas(l, &b.limit_names, &chunk_requests(template)));
    match (desired, by_limits) {
        (Some(d), Some(l)) => d.min(l),
        (Some(d), None) => d,
        (None, Some(l)) => l,
        (None, None) => 0,
    }
}

/// ceil(workload × percentage / 100), at least 1 when both are positive
/// (Karpenter's `calculatePercentageReplicas`), at most `i32::MAX`.
pub fn percentage_replicas(workload: i32, percentage: u32) -> u32 {
    if workload <= 0 || percentage == 0 {
        return 0;
    }
    let n = (i64::from(workload) * i64::from(percentage) + 99) / 100;
    n.clamp(1, i64::from(i32::MAX)) as u32
}

/// The requests of one chunk (the template's effective requests).
pub fn chunk_requests(template: &PodTemplateSpec) -> Resources {
    let pod = chunk_pod(
        &ResolvedBuffer {
            name: "chunk".into(),
            namespace: "default".into(),
            template: template.clone(),
            chunks: 1,
            not_ready: None,
        },
        0,
    );
    let mut r = SchedPod::from_pod(&pod)
        .map(|sp| sp.requests)
        .unwrap_or_default();
    // The pod count is not a request (Karpenter sums the containers').
    r.pods = 0;
    r
}

/// floor(limit / request) over every limited resource the chunk requests;
/// `None` when no limited resource is requested.
fn limit_replicas(limits: &Resources, names: &[String], requests: &Resources) -> Option<u32> {
    let mut out: Option<i64> = None;
    for name in names {
        let (limit, request) = (limits.get(name), requests.get(name));
        if request <= 0 {
            continue;
        }
        let n = (limit.max(0) / request).min(i64::from(u32::MAX));
        out = Some(out.map_or(n, |o| o.min(n)));
    }
    out.map(|n| n as u32)
}

/// Whether a pod is one of a buffer's virtual pods.
pub fn is_virtual(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VIRTUAL_POD_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Whether a pod key names a virtual pod.
pub fn is_virtual_key(k: &PodKey) -> bool {
    k.uid.starts_with(UID_PREFIX)
}

/// `namespace/name` of the buffer a virtual pod key belongs to.
pub fn buffer_of_key(k: &PodKey) -> Option<&str> {
    let rest = k.uid.strip_prefix(UID_PREFIX)?;
    Some(rest.rsplit_once('#').map_or(rest, |(b, _)| b))
}

/// Every buffer's virtual pods, buffer by buffer (sorted by namespace and name).
pub fn virtual_pods(buffers: &[ResolvedBuffer]) -> Vec<Pod> {
    let mut sorted: Vec<&ResolvedBuffer> = buffers.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    sorted
        .into_iter()
        .flat_map(|b| (1..=b.chunks).map(move |i| chunk_pod(b, i)))
        .collect()
}

/// Chunk `i` of a buffer: the template's pod, stripped of what a pod that
/// never exists cannot have (a node name, PVC-backed and ephemeral volumes
/// and their mounts), lowest priority, unschedulable.
fn chunk_pod(b: &ResolvedBuffer, i: u32) -> Pod {
    let template = &b.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut spec = template.spec.clone().unwrap_or_default();
    sanitize(&mut spec);
    spec.priority = Some(i32::MIN);
    let annotations = BTreeMap::from([
        (VIRTUAL_POD_ANNOTATION.to_owned(), "true".to_owned()),
        (BUFFER_NAME_ANNOTATION.to_owned(), b.name.clone()),
        (BUFFER_NAMESPACE_ANNOTATION.to_owned(), b.namespace.clone()),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("capacity-buffer-{}-{i}", b.name)),
            namespace: Some(b.namespace.clone()),
            uid: Some(format!("{UID_PREFIX}{}/{}#{i}", b.namespace, b.name)),
            labels: meta.labels,
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(spec),
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn sanitize(spec: &mut PodSpec) {
    spec.node_name = None;
    let mut dropped = Vec::new();
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| {
            let drop = v.persistent_volume_claim.is_some() || v.ephemeral.is_some();
            if drop {
                dropped.push(v.name.clone());
            }
            !drop
        });
    }
    if dropped.is_empty() {
        return;
    }
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        if let Some(mounts) = c.volume_mounts.as_mut() {
            mounts.retain(|m| !dropped.contains(&m.name));
        }
    }
}

/// Where one buffer's chunks are after a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferStatus {
    /// `namespace/name`.
    pub buffer: String,
    pub wanted: u32,
    /// On existing nodes, or on claims already launching.
    pub placed: u32,
    /// On nodes this pass launches (or would launch).
    pub launching: u32,
    /// Fitting nowhere (limits, no type large enough), with the first reason.
    pub unplaced: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the buffer makes no chunk (its workload is not resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<NotReady>,
}

impl BufferStatus {
    /// Karpenter's `Provisioning` condition: every chunk fits on existing capacity.
    pub fn condition(&self) -> (&'static str, String) {
        if let Some(n) = &self.not_ready {
            (
                "NotReadyForProvisioning",
                format!("{}: {}", n.reason, n.message),
            )
        } else if self.wanted == 0 {
            ("BufferEmpty", "the buffer wants no chunk".into())
        } else if self.placed == self.wanted {
            (
                "FitsExistingCapacity",
                format!("all {} chunk(s) fit on existing capacity", self.wanted),
            )
        } else {
            (
                "RequiresNewCapacity",
                format!(
                    "{}/{} chunk(s) need new capacity, {} fit nowhere",
                    self.launching, self.wanted, self.unplaced
                ),
            )
        }
    }
}

/// Each buffer's status from a pass over its virtual pods: `placed` and
/// `launching` name the virtual pods' keys that landed on existing room or
/// on new claims, `unplaced` those that fit nowhere (with the reason).
pub fn statuses(
    buffers: &[ResolvedBuffer],
    placed: &[PodKey],
    launching: &[PodKey],
    unplaced: &[(PodKey, String)],
) -> Vec<BufferStatus> {
    let mut out: BTreeMap<String, BufferStatus> = buffers
        .iter()
        .map(|b| {
            let key = format!("{}/{}", b.namespace, b.name);
            (
                key.clone(),
                BufferStatus {
                    buffer: key,
                    wanted: b.chunks,
                    not_ready: b.not_ready.clone(),
                    ..Default::default()
                },
            )
        })
        .collect();
    for k in placed {
        if let Some(s) = buffer_of_key(k).and_then(|b| out.get_mut(b)) {
            s.placed += 1;
        }
    }
    for k in launching {
        if let Some(s) = buffer_of_key(k).and_then(|b| out.get_mut(b)) {
            s.launching += 1;
        }
    }
    for (k, why) in unplaced {
        if let Some(s) = buffer_of_key(k).and_then(|b| out.get_mut(b)) {
            s.unplaced += 1;
            s.reason.get_or_insert_with(|| why.clone());
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use serde_json::json;

    fn buffer(
        replicas: Option<u32>,
        limits: &[(&str, &str)],
        template: serde_json::Value,
    ) -> CapacityBuffer {
        let mut l = Resources::default();
        for (k, v) in limits {
            l.set(k, v).expect("limit");
        }
        CapacityBuffer {
            name: "buf".into(),
            namespace: "default".into(),
            source: BufferSource::Template(Box::new(
                serde_json::from_value::<PodTemplateSpec>(template).expect("template"),
            )),
            replicas,
            percentage: None,
            limits: (!limits.is_empty()).then_some(l),
            limit_names: limits.iter().map(|(k, _)| (*k).to_owned()).collect(),
        }
    }

    /// Resolved with no workload read.
    fn resolved(buffers: &[CapacityBuffer]) -> Vec<ResolvedBuffer> {
        resolve(buffers, &BTreeMap::new())
    }

    fn chunks(b: &CapacityBuffer) -> u32 {
        resolved(std::slice::from_ref(b))[0].chunks
    }

    fn requesting(cpu: &str, memory: &str) -> serde_json::Value {
        json!({"metadata": {"labels": {"app": "buf"}}, "spec": {"containers": [
            {"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}})
    }

    // Karpenter pkg/controllers/capacitybuffer/suite_test.go, "Replica
    // calculation": Entry("fixed replicas only"), Entry("replicas capped by
    // binding limit"), Entry("non-binding limit does not reduce
    // (podTemplateRef)"), Entry("limits only").
    #[test]
    fn replicas_limits_and_both() {
        assert_eq!(chunks(&buffer(Some(3), &[], requesting("1", "1Gi"))), 3);
        assert_eq!(
            chunks(&buffer(Some(5), &[("cpu", "2")], requesting("1", "1Gi"))),
            2
        );
        assert_eq!(
            chunks(&buffer(Some(2), &[("cpu", "10")], requesting("1", "1Gi"))),
            2
        );
        assert_eq!(
            chunks(&buffer(None, &[("cpu", "3500m")], requesting("1", "1Gi"))),
            3
        );
    }

    // helpers_test.go "calculateLimitReplicas": "should take the minimum
    // across multiple resources", "should return false when no limit
    // resources match pod requests", "should return 0 when limit is smaller
    // than a single pod request", "should use init container max if larger
    // than sum of containers".
    #[test]
    fn limit_replicas_as_karpenter() {
        assert_eq!(
            chunks(&buffer(
                None,
                &[("cpu", "10"), ("memory", "3Gi")],
                requesting("1", "1Gi")
            )),
            3
        );
        // No limited resource requested: limits alone give nothing, replicas stand.
        assert_eq!(
            chunks(&buffer(
                Some(4),
                &[("nvidia.com/gpu", "2")],
                requesting("1", "1Gi")
            )),
            4
        );
        assert_eq!(
            chunks(&buffer(
                None,
                &[("nvidia.com/gpu", "2")],
                requesting("1", "1Gi")
            )),
            0
        );
        assert_eq!(
            chunks(&buffer(None, &[("cpu", "500m")], requesting("1", "1Gi"))),
            0
        );
        let init = json!({"spec": {
            "initContainers": [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "4"}}}],
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(chunks(&buffer(None, &[("cpu", "8")], init)), 2);
    }

    // virtualpods/utilities_test.go "buildVirtualPods": "should create the
    // correct number of pods with expected metadata", "should produce
    // deterministic UIDs across calls", "should return nil for zero replicas".
    #[test]
    fn virtual_pods_carry_the_template_and_their_buffer() {
        let b = buffer(Some(3), &[], requesting("1", "1Gi"));
        let pods = virtual_pods(&resolved(std::slice::from_ref(&b)));
        assert_eq!(pods.len(), 3);
        for p in &pods {
            assert!(is_virtual(p));
            assert!(crate::scheduling::pod::is_provisionable(p));
            assert_eq!(
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .map(String::as_str),
                Some("buf")
            );
            assert_eq!(p.spec.as_ref().and_then(|s| s.priority), Some(i32::MIN));
            assert_eq!(buffer_of_key(&PodKey::of(p)), Some("default/buf"));
        }
        let uids: Vec<_> = pods.iter().map(|p| p.metadata.uid.clone()).collect();
        let again: Vec<_> = virtual_pods(&resolved(&[b]))
            .iter()
            .map(|p| p.metadata.uid.clone())
            .collect();
        assert_eq!(uids, again);
        assert!(
            virtual_pods(&resolved(&[buffer(Some(0), &[], requesting("1", "1Gi"))])).is_empty()
        );
    }

    // utilities_test.go "sanitizeVirtualPodSpec": "should drop both PVC and
    // ephemeral volumes together", "should preserve tolerations,
    // nodeSelector, and affinity".
    #[test]
    fn virtual_pods_drop_claims_and_keep_constraints() {
        let t = json!({"spec": {
            "nodeName": "n1",
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                        {"name": "cfg", "configMap": {"name": "x"}}],
            "containers": [{"name": "c", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "scratch", "mountPath": "/s"}, {"name": "cfg", "mountPath": "/c"}]}]}});
        let pods = virtual_pods(&resolved(&[buffer(Some(1), &[], t)]));
        let spec = pods[0].spec.as_ref().expect("spec");
        assert_eq!(spec.node_name, None);
        let volumes: Vec<_> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["cfg"]);
        let mounts: Vec<_> = spec.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(mounts, ["cfg"]);
        assert!(spec.node_selector.is_some() && spec.tolerations.is_some());
    }

    // buffers_test.go "classifyBufferPods": "should bucket virtual pods by
    // buffer namespace/name across existing and new nodes", "should
    // distinguish buffers with the same name in different namespaces";
    // "computeProvisioningCondition": True/FitsExistingCapacity,
    // False/RequiresNewCapacity, False/BufferEmpty.
    #[test]
    fn statuses_bucket_by_buffer() {
        let mut a = buffer(Some(2), &[], requesting("1", "1Gi"));
        let mut b = a.clone();
        b.namespace = "other".into();
        b.replicas = Some(1);
        let mut empty = a.clone();
        empty.name = "none".into();
        empty.replicas = Some(0);
        a.replicas = Some(2);
        let pods = virtual_pods(&resolved(&[a.clone(), b.clone()]));
        let keys: Vec<PodKey> = pods.iter().map(PodKey::of).collect();
        let s = statuses(&resolved(&[a, b, empty]), &keys[..2], &keys[2..], &[]);
        let by: BTreeMap<&str, &BufferStatus> = s.iter().map(|s| (s.buffer.as_str(), s)).collect();
        assert_eq!(
            (by["default/buf"].placed, by["default/buf"].launching),
            (2, 0)
        );
        assert_eq!(by["default/buf"].condition().0, "FitsExistingCapacity");
        assert_eq!((by["other/buf"].placed, by["other/buf"].launching), (0, 1));
        assert_eq!(by["other/buf"].condition().0, "RequiresNewCapacity");
        assert_eq!(by["default/none"].condition().0, "BufferEmpty");
    }

    fn deployment(replicas: i32, cpu: &str) -> ScalableWorkload {
        ScalableWorkload {
            template: serde_json::from_value(requesting(cpu, "256Mi")).expect("template"),
            replicas,
        }
    }

    /// A buffer of Deployment `web` (namespace `default`).
    fn of_workload(
        replicas: Option<u32>,
        percentage: Option<u32>,
        limits: &[(&str, &str)],
    ) -> CapacityBuffer {
        let mut b = buffer(replicas, limits, requesting("1", "1Gi"));
        b.source = BufferSource::Workload(crate::config::buffer::ScalableRef {
            api_group: Some("apps".into()),
            kind: "Deployment".into(),
            name: "web".into(),
        });
        b.percentage = percentage;
        b
    }

    fn web(w: ScalableWorkload) -> BTreeMap<WorkloadKey, WorkloadRead> {
        BTreeMap::from([(
            WorkloadKey {
                kind: ScalableKind::Deployment,
                namespace: "default".into(),
                name: "web".into(),
            },
            WorkloadRead::Found(Box::new(w)),
        )])
    }

    // suite_test.go "Replica calculation" (scalableRef entries):
    // Entry("percentage only"), Entry("replicas > percentage"),
    // Entry("percentage > replicas"), Entry("max of replicas and
    // percentage capped by limit"), Entry("percentage rounds up to a
    // minimum of 1"); Context("ScalableRef resolution") It("should resolve
    // a Deployment and calculate percentage-based replicas"), It("should
    // default to 1 replica when workload has nil Spec.Replicas") (the
    // adapters read an unset `spec.replicas` as 1: the contract suite).
    #[test]
    fn a_workload_buffer_takes_the_larger_of_replicas_and_percentage_within_limits() {
        type Case<'a> = (Option<u32>, Option<u32>, &'a [(&'a str, &'a str)], i32, u32);
        let cases: [Case<'_>; 6] = [
            (None, Some(20), &[], 10, 2),
            (Some(5), Some(20), &[], 10, 5),
            (Some(5), Some(80), &[], 10, 8),
            (Some(5), Some(80), &[("cpu", "4")], 10, 4),
            (None, Some(10), &[], 1, 1),
            (None, Some(100), &[], 1, 1),
        ];
        for (replicas, percentage, limits, workload, want) in cases {
            let b = of_workload(replicas, percentage, limits);
            let r = resolve(&[b], &web(deployment(workload, "1")));
            assert_eq!(
                (r[0].chunks, &r[0].not_ready),
                (want, &None),
                "replicas {replicas:?}, percentage {percentage:?}, limits {limits:?}, workload {workload}"
            );
        }
        // The chunk is shaped like the workload's pods.
        let r = resolve(
            &[of_workload(None, Some(50), &[])],
            &web(deployment(4, "250m")),
        );
        let pods = virtual_pods(&r);
        assert_eq!(pods.len(), 2);
        assert_eq!(
            chunk_requests(&r[0].template).get("cpu"),
            250,
            "the Deployment's request, not the buffer's"
        );
    }

    // helpers_test.go "calculatePercentageReplicas": every It.
    #[test]
    fn percentage_replicas_as_karpenter() {
        for (workload, pct, want) in [
            (10, 20, 2),
            (3, 10, 1),
            (1, 1, 1),
            (0, 50, 0),
            (10, 0, 0),
            (5, 100, 5),
            (5, 200, 10),
            (1000, 10, 100),
        ] {
            assert_eq!(
                percentage_replicas(workload, pct),
                want,
                "{pct}% of {workload}"
            );
        }
    }

    // A workload scaled to 0: the percentage gives nothing, `replicas`
    // still stands, and limits alone size the buffer (computeReplicas with
    // no candidate).
    #[test]
    fn a_workload_at_zero_replicas_leaves_replicas_and_limits() {
        let zero = web(deployment(0, "1"));
        assert_eq!(
            resolve(&[of_workload(None, Some(50), &[])], &zero)[0].chunks,
            0
        );
        assert_eq!(
            resolve(&[of_workload(Some(2), Some(50), &[])], &zero)[0].chunks,
            2
        );
        assert_eq!(
            resolve(&[of_workload(None, Some(50), &[("cpu", "3")])], &zero)[0].chunks,
            3
        );
    }

    // suite_test.go Context("ScalableRef resolution"): It("should set
    // ReadyForProvisioning=False when scalable ref is not found"),
    // It("should return error for unsupported kind"), It("should return
    // error for unsupported API group"); buffers_test.go
    // "computeProvisioningCondition" False/NotReadyForProvisioning.
    // Where we differ on purpose: Karpenter's reconcile returns an error
    // for an unsupported kind (and retries it); here the buffer makes no
    // chunk and says why, with no error and nothing retried.
    #[test]
    fn a_workload_that_is_not_there_makes_no_chunk_and_says_why() {
        let missing = resolve(&[of_workload(Some(3), None, &[])], &BTreeMap::new());
        assert_eq!(missing[0].chunks, 0);
        assert_eq!(
            missing[0]
                .not_ready
                .as_ref()
                .map(|n| (n.reason.as_str(), n.message.as_str())),
            Some((SCALABLE_REF_NOT_FOUND, "deployments.apps \"web\" not found"))
        );
        assert!(virtual_pods(&missing).is_empty());
        let s = statuses(&missing, &[], &[], &[]);
        assert_eq!(s[0].condition().0, "NotReadyForProvisioning");
        assert!(
            s[0].condition().1.contains(SCALABLE_REF_NOT_FOUND),
            "{:?}",
            s[0].condition()
        );

        for (group, kind) in [
            (Some("batch"), "Job"),
            (Some("batch"), "Deployment"),
            (None, "Job"),
        ] {
            let mut b = of_workload(None, Some(20), &[]);
            b.source = BufferSource::Workload(crate::config::buffer::ScalableRef {
                api_group: group.map(Into::into),
                kind: kind.into(),
                name: "web".into(),
            });
            assert!(
                workloads_named(std::slice::from_ref(&b)).is_empty(),
                "never read"
            );
            let r = resolve(&[b], &web(deployment(10, "1")));
            assert_eq!(r[0].chunks, 0);
            assert_eq!(
                r[0].not_ready.as_ref().map(|n| n.reason.as_str()),
                Some(RESOLUTION_FAILED)
            );
        }

        let failed = BTreeMap::from([(
            WorkloadKey {
                kind: ScalableKind::Deployment,
                namespace: "default".into(),
                name: "web".into(),
            },
            WorkloadRead::Failed("forbidden: cannot get deployments.apps".into()),
        )]);
        let r = resolve(&[of_workload(Some(3), None, &[])], &failed);
        assert_eq!(
            (
                r[0].chunks,
                r[0].not_ready.as_ref().map(|n| n.reason.as_str())
            ),
            (0, Some(RESOLUTION_FAILED))
        );
    }

    #[test]
    fn each_named_workload_is_read_once() {
        let a = of_workload(Some(1), None, &[]);
        let mut b = a.clone();
        b.name = "other".into();
        let keys = workloads_named(&[a, b, buffer(Some(1), &[], requesting("1", "1Gi"))]);
        assert_eq!(keys.len(), 1, "{keys:?}");
    }
}
