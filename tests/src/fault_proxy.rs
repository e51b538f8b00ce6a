//! A small HTTP proxy in front of the real kube-apiserver that injects
//! faults: error statuses (429, 500, 503 …), slow replies, dropped
//! connections, or an action run just before a request is forwarded (to
//! provoke a conflict at an exact moment).
//!
//! The adapter talks plain HTTP to the proxy on loopback; the proxy forwards
//! over TLS (verifying the harness CA) with the caller's own
//! `Authorization` header, so RBAC applies exactly as without it — unless an
//! [`Authenticator`] stands in for the cluster's token authentication (as
//! EKS does for its IAM tokens). Every request is logged, so tests can
//! count attempts.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::client::Body;
use kube::{Client, Config};
use tokio::net::TcpListener;

/// What to do to a matching request.
#[derive(Clone)]
pub enum Fault {
    /// Answer with this status and a JSON `Status` body carrying `message`.
    Status(u16, String),
    /// Wait this long, then forward.
    Delay(Duration),
    /// Close the connection without answering.
    Drop,
    /// Run this, then forward (e.g. change the object to force a 409).
    Before(Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>),
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Status(code, m) => write!(f, "Status({code}, {m:?})"),
            Fault::Delay(d) => write!(f, "Delay({d:?})"),
            Fault::Drop => f.write_str("Drop"),
            Fault::Before(_) => f.write_str("Before(..)"),
        }
    }
}

/// Maps a caller's `Authorization` header to the one forwarded upstream,
/// or rejects the request (401) with a reason.
pub type Authenticator = Arc<
    dyn Fn(Option<String>) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>>
        + Send
        + Sync,
>;

#[derive(Debug)]
struct Rule {
    method: Method,
    /// Matched against `path?query`.
    path_contains: String,
    remaining: usize,
    fault: Fault,
}

/// One request the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: Method,
    pub path_and_query: String,
    /// The injected fault, if any (`"forwarded"` otherwise).
    pub outcome: String,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    authenticator: Option<Authenticator>,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("rules", &self.rules)
            .field("seen", &self.seen.len())
            .finish_non_exhaustive()
    }
}

/// A running proxy; it stops with the Tokio runtime that started it.
#[derive(Debug, Clone)]
pub struct FaultProxy {
    /// `http://127.0.0.1:<port>`
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream_url` (whose certificate `ca_pem` signs).
    pub async fn start(upstream_url: &str, ca_pem: &[u8]) -> FaultProxy {
        let mut config = Config::new(upstream_url.parse().expect("upstream URL"));
        config.root_cert = Some(nodewright::kube::connect::pem_certificates(ca_pem).expect("CA"));
        config.default_retry = false;
        let upstream = Client::try_from(config).expect("upstream client");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(Mutex::new(State::default()));
        let proxy = FaultProxy {
            url: format!("http://{addr}"),
            state: state.clone(),
        };
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let upstream = upstream.clone();
                let state = state.clone();
                tokio::spawn(async move {
                    let service =
                        service_fn(move |req| handle(req, upstream.clone(), state.clone()));
                    // An error here is a connection we dropped on purpose (or the client gave up).
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        proxy
    }

    /// Applies `fault` to the next `times` requests with `method` whose
    /// `path?query` contains `path_contains`. Rules are tried in order.
    pub fn inject(&self, method: Method, path_contains: &str, times: usize, fault: Fault) {
        self.lock().rules.push(Rule {
            method,
            path_contains: path_contains.to_owned(),
            remaining: times,
            fault,
        });
    }

    /// Authenticates every request with `authenticator` from now on.
    pub fn authenticate_with(&self, authenticator: Authenticator) {
        self.lock().authenticator = Some(authenticator);
    }

    /// Drops every rule that has not fired yet.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// Requests seen so far with `method` and `path_contains`.
    pub fn seen(&self, method: &Method, path_contains: &str) -> Vec<Seen> {
        self.lock()
            .seen
            .iter()
            .filter(|s| s.method == *method && s.path_and_query.contains(path_contains))
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn status_body(code: u16, message: &str) -> Body {
    let reason = match code {
        401 => "Unauthorized",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    };
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    Body::from(serde_json::to_vec(&status).unwrap_or_default())
}

#[derive(Debug)]
struct Dropped;
impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection dropped by the fault proxy")
    }
}
impl std::error::Error for Dropped {}

async fn handle(
    req: Request<Incoming>,
    upstream: Client,
    state: Arc<Mutex<State>>,
) -> Result<Response<Body>, Dropped> {
    let method = req.method().clone();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let (fault, authenticator) = {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        let fault = s
            .rules
            .iter_mut()
            .find(|r| {
                r.remaining > 0 && r.method == method && path_and_query.contains(&r.path_contains)
            })
            .map(|r| {
                r.remaining -= 1;
                r.fault.clone()
            });
        let outcome = fault
            .as_ref()
            .map(|f| format!("{f:?}"))
            .unwrap_or_else(|| "forwarded".to_owned());
        s.seen.push(Seen {
            method: method.clone(),
            path_and_query: path_and_query.clone(),
            outcome,
        });
        (fault, s.authenticator.clone())
    };
    match fault {
        Some(Fault::Status(code, message)) => return Ok(status_response(code, &message)),
        Some(Fault::Drop) => return Err(Dropped),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Before(action)) => action().await,
        None => {}
    }
    let mut req = req;
    if let Some(authenticate) = authenticator {
        let presented = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match authenticate(presented).await {
            Ok(header) => {
                let value = http::HeaderValue::from_str(&header).map_err(|_| Dropped)?;
                req.headers_mut().insert(http::header::AUTHORIZATION, value);
            }
            Err(reason) => return Ok(status_response(401, &reason)),
        }
    }
    forward(req, &upstream).await
}

fn status_response(code: u16, message: &str) -> Response<Body> {
    let mut resp = Response::new(status_body(code, message));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn forward(req: Request<Incoming>, upstream: &Client) -> Result<Response<Body>, Dropped> {
    use http_body_util_shim::collect;
    let (mut parts, body) = req.into_parts();
    let bytes = collect(body).await.map_err(|_| Dropped)?;
    parts.headers.remove(http::header::HOST);
    // The upstream client prefixes the server URL to this relative URI.
    let request = Request::from_parts(parts, Body::from(bytes));
    match upstream.send(request).await {
        Ok(resp) => Ok(resp),
        Err(e) => Ok(status_response(502, &format!("fault proxy: upstream: {e}"))),
    }
}

/// Reads a request body to the end without another dependency.
mod http_body_util_shim {
    use hyper::body::{Body as _, Incoming};
    use std::pin::Pin;

    pub async fn collect(mut body: Incoming) -> Result<Vec<u8>, hyper::Error> {
        let mut out = Vec::new();
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                None => return Ok(out),
                Some(Err(e)) => return Err(e),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        out.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}
