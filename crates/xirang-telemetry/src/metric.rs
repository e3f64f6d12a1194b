//! Prometheus metric names and labels for counters.
//!
//! Where node_exporter's infiniband collector exports a counter, the metric is its
//! `node_infiniband_*` name with its `device` and `port` labels and its scaling (data
//! counters in bytes, `lifespan` in seconds), so dashboards built for node_exporter work
//! unchanged (names as in prometheus/node_exporter `collector/infiniband_linux.go`).
//! Everything else is `xirang_*`: per-priority NIC counters carry a `priority` and a
//! `direction` label, switch counters `switch`/`port`(/`queue`).

use serde::Serialize;

use crate::Entity;
use crate::spec::{CounterSpec, Kind, spec};

/// A metric sample's identity and how to get its value from the raw counter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    /// Full metric name, with `_total` for counters.
    pub name: String,
    /// Label pairs, in exposition order.
    pub labels: Vec<(&'static str, String)>,
    /// Counter or gauge.
    pub kind: Kind,
    /// Multiply the raw value by this.
    pub scale: f64,
    /// HELP text.
    pub help: &'static str,
}

/// sysfs PMA `counters/` names → node_exporter metric suffix and help.
const PMA: &[(&str, &str, &str)] = &[
    (
        "excessive_buffer_overrun_errors",
        "excessive_buffer_overrun_errors_total",
        "Number of times that OverrunErrors consecutive flow control update periods occurred, each having at least one overrun error.",
    ),
    (
        "link_downed",
        "link_downed_total",
        "Number of times the link failed to recover from an error state and went down",
    ),
    (
        "link_error_recovery",
        "link_error_recovery_total",
        "Number of times the link successfully recovered from an error state",
    ),
    (
        "local_link_integrity_errors",
        "local_link_integrity_errors_total",
        "Number of times that the count of local physical errors exceeded the threshold specified by LocalPhyErrors.",
    ),
    (
        "multicast_rcv_packets",
        "multicast_packets_received_total",
        "Number of multicast packets received (including errors)",
    ),
    (
        "multicast_xmit_packets",
        "multicast_packets_transmitted_total",
        "Number of multicast packets transmitted (including errors)",
    ),
    (
        "port_rcv_constraint_errors",
        "port_constraint_errors_received_total",
        "Number of packets received on the switch physical port that are discarded",
    ),
    (
        "port_xmit_constraint_errors",
        "port_constraint_errors_transmitted_total",
        "Number of packets not transmitted from the switch physical port",
    ),
    (
        "port_rcv_data",
        "port_data_received_bytes_total",
        "Number of data octets received on all links",
    ),
    (
        "port_xmit_data",
        "port_data_transmitted_bytes_total",
        "Number of data octets transmitted on all links",
    ),
    (
        "port_rcv_discards",
        "port_discards_received_total",
        "Number of inbound packets discarded by the port because the port is down or congested",
    ),
    (
        "port_xmit_discards",
        "port_discards_transmitted_total",
        "Number of outbound packets discarded by the port because the port is down or congested",
    ),
    (
        "port_rcv_errors",
        "port_errors_received_total",
        "Number of packets containing an error that were received on this port",
    ),
    (
        "port_rcv_packets",
        "port_packets_received_total",
        "Number of packets received on all VLs by this port (including errors)",
    ),
    (
        "port_xmit_packets",
        "port_packets_transmitted_total",
        "Number of packets transmitted on all VLs from this port (including errors)",
    ),
    (
        "port_xmit_wait",
        "port_transmit_wait_total",
        "Number of ticks during which the port had data to transmit but no data was sent during the entire tick",
    ),
    (
        "unicast_rcv_packets",
        "unicast_packets_received_total",
        "Number of unicast packets received (including errors)",
    ),
    (
        "unicast_xmit_packets",
        "unicast_packets_transmitted_total",
        "Number of unicast packets transmitted (including errors)",
    ),
    (
        "port_rcv_remote_physical_errors",
        "port_receive_remote_physical_errors_total",
        "Number of packets marked with the EBP (End of Bad Packet) delimiter received on the port.",
    ),
    (
        "port_rcv_switch_relay_errors",
        "port_receive_switch_relay_errors_total",
        "Number of packets that could not be forwarded by the switch.",
    ),
    (
        "symbol_error",
        "symbol_error_total",
        "Number of minor link errors detected on one or more physical lanes.",
    ),
    (
        "VL15_dropped",
        "vl15_dropped_total",
        "Number of incoming VL15 packets dropped due to resource limitations.",
    ),
];

/// mlx5 `hw_counters/` names → node_exporter metric suffix and help.
const HW: &[(&str, &str, &str)] = &[
    (
        "duplicate_request",
        "duplicate_requests_packets_total",
        "The number of received packets. A duplicate request is a request that had been previously executed.",
    ),
    (
        "implied_nak_seq_err",
        "implied_nak_seq_errors_total",
        "The number of times the requester decided an ACK with a PSN larger than the expected PSN for an RDMA read or response.",
    ),
    (
        "local_ack_timeout_err",
        "local_ack_timeout_errors_total",
        "The number of times QP's ack timer expired for RC, XRC, DCT QPs at the sender side.",
    ),
    (
        "np_cnp_sent",
        "np_cnp_packets_sent_total",
        "The number of CNP packets sent by the Notification Point when it noticed congestion experienced in the RoCEv2 IP header (ECN bits).",
    ),
    (
        "np_ecn_marked_roce_packets",
        "np_ecn_marked_roce_packets_received_total",
        "The number of RoCEv2 packets received by the notification point which were marked for experiencing the congestion.",
    ),
    (
        "out_of_buffer",
        "out_of_buffer_drops_total",
        "The number of drops occurred due to lack of WQE for the associated QPs.",
    ),
    (
        "out_of_sequence",
        "out_of_sequence_packets_received_total",
        "The number of out of sequence packets received.",
    ),
    (
        "packet_seq_err",
        "packet_sequence_errors_total",
        "The number of received NAK sequence error packets.",
    ),
    (
        "req_cqe_error",
        "req_cqes_errors_total",
        "The number of times requester detected CQEs completed with errors.",
    ),
    (
        "req_cqe_flush_error",
        "req_cqes_flush_errors_total",
        "The number of times requester detected CQEs completed with flushed errors.",
    ),
    (
        "req_remote_access_errors",
        "req_remote_access_errors_total",
        "The number of times requester detected remote access errors.",
    ),
    (
        "req_remote_invalid_request",
        "req_remote_invalid_request_errors_total",
        "The number of times requester detected remote invalid request errors.",
    ),
    (
        "resp_cqe_error",
        "resp_cqes_errors_total",
        "The number of times responder detected CQEs completed with errors.",
    ),
    (
        "resp_cqe_flush_error",
        "resp_cqes_flush_errors_total",
        "The number of times responder detected CQEs completed with flushed errors.",
    ),
    (
        "resp_local_length_error",
        "resp_local_length_errors_total",
        "The number of times responder detected local length errors.",
    ),
    (
        "resp_remote_access_errors",
        "resp_remote_access_errors_total",
        "The number of times responder detected remote access errors.",
    ),
    (
        "rnr_nak_retry_err",
        "rnr_nak_retry_packets_received_total",
        "The number of received RNR NAK packets.",
    ),
    (
        "roce_adp_retrans",
        "roce_adp_retransmits_total",
        "The number of adaptive retransmissions for RoCE traffic.",
    ),
    (
        "roce_adp_retrans_to",
        "roce_adp_retransmits_timeout_total",
        "The number of times RoCE traffic reached timeout due to adaptive retransmission.",
    ),
    (
        "roce_slow_restart",
        "roce_slow_restart_used_total",
        "The number of times RoCE slow restart was used.",
    ),
    (
        "roce_slow_restart_cnps",
        "roce_slow_restart_cnps_total",
        "The number of times RoCE slow restart generated CNP packets.",
    ),
    (
        "roce_slow_restart_trans",
        "roce_slow_restart_total",
        "The number of times RoCE slow restart changed state to slow restart.",
    ),
    (
        "rp_cnp_handled",
        "rp_cnp_packets_handled_total",
        "The number of CNP packets handled by the Reaction Point HCA to throttle the transmission rate.",
    ),
    (
        "rp_cnp_ignored",
        "rp_cnp_ignored_packets_received_total",
        "The number of CNP packets received and ignored by the Reaction Point HCA.",
    ),
    (
        "rx_atomic_requests",
        "rx_atomic_requests_total",
        "The number of received ATOMIC request for the associated QPs.",
    ),
    (
        "rx_dct_connect",
        "rx_dct_connect_requests_total",
        "The number of received connection requests for the associated DCTs.",
    ),
    (
        "rx_read_requests",
        "rx_read_requests_total",
        "The number of received READ requests for the associated QPs.",
    ),
    (
        "rx_write_requests",
        "rx_write_requests_total",
        "The number of received WRITE requests for the associated QPs.",
    ),
    (
        "rx_icrc_encapsulated",
        "rx_icrc_encapsulated_errors_total",
        "The number of RoCE packets with ICRC errors.",
    ),
];

/// Legacy PMA counters (`counters_ext/`) carry this prefix in their name: their files
/// are named apart from `counters/`' (`port_xmit_data_64`), but the prefix keeps them
/// apart from any driver counter of the same name.
pub const COUNTERS_EXT_PREFIX: &str = "counters_ext/";

/// sysfs `counters_ext/` names → node_exporter `legacy_*` metric suffix and help
/// (prometheus/node_exporter `collector/infiniband_linux.go`; the transmitted-packets
/// help says "received" there too, kept so the series are the same).
const LEGACY: &[(&str, &str, &str)] = &[
    (
        "port_rcv_data_64",
        "legacy_data_received_bytes_total",
        "Number of data octets received on all links",
    ),
    (
        "port_xmit_data_64",
        "legacy_data_transmitted_bytes_total",
        "Number of data octets transmitted on all links",
    ),
    (
        "port_multicast_rcv_packets",
        "legacy_multicast_packets_received_total",
        "Number of multicast packets received",
    ),
    (
        "port_multicast_xmit_packets",
        "legacy_multicast_packets_transmitted_total",
        "Number of multicast packets transmitted",
    ),
    (
        "port_rcv_packets_64",
        "legacy_packets_received_total",
        "Number of data packets received on all links",
    ),
    (
        "port_xmit_packets_64",
        "legacy_packets_transmitted_total",
        "Number of data packets received on all links",
    ),
    (
        "port_unicast_rcv_packets",
        "legacy_unicast_packets_received_total",
        "Number of unicast packets received",
    ),
    (
        "port_unicast_xmit_packets",
        "legacy_unicast_packets_transmitted_total",
        "Number of unicast packets transmitted",
    ),
];

/// Counters of a netdev's `/sys/class/net/IF/statistics/` carry this prefix in their
/// name, so they do not collide with the driver's `ethtool -S` counters.
pub const NETDEV_STAT_PREFIX: &str = "statistics/";

/// A NIC port's link rate (sysfs `rate`) as a value: Mbit/s.
pub const LINK_RATE: &str = "rate";
/// A switch port's speed (SAI_PORT_ATTR_SPEED, SONiC PORT `speed`): Mbit/s.
pub const SWITCH_PORT_SPEED: &str = "SAI_PORT_ATTR_SPEED";

/// `current_link_width` → (`current`, `width`): a PCIe link value as sysfs names it.
pub fn pcie_link_value(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "current_link_width" => Some(("current", "width")),
        "max_link_width" => Some(("max", "width")),
        "current_link_speed" => Some(("current", "speed")),
        "max_link_speed" => Some(("max", "speed")),
        _ => None,
    }
}

/// Where a counter without a node_exporter name comes from, for its help text.
#[derive(Clone, Copy)]
enum Origin {
    /// An RDMA port's driver counter (`hw_counters/`) or PMA counter node_exporter lacks.
    Rdma,
    /// A Linux interface statistic (`/sys/class/net/IF/statistics`).
    Netdev,
    /// An mlx5 `ethtool -S` counter (kernel mlx5/counters.rst).
    Ethtool,
}

/// The help of a SAI port or queue statistic, with its unit.
fn sai_help(what: &str, unit: crate::spec::Unit) -> &'static str {
    use crate::spec::Unit::*;
    match (what, unit) {
        ("port", Bytes) => "SAI port statistic, in bytes.",
        ("port", Packets) => "SAI port statistic, in packets.",
        ("port", Seconds) => "SAI port statistic, in seconds.",
        ("port", _) => "SAI port statistic, in events (occurrences).",
        (_, Bytes) => "SAI queue statistic, in bytes.",
        (_, Packets) => "SAI queue statistic, in packets.",
        (_, Seconds) => "SAI queue statistic, in seconds.",
        (_, _) => "SAI queue statistic, in events (occurrences).",
    }
}

/// The help of a counter named after the hardware, with its unit (every exported metric
/// carries its unit in its name or its help).
fn generic_help(origin: Origin, unit: crate::spec::Unit) -> &'static str {
    use crate::spec::Unit::*;
    match (origin, unit) {
        (Origin::Rdma, Bytes) => {
            "RDMA port counter as the driver names it (sysfs hw_counters or counters), in bytes."
        }
        (Origin::Rdma, Packets) => {
            "RDMA port counter as the driver names it (sysfs hw_counters or counters), in packets."
        }
        (Origin::Rdma, Seconds) => {
            "RDMA port counter as the driver names it (sysfs hw_counters or counters), in seconds."
        }
        (Origin::Rdma, _) => {
            "RDMA port counter as the driver names it (sysfs hw_counters or counters), in events (occurrences)."
        }
        (Origin::Netdev, Bytes) => "Linux interface statistic (/sys/class/net/IF/statistics), in bytes.",
        (Origin::Netdev, Packets) => "Linux interface statistic (/sys/class/net/IF/statistics), in packets.",
        (Origin::Netdev, _) => {
            "Linux interface statistic (/sys/class/net/IF/statistics), in events (occurrences)."
        }
        (Origin::Ethtool, Bytes) => "mlx5 ethtool -S counter (kernel mlx5/counters.rst), in bytes.",
        (Origin::Ethtool, Packets) => "mlx5 ethtool -S counter (kernel mlx5/counters.rst), in packets.",
        (Origin::Ethtool, Seconds) => "mlx5 ethtool -S counter (kernel mlx5/counters.rst), in seconds.",
        (Origin::Ethtool, _) => {
            "mlx5 ethtool -S counter (kernel mlx5/counters.rst), in events (occurrences)."
        }
    }
}

/// node_exporter's help for its `lifespan_seconds` gauge.
const LIFESPAN_HELP: &str = "The maximum period in ms which defines the aging of the counter reads. Two consecutive reads within this period might return the same values.";

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// `rx_prio3_pause_duration` → (`rx`, 3, `pause_duration`).
fn prio_counter(name: &str) -> Option<(&str, u8, &str)> {
    let (dir, rest) = name.split_once("_prio")?;
    if dir != "rx" && dir != "tx" {
        return None;
    }
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    let prio: u8 = rest.get(..digits)?.parse().ok()?;
    let what = rest.get(digits..)?.strip_prefix('_')?;
    Some((dir, prio, what))
}

/// The metric for counter `name` of `entity`. With `host_label`, a `host` label is added
/// to host entities (for a replay of many simulated hosts; a live agent leaves the host
/// to Prometheus's `instance` label, as node_exporter does).
pub fn metric_for(entity: &Entity, name: &str, host_label: bool) -> Metric {
    let sp = spec(name);
    match entity {
        Entity::NicPort {
            host: h,
            device,
            port,
        } => {
            let mut labels = vec![("device", device.clone()), ("port", port.to_string())];
            add_host_label(&mut labels, h, host_label);
            nic_port_metric(name, labels, &sp)
        }
        Entity::Netdev { host: h, ifname } => {
            let mut labels = vec![("device", ifname.clone())];
            add_host_label(&mut labels, h, host_label);
            netdev_metric(name, labels, &sp)
        }
        Entity::SwitchPort { switch, port } => {
            let labels = vec![("switch", switch.clone()), ("port", port.clone())];
            switch_port_metric(name, labels, &sp)
        }
        Entity::Queue { switch, port, queue } => queue_metric(name, switch, port, *queue, &sp),
        Entity::PriorityGroup { switch, port, pg } => pg_metric(name, switch, port, *pg, &sp),
    }
}

/// The `host` label first, when host entities carry one (`host_label`).
fn add_host_label(labels: &mut Vec<(&'static str, String)>, h: &str, host_label: bool) {
    if host_label {
        labels.insert(0, ("host", h.to_string()));
    }
}

/// A NIC port's counter: its PCIe link's width and speed, its rate and lifespan under
/// node_exporter's names, the PMA and hw counters node_exporter knows, the per-priority
/// counters, else a generic RDMA counter.
fn nic_port_metric(name: &str, mut labels: Vec<(&'static str, String)>, sp: &CounterSpec) -> Metric {
    if let Some((which, what)) = pcie_link_value(name) {
        // The names the monitor gives a PCIe function's link (it labels them by
        // `pci` address; the simulator's NIC ports by device and port).
        labels.push(("which", which.to_string()));
        let (name, help) = if what == "width" {
            ("xirang_pcie_link_width", "PCIe link width in lanes.")
        } else {
            ("xirang_pcie_link_speed_gts", "PCIe link speed in GT/s.")
        };
        return Metric {
            name: name.into(),
            labels,
            kind: Kind::Gauge,
            scale: sp.scale,
            help,
        };
    }
    if name == LINK_RATE {
        // The name the monitor gives sysfs `rate` (node_exporter's).
        return Metric {
            name: "node_infiniband_rate_bytes_per_second".into(),
            labels,
            kind: Kind::Gauge,
            scale: sp.scale,
            help: "Maximum signal transfer rate",
        };
    }
    if name == "lifespan" {
        return Metric {
            name: "node_infiniband_lifespan_seconds".into(),
            labels,
            kind: Kind::Gauge,
            scale: sp.scale,
            help: LIFESPAN_HELP,
        };
    }
    if let Some((_, suffix, help)) = name
        .strip_prefix(COUNTERS_EXT_PREFIX)
        .and_then(|ext| LEGACY.iter().find(|(n, _, _)| *n == ext))
    {
        return Metric {
            name: format!("node_infiniband_{suffix}"),
            labels,
            kind: Kind::Counter,
            scale: sp.scale,
            help,
        };
    }
    if let Some((_, suffix, help)) = PMA.iter().chain(HW).find(|(n, _, _)| *n == name) {
        return Metric {
            name: format!("node_infiniband_{suffix}"),
            labels,
            kind: Kind::Counter,
            scale: sp.scale,
            help,
        };
    }
    // Per-priority counters the simulator attaches to NIC ports (mlx5 ethtool names).
    if let Some(m) = prio_metric(name, labels.clone(), sp.scale) {
        return m;
    }
    Metric {
        name: format!("xirang_infiniband_{}_total", sanitize(name)),
        labels,
        kind: sp.kind,
        scale: sp.scale,
        help: generic_help(Origin::Rdma, sp.unit),
    }
}

/// An interface's counter: its statistics, its carrier changes, the per-priority
/// counters, else a generic ethtool counter.
fn netdev_metric(name: &str, labels: Vec<(&'static str, String)>, sp: &CounterSpec) -> Metric {
    if let Some(stat) = name.strip_prefix(NETDEV_STAT_PREFIX) {
        return Metric {
            name: format!("xirang_netdev_{}_total", sanitize(stat)),
            labels,
            kind: Kind::Counter,
            scale: 1.0,
            help: generic_help(Origin::Netdev, spec(stat).unit),
        };
    }
    if name == "carrier_changes" {
        return Metric {
            name: "xirang_netdev_carrier_changes_total".into(),
            labels,
            kind: Kind::Counter,
            scale: 1.0,
            help: "Times the interface's carrier changed (/sys/class/net/IF/carrier_changes).",
        };
    }
    prio_metric(name, labels.clone(), sp.scale).unwrap_or(Metric {
        name: format!("xirang_ethtool_{}_total", sanitize(name)),
        labels,
        kind: sp.kind,
        scale: sp.scale,
        help: generic_help(Origin::Ethtool, sp.unit),
    })
}

/// A switch port's counter: its speed, its per-priority PFC counters, else a generic
/// SAI port statistic.
fn switch_port_metric(name: &str, labels: Vec<(&'static str, String)>, sp: &CounterSpec) -> Metric {
    if name == SWITCH_PORT_SPEED {
        return Metric {
            name: "xirang_switch_port_speed_bytes_per_second".into(),
            labels,
            kind: Kind::Gauge,
            scale: sp.scale,
            help: "The port's configured and operating speed.",
        };
    }
    if let Some((prio, what)) = switch_pfc_counter(name) {
        let (dir, metric, help) = match what {
            SwitchPfc::Frames(dir) => (
                dir,
                "xirang_switch_pfc_frames_total",
                "PFC frames on the priority.",
            ),
            SwitchPfc::PauseUs(dir) => (
                dir,
                "xirang_switch_pfc_pause_seconds_total",
                "Time paused by PFC on the priority.",
            ),
            SwitchPfc::On2OffRx => (
                "rx",
                "xirang_switch_pfc_pause_transitions_total",
                "PFC frames received that turned the priority from XON to XOFF (SAI ON2OFF_RX_PKTS).",
            ),
        };
        let mut labels = labels;
        labels.push(("direction", dir.to_string()));
        labels.push(("priority", prio.to_string()));
        return Metric {
            name: metric.into(),
            labels,
            kind: Kind::Counter,
            scale: sp.scale,
            help,
        };
    }
    Metric {
        name: format!(
            "xirang_switch_port_{}_total",
            sanitize(name.trim_start_matches("SAI_PORT_STAT_"))
        ),
        labels,
        kind: sp.kind,
        scale: sp.scale,
        help: sai_help("port", sp.unit),
    }
}

/// What a switch port's per-priority PFC statistic counts.
enum SwitchPfc {
    /// PFC frames, `rx` or `tx` (`SAI_PORT_STAT_PFC_3_RX_PKTS`).
    Frames(&'static str),
    /// Pause time in µs, `rx` or `tx` (`SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US`).
    PauseUs(&'static str),
    /// Received frames that turned XON into XOFF (`SAI_PORT_STAT_PFC_3_ON2OFF_RX_PKTS`).
    On2OffRx,
}

/// The priority and meaning of a per-priority SAI PFC statistic. The pause duration
/// without a unit (`..._RX_PAUSE_DURATION`, whose unit SAI's header does not state:
/// docs/reference/live-signals.md §C) is none of them and stays a generic port counter.
fn switch_pfc_counter(name: &str) -> Option<(u8, SwitchPfc)> {
    let rest = name.strip_prefix("SAI_PORT_STAT_PFC_")?;
    let (p, what) = rest.split_once('_')?;
    let prio = p.parse::<u8>().ok()?;
    let dir = |d: &str| match d {
        "RX" => Some("rx"),
        "TX" => Some("tx"),
        _ => None,
    };
    let (d, what) = what.split_once('_')?;
    match what {
        "PKTS" => Some((prio, SwitchPfc::Frames(dir(d)?))),
        "PAUSE_DURATION_US" => Some((prio, SwitchPfc::PauseUs(dir(d)?))),
        "RX_PKTS" if d == "ON2OFF" => Some((prio, SwitchPfc::On2OffRx)),
        _ => None,
    }
}

/// Prefix of the PFC watchdog's per-queue statistics in a SONiC queue's `COUNTERS` hash
/// (docs/reference/live-signals.md §C, "PFC watchdog fields").
pub const PFCWD_QUEUE_STATS_PREFIX: &str = "PFC_WD_QUEUE_STATS_";
/// The PFC watchdog's state of a queue as a number: 1 when `PFC_WD_STATUS` is `stormed`,
/// 0 when `operational` (SONiC stores the word; the monitor stores this name).
pub const PFCWD_STORMED: &str = "PFC_WD_STORMED";

/// A switch queue's statistic: the PFC watchdog's state and counts, else a SAI
/// statistic (a gauge in bytes, or a counter).
fn queue_metric(name: &str, switch: &str, port: &str, queue: u8, sp: &CounterSpec) -> Metric {
    let labels = vec![
        ("switch", switch.to_string()),
        ("port", port.to_string()),
        ("queue", queue.to_string()),
    ];
    if name == PFCWD_STORMED {
        return Metric {
            name: "xirang_switch_pfcwd_stormed".into(),
            labels,
            kind: Kind::Gauge,
            scale: 1.0,
            help: "1 while the PFC watchdog holds the queue as stormed (PFC_WD_STATUS), else 0.",
        };
    }
    if let Some(stat) = name.strip_prefix(PFCWD_QUEUE_STATS_PREFIX) {
        return Metric {
            name: format!("xirang_switch_pfcwd_{}_total", sanitize(stat)),
            labels,
            kind: Kind::Counter,
            scale: 1.0,
            help: "The PFC watchdog's count on the queue (storms detected and restored, packets passed and dropped while stormed).",
        };
    }
    sai_object_metric("queue", table_suffix(name, "SAI_QUEUE_STAT_"), labels, sp)
}

/// Prefixes of statistics a SONiC reader takes from a watermark table rather than the
/// counters hash (`USER_WATERMARKS/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES`): the table
/// becomes a word of the metric's name (`..._user_shared_watermark_bytes`).
pub const WATERMARK_TABLES: [(&str, &str); 2] = [
    ("USER_WATERMARKS/", "user_"),
    ("PERSISTENT_WATERMARKS/", "persistent_"),
];

/// A statistic's metric suffix: its SAI name without `sai_prefix`, after the word of the
/// watermark table it came from, if any.
fn table_suffix(name: &str, sai_prefix: &str) -> String {
    for (table, word) in WATERMARK_TABLES {
        if let Some(rest) = name.strip_prefix(table) {
            return format!("{word}{}", sanitize(rest.trim_start_matches(sai_prefix)));
        }
    }
    sanitize(name.trim_start_matches(sai_prefix))
}

/// An ingress priority group's SAI statistic (`SAI_INGRESS_PRIORITY_GROUP_STAT_*`): a
/// watermark gauge in bytes, or a counter.
fn pg_metric(name: &str, switch: &str, port: &str, pg: u8, sp: &CounterSpec) -> Metric {
    let labels = vec![
        ("switch", switch.to_string()),
        ("port", port.to_string()),
        ("pg", pg.to_string()),
    ];
    sai_object_metric(
        "pg",
        table_suffix(name, "SAI_INGRESS_PRIORITY_GROUP_STAT_"),
        labels,
        sp,
    )
}

/// A switch object's (`queue`, `pg`) SAI statistic: `xirang_switch_<object>_<suffix>`, a
/// gauge in bytes (a suffix already ending in `_bytes`, as watermarks do, says its unit)
/// or a counter.
fn sai_object_metric(
    object: &str,
    suffix: String,
    labels: Vec<(&'static str, String)>,
    sp: &CounterSpec,
) -> Metric {
    Metric {
        name: if sp.kind == Kind::Gauge {
            if suffix.ends_with("_bytes") {
                format!("xirang_switch_{object}_{suffix}")
            } else {
                format!("xirang_switch_{object}_{suffix}_bytes")
            }
        } else {
            format!("xirang_switch_{object}_{suffix}_total")
        },
        labels,
        kind: sp.kind,
        scale: sp.scale,
        help: sai_help(if object == "pg" { "priority group" } else { object }, sp.unit),
    }
}

fn prio_metric(name: &str, mut labels: Vec<(&'static str, String)>, scale: f64) -> Option<Metric> {
    let (dir, prio, what) = prio_counter(name)?;
    labels.push(("direction", dir.to_string()));
    labels.push(("priority", prio.to_string()));
    let (metric, help) = match what {
        "pause" => (
            "xirang_pfc_pause_frames_total",
            "PFC pause frames (rx: received from the switch, tx: sent by the NIC).",
        ),
        "pause_duration" => (
            "xirang_pfc_pause_seconds_total",
            "Time paused by PFC on the priority (mlx5 *_pause_duration, µs, as seconds).",
        ),
        "pause_transition" => (
            "xirang_pfc_pause_transitions_total",
            "XOFF to XON transitions on the priority, in events (occurrences).",
        ),
        "bytes" => ("xirang_priority_bytes_total", "Bytes on the priority."),
        "packets" => ("xirang_priority_packets_total", "Packets on the priority."),
        "discards" | "buf_discard" | "cong_discard" => (
            "xirang_priority_discards_total",
            "Packets dropped on the priority for lack of receive buffer or congestion.",
        ),
        "marked" => (
            "xirang_priority_ecn_marked_packets_total",
            "Packets the device marked with ECN on the priority.",
        ),
        _ => return None,
    };
    if matches!(what, "buf_discard" | "cong_discard") {
        labels.push(("reason", what.to_string()));
    }
    Some(Metric {
        name: metric.into(),
        labels,
        kind: Kind::Counter,
        scale,
        help,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic() -> Entity {
        "h1/mlx5_0/1".parse().unwrap()
    }

    #[test]
    fn node_exporter_names() {
        let m = metric_for(&nic(), "port_xmit_data", false);
        assert_eq!(m.name, "node_infiniband_port_data_transmitted_bytes_total");
        assert_eq!(
            m.labels,
            vec![("device", "mlx5_0".to_string()), ("port", "1".to_string())]
        );
        assert_eq!(m.scale, 4.0);
        assert_eq!(
            metric_for(&nic(), "np_cnp_sent", false).name,
            "node_infiniband_np_cnp_packets_sent_total"
        );
        assert_eq!(
            metric_for(&nic(), "VL15_dropped", false).name,
            "node_infiniband_vl15_dropped_total"
        );
        assert_eq!(
            metric_for(&nic(), "lifespan", true).labels[0],
            ("host", "h1".to_string())
        );
    }

    #[test]
    fn xirang_names() {
        let m = metric_for(&"h1/ens1np0".parse().unwrap(), "rx_prio3_pause_duration", false);
        assert_eq!(m.name, "xirang_pfc_pause_seconds_total");
        assert_eq!(m.scale, 1e-6);
        assert!(
            m.labels.contains(&("priority", "3".into())) && m.labels.contains(&("direction", "rx".into()))
        );
        assert_eq!(
            metric_for(&"h1/ens1np0".parse().unwrap(), "rx_crc_errors_phy", false).name,
            "xirang_ethtool_rx_crc_errors_phy_total"
        );
        let s = metric_for(
            &"leaf0:5".parse().unwrap(),
            "SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US",
            false,
        );
        assert_eq!(s.name, "xirang_switch_pfc_pause_seconds_total");
        assert!(s.labels.contains(&("direction", "rx".into())));
        let q = metric_for(
            &"leaf0:5/q3".parse().unwrap(),
            "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
            false,
        );
        assert_eq!(q.name, "xirang_switch_queue_wred_ecn_marked_packets_total");
    }

    #[test]
    fn sonic_names() {
        let port: Entity = "leaf0:Ethernet0".parse().unwrap();
        let t = metric_for(&port, "SAI_PORT_STAT_PFC_3_ON2OFF_RX_PKTS", false);
        assert_eq!(t.name, "xirang_switch_pfc_pause_transitions_total");
        assert!(
            t.labels.contains(&("direction", "rx".into())) && t.labels.contains(&("priority", "3".into()))
        );
        let f = metric_for(&port, "SAI_PORT_STAT_PFC_5_TX_PKTS", false);
        assert_eq!(f.name, "xirang_switch_pfc_frames_total");
        assert!(f.labels.contains(&("direction", "tx".into())));
        // A duration whose unit SAI does not state is not counted as frames.
        assert_eq!(
            metric_for(&port, "SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION", false).name,
            "xirang_switch_port_pfc_3_rx_pause_duration_total"
        );
        let q: Entity = "leaf0:Ethernet0/q3".parse().unwrap();
        let s = metric_for(&q, PFCWD_STORMED, false);
        assert_eq!(
            (s.name.as_str(), s.kind),
            ("xirang_switch_pfcwd_stormed", Kind::Gauge)
        );
        assert_eq!(
            metric_for(&q, "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED", false).name,
            "xirang_switch_pfcwd_deadlock_detected_total"
        );
        assert_eq!(
            metric_for(&q, "USER_WATERMARKS/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES", false).name,
            "xirang_switch_queue_user_shared_watermark_bytes"
        );
        assert_eq!(
            metric_for(&q, "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES", false).name,
            "xirang_switch_queue_shared_watermark_bytes"
        );
        let pg: Entity = "leaf0:Ethernet0/pg3".parse().unwrap();
        for (table, want) in [
            (
                "PERSISTENT_WATERMARKS/",
                "xirang_switch_pg_persistent_shared_watermark_bytes",
            ),
            ("USER_WATERMARKS/", "xirang_switch_pg_user_shared_watermark_bytes"),
        ] {
            let m = metric_for(
                &pg,
                &format!("{table}SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES"),
                false,
            );
            assert_eq!((m.name.as_str(), m.kind), (want, Kind::Gauge));
        }
        let w = metric_for(
            &pg,
            "SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES",
            false,
        );
        assert_eq!(
            (w.name.as_str(), w.kind),
            ("xirang_switch_pg_xoff_room_watermark_bytes", Kind::Gauge)
        );
        assert!(w.labels.contains(&("pg", "3".into())));
        assert_eq!(
            metric_for(&pg, "SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS", false).name,
            "xirang_switch_pg_dropped_packets_total"
        );
    }
}
