//! Wraparound, resets, appearing and vanishing counters.

use proptest::prelude::*;
use xirang_telemetry::rate::increase;
use xirang_telemetry::{Change, RateTracker, Width};

const S: u64 = 1_000_000_000;

#[test]
fn a_32_bit_counter_wraps() {
    let mut t = RateTracker::new();
    t.begin_round();
    assert_eq!(
        t.observe(&"c", 0, u32::MAX as u64 - 99, Width::Bits32),
        Change::First
    );
    let c = t.observe(&"c", 10 * S, 100, Width::Bits32);
    assert_eq!(
        c,
        Change::Delta {
            delta: 200,
            dt_s: 10.0,
            wrapped: true
        }
    );
    assert_eq!(c.rate(), Some(20.0));
}

#[test]
fn a_64_bit_counter_wraps_at_its_own_width() {
    assert_eq!(increase(u64::MAX - 9, 5, Width::Bits64), Some((15, true)));
    // The same drop on a 32-bit counter is a reset: it was never near 2^32.
    assert_eq!(increase(u64::MAX - 9, 5, Width::Bits32), None);
}

#[test]
fn a_reset_counts_from_zero() {
    let mut t = RateTracker::new();
    t.begin_round();
    t.observe(&"c", 0, 1_000_000, Width::Bits64);
    let c = t.observe(&"c", 2 * S, 40, Width::Bits64);
    assert_eq!(
        c,
        Change::Reset {
            since_reset: 40,
            dt_s: 2.0
        }
    );
    // A 32-bit counter dropping from the bottom half is a reset, not a wrap.
    assert_eq!(increase(1000, 10, Width::Bits32), None);
}

#[test]
fn counters_appear_and_vanish() {
    let mut t = RateTracker::new();
    t.begin_round();
    t.observe(&"a", S, 1, Width::Bits64);
    t.observe(&"b", S, 1, Width::Bits64);
    assert!(t.end_round().is_empty());
    t.begin_round();
    t.observe(&"a", 2 * S, 2, Width::Bits64);
    assert_eq!(t.end_round(), vec!["b"]);
    assert_eq!(t.len(), 1);
    t.begin_round();
    // b comes back: a new first sample, no delta across its absence.
    assert_eq!(t.observe(&"b", 3 * S, 50, Width::Bits64), Change::First);
    assert_eq!(t.observe(&"a", 3 * S, 2, Width::Bits64).increase(), 0);
    assert_eq!(t.observe(&"a", 3 * S, 9, Width::Bits64), Change::Stale);
}

proptest! {
    /// Summing the increases of a counter driven by random increments (each below half its
    /// range) recovers the true total, whatever the wraps, for both widths.
    #[test]
    fn increases_sum_to_the_true_total(start in any::<u64>(), steps in proptest::collection::vec(0u64..(1 << 31), 1..200), wide in any::<bool>()) {
        let (width, m) = if wide { (Width::Bits64, u128::from(u64::MAX) + 1) } else { (Width::Bits32, 1u128 << 32) };
        let mut raw = (u128::from(start) % m) as u64;
        let mut t = RateTracker::new();
        t.begin_round();
        t.observe(&0, 0, raw, width);
        let mut total: u128 = 0;
        let mut seen: u128 = 0;
        for (i, s) in steps.iter().enumerate() {
            raw = ((u128::from(raw) + u128::from(*s)) % m) as u64;
            total += u128::from(*s);
            let c = t.observe(&0, (i as u64 + 1) * S, raw, width);
            prop_assert!(!matches!(c, Change::Reset { .. }), "{c:?}");
            seen += u128::from(c.increase());
        }
        prop_assert_eq!(seen, total);
    }
}
