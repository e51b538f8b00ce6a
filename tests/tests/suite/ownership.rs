//! Ownership on the in-memory adapters: what garbage collection does when
//! the state table is lost or restored from an older copy (our instances
//! are adopted from their tags and Nodes, never terminated).

use std::collections::BTreeSet;

use nodewright::ports::{Cloud, InstanceState, SignedDuration, Store};
use nodewright::sim::SimSettings;
use nodewright::sim::scenario;
use nodewright_tests::sim::{in_memory, scenario_file};

/// The daemonset-overhead scenario: six pods on on-demand m5 nodes.
async fn settled() -> nodewright_tests::sim::MemSim {
    let s = scenario_file("daemonset-overhead.yaml");
    let mut sim = in_memory(&s.region, SimSettings::default());
    scenario::load(&mut sim, &s).await.expect("loads");
    scenario::run(&mut sim, &s).await.expect("runs");
    assert!(scenario::check(&sim, &s.expect).await.is_empty());
    sim.run_for(SignedDuration::from_mins(3)).await;
    sim
}

async fn live_ids(sim: &nodewright_tests::sim::MemSim) -> BTreeSet<String> {
    sim.cloud
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .filter(|i| !i.state.is_gone_or_going())
        .map(|i| i.id)
        .collect()
}

#[tokio::test]
async fn a_lost_state_table_is_adopted_not_terminated() {
    let mut sim = settled().await;
    let before = live_ids(&sim).await;
    assert!(!before.is_empty());
    let claims_before: BTreeSet<String> = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .map(|c| c.id)
        .collect();

    sim.store.inner().lose_state();
    sim.run_for(SignedDuration::from_mins(30)).await;

    let after = live_ids(&sim).await;
    assert_eq!(after, before, "every instance of ours lives on");
    let terminated: Vec<_> = sim
        .sim_cloud
        .as_ref()
        .expect("sim cloud")
        .all_instances()
        .into_iter()
        .filter(|i| i.instance.state == InstanceState::Terminated)
        .map(|i| i.instance.id)
        .collect();
    assert!(terminated.is_empty(), "terminated: {terminated:?}");
    let claims = sim.store.claims().await.expect("claims");
    let adopted: BTreeSet<String> = claims.iter().map(|c| c.id.clone()).collect();
    assert_eq!(adopted, claims_before, "each claim recovered under its id");
    for c in &claims {
        assert!(c.node_name.is_some(), "{} registered again", c.id);
        assert!(
            c.instance.as_ref().is_some_and(|i| before.contains(&i.id)),
            "{c:?}"
        );
    }
    // The pods stayed where they were: nothing pending, nothing launched.
    assert_eq!(sim.pending().await, 0);
    assert_eq!(
        sim.sim_cloud.as_ref().expect("sim cloud").launches(),
        before.len()
    );
    // The pools count them again.
    let usage = sim.store.pool_usage().await.expect("usage");
    assert_eq!(
        usage.get("default").and_then(|u| u.get("nodes")).copied(),
        Some(before.len() as i64)
    );
}

#[tokio::test]
async fn a_state_table_restored_from_an_older_copy_adopts_the_newer_instances() {
    let mut sim = settled().await;
    let backup = sim.store.inner().backup();
    let old = live_ids(&sim).await;
    // More pods: more nodes after the backup.
    let mut scale = scenario_file("daemonset-overhead.yaml");
    scale.objects[3]["spec"]["replicas"] = serde_json::json!(12);
    scenario::load(&mut sim, &scale).await.expect("scaled");
    sim.run_for(SignedDuration::from_mins(5)).await;
    let grown = live_ids(&sim).await;
    assert!(grown.len() > old.len(), "{old:?} → {grown:?}");

    sim.store.inner().restore(&backup);
    sim.run_for(SignedDuration::from_mins(30)).await;

    assert_eq!(live_ids(&sim).await, grown, "the newer instances live on");
    let claimed: BTreeSet<String> = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .filter_map(|c| c.instance.map(|i| i.id))
        .collect();
    assert_eq!(claimed, grown, "one claim per instance again");
    assert_eq!(sim.pending().await, 0);
}
