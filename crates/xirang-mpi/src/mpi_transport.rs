//! The [`Transport`] over MPI (rsmpi): each window's posts with `MPI_Alltoall` of their
//! sizes then `MPI_Alltoallv` of their bytes, the final gather with `MPI_Gather` and
//! `MPI_Gatherv` to rank 0. MPI's default error handler ends the whole job when a rank
//! fails, so a dead rank never leaves the others waiting.

use mpi::Count;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use xirang_sim::parallel::Aborted;

use crate::Transport;

/// One rank's end of a communicator.
pub struct Mpi<'a> {
    world: &'a SimpleCommunicator,
}

impl<'a> Mpi<'a> {
    /// Runs over `world`.
    pub fn new(world: &'a SimpleCommunicator) -> Self {
        Mpi { world }
    }
}

/// MPI counts are C ints: a buffer past 2 GiB cannot go in one call.
fn count(len: usize) -> Result<Count, Aborted> {
    Count::try_from(len).map_err(|_| {
        Aborted(format!(
            "a message of {len} bytes is past MPI's 2 GiB limit for one call"
        ))
    })
}

/// Offsets of consecutive buffers of `counts` bytes.
fn displacements(counts: &[Count]) -> Result<Vec<Count>, Aborted> {
    let mut d = Vec::with_capacity(counts.len());
    let mut at: Count = 0;
    for c in counts {
        d.push(at);
        at = at
            .checked_add(*c)
            .ok_or_else(|| Aborted("a window's messages are past MPI's 2 GiB limit".to_string()))?;
    }
    Ok(d)
}

/// Splits `buf` into the pieces of `counts` bytes.
fn split(buf: &[u8], counts: &[Count]) -> Vec<Vec<u8>> {
    let mut at = 0usize;
    counts
        .iter()
        .map(|c| {
            let n = usize::try_from(*c).unwrap_or(0);
            let piece = buf[at..at + n].to_vec();
            at += n;
            piece
        })
        .collect()
}

impl Transport for Mpi<'_> {
    fn rank(&self) -> usize {
        usize::try_from(self.world.rank()).unwrap_or(0)
    }

    fn size(&self) -> usize {
        usize::try_from(self.world.size()).unwrap_or(1)
    }

    fn all_to_all(&mut self, bufs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Aborted> {
        let n = self.size();
        let send_counts = bufs
            .iter()
            .map(|b| count(b.len()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut recv_counts: Vec<Count> = vec![0; n];
        self.world.all_to_all_into(&send_counts[..], &mut recv_counts[..]);
        let send_displs = displacements(&send_counts)?;
        let recv_displs = displacements(&recv_counts)?;
        let send: Vec<u8> = bufs.concat();
        let total = recv_counts.iter().map(|c| usize::try_from(*c).unwrap_or(0)).sum();
        let mut recv = vec![0u8; total];
        {
            let s = Partition::new(&send[..], &send_counts[..], &send_displs[..]);
            let mut r = PartitionMut::new(&mut recv[..], &recv_counts[..], &recv_displs[..]);
            self.world.all_to_all_varcount_into(&s, &mut r);
        }
        Ok(split(&recv, &recv_counts))
    }

    fn gather(&mut self, buf: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, Aborted> {
        let root = self.world.process_at_rank(0);
        let c = count(buf.len())?;
        if self.rank() != 0 {
            root.gather_into(&c);
            root.gather_varcount_into(&buf[..]);
            return Ok(None);
        }
        let mut counts: Vec<Count> = vec![0; self.size()];
        root.gather_into_root(&c, &mut counts[..]);
        let displs = displacements(&counts)?;
        let total = counts.iter().map(|c| usize::try_from(*c).unwrap_or(0)).sum();
        let mut recv = vec![0u8; total];
        {
            let mut r = PartitionMut::new(&mut recv[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(&buf[..], &mut r);
        }
        Ok(Some(split(&recv, &counts)))
    }
}
