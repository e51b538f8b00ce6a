//! The EKS connection flow end to end, as `runtime::connect` runs it in a
//! Lambda: `eks:DescribeCluster` (the AWS emulator) → endpoint, CA and
//! version → bearer tokens presigned from the function's AWS credentials →
//! requests the cluster authenticates by asking STS (the emulator) who
//! signed them, then authorises with the shipped RBAC (the real
//! kube-apiserver).
//!
//! The emulator's DescribeCluster returns an endpoint that does not resolve
//! and a CA that is not a certificate, so after checking what the adapter
//! makes of them, the test points the client at the local server (through
//! the proxy that plays EKS's token authentication) with the server's CA.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use nodewright::kube::{ClientSettings, EksClusterInfo, EksTokenSource};
use nodewright::model::{SignedDuration, Timestamp};
use nodewright::ports::{Clock, Cluster, ClusterError, SystemClock};
use nodewright_tests::aws::{moto, sdk_config, unique};
use nodewright_tests::eks_authenticator::StsAuthenticator;
use nodewright_tests::fault_proxy::FaultProxy;
use nodewright_tests::kube_harness::{KubeEnv, apply_rbac};

const REGION: &str = "eu-west-1";

/// A clock 20 minutes behind: its tokens are past EKS's 15-minute window.
struct TwentyMinutesAgo;
impl Clock for TwentyMinutesAgo {
    fn now(&self) -> Timestamp {
        Timestamp::now() - SignedDuration::from_mins(20)
    }
}

/// An EKS cluster in the emulator, as DescribeCluster reports it.
async fn described_cluster(name: &str) -> aws_sdk_eks::types::Cluster {
    let eks = aws_sdk_eks::Client::new(&sdk_config(REGION).await);
    eks.create_cluster()
        .name(name)
        .version("1.32")
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
        .send()
        .await
        .expect("eks:CreateCluster");
    let out = eks
        .describe_cluster()
        .name(name)
        .send()
        .await
        .expect("eks:DescribeCluster");
    out.cluster().cloned().expect("a cluster")
}

/// The proxy that authenticates EKS tokens against the emulator's STS and
/// forwards accepted callers as the functions' Kubernetes user.
async fn eks_front(env: &KubeEnv, cluster: &str) -> (FaultProxy, Arc<StsAuthenticator>) {
    let proxy = FaultProxy::start(&env.url, &env.ca_pem()).await;
    let auth = Arc::new(StsAuthenticator {
        cluster: cluster.to_owned(),
        region: REGION.to_owned(),
        sts_address: moto()
            .endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned(),
        upstream_authorization: format!("Bearer {}", env.function_token),
        identities: Mutex::new(Vec::new()),
        tokens: Mutex::new(Vec::new()),
    });
    proxy.authenticate_with(auth.clone().into_authenticator());
    (proxy, auth)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_then_iam_tokens_reach_the_api_server_as_the_function_user() {
    let env = KubeEnv::get();
    apply_rbac(env).await;
    let name = unique("flow");
    let described = described_cluster(&name).await;

    // What the adapter makes of the emulator's reply: its CA is no certificate.
    let ca_data = described.certificate_authority().and_then(|c| c.data());
    let refused =
        EksClusterInfo::from_describe(&name, described.endpoint(), ca_data, described.version())
            .expect_err("the emulator's CA is not a certificate");
    assert!(refused.to_string().contains(&name), "{refused}");

    // The same reply with the local server's CA: endpoint and version as described.
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(env.ca_pem());
    let mut info = EksClusterInfo::from_describe(
        &name,
        described.endpoint(),
        Some(&ca_b64),
        described.version(),
    )
    .expect("a usable DescribeCluster reply");
    assert_eq!(info.version.as_deref(), Some("1.32"));
    assert_eq!(
        info.endpoint,
        described
            .endpoint()
            .expect("endpoint")
            .trim_end_matches('/')
    );

    // Point it at the local server, behind the token authentication.
    let (proxy, auth) = eks_front(env, &name).await;
    info.endpoint = proxy.url.clone();
    let sdk = sdk_config(REGION).await;
    let credentials = sdk.credentials_provider().expect("credentials");
    let cluster = info
        .connect(
            EksTokenSource::new(&name, REGION, credentials, SystemClock),
            ClientSettings::default(),
        )
        .expect("client");

    cluster
        .nodes()
        .await
        .expect("the function lists nodes with an IAM token");
    cluster.pending_pods().await.expect("and pending pods");
    let identities = auth.identities.lock().expect("lock").clone();
    assert!(
        !identities.is_empty() && identities.iter().all(|a| a.starts_with("arn:aws:sts::")),
        "{identities:?}"
    );

    // Authenticated as the function user, RBAC still keeps Secrets out of reach.
    let secrets: Api<Secret> = Api::all(cluster.client().clone());
    let err = secrets
        .list(&ListParams::default())
        .await
        .expect_err("secrets are forbidden");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_the_cluster_refuses_end_in_a_clear_error() {
    let env = KubeEnv::get();
    apply_rbac(env).await;
    let name = unique("refused");
    let (proxy, auth) = eks_front(env, &name).await;
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(env.ca_pem());
    let mut info = EksClusterInfo::from_describe(
        &name,
        Some("https://example.invalid"),
        Some(&ca_b64),
        Some("1.32"),
    )
    .expect("info");
    info.endpoint = proxy.url.clone();
    let credentials = sdk_config(REGION)
        .await
        .credentials_provider()
        .expect("credentials");

    // Signed 20 minutes ago: outside the window.
    let stale = info
        .connect(
            EksTokenSource::new(&name, REGION, credentials.clone(), TwentyMinutesAgo),
            ClientSettings::default(),
        )
        .expect("client");
    match stale.nodes().await {
        Err(ClusterError::Forbidden {
            reason,
            unauthorized,
            ..
        }) => assert!(
            unauthorized && reason.contains("15-minute window"),
            "{reason}"
        ),
        other => panic!("a stale token is refused: {other:?}"),
    }

    // Signed for another region's STS.
    let elsewhere = info
        .connect(
            EksTokenSource::new(&name, "us-west-2", credentials, SystemClock),
            ClientSettings::default(),
        )
        .expect("client");
    match elsewhere.nodes().await {
        Err(ClusterError::Forbidden { reason, .. }) => {
            assert!(reason.contains("not this region's STS"), "{reason}")
        }
        other => panic!("a token for another region is refused: {other:?}"),
    }
    assert!(
        auth.identities.lock().expect("lock").is_empty(),
        "no identity was accepted"
    );

    // Not an EKS token at all.
    assert!(auth.verify("k8s-aws-v1.not-base64!").await.is_err());
    assert!(auth.verify("some-static-token").await.is_err());
}
