//! Interruption test bodies that run on either set of adapters: the
//! in-memory ones (`tests/tests/suite/interruption.rs`) and emulated
//! EC2/DynamoDB + the real kube-apiserver
//! (`tests/tests/whole_cluster/interruption_real.rs`). Each body takes a
//! simulation whose spot scenario (`tests/scenarios/spot-drain.yaml`: one
//! spot node, ten pods of `app`, a budget keeping eight) is up, and the
//! claim of that node.

use k8s_openapi::api::core::v1::Node;
use nodewright::config::ConfigKind;
use nodewright::handlers::config as config_loader;
use nodewright::handlers::interruption::{self, BatchReport, InterruptionSettings, Record};
use nodewright::model::claim::Claim;
use nodewright::model::{DISRUPTED_TAINT_KEY, OfferingKey, SignedDuration, Timestamp};
use nodewright::ports::{Cloud, Cluster, Store};
use nodewright::sim::{ClusterDriver, FaultyCloud, Simulation};

/// Any simulation whose cloud can be made to fail.
pub type AnySim<C, S, K> = Simulation<FaultyCloud<C>, S, K>;

/// The instance id the fixture events carry.
pub const PLACEHOLDER: &str = "i-0123456789abcdef0";
/// The fixture events' time; a warning's deadline counts from it.
pub const FIXTURE_TIME: &str = "2026-12-01T09:00:00Z";
/// Two minutes after it (a capacity reservation's termination time).
pub const FIXTURE_TIME_PLUS_2: &str = "2026-12-01T09:02:00Z";

pub fn fixture(name: &str) -> serde_json::Value {
    let path = format!(
        "{}/../functions/interruption/events/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixture's SQS records, for `instance`, as if sent at `now`.
pub fn records(name: &str, instance: &str, now: Timestamp) -> Vec<Record> {
    let event = fixture(name);
    let later = (now + SignedDuration::from_mins(2)).to_string();
    let now = now.to_string();
    event["Records"]
        .as_array()
        .expect("Records")
        .iter()
        .map(|r| Record {
            message_id: r["messageId"].as_str().expect("messageId").to_owned(),
            body: r["body"]
                .as_str()
                .expect("body")
                .replace(PLACEHOLDER, instance)
                .replace(FIXTURE_TIME, &now)
                .replace(FIXTURE_TIME_PLUS_2, &later),
        })
        .collect()
}

/// Hands records to the interruption handler as the function would, with
/// the configuration as stored and the function's timeout.
pub async fn deliver<C, S, K>(sim: &AnySim<C, S, K>, rs: &[Record]) -> BatchReport
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    let config = config_loader::load(&sim.store).await.expect("config");
    interruption::handle_batch(
        &sim.ports(),
        &config,
        &config.settings,
        &InterruptionSettings::default(),
        rs,
        sim.now() + sim.settings.interruption_invocation,
    )
    .await
    .expect("batch")
}

/// The named fixture for `claim`'s instance, delivered now.
pub async fn deliver_fixture<C, S, K>(
    sim: &AnySim<C, S, K>,
    name: &str,
    claim: &Claim,
) -> BatchReport
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    deliver(
        sim,
        &records(name, claim.instance_id().expect("launched"), sim.now()),
    )
    .await
}

pub fn kinds(report: &BatchReport) -> Vec<&'static str> {
    report.outcomes.iter().map(|(_, o)| o.kind()).collect()
}

pub fn node_tainted(nodes: &[Node], name: &str) -> bool {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
        .and_then(|n| n.spec.as_ref()?.taints.clone())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
}

pub fn node_cordoned(nodes: &[Node], name: &str) -> bool {
    nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
        .and_then(|n| n.spec.as_ref()?.unschedulable)
        .unwrap_or(false)
}

/// Annotates the stored spot NodePool with a rebalance policy, as `config
/// apply` of the edited pool would.
pub async fn set_rebalance_policy<C, S, K>(sim: &mut AnySim<C, S, K>, policy: &str)
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    let mut pool = sim
        .store
        .config_items()
        .await
        .expect("items")
        .into_iter()
        .find(|i| i.kind == ConfigKind::NodePool && i.name == "spot")
        .expect("the spot NodePool");
    pool.annotations.insert(
        "nodewright.io/rebalance-policy".to_owned(),
        policy.to_owned(),
    );
    pool.version += 1;
    pool.updated_at = sim.now();
    sim.store.put_config_item(&pool).await.expect("pool stored");
    sim.run_for(SignedDuration::from_secs(1)).await;
}

/// `Ignore`: a rebalance recommendation changes nothing.
pub async fn rebalance_ignore<C, S, K>(sim: &mut AnySim<C, S, K>, claim: &Claim)
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    set_rebalance_policy(sim, "Ignore").await;
    let report = deliver_fixture(sim, "rebalance-recommendation.json", claim).await;
    assert_eq!(kinds(&report), ["ignored"], "{report:?}");
    sim.run_for(SignedDuration::from_secs(30)).await;
    assert!(!node_tainted(
        &sim.cluster.all_nodes().await,
        claim.node_name.as_deref().expect("node")
    ));
    assert!(sim.store.commands().await.expect("commands").is_empty());
}

/// `Cordon`: the node is cordoned, nothing else happens — and it carries
/// no removal taint, so it is not taken for a node being removed.
pub async fn rebalance_cordon<C, S, K>(sim: &mut AnySim<C, S, K>, claim: &Claim)
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    set_rebalance_policy(sim, "Cordon").await;
    let launches = sim.cloud.launch_calls();
    let report = deliver_fixture(sim, "rebalance-recommendation.json", claim).await;
    assert_eq!(kinds(&report), ["cordoned"], "{report:?}");
    sim.run_for(SignedDuration::from_mins(3)).await;
    let node = claim.node_name.as_deref().expect("node");
    let nodes = sim.cluster.all_nodes().await;
    assert!(node_cordoned(&nodes, node));
    assert!(!node_tainted(&nodes, node));
    assert!(sim.store.commands().await.expect("commands").is_empty());
    assert_eq!(
        sim.cloud.launch_calls(),
        launches,
        "no replacement under Cordon"
    );
    assert_eq!(
        sim.cluster
            .port()
            .pods_on_node(node)
            .await
            .expect("pods")
            .len(),
        10,
        "nothing evicted"
    );
}

/// `Replace`: a replacement first, then a drain with no deadline; the pods
/// end on the replacement.
pub async fn rebalance_replace<C, S, K>(sim: &mut AnySim<C, S, K>, claim: &Claim)
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    set_rebalance_policy(sim, "Replace").await;
    let launches = sim.cloud.launch_calls();
    let report = deliver_fixture(sim, "rebalance-recommendation.json", claim).await;
    assert_eq!(kinds(&report), ["removing"], "{report:?}");
    let command = sim
        .store
        .commands()
        .await
        .expect("commands")
        .pop()
        .expect("command");
    assert_eq!(
        command.spec.deadline, None,
        "no hard deadline: budgets are always respected"
    );
    sim.run_for(SignedDuration::from_mins(4)).await;
    let nodes = sim.cluster.all_nodes().await;
    assert_eq!(
        nodes.len(),
        1,
        "the old node is gone, the replacement stays: {:?}",
        nodes.iter().map(|n| &n.metadata.name).collect::<Vec<_>>()
    );
    assert_ne!(nodes[0].metadata.name, claim.node_name);
    let on_new = sim
        .cluster
        .port()
        .pods_on_node(nodes[0].metadata.name.as_deref().expect("name"))
        .await
        .expect("pods");
    assert_eq!(on_new.len(), 10);
    assert_eq!(sim.cloud.launch_calls(), launches + 1, "one replacement");
    assert!(sim.store.commands().await.expect("commands").is_empty());
}

/// A budget that allows no eviction and no capacity for a replacement: the
/// drain holds (one `FailedDraining` per pod, naming the budget) until the
/// warning's deadline, then deletes the pods and removes the node.
pub async fn budget_holds_until_the_deadline<C, S, K>(sim: &mut AnySim<C, S, K>, claim: &Claim)
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    let pdb = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "app", "namespace": "default"},
        "spec": {"minAvailable": 10, "selector": {"matchLabels": {"app": "app"}}}});
    sim.cluster.apply(&pdb).await.expect("pdb");
    for o in sim.cloud.catalog().await.expect("catalog").offerings.iter() {
        sim.cloud.remove_capacity(OfferingKey {
            capacity_type: o.capacity_type.clone(),
            instance_type: o.instance_type.clone(),
            zone: o.zone.clone(),
        });
    }
    // Let the disruption controller see the budget's new floor.
    sim.run_for(SignedDuration::from_secs(2)).await;
    let started = sim.now();
    deliver_fixture(sim, "spot-interruption.json", claim).await;
    sim.run_for(SignedDuration::from_secs(60)).await;
    let node = claim.node_name.clone().expect("node");
    assert!(
        sim.cluster
            .all_nodes()
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node.as_str())),
        "still draining"
    );
    let blocked: Vec<_> = sim
        .cluster
        .events()
        .await
        .into_iter()
        .filter(|(_, e)| e.reason == "FailedDraining")
        .collect();
    assert_eq!(
        blocked.len(),
        10,
        "one FailedDraining per blocked pod: {blocked:#?}"
    );
    assert!(
        blocked.iter().all(|(_, e)| e.message.contains("app")),
        "the event names the budget: {blocked:#?}"
    );
    sim.run_for(SignedDuration::from_mins(2)).await;
    // Past the deadline (warning + 2 min − margin) the pods were deleted and the node went.
    assert!(
        sim.cluster
            .all_nodes()
            .await
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(node.as_str())),
        "node removed"
    );
    assert!(sim.store.commands().await.expect("commands").is_empty());
    assert!(
        sim.store
            .claims()
            .await
            .expect("claims")
            .iter()
            .all(|c| c.id != claim.id),
        "claim released"
    );
    assert!(sim.now().duration_since(started) >= SignedDuration::from_secs(105));
}

/// The cheapest spot offerings other than the interrupted one are out of
/// capacity: the replacement falls back to another, and the pods move there.
pub async fn replacement_falls_back<C, S, K>(sim: &mut AnySim<C, S, K>, claim: &Claim)
where
    C: Cloud + Clone,
    S: Store + Clone,
    K: ClusterDriver,
{
    let first = claim.instance.clone().expect("instance");
    let catalog = sim.cloud.catalog().await.expect("catalog");
    let mut spot: Vec<_> = catalog
        .offerings
        .iter()
        .filter(|o| {
            o.capacity_type == "spot"
                && ["m5.xlarge", "m5a.xlarge", "m6i.xlarge"].contains(&o.instance_type.as_str())
        })
        .collect();
    spot.sort_by(|a, b| a.price.total_cmp(&b.price));
    let dry: Vec<OfferingKey> = spot
        .iter()
        .filter(|o| !(o.instance_type == first.instance_type && o.zone == first.zone))
        .take(3)
        .map(|o| OfferingKey {
            capacity_type: o.capacity_type.clone(),
            instance_type: o.instance_type.clone(),
            zone: o.zone.clone(),
        })
        .collect();
    assert_eq!(
        dry.len(),
        3,
        "the catalog offers the pool's types in several zones"
    );
    for o in &dry {
        sim.cloud.remove_capacity(o.clone());
    }
    deliver_fixture(sim, "spot-interruption.json", claim).await;
    sim.run_for(SignedDuration::from_mins(4)).await;
    let claims = sim.store.claims().await.expect("claims");
    assert_eq!(claims.len(), 1, "the replacement only: {claims:#?}");
    let bought = claims[0].instance.clone().expect("replacement");
    let key = OfferingKey {
        capacity_type: bought.capacity_type.clone(),
        instance_type: bought.instance_type.clone(),
        zone: bought.zone.clone(),
    };
    assert!(!dry.contains(&key), "bought a dry offering: {key:?}");
    assert_ne!(
        (bought.instance_type.as_str(), bought.zone.as_str()),
        (first.instance_type.as_str(), first.zone.as_str()),
        "avoided the interrupted offering"
    );
    let node = claims[0].node_name.as_deref().expect("registered");
    assert_eq!(
        sim.cluster
            .port()
            .pods_on_node(node)
            .await
            .expect("pods")
            .len(),
        10
    );
}
