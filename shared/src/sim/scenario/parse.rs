//! Reading a scenario file: YAML to a [`Scenario`], durations, the objects
//! split by kind, and the validation of everything at once.

use super::*;

pub fn parse(yaml: &str) -> Result<Scenario, ScenarioError> {
    serde_norway::from_str(yaml).map_err(|e| ScenarioError::Parse(e.to_string()))
}

/// Go-style durations: `90s`, `5m`, `1h30m`, `1.5s`.
pub fn parse_duration(s: &str) -> Result<SignedDuration, ScenarioError> {
    let bad = || ScenarioError::Parse(format!("{s:?} is not a duration like 30s, 5m or 1h30m"));
    let mut total = 0.0f64;
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                'h' => 3600.0,
                'm' => 60.0,
                's' => 1.0,
                _ => return Err(bad()),
            }
        };
        total += num.parse::<f64>().map_err(|_| bad())? * unit;
        num.clear();
        any = true;
    }
    if !num.is_empty() || !any {
        return Err(bad());
    }
    // A scenario runs simulated time; a century is already more than any
    // scenario means (and far more digits would not fit a duration at all).
    const CENTURY_SECS: f64 = 100.0 * 365.25 * 86_400.0;
    if !(0.0..=CENTURY_SECS).contains(&total) {
        return Err(ScenarioError::Parse(format!(
            "{s:?} is longer than a century"
        )));
    }
    SignedDuration::try_from_secs_f64(total).map_err(|_| bad())
}

/// Configuration objects → the Store's items; workload objects → left over.
/// Every configuration object is validated, alone and as a set (names,
/// references), and every pod template's requests and limits parse; all
/// errors are returned at once.
pub fn split_objects(
    objects: &[serde_json::Value],
    now: Timestamp,
) -> Result<(Vec<ConfigItem>, Vec<serde_json::Value>), ScenarioError> {
    let (docs, workloads, errors) = read_objects(objects, "objects");
    let mut errors = errors;
    if let Err(e) = config::ConfigSet::from_documents(&docs) {
        errors.extend(e.iter().map(ToString::to_string));
    }
    if !errors.is_empty() {
        return Err(ScenarioError::Invalid(errors));
    }
    Ok((docs.iter().map(|d| d.to_item(1, now)).collect(), workloads))
}

/// Reads objects: configuration documents, workloads, and an error (as
/// text) for each object that does not read.
pub(super) fn read_objects(
    objects: &[serde_json::Value],
    at: &str,
) -> (Vec<ConfigDocument>, Vec<serde_json::Value>, Vec<String>) {
    let mut docs = Vec::new();
    let mut workloads = Vec::new();
    let mut errors = Vec::new();
    // The v1 PodTemplates CapacityBuffers name, by (namespace, name): a
    // buffer takes its template from those beside it, as `config apply` does.
    let is_template = |o: &serde_json::Value| {
        o.get("apiVersion").and_then(|v| v.as_str()) == Some("v1")
            && o.get("kind").and_then(|v| v.as_str()) == Some("PodTemplate")
    };
    let templates: BTreeMap<(String, String), serde_json::Value> = objects
        .iter()
        .filter(|o| is_template(o))
        .filter_map(|o| {
            let ns = o
                .pointer("/metadata/namespace")
                .and_then(|v| v.as_str())
                .unwrap_or("default");
            let name = o.pointer("/metadata/name").and_then(|v| v.as_str())?;
            Some(((ns.to_owned(), name.to_owned()), o.get("template")?.clone()))
        })
        .collect();
    for (i, o) in objects.iter().enumerate() {
        let api = o
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        if is_template(o) {
            continue;
        }
        if api.starts_with("autoscaling.x-k8s.io") {
            match config::document::from_value(o, i) {
                Ok(d) => docs.extend(d.into_iter().map(|mut d| {
                    if let ConfigDocument::CapacityBuffer { spec, .. } = &mut d
                        && spec.pod_template.is_none()
                        && let Some(r) = &spec.pod_template_ref
                    {
                        let ns = spec.namespace.clone().unwrap_or_else(|| "default".into());
                        spec.pod_template = templates.get(&(ns, r.name.clone())).cloned();
                    }
                    d
                })),
                Err(e) => errors.push(format!(
                    "{}",
                    ConfigError {
                        item: e.item.replacen("document", at, 1),
                        ..e
                    }
                )),
            }
        } else if api.starts_with("karpenter.") || api.starts_with("nodewright.io") {
            match config::document::from_value(o, i) {
                Ok(d) => docs.extend(d),
                Err(e) => errors.push(format!(
                    "{}",
                    ConfigError {
                        item: e.item.replacen("document", at, 1),
                        ..e
                    }
                )),
            }
        } else {
            errors.extend(
                workload_errors(o)
                    .into_iter()
                    .map(|e| format!("{at}[{i}]: {e}")),
            );
            workloads.push(o.clone());
        }
    }
    (docs, workloads, errors)
}

/// Malformed requests and limits in a workload's pod spec (`cpu: 1x`), each
/// as `<kind>/<name>: <field>: <reason>`.
pub fn workload_errors(o: &serde_json::Value) -> Vec<String> {
    let kind = o.get("kind").and_then(|v| v.as_str()).unwrap_or("object");
    let name = o
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    let (spec, path) = match kind {
        "Pod" => (o.pointer("/spec"), "spec"),
        _ => (o.pointer("/spec/template/spec"), "spec.template.spec"),
    };
    let mut errors = Vec::new();
    let Some(spec) = spec else { return errors };
    for list in ["initContainers", "containers"] {
        for (ci, c) in spec
            .get(list)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .enumerate()
        {
            for part in ["requests", "limits"] {
                let Some(map) = c
                    .pointer(&format!("/resources/{part}"))
                    .and_then(|v| v.as_object())
                else {
                    continue;
                };
                for (res, q) in map {
                    let text = match q {
                        serde_json::Value::String(t) => t.clone(),
                        other => other.to_string(),
                    };
                    if let Err(e) = resources::Resources::default().set(res, &text) {
                        errors.push(format!(
                            "{}/{name}: {path}.{list}[{ci}].resources.{part}.{res}: {e}",
                            kind.to_lowercase()
                        ));
                    }
                }
            }
        }
    }
    errors
}

/// Checks a whole scenario before it runs: its objects, and each `apply`
/// action's objects on top of what came before; every error at once.
pub fn validate(scenario: &Scenario) -> Result<(), ScenarioError> {
    let (mut docs, _, mut errors) = read_objects(&scenario.objects, "objects");
    let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut check = |docs: &[ConfigDocument], errors: &mut Vec<String>| {
        if let Err(e) = config::ConfigSet::from_documents(docs) {
            for e in e {
                let text = e.to_string();
                if seen.insert(text.clone()) {
                    errors.push(text);
                }
            }
        }
    };
    check(&docs, &mut errors);
    let run = parse_duration(&scenario.run).ok();
    for (ai, action) in scenario.actions.iter().enumerate() {
        match parse_duration(&action.at) {
            Err(e) => errors.push(format!("actions[{ai}].at: {e}")),
            Ok(at) if run.is_some_and(|r| at > r) => errors.push(format!(
                "actions[{ai}].at: {} is after the end of the run ({}): it would never happen",
                action.at, scenario.run
            )),
            Ok(_) => {}
        }
        if let ActionKind::Apply(objects) = &action.what {
            let (new, _, e) = read_objects(objects, &format!("actions[{ai}].apply"));
            errors.extend(e);
            // Later documents replace earlier ones of the same kind and name.
            docs.retain(|d| {
                !new.iter()
                    .any(|n| n.kind() == d.kind() && n.name() == d.name())
            });
            docs.extend(new);
            check(&docs, &mut errors);
        }
    }
    if let Err(e) = parse_duration(&scenario.run) {
        errors.push(format!("run: {e}"));
    }
    let windows = std::iter::once(("expect".to_owned(), &scenario.expect)).chain(
        scenario
            .actions
            .iter()
            .enumerate()
            .filter_map(|(ai, a)| match &a.what {
                ActionKind::Expect(e) => Some((format!("actions[{ai}].expect"), &**e)),
                _ => None,
            }),
    );
    for (field, expect) in windows {
        if let Some(PendingBound::Window(w)) = &expect.max_pending_seconds {
            for (name, value) in [("from", Some(&w.from)), ("until", w.until.as_ref())] {
                if let Some(Err(e)) = value.map(|v| parse_duration(v)) {
                    errors.push(format!("{field}.maxPendingSeconds.{name}: {e}"));
                }
            }
        }
    }
    errors.extend(scenario.spot_pools.errors(&scenario.region));
    for (i, r) in scenario.capacity_reservations.iter().enumerate() {
        if let Some(Err(e)) = r.ends_after.as_ref().map(|v| parse_duration(v)) {
            errors.push(format!("capacityReservations[{i}].endsAfter: {e}"));
        }
        if r.reservation_type == crate::cloud::ReservationType::CapacityBlock
            && r.ends_after.is_none()
        {
            errors.push(format!(
                "capacityReservations[{i}]: a capacity block needs endsAfter"
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ScenarioError::Invalid(errors))
    }
}
