//! The one set of variables every command and function reads, with flags
//! that override them: `NODEWRIGHT_CLUSTER_NAME`, `NODEWRIGHT_TABLE_PREFIX`
//! (tables `<prefix>-config` and `<prefix>-state`).

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The EKS cluster.
    #[arg(long, env = "NODEWRIGHT_CLUSTER_NAME", global = true)]
    pub cluster_name: Option<String>,
    /// The tables are `<prefix>-config` and `<prefix>-state`.
    #[arg(
        long,
        env = "NODEWRIGHT_TABLE_PREFIX",
        default_value = "nodewright",
        global = true
    )]
    pub table_prefix: String,
    /// AWS region (default: from the environment).
    #[arg(long, global = true)]
    pub region: Option<String>,
}

#[cfg(feature = "aws")]
impl Target {
    pub fn tables(&self) -> nodewright::aws::DynamoTables {
        nodewright::aws::DynamoTables::with_prefix(&self.table_prefix)
    }

    pub async fn store(&self) -> nodewright::aws::DynamoStore {
        let options = nodewright::aws::ClientOptions {
            region: self.region.clone(),
            ..Default::default()
        };
        let sdk = nodewright::aws::sdk_config(&options).await;
        nodewright::aws::DynamoStore::new(&sdk, self.tables())
    }
}
