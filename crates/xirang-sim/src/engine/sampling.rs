//! Time series: each sending QP's rate, each non-empty switch egress queue, and every
//! counter that changed since the previous sample, taken every sampling interval.

use super::event::Event;
use super::ids::{PortId, QpId};
use super::{Dev, Sim};
use crate::counters::{CounterValue, N_PRIO};
use crate::queue::Queue;
use crate::time::Ps;

/// Time-series samples.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// (time, counter) for every counter whose value changed since the previous sample.
    pub counters: Vec<(Ps, CounterValue)>,
    last_counters: std::collections::HashMap<(String, String), u64>,
    /// (time, qp, rate bit/s) of sending QPs.
    pub rates: Vec<(Ps, QpId, f64)>,
    /// (time, port, prio, bytes) of non-empty switch egress queues.
    pub queues: Vec<(Ps, PortId, u8, u64)>,
}

impl<Q: Queue> Sim<Q> {
    pub(crate) fn sample(&mut self) {
        let now = self.now;
        for (qi, q) in self.qps_tx.iter_enumerated() {
            if q.done || self.flows[q.flow].started.is_none() {
                continue;
            }
            self.samples.rates.push((now, qi, q.rate_bps()));
        }
        for (pi, port) in self.ports.iter_enumerated() {
            if matches!(port.dev, Dev::Switch(_)) {
                for prio in 0..N_PRIO {
                    if port.pr[prio].egr > 0 {
                        self.samples.queues.push((now, pi, prio as u8, port.pr[prio].egr));
                    }
                }
            }
        }
        for c in self.named_counters() {
            let key = (c.entity.clone(), c.name.clone());
            let last = self.samples.last_counters.get(&key).copied();
            if last != Some(c.value) && !(last.is_none() && c.value == 0) {
                self.samples.last_counters.insert(key, c.value);
                self.samples.counters.push((now, c));
            }
        }
        // Keep sampling only while something else can still happen.
        if let Some(iv) = self.sample_interval
            && !self.q.is_empty()
        {
            self.schedule(now + iv, Event::Sample);
        }
    }
}
