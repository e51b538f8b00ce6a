//! `nodewright status --json` and `nodewright plan --json` against the
//! local kube-apiserver and the emulator while a scenario runs on the real
//! adapters: every number status prints is checked against the cluster's
//! objects, the state table and EC2, a removal in progress shows with its
//! step, and the live plan is the one the handlers' dry run makes.
#![allow(clippy::expect_used)] // test code: a failed expectation is a failed test

use std::process::Command;

use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::aws::{DynamoStore, DynamoTables};
use nodewright::ports::Store;
use nodewright::resources::Resources;
use nodewright::scheduling::SchedPod;
use nodewright::sim::ClusterDriver;
use nodewright_tests::aws::Ec2Fixture;
use nodewright_tests::aws::{moto, sdk_config, unique};
use nodewright_tests::interruption::deliver_fixture;
use nodewright_tests::kube_harness::KubeEnv;
use nodewright_tests::real::{self, REGION, RealSim};
use nodewright_tests::sim::scenario_file;
use serde_json::Value;

fn cli(args: &[&str], prefix: &str, cluster: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(args)
        .env("NODEWRIGHT_TABLE_PREFIX", prefix)
        .env("NODEWRIGHT_CLUSTER_NAME", cluster)
        .env("KUBECONFIG", &KubeEnv::get().function_kubeconfig)
        .env("AWS_REGION", REGION)
        .env("AWS_ENDPOINT_URL", &moto().endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("NODEWRIGHT_KUBE_CONTEXT")
        .output()
        .expect("runs the nodewright binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The small spot scenario on the real adapters, over tables of its own
/// (their prefix is what the CLI is pointed at).
async fn spot_drain() -> (String, RealSim, Ec2Fixture) {
    let prefix = unique("nw");
    let store = DynamoStore::new(
        &sdk_config(REGION).await,
        DynamoTables::with_prefix(&prefix),
    );
    store.ensure_tables().await.expect("tables");
    let (sim, f) = Box::pin(real::run_scenario(store, &scenario_file("spot-drain.yaml"))).await;
    (prefix, sim, f)
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn allocatable(n: &Node) -> Resources {
    Resources::from_list(
        n.status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .expect("allocatable"),
    )
    .expect("quantities")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_what_the_cluster_the_table_and_ec2_hold() {
    let (prefix, mut sim, f) = spot_drain().await;
    // A pod that cannot fit anywhere (no allowed type has 64 CPUs), and
    // a removal in progress: a spot warning for the node, handled once.
    let huge = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "64"}}}]}});
    sim.cluster.apply(&huge).await.expect("pod");
    sim.run_for(nodewright::model::SignedDuration::from_secs(5))
        .await;
    let claim = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .next()
        .expect("the spot node's claim");
    let report = deliver_fixture(&sim, "spot-interruption.json", &claim).await;
    assert!(report.failures.is_empty(), "{report:?}");

    let v = cli(&["status", "--json"], &prefix, &f.cluster);
    let nodes = sim.cluster.all_nodes().await;
    let pods = sim.cluster.all_pods().await;
    let rows = v["nodes"].as_array().expect("nodes");
    assert_eq!(rows.len(), nodes.len(), "{v:#}");
    let mut fleet = 0.0;
    for n in &nodes {
        let name = n.metadata.name.as_deref().expect("name");
        let row = rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {v:#}"));
        let on: Vec<&Pod> = pods.iter().filter(|p| node_of(p) == Some(name)).collect();
        assert_eq!(row["pods"], on.len(), "{name}");
        let mut requested = Resources::default();
        for p in &on {
            requested.add(&SchedPod::from_pod(p).expect("pod").requests);
        }
        assert_eq!(row["cpu_requested_millis"], requested.cpu_millis, "{name}");
        assert_eq!(
            row["memory_requested_bytes"], requested.memory_bytes,
            "{name}"
        );
        let alloc = allocatable(n);
        assert_eq!(row["cpu_allocatable_millis"], alloc.cpu_millis, "{name}");
        assert_eq!(
            row["memory_allocatable_bytes"], alloc.memory_bytes,
            "{name}"
        );
        let labels = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            row["instance_type"].as_str(),
            labels
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str)
        );
        assert_eq!(row["capacity_type"].as_str(), Some("spot"));
        let price = row["price_per_hour"].as_f64().expect("price");
        assert!(price > 0.0, "{name}: the instance's price from EC2: {row}");
        fleet += price;
    }
    assert!((v["cost_per_hour"].as_f64().expect("cost") - fleet).abs() < 1e-9);
    let pending = v["pending"].as_array().expect("pending");
    assert_eq!(
        pending.len(),
        pods.iter().filter(|p| node_of(p).is_none()).count(),
        "{v:#}"
    );
    let huge = pending
        .iter()
        .find(|p| p["name"] == "default/huge")
        .expect("the huge pod is pending");
    assert!(
        huge["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty() && r != "no reason recorded yet"),
        "{huge}"
    );
    let removals = v["removals"].as_array().expect("removals");
    let commands = sim.store.commands().await.expect("commands");
    assert_eq!(removals.len(), commands.len());
    assert_eq!(removals[0]["nodeclaim"], claim.id.as_str());
    assert_eq!(removals[0]["node"].as_str(), claim.node_name.as_deref());
    assert_eq!(removals[0]["step"], format!("{:?}", commands[0].step));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_plan_is_the_handlers_dry_run() {
    let (prefix, sim, f) = spot_drain().await;
    let claim = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .next()
        .expect("claim");
    deliver_fixture(&sim, "spot-interruption.json", &claim).await;

    let live = cli(&["plan", "--json"], &prefix, &f.cluster);
    let ours = nodewright::handlers::disruption::dry_run(
        &sim.ports(),
        nodewright::disruption::Tuning::default(),
    )
    .await
    .expect("dry run");
    let actions = |nodes: Vec<(String, String)>| {
        let mut n = nodes;
        n.sort();
        n
    };
    let live_nodes = actions(
        live["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                (
                    n["node"].as_str().expect("node").to_owned(),
                    n["action"].as_str().expect("action").to_owned(),
                )
            })
            .collect(),
    );
    let our_nodes = actions(
        ours.nodes
            .iter()
            .map(|n| (n.node.clone(), n.action.clone()))
            .collect(),
    );
    assert_eq!(live_nodes, our_nodes, "{live:#}");
    let node = claim.node_name.clone().expect("registered");
    assert!(
        live_nodes.contains(&(node, "removing".to_owned())),
        "the interrupted node shows as being removed: {live:#}"
    );
    // Acting on nothing: the command is where the handler left it.
    assert_eq!(sim.store.commands().await.expect("commands").len(), 1);
}
