//! `xirang nccl check`: real nccl-tests logs through the binary.

use crate::util::{run_expect, run_json};

const DIR: &str = "crates/xirang-collective/test_data/nccl-tests";

fn fixture(name: &str) -> String {
    format!("{DIR}/{name}")
}

#[test]
fn a_healthy_run_has_no_findings() {
    let f = fixture("h100-2node-4gpu-hdr-ib-debug-info.txt");
    let (out, _) = run_expect(&["nccl", "check", &f, "--nics", "4", "--nic-gbps", "200"], 0);
    assert!(
        out.contains("all_reduce_perf_mpi (line 1): 8 ranks on 2 hosts"),
        "{out}"
    );
    assert!(out.contains("8 GiB"), "{out}");
    assert!(out.ends_with("no findings\n"), "{out}");
    let v = run_json(&["nccl", "check", &f, "--nics", "4", "--nic-gbps", "200", "--json"]);
    let sizes = v["runs"][0]["check"]["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 31);
    assert_eq!(v["findings"], 0);
    let last = &sizes[30];
    assert_eq!(last["size_bytes"], 8_589_934_592u64);
    assert_eq!(last["measured_busbw_gbs"], 156.3);
}

#[test]
fn slow_sizes_failures_and_corruption_are_findings() {
    // TCP sockets against a model of 8 x 400 Gbit/s RDMA: far below.
    let (out, _) = run_expect(
        &[
            "nccl",
            "check",
            &fixture("l40s-2node-1gpu-socket-ib-disabled.txt"),
        ],
        1,
    );
    assert!(
        out.contains("SLOW") && out.contains("below 80% of the model"),
        "{out}"
    );
    let (out, _) = run_expect(
        &["nccl", "check", &fixture("pair-2node-1gpu-network-error.txt")],
        1,
    );
    assert!(out.contains("finding: the test failed at line 12"), "{out}");
    assert!(
        out.contains("not compared with the model: no result rows"),
        "{out}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("wrong.txt");
    let text = std::fs::read_to_string(crate::util::root().join(fixture("h100-2node-8gpu-roce-oci.txt")))
        .unwrap()
        .replace("471.22      0", "471.22     12");
    std::fs::write(&bad, text).unwrap();
    let (out, _) = run_expect(
        &[
            "nccl",
            "check",
            bad.to_str().unwrap(),
            "--nics",
            "16",
            "--nic-gbps",
            "200",
            "--algo",
            "nvlstree",
        ],
        1,
    );
    assert!(out.contains("#wrong 12 (DATA CORRUPTION)"), "{out}");
    assert!(out.contains("1 sizes report #wrong > 0"), "{out}");
}

#[test]
fn unnamed_tests_need_the_collective() {
    let f = fixture("sendrecv-2node-1gpu-roce400.txt");
    let (out, _) = run_expect(&["nccl", "check", &f, "--nics", "1"], 1);
    assert!(out.contains("pass --collective"), "{out}");
    let (out, _) = run_expect(
        &["nccl", "check", &f, "--nics", "1", "--collective", "sendrecv"],
        0,
    );
    assert!(out.contains("no findings"), "{out}");
}

#[test]
fn bad_input_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 1\n  8  2  float  sum  -1  12.0  0.00  zero  0  12.0  0.00  0.00  0\n").unwrap();
    let (_, err) = run_expect(&["nccl", "check", bad.to_str().unwrap()], 1);
    assert!(
        err.contains("bad.txt:2: expected busbw in GB/s (a number) in column 8, found `zero`"),
        "{err}"
    );
    std::fs::write(&bad, "hello\n").unwrap();
    let (_, err) = run_expect(&["nccl", "check", bad.to_str().unwrap()], 1);
    assert!(err.contains("no nccl-tests output found"), "{err}");
    let (_, err) = run_expect(&["nccl", "check", "no/such/file.txt"], 1);
    assert!(
        err.contains("no/such/file.txt: cannot read: No such file or directory (os error 2)\n"),
        "{err}"
    );
}

#[test]
fn advise_writes_an_environment_file() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("nccl.env");
    let (out, _) = run_expect(
        &[
            "nccl",
            "advise",
            "scenarios/default.toml",
            "--out",
            env.to_str().unwrap(),
        ],
        0,
    );
    assert!(out.contains("predicted AllReduce bus bandwidth"), "{out}");
    let text = std::fs::read_to_string(&env).unwrap();
    insta::assert_snapshot!(text);
    // The file is shell syntax: every line is a comment or NAME=value.
    assert!(text.lines().all(|l| l.is_empty()
        || l.starts_with('#')
        || l.split_once('=').is_some_and(|(k, _)| k.starts_with("NCCL_"))));
    let v = run_json(&[
        "nccl",
        "advise",
        "scenarios/rail-64gpu.toml",
        "--out",
        env.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["settings"][0]["name"], "NCCL_IB_HCA");
    assert_eq!(v["table"].as_array().unwrap().len(), 12);
}

/// nccl-tests' row layout (`common.cu`): `%12li  %12li  %8s  %6s  %6i`, then out of place
/// and in place each `  %7s  %6.2f  %6.2f  %5s`; a checked `#wrong` count is 5 wide in
/// older releases and 6 in 2.17 (`pair-2node-1gpu-healthy.txt`), `N/A` always 5.
const ROW_WIDTHS: [usize; 13] = [12, 12, 8, 6, 6, 7, 6, 6, 5, 7, 6, 6, 5];

/// Checks a result row against nccl-tests' fixed widths: every field right-aligned in its
/// column, two spaces between columns.
fn follows_nccl_tests_layout(row: &str) -> bool {
    let mut at = 0;
    for (i, w) in ROW_WIDTHS.iter().enumerate() {
        let start = if i == 0 { 0 } else { at + 2 };
        if i > 0 && row.get(at..start) != Some("  ") {
            return false;
        }
        // A count too wide for 5 columns: the 6-wide column of 2.17.
        let w = if (i == 8 || i == 12) && row.get(start..start + w).is_some_and(|f| f.trim().is_empty()) {
            w + 1
        } else {
            *w
        };
        let Some(field) = row.get(start..start + w) else {
            return false;
        };
        if field.trim().is_empty() || field.ends_with(' ') {
            return false;
        }
        at = start + w;
    }
    at == row.len()
}

#[test]
fn the_fixtures_follow_the_layout_the_sweep_is_checked_against() {
    let rows_of = |name: &str| -> Vec<String> {
        let text = std::fs::read_to_string(crate::util::root().join(fixture(name))).unwrap();
        text.lines()
            .filter(|l| l.starts_with(' ') && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    };
    // nccl-tests 2.17 (6-wide counts, N/A) and an older release (5-wide counts).
    let rows = rows_of("pair-2node-1gpu-healthy.txt");
    assert_eq!(rows.len(), 20);
    assert!(rows.iter().all(|r| follows_nccl_tests_layout(r)), "{rows:#?}");
    assert!(!follows_nccl_tests_layout(
        &rows[0].replace("    N/A", "     N/A")
    ));
    let rows = rows_of("l40s-2node-2gpu-roce-sriov.txt");
    assert!(rows.len() >= 30);
    assert!(rows.iter().all(|r| follows_nccl_tests_layout(r)), "{rows:#?}");
    assert!(!follows_nccl_tests_layout(&rows[0].replacen("  ", "   ", 1)));
}

#[test]
fn a_sweep_is_an_nccl_tests_log_that_check_reads() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = "scenarios/nccl-tests/hdr-2node-4gpu.toml";
    let (out, _) = run_expect(
        &["nccl", "sweep", scenario, "-b", "1M", "-e", "16M", "-f", "4"],
        0,
    );
    insta::assert_snapshot!(out);
    // The project's own reader takes it as a real log.
    let report = xirang_collective::nccl_tests::parse(&out).unwrap();
    assert_eq!(report.tests.len(), 1);
    let t = &report.tests[0];
    assert_eq!(t.name.as_deref(), Some("all_reduce_perf"));
    assert_eq!(t.ranks.len(), 8);
    let sizes: Vec<u64> = t.rows.iter().map(|r| r.size_bytes).collect();
    assert_eq!(sizes, [1 << 20, 4 << 20, 16 << 20]);
    assert!(t.avg_busbw_gbs.is_some());
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(rows.iter().all(|r| follows_nccl_tests_layout(r)), "{out}");

    // A healthy twin's sweep is a healthy run: no findings against the model of its
    // hardware (4 x 200 Gbit/s HDR per host).
    let log = dir.path().join("sweep.txt");
    std::fs::write(&log, &out).unwrap();
    let (check, _) = run_expect(
        &[
            "nccl",
            "check",
            log.to_str().unwrap(),
            "--nics",
            "4",
            "--nic-gbps",
            "200",
        ],
        0,
    );
    assert!(check.ends_with("no findings\n"), "{check}");

    // --json: per size what ran and the cost model beside it.
    let v = run_json(&[
        "nccl", "sweep", scenario, "-b", "1M", "-e", "16M", "-f", "4", "--json",
    ]);
    let points = v["sizes"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    for (p, row) in points.iter().zip(&t.rows) {
        assert_eq!(p["size_bytes"], row.size_bytes);
        let busbw = p["busbw_gbs"].as_f64().unwrap();
        assert!((busbw - row.out_of_place.busbw_gbs).abs() < 0.01, "{p}");
        assert!(p["model_busbw_gbs"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["simulated"].as_str().unwrap().contains('/'), "{p}");
    }
}

#[test]
fn a_sweep_counts_elements_as_nccl_tests_does() {
    // alltoall_perf: count per peer; sendrecv_perf: the whole buffer (fixture
    // `pair-2node-1gpu-healthy.txt`: 32 MiB of doubles is 2,097,152 and 4,194,304).
    let scenario = "scenarios/nccl-tests/pair-2node-1gpu-400g.toml";
    for (op, count, redop) in [("alltoall", 4_194_304, "none"), ("sendrecv", 8_388_608, "sum")] {
        let (out, _) = run_expect(
            &["nccl", "sweep", scenario, "--op", op, "-b", "32M", "-e", "32M"],
            0,
        );
        let t = xirang_collective::nccl_tests::parse(&out)
            .unwrap()
            .tests
            .swap_remove(0);
        assert_eq!(t.rows[0].count, count, "{op}\n{out}");
        assert_eq!(t.rows[0].redop, redop, "{op}\n{out}");
    }
}

#[test]
fn sweep_arguments_are_checked() {
    let scenario = "scenarios/nccl-tests/hdr-2node-4gpu.toml";
    let (_, err) = run_expect(&["nccl", "sweep", scenario, "-b", "64M", "-e", "1M"], 1);
    assert!(
        err.contains("--minbytes 67108864 is above --maxbytes 1048576"),
        "{err}"
    );
    let (_, err) = run_expect(&["nccl", "sweep", scenario, "-b", "1Q"], 2);
    assert!(err.contains("1Q"), "{err}");
    let (_, err) = run_expect(&["nccl", "sweep", scenario, "--workload", "nope"], 1);
    assert!(err.contains("nope"), "{err}");
}
