//! `mpirun -np N xirang sim --mpi`: the outputs of 2 and 4 ranks, and of 2 ranks of 2
//! threads, are the serial run's, byte for byte, on the reference incast and a
//! rail-optimized AllReduce; a rank killed in the middle of a run ends the whole job with
//! an error, never a hang. `xirang tune --mpi` on 2 ranks gives the single-process tune's
//! result, and resumes from its trial log.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest any of these jobs may take before it counts as hung.
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}

/// `mpirun -np N` with what a container needs: as many ranks as asked whatever the cores,
/// root allowed (CI runs as root), no single-copy shared memory (needs ptrace rights).
fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "-np", &np.to_string()]);
    if is_root() {
        c.arg("--allow-run-as-root");
    }
    c.env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .current_dir(root());
    c
}

/// Runs `c` to its end, or kills it after `JOB_TIMEOUT` and fails.
fn run(mut c: Command) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun (openmpi-bin: scripts/install-mpi.sh)");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("waiting for mpirun").is_some() {
            return child.wait_with_output().expect("reading mpirun's output");
        }
        if t0.elapsed() > JOB_TIMEOUT {
            let _ = child.kill();
            panic!("mpirun still running after {JOB_TIMEOUT:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn xirang() -> &'static str {
    env!("CARGO_BIN_EXE_xirang")
}

/// Every file of `a` equals `b`'s, but engine.json (wall time, how the run was divided).
fn same_outputs(a: &Path, b: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(a)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    let theirs = std::fs::read_dir(b).unwrap().count();
    assert_eq!(
        names.len(),
        theirs,
        "{} and {} hold different files",
        a.display(),
        b.display()
    );
    for n in names {
        if n == "engine.json" {
            continue;
        }
        let (x, y) = (
            std::fs::read(a.join(&n)).unwrap(),
            std::fs::read(b.join(&n)).unwrap(),
        );
        assert!(
            x == y,
            "{} differs between {} and {}",
            n.to_string_lossy(),
            a.display(),
            b.display()
        );
    }
}

fn serial_and_ranks(scenario: &str) {
    let dir = tempfile::tempdir().unwrap();
    let serial = dir.path().join("serial");
    let out = Command::new(xirang())
        .current_dir(root())
        .args(["sim", scenario, "--quiet", "--out"])
        .arg(&serial)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Ranks, and threads in each.
    for (np, threads) in [(2, 1), (4, 1), (2, 2)] {
        let d = dir.path().join(format!("np{np}-t{threads}"));
        let mut c = mpirun(np);
        c.args([xirang(), "sim", scenario, "--mpi", "--quiet", "--threads"])
            .arg(threads.to_string())
            .arg("--out")
            .arg(&d);
        let out = run(c);
        assert!(
            out.status.success(),
            "mpirun -np {np} --threads {threads} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        same_outputs(&serial, &d);
        let engine: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("engine.json")).unwrap()).unwrap();
        assert_eq!(engine["parallel"]["ranks"], np, "{engine}");
        assert_eq!(engine["parallel"]["threads"], threads, "{engine}");
        assert_eq!(engine["parallel"]["partitions"], np * threads, "{engine}");
    }
}

#[test]
fn the_reference_incast_on_2_and_4_ranks_is_the_serial_run() {
    serial_and_ranks("scenarios/reference/incast16-4mb-dcqcn.toml");
}

#[test]
fn a_rail_allreduce_on_2_and_4_ranks_is_the_serial_run() {
    serial_and_ranks("scenarios/rail-64gpu.toml");
}

/// Fast-forward on ranks: the surveys of each check travel between the ranks, and every
/// rank skips as the serial run does.
#[test]
fn a_fast_forwarded_ring_on_2_and_4_ranks_is_the_serial_run() {
    serial_and_ranks("crates/xirang/tests/data/ring-64gpu-ff.toml");
}

/// The pid of rank `rank` among the processes `mpirun` (pid `parent`) started.
fn rank_pid(parent: u32, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The parent pid is the 4th field, after the parenthesized name.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn a_killed_rank_ends_the_job_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = mpirun(2);
    // A run long enough to be killed in the middle of (minutes in a debug build): exact,
    // since fast-forward, on by default for it, takes seconds.
    c.args([
        xirang(),
        "sim",
        "scenarios/rail-1024gpu.toml",
        "--exact",
        "--mpi",
        "--quiet",
        "--out",
    ])
    .arg(dir.path().join("out"))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().expect("mpirun (openmpi-bin: scripts/install-mpi.sh)");
    let t0 = Instant::now();
    let pid = loop {
        if let Some(p) = rank_pid(child.id(), 1) {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "rank 1 never started");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Let it get into the run, then kill it.
    std::thread::sleep(Duration::from_secs(3));
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let t1 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!status.success(), "the job succeeded with a rank killed");
            assert!(
                err.contains("signal 9") || err.contains("Killed") || err.contains("killed"),
                "no clear error:\n{err}"
            );
            assert!(
                !dir.path().join("out").join("summary.json").exists(),
                "a killed job left results"
            );
            break;
        }
        if t1.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the job still runs 60 s after rank 1 was killed: hung");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// result.json without its wall time.
fn tune_result(dir: &Path) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("wall_s");
    v
}

#[test]
fn a_tune_on_2_ranks_is_the_single_process_tune_and_resumes() {
    let scenario = "crates/xirang-tune/test_data/incast-mice.toml";
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("single");
    let out = Command::new(xirang())
        .current_dir(root())
        .args(["tune", scenario, "--quiet", "--out"])
        .arg(&single)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ranks = dir.path().join("np2");
    for resume in [false, true] {
        let mut c = mpirun(2);
        c.args([xirang(), "tune", scenario, "--mpi", "--quiet", "--out"])
            .arg(&ranks);
        if resume {
            c.arg("--resume");
        }
        let out = run(c);
        assert!(
            out.status.success(),
            "mpirun tune (resume {resume}) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (mut a, mut b) = (tune_result(&single), tune_result(&ranks));
        if resume {
            // Everything came from the trial log: nothing simulated again, and the same
            // result from the log's figures (they round-trip exactly).
            assert_eq!(b["runs"][0], 0, "{}", b["runs"]);
            a.as_object_mut().unwrap().remove("runs");
            b.as_object_mut().unwrap().remove("runs");
            assert_eq!(
                a, b,
                "a resumed tune on 2 ranks differs from the single-process tune"
            );
        } else {
            assert_eq!(a, b, "result.json differs between one process and 2 ranks");
            for f in ["recommendation.toml", "nccl.env", "mlx5-congestion.sh"] {
                assert_eq!(
                    std::fs::read(single.join(f)).unwrap(),
                    std::fs::read(ranks.join(f)).unwrap(),
                    "{f} differs"
                );
            }
        }
    }
}
