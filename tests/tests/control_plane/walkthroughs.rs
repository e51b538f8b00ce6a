//! The source's walkthroughs beside the real control plane: provision,
//! upgrade (drift and expiry under a PodDisruptionBudget), consolidation,
//! spot interruption.

use nodewright::ports::Store;
use nodewright::sim::ClusterDriver;
use nodewright_tests::sim::{control_plane_settings, run_on_control_plane};

use crate::cluster::{
    app, events_since, init_logs, is_ready, node_of, phase, scenario, taint_keys,
};

/// Provision: kube-scheduler's `Unschedulable` is what starts a launch; the
/// Node the registrar creates is made Ready by kwok and untainted by the
/// node lifecycle controller; the pods run. Pods that fit the room left
/// are bound by kube-scheduler with no launch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_walkthrough_beside_the_real_control_plane() {
    init_logs();
    let (sim, failures) =
        run_on_control_plane(&scenario("provision.yaml"), control_plane_settings()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let nodes = sim.cluster.all_nodes().await;
    let node = &nodes[0];
    assert!(is_ready(node), "kwok reports the node Ready: {node:#?}");
    let taints = taint_keys(node);
    assert!(
        taints.is_empty(),
        "the not-ready taint lifted by the node lifecycle controller, ours by nodewright: {taints:?}"
    );
    let pods = sim.cluster.all_pods().await;
    assert!(
        pods.iter().all(|p| phase(p) == "Running"),
        "kwok runs every bound pod: {:?}",
        pods.iter().map(|p| (app(p), phase(p))).collect::<Vec<_>>()
    );
    let events = events_since(sim.cluster.admin(), sim.cluster.since()).await;
    // kube-scheduler found no room for inflate before the launch…
    assert!(
        events.iter().any(|e| e.by == "default-scheduler"
            && e.reason == "FailedScheduling"
            && e.name.starts_with("inflate-")),
        "{events:#?}"
    );
    // … and bound the small pods to the existing node itself.
    let small: Vec<_> = pods.iter().filter(|p| app(p) == "small").collect();
    assert_eq!(small.len(), 2);
    for p in small {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        assert_eq!(node_of(p), node.metadata.name.as_deref());
        assert!(
            events
                .iter()
                .any(|e| e.by == "default-scheduler" && e.reason == "Scheduled" && e.name == name),
            "{name} was bound by kube-scheduler: {events:#?}"
        );
        assert!(
            !events
                .iter()
                .any(|e| e.reason == "FailedScheduling" && e.name == name),
            "{name} fit at once: {events:#?}"
        );
    }
}

/// Upgrade: drift, then expiry, each node replaced before its drain, and
/// the drain paced by the real disruption controller's budget status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_walkthrough_beside_the_real_control_plane() {
    init_logs();
    let (sim, failures) =
        run_on_control_plane(&scenario("upgrade.yaml"), control_plane_settings()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let events = events_since(sim.cluster.admin(), sim.cluster.since()).await;
    // Every pod moved twice (drift, then expiry), each eviction once the
    // real disruption controller's status allowed it.
    let evicted = events
        .iter()
        .filter(|e| e.by == "nodewright" && e.reason == "Evicted" && e.name.starts_with("inflate-"))
        .count();
    assert_eq!(evicted, 6, "{events:#?}");
    let pods = sim.cluster.all_pods().await;
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:#?}");
}

/// Consolidation: the least used node goes, its pods re-created by the
/// ReplicaSet controller and bound by kube-scheduler on the room left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_walkthrough_beside_the_real_control_plane() {
    init_logs();
    let (sim, failures) =
        run_on_control_plane(&scenario("consolidation.yaml"), control_plane_settings()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let pods = sim.cluster.all_pods().await;
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:#?}");
}

/// Spot interruption: replaced before the drain, the budget held by the
/// API server's evictions, the other pool untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_interruption_walkthrough_beside_the_real_control_plane() {
    init_logs();
    let (sim, failures) = run_on_control_plane(
        &scenario("spot-interruption.yaml"),
        control_plane_settings(),
    )
    .await;
    assert!(failures.is_empty(), "{failures:#?}");
    let pods = sim.cluster.all_pods().await;
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:#?}");
    // The interrupted instance's claim is released: the replacement's and
    // the steady pool's are what is left.
    let claims = sim.store.claims().await.expect("claims");
    assert_eq!(claims.len(), 2, "{claims:#?}");
}
