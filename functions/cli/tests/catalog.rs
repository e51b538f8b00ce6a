//! `nodewright catalog` end to end: the binary against the moto emulator,
//! with the NodePool from a file and from the config table.
#![allow(clippy::expect_used)] // test code: a failed expectation is a failed test

use std::process::Command;

use nodewright::config::{ConfigItem, ConfigKind};
use nodewright::model::Timestamp;
use nodewright::ports::Store;
use nodewright_tests::aws::{dynamo_store, moto};

fn catalog(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .arg("catalog")
        .args(args)
        .env("AWS_ENDPOINT_URL", &moto().endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("runs the nodewright binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The source walkthrough's pool: r6gd.xlarge, on-demand, arm64, ap-south-1a.
const WALKTHROUGH: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["arm64"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: ["r6gd"]
        - key: topology.kubernetes.io/zone
          operator: In
          values: ["ap-south-1a"]
  limits:
    cpu: 1000
"#;

#[test]
fn catalog_of_a_nodepool_file_as_json() {
    let dir = std::env::temp_dir().join(format!("nodewright-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("nodepool.yaml");
    std::fs::write(&file, WALKTHROUGH).expect("write nodepool");
    let (ok, stdout, stderr) = catalog(&[
        "-f",
        file.to_str().expect("utf8 path"),
        "--region",
        "ap-south-1",
        "--json",
    ]);
    assert!(ok, "catalog failed: {stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json output");
    assert_eq!(v["region"], "ap-south-1");
    assert_eq!(v["nodepool"], "default");
    let types = v["instance_types"].as_array().expect("types");
    assert!(types.iter().all(
        |t| t["arch"] == "arm64" && t["name"].as_str().is_some_and(|n| n.starts_with("r6gd."))
    ));
    let xl = types
        .iter()
        .find(|t| t["name"] == "r6gd.xlarge")
        .expect("r6gd.xlarge allowed");
    assert_eq!(xl["vcpu"], 4);
    assert_eq!(xl["max_pods"], 58);
    assert_eq!(xl["allocatable"]["cpu_millis"], 3920);
    let zones = xl["zones"].as_object().expect("zones");
    assert_eq!(
        zones.keys().collect::<Vec<_>>(),
        ["ap-south-1a"],
        "the pool allows one zone"
    );
    assert!(
        zones["ap-south-1a"]["spot"].is_null(),
        "the pool allows on-demand only"
    );
    assert_eq!(zones["ap-south-1a"]["on_demand"], 0.2304);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_of_a_stored_nodepool_as_a_table() {
    let store = dynamo_store("us-east-1").await;
    let class = serde_json::json!({"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
        "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]});
    let class = ConfigItem {
        kind: ConfigKind::NodeClass,
        name: "default".into(),
        spec: class,
        annotations: Default::default(),
        version: 1,
        updated_at: Timestamp::now(),
    };
    store.put_config_item(&class).await.expect("class stored");
    let spec = serde_json::json!({
        "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge", "c5.large"]}
        ]}}
    });
    let item = ConfigItem {
        kind: ConfigKind::NodePool,
        name: "general".into(),
        spec,
        annotations: Default::default(),
        version: 1,
        updated_at: Timestamp::now(),
    };
    store.put_config_item(&item).await.expect("stored");
    let prefix = store.tables().config.trim_end_matches("-config").to_owned();
    let (ok, stdout, stderr) = tokio::task::spawn_blocking(move || {
        catalog(&[
            "--nodepool",
            "general",
            "--table-prefix",
            &prefix,
            "--region",
            "us-east-1",
        ])
    })
    .await
    .expect("ran");
    assert!(ok, "catalog failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("3 instance type(s) allowed by nodepool general in us-east-1"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("TYPE") && lines[1].contains("us-east-1a"),
        "{stdout}"
    );
    // Cheapest first: moto's spot prices are all equal, on-demand decides.
    assert!(
        lines[2].starts_with("c5.large") || lines[2].starts_with("m5.large"),
        "{stdout}"
    );
    let m5 = lines
        .iter()
        .find(|l| l.starts_with("m5.large "))
        .expect("m5.large row");
    assert!(
        m5.contains("1930m")
            && m5.contains(" 29 ")
            && m5.contains("amd64")
            && m5.contains("/0.0960"),
        "{m5}"
    );

    let (ok, _, stderr) = tokio::task::spawn_blocking(|| {
        catalog(&["--nodepool", "missing", "--table-prefix", "no-such-table"])
    })
    .await
    .expect("ran");
    assert!(!ok);
    assert!(stderr.contains("no-such-table"), "{stderr}");
}
