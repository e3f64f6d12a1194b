//! What the run reports, the statistics component: the conservation ledger, each port's
//! counters, the PFC log, the time-series samples and the event and hop counts. Its
//! fields are its own: handlers count through it (a port's counter block, a hop, an
//! event, a PFC transition, a sample), the results read it, and a parallel run moves a
//! partition's share out and back through it.
//!
//! ```compile_fail
//! // A handler cannot reach into the statistics' fields.
//! fn peek(s: &xirang_sim::engine::stats::Stats) -> u64 {
//!     s.events
//! }
//! ```

use super::NEVER;
use super::ids::{IdVec, PortId};
use super::ledger::Ledger;
use super::pfc::PfcEvent;
use super::sampling::Samples;
use super::steady::{SteadyProbe, SteadyReport, Totals};
use crate::counters::PortCounters;
use crate::time::Ps;

/// The statistics of a run (or of a partition of one).
pub struct Stats {
    events: u64,
    packet_hops: u64,
    ledger: Ledger,
    /// Counters of each port that are not touched per packet.
    counters: IdVec<PortId, PortCounters>,
    pfc_log: Vec<PfcEvent>,
    samples: Samples,
    sample_interval: Option<Ps>,
    /// When the next counter sample is due.
    next_sample: Ps,
    /// Steady-state detection, when asked for.
    steady: Option<Box<SteadyProbe>>,
}

/// A partition's statistics on their way to the partition that gathers the run.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Shipped {
    pub(crate) samples: Samples,
    pub(crate) pfc_log: Vec<PfcEvent>,
    pub(crate) ledger: Ledger,
    pub(crate) events: u64,
    pub(crate) packet_hops: u64,
    pub(crate) steady: Option<Totals>,
}

impl Stats {
    /// Nothing counted on `ports` ports; samples every `sample_interval` once the run
    /// starts; probes steadiness when `steady_probe`.
    pub(crate) fn new(ports: usize, sample_interval: Option<Ps>, steady_probe: bool) -> Stats {
        Stats {
            events: 0,
            packet_hops: 0,
            ledger: Ledger::default(),
            counters: (0..ports).map(|_| PortCounters::default()).collect(),
            pfc_log: Vec::new(),
            samples: Samples::default(),
            sample_interval,
            next_sample: NEVER,
            steady: steady_probe.then(Box::default),
        }
    }

    /// A QP sent a data packet (`SteadyProbe::sent`), when steadiness is probed.
    #[inline(always)]
    pub(crate) fn steady_sent(&mut self, qp: super::ids::QpId, now: Ps, rate_bps: f64, more: bool) {
        if let Some(p) = &mut self.steady {
            p.sent(qp, now, rate_bps, more);
        }
    }

    /// Slices of a connection arrived (`SteadyProbe::slices`), when steadiness is probed.
    #[inline(always)]
    pub(crate) fn steady_slices(&mut self, c: u32, now: Ps, n: u64) {
        if let Some(p) = &mut self.steady {
            p.slices(c, now, n);
        }
    }

    /// What the steadiness probe measured (None: not probed).
    pub(crate) fn steady_report(&self) -> Option<SteadyReport> {
        self.steady.as_ref().map(|p| p.report())
    }

    /// Port `p`'s counter block, to count on.
    #[inline(always)]
    pub(crate) fn port(&mut self, p: PortId) -> &mut PortCounters {
        &mut self.counters[p]
    }

    /// Port `p`'s counters as counted.
    #[inline]
    pub(crate) fn counters(&self, p: PortId) -> &PortCounters {
        &self.counters[p]
    }

    /// Every port's counter block, in port order.
    pub(crate) fn ports_mut(&mut self) -> impl Iterator<Item = &mut PortCounters> {
        self.counters.iter_mut()
    }

    /// A packet crossed a link.
    #[inline(always)]
    pub(crate) fn hop(&mut self) {
        self.packet_hops += 1;
    }

    /// `n` packets crossed links in time a fast-forward skipped.
    pub(crate) fn skipped_hops(&mut self, n: u64) {
        self.packet_hops += n;
    }

    /// An event was handled; the count so far.
    #[inline(always)]
    pub(crate) fn event(&mut self) -> u64 {
        self.events += 1;
        self.events
    }

    /// Events handled.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    /// Packets that crossed a link.
    pub(crate) fn packet_hops(&self) -> u64 {
        self.packet_hops
    }

    /// The conservation ledger.
    #[inline(always)]
    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The conservation ledger, to account a packet's birth, delivery or loss.
    #[inline(always)]
    pub(crate) fn ledger_mut(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    /// Records a PFC transition.
    pub(crate) fn log_pfc(&mut self, e: PfcEvent) {
        self.pfc_log.push(e);
    }

    /// The PFC transitions, as logged.
    pub(crate) fn pfc_log(&self) -> &[PfcEvent] {
        &self.pfc_log
    }

    /// The samples taken so far.
    pub(crate) fn samples(&self) -> &Samples {
        &self.samples
    }

    /// The samples taken so far, to add one.
    pub(crate) fn samples_mut(&mut self) -> &mut Samples {
        &mut self.samples
    }

    /// The run starts: the first sample is due one interval in (never without one).
    pub(crate) fn start_sampling(&mut self) {
        self.next_sample = self.sample_interval.unwrap_or(NEVER);
    }

    /// When the next sample is due (`NEVER` without sampling).
    #[inline(always)]
    pub(crate) fn next_sample(&self) -> Ps {
        self.next_sample
    }

    /// A fast-forward skipped `dt` after taking the samples due in it: the samples to
    /// come are due `dt` earlier on the engine's clock, at their times in reported time.
    pub(crate) fn shift_sampling(&mut self, dt: Ps) {
        if self.next_sample != NEVER {
            self.next_sample -= dt;
        }
    }

    /// The sample due was taken: the next is one interval later.
    pub(crate) fn sampled(&mut self) {
        let iv = self.sample_interval.unwrap_or(NEVER);
        self.next_sample = self.next_sample.saturating_add(iv);
    }

    /// Takes every port's counters out (a partition's share goes to the gatherer).
    pub(crate) fn take_counters(&mut self) -> IdVec<PortId, PortCounters> {
        std::mem::take(&mut self.counters)
    }

    /// Puts port `p`'s counters back from the partition that ran it.
    pub(crate) fn set_counters(&mut self, p: PortId, c: PortCounters) {
        self.counters[p] = c;
    }

    /// Takes what a partition reports besides its ports' counters.
    pub(crate) fn ship(&mut self) -> Shipped {
        Shipped {
            samples: std::mem::take(&mut self.samples),
            pfc_log: std::mem::take(&mut self.pfc_log),
            ledger: self.ledger,
            events: self.events,
            packet_hops: self.packet_hops,
            steady: self.steady.as_ref().map(|p| p.totals().clone()),
        }
    }

    /// Adds another partition's report to this one.
    pub(crate) fn absorb(&mut self, o: Shipped) {
        let mut samples = o.samples;
        self.samples.counters.append(&mut samples.counters);
        self.samples.rates.append(&mut samples.rates);
        self.samples.queues.append(&mut samples.queues);
        let mut pfc = o.pfc_log;
        self.pfc_log.append(&mut pfc);
        self.ledger.absorb(&o.ledger);
        self.events += o.events;
        self.packet_hops += o.packet_hops;
        if let (Some(p), Some(r)) = (&mut self.steady, &o.steady) {
            p.absorb(r);
        }
    }

    /// Puts the gathered samples in the serial run's order: each partition's are in time
    /// order, and at one time in port order.
    pub(crate) fn sort_samples(&mut self) {
        self.samples.counters.sort_by_key(|&(t, p, ..)| (t, p));
        self.samples.queues.sort_by_key(|&(t, p, prio, _)| (t, p, prio));
    }
}
