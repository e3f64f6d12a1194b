//! The files of one rollout, all beside its state file `STATE`:
//!
//! - `STATE`: the SQLite state (plan, policy, append-only log; [`crate::store`]);
//! - `STATE.lock`: held by the one executor that may act, and handed to every command it
//!   starts as standard input, so a killed executor's flash still holds it until the
//!   command ends: no second executor can act while a flash may be running;
//! - `STATE.started/`: the start markers. Each command writes its marker there before it
//!   does anything else (`ROLLOUT_ID` names the rollout the directory belongs to), so an
//!   interrupted flash whose marker is absent provably never started and may run once
//!   more; a missing or foreign directory proves nothing, and every interrupted flash is
//!   then left to an operator;
//! - `STATE.out/`: the commands' output files (benchmark results).
//!
//! Those rules are the rollout's crash-safety invariant outside the log; they live here,
//! together, and the CLI only names the state file.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::RolloutError;
use crate::command::{CommandDriver, load_inventory_lenient};
use crate::policy::Policy;
use crate::store::{Meta, Store};
use crate::waves::Plan;

/// The file naming the rollout a marker directory belongs to.
const MARKER_ID_FILE: &str = "ROLLOUT_ID";

/// How often a held lock is tried again.
const LOCK_RETRY: Duration = Duration::from_millis(50);

/// The files of the rollout whose state file is `state`.
#[derive(Debug, Clone)]
pub struct RolloutFiles {
    state: PathBuf,
}

/// The state's lock, held until dropped (or until the last command it was handed to
/// ends).
#[derive(Debug)]
pub struct StateLock(File);

impl RolloutFiles {
    /// The files of the rollout whose state file is `state`.
    pub fn new(state: &Path) -> RolloutFiles {
        RolloutFiles {
            state: state.to_path_buf(),
        }
    }

    /// The state file, as given.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// `STATE.lock`.
    pub fn lock_path(&self) -> PathBuf {
        PathBuf::from(format!("{}.lock", self.state.display()))
    }

    /// `STATE.started/`, absolute: commands run in the inventory directory.
    pub fn markers_dir(&self) -> PathBuf {
        self.sibling("started")
    }

    /// `STATE.out/`, absolute.
    pub fn work_dir(&self) -> PathBuf {
        self.sibling("out")
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let abs = std::path::absolute(&self.state).unwrap_or_else(|_| self.state.clone());
        let mut name = abs.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{suffix}"));
        abs.with_file_name(name)
    }

    /// Takes the lock, waiting up to `wait` (a killed executor's flash command still
    /// holds it through its standard input until it ends). `waiting` is called once,
    /// when the lock is found held.
    pub fn lock(&self, wait: Duration, waiting: impl FnOnce(&Path)) -> Result<StateLock, RolloutError> {
        let path = self.lock_path();
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .read(true)
            .open(&path)
            .map_err(|e| RolloutError::io(&path, e))?;
        let start = Instant::now();
        let mut waiting = Some(waiting);
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(StateLock(f)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if start.elapsed() > wait {
                        return Err(RolloutError::Refused(format!(
                            "{} is held by another executor or by a command it started (waited {} s)",
                            path.display(),
                            wait.as_secs()
                        )));
                    }
                    if let Some(w) = waiting.take() {
                        w(&path);
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(RolloutError::io(&path, e)),
            }
        }
    }

    /// Records a new rollout: the state file with its plan and policy, and its marker
    /// directory. `inventory` and `policy_file` are kept as absolute paths, since later
    /// commands run in the inventory directory.
    pub fn start(
        &self,
        inventory: &Path,
        policy_file: &Path,
        policy: Policy,
        plan: Plan,
        now_ms: i64,
    ) -> Result<Meta, RolloutError> {
        if plan.waves.is_empty() {
            return Err(RolloutError::Refused(format!(
                "nothing to upgrade: {} node(s), all skipped (see `xirang rollout plan`)",
                plan.total_nodes
            )));
        }
        let abs = |p: &Path| {
            std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        };
        let meta = Meta {
            id: format!("{now_ms}-{}", std::process::id()),
            plan,
            policy,
            inventory: abs(inventory),
            policy_file: abs(policy_file),
        };
        Store::create(&self.state, &meta, now_ms)?;
        self.init_markers(&meta.id)?;
        Ok(meta)
    }

    /// Creates (or checks) the marker directory and writes the rollout's id into it.
    fn init_markers(&self, id: &str) -> Result<(), RolloutError> {
        let dir = self.markers_dir();
        std::fs::create_dir_all(&dir).map_err(|e| RolloutError::io(&dir, e))?;
        let f = dir.join(MARKER_ID_FILE);
        match std::fs::read_to_string(&f) {
            Ok(existing) if existing.trim() == id => Ok(()),
            Ok(existing) => Err(RolloutError::Refused(format!(
                "{}: belongs to rollout {} (this one is {id})",
                dir.display(),
                existing.trim()
            ))),
            Err(_) => std::fs::write(&f, format!("{id}\n")).map_err(|e| RolloutError::io(&f, e)),
        }
    }

    /// The marker directory if it exists and belongs to rollout `id`; `None` (a missing
    /// or foreign directory) is never trusted.
    pub fn markers(&self, id: &str) -> Option<PathBuf> {
        let dir = self.markers_dir();
        let got = std::fs::read_to_string(dir.join(MARKER_ID_FILE)).ok()?;
        (got.trim() == id).then_some(dir)
    }

    /// The driver that runs the rollout's commands on real nodes, holding `lock`. `warn`
    /// hears when the marker directory cannot be trusted.
    pub fn command_driver(
        &self,
        meta: &Meta,
        lock: StateLock,
        command_timeout: Duration,
        warn: impl FnOnce(&str),
    ) -> Result<CommandDriver, RolloutError> {
        let inv = load_inventory_lenient(Path::new(&meta.inventory))?;
        let markers = self.markers(&meta.id);
        if markers.is_none() {
            warn(&format!(
                "{} is missing or belongs to another rollout: an interrupted flash will need an operator's decision",
                self.markers_dir().display()
            ));
        }
        let work = self.work_dir();
        std::fs::create_dir_all(&work).map_err(|e| RolloutError::io(&work, e))?;
        Ok(CommandDriver::new(
            inv,
            meta.policy.clone(),
            Some(lock.0),
            command_timeout,
            markers,
            work,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_of_another_rollout_or_none_are_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let files = RolloutFiles::new(&dir.path().join("fw.sqlite"));
        assert_eq!(files.markers("a"), None, "no directory");
        files.init_markers("a").unwrap();
        assert_eq!(files.markers("a"), Some(dir.path().join("fw.sqlite.started")));
        assert_eq!(files.markers("b"), None, "another rollout's directory");
        let e = files.init_markers("b").unwrap_err().to_string();
        assert!(e.contains("belongs to rollout a (this one is b)"), "{e}");
    }

    #[test]
    fn a_held_lock_is_refused_after_the_wait_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = RolloutFiles::new(&dir.path().join("fw.sqlite"));
        let held = files.lock(Duration::ZERO, |_| {}).unwrap();
        let mut told = None;
        let e = files
            .lock(Duration::from_millis(120), |p| told = Some(p.to_path_buf()))
            .unwrap_err()
            .to_string();
        assert_eq!(told, Some(files.lock_path()));
        assert!(e.contains("fw.sqlite.lock is held by another executor"), "{e}");
        drop(held);
        files.lock(Duration::ZERO, |_| panic!("not held")).unwrap();
    }
}
