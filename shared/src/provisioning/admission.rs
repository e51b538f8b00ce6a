//! Whether a pod may be bound straight to a node: what the node's kubelet
//! admits and kube-scheduler's filters would accept. Pure.
//!
//! nodewright binds the pods it planned when their node registers. A pod
//! that fails any of these is not bound and stays pending for kube-scheduler
//! (with the reason, for the log):
//! - the node's labels meet the pod's `nodeSelector` and one of its required
//!   node-affinity terms (the kubelet rejects it otherwise);
//! - every `NoSchedule`/`NoExecute` taint of the node is tolerated (ours,
//!   `karpenter.sh/unregistered` and `nodewright.io/binding`, are lifted
//!   around the binding);
//! - the node has room left for its requests, DaemonSet pods and pods bound
//!   before it included;
//! - no host port it binds is taken on the node;
//! - its required anti-affinity finds no selected pod in the node's domain,
//!   no pod there has a required anti-affinity selecting it, and its
//!   required affinity finds a selected pod in the domain (or none anywhere
//!   and it selects itself);
//! - none of its claims waits for its first consumer: kube-scheduler must
//!   bind such a pod (it picks the volume's node as it binds);
//! - its volumes stay within the node's attach limits (its CSINode's count
//!   per CSI driver, the claims of the pods there counted once each).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::resources::Resources;
use crate::scheduling::SchedPod;
use crate::scheduling::labels;
use crate::scheduling::pod::{AffinityTerm, HostPort};
use crate::scheduling::taints::{Taint, first_untolerated};
use crate::scheduling::volumes::{self, Attachment, VolumeIndex, VolumeLimits};

use crate::model::claim::is_registration_taint;

/// What the pods already bound look like, per node, and the nodes.
#[derive(Debug, Default)]
pub struct Admission {
    nodes: BTreeMap<String, NodeState>,
    /// Every bound pod: its scheduling view and its node's name.
    placed: Vec<(SchedPod, String)>,
}

#[derive(Debug, Default)]
struct NodeState {
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    allocatable: Resources,
    requested: Resources,
    ports: Vec<HostPort>,
    volume_limits: VolumeLimits,
    /// The volumes its pods attach, sorted.
    volumes: Vec<Attachment>,
}

impl Admission {
    /// From the cluster's nodes and the pods bound to them (finished and
    /// terminating pods hold no room); `volumes` gives the nodes' attach
    /// limits and the bound pods' volumes (empty: no limit is checked).
    pub fn new(nodes: &[Node], bound: &[Pod], volumes: &VolumeIndex) -> Self {
        let mut a = Admission::default();
        for n in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|ts| ts.iter().filter_map(|t| Taint::from_k8s(t).ok()).collect())
                .unwrap_or_default();
            let allocatable = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|l| Resources::from_list(l).ok())
                .unwrap_or_default();
            let volume_limits = volumes.limits_of(&name);
            a.nodes.insert(
                name,
                NodeState {
                    labels: n.metadata.labels.clone().unwrap_or_default(),
                    taints,
                    allocatable,
                    volume_limits,
                    ..Default::default()
                },
            );
        }
        for p in bound {
            let Some(node) = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty())
            else {
                continue;
            };
            let finished = p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
            if finished || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Ok(sp) = SchedPod::from_pod(p) {
                a.place(super::plan::with_attachments(sp, p, volumes), &node);
            }
        }
        a
    }

    fn place(&mut self, sp: SchedPod, node: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.requested.add(&sp.requests);
            n.ports.extend(sp.host_ports.iter().copied());
            if !sp.attachments.is_empty() {
                n.volumes.extend(sp.attachments.iter().cloned());
                n.volumes.sort();
                n.volumes.dedup();
            }
        }
        self.placed.push((sp, node.to_owned()));
    }

    /// Checks a pod against a node; on success counts it there (the next
    /// pod checked sees it). `volumes` is needed only when the pod has
    /// PVC-backed volumes.
    pub fn admit(
        &mut self,
        pod: &Pod,
        node: &str,
        volumes: Option<&VolumeIndex>,
    ) -> Result<(), String> {
        let mut sp = SchedPod::from_pod(pod).map_err(|e| e.to_string())?;
        if let Some(index) = volumes {
            sp = super::plan::with_attachments(sp, pod, index);
        }
        let Some(n) = self.nodes.get(node) else {
            return Err(format!("node {node} is not in the cluster"));
        };
        if !sp.node_selector.satisfied_by(&n.labels) {
            return Err(format!(
                "the node's labels do not match its nodeSelector ({})",
                sp.node_selector.summary()
            ));
        }
        if !sp.required_terms.is_empty()
            && !sp.required_terms.iter().any(|t| t.satisfied_by(&n.labels))
        {
            return Err(
                "the node's labels match none of its required node-affinity terms".to_owned(),
            );
        }
        let taints: Vec<Taint> = n
            .taints
            .iter()
            .filter(|t| !is_registration_taint(&t.key))
            .cloned()
            .collect();
        if let Some(t) = first_untolerated(&taints, &sp.tolerations, true) {
            return Err(format!("it does not tolerate the node's taint {t}"));
        }
        if !sp.requests.fits_with(&n.requested, &n.allocatable) {
            return Err("the node has no room left for its requests".to_owned());
        }
        if let Some(p) = sp.host_ports.iter().find(|p| n.ports.contains(p)) {
            return Err(format!(
                "host port {}/{:?} is taken on the node",
                p.port, p.protocol
            ));
        }
        if !volumes::within_limits(&n.volume_limits, &n.volumes, &sp.attachments) {
            return Err(format!(
                "its volumes would pass the node's attach limits ({})",
                n.volume_limits
                    .iter()
                    .map(|(d, c)| format!("{d}: {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        self.inter_pod(&sp, node)?;
        if let Some(claim) = volumes.and_then(|v| volumes::awaits_first_consumer(pod, v)) {
            return Err(format!(
                "persistentvolumeclaim {claim} waits for its first consumer: kube-scheduler binds it"
            ));
        }
        self.place(sp, node);
        Ok(())
    }

    /// The node's domain for a topology key: the node itself for the
    /// hostname, else its label's value.
    fn domain<'a>(&'a self, node: &'a str, key: &str) -> Option<&'a str> {
        if key == labels::HOSTNAME {
            return Some(node);
        }
        self.nodes
            .get(node)
            .and_then(|n| n.labels.get(key))
            .map(String::as_str)
    }

    fn selects(term: &AffinityTerm, other: &SchedPod) -> bool {
        term.namespaces.contains(&other.pod.namespace) && term.selector.matches(&other.labels)
    }

    fn inter_pod(&self, sp: &SchedPod, node: &str) -> Result<(), String> {
        for term in sp.affinity.iter().filter(|t| t.weight.is_none()) {
            let here = self.domain(node, &term.key);
            let mut anywhere = false;
            let mut in_domain = false;
            for (other, other_node) in &self.placed {
                if !Self::selects(term, other) {
                    continue;
                }
                anywhere = true;
                if here.is_some() && self.domain(other_node, &term.key) == here {
                    in_domain = true;
                    break;
                }
            }
            if term.anti && in_domain {
                return Err(format!(
                    "its required pod anti-affinity on {} finds a selected pod in the node's domain",
                    term.key
                ));
            }
            let self_selects =
                term.namespaces.contains(&sp.pod.namespace) && term.selector.matches(&sp.labels);
            if !term.anti && !in_domain && (anywhere || !self_selects) {
                return Err(format!(
                    "its required pod affinity on {} finds no selected pod in the node's domain",
                    term.key
                ));
            }
        }
        for (other, other_node) in &self.placed {
            for term in other
                .affinity
                .iter()
                .filter(|t| t.anti && t.weight.is_none())
            {
                let here = self.domain(node, &term.key);
                if here.is_some()
                    && self.domain(other_node, &term.key) == here
                    && Self::selects(term, sp)
                {
                    return Err(format!(
                        "pod {} in the node's domain has a required anti-affinity on {} that selects it",
                        other.pod, term.key
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(name: &str, spec: Value, labels: Value) -> Pod {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": spec,
        }))
        .expect("pod")
    }

    fn node(name: &str, labels: Value, taints: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}},
        }))
        .expect("node")
    }

    fn bound(mut p: Pod, node: &str) -> Pod {
        p.spec.get_or_insert_with(Default::default).node_name = Some(node.to_owned());
        p
    }

    #[test]
    fn the_nodes_labels_must_meet_the_pods_selector_and_affinity() {
        let nodes = [node(
            "n",
            json!({"team": "a", "topology.kubernetes.io/zone": "z1"}),
            json!([]),
        )];
        let mut a = Admission::new(&nodes, &[], &VolumeIndex::default());
        let wants = |team: &str| pod("p", json!({"nodeSelector": {"team": team}}), json!({}));
        assert!(a.admit(&wants("a"), "n", None).is_ok());
        let e = a.admit(&wants("b"), "n", None).expect_err("wrong team");
        assert!(e.contains("nodeSelector"), "{e}");
        let affinity = pod(
            "q",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "team", "operator": "In", "values": ["c"]}]},
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}
            ]}}}}),
            json!({}),
        );
        assert!(
            a.admit(&affinity, "n", None).is_ok(),
            "the second term holds"
        );
    }

    #[test]
    fn taints_room_and_ports_are_checked_and_ours_ignored() {
        let nodes = [node(
            "n",
            json!({}),
            json!([
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                {"key": "gpu", "value": "true", "effect": "NoSchedule"}
            ]),
        )];
        let daemon = bound(
            pod(
                "ds",
                json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
                json!({}),
            ),
            "n",
        );
        let mut a = Admission::new(&nodes, &[daemon], &VolumeIndex::default());
        let plain = pod("plain", json!({}), json!({}));
        assert!(
            a.admit(&plain, "n", None)
                .expect_err("taint")
                .contains("gpu")
        );
        let tolerant = |name: &str, cpu: &str, port: Option<i32>| {
            let mut c = json!({"name": "c", "resources": {"requests": {"cpu": cpu}}});
            if let Some(p) = port {
                c["ports"] = json!([{"containerPort": 80, "hostPort": p}]);
            }
            pod(
                name,
                json!({"tolerations": [{"key": "gpu", "operator": "Exists"}], "containers": [c]}),
                json!({}),
            )
        };
        let e = a
            .admit(&tolerant("port", "100m", Some(8080)), "n", None)
            .expect_err("port");
        assert!(e.contains("host port 8080"), "{e}");
        assert!(a.admit(&tolerant("fits", "900m", None), "n", None).is_ok());
        let e = a
            .admit(&tolerant("full", "200m", None), "n", None)
            .expect_err("room");
        assert!(e.contains("no room"), "{e}");
    }

    #[test]
    fn required_pod_affinity_and_anti_affinity_hold_both_ways() {
        let zone = |z: &str| json!({"topology.kubernetes.io/zone": z});
        let nodes = [
            node("a1", zone("z1"), json!([])),
            node("b1", zone("z2"), json!([])),
        ];
        let web = bound(pod("web", json!({}), json!({"app": "web"})), "a1");
        let lonely = bound(
            pod(
                "lonely",
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "db"}}}
                ]}}}),
                json!({"app": "lonely"}),
            ),
            "b1",
        );
        let mut a = Admission::new(&nodes, &[web, lonely], &VolumeIndex::default());
        let follower = pod(
            "follower",
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "web"}}}
            ]}}}),
            json!({}),
        );
        assert!(
            a.admit(&follower, "b1", None)
                .expect_err("not with web")
                .contains("affinity")
        );
        assert!(a.admit(&follower, "a1", None).is_ok());
        let db = pod("db", json!({}), json!({"app": "db"}));
        let e = a.admit(&db, "b1", None).expect_err("repelled");
        assert!(e.contains("default/lonely"), "{e}");
        assert!(a.admit(&db, "a1", None).is_ok());
    }

    /// A bound claim of a driver whose CSINode count on the node is used
    /// up is not bound there; a claim already attached there is.
    #[test]
    fn volumes_past_the_nodes_attach_limit_are_left_to_kube_scheduler() {
        let claim = |name: &str| -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": format!("pv-{name}")},
            }))
            .expect("claim")
        };
        let volume = |name: &str| -> k8s_openapi::api::core::v1::PersistentVolume {
            serde_json::from_value(json!({
                "metadata": {"name": format!("pv-{name}")},
                "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": name}},
            }))
            .expect("volume")
        };
        let csi: k8s_openapi::api::storage::v1::CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i", "allocatable": {"count": 1}}]},
        }))
        .expect("csinode");
        let index = VolumeIndex::new(
            vec![claim("a"), claim("b")],
            vec![volume("a"), volume("b")],
            Vec::new(),
        )
        .with_csi_nodes(vec![csi]);
        let uses = |name: &str, c: &str| {
            pod(
                name,
                json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": c}}]}),
                json!({}),
            )
        };
        let nodes = [node("n", json!({}), json!([]))];
        let mut a = Admission::new(&nodes, &[bound(uses("first", "a"), "n")], &index);
        let e = a
            .admit(&uses("second", "b"), "n", Some(&index))
            .expect_err("over the limit");
        assert!(e.contains("attach limits (ebs.csi.aws.com: 1)"), "{e}");
        a.admit(&uses("reader", "a"), "n", Some(&index))
            .expect("the same claim attaches once");
    }
}
