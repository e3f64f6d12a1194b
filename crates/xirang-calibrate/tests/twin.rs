//! The twin's refusals: each says what is wrong and where, before anything is served.

use std::path::{Path, PathBuf};

use xirang_calibrate::twin::{Twin, TwinError, collector};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn twin(scenario: PathBuf, inventory: PathBuf) -> Twin {
    Twin {
        scenario,
        inventory,
        dilation: 100,
        app_series: xirang_monitor::replay::AppSeries::Both,
    }
}

#[test]
fn an_inventory_that_does_not_load_is_named() {
    let t = twin(
        root().join("crates/xirang-rollout/test_data/twin/fleet-twin.toml"),
        root().join("no/such/inventory"),
    );
    let e = collector(t).err().expect("refused");
    assert!(matches!(e, TwinError::Inventory { .. }), "{e:?}");
    assert!(e.to_string().starts_with("--inventory "), "{e}");
    assert!(e.to_string().contains("no/such/inventory"), "{e}");
}

#[test]
fn a_scenario_without_samples_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(root().join("crates/xirang-rollout/test_data/twin/fleet-twin.toml")).unwrap();
    let without = text.replace("sample_interval_us = 200\n", "");
    assert_ne!(
        text, without,
        "the fixture no longer samples every 200 us: update the test"
    );
    let path = dir.path().join("no-samples.toml");
    std::fs::write(&path, without).unwrap();
    let e = collector(twin(
        path.clone(),
        root().join("crates/xirang-audit/test_data/cluster"),
    ))
    .err()
    .expect("refused");
    assert!(matches!(e, TwinError::NoSamples { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("no-samples.toml: the twin needs `[run] sample_interval_us`"),
        "{e}"
    );
}
