//! `Ec2Cloud` against the moto emulator, what only EC2 has: the catalog
//! from moto's real instance-type data, subnet / security-group / AMI
//! selection, launch templates' content, CreateFleet's request and tags,
//! price fallback, status checks, reservations and bad input. What the
//! simulated cloud must answer the same way (client-token idempotency,
//! insufficient capacity, listing and terminating only our instances,
//! `resolved_class`, templates ours only) is the Cloud contract
//! (`cloud_contract.rs`), run on both.
//!
//! Each test builds its own VPC, cluster and tags (`Ec2Fixture`), so tests
//! run in parallel against one server.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use nodewright::aws::ec2::tags;
use nodewright::aws::prices::{PriceOrigin, PriceSource, SeededPrices};
use nodewright::aws::{AwsPrices, ClientOptions, Ec2Cloud, Ec2CloudSettings};
use nodewright::cloud::KubeletConfig;
use nodewright::config::nodeclass::{
    AmiSelectorTermSpec, EC2NodeClassSpec, SecurityGroupSelectorTermSpec, SubnetSelectorTermSpec,
};
use nodewright::model::{InstanceState, LaunchRequest, OfferingKey, PricedOffering};
use nodewright::ports::{Cloud, CloudError, FailureKind};
use nodewright::resources::MIB;
use nodewright::scheduling::taints::{Effect, Taint};
use nodewright_tests::aws::{Ec2Fixture, ami_alias, node_class, unique};

fn offering(ty: &str, zone: &str, ct: &str, price: f64) -> PricedOffering {
    PricedOffering {
        reservation_ids: Vec::new(),
        instance_type: ty.into(),
        zone: zone.into(),
        capacity_type: ct.into(),
        price,
    }
}

fn request(pool: &str, options: Vec<PricedOffering>) -> LaunchRequest {
    let claim_id = unique(pool);
    LaunchRequest {
        client_token: format!("nodewright-{claim_id}"),
        claim_id,
        pool: pool.into(),
        node_class: None,
        node_class_spec: None,
        options,
        labels: [
            ("karpenter.sh/nodepool".to_owned(), pool.to_owned()),
            ("team".to_owned(), "a".to_owned()),
        ]
        .into(),
        taints: vec![Taint::new(
            "karpenter.sh/unregistered",
            "",
            Effect::NoExecute,
        )],
        kubelet: KubeletConfig::default(),
        reservations: Vec::new(),
    }
}

/// Prices for a few types, so tests do not depend on the Pricing API.
fn seeded(zones: &[String]) -> SeededPrices {
    let mut p = SeededPrices::default();
    for (ty, od) in [
        ("m5.large", 0.096),
        ("m5.xlarge", 0.192),
        ("c5.large", 0.085),
        ("m6g.large", 0.077),
        ("r6gd.xlarge", 0.2304),
    ] {
        p.on_demand.insert(ty.to_owned(), od);
        for z in zones {
            p.spot.insert((ty.to_owned(), z.clone()), od * 0.35);
        }
    }
    p
}

async fn cloud(f: &Ec2Fixture) -> Ec2Cloud<SeededPrices> {
    Ec2Cloud::with_prices(&f.config, f.settings(), seeded(&f.zones)).expect("adapter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_from_real_instance_type_data_with_static_price_fallback() {
    // ap-south-1: the walkthrough's region. Prices: the Pricing API fails in
    // moto (HTTP 500), so on-demand prices come from the shipped table.
    let f = Ec2Fixture::new("ap-south-1", "1.32").await;
    let cloud = Ec2Cloud::new(&f.config, f.settings()).expect("adapter");
    let t0 = Instant::now();
    let catalog = cloud.catalog().await.expect("catalog");
    let cold = t0.elapsed();
    let calls = cloud.api_calls();
    let t1 = Instant::now();
    let again = cloud.catalog().await.expect("warm catalog");
    let warm = t1.elapsed();
    eprintln!(
        "catalog ap-south-1: {} types, {} offerings; cold {:?} ({} EC2 calls), warm {:?}",
        catalog.instance_types.len(),
        catalog.offerings.len(),
        cold,
        calls,
        warm
    );
    assert_eq!(cloud.api_calls(), calls, "a warm catalog makes no API call");
    assert!(std::sync::Arc::ptr_eq(&catalog, &again));
    // How long the fallback may take is proven by counting its attempts
    // (the_pricing_api_failure_is_detected_and_bounded), not by a clock.
    assert!(matches!(
        cloud.price_origin().await,
        Some(PriceOrigin::StaticTable { .. })
    ));

    assert_eq!(catalog.region, "ap-south-1");
    assert!(
        catalog.instance_types.len() > 500,
        "ap-south-1 offers hundreds of types, got {}",
        catalog.instance_types.len()
    );
    assert!(
        catalog
            .instance_types
            .iter()
            .all(|i| i.arch == "amd64" || i.arch == "arm64")
    );
    let r6gd = catalog
        .instance_types
        .iter()
        .find(|i| i.name == "r6gd.xlarge")
        .expect("r6gd.xlarge in ap-south-1");
    assert_eq!(
        (r6gd.vcpu, r6gd.memory_mib, r6gd.arch.as_str()),
        (4, 32768, "arm64")
    );
    assert_eq!(r6gd.local_nvme_gb, 237);
    // The facts the simulator ships are the ones EC2 describes (labels such
    // as the CPU maker, clock, bandwidths, encryption in transit and Nitro
    // Enclaves come from them). The GPU's name is compared as its label
    // spells it (lower case).
    let sim = nodewright::sim::catalog::catalog("ap-south-1").expect("simulated region");
    let mut compared = 0;
    for name in ["r6gd.xlarge", "m5.large", "g4dn.8xlarge", "c7i-flex.large"] {
        let described = catalog.instance_types.iter().find(|i| i.name == name);
        let shipped = sim.instance_types.iter().find(|i| i.name == name);
        if let (Some(d), Some(s)) = (described, shipped) {
            let mut d = d.clone();
            d.gpu_name = d.gpu_name.map(|n| n.to_lowercase());
            assert_eq!(&d, s, "{name}");
            compared += 1;
        }
    }
    assert!(
        compared >= 3,
        "only {compared} type(s) found in both catalogs"
    );
    assert_eq!(
        (
            r6gd.cpu_manufacturer.as_deref(),
            r6gd.sustained_clock_mhz,
            r6gd.nitro_enclaves
        ),
        (Some("AWS"), Some(2500), Some(true))
    );
    let od_1a = catalog
        .offerings
        .iter()
        .find(|o| {
            o.instance_type == "r6gd.xlarge"
                && o.zone == "ap-south-1a"
                && o.capacity_type == "on-demand"
        })
        .expect("r6gd.xlarge on-demand in ap-south-1a");
    assert!(
        (od_1a.price - 0.2304).abs() < 1e-9,
        "static (us-east-1) price, got {}",
        od_1a.price
    );
    assert!(
        catalog
            .offerings
            .iter()
            .any(|o| o.instance_type == "r6gd.xlarge"
                && o.zone == "ap-south-1a"
                && o.capacity_type == "spot")
    );

    // Allocatable with the shipped EKS math.
    let m5 = catalog
        .instance_types
        .iter()
        .find(|i| i.name == "m5.large")
        .expect("m5.large");
    assert_eq!(
        (m5.vcpu, m5.memory_mib, m5.max_enis, m5.ipv4_per_eni),
        (2, 8192, 3, 10)
    );
    let it = m5.to_instance_type(vec![], &KubeletConfig::default());
    assert_eq!(it.allocatable().cpu_millis, 1930);
    assert_eq!(
        it.allocatable().memory_bytes,
        (8192 - 615 - (11 * 29 + 255) - 100) * MIB
    );
    assert_eq!(it.allocatable().pods, 29);
    let p4d = catalog
        .instance_types
        .iter()
        .find(|i| i.name == "p4d.24xlarge");
    if let Some(p4d) = p4d {
        assert_eq!(p4d.gpu_count, 8);
        assert_eq!(
            p4d.max_pods(&KubeletConfig::default()),
            737,
            "default network card's ENIs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pricing_api_failure_is_detected_and_bounded() {
    // moto answers pricing:GetProducts with HTTP 500 and an HTML body.
    let config = nodewright_tests::aws::sdk_config("us-east-1").await;
    let prices = AwsPrices::new(&config, "us-east-1");
    let t0 = Instant::now();
    let od = prices
        .on_demand("us-east-1")
        .await
        .expect("falls back, does not fail");
    let took = t0.elapsed();
    eprintln!("Pricing API failure → static table in {took:?}");
    match &od.origin {
        PriceOrigin::StaticTable {
            table_region,
            reason,
        } => {
            assert_eq!(table_region, "us-east-1");
            assert!(
                reason.contains("GetProducts") && reason.contains("500"),
                "{reason}"
            );
        }
        other => panic!("expected the static table, got {other:?}"),
    }
    assert_eq!(od.prices.get("m5.large"), Some(&0.096));
    // Bounded retries: a failing Pricing API gets two attempts, not the
    // default budget, before the static table answers.
    assert_eq!(prices.pricing_attempts(), 2, "attempts before the fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_a_retryable_unavailable_error() {
    let options = ClientOptions {
        max_attempts: 3,
        attempt_timeout: Duration::from_secs(2),
        operation_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    };
    // Nothing listens on the discard port of the loopback address.
    let config =
        nodewright_tests::aws::sdk_config_at("http://127.0.0.1:9", "us-east-1", &options).await;
    let cloud = Ec2Cloud::with_prices(&config, Ec2CloudSettings::new("c"), SeededPrices::default())
        .expect("adapter");
    let t0 = Instant::now();
    match cloud.catalog().await {
        Err(e) => assert!(e.is_retryable(), "{e:?}"),
        other => panic!("expected a transient error, got {other:?}"),
    }
    match cloud.instances().await {
        Err(e) => {
            assert_eq!(e.failure_kind(), Some(FailureKind::Unavailable), "{e:?}");
            assert!(e.is_retryable());
        }
        other => panic!("expected a transient error, got {other:?}"),
    }
    let store = nodewright::aws::DynamoStore::new(
        &config,
        nodewright::aws::DynamoTables::with_prefix("unreachable"),
    );
    match nodewright::ports::Store::claims(&store).await {
        Err(e) => {
            assert_eq!(e.failure_kind(), Some(FailureKind::Unavailable), "{e:?}");
            assert!(e.is_retryable());
        }
        other => panic!("expected an unavailable store, got {other:?}"),
    }
    eprintln!("unreachable endpoint gave up after {:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_price_fallback_in_us_east_1_and_seeded_prices() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let real = Ec2Cloud::new(&f.config, f.settings()).expect("adapter");
    let t0 = Instant::now();
    let catalog = real.catalog().await.expect("catalog");
    eprintln!(
        "catalog us-east-1 (Pricing API failing → static table): cold {:?}",
        t0.elapsed()
    );
    let price = |c: &nodewright::model::CloudCatalog, ty: &str, ct: &str| {
        c.offerings
            .iter()
            .find(|o| o.instance_type == ty && o.capacity_type == ct)
            .map(|o| o.price)
    };
    assert_eq!(price(&catalog, "m5.large", "on-demand"), Some(0.096));
    assert!(
        matches!(real.price_origin().await, Some(PriceOrigin::StaticTable { table_region, .. }) if table_region == "us-east-1")
    );
    // Spot prices are what EC2 says (moto fakes them).
    assert!(price(&catalog, "m5.large", "spot").is_some_and(|p| p > 0.0 && p < 0.01));

    let seeded = cloud(&f).await;
    let t0 = Instant::now();
    let catalog = seeded.catalog().await.expect("catalog");
    eprintln!("catalog us-east-1 (seeded prices): cold {:?}", t0.elapsed());
    assert_eq!(price(&catalog, "m5.large", "spot"), Some(0.096 * 0.35));
    assert_eq!(price(&catalog, "m5.xlarge", "on-demand"), Some(0.192));
    assert!(
        price(&catalog, "m5.2xlarge", "on-demand").is_none(),
        "no price, no offering"
    );
    assert!(matches!(
        seeded.price_origin().await,
        Some(PriceOrigin::Seeded)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_creates_a_tagged_fleet_instance_and_reuses_its_template() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let cloud = cloud(&f).await;
    let (za, zb) = (f.zones[0].clone(), f.zones[1].clone());
    let req = request(
        "default",
        vec![
            offering("m5.large", &za, "on-demand", 0.096),
            offering("m5.large", &zb, "on-demand", 0.096),
        ],
    );

    let t0 = Instant::now();
    let launched = cloud.launch(&req).await.expect("launch");
    let cold = t0.elapsed();
    let i = &launched.instance;
    assert!(launched.unavailable.is_empty());
    assert_eq!(
        (
            i.instance_type.as_str(),
            i.zone.as_str(),
            i.capacity_type.as_str()
        ),
        ("m5.large", za.as_str(), "on-demand")
    );
    assert_eq!(i.provider_id, format!("aws:///{za}/{}", i.id));
    assert_eq!(i.claim_id.as_deref(), Some(req.claim_id.as_str()));
    assert_eq!(i.price, 0.096);

    // The instance as EC2 sees it: the zone's biggest subnet, our tags.
    let found = f.instances_of_claim(&req.claim_id).await;
    assert_eq!(found.len(), 1);
    let ec2i = &found[0];
    assert_eq!(
        ec2i.subnet_id(),
        f.best_subnet.get(&za).map(String::as_str),
        "the subnet with most free IPs"
    );
    assert_ne!(ec2i.subnet_id(), Some(f.small_subnet.as_str()));
    let tag_map: BTreeMap<&str, &str> = ec2i
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect();
    let cluster_tag = tags::kubernetes_cluster(&f.cluster);
    assert_eq!(tag_map.get(cluster_tag.as_str()), Some(&"owned"));
    assert_eq!(tag_map.get(tags::CLUSTER), Some(&f.cluster.as_str()));
    assert_eq!(tag_map.get(tags::NODEPOOL), Some(&"default"));
    assert_eq!(tag_map.get(tags::NODECLASS), Some(&"default"));
    assert_eq!(tag_map.get(tags::NODECLAIM), Some(&req.claim_id.as_str()));
    assert_eq!(tag_map.get("Name"), Some(&req.claim_id.as_str()));
    assert_eq!(tag_map.get("team"), Some(&"adapters"), "NodeClass tags");
    // Never Karpenter's ownership set: its garbage collector would take it.
    let owned: BTreeMap<String, String> = tag_map
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert!(!tags::karpenter_lists(&owned, &f.cluster), "{owned:?}");
    for k in tags::KARPENTER_OWNERSHIP_KEYS {
        assert!(!tag_map.contains_key(k), "{k} on our instance");
    }

    // The fleet: instant, one on-demand unit, tagged.
    let fleets = f
        .ec2()
        .describe_fleets()
        .send()
        .await
        .expect("DescribeFleets");
    let fleet = fleets
        .fleets()
        .iter()
        .find(|fl| {
            fl.tags().iter().any(|t| {
                t.key() == Some(tags::NODECLAIM) && t.value() == Some(req.claim_id.as_str())
            })
        })
        .expect("a fleet tagged with the claim");
    assert_eq!(fleet.r#type().map(|t| t.as_str()), Some("instant"));
    let target = fleet
        .target_capacity_specification()
        .expect("target capacity");
    assert_eq!(target.total_target_capacity(), Some(1));
    assert_eq!(
        target.default_target_capacity_type().map(|t| t.as_str()),
        Some("on-demand")
    );
    let configs = fleet.launch_template_configs();
    assert_eq!(configs.len(), 1);
    let overrides = configs[0].overrides();
    assert_eq!(overrides.len(), 2);
    assert_eq!(
        overrides[0].subnet_id(),
        f.best_subnet.get(&za).map(String::as_str)
    );
    assert_eq!(
        overrides[1].subnet_id(),
        f.best_subnet.get(&zb).map(String::as_str)
    );

    // The launch template: named by content hash, user data is an AL2023 NodeConfig.
    let templates = f.launch_templates().await;
    assert_eq!(templates.len(), 1);
    let name = templates[0]
        .launch_template_name()
        .expect("name")
        .to_owned();
    assert!(name.starts_with("nodewright/"), "{name}");
    let template_tags: BTreeMap<String, String> = templates[0]
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
        .collect();
    assert!(
        tags::is_ours(&template_tags, &f.cluster),
        "{template_tags:?}"
    );
    assert!(
        !tags::karpenter_loads_template(&template_tags, &f.cluster),
        "Karpenter would load and later delete it: {template_tags:?}"
    );
    let version = f
        .ec2()
        .describe_launch_template_versions()
        .launch_template_name(&name)
        .versions("$Latest")
        .send()
        .await
        .expect("DescribeLaunchTemplateVersions");
    let data = version.launch_template_versions()[0]
        .launch_template_data()
        .expect("data");
    // (moto's fleets do not copy a template's security groups to the instance: check the template.)
    assert_eq!(
        data.security_group_ids(),
        std::slice::from_ref(&f.security_group)
    );
    let manifest: serde_json::Value = seeded_parameters(&f).await;
    assert_eq!(data.image_id(), manifest["/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id"].as_str());
    let user_data = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().expect("user data"))
        .expect("base64");
    let user_data = String::from_utf8(user_data).expect("utf8");
    assert!(
        user_data.contains("application/node.eks.aws"),
        "{user_data}"
    );
    assert!(user_data.contains("maxPods: 29"), "{user_data}");
    assert!(user_data.contains("--node-labels=karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default,team=a"), "{user_data}");
    assert!(
        user_data.contains("key: karpenter.sh/unregistered"),
        "{user_data}"
    );
    assert!(
        user_data.contains(&format!("name: {}", f.cluster)),
        "{user_data}"
    );
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_tokens())
            .map(|t| t.as_str()),
        Some("required")
    );

    // A second claim of the same pool: same template, no new one.
    let calls_before = cloud.api_calls();
    let req2 = request(
        "default",
        vec![offering("m5.large", &zb, "on-demand", 0.096)],
    );
    let t1 = Instant::now();
    let second = cloud.launch(&req2).await.expect("second launch");
    let warm = t1.elapsed();
    assert_eq!(second.instance.zone, zb);
    assert_eq!(
        f.launch_templates().await.len(),
        1,
        "the template is reused"
    );
    let warm_calls = cloud.api_calls() - calls_before;
    assert_eq!(
        warm_calls, 2,
        "warm launch = DescribeInstances (adopt check) + CreateFleet"
    );
    eprintln!("launch latency: cold {cold:?}, warm {warm:?} ({warm_calls} API calls)");

    // Listing: both, running, with prices.
    let mut ours = cloud.instances().await.expect("instances");
    ours.sort_by(|a, b| a.zone.cmp(&b.zone));
    assert_eq!(ours.len(), 2);
    assert!(
        ours.iter()
            .all(|i| i.state == InstanceState::Running && i.pool.as_deref() == Some("default"))
    );
    assert!(ours.iter().all(|i| (i.price - 0.096).abs() < 1e-9));
}

/// The seeded SSM parameters of the fixture's region, from the launcher's manifest endpoint.
async fn seeded_parameters(f: &Ec2Fixture) -> serde_json::Value {
    let endpoint = nodewright_tests::aws::moto().endpoint.clone();
    let region = f.region.clone();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let hostport = endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let mut s = std::net::TcpStream::connect(&hostport).expect("connect");
        write!(
            s,
            "GET /nodewright/manifest?region={region} HTTP/1.0\r\nHost: {hostport}\r\n\r\n"
        )
        .expect("write");
        let mut body = String::new();
        s.read_to_string(&mut body).expect("read");
        let json = body
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&json).expect("manifest json");
        v["parameters"].clone()
    })
    .await
    .expect("manifest")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_terms_by_any_value_and_by_id() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let za = f.zones[0].clone();
    // `*` matches any value of the key; the zone's biggest subnet wins.
    let any = SubnetSelectorTermSpec {
        tags: [(f.member_key(), "*".to_owned())].into(),
        ..Default::default()
    };
    let by_id = SecurityGroupSelectorTermSpec {
        id: Some(f.security_group.clone()),
        ..Default::default()
    };
    let class = EC2NodeClassSpec {
        subnet_selector_terms: vec![any],
        security_group_selector_terms: vec![by_id],
        tags: BTreeMap::new(),
        ..f.node_class_spec()
    };
    let cloud = Ec2Cloud::with_prices(
        &f.config,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        seeded(&f.zones),
    )
    .expect("adapter");
    let req = request("sel", vec![offering("m5.large", &za, "on-demand", 0.096)]);
    cloud.launch(&req).await.expect("launch");
    assert_eq!(
        f.instances_of_claim(&req.claim_id).await[0].subnet_id(),
        f.best_subnet.get(&za).map(String::as_str)
    );

    // An id term selects exactly that subnet, even the smaller one.
    let class = EC2NodeClassSpec {
        subnet_selector_terms: vec![SubnetSelectorTermSpec {
            id: Some(f.small_subnet.clone()),
            ..Default::default()
        }],
        ..f.node_class_spec()
    };
    let cloud = Ec2Cloud::with_prices(
        &f.config,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        seeded(&f.zones),
    )
    .expect("adapter");
    let req = request(
        "sel",
        vec![
            offering("m5.large", &za, "on-demand", 0.096),
            offering("m5.large", &f.zones[1], "on-demand", 0.096),
        ],
    );
    let launched = cloud.launch(&req).await.expect("launch");
    assert_eq!(
        launched.instance.zone, za,
        "only the first zone has a selected subnet"
    );
    assert_eq!(
        f.instances_of_claim(&req.claim_id).await[0].subnet_id(),
        Some(f.small_subnet.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_when_any_option_is_spot_and_mixed_architectures_get_a_template_each() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let cloud = cloud(&f).await;
    let z = &f.zones[0];
    let req = request(
        "spot",
        vec![
            offering("m6g.large", z, "spot", 0.077 * 0.35),
            offering("m5.large", z, "spot", 0.096 * 0.35),
            offering("m5.large", z, "on-demand", 0.096),
        ],
    );
    let launched = cloud.launch(&req).await.expect("launch");
    assert_eq!(launched.instance.capacity_type, "spot");
    assert_eq!(
        launched.instance.instance_type, "m6g.large",
        "cheapest first"
    );
    let found = f.instances_of_claim(&req.claim_id).await;
    assert_eq!(
        found[0].instance_lifecycle().map(|l| l.as_str()),
        Some("spot")
    );
    assert_eq!(found[0].image_id().map(str::to_owned), {
        let m = seeded_parameters(&f).await;
        m["/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/recommended/image_id"].as_str().map(str::to_owned)
    });
    assert_eq!(
        f.launch_templates().await.len(),
        2,
        "arm64 and amd64 need different AMIs"
    );
    let fleets = f
        .ec2()
        .describe_fleets()
        .send()
        .await
        .expect("DescribeFleets");
    let fleet = fleets
        .fleets()
        .iter()
        .find(|fl| {
            fl.tags()
                .iter()
                .any(|t| t.value() == Some(req.claim_id.as_str()))
        })
        .expect("fleet");
    assert_eq!(
        fleet
            .target_capacity_specification()
            .and_then(|t| t.default_target_capacity_type())
            .map(|t| t.as_str()),
        Some("spot")
    );
    let overrides: usize = fleet
        .launch_template_configs()
        .iter()
        .map(|c| c.overrides().len())
        .sum();
    assert_eq!(
        overrides, 2,
        "on-demand options are not sent with a spot fleet"
    );

    // A spot option that cannot be bought does not force spot: on-demand it is.
    let req = request(
        "spot",
        vec![
            offering("m5.large", "us-east-1z", "spot", 0.03),
            offering("m5.large", z, "on-demand", 0.096),
        ],
    );
    let launched = cloud.launch(&req).await.expect("launch");
    assert_eq!(launched.instance.capacity_type, "on-demand");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn al2_and_bottlerocket_user_data() {
    let f = Ec2Fixture::new("us-east-1", "1.31").await;
    for (family, needle) in [
        ("AL2", "/etc/eks/bootstrap.sh"),
        ("Bottlerocket", "[settings.kubernetes]"),
    ] {
        let alias = format!("{}@latest", family.to_lowercase());
        let class = EC2NodeClassSpec {
            ami_selector_terms: vec![ami_alias(&alias)],
            ..f.node_class_spec()
        };
        let settings =
            Ec2CloudSettings::new(&f.cluster).with_node_class(node_class(family, &class));
        let cloud = Ec2Cloud::with_prices(&f.config, settings, seeded(&f.zones)).expect("adapter");
        let mut req = request(
            &family.to_lowercase(),
            vec![offering("m5.large", &f.zones[0], "on-demand", 0.096)],
        );
        req.node_class = Some(family.into());
        let launched = cloud.launch(&req).await.expect("launch");
        let found = f.instances_of_claim(&req.claim_id).await;
        assert_eq!(found[0].instance_id(), Some(launched.instance.id.as_str()));
        let attr = f
            .ec2()
            .describe_instance_attribute()
            .instance_id(&launched.instance.id)
            .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
            .send()
            .await
            .expect("user data attribute");
        let text = attr
            .user_data()
            .and_then(|u| u.value())
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
            .and_then(|b| String::from_utf8(b).ok());
        if let Some(text) = text {
            assert!(text.contains(needle), "{family}: {text}");
        }
        // Whatever moto copies to the instance, the template must carry it.
        let templates = f.launch_templates().await;
        let mut found_needle = false;
        for t in &templates {
            let v = f
                .ec2()
                .describe_launch_template_versions()
                .launch_template_name(t.launch_template_name().unwrap_or_default())
                .versions("$Latest")
                .send()
                .await
                .expect("versions");
            for ver in v.launch_template_versions() {
                let ud = ver
                    .launch_template_data()
                    .and_then(|d| d.user_data())
                    .unwrap_or_default();
                let ud = base64::engine::general_purpose::STANDARD
                    .decode(ud)
                    .unwrap_or_default();
                found_needle |= String::from_utf8_lossy(&ud).contains(needle);
            }
        }
        assert!(found_needle, "{family}: no template with {needle}");
    }
}

/// Every launch field of a v1.15 EC2NodeClass reaches the launch template
/// as Karpenter's AWS provider writes it (pkg/providers/launchtemplate
/// types.go `CreateLaunchTemplateInputBuilder.Build`): block devices,
/// metadata options, detailed monitoring, the network interfaces (prefixes,
/// public address, connection tracking, the security groups on them), the
/// placement group; and the kubelet block reaches the AL2023 NodeConfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_nodeclass_launch_field_reaches_the_launch_template() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let mut spec = serde_json::to_value(f.node_class_spec()).expect("spec");
    let extra = serde_json::json!({
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "rootVolume": true,
             "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "iops": 4000,
                     "throughput": 250, "encrypted": true, "deleteOnTermination": false}},
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Ti", "volumeType": "st1"}}
        ],
        "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                            "httpPutResponseHopLimit": 2, "httpTokens": "optional"},
        "detailedMonitoring": true,
        "associatePublicIPAddress": false,
        "ipPrefixCount": 2,
        "connectionTracking": {"tcpEstablishedTimeout": 3600},
        "networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}],
        "placementGroupSelector": {"name": "training"},
        "kubelet": {"maxPods": 58, "imageGCHighThresholdPercent": 85,
                    "serializeImagePulls": false, "containerLogMaxSize": "50Mi"},
        "instanceStorePolicy": "RAID0"
    });
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    let spec: EC2NodeClassSpec = serde_json::from_value(spec).expect("class");
    let settings = Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("tuned", &spec));
    let cloud = Ec2Cloud::with_prices(&f.config, settings, seeded(&f.zones)).expect("adapter");
    let mut req = request(
        "tuned",
        vec![offering("m5.large", &f.zones[0], "on-demand", 0.096)],
    );
    req.node_class = Some("tuned".into());
    req.kubelet.max_pods = Some(58);
    // A claim that allows only dedicated hardware (`plan::tenancy`).
    req.labels.insert(
        "karpenter.k8s.aws/instance-tenancy".into(),
        "dedicated".into(),
    );
    cloud.launch(&req).await.expect("launch");

    let templates = f.launch_templates().await;
    assert_eq!(templates.len(), 1);
    let version = f
        .ec2()
        .describe_launch_template_versions()
        .launch_template_name(templates[0].launch_template_name().expect("name"))
        .versions("$Latest")
        .send()
        .await
        .expect("DescribeLaunchTemplateVersions");
    let data = version.launch_template_versions()[0]
        .launch_template_data()
        .expect("data");

    let volumes: Vec<_> = data
        .block_device_mappings()
        .iter()
        .map(|b| {
            let ebs = b.ebs().expect("ebs");
            (
                b.device_name(),
                ebs.volume_size(),
                ebs.volume_type().map(|t| t.as_str()),
                ebs.iops(),
                ebs.throughput(),
                ebs.encrypted(),
                ebs.delete_on_termination(),
            )
        })
        .collect();
    assert_eq!(
        volumes,
        [
            (
                Some("/dev/xvda"),
                Some(100),
                Some("gp3"),
                Some(4000),
                Some(250),
                Some(true),
                Some(false)
            ),
            (
                Some("/dev/xvdb"),
                Some(1024),
                Some("st1"),
                None,
                None,
                None,
                None
            ),
        ]
    );
    let md = data.metadata_options().expect("metadata options");
    assert_eq!(md.http_tokens().map(|t| t.as_str()), Some("optional"));
    assert_eq!(md.http_put_response_hop_limit(), Some(2));
    assert_eq!(md.http_endpoint().map(|t| t.as_str()), Some("enabled"));
    assert_eq!(
        data.monitoring().and_then(|m| m.enabled()),
        Some(true),
        "detailedMonitoring"
    );

    // The groups move onto the interface: EC2 takes them in one place only.
    assert!(data.security_group_ids().is_empty(), "{data:?}");
    let nis = data.network_interfaces();
    assert_eq!(nis.len(), 1, "{data:?}");
    let ni = &nis[0];
    assert_eq!(
        (ni.network_card_index(), ni.device_index()),
        (Some(0), Some(0))
    );
    assert_eq!(ni.interface_type(), Some("interface"));
    assert_eq!(ni.ipv4_prefix_count(), Some(2));
    assert_eq!(ni.associate_public_ip_address(), Some(false));
    assert_eq!(ni.groups(), std::slice::from_ref(&f.security_group));
    assert_eq!(
        ni.connection_tracking_specification()
            .and_then(|c| c.tcp_established_timeout()),
        Some(3600)
    );
    assert_eq!(
        data.placement().and_then(|p| p.group_name()),
        Some("training")
    );
    assert_eq!(
        data.placement()
            .and_then(|p| p.tenancy())
            .map(|t| t.as_str()),
        Some("dedicated")
    );

    let user_data = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().expect("user data"))
        .expect("base64");
    let user_data = String::from_utf8(user_data).expect("utf8");
    for needle in [
        "maxPods: 58",
        "imageGCHighThresholdPercent: 85",
        "serializeImagePulls: false",
        "containerLogMaxSize: 50Mi",
        "strategy: RAID0",
    ] {
        assert!(user_data.contains(needle), "{needle} in {user_data}");
    }
}

/// Kubelet expressions (the settings' `featureGates.nodeClassCEL`,
/// Karpenter's NodeClassCEL) reach each type's user data resolved, as
/// Karpenter passes computed values as static ones: m5.large (2 vCPUs) and
/// m5.xlarge (4) differ, so each has its own launch template with its own
/// maxPods and kubeReserved — the values the plan reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_expressions_reach_each_types_user_data_resolved() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let mut spec = serde_json::to_value(f.node_class_spec()).expect("spec");
    spec["kubelet"] = serde_json::json!({
        "maxPods": "min(110, vcpus * 8)",
        "kubeReserved": {"cpu": "vcpus * 30", "memory": "max_pods * 11", "ephemeral-storage": "2Gi"}
    });
    let spec: EC2NodeClassSpec = serde_json::from_value(spec).expect("class");
    let class = node_class("expr", &spec);
    let kubelet = class.kubelet.to_kubelet_config();
    assert!(!kubelet.expressions.is_empty());
    let settings = Ec2CloudSettings::new(&f.cluster).with_node_class(class);
    let cloud = Ec2Cloud::with_prices(&f.config, settings, seeded(&f.zones)).expect("adapter");
    let mut req = request(
        "expr",
        vec![
            offering("m5.large", &f.zones[0], "on-demand", 0.096),
            offering("m5.xlarge", &f.zones[0], "on-demand", 0.192),
        ],
    );
    req.node_class = Some("expr".into());
    req.kubelet = kubelet;
    cloud.launch(&req).await.expect("launch");

    let mut user_data = Vec::new();
    for t in f.launch_templates().await {
        let version = f
            .ec2()
            .describe_launch_template_versions()
            .launch_template_name(t.launch_template_name().expect("name"))
            .versions("$Latest")
            .send()
            .await
            .expect("DescribeLaunchTemplateVersions");
        let data = version.launch_template_versions()[0]
            .launch_template_data()
            .expect("data");
        let text = base64::engine::general_purpose::STANDARD
            .decode(data.user_data().expect("user data"))
            .expect("base64");
        user_data.push(String::from_utf8(text).expect("utf8"));
    }
    assert_eq!(user_data.len(), 2, "one template per resolved kubelet");
    user_data.sort_by_key(|u| u.contains("maxPods: 32"));
    // m5.large: 16 pods, 60m, 16 × 11 = 176Mi; m5.xlarge: 32, 120m, 352Mi.
    for (u, needles) in user_data.iter().zip([
        ["maxPods: 16", "cpu: 60m", "memory: 176Mi"],
        ["maxPods: 32", "cpu: 120m", "memory: 352Mi"],
    ]) {
        for needle in needles {
            assert!(u.contains(needle), "{needle} in {u}");
        }
        assert!(u.contains("ephemeral-storage: 2Gi"), "{u}");
        assert!(!u.contains("vcpus"), "no expression reaches the node: {u}");
    }
}

/// The Custom AMI family (Karpenter's `amiFamily: Custom`): the AMI the
/// terms select and the NodeClass's user data verbatim — nothing rendered
/// around it — and no default volumes (EC2 uses the AMI's own), as
/// Karpenter's Custom family launches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_custom_family_launches_its_ami_with_its_user_data_verbatim() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let manifest = seeded_parameters(&f).await;
    let image = manifest
        ["/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id"]
        .as_str()
        .expect("an image")
        .to_owned();
    let user_data = "#!/bin/bash\n/etc/eks/custom-join.sh --cluster demo\n";
    let mut spec = serde_json::to_value(f.node_class_spec()).expect("spec");
    spec["amiFamily"] = serde_json::json!("Custom");
    spec["amiSelectorTerms"] = serde_json::json!([{"id": image}]);
    spec["userData"] = serde_json::json!(user_data);
    spec["kubelet"] = serde_json::json!({"maxPods": 10});
    let spec: EC2NodeClassSpec = serde_json::from_value(spec).expect("class");
    let class = node_class("custom", &spec);
    let settings = Ec2CloudSettings::new(&f.cluster).with_node_class(class);
    let cloud = Ec2Cloud::with_prices(&f.config, settings, seeded(&f.zones)).expect("adapter");
    let mut req = request(
        "custom",
        vec![offering("m5.large", &f.zones[0], "on-demand", 0.096)],
    );
    req.node_class = Some("custom".into());
    cloud.launch(&req).await.expect("a Custom class launches");

    let templates = f.launch_templates().await;
    assert_eq!(templates.len(), 1);
    let version = f
        .ec2()
        .describe_launch_template_versions()
        .launch_template_name(templates[0].launch_template_name().expect("name"))
        .versions("$Latest")
        .send()
        .await
        .expect("DescribeLaunchTemplateVersions");
    let data = version.launch_template_versions()[0]
        .launch_template_data()
        .expect("data");
    assert_eq!(data.image_id(), Some(image.as_str()));
    assert!(data.block_device_mappings().is_empty(), "{data:?}");
    let rendered = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().expect("user data"))
        .expect("base64");
    assert_eq!(String::from_utf8(rendered).expect("utf8"), user_data);
    assert_eq!(f.instances_of_claim(&req.claim_id).await.len(), 1);
}

async fn assert_invalid_and_nothing_launched(
    f: &Ec2Fixture,
    settings: Ec2CloudSettings,
    req: LaunchRequest,
    expect: &[&str],
) {
    let cloud = Ec2Cloud::with_prices(&f.config, settings, seeded(&f.zones)).expect("adapter");
    match cloud.launch(&req).await {
        Err(e @ CloudError::Invalid { .. }) => {
            let msg = e.to_string();
            for e in expect {
                assert!(msg.contains(e), "{msg:?} should mention {e:?}");
            }
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
    assert!(
        f.instances_of_claim(&req.claim_id).await.is_empty(),
        "no instance launched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_error_and_launches_nothing() {
    let f = Ec2Fixture::new("us-east-1", "1.33").await;
    let z = f.zones[0].clone();
    let ok = || request("bad", vec![offering("m5.large", &z, "on-demand", 0.096)]);

    // Subnet selector matching nothing.
    let class = EC2NodeClassSpec {
        subnet_selector_terms: vec![SubnetSelectorTermSpec {
            tags: [("karpenter.sh/discovery".to_owned(), "nobody".to_owned())].into(),
            ..Default::default()
        }],
        ..f.node_class_spec()
    };
    assert_invalid_and_nothing_launched(
        &f,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        ok(),
        &[
            "subnetSelectorTerms",
            "karpenter.sh/discovery",
            "nobody",
            "match no subnet",
        ],
    )
    .await;

    // Security group id that does not exist.
    let class = EC2NodeClassSpec {
        security_group_selector_terms: vec![SecurityGroupSelectorTermSpec {
            id: Some("sg-00000000000000000".into()),
            ..Default::default()
        }],
        ..f.node_class_spec()
    };
    assert_invalid_and_nothing_launched(
        &f,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        ok(),
        &["securityGroupSelectorTerms", "sg-00000000000000000"],
    )
    .await;

    // AL2 has no AMI for Kubernetes 1.33 (as on AWS): the parameter does not exist.
    let class = EC2NodeClassSpec {
        ami_selector_terms: vec![ami_alias("al2@latest")],
        ..f.node_class_spec()
    };
    assert_invalid_and_nothing_launched(
        &f,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        ok(),
        &[
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id",
            "does not exist",
        ],
    )
    .await;

    // A custom SSM parameter that does not exist.
    let class = EC2NodeClassSpec {
        ami_family: Some("AL2023".into()),
        ami_selector_terms: vec![AmiSelectorTermSpec {
            ssm_parameter: Some("/nodewright/test/missing".into()),
            ..Default::default()
        }],
        ..f.node_class_spec()
    };
    assert_invalid_and_nothing_launched(
        &f,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        ok(),
        &["/nodewright/test/missing"],
    )
    .await;

    // Types the region does not offer (unknown, and a real type in a zone that does not exist).
    assert_invalid_and_nothing_launched(
        &f,
        f.settings(),
        request(
            "bad",
            vec![
                offering("x9.huge", &z, "on-demand", 0.1),
                offering("m5.large", "us-east-1z", "on-demand", 0.096),
            ],
        ),
        &[
            "x9.huge is not an instance type offered in us-east-1",
            "m5.large is not offered as on-demand in zone us-east-1z",
        ],
    )
    .await;

    // An undefined NodeClass; a family with no AMI for the cluster's
    // Kubernetes (Windows Server 2025 starts at 1.35).
    let mut req = ok();
    req.node_class = Some("missing".into());
    assert_invalid_and_nothing_launched(
        &f,
        f.settings(),
        req,
        &["nodeclass \"missing\": not defined"],
    )
    .await;
    let class = EC2NodeClassSpec {
        ami_selector_terms: vec![ami_alias("windows2025@latest")],
        ..f.node_class_spec()
    };
    assert_invalid_and_nothing_launched(
        &f,
        Ec2CloudSettings::new(&f.cluster).with_node_class(node_class("default", &class)),
        ok(),
        &["Windows2025 needs Kubernetes 1.35", "1.33"],
    )
    .await;

    // A cluster that does not exist.
    assert_invalid_and_nothing_launched(
        &f,
        Ec2CloudSettings::new("no-such-cluster").with_node_class(f.node_class()),
        ok(),
        &["no-such-cluster", "does not exist"],
    )
    .await;
}

/// EC2 instance status checks on the emulator: DescribeInstanceStatus is
/// asked as Karpenter asks it (three filtered listings: instance checks
/// impaired, system checks impaired, a scheduled event), each answer read;
/// a running instance whose checks pass is not reported. The emulator
/// ignores the filters and reports every running instance with passing
/// checks, so this proves the calls and the reading; what a failed check
/// or an event leads to is held on the simulated EC2
/// (`handlers::disruption::tests::instance_health`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_status_checks_that_pass_report_no_instance() {
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let ours = cloud(&f).await;
    let launched = ours
        .launch(&request(
            "health",
            vec![offering("m5.large", &f.zones[0], "on-demand", 0.096)],
        ))
        .await
        .expect("launch");
    let calls = ours.api_calls();
    let unhealthy = ours
        .instance_health()
        .await
        .expect("DescribeInstanceStatus");
    assert!(
        unhealthy
            .iter()
            .all(|h| h.instance_id != launched.instance.id),
        "a running instance whose checks pass is healthy: {unhealthy:?}"
    );
    assert_eq!(ours.api_calls() - calls, 3, "one call per listing");
}

/// A capacity reservation id (`cr-` and 17 hex digits) no other test uses.
fn reservation_id() -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    unique("cr").hash(&mut h);
    format!("cr-{:017x}", h.finish())
}

/// Capacity reservations on EC2: DescribeCapacityReservations read into
/// ours (moto has none: the harness answers the call from what the test
/// puts), a `reserved` option launched on a template that targets its
/// reservation with the reservation's labels in the user data, and a
/// reservation without room falling back to the claim's on-demand option in
/// the same launch, reported unavailable (Karpenter: "should return an ICE
/// error when all attempted instance types return a ReservedCapacityReservation
/// error", aws/karpenter-provider-aws pkg/providers/instance/suite_test.go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_option_launches_into_its_reservation_and_a_full_one_falls_back() {
    use nodewright::cloud::ReservationType;
    let f = Ec2Fixture::new("us-east-1", "1.32").await;
    let cloud = cloud(&f).await;
    let za = f.zones[0].clone();
    let team = unique("ml");
    let (open, full, block) = (reservation_id(), reservation_id(), reservation_id());
    nodewright_tests::aws::put_capacity_reservations(&serde_json::json!([
        {"CapacityReservationId": open, "InstanceType": "m5.large", "AvailabilityZone": za,
         "OwnerId": "012345678901", "TotalInstanceCount": 2, "AvailableInstanceCount": 1,
         "InstanceMatchCriteria": "targeted", "Tags": {"team": team}},
        {"CapacityReservationId": full, "InstanceType": "m5.large", "AvailabilityZone": za,
         "TotalInstanceCount": 1, "AvailableInstanceCount": 0, "InstanceMatchCriteria": "targeted"},
        {"CapacityReservationId": block, "InstanceType": "m5.xlarge", "AvailabilityZone": za,
         "TotalInstanceCount": 4, "AvailableInstanceCount": 4, "InstanceMatchCriteria": "targeted",
         "ReservationType": "capacity-block", "EndDate": "2030-01-01T00:00:00Z"},
    ]));

    let all = cloud.capacity_reservations().await.expect("listing");
    let find = |id: &str| all.iter().find(|r| r.id == id).cloned().expect(id);
    let (o, x, b) = (find(&open), find(&full), find(&block));
    assert_eq!(
        (o.total, o.available, o.owner_id.as_str()),
        (2, 1, "012345678901")
    );
    assert_eq!(o.tags.get("team"), Some(&team));
    assert_eq!(x.available, 0);
    assert_eq!(b.reservation_type, ReservationType::CapacityBlock);
    assert_eq!(
        b.end_time.map(|t| t.to_string()),
        Some("2030-01-01T00:00:00Z".to_owned())
    );
    let term: nodewright::config::nodeclass::CapacityReservationSelectorTermSpec =
        serde_json::from_value(serde_json::json!({"tags": {"team": team}})).expect("term");
    let selected = nodewright::provisioning::reservations::select(&[term], &all);
    assert_eq!(
        selected.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [open.as_str()],
        "the term selects by tag"
    );

    // Into the reservation.
    let mut req = request(
        "reserved",
        vec![
            offering("m5.large", &za, "reserved", 0.096 / 10_000_000.0),
            offering("m5.large", &za, "on-demand", 0.096),
        ],
    );
    req.reservations = vec![o.clone()];
    let launched = cloud.launch(&req).await.expect("launch");
    let i = &launched.instance;
    assert_eq!(
        (
            i.capacity_type.as_str(),
            i.capacity_reservation_id.as_deref(),
            i.capacity_reservation_type
        ),
        (
            "reserved",
            Some(open.as_str()),
            Some(ReservationType::Default)
        )
    );
    assert!(i.price < 0.0001, "{}", i.price);
    assert!(launched.unavailable.is_empty());
    let templates = f.launch_templates().await;
    let mut targeted = Vec::new();
    for t in &templates {
        let version = f
            .ec2()
            .describe_launch_template_versions()
            .launch_template_name(t.launch_template_name().expect("name"))
            .versions("$Latest")
            .send()
            .await
            .expect("DescribeLaunchTemplateVersions");
        let data = version.launch_template_versions()[0]
            .launch_template_data()
            .cloned()
            .expect("data");
        if let Some(target) = data
            .capacity_reservation_specification()
            .and_then(|c| c.capacity_reservation_target())
        {
            targeted.push(target.capacity_reservation_id().map(str::to_owned));
            let user_data = base64::engine::general_purpose::STANDARD
                .decode(data.user_data().expect("user data"))
                .expect("base64");
            let user_data = String::from_utf8_lossy(&user_data);
            assert!(
                user_data.contains(&format!("karpenter.k8s.aws/capacity-reservation-id={open}"))
                    && user_data.contains("karpenter.sh/capacity-type=reserved"),
                "{user_data}"
            );
        }
    }
    assert_eq!(
        targeted,
        [Some(open.clone())],
        "one template targets the reservation"
    );

    // A full reservation: the on-demand option, in the same launch.
    let reserved_key = OfferingKey {
        capacity_type: "reserved".into(),
        instance_type: "m5.large".into(),
        zone: za.clone(),
    };
    let mut req = request(
        "reserved",
        vec![
            offering("m5.large", &za, "reserved", 0.096 / 10_000_000.0),
            offering("m5.large", &za, "on-demand", 0.096),
        ],
    );
    req.reservations = vec![x.clone()];
    let launched = cloud.launch(&req).await.expect("falls back");
    assert_eq!(launched.instance.capacity_type, "on-demand");
    assert_eq!(launched.instance.capacity_reservation_id, None);
    assert_eq!(launched.unavailable, vec![reserved_key.clone()]);

    // Only reserved options, all full: no capacity, nothing launched.
    let mut req = request(
        "reserved",
        vec![offering("m5.large", &za, "reserved", 0.096 / 10_000_000.0)],
    );
    req.reservations = vec![x];
    match cloud.launch(&req).await {
        Err(CloudError::InsufficientCapacity { offerings, message }) => {
            assert_eq!(offerings, vec![reserved_key]);
            assert!(message.contains("ReservationCapacityExceeded"), "{message}");
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    assert!(f.instances_of_claim(&req.claim_id).await.is_empty());
}
