//! [`DynamoStore`]: the handlers' [`Store`] over two DynamoDB tables.
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

const PK: &str = "pk";
const BODY: &str = "body";
const VERSION: &str = "version";
const TTL_ATTRIBUTE: &str = "expires_at";
const BATCH_KEY: &str = "batch#provisioner";
/// The config table's counter every configuration write moves.
const CONFIG_VERSION_KEY: &str = "config#version";
/// The state table's counter every write of a claim, usage, command or
/// unavailable mark moves (see the module's doc).
const STATE_VERSION_KEY: &str = "state#version";
/// A state view is read again after this long even when the marker did not
/// move: a write that bypassed it (an older release during a rolling
/// update, an operator's hand edit) is seen within this bound. One Scan
/// per container per five minutes costs cents a month.
const MAX_VIEW_AGE: Duration = Duration::from_secs(300);
/// Prefix of the resource attributes of a `usage#<pool>` item.
const RESOURCE_PREFIX: &str = "r:";
/// Transactions that lose to a concurrent one are retried this often.
const TRANSACTION_ATTEMPTS: u32 = 8;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn kind_name(kind: ConfigKind) -> &'static str {
    kind.as_str()
}

fn config_key(kind: ConfigKind, name: &str) -> String {
    format!("{}#{name}", kind_name(kind))
}

fn claim_key(id: &str) -> String {
    format!("claim#{id}")
}

fn usage_key(pool: &str) -> String {
    format!("usage#{pool}")
}

const COMMAND_PREFIX: &str = "command#";

fn command_key(id: &str) -> String {
    format!("{COMMAND_PREFIX}{id}")
}

fn lease_key(name: &str) -> String {
    format!("lease#{name}")
}

fn unavailable_key(o: &OfferingKey) -> String {
    format!("unavailable#{o}")
}

/// Epoch seconds, rounded up (DynamoDB TTL granularity).
fn ttl_seconds(t: Timestamp) -> i64 {
    (t.as_millisecond() + 999).div_euclid(1000)
}

fn body_of<T: DeserializeOwned>(item: &Item) -> Result<T, StoreError> {
    let key = item
        .get(PK)
        .and_then(|v| v.as_s().ok())
        .map_or("?", String::as_str);
    let body = item
        .get(BODY)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| StoreError::Invalid(format!("item {key}: no body attribute")))?;
    serde_json::from_str(body)
        .map_err(|e| StoreError::Invalid(format!("item {key}: unreadable body: {e}")))
}

/// A quarantined state item: its key and why.
fn unreadable_state_item(key: &str, e: StoreError) -> Unreadable {
    Unreadable {
        key: key.to_owned(),
        reason: e.to_string(),
    }
}

/// A configuration item whose body does not read, as [`ConfigItem::unreadable`]
/// named from its key (`<kind>#<name>`); `None` for a key of no kind.
fn unreadable_config(item: &Item, e: &StoreError) -> Option<ConfigItem> {
    let key = item.get(PK).and_then(|v| v.as_s().ok())?;
    let (kind, name) = key.split_once('#')?;
    let kind = [
        ConfigKind::NodePool,
        ConfigKind::NodeClass,
        ConfigKind::Settings,
    ]
    .into_iter()
    .find(|k| kind_name(*k) == kind)?;
    let version = number(item, VERSION).map_or(0, |v| u64::try_from(v).unwrap_or(0));
    Some(ConfigItem::unreadable(kind, name, version, e.to_string()))
}

fn json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Invalid(format!("cannot serialise: {e}")))
}

fn number(item: &Item, attr: &str) -> Option<i64> {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// `ADD version 1` on the counter item `key` of `table`, as a transaction item.
fn bump_counter(table: &str, key: &str) -> Result<TransactWriteItem, StoreError> {
    let update = Update::builder()
        .table_name(table)
        .key(PK, s(key))
        .update_expression("ADD #v :one")
        .expression_attribute_names("#v", VERSION)
        .expression_attribute_values(":one", n(1))
        .build()
        .map_err(build_err)?;
    Ok(TransactWriteItem::builder().update(update).build())
}

fn poisoned() -> StoreError {
    StoreError::Invalid("the state view's lock was poisoned by a panic".into())
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Invalid(format!("building a DynamoDB request: {e}"))
}

fn usage_from_item(item: &Item) -> Usage {
    item.iter()
        .filter_map(|(k, v)| {
            let r = k.strip_prefix(RESOURCE_PREFIX)?;
            let amount: i64 = v.as_n().ok()?.parse().ok()?;
            (amount != 0).then(|| (r.to_owned(), amount))
        })
        .collect()
}

/// An update of `usage#<pool>` adding `delta`, conditional on every grown
/// limited resource staying within its limit. `None` when there is nothing to add.
fn usage_update(
    table: &str,
    pool: &str,
    delta: &Usage,
    limits: &Limits,
) -> Result<Option<Update>, StoreError> {
    let delta: Vec<(&String, &i64)> = delta.iter().filter(|(_, v)| **v != 0).collect();
    if delta.is_empty() {
        return Ok(None);
    }
    let mut names: HashMap<String, String> = HashMap::new();
    let mut values: HashMap<String, AttributeValue> = HashMap::new();
    names.insert("#kind".into(), "kind".into());
    names.insert("#pool".into(), "pool".into());
    values.insert(":kind".into(), s("usage"));
    values.insert(":pool".into(), s(pool));
    let mut adds = Vec::new();
    let mut conditions = Vec::new();
    for (i, (resource, amount)) in delta.iter().enumerate() {
        names.insert(format!("#r{i}"), format!("{RESOURCE_PREFIX}{resource}"));
        values.insert(format!(":v{i}"), n(amount));
        adds.push(format!("#r{i} :v{i}"));
        if **amount > 0
            && let Some(limit) = limits.resources.get(*resource)
        {
            values.insert(format!(":m{i}"), n(limit - **amount));
            conditions.push(format!("(attribute_not_exists(#r{i}) OR #r{i} <= :m{i})"));
        }
    }
    let mut update = Update::builder()
        .table_name(table)
        .key(PK, s(usage_key(pool)))
        .update_expression(format!(
            "SET #kind = :kind, #pool = :pool ADD {}",
            adds.join(", ")
        ))
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    if !conditions.is_empty() {
        update = update.condition_expression(conditions.join(" AND "));
    }
    update.build().map(Some).map_err(build_err)
}

/// What cancelled a transaction, per item.
#[derive(Debug)]
enum TxOutcome {
    Done,
    /// Item `index` failed its condition; the old item if DynamoDB returned it.
    ConditionFailed {
        index: usize,
        old: Option<Item>,
    },
    /// Lost to a concurrent transaction or throttled: try again.
    Retry(String),
}

fn claim_item(claim: &Claim) -> Result<Item, StoreError> {
    Ok([
        (PK.to_owned(), s(claim_key(&claim.id))),
        ("kind".to_owned(), s("claim")),
        ("pool".to_owned(), s(&claim.pool)),
        (VERSION.to_owned(), n(claim.version)),
        (BODY.to_owned(), s(json(claim)?)),
    ]
    .into())
}

fn delta_of(previous: &Usage, next: &Usage) -> Usage {
    let mut d = next.clone();
    crate::model::claim::sub_usage(&mut d, previous);
    d
}

fn negated(u: &Usage) -> Usage {
    u.iter().map(|(k, v)| (k.clone(), -v)).collect()
}

impl DynamoStore {
    pub fn new(config: &aws_config::SdkConfig, tables: DynamoTables) -> DynamoStore {
        DynamoStore {
            client: aws_sdk_dynamodb::Client::new(config),
            tables,
            page_size: None,
            view: Arc::default(),
            counters: Arc::default(),
        }
    }

    /// The requests this store (and its clones) issued so far.
    pub fn requests(&self) -> Requests {
        let c = &*self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Requests {
            get_item: get(&c.get_item),
            scan_page: get(&c.scan_page),
            state_scans: get(&c.state_scans),
            put_item: get(&c.put_item),
            delete_item: get(&c.delete_item),
            transact_write: get(&c.transact_write),
        }
    }

    /// Smaller Scan pages (tests use it to exercise pagination).
    pub fn with_page_size(mut self, items: i32) -> DynamoStore {
        self.page_size = Some(items.max(1));
        self
    }

    pub fn tables(&self) -> &DynamoTables {
        &self.tables
    }

    /// Creates the two tables (on-demand billing, TTL on `expires_at` for
    /// the state table) unless they exist. For tests and first set-up; the
    /// deploy module creates them in production.
    pub async fn ensure_tables(&self) -> Result<(), StoreError> {
        for (table, ttl) in [(&self.tables.config, false), (&self.tables.state, true)] {
            let created = self
                .client
                .create_table()
                .table_name(table)
                .billing_mode(BillingMode::PayPerRequest)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(PK)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .map_err(build_err)?,
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(PK)
                        .key_type(KeyType::Hash)
                        .build()
                        .map_err(build_err)?,
                )
                .send()
                .await;
            match created {
                Ok(_) => debug!(table, "created table"),
                Err(e) => {
                    let e = ApiError::from_sdk("CreateTable", e);
                    if !e.is("ResourceInUseException") {
                        return Err(e.into());
                    }
                }
            }
            self.wait_active(table).await?;
            if ttl {
                let spec = TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name(TTL_ATTRIBUTE)
                    .build()
                    .map_err(build_err)?;
                if let Err(e) = self
                    .client
                    .update_time_to_live()
                    .table_name(table)
                    .time_to_live_specification(spec)
                    .send()
                    .await
                {
                    let e = ApiError::from_sdk("UpdateTimeToLive", e);
                    // Already enabled is fine.
                    if !e.message.contains("already enabled") && !e.is("ValidationException") {
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(())
    }

    async fn wait_active(&self, table: &str) -> Result<(), StoreError> {
        for _ in 0..120 {
            let out = self
                .client
                .describe_table()
                .table_name(table)
                .send()
                .await
                .map_err(|e| StoreError::from(ApiError::from_sdk("DescribeTable", e)))?;
            if out
                .table()
                .and_then(|t| t.table_status())
                .is_some_and(|s| s.as_str() == "ACTIVE")
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(StoreError::Transient(format!(
            "table {table} did not become active"
        )))
    }

    /// Every item of `table` whose key starts with `prefix` (all pages, consistent).
    async fn scan(&self, table: &str, prefix: Option<&str>) -> Result<Vec<Item>, StoreError> {
        let mut req = self
            .client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_limit(self.page_size);
        if let Some(p) = prefix {
            req = req
                .filter_expression("begins_with(#pk, :prefix)")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":prefix", s(p));
        }
        let mut pages = req.into_paginator().send();
        let mut items = Vec::new();
        while let Some(page) = pages.next().await {
            count(&self.counters.scan_page);
            let page = page.map_err(|e| StoreError::from(ApiError::from_sdk("Scan", e)))?;
            items.extend(page.items().iter().cloned());
        }
        Ok(items)
    }

    async fn get(&self, table: &str, key: &str) -> Result<Option<Item>, StoreError> {
        count(&self.counters.get_item);
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(PK, s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from(ApiError::from_sdk("GetItem", e)))?;
        Ok(out.item().cloned())
    }

    /// A conditional put; `Ok(false)` when the condition failed.
    async fn put_if(
        &self,
        table: &str,
        item: Item,
        condition: &str,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<bool, StoreError> {
        let mut req = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .condition_expression(condition);
        for (k, v) in names {
            req = req.expression_attribute_names(*k, *v);
        }
        for (k, v) in values {
            req = req.expression_attribute_values(k, v);
        }
        count(&self.counters.put_item);
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(ApiError::from_sdk("PutItem", e).into()),
        }
    }

    /// A conditional delete; `Ok(Err(old item))` when the condition failed.
    async fn delete_if(
        &self,
        table: &str,
        key: &str,
        condition: Option<&str>,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Result<(), Option<Item>>, StoreError> {
        let mut req = self
            .client
            .delete_item()
            .table_name(table)
            .key(PK, s(key))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some(c) = condition {
            req = req.condition_expression(c);
        }
        for (k, v) in names {
            req = req.expression_attribute_names(*k, *v);
        }
        for (k, v) in values {
            req = req.expression_attribute_values(k, v);
        }
        count(&self.counters.delete_item);
        match req.send().await {
            Ok(_) => Ok(Ok(())),
            Err(e) => match e.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(c)) => {
                    Ok(Err(c.item().cloned()))
                }
                _ => Err(ApiError::from_sdk("DeleteItem", e).into()),
            },
        }
    }

    async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<TxOutcome, StoreError> {
        count(&self.counters.transact_write);
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(TxOutcome::Done),
            Err(e) => {
                if let Some(TransactWriteItemsError::TransactionCanceledException(c)) =
                    e.as_service_error()
                {
                    let reasons = c.cancellation_reasons();
                    if let Some((index, r)) = reasons
                        .iter()
                        .enumerate()
                        .find(|(_, r)| r.code() == Some("ConditionalCheckFailed"))
                    {
                        return Ok(TxOutcome::ConditionFailed {
                            index,
                            old: r.item().cloned(),
                        });
                    }
                    let codes: Vec<&str> = reasons
                        .iter()
                        .filter_map(|r| r.code())
                        .filter(|c| *c != "None")
                        .collect();
                    return Ok(TxOutcome::Retry(format!(
                        "transaction cancelled: {}",
                        codes.join(", ")
                    )));
                }
                let e = ApiError::from_sdk("TransactWriteItems", e);
                if e.is("TransactionConflictException") || e.is("TransactionInProgressException") {
                    return Ok(TxOutcome::Retry(e.to_string()));
                }
                Err(e.into())
            }
        }
    }

    /// `ADD version 1` on `config#version`, in the same transaction as a configuration change.
    fn bump_config_version(&self) -> Result<TransactWriteItem, StoreError> {
        bump_counter(&self.tables.config, CONFIG_VERSION_KEY)
    }

    /// `ADD version 1` on `state#version`, in the same transaction as a
    /// write the state view holds.
    fn bump_state_version(&self) -> Result<TransactWriteItem, StoreError> {
        bump_counter(&self.tables.state, STATE_VERSION_KEY)
    }

    /// `write` and the marker's bump as one transaction, retried while it
    /// loses to a concurrent one; `Ok(Err(old))` when `write`'s condition failed.
    async fn write_with_marker(
        &self,
        write: TransactWriteItem,
        what: &str,
    ) -> Result<Result<(), Option<Item>>, StoreError> {
        let bump = self.bump_state_version()?;
        let mut last = String::new();
        for attempt in 0..TRANSACTION_ATTEMPTS {
            match self.transact(vec![write.clone(), bump.clone()]).await? {
                TxOutcome::Done => return Ok(Ok(())),
                TxOutcome::ConditionFailed { old, .. } => return Ok(Err(old)),
                TxOutcome::Retry(why) => last = why,
            }
            Self::backoff(attempt).await;
        }
        Err(StoreError::Transient(format!("{what}: {last}")))
    }

    /// The state view, read again only when `state#version` moved.
    async fn state_view(&self) -> Result<Arc<StateView>, StoreError> {
        let marker = self.get(&self.tables.state, STATE_VERSION_KEY).await?;
        let version = match marker
            .as_ref()
            .and_then(|i| i.get(VERSION))
            .and_then(|v| v.as_n().ok())
        {
            None => 0,
            Some(v) => v
                .parse::<u64>()
                .map_err(|e| StoreError::Invalid(format!("{STATE_VERSION_KEY}: version: {e}")))?,
        };
        let fresh =
            |v: &&Arc<StateView>| v.version == version && v.read_at.elapsed() < MAX_VIEW_AGE;
        if let Some(view) = self
            .view
            .lock()
            .map_err(|_| poisoned())?
            .as_ref()
            .filter(fresh)
        {
            return Ok(Arc::clone(view));
        }
        // Read after the marker: what the Scan sees is at least `version`,
        // and a write it half-sees moves the marker past it, so the next
        // read Scans again.
        let read_at = std::time::Instant::now();
        count(&self.counters.state_scans);
        let items = self.scan(&self.tables.state, None).await?;
        let mut view = StateView {
            version,
            read_at,
            claims: Vec::new(),
            usage: BTreeMap::new(),
            commands: Vec::new(),
            unavailable: Vec::new(),
            unreadable: Vec::new(),
        };
        let quarantine = |key: &str, e: StoreError| {
            warn!(item = %key, error = %e, "state item cannot be read; left out (garbage collection and terminations wait until it is fixed or removed)");
            unreadable_state_item(key, e)
        };
        let mut unreadable = Vec::new();
        for item in &items {
            let key = item
                .get(PK)
                .and_then(|v| v.as_s().ok())
                .map_or("", String::as_str);
            if key.starts_with("claim#") {
                match body_of(item) {
                    Ok(c) => view.claims.push(c),
                    Err(e) => unreadable.push(quarantine(key, e)),
                }
            } else if key.starts_with("usage#") {
                if let Some(pool) = item.get("pool").and_then(|v| v.as_s().ok()) {
                    let usage = usage_from_item(item);
                    if !usage.is_empty() {
                        view.usage.insert(pool.clone(), usage);
                    }
                }
            } else if key.starts_with(COMMAND_PREFIX) {
                match body_of(item) {
                    Ok(c) => view.commands.push(c),
                    Err(e) => unreadable.push(quarantine(key, e)),
                }
            } else if key.starts_with("unavailable#") {
                match body_of(item) {
                    Ok(o) => view
                        .unavailable
                        .push((o, number(item, "until_ms").unwrap_or(i64::MIN))),
                    // A mark is an optimisation: one that does not read is skipped.
                    Err(e) => {
                        warn!(item = %key, error = %e, "unavailable-offering mark cannot be read; ignored")
                    }
                }
            }
        }
        unreadable.sort_by(|a, b| a.key.cmp(&b.key));
        view.unreadable = unreadable;
        view.claims.sort_by(|a, b| a.id.cmp(&b.id));
        view.commands
            .sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let view = Arc::new(view);
        *self.view.lock().map_err(|_| poisoned())? = Some(Arc::clone(&view));
        Ok(view)
    }

    async fn backoff(attempt: u32) {
        // 10 ms, 20 ms, … capped at 640 ms, with a little spread per attempt.
        let ms = 10u64 << attempt.min(6);
        let spread = u64::from(std::process::id() % 7 + attempt * 3);
        tokio::time::sleep(Duration::from_millis(ms + spread)).await;
    }

    /// Which limited resource `usage#<pool>` (as `old`, or as read now) cannot take `extra`.
    async fn exceeded_resource(
        &self,
        pool: &str,
        old: Option<Item>,
        limits: &Limits,
        extra: &Usage,
    ) -> Result<Option<String>, StoreError> {
        let item = match old {
            Some(i) => Some(i),
            None => self.get(&self.tables.state, &usage_key(pool)).await?,
        };
        let used = item.as_ref().map(usage_from_item).unwrap_or_default();
        Ok(exceeded_limit(limits, &used, extra))
    }
}

impl Store for DynamoStore {
    async fn config_items(&self) -> Result<Vec<ConfigItem>, StoreError> {
        let items = self.scan(&self.tables.config, None).await?;
        let mut out = Vec::new();
        for item in items.iter().filter(|i| {
            i.get(PK)
                .and_then(|v| v.as_s().ok())
                .is_none_or(|k| k != CONFIG_VERSION_KEY)
        }) {
            match body_of(item) {
                Ok(i) => out.push(i),
                Err(e) => match unreadable_config(item, &e) {
                    Some(u) => {
                        warn!(error = %e, "configuration item cannot be read; reported as invalid");
                        out.push(u);
                    }
                    None => {
                        warn!(error = %e, "item of no configuration kind in the config table; ignored")
                    }
                },
            }
        }
        Ok(out)
    }

    async fn config_version(&self) -> Result<u64, StoreError> {
        let item = self.get(&self.tables.config, CONFIG_VERSION_KEY).await?;
        let version = item
            .as_ref()
            .and_then(|i| i.get(VERSION))
            .and_then(|v| v.as_n().ok())
            .map(|n| n.parse::<u64>());
        match version {
            None => Ok(0),
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(StoreError::Invalid(format!(
                "{CONFIG_VERSION_KEY}: version: {e}"
            ))),
        }
    }

    async fn put_config_item(&self, item: &ConfigItem) -> Result<(), StoreError> {
        self.write_config(&[ConfigWrite::Put(item.clone())]).await
    }

    async fn delete_config_item(&self, kind: ConfigKind, name: &str) -> Result<(), StoreError> {
        let key = config_key(kind, name);
        let delete = Delete::builder()
            .table_name(&self.tables.config)
            .key(PK, s(&key))
            .build()
            .map_err(build_err)?;
        let tx = vec![
            TransactWriteItem::builder().delete(delete).build(),
            self.bump_config_version()?,
        ];
        for attempt in 0..TRANSACTION_ATTEMPTS {
            match self.transact(tx.clone()).await? {
                TxOutcome::Done => return Ok(()),
                TxOutcome::ConditionFailed { .. } => return Ok(()),
                TxOutcome::Retry(why) => {
                    debug!(%key, %why, attempt, "config delete lost a race; retrying");
                    Self::backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Transient(format!(
            "{key}: delete kept losing to concurrent writes"
        )))
    }

    async fn write_config(&self, writes: &[ConfigWrite]) -> Result<(), StoreError> {
        if writes.len() > MAX_CONFIG_WRITES {
            return Err(StoreError::Invalid(format!(
                "{} changes in one write; at most {MAX_CONFIG_WRITES}",
                writes.len()
            )));
        }
        if writes.is_empty() {
            return Ok(());
        }
        let mut tx = Vec::with_capacity(writes.len() + 1);
        for w in writes {
            tx.push(match w {
                ConfigWrite::Put(item) => {
                    let record: Item = [
                        (PK.to_owned(), s(config_key(item.kind, &item.name))),
                        ("kind".to_owned(), s(kind_name(item.kind))),
                        ("name".to_owned(), s(&item.name)),
                        (VERSION.to_owned(), n(item.version)),
                        ("updated_at".to_owned(), s(item.updated_at.to_string())),
                        (BODY.to_owned(), s(json(item)?)),
                    ]
                    .into();
                    let put = Put::builder()
                        .table_name(&self.tables.config)
                        .set_item(Some(record));
                    let put = if item.version <= 1 {
                        put.condition_expression("attribute_not_exists(#pk)")
                            .expression_attribute_names("#pk", PK)
                    } else {
                        put.condition_expression("#v = :prev")
                            .expression_attribute_names("#v", VERSION)
                            .expression_attribute_values(":prev", n(item.version - 1))
                    };
                    let put = put
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .map_err(build_err)?;
                    TransactWriteItem::builder().put(put).build()
                }
                ConfigWrite::Delete {
                    kind,
                    name,
                    version,
                } => {
                    let delete = Delete::builder()
                        .table_name(&self.tables.config)
                        .key(PK, s(config_key(*kind, name)))
                        .condition_expression("#v = :prev")
                        .expression_attribute_names("#v", VERSION)
                        .expression_attribute_values(":prev", n(version))
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .map_err(build_err)?;
                    TransactWriteItem::builder().delete(delete).build()
                }
            });
        }
        tx.push(self.bump_config_version()?);
        for attempt in 0..TRANSACTION_ATTEMPTS {
            match self.transact(tx.clone()).await? {
                TxOutcome::Done => return Ok(()),
                TxOutcome::ConditionFailed { index, old } => {
                    let Some(w) = writes.get(index) else {
                        return Err(StoreError::Conflict(
                            "the configuration version counter refused the write".into(),
                        ));
                    };
                    let (kind, name) = w.key();
                    let stored = old
                        .as_ref()
                        .and_then(|i| i.get(VERSION))
                        .and_then(|v| v.as_n().ok())
                        .map_or_else(|| "none".to_owned(), Clone::clone);
                    let expected = match w {
                        ConfigWrite::Put(i) if i.version <= 1 => "none".to_owned(),
                        ConfigWrite::Put(i) => (i.version - 1).to_string(),
                        ConfigWrite::Delete { version, .. } => version.to_string(),
                    };
                    return Err(StoreError::Conflict(format!(
                        "{}: stored version {stored}, expected {expected} (someone else changed it)",
                        config_key(kind, name)
                    )));
                }
                TxOutcome::Retry(why) => {
                    debug!(%why, attempt, "configuration write lost a race; retrying");
                    Self::backoff(attempt).await;
                }
            }
        }
        Err(StoreError::Transient(
            "configuration write kept losing to concurrent writes".into(),
        ))
    }

    async fn claims(&self) -> Result<Vec<Claim>, StoreError> {
        Ok(self.state_view().await?.claims.clone())
    }

    async fn unreadable_state(&self) -> Result<Vec<Unreadable>, StoreError> {
        Ok(self.state_view().await?.unreadable.clone())
    }

    async fn create_claim(&self, claim: &Claim, limits: &Limits) -> Result<(), StoreError> {
        let reservation: Usage = claim
            .reservation
            .iter()
            .filter(|(_, v)| **v != 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if let Some(resource) = exceeded_limit(limits, &Usage::new(), &reservation) {
            return Err(StoreError::LimitExceeded {
                pool: claim.pool.clone(),
                resource,
            });
        }
        let put = Put::builder()
            .table_name(&self.tables.state)
            .set_item(Some(claim_item(claim)?))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .build()
            .map_err(build_err)?;
        let update = usage_update(&self.tables.state, &claim.pool, &reservation, limits)?;
        let mut last = String::new();
        for attempt in 0..TRANSACTION_ATTEMPTS {
            let mut items = vec![
                TransactWriteItem::builder().put(put.clone()).build(),
                self.bump_state_version()?,
            ];
            if let Some(u) = &update {
                items.push(TransactWriteItem::builder().update(u.clone()).build());
            }
            match self.transact(items).await? {
                TxOutcome::Done => return Ok(()),
                TxOutcome::ConditionFailed { index: 0, .. } => {
                    return Err(StoreError::Conflict(format!(
                        "nodeclaim {} already exists",
                        claim.id
                    )));
                }
                TxOutcome::ConditionFailed { old, .. } => {
                    match self
                        .exceeded_resource(&claim.pool, old, limits, &reservation)
                        .await?
                    {
                        Some(resource) => {
                            return Err(StoreError::LimitExceeded {
                                pool: claim.pool.clone(),
                                resource,
                            });
                        }
                        // The usage changed between the failure and our read: try again.
                        None => last = "usage changed concurrently".into(),
                    }
                }
                TxOutcome::Retry(why) => last = why,
            }
            Self::backoff(attempt).await;
        }
        Err(StoreError::Transient(format!(
            "creating nodeclaim {}: {last}",
            claim.id
        )))
    }

    async fn update_claim(
        &self,
        previous: &Claim,
        next: &Claim,
        limits: &Limits,
    ) -> Result<(), StoreError> {
        if previous.id != next.id
            || previous.pool != next.pool
            || next.version != previous.version + 1
        {
            return Err(StoreError::Invalid(format!(
                "update of nodeclaim {} must keep id and pool and bump the version by one ({} → {})",
                previous.id, previous.version, next.version
            )));
        }
        let delta = delta_of(&previous.reservation, &next.reservation);
        let condition_put = |item: Item| {
            Put::builder()
                .table_name(&self.tables.state)
                .set_item(Some(item))
                .condition_expression("#v = :prev")
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_values(":prev", n(previous.version))
                .build()
                .map_err(build_err)
        };
        let conflict = || {
            StoreError::Conflict(format!(
                "nodeclaim {} is no longer at version {}",
                previous.id, previous.version
            ))
        };
        let Some(update) = usage_update(&self.tables.state, &next.pool, &delta, limits)? else {
            let put = TransactWriteItem::builder()
                .put(condition_put(claim_item(next)?)?)
                .build();
            let what = format!("updating nodeclaim {}", next.id);
            return self
                .write_with_marker(put, &what)
                .await?
                .map_err(|_| conflict());
        };
        if let Some(resource) = exceeded_limit(limits, &Usage::new(), &delta) {
            // Growing by more than the whole limit can never fit.
            return Err(StoreError::LimitExceeded {
                pool: next.pool.clone(),
                resource,
            });
        }
        let put = condition_put(claim_item(next)?)?;
        let mut last = String::new();
        for attempt in 0..TRANSACTION_ATTEMPTS {
            let items = vec![
                TransactWriteItem::builder().put(put.clone()).build(),
                TransactWriteItem::builder().update(update.clone()).build(),
                self.bump_state_version()?,
            ];
            match self.transact(items).await? {
                TxOutcome::Done => return Ok(()),
                TxOutcome::ConditionFailed { index: 0, .. } => return Err(conflict()),
                TxOutcome::ConditionFailed { old, .. } => match self
                    .exceeded_resource(&next.pool, old, limits, &delta)
                    .await?
                {
                    Some(resource) => {
                        return Err(StoreError::LimitExceeded {
                            pool: next.pool.clone(),
                            resource,
                        });
                    }
                    None => last = "usage changed concurrently".into(),
                },
                TxOutcome::Retry(why) => last = why,
            }
            Self::backoff(attempt).await;
        }
        Err(StoreError::Transient(format!(
            "updating nodeclaim {}: {last}",
            next.id
        )))
    }

    async fn delete_claim(&self, claim: &Claim) -> Result<(), StoreError> {
        let key = claim_key(&claim.id);
        let mut last = String::new();
        for attempt in 0..TRANSACTION_ATTEMPTS {
            // Release what is stored, not what the caller holds: a newer
            // version may reserve something else.
            let Some(item) = self.get(&self.tables.state, &key).await? else {
                return Ok(());
            };
            let stored: Claim = body_of(&item)?;
            let delete = Delete::builder()
                .table_name(&self.tables.state)
                .key(PK, s(&key))
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_values(":v", n(stored.version))
                .build()
                .map_err(build_err)?;
            let mut items = vec![
                TransactWriteItem::builder().delete(delete).build(),
                self.bump_state_version()?,
            ];
            if let Some(u) = usage_update(
                &self.tables.state,
                &stored.pool,
                &negated(&stored.reservation),
                &Limits::default(),
            )? {
                items.push(TransactWriteItem::builder().update(u).build());
            }
            match self.transact(items).await? {
                TxOutcome::Done => return Ok(()),
                TxOutcome::ConditionFailed { .. } => {
                    last = "the claim changed while deleting".into()
                }
                TxOutcome::Retry(why) => last = why,
            }
            Self::backoff(attempt).await;
        }
        Err(StoreError::Transient(format!(
            "deleting nodeclaim {}: {last}",
            claim.id
        )))
    }

    async fn pool_usage(&self) -> Result<BTreeMap<String, Usage>, StoreError> {
        Ok(self.state_view().await?.usage.clone())
    }

    async fn batch(&self) -> Result<Option<Batch>, StoreError> {
        self.get(&self.tables.state, BATCH_KEY)
            .await?
            .as_ref()
            .map(body_of)
            .transpose()
    }

    async fn put_batch(&self, previous: Option<&Batch>, next: &Batch) -> Result<(), StoreError> {
        let item: Item = [
            (PK.to_owned(), s(BATCH_KEY)),
            ("kind".to_owned(), s("batch")),
            (VERSION.to_owned(), n(next.version)),
            (BODY.to_owned(), s(json(next)?)),
        ]
        .into();
        let ok = match previous {
            None => {
                self.put_if(
                    &self.tables.state,
                    item,
                    "attribute_not_exists(#pk)",
                    &[("#pk", PK)],
                    vec![],
                )
                .await?
            }
            Some(p) => {
                self.put_if(
                    &self.tables.state,
                    item,
                    "#v = :prev",
                    &[("#v", VERSION)],
                    vec![(":prev", n(p.version))],
                )
                .await?
            }
        };
        if ok {
            Ok(())
        } else {
            Err(StoreError::Conflict(match previous {
                None => "the batch already exists".to_owned(),
                Some(p) => format!("the batch is no longer at version {}", p.version),
            }))
        }
    }

    async fn delete_batch(&self, batch: &Batch) -> Result<(), StoreError> {
        let outcome = self
            .delete_if(
                &self.tables.state,
                BATCH_KEY,
                Some("#v = :v"),
                &[("#v", VERSION)],
                vec![(":v", n(batch.version))],
            )
            .await?;
        match outcome {
            Ok(()) | Err(None) => Ok(()),
            Err(Some(_)) => Err(StoreError::Conflict(format!(
                "the batch is no longer at version {}",
                batch.version
            ))),
        }
    }

    async fn commands(&self) -> Result<Vec<Command>, StoreError> {
        Ok(self.state_view().await?.commands.clone())
    }

    async fn put_command(
        &self,
        previous: Option<&Command>,
        next: &Command,
    ) -> Result<(), StoreError> {
        crate::ports::check_command_write(previous, next)?;
        let item: Item = [
            (PK.to_owned(), s(command_key(&next.id))),
            ("kind".to_owned(), s("command")),
            (VERSION.to_owned(), n(next.version)),
            ("step".to_owned(), s(json(&next.step)?.trim_matches('"'))),
            (BODY.to_owned(), s(json(next)?)),
        ]
        .into();
        let put = Put::builder()
            .table_name(&self.tables.state)
            .set_item(Some(item));
        let put = match previous {
            None => put
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", PK),
            Some(p) => put
                .condition_expression("#v = :prev")
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_values(":prev", n(p.version)),
        };
        let write = TransactWriteItem::builder()
            .put(put.build().map_err(build_err)?)
            .build();
        match self
            .write_with_marker(write, &format!("writing command {}", next.id))
            .await?
        {
            Ok(()) => Ok(()),
            Err(_) => Err(StoreError::Conflict(match previous {
                None => format!("command {} exists", next.id),
                Some(p) => format!("command {} is no longer at version {}", next.id, p.version),
            })),
        }
    }

    async fn delete_command(&self, command: &Command) -> Result<(), StoreError> {
        let delete = Delete::builder()
            .table_name(&self.tables.state)
            .key(PK, s(command_key(&command.id)))
            .condition_expression("#v = :v")
            .expression_attribute_names("#v", VERSION)
            .expression_attribute_values(":v", n(command.version))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_err)?;
        let outcome = self
            .write_with_marker(
                TransactWriteItem::builder().delete(delete).build(),
                &format!("deleting command {}", command.id),
            )
            .await?;
        let conflict = || {
            StoreError::Conflict(format!(
                "command {} is no longer at version {}",
                command.id, command.version
            ))
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(Some(_)) => Err(conflict()),
            // Gone already (done), unless the failure came without the old
            // item: then look.
            Err(None) => match self
                .get(&self.tables.state, &command_key(&command.id))
                .await?
            {
                None => Ok(()),
                Some(_) => Err(conflict()),
            },
        }
    }

    async fn acquire_lease(&self, lease: &Lease, now: Timestamp) -> Result<bool, StoreError> {
        let item: Item = [
            (PK.to_owned(), s(lease_key(&lease.name))),
            ("kind".to_owned(), s("lease")),
            ("holder".to_owned(), s(&lease.holder)),
            (
                "expires_ms".to_owned(),
                n(lease.expires_at.as_millisecond()),
            ),
            (TTL_ATTRIBUTE.to_owned(), n(ttl_seconds(lease.expires_at))),
            (BODY.to_owned(), s(json(lease)?)),
        ]
        .into();
        self.put_if(
            &self.tables.state,
            item,
            "attribute_not_exists(#pk) OR #holder = :holder OR #exp <= :now",
            &[("#pk", PK), ("#holder", "holder"), ("#exp", "expires_ms")],
            vec![
                (":holder", s(&lease.holder)),
                (":now", n(now.as_millisecond())),
            ],
        )
        .await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        // Not ours (or gone): nothing to release.
        let _ = self
            .delete_if(
                &self.tables.state,
                &lease_key(name),
                Some("#holder = :holder"),
                &[("#holder", "holder")],
                vec![(":holder", s(holder))],
            )
            .await?;
        Ok(())
    }

    async fn mark_unavailable(
        &self,
        offering: &OfferingKey,
        until: Timestamp,
    ) -> Result<(), StoreError> {
        let item: Item = [
            (PK.to_owned(), s(unavailable_key(offering))),
            ("kind".to_owned(), s("unavailable")),
            ("until_ms".to_owned(), n(until.as_millisecond())),
            (TTL_ATTRIBUTE.to_owned(), n(ttl_seconds(until))),
            (BODY.to_owned(), s(json(offering)?)),
        ]
        .into();
        // Keep the later of two marks (a failed condition: a later one is there).
        let put = Put::builder()
            .table_name(&self.tables.state)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk) OR #until < :until")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#until", "until_ms")
            .expression_attribute_values(":until", n(until.as_millisecond()))
            .build()
            .map_err(build_err)?;
        let _ = self
            .write_with_marker(
                TransactWriteItem::builder().put(put).build(),
                &format!("marking {offering} unavailable"),
            )
            .await?;
        Ok(())
    }

    async fn unavailable_offerings(&self, now: Timestamp) -> Result<Vec<OfferingKey>, StoreError> {
        Ok(self.state_view().await?.unavailable_at(now))
    }

    /// One state view for all four: one `state#version` read.
    async fn state(&self, now: Timestamp) -> Result<StateRead, StoreError> {
        let view = self.state_view().await?;
        Ok(StateRead {
            claims: view.claims.clone(),
            usage: view.usage.clone(),
            commands: view.commands.clone(),
            unavailable: view.unavailable_at(now),
        })
    }
}

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
