//! Test harness: runs the real binary from the workspace root.

use std::path::PathBuf;
use std::process::Output;

/// The workspace root, where `scenarios/` lives.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `xirang ARGS` in the workspace root.
pub(crate) fn run(args: &[&str]) -> Output {
    assert_cmd::Command::cargo_bin("xirang")
        .unwrap()
        .current_dir(root())
        .args(args)
        .output()
        .unwrap()
}

/// Runs and expects exit status `code`; returns stdout. Failures print both streams.
pub(crate) fn run_expect(args: &[&str], code: i32) -> (String, String) {
    let o = run(args);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(
        o.status.code(),
        Some(code),
        "xirang {}\n--- stdout\n{out}\n--- stderr\n{err}",
        args.join(" ")
    );
    (out, err)
}

/// Runs with `--json` semantics: exit 0 and parse stdout.
pub(crate) fn run_json(args: &[&str]) -> serde_json::Value {
    let (out, _) = run_expect(args, 0);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}
