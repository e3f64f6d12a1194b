//! Seeded random streams. Every consumer (each switch port's ECN marker, each workload)
//! gets its own stream derived from the run seed and its identity, so adding randomness
//! in one place never shifts the numbers drawn elsewhere.

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{Rng, SeedableRng};

/// What a stream is for; part of its derivation.
#[derive(Debug, Clone, Copy)]
pub enum Purpose {
    /// ECN marking at one switch egress port.
    Ecn = 1,
    /// Workload generation for one workload.
    Workload = 2,
    /// ECMP seeds and source ports.
    Ecmp = 3,
    /// Injected faults (which packets a lossy link corrupts).
    Fault = 4,
    /// The source ports of one collective connection's QPs.
    Connection = 5,
}

/// One random stream.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Stream(Xoshiro256PlusPlus);

impl Stream {
    /// The stream for `purpose` and `index` under `seed`.
    pub fn new(seed: u64, purpose: Purpose, index: u64) -> Self {
        let mixed = splitmix(splitmix(seed ^ ((purpose as u64) << 56)) ^ index);
        Stream(Xoshiro256PlusPlus::seed_from_u64(mixed))
    }

    /// A uniform integer.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform float in [0, 1).
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in [0, n).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift; the bias for n << 2^64 is negligible for simulation.
        ((u128::from(self.0.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// An exponential variate with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

/// SplitMix64 finaliser: a good 64-bit mix.
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// MurmurHash3 x86_32, the hash the HPCC ns-3 simulator's switches use for ECMP
/// (docs/hpcc-model.md §3, switch-node.cc `EcmpHash`).
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let mut k = 0u32;
    for (i, b) in tail.iter().enumerate() {
        k |= u32::from(*b) << (8 * i);
    }
    if !tail.is_empty() {
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_published_vectors() {
        // Reference values of MurmurHash3_x86_32 (SMHasher test vectors).
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514E_28B7);
        assert_eq!(murmur3_32(b"", 0xffff_ffff), 0x81F1_6F39);
        assert_eq!(murmur3_32(&[0xff, 0xff, 0xff, 0xff], 0), 0x7629_3B50);
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65, 0x87], 0), 0xF55B_516B);
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65, 0x87], 0x5082_EDEE), 0x2362_F9DE);
        assert_eq!(murmur3_32(&[0x21, 0x43, 0x65], 0), 0x7E4A_8634);
        assert_eq!(murmur3_32(&[0x21, 0x43], 0), 0xA0F7_B07A);
        assert_eq!(murmur3_32(&[0x21], 0), 0x7266_1CF4);
    }

    #[test]
    fn streams_are_independent_and_reproducible() {
        let a: Vec<u64> = (0..4)
            .map(|_| Stream::new(7, Purpose::Ecn, 3).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            Stream::new(7, Purpose::Ecn, 3).next_u64(),
            Stream::new(7, Purpose::Ecn, 4).next_u64()
        );
        assert_ne!(
            Stream::new(7, Purpose::Ecn, 3).next_u64(),
            Stream::new(8, Purpose::Ecn, 3).next_u64()
        );
    }
}
