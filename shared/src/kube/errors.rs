//! Kubernetes API errors as [`ClusterError`]s.
//!
//! | what the API (or the wire) said            | `ClusterError`  |
//! |--------------------------------------------|-----------------|
//! | 404                                        | `NotFound`      |
//! | 409                                        | `Conflict`      |
//! | 401, 403                                   | `Forbidden`     |
//! | 408, 429, 5xx, timeouts, connection errors | `Transient`     |
//! | anything else (400, 422, bad config, …)    | `Other`         |
//!
//! Each message names the operation (`list pods`, `patch node/x`, …) so a
//! 403 in the logs says which verb on which resource the RBAC lacks.

use ::kube::Error as KubeError;

use crate::ports::ClusterError;

/// The HTTP code of an API error (`None` for transport errors).
pub fn status_code(err: &KubeError) -> Option<u16> {
    match err {
        KubeError::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The API's message of an error (or the error's own text).
pub fn message(err: &KubeError) -> String {
    match err {
        KubeError::Api(status) if !status.message.is_empty() => status.message.clone(),
        KubeError::Api(status) => format!("HTTP {} {}", status.code, status.reason),
        other => error_chain(other),
    }
}

/// The API's message followed by its causes' messages: an eviction's 429
/// says which budget refused it only in `details.causes`.
pub fn message_with_causes(err: &KubeError) -> String {
    let mut text = message(err);
    if let KubeError::Api(status) = err {
        for cause in status.details.iter().flat_map(|d| d.causes.iter()) {
            if !cause.message.is_empty() && !text.contains(&cause.message) {
                text.push(' ');
                text.push_str(&cause.message);
            }
        }
    }
    text
}

/// An error and its sources on one line: hyper's "connection closed" hides
/// the useful part in the source.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Classifies an error of operation `what` (e.g. `"list pods"`).
pub fn classify(what: &str, err: &KubeError) -> ClusterError {
    let msg = message(err);
    match err {
        KubeError::Api(status) => match status.code {
            404 => ClusterError::not_found(what, msg),
            409 => ClusterError::conflict(what, msg),
            401 => ClusterError::Forbidden {
                op: what.to_owned(),
                reason: msg,
                unauthorized: true,
            },
            403 => ClusterError::forbidden(what, msg),
            408 | 429 | 500..=599 => {
                ClusterError::transient(what, format!("HTTP {}: {msg}", status.code))
            }
            code => ClusterError::other(what, format!("HTTP {code}: {msg}")),
        },
        // The wire: refused or dropped connections, TLS handshakes cut short,
        // timeouts of the connector, bodies that stopped half way.
        KubeError::HyperError(_) | KubeError::Service(_) | KubeError::ReadEvents(_) => {
            ClusterError::transient(what, msg)
        }
        _ => ClusterError::other(what, msg),
    }
}

/// A 404 status from the API (not a proxy's or a missing route's text: the
/// API's own 404 is what both tell apart the same way, so any 404 counts).
pub fn is_not_found(err: &KubeError) -> bool {
    status_code(err) == Some(404)
}

pub fn is_conflict(err: &KubeError) -> bool {
    status_code(err) == Some(409)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::core::Status;

    fn api(code: u16, message: &str) -> KubeError {
        KubeError::Api(Status::failure(message, "Reason").with_code(code).boxed())
    }

    #[test]
    fn codes_map_to_cluster_errors() {
        assert!(matches!(
            classify("get pod", &api(404, "pods \"x\" not found")),
            ClusterError::NotFound { .. }
        ));
        assert!(matches!(
            classify("patch node/a", &api(409, "changed")),
            ClusterError::Conflict { .. }
        ));
        assert!(matches!(
            classify("list pods", &api(401, "Unauthorized")),
            ClusterError::Forbidden {
                unauthorized: true,
                ..
            }
        ));
        for code in [408, 429, 500, 502, 503, 504] {
            let e = classify("list pods", &api(code, "busy"));
            assert!(matches!(e, ClusterError::Transient { .. }), "{code}: {e:?}");
            assert!(e.is_retryable());
        }
        assert!(matches!(
            classify("create pods/binding", &api(422, "invalid")),
            ClusterError::Other { .. }
        ));
    }

    #[test]
    fn forbidden_names_the_operation_and_keeps_the_apis_words() {
        let e = classify(
            "list secrets",
            &api(
                403,
                "secrets is forbidden: User \"nodewright\" cannot list resource \"secrets\" in API group \"\" at the cluster scope",
            ),
        );
        let text = e.to_string();
        assert!(text.starts_with("forbidden: list secrets: "), "{text}");
        assert!(text.contains("cannot list resource \"secrets\""), "{text}");
        assert_eq!(e.op(), "list secrets");
        assert!(!e.is_retryable());
    }
}
