//! Bonds, RoCE LAG and the NCCL settings file, read from the two bond trees
//! (test_data/sysfs/BONDS.md: built from documented layouts; no real capture exists).

use std::path::Path;

use xirang_host::inventory::HostInventory;
use xirang_host::snapshot;
use xirang_host::sysfs::read_host;
use xirang_host::tree::DirTree;

fn tree(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data/sysfs")
        .join(name)
}

fn read(name: &str) -> HostInventory {
    read_host(&DirTree::new(tree(name)))
}

#[test]
fn a_roce_lag_device_over_an_802_3ad_bond() {
    let inv = read("roce-lag");
    assert!(inv.problems.is_empty(), "{:?}", inv.problems);
    assert_eq!(inv.hostname, "lag-host");
    assert_eq!(inv.bonds.len(), 1);
    let b = &inv.bonds[0];
    assert_eq!(b.name, "bond0");
    let mode = b.mode.as_ref().unwrap();
    assert_eq!((mode.name.as_str(), mode.code), ("802.3ad", 4));
    let policy = b.xmit_hash_policy.as_ref().unwrap();
    assert_eq!((policy.name.as_str(), policy.code), ("layer3+4", 1));
    assert_eq!(b.miimon_ms, Some(100));
    assert_eq!(b.lacp_rate.as_ref().map(|c| c.code), Some(1));
    assert_eq!(b.active_slave, None, "an empty file is 'not applicable'");
    assert_eq!(b.mii_status.as_deref(), Some("up"));
    let names: Vec<_> = b.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["ens1f0np0", "ens1f1np1"]);
    assert!(
        b.members
            .iter()
            .all(|m| m.is_up() && m.link_failure_count == Some(0))
    );
    assert_eq!(b.members[1].pci.as_deref(), Some("0000:17:00.1"));
    assert_eq!(b.rdma_devices, ["mlx5_bond_0"]);
    assert_eq!(b.roce_lag.as_deref(), Some("mlx5_bond_0"));
    assert_eq!(b.spreads_qps(), Some(true));
    // The LAG device has one port, at one member's rate.
    let dev = inv.rdma.iter().find(|d| d.name == "mlx5_bond_0").unwrap();
    assert_eq!(dev.ports.len(), 1);
    assert_eq!(dev.ports[0].rate_gbps, Some(200.0));
    assert_eq!(
        inv.nccl_conf.get("NCCL_IB_HCA").map(String::as_str),
        Some("mlx5_bond_0")
    );
    assert_eq!(
        inv.nccl_conf
            .get("NCCL_IB_QPS_PER_CONNECTION")
            .map(String::as_str),
        Some("1")
    );
}

#[test]
fn a_bond_over_two_cards_keeps_separate_rdma_devices() {
    let inv = read("bond-split");
    assert!(inv.problems.is_empty(), "{:?}", inv.problems);
    let b = &inv.bonds[0];
    assert_eq!(b.mode.as_ref().map(|m| m.code), Some(2));
    assert_eq!(
        b.xmit_hash_policy.as_ref().map(|m| m.name.as_str()),
        Some("layer2")
    );
    assert_eq!(
        b.spreads_qps(),
        Some(false),
        "layer2 hashes every QP of a host pair alike"
    );
    assert_eq!(b.rdma_devices, ["mlx5_0", "mlx5_1"]);
    assert_eq!(b.roce_lag, None, "two cards: no RoCE LAG");
    assert!(b.members[0].is_up());
    assert!(!b.members[1].is_up());
    assert_eq!(b.members[1].mii_status.as_deref(), Some("down"));
    assert_eq!(b.members[1].link_failure_count, Some(3));
    assert_eq!(
        inv.nccl_conf.get("NCCL_IB_MERGE_NICS").map(String::as_str),
        Some("0")
    );
}

/// Copies a fixture tree into a temporary directory to break files in it.
fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

#[test]
fn malformed_bond_files_and_conf_lines_are_problems_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&tree("roce-lag"), dir.path());
    let bonding = dir.path().join("sys/class/net/bond0/bonding");
    std::fs::write(bonding.join("mode"), "802.3ad\n").unwrap();
    std::fs::write(bonding.join("miimon"), "fast\n").unwrap();
    std::fs::write(
        dir.path().join("etc/nccl.conf"),
        "# ok\nNCCL_IB_HCA=mlx5_bond_0\nexport NCCL_DEBUG INFO\n",
    )
    .unwrap();
    let inv = read_host(&DirTree::new(dir.path()));
    let b = &inv.bonds[0];
    assert!(b.mode.is_none() && b.miimon_ms.is_none());
    assert_eq!(b.port_select_mode, None, "mainline kernels do not expose it");
    assert_eq!(b.spreads_qps(), None, "unknown mode: unknown");
    let problems: Vec<String> = inv
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect();
    for want in [
        "sys/class/net/bond0/bonding/mode: expected `<name> <number>`, e.g. `802.3ad 4`, found `802.3ad`",
        "sys/class/net/bond0/bonding/miimon: expected an interval in ms, found `fast`",
        "etc/nccl.conf: line 3: expected `NAME=value`, found `export NCCL_DEBUG INFO`",
    ] {
        assert!(problems.iter().any(|p| p == want), "no `{want}` in {problems:#?}");
    }
    // The good line is kept.
    assert_eq!(inv.nccl_conf.len(), 1);
}

#[test]
fn a_snapshot_keeps_the_bond_and_the_nccl_conf() {
    let (mem, _) = snapshot::capture(&tree("roce-lag"), false);
    let inv = read_host(&mem);
    assert_eq!(inv.bonds.len(), 1);
    assert_eq!(inv.bonds[0].roce_lag.as_deref(), Some("mlx5_bond_0"));
    assert_eq!(inv.bonds[0].members.len(), 2);
    assert!(!inv.nccl_conf.is_empty());
}

/// MLNX_OFED's port-selection file: queue affinity spreads a host pair's QPs whatever
/// the hash policy.
#[test]
fn queue_affinity_from_ofed_spreads_whatever_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&tree("roce-lag"), dir.path());
    let bonding = dir.path().join("sys/class/net/bond0/bonding");
    std::fs::write(bonding.join("xmit_hash_policy"), "layer2 0\n").unwrap();
    assert_eq!(
        read_host(&DirTree::new(dir.path())).bonds[0].spreads_qps(),
        Some(false)
    );
    let compat = dir.path().join("sys/class/net/ens1f1np1/compat/devlink");
    std::fs::create_dir_all(&compat).unwrap();
    std::fs::write(compat.join("lag_port_select_mode"), "queue_affinity\n").unwrap();
    let inv = read_host(&DirTree::new(dir.path()));
    assert_eq!(inv.bonds[0].port_select_mode.as_deref(), Some("queue_affinity"));
    assert_eq!(inv.bonds[0].spreads_qps(), Some(true));
}
