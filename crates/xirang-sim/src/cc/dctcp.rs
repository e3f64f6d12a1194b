//! DCTCP as a rate: the marked fraction `alpha` from ECN echoes, a cut once per window
//! and an additive increase when unmarked.

use xirang_fabric::config::DctcpParams;

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

#[cfg(test)]
mod tests {
    use super::*;

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
