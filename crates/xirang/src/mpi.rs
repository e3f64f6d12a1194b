//! `xirang bench --mpi-sync`: the floor every window of a run over MPI pays
//! (`xirang_mpi::job::Job::sync_us`), printed on rank 0.

use anyhow::Result;

/// Windows `bench --mpi-sync` times.
const SYNC_ROUNDS: u32 = 10_000;

/// `xirang bench --mpi-sync`: the time of one window's exchange between the job's ranks
/// with nothing to carry, measured on rank 0.
pub(crate) fn sync_bench(json: bool) -> Result<crate::Outcome> {
    let job = xirang_mpi::job::Job::start()?;
    let per_window_us = job.sync_us(SYNC_ROUNDS)?;
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
