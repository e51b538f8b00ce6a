//! Disruption beside the real control plane: drift under a budget, and an
//! interruption arriving in the middle of a consolidation.

use nodewright::model::{RemovalReason, SignedDuration};
use nodewright::ports::Store;
use nodewright::sim::ClusterDriver;
use nodewright::sim::scenario;
use nodewright_tests::sim::{control_plane_settings, on_control_plane, run_on_control_plane};

use crate::cluster::{app, init_logs, phase, scenario, taint_keys};

/// Drift: every node of the pool drifts when its template changes; the
/// budget of one node lets one removal run at a time, each replaced
/// first, until every node carries the new labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_replaces_every_node_within_the_budget_beside_the_real_control_plane() {
    init_logs();
    let (sim, failures) =
        run_on_control_plane(&scenario("drift.yaml"), control_plane_settings()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let pods = sim.cluster.all_pods().await;
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:#?}");
    // One removal at a time: each started once the one before had ended.
    for s in &sim.disruption_starts {
        assert_eq!(s.in_flight, 0, "{:#?}", sim.disruption_starts);
    }
}

/// A spot warning for a node that a consolidation is draining joins the
/// removal under way: one removal (its deadline and reason now the
/// warning's, the earlier deadline winning), no replacement, and the pod
/// whose grace period would outlast the instance is deleted at the
/// warning's deadline: gone long before its own five minutes of grace
/// would have ended, and the Node with it, by nodewright's removal.
///
/// How soon after the deadline the Node goes (a few polls of 2 s: the
/// pod's last second of grace, kwok's confirmation, terminate, delete) is
/// a matter of real time on a loaded machine, so it is not asserted; the
/// waits are bounded by rounds, with minutes to spare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruption_during_a_consolidation_joins_it_beside_the_real_control_plane() {
    init_logs();
    let s = scenario("interruption-during-consolidation.yaml");
    let mut sim = on_control_plane(&s.region, control_plane_settings()).await;
    scenario::load(&mut sim, &s).await.expect("loads");
    let start = sim.now();
    // The scenario's actions (the last at 41 s), then the warning by hand:
    // which node is consolidated, and when its drain starts, is known only
    // as it happens.
    let mut first = s.clone();
    first.run = "41s".to_owned();
    scenario::run(&mut sim, &first).await.expect("runs");
    let (draining, b) = loop {
        sim.run_for(SignedDuration::from_secs(2)).await;
        let nodes = sim.cluster.all_nodes().await;
        let tainted: Vec<_> = nodes
            .into_iter()
            .filter(|n| taint_keys(n).iter().any(|k| k == "karpenter.sh/disrupted"))
            .collect();
        let terminating: Vec<_> = sim
            .cluster
            .all_pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .collect();
        if tainted.len() == 1 && terminating.len() == 1 {
            break (tainted[0].clone(), terminating[0].clone());
        }
        assert!(
            sim.now() < start + SignedDuration::from_secs(200),
            "no consolidation drain under way after 200 s: {tainted:#?}"
        );
    };
    let provider = draining
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let instance = provider.rsplit('/').next().unwrap_or_default().to_owned();
    let commands = sim.store.commands().await.expect("commands");
    assert_eq!(commands.len(), 1, "{commands:#?}");
    let before = commands[0].clone();
    assert_eq!(
        before.spec.reason,
        RemovalReason::Underutilized,
        "{before:?}"
    );
    let sim_cloud = sim.sim_cloud.clone().expect("the in-memory EC2");
    assert!(sim_cloud.interrupt_spot(&instance), "{instance} is spot");
    sim.run_for(SignedDuration::from_secs(3)).await;
    let commands = sim.store.commands().await.expect("commands");
    assert_eq!(
        commands.len(),
        1,
        "the warning joins the removal: {commands:#?}"
    );
    let merged = &commands[0];
    assert_eq!(merged.id, before.id);
    // The earlier deadline wins, and with it the reason.
    assert_eq!(merged.spec.reason, RemovalReason::SpotInterrupted);
    let deadline = merged.spec.deadline.expect("the warning's deadline");
    assert!(
        before.spec.deadline.is_none_or(|d| deadline <= d),
        "the earlier deadline wins: {before:?} → {merged:?}"
    );
    assert!(merged.replacements.is_empty(), "no replacement: {merged:?}");
    // b is shutting down with its own five minutes of grace, which would
    // outlast the instance: still there after the warning.
    let b_uid = b.metadata.uid.clone().unwrap_or_default();
    assert_eq!(app(&b), "b", "{b:?}");
    let b_would_end = b
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0)
        .expect("b is terminating");
    assert!(
        deadline < b_would_end,
        "{deadline} {b_would_end}: the warning's deadline comes first"
    );
    let uids = |pods: &[k8s_openapi::api::core::v1::Pod]| -> Vec<String> {
        pods.iter().filter_map(|p| p.metadata.uid.clone()).collect()
    };
    assert!(
        uids(&sim.cluster.all_pods().await).contains(&b_uid),
        "b is still shutting down after the warning"
    );
    // At the deadline (two minutes less 15 s after the warning) what is
    // left is deleted at once: b goes, then the Node. Rounds of 2 s, at
    // most 150 of them (five minutes).
    let name = draining.metadata.name.clone().unwrap_or_default();
    sim.run_until(deadline).await;
    let mut b_gone_at = None;
    for _ in 0..150 {
        let now = sim.now();
        if b_gone_at.is_none() && !uids(&sim.cluster.all_pods().await).contains(&b_uid) {
            b_gone_at = Some(now);
        }
        let node_gone = sim
            .cluster
            .all_nodes()
            .await
            .iter()
            .all(|n| n.metadata.name.as_deref() != Some(name.as_str()));
        if let Some(b_at) = b_gone_at
            && node_gone
        {
            // Figures for the record (seen at 2 s polls), not asserted.
            println!(
                "b gone {:.0} s and the Node {:.0} s after the warning's deadline",
                b_at.duration_since(deadline).as_secs_f64(),
                now.duration_since(deadline).as_secs_f64()
            );
            break;
        }
        sim.run_for(SignedDuration::from_secs(2)).await;
    }
    let b_gone_at = b_gone_at.expect("b deleted at the warning's deadline");
    assert!(
        b_gone_at < b_would_end,
        "b was deleted at the deadline ({deadline}), not left to its own grace period (gone at {b_gone_at}, its grace would end at {b_would_end})"
    );
    let left = sim.cluster.all_nodes().await;
    assert!(
        left.iter()
            .all(|n| n.metadata.name.as_deref() != Some(name.as_str())),
        "{name} is gone: {left:#?}"
    );
    // The removal was nodewright's, and it is over.
    let commands = sim.store.commands().await.expect("commands");
    assert!(commands.is_empty(), "{commands:#?}");
    sim.run_for(SignedDuration::from_secs(20)).await;
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let pods = sim.cluster.all_pods().await;
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:#?}");
}
