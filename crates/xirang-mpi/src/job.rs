//! The MPI job this process is a rank of, for every command that runs over MPI (`xirang
//! sim --mpi`, `xirang tune --mpi`, `xirang bench --mpi-sync`): joining it, this rank's
//! number, ending every rank when one fails, and a rank's share of a simulation.

use ::mpi::environment::Universe;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::Communicator;
use xirang_fabric::Loaded;
use xirang_sim::parallel::{Exchange, Report, Status};
use xirang_sim::{Progress, RunOptions, RunResult};

use crate::mpi_transport::Mpi;

/// Joining the job failed.
#[derive(Debug, thiserror::Error)]
#[error("MPI was already initialized in this process")]
pub struct AlreadyInitialized;

/// The MPI job this process is a rank of; MPI is finalized when it drops.
pub struct Job {
    _universe: Universe,
    world: SimpleCommunicator,
}

impl Job {
    /// Joins the job `mpirun` started.
    ///
    /// # Errors
    /// When MPI was already initialized in this process.
    pub fn start() -> Result<Job, AlreadyInitialized> {
        let universe = ::mpi::initialize().ok_or(AlreadyInitialized)?;
        let world = universe.world();
        Ok(Job {
            _universe: universe,
            world,
        })
    }

    /// This rank's number, 0 to `size() - 1`.
    pub fn rank(&self) -> usize {
        usize::try_from(self.world.rank()).unwrap_or(0)
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        usize::try_from(self.world.size()).unwrap_or(1)
    }

    /// The job's communicator.
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// Ends every rank of the job: after `error`, the others would wait for this one at
    /// the next window forever.
    pub fn abort(&self, error: &dyn std::fmt::Display) -> ! {
        eprintln!("error: rank {}: {error}", self.rank());
        self.world.abort(1)
    }

    /// This rank's share of the run (see [`crate::simulate`]); rank 0 gets the results.
    /// A failure ends the whole job.
    pub fn simulate(
        &self,
        loaded: &Loaded,
        opts: &RunOptions,
        parts: usize,
        threads: usize,
        progress: &mut dyn FnMut(Progress),
    ) -> Option<(RunResult, Report)> {
        match crate::simulate(Mpi::new(&self.world), loaded, opts, parts, threads, progress) {
            Ok(r) => r,
            Err(e) => self.abort(&e),
        }
    }

    /// The time of one window's exchange between the job's ranks with nothing to carry
    /// (the floor every window pays), µs, over `rounds` windows after a tenth as many
    /// to set connections up.
    ///
    /// # Errors
    /// When another rank is gone.
    pub fn sync_us(&self, rounds: u32) -> Result<f64, xirang_sim::parallel::Aborted> {
        let mut wire = crate::Wire::new(Mpi::new(&self.world));
        let status = Status {
            next: 0,
            done: 0,
            busy: true,
            now: 0,
            ff: None,
        };
        for _ in 0..rounds / 10 {
            wire.sync(Vec::new(), status.clone())?;
        }
        let t0 = std::time::Instant::now();
        for _ in 0..rounds {
            wire.sync(Vec::new(), status.clone())?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / f64::from(rounds.max(1)))
    }
}
