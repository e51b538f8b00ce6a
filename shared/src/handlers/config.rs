//! Reading the configuration items from the Store into validated NodePools.

use std::hash::{Hash, Hasher};

use tracing::warn;

use crate::config::{NodePool, NodePoolSpec};
use crate::ports::{ConfigKind, Store, StoreError};

/// The NodePools in force, and a fingerprint that changes whenever any
/// configuration item changes.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    pub pools: Vec<NodePool>,
    /// The Settings item (defaults when there is none).
    pub settings: crate::config::Settings,
    pub fingerprint: u64,
}

impl LoadedConfig {
    pub fn pool(&self, name: &str) -> Option<&NodePool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// A pool's limits; none for a pool that no longer exists.
    pub fn limits(&self, pool: &str) -> crate::config::Limits {
        self.pool(pool).map(|p| p.limits.clone()).unwrap_or_default()
    }
}

/// Loads and validates the NodePools. An item that fails validation is
/// logged with its field and reason and left out: one bad item must not stop
/// the others (the CLI refuses to write invalid items in the first place).
pub async fn load<S: Store>(store: &S) -> Result<LoadedConfig, StoreError> {
    let mut items = store.config_items().await?;
    items.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut pools = Vec::new();
    for item in &items {
        (item.kind, &item.name, item.version).hash(&mut hasher);
        if item.kind != ConfigKind::NodePool {
            continue;
        }
        let pool = serde_json::from_value::<NodePoolSpec>(item.spec.clone())
            .map_err(|e| format!("nodepool/{}: spec: {e}", item.name))
            .and_then(|spec| NodePool::from_spec(&item.name, &spec).map_err(|e| e.to_string()));
        match pool {
            Ok(mut p) => {
                p.annotations.clone_from(&item.annotations);
                pools.push(p)
            }
            Err(reason) => warn!(item = %item.name, %reason, "ignoring invalid configuration item"),
        }
    }
    Ok(LoadedConfig { pools, settings: crate::config::Settings::default(), fingerprint: hasher.finish() })
}
