//! `xirang diagnose nccl` through the binary.

use crate::util::{run, run_expect};

const DIR: &str = "crates/xirang-collective/test_data/nccl-tests";

#[test]
fn nccl_logs_abort_exits_1_with_evidence_healthy_exits_0() {
    let bad = format!("{DIR}/pair-2node-1gpu-network-error.txt");
    let o = run(&["diagnose", "nccl", &bad, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["rule"], "NCCL-ABORT");
    assert_eq!(v[0]["class"], "link");
    assert_eq!(v[0]["entity"], "cnode2-005<->cnode2-016");
    assert_eq!(v[0]["evidence"][0]["source"], format!("{bad}:12"));
    let (out, _) = run_expect(
        &["diagnose", "nccl", &format!("{DIR}/pair-2node-1gpu-healthy.txt")],
        0,
    );
    assert_eq!(out, "No fault found.\n");
    let (_, err) = run_expect(&["diagnose", "nccl", "/nonexistent.log"], 1);
    assert!(err.contains("/nonexistent.log"), "{err}");
    // An empty or unrelated file is an error, not a clean bill of health.
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("empty.log", ""), ("noise.log", "hello\nworld 1 2 3\n")] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let (out, err) = run_expect(&["diagnose", "nccl", p.to_str().unwrap()], 1);
        assert!(!out.contains("No fault found"), "{out}");
        assert!(err.contains("no nccl-tests result table"), "{err}");
    }
}

#[test]
fn nccl_shortfalls_name_their_cause_and_say_what_was_not_judged() {
    let one_nic = format!("{DIR}/sendrecv-2node-4gpu-roce400-one-nic.txt");
    // Without the NIC rate: the sharing is read from NCCL's lines; stderr says the level
    // was not judged, stdout stays the findings.
    let o = run(&["diagnose", "nccl", &one_nic, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["rule"], "NCCL-NIC-SHARED");
    assert_eq!(v[0]["entity"], "MOC-R4PCC04U37/mlx5_5:1");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("note: ") && err.contains("pass --nic-gbps or --scenario"),
        "{err}"
    );
    // With it: the level against the model, and nothing left unjudged.
    let (out, err) = run_expect(&["diagnose", "nccl", &one_nic, "--nic-gbps", "400"], 1);
    assert!(out.contains("flat at 5.86 GB/s, 48% of the model"), "{out}");
    assert!(!err.contains("note: "), "{err}");
    // A collapse names the pair.
    let (out, _) = run_expect(
        &[
            "diagnose",
            "nccl",
            &format!("{DIR}/pair-2node-1gpu-collapse-cnode2-004_cnode2-006.txt"),
        ],
        1,
    );
    assert!(
        out.contains("link cnode2-004<->cnode2-006 — bandwidth falls as messages grow"),
        "{out}"
    );
    // Bad hardware flags are refused with what was expected.
    let (_, err) = run_expect(&["diagnose", "nccl", &one_nic, "--nic-gbps", "0"], 1);
    assert!(
        err.contains("--nic-gbps: expected a rate of 0.001..=16000 Gbit/s"),
        "{err}"
    );
}

/// Simulates `bytes` from h0 to h1 on a one-leaf fabric of 3 hosts with one `[[faults]]`
/// entry, counters sampled every 20 µs, written by `xirang sim --out`; returns the temp
/// dir (kept alive by the caller) and the output directory.
fn simulate_one_flow(bytes: u64, fault: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("one.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"
[topology.leaf_spine]
leaves = 1
spines = 1
hosts_per_leaf = 3
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.one.flows]
list = [{{ src = "h0", dst = "h1", bytes = {bytes} }}]

[[faults]]
{fault}"#
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    run_expect(
        &[
            "sim",
            scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--sample",
            "20us",
        ],
        0,
    );
    (dir, out)
}

/// A simulated run with a lossy NIC port, written by `xirang sim --out --sample`, read
/// back by `xirang diagnose --sim-out`: the port is named with its counters.
#[test]
fn a_simulated_bit_error_fault_is_found_from_the_sim_output() {
    let (_dir, out) = simulate_one_flow(
        20_000_000,
        "kind = \"link_errors\"\ntarget = \"h1/mlx5_0\"\nloss = 0.001\n",
    );
    let o = run(&["diagnose", "--sim-out", out.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v[0]["rule"], "LINK-ERRORS");
    assert_eq!(v[0]["entity"], "h1/mlx5_0/1");
    assert!(
        v[0]["evidence"][0]["value"]
            .as_str()
            .unwrap()
            .contains("from t+0 µs"),
        "{v:#}"
    );
    // The flows' paths are read too (for path votes); a damaged file names its line.
    assert!(
        std::fs::read_to_string(out.join("flows.json"))
            .unwrap()
            .contains("\"path\"")
    );
    std::fs::write(out.join("flows.json"), "[\n{\"src\": 1}\n]\n").unwrap();
    let (_, err) = run_expect(&["diagnose", "--sim-out", out.to_str().unwrap()], 1);
    assert!(err.contains("flows.json: line 2:"), "{err}");
}

/// A switch-side link trained down, read back through the binary: the sim output's
/// `links.csv` gives the cabling and nominal rates, so both ends of the slow link are one
/// finding named by its host end; a damaged `links.csv` is an error naming its line.
#[test]
fn a_link_trained_down_is_one_finding_through_the_sim_output() {
    let (_dir, out) = simulate_one_flow(
        2_000_000,
        "kind = \"slow_link\"\ntarget = \"leaf0:1\"\nrate_gbps = 25\n",
    );
    let links = std::fs::read_to_string(out.join("links.csv")).unwrap();
    assert!(links.starts_with("port_a,port_b,rate_gbps\n"), "{links}");
    assert!(links.contains("h1/mlx5_0/1,leaf0:1,100\n"), "{links}");
    let o = run(&["diagnose", "--sim-out", out.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(
        (v[0]["rule"].as_str(), v[0]["entity"].as_str()),
        (Some("LINK-SLOW"), Some("h1/mlx5_0/1"))
    );
    assert_eq!(v[0]["evidence"].as_array().unwrap().len(), 2, "both ends: {v:#}");
    assert!(
        v[0]["cause"]
            .as_str()
            .unwrap()
            .contains("runs at 25 Gbit/s instead of 100"),
        "{v:#}"
    );
    std::fs::write(
        out.join("links.csv"),
        "port_a,port_b,rate_gbps\nh1/mlx5_0/1,leaf0:1,fast\n",
    )
    .unwrap();
    let (stdout, err) = run_expect(&["diagnose", "--sim-out", out.to_str().unwrap()], 1);
    assert!(stdout.is_empty(), "no report from a damaged input: {stdout}");
    assert!(
        err.contains("links.csv: line 2: expected a rate in Gbit/s, found `fast`"),
        "{err}"
    );
}

/// The regular files of an evidence bundle, by name.
fn bundle_files(bundle: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    use std::io::Read;
    let f = std::fs::File::open(bundle).unwrap();
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut files = std::collections::BTreeMap::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut s = String::new();
        if e.header().entry_type().is_file() {
            e.read_to_string(&mut s).unwrap();
            files.insert(name, s);
        }
    }
    files
}

/// Acceptance 4 (first half): the bundle holds the report, the findings, the data the
/// diagnosis read, a manifest, and the kernel log lines or why there are none.
#[test]
fn the_evidence_bundle_holds_report_data_and_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("evidence.tar.gz");
    let bad = format!("{DIR}/pair-2node-1gpu-network-error.txt");
    let o = run(&["diagnose", "nccl", &bad, "--bundle", bundle.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let files = bundle_files(&bundle);
    assert!(files["report.txt"].contains("NCCL-ABORT"), "{files:?}");
    let findings: serde_json::Value = serde_json::from_str(&files["findings.json"]).unwrap();
    assert_eq!(findings[0]["rule"], "NCCL-ABORT");
    let log = files
        .iter()
        .find(|(k, _)| k.starts_with("logs/") && k.ends_with("pair-2node-1gpu-network-error.txt"))
        .map(|(_, v)| v)
        .expect("the log is in the bundle");
    assert_eq!(
        log,
        &std::fs::read_to_string(crate::util::root().join(&bad)).unwrap()
    );
    let m: serde_json::Value = serde_json::from_str(&files["manifest.json"]).unwrap();
    assert_eq!(m["findings"], 1);
    assert!(m["command"].as_str().unwrap().contains("diagnose nccl"));
    // On this machine dmesg may or may not be readable: either the lines or the reason.
    match files.get("kernel.log") {
        Some(_) => assert!(m["kernel_log"]["lines"].is_u64(), "{m:#}"),
        None => assert!(m["kernel_log"]["unavailable"].is_string(), "{m:#}"),
    }
    for f in m["files"].as_array().unwrap() {
        assert!(files.contains_key(f.as_str().unwrap()), "{f} listed but missing");
    }
}

/// `--inventory`: the audit's inventory directory joins a counter window. Its cabling
/// names the window's ports (here the fixture cluster's h1 is also the simulated h1),
/// its configuration findings join the report, and the bundle carries the audit and the
/// inventory's files.
#[test]
fn an_inventory_adds_cabling_audit_findings_and_bundle_files() {
    let (dir, out) = simulate_one_flow(
        2_000_000,
        "kind = \"link_errors\"\ntarget = \"h1/mlx5_0\"\nloss = 0.002\n",
    );
    // A copy of the audit's clean fixture cluster with h5's second NIC on firmware the
    // policy does not allow.
    let inv = dir.path().join("inventory");
    crate::util::copy_dir(
        &crate::util::root().join("crates/xirang-audit/test_data/cluster"),
        &inv,
    );
    std::fs::write(
        inv.join("hosts/h5/sys/class/infiniband/mlx5_1/fw_ver"),
        "22.36.1010\n",
    )
    .unwrap();
    let bundle = dir.path().join("evidence.tar.gz");
    let o = run(&[
        "diagnose",
        "--sim-out",
        out.to_str().unwrap(),
        "--inventory",
        inv.to_str().unwrap(),
        "--bundle",
        bundle.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("8 hosts, 2 switches, 17 links added"), "{stderr}");
    assert!(stdout.contains("LINK-ERRORS"), "{stdout}");
    assert!(stdout.contains("NIC h5/mlx5_1 — firmware 22.36.1010"), "{stdout}");
    // The simulated h1's lossy port is cabled to leaf1:Ethernet0 in the inventory.
    let files = bundle_files(&bundle);
    let window: serde_json::Value = serde_json::from_str(&files["window.json"]).unwrap();
    assert!(
        window["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l[0] == "leaf1:Ethernet0" && l[1] == "h1/mlx5_0/1"),
        "{:#}",
        window["links"]
    );
    let audit: serde_json::Value = serde_json::from_str(&files["inventory/audit.json"]).unwrap();
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "PHY-FW-POLICY"),
        "{audit:#}"
    );
    assert_eq!(
        files["inventory/topology.toml"],
        std::fs::read_to_string(inv.join("topology.toml")).unwrap()
    );
    assert!(files.contains_key("inventory/policy.toml"));
    // A directory that is not an inventory is an error that says what was expected.
    let (_, err) = run_expect(
        &[
            "diagnose",
            "--sim-out",
            out.to_str().unwrap(),
            "--inventory",
            out.to_str().unwrap(),
        ],
        1,
    );
    assert!(
        err.contains("expected an inventory directory with `hosts/`"),
        "{err}"
    );
}

const RAS: &str = "crates/xirang-diagnose/test_data/nccl-ras";

/// A RAS report naming a dead process on node 10.0.0.1, which the example cluster's h1
/// holds as a RoCE v2 address: the finding names h1's NICs and the switch ports they are
/// cabled to.
#[test]
fn nccl_ras_joins_a_dead_host_to_its_nics_and_switch_ports() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("ras.txt");
    std::fs::write(
        &report,
        "Errors\n======\n\nDEAD\n  1 job process is considered dead (unreachable via the RAS network)\n  Process 4242 on node 10.0.0.1 managing GPU 3\n",
    )
    .unwrap();
    let o = run(&[
        "diagnose",
        "nccl-ras",
        report.to_str().unwrap(),
        "--inventory",
        "crates/xirang-audit/test_data/cluster",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["rule"], "NCCL-RAS-DEAD");
    assert_eq!(v[0]["entity"], "10.0.0.1");
    let ev = v[0]["evidence"].as_array().unwrap();
    let inv = ev
        .iter()
        .find(|e| e["source"] == "inventory host h1")
        .unwrap_or_else(|| panic!("{v:#}"));
    let text = inv["value"].as_str().unwrap();
    assert!(
        text.contains("mlx5_0")
            && text.contains("cabled to leaf1:Ethernet0")
            && text.contains("cabled to leaf2:Ethernet0"),
        "{text}"
    );
}

/// A healthy report on standard input, and a job's RAS server asked over its protocol
/// (an older server: text only).
#[test]
fn nccl_ras_reads_stdin_and_a_running_jobs_server() {
    use std::io::{BufRead, Write};
    let healthy = std::fs::read(
        crate::util::root()
            .join(RAS)
            .join("02-text-communicators-running-ok.txt"),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_xirang"))
        .args(["diagnose", "nccl-ras", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&healthy).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "No fault found.\n");

    let dead = std::fs::read_to_string(
        crate::util::root()
            .join(RAS)
            .join("07-text-errors-dead-process.txt"),
    )
    .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        for line in std::io::BufReader::new(s).lines() {
            let cmd = line.unwrap().to_ascii_uppercase();
            let a = if cmd.starts_with("CLIENT PROTOCOL") {
                "SERVER PROTOCOL 2\n".to_string()
            } else if cmd.starts_with("TIMEOUT") {
                "OK\n".into()
            } else if cmd == "VERBOSE STATUS" {
                w.write_all(dead.as_bytes()).unwrap();
                return;
            } else {
                format!("ERROR: Unknown command {cmd}\n")
            };
            w.write_all(a.as_bytes()).unwrap();
        }
    });
    let (out, err) = run_expect(&["diagnose", "nccl-ras", "--connect", &addr, "--json"], 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["rule"], "NCCL-RAS-DEAD");
    assert_eq!(v[0]["evidence"][0]["source"], format!("ras {addr}:6"));
    assert!(err.contains("no JSON reports"), "{err}");
}
