//! The real kube-apiserver the Kubernetes adapter tests run against.
//!
//! `tests/run` starts one server (`tests/harness/kube/kube.sh start DIR`) and
//! exports `NODEWRIGHT_KUBE_ENV=DIR/env`; every test binary reads it. Run
//! alone (`cargo test -p nodewright-tests --test suite kube_cluster::`), a test
//! binary starts its own server in a temporary directory, and a watchdog
//! process stops it when the binary exits. Either way the binaries must have
//! been built once (`tests/harness/kube/kube.sh build`).
//!
//! Tests share the server, so each works in its own namespace and on nodes
//! whose names carry the test's name and the process id.
//!
//! A second server runs the rest of a control plane beside it
//! (kube-controller-manager, kube-scheduler, kwok: `kube.sh start
//! --control-plane`): `KubeEnv::control_plane`, from
//! `NODEWRIGHT_CONTROL_PLANE_ENV` or, unset, started for the test binary
//! the same way. Its controllers act on every object, so it is never the
//! server the namespace-sharing tests use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodewright::kube::{ClientSettings, KubeCluster};
use nodewright::ports::Cluster;
use serde_json::{Value, json};

/// What `kube.sh start` wrote to `DIR/env`.
#[derive(Debug, Clone)]
pub struct KubeEnv {
    pub url: String,
    pub ca_file: PathBuf,
    pub admin_token: String,
    pub function_token: String,
    pub function_kubeconfig: PathBuf,
    pub admin_kubeconfig: PathBuf,
    pub version: String,
    /// kube-controller-manager, kube-scheduler and kwok run beside the server.
    pub control_plane: bool,
    /// The harness's processes by name (`kube-apiserver`, `etcd`, …) → pid.
    pub pids: BTreeMap<String, String>,
}

/// The variable `tests/run` sets.
pub const ENV_VAR: &str = "NODEWRIGHT_KUBE_ENV";
/// The variable `tests/run` sets for the server with the whole control plane.
pub const CONTROL_PLANE_ENV_VAR: &str = "NODEWRIGHT_CONTROL_PLANE_ENV";

/// The repository root (the tests crate sits one level below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Parses `KEY=value` lines; values may be single-quoted (`'\''` for a quote).
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = match v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                Some(inner) => inner.replace("'\\''", "'"),
                None => v.to_owned(),
            };
            (k.trim().to_owned(), v)
        })
        .collect()
}

impl KubeEnv {
    pub fn from_file(path: &Path) -> KubeEnv {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            panic!(
                "cannot read the kube harness env file {}: {e}",
                path.display()
            )
        });
        let vars = parse_env_file(&text);
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{} has no {k}", path.display()))
        };
        KubeEnv {
            url: get("KUBE_APISERVER_URL"),
            ca_file: PathBuf::from(get("KUBE_CA_FILE")),
            admin_token: get("KUBE_ADMIN_TOKEN"),
            function_token: get("KUBE_FUNCTION_TOKEN"),
            function_kubeconfig: PathBuf::from(get("KUBE_FUNCTION_KUBECONFIG")),
            admin_kubeconfig: PathBuf::from(get("KUBE_ADMIN_KUBECONFIG")),
            version: vars.get("KUBE_VERSION").cloned().unwrap_or_default(),
            control_plane: vars.get("KUBE_CONTROL_PLANE").is_some_and(|v| v == "1"),
            pids: [
                ("kube-apiserver", "KUBE_APISERVER_PID"),
                ("etcd", "KUBE_ETCD_PID"),
                ("kube-controller-manager", "KUBE_CONTROLLER_MANAGER_PID"),
                ("kube-scheduler", "KUBE_SCHEDULER_PID"),
                ("kwok", "KUBE_KWOK_PID"),
            ]
            .into_iter()
            .filter_map(|(name, var)| Some((name.to_owned(), vars.get(var)?.clone())))
            .collect(),
        }
    }

    /// The server of this test binary (see the module doc).
    pub fn get() -> &'static KubeEnv {
        static ENV: OnceLock<KubeEnv> = OnceLock::new();
        ENV.get_or_init(|| match std::env::var(ENV_VAR) {
            Ok(path) if !path.is_empty() => KubeEnv::from_file(Path::new(&path)),
            _ => start_own_server(false),
        })
    }

    /// A bare server of the caller's alone (for a test that changes what
    /// every test would see: CustomResourceDefinitions, say), stopped when
    /// the process exits. Starts in ~5 s.
    pub fn private() -> KubeEnv {
        start_server(false, &unique("private"))
    }

    /// The server with kube-controller-manager, kube-scheduler and kwok
    /// beside it (see the module doc).
    pub fn control_plane() -> &'static KubeEnv {
        static ENV: OnceLock<KubeEnv> = OnceLock::new();
        let env = ENV.get_or_init(|| match std::env::var(CONTROL_PLANE_ENV_VAR) {
            Ok(path) if !path.is_empty() => KubeEnv::from_file(Path::new(&path)),
            _ => start_own_server(true),
        });
        assert!(
            env.control_plane,
            "{CONTROL_PLANE_ENV_VAR} names a server started without --control-plane"
        );
        env
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.ca_file.display()))
    }

    /// The cluster as the test admin (`system:masters`).
    pub fn admin(&self) -> KubeCluster {
        KubeCluster::with_static_token(
            &self.url,
            &self.ca_file,
            &self.admin_token,
            ClientSettings::default(),
        )
        .expect("admin client")
    }

    pub fn admin_client(&self) -> Client {
        self.admin().client().clone()
    }

    /// The cluster as the functions' identity (user `nodewright`, RBAC only).
    pub fn function(&self, settings: ClientSettings) -> KubeCluster {
        KubeCluster::with_static_token(&self.url, &self.ca_file, &self.function_token, settings)
            .expect("function client")
    }
}

fn start_own_server(control_plane: bool) -> KubeEnv {
    start_server(control_plane, &std::process::id().to_string())
}

fn start_server(control_plane: bool, tag: &str) -> KubeEnv {
    let script = repo_root().join("tests/harness/kube/kube.sh");
    let (var, what, flags, suffix) = if control_plane {
        (
            CONTROL_PLANE_ENV_VAR,
            "a kube-apiserver with its control plane",
            &["--control-plane"][..],
            "-cp",
        )
    } else {
        (ENV_VAR, "a kube-apiserver", &[][..], "")
    };
    let dir = std::env::temp_dir().join(format!("nodewright-kube-{tag}{suffix}"));
    eprintln!(
        "starting {what} for this test binary in {} ({var} names none, or a server of its own was asked for)",
        dir.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .arg("start")
        .args(flags)
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    if !out.status.success() {
        panic!(
            "`kube.sh start` failed (build the binaries first: `tests/harness/kube/kube.sh build`, \
             or run `./tests/run`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Stop the servers when this process exits, however it exits. The
    // watchdog outlives us on purpose: it is never waited for.
    let watchdog = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; bash '{script}' stop '{dir}' >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        script = script.display(),
        dir = dir.display()
    );
    Command::new("setsid")
        .args(["sh", "-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .or_else(|_| {
            Command::new("sh")
                .args(["-c", &watchdog])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
        })
        .map(drop)
        .expect("starting the watchdog that stops the kube-apiserver");
    KubeEnv::from_file(&dir.join("env"))
}

/// A name unique to this process: `<base>-<pid>-<n>`.
pub fn unique(base: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{base}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Applies `infra/rbac/clusterrole.yaml` (server-side apply, idempotent) and
/// waits until the function identity can list nodes.
pub async fn apply_rbac(env: &KubeEnv) {
    let admin = env.admin_client();
    let text = std::fs::read_to_string(repo_root().join("infra/rbac/clusterrole.yaml"))
        .expect("RBAC file");
    let pp = PatchParams::apply("nodewright-tests").force();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc).expect("RBAC YAML");
        let name = value["metadata"]["name"].as_str().expect("name").to_owned();
        match value["kind"].as_str() {
            Some("ClusterRole") => {
                let api: Api<ClusterRole> = Api::all(admin.clone());
                api.patch(&name, &pp, &Patch::Apply(&value))
                    .await
                    .expect("apply ClusterRole");
            }
            Some("ClusterRoleBinding") => {
                let api: Api<ClusterRoleBinding> = Api::all(admin.clone());
                api.patch(&name, &pp, &Patch::Apply(&value))
                    .await
                    .expect("apply ClusterRoleBinding");
            }
            other => panic!("unexpected kind {other:?} in the RBAC file"),
        }
    }
    // The authorizer learns of the binding through a watch: wait for it.
    let function = env.function(ClientSettings::default());
    let start = Instant::now();
    loop {
        match function.nodes().await {
            Ok(_) => return,
            Err(e) if start.elapsed() < Duration::from_secs(10) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("RBAC did not take effect within 10 s: {e}"),
        }
    }
}

pub async fn create_namespace(admin: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(admin.clone());
    let ns: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": name } })).expect("namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// A minimal pod (pause image, small requests) with `labels`.
pub fn pod(namespace: &str, name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": namespace, "labels": labels },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "pause:3.10",
                "resources": { "requests": { "cpu": "10m", "memory": "16Mi" } }
            }]
        }
    }))
    .expect("pod")
}

pub async fn create_pod(admin: &Client, pod: &Pod) -> Pod {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), pod)
        .await
        .expect("create pod")
}

/// A Node object as a kubelet would register it (ready, some capacity).
pub async fn create_node(admin: &Client, name: &str) -> Node {
    let api: Api<Node> = Api::all(admin.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
        "spec": { "providerID": format!("aws:///eu-west-1a/i-{name}") },
    }))
    .expect("node");
    api.create(&PostParams::default(), &node)
        .await
        .expect("create node")
}

/// Plays the kubelet: marks a bound pod Running and Ready (through `/status`).
pub async fn mark_running(admin: &Client, namespace: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let status = json!({
        "status": {
            "phase": "Running",
            "conditions": [
                { "type": "Ready", "status": "True" },
                { "type": "PodScheduled", "status": "True" }
            ]
        }
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status");
}
