//! What a tune concludes when nothing it can change matters: no significant gain, the
//! vendor default recommended, no guardrail judged against a change that is not made.

use std::path::Path;

use xirang_fabric::scenario::Scenario;
use xirang_tune::eval::Evaluator;
use xirang_tune::search::{Verdict, tune};
use xirang_tune::space;
use xirang_tune::store::Store;

#[test]
fn a_space_without_effect_recommends_the_vendor_default() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/no-effect.toml");
    let loaded = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
    let eval = Evaluator::new(&loaded);
    let sp = space::space(&loaded);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("trials.sqlite"), false, &[("t", "1".into())]).unwrap();
    let r = tune(&eval, &sp, &space::baselines(&loaded), store, &|_| {}).unwrap();
    // Every candidate scored exactly the vendor's on every seed.
    assert!(
        r.candidates
            .iter()
            .all(|c| c.objectives.iter().all(|o| *o == 1.0)),
        "{:#?}",
        r.candidates
    );
    assert_eq!(r.verdict, Verdict::NothingBeatTheVendor);
    assert_eq!(r.recommendation, r.vendor_values);
    assert_eq!(r.config, space::vendor(&loaded.scenario.config));
    assert!(r.ablation.is_none() && r.gain.is_none() && r.guardrails.is_empty());
}
