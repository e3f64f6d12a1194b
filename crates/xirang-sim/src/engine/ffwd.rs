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
//! - the skipped time, ΔT, is what those slices took in the window just measured, or in
//!   the window the memo kept for the same shape of work (below);
//! - every counter the run reports gets what it counted in that window, scaled to ΔT: the
//!   ports' counters through a separate offset added only when they are reported (HPCC's
//!   INT reads the live egress byte counter), the conservation ledger on both sides, the
//!   packet hops;
//! - every time stamped from then on is reported ΔT later ([`FastForward::skipped_ps`]);
//!   the end time and its grid are kept in reported time.
//!
//! A run skips only where this is sound, and says why not otherwise: no faults, no
//! transfer records, one collective under way, no scenario flow under way
//! nor started in the counters' window, no PFC frame nor drop in the window, the shape of
//! the threads' work unchanged for a period of slices. A skip stops short of the next
//! flow start, and queues every start still to come ΔT earlier
//! (`Sim::ff_shift_flow_starts`). A skip makes up the samples due in the time it skips
//! (`Sim::ff_make_up_samples`), and the later ones come ΔT earlier on the engine's clock.
//!
//! The memo of steady states: each skip measured over the full window keeps its time per
//! slice and counters per slice under the shape of the work ([`MemoKey`]); when the same
//! shape comes back (the all-gather after the reduce-scatter, the next iteration), the
//! run skips on the entry once the pipeline has held within θ of it for the confirmation
//! ([`FF_CONFIRM_US`]) instead of a new window.
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
//! up to [`SMOOTH_SLICES`](super::steady::SMOOTH_SLICES) slices, within a spread θ over a
//! window of `l` microseconds. Memory:
//! the watch's state and a mark per connection, a few copies of every port's counters
//! while a collective runs, the offsets once a skip happened, and one memo entry (the
//! counters' growth of the owned ports that counted anything) per shape of the
//! collective under way.

use std::collections::{BTreeMap, VecDeque};

use super::Sim;
use super::collective::{Move, Room, RoomSurvey};
use super::event::Event;
use super::ids::{FlowId, IdVec, PortId};
use super::ledger::Ledger;
use super::sampling::MadeUp;
use super::steady::{PERIOD_SLICES, PipelineWatch, SAMPLE_PS};
use super::transport::CTS_BYTES;
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
/// How long a steady state the run has seen before (an entry of the memo, [`MemoKey`])
/// must hold again before the run skips on it: every network connection's time per slice
/// within θ for this long (and [`super::steady::MIN_SAMPLES`] samples), their mean within
/// θ of the entry's, and no PFC frame, drop or retransmission since a copy of the
/// counters at least this old. Measured (docs/fast-forward.md, "The memo"): on
/// `scenarios/rail-1024gpu.toml` over four iterations, 20, 50 and 100 µs made the same 7
/// hits of 8 skips (94.0 to 95.5 % skipped; collective +0.03 %, counters within 0.70 %),
/// 200 µs only 3 (79.5 %), the pipeline being within θ that long less often; 50 µs is
/// about a period of that ring's 16 slices. `tests/ffwd.rs` checks 20 to 100 µs against
/// the exact run.
pub const FF_CONFIRM_US: u32 = 50;
/// The shortest confirmation a run may ask for (`--ff-confirm`): with fewer microseconds
/// the [`super::steady::MIN_SAMPLES`] samples it also needs decide.
pub const FF_MIN_CONFIRM_US: u32 = 20;
/// The longest confirmation: the counters' window. The copies of the counters a check
/// keeps reach back a counters' window and a half ([`FF_SNAPSHOT_PS`]), and the
/// confirmation needs one at least as old as itself; longer, a skip could seldom use the
/// memo (200 µs already made 3 hits where 50 µs made 7, docs/fast-forward.md).
pub const FF_MAX_CONFIRM_US: u32 = (FF_COUNTER_WINDOW_PS / SAMPLE_PS) as u32;

/// What the memo knows a steady state by, the shape of a collective's work: the
/// collective, and its threads' primitives' slices and most bytes of a full slice and of
/// a chunk (`RoomSurvey::memo_shape`).
/// Inside one collective these fix which connections carry what: a ring's threads send
/// to and receive from the same peers throughout, so its reduce-scatter, its all-gather
/// and its next iteration are the same contention pattern (Wormhole's flow conflict
/// graph: the same flows on the same links, docs/reference/fast-forward.md §2), while a
/// rebalanced last loop, whose chunks are shorter, is another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct MemoKey {
    coll: usize,
    slices: u32,
    slice_bytes: u64,
    chunk_bytes: u64,
}

/// A steady state measured over a full window (a skip's), for later skips on it: its
/// time per slice, and what the counters counted per slice the window carried.
struct MemoEntry {
    per_slice_ps: f64,
    /// Slices the counters' window carried.
    carried: Carried,
    /// The cumulative counters' growth in that window of each port this run (or
    /// partition) owns that counted anything, in port order: a port left out adds
    /// nothing to a skip.
    ports: Vec<(PortId, PortCounters)>,
    /// The ledger's growth: created packets, bytes and data bytes.
    ledger: (u64, u64, u64),
    /// Events handled in the window, and its length.
    events: u64,
    span_ps: Ps,
}

/// The slices a counters' window carried over its network connections
/// ([`Sim::ff_carried`]): `wire` slices handed to the QPs, at the share of the bytes
/// handed to the QPs (`handed_bytes`) that the NICs put on the wire (`data_bytes`).
#[derive(Debug, Clone, Copy)]
struct Carried {
    wire: u64,
    data_bytes: u64,
    handed_bytes: u64,
}

impl Carried {
    /// `d`, counted over the window, scaled to `slices` slices carried.
    fn scale(&self, d: u64, slices: u64) -> u64 {
        scale(
            d,
            u128::from(slices) * u128::from(self.handed_bytes),
            u128::from(self.wire) * u128::from(self.data_bytes),
        )
    }
}

/// What the run's summary says of the memo (`engine.fast_forward.memo`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemoReport {
    /// What an entry is known by.
    pub key: String,
    /// When a skip may use an entry.
    pub rule: String,
    /// Steady states it holds at the end: the shapes of work measured.
    pub entries: u64,
    /// Skips whose steady state came from the memo.
    pub hits: u64,
    /// Skips whose steady state was measured over the full window: the memo had no
    /// entry for it, or the entry did not hold before the window was full.
    pub misses: u64,
    /// hits / (hits + misses): the share of the skips that came from the memo.
    pub hit_rate: f64,
}

/// [`MemoReport::key`].
const MEMO_KEY: &str =
    "collective, and its GPU threads' primitives: slices, most bytes of a full slice and of a chunk";

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
    /// The memo of steady states: how long, in samples of 1 µs, a steady state seen
    /// before must hold again before the run skips on it ([`FF_CONFIRM_US`]; None: no
    /// memo, every skip waits for the full window).
    pub memo_confirm: Option<u32>,
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
            memo_confirm: Some(FF_CONFIRM_US),
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
    /// The memo of steady states (None: off).
    #[serde(default)]
    pub memo: Option<MemoReport>,
    /// Samples the skips made up ([`Sim::ff_make_up_samples`]): those due in skipped
    /// time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub samples_made_up: u64,
    /// Fault starts and ends the skips moved earlier on the engine's clock
    /// (`Sim::shift_faults`): those still to come at a skip, once per skip.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fault_times_moved: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
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
    /// Bytes handed to the QPs of its network connections: the slices' at the sending
    /// ends, the clear-to-sends' at the receiving ends ([`Sim::ff_carried`]).
    handed_bytes: u64,
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
    /// Its network connections' times per slice over the memo's confirmation at least
    /// (`PipelineWatch::confirmed_per_slice`), summed in fixed point.
    confirm_fx: u128,
    /// A network connection has not held its time per slice for the memo's confirmation.
    unconfirmed: bool,
    /// A network connection has not received a period of slices of its threads'
    /// primitives' shape since it last changed (`FastForward::marks`), nor averaged a
    /// period since its watch's average started again then.
    reshaped: bool,
    /// Its threads' room.
    room: RoomSurvey,
    /// Slices every connection may move on (`Conn::skip_room`).
    conn_room: u64,
    /// PFC frames, drops or retransmissions since each copy of the counters: bit `i` for
    /// the `i`-th copy kept.
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
                a.handed_bytes += b.handed_bytes;
                a.events += b.events;
                a.ledger.absorb(&b.ledger);
                a.steady_fx += b.steady_fx;
                a.steady_n += b.steady_n;
                a.unsteady |= b.unsteady;
                a.confirm_fx += b.confirm_fx;
                a.unconfirmed |= b.unconfirmed;
                a.reshaped |= b.reshaped;
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

/// Why a check did not skip, where the memo may stand in for the full window.
const NOT_STEADY: &str = "a connection is not steady";
const WINDOW_SHORT: &str = "the counters' window is not long enough yet";
/// Why a check did not skip, either way.
const NO_PERIOD: &str = "no room for a whole period before a phase ends";
const DIRTY: &str = "PFC frames, drops or retransmissions in the window";
const RESHAPED: &str =
    "the GPU threads' primitives changed shape, and a period of the new one has not arrived yet";

/// Where a skip's steady state comes from.
enum Source {
    /// The full window just measured: the `at`-th copy of the counters began its
    /// counters' window, `wire` slices ago.
    Window { at: usize, wire: u64 },
    /// The memo.
    Memo(MemoKey),
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
    /// Bytes handed to the QPs of every network connection of the collective.
    handed_bytes: u64,
    /// Scenario flows started by then: a copy from before a flow started has the flow's
    /// traffic in its window, which a skip must not extrapolate.
    flows_started: u64,
    /// [`Sim::ff_trouble`] then.
    trouble: u64,
}

/// The fast-forward's state.
pub struct FastForward {
    criterion: Option<FastForwardCriterion>,
    watch: Option<PipelineWatch>,
    next_check: Ps,
    /// When the last check was made (engine time): a fault that started or ended since
    /// changed the fabric.
    last_check: Ps,
    /// Copies of the counters, oldest first, of the last counters' window and a half.
    snaps: VecDeque<Snapshot>,
    skipped_ps: Ps,
    /// What the skips added to each port's counters (None before the first).
    offsets: Option<IdVec<PortId, PortCounters>>,
    /// The steady states measured, the latest of each kind.
    memo: BTreeMap<MemoKey, MemoEntry>,
    /// The shape of the GPU threads' primitives at the last check (None: they differ,
    /// or none was seen).
    shape: Option<MemoKey>,
    /// Slices each connection had consumed when the shape last changed, by connection
    /// (the ends this run owns): its slices from there on are of the new shape, and its
    /// time per slice is the new shape's once a period of them has arrived.
    marks: Vec<u64>,
    /// `Sim::ff_trouble` at the last survey.
    trouble: u64,
    report: FastForwardReport,
}

impl FastForward {
    /// Off (None), or on with `criterion`.
    pub(crate) fn new(criterion: Option<FastForwardCriterion>) -> FastForward {
        let criterion = criterion.map(|c| FastForwardCriterion {
            memo_confirm: c
                .memo_confirm
                .map(|us| us.clamp(FF_MIN_CONFIRM_US, FF_MAX_CONFIRM_US)),
            ..c
        });
        FastForward {
            criterion,
            watch: None,
            next_check: if criterion.is_some() {
                FF_CHECK_PS
            } else {
                super::NEVER
            },
            last_check: 0,
            snaps: VecDeque::new(),
            skipped_ps: 0,
            offsets: None,
            memo: BTreeMap::new(),
            shape: None,
            marks: Vec::new(),
            trouble: 0,
            report: FastForwardReport {
                theta: criterion.map_or(0.0, |c| c.theta),
                window_us: criterion.and_then(|c| c.window).unwrap_or(0),
                by_default: criterion.is_some_and(|c| c.validated_only),
                memo: criterion.and_then(|c| c.memo_confirm).map(|us| MemoReport {
                    key: MEMO_KEY.to_string(),
                    rule: format!(
                        "every network connection's time per slice within theta for {us} us, their mean within theta of the entry's; no PFC frame, drop, retransmission nor flow start since; no fault started or ended since the entry was measured"
                    ),
                    ..MemoReport::default()
                }),
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
        if let Some(m) = &mut r.memo {
            m.entries = self.memo.len() as u64;
            m.hit_rate = if m.hits == 0 {
                0.0
            } else {
                m.hits as f64 / (m.hits + m.misses) as f64
            };
        }
        r.skipped_share = if sim_time_ps == 0 {
            0.0
        } else {
            self.skipped_ps as f64 / sim_time_ps as f64
        };
        Some(r)
    }
}

/// `d` scaled by `num / den`, rounded to the nearest (a zero `den` taken as 1).
fn scale(d: u64, num: u128, den: u128) -> u64 {
    let den = den.max(1);
    ((u128::from(d) * num + den / 2) / den) as u64
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
        if self.faults.changed_in(self.ff.last_check, at) {
            // A fault changed the fabric: no copy of the counters from before holds a
            // window of what it carries now, no steady state measured before is this
            // one, and the connections' pace starts again, as at a change of shape
            // (every partition knows every fault's times, so all do this alike).
            self.ff.snaps.clear();
            self.ff.memo.clear();
            self.ff.shape = None;
        }
        self.ff.last_check = at;
        true
    }

    /// The next fault event queued in any partition (engine time; [`super::NEVER`]:
    /// none), the same in every partition.
    pub(crate) fn ff_next_fault(&self) -> Ps {
        self.next_fault_event_after(self.now)
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
        let trouble = self.ff_trouble();
        self.ff.trouble = trouble;
        for (i, snap) in self.ff.snaps.iter().enumerate() {
            if snap.trouble != trouble {
                dirty |= 1 << i;
            }
        }
        let watch = self.ff.watch.as_ref().expect("on");
        let confirm_ps = self.ff_confirm_ps();
        let mut s = CollSurvey {
            consumed: 0,
            sent: 0,
            handed_bytes: 0,
            events: self.stats.events(),
            // The ledger is the whole run's once partitions combine: `Stats::absorb` sums.
            ledger: *self.stats.ledger(),
            steady_fx: 0,
            steady_n: 0,
            unsteady: false,
            confirm_fx: 0,
            unconfirmed: false,
            reshaped: false,
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
                s.handed_bytes += conn.tx.sent_bytes;
            }
            // Arrivals are watched where they happen: at the receiver.
            if dst {
                s.handed_bytes += conn.rx.posted * CTS_BYTES;
                let mark = self.ff.marks.get(k as usize).copied().unwrap_or(0);
                // The watch's average restarted at the mark (`ff_mark_shape`), and has
                // a period of slices since.
                s.reshaped |= conn.rx.arrived < mark + PERIOD_SLICES as u64 || watch.refilling(k);
                match watch.steady_per_slice(k, now) {
                    Some(per_slice) => s.steady_fx += to_fixed(per_slice),
                    None => s.unsteady = true,
                }
                match confirm_ps.and_then(|span| watch.confirmed_per_slice(k, now, span)) {
                    Some(per_slice) => s.confirm_fx += to_fixed(per_slice),
                    None => s.unconfirmed = true,
                }
                s.steady_n += 1;
            }
        }
        Survey::Coll(Box::new(s))
    }

    /// How long a steady state the memo holds must hold again, ps (None: no memo).
    fn ff_confirm_ps(&self) -> Option<Ps> {
        self.ff
            .criterion
            .and_then(|c| c.memo_confirm)
            .map(|us| Ps::from(us) * SAMPLE_PS)
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

    /// The copy whose counters a skip would extrapolate, or whose cleanliness a skip from
    /// the memo needs: the oldest at least `age` old with no flow started since
    /// (`flows_started`, the whole run's count now).
    fn ff_candidate(&self, flows_started: u64, age: Ps) -> Option<usize> {
        let now = self.now;
        self.ff
            .snaps
            .iter()
            .position(|s| s.at + age <= now && s.flows_started == flows_started)
    }

    /// PFC frames sent and received, packets dropped and retransmission events on the
    /// ports this run owns, summed: every one only grows, so the sum is unchanged since a
    /// copy exactly when none happened since (the PFC log cannot be made up, and losses
    /// are not steady). One pass over the ports per survey, whatever the copies kept.
    fn ff_trouble(&self) -> u64 {
        let mut sum = 0u64;
        for (p, port) in self.fab.ports() {
            if !self.owns(port.dev_idx) {
                continue;
            }
            let c = self.stats.counters(p);
            let per_prio: u64 = c.tx_pause.iter().chain(&c.rx_pause).chain(&c.q_dropped).sum();
            sum += per_prio
                + c.in_discards
                + c.tx_discards
                + c.rx_errors
                + c.out_of_sequence
                + c.packet_seq_err
                + c.duplicate_request
                + c.local_ack_timeout_err;
        }
        sum
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
    /// counted in the window before is good): what the network carried per slice the
    /// window carried ([`Sim::ff_carried`]), times the slices the skip sends. After a
    /// skip the counters' window starts again; the time per slice goes on from the watch,
    /// whose samples a skip does not interrupt (the engine's clock does not move). The two
    /// measurements go into the memo under the shape of the work; where no full window is
    /// there yet, a skip may take them from the memo instead (`ff_remembered`).
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
        if self.faults.random_loss_at(now) {
            // Its losses are random draws a skip would not make: a window without one
            // says nothing of the time skipped.
            return Err("a fault corrupts packets at random (link_errors)");
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
                handed_bytes: s.handed_bytes,
                flows_started: s.flows_started,
                // The survey's, just taken: no event ran since.
                trouble: self.ff.trouble,
            };
            self.ff.snaps.push_back(snap);
        }
        if s.steady_n == 0 {
            return Err("the collective has no connection between hosts");
        }
        let key = s
            .room
            .memo_shape()
            .map(|(slices, slice_bytes, chunk_bytes)| MemoKey {
                coll: c,
                slices,
                slice_bytes,
                chunk_bytes,
            });
        // A time per slice measured on slices of another shape (a rebalanced last loop's
        // shorter chunks, say) says nothing of this one's, and the slices in flight when
        // the threads moved on are the old shape's: every connection must have received a
        // period of the new shape's since.
        if key != self.ff.shape {
            self.ff.shape = key;
            self.ff_mark_shape(c);
            if let Some(k) = key {
                // A collective done is not coming back: its entries go.
                self.ff.memo.retain(|m, _| m.coll == k.coll);
            }
            return Err(RESHAPED);
        }
        if key.is_none() {
            // `memo_shape` is None where `room` says why (between iterations, waiting,
            // slices that differ).
            return Err(s
                .room
                .room()
                .err()
                .unwrap_or("GPU threads' primitives differ in slices"));
        }
        if s.reshaped {
            return Err(RESHAPED);
        }
        let (ext, room, from) = match self.ff_measured(c, s, end) {
            Ok(x) => x,
            Err(why) if why == NOT_STEADY || why == WINDOW_SHORT => {
                match self.ff_remembered(c, s, end, key) {
                    Ok(x) => x,
                    Err(memo_why) => return Err(memo_why.unwrap_or(why)),
                }
            }
            Err(why) => return Err(why),
        };
        let num = ext.conn_slices * ext.net_conns;
        // The offsets before this skip's counters, when a sample falls in the time it
        // skips: the samples there are made up between them and the offsets after.
        let sampled = (self.stats.next_sample() <= now + ext.dt).then(|| self.ff.offsets.clone());
        let events = match from {
            Source::Window { at, wire } => {
                let snap = self.ff.snaps.remove(at).expect("found");
                let entry = self.ff_entry(&snap, s, wire);
                // The counters, per slice the window carried, times the slices the skip
                // sends.
                self.ff_add_counters(&entry, num);
                let events = scale(entry.events, u128::from(ext.dt), u128::from(entry.span_ps));
                if let Some(m) = &mut self.ff.report.memo {
                    m.misses += 1;
                    if let Some(key) = key {
                        // The latest measurement of a shape replaces the one before.
                        self.ff.memo.insert(key, entry);
                    }
                }
                events
            }
            Source::Memo(key) => {
                let entry = self.ff.memo.remove(&key).expect("found");
                self.ff_add_counters(&entry, num);
                if let Some(m) = &mut self.ff.report.memo {
                    m.hits += 1;
                }
                let events = scale(entry.events, u128::from(ext.dt), u128::from(entry.span_ps));
                self.ff.memo.insert(key, entry);
                events
            }
        };
        if let Some(before) = sampled {
            let per = u64::from(room.slices);
            self.ff_make_up_samples(c, before, ext.dt, ext.mv.prims_recv_send().2 * per, per);
        }
        self.stats.shift_sampling(ext.dt);
        self.ff.skipped_ps += ext.dt;
        self.ff.snaps.clear();
        self.advance_threads(c, ext.mv, room.slices);
        self.ff_shift_flow_starts(ext.dt);
        let moved = self.shift_faults(now, ext.dt);
        let r = &mut self.ff.report;
        r.skips += 1;
        r.loop_skips += u64::from(matches!(ext.mv, Move::Repeats(..)));
        r.skipped_ps += ext.dt;
        r.slices_skipped += ext.conn_slices * ext.n_conns;
        r.events_saved += events;
        r.fault_times_moved += moved;
        Ok(())
    }

    /// Marks where each connection of collective `c` whose receiving end this run owns
    /// stands as its threads' primitives change shape (`FastForward::marks`).
    fn ff_mark_shape(&mut self, c: usize) {
        let range = self.work.coll(c).conn_range.clone();
        let marks = &mut self.ff.marks;
        if marks.len() < range.end as usize {
            marks.resize(range.end as usize, 0);
        }
        let watch = self.ff.watch.as_mut().expect("on");
        for k in range {
            let conn = self.work.conn(k as usize);
            if self.dist.owns(conn.dst_dev) {
                marks[k as usize] = conn.rx.consumed;
                // Its average over up to `steady::SMOOTH_SLICES` would hold the old
                // shape's slices for that many arrivals; from a period of the new ones on,
                // it is theirs.
                watch.restart_average(k);
            }
        }
    }

    /// A skip on the steady state measured over the full window: every network
    /// connection steady ([`PipelineWatch::steady_per_slice`]) and the counters' window
    /// from a copy old enough.
    fn ff_measured(&self, c: usize, s: &CollSurvey, end: Ps) -> Result<(Extent, Room, Source), &'static str> {
        if s.unsteady {
            return Err(NOT_STEADY);
        }
        let per_slice_ps = from_fixed(s.steady_fx) / s.steady_n as f64;
        let (ext, room, at, wire) =
            self.ff_from_copy(c, s, end, per_slice_ps, FF_COUNTER_WINDOW_PS, WINDOW_SHORT)?;
        Ok((ext, room, Source::Window { at, wire }))
    }

    /// A skip of collective `c` at `per_slice_ps`, whose counters' window begins at the
    /// oldest copy of the counters at least `age` old with no flow started since (`short`
    /// when there is none yet): the threads' room, the extent, the copy and the slices put
    /// on the wire since it; refused when nothing moved since the copy, when there is no
    /// room for a whole period, or when PFC frames, drops or retransmissions came since.
    fn ff_from_copy(
        &self,
        c: usize,
        s: &CollSurvey,
        end: Ps,
        per_slice_ps: f64,
        age: Ps,
        short: &'static str,
    ) -> Result<(Extent, Room, usize, u64), &'static str> {
        let room = s.room.room()?;
        let at = self.ff_candidate(s.flows_started, age).ok_or(short)?;
        let snap = &self.ff.snaps[at];
        let wire = s.sent - snap.sent;
        if wire == 0 || s.consumed == snap.consumed {
            return Err("nothing moved in the window");
        }
        let ext = self.ff_extent(c, room, end, per_slice_ps, s).ok_or(NO_PERIOD)?;
        if s.dirty >> at & 1 == 1 {
            return Err(DIRTY);
        }
        Ok((ext, room, at, wire))
    }

    /// A skip on a steady state the memo holds (`key`) once it has held again for the
    /// criterion's `memo_confirm`, within θ of the entry's time per slice: the skip takes
    /// the entry's time per slice and counters per slice. `Err(None)`: no entry for the
    /// key.
    fn ff_remembered(
        &self,
        c: usize,
        s: &CollSurvey,
        end: Ps,
        key: Option<MemoKey>,
    ) -> Result<(Extent, Room, Source), Option<&'static str>> {
        let Some((key, entry)) = key.and_then(|k| self.ff.memo.get(&k).map(|e| (k, e))) else {
            return Err(None);
        };
        if s.unconfirmed {
            return Err(Some(
                "a connection is not steady (a steady state seen before: not held again for the memo's confirmation yet)",
            ));
        }
        let held_ps = from_fixed(s.confirm_fx) / s.steady_n as f64;
        let theta = self.ff.criterion.expect("on").theta;
        if (held_ps - entry.per_slice_ps).abs() >= theta * entry.per_slice_ps {
            return Err(Some(
                "a connection is not steady (the pipeline's pace is not the memo's)",
            ));
        }
        let confirm = self
            .ff_confirm_ps()
            .expect("an entry is made only with the memo on");
        // The entry's time per slice, measured over a full window, rather than the
        // confirmation's, over a few periods: on the random rings of docs/fast-forward.md
        // ("The memo") the collective times were 0.010 % off the exact runs' on average
        // with the entry's, 0.078 % with the confirmation's (up to 0.48 % with Simple's
        // two-slice steps, whose few periods in a confirmation spread more).
        let short = "the memo's confirmation is not long enough yet";
        let (ext, room, _, _) = self
            .ff_from_copy(c, s, end, entry.per_slice_ps, confirm, short)
            .map_err(Some)?;
        Ok((ext, room, Source::Memo(key)))
    }

    /// The slices a counters' window carried over the collective's network connections,
    /// of which `wire` were handed to the QPs in it: `wire` at the share of the bytes
    /// handed to the QPs in the window (`handed_bytes`, the slices' and the
    /// clear-to-sends') that the NICs put on the wire in it (`data_bytes`, the ledger's
    /// data payload).
    ///
    /// A window's two ends cut through the slices in flight. A ring of one channel with
    /// LL128's large slices has about 16 of them per connection in a window, and up to
    /// one per connection in flight: on an 88-GPU ring of 33 MiB, 176 slices were handed
    /// to the QPs in the window while 187 arrived, the window having begun with 11 in
    /// flight and ended with none. The counters, divided by the 176, were 6 % high, and
    /// the run's 3.4 to 4.0 % (docs/fast-forward.md, "Counters per slice carried"). The
    /// NICs' payload cuts through packets instead: there the same run is within 0.7 %,
    /// and the 60 random rings of that section within 0.75 % (2.87 % by slices handed).
    /// Both byte counts cover the window's own steps, never a skip (the copies of the
    /// counters go at every skip), so that a skip's slices need not count bytes.
    fn ff_carried(wire: u64, handed_bytes: u64, data_bytes: u64) -> Carried {
        if handed_bytes == 0 || data_bytes == 0 {
            // No byte handed over or put on the wire as data in the window (a window
            // with no slice handed over is refused, `ff_from_copy`): by slices.
            return Carried {
                wire,
                data_bytes: 1,
                handed_bytes: 1,
            };
        }
        Carried {
            wire,
            data_bytes,
            handed_bytes,
        }
    }

    /// The memo's entry for the steady state whose counters' window began at `snap`,
    /// `wire` slices handed to the QPs ago, as the survey `s` (the whole run's) ends it:
    /// the growth of the counters this run owns, and of the whole run's ledger and events.
    fn ff_entry(&self, snap: &Snapshot, s: &CollSurvey, wire: u64) -> MemoEntry {
        let now = self.port_counters_internal();
        let mut ports = Vec::new();
        for (p, port) in self.fab.ports() {
            if !self.owns(port.dev_idx) {
                continue;
            }
            let mut grew = PortCounters::default();
            grew.zip_cumulative(&now[p], &snap.counters[p], &mut |o, a, b| *o = a - b);
            if grew != PortCounters::default() {
                ports.push((p, grew));
            }
        }
        let (l0, l1) = (snap.ledger, s.ledger);
        MemoEntry {
            per_slice_ps: from_fixed(s.steady_fx) / s.steady_n as f64,
            carried: Self::ff_carried(
                wire,
                s.handed_bytes - snap.handed_bytes,
                l1.data_sent_bytes - l0.data_sent_bytes,
            ),
            ports,
            ledger: (
                l1.created_packets - l0.created_packets,
                l1.created_bytes - l0.created_bytes,
                l1.data_sent_bytes - l0.data_sent_bytes,
            ),
            events: s.events - snap.events,
            span_ps: self.now - snap.at,
        }
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
        // So does the next fault's start or end (`Sim::shift_faults` moves it).
        let left = end
            .saturating_sub(self.reported_now() + super::END_GRID_PS)
            .min(s.next_flow_start.saturating_sub(self.now + 1))
            .min(
                self.faults
                    .next_change_after(self.now)
                    .saturating_sub(self.now + 1),
            );
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

    /// Takes every sample due in the `dt` the skip about to be made skips, from now (the
    /// engine's clock) on: the samples the skipped time would have taken. The steady
    /// state holds every QP's rate and every queue, which a skip does not change; each
    /// counter is its value before the skip (`before`, the offsets then) plus the
    /// skip's share of its growth in proportion to time; each connection's QPs send the
    /// transfer as many of the `slices` it sends in the skip on as that share
    /// ([`super::sampling::MadeUp`], its primitives being `per` slices).
    fn ff_make_up_samples(
        &mut self,
        c: usize,
        before: Option<IdVec<PortId, PortCounters>>,
        dt: Ps,
        slices: u64,
        per: u64,
    ) {
        let now = self.now;
        let off = self.ff.skipped_ps;
        let after = self
            .ff
            .offsets
            .take()
            .expect("invariant: a skip adds its counters before its samples are made up");
        let zero = PortCounters::default();
        let mut mid = after.clone();
        while self.stats.next_sample() <= now + dt {
            let at = self.stats.next_sample();
            let (num, den) = (u128::from(at - now), u128::from(dt));
            for (i, (m, a)) in mid.iter_mut().zip(after.iter()).enumerate() {
                let b = before.as_ref().and_then(|v| v.get(i)).unwrap_or(&zero);
                m.clone_from(b);
                m.zip_cumulative(a, b, &mut |o, a, b| *o += scale(a.saturating_sub(b), num, den));
            }
            self.ff.offsets = Some(mid);
            let made_up = MadeUp {
                coll: c as u32,
                into: at - now,
                dt,
                slices,
                per,
            };
            self.take_sample(at + off, Some(made_up));
            mid = self.ff.offsets.take().expect("set above");
            self.stats.sampled();
            self.ff.report.samples_made_up += 1;
        }
        self.ff.offsets = Some(after);
    }

    /// Adds to every port this run owns, to its hop count and (once, in partition 0) to
    /// the ledger what `entry`'s window counted, times `num` slices on the wire over the
    /// slices the window carried ([`Carried::scale`]).
    fn ff_add_counters(&mut self, entry: &MemoEntry, num: u64) {
        let carried = entry.carried;
        let zero = PortCounters::default();
        let fab = &self.fab;
        let mut offsets = self
            .ff
            .offsets
            .take()
            .unwrap_or_else(|| fab.ports().map(|_| PortCounters::default()).collect());
        let mut hops = 0;
        for (p, grew) in &entry.ports {
            let p = *p;
            let before: u64 = offsets[p].tx_prio_packets.iter().sum();
            offsets[p].zip_cumulative(grew, &zero, &mut |o, a, b| *o += carried.scale(a - b, num));
            // A packet sent on a port is a hop (`Stats::hop`, counted where it is sent).
            hops += offsets[p].tx_prio_packets.iter().sum::<u64>() - before;
        }
        self.ff.offsets = Some(offsets);
        self.stats.skipped_hops(hops);
        if self.dist.me() != 0 {
            // The partitions' ledgers are summed when they merge.
            return;
        }
        let packets = carried.scale(entry.ledger.0, num);
        let bytes = carried.scale(entry.ledger.1, num);
        let data = carried.scale(entry.ledger.2, num);
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
