//! [`Store`] for [`DynamoStore`]: each operation as the port describes it,
//! made of the items ([`super::items`]) and the calls ([`super::calls`]).

use super::*;

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
            Some(Err(e)) => Err(StoreError::invalid(
                CONFIG_VERSION_KEY,
                format!("version: {e}"),
            )),
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
        Err(StoreError::transient(
            format!("deleting {key}"),
            "kept losing to concurrent writes",
        ))
    }

    async fn write_config(&self, writes: &[ConfigWrite]) -> Result<(), StoreError> {
        if writes.len() > MAX_CONFIG_WRITES {
            return Err(StoreError::invalid(
                "configuration write",
                format!(
                    "{} changes in one write; at most {MAX_CONFIG_WRITES}",
                    writes.len()
                ),
            ));
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
                        return Err(StoreError::conflict(
                            CONFIG_VERSION_KEY,
                            "the configuration version counter refused the write",
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
                    return Err(StoreError::conflict(
                        config_key(kind, name),
                        format!(
                            "stored version {stored}, expected {expected} (someone else changed it)"
                        ),
                    ));
                }
                TxOutcome::Retry(why) => {
                    debug!(%why, attempt, "configuration write lost a race; retrying");
                    Self::backoff(attempt).await;
                }
            }
        }
        Err(StoreError::transient(
            "configuration write",
            "kept losing to concurrent writes",
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
                    return Err(StoreError::conflict(claim_key(&claim.id), "already exists"));
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
        Err(StoreError::transient(
            format!("creating nodeclaim {}", claim.id),
            last,
        ))
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
            return Err(StoreError::invalid(
                claim_key(&previous.id),
                format!(
                    "an update must keep id and pool and bump the version by one ({} → {})",
                    previous.version, next.version
                ),
            ));
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
            StoreError::conflict(
                claim_key(&previous.id),
                format!("no longer at version {}", previous.version),
            )
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
        Err(StoreError::transient(
            format!("updating nodeclaim {}", next.id),
            last,
        ))
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
        Err(StoreError::transient(
            format!("deleting nodeclaim {}", claim.id),
            last,
        ))
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
            Err(StoreError::conflict(
                BATCH_KEY,
                match previous {
                    None => "already exists".to_owned(),
                    Some(p) => format!("no longer at version {}", p.version),
                },
            ))
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
            Err(Some(_)) => Err(StoreError::conflict(
                BATCH_KEY,
                format!("no longer at version {}", batch.version),
            )),
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
            Err(_) => Err(StoreError::conflict(
                command_key(&next.id),
                match previous {
                    None => "already exists".to_owned(),
                    Some(p) => format!("no longer at version {}", p.version),
                },
            )),
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
            StoreError::conflict(
                command_key(&command.id),
                format!("no longer at version {}", command.version),
            )
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
