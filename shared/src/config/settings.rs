//! The `settings` item: what Karpenter users set through the controller's
//! flags and environment (batch windows, feature gates), plus what
//! nodewright adds (the rebalance policy, the consolidation savings
//! threshold). One item per cluster, stored as `settings#default`; every
//! field has a default, so an absent item means the defaults.

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::disruption::parse_duration;
use super::schema::{Kind, opt};

/// The shape of the settings item's `spec`.
pub const SETTINGS_SPEC: Kind = Kind::Object(&[
    opt("batchIdleDuration", Kind::Str),
    opt("batchMaxDuration", Kind::Str),
    opt("rebalancePolicy", Kind::Str),
    opt("consolidationSavingsThreshold", Kind::IntOrString),
    opt("interruptionQueue", Kind::Str),
    opt("preferencePolicy", Kind::Str),
    opt("minValuesPolicy", Kind::Str),
    opt("reservedENIs", Kind::Int),
    // Each gate's name is checked when the spec is read.
    opt("featureGates", Kind::Map(&Kind::Bool)),
]);

/// The name of the one settings item.
pub const SETTINGS_NAME: &str = "default";
/// The NodePool annotation that overrides the rebalance policy for its nodes,
/// so a Karpenter NodePool stays valid YAML.
pub const REBALANCE_ANNOTATION: &str = "nodewright.io/rebalance-policy";
/// The NodePool annotation that says what nodewright does with the nodes
/// Karpenter launched for a pool handed over to it (`nodewright config
/// import --adopt`): `none` (the default) or `replace`.
pub const KARPENTER_NODES_ANNOTATION: &str = "nodewright.io/karpenter-nodes";

/// The command that stops Karpenter launching for `pool` (its limits at
/// zero; deleting its NodePool instead would make Karpenter delete all of
/// the pool's nodes at once).
pub fn stop_karpenter_command(pool: &str) -> String {
    format!(
        "kubectl patch nodepool {pool} --type merge -p '{{\"spec\":{{\"limits\":{{\"cpu\":\"0\"}}}}}}'"
    )
}

/// The value of [`KARPENTER_NODES_ANNOTATION`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KarpenterNodes {
    /// Leave them to Karpenter: nodewright never touches them.
    #[default]
    None,
    /// Replace them within the pool's budgets for `Drifted`: nodewright
    /// deletes their Nodes a few at a time, Karpenter drains and
    /// terminates each (`disruption::handover`).
    Replace,
}

impl KarpenterNodes {
    pub fn parse(s: &str) -> Option<KarpenterNodes> {
        match s {
            "none" => Some(KarpenterNodes::None),
            "replace" => Some(KarpenterNodes::Replace),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KarpenterNodes::None => "none",
            KarpenterNodes::Replace => "replace",
        }
    }
}

/// `spec` of the settings item, as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsSpec {
    /// Karpenter's BATCH_IDLE_DURATION (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_idle_duration: Option<String>,
    /// Karpenter's BATCH_MAX_DURATION (default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_max_duration: Option<String>,
    /// `Ignore` (Karpenter's behaviour, the default), `Cordon` or `Replace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance_policy: Option<String>,
    /// A replacement must save at least this share of the candidates' price
    /// (`"10%"` or `0.1`); default 10 %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_savings_threshold: Option<serde_json::Value>,
    /// The SQS queue the interruption function reads (informational: the
    /// event source mapping is what delivers it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_queue: Option<String>,
    /// Karpenter's PREFERENCE_POLICY: `Respect` (the default) or `Ignore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference_policy: Option<String>,
    /// Karpenter's MIN_VALUES_POLICY: `Strict` (the default) or `BestEffort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values_policy: Option<String>,
    /// Karpenter's RESERVED_ENIS: ENIs per node kept out of the max-pods
    /// math (for interfaces something else attaches); default 0.
    #[serde(
        default,
        rename = "reservedENIs",
        skip_serializing_if = "Option::is_none"
    )]
    pub reserved_enis: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<FeatureGatesSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeatureGatesSpec {
    /// Karpenter's SpotToSpotConsolidation (alpha, off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_to_spot_consolidation: Option<bool>,
    /// Karpenter's NodeRepair (alpha, off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_repair: Option<bool>,
    /// Karpenter's NodeClassCEL (an AWS gate, alpha, off by default): a
    /// NodeClass's `maxPods`, `kubeReserved` and `systemReserved` may be
    /// expressions of the instance type.
    #[serde(
        default,
        rename = "nodeClassCEL",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_class_cel: Option<bool>,
}

/// What to do with a node that gets an EC2 rebalance recommendation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RebalancePolicy {
    /// Nothing (Karpenter's behaviour).
    #[default]
    Ignore,
    /// Taint the node so nothing new lands on it.
    Cordon,
    /// Launch a replacement, then drain with no hard deadline (PDBs always respected).
    Replace,
}

impl RebalancePolicy {
    pub fn parse(s: &str) -> Option<RebalancePolicy> {
        match s {
            "Ignore" => Some(RebalancePolicy::Ignore),
            "Cordon" => Some(RebalancePolicy::Cordon),
            "Replace" => Some(RebalancePolicy::Replace),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RebalancePolicy::Ignore => "Ignore",
            RebalancePolicy::Cordon => "Cordon",
            RebalancePolicy::Replace => "Replace",
        }
    }
}

/// Karpenter's `--preference-policy`: how the scheduler treats preferences
/// (preferred node and pod (anti-)affinity, `ScheduleAnyway` spreads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PreferencePolicy {
    /// Try each pod with its preferences, relax them one by one.
    #[default]
    Respect,
    /// Plan every pod as if it had none.
    Ignore,
}

impl PreferencePolicy {
    pub fn parse(s: &str) -> Option<PreferencePolicy> {
        match s {
            "Respect" => Some(PreferencePolicy::Respect),
            "Ignore" => Some(PreferencePolicy::Ignore),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PreferencePolicy::Respect => "Respect",
            PreferencePolicy::Ignore => "Ignore",
        }
    }
}

/// Karpenter's `--min-values-policy`: what a requirement's `minValues` does
/// when the instance types left cannot meet it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MinValuesPolicy {
    /// Nothing launches: the pod stays pending.
    #[default]
    Strict,
    /// Launch with the types left; the claim is marked as relaxed.
    BestEffort,
}

impl MinValuesPolicy {
    pub fn parse(s: &str) -> Option<MinValuesPolicy> {
        match s {
            "Strict" => Some(MinValuesPolicy::Strict),
            "BestEffort" => Some(MinValuesPolicy::BestEffort),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MinValuesPolicy::Strict => "Strict",
            MinValuesPolicy::BestEffort => "BestEffort",
        }
    }
}

/// Validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub batch_idle: SignedDuration,
    pub batch_max: SignedDuration,
    pub rebalance_policy: RebalancePolicy,
    /// 0.0–1.0.
    pub consolidation_savings_threshold: f64,
    pub interruption_queue: Option<String>,
    pub preference_policy: PreferencePolicy,
    pub min_values_policy: MinValuesPolicy,
    /// ENIs per node that hold no pod IPs (Karpenter's RESERVED_ENIS).
    pub reserved_enis: u32,
    pub spot_to_spot_consolidation: bool,
    pub node_repair: bool,
    /// Kubelet expressions in NodeClasses (`featureGates.nodeClassCEL`).
    pub node_class_cel: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            batch_idle: SignedDuration::from_secs(1),
            batch_max: SignedDuration::from_secs(10),
            rebalance_policy: RebalancePolicy::Ignore,
            consolidation_savings_threshold: 0.10,
            interruption_queue: None,
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            reserved_enis: 0,
            spot_to_spot_consolidation: false,
            node_repair: false,
            node_class_cel: false,
        }
    }
}

impl Settings {
    /// Validates a spec; returns every error at once.
    pub fn from_spec(spec: &SettingsSpec) -> Result<Settings, Vec<ConfigError>> {
        let item = "settings/default";
        let mut errors = Vec::new();
        let mut err = |field: &str, reason: String| {
            errors.push(ConfigError {
                item: item.to_owned(),
                field: format!("spec.{field}"),
                reason,
            })
        };
        let mut s = Settings::default();
        let duration = |field: &str,
                        v: &Option<String>,
                        into: &mut SignedDuration,
                        err: &mut dyn FnMut(&str, String)| {
            if let Some(text) = v {
                match parse_duration(text) {
                    Ok(d) if d > SignedDuration::ZERO => *into = d,
                    Ok(_) => err(field, "must be longer than 0s".to_owned()),
                    Err(r) => err(field, r),
                }
            }
        };
        duration(
            "batchIdleDuration",
            &spec.batch_idle_duration,
            &mut s.batch_idle,
            &mut err,
        );
        duration(
            "batchMaxDuration",
            &spec.batch_max_duration,
            &mut s.batch_max,
            &mut err,
        );
        if s.batch_idle > s.batch_max {
            err(
                "batchIdleDuration",
                "must not be longer than batchMaxDuration".to_owned(),
            );
        }
        if let Some(p) = &spec.rebalance_policy {
            match RebalancePolicy::parse(p) {
                Some(p) => s.rebalance_policy = p,
                None => err(
                    "rebalancePolicy",
                    format!("unknown policy {p:?}: expected Ignore, Cordon or Replace"),
                ),
            }
        }
        if let Some(v) = &spec.consolidation_savings_threshold {
            match parse_share(v) {
                Some(t) if (0.0..=1.0).contains(&t) => s.consolidation_savings_threshold = t,
                _ => err(
                    "consolidationSavingsThreshold",
                    format!("{v} is not a share between 0% and 100%"),
                ),
            }
        }
        s.interruption_queue = spec.interruption_queue.clone().filter(|q| !q.is_empty());
        if let Some(p) = &spec.preference_policy {
            match PreferencePolicy::parse(p) {
                Some(p) => s.preference_policy = p,
                None => err(
                    "preferencePolicy",
                    format!("unknown policy {p:?}: expected Respect or Ignore"),
                ),
            }
        }
        if let Some(p) = &spec.min_values_policy {
            match MinValuesPolicy::parse(p) {
                Some(p) => s.min_values_policy = p,
                None => err(
                    "minValuesPolicy",
                    format!("unknown policy {p:?}: expected Strict or BestEffort"),
                ),
            }
        }
        if let Some(n) = spec.reserved_enis {
            match u32::try_from(n) {
                Ok(n) => s.reserved_enis = n,
                Err(_) => err(
                    "reservedENIs",
                    format!("{n} is not a count of ENIs (0 or more)"),
                ),
            }
        }
        if let Some(g) = &spec.feature_gates {
            s.spot_to_spot_consolidation = g.spot_to_spot_consolidation.unwrap_or(false);
            s.node_repair = g.node_repair.unwrap_or(false);
            s.node_class_cel = g.node_class_cel.unwrap_or(false);
        }
        if errors.is_empty() {
            Ok(s)
        } else {
            Err(errors)
        }
    }
}

/// `"10%"`, `"0.1"` or `0.1` → 0.1.
fn parse_share(v: &serde_json::Value) -> Option<f64> {
    let share = match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.trim().parse::<f64>().ok().map(|p| p / 100.0),
            None => s.trim().parse().ok(),
        },
        _ => None,
    };
    share.filter(|f| f.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_nothing_is_set() {
        assert_eq!(
            Settings::from_spec(&SettingsSpec::default()),
            Ok(Settings::default())
        );
    }

    #[test]
    fn every_field_is_read() {
        let spec: SettingsSpec = serde_json::from_value(serde_json::json!({
            "batchIdleDuration": "2s", "batchMaxDuration": "20s", "rebalancePolicy": "Replace",
            "consolidationSavingsThreshold": "25%", "interruptionQueue": "q",
            "preferencePolicy": "Ignore", "minValuesPolicy": "BestEffort",
            "featureGates": {"spotToSpotConsolidation": true, "nodeRepair": true, "nodeClassCEL": true}
        }))
        .expect("spec");
        let s = Settings::from_spec(&spec).expect("valid");
        assert!(s.node_class_cel);
        assert_eq!(s.batch_idle, SignedDuration::from_secs(2));
        assert_eq!(s.batch_max, SignedDuration::from_secs(20));
        assert_eq!(s.rebalance_policy, RebalancePolicy::Replace);
        assert!((s.consolidation_savings_threshold - 0.25).abs() < 1e-12);
        assert_eq!(s.interruption_queue.as_deref(), Some("q"));
        assert!(s.spot_to_spot_consolidation && s.node_repair);
        assert_eq!(s.preference_policy, PreferencePolicy::Ignore);
        assert_eq!(s.min_values_policy, MinValuesPolicy::BestEffort);
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let spec: SettingsSpec = serde_json::from_value(serde_json::json!({
            "batchIdleDuration": "soon", "rebalancePolicy": "Drain", "consolidationSavingsThreshold": "150%",
            "preferencePolicy": "ignore", "minValuesPolicy": "Relaxed"
        }))
        .expect("spec");
        let errors = Settings::from_spec(&spec).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.batchIdleDuration",
                "spec.rebalancePolicy",
                "spec.consolidationSavingsThreshold",
                "spec.preferencePolicy",
                "spec.minValuesPolicy"
            ]
        );
    }
}
