//! A Karpenter beside nodewright on the real API server: Karpenter's CRDs
//! (our own minimal definitions, `tests/fixtures/karpenter-crds.yaml`),
//! its NodePools and EC2NodeClasses, and nodes it launched — an instance in
//! the emulated EC2 with Karpenter's tags (not ours), its NodeClaim, and
//! its Node with Karpenter's labels, taints and termination finalizer,
//! played by kwok like every other. [`play_termination`] plays what
//! Karpenter's termination controller does with a deleted Node of its own:
//! taint it, evict its pods through the Eviction API, terminate the
//! instance, delete the NodeClaim, then let the Node go.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams,
};
use nodewright::cloud::KubeletConfig;
use nodewright::model::InstanceState;
use nodewright::ports::Cloud;
use nodewright::scheduling::taints::{Effect, Taint};
use nodewright::sim::cloud::SIM_CLUSTER;
use nodewright::sim::{ClusterDriver, SimCluster};
use serde_json::{Value, json};

use crate::kube_harness::repo_root;
use crate::sim::KubeSim;

/// Karpenter's termination finalizer on its Nodes and NodeClaims.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// The taint Karpenter puts on a node it drains.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

fn nodeclaims(admin: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        admin.clone(),
        &resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
    )
}

/// Installs the CRDs of the fixture and waits until each is Established
/// (polled every 100 ms, at most 300 times). Installing them again is fine.
pub async fn install_crds(admin: &kube::Client) {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/karpenter-crds.yaml"))
        .expect("the CRD fixture");
    let api: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let mut names = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let crd: Value = serde::Deserialize::deserialize(doc).expect("CRD YAML");
        let name = crd["metadata"]["name"].as_str().expect("name").to_owned();
        api.patch(
            &name,
            &PatchParams::apply("nodewright-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        names.push(name);
    }
    for name in names {
        for attempt in 1.. {
            let got = api.get(&name).await.expect("get CRD");
            let established = got
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            assert!(attempt < 300, "{name} not established");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Creates (or updates) one of Karpenter's cluster-scoped objects as
/// Karpenter would, retrying for a while when its kind is not served yet.
pub async fn apply(admin: &kube::Client, object: &Value) {
    let (group, version) = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("group/version");
    let kind = object["kind"].as_str().expect("kind");
    let plural = match kind {
        "NodePool" => "nodepools",
        "NodeClaim" => "nodeclaims",
        "EC2NodeClass" => "ec2nodeclasses",
        other => panic!("not one of Karpenter's kinds here: {other}"),
    };
    let api: Api<DynamicObject> =
        Api::all_with(admin.clone(), &resource(group, version, kind, plural));
    let name = object["metadata"]["name"].as_str().expect("name");
    for attempt in 1.. {
        match api
            .patch(
                name,
                &PatchParams::apply("karpenter").force(),
                &Patch::Apply(object),
            )
            .await
        {
            Ok(_) => return,
            Err(e) => {
                assert!(attempt < 100, "apply {kind} {name}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One node Karpenter launched: the instance, its NodeClaim and its Node.
#[derive(Debug, Clone)]
pub struct KarpenterNode {
    pub instance: String,
    pub nodeclaim: String,
    pub node: String,
}

/// Karpenter launches a node for its NodePool `pool`: an on-demand
/// `instance_type` in the emulated EC2 tagged as Karpenter tags its
/// instances (never `nodewright.io/cluster`), a NodeClaim holding
/// Karpenter's finalizer, and the Node its kubelet registers — Karpenter's
/// labels, the pool's `taints`, Karpenter's termination finalizer — which
/// kwok then reports Ready.
pub async fn launch(
    sim: &KubeSim,
    pool: &str,
    instance_type: &str,
    taints: &[(&str, &str)],
) -> KarpenterNode {
    let admin = sim.cluster.admin().clone();
    let cloud = sim.sim_cloud.clone().expect("the in-memory EC2");
    let catalog = sim.cloud.catalog().await.expect("catalog");
    let zone = catalog
        .offerings
        .iter()
        .find(|o| o.instance_type == instance_type && o.capacity_type == "on-demand")
        .map(|o| o.zone.clone())
        .expect("an on-demand offering");
    let suffix: String = format!("{:05x}", rand_suffix());
    let nodeclaim = format!("{pool}-k{suffix}");
    let tags: BTreeMap<String, String> = [
        (
            format!("kubernetes.io/cluster/{SIM_CLUSTER}"),
            "owned".to_owned(),
        ),
        ("karpenter.sh/nodepool".to_owned(), pool.to_owned()),
        (
            "karpenter.k8s.aws/ec2nodeclass".to_owned(),
            "default".to_owned(),
        ),
        ("eks:eks-cluster-name".to_owned(), SIM_CLUSTER.to_owned()),
        ("karpenter.sh/nodeclaim".to_owned(), nodeclaim.clone()),
        ("Name".to_owned(), format!("{pool}/{nodeclaim}")),
    ]
    .into_iter()
    .collect();
    let instance = cloud.add_neighbour(instance_type, &zone, "on-demand", tags);
    let node = format!("ip-k{suffix}.ec2.internal");
    let info = catalog
        .instance_types
        .iter()
        .find(|t| t.name == instance_type)
        .expect("instance type");
    let kubelet = KubeletConfig::default();
    let capacity = info.capacity(&kubelet);
    let allocatable = capacity.saturating_sub(&info.overhead(&kubelet));
    apply(
        &admin,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": nodeclaim,
                "labels": {"karpenter.sh/nodepool": pool},
                "finalizers": [TERMINATION_FINALIZER],
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]}],
                "taints": taints.iter().map(|(k, v)| json!({"key": k, "value": v, "effect": "NoSchedule"})).collect::<Vec<_>>(),
            },
        }),
    )
    .await;
    let labels: BTreeMap<String, String> = [
        ("karpenter.sh/nodepool", pool),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("karpenter.sh/registered", "true"),
        ("karpenter.sh/initialized", "true"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("node.kubernetes.io/instance-type", instance_type),
        ("topology.kubernetes.io/zone", zone.as_str()),
        ("topology.kubernetes.io/region", catalog.region.as_str()),
        ("kubernetes.io/hostname", node.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", info.arch.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let taints: Vec<Taint> = taints
        .iter()
        .map(|(k, v)| Taint {
            key: (*k).to_owned(),
            value: (*v).to_owned(),
            effect: Effect::NoSchedule,
        })
        .collect();
    let mut object = SimCluster::ready_node(
        &node,
        labels,
        taints,
        &instance.provider_id,
        &capacity,
        &allocatable,
        sim.now(),
    );
    object.metadata.finalizers = Some(vec![TERMINATION_FINALIZER.to_owned()]);
    sim.cluster
        .register_node(object)
        .await
        .expect("Karpenter's Node registered");
    KarpenterNode {
        instance: instance.id,
        nodeclaim,
        node,
    }
}

fn rand_suffix() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ NEXT.fetch_add(0x9e37, Ordering::Relaxed)) & 0xf_ffff
}

/// What [`play_termination`] saw and did in one round.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Karpenter's Nodes being deleted (deletionTimestamp set), by name.
    pub deleting: Vec<String>,
    /// Nodes whose drain finished this round: instance terminated, Node gone.
    pub finished: Vec<String>,
}

fn has_finalizer(finalizers: Option<&Vec<String>>) -> bool {
    finalizers
        .into_iter()
        .flatten()
        .any(|f| f == TERMINATION_FINALIZER)
}

/// One round of Karpenter's termination controller for every deleted Node
/// holding its finalizer: taint it `karpenter.sh/disrupted:NoSchedule`,
/// evict its pods (DaemonSet pods stay; a PodDisruptionBudget's refusal
/// waits for the next round), and once no other pod is left terminate its
/// instance, delete its NodeClaim and lift the finalizer. `launched` maps
/// Node names to what [`launch`] made.
pub async fn play_termination(sim: &KubeSim, launched: &[KarpenterNode]) -> Round {
    let admin = sim.cluster.admin().clone();
    let cloud = sim.sim_cloud.clone().expect("the in-memory EC2");
    let nodes: Api<Node> = Api::all(admin.clone());
    let mut round = Round::default();
    let all = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .items;
    for n in all {
        let name = n.metadata.name.clone().unwrap_or_default();
        if n.metadata.deletion_timestamp.is_none() || !has_finalizer(n.metadata.finalizers.as_ref())
        {
            continue;
        }
        round.deleting.push(name.clone());
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT));
        if !tainted {
            let mut taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: DISRUPTED_TAINT.to_owned(),
                effect: "NoSchedule".to_owned(),
                ..Default::default()
            });
            let _ = nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"taints": taints}})),
                )
                .await;
        }
        let pods: Api<Pod> = Api::all(admin.clone());
        let on_node: Vec<Pod> = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await
            .expect("list pods")
            .items
            .into_iter()
            .filter(|p| {
                !p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "DaemonSet")
            })
            .collect();
        for p in &on_node {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
            // 429: a budget holds it; the next round tries again.
            let _ = api
                .evict(
                    p.metadata.name.as_deref().unwrap_or_default(),
                    &EvictParams::default(),
                )
                .await;
        }
        if !on_node.is_empty() {
            continue;
        }
        let made = launched.iter().find(|k| k.node == name);
        if let Some(k) = made {
            cloud.external_state_change(&k.instance, InstanceState::ShuttingDown);
            let claims = nodeclaims(&admin);
            let _ = claims
                .patch(
                    &k.nodeclaim,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = claims.delete(&k.nodeclaim, &DeleteParams::default()).await;
        }
        let _ = nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
            )
            .await;
        round.finished.push(name);
    }
    round
}

/// Removes what a test left of Karpenter's: every NodeClaim and the
/// finalizers on Nodes (nothing else would ever lift them).
pub async fn clean_up(admin: &kube::Client) {
    let claims = nodeclaims(admin);
    if let Ok(list) = claims.list(&ListParams::default()).await {
        for c in list.items {
            let name = c.metadata.name.clone().unwrap_or_default();
            let _ = claims
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = claims.delete(&name, &DeleteParams::default()).await;
        }
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    if let Ok(list) = nodes.list(&ListParams::default()).await {
        for n in list.items {
            if has_finalizer(n.metadata.finalizers.as_ref()) {
                let _ = nodes
                    .patch(
                        n.metadata.name.as_deref().unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
    }
}
