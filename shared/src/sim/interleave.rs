//! Another function's writes run between a handler's reads, at the read
//! a test picks: the fault decorators ([`super::FaultyStore`],
//! [`super::FaultyCluster`]) share one [`Interleave`] and report every
//! read to it, so a test can drive a race (the provisioner registering a
//! node while the disruption decision gathers its view, say) one
//! interleaving at a time instead of hoping a timing shows it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

/// A write of another function, run between two reads.
pub type Step = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

#[derive(Default)]
struct State {
    /// Counting (since [`Interleave::start`]).
    armed: bool,
    /// The reads seen since then, in order.
    reads: Vec<String>,
    /// Steps to run once this many reads have been seen.
    due: BTreeMap<usize, Vec<Step>>,
}

/// Reads counted across the decorators that share it, and the steps to
/// run after a given one. Unarmed (the default) it counts nothing and
/// runs nothing.
#[derive(Clone, Default)]
pub struct Interleave(Arc<Mutex<State>>);

impl std::fmt::Debug for Interleave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Interleave")
            .field("armed", &s.armed)
            .field("reads", &s.reads)
            .field("due", &s.due.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Interleave {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts reads from zero again, with no step due.
    pub fn start(&self) {
        let mut s = self.lock();
        s.armed = true;
        s.reads.clear();
        s.due.clear();
    }

    /// Stops counting; steps not yet run are dropped.
    pub fn stop(&self) {
        let mut s = self.lock();
        s.armed = false;
        s.due.clear();
    }

    /// Runs `step` right after the `n`-th read since [`Self::start`]
    /// (`n` ≥ 1) has returned, before the reader goes on.
    pub fn after_read(&self, n: usize, step: Step) {
        self.lock().due.entry(n).or_default().push(step);
    }

    /// The reads seen since [`Self::start`], in order.
    pub fn reads(&self) -> Vec<String> {
        self.lock().reads.clone()
    }

    /// Steps still waiting for their read.
    pub fn pending(&self) -> usize {
        self.lock().due.values().map(Vec::len).sum()
    }

    /// A decorator's read `what` has returned: the steps due now run.
    pub(crate) async fn read_done(&self, what: &str) {
        let steps = {
            let mut s = self.lock();
            if !s.armed {
                return;
            }
            s.reads.push(what.to_owned());
            let n = s.reads.len();
            s.due.remove(&n).unwrap_or_default()
        };
        for step in steps {
            step().await;
        }
    }
}
