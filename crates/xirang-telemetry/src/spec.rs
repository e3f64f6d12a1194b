//! What a counter's raw value means: its unit, the scale to the base unit, its width
//! (which decides how it wraps) and whether it is a counter or a gauge.
//! Facts: docs/reference/linux-rdma-sysfs.md §1.2 (PMA counters, data in 4-byte words),
//! §1.3 (mlx5 hw_counters: Q-counters are 32-bit and wrap, congestion and PPCNT counters
//! 64-bit; `lifespan` is a cache time in ms), §2.1 (mlx5 `ethtool -S`: pause durations in
//! µs); SAI `sai_port_stat_t` / `sai_queue_stat_t` for switch counters.

use serde::Serialize;

/// Unit of a counter's base value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bytes.
    Bytes,
    /// Packets or frames.
    Packets,
    /// Events (errors, CNPs, link downs, ...).
    Events,
    /// Seconds.
    Seconds,
    /// Bytes per second (link rates).
    BytesPerSecond,
    /// PCIe lanes.
    Lanes,
    /// PCIe transfer rate, GT/s.
    GigatransfersPerSecond,
}

/// How many bits a counter has: a 32-bit counter wraps after 2^32 - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Width {
    /// 32 bits.
    Bits32,
    /// 64 bits.
    Bits64,
}

impl Width {
    /// The counter's modulus, 2^bits.
    pub fn modulus(self) -> u128 {
        match self {
            Width::Bits32 => 1u128 << 32,
            Width::Bits64 => 1u128 << 64,
        }
    }
}

/// Counter (monotonic, may wrap or reset) or gauge (a level).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Monotonic counter.
    Counter,
    /// A level (state, rate, watermark).
    Gauge,
}

/// Meaning of a raw value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CounterSpec {
    /// Base unit after scaling.
    pub unit: Unit,
    /// Multiply the raw value by this to get the base unit (4 for `port_xmit_data`'s
    /// 4-byte words, 1e-6 for microseconds).
    pub scale: f64,
    /// Width.
    pub width: Width,
    /// Counter or gauge.
    pub kind: Kind,
}

/// PMA data counters count 4-byte words (docs/reference/linux-rdma-sysfs.md §1.2).
pub const PMA_DATA_WORD_BYTES: f64 = 4.0;
/// Bytes per second in one Mbit/s.
const BYTES_PER_S_PER_MBPS: f64 = 125_000.0;
/// Microseconds per second, for pause durations.
const US: f64 = 1e-6;
/// Milliseconds per second, for `lifespan`.
const MS: f64 = 1e-3;

/// mlx5 Q-counters: read as 32-bit values by the kernel (docs/reference/linux-rdma-sysfs.md §1.3).
const Q_COUNTERS: &[&str] = &[
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
];

fn counter(unit: Unit, scale: f64, width: Width) -> CounterSpec {
    CounterSpec {
        unit,
        scale,
        width,
        kind: Kind::Counter,
    }
}

/// The spec of a counter by its hardware name (any source: PMA `counters/`, mlx5
/// `hw_counters/`, `ethtool -S`, SAI).
pub fn spec(name: &str) -> CounterSpec {
    use Unit::*;
    use Width::*;
    match name {
        "port_xmit_data"
        | "port_rcv_data"
        | "counters_ext/port_xmit_data_64"
        | "counters_ext/port_rcv_data_64" => counter(Bytes, PMA_DATA_WORD_BYTES, Bits64),
        // Link rates as values in Mbit/s, exported in bytes/s as node_exporter does.
        "rate" | "SAI_PORT_ATTR_SPEED" => CounterSpec {
            unit: BytesPerSecond,
            scale: BYTES_PER_S_PER_MBPS,
            width: Bits64,
            kind: Kind::Gauge,
        },
        // A PCIe link's width (lanes) and speed (MT/s as values, GT/s exported).
        "current_link_width" | "max_link_width" => CounterSpec {
            unit: Lanes,
            scale: 1.0,
            width: Bits64,
            kind: Kind::Gauge,
        },
        "current_link_speed" | "max_link_speed" => CounterSpec {
            unit: GigatransfersPerSecond,
            scale: 1e-3,
            width: Bits64,
            kind: Kind::Gauge,
        },
        "lifespan" => CounterSpec {
            unit: Seconds,
            scale: MS,
            width: Bits64,
            kind: Kind::Gauge,
        },
        // The PFC watchdog's state of a queue, 0 or 1 (crate::metric::PFCWD_STORMED).
        "PFC_WD_STORMED" => CounterSpec {
            unit: Events,
            scale: 1.0,
            width: Bits64,
            kind: Kind::Gauge,
        },
        n if n.starts_with("SAI_QUEUE_STAT_WATERMARK") || n.contains("WATERMARK") => CounterSpec {
            unit: Bytes,
            scale: 1.0,
            width: Bits64,
            kind: Kind::Gauge,
        },
        n if Q_COUNTERS.contains(&n) => counter(Events, 1.0, Bits32),
        n if n.ends_with("_pause_duration") || n.ends_with("_DURATION_US") => counter(Seconds, US, Bits64),
        n if n.ends_with("_bytes") || n.ends_with("OCTETS") || n.ends_with("_BYTES") => {
            counter(Bytes, 1.0, Bits64)
        }
        n if n.contains("packets") || n.contains("PKTS") || n.ends_with("_pause") => {
            counter(Packets, 1.0, Bits64)
        }
        _ => counter(Events, 1.0, Bits64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_widths() {
        assert_eq!(spec("port_xmit_data").scale, 4.0);
        assert_eq!(spec("out_of_sequence").width, Width::Bits32);
        assert_eq!(spec("np_cnp_sent").width, Width::Bits64);
        assert_eq!(spec("rx_prio3_pause_duration").unit, Unit::Seconds);
        assert_eq!(spec("rx_prio3_pause").unit, Unit::Packets);
        assert_eq!(spec("SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US").scale, 1e-6);
        assert_eq!(spec("lifespan").kind, Kind::Gauge);
        assert_eq!(spec("symbol_error").unit, Unit::Events);
    }
}
