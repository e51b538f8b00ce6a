//! One contract harness for the three ports: a test body per behaviour,
//! generic over what it needs, run once per adapter by [`contract!`] so the
//! simulator's adapters answer as the real ones do.
//!
//! | port      | suite                          | adapters (fixtures)                          |
//! |-----------|--------------------------------|----------------------------------------------|
//! | `Store`   | `tests/suite/store_contract.rs`   | `MemStore`, `DynamoStore` on the emulator ([`store`]) |
//! | `Cluster` | `tests/suite/cluster_contract.rs` | `SimCluster`, `KubeCluster` on kube-apiserver ([`cluster`]) |
//! | `Cloud`   | `tests/suite/cloud_contract.rs`   | `SimCloud`, `Ec2Cloud` on the emulator ([`cloud`]) |
//!
//! A fixture is an `async fn(test: &str) -> F`: it makes a world of its own
//! for the test named `test` (tables, a namespace, a VPC and cluster), and
//! `F` is what the bodies take — the port itself for the store, a
//! [`cluster::ContractCluster`] or a [`cloud::ContractCloud`] (the port plus
//! set-up and observation the port does not offer) for the others.

pub mod cloud;
pub mod cluster;
pub mod store;

/// Turns each generic body into one test per adapter:
///
/// ```ignore
/// nodewright_tests::contract! {
///     [mem => nodewright_tests::contract::store::mem,
///      dynamo => nodewright_tests::contract::store::dynamo]
///     commands_are_created_once,
///     leases_have_one_holder,
/// }
/// ```
///
/// makes `commands_are_created_once::mem`, `commands_are_created_once::dynamo`
/// and so on, each calling `commands_are_created_once(&fixture("commands_are_created_once").await)`
/// on a multi-threaded runtime. Filter by body (`store_contract::leases_`)
/// or by adapter (`store_contract:: dynamo`… as a name ends with it).
#[macro_export]
macro_rules! contract {
    ([$($fixtures:tt)*] $($bodies:tt)*) => {
        $crate::contract!(@each [$($fixtures)*] $($bodies)*);
    };
    (@each [$($fixtures:tt)*]) => {};
    (@each [$($fixtures:tt)*] $body:ident $(, $($rest:tt)*)?) => {
        $crate::contract!(@one $body [$($fixtures)*]);
        $crate::contract!(@each [$($fixtures)*] $($($rest)*)?);
    };
    (@one $body:ident [$($adapter:ident => $fixture:path),+ $(,)?]) => {
        mod $body {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $adapter() {
                    super::$body(&$fixture(stringify!($body)).await).await;
                }
            )+
        }
    };
}
