//! Metrics as CloudWatch Embedded Metric Format lines: one JSON object per
//! line on stdout, which CloudWatch Logs turns into metrics with no API
//! call. Outside Lambda the same figures go to the debug log.

use std::collections::BTreeMap;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "nodewright";

/// One figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub value: f64,
    /// `Seconds`, `Count`, …
    pub unit: &'static str,
}

impl Metric {
    pub fn seconds(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            value,
            unit: "Seconds",
        }
    }

    pub fn count(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            value,
            unit: "Count",
        }
    }
}

/// The EMF document for `metrics` with `dimensions` (e.g. function, reason).
pub fn emf_line(
    timestamp_ms: i64,
    dimensions: &BTreeMap<&str, String>,
    metrics: &[Metric],
) -> String {
    let mut doc = serde_json::Map::new();
    let definitions: Vec<serde_json::Value> = metrics
        .iter()
        .map(|m| serde_json::json!({"Name": m.name, "Unit": m.unit}))
        .collect();
    doc.insert(
        "_aws".to_owned(),
        serde_json::json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions.keys().collect::<Vec<_>>()],
                "Metrics": definitions,
            }]
        }),
    );
    for (k, v) in dimensions {
        doc.insert((*k).to_owned(), serde_json::Value::String(v.clone()));
    }
    for m in metrics {
        doc.insert(m.name.to_owned(), serde_json::json!(m.value));
    }
    serde_json::Value::Object(doc).to_string()
}

/// Publishes `metrics`: an EMF line on stdout inside Lambda, a debug log elsewhere.
pub fn emit(timestamp_ms: i64, dimensions: &BTreeMap<&str, String>, metrics: &[Metric]) {
    if metrics.is_empty() {
        return;
    }
    let line = emf_line(timestamp_ms, dimensions, metrics);
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        println!("{line}");
    } else {
        tracing::debug!(metrics = %line, "metrics");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_and_carries_every_metric() {
        let dims: BTreeMap<&str, String> = [("Function", "interruption".to_owned())].into();
        let line = emf_line(
            1_700_000_000_000,
            &dims,
            &[
                Metric::seconds("TimeToTainted", 0.25),
                Metric::count("EvictionsBlocked", 3.0),
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][0],
            "Function"
        );
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Name"],
            "EvictionsBlocked"
        );
        assert_eq!(v["Function"], "interruption");
        assert_eq!(v["TimeToTainted"], 0.25);
        assert_eq!(v["EvictionsBlocked"], 3.0);
    }
}
