//! A bounded retry policy for Kubernetes API calls.
//!
//! kube's own client retries 429/503/504 up to 15 times with backoff up to
//! minutes; a Lambda has seconds. We build the client with that off and
//! retry here instead: a few attempts, exponential backoff, each attempt
//! under its own timeout, and never past an overall deadline. Only
//! [`ClusterError::Transient`] is retried; everything else (including a
//! conflict, which callers resolve by re-reading) returns at once. Callers
//! turn answers that are not failures into values *before* this loop sees
//! them — an eviction's 429 is a PodDisruptionBudget saying no, not
//! throttling, and is never retried.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use crate::ports::{ClusterError, GaveUp};

/// How hard to try one API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled for each further one.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// One attempt that has not answered by then is abandoned (and counts as transient).
    pub attempt_timeout: Duration,
    /// No attempt starts, and no attempt runs, past this much time after the first began.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(15),
            deadline: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry (still under the attempt timeout).
    pub fn once(attempt_timeout: Duration) -> Self {
        RetryPolicy {
            max_attempts: 1,
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            attempt_timeout,
            deadline: attempt_timeout,
        }
    }

    /// The wait after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy is spent.
    /// The final error of a spent policy is `Transient` and says how many
    /// attempts were made over how long, and what the last one said.
    pub async fn run<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, ClusterError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let start = Instant::now();
        let deadline = start + self.deadline;
        let max = self.max_attempts.max(1);
        let mut n = 0;
        loop {
            n += 1;
            let now = Instant::now();
            let budget = self
                .attempt_timeout
                .min(deadline.saturating_duration_since(now));
            let result = match tokio::time::timeout(budget, attempt()).await {
                Ok(r) => r,
                Err(_) => Err(ClusterError::transient(
                    what,
                    format!("no answer within {} ms", budget.as_millis()),
                )),
            };
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e @ ClusterError::Transient { .. }) => e,
                Err(e) => return Err(e),
            };
            let wait = self.backoff(n);
            let spent = n >= max || Instant::now() + wait >= deadline;
            if spent {
                let gave_up = Some(GaveUp {
                    attempts: n,
                    elapsed_ms: start.elapsed().as_millis() as u64,
                });
                return Err(match err {
                    ClusterError::Transient { op, reason, .. } => ClusterError::Transient {
                        op,
                        reason,
                        gave_up,
                    },
                    other => ClusterError::Transient {
                        op: what.to_owned(),
                        reason: other.to_string(),
                        gave_up,
                    },
                });
            }
            debug!(operation = what, attempt = n, wait_ms = wait.as_millis() as u64, error = %err, "retrying Kubernetes API call");
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            attempt_timeout: Duration::from_millis(200),
            deadline: Duration::from_secs(5),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..fast()
        };
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(3), Duration::from_millis(350));
        assert_eq!(p.backoff(40), Duration::from_millis(350));
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let r = fast()
            .run("list pods", || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(ClusterError::transient("list pods", "HTTP 503: busy"))
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(r, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_spent_policy_says_how_many_attempts_and_the_last_error() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = fast()
            .run("list pods", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ClusterError::transient("list pods", "HTTP 503: busy"))
            })
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let Err(
            e @ ClusterError::Transient {
                gave_up: Some(g), ..
            },
        ) = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(g.attempts, 3);
        assert_eq!((e.op(), e.reason()), ("list pods", "HTTP 503: busy"));
        let msg = e.to_string();
        assert!(
            msg.starts_with("transient Kubernetes API error: gave up after 3 attempt(s)"),
            "{msg}"
        );
        assert!(msg.ends_with("list pods: HTTP 503: busy"), "{msg}");
    }

    #[tokio::test]
    async fn other_errors_are_not_retried() {
        for e in [
            ClusterError::conflict("patch node/a", "c"),
            ClusterError::not_found("get node/a", "n"),
            ClusterError::forbidden("list pods", "f"),
            ClusterError::other("create pods/binding", "o"),
        ] {
            let calls = AtomicU32::new(0);
            let r: Result<(), _> = fast()
                .run("x", || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err(e.clone())
                })
                .await;
            assert_eq!(r, Err(e));
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slow_attempts_time_out_and_the_deadline_bounds_the_whole() {
        let p = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(100),
            attempt_timeout: Duration::from_secs(1),
            deadline: Duration::from_millis(2500),
        };
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = p
            .run("get node/a", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            })
            .await;
        // 1 s + 0.1 + 1 s + 0.1 + 0.3 s (the rest of the deadline): the
        // deadline, not the ten attempts allowed, ended it at the third.
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let Err(
            e @ ClusterError::Transient {
                gave_up: Some(g), ..
            },
        ) = &r
        else {
            panic!("{r:?}")
        };
        assert_eq!(g.attempts, 3);
        assert!(e.reason().starts_with("no answer within"), "{e}");
    }
}
