//! Deltas and rates between samples of many counters.
//!
//! A counter that goes down either wrapped (it passed its width's maximum) or was reset
//! (a driver reload or device reset restarts it from zero). The tracker tells them apart
//! by where the previous value was: a counter wraps only from the top half of its range
//! into a small value, and a wrap is accepted only when the implied increase is below half
//! the range (a larger one is indistinguishable from a reset). After a reset the new
//! value itself is the increase since the reset, as Prometheus's `rate()` assumes.
//! Counters seen for the first time give no delta; counters not seen in a round vanish
//! and are reported, so a device that disappears does not leave stale rates behind.

use std::collections::HashMap;
use std::hash::Hash;

use crate::spec::Width;

/// What happened to a counter between two samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// First sample of this counter: no delta yet.
    First,
    /// Increase since the previous sample (raw units), over `dt_s` seconds.
    Delta {
        /// Increase in raw units.
        delta: u64,
        /// Seconds between the samples.
        dt_s: f64,
        /// True when the counter wrapped past its maximum.
        wrapped: bool,
    },
    /// The counter went down without wrapping: it was reset; `since_reset` is its value.
    Reset {
        /// Increase since the reset (the new raw value).
        since_reset: u64,
        /// Seconds between the samples.
        dt_s: f64,
    },
    /// Same timestamp as the previous sample (or earlier): ignored.
    Stale,
}

impl Change {
    /// The increase in raw units this change stands for (0 for `First` and `Stale`).
    pub fn increase(&self) -> u64 {
        match *self {
            Change::Delta { delta, .. } => delta,
            Change::Reset { since_reset, .. } => since_reset,
            Change::First | Change::Stale => 0,
        }
    }

    /// The rate per second in raw units, when there is one.
    pub fn rate(&self) -> Option<f64> {
        match *self {
            Change::Delta { delta, dt_s, .. } => Some(delta as f64 / dt_s),
            Change::Reset { since_reset, dt_s } => Some(since_reset as f64 / dt_s),
            Change::First | Change::Stale => None,
        }
    }
}

/// The increase from `prev` to `cur` for a counter of `width`: `(increase, wrapped)`,
/// or `None` when it was a reset.
pub fn increase(prev: u64, cur: u64, width: Width) -> Option<(u64, bool)> {
    if cur >= prev {
        return Some((cur - prev, false));
    }
    let m = width.modulus();
    let half = m / 2;
    // A value beyond the width's range cannot have wrapped at that width.
    let wrapped = m.checked_sub(u128::from(prev))? + u128::from(cur);
    if u128::from(prev) >= half && wrapped < half {
        Some((u64::try_from(wrapped).unwrap_or(u64::MAX), true))
    } else {
        None
    }
}

/// What a sample `raw` at `ts_ns` means after the previous sample `last` (time, raw):
/// the one rule every consumer of counters uses (the tracker below, the monitor's
/// collector).
pub fn change_since(last: Option<(u64, u64)>, ts_ns: u64, raw: u64, width: Width) -> Change {
    let Some((t, prev)) = last else {
        return Change::First;
    };
    if ts_ns <= t {
        return Change::Stale;
    }
    let dt_s = (ts_ns - t) as f64 / 1e9;
    match increase(prev, raw, width) {
        Some((delta, wrapped)) => Change::Delta { delta, dt_s, wrapped },
        None => Change::Reset {
            since_reset: raw,
            dt_s,
        },
    }
}

#[derive(Debug, Clone, Copy)]
struct Last {
    ts_ns: u64,
    raw: u64,
    round: u64,
}

/// Tracks the last sample of every counter.
#[derive(Debug, Clone)]
pub struct RateTracker<K> {
    last: HashMap<K, Last>,
    round: u64,
}

impl<K> Default for RateTracker<K> {
    fn default() -> Self {
        RateTracker {
            last: HashMap::new(),
            round: 0,
        }
    }
}

impl<K: Eq + Hash + Clone> RateTracker<K> {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a sampling round: counters not observed before [`end_round`](Self::end_round)
    /// vanish.
    pub fn begin_round(&mut self) {
        self.round += 1;
    }

    /// Records a sample and returns what changed since the previous one.
    pub fn observe(&mut self, key: &K, ts_ns: u64, raw: u64, width: Width) -> Change {
        let round = self.round;
        let Some(last) = self.last.get_mut(key) else {
            self.last.insert(key.clone(), Last { ts_ns, raw, round });
            return Change::First;
        };
        let change = change_since(Some((last.ts_ns, last.raw)), ts_ns, raw, width);
        if change == Change::Stale {
            last.round = round;
        } else {
            *last = Last { ts_ns, raw, round };
        }
        change
    }

    /// Ends a round: forgets and returns the counters not observed in it.
    pub fn end_round(&mut self) -> Vec<K> {
        let round = self.round;
        let gone: Vec<K> = self
            .last
            .iter()
            .filter(|(_, l)| l.round != round)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.last.remove(k);
        }
        gone
    }

    /// Number of counters tracked.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}
