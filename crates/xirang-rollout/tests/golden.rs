//! Golden files: the plan of the audit's fixture cluster (text and JSON), a synthetic
//! fleet's plan, and the audit log of a simulated rollout that halts.

use std::path::{Path, PathBuf};

use xirang_rollout::command::load_inventory;
use xirang_rollout::exec::render_log;
use xirang_rollout::fleet::SyntheticSpec;
use xirang_rollout::simulate::{Degradation, SimSpec, default_policy, simulate};
use xirang_rollout::{Policy, plan};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        let dst = to.join(e.file_name());
        if ty.is_dir() {
            copy_dir(&e.path(), &dst);
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The audit's fixture cluster plus this crate's fleet.toml, in a temporary directory.
fn fixture_inventory() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let inv = tmp.path().join("inv");
    copy_dir(&here().join("../xirang-audit/test_data/cluster"), &inv);
    std::fs::copy(here().join("test_data/fleet.toml"), inv.join("fleet.toml")).unwrap();
    (tmp, inv)
}

#[test]
fn fixture_cluster_plan() {
    let (_tmp, inv) = fixture_inventory();
    let inventory = load_inventory(&inv).unwrap();
    let policy = Policy::load(&here().join("test_data/policy.toml")).unwrap();
    let p = plan(&inventory.fleet, &policy);
    assert_eq!(p.upgrade_count(), 8);
    insta::assert_snapshot!("fixture_plan_text", p.render_text(&policy));
    insta::assert_json_snapshot!("fixture_plan_json", p);
}

#[test]
fn synthetic_fleet_plan() {
    let spec = SyntheticSpec {
        nodes: 48,
        rack_size: 8,
        nics_per_node: 2,
        ..SyntheticSpec::default()
    };
    let fleet = xirang_rollout::Fleet::synthetic(&spec, 3);
    let mut policy = default_policy(&SimSpec::default());
    policy.stages.fractions = vec![0.05, 0.25, 1.0];
    insta::assert_snapshot!("synthetic_plan_text", plan(&fleet, &policy).render_text(&policy));
}

#[test]
fn audit_log_of_a_halted_rollout() {
    let s = SimSpec {
        fleet: SyntheticSpec {
            nodes: 24,
            rack_size: 4,
            nics_per_node: 2,
            ..SyntheticSpec::default()
        },
        seed: 11,
        degrade_share: 0.0,
        degraded_nodes: vec!["n0006".into()],
        degradation: Degradation::Bandwidth { factor: 0.7 },
        ..SimSpec::default()
    };
    let mut policy = default_policy(&s);
    policy.stages.fractions = vec![0.1, 0.5, 1.0];
    let (_, r) = simulate(&s, &policy).unwrap();
    insta::assert_snapshot!("halted_rollout_log", render_log(&r.log, true));
}
