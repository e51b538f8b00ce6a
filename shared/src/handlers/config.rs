//! Reading the configuration items from the Store into validated NodePools,
//! NodeClasses and Settings — every tick, cheaply.
//!
//! [`ConfigReader::read`] asks the Store for its configuration version (one
//! consistent read) and scans the items only when it moved, or when the
//! last scan is older than [`MAX_STALENESS`] (items written by hand, without
//! the counter, are seen within it). Validation is
//! [`crate::config::resolve_items`], the same the CLI applies before writing.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use crate::config::{ConfigError, ConfigKind, NodeClass, NodePool, Settings, resolve_items};
use crate::model::{SignedDuration, Timestamp};
use crate::ports::{Store, StoreError};

/// A full scan happens at least this often even if the version did not move.
pub const MAX_STALENESS: SignedDuration = SignedDuration::from_secs(60);

/// The configuration in force, and a fingerprint that changes whenever any
/// configuration item changes.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    /// Valid NodePools whose NodeClass exists and is valid, with the class's
    /// kubelet settings merged in.
    pub pools: Vec<NodePool>,
    pub node_classes: Vec<NodeClass>,
    /// Valid CapacityBuffers (spare capacity kept as virtual pods).
    pub buffers: Vec<crate::config::CapacityBuffer>,
    /// The stored `settings#default`, or the defaults.
    pub settings: Settings,
    /// Whether a settings item is stored (else `settings` are the defaults).
    pub settings_stored: bool,
    pub fingerprint: u64,
    /// The Store's configuration version this was read at.
    pub version: u64,
    /// Items left out, each with its field and reason (pools whose NodeClass
    /// is missing or invalid included).
    pub invalid: Vec<ConfigError>,
}

impl LoadedConfig {
    pub fn pool(&self, name: &str) -> Option<&NodePool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// A pool's limits; none for a pool that no longer exists.
    pub fn limits(&self, pool: &str) -> crate::config::Limits {
        self.pool(pool)
            .map(|p| p.limits.clone())
            .unwrap_or_default()
    }

    pub fn node_class(&self, name: &str) -> Option<&NodeClass> {
        self.node_classes.iter().find(|c| c.name == name)
    }

    /// The NodeClass a launch of `pool` uses (by the claim's recorded name).
    pub fn node_class_for(&self, name: Option<&str>) -> Option<NodeClass> {
        name.and_then(|n| self.node_class(n)).cloned()
    }

    /// Why nothing can be launched for pods when no pool is valid, naming
    /// the pools that exist but are left out (else the solver's "no NodePool
    /// exists" would mislead).
    pub fn no_pool_reason(&self) -> Option<String> {
        let left_out: Vec<String> = self
            .invalid
            .iter()
            .filter(|e| e.item.starts_with("nodepool/"))
            .map(ToString::to_string)
            .collect();
        (self.pools.is_empty() && !left_out.is_empty())
            .then(|| format!("no valid NodePool: {}", left_out.join("; ")))
    }
}

/// Loads and validates everything (one full scan). An item that fails
/// validation is left out and listed in `invalid`: one bad item must not stop
/// the others (the CLI refuses to write invalid items in the first place).
pub async fn load<S: Store>(store: &S) -> Result<LoadedConfig, StoreError> {
    let version = store.config_version().await?;
    let mut items = store.config_items().await?;
    items.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for item in &items {
        // The spec too: a deleted and recreated item starts again at version 1.
        (item.kind, &item.name, item.version, item.spec.to_string()).hash(&mut hasher);
    }
    let resolved = resolve_items(&items);
    let mut invalid = resolved.errors;
    invalid.extend(resolved.not_ready);
    Ok(LoadedConfig {
        pools: resolved.set.node_pools,
        node_classes: resolved.set.node_classes,
        buffers: resolved.set.capacity_buffers,
        settings: resolved.set.settings,
        settings_stored: items.iter().any(|i| i.kind == ConfigKind::Settings),
        fingerprint: hasher.finish(),
        version,
        invalid,
    })
}

#[derive(Debug, Default)]
struct ReaderState {
    config: Option<(Arc<LoadedConfig>, Timestamp)>,
    /// The fingerprint whose invalid items were last logged.
    reported: Option<u64>,
}

/// The configuration as of the last version seen, shared by the invocations
/// of one process (clones share it), so a warm container re-reads only
/// what changed and reports an invalid item once per change.
#[derive(Debug, Clone, Default)]
pub struct ConfigReader {
    state: Arc<Mutex<ReaderState>>,
}

impl ConfigReader {
    pub fn new() -> ConfigReader {
        ConfigReader::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReaderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration now: the cached one when the Store's version has
    /// not moved (one read), else a fresh [`load`].
    pub async fn read<S: Store>(
        &self,
        store: &S,
        now: Timestamp,
    ) -> Result<Arc<LoadedConfig>, StoreError> {
        let version = store.config_version().await?;
        if let Some((config, at)) = &self.lock().config
            && config.version == version
            && now.duration_since(*at) < MAX_STALENESS
        {
            return Ok(config.clone());
        }
        let config = Arc::new(load(store).await?);
        let mut state = self.lock();
        if state.reported != Some(config.fingerprint) {
            state.reported = Some(config.fingerprint);
            report(&config);
        }
        state.config = Some((config.clone(), now));
        Ok(config)
    }
}

fn report(config: &LoadedConfig) {
    let classes: BTreeMap<&str, usize> = config
        .pools
        .iter()
        .filter_map(|p| p.node_class.as_deref())
        .fold(BTreeMap::new(), |mut m, c| {
            *m.entry(c).or_default() += 1;
            m
        });
    info!(
        version = config.version,
        nodepools = config.pools.len(),
        nodeclasses = config.node_classes.len(),
        invalid = config.invalid.len(),
        "configuration loaded: {} NodePool(s), {} NodeClass(es) in use",
        config.pools.len(),
        classes.len()
    );
    for e in &config.invalid {
        warn!(item = %e.item, field = %e.field, reason = %e.reason, "ignoring invalid configuration item");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::InstanceTypeInfo;
    use crate::config::{ConfigItem, ConfigWrite};
    use crate::sim::MemStore;
    use serde_json::json;

    fn item(kind: ConfigKind, name: &str, spec: serde_json::Value) -> ConfigItem {
        ConfigItem {
            kind,
            name: name.into(),
            spec,
            annotations: Default::default(),
            version: 1,
            updated_at: Timestamp::UNIX_EPOCH,
        }
    }

    fn class(kubelet: serde_json::Value) -> serde_json::Value {
        json!({"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
               "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
               "kubelet": kubelet})
    }

    fn pool(class: Option<&str>) -> serde_json::Value {
        match class {
            Some(c) => {
                json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": c}, "requirements": []}}})
            }
            None => json!({"template": {"spec": {"requirements": []}}}),
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn m5_large() -> InstanceTypeInfo {
        serde_json::from_value(json!({"name": "m5.large", "vcpu": 2, "memory_mib": 8192, "arch": "amd64", "max_enis": 3, "ipv4_per_eni": 10}))
            .expect("info")
    }

    #[test]
    fn the_class_kubelet_reaches_the_pools_allocatable() {
        let store = MemStore::new();
        let writes = [
            ConfigWrite::Put(item(
                ConfigKind::NodeClass,
                "c",
                class(json!({"maxPods": 3, "systemReserved": {"cpu": "300m"}})),
            )),
            ConfigWrite::Put(item(ConfigKind::NodePool, "p", pool(Some("c")))),
        ];
        block_on(store.write_config(&writes)).expect("written");
        let config = block_on(load(&store)).expect("loaded");
        let p = config.pool("p").expect("pool");
        assert_eq!(p.kubelet.max_pods, Some(3));
        assert_eq!(
            p.launch_kubelet.max_pods,
            Some(3.into()),
            "what the node launches with"
        );
        let t = m5_large().to_instance_type(vec![], &p.kubelet);
        assert_eq!(t.allocatable().pods, 3);
        assert_eq!(t.allocatable().cpu_millis, 2000 - 70 - 300);
        assert!(config.invalid.is_empty(), "{:?}", config.invalid);
    }

    #[test]
    fn pools_without_a_usable_class_are_left_out_and_reported() {
        let store = MemStore::new();
        let writes = [
            ConfigWrite::Put(item(ConfigKind::NodeClass, "broken", json!({"role": "r"}))),
            ConfigWrite::Put(item(ConfigKind::NodePool, "no-ref", pool(None))),
            ConfigWrite::Put(item(ConfigKind::NodePool, "missing", pool(Some("nope")))),
            ConfigWrite::Put(item(
                ConfigKind::NodePool,
                "on-broken",
                pool(Some("broken")),
            )),
        ];
        block_on(store.write_config(&writes)).expect("written");
        let config = block_on(load(&store)).expect("loaded");
        assert!(config.pools.is_empty());
        let got: Vec<(&str, &str)> = config
            .invalid
            .iter()
            .map(|e| (e.item.as_str(), e.field.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("nodeclass/broken", "spec.amiSelectorTerms"),
                ("nodeclass/broken", "spec.subnetSelectorTerms"),
                ("nodeclass/broken", "spec.securityGroupSelectorTerms"),
                ("nodepool/missing", "spec.template.spec.nodeClassRef.name"),
                ("nodepool/no-ref", "spec.template.spec.nodeClassRef"),
                ("nodepool/on-broken", "spec.template.spec.nodeClassRef.name"),
            ]
        );
        assert!(
            config.invalid[3].reason.contains("does not exist"),
            "{}",
            config.invalid[3].reason
        );
        assert!(
            config.invalid[5].reason.contains("is invalid"),
            "{}",
            config.invalid[5].reason
        );
        let reason = config.no_pool_reason().expect("a reason");
        assert!(
            reason.contains("nodepool/missing") && !reason.contains("no NodePool exists"),
            "{reason}"
        );
    }

    #[test]
    fn settings_item_and_defaults() {
        let store = MemStore::new();
        let config = block_on(load(&store)).expect("loaded");
        assert_eq!(config.settings, Settings::default());
        assert!(!config.settings_stored);
        let s = item(
            ConfigKind::Settings,
            "default",
            json!({"batchIdleDuration": "2s", "rebalancePolicy": "Cordon"}),
        );
        block_on(store.put_config_item(&s)).expect("written");
        let config = block_on(load(&store)).expect("loaded");
        assert!(config.settings_stored);
        assert_eq!(config.settings.batch_idle, SignedDuration::from_secs(2));
        assert_eq!(
            config.settings.rebalance_policy,
            crate::config::RebalancePolicy::Cordon
        );
    }

    #[test]
    fn the_reader_scans_only_when_the_version_moves() {
        let store = MemStore::new();
        let reader = ConfigReader::new();
        let t0 = Timestamp::UNIX_EPOCH;
        block_on(store.put_config_item(&item(ConfigKind::NodeClass, "c", class(json!({})))))
            .expect("class");
        block_on(store.put_config_item(&item(ConfigKind::NodePool, "p", pool(Some("c")))))
            .expect("pool");
        let a = block_on(reader.read(&store, t0)).expect("read");
        let b = block_on(reader.read(&store, t0 + SignedDuration::from_secs(1))).expect("read");
        assert!(
            Arc::ptr_eq(&a, &b),
            "nothing changed: the cached configuration"
        );
        // A NodeClass change reaches the next read.
        let mut changed = item(ConfigKind::NodeClass, "c", class(json!({"maxPods": 7})));
        changed.version = 2;
        block_on(store.put_config_item(&changed)).expect("changed");
        let c = block_on(reader.read(&store, t0 + SignedDuration::from_secs(2))).expect("read");
        assert!(!Arc::ptr_eq(&b, &c));
        assert_eq!(
            c.node_class("c").and_then(|c| c.kubelet.max_pods.clone()),
            Some(7.into())
        );
        assert_eq!(c.pool("p").and_then(|p| p.kubelet.max_pods), Some(7));
        // And a full scan after MAX_STALENESS even if the version did not move.
        let d = block_on(reader.read(&store, t0 + SignedDuration::from_secs(2) + MAX_STALENESS))
            .expect("read");
        assert!(!Arc::ptr_eq(&c, &d));
        assert_eq!(c.fingerprint, d.fingerprint);
    }
}
