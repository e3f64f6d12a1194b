//! `xirang tune --mpi`: rank 0 runs the search and keeps the trial log; every batch of
//! simulations it needs is spread over all ranks (job `i` on rank `i % ranks`), each rank
//! running its share on its cores. A job's result depends only on the job, so the tune's
//! result is the single-process one. Jobs and results travel as JSON (configurations are
//! small beside a simulation, and JSON's floats round-trip exactly).

use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, Root};
use rayon::prelude::*;
use xirang_tune::eval::{Evaluator, RunMetrics};
use xirang_tune::search::{OnDone, RunJob, Runner, TuneError};

/// A batch length that means "no more batches": the workers return.
const STOP: u64 = 0;

/// Results of one rank's share: (index in the batch, metrics, wall seconds).
type Share = Vec<(usize, RunMetrics, f64)>;

fn run_share(eval: &Evaluator<'_>, jobs: &[RunJob], rank: usize, ranks: usize) -> Share {
    jobs.par_iter()
        .enumerate()
        .filter(|(i, _)| i % ranks == rank)
        .map(|(i, j)| {
            let (m, seconds) = j.run(eval);
            (i, m, seconds)
        })
        .collect()
}

/// Gathers every rank's share on rank 0 (`None` elsewhere).
fn gather(world: &SimpleCommunicator, share: &Share) -> Result<Option<Vec<Share>>, String> {
    use mpi::Count;
    use mpi::datatype::PartitionMut;
    let bytes = serde_json::to_vec(share).map_err(|e| format!("encoding results: {e}"))?;
    let n = Count::try_from(bytes.len()).map_err(|_| "a share of results past 2 GiB".to_string())?;
    let root = world.process_at_rank(0);
    if world.rank() != 0 {
        root.gather_into(&n);
        root.gather_varcount_into(&bytes[..]);
        return Ok(None);
    }
    let size = usize::try_from(world.size()).unwrap_or(1);
    let mut counts: Vec<Count> = vec![0; size];
    root.gather_into_root(&n, &mut counts[..]);
    let mut displs = Vec::with_capacity(size);
    let mut at: Count = 0;
    for c in &counts {
        displs.push(at);
        at = at.checked_add(*c).ok_or("results past 2 GiB")?;
    }
    let mut recv = vec![0u8; usize::try_from(at).unwrap_or(0)];
    {
        let mut r = PartitionMut::new(&mut recv[..], &counts[..], &displs[..]);
        root.gather_varcount_into_root(&bytes[..], &mut r);
    }
    let mut shares = Vec::with_capacity(size);
    for (w, (d, c)) in displs.iter().zip(&counts).enumerate() {
        let (d, c) = (usize::try_from(*d).unwrap_or(0), usize::try_from(*c).unwrap_or(0));
        let s: Share = serde_json::from_slice(&recv[d..d + c])
            .map_err(|e| format!("results from rank {w} are not readable: {e}"))?;
        shares.push(s);
    }
    Ok(Some(shares))
}

/// Broadcasts a batch (or [`STOP`]) from rank 0; returns the batch on every rank.
fn broadcast(world: &SimpleCommunicator, jobs: Option<&[RunJob]>) -> Result<Option<Vec<RunJob>>, String> {
    let root = world.process_at_rank(0);
    let mut bytes = match jobs {
        Some(j) => serde_json::to_vec(j).map_err(|e| format!("encoding jobs: {e}"))?,
        None => Vec::new(),
    };
    // The length travels first, one more than the bytes so that 0 can mean STOP.
    let mut len: u64 = if world.rank() == 0 {
        if jobs.is_some() {
            bytes.len() as u64 + 1
        } else {
            STOP
        }
    } else {
        0
    };
    root.broadcast_into(&mut len);
    if len == STOP {
        return Ok(None);
    }
    let n = usize::try_from(len - 1).map_err(|_| "a batch too large for this machine".to_string())?;
    if world.rank() != 0 {
        bytes = vec![0u8; n];
    }
    root.broadcast_into(&mut bytes[..]);
    let jobs: Vec<RunJob> =
        serde_json::from_slice(&bytes).map_err(|e| format!("jobs are not readable: {e}"))?;
    Ok(Some(jobs))
}

/// Rank 0's runner: spreads each batch over the job's ranks. Call [`MpiRunner::finish`]
/// when the tune is done, so the other ranks return from [`serve`].
pub struct MpiRunner<'a> {
    world: &'a SimpleCommunicator,
}

impl<'a> MpiRunner<'a> {
    /// Rank 0's end of `world`.
    pub fn new(world: &'a SimpleCommunicator) -> Self {
        MpiRunner { world }
    }

    /// Tells the other ranks there is nothing more to run.
    ///
    /// # Errors
    /// Never in practice: encoding nothing.
    pub fn finish(&self) -> Result<(), String> {
        broadcast(self.world, None).map(|_| ())
    }
}

impl Runner for MpiRunner<'_> {
    fn run(
        &self,
        eval: &Evaluator<'_>,
        jobs: &[RunJob],
        done: &OnDone<'_>,
    ) -> Result<Vec<RunMetrics>, TuneError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let size = usize::try_from(self.world.size()).unwrap_or(1);
        broadcast(self.world, Some(jobs)).map_err(TuneError::Runner)?;
        let mine = run_share(eval, jobs, 0, size);
        let shares = gather(self.world, &mine)
            .map_err(TuneError::Runner)?
            .unwrap_or_default();
        let mut out: Vec<Option<RunMetrics>> = vec![None; jobs.len()];
        for (i, m, seconds) in mine.into_iter().chain(shares.into_iter().skip(1).flatten()) {
            if i >= jobs.len() || out[i].is_some() {
                return Err(TuneError::Runner(format!(
                    "a rank returned job {i} of {}",
                    jobs.len()
                )));
            }
            done(i, &m, seconds)?;
            out[i] = Some(m);
        }
        out.into_iter()
            .enumerate()
            .map(|(i, m)| m.ok_or_else(|| TuneError::Runner(format!("no rank returned job {i}"))))
            .collect()
    }
}

/// A rank other than 0: runs its share of every batch rank 0 sends until it says stop.
///
/// # Errors
/// When a batch cannot be read or results cannot be sent.
pub fn serve(world: &SimpleCommunicator, eval: &Evaluator<'_>) -> Result<(), String> {
    let rank = usize::try_from(world.rank()).unwrap_or(0);
    let size = usize::try_from(world.size()).unwrap_or(1);
    while let Some(jobs) = broadcast(world, None)? {
        let share = run_share(eval, &jobs, rank, size);
        gather(world, &share)?;
    }
    Ok(())
}
