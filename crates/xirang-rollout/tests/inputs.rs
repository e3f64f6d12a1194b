//! Bad inputs: every policy, fleet.toml and benchmark-file problem is an error naming
//! the file (and line) and what was expected; the readers never panic.

use std::path::Path;

use proptest::prelude::*;
use xirang_rollout::fleet::{Fleet, FleetFile};
use xirang_rollout::{Policy, RolloutError};

fn policy_err(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("policy.toml");
    std::fs::write(&p, text).unwrap();
    let e = Policy::load(&p).unwrap_err().to_string();
    e.replace(&dir.path().display().to_string(), "DIR")
}

const OK: &str = r#"
[commands]
flash = "ssh {node} flint -d {pci} -i {image} burn"
rollback = "ssh {node} flint -d {pci} -i old.bin burn"

[[firmware]]
hca_type = "MT4125"
target = "22.39.1002"
allowed_from = ["22.38.1002"]
image = "fw.bin"
"#;

#[test]
fn policy_errors_name_file_line_and_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("policy.toml");
    std::fs::write(&p, OK).unwrap();
    let pol = Policy::load(&p).unwrap();
    assert_eq!(pol.stages.fractions, vec![0.01, 0.05, 0.25, 1.0]);
    assert_eq!(pol.commands.parallel, 16);
    assert_eq!(pol.gates.soak_s, 600.0);

    let cases: &[(&str, &str)] = &[
        (
            "[[firmware]]\nhca_type = \"MT4125\"\ntarget = 22\n",
            "DIR/policy.toml:3: firmware[0].target: expected a string, found 22",
        ),
        (
            "[[firmware]]\nhca_type = \"MT4125\"\ntarget = \"1\"\nallowed_from = []\nimage = \"x\"\n",
            "DIR/policy.toml:1: missing key `commands`",
        ),
        (
            &OK.replace(
                "ssh {node} flint -d {pci} -i {image} burn",
                "flint -d {pci} -i {image} burn",
            ),
            "DIR/policy.toml:3: commands.flash: expected {node} in the command: it runs on this machine and must reach the node (for example `ssh {node} ...`)",
        ),
        (
            &format!("{OK}[gates]\nsoak_s = 1e20\n"),
            "DIR/policy.toml:12: gates.soak_s: expected seconds between 0 and 86400 (one day), found 100000000000000000000",
        ),
        (
            &format!("{OK}[stages]\nfractions = [0.1, nan, 1.0]\n"),
            "DIR/policy.toml:12: stages.fractions: expected finite shares, found [0.1, NaN, 1.0]",
        ),
        (
            "[[firmware]]\nhca_type = \"MT4125\"\ntarget = \"1\"\nallowed_from = []\nimage = \"x\"\ncolour = 1\n",
            "DIR/policy.toml:6: firmware[0].colour: unknown key `colour`",
        ),
        (
            "[commands]\nflash = \"a {node}\"\nrollback = \"b {node}\"\n",
            "DIR/policy.toml:1: expected at least one [[firmware]] target, or a [configuration] (a tuned configuration's directory)",
        ),
        (
            &OK.replace("hca_type = \"MT4125\"\n", ""),
            "DIR/policy.toml:6: firmware[0]: expected `hca_type` or `board_id` (which NICs the target is for)",
        ),
        // A second target for the same model was once ignored without a word.
        (
            &format!(
                "{OK}\n[[firmware]]\nhca_type = \"MT4125\"\nboard_id = \"MT_0000000359\"\ntarget = \"22.40.1000\"\nallowed_from = [\"22.38.1002\"]\nimage = \"fw2.bin\"\n"
            ),
            "DIR/policy.toml:12: firmware[1]: expected one target per NIC model, found a second for hca_type MT4125, board_id MT_0000000359 (firmware[0] is for hca_type MT4125; a NIC of both would take firmware[0]'s 22.39.1002 and never this 22.40.1000)",
        ),
        // An empty version once planned an upgrade to "".
        (
            &OK.replace("target = \"22.39.1002\"", "target = \"\""),
            "DIR/policy.toml:8: firmware[0].target: expected a firmware version such as 16.35.2000, found an empty string",
        ),
        (
            &OK.replace(
                "allowed_from = [\"22.38.1002\"]",
                "allowed_from = [\"22.38.1002\", \" \"]",
            ),
            "DIR/policy.toml:9: firmware[0].allowed_from[1]: expected a firmware version, found an empty string",
        ),
        (
            &format!("{OK}[stages]\nfractions = [0.1, 0.05, 1.0]\n"),
            "DIR/policy.toml:12: stages.fractions: expected increasing shares, found 0.1 then 0.05",
        ),
        (
            &format!("{OK}[stages]\nfractions = [0.1, 0.5]\n"),
            "DIR/policy.toml:12: stages.fractions: expected shares in (0, 1] ending with 1.0 (every node), found [0.1, 0.5]",
        ),
        (
            &format!("{OK}[limits]\nrack = 0\n"),
            "DIR/policy.toml:12: limits.rack: expected a share in (0, 1], found 0",
        ),
        (
            &OK.replace("-d {pci} -i {image}", "-d {pcie} -i {image}"),
            "DIR/policy.toml:3: commands.flash: unknown placeholder {pcie}; expected one of {node} {nic} {pci} {hca_type} {board_id} {image} {target} {previous} {netdev} {dir}",
        ),
        (
            &OK.replace("[commands]\n", "[commands]\ncollect = \"scp {nic}\"\n"),
            "DIR/policy.toml:3: commands.collect: placeholder {nic} cannot be used here; expected only {node}",
        ),
        (
            &OK.replace("[commands]\n", "[commands]\nparallel = 0\n"),
            "DIR/policy.toml:3: commands.parallel: expected 1..=10000 commands at once, found 0",
        ),
        (
            &format!("{OK}[configuration]\ndir = \"tuned\"\n"),
            "DIR/tuned/mlx5-congestion.sh",
        ),
    ];
    for (text, want) in cases {
        let got = policy_err(text);
        assert!(got.starts_with(want), "\n got: {got}\nwant: {want}");
    }
    let e = Policy::load(Path::new("/nonexistent/policy.toml")).unwrap_err();
    assert!(matches!(e, RolloutError::Read(_)), "{e}");
    assert_eq!(
        e.to_string(),
        "/nonexistent/policy.toml: cannot read: No such file or directory (os error 2)"
    );
}

#[test]
fn fleet_file_errors_name_the_host() {
    let fleet = Fleet::synthetic(
        &xirang_rollout::fleet::SyntheticSpec {
            nodes: 3,
            ..Default::default()
        },
        1,
    );
    let cluster_like = |extra: &FleetFile| {
        // from_cluster needs a Cluster; check the same rules through a cluster of
        // hosts named like the synthetic nodes.
        let mut c = xirang_audit::cluster::Cluster::default();
        for n in &fleet.nodes {
            c.hosts.push(xirang_host::HostInventory {
                hostname: n.name.clone(),
                ..Default::default()
            });
        }
        Fleet::from_cluster(&c, extra, Path::new("inv/fleet.toml")).map(|_| ())
    };
    let mut f = FleetFile::default();
    f.racks.insert("r1".into(), vec!["n0001".into(), "n0009".into()]);
    let e = cluster_like(&f).unwrap_err().to_string();
    assert_eq!(
        e,
        "inventory: inv/fleet.toml: rack `r1` lists host `n0009`, which is not in the inventory"
    );
    let mut f = FleetFile::default();
    f.racks.insert("r1".into(), vec!["n0001".into()]);
    f.racks.insert("r2".into(), vec!["n0001".into()]);
    let e = cluster_like(&f).unwrap_err().to_string();
    assert_eq!(
        e,
        "inventory: inv/fleet.toml: host `n0001` is in two racks (`r1` and `r2`)"
    );
    // A host listed twice by one rack was once "in two racks (`r1` and `r1`)", with no line.
    let f = FleetFile::parse(
        "[racks]\nr1 = [\"n0001\",\n  \"n0001\"]\n",
        Path::new("inv/fleet.toml"),
    )
    .unwrap();
    let e = cluster_like(&f).unwrap_err().to_string();
    assert_eq!(
        e,
        "inventory: inv/fleet.toml:3: rack `r1` lists host `n0001` twice"
    );
    let mut f = FleetFile::default();
    f.jobs.insert("a".into(), vec!["n0001".into()]);
    f.jobs.insert("b".into(), vec!["n0001".into()]);
    cluster_like(&f).expect("a host may run two jobs");
}

#[test]
fn benchmark_files_from_the_nccl_fixtures() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let good = std::fs::read_to_string(
        here.join("../xirang-collective/test_data/nccl-tests/pair-2node-1gpu-healthy.txt"),
    );
    let Ok(good) = good else {
        panic!("the collective crate's copy of the nccl-tests fixtures moved");
    };
    let f = xirang_rollout::gates::bench_figure(&good).unwrap();
    assert!(f.what.starts_with("nccl-tests "), "{f:?}");
    assert!(f.value > 0.0);
    let bad = std::fs::read_to_string(
        here.join("../xirang-collective/test_data/nccl-tests/pair-2node-1gpu-network-error.txt"),
    )
    .unwrap();
    let e = xirang_rollout::gates::bench_figure(&bad).unwrap_err();
    assert!(e.contains("failed") || e.contains("neither"), "{e}");
}

proptest! {
    #[test]
    fn readers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = xirang_rollout::perftest::parse(&text);
        let _ = xirang_rollout::gates::bench_figure(&text);
        let _ = toml::from_str::<Policy>(&text);
    }

    #[test]
    fn perftest_tables_with_noise_keep_their_rows(
        rows in prop::collection::vec((1u64..1 << 30, 1u64..100_000, 0.0f64..1e6), 1..20),
        noise in prop::collection::vec("[ -~]{0,60}", 0..5),
    ) {
        let mut t = String::from(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
        for (i, (b, it, bw)) in rows.iter().enumerate() {
            if let Some(n) = noise.get(i) {
                t.push_str(&format!(" Conflicting CPU frequency values detected: {n}\n"));
            }
            t.push_str(&format!(" {b}  {it}  {:.2}  {bw:.2}  0.5\n", bw + 1.0));
        }
        let got = xirang_rollout::perftest::parse(&t).unwrap();
        let got: Vec<u64> = got.iter().map(|r| r.bytes).collect();
        let want: Vec<u64> = rows.iter().map(|r| r.0).collect();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn live_gate_errors_name_the_key_and_what_was_expected() {
    let live = |body: &str| format!("{OK}[gates.live]\n{body}");
    let metric =
        "[[gates.live.metrics]]\nname = \"p99\"\nquery = 'p99{node=~\"{nodes}\"}'\nbetter = \"lower\"\n";
    let good = live(&format!("prometheus = \"http://p:9090\"\n{metric}"));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("policy.toml");
    std::fs::write(&p, &good).unwrap();
    let pol = Policy::load(&p).unwrap();
    let l = pol.gates.live.unwrap();
    assert_eq!(
        (l.step_s, l.alpha, l.min_samples, l.max_extensions),
        (30.0, 0.05, 8, 2)
    );
    let cases = [
        (
            live(&format!("prometheus = \"p:9090\"\n{metric}")),
            "gates.live.prometheus: expected an http:// or https:// URL, found `p:9090`",
        ),
        (
            live(&format!(
                "prometheus = \"http://p\"\n{}",
                metric.replace("{node=~\"{nodes}\"}", "")
            )),
            "gates.live.metrics[0].query: expected {nodes} where the group's node names go",
        ),
        (
            live(&format!("prometheus = \"http://p\"\n{metric}tolerance = 1.5\n")),
            "gates.live.metrics[0].tolerance: expected a share in [0, 1), found 1.5",
        ),
        (
            live("prometheus = \"http://p\"\nmetrics = []\n"),
            "gates.live.metrics: expected at least one metric",
        ),
        (
            live(&format!("prometheus = \"http://p\"\nstep_s = 300\n{metric}")),
            "gates.live.min_samples: 8 samples per group cannot be had: the soak (600 s) and its 2 extension(s) hold 6 steps of 300 s",
        ),
        (
            live(&format!("prometheus = \"http://p\"\nmin_samples = 2\n{metric}")),
            "gates.live.min_samples: expected 3 to 10000, found 2",
        ),
        (
            format!("{OK}[gates]\nsoak_s = 0\n[gates.live]\nprometheus = \"http://p\"\n{metric}"),
            "gates.live: expected gates.soak_s > 0",
        ),
        (
            live(&format!(
                "prometheus = \"http://p\"\n{}",
                metric.replace("lower", "faster")
            )),
            "gates.live.metrics[0].better: unknown kind `faster`; expected one of `lower`, `higher`",
        ),
    ];
    for (text, want) in cases {
        let e = policy_err(&text);
        assert!(e.contains(want), "{e}\nwanted: {want}\n{text}");
    }
}

#[test]
fn node_names_are_escaped_into_the_query_regex() {
    use xirang_rollout::live::fill_nodes;
    let q = fill_nodes(r#"x{node=~"{nodes}"}"#, &["h1".into(), "gpu-a.b".into()]);
    assert_eq!(q, r#"x{node=~"h1|gpu-a\\.b"}"#);
}

#[test]
fn configuration_errors_name_the_script_or_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let tuned = dir.path().join("tuned");
    std::fs::create_dir(&tuned).unwrap();
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/config/tuned/mlx5-congestion.sh"),
    )
    .unwrap();
    let write = |text: &str| std::fs::write(tuned.join("mlx5-congestion.sh"), text).unwrap();
    let load = |policy: &str| {
        let p = dir.path().join("policy.toml");
        std::fs::write(&p, policy).unwrap();
        Policy::load(&p).map_err(|e| e.to_string().replace(&dir.path().display().to_string(), "DIR"))
    };
    let commands = "[commands]\nflash = \"ssh {node} a {netdev}\"\nrollback = \"ssh {node} b {netdev}\"\n";
    write(&script);
    let p = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap();
    let c = p.configuration.unwrap();
    assert_eq!(c.knobs.len(), 23);
    assert!(c.target.starts_with("cfg-"));
    let e = load(&format!("{OK}[configuration]\ndir = \"tuned\"\n")).unwrap_err();
    assert!(
        e.contains("expected either [[firmware]] targets or a [configuration], not both"),
        "{e}"
    );
    write(&script.replace("roce_rp rpg_ai_rate 5", "roce_rp rpg_ai_rate five"));
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap_err();
    assert!(
        e.starts_with("DIR/tuned/mlx5-congestion.sh:44: expected an unsigned value, found `five`"),
        "{e}"
    );
    write(&script.replace("roce_rp rpg_gd 11", "roce_rp ../../etc/passwd 11"));
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap_err();
    assert!(
        e.contains("expected a knob file name, found `../../etc/passwd`"),
        "{e}"
    );
    write(&script.replace("roce_rp rpg_gd 11\n", "roce_rp rpg_gd 11\n\nroce_rp rpg_gd 10\n"));
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap_err();
    assert!(
        e.contains("roce_rp rpg_gd is listed twice (11 and 10); expected each knob once"),
        "{e}"
    );
    // The mlx5 knob table's ranges and names (xirang_fabric::mlx5).
    write(&script.replace("roce_rp rpg_gd 11\n", "roce_rp rpg_gd 12\n"));
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap_err();
    assert!(
        e.starts_with("DIR/tuned/mlx5-congestion.sh:46: expected 10..11 for roce_rp/rpg_gd, found 12"),
        "{e}"
    );
    write(&script.replace("roce_rp rpg_gd 11\n", "roce_rp rpg_gdd 11\n"));
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap_err();
    assert!(
        e.contains(
            ":46: roce_rp/rpg_gdd is not an mlx5 DCQCN knob; expected enable/0..7 or one of rpg_time_reset,"
        ),
        "{e}"
    );
    write(&script);
    let e = load(&format!(
        "[configuration]\ndir = \"tuned\"\n{}",
        commands.replace(" b {netdev}", " b")
    ))
    .unwrap_err();
    assert!(
        e.contains("commands.rollback: expected {netdev} in a configuration's command"),
        "{e}"
    );
    let e = load(&OK.replace("-i {image} burn\"", "-i {image} {netdev}\"")).unwrap_err();
    assert!(
        e.contains("{netdev} and {dir} are a configuration's placeholders"),
        "{e}"
    );
    write("#!/bin/sh\necho hi\n");
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{commands}")).unwrap_err();
    assert!(e.contains("expected a `KNOBS='` block"), "{e}");
}

#[test]
fn switch_patches_need_their_commands_and_fit_each_switch() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data");
    let tuned = dir.path().join("tuned");
    std::fs::create_dir(&tuned).unwrap();
    for f in ["mlx5-congestion.sh", "sonic-leaf.patch.json"] {
        std::fs::copy(data.join("config/tuned").join(f), tuned.join(f)).unwrap();
    }
    let load = |policy: &str| {
        let p = dir.path().join("policy.toml");
        std::fs::write(&p, policy).unwrap();
        Policy::load(&p).map_err(|e| e.to_string().replace(&dir.path().display().to_string(), "DIR"))
    };
    let hosts = "[commands]\nflash = \"ssh {node} a {netdev}\"\nrollback = \"ssh {node} b {netdev}\"\n";
    let switches = "switch_apply = \"ssh {node} apply {patch}\"\nswitch_rollback = \"ssh {node} config rollback xirang-before\"\nswitch_collect = \"ssh {node} show runningconfiguration all > switches/{node}.json\"\n";
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{hosts}")).unwrap_err();
    assert!(
        e.contains("commands.switch_apply: expected a command: the configuration has sonic-leaf.patch.json (or set `switches = false`"),
        "{e}"
    );
    let p = load(&format!(
        "[configuration]\ndir = \"tuned\"\nswitches = false\n{hosts}"
    ))
    .unwrap();
    assert!(p.configuration.unwrap().patches.is_empty());
    let e = load(&format!(
        "[configuration]\ndir = \"tuned\"\nswitches = false\n{hosts}{switches}"
    ))
    .unwrap_err();
    assert!(
        e.contains("commands.switch_apply: no switch patch is rolled out"),
        "{e}"
    );
    let e = load(&format!(
        "[configuration]\ndir = \"tuned\"\n{hosts}{}",
        switches.replace("apply {patch}", "apply {netdev}")
    ))
    .unwrap_err();
    assert!(
        e.contains("commands.switch_apply: placeholder {netdev} cannot be used here; expected {node} {tier} {patch} {dir} {target} {previous}"),
        "{e}"
    );
    let e = load(&format!(
        "[configuration]\ndir = \"tuned\"\n{hosts}{}",
        switches.replace("ssh {node} apply", "apply")
    ))
    .unwrap_err();
    assert!(e.contains("commands.switch_apply: expected {node}"), "{e}");
    let live = "[gates]\nsoak_s = 600\n[gates.live]\nprometheus = \"http://p:9090\"\n[[gates.live.metrics]]\nname = \"p99\"\nquery = 'x{node=~\"{nodes}\"}'\nbetter = \"lower\"\n";
    let e = load(&format!(
        "[configuration]\ndir = \"tuned\"\n{hosts}{switches}{live}"
    ))
    .unwrap_err();
    assert!(
        e.contains("gates.live.metrics: expected at least one metric with scope = \"switches\""),
        "{e}"
    );
    let p = load(&format!(
        "[configuration]\ndir = \"tuned\"\n{hosts}{switches}{live}{}",
        live.split_once("[[gates")
            .map(|x| format!("[[gates{}scope = \"switches\"\n", x.1))
            .unwrap()
    ))
    .unwrap();
    // The fixture's leaves take the cut patch: each moves to the state it puts them in.
    let inv =
        xirang_rollout::command::load_inventory(&data.join("../../xirang-audit/test_data/cluster")).unwrap();
    let plan = xirang_rollout::plan(&inv.fleet, &p);
    let last: Vec<&str> = plan
        .waves
        .iter()
        .rev()
        .take(2)
        .map(|w| w.nodes[0].name.as_str())
        .collect();
    assert_eq!(last, ["leaf2", "leaf1"], "{plan:#?}");
    assert_eq!(plan.waves[plan.waves.len() - 2].stage, "leaf canary");
    assert_eq!(plan.waves[plan.waves.len() - 2].control, ["leaf2"]);
    // The patch as the tuner rendered it for the default scenario's 12-port leaves with
    // two lossless queues does not fit them: refused per switch, saying why.
    std::fs::copy(
        data.join("config/as-rendered/sonic-leaf.patch.json"),
        tuned.join("sonic-leaf.patch.json"),
    )
    .unwrap();
    let p = load(&format!("[configuration]\ndir = \"tuned\"\n{hosts}{switches}")).unwrap();
    let plan = xirang_rollout::plan(&inv.fleet, &p);
    assert!(
        plan.waves
            .iter()
            .flat_map(|w| &w.nodes)
            .all(|n| !n.name.starts_with("leaf"))
    );
    let why: Vec<&str> = plan.skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(why.len(), 2, "{why:?}");
    for w in &why {
        assert!(
            w.starts_with("blocked: sonic-leaf.patch.json does not apply:") && w.contains("Ethernet0|4"),
            "{why:?}"
        );
    }
    // A switch whose tier the cabling does not name takes no tier's patch; one without
    // host cables (a spine) cannot have its links' errors read for the soak.
    std::fs::copy(
        data.join("config/tuned/sonic-leaf.patch.json"),
        tuned.join("sonic-leaf.patch.json"),
    )
    .unwrap();
    let p = load(&format!("[configuration]\ndir = \"tuned\"\n{hosts}{switches}")).unwrap();
    // A numbered position in an array of the switch's config_db has no state to compare.
    let mut fleet = inv.fleet.clone();
    if let Some(Ok(db)) = &mut fleet.switches[0].db {
        db["QUEUE"]["Ethernet0|3"] = serde_json::json!(["not", "a", "table"]);
    }
    let plan = xirang_rollout::plan(&fleet, &p);
    let why = &plan.skipped.iter().find(|s| s.name == "leaf1").unwrap().reason;
    assert!(
        why.contains("is a position in an array of this config_db"),
        "{why}"
    );
    let mut fleet = inv.fleet.clone();
    fleet.switches[0].tier = None;
    fleet.switches[1].host_cables = 0;
    let plan = xirang_rollout::plan(&fleet, &p);
    assert!(
        plan.waves
            .iter()
            .flat_map(|w| &w.nodes)
            .all(|n| !n.name.starts_with("leaf"))
    );
    let why: Vec<(&str, &str)> = plan
        .skipped
        .iter()
        .map(|s| (s.name.as_str(), s.reason.as_str()))
        .collect();
    assert!(
        why.contains(&(
            "leaf1",
            "blocked: its tier is unknown (the cabling's [switches] does not name it): no tier's patch is applied to it"
        )),
        "{why:?}"
    );
    assert!(
        why.iter()
            .any(|(n, w)| *n == "leaf2" && w.starts_with("blocked: no host is cabled to it")),
        "{why:?}"
    );
    std::fs::write(
        tuned.join("sonic-leaf.patch.json"),
        r#"[{"op": "add", "path": "/PORT/Ethernet0/lanes/-", "value": "1"}]"#,
    )
    .unwrap();
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{hosts}{switches}")).unwrap_err();
    assert!(
        e.contains("expected a table, key or field path, not an array's end"),
        "{e}"
    );
    std::fs::write(
        tuned.join("sonic-leaf.patch.json"),
        "[{\"op\": \"move\", \"from\": \"/a\", \"path\": \"/b\"}]",
    )
    .unwrap();
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{hosts}{switches}")).unwrap_err();
    assert!(
        e.contains("operation 0 (/b): expected add, replace or remove"),
        "{e}"
    );
    std::fs::write(tuned.join("sonic-edge.patch.json"), "[]").unwrap();
    let e = load(&format!("[configuration]\ndir = \"tuned\"\n{hosts}{switches}")).unwrap_err();
    assert!(
        e.contains(
            "sonic-edge.patch.json: expected sonic-TIER.patch.json with TIER one of leaf, spine, core"
        ),
        "{e}"
    );
}
