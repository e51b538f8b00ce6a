//! The wake queue: an SQS queue whose event source mapping invokes the
//! provisioner. A quiet invocation ends early (`NODEWRIGHT_END_WHEN_QUIET`)
//! and asks for the next one with a message delayed by a few seconds, so a
//! quiet cluster is looked at every few seconds for the price of those few
//! short invocations, not of an invocation listening all minute. Which
//! invocation sends the one message is decided in `runtime` (the wake
//! lease); this adapter only sends it.

use aws_config::SdkConfig;

use super::ApiError;
use crate::model::SignedDuration;

/// SQS refuses a message delay longer than this.
pub const MAX_DELAY: SignedDuration = SignedDuration::from_secs(900);

/// The queue a wake message goes to.
#[derive(Debug, Clone)]
pub struct WakeQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

/// A wake message that could not be sent: the queue, and what SQS (or
/// the connection) said.
#[derive(Debug, thiserror::Error)]
#[error("wake queue {queue}: {detail}")]
pub struct WakeError {
    queue: String,
    detail: String,
}

impl WakeQueue {
    pub fn new(sdk: &SdkConfig, url: impl Into<String>) -> WakeQueue {
        WakeQueue {
            sqs: aws_sdk_sqs::Client::new(sdk),
            url: url.into(),
        }
    }

    /// Sends one message that becomes visible, and so invokes the
    /// provisioner, `after` from now (whole seconds, at most [`MAX_DELAY`]).
    /// The body names what sent it, for the log of the invocation it wakes.
    pub async fn send(&self, after: SignedDuration, sender: &str) -> Result<(), WakeError> {
        let delay = after.as_secs().clamp(0, MAX_DELAY.as_secs());
        let body = serde_json::json!({ "wake": { "after_s": delay, "sent_by": sender } });
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(body.to_string())
            .delay_seconds(i32::try_from(delay).unwrap_or(i32::MAX))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| WakeError {
                queue: self.url.clone(),
                detail: ApiError::from_sdk("sqs:SendMessage", e).to_string(),
            })
    }
}
