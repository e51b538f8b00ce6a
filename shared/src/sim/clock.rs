//! A clock the simulation moves by hand — or one that follows the wall
//! clock, for runs beside components that live in real time (a real
//! kube-scheduler and kube-controller-manager).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::model::{SignedDuration, Timestamp};
use crate::ports::Clock;

/// Simulated time in milliseconds since the epoch; clones share the time.
#[derive(Debug, Clone)]
pub struct SimClock {
    millis: Arc<AtomicI64>,
    /// Reads the system clock; cannot be moved (`SimClock::wall`).
    wall: bool,
}

impl SimClock {
    pub fn starting_at(t: Timestamp) -> Self {
        SimClock {
            millis: Arc::new(AtomicI64::new(t.as_millisecond())),
            wall: false,
        }
    }

    /// A clock that reads the system clock. The simulation then waits for
    /// what is due instead of jumping to it (`Simulation::run_until`), so
    /// the handlers run at the pace of a real cluster's controllers beside
    /// them; `set` and `advance` do nothing.
    pub fn wall() -> Self {
        SimClock {
            millis: Arc::new(AtomicI64::new(0)),
            wall: true,
        }
    }

    /// Whether this clock follows the system clock (`SimClock::wall`).
    pub fn follows_wall(&self) -> bool {
        self.wall
    }

    pub fn set(&self, t: Timestamp) {
        if !self.wall {
            self.millis.store(t.as_millisecond(), Ordering::SeqCst);
        }
    }

    pub fn advance(&self, d: SignedDuration) {
        if !self.wall {
            self.millis
                .fetch_add(d.as_millis() as i64, Ordering::SeqCst);
        }
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
        if self.wall {
            return Timestamp::now();
        }
        Timestamp::from_millisecond(self.millis.load(Ordering::SeqCst))
            .unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_reads_the_system_clock_and_cannot_be_moved() {
        let clock = SimClock::wall();
        let before = Timestamp::now();
        clock.set(Timestamp::UNIX_EPOCH);
        clock.advance(SignedDuration::from_hours(5));
        let read = clock.now();
        assert!(read >= before && read <= Timestamp::now(), "{read}");
        assert!(clock.follows_wall());
        let manual = SimClock::starting_at(Timestamp::UNIX_EPOCH);
        manual.advance(SignedDuration::from_secs(3));
        assert_eq!(manual.now().as_second(), 3);
        assert!(!manual.follows_wall());
    }
}
