//! `DynamoStore` against the moto emulator: every Store operation, the
//! conditional writes that must lose, and limit accounting under
//! concurrency. Each test uses its own two tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use nodewright::aws::DynamoStore;
use nodewright::config::{ConfigItem, ConfigKind, Limits};
use nodewright::model::batch::Window;
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
async fn config_items_are_versioned() {
    let store = dynamo_store(REGION).await;
    let item = |name: &str, version: u64, spec: serde_json::Value| ConfigItem {
        kind: ConfigKind::NodePool,
        name: name.into(),
        spec,
        annotations: Default::default(),
        version,
        updated_at: at(version as i64),
    };
    let v1 = item("default", 1, serde_json::json!({"limits": {"cpu": 10}}));
    store.put_config_item(&v1).await.expect("first write");
    assert!(
        matches!(
            store.put_config_item(&v1).await,
            Err(StoreError::Conflict(_))
        ),
        "version 1 twice"
    );
    let v2 = item("default", 2, serde_json::json!({"limits": {"cpu": 20}}));
    store.put_config_item(&v2).await.expect("v1 → v2");
    let stale = item("default", 2, serde_json::json!({"limits": {"cpu": 30}}));
    assert!(
        matches!(
            store.put_config_item(&stale).await,
            Err(StoreError::Conflict(_))
        ),
        "lost update refused"
    );
    let class = ConfigItem {
        kind: ConfigKind::NodeClass,
        ..item("default", 1, serde_json::json!({"amiFamily": "AL2023"}))
    };
    store
        .put_config_item(&class)
        .await
        .expect("a nodeclass of the same name");
    let mut items = store.config_items().await.expect("list");
    items.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    assert_eq!(items, vec![v2, class]);
    store
        .delete_config_item(ConfigKind::NodePool, "default")
        .await
        .expect("delete");
    store
        .delete_config_item(ConfigKind::NodePool, "default")
        .await
        .expect("delete again");
    assert_eq!(store.config_items().await.expect("list").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_move_usage_atomically() {
    let store = dynamo_store(REGION).await;
    let lim = limits(&[("cpu", 10_000), ("nodes", 3)]);
    let a = claim("default-aaaaa", "default", 4000);
    store.create_claim(&a, &lim).await.expect("create");
    assert!(
        matches!(
            store.create_claim(&a, &lim).await,
            Err(StoreError::Conflict(_))
        ),
        "exists"
    );
    let usage = store.pool_usage().await.expect("usage");
    assert_eq!(usage["default"]["cpu"], 4000);
    assert_eq!(usage["default"]["nodes"], 1);

    // Narrowed after launch: the reservation shrinks to the real type.
    let mut a2 = a.next();
    a2.reservation.insert("cpu".into(), 2000);
    store.update_claim(&a, &a2, &lim).await.expect("update");
    assert!(
        matches!(
            store.update_claim(&a, &a2, &lim).await,
            Err(StoreError::Conflict(_))
        ),
        "stale version"
    );
    assert_eq!(
        store.pool_usage().await.expect("usage")["default"]["cpu"],
        2000
    );

    // Growing past the limit is refused and changes nothing.
    let b = claim("default-bbbbb", "default", 8000);
    store
        .create_claim(&b, &lim)
        .await
        .expect("fits: 2000 + 8000 = 10000");
    let mut a3 = a2.next();
    a3.reservation.insert("cpu".into(), 3000);
    assert_eq!(
        store.update_claim(&a2, &a3, &lim).await,
        Err(StoreError::LimitExceeded {
            pool: "default".into(),
            resource: "cpu".into()
        })
    );
    let stored = store.claims().await.expect("claims");
    assert_eq!(
        stored.iter().find(|c| c.id == a.id).map(|c| c.version),
        Some(2)
    );
    // A bad update (version skipped) is refused outright.
    let mut skip = a2.next();
    skip.version += 1;
    assert!(matches!(
        store.update_claim(&a2, &skip, &lim).await,
        Err(StoreError::Invalid(_))
    ));

    // Which limit: nodes.
    let c = claim("default-ccccc", "default", 0);
    let d = claim("default-ddddd", "default", 0);
    store.create_claim(&c, &lim).await.expect("third node");
    assert_eq!(
        store.create_claim(&d, &lim).await,
        Err(StoreError::LimitExceeded {
            pool: "default".into(),
            resource: "nodes".into()
        })
    );
    assert!(
        store
            .claims()
            .await
            .expect("claims")
            .iter()
            .all(|x| x.id != d.id),
        "refused claim not written"
    );

    // Delete releases the *stored* reservation (a2's 2000, not a's 4000), idempotently.
    store.delete_claim(&a).await.expect("delete");
    store.delete_claim(&a).await.expect("delete again");
    let usage = store.pool_usage().await.expect("usage");
    assert_eq!(usage["default"]["cpu"], 8000);
    assert_eq!(usage["default"]["nodes"], 2);
    store.delete_claim(&b).await.expect("delete");
    store.delete_claim(&c).await.expect("delete");
    assert!(
        !store
            .pool_usage()
            .await
            .expect("usage")
            .contains_key("default"),
        "all released"
    );
    assert!(store.claims().await.expect("claims").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_never_exceed_a_limit() {
    let store = Arc::new(dynamo_store(REGION).await);
    let lim = limits(&[("cpu", 20_000)]);
    let mut tasks = Vec::new();
    for i in 0..50 {
        let store = store.clone();
        let lim = lim.clone();
        tasks.push(tokio::spawn(async move {
            store
                .create_claim(&claim(&format!("burst-{i:05}"), "burst", 1000), &lim)
                .await
        }));
    }
    let mut ok = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(()) => ok += 1,
            Err(StoreError::LimitExceeded { pool, resource }) => {
                assert_eq!((pool.as_str(), resource.as_str()), ("burst", "cpu"));
                refused += 1;
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert_eq!((ok, refused), (20, 30));
    assert_eq!(
        store.pool_usage().await.expect("usage")["burst"]["cpu"],
        20_000
    );
    assert_eq!(store.claims().await.expect("claims").len(), 20);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_window_is_a_conditional_record() {
    let store = dynamo_store(REGION).await;
    assert_eq!(store.batch().await.expect("read"), None);
    let b1 = Batch {
        window: Some(Window {
            opened_at: at(0),
            last_seen_at: at(0),
            seen: [nodewright::model::batch::uid_hash("uid-1")].into(),
        }),
        parked: BTreeMap::new(),
        parked_more: Vec::new(),
        solving: None,
        version: 1,
    };
    store.put_batch(None, &b1).await.expect("create");
    assert!(
        matches!(
            store.put_batch(None, &b1).await,
            Err(StoreError::Conflict(_))
        ),
        "already there"
    );
    let mut b2 = b1.clone();
    b2.version = 2;
    b2.window
        .as_mut()
        .map(|w| w.seen.insert(nodewright::model::batch::uid_hash("uid-2")));
    store.put_batch(Some(&b1), &b2).await.expect("advance");
    assert!(
        matches!(
            store.put_batch(Some(&b1), &b2).await,
            Err(StoreError::Conflict(_))
        ),
        "stale writer loses"
    );
    assert_eq!(store.batch().await.expect("read"), Some(b2.clone()));
    assert!(
        matches!(store.delete_batch(&b1).await, Err(StoreError::Conflict(_))),
        "not the stored version"
    );
    store.delete_batch(&b2).await.expect("delete");
    store.delete_batch(&b2).await.expect("gone is fine");
    assert_eq!(store.batch().await.expect("read"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_go_to_one_holder_until_they_expire() {
    let store = dynamo_store(REGION).await;
    let lease = |holder: &str, until: i64| Lease {
        name: "provisioner".into(),
        holder: holder.into(),
        expires_at: at(until),
    };
    assert!(
        store
            .acquire_lease(&lease("a", 60), at(0))
            .await
            .expect("free")
    );
    assert!(
        !store
            .acquire_lease(&lease("b", 90), at(30))
            .await
            .expect("held by a")
    );
    assert!(
        store
            .acquire_lease(&lease("a", 120), at(30))
            .await
            .expect("a renews")
    );
    assert!(
        !store
            .acquire_lease(&lease("b", 150), at(119))
            .await
            .expect("still a's")
    );
    assert!(
        store
            .acquire_lease(&lease("b", 200), at(120))
            .await
            .expect("expired: b takes it")
    );
    store
        .release_lease("provisioner", "a")
        .await
        .expect("not a's: no-op");
    assert!(
        !store
            .acquire_lease(&lease("a", 300), at(130))
            .await
            .expect("b still holds it")
    );
    store
        .release_lease("provisioner", "b")
        .await
        .expect("release");
    assert!(
        store
            .acquire_lease(&lease("a", 300), at(130))
            .await
            .expect("free again")
    );
    store
        .release_lease("nothing", "a")
        .await
        .expect("unknown lease");

    // Two contenders at once: exactly one wins.
    let s2 = dynamo_store(REGION).await;
    let (lx, ly) = (lease("x", 60), lease("y", 60));
    let (x, y) = tokio::join!(s2.acquire_lease(&lx, at(0)), s2.acquire_lease(&ly, at(0)));
    assert_eq!(u8::from(x.expect("x")) + u8::from(y.expect("y")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_offerings_expire_in_code() {
    let store = dynamo_store(REGION).await;
    let key = |ty: &str| OfferingKey {
        capacity_type: "spot".into(),
        instance_type: ty.into(),
        zone: "us-east-1a".into(),
    };
    store
        .mark_unavailable(&key("m5.large"), at(180))
        .await
        .expect("mark");
    store
        .mark_unavailable(&key("c5.large"), at(60))
        .await
        .expect("mark");
    // A shorter mark does not shorten a longer one.
    store
        .mark_unavailable(&key("m5.large"), at(30))
        .await
        .expect("mark again");
    assert_eq!(
        store.unavailable_offerings(at(0)).await.expect("list"),
        vec![key("c5.large"), key("m5.large")]
    );
    assert_eq!(
        store.unavailable_offerings(at(60)).await.expect("list"),
        vec![key("m5.large")]
    );
    assert_eq!(
        store.unavailable_offerings(at(179)).await.expect("list"),
        vec![key("m5.large")]
    );
    assert!(
        store
            .unavailable_offerings(at(180))
            .await
            .expect("list")
            .is_empty(),
        "expired (TTL never ran)"
    );
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
        Err(StoreError::Conflict(_))
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
