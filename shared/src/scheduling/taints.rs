//! Taints and tolerations, as the Kubernetes scheduler matches them.

use k8s_openapi::api::core::v1::{Taint as K8sTaint, Toleration as K8sToleration};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn parse(s: &str) -> Option<Effect> {
        match s {
            "NoSchedule" => Some(Effect::NoSchedule),
            "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
            "NoExecute" => Some(Effect::NoExecute),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: Effect,
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: Effect) -> Self {
        Taint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect,
        }
    }

    pub fn from_k8s(t: &K8sTaint) -> Result<Self, String> {
        let effect = Effect::parse(&t.effect)
            .ok_or_else(|| format!("taint {}: unknown effect {:?}", t.key, t.effect))?;
        Ok(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{:?}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{:?}", self.key, self.value, self.effect)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    /// Empty with `exists` = tolerates every taint.
    pub key: String,
    pub exists: bool,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    pub fn from_k8s(t: &K8sToleration) -> Result<Self, String> {
        let exists = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => false,
            Some("Exists") => true,
            Some(other) => {
                return Err(format!(
                    "toleration {:?}: unknown operator {other:?}",
                    t.key
                ));
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(
                Effect::parse(e)
                    .ok_or_else(|| format!("toleration {:?}: unknown effect {e:?}", t.key))?,
            ),
        };
        Ok(Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists,
            value: t.value.clone().unwrap_or_default(),
            effect,
        })
    }

    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == taint.key && (self.exists || self.value == taint.value)
    }
}

/// The first taint that the tolerations do not tolerate and that keeps a pod
/// off the node (NoSchedule, NoExecute; PreferNoSchedule too unless relaxed).
pub fn first_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    ignore_prefer_no_schedule: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        let ignored = ignore_prefer_no_schedule && t.effect == Effect::PreferNoSchedule;
        !ignored && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, exists: bool, value: &str, effect: Option<Effect>) -> Toleration {
        Toleration {
            key: key.into(),
            exists,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn matching() {
        let gpu = Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule);
        assert!(tol("nvidia.com/gpu", false, "true", None).tolerates(&gpu));
        assert!(tol("nvidia.com/gpu", true, "", Some(Effect::NoSchedule)).tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", false, "false", None).tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", true, "", Some(Effect::NoExecute)).tolerates(&gpu));
        assert!(
            tol("", true, "", None).tolerates(&gpu),
            "empty key with Exists tolerates everything"
        );
        assert!(!tol("", false, "", None).tolerates(&gpu));
        let taints = [
            gpu.clone(),
            Taint::new("soft", "", Effect::PreferNoSchedule),
        ];
        assert_eq!(first_untolerated(&taints, &[], false), Some(&gpu));
        let t = [tol("nvidia.com/gpu", true, "", None)];
        assert_eq!(
            first_untolerated(&taints, &t, false).map(|t| t.key.as_str()),
            Some("soft")
        );
        assert_eq!(first_untolerated(&taints, &t, true), None);
    }
}
