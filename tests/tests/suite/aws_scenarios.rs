//! The provisioning scenarios on the real AWS adapters: `Ec2Cloud` and
//! `DynamoStore` against the moto emulator, with the in-memory cluster.
//! The same scenario files and expectations as on the in-memory adapters.

use std::sync::Arc;

use nodewright::aws::Ec2Cloud;
use nodewright::aws::prices::SeededPrices;
use nodewright::model::{OfferingKey, Timestamp};
use nodewright::ports::Store;
use nodewright::sim::scenario::{self, WALKTHROUGH_1};
use nodewright::sim::{FaultyCloud, SimClock, SimSettings, Simulation};
use nodewright_tests::aws::{Ec2Fixture, dynamo_store};

const REGION: &str = "ap-south-1";

/// Prices for the walkthrough's types, so the run does not depend on the Pricing API.
fn seeded(zones: &[String]) -> SeededPrices {
    let mut p = SeededPrices::default();
    for (ty, od) in [
        ("r6gd.xlarge", 0.2304),
        ("r6g.xlarge", 0.2016),
        ("m6g.large", 0.077),
    ] {
        p.on_demand.insert(ty.to_owned(), od);
        for z in zones {
            p.spot.insert((ty.to_owned(), z.clone()), od * 0.35);
        }
    }
    p
}

/// A simulation whose cloud and store are the real adapters. The clock
/// starts at the real time: moto stamps launches with it.
async fn on_aws() -> (
    Simulation<FaultyCloud<Arc<Ec2Cloud<SeededPrices>>>, nodewright::aws::DynamoStore>,
    Ec2Fixture,
) {
    let f = Ec2Fixture::new(REGION, "1.32").await;
    let cloud = Ec2Cloud::with_prices(&f.config, f.settings(), seeded(&f.zones)).expect("adapter");
    let store = dynamo_store(REGION).await;
    let sim = Simulation::new(
        SimClock::starting_at(Timestamp::now()),
        FaultyCloud::new(Arc::new(cloud)),
        None,
        store,
        SimSettings::default(),
    );
    (sim, f)
}

/// Loads a scenario with the fixture's NodeClass as its `default`.
async fn load_with_fixture_class(
    sim: &mut Simulation<FaultyCloud<Arc<Ec2Cloud<SeededPrices>>>, nodewright::aws::DynamoStore>,
    s: &scenario::Scenario,
    f: &Ec2Fixture,
) {
    scenario::load(sim, s).await.expect("loads");
    f.store_node_class(&sim.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walkthrough_one_on_ec2_and_dynamodb() {
    let s = scenario::parse(WALKTHROUGH_1).expect("built-in scenario");
    let (mut sim, f) = on_aws().await;
    load_with_fixture_class(&mut sim, &s, &f).await;
    scenario::run(&mut sim, &s).await.expect("runs");
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The instance exists in EC2, tagged with its claim, and the claim is in DynamoDB.
    let claims = sim.store.claims().await.expect("claims");
    assert_eq!(claims.len(), 1);
    let tagged = f.instances_of_claim(&claims[0].id).await;
    assert_eq!(
        tagged.len(),
        1,
        "exactly one instance carries the claim's tag"
    );
    assert_eq!(
        tagged[0].instance_type().map(|t| t.as_str()),
        Some("r6gd.xlarge")
    );
}

/// A settled cluster costs the state table one GetItem per tick, not a
/// Scan: over five quiet minutes of provisioner and disruption ticks (about
/// 300 and 150) nothing moves `state#version`, so the state view is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_cluster_scans_the_state_table_once_not_every_tick() {
    let s = scenario::parse(WALKTHROUGH_1).expect("built-in scenario");
    let (mut sim, f) = on_aws().await;
    load_with_fixture_class(&mut sim, &s, &f).await;
    scenario::run(&mut sim, &s).await.expect("runs");
    assert!(scenario::check(&sim, &s.expect).await.is_empty());
    // Let the node's registration and the first decisions' bookkeeping land.
    sim.run_for(nodewright::model::SignedDuration::from_mins(2))
        .await;
    let before = sim.store.requests();
    sim.run_for(nodewright::model::SignedDuration::from_mins(5))
        .await;
    let used = sim.store.requests() - before;
    assert!(
        used.state_scans <= 1,
        "{used:?}: Scans of the state table in five quiet minutes"
    );
    // Reads per second of ticking (provisioner every 1 s, disruption every
    // 2 s; the simulator's own observation reads through the same store):
    // the figure the running-cost model takes.
    let per_second = used.get_item as f64 / 300.0;
    eprintln!("five quiet minutes on DynamoDB: {used:?} ({per_second:.1} GetItem/s)");
    assert!(per_second < 12.0, "{used:?}");
    assert_eq!(
        used.transact_write, 0,
        "no claim, usage or command was written: {used:?}"
    );
    assert_eq!(
        sim.store.claims().await.expect("claims").len(),
        1,
        "nothing launched or removed meanwhile"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_moves_the_launch_to_another_zone_on_ec2() {
    let mut s = scenario::parse(WALKTHROUGH_1).expect("built-in scenario");
    s.objects[1]["spec"]["template"]["spec"]["nodeSelector"]
        .as_object_mut()
        .expect("nodeSelector")
        .remove("topology.kubernetes.io/zone");
    s.expect.nodes_with.clear();
    let (mut sim, f) = on_aws().await;
    let gone = OfferingKey {
        capacity_type: "on-demand".into(),
        instance_type: "r6gd.xlarge".into(),
        zone: "ap-south-1a".into(),
    };
    sim.cloud.remove_capacity(gone.clone());
    load_with_fixture_class(&mut sim, &s, &f).await;
    scenario::run(&mut sim, &s).await.expect("runs");
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");
    let unavailable = sim
        .store
        .unavailable_offerings(sim.now())
        .await
        .expect("store");
    assert!(unavailable.contains(&gone), "{unavailable:?}");
    let nodes = sim.cluster.all_nodes();
    let zone = nodes[0]
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("topology.kubernetes.io/zone"))
        .cloned();
    assert_ne!(zone.as_deref(), Some("ap-south-1a"));
}

/// 20,000 pending pods that fit nowhere, on DynamoDB (the emulator refuses
/// items over 400 KB, as DynamoDB does): the window and the parked pods fit
/// in the batch record, every pod is parked and reported once (a bounded
/// number a solve), and the record stays far below the item limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_unschedulable_pods_fit_the_batch_record() {
    let mut s = scenario::parse(WALKTHROUGH_1).expect("built-in scenario");
    s.actions.clear();
    s.expect = Default::default();
    let inflate = &mut s.objects[1];
    inflate["spec"]["replicas"] = 20_000.into();
    inflate["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
        "1000".into();
    let (mut sim, f) = on_aws().await;
    load_with_fixture_class(&mut sim, &s, &f).await;
    sim.run_for(nodewright::model::SignedDuration::from_secs(40))
        .await;
    assert_eq!(sim.pending().await, 20_000);
    assert_eq!(
        sim.cloud.launch_calls(),
        0,
        "nothing can fit: nothing launched"
    );
    let batch = sim
        .store
        .batch()
        .await
        .expect("the batch record reads")
        .expect("written");
    // Every pod parked: a few hundred with their reason, the rest by hash.
    let by_hash: usize = batch.parked_more.iter().map(|g| g.pods.len()).sum();
    assert!(
        !batch.parked.is_empty() && by_hash > 0,
        "{} with a reason, {by_hash} by hash",
        batch.parked.len()
    );
    assert_eq!(
        batch.parked.len() + by_hash,
        20_000,
        "all of them parked: none solved again until something changes"
    );
    let bytes = serde_json::to_string(&batch).expect("serialises").len();
    assert!(bytes < 300_000, "{bytes} bytes in the batch record");
    // Each pod reported once (a few thousand a solve), none twice.
    let events = sim.cluster.events();
    let reported: Vec<&str> = events
        .iter()
        .filter(|(_, e)| e.reason == "FailedScheduling")
        .map(|(_, e)| e.name.as_str())
        .collect();
    let once: std::collections::BTreeSet<&str> = reported.iter().copied().collect();
    assert_eq!(
        (reported.len(), once.len()),
        (20_000, 20_000),
        "FailedScheduling events, and pods they name"
    );
}

/// The module's default deployment: the provisioner's invocation runs the
/// disruption loop beside its own (one always-on invocation a minute, not
/// two), each loop under its own lease — on the emulator's EC2 and
/// DynamoDB, in real time. While it runs, a separate invocation of either
/// function exits at once; once it is over, both leases are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provisioner_invocation_runs_the_disruption_loop_under_its_own_lease() {
    use nodewright::model::SignedDuration;
    use nodewright::ports::{Ports, SystemClock};
    use nodewright::runtime::{Loops, Ticks, scheduled_invocation};

    let f = Ec2Fixture::new(REGION, "1.32").await;
    let ports = Ports {
        cloud: Ec2Cloud::with_prices(&f.config, f.settings(), seeded(&f.zones)).expect("adapter"),
        cluster: nodewright::sim::SimCluster::new(SimClock::starting_at(Timestamp::now())),
        store: dynamo_store(REGION).await,
        clock: SystemClock,
    };
    let until = |s: i64| Timestamp::now() + SignedDuration::from_secs(s);
    // The others start once both leases are seen held (not after a fixed
    // sleep: on a loaded machine the emulator may answer the first
    // acquisition late); a long deadline keeps them held meanwhile.
    let both = scheduled_invocation(&ports, "scheduled-1", until(15), Loops::BOTH);
    let others = async {
        for name in [
            nodewright::handlers::provisioner::LEASE,
            nodewright::handlers::disruption::LEASE,
        ] {
            while lease_is_free(&ports.store, name).await {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        let alone = scheduled_invocation(&ports, "scheduled-2", until(3), Loops::PROVISIONER)
            .await
            .expect("provisioner alone");
        let mut d = nodewright::handlers::disruption::Disruption::new(
            &ports,
            nodewright::handlers::disruption::DisruptionSettings::default(),
            "disruption-2",
        );
        let disruption = d
            .run_until(until(3), |t| tokio::time::sleep(t.unsigned_abs()))
            .await
            .expect("disruption alone");
        (alone, disruption)
    };
    let (both, (alone, disruption_alone)) = tokio::join!(both, others);
    let both = both.expect("the invocation");
    // A loop's first tick comes right after its lease, whatever the pace.
    assert!(both.provisioner >= 1, "{both:?}: the provisioner ticked");
    assert!(
        both.disruption.is_some_and(|t| t >= 1),
        "{both:?}: the disruption loop ticked beside it"
    );
    assert_eq!(
        alone,
        Ticks {
            provisioner: 0,
            disruption: None
        },
        "the provisioner lease was held"
    );
    assert_eq!(disruption_alone, 0, "the disruption lease was held");
    // Both leases released on the way out: the next invocation ticks. On
    // an empty cluster it writes nothing and reads the state table's view
    // at most once; its GetItems per second are the deployed shape's figure
    // for the running-cost model.
    let (next, used, seconds) = measured(&ports.store, async {
        scheduled_invocation(&ports, "scheduled-3", until(8), Loops::BOTH)
            .await
            .expect("the next invocation")
    })
    .await;
    assert!(
        next.provisioner >= 1 && next.disruption.is_some_and(|t| t >= 1),
        "{next:?}"
    );
    eprintln!(
        "a quiet invocation with both loops: {next:?}, {used:?} in {seconds:.1} s ({:.1} GetItem/s)",
        used.get_item as f64 / seconds
    );
    assert!(used.state_scans <= 1, "{used:?}");
    assert_eq!(used.transact_write, 0, "{used:?}");
    // The same quiet minute with `NODEWRIGHT_END_WHEN_QUIET`: one tick per
    // loop, then both leases are released; its requests are the module's
    // default deployment's figure per invocation for the running-cost model.
    let economy = Loops {
        end_when_quiet: true,
        gauges: false,
        ..Loops::BOTH
    };
    let (quiet, used, seconds) = measured(&ports.store, async {
        scheduled_invocation(&ports, "scheduled-4", until(30), economy)
            .await
            .expect("the quiet invocation")
    })
    .await;
    assert_eq!(
        quiet,
        Ticks {
            provisioner: 1,
            disruption: Some(1)
        },
        "a quiet invocation that ends when quiet ticks once per loop"
    );
    eprintln!("a quiet invocation ending when quiet: {used:?} in {seconds:.2} s");
    assert_eq!(used.transact_write, 0, "{used:?}");
    assert!(lease_is_free(&ports.store, nodewright::handlers::provisioner::LEASE).await);
    assert!(lease_is_free(&ports.store, nodewright::handlers::disruption::LEASE).await);
    // The invocation the wake queue brings a few seconds later: no decision
    // is due (once a minute when ending when quiet), so it reads the
    // version markers and takes and gives back both loops' leases — the
    // running-cost model's figure for a wake.
    let (woken, used, seconds) = measured(&ports.store, async {
        scheduled_invocation(&ports, "woken-5", until(30), economy)
            .await
            .expect("the woken invocation")
    })
    .await;
    assert_eq!(
        woken,
        Ticks {
            provisioner: 1,
            disruption: Some(1)
        }
    );
    eprintln!("a woken invocation, no decision due: {used:?} in {seconds:.2} s");
    assert_eq!(used.state_scans, 0, "nothing was written: {used:?}");
    assert_eq!(used.transact_write, 0, "{used:?}");
}

/// What `invocation` returns, the store requests it made and its wall
/// seconds (printed for the running-cost model, never asserted on).
async fn measured<T>(
    store: &nodewright::aws::DynamoStore,
    invocation: impl std::future::Future<Output = T>,
) -> (T, nodewright::aws::Requests, f64) {
    let (before, started) = (store.requests(), std::time::Instant::now());
    let out = invocation.await;
    (
        out,
        store.requests() - before,
        started.elapsed().as_secs_f64(),
    )
}

/// Whether lease `name` is free, asked the only way the store allows: by
/// taking it with an expiry already past, which a later acquisition
/// overwrites as if nothing were there.
async fn lease_is_free(store: &impl Store, name: &str) -> bool {
    let probe = nodewright::model::Lease {
        name: name.to_owned(),
        holder: "probe".to_owned(),
        expires_at: Timestamp::UNIX_EPOCH,
    };
    store
        .acquire_lease(&probe, Timestamp::now())
        .await
        .expect("the store answers")
}

/// Four provisioner invocations at once (a late schedule overlapping the
/// previous minute's, a retry, a hand-run one) against the emulator's
/// DynamoDB and EC2, three pods pending: one takes the lease and launches
/// the one node they need; the other three exit at once, and nothing is
/// launched twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_provisioner_invocations_at_once_launch_once() {
    use nodewright::model::SignedDuration;
    use nodewright::ports::{Ports, SystemClock};
    use nodewright::runtime::{Loops, scheduled_invocation};

    let s = scenario::parse(WALKTHROUGH_1).expect("built-in scenario");
    let (mut sim, f) = on_aws().await;
    load_with_fixture_class(&mut sim, &s, &f).await;
    sim.cluster.scale("default", "inflate", 3).expect("scaled");
    sim.cluster.reconcile(); // the ReplicaSet controller creates the pods
    sim.cluster.reconcile(); // kube-scheduler finds no node for them
    let ports = Ports {
        cloud: Ec2Cloud::with_prices(&f.config, f.settings(), seeded(&f.zones)).expect("adapter"),
        cluster: sim.cluster.clone(),
        store: sim.store.clone(),
        clock: SystemClock,
    };
    assert_eq!(
        nodewright::ports::Cluster::pending_pods(&ports.cluster)
            .await
            .expect("pods")
            .len(),
        3
    );
    // Long enough for the holder to close the batch window and launch even
    // when the shared emulator answers slowly.
    let until = Timestamp::now() + SignedDuration::from_secs(12);
    let runs = futures_util::future::join_all((0..4).map(|i| {
        let ports = &ports;
        async move {
            scheduled_invocation(ports, &format!("invocation-{i}"), until, Loops::PROVISIONER)
                .await
                .expect("invocation")
        }
    }))
    .await;
    let holders: Vec<_> = runs.iter().filter(|t| t.provisioner > 0).collect();
    assert_eq!(holders.len(), 1, "one lease holder: {runs:?}");
    let claims = sim.store.claims().await.expect("claims");
    assert_eq!(claims.len(), 1, "one claim for the three pods: {claims:#?}");
    let instances = f.instances_of_claim(&claims[0].id).await;
    assert_eq!(instances.len(), 1, "one instance for the claim");
}

type CrashSim = Simulation<
    FaultyCloud<Arc<Ec2Cloud<SeededPrices>>>,
    nodewright::sim::FaultyStore<nodewright::aws::DynamoStore>,
>;

/// `s` loaded and run on the emulator's EC2 and DynamoDB (us-east-1, the
/// fixture's NodeClass), the store able to crash at a write.
async fn on_aws_crashable(s: &scenario::Scenario) -> (CrashSim, Ec2Fixture) {
    on_aws_crashing(s, |_| {}).await
}

/// [`on_aws_crashable`], with `crash` arming the faults before the run.
async fn on_aws_crashing(
    s: &scenario::Scenario,
    crash: impl FnOnce(&CrashSim),
) -> (CrashSim, Ec2Fixture) {
    use nodewright_tests::real;
    let f = Ec2Fixture::new(real::REGION, "1.32").await;
    let cloud =
        Ec2Cloud::with_prices(&f.config, f.settings(), real::seeded(&f.zones)).expect("adapter");
    let store = nodewright::sim::FaultyStore::new(dynamo_store(real::REGION).await);
    // Ticks every 5 s instead of 1–2 s: the emulator is one process that
    // every AWS test shares, and these tests run a dozen simulated minutes
    // per crash point; the handlers' decisions do not depend on the pace.
    let mut settings = SimSettings::default();
    settings.provisioner.poll = nodewright::model::SignedDuration::from_secs(5);
    settings.disruption.poll = nodewright::model::SignedDuration::from_secs(5);
    let mut sim = Simulation::new(
        SimClock::starting_at(Timestamp::now()),
        FaultyCloud::new(Arc::new(cloud)),
        None,
        store,
        settings,
    );
    scenario::load(&mut sim, s).await.expect("loads");
    f.store_node_class(&sim.store).await;
    crash(&sim);
    Box::pin(scenario::run(&mut sim, s)).await.expect("runs");
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");
    (sim, f)
}

/// Provisioning's two crash points on the emulator's EC2 and DynamoDB: an
/// invocation that dies after writing the claim and before CreateFleet
/// (the launch fails before reaching EC2), and one that dies after
/// CreateFleet and before recording the instance on the claim (the claim
/// update fails; the next attempt finds the instance by its claim tag and
/// adopts it). Each time the walkthrough ends as without a crash, and no
/// claim ever has two instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_crashing_at_either_step_launches_once_per_claim_on_ec2_and_dynamodb() {
    // One spot node for ten pods; its expectations: one node, all bound.
    let s = nodewright_tests::sim::scenario_file("spot-drain.yaml");
    for (point, crash) in [
        (
            "after the claim's write, before CreateFleet",
            (|sim: &CrashSim| sim.cloud.fail_next_launches(1)) as fn(&CrashSim),
        ),
        (
            "after CreateFleet, before the instance's record",
            |sim: &CrashSim| sim.store.fail_next_claim_updates(1),
        ),
    ] {
        let (sim, f) = Box::pin(on_aws_crashing(&s, crash)).await;
        assert!(
            sim.cloud.launch_calls() >= 2,
            "crash {point}: the launch was tried again"
        );
        let claims = sim.store.claims().await.expect("claims");
        assert_eq!(claims.len(), 1, "crash {point}: one claim: {claims:#?}");
        // Instances per claim tag. (The emulator puts fleet instances in the
        // VPC's default security group, not the launch template's: an
        // adopted instance, read back from EC2, shows that group, looks
        // drifted, and disruption replaces it under a new claim — a second
        // claim, never a second instance of one.)
        let mut per_claim: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for i in f.instances().await {
            let claim = i
                .tags()
                .iter()
                .find(|t| t.key() == Some("nodewright.io/nodeclaim"))
                .and_then(|t| t.value())
                .unwrap_or_default()
                .to_owned();
            per_claim
                .entry(claim)
                .or_default()
                .push(i.instance_id().unwrap_or_default().to_owned());
        }
        assert!(
            per_claim.values().all(|ids| ids.len() == 1),
            "crash {point}: a claim with two instances: {per_claim:?}"
        );
        let recorded = claims[0]
            .instance_id()
            .expect("the claim records its instance");
        assert_eq!(
            per_claim.get(&claims[0].id).map(Vec::as_slice),
            Some(&[recorded.to_owned()][..]),
            "crash {point}: {per_claim:?}"
        );
    }
}

/// The interruption tests' small spot node (ten pods, a PDB keeping eight).
async fn spot_node_on_aws() -> (CrashSim, Ec2Fixture, nodewright::model::claim::Claim) {
    let (sim, f) = Box::pin(on_aws_crashable(&nodewright_tests::sim::scenario_file(
        "spot-drain.yaml",
    )))
    .await;
    let claims = sim.store.claims().await.expect("claims");
    assert_eq!(claims.len(), 1, "{claims:#?}");
    (sim, f, claims[0].clone())
}

/// Nodes, scheduled pods, commands left and instances ever launched.
async fn end_state(sim: &CrashSim, f: &Ec2Fixture) -> (usize, usize, usize, usize) {
    use nodewright::sim::ClusterDriver;
    let pods = nodewright::ports::Cluster::scheduled_pods(&sim.cluster.port())
        .await
        .expect("pods")
        .len();
    let commands = sim.store.commands().await.expect("commands").len();
    (
        sim.cluster.all_nodes().len(),
        pods,
        commands,
        f.instances().await.len(),
    )
}

/// A spot interruption whose handling crashes at its 1st, 2nd, … write of
/// the removal command (the drain-and-terminate machine's steps), on the
/// emulator's EC2 and DynamoDB: SQS redelivers the message, the next
/// invocations resume, and every run ends as the run without a crash did —
/// the replacement up with the ten pods on it, the interrupted instance
/// terminated, no command left, exactly two instances ever launched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruption_crashing_between_any_two_steps_converges_on_ec2_and_dynamodb() {
    use nodewright_tests::interruption as cases;
    const WANT: (usize, usize, usize, usize) = (1, 10, 0, 2);
    for k in 0..20 {
        let (mut sim, f, claim) = Box::pin(spot_node_on_aws()).await;
        let instance = claim.instance_id().expect("launched").to_owned();
        sim.store.crash_after_command_writes(k);
        let records = cases::records("spot-interruption.json", &instance, sim.now());
        for _ in 0..3 {
            if cases::deliver(&sim, &records).await.failures.is_empty() {
                break;
            }
        }
        // Up to four simulated minutes, stopping once the end is reached.
        for _ in 0..8 {
            Box::pin(sim.run_for(nodewright::model::SignedDuration::from_secs(30))).await;
            if end_state(&sim, &f).await == WANT {
                break;
            }
        }
        let crashed = !sim.store.crash_pending();
        assert_eq!(
            end_state(&sim, &f).await,
            WANT,
            "crash before command write {k}"
        );
        assert_eq!(
            sim.replacements.len(),
            1,
            "crash before command write {k}: {:?}",
            sim.replacements
        );
        let interrupted = f.instances_of_claim(&claim.id).await;
        let state = interrupted[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned());
        assert_eq!(
            state.as_deref(),
            Some("terminated"),
            "crash before command write {k}: the interrupted instance"
        );
        if !crashed {
            assert!(k >= 3, "the machine writes its command more than {k} times");
            return;
        }
    }
    panic!("a removal wrote its command more than 20 times");
}

/// The drift scenario's node for its two pods, before its drift.
async fn drifting_node_on_aws() -> (CrashSim, Ec2Fixture) {
    let mut s = nodewright_tests::sim::scenario_file("drift-nodeclass.yaml");
    s.actions.clear();
    s.expect = Default::default();
    s.run = "2m".into();
    let (sim, f) = Box::pin(on_aws_crashable(&s)).await;
    assert_eq!(
        sim.store.claims().await.expect("claims").len(),
        1,
        "one node before the drift"
    );
    (sim, f)
}

/// Drift replacement crashing at its 1st, 2nd, … write of the removal
/// command, on the emulator's EC2 and DynamoDB: the NodeClass's tags
/// change, the next disruption invocations resume what the crashed one
/// left, and every run ends as the run without a crash did — one node, the
/// drifted claim released and its instance terminated, no command left,
/// one replacement, exactly two instances ever launched, both pods bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_replacement_crashing_between_any_two_steps_converges_on_ec2_and_dynamodb() {
    use nodewright::config::ConfigKind;
    use nodewright::model::SignedDuration;
    for k in 0..20 {
        let (mut sim, f) = Box::pin(drifting_node_on_aws()).await;
        let old = sim.store.claims().await.expect("claims")[0].clone();
        sim.store.crash_after_command_writes(k);
        let mut class = sim
            .store
            .config_items()
            .await
            .expect("items")
            .into_iter()
            .find(|i| i.kind == ConfigKind::NodeClass)
            .expect("class");
        class.spec["tags"]["team"] = "green".into();
        class.version += 1;
        sim.store
            .put_config_item(&class)
            .await
            .expect("the class changed");
        // Up to six simulated minutes, stopping once the drifted claim is gone and no command is left.
        for _ in 0..12 {
            Box::pin(sim.run_for(SignedDuration::from_secs(30))).await;
            let gone = sim
                .store
                .claims()
                .await
                .expect("claims")
                .iter()
                .all(|c| c.id != old.id);
            if gone && sim.store.commands().await.expect("commands").is_empty() {
                break;
            }
        }
        // The evicted pods' successors are placed on the replacement.
        Box::pin(sim.run_for(SignedDuration::from_secs(30))).await;
        let crashed = !sim.store.crash_pending();
        let claims = sim.store.claims().await.expect("claims");
        assert_eq!(
            sim.cluster.all_nodes().len(),
            1,
            "crash before command write {k}: one node at the end"
        );
        assert!(
            claims.iter().all(|c| c.id != old.id),
            "crash before command write {k}: the drifted claim is released"
        );
        assert_eq!(
            sim.store.commands().await.expect("commands").len(),
            0,
            "crash before command write {k}: no command left"
        );
        assert_eq!(
            sim.replacements.len(),
            1,
            "crash before command write {k}: one replacement, never two"
        );
        assert_eq!(
            f.instances().await.len(),
            2,
            "crash before command write {k}: the original and its one replacement"
        );
        let state = f.instances_of_claim(&old.id).await[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned());
        assert_eq!(
            state.as_deref(),
            Some("terminated"),
            "crash before command write {k}: the drifted instance"
        );
        let pods = sim.cluster.all_pods();
        assert!(
            pods.len() == 2
                && pods
                    .iter()
                    .all(|p| nodewright::sim::controllers::node_of(p).is_some()),
            "crash {k}: both pods bound"
        );
        if !crashed {
            assert!(
                k >= 3,
                "a drift replacement writes its command more than {k} times"
            );
            return;
        }
    }
    panic!("a drift replacement wrote its command more than 20 times");
}
