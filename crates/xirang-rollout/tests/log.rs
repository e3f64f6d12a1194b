//! The audit log is read strictly: the rollout's state is the fold of every row, so a
//! row of a kind this build does not know, or whose details lack its kind's shape, is
//! refused with its row number instead of being skipped.

use rusqlite::{Connection, params};
use xirang_rollout::event::EventKind;
use xirang_rollout::exec::State;
use xirang_rollout::layout::RolloutFiles;
use xirang_rollout::simulate::{SimSpec, default_policy, simulate};
use xirang_rollout::store::Store;

/// A started rollout of a small synthetic fleet, and its state file.
fn started(dir: &std::path::Path) -> std::path::PathBuf {
    let spec = SimSpec::default();
    let policy = default_policy(&spec);
    let (plan, _) = simulate(&spec, &policy).unwrap();
    let state = dir.join("fw.sqlite");
    let files = RolloutFiles::new(&state);
    files
        .start(dir, &dir.join("policy.toml"), policy, plan, 1_000)
        .unwrap();
    state
}

fn insert(state: &std::path::Path, kind: &str, detail: &str) {
    let c = Connection::open(state).unwrap();
    c.execute(
        "INSERT INTO log (ts_ms, actor, kind, wave, node, nic, detail) VALUES (?1, 'operator', ?2, NULL, NULL, NULL, ?3)",
        params![2_000, kind, detail],
    )
    .unwrap();
}

#[test]
fn a_started_rollout_reads_back_in_its_types() {
    let dir = tempfile::tempdir().unwrap();
    let state = started(dir.path());
    let events = Store::open(&state).unwrap().events().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Started);
    assert!(State::from_events(&events).started);
}

#[test]
fn a_row_of_an_unknown_kind_is_refused_with_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let state = started(dir.path());
    insert(&state, "flash-maybe", "{}");
    let e = Store::open(&state).unwrap().events().unwrap_err().to_string();
    assert!(
        e.contains("log row 2: unknown event kind `flash-maybe` (expected one of: started, wave-started,"),
        "{e}"
    );
    assert!(e.contains(&state.display().to_string()), "{e}");
}

#[test]
fn a_row_whose_details_lack_its_kinds_shape_is_refused_with_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let state = started(dir.path());
    // A halt without its kind: read leniently, it would have been an operator's halt,
    // which `resume` lifts without a recheck.
    insert(&state, "halted", r#"{"reason": "gate failed"}"#);
    let e = Store::open(&state).unwrap().events().unwrap_err().to_string();
    assert!(
        e.contains("log row 2: details of `halted` do not have its shape: missing field `kind`"),
        "{e}"
    );
}
