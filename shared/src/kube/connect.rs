//! Connecting to the API server: a [`Connection`] (the `kube::Client`,
//! its token source and settings), which a
//! [`KubeCluster`](super::KubeCluster) is built from.
//!
//! Three ways in:
//! - **EKS** ([`Connection::with_token_source`] with an
//!   [`EksTokenSource`](super::EksTokenSource)): endpoint and CA from
//!   `eks:DescribeCluster`, a bearer token presigned from the function's AWS
//!   credentials, refreshed before it expires.
//! - **kubeconfig** ([`Connection::from_kubeconfig`]): `KUBECONFIG` (or an
//!   explicit file) and an optional context, for local runs.
//! - **explicit** ([`Connection::with_static_token`]): URL + CA file + token,
//!   what the integration tests use.
//!
//! Whatever the mode, kube's built-in retry is off: the adapter's own
//! [`RetryPolicy`](super::RetryPolicy) decides what is retried and for how long.

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use ::kube::client::ClientBuilder;
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Config};
use base64::Engine as _;
use http::header::{AUTHORIZATION, HeaderValue};
use http::{Request, Uri};

use super::retry::RetryPolicy;
use crate::ports::ClusterError;

/// Where the API server is and which CA signs its certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https://…` (plain `http://` is accepted for loopback test proxies).
    pub url: String,
    /// PEM, one or more certificates.
    pub ca_pem: Vec<u8>,
    /// Verify the server certificate for this name instead of the URL's host.
    pub tls_server_name: Option<String>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("tls_server_name", &self.tls_server_name)
            .finish()
    }
}

/// Knobs of the adapter.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    pub retry: RetryPolicy,
    /// `limit` of each page of a list.
    pub page_size: u32,
    pub connect_timeout: Duration,
    /// Events' `reportingInstance` (e.g. the function name).
    pub reporting_instance: String,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            retry: RetryPolicy::default(),
            page_size: 500,
            connect_timeout: Duration::from_secs(5),
            reporting_instance: super::CONTROLLER_NAME.to_owned(),
        }
    }
}

/// Where bearer tokens come from. Called before every attempt of every API
/// call, so it must answer from a cache when it can.
pub trait TokenSource: Send + Sync + fmt::Debug {
    /// A token good for the next request.
    fn token(&self) -> Pin<Box<dyn Future<Output = Result<String, ClusterError>> + Send + '_>>;
    /// The server refused the last token (401): forget any cached one.
    fn invalidate(&self) {}
}

/// A fixed token (tests, kubeconfig-less local runs).
#[derive(Clone)]
pub struct StaticToken(String);

impl StaticToken {
    pub fn new(token: impl Into<String>) -> Self {
        StaticToken(token.into())
    }
}

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticToken(<redacted>)")
    }
}

impl TokenSource for StaticToken {
    fn token(&self) -> Pin<Box<dyn Future<Output = Result<String, ClusterError>> + Send + '_>> {
        let t = self.0.clone();
        Box::pin(async move { Ok(t) })
    }
}

/// The `Authorization` header every request carries, set before each
/// attempt from the [`TokenSource`] and read by [`BearerLayer`].
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedHeader(Arc<RwLock<Option<HeaderValue>>>);

impl SharedHeader {
    pub(crate) fn set(&self, token: &str) -> Result<(), ClusterError> {
        let mut v = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClusterError::other("bearer token", "not a valid header value"))?;
        v.set_sensitive(true);
        let mut slot = self.0.write().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref() != Some(&v) {
            *slot = Some(v);
        }
        Ok(())
    }

    fn get(&self) -> Option<HeaderValue> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A tower layer that adds the current bearer token to each request.
#[derive(Debug, Clone)]
pub(crate) struct BearerLayer(SharedHeader);

impl<S> tower::Layer<S> for BearerLayer {
    type Service = Bearer<S>;
    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            header: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Bearer<S> {
    inner: S,
    header: SharedHeader,
}

impl<S, B> tower::Service<Request<B>> for Bearer<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> S::Future {
        if let Some(v) = self.header.get() {
            req.headers_mut().insert(AUTHORIZATION, v);
        }
        self.inner.call(req)
    }
}

/// The token source and the header it feeds.
#[derive(Debug, Clone)]
pub(crate) struct Auth {
    pub(crate) source: Arc<dyn TokenSource>,
    pub(crate) header: SharedHeader,
}

impl Auth {
    /// Makes sure the header holds a fresh token.
    pub(crate) async fn refresh(&self) -> Result<(), ClusterError> {
        let token = self.source.token().await?;
        self.header.set(&token)
    }
}

/// The DER certificates of a PEM bundle.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text =
        std::str::from_utf8(pem).map_err(|_| "CA bundle is not text (expected PEM)".to_owned())?;
    let mut certs = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let end = body
            .find(END)
            .ok_or_else(|| "CA bundle: certificate without an END line".to_owned())?;
        let b64: String = body[..end]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map_err(|e| {
                format!(
                    "CA bundle: certificate {} is not base64: {e}",
                    certs.len() + 1
                )
            })?;
        certs.push(der);
        rest = &body[end + END.len()..];
    }
    if certs.is_empty() {
        return Err("CA bundle holds no PEM certificate".to_owned());
    }
    Ok(certs)
}

fn config_for(endpoint: &Endpoint, settings: &ClientSettings) -> Result<Config, ClusterError> {
    let uri: Uri = endpoint.url.parse().map_err(|e: http::uri::InvalidUri| {
        ClusterError::other(format!("API server URL {:?}", endpoint.url), e.to_string())
    })?;
    let mut config = Config::new(uri);
    if !endpoint.ca_pem.is_empty() {
        config.root_cert = Some(
            pem_certificates(&endpoint.ca_pem)
                .map_err(|e| ClusterError::other("API server CA", e))?,
        );
    }
    config.tls_server_name = endpoint.tls_server_name.clone();
    tune(&mut config, settings);
    Ok(config)
}

/// What every mode sets: no built-in retry, our connect timeout.
fn tune(config: &mut Config, settings: &ClientSettings) {
    config.default_retry = false;
    config.connect_timeout = Some(settings.connect_timeout);
    // Each attempt has its own timeout in the retry policy; a read timeout
    // here would also count a pooled connection's idle time.
    config.read_timeout = None;
}

/// A client for `endpoint` whose requests carry the current token of `auth`.
pub(crate) fn client_with_auth(
    endpoint: &Endpoint,
    auth: &Auth,
    settings: &ClientSettings,
) -> Result<Client, ClusterError> {
    let config = config_for(endpoint, settings)?;
    let builder = ClientBuilder::try_from(config)
        .map_err(|e| ClusterError::other("building the Kubernetes client", e.to_string()))?;
    Ok(builder
        .with_layer(&BearerLayer(auth.header.clone()))
        .build())
}

/// A connection to the API server: the client, the token source its
/// requests carry a token of (none when the kubeconfig authenticates, or
/// the client was built elsewhere), and the settings it was built with.
pub struct Connection {
    pub(crate) client: Client,
    pub(crate) auth: Option<Auth>,
    pub(crate) settings: ClientSettings,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("auth", &self.auth.as_ref().map(|a| &a.source))
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Client construction spawns the client's request buffer, so every
/// constructor below must run inside a Tokio runtime.
impl Connection {
    /// The API server at `endpoint` with tokens from `tokens` (the EKS mode).
    pub fn with_token_source(
        endpoint: &Endpoint,
        tokens: Arc<dyn TokenSource>,
        settings: ClientSettings,
    ) -> Result<Connection, ClusterError> {
        let auth = Auth {
            source: tokens,
            header: SharedHeader::default(),
        };
        let client = client_with_auth(endpoint, &auth, &settings)?;
        Ok(Connection {
            client,
            auth: Some(auth),
            settings,
        })
    }

    /// The API server at `url` whose CA is in `ca_file` (PEM), with a fixed token.
    pub fn with_static_token(
        url: &str,
        ca_file: &Path,
        token: &str,
        settings: ClientSettings,
    ) -> Result<Connection, ClusterError> {
        let ca_pem = std::fs::read(ca_file).map_err(|e| {
            ClusterError::other(
                format!("reading CA file {}", ca_file.display()),
                e.to_string(),
            )
        })?;
        let endpoint = Endpoint {
            url: url.to_owned(),
            ca_pem,
            tls_server_name: None,
        };
        let auth = Auth {
            source: Arc::new(StaticToken::new(token)),
            header: SharedHeader::default(),
        };
        // Set now, so requests made directly on `client()` carry it too.
        auth.header.set(token)?;
        let client = client_with_auth(&endpoint, &auth, &settings)?;
        Ok(Connection {
            client,
            auth: Some(auth),
            settings,
        })
    }

    /// The API server of a kubeconfig: `path`, or else `KUBECONFIG` / `~/.kube/config`;
    /// `context`, or else the file's current context. Whatever authentication
    /// the kubeconfig names (token, client certificate, exec plugin) is used.
    pub async fn from_kubeconfig(
        path: Option<&Path>,
        context: Option<&str>,
        settings: ClientSettings,
    ) -> Result<Connection, ClusterError> {
        let options = KubeConfigOptions {
            context: context.map(str::to_owned),
            ..Default::default()
        };
        let mut config = match path {
            Some(p) => {
                let kubeconfig = Kubeconfig::read_from(p).map_err(|e| {
                    ClusterError::other(
                        format!("reading kubeconfig {}", p.display()),
                        e.to_string(),
                    )
                })?;
                Config::from_custom_kubeconfig(kubeconfig, &options).await
            }
            None => Config::from_kubeconfig(&options).await,
        }
        .map_err(|e| ClusterError::other("loading kubeconfig", e.to_string()))?;
        tune(&mut config, &settings);
        let client = Client::try_from(config)
            .map_err(|e| ClusterError::other("building the Kubernetes client", e.to_string()))?;
        Ok(Connection {
            client,
            auth: None,
            settings,
        })
    }

    /// A client built elsewhere (its retry should be off).
    pub fn from_client(client: Client, settings: ClientSettings) -> Connection {
        Connection {
            client,
            auth: None,
            settings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "junk before\n-----BEGIN CERTIFICATE-----\nAAEC\nAw==\n-----END CERTIFICATE-----\n\
                       -----BEGIN CERTIFICATE-----\nBAU=\n-----END CERTIFICATE-----\n";

    #[test]
    fn pem_bundles_split_into_der_certificates() {
        assert_eq!(
            pem_certificates(PEM.as_bytes()),
            Ok(vec![vec![0, 1, 2, 3], vec![4, 5]])
        );
        assert!(pem_certificates(b"no certificate here").is_err());
        assert!(pem_certificates(b"-----BEGIN CERTIFICATE-----\nAAEC").is_err());
        assert!(
            pem_certificates(b"-----BEGIN CERTIFICATE-----\n*!*\n-----END CERTIFICATE-----")
                .is_err()
        );
    }

    #[test]
    fn the_bearer_header_is_sensitive_and_replaced() {
        let h = SharedHeader::default();
        assert!(h.get().is_none());
        h.set("abc").expect("valid token");
        let v = h.get().expect("a header");
        assert_eq!(v, "Bearer abc");
        assert!(v.is_sensitive());
        h.set("def").expect("valid token");
        assert_eq!(h.get().expect("a header"), "Bearer def");
        assert!(h.set("bad\ntoken").is_err());
    }
}
