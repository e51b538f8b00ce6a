//! The provisioning scenarios with the real Kubernetes adapter against the
//! real kube-apiserver (RBAC on, the handlers acting as the restricted
//! function identity) and the in-memory cloud and store: the same scenario
//! files and expectations as on the in-memory cluster (`provisioning.rs`).
//! Pods, bindings, the registration taint, node deletion and Events all go
//! through the API server; the cluster's own controllers are played through
//! the API too (`tests/src/kube_world.rs`).
//!
//! The tests take the server one at a time (the provisioner looks at every
//! pending pod in the cluster).

use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::handlers::state_change::StateChangeOutcome;
use nodewright::model::{InstanceState, SignedDuration};
use nodewright::scheduling::labels;
use nodewright::sim::scenario::{self, WALKTHROUGH_1};
use nodewright::sim::{ClusterDriver, SimSettings};
use nodewright_tests::sim::{on_apiserver, run_on_apiserver, scenario_file};

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn label<'a>(n: &'a Node, key: &str) -> &'a str {
    n.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthrough_one_binds_its_pods_through_the_api_server() {
    init_logs();
    let s = scenario::parse(WALKTHROUGH_1).expect("built-in scenario parses");
    let (sim, failures) = run_on_apiserver(&s, SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let nodes = sim.cluster.all_nodes().await;
    assert_eq!(nodes.len(), 1);
    let node = &nodes[0];
    assert_eq!(label(node, labels::INSTANCE_TYPE), "r6gd.xlarge");
    assert_eq!(label(node, labels::ZONE), "ap-south-1a");
    assert_eq!(label(node, labels::CAPACITY_TYPE), "on-demand");
    // The adapter lifted the registration taint with its conditional patch.
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints.iter().all(|t| t.key != "karpenter.sh/unregistered"),
        "{taints:?}"
    );
    // The three pods are bound to it in the API server, and running.
    let name = node.metadata.name.as_deref();
    let pods = sim.cluster.all_pods().await;
    let on_node: Vec<&Pod> = pods.iter().filter(|p| node_of(p) == name).collect();
    assert_eq!(on_node.len(), 3, "{pods:#?}");
    assert!(
        on_node
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    );
    // The launch is recorded once, and the claim lists the bound pods.
    assert_eq!(sim.cloud.inner().launches(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_scenario_meets_its_expectations_on_the_api_server() {
    init_logs();
    for (name, text) in scenario::BUILT_IN {
        let s = scenario::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (_, failures) = run_on_apiserver(&s, SimSettings::default()).await;
        assert!(failures.is_empty(), "{name}: {failures:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn architectures_land_on_their_own_nodes_on_the_api_server() {
    init_logs();
    let (_, failures) = run_on_apiserver(&scenario_file("arch.yaml"), SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_pod_gets_one_failed_scheduling_event_in_the_api_server() {
    init_logs();
    let (sim, failures) =
        run_on_apiserver(&scenario_file("impossible.yaml"), SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let events = sim.cluster.events().await;
    let failed: Vec<_> = events
        .iter()
        .filter(|(_, e)| e.reason == "FailedScheduling")
        .collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    let (_, e) = failed[0];
    assert_eq!((e.kind.as_str(), e.name.as_str()), ("Pod", "never"));
    assert!(e.message.contains("m5.hyperlarge"), "{}", e.message);
    let never = sim
        .cluster
        .all_pods()
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("never"))
        .expect("pod");
    assert_eq!(node_of(&never), None, "never bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_overhead_is_honoured_on_the_api_server() {
    init_logs();
    let (sim, failures) = run_on_apiserver(
        &scenario_file("daemonset-overhead.yaml"),
        SimSettings::default(),
    )
    .await;
    assert!(failures.is_empty(), "{failures:#?}");
    let pods = sim.cluster.all_pods().await;
    for n in sim.cluster.all_nodes().await {
        let name = n.metadata.name.clone().unwrap_or_default();
        let daemon = pods
            .iter()
            .filter(|p| node_of(p) == Some(name.as_str()))
            .filter(|p| {
                p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "DaemonSet")
            })
            .count();
        assert_eq!(daemon, 1, "node {name} holds its DaemonSet pod");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_instance_loses_its_node_and_its_pods_move_to_a_replacement() {
    init_logs();
    let s = scenario::parse(WALKTHROUGH_1).expect("parses");
    let settings = SimSettings {
        duplicate_events: true,
        reorder_events: true,
        ..Default::default()
    };
    let mut sim = on_apiserver(&s.region, settings).await;
    scenario::load(&mut sim, &s).await.expect("loads");
    sim.cluster
        .scale("default", "inflate", 3)
        .await
        .expect("scale");
    sim.run_for(SignedDuration::from_mins(2)).await;
    let first = sim.cloud.inner().all_instances()[0].instance.id.clone();
    let old = sim.cluster.all_nodes().await[0]
        .metadata
        .name
        .clone()
        .expect("node");
    // Someone terminates the instance from the console.
    sim.cloud
        .inner()
        .external_state_change(&first, InstanceState::ShuttingDown);
    sim.run_for(SignedDuration::from_mins(3)).await;
    let released = sim
        .state_changes
        .iter()
        .filter(|o| matches!(o, StateChangeOutcome::Released { .. }))
        .count();
    assert_eq!(
        released, 1,
        "the claim is released once: {:?}",
        sim.state_changes
    );
    let nodes = sim.cluster.all_nodes().await;
    assert_eq!(
        nodes.len(),
        1,
        "the old Node is deleted through the adapter"
    );
    let new = nodes[0].metadata.name.clone().expect("node");
    assert_ne!(new, old, "a new node replaces it");
    let pods = sim.cluster.all_pods().await;
    assert_eq!(
        pods.iter()
            .filter(|p| node_of(p) == Some(new.as_str()))
            .count(),
        3,
        "{pods:#?}"
    );
    assert_eq!(sim.pending().await, 0);
    assert_eq!(sim.cloud.inner().launches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_registers_is_replaced_on_the_api_server() {
    init_logs();
    let s = scenario::parse(WALKTHROUGH_1).expect("parses");
    let mut sim = on_apiserver(&s.region, SimSettings::default()).await;
    sim.never_register.insert("r6gd.xlarge".into());
    scenario::load(&mut sim, &s).await.expect("loads");
    sim.cluster
        .scale("default", "inflate", 3)
        .await
        .expect("scale");
    sim.run_for(SignedDuration::from_mins(16)).await;
    let all = sim.cloud.inner().all_instances();
    assert_eq!(all.len(), 2, "the timed-out instance is replaced");
    assert!(
        all[0].instance.state.is_gone_or_going(),
        "{:?}",
        all[0].instance.state
    );
    sim.never_register.clear();
    sim.run_for(SignedDuration::from_mins(2)).await;
    assert_eq!(
        sim.pending().await,
        0,
        "the pods got the replacement's node"
    );
    assert_eq!(sim.cluster.all_nodes().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_pin_pods_to_their_zones_on_the_api_server() {
    init_logs();
    let (sim, failures) =
        run_on_apiserver(&scenario_file("volumes.yaml"), SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The pod whose claim names a missing StorageClass stays pending, reported.
    let events = sim.cluster.events().await;
    let lost = events
        .iter()
        .find(|(_, e)| e.name == "lost-class" && e.reason == "FailedScheduling")
        .expect("an event");
    assert!(
        lost.1.message.contains("no-such-class"),
        "{}",
        lost.1.message
    );
}

/// The consolidation example through the API server: the least used of
/// three nodes is drained (evictions decided by the server's eviction
/// handler) and removed, its pods rebound to the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consolidation_example_on_the_api_server() {
    init_logs();
    let s = scenario_file("consolidation-example.yaml");
    let (_, failures) = run_on_apiserver(&s, SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The upgrade walkthrough through the API server: after the cluster moves
/// to 1.21 the node on the old AMI is replaced first, drained under its
/// budget (never more than one pod unavailable) and deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_walkthrough_on_the_api_server() {
    init_logs();
    let s = scenario_file("upgrade-walkthrough.yaml");
    let (_, failures) = run_on_apiserver(&s, SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
