//! Karpenter and nodewright in one cluster, beside the real control plane:
//! Karpenter's CRDs, NodePools and NodeClaims, and nodes Karpenter launched
//! (its tags on the instance, its labels, taints and termination finalizer
//! on the Node), as a cluster migrating from Karpenter has them
//! (`shared/docs/migration.md`). Karpenter's termination controller is
//! played by the harness (`nodewright_tests::karpenter::play_termination`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::model::SignedDuration;
use nodewright::ports::Store;
use nodewright::sim::ClusterDriver;
use nodewright::sim::scenario::{self, ActionKind};
use nodewright_tests::karpenter::{self, KarpenterNode};
use nodewright_tests::sim::{KubeSim, control_plane_settings, on_control_plane};
use serde_json::json;

use crate::cluster::{events_since, init_logs, is_ready, node_of, phase, scenario, taint_keys};

/// Karpenter's NodePool and EC2NodeClass objects in the cluster (what
/// Karpenter serves; nodewright's configuration is in its own table).
async fn karpenter_objects(sim: &KubeSim, pool: &str, taints: serde_json::Value, limits: &str) {
    let admin = sim.cluster.admin();
    karpenter::apply(
        admin,
        &json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]
            }
        }),
    )
    .await;
    karpenter::apply(
        admin,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": pool},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                    "taints": taints
                }},
                "limits": {"cpu": limits}
            }
        }),
    )
    .await;
}

/// CPU (millicores) free on nodewright's Ready nodes of pool `web` that
/// are not being deleted: their allocatable less their pods' requests.
fn web_room(nodes: &[Node], pods: &[Pod], claims: &[nodewright::model::Claim]) -> i64 {
    let cpu = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| nodewright::resources::parse_milli(&q.0).ok())
            .unwrap_or(0)
    };
    nodes
        .iter()
        .filter(|n| is_ready(n) && n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            claims
                .iter()
                .any(|c| c.pool == "web" && c.node_name.is_some() && c.node_name == n.metadata.name)
        })
        .map(|n| {
            let allocatable = cpu(n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get("cpu")));
            let used: i64 = pods
                .iter()
                .filter(|p| node_of(p) == n.metadata.name.as_deref())
                .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
                .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
                .map(|c| {
                    cpu(c
                        .resources
                        .as_ref()
                        .and_then(|r| r.requests.as_ref())
                        .and_then(|r| r.get("cpu")))
                })
                .sum();
            allocatable - used
        })
        .sum()
}

/// A cluster beside the control plane with Karpenter's CRDs and nothing of
/// an earlier test's Karpenter left.
async fn cluster_with_karpenter(region: &str) -> KubeSim {
    let sim = on_control_plane(region, control_plane_settings()).await;
    karpenter::install_crds(sim.cluster.admin()).await;
    karpenter::clean_up(sim.cluster.admin()).await;
    sim
}

fn node_named<'a>(nodes: &'a [Node], name: &str) -> Option<&'a Node> {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
}

/// Runs the simulation (two seconds at a time) until `done` holds, at
/// most `attempts` times.
async fn wait_for<F, Fut>(sim: &mut KubeSim, attempts: usize, what: &str, mut done: F)
where
    F: FnMut(Vec<Node>, Vec<Pod>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..attempts {
        let (nodes, pods) = (sim.cluster.all_nodes().await, sim.cluster.all_pods().await);
        if done(nodes, pods).await {
            return;
        }
        sim.run_for(SignedDuration::from_secs(2)).await;
    }
    panic!("{what}: not after {attempts} rounds of 2 s");
}

/// Everything nodewright must leave alone on Karpenter's node: it is
/// there, not deleted, not cordoned, no taint but its own (and the node
/// lifecycle controller's), and `pod` (by uid) still runs on it.
fn untouched(nodes: &[Node], pods: &[Pod], k: &KarpenterNode, pod_uid: &str, taints: &[&str]) {
    let node = node_named(nodes, &k.node).unwrap_or_else(|| panic!("{} deleted", k.node));
    assert!(
        node.metadata.deletion_timestamp.is_none(),
        "{} deleted",
        k.node
    );
    let spec = node.spec.clone().unwrap_or_default();
    assert_eq!(spec.unschedulable, None, "{} cordoned", k.node);
    let extra: Vec<String> = taint_keys(node)
        .into_iter()
        .filter(|t| !t.starts_with("node.kubernetes.io/") && !taints.contains(&t.as_str()))
        .collect();
    assert!(extra.is_empty(), "{} tainted: {extra:?}", k.node);
    let pod = pods
        .iter()
        .find(|p| p.metadata.uid.as_deref() == Some(pod_uid))
        .unwrap_or_else(|| panic!("the pod on {} was evicted or deleted", k.node));
    assert!(pod.metadata.deletion_timestamp.is_none(), "{pod:?}");
    assert_eq!(node_of(pod), Some(k.node.as_str()));
    assert_eq!(phase(pod), "Running");
}

/// A Karpenter node (NodePool `legacy`, tainted `team=legacy`, one small
/// pod on it: underutilized, a consolidation candidate were it ours) shares
/// the cluster with nodewright's pool `default` running the consolidation
/// walkthrough (`consolidation.yaml`). nodewright provisions and
/// consolidates its own nodes; Karpenter's node is never drained, cordoned,
/// tainted, deleted, consolidated, garbage collected (its instance keeps
/// running, no claim adopts it) nor bound to by nodewright, and its pod is
/// never pending, evicted nor named in nodewright's Events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpenters_nodes_are_never_touched_beside_the_real_control_plane() {
    init_logs();
    let s = scenario("consolidation.yaml");
    let mut sim = cluster_with_karpenter(&s.region).await;
    let since = sim.cluster.since();
    karpenter_objects(
        &sim,
        "legacy",
        json!([{"key": "team", "value": "legacy", "effect": "NoSchedule"}]),
        "100",
    )
    .await;
    let k = karpenter::launch(&sim, "legacy", "m5.xlarge", &[("team", "legacy")]).await;
    sim.cluster
        .apply(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "legacy", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "legacy"}},
                "template": {"metadata": {"labels": {"app": "legacy"}}, "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "legacy"},
                    "tolerations": [{"key": "team", "operator": "Equal", "value": "legacy", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
        }))
        .await
        .expect("legacy deployment");
    let node = k.node.clone();
    wait_for(
        &mut sim,
        60,
        "the legacy pod runs on Karpenter's node",
        |_, pods| {
            let node = node.clone();
            async move {
                pods.iter()
                    .any(|p| node_of(p) == Some(node.as_str()) && phase(p) == "Running")
            }
        },
    )
    .await;
    let legacy_uid = sim
        .cluster
        .all_pods()
        .await
        .into_iter()
        .find(|p| node_of(p) == Some(k.node.as_str()))
        .and_then(|p| p.metadata.uid)
        .expect("the legacy pod's uid");

    // nodewright's walkthrough, its expectations counting Karpenter's node
    // and pod as well.
    let mut s = s;
    let bump = |e: &mut scenario::Expect| {
        e.nodes = e.nodes.map(|n| n + 1);
        if let Some(p) = e.pods.as_mut() {
            p.bound = p.bound.map(|b| b + 1);
        }
    };
    bump(&mut s.expect);
    for a in &mut s.actions {
        if let ActionKind::Expect(e) = &mut a.what {
            bump(e);
        }
    }
    scenario::load(&mut sim, &s).await.expect("loads");
    // Karpenter's own disruption at work on its node: its taint, which
    // nodewright lifts from a node of its own that no removal owns, stays.
    {
        use k8s_openapi::api::core::v1::Node;
        use kube::api::{Api, Patch, PatchParams};
        let api: Api<Node> = Api::all(sim.cluster.admin().clone());
        let patch = json!({"spec": {"taints": [
            {"key": "team", "value": "legacy", "effect": "NoSchedule"},
            {"key": karpenter::DISRUPTED_TAINT, "effect": "NoSchedule"}
        ]}});
        api.patch(&k.node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("Karpenter taints its node");
    }
    let start = sim.now();
    let end = start + scenario::parse_duration(&s.run).expect("run");
    let mut actions = s.clone();
    actions.run = "61s".to_owned();
    scenario::run(&mut sim, &actions).await.expect("runs");
    let mut held = 0;
    while sim.now() < end && held < 3 {
        sim.run_for(SignedDuration::from_secs(5)).await;
        let (nodes, pods) = (sim.cluster.all_nodes().await, sim.cluster.all_pods().await);
        untouched(
            &nodes,
            &pods,
            &k,
            &legacy_uid,
            &["team", karpenter::DISRUPTED_TAINT],
        );
        if scenario::check_now(&sim, &s.expect).await.is_empty() {
            held += 1;
        } else {
            held = 0;
        }
    }
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let (nodes, pods) = (sim.cluster.all_nodes().await, sim.cluster.all_pods().await);
    untouched(
        &nodes,
        &pods,
        &k,
        &legacy_uid,
        &["team", karpenter::DISRUPTED_TAINT],
    );
    let kept = node_named(&nodes, &k.node)
        .map(taint_keys)
        .unwrap_or_default();
    assert!(
        kept.iter().any(|t| t == karpenter::DISRUPTED_TAINT),
        "{kept:?}"
    );
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:#?}");

    // Its instance runs on, is no claim's, and nodewright terminated
    // nothing that is not its own.
    let cloud = sim.sim_cloud.clone().expect("the in-memory EC2");
    let theirs = cloud
        .neighbours()
        .into_iter()
        .find(|i| i.instance.id == k.instance)
        .expect("Karpenter's instance");
    assert!(!theirs.instance.state.is_gone_or_going(), "{theirs:?}");
    assert!(
        cloud.foreign_terminations().is_empty(),
        "{:?}",
        cloud.foreign_terminations()
    );
    let claimed: BTreeSet<String> = sim
        .store
        .claims()
        .await
        .expect("claims")
        .iter()
        .filter_map(|c| c.instance_id().map(str::to_owned))
        .collect();
    assert!(!claimed.contains(&k.instance), "adopted: {claimed:?}");
    // nodewright said nothing about Karpenter's node nor its pod.
    let pod_name = pods
        .iter()
        .find(|p| p.metadata.uid.as_deref() == Some(legacy_uid.as_str()))
        .and_then(|p| p.metadata.name.clone())
        .unwrap_or_default();
    let about: Vec<_> = events_since(sim.cluster.admin(), since)
        .await
        .into_iter()
        .filter(|e| e.by == nodewright::kube::CONTROLLER_NAME)
        .filter(|e| e.name == k.node || e.name == pod_name)
        .collect();
    assert!(about.is_empty(), "{about:#?}");
    karpenter::clean_up(sim.cluster.admin()).await;
}

/// `nodewright config import --adopt replace`: pool `web` is handed over
/// (Karpenter's NodePool at limits 0, nodewright's `web` annotated
/// `nodewright.io/karpenter-nodes: replace`, budget one node). Replacement
/// first, as Karpenter's drift: for each of Karpenter's two nodes of `web`
/// in turn nodewright launches room for its pods, and only once that node
/// is Ready deletes Karpenter's — Karpenter (played) drains it through the
/// Eviction API under the web pods' budget and terminates its instance.
/// No web pod is ever pending without a Ready node of nodewright's with
/// room for it. A Karpenter node of another pool (`legacy`, not handed
/// over) is never touched, and nodewright terminates no instance of
/// Karpenter's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_handed_over_with_replace_loses_karpenters_nodes_one_at_a_time_beside_the_real_control_plane()
 {
    init_logs();
    let s = scenario("handover.yaml");
    let mut sim = cluster_with_karpenter(&s.region).await;
    karpenter_objects(&sim, "web", json!([]), "0").await;
    karpenter_objects(
        &sim,
        "legacy",
        json!([{"key": "team", "value": "legacy", "effect": "NoSchedule"}]),
        "100",
    )
    .await;
    let web = [
        karpenter::launch(&sim, "web", "m5.xlarge", &[]).await,
        karpenter::launch(&sim, "web", "m5.xlarge", &[]).await,
    ];
    let legacy = karpenter::launch(&sim, "legacy", "m5.xlarge", &[("team", "legacy")]).await;
    let names: Vec<String> = web
        .iter()
        .chain([&legacy])
        .map(|k| k.node.clone())
        .collect();
    wait_for(&mut sim, 60, "Karpenter's nodes are Ready", |nodes, _| {
        let names = names.clone();
        async move {
            names.iter().all(|n| {
                node_named(&nodes, n).is_some_and(|n| {
                    is_ready(n)
                        && !taint_keys(n)
                            .iter()
                            .any(|t| t.starts_with("node.kubernetes.io/"))
                })
            })
        }
    })
    .await;
    // The web pods first land on Karpenter's nodes (kube-scheduler), then
    // nodewright's configuration arrives with the handover.
    let (config, workload): (Vec<_>, Vec<_>) = s.objects.iter().cloned().partition(|o| {
        o["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("karpenter"))
    });
    for o in &workload {
        sim.cluster.apply(o).await.expect("workload");
    }
    sim.cluster
        .apply(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "legacy", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "legacy"}},
                "template": {"metadata": {"labels": {"app": "legacy"}}, "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "legacy"},
                    "tolerations": [{"key": "team", "operator": "Equal", "value": "legacy", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}
        }))
        .await
        .expect("legacy deployment");
    let on_karpenter: Vec<String> = web.iter().map(|k| k.node.clone()).collect();
    wait_for(
        &mut sim,
        60,
        "the web pods run on Karpenter's nodes",
        |_, pods| {
            let on_karpenter = on_karpenter.clone();
            async move {
                let web: Vec<&Pod> = pods
                    .iter()
                    .filter(|p| crate::cluster::app(p) == "web")
                    .collect();
                web.len() == 4
                    && web.iter().all(|p| {
                        phase(p) == "Running"
                            && node_of(p).is_some_and(|n| on_karpenter.iter().any(|k| k == n))
                    })
                    && pods
                        .iter()
                        .any(|p| crate::cluster::app(p) == "legacy" && phase(p) == "Running")
            }
        },
    )
    .await;
    let legacy_uid = sim
        .cluster
        .all_pods()
        .await
        .into_iter()
        .find(|p| node_of(p) == Some(legacy.node.as_str()))
        .and_then(|p| p.metadata.uid)
        .expect("the legacy pod's uid");
    let mut handed = s.clone();
    handed.objects = config;
    scenario::load(&mut sim, &handed)
        .await
        .expect("nodewright's configuration");

    let launched: Vec<KarpenterNode> = web.iter().chain([&legacy]).cloned().collect();
    let mut most_at_once = 0;
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut done = false;
    // Each round is two seconds; 200 rounds are far more than the
    // handover needs (two drains and two launches).
    for _ in 0..200 {
        sim.run_for(SignedDuration::from_secs(2)).await;
        let round = karpenter::play_termination(&sim, &launched).await;
        most_at_once = most_at_once.max(round.deleting.len());
        let (nodes, pods) = (sim.cluster.all_nodes().await, sim.cluster.all_pods().await);
        untouched(&nodes, &pods, &legacy, &legacy_uid, &["team"]);
        // Replacement first: while a node of Karpenter's is being deleted,
        // or a web pod waits for a node, nodewright's room is there.
        let claims = sim.store.claims().await.expect("claims");
        let room = web_room(&nodes, &pods, &claims);
        let fresh: Vec<&String> = round
            .deleting
            .iter()
            .filter(|n| !deleted.contains(*n))
            .collect();
        if !fresh.is_empty() {
            // The pods still on them (this round's eviction may have moved one already).
            let left = pods
                .iter()
                .filter(|p| {
                    crate::cluster::app(p) == "web" && p.metadata.deletion_timestamp.is_none()
                })
                .filter(|p| node_of(p).is_some_and(|n| fresh.iter().any(|f| f.as_str() == n)))
                .count() as i64;
            assert!(
                room >= 1500 * left,
                "{fresh:?} deleted before nodewright's replacement was Ready with room for its {left} pod(s) ({room}m free): {nodes:#?}"
            );
        }
        if !fresh.is_empty() {
            // `nodewright status` shows it: being drained by Karpenter.
            let config = nodewright::handlers::config::load(&sim.store)
                .await
                .expect("config");
            let commands = sim.store.commands().await.expect("commands");
            let shown = nodewright::disruption::handover::status(
                &config.pools,
                &nodes,
                &claims,
                &commands,
                nodewright::model::Timestamp::now(),
            );
            let web = shown
                .iter()
                .find(|h| h.pool == "web")
                .expect("web's handover shown");
            for f in &fresh {
                assert!(
                    web.in_progress
                        .iter()
                        .any(|p| p.starts_with(f.as_str()) && p.contains("Karpenter draining")),
                    "{web:?}"
                );
            }
        }
        deleted.extend(round.deleting.iter().cloned());
        let pending: Vec<&Pod> = pods
            .iter()
            .filter(|p| crate::cluster::app(p) == "web" && node_of(p).is_none())
            .collect();
        if !pending.is_empty() {
            assert!(
                room >= 1500,
                "web pods pending with no Ready node of nodewright's that has room ({room}m free): {pending:#?}"
            );
        }
        let web_gone = web.iter().all(|k| node_named(&nodes, &k.node).is_none());
        let web_pods: Vec<&Pod> = pods
            .iter()
            .filter(|p| crate::cluster::app(p) == "web")
            .collect();
        if web_gone
            && web_pods.len() == 4
            && web_pods
                .iter()
                .all(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none())
        {
            done = true;
            break;
        }
    }
    assert!(
        done,
        "the handover did not finish: {:#?}",
        sim.cluster.all_nodes().await
    );
    assert_eq!(
        deleted,
        web.iter().map(|k| k.node.clone()).collect::<BTreeSet<_>>(),
        "both of web's Karpenter nodes were deleted, nothing else"
    );
    assert_eq!(
        most_at_once, 1,
        "never more than the budget's one node at a time"
    );
    // The web pods run on nodewright's nodes now (its claims').
    let claims = sim.store.claims().await.expect("claims");
    let ours: BTreeSet<String> = claims.iter().filter_map(|c| c.node_name.clone()).collect();
    let pods = sim.cluster.all_pods().await;
    for p in pods.iter().filter(|p| crate::cluster::app(p) == "web") {
        assert!(
            node_of(p).is_some_and(|n| ours.contains(n)),
            "{p:?} not on a node of nodewright's ({ours:?})"
        );
    }
    assert!(claims.iter().all(|c| c.pool == "web"), "{claims:?}");
    let cloud = sim.sim_cloud.clone().expect("the in-memory EC2");
    assert!(
        cloud.foreign_terminations().is_empty(),
        "{:?}",
        cloud.foreign_terminations()
    );
    let events = events_since(sim.cluster.admin(), sim.cluster.since()).await;
    let handed_over: BTreeSet<String> = events
        .iter()
        .filter(|e| e.by == nodewright::kube::CONTROLLER_NAME && e.reason == "HandedOver")
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(handed_over, deleted, "{events:#?}");
    karpenter::clean_up(sim.cluster.admin()).await;
}
