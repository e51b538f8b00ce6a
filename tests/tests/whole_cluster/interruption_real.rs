//! The interruption path on the real adapters: EC2 and DynamoDB on the moto
//! emulator, the messages carried by the emulator's SQS, and the real
//! kube-apiserver with the functions acting as the restricted `nodewright`
//! identity (`Ec2Cloud`, `DynamoStore`, `KubeCluster`).
//!
//! One spot walkthrough end to end; one run through every kind of message
//! that must change nothing (unknown, foreign, unsupported, malformed, a
//! rebalance under the default policy) followed by a duplicated warning that
//! must start exactly one removal; and the bodies the in-memory suite runs
//! too (`nodewright_tests::interruption`): the three rebalance policies, a
//! budget that holds until the deadline, a replacement out of capacity.

use aws_sdk_sqs::types::QueueAttributeName;
use nodewright::model::claim::Claim;
use nodewright::model::{SignedDuration, Timestamp};
use nodewright::ports::Store;
use nodewright::sim::ClusterDriver;
use nodewright::sim::scenario;
use nodewright_tests::aws::{Ec2Fixture, dynamo_store, unique};
use nodewright_tests::interruption as cases;
use nodewright_tests::real::{self, RealSim};
use nodewright_tests::sim::scenario_file;

use nodewright_tests::real::REGION;
const PLACEHOLDER: &str = "i-0123456789abcdef0";

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn on_real() -> (RealSim, Ec2Fixture) {
    real::on_real(dynamo_store(REGION).await).await
}

/// The small spot scenario on the real adapters, run until its node is up.
async fn spot_node() -> (RealSim, Ec2Fixture, Claim) {
    let (sim, f) = Box::pin(real::run_scenario(
        dynamo_store(REGION).await,
        &scenario_file("spot-drain.yaml"),
    ))
    .await;
    let claim = sim
        .store
        .claims()
        .await
        .expect("claims")
        .pop()
        .expect("claim");
    (sim, f, claim)
}

/// A queue on the emulator, as Terraform makes it (300 s retention).
async fn queue(f: &Ec2Fixture) -> (aws_sdk_sqs::Client, String) {
    let sqs = aws_sdk_sqs::Client::new(&f.config);
    let url = sqs
        .create_queue()
        .queue_name(unique("nw-interruption"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("url")
        .to_owned();
    (sqs, url)
}

fn spot_warning(instance: &str, at: Timestamp) -> String {
    serde_json::json!({
        "version": "0", "id": unique("evt"), "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": at.to_string(), "region": REGION,
        "resources": [format!("arn:aws:ec2:{REGION}:123456789012:instance/{instance}")],
        "detail": {"instance-id": instance, "instance-action": "terminate"}
    })
    .to_string()
}

/// Receives what is on the queue, hands it to the interruption handler as
/// the event source mapping would, and deletes what did not fail. Returns
/// how many messages went back.
async fn pump(sim: &mut RealSim, sqs: &aws_sdk_sqs::Client, url: &str) -> usize {
    let mut returned = 0;
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .send()
            .await
            .expect("ReceiveMessage");
        let messages = got.messages();
        if messages.is_empty() {
            return returned;
        }
        let batch: Vec<(String, String)> = messages
            .iter()
            .map(|m| {
                (
                    m.message_id().unwrap_or_default().to_owned(),
                    m.body().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let failed = sim.deliver_interruptions(&batch).await;
        returned += failed.len();
        for m in messages {
            if !failed.iter().any(|id| Some(id.as_str()) == m.message_id()) {
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("DeleteMessage");
            }
        }
        if !failed.is_empty() {
            return returned;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spot_walkthrough_on_ec2_dynamodb_sqs_and_the_api_server() {
    init_logs();
    let mut s = scenario_file("spot-interruption.yaml");
    s.actions.clear();
    // `launches` counts the in-memory cloud's launches, or else the
    // instances EC2 still runs (the interrupted one is gone): counted below
    // as CreateFleet calls instead.
    let launches = s
        .expect
        .launches
        .take()
        .expect("the scenario counts launches");
    let (mut sim, f) = on_real().await;
    let (sqs, url) = queue(&f).await;
    scenario::load(&mut sim, &s).await.expect("loads");
    f.store_node_class(&sim.store).await;
    sim.run_for(SignedDuration::from_mins(3)).await;
    let claims = sim.store.claims().await.expect("claims");
    let spot = claims
        .iter()
        .find(|c| c.pool == "spot")
        .expect("the spot node's claim")
        .clone();
    let instance = spot.instance_id().expect("launched").to_owned();
    sqs.send_message()
        .queue_url(&url)
        .message_body(spot_warning(&instance, sim.now()))
        .send()
        .await
        .expect("SendMessage");
    assert_eq!(pump(&mut sim, &sqs, &url).await, 0, "nothing handed back");
    sim.run_for(SignedDuration::from_mins(4)).await;
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(
        sim.cloud.launch_calls(),
        launches,
        "two nodes and one replacement"
    );
    // EC2 has the interrupted instance terminated (by us), DynamoDB no longer has its claim.
    let described = f.instances_of_claim(&spot.id).await;
    let state = described[0]
        .state()
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_owned());
    assert!(
        matches!(state.as_deref(), Some("terminated" | "shutting-down")),
        "{state:?}"
    );
    assert!(
        sim.store
            .claims()
            .await
            .expect("claims")
            .iter()
            .all(|c| c.id != spot.id)
    );
    assert!(sim.store.commands().await.expect("commands").is_empty());
    // Events are real API objects: every pod of the spot node was evicted.
    let evicted = sim
        .cluster
        .events()
        .await
        .into_iter()
        .filter(|(_, e)| e.reason == "Evicted")
        .count();
    assert!(evicted >= 110, "{evicted} Evicted events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_ask_for_nothing_change_nothing_and_a_duplicate_starts_one_removal() {
    init_logs();
    let (mut sim, f, claim) = spot_node().await;
    let (sqs, url) = queue(&f).await;
    let instance = claim.instance_id().expect("launched").to_owned();
    // Another cluster's instance in the same account.
    let foreign = f
        .ec2()
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("kubernetes.io/cluster/someone-else")
                        .value("owned")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("RunInstances")
        .instances()[0]
        .instance_id()
        .expect("id")
        .to_owned();
    let fixture = |name: &str, id: &str| -> Vec<String> {
        let path = format!(
            "{}/../functions/interruption/events/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let event: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
        let now = Timestamp::now().to_string();
        event["Records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| {
                r["body"]
                    .as_str()
                    .expect("body")
                    .replace(PLACEHOLDER, id)
                    .replace("2026-12-01T09:00:00Z", &now)
            })
            .collect()
    };
    let mut bodies = Vec::new();
    bodies.extend(fixture("unknown-instance.json", "i-0fffffffffffffff0"));
    bodies.extend(fixture("foreign-cluster.json", &foreign));
    bodies.extend(fixture("spot-interruption.json", &foreign));
    bodies.extend(fixture("unsupported-detail-type.json", &instance));
    bodies.extend(fixture("malformed.json", &instance));
    bodies.extend(fixture("rebalance-recommendation.json", &instance));
    for b in &bodies {
        sqs.send_message()
            .queue_url(&url)
            .message_body(b)
            .send()
            .await
            .expect("SendMessage");
    }
    assert_eq!(pump(&mut sim, &sqs, &url).await, 0);
    let kinds: Vec<&str> = sim.interruptions.iter().map(|o| o.kind()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "dropped").count(),
        3,
        "malformed.json's three records: {kinds:?}"
    );
    assert!(
        kinds.iter().all(|k| *k == "dropped" || *k == "ignored"),
        "{kinds:?}"
    );
    assert!(
        sim.store.commands().await.expect("commands").is_empty(),
        "nothing removed"
    );
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("attributes");
    let left = attrs
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
        .cloned();
    assert_eq!(
        left.as_deref(),
        Some("0"),
        "every message was deleted, none left to come back"
    );
    // The foreign instance is untouched.
    let described = f
        .ec2()
        .describe_instances()
        .instance_ids(&foreign)
        .send()
        .await
        .expect("describe");
    let state = described.reservations()[0].instances()[0]
        .state()
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_owned());
    assert_eq!(state.as_deref(), Some("running"));

    // The same warning twice in one batch, and once more later: one removal, one replacement.
    for b in fixture("duplicate-spot-interruption.json", &instance) {
        sqs.send_message()
            .queue_url(&url)
            .message_body(b)
            .send()
            .await
            .expect("SendMessage");
    }
    assert_eq!(pump(&mut sim, &sqs, &url).await, 0);
    sim.run_for(SignedDuration::from_secs(30)).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body(spot_warning(&instance, sim.now()))
        .send()
        .await
        .expect("SendMessage");
    assert_eq!(pump(&mut sim, &sqs, &url).await, 0);
    sim.run_for(SignedDuration::from_mins(3)).await;
    assert_eq!(sim.replacements.len(), 1, "{:?}", sim.replacements);
    assert_eq!(sim.removed_nodes.len(), 1);
    let nodes = sim.cluster.all_nodes().await;
    assert_eq!(nodes.len(), 1, "the replacement only");
    assert_ne!(nodes[0].metadata.name, claim.node_name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_ignore_changes_nothing() {
    init_logs();
    let (mut sim, _f, claim) = spot_node().await;
    cases::rebalance_ignore(&mut sim, &claim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_cordon_taints_only() {
    init_logs();
    let (mut sim, _f, claim) = spot_node().await;
    cases::rebalance_cordon(&mut sim, &claim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_replace_launches_first_then_drains_without_a_deadline() {
    init_logs();
    let (mut sim, _f, claim) = spot_node().await;
    cases::rebalance_replace(&mut sim, &claim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_allows_nothing_holds_until_the_deadline_then_the_pods_are_deleted() {
    init_logs();
    let (mut sim, _f, claim) = spot_node().await;
    cases::budget_holds_until_the_deadline(&mut sim, &claim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_out_of_capacity_falls_back_to_another_offering() {
    init_logs();
    let (mut sim, _f, claim) = spot_node().await;
    cases::replacement_falls_back(&mut sim, &claim).await;
}
