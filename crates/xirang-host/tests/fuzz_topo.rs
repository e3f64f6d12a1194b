//! Fuzz targets (proptest, since cargo-fuzz needs nightly) for the `nvidia-smi topo -m`,
//! `lspci -vvv` and `lspci -tv` parsers: whatever the input, they return `Ok` or `Err`, never
//! panic, and their results can be queried and serialised without panicking either.

use proptest::prelude::*;
use proptest::test_runner::Config;
use xirang_host::parse::{lspci, nvidia_topo};

macro_rules! fixture {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/", $path))
    };
}

const TOPO: [&str; 3] = [
    fixture!("nvidia-smi-topo/h100-8gpu-8nic-nv18-topo-m.txt"),
    fixture!("nvidia-smi-topo/h100-8gpu-12nic-ib-plus-eth-topo-m.txt"),
    fixture!("nvidia-smi-topo/asus-esc8000a-4gpu-rtx6000ada-4nic-cx7-topo-m.txt"),
];

const VVV: [&str; 4] = [
    fixture!("lspci/esc8000a-connectx7-21.00.0-lspci-vvv.txt"),
    fixture!("lspci/esc8000a-rtx6000ada-01.00.0-idle-speed-downgraded-lspci-vvv.txt"),
    fixture!("lspci/esc8000a-highpoint-ssd7540-71.00.0-width-downgraded-lspci-vvv.txt"),
    fixture!("lspci/esc8000a-lspci-vvv-grep-ACSCtl.txt"),
];

const TREE: &str = fixture!("lspci/esc8000a-lspci-tv.txt");

/// Pieces of both formats, so random sequences reach deep into the grammars.
const TOKENS: &[&str] = &[
    "GPU0",
    "GPU1",
    "NIC0",
    "mlx5_0",
    " X ",
    "X",
    "NV18",
    "NV255",
    "NV999",
    "PIX",
    "PXB",
    "PHB",
    "NODE",
    "SYS",
    "SOC",
    "CPU Affinity",
    "NUMA Affinity",
    "GPU NUMA ID",
    "N/A",
    "0-31",
    "Legend:",
    "NIC Legend:",
    "NIC0: mlx5_0",
    "NIC1:",
    ":",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "|",
    "+-",
    "\\-",
    "--",
    "-",
    "-[",
    "]-",
    "[0000:00]",
    "[ffffffff:ff]",
    "[00]",
    "[61-73]",
    "[1ff]",
    "00.0",
    "1f.7",
    "20.9",
    "21:00.0",
    "0000:21:00.0",
    " Ethernet controller: ",
    "LnkCap:",
    "LnkSta:",
    "LnkCtl2:",
    "Speed ",
    "16GT/s",
    "2.5GT/s",
    "unknown",
    ", Width ",
    "x16",
    "x999",
    "(downgraded)",
    "NUMA node:",
    "-1",
    "99999999999",
    "Physical Slot:",
    "Kernel driver in use:",
    "ACSCtl:",
    "Target Link Speed:",
    "é",
    "\u{0}",
];

/// Runs every parser and every query on `text`; a panic anywhere fails the property.
fn exercise(text: &str) {
    if let Ok(m) = nvidia_topo::parse(text) {
        let mut names: Vec<&str> = m.devices.iter().map(|d| d.name.as_str()).collect();
        names.extend(m.nic_names.iter().map(|(_, real)| real.as_str()));
        names.push("GPU99");
        for a in &names {
            let _ = m.nearest_nic(a);
            let _ = m.nic_name(a);
            for b in &names {
                let _ = m.between(a, b).map(|c| c.code());
            }
        }
        let _ = serde_json::to_string(&m);
    }
    if let Ok(devs) = lspci::parse_vvv(text) {
        for d in &devs {
            let _ = d.is_downgraded();
        }
        let _ = serde_json::to_string(&devs);
    }
    let _ = lspci::acs_ctl_values(text);
    if let Ok(roots) = lspci::parse_tree(text) {
        let _ = lspci::tree_entries(&roots);
        let _ = lspci::device_ancestry(&roots);
        let _ = serde_json::to_string(&roots);
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    TruncateLine(usize, usize),
    TruncateText(usize),
    FlipByte(usize, u8),
    InsertByte(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::DeleteLine),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(l, n)| Mutation::TruncateLine(l, n)),
        any::<usize>().prop_map(Mutation::TruncateText),
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Mutation::FlipByte(i, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::InsertByte(i, b)),
    ]
}

/// Applies `muts` to the bytes of `base`; the result may be invalid UTF-8 (cut inside a
/// character, flipped high bits), which the lossy conversion turns into U+FFFD as a reader would.
fn mutate(base: &str, muts: &[Mutation]) -> String {
    let mut lines: Vec<Vec<u8>> = base.split('\n').map(|l| l.as_bytes().to_vec()).collect();
    for m in muts {
        let n = lines.len().max(1);
        match *m {
            Mutation::DeleteLine(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            Mutation::DuplicateLine(i) if !lines.is_empty() => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            Mutation::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
            Mutation::TruncateLine(i, k) if !lines.is_empty() => {
                let l = &mut lines[i % n];
                let len = l.len();
                l.truncate(k % (len + 1));
            }
            Mutation::TruncateText(k) => {
                let mut flat = lines.join(&b'\n');
                let len = flat.len();
                flat.truncate(k % (len + 1));
                lines = flat.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            }
            Mutation::FlipByte(i, x) | Mutation::InsertByte(i, x) => {
                let mut flat = lines.join(&b'\n');
                let len = flat.len();
                if matches!(m, Mutation::FlipByte(..)) {
                    if len > 0 {
                        flat[i % len] ^= x;
                    }
                } else {
                    flat.insert(i % (len + 1), x);
                }
                lines = flat.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&lines.join(&b'\n')).into_owned()
}

fn fixture_texts() -> Vec<&'static str> {
    TOPO.iter()
        .chain(VVV.iter())
        .chain([TREE].iter())
        .copied()
        .collect()
}

/// 256 cases (proptest's default), raised for a long fuzzing run with `PROPTEST_CASES=100000`.
fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        exercise(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_unicode_never_panics(text in "(?s).{0,600}") {
        exercise(&text);
    }

    #[test]
    fn token_soup_never_panics(toks in proptest::collection::vec(proptest::sample::select(TOKENS), 0..200)) {
        exercise(&toks.concat());
    }

    #[test]
    fn mutated_topo_fixtures_never_panic(
        which in 0..TOPO.len(),
        muts in proptest::collection::vec(mutation(), 1..8),
    ) {
        exercise(&mutate(TOPO[which], &muts));
    }

    #[test]
    fn mutated_lspci_vvv_fixtures_never_panic(
        which in 0..VVV.len(),
        muts in proptest::collection::vec(mutation(), 1..8),
    ) {
        exercise(&mutate(VVV[which], &muts));
    }

    #[test]
    fn mutated_lspci_tree_never_panics(muts in proptest::collection::vec(mutation(), 1..8)) {
        exercise(&mutate(TREE, &muts));
    }

    /// Fixtures glued together, and with tabs put back where the paste expanded them.
    #[test]
    fn mixed_fixtures_never_panic(
        picks in proptest::collection::vec(0..8usize, 1..4),
        tabs in any::<bool>(),
    ) {
        let all = fixture_texts();
        let mut text = picks.iter().map(|&i| all[i % all.len()]).collect::<Vec<_>>().join("\n");
        if tabs {
            text = text.replace("    ", "\t");
        }
        exercise(&text);
    }
}

/// Unmutated fixtures take the `Ok` path of their own parser, so the mutation targets start
/// from inputs that reach the deep code, not from ones rejected on the first line.
#[test]
fn fixtures_are_accepted_before_mutation() {
    for t in TOPO {
        assert!(nvidia_topo::parse(t).is_ok());
    }
    for t in VVV {
        assert!(lspci::parse_vvv(t).is_ok());
    }
    assert!(lspci::parse_tree(TREE).is_ok());
}

/// Nesting deeper than PCI allows is refused instead of building a tree whose recursive
/// walk or drop could overflow the stack.
#[test]
fn absurdly_deep_tree_is_an_error() {
    let mut line = String::from("-[0000:00]---00.0-[01]-");
    for _ in 0..5000 {
        line.push_str("---00.0-[01]-");
    }
    let e = lspci::parse_tree(&line).unwrap_err();
    assert!(e.expected.contains("nested"), "{e}");
    let ok = line.get(..23 + 99 * 13 + 1).unwrap_or_default();
    // Cut after a chunk's `]-` plus the `-` that opens the (empty) bus of the deepest bridge.
    let entries = lspci::tree_entries(&lspci::parse_tree(ok).unwrap());
    assert_eq!(entries.len(), 100);
    assert_eq!(entries.last().map(|e| e.ancestors.len()), Some(99));
}
