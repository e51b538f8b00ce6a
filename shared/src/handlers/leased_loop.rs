//! The loop both scheduled handlers (the provisioner and disruption) run
//! inside an invocation: take the lease, retrying a transient failure
//! ([`lease_retry`]); tick until the deadline — or until a tick says the
//! invocation may end — sleeping until the next tick is due; release the
//! lease on the way out. A tick that fails transiently is counted and
//! retried at the next tick; any other failure ends the invocation.

use std::future::Future;

use tracing::{info, warn};

use super::HandlerError;
use super::metrics;
use crate::model::{Lease, SignedDuration, Timestamp};
use crate::ports::{Clock, PortSet, Store};

/// What one tick tells the loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// When the next tick is due (at the latest after the loop's poll).
    pub wake_at: Option<Timestamp>,
    /// The invocation may end now: nothing left to follow, or another
    /// invocation took over.
    pub stop: bool,
}

/// A handler the loop can drive.
pub(crate) trait LeasedLoop {
    /// The `function` label of the errors metric, and the log lines' name.
    const NAME: &'static str;
    fn holder(&self) -> &str;
    fn now(&self) -> Timestamp;
    /// The longest sleep between two ticks.
    fn poll(&self) -> SignedDuration;
    /// Takes (or renews) the lease until `until`. False: another invocation holds it.
    fn take_lease(&mut self, until: Timestamp) -> impl Future<Output = Result<bool, HandlerError>>;
    fn give_back_lease(&self) -> impl Future<Output = Result<(), HandlerError>>;
    fn step(&mut self) -> impl Future<Output = Result<Step, HandlerError>>;
}

/// Takes (or renews) the lease `name` for `holder` until `until`, as of the
/// ports' clock. False: another holder has it.
pub(crate) async fn take<P: PortSet>(
    ports: &P,
    name: &str,
    holder: &str,
    until: Timestamp,
) -> Result<bool, HandlerError> {
    let lease = Lease {
        name: name.to_owned(),
        holder: holder.to_owned(),
        expires_at: until,
    };
    Ok(ports
        .store()
        .acquire_lease(&lease, ports.clock().now())
        .await?)
}

/// Gives the lease `name` back, if `holder` still holds it.
pub(crate) async fn give_back<P: PortSet>(
    ports: &P,
    name: &str,
    holder: &str,
) -> Result<(), HandlerError> {
    Ok(ports.store().release_lease(name, holder).await?)
}

/// How long to wait before trying to take a lease again after a failure
/// (`attempt` failures so far): 1 s doubling to 8 s, while that still
/// leaves time before `deadline`. `None`: give up — the error is not
/// transient, or the invocation is over. A throttled lease write must not
/// cost a whole invocation: the next starts a minute later, and pending
/// pods would wait that long for a decision.
pub fn lease_retry(
    error: &HandlerError,
    attempt: u32,
    now: Timestamp,
    deadline: Timestamp,
) -> Option<SignedDuration> {
    if !error.is_retryable() {
        return None;
    }
    let wait = SignedDuration::from_secs(1 << attempt.min(3));
    (now + wait < deadline).then_some(wait)
}

/// Runs `l` until `deadline`, sleeping with `sleep`; returns its ticks (0:
/// another invocation held the lease).
pub(crate) async fn run<L, F, Fut>(
    l: &mut L,
    deadline: Timestamp,
    sleep: F,
) -> Result<u64, HandlerError>
where
    L: LeasedLoop,
    F: Fn(SignedDuration) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut attempt = 0;
    loop {
        match l.take_lease(deadline).await {
            Ok(true) => break,
            Ok(false) => {
                info!(holder = %l.holder(), "another {} invocation holds the lease; exiting", L::NAME);
                return Ok(0);
            }
            Err(e) => {
                let Some(wait) = lease_retry(&e, attempt, l.now(), deadline) else {
                    return Err(e);
                };
                warn!(error = %e, attempt, "could not take the {} lease; retrying", L::NAME);
                attempt += 1;
                sleep(wait).await;
            }
        }
    }
    let mut ticks = 0;
    loop {
        let step = match l.step().await {
            Ok(step) => step,
            Err(e) => {
                metrics::count(
                    l.now().as_millisecond(),
                    metrics::own::ERRORS,
                    &[("function", L::NAME)],
                    1.0,
                );
                if !e.is_retryable() {
                    return Err(e);
                }
                warn!(error = %e, "{} tick failed; retrying next tick", L::NAME);
                Step::default()
            }
        };
        ticks += 1;
        if step.stop {
            break;
        }
        let now = l.now();
        let next = now + l.poll();
        let wake = step.wake_at.unwrap_or(next).min(next);
        if wake >= deadline {
            break;
        }
        sleep(
            wake.duration_since(now)
                .max(SignedDuration::from_millis(50)),
        )
        .await;
    }
    l.give_back_lease().await?;
    Ok(ticks)
}
