//! The host reader against the real sysfs tree published by prometheus/procfs
//! (test_data/sysfs/SOURCE.md): every value upstream's tests assert (expected.json) is
//! asserted here, data-driven from that file.

use std::path::Path;

use serde_json::Value;
use xirang_host::inventory::{HostInventory, PciRole};
use xirang_host::snapshot;
use xirang_host::sysfs::{parse_gts, parse_rate_gbps, read_host};
use xirang_host::tree::{DirTree, Tree};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/sysfs/procfs");

fn expected() -> Value {
    let text = std::fs::read_to_string(Path::new(ROOT).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn inventory() -> HostInventory {
    read_host(&DirTree::new(ROOT))
}

/// procfs multiplies the rate's Gb/s by 125 000 000 to get bytes per second.
const BYTES_PER_GBIT: f64 = 125_000_000.0;

#[test]
fn infiniband_devices_match_upstream_expectations() {
    let exp = expected();
    let inv = inventory();
    let devs = exp["infiniband"].as_object().unwrap();
    assert_eq!(inv.rdma.len(), devs.len());
    for (name, e) in devs {
        let dev = inv
            .rdma
            .iter()
            .find(|d| &d.name == name)
            .unwrap_or_else(|| panic!("{name} not read"));
        assert_eq!(dev.board_id.as_deref(), e["board_id"].as_str(), "{name} board_id");
        assert_eq!(dev.fw_ver.as_deref(), e["fw_ver"].as_str(), "{name} fw_ver");
        assert_eq!(
            dev.hca_type.as_deref().unwrap_or(""),
            e["hca_type"].as_str().unwrap(),
            "{name} hca_type"
        );
        assert_eq!(
            dev.node_guid.as_deref(),
            e["node_guid"].as_str(),
            "{name} node_guid"
        );
        let ports = e["ports"].as_object().unwrap();
        assert_eq!(dev.ports.len(), ports.len(), "{name} ports");
        for (pn, pe) in ports {
            let port = dev.ports.iter().find(|p| p.port.to_string() == *pn).unwrap();
            let at = format!("{name} port {pn}");
            assert_eq!(port.link_layer.as_deref(), pe["link_layer"].as_str(), "{at}");
            let st = port.state.as_ref().unwrap();
            assert_eq!(
                (st.code as u64, st.name.as_str()),
                (pe["state_id"].as_u64().unwrap(), pe["state"].as_str().unwrap()),
                "{at}"
            );
            let ps = port.phys_state.as_ref().unwrap();
            assert_eq!(
                (ps.code as u64, ps.name.as_str()),
                (
                    pe["phys_state_id"].as_u64().unwrap(),
                    pe["phys_state"].as_str().unwrap()
                ),
                "{at}"
            );
            assert_eq!(port.rate_text.as_deref(), pe["rate_raw"].as_str(), "{at}");
            assert_eq!(
                port.rate_gbps.unwrap() * BYTES_PER_GBIT,
                pe["rate_bytes_per_sec"].as_f64().unwrap(),
                "{at}"
            );
            for (cname, cv) in pe["counters"].as_object().unwrap() {
                let want = cv.as_u64().unwrap();
                // `*_data_bytes` in expected.json are the raw 4-byte-word counters x 4.
                let got = match cname.strip_suffix("_bytes") {
                    Some(raw) => port.counters[raw] * 4,
                    None => port.counters[cname.as_str()],
                };
                assert_eq!(got, want, "{at} counter {cname}");
            }
            if let Some(hw) = pe.get("hw_counters").and_then(|v| v.as_object()) {
                for (cname, cv) in hw {
                    assert_eq!(
                        port.hw_counters.get(cname).copied(),
                        cv.as_u64(),
                        "{at} hw_counter {cname}"
                    );
                }
            }
        }
    }
}

#[test]
fn rate_cases_parse_like_procfs() {
    for case in expected()["parse_rate_cases"].as_array().unwrap() {
        let gbps = parse_rate_gbps(case["rate"].as_str().unwrap()).unwrap();
        assert_eq!(gbps * BYTES_PER_GBIT, case["bytes_per_sec"].as_f64().unwrap());
    }
}

#[test]
fn netdev_and_roce_ecn_knobs_match() {
    let exp = expected();
    let inv = inventory();
    let eth0 = inv.netdev("eth0").unwrap();
    let e = &exp["net_class"]["eth0"];
    assert_eq!(eth0.mtu_bytes, Some(e["mtu"].as_u64().unwrap() as u32));
    assert_eq!(eth0.speed_mbps, e["speed"].as_u64());
    assert_eq!(eth0.operstate.as_deref(), e["operstate"].as_str());
    assert_eq!(eth0.address.as_deref(), e["address"].as_str());
    // The device link is a flattened symlink in this copy (a file holding the link text).
    assert_eq!(eth0.pci.as_deref(), exp["aer"]["eth0"]["pci_device"].as_str());
    let ecn = eth0.ecn.as_ref().unwrap();
    for (side, en, params) in [
        ("roce_np", &ecn.np_enable, &ecn.np),
        ("roce_rp", &ecn.rp_enable, &ecn.rp),
    ] {
        let es = &exp["ecn"]["eth0"][side];
        for (p, v) in es["enable"].as_object().unwrap() {
            let p: usize = p.parse().unwrap();
            assert_eq!(en[p], v.as_bool(), "{side} enable {p}");
        }
        for (k, v) in es.as_object().unwrap() {
            if k == "enable" {
                continue;
            }
            let want = v.as_u64().or_else(|| v.as_bool().map(u64::from)).unwrap();
            assert_eq!(params.get(k).copied(), Some(want), "{side}/{k}");
        }
    }
}

#[test]
fn pci_functions_match() {
    let exp = expected();
    let inv = inventory();
    // eth0's function carries the AER counters (synthetic sequential values upstream:
    // correctable 1..8, fatal 10..27, nonfatal 30..47).
    let f = inv.pci("0000:00:1f.6").unwrap();
    let aer = f.aer.as_ref().unwrap();
    for (kind, got) in [
        ("correctable", &aer.correctable),
        ("nonfatal", &aer.nonfatal),
        ("fatal", &aer.fatal),
    ] {
        for (name, v) in exp["aer"]["eth0"][kind].as_object().unwrap() {
            assert_eq!(got.get(name).copied(), v.as_u64(), "AER {kind} {name}");
        }
    }
    assert_eq!(f.role, PciRole::Nic);
    // The bus/pci devices themselves, read through a snapshot-free directory walk.
    let tree = DirTree::new(ROOT);
    for (bdf, e) in exp["pci_devices"].as_object().unwrap() {
        let target = tree.link_target(&format!("sys/bus/pci/devices/{bdf}")).unwrap();
        let cur = parse_gts(&tree.read_text(&format!("{target}/current_link_speed")).unwrap()).unwrap();
        let max = parse_gts(&tree.read_text(&format!("{target}/max_link_speed")).unwrap()).unwrap();
        assert_eq!(cur, e["current_link_speed_gts"].as_f64().unwrap(), "{bdf}");
        assert_eq!(max, e["max_link_speed_gts"].as_f64().unwrap(), "{bdf}");
        // The parent upstream names is the bridge in the path.
        match e["parent"].as_str() {
            Some(p) => assert!(
                target.contains(&format!("/{p}/{bdf}")),
                "{bdf} under {p}: {target}"
            ),
            None => assert!(target.ends_with(&format!("pci0000:{}/{bdf}", &bdf[5..7]))),
        }
    }
    // a2:00.0 is an Ethernet controller on NUMA node 1 with SR-IOV (128 VFs, none on).
    let ice = inv.pci("0000:a2:00.0").unwrap();
    assert_eq!(ice.role, PciRole::Nic);
    assert_eq!(ice.numa_node, Some(1));
    assert_eq!(ice.sriov, Some((128, 0)));
    let l = ice.link.unwrap();
    assert_eq!(
        (l.cur_speed_gts, l.cur_width, l.max_speed_gts, l.max_width),
        (16.0, 8, 16.0, 8)
    );
    assert!(!l.is_downgraded());
}

#[test]
fn downgraded_bridge_is_seen_as_downgraded() {
    let tree = DirTree::new(ROOT);
    let inv = read_host(&tree);
    // 02.1 is a bridge and is kept only above a NIC or GPU; read its link directly.
    let t = tree.link_target("sys/bus/pci/devices/0000:00:02.1").unwrap();
    assert_eq!(tree.read_text(&format!("{t}/current_link_width")).unwrap(), "4");
    assert_eq!(tree.read_text(&format!("{t}/max_link_width")).unwrap(), "8");
    assert!(
        inv.pci("0000:00:02.1").is_none(),
        "a bridge above no NIC/GPU is not in the inventory"
    );
}

#[test]
fn snapshot_round_trip_reads_the_same_inventory() {
    let (tree, manifest) = snapshot::capture(Path::new(ROOT), false);
    assert!(manifest.commands.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.tar.gz");
    snapshot::write_archive(&tree, &file).unwrap();
    let loaded = snapshot::load(&file).unwrap();
    let a = serde_json::to_value(read_host(&DirTree::new(ROOT))).unwrap();
    let b = serde_json::to_value(read_host(&loaded)).unwrap();
    let strip = |mut v: Value| {
        v["source"] = Value::Null;
        v["hostname"] = Value::Null;
        v
    };
    assert_eq!(strip(a.clone())["rdma"], strip(b.clone())["rdma"]);
    assert_eq!(strip(a.clone())["netdevs"], strip(b.clone())["netdevs"]);
    assert_eq!(strip(a)["pci"], strip(b)["pci"]);
}

#[test]
fn no_rdma_tree_reports_pcie_facts() {
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
    let inv = read_host(&DirTree::new(r));
    assert!(inv.rdma.is_empty());
    let f = inv.pci("0000:00:03.0").unwrap();
    assert_eq!(
        (f.role, f.numa_node, f.local_cpulist.as_deref()),
        (PciRole::Nic, Some(0), Some("0-1"))
    );
    assert!(inv.problems.is_empty(), "{:?}", inv.problems);
}

#[test]
fn bad_files_become_problems_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let port = r.join("sys/class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(port.join("counters")).unwrap();
    std::fs::write(port.join("state"), "garbage").unwrap();
    std::fs::write(port.join("rate"), [0xff, 0xfe, 0x00]).unwrap();
    std::fs::write(port.join("counters/symbol_error"), "12x").unwrap();
    std::fs::write(port.join("counters/link_downed"), "3\n").unwrap();
    // A huge file: larger than the reader accepts.
    let big = std::fs::File::create(port.join("link_layer")).unwrap();
    big.set_len(xirang_host::tree::MAX_FILE_BYTES + 10).unwrap();
    // A directory where a file should be.
    std::fs::create_dir_all(r.join("sys/class/infiniband/mlx5_0/fw_ver")).unwrap();
    let inv = read_host(&DirTree::new(r));
    let p = &inv.rdma[0].ports[0];
    assert_eq!(p.counters.get("link_downed"), Some(&3));
    assert!(p.state.is_none() && p.rate_gbps.is_none() && p.link_layer.is_none());
    let paths: Vec<&str> = inv.problems.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "sys/class/infiniband/mlx5_0/ports/1/state",
        "sys/class/infiniband/mlx5_0/ports/1/rate",
        "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error",
        "sys/class/infiniband/mlx5_0/ports/1/link_layer",
        "sys/class/infiniband/mlx5_0/fw_ver",
    ] {
        assert!(paths.contains(&want), "no problem for {want}: {:?}", inv.problems);
    }
}

#[test]
fn snapshot_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("junk.tar.gz");
    std::fs::write(&f, b"not an archive at all").unwrap();
    let e = snapshot::load(&f).unwrap_err().to_string();
    assert!(
        e.contains("junk.tar.gz") && e.contains("not a xirang snapshot"),
        "{e}"
    );
    let missing = dir.path().join("nope.tar.gz");
    assert!(
        snapshot::load(&missing)
            .unwrap_err()
            .to_string()
            .contains("nope.tar.gz")
    );
}
