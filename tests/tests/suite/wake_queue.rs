//! The provisioner's wake queue on the emulator's SQS and DynamoDB: an
//! invocation that ends asks for the next one with a delayed message, and
//! while one waits no other invocation sends a second (the wake lease), so
//! the chain of invocations stays one chain however many end meanwhile —
//! the minute's schedule, one that found the provisioner lease held. A
//! message that could not be sent gives the lease back for the next
//! invocation to try. An interruption batch that starts a removal invokes
//! the provisioner at once, without touching the chain.

use aws_sdk_sqs::types::QueueAttributeName;
use nodewright::handlers::interruption::{BatchReport, MessageOutcome};
use nodewright::handlers::termination::Started;
use nodewright::model::SignedDuration;
use nodewright::ports::{Ports, SystemClock};
use nodewright::runtime::{Wake, WakeOutcome, kick_for_removals, wake_after};
use nodewright::sim::SimClock;
use nodewright_tests::aws::{dynamo_store, sdk_config, unique};
use nodewright_tests::sim::sim_cloud;

const REGION: &str = "us-east-1";

async fn ports() -> Ports<
    nodewright::sim::SimCloud,
    nodewright::sim::SimCluster,
    nodewright::aws::DynamoStore,
    SystemClock,
> {
    let clock = SimClock::default();
    Ports {
        cloud: sim_cloud(REGION, &clock),
        cluster: nodewright::sim::SimCluster::new(clock),
        store: dynamo_store(REGION).await,
        clock: SystemClock,
    }
}

/// The wake of `url`, `after_s` seconds after an invocation ends.
fn wake(sdk: &aws_config::SdkConfig, url: &str, after_s: i64) -> Wake {
    Wake {
        queue: nodewright::aws::WakeQueue::new(sdk, url),
        after: SignedDuration::from_secs(after_s),
    }
}

/// Messages visible now, taken (the event source mapping's receive).
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str, wait_s: i32) -> Vec<String> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(wait_s)
        .send()
        .await
        .expect("ReceiveMessage")
        .messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect()
}

/// A wake queue as the module makes it (its retention: the delay and a
/// minute).
async fn queue(sqs: &aws_sdk_sqs::Client) -> String {
    sqs.create_queue()
        .queue_name(unique("nw-wake"))
        .attributes(QueueAttributeName::MessageRetentionPeriod, "70")
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("url")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wake_message_waits_at_a_time() {
    let sdk = sdk_config(REGION).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let url = queue(&sqs).await;
    let wake = wake(&sdk, &url, 2);
    let ports = ports().await;

    assert_eq!(wake_after(&ports, &wake, "first").await, WakeOutcome::Sent);
    // Ending while that message waits: no second one.
    assert_eq!(
        wake_after(&ports, &wake, "second").await,
        WakeOutcome::AlreadyWaiting
    );
    assert!(
        receive(&sqs, &url, 0).await.is_empty(),
        "the message is delayed, not visible at once"
    );
    let woke = receive(&sqs, &url, 10).await;
    assert_eq!(woke.len(), 1, "one message: {woke:?}");
    assert!(woke[0].contains("\"sent_by\":\"first\""), "{woke:?}");
    // The invocation that message wakes finds the lease free and asks again.
    assert_eq!(wake_after(&ports, &wake, "woken").await, WakeOutcome::Sent);
    let next = receive(&sqs, &url, 10).await;
    assert_eq!(next.len(), 1, "{next:?}");
    assert!(next[0].contains("\"sent_by\":\"woken\""), "{next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_that_could_not_be_sent_leaves_the_next_invocation_free_to_send() {
    let sdk = sdk_config(REGION).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let url = queue(&sqs).await;
    let ports = ports().await;
    let missing = wake(&sdk, &format!("{url}-missing"), 10);
    let WakeOutcome::Failed(why) = wake_after(&ports, &missing, "unlucky").await else {
        panic!("a queue that does not exist takes no message");
    };
    assert!(
        why.contains("wake queue") && why.contains("SendMessage"),
        "{why}"
    );
    let wake = wake(&sdk, &url, 1);
    assert_eq!(
        wake_after(&ports, &wake, "next").await,
        WakeOutcome::Sent,
        "the failed sender gave the wake lease back"
    );
    let woke = receive(&sqs, &url, 10).await;
    assert_eq!(woke.len(), 1, "{woke:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruption_that_starts_a_removal_invokes_the_provisioner_at_once() {
    let sdk = sdk_config(REGION).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let url = queue(&sqs).await;
    let wake = wake(&sdk, &url, 10);
    let batch = |outcome: MessageOutcome| BatchReport {
        failures: Vec::new(),
        outcomes: vec![("message".to_owned(), outcome)],
    };
    // Nothing started, or a removal already as early: no kick.
    let ignored = batch(MessageOutcome::Ignored("not one of ours".to_owned()));
    assert!(!kick_for_removals(&wake, &ignored, "interruption-1").await);
    let unchanged = batch(MessageOutcome::Removing(vec![Started::Existing {
        id: "claim-a".to_owned(),
        tightened: false,
    }]));
    assert!(!kick_for_removals(&wake, &unchanged, "interruption-2").await);
    let started = batch(MessageOutcome::Removing(vec![Started::New(
        "claim-b".to_owned(),
    )]));
    assert!(kick_for_removals(&wake, &started, "interruption-3").await);
    // Visible at once, not after the wake's 10 s: a 2-s poll gets it.
    let kicked = receive(&sqs, &url, 2).await;
    assert_eq!(kicked.len(), 1, "{kicked:?}");
    assert!(
        kicked[0].contains("\"sent_by\":\"interruption-3\""),
        "{kicked:?}"
    );
    // The kick took no wake lease: the kicked invocation asks for the next.
    let ports = ports().await;
    assert_eq!(wake_after(&ports, &wake, "kicked").await, WakeOutcome::Sent);
}
