//! Time series: each sending QP's rate, each non-empty switch egress queue, and every
//! counter that changed since the previous sample, taken every sampling interval.
//!
//! A sample compares each counter with its last value by slot (port, then the counter's
//! position in what the port reports) and keeps changed values as codes; names are
//! rendered when results are collected, never in the sampling event.

use super::event::Event;
use super::ids::{PortId, QpId};
use super::{Dev, Sim};
use crate::counters::{CounterName, N_PRIO, SLOTS_PER_PORT, Scope};
use crate::queue::Queue;
use crate::time::Ps;

/// A counter never sampled.
const UNSEEN: u64 = u64::MAX;

/// Time-series samples.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// (time, port, scope, counter, value) for every counter whose value changed since the
    /// previous sample, in the order the ports report them.
    pub(crate) counters: Vec<(Ps, PortId, Scope, CounterName, u64)>,
    /// Last value of each (port, slot); `UNSEEN` before its first report.
    last: Vec<u64>,
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
        let counters = self.port_counters();
        let samples = &mut self.samples;
        if samples.last.is_empty() {
            samples.last = vec![UNSEEN; counters.len() * SLOTS_PER_PORT];
        }
        for (pi, c) in counters.iter_enumerated() {
            let base = pi.idx() * SLOTS_PER_PORT;
            let (last, out) = (&mut samples.last, &mut samples.counters);
            let mut keep = |slot: usize, scope: Scope, name: CounterName, value: u64| {
                let l = &mut last[base + slot];
                // A counter appears with its first non-zero value, then with every change.
                if *l != value && !(*l == UNSEEN && value == 0) {
                    *l = value;
                    out.push((now, pi, scope, name, value));
                }
            };
            match self.ports[pi].dev {
                Dev::Nic(_) => c.visit_nic(&self.net.pfc_prios, &mut keep),
                Dev::Switch(_) => c.visit_switch(&self.net.pfc_prios, &mut keep),
            }
        }
        // Keep sampling only while something else can still happen.
        if let Some(iv) = self.sample_interval
            && !self.idle()
        {
            self.schedule(now + iv, Event::Sample);
        }
    }
}
