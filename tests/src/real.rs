//! A simulation on the real adapters: EC2 on the moto emulator (`Ec2Cloud`
//! with seeded prices, so nothing depends on the Pricing API), the given
//! `DynamoStore`, and the real kube-apiserver taken whole
//! (`ApiServerCluster::exclusive`, so only one such simulation runs at a
//! time in a process).

use std::sync::Arc;

use nodewright::aws::prices::SeededPrices;
use nodewright::aws::{DynamoStore, Ec2Cloud};
use nodewright::model::Timestamp;
use nodewright::sim::scenario::{self, Scenario};
use nodewright::sim::{FaultyCloud, SimClock, SimSettings, Simulation};

use crate::aws::Ec2Fixture;
use crate::kube_harness::KubeEnv;
use crate::kube_world::ApiServerCluster;

pub const REGION: &str = "us-east-1";

pub type RealSim =
    Simulation<FaultyCloud<Arc<Ec2Cloud<SeededPrices>>>, DynamoStore, ApiServerCluster>;

/// Prices for the scenarios' instance types in every zone (spot at 32 %,
/// 35 %, … of on-demand, zone by zone).
pub fn seeded(zones: &[String]) -> SeededPrices {
    let mut p = SeededPrices::default();
    for (ty, od) in [
        ("m5.4xlarge", 0.768),
        ("m5a.4xlarge", 0.688),
        ("m6i.4xlarge", 0.768),
        ("m5.xlarge", 0.192),
        ("m5a.xlarge", 0.172),
        ("m6i.xlarge", 0.192),
        ("m5.large", 0.096),
    ] {
        p.on_demand.insert(ty.to_owned(), od);
        for (i, z) in zones.iter().enumerate() {
            p.spot
                .insert((ty.to_owned(), z.clone()), od * (0.32 + 0.03 * i as f64));
        }
    }
    p
}

/// A fresh EC2 fixture (VPC, subnets, security group, EKS cluster) and a
/// simulation over it, `store` and the whole API server.
pub async fn on_real(store: DynamoStore) -> (RealSim, Ec2Fixture) {
    let f = Ec2Fixture::new(REGION, "1.32").await;
    let cloud = Ec2Cloud::with_prices(&f.config, f.settings(), seeded(&f.zones)).expect("adapter");
    let cluster = ApiServerCluster::exclusive(KubeEnv::get()).await;
    let sim = Simulation::with_cluster(
        SimClock::starting_at(Timestamp::now()),
        FaultyCloud::new(Arc::new(cloud)),
        None,
        store,
        cluster,
        SimSettings::default(),
    );
    (sim, f)
}

/// `s` loaded (its NodeClass `default` replaced by the fixture's, whose
/// subnets exist), run to its end and checked: every expectation met.
pub async fn run_scenario(store: DynamoStore, s: &Scenario) -> (RealSim, Ec2Fixture) {
    // Boxed: a debug build's simulation futures are large, and the tests
    // that await this one nest it in their own on a test thread's stack.
    let (mut sim, f) = Box::pin(on_real(store)).await;
    scenario::load(&mut sim, s).await.expect("loads");
    f.store_node_class(&sim.store).await;
    Box::pin(scenario::run(&mut sim, s)).await.expect("runs");
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{}: {failures:#?}", s.name);
    (sim, f)
}
