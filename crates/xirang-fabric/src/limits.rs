//! The range of every number a scenario gives that has no natural bound of its own, and
//! the checks that hold values to them. docs/limits.md lists them all with their reasons.
//!
//! The simulator converts times to integer picoseconds and multiplies sizes, rates and
//! counts together; these bounds keep every such product inside a `u64` and every run
//! finite, so a typo (`1e300`, an extra few zeros) is an error with its key path rather
//! than a wrapped value, a saturated one, or a run that never ends.

use std::fmt;

use crate::diag::{Diagnostics, KeyPath};

/// A number as a message shows what the user wrote: plainly, or with an exponent when
/// it is huge or tiny (`1e300`, not three hundred digits).
#[derive(Debug, Clone, Copy)]
pub struct Num(pub f64);

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0.abs();
        if a.is_finite() && (a >= 1e9 || (a > 0.0 && a < 1e-4)) {
            write!(f, "{:e}", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Most candidates one tune may try: every candidate costs several simulations, so ten
/// thousand is days of work on a small machine; more is a typo.
pub const MAX_BUDGET: u32 = 10_000;
/// Most run seeds per candidate (search or held out): each is one more simulation of
/// every candidate measured on it.
pub const MAX_SEEDS: u32 = 1_000;
/// Most a straggler's GPUs may be slowed by (`stragglers[].factor`): a thousandfold is a
/// stalled GPU, far past any throttling.
pub const MAX_STRAGGLER_FACTOR: f64 = 1000.0;

/// Largest fabric a generator builds: a typo such as `k = 800` must be an error, not an
/// attempt to allocate a hundred million hosts. A million NIC ports covers the largest GPU
/// clusters described publicly (around 100k GPUs) with room to spare.
pub const MAX_GENERATED_NICS: u64 = 1_000_000;
/// Largest number of GPUs or NICs in one generated host.
pub const MAX_DEVICES_PER_HOST: u32 = 64;

/// Fastest link rate accepted, Gbit/s. The fastest Ethernet ports being standardised run
/// at 1.6 Tbit/s (IEEE 802.3dj); ten times that leaves room for what comes next while a
/// typo (an extra few zeros) still fails here instead of sizing a switch by it.
pub const MAX_LINK_RATE_GBPS: f64 = 16_000.0;

/// Slowest link rate accepted, Gbit/s: 1 Mbit/s, the slowest Ethernet PHY ever
/// standardised (1BASE5 StarLAN, IEEE 802.3e; docs/limits.md). A slower "rate" is not a
/// link but a typo or a unit slip: at 1e-300 Gbit/s a byte's serialization time is beyond
/// any `u64` of picoseconds and saturated into a link that behaved as if unchanged. At
/// 1 Mbit/s a 1 TiB transfer takes 8.8e18 ps, still inside a `u64`.
pub const MIN_LINK_RATE_GBPS: f64 = 0.001;

/// Whether `v` Gbit/s is a rate a link can run at.
pub fn link_rate_ok(v: f64) -> bool {
    v.is_finite() && (MIN_LINK_RATE_GBPS..=MAX_LINK_RATE_GBPS).contains(&v)
}

/// What [`link_rate_ok`] accepts, as an error message says it.
pub fn link_rate_expected() -> String {
    format!("expected a rate of {MIN_LINK_RATE_GBPS}..={MAX_LINK_RATE_GBPS} Gbit/s (1 Mbit/s to 16 Tbit/s)")
}

/// A link or NIC rate in Gbit/s, within [`MIN_LINK_RATE_GBPS`]..=[`MAX_LINK_RATE_GBPS`].
pub fn check_link_rate_gbps(v: f64, at: &KeyPath, d: &mut Diagnostics) -> bool {
    if link_rate_ok(v) {
        true
    } else {
        d.error(at, format!("{}, found {}", link_rate_expected(), Num(v)));
        false
    }
}

/// Most ports in one bond: a RoCE LAG spans the ports of one card, at most 4 on
/// ConnectX-7 (docs/reference/nic-aggregation.md §2).
pub const MAX_BOND_PORTS: u32 = 4;

/// Latest simulated time a scenario may name, and longest duration: one hour. A `u64` of
/// picoseconds holds 213 days, so sums of a few such times (a start plus a duration plus
/// a delay) stay far from wrapping; and a packet-level run of even one simulated second
/// at cluster scale takes hours, so an hour is no real limit.
pub const MAX_SIM_TIME_US: f64 = 3.6e9;

/// Longest link propagation delay: 10 ms, about 2,000 km of fibre at the 1.98e8 m/s
/// propagation speed of docs/reference/congestion-control.md's headroom formula (PFC
/// headroom section). Data-centre links are metres to kilometres (nanoseconds to
/// microseconds); this admits long-haul links and refuses a delay of `u64::MAX`, which
/// wraps when converted to picoseconds.
pub const MAX_LINK_DELAY_NS: u64 = 10_000_000;

/// Largest single transfer: a flow, a collective's buffer, a message size. 1 TiB is 64
/// times the 16 GiB nccl-tests sweeps usually end at, and a million such transfers
/// (the most NICs a generated fabric has, each sending one) still sum to less than a
/// `u64` of bytes in the conservation ledger.
pub const MAX_TRANSFER_BYTES: u64 = 1 << 40;

/// Largest buffer, threshold or memory size (switch buffer, ECN thresholds, PFC headroom,
/// registered regions): 1 TiB, far above the largest switch buffers (tens of MB) and
/// host memories, so that products of sizes and port counts stay in a `u64`.
pub const MAX_BUFFER_BYTES: u64 = 1 << 40;

/// Most back-to-back repetitions of one collective. nccl-tests runs 20 by default
/// (`-n`); 100,000 leaves room for long steady-state runs.
pub const MAX_ITERATIONS: u32 = 100_000;

/// Most requests one inference workload may generate (clients x rate x duration). The
/// simulator creates every request and its response up front; a million requests is
/// about two million flows, a few hundred MB.
pub const MAX_INFERENCE_REQUESTS: f64 = 1e6;

/// Shortest counter sampling interval: 0.1 µs, about one MTU-sized packet's
/// serialization at the common rates (a 1,048-byte frame takes 83.84 ns at 100 Gbit/s,
/// a 4,158-byte frame 83.16 ns at 400 Gbit/s): a finer interval records nothing new and
/// multiplies the time series. An interval that rounds to 0 ps would never advance.
pub const MIN_SAMPLE_INTERVAL_US: f64 = 0.1;

/// `expected a time 0..=MAX µs` with the key path, for start times and delays.
pub fn check_time_us(v: f64, at: &KeyPath, d: &mut Diagnostics) -> bool {
    if v.is_finite() && (0.0..=MAX_SIM_TIME_US).contains(&v) {
        true
    } else {
        d.error(
            at,
            format!(
                "expected a time 0..={MAX_SIM_TIME_US:e} µs (one hour), found {}",
                Num(v)
            ),
        );
        false
    }
}

/// Shortest duration: one picosecond, the simulator's clock tick. A shorter period
/// rounds to no time at all (`1e-300` µs once made a workload that lasted 0 ps).
pub const MIN_PERIOD_US: f64 = 1e-6;

/// `expected a duration of 1 ps..=one hour`, for intervals and durations.
pub fn check_period_us(v: f64, at: &KeyPath, d: &mut Diagnostics) -> bool {
    if v.is_finite() && (MIN_PERIOD_US..=MAX_SIM_TIME_US).contains(&v) {
        true
    } else {
        d.error(
            at,
            format!(
                "expected a duration of {MIN_PERIOD_US:e}..={MAX_SIM_TIME_US:e} µs (1 ps, the simulator's tick, to one hour), found {}",
                Num(v)
            ),
        );
        false
    }
}

/// The units a duration on the command line may take, with their length in seconds.
/// The unit is a suffix, so that `1e3us` keeps its exponent; the longer suffixes come
/// first (`ms` before `s`, `us` before `s`).
const DURATION_UNITS: [(&str, f64); 8] = [
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3_600.0),
    ("d", 86_400.0),
];

/// Reads a duration with its unit (`800ns`, `20us`, `500ms`, `10s`, `5m`, `2h`, `30d`)
/// as seconds. Every duration flag of every command reads through this one grammar, and
/// the unit is required: a bare number meant microseconds to one command and seconds to
/// another, so it is refused with the units spelled out.
pub fn parse_duration_s(text: &str) -> Result<f64, String> {
    let s = text.trim();
    let expected = "expected a duration with its unit, like 800ns, 20us, 500ms, 10s, 5m, 2h or 30d";
    let Some((num, scale)) = DURATION_UNITS
        .iter()
        .find_map(|(unit, scale)| s.strip_suffix(unit).map(|n| (n, *scale)))
    else {
        return Err(if s.parse::<f64>().is_ok() {
            format!("{expected}; `{s}` has no unit")
        } else {
            format!("{expected}, found `{s}`")
        });
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{expected}, found `{s}`"))?;
    let secs = v * scale;
    // An infinite duration passes: each caller holds the value to its own range and
    // says what that range is.
    if secs.is_nan() || secs < 0.0 {
        return Err(format!("expected a duration of 0 or more, found `{s}`"));
    }
    Ok(secs)
}

/// Shortest wall-clock span accepted: the smallest unit written (an interval that rounds
/// to nothing would make the agent sample without pause).
pub const MIN_WALL_DURATION_S: f64 = 1e-3;
/// Longest: ten years, more than any retention or look-back needs, far inside what a
/// `Duration` and the history's millisecond timestamps hold.
pub const MAX_WALL_DURATION_S: f64 = 10.0 * 365.0 * 86_400.0;

/// A span of wall-clock time (`500ms`, `10s`, `5m`, `2h`, `30d`; the unit is required):
/// the monitor's interval and retentions, the look-backs of `calibrate` and `diagnose`.
pub fn wall_duration(text: &str) -> Result<std::time::Duration, String> {
    let secs = parse_duration_s(text)?;
    if !(MIN_WALL_DURATION_S..=MAX_WALL_DURATION_S).contains(&secs) {
        return Err(format!(
            "`{}`: expected a duration from 1ms to {} days",
            text.trim(),
            MAX_WALL_DURATION_S / 86_400.0
        ));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// A sampling interval, as the scenario's `[run]` or `--sample` gives it.
pub fn sample_interval_us(v: f64) -> Result<(), String> {
    if v.is_finite() && (MIN_SAMPLE_INTERVAL_US..=MAX_SIM_TIME_US).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "expected a sampling interval of {MIN_SAMPLE_INTERVAL_US}..={MAX_SIM_TIME_US:e} µs, found {}",
            Num(v)
        ))
    }
}

/// An end time, as the scenario's `[run]` or `--until` gives it.
pub fn end_time_us(v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 && v <= MAX_SIM_TIME_US {
        Ok(())
    } else {
        Err(format!(
            "expected an end time above 0 and at most {MAX_SIM_TIME_US:e} µs (one hour), found {}",
            Num(v)
        ))
    }
}

/// A link delay in nanoseconds.
pub fn check_delay_ns(v: u64, at: &KeyPath, d: &mut Diagnostics) -> bool {
    if v <= MAX_LINK_DELAY_NS {
        true
    } else {
        d.error(
            at,
            format!("expected a propagation delay of at most {MAX_LINK_DELAY_NS} ns (10 ms, 2,000 km of fibre), found {v}"),
        );
        false
    }
}

/// A transfer size: at least one byte, at most [`MAX_TRANSFER_BYTES`].
pub fn check_transfer_bytes(v: u64, at: &KeyPath, d: &mut Diagnostics) -> bool {
    if (1..=MAX_TRANSFER_BYTES).contains(&v) {
        true
    } else {
        d.error(
            at,
            format!("expected a size of 1..={MAX_TRANSFER_BYTES} bytes (1 TiB), found {v}"),
        );
        false
    }
}

/// A buffer or memory size of at most [`MAX_BUFFER_BYTES`].
pub fn check_buffer_bytes(v: u64, at: &KeyPath, d: &mut Diagnostics) -> bool {
    if v <= MAX_BUFFER_BYTES {
        true
    } else {
        d.error(
            at,
            format!("expected at most {MAX_BUFFER_BYTES} bytes (1 TiB), found {v}"),
        );
        false
    }
}

/// A rate in Mbit/s, as congestion-control parameters give it: `0..=` the fastest link.
pub fn check_rate_mbps(v: f64, positive: bool, at: &KeyPath, d: &mut Diagnostics) -> bool {
    let max = MAX_LINK_RATE_GBPS * 1e3;
    let min = MIN_LINK_RATE_GBPS * 1e3;
    // A positive rate (a floor, a step) is a rate a link can run at; 0 where allowed
    // means "none" (e.g. `rate_to_set_on_first_cnp_mbps = 0`: keep the current rate).
    let low_ok = if positive { v >= min } else { v == 0.0 || v >= min };
    if v.is_finite() && low_ok && v <= max {
        true
    } else {
        let low = if positive {
            format!("of at least {min}")
        } else {
            format!("of 0 or at least {min}")
        };
        d.error(
            at,
            format!(
                "expected a rate {low} and at most {max} Mbit/s (the fastest link), found {}",
                Num(v)
            ),
        );
        false
    }
}

/// Experts one GPU may hold (DeepSeek-V3 has 256 routed experts; 4,096 leaves room for
/// finer models on one GPU).
pub const MAX_EXPERTS_PER_GPU: u64 = 4096;

/// Tokens a GPU routes per MoE layer (DeepEP's normal benchmark uses 4,096; a prefill
/// chunk of 65,536 tokens is far beyond today's).
pub const MAX_MOE_TOKENS: u64 = 65_536;

/// A model's hidden size (DeepSeek-V3: 7,168; the largest published dense models stay
/// below 32,768).
pub const MAX_HIDDEN: u64 = 1 << 20;

/// Layers of a model (DeepSeek-V3: 61; Llama-3-405B: 126).
pub const MAX_MOE_LAYERS: u64 = 1024;

/// Key/value heads of an attention layer (Llama-3-70B: 8; MHA models have up to 128).
pub const MAX_KV_HEADS: u64 = 1024;

/// Elements of an attention head or latent vector (128 and 512 in today's models).
pub const MAX_HEAD_DIM: u64 = 65_536;

/// KV bytes of one token over every layer, given directly (Llama-3-70B: 327,680).
pub const MAX_KV_BYTES_PER_TOKEN: u64 = 1 << 30;

/// Experts a token is routed to (DeepSeek-V3: 8; 64 is far beyond published routers).
pub const MAX_TOP_K: u64 = 64;

/// QPs per NIC pair of a KV transfer: the bound `transport.qps_per_connection` has.
pub const MAX_KV_QPS: u64 = 128;

/// A KV transfer's slice (Mooncake: 64 KiB; a gibibyte is one slice per request).
pub const MAX_SLICE_BYTES: u64 = 1 << 30;

/// The steepest Zipf law of expert popularity (at 10 one expert takes ~all tokens).
pub const MAX_ZIPF_EXPONENT: f64 = 10.0;

/// Flows a generated workload may make before the run (each is a few hundred bytes of
/// state: 4 M is about a gigabyte).
pub const MAX_GENERATED_FLOWS: u64 = 4_000_000;

/// Prompt tokens of one request (Mooncake's traces reach 131,072; 16 M is beyond any
/// context window).
pub const MAX_PROMPT_TOKENS: u64 = 1 << 24;

#[cfg(test)]
mod tests {
    use super::parse_duration_s;

    #[test]
    fn one_duration_grammar_with_a_required_unit() {
        let near = |text: &str, secs: f64| {
            let got = parse_duration_s(text).unwrap();
            assert!((got - secs).abs() <= secs * 1e-12, "{text}: {got}");
        };
        near("800ns", 8e-7);
        near("1e3us", 1e-3);
        near("20µs", 2e-5);
        assert_eq!(parse_duration_s("500ms"), Ok(0.5));
        assert_eq!(parse_duration_s(" 10s "), Ok(10.0));
        assert_eq!(parse_duration_s("5m"), Ok(300.0));
        assert_eq!(parse_duration_s("2h"), Ok(7_200.0));
        assert_eq!(parse_duration_s("30d"), Ok(2_592_000.0));
        let e = parse_duration_s("3000").unwrap_err();
        assert!(e.ends_with("`3000` has no unit"), "{e}");
        let e = parse_duration_s("10 parsecs").unwrap_err();
        assert!(e.ends_with("found `10 parsecs`"), "{e}");
        assert!(parse_duration_s("-1s").is_err());
        assert!(parse_duration_s("NaNs").is_err());
        assert_eq!(parse_duration_s("1e400s"), Ok(f64::INFINITY));
    }

    #[test]
    fn wall_durations_run_from_a_millisecond_to_ten_years() {
        use super::wall_duration;
        assert_eq!(wall_duration("1ms"), Ok(std::time::Duration::from_millis(1)));
        assert_eq!(
            wall_duration("30d"),
            Ok(std::time::Duration::from_secs(2_592_000))
        );
        for bad in ["0s", "500us", "3651d", "1e400s"] {
            let e = wall_duration(bad).unwrap_err();
            assert!(
                e.contains("expected a duration from 1ms to 3650 days"),
                "{bad}: {e}"
            );
        }
        assert!(wall_duration("10").unwrap_err().contains("has no unit"));
    }

    use super::*;

    #[test]
    fn the_bounds_keep_picosecond_sums_inside_a_u64() {
        let hour_ps = (MAX_SIM_TIME_US * 1e6) as u64;
        let delay_ps = MAX_LINK_DELAY_NS * 1_000;
        // A start, a duration, a service time, and a thousand-hop path of the longest links.
        assert!(
            hour_ps
                .checked_mul(3)
                .and_then(|x| x.checked_add(delay_ps * 1_000))
                .is_some()
        );
        // A million of the largest transfers fit the byte ledger.
        assert!(MAX_TRANSFER_BYTES.checked_mul(MAX_GENERATED_NICS).is_some());
    }
}
