//! Fixtures of the `Cloud` contract (`tests/suite/cloud_contract.rs`): the
//! simulated EC2 (`SimCloud`) and `Ec2Cloud` against the emulator (a VPC
//! and an EKS cluster of its own per test), each behind
//! [`ContractCloud`]: the port, plus what a test sets up or looks at
//! around it — someone else's instances and templates, an offering out of
//! capacity, a second invocation's adapter, a cluster upgrade.
//!
//! The emulator cannot run out of capacity, so the EC2 fixture's port is
//! `Ec2Cloud` behind the `FaultyCloud` decorator, which refuses the
//! offerings [`ContractCloud::remove_capacity`] names before CreateFleet;
//! the simulator refuses them itself.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, RequestLaunchTemplateData, ResourceType};
use nodewright::aws::Ec2Cloud;
use nodewright::aws::ec2::ClusterInfo;
use nodewright::aws::prices::SeededPrices;
use nodewright::cloud::{KubeletConfig, ownership};
use nodewright::config::NodeClass;
use nodewright::config::nodeclass::{
    EC2NodeClassSpec, SecurityGroupSelectorTermSpec, SubnetSelectorTermSpec,
};
use nodewright::model::{LaunchRequest, LaunchTemplate, OfferingKey, PricedOffering};
use nodewright::ports::Cloud;
use nodewright::sim::cloud::SIM_CLUSTER;
use nodewright::sim::{FaultyCloud, SimClock, SimCloud, catalog};

use crate::aws::{Ec2Fixture, unique};

/// The region both clouds are set in.
pub const REGION: &str = "us-east-1";

/// Set-up and observation for one contract test, on either cloud.
#[allow(async_fn_in_trait)]
pub trait ContractCloud {
    type Port: Cloud;
    /// The cloud as the functions see it.
    fn port(&self) -> &Self::Port;
    /// Another invocation's adapter over the same account: its caches
    /// start empty, what it finds is what the cloud holds.
    fn another_invocation(&self) -> Self::Port;
    /// The adapter once the cluster runs a newer Kubernetes version (the
    /// EKS-optimized AMI aliases move with it).
    async fn after_upgrade(&self) -> Self::Port;
    /// The cluster our ownership tag names.
    fn cluster(&self) -> String;
    /// Two zones of the region with subnets.
    fn zones(&self) -> [String; 2];
    /// An option to launch `instance_type` in `zone` at `capacity_type`.
    fn offering(&self, instance_type: &str, zone: &str, capacity_type: &str) -> PricedOffering;
    /// The NodeClass `default` this cloud launches with.
    fn node_class(&self) -> NodeClass;
    /// Whether the adapter resolves subnets and security groups (EC2 does;
    /// the simulator resolves AMIs only, leaving the rest "not compared").
    fn resolves_network(&self) -> bool;
    /// From now on, launches of this offering fail for lack of capacity.
    fn remove_capacity(&self, offering: OfferingKey);
    /// An instance another cluster runs in the same account, in `zone`;
    /// returns its id.
    async fn add_foreign_instance(&self, zone: &str) -> String;
    /// Whether an instance, whoever's, is running.
    async fn is_running(&self, id: &str) -> bool;
    /// Instances of the account, in any state, launched for this claim.
    async fn launched_for_claim(&self, claim_id: &str) -> usize;
    /// A template someone else made, with these tags (returned as a
    /// listing would show it, so a delete can name it).
    async fn add_foreign_template(&self, name: &str, tags: &[(&str, &str)]) -> LaunchTemplate;
    /// Whether a template of this name exists, whoever's it is.
    async fn template_exists(&self, name: &str) -> bool;

    /// A launch for a new claim of `pool` with these options.
    fn request(&self, pool: &str, options: Vec<PricedOffering>) -> LaunchRequest {
        let claim_id = unique(pool);
        LaunchRequest {
            client_token: format!("nodewright-{claim_id}"),
            claim_id,
            pool: pool.into(),
            node_class: None,
            node_class_spec: None,
            options,
            labels: [("karpenter.sh/nodepool".to_owned(), pool.to_owned())].into(),
            taints: Vec::new(),
            kubelet: KubeletConfig::default(),
            reservations: Vec::new(),
        }
    }

    /// A launch of one on-demand m5.large in the first zone for a new claim of `pool`.
    fn m5_large(&self, pool: &str) -> LaunchRequest {
        let [zone, _] = self.zones();
        self.request(pool, vec![self.offering("m5.large", &zone, "on-demand")])
    }
}

fn offering(instance_type: &str, zone: &str, capacity_type: &str, price: f64) -> PricedOffering {
    PricedOffering {
        reservation_ids: Vec::new(),
        instance_type: instance_type.into(),
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
    }
}

// ---------------------------------------------------------------- in memory

#[derive(Debug)]
pub struct SimCloudFixture {
    cloud: SimCloud,
}

/// The simulated EC2 of [`REGION`], at the simulator's default Kubernetes version.
pub async fn sim(_test: &str) -> SimCloudFixture {
    SimCloudFixture {
        cloud: SimCloud::new(
            catalog::catalog(REGION).expect("region"),
            SimClock::default(),
        ),
    }
}

impl ContractCloud for SimCloudFixture {
    type Port = SimCloud;
    fn port(&self) -> &SimCloud {
        &self.cloud
    }
    fn another_invocation(&self) -> SimCloud {
        // The simulated account is shared state; a clone is another handle on it.
        self.cloud.clone()
    }
    async fn after_upgrade(&self) -> SimCloud {
        let next = match self.cloud.kubernetes_version().split_once('.') {
            Some((major, minor)) => {
                format!("{major}.{}", minor.parse::<u32>().expect("minor") + 1)
            }
            None => panic!("a version: {}", self.cloud.kubernetes_version()),
        };
        self.cloud.set_kubernetes_version(&next);
        self.cloud.clone()
    }
    fn cluster(&self) -> String {
        SIM_CLUSTER.to_owned()
    }
    fn zones(&self) -> [String; 2] {
        let catalog = catalog::catalog(REGION).expect("region");
        let mut zones: Vec<String> = catalog
            .offerings
            .iter()
            .filter(|o| o.instance_type == "m5.large")
            .map(|o| o.zone.clone())
            .collect();
        zones.sort();
        zones.dedup();
        [zones[0].clone(), zones[1].clone()]
    }
    fn offering(&self, instance_type: &str, zone: &str, capacity_type: &str) -> PricedOffering {
        catalog::catalog(REGION)
            .expect("region")
            .offerings
            .iter()
            .find(|o| {
                o.instance_type == instance_type
                    && o.zone == zone
                    && o.capacity_type == capacity_type
            })
            .unwrap_or_else(|| panic!("{instance_type} {capacity_type} in {zone}"))
            .clone()
    }
    fn node_class(&self) -> NodeClass {
        // The simulator resolves any class to its AMI of the day; the
        // selectors only need to validate.
        let tags: BTreeMap<String, String> =
            [("karpenter.sh/discovery".to_owned(), SIM_CLUSTER.to_owned())].into();
        let spec = EC2NodeClassSpec {
            ami_selector_terms: vec![crate::aws::ami_alias("al2023@latest")],
            subnet_selector_terms: vec![SubnetSelectorTermSpec {
                tags: tags.clone(),
                ..Default::default()
            }],
            security_group_selector_terms: vec![SecurityGroupSelectorTermSpec {
                tags,
                ..Default::default()
            }],
            default_instance_profile: true,
            ..Default::default()
        };
        crate::aws::node_class("default", &spec)
    }
    fn resolves_network(&self) -> bool {
        false
    }
    fn remove_capacity(&self, offering: OfferingKey) {
        self.cloud.remove_capacity(offering);
    }
    async fn add_foreign_instance(&self, zone: &str) -> String {
        let tags = [
            (ownership::CLUSTER.to_owned(), unique("other-cluster")),
            (ownership::NODECLASS.to_owned(), "default".to_owned()),
        ]
        .into();
        self.cloud
            .add_neighbour("m5.large", zone, "on-demand", tags)
            .id
    }
    async fn is_running(&self, id: &str) -> bool {
        self.cloud
            .neighbours()
            .into_iter()
            .chain(self.cloud.all_instances())
            .any(|i| {
                i.instance.id == id && i.instance.state == nodewright::model::InstanceState::Running
            })
    }
    async fn launched_for_claim(&self, claim_id: &str) -> usize {
        self.cloud
            .all_instances()
            .iter()
            .filter(|i| i.instance.claim_id.as_deref() == Some(claim_id))
            .count()
    }
    async fn add_foreign_template(&self, name: &str, tags: &[(&str, &str)]) -> LaunchTemplate {
        let tags: BTreeMap<String, String> = tags
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.cloud.add_neighbour_template(name, tags);
        self.cloud
            .all_templates()
            .into_iter()
            .find(|t| t.template.name == name)
            .expect("added")
            .template
    }
    async fn template_exists(&self, name: &str) -> bool {
        self.cloud
            .all_templates()
            .iter()
            .any(|t| t.template.name == name)
    }
}

// ---------------------------------------------------------------- EC2 on the emulator

pub struct Ec2CloudFixture {
    fixture: Ec2Fixture,
    cloud: FaultyCloud<Ec2Cloud<SeededPrices>>,
}

impl std::fmt::Debug for Ec2CloudFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2CloudFixture")
            .field("cluster", &self.fixture.cluster)
            .finish_non_exhaustive()
    }
}

/// The Kubernetes version the EC2 fixture's cluster runs.
const EC2_KUBERNETES: &str = "1.32";
/// On-demand prices the EC2 fixture is seeded with; spot is 35 % of them.
const EC2_PRICES: [(&str, f64); 2] = [("m5.large", 0.096), ("c5.large", 0.085)];

/// A VPC and an EKS cluster of its own on the emulator, prices seeded.
pub async fn ec2(_test: &str) -> Ec2CloudFixture {
    let fixture = Ec2Fixture::new(REGION, EC2_KUBERNETES).await;
    let cloud = FaultyCloud::new(adapter(&fixture, fixture.settings()));
    Ec2CloudFixture { fixture, cloud }
}

fn prices(zones: &[String]) -> SeededPrices {
    let mut p = SeededPrices::default();
    for (ty, od) in EC2_PRICES {
        p.on_demand.insert(ty.to_owned(), od);
        for z in zones {
            p.spot.insert((ty.to_owned(), z.clone()), od * 0.35);
        }
    }
    p
}

fn adapter(f: &Ec2Fixture, settings: nodewright::aws::Ec2CloudSettings) -> Ec2Cloud<SeededPrices> {
    Ec2Cloud::with_prices(&f.config, settings, prices(&f.zones)).expect("adapter")
}

impl ContractCloud for Ec2CloudFixture {
    type Port = FaultyCloud<Ec2Cloud<SeededPrices>>;
    fn port(&self) -> &Self::Port {
        &self.cloud
    }
    fn another_invocation(&self) -> Self::Port {
        FaultyCloud::new(adapter(&self.fixture, self.fixture.settings()))
    }
    async fn after_upgrade(&self) -> Self::Port {
        let mut upgraded = self.fixture.settings();
        upgraded.kubernetes_version = Some("1.33".into());
        FaultyCloud::new(adapter(&self.fixture, upgraded))
    }
    fn cluster(&self) -> String {
        self.fixture.cluster.clone()
    }
    fn zones(&self) -> [String; 2] {
        [self.fixture.zones[0].clone(), self.fixture.zones[1].clone()]
    }
    fn offering(&self, instance_type: &str, zone: &str, capacity_type: &str) -> PricedOffering {
        let od = EC2_PRICES
            .iter()
            .find(|(t, _)| *t == instance_type)
            .map(|(_, p)| *p)
            .unwrap_or_else(|| panic!("no seeded price for {instance_type}"));
        let price = if capacity_type == "spot" {
            od * 0.35
        } else {
            od
        };
        offering(instance_type, zone, capacity_type, price)
    }
    fn node_class(&self) -> NodeClass {
        self.fixture.node_class()
    }
    fn resolves_network(&self) -> bool {
        true
    }
    fn remove_capacity(&self, offering: OfferingKey) {
        self.cloud.remove_capacity(offering);
    }
    async fn add_foreign_instance(&self, zone: &str) -> String {
        // A second cluster sharing the subnets launches through its own adapter.
        let mut settings = nodewright::aws::Ec2CloudSettings::new(unique("other-cluster"))
            .with_node_class(self.fixture.node_class());
        settings.cluster = Some(ClusterInfo {
            endpoint: "https://other.example".into(),
            ca_base64: "Q0E=".into(),
            service_cidr: "172.20.0.0/16".into(),
            version: EC2_KUBERNETES.into(),
        });
        let other = adapter(&self.fixture, settings);
        let request = self.request("theirs", vec![self.offering("m5.large", zone, "on-demand")]);
        other
            .launch(&request)
            .await
            .expect("their launch")
            .instance
            .id
    }
    async fn is_running(&self, id: &str) -> bool {
        let out = self
            .fixture
            .ec2()
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .any(|i| {
                i.state().and_then(|s| s.name())
                    == Some(&aws_sdk_ec2::types::InstanceStateName::Running)
            })
    }
    async fn launched_for_claim(&self, claim_id: &str) -> usize {
        self.fixture.instances_of_claim(claim_id).await.len()
    }
    async fn add_foreign_template(&self, name: &str, tags: &[(&str, &str)]) -> LaunchTemplate {
        let out = self
            .fixture
            .ec2()
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(
                RequestLaunchTemplateData::builder()
                    .image_id("ami-12c6146b")
                    .build(),
            )
            .tag_specifications(crate::aws::tags(ResourceType::LaunchTemplate, tags))
            .send()
            .await
            .expect("CreateLaunchTemplate");
        let t = out.launch_template().expect("template");
        LaunchTemplate {
            id: t.launch_template_id().expect("id").to_owned(),
            name: name.to_owned(),
            created_at: nodewright::model::Timestamp::now(),
            node_class: None,
            pool: None,
            image_id: None,
        }
    }
    async fn template_exists(&self, name: &str) -> bool {
        let out = self
            .fixture
            .ec2()
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name("launch-template-name")
                    .values(name)
                    .build(),
            )
            .send()
            .await
            .expect("DescribeLaunchTemplates");
        out.launch_templates()
            .iter()
            .any(|t| t.launch_template_name() == Some(name))
    }
}
