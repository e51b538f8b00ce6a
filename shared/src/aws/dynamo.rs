//! [`DynamoStore`]: the handlers' [`Store`] over two DynamoDB tables.
//!
//! Here: the adapter and its state view; `items` (keys, attributes,
//! bodies, usage updates), `calls` (tables, scans, transactions), `port`
//! (the `Store` operations).
//!
//! Both tables have a single string partition key `pk` and no sort key.
//! Every item keeps the whole record as a JSON string in `body`, next to
//! the attributes conditions and expiry need (`version`, `holder`,
//! `until_ms`, `expires_at`, …); readers trust `body` only.
//!
//! | table  | `pk`                           | other attributes |
//! |--------|--------------------------------|------------------|
//! | config | `nodepool#<name>`, `nodeclass#<name>`, `settings#<name>` | `kind`, `name`, `version`, `updated_at`, `body` (the [`ConfigItem`]) |
//! | config | `config#version`               | `version`: moved by every configuration write, in its transaction |
//! | state  | `claim#<id>`                   | `kind`, `pool`, `version`, `body` (the [`Claim`]) |
//! | state  | `usage#<pool>`                 | `kind`, `pool`, `r:<resource>` numbers (sum of the pool's claims' reservations) |
//! | state  | `batch#provisioner`            | `kind`, `version`, `body` (the [`Batch`]) |
//! | state  | `lease#<name>`                 | `kind`, `holder`, `expires_ms`, `expires_at`, `body` (the [`Lease`]) |
//! | state  | `unavailable#<ct>:<type>:<zone>` | `kind`, `until_ms`, `expires_at`, `body` (the [`OfferingKey`]) |
//! | state  | `command#<id>`                 | `kind`, `version`, `step`, `body` (the [`Command`]) |
//! | state  | `state#version`                | `version`: moved by every write of a claim, usage, command or unavailable mark, in its transaction |
//!
//! `expires_at` (epoch seconds) is the table's TTL attribute, so DynamoDB
//! deletes expired leases and unavailable marks eventually; since TTL
//! deletion is lazy (and emulators never do it), expiry is always checked
//! in code against `expires_ms`/`until_ms` too.
//!
//! **Limit accounting** is exact under concurrency: creating a claim is one
//! transaction that puts the claim (if absent) and `ADD`s its reservation to
//! `usage#<pool>` under the condition `attribute_not_exists(r) OR r <=
//! limit − reservation` for every limited resource the claim uses. Updates
//! move usage by the change in reservation in the same way; deletes
//! subtract the stored reservation. When the usage condition fails, the
//! transaction's cancellation reasons say which item failed and the old
//! usage item (returned with the failure) says which resource.
//!
//! **Reads are cheap when nothing moved.** A Scan is billed for every item
//! it reads, filtered or not, and the provisioner ticks every second: a
//! Scan per tick of a 100-node state table costs more than the rest of
//! nodewright together. So claims, usage, commands and unavailable marks
//! are read together by one Scan, kept with the `state#version` it was
//! taken at, and answered again from it while a consistent GetItem of
//! `state#version` (one read unit) still returns that number. Every write
//! of those items moves the marker in the same transaction, so a store
//! never answers from a view older than the last committed write. Leases
//! and the batch record are read directly (one GetItem each) and do not
//! move the marker: they change every tick. A view older than five minutes
//! is read again anyway, so a write that bypassed the marker (an older
//! release during a rolling update) is seen within that bound.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, Delete, KeySchemaElement, KeyType, Put,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TimeToLiveSpecification,
    TransactWriteItem, Update,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use super::ApiError;
use crate::config::{ConfigItem, ConfigKind, ConfigWrite, Limits, MAX_CONFIG_WRITES};
use crate::model::claim::{Claim, exceeded_limit};
use crate::model::{Batch, Command, Lease, OfferingKey, Timestamp, Usage};
use crate::ports::{StateRead, Store, StoreError, Unreadable};

mod calls;
mod items;
mod port;

use items::*;

/// The names of the two tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoTables {
    pub config: String,
    pub state: String,
}

impl DynamoTables {
    /// `<prefix>-config` and `<prefix>-state`.
    pub fn with_prefix(prefix: &str) -> DynamoTables {
        DynamoTables {
            config: format!("{prefix}-config"),
            state: format!("{prefix}-state"),
        }
    }
}

/// DynamoDB as the handlers' [`Store`].
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: aws_sdk_dynamodb::Client,
    tables: DynamoTables,
    /// Items per Scan page (`None`: DynamoDB's 1 MB pages).
    page_size: Option<i32>,
    /// The last Scan of the state table, with the marker it is valid for
    /// (shared by clones: they read the same tables).
    view: Arc<Mutex<Option<Arc<StateView>>>>,
    /// Requests issued, for tests and the invocations' log.
    counters: Arc<Counters>,
}

/// DynamoDB requests a store and its clones issued, by kind: what the
/// functions' invocation log reports, and what the running-cost model
/// counts (a GetItem of a small item is one read unit; a Scan page is
/// billed for every item it reads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Requests {
    pub get_item: u64,
    pub scan_page: u64,
    /// Whole Scans of the state table (each one page or more).
    pub state_scans: u64,
    pub put_item: u64,
    pub delete_item: u64,
    pub transact_write: u64,
}

impl std::ops::Sub for Requests {
    type Output = Requests;
    fn sub(self, o: Requests) -> Requests {
        Requests {
            get_item: self.get_item.saturating_sub(o.get_item),
            scan_page: self.scan_page.saturating_sub(o.scan_page),
            state_scans: self.state_scans.saturating_sub(o.state_scans),
            put_item: self.put_item.saturating_sub(o.put_item),
            delete_item: self.delete_item.saturating_sub(o.delete_item),
            transact_write: self.transact_write.saturating_sub(o.transact_write),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    get_item: AtomicU64,
    scan_page: AtomicU64,
    state_scans: AtomicU64,
    put_item: AtomicU64,
    delete_item: AtomicU64,
    transact_write: AtomicU64,
}

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What one Scan of the state table read, as of `state#version` = `version`.
#[derive(Debug)]
struct StateView {
    version: u64,
    read_at: std::time::Instant,
    claims: Vec<Claim>,
    usage: BTreeMap<String, Usage>,
    commands: Vec<Command>,
    /// With their `until_ms`: expiry is checked at each read.
    unavailable: Vec<(OfferingKey, i64)>,
    /// Claims and commands whose body does not read (quarantined).
    unreadable: Vec<Unreadable>,
}

type Item = HashMap<String, AttributeValue>;

impl StateView {
    /// Offerings still marked unavailable at `now`, sorted.
    fn unavailable_at(&self, now: Timestamp) -> Vec<OfferingKey> {
        let now_ms = now.as_millisecond();
        let mut out: Vec<OfferingKey> = self
            .unavailable
            .iter()
            .filter(|(_, until)| *until > now_ms)
            .map(|(o, _)| o.clone())
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_update_conditions_only_limited_growth() {
        let mut limits = Limits::default();
        limits.resources.insert("cpu".into(), 20_000);
        let delta: Usage = [
            ("cpu".to_owned(), 1000),
            ("memory".to_owned(), 5),
            ("nodes".to_owned(), 1),
        ]
        .into();
        let u = usage_update("t", "default", &delta, &limits)
            .expect("builds")
            .expect("non-empty");
        assert_eq!(
            u.condition_expression(),
            Some("(attribute_not_exists(#r0) OR #r0 <= :m0)")
        );
        assert_eq!(
            u.expression_attribute_values().and_then(|v| v.get(":m0")),
            Some(&n(19_000))
        );
        assert_eq!(
            u.expression_attribute_names()
                .and_then(|v| v.get("#r1"))
                .map(String::as_str),
            Some("r:memory")
        );
        let shrink: Usage = [("cpu".to_owned(), -1000)].into();
        let u = usage_update("t", "default", &shrink, &limits)
            .expect("builds")
            .expect("non-empty");
        assert_eq!(
            u.condition_expression(),
            None,
            "shrinking is always allowed"
        );
        assert!(
            usage_update("t", "default", &Usage::new(), &limits)
                .expect("builds")
                .is_none()
        );
    }

    #[test]
    fn keys_and_ttl() {
        let o = OfferingKey {
            capacity_type: "spot".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
        };
        assert_eq!(unavailable_key(&o), "unavailable#spot:m5.large:us-east-1a");
        assert_eq!(
            config_key(ConfigKind::NodePool, "default"),
            "nodepool#default"
        );
        let t = Timestamp::from_millisecond(1_500).expect("valid");
        assert_eq!(ttl_seconds(t), 2);
    }
}
