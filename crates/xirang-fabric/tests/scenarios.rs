//! Data-driven scenario tests: every file under `test_data/scenarios/err` must fail with
//! exactly the text in its `.err` twin; every file under `test_data/scenarios/ok` and every
//! shipped scenario must load and survive a serialize/parse round trip.
//!
//! Set `UPDATE_EXPECT=1` to (re)write the `.err` files, then review the diff.

use std::path::{Path, PathBuf};

use xirang_fabric::scenario::{Scenario, ScenarioError};
use xirang_fabric::topology::TopologySpec;

fn files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    v
}

/// The only code that calls the loader for error cases.
fn check_err(path: &Path) {
    let got = match Scenario::load(path) {
        Ok(_) => panic!("{}: expected an error, the scenario loaded", path.display()),
        Err(e @ ScenarioError::Invalid { .. }) => e.to_string(),
        Err(e) => panic!("{}: expected a validation error, got {e}", path.display()),
    };
    let expect_path = path.with_extension("err");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&expect_path, format!("{got}\n")).unwrap();
        return;
    }
    let expect = std::fs::read_to_string(&expect_path)
        .unwrap_or_else(|_| panic!("{} is missing (run with UPDATE_EXPECT=1)", expect_path.display()));
    assert_eq!(
        expect.trim_end(),
        got,
        "\n--- expected ({})\n{}\n--- got\n{}\n",
        expect_path.display(),
        expect.trim_end(),
        got
    );
}

#[test]
fn malformed_scenarios_fail_with_exact_messages() {
    let cases = files("test_data/scenarios/err");
    assert!(
        cases.len() >= 12,
        "at least 12 malformed scenarios, found {}",
        cases.len()
    );
    for c in cases {
        check_err(&c);
    }
}

fn round_trip(path: &Path) {
    let loaded = Scenario::load(path).unwrap_or_else(|e| panic!("{e}"));
    let text = loaded.scenario.to_toml();
    let again = Scenario::parse(&text, path)
        .unwrap_or_else(|e| panic!("re-parse of {}:\n{e}\n{text}", path.display()));
    assert_eq!(
        loaded.scenario,
        again,
        "{}: serialize/parse changed the model",
        path.display()
    );

    // The generated fabric written as an explicit list builds the same fabric.
    let mut explicit = loaded.scenario.clone();
    explicit.topology = TopologySpec::Explicit(loaded.fabric.to_explicit());
    explicit.overrides = xirang_fabric::scenario::mtu_overrides(&loaded.fabric, &explicit.config);
    let text = explicit.to_toml();
    let parsed = Scenario::parse(&text, path).unwrap_or_else(|e| panic!("{e}"));
    let base = path.parent().unwrap();
    let rebuilt = parsed
        .build(path, base, Some(&text))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.fabric,
        rebuilt.fabric,
        "{}: explicit form builds a different fabric",
        path.display()
    );
}

#[test]
fn valid_scenarios_round_trip() {
    let mut all = files("test_data/scenarios/ok");
    all.extend(files("../../scenarios"));
    assert!(all.len() >= 5);
    for p in all {
        round_trip(&p);
    }
}

#[test]
fn explicit_example_has_what_it_says() {
    let l = Scenario::load(Path::new("test_data/scenarios/ok/0001_explicit_two_hosts.toml")).unwrap();
    let f = &l.fabric;
    assert_eq!((f.hosts.len(), f.switches.len(), f.links.len()), (2, 1, 2));
    // `tor0` (no port) took the first free port, `tor0:3` port 3.
    assert_eq!(f.links[0].b.port, 0);
    assert_eq!(f.links[1].b.port, 3);
    assert_eq!(f.links[1].delay_ns, 500);
    let b = f.nic_by_name("b", "mlx5_0").unwrap();
    assert_eq!(f.nics[b.index()].ports[0].mtu_bytes, 1500);
    assert!(
        f.nics[f.nic_by_name("a", "mlx5_0").unwrap().index()]
            .pcie
            .is_downgraded()
    );
    let s = xirang_fabric::analysis::summarize(f);
    // b's GPU sits on socket 0 and its NIC on socket 1.
    assert_eq!((s.pcie.gpus_with_pix_nic, s.pcie.gpus_with_sys_nic_only), (1, 1));
    assert_eq!(s.sample_pair.unwrap().path_mtu_bytes, 1500);
}

/// Every shipped scenario is named after its file: results land in `out/<name>` and
/// benchmarks print the name, so a copied file that keeps its template's name would
/// overwrite or mislabel another scenario's figures.
#[test]
fn shipped_scenarios_are_named_after_their_files() {
    let mut all = files("../../scenarios");
    all.extend(files("../../scenarios/reference"));
    for p in all {
        let s = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}")).scenario;
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        assert_eq!(s.name, stem, "{}", p.display());
    }
}
