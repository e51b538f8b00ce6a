//! Tests of the disruption handler on the in-memory adapters: a cluster is
//! built by the simulator (with the disruption function switched off), then
//! the handler is driven by hand, one tick at a time, on a simulated clock.

use futures_util::future::join;

use super::*;
use crate::config::{ConfigDocument, ConfigItem};
use crate::handlers::termination::{Started, start_replacing};
use crate::model::{RemovalSpec, Step};
use crate::sim::scenario;
use crate::sim::{FaultyStore, MemStore, SimClock, SimCloud, SimSettings, Simulation, catalog};

/// `n` nodes of pool `default` (one 3-CPU pod each on m5.xlarge), the
/// budget given, NodeClass tags `team: <team>`.
fn world_yaml(n: usize, budget: &str) -> String {
    format!(
        r#"
name: handler
run: 2m
objects:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {{name: default}}
    spec:
      template:
        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          requirements:
            - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
            - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}}
      disruption: {{consolidateAfter: Never, budgets: [{{nodes: "{budget}"}}]}}
  - {class}
  - {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: app, namespace: default}}, spec: {{replicas: {n}, selector: {{matchLabels: {{app: app}}}}, template: {{metadata: {{labels: {{app: app}}}}, spec: {{terminationGracePeriodSeconds: 0, containers: [{{name: c, image: pause, resources: {{requests: {{cpu: 3, memory: 1Gi}}}}}}]}}}}}}}}
"#,
        class = class_json("blue")
    )
}

fn class_json(team: &str) -> String {
    format!(
        r#"{{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {{name: default}}, spec: {{amiSelectorTerms: [{{alias: al2023@latest}}], role: KarpenterNodeRole, subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}], securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}], tags: {{team: {team}}}}}}}"#
    )
}

type Sim<S> = Simulation<SimCloud, S>;

/// The world after 2 minutes: `n` registered nodes, their pods bound.
async fn world<S: Store + Clone>(store: S, n: usize, budget: &str, disruption: bool) -> Sim<S> {
    let clock = SimClock::default();
    let cloud = SimCloud::new(
        catalog::catalog("us-east-1").expect("region"),
        clock.clone(),
    );
    let settings = SimSettings {
        disruption_enabled: disruption,
        ..Default::default()
    };
    let mut sim = Simulation::new(clock, cloud.clone(), Some(cloud), store, settings);
    let s = scenario::parse(&world_yaml(n, budget)).expect("scenario");
    scenario::load(&mut sim, &s).await.expect("loads");
    scenario::run(&mut sim, &s).await.expect("runs");
    assert_eq!(sim.cluster.all_nodes().len(), n, "the world has its nodes");
    sim
}

/// Every node drifts: the NodeClass's tags change.
async fn change_class<S: Store + Clone>(sim: &Sim<S>, team: &str) {
    let value: serde_json::Value = serde_norway::from_str(&class_json(team)).expect("class yaml");
    let docs = crate::config::document::from_value(&value, 0).expect("class document");
    let items: Vec<ConfigItem> = docs
        .iter()
        .map(|d: &ConfigDocument| d.to_item(1, sim.now()))
        .collect();
    scenario::put_config(&sim.store, items)
        .await
        .expect("stored");
}

fn handler<S: Store + Clone>(
    sim: &Sim<S>,
    holder: &str,
) -> Disruption<crate::sim::simulation::SimPorts<SimCloud, S>> {
    Disruption::new(sim.ports(), DisruptionSettings::default(), holder)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

#[test]
fn two_invocations_at_once_start_one_command_per_node_and_stay_within_the_budget() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 3, "1", false).await;
        change_class(&sim, "green").await;
        let until = sim.now() + SignedDuration::from_secs(60);
        let (mut a, mut b) = (handler(&sim, "invocation-a"), handler(&sim, "invocation-b"));
        let (la, lb) = join(a.acquire_lease(until), b.acquire_lease(until)).await;
        assert_eq!(
            [la.expect("lease"), lb.expect("lease")]
                .iter()
                .filter(|x| **x)
                .count(),
            1,
            "one invocation decides"
        );
        // Both tick at once, again and again, past the re-validation.
        for _ in 0..3 {
            let (ra, rb) = join(a.tick(), b.tick()).await;
            let (ra, rb) = (ra.expect("tick a"), rb.expect("tick b"));
            assert!(ra.idle != rb.idle, "exactly one of them is active");
            sim.clock.set(sim.now() + SignedDuration::from_secs(16));
        }
        let commands = sim.store.commands().await.expect("commands");
        assert_eq!(
            commands.len(),
            1,
            "budget nodes: 1 → one drift at a time: {commands:#?}"
        );
        assert!(
            commands
                .iter()
                .all(|c| c.spec.reason == RemovalReason::Drifted && c.given_replacement)
        );
        // The lease holder goes away; the other one takes over and still respects the budget.
        a.release_lease().await.expect("release");
        b.release_lease().await.expect("release");
        let mut c = handler(&sim, "invocation-c");
        assert!(
            c.acquire_lease(sim.now() + SignedDuration::from_secs(60))
                .await
                .expect("lease")
        );
        for _ in 0..3 {
            c.tick().await.expect("tick c");
            sim.clock.set(sim.now() + SignedDuration::from_secs(16));
        }
        let commands = sim.store.commands().await.expect("commands");
        assert_eq!(
            commands.len(),
            1,
            "the budget counts the removal already in flight: {commands:#?}"
        );
    });
}

#[test]
fn two_starts_for_one_node_make_one_command_and_one_replacement() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 1, "10%", false).await;
        let claims = sim.store.claims().await.expect("claims");
        let claim = &claims[0];
        let spec = RemovalSpec {
            claim_id: claim.id.clone(),
            pool: claim.pool.clone(),
            node: claim.node_name.clone(),
            instance_id: claim.instance_id().map(str::to_owned),
            reason: RemovalReason::Drifted,
            replace: true,
            deadline: None,
            avoid: Vec::new(),
            event_at: None,
            handover: false,
        };
        let mut replacement = claim.clone();
        replacement.id = "default-repl1".into();
        replacement.instance = None;
        replacement.node_name = None;
        let ports = sim.ports();
        let (x, y) = join(
            start_replacing(&ports, spec.clone(), vec![replacement.clone()]),
            start_replacing(&ports, spec.clone(), vec![replacement.clone()]),
        )
        .await;
        let outcomes = [x.expect("start"), y.expect("start")];
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| matches!(o, Started::New(_)))
                .count(),
            1,
            "{outcomes:?}"
        );
        let commands = sim.store.commands().await.expect("commands");
        assert_eq!(commands.len(), 1);
        assert_eq!(commands[0].replacements, vec!["default-repl1".to_owned()]);
    });
}

#[test]
fn a_voluntary_command_that_no_longer_holds_at_revalidation_is_dropped() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 1, "10%", false).await;
        change_class(&sim, "green").await;
        let mut d = handler(&sim, "invocation");
        assert!(
            d.acquire_lease(sim.now() + SignedDuration::from_secs(60))
                .await
                .expect("lease")
        );
        let first = d.tick().await.expect("tick");
        let plan = first.plan.expect("decided");
        assert_eq!(plan.commands.len(), 1, "drifted: {plan:#?}");
        assert_eq!(d.pending().len(), 1, "waits for its re-validation");
        assert!(
            sim.store.commands().await.expect("commands").is_empty(),
            "nothing acted on yet"
        );
        // The class is changed back before the 15 s are up.
        change_class(&sim, "blue").await;
        sim.clock.set(sim.now() + SignedDuration::from_secs(15));
        let second = d.tick().await.expect("tick");
        assert_eq!(second.rejected.len(), 1, "{second:#?}");
        assert!(
            second.rejected[0].1.contains("no longer drifted"),
            "{:?}",
            second.rejected
        );
        assert!(sim.store.commands().await.expect("commands").is_empty());
        assert!(d.pending().is_empty());
    });
}

/// Karpenter `pkg/controllers/disruption/suite_test.go`, It("should not
/// consider candidates that are nominated"): a node pods are headed for is
/// no candidate. nodewright binds a new node's pods itself when the node
/// registers — the pods first, then the registration on the claim — so
/// the same intent here is that a pass never sees the claim registered
/// and the node without the pods bound before it. The registration (the
/// binding, then the claim's write) runs between every two reads of one
/// gather, each interleaving in turn: no pass may call the node empty.
/// (Karpenter's own guard is the nomination in its in-memory cluster
/// state; ours is the order of the reads.)
#[test]
fn a_node_registering_while_the_decision_gathers_is_never_seen_empty() {
    use crate::model::PodKey;
    use crate::sim::interleave::Step as Write;
    use crate::sim::{FaultyCluster, Interleave, SimCluster};
    rt().block_on(async {
        let interleave = Interleave::default();
        let clock = SimClock::default();
        let cloud = SimCloud::new(
            catalog::catalog("us-east-1").expect("region"),
            clock.clone(),
        );
        let store = FaultyStore::new(MemStore::new()).with_interleave(interleave.clone());
        let cluster =
            FaultyCluster::new(SimCluster::new(clock.clone())).with_interleave(interleave.clone());
        let settings = SimSettings {
            disruption_enabled: false,
            ..Default::default()
        };
        let mut sim =
            Simulation::with_cluster(clock, cloud.clone(), Some(cloud), store, cluster, settings);
        // Empty nodes go at once (consolidateAfter: 0s).
        let yaml = world_yaml(1, "100%").replace("consolidateAfter: Never", "consolidateAfter: 0s");
        let s = scenario::parse(&yaml).expect("scenario");
        scenario::load(&mut sim, &s).await.expect("loads");
        scenario::run(&mut sim, &s).await.expect("runs");
        let world = sim.cluster.inner().clone();
        let memory = sim.store.inner().clone();
        let node = world.all_nodes()[0].metadata.name.clone().expect("name");
        let pod = world
            .all_pods()
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
            .expect("the node's pod");
        let key = PodKey::of(&pod);
        let ports = sim.ports();
        let config = crate::handlers::config::load(ports.store()).await.expect("config");
        let limits = config.limits("default");
        let tuning = DisruptionSettings::default().tuning;
        let decide = |g: &Gathered| disruption::decide(&g.snapshot(tuning, 0));
        let empty = |plan: &Plan| {
            plan.commands
                .iter()
                .any(|c| c.reason == Reason::Empty && c.nodes().any(|n| n == node))
        };
        // As seen with the node registered and its pod bound: not empty.
        let settled = gather(&ports, &config).await.expect("gather");
        assert!(!empty(&decide(&settled)), "a node with its pod is not empty");
        // Every read one gather makes (cluster and store).
        interleave.start();
        gather(&ports, &config).await.expect("gather");
        let reads = interleave.reads();
        interleave.stop();
        assert!(
            reads.iter().any(|r| r.contains("scheduled"))
                && reads.iter().any(|r| r.starts_with("store: state")),
            "the pod listing and the state read are both counted: {reads:?}"
        );
        let mut seen_empty = Vec::new();
        // Interleavings whose pass saw the claim registered (the node a
        // candidate at all), of all tried.
        let (mut considered, mut tried) = (0, 0);
        // Bind after read `b`, register after read `r` (b ≤ r; 0 = before any).
        for b in 0..=reads.len() {
            for r in b..=reads.len() {
                // Back to launched: the claim without its node, the pod pending.
                let claims = memory.claims().await.expect("claims");
                let claim = claims
                    .iter()
                    .find(|c| c.node_name.as_deref() == Some(node.as_str()))
                    .expect("registered claim")
                    .clone();
                let mut launched = claim.next();
                launched.node_name = None;
                launched.registered_at = None;
                launched.pods = vec![key.clone()];
                memory
                    .update_claim(&claim, &launched, &limits)
                    .await
                    .expect("unregistered");
                assert!(world.update_pod(&key.namespace, &key.name, |p| {
                    p.spec.as_mut().expect("spec").node_name = None;
                    p.status = None;
                }));
                // The provisioner's two writes, in its order.
                let bind: Write = {
                    let (world, key, node) = (world.clone(), key.clone(), node.clone());
                    Box::new(move || {
                        Box::pin(async move {
                            let bound = world.bind(&key, &node).await.expect("bind");
                            assert_eq!(bound, crate::ports::BindOutcome::Bound);
                        })
                    })
                };
                let register: Write = {
                    let (memory, limits, node, id) =
                        (memory.clone(), limits.clone(), node.clone(), launched.id.clone());
                    let now = sim.now();
                    Box::new(move || {
                        Box::pin(async move {
                            let claims = memory.claims().await.expect("claims");
                            let claim = claims.iter().find(|c| c.id == id).expect("claim");
                            let mut next = claim.next();
                            next.node_name = Some(node);
                            next.registered_at = Some(now);
                            next.pods.clear();
                            memory
                                .update_claim(claim, &next, &limits)
                                .await
                                .expect("registered");
                        })
                    })
                };
                interleave.start();
                let mut steps = vec![(b, bind), (r, register)];
                while steps.first().is_some_and(|(at, _)| *at == 0) {
                    let (_, step) = steps.remove(0);
                    step().await;
                }
                for (at, step) in steps {
                    interleave.after_read(at, step);
                }
                let g = gather(&ports, &config).await.expect("gather");
                assert_eq!(interleave.pending(), 0, "both writes ran (bind {b}, register {r})");
                interleave.stop();
                tried += 1;
                considered += usize::from(g.claims.iter().any(|c| c.node_name.is_some()));
                if empty(&decide(&g)) {
                    let after = |n: usize| if n == 0 { "start".to_owned() } else { reads[n - 1].clone() };
                    seen_empty.push(format!("bind after {}, register after {}", after(b), after(r)));
                }
            }
        }
        assert!(
            considered > 0 && considered < tried,
            "some passes saw the node registered, some not: {considered} of {tried}"
        );
        assert!(
            seen_empty.is_empty(),
            "the node was called empty though its pod was bound before it registered: {seen_empty:#?}"
        );
    });
}

/// Karpenter (pkg/controllers/disruption/suite_test.go, Disruption Taints):
/// It("should remove taints from NodeClaims that were left tainted from a
/// previous disruption action"). A node of ours carries the
/// `karpenter.sh/disrupted` taint though no removal owns it (a removal that
/// crashed between its taint and its command, say): the next pass takes the
/// taint off and removes nothing (consolidateAfter: Never).
#[test]
fn a_disruption_taint_no_removal_owns_is_removed() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 1, "10%", false).await;
        let node = sim.cluster.all_nodes()[0]
            .metadata
            .name
            .clone()
            .expect("name");
        crate::ports::Cluster::add_taint(
            &sim.cluster,
            &node,
            &crate::termination::disrupted_taint(),
        )
        .await
        .expect("tainted");
        let tainted = |sim: &Sim<MemStore>| {
            sim.cluster.all_nodes()[0]
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
        };
        assert!(tainted(&sim), "the leftover taint is there");
        let mut d = handler(&sim, "invocation");
        assert!(
            d.acquire_lease(sim.now() + SignedDuration::from_secs(60))
                .await
                .expect("lease")
        );
        let report = d.tick().await.expect("tick");
        assert!(!tainted(&sim), "the pass removed the leftover taint");
        assert!(report.started.is_empty(), "{report:#?}");
        assert!(sim.store.commands().await.expect("commands").is_empty());
    });
}

#[test]
fn the_claims_bookkeeping_is_written_back() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 1, "10%", false).await;
        let before = sim.store.claims().await.expect("claims");
        assert!(
            before[0].disruption.pods_fingerprint.is_none(),
            "nothing observed yet"
        );
        let mut d = handler(&sim, "invocation");
        assert!(
            d.acquire_lease(sim.now() + SignedDuration::from_secs(60))
                .await
                .expect("lease")
        );
        d.tick().await.expect("tick");
        let after = sim.store.claims().await.expect("claims");
        assert!(after[0].disruption.pods_fingerprint.is_some());
        assert_eq!(after[0].disruption.last_pod_event_at, Some(sim.now()));
        assert_eq!(after[0].version, before[0].version + 1);
    });
}

/// The simulation with the disruption function on, the NodeClass changed
/// at 2m, until everything settled: the one node is replaced.
async fn drift_to_the_end<S: Store + Clone>(sim: &mut Sim<S>) {
    change_class(sim, "green").await;
    sim.run_for(SignedDuration::from_mins(6)).await;
}

#[test]
fn a_crash_between_any_two_steps_is_resumed_and_the_node_is_replaced_once() {
    rt().block_on(async {
        // How many command writes an undisturbed drift makes.
        let mut clean = world(FaultyStore::new(MemStore::new()), 1, "10%", true).await;
        let old = clean.store.claims().await.expect("claims")[0].id.clone();
        drift_to_the_end(&mut clean).await;
        assert_eq!(
            clean.removal_reasons.get(&old).map(String::as_str),
            Some("Drifted")
        );
        let steps = Step::Release as usize;
        for n in 0..=steps {
            let mut sim = world(FaultyStore::new(MemStore::new()), 1, "10%", true).await;
            let old = sim.store.claims().await.expect("claims")[0].id.clone();
            sim.store.crash_after_command_writes(n);
            drift_to_the_end(&mut sim).await;
            assert!(!sim.store.crash_pending(), "crash {n} happened");
            let claims = sim.store.claims().await.expect("claims");
            let nodes = sim.cluster.all_nodes();
            assert_eq!(
                nodes.len(),
                1,
                "crash after {n} command write(s): one node at the end"
            );
            assert!(
                claims.iter().all(|c| c.id != old),
                "crash after {n}: the drifted node's claim is released"
            );
            assert!(
                sim.store.commands().await.expect("commands").is_empty(),
                "crash after {n}: no command left"
            );
            assert_eq!(
                sim.replacements.len(),
                1,
                "crash after {n}: one replacement, never two"
            );
            assert_eq!(
                sim.cloud.launches(),
                2,
                "crash after {n}: the original node and its one replacement"
            );
            let pods = sim.cluster.all_pods();
            assert!(
                pods.iter()
                    .all(|p| crate::sim::controllers::node_of(p).is_some()),
                "crash after {n}: every pod bound"
            );
        }
    });
}

#[test]
fn the_dry_run_acts_on_nothing_and_says_what_it_would_do() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 2, "10%", false).await;
        change_class(&sim, "green").await;
        let claims_before = sim.store.claims().await.expect("claims");
        let plan = dry_run(&sim.ports(), Tuning::default())
            .await
            .expect("dry run");
        assert_eq!(plan.nodes.len(), 2);
        let drifted: Vec<_> = plan
            .nodes
            .iter()
            .filter(|n| n.action == "replace-drifted")
            .collect();
        assert_eq!(
            drifted.len(),
            1,
            "the budget allows one at a time: {plan:#?}"
        );
        assert!(
            drifted[0].reason.contains("NodeClass default changed"),
            "{}",
            drifted[0].reason
        );
        assert!(
            plan.nodes
                .iter()
                .any(|n| n.action == "keep" && n.reason.contains("budget")),
            "{plan:#?}"
        );
        assert!((plan.cost_now - 2.0 * 0.192).abs() < 1e-9);
        assert!(
            (plan.cost_after - plan.cost_now).abs() < 1e-9,
            "a drift replacement of the same type costs the same"
        );
        assert!(plan.render().contains("replace-drifted"));
        assert!(sim.store.commands().await.expect("commands").is_empty());
        assert_eq!(
            sim.store.claims().await.expect("claims"),
            claims_before,
            "not even the bookkeeping is written"
        );
    });
}

/// The disruption scenarios shipped under `tests/scenarios/`, as
/// `nodewright simulate` runs them (the month-long `expiration-720h` is run
/// by the CLI and the integration suite, not here: it takes half a minute
/// in a debug build).
const SCENARIOS: [(&str, &str); 11] = [
    (
        "upgrade-walkthrough",
        include_str!("../../../../tests/scenarios/upgrade-walkthrough.yaml"),
    ),
    (
        "consolidation-example",
        include_str!("../../../../tests/scenarios/consolidation-example.yaml"),
    ),
    (
        "consolidation-threshold",
        include_str!("../../../../tests/scenarios/consolidation-threshold.yaml"),
    ),
    (
        "emptiness-30s",
        include_str!("../../../../tests/scenarios/emptiness-30s.yaml"),
    ),
    (
        "drift-nodeclass",
        include_str!("../../../../tests/scenarios/drift-nodeclass.yaml"),
    ),
    (
        "drift-nodepool-labels",
        include_str!("../../../../tests/scenarios/drift-nodepool-labels.yaml"),
    ),
    (
        "budgets",
        include_str!("../../../../tests/scenarios/budgets.yaml"),
    ),
    (
        "do-not-disrupt",
        include_str!("../../../../tests/scenarios/do-not-disrupt.yaml"),
    ),
    (
        "replacement-rollback",
        include_str!("../../../../tests/scenarios/replacement-rollback.yaml"),
    ),
    (
        "node-repair",
        include_str!("../../../../tests/scenarios/node-repair.yaml"),
    ),
    (
        "consolidate-after-10s",
        include_str!("../../../../tests/scenarios/consolidate-after-10s.yaml"),
    ),
];

#[test]
fn every_disruption_scenario_meets_its_expectations() {
    for (name, text) in SCENARIOS {
        let failures = rt().block_on(async {
            let s = scenario::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let clock = SimClock::default();
            let cloud = SimCloud::new(catalog::catalog(&s.region).expect("region"), clock.clone());
            let mut sim = Simulation::new(
                clock,
                cloud.clone(),
                Some(cloud),
                MemStore::new(),
                SimSettings::default(),
            );
            scenario::load(&mut sim, &s)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            scenario::run(&mut sim, &s)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            scenario::check(&sim, &s.expect).await
        });
        assert!(failures.is_empty(), "{name}: {failures:#?}");
    }
}

#[test]
fn the_lambda_loop_ticks_until_its_deadline_and_a_second_invocation_exits_at_once() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 1, "10%", false).await;
        let clock = sim.clock.clone();
        let deadline = sim.now() + SignedDuration::from_secs(55);
        // Someone else holds the lease: this invocation does nothing.
        let mut other = handler(&sim, "invocation-0");
        assert!(other.acquire_lease(deadline).await.expect("lease"));
        let mut d = handler(&sim, "invocation-1");
        let sleep = |dur: SignedDuration| {
            clock.set(clock.now() + dur);
            std::future::ready(())
        };
        assert_eq!(d.run_until(deadline, sleep).await.expect("runs"), 0);
        other.release_lease().await.expect("release");
        // Free: it ticks (every 2 s) until the deadline, then lets go of the lease.
        let ticks = d.run_until(deadline, sleep).await.expect("runs");
        assert!((20..=30).contains(&ticks), "{ticks} ticks in 55 s");
        assert!(sim.now() < deadline + SignedDuration::from_secs(2));
        assert!(
            other
                .acquire_lease(sim.now() + SignedDuration::from_secs(60))
                .await
                .expect("lease"),
            "released at the end"
        );
    });
}

/// A throttled lease write costs the disruption function seconds, not its
/// invocation: the Lambda loop retries it (`leased_loop::lease_retry`,
/// 1 s doubling) and ticks within the same minute; an error that is not
/// transient still ends the invocation at once.
#[test]
fn a_throttled_lease_write_is_retried_within_the_invocation() {
    rt().block_on(async {
        let sim = world(FaultyStore::new(MemStore::new()), 1, "10%", false).await;
        let clock = sim.clock.clone();
        let start = sim.now();
        let deadline = start + SignedDuration::from_secs(55);
        let sleep = |dur: SignedDuration| {
            clock.set(clock.now() + dur);
            std::future::ready(())
        };
        let before = sim.store.write_faults().0;
        sim.store.throttle_next_writes(3);
        let mut d = handler(&sim, "invocation-throttled");
        let ticks = d
            .run_until(deadline, sleep)
            .await
            .expect("three throttled lease writes do not end the invocation");
        assert_eq!(
            sim.store.write_faults().0 - before,
            3,
            "all three were tried"
        );
        assert!(ticks > 0, "it ticked after taking the lease");
        // A refusal (an access error) is not retried: the invocation fails.
        sim.store.deny_next_writes(1);
        let mut denied = handler(&sim, "invocation-denied");
        let later = sim.now() + SignedDuration::from_secs(55);
        assert!(denied.run_until(later, sleep).await.is_err());
        assert_eq!(sim.store.writes_denied(), 1);
    });
}

/// A verdict that changes on a pass that skips consolidation is logged on
/// that pass, not at the next full one: two of five nodes NotReady go from
/// "repaired after 30m" to "repair paused" 30 minutes on, between two full
/// passes.
#[test]
fn a_changed_verdict_is_logged_on_a_pass_that_skips_consolidation() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 5, "10%", false).await;
        let settings = crate::config::document::from_value(
            &serde_json::json!({"apiVersion": "nodewright.io/v1alpha1", "kind": "Settings",
                "metadata": {"name": "default"}, "spec": {"featureGates": {"nodeRepair": true}}}),
            0,
        )
        .expect("settings");
        let items: Vec<ConfigItem> = settings.iter().map(|d| d.to_item(1, sim.now())).collect();
        scenario::put_config(&sim.store, items)
            .await
            .expect("stored");
        let mut names: Vec<String> = sim
            .cluster
            .all_nodes()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        names.sort();
        for n in &names[..2] {
            sim.cluster.set_node_ready(n, false).expect("not ready");
        }
        let start = sim.now();
        let mut d = handler(&sim, "invocation");
        assert!(
            d.acquire_lease(start + SignedDuration::from_hours(2))
                .await
                .expect("lease")
        );
        let at = |secs: i64| {
            sim.clock.set(start + SignedDuration::from_secs(secs));
        };
        let first = d.tick().await.expect("tick");
        assert_eq!(
            first.logged.len(),
            5,
            "every node's first verdict is logged"
        );
        at(26 * 60);
        let full = d.tick().await.expect("tick");
        assert!(full.plan.is_some());
        assert!(
            full.logged.is_empty(),
            "nothing changed but the minutes: {:?}",
            full.logged
        );
        // Nothing consolidation looks at changed: this pass skips it. The
        // two NotReady nodes' reason changed (repair is now paused).
        at(30 * 60 + 5);
        let skipped = d.tick().await.expect("tick");
        let plan = skipped.plan.expect("a decision");
        let reason = &plan.decision(&names[0]).expect("node").reason;
        assert!(reason.contains("repair paused"), "{reason}");
        assert_eq!(skipped.logged, names[..2].to_vec());
    });
}

/// A decision is started only when twice the last one's time fits before
/// the invocation ends: cut by the Lambda timeout, it would fail the whole
/// invocation (the provisioner's too, beside it). The simulated clock does
/// not move while deciding, so the last decision's time is set here.
#[test]
fn a_decision_is_not_started_when_the_last_one_would_not_fit_in_what_is_left() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 3, "1", false).await;
        change_class(&sim, "green").await;
        let memory = Memory::default();
        let now = sim.now();
        memory.lock().last_decision_took = Some(SignedDuration::from_secs(20));
        memory.lock().next_decision = Some(now - SignedDuration::from_secs(1));
        let mut late = handler(&sim, "late").with_memory(memory.clone());
        assert!(
            late.acquire_lease(now + SignedDuration::from_secs(30))
                .await
                .expect("lease")
        );
        let tick = late.tick().await.expect("tick");
        assert!(tick.plan.is_none(), "40 s of decision do not fit in 30 s");
        assert!(
            tick.wake_at.is_none_or(|t| t > now),
            "the decision it leaves to the next invocation does not wake the loop at once: {:?}",
            tick.wake_at
        );
        assert!(late.pending().is_empty());
        late.release_lease().await.expect("release");

        let mut early = handler(&sim, "early").with_memory(memory.clone());
        assert!(
            early
                .acquire_lease(now + SignedDuration::from_secs(40))
                .await
                .expect("lease")
        );
        let plan = early.tick().await.expect("tick").plan.expect("decided");
        assert!(
            plan.commands.iter().any(|c| c.reason == Reason::Drifted),
            "the drifted nodes: {:#?}",
            plan.commands
        );
        assert_eq!(
            memory.lock().last_decision_took,
            Some(SignedDuration::ZERO),
            "the simulated clock stood still"
        );
    });
}

/// A repair countdown ("repaired after 30m", then "29m30s", then "45s")
/// is one line: the words are the same, only the time left moves. A new
/// line comes when the words change ("repair paused"), or the node, pool
/// or instance type a reason names.
#[test]
fn a_countdown_in_a_reason_is_not_a_change() {
    let line = |reason: &str| without_figures(&format!("Keep: {reason}"));
    let first = line("Ready=Unknown, repaired after 30m");
    for later in ["29m30s", "1m5s", "45s", "1h2m"] {
        assert_eq!(
            line(&format!("Ready=Unknown, repaired after {later}")),
            first,
            "{later}"
        );
    }
    assert_eq!(line("empty for 20s"), line("empty for 1m5s"));
    assert_ne!(
        line("Ready=Unknown, repair paused (2 of 5 nodes unhealthy in NodePool default)"),
        first
    );
    assert_ne!(line("empty; NodePool a"), line("empty; NodePool b"));
    assert_ne!(line("fits on m5.large"), line("fits on m5.xlarge"));
}

/// Karpenter's instance-status cases: aws/karpenter-provider-aws
/// `pkg/controllers/interruption/suite_test.go`, Describe
/// "InterruptionHandling", Context "Processing Messages", each `It` named
/// below. Karpenter's unit test drives its controller over a fake EC2; here
/// the simulated EC2 reports the check (`SimCloud::impair`) and the
/// disruption function polls it, once a minute. Karpenter's termination
/// timestamp annotation (forceful: PDBs and volume detachment bypassed) is
/// nodewright's command deadline set to the poll's time; a graceful
/// deletion is a command without a deadline of its own. Where nodewright
/// differs on purpose: the node is replaced before it is drained (it binds
/// pods to the nodes it launched), so "the NodeClaim is not found" is read
/// as "its removal ran to the end and its pods run elsewhere".
mod instance_health {
    use super::*;
    use crate::handlers::metrics::{self, Capture};
    use crate::interruption::health::fixtures::{check, retirement};
    use crate::model::{StatusCategory, StatusCheck};

    /// The world's instances, sorted by claim.
    async fn instances<S: Store + Clone>(sim: &Sim<S>) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = sim
            .store
            .claims()
            .await
            .expect("claims")
            .iter()
            .map(|c| (c.id.clone(), c.instance_id().expect("launched").to_owned()))
            .collect();
        out.sort();
        out
    }

    /// EC2 reports `checks` for the instance; the checks failed an hour ago
    /// (Karpenter steps its clock an hour past `impairedSince`).
    fn impair<S: Store + Clone>(sim: &Sim<S>, instance: &str, checks: &[StatusCheck]) {
        let cloud = sim.sim_cloud.as_ref().expect("in-memory cloud");
        for c in checks {
            assert!(cloud.impair(instance, c.clone()), "{instance} is live");
        }
    }

    fn an_hour_ago<S: Store + Clone>(sim: &Sim<S>) -> Timestamp {
        sim.now() - SignedDuration::from_hours(1)
    }

    /// How much a counter rose, over the documents with these labels.
    fn counted(docs: &[serde_json::Value], name: &str, labels: &[(&str, &str)]) -> f64 {
        docs.iter()
            .filter(|d| labels.iter().all(|(k, v)| d[*k] == *v))
            .filter_map(|d| d.get(name).and_then(serde_json::Value::as_f64))
            .sum()
    }

    /// Runs the world (its disruption function on) for `mins` minutes and
    /// returns the metrics published meanwhile.
    async fn run<S: Store + Clone>(sim: &mut Sim<S>, mins: i64) -> Vec<serde_json::Value> {
        let capture = Capture::start();
        sim.run_for(SignedDuration::from_mins(mins)).await;
        capture.finish()
    }

    /// The removal ran to the end: the claim is gone, for `reason`, and
    /// every pod runs on a node again.
    async fn removed_for<S: Store + Clone>(sim: &Sim<S>, claim: &str, reason: &str) {
        assert_eq!(
            sim.removal_reasons.get(claim).map(String::as_str),
            Some(reason),
            "{:#?}",
            sim.removal_reasons
        );
        assert!(
            sim.store
                .claims()
                .await
                .expect("claims")
                .iter()
                .all(|c| c.id != claim),
            "the claim is released"
        );
        assert!(sim.store.commands().await.expect("commands").is_empty());
        let pods = sim.cluster.all_pods();
        assert!(
            !pods.is_empty()
                && pods.iter().all(|p| p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some()),
            "every pod runs on a node again"
        );
    }

    #[test]
    fn should_forcefully_terminate_the_nodeclaim_when_an_instance_is_unhealthy_due_to_ec2_system_status_checks()
     {
        rt().block_on(async {
            let mut sim = world(MemStore::new(), 1, "10%", true).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            let since = an_hour_ago(&sim);
            impair(
                &sim,
                &instance,
                &[check(StatusCategory::SystemStatus, Some(since))],
            );
            let docs = run(&mut sim, 5).await;
            removed_for(&sim, &claim, "SystemStatus").await;
            assert_eq!(
                counted(
                    &docs,
                    metrics::karpenter::NODECLAIMS_DISRUPTED,
                    &[("reason", "system_status"), ("nodepool", "default")]
                ),
                1.0
            );
            assert_eq!(
                counted(
                    &docs,
                    metrics::karpenter::INSTANCE_STATUS_UNHEALTHY,
                    &[("category", "SystemStatus")]
                ),
                1.0
            );
        });
    }

    #[test]
    fn should_forcefully_terminate_the_nodeclaim_when_an_instance_has_instancestatus_check_failure()
    {
        rt().block_on(async {
            let mut sim = world(MemStore::new(), 1, "10%", true).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            let since = an_hour_ago(&sim);
            impair(
                &sim,
                &instance,
                &[check(StatusCategory::InstanceStatus, Some(since))],
            );
            let docs = run(&mut sim, 5).await;
            removed_for(&sim, &claim, "InstanceStatus").await;
            assert_eq!(
                counted(
                    &docs,
                    metrics::karpenter::NODECLAIMS_DISRUPTED,
                    &[("reason", "instance_status"), ("nodepool", "default")]
                ),
                1.0
            );
            assert_eq!(
                counted(
                    &docs,
                    metrics::karpenter::INSTANCE_STATUS_UNHEALTHY,
                    &[("category", "InstanceStatus")]
                ),
                1.0
            );
        });
    }

    /// One poll by hand (the world's disruption function off): the command
    /// it started for the world's one node.
    async fn poll_once<S: Store + Clone>(
        sim: &Sim<S>,
        d: &mut Disruption<crate::sim::simulation::SimPorts<SimCloud, S>>,
        claim: &str,
    ) -> crate::model::Command {
        let report = d.tick().await.expect("tick");
        let poll = report.health.expect("the first decision polls EC2");
        assert!(poll.error.is_none(), "{poll:?}");
        sim.store
            .commands()
            .await
            .expect("commands")
            .into_iter()
            .find(|c| c.id == claim)
            .expect("a removal of the impaired node")
    }

    /// What the first poll found unhealthy: the removed node's instance.
    fn poll_seen(
        first: &crate::model::Command,
    ) -> std::collections::BTreeSet<crate::interruption::health::Unhealthy> {
        [(
            first.spec.instance_id.clone().expect("instance"),
            StatusCategory::SystemStatus,
        )]
        .into()
    }

    async fn by_hand<S: Store + Clone>(
        sim: &Sim<S>,
    ) -> Disruption<crate::sim::simulation::SimPorts<SimCloud, S>> {
        let mut d = handler(sim, "invocation");
        assert!(
            d.acquire_lease(sim.now() + SignedDuration::from_mins(10))
                .await
                .expect("lease")
        );
        d
    }

    #[test]
    fn should_annotate_the_nodeclaim_with_a_termination_timestamp_for_forceful_termination() {
        rt().block_on(async {
            let sim = world(MemStore::new(), 1, "10%", false).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            impair(
                &sim,
                &instance,
                &[check(StatusCategory::SystemStatus, Some(an_hour_ago(&sim)))],
            );
            let mut d = by_hand(&sim).await;
            let command = poll_once(&sim, &mut d, &claim).await;
            assert_eq!(command.spec.reason, RemovalReason::SystemStatus);
            assert_eq!(
                command.spec.deadline,
                Some(sim.now()),
                "forceful: its pods go at once, whatever their PDBs"
            );
        });
    }

    #[test]
    fn should_not_annotate_the_nodeclaim_with_a_termination_timestamp_for_scheduled_maintenance_events()
     {
        rt().block_on(async {
            let sim = world(MemStore::new(), 1, "10%", false).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            impair(&sim, &instance, &[retirement()]);
            let mut d = by_hand(&sim).await;
            let command = poll_once(&sim, &mut d, &claim).await;
            assert_eq!(command.spec.reason, RemovalReason::EventStatus);
            assert_eq!(command.spec.deadline, None, "graceful: PDBs hold");
        });
    }

    #[test]
    fn should_forcefully_terminate_when_an_instance_has_both_system_status_failure_and_a_scheduled_event()
     {
        rt().block_on(async {
            let sim = world(MemStore::new(), 1, "10%", false).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            impair(
                &sim,
                &instance,
                &[
                    check(StatusCategory::SystemStatus, Some(an_hour_ago(&sim))),
                    retirement(),
                ],
            );
            let mut d = by_hand(&sim).await;
            let command = poll_once(&sim, &mut d, &claim).await;
            assert_eq!(command.spec.reason, RemovalReason::SystemStatus);
            assert_eq!(command.spec.deadline, Some(sim.now()), "forceful wins");
        });
    }

    #[test]
    fn should_not_re_annotate_the_nodeclaim_on_subsequent_reconciles() {
        rt().block_on(async {
            let sim = world(MemStore::new(), 1, "10%", false).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            impair(
                &sim,
                &instance,
                &[check(StatusCategory::SystemStatus, Some(an_hour_ago(&sim)))],
            );
            let mut d = by_hand(&sim).await;
            let first = poll_once(&sim, &mut d, &claim).await;
            let stamped = first.spec.deadline;
            assert_eq!(stamped, Some(sim.now()));
            // The next reconcile, a minute later, finds the instance still
            // impaired: the removal is left as it is (no write at all).
            sim.clock.set(sim.now() + SignedDuration::from_mins(1));
            let poll =
                crate::handlers::health::poll(d.ports(), &poll_seen(&first), false, sim.now())
                    .await
                    .expect("poll");
            assert_eq!(poll.plan.removals.len(), 1, "still impaired: {poll:?}");
            assert!(poll.plan.newly_unhealthy.is_empty(), "{poll:?}");
            let after = sim
                .store
                .commands()
                .await
                .expect("commands")
                .into_iter()
                .find(|c| c.id == claim)
                .expect("still removing");
            assert_eq!(after.spec.deadline, stamped, "the first poll's deadline");
            assert_eq!(after.version, first.version, "nothing written");
        });
    }

    #[test]
    fn should_delete_the_nodeclaim_when_an_instance_has_a_scheduled_maintenance_event() {
        rt().block_on(async {
            let mut sim = world(MemStore::new(), 1, "10%", true).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            impair(&sim, &instance, &[retirement()]);
            let docs = run(&mut sim, 5).await;
            removed_for(&sim, &claim, "EventStatus").await;
            assert_eq!(
                counted(
                    &docs,
                    metrics::karpenter::NODECLAIMS_DISRUPTED,
                    &[("reason", "event_status"), ("nodepool", "default")]
                ),
                1.0
            );
            assert_eq!(
                counted(
                    &docs,
                    metrics::karpenter::INSTANCE_STATUS_UNHEALTHY,
                    &[("category", "EventStatus")]
                ),
                1.0
            );
        });
    }

    async fn dry_world(n: usize) -> Sim<MemStore> {
        let mut sim = world(MemStore::new(), n, "10%", true).await;
        sim.settings.disruption.instance_status_dry_run = true;
        sim
    }

    fn unhealthy(docs: &[serde_json::Value]) -> f64 {
        counted(
            docs,
            metrics::karpenter::INSTANCE_STATUS_UNHEALTHY,
            &[("category", "InstanceStatus")],
        )
    }

    #[test]
    fn should_not_delete_the_nodeclaim_when_dry_run_is_enabled_but_should_still_emit_the_metric() {
        rt().block_on(async {
            let mut sim = dry_world(1).await;
            let (claim, instance) = instances(&sim).await.remove(0);
            impair(
                &sim,
                &instance,
                &[check(
                    StatusCategory::InstanceStatus,
                    Some(an_hour_ago(&sim)),
                )],
            );
            let docs = run(&mut sim, 3).await;
            assert_eq!(unhealthy(&docs), 1.0);
            assert!(sim.store.commands().await.expect("commands").is_empty());
            assert_eq!(instances(&sim).await[0].0, claim, "the node stays");
        });
    }

    #[test]
    fn should_only_emit_the_metric_once_across_multiple_reconciles_for_the_same_unhealthy_instance()
    {
        rt().block_on(async {
            let mut sim = dry_world(1).await;
            let (_, instance) = instances(&sim).await.remove(0);
            impair(
                &sim,
                &instance,
                &[check(
                    StatusCategory::InstanceStatus,
                    Some(an_hour_ago(&sim)),
                )],
            );
            // Five polls or more, a minute apart.
            let docs = run(&mut sim, 6).await;
            assert_eq!(unhealthy(&docs), 1.0);
        });
    }

    #[test]
    fn should_emit_the_metric_for_each_unique_unhealthy_instance() {
        rt().block_on(async {
            let mut sim = dry_world(2).await;
            let all = instances(&sim).await;
            assert_eq!(all.len(), 2);
            for (_, instance) in &all {
                impair(
                    &sim,
                    instance,
                    &[check(
                        StatusCategory::InstanceStatus,
                        Some(an_hour_ago(&sim)),
                    )],
                );
            }
            let first = run(&mut sim, 1).await;
            assert_eq!(unhealthy(&first), 2.0, "one per instance");
            let later = run(&mut sim, 3).await;
            assert_eq!(unhealthy(&later), 0.0, "no more while they stay so");
        });
    }

    #[test]
    fn should_re_emit_the_metric_when_an_instance_recovers_and_becomes_unhealthy_again() {
        rt().block_on(async {
            let mut sim = dry_world(1).await;
            let (_, instance) = instances(&sim).await.remove(0);
            let failing = check(StatusCategory::InstanceStatus, Some(an_hour_ago(&sim)));
            impair(&sim, &instance, std::slice::from_ref(&failing));
            let first = run(&mut sim, 2).await;
            assert_eq!(unhealthy(&first), 1.0);
            sim.sim_cloud.as_ref().expect("cloud").recover(&instance);
            let recovered = run(&mut sim, 2).await;
            assert_eq!(unhealthy(&recovered), 0.0);
            impair(&sim, &instance, &[failing]);
            let again = run(&mut sim, 2).await;
            assert_eq!(unhealthy(&again), 1.0, "counted once more");
        });
    }
}

/// With invocations that end when quiet, the wake queue brings one every
/// few seconds: a decision (every pod and node gathered) comes once a
/// minute there, every 10 s in invocations listening all minute.
#[test]
fn invocations_that_end_when_quiet_decide_once_a_minute_not_at_every_wake() {
    rt().block_on(async {
        let sim = world(MemStore::new(), 1, "10%", false).await;
        for (settings, decides_10_s_later) in [
            (DisruptionSettings::default(), true),
            (DisruptionSettings::default().ending_when_quiet(), false),
        ] {
            let mut d = Disruption::new(sim.ports(), settings, "invocation");
            assert!(
                d.acquire_lease(sim.now() + SignedDuration::from_mins(5))
                    .await
                    .expect("lease")
            );
            assert!(
                d.tick().await.expect("tick").plan.is_some(),
                "the first tick decides"
            );
            sim.clock.set(sim.now() + SignedDuration::from_secs(11));
            assert_eq!(
                d.tick().await.expect("tick").plan.is_some(),
                decides_10_s_later
            );
            sim.clock.set(sim.now() + SignedDuration::from_secs(50));
            assert!(
                d.tick().await.expect("tick").plan.is_some(),
                "a minute after the first decision"
            );
        }
    });
}
