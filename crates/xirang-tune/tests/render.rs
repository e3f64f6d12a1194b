//! Golden files for every rendering of a recommendation, and the mlx5 script run against
//! a fake sysfs tree.

use std::path::{Path, PathBuf};
use std::process::Command;

use xirang_fabric::Loaded;
use xirang_fabric::config::CcAlgorithm;
use xirang_fabric::scenario::Scenario;
use xirang_tune::render::{self, Context};

fn loaded() -> Loaded {
    // The default scenario: two classes, two tiers, 2 NICs per host.
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/default.toml");
    Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// A recommendation as a tune would make it: training's DCQCN retuned, inference on
/// TIMELY, ECN lowered on both tiers, four QPs.
fn context(l: &Loaded) -> Context<'_> {
    let mut c = l.scenario.config.clone();
    let t = c.classes.get_mut("training").unwrap();
    t.cc = CcAlgorithm::Dcqcn;
    t.dcqcn.rpg_time_reset_us = 30.0;
    t.dcqcn.rpg_ai_rate_mbps = 51.0;
    t.dcqcn.rpg_min_dec_fac_pct = 91;
    t.dcqcn.min_time_between_cnps_us = 19.0;
    c.classes.get_mut("inference").unwrap().cc = CcAlgorithm::Timely;
    let mut leaf = c.ecn.profile(xirang_fabric::model::Tier::Leaf);
    leaf.kmin_bytes = 26_978;
    leaf.kmax_bytes = 142_637;
    leaf.pmax = 0.1227;
    c.ecn.set(xirang_fabric::model::Tier::Leaf, leaf);
    c.transport.qps_per_connection = 4;
    let config: &'static _ = Box::leak(Box::new(c));
    Context {
        loaded: l,
        source: "scenarios/default.toml",
        config,
        changes: vec![
            (
                "classes.training.dcqcn.rpg_time_reset_us".into(),
                "300".into(),
                "30".into(),
            ),
            ("ecn.leaf.kmin_bytes".into(), "1048576".into(), "26978".into()),
            ("transport.qps_per_connection".into(), "1".into(), "4".into()),
        ],
        verdict:
            "candidate 7: objective 0.9400 on 16 held-out seeds (+6.0% against vendor defaults, sd 0.0900)"
                .into(),
    }
}

#[test]
fn golden_renderings() {
    let l = loaded();
    let cx = context(&l);
    let arts = render::all(&cx);
    let names: Vec<&str> = arts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "recommendation.toml",
            "mlx5-congestion.sh",
            "mlnx_qos.sh",
            "nccl.env",
            "nccl-tuner.csv",
            "sonic-leaf.patch.json",
            "sonic-spine.patch.json",
            "apply-sonic.sh"
        ]
    );
    let tmp = tempfile::tempdir().unwrap();
    for a in &arts {
        insta::assert_snapshot!(a.name.clone(), a.text);
        std::fs::write(tmp.path().join(&a.name), &a.text).unwrap();
        if a.executable {
            // Every script parses as POSIX shell.
            let o = Command::new("sh")
                .arg("-n")
                .arg(tmp.path().join(&a.name))
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{}: {}",
                a.name,
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    // The tuner file reads back by the plugin's documented rules, covers every size of
    // each collective it names without a gap, and matches the scenario's communicator.
    let csv = &arts.iter().find(|a| a.name == "nccl-tuner.csv").unwrap().text;
    let rows = xirang_collective::tuner_csv::parse(csv).unwrap_or_else(|e| panic!("{e}\n{csv}"));
    assert!(!rows.is_empty());
    for coll in ["allreduce", "allgather", "reducescatter", "broadcast"] {
        let r: Vec<_> = rows.iter().filter(|r| r.collective == coll).collect();
        assert_eq!(r.first().map(|r| r.min_bytes), Some(0), "{coll}");
        assert_eq!(
            r.last().map(|r| r.max_bytes),
            Some(xirang_collective::tuner_csv::ALL_SIZES_MAX_BYTES),
            "{coll}"
        );
        assert!(
            r.windows(2).all(|w| w[0].max_bytes + 1 == w[1].min_bytes),
            "{coll}: {r:?}"
        );
    }
    assert!(
        rows.iter()
            .all(|r| r.n_nodes > 0 && r.n_ranks >= r.n_nodes && r.channels == -1)
    );
    let env = &arts.iter().find(|a| a.name == "nccl.env").unwrap().text;
    assert!(
        env.contains("\nNCCL_TUNER_CONFIG_FILE=./nccl-tuner.csv\n"),
        "{env}"
    );
    // The reader refuses what the plugin would not take, naming the line.
    for (bad, want) in [
        ("allreduce,0,10,ring,simple,-1,1\n", "8, 9 or 10"),
        ("allreduce, 0,10,ring,simple,-1,1,8\n", "no spaces"),
        ("alltoall,0,10,ring,simple,-1,1,8\n", "a collective"),
        ("allreduce,10,0,ring,simple,-1,1,8\n", "above max_bytes"),
        ("allreduce,0,10,rings,simple,-1,1,8\n", "an algorithm"),
        ("allreduce,0,10,ring,LL,-1,1,8\n", "a protocol"),
        ("allreduce,0,10,ring,simple,0,1,8\n", "channels"),
        ("allreduce,0,10,ring,simple,-1,1,8,1,2\n", "regBuff"),
        ("allreduce,0,4294967296,ring,simple,-1,1,8\n", "max_bytes"),
    ] {
        let e = xirang_collective::tuner_csv::parse(&format!("# c\n\n{bad}")).unwrap_err();
        assert_eq!(e.line, 3, "{bad}");
        assert!(e.message.contains(want), "{bad}: {e}");
    }
    // The plugin's own example lines read.
    let example = "allreduce,0,65536,tree,simple,2,1,-1,-1,1\nbroadcast,0,32768,tree,simple,-1,1,-1\nallreduce,1048577,4294967295,ring,ll128,-1,-1,-1,4,-1\n";
    assert_eq!(xirang_collective::tuner_csv::parse(example).unwrap().len(), 3);
    // The dry runs print what they would do and run nothing.
    let o = Command::new("sh")
        .arg("apply-sonic.sh")
        .arg("leaf")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("sudo config apply-patch sonic-leaf.patch.json"),
        "{out}"
    );
    let o = Command::new("sh")
        .arg("mlnx_qos.sh")
        .arg("eth0")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("mlnx_qos -i eth0 --pfc 0,0,0,1,1,0,0,0"),
        "{out}"
    );
    // The recommendation loads back as a scenario with the recommended configuration.
    let rec = &arts[0].text;
    let back = Scenario::parse(rec, Path::new("recommendation.toml")).unwrap();
    assert_eq!(back.config, *cx.config);
    // The patches are JSON Patch arrays that bind every lossless queue.
    let leaf: serde_json::Value = serde_json::from_str(
        &arts
            .iter()
            .find(|a| a.name == "sonic-leaf.patch.json")
            .unwrap()
            .text,
    )
    .unwrap();
    let ops = leaf.as_array().unwrap();
    assert_eq!(ops[0]["path"], "/WRED_PROFILE/XIRANG_LEAF");
    assert_eq!(ops[0]["value"]["green_min_threshold"], "26978");
    assert_eq!(ops[0]["value"]["green_drop_probability"], "12");
    // Every port of a leaf (8 host NIC ports, 4 uplinks), queues 3 and 4 (lossless).
    let leaf_ports = l
        .fabric
        .switches
        .iter()
        .find(|s| s.tier == xirang_fabric::model::Tier::Leaf)
        .unwrap()
        .ports
        .len();
    assert_eq!(leaf_ports, 12);
    assert_eq!(ops.len(), 1 + leaf_ports * 2);
}

/// A fake `/sys/class/net/IF/ecn` tree with the firmware defaults in every knob.
fn fake_sysfs(root: &Path, ifaces: &[&str]) {
    for i in ifaces {
        let ecn = root.join("class/net").join(i).join("ecn");
        for (dir, files) in [
            (
                "roce_rp",
                &[
                    ("rpg_time_reset", "300"),
                    ("rpg_byte_reset", "32767"),
                    ("rpg_threshold", "1"),
                    ("rpg_max_rate", "0"),
                    ("rpg_ai_rate", "5"),
                    ("rpg_hai_rate", "50"),
                    ("rpg_gd", "11"),
                    ("rpg_min_dec_fac", "50"),
                    ("rpg_min_rate", "1"),
                    ("rate_to_set_on_first_cnp", "0"),
                    ("dce_tcp_g", "1019"),
                    ("dce_tcp_rtt", "1"),
                    ("rate_reduce_monitor_period", "4"),
                    ("initial_alpha_value", "1023"),
                    ("clamp_tgt_rate", "0"),
                    ("clamp_tgt_rate_after_time_inc", "1"),
                ][..],
            ),
            (
                "roce_np",
                &[
                    ("min_time_between_cnps", "4"),
                    ("cnp_dscp", "48"),
                    ("cnp_802p_prio", "6"),
                ][..],
            ),
        ] {
            std::fs::create_dir_all(ecn.join(dir).join("enable")).unwrap();
            for (f, v) in files {
                std::fs::write(ecn.join(dir).join(f), format!("{v}\n")).unwrap();
            }
            for p in 0..8 {
                std::fs::write(ecn.join(dir).join("enable").join(p.to_string()), "0\n").unwrap();
            }
        }
    }
}

/// A temporary directory with the recommendation's `mlx5-congestion.sh` and a fake sysfs
/// tree with `ifaces`: (directory, script, sysfs root).
fn mlx5_bed(ifaces: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let l = loaded();
    let cx = context(&l);
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("mlx5-congestion.sh");
    std::fs::write(&script, render::mlx5_script(&cx).text).unwrap();
    let sysfs = tmp.path().join("sys");
    fake_sysfs(&sysfs, ifaces);
    (tmp, script, sysfs)
}

/// Every file under `root` with its content, sorted.
fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    let mut v = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                v.push((p.clone(), std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    v.sort();
    v
}

fn sh(script: &Path, sysfs: &Path, rollback: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new("sh")
        .arg(script)
        .args(args)
        .env("XIRANG_SYSFS", sysfs)
        .env("XIRANG_ROLLBACK", rollback)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn mlx5_script_dry_run_apply_and_rollback() {
    let (tmp, script, sysfs) = mlx5_bed(&["eth0", "eth1"]);
    let rollback = tmp.path().join("rb");
    let before = snapshot(&sysfs);

    // Dry run: says what it would do, changes nothing, saves nothing.
    let (code, out, err) = sh(&script, &sysfs, &rollback, &["eth0", "eth1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("eth0 roce_rp/rpg_time_reset: 300 -> 30 (dry run)"),
        "{out}"
    );
    assert!(
        out.contains("eth1 roce_np/min_time_between_cnps: 4 -> 19 (dry run)"),
        "{out}"
    );
    assert!(out.contains("dry run: nothing written"), "{out}");
    assert_eq!(snapshot(&sysfs), before);
    assert!(!rollback.exists());

    // Apply: writes the values, enables DCQCN on priority 3 only, saves a rollback file.
    let (code, out, err) = sh(&script, &sysfs, &rollback, &["--apply", "eth0", "eth1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("previous values saved"), "{out}");
    let rp = sysfs.join("class/net/eth0/ecn/roce_rp");
    assert_eq!(
        std::fs::read_to_string(rp.join("rpg_time_reset")).unwrap(),
        "30\n"
    );
    assert_eq!(std::fs::read_to_string(rp.join("rpg_ai_rate")).unwrap(), "51\n");
    assert_eq!(
        std::fs::read_to_string(rp.join("rpg_min_dec_fac")).unwrap(),
        "91\n"
    );
    assert_eq!(std::fs::read_to_string(rp.join("enable/3")).unwrap(), "1\n");
    assert_eq!(
        std::fs::read_to_string(rp.join("enable/4")).unwrap(),
        "0\n",
        "TIMELY's priority is left alone"
    );
    let saved = std::fs::read_to_string(&rollback).unwrap();
    assert!(
        saved.contains(&format!("{}\t300\n", rp.join("rpg_time_reset").display())),
        "{saved}"
    );
    assert_eq!(saved.lines().count(), 2 * (19 + 2));

    // A second apply would overwrite the only copy of the old values: refused.
    let (code, _, err) = sh(&script, &sysfs, &rollback, &["--apply", "eth0"]);
    assert_eq!(code, 2);
    assert!(err.contains("exists; move it away first"), "{err}");

    // Rollback restores every file exactly.
    let (code, out, err) = sh(
        &script,
        &sysfs,
        &rollback,
        &["--rollback", rollback.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored"), "{out}");
    assert_eq!(snapshot(&sysfs), before);
}

#[test]
fn mlx5_script_refuses_hosts_without_the_knobs() {
    let (tmp, script, sysfs) = mlx5_bed(&["eth0"]);
    std::fs::create_dir_all(sysfs.join("class/net/eno1")).unwrap();
    let before = snapshot(&sysfs);
    let rollback = tmp.path().join("rb");
    // One good and one bad interface: nothing is written to either.
    let (code, _, err) = sh(&script, &sysfs, &rollback, &["--apply", "eth0", "eno1"]);
    assert_eq!(code, 2);
    assert!(err.contains("eno1 is not an mlx5 PF under MLNX_OFED"), "{err}");
    assert_eq!(snapshot(&sysfs), before);
    assert!(!rollback.exists());
    // A driver without one of the knobs is refused too.
    std::fs::remove_file(sysfs.join("class/net/eth0/ecn/roce_rp/dce_tcp_rtt")).unwrap();
    let (code, _, err) = sh(&script, &sysfs, &rollback, &["eth0"]);
    assert_eq!(code, 2);
    assert!(err.contains("dce_tcp_rtt does not exist"), "{err}");
}

/// Names an interface directory can have (anything but `/` and NUL, not `.` or `..`),
/// biased to what breaks quoting and option parsing.
fn hostile_ifname() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let pieces = prop::sample::select(vec![
        "eth0",
        "a",
        "'",
        "\"",
        ";",
        "$(",
        ")",
        "`",
        "\n",
        "\\",
        " ",
        "-",
        "--apply",
        ".",
        "..",
        "*",
        "@",
        "+",
        "_",
        "é",
        "\t",
        "$IF",
        "%s",
        "touch PWNED",
        "0123456789",
    ]);
    prop::collection::vec(pieces, 1..5)
        .prop_map(|v| v.concat())
        .prop_filter("a directory name", |s| !s.contains('/') && s != "." && s != "..")
}

fn fake_mlnx_qos(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let p = bin.join("mlnx_qos");
    // Records its argv NUL-separated, one call per line of the count.
    std::fs::write(&p, "#!/bin/sh\nprintf '%s\\000' \"$#\" \"$@\" >> \"$XLOG\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn mlnx_qos_calls(log: &Path) -> Vec<Vec<String>> {
    let bytes = std::fs::read(log).unwrap_or_default();
    let f: Vec<String> = bytes
        .split(|&b| b == 0)
        .map(|x| String::from_utf8_lossy(x).into_owned())
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < f.len() && !f[i].is_empty() {
        let n: usize = f[i].parse().unwrap();
        out.push(f[i + 1..i + 1 + n].to_vec());
        i += 1 + n;
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

    /// An interface named by a host (a directory in its sysfs) reaches a path or a tool's
    /// argument only when it fits `xirang_host::names`' grammar; otherwise the scripts
    /// refuse before touching anything, whatever the name holds.
    #[test]
    fn hostile_interface_names_never_reach_a_path_or_a_tool(name in hostile_ifname()) {
        let l = loaded();
        let cx = context(&l);
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let mlx5 = tmp.path().join("mlx5-congestion.sh");
        std::fs::write(&mlx5, render::mlx5_script(&cx).text).unwrap();
        let qos = tmp.path().join("mlnx_qos.sh");
        std::fs::write(&qos, render::mlnx_qos_script(&cx).text).unwrap();
        let sysfs = tmp.path().join("sys");
        fake_sysfs(&sysfs, &["eth0", name.as_str()]);
        let before = snapshot(&sysfs);
        let rollback = tmp.path().join("rb");
        let fits = xirang_host::names::fits(xirang_host::names::Kind::Netdev, &name);

        let o = Command::new("sh")
            .arg(&mlx5)
            .args(["--apply", "eth0", name.as_str()])
            .current_dir(&work)
            .env("XIRANG_SYSFS", &sysfs)
            .env("XIRANG_ROLLBACK", &rollback)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if fits {
            proptest::prop_assert_eq!(o.status.code(), Some(0), "{:?}: {}", name, err);
            let rp = sysfs.join("class/net").join(&name).join("ecn/roce_rp");
            proptest::prop_assert_eq!(std::fs::read_to_string(rp.join("rpg_time_reset")).unwrap(), "30\n");
            // Every saved path is a knob of one of the two interfaces.
            let saved = std::fs::read_to_string(&rollback).unwrap();
            proptest::prop_assert_eq!(saved.lines().count(), 2 * (19 + 2));
        } else {
            proptest::prop_assert_eq!(o.status.code(), Some(2), "{:?}", name);
            proptest::prop_assert!(err.contains("is not an interface name"), "{}", err);
            proptest::prop_assert_eq!(snapshot(&sysfs), before.clone());
            proptest::prop_assert!(!rollback.exists());
        }

        let bin = fake_mlnx_qos(tmp.path());
        let log = tmp.path().join("qos.log");
        let o = Command::new("sh")
            .arg(&qos)
            .args(["--apply", name.as_str()])
            .current_dir(&work)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("XLOG", &log)
            .output()
            .unwrap();
        let calls = mlnx_qos_calls(&log);
        if fits {
            proptest::prop_assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
            // The saved settings, trust, PFC, one DSCP map per class and one for CNPs.
            proptest::prop_assert_eq!(calls.len(), 3 + cx.config.classes.len() + 1);
            for c in &calls {
                proptest::prop_assert_eq!(&c[..2], &["-i".to_string(), name.clone()][..]);
            }
            let saved = work.join(format!("mlnx_qos.before.{}", name));
            proptest::prop_assert!(saved.exists());
        } else {
            proptest::prop_assert_eq!(o.status.code(), Some(2));
            proptest::prop_assert!(calls.is_empty(), "{:?}", calls);
        }
        // Nothing ran that the name spelled.
        proptest::prop_assert!(!work.join("PWNED").exists() && !tmp.path().join("PWNED").exists());
        let entries: Vec<_> = std::fs::read_dir(&work).unwrap().map(|e| e.unwrap().file_name()).collect();
        proptest::prop_assert!(entries.len() <= 1, "{:?}", entries);
    }
}

#[test]
fn a_rollback_file_only_writes_back_knob_files() {
    let (tmp, script, sysfs) = mlx5_bed(&["eth0"]);
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    let rb = tmp.path().join("rb");
    for path in [
        victim.display().to_string(),
        format!(
            "{}/class/net/eth0/ecn/roce_rp/../../../../../victim",
            sysfs.display()
        ),
    ] {
        std::fs::write(&rb, format!("{path}\tpwned\n")).unwrap();
        let (code, _, err) = sh(&script, &sysfs, &rb, &["--rollback", rb.to_str().unwrap()]);
        assert_eq!(code, 2, "{path}: {err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    }
}

#[test]
fn apply_sonic_takes_only_a_rendered_tier() {
    let l = loaded();
    let cx = context(&l);
    let tmp = tempfile::tempdir().unwrap();
    for a in render::sonic(&cx) {
        std::fs::write(tmp.path().join(&a.name), &a.text).unwrap();
    }
    std::fs::write(tmp.path().join("sonic-../x.patch.json"), "[]").ok();
    for tier in ["../x", "leaf;id", "-x", ""] {
        let o = Command::new("sh")
            .arg("apply-sonic.sh")
            .arg(tier)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{tier}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("unknown tier"),
            "{tier}"
        );
    }
    let o = Command::new("sh")
        .arg("apply-sonic.sh")
        .arg("leaf")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A recommendation on HPCC or DCTCP says plainly that mlx5's DCQCN knobs do not run it,
/// and what each needs, instead of writing knobs that would not apply.
#[test]
fn hpcc_and_dctcp_classes_are_flagged_in_the_nic_script() {
    let l = loaded();
    let cx = context(&l);
    let mut c = cx.config.clone();
    c.classes.get_mut("inference").unwrap().cc = CcAlgorithm::Hpcc;
    c.classes.get_mut("training").unwrap().cc = CcAlgorithm::Dctcp;
    let config: &'static _ = Box::leak(Box::new(c));
    let cx = Context { config, ..cx };
    let text = render::mlx5_script(&cx).text;
    assert!(
        text.contains("class `inference` (priority 4) was tuned with HPCC"),
        "{text}"
    );
    assert!(
        text.contains("in-band network telemetry from every switch"),
        "{text}"
    );
    assert!(
        text.contains("class `training` (priority 3) was tuned with DCTCP"),
        "{text}"
    );
    assert!(text.contains("No traffic class uses DCQCN"), "{text}");
}
