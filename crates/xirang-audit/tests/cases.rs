//! Every rule on the fixture cluster (test_data/cluster, derived from real captures by
//! make_cluster.py): the healthy cluster has no findings (each rule's negative case), and
//! each case of test_data/cases.toml (each rule's positive case, plus the six planted
//! faults) gives exactly the findings it lists.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use xirang_audit::{Cluster, Severity, as_scenario, audit};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data");

#[derive(Deserialize)]
struct Cases {
    case: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    #[serde(default)]
    write: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    remove: Vec<String>,
    #[serde(default)]
    json: Vec<(String, String, String)>,
    #[serde(default)]
    json_remove: Vec<(String, String)>,
    #[serde(default)]
    replace: Vec<(String, String, String)>,
    #[serde(default)]
    create: std::collections::BTreeMap<String, String>,
    /// [path under the cluster, a real capture under crates/]: the capture appended to the
    /// file (created if absent), so captures are used as they are, not retyped.
    #[serde(default)]
    append: Vec<(String, String)>,
    #[serde(default)]
    policy: Option<String>,
    /// [host directory under hosts/, a host tree under crates/]: the host replaced by
    /// that tree (applied first), for hosts the fixture cluster has no example of.
    #[serde(default)]
    host_tree: Vec<(String, String)>,
    expect: Vec<(String, String)>,
    #[serde(default)]
    severity: Vec<String>,
}

/// Copies a tree, keeping symlinks as symlinks; files are hard links (cheap), so every
/// edit below removes a file before writing it.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        let dst = to.join(e.file_name());
        if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dst).unwrap();
        } else if t.is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::hard_link(e.path(), &dst).unwrap();
        }
    }
}

fn load(root: &Path) -> Cluster {
    Cluster::load(
        Some(&root.join("hosts")),
        Some(&root.join("switches")),
        Some(&root.join("topology.toml")),
        Some(&root.join("policy.toml")),
    )
    .unwrap()
}

fn apply(root: &Path, case: &Case) {
    for (host, tree) in &case.host_tree {
        let dir = root.join("hosts").join(host);
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("case `{}`: {host}: {e}", case.name));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(tree);
        assert!(src.is_dir(), "case `{}`: no tree {}", case.name, src.display());
        copy_tree(&src, &dir);
    }
    for (path, text) in &case.write {
        let p = root.join(path);
        assert!(
            p.exists(),
            "case `{}` writes {path}, which the healthy cluster does not have",
            case.name
        );
        std::fs::remove_file(&p).unwrap();
        std::fs::write(p, text).unwrap();
    }
    for (path, text) in &case.create {
        let p = root.join(path);
        assert!(
            !p.exists(),
            "case `{}` creates {path}, which already exists",
            case.name
        );
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    for (path, capture) in &case.append {
        let p = root.join(path);
        let mut text = std::fs::read_to_string(&p).unwrap_or_default();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(capture);
        text.push_str(
            &std::fs::read_to_string(&src)
                .unwrap_or_else(|e| panic!("case `{}`: {}: {e}", case.name, src.display())),
        );
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, text).unwrap();
    }
    for (path, from, to) in &case.replace {
        let p = root.join(path);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains(from.as_str()),
            "case `{}`: `{from}` not in {path}",
            case.name
        );
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, text.replacen(from.as_str(), to, 1)).unwrap();
    }
    for path in &case.remove {
        let p = root.join(path);
        assert!(
            p.exists(),
            "case `{}` removes {path}, which does not exist",
            case.name
        );
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
    let edits = case
        .json
        .iter()
        .map(|(f, p, v)| (f, p, Some(v)))
        .chain(case.json_remove.iter().map(|(f, p)| (f, p, None)));
    for (file, pointer, value) in edits {
        let p = root.join(file);
        let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let key = key.replace("~1", "/").replace("~0", "~");
        let obj = doc
            .pointer_mut(parent)
            .and_then(|v| v.as_object_mut())
            .unwrap_or_else(|| panic!("case `{}`: no object at {parent}", case.name));
        match value {
            Some(v) => {
                assert!(
                    obj.contains_key(&key),
                    "case `{}`: {pointer} does not exist",
                    case.name
                );
                obj.insert(key, serde_json::Value::String(v.clone()));
            }
            None => {
                assert!(
                    obj.remove(&key).is_some(),
                    "case `{}`: {pointer} does not exist",
                    case.name
                );
            }
        }
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    }
    if let Some(policy) = &case.policy {
        std::fs::remove_file(root.join("policy.toml")).unwrap();
        std::fs::write(root.join("policy.toml"), policy).unwrap();
    }
}

fn cases() -> Cases {
    let text = std::fs::read_to_string(Path::new(DATA).join("cases.toml")).unwrap();
    toml::from_str(&text).unwrap_or_else(|e| panic!("cases.toml: {}", e.message()))
}

#[test]
fn healthy_cluster_has_no_findings() {
    let c = load(&PathBuf::from(DATA).join("cluster"));
    assert_eq!((c.hosts.len(), c.switches.len()), (8, 2));
    let f = audit(&c);
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn every_case_gives_exactly_its_findings() {
    let cases = cases();
    let mut rules_hit = std::collections::BTreeSet::new();
    for case in &cases.case {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cluster");
        copy_tree(&Path::new(DATA).join("cluster"), &root);
        apply(&root, case);
        let findings = audit(&load(&root));
        let mut got: Vec<(String, String)> = findings
            .iter()
            .map(|f| (f.rule.to_string(), f.entity.clone()))
            .collect();
        let mut want = case.expect.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "case `{}`: {findings:#?}", case.name);
        for (f, sev) in findings.iter().zip(&case.severity) {
            let s = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "info",
            };
            assert_eq!(s, sev, "case `{}`", case.name);
        }
        for f in &findings {
            assert!(
                !f.fix.is_empty() && !f.message.is_empty(),
                "case `{}`: {f:?}",
                case.name
            );
            assert!(
                f.rule == "PHY-NIC-MISSING" || !f.evidence.is_empty(),
                "case `{}`: no evidence in {f:?}",
                case.name
            );
            rules_hit.insert(f.rule);
        }
    }
    // Every rule has its positive case.
    let all: std::collections::BTreeSet<&str> = xirang_audit::rules::RULES.iter().map(|r| r.id).collect();
    let missing: Vec<_> = all.difference(&rules_hit).collect();
    assert!(missing.is_empty(), "rules without a positive case: {missing:?}");
    let unlisted: Vec<_> = rules_hit.difference(&all).collect();
    assert!(
        unlisted.is_empty(),
        "findings of rules missing from RULES: {unlisted:?}"
    );
}

#[test]
fn planted_faults_span_every_layer() {
    let cases = cases();
    let planted = cases.case.iter().find(|c| c.name.starts_with("planted")).unwrap();
    assert_eq!(planted.expect.len(), 6);
    let layers: std::collections::BTreeSet<_> = planted
        .expect
        .iter()
        .map(|(rule, _)| {
            xirang_audit::rules::RULES
                .iter()
                .find(|r| r.id == rule)
                .unwrap()
                .layer
        })
        .collect();
    assert_eq!(layers.len(), 4, "{layers:?}");
}

#[test]
fn snapshots_audit_like_directories() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cluster");
    copy_tree(&Path::new(DATA).join("cluster"), &root);
    // Replace every host directory by its snapshot.
    for h in 1..=8 {
        let d = root.join(format!("hosts/h{h}"));
        let (tree, _) = xirang_host::snapshot::capture(&d, false);
        xirang_host::snapshot::write_archive(&tree, &root.join(format!("hosts/h{h}.tar.gz"))).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
    std::fs::write(root.join("hosts/h5-broken.tar.gz"), b"\x1f\x8b garbage").unwrap();
    let c = load(&root);
    assert_eq!(c.hosts.len(), 8);
    let f = audit(&c);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0].rule, f[0].severity), ("INPUT-UNREADABLE", Severity::Error));
    assert!(f[0].entity.ends_with("h5-broken.tar.gz"));
}

#[test]
fn bad_switch_file_and_bad_topology() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cluster");
    copy_tree(&Path::new(DATA).join("cluster"), &root);
    std::fs::write(
        root.join("switches/leaf3.json"),
        "{\"PORT\": {\"Ethernet0\": {\"mtu\": \"big\"}}}",
    )
    .unwrap();
    let f = audit(&load(&root));
    assert_eq!(f.len(), 1);
    assert!(f[0].message.contains("PORT|Ethernet0.mtu"), "{}", f[0].message);
    // A cable to a switch that is not there is an input error naming the file and link.
    let topo = root.join("topology.toml");
    std::fs::remove_file(root.join("switches/leaf3.json")).unwrap();
    let text =
        std::fs::read_to_string(&topo)
            .unwrap()
            .replacen("switch = \"leaf1\"", "switch = \"leaf9\"", 1);
    std::fs::remove_file(&topo).unwrap();
    std::fs::write(&topo, text).unwrap();
    let e = Cluster::load(
        Some(&root.join("hosts")),
        Some(&root.join("switches")),
        Some(&topo),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("topology.toml: link 1: switch `leaf9`"), "{e}");
    std::fs::write(&topo, "[[link]]\nhost = 3\n").unwrap();
    let e = Cluster::load(None, None, Some(&topo), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("topology.toml:2: link[0].host: expected a string, found 3"),
        "{e}"
    );
}

#[test]
fn inventory_converts_into_a_loadable_fabric() {
    let c = load(&PathBuf::from(DATA).join("cluster"));
    let (topo, text) = as_scenario::to_scenario(&c, "fixture-cluster");
    assert_eq!(
        (topo.hosts.len(), topo.switches.len(), topo.links.len()),
        (8, 2, 17)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audited.toml");
    std::fs::write(&file, &text).unwrap();
    let loaded = xirang_fabric::scenario::Scenario::load(&file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let fab = &loaded.fabric;
    assert_eq!(
        (
            fab.hosts.len(),
            fab.nics.len(),
            fab.gpus.len(),
            fab.switches.len(),
            fab.links.len()
        ),
        (8, 16, 16, 2, 17)
    );
    // Each host keeps its two PCIe switches on two sockets, and its MTUs.
    assert!(
        fab.hosts
            .iter()
            .all(|h| h.sockets == 2 && h.pcie_switches.len() == 2)
    );
    assert!(
        fab.nics
            .iter()
            .all(|n| n.ports[0].mtu_bytes == 9000 && n.firmware == "22.38.1002")
    );
    assert!(
        fab.switches
            .iter()
            .all(|s| s.ports.iter().all(|p| p.mtu_bytes == 9100))
    );
    // The knobs stay out of the written scenario (the tuner searches the classes'); as
    // overrides on top of it they are the hosts' and switches' own: MLNX_OFED's DCQCN
    // with its first-CNP rate and clamp, on the RoCE priority 3 only; the leaves'
    // AZURE_LOSSLESS WRED profile on the cabled ports' queue 3.
    assert!(fab.nics.iter().all(|n| n.congestion.is_none()));
    let mut with_knobs = xirang_fabric::scenario::Scenario::parse(&text, &file).unwrap();
    with_knobs.overrides.extend(as_scenario::knob_overrides(&c));
    let loaded = with_knobs
        .build(&file, dir.path(), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let fab = &loaded.fabric;
    for n in &fab.nics {
        let c = n.congestion.as_ref().expect("every NIC shows its ecn/ knobs");
        assert_eq!(
            (c.rp_priorities.as_slice(), c.np_priorities.as_slice()),
            (&[3][..], &[3][..])
        );
        assert_eq!(c.dcqcn.rate_to_set_on_first_cnp_mbps, 10.0);
        assert!(c.dcqcn.clamp_tgt_rate);
        assert_eq!(c.dcqcn.rpg_byte_reset_bytes, 32767 * 64);
        let mut d = c.dcqcn;
        d.rate_to_set_on_first_cnp_mbps = 0.0;
        d.clamp_tgt_rate = false;
        assert_eq!(
            d,
            xirang_fabric::config::DcqcnParams::default(),
            "the rest at the defaults"
        );
    }
    let leaf1 = &fab.switches[fab.switch_by_name("leaf1").unwrap().index()];
    let red = leaf1.ports[0].ecn.expect("a cabled port's profile");
    assert!(red.enabled);
    assert_eq!(
        (red.kmin_bytes, red.kmax_bytes, red.pmax),
        (2_000_000, 10_000_000, 0.05)
    );
}

/// A RoCE LAG host becomes one NIC with a port per bond member in the fabric model, each
/// port cabled where the member is.
#[test]
fn a_roce_lag_host_converts_into_a_bonded_nic() {
    let cases = cases();
    let case = cases
        .case
        .iter()
        .find(|c| c.name == "RoCE LAG host, healthy")
        .expect("the case exists");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cluster");
    copy_tree(&Path::new(DATA).join("cluster"), &root);
    apply(&root, case);
    let (_, text) = as_scenario::to_scenario(&load(&root), "lag-cluster");
    let file = dir.path().join("audited.toml");
    std::fs::write(&file, &text).unwrap();
    let loaded = xirang_fabric::scenario::Scenario::load(&file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let fab = &loaded.fabric;
    let h1 = fab.host_by_name("h1").unwrap();
    let nics = &fab.hosts[h1.index()].nics;
    assert_eq!(nics.len(), 1);
    let nic = &fab.nics[nics[0].index()];
    assert_eq!(nic.name, "mlx5_bond_0");
    assert_eq!(nic.ports.len(), 2);
    let leaves: Vec<String> = (0..2)
        .map(|p| {
            let at = fab.attached_switch(nics[0], p).expect("each member is cabled");
            fab.port_name(at)
        })
        .collect();
    assert_eq!(leaves, ["leaf1:0", "leaf2:0"]);
}
