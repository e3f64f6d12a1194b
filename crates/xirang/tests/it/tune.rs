//! `xirang tune` through the binary: artifacts, refusal to overwrite, kill -9 and resume.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{root, run_expect};

const SCENARIO: &str = "crates/xirang-tune/test_data/incast-mice-resume.toml";

/// The result without the fields that describe the invocation rather than the search.
fn comparable(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("result.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("runs");
    o.remove("wall_s");
    v
}

fn rows(db: &std::path::Path) -> u64 {
    let Ok(c) = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return 0;
    };
    c.query_row("SELECT COUNT(*) FROM evals", [], |r| r.get::<_, i64>(0))
        .map_or(0, |n| n as u64)
}

/// Acceptance 3 of the tuner issue: kill -9 during a tune, then `--resume`: no completed
/// run is lost or run again, and the result equals an uninterrupted run's.
#[test]
fn a_killed_tune_resumes_to_the_same_result() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole");
    let (out, _) = run_expect(
        &["tune", SCENARIO, "--out", whole.to_str().unwrap(), "--quiet"],
        0,
    );
    assert!(
        out.contains("16 candidates, 46 simulations run (0 read from the trial log)"),
        "{out}"
    );

    let cut = tmp.path().join("cut");
    let db = cut.join("trials.sqlite");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("xirang"))
        .current_dir(root())
        .args(["tune", SCENARIO, "--out", cut.to_str().unwrap(), "--quiet"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while rows(&db) < 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the tune never logged 10 runs"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the tune finished before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
    let logged = rows(&db);
    assert!((10..46).contains(&logged), "{logged} runs logged at the kill");

    // Without --resume the log is not overwritten.
    let (_, err) = run_expect(&["tune", SCENARIO, "--out", cut.to_str().unwrap(), "--quiet"], 1);
    assert!(err.contains("already exists: pass --resume"), "{err}");

    let (out, _) = run_expect(
        &[
            "tune",
            SCENARIO,
            "--out",
            cut.to_str().unwrap(),
            "--quiet",
            "--resume",
        ],
        0,
    );
    let ran = 46 - logged;
    assert!(
        out.contains(&format!(
            "16 candidates, {ran} simulations run ({logged} read from the trial log)"
        )),
        "{out}"
    );
    assert_eq!(rows(&db), 46);
    assert_eq!(comparable(&whole), comparable(&cut));
}

#[test]
fn resuming_another_tune_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    run_expect(&["tune", SCENARIO, "--out", dir, "--quiet", "--budget", "4"], 0);
    let (_, err) = run_expect(
        &[
            "tune",
            "crates/xirang-tune/test_data/incast-mice.toml",
            "--out",
            dir,
            "--quiet",
            "--resume",
        ],
        1,
    );
    assert!(
        err.contains("belongs to a different tune (scenario differs)"),
        "{err}"
    );
}
