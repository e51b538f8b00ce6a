//! `DynamoStore` against the moto emulator, what only DynamoDB has: listings
//! that follow pages, and the state view read again exactly when a store
//! wrote. Every `Store` behaviour both stores share (conditional writes,
//! limits under concurrency, the batch, leases, unavailable offerings,
//! configuration items) is in the Store contract (`store_contract.rs`),
//! run on `MemStore` and on `DynamoStore`. Each test uses its own two tables.

use nodewright::aws::DynamoStore;
use nodewright::config::Limits;
use nodewright::model::claim::Claim;
use nodewright::model::{
    Batch, Command, Lease, OfferingKey, RemovalReason, RemovalSpec, Step, Timestamp,
};
use nodewright::ports::{Store, StoreError};
use nodewright_tests::aws::{dynamo_store, sdk_config};

const REGION: &str = "us-east-1";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid time")
}

fn claim(id: &str, pool: &str, cpu_millis: i64) -> Claim {
    let reservation = [
        ("cpu".to_owned(), cpu_millis),
        ("memory".to_owned(), cpu_millis * 4 * 1024 * 1024),
        ("nodes".to_owned(), 1),
    ];
    nodewright_tests::claim_record(id, pool, at(0), reservation.into())
}

fn limits(pairs: &[(&str, i64)]) -> Limits {
    Limits {
        resources: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_follows_pages() {
    let store: DynamoStore = dynamo_store(REGION).await.with_page_size(4);
    for i in 0..11 {
        store
            .create_claim(
                &claim(&format!("paged-{i:03}"), "paged", 100),
                &Limits::default(),
            )
            .await
            .expect("create");
    }
    store
        .mark_unavailable(
            &OfferingKey {
                capacity_type: "spot".into(),
                instance_type: "m5.large".into(),
                zone: "z".into(),
            },
            at(60),
        )
        .await
        .expect("mark");
    let claims = store.claims().await.expect("claims");
    assert_eq!(claims.len(), 11);
    assert_eq!(claims[0].id, "paged-000");
    assert_eq!(
        store.pool_usage().await.expect("usage")["paged"]["cpu"],
        1100
    );
}

/// In DynamoDB the state read costs one GetItem (the `state#version`
/// marker) once the view is warm, where the four listings cost four: the
/// running-cost model counts on the provisioner's tick asking once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_state_read_is_one_marker_read_in_dynamodb() {
    let store = dynamo_store(REGION).await;
    store
        .create_claim(&claim("default-aaaaa", "default", 2000), &limits(&[]))
        .await
        .expect("create");
    store.state(at(0)).await.expect("warm the view");
    let before = store.requests();
    let state = store.state(at(0)).await.expect("state");
    let used = store.requests() - before;
    assert_eq!(state.claims.len(), 1);
    assert_eq!((used.get_item, used.state_scans), (1, 0), "{used:?}");
    let before = store.requests();
    store.claims().await.expect("claims");
    store.pool_usage().await.expect("usage");
    let used = store.requests() - before;
    assert_eq!(used.get_item, 2, "one marker read per listing: {used:?}");
}

fn removal(id: &str) -> Command {
    let spec = RemovalSpec {
        claim_id: id.into(),
        pool: "default".into(),
        node: Some("ip-10-0-0-1.ec2.internal".into()),
        instance_id: Some(format!("i-{id}")),
        reason: RemovalReason::SpotInterrupted,
        replace: true,
        deadline: Some(at(120)),
        avoid: vec![],
        event_at: Some(at(0)),
        handover: false,
    };
    Command::new(spec, at(0))
}

/// Two containers on the same tables, each with its own state view: what
/// one writes, the other reads at once; a read while nothing moved costs
/// the marker's GetItem, not a Scan; lease and batch writes move nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_view_is_read_again_exactly_when_a_store_wrote() {
    let a = dynamo_store(REGION).await;
    let b = DynamoStore::new(&sdk_config(REGION).await, a.tables().clone());
    let none = Limits::default();
    let ids = |claims: Vec<Claim>| claims.into_iter().map(|c| c.id).collect::<Vec<_>>();

    assert!(a.claims().await.expect("claims").is_empty());
    let scans = a.requests().state_scans;
    assert!(a.claims().await.expect("claims").is_empty());
    assert!(a.pool_usage().await.expect("usage").is_empty());
    assert!(a.commands().await.expect("commands").is_empty());
    assert!(
        a.unavailable_offerings(at(0))
            .await
            .expect("unavailable")
            .is_empty()
    );
    assert_eq!(
        a.requests().state_scans,
        scans,
        "nothing moved: every list answered from one Scan"
    );

    // A claim created elsewhere, with its usage.
    let c = claim("c1", "default", 1000);
    b.create_claim(&c, &none).await.expect("create");
    assert_eq!(ids(a.claims().await.expect("claims")), ["c1"]);
    assert_eq!(a.pool_usage().await.expect("usage")["default"]["cpu"], 1000);
    assert_eq!(
        a.requests().state_scans,
        scans + 1,
        "one Scan after the marker moved, shared by both lists"
    );

    // An update that moves no usage (a plain conditional put before) moves the marker too.
    let mut registered = c.next();
    registered.node_name = Some("ip-10-0-0-1.ec2.internal".into());
    b.update_claim(&c, &registered, &none)
        .await
        .expect("update");
    assert_eq!(
        a.claims().await.expect("claims")[0].node_name,
        registered.node_name
    );
    // One that moves usage.
    let mut bigger = registered.next();
    bigger.reservation.insert("cpu".into(), 3000);
    b.update_claim(&registered, &bigger, &none)
        .await
        .expect("update");
    assert_eq!(a.pool_usage().await.expect("usage")["default"]["cpu"], 3000);

    // Commands: created, advanced, deleted elsewhere.
    let cmd = removal("c1");
    b.put_command(None, &cmd).await.expect("put command");
    assert_eq!(a.commands().await.expect("commands"), vec![cmd.clone()]);
    let mut advanced = cmd.next(at(5));
    advanced.step = Step::Drain;
    b.put_command(Some(&cmd), &advanced).await.expect("advance");
    assert_eq!(a.commands().await.expect("commands")[0].step, Step::Drain);
    // A stale delete is refused even across stores; the right one goes through.
    assert!(matches!(
        a.delete_command(&cmd).await,
        Err(StoreError::Conflict { .. })
    ));
    b.delete_command(&advanced).await.expect("delete");
    assert!(a.commands().await.expect("commands").is_empty());
    a.delete_command(&advanced)
        .await
        .expect("deleting what is gone is done");

    // An unavailable mark.
    let offering = OfferingKey {
        capacity_type: "spot".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
    };
    b.mark_unavailable(&offering, at(180)).await.expect("mark");
    assert_eq!(
        a.unavailable_offerings(at(0)).await.expect("unavailable"),
        vec![offering]
    );

    // Leases and the batch record move nothing.
    let scans = a.requests().state_scans;
    let lease = Lease {
        name: "provisioner".into(),
        holder: "x".into(),
        expires_at: at(60),
    };
    assert!(b.acquire_lease(&lease, at(0)).await.expect("lease"));
    b.put_batch(None, &Batch::default()).await.expect("batch");
    assert_eq!(ids(a.claims().await.expect("claims")), ["c1"]);
    assert_eq!(
        a.requests().state_scans,
        scans,
        "no Scan for a lease or a batch write"
    );

    // The claim deleted elsewhere: gone, its usage released.
    b.delete_claim(&bigger).await.expect("delete");
    assert!(a.claims().await.expect("claims").is_empty());
    assert!(
        a.pool_usage()
            .await
            .expect("usage")
            .get("default")
            .is_none_or(|u| u.get("cpu").is_none_or(|v| *v == 0))
    );
    // And a store sees its own writes.
    a.create_claim(&claim("c2", "default", 500), &none)
        .await
        .expect("create");
    assert_eq!(ids(a.claims().await.expect("claims")), ["c2"]);
}
