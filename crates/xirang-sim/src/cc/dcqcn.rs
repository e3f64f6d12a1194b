//! DCQCN's reaction point (docs/reference/congestion-control.md §1): the rate cut at a
//! CNP, checked once per decrease period, and the timer and byte-counter increases with
//! their stages.

use xirang_fabric::config::DcqcnParams;

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
}
