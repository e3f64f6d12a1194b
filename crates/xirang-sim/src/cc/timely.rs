//! TIMELY: the rate from RTT samples against two thresholds and their gradient, with
//! hyperactive increase.

use xirang_fabric::config::TimelyParams;

use crate::time::{Ps, us};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::PS_PER_US;

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
}
