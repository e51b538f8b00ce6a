//! EKS authentication from outside the cluster, and the cluster's address.
//!
//! EKS accepts as a bearer token `k8s-aws-v1.` followed by the unpadded
//! base64url of a presigned STS `GetCallerIdentity` URL whose signature
//! covers the header `x-k8s-aws-id: <cluster name>`; the API server replays
//! the URL to STS to learn the caller's IAM identity, then maps it through
//! the cluster's access entries. A token is accepted for 15 minutes from its
//! signing time; [`EksTokenSource`] re-signs after 14 (or a minute before the
//! credentials themselves expire, if that is sooner).
//!
//! The endpoint and CA come from `eks:DescribeCluster`:
//! [`EksClusterInfo::from_describe`] takes that call's output fields, so it
//! works with whichever EKS client fetched them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use base64::Engine as _;
use tokio::sync::Mutex;

use super::cluster::KubeCluster;
use super::connect::{ClientSettings, Endpoint, TokenSource, pem_certificates};
use crate::model::{SignedDuration, Timestamp};
use crate::ports::{Clock, ClusterError};

/// The prefix EKS recognises.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The header whose signature binds the token to one cluster.
pub const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";
/// How long EKS accepts a token after its signing time.
pub const TOKEN_LIFETIME: SignedDuration = SignedDuration::from_mins(15);
/// When we sign a new one.
pub const REFRESH_AFTER: SignedDuration = SignedDuration::from_mins(14);
/// `X-Amz-Expires` of the presigned URL (what `aws eks get-token` uses;
/// EKS applies its own 15-minute window regardless).
pub const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);

/// A signed token and its timing.
#[derive(Clone, PartialEq, Eq)]
pub struct EksToken {
    pub token: String,
    pub signed_at: Timestamp,
    /// EKS stops accepting it then (or the credentials expire).
    pub expires_at: Timestamp,
    /// We sign a new one from then on.
    pub refresh_at: Timestamp,
}

impl fmt::Debug for EksToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EksToken")
            .field("token", &"<redacted>")
            .field("signed_at", &self.signed_at)
            .field("expires_at", &self.expires_at)
            .field("refresh_at", &self.refresh_at)
            .finish()
    }
}

impl EksToken {
    /// Still good to send at `now`.
    pub fn is_fresh(&self, now: Timestamp) -> bool {
        now < self.refresh_at
    }
}

/// The regional STS endpoint of `region`.
pub fn sts_host(region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("sts.{region}.{suffix}")
}

/// Presigns the token for `cluster` with `credentials` at `now`.
pub fn presign_token(
    cluster: &str,
    region: &str,
    credentials: &Credentials,
    now: Timestamp,
) -> Result<EksToken, ClusterError> {
    let fail =
        |what: &str, e: &dyn fmt::Display| ClusterError::other("EKS token", format!("{what}: {e}"));
    let url = format!(
        "https://{}/?Action=GetCallerIdentity&Version=2011-06-15",
        sts_host(region)
    );
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(SystemTime::from(now))
        .settings(settings)
        .build()
        .map_err(|e| fail("signing parameters", &e))?
        .into();
    let headers = [(CLUSTER_ID_HEADER, cluster)];
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| fail("request", &e))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| fail("signing", &e))?
        .into_parts();
    let mut request = http::Request::get(url.as_str())
        .body(())
        .map_err(|e| fail("request", &e))?;
    instructions.apply_to_request_http1x(&mut request);
    let presigned = request.uri().to_string();
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(presigned)
    );

    let mut expires_at = now + TOKEN_LIFETIME;
    let mut refresh_at = now + REFRESH_AFTER;
    if let Some(expiry) = credentials
        .expiry()
        .and_then(|t| Timestamp::try_from(t).ok())
    {
        expires_at = expires_at.min(expiry);
        refresh_at = refresh_at.min(expiry - SignedDuration::from_secs(60));
    }
    Ok(EksToken {
        token,
        signed_at: now,
        expires_at,
        refresh_at,
    })
}

/// Bearer tokens for one EKS cluster, signed from `credentials` and cached
/// until [`EksToken::refresh_at`].
pub struct EksTokenSource<C: Clock> {
    cluster: String,
    region: String,
    credentials: SharedCredentialsProvider,
    clock: C,
    cached: Mutex<Option<EksToken>>,
}

impl<C: Clock> fmt::Debug for EksTokenSource<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EksTokenSource")
            .field("cluster", &self.cluster)
            .field("region", &self.region)
            .finish()
    }
}

impl<C: Clock> EksTokenSource<C> {
    pub fn new(
        cluster: impl Into<String>,
        region: impl Into<String>,
        credentials: impl ProvideCredentials + 'static,
        clock: C,
    ) -> Self {
        EksTokenSource {
            cluster: cluster.into(),
            region: region.into(),
            credentials: SharedCredentialsProvider::new(credentials),
            clock,
            cached: Mutex::new(None),
        }
    }

    /// The cached token if it is still fresh, else a newly signed one.
    pub async fn current(&self) -> Result<EksToken, ClusterError> {
        let mut cached = self.cached.lock().await;
        let now = self.clock.now();
        if let Some(t) = cached.as_ref().filter(|t| t.is_fresh(now)) {
            return Ok(t.clone());
        }
        let credentials =
            self.credentials.provide_credentials().await.map_err(|e| {
                ClusterError::transient("EKS token", format!("AWS credentials: {e}"))
            })?;
        let token = presign_token(&self.cluster, &self.region, &credentials, now)?;
        *cached = Some(token.clone());
        Ok(token)
    }
}

impl<C: Clock + 'static> TokenSource for EksTokenSource<C> {
    fn token(&self) -> Pin<Box<dyn Future<Output = Result<String, ClusterError>> + Send + '_>> {
        Box::pin(async move { Ok(self.current().await?.token) })
    }

    fn invalidate(&self) {
        if let Ok(mut cached) = self.cached.try_lock() {
            *cached = None;
        }
    }
}

/// The function's AWS credentials from the environment, as Lambda sets them
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
pub fn credentials_from_env() -> Result<Credentials, ClusterError> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Ok(Credentials::new(
            id,
            secret,
            var("AWS_SESSION_TOKEN"),
            None,
            "environment",
        )),
        _ => Err(ClusterError::other(
            "EKS token",
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set",
        )),
    }
}

/// What `eks:DescribeCluster` tells us about a cluster.
#[derive(Clone, PartialEq, Eq)]
pub struct EksClusterInfo {
    pub name: String,
    /// `https://<id>.<…>.eks.amazonaws.com`
    pub endpoint: String,
    /// The cluster CA, PEM.
    pub ca_pem: Vec<u8>,
    /// Kubernetes `major.minor`, e.g. `1.34`.
    pub version: Option<String>,
}

impl fmt::Debug for EksClusterInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EksClusterInfo")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("version", &self.version)
            .finish()
    }
}

impl EksClusterInfo {
    /// From DescribeCluster's `cluster.endpoint`, `cluster.certificateAuthority.data`
    /// (base64 of the PEM) and `cluster.version`. A cluster still being
    /// created has no endpoint yet: that is an error worth retrying.
    pub fn from_describe(
        name: &str,
        endpoint: Option<&str>,
        certificate_authority_data: Option<&str>,
        version: Option<&str>,
    ) -> Result<EksClusterInfo, ClusterError> {
        let endpoint = endpoint.filter(|e| !e.is_empty()).ok_or_else(|| {
            ClusterError::transient(format!("EKS cluster {name}"), "no endpoint yet")
        })?;
        if !endpoint.starts_with("https://") {
            return Err(ClusterError::other(
                format!("EKS cluster {name}"),
                format!("endpoint {endpoint:?} is not https"),
            ));
        }
        let data = certificate_authority_data
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                ClusterError::transient(
                    format!("EKS cluster {name}"),
                    "no certificate authority yet",
                )
            })?;
        let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let ca_pem = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|e| {
                ClusterError::other(
                    format!("EKS cluster {name}"),
                    format!("certificate authority is not base64: {e}"),
                )
            })?;
        pem_certificates(&ca_pem)
            .map_err(|e| ClusterError::other(format!("EKS cluster {name}"), e))?;
        Ok(EksClusterInfo {
            name: name.to_owned(),
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            ca_pem,
            version: version.filter(|v| !v.is_empty()).map(str::to_owned),
        })
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.endpoint.clone(),
            ca_pem: self.ca_pem.clone(),
            tls_server_name: None,
        }
    }

    /// The adapter for this cluster, authenticated with `tokens` (EKS mode).
    /// Must run inside a Tokio runtime.
    pub fn connect<C: Clock + 'static>(
        &self,
        tokens: EksTokenSource<C>,
        settings: ClientSettings,
    ) -> Result<KubeCluster, ClusterError> {
        KubeCluster::with_token_source(&self.endpoint(), Arc::new(tokens), settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex as StdMutex;

    fn creds(expiry: Option<SystemTime>) -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some("session-token-example".to_owned()),
            expiry,
            "test",
        )
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    /// The token's URL split into host and query parameters.
    fn decode(token: &str) -> (String, BTreeMap<String, String>) {
        let b64 = token.strip_prefix(TOKEN_PREFIX).expect("prefix");
        assert!(
            !b64.contains('=') && !b64.contains('+') && !b64.contains('/'),
            "unpadded base64url: {b64}"
        );
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b64)
                .expect("base64url"),
        )
        .expect("utf-8");
        let uri: http::Uri = url.parse().expect("a URL");
        assert_eq!(uri.scheme_str(), Some("https"));
        assert_eq!(uri.path(), "/");
        let query = uri.query().expect("query").to_owned();
        let params = query
            .split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("k=v");
                (k.to_owned(), v.to_owned())
            })
            .collect();
        (uri.host().expect("host").to_owned(), params)
    }

    #[test]
    fn token_is_a_presigned_get_caller_identity_url() {
        let now = at("2026-01-02T03:04:05Z");
        let t = presign_token("prod-cluster", "eu-west-1", &creds(None), now).expect("token");
        assert!(t.token.starts_with("k8s-aws-v1."));
        let (host, q) = decode(&t.token);
        assert_eq!(host, "sts.eu-west-1.amazonaws.com");
        assert_eq!(q["Action"], "GetCallerIdentity");
        assert_eq!(q["Version"], "2011-06-15");
        assert_eq!(q["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(
            q["X-Amz-Credential"],
            "AKIDEXAMPLE%2F20260102%2Feu-west-1%2Fsts%2Faws4_request"
        );
        assert_eq!(q["X-Amz-Date"], "20260102T030405Z");
        assert_eq!(q["X-Amz-Expires"], "60");
        assert!(
            q["X-Amz-SignedHeaders"].split("%3B").any(|h| h == "host"),
            "{}",
            q["X-Amz-SignedHeaders"]
        );
        assert_eq!(q["X-Amz-SignedHeaders"], "host%3Bx-k8s-aws-id");
        assert_eq!(q["X-Amz-Security-Token"], "session-token-example");
        assert_eq!(q["X-Amz-Signature"].len(), 64);
        assert!(q["X-Amz-Signature"].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn signature_is_stable_for_fixed_inputs_and_binds_cluster_and_time() {
        let now = at("2026-01-02T03:04:05Z");
        let sig = |cluster: &str, now: Timestamp| {
            let t = presign_token(cluster, "eu-west-1", &creds(None), now).expect("token");
            decode(&t.token).1["X-Amz-Signature"].clone()
        };
        let a = sig("prod-cluster", now);
        assert_eq!(a, sig("prod-cluster", now));
        // Pinned: a change here means the canonical request changed.
        assert_eq!(
            a,
            "83643c7b0b12a46e0b47dd91908089ae6462c5b827a30dedd3104bc8236913e1"
        );
        assert_ne!(a, sig("other-cluster", now));
        assert_ne!(a, sig("prod-cluster", now + SignedDuration::from_secs(1)));
    }

    /// Recomputes the signature from the decoded URL, step by step as the
    /// SigV4 specification describes query-string signing, independently of
    /// aws-sigv4: proves the token is what STS will verify, not just stable.
    #[test]
    fn signature_verifies_against_an_independent_sigv4_computation() {
        use hmac::{Hmac, Mac};
        use sha2::{Digest, Sha256};
        fn hmac(key: &[u8], data: &str) -> Vec<u8> {
            let mut m = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
            m.update(data.as_bytes());
            m.finalize().into_bytes().to_vec()
        }
        fn hex(bytes: &[u8]) -> String {
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }
        let now = at("2026-01-02T03:04:05Z");
        let t = presign_token("prod-cluster", "eu-west-1", &creds(None), now).expect("token");
        let (host, q) = decode(&t.token);
        // Parameters arrive URI-encoded already; the canonical query string is
        // every parameter but the signature, sorted by name.
        let canonical_query = q
            .iter()
            .filter(|(k, _)| *k != "X-Amz-Signature")
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let canonical_request = format!(
            "GET\n/\n{canonical_query}\nhost:{host}\nx-k8s-aws-id:prod-cluster\n\nhost;x-k8s-aws-id\n{}",
            hex(&Sha256::digest(b""))
        );
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n20260102T030405Z\n20260102/eu-west-1/sts/aws4_request\n{}",
            hex(&Sha256::digest(canonical_request.as_bytes()))
        );
        let k_date = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20260102");
        let k_region = hmac(&k_date, "eu-west-1");
        let k_service = hmac(&k_region, "sts");
        let k_signing = hmac(&k_service, "aws4_request");
        assert_eq!(
            q["X-Amz-Signature"],
            hex(&hmac(&k_signing, &string_to_sign))
        );
    }

    #[test]
    fn china_regions_use_their_partition() {
        assert_eq!(sts_host("cn-north-1"), "sts.cn-north-1.amazonaws.com.cn");
        assert_eq!(sts_host("us-east-1"), "sts.us-east-1.amazonaws.com");
    }

    #[test]
    fn token_lives_15_minutes_and_is_refreshed_after_14() {
        let now = at("2026-01-02T03:04:05Z");
        let t = presign_token("c", "us-east-1", &creds(None), now).expect("token");
        assert_eq!(t.expires_at, at("2026-01-02T03:19:05Z"));
        assert_eq!(t.refresh_at, at("2026-01-02T03:18:05Z"));
        assert!(t.is_fresh(at("2026-01-02T03:18:04Z")));
        assert!(!t.is_fresh(at("2026-01-02T03:18:05Z")));
        // Credentials that expire sooner cut it short.
        let expiry = SystemTime::from(at("2026-01-02T03:10:00Z"));
        let t = presign_token("c", "us-east-1", &creds(Some(expiry)), now).expect("token");
        assert_eq!(t.expires_at, at("2026-01-02T03:10:00Z"));
        assert_eq!(t.refresh_at, at("2026-01-02T03:09:00Z"));
    }

    #[derive(Debug, Clone)]
    struct FixedClock(Arc<StdMutex<Timestamp>>);
    impl Clock for FixedClock {
        fn now(&self) -> Timestamp {
            *self.0.lock().expect("clock")
        }
    }

    #[tokio::test]
    async fn the_source_caches_until_refresh_time() {
        let clock = FixedClock(Arc::new(StdMutex::new(at("2026-01-02T03:04:05Z"))));
        let source = EksTokenSource::new("c", "us-east-1", creds(None), clock.clone());
        let first = source.current().await.expect("token");
        *clock.0.lock().expect("clock") = at("2026-01-02T03:18:04Z");
        let again = source.current().await.expect("token");
        assert_eq!(first, again, "13:59 later the cached token is reused");
        *clock.0.lock().expect("clock") = at("2026-01-02T03:18:05Z");
        let renewed = source.current().await.expect("token");
        assert_ne!(first.token, renewed.token);
        assert_eq!(renewed.signed_at, at("2026-01-02T03:18:05Z"));
        assert_eq!(renewed.expires_at, at("2026-01-02T03:33:05Z"));
        // After a 401 the next call signs again even if the cache was fresh.
        *clock.0.lock().expect("clock") = at("2026-01-02T03:18:06Z");
        source.invalidate();
        let after_401 = source.current().await.expect("token");
        assert_eq!(after_401.signed_at, at("2026-01-02T03:18:06Z"));
        assert_eq!(source.token().await.expect("token"), after_401.token);
    }

    // A self-signed CA made for this test (CN nodewright-test-ca).
    const TEST_CA: &str = include_str!("testdata/test-ca.pem");

    #[tokio::test]
    async fn describe_cluster_output_becomes_an_endpoint() {
        let data = base64::engine::general_purpose::STANDARD.encode(TEST_CA);
        let info = EksClusterInfo::from_describe(
            "prod",
            Some("https://ABCDEF0123456789.gr7.eu-west-1.eks.amazonaws.com/"),
            Some(&data),
            Some("1.34"),
        )
        .expect("valid");
        assert_eq!(
            info.endpoint,
            "https://ABCDEF0123456789.gr7.eu-west-1.eks.amazonaws.com"
        );
        assert_eq!(info.ca_pem, TEST_CA.as_bytes());
        assert_eq!(info.version.as_deref(), Some("1.34"));
        let ep = info.endpoint();
        assert_eq!(ep.url, info.endpoint);
        // The client accepts it (parses the CA into its trust store).
        let tokens =
            EksTokenSource::new("prod", "eu-west-1", creds(None), crate::ports::SystemClock);
        info.connect(tokens, ClientSettings::default())
            .expect("client");
    }

    #[test]
    fn describe_cluster_output_that_cannot_be_used_is_refused() {
        let data = base64::engine::general_purpose::STANDARD.encode(TEST_CA);
        let creating = EksClusterInfo::from_describe("prod", None, None, None);
        assert!(
            matches!(creating, Err(ClusterError::Transient { .. })),
            "{creating:?}"
        );
        let plain = EksClusterInfo::from_describe("prod", Some("http://x"), Some(&data), None);
        assert!(
            matches!(plain, Err(ClusterError::Other { .. })),
            "{plain:?}"
        );
        let not_b64 = EksClusterInfo::from_describe("prod", Some("https://x"), Some("%%%"), None);
        assert!(
            matches!(not_b64, Err(ClusterError::Other { .. })),
            "{not_b64:?}"
        );
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        let not_pem =
            EksClusterInfo::from_describe("prod", Some("https://x"), Some(&not_pem), None);
        assert!(
            matches!(not_pem, Err(ClusterError::Other { .. })),
            "{not_pem:?}"
        );
    }
}
