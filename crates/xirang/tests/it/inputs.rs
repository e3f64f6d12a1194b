//! Every command on hostile, huge and special inputs: a clear error naming the file (and
//! line, and key path where there is one) or a bounded, reported run; never a panic, a
//! hang, or a write outside the command's own output.

use std::path::Path;
use std::process::Command;

use crate::util::{copy_dir, root, run_expect};

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A scenario of four hosts on two leaves, with the given tail.
fn small_scenario(dir: &Path, tail: &str) -> std::path::PathBuf {
    let p = dir.join("s.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"small\"\n[topology.leaf_spine]\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n\
             host_rate_gbps = 100\nfabric_rate_gbps = 100\nlink_delay_ns = 1000\n{tail}"
        ),
    )
    .unwrap();
    p
}

#[test]
fn endless_and_special_files_are_refused_by_kind_or_size() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    // A device with no end stops at the format's limit.
    let (_, err) = run_expect(&["scenario", "check", "/dev/zero"], 1);
    assert_eq!(
        err,
        "error: /dev/zero: larger than the 256 MiB a scenario file may have\n"
    );
    let (_, err) = run_expect(&["nccl", "check", "/dev/zero"], 1);
    assert_eq!(
        err,
        "error: /dev/zero: larger than the 64 MiB a nccl-tests log may have\n"
    );
    let (_, err) = run_expect(&["diagnose", "nccl", "/dev/zero"], 1);
    assert!(
        err.contains("larger than the 64 MiB a nccl-tests log may have"),
        "{err}"
    );
    // A FIFO with no writer reads as empty instead of blocking.
    let (_, err) = run_expect(&["nccl", "check", s(&fifo)], 1);
    assert!(err.contains("no nccl-tests output found"), "{err}");
    // A directory is named as one.
    let (_, err) = run_expect(&["scenario", "check", s(dir.path())], 1);
    assert!(err.contains("is a directory, expected a file"), "{err}");
    // A missing file says so once.
    let (_, err) = run_expect(&["sim", "no/such.toml"], 1);
    assert_eq!(
        err,
        "error: no/such.toml: cannot read: No such file or directory (os error 2)\n"
    );
}

#[test]
fn a_stray_byte_in_a_log_is_reported_with_its_line_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.txt");
    let mut text = std::fs::read(
        root().join("crates/xirang-collective/test_data/nccl-tests/pair-2node-1gpu-healthy.txt"),
    )
    .unwrap();
    text.splice(0..0, b"garbage \xff\xfe from another rank\n".iter().copied());
    std::fs::write(&log, &text).unwrap();
    let (out, err) = run_expect(&["nccl", "check", s(&log), "--nics", "1", "--nic-gbps", "100"], 0);
    assert!(
        err.contains("log.txt:1: bytes that are not UTF-8 text, read as U+FFFD"),
        "{err}"
    );
    assert!(out.contains("sendrecv") || out.contains("size"), "{out}");
}

#[test]
fn sim_writes_its_directory_whole_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let sc = small_scenario(
        dir.path(),
        "[workloads.w.flows]\nlist = [{ src = \"h0\", dst = \"h3\", bytes = 100000 }]\n",
    );
    // Someone else's directory is refused before the run, and left as it was.
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("notes.txt"), "mine").unwrap();
    let (_, err) = run_expect(&["sim", s(&sc), "--out", s(&home), "--quiet"], 1);
    assert!(
        err.contains("holds a file this command does not write (`notes.txt`); give a new or empty directory"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&home).unwrap().count(), 1);
    // A FIFO where the directory should be is not replaced.
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let (_, err) = run_expect(&["sim", s(&sc), "--out", s(&fifo), "--quiet"], 1);
    assert!(err.contains("is a FIFO"), "{err}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // A run's own directory is replaced; nothing is left beside it.
    let out = dir.path().join("run");
    for _ in 0..2 {
        run_expect(&["sim", s(&sc), "--out", s(&out), "--quiet"], 0);
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["fifo", "home", "run", "s.toml"]);
}

#[test]
fn diagnosis_refuses_runs_without_counters_over_time() {
    let dir = tempfile::tempdir().unwrap();
    let sc = small_scenario(
        dir.path(),
        "[workloads.w.flows]\nlist = [{ src = \"h0\", dst = \"h3\", bytes = 100000 }]\n",
    );
    let out = dir.path().join("run");
    run_expect(&["sim", s(&sc), "--out", s(&out), "--quiet"], 0);
    let (_, err) = run_expect(&["diagnose", "--sim-out", s(&out)], 1);
    assert!(
        err.contains("an unsampled run (no counters_series.csv)") && err.contains("--sample"),
        "{err}"
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (_, err) = run_expect(&["diagnose", "--sim-out", s(&empty)], 1);
    assert!(err.contains("expected a `xirang sim --out` directory"), "{err}");
}

#[test]
fn rollout_never_adds_its_tables_to_another_programs_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.sqlite");
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute_batch("CREATE TABLE photos (id INTEGER);").unwrap();
    drop(c);
    let before = std::fs::read(&db).unwrap();
    for cmd in ["log", "status"] {
        let (_, err) = run_expect(&["rollout", cmd, "--state", s(&db)], 1);
        assert!(
            err.contains("another program's SQLite database (tables: photos), not a rollout state file"),
            "{cmd}: {err}"
        );
    }
    assert_eq!(std::fs::read(&db).unwrap(), before, "the database was changed");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database").unwrap();
    let (_, err) = run_expect(&["rollout", "status", "--state", s(&text)], 1);
    assert!(err.contains("not an SQLite database"), "{err}");
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "not a database");
}

#[test]
fn a_fifo_in_a_host_tree_is_skipped_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    copy_dir(&root().join("crates/xirang-host/test_data/sysfs/procfs"), &tree);
    let fw = tree.join("sys/class/infiniband/mlx5_0/fw_ver");
    let fw = std::fs::canonicalize(&fw).unwrap_or(fw);
    std::fs::remove_file(&fw).unwrap();
    mkfifo(&fw);
    let (out, _) = run_expect(&["host", "show", "--root", s(&tree), "--json"], 0);
    assert!(out.contains("mlx5_0"), "{out}");
}

#[test]
fn a_truncated_switch_configuration_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let sw = dir.path().join("switches");
    std::fs::create_dir(&sw).unwrap();
    std::fs::copy(
        root().join("crates/xirang-audit/test_data/cluster/switches/leaf1.json"),
        sw.join("leaf1.json"),
    )
    .unwrap();
    std::fs::write(sw.join("leaf2.json"), "{\"PORT\": {\n").unwrap();
    let cab = dir.path().join("cabling.toml");
    std::fs::write(
        &cab,
        "[[link]]\nhost = \"h1\"\nnic = \"mlx5_0\"\nswitch = \"leaf2\"\nport = \"Ethernet0\"\n",
    )
    .unwrap();
    let (_, err) = run_expect(&["audit", "--switches", s(&sw), "--topology", s(&cab)], 1);
    assert!(
        err.contains("link 1: switch `leaf2`: its configuration")
            && err.contains("leaf2.json could not be read")
            && err.contains("invalid JSON at line 2"),
        "{err}"
    );
}

#[test]
fn numbers_on_the_command_line_have_stated_ranges() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["memreg", "plan", "scenarios/default.toml", "--headroom", "1e300"],
            "expected a headroom of 0..=10 (0 to 1000% on top of the need), found 1e300",
        ),
        (
            &[
                "nccl",
                "check",
                "crates/xirang-collective/test_data/nccl-tests/pair-2node-1gpu-healthy.txt",
                "--nics",
                "4000000000",
            ],
            "--nics: expected 1..=64 NICs per node, found 4000000000",
        ),
        (
            &[
                "nccl",
                "check",
                "crates/xirang-collective/test_data/nccl-tests/pair-2node-1gpu-healthy.txt",
                "--nic-gbps",
                "1e300",
            ],
            "--nic-gbps: expected a rate of 0.001..=16000 Gbit/s (1 Mbit/s to 16 Tbit/s), found 1e300",
        ),
        (
            &["rollout", "simulate", "--nodes", "4000000000"],
            "--nodes: expected 1..=50000 nodes, found 4000000000",
        ),
        (
            &["rollout", "simulate", "--nodes", "0"],
            "--nodes: expected 1..=50000 nodes, found 0",
        ),
        (
            &["rollout", "simulate", "--rack-size", "0"],
            "--rack-size: expected 1..=512 nodes per rack",
        ),
        (
            &[
                "plan",
                "overlap",
                "models/transformer-7b.toml",
                "--first-bucket-mib",
                "1e300",
            ],
            "--first-bucket-mib: expected a size above 0 and at most 65536 MiB",
        ),
    ];
    for (args, want) in cases {
        let (_, err) = run_expect(args, 1);
        assert!(err.contains(want), "xirang {}: {err}", args.join(" "));
    }
    // clap's own range checks are usage errors (exit 2).
    for args in [
        &["tune", "--budget", "4000000000"][..],
        &["diagnose", "bench", "--hosts", "0"],
        &[
            "plan",
            "batching",
            "models/llama-70b-tp8-serving.toml",
            "--requests",
            "99",
        ],
        &["monitor", "bench", "--nics", "1000"],
    ] {
        run_expect(args, 2);
    }
}

#[test]
fn a_lossy_path_ends_with_a_report_of_its_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let tail = "[[faults]]\nkind = \"link_errors\"\ntarget = \"leaf0:0\"\nloss = 0.04\n\n\
                [workloads.w.flows]\nlist = [{ src = \"h0\", dst = \"h3\", bytes = 10000000 }]\n";
    let sc = small_scenario(dir.path(), tail);
    let out = dir.path().join("o");
    let (_, err) = run_expect(&["sim", s(&sc), "--out", s(&out), "--quiet"], 0);
    assert!(
        err.contains("ACK timeout(s) of 4.295 s each (config.transport.ib_timeout 20, NCCL_IB_TIMEOUT)"),
        "{err}"
    );
    // The timeout is the scenario's to set, as NCCL_IB_TIMEOUT is the job's.
    let sc = small_scenario(
        dir.path(),
        &format!("[config.transport]\nib_timeout = 12\n{tail}"),
    );
    let (_, err) = run_expect(&["sim", s(&sc), "--out", s(&out), "--quiet"], 0);
    assert!(
        err.contains("of 0.017 s each (config.transport.ib_timeout 12"),
        "{err}"
    );
}

#[test]
fn hpcc_files_without_a_tier_are_not_blamed_for_the_reference_settings() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("one-switch.txt");
    std::fs::write(&topo, "3 1 2\n2\n0 2 100Gbps 0.001ms 0\n1 2 100Gbps 0.001ms 0\n").unwrap();
    let flows = dir.path().join("f.txt");
    std::fs::write(&flows, "1\n0 1 3 100 1000000 2.0\n").unwrap();
    let out = dir.path().join("o");
    for cc in ["dcqcn", "timely", "hpcc", "dctcp"] {
        run_expect(
            &[
                "sim",
                "--hpcc-topology",
                s(&topo),
                "--hpcc-flows",
                s(&flows),
                "--cc",
                cc,
                "--out",
                s(&out),
                "--quiet",
            ],
            0,
        );
    }
}

#[test]
fn tune_and_monitor_never_open_another_programs_database() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tune");
    std::fs::create_dir(&out).unwrap();
    let db = out.join("trials.sqlite");
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute_batch("CREATE TABLE photos (id INTEGER);").unwrap();
    drop(c);
    let before = std::fs::read(&db).unwrap();
    let (_, err) = run_expect(&["tune", "--out", s(&out), "--resume", "--quiet"], 1);
    assert!(
        err.contains("another program's SQLite database (tables: photos), not a trial log"),
        "{err}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);
    // The monitor's history: a FIFO is refused by kind, not opened.
    let fifo = dir.path().join("history.sqlite");
    mkfifo(&fifo);
    let (_, err) = run_expect(&["monitor", "query", "--history", s(&fifo), "--since", "1m"], 1);
    assert!(err.contains("is a FIFO, expected a file"), "{err}");
    let (_, err) = run_expect(&["diagnose", "--history", s(&fifo)], 1);
    assert!(err.contains("is a FIFO, expected a file"), "{err}");
}
