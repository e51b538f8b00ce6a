//! The layering test: no module of this crate imports one above it.
//!
//! The allowed order is written once, in `ARCHITECTURE.md` (the
//! `layering` block of "Layering"): layers lowest first, separated by `<`;
//! modules of one layer, separated by `,`, import neither each other nor
//! anything above. This test reads that block, then every
//! `shared/src/**.rs`, finds each `crate::<module>` path (in `use`
//! statements and inline) and fails naming the file, the line and the
//! import that runs upward. Comments are not read (a doc link is no
//! import), and neither is test code: a `#[cfg(test)]` module (inline, or
//! its own file) may use a higher layer's fixtures, as the disruption tests
//! use the simulated cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name → its layer (0 = lowest).
type Layers = BTreeMap<String, usize>;

/// The order in the `layering` block of a Markdown document.
fn parse_order(doc: &str) -> Result<Layers, String> {
    let mut lines = doc.lines().skip_while(|l| l.trim() != "```layering");
    if lines.next().is_none() {
        return Err("no ```layering block".to_owned());
    }
    let text: Vec<&str> = lines.take_while(|l| l.trim() != "```").collect();
    let mut layers = Layers::new();
    for (rank, layer) in text.join(" ").split('<').enumerate() {
        for module in layer.split(',').map(str::trim) {
            if module.is_empty() {
                return Err(format!("an empty name in layer {}", rank + 1));
            }
            if layers.insert(module.to_owned(), rank).is_some() {
                return Err(format!("{module} is listed twice"));
            }
        }
    }
    Ok(layers)
}

/// The crate module a file under `src/` belongs to (`provisioning/plan.rs`
/// → `provisioning`, `ports.rs` → `ports`); `None` for `lib.rs`.
fn module_of(rel: &str) -> Option<&str> {
    let first = rel.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then_some(name)
}

/// The files a `#[cfg(test)] mod name;` in `rel` brings in.
fn test_module_files(rel: &str, name: &str) -> [String; 2] {
    let dir = match rel.rsplit_once('/') {
        Some((dir, "mod.rs")) => dir.to_owned(),
        None if rel == "lib.rs" => String::new(),
        _ => rel.trim_end_matches(".rs").to_owned(),
    };
    let base = if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    };
    [format!("{base}.rs"), format!("{base}/mod.rs")]
}

/// The files `#[cfg(test)] mod x;` lines bring in: test code, not read.
fn test_files(files: &[(String, String)]) -> BTreeSet<String> {
    let mut skipped: BTreeSet<String> = BTreeSet::new();
    for (rel, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            if pair[0].trim() == "#[cfg(test)]"
                && let Some(name) = pair[1]
                    .trim()
                    .strip_prefix("mod ")
                    .and_then(|r| r.strip_suffix(';'))
            {
                skipped.extend(test_module_files(rel, name));
            }
        }
    }
    skipped
}

/// Every upward or sideways import in `files` (path under `src/`, text),
/// worded `file:line: …`; the files of `#[cfg(test)] mod x;` are skipped.
fn violations(layers: &Layers, files: &[(String, String)]) -> Vec<String> {
    let order = || {
        let mut by_rank: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for (m, r) in layers {
            by_rank.entry(*r).or_default().push(m);
        }
        by_rank
            .values()
            .map(|ms| ms.join(", "))
            .collect::<Vec<_>>()
            .join(" < ")
    };
    let skipped = test_files(files);
    let mut out = Vec::new();
    for (rel, text) in files {
        if skipped.contains(rel) {
            continue;
        }
        let Some(module) = module_of(rel) else {
            continue;
        };
        let Some(&rank) = layers.get(module) else {
            out.push(format!(
                "{rel}: module {module} is not in ARCHITECTURE.md's layering ({})",
                order()
            ));
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        // The closing line of the `#[cfg(test)]` module being skipped.
        let mut skip_until: Option<String> = None;
        for (i, line) in lines.iter().enumerate() {
            if let Some(end) = &skip_until {
                if line == end {
                    skip_until = None;
                }
                continue;
            }
            if line.trim() == "#[cfg(test)]"
                && let Some(next) = lines.get(i + 1)
                && next.trim_start().starts_with("mod ")
                && next.trim_end().ends_with('{')
            {
                let indent = &next[..next.len() - next.trim_start().len()];
                skip_until = Some(format!("{indent}}}"));
                continue;
            }
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("crate::") {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let target: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if target == module {
                    continue;
                }
                // Items of lib.rs itself (`crate::k8s`) belong to no layer.
                let Some(&to) = layers.get(&target) else {
                    continue;
                };
                if to >= rank {
                    let how = if to == rank { "beside" } else { "above" };
                    out.push(format!(
                        "{rel}:{}: {module} imports crate::{target}, which is {how} it in ARCHITECTURE.md's layering ({})",
                        i + 1,
                        order()
                    ));
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("src is readable")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            out.push((rel, text));
        }
    }
}

#[test]
fn no_module_imports_one_above_it_in_the_documented_order() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(manifest.join("../ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md beside the workspace manifest");
    let layers = parse_order(&doc).expect("ARCHITECTURE.md's layering block reads");
    let src = manifest.join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    assert!(files.len() > 100, "read {} files only", files.len());
    let found = violations(&layers, &files);
    assert!(found.is_empty(), "{}", found.join("\n"));
    // Every module of the crate is placed, and nothing placed is missing.
    let tests = test_files(&files);
    let modules: BTreeSet<&str> = files
        .iter()
        .filter(|(r, _)| !tests.contains(r))
        .filter_map(|(r, _)| module_of(r))
        .collect();
    let listed: BTreeSet<&str> = layers.keys().map(String::as_str).collect();
    assert_eq!(
        modules, listed,
        "ARCHITECTURE.md's layering lists exactly the crate's modules"
    );
}

fn order(text: &str) -> Layers {
    parse_order(&format!("# Layering\n```layering\n{text}\n```\n")).expect("an order")
}

fn file(rel: &str, text: &str) -> (String, String) {
    (rel.to_owned(), text.to_owned())
}

#[test]
fn an_upward_import_is_named_by_file_line_and_target() {
    let layers = order("model < packing, provisioning\n< handlers");
    let files = [
        file(
            "model/mod.rs",
            "//! A doc naming crate::handlers.\npub mod claim;\n",
        ),
        file(
            "model/claim.rs",
            "use std::fmt;\nuse crate::handlers::provisioner::Provisioner; // upward\n",
        ),
        file(
            "provisioning/plan.rs",
            "use crate::model::Claim;\nfn f() { crate::packing::solve(); }\n",
        ),
        file(
            "handlers/mod.rs",
            "use crate::provisioning::plan;\nuse crate::model::Claim;\n",
        ),
    ];
    let found = violations(&layers, &files);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("model/claim.rs:2: model imports crate::handlers, which is above it"),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with(
            "provisioning/plan.rs:2: provisioning imports crate::packing, which is beside it"
        ),
        "{}",
        found[1]
    );
    assert!(found[0].ends_with("(model < packing, provisioning < handlers)"));
}

#[test]
fn test_modules_are_not_read_but_the_code_after_them_is() {
    let layers = order("model < sim");
    let files = [
        file(
            "model/mod.rs",
            "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline {\n    use crate::sim::SimCluster;\n}\nuse crate::sim::Late;\n",
        ),
        file("model/tests.rs", "use crate::sim::cluster::SimCluster;\n"),
        file("sim/mod.rs", "use crate::model::Claim;\n"),
    ];
    let found = violations(&layers, &files);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("model/mod.rs:7: model imports crate::sim"),
        "{}",
        found[0]
    );
}

#[test]
fn a_module_missing_from_the_order_fails_and_a_bad_order_does_not_read() {
    let found = violations(&order("model"), &[file("ports.rs", "")]);
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("ports.rs: module ports is not in ARCHITECTURE.md's layering"));
    assert!(parse_order("no block here").is_err());
    assert!(parse_order("```layering\nmodel < model\n```").is_err());
    assert!(parse_order("```layering\nmodel < , sim\n```").is_err());
}
