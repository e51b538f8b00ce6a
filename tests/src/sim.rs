//! Running scenarios on the in-memory adapters, or with the real
//! Kubernetes adapter against the kube-apiserver (the AWS adapters join the
//! same scenarios in their own test file).

use nodewright::ports::Timestamp;
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
    let sim_cloud = SimCloud::new(
        catalog::catalog(region).expect("region in the simulator's catalog"),
        clock.clone(),
    );
    Simulation::new(
        clock,
        FaultyCloud::new(sim_cloud.clone()),
        Some(sim_cloud),
        FaultyStore::new(MemStore::new()),
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
    let clock = SimClock::starting_at(Timestamp::now());
    let sim_cloud = SimCloud::new(
        catalog::catalog(region).expect("region in the simulator's catalog"),
        clock.clone(),
    );
    Simulation::with_cluster(
        clock,
        FaultyCloud::new(sim_cloud.clone()),
        Some(sim_cloud),
        FaultyStore::new(MemStore::new()),
        cluster,
        settings,
    )
}

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
