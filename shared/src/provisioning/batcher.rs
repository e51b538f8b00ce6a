//! Batching pending pods before a solve, as Karpenter does: a window opens
//! on the first provisionable pod, every newly seen pod resets an idle
//! timer, and the window closes after `idle` without new pods or `max` in
//! total. The window lives in the Store, so it survives the end of one
//! invocation and the start of the next, together with the pods that could
//! not be placed (parked), so each is reported once rather than every tick.

use std::collections::BTreeSet;

use crate::model::batch::{MAX_SEEN, Window, uid_hash};
use crate::model::{SignedDuration, Timestamp};

/// Karpenter's BATCH_IDLE_DURATION and BATCH_MAX_DURATION defaults.
pub const DEFAULT_IDLE: SignedDuration = SignedDuration::from_secs(1);
pub const DEFAULT_MAX: SignedDuration = SignedDuration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchWindow {
    pub idle: SignedDuration,
    pub max: SignedDuration,
}

impl Default for BatchWindow {
    fn default() -> Self {
        BatchWindow {
            idle: DEFAULT_IDLE,
            max: DEFAULT_MAX,
        }
    }
}

/// What to do with the window after looking at the pending pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchStep {
    /// No pods waiting and no window open.
    Idle,
    /// Keep the window open (store it if it changed); look again by `wake_at`.
    Wait {
        window: Window,
        changed: bool,
        wake_at: Timestamp,
    },
    /// The window closed: solve now.
    Close { pods: usize, waited: SignedDuration },
}

/// Advances the window given the uids of the pods waiting now.
pub fn step(
    previous: Option<&Window>,
    waiting: &BTreeSet<String>,
    now: Timestamp,
    window: BatchWindow,
) -> BatchStep {
    if waiting.is_empty() {
        // Pods went away (scheduled elsewhere, deleted): nothing to batch.
        return match previous {
            None => BatchStep::Idle,
            Some(b) => BatchStep::Close {
                pods: 0,
                waited: now.duration_since(b.opened_at),
            },
        };
    }
    let mut batch = match previous {
        Some(b) => b.clone(),
        None => Window {
            opened_at: now,
            last_seen_at: now,
            seen: BTreeSet::new(),
        },
    };
    let new_pods = waiting
        .iter()
        .any(|uid| !batch.seen.contains(&uid_hash(uid)));
    let changed = new_pods || previous.is_none();
    if new_pods {
        for uid in waiting {
            if batch.seen.len() >= MAX_SEEN {
                break;
            }
            batch.seen.insert(uid_hash(uid));
        }
        if previous.is_some() {
            batch.last_seen_at = now;
        }
    }
    let idle_deadline = batch.last_seen_at + window.idle;
    let max_deadline = batch.opened_at + window.max;
    if now >= idle_deadline || now >= max_deadline {
        return BatchStep::Close {
            pods: waiting.len(),
            waited: now.duration_since(batch.opened_at),
        };
    }
    let wake_at = idle_deadline.min(max_deadline);
    BatchStep::Wait {
        window: batch,
        changed,
        wake_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(n: usize) -> BTreeSet<String> {
        (0..n).map(|i| format!("uid-{i}")).collect()
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_millis(ms)
    }

    fn drive(arrivals_ms: &[i64], poll_ms: i64, until_ms: i64) -> Vec<(i64, usize)> {
        // Returns (close time, pods) of every closed batch.
        let mut stored: Option<Window> = None;
        let mut closed = vec![];
        let mut t = 0;
        while t <= until_ms {
            let waiting: BTreeSet<String> = arrivals_ms
                .iter()
                .enumerate()
                .filter(|(_, a)| **a <= t)
                .map(|(i, _)| format!("uid-{i}"))
                .collect();
            // Pods of closed batches are no longer waiting in this model.
            let waiting: BTreeSet<String> = waiting
                .into_iter()
                .filter(|u| !closed_uids(&closed, u))
                .collect();
            match step(stored.as_ref(), &waiting, at(t), BatchWindow::default()) {
                BatchStep::Idle => {}
                BatchStep::Wait { window, .. } => stored = Some(window),
                BatchStep::Close { pods, .. } => {
                    closed.push((t, pods, waiting.clone()));
                    stored = None;
                }
            }
            t += poll_ms;
        }
        fn closed_uids(closed: &[(i64, usize, BTreeSet<String>)], u: &str) -> bool {
            closed.iter().any(|(_, _, s)| s.contains(u))
        }
        closed.into_iter().map(|(t, n, _)| (t, n)).collect()
    }

    #[test]
    fn closes_after_one_idle_second() {
        assert_eq!(drive(&[0, 0, 0], 100, 5000), vec![(1000, 3)]);
    }

    #[test]
    fn pods_half_a_second_apart_share_a_batch() {
        assert_eq!(drive(&[0, 500, 1000, 1500], 100, 5000), vec![(2500, 4)]);
    }

    #[test]
    fn a_steady_trickle_closes_at_ten_seconds() {
        let arrivals: Vec<i64> = (0..60).map(|i| i * 500).collect();
        let closed = drive(&arrivals, 100, 30_000);
        assert_eq!(closed[0], (10_000, 21));
        // The next window opens with the pod at 10.5 s and closes 10 s later.
        assert_eq!(closed[1].0, 20_500);
    }

    /// Many pending pods keep the record small: 8 hex digits a pod, at most MAX_SEEN.
    #[test]
    fn a_window_of_twenty_thousand_pods_stays_small_and_round_trips() {
        let uid = |i: usize| format!("{i:08x}-1111-2222-3333-444455556666");
        let waiting: BTreeSet<String> = (0..MAX_SEEN).map(uid).collect();
        let BatchStep::Wait { window, .. } = step(None, &waiting, at(0), BatchWindow::default())
        else {
            panic!("waits")
        };
        let json = serde_json::to_string(&window).expect("serialises");
        assert!(json.len() < 90_000, "{} bytes", json.len());
        assert_eq!(
            serde_json::from_str::<Window>(&json).expect("parses"),
            window
        );
        // Seen before: no new arrival, so no idle extension.
        let BatchStep::Wait { changed, .. } =
            step(Some(&window), &waiting, at(500), BatchWindow::default())
        else {
            panic!("waits")
        };
        assert!(!changed);
        // Past the bound pods always look new: the window runs to its max, and the record stays the same size.
        let more: BTreeSet<String> = (0..2 * MAX_SEEN).map(uid).collect();
        let BatchStep::Wait {
            window: w, changed, ..
        } = step(Some(&window), &more, at(600), BatchWindow::default())
        else {
            panic!("waits")
        };
        assert!(changed);
        assert_eq!(w.seen.len(), MAX_SEEN);
        assert!(matches!(
            step(Some(&w), &more, at(10_000), BatchWindow::default()),
            BatchStep::Close { .. }
        ));
        // A record written before the hashes (with `pods`) still reads.
        let old = r#"{"opened_at":"2026-01-01T00:00:00Z","last_seen_at":"2026-01-01T00:00:00Z","pods":["a","b"]}"#;
        assert!(
            serde_json::from_str::<Window>(old)
                .expect("old record")
                .seen
                .is_empty()
        );
    }

    #[test]
    fn empty_waiting_closes_an_open_window_without_pods() {
        let b = Window {
            opened_at: at(0),
            last_seen_at: at(0),
            seen: uids(2).iter().map(|u| uid_hash(u)).collect(),
        };
        assert!(matches!(
            step(Some(&b), &BTreeSet::new(), at(300), BatchWindow::default()),
            BatchStep::Close { pods: 0, .. }
        ));
        assert_eq!(
            step(None, &BTreeSet::new(), at(300), BatchWindow::default()),
            BatchStep::Idle
        );
    }
}
