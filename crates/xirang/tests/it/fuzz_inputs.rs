//! Every fuzz target's body over every seed and every input a fuzzer crashed on
//! (`fuzz/seeds/TARGET/`, `fuzz/regressions/TARGET/`), in the normal suite: the fuzzers
//! run for hours only in scripts/fuzz.sh, but what they found stays fixed here.

#[path = "../../../../fuzz/targets.rs"]
mod targets;

use crate::util::root;

#[test]
fn no_fuzz_seed_or_past_crash_panics() {
    let mut n_inputs = 0;
    for (name, body) in targets::TARGETS {
        for kind in ["seeds", "regressions"] {
            let dir = root().join("fuzz").join(kind).join(name);
            let Ok(rd) = std::fs::read_dir(&dir) else {
                assert_eq!(kind, "regressions", "{} is missing", dir.display());
                continue;
            };
            let mut files: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
            files.sort();
            for f in files {
                let data = std::fs::read(&f).unwrap();
                let r = std::panic::catch_unwind(|| body(&data));
                assert!(r.is_ok(), "fuzz target `{name}` panics on {}", f.display());
                n_inputs += 1;
            }
        }
    }
    assert!(n_inputs >= 100, "only {n_inputs} inputs: the seeds are missing");
}
