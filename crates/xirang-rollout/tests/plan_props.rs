//! Property tests of the planner over random fleets and policies: every node appears
//! exactly once (in a wave or skipped), no wave breaks a failure-domain limit, the
//! canaries cover every model/firmware combination, stages come in order.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use xirang_rollout::fleet::{Domain, DomainKind, Fleet, Nic, Node};
use xirang_rollout::policy::{FirmwareTarget, Limits, Policy, Stages};
use xirang_rollout::waves::plan;

const MODELS: [(&str, &str); 3] = [
    ("MT4125", "MT_0000000359"),
    ("MT4129", "MT_0000000834"),
    ("MT4123", "MT_0000000222"),
];
const VERSIONS: [&str; 4] = ["22.36.1010", "22.38.1002", "22.39.1002", "20.31.1014"];

#[derive(Debug, Clone)]
struct NodeSpec {
    model: usize,
    versions: Vec<Option<usize>>,
    rack: usize,
    job: Option<usize>,
    switches_per_rack: bool,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        0..MODELS.len(),
        0..VERSIONS.len(),
        // Most NICs of a node run the node's version; a few differ or are unreadable.
        prop::collection::vec(
            prop::option::weighted(0.1, prop::option::weighted(0.8, 0..VERSIONS.len())),
            1..5,
        ),
        0..12usize,
        prop::option::of(0..4usize),
        any::<bool>(),
    )
        .prop_map(
            |(model, node_version, odd, rack, job, switches_per_rack)| NodeSpec {
                model,
                versions: odd.into_iter().map(|o| o.unwrap_or(Some(node_version))).collect(),
                rack,
                job,
                switches_per_rack,
            },
        )
}

fn build(specs: &[NodeSpec], racks: bool) -> Fleet {
    let mut nodes: Vec<Node> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut domains = BTreeSet::new();
            if racks {
                domains.insert(Domain {
                    kind: DomainKind::Rack,
                    name: format!("r{}", s.rack),
                });
            }
            if let Some(j) = s.job {
                domains.insert(Domain {
                    kind: DomainKind::Job,
                    name: format!("j{j}"),
                });
            }
            let nics = s
                .versions
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    domains.insert(Domain {
                        kind: DomainKind::Rail,
                        name: k.to_string(),
                    });
                    let sw = if s.switches_per_rack {
                        format!("r{}-leaf{k}", s.rack)
                    } else {
                        format!("leaf{k}")
                    };
                    domains.insert(Domain {
                        kind: DomainKind::Switch,
                        name: sw,
                    });
                    Nic {
                        name: format!("mlx5_{k}"),
                        hca_type: Some(MODELS[s.model].0.into()),
                        board_id: Some(MODELS[s.model].1.into()),
                        fw: v.map(|v| VERSIONS[v].to_string()),
                        pci: Some(format!("0000:{:02x}:00.0", 0x10 + k)),
                        netdev: None,
                        ecn: Default::default(),
                    }
                })
                .collect();
            Node {
                name: format!("node{i:04}"),
                nics,
                domains,
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    Fleet {
        nodes,
        switches: Vec::new(),
    }
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    (
        prop::collection::btree_set(0..3usize, 1..=2),
        prop::collection::btree_set(0..2usize, 1..=2),
        prop::collection::vec(0.01f64..0.99, 0..4),
        (0.05f64..1.0, 0.05f64..1.0, 0.05f64..1.0, 0.05f64..1.0),
        1..4usize,
    )
        .prop_map(
            |(models, from, mut fr, (rack, switch, rail, job), min_canaries)| {
                fr.sort_by(f64::total_cmp);
                fr.dedup_by(|a, b| (*a - *b).abs() < 1e-6);
                fr.push(1.0);
                Policy {
                    firmware: models
                        .into_iter()
                        .map(|m| FirmwareTarget {
                            hca_type: Some(MODELS[m].0.into()),
                            board_id: None,
                            target: VERSIONS[2].into(),
                            allowed_from: from.iter().map(|v| VERSIONS[*v].to_string()).collect(),
                            image: "fw.bin".into(),
                        })
                        .collect(),
                    configuration: None,
                    stages: Stages {
                        fractions: fr,
                        min_canaries,
                    },
                    limits: Limits {
                        rack,
                        switch,
                        rail,
                        job,
                    },
                    gates: Default::default(),
                    commands: xirang_rollout::policy::Commands::ssh_mlxfwmanager(),
                    base_dir: Default::default(),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plans_hold_their_invariants(
        specs in prop::collection::vec(node_spec(), 0..120),
        racks in any::<bool>(),
        policy in policy_strategy(),
    ) {
        let fleet = build(&specs, racks);
        prop_assert!(policy.check().is_ok(), "{:?}", policy.check());
        let p = plan(&fleet, &policy);

        // 1. Every node exactly once.
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for w in &p.waves {
            prop_assert!(!w.nodes.is_empty());
            for n in &w.nodes {
                *seen.entry(n.name.as_str()).or_insert(0) += 1;
            }
        }
        for s in &p.skipped {
            *seen.entry(s.name.as_str()).or_insert(0) += 1;
        }
        prop_assert_eq!(seen.len(), fleet.nodes.len());
        prop_assert!(seen.values().all(|&c| c == 1), "a node appears twice");
        for n in &fleet.nodes {
            prop_assert!(seen.contains_key(n.name.as_str()), "{} missing", n.name);
        }

        // 2. Skipped exactly when a NIC with a target is on a version not allowed
        //    (or unknown), or nothing needs flashing.
        for n in &fleet.nodes {
            let mut blocked = false;
            let mut todo = false;
            for c in &n.nics {
                if let Some(t) = policy.target_for(c) {
                    match c.fw.as_deref() {
                        Some(v) if v == t.target => {}
                        Some(v) if t.allowed_from.iter().any(|a| a == v) => todo = true,
                        _ => blocked = true,
                    }
                }
            }
            let skipped = p.skipped.iter().any(|s| s.name == n.name);
            prop_assert_eq!(skipped, blocked || !todo, "{}", n.name);
        }

        // 3. No wave holds more of a domain than its cap (at least one).
        let sizes = fleet.domain_sizes();
        for w in &p.waves {
            let mut load: BTreeMap<&Domain, usize> = BTreeMap::new();
            for pn in &w.nodes {
                for d in &fleet.node(&pn.name).unwrap().domains {
                    *load.entry(d).or_insert(0) += 1;
                }
            }
            for (d, c) in load {
                let share = policy.limits.share(d.kind);
                let cap = ((share * sizes[d] as f64 + 1e-9).floor() as usize).max(1);
                prop_assert!(c <= cap, "wave {} holds {} of {} ({} nodes, cap {})", w.number, c, d, sizes[d], cap);
            }
        }

        // 4. Canary waves come first and cover every (model, version) being upgraded.
        let first_other = p.waves.iter().position(|w| w.stage != "canary").unwrap_or(p.waves.len());
        prop_assert!(p.waves[first_other..].iter().all(|w| w.stage != "canary"));
        let canary: BTreeSet<(String, String)> = p.waves[..first_other]
            .iter()
            .flat_map(|w| &w.nodes)
            .flat_map(|n| n.nics.iter().map(|u| (u.model.clone(), u.from.clone())))
            .collect();
        let all: BTreeSet<(String, String)> = p.waves
            .iter()
            .flat_map(|w| &w.nodes)
            .flat_map(|n| n.nics.iter().map(|u| (u.model.clone(), u.from.clone())))
            .collect();
        prop_assert_eq!(canary, all);

        // 5. Every planned NIC goes from an allowed version to its target.
        for n in p.waves.iter().flat_map(|w| &w.nodes) {
            for u in &n.nics {
                let nic = fleet.node(&n.name).unwrap().nics.iter().find(|c| c.name == u.nic).unwrap();
                let t = policy.target_for(nic).unwrap();
                prop_assert_eq!(&u.to, &t.target);
                prop_assert!(t.allowed_from.contains(&u.from));
            }
        }

        // 6. Waves are numbered 1.. in order, and the plan is deterministic.
        for (i, w) in p.waves.iter().enumerate() {
            prop_assert_eq!(w.number, i + 1);
        }
        prop_assert_eq!(&plan(&fleet, &policy), &p);
    }
}

#[test]
fn canaries_spread_over_racks_and_cover_rare_combinations() {
    let spec = xirang_rollout::fleet::SyntheticSpec {
        nodes: 400,
        ..Default::default()
    };
    let fleet = Fleet::synthetic(&spec, 7);
    let policy = xirang_rollout::simulate::default_policy(&xirang_rollout::simulate::SimSpec::default());
    let p = plan(&fleet, &policy);
    let canaries: Vec<&str> = p
        .waves
        .iter()
        .filter(|w| w.stage == "canary")
        .flat_map(|w| &w.nodes)
        .map(|n| n.name.as_str())
        .collect();
    // 1 % of 400 = 4 canaries, and 2 models x 2 versions = 4 combinations.
    assert_eq!(canaries.len(), 4, "{canaries:?}");
    assert_eq!(p.combinations.len(), 4);
    let racks: BTreeSet<String> = canaries
        .iter()
        .map(|n| {
            fleet
                .node(n)
                .unwrap()
                .domains
                .iter()
                .find(|d| d.kind == DomainKind::Rack)
                .unwrap()
                .name
                .clone()
        })
        .collect();
    assert_eq!(racks.len(), canaries.len(), "canaries share a rack: {canaries:?}");
    // The later stages reach their cumulative shares.
    let mut done = 0;
    for w in &p.waves {
        done += w.nodes.len();
        if let Some(pct) = w.stage.strip_suffix('%') {
            let share: f64 = pct.parse::<f64>().unwrap() / 100.0;
            assert!(done as f64 <= (share * 400.0).ceil() + 1e-9);
        }
    }
    assert_eq!(done, 400);
}

#[test]
fn a_nic_without_the_values_its_commands_need_blocks_its_node() {
    let spec = xirang_rollout::fleet::SyntheticSpec {
        nodes: 3,
        ..Default::default()
    };
    let mut fleet = Fleet::synthetic(&spec, 1);
    fleet.nodes[1].nics[2].pci = None;
    let policy = xirang_rollout::simulate::default_policy(&xirang_rollout::simulate::SimSpec::default());
    let p = plan(&fleet, &policy);
    assert_eq!(p.skipped.len(), 1);
    assert_eq!(p.skipped[0].name, fleet.nodes[1].name);
    assert!(
        p.skipped[0].reason.contains("mlx5_2")
            && p.skipped[0]
                .reason
                .contains("pci unknown, needed by the flash/rollback commands"),
        "{}",
        p.skipped[0].reason
    );
}

#[test]
fn a_node_reporting_a_value_outside_its_grammar_is_skipped_never_commanded() {
    let spec = xirang_rollout::fleet::SyntheticSpec {
        nodes: 4,
        ..Default::default()
    };
    let policy = xirang_rollout::simulate::default_policy(&xirang_rollout::simulate::SimSpec::default());
    for (field, value) in [
        ("pci", "0000:01:00.0;echo INJECTED"),
        ("board_id", "MT_0000000359'$(reboot)'"),
        ("fw", "22.38.1002\nreboot"),
        ("node", "-oProxyCommand=sh"),
    ] {
        let mut fleet = Fleet::synthetic(&spec, 1);
        let n = &mut fleet.nodes[2];
        match field {
            "pci" => n.nics[0].pci = Some(value.into()),
            "board_id" => n.nics[0].board_id = Some(value.into()),
            "fw" => n.nics[0].fw = Some(value.into()),
            _ => n.name = value.into(),
        }
        let name = n.name.clone();
        let p = plan(&fleet, &policy);
        let skipped: Vec<_> = p
            .skipped
            .iter()
            .filter(|s| s.reason.starts_with("refused"))
            .collect();
        assert_eq!(skipped.len(), 1, "{field}: {:?}", p.skipped);
        assert_eq!(skipped[0].name, name);
        assert!(
            skipped[0].reason.contains("does not fit its grammar"),
            "{}",
            skipped[0].reason
        );
        assert!(p.waves.iter().flat_map(|w| &w.nodes).all(|n| n.name != name));
    }
}
