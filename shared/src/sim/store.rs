//! The Store in memory, with DynamoDB's conditional-write semantics: every
//! operation is atomic under one lock, and conditions are checked exactly as
//! the DynamoDB adapter's condition expressions check them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::{ConfigItem, ConfigKind, ConfigWrite, Limits, MAX_CONFIG_WRITES};
use crate::model::claim::{Claim, add_usage, exceeded_limit, sub_usage};
use crate::model::{Batch, Command, Lease, OfferingKey, Timestamp, Usage};
use crate::ports::{Store, StoreError, Unreadable};

#[derive(Debug, Default, Clone)]
struct State {
    config: BTreeMap<(ConfigKind, String), ConfigItem>,
    config_version: u64,
    claims: BTreeMap<String, Claim>,
    usage: BTreeMap<String, Usage>,
    batch: Option<Batch>,
    leases: BTreeMap<String, Lease>,
    unavailable: BTreeMap<OfferingKey, Timestamp>,
    commands: BTreeMap<String, Command>,
    /// Claims deleted, in order (a claim released twice would show twice).
    deleted_claims: Vec<String>,
    /// Items written by hand whose body does not read (`put_raw`), by key:
    /// their version and why they do not read.
    raw: BTreeMap<String, RawItem>,
}

#[derive(Debug, Clone)]
struct RawItem {
    version: u64,
    reason: String,
}

const CLAIM_PREFIX: &str = "claim#";
const COMMAND_PREFIX: &str = "command#";

fn is_state_key(key: &str) -> bool {
    key.starts_with(CLAIM_PREFIX) || key.starts_with(COMMAND_PREFIX)
}

/// The configuration kind and name a `<kind>#<name>` key names.
fn config_key(key: &str) -> Option<(ConfigKind, &str)> {
    let (kind, name) = key.split_once('#')?;
    let kind = [
        ConfigKind::NodePool,
        ConfigKind::NodeClass,
        ConfigKind::Settings,
    ]
    .into_iter()
    .find(|k| k.as_str() == kind)?;
    Some((kind, name))
}

/// A copy of a [`MemStore`]'s state ([`MemStore::backup`]).
#[derive(Debug, Clone)]
pub struct StateBackup(State);

#[derive(Debug, Clone, Default)]
pub struct MemStore {
    state: Arc<Mutex<State>>,
}

impl MemStore {
    pub fn new() -> Self {
        MemStore::default()
    }

    /// The ids of claims this store deleted, in order.
    pub fn deleted_claims(&self) -> Vec<String> {
        self.lock().deleted_claims.clone()
    }

    /// The state table is lost (deleted, or a new table under a mistyped
    /// prefix): claims, usage, commands, the batch, leases and unavailable
    /// marks are gone; the configuration stays.
    pub fn lose_state(&self) {
        let mut s = self.lock();
        let config = std::mem::take(&mut s.config);
        let config_version = s.config_version;
        let deleted_claims = std::mem::take(&mut s.deleted_claims);
        let mut raw = std::mem::take(&mut s.raw);
        raw.retain(|k, _| !is_state_key(k));
        *s = State {
            config,
            config_version,
            deleted_claims,
            raw,
            ..State::default()
        };
    }

    /// A copy of the state table as it is now (a backup).
    pub fn backup(&self) -> StateBackup {
        StateBackup(self.lock().clone())
    }

    /// The state table restored from `backup` (the configuration as it is now).
    pub fn restore(&self, backup: &StateBackup) {
        let mut s = self.lock();
        let config = std::mem::take(&mut s.config);
        let config_version = s.config_version;
        let deleted_claims = std::mem::take(&mut s.deleted_claims);
        let mut raw = std::mem::take(&mut s.raw);
        raw.retain(|k, _| !is_state_key(k));
        raw.extend(
            backup
                .0
                .raw
                .iter()
                .filter(|(k, _)| is_state_key(k))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        *s = State {
            config,
            config_version,
            deleted_claims,
            raw,
            ..backup.0.clone()
        };
    }

    /// Writes an item by hand under its DynamoDB key (`claim#<id>`,
    /// `command#<id>`, `nodepool#<name>`, …) with `body` as its JSON, as an
    /// operator's edit or an older release might: a body that reads becomes
    /// the item (no usage is moved), one that does not is kept as an
    /// unreadable item, quarantined as the DynamoDB store quarantines it.
    pub fn put_raw(&self, key: &str, body: &str, version: u64) -> Result<(), String> {
        let mut s = self.lock();
        let unreadable = |e: serde_json::Error| RawItem {
            version,
            reason: format!("item {key}: unreadable body: {e}"),
        };
        if let Some(id) = key.strip_prefix(CLAIM_PREFIX) {
            match serde_json::from_str::<Claim>(body) {
                Ok(c) if c.id == id => {
                    s.raw.remove(key);
                    s.claims.insert(c.id.clone(), c);
                }
                Ok(c) => {
                    return Err(format!("claim {} under key {key}", c.id));
                }
                Err(e) => {
                    s.claims.remove(id);
                    s.raw.insert(key.to_owned(), unreadable(e));
                }
            }
        } else if let Some(id) = key.strip_prefix(COMMAND_PREFIX) {
            match serde_json::from_str::<Command>(body) {
                Ok(c) if c.id == id => {
                    s.raw.remove(key);
                    s.commands.insert(c.id.clone(), c);
                }
                Ok(c) => return Err(format!("command {} under key {key}", c.id)),
                Err(e) => {
                    s.commands.remove(id);
                    s.raw.insert(key.to_owned(), unreadable(e));
                }
            }
        } else if let Some((kind, name)) = config_key(key) {
            match serde_json::from_str::<ConfigItem>(body) {
                Ok(i) if i.kind == kind && i.name == name => {
                    s.raw.remove(key);
                    s.config.insert((kind, name.to_owned()), i);
                }
                Ok(i) => return Err(format!("{} {} under key {key}", i.kind.as_str(), i.name)),
                Err(e) => {
                    s.config.remove(&(kind, name.to_owned()));
                    s.raw.insert(key.to_owned(), unreadable(e));
                }
            }
            s.config_version += 1;
        } else {
            return Err(format!("{key}: not a key of this store"));
        }
        Ok(())
    }

    /// Deletes an item by hand under its key, readable or not, as an
    /// operator removes an item that cannot be read (no usage is moved).
    pub fn delete_raw(&self, key: &str) -> Result<(), String> {
        let mut s = self.lock();
        s.raw.remove(key);
        if let Some(id) = key.strip_prefix(CLAIM_PREFIX) {
            s.claims.remove(id);
        } else if let Some(id) = key.strip_prefix(COMMAND_PREFIX) {
            s.commands.remove(id);
        } else if let Some((kind, name)) = config_key(key) {
            s.config.remove(&(kind, name.to_owned()));
            s.config_version += 1;
        } else {
            return Err(format!("{key}: not a key of this store"));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store for MemStore {
    async fn config_items(&self) -> Result<Vec<ConfigItem>, StoreError> {
        let s = self.lock();
        let mut items: Vec<ConfigItem> = s.config.values().cloned().collect();
        for (key, raw) in &s.raw {
            if let Some((kind, name)) = config_key(key) {
                tracing::warn!(item = %key, reason = %raw.reason, "configuration item cannot be read; reported as invalid");
                items.push(ConfigItem::unreadable(
                    kind,
                    name,
                    raw.version,
                    raw.reason.clone(),
                ));
            }
        }
        Ok(items)
    }

    async fn config_version(&self) -> Result<u64, StoreError> {
        Ok(self.lock().config_version)
    }

    async fn put_config_item(&self, item: &ConfigItem) -> Result<(), StoreError> {
        self.write_config(&[ConfigWrite::Put(item.clone())]).await
    }

    async fn delete_config_item(&self, kind: ConfigKind, name: &str) -> Result<(), StoreError> {
        let mut s = self.lock();
        let raw = s.raw.remove(&format!("{}#{name}", kind.as_str())).is_some();
        if s.config.remove(&(kind, name.to_owned())).is_some() || raw {
            s.config_version += 1;
        }
        Ok(())
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
        let mut s = self.lock();
        // Check every condition first: all or nothing.
        for w in writes {
            let (kind, name) = w.key();
            let stored = s
                .config
                .get(&(kind, name.to_owned()))
                .map(|i| i.version)
                .or_else(|| {
                    s.raw
                        .get(&format!("{}#{name}", kind.as_str()))
                        .map(|r| r.version)
                });
            let expected = match w {
                ConfigWrite::Put(item) => item.version.checked_sub(1).filter(|v| *v > 0),
                ConfigWrite::Delete { version, .. } => Some(*version),
            };
            if stored != expected {
                return Err(StoreError::conflict(
                    format!("{}#{name}", kind.as_str()),
                    format!(
                        "stored version {}, expected {} (someone else changed it)",
                        stored.map_or("none".to_owned(), |v| v.to_string()),
                        expected.map_or("none".to_owned(), |v| v.to_string()),
                    ),
                ));
            }
        }
        for w in writes {
            let (kind, name) = w.key();
            s.raw.remove(&format!("{}#{name}", kind.as_str()));
            match w {
                ConfigWrite::Put(item) => {
                    s.config
                        .insert((item.kind, item.name.clone()), item.clone());
                }
                ConfigWrite::Delete { kind, name, .. } => {
                    s.config.remove(&(*kind, name.clone()));
                }
            }
        }
        s.config_version += 1;
        Ok(())
    }

    async fn claims(&self) -> Result<Vec<Claim>, StoreError> {
        Ok(self.lock().claims.values().cloned().collect())
    }

    async fn unreadable_state(&self) -> Result<Vec<Unreadable>, StoreError> {
        Ok(self
            .lock()
            .raw
            .iter()
            .filter(|(k, _)| is_state_key(k))
            .map(|(k, r)| Unreadable {
                key: k.clone(),
                reason: r.reason.clone(),
            })
            .collect())
    }

    async fn create_claim(&self, claim: &Claim, limits: &Limits) -> Result<(), StoreError> {
        let mut s = self.lock();
        if s.claims.contains_key(&claim.id)
            || s.raw.contains_key(&format!("{CLAIM_PREFIX}{}", claim.id))
        {
            return Err(StoreError::conflict(
                format!("claim#{}", claim.id),
                "already exists",
            ));
        }
        let used = s.usage.get(&claim.pool).cloned().unwrap_or_default();
        if let Some(resource) = exceeded_limit(limits, &used, &claim.reservation) {
            return Err(StoreError::LimitExceeded {
                pool: claim.pool.clone(),
                resource,
            });
        }
        add_usage(
            s.usage.entry(claim.pool.clone()).or_default(),
            &claim.reservation,
        );
        s.claims.insert(claim.id.clone(), claim.clone());
        Ok(())
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
                format!("claim#{}", previous.id),
                format!(
                    "an update must keep id and pool and bump the version by one ({} → {})",
                    previous.version, next.version
                ),
            ));
        }
        let mut s = self.lock();
        match s.claims.get(&previous.id) {
            Some(c) if c.version == previous.version => {}
            Some(c) => {
                return Err(StoreError::conflict(
                    format!("claim#{}", previous.id),
                    format!("version {} is not {}", c.version, previous.version),
                ));
            }
            None => {
                return Err(StoreError::conflict(
                    format!("claim#{}", previous.id),
                    "gone",
                ));
            }
        }
        let mut delta = next.reservation.clone();
        sub_usage(&mut delta, &previous.reservation);
        let used = s.usage.get(&previous.pool).cloned().unwrap_or_default();
        if let Some(resource) = exceeded_limit(limits, &used, &delta) {
            return Err(StoreError::LimitExceeded {
                pool: previous.pool.clone(),
                resource,
            });
        }
        let usage = s.usage.entry(previous.pool.clone()).or_default();
        add_usage(usage, &delta);
        usage.retain(|_, v| *v != 0);
        s.claims.insert(next.id.clone(), next.clone());
        Ok(())
    }

    async fn delete_claim(&self, claim: &Claim) -> Result<(), StoreError> {
        let mut s = self.lock();
        let Some(stored) = s.claims.remove(&claim.id) else {
            return Ok(());
        };
        s.deleted_claims.push(stored.id.clone());
        if let Some(usage) = s.usage.get_mut(&stored.pool) {
            sub_usage(usage, &stored.reservation);
        }
        Ok(())
    }

    async fn pool_usage(&self) -> Result<BTreeMap<String, Usage>, StoreError> {
        Ok(self.lock().usage.clone())
    }

    async fn batch(&self) -> Result<Option<Batch>, StoreError> {
        Ok(self.lock().batch.clone())
    }

    async fn put_batch(&self, previous: Option<&Batch>, next: &Batch) -> Result<(), StoreError> {
        let mut s = self.lock();
        let stored = s.batch.as_ref().map(|b| b.version);
        if stored != previous.map(|b| b.version) {
            return Err(StoreError::conflict(
                "batch#provisioner",
                format!("stored version {stored:?}"),
            ));
        }
        s.batch = Some(next.clone());
        Ok(())
    }

    async fn delete_batch(&self, batch: &Batch) -> Result<(), StoreError> {
        let mut s = self.lock();
        match &s.batch {
            Some(b) if b.version == batch.version => s.batch = None,
            Some(b) => {
                return Err(StoreError::conflict(
                    "batch#provisioner",
                    format!("stored version {}", b.version),
                ));
            }
            None => {}
        }
        Ok(())
    }

    async fn acquire_lease(&self, lease: &Lease, now: Timestamp) -> Result<bool, StoreError> {
        let mut s = self.lock();
        let free = match s.leases.get(&lease.name) {
            None => true,
            Some(l) => l.expires_at <= now || l.holder == lease.holder,
        };
        if free {
            s.leases.insert(lease.name.clone(), lease.clone());
        }
        Ok(free)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        let mut s = self.lock();
        if s.leases.get(name).is_some_and(|l| l.holder == holder) {
            s.leases.remove(name);
        }
        Ok(())
    }

    async fn commands(&self) -> Result<Vec<Command>, StoreError> {
        let mut commands: Vec<Command> = self.lock().commands.values().cloned().collect();
        commands.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(commands)
    }

    async fn put_command(
        &self,
        previous: Option<&Command>,
        next: &Command,
    ) -> Result<(), StoreError> {
        crate::ports::check_command_write(previous, next)?;
        let mut s = self.lock();
        let stored = s.commands.get(&next.id).map(|c| c.version);
        if stored != previous.map(|c| c.version)
            || s.raw.contains_key(&format!("{COMMAND_PREFIX}{}", next.id))
        {
            return Err(StoreError::conflict(
                format!("{COMMAND_PREFIX}{}", next.id),
                match (previous, stored) {
                    (None, _) => "already exists".to_owned(),
                    (Some(p), None) => format!("gone (expected version {})", p.version),
                    (Some(p), Some(v)) => format!("version {v} is not {}", p.version),
                },
            ));
        }
        s.commands.insert(next.id.clone(), next.clone());
        Ok(())
    }

    async fn delete_command(&self, command: &Command) -> Result<(), StoreError> {
        let mut s = self.lock();
        match s.commands.get(&command.id) {
            None => Ok(()),
            Some(c) if c.version == command.version => {
                s.commands.remove(&command.id);
                Ok(())
            }
            Some(c) => Err(StoreError::conflict(
                format!("{COMMAND_PREFIX}{}", command.id),
                format!("version {} is not {}", c.version, command.version),
            )),
        }
    }

    async fn mark_unavailable(
        &self,
        offering: &OfferingKey,
        until: Timestamp,
    ) -> Result<(), StoreError> {
        let mut s = self.lock();
        let entry = s.unavailable.entry(offering.clone()).or_insert(until);
        *entry = (*entry).max(until);
        Ok(())
    }

    async fn unavailable_offerings(&self, now: Timestamp) -> Result<Vec<OfferingKey>, StoreError> {
        let mut s = self.lock();
        // Expiry is checked in code, as with DynamoDB's lazy TTL deletion.
        s.unavailable.retain(|_, until| *until > now);
        Ok(s.unavailable.keys().cloned().collect())
    }
}
