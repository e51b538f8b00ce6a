//! The simulated cluster the benches that run handlers start from (`bench
//! churn`, `bench invocation`, `bench disruption`): the embedded us-east-1
//! catalog on the in-memory adapters, a workload loaded.

use anyhow::Context;
use nodewright::sim::{MemStore, SimClock, SimCloud, SimSettings, Simulation, catalog, scenario};

/// A simulation of the embedded us-east-1 catalog on the in-memory
/// adapters with `objects` loaded (a scenario without actions): where each
/// bench starts. Returns the simulated EC2 beside it.
pub(crate) async fn loaded_simulation(
    name: &str,
    objects: Vec<serde_json::Value>,
    settings: SimSettings,
) -> anyhow::Result<(Simulation<SimCloud, MemStore>, SimCloud)> {
    let clock = SimClock::default();
    let cloud = SimCloud::new(catalog::catalog("us-east-1")?, clock.clone());
    let mut sim = Simulation::new(
        clock,
        cloud.clone(),
        Some(cloud.clone()),
        MemStore::new(),
        settings,
    );
    let s = scenario::Scenario {
        name: name.into(),
        description: String::new(),
        region: "us-east-1".into(),
        objects,
        actions: Vec::new(),
        run: "0s".into(),
        simulator: scenario::Pace::default(),
        spot_pools: scenario::SpotPoolsSpec::default(),
        capacity_reservations: Vec::new(),
        expect: scenario::Expect::default(),
    };
    scenario::load(&mut sim, &s)
        .await
        .with_context(|| format!("loading the {name} workload"))?;
    Ok((sim, cloud))
}
