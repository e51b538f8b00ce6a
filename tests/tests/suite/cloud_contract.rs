//! The `Cloud` contract for launch templates: one test body per behaviour,
//! run on the in-memory cloud (`SimCloud`) and on `Ec2Cloud` against the
//! moto emulator (a VPC and cluster of its own per test), so the
//! simulator's templates answer as EC2's do.
//!
//! `contract!` turns each generic body into a `sim` and an `ec2` test:
//! `cargo test -p nodewright-tests --test suite cloud_contract::` runs both.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{RequestLaunchTemplateData, ResourceType};
use nodewright::aws::Ec2Cloud;
use nodewright::aws::prices::SeededPrices;
use nodewright::cloud::{KubeletConfig, ownership};
use nodewright::model::{LaunchRequest, LaunchTemplate, PricedOffering};
use nodewright::ports::Cloud;
use nodewright::sim::cloud::SIM_CLUSTER;
use nodewright::sim::{SimClock, SimCloud, catalog};
use nodewright_tests::aws::{Ec2Fixture, unique};

const REGION: &str = "us-east-1";

/// One generic body, two tests: the in-memory cloud and EC2 on the emulator.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sim() {
                super::$name(&super::SimWorld::new()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ec2() {
                super::$name(&super::Ec2World::new().await).await;
            }
        }
    )*};
}

contract!(
    launch_templates_are_listed_and_deleted_only_when_ours,
    a_deleted_template_is_made_again_by_the_next_launch,
);

/// Set-up and observation for one contract test, on either cloud.
trait CloudWorld {
    type Port: Cloud;
    fn port(&self) -> &Self::Port;
    /// The cluster our ownership tag names.
    fn cluster(&self) -> String;
    /// A launch of one on-demand m5.large for a new claim of `pool`.
    fn request(&self, pool: &str) -> LaunchRequest;
    /// A template someone else made, with these tags (returned as a
    /// listing would show it, so a delete can name it).
    async fn add_foreign_template(&self, name: &str, tags: &[(&str, &str)]) -> LaunchTemplate;
    /// Whether a template of this name exists, whoever's it is.
    async fn template_exists(&self, name: &str) -> bool;
}

fn request_for(pool: &str, offering: PricedOffering) -> LaunchRequest {
    let claim_id = unique(pool);
    LaunchRequest {
        client_token: format!("nodewright-{claim_id}"),
        claim_id,
        pool: pool.into(),
        node_class: None,
        node_class_spec: None,
        options: vec![offering],
        labels: [("karpenter.sh/nodepool".to_owned(), pool.to_owned())].into(),
        taints: Vec::new(),
        kubelet: KubeletConfig::default(),
        reservations: Vec::new(),
    }
}

// ---------------------------------------------------------------- in memory

struct SimWorld {
    cloud: SimCloud,
}

impl SimWorld {
    fn new() -> SimWorld {
        SimWorld {
            cloud: SimCloud::new(
                catalog::catalog(REGION).expect("region"),
                SimClock::default(),
            ),
        }
    }
}

impl CloudWorld for SimWorld {
    type Port = SimCloud;
    fn port(&self) -> &SimCloud {
        &self.cloud
    }
    fn cluster(&self) -> String {
        SIM_CLUSTER.to_owned()
    }
    fn request(&self, pool: &str) -> LaunchRequest {
        let catalog = catalog::catalog(REGION).expect("region");
        let o = catalog
            .offerings
            .iter()
            .find(|o| o.instance_type == "m5.large" && o.capacity_type == "on-demand")
            .expect("m5.large on demand")
            .clone();
        request_for(pool, o)
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

// ---------------------------------------------------------------- EC2 on moto

struct Ec2World {
    fixture: Ec2Fixture,
    cloud: Ec2Cloud<SeededPrices>,
}

impl Ec2World {
    async fn new() -> Ec2World {
        let fixture = Ec2Fixture::new(REGION, "1.32").await;
        let mut prices = SeededPrices::default();
        prices.on_demand.insert("m5.large".to_owned(), 0.096);
        let cloud =
            Ec2Cloud::with_prices(&fixture.config, fixture.settings(), prices).expect("adapter");
        Ec2World { fixture, cloud }
    }
}

impl CloudWorld for Ec2World {
    type Port = Ec2Cloud<SeededPrices>;
    fn port(&self) -> &Ec2Cloud<SeededPrices> {
        &self.cloud
    }
    fn cluster(&self) -> String {
        self.fixture.cluster.clone()
    }
    fn request(&self, pool: &str) -> LaunchRequest {
        request_for(
            pool,
            PricedOffering {
                reservation_ids: Vec::new(),
                instance_type: "m5.large".into(),
                zone: self.fixture.zones[0].clone(),
                capacity_type: "on-demand".into(),
                price: 0.096,
            },
        )
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
            .tag_specifications(nodewright_tests::aws::tags(
                ResourceType::LaunchTemplate,
                tags,
            ))
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
                aws_sdk_ec2::types::Filter::builder()
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

// ---------------------------------------------------------------- bodies

/// A launch makes a template tagged as ours, naming its NodeClass, pool
/// and AMI; the listing shows ours and never a node group's, a Karpenter's
/// or another cluster's; a delete removes ours and refuses theirs.
async fn launch_templates_are_listed_and_deleted_only_when_ours<W: CloudWorld>(w: &W) {
    let cluster = w.cluster();
    let launched = w.port().launch(&w.request("lt")).await.expect("launch");
    let other_cluster = unique("other");
    let node_group = unique("eks-nodegroup");
    let karpenter = unique("karpenter.k8s.aws");
    let elsewhere = unique("nodewright-other");
    let foreign = [
        w.add_foreign_template(
            &node_group,
            &[(&ownership::kubernetes_cluster(&cluster), ownership::OWNED)],
        )
        .await,
        w.add_foreign_template(
            &karpenter,
            &[
                ("eks:eks-cluster-name", &cluster),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ],
        )
        .await,
        w.add_foreign_template(
            &elsewhere,
            &[
                (ownership::CLUSTER, &other_cluster),
                (ownership::NODECLASS, "default"),
            ],
        )
        .await,
    ];

    let ours = w.port().launch_templates().await.expect("list");
    assert_eq!(ours.len(), 1, "one template for one launch: {ours:?}");
    let t = &ours[0];
    assert!(t.node_class.is_some(), "names its NodeClass: {t:?}");
    assert_eq!(t.pool.as_deref(), Some("lt"));
    assert_eq!(t.image_id, launched.instance.image_id, "names its AMI");
    for f in &foreign {
        assert!(
            !ours.iter().any(|o| o.name == f.name),
            "{} is not ours",
            f.name
        );
    }

    for f in &foreign {
        assert!(
            !w.port().delete_launch_template(f).await.expect("delete"),
            "{} is not ours: not deleted",
            f.name
        );
        assert!(
            w.template_exists(&f.name).await,
            "{} is still there",
            f.name
        );
    }
    assert!(w.port().delete_launch_template(t).await.expect("delete"));
    assert!(!w.template_exists(&t.name).await);
    assert!(w.port().launch_templates().await.expect("list").is_empty());
    assert!(
        !w.port()
            .delete_launch_template(t)
            .await
            .expect("delete again"),
        "deleting again is no error"
    );
}

/// A template deleted under a warm adapter (another invocation's
/// clean-up) is made again by the next launch that needs it.
async fn a_deleted_template_is_made_again_by_the_next_launch<W: CloudWorld>(w: &W) {
    w.port().launch(&w.request("again")).await.expect("launch");
    let first = w.port().launch_templates().await.expect("list");
    assert_eq!(first.len(), 1);
    assert!(
        w.port()
            .delete_launch_template(&first[0])
            .await
            .expect("delete")
    );
    let second = w
        .port()
        .launch(&w.request("again"))
        .await
        .expect("the next launch makes its template again");
    let listed = w.port().launch_templates().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, first[0].name, "same content, same name");
    assert_ne!(listed[0].id, first[0].id, "a new template");
    assert_eq!(listed[0].image_id, second.instance.image_id);
}
