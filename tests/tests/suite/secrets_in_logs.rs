//! No secret, token or credential is ever logged: a provisioning run on the
//! emulator's EC2 and DynamoDB and the EKS connection flow to the real
//! kube-apiserver, with every log line at debug level (ours, the AWS SDK's,
//! kube's, hyper's) captured, then searched for the AWS secret key, every
//! EKS bearer token the cluster was shown, and the NodeClass's user data.

use std::io::Write;
use std::sync::{Arc, Mutex};

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use base64::Engine as _;
use nodewright::aws::{DynamoStore, Ec2Cloud};
use nodewright::config::ConfigKind;
use nodewright::kube::{ClientSettings, EksClusterInfo, EksTokenSource};
use nodewright::model::Timestamp;
use nodewright::ports::{Cluster, Store, SystemClock};
use nodewright::sim::scenario;
use nodewright::sim::{FaultyCloud, SimClock, SimSettings, Simulation};
use nodewright_tests::aws::{Ec2Fixture, moto, unique};
use nodewright_tests::eks_authenticator::StsAuthenticator;
use nodewright_tests::fault_proxy::FaultProxy;
use nodewright_tests::kube_harness::{KubeEnv, apply_rbac};
use nodewright_tests::real;

const ACCESS_KEY: &str = "AKIANODEWRIGHTLOGTEST";
const SECRET_KEY: &str = "nwSecretKey/9f3c2a7e-never-in-a-log-line+Q";
const USER_DATA_CANARY: &str = "nodewright-user-data-canary-5e81d0";

/// Everything logged on this thread, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

// One thread, so every task's log lines reach the scoped subscriber.
#[tokio::test(flavor = "current_thread")]
async fn no_secret_key_token_or_user_data_is_logged_at_debug_level() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _scope = tracing::subscriber::set_default(subscriber);

    // 1. Provisioning on EC2 and DynamoDB, signed with our own credentials.
    let f = Ec2Fixture::new(real::REGION, "1.32").await;
    let credentials = Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "secrets-test");
    let config = f
        .config
        .to_builder()
        .credentials_provider(SharedCredentialsProvider::new(credentials.clone()))
        .build();
    let cloud =
        Ec2Cloud::with_prices(&config, f.settings(), real::seeded(&f.zones)).expect("adapter");
    let store = DynamoStore::new(
        &config,
        nodewright::aws::DynamoTables::with_prefix(&unique("nw")),
    );
    store.ensure_tables().await.expect("tables");
    let mut sim = Simulation::new(
        SimClock::starting_at(Timestamp::now()),
        FaultyCloud::new(Arc::new(cloud)),
        None,
        store,
        SimSettings::default(),
    );
    let s = nodewright_tests::sim::scenario_file("spot-drain.yaml");
    scenario::load(&mut sim, &s).await.expect("loads");
    f.store_node_class(&sim.store).await;
    let mut class = sim
        .store
        .config_items()
        .await
        .expect("items")
        .into_iter()
        .find(|i| i.kind == ConfigKind::NodeClass)
        .expect("class");
    class.spec["userData"] = format!("#!/bin/bash\necho {USER_DATA_CANARY}\n").into();
    class.version += 1;
    sim.store
        .put_config_item(&class)
        .await
        .expect("class with user data");
    Box::pin(scenario::run(&mut sim, &s)).await.expect("runs");
    let failures = scenario::check(&sim, &s.expect).await;
    assert!(failures.is_empty(), "{failures:#?}");

    // What the launch template holds: our user data, in the MIME bundle.
    let templates = f.launch_templates().await;
    assert!(!templates.is_empty(), "a launch template was created");
    let mut user_data = Vec::new();
    for t in &templates {
        let versions = f
            .ec2()
            .describe_launch_template_versions()
            .launch_template_id(t.launch_template_id().expect("id"))
            .send()
            .await
            .expect("DescribeLaunchTemplateVersions");
        for v in versions.launch_template_versions() {
            if let Some(data) = v.launch_template_data().and_then(|d| d.user_data()) {
                user_data.push(data.to_owned());
            }
        }
    }
    assert!(!user_data.is_empty(), "the template carries user data");
    let decoded: Vec<String> = user_data
        .iter()
        .map(|b| {
            String::from_utf8_lossy(
                &base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .expect("base64"),
            )
            .into_owned()
        })
        .collect();
    assert!(
        decoded.iter().any(|d| d.contains(USER_DATA_CANARY)),
        "the NodeClass's user data made it into the template"
    );

    // 2. The EKS flow: bearer tokens signed with the same credentials.
    let env = KubeEnv::get();
    apply_rbac(env).await;
    let name = unique("logs");
    let proxy = FaultProxy::start(&env.url, &env.ca_pem()).await;
    let auth = Arc::new(StsAuthenticator {
        cluster: name.clone(),
        region: real::REGION.to_owned(),
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
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(env.ca_pem());
    let mut info = EksClusterInfo::from_describe(
        &name,
        Some("https://example.invalid"),
        Some(&ca_b64),
        Some("1.32"),
    )
    .expect("info");
    info.endpoint = proxy.url.clone();
    let cluster = info
        .connect(
            EksTokenSource::new(&name, real::REGION, credentials, SystemClock),
            ClientSettings::default(),
        )
        .expect("client");
    cluster.nodes().await.expect("nodes with an EKS token");
    let tokens = auth.tokens.lock().expect("lock").clone();
    assert!(!tokens.is_empty(), "the cluster was shown a token");

    // 3. The search.
    let text = logs.text();
    assert!(
        text.lines().count() > 100,
        "debug logging was captured ({} lines)",
        text.lines().count()
    );
    assert!(
        !text.contains(SECRET_KEY),
        "the AWS secret key is in the logs"
    );
    for token in &tokens {
        assert!(
            !text.contains(token.as_str()),
            "an EKS bearer token is in the logs"
        );
        // The presigned URL inside the token carries the signature.
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token.trim_start_matches("k8s-aws-v1."))
                .expect("base64url"),
        )
        .expect("utf-8");
        let signature = url
            .split("X-Amz-Signature=")
            .nth(1)
            .expect("signed")
            .split('&')
            .next()
            .expect("value");
        assert!(
            !text.contains(signature),
            "an EKS token's signature is in the logs"
        );
    }
    for (encoded, plain) in user_data.iter().zip(&decoded) {
        assert!(
            !text.contains(encoded.as_str()),
            "the launch template's user data (base64) is in the logs"
        );
        assert!(
            !text.contains(plain.as_str()),
            "the launch template's user data is in the logs"
        );
    }
    assert!(
        !text.contains(USER_DATA_CANARY),
        "the NodeClass's user data is in the logs"
    );
}
