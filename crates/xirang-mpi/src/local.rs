//! A [`Transport`] between threads of one process, over channels: what the test suite
//! runs the wire format on without MPI. Every worker holds a sender to every other; a
//! worker that is gone (its channel closed) ends the others' runs with an error.

use std::sync::mpsc::{Receiver, Sender, channel};

use xirang_sim::parallel::Aborted;

use crate::Transport;

/// One worker's end.
pub struct Local {
    rank: usize,
    to: Vec<Sender<(usize, Vec<u8>)>>,
    from: Receiver<(usize, Vec<u8>)>,
    /// Messages that arrived early: a worker ahead by one round (its all-to-all, or the
    /// gather after the last one) may post before this one has read the round.
    early: Vec<(usize, Vec<u8>)>,
}

/// Ends for `n` workers, joined.
pub fn workers(n: usize) -> Vec<Local> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel()).unzip();
    rxs.into_iter()
        .enumerate()
        .map(|(rank, from)| Local {
            rank,
            to: txs.clone(),
            from,
            early: Vec::new(),
        })
        .collect()
}

impl Local {
    fn send(&self, to: usize, b: Vec<u8>) -> Result<(), Aborted> {
        self.to[to]
            .send((self.rank, b))
            .map_err(|_| Aborted(format!("worker {to} is gone")))
    }

    /// One message from each worker in `senders`, by sender. Each sends one per round,
    /// and nobody gets two rounds ahead, so a second message from a sender belongs to the
    /// next round and waits.
    fn receive(&mut self, senders: &[usize]) -> Result<Vec<Vec<u8>>, Aborted> {
        let mut got: Vec<Option<Vec<u8>>> = vec![None; self.to.len()];
        let mut left = senders.len();
        let mut later = Vec::new();
        for (w, b) in std::mem::take(&mut self.early) {
            if got[w].is_none() && senders.contains(&w) {
                got[w] = Some(b);
                left -= 1;
            } else {
                later.push((w, b));
            }
        }
        while left > 0 {
            let (w, b) = self
                .from
                .recv()
                .map_err(|_| Aborted("every other worker is gone".to_string()))?;
            if got[w].is_none() && senders.contains(&w) {
                got[w] = Some(b);
                left -= 1;
            } else {
                later.push((w, b));
            }
        }
        self.early = later;
        Ok(got.into_iter().map(Option::unwrap_or_default).collect())
    }
}

impl Transport for Local {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.to.len()
    }

    fn all_to_all(&mut self, bufs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Aborted> {
        for (w, b) in bufs.into_iter().enumerate() {
            if w != self.rank {
                self.send(w, b)?;
            }
        }
        let others: Vec<usize> = (0..self.to.len()).filter(|w| *w != self.rank).collect();
        self.receive(&others)
    }

    fn gather(&mut self, buf: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, Aborted> {
        if self.rank != 0 {
            self.send(0, buf)?;
            return Ok(None);
        }
        let others: Vec<usize> = (1..self.to.len()).collect();
        let mut all = self.receive(&others)?;
        all[0] = buf;
        Ok(Some(all))
    }
}
