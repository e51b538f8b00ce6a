//! The Kubernetes adapter against a real kube-apiserver (RBAC on), every
//! operation run as the restricted `nodewright` identity with the shipped
//! ClusterRole: what only the server has (RBAC, paging and continue tokens,
//! admission, faults and retries counted at the fault proxy, concurrent
//! writes). What both clusters must answer alike — binding, the pending and
//! scheduled lists, pods on a node, taints, evictions, deletions, Events,
//! storage objects — is the Cluster contract (`cluster_contract.rs`). See
//! `tests/src/kube_harness.rs` for how the server is found or started, and
//! `tests/src/fault_proxy.rs` for the fault injection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use http::Method;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodewright::kube::{ClientSettings, Endpoint, KubeCluster, RetryPolicy, StaticToken};
use nodewright::model::PodKey;
use nodewright::ports::{BindOutcome, Cluster, ClusterError, ClusterEvent, EvictOutcome};
use nodewright::scheduling::labels;
use nodewright::scheduling::taints::{Effect, Taint};
use nodewright::scheduling::volumes::{self, VolumeError, VolumeIndex};
use nodewright_tests::fault_proxy::{Fault, FaultProxy};
use nodewright_tests::kube_harness::{
    KubeEnv, apply_rbac, create_namespace, create_node, create_pod, mark_running, pod, unique,
};
use serde_json::json;

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A ready namespace, RBAC applied, and the two views of the cluster.
async fn setup(base: &str) -> (&'static KubeEnv, Client, KubeCluster, String) {
    init_logs();
    let env = KubeEnv::get();
    apply_rbac(env).await;
    let admin = env.admin_client();
    let ns = unique(base);
    create_namespace(&admin, &ns).await;
    (env, admin, env.function(ClientSettings::default()), ns)
}

/// Quick retry bounds for the fault tests.
fn tight() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        attempt_timeout: Duration::from_millis(700),
        deadline: Duration::from_secs(4),
    }
}

/// The function identity reaching the server through a fault proxy.
async fn through_proxy(env: &KubeEnv, retry: RetryPolicy) -> (FaultProxy, KubeCluster) {
    through_proxy_with(
        env,
        ClientSettings {
            retry,
            ..ClientSettings::default()
        },
    )
    .await
}

async fn through_proxy_with(env: &KubeEnv, settings: ClientSettings) -> (FaultProxy, KubeCluster) {
    let proxy = FaultProxy::start(&env.url, &env.ca_pem()).await;
    let endpoint = Endpoint {
        url: proxy.url.clone(),
        ca_pem: Vec::new(),
        tls_server_name: None,
    };
    let cluster = KubeCluster::with_token_source(
        &endpoint,
        Arc::new(StaticToken::new(env.function_token.clone())),
        settings,
    )
    .expect("client through the proxy");
    (proxy, cluster)
}

fn key(p: &Pod) -> PodKey {
    PodKey::of(p)
}

fn in_ns<'a>(pods: &'a [Pod], ns: &str) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .collect()
}

async fn get_pod(admin: &Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(admin.clone(), ns)
        .get_opt(name)
        .await
        .expect("get pod")
}

async fn get_node(admin: &Client, name: &str) -> Node {
    Api::<Node>::all(admin.clone())
        .get(name)
        .await
        .expect("get node")
}

fn taints_of(n: &Node) -> Vec<(String, String)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect()
        })
        .unwrap_or_default()
}

// ------------------------------------------------------------ permissions

/// The shipped role, rule by rule: exactly what the adapter uses (and the
/// volume reads reserved for zone requirements), nothing else.
#[test]
fn the_rbac_file_grants_exactly_the_adapters_needs() {
    let text = std::fs::read_to_string(
        nodewright_tests::kube_harness::repo_root().join("infra/rbac/clusterrole.yaml"),
    )
    .expect("RBAC file");
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let mut grants = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for g in rule["apiGroups"].as_array().expect("apiGroups") {
            for r in rule["resources"].as_array().expect("resources") {
                for v in rule["verbs"].as_array().expect("verbs") {
                    let s = |x: &serde_json::Value| x.as_str().expect("string").to_owned();
                    grants.insert(format!("{}/{} {}", s(g), s(r), s(v)));
                }
            }
        }
        assert!(rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none());
    }
    let expected: std::collections::BTreeSet<String> = [
        "/pods get",
        "/pods list",
        "/pods delete",
        "/pods/binding create",
        "/pods/eviction create",
        "/nodes get",
        "/nodes list",
        "/nodes patch",
        "/nodes delete",
        "apps/daemonsets list",
        // A CapacityBuffer's scalableRef: the workload it is sized from.
        "apps/deployments get",
        "apps/replicasets get",
        "apps/statefulsets get",
        "policy/poddisruptionbudgets list",
        "events.k8s.io/events create",
        "events.k8s.io/events patch",
        "/persistentvolumeclaims list",
        "/persistentvolumes list",
        "storage.k8s.io/storageclasses list",
        "storage.k8s.io/csinodes list",
        "storage.k8s.io/volumeattachments list",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(grants, expected);
    assert!(!text.contains('*'), "no wildcards");
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .expect("a binding");
    assert_eq!(binding["roleRef"]["name"], "nodewright");
    let subjects: Vec<String> = binding["subjects"]
        .as_array()
        .expect("subjects")
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                s["kind"].as_str().unwrap_or(""),
                s["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(subjects, ["User nodewright", "Group nodewright"]);
}

#[tokio::test]
async fn the_function_identity_has_least_privilege() {
    let (env, _admin, function, ns) = setup("rbac").await;
    let client = function.client().clone();

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let e = secrets
        .list(&ListParams::default())
        .await
        .expect_err("secrets must be out of reach");
    assert_eq!(nodewright::kube::errors::status_code(&e), Some(403), "{e}");
    let mapped = nodewright::kube::errors::classify("list secrets", &e);
    assert!(
        matches!(&mapped, ClusterError::Forbidden { op, reason, unauthorized: false } if op == "list secrets" && reason.contains("cannot list resource \"secrets\"")),
        "{mapped}"
    );
    let all_secrets: Api<Secret> = Api::all(client.clone());
    assert!(all_secrets.list(&ListParams::default()).await.is_err());
    let one: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        nodewright::kube::errors::status_code(&one.get("x").await.expect_err("get secret")),
        Some(403)
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "nope" },
        "spec": {
            "selector": { "matchLabels": { "app": "x" } },
            "template": { "metadata": { "labels": { "app": "x" } }, "spec": { "containers": [{ "name": "c", "image": "pause" }] } }
        }
    }))
    .expect("deployment");
    let e = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect_err("deployments must be out of reach");
    assert_eq!(nodewright::kube::errors::status_code(&e), Some(403), "{e}");

    // Creating pods or nodes is not ours either (only bind, evict, delete).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let e = pods
        .create(&PostParams::default(), &pod(&ns, "p", json!({})))
        .await
        .expect_err("no pod create");
    assert_eq!(nodewright::kube::errors::status_code(&e), Some(403));

    // Volume topology reads storage objects; it never writes them.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let e = pvcs
        .create(&PostParams::default(), &claim(&ns, "nope", json!({})))
        .await
        .expect_err("no PVC create");
    assert_eq!(nodewright::kube::errors::status_code(&e), Some(403));
    let e = pvcs.get("nope").await.expect_err("no PVC get");
    assert_eq!(nodewright::kube::errors::status_code(&e), Some(403));

    // A token the server does not know: Forbidden ("unauthorized"), not retried.
    let stranger = KubeCluster::with_static_token(
        &env.url,
        &env.ca_file,
        "not-a-token",
        ClientSettings::default(),
    )
    .expect("client");
    let e = stranger.nodes().await.expect_err("unknown token");
    assert!(
        matches!(
            &e,
            ClusterError::Forbidden {
                unauthorized: true,
                ..
            }
        ),
        "{e}"
    );

    // The kubeconfig mode reaches the same server as the same identity.
    let from_file = KubeCluster::from_kubeconfig(
        Some(&env.function_kubeconfig),
        None,
        ClientSettings::default(),
    )
    .await
    .expect("kubeconfig");
    from_file
        .nodes()
        .await
        .expect("nodes through the kubeconfig");
    let secrets: Api<Secret> = Api::namespaced(from_file.client().clone(), &ns);
    assert!(secrets.list(&ListParams::default()).await.is_err());
}

// ------------------------------------------------------------ listing

#[tokio::test]
async fn pending_pods_are_listed_across_pages() {
    let (env, admin, _function, ns) = setup("pending").await;
    const N: usize = 600;
    let t = Instant::now();
    stream::iter(0..N)
        .for_each_concurrent(16, |i| {
            let admin = admin.clone();
            let ns = ns.clone();
            async move {
                create_pod(
                    &admin,
                    &pod(&ns, &format!("p-{i:04}"), json!({ "app": "bulk" })),
                )
                .await;
            }
        })
        .await;
    eprintln!("created {N} pods in {} ms", t.elapsed().as_millis());

    for page_size in [500u32, 100] {
        let (proxy, cluster) = through_proxy_with(
            env,
            ClientSettings {
                page_size,
                ..ClientSettings::default()
            },
        )
        .await;
        let t = Instant::now();
        let pending = cluster.pending_pods().await.expect("pending pods");
        let took = t.elapsed();
        let mine = in_ns(&pending, &ns);
        assert_eq!(mine.len(), N, "page size {page_size}");
        let mut names: Vec<&str> = mine
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), N, "no pod twice");
        // The server writes managedFields on every pod; a listing keeps none.
        assert!(
            mine.iter().all(|p| p.metadata.managed_fields.is_none()),
            "managedFields dropped as pods are listed"
        );
        let pages = proxy.seen(&Method::GET, "/api/v1/pods?").len();
        assert!(
            pages >= N.div_ceil(page_size as usize),
            "page size {page_size}: {pages} page(s)"
        );
        let first = &proxy.seen(&Method::GET, "/api/v1/pods?")[0].path_and_query;
        assert!(first.contains(&format!("limit={page_size}")), "{first}");
        assert!(
            first.contains("fieldSelector=spec.nodeName%3D%2Cstatus.phase%3DPending"),
            "{first}"
        );
        assert!(proxy.seen(&Method::GET, "continue=").len() == pages - 1);
        eprintln!(
            "pending_pods: {} pods ({} of them this test's) in {pages} page(s) of {page_size}: {} ms",
            pending.len(),
            N,
            took.as_millis()
        );
    }

    // An expired continue token (410) restarts the listing; nothing is lost or doubled.
    let (proxy, cluster) = through_proxy_with(
        env,
        ClientSettings {
            page_size: 200,
            ..ClientSettings::default()
        },
    )
    .await;
    proxy.inject(
        Method::GET,
        "continue=",
        1,
        Fault::Status(410, "The provided continue parameter is too old".into()),
    );
    let pending = cluster
        .pending_pods()
        .await
        .expect("pending pods after a 410");
    let mine = in_ns(&pending, &ns);
    assert_eq!(mine.len(), N);
    let firsts = proxy
        .seen(&Method::GET, "/api/v1/pods?")
        .iter()
        .filter(|s| !s.path_and_query.contains("continue="))
        .count();
    assert_eq!(firsts, 2, "listed from the start again");

    // How a bind and a finished phase move pods between the two lists is
    // the Cluster contract's
    // `bound_pods_leave_the_pending_list_and_finished_ones_are_in_neither`.

    // No namespace controller runs here, so deleting the namespace would
    // leave its pods: delete them, so other tests' pending lists stay small.
    Api::<Pod>::namespaced(admin.clone(), &ns)
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await
        .expect("delete pods");
}

/// A claim; one that names its volume is marked bound, as the volume
/// binder marks the claims it binds (no binder runs beside this server).
fn claim(ns: &str, name: &str, spec: serde_json::Value) -> PersistentVolumeClaim {
    let mut spec = spec;
    spec["accessModes"] = json!(["ReadWriteOnce"]);
    spec["resources"] = json!({ "requests": { "storage": "1Gi" } });
    let annotations = if spec.get("volumeName").is_some() {
        json!({ "pv.kubernetes.io/bind-completed": "yes" })
    } else {
        json!({})
    };
    serde_json::from_value(
        json!({ "metadata": { "name": name, "namespace": ns, "annotations": annotations }, "spec": spec }),
    )
    .expect("pvc")
}

/// The three storage listings, as the restricted identity, across pages;
/// what they return is what the volume-topology decision reads.
#[tokio::test]
async fn storage_objects_are_listed_for_volume_topology() {
    let (env, admin, _function, ns) = setup("volumes").await;
    // PVs and StorageClasses are cluster-wide: names unique to this run.
    let (wait, immediate, pv) = (unique("wait"), unique("immediate"), unique("pv"));
    let class = |name: &str, mode: &str, zones: serde_json::Value| -> StorageClass {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": mode,
            "allowedTopologies": [{ "matchLabelExpressions": [{ "key": volumes::EBS_CSI_ZONE, "values": zones }] }]
        }))
        .expect("storage class")
    };
    let scs: Api<StorageClass> = Api::all(admin.clone());
    let pp = PostParams::default();
    scs.create(
        &pp,
        &class(&wait, "WaitForFirstConsumer", json!(["eu-west-1c"])),
    )
    .await
    .expect("create class");
    scs.create(&pp, &class(&immediate, "Immediate", json!(["eu-west-1a"])))
        .await
        .expect("create class");
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": { "name": pv },
        "spec": {
            "capacity": { "storage": "1Gi" },
            "accessModes": ["ReadWriteOnce"],
            "csi": { "driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0" },
            "nodeAffinity": { "required": { "nodeSelectorTerms": [{ "matchExpressions": [
                { "key": volumes::EBS_CSI_ZONE, "operator": "In", "values": ["eu-west-1b"] }
            ] }] } }
        }
    }))
    .expect("pv");
    Api::<PersistentVolume>::all(admin.clone())
        .create(&pp, &volume)
        .await
        .expect("create pv");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), &ns);
    pvcs.create(
        &pp,
        &claim(
            &ns,
            "bound",
            json!({ "volumeName": pv, "storageClassName": "" }),
        ),
    )
    .await
    .expect("pvc");
    pvcs.create(
        &pp,
        &claim(&ns, "waiting", json!({ "storageClassName": wait })),
    )
    .await
    .expect("pvc");
    pvcs.create(
        &pp,
        &claim(&ns, "immediate", json!({ "storageClassName": immediate })),
    )
    .await
    .expect("pvc");
    for i in 0..4 {
        pvcs.create(
            &pp,
            &claim(
                &ns,
                &format!("extra-{i}"),
                json!({ "storageClassName": wait }),
            ),
        )
        .await
        .expect("pvc");
    }

    // Small pages, through the proxy, to see the listing follow `continue`.
    let (proxy, function) = through_proxy_with(
        env,
        ClientSettings {
            page_size: 2,
            ..ClientSettings::default()
        },
    )
    .await;
    let claims = function
        .persistent_volume_claims()
        .await
        .expect("list PVCs as the function");
    let mine: Vec<&PersistentVolumeClaim> = claims
        .iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(ns.as_str()))
        .collect();
    assert_eq!(mine.len(), 7);
    assert!(
        proxy
            .seen(&Method::GET, "/api/v1/persistentvolumeclaims?")
            .len()
            >= 4,
        "paged by 2"
    );
    let pvs = function
        .persistent_volumes()
        .await
        .expect("list PVs as the function");
    assert!(
        pvs.iter()
            .any(|v| v.metadata.name.as_deref() == Some(pv.as_str()))
    );
    let classes = function
        .storage_classes()
        .await
        .expect("list storage classes as the function");
    assert!(
        classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(wait.as_str()))
    );
    assert!(
        proxy
            .seen(&Method::GET, "/apis/storage.k8s.io/v1/storageclasses?")
            .iter()
            .all(|s| s.path_and_query.contains("limit=2"))
    );

    // What the API server stored is what the decision reads.
    let index = VolumeIndex::new(claims, pvs, classes);
    let on = |claim_name: &str| {
        let p: Pod = serde_json::from_value(json!({
            "metadata": { "name": "db", "namespace": ns },
            "spec": { "containers": [], "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": claim_name } }] }
        }))
        .expect("pod");
        volumes::requirements(&p, &index)
    };
    let zone = |r: &nodewright::scheduling::Requirements| {
        r.get(labels::ZONE)
            .and_then(|z| z.finite_values())
            .map(|v| v.iter().cloned().collect::<Vec<_>>())
    };
    assert_eq!(
        zone(&on("bound").expect("bound")),
        Some(vec!["eu-west-1b".to_owned()])
    );
    assert_eq!(
        zone(&on("waiting").expect("waiting")),
        Some(vec!["eu-west-1c".to_owned()])
    );
    assert!(matches!(
        on("immediate"),
        Err((_, VolumeError::AwaitingBinding { .. }))
    ));
    assert!(matches!(
        on("absent"),
        Err((_, VolumeError::ClaimNotFound { .. }))
    ));

    scs.delete(&wait, &DeleteParams::default())
        .await
        .expect("delete class");
    scs.delete(&immediate, &DeleteParams::default())
        .await
        .expect("delete class");
    Api::<PersistentVolume>::all(admin.clone())
        .delete(&pv, &DeleteParams::default())
        .await
        .expect("delete pv");
}

#[tokio::test]
async fn nodes_daemonsets_and_pdbs_are_listed() {
    let (_env, admin, function, ns) = setup("lists").await;
    let node = unique("list-node");
    create_node(&admin, &node).await;
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": { "name": "agent", "namespace": ns },
        "spec": {
            "selector": { "matchLabels": { "app": "agent" } },
            "template": { "metadata": { "labels": { "app": "agent" } },
                          "spec": { "containers": [{ "name": "c", "image": "pause", "resources": { "requests": { "cpu": "50m" } } }] } }
        }
    }))
    .expect("ds");
    Api::<DaemonSet>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &ds)
        .await
        .expect("create ds");
    create_pdb(&admin, &ns, "budget", "web", 1).await;

    let nodes = function.nodes().await.expect("nodes");
    let n = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
        .expect("our node");
    // The API server's admission taints a new node not-ready, as on a real cluster.
    assert!(
        taints_of(n)
            .iter()
            .any(|(k, _)| k == "node.kubernetes.io/not-ready"),
        "{:?}",
        taints_of(n)
    );
    let dss = function.daemon_sets().await.expect("daemonsets");
    assert!(
        dss.iter()
            .any(|d| d.metadata.namespace.as_deref() == Some(ns.as_str()))
    );
    let pdbs = function.pod_disruption_budgets().await.expect("pdbs");
    assert!(
        pdbs.iter()
            .any(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
    );
}

// ------------------------------------------------------------ binding

/// A pod being deleted (held by a finalizer) cannot be bound: the server
/// answers as for a bound one, `AlreadyBound`, as the simulator says. (What
/// a binding answers otherwise is the Cluster contract's
/// `binding_reports_bound_already_bound_and_gone`.)
#[tokio::test]
async fn binding_a_pod_being_deleted_is_already_bound() {
    let (_env, admin, function, ns) = setup("bind").await;
    let node = unique("bind-node");
    create_node(&admin, &node).await;
    // A pod being deleted (held by a finalizer) cannot be bound: AlreadyBound, as the simulator says.
    let mut r = pod(&ns, "web-3", json!({}));
    r.metadata.finalizers = Some(vec!["nodewright.test/hold".into()]);
    let r = create_pod(&admin, &r).await;
    let api: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    api.delete("web-3", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(
        function.bind(&key(&r), &node).await,
        Ok(BindOutcome::AlreadyBound)
    );
    api.patch(
        "web-3",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .expect("release finalizer");
}

// ------------------------------------------------------------ taints and cordon

#[tokio::test]
async fn taints_are_added_and_removed_without_losing_concurrent_writes() {
    let (env, admin, function, _ns) = setup("taints").await;
    let node = unique("taint-node");
    create_node(&admin, &node).await;
    let ours = Taint::new("karpenter.sh/disrupted", "", Effect::NoSchedule);

    function.add_taint(&node, &ours).await.expect("add taint");
    function
        .add_taint(&node, &ours)
        .await
        .expect("add it again");
    let n = get_node(&admin, &node).await;
    let count = taints_of(&n)
        .iter()
        .filter(|(k, _)| k == "karpenter.sh/disrupted")
        .count();
    assert_eq!(count, 1, "{:?}", taints_of(&n));
    assert!(
        taints_of(&n)
            .iter()
            .any(|(k, _)| k == "node.kubernetes.io/not-ready"),
        "others kept"
    );

    // Someone writes the node between our read and our patch: the patch is
    // refused (409, stale resourceVersion), we read again and both changes survive.
    let (proxy, through) = through_proxy(env, RetryPolicy::default()).await;
    let admin2 = admin.clone();
    let node2 = node.clone();
    let meddle: Fault = Fault::Before(Arc::new(move || {
        let admin = admin2.clone();
        let node = node2.clone();
        Box::pin(async move {
            let api: Api<Node> = Api::all(admin);
            let patch = json!({ "metadata": { "labels": { "meddled": "yes" } },
                                "spec": { "taints": [ { "key": "node.kubernetes.io/not-ready", "effect": "NoSchedule" },
                                                      { "key": "karpenter.sh/disrupted", "effect": "NoSchedule" },
                                                      { "key": "someone/else", "effect": "NoSchedule" } ] } });
            api.patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("meddle");
        })
    }));
    proxy.inject(Method::PATCH, &format!("/api/v1/nodes/{node}"), 1, meddle);
    let unregistered = Taint::new("karpenter.sh/unregistered", "", Effect::NoExecute);
    through
        .add_taint(&node, &unregistered)
        .await
        .expect("add taint despite the conflict");
    let patches = proxy.seen(&Method::PATCH, &format!("/api/v1/nodes/{node}"));
    assert_eq!(
        patches.len(),
        2,
        "one refused patch, one after reading again: {patches:?}"
    );
    assert_eq!(
        proxy
            .seen(&Method::GET, &format!("/api/v1/nodes/{node}"))
            .len(),
        2
    );
    let n = get_node(&admin, &node).await;
    let keys: Vec<String> = taints_of(&n).into_iter().map(|(k, _)| k).collect();
    assert!(keys.contains(&"someone/else".to_owned()), "{keys:?}");
    assert!(
        keys.contains(&"karpenter.sh/unregistered".to_owned()),
        "{keys:?}"
    );
    assert_eq!(
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("meddled"))
            .map(String::as_str),
        Some("yes")
    );
    let t = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|ts| ts.iter().find(|t| t.key == "karpenter.sh/unregistered"));
    assert!(
        t.and_then(|t| t.time_added.as_ref()).is_some(),
        "NoExecute taints carry timeAdded"
    );

    // Removal takes every taint with the key; absent keys are fine.
    function
        .remove_taint(&node, "karpenter.sh/unregistered")
        .await
        .expect("remove");
    function
        .remove_taint(&node, "karpenter.sh/unregistered")
        .await
        .expect("remove again");
    function
        .remove_taint(&node, "not/there")
        .await
        .expect("remove absent");
    let keys: Vec<String> = taints_of(&get_node(&admin, &node).await)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert!(
        !keys.contains(&"karpenter.sh/unregistered".to_owned()),
        "{keys:?}"
    );
    assert!(keys.contains(&"someone/else".to_owned()), "{keys:?}");

    // A node that keeps changing under us: a Conflict after a few rounds, never a lost write.
    proxy.clear();
    let admin3 = admin.clone();
    let node3 = node.clone();
    let counter = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let always: Fault = Fault::Before(Arc::new(move || {
        let admin = admin3.clone();
        let node = node3.clone();
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            let api: Api<Node> = Api::all(admin);
            let patch = json!({ "metadata": { "labels": { "churn": n.to_string() } } });
            api.patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("churn");
        })
    }));
    proxy.inject(Method::PATCH, &format!("/api/v1/nodes/{node}"), 100, always);
    let e = through
        .add_taint(&node, &Taint::new("x/y", "", Effect::NoSchedule))
        .await
        .expect_err("keeps conflicting");
    assert!(
        matches!(&e, ClusterError::Conflict { reason, .. } if reason.contains("5 read-modify-write rounds")),
        "{e}"
    );
    assert!(e.is_retryable());

    // Cordon.
    function.cordon(&node).await.expect("cordon");
    function.cordon(&node).await.expect("cordon again");
    assert_eq!(
        get_node(&admin, &node)
            .await
            .spec
            .and_then(|s| s.unschedulable),
        Some(true)
    );

    // Missing nodes.
    let e = function
        .add_taint("no-such-node", &ours)
        .await
        .expect_err("missing node");
    assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
    let e = function
        .cordon("no-such-node")
        .await
        .expect_err("missing node");
    assert!(matches!(e, ClusterError::NotFound { .. }), "{e}");
}

// ------------------------------------------------------------ eviction

async fn create_pdb(admin: &Client, ns: &str, name: &str, app: &str, min_available: i32) {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "minAvailable": min_available, "selector": { "matchLabels": { "app": app } } }
    }))
    .expect("pdb");
    Api::<PodDisruptionBudget>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
}

/// Plays the disruption controller: writes the PDB's status.
async fn set_pdb_status(
    admin: &Client,
    ns: &str,
    name: &str,
    healthy: i32,
    desired: i32,
    allowed: i32,
) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), ns);
    let generation = api
        .get(name)
        .await
        .expect("pdb")
        .metadata
        .generation
        .unwrap_or(1);
    let status = json!({ "status": {
        "observedGeneration": generation,
        "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": healthy,
        "disruptionsAllowed": allowed, "disruptedPods": null
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pdb status");
}

#[tokio::test]
async fn evictions_honour_pod_disruption_budgets() {
    let (env, admin, function, ns) = setup("evict").await;
    let node = unique("evict-node");
    create_node(&admin, &node).await;
    let mut pods = Vec::new();
    for i in 0..3 {
        let p = create_pod(
            &admin,
            &pod(&ns, &format!("web-{i}"), json!({ "app": "web" })),
        )
        .await;
        assert_eq!(function.bind(&key(&p), &node).await, Ok(BindOutcome::Bound));
        mark_running(&admin, &ns, &format!("web-{i}")).await;
        pods.push(p);
    }
    create_pdb(&admin, &ns, "web", "web", 3).await;
    set_pdb_status(&admin, &ns, "web", 3, 3, 0).await;

    // disruptionsAllowed 0: a 429, which is an answer (Blocked), not throttling.
    let t = Instant::now();
    let out = function.evict(&key(&pods[0])).await.expect("evict");
    let EvictOutcome::Blocked(reason) = &out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("disruption budget"), "{reason}");
    eprintln!("blocked eviction: {} ms", t.elapsed().as_millis());
    assert!(
        get_pod(&admin, &ns, "web-0")
            .await
            .expect("pod")
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // disruptionsAllowed 1: evicted (no kubelet here, so it stays terminating).
    set_pdb_status(&admin, &ns, "web", 3, 2, 1).await;
    assert_eq!(
        function.evict(&key(&pods[0])).await,
        Ok(EvictOutcome::Evicted)
    );
    assert!(
        get_pod(&admin, &ns, "web-0")
            .await
            .expect("pod")
            .metadata
            .deletion_timestamp
            .is_some()
    );

    // Nothing to evict: Gone (while one budget would allow it) (missing pod; another pod under the same name).
    let missing = PodKey {
        namespace: ns.clone(),
        name: "nobody".into(),
        uid: String::new(),
    };
    assert_eq!(function.evict(&missing).await, Ok(EvictOutcome::Gone));
    // (The API checks the budget before the uid precondition, so this holds
    // while the budget allows a disruption; a blocked one is Blocked either way.)
    set_pdb_status(&admin, &ns, "web", 2, 2, 1).await;
    let stale = PodKey {
        uid: "00000000-0000-0000-0000-000000000000".into(),
        ..key(&pods[2])
    };
    assert_eq!(function.evict(&stale).await, Ok(EvictOutcome::Gone));
    assert!(
        get_pod(&admin, &ns, "web-2")
            .await
            .expect("pod")
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // Two budgets over the same pod: the API's 500 "more than one PodDisruptionBudget" → Blocked.
    create_pdb(&admin, &ns, "web-too", "web", 1).await;
    set_pdb_status(&admin, &ns, "web-too", 3, 1, 2).await;
    set_pdb_status(&admin, &ns, "web", 3, 2, 1).await;
    let out = function.evict(&key(&pods[1])).await.expect("evict");
    let EvictOutcome::Blocked(reason) = &out else {
        panic!("{out:?}")
    };
    assert!(
        reason.contains("more than one PodDisruptionBudget"),
        "{reason}"
    );

    // A pod no budget covers goes at once.
    let lone = create_pod(&admin, &pod(&ns, "lone", json!({ "app": "lone" }))).await;
    assert_eq!(function.evict(&key(&lone)).await, Ok(EvictOutcome::Evicted));
    assert!(
        get_pod(&admin, &ns, "lone").await.is_none(),
        "an unbound pod is deleted at once"
    );

    // A 429 on an eviction is never retried (through the proxy: exactly one request).
    let (proxy, through) = through_proxy(env, tight()).await;
    proxy.inject(
        Method::POST,
        "/eviction",
        10,
        Fault::Status(
            429,
            "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        ),
    );
    let t = Instant::now();
    let out = through.evict(&key(&pods[2])).await.expect("evict");
    assert!(matches!(out, EvictOutcome::Blocked(_)), "{out:?}");
    assert_eq!(proxy.seen(&Method::POST, "/eviction").len(), 1);
    eprintln!("blocked eviction answered in {:?}", t.elapsed());
}

// ------------------------------------------------------------ deletion

#[tokio::test]
async fn pods_and_nodes_are_deleted() {
    let (_env, admin, function, ns) = setup("delete").await;
    let node = unique("delete-node");
    create_node(&admin, &node).await;
    let p = create_pod(&admin, &pod(&ns, "bound", json!({}))).await;
    assert_eq!(function.bind(&key(&p), &node).await, Ok(BindOutcome::Bound));

    // With a grace period, a bound pod is marked for deletion (the kubelet would finish it).
    function
        .delete_pod(&key(&p), Some(45))
        .await
        .expect("delete pod");
    let deleting = get_pod(&admin, &ns, "bound")
        .await
        .expect("still there, terminating");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(45));
    // Grace 0 removes it.
    function
        .delete_pod(&key(&p), Some(0))
        .await
        .expect("delete now");
    assert!(get_pod(&admin, &ns, "bound").await.is_none());
    // Already gone, or the name now belongs to another pod: nothing to do, no error.
    function
        .delete_pod(&key(&p), None)
        .await
        .expect("delete missing");
    let again = create_pod(&admin, &pod(&ns, "bound", json!({}))).await;
    function
        .delete_pod(&key(&p), Some(0))
        .await
        .expect("stale uid");
    assert!(
        get_pod(&admin, &ns, "bound").await.is_some(),
        "the new pod of that name is not touched"
    );
    function
        .delete_pod(&key(&again), Some(0))
        .await
        .expect("delete the new one");

    assert_eq!(function.delete_node(&node).await, Ok(true));
    assert_eq!(function.delete_node(&node).await, Ok(false));
}

// ------------------------------------------------------------ events

#[tokio::test]
async fn events_are_recorded_for_pods_and_nodes() {
    let (_env, admin, function, ns) = setup("events").await;
    let node = unique("event-node");
    let n = create_node(&admin, &node).await;
    let p = create_pod(&admin, &pod(&ns, "waiting", json!({}))).await;

    let pod_event = ClusterEvent {
        kind: "Pod".into(),
        namespace: Some(ns.clone()),
        name: "waiting".into(),
        type_: "Warning".into(),
        reason: "FailedScheduling".into(),
        message: "no instance type satisfies arch=arm64 and instance-type=c5.large".into(),
    };
    function.record_event(&pod_event).await.expect("pod event");
    function
        .record_event(&pod_event)
        .await
        .expect("the same again");
    let node_event = ClusterEvent {
        kind: "Node".into(),
        namespace: None,
        name: node.clone(),
        type_: "Normal".into(),
        reason: "DisruptionBlocked".into(),
        message: "pdb web prevents pod evictions".into(),
    };
    function
        .record_event(&node_event)
        .await
        .expect("node event");

    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let list = events.list(&ListParams::default()).await.expect("events");
    let mine: Vec<&Event> = list
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .collect();
    assert_eq!(mine.len(), 1, "a repeat updates the series: {mine:?}");
    let e = mine[0];
    assert_eq!(e.reporting_controller.as_deref(), Some("nodewright"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.note.as_deref(), Some(pod_event.message.as_str()));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(2));
    let regarding = e.regarding.as_ref().expect("regarding");
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(
        regarding.uid, p.metadata.uid,
        "kubectl describe selects by uid"
    );

    let defaults: Api<Event> = Api::namespaced(admin.clone(), "default");
    let list = defaults
        .list(&ListParams::default().fields(&format!("regarding.name={node}")))
        .await
        .expect("events");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].reason.as_deref(), Some("DisruptionBlocked"));
    assert_eq!(
        list.items[0].regarding.as_ref().and_then(|r| r.uid.clone()),
        n.metadata.uid
    );
    // Also visible through core/v1, where kubectl describe looks.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), &ns);
    let core = core
        .list(&ListParams::default())
        .await
        .expect("core events");
    assert!(
        core.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("FailedScheduling")
                && e.involved_object.name.as_deref() == Some("waiting"))
    );

    // Events about an object that does not exist still go out (best effort, no uid).
    let ghost = ClusterEvent {
        name: "ghost".into(),
        ..pod_event.clone()
    };
    function.record_event(&ghost).await.expect("ghost event");
}

// ------------------------------------------------------------ faults

#[tokio::test]
async fn transient_faults_are_retried_within_bounds() {
    let (env, admin, _function, _ns) = setup("faults").await;
    let node = unique("fault-node");
    create_node(&admin, &node).await;

    // 503 twice, then through: the call succeeds on the third attempt.
    let (proxy, cluster) = through_proxy(env, tight()).await;
    proxy.inject(
        Method::GET,
        "/api/v1/nodes?",
        2,
        Fault::Status(503, "apiserver is shutting down".into()),
    );
    let nodes = cluster.nodes().await.expect("nodes after two 503s");
    assert!(
        nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node.as_str()))
    );
    assert_eq!(proxy.seen(&Method::GET, "/api/v1/nodes?").len(), 3);

    // 429 (throttling on a list) is retried too.
    proxy.inject(
        Method::GET,
        "/api/v1/nodes?",
        1,
        Fault::Status(429, "too many requests".into()),
    );
    cluster.nodes().await.expect("nodes after a 429");

    // Dropped connections, twice, then through.
    proxy.inject(Method::GET, "/apis/apps/v1/daemonsets", 2, Fault::Drop);
    cluster
        .daemon_sets()
        .await
        .expect("daemonsets after two dropped connections");
    assert_eq!(
        proxy.seen(&Method::GET, "/apis/apps/v1/daemonsets").len(),
        3
    );

    // A slow reply is abandoned after the attempt timeout and retried.
    proxy.inject(
        Method::GET,
        "/apis/policy/v1/poddisruptionbudgets",
        1,
        Fault::Delay(Duration::from_secs(3)),
    );
    let pdbs = "/apis/policy/v1/poddisruptionbudgets";
    let before = proxy.seen(&Method::GET, pdbs).len();
    cluster
        .pod_disruption_budgets()
        .await
        .expect("pdbs after one slow reply");
    // Abandoned and asked again: two requests reached the server.
    assert_eq!(proxy.seen(&Method::GET, pdbs).len() - before, 2);

    // 500 on a write (bind) is retried; it lands once the server answers.
    let ns = unique("faults-bind");
    create_namespace(&admin, &ns).await;
    let p = create_pod(&admin, &pod(&ns, "p", json!({}))).await;
    proxy.inject(
        Method::POST,
        "/binding",
        1,
        Fault::Status(500, "etcdserver: request timed out".into()),
    );
    assert_eq!(cluster.bind(&key(&p), &node).await, Ok(BindOutcome::Bound));
}

#[tokio::test]
async fn persistent_faults_end_in_a_clear_transient_error() {
    let (env, admin, _function, _ns) = setup("giveup").await;
    let node = unique("giveup-node");
    create_node(&admin, &node).await;
    let policy = tight();

    let cases: Vec<(&str, Fault, &str)> = vec![
        (
            "500",
            Fault::Status(500, "etcdserver: leader changed".into()),
            "HTTP 500: etcdserver: leader changed",
        ),
        (
            "503",
            Fault::Status(503, "service unavailable".into()),
            "HTTP 503",
        ),
        (
            "429",
            Fault::Status(429, "storage is (re)initializing".into()),
            "HTTP 429",
        ),
        ("drop", Fault::Drop, "list nodes"),
        (
            "slow",
            Fault::Delay(Duration::from_secs(5)),
            "no answer within",
        ),
    ];
    for (name, fault, expect) in cases {
        let (proxy, cluster) = through_proxy(env, policy).await;
        proxy.inject(Method::GET, "/api/v1/nodes", 1000, fault);
        let t = Instant::now();
        let e = cluster.nodes().await.expect_err("persistent fault");
        let took = t.elapsed();
        let ClusterError::Transient {
            gave_up: Some(_), ..
        } = &e
        else {
            panic!("{name}: {e:?}")
        };
        let msg = e.to_string();
        assert!(
            msg.starts_with("transient Kubernetes API error: gave up after"),
            "{name}: {msg}"
        );
        assert!(msg.contains(expect), "{name}: {msg}");
        assert!(e.is_retryable());
        let attempts = proxy.seen(&Method::GET, "/api/v1/nodes").len();
        assert!(
            attempts >= 2 && attempts <= policy.max_attempts as usize,
            "{name}: {attempts} attempts"
        );
        // The deadline is proven by the attempts counted above and, for the
        // slow case, by "no answer within" (the per-attempt timeout cut the
        // 5-s reply short); the time taken is reported, not asserted.
        eprintln!(
            "{name}: {msg} ({attempts} attempts, {} ms)",
            took.as_millis()
        );
    }

    // A 403 is an answer: one attempt, Forbidden.
    let (proxy, cluster) = through_proxy(env, policy).await;
    proxy.inject(
        Method::GET,
        "/api/v1/nodes",
        1000,
        Fault::Status(
            403,
            "nodes is forbidden: User \"nodewright\" cannot list resource \"nodes\"".into(),
        ),
    );
    let e = cluster.nodes().await.expect_err("forbidden");
    assert!(
        matches!(&e, ClusterError::Forbidden { op, reason, .. } if op == "list nodes" && reason.contains("cannot list resource")),
        "{e}"
    );
    assert_eq!(proxy.seen(&Method::GET, "/api/v1/nodes").len(), 1);
}

/// Fifty binds in a row each bind, and the scheduled listing then holds
/// all fifty on the node. The time each took is printed (the figures in
/// shared/docs/kubernetes.md, "Measured"), never asserted.
#[tokio::test]
async fn fifty_binds_in_a_row_are_all_listed_as_scheduled() {
    let (_env, admin, function, ns) = setup("latency").await;
    let node = unique("latency-node");
    create_node(&admin, &node).await;
    const N: usize = 50;
    let mut keys = Vec::new();
    for i in 0..N {
        keys.push(key(&create_pod(
            &admin,
            &pod(&ns, &format!("l-{i}"), json!({})),
        )
        .await));
    }
    let mut binds = Vec::new();
    for k in &keys {
        let t = Instant::now();
        assert_eq!(function.bind(k, &node).await, Ok(BindOutcome::Bound));
        binds.push(t.elapsed());
    }
    let mut lists = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let scheduled = function.scheduled_pods().await.expect("scheduled");
        lists.push(t.elapsed());
        let mine = in_ns(&scheduled, &ns);
        assert_eq!(mine.len(), N, "every bound pod listed");
        assert!(
            mine.iter().all(
                |p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
            ),
            "on the node it was bound to"
        );
    }
    binds.sort();
    lists.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let summary: BTreeMap<&str, String> = [
        ("bind p50", format!("{:.1} ms", ms(binds[N / 2]))),
        ("bind p95", format!("{:.1} ms", ms(binds[N * 95 / 100]))),
        ("scheduled_pods p50", format!("{:.1} ms", ms(lists[5]))),
    ]
    .into_iter()
    .collect();
    eprintln!("latency against the local kube-apiserver: {summary:?}");
}
