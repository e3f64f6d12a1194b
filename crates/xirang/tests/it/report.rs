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

#[test]
fn host_show_tables_of_a_fixture_host() {
    let (out, _) = run_expect(
        &[
            "host",
            "show",
            "--root",
            "crates/xirang-audit/test_data/cluster/hosts/h1",
        ],
        0,
    );
    insta::assert_snapshot!(out);
}

#[test]
fn audit_report_of_the_procfs_fixture_host() {
    // The procfs capture as a one-host cluster: what an operator sees for a real tree
    // (its ports, counters and knobs as upstream captured them).
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::create_dir_all(&hosts).unwrap();
    std::os::unix::fs::symlink(
        crate::util::root().join("crates/xirang-host/test_data/sysfs/procfs"),
        hosts.join("procfs"),
    )
    .unwrap();
    // Exit 1: its mlx5_0 port reads `4: ACTIVE` as phys_state (a quirk of the capture).
    let (out, _) = run_expect(&["audit", "--hosts", hosts.to_str().unwrap()], 1);
    insta::assert_snapshot!(
        out.replace(&crate::util::root().join("").display().to_string(), "<root>/")
            .replace(hosts.to_str().unwrap(), "<hosts>")
    );
}
