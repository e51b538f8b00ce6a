//! The adapter's own calls: building it, making the tables, paged scans,
//! the state view and its marker, and the transactions (retried while they
//! lose to concurrent ones) the [`Store`] operations are made of.

use super::*;

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

    pub(super) async fn wait_active(&self, table: &str) -> Result<(), StoreError> {
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
        Err(StoreError::transient(
            format!("waiting for table {table}"),
            "it did not become active",
        ))
    }

    /// Every item of `table` whose key starts with `prefix` (all pages, consistent).
    pub(super) async fn scan(
        &self,
        table: &str,
        prefix: Option<&str>,
    ) -> Result<Vec<Item>, StoreError> {
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

    pub(super) async fn get(&self, table: &str, key: &str) -> Result<Option<Item>, StoreError> {
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
    pub(super) async fn put_if(
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
    pub(super) async fn delete_if(
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

    pub(super) async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> Result<TxOutcome, StoreError> {
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
    pub(super) fn bump_config_version(&self) -> Result<TransactWriteItem, StoreError> {
        bump_counter(&self.tables.config, CONFIG_VERSION_KEY)
    }

    /// `ADD version 1` on `state#version`, in the same transaction as a
    /// write the state view holds.
    pub(super) fn bump_state_version(&self) -> Result<TransactWriteItem, StoreError> {
        bump_counter(&self.tables.state, STATE_VERSION_KEY)
    }

    /// `write` and the marker's bump as one transaction, retried while it
    /// loses to a concurrent one; `Ok(Err(old))` when `write`'s condition failed.
    pub(super) async fn write_with_marker(
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
        Err(StoreError::transient(what, last))
    }

    /// The state view, read again only when `state#version` moved.
    pub(super) async fn state_view(&self) -> Result<Arc<StateView>, StoreError> {
        let marker = self.get(&self.tables.state, STATE_VERSION_KEY).await?;
        let version = match marker
            .as_ref()
            .and_then(|i| i.get(VERSION))
            .and_then(|v| v.as_n().ok())
        {
            None => 0,
            Some(v) => v
                .parse::<u64>()
                .map_err(|e| StoreError::invalid(STATE_VERSION_KEY, format!("version: {e}")))?,
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

    pub(super) async fn backoff(attempt: u32) {
        // 10 ms, 20 ms, … capped at 640 ms, with a little spread per attempt.
        let ms = 10u64 << attempt.min(6);
        let spread = u64::from(std::process::id() % 7 + attempt * 3);
        tokio::time::sleep(Duration::from_millis(ms + spread)).await;
    }

    /// Which limited resource `usage#<pool>` (as `old`, or as read now) cannot take `extra`.
    pub(super) async fn exceeded_resource(
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
