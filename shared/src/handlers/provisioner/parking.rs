//! The batch record: pods that fit nowhere parked with their reasons (an
//! Event and a log line for each new reason, within the record's size
//! budget), and its conditional write.

use super::*;

impl<P: PortSet> Provisioner<P> {
    /// Records pods that fit nowhere; logs and publishes an Event for each
    /// new reason only.
    pub(super) async fn park(
        &self,
        state: &Batch,
        unplaceable: Vec<(PodKey, String)>,
        pending_uids: &HashSet<&str>,
        with_claims: &HashSet<&str>,
        fingerprint: u64,
        now: Timestamp,
    ) -> Result<(), HandlerError> {
        let mut next = state.clone();
        next.solving = None;
        next.retain_pending(pending_uids);
        // Pods parked by hash stay known (reported) across solves; this
        // solve's pods move from their old group to this solve's.
        let solved: HashSet<u32> = unplaceable.iter().map(|(k, _)| uid_hash(&k.uid)).collect();
        let known_by_hash: HashSet<u32> = next
            .parked_more
            .iter()
            .flat_map(|g| g.pods.iter().copied())
            .filter(|h| solved.contains(h))
            .collect();
        for g in &mut next.parked_more {
            g.pods.retain(|h| !solved.contains(h));
        }
        next.parked_more.retain(|g| !g.pods.is_empty());
        let mut more = ParkedGroup {
            config_fingerprint: fingerprint,
            retry_at: now + self.settings.parked_retry,
            pods: Default::default(),
        };
        let mut more_room =
            MAX_PARKED_MORE.saturating_sub(next.parked_more.iter().map(|g| g.pods.len()).sum());
        let (mut reported, mut unreported, mut unparked) = (0usize, 0usize, 0usize);
        let mut events = Vec::new();
        let mut size: usize = next.parked.iter().map(|(uid, p)| parked_size(uid, p)).sum();
        for (pod, reason) in unplaceable {
            // The record keeps a bounded copy; the event and the log line the whole reason.
            let stored = stored_reason(&reason);
            let retry = if with_claims.contains(pod.uid.as_str()) {
                self.settings.parked_volume_retry
            } else {
                self.settings.parked_retry
            };
            let hash = uid_hash(&pod.uid);
            let known = next
                .parked
                .get(&pod.uid)
                .is_some_and(|p| p.reason == stored)
                || known_by_hash.contains(&hash);
            if !known && reported >= REPORTS_PER_SOLVE {
                // Not parked either: solved again with the next window, and reported then.
                unreported += 1;
                continue;
            } else if !known {
                reported += 1;
                if reported <= LOG_LINES_PER_SOLVE {
                    warn!(pod = %pod, %reason, "could not schedule pod");
                }
                events.push(ClusterEvent {
                    kind: "Pod".to_owned(),
                    namespace: Some(pod.namespace.clone()),
                    name: pod.name.clone(),
                    type_: "Warning".to_owned(),
                    reason: "FailedScheduling".to_owned(),
                    message: format!("Failed to schedule pod, {reason}"),
                });
            }
            let entry = Parked {
                pod: pod.to_string(),
                reason: stored,
                config_fingerprint: fingerprint,
                retry_at: now + retry,
            };
            let (old, new) = (
                next.parked
                    .get(&pod.uid)
                    .map_or(0, |p| parked_size(&pod.uid, p)),
                parked_size(&pod.uid, &entry),
            );
            if old == 0 && size + new > PARKED_BUDGET {
                // Beyond the detailed budget: parked by hash, if there is room.
                if more_room > 0 {
                    more_room -= 1;
                    if with_claims.contains(pod.uid.as_str()) {
                        more.retry_at = more.retry_at.min(now + self.settings.parked_volume_retry);
                    }
                    more.pods.insert(hash);
                } else {
                    unparked += 1;
                }
                continue;
            }
            size = size + new - old;
            next.parked.insert(pod.uid.clone(), entry);
        }
        if !more.pods.is_empty() {
            next.parked_more.push(more);
        }
        for chunk in events.chunks(EVENT_CONCURRENCY) {
            let posted = futures_util::future::join_all(
                chunk.iter().map(|e| self.ports.cluster().record_event(e)),
            )
            .await;
            for (event, result) in chunk.iter().zip(posted) {
                if let Err(e) = result {
                    debug!(pod = %event.name, error = %e, "could not publish event");
                }
            }
        }
        if reported > LOG_LINES_PER_SOLVE {
            warn!(
                pods = reported - LOG_LINES_PER_SOLVE,
                "could not schedule {} more pod(s) (a line for the first {LOG_LINES_PER_SOLVE}; an event for each)",
                reported - LOG_LINES_PER_SOLVE
            );
        }
        if unreported > 0 {
            info!(
                pods = unreported,
                "{unreported} more unschedulable pod(s) are reported with the next window (at most {REPORTS_PER_SOLVE} a solve)"
            );
        }
        if unparked > 0 {
            warn!(
                pods = unparked,
                "{unparked} unschedulable pod(s) not parked: the batch record is at its size bound; they are solved again with each window"
            );
        }
        if next != *state {
            next.version += 1;
            self.write_batch(Some(state), &next).await?;
        }
        debug!(reported, "parked unschedulable pods");
        Ok(())
    }

    /// Conditional write of the batch state; false when another writer won.
    pub(super) async fn write_batch(
        &self,
        previous: Option<&Batch>,
        next: &Batch,
    ) -> Result<bool, HandlerError> {
        match self.ports.store().put_batch(previous, next).await {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict { .. }) => {
                debug!("batch state changed under us; leaving this tick to the other writer");
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// What the batch record may spend on parked pods with their reasons: a
/// DynamoDB item is at most 400 KB; the window's hashes take up to 80 KB
/// and the pods parked by hash up to 200 KB (so 20,000 unschedulable pods
/// are all parked, and solved again only when something changed).
pub(super) const PARKED_BUDGET: usize = 60_000;

/// A parked reason is kept to this many bytes in the record.
pub(super) const PARKED_REASON_MAX: usize = 300;

/// Pods newly reported (a FailedScheduling event each) per solve; the
/// rest stay unparked and are reported with the next window.
pub(super) const REPORTS_PER_SOLVE: usize = 10_000;

/// Of those, a log line each for the first few; one line counts the rest.
pub(super) const LOG_LINES_PER_SOLVE: usize = 20;

/// Events posted at once.
pub(super) const EVENT_CONCURRENCY: usize = 32;

/// A parked entry's share of the serialised record (JSON keys and punctuation included).
pub(super) fn parked_size(uid: &str, p: &Parked) -> usize {
    uid.len() + p.pod.len() + p.reason.len() + 110
}

pub(super) fn stored_reason(reason: &str) -> String {
    if reason.len() <= PARKED_REASON_MAX {
        return reason.to_owned();
    }
    let mut cut = PARKED_REASON_MAX - 3;
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &reason[..cut])
}
