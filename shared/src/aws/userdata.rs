//! User data that joins a new instance to the cluster, per AMI family.
//! Pure text generation: no I/O.
//!
//! - AL2023: a MIME multipart document whose last part is an
//!   `application/node.eks.aws` `NodeConfig` (read by `nodeadm`); its
//!   `kubelet.config` is the class's whole `kubelet` block (every
//!   `KubeletConfiguration` field passes through, as Karpenter v1.15 does)
//!   with our max pods, cluster DNS and taints; `instanceStorePolicy: RAID0`
//!   becomes `instance.localStorage.strategy: RAID0`.
//! - AL2: a MIME multipart document whose last part is a shell script that
//!   runs `/etc/eks/bootstrap.sh` with `--kubelet-extra-args` (the typed
//!   kubelet fields as flags; other fields are not passed on this family).
//! - Bottlerocket: TOML `[settings.kubernetes]` (the typed kubelet fields
//!   under Bottlerocket's names; RAID0 as a bootstrap command).
//! - Windows (2019, 2022, 2025): a `<powershell>` block that runs the EKS
//!   Windows AMI's `Start-EKSBootstrap.ps1` with its documented parameters
//!   (`-EKSClusterName`, `-APIServerEndpoint`, `-Base64ClusterCA`,
//!   `-DNSClusterIP`, `-KubeletExtraArgs`: labels, taints, max pods and the
//!   typed kubelet fields as flags, as on AL2).
//!
//! User-supplied user data is merged as Karpenter does: for the AL families
//! its MIME parts (or the whole text as one part) come first and ours last;
//! for Bottlerocket its TOML is the base and our cluster settings, labels and
//! taints are written over it; on Windows its PowerShell runs first, in the
//! same block (a `<powershell>` wrapper of its own is unwrapped).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::aws::nodeclass::LaunchFieldError;
use crate::config::AmiFamily;
use crate::config::nodeclass::KubeletSpec;
use crate::scheduling::taints::Taint;

/// Boundary of the MIME documents we write.
pub const MIME_BOUNDARY: &str = "==NODEWRIGHT-BOUNDARY==";

/// Everything the user data carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrap<'a> {
    pub cluster_name: &'a str,
    pub endpoint: &'a str,
    /// The cluster CA, base64 as EKS returns it.
    pub ca_base64: &'a str,
    pub service_cidr: &'a str,
    pub cluster_dns: &'a [String],
    /// The class's kubelet settings (`maxPods`, `clusterDNS` and
    /// `registerWithTaints` are ours: `max_pods`, `cluster_dns`, `taints`).
    pub kubelet: &'a KubeletSpec,
    /// `instanceStorePolicy: RAID0`: the instance stores striped into one
    /// volume for the kubelet and the container runtime.
    pub raid0: bool,
    pub max_pods: i64,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    /// The NodeClass's own user data.
    pub user_data: Option<&'a str>,
}

/// Renders the user data (plain text; the launch template wants it base64).
/// Custom: the NodeClass's user data as written.
pub fn render(family: AmiFamily, b: &Bootstrap<'_>) -> Result<String, LaunchFieldError> {
    match family {
        AmiFamily::AL2023 => al2023(b),
        AmiFamily::AL2 => Ok(al2(b)),
        AmiFamily::Bottlerocket => bottlerocket(b),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => Ok(windows(b)),
        // Custom: the NodeClass's user data as written, nothing rendered
        // around it (as Karpenter's Custom family): joining the cluster is
        // the AMI's and the user data's business.
        AmiFamily::Custom => Ok(b.user_data.unwrap_or_default().to_owned()),
    }
}

/// The cluster DNS address EKS uses: the service CIDR's base address + 10.
pub fn cluster_dns_ip(service_cidr: &str) -> Option<String> {
    let base = service_cidr.split('/').next()?.trim();
    match base.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => {
            Some(std::net::Ipv4Addr::from(u32::from(v4).checked_add(10)?).to_string())
        }
        IpAddr::V6(v6) => {
            Some(std::net::Ipv6Addr::from(u128::from(v6).checked_add(10)?).to_string())
        }
    }
}

fn dns_servers(b: &Bootstrap<'_>) -> Vec<String> {
    if !b.cluster_dns.is_empty() {
        return b.cluster_dns.to_vec();
    }
    cluster_dns_ip(b.service_cidr).into_iter().collect()
}

fn label_list(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn taint_list(taints: &[Taint]) -> String {
    taints
        .iter()
        .map(Taint::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

// ------------------------------------------------------------------ AL2023

fn al2023(b: &Bootstrap<'_>) -> Result<String, LaunchFieldError> {
    // Every field of the class's kubelet block, as written; then ours.
    let mut config = match serde_json::to_value(b.kubelet) {
        Ok(serde_json::Value::Object(m)) => m,
        Ok(_) => serde_json::Map::new(),
        Err(e) => return Err(LaunchFieldError::new("kubelet", e.to_string())),
    };
    config.insert("maxPods".into(), b.max_pods.into());
    let dns = dns_servers(b);
    if !dns.is_empty() {
        config.insert("clusterDNS".into(), dns.into());
    }
    if !b.taints.is_empty() {
        let taints: Vec<serde_json::Value> = b
            .taints
            .iter()
            .map(|t| {
                let mut m = serde_json::Map::new();
                m.insert("key".into(), t.key.clone().into());
                if !t.value.is_empty() {
                    m.insert("value".into(), t.value.clone().into());
                }
                m.insert("effect".into(), t.effect.as_str().into());
                serde_json::Value::Object(m)
            })
            .collect();
        config.insert("registerWithTaints".into(), taints.into());
    }
    let mut kubelet = serde_json::Map::new();
    kubelet.insert("config".into(), serde_json::Value::Object(config));
    if !b.labels.is_empty() {
        kubelet.insert(
            "flags".into(),
            vec![format!("--node-labels={}", label_list(b.labels))].into(),
        );
    }
    let mut node_config = serde_json::json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": b.cluster_name,
                "apiServerEndpoint": b.endpoint,
                "certificateAuthority": b.ca_base64,
                "cidr": b.service_cidr,
            },
            "kubelet": serde_json::Value::Object(kubelet),
        }
    });
    if b.raid0 {
        node_config["spec"]["instance"] =
            serde_json::json!({"localStorage": {"strategy": "RAID0"}});
    }
    let yaml = serde_norway::to_string(&node_config)
        .map_err(|e| LaunchFieldError::new("NodeConfig", e.to_string()))?;
    let mut parts = user_parts(b.user_data)?;
    parts.push(MimePart {
        content_type: "application/node.eks.aws".into(),
        body: yaml,
    });
    Ok(mime(&parts))
}

// --------------------------------------------------------------------- AL2

/// The kubelet's flags for the bootstrap scripts that take them as
/// `--kubelet-extra-args` (AL2, Windows): labels, taints, max pods and
/// the typed kubelet settings.
fn kubelet_extra_args(b: &Bootstrap<'_>) -> Vec<String> {
    let mut extra = Vec::new();
    if !b.labels.is_empty() {
        extra.push(format!("--node-labels={}", label_list(b.labels)));
    }
    if !b.taints.is_empty() {
        extra.push(format!("--register-with-taints={}", taint_list(b.taints)));
    }
    extra.push(format!("--max-pods={}", b.max_pods));
    extra.extend(kubelet_flags(b.kubelet));
    extra
}

fn al2(b: &Bootstrap<'_>) -> String {
    let extra = kubelet_extra_args(b);
    let mut script = String::from("#!/bin/bash -xe\n");
    script.push_str(
        "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    script.push_str(&format!(
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {} --b64-cluster-ca {}",
        sh_quote(b.cluster_name),
        sh_quote(b.endpoint),
        sh_quote(b.ca_base64)
    ));
    if let Some(dns) = dns_servers(b).first() {
        script.push_str(&format!(" \\\n  --dns-cluster-ip {}", sh_quote(dns)));
    }
    script.push_str(" \\\n  --use-max-pods false");
    script.push_str(&format!(
        " \\\n  --kubelet-extra-args {}\n",
        sh_quote(&extra.join(" "))
    ));
    // An AL2 user script of the user's is kept verbatim as its own part.
    let mut parts = user_parts(b.user_data).unwrap_or_else(|_| {
        b.user_data
            .map(|u| {
                vec![MimePart {
                    content_type: guess_type(u).into(),
                    body: u.to_owned(),
                }]
            })
            .unwrap_or_default()
    });
    parts.push(MimePart {
        content_type: "text/x-shellscript; charset=\"us-ascii\"".into(),
        body: script,
    });
    mime(&parts)
}

/// The typed kubelet fields as kubelet flags (AL2), as Karpenter writes them.
fn kubelet_flags(k: &KubeletSpec) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = k.pods_per_core {
        out.push(format!("--pods-per-core={n}"));
    }
    for (flag, map, sep) in [
        ("--system-reserved", &k.system_reserved, "="),
        ("--kube-reserved", &k.kube_reserved, "="),
        ("--eviction-hard", &k.eviction_hard, "<"),
        ("--eviction-soft", &k.eviction_soft, "<"),
        (
            "--eviction-soft-grace-period",
            &k.eviction_soft_grace_period,
            "=",
        ),
    ] {
        if !map.is_empty() {
            let pairs: Vec<String> = map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
            out.push(format!("{flag}={}", pairs.join(",")));
        }
    }
    if let Some(n) = k.eviction_max_pod_grace_period {
        out.push(format!("--eviction-max-pod-grace-period={n}"));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        out.push(format!("--image-gc-high-threshold={n}"));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        out.push(format!("--image-gc-low-threshold={n}"));
    }
    if let Some(q) = k.cpu_cfs_quota {
        out.push(format!("--cpu-cfs-quota={q}"));
    }
    out
}

/// Single-quotes a word for sh.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

// ----------------------------------------------------------------- Windows

/// The EKS Windows AMI's bootstrap script, run with its documented
/// parameters; the kubelet's flags as on AL2.
fn windows(b: &Bootstrap<'_>) -> String {
    let extra = kubelet_extra_args(b);
    let mut script = String::from("<powershell>\n");
    if let Some(user) = b.user_data.map(str::trim).filter(|u| !u.is_empty()) {
        let inner = user
            .strip_prefix("<powershell>")
            .and_then(|u| u.strip_suffix("</powershell>"))
            .unwrap_or(user);
        script.push_str(inner.trim());
        script.push('\n');
    }
    script.push_str("& \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"");
    let mut arg = |name: &str, value: &str| {
        script.push_str(&format!(" `\n  -{name} {}", ps_quote(value)));
    };
    arg("EKSClusterName", b.cluster_name);
    arg("APIServerEndpoint", b.endpoint);
    arg("Base64ClusterCA", b.ca_base64);
    if let Some(dns) = dns_servers(b).first() {
        arg("DNSClusterIP", dns);
    }
    arg("KubeletExtraArgs", &extra.join(" "));
    script.push_str("\n</powershell>\n");
    script
}

/// A PowerShell single-quoted string (a quote inside is doubled).
pub fn ps_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

// ------------------------------------------------------------ Bottlerocket

fn bottlerocket(b: &Bootstrap<'_>) -> Result<String, LaunchFieldError> {
    let mut root: toml::Table = match b.user_data.map(str::trim).filter(|u| !u.is_empty()) {
        Some(u) => u.parse::<toml::Table>().map_err(|e| {
            LaunchFieldError::new("userData", format!("not valid Bottlerocket TOML: {e}"))
        })?,
        None => toml::Table::new(),
    };
    let settings = sub_table(&mut root, "settings")?;
    let k8s = sub_table(settings, "kubernetes")?;
    k8s.insert("cluster-name".into(), b.cluster_name.into());
    k8s.insert("api-server".into(), b.endpoint.into());
    k8s.insert("cluster-certificate".into(), b.ca_base64.into());
    k8s.insert("max-pods".into(), toml::Value::Integer(b.max_pods));
    let dns = dns_servers(b);
    match dns.as_slice() {
        [] => {}
        [one] => {
            k8s.insert("cluster-dns-ip".into(), one.clone().into());
        }
        many => {
            k8s.insert(
                "cluster-dns-ip".into(),
                toml::Value::Array(many.iter().cloned().map(Into::into).collect()),
            );
        }
    }
    let kb = b.kubelet;
    let str_map = |m: &BTreeMap<String, String>| {
        toml::Value::Table(
            m.iter()
                .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
                .collect(),
        )
    };
    for (key, map) in [
        ("system-reserved", &kb.system_reserved),
        ("kube-reserved", &kb.kube_reserved),
        ("eviction-hard", &kb.eviction_hard),
        ("eviction-soft", &kb.eviction_soft),
        ("eviction-soft-grace-period", &kb.eviction_soft_grace_period),
    ] {
        if !map.is_empty() {
            k8s.insert(key.into(), str_map(map));
        }
    }
    if let Some(n) = kb.eviction_max_pod_grace_period {
        k8s.insert(
            "eviction-max-pod-grace-period".into(),
            toml::Value::Integer(n),
        );
    }
    if let Some(n) = kb.image_gc_high_threshold_percent {
        k8s.insert(
            "image-gc-high-threshold-percent".into(),
            n.to_string().into(),
        );
    }
    if let Some(n) = kb.image_gc_low_threshold_percent {
        k8s.insert(
            "image-gc-low-threshold-percent".into(),
            n.to_string().into(),
        );
    }
    if let Some(q) = kb.cpu_cfs_quota {
        k8s.insert("cpu-cfs-quota-enforced".into(), q.into());
    }
    if !b.labels.is_empty() {
        let labels = sub_table(k8s, "node-labels")?;
        for (k, v) in b.labels {
            labels.insert(k.clone(), v.clone().into());
        }
    }
    if !b.taints.is_empty() {
        let taints = sub_table(k8s, "node-taints")?;
        let mut by_key: BTreeMap<&str, Vec<toml::Value>> = BTreeMap::new();
        for t in b.taints {
            by_key
                .entry(&t.key)
                .or_default()
                .push(format!("{}:{}", t.value, t.effect.as_str()).into());
        }
        for (k, v) in by_key {
            taints.insert(k.to_owned(), toml::Value::Array(v));
        }
    }
    if b.raid0 {
        let settings = sub_table(&mut root, "settings")?;
        let commands = sub_table(settings, "bootstrap-commands")?;
        let cmd = |words: &[&str]| {
            toml::Value::Array(words.iter().map(|w| (*w).into()).collect::<Vec<_>>())
        };
        let mut mount = toml::Table::new();
        mount.insert(
            "commands".into(),
            toml::Value::Array(vec![
                cmd(&["apiclient", "ephemeral-storage", "init"]),
                cmd(&[
                    "apiclient",
                    "ephemeral-storage",
                    "bind",
                    "--dirs",
                    "/var/lib/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods",
                ]),
            ]),
        );
        mount.insert("essential".into(), true.into());
        mount.insert("mode".into(), "always".into());
        commands.insert(
            "000-mount-instance-storage".into(),
            toml::Value::Table(mount),
        );
    }
    toml::to_string(&root)
        .map_err(|e| LaunchFieldError::new("userData", format!("Bottlerocket settings: {e}")))
}

fn sub_table<'t>(
    t: &'t mut toml::Table,
    key: &str,
) -> Result<&'t mut toml::Table, LaunchFieldError> {
    t.entry(key.to_owned())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or_else(|| LaunchFieldError::new("userData", format!("`{key}` must be a table")))
}

// -------------------------------------------------------------------- MIME

/// One part of a MIME multipart user-data document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MimePart {
    pub content_type: String,
    pub body: String,
}

/// Writes a `multipart/mixed` document.
pub fn mime(parts: &[MimePart]) -> String {
    let mut out = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n"
    );
    for p in parts {
        out.push_str(&format!(
            "--{MIME_BOUNDARY}\nContent-Type: {}\n\n{}",
            p.content_type, p.body
        ));
        if !p.body.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&format!("--{MIME_BOUNDARY}--\n"));
    out
}

/// The parts of the user's user data: its MIME parts, or the whole text as one part.
pub fn user_parts(user_data: Option<&str>) -> Result<Vec<MimePart>, LaunchFieldError> {
    let Some(text) = user_data.filter(|u| !u.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let text = text.replace("\r\n", "\n");
    let (headers, _) = text.split_once("\n\n").unwrap_or((&text, ""));
    let is_mime = headers
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("mime-version:"))
        && headers.to_ascii_lowercase().contains("multipart/");
    if !is_mime {
        return Ok(vec![MimePart {
            content_type: guess_type(&text).into(),
            body: text,
        }]);
    }
    let boundary = boundary_of(headers)
        .ok_or_else(|| LaunchFieldError::new("userData", "MIME document without a boundary"))?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in text.split(&delimiter).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let chunk = chunk.strip_prefix('\n').unwrap_or(chunk);
        let (part_headers, body) = chunk.split_once("\n\n").unwrap_or((chunk, ""));
        let content_type = part_headers
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| "text/x-shellscript".to_owned());
        parts.push(MimePart {
            content_type,
            body: body.to_owned(),
        });
    }
    if parts.is_empty() {
        return Err(LaunchFieldError::new(
            "userData",
            "MIME document without parts",
        ));
    }
    Ok(parts)
}

fn boundary_of(headers: &str) -> Option<String> {
    let lower = headers.to_ascii_lowercase();
    let at = lower.find("boundary=")? + "boundary=".len();
    let rest = &headers[at..];
    let value = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.split('"').next()?
    } else {
        rest.split(|c: char| c == ';' || c.is_whitespace()).next()?
    };
    (!value.is_empty()).then(|| value.to_owned())
}

fn guess_type(text: &str) -> &'static str {
    let t = text.trim_start();
    if t.starts_with("#cloud-config") {
        "text/cloud-config"
    } else if t.contains("node.eks.aws/") && t.contains("NodeConfig") {
        "application/node.eks.aws"
    } else {
        "text/x-shellscript; charset=\"us-ascii\""
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::taints::Effect;

    fn input<'a>(
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
        user: Option<&'a str>,
    ) -> Bootstrap<'a> {
        Bootstrap {
            cluster_name: "demo",
            endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com",
            ca_base64: "Q0E=",
            service_cidr: "10.100.0.0/16",
            cluster_dns: &[],
            kubelet: &NO_KUBELET,
            raid0: false,
            max_pods: 29,
            labels,
            taints,
            user_data: user,
        }
    }

    static NO_KUBELET: KubeletSpec = KubeletSpec {
        cluster_dns: Vec::new(),
        max_pods: None,
        pods_per_core: None,
        system_reserved: BTreeMap::new(),
        kube_reserved: BTreeMap::new(),
        eviction_hard: BTreeMap::new(),
        eviction_soft: BTreeMap::new(),
        eviction_soft_grace_period: BTreeMap::new(),
        eviction_max_pod_grace_period: None,
        image_gc_high_threshold_percent: None,
        image_gc_low_threshold_percent: None,
        cpu_cfs_quota: None,
        other: BTreeMap::new(),
    };

    /// A class's kubelet block with typed fields and pass-through ones.
    fn kubelet() -> KubeletSpec {
        serde_json::from_value(serde_json::json!({
            "maxPods": 110,
            "podsPerCore": 4,
            "systemReserved": {"cpu": "100m", "memory": "100Mi"},
            "kubeReserved": {"cpu": "200m"},
            "evictionHard": {"memory.available": "5%"},
            "evictionSoft": {"memory.available": "10%"},
            "evictionSoftGracePeriod": {"memory.available": "1m0s"},
            "evictionMaxPodGracePeriod": 60,
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
            "cpuCFSQuota": false,
            "serializeImagePulls": false,
            "containerLogMaxSize": "50Mi",
            "shutdownGracePeriod": "30s",
            "topologyManagerPolicy": "single-numa-node"
        }))
        .expect("kubelet block")
    }

    /// AL2023 passes every kubelet field through in the NodeConfig (as
    /// Karpenter v1.15's nodeadm bootstrap does, aws/karpenter-provider-aws
    /// pkg/providers/amifamily/bootstrap/nodeadm.go), with our max pods,
    /// cluster DNS and taints over the class's.
    #[test]
    fn al2023_passes_every_kubelet_field_through() {
        let l = labels();
        let t = [Taint::new(
            "karpenter.sh/unregistered",
            "",
            Effect::NoExecute,
        )];
        let k = kubelet();
        let mut b = input(&l, &t, None);
        b.kubelet = &k;
        b.raid0 = true;
        let out = render(AmiFamily::AL2023, &b).expect("renders");
        let parts = user_parts(Some(&out)).expect("parses");
        let cfg: serde_json::Value = serde_norway::from_str(&parts[0].body).expect("yaml");
        let kc = &cfg["spec"]["kubelet"]["config"];
        assert_eq!(kc["maxPods"], 29, "the launch's max pods");
        assert_eq!(kc["podsPerCore"], 4);
        assert_eq!(kc["systemReserved"]["memory"], "100Mi");
        assert_eq!(kc["kubeReserved"]["cpu"], "200m");
        assert_eq!(kc["evictionHard"]["memory.available"], "5%");
        assert_eq!(kc["evictionSoft"]["memory.available"], "10%");
        assert_eq!(kc["evictionSoftGracePeriod"]["memory.available"], "1m0s");
        assert_eq!(kc["evictionMaxPodGracePeriod"], 60);
        assert_eq!(kc["imageGCHighThresholdPercent"], 85);
        assert_eq!(kc["imageGCLowThresholdPercent"], 80);
        assert_eq!(kc["cpuCFSQuota"], false);
        assert_eq!(kc["serializeImagePulls"], false);
        assert_eq!(kc["containerLogMaxSize"], "50Mi");
        assert_eq!(kc["shutdownGracePeriod"], "30s");
        assert_eq!(kc["topologyManagerPolicy"], "single-numa-node");
        assert_eq!(kc["clusterDNS"][0], "10.100.0.10");
        assert_eq!(
            kc["registerWithTaints"][0]["key"],
            "karpenter.sh/unregistered"
        );
        assert_eq!(
            cfg["spec"]["instance"]["localStorage"]["strategy"], "RAID0",
            "instanceStorePolicy: RAID0"
        );
        // Without RAID0 there is no instance section.
        let plain = render(AmiFamily::AL2023, &input(&l, &t, None)).expect("renders");
        assert!(!plain.contains("localStorage"), "{plain}");
    }

    /// AL2 and Bottlerocket get the typed fields under their own names, as
    /// Karpenter's bootstrap.go and bottlerocket.go write them.
    #[test]
    fn al2_and_bottlerocket_get_the_typed_kubelet_fields() {
        let l = labels();
        let k = kubelet();
        let mut b = input(&l, &[], None);
        b.kubelet = &k;
        let al2 = render(AmiFamily::AL2, &b).expect("renders");
        for flag in [
            "--pods-per-core=4",
            "--system-reserved=cpu=100m,memory=100Mi",
            "--kube-reserved=cpu=200m",
            "--eviction-hard=memory.available<5%",
            "--eviction-soft=memory.available<10%",
            "--eviction-soft-grace-period=memory.available=1m0s",
            "--eviction-max-pod-grace-period=60",
            "--image-gc-high-threshold=85",
            "--image-gc-low-threshold=80",
            "--cpu-cfs-quota=false",
        ] {
            assert!(al2.contains(flag), "{flag} in {al2}");
        }
        b.raid0 = true;
        let br = render(AmiFamily::Bottlerocket, &b).expect("renders");
        let v: toml::Table = br.parse().expect("toml");
        let kc = &v["settings"]["kubernetes"];
        assert_eq!(kc["system-reserved"]["cpu"].as_str(), Some("100m"));
        assert_eq!(kc["kube-reserved"]["cpu"].as_str(), Some("200m"));
        assert_eq!(kc["eviction-hard"]["memory.available"].as_str(), Some("5%"));
        assert_eq!(
            kc["eviction-soft-grace-period"]["memory.available"].as_str(),
            Some("1m0s")
        );
        assert_eq!(kc["eviction-max-pod-grace-period"].as_integer(), Some(60));
        assert_eq!(kc["image-gc-high-threshold-percent"].as_str(), Some("85"));
        assert_eq!(kc["cpu-cfs-quota-enforced"].as_bool(), Some(false));
        let mount = &v["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(mount["essential"].as_bool(), Some(true));
        assert_eq!(mount["commands"].as_array().map(Vec::len), Some(2));
    }

    fn labels() -> BTreeMap<String, String> {
        [
            ("karpenter.sh/capacity-type".to_owned(), "spot".to_owned()),
            ("team".to_owned(), "a".to_owned()),
        ]
        .into()
    }

    #[test]
    fn cluster_dns_is_base_plus_ten() {
        assert_eq!(
            cluster_dns_ip("10.100.0.0/16").as_deref(),
            Some("10.100.0.10")
        );
        assert_eq!(
            cluster_dns_ip("172.20.0.0/16").as_deref(),
            Some("172.20.0.10")
        );
        assert_eq!(cluster_dns_ip("fd00:1::/108").as_deref(), Some("fd00:1::a"));
        assert_eq!(cluster_dns_ip("nonsense"), None);
    }

    #[test]
    fn al2023_nodeconfig_carries_everything_after_user_parts() {
        let l = labels();
        let t = [
            Taint::new("karpenter.sh/unregistered", "", Effect::NoExecute),
            Taint::new("gpu", "yes", Effect::NoSchedule),
        ];
        let user = "#!/bin/bash\necho hello\n";
        let out = render(AmiFamily::AL2023, &input(&l, &t, Some(user))).expect("renders");
        assert!(out.starts_with("MIME-Version: 1.0\n"));
        let parts = user_parts(Some(&out)).expect("our output parses as MIME");
        assert_eq!(parts.len(), 2);
        assert!(parts[0].body.contains("echo hello"));
        assert_eq!(parts[1].content_type, "application/node.eks.aws");
        let cfg: serde_json::Value = serde_norway::from_str(&parts[1].body).expect("yaml");
        assert_eq!(cfg["kind"], "NodeConfig");
        assert_eq!(cfg["spec"]["cluster"]["name"], "demo");
        assert_eq!(cfg["spec"]["cluster"]["cidr"], "10.100.0.0/16");
        assert_eq!(cfg["spec"]["cluster"]["certificateAuthority"], "Q0E=");
        assert_eq!(cfg["spec"]["kubelet"]["config"]["maxPods"], 29);
        assert_eq!(
            cfg["spec"]["kubelet"]["config"]["clusterDNS"][0],
            "10.100.0.10"
        );
        assert_eq!(
            cfg["spec"]["kubelet"]["config"]["registerWithTaints"][0]["effect"],
            "NoExecute"
        );
        assert_eq!(
            cfg["spec"]["kubelet"]["config"]["registerWithTaints"][1]["value"],
            "yes"
        );
        assert_eq!(
            cfg["spec"]["kubelet"]["flags"][0],
            "--node-labels=karpenter.sh/capacity-type=spot,team=a"
        );
    }

    #[test]
    fn al2023_keeps_the_parts_of_a_mime_user_data() {
        let l = labels();
        let user = "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\n\r\n--BOUNDARY\r\nContent-Type: text/x-shellscript\r\n\r\necho one\r\n--BOUNDARY\r\nContent-Type: application/node.eks.aws\r\n\r\napiVersion: node.eks.aws/v1alpha1\r\nkind: NodeConfig\r\n--BOUNDARY--\r\n";
        let out = render(AmiFamily::AL2023, &input(&l, &[], Some(user))).expect("renders");
        let parts = user_parts(Some(&out)).expect("parses");
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].body.trim(), "echo one");
        assert_eq!(parts[1].content_type, "application/node.eks.aws");
    }

    #[test]
    fn al2_runs_bootstrap_with_extra_args() {
        let l = labels();
        let t = [Taint::new("dedicated", "it's", Effect::NoSchedule)];
        let out = render(AmiFamily::AL2, &input(&l, &t, None)).expect("renders");
        assert!(out.contains("/etc/eks/bootstrap.sh 'demo' --apiserver-endpoint 'https://ABC.gr7.us-east-1.eks.amazonaws.com' --b64-cluster-ca 'Q0E='"));
        assert!(out.contains("--dns-cluster-ip '10.100.0.10'"));
        assert!(out.contains("--use-max-pods false"));
        assert!(out.contains(
            r"--kubelet-extra-args '--node-labels=karpenter.sh/capacity-type=spot,team=a --register-with-taints=dedicated=it'\''s:NoSchedule --max-pods=29'"
        ));
    }

    /// Windows runs the EKS Windows AMI's bootstrap script with the
    /// cluster, the DNS address and the kubelet's flags (labels, taints
    /// quoted for PowerShell, max pods, the typed fields); the user's
    /// PowerShell first, unwrapped into the one block; the same for every
    /// Windows family.
    #[test]
    fn windows_runs_the_eks_bootstrap_script_after_the_users_powershell() {
        let l = labels();
        let t = [Taint::new("os", "it's", Effect::NoSchedule)];
        let k = kubelet();
        let mut b = input(
            &l,
            &t,
            Some("<powershell>\nWrite-Output 'mine'\n</powershell>"),
        );
        b.kubelet = &k;
        b.max_pods = 110;
        for family in [
            AmiFamily::Windows2019,
            AmiFamily::Windows2022,
            AmiFamily::Windows2025,
        ] {
            let out = render(family, &b).expect("renders");
            assert!(out.starts_with("<powershell>\nWrite-Output 'mine'\n& \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\""), "{out}");
            assert!(out.trim_end().ends_with("</powershell>"), "{out}");
            assert_eq!(out.matches("<powershell>").count(), 1, "{out}");
            for arg in [
                "-EKSClusterName 'demo'",
                "-APIServerEndpoint 'https://ABC.gr7.us-east-1.eks.amazonaws.com'",
                "-Base64ClusterCA 'Q0E='",
                "-DNSClusterIP '10.100.0.10'",
                "-KubeletExtraArgs '--node-labels=karpenter.sh/capacity-type=spot,team=a --register-with-taints=os=it''s:NoSchedule --max-pods=110 --pods-per-core=4 --system-reserved=cpu=100m,memory=100Mi",
            ] {
                assert!(out.contains(arg), "{arg} in {out}");
            }
        }
        let bare = render(AmiFamily::Windows2022, &input(&l, &[], None)).expect("renders");
        assert!(bare.starts_with("<powershell>\n& "), "{bare}");
        assert!(bare.contains("-KubeletExtraArgs '--node-labels=karpenter.sh/capacity-type=spot,team=a --max-pods=29'"), "{bare}");
    }

    #[test]
    fn bottlerocket_merges_over_user_toml() {
        let l = labels();
        let t = [
            Taint::new("a", "1", Effect::NoSchedule),
            Taint::new("a", "2", Effect::NoExecute),
        ];
        let user = "[settings.kubernetes]\ncluster-name = \"wrong\"\nimage-gc-high-threshold-percent = \"85\"\n[settings.kubernetes.node-labels]\nmine = \"yes\"\n[settings.host-containers.admin]\nenabled = true\n";
        let out = render(AmiFamily::Bottlerocket, &input(&l, &t, Some(user))).expect("renders");
        let v: toml::Table = out.parse().expect("valid toml");
        let k = &v["settings"]["kubernetes"];
        assert_eq!(k["cluster-name"].as_str(), Some("demo"));
        assert_eq!(k["image-gc-high-threshold-percent"].as_str(), Some("85"));
        assert_eq!(
            k["api-server"].as_str(),
            Some("https://ABC.gr7.us-east-1.eks.amazonaws.com")
        );
        assert_eq!(k["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
        assert_eq!(k["max-pods"].as_integer(), Some(29));
        assert_eq!(k["node-labels"]["mine"].as_str(), Some("yes"));
        assert_eq!(k["node-labels"]["team"].as_str(), Some("a"));
        assert_eq!(k["node-taints"]["a"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            v["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        assert!(render(AmiFamily::Bottlerocket, &input(&l, &t, Some("not = [toml"))).is_err());
    }
}
