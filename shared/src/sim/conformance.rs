//! The conformance runner: every case under `tests/conformance/<area>/`
//! (scenario files translated from Karpenter's own tests, one per `It`)
//! runs on the in-memory adapters, several at a time; a case that fails
//! fails the test, and so does a case marked as a known failure that
//! passes (its marker must go: the defect is fixed).
//!
//! A case is a known failure when its header has a line
//! `# Known failure: <the defect>`; the area's README lists it with the
//! same reason.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::scenario::{self, Scenario};
use super::{MemStore, SimClock, SimCloud, Simulation, catalog};

/// The marker of a case expected to fail.
pub const KNOWN_FAILURE: &str = "# Known failure:";

/// What one case did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    /// Unmet expectations, or why the case could not run.
    pub failures: Vec<String>,
    /// The defect the case documents, when it is marked as failing.
    pub known_failure: Option<String>,
}

impl Outcome {
    /// The case behaved as its marker says.
    pub fn as_expected(&self) -> bool {
        self.failures.is_empty() == self.known_failure.is_none()
    }
}

/// The `# Known failure:` reason in a case's header comment.
pub fn known_failure(text: &str) -> Option<String> {
    text.lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .find_map(|l| l.strip_prefix(KNOWN_FAILURE))
        .map(|r| r.trim().to_owned())
}

/// Runs one case's text on the in-memory adapters: its unmet expectations.
pub fn run_text(text: &str) -> Vec<String> {
    let scenario: Scenario = match scenario::parse(text) {
        Ok(s) => s,
        Err(e) => return vec![e.to_string()],
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(r) => r,
        Err(e) => return vec![format!("runtime: {e}")],
    };
    runtime.block_on(async {
        let catalog = match catalog::catalog(&scenario.region) {
            Ok(c) => c,
            Err(e) => return vec![e.to_string()],
        };
        let clock = SimClock::default();
        let cloud = SimCloud::new(catalog, clock.clone());
        let mut sim = Simulation::new(
            clock,
            cloud.clone(),
            Some(cloud),
            MemStore::new(),
            Default::default(),
        );
        if let Err(e) = scenario::load(&mut sim, &scenario).await {
            return vec![e.to_string()];
        }
        if let Err(e) = scenario::run(&mut sim, &scenario).await {
            return vec![e.to_string()];
        }
        scenario::check(&sim, &scenario.expect).await
    })
}

/// The case files of a directory (`*.yaml`), sorted.
pub fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Runs every case of `dir` on `threads` threads.
pub fn run_dir(dir: &Path, threads: usize) -> Vec<Outcome> {
    let mut files = cases(dir);
    // While working on a few cases: only those whose name contains this.
    if let Ok(only) = std::env::var("NODEWRIGHT_CONFORMANCE_ONLY") {
        files.retain(|f| f.to_string_lossy().contains(&only));
    }
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(i) else { break };
                    let name = path
                        .file_stem()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let (failures, known) = match std::fs::read_to_string(path) {
                        Ok(text) => (run_text(&text), known_failure(&text)),
                        Err(e) => (vec![format!("{}: {e}", path.display())], None),
                    };
                    out.lock().unwrap_or_else(|e| e.into_inner()).push(Outcome {
                        name,
                        failures,
                        known_failure: known,
                    });
                }
            });
        }
    });
    let mut outcomes = out.into_inner().unwrap_or_else(|e| e.into_inner());
    outcomes.sort_by(|a, b| a.name.cmp(&b.name));
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/conformance")
            .join(name)
    }

    /// Every case of `name` behaves as its header says; the README lists
    /// every case, and every known failure with its reason.
    fn area_cases_pass_or_fail_as_marked(name: &str) {
        let dir = area(name);
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let outcomes = run_dir(&dir, threads);
        assert!(!outcomes.is_empty(), "no case under {}", dir.display());
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
        let mut problems = Vec::new();
        for o in &outcomes {
            if !o.as_expected() {
                problems.push(match &o.known_failure {
                    None => format!("{} fails:\n    {}", o.name, o.failures.join("\n    ")),
                    Some(why) => format!(
                        "{} passes but is marked as a known failure ({why}): remove the marker and update the README",
                        o.name
                    ),
                });
            }
            if !readme.contains(&format!("`{}`", o.name)) {
                problems.push(format!("{} is not in the README's table", o.name));
            }
        }
        let failing = outcomes
            .iter()
            .filter(|o| o.known_failure.is_some())
            .count();
        eprintln!(
            "conformance/{name}: {} case(s), {} passing, {failing} known failure(s)",
            outcomes.len(),
            outcomes.len() - failing
        );
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn scheduling_cases_pass_or_fail_as_marked() {
        area_cases_pass_or_fail_as_marked("scheduling");
    }

    #[test]
    fn disruption_cases_pass_or_fail_as_marked() {
        area_cases_pass_or_fail_as_marked("disruption");
    }

    #[test]
    fn the_marker_is_read_from_the_header_only() {
        assert_eq!(
            known_failure("# Source: x\n# Known failure: labels are missing\nname: a\n"),
            Some("labels are missing".to_owned())
        );
        assert_eq!(
            known_failure("# Source: x\nname: a\n# Known failure: too late\n"),
            None
        );
    }
}
