//! The `Store` contract: one test body per behaviour, run on the in-memory
//! store (`MemStore`) and on `DynamoStore` against the moto emulator (its
//! own two tables per test), so the simulator's store answers exactly as
//! DynamoDB's conditional writes do.
//!
//! `contract!` (the harness, `tests/src/contract.rs`) turns each generic
//! body into a `mem` and a `dynamo` test:
//! `cargo test -p nodewright-tests --test suite store_contract::commands_`
//! runs both adapters' command tests. What only DynamoDB has (paging, the
//! state view's request counts) is in `aws_store.rs`.

use futures_util::future::join_all;
use nodewright::config::{ConfigItem, ConfigKind, ConfigWrite, Limits};
use nodewright::model::batch::Window;
use nodewright::model::claim::Claim;
use nodewright::model::{
    Batch, Command, Lease, OfferingKey, RemovalReason, RemovalSpec, Step, Timestamp,
};
use nodewright::ports::{Store, StoreError};
use nodewright_tests::contract::store::ByHand;

nodewright_tests::contract! {
    [mem => nodewright_tests::contract::store::mem,
     dynamo => nodewright_tests::contract::store::dynamo]
    commands_are_created_once,
    commands_advance_only_from_the_stored_version,
    concurrent_writers_advance_a_command_one_at_a_time,
    commands_are_deleted_at_their_version,
    commands_are_listed_oldest_first,
    command_writes_must_move_one_version,
    claims_are_created_once_within_limits,
    claim_updates_are_conditional_and_move_usage,
    claim_updates_must_move_one_version,
    concurrent_claims_never_pass_a_limit,
    the_batch_is_conditional_on_its_version,
    leases_have_one_holder,
    unavailable_offerings_expire,
    unreadable_items_are_quarantined,
    one_state_read_answers_as_the_listings,
    config_items_are_versioned_per_kind_and_name,
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid time")
}

fn command(id: &str, created: i64) -> Command {
    let spec = RemovalSpec {
        claim_id: id.into(),
        pool: "default".into(),
        node: Some(format!("ip-10-0-0-{created}.ec2.internal")),
        instance_id: Some(format!("i-{id}")),
        reason: RemovalReason::SpotInterrupted,
        replace: true,
        deadline: Some(at(created + 120)),
        avoid: vec![OfferingKey {
            capacity_type: "spot".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
        }],
        event_at: Some(at(created)),
        handover: false,
    };
    Command::new(spec, at(created))
}

fn is_conflict<T: std::fmt::Debug>(r: &Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Conflict { .. }))
}

/// A conflict naming the item that lost by its key, the same on every adapter.
fn is_conflict_on<T: std::fmt::Debug>(r: &Result<T, StoreError>, key: &str) -> bool {
    matches!(r, Err(StoreError::Conflict { item, .. }) if item == key)
}

async fn stored<S: Store>(store: &S, id: &str) -> Option<Command> {
    store
        .commands()
        .await
        .expect("list commands")
        .into_iter()
        .find(|c| c.id == id)
}

// ------------------------------------------------------------ commands

async fn commands_are_created_once<S: Store>(store: &S) {
    let first = command("default-aaaaa", 0);
    store.put_command(None, &first).await.expect("create");
    assert_eq!(
        stored(store, &first.id).await,
        Some(first.clone()),
        "read back whole"
    );

    // A second invocation deciding to remove the same node loses.
    let mut second = command("default-aaaaa", 5);
    second.spec.reason = RemovalReason::Rebalance;
    assert!(
        is_conflict_on(
            &store.put_command(None, &second).await,
            "command#default-aaaaa"
        ),
        "second create"
    );
    assert_eq!(
        stored(store, &first.id).await,
        Some(first),
        "the first is untouched"
    );
}

async fn commands_advance_only_from_the_stored_version<S: Store>(store: &S) {
    let v1 = command("default-bbbbb", 0);
    store.put_command(None, &v1).await.expect("create");
    let mut v2 = v1.next(at(1));
    v2.step = Step::Replace;
    v2.milestones.tainted_at = Some(at(1));
    store.put_command(Some(&v1), &v2).await.expect("v1 → v2");
    assert_eq!(stored(store, &v1.id).await, Some(v2.clone()));

    // A writer still holding v1 loses, and changes nothing.
    let mut stale = v1.next(at(2));
    stale.step = Step::Drain;
    assert!(
        is_conflict_on(
            &store.put_command(Some(&v1), &stale).await,
            &format!("command#{}", v1.id)
        ),
        "stale previous"
    );
    assert_eq!(stored(store, &v1.id).await, Some(v2.clone()));

    let v3 = v2.next(at(3));
    store.put_command(Some(&v2), &v3).await.expect("v2 → v3");

    // An update of a command that is gone is a conflict, never a re-create.
    store.delete_command(&v3).await.expect("delete");
    assert!(
        is_conflict_on(
            &store.put_command(Some(&v3), &v3.next(at(4))).await,
            &format!("command#{}", v3.id)
        ),
        "gone"
    );
    assert_eq!(stored(store, &v1.id).await, None);
}

/// N invocations race to advance the same command from the same version:
/// exactly one wins each round, and the stored command is the winner's.
async fn concurrent_writers_advance_a_command_one_at_a_time<S: Store>(store: &S) {
    const WRITERS: u64 = 6;
    const ROUNDS: u64 = 4;
    let v1 = command("default-ccccc", 0);
    store.put_command(None, &v1).await.expect("create");
    for round in 0..ROUNDS {
        let current = stored(store, &v1.id).await.expect("stored");
        assert_eq!(current.version, round + 1);
        let attempts = (0..WRITERS).map(|writer| {
            let current = current.clone();
            async move {
                let mut next = current.next(at(10 * (round as i64 + 1)));
                next.evictions_blocked = writer;
                store
                    .put_command(Some(&current), &next)
                    .await
                    .map(|()| writer)
            }
        });
        let results = join_all(attempts).await;
        let winners: Vec<u64> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert!(
            results.iter().all(|r| r.is_ok() || is_conflict(r)),
            "losers see Conflict: {results:?}"
        );
        let after = stored(store, &v1.id).await.expect("stored");
        assert_eq!(
            (after.version, after.evictions_blocked),
            (round + 2, winners[0]),
            "the winner's write"
        );
    }
}

async fn commands_are_deleted_at_their_version<S: Store>(store: &S) {
    let v1 = command("default-ddddd", 0);
    store.put_command(None, &v1).await.expect("create");
    let v2 = v1.next(at(1));
    store.put_command(Some(&v1), &v2).await.expect("advance");

    // Deleting with the version another writer already replaced is refused.
    assert!(
        is_conflict_on(
            &store.delete_command(&v1).await,
            &format!("command#{}", v1.id)
        ),
        "stale delete"
    );
    assert_eq!(stored(store, &v1.id).await, Some(v2.clone()));

    store.delete_command(&v2).await.expect("delete");
    assert_eq!(stored(store, &v1.id).await, None);
    // Already gone: not an error (the release step may run twice).
    store.delete_command(&v2).await.expect("delete again");
    store
        .delete_command(&command("default-never", 0))
        .await
        .expect("delete a command never written");

    // Once deleted, the node may get a new command.
    store
        .put_command(None, &command("default-ddddd", 9))
        .await
        .expect("a new command after the old one");
}

async fn commands_are_listed_oldest_first<S: Store>(store: &S) {
    assert_eq!(store.commands().await.expect("list"), vec![], "none yet");
    // Created out of order; ties on created_at are broken by id.
    for (id, created) in [
        ("default-zzzzz", 30),
        ("default-mmmmm", 10),
        ("default-bbbbb", 10),
        ("default-aaaaa", 20),
    ] {
        store
            .put_command(None, &command(id, created))
            .await
            .expect("create");
    }
    let order: Vec<String> = store
        .commands()
        .await
        .expect("list")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        order,
        [
            "default-bbbbb",
            "default-mmmmm",
            "default-aaaaa",
            "default-zzzzz"
        ]
    );
    // Other items in the same table are not commands.
    store
        .put_batch(None, &Batch::default())
        .await
        .expect("batch");
    store
        .acquire_lease(
            &Lease {
                name: "provisioner".into(),
                holder: "a".into(),
                expires_at: at(60),
            },
            at(0),
        )
        .await
        .expect("lease");
    assert_eq!(store.commands().await.expect("list").len(), 4);
}

async fn command_writes_must_move_one_version<S: Store>(store: &S) {
    let v1 = command("default-eeeee", 0);
    let mut born_late = v1.clone();
    born_late.version = 2;
    assert!(
        matches!(
            store.put_command(None, &born_late).await,
            Err(StoreError::Invalid { .. })
        ),
        "created at version 2"
    );
    store.put_command(None, &v1).await.expect("create");
    let mut skip = v1.next(at(1));
    skip.version += 1;
    assert!(
        matches!(
            store.put_command(Some(&v1), &skip).await,
            Err(StoreError::Invalid { .. })
        ),
        "skipped a version"
    );
    let same = v1.clone();
    assert!(
        matches!(
            store.put_command(Some(&v1), &same).await,
            Err(StoreError::Invalid { .. })
        ),
        "same version"
    );
    let mut other = v1.next(at(1));
    other.id = "default-other".into();
    assert!(
        matches!(
            store.put_command(Some(&v1), &other).await,
            Err(StoreError::Invalid { .. })
        ),
        "another id"
    );
    assert_eq!(
        store.commands().await.expect("list"),
        vec![v1],
        "nothing written"
    );
}

// ------------------------------------------------------------ claims

fn claim(id: &str, pool: &str, cpu_millis: i64) -> Claim {
    nodewright_tests::claim_record(
        id,
        pool,
        at(0),
        [("cpu".to_owned(), cpu_millis), ("nodes".to_owned(), 1)].into(),
    )
}

fn limits(pairs: &[(&str, i64)]) -> Limits {
    Limits {
        resources: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

async fn usage_of<S: Store>(store: &S, pool: &str, resource: &str) -> i64 {
    let usage = store.pool_usage().await.expect("usage");
    usage
        .get(pool)
        .and_then(|u| u.get(resource))
        .copied()
        .unwrap_or(0)
}

async fn claims_are_created_once_within_limits<S: Store>(store: &S) {
    let lim = limits(&[("cpu", 10_000), ("nodes", 2)]);
    let a = claim("default-aaaaa", "default", 6000);
    store.create_claim(&a, &lim).await.expect("create");
    assert!(
        is_conflict_on(&store.create_claim(&a, &lim).await, "claim#default-aaaaa"),
        "exists"
    );
    assert_eq!(
        (
            usage_of(store, "default", "cpu").await,
            usage_of(store, "default", "nodes").await
        ),
        (6000, 1)
    );

    let b = claim("default-bbbbb", "default", 5000);
    assert_eq!(
        store.create_claim(&b, &lim).await,
        Err(StoreError::LimitExceeded {
            pool: "default".into(),
            resource: "cpu".into()
        })
    );
    assert_eq!(
        store.claims().await.expect("claims"),
        vec![a.clone()],
        "the refused claim is not written"
    );
    assert_eq!(
        usage_of(store, "default", "cpu").await,
        6000,
        "nor reserved"
    );

    // Another pool's usage is its own.
    store
        .create_claim(&claim("other-ccccc", "other", 9000), &lim)
        .await
        .expect("other pool");
    assert_eq!(usage_of(store, "other", "cpu").await, 9000);

    // Deleting releases the reservation; again is fine.
    store.delete_claim(&a).await.expect("delete");
    store.delete_claim(&a).await.expect("delete again");
    assert_eq!(usage_of(store, "default", "cpu").await, 0);
    store.create_claim(&b, &lim).await.expect("fits now");

    // Which limit is named: here the node count.
    let c = claim("default-ccccc", "default", 0);
    let d = claim("default-ddddd", "default", 0);
    store.create_claim(&c, &lim).await.expect("second node");
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
        "the refused claim is not written"
    );

    // Every claim of a pool gone: the pool has no usage left (DynamoDB
    // drops the pool's counters, the in-memory store keeps them at zero;
    // both read as nothing reserved).
    store.delete_claim(&b).await.expect("delete");
    store.delete_claim(&c).await.expect("delete");
    let usage = store.pool_usage().await.expect("usage");
    assert!(
        usage
            .get("default")
            .is_none_or(|u| u.values().all(|v| *v == 0)),
        "all released: {usage:?}"
    );
}

async fn claim_updates_are_conditional_and_move_usage<S: Store>(store: &S) {
    let lim = limits(&[("cpu", 10_000)]);
    let a = claim("default-aaaaa", "default", 4000);
    store.create_claim(&a, &lim).await.expect("create");
    let mut a2 = a.next();
    a2.reservation.insert("cpu".into(), 2000);
    store.update_claim(&a, &a2, &lim).await.expect("shrink");
    assert!(
        is_conflict_on(
            &store.update_claim(&a, &a2, &lim).await,
            "claim#default-aaaaa"
        ),
        "stale previous"
    );
    assert_eq!(usage_of(store, "default", "cpu").await, 2000);

    let mut a3 = a2.next();
    a3.reservation.insert("cpu".into(), 12_000);
    assert_eq!(
        store.update_claim(&a2, &a3, &lim).await,
        Err(StoreError::LimitExceeded {
            pool: "default".into(),
            resource: "cpu".into()
        })
    );
    assert_eq!(
        store.claims().await.expect("claims")[0].version,
        2,
        "refused growth changes nothing"
    );
    assert_eq!(usage_of(store, "default", "cpu").await, 2000);

    // Delete releases what is stored (a2's 2000), whatever the caller holds.
    store.delete_claim(&a).await.expect("delete");
    assert_eq!(usage_of(store, "default", "cpu").await, 0);
    assert!(
        is_conflict_on(
            &store.update_claim(&a2, &a2.next(), &lim).await,
            "claim#default-aaaaa"
        ),
        "gone"
    );
}

async fn claim_updates_must_move_one_version<S: Store>(store: &S) {
    let lim = limits(&[]);
    let a = claim("default-aaaaa", "default", 1000);
    store.create_claim(&a, &lim).await.expect("create");
    let mut skip = a.next();
    skip.version += 1;
    assert!(
        matches!(
            store.update_claim(&a, &skip, &lim).await,
            Err(StoreError::Invalid { .. })
        ),
        "skipped a version"
    );
    let mut moved = a.next();
    moved.pool = "other".into();
    assert!(
        matches!(
            store.update_claim(&a, &moved, &lim).await,
            Err(StoreError::Invalid { .. })
        ),
        "another pool"
    );
    assert_eq!(store.claims().await.expect("claims"), vec![a]);
}

/// Fifty invocations reserve at once against a limit that fits twenty.
async fn concurrent_claims_never_pass_a_limit<S: Store>(store: &S) {
    let lim = limits(&[("cpu", 20_000)]);
    let claims: Vec<Claim> = (0..50)
        .map(|i| claim(&format!("burst-{i:05}"), "burst", 1000))
        .collect();
    let results = join_all(claims.iter().map(|c| store.create_claim(c, &lim))).await;
    let created = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(created, 20, "{results:?}");
    assert!(
        results.iter().all(|r| match r {
            Ok(()) => true,
            Err(StoreError::LimitExceeded { pool, resource }) =>
                (pool.as_str(), resource.as_str()) == ("burst", "cpu"),
            Err(_) => false,
        }),
        "the rest are refused for the pool's cpu limit: {results:?}"
    );
    assert_eq!(usage_of(store, "burst", "cpu").await, 20_000);
    assert_eq!(store.claims().await.expect("claims").len(), 20);
}

// ------------------------------------------------------------ batch, leases, offerings

async fn the_batch_is_conditional_on_its_version<S: Store>(store: &S) {
    assert_eq!(store.batch().await.expect("batch"), None);
    // With an open window, so the record is read back whole.
    let b1 = Batch {
        window: Some(Window {
            opened_at: at(0),
            last_seen_at: at(0),
            seen: [nodewright::model::batch::uid_hash("uid-1")].into(),
        }),
        version: 1,
        ..Batch::default()
    };
    store.put_batch(None, &b1).await.expect("create");
    assert!(
        is_conflict_on(&store.put_batch(None, &b1).await, "batch#provisioner"),
        "create twice"
    );
    let stored1 = store.batch().await.expect("batch").expect("stored");
    assert_eq!(stored1, b1, "read back whole");
    let mut b2 = stored1.clone();
    b2.version += 1;
    b2.window
        .as_mut()
        .map(|w| w.seen.insert(nodewright::model::batch::uid_hash("uid-2")));
    store.put_batch(Some(&stored1), &b2).await.expect("advance");
    assert!(
        is_conflict_on(
            &store.put_batch(Some(&stored1), &b2).await,
            "batch#provisioner"
        ),
        "stale"
    );
    assert!(
        is_conflict_on(&store.delete_batch(&stored1).await, "batch#provisioner"),
        "stale delete"
    );
    assert_eq!(store.batch().await.expect("batch"), Some(b2.clone()));
    store.delete_batch(&b2).await.expect("delete");
    store.delete_batch(&b2).await.expect("delete again");
    assert_eq!(store.batch().await.expect("batch"), None);
}

async fn leases_have_one_holder<S: Store>(store: &S) {
    let lease = |holder: &str, expires: i64| Lease {
        name: "provisioner".into(),
        holder: holder.into(),
        expires_at: at(expires),
    };
    assert!(
        store
            .acquire_lease(&lease("a", 60), at(0))
            .await
            .expect("acquire"),
        "free"
    );
    assert!(
        !store
            .acquire_lease(&lease("b", 70), at(10))
            .await
            .expect("acquire"),
        "held by a"
    );
    assert!(
        store
            .acquire_lease(&lease("a", 90), at(30))
            .await
            .expect("renew"),
        "a renews"
    );
    assert!(
        !store
            .acquire_lease(&lease("b", 100), at(60))
            .await
            .expect("acquire"),
        "renewed until 90"
    );
    assert!(
        store
            .acquire_lease(&lease("b", 200), at(91))
            .await
            .expect("acquire"),
        "expired: b takes it"
    );
    store
        .release_lease("provisioner", "a")
        .await
        .expect("a releases nothing of its own");
    assert!(
        !store
            .acquire_lease(&lease("c", 300), at(100))
            .await
            .expect("acquire"),
        "still b's"
    );
    store
        .release_lease("provisioner", "b")
        .await
        .expect("release");
    assert!(
        store
            .acquire_lease(&lease("c", 300), at(100))
            .await
            .expect("acquire"),
        "free again"
    );
    store
        .release_lease("nothing", "a")
        .await
        .expect("releasing an unknown lease is no error");

    // Racing for a free lease: exactly one wins.
    let other = |holder: String| Lease {
        name: "interruption".into(),
        holder,
        expires_at: at(500),
    };
    let contenders: Vec<Lease> = (0..5).map(|i| other(format!("h{i}"))).collect();
    let results = join_all(contenders.iter().map(|l| store.acquire_lease(l, at(400)))).await;
    assert_eq!(
        results.iter().filter(|r| matches!(r, Ok(true))).count(),
        1,
        "{results:?}"
    );
}

async fn unavailable_offerings_expire<S: Store>(store: &S) {
    let o = |t: &str| OfferingKey {
        capacity_type: "spot".into(),
        instance_type: t.into(),
        zone: "us-east-1a".into(),
    };
    store
        .mark_unavailable(&o("m5.large"), at(180))
        .await
        .expect("mark");
    store
        .mark_unavailable(&o("c5.large"), at(60))
        .await
        .expect("mark");
    // A shorter mark never shortens a longer one.
    store
        .mark_unavailable(&o("m5.large"), at(100))
        .await
        .expect("mark again");
    assert_eq!(
        store.unavailable_offerings(at(0)).await.expect("list"),
        vec![o("c5.large"), o("m5.large")],
        "in key order"
    );
    assert_eq!(
        store.unavailable_offerings(at(60)).await.expect("list"),
        vec![o("m5.large")]
    );
    assert_eq!(
        store.unavailable_offerings(at(179)).await.expect("list"),
        vec![o("m5.large")]
    );
    assert_eq!(
        store.unavailable_offerings(at(180)).await.expect("list"),
        vec![],
        "until is exclusive, checked in code (DynamoDB's TTL never ran)"
    );
}

// ------------------------------------------------------------ configuration

/// Configuration items are written at the next version of their kind and
/// name (a lost update is refused), listed together and deleted idempotently.
async fn config_items_are_versioned_per_kind_and_name<S: Store>(store: &S) {
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
        is_conflict_on(&store.put_config_item(&v1).await, "nodepool#default"),
        "version 1 twice"
    );
    let v2 = item("default", 2, serde_json::json!({"limits": {"cpu": 20}}));
    store.put_config_item(&v2).await.expect("v1 → v2");
    let stale = item("default", 2, serde_json::json!({"limits": {"cpu": 30}}));
    assert!(
        is_conflict_on(&store.put_config_item(&stale).await, "nodepool#default"),
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

// ------------------------------------------------------------ state read

/// `Store::state` answers what the four listings answer, as of one read.
async fn one_state_read_answers_as_the_listings<S: Store>(store: &S) {
    let lim = limits(&[("cpu", 100_000)]);
    store
        .create_claim(&claim("default-aaaaa", "default", 2000), &lim)
        .await
        .expect("create");
    store
        .create_claim(&claim("other-bbbbb", "other", 3000), &lim)
        .await
        .expect("create");
    store
        .put_command(None, &command("default-aaaaa", 10))
        .await
        .expect("command");
    let gone = OfferingKey {
        capacity_type: "spot".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
    };
    store.mark_unavailable(&gone, at(60)).await.expect("mark");
    for now in [at(0), at(120)] {
        let state = store.state(now).await.expect("state");
        assert_eq!(state.claims, store.claims().await.expect("claims"));
        assert_eq!(state.usage, store.pool_usage().await.expect("usage"));
        assert_eq!(state.commands, store.commands().await.expect("commands"));
        assert_eq!(
            state.unavailable,
            store.unavailable_offerings(now).await.expect("unavailable")
        );
        assert_eq!(state.claims.len(), 2);
        assert_eq!(state.commands.len(), 1);
        assert_eq!(state.usage["other"]["cpu"], 3000);
        assert_eq!(state.unavailable.len(), usize::from(now == at(0)));
    }
}

// ------------------------------------------------------------ quarantine

fn pool_item(name: &str, version: u64) -> ConfigItem {
    ConfigItem {
        kind: ConfigKind::NodePool,
        name: name.into(),
        spec: serde_json::json!({"template": {"spec": {"nodeClassRef": {"name": "default"}}}}),
        annotations: Default::default(),
        version,
        updated_at: at(0),
    }
}

/// A claim, command or configuration item whose body does not read is set
/// aside, never fatal: the others still read, the bad one is named (state
/// items by `unreadable_state`, configuration items as unreadable items
/// beside the valid ones), its key is not written over by a create, and it
/// reads again once fixed or deleted by hand.
async fn unreadable_items_are_quarantined<S: ByHand>(store: &S) {
    let lim = limits(&[]);
    let good = claim("default-aaaaa", "default", 1000);
    store.create_claim(&good, &lim).await.expect("create");
    let cmd = command("default-aaaaa", 0);
    store.put_command(None, &cmd).await.expect("command");
    store
        .put_config_item(&pool_item("default", 1))
        .await
        .expect("pool");

    // Not JSON; JSON of another shape.
    store
        .put_by_hand("claim#default-bbbbb", "{not json", 1)
        .await;
    store
        .put_by_hand(
            "command#default-ccccc",
            r#"{"id":"default-ccccc","step":42}"#,
            1,
        )
        .await;
    store
        .put_by_hand("nodepool#broken", r#"{"kind":"nodepool"}"#, 3)
        .await;

    assert_eq!(
        store.claims().await.expect("claims still read"),
        vec![good.clone()]
    );
    assert_eq!(
        store.commands().await.expect("commands still read"),
        vec![cmd.clone()]
    );
    let unreadable = store.unreadable_state().await.expect("unreadable");
    let keys: Vec<&str> = unreadable.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(keys, ["claim#default-bbbbb", "command#default-ccccc"]);
    for u in &unreadable {
        assert!(
            u.reason
                .starts_with(&format!("item {}: unreadable body: ", u.key)),
            "{u}"
        );
    }
    assert_eq!(
        usage_of(store, "default", "cpu").await,
        1000,
        "usage is the stored counter's"
    );

    let items = store
        .config_items()
        .await
        .expect("configuration still reads");
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items.contains(&pool_item("default", 1)), "{items:?}");
    let broken = items
        .iter()
        .find(|i| i.name == "broken")
        .expect("the unreadable item is listed");
    assert_eq!((broken.kind, broken.version), (ConfigKind::NodePool, 3));
    let reason = broken.unreadable_reason().expect("marked unreadable");
    assert!(
        reason.starts_with("item nodepool#broken: unreadable body: "),
        "{reason}"
    );

    // A create never writes over an item it cannot read.
    assert!(
        is_conflict_on(
            &store
                .create_claim(&claim("default-bbbbb", "default", 1), &lim)
                .await,
            "claim#default-bbbbb"
        ),
        "claim key taken"
    );
    assert!(
        is_conflict_on(
            &store.put_command(None, &command("default-ccccc", 1)).await,
            "command#default-ccccc"
        ),
        "command key taken"
    );
    assert!(
        is_conflict_on(
            &store.put_config_item(&pool_item("broken", 1)).await,
            "nodepool#broken"
        ),
        "config key taken"
    );

    // Fixed by hand, the claim reads again; deleted, the command is gone.
    let b = claim("default-bbbbb", "default", 500);
    store
        .put_by_hand(
            "claim#default-bbbbb",
            &serde_json::to_string(&b).expect("json"),
            1,
        )
        .await;
    store.delete_by_hand("command#default-ccccc").await;
    assert_eq!(store.claims().await.expect("claims"), vec![good, b]);
    assert_eq!(store.commands().await.expect("commands"), vec![cmd]);
    assert_eq!(store.unreadable_state().await.expect("unreadable"), vec![]);

    // Applying the configuration item again replaces it at the next version.
    let fixed = pool_item("broken", 4);
    store
        .write_config(&[ConfigWrite::Put(fixed.clone())])
        .await
        .expect("written over at its version");
    let items = store.config_items().await.expect("configuration");
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items.contains(&fixed), "{items:?}");
    assert!(items.iter().all(|i| i.unreadable_reason().is_none()));
}
