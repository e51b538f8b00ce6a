//! How fast a spot interruption warning turns into action against a real
//! kube-apiserver, for a node holding 110 pods (a benchmark, not a test:
//! it prints figures and asserts nothing about time).
//!
//! Two figures, each the median of `ROUNDS` fresh runs:
//! - **warning → tainted + replacement launched**: the interruption
//!   handler's whole batch: parse, find the claim, mark the offering
//!   unavailable, start the command, taint the node, plan the replacement
//!   with the provisioner's solver over the cluster as the API server
//!   lists it, launch it (in-memory EC2 and DynamoDB);
//! - **drain start → node tainted and every eviction issued**: one pass of
//!   the machine on a removal whose capacity is already there (a registered
//!   replacement, or none needed): the taint, the pod listing and 110
//!   Eviction API calls, a PodDisruptionBudget refusing some of them.
//!
//! `cargo bench -p nodewright-tests --bench interruption` (starts its own
//! kube-apiserver unless `NODEWRIGHT_KUBE_ENV` names a running one).

use std::time::{Duration, Instant};

use nodewright::handlers::config as config_loader;
use nodewright::handlers::launcher::LaunchSettings;
use nodewright::handlers::termination;
use nodewright::model::{RemovalReason, RemovalSpec, SignedDuration};
use nodewright::ports::{Clock, Store};
use nodewright::sim::scenario;
use nodewright::sim::{ClusterDriver, SimSettings};
use nodewright_tests::sim::{KubeSim, on_apiserver, scenario_file};

const ROUNDS: usize = 3;

async fn cluster_with_a_full_spot_node() -> KubeSim {
    let mut s = scenario_file("spot-interruption.yaml");
    s.actions.clear();
    let mut sim = on_apiserver(&s.region, SimSettings::default()).await;
    scenario::load(&mut sim, &s).await.expect("scenario loads");
    sim.run_for(SignedDuration::from_mins(3)).await;
    let pods = sim
        .cluster
        .all_pods()
        .await
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    assert_eq!(pods, 112, "110 pods on the spot node and 2 on the other");
    sim
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    // `cargo test --all-targets` (the test command) builds this and runs it
    // without `--bench`: it is compiled there, measured only by `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "interruption benchmark: run it with `cargo bench -p nodewright-tests --bench interruption`"
        );
        return;
    }
    // RUST_LOG=nodewright=debug shows where the time goes.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut warning = Vec::new();
        let mut replace = Vec::new();
        let mut drain = Vec::new();
        for round in 0..ROUNDS {
            // The whole handler on a spot warning.
            let mut sim = cluster_with_a_full_spot_node().await;
            let spot = sim.store.claims().await.expect("claims").into_iter().find(|c| c.pool == "spot").expect("spot claim");
            let body = serde_json::json!({
                "version": "0", "id": format!("bench-{round}"), "detail-type": "EC2 Spot Instance Interruption Warning",
                "source": "aws.ec2", "account": "123456789012", "time": sim.now().to_string(), "region": "us-east-1",
                "resources": [], "detail": {"instance-id": spot.instance_id().expect("id"), "instance-action": "terminate"}
            })
            .to_string();
            let t0 = Instant::now();
            let failed = sim.deliver_interruptions(&[("m".to_owned(), body)]).await;
            warning.push(t0.elapsed());
            assert!(failed.is_empty());
            let command = sim.store.commands().await.expect("commands").pop().expect("command");
            assert!(command.milestones.tainted_at.is_some(), "{command:#?}");
            // The next pass of a loop that drives every command.
            let config = config_loader::load(&sim.store).await.expect("config");
            let t0 = Instant::now();
            termination::advance_all(&sim.ports(), &config, &LaunchSettings::default()).await.expect("advance");
            replace.push(t0.elapsed());
            let command = sim.store.commands().await.expect("commands").pop().expect("command");
            assert!(!command.replacements.is_empty(), "{command:#?}");
            drop(sim);

            // One machine pass with the capacity already there.
            let sim = cluster_with_a_full_spot_node().await;
            let ports = sim.ports();
            let spot = sim.store.claims().await.expect("claims").into_iter().find(|c| c.pool == "spot").expect("spot claim");
            let config = config_loader::load(&sim.store).await.expect("config");
            let now = ports.clock.now();
            let t0 = Instant::now();
            termination::start(
                &ports,
                RemovalSpec {
                    claim_id: spot.id.clone(),
                    pool: spot.pool.clone(),
                    node: spot.node_name.clone(),
                    instance_id: spot.instance_id().map(str::to_owned),
                    reason: RemovalReason::SpotInterrupted,
                    replace: false,
                    deadline: Some(now + SignedDuration::from_secs(105)),
                    avoid: vec![],
                    event_at: Some(now),
                    handover: false,
                },
            )
            .await
            .expect("start");
            termination::advance_all(&ports, &config, &LaunchSettings::default()).await.expect("advance");
            drain.push(t0.elapsed());
            let evicted = sim.cluster.events().await.iter().filter(|(_, e)| e.reason == "Evicted").count();
            let blocked = sim.cluster.events().await.iter().filter(|(_, e)| e.reason == "FailedDraining").count();
            assert_eq!(evicted + blocked, 110, "every pod had its eviction: {evicted} evicted, {blocked} blocked");
            println!(
                "round {round}: warning → recorded + tainted {:?}; next pass → replacement launched {:?}; drain start → tainted + 110 evictions issued {:?} ({evicted} evicted, {blocked} refused by the PDB)",
                warning[round], replace[round], drain[round]
            );
        }
        println!("| figure | median of {ROUNDS} |");
        println!("|---|---:|");
        println!("| spot warning → command recorded + node tainted (the interruption invocation) | {:.0} ms |", median(warning).as_secs_f64() * 1000.0);
        println!("| the next loop pass → replacement planned and launched | {:.0} ms |", median(replace).as_secs_f64() * 1000.0);
        println!("| drain start → node tainted + every eviction issued (110 pods) | {:.0} ms |", median(drain).as_secs_f64() * 1000.0);
    });
}
