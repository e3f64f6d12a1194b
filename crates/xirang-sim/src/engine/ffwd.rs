//! Fast-forward, the component that skips what does not change: when a collective's
//! pipeline has been steady for a window, the run takes whole periods of its work out at
//! once instead of simulating them packet by packet (the fast-forward issue; the design
//! and its measurements are in docs/fast-forward.md).
//!
//! The skip is the whole-fabric kind that leaves the event queue alone but for flow
//! starts. Every pending event keeps its time relative to every other, so nothing in
//! flight moves; instead:
//!
//! - every GPU thread and connection of the collective moves the same number of
//!   primitives on (`Sim::advance_threads`), inside the run of equal primitives it is in
//!   (`Program::uniform_run`), by a multiple of every connection's slots and QPs and of
//!   [`PERIOD_SLICES`] (a slice's slot and QP are its number modulo these, and the
//!   pipeline repeats every period), so what is in flight keeps its place;
//! - the skipped time, ΔT, is what those slices took in the window just measured;
//! - every counter the run reports gets what it counted in that window, scaled to ΔT: the
//!   ports' counters through a separate offset added only when they are reported (HPCC's
//!   INT reads the live egress byte counter), the conservation ledger on both sides, the
//!   packet hops;
//! - every time stamped from then on is reported ΔT later ([`FastForward::skipped_ps`]);
//!   the end time and its grid are kept in reported time.
//!
//! A run skips only where this is sound, and says why not otherwise: no faults, no
//! sampling, no transfer records, one collective under way, no scenario flow under way
//! nor started in the counters' window, no PFC frame nor drop in the window. A skip
//! stops short of the next flow start, and queues every start still to come ΔT earlier
//! (`Sim::ff_shift_flow_starts`).
//!
//! A divided run skips as the serial run does, byte for byte: checks fall at the end of a
//! grid window, where every partition has handled every event up to it; each partition
//! surveys what it owns (its threads, its connections' ends, its ports) into a
//! [`Survey`] of sums, minima and flags, the surveys are combined at the window's barrier
//! (`crate::parallel`, over threads or MPI ranks), and every partition decides from the
//! whole run's survey, then moves what it owns.
//!
//! The steadiness test is the probe's per-connection test over periods
//! (`steady::PipelineWatch`): each network connection's time per slice, averaged over
//! [`PERIOD_SLICES`] slices, within a spread θ over a window of `l` microseconds. Memory:
//! the watch's state per connection, and while the fabric is steady one copy of every
//! port's counters (the window's start), plus the offsets once a skip happened.

use std::collections::{BTreeMap, VecDeque};

use super::Sim;
use super::collective::{Move, Room, RoomSurvey};
use super::event::Event;
use super::ids::{FlowId, IdVec, PortId};
use super::ledger::Ledger;
use super::steady::{PERIOD_SLICES, PipelineWatch, SAMPLE_PS};
use xirang_fabric::workload::{CollectiveAlgorithm, CollectiveOp};

use crate::counters::PortCounters;
use crate::queue::Queue;
use crate::time::{PS_PER_US, Ps};

/// The spread a connection's time per slice may have over the window: Wormhole's
/// default θ (docs/reference/fast-forward.md §1).
pub const FF_THETA: f64 = 0.05;
/// The least window, in samples of [`SAMPLE_PS`] (1 µs): one DCQCN rate-increase period
/// at its default (`rpg_time_reset`, 300 µs, docs/reference/congestion-control.md §1.5),
/// what the reference notes ask of a window for DCQCN, whose steadiness Wormhole did not
/// prove (docs/reference/fast-forward.md, "Design notes" 7). A run whose DCQCN period is
/// longer waits that long. Wormhole's default is 2,000; the rings measured in
/// docs/fast-forward.md are steady for most of their time at 300 to 500, and 2,000 takes
/// a large share of a collective's phase before the first skip.
pub const FF_WINDOW: u32 = 300;
/// The least time whose counters a skip extrapolates. Measured on
/// `scenarios/rail-1024gpu.toml` (docs/fast-forward.md, "Choices that were measured"): with 100 µs the port
/// counters' totals were up to 1.0 % off the exact run's, with 200 µs 0.18 %, with
/// 500 µs 0.18 % too; a ring's traffic repeats every few tens of microseconds there, and
/// a window of two periods cuts them at arbitrary places.
pub const FF_COUNTER_WINDOW_PS: Ps = 200 * PS_PER_US;
/// How often a run asks whether it may skip: every 20 µs, so a skip comes at most that
/// late once the window has passed. A check reads every connection of the collective
/// under way (65,536 at 8,192 GPUs, a fraction of a millisecond), against seconds of
/// simulation between two checks at that size.
pub const FF_CHECK_PS: Ps = 20 * PS_PER_US;
/// How often a run copies its counters while a collective is under way, steady or not:
/// every half counters' window, so the first check that finds the fabric steady finds a
/// copy old enough and skips at once. It keeps the copies of the last one and a half
/// windows (at most four). A copy is every port's counters: 33 MB at 8,192 GPUs and
/// milliseconds to take, against seconds of simulation per 100 µs at that size.
pub const FF_SNAPSHOT_PS: Ps = FF_COUNTER_WINDOW_PS / 2;
/// The shortest steadiness window a criterion may have, in samples: the counters' window
/// must lie inside it, from a copy taken at most [`FF_SNAPSHOT_PS`] before it begins
/// (counters' windows of 50 µs, inside steadiness windows of 100 µs, put the counters of
/// random rings in `tests/ffwd.rs` up to 3.3 % off the exact run's).
pub const FF_MIN_WINDOW: u32 = ((FF_COUNTER_WINDOW_PS + FF_SNAPSHOT_PS) / SAMPLE_PS) as u32;

/// When a run may skip: the steadiness criterion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FastForwardCriterion {
    /// Largest spread, (max - min) / mean, of a connection's time per slice.
    pub theta: f64,
    /// Window, in samples of 1 µs (None: [`FF_WINDOW`], or the run's longest DCQCN
    /// rate-increase period if longer).
    pub window: Option<u32>,
    /// Only for the collectives the validation matrix covers ([`VALIDATED`]): what a run
    /// does when nobody asked (a scenario without `[run] fast_forward`); the others run
    /// exactly, and the report says why.
    pub validated_only: bool,
}

/// The collectives fast-forward is on for when nobody asked: AllReduce by ring, tree and
/// hierarchical algorithms, from 16 to 1,024 GPUs and 1 MiB to 1 GiB, within the issue's
/// tolerances against the exact run (VALIDATION.md, "Fast-forward against exact"). Other
/// operations skip only when asked.
pub const VALIDATED: &[(CollectiveOp, CollectiveAlgorithm)] = &[
    (CollectiveOp::AllReduce, CollectiveAlgorithm::Ring),
    (CollectiveOp::AllReduce, CollectiveAlgorithm::Tree),
    (CollectiveOp::AllReduce, CollectiveAlgorithm::Hierarchical),
];

impl Default for FastForwardCriterion {
    /// Asked for: every collective.
    fn default() -> Self {
        FastForwardCriterion {
            theta: FF_THETA,
            window: None,
            validated_only: false,
        }
    }
}

impl FastForwardCriterion {
    /// What a run does when nobody asked: on for the kinds in [`VALIDATED`].
    pub fn by_default() -> Self {
        FastForwardCriterion {
            validated_only: true,
            ..FastForwardCriterion::default()
        }
    }
}

/// What a run's fast-forward did: for engine.json and the terminal.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FastForwardReport {
    /// The criterion: largest spread of a connection's time per slice.
    pub theta: f64,
    /// The criterion's window.
    pub window_us: u32,
    /// On because nobody asked otherwise (a scenario without `[run] fast_forward`), for
    /// the collectives in [`VALIDATED`] only.
    #[serde(default)]
    pub by_default: bool,
    /// Why the run could not skip at all (None: it could, where steady).
    pub off: Option<String>,
    /// Times the run asked whether it may skip.
    pub checks: u64,
    /// Skips made.
    pub skips: u64,
    /// Of them, skips by whole loops of a ring (the others move inside a phase).
    #[serde(default)]
    pub loop_skips: u64,
    /// Simulated time skipped.
    pub skipped_ps: Ps,
    /// Its share of the run's simulated time.
    pub skipped_share: f64,
    /// Slices the skips moved, over every connection.
    pub slices_skipped: u64,
    /// Events the skipped time would have taken, at the window's rate (an estimate).
    pub events_saved: u64,
    /// Why checks did not skip, and how many times each.
    pub not_skipped: BTreeMap<String, u64>,
}

/// What a run, or one partition of a divided run, knows at a fast-forward check, in a
/// form that adds up over partitions exactly (sums, minima, flags, integers only) and in
/// any order: every partition decides from the whole run's survey, so a divided run
/// makes the serial run's decisions, and its results are the serial run's byte for byte.
/// A check has two: the collectives' progress (which is under way), then that one's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Survey {
    /// Each collective's transfers arrived and whether a connection of it failed.
    Colls(Vec<(u64, bool)>),
    /// The collective under way (boxed: a status carries a survey only at checks).
    Coll(Box<CollSurvey>),
}

/// A check's survey of the collective under way (`Sim::ff_survey`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CollSurvey {
    /// Slices consumed over its connections' receiving ends.
    consumed: u64,
    /// Slices handed to the QPs over its network connections' sending ends.
    sent: u64,
    /// Events handled.
    events: u64,
    /// The conservation ledger.
    ledger: Ledger,
    /// Its network connections' times per slice summed, in fixed point ([`to_fixed`]):
    /// integers add up alike in any order, floating point does not.
    steady_fx: u128,
    /// Network connections watched.
    steady_n: u64,
    /// A network connection is not steady.
    unsteady: bool,
    /// Its threads' room.
    room: RoomSurvey,
    /// Slices every connection may move on (`Conn::skip_room`).
    conn_room: u64,
    /// PFC frames, drops or retransmissions since each copy of the counters old enough
    /// for a skip: bit `i` for the `i`-th copy kept.
    dirty: u64,
    /// A scenario flow is under way: started, and not every byte acknowledged.
    flow_active: bool,
    /// Scenario flows started.
    flows_started: u64,
    /// The earliest queued flow start, on the engine's clock ([`super::NEVER`]: none).
    next_flow_start: Ps,
}

impl Survey {
    /// Both partitions' surveys as one (surveys of one check are of one kind).
    pub fn combine(self, o: Survey) -> Survey {
        match (self, o) {
            (Survey::Colls(mut a), Survey::Colls(b)) => {
                for (x, y) in a.iter_mut().zip(b) {
                    x.0 += y.0;
                    x.1 |= y.1;
                }
                Survey::Colls(a)
            }
            (Survey::Coll(mut a), Survey::Coll(b)) => {
                a.consumed += b.consumed;
                a.sent += b.sent;
                a.events += b.events;
                a.ledger.absorb(&b.ledger);
                a.steady_fx += b.steady_fx;
                a.steady_n += b.steady_n;
                a.unsteady |= b.unsteady;
                a.room = a.room.combine(b.room);
                a.conn_room = a.conn_room.min(b.conn_room);
                a.dirty |= b.dirty;
                a.flow_active |= b.flow_active;
                a.flows_started += b.flows_started;
                a.next_flow_start = a.next_flow_start.min(b.next_flow_start);
                Survey::Coll(a)
            }
            _ => panic!("invariant: the partitions survey the same step of a check"),
        }
    }
}

impl Survey {
    /// The earliest queued flow start, engine time, of a collective's survey
    /// ([`super::NEVER`]: none, or the collectives' survey).
    pub(crate) fn next_flow_start(&self) -> Ps {
        match self {
            Survey::Coll(s) => s.next_flow_start,
            Survey::Colls(_) => super::NEVER,
        }
    }
}

/// Fraction bits of [`to_fixed`]: a time per slice (microseconds, 10^6 ps and more) keeps
/// about 26 significant bits more than a picosecond's.
const FIXED_BITS: i32 = 20;

/// `ps` in fixed point, for sums that do not depend on their order.
fn to_fixed(ps: f64) -> u128 {
    (ps * 2f64.powi(FIXED_BITS)).round() as u128
}

fn from_fixed(x: u128) -> f64 {
    x as f64 / 2f64.powi(FIXED_BITS)
}

/// How far a skip goes: the threads' move, the slices it moves on each connection, the
/// collective's connections (and those between hosts), and the time.
struct Extent {
    mv: Move,
    conn_slices: u64,
    n_conns: u64,
    net_conns: u64,
    dt: Ps,
}

/// The start of the window whose counters a skip extrapolates.
struct Snapshot {
    at: Ps,
    coll: usize,
    counters: IdVec<PortId, PortCounters>,
    ledger: Ledger,
    events: u64,
    /// Slices consumed over every connection of the collective.
    consumed: u64,
    /// Slices handed to the QPs over every network connection of the collective.
    sent: u64,
    /// Scenario flows started by then: a copy from before a flow started has the flow's
    /// traffic in its window, which a skip must not extrapolate.
    flows_started: u64,
}

/// The fast-forward's state.
pub struct FastForward {
    criterion: Option<FastForwardCriterion>,
    watch: Option<PipelineWatch>,
    next_check: Ps,
    /// Copies of the counters, oldest first, of the last counters' window and a half.
    snaps: VecDeque<Snapshot>,
    skipped_ps: Ps,
    /// What the skips added to each port's counters (None before the first).
    offsets: Option<IdVec<PortId, PortCounters>>,
    report: FastForwardReport,
}

impl FastForward {
    /// Off (None), or on with `criterion`.
    pub(crate) fn new(criterion: Option<FastForwardCriterion>) -> FastForward {
        FastForward {
            criterion,
            watch: None,
            next_check: if criterion.is_some() {
                FF_CHECK_PS
            } else {
                super::NEVER
            },
            snaps: VecDeque::new(),
            skipped_ps: 0,
            offsets: None,
            report: FastForwardReport {
                theta: criterion.map_or(0.0, |c| c.theta),
                window_us: criterion.and_then(|c| c.window).unwrap_or(0),
                by_default: criterion.is_some_and(|c| c.validated_only),
                ..FastForwardReport::default()
            },
        }
    }

    /// Simulated time skipped so far: what reported times add to the engine's clock.
    #[inline(always)]
    pub(crate) fn skipped_ps(&self) -> Ps {
        self.skipped_ps
    }

    /// `n` slices of connection `c` arrived at its receiver (`PipelineWatch::slices`).
    #[inline(always)]
    pub(crate) fn slices(&mut self, c: u32, now: Ps, n: u64) {
        if let Some(w) = &mut self.watch {
            w.slices(c, now, n);
        }
    }

    /// What the skips added to port `p`'s counters.
    pub(crate) fn offset(&self, p: PortId) -> Option<&PortCounters> {
        self.offsets.as_ref().map(|o| &o[p])
    }

    /// What the skips added to every port's counters, taken away (None before the first).
    pub(crate) fn take_offsets(&mut self) -> Option<IdVec<PortId, PortCounters>> {
        self.offsets.take()
    }

    /// Sets what the skips added to port `p`'s counters, of `ports` (another partition's
    /// port, as partitions merge).
    pub(crate) fn set_offset(&mut self, p: PortId, off: PortCounters, ports: usize) {
        let offsets = self
            .offsets
            .get_or_insert_with(|| (0..ports).map(|_| PortCounters::default()).collect());
        offsets[p] = off;
    }

    /// The run cannot skip at all, for `why`.
    fn turn_off(&mut self, why: &str) {
        self.watch = None;
        self.next_check = super::NEVER;
        self.report.off = Some(why.to_string());
    }

    /// A check could not skip, for `why`.
    fn refused(&mut self, why: &str) {
        self.waiting(why);
    }

    /// A check did not skip, for `why` (counted in the report).
    fn waiting(&mut self, why: &str) {
        *self.report.not_skipped.entry(why.to_string()).or_default() += 1;
    }

    /// The report, with the share of `sim_time_ps` (reported) skipped; None when off.
    pub(crate) fn report(&self, sim_time_ps: Ps) -> Option<FastForwardReport> {
        self.criterion?;
        let mut r = self.report.clone();
        r.skipped_share = if sim_time_ps == 0 {
            0.0
        } else {
            self.skipped_ps as f64 / sim_time_ps as f64
        };
        Some(r)
    }
}

/// `d` scaled by `num / den`, rounded to the nearest.
fn scale(d: u64, num: Ps, den: Ps) -> u64 {
    ((u128::from(d) * u128::from(num) + u128::from(den) / 2) / u128::from(den.max(1))) as u64
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b).max(1) * b
}

impl<Q: Queue> Sim<Q> {
    /// The time a run reports for now: the engine's clock plus what was skipped.
    #[inline(always)]
    pub(crate) fn reported_now(&self) -> Ps {
        self.now + self.ff.skipped_ps()
    }

    /// The run starts: a fast-forward asked for on a run it cannot serve is turned off,
    /// with the reason.
    pub(crate) fn ff_start(&mut self) {
        let Some(mut crit) = self.ff.criterion else {
            return;
        };
        let window = crit.window.unwrap_or_else(|| {
            let dcqcn_us = self.cc.longest_dcqcn_period_us().ceil();
            FF_WINDOW.max(dcqcn_us.min(f64::from(u32::MAX)) as u32)
        });
        // A shorter window could not hold the counters' window.
        let window = window.max(FF_MIN_WINDOW);
        crit.window = Some(window);
        self.ff.criterion = Some(crit);
        self.ff.report.window_us = window;
        self.ff.watch = Some(PipelineWatch::new(crit.theta, window));
        let why = if self.work.colls().is_empty() {
            Some("no collective")
        } else if self.faults.any() {
            Some("faults are injected")
        } else if self.stats.next_sample() != super::NEVER {
            Some("counters are sampled")
        } else if self.work.colls().iter().any(|c| c.records.is_some()) {
            Some("transfers are recorded one by one ([run] transfer_records = 0 lets the run skip)")
        } else if self.work.colls().iter().all(|c| !c.run.program.may_skip()) {
            Some(
                "no collective's program has runs of equal steps to skip (only rings do; trees, hierarchical and point-to-point run exactly)",
            )
        } else if crit.validated_only
            && self
                .work
                .colls()
                .iter()
                .any(|c| !VALIDATED.contains(&(c.run.op, c.run.algorithm)))
        {
            Some(
                "on by default for AllReduce only, what the validation matrix covers (--fast-forward or [run] fast_forward = true asks for it)",
            )
        } else {
            None
        };
        if let Some(why) = why {
            self.ff.turn_off(why);
        }
    }

    /// Checks, when one is due at `at` (the end of the grid window just run, engine
    /// time), whether the run may skip, and skips: the serial run's check; a divided run's
    /// partitions make the same steps with their surveys combined between them
    /// (`crate::parallel`).
    pub(crate) fn ff_check(&mut self, end: Ps, at: Ps) {
        if !self.ff_due(at) {
            return;
        }
        let colls = self.ff_survey_colls();
        let c = match self.ff_under_way(&colls) {
            Ok(c) => c,
            Err(why) => return self.ff_refused(why),
        };
        let s = self.ff_survey(c);
        if let Err(why) = self.ff_decide(c, &s, end) {
            self.ff_refused(why);
        }
    }

    /// Whether a check is due at `at`, the end of a grid window (engine time): checks fall
    /// there, after every event up to it, in a serial run as in a divided one. A due check
    /// stands the clock there.
    pub(crate) fn ff_due(&mut self, at: Ps) -> bool {
        if at < self.ff.next_check {
            return false;
        }
        debug_assert!(
            at >= self.now,
            "invariant: a check comes after the window's events"
        );
        self.now = at;
        self.ff.next_check = at + FF_CHECK_PS;
        self.ff.report.checks += 1;
        true
    }

    /// A check did not skip, for `why`.
    pub(crate) fn ff_refused(&mut self, why: &str) {
        self.ff.refused(why);
    }

    /// What this run (partition) knows of each collective's progress: transfers arrived
    /// here, and whether a connection failed here.
    pub(crate) fn ff_survey_colls(&self) -> Survey {
        Survey::Colls(self.work.colls().iter().map(|c| (c.arrived, c.failed)).collect())
    }

    /// The one collective under way, from the whole run's [`Survey::Colls`].
    pub(crate) fn ff_under_way(&self, colls: &Survey) -> Result<usize, &'static str> {
        let Survey::Colls(progress) = colls else {
            unreachable!("invariant: the collectives' survey comes first");
        };
        let mut under_way = None;
        for (i, (c, &(arrived, failed))) in self.work.colls().iter().zip(progress).enumerate() {
            let done = failed || arrived >= c.run.per_iteration * u64::from(c.run.iterations);
            if done || c.run.iterations == 0 {
                continue;
            }
            if c.run.start > self.reported_now() {
                return Err("a collective starts later");
            }
            if under_way.replace(i).is_some() {
                return Err("several collectives under way");
            }
        }
        under_way.ok_or("no collective under way")
    }

    /// What this run (partition) knows of collective `c` at a check: its ends' progress,
    /// its steadiness, its threads' room, its counters. First, the copies of the counters
    /// too old for the counters' window go.
    pub(crate) fn ff_survey(&mut self, c: usize) -> Survey {
        let now = self.now;
        let l = self.ff_window_ps();
        self.ff.snaps.retain(|s| {
            s.at + FF_COUNTER_WINDOW_PS + FF_SNAPSHOT_PS >= now && s.at + l >= now && s.coll == c
        });
        // Every copy old enough, since which of them the skip takes depends on the flows
        // (`ff_decide`), which this partition sees only part of.
        debug_assert!(self.ff.snaps.len() <= 64, "invariant: a few copies at a time");
        let mut dirty = 0u64;
        for (i, snap) in self.ff.snaps.iter().enumerate() {
            if snap.at + FF_COUNTER_WINDOW_PS <= now && !self.ff_clean_since(&snap.counters) {
                dirty |= 1 << i;
            }
        }
        let watch = self.ff.watch.as_ref().expect("on");
        let mut s = CollSurvey {
            consumed: 0,
            sent: 0,
            events: self.stats.events(),
            // The ledger is the whole run's once partitions combine: `Stats::absorb` sums.
            ledger: *self.stats.ledger(),
            steady_fx: 0,
            steady_n: 0,
            unsteady: false,
            room: self.room_survey(c),
            conn_room: u64::MAX,
            dirty,
            flow_active: false,
            flows_started: 0,
            next_flow_start: super::NEVER,
        };
        // Flows are surveyed where they start (their sender's partition).
        for i in 0..self.work.n_flows() {
            let f = self.work.flow(FlowId::from(i));
            if !self.owns(f.dev) {
                continue;
            }
            if f.started.is_some() {
                let done = f.tx.finish.is_some() || (f.tx.failed && f.tx.qps_left == 0);
                s.flow_active |= !done;
                s.flows_started += 1;
            } else {
                s.next_flow_start = s.next_flow_start.min(f.start_at);
            }
        }
        for k in self.work.coll(c).conn_range.clone() {
            let conn = self.work.conn(k as usize);
            let (src, dst) = (self.owns(conn.src_dev), self.owns(conn.dst_dev));
            s.conn_room = s.conn_room.min(conn.skip_room(src, dst));
            if dst {
                s.consumed += conn.rx.consumed;
            }
            if conn.net.is_none() {
                continue;
            }
            if src {
                s.sent += conn.tx.sent;
            }
            // Arrivals are watched where they happen: at the receiver.
            if dst {
                match watch.steady_per_slice(k, now) {
                    Some(per_slice) => s.steady_fx += to_fixed(per_slice),
                    None => s.unsteady = true,
                }
                s.steady_n += 1;
            }
        }
        Survey::Coll(Box::new(s))
    }

    /// The steadiness window, ps.
    fn ff_window_ps(&self) -> Ps {
        let window = self
            .ff
            .criterion
            .and_then(|c| c.window)
            .expect("set at the start");
        Ps::from(window) * SAMPLE_PS
    }

    /// The copy whose counters a skip would extrapolate: the oldest at least
    /// [`FF_COUNTER_WINDOW_PS`] old with no flow started since (`flows_started`, the
    /// whole run's count now).
    fn ff_candidate(&self, flows_started: u64) -> Option<usize> {
        let now = self.now;
        self.ff
            .snaps
            .iter()
            .position(|s| s.at + FF_COUNTER_WINDOW_PS <= now && s.flows_started == flows_started)
    }

    /// No port this run owns sent or received a PFC frame, dropped a packet or saw a
    /// retransmission since `old` was copied (the PFC log cannot be made up, and losses
    /// are not steady).
    fn ff_clean_since(&self, old: &IdVec<PortId, PortCounters>) -> bool {
        self.fab.ports().all(|(p, port)| {
            if !self.owns(port.dev_idx) {
                return true;
            }
            let (cur, old) = (self.stats.counters(p), &old[p]);
            cur.tx_pause == old.tx_pause
                && cur.rx_pause == old.rx_pause
                && cur.q_dropped == old.q_dropped
                && cur.in_discards == old.in_discards
                && cur.tx_discards == old.tx_discards
                && cur.rx_errors == old.rx_errors
                && cur.out_of_sequence == old.out_of_sequence
                && cur.packet_seq_err == old.packet_seq_err
                && cur.duplicate_request == old.duplicate_request
                && cur.local_ack_timeout_err == old.local_ack_timeout_err
        })
    }

    /// Decides from the whole run's survey `s` of collective `c` whether to skip, and
    /// skips; otherwise says why not. Every partition decides alike from the same survey.
    ///
    /// Two measurements are extrapolated. The skip's time per slice is the mean of the
    /// network connections' (`PipelineWatch::steady_per_slice`: each one's mean since its
    /// band began, at least the window, over whole periods); all of a ring's connections
    /// move at the pipeline's pace. Its counters come from the oldest copy of every
    /// port's counters at least [`FF_COUNTER_WINDOW_PS`] old and inside the steadiness
    /// window (a connection is steady only once it has been for the window, so what was
    /// counted in the window before is good): what the network carried per slice sent
    /// since, times the slices the skip sends. After a skip the counters' window starts
    /// again; the time per slice goes on from the watch, whose samples a skip does not
    /// interrupt (the engine's clock does not move).
    pub(crate) fn ff_decide(&mut self, c: usize, s: &Survey, end: Ps) -> Result<(), &'static str> {
        let Survey::Coll(s) = s else {
            unreachable!("invariant: the collective's survey comes second");
        };
        let now = self.now;
        if s.flow_active {
            // What the fabric carries now is not the collective's alone: no copy from now
            // on, nor from before, holds a window of it.
            self.ff.snaps.clear();
            return Err("a flow is under way");
        }
        if self.ff.snaps.back().is_none_or(|x| x.at + FF_SNAPSHOT_PS <= now) {
            let snap = Snapshot {
                at: now,
                coll: c,
                counters: self.port_counters_internal(),
                ledger: s.ledger,
                events: s.events,
                consumed: s.consumed,
                sent: s.sent,
                flows_started: s.flows_started,
            };
            self.ff.snaps.push_back(snap);
        }
        if s.unsteady {
            return Err("a connection is not steady");
        }
        if s.steady_n == 0 {
            return Err("the collective has no connection between hosts");
        }
        let per_slice_ps = from_fixed(s.steady_fx) / s.steady_n as f64;
        let room = s.room.room()?;
        let Some(at) = self.ff_candidate(s.flows_started) else {
            return Err("the counters' window is not long enough yet");
        };
        let snap = &self.ff.snaps[at];
        let wire = s.sent - snap.sent;
        if wire == 0 || s.consumed == snap.consumed {
            return Err("nothing moved in the window");
        }
        let Some(ext) = self.ff_extent(c, room, end, per_slice_ps, s) else {
            return Err("no room for a whole period before a phase ends");
        };
        if s.dirty >> at & 1 == 1 {
            return Err("PFC frames, drops or retransmissions in the window");
        }
        let snap = self.ff.snaps.remove(at).expect("found");
        // The counters, per slice put on the wire, times the slices the skip sends.
        self.ff_add_counters(&snap, ext.conn_slices * ext.net_conns, wire, &s.ledger);
        let events = scale(s.events - snap.events, ext.dt, now - snap.at);
        self.ff.skipped_ps += ext.dt;
        self.ff.snaps.clear();
        self.advance_threads(c, ext.mv, room.slices);
        self.ff_shift_flow_starts(ext.dt);
        let r = &mut self.ff.report;
        r.skips += 1;
        r.loop_skips += u64::from(matches!(ext.mv, Move::Repeats(..)));
        r.skipped_ps += ext.dt;
        r.slices_skipped += ext.conn_slices * ext.n_conns;
        r.events_saved += events;
        Ok(())
    }

    /// How far collective `c` may skip: the longer of a move inside every thread's
    /// uniform run and a move by whole repeats (`RoomSurvey::room`), each a multiple of
    /// every connection's slots and QPs and of the period, in slices, inside every
    /// connection's counts, and short of the end time. Its time is `per_slice_ps` per
    /// slice of a connection. None: no room for one whole unit.
    fn ff_extent(&self, c: usize, room: Room, end: Ps, per_slice_ps: f64, s: &CollSurvey) -> Option<Extent> {
        let conn_room = s.conn_room;
        let mut unit_slices = PERIOD_SLICES as u64;
        let mut net_conns = 0;
        let range = self.work.coll(c).conn_range.clone();
        for k in range.clone() {
            let conn = self.work.conn(k as usize);
            unit_slices = lcm(unit_slices, u64::from(conn.slots));
            unit_slices = lcm(unit_slices, u64::from(conn.nqps()));
            net_conns += u64::from(conn.net.is_some());
        }
        let n_conns = u64::from(range.end - range.start);
        let per_prim = u64::from(room.slices.max(1));
        // The fewest of `each` (slices a count moves per connection) that is a multiple
        // of the unit.
        let unit_of = |each: u64| unit_slices / gcd(unit_slices, each.max(1));
        // A move's count cut to whole units and to what the connections and the end
        // leave; the slices it moves per connection.
        // The next flow start stays ahead of the clock: it changes what the fabric
        // carries, so a skip stops short of it (`ff_shift_flow_starts` moves it).
        let left = end
            .saturating_sub(self.reported_now() + super::END_GRID_PS)
            .min(s.next_flow_start.saturating_sub(self.now + 1));
        let dt_of = |conn_slices: u64| (conn_slices as f64 * per_slice_ps).round() as Ps;
        let fit = |most: u64, each: u64| -> (u64, u64) {
            let unit = unit_of(each);
            let mut count = most.min(conn_room / each.max(1)) / unit * unit;
            // Short of the end: scaled down (rounding down), then a unit less while the
            // time's own rounding still overshoots.
            let dt = dt_of(count * each);
            if dt > left {
                count = (u128::from(count) * u128::from(left) / u128::from(dt)) as u64 / unit * unit;
            }
            while count > 0 && dt_of(count * each) > left {
                count -= unit;
            }
            (count, count * each)
        };
        let (n, within_slices) = fit(room.within, per_prim);
        let mut best = (Move::Within(n), within_slices);
        if let Some(r) = room.repeats {
            // A ring's connection receives and sends as many per loop.
            let each = r.recv.max(r.send) * per_prim;
            let (k, slices) = fit(r.count, each);
            if slices > best.1 && r.recv == r.send {
                best = (Move::Repeats(k, r), slices);
            }
        }
        let (mv, conn_slices) = best;
        (conn_slices > 0).then(|| Extent {
            mv,
            conn_slices,
            n_conns,
            net_conns,
            dt: dt_of(conn_slices),
        })
    }

    /// Queues every flow start still to come, of the flows this run owns, `dt` earlier:
    /// a flow starts at its time in reported time, which a skip moved `dt` ahead of the
    /// engine's clock. The start left in the queue does nothing (`Sim::start_flow`).
    fn ff_shift_flow_starts(&mut self, dt: Ps) {
        for i in 0..self.work.n_flows() {
            let f = FlowId::from(i);
            let fl = self.work.flow(f);
            if fl.started.is_some() || fl.start_at == super::NEVER || !self.owns(fl.dev) {
                continue;
            }
            let (at, dev) = (fl.start_at - dt, fl.dev);
            debug_assert!(
                at > self.now,
                "invariant: a skip stops short of the next flow start"
            );
            self.work.flow_mut(f).start_at = at;
            // The flow's device queues its start, as at set-up: the tie then depends on
            // that device alone, not on which device ran last (in a divided run, the
            // partition's last rather than the whole run's).
            self.sched.act_as(dev);
            self.schedule(at, Event::FlowStart(f));
        }
    }

    /// Adds to every port this run owns, to its hop count and (once, in partition 0) to
    /// the ledger what the window since `snap` counted, times `num / den`; `ledger` is the
    /// whole run's now.
    fn ff_add_counters(&mut self, snap: &Snapshot, num: u64, den: u64, ledger: &Ledger) {
        let now_counters = self.port_counters_internal();
        let mut offsets = self
            .ff
            .offsets
            .take()
            .unwrap_or_else(|| (0..now_counters.len()).map(|_| PortCounters::default()).collect());
        let mut hops = 0;
        for (p, cur) in now_counters.iter_enumerated() {
            if !self.owns(self.fab.port(p).dev_idx) {
                continue;
            }
            let old = &snap.counters[p];
            let before: u64 = offsets[p].tx_prio_packets.iter().sum();
            offsets[p].zip_cumulative(cur, old, &mut |o, a, b| *o += scale(a - b, num, den));
            // A packet sent on a port is a hop (`Stats::hop`, counted where it is sent).
            hops += offsets[p].tx_prio_packets.iter().sum::<u64>() - before;
        }
        self.ff.offsets = Some(offsets);
        self.stats.skipped_hops(hops);
        if self.dist.me() != 0 {
            // The partitions' ledgers are summed when they merge.
            return;
        }
        let (l0, l1) = (snap.ledger, *ledger);
        let packets = scale(l1.created_packets - l0.created_packets, num, den);
        let bytes = scale(l1.created_bytes - l0.created_bytes, num, den);
        let data = scale(l1.data_sent_bytes - l0.data_sent_bytes, num, den);
        // In a steady window as much is delivered as is created: the skip adds the
        // created amounts to both sides, so the ledger balances as before.
        let l = self.stats.ledger_mut();
        l.created_packets += packets;
        l.delivered_packets += packets;
        l.created_bytes += bytes;
        l.delivered_bytes += bytes;
        l.data_sent_bytes += data;
        l.data_delivered_bytes += data;
    }
}
