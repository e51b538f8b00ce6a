//! The provisioner's stored state (`batch#…` in the Store): the open batch
//! window, the pods that could not be placed (parked), and who is solving.
//! How the window advances is `provisioning::batcher`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::Timestamp;

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
