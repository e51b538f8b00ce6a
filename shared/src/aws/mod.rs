//! The AWS adapters: [`Ec2Cloud`] implements [`crate::ports::Cloud`] over
//! EC2, SSM, EKS and the Pricing API; [`DynamoStore`] implements
//! [`crate::ports::Store`] over two DynamoDB tables.
//!
//! Only this module (behind the `aws` feature) knows the AWS SDK. The
//! decision modules never import it, and compile without the feature.
//!
//! - [`ec2`]: catalog (instance types, zone offerings, prices) with cached
//!   refreshes, subnet / security-group / AMI resolution, launch templates
//!   named by a hash of their content, CreateFleet, terminate, listing.
//! - [`prices`]: where prices come from ([`PriceSource`]): the Pricing API
//!   with the shipped static table as fallback, spot history from EC2.
//! - [`userdata`]: AL2023 / AL2 / Bottlerocket user data (pure).
//! - [`nodeclass`]: how the launch path reads a validated `config::NodeClass`.
//! - [`dynamo`]: the Store, with transactions for limit accounting.
//! - [`wake`]: the queue whose delayed messages invoke the provisioner again
//!   after a quiet invocation ended.
//!
//! SDK clients are built from one [`aws_config::SdkConfig`] made by
//! [`sdk_config`]: standard retries with a bounded number of attempts and
//! per-attempt and per-operation timeouts, so throttling and 5xx are retried
//! a few times within a deadline and then surface as transient errors. Its
//! HTTPS client ([`https_client`]) is rustls on ring, the crypto the
//! Kubernetes client uses too: the SDK's own default (rustls on aws-lc) is
//! not compiled in.

pub mod dynamo;
pub mod ec2;
pub mod nodeclass;
pub mod prices;
pub mod userdata;
pub mod wake;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::SharedHttpClient;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_http_client::tls;

pub use dynamo::{DynamoStore, DynamoTables, Requests};
pub use ec2::{Ec2Cloud, Ec2CloudSettings, Refresh};
pub use prices::{AwsPrices, PriceSource, StaticPrices};
pub use wake::WakeQueue;

use crate::ports::{CloudError, FailureKind, ServiceError, StoreError};

/// How the SDK clients retry and time out.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Region; `None` = from the environment (`AWS_REGION`, profile, IMDS).
    pub region: Option<String>,
    /// Endpoint override (e.g. an emulator); `AWS_ENDPOINT_URL` works too.
    pub endpoint_url: Option<String>,
    /// Attempts per call, first one included.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub attempt_timeout: Duration,
    /// Deadline for one call, retries included.
    pub operation_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            region: None,
            endpoint_url: None,
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(20),
            operation_timeout: Duration::from_secs(45),
        }
    }
}

impl ClientOptions {
    pub fn retry_config(&self) -> RetryConfig {
        RetryConfig::standard()
            .with_max_attempts(self.max_attempts.max(1))
            .with_initial_backoff(self.initial_backoff)
            .with_max_backoff(self.max_backoff)
    }

    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(self.attempt_timeout)
            .operation_timeout(self.operation_timeout)
            .build()
    }
}

/// The HTTPS client of every SDK client and credential provider: rustls
/// with ring, the platform's root certificates, HTTP/1.1 and HTTP/2, plain
/// HTTP too (an emulator's endpoint). The SDK crates are built without
/// their default client (rustls on aws-lc), so a config without this one
/// fails each call with "no HTTP client"; every config is made here or in
/// the tests' `sdk_config_at`, which calls this.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Loads the shared SDK configuration (credentials, region, endpoint) with
/// our retry and timeout settings and [`https_client`].
pub async fn sdk_config(options: &ClientOptions) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(https_client())
        .retry_config(options.retry_config())
        .timeout_config(options.timeout_config());
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &options.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    loader.load().await
}

/// Error codes that mean "slow down": the same call succeeds later.
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceededException",
    "SlowDown",
];

/// Error codes of a service that failed the call (not the request):
/// worth retrying later.
const UNAVAILABLE_CODES: &[&str] = &[
    "TransactionInProgressException",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "InternalServerErrorException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "Unavailable",
];

/// Error codes that mean "not allowed": credentials, IAM, a KMS key.
const ACCESS_DENIED_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "AuthFailure",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "MissingAuthenticationToken",
    "IncompleteSignature",
    "OptInRequired",
];

/// Error codes that mean "what the call names does not exist".
const NOT_FOUND_CODES: &[&str] = &[
    "ResourceNotFoundException",
    "ParameterNotFound",
    "NotFoundException",
    "NoSuchEntity",
];

/// The kind of failure an AWS error code and HTTP status say it is. KMS
/// errors (a key that refuses the service, is disabled or pending
/// deletion) are access errors: nothing changes until the key's policy or
/// state does. EC2 names missing things `<Thing>.NotFound`.
pub(crate) fn classify(code: Option<&str>, status: Option<u16>) -> FailureKind {
    if let Some(code) = code {
        if THROTTLING_CODES.contains(&code) {
            return FailureKind::Throttled;
        }
        if UNAVAILABLE_CODES.contains(&code) {
            return FailureKind::Unavailable;
        }
        if ACCESS_DENIED_CODES.contains(&code) || code.starts_with("KMS") || code.starts_with("Kms")
        {
            return FailureKind::AccessDenied;
        }
        if NOT_FOUND_CODES.contains(&code)
            || code.ends_with(".NotFound")
            || code.ends_with("NotFoundException")
        {
            return FailureKind::NotFound;
        }
    }
    match status {
        Some(429) => FailureKind::Throttled,
        Some(s) if s >= 500 => FailureKind::Unavailable,
        Some(401 | 403) => FailureKind::AccessDenied,
        Some(404) => FailureKind::NotFound,
        _ => FailureKind::InvalidRequest,
    }
}

/// A failed AWS call, reduced to what callers branch on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub op: &'static str,
    pub code: Option<String>,
    pub message: String,
    pub status: Option<u16>,
    pub kind: FailureKind,
}

impl ApiError {
    pub fn from_sdk<E>(op: &'static str, err: SdkError<E>) -> ApiError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let code = err.code().map(str::to_owned);
        let status = err.raw_response().map(|r| r.status().as_u16());
        let kind = match &err {
            // Never reached the service, or no answer in time.
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => FailureKind::Unavailable,
            // An answer that could not be read as one.
            SdkError::ResponseError(_) => match status {
                None => FailureKind::Unavailable,
                Some(_) => classify(None, status),
            },
            SdkError::ServiceError(_) => classify(code.as_deref(), status),
            // The request could not be built: our own input.
            _ => FailureKind::InvalidRequest,
        };
        let message = match err.message() {
            Some(m) => m.to_owned(),
            None => match (&err, status) {
                (SdkError::ServiceError(_) | SdkError::ResponseError(_), Some(s)) => {
                    format!("HTTP {s} without an AWS error")
                }
                _ => aws_sdk_ec2::error::DisplayErrorContext(&err).to_string(),
            },
        };
        ApiError {
            op,
            code,
            message,
            status,
            kind,
        }
    }

    /// An error of our own making about a request to `op` (it could not be built).
    pub fn invalid_request(op: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            op,
            code: None,
            message: message.into(),
            status: None,
            kind: FailureKind::InvalidRequest,
        }
    }

    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{}: {code}: {}", self.op, self.message),
            None => write!(f, "{}: {}", self.op, self.message),
        }
    }
}

impl From<ApiError> for ServiceError {
    fn from(e: ApiError) -> ServiceError {
        ServiceError::of_call(e.kind, e.op, e.code, &e.message)
    }
}

impl From<ApiError> for CloudError {
    fn from(e: ApiError) -> CloudError {
        CloudError::Service(e.into())
    }
}

impl From<ApiError> for StoreError {
    fn from(e: ApiError) -> StoreError {
        StoreError::Service(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_keeps_its_operation_and_code_and_reads_as_before() {
        let api = ApiError {
            op: "CreateFleet",
            code: Some("RequestLimitExceeded".to_owned()),
            message: "slow down".to_owned(),
            status: Some(503),
            kind: FailureKind::Throttled,
        };
        let text = api.to_string();
        let e = CloudError::from(api).context("launch default-abcde");
        let CloudError::Service(s) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            (s.kind, s.operation(), s.code()),
            (
                FailureKind::Throttled,
                Some("CreateFleet"),
                Some("RequestLimitExceeded")
            )
        );
        assert_eq!(s.message, format!("launch default-abcde: {text}"));
        assert_eq!(
            e.to_string(),
            "throttled: launch default-abcde: CreateFleet: RequestLimitExceeded: slow down"
        );
        assert!(e.is_retryable());
        let without_code = ServiceError::from(ApiError {
            code: None,
            ..ApiError::invalid_request("PutItem", "no key")
        });
        assert_eq!(
            (without_code.operation(), without_code.code()),
            (Some("PutItem"), None)
        );
        assert_eq!(without_code.to_string(), "invalid request: PutItem: no key");
    }

    #[test]
    fn aws_errors_are_classified_by_what_they_are() {
        let cases: &[(Option<&str>, Option<u16>, FailureKind)] = &[
            (
                Some("ProvisionedThroughputExceededException"),
                Some(400),
                FailureKind::Throttled,
            ),
            (
                Some("RequestLimitExceeded"),
                Some(503),
                FailureKind::Throttled,
            ),
            (None, Some(429), FailureKind::Throttled),
            (
                Some("InternalServerError"),
                Some(500),
                FailureKind::Unavailable,
            ),
            (None, Some(503), FailureKind::Unavailable),
            // NTH #360/#1284: these deleted messages unprocessed. They are
            // access errors, never "invalid input".
            (
                Some("AccessDeniedException"),
                Some(400),
                FailureKind::AccessDenied,
            ),
            (
                Some("UnauthorizedOperation"),
                Some(403),
                FailureKind::AccessDenied,
            ),
            (
                Some("UnrecognizedClientException"),
                Some(400),
                FailureKind::AccessDenied,
            ),
            (
                Some("ExpiredTokenException"),
                Some(400),
                FailureKind::AccessDenied,
            ),
            (
                Some("KMSAccessDeniedException"),
                Some(400),
                FailureKind::AccessDenied,
            ),
            (
                Some("KMSDisabledException"),
                Some(400),
                FailureKind::AccessDenied,
            ),
            (
                Some("KMS.KMSInvalidStateException"),
                Some(400),
                FailureKind::AccessDenied,
            ),
            (None, Some(403), FailureKind::AccessDenied),
            (None, Some(401), FailureKind::AccessDenied),
            (
                Some("ResourceNotFoundException"),
                Some(400),
                FailureKind::NotFound,
            ),
            (
                Some("InvalidInstanceID.NotFound"),
                Some(400),
                FailureKind::NotFound,
            ),
            (
                Some("InvalidLaunchTemplateName.NotFoundException"),
                Some(400),
                FailureKind::NotFound,
            ),
            (Some("ParameterNotFound"), Some(400), FailureKind::NotFound),
            (
                Some("ValidationException"),
                Some(400),
                FailureKind::InvalidRequest,
            ),
            (
                Some("InvalidParameterValue"),
                Some(400),
                FailureKind::InvalidRequest,
            ),
            (None, Some(400), FailureKind::InvalidRequest),
        ];
        for (code, status, want) in cases {
            assert_eq!(classify(*code, *status), *want, "{code:?} {status:?}");
        }
        for kind in [FailureKind::Throttled, FailureKind::Unavailable] {
            assert!(kind.is_transient());
        }
        for kind in [
            FailureKind::AccessDenied,
            FailureKind::NotFound,
            FailureKind::InvalidRequest,
        ] {
            assert!(!kind.is_transient());
        }
    }

    #[test]
    fn a_classified_error_keeps_its_kind_and_says_what_failed() {
        let e = ApiError {
            op: "PutItem",
            code: Some("KMSAccessDeniedException".into()),
            message: "the key refuses dynamodb".into(),
            status: Some(400),
            kind: classify(Some("KMSAccessDeniedException"), Some(400)),
        };
        let store = StoreError::from(e.clone());
        assert_eq!(store.failure_kind(), Some(FailureKind::AccessDenied));
        assert!(!store.is_retryable());
        assert_eq!(
            store.to_string(),
            "access denied: PutItem: KMSAccessDeniedException: the key refuses dynamodb"
        );
        let cloud = CloudError::from(e);
        assert_eq!(cloud.failure_kind(), Some(FailureKind::AccessDenied));
        assert!(!cloud.is_retryable());
    }
}
