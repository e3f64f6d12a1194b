//! `xirang sim --mpi`: this process as one rank of an MPI job (`xirang_mpi`).

use anyhow::Result;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;
use xirang_fabric::Loaded;
use xirang_sim::parallel::Report;
use xirang_sim::{Progress, RunOptions, RunResult};

/// The MPI job this process is a rank of; MPI is finalized when it drops.
pub(crate) struct Job {
    _universe: Universe,
    world: SimpleCommunicator,
}

impl Job {
    /// Joins the job `mpirun` started.
    pub(crate) fn start() -> Result<Job> {
        let universe = mpi::initialize()
            .ok_or_else(|| anyhow::anyhow!("MPI was already initialized in this process"))?;
        let world = universe.world();
        Ok(Job {
            _universe: universe,
            world,
        })
    }

    pub(crate) fn rank(&self) -> usize {
        usize::try_from(self.world.rank()).unwrap_or(0)
    }

    pub(crate) fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    pub(crate) fn size(&self) -> usize {
        usize::try_from(self.world.size()).unwrap_or(1)
    }

    /// Ends every rank of the job: after `error`, the others would wait for this one at
    /// the next window forever.
    pub(crate) fn abort(&self, error: &anyhow::Error) -> ! {
        eprintln!("error: rank {}: {error:#}", self.rank());
        self.world.abort(1)
    }

    /// This rank's share of the run (see `xirang_mpi::simulate`); rank 0 gets the results.
    /// A failure ends the whole job.
    pub(crate) fn simulate(
        &self,
        loaded: &Loaded,
        opts: &RunOptions,
        parts: usize,
        threads: usize,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Option<(RunResult, Report)>> {
        let t = xirang_mpi::mpi_transport::Mpi::new(&self.world);
        match xirang_mpi::simulate(t, loaded, opts, parts, threads, progress) {
            Ok(r) => Ok(r),
            Err(e) => self.abort(&e.into()),
        }
    }
}

/// Windows `bench --mpi-sync` times.
const SYNC_ROUNDS: u32 = 10_000;

/// `xirang bench --mpi-sync`: the time of one window's exchange between the job's ranks
/// with nothing to carry (the floor every window pays), measured on rank 0.
pub(crate) fn sync_bench(json: bool) -> Result<crate::Outcome> {
    use xirang_sim::parallel::{Exchange, Status};
    let job = Job::start()?;
    let mut wire = xirang_mpi::Wire::new(xirang_mpi::mpi_transport::Mpi::new(&job.world));
    let status = Status {
        next: 0,
        done: 0,
        busy: true,
        now: 0,
    };
    // A few rounds first, so connections are set up before the clock starts.
    for _ in 0..SYNC_ROUNDS / 10 {
        wire.sync(Vec::new(), status)?;
    }
    let t0 = std::time::Instant::now();
    for _ in 0..SYNC_ROUNDS {
        wire.sync(Vec::new(), status)?;
    }
    let per_window_us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(SYNC_ROUNDS);
    if job.rank() == 0 {
        let ranks = job.size();
        if json {
            crate::cmd::out(&format!(
                "{}\n",
                serde_json::json!({"ranks": ranks, "windows": SYNC_ROUNDS, "us_per_window": per_window_us})
            ))?;
        } else {
            crate::cmd::out(&format!(
                "{ranks} ranks: {per_window_us:.2} us per window (an empty exchange, {SYNC_ROUNDS} windows)\n"
            ))?;
        }
    }
    Ok(crate::Outcome::Clean)
}
