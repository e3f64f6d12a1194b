//! Parsers of outside input never panic: scenario TOML and HPCC topology/flow files,
//! fed random text and mutations (byte flips, truncations, line swaps) of real files.
//!
//! cargo-fuzz needs a nightly toolchain, which this project's machines do not have, so the
//! fuzzing runs as proptest properties inside the normal suite.

use std::path::Path;

use proptest::prelude::*;
use xirang_fabric::{hpcc, scenario::Scenario};

fn seeds() -> Vec<String> {
    let mut v = Vec::new();
    for dir in [
        "../../scenarios",
        "../../scenarios/reference",
        "test_data/scenarios/ok",
        "test_data/scenarios/err",
    ] {
        let Ok(rd) = std::fs::read_dir(dir) else { continue };
        let mut paths: Vec<_> = rd.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        paths.sort();
        for p in paths {
            if let Ok(t) = std::fs::read_to_string(&p) {
                v.push(t);
            }
        }
    }
    v
}

/// Applies a mutation chosen by `kind` at position `at` (both scaled to the text).
fn mutate(text: &str, kind: u8, at: usize, byte: u8) -> String {
    let mut b = text.as_bytes().to_vec();
    if b.is_empty() {
        return String::from_utf8_lossy(&[byte]).into_owned();
    }
    let i = at % b.len();
    match kind % 4 {
        0 => b[i] = byte,
        1 => b.truncate(i),
        2 => b.insert(i, byte),
        _ => {
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() > 1 {
                let j = i % lines.len();
                let mut l = lines.clone();
                l.swap(j, (j + 1) % lines.len());
                return l.join("\n");
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn exercise(text: &str) {
    if let Ok(s) = Scenario::parse(text, Path::new("fuzz.toml")) {
        // Building may fail (missing files, bad values) but must not panic.
        let _ = s.build(Path::new("fuzz.toml"), Path::new("../../scenarios"), Some(text));
    }
    let _ = hpcc::parse_topology(text);
    let _ = hpcc::parse_flows(text);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_text_never_panics(s in "\\PC{0,300}") {
        exercise(&s);
    }

    #[test]
    fn mutated_real_files_never_panic(file in any::<prop::sample::Index>(), kind in any::<u8>(), at in any::<usize>(), byte in any::<u8>()) {
        let seeds = seeds();
        let text = &seeds[file.index(seeds.len())];
        exercise(&mutate(text, kind, at, byte));
    }
}
