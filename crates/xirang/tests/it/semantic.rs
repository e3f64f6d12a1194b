//! Issue 44's examples, each driven through the real binary with its exact message: inputs
//! that once passed silently with an answer that looked valid. The scenario, policy,
//! rule and fleet cases are data-driven in their crates (`test_data/scenarios/err`,
//! `xirang-rollout/tests/inputs.rs`, `xirang-monitor/tests/shipped.rs`).

use std::path::Path;
use std::time::SystemTime;

use crate::util::{root, run_expect};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The H100 AllReduce fixture's header and first rows, then `rows`.
fn nccl_log(dir: &Path, rows: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(
        root().join("crates/xirang-collective/test_data/nccl-tests/h100-1node-8gpu-all-collectives.txt"),
    )
    .unwrap();
    let head: Vec<&str> = text.lines().take(21).collect();
    let p = dir.join("log.txt");
    std::fs::write(
        &p,
        format!(
            "{}\n{rows}# Out of bounds values : 0 OK\n#\n# Collective test concluded: all_reduce_perf\n",
            head.join("\n")
        ),
    )
    .unwrap();
    p
}

#[test]
fn nccl_tests_rows_that_break_their_own_arithmetic_are_input_problems_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    // A size of 2^64 - 1 was shown as `16777216 TiB ... 1247769586762%`.
    let log = nccl_log(
        dir.path(),
        "18446744073709551615   2305843009213693951    double     sum      -1  62340.7  275.58  482.27       0  62338.2  275.59  482.29       0\n",
    );
    let (out, _) = run_expect(&["nccl", "check", s(&log)], 0);
    assert!(
        out.contains(
            "warning: line 22: result row ignored: algbw 275.58 GB/s (out-of-place) is not size / time = 18446744073709551615 B / 62340.7 us = 2.9590210045299e11 GB/s, as the run's other rows are"
        ),
        "{out}"
    );
    assert!(!out.contains("TiB"), "{out}");
    // A time of 0 gave a false SLOW finding (and a NIC blamed by diagnose).
    let log = nccl_log(
        dir.path(),
        " 17179869184    2147483648    double     sum      -1     0.00  275.58  482.27       0     0.00  275.50  482.12       0\n",
    );
    let (out, _) = run_expect(&["nccl", "check", s(&log)], 0);
    assert!(
        out.contains("warning: line 22: result row ignored: time 0.00 us (out-of-place) for 17179869184 bytes: nccl-tests prints no time below 0.01 us, and never times a collective at 0"),
        "{out}"
    );
    assert!(!out.contains("SLOW"), "{out}");
    let (out, err) = run_expect(
        &["diagnose", "nccl", "--nics", "8", "--nic-gbps", "400", s(&log)],
        0,
    );
    assert!(
        err.contains("log.txt:22: result row ignored: time 0.00 us") && out.contains("No fault found"),
        "{out}\n{err}"
    );
    // busbw against algbw x 2(n-1)/n, when the run's other rows agree on the factor.
    let log = nccl_log(
        dir.path(),
        "  2147483648     268435456    double     sum      -1  7944.10  270.32  999.00       0  7944.04  270.32  473.06       0\n",
    );
    let (out, _) = run_expect(&["nccl", "check", s(&log)], 0);
    assert!(
        out.contains("warning: line 22: result row ignored: busbw 999.00 GB/s is not algbw 270.32 x 1.750 (AllReduce, 8 ranks) = 473.06 GB/s, as the run's other rows are"),
        "{out}"
    );
}

#[test]
fn names_that_match_nothing_are_refused_with_what_exists() {
    let (_, err) = run_expect(
        &["rollout", "simulate", "--nodes", "64", "--degraded", "n9999"],
        1,
    );
    assert_eq!(
        err,
        "error: --degraded n9999: no such node in the fleet; the fleet's 64 nodes are n0001 to n0064\n"
    );
    let (_, err) = run_expect(
        &["rollout", "simulate", "--nodes", "64", "--degraded", "n00011"],
        1,
    );
    assert!(err.contains("did you mean `n0001`?"), "{err}");
}

#[test]
fn planners_refuse_groups_and_sizes_beyond_their_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let serving = std::fs::read_to_string(root().join("models/llama-70b-tp8-serving.toml")).unwrap();
    let line = serving.lines().position(|l| l.starts_with("tp_ranks")).unwrap() + 1;
    for (tp, want) in [
        // 33 GPUs were planned on the 32 of the default scenario.
        (
            "33",
            "expected at most the 32 GPUs of scenario `default` (16 hosts), found 33",
        ),
        // 100,000 spun with no output.
        (
            "100000",
            "expected at most the 32 GPUs of scenario `default` (16 hosts), found 100000",
        ),
        (
            "3",
            "expected at most 2 GPUs (one host) or a multiple of 2 (whole hosts of scenario `default`), found 3",
        ),
    ] {
        let p = dir.path().join("serving.toml");
        std::fs::write(&p, serving.replace("tp_ranks = 8", &format!("tp_ranks = {tp}"))).unwrap();
        let (_, err) = run_expect(&["plan", "batching", s(&p)], 1);
        assert_eq!(err, format!("error: {}:{line}: tp_ranks: {want}\n", p.display()));
    }
    // A gradient of 2^64 - 1 bytes spun with no output.
    let model = dir.path().join("model.toml");
    std::fs::write(
        &model,
        "name = \"m\"\nforward_us = 1000\n[[layer]]\nname = \"l0\"\nbackward_us = 100\ngrad_bytes = 18446744073709551615\n",
    )
    .unwrap();
    let (_, err) = run_expect(&["plan", "overlap", s(&model)], 1);
    assert_eq!(
        err,
        format!(
            "error: {}:6: layer[0].grad_bytes: expected at most 1099511627776 bytes (1 TiB, the largest collective buffer), found 18446744073709551615\n",
            model.display()
        )
    );
    // Rust's words once: `invalid value: integer -1, expected u64`, with no key path.
    std::fs::write(
        &model,
        "name = \"m\"\nforward_us = 1000\n[[layer]]\nname = \"l0\"\nbackward_us = 100\ngrad_bytes = -1\n",
    )
    .unwrap();
    let (_, err) = run_expect(&["plan", "overlap", s(&model)], 1);
    assert_eq!(
        err,
        format!(
            "error: {}:6: layer[0].grad_bytes: expected a non-negative integer, found -1\n",
            model.display()
        )
    );
}

/// Bytes and modification time of every file in `dir`.
fn state(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = std::fs::metadata(&p).unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap_or_default(),
                m.modified().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn read_only_commands_leave_every_input_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    // An empty file was turned into a 32 KB SQLite database by `diagnose --history`.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    // A real history, closed by its writer.
    let hist = dir.path().join("history.db");
    {
        use xirang_monitor::history::{History, Retention, SeriesKey};
        let mut h = History::open(&hist, Retention::default()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        for i in 0..5 {
            h.append(
                now - (5 - i) * 10_000,
                &[(
                    SeriesKey::new(
                        "xirang_pcie_link_downgraded",
                        [("device", "mlx5_0"), ("host", "h1")],
                    ),
                    0.0,
                )],
            )
            .unwrap();
        }
    }
    let before = state(dir.path());
    let (_, err) = run_expect(&["diagnose", "--history", s(&empty)], 1);
    assert!(
        err.contains("an empty file, not a xirang monitor history"),
        "{err}"
    );
    let (_, err) = run_expect(&["monitor", "query", "--history", s(&empty)], 1);
    assert_eq!(
        err,
        format!(
            "error: {}: an empty file, not a xirang monitor history; the agent writes a history with `xirang monitor --history FILE`\n",
            empty.display()
        )
    );
    run_expect(&["diagnose", "--history", s(&hist), "--since", "1h"], 0);
    let (out, _) = run_expect(&["monitor", "query", "--history", s(&hist), "--since", "1h"], 0);
    assert!(out.contains("xirang_pcie_link_downgraded"), "{out}");
    // Nothing created beside them (no -shm, no -wal), nothing touched.
    assert_eq!(state(dir.path()), before);
}

#[test]
fn a_disconnected_fabric_has_no_bisection_and_no_diameter() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.toml");
    let nic = "nics = [{ name = \"mlx5_0\", model = \"ConnectX-7\", firmware = \"28.39.2048\", speed_gbps = 100, pcie_switch = \"p0\", pcie = { cur_speed_gts = 32.0, cur_width = 16, max_speed_gts = 32.0, max_width = 16 } }]\npcie_switches = [{ name = \"p0\", socket = 0 }]\n";
    let mut t = String::from("name = \"split\"\n");
    for h in ["a", "b", "c"] {
        t.push_str(&format!("[[topology.explicit.hosts]]\nname = \"{h}\"\n{nic}"));
    }
    for sw in ["s1", "s2"] {
        t.push_str(&format!(
            "[[topology.explicit.switches]]\nname = \"{sw}\"\ntier = \"leaf\"\nports = 4\n"
        ));
    }
    for (h, sw) in [("a", "s1"), ("b", "s1"), ("c", "s2")] {
        t.push_str(&format!(
            "[[topology.explicit.links]]\na = \"{h}/mlx5_0\"\nb = \"{sw}\"\nrate_gbps = 100\n"
        ));
    }
    std::fs::write(&p, t).unwrap();
    let (out, _) = run_expect(&["topo", "show", s(&p)], 0);
    assert!(
        out.contains("0 Gbit/s (disconnected: some hosts cannot reach others)"),
        "{out}"
    );
    assert!(out.contains("infinite: some NICs cannot reach others"), "{out}");
    assert!(!out.contains("(full)"), "{out}");
}

/// A generated scenario of a million flows (82 MB) needed 3.1 GB to check and aborted
/// under a 2 GB address-space limit.
#[test]
fn a_million_flow_scenario_checks_within_two_gigabytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.toml");
    million_flows(&p, None);
    let (code, _, err) = check_within_two_gigabytes(&p);
    assert_eq!(code, Some(0), "{err}");
    // And a problem in it is reported, with its key path, inside the same limit (a line
    // lookup once built the whole document's tree for each diagnostic).
    million_flows(&p, Some(500_000));
    let (code, _, err) = check_within_two_gigabytes(&p);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "{}: workloads.w.flows.list[500000].dst: unknown host `h999`; did you mean `h9`?\n",
            p.display()
        )
    );
}

fn check_within_two_gigabytes(p: &Path) -> (Option<i32>, String, String) {
    let bin = assert_cmd::cargo::cargo_bin("xirang");
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" scenario check \"$1\"")
        .arg(&bin)
        .arg(p)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A generated scenario of a million flows, one line each; flow `bad` to a host that
/// does not exist.
fn million_flows(p: &Path, bad: Option<u64>) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(p).unwrap());
    write!(
        f,
        "name = \"big\"\n[topology.leaf_spine]\nleaves = 8\nspines = 4\nhosts_per_leaf = 8\n\
         host_rate_gbps = 100\nfabric_rate_gbps = 100\n\n[workloads.w.flows]\nlist = [\n"
    )
    .unwrap();
    for i in 0..1_000_000u64 {
        let a = i % 64;
        let b = (a + 1 + (i * 7) % 63) % 64;
        let b = if bad == Some(i) { 999 } else { b };
        writeln!(
            f,
            "  {{ id = \"f{i}\", src = \"h{a}\", dst = \"h{b}\", bytes = {}, start_us = {}.{:02} }},",
            1000 + i % 99_000,
            i / 100,
            i % 100
        )
        .unwrap();
    }
    writeln!(f, "]").unwrap();
}

#[test]
fn bench_cases_and_history_series_named_by_the_user_must_exist() {
    // `--only nosuchcase` printed an empty table with exit 0; alone, it was ignored.
    let (_, err) = run_expect(&["bench", "--scale", "--only", "nosuchcase"], 1);
    assert!(
        err.starts_with("error: --only nosuchcase: no case name contains it; the cases are "),
        "{err}"
    );
    let (_, err) = run_expect(&["bench", "--only", "ring"], 1);
    assert_eq!(
        err,
        "error: --only selects among the --scale, --parallel or --fast-forward cases: give one of them\n"
    );
    // `monitor query --counter` with a typo printed "0 series" and exit 0.
    let dir = tempfile::tempdir().unwrap();
    let hist = dir.path().join("history.db");
    {
        use xirang_monitor::history::{History, Retention, SeriesKey};
        let mut h = History::open(&hist, Retention::default()).unwrap();
        h.append(
            1,
            &[(
                SeriesKey::new("xirang_pcie_link_width", [("device", "mlx5_0")]),
                16.0,
            )],
        )
        .unwrap();
    }
    let (_, err) = run_expect(
        &[
            "monitor",
            "query",
            "--history",
            s(&hist),
            "--counter",
            "xirang_pcie_link_widht",
        ],
        1,
    );
    assert_eq!(
        err,
        format!(
            "error: --counter xirang_pcie_link_widht: no series of {} has this name; did you mean `xirang_pcie_link_width`?\n",
            hist.display()
        )
    );
}

#[test]
fn cabling_that_plugs_two_cables_into_one_port_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = root().join("crates/xirang-audit/test_data/cluster");
    let text = std::fs::read_to_string(cluster.join("topology.toml")).unwrap();
    let p = dir.path().join("topology.toml");
    std::fs::write(
        &p,
        text.replacen(
            "host = \"h2\"\nnic = \"mlx5_0\"\nswitch = \"leaf1\"\nport = \"Ethernet4\"",
            "host = \"h2\"\nnic = \"mlx5_0\"\nswitch = \"leaf1\"\nport = \"Ethernet0\"",
            1,
        ),
    )
    .unwrap();
    let hosts = cluster.join("hosts");
    let (_, err) = run_expect(&["audit", "--hosts", s(&hosts), "--topology", s(&p)], 1);
    assert_eq!(
        err,
        format!(
            "error: {}: link 3: switch port `leaf1` `Ethernet0` is cabled twice (link 1 and link 3); expected one cable per port\n",
            p.display()
        )
    );
}
