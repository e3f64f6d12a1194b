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

/// Copies a directory tree (symlinks as symlinks): a fixture to change in a test.
pub(crate) fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        let dst = to.join(e.file_name());
        if ty.is_dir() {
            copy_dir(&e.path(), &dst);
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dst).unwrap();
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}
