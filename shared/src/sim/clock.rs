//! A clock the simulation moves by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::ports::{Clock, SignedDuration, Timestamp};

/// Simulated time in milliseconds since the epoch; clones share the time.
#[derive(Debug, Clone)]
pub struct SimClock {
    millis: Arc<AtomicI64>,
}

impl SimClock {
    pub fn starting_at(t: Timestamp) -> Self {
        SimClock {
            millis: Arc::new(AtomicI64::new(t.as_millisecond())),
        }
    }

    pub fn set(&self, t: Timestamp) {
        self.millis.store(t.as_millisecond(), Ordering::SeqCst);
    }

    pub fn advance(&self, d: SignedDuration) {
        self.millis
            .fetch_add(d.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Default for SimClock {
    /// 2026-01-01T00:00:00Z: a fixed start makes runs reproducible.
    fn default() -> Self {
        SimClock::starting_at(
            Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH),
        )
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millisecond(self.millis.load(Ordering::SeqCst))
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }
}
