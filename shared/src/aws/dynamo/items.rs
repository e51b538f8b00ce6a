//! The items as DynamoDB holds them: the keys and attributes of the
//! schema (the table in the module's doc), the JSON bodies and how an
//! unreadable one is set aside, and the usage counters' conditional updates.

use super::*;

pub(super) const PK: &str = "pk";
pub(super) const BODY: &str = "body";
pub(super) const VERSION: &str = "version";
pub(super) const TTL_ATTRIBUTE: &str = "expires_at";
pub(super) const BATCH_KEY: &str = "batch#provisioner";
/// The config table's counter every configuration write moves.
pub(super) const CONFIG_VERSION_KEY: &str = "config#version";
/// The state table's counter every write of a claim, usage, command or
/// unavailable mark moves (see the module's doc).
pub(super) const STATE_VERSION_KEY: &str = "state#version";
/// A state view is read again after this long even when the marker did not
/// move: a write that bypassed it (an older release during a rolling
/// update, an operator's hand edit) is seen within this bound. One Scan
/// per container per five minutes costs cents a month.
pub(super) const MAX_VIEW_AGE: Duration = Duration::from_secs(300);
/// Prefix of the resource attributes of a `usage#<pool>` item.
pub(super) const RESOURCE_PREFIX: &str = "r:";
/// Transactions that lose to a concurrent one are retried this often.
pub(super) const TRANSACTION_ATTEMPTS: u32 = 8;

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn kind_name(kind: ConfigKind) -> &'static str {
    kind.as_str()
}

pub(super) fn config_key(kind: ConfigKind, name: &str) -> String {
    format!("{}#{name}", kind_name(kind))
}

pub(super) fn claim_key(id: &str) -> String {
    format!("claim#{id}")
}

pub(super) fn usage_key(pool: &str) -> String {
    format!("usage#{pool}")
}

pub(super) const COMMAND_PREFIX: &str = "command#";

pub(super) fn command_key(id: &str) -> String {
    format!("{COMMAND_PREFIX}{id}")
}

pub(super) fn lease_key(name: &str) -> String {
    format!("lease#{name}")
}

pub(super) fn unavailable_key(o: &OfferingKey) -> String {
    format!("unavailable#{o}")
}

/// Epoch seconds, rounded up (DynamoDB TTL granularity).
pub(super) fn ttl_seconds(t: Timestamp) -> i64 {
    (t.as_millisecond() + 999).div_euclid(1000)
}

pub(super) fn body_of<T: DeserializeOwned>(item: &Item) -> Result<T, StoreError> {
    let key = item
        .get(PK)
        .and_then(|v| v.as_s().ok())
        .map_or("?", String::as_str);
    let body = item
        .get(BODY)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| StoreError::invalid(format!("item {key}"), "no body attribute"))?;
    serde_json::from_str(body)
        .map_err(|e| StoreError::invalid(format!("item {key}"), format!("unreadable body: {e}")))
}

/// A quarantined state item: its key and why.
pub(super) fn unreadable_state_item(key: &str, e: StoreError) -> Unreadable {
    Unreadable {
        key: key.to_owned(),
        reason: e.to_string(),
    }
}

/// A configuration item whose body does not read, as [`ConfigItem::unreadable`]
/// named from its key (`<kind>#<name>`); `None` for a key of no kind.
pub(super) fn unreadable_config(item: &Item, e: &StoreError) -> Option<ConfigItem> {
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

pub(super) fn json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v)
        .map_err(|e| StoreError::invalid("an item's body", format!("cannot serialise: {e}")))
}

pub(super) fn number(item: &Item, attr: &str) -> Option<i64> {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// `ADD version 1` on the counter item `key` of `table`, as a transaction item.
pub(super) fn bump_counter(table: &str, key: &str) -> Result<TransactWriteItem, StoreError> {
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

pub(super) fn poisoned() -> StoreError {
    StoreError::invalid("the state view", "its lock was poisoned by a panic")
}

pub(super) fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::invalid("a DynamoDB request", format!("cannot be built: {e}"))
}

pub(super) fn usage_from_item(item: &Item) -> Usage {
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
pub(super) fn usage_update(
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
pub(super) enum TxOutcome {
    Done,
    /// Item `index` failed its condition; the old item if DynamoDB returned it.
    ConditionFailed {
        index: usize,
        old: Option<Item>,
    },
    /// Lost to a concurrent transaction or throttled: try again.
    Retry(String),
}

pub(super) fn claim_item(claim: &Claim) -> Result<Item, StoreError> {
    Ok([
        (PK.to_owned(), s(claim_key(&claim.id))),
        ("kind".to_owned(), s("claim")),
        ("pool".to_owned(), s(&claim.pool)),
        (VERSION.to_owned(), n(claim.version)),
        (BODY.to_owned(), s(json(claim)?)),
    ]
    .into())
}

pub(super) fn delta_of(previous: &Usage, next: &Usage) -> Usage {
    let mut d = next.clone();
    crate::model::claim::sub_usage(&mut d, previous);
    d
}

pub(super) fn negated(u: &Usage) -> Usage {
    u.iter().map(|(k, v)| (k.clone(), -v)).collect()
}
