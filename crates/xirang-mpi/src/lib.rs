//! Simulation across processes. The parallel engine (`xirang_sim::parallel`) runs windows
//! of one lookahead and, after each, exchanges what crossed between partitions and a
//! combined status; at the end, every finished partition's state goes to worker 0, which
//! writes the results. This crate carries both over a [`Transport`]: the bytes of each
//! window's posts and of the final gather, in postcard's format.
//!
//! Two transports: [`local`], threads of one process joined by channels (what the default
//! test suite runs, so the wire format is tested without MPI), and, with the `mpi` feature,
//! [`mpi_transport`]: MPI ranks through rsmpi (`MPI_Alltoallv` per window, `MPI_Gatherv`
//! at the end). Partition `p` runs on worker `p % workers`.

use serde::{Deserialize, Serialize};
use xirang_fabric::Loaded;
use xirang_sim::engine::part::PartState;
use xirang_sim::parallel::{Aborted, DistributedError, Exchange, Gather, Mail, Report, Stats, Status};
use xirang_sim::{Progress, RunOptions, RunResult};

#[cfg(feature = "mpi")]
pub mod job;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi_transport;
#[cfg(feature = "mpi")]
pub mod tune;

/// What a command asked to run over MPI says when the binary was built without it.
pub const NOT_BUILT: &str = "this xirang was built without MPI; build it with `cargo build --release --features mpi` \
     (Debian packages libopenmpi-dev, openmpi-bin and libclang-dev: scripts/install-mpi.sh)";

/// How bytes move between the workers of a run.
pub trait Transport {
    /// This worker's number, 0 to `size() - 1`.
    fn rank(&self) -> usize;
    /// Workers in the run.
    fn size(&self) -> usize;
    /// Sends `bufs[i]` to worker `i` (this worker's own entry is empty) and returns what
    /// every worker sent this one, by sender.
    ///
    /// # Errors
    /// When another worker is gone.
    fn all_to_all(&mut self, bufs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Aborted>;
    /// Sends `buf` to worker 0, which gets every worker's by sender (its own included);
    /// the others get `None`.
    ///
    /// # Errors
    /// When another worker is gone.
    fn gather(&mut self, buf: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, Aborted>;
}

/// One worker's post to another at the end of a window.
#[derive(Serialize, Deserialize)]
struct Post {
    status: Status,
    mail: Vec<Mail>,
}

/// One worker's finished partitions.
#[derive(Serialize, Deserialize)]
struct Finished {
    states: Vec<PartState>,
    stats: Stats,
}

fn encode<T: Serialize>(what: &str, x: &T) -> Result<Vec<u8>, Aborted> {
    postcard::to_stdvec(x).map_err(|e| Aborted(format!("cannot encode {what}: {e}")))
}

fn decode<'a, T: Deserialize<'a>>(what: &str, from: usize, b: &'a [u8]) -> Result<T, Aborted> {
    postcard::from_bytes(b).map_err(|e| {
        Aborted(format!(
            "{what} from worker {from} is not readable ({} bytes): {e}",
            b.len()
        ))
    })
}

/// The engine's [`Exchange`] and [`Gather`] over a [`Transport`].
pub struct Wire<T: Transport> {
    transport: T,
}

impl<T: Transport> Wire<T> {
    /// Carries a run's windows over `transport`.
    pub fn new(transport: T) -> Self {
        Wire { transport }
    }
}

impl<T: Transport> Exchange for Wire<T> {
    fn sync(&mut self, out: Vec<Mail>, status: Status) -> Result<(Vec<Mail>, Status), Aborted> {
        let (me, n) = (self.transport.rank(), self.transport.size());
        let mut posts: Vec<Vec<Mail>> = (0..n).map(|_| Vec::new()).collect();
        for m in out {
            posts[usize::from(m.to) % n].push(m);
        }
        let mut kept = std::mem::take(&mut posts[me]);
        let mut bufs = Vec::with_capacity(n);
        for (w, mail) in posts.into_iter().enumerate() {
            bufs.push(if w == me {
                Vec::new()
            } else {
                encode(
                    "a window's post",
                    &Post {
                        status: status.clone(),
                        mail,
                    },
                )?
            });
        }
        let got = self.transport.all_to_all(bufs)?;
        let mut st = status;
        for (w, b) in got.iter().enumerate() {
            if w == me {
                continue;
            }
            let post: Post = decode("a window's post", w, b)?;
            st = st.combine(post.status);
            kept.extend(post.mail);
        }
        Ok((kept, st))
    }
}

impl<T: Transport> Gather for Wire<T> {
    fn gather(
        &mut self,
        mine: Vec<PartState>,
        stats: Stats,
    ) -> Result<Option<(Vec<PartState>, Stats)>, Aborted> {
        // Worker 0's own states never leave it.
        let (buf, mut states) = if self.transport.rank() == 0 {
            (Vec::new(), mine)
        } else {
            let f = Finished { states: mine, stats };
            (encode("the finished partitions", &f)?, Vec::new())
        };
        let Some(all) = self.transport.gather(buf)? else {
            return Ok(None);
        };
        let mut total = stats;
        for (w, b) in all.iter().enumerate().skip(1) {
            let f: Finished = decode("the finished partitions", w, b)?;
            states.extend(f.states);
            total.windows = total.windows.max(f.stats.windows);
            total.shipped += f.stats.shipped;
        }
        Ok(Some((states, total)))
    }
}

/// [`xirang_sim::simulate`] as one worker of a run over `transport`, the fabric divided
/// into `parts` partitions (at least one per worker), this worker's partitions run on
/// `threads` threads. Worker 0 returns the results, the
/// serial run's byte for byte; the others `None`.
///
/// # Errors
/// When the fabric has fewer partitions than workers, or a worker failed.
pub fn simulate<T: Transport>(
    transport: T,
    loaded: &Loaded,
    opts: &RunOptions,
    parts: usize,
    threads: usize,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<(RunResult, Report)>, DistributedError> {
    let (me, n) = (transport.rank(), transport.size());
    let mut wire = Wire::new(transport);
    xirang_sim::parallel::simulate_distributed(loaded, opts, parts, me, n, threads, &mut wire, progress)
}
