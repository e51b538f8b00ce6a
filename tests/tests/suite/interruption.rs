//! The interruption function and the drain-and-terminate machine on the
//! in-memory adapters: the spot walkthrough, every fixture event, the three
//! rebalance policies, duplicates and reordering, a PDB that holds until
//! the deadline, a replacement that finds no capacity, and a crash between
//! every two steps of a command.

use nodewright::handlers::interruption::{MessageOutcome, Record};
use nodewright::handlers::termination::Started;
use nodewright::ports::{Cloud, Cluster, OfferingKey, SignedDuration, Store};
use nodewright::provisioning::claim::Claim;
use nodewright::sim::{ClusterDriver, SimSettings};
use nodewright_tests::interruption as cases;
use nodewright_tests::sim::{MemSim, run, scenario_file};

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The fixture's records for `instance`, as if sent now.
fn records_now(sim: &MemSim, name: &str, instance: &str) -> Vec<Record> {
    cases::records(name, instance, sim.now())
}

/// The small spot scenario, run until its node is up.
async fn spot_node(settings: SimSettings) -> (MemSim, Claim) {
    let s = scenario_file("spot-drain.yaml");
    let (sim, failures) = run(&s, settings).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let claims = sim.store.claims().await.expect("claims");
    assert_eq!(claims.len(), 1, "{claims:#?}");
    (sim, claims[0].clone())
}

#[tokio::test]
async fn the_spot_walkthrough_drains_onto_a_replacement_without_breaking_the_budget() {
    init_logs();
    let s = scenario_file("spot-interruption.yaml");
    let (sim, failures) = run(&s, SimSettings::default()).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The interrupted claim was released exactly once (by the drain or by
    // the state-change function, whichever came first — never both).
    let removed: Vec<&String> = sim.removed_nodes.iter().collect();
    assert_eq!(removed.len(), 1);
    let deleted = sim.store.inner().deleted_claims();
    assert_eq!(
        deleted.iter().filter(|id| *id == removed[0]).count(),
        1,
        "{deleted:?}"
    );
    // The replacement is another offering than the interrupted one, and it
    // registered before the first eviction.
    let instances = sim.sim_cloud.as_ref().expect("sim cloud").all_instances();
    let interrupted = instances
        .iter()
        .find(|i| i.instance.claim_id.as_deref() == Some(removed[0].as_str()))
        .expect("interrupted");
    let replacement_id = sim.replacements.iter().next().expect("a replacement");
    let replacement = sim
        .store
        .claims()
        .await
        .expect("claims")
        .into_iter()
        .find(|c| &c.id == replacement_id)
        .expect("replacement claim");
    let bought = replacement.instance.clone().expect("replacement launched");
    assert_ne!(
        (bought.instance_type.as_str(), bought.zone.as_str()),
        (
            interrupted.instance.instance_type.as_str(),
            interrupted.instance.zone.as_str()
        ),
        "the replacement avoided the interrupted offering"
    );
    let registered = replacement.registered_at.expect("replacement registered");
    let events = sim.cluster.events();
    let first_eviction = events
        .iter()
        .filter(|(_, e)| e.reason == "Evicted")
        .map(|(t, _)| *t)
        .min()
        .expect("evictions");
    assert!(
        first_eviction >= registered,
        "evicted at {first_eviction}, replacement registered at {registered}"
    );
    assert!(events.iter().filter(|(_, e)| e.reason == "Evicted").count() >= 110);
}

#[tokio::test]
async fn every_fixture_event_ends_as_documented() {
    init_logs();
    let cases: [(&str, &[&str]); 10] = [
        ("spot-interruption.json", &["removing"]),
        ("capacity-reservation-interruption.json", &["removing"]),
        ("scheduled-change.json", &["removing"]),
        ("state-change-stopping.json", &["removing"]),
        // The default rebalance policy is Karpenter's: nothing.
        ("rebalance-recommendation.json", &["ignored"]),
        ("unknown-instance.json", &["ignored"]),
        ("foreign-cluster.json", &["ignored"]),
        ("unsupported-detail-type.json", &["ignored"]),
        ("malformed.json", &["dropped", "dropped"]),
        (
            "duplicate-spot-interruption.json",
            &["removing", "removing"],
        ),
    ];
    for (file, want) in cases {
        let (sim, claim) = spot_node(SimSettings::default()).await;
        let instance = claim.instance_id().expect("launched").to_owned();
        let report = cases::deliver(&sim, &records_now(&sim, file, &instance)).await;
        assert!(report.failures.is_empty(), "{file}: {report:?}");
        assert_eq!(cases::kinds(&report), want, "{file}: {report:?}");
        let commands = sim.store.commands().await.expect("commands");
        let removing = want.contains(&"removing");
        assert_eq!(
            commands.len(),
            usize::from(removing),
            "{file}: one command at most: {commands:#?}"
        );
        let node = claim.node_name.clone().expect("registered");
        assert_eq!(
            cases::node_tainted(&sim.cluster.all_nodes(), &node),
            removing,
            "{file}: tainted only when removing"
        );
        if file == "duplicate-spot-interruption.json" {
            let MessageOutcome::Removing(second) = &report.outcomes[1].1 else {
                panic!("{report:?}")
            };
            assert!(matches!(second[0], Started::Existing { .. }), "{second:?}");
        }
        if file == "spot-interruption.json" {
            // The interrupted offering is avoided for a while.
            let i = claim.instance.as_ref().expect("instance");
            let key = OfferingKey {
                capacity_type: i.capacity_type.clone(),
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
            };
            assert!(
                sim.store
                    .unavailable_offerings(sim.now())
                    .await
                    .expect("unavailable")
                    .contains(&key)
            );
        }
    }
}

/// The spot pool with a rebalance policy annotation.
async fn with_policy(policy: &str) -> (MemSim, Claim) {
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    cases::set_rebalance_policy(&mut sim, policy).await;
    (sim, claim)
}

#[tokio::test]
async fn the_three_rebalance_policies() {
    init_logs();
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    cases::rebalance_ignore(&mut sim, &claim).await;
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    cases::rebalance_cordon(&mut sim, &claim).await;
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    cases::rebalance_replace(&mut sim, &claim).await;
}

#[tokio::test]
async fn duplicates_and_reordering_never_start_a_second_removal() {
    init_logs();
    // The same warning twice, then again a minute later: one command, one replacement.
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    let id = claim.instance_id().expect("id").to_owned();
    cases::deliver(&sim, &records_now(&sim, "spot-interruption.json", &id)).await;
    cases::deliver(
        &sim,
        &records_now(&sim, "duplicate-spot-interruption.json", &id),
    )
    .await;
    sim.run_for(SignedDuration::from_mins(1)).await;
    cases::deliver(&sim, &records_now(&sim, "spot-interruption.json", &id)).await;
    sim.run_for(SignedDuration::from_mins(3)).await;
    assert_eq!(sim.replacements.len(), 1, "{:?}", sim.replacements);
    assert_eq!(sim.sim_cloud.as_ref().expect("cloud").launches(), 2);

    // Terminated first, warning after: the claim is gone, the warning is ignored.
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    let id = claim.instance_id().expect("id").to_owned();
    sim.cloud
        .terminate(std::slice::from_ref(&id))
        .await
        .expect("terminate");
    sim.run_for(SignedDuration::from_secs(30)).await;
    let report = cases::deliver(&sim, &records_now(&sim, "spot-interruption.json", &id)).await;
    assert_eq!(cases::kinds(&report), ["ignored"], "{report:?}");
    assert!(sim.store.commands().await.expect("commands").is_empty());

    // A warning for a node already being removed without a deadline brings the deadline forward.
    let (sim, claim) = with_policy("Replace").await;
    let id = claim.instance_id().expect("id").to_owned();
    cases::deliver(
        &sim,
        &records_now(&sim, "rebalance-recommendation.json", &id),
    )
    .await;
    let report = cases::deliver(&sim, &records_now(&sim, "spot-interruption.json", &id)).await;
    let MessageOutcome::Removing(started) = &report.outcomes[0].1 else {
        panic!("{report:?}")
    };
    assert!(
        matches!(
            started[0],
            Started::Existing {
                tightened: true,
                ..
            }
        ),
        "{started:?}"
    );
    let commands = sim.store.commands().await.expect("commands");
    assert_eq!(commands.len(), 1);
    assert!(commands[0].spec.deadline.is_some());
}

#[tokio::test]
async fn a_budget_that_allows_nothing_holds_until_the_deadline_then_the_pods_are_deleted() {
    init_logs();
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    cases::budget_holds_until_the_deadline(&mut sim, &claim).await;
}

#[tokio::test]
async fn a_replacement_out_of_capacity_falls_back_to_another_offering() {
    init_logs();
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    cases::replacement_falls_back(&mut sim, &claim).await;
}

/// The end state a removal converges to, whatever happened on the way.
async fn end_state(sim: &MemSim) -> (usize, usize, usize, usize) {
    let nodes = sim.cluster.all_nodes();
    let pods = sim
        .cluster
        .port()
        .scheduled_pods()
        .await
        .expect("pods")
        .len();
    let commands = sim.store.commands().await.expect("commands").len();
    (
        nodes.len(),
        pods,
        commands,
        sim.sim_cloud.as_ref().expect("cloud").launches(),
    )
}

#[tokio::test]
async fn a_crash_between_any_two_steps_converges_to_the_same_end() {
    init_logs();
    let (mut reference, claim) = spot_node(SimSettings::default()).await;
    cases::deliver(
        &reference,
        &records_now(
            &reference,
            "spot-interruption.json",
            claim.instance_id().expect("id"),
        ),
    )
    .await;
    reference.run_for(SignedDuration::from_mins(4)).await;
    let want = end_state(&reference).await;
    assert_eq!(
        want,
        (1, 10, 0, 2),
        "one node (the replacement), ten pods on it, no command, two launches"
    );
    // Crash at the 1st, 2nd, … command write until a run has no write left to crash at.
    for k in 0..20 {
        let (mut sim, claim) = spot_node(SimSettings::default()).await;
        sim.store.crash_after_command_writes(k);
        // A message whose handling crashed comes back, as SQS redelivers it.
        let rs = records_now(
            &sim,
            "spot-interruption.json",
            claim.instance_id().expect("id"),
        );
        for _ in 0..3 {
            if cases::deliver(&sim, &rs).await.failures.is_empty() {
                break;
            }
        }
        sim.run_for(SignedDuration::from_mins(4)).await;
        let crashed = !sim.store.crash_pending();
        assert_eq!(
            end_state(&sim).await,
            want,
            "crash before command write {k}"
        );
        assert_eq!(
            sim.replacements.len(),
            1,
            "crash before command write {k}: {:?}",
            sim.replacements
        );
        if !crashed {
            assert!(k >= 3, "the machine writes its command more than {k} times");
            return;
        }
    }
    panic!("a removal wrote its command more than 20 times");
}
