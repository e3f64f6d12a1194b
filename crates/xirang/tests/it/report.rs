//! Snapshot tests of the human-readable reports (reviewed in `tests/it/snapshots/`; rerun
//! with `INSTA_UPDATE=always` and review the diff when a report changes on purpose).

use crate::util::run_expect;

#[test]
fn topo_show_table() {
    let (out, _) = run_expect(&["topo", "show", "scenarios/fat-tree-k8.toml"], 0);
    insta::assert_snapshot!(out);
}

#[test]
fn sim_summary_table() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = run_expect(
        &[
            "sim",
            "scenarios/incast-16to1.toml",
            "--quiet",
            "--out",
            dir.path().to_str().unwrap(),
        ],
        0,
    );
    // Wall-clock figures and the temporary directory change from run to run.
    let stable: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with("simulated ") && !l.starts_with("results in "))
        .collect();
    insta::assert_snapshot!(stable.join("\n"));
}
