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
