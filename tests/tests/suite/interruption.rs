//! The interruption function and the drain-and-terminate machine on the
//! in-memory adapters: the spot walkthrough, every fixture event, the three
//! rebalance policies, duplicates and reordering, a PDB that holds until
//! the deadline, a replacement that finds no capacity, and a crash between
//! every two steps of a command.

use nodewright::handlers::interruption::{MessageOutcome, Record};
use nodewright::handlers::termination::Started;
use nodewright::model::claim::Claim;
use nodewright::model::{OfferingKey, SignedDuration};
use nodewright::ports::{Cloud, Cluster, Store};
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

/// When a fixture's removal must be done by, from the time it is delivered.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// Two minutes' notice less the 15-s margin.
    Notice,
    /// At once (hibernation, a stopping instance).
    Now,
    /// A date the event carries.
    At(&'static str),
}

/// Every file in `functions/interruption/events/`, as AWS would send it,
/// ends as its README says — real payloads (AWS's documentation, NTH's,
/// Karpenter's and Cloud Custodian's fixtures) included: ARNs and bare ids,
/// odd envelopes, a wrong weekday, hibernation, a reservation's
/// termination time, a Health event about a dedicated host. A file with no
/// expected ending here fails the test.
#[tokio::test]
async fn every_fixture_event_ends_as_documented() {
    use Deadline::*;
    init_logs();
    let cases: &[(&str, &[&str], Option<Deadline>)] = &[
        ("spot-interruption.json", &["removing"], Some(Notice)),
        ("spot-interruption-hibernate.json", &["removing"], Some(Now)),
        (
            "spot-interruption-no-time.json",
            &["removing"],
            Some(Notice),
        ),
        (
            "duplicate-spot-interruption.json",
            &["removing", "removing"],
            Some(Notice),
        ),
        (
            "capacity-reservation-interruption.json",
            &["removing"],
            Some(Notice),
        ),
        (
            "scheduled-change.json",
            &["removing"],
            Some(At("2026-12-04T09:00:00Z")),
        ),
        (
            "scheduled-change-retirement-arn.json",
            &["removing"],
            Some(At("2026-12-04T09:00:00Z")),
        ),
        (
            "scheduled-change-nth.json",
            &["removing"],
            Some(At("2016-06-05T15:10:09Z")),
        ),
        (
            "scheduled-change-persistent-retirement.json",
            &["removing"],
            Some(At("2018-11-01T22:00:00Z")),
        ),
        ("state-change-stopping.json", &["removing"], Some(Now)),
        // The default rebalance policy is Karpenter's: nothing.
        ("rebalance-recommendation.json", &["ignored"], None),
        (
            "rebalance-recommendation-odd-envelope.json",
            &["ignored"],
            None,
        ),
        ("scheduled-change-dedicated-host.json", &["ignored"], None),
        ("state-change-unknown-state.json", &["ignored"], None),
        ("unknown-instance.json", &["ignored"], None),
        ("foreign-cluster.json", &["ignored"], None),
        ("unsupported-detail-type.json", &["ignored"], None),
        ("malformed.json", &["dropped", "dropped", "dropped"], None),
    ];
    let dir = format!(
        "{}/../functions/interruption/events",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("events")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = cases.iter().map(|(f, _, _)| (*f).to_owned()).collect();
    listed.sort();
    assert_eq!(
        files, listed,
        "every fixture has an expected ending, and only fixtures do"
    );
    for (file, want, deadline) in cases {
        let (sim, claim) = spot_node(SimSettings::default()).await;
        let instance = claim.instance_id().expect("launched").to_owned();
        let delivered = sim.now();
        let report = cases::deliver(&sim, &records_now(&sim, file, &instance)).await;
        assert!(report.failures.is_empty(), "{file}: {report:?}");
        assert_eq!(cases::kinds(&report), *want, "{file}: {report:?}");
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
            "{file}: tainted (in the invocation) only when removing"
        );
        if let Some(deadline) = deadline {
            let want = match deadline {
                Notice => delivered + SignedDuration::from_secs(105),
                Now => delivered,
                At(t) => t.parse().expect("time"),
            };
            assert_eq!(commands[0].spec.deadline, Some(want), "{file}: deadline");
        }
        if *file == "duplicate-spot-interruption.json" {
            let MessageOutcome::Removing(second) = &report.outcomes[1].1 else {
                panic!("{report:?}")
            };
            assert!(matches!(second[0], Started::Existing { .. }), "{second:?}");
        }
        if *file == "spot-interruption.json" {
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
    // A reservation's own termination time decides, not the usual notice.
    let (sim, claim) = spot_node(SimSettings::default()).await;
    let at = sim.now() + SignedDuration::from_secs(70);
    let rs: Vec<Record> = records_now(
        &sim,
        "capacity-reservation-interruption.json",
        claim.instance_id().expect("launched"),
    )
    .into_iter()
    .map(|r| Record {
        body: r.body.replace(
            &(sim.now() + SignedDuration::from_mins(2)).to_string(),
            &at.to_string(),
        ),
        ..r
    })
    .collect();
    cases::deliver(&sim, &rs).await;
    let commands = sim.store.commands().await.expect("commands");
    assert_eq!(
        commands[0].spec.deadline,
        Some(at - SignedDuration::from_secs(15)),
        "instance-termination-time less the margin"
    );
}

/// A failure on our side never deletes a message: the table's KMS key
/// refusing the command's write (an access error, which used to count as
/// "can never succeed" and drop the message, NTH #360/#1284) hands it
/// back; SQS redelivers it and, once the key works again, it is handled.
#[tokio::test]
async fn a_message_whose_handling_failed_is_returned_whatever_the_failure() {
    init_logs();
    let (mut sim, claim) = spot_node(SimSettings::default()).await;
    let id = claim.instance_id().expect("id").to_owned();
    let rs = records_now(&sim, "spot-interruption.json", &id);
    sim.store.deny_next_writes(1);
    let report = cases::deliver(&sim, &rs).await;
    assert_eq!(sim.store.writes_denied(), 1);
    assert_eq!(
        report.failures,
        vec![rs[0].message_id.clone()],
        "returned for a retry: {report:?}"
    );
    assert!(report.outcomes.is_empty(), "{report:?}");
    assert!(sim.store.commands().await.expect("commands").is_empty());
    // The queue's visibility timeout later, the same message again.
    sim.run_for(sim.settings.redelivery).await;
    let report = cases::deliver(&sim, &rs).await;
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(cases::kinds(&report), ["removing"]);
}

/// Messages the invocation had no time left to start go back untouched.
#[tokio::test]
async fn messages_past_the_invocation_s_time_go_back_untouched() {
    init_logs();
    let (sim, claim) = spot_node(SimSettings::default()).await;
    let rs = records_now(
        &sim,
        "duplicate-spot-interruption.json",
        claim.instance_id().expect("id"),
    );
    let config = nodewright::handlers::config::load(&sim.store)
        .await
        .expect("config");
    let report = nodewright::handlers::interruption::handle_batch(
        &sim.ports(),
        &config,
        &config.settings,
        &nodewright::handlers::interruption::InterruptionSettings::default(),
        &rs,
        sim.now(),
    )
    .await
    .expect("batch");
    assert_eq!(
        report.failures,
        rs.iter().map(|r| r.message_id.clone()).collect::<Vec<_>>()
    );
    assert!(sim.store.commands().await.expect("commands").is_empty());
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
