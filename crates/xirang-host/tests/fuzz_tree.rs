//! Fuzz targets (proptest: cargo-fuzz needs nightly) for the host reader and the snapshot
//! loader: a real sysfs tree with random damage (garbage bytes, truncation, removal, a
//! directory where a file was, symlink loops, links out of the root, huge values) is read
//! without panicking; arbitrary bytes as a snapshot are an error, never a panic. That a
//! damaged value is reported with its path is checked on a chosen file below.

use std::path::Path;

use proptest::prelude::*;
use xirang_host::snapshot;
use xirang_host::sysfs::read_host;
use xirang_host::tree::{Kind, MemTree, Tree};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/sysfs/procfs");
const BOND_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/sysfs/roce-lag");

fn base() -> MemTree {
    snapshot::capture(Path::new(ROOT), false).0
}

#[derive(Debug, Clone)]
enum Damage {
    Garbage(Vec<u8>),
    Truncate(usize),
    Remove,
    MakeDir,
    LinkLoop,
    LinkOut,
    Huge,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Damage::Garbage),
        (0usize..8).prop_map(Damage::Truncate),
        Just(Damage::Remove),
        Just(Damage::MakeDir),
        Just(Damage::LinkLoop),
        Just(Damage::LinkOut),
        Just(Damage::Huge),
    ]
}

/// Damages the entries `hits` pick.
fn apply(tree: &mut MemTree, hits: &[(prop::sample::Index, Damage)]) {
    let paths: Vec<(String, Kind)> = tree.entries();
    for (idx, d) in hits {
        let (path, kind) = idx.get(&paths).clone();
        let bytes = if kind == Kind::File {
            tree.read(&path).unwrap_or_default()
        } else {
            Vec::new()
        };
        tree.remove(&path);
        match d {
            Damage::Garbage(b) => tree.add_file(&path, b.clone()),
            Damage::Truncate(n) => tree.add_file(&path, bytes[..bytes.len().min(*n)].to_vec()),
            Damage::Remove => {}
            Damage::MakeDir => tree.add_dir(&path),
            Damage::LinkLoop => tree.add_link(&path, xirang_host::tree::base_name(&path)),
            Damage::LinkOut => tree.add_link(&path, "../../../../../../../../etc/passwd"),
            Damage::Huge => tree.add_file(&path, format!("{}\n", "9".repeat(200)).into_bytes()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn damaged_trees_never_panic(hits in proptest::collection::vec((any::<prop::sample::Index>(), damage()), 1..12)) {
        let mut tree = base();
        apply(&mut tree, &hits);
        let inv = read_host(&tree);
        // Whatever survived is still self-consistent enough to print.
        prop_assert!(serde_json::to_string(&inv).is_ok());
    }

    /// The RoCE LAG tree: bond files, member files and /etc/nccl.conf damaged alike.
    #[test]
    fn damaged_bond_trees_never_panic(hits in proptest::collection::vec((any::<prop::sample::Index>(), damage()), 1..12)) {
        let mut tree = snapshot::capture(Path::new(BOND_ROOT), false).0;
        apply(&mut tree, &hits);
        let inv = read_host(&tree);
        prop_assert!(serde_json::to_string(&inv).is_ok());
    }

    #[test]
    fn arbitrary_bytes_are_not_a_snapshot(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.tar.gz");
        std::fs::write(&f, &bytes).unwrap();
        prop_assert!(snapshot::load(&f).is_err());
    }

    #[test]
    fn truncated_snapshots_are_errors_or_partial_trees(cut in 0usize..100_000) {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("h.tar.gz");
        snapshot::write_archive(&base(), &f).unwrap();
        let full = std::fs::read(&f).unwrap();
        std::fs::write(&f, &full[..cut.min(full.len())]).unwrap();
        if let Ok(tree) = snapshot::load(&f) {
            let _ = read_host(&tree);
        }
    }
}

#[test]
fn a_damaged_value_is_reported_with_its_path() {
    let mut tree = base();
    let p = "sys/class/infiniband/mlx4_0/ports/1/rate";
    tree.remove(p);
    tree.add_file(p, vec![0xff, 0x00, 0x12]);
    let inv = read_host(&tree);
    assert!(inv.problems.iter().any(|x| x.path == p), "{:?}", inv.problems);
    let mlx4 = inv.rdma.iter().find(|d| d.name == "mlx4_0").unwrap();
    assert_eq!(mlx4.ports[0].rate_gbps, None);
    // The rest of the device is still read.
    assert_eq!(mlx4.fw_ver.as_deref(), Some("2.31.5050"));
    assert_eq!(mlx4.ports[1].rate_gbps, Some(40.0));
}
