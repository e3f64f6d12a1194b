//! NCCL Inspector's Prometheus series (docs/reference/live-signals.md §A): its metric
//! names, labels, message-size buckets and `algo_proto` values, owned here for the replay
//! that serves a simulated run under them and for the readers (calibration, rollout
//! gates) that take a training job's collective time from them.
//!
//! Facts (NCCL 2.30's `plugins/profiler/inspector/inspector_prom.cc`): the metrics carry
//! no `# TYPE` (Prometheus takes them as untyped) and no rank label; each sample is the
//! mean over the ops a GPU finished in the last dump interval, per (communicator name,
//! ranks, nodes, collective, message-size bucket, algorithm and protocol), so a bucket
//! with no op in an interval has no sample (a series vanishes rather than drops to 0).

/// Mean execution time of a bucket's collectives in the interval, µs.
pub const EXEC_TIME_US: &str = "nccl_collective_exec_time_microseconds";
/// Geometric mean of a bucket's bus bandwidths in the interval, GB/s.
pub const BUS_BANDWIDTH_GBS: &str = "nccl_bus_bandwidth_gbs";
/// The label `version` of the bucketed format (profiler interface 5, format minor 1).
pub const FORMAT_VERSION: &str = "v5.1";
/// What the Inspector writes for a label it has no value for.
pub const UNKNOWN: &str = "unknown";

/// The labels of a collective's series, in the Inspector's order.
pub const LABELS: [&str; 10] = [
    "version",
    "slurm_job_id",
    "node",
    "gpu",
    "comm_name",
    "n_nodes",
    "nranks",
    "collective",
    "message_size",
    "algo_proto",
];

/// Units of the message-size bucket, each 1024 times the one before.
const SIZE_UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
/// The scale between two size units.
const SIZE_STEP: u64 = 1024;

/// The message-size bucket of `bytes`: scaled by 1024 until below 1024 (or terabytes),
/// `"<floor>-<floor+1><unit>"`, `"0B"` for zero (`5242880` → `"5-6MB"`).
pub fn message_size_bucket(bytes: u64) -> String {
    if bytes == 0 {
        return "0B".into();
    }
    let mut v = bytes;
    let mut unit = 0;
    while v >= SIZE_STEP && unit + 1 < SIZE_UNITS.len() {
        v /= SIZE_STEP;
        unit += 1;
    }
    format!("{v}-{}{}", v + 1, SIZE_UNITS[unit])
}

/// The byte range `[lo, hi)` of a message-size bucket label, `None` if it is not one.
pub fn bucket_range(label: &str) -> Option<(u64, u64)> {
    if label == "0B" {
        return Some((0, 1));
    }
    let unit_at = label.find(|c: char| c.is_ascii_alphabetic())?;
    let (range, unit) = label.split_at(unit_at);
    let power = SIZE_UNITS.iter().position(|u| u.eq_ignore_ascii_case(unit))?;
    let scale = SIZE_STEP.checked_pow(power as u32)?;
    let (lo, hi) = range.split_once('-')?;
    let (lo, hi): (u64, u64) = (lo.parse().ok()?, hi.parse().ok()?);
    (hi == lo + 1).then_some(())?;
    Some((lo.checked_mul(scale)?, hi.checked_mul(scale)?))
}

/// The Inspector's name of a collective from Xirang's (`all_reduce` → `AllReduce`).
pub fn collective_name(op: &str) -> String {
    op.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `algo_proto` as NCCL's core strings spell it (`RING_SIMPLE`, `TREE_LL128`); labels
/// read from a file are compared through this too, since the Inspector's README shows
/// another spelling (`Ring_ll`) than its code (unconfirmed at run time).
pub fn algo_proto(algorithm: &str, protocol: &str) -> String {
    format!(
        "{}_{}",
        algorithm.to_ascii_uppercase(),
        protocol.to_ascii_uppercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_as_the_inspector_writes_them() {
        for (bytes, want) in [
            (0, "0B"),
            (1, "1-2B"),
            (1023, "1023-1024B"),
            (1024, "1-2KB"),
            (5_242_880, "5-6MB"),
            (8_388_608, "8-9MB"),
            (536_870_912, "512-513MB"),
            (4 << 30, "4-5GB"),
            (u64::MAX, "16777215-16777216TB"),
        ] {
            assert_eq!(message_size_bucket(bytes), want, "{bytes}");
        }
        assert_eq!(bucket_range("5-6MB"), Some((5 << 20, 6 << 20)));
        assert_eq!(bucket_range("0B"), Some((0, 1)));
        for bad in ["", "5MB", "5-7MB", "x-yMB", "5-6PB", "-1-0B"] {
            assert_eq!(bucket_range(bad), None, "{bad}");
        }
        assert!(
            bucket_range(&message_size_bucket(5_242_880))
                .is_some_and(|(lo, hi)| (lo..hi).contains(&5_242_880))
        );
    }

    #[test]
    fn names_as_nccl_spells_them() {
        assert_eq!(collective_name("all_reduce"), "AllReduce");
        assert_eq!(collective_name("reduce_scatter"), "ReduceScatter");
        assert_eq!(collective_name("broadcast"), "Broadcast");
        assert_eq!(algo_proto("ring", "Simple"), "RING_SIMPLE");
        assert_eq!(algo_proto("Ring", "ll"), algo_proto("RING", "LL"));
    }
}
