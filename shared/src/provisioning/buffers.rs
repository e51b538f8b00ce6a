//! CapacityBuffers as virtual pods (Karpenter v1.15's CapacityBuffer
//! controller and virtual pod store), pure.
//!
//! A buffer resolves to a number of chunks (`replicas`, capped by what fits
//! in `limits`, or only `limits`: as many chunks as fit), and each chunk is
//! a virtual pod of the buffer's pod template. Virtual pods exist only in
//! memory: the provisioner plans for them after the real pods (launching
//! nodes that hold them, binding nothing), and disruption places them on
//! the cluster so a node holding buffer room is not empty, and a move that
//! would leave buffer room unplaceable is not taken. Real pods take buffer
//! room like any free room; the next provisioning pass finds the buffer no
//! longer fits and launches again (the refill).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::config::CapacityBuffer;
use crate::ports::PodKey;
use crate::resources::Resources;
use crate::scheduling::SchedPod;

/// Marks a virtual pod (Karpenter's `FakePodAnnotationKey`).
pub const VIRTUAL_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The buffer a virtual pod belongs to.
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
/// Every virtual pod's uid starts with this (no Kubernetes uid does).
pub const UID_PREFIX: &str = "capacity-buffer:";

/// How many chunks a buffer wants: `replicas`, at most what fits in
/// `limits`; only `limits`: as many as fit. A limit on a resource the
/// template does not request constrains nothing (Karpenter's
/// `computeReplicas` and `calculateLimitReplicas`).
pub fn replicas(b: &CapacityBuffer) -> u32 {
    let by_limits = b
        .limits
        .as_ref()
        .and_then(|l| limit_replicas(l, &b.limit_names, &chunk_requests(b)));
    match (b.replicas, by_limits) {
        (Some(r), Some(l)) => r.min(l),
        (Some(r), None) => r,
        (None, Some(l)) => l,
        (None, None) => 0,
    }
}

/// The requests of one chunk (the template's effective requests).
pub fn chunk_requests(b: &CapacityBuffer) -> Resources {
    let pod = chunk_pod(b, 0);
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
pub fn virtual_pods(buffers: &[CapacityBuffer]) -> Vec<Pod> {
    let mut sorted: Vec<&CapacityBuffer> = buffers.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    sorted
        .into_iter()
        .flat_map(|b| (1..=replicas(b)).map(move |i| chunk_pod(b, i)))
        .collect()
}

/// Chunk `i` of a buffer: the template's pod, stripped of what a pod that
/// never exists cannot have (a node name, PVC-backed and ephemeral volumes
/// and their mounts), lowest priority, unschedulable.
fn chunk_pod(b: &CapacityBuffer, i: u32) -> Pod {
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
}

impl BufferStatus {
    /// Karpenter's `Provisioning` condition: every chunk fits on existing capacity.
    pub fn condition(&self) -> (&'static str, String) {
        if self.wanted == 0 {
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
    buffers: &[CapacityBuffer],
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
                    wanted: replicas(b),
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
            template: serde_json::from_value::<PodTemplateSpec>(template).expect("template"),
            replicas,
            limits: (!limits.is_empty()).then_some(l),
            limit_names: limits.iter().map(|(k, _)| (*k).to_owned()).collect(),
        }
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
        assert_eq!(replicas(&buffer(Some(3), &[], requesting("1", "1Gi"))), 3);
        assert_eq!(
            replicas(&buffer(Some(5), &[("cpu", "2")], requesting("1", "1Gi"))),
            2
        );
        assert_eq!(
            replicas(&buffer(Some(2), &[("cpu", "10")], requesting("1", "1Gi"))),
            2
        );
        assert_eq!(
            replicas(&buffer(None, &[("cpu", "3500m")], requesting("1", "1Gi"))),
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
            replicas(&buffer(
                None,
                &[("cpu", "10"), ("memory", "3Gi")],
                requesting("1", "1Gi")
            )),
            3
        );
        // No limited resource requested: limits alone give nothing, replicas stand.
        assert_eq!(
            replicas(&buffer(
                Some(4),
                &[("nvidia.com/gpu", "2")],
                requesting("1", "1Gi")
            )),
            4
        );
        assert_eq!(
            replicas(&buffer(
                None,
                &[("nvidia.com/gpu", "2")],
                requesting("1", "1Gi")
            )),
            0
        );
        assert_eq!(
            replicas(&buffer(None, &[("cpu", "500m")], requesting("1", "1Gi"))),
            0
        );
        let init = json!({"spec": {
            "initContainers": [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "4"}}}],
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(replicas(&buffer(None, &[("cpu", "8")], init)), 2);
    }

    // virtualpods/utilities_test.go "buildVirtualPods": "should create the
    // correct number of pods with expected metadata", "should produce
    // deterministic UIDs across calls", "should return nil for zero replicas".
    #[test]
    fn virtual_pods_carry_the_template_and_their_buffer() {
        let b = buffer(Some(3), &[], requesting("1", "1Gi"));
        let pods = virtual_pods(std::slice::from_ref(&b));
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
        let again: Vec<_> = virtual_pods(&[b])
            .iter()
            .map(|p| p.metadata.uid.clone())
            .collect();
        assert_eq!(uids, again);
        assert!(virtual_pods(&[buffer(Some(0), &[], requesting("1", "1Gi"))]).is_empty());
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
        let pods = virtual_pods(&[buffer(Some(1), &[], t)]);
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
        let pods = virtual_pods(&[a.clone(), b.clone()]);
        let keys: Vec<PodKey> = pods.iter().map(PodKey::of).collect();
        let s = statuses(&[a, b, empty], &keys[..2], &keys[2..], &[]);
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
}
