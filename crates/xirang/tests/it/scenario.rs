//! `xirang scenario`.

use crate::util::{root, run_expect, run_json};

#[test]
fn shipped_scenarios_check_clean() {
    for f in [
        "default",
        "incast-16to1",
        "fat-tree-k8",
        "rail-64gpu",
        "rail-1024gpu",
        "rail-8192gpu",
        "rail-16384gpu",
    ] {
        let (out, _) = run_expect(&["scenario", "check", &format!("scenarios/{f}.toml")], 0);
        assert!(out.ends_with(": ok\n"), "{out}");
    }
}

/// The shipped large-cluster scenarios build the fabrics their headers describe, as the
/// reference architecture's table has them (docs/large-fabrics.md).
#[test]
fn shipped_superpod_scenarios_build_the_published_fabrics() {
    for (f, leaves, spines, cores) in [
        ("rail-1024gpu", 32, 16, None),
        ("rail-8192gpu", 256, 256, Some(128)),
        ("rail-16384gpu", 512, 512, Some(256)),
    ] {
        let v = run_json(&["topo", "show", &format!("scenarios/{f}.toml"), "--json"]);
        let count = |tier: &str| {
            v["tiers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["tier"] == tier)
                .map(|t| t["switches"].as_u64().unwrap())
        };
        assert_eq!(count("leaf"), Some(leaves), "{f}: {v}");
        assert_eq!(count("spine"), Some(spines), "{f}");
        assert_eq!(count("core"), cores, "{f}");
        assert_eq!(v["connected"], true, "{f}");
    }
}

#[test]
fn invalid_scenario_exits_1_with_located_error() {
    let ps = "crates/xirang/tests/data/negative-hosts.toml";
    let (_, err) = run_expect(&["scenario", "check", ps], 1);
    assert_eq!(
        err,
        format!("{ps}:4: topology.leaf_spine.hosts_per_leaf: expected an integer >= 1, found -3\n")
    );
    let v: serde_json::Value = {
        let (out, _) = run_expect(&["scenario", "check", ps, "--json"], 1);
        serde_json::from_str(&out).unwrap()
    };
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["path"], "topology.leaf_spine.hosts_per_leaf");
    assert_eq!(v["errors"][0]["line"], 4);
}

#[test]
fn missing_file_is_a_failure_not_a_panic() {
    let (_, err) = run_expect(&["topo", "show", "scenarios/nope.toml"], 1);
    assert!(
        err.starts_with("error: scenarios/nope.toml: cannot read:"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2() {
    run_expect(&["topo", "frobnicate"], 2);
    run_expect(&[], 2);
}

#[test]
fn expanded_scenario_is_an_equivalent_explicit_scenario() {
    let (text, _) = run_expect(&["scenario", "expand", "scenarios/incast-16to1.toml"], 0);
    assert!(text.contains("[topology.explicit]") || text.contains("[[topology.explicit.hosts]]"));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("expanded.toml");
    std::fs::write(&p, &text).unwrap();
    let a = run_json(&["topo", "show", p.to_str().unwrap(), "--json"]);
    let b = run_json(&[
        "topo",
        "show",
        root().join("scenarios/incast-16to1.toml").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(a, b);
}
