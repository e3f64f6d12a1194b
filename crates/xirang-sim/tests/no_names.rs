//! The simulator takes the built model (`xirang_fabric::built::Model`): every name a
//! scenario holds is resolved by `Scenario::build`, so no source file of the simulator
//! uses the scenario file type or a lookup by name (issue 41, "one model from scenario to
//! simulator"). The crate's entry point (`lib.rs`) takes a `Loaded` and its docs show
//! loading a scenario; the engine's own unit tests load scenarios to build one.

use std::path::{Path, PathBuf};

/// What a run would use to look a name up, or the scenario file type itself.
const FORBIDDEN: [&str; 7] = [
    "Scenario::",
    "scenario.workloads",
    "resolve_endpoint",
    "by_name",
    "parse_port_ref",
    "hosts_named",
    "of_fabric(",
];

/// Files allowed to load a scenario: the entry point's documentation and the engine's
/// unit tests.
const ALLOWED: [&str; 2] = ["lib.rs", "engine/tests.rs"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_simulator_looks_up_no_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 20, "found the sources ({} files)", files.len());
    let mut found = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if ALLOWED.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("readable source");
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for w in FORBIDDEN {
                if line.contains(w) {
                    found.push(format!("{rel}:{}: `{w}` in {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "name lookups in the simulator:\n{}",
        found.join("\n")
    );
}

/// A run simulates the built workloads: editing the scenario's workloads after the build
/// would run the old ones silently, so debug builds refuse it.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "edited after the build")]
fn a_scenario_edited_after_the_build_is_refused() {
    let text = r#"
[topology.leaf_spine]
leaves = 1
spines = 1
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 500

[workloads.one.flows]
list = [{ src = "h0", dst = "h1", bytes = 1000 }]
"#;
    let path = Path::new("edited.toml");
    let mut loaded = xirang_fabric::scenario::Scenario::parse(text, path)
        .and_then(|s| s.build(path, Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}"));
    if let Some(xirang_fabric::workload::Workload::Flows(f)) = loaded.scenario.workloads.get_mut("one") {
        f.list[0].bytes = 2000;
    }
    let opts = xirang_sim::options(&loaded);
    xirang_sim::simulate(&loaded, &opts, &mut |_| {});
}
