//! Steady-state detection, measured but not acted on (the fast-forward issue's first part):
//! how much of the run's sending is steady by Wormhole's criterion, so the skip that
//! follows is designed on figures (docs/fast-forward.md has them).
//!
//! Wormhole (NSDI '26, docs/reference/fast-forward.md §1) calls a flow steady when the
//! spread of its send rate over its last `l` samples, (max - min) / mean, stays below `θ`;
//! a partition is steady only when all its flows are, and only steady partitions are
//! skipped. This probe applies the per-flow test, at several (`θ`, `l`) pairs at once (the
//! criterion's sensitivity), to two kinds of sender, and reports two figures per
//! criterion: the share of each sender's time that was steady ("each"), and the share of
//! the run's microseconds in which every active sender of the kind was steady ("all").
//! Neither is a bound of what a per-partition skip would take; they are indicators from
//! two sides. "Each" counts a sender steady while one it shares a link with is not, and
//! weighs long-lived senders by their time. "All" asks the whole fabric to be steady at
//! once, but does not count stalled or idle senders as active, and judges QPs and
//! connections apart.
//!
//! - **QPs.** Each QP is sampled once per [`SAMPLE_PS`] bucket in which it sends, and the
//!   sample is its congestion-control rate (the rate its NIC paces at), as Wormhole samples
//!   ns-3's QP rate. Counting the bytes of a bucket instead would read a paced flow as
//!   unsteady: at 400 Gbit/s a microsecond holds about 12 packets, and one packet more or
//!   less is an 8 % spread, above θ. A bucket in which a QP sends nothing while it still
//!   had bytes to send (paced slower than a packet per bucket, up to [`STALL_BUCKETS`])
//!   holds the same rate; a QP that stalled longer, or ran out of bytes (a message ended,
//!   its next not posted), was not steady, and its windows start again.
//! - **Connections** of collectives (`engine::transport`). A ring step of a large
//!   collective is a slice or two, so its QP idles between steps and is never steady as a
//!   QP; what is steady is the pipeline. Each arrival of slices at a connection's receiver
//!   is a sample of the time per slice since the previous arrival, covering that time;
//!   and, because a ring over hosts repeats every few slices (hops inside a host and over
//!   the network alternate), the same samples averaged over [`PERIOD_SLICES`] arrivals.
//!
//! The window test is conservative: a sample outside the band restarts the window at that
//! sample, where a sliding window would forget the oldest samples one by one. It keeps the
//! state per sender and criterion to five numbers, whatever `l` is.
//!
//! Nothing here changes what the run does: the probe only reads a QP at each data packet
//! it sends and a connection at each arrival, and only when asked
//! (`RunOptions::steady_probe`). Each QP sends from one partition and each connection's
//! receiver is in one, so a parallel run's figures are the serial run's (tested).

use super::ids::QpId;
use crate::time::{PS_PER_US, Ps};

/// Width of a rate sample. Wormhole's early artifact samples every 1 µs
/// (docs/reference/fast-forward.md §1, "unconfirmed" there for the final system).
pub const SAMPLE_PS: Ps = PS_PER_US;

/// Wormhole's default criterion: θ = 5 % over l = 2,000 samples
/// (docs/reference/fast-forward.md §1, the paper's §7).
pub const WORMHOLE_THETA: f64 = 0.05;
/// See [`WORMHOLE_THETA`].
pub const WORMHOLE_WINDOW: u32 = 2000;

/// Fewest samples a window needs, whatever time they cover: a connection's sample can
/// cover up to [`CONN_IDLE_PS`], and one or two samples have no spread to judge.
pub const MIN_SAMPLES: u32 = 16;

/// A connection whose next slice arrives more than this after its last is idle (between
/// two collectives, or waiting on a peer far behind), not slow: a slice of a ring step
/// takes microseconds.
pub const CONN_IDLE_PS: Ps = 100 * PS_PER_US;

/// Arrivals the probe's smoothed sample of a connection averages over (most arrivals
/// bring one slice; the average is per slice): a ring over hosts of 8 GPUs
/// repeats every 8 slices (seven hops inside a host, one over the network: measured on
/// `scenarios/rail-1024gpu.toml`, 2.79 µs between slices seven times, 4.89 µs once), so
/// 16 covers that period twice.
pub const PERIOD_SLICES: usize = 16;

/// Most empty buckets a backlogged QP may go without sending and still be read as paced:
/// one 4 KiB packet per 10 µs is 3.3 Gbit/s, below which a rate is not a flow's steady
/// share but a stall (a PFC pause, a full window) or a reaction point at its floor.
pub const STALL_BUCKETS: u64 = 10;

/// The criteria measured at once: Wormhole's default and its neighbours (its artifact's
/// θ = 3 % and l = 1,000, docs/reference/fast-forward.md §4; a looser 10 %; shorter
/// windows of 100 and 500 samples), so a report shows how the answer moves with them
/// (§1 there: a larger θ is faster and less exact, a longer l enters steady state later).
pub const CRITERIA: [(f64, u32); 9] = [
    (0.03, 100),
    (0.03, 1000),
    (0.03, 2000),
    (WORMHOLE_THETA, 100),
    (WORMHOLE_THETA, 500),
    (WORMHOLE_THETA, WORMHOLE_WINDOW),
    (0.10, 100),
    (0.10, 500),
    (0.10, 2000),
];

/// One criterion's window of one QP or connection: the band of its samples since the
/// window began, and the time they cover.
#[derive(Debug, Clone, Copy, Default)]
struct Band {
    lo: f64,
    hi: f64,
    sum: f64,
    n: u32,
    span_ps: Ps,
}

impl Band {
    /// Adds a sample `r` covering `span_ps`; true when the window then covers `window`
    /// samples' time within the band (the sample's time counts as steady).
    #[inline]
    fn add(&mut self, r: f64, span_ps: Ps, theta: f64, window: u32) -> bool {
        let fresh = Band {
            lo: r,
            hi: r,
            sum: r,
            n: 1,
            span_ps,
        };
        if self.n == 0 {
            *self = fresh;
        } else {
            let (lo, hi, sum) = (self.lo.min(r), self.hi.max(r), self.sum + r);
            let mean = sum / f64::from(self.n + 1);
            *self = if mean > 0.0 && (hi - lo) / mean < theta {
                Band {
                    lo,
                    hi,
                    sum,
                    n: self.n + 1,
                    span_ps: self.span_ps + span_ps,
                }
            } else {
                fresh
            };
        }
        self.span_ps >= Ps::from(window) * SAMPLE_PS && self.n >= MIN_SAMPLES
    }
}

/// Arrivals the fast-forward's watch ([`PipelineWatch`]) averages a connection's time per
/// slice over, at most: four of [`PERIOD_SLICES`], and no more whole periods than span
/// [`SMOOTH_SPAN_PS`]. A ring carries one-off delays around: a slice
/// late once makes every connection downstream late once, in turn, one host per period
/// of slices, for the rest of the phase. On `scenarios/rail-16384gpu.toml` (measured on
/// 2026-12-07, docs/fast-forward.md "A delay that travels the ring") a slice arrives
/// 2.3 µs late at a network connection (5.93 µs after the one before instead of
/// 3.62 µs), and the same at the next host's 14.4 µs later, one such delay in each block
/// of 8,192 connections from the start of the run on: over 16 slices that is 1.94 µs per
/// slice against 1.80, an 8 % spread, so about 180 of the 8,192 network connections are
/// outside θ = 5 % for a window at any time; over 64 slices, 2 % (2.7 % over the 48
/// that fit in [`SMOOTH_SPAN_PS`]). A delay carried this way is no change of pace, and a
/// skip keeps it: every thread moves the same number of slices on, so the late ones stay
/// as far behind as they were.
pub const SMOOTH_SLICES: usize = 4 * PERIOD_SLICES;

/// The longest time the watch's average of a connection spans ([`SMOOTH_SLICES`] slices
/// at most, a period at least): a third of the 300 µs window (`engine::ffwd`'s default),
/// so that the averages a window's band holds are mostly of arrivals inside it. An
/// average over a longer time lags behind the pipeline: on the validation matrix's
/// ring-128gpu-1g (Simple, slices 11.6 µs apart) an average of 64 slices spans 745 µs,
/// took the faster pace of the ring's first slices into the first window, and the
/// collective came out 1.46 % short (0.12 % over 16 slices, 186 µs; measured on
/// 2026-12-07). On `rail-16384gpu` (slices 1.8 µs apart) 100 µs holds 48 slices, over
/// which the late slice of [`SMOOTH_SLICES`] is 2.7 %.
pub const SMOOTH_SPAN_PS: Ps = 100 * PS_PER_US;

/// Windows of whole periods a [`PeriodRing`] keeps a running sum of, at most.
const MAX_PERIODS: usize = 4;

/// A connection's last `N` samples (time since the arrival before, slices), a ring, and
/// the running sums of its newest 1, 2, ... `N / PERIOD_SLICES` periods of them. A
/// sample's time is at most [`CONN_IDLE_PS`] (longer is idle, no sample), so it fits 32
/// bits, which keeps the watch's ring of [`SMOOTH_SLICES`] at 512 bytes a connection.
#[derive(Debug, Clone, Copy)]
struct PeriodRing<const N: usize> {
    ring: [(u32, u32); N],
    at: usize,
    n: usize,
    /// Time and slices of the newest `(j + 1) * PERIOD_SLICES` samples (or all of them,
    /// while fewer came).
    sums: [(Ps, u64); MAX_PERIODS],
}

impl<const N: usize> Default for PeriodRing<N> {
    fn default() -> Self {
        PeriodRing {
            ring: [(0, 0); N],
            at: 0,
            n: 0,
            sums: [(0, 0); MAX_PERIODS],
        }
    }
}

impl<const N: usize> PeriodRing<N> {
    /// Adds a sample of `n` slices over `span`; once a period of samples came, the time
    /// per slice over the most whole periods of the newest samples that span at most
    /// `max_span` (over one period if even that spans more). Whole periods only: a part
    /// of one would bring back the ripple the average is there to take out (one network
    /// hop in eight slices).
    #[inline]
    fn push(&mut self, span: Ps, n: u64, max_span: Ps) -> Option<f64> {
        const {
            assert!(N.is_multiple_of(PERIOD_SLICES), "whole periods");
            assert!(N / PERIOD_SLICES <= MAX_PERIODS, "a sum per window");
            assert!(CONN_IDLE_PS <= u32::MAX as Ps, "a sample's span fits 32 bits");
        }
        let span = u32::try_from(span).expect("invariant: a sample spans at most CONN_IDLE_PS");
        // Slices that arrive at one instant: a handful (a connection's slots at most).
        let n = u32::try_from(n).expect("invariant: a sample's slices fit 32 bits");
        for (j, sum) in self.sums[..N / PERIOD_SLICES].iter_mut().enumerate() {
            let len = (j + 1) * PERIOD_SLICES;
            // The window held `len` samples: the one pushed `len` pushes ago leaves it.
            if self.n >= len {
                let (old_span, old_n) = self.ring[(self.at + N - len) % N];
                sum.0 -= Ps::from(old_span);
                sum.1 -= u64::from(old_n);
            }
            sum.0 += Ps::from(span);
            sum.1 += u64::from(n);
        }
        self.ring[self.at] = (span, n);
        self.at = (self.at + 1) % N;
        self.n = (self.n + 1).min(N);
        let full = self.n / PERIOD_SLICES;
        if full == 0 {
            return None;
        }
        // The sums grow with the window: the longest within `max_span`.
        let pick = (1..full)
            .take_while(|&j| self.sums[j].0 <= max_span)
            .last()
            .unwrap_or(0);
        let (sum, slices) = self.sums[pick];
        Some(sum as f64 / slices as f64)
    }
}

/// An arrival's sample: the time since the connection's previous arrival and the slices
/// it covers, once the previous arrival is known and the time is not zero (arrivals at
/// one instant go to the next sample). `Err(())` when the gap was idle
/// ([`CONN_IDLE_PS`]): the connection's windows start again.
#[inline]
fn arrival_sample(
    last: &mut Option<Ps>,
    pending: &mut u64,
    now: Ps,
    n: u64,
) -> Result<Option<(Ps, Ps, u64)>, ()> {
    let prev = last.replace(now);
    let Some(prev) = prev else { return Ok(None) };
    let span = now - prev;
    if span == 0 {
        *last = Some(prev);
        *pending += n;
        return Ok(None);
    }
    let n = n + std::mem::take(pending);
    if span > CONN_IDLE_PS || n == 0 {
        return Err(());
    }
    Ok(Some((prev, span, n)))
}

/// The probe's state of one connection's receiving end.
#[derive(Debug, Clone, Default)]
struct ConnProbe {
    /// When its last slices arrived.
    last: Option<Ps>,
    /// Slices that arrived at the same instant as the last ones, for the next sample.
    pending: u64,
    bands: [Band; CRITERIA.len()],
    ring: PeriodRing<PERIOD_SLICES>,
    period_bands: [Band; CRITERIA.len()],
}

/// The probe's state of one QP.
#[derive(Debug, Clone, Default)]
struct QpProbe {
    /// The bucket of the last sample, plus one (0: never sampled).
    bucket: u64,
    /// The rate of the last sample, bit/s.
    rate: f64,
    /// More bytes were left to send after the last packet.
    backlogged: bool,
    bands: [Band; CRITERIA.len()],
}

/// The probe of one run (or of one partition of it).
#[derive(Debug, Clone, Default)]
pub struct SteadyProbe {
    qps: Vec<QpProbe>,
    conns: Vec<ConnProbe>,
    totals: Totals,
}

/// What a probe adds up, and what a partition ships to the one that gathers the run.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Totals {
    /// QPs' sampled time (a bucket in which a QP sent or was paced to) and its steady part.
    qp: Tally,
    /// Connections' time between slices and its steady part.
    conn: Tally,
    /// The same, each sample averaged over [`PERIOD_SLICES`] slices.
    period: Tally,
}

impl Totals {
    /// Adds another partition's totals (its QPs and connection ends are its own).
    pub(crate) fn absorb(&mut self, o: &Totals) {
        self.qp.absorb(&o.qp);
        self.conn.absorb(&o.conn);
        self.period.absorb(&o.period);
    }

    /// What was measured.
    pub(crate) fn report(&self) -> SteadyReport {
        SteadyReport {
            sample_ns: SAMPLE_PS / crate::time::PS_PER_NS,
            qps: self.qp.report(),
            connections: self.conn.report(),
            connections_over_periods: self.period.report(),
        }
    }
}

impl SteadyProbe {
    /// QP `qp` sent a data packet at `now`, pacing at `rate_bps`; `more` says whether it
    /// has bytes left to send after it.
    #[inline]
    pub(crate) fn sent(&mut self, qp: QpId, now: Ps, rate_bps: f64, more: bool) {
        let i = qp.0 as usize;
        if i >= self.qps.len() {
            self.qps.resize(i + 1, QpProbe::default());
        }
        let b = now / SAMPLE_PS + 1;
        let q = &mut self.qps[i];
        if q.bucket == b {
            q.rate = rate_bps;
            q.backlogged = more;
            return;
        }
        let gap = if q.bucket == 0 { 0 } else { b - q.bucket - 1 };
        if gap > 0 && gap <= STALL_BUCKETS && q.backlogged {
            // Paced slower than a packet per bucket: the buckets between held its rate.
            let held = q.rate;
            for g in q.bucket..b - 1 {
                self.totals.qp.add(&mut q.bands, held, g * SAMPLE_PS, SAMPLE_PS);
            }
        } else if gap > 0 {
            // It ran out of bytes (idle), or sent nothing for longer than pacing explains
            // (paused, window-bound): not steady; its windows start again.
            q.bands = Default::default();
        }
        q.bucket = b;
        q.rate = rate_bps;
        q.backlogged = more;
        self.totals
            .qp
            .add(&mut q.bands, rate_bps, (b - 1) * SAMPLE_PS, SAMPLE_PS);
    }

    /// `n` slices of connection `c` arrived whole at its receiver at `now`. The sample is
    /// the time per slice since the previous arrival; a gap longer than [`CONN_IDLE_PS`]
    /// (between two collectives) is idle time, not counted, and restarts the windows.
    #[inline]
    pub(crate) fn slices(&mut self, c: u32, now: Ps, n: u64) {
        let i = c as usize;
        if i >= self.conns.len() {
            self.conns.resize(i + 1, ConnProbe::default());
        }
        let k = &mut self.conns[i];
        let (prev, span, n) = match arrival_sample(&mut k.last, &mut k.pending, now, n) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(()) => {
                *k = ConnProbe {
                    last: Some(now),
                    ..ConnProbe::default()
                };
                return;
            }
        };
        self.totals
            .conn
            .add(&mut k.bands, span as f64 / n as f64, prev, span);
        // The same arrivals averaged over the last PERIOD_SLICES slices.
        if let Some(per_slice) = k.ring.push(span, n, Ps::MAX) {
            self.totals.period.add(&mut k.period_bands, per_slice, prev, span);
        }
    }

    /// What it added up so far.
    pub(crate) fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Adds another partition's totals.
    pub(crate) fn absorb(&mut self, o: &Totals) {
        self.totals.absorb(o);
    }

    /// What was measured.
    pub fn report(&self) -> SteadyReport {
        self.totals.report()
    }
}

/// Per sample bucket of the run: how many senders of a kind were active, and how many of
/// them steady by each criterion. A bucket where all active senders were steady is one a
/// skip of the whole fabric could take (Wormhole's early artifact skipped globally,
/// docs/reference/fast-forward.md §4). Memory: 40 bytes per simulated microsecond from
/// the first sender's start, per kind of sender and partition.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Timeline {
    /// The bucket `active[0]` and `steady[0]` are for: a run whose senders start late
    /// keeps nothing for the time before.
    origin: usize,
    active: Vec<u32>,
    steady: Vec<[u32; CRITERIA.len()]>,
}

impl Timeline {
    /// A sender was active over `[from_ps, from_ps + span_ps)`, steady by the criteria in
    /// `steady`: every bucket the span touches counts it.
    #[inline]
    fn mark(&mut self, from_ps: Ps, span_ps: Ps, steady: [bool; CRITERIA.len()]) {
        let first = (from_ps / SAMPLE_PS) as usize;
        let last = ((from_ps + span_ps.max(1) - 1) / SAMPLE_PS) as usize;
        self.cover(first, last);
        for b in first - self.origin..=last - self.origin {
            self.active[b] += 1;
            for (c, &s) in self.steady[b].iter_mut().zip(&steady) {
                *c += u32::from(s);
            }
        }
    }

    /// Makes room for buckets `first..=last`.
    fn cover(&mut self, first: usize, last: usize) {
        if self.active.is_empty() {
            self.origin = first;
        } else if first < self.origin {
            // A sample reaching back before the first one marked (a connection's span).
            let more = self.origin - first;
            self.active.splice(0..0, std::iter::repeat_n(0, more));
            self.steady
                .splice(0..0, std::iter::repeat_n([0; CRITERIA.len()], more));
            self.origin = first;
        }
        let len = last + 1 - self.origin;
        if len > self.active.len() {
            self.active.resize(len, 0);
            self.steady.resize(len, [0; CRITERIA.len()]);
        }
    }

    fn absorb(&mut self, o: &Timeline) {
        if o.active.is_empty() {
            return;
        }
        self.cover(o.origin, o.origin + o.active.len() - 1);
        let at = o.origin - self.origin;
        for (i, &a) in o.active.iter().enumerate() {
            self.active[at + i] += a;
            for (c, &s) in self.steady[at + i].iter_mut().zip(&o.steady[i]) {
                *c += s;
            }
        }
    }

    /// Buckets with an active sender, and per criterion those where all were steady.
    fn all_steady(&self) -> (u64, [u64; CRITERIA.len()]) {
        let mut active = 0;
        let mut all = [0u64; CRITERIA.len()];
        for (&a, s) in self.active.iter().zip(&self.steady) {
            if a == 0 {
                continue;
            }
            active += 1;
            for (n, &c) in all.iter_mut().zip(s) {
                *n += u64::from(c == a);
            }
        }
        (active, all)
    }
}

/// Active and steady time of one kind of sender, per criterion, and its timeline.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Tally {
    active_ps: Ps,
    steady_ps: [Ps; CRITERIA.len()],
    line: Timeline,
}

impl Tally {
    /// A sample `r` of a sender whose windows are `bands`, covering `span_ps` from
    /// `from_ps`.
    #[inline]
    fn add(&mut self, bands: &mut [Band; CRITERIA.len()], r: f64, from_ps: Ps, span_ps: Ps) {
        self.active_ps += span_ps;
        let mut steady = [false; CRITERIA.len()];
        for (k, &(theta, window)) in CRITERIA.iter().enumerate() {
            if bands[k].add(r, span_ps, theta, window) {
                self.steady_ps[k] += span_ps;
                steady[k] = true;
            }
        }
        self.line.mark(from_ps, span_ps, steady);
    }

    fn absorb(&mut self, o: &Tally) {
        self.active_ps += o.active_ps;
        for (s, c) in self.steady_ps.iter_mut().zip(&o.steady_ps) {
            *s += c;
        }
        self.line.absorb(&o.line);
    }

    fn report(&self) -> SteadyShare {
        let share = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (active_buckets, all) = self.line.all_steady();
        SteadyShare {
            active_ps: self.active_ps,
            active_us: active_buckets,
            criteria: CRITERIA
                .iter()
                .enumerate()
                .map(|(k, &(theta, window))| SteadyCriterion {
                    theta,
                    window_samples: window,
                    steady_ps: self.steady_ps[k],
                    steady_share: share(self.steady_ps[k], self.active_ps),
                    all_steady_us: all[k],
                    all_steady_share: share(all[k], active_buckets),
                })
                .collect(),
        }
    }
}

/// How much of the sending was steady, per criterion (engine.json `engine.steady`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SteadyReport {
    /// Width of a QP's rate sample, ns; a window of `l` samples is `l` times it.
    pub sample_ns: u64,
    /// QPs: each bucket in which a QP sent (or was paced to send) is a sample of its rate.
    pub qps: SteadyShare,
    /// Collectives' connections: each arrival of a slice at the receiver is a sample of the
    /// time per slice since the last, covering that time.
    pub connections: SteadyShare,
    /// The same, each sample the time per slice over the last 16 arrivals, so a pipeline
    /// that repeats every few slices (a ring whose hops alternate between NVLink inside a
    /// host and the network) reads as the steady state it is.
    pub connections_over_periods: SteadyShare,
}

/// Active and steady time of one kind of sender, summed over them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SteadyShare {
    /// Time sampled, ps, over all of them.
    pub active_ps: Ps,
    /// Microseconds of the run in which one of them at least was active.
    pub active_us: u64,
    /// Each criterion's steady part.
    pub criteria: Vec<SteadyCriterion>,
}

/// One criterion's figure.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SteadyCriterion {
    /// Largest spread of the samples, (max - min) / mean.
    pub theta: f64,
    /// Samples' time (`l` x `sample_ns`) the spread must hold for.
    pub window_samples: u32,
    /// Steady time, ps.
    pub steady_ps: Ps,
    /// Its share of the active time.
    pub steady_share: f64,
    /// Microseconds in which every active one was steady.
    pub all_steady_us: u64,
    /// Their share of `active_us`: what skipping the whole fabric at once could take.
    pub all_steady_share: f64,
}

/// The steadiness test a fast-forward acts on (`engine::ffwd`): the probe's per-connection
/// test, at one criterion, kept for every connection with its current verdict, and
/// nothing added up; its samples are averaged over up to [`SMOOTH_SLICES`] slices
/// (within [`SMOOTH_SPAN_PS`]) rather than the probe's [`PERIOD_SLICES`], so a delay
/// passing through is not read as a new pace.
#[derive(Debug, Clone)]
pub(crate) struct PipelineWatch {
    theta: f64,
    window: u32,
    conns: Vec<WatchConn>,
}

#[derive(Debug, Clone, Copy, Default)]
struct WatchConn {
    last: Option<Ps>,
    pending: u64,
    ring: PeriodRing<SMOOTH_SLICES>,
    band: Band,
    steady: bool,
    /// Its average started again at a change of shape and has not a period yet.
    refilling: bool,
}

impl PipelineWatch {
    /// Judges connections by spread `theta` over `window` samples of [`SAMPLE_PS`].
    pub(crate) fn new(theta: f64, window: u32) -> PipelineWatch {
        PipelineWatch {
            theta,
            window,
            conns: Vec::new(),
        }
    }

    /// `n` slices of connection `c` arrived whole at its receiver at `now`.
    #[inline]
    pub(crate) fn slices(&mut self, c: u32, now: Ps, n: u64) {
        let i = c as usize;
        if i >= self.conns.len() {
            self.conns.resize(i + 1, WatchConn::default());
        }
        let k = &mut self.conns[i];
        let (_, span, n) = match arrival_sample(&mut k.last, &mut k.pending, now, n) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(()) => {
                *k = WatchConn {
                    last: Some(now),
                    ..WatchConn::default()
                };
                return;
            }
        };
        if let Some(per_slice) = k.ring.push(span, n, SMOOTH_SPAN_PS) {
            k.refilling = false;
            k.steady = k.band.add(per_slice, span, self.theta, self.window);
        }
    }

    /// Connection `c`'s time per slice, ps, when it has been steady for the window and a
    /// slice arrived within the last period (one that stopped receiving is not steady,
    /// whatever it did before): the mean of its samples since its band last began (the
    /// window at least; the band restarts only on a sample outside it), each the time
    /// per slice over its last 16 to [`SMOOTH_SLICES`] arrivals (whole periods, within
    /// [`SMOOTH_SPAN_PS`]), weighted per arrival.
    pub(crate) fn steady_per_slice(&self, c: u32, now: Ps) -> Option<f64> {
        let k = self.conns.get(c as usize)?;
        if !k.steady {
            return None;
        }
        k.band_per_slice(now)
    }

    /// Connection `c`'s average starts again from its next arrival (its band stays): the
    /// shape of its slices changed (`engine::ffwd`), and the average is to be of the new
    /// shape's slices, from a period of them on, not of [`SMOOTH_SLICES`] of them.
    pub(crate) fn restart_average(&mut self, c: u32) {
        if let Some(k) = self.conns.get_mut(c as usize) {
            k.ring = PeriodRing::default();
            k.refilling = true;
        }
    }

    /// Whether connection `c`'s average, started again by
    /// [`PipelineWatch::restart_average`], has not averaged a period of slices yet (an
    /// average that starts again after an idle gap is not: that connection is simply not
    /// steady).
    pub(crate) fn refilling(&self, c: u32) -> bool {
        self.conns.get(c as usize).is_some_and(|k| k.refilling)
    }

    /// Connection `c`'s time per slice, ps, as [`PipelineWatch::steady_per_slice`] but
    /// once its band covers `span_ps` (and [`MIN_SAMPLES`] samples) rather than the
    /// window: the memo's confirmation of a steady state seen before (`engine::ffwd`).
    pub(crate) fn confirmed_per_slice(&self, c: u32, now: Ps, span_ps: Ps) -> Option<f64> {
        let k = self.conns.get(c as usize)?;
        if k.band.n < MIN_SAMPLES || k.band.span_ps < span_ps {
            return None;
        }
        k.band_per_slice(now)
    }
}

impl WatchConn {
    /// The mean of its band, while a slice arrived within the last period at `now` (one
    /// that stopped receiving has no pace, whatever its band says).
    fn band_per_slice(&self, now: Ps) -> Option<f64> {
        let last = self.last?;
        let per_slice = self.band.sum / f64::from(self.band.n.max(1));
        (((now - last) as f64) <= per_slice * PERIOD_SLICES as f64).then_some(per_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(rates: impl Iterator<Item = f64>) -> SteadyReport {
        let mut p = SteadyProbe::default();
        for (i, r) in rates.enumerate() {
            p.sent(QpId(0), i as Ps * SAMPLE_PS, r, true);
        }
        p.report()
    }

    fn share(r: &SteadyReport, theta: f64, window: u32) -> f64 {
        r.qps
            .criteria
            .iter()
            .find(|c| c.theta == theta && c.window_samples == window)
            .unwrap()
            .steady_share
    }

    #[test]
    fn a_flat_rate_is_steady_after_its_window() {
        let r = feed(std::iter::repeat_n(100e9, 5000));
        assert_eq!(r.qps.active_ps / SAMPLE_PS, 5000);
        // The first l - 1 samples fill the window.
        let want = (5000 - WORMHOLE_WINDOW + 1) as f64 / 5000.0;
        assert!((share(&r, WORMHOLE_THETA, WORMHOLE_WINDOW) - want).abs() < 1e-12);
        let want = (5000 - 100 + 1) as f64 / 5000.0;
        assert!((share(&r, 0.03, 100) - want).abs() < 1e-12);
    }

    /// The sensitivity of the criterion: a sawtooth of ±3 % around its mean (a DCQCN
    /// reaction point's cut and recovery) is steady under θ = 10 %, never under 3 % or 5 %
    /// (its spread is 6 %), and a longer window takes longer to say so.
    #[test]
    fn theta_and_the_window_decide_on_a_sawtooth() {
        let saw = (0..6000).map(|i| 100e9 * (0.97 + 0.06 * f64::from(i % 50) / 49.0));
        let r = feed(saw);
        assert_eq!(share(&r, 0.03, 100), 0.0);
        assert_eq!(share(&r, WORMHOLE_THETA, 100), 0.0);
        assert_eq!(share(&r, WORMHOLE_THETA, WORMHOLE_WINDOW), 0.0);
        let short = share(&r, 0.10, 100);
        let long = share(&r, 0.10, 2000);
        assert!(short > 0.95 && long > 0.6 && long < short, "{short} {long}");
    }

    #[test]
    fn an_idle_gap_restarts_the_window_and_a_paced_gap_does_not() {
        let mut p = SteadyProbe::default();
        // 150 buckets of sending, a gap of 10 with nothing left to send, 150 more.
        for i in 0..150 {
            p.sent(QpId(3), i * SAMPLE_PS, 50e9, i != 149);
        }
        for i in 160..310 {
            p.sent(QpId(3), i * SAMPLE_PS, 50e9, true);
        }
        let r = p.report();
        assert_eq!(r.qps.active_ps / SAMPLE_PS, 300);
        // Each run of 150 passes l = 100 on its last 51 samples.
        assert_eq!(share(&r, 0.03, 100), 102.0 / 300.0);
        // A QP paced at one packet per 4 µs is sampled in every bucket, and steady.
        let mut p = SteadyProbe::default();
        for i in 0..100u64 {
            p.sent(QpId(0), i * 4 * SAMPLE_PS, 2e9, true);
        }
        let r = p.report();
        assert_eq!(r.qps.active_ps / SAMPLE_PS, 397);
        assert_eq!(share(&r, 0.03, 100), 298.0 / 397.0);
    }

    #[test]
    fn connections_are_steady_when_slices_come_evenly() {
        let mut p = SteadyProbe::default();
        // A slice every 2 µs for 4 ms, then a pause of 200 µs (idle), then 1 ms of
        // slices alternating 1 and 3 µs apart (a spread of 100 %).
        let mut t = 0;
        for _ in 0..2000 {
            t += 2 * SAMPLE_PS;
            p.slices(7, t, 1);
        }
        t += 200 * SAMPLE_PS;
        p.slices(7, t, 1);
        for i in 0..500 {
            t += if i % 2 == 0 { 1 } else { 3 } * SAMPLE_PS;
            p.slices(7, t, 1);
        }
        let r = p.report().connections;
        assert_eq!(r.active_ps, (1999 * 2 + 1000) * SAMPLE_PS);
        let c = |theta: f64, window: u32| {
            r.criteria
                .iter()
                .find(|c| c.theta == theta && c.window_samples == window)
                .unwrap()
                .steady_ps
        };
        // Steady once 2,000 µs of even slices are in: the last 2,000 µs of the 3,998.
        assert_eq!(c(WORMHOLE_THETA, WORMHOLE_WINDOW), 2000 * SAMPLE_PS);
        assert_eq!(c(0.03, 100), (3998 - 98) * SAMPLE_PS);
    }

    /// A ring over hosts of 8 GPUs: seven slices 2.79 µs apart, one 4.89 µs (measured on
    /// rail-1024gpu). Slice by slice it is never steady; over its period it always is.
    #[test]
    fn a_pipeline_that_repeats_every_eight_slices_is_steady_over_its_period() {
        let mut p = SteadyProbe::default();
        let mut t = 0;
        for i in 0..4000u64 {
            t += if i % 8 == 7 { 4_890_000 } else { 2_790_000 };
            p.slices(1, t, 1);
        }
        let r = p.report();
        let wormhole = |s: &SteadyShare| {
            s.criteria
                .iter()
                .find(|c| c.theta == WORMHOLE_THETA && c.window_samples == WORMHOLE_WINDOW)
                .unwrap()
                .steady_share
        };
        assert_eq!(wormhole(&r.connections), 0.0);
        let over = wormhole(&r.connections_over_periods);
        // 12.1 ms in all; the first 2 ms (and 16 slices) fill the window.
        assert!(over > 0.8 && over < 0.85, "{over}");
    }

    /// The whole-fabric figure: a microsecond counts only when every sender active in it
    /// was steady.
    #[test]
    fn all_steady_needs_every_active_sender() {
        let mut p = SteadyProbe::default();
        // QP 0 flat for 1,000 µs; QP 1 alternating ±20 % over its last 500 µs.
        for i in 0..1000u64 {
            p.sent(QpId(0), i * SAMPLE_PS, 100e9, true);
            if i >= 500 {
                let r = if i % 2 == 0 { 80e9 } else { 120e9 };
                p.sent(QpId(1), i * SAMPLE_PS, r, true);
            }
        }
        let r = p.report().qps;
        let c = r
            .criteria
            .iter()
            .find(|c| c.theta == 0.03 && c.window_samples == 100)
            .unwrap();
        assert_eq!(r.active_us, 1000);
        // QP 0 is steady from its 100th µs: 901 µs of 1,500 µs of QP time.
        assert_eq!(c.steady_ps, 901 * SAMPLE_PS);
        // All are steady only from µs 99 until QP 1 starts: 401 of 1,000 µs.
        assert_eq!(c.all_steady_us, 401);
        // Divided into two partitions, each with one QP, the totals add up the same.
        let (mut a, mut b) = (SteadyProbe::default(), SteadyProbe::default());
        for i in 0..1000u64 {
            a.sent(QpId(0), i * SAMPLE_PS, 100e9, true);
            if i >= 500 {
                let r = if i % 2 == 0 { 80e9 } else { 120e9 };
                b.sent(QpId(1), i * SAMPLE_PS, r, true);
            }
        }
        // b's timeline starts at 500 µs, a's at 0: merging reaches back before b's origin.
        b.absorb(a.totals());
        assert_eq!(b.report(), p.report());
    }

    /// A connection sample reaches back to the previous arrival, before the timeline's
    /// first bucket; an arrival at the same instant as the last goes to the next sample.
    #[test]
    fn timelines_grow_backwards_and_same_instant_arrivals_merge() {
        let mut p = SteadyProbe::default();
        // QP 0 marks µs 100 first; connection 2's first sample covers 50..102 µs.
        p.sent(QpId(0), 100 * SAMPLE_PS, 1e9, true);
        p.slices(2, 50 * SAMPLE_PS, 1);
        p.slices(2, 102 * SAMPLE_PS, 1);
        let r = p.report();
        assert_eq!(r.qps.active_us, 1);
        assert_eq!(r.connections.active_us, 52);
        // A second arrival at 110 µs is carried to the next sample: 2 slices in 8 µs.
        p.slices(2, 110 * SAMPLE_PS, 1);
        p.slices(2, 110 * SAMPLE_PS, 1);
        p.slices(2, 118 * SAMPLE_PS, 1);
        let c = &p.conns[2];
        assert_eq!((c.bands[0].n, c.bands[0].lo), (1, 4.0 * SAMPLE_PS as f64));
        assert_eq!(p.report().connections.active_ps, 68 * SAMPLE_PS);
    }

    #[test]
    fn a_rate_step_restarts_the_window() {
        let r = feed((0..400).map(|i| if i < 200 { 100e9 } else { 50e9 }));
        // 101 steady samples before the step, 101 after.
        assert_eq!(share(&r, WORMHOLE_THETA, 100), 202.0 / 400.0);
    }

    /// The memo's confirmation: a connection whose band covers the span (and
    /// [`MIN_SAMPLES`] samples) is confirmed before its window is full; a step restarts
    /// both; a connection that stopped receiving is neither.
    #[test]
    fn a_confirmation_needs_its_span_not_the_window() {
        let mut w = PipelineWatch::new(0.05, 300);
        let slice_ps = 2 * SAMPLE_PS;
        let mut t = 0;
        let mut feed = |w: &mut PipelineWatch, n: u64, per: Ps| {
            for _ in 0..n {
                t += per;
                w.slices(0, t, 1);
            }
            t
        };
        // The first arrival has no sample; the next 16 fill the period; 19 periods'
        // means in the band then cover 38 µs.
        let now = feed(&mut w, 1 + 16 + 18, slice_ps);
        assert_eq!(w.confirmed_per_slice(0, now, 50 * SAMPLE_PS), None);
        assert_eq!(
            w.confirmed_per_slice(0, now, 20 * SAMPLE_PS),
            Some(slice_ps as f64)
        );
        let now = feed(&mut w, 10, slice_ps);
        assert_eq!(
            w.confirmed_per_slice(0, now, 50 * SAMPLE_PS),
            Some(slice_ps as f64)
        );
        assert_eq!(w.steady_per_slice(0, now), None, "the window is 300 µs");
        // Twice as slow: the average leaves the band, which starts again, and holds once
        // the average is of the new pace only (SMOOTH_SLICES arrivals) for 50 µs.
        let now = feed(&mut w, 4, 2 * slice_ps);
        assert_eq!(w.confirmed_per_slice(0, now, 5 * SAMPLE_PS), None);
        let now = feed(&mut w, SMOOTH_SLICES as u64 + 16, 2 * slice_ps);
        let per = w.confirmed_per_slice(0, now, 50 * SAMPLE_PS).expect("held again");
        assert!((per / (2 * slice_ps) as f64 - 1.0).abs() < 0.02, "{per}");
        // Nothing for longer than a period: not confirmed, whatever came before.
        assert_eq!(
            w.confirmed_per_slice(0, now + 200 * SAMPLE_PS, 50 * SAMPLE_PS),
            None
        );
    }

    /// The gaps of `rail-16384gpu`'s ring (docs/fast-forward.md, "A delay that travels
    /// the ring"): seven slices 1.536 µs apart and one 3.624 µs after the one before, a
    /// period of eight.
    fn rail_gap(i: u64) -> Ps {
        if i % 8 == 7 { 3_624_000 } else { 1_536_000 }
    }

    /// One slice 2.3 µs late, as a delay passing through a ring's connection: the
    /// watch's average (over 48 slices, 86 µs, within [`SMOOTH_SPAN_PS`]) moves 2.7 % and
    /// its window holds at θ = 5 %; over the probe's [`PERIOD_SLICES`] it moves 8 %,
    /// which would restart it.
    #[test]
    fn a_late_slice_passing_through_is_not_a_new_pace() {
        let mut w = PipelineWatch::new(0.05, 300);
        let mut short = PeriodRing::<PERIOD_SLICES>::default();
        let mut t = 0;
        let (mut lo, mut hi) = (f64::MAX, 0.0f64);
        for i in 0..600u64 {
            let late = if i == 400 { 2_300_000 } else { 0 };
            let gap = rail_gap(i) + late;
            t += gap;
            w.slices(0, t, 1);
            if i > 0
                && let Some(per) = short.push(gap, 1, Ps::MAX)
            {
                lo = lo.min(per);
                hi = hi.max(per);
            }
            if i >= 360 {
                let per = w.steady_per_slice(0, t).expect("steady through the delay");
                assert!((per / 1_797_000.0 - 1.0).abs() < 0.01, "{i}: {per}");
            }
        }
        assert!((hi - lo) / lo > 0.07, "over 16 slices: {lo}..{hi}");
        // A step of pace that lasts is a new pace: the window starts again once the
        // average has moved θ, within its SMOOTH_SLICES arrivals.
        let mut after = 0;
        while w.steady_per_slice(0, t).is_some() {
            t += rail_gap(after) * 11 / 10;
            w.slices(0, t, 1);
            after += 1;
            assert!(after <= SMOOTH_SLICES as u64, "a 10 % step not seen");
        }
        assert!(after > PERIOD_SLICES as u64, "{after}");
    }

    /// While the average fills (and after `restart_average`) it is taken over whole
    /// periods only, so an 8-slice ripple never shows: a sample from the 16th arrival
    /// on, each within 0.1 % of the pace.
    #[test]
    fn a_filling_average_covers_whole_periods() {
        let mut w = PipelineWatch::new(0.05, 20);
        let (mut t, mut i) = (0, 0);
        let mut arrive = |w: &mut PipelineWatch, n: u64| {
            for _ in 0..n {
                t += rail_gap(i);
                i += 1;
                w.slices(0, t, 1);
            }
            t
        };
        // The first arrival has no gap before it: 16 more for the first sample.
        let now = arrive(&mut w, 16);
        assert_eq!(w.confirmed_per_slice(0, now, 0), None, "no sample");
        let now = arrive(&mut w, 1);
        assert_eq!(w.confirmed_per_slice(0, now, 0), None, "one sample");
        // From then on every arrival is a sample; 16 of them hold the band, within a
        // ripple of 0.1 %, though the ring holds 17 to 32 arrivals, not a multiple.
        let now = arrive(&mut w, 16);
        let per = w.confirmed_per_slice(0, now, 0).expect("16 samples");
        assert!((per / 1_797_000.0 - 1.0).abs() < 0.001, "{per}");
        w.restart_average(0);
        assert!(w.refilling(0));
        let now = arrive(&mut w, PERIOD_SLICES as u64 - 1);
        assert!(w.refilling(0));
        let per = w.confirmed_per_slice(0, now, 0).expect("its band stays");
        assert!((per / 1_797_000.0 - 1.0).abs() < 0.001, "{per}");
        // Restarted, then twice as slow: the first sample is of the new slices only (the
        // band starts again at it), 16 of them, not the old ones beside them.
        w.restart_average(0);
        let mut at = now;
        for j in 0..PERIOD_SLICES as u64 {
            at += 2 * rail_gap(j + 1);
            w.slices(0, at, 1);
        }
        assert!(!w.refilling(0));
        let k = &w.conns[0];
        assert_eq!((k.band.n, k.band.lo), (1, 2.0 * 1_797_000.0));
    }

    /// While it fills, the ring averages its newest whole periods: after 16 samples of
    /// 1 µs and 4 of 2 µs, the newest 16 (12 of 1 µs, 4 of 2 µs); full, its last 64.
    #[test]
    fn a_filling_ring_takes_its_newest_periods() {
        let mut r = PeriodRing::<SMOOTH_SLICES>::default();
        for _ in 0..16 {
            r.push(1_000_000, 1, Ps::MAX);
        }
        let mut last = None;
        for _ in 0..4 {
            last = r.push(2_000_000, 1, Ps::MAX);
        }
        assert_eq!(last, Some(1_250_000.0));
        for _ in 0..60 {
            last = r.push(2_000_000, 1, Ps::MAX);
        }
        assert_eq!(last, Some(2_000_000.0), "the 1 µs samples are out of the last 64");
    }

    /// The watch's average spans [`SMOOTH_SPAN_PS`] at most: 64 samples of 1 µs, then one
    /// of 3 µs, average over 64 (66 µs); of 2.5 µs, over 32 (80 µs; 48 span 120 µs); of
    /// 10 µs, over 16, though 16 span more than the bound.
    #[test]
    fn the_watch_averages_over_100_us_at_most() {
        let fill = |gap: Ps| {
            let mut r = PeriodRing::<SMOOTH_SLICES>::default();
            for _ in 0..SMOOTH_SLICES - 1 {
                r.push(gap, 1, SMOOTH_SPAN_PS);
            }
            r
        };
        let mut r = fill(1_000_000);
        r.push(1_000_000, 1, SMOOTH_SPAN_PS);
        assert_eq!(r.push(3_000_000, 1, SMOOTH_SPAN_PS), Some(66_000_000.0 / 64.0));
        let mut r = fill(2_500_000);
        r.push(2_500_000, 1, SMOOTH_SPAN_PS);
        let per = r.push(5_000_000, 1, SMOOTH_SPAN_PS).expect("full");
        assert_eq!(per, (31.0 * 2_500_000.0 + 5_000_000.0) / 32.0);
        let mut r = fill(10_000_000);
        let per = r.push(26_000_000, 1, SMOOTH_SPAN_PS).expect("full");
        assert_eq!(per, (15.0 * 10_000_000.0 + 26_000_000.0) / 16.0);
    }
}
