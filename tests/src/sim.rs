//! Running scenarios on the in-memory adapters (the real adapters join the
//! same scenarios in their own test files).

use nodewright::sim::scenario::{self, Scenario};
use nodewright::sim::{FaultyCloud, FaultyStore, MemStore, SimClock, SimCloud, SimSettings, Simulation, catalog};

/// The simulation type the scenario tests use: the in-memory adapters
/// behind fault decorators (which do nothing until told to).
pub type MemSim = Simulation<FaultyCloud<SimCloud>, FaultyStore<MemStore>>;

pub fn in_memory(region: &str, settings: SimSettings) -> MemSim {
    let clock = SimClock::default();
    let sim_cloud = SimCloud::new(catalog::catalog(region).expect("region in the simulator's catalog"), clock.clone());
    Simulation::new(clock, FaultyCloud::new(sim_cloud.clone()), Some(sim_cloud), FaultyStore::new(MemStore::new()), settings)
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
    scenario::load(&mut sim, scenario).await.expect("scenario loads");
    scenario::run(&mut sim, scenario).await.expect("scenario runs");
    let failures = scenario::check(&sim, &scenario.expect).await;
    (sim, failures)
}
