//! The validation conformance corpus (`tests/conformance/config/`): every
//! case, translated from Karpenter's validation tests and CRD rules, fed to
//! the real CLI path (`nodewright config validate -f <case>`); any verdict,
//! field or warning that disagrees with the case's header fails, and so
//! does a backtrace or a "nothing was changed" from `validate`. The
//! README's table is checked against the files.
#![allow(clippy::expect_used)] // test code: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One case as its header describes it.
#[derive(Debug)]
struct Case {
    /// Relative to the corpus directory (`nodepool/…yaml`).
    file: String,
    area: String,
    valid: bool,
    karpenter_valid: bool,
    fields: Vec<String>,
    warnings: Vec<String>,
    difference: Option<String>,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/config")
}

fn verdict(v: &str, file: &str) -> bool {
    match v {
        "valid" => true,
        "invalid" => false,
        other => panic!("{file}: unknown verdict {other:?}"),
    }
}

/// `<item> <path>` → `<item>: <path>`, as errors print them.
fn printed(named: &str) -> String {
    match named.split_once(' ') {
        Some((item, path)) => format!("{item}: {path}"),
        None => named.to_owned(),
    }
}

fn read_case(root: &Path, path: &Path) -> Case {
    let file = path
        .strip_prefix(root)
        .expect("under the corpus")
        .to_string_lossy()
        .into_owned();
    let text = std::fs::read_to_string(path).expect("reads the case");
    let (mut expect, mut karpenter, mut difference) = (None, None, None);
    let (mut fields, mut warnings) = (Vec::new(), Vec::new());
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        let line = line.trim_start_matches('#').trim();
        if let Some(v) = line.strip_prefix("Expect:") {
            expect = Some(verdict(v.trim(), &file));
        } else if let Some(v) = line.strip_prefix("Karpenter:") {
            karpenter = Some(verdict(v.trim(), &file));
        } else if let Some(f) = line.strip_prefix("Field:") {
            fields.push(printed(f.trim()));
        } else if let Some(w) = line.strip_prefix("Warning:") {
            warnings.push(printed(w.trim()));
        } else if let Some(d) = line.strip_prefix("Difference:") {
            difference = Some(d.trim().to_owned());
        }
    }
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.starts_with("# Source: ")),
        "{file}: the header starts with its source"
    );
    let valid = expect.unwrap_or_else(|| panic!("{file}: no Expect: line"));
    let karpenter_valid = karpenter.unwrap_or_else(|| panic!("{file}: no Karpenter: line"));
    assert_eq!(
        valid != karpenter_valid,
        difference.is_some(),
        "{file}: a verdict other than Karpenter's is a Difference: with its reason, and only then"
    );
    assert!(
        valid || !fields.is_empty(),
        "{file}: an invalid case names the field(s) it must be refused for"
    );
    Case {
        area: file.split('/').next().unwrap_or_default().to_owned(),
        file,
        valid,
        karpenter_valid,
        fields,
        warnings,
        difference,
    }
}

fn cases() -> Vec<(PathBuf, Case)> {
    let root = corpus();
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("reads the corpus directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let case = read_case(&root, &path);
                out.push((path, case));
            }
        }
    }
    out.sort_by(|a, b| a.1.file.cmp(&b.1.file));
    out
}

/// What disagrees with the case (nothing: `None`).
fn check(path: &Path, case: &Case) -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["config", "validate", "-f"])
        .arg(path)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("runs the nodewright binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut wrong = Vec::new();
    if out.status.success() != case.valid {
        wrong.push(format!(
            "expected {}, got {}",
            if case.valid { "valid" } else { "invalid" },
            if out.status.success() {
                "valid"
            } else {
                "invalid"
            }
        ));
    }
    for f in &case.fields {
        if !stderr.contains(f.as_str()) {
            wrong.push(format!("no error names {f}"));
        }
    }
    for w in &case.warnings {
        let warned = stderr
            .lines()
            .any(|l| l.starts_with("warning: ") && l.contains(w.as_str()));
        if !warned {
            wrong.push(format!("no warning names {w}"));
        }
    }
    if stderr.to_ascii_lowercase().contains("backtrace") {
        wrong.push("a backtrace was printed".into());
    }
    if stderr.contains("nothing was changed") || stdout.contains("nothing was changed") {
        wrong.push("validate said \"nothing was changed\" (it never writes)".into());
    }
    if wrong.is_empty() {
        None
    } else {
        Some(format!(
            "{}: {}\n--- stderr ---\n{stderr}",
            case.file,
            wrong.join("; ")
        ))
    }
}

#[test]
fn every_case_agrees_with_karpenter_or_is_a_listed_difference() {
    let cases = cases();
    assert!(
        cases.len() > 400,
        "the corpus is there ({} cases)",
        cases.len()
    );
    // Two threads: the machine's cores; each case is one process.
    let half = cases.len().div_ceil(2);
    let failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = cases
            .chunks(half)
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|(p, c)| check(p, c))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn the_readme_table_counts_the_cases() {
    let cases = cases();
    let readme = std::fs::read_to_string(corpus().join("README.md")).expect("reads the README");
    let mut counts: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    for (_, c) in &cases {
        let row = counts.entry(c.area.as_str()).or_default();
        row[0] += 1;
        row[if c.valid { 1 } else { 2 }] += 1;
        row[3] += usize::from(c.difference.is_some());
    }
    let total = counts.values().fold([0; 4], |mut t, r| {
        for i in 0..4 {
            t[i] += r[i];
        }
        t
    });
    for (area, row) in counts
        .iter()
        .map(|(a, r)| (*a, *r))
        .chain([("total", total)])
    {
        let line = format!(
            "| {area} | {} | {} | {} | {} |",
            row[0], row[1], row[2], row[3]
        );
        assert!(
            readme.contains(&line),
            "README.md's table has no row `{line}`"
        );
    }
    for (_, c) in cases.iter().filter(|(_, c)| c.difference.is_some()) {
        assert!(
            readme.contains(&c.file),
            "README.md lists the deliberate difference {}",
            c.file
        );
        assert_ne!(c.valid, c.karpenter_valid);
    }
}
