//! Congestion control reaction points: DCQCN, TIMELY, HPCC and DCTCP, as pure state
//! machines that the engine drives with events (CNP arrivals, timers, bytes sent, ACKs
//! with RTT samples, INT records or ECN echoes).
//!
//! Both follow docs/reference/congestion-control.md; where the reference leaves a choice
//! open, the HPCC ns-3 simulator's choice is taken (it is the simulator Xirang is validated
//! against) and the comment says so.

use xirang_fabric::config::{DcqcnParams, DctcpParams, HpccParams, TimelyParams};

use crate::time::{PS_PER_NS, Ps, us};

/// DCQCN parameters in engine units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dcqcn {
    /// Alpha gain g.
    pub g: f64,
    /// Alpha update period (`dce_tcp_rtt`).
    pub alpha_period: Ps,
    /// Period of the rate-decrease check (`rate_reduce_monitor_period`).
    pub dec_period: Ps,
    /// Rate-increase timer (`rpg_time_reset`).
    pub inc_period: Ps,
    /// Byte counter (`rpg_byte_reset`); 0 disables it.
    pub byte_reset: u64,
    /// Fast-recovery steps F (`rpg_threshold`).
    pub f: u32,
    /// Additive increase, bit/s.
    pub ai_bps: f64,
    /// Hyper increase, bit/s.
    pub hai_bps: f64,
    /// Rate floor, bit/s.
    pub min_bps: f64,
    /// Rate cap, bit/s (line rate or `rpg_max_rate`).
    pub max_bps: f64,
    /// Fraction of alpha cut per decrease: 2^(10 - rpg_gd) (gd 11 gives alpha/2).
    pub cut_scale: f64,
    /// Largest single cut as a kept fraction (`rpg_min_dec_fac` / 100).
    pub min_dec_fac: f64,
    /// Alpha on the first CNP.
    pub initial_alpha: f64,
    /// Rate forced on the first CNP, bit/s (0 = none).
    pub first_cnp_bps: f64,
    /// Target follows current rate on every decrease.
    pub clamp: bool,
    /// Target follows current rate when the last increase was timer driven.
    pub clamp_after_time_inc: bool,
    /// NP: minimum time between CNPs of one QP.
    pub cnp_interval: Ps,
}

impl Dcqcn {
    /// Converts scenario parameters for a port of `line_bps`.
    pub fn new(p: &DcqcnParams, line_bps: f64) -> Self {
        const MBPS: f64 = 1e6;
        let max_bps = if p.rpg_max_rate_mbps > 0.0 {
            (p.rpg_max_rate_mbps * MBPS).min(line_bps)
        } else {
            line_bps
        };
        Dcqcn {
            g: p.g(),
            alpha_period: us(p.dce_tcp_rtt_us).max(1),
            dec_period: us(p.rate_reduce_monitor_period_us).max(1),
            inc_period: us(p.rpg_time_reset_us).max(1),
            byte_reset: p.rpg_byte_reset_bytes,
            f: p.rpg_threshold,
            ai_bps: p.rpg_ai_rate_mbps * MBPS,
            hai_bps: p.rpg_hai_rate_mbps * MBPS,
            min_bps: (p.rpg_min_rate_mbps * MBPS).min(max_bps),
            max_bps,
            cut_scale: 2f64.powi(10 - p.rpg_gd as i32),
            min_dec_fac: f64::from(p.rpg_min_dec_fac_pct) / 100.0,
            initial_alpha: f64::from(p.initial_alpha_value) / 1024.0,
            first_cnp_bps: p.rate_to_set_on_first_cnp_mbps * MBPS,
            clamp: p.clamp_tgt_rate,
            clamp_after_time_inc: p.clamp_tgt_rate_after_time_inc,
            cnp_interval: us(p.min_time_between_cnps_us),
        }
    }
}

/// The HPCC simulator starts its periodic decrease check one nanosecond after the period,
/// so that a CNP arriving exactly on the period is seen (docs/hpcc-model.md §5).
const DEC_CHECK_OFFSET: Ps = PS_PER_NS;

/// Per-QP DCQCN reaction-point state.
///
/// Timers are lazy: the alpha timer is applied arithmetically when alpha is needed, the
/// decrease check only runs when a CNP is pending, and the increase timer keeps a deadline
/// that a single pending engine event chases. This is observably the same as the periodic
/// timers of the reference (same grid, same updates) with far fewer events.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DcqcnState {
    /// Current rate Rc, bit/s.
    pub rc: f64,
    /// Target rate Rt, bit/s.
    pub rt: f64,
    /// Congestion estimate.
    pub alpha: f64,
    alpha_flag: bool,
    next_alpha_tick: Ps,
    dec_flag: bool,
    dec_grid0: Ps,
    /// Time of the pending decrease check, if one is scheduled.
    pub dec_scheduled: Option<Ps>,
    /// Next rate-increase timer deadline (None until the first decrease).
    pub inc_deadline: Option<Ps>,
    t_cnt: u32,
    bc_cnt: u32,
    bytes: u64,
    seen_cnp: bool,
    last_inc_timer: bool,
}

/// Which rule an increase event applied (for tests and traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Increase {
    /// Rc halfway to Rt.
    FastRecovery,
    /// Rt + AI, then halfway.
    Additive,
    /// Rt + HAI, then halfway.
    Hyper,
}

impl DcqcnState {
    /// A QP starting at line rate.
    pub fn new(p: &Dcqcn) -> Self {
        DcqcnState {
            rc: p.max_bps,
            rt: p.max_bps,
            alpha: 1.0,
            alpha_flag: false,
            next_alpha_tick: 0,
            dec_flag: false,
            dec_grid0: 0,
            dec_scheduled: None,
            inc_deadline: None,
            t_cnt: 0,
            bc_cnt: 0,
            bytes: 0,
            seen_cnp: false,
            last_inc_timer: false,
        }
    }

    fn catch_up_alpha(&mut self, now: Ps, p: &Dcqcn) {
        if !self.seen_cnp || now < self.next_alpha_tick {
            return;
        }
        let n = (now - self.next_alpha_tick) / p.alpha_period + 1;
        let flag = if self.alpha_flag { 1.0 } else { 0.0 };
        self.alpha = (1.0 - p.g) * self.alpha + p.g * flag;
        if n > 1 {
            self.alpha *= (1.0 - p.g).powi((n - 1).min(i32::MAX as u64) as i32);
        }
        self.alpha_flag = false;
        self.next_alpha_tick += n * p.alpha_period;
    }

    /// A CNP arrived. Returns the time of a decrease check the engine must schedule, if
    /// none is pending.
    pub fn on_cnp(&mut self, now: Ps, p: &Dcqcn) -> Option<Ps> {
        if !self.seen_cnp {
            // First CNP: alpha starts at its initial value and the first CNP does not count
            // in the first alpha window (HPCC `cnp_received_mlx`).
            self.seen_cnp = true;
            self.alpha = p.initial_alpha;
            self.next_alpha_tick = now + p.alpha_period;
            self.dec_grid0 = now + p.dec_period + DEC_CHECK_OFFSET;
            if p.first_cnp_bps > 0.0 {
                self.rc = p.first_cnp_bps.clamp(p.min_bps, p.max_bps);
                self.rt = self.rc;
            }
            self.dec_flag = true;
        } else {
            self.catch_up_alpha(now, p);
            self.alpha_flag = true;
            self.dec_flag = true;
        }
        if self.dec_scheduled.is_some() {
            return None;
        }
        // Next point of the periodic check grid strictly after now.
        let t = if now < self.dec_grid0 {
            self.dec_grid0
        } else {
            self.dec_grid0 + ((now - self.dec_grid0) / p.dec_period + 1) * p.dec_period
        };
        self.dec_scheduled = Some(t);
        Some(t)
    }

    /// The decrease check fires. Returns true if the rate was cut (the increase timer was
    /// restarted at `inc_deadline`).
    pub fn on_dec_check(&mut self, now: Ps, p: &Dcqcn) -> bool {
        self.dec_scheduled = None;
        if !self.dec_flag {
            return false;
        }
        self.dec_flag = false;
        self.catch_up_alpha(now, p);
        if p.clamp || (p.clamp_after_time_inc && self.last_inc_timer) {
            self.rt = self.rc;
        }
        let kept = (1.0 - self.alpha * p.cut_scale).max(p.min_dec_fac);
        self.rc = (self.rc * kept).max(p.min_bps);
        self.t_cnt = 0;
        self.bc_cnt = 0;
        self.bytes = 0;
        self.last_inc_timer = false;
        self.inc_deadline = Some(now + p.inc_period);
        true
    }

    /// The increase timer fires at its deadline.
    pub fn on_inc_timer(&mut self, now: Ps, p: &Dcqcn) -> Increase {
        self.inc_deadline = Some(now + p.inc_period);
        self.increase(p, true)
    }

    /// `bytes` were sent; returns an increase if the byte counter expired.
    pub fn on_sent(&mut self, bytes: u32, p: &Dcqcn) -> Option<Increase> {
        if p.byte_reset == 0 || !self.seen_cnp || self.inc_deadline.is_none() {
            return None;
        }
        self.bytes += u64::from(bytes);
        if self.bytes >= p.byte_reset {
            self.bytes = 0;
            Some(self.increase(p, false))
        } else {
            None
        }
    }

    fn increase(&mut self, p: &Dcqcn, timer: bool) -> Increase {
        let (t, b) = (self.t_cnt, self.bc_cnt);
        // Counts of earlier events since the last cut decide the stage. With the byte
        // counter off, the single timer count runs F fast-recovery steps, one additive
        // step, then hyper steps, as the HPCC simulator and the firmware's timer-only mode
        // do; with it on, the paper's two-counter rule applies
        // (docs/reference/congestion-control.md §1.3). The hyper step is a constant
        // R_HAI per event: the paper's growing i*R_HAI is unconfirmed there.
        let stage = if p.byte_reset == 0 {
            if t < p.f {
                Increase::FastRecovery
            } else if t == p.f {
                Increase::Additive
            } else {
                Increase::Hyper
            }
        } else if t.max(b) < p.f {
            Increase::FastRecovery
        } else if t.min(b) < p.f {
            Increase::Additive
        } else {
            Increase::Hyper
        };
        match stage {
            Increase::FastRecovery => {}
            Increase::Additive => self.rt = (self.rt + p.ai_bps).min(p.max_bps),
            Increase::Hyper => self.rt = (self.rt + p.hai_bps).min(p.max_bps),
        }
        self.rc = ((self.rc + self.rt) / 2.0).min(p.max_bps);
        if timer {
            self.t_cnt = self.t_cnt.saturating_add(1);
        } else {
            self.bc_cnt = self.bc_cnt.saturating_add(1);
        }
        self.last_inc_timer = timer;
        stage
    }
}

/// TIMELY parameters in engine units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timely {
    /// Always increase below this RTT.
    pub t_low: Ps,
    /// Always decrease above this RTT.
    pub t_high: Ps,
    /// EWMA weight of the newest RTT difference.
    pub alpha: f64,
    /// Multiplicative decrease factor.
    pub beta: f64,
    /// Additive step, bit/s.
    pub add_bps: f64,
    /// HAI step, bit/s.
    pub hai_bps: f64,
    /// Consecutive increases before HAI.
    pub hai_after: u32,
    /// Normalising minimum RTT.
    pub min_rtt: Ps,
    /// Floor, bit/s.
    pub min_bps: f64,
    /// Cap (line rate), bit/s.
    pub max_bps: f64,
    /// HAI step also below T_low (the HPCC simulator's variant).
    pub hai_below_t_low: bool,
}

impl Timely {
    /// Converts scenario parameters for a port of `line_bps`.
    pub fn new(p: &TimelyParams, line_bps: f64) -> Self {
        const MBPS: f64 = 1e6;
        Timely {
            t_low: us(p.t_low_us),
            t_high: us(p.t_high_us),
            alpha: p.ewma_alpha,
            beta: p.beta,
            add_bps: p.add_step_mbps * MBPS,
            hai_bps: p.hai_step_mbps * MBPS,
            hai_after: p.hai_threshold,
            min_rtt: us(p.min_rtt_us).max(1),
            min_bps: (p.min_rate_mbps * MBPS).min(line_bps),
            max_bps: line_bps,
            hai_below_t_low: p.hai_below_t_low,
        }
    }
}

/// Per-QP TIMELY state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TimelyState {
    /// Current rate, bit/s.
    pub rate: f64,
    prev_rtt: Option<Ps>,
    rtt_diff: f64,
    increases: u32,
    /// Updates run once per window: when an ACK passes the `snd_nxt` of the last update.
    last_update_seq: u64,
}

impl TimelyState {
    /// A QP starting at line rate.
    pub fn new(p: &Timely) -> Self {
        TimelyState {
            rate: p.max_bps,
            prev_rtt: None,
            rtt_diff: 0.0,
            increases: 0,
            last_update_seq: 0,
        }
    }

    /// An ACK for bytes up to `ack_seq` arrived with an RTT sample. Rate updates happen
    /// once per window of data, when the ACK passes the `snd_nxt` recorded at the previous
    /// update: TIMELY's "per completion event", as the HPCC simulator implements it.
    pub fn on_ack(&mut self, ack_seq: u64, snd_nxt: u64, rtt: Ps, p: &Timely) {
        if ack_seq <= self.last_update_seq && self.prev_rtt.is_some() {
            return;
        }
        self.on_rtt(rtt, p);
        // After a go-back-N, snd_nxt is behind: keep the mark (HPCC `UpdateRateTimely`).
        self.last_update_seq = self.last_update_seq.max(snd_nxt);
    }

    /// One TIMELY update with a new RTT sample (docs/reference/congestion-control.md §2).
    pub fn on_rtt(&mut self, rtt: Ps, p: &Timely) {
        let Some(prev) = self.prev_rtt else {
            self.prev_rtt = Some(rtt);
            return;
        };
        let new_diff = rtt as f64 - prev as f64;
        self.prev_rtt = Some(rtt);
        self.rtt_diff = (1.0 - p.alpha) * self.rtt_diff + p.alpha * new_diff;
        let gradient = self.rtt_diff / p.min_rtt as f64;
        let hai = self.increases >= p.hai_after;
        if rtt < p.t_low {
            self.rate += if hai && p.hai_below_t_low {
                p.hai_bps
            } else {
                p.add_bps
            };
            self.increases += 1;
        } else if rtt > p.t_high {
            self.rate *= 1.0 - p.beta * (1.0 - p.t_high as f64 / rtt as f64);
            self.increases = 0;
        } else if gradient <= 0.0 {
            self.rate += if hai { p.hai_bps } else { p.add_bps };
            self.increases += 1;
        } else {
            self.rate *= (1.0 - p.beta * gradient).max(0.0);
            self.increases = 0;
        }
        self.rate = self.rate.clamp(p.min_bps, p.max_bps);
    }
}

/// INT fields as the HPCC simulator encodes a hop (its int-header.h: 64 bits = line-rate
/// code 3, time 24, bytes 20, queue length 17); the wrap-around of each field is kept, as
/// the sender's deltas see it.
pub mod int {
    /// Time field width, bits (ns units).
    pub const TIME_BITS: u32 = 24;
    /// Transmitted-bytes field width, bits (units of 128 x multi bytes).
    pub const BYTES_BITS: u32 = 20;
    /// Queue-length field width, bits (units of 80 x multi bytes).
    pub const QLEN_BITS: u32 = 17;
    /// Byte unit before the multiplier.
    pub const BYTES_UNIT: u64 = 128;
    /// Queue-length unit before the multiplier.
    pub const QLEN_UNIT: u64 = 80;
    /// Hops an INT header holds; a longer path carries no usable INT.
    pub const MAX_HOPS: usize = 5;
    /// Bytes INT adds to every data packet and ACK of an HPCC QP: 5 hops x 8 + a 2-byte
    /// hop count (int-header.cc `GetStaticSize`).
    pub const HEADER_BYTES: u32 = 42;

    /// One hop's record, encoded.
    #[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Hop {
        /// Dequeue time, ns, modulo 2^24.
        pub time: u32,
        /// Bytes the egress port sent before this packet, in byte units, modulo 2^20.
        pub bytes: u32,
        /// Bytes queued at the egress port (all priorities) after the dequeue, in queue
        /// units, saturating at 2^17 - 1.
        pub qlen: u32,
        /// The egress port's rate, bit/s.
        pub rate_bps: f64,
    }

    impl Hop {
        /// Encodes a hop's raw values with the multiplier `multi`.
        pub fn encode(now_ns: u64, tx_bytes: u64, qlen_bytes: u64, rate_bps: f64, multi: u64) -> Hop {
            Hop {
                time: (now_ns & ((1 << TIME_BITS) - 1)) as u32,
                bytes: ((tx_bytes / (BYTES_UNIT * multi)) & ((1 << BYTES_BITS) - 1)) as u32,
                qlen: (qlen_bytes / (QLEN_UNIT * multi)).min((1 << QLEN_BITS) - 1) as u32,
                rate_bps,
            }
        }

        /// ns since `prev`, across the field's wrap.
        pub fn time_delta(&self, prev: &Hop) -> u64 {
            u64::from(self.time.wrapping_sub(prev.time) & ((1 << TIME_BITS) - 1))
        }

        /// Bytes sent since `prev`, across the field's wrap.
        pub fn bytes_delta(&self, prev: &Hop, multi: u64) -> u64 {
            u64::from(self.bytes.wrapping_sub(prev.bytes) & ((1 << BYTES_BITS) - 1)) * BYTES_UNIT * multi
        }

        /// Queue length, bytes.
        pub fn qlen_bytes(&self, multi: u64) -> u64 {
            u64::from(self.qlen) * QLEN_UNIT * multi
        }
    }

    /// The INT a packet carries.
    #[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
    pub struct Record {
        /// Hops pushed (may exceed [`MAX_HOPS`]: then the record is unusable).
        pub nhop: u8,
        /// The unit multiplier the sender's NIC uses (switches encode with it).
        pub multi: u8,
        /// The hops, in path order.
        pub hops: [Hop; MAX_HOPS],
    }

    impl Record {
        /// Appends a hop (the simulator writes slot `nhop % MAX_HOPS`).
        pub fn push(&mut self, h: Hop) {
            self.hops[usize::from(self.nhop) % MAX_HOPS] = h;
            self.nhop = self.nhop.saturating_add(1);
        }
    }
}

/// HPCC parameters in engine units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hpcc {
    /// Target utilisation.
    pub eta: f64,
    /// maxStage.
    pub max_stage: u32,
    /// Additive step, bit/s.
    pub ai_bps: f64,
    /// Floor, bit/s.
    pub min_bps: f64,
    /// Cap (line rate), bit/s.
    pub max_bps: f64,
    /// Per-ACK reaction between the per-RTT updates.
    pub fast_react: bool,
    /// INT unit multiplier.
    pub multi: u64,
    /// T, the base RTT, ns.
    pub base_rtt_ns: f64,
    /// The window at line rate (the largest BDP), bytes.
    pub win_bytes: u64,
}

/// INT units scale with the NIC rate: the simulator's INT_MULTI is its NIC rate / 25 Gbit/s.
const INT_MULTI_PER_BPS: f64 = 25e9;

impl Hpcc {
    /// Converts scenario parameters for a NIC port of `line_bps` on a fabric whose largest
    /// base RTT and BDP are `base_rtt_ns` and `win_bytes`.
    pub fn new(p: &HpccParams, line_bps: f64, base_rtt_ns: f64, win_bytes: u64) -> Self {
        const MBPS: f64 = 1e6;
        let multi = if p.int_multi > 0 {
            u64::from(p.int_multi)
        } else {
            ((line_bps / INT_MULTI_PER_BPS) as u64).max(1)
        };
        Hpcc {
            eta: p.eta,
            max_stage: p.max_stage,
            ai_bps: p.ai_mbps * MBPS,
            min_bps: (p.min_rate_mbps * MBPS).min(line_bps),
            max_bps: line_bps,
            fast_react: p.fast_react,
            multi,
            base_rtt_ns: base_rtt_ns.max(1.0),
            win_bytes: win_bytes.max(1),
        }
    }
}

/// Per-QP HPCC state (the HPCC simulator's rate form, its rdma-hw.cc `UpdateRateHp`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct HpccState {
    /// Current rate (the fast-react rate), bit/s.
    pub rate: f64,
    /// Reference rate, committed once per RTT, bit/s.
    pub cur_rate: f64,
    /// Smoothed utilisation.
    pub u: f64,
    inc_stage: u32,
    last_update_seq: u64,
    prev: int::Record,
}

impl HpccState {
    /// A QP starting at line rate.
    pub fn new(p: &Hpcc) -> Self {
        HpccState {
            rate: p.max_bps,
            cur_rate: p.max_bps,
            u: 1.0,
            inc_stage: 0,
            last_update_seq: 0,
            prev: int::Record::default(),
        }
    }

    /// An ACK for bytes up to `ack_seq` came back with the INT of the data packet it
    /// answers, when the sender had sent up to `snd_nxt`. The first ACK past the previous
    /// update's `snd_nxt` updates and commits the reference rate (once per RTT); the ACKs
    /// in between react without committing when fast react is on. Returns whether the rate
    /// changed.
    pub fn on_ack(&mut self, ack_seq: u64, snd_nxt: u64, rec: &int::Record, p: &Hpcc) -> bool {
        let full = ack_seq > self.last_update_seq;
        if !full && !p.fast_react {
            return false;
        }
        if self.last_update_seq == 0 {
            // The first ACK only keeps its INT as the baseline.
            self.last_update_seq = snd_nxt;
            self.prev = *rec;
            return false;
        }
        let mut changed = false;
        if usize::from(rec.nhop) <= int::MAX_HOPS {
            let t = p.base_rtt_ns;
            let mut max_u = 0.0;
            let mut dt = 0.0;
            let mut updated = false;
            for i in 0..usize::from(rec.nhop) {
                let (h, prev) = (&rec.hops[i], &self.prev.hops[i]);
                let tau = h.time_delta(prev);
                // Two samples of one hop are at least a packet's serialization apart; a
                // zero gap (a stale copy after go-back-N) carries no rate.
                if tau == 0 {
                    continue;
                }
                let tx_bps = h.bytes_delta(prev, p.multi) as f64 * 8.0 / (tau as f64 * 1e-9);
                let qlen = h.qlen_bytes(p.multi).min(prev.qlen_bytes(p.multi)) as f64;
                let u = tx_bps / h.rate_bps + qlen * p.max_bps / h.rate_bps / p.win_bytes as f64;
                if u > max_u {
                    max_u = u;
                    dt = tau as f64;
                }
                updated = true;
            }
            self.prev = *rec;
            if updated {
                let dt = dt.min(t);
                self.u = (self.u * (t - dt) + max_u * dt) / t;
                let max_c = self.u / p.eta;
                let (new_rate, new_stage) = if max_c >= 1.0 || self.inc_stage >= p.max_stage {
                    (self.cur_rate / max_c + p.ai_bps, 0)
                } else {
                    (self.cur_rate + p.ai_bps, self.inc_stage + 1)
                };
                let new_rate = new_rate.clamp(p.min_bps, p.max_bps);
                changed = new_rate != self.rate;
                self.rate = new_rate;
                if full {
                    self.cur_rate = new_rate;
                    self.inc_stage = new_stage;
                }
            }
        }
        if full {
            self.last_update_seq = self.last_update_seq.max(snd_nxt);
        }
        changed
    }
}

/// DCTCP parameters in engine units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dctcp {
    /// Alpha gain g.
    pub g: f64,
    /// Additive increase per window, bit/s.
    pub ai_bps: f64,
    /// Floor, bit/s.
    pub min_bps: f64,
    /// Cap (line rate), bit/s.
    pub max_bps: f64,
    /// The window at line rate (the largest BDP), bytes.
    pub win_bytes: u64,
}

impl Dctcp {
    /// Converts scenario parameters for a NIC port of `line_bps`.
    pub fn new(p: &DctcpParams, line_bps: f64, win_bytes: u64) -> Self {
        const MBPS: f64 = 1e6;
        Dctcp {
            g: p.g,
            ai_bps: p.ai_mbps * MBPS,
            min_bps: (p.min_rate_mbps * MBPS).min(line_bps),
            max_bps: line_bps,
            win_bytes: win_bytes.max(1),
        }
    }
}

/// Per-QP DCTCP state (the HPCC simulator's rdma-hw.cc `HandleAckDctcp`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DctcpState {
    /// Current rate, bit/s.
    pub rate: f64,
    /// Estimate of the marked fraction.
    pub alpha: f64,
    last_update_seq: u64,
    ecn_count: u64,
    batch_packets: u64,
    /// In the window after a cut (TCP's CWR): no further cut, no increase.
    cwr: bool,
    high_seq: u64,
}

impl DctcpState {
    /// A QP starting at line rate with alpha 1.
    pub fn new(p: &Dctcp) -> Self {
        DctcpState {
            rate: p.max_bps,
            alpha: 1.0,
            last_update_seq: 0,
            ecn_count: 0,
            batch_packets: 0,
            cwr: false,
            high_seq: 0,
        }
    }

    /// An ACK for bytes up to `ack_seq`, echoing (`ece`) whether its data packet was
    /// marked, when the sender had sent up to `snd_nxt` in packets of `mtu` bytes.
    pub fn on_ack(&mut self, ack_seq: u64, snd_nxt: u64, ece: bool, mtu: u64, p: &Dctcp) {
        self.ecn_count += u64::from(ece);
        let mut new_batch = false;
        if ack_seq > self.last_update_seq {
            new_batch = true;
            if self.last_update_seq == 0 {
                self.batch_packets = snd_nxt / mtu + 1;
            } else {
                let frac = (self.ecn_count as f64 / self.batch_packets as f64).min(1.0);
                self.alpha = (1.0 - p.g) * self.alpha + p.g * frac;
                self.ecn_count = 0;
                self.batch_packets = snd_nxt.saturating_sub(ack_seq) / mtu + 1;
            }
            self.last_update_seq = snd_nxt;
        }
        if self.cwr && ack_seq > self.high_seq {
            self.cwr = false;
        }
        if ece && !self.cwr {
            self.rate = (self.rate * (1.0 - self.alpha / 2.0)).max(p.min_bps);
            self.cwr = true;
            self.high_seq = snd_nxt;
        }
        if !self.cwr && new_batch {
            self.rate = (self.rate + p.ai_bps).min(p.max_bps);
        }
    }
}

/// Bytes a window-limited QP may have in flight at `rate_bps`: the line-rate window
/// scaled by the rate (the simulator's VAR_WIN), at least one byte.
pub fn var_window(win_bytes: u64, rate_bps: f64, max_bps: f64) -> u64 {
    ((win_bytes as f64 * rate_bps / max_bps) as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::PS_PER_US;

    fn reference_dcqcn() -> Dcqcn {
        // The HPCC reference runs at 100 Gbit/s (docs/reference/reference-scenarios.md).
        let p = DcqcnParams {
            rpg_time_reset_us: 300.0,
            rpg_byte_reset_bytes: 0,
            rpg_threshold: 1,
            rpg_ai_rate_mbps: 20.0,
            rpg_hai_rate_mbps: 200.0,
            rpg_min_rate_mbps: 1000.0,
            dce_tcp_g: 1020,
            dce_tcp_rtt_us: 1.0,
            rate_reduce_monitor_period_us: 4.0,
            ..DcqcnParams::default()
        };
        Dcqcn::new(&p, 100e9)
    }

    #[test]
    fn first_cnp_cuts_by_half_at_the_next_check() {
        let p = reference_dcqcn();
        let mut s = DcqcnState::new(&p);
        let t = s.on_cnp(10 * PS_PER_US, &p).unwrap();
        assert_eq!(t, 14 * PS_PER_US + PS_PER_NS);
        assert!(
            s.on_cnp(11 * PS_PER_US, &p).is_none(),
            "one check pending at a time"
        );
        assert!(s.on_dec_check(t, &p));
        // alpha: 1, then ticks at 11, 12, 13, 14 us: the 11 us CNP arrived before the 12 us tick.
        let g = p.g;
        let mut a = p.initial_alpha;
        a *= 1.0 - g; // tick at 11 us: CNP at 11 us is counted in the next window
        a = (1.0 - g) * a + g; // 12 us
        a *= (1.0 - g) * (1.0 - g); // 13, 14 us
        assert!((s.alpha - a).abs() < 1e-12, "{} vs {a}", s.alpha);
        assert!((s.rc - 100e9 * (1.0 - a / 2.0)).abs() < 1.0);
        assert_eq!(s.rt, 100e9, "no clamp without a timer increase");
        assert_eq!(s.inc_deadline, Some(t + 300 * PS_PER_US));
    }

    #[test]
    fn recovery_stages_follow_the_timer_count() {
        let p = reference_dcqcn();
        let mut s = DcqcnState::new(&p);
        let t = s.on_cnp(0, &p).unwrap();
        s.on_dec_check(t, &p);
        let cut = s.rc;
        assert_eq!(s.on_inc_timer(t + 300 * PS_PER_US, &p), Increase::FastRecovery);
        assert!((s.rc - (cut + 100e9) / 2.0).abs() < 1.0);
        assert_eq!(s.on_inc_timer(t + 600 * PS_PER_US, &p), Increase::Additive);
        assert_eq!(s.on_inc_timer(t + 900 * PS_PER_US, &p), Increase::Hyper);
        assert!(s.rc <= p.max_bps && s.rt <= p.max_bps);
        // A CNP after a timer increase clamps the target to the current rate.
        let rc = s.rc;
        let t2 = s.on_cnp(t + 901 * PS_PER_US, &p).unwrap();
        s.on_dec_check(t2, &p);
        assert_eq!(s.rt, rc);
    }

    #[test]
    fn rate_never_leaves_its_bounds() {
        let p = reference_dcqcn();
        let mut s = DcqcnState::new(&p);
        let mut now = 0;
        for _ in 0..10_000 {
            now += 5 * PS_PER_US;
            if let Some(t) = s.on_cnp(now, &p) {
                now = t;
                s.on_dec_check(t, &p);
            }
        }
        assert!((s.rc - p.min_bps).abs() < 1.0, "pinned at the floor: {}", s.rc);
    }

    fn reference_timely() -> Timely {
        Timely::new(&TimelyParams::default(), 100e9)
    }

    #[test]
    fn timely_falls_above_t_high_and_on_rising_rtt() {
        let p = reference_timely();
        let mut s = TimelyState::new(&p);
        s.rate = 50e9;
        s.on_rtt(600 * PS_PER_US, &p);
        s.on_rtt(600 * PS_PER_US, &p);
        assert!(s.rate < 50e9, "above T_high the rate falls: {}", s.rate);
        // Between T_low and T_high with a positive gradient, the rate falls.
        let mut s = TimelyState::new(&p);
        s.rate = 50e9;
        s.on_rtt(100 * PS_PER_US, &p);
        s.on_rtt(120 * PS_PER_US, &p);
        assert!(s.rate < 50e9, "positive gradient: {}", s.rate);
    }

    #[test]
    fn timely_rises_below_t_low_and_enters_hai() {
        let p = reference_timely();
        let mut s = TimelyState::new(&p);
        s.rate = 10e9;
        s.on_rtt(10 * PS_PER_US, &p);
        s.on_rtt(10 * PS_PER_US, &p);
        assert!(
            (s.rate - (10e9 + p.add_bps)).abs() < 1.0,
            "below T_low: +delta, {}",
            s.rate
        );
        // Falling RTT in the band: +delta until hai_after increases, then +HAI.
        let mut s = TimelyState::new(&p);
        s.rate = 10e9;
        let mut rtt = 400 * PS_PER_US;
        s.on_rtt(rtt, &p);
        let mut steps = Vec::new();
        for _ in 0..8 {
            rtt -= PS_PER_US;
            let before = s.rate;
            s.on_rtt(rtt, &p);
            steps.push(((s.rate - before) / 1e6).round() as i64);
        }
        assert_eq!(steps, [100, 100, 100, 100, 100, 500, 500, 500]);
    }

    fn reference_hpcc(max_stage: u32) -> Hpcc {
        // The reference incast's fabric: T = 12 480 ns, window 156 000 B at 100 Gbit/s.
        let p = HpccParams {
            max_stage,
            int_multi: 4,
            ..HpccParams::default()
        };
        Hpcc::new(&p, 100e9, 12_480.0, 156_000)
    }

    /// One hop's INT at `ns`, the port having sent `bytes` in all, with `qlen` queued.
    fn hop(ns: u64, bytes: u64, qlen: u64) -> int::Record {
        let mut r = int::Record {
            multi: 4,
            ..Default::default()
        };
        r.push(int::Hop::encode(ns, bytes, qlen, 100e9, 4));
        r
    }

    /// Bytes a 100 Gbit/s port sends in `ns` at `load`.
    fn sent(ns: u64, load: f64) -> u64 {
        (ns as f64 * 100e9 * load / 8e9) as u64
    }

    #[test]
    fn hpcc_cuts_when_a_hop_runs_above_eta_and_adds_below_it() {
        let p = reference_hpcc(5);
        let mut s = HpccState::new(&p);
        let mut seq = 1_000;
        assert!(
            !s.on_ack(seq, 2_000, &hop(0, 0, 0), &p),
            "the first ACK is the baseline"
        );
        // A saturated hop with a standing queue: U above eta, the rate falls.
        let (mut t, mut bytes) = (0, 0);
        for _ in 0..20 {
            t += 2_000;
            bytes += sent(2_000, 1.0);
            seq += 200_000;
            s.on_ack(seq, seq + 1_000, &hop(t, bytes, 100_000), &p);
        }
        let low = s.rate;
        assert!(low < 0.9 * p.max_bps, "{low}");
        assert!(s.u > p.eta, "{}", s.u);
        // An idle hop: U falls below eta; with maxStage 5 the first updates are additive.
        let mut last = s.cur_rate;
        let mut steps = Vec::new();
        for _ in 0..30 {
            t += 2_000;
            bytes += sent(2_000, 0.2);
            seq += 200_000;
            s.on_ack(seq, seq + 1_000, &hop(t, bytes, 0), &p);
            steps.push(s.cur_rate - last);
            last = s.cur_rate;
        }
        assert!(s.u < p.eta, "{}", s.u);
        assert!(s.rate > low);
        // Once U is below eta, every five additive steps of AI are followed by one
        // multiplicative increase (incStage reaches maxStage).
        let additive = steps.iter().filter(|d| (**d - p.ai_bps).abs() < 1.0).count();
        let larger = steps.iter().filter(|d| **d > p.ai_bps + 1.0).count();
        assert!(additive >= 10 && larger >= 2, "{steps:?}");
    }

    #[test]
    fn hpcc_fast_react_moves_the_rate_but_commits_once_per_rtt() {
        let p = reference_hpcc(0);
        let mut s = HpccState::new(&p);
        s.on_ack(1_000, 100_000, &hop(0, 0, 0), &p);
        // ACKs below the last update's snd_nxt: fast react only.
        assert!(s.on_ack(2_000, 101_000, &hop(1_000, sent(1_000, 1.0), 200_000), &p));
        assert!(s.rate < p.max_bps);
        assert_eq!(s.cur_rate, p.max_bps, "not committed");
        // The ACK past snd_nxt commits.
        s.on_ack(100_001, 102_000, &hop(2_000, sent(2_000, 1.0), 200_000), &p);
        assert_eq!(s.cur_rate, s.rate);
        assert!(s.cur_rate < p.max_bps);
    }

    #[test]
    fn int_fields_wrap_as_the_reference_encodes_them() {
        let a = int::Hop::encode((1 << 24) - 10, (1 << 20) * 512 - 512, 0, 100e9, 4);
        let b = int::Hop::encode((1 << 24) + 30, (1 << 20) * 512 + 1024, 1_000_000, 100e9, 4);
        assert_eq!(b.time_delta(&a), 40);
        assert_eq!(b.bytes_delta(&a, 4), 3 * 512);
        assert_eq!(b.qlen_bytes(4), 1_000_000 / 320 * 320);
    }

    fn reference_dctcp() -> Dctcp {
        Dctcp::new(&DctcpParams::default(), 100e9, 156_000)
    }

    #[test]
    fn dctcp_alpha_converges_to_the_marked_fraction() {
        let p = reference_dctcp();
        let mut s = DctcpState::new(&p);
        let mtu = 1_000;
        // Windows of 100 packets, one in four marked.
        let mut seq = 0;
        for _ in 0..400 {
            let snd_nxt = seq + 100 * mtu;
            for k in 0..100 {
                seq += mtu;
                s.on_ack(seq, snd_nxt, k % 4 == 0, mtu, &p);
            }
        }
        assert!((s.alpha - 0.25).abs() < 0.02, "alpha {}", s.alpha);
    }

    #[test]
    fn dctcp_cuts_once_per_window_and_adds_when_unmarked() {
        let p = reference_dctcp();
        let mut s = DctcpState::new(&p);
        let mtu = 1_000;
        s.on_ack(mtu, 10 * mtu, false, mtu, &p);
        let start = s.rate;
        // Every ACK of the window marked: one cut, by alpha/2 (alpha 1 at first).
        s.on_ack(2 * mtu, 20 * mtu, true, mtu, &p);
        let cut = s.rate;
        assert!((cut / start - 0.5).abs() < 0.05, "{cut} after {start}");
        for k in 3..=20 {
            s.on_ack(k * mtu, 20 * mtu, true, mtu, &p);
        }
        assert_eq!(s.rate, cut, "no second cut before the window's end");
        // Past the window: the next marked ACK cuts again.
        s.on_ack(21 * mtu, 40 * mtu, true, mtu, &p);
        assert!(s.rate < cut);
        // Unmarked windows add AI once each.
        let r = s.rate;
        s.on_ack(41 * mtu, 60 * mtu, false, mtu, &p);
        s.on_ack(61 * mtu, 80 * mtu, false, mtu, &p);
        assert!((s.rate - (r + 2.0 * p.ai_bps)).abs() < 1.0, "{} vs {}", s.rate, r);
    }
}
