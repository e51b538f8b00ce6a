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
//!
//! SDK clients are built from one [`aws_config::SdkConfig`] made by
//! [`sdk_config`]: standard retries with a bounded number of attempts and
//! per-attempt and per-operation timeouts, so throttling and 5xx are retried
//! a few times within a deadline and then surface as transient errors.

pub mod dynamo;
pub mod ec2;
pub mod nodeclass;
pub mod prices;
pub mod userdata;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};

pub use dynamo::{DynamoStore, DynamoTables, Requests};
pub use ec2::{Ec2Cloud, Ec2CloudSettings, Refresh};
pub use prices::{AwsPrices, PriceSource, StaticPrices};

use crate::ports::{CloudError, StoreError};

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

/// Loads the shared SDK configuration (credentials, region, endpoint) with
/// our retry and timeout settings.
pub async fn sdk_config(options: &ClientOptions) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
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

/// Error codes that mean "try again later".
const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceededException",
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

/// A failed AWS call, reduced to what callers branch on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub op: &'static str,
    pub code: Option<String>,
    pub message: String,
    pub status: Option<u16>,
    pub transient: bool,
}

impl ApiError {
    pub fn from_sdk<E>(op: &'static str, err: SdkError<E>) -> ApiError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let code = err.code().map(str::to_owned);
        let status = err.raw_response().map(|r| r.status().as_u16());
        let transient = match &err {
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => true,
            SdkError::ResponseError(_) => status.is_none_or(|s| s >= 500 || s == 429),
            SdkError::ServiceError(_) => {
                code.as_deref()
                    .is_some_and(|c| TRANSIENT_CODES.contains(&c))
                    || status.is_some_and(|s| s >= 500 || s == 429)
            }
            _ => false,
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
            transient,
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

impl From<ApiError> for CloudError {
    fn from(e: ApiError) -> CloudError {
        if e.transient {
            CloudError::Transient(e.to_string())
        } else {
            CloudError::Invalid(e.to_string())
        }
    }
}

impl From<ApiError> for StoreError {
    fn from(e: ApiError) -> StoreError {
        if e.transient {
            StoreError::Transient(e.to_string())
        } else {
            StoreError::Invalid(e.to_string())
        }
    }
}
