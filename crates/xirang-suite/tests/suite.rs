//! Acceptance 1 of the diagnosis issue, for every fault kind the simulator injects:
//! every faulty run's top-1 class and location correct (at least 95 %), no finding above
//! low severity on healthy runs; VALIDATION.md's table is this suite's output
//! (`xirang diagnose suite --markdown`).

use xirang_fabric::scenario::{FaultKind, TargetKind};
use xirang_suite::{LOAD_FRAGMENTS, SuiteError, cases, parse_cases, render_markdown, run_case};

#[test]
fn injected_faults_are_located_and_healthy_runs_are_clean() {
    let cases = cases().unwrap();
    let faulty = cases.iter().filter(|c| !c.faults.is_empty()).count();
    let healthy = cases.len() - faulty;
    let doubles = cases.iter().filter(|c| c.faults.len() == 2).count();
    assert!(
        healthy >= 5 && doubles >= 3,
        "{healthy} healthy, {doubles} double"
    );
    // At least three single-fault runs of every kind the simulator injects, at different
    // places; a fault of a whole workload's configuration, under different loads.
    for kind in FaultKind::ALL {
        let places: std::collections::BTreeSet<String> = cases
            .iter()
            .filter(|c| c.faults.len() == 1 && c.faults[0].kind == kind.name())
            .map(|c| match kind.target_kind() {
                TargetKind::Workload => c.load.clone(),
                _ => c.faults[0].entity.clone(),
            })
            .collect();
        let runs = cases
            .iter()
            .filter(|c| c.faults.len() == 1 && c.faults[0].kind == kind.name())
            .count();
        assert!(
            runs >= 3 && places.len() >= 2,
            "{}: {runs} runs at {places:?}",
            kind.name()
        );
    }
    let results: Vec<_> = cases.iter().map(|c| run_case(c).unwrap()).collect();
    let md = render_markdown(&results);
    eprintln!("{md}");
    for r in results.iter().filter(|r| r.injected.is_empty()) {
        assert!(r.correct, "healthy run {} has findings: {:?}", r.name, r.found);
    }
    let ok = results
        .iter()
        .filter(|r| !r.injected.is_empty() && r.correct)
        .count();
    // VALIDATION.md holds this very output (`xirang diagnose suite --markdown`).
    let validation =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../VALIDATION.md"))
            .unwrap();
    assert!(
        validation.contains(&md),
        "VALIDATION.md is out of date: rerun `cargo run --release -- diagnose suite --markdown`"
    );
    assert!(
        ok as f64 >= xirang_suite::MIN_ACCURACY * faulty as f64 && xirang_suite::passed(&results),
        "{ok} of {faulty} faulty runs located\n{md}"
    );
}

#[test]
fn every_load_fragment_on_disk_is_compiled_in_and_every_case_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/loads");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut compiled: Vec<String> = LOAD_FRAGMENTS.iter().map(|(n, _)| n.to_string()).collect();
    compiled.sort();
    assert_eq!(on_disk, compiled, "cases/loads/ and LOAD_FRAGMENTS differ");
    for (name, text) in LOAD_FRAGMENTS {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(&on_disk, text, "{name}");
    }
    // Every case's scenario loads (the run itself is the test above).
    for c in cases().unwrap() {
        let text = c.scenario_toml();
        let path = std::path::Path::new("suite.toml");
        xirang_fabric::scenario::Scenario::parse(&text, path)
            .and_then(|s| s.build(path, std::path::Path::new("."), Some(&text)))
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(c.faults.len(), text.matches("[[faults]]").count(), "{}", c.name);
    }
}

#[test]
fn a_cases_file_that_names_what_it_does_not_define_is_refused_with_the_case() {
    let fragment = |n: &str| (n == "a.toml").then_some("[topology.leaf_spine]\n");
    let err = |text: &str| parse_cases("t.toml", text, fragment).unwrap_err().to_string();
    assert_eq!(
        err("[loads]\nx = [\"a.toml\"]\n[[case]]\nname = \"c1\"\nload = \"y\"\nseed = 1\n"),
        "t.toml: case `c1`: load `y` is not in [loads] (expected one of: x)"
    );
    assert_eq!(
        err("[loads]\nx = [\"b.toml\"]\n[[case]]\nname = \"c1\"\nload = \"x\"\nseed = 1\n"),
        "t.toml: case `c1`: load `x` names `b.toml`, which is not in loads/"
    );
    assert_eq!(
        err(
            "[loads]\nx = [\"a.toml\"]\n[[case]]\nname = \"c1\"\nload = \"x\"\nseed = 1\nfaults = [{ target = \"h1\", expect = { class = \"link\", entity = \"h1\" } }]\n"
        ),
        "t.toml: case `c1`: a fault without a `kind` string"
    );
    // An unknown class or key is the parser's error, with its line.
    let e = parse_cases(
        "t.toml",
        "[loads]\nx = [\"a.toml\"]\n[[case]]\nname = \"c1\"\nload = \"x\"\nseed = 1\nfaults = [{ kind = \"link_down\", expect = { class = \"cable\", entity = \"h1\" } }]\n",
        fragment,
    )
    .unwrap_err();
    assert!(matches!(e, SuiteError::Parse { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("line 7") && msg.contains("cable"), "{msg}");
    let e = parse_cases(
        "t.toml",
        "[loads]\n[[case]]\nname = \"c\"\nload = \"x\"\nseed = 1\nsed = 2\n",
        fragment,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 6") && e.contains("sed"), "{e}");
}
