//! Label selectors (`matchLabels` + `matchExpressions`) over pod labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sSelector;

use super::requirements::{Operator, Requirement, RequirementError};

/// A parsed label selector. An empty selector matches every pod; a missing
/// one (`None` where a selector is optional) matches none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    terms: Vec<(String, Requirement)>,
}

impl LabelSelector {
    pub fn from_k8s(s: &K8sSelector) -> Result<Self, RequirementError> {
        let mut terms = Vec::new();
        for (k, v) in s.match_labels.iter().flatten() {
            terms.push((k.clone(), Requirement::single(v.clone())));
        }
        for e in s.match_expressions.iter().flatten() {
            let op = Operator::parse(&e.operator)?;
            if !matches!(
                op,
                Operator::In | Operator::NotIn | Operator::Exists | Operator::DoesNotExist
            ) {
                return Err(RequirementError::UnknownOperator(e.operator.clone()));
            }
            let values = e.values.as_deref().unwrap_or(&[]);
            terms.push((e.key.clone(), Requirement::new(&e.key, op, values)?));
        }
        terms.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(LabelSelector { terms })
    }

    /// Selects pods whose labels equal all of these.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        LabelSelector {
            terms: labels
                .iter()
                .map(|(k, v)| (k.clone(), Requirement::single(v.clone())))
                .collect(),
        }
    }

    /// A label (key, value) every pod this selector matches carries, if
    /// there is one (a `matchLabels` entry or a one-value `In`): an index
    /// key, so a pod is checked only against selectors that can match it.
    pub fn required_label(&self) -> Option<(&str, &str)> {
        self.terms.iter().find_map(|(k, r)| {
            r.single_value()
                .filter(|_| !r.allows_absence())
                .map(|v| (k.as_str(), v))
        })
    }

    /// True for `{}`, which selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|(k, r)| match labels.get(k) {
            Some(v) => r.has(v),
            None => r.allows_absence(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn match_labels_and_expressions() {
        let sel = LabelSelector::from_k8s(&K8sSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["db".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        })
        .expect("valid");
        assert!(sel.matches(&labels(&[("app", "web")])));
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("canary", "1")])));
        assert!(!sel.matches(&labels(&[("app", "api")])));
        assert!(
            LabelSelector::from_k8s(&K8sSelector::default())
                .expect("empty")
                .matches(&labels(&[]))
        );
        assert_eq!(sel.required_label(), Some(("app", "web")));
        assert_eq!(
            LabelSelector::from_k8s(&K8sSelector::default())
                .expect("empty")
                .required_label(),
            None
        );
        let bad = K8sSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: Some(vec!["1".into()]),
            }]),
            ..Default::default()
        };
        assert!(LabelSelector::from_k8s(&bad).is_err());
    }
}
