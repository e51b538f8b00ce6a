//! The interruption queue on the emulator's SQS, driven as the Lambda event
//! source mapping drives it (receive up to 10, hand the batch to the
//! handler, delete what did not fail): a message whose handling always
//! fails is received `maxReceiveCount` times, then SQS moves it to the
//! dead-letter queue — with the store failing for good (its table is
//! missing, an error that used to count as "can never succeed" and delete
//! the message). A body that cannot be read is deleted at once and never
//! reaches the dead-letter queue.
//!
//! The queue is made as the Terraform module makes it (300-s retention,
//! a redrive policy with the module's default `maxReceiveCount`), with a
//! 1-s visibility timeout instead of 30 s so the test takes seconds; the
//! infra checks hold the module's own figures to `maxReceiveCount ×
//! visibility < retention`.

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use nodewright::aws::{DynamoStore, DynamoTables};
use nodewright::handlers::config::LoadedConfig;
use nodewright::handlers::interruption::{self, InterruptionSettings, Record};
use nodewright::model::{SignedDuration, Timestamp};
use nodewright::ports::{Clock, Ports};
use nodewright::sim::ClusterDriver;
use nodewright::sim::SimSettings;
use nodewright_tests::aws::{sdk_config, unique};
use nodewright_tests::sim::in_memory;

const REGION: &str = "us-east-1";
/// `interruption_max_receive_count`'s default in infra/modules/nodewright.
const MAX_RECEIVE_COUNT: usize = 5;
const VISIBILITY_S: u64 = 1;

fn spot_warning(instance: &str) -> String {
    serde_json::json!({
        "version": "0", "id": unique("evt"), "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "time": Timestamp::now().to_string(),
        "region": REGION, "resources": [format!("arn:aws:ec2:{REGION}:123456789012:instance/{instance}")],
        "detail": {"instance-id": instance, "instance-action": "terminate"}
    })
    .to_string()
}

/// The queue and its dead-letter queue, as the module makes them.
async fn queues(sqs: &aws_sdk_sqs::Client) -> (String, String) {
    let dlq = sqs
        .create_queue()
        .queue_name(unique("nw-interruption-dlq"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .expect("CreateQueue dlq")
        .queue_url()
        .expect("url")
        .to_owned();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("arn");
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": MAX_RECEIVE_COUNT.to_string(),
    })
    .to_string();
    let queue = sqs
        .create_queue()
        .queue_name(unique("nw-interruption"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            VISIBILITY_S.to_string(),
        )
        .attributes(QueueAttributeName::RedrivePolicy, redrive)
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("url")
        .to_owned();
    (queue, dlq)
}

/// What a queue holds, looked at without taking it (visibility 0).
async fn bodies(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .expect("ReceiveMessage")
        .messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_always_fails_reaches_the_dead_letter_queue() {
    let config = sdk_config(REGION).await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let (queue, dlq) = queues(&sqs).await;
    // A store whose tables do not exist: every call fails with
    // ResourceNotFoundException, now and on every retry.
    let sim = in_memory(REGION, SimSettings::default());
    let ports = Ports {
        cloud: sim.cloud.clone(),
        cluster: sim.cluster.port(),
        store: DynamoStore::new(&config, DynamoTables::with_prefix(&unique("missing"))),
        clock: sim.clock.clone(),
    };
    let poison = spot_warning("i-0123456789abcdef0");
    for body in [poison.as_str(), "this is not json"] {
        sqs.send_message()
            .queue_url(&queue)
            .message_body(body)
            .send()
            .await
            .expect("SendMessage");
    }
    let mut receives = 0;
    let mut deleted: Vec<String> = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let got = sqs
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("ReceiveMessage");
        let messages = got.messages();
        if messages.is_empty() {
            if !bodies(&sqs, &dlq).await.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        let records: Vec<Record> = messages
            .iter()
            .map(|m| Record {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
            })
            .collect();
        receives += records.iter().filter(|r| r.body == poison).count();
        let report = interruption::handle_batch(
            &ports,
            &LoadedConfig::default(),
            &Default::default(),
            &InterruptionSettings::default(),
            &records,
            ports.clock.now() + SignedDuration::from_secs(5),
        )
        .await
        .expect("batch");
        for m in messages {
            let id = m.message_id().unwrap_or_default();
            if !report.failures.iter().any(|f| f == id) {
                deleted.push(m.body().unwrap_or_default().to_owned());
                sqs.delete_message()
                    .queue_url(&queue)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("DeleteMessage");
            }
        }
    }
    assert_eq!(
        deleted,
        vec!["this is not json".to_owned()],
        "only the unreadable body was deleted; the failing message never was"
    );
    assert_eq!(
        receives, MAX_RECEIVE_COUNT,
        "received maxReceiveCount times, then moved"
    );
    assert_eq!(
        bodies(&sqs, &dlq).await,
        vec![poison],
        "the dead-letter queue holds the message, as sent"
    );
    assert!(bodies(&sqs, &queue).await.is_empty());
}
