//! Diagnosis from counters: a telemetry window (the monitor's history, a Prometheus
//! server, or anything else with the same metric names) read through rules in the
//! hardware counter schema (docs/reference/diagnosis.md §2).
//!
//! Rules so far (the symptom table's rows 1 and 2):
//! - `LINK-ERRORS`: `symbol_error`, `link_error_recovery`, `port_rcv_errors` or
//!   `local_link_integrity_errors` rising on a NIC port: marginal optics or cable, a
//!   dirty connector, or a bad port.
//! - `LINK-FLAP`: `link_downed` rising: the link went down and came back.

use std::collections::BTreeMap;

use serde::Serialize;
use xirang_telemetry::Entity;
use xirang_telemetry::metric::metric_for;

use crate::finding::{Class, Evidence, Finding, Severity, rank};

/// One time series of a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Metric name (`node_infiniband_symbol_error_total`).
    pub metric: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// (Unix ms, value), in time order.
    pub points: Vec<(i64, f64)>,
}

impl Series {
    /// A series of `metric` with `labels` and `points` ((Unix ms, value), in time order).
    pub fn new(metric: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> Series {
        Series {
            metric: metric.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: points.to_vec(),
        }
    }
}

/// What diagnosis reads: series over a time window, and where they came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Window {
    /// `prometheus http://...`, `history FILE`.
    pub source: String,
    /// Start, Unix ms.
    pub since_ms: i64,
    /// End, Unix ms.
    pub until_ms: i64,
    /// The series.
    pub series: Vec<Series>,
    /// Times are from the start of a simulated run, not Unix time.
    pub relative: bool,
    /// The links between the entities, by their port names (from the fabric model or
    /// LLDP), when known: both ends of a link report a trained-down rate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<(String, String)>,
    /// Each port's nominal rate, Mbit/s, when known (the fabric model, the switch's
    /// configured speed); otherwise NIC ports are compared with each other.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nominal_rate_mbps: BTreeMap<String, f64>,
    /// Flows with their paths and slowdowns, when known (a simulator's output; probes):
    /// the degraded ones vote for the link they share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<crate::paths::FlowPath>,
}

/// Counters whose increase means link errors: NIC PMA counters (docs/reference/linux-rdma-sysfs.md
/// §1.2) and a switch port's SAI input errors (FCS failures on the link into it).
pub const LINK_ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "local_link_integrity_errors",
    SWITCH_IN_ERRORS,
];
/// The switch port counter of frames received with errors (SAI `sai_port_stat_t`).
pub const SWITCH_IN_ERRORS: &str = "SAI_PORT_STAT_IF_IN_ERRORS";
/// The link-down counter.
pub const LINK_DOWN_COUNTER: &str = "link_downed";
/// Frames received larger than a switch port's MTU.
pub const SWITCH_OVERSIZE: &str = "SAI_PORT_STAT_ETHER_RX_OVERSIZE_PKTS";
/// Packets a switch dropped at admission from a port.
pub const SWITCH_IN_DISCARDS: &str = "SAI_PORT_STAT_IF_IN_DISCARDS";
/// Switch queue counters the ECN rule reads.
pub const QUEUE_ECN_MARKED: &str = "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS";
/// Peak queue occupancy.
pub const QUEUE_WATERMARK: &str = "SAI_QUEUE_STAT_WATERMARK_BYTES";
/// Packets through a queue.
pub const QUEUE_PACKETS: &str = "SAI_QUEUE_STAT_PACKETS";

/// Every counter the rules read, by its hardware name: the link counters, the rate
/// levels, switch drops and queues, and the PFC frames and pause time a device sends
/// (per priority).
pub fn rule_counters() -> Vec<String> {
    let mut v: Vec<String> = LINK_ERROR_COUNTERS
        .iter()
        .chain(&[
            LINK_DOWN_COUNTER,
            SWITCH_OVERSIZE,
            SWITCH_IN_DISCARDS,
            QUEUE_ECN_MARKED,
            QUEUE_WATERMARK,
            QUEUE_PACKETS,
            xirang_telemetry::metric::LINK_RATE,
            xirang_telemetry::metric::SWITCH_PORT_SPEED,
        ])
        .map(|s| s.to_string())
        .collect();
    for c in [
        "current_link_width",
        "max_link_width",
        "current_link_speed",
        "max_link_speed",
        "port_xmit_data",
        "port_rcv_data",
        "np_ecn_marked_roce_packets",
        "SAI_PORT_STAT_IF_OUT_OCTETS",
    ] {
        v.push(c.to_string());
    }
    for p in 0..8 {
        v.push(format!("tx_prio{p}_pause_duration"));
        v.push(format!("rx_prio{p}_pause_duration"));
        v.push(format!("SAI_PORT_STAT_PFC_{p}_TX_PKTS"));
        v.push(format!("SAI_PORT_STAT_PFC_{p}_RX_PKTS"));
    }
    v
}

fn sample_entity(counter: &str) -> Entity {
    if counter.starts_with("SAI_QUEUE_") {
        Entity::Queue {
            switch: String::new(),
            port: String::new(),
            queue: 0,
        }
    } else if counter.starts_with("SAI_") {
        Entity::SwitchPort {
            switch: String::new(),
            port: String::new(),
        }
    } else {
        Entity::NicPort {
            host: String::new(),
            device: String::new(),
            port: 1,
        }
    }
}

/// The metric a counter (by its hardware name) is exported as.
pub fn metric_of(counter: &str) -> String {
    metric_for(&sample_entity(counter), counter, false).name
}

/// The metric names the rules read, as the monitor exports them (node_exporter's names
/// for NIC ports, `xirang_*` for the rest), each once.
pub fn metric_names() -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for m in rule_counters()
        .iter()
        .map(|c| metric_of(c))
        .chain(LEVEL_METRICS.iter().map(|m| m.to_string()))
    {
        if !v.contains(&m) {
            v.push(m);
        }
    }
    v
}

/// Metrics read with the counters that have no counter behind them: the monitor's verdict
/// on PCIe links, and the jobs' own collective figures from NCCL Inspector (quoted with
/// the findings about their hosts: `crate::impact`).
const LEVEL_METRICS: &[&str] = &[
    PCIE_DOWNGRADED,
    xirang_telemetry::inspector::EXEC_TIME_US,
    xirang_telemetry::inspector::BUS_BANDWIDTH_GBS,
];
/// The monitor's verdict on a PCIe link, judged by both its ends (1: degraded).
pub const PCIE_DOWNGRADED: &str = "xirang_pcie_link_downgraded";

/// Increase of a counter over its points: the sum of rises; a fall is a reset, after
/// which the new value counts (exported totals are already wrap-free).
pub fn increase(points: &[(i64, f64)]) -> f64 {
    points
        .windows(2)
        .map(|w| {
            let d = w[1].1 - w[0].1;
            if d >= 0.0 { d } else { w[1].1 }
        })
        .sum()
}

/// `host/device/port` of a NIC-port series (the host from `host`, else Prometheus's
/// `instance`, else `?`), `host/netdev` of a netdev's, or `switch:port` of a
/// switch-port or queue series.
fn port_entity(labels: &BTreeMap<String, String>) -> Option<String> {
    if let (Some(sw), Some(port)) = (labels.get("switch"), labels.get("port")) {
        return Some(format!("{sw}:{port}"));
    }
    let host_of = |labels: &BTreeMap<String, String>| {
        labels
            .get("host")
            .or_else(|| labels.get("instance"))
            .cloned()
            .unwrap_or_else(|| "?".into())
    };
    // A PCIe function of a live host (the monitor labels it by address).
    if let (Some(pci), None) = (labels.get("pci"), labels.get("device")) {
        return Some(format!("{}/{pci}", host_of(labels)));
    }
    let dev = labels.get("device")?;
    let host = labels
        .get("host")
        .or_else(|| labels.get("instance"))
        .map(String::as_str)
        .unwrap_or("?");
    // A netdev's series (`ethtool -S` pause counters) have a device and no port.
    Some(match labels.get("port") {
        Some(port) => format!("{host}/{dev}/{port}"),
        None => format!("{host}/{dev}"),
    })
}

fn show_labels(l: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = l.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", inner.join(","))
}

/// One series as the rules see it.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// `host/dev/port` or `switch:port`.
    pub entity: String,
    /// The series.
    pub series: &'a Series,
    /// Its increase over the window (counters).
    pub inc: f64,
    /// Its last value (levels).
    pub last: f64,
    /// The series as evidence: where from and what it did.
    pub evidence: Evidence,
}

impl View<'_> {
    /// A label's value.
    pub fn label(&self, k: &str) -> Option<&str> {
        self.series.labels.get(k).map(String::as_str)
    }
}

impl Window {
    /// A time as the window's evidence shows it.
    pub fn when(&self, t: i64) -> String {
        if self.relative {
            format!("t+{t} µs")
        } else {
            xirang_telemetry::time::utc(t)
        }
    }

    /// Its length, seconds (simulated windows count µs).
    pub fn seconds(&self) -> f64 {
        let span = (self.until_ms - self.since_ms).max(1) as f64;
        if self.relative { span / 1e6 } else { span / 1e3 }
    }

    /// Every series with an entity, as the rules see it.
    pub fn views(&self) -> Vec<View<'_>> {
        let mut out = Vec::new();
        for s in &self.series {
            let Some(entity) = port_entity(&s.labels) else {
                continue;
            };
            let (Some(first), Some(last)) = (s.points.first(), s.points.last()) else {
                continue;
            };
            let inc = increase(&s.points);
            let text = if inc > 0.0 {
                format!(
                    "{} → {} (+{inc}) from {} to {}",
                    first.1,
                    last.1,
                    self.when(first.0),
                    self.when(last.0)
                )
            } else {
                format!("{} at {}", last.1, self.when(last.0))
            };
            out.push(View {
                entity,
                series: s,
                inc,
                last: last.1,
                evidence: Evidence {
                    source: format!("{} {}{}", self.source, s.metric, show_labels(&s.labels)),
                    value: text,
                },
            });
        }
        out
    }
}

/// Runs the counter rules over a window.
pub fn diagnose_window(w: &Window) -> Vec<Finding> {
    let views = w.views();
    let mut out = link_rules(w, &views);
    out.extend(crate::port_rules::fabric_rules(w, &views));
    let mut balance = crate::balance::balance_rules(w, &views);
    // A NIC slowed by its own link, PCIe or pausing is that finding's, not its host's;
    // on a live host the pausing or PCIe series name the netdev or PCI function, so any
    // NIC or link finding on the host counts.
    let host_of = |e: &str| e.split_once('/').map(|(h, _)| h.to_string());
    balance.retain(|f| {
        f.rule != "HOST-BOUNCE"
            || !out.iter().any(|o| {
                o.entity == f.entity
                    || (matches!(o.class, Class::Nic | Class::Link)
                        && host_of(&o.entity).is_some()
                        && host_of(&o.entity) == host_of(&f.entity))
            })
    });
    out.extend(balance);
    crate::paths::vote(&mut out, &w.flows, &w.links);
    rank(&mut out);
    out
}

/// Link errors and flaps (the symptom table's rows 1 and 2).
fn link_rules(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    let downed = metric_of(LINK_DOWN_COUNTER);
    let error_metrics: Vec<(String, &str)> = LINK_ERROR_COUNTERS.iter().map(|c| (metric_of(c), *c)).collect();
    let oversize = metric_of(SWITCH_OVERSIZE);
    // entity -> counter -> (increase, evidence)
    let mut by_port: BTreeMap<String, BTreeMap<&'static str, (f64, Evidence)>> = BTreeMap::new();
    for v in views.iter().filter(|v| v.inc > 0.0) {
        let counter = if v.series.metric == downed {
            LINK_DOWN_COUNTER
        } else if let Some((_, c)) = error_metrics.iter().find(|(m, _)| *m == v.series.metric) {
            c
        } else {
            continue;
        };
        let mut inc = v.inc;
        if counter == SWITCH_IN_ERRORS {
            // Oversize frames are input errors too; they are the MTU rule's, not the link's.
            let too_big: f64 = views
                .iter()
                .filter(|o| o.entity == v.entity && o.series.metric == oversize)
                .map(|o| o.inc)
                .sum();
            inc -= too_big;
            if inc <= 0.0 {
                continue;
            }
        }
        by_port
            .entry(v.entity.clone())
            .or_default()
            .insert(counter, (inc, v.evidence.clone()));
    }
    let minutes = ((w.until_ms - w.since_ms) as f64 / 60_000.0).max(1.0 / 60.0);
    let mut out = Vec::new();
    for (entity, counters) in by_port {
        let on_switch = !entity.contains('/');
        let host = entity.split('/').next().unwrap_or("").to_string();
        if let Some((inc, ev)) = counters.get(LINK_DOWN_COUNTER) {
            out.push(Finding {
                rule: "LINK-FLAP",
                class: Class::Link,
                entity: entity.clone(),
                severity: Severity::High,
                cause: format!("the link went down {inc} time(s) in the window and came back"),
                confidence: 0.9,
                scope: format!("every flow through {entity}: traffic stops and is rerouted or retransmitted at each flap"),
                advice: vec![
                    "replace the cable or transceiver (flaps are the failure mode after rising symbol errors)".into(),
                    "correlate with the switch port's log for the same times (peer port reset, power)".into(),
                ],
                evidence: vec![ev.clone()],
            });
        }
        let errs: Vec<(&&str, &(f64, Evidence))> = counters
            .iter()
            .filter(|(c, _)| LINK_ERROR_COUNTERS.contains(*c))
            .collect();
        if !errs.is_empty() {
            let total: f64 = errs.iter().map(|(_, (i, _))| i).sum();
            let names: Vec<String> = errs.iter().map(|(c, (i, _))| format!("{c} +{i}")).collect();
            out.push(Finding {
                rule: "LINK-ERRORS",
                class: Class::Link,
                entity: entity.clone(),
                severity: if counters.contains_key(LINK_DOWN_COUNTER) {
                    Severity::High
                } else {
                    Severity::Medium
                },
                cause: format!(
                    "link errors are rising on {entity} ({}{}): marginal optics or cable, a dirty connector, or a bad port",
                    names.join(", "),
                    if w.relative {
                        String::new()
                    } else {
                        format!("; {:.1} per minute", total / minutes)
                    }
                ),
                confidence: 0.85,
                scope: format!(
                    "flows through {entity} on {host}: corrupted packets are dropped and retransmitted (go-back-N), so throughput falls and tail latency rises"
                ),
                advice: if on_switch {
                    vec![
                        format!("on the switch: `show interfaces counters errors` and the transceiver's DOM readings for {entity}"),
                        "reseat and clean the connector; swap the cable or transceiver; if errors stay, the sending port upstream or this port is bad".into(),
                    ]
                } else {
                    vec![
                        format!("on {host}: `ethtool -S <netdev> | grep -E 'phy|fec|lane'` for pre/post-FEC errors and a single bad lane (rx_err_lane_<l>_phy)"),
                        "reseat and clean the connector; swap the cable or transceiver; if errors stay, move to another switch port".into(),
                    ]
                },
                evidence: errs.iter().map(|(_, (_, e))| e.clone()).collect(),
            });
        }
    }
    out
}

/// A window such as the monitors export for a fleet: `hosts` hosts with `nics` NIC
/// ports each, every NIC-port series the rules read (link error counters, link downs,
/// data counters, the link rate, the PCIe link and the PFC pause time sent) sampled every
/// `interval_ms` over `minutes`; the ports listed in `faulty` gain symbol errors in the
/// second half. For the diagnosis benchmark (`xirang diagnose bench`).
pub fn synthetic_window(
    hosts: usize,
    nics: usize,
    minutes: u32,
    interval_ms: i64,
    faulty: &[(usize, usize)],
) -> Window {
    /// A 400 Gbit/s port on a Gen5 x16 link, moving a steady 10 GB per sample.
    const PORT_MBPS: f64 = 400_000.0;
    const PCIE_LANES: f64 = 16.0;
    const PCIE_MTS: f64 = 32_000.0;
    const BYTES_PER_SAMPLE: f64 = 1e10;
    let until_ms = i64::from(minutes) * 60_000;
    let n = (until_ms / interval_ms.max(1)) as usize + 1;
    let counters: Vec<&str> = LINK_ERROR_COUNTERS
        .iter()
        .copied()
        .filter(|c| !c.starts_with("SAI_"))
        .chain([
            LINK_DOWN_COUNTER,
            "port_xmit_data",
            "port_rcv_data",
            xirang_telemetry::metric::LINK_RATE,
            "current_link_width",
            "max_link_width",
            "current_link_speed",
            "max_link_speed",
            "tx_prio3_pause_duration",
            "rx_prio3_pause_duration",
            "np_ecn_marked_roce_packets",
        ])
        .collect();
    let mut series = Vec::new();
    for h in 0..hosts {
        for k in 0..nics {
            let bad = faulty.contains(&(h, k));
            let entity = Entity::NicPort {
                host: format!("h{h}"),
                device: format!("mlx5_{k}"),
                port: 1,
            };
            for c in &counters {
                let m = metric_for(&entity, c, true);
                let value = |i: usize| -> f64 {
                    match *c {
                        "symbol_error" if bad && i > n / 2 => (i - n / 2) as f64 * 3.0,
                        "port_xmit_data" | "port_rcv_data" => i as f64 * BYTES_PER_SAMPLE,
                        "rate" => PORT_MBPS * m.scale,
                        "current_link_width" | "max_link_width" => PCIE_LANES,
                        "current_link_speed" | "max_link_speed" => PCIE_MTS * m.scale,
                        _ => 0.0,
                    }
                };
                series.push(Series {
                    metric: m.name,
                    labels: m.labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
                    points: (0..n).map(|i| (i as i64 * interval_ms, value(i))).collect(),
                });
            }
        }
    }
    Window {
        source: "synthetic".into(),
        since_ms: 0,
        until_ms,
        series,
        relative: false,
        ..Window::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(metric: &str, host: &str, points: &[(i64, f64)]) -> Series {
        Series::new(
            metric,
            &[("device", "mlx5_0"), ("port", "1"), ("instance", host)],
            points,
        )
    }

    #[test]
    fn the_synthetic_fleet_window_finds_exactly_its_faulty_ports() {
        let w = synthetic_window(16, 4, 10, 10_000, &[(3, 1), (9, 0)]);
        assert_eq!(w.series.len(), 16 * 4 * 15);
        let got: Vec<String> = diagnose_window(&w).into_iter().map(|f| f.entity).collect();
        assert_eq!(got, vec!["h3/mlx5_1/1".to_string(), "h9/mlx5_0/1".to_string()]);
    }

    #[test]
    fn increase_counts_rises_and_resets() {
        assert_eq!(increase(&[(0, 5.0), (1, 7.0), (2, 7.0), (3, 10.0)]), 5.0);
        assert_eq!(increase(&[(0, 5.0), (1, 2.0), (2, 4.0)]), 4.0);
        assert_eq!(increase(&[(0, 5.0)]), 0.0);
    }

    #[test]
    fn rising_symbol_errors_are_a_link_finding_steady_ones_are_not() {
        let w = Window {
            source: "test".into(),
            relative: false,
            since_ms: 0,
            until_ms: 120_000,
            series: vec![
                series(
                    "node_infiniband_symbol_error_total",
                    "h1:9316",
                    &[(0, 10.0), (60_000, 10.0), (120_000, 70.0)],
                ),
                series(
                    "node_infiniband_symbol_error_total",
                    "h2:9316",
                    &[(0, 3.0), (120_000, 3.0)],
                ),
                series(
                    "node_infiniband_port_data_received_bytes_total",
                    "h2:9316",
                    &[(0, 0.0), (120_000, 1e9)],
                ),
            ],
            ..Window::default()
        };
        let f = diagnose_window(&w);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].entity.as_str(), f[0].class),
            ("LINK-ERRORS", "h1:9316/mlx5_0/1", Class::Link)
        );
        assert!(
            f[0].cause.contains("symbol_error +60; 30.0 per minute"),
            "{}",
            f[0].cause
        );
        assert!(
            f[0].evidence[0].value.starts_with("10 → 70 (+60)"),
            "{:?}",
            f[0].evidence
        );
    }

    #[test]
    fn a_flap_is_high_and_makes_errors_high() {
        let w = Window {
            source: "test".into(),
            relative: false,
            since_ms: 0,
            until_ms: 60_000,
            series: vec![
                series(
                    "node_infiniband_link_downed_total",
                    "h3",
                    &[(0, 1.0), (60_000, 2.0)],
                ),
                series(
                    "node_infiniband_link_error_recovery_total",
                    "h3",
                    &[(0, 0.0), (60_000, 4.0)],
                ),
            ],
            ..Window::default()
        };
        let f = diagnose_window(&w);
        let got: Vec<(&str, Severity)> = f.iter().map(|x| (x.rule, x.severity)).collect();
        assert_eq!(
            got,
            vec![("LINK-FLAP", Severity::High), ("LINK-ERRORS", Severity::High)]
        );
    }

    #[test]
    fn the_rules_read_node_exporter_names() {
        let names = metric_names();
        assert!(
            names.contains(&"node_infiniband_symbol_error_total".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"node_infiniband_link_downed_total".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"xirang_switch_port_if_in_errors_total".to_string()),
            "{names:?}"
        );
        // Each metric once, every one of them a name the monitor or node_exporter emits.
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            vec![
                "nccl_bus_bandwidth_gbs",
                "nccl_collective_exec_time_microseconds",
                "node_infiniband_link_downed_total",
                "node_infiniband_link_error_recovery_total",
                "node_infiniband_local_link_integrity_errors_total",
                "node_infiniband_np_ecn_marked_roce_packets_received_total",
                "node_infiniband_port_data_received_bytes_total",
                "node_infiniband_port_data_transmitted_bytes_total",
                "node_infiniband_port_errors_received_total",
                "node_infiniband_rate_bytes_per_second",
                "node_infiniband_symbol_error_total",
                "xirang_pcie_link_downgraded",
                "xirang_pcie_link_speed_gts",
                "xirang_pcie_link_width",
                "xirang_pfc_pause_seconds_total",
                "xirang_switch_pfc_frames_total",
                "xirang_switch_port_ether_rx_oversize_pkts_total",
                "xirang_switch_port_if_in_discards_total",
                "xirang_switch_port_if_in_errors_total",
                "xirang_switch_port_if_out_octets_total",
                "xirang_switch_port_speed_bytes_per_second",
                "xirang_switch_queue_packets_total",
                "xirang_switch_queue_watermark_bytes",
                "xirang_switch_queue_wred_ecn_marked_packets_total",
            ]
        );
    }
}
