//! The AWS emulator for the adapter tests: finds the moto server the test
//! runner started, or starts one, and builds per-test fixtures (a VPC with
//! tagged subnets and a security group, an EKS cluster, DynamoDB tables)
//! with unique names, so tests run in parallel against one server without
//! resetting it.
//!
//! Where the server comes from, in order:
//! 1. `AWS_ENDPOINT_URL` in the environment (`tests/run` exports the
//!    `env` file `tests/harness/aws/moto.sh start DIR` writes);
//! 2. `NODEWRIGHT_MOTO_DIR`: the `DIR` of a running `moto.sh start DIR`;
//! 3. otherwise `moto.sh start` into a temporary directory, once per test
//!    process, with a watchdog shell that stops it when the process exits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::Credentials;
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use nodewright::aws::{ClientOptions, DynamoStore, DynamoTables, Ec2CloudSettings};
use nodewright::config::NodeClass;
use nodewright::config::nodeclass::{
    AmiSelectorTermSpec, EC2NodeClassSpec, SecurityGroupSelectorTermSpec, SubnetSelectorTermSpec,
};

/// A spec validated as NodeClass `name`, as the runtime validates stored
/// items; panics with the field and reason.
pub fn node_class(name: &str, spec: &EC2NodeClassSpec) -> NodeClass {
    NodeClass::from_spec(name, spec).unwrap_or_else(|e| panic!("invalid test NodeClass: {e}"))
}

/// An `amiSelectorTerms` entry `alias: <alias>`.
pub fn ami_alias(alias: &str) -> AmiSelectorTermSpec {
    AmiSelectorTermSpec {
        alias: Some(alias.to_owned()),
        ..Default::default()
    }
}

/// A running emulator.
#[derive(Debug, Clone)]
pub struct Moto {
    pub endpoint: String,
    /// Set when this process started the server.
    pub dir: Option<PathBuf>,
}

static MOTO: OnceLock<Result<Moto, String>> = OnceLock::new();

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect())
}

fn reachable(endpoint: &str) -> bool {
    let hostport = endpoint
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/');
    use std::net::ToSocketAddrs;
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
        })
}

fn start() -> Result<Moto, String> {
    if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
        if !reachable(&endpoint) {
            return Err(format!(
                "AWS_ENDPOINT_URL={endpoint} is set but nothing answers there"
            ));
        }
        return Ok(Moto {
            endpoint,
            dir: None,
        });
    }
    if let Ok(dir) = std::env::var("NODEWRIGHT_MOTO_DIR") {
        let env = read_env_file(&Path::new(&dir).join("env"))?;
        let endpoint = env
            .get("AWS_ENDPOINT_URL")
            .cloned()
            .ok_or("no AWS_ENDPOINT_URL in the env file")?;
        return Ok(Moto {
            endpoint,
            dir: None,
        });
    }
    let script = repo_root().join("tests/harness/aws/moto.sh");
    let dir = std::env::temp_dir().join(format!("nodewright-moto-{}", std::process::id()));
    let status = std::process::Command::new(&script)
        .arg("start")
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!(
            "{} start {} failed ({status})",
            script.display(),
            dir.display()
        ));
    }
    // Stop the server when this test process is gone.
    let watchdog = "while kill -0 \"$0\" 2>/dev/null; do sleep 1; done; exec \"$1\" stop \"$2\" >/dev/null 2>&1";
    let _ = std::process::Command::new("bash")
        .arg("-c")
        .arg(watchdog)
        .arg(std::process::id().to_string())
        .arg(&script)
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let env = read_env_file(&dir.join("env"))?;
    let endpoint = env
        .get("AWS_ENDPOINT_URL")
        .cloned()
        .ok_or("no AWS_ENDPOINT_URL in the env file")?;
    Ok(Moto {
        endpoint,
        dir: Some(dir),
    })
}

/// The emulator, found or started once per test process. Panics with the
/// reason when there is none (the AWS tests cannot run without it).
pub fn moto() -> &'static Moto {
    match MOTO.get_or_init(start) {
        Ok(m) => m,
        Err(e) => panic!(
            "the AWS emulator is not available: {e} (run ./tests/run, or tests/harness/aws/moto.sh start DIR and export DIR/env)"
        ),
    }
}

/// Puts capacity reservations into the emulator (moto has none; the
/// harness answers DescribeCapacityReservations from these): a JSON list in
/// EC2's field names, see `tests/harness/aws/moto_launcher.py`.
pub fn put_capacity_reservations(reservations: &serde_json::Value) {
    use std::io::{Read, Write};
    let hostport = moto()
        .endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let body = reservations.to_string();
    let mut stream = std::net::TcpStream::connect(&hostport).expect("connect to the emulator");
    write!(
        stream,
        "POST /nodewright/capacity-reservations HTTP/1.0\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
}

/// A name no other test (or earlier run against the same server) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 0x10000
    )
}

/// SDK configuration pointing at the emulator, with the adapter's retry
/// and timeout settings and fake credentials.
pub async fn sdk_config(region: &str) -> SdkConfig {
    sdk_config_at(&moto().endpoint, region, &ClientOptions::default()).await
}

/// SDK configuration for any endpoint, with the given retry and timeout settings.
pub async fn sdk_config_at(endpoint: &str, region: &str, options: &ClientOptions) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(nodewright::aws::https_client())
        .endpoint_url(endpoint)
        .region(Region::new(region.to_owned()))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .retry_config(options.retry_config())
        .timeout_config(options.timeout_config())
        .load()
        .await
}

/// A VPC with subnets in three zones (two in the first, the bigger one
/// must win), a security group, all tagged `karpenter.sh/discovery=<tag>`,
/// and an EKS cluster.
#[derive(Debug, Clone)]
pub struct Ec2Fixture {
    pub region: String,
    pub config: SdkConfig,
    pub cluster: String,
    pub discovery: String,
    pub zones: Vec<String>,
    /// Zone → the subnet that should be chosen there.
    pub best_subnet: BTreeMap<String, String>,
    /// The smaller subnet of the first zone (must not be chosen).
    pub small_subnet: String,
    pub security_group: String,
}

/// A tag specification of `pairs` for one resource type (what a test
/// creates in the emulated account carries the tags it is given).
pub fn tags(resource: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

static NEXT_CIDR: AtomicU64 = AtomicU64::new(0);

impl Ec2Fixture {
    /// Builds the fixture; `k8s` is the cluster's Kubernetes version.
    pub async fn new(region: &str, k8s: &str) -> Ec2Fixture {
        let config = sdk_config(region).await;
        let ec2 = aws_sdk_ec2::Client::new(&config);
        let discovery = unique("disc");
        let cluster = unique("cluster");
        let member_key = format!("nodewright.test/{discovery}");
        let disc = [
            ("karpenter.sh/discovery", discovery.as_str()),
            (member_key.as_str(), "member"),
        ];
        let octet = 16 + NEXT_CIDR.fetch_add(1, Ordering::Relaxed) % 200;
        let vpc = ec2
            .create_vpc()
            .cidr_block(format!("10.{octet}.0.0/16"))
            .send()
            .await
            .expect("CreateVpc")
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("vpc id")
            .to_owned();
        let zones: Vec<String> = ec2
            .describe_availability_zones()
            .send()
            .await
            .expect("DescribeAvailabilityZones")
            .availability_zones()
            .iter()
            .filter_map(|z| z.zone_name().map(str::to_owned))
            .take(3)
            .collect();
        assert_eq!(zones.len(), 3, "the region has three zones");
        let mut best_subnet = BTreeMap::new();
        let mut small_subnet = String::new();
        for (i, (zone, cidr)) in [
            (&zones[0], format!("10.{octet}.0.0/24")),
            (&zones[0], format!("10.{octet}.16.0/20")),
            (&zones[1], format!("10.{octet}.1.0/24")),
            (&zones[2], format!("10.{octet}.2.0/24")),
        ]
        .into_iter()
        .enumerate()
        {
            let id = ec2
                .create_subnet()
                .vpc_id(&vpc)
                .availability_zone(zone)
                .cidr_block(cidr)
                .tag_specifications(tags(ResourceType::Subnet, &disc))
                .send()
                .await
                .expect("CreateSubnet")
                .subnet()
                .and_then(|s| s.subnet_id())
                .expect("subnet id")
                .to_owned();
            if i == 0 {
                small_subnet = id;
            } else {
                best_subnet.insert(zone.clone(), id);
            }
        }
        let security_group = ec2
            .create_security_group()
            .group_name(unique("nodes"))
            .description("nodewright test nodes")
            .vpc_id(&vpc)
            .tag_specifications(tags(ResourceType::SecurityGroup, &disc))
            .send()
            .await
            .expect("CreateSecurityGroup")
            .group_id()
            .expect("group id")
            .to_owned();
        let eks = aws_sdk_eks::Client::new(&config);
        eks.create_cluster()
            .name(&cluster)
            .version(k8s)
            .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
            .resources_vpc_config(
                aws_sdk_eks::types::VpcConfigRequest::builder()
                    .set_subnet_ids(Some(best_subnet.values().cloned().collect()))
                    .build(),
            )
            .send()
            .await
            .expect("CreateCluster");
        Ec2Fixture {
            region: region.to_owned(),
            config,
            cluster,
            discovery,
            zones,
            best_subnet,
            small_subnet,
            security_group,
        }
    }

    /// A tag key only this fixture's subnets and security group carry (value `member`).
    pub fn member_key(&self) -> String {
        format!("nodewright.test/{}", self.discovery)
    }

    /// The spec of a NodeClass selecting this fixture's subnets and security
    /// group: AL2023 (latest), no instance profile (`defaultInstanceProfile`
    /// with none in the adapter's settings), tag `team=adapters`.
    pub fn node_class_spec(&self) -> EC2NodeClassSpec {
        let tags: BTreeMap<String, String> =
            [("karpenter.sh/discovery".to_owned(), self.discovery.clone())].into();
        EC2NodeClassSpec {
            ami_selector_terms: vec![ami_alias("al2023@latest")],
            subnet_selector_terms: vec![SubnetSelectorTermSpec {
                tags: tags.clone(),
                ..Default::default()
            }],
            security_group_selector_terms: vec![SecurityGroupSelectorTermSpec {
                tags,
                ..Default::default()
            }],
            default_instance_profile: true,
            tags: [("team".to_owned(), "adapters".to_owned())].into(),
            ..Default::default()
        }
    }

    /// Makes the stored NodeClass `default` (a scenario's, whose selectors
    /// name a cluster the emulator does not have) this fixture's; the
    /// launches use the class as stored, as the functions do.
    pub async fn store_node_class<S: nodewright::ports::Store>(&self, store: &S) {
        let mut class = store
            .config_items()
            .await
            .expect("items")
            .into_iter()
            .find(|i| i.kind == nodewright::config::ConfigKind::NodeClass && i.name == "default")
            .expect("the scenario's NodeClass `default`");
        class.spec = serde_json::to_value(self.node_class_spec()).expect("spec");
        class.version += 1;
        store
            .put_config_item(&class)
            .await
            .expect("fixture class stored");
    }

    /// [`Self::node_class_spec`] validated as NodeClass `default`.
    pub fn node_class(&self) -> NodeClass {
        node_class("default", &self.node_class_spec())
    }

    /// Adapter settings: the cluster and a `default` NodeClass.
    pub fn settings(&self) -> Ec2CloudSettings {
        Ec2CloudSettings::new(&self.cluster).with_node_class(self.node_class())
    }

    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.config)
    }

    /// Every instance (any state) tagged with this claim id.
    pub async fn instances_of_claim(&self, claim: &str) -> Vec<aws_sdk_ec2::types::Instance> {
        let out = self
            .ec2()
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:nodewright.io/nodeclaim")
                    .values(claim)
                    .build(),
            )
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect()
    }

    /// The filter on nodewright's ownership tag for this fixture's cluster.
    fn owned(&self) -> Filter {
        Filter::builder()
            .name("tag:nodewright.io/cluster")
            .values(&self.cluster)
            .build()
    }

    /// Every instance (any state) nodewright launched for this fixture's cluster.
    pub async fn instances(&self) -> Vec<aws_sdk_ec2::types::Instance> {
        let out = self
            .ec2()
            .describe_instances()
            .filters(self.owned())
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect()
    }

    /// Launch templates nodewright made for this fixture's cluster.
    pub async fn launch_templates(&self) -> Vec<aws_sdk_ec2::types::LaunchTemplate> {
        let out = self
            .ec2()
            .describe_launch_templates()
            .filters(self.owned())
            .send()
            .await
            .expect("DescribeLaunchTemplates");
        out.launch_templates().to_vec()
    }
}

/// A store over two fresh tables.
pub async fn dynamo_store(region: &str) -> DynamoStore {
    let config = sdk_config(region).await;
    let store = DynamoStore::new(&config, DynamoTables::with_prefix(&unique("nw")));
    store.ensure_tables().await.expect("tables created");
    store
}

/// The table a hand-written item lives in and the marker its writes move:
/// configuration keys (`nodepool#`, `nodeclass#`, `settings#`) in the
/// config table, everything else in the state table.
fn table_of<'a>(store: &'a DynamoStore, key: &str) -> (&'a str, &'static str) {
    let config = ["nodepool#", "nodeclass#", "settings#"]
        .iter()
        .any(|p| key.starts_with(p));
    if config {
        (&store.tables().config, "config#version")
    } else {
        (&store.tables().state, "state#version")
    }
}

/// Moves a table's version marker, so the store's cached view is read again
/// (as a write of an older release that bypassed it would be within the
/// view's maximum age).
async fn bump_marker(client: &aws_sdk_dynamodb::Client, table: &str, marker: &str) {
    use aws_sdk_dynamodb::types::AttributeValue;
    client
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(marker.to_owned()))
        .update_expression("ADD #v :one")
        .expression_attribute_names("#v", "version")
        .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
        .send()
        .await
        .expect("version marker moved");
}

/// Writes an item by hand under its key, `body` as its JSON and `version`
/// as its version attribute, as an operator's edit or an older release
/// might: the DynamoDB side of `MemStore::put_raw`.
pub async fn put_raw_item(store: &DynamoStore, region: &str, key: &str, body: &str, version: u64) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let client = aws_sdk_dynamodb::Client::new(&sdk_config(region).await);
    let (table, marker) = table_of(store, key);
    client
        .put_item()
        .table_name(table)
        .item("pk", AttributeValue::S(key.to_owned()))
        .item("body", AttributeValue::S(body.to_owned()))
        .item("version", AttributeValue::N(version.to_string()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{key} written by hand: {e:?}"));
    bump_marker(&client, table, marker).await;
}

/// Deletes an item by hand under its key: the DynamoDB side of
/// `MemStore::delete_raw`.
pub async fn delete_raw_item(store: &DynamoStore, region: &str, key: &str) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let client = aws_sdk_dynamodb::Client::new(&sdk_config(region).await);
    let (table, marker) = table_of(store, key);
    client
        .delete_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key.to_owned()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{key} deleted by hand: {e:?}"));
    bump_marker(&client, table, marker).await;
}
