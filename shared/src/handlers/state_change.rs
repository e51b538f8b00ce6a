//! The state-change function: one EC2 Instance State-change Notification.
//!
//! `running` is recorded on the claim; `stopping`, `stopped`,
//! `shutting-down` and `terminated` of one of our instances delete its Node
//! and release its claim, so its pods become pending and are planned again.
//! Unknown instances are ignored; a repeated or late event finds nothing
//! left to change.

use tracing::{debug, info, warn};

use super::HandlerError;
use crate::config::Limits;
use crate::interruption::{self, Message};
use crate::model::InstanceState;
use crate::ports::{Clock, Cluster, PortSet, Store, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateChangeOutcome {
    /// Not one of our instances, or nothing to do for this state.
    Ignored,
    /// `running` recorded on the claim.
    Recorded,
    /// The claim was released (and its Node deleted, if it had one).
    Released { claim: String, node: Option<String> },
}

/// Handles one EventBridge event. A malformed event is `HandlerError::Invalid`
/// (the caller logs and drops it); one that concerns nothing we act on (a
/// state EC2 may add) is ignored; every store or cluster failure, whatever
/// its kind, is returned for the caller to retry — an event is never lost
/// because something on our side failed.
pub async fn handle<P: PortSet>(
    ports: &P,
    event: &serde_json::Value,
) -> Result<StateChangeOutcome, HandlerError> {
    let message = match interruption::parse(event) {
        Ok((_, message)) => message,
        Err(e) if e.is_ignorable() => {
            debug!(reason = %e, "state change that asks for nothing; ignored");
            return Ok(StateChangeOutcome::Ignored);
        }
        Err(e) => return Err(HandlerError::Invalid(e.to_string())),
    };
    let Message::StateChange { instance_id, state } = message else {
        return Err(HandlerError::Invalid(
            "not an EC2 Instance State-change Notification".to_owned(),
        ));
    };
    let claims = ports.store().claims().await?;
    let Some(claim) = claims
        .into_iter()
        .find(|c| c.instance_id() == Some(instance_id.as_str()))
    else {
        debug!(instance = %instance_id, state = ?state, "state change of an instance we do not track; ignored");
        return Ok(StateChangeOutcome::Ignored);
    };
    match state {
        InstanceState::Running if claim.running_at.is_none() => {
            let mut next = claim.next();
            next.running_at = Some(ports.clock().now());
            match ports
                .store()
                .update_claim(&claim, &next, &Limits::default())
                .await
            {
                // Someone else wrote the claim meanwhile; recording `running` is best effort.
                Ok(()) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            info!(nodeclaim = %claim.id, instance = %instance_id, "instance running");
            Ok(StateChangeOutcome::Recorded)
        }
        InstanceState::Pending | InstanceState::Running => Ok(StateChangeOutcome::Ignored),
        gone => {
            let node = claim.node_name.clone();
            if let Some(name) = &node
                && ports.cluster().delete_node(name).await?
            {
                info!(node = %name, nodeclaim = %claim.id, state = ?gone, "deleted node");
            }
            match ports.store().delete_claim(&claim).await {
                Ok(()) => {}
                Err(e @ StoreError::Conflict { .. }) => {
                    warn!(nodeclaim = %claim.id, error = %e, "claim changed while releasing it")
                }
                Err(e) => return Err(e.into()),
            }
            info!(nodeclaim = %claim.id, instance = %instance_id, state = ?gone, "released nodeclaim of a stopped or terminated instance");
            Ok(StateChangeOutcome::Released {
                claim: claim.id,
                node,
            })
        }
    }
}
