//! Fixtures of the `Store` contract (`tests/suite/store_contract.rs`): the
//! in-memory store and `DynamoStore` on two fresh tables of the emulator;
//! and [`ByHand`], writing items under their key as an operator's edit or
//! an older release might.

use nodewright::aws::DynamoStore;
use nodewright::ports::Store;
use nodewright::sim::MemStore;

/// The region the store's tables are made in.
pub const REGION: &str = "us-east-1";

/// An empty in-memory store.
pub async fn mem(_test: &str) -> MemStore {
    MemStore::new()
}

/// A `DynamoStore` over two tables of its own on the emulator.
pub async fn dynamo(_test: &str) -> DynamoStore {
    crate::aws::dynamo_store(REGION).await
}

/// Items written and deleted by hand under their DynamoDB key, readable or not.
#[allow(async_fn_in_trait)]
pub trait ByHand: Store {
    async fn put_by_hand(&self, key: &str, body: &str, version: u64);
    async fn delete_by_hand(&self, key: &str);
}

impl ByHand for MemStore {
    async fn put_by_hand(&self, key: &str, body: &str, version: u64) {
        self.put_raw(key, body, version)
            .expect("a key of the store");
    }
    async fn delete_by_hand(&self, key: &str) {
        self.delete_raw(key).expect("a key of the store");
    }
}

impl ByHand for DynamoStore {
    async fn put_by_hand(&self, key: &str, body: &str, version: u64) {
        crate::aws::put_raw_item(self, REGION, key, body, version).await;
    }
    async fn delete_by_hand(&self, key: &str) {
        crate::aws::delete_raw_item(self, REGION, key).await;
    }
}
