//! Counters already non-zero when the host was captured: link errors
//! (PHY-COUNTER-ERRORS, from the port's PMA counters and `ethtool -S`), RoCE transport
//! retransmissions and retry failures (TRN-RETRANS), discards (NET-DISCARDS), and a NIC
//! that pauses its switch while its receive side overflows (NET-HOST-DRAIN). One capture
//! has no rate: it must not say whether a counter still rises (`xirang monitor` and the
//! diagnosis do), nor repeat a discard the drain finding already explains.

use super::{Finding, Layer, Severity, devices, ev, port_name};
use crate::cluster::Cluster;

/// PMA counters that count link errors (docs/reference/linux-rdma-sysfs.md §1.2).
const LINK_ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
];
/// mlx5 `hw_counters` that count transport-level loss and retries
/// (docs/reference/linux-rdma-sysfs.md §1.3: out_of_seq and retrans groups).
const RETRANS_COUNTERS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
];

/// Counters that count discards (docs/reference/linux-rdma-sysfs.md §1.2 and §1.3).
const DISCARD_COUNTERS: &[&str] = &["port_xmit_discards", "out_of_buffer"];

pub(super) fn counters(c: &Cluster, out: &mut Vec<Finding>) {
    for (h, d) in devices(c) {
        for p in &d.ports {
            let dir = format!("sys/class/infiniband/{}/ports/{}", d.name, p.port);
            let errs: Vec<(&str, u64)> = LINK_ERROR_COUNTERS
                .iter()
                .filter_map(|n| p.counters.get(*n).filter(|v| **v > 0).map(|v| (*n, *v)))
                .collect();
            if !errs.is_empty() {
                out.push(Finding {
                    rule: "PHY-COUNTER-ERRORS",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: port_name(h, d, p),
                    message: format!("link error counters are non-zero: {}", errs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")),
                    evidence: errs.iter().map(|(n, v)| ev(h, &format!("{dir}/counters/{n}"), v)).collect(),
                    fix: "watch whether they rise (`xirang monitor`); rising symbol errors or link_downed mean a bad cable or transceiver: clean or replace it".into(),
                });
            }
            let retrans: Vec<(&str, u64)> = RETRANS_COUNTERS
                .iter()
                .filter_map(|n| p.hw_counters.get(*n).filter(|v| **v > 0).map(|v| (*n, *v)))
                .collect();
            if !retrans.is_empty() {
                out.push(Finding {
                    rule: "TRN-RETRANS",
                    severity: Severity::Warning,
                    layer: Layer::Transport,
                    entity: port_name(h, d, p),
                    message: format!(
                        "the RoCE transport has already lost packets or timed out: {} (on a lossless fabric these stay at zero)",
                        retrans.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")
                    ),
                    evidence: retrans.iter().map(|(n, v)| ev(h, &format!("{dir}/hw_counters/{n}"), v)).collect(),
                    fix: "check PFC on the RoCE priority end to end (NET-PFC-MISMATCH), switch discards and link errors on the path; rnr_* means receivers run out of posted buffers".into(),
                });
            }
            let mut disc: Vec<(String, &str, u64)> = DISCARD_COUNTERS
                .iter()
                .filter_map(|n| {
                    p.counters
                        .get(*n)
                        .map(|v| (format!("{dir}/counters/{n}"), *n, *v))
                        .or_else(|| {
                            p.hw_counters
                                .get(*n)
                                .map(|v| (format!("{dir}/hw_counters/{n}"), *n, *v))
                        })
                })
                .filter(|x| x.2 > 0)
                .collect();
            disc.sort();
            if !disc.is_empty() {
                out.push(Finding {
                    rule: "NET-DISCARDS",
                    severity: Severity::Warning,
                    layer: Layer::Network,
                    entity: port_name(h, d, p),
                    message: format!("discards are non-zero: {}", disc.iter().map(|(_, n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")),
                    evidence: disc.iter().map(|(path, _, v)| ev(h, path, v)).collect(),
                    fix: "out_of_buffer: the application posts receive buffers too slowly (raise the receive queue depth); port_xmit_discards: congestion or a down link, check PFC on the RoCE priority".into(),
                });
            }
        }
    }
}

/// `ethtool -S` counters, when captured: physical errors and discards per interface
/// (docs/reference/linux-rdma-sysfs.md §2.1).
pub(super) fn ethtool_counters(c: &Cluster, out: &mut Vec<Finding>) {
    for h in &c.hosts {
        for (ifname, stats) in &h.tools.ethtool {
            let e = stats.phy_errors();
            let path = format!("commands/ethtool-S-{ifname}.txt");
            let pick = |v: &[(&'static str, Option<u64>)]| -> Vec<(&'static str, u64)> {
                v.iter()
                    .filter_map(|(n, x)| x.filter(|x| *x > 0).map(|x| (*n, x)))
                    .collect()
            };
            let phy = pick(&[
                ("rx_crc_errors_phy", e.rx_crc_errors_phy),
                ("rx_symbol_err_phy", e.rx_symbol_err_phy),
                ("rx_pcs_symbol_err_phy", e.rx_pcs_symbol_err_phy),
                ("link_down_events_phy", e.link_down_events_phy),
                ("rx_oversize_pkts_phy", e.rx_oversize_pkts_phy),
                ("tx_pause_storm_error_events", e.tx_pause_storm_error_events),
            ]);
            if !phy.is_empty() {
                let oversize = phy.iter().any(|(n, _)| *n == "rx_oversize_pkts_phy");
                out.push(Finding {
                    rule: "PHY-COUNTER-ERRORS",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: format!("{}/{ifname}", h.hostname),
                    message: format!(
                        "NIC error counters are non-zero: {}{}",
                        phy.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", "),
                        if oversize { " (oversize frames: the peer sends a larger MTU than this port accepts)" } else { "" }
                    ),
                    evidence: phy.iter().map(|(n, v)| ev(h, &format!("{path} {n}"), v)).collect(),
                    fix: "watch whether they rise (`xirang monitor`); CRC/symbol errors and link-down events point at the cable or transceiver, oversize frames at an MTU mismatch".into(),
                });
            }
            // Pause frames this NIC sent (link-level and per priority) beside a receive
            // side that overflows: the NIC pauses its switch because the host does not take
            // the data off it fast enough (docs/reference/linux-rdma-sysfs.md §2.1:
            // rx_out_of_buffer is a receive queue with no posted buffer, rx_discards_phy the
            // port's own buffer).
            let sent_pause: Vec<(String, u64)> = std::iter::once("tx_pause_ctrl_phy".to_string())
                .chain((0..8).map(|p| format!("tx_prio{p}_pause")))
                .filter_map(|n| stats.get(&n).filter(|v| *v > 0).map(|v| (n, v)))
                .collect();
            let overflow = pick(&[
                ("rx_out_of_buffer", e.rx_out_of_buffer),
                ("rx_discards_phy", e.rx_discards_phy),
            ]);
            let drain = !sent_pause.is_empty() && !overflow.is_empty();
            if drain {
                out.push(Finding {
                    rule: "NET-HOST-DRAIN",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: format!("{}/{ifname}", h.hostname),
                    message: format!(
                        "the NIC sends pause frames ({}) while its receive side overflows ({}): the host cannot drain what arrives (PCIe, memory or a slow consumer), and its pauses spread the congestion into the fabric",
                        sent_pause.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", "),
                        overflow.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")
                    ),
                    evidence: sent_pause
                        .iter()
                        .map(|(n, v)| ev(h, &format!("{path} {n}"), v))
                        .chain(overflow.iter().map(|(n, v)| ev(h, &format!("{path} {n}"), v)))
                        .collect(),
                    fix: "check the NIC's PCIe link (width and speed, `lspci -vvv` LnkSta) and its NUMA placement, the receiving processes' memory bandwidth and CPU, and that consumers post receive buffers ahead of the traffic; watch rx_out_of_buffer and tx_pause_ctrl_phy fall after the fix".into(),
                });
            }
            // Discards the drain finding already explains are not repeated.
            let disc = pick(&[
                ("rx_discards_phy", e.rx_discards_phy.filter(|_| !drain)),
                ("tx_discards_phy", e.tx_discards_phy),
                ("rx_out_of_buffer", e.rx_out_of_buffer.filter(|_| !drain)),
            ]);
            if !disc.is_empty() {
                out.push(Finding {
                    rule: "NET-DISCARDS",
                    severity: Severity::Warning,
                    layer: Layer::Network,
                    entity: format!("{}/{ifname}", h.hostname),
                    message: format!("NIC discard counters are non-zero: {}", disc.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")),
                    evidence: disc.iter().map(|(n, v)| ev(h, &format!("{path} {n}"), v)).collect(),
                    fix: "rx_discards_phy: the NIC ran out of receive buffer (is PFC on for this traffic?); rx_out_of_buffer: the host posts receive buffers too slowly".into(),
                });
            }
        }
    }
}
