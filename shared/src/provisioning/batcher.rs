//! Batching pending pods before a solve, as Karpenter does: a window opens
//! on the first provisionable pod, every newly seen pod resets an idle
//! timer, and the window closes after `idle` without new pods or `max` in
//! total. The window lives in the Store, so it survives the end of one
//! invocation and the start of the next, together with the pods that could
//! not be placed (parked), so each is reported once rather than every tick.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ports::{SignedDuration, Timestamp};

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

/// The provisioner's stored state: the open window, if any, and the parked pods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub window: Option<Window>,
    /// Pod uid → why it could not be placed.
    #[serde(default)]
    pub parked: BTreeMap<String, Parked>,
    /// Pods parked beyond what `parked` may hold (the record stays far
    /// below DynamoDB's 400 KB item limit): by uid hash only, without a
    /// reason, in groups that share a fingerprint and a retry time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parked_more: Vec<ParkedGroup>,
    /// The invocation solving a closed window right now: no other one
    /// batches until it is done (or its claim on the solve expires), so two
    /// concurrent invocations never plan the same pods twice.
    #[serde(default)]
    pub solving: Option<Solving>,
    /// Bumped by every write; conditional writes compare it.
    pub version: u64,
}

impl Batch {
    /// No window open, nothing parked, nobody solving (the version aside).
    pub fn is_empty(&self) -> bool {
        self.window.is_none()
            && self.parked.is_empty()
            && self.parked_more.is_empty()
            && self.solving.is_none()
    }
}

/// A pod that fit nowhere. It is left out of batches until the
/// configuration changes or `retry_at` passes, and reported again only if the
/// reason changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    pub pod: String,
    pub reason: String,
    pub config_fingerprint: u64,
    pub retry_at: Timestamp,
}

/// Pods parked together by uid hash (see [`Batch::parked_more`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedGroup {
    pub config_fingerprint: u64,
    pub retry_at: Timestamp,
    #[serde(with = "hex_hashes")]
    pub pods: BTreeSet<u32>,
}

/// Pods all of [`Batch::parked_more`] holds at most (200 KB).
pub const MAX_PARKED_MORE: usize = 25_000;

impl Batch {
    /// Whether the pod is parked for `fingerprint` until after `now`.
    pub fn is_parked(&self, uid: &str, fingerprint: u64, now: Timestamp) -> bool {
        self.parked
            .get(uid)
            .is_some_and(|p| p.config_fingerprint == fingerprint && p.retry_at > now)
            || self.parked_more.iter().any(|g| {
                g.config_fingerprint == fingerprint
                    && g.retry_at > now
                    && g.pods.contains(&uid_hash(uid))
            })
    }

    /// Forgets the parked pods that are no longer pending.
    pub fn retain_pending(&mut self, pending: &std::collections::HashSet<&str>) {
        self.parked.retain(|uid, _| pending.contains(uid.as_str()));
        if !self.parked_more.is_empty() {
            let hashes: BTreeSet<u32> = pending.iter().map(|u| uid_hash(u)).collect();
            for g in &mut self.parked_more {
                g.pods.retain(|h| hashes.contains(h));
            }
            self.parked_more.retain(|g| !g.pods.is_empty());
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Solving {
    pub holder: String,
    pub until: Timestamp,
}

/// An open batch window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub opened_at: Timestamp,
    /// When a pod not seen before last arrived.
    pub last_seen_at: Timestamp,
    /// A 32-bit hash of every pod uid the window has seen (to tell a new
    /// arrival from a pod seen before), stored as hex: the record must stay
    /// far below DynamoDB's 400 KB item limit with 20,000 pods pending
    /// (8 bytes a pod). A collision only costs an idle extension.
    #[serde(default, with = "hex_hashes")]
    pub seen: BTreeSet<u32>,
}

/// Pods a window remembers at most (80 KB); beyond, every tick sees
/// "new" pods and the window runs to its `max`.
pub const MAX_SEEN: usize = 10_000;

/// FNV-1a, 32 bits: stable across releases and platforms (it is stored).
pub fn uid_hash(uid: &str) -> u32 {
    uid.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

mod hex_hashes {
    use std::collections::BTreeSet;
    use std::fmt::Write;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(set: &BTreeSet<u32>, s: S) -> Result<S::Ok, S::Error> {
        let mut out = String::with_capacity(set.len() * 8);
        for h in set {
            let _ = write!(out, "{h:08x}");
        }
        s.serialize_str(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<u32>, D::Error> {
        let text = String::deserialize(d)?;
        if text.len() % 8 != 0 || !text.is_ascii() {
            return Err(serde::de::Error::custom(
                "seen: not a sequence of 8-digit hex hashes",
            ));
        }
        (0..text.len())
            .step_by(8)
            .map(|i| u32::from_str_radix(&text[i..i + 8], 16).map_err(serde::de::Error::custom))
            .collect()
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
