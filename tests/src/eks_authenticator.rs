//! A stand-in for EKS's IAM token authentication, for the fault proxy: it
//! takes the bearer token the functions present (`k8s-aws-v1.` + the
//! base64url of a presigned `sts:GetCallerIdentity` URL), checks it the way
//! the EKS authenticator does (the regional STS host, the action, the
//! `x-k8s-aws-id` header among the signed ones, the credential scope, the
//! 15-minute window), then asks STS — the emulator — who signed it, and
//! maps that identity to the functions' Kubernetes user, as an EKS access
//! entry does.
//!
//! The emulator does not verify signatures (the unit tests in
//! `shared/src/kube/eks.rs` check ours against an independent SigV4
//! computation), and routes a request by its `Authorization` header, so the
//! stand-in sends the presigned signature in header form.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use nodewright::kube::eks::{CLUSTER_ID_HEADER, TOKEN_LIFETIME, TOKEN_PREFIX, sts_host};
use nodewright::model::Timestamp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fault_proxy::Authenticator;

#[derive(Debug)]
pub struct StsAuthenticator {
    /// The cluster this server is: tokens must name it.
    pub cluster: String,
    pub region: String,
    /// The emulator's `host:port` (plain HTTP on loopback).
    pub sts_address: String,
    /// What an accepted caller becomes upstream: `Bearer <token>`.
    pub upstream_authorization: String,
    /// The identities STS returned, in order.
    pub identities: Mutex<Vec<String>>,
    /// Every bearer token presented, accepted or not (so a test can look
    /// for them where they must not be, e.g. in the logs).
    pub tokens: Mutex<Vec<String>>,
}

impl StsAuthenticator {
    pub fn into_authenticator(self: Arc<Self>) -> Authenticator {
        Arc::new(move |header| {
            let me = self.clone();
            Box::pin(async move {
                let token = header
                    .as_deref()
                    .and_then(|h| h.strip_prefix("Bearer "))
                    .ok_or("no bearer token")?;
                me.tokens
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(token.to_owned());
                let arn = me.verify(token).await?;
                me.identities
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(arn);
                Ok(me.upstream_authorization.clone())
            })
        })
    }

    /// The identity (ARN) behind `token`, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<String, String> {
        let encoded = token.strip_prefix(TOKEN_PREFIX).ok_or("not an EKS token")?;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|e| format!("token is not unpadded base64url: {e}"))?;
        let url = String::from_utf8(url).map_err(|_| "token URL is not UTF-8")?;
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("token is not a URL: {e}"))?;
        if uri.scheme_str() != Some("https")
            || uri.host() != Some(sts_host(&self.region).as_str())
            || uri.path() != "/"
        {
            return Err(format!(
                "token URL {}://{}{} is not this region's STS",
                uri.scheme_str().unwrap_or(""),
                uri.host().unwrap_or(""),
                uri.path()
            ));
        }
        let raw_query = uri.query().ok_or("token URL has no query")?;
        let q: BTreeMap<String, String> = form_urlencoded::parse(raw_query.as_bytes())
            .into_owned()
            .collect();
        let get = |k: &str| {
            q.get(k)
                .map(String::as_str)
                .ok_or_else(|| format!("token URL lacks {k}"))
        };
        if get("Action")? != "GetCallerIdentity" || get("Version")? != "2011-06-15" {
            return Err("token URL is not sts:GetCallerIdentity".to_owned());
        }
        if get("X-Amz-Algorithm")? != "AWS4-HMAC-SHA256" {
            return Err("token is not SigV4-signed".to_owned());
        }
        let signed_headers = get("X-Amz-SignedHeaders")?;
        if !signed_headers.split(';').any(|h| h == CLUSTER_ID_HEADER) {
            return Err(format!("token does not sign {CLUSTER_ID_HEADER}"));
        }
        let credential = get("X-Amz-Credential")?;
        let scope: Vec<&str> = credential.split('/').collect();
        if scope.len() != 5
            || scope[2] != self.region
            || scope[3] != "sts"
            || scope[4] != "aws4_request"
        {
            return Err(format!(
                "credential scope {credential} is not sts in {}",
                self.region
            ));
        }
        let signed_at = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", get("X-Amz-Date")?)
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC))
            .map_err(|e| format!("X-Amz-Date: {e}"))?
            .timestamp();
        let now = Timestamp::now();
        if now > signed_at + TOKEN_LIFETIME || signed_at > now + jiff::SignedDuration::from_mins(5)
        {
            return Err(format!(
                "token signed at {signed_at} is outside its 15-minute window"
            ));
        }
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders={signed_headers}, Signature={}",
            get("X-Amz-Signature")?
        );
        let reply = self.get_caller_identity(raw_query, &authorization).await?;
        let arn = between(&reply, "<Arn>", "</Arn>")
            .ok_or_else(|| format!("STS refused the token: {reply}"))?;
        Ok(arn.to_owned())
    }

    /// `GET /?<query>` on the emulator, over a plain HTTP/1.1 connection.
    async fn get_caller_identity(
        &self,
        query: &str,
        authorization: &str,
    ) -> Result<String, String> {
        let mut stream = TcpStream::connect(&self.sts_address)
            .await
            .map_err(|e| format!("STS: {e}"))?;
        let request = format!(
            "GET /?{query} HTTP/1.1\r\nHost: {}\r\nAuthorization: {authorization}\r\n{CLUSTER_ID_HEADER}: {}\r\nConnection: close\r\n\r\n",
            self.sts_address, self.cluster
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("STS: {e}"))?;
        let mut reply = Vec::new();
        stream
            .read_to_end(&mut reply)
            .await
            .map_err(|e| format!("STS: {e}"))?;
        let reply = String::from_utf8_lossy(&reply).into_owned();
        if !reply.starts_with("HTTP/1.1 200") && !reply.starts_with("HTTP/1.0 200") {
            return Err(format!(
                "STS answered {}",
                reply.lines().next().unwrap_or("nothing")
            ));
        }
        Ok(reply)
    }
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(&text[start..end])
}
