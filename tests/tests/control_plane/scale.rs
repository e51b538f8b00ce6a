//! A thousand pods at once beside the real control plane (Karpenter's
//! basic performance test's shapes): every pod runs, on nodes nodewright
//! launched. The figures are printed, not asserted
//! (`cargo bench -p nodewright-tests --bench scale_up` measures them in a
//! process of their own).

use std::time::Duration;

use nodewright::resources::Resources;
use nodewright::scheduling::SchedPod;
use nodewright::sim::ClusterDriver;
use nodewright_tests::scale_up;

use crate::cluster::{init_logs, node_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pods_all_run_on_the_nodes_launched_for_them() {
    init_logs();
    // A bound on the wait, not on the speed: far beyond what the run takes.
    let (mut sim, figures) = scale_up::run(1_000, Duration::from_secs(15 * 60)).await;
    eprintln!("{figures}");
    let pods = sim.cluster.all_pods().await;
    assert_eq!(pods.len(), 1_000);
    let nodes = sim.cluster.all_nodes().await;
    assert!(pods.iter().all(|p| node_of(p).is_some()));
    // Every node is one nodewright launched (the registrar creates a Node
    // only for a launched instance), and none holds more than it has.
    assert_eq!(figures.launches, nodes.len(), "{figures}");
    for n in &nodes {
        let name = n.metadata.name.as_deref();
        let allocatable = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| Resources::from_list(a).expect("allocatable"))
            .unwrap_or_default();
        let mut used = Resources::default();
        for p in pods.iter().filter(|p| node_of(p) == name) {
            used.add(&SchedPod::from_pod(p).expect("pod").requests);
        }
        assert!(
            used.fits_in(&allocatable),
            "{name:?} holds {used:?} of {allocatable:?}"
        );
    }
    // The scheduler may bind pods to other room than nodewright planned
    // for them, leaving a node empty: such a node is removed as Empty
    // (consolidateAfter 30 s), and none is left empty.
    let empty = |nodes: &[k8s_openapi::api::core::v1::Node],
                 pods: &[k8s_openapi::api::core::v1::Pod]| {
        nodes
            .iter()
            .filter(|n| {
                !pods
                    .iter()
                    .any(|p| node_of(p) == n.metadata.name.as_deref())
            })
            .count()
    };
    if empty(&nodes, &pods) > 0 {
        sim.run_for(nodewright::model::SignedDuration::from_mins(2))
            .await;
        let (nodes, pods) = (sim.cluster.all_nodes().await, sim.cluster.all_pods().await);
        assert_eq!(empty(&nodes, &pods), 0, "{figures}");
        assert!(pods.iter().all(|p| node_of(p).is_some()));
    }
}
