//! Acceptance 1 of the diagnosis issue, for every fault kind the simulator injects:
//! every faulty run's top-1 class and location correct (at least 95 %), no finding above
//! low severity on healthy runs; VALIDATION.md's table is this suite's output
//! (`xirang diagnose suite --markdown`).

use xirang_diagnose::suite::{cases, render_markdown, run_case};
use xirang_fabric::scenario::{FaultKind, TargetKind};

#[test]
fn injected_faults_are_located_and_healthy_runs_are_clean() {
    let cases = cases();
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
                TargetKind::Workload => format!("{:?}", c.load),
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
        ok as f64 >= 0.95 * faulty as f64,
        "{ok} of {faulty} faulty runs located\n{md}"
    );
}
