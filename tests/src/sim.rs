//! Running scenarios on the in-memory adapters, or with the real
//! Kubernetes adapter against the kube-apiserver (the AWS adapters join the
//! same scenarios in their own test file).

use nodewright::model::{SignedDuration, Timestamp};
use nodewright::sim::scenario::{self, Scenario};
use nodewright::sim::{
    FaultyCloud, FaultyStore, MemStore, SimClock, SimCloud, SimSettings, Simulation, catalog,
};

use crate::kube_harness::KubeEnv;
use crate::kube_world::ApiServerCluster;

/// The simulation type the scenario tests use: the in-memory adapters
/// behind fault decorators (which do nothing until told to).
pub type MemSim = Simulation<FaultyCloud<SimCloud>, FaultyStore<MemStore>>;

pub fn in_memory(region: &str, settings: SimSettings) -> MemSim {
    let clock = SimClock::default();
    let cloud = sim_cloud(region, &clock);
    Simulation::new(
        clock,
        FaultyCloud::new(cloud.clone()),
        Some(cloud),
        FaultyStore::new(MemStore::new()),
        settings,
    )
}

/// The simulator's EC2 for `region`, on `clock`.
pub fn sim_cloud(region: &str, clock: &SimClock) -> SimCloud {
    SimCloud::new(
        catalog::catalog(region).expect("region in the simulator's catalog"),
        clock.clone(),
    )
}

/// In-memory cloud and store (behind fault decorators) around `cluster`.
fn around_cluster(
    region: &str,
    clock: SimClock,
    cluster: ApiServerCluster,
    settings: SimSettings,
) -> KubeSim {
    let cloud = sim_cloud(region, &clock);
    Simulation::with_cluster(
        clock,
        FaultyCloud::new(cloud.clone()),
        Some(cloud),
        FaultyStore::new(MemStore::new()),
        cluster,
        settings,
    )
}

/// A scenario shipped under `tests/scenarios/`.
pub fn scenario_file(name: &str) -> Scenario {
    let path = format!("{}/scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    scenario::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Loads, runs and checks a scenario on the in-memory adapters.
pub async fn run(scenario: &Scenario, settings: SimSettings) -> (MemSim, Vec<String>) {
    let mut sim = in_memory(&scenario.region, settings);
    scenario::load(&mut sim, scenario)
        .await
        .expect("scenario loads");
    scenario::run(&mut sim, scenario)
        .await
        .expect("scenario runs");
    let failures = scenario::check(&sim, &scenario.expect).await;
    (sim, failures)
}

/// In-memory cloud and store; the cluster is the real kube-apiserver.
pub type KubeSim = Simulation<FaultyCloud<SimCloud>, FaultyStore<MemStore>, ApiServerCluster>;

/// A simulation whose cluster is the real API server, reached by the
/// handlers through `KubeCluster` as the function identity. Holds the
/// server exclusively until dropped. The clock starts at the real time, as
/// the server stamps objects with it.
pub async fn on_apiserver(region: &str, settings: SimSettings) -> KubeSim {
    let cluster = ApiServerCluster::exclusive(KubeEnv::get()).await;
    around_cluster(
        region,
        SimClock::starting_at(Timestamp::now()),
        cluster,
        settings,
    )
}

/// The pace of a simulation beside a real control plane: the controllers
/// live in real time, so the simulation does too (`SimClock::wall`), with
/// a boot of 8 s from launch to the Node (EC2 and a kubelet take ~40-60 s;
/// the scenarios are short). Everything else as on the in-memory cluster.
pub fn control_plane_settings() -> SimSettings {
    SimSettings {
        boot: SignedDuration::from_secs(8),
        ..SimSettings::default()
    }
}

/// A simulation whose cluster is the real API server **with** its control
/// plane (kube-controller-manager, kube-scheduler, kwok): in-memory cloud
/// and store, a wall clock, the registrar of `Simulation` creating each
/// booted instance's Node. Holds the server exclusively until dropped.
pub async fn on_control_plane(region: &str, settings: SimSettings) -> KubeSim {
    let cluster = ApiServerCluster::exclusive(KubeEnv::control_plane()).await;
    around_cluster(region, SimClock::wall(), cluster, settings)
}

/// Loads, runs (in real time) and checks a scenario beside the real
/// control plane. Its `run` is the most it may take: once the last action
/// is done, the run ends early when every final expectation holds and
/// still holds `SETTLE` later (a real-time minute saved is a CI minute).
pub async fn run_on_control_plane(
    scenario: &Scenario,
    settings: SimSettings,
) -> (KubeSim, Vec<String>) {
    let mut sim = on_control_plane(&scenario.region, settings).await;
    scenario::load(&mut sim, scenario)
        .await
        .expect("scenario loads");
    let start = sim.now();
    let end = start + scenario::parse_duration(&scenario.run).expect("run");
    let last = scenario
        .actions
        .iter()
        .map(|a| scenario::parse_duration(&a.at).expect("at"))
        .max()
        .unwrap_or_default();
    let mut actions = scenario.clone();
    actions.run = format!("{}ms", last.as_millis());
    scenario::run(&mut sim, &actions)
        .await
        .expect("scenario runs");
    while sim.now() < end {
        sim.run_until(end.min(sim.now() + POLL)).await;
        if scenario::check_now(&sim, &scenario.expect).await.is_empty() {
            sim.run_until(end.min(sim.now() + SETTLE)).await;
            if scenario::check_now(&sim, &scenario.expect).await.is_empty() {
                break;
            }
        }
    }
    let failures = scenario::check(&sim, &scenario.expect).await;
    (sim, failures)
}

/// How often a control-plane scenario checks whether it is done.
const POLL: SignedDuration = SignedDuration::from_secs(5);
/// How long its final expectations must keep holding before it ends early.
const SETTLE: SignedDuration = SignedDuration::from_secs(15);

/// Loads, runs and checks a scenario against the real API server.
pub async fn run_on_apiserver(
    scenario: &Scenario,
    settings: SimSettings,
) -> (KubeSim, Vec<String>) {
    let mut sim = on_apiserver(&scenario.region, settings).await;
    scenario::load(&mut sim, scenario)
        .await
        .expect("scenario loads");
    scenario::run(&mut sim, scenario)
        .await
        .expect("scenario runs");
    let failures = scenario::check(&sim, &scenario.expect).await;
    (sim, failures)
}
