//! Simulated time (integer picoseconds) and link rates.

/// Simulated time or duration in picoseconds. A `u64` holds 213 days.
pub type Ps = u64;

/// Picoseconds per nanosecond.
pub const PS_PER_NS: Ps = 1_000;
/// Picoseconds per microsecond.
pub const PS_PER_US: Ps = 1_000_000;
/// Picoseconds per second.
pub const PS_PER_S: Ps = 1_000_000_000_000;

/// Fixed-point fraction bits of [`Rate`]'s picoseconds per byte.
const Q: u32 = 16;

/// A line rate with its serialization time per byte precomputed, so that the time a
/// packet occupies a link is one multiplication.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rate {
    /// Bits per second.
    pub bps: f64,
    /// Picoseconds per byte, fixed point with 16 fraction bits.
    ps_per_byte_q16: u64,
}

impl Rate {
    /// A rate in Gbit/s.
    pub fn from_gbps(gbps: f64) -> Self {
        Rate::from_bps(gbps * 1e9)
    }

    /// A rate in bit/s.
    pub fn from_bps(bps: f64) -> Self {
        let ps_per_byte = 8.0 * PS_PER_S as f64 / bps;
        Rate {
            bps,
            ps_per_byte_q16: (ps_per_byte * f64::from(1u32 << Q)).round() as u64,
        }
    }

    /// Time to put `bytes` on the wire at this rate, rounded to the nearest picosecond.
    #[inline]
    pub fn tx_time(&self, bytes: u32) -> Ps {
        (u64::from(bytes) * self.ps_per_byte_q16 + (1 << (Q - 1))) >> Q
    }
}

/// Time to send `bytes` at `bps` (for paced, non-line rates), rounded to the nearest ps.
#[inline]
pub fn tx_time_at(bytes: u32, bps: f64) -> Ps {
    (f64::from(bytes) * 8.0 * PS_PER_S as f64 / bps).round() as Ps
}

/// Microseconds (scenario units) to picoseconds.
pub fn us(us: f64) -> Ps {
    (us * PS_PER_US as f64).round() as Ps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_is_exact_at_common_rates() {
        assert_eq!(Rate::from_gbps(100.0).tx_time(1048), 83_840);
        assert_eq!(Rate::from_gbps(400.0).tx_time(4158), 83_160);
        assert_eq!(Rate::from_gbps(25.0).tx_time(64), 20_480);
        assert_eq!(tx_time_at(1000, 1e9), 8_000_000);
    }
}
