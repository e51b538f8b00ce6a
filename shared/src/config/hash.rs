//! The drift hashes: what a claim is stamped with at the decision, so
//! that drift can tell a NodePool or NodeClass changed since the node was
//! launched.
//!
//! The hashes are a version (`v2:` for the NodePool's, `v1:` for the
//! NodeClass's) + 16 hex digits of FNV-1a over a canonical JSON (keys
//! sorted). A pool stamp of another version is not compared (it is
//! re-stamped by `disruption::observe`), so changing what is hashed never
//! drifts a whole fleet at once (`v2` added the template's annotations).
//! Selector terms are left out of the class hash on purpose: a changed
//! selector that resolves to the same AMI or subnets must not replace the
//! fleet; drift's dynamic check sees the change that matters.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{NodeClass, NodeIdentity, NodePool};
use crate::scheduling::taints::Taint;

/// The prefix of the NodeClass hashes this version computes.
pub const HASH_VERSION: &str = "v1";
/// The prefix of the NodePool hashes this version computes.
pub const POOL_HASH_VERSION: &str = "v2";

/// The hash of a NodePool's template: labels, annotations, taints, startup
/// taints, the NodeClass reference, expireAfter, terminationGracePeriod and
/// the kubelet settings. Requirements are not hashed (they are checked against the
/// node's labels instead, so widening them drifts nothing).
pub fn pool_hash(pool: &NodePool) -> String {
    let taints = |ts: &[Taint]| -> Vec<Value> {
        let mut v: Vec<String> = ts
            .iter()
            .map(|t| format!("{}={}:{}", t.key, t.value, t.effect.as_str()))
            .collect();
        v.sort();
        v.into_iter().map(Value::String).collect()
    };
    let doc = json!({
        "labels": pool.labels,
        "annotations": pool.template_annotations,
        "taints": taints(&pool.taints),
        "startupTaints": taints(&pool.startup_taints),
        "nodeClassRef": pool.node_class,
        "expireAfter": pool.expire_after.map(|d| d.as_secs()),
        "terminationGracePeriod": pool.termination_grace_period.map(|d| d.as_secs()),
        "kubelet": serde_json::to_value(&pool.launch_kubelet).unwrap_or(Value::Null),
    });
    stamp(POOL_HASH_VERSION, &doc)
}

/// The hash of a NodeClass's static fields (everything but the selector terms).
pub fn class_hash(class: &NodeClass) -> String {
    let identity = match &class.identity {
        NodeIdentity::Role(r) => json!({"role": r}),
        NodeIdentity::InstanceProfile(p) => json!({"instanceProfile": p}),
        NodeIdentity::DefaultInstanceProfile => json!({"defaultInstanceProfile": true}),
    };
    let doc = json!({
        "amiFamily": class.ami_family.as_str(),
        "identity": identity,
        "tags": class.tags,
        "userData": class.user_data,
        "kubelet": serde_json::to_value(&class.kubelet).unwrap_or(Value::Null),
        "blockDeviceMappings": class.block_device_mappings,
        "instanceStorePolicy": class.instance_store_policy,
        "metadataOptions": class.metadata_options,
        "associatePublicIPAddress": class.associate_public_ip_address,
        "detailedMonitoring": class.detailed_monitoring,
        "context": class.context,
    });
    stamp(HASH_VERSION, &doc)
}

fn stamp(version: &str, doc: &Value) -> String {
    let mut text = String::new();
    canonical(doc, &mut text);
    format!("{version}:{:016x}", fnv1a(text.as_bytes()))
}

/// JSON with object keys sorted, whatever map order serde_json was built with.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms (unlike std's hasher).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A NodeClass stamp this version can compare.
pub fn is_current(hash: &str) -> bool {
    hash.split_once(':').is_some_and(|(v, _)| v == HASH_VERSION)
}

/// A NodePool stamp this version can compare.
pub fn is_current_pool(hash: &str) -> bool {
    hash.split_once(':')
        .is_some_and(|(v, _)| v == POOL_HASH_VERSION)
}
