//! Fault injection over any adapter, for tests and scenarios: the moto
//! emulator and the in-memory cloud never run out of capacity or fail on
//! their own, so the failure paths are exercised through these decorators.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Interleave;
use crate::config::{ConfigItem, ConfigKind, Limits};
use crate::model::claim::Claim;
use crate::model::{
    Batch, CloudCatalog, Command, Instance, LaunchRequest, Launched, Lease, OfferingKey, Timestamp,
    Usage,
};
use crate::ports::{Cloud, CloudError, FailureKind, ServiceError, Store, StoreError};

#[derive(Debug, Default)]
struct CloudFaults {
    no_capacity: BTreeSet<OfferingKey>,
    fail_launches: usize,
    launch_calls: usize,
    instances_calls: usize,
}

/// A `Cloud` whose launches can run out of capacity per offering, or fail
/// transiently a number of times (as a crash after the claim write would).
#[derive(Debug, Clone)]
pub struct FaultyCloud<C> {
    inner: C,
    faults: Arc<Mutex<CloudFaults>>,
}

impl<C: Cloud> FaultyCloud<C> {
    pub fn new(inner: C) -> Self {
        FaultyCloud {
            inner,
            faults: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CloudFaults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// Launches of this offering fail with insufficient capacity.
    pub fn remove_capacity(&self, offering: OfferingKey) {
        self.lock().no_capacity.insert(offering);
    }

    /// The next `n` launches fail with a transient error before reaching the cloud.
    pub fn fail_next_launches(&self, n: usize) {
        self.lock().fail_launches = n;
    }

    /// Launch calls seen, failed ones included.
    pub fn launch_calls(&self) -> usize {
        self.lock().launch_calls
    }

    /// Instance listings seen (garbage collection's comparison).
    pub fn instances_calls(&self) -> usize {
        self.lock().instances_calls
    }
}

impl<C: Cloud> Cloud for FaultyCloud<C> {
    async fn catalog(&self) -> Result<Arc<CloudCatalog>, CloudError> {
        self.inner.catalog().await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        let mut request = request.clone();
        let mut unavailable = Vec::new();
        {
            let mut f = self.lock();
            f.launch_calls += 1;
            if f.fail_launches > 0 {
                f.fail_launches -= 1;
                return Err(CloudError::transient(
                    "CreateFleet",
                    "injected: connection reset before it answered",
                ));
            }
            request.options.retain(|o| {
                let key = OfferingKey {
                    capacity_type: o.capacity_type.clone(),
                    instance_type: o.instance_type.clone(),
                    zone: o.zone.clone(),
                };
                let out = f.no_capacity.contains(&key);
                if out {
                    unavailable.push(key);
                }
                !out
            });
        }
        if request.options.is_empty() {
            return Err(CloudError::InsufficientCapacity {
                offerings: unavailable,
                message: "injected: InsufficientInstanceCapacity".to_owned(),
            });
        }
        let mut launched = self.inner.launch(&request).await?;
        launched.unavailable.extend(unavailable);
        Ok(launched)
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        self.inner.terminate(instance_ids).await
    }

    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.lock().instances_calls += 1;
        self.inner.instances().await
    }

    async fn launch_templates(&self) -> Result<Vec<crate::model::LaunchTemplate>, CloudError> {
        self.inner.launch_templates().await
    }

    async fn delete_launch_template(
        &self,
        template: &crate::model::LaunchTemplate,
    ) -> Result<bool, CloudError> {
        self.inner.delete_launch_template(template).await
    }

    async fn resolved_class(
        &self,
        class: &crate::config::NodeClass,
    ) -> Result<crate::model::ResolvedClass, CloudError> {
        self.inner.resolved_class(class).await
    }

    async fn capacity_reservations(
        &self,
    ) -> Result<Vec<crate::cloud::CapacityReservation>, CloudError> {
        self.inner.capacity_reservations().await
    }

    async fn instance_health(&self) -> Result<Vec<crate::model::InstanceHealth>, CloudError> {
        self.inner.instance_health().await
    }
}

/// Writes of any kind that are to fail, as DynamoDB throttling or a lost
/// conditional write would make them.
#[derive(Debug, Default)]
struct WriteFaults {
    /// The next writes fail with a transient error (throughput exceeded).
    throttle: usize,
    /// The next conditional writes fail as if another writer won.
    conflict: usize,
    /// The next writes are refused as a KMS key or an IAM policy would
    /// refuse them (nothing written).
    deny: usize,
    throttled: usize,
    conflicted: usize,
    denied: usize,
}

/// A `Store` whose claim updates can be made to fail, as a crash right
/// after a launch (before its instance is recorded) would; whose
/// removal-command writes can fail between two steps; and whose writes can
/// be throttled or lose their condition.
#[derive(Debug, Clone)]
pub struct FaultyStore<S> {
    inner: S,
    fail_updates: Arc<Mutex<usize>>,
    /// Command writes left before one fails (a crash between two steps).
    command_crash: Arc<Mutex<Option<usize>>>,
    writes: Arc<Mutex<WriteFaults>>,
    /// Told of every read (see [`Interleave`]).
    interleave: Interleave,
}

impl<S: Store> FaultyStore<S> {
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            fail_updates: Arc::default(),
            command_crash: Arc::default(),
            writes: Arc::default(),
            interleave: Interleave::default(),
        }
    }

    /// Reports every read to `interleave` (shared with the cluster's
    /// decorator, another function's writes can run between any two reads).
    pub fn with_interleave(mut self, interleave: Interleave) -> Self {
        self.interleave = interleave;
        self
    }

    /// A read, reported once it has returned.
    async fn read<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let out = call.await;
        self.interleave.read_done(what).await;
        out
    }

    /// The next `n` writes (configuration excepted) fail with a transient
    /// error, as DynamoDB's `ProvisionedThroughputExceededException` does;
    /// nothing is written.
    pub fn throttle_next_writes(&self, n: usize) {
        self.lock_writes().throttle = n;
    }

    /// The next `n` writes (configuration excepted) are refused with an
    /// access error, as a KMS key the table's encryption can no longer use
    /// or a missing IAM grant refuses them; nothing is written.
    pub fn deny_next_writes(&self, n: usize) {
        self.lock_writes().deny = n;
    }

    /// Writes refused with an access error so far.
    pub fn writes_denied(&self) -> usize {
        self.lock_writes().denied
    }

    /// The next `n` conditional writes of claims, the batch and removal
    /// commands fail with `Conflict`, as if another invocation had written
    /// first; nothing is written.
    pub fn conflict_next_writes(&self, n: usize) {
        self.lock_writes().conflict = n;
    }

    /// (Writes throttled, writes failed as conflicts) so far.
    pub fn write_faults(&self) -> (usize, usize) {
        let w = self.lock_writes();
        (w.throttled, w.conflicted)
    }

    fn lock_writes(&self) -> MutexGuard<'_, WriteFaults> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The injected failure of the write about to happen, if any.
    fn write_fault(&self, what: &str, conditional: bool) -> Result<(), StoreError> {
        let mut w = self.lock_writes();
        if w.deny > 0 {
            w.deny -= 1;
            w.denied += 1;
            return Err(StoreError::Service(
                ServiceError::new(
                    FailureKind::AccessDenied,
                    format!(
                        "injected: {what}: KMSAccessDeniedException: the table's key refuses the call"
                    ),
                )
                .with_operation(what)
                .with_code(Some("KMSAccessDeniedException".to_owned())),
            ));
        }
        if w.throttle > 0 {
            w.throttle -= 1;
            w.throttled += 1;
            return Err(StoreError::Service(
                ServiceError::new(
                    FailureKind::Throttled,
                    format!("injected: {what}: ProvisionedThroughputExceededException"),
                )
                .with_operation(what)
                .with_code(Some("ProvisionedThroughputExceededException".to_owned())),
            ));
        }
        if conditional && w.conflict > 0 {
            w.conflict -= 1;
            w.conflicted += 1;
            return Err(StoreError::conflict(
                what,
                "injected: changed since it was read",
            ));
        }
        Ok(())
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The next `n` claim updates fail with a transient error.
    pub fn fail_next_claim_updates(&self, n: usize) {
        *self.fail_updates.lock().unwrap_or_else(|e| e.into_inner()) = n;
    }

    /// After `n` more successful removal-command writes, the next one fails
    /// once with a transient error — as if the invocation died between two
    /// steps, after the step's effect and before its record.
    pub fn crash_after_command_writes(&self, n: usize) {
        *self.command_crash.lock().unwrap_or_else(|e| e.into_inner()) = Some(n);
    }

    /// Whether a planned crash is still to come.
    pub fn crash_pending(&self) -> bool {
        self.command_crash
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

impl<S: Store> Store for FaultyStore<S> {
    async fn config_items(&self) -> Result<Vec<ConfigItem>, StoreError> {
        self.read("store: config items", self.inner.config_items())
            .await
    }
    async fn config_version(&self) -> Result<u64, StoreError> {
        self.read("store: config version", self.inner.config_version())
            .await
    }
    async fn put_config_item(&self, item: &ConfigItem) -> Result<(), StoreError> {
        self.inner.put_config_item(item).await
    }
    async fn write_config(&self, writes: &[crate::config::ConfigWrite]) -> Result<(), StoreError> {
        self.inner.write_config(writes).await
    }
    async fn delete_config_item(&self, kind: ConfigKind, name: &str) -> Result<(), StoreError> {
        self.inner.delete_config_item(kind, name).await
    }
    async fn claims(&self) -> Result<Vec<Claim>, StoreError> {
        self.read("store: claims", self.inner.claims()).await
    }
    async fn state(&self, now: Timestamp) -> Result<crate::ports::StateRead, StoreError> {
        self.read("store: state", self.inner.state(now)).await
    }
    async fn unreadable_state(&self) -> Result<Vec<crate::ports::Unreadable>, StoreError> {
        self.read("store: unreadable state", self.inner.unreadable_state())
            .await
    }
    async fn create_claim(&self, claim: &Claim, limits: &Limits) -> Result<(), StoreError> {
        self.write_fault("claim create", true)?;
        self.inner.create_claim(claim, limits).await
    }
    async fn update_claim(
        &self,
        previous: &Claim,
        next: &Claim,
        limits: &Limits,
    ) -> Result<(), StoreError> {
        self.write_fault("claim update", true)?;
        {
            let mut n = self.fail_updates.lock().unwrap_or_else(|e| e.into_inner());
            if *n > 0 {
                *n -= 1;
                return Err(StoreError::transient(
                    format!("updating nodeclaim {}", next.id),
                    "injected: the function stopped before the write",
                ));
            }
        }
        self.inner.update_claim(previous, next, limits).await
    }
    async fn delete_claim(&self, claim: &Claim) -> Result<(), StoreError> {
        self.write_fault("claim delete", true)?;
        self.inner.delete_claim(claim).await
    }
    async fn pool_usage(&self) -> Result<std::collections::BTreeMap<String, Usage>, StoreError> {
        self.read("store: pool usage", self.inner.pool_usage())
            .await
    }
    async fn batch(&self) -> Result<Option<Batch>, StoreError> {
        self.read("store: batch", self.inner.batch()).await
    }
    async fn put_batch(&self, previous: Option<&Batch>, next: &Batch) -> Result<(), StoreError> {
        self.write_fault("batch", true)?;
        self.inner.put_batch(previous, next).await
    }
    async fn delete_batch(&self, batch: &Batch) -> Result<(), StoreError> {
        self.write_fault("batch delete", true)?;
        self.inner.delete_batch(batch).await
    }
    async fn acquire_lease(&self, lease: &Lease, now: Timestamp) -> Result<bool, StoreError> {
        self.write_fault("lease", false)?;
        self.inner.acquire_lease(lease, now).await
    }
    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        self.inner.release_lease(name, holder).await
    }
    async fn commands(&self) -> Result<Vec<Command>, StoreError> {
        self.read("store: commands", self.inner.commands()).await
    }
    async fn put_command(
        &self,
        previous: Option<&Command>,
        next: &Command,
    ) -> Result<(), StoreError> {
        self.write_fault("removal command", true)?;
        {
            let mut crash = self.command_crash.lock().unwrap_or_else(|e| e.into_inner());
            match *crash {
                Some(0) => {
                    *crash = None;
                    return Err(StoreError::transient(
                        format!("recording command {} step {:?}", next.id, next.step),
                        "injected: crash before the write",
                    ));
                }
                Some(n) => *crash = Some(n - 1),
                None => {}
            }
        }
        self.inner.put_command(previous, next).await
    }
    async fn delete_command(&self, command: &Command) -> Result<(), StoreError> {
        self.write_fault("removal command delete", true)?;
        self.inner.delete_command(command).await
    }
    async fn mark_unavailable(
        &self,
        offering: &OfferingKey,
        until: Timestamp,
    ) -> Result<(), StoreError> {
        self.write_fault("unavailable offering", false)?;
        self.inner.mark_unavailable(offering, until).await
    }
    async fn unavailable_offerings(&self, now: Timestamp) -> Result<Vec<OfferingKey>, StoreError> {
        self.read(
            "store: unavailable offerings",
            self.inner.unavailable_offerings(now),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::MemStore;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn throttled_writes_fail_transiently_and_write_nothing() {
        block_on(async {
            let store = FaultyStore::new(MemStore::new());
            let offering = OfferingKey {
                capacity_type: "spot".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
            };
            let until = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_mins(3);
            store.throttle_next_writes(2);
            for _ in 0..2 {
                let e = store
                    .mark_unavailable(&offering, until)
                    .await
                    .expect_err("throttled");
                assert_eq!(e.failure_kind(), Some(FailureKind::Throttled), "{e}");
                assert!(e.is_retryable(), "{e}");
            }
            assert!(
                store
                    .unavailable_offerings(Timestamp::UNIX_EPOCH)
                    .await
                    .expect("read")
                    .is_empty(),
                "nothing written"
            );
            store
                .mark_unavailable(&offering, until)
                .await
                .expect("the third goes through");
            assert_eq!(
                store
                    .unavailable_offerings(Timestamp::UNIX_EPOCH)
                    .await
                    .expect("read"),
                vec![offering]
            );
            assert_eq!(store.write_faults(), (2, 0));
        });
    }

    #[test]
    fn conflicts_hit_conditional_writes_only() {
        block_on(async {
            let store = FaultyStore::new(MemStore::new());
            store.conflict_next_writes(1);
            let offering = OfferingKey {
                capacity_type: "spot".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1a".into(),
            };
            // Not conditional: untouched, and the conflict still pending.
            store
                .mark_unavailable(&offering, Timestamp::UNIX_EPOCH)
                .await
                .expect("unconditional");
            let batch = Batch {
                version: 1,
                ..Batch::default()
            };
            let e = store
                .put_batch(None, &batch)
                .await
                .expect_err("lost its condition");
            assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
            assert!(
                store.batch().await.expect("read").is_none(),
                "nothing written"
            );
            store
                .put_batch(None, &batch)
                .await
                .expect("the retry goes through");
            assert_eq!(store.write_faults(), (0, 1));
        });
    }
}
