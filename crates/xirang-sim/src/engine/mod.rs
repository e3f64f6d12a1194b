//! The discrete-event engine, as components that meet only through packets on links,
//! PFC frames and their own timers.
//!
//! | module | component |
//! |---|---|
//! | [`link`] | a port's transmitter and the directed link leaving it (serialization, propagation, the in-flight ring) |
//! | [`pfc`] | PFC: sending, receiving and refreshing PAUSE frames, pause time accounting |
//! | [`switch`] | a switch: shared buffer admission, XOFF/XON, strict + DWRR scheduling, RED/ECN marking |
//! | [`nic`] | a NIC's transport: QPs, pacing, ACK/NACK/CNP, go-back-N, the ACK timeout |
//! | [`cc_timers`] | congestion-control timers and rate changes (DCQCN decrease/increase, TIMELY on ACK) |
//! | [`faults`] | injected faults, applied where the hardware would see them |
//! | [`flows`] | the workload driver: flow starts, dependencies, NVLink transfers, slots of transfers made during the run |
//! | [`collective`] | collectives as NCCL's kernels run them: GPU threads of primitives, slice by slice |
//! | [`transport`] | the NIC transport of collectives: NCCL's connections, persistent QPs, slots, clear-to-send, completions, the proxy |
//! | [`sampling`] | time series of rates, queues and counters |
//! | [`ffwd`] | fast-forward: skipping a steady collective's pipeline periods, with the counters' deltas and the reported clock's offset |
//! | [`ledger`] | the conservation ledger and what is still in flight |
//! | [`routes`] | routes, computed once per QP with HPCC-compatible ECMP hashing |
//! | [`event`] | the closed set of events |
//! | [`ids`] | typed indices of the arenas |
//!
//! How a packet moves: a port that starts transmitting pushes the packet into the ring of
//! the link leaving it, with its arrival time (start + serialization + propagation); only
//! the ring's head has an `Arrive` event. A port keeps one wake time, when it can next
//! send; a wake superseded by an earlier one stays queued and is ignored when it fires. So
//! the event queue holds about one entry per busy port and link, not one per packet.
//!
//! The partition boundary: a handler runs for one device (a NIC or a switch) and touches
//! only that device's ports, QP halves and counters, the links leaving its ports (to put
//! packets on them) and the event queue. What one device does to another travels as a
//! packet on a link, and so reaches the other device at least one link delay later (the
//! lookahead a parallel engine needs). Two couplings do not follow that rule yet and are
//! named where they are made: a `gdr_off` receiver's credit gate, which its senders read
//! directly (`nic::Sim::rx_gate`), and a flow's dependencies (`flows`), which start a
//! flow the moment the data it waited for arrived, wherever its sender is.

pub mod build;
pub mod cc_timers;
pub mod ccstate;
pub mod collective;
pub mod ecn;
pub mod event;
pub mod fab;
pub mod faults;
pub mod ffwd;
pub mod flows;
pub mod ids;
pub mod ledger;
pub mod link;
pub mod nic;
pub mod part;
pub mod pfc;
pub mod prios;
pub mod routes;
pub mod sampling;
pub mod sched;
pub mod stats;
pub mod steady;
pub mod switch;
pub mod transport;
pub mod work;
pub mod xport;

use xirang_fabric::config::{CcAlgorithm, FabricConfig};
use xirang_fabric::model::{Fabric, NicId, SwitchId};

use crate::counters::{CounterValue, N_PRIO, PortCounters};
use crate::queue::{EventQueue, Key, Queue, TIE_DEV_BITS, Tie};
use crate::time::{PS_PER_US, Ps};
use crate::workload::Expanded;

pub use ledger::Ledger;
pub use pfc::PfcEvent;
pub use sampling::Samples;

use ccstate::CcState;
use event::Event;
use fab::Fab;
use faults::Faults;
use ffwd::{FastForward, FastForwardCriterion};
use ids::{IdVec, PortId, QpId};
use nic::QpTx;
use part::Dist;
use sched::Sched;
use stats::Stats;
use work::Work;
use xport::Xport;

/// A time that never comes.
pub const NEVER: Ps = Ps::MAX;

/// The device index of what belongs to no device (nothing today; the run loop's own
/// bookkeeping would).
pub(crate) const GLOBAL_DEV: u32 = (1 << TIE_DEV_BITS) - 1;
/// Most devices (NICs and switches) a run may have: device indices fit a tie's field,
/// below [`GLOBAL_DEV`].
pub const MAX_DEVICES: usize = GLOBAL_DEV as usize;

/// A run ends at the end of the first window of this width in which every flow is done
/// (see [`Sim::run`]): one microsecond, about one link delay in the fabrics Xirang models.
pub const END_GRID_PS: Ps = PS_PER_US;

/// Owner of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Dev {
    Nic(NicId),
    Switch(SwitchId),
}

/// NIC-wide identity.
#[derive(Debug)]
pub(crate) struct NicState {
    pub(crate) node_id: u32,
    pub(crate) ip: u32,
}

/// A traffic class at run time.
#[derive(Debug, Clone)]
pub(crate) struct ClassRt {
    pub(crate) name: String,
    pub(crate) prio: u8,
    pub(crate) cc: CcAlgorithm,
    pub(crate) dcqcn: xirang_fabric::config::DcqcnParams,
    pub(crate) timely: xirang_fabric::config::TimelyParams,
    pub(crate) hpcc: xirang_fabric::config::HpccParams,
    pub(crate) dctcp: xirang_fabric::config::DctcpParams,
}

/// Fabric-wide settings every device reads (the scenario's configuration; never changed
/// during a run, so each partition of a parallel engine can hold a copy).
#[derive(Debug, Clone)]
pub(crate) struct NetConfig {
    /// Priorities PFC protects.
    pub(crate) pfc_lossless: [bool; N_PRIO],
    pub(crate) pfc_prios: Vec<u8>,
    /// `dynamic_th` of lossless and lossy ingress pools.
    pub(crate) pfc_th: i8,
    pub(crate) lossy_th: i8,
    /// Reserved bytes per ingress port and priority.
    pub(crate) reserved: u64,
    pub(crate) xon_offset: u64,
    pub(crate) pause_quanta: u16,
    pub(crate) cnp_prio: u8,
    pub(crate) ack_prio_high: bool,
    /// RoCEv2 headers of a data packet.
    pub(crate) header_bytes: u32,
    /// Local ACK timeout (`NCCL_IB_TIMEOUT`).
    pub(crate) ack_timeout: Ps,
    /// Timeouts in a row before a QP gives up (`NCCL_IB_RETRY_CNT`).
    pub(crate) retry_cnt: u8,
}

/// How far a run is: what a progress bar shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Simulated time.
    pub now: Ps,
    /// Work done: a flow counts once when sent (or failed), a collective's transfer once
    /// when sent and once when its receiver consumed it.
    pub done: u64,
    /// Work in the whole run, counted the same way.
    pub total: u64,
}

/// Run options.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Seed of every random stream.
    pub seed: u64,
    /// Stop at this time (None: when every flow is done).
    pub end: Option<Ps>,
    /// Sampling interval for time series (None: off).
    pub sample_interval: Option<Ps>,
    /// ECMP hashing mode.
    pub ecmp: xirang_fabric::scenario::EcmpMode,
    /// `ecmp_imbalance` fault: switches hash this share of their flows to this switch
    /// where it is one of their next hops.
    pub hot_switch: Option<(xirang_fabric::model::SwitchId, f64)>,
    /// Collectives report their transfers one by one while they have this many in all
    /// (`[run] transfer_records`).
    pub transfer_records: u64,
    /// Measure how much of the QPs' and connections' sending is steady
    /// (`engine::steady`); the run's results are the same either way.
    pub steady_probe: bool,
    /// Skip steady pipeline periods (`engine::ffwd`) by this criterion (None: exact,
    /// every packet simulated).
    pub fast_forward: Option<FastForwardCriterion>,
}

/// The simulation state.
///
/// `Q` is the event queue; the default calendar queue is the fast one, [`crate::queue::HeapQueue`]
/// is kept as the reference the benchmarks compare it with.
pub struct Sim<Q: Queue = EventQueue> {
    pub(crate) now: Ps,
    pub(crate) q: Q,
    /// Who schedules: what the ties of the events queued now are made of.
    pub(crate) sched: Sched,
    /// This partition's place among the others, in a parallel run.
    pub(crate) dist: Dist,
    /// Ports, links, devices and routes.
    pub(crate) fab: Fab,
    /// The NICs' QP halves and their ACK timers.
    pub(crate) xport: Xport,
    /// Congestion control's parameter sets and HPCC's INT records.
    pub(crate) cc: CcState,
    /// The workload driver: flows, collectives, their GPU threads and connections.
    pub(crate) work: Work,
    /// What the run reports: the ledger, counters, samples, PFC log.
    pub(crate) stats: Stats,
    /// Injected faults and bond failover.
    pub(crate) faults: Faults,
    /// Skipping steady periods, and the offsets that keeps.
    pub(crate) ff: FastForward,
}

impl<Q: Queue> Sim<Q> {
    /// Builds a simulation of the expanded workloads on `fabric` under `config`.
    pub fn new(fabric: &Fabric, config: &FabricConfig, ex: &Expanded, opts: &RunOptions) -> Sim<Q> {
        Sim::new_part(fabric, config, ex, opts, None)
    }

    /// Builds the partition `part` of a parallel run (None: the whole run). Every
    /// partition sets up the whole fabric and every flow, and starts only what its own
    /// devices start.
    pub fn new_part(
        fabric: &Fabric,
        config: &FabricConfig,
        ex: &Expanded,
        opts: &RunOptions,
        part: Option<part::PartMap>,
    ) -> Sim<Q> {
        let layout = build::ports_and_links(fabric, config, opts);
        let (switches, nics) = build::devices(fabric, config, opts, &layout);
        let (classes, base_rtt) = build::classes(fabric, config);
        let net = build::net_config(config);
        let port_names = build::port_names(fabric, &layout.ports);
        let build::PortLayout {
            ports,
            links,
            nic_ports,
            sw_ports,
        } = layout;
        let n_devs = fabric.nics.len() + fabric.switches.len();
        let flows = &ex.flows;
        let mut sim = Sim {
            now: 0,
            sched: Sched::new(n_devs, opts.end),
            dist: Dist::new(part),
            q: Q::with_horizon(build::queue_horizon(fabric, ex)),
            stats: Stats::new(ports.len(), opts.sample_interval, opts.steady_probe),
            fab: Fab::new(ports, links, port_names, switches, nics, net),
            xport: Xport::default(),
            work: Work::new(flows.len()),
            cc: CcState::new(
                classes,
                fabric
                    .nics
                    .iter()
                    .enumerate()
                    .filter_map(|(i, n)| n.congestion.clone().map(|c| (i as u32, c)))
                    .collect(),
                base_rtt,
            ),
            faults: Faults::default(),
            ff: FastForward::new(opts.fast_forward),
        };
        sim.populate(fabric, config, ex, opts, &nic_ports, &sw_ports);
        sim
    }

    /// Nothing is pending: no event and no armed timer.
    pub(crate) fn idle(&self) -> bool {
        self.q.is_empty() && self.xport.no_timers()
    }

    /// The tie of an event for device `target` scheduled now ([`Sched::tie`]).
    #[inline(always)]
    pub(crate) fn tie(&mut self, t: Ps, target: u32) -> Tie {
        self.sched.tie(t, target)
    }

    /// The device an event happens at.
    #[inline(always)]
    pub(crate) fn target_of(&self, e: Event) -> u32 {
        match e {
            Event::Wake(p) | Event::PfcRefresh { port: p, .. } | Event::RxDrain { port: p, .. } => {
                self.fab.port(p).dev_idx
            }
            Event::Arrive(p) => self.fab.link(p).to_dev,
            Event::FlowStart(f) | Event::LocalDone(f) => self.work.flow(f).dev,
            Event::DcqcnDec(q) | Event::DcqcnInc(q) | Event::Rto(q) => {
                self.fab.port(self.xport.tx(q).src_port).dev_idx
            }
            Event::GpuStart(t) | Event::GpuDone(t) => self.work.thread(t as usize).dev,
            Event::Proxy { conn, action } => {
                let c = self.work.conn(conn as usize);
                if action.at_sender() { c.src_dev } else { c.dst_dev }
            }
            Event::Fault { fault, peer, .. } => {
                let p = self.faults.port_of(fault);
                let p = if peer { self.fab.port(p).peer } else { p };
                self.fab.port(p).dev_idx
            }
        }
    }

    /// Queues an event.
    #[inline(always)]
    pub(crate) fn schedule(&mut self, t: Ps, e: Event) {
        let target = self.target_of(e);
        // Set-up builds every device in every partition; each queues only its own
        // devices' first events. Once running, a device only ever schedules events for
        // itself or for devices it shares a partition with (a flow that starts when
        // another arrived has its sender with that receiver: `crate::parallel::plan`).
        if self.sched.in_setup() && !self.owns(target) {
            return;
        }
        debug_assert!(
            self.owns(target),
            "invariant: events are queued where their device runs"
        );
        let tie = self.tie(t, target);
        self.q.push(t, tie, e.encode());
    }

    /// A flow (or collective transfer) is done: sent, or failed.
    #[inline]
    pub(crate) fn flow_done(&mut self) {
        let at = self.reported_now();
        self.work.did_one(at);
    }

    /// Runs until every flow is done, the end time, or no events remain. `progress` is
    /// called every few thousand events.
    ///
    /// The run goes in windows of [`END_GRID_PS`] and stops at the end of the first window
    /// in which every flow is done, so what happens at the last instants (ACKs still on
    /// their way, pauses lifting) does not depend on which device finished last, nor on
    /// how a parallel run divides the fabric. Counter samples are taken at every multiple
    /// of the sampling interval, after the events of that instant, up to the end.
    pub fn run(&mut self, progress: &mut dyn FnMut(Progress)) {
        // The end and its grid are in reported time, which runs ahead of the engine's
        // clock by what a fast-forward skipped.
        let end = self.sched.end().unwrap_or(NEVER);
        self.start_run();
        loop {
            // The grid window of the next event (windows holding nothing are skipped:
            // nothing in them could end the run).
            let off = self.ff.skipped_ps();
            let next = self.next_event_time().unwrap_or(self.now).max(self.now) + off;
            let limit = ((next / END_GRID_PS + 1) * END_GRID_PS - 1).min(end);
            self.run_until(limit - off, progress);
            if limit >= end {
                debug_assert!(end - off >= self.now, "invariant: no skip crosses the end time");
                self.stop_at_end(end - off, !self.idle());
                break;
            }
            if self.work.progress().0 == self.work.progress().1 || self.idle() {
                break;
            }
            self.ff_check(end, limit - off);
        }
        self.finish_run();
    }

    /// Ends set-up: from now on events are scheduled by the device handling one.
    pub fn start_run(&mut self) {
        self.sched.start_run();
        self.stats.start_sampling();
        self.ff_start();
    }

    /// Handles every event and takes every sample due up to `limit` (inclusive).
    pub fn run_until(&mut self, limit: Ps, progress: &mut dyn FnMut(Progress)) {
        const PROGRESS_EVERY: u64 = 1 << 16;
        loop {
            // The event queue and the ACK timers order by the same keys, so popping
            // whichever holds the smaller key keeps the order one queue would have.
            let timer = self.xport.next_timer();
            let (k, e) = match self.q.pop_before(timer.map_or(Key::MAX, |(k, _)| k), limit) {
                Some((k, e)) => (k, Event::decode(e)),
                None => match timer {
                    Some((k, qp)) if k.time() <= limit => {
                        self.xport.pop_timer();
                        (k, Event::Rto(QpId(qp)))
                    }
                    _ => break,
                },
            };
            let t = k.time();
            while self.stats.next_sample() < t {
                self.now = self.stats.next_sample();
                self.sample();
                self.stats.sampled();
            }
            debug_assert!(t >= self.now, "invariant: time never goes backwards");
            self.now = t;
            self.sched.running(k);
            self.dispatch(e);
            if self.stats.event().is_multiple_of(PROGRESS_EVERY) {
                progress(Progress {
                    now: self.reported_now(),
                    done: self.work.progress().0,
                    total: self.work.progress().1,
                });
            }
        }
        while self.stats.next_sample() <= limit && self.stats.next_sample() != NEVER {
            self.now = self.stats.next_sample();
            self.sample();
            self.stats.sampled();
        }
    }

    /// The run stopped at its end time: time stands there if anything was still to
    /// happen (`busy`, over every partition).
    pub fn stop_at_end(&mut self, end: Ps, busy: bool) {
        if busy {
            self.now = end;
        }
    }

    /// Settles what runs on after the last event (pause durations still in force).
    pub fn finish_run(&mut self) {
        self.settle_pause_durations();
    }

    /// Flows and collective transfers this run (partition) has done, of all in the run.
    pub fn flows_done(&self) -> (u64, u64) {
        self.work.progress()
    }

    /// Time of the earliest pending event or timer.
    pub fn next_event_time(&self) -> Option<Ps> {
        let timer = self.xport.next_timer().map(|(k, _)| k.time());
        match (self.q.peek_time(), timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    #[inline(always)]
    fn dispatch(&mut self, e: Event) {
        match e {
            Event::Wake(p) => {
                if self.fab.port(p).wake_at == self.now {
                    self.fab.port_mut(p).wake_at = NEVER;
                    self.try_send(p);
                }
            }
            Event::Arrive(p) => self.arrive(p),
            Event::FlowStart(f) => self.start_flow(f),
            Event::DcqcnDec(q) => self.dcqcn_dec(q),
            Event::DcqcnInc(q) => self.dcqcn_inc(q),
            Event::Rto(q) => self.rto(q),
            Event::PfcRefresh {
                port,
                prio,
                generation,
            } => self.pfc_refresh(port, usize::from(prio), generation),
            Event::Fault { fault, end, peer } => self.fault_event(fault, end, peer),
            Event::RxDrain { port, prio } => self.rx_drain(port, usize::from(prio)),
            Event::LocalDone(f) => self.local_done(f),
            Event::GpuStart(t) => self.gpu_start(t),
            Event::GpuDone(t) => self.gpu_done(t),
            Event::Proxy { conn, action } => self.proxy(conn, action),
        }
    }

    /// Every port's counters under their hardware names.
    pub fn named_counters(&self) -> Vec<CounterValue> {
        let mut out = Vec::new();
        for (pi, c) in self.port_counters().iter_enumerated() {
            let name = self.fab.port_name(pi);
            match self.fab.port(pi).dev {
                Dev::Nic(_) => c.nic_named(name, &self.fab.net().pfc_prios, &mut out),
                Dev::Switch(_) => c.switch_named(name, &self.fab.net().pfc_prios, &mut out),
            }
        }
        out
    }

    /// Largest number of pending events.
    pub fn peak_events_pending(&self) -> usize {
        self.q.peak() + self.dist.merged_peak_pending()
    }

    /// Current simulated time, as the run reports it (the engine's clock plus what a
    /// fast-forward skipped).
    pub fn now(&self) -> Ps {
        self.reported_now()
    }

    /// Complete counters of every port: the rarely-touched ones as kept, the per-packet ones
    /// from the port's own transmit and receive counts, and what fast-forward skips added.
    pub(crate) fn port_counters(&self) -> IdVec<PortId, PortCounters> {
        self.port_counters_with(true)
    }

    /// The same, without what fast-forward skips added: what the engine itself counted.
    pub(crate) fn port_counters_internal(&self) -> IdVec<PortId, PortCounters> {
        self.port_counters_with(false)
    }

    fn port_counters_with(&self, skipped: bool) -> IdVec<PortId, PortCounters> {
        self.fab
            .ports()
            .map(|(pi, port)| {
                let mut c = self.stats.counters(pi).clone();
                // Pauses still in force count up to now, as the hardware's running
                // duration counters do (they are settled into the totals at the end).
                for prio in 0..N_PRIO {
                    if port.xoff.contains(prio) {
                        c.tx_pause_ps[prio] += self.now - port.pfc[prio].xoff_since;
                    }
                    if port.pfc[prio].pause_since != NEVER {
                        c.rx_pause_ps[prio] +=
                            port.pfc[prio].paused_until.min(self.now) - port.pfc[prio].pause_since;
                    }
                }
                c.rate_mbps = (port.rate.bps / 1e6).round() as u64;
                c.pcie = port.as_nic().and_then(|n| n.pcie).map(|l| {
                    let mts = |gts: f64| (gts * 1000.0).round() as u64;
                    [
                        u64::from(l.cur_width),
                        u64::from(l.max_width),
                        mts(l.cur_speed_gts),
                        mts(l.max_speed_gts),
                    ]
                });
                for prio in 0..N_PRIO {
                    c.tx_prio_bytes[prio] = port.egress[prio].tx_bytes;
                    c.tx_prio_packets[prio] = port.egress[prio].tx_packets;
                    c.rx_prio_bytes[prio] = port.ingress[prio].rx_bytes;
                    c.rx_prio_packets[prio] = port.ingress[prio].rx_packets;
                }
                if let Some(off) = self.ff.offset(pi).filter(|_| skipped) {
                    c.zip_cumulative(off, off, &mut |x, d, _| *x += d);
                }
                for prio in 0..N_PRIO {
                    let (tb, tp) = (c.tx_prio_bytes[prio], c.tx_prio_packets[prio]);
                    if matches!(port.dev, Dev::Switch(_)) {
                        // Egress queues carry everything but PFC frames, which bypass them.
                        c.q_packets[prio] = tp - c.tx_pause[prio];
                        c.q_bytes[prio] = tb - c.tx_pause[prio] * u64::from(link::PFC_FRAME_BYTES);
                        c.q_watermark[prio] = port.pfc[prio].watermark;
                    }
                }
                c.tx_bytes = c.tx_prio_bytes.iter().sum();
                c.tx_packets = c.tx_prio_packets.iter().sum();
                c.rx_bytes = c.rx_prio_bytes.iter().sum();
                c.rx_packets = c.rx_prio_packets.iter().sum();
                c
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
