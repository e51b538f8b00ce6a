//! [`FaultyCloud`]: a decorator over any [`Cloud`] that injects the
//! failures real EC2 produces and emulators do not — offerings out of
//! capacity (as CreateFleet reports them) and one-off launch errors — and
//! records every launch request. Used by the tests against the emulator
//! and usable around the in-memory cloud.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ports::{Cloud, CloudCatalog, CloudError, Instance, LaunchRequest, Launched, OfferingKey};
use crate::scheduling::labels;

#[derive(Debug, Default)]
struct Faults {
    out_of_capacity: BTreeSet<OfferingKey>,
    next_launch_errors: VecDeque<CloudError>,
    launches: Vec<LaunchRequest>,
}

/// A [`Cloud`] whose launches can be made to fail.
#[derive(Debug)]
pub struct FaultyCloud<C> {
    inner: C,
    faults: Mutex<Faults>,
}

impl<C: Cloud> FaultyCloud<C> {
    pub fn new(inner: C) -> FaultyCloud<C> {
        FaultyCloud { inner, faults: Mutex::new(Faults::default()) }
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// From now on this offering has no capacity (until [`FaultyCloud::restore`]).
    pub fn out_of_capacity(&self, offering: OfferingKey) {
        self.faults().out_of_capacity.insert(offering);
    }

    pub fn restore(&self, offering: &OfferingKey) {
        self.faults().out_of_capacity.remove(offering);
    }

    /// The next launch fails with `error` (queued: one error per launch).
    pub fn fail_next_launch(&self, error: CloudError) {
        self.faults().next_launch_errors.push_back(error);
    }

    /// Every launch request seen, in order.
    pub fn launch_requests(&self) -> Vec<LaunchRequest> {
        self.faults().launches.clone()
    }
}

impl<C: Cloud> Cloud for FaultyCloud<C> {
    async fn catalog(&self) -> Result<Arc<CloudCatalog>, CloudError> {
        self.inner.catalog().await
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        let (forwarded, unavailable) = {
            let mut f = self.faults();
            f.launches.push(request.clone());
            if let Some(e) = f.next_launch_errors.pop_front() {
                return Err(e);
            }
            // As CreateFleet: spot when any spot option is present, and only
            // options of that capacity type are tried.
            let ct = if request.options.iter().any(|o| o.capacity_type == labels::CAPACITY_TYPE_SPOT) {
                labels::CAPACITY_TYPE_SPOT
            } else {
                labels::CAPACITY_TYPE_ON_DEMAND
            };
            let key = |o: &crate::ports::PricedOffering| OfferingKey {
                capacity_type: o.capacity_type.clone(),
                instance_type: o.instance_type.clone(),
                zone: o.zone.clone(),
            };
            let unavailable: Vec<OfferingKey> = request
                .options
                .iter()
                .filter(|o| o.capacity_type == ct)
                .map(key)
                .filter(|k| f.out_of_capacity.contains(k))
                .collect();
            let left = request.options.iter().filter(|o| o.capacity_type == ct && !unavailable.contains(&key(o))).count();
            if left == 0 {
                return Err(CloudError::InsufficientCapacity {
                    message: format!("InsufficientInstanceCapacity (injected) for {} option(s)", unavailable.len()),
                    offerings: unavailable,
                });
            }
            let mut forwarded = request.clone();
            forwarded.options.retain(|o| !unavailable.contains(&key(o)));
            (forwarded, unavailable)
        };
        let mut launched = self.inner.launch(&forwarded).await?;
        for k in unavailable {
            if !launched.unavailable.contains(&k) {
                launched.unavailable.push(k);
            }
        }
        Ok(launched)
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        self.inner.terminate(instance_ids).await
    }

    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        self.inner.instances().await
    }
}
