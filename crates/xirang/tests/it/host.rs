//! `xirang host` and `xirang audit` through the real binary.

use crate::util::{run_expect, run_json};

const PROCFS: &str = "crates/xirang-host/test_data/sysfs/procfs";
const CLUSTER: &str = "crates/xirang-audit/test_data/cluster";

#[test]
fn host_show_without_rdma_says_so_and_keeps_pcie_facts() {
    // A host tree with one virtio NIC and no /sys/class/infiniband, like this machine.
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let dev = r.join("sys/devices/pci0000:00/0000:00:03.0");
    std::fs::create_dir_all(&dev).unwrap();
    for (f, v) in [
        ("class", "0x020000"),
        ("vendor", "0x1af4"),
        ("device", "0x1041"),
        ("numa_node", "0"),
        ("local_cpulist", "0-1"),
    ] {
        std::fs::write(dev.join(f), format!("{v}\n")).unwrap();
    }
    std::fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:00:03.0",
        r.join("sys/bus/pci/devices/0000:00:03.0"),
    )
    .unwrap();
    let root = r.to_str().unwrap();
    let (out, _) = run_expect(&["host", "show", "--root", root], 0);
    assert!(out.contains("RDMA devices: none"), "{out}");
    assert!(
        out.contains("0000:00:03.0") && out.contains("1af4:1041") && out.contains("0-1"),
        "{out}"
    );
    // This machine itself: whatever it has, it runs and says what it found.
    let (live, _) = run_expect(&["host", "show"], 0);
    assert!(live.starts_with("host "), "{live}");
}

#[test]
fn host_show_json_of_the_procfs_fixture() {
    let v = run_json(&["host", "show", "--root", PROCFS, "--json"]);
    let names: Vec<&str> = v["rdma"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hfi1_0", "mlx4_0", "mlx5_0"]);
    assert_eq!(v["netdevs"][0]["ecn"]["np"]["cnp_dscp"], 48);
}

#[test]
fn snapshot_through_the_binary_reads_back_the_same_host() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sub/h1.tar.gz");
    let f = file.to_str().unwrap();
    let h1 = format!("{CLUSTER}/hosts/h1");
    let (_, err) = run_expect(&["host", "snapshot", "--root", &h1, "--out", f], 0);
    assert!(err.contains("snapshot of h1 written"), "{err}");
    // Tools that are not installed here are recorded as missing, not fatal.
    assert!(
        err.contains("nvidia-smi-topo-m") && err.contains("missing"),
        "{err}"
    );
    let a = run_json(&["host", "show", "--root", &h1, "--json"]);
    let b = run_json(&["host", "show", "--snapshot", f, "--json"]);
    assert_eq!(a["rdma"], b["rdma"]);
    assert_eq!(a["pci"], b["pci"]);
    assert_eq!(a["netdevs"], b["netdevs"]);
    let (_, err) = run_expect(&["host", "show", "--snapshot", "Cargo.toml"], 1);
    assert!(
        err.contains("Cargo.toml") && err.contains("not a xirang snapshot"),
        "{err}"
    );
}

#[test]
fn audit_exit_codes_and_machine_outputs() {
    let hosts = format!("{CLUSTER}/hosts");
    let switches = format!("{CLUSTER}/switches");
    let topo = format!("{CLUSTER}/topology.toml");
    let policy = format!("{CLUSTER}/policy.toml");
    let base = [
        "audit",
        "--hosts",
        &hosts,
        "--switches",
        &switches,
        "--topology",
        &topo,
        "--policy",
        &policy,
    ];
    let (out, _) = run_expect(&base, 0);
    assert!(out.contains("audited 8 hosts and 2 switches: 0 errors"), "{out}");
    // A policy that disallows the cluster's firmware: 16 errors, exit 1, in every format.
    let dir = tempfile::tempdir().unwrap();
    let strict = dir.path().join("policy.toml");
    std::fs::write(
        &strict,
        "[[firmware]]\nboard_id = \"MT_0000000359\"\nallowed = [\"22.41.1000\"]\n",
    )
    .unwrap();
    let strict = strict.to_str().unwrap();
    let args = [
        "audit",
        "--hosts",
        &hosts,
        "--switches",
        &switches,
        "--topology",
        &topo,
        "--policy",
        strict,
    ];
    let (text, _) = run_expect(&args, 1);
    assert!(
        text.contains("Physical layer") && text.contains("PHY-FW-POLICY") && text.contains("fix: flash"),
        "{text}"
    );
    let (json, _) = run_expect(&[&args[..], &["--json"]].concat(), 1);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["summary"]["errors"], 16);
    let (sarif, _) = run_expect(&[&args[..], &["--sarif"]].concat(), 1);
    let s: serde_json::Value = serde_json::from_str(&sarif).unwrap();
    assert_eq!(s["version"], "2.1.0");
    assert_eq!(s["runs"][0]["results"].as_array().unwrap().len(), 16);
    assert_eq!(s["runs"][0]["results"][0]["level"], "error");
    // The audited fabric loads as a scenario.
    let scen = dir.path().join("fabric.toml");
    run_expect(
        &[&base[..], &["--emit-scenario", scen.to_str().unwrap()]].concat(),
        0,
    );
    let v = run_json(&["topo", "show", scen.to_str().unwrap(), "--json"]);
    assert_eq!((v["hosts"].as_u64(), v["switches"].as_u64()), (Some(8), Some(2)));
    // Usage problems.
    let (_, err) = run_expect(&["audit"], 1);
    assert!(err.contains("nothing to audit"), "{err}");
    let (_, err) = run_expect(&["audit", "--hosts", "no/such/dir"], 1);
    assert!(err.contains("no/such/dir"), "{err}");
}
