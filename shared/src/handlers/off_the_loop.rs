//! Pure decision code that takes CPU for seconds, run beside the loops
//! instead of inside them.
//!
//! The provisioner's invocation runs the disruption loop in the same task
//! (`runtime::scheduled_invocation` joins the two loops). A disruption
//! decision on a large cluster is seconds of computation — on a 256-MB
//! Lambda, which gets about a seventh of a vCPU, a 0.7-s decision on a
//! workstation core becomes several — and computed inside the task it
//! would hold the provisioner's ticks for as long: pods that became
//! pending meanwhile would wait for the decision to end. Run on a thread
//! of its own, it shares the CPU with the provisioner's ticks instead,
//! which mostly wait on the network.

/// Runs `work` on a thread of its own, in the caller's tracing span, and
/// waits for its result without holding the task: the other futures of the
/// caller's task (the loop joined with this one) keep running meanwhile.
/// Any executor will do (the simulator's and the functions' are tokio's,
/// but the decision modules do not depend on one). A panic in `work` is
/// resumed here, as if `work` had run inline.
pub(crate) async fn compute<T, F>(work: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let span = tracing::Span::current();
    let (tx, rx) = futures_channel::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("nodewright-compute".into())
        .spawn(move || {
            // The receiver is only gone if the caller was dropped: nobody
            // wants the result any more.
            let _ = tx.send(span.in_scope(work));
        })
        .unwrap_or_else(|e| panic!("a thread for a computation: {e}"));
    match rx.await {
        Ok(value) => value,
        // The sender was dropped without sending: `work` panicked.
        Err(futures_channel::oneshot::Canceled) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the computation's thread ended without a result or a panic"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The work waits for a message that only another future of the same
    /// task sends: computed inside the task it would never get it (the
    /// `recv_timeout` turns that hang into a failure instead of a stuck
    /// test). A single-threaded runtime, so nothing else could run it.
    #[tokio::test(flavor = "current_thread")]
    async fn the_other_futures_of_the_task_run_while_it_computes() {
        let (tx, rx) = mpsc::channel::<u32>();
        let work = compute(move || rx.recv_timeout(Duration::from_secs(30)));
        let other = async move {
            tx.send(7).expect("the work is waiting");
        };
        let (received, ()) = tokio::join!(work, other);
        assert_eq!(received, Ok(7));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn returns_what_the_work_returns() {
        let v = [1, 2, 3];
        assert_eq!(compute(move || v.iter().sum::<i32>()).await, 6);
    }

    #[tokio::test(flavor = "current_thread")]
    #[should_panic(expected = "the decision's own panic")]
    async fn a_panic_in_the_work_is_the_callers() {
        compute(|| panic!("the decision's own panic")).await
    }
}
