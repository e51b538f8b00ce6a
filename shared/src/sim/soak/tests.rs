use serde_json::json;

use super::*;
use crate::config::Limits;
use crate::model::claim::Claim;
use crate::model::{Command, PodKey, RemovalReason, RemovalSpec};
use crate::ports::{Cluster, Store};
use crate::sim::controllers::{is_pod_ready, is_terminating};

/// A deletion at a removal's deadline is forced, not a disruption the
/// budget must allow: the PDB check leaves it out once the time left
/// is within the pod's grace period (seed 11 flagged ten such deletes
/// of a spot node's pods at its notice's deadline), and only then.
#[test]
fn deletions_at_a_removal_deadline_are_not_pdb_violations() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "api-1", "namespace": "default", "uid": "u1"},
        "spec": {"nodeName": "node-a", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "app", "image": "pause"}]}
    }))
    .expect("pod");
    let deadline = Timestamp::UNIX_EPOCH + SignedDuration::from_secs(600);
    let spec = RemovalSpec {
        claim_id: "c1".to_owned(),
        pool: "general".to_owned(),
        node: Some("node-a".to_owned()),
        instance_id: None,
        reason: crate::model::RemovalReason::SpotInterrupted,
        replace: true,
        deadline: Some(deadline),
        avoid: Vec::new(),
        event_at: None,
        handover: false,
    };
    let command = Command::new(spec.clone(), Timestamp::UNIX_EPOCH);
    let at = |secs_before: i64| deadline - SignedDuration::from_secs(secs_before);
    assert!(due_at_a_removal_deadline(
        &pod,
        at(20),
        std::slice::from_ref(&command)
    ));
    assert!(!due_at_a_removal_deadline(
        &pod,
        at(60),
        std::slice::from_ref(&command)
    ));
    // No deadline (a voluntary removal), or another node's: PDBs hold.
    let voluntary = Command::new(
        RemovalSpec {
            deadline: None,
            ..spec.clone()
        },
        Timestamp::UNIX_EPOCH,
    );
    assert!(!due_at_a_removal_deadline(&pod, at(20), &[voluntary]));
    let other = Command::new(
        RemovalSpec {
            node: Some("node-b".to_owned()),
            ..spec
        },
        Timestamp::UNIX_EPOCH,
    );
    assert!(!due_at_a_removal_deadline(&pod, at(20), &[other]));
}

/// A pod whose nomination ends (its claim timed out registering) gets
/// the grace again to be nominated or parked, as Karpenter's
/// provisioner decides again at its next batch; a pod without a reason
/// for longer than the grace is still counted, once. (Seed 3 flagged
/// two Job pods 605 s pending, 5 s after their claim's registration
/// timeout and before their next batch.)
#[test]
fn the_reason_grace_runs_from_the_last_reason() {
    let catalog = crate::sim::catalog::catalog("us-east-1").expect("region");
    let mut checker = Checker::new(Vec::new(), &catalog, Bounds::default());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "job-1", "namespace": "batch", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}
    }))
    .expect("pod");
    let start = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1);
    let at = |secs: i64| start + SignedDuration::from_secs(secs);
    let mut parked = crate::model::Batch::default();
    parked.parked.insert(
        "u1".to_owned(),
        crate::model::batch::Parked {
            pod: "batch/job-1".to_owned(),
            reason: "no room".to_owned(),
            config_fingerprint: 0,
            retry_at: at(600),
        },
    );
    let pods = std::slice::from_ref(&pod);
    // Ten minutes with a reason, checked every 5 s.
    for t in (0..=600).step_by(5) {
        checker.check_pending(at(t), pods, &[], &[], Some(&parked));
    }
    // The reason ends; the next batch is seconds away.
    checker.check_pending(at(605), pods, &[], &[], None);
    checker.check_pending(at(700), pods, &[], &[], None);
    assert_eq!(
        checker.count(Violation::PendingWithoutReason),
        0,
        "{:?}",
        checker.examples()
    );
    // No reason for longer than the grace: counted, once.
    checker.check_pending(at(726), pods, &[], &[], None);
    checker.check_pending(at(800), pods, &[], &[], None);
    assert_eq!(checker.count(Violation::PendingWithoutReason), 1);
    // A pod never given a reason is counted after the grace from its first sighting.
    let stray: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "namespace": "default", "uid": "u2"},
        "spec": {"containers": [{"name": "c", "image": "pause"}]}
    }))
    .expect("pod");
    let strays = std::slice::from_ref(&stray);
    checker.check_pending(at(1000), strays, &[], &[], None);
    checker.check_pending(at(1115), strays, &[], &[], None);
    assert_eq!(checker.count(Violation::PendingWithoutReason), 1);
    checker.check_pending(at(1125), strays, &[], &[], None);
    assert_eq!(checker.count(Violation::PendingWithoutReason), 2);
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// A soak without faults, run long enough for a fleet to exist.
async fn warmed(minutes: i64) -> Soak {
    let options = SoakOptions {
        seed: 3,
        duration: SignedDuration::from_hours(10),
        faults: false,
        ..SoakOptions::default()
    };
    let mut soak = Soak::new(options).await.expect("soak");
    let until = soak.sim.now() + SignedDuration::from_mins(minutes);
    soak.run_until(until).await.expect("runs");
    assert_eq!(soak.checker.total(), 0, "{:?}", soak.checker.examples());
    soak
}

/// Moves the clock without running anything (so nothing repairs what a test broke) and checks.
async fn later(soak: &mut Soak, d: SignedDuration) {
    soak.sim.clock.set(soak.sim.now() + d);
    soak.checker.check(&soak.sim).await;
}

fn counted(soak: &Soak, v: Violation, before: &BTreeMap<Violation, usize>) -> usize {
    soak.checker.count(v) - before.get(&v).copied().unwrap_or(0)
}

#[test]
fn the_checker_counts_every_kind_of_violation_it_claims() {
    block_on(async {
        let mut soak = warmed(20).await;
        let claims = soak.store.claims().await.expect("claims");
        let registered: Vec<&Claim> = claims.iter().filter(|c| c.node_name.is_some()).collect();
        assert!(
            registered.len() >= 2,
            "a fleet after 20 minutes: {claims:?}"
        );

        // A second instance for a claim.
        let before = soak.checker.counts().clone();
        let first = soak
            .cloud
            .all_instances()
            .into_iter()
            .find(|i| i.instance.claim_id.is_some())
            .expect("an instance");
        let mut request = first.request.clone();
        request.client_token = format!("{}-again", request.client_token);
        soak.cloud.launch(&request).await.expect("launch");
        soak.checker.check(&soak.sim).await;
        assert_eq!(counted(&soak, Violation::LaunchedTwice, &before), 1);

        // Two pods of a budget allowing one disruption deleted gracefully at once.
        let before = soak.checker.counts().clone();
        let web: Vec<Pod> = soak
            .sim
            .cluster
            .inner()
            .all_pods()
            .into_iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == "web")
            })
            .filter(|p| is_pod_ready(p) && !is_terminating(p))
            .collect();
        assert!(web.len() >= 2, "{}", web.len());
        for p in &web[..2] {
            soak.sim
                .cluster
                .inner()
                .delete_pod(&PodKey::of(p), Some(30))
                .await
                .expect("delete");
        }
        soak.checker.check(&soak.sim).await;
        assert!(
            counted(&soak, Violation::PdbBelowMinimum, &before) >= 1,
            "{:?}",
            soak.checker.examples()
        );

        // A pod nothing provisions (a scheduler nominated it elsewhere), and one the solver parks.
        let before = soak.checker.counts().clone();
        soak.sim
            .cluster
            .inner()
            .apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "400"}}}]}}))
            .expect("apply");
        soak.sim
            .cluster
            .inner()
            .update_pod("default", "stray", |p| {
                p.status
                    .get_or_insert_with(Default::default)
                    .nominated_node_name = Some("elsewhere".into());
            });
        soak.sim
            .cluster
            .inner()
            .apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500"}}}]}}))
            .expect("apply");
        soak.checker.check(&soak.sim).await;
        // The solver parks the huge pod with its reason.
        soak.sim.run_for(SignedDuration::from_secs(30)).await;
        soak.checker.check(&soak.sim).await;
        later(&mut soak, SignedDuration::from_mins(3)).await;
        assert_eq!(
            counted(&soak, Violation::PendingWithoutReason, &before),
            1,
            "{:?}",
            soak.checker.examples()
        );
        assert_eq!(counted(&soak, Violation::PendingTooLong, &before), 0);
        later(&mut soak, SignedDuration::from_mins(18)).await;
        assert_eq!(
            counted(&soak, Violation::PendingWithoutReason, &before),
            1,
            "counted once per pod"
        );
        // Both pods, once each. (A pod the workload created just before
        // the clock jumped waits too long as well: nothing ran meanwhile.)
        let too_long = soak
            .checker
            .examples()
            .get(&Violation::PendingTooLong)
            .cloned()
            .unwrap_or_default();
        for name in ["default/huge ", "default/stray "] {
            assert_eq!(
                too_long.iter().filter(|e| e.contains(name)).count(),
                1,
                "{name}: {too_long:?}"
            );
        }
        assert!(counted(&soak, Violation::PendingTooLong, &before) >= 2);

        // An instance of ours that no claim knows.
        let before = soak.checker.counts().clone();
        let mut ghost = first.request.clone();
        ghost.claim_id = "general-ghost".into();
        ghost.client_token = "general-ghost".into();
        soak.cloud.launch(&ghost).await.expect("launch");
        soak.checker.check(&soak.sim).await;
        later(&mut soak, SignedDuration::from_mins(4)).await;
        assert_eq!(
            counted(&soak, Violation::InstanceWithoutClaim, &before),
            0,
            "within the grace"
        );
        later(&mut soak, SignedDuration::from_mins(2)).await;
        assert_eq!(counted(&soak, Violation::InstanceWithoutClaim, &before), 1);

        // A claim that never got an instance, reserving far past its pool's limit.
        let before = soak.checker.counts().clone();
        let mut claim = registered[0].clone();
        claim.id = format!("{}-nobody", claim.pool);
        claim.instance = None;
        claim.node_name = None;
        claim.version = 1;
        claim.reservation.insert("cpu".into(), 1_000_000);
        soak.store
            .create_claim(&claim, &Limits::default())
            .await
            .expect("create");
        soak.checker.check(&soak.sim).await;
        assert_eq!(
            counted(&soak, Violation::LimitExceeded, &before),
            1,
            "{:?}",
            soak.checker.examples()
        );
        later(&mut soak, SignedDuration::from_mins(6)).await;
        assert_eq!(counted(&soak, Violation::ClaimWithoutInstance, &before), 1);
        assert_eq!(
            counted(&soak, Violation::LimitExceeded, &before),
            1,
            "one excursion, counted once"
        );

        // A voluntary removal started past its pool's budget.
        let before = soak.checker.counts().clone();
        let victim = registered[0];
        soak.sim
            .disruption_starts
            .push(super::super::simulation::DisruptionStart {
                at: soak.sim.now(),
                claim: victim.id.clone(),
                pool: victim.pool.clone(),
                reason: RemovalReason::Underutilized,
                nodes: 5,
                in_flight: 3,
            });
        soak.checker.check(&soak.sim).await;
        assert_eq!(
            counted(&soak, Violation::DisruptedAgainstBudget, &before),
            1
        );

        // A voluntary removal of a node that runs a do-not-disrupt pod.
        let before = soak.checker.counts().clone();
        let pods = soak.sim.cluster.inner().all_pods();
        let cache = pods
            .iter()
            .find(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == "cache")
                    && node_of(p).is_some()
            })
            .expect("a cache pod runs");
        let node = node_of(cache).expect("bound").to_owned();
        let claim = claims
            .iter()
            .find(|c| c.node_name.as_deref() == Some(node.as_str()))
            .expect("its claim");
        let spec = RemovalSpec {
            claim_id: claim.id.clone(),
            pool: claim.pool.clone(),
            node: Some(node),
            instance_id: claim.instance_id().map(str::to_owned),
            reason: RemovalReason::Drifted,
            replace: true,
            deadline: None,
            avoid: Vec::new(),
            event_at: None,
            handover: false,
        };
        soak.store
            .put_command(None, &Command::new(spec, soak.sim.now()))
            .await
            .expect("command");
        soak.checker.check(&soak.sim).await;
        assert_eq!(
            counted(&soak, Violation::DisruptedAgainstDoNotDisrupt, &before),
            1
        );

        // A fleet far dearer than its pods need, for an hour.
        let before = soak.checker.counts().clone();
        let catalog = soak.cloud.catalog().await.expect("catalog");
        let dearest = catalog
            .offerings
            .iter()
            .max_by(|a, b| a.price.total_cmp(&b.price))
            .expect("offerings")
            .clone();
        for k in 0..10 {
            let mut r = first.request.clone();
            r.claim_id = format!("on-demand-dear{k}");
            r.client_token = r.claim_id.clone();
            r.options = vec![dearest.clone()];
            soak.cloud.launch(&r).await.expect("launch");
        }
        for _ in 0..61 {
            later(&mut soak, SignedDuration::from_mins(1)).await;
        }
        assert_eq!(
            counted(&soak, Violation::CostAboveBound, &before),
            1,
            "one excursion: {:?}",
            soak.checker.examples()
        );
        assert!(soak.checker.worst_window_ratio > soak.checker.bounds.cost_factor);
    });
}

#[test]
fn fault_schedules_follow_the_seed_and_their_rates() {
    let start = Timestamp::UNIX_EPOCH;
    let a = Faults::new(5, start, SignedDuration::from_hours(24), true);
    let b = Faults::new(5, start, SignedDuration::from_hours(24), true);
    let c = Faults::new(6, start, SignedDuration::from_hours(24), true);
    assert_eq!(a.due, b.due);
    assert_ne!(a.due, c.due);
    assert!(
        Faults::new(5, start, SignedDuration::from_hours(24), false)
            .due
            .is_empty()
    );
    let spot = a
        .due
        .iter()
        .filter(|(_, k)| *k == FaultKind::SpotInterruption)
        .count();
    // 1.5 an hour over 24 hours: 36 expected; a Poisson count within ±50 %.
    assert!((18..=54).contains(&spot), "{spot}");
    assert!(
        a.due
            .iter()
            .all(|(t, _)| *t >= start + SignedDuration::from_mins(10)
                && *t < start + SignedDuration::from_hours(24))
    );
    for (kind, _) in FaultKind::RATES {
        assert!(
            a.due.iter().any(|(_, k)| *k == kind),
            "{kind:?} never scheduled in a day"
        );
    }
}
