//! Small unit and value types used in scenario files.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// A count that must be at least 1 (hosts, leaves, spines, k ...). Deserializing 0 or a
/// negative number fails with "expected an integer >= 1, found N" (one beyond a `u32`
/// with "of at most 4294967295"), so the precondition
/// lives in the type and no later check can forget it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Count(u32);

impl Count {
    /// Makes a count; `None` for 0.
    pub fn new(n: u32) -> Option<Self> {
        (n >= 1).then_some(Count(n))
    }

    /// The value.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer >= 1")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                u64::try_from(v).map_or_else(|_| Err(count_error(v)), |v| self.visit_u64(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                u32::try_from(v)
                    .ok()
                    .and_then(Count::new)
                    .ok_or_else(|| count_error(v))
            }
        }
        d.deserialize_i64(V)
    }
}

/// Which side of [`Count`]'s range `v` fell off: a number too large is not said to
/// be below 1.
fn count_error<E: de::Error>(v: impl Into<i128>) -> E {
    let v = v.into();
    if v < 1 {
        E::custom(format!("expected an integer >= 1, found {v}"))
    } else {
        E::custom(format!("expected an integer of at most {}, found {v}", u32::MAX))
    }
}

/// Bits per second in one Gbit/s.
pub const BITS_PER_GBIT: f64 = 1e9;
/// Bits per byte.
pub const BITS_PER_BYTE: u64 = 8;
/// Picoseconds per nanosecond.
pub const PS_PER_NS: u64 = 1_000;
/// Picoseconds per microsecond.
pub const PS_PER_US: u64 = 1_000_000;
/// Picoseconds per second.
pub const PS_PER_S: u64 = 1_000_000_000_000;

/// Microseconds (as written in scenario files) to whole picoseconds.
pub fn us_to_ps(us: f64) -> u64 {
    (us * PS_PER_US as f64).round() as u64
}
