//! HPCC: the rate from the INT records an ACK carries (per-hop utilisation against
//! `eta`), with its staged additive increase; and the INT records themselves (`int`),
//! encoded as the HPCC simulator encodes a hop.

use xirang_fabric::config::HpccParams;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
