//! One sampling round: read every counter through the host reader (or take them from a
//! replayed simulation), turn raw values into monotonic metric values (wraps and resets
//! folded in by `xirang_telemetry::rate::change_since`), and derive the health signals.

use std::collections::BTreeMap;

use serde::Serialize;
use xirang_host::parse::ethtool::EthtoolStats;
use xirang_host::sysfs::{CounterRead, ReadCache, read_counters_with};
use xirang_host::tree::{FnvMap, Tree};
use xirang_telemetry::metric::{COUNTERS_EXT_PREFIX, Metric, metric_for};
use xirang_telemetry::rate::change_since;
use xirang_telemetry::spec::{CounterSpec, Kind, spec};
use xirang_telemetry::{Change, CounterValue, Entity};

/// One exported value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Name, labels, type and help; shared, since the same counter's metric is exported
    /// every round.
    pub metric: std::sync::Arc<Metric>,
    /// Value in the metric's unit.
    pub value: f64,
}

/// What one round produced.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Round {
    /// Sample time, ns since the Unix epoch (or since the start of a replayed run).
    pub ts_ns: u64,
    /// Counters, gauges and derived signals.
    pub points: Vec<Point>,
    /// Problems met in this round (unreadable or garbled files), with their paths.
    pub problems: Vec<String>,
    /// Counters that vanished since the previous round.
    pub vanished: Vec<String>,
    /// Counters that went down without wrapping (device or driver reset).
    pub resets: Vec<String>,
    /// Seconds the round took.
    pub duration_s: f64,
}

impl Round {
    /// The value of the point with this name whose labels include all of `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.points
            .iter()
            .find(|p| {
                p.metric.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| p.metric.labels.iter().any(|(pk, pv)| pk == k && pv == v))
            })
            .map(|p| p.value)
    }
}

/// What a [`Feed`] gives for one round.
#[derive(Debug, Default)]
pub struct FeedRound {
    /// Raw counters.
    pub values: Vec<CounterValue>,
    /// Ready points (gauges, info series).
    pub points: Vec<Point>,
    /// What went wrong reading them (each counted in `xirang_collector_errors_total`).
    pub problems: Vec<String>,
}

impl From<(Vec<CounterValue>, Vec<Point>)> for FeedRound {
    fn from((values, points): (Vec<CounterValue>, Vec<Point>)) -> Self {
        FeedRound {
            values,
            points,
            problems: Vec::new(),
        }
    }
}

/// A function of the round's time, ns, giving raw counters and ready points.
pub type Feed = Box<dyn FnMut(u64) -> FeedRound + Send>;

/// Where counters come from.
pub enum Source {
    /// A host tree (a live `/` or a fixture), read with the host reader; `ethtool -S`
    /// from `commands/ethtool-S-IF.txt` when the tree has it, else by running `ethtool`
    /// when `run_ethtool` is set (live hosts).
    Host {
        /// The tree.
        tree: Box<dyn Tree + Send + Sync>,
        /// Run `ethtool -S` for interfaces with no captured output.
        run_ethtool: bool,
    },
    /// Values are handed in by the caller ([`Collector::fold`]), as a replay does.
    External,
    /// Values come from a function of the round's time, ns (a live replay of a
    /// simulated run, [`crate::replay::Live`]; switches' COUNTERS_DB, [`crate::sonic`]).
    Feed(Feed),
}

/// Prefix of netdev `statistics/` counters in the counter schema.
pub use xirang_telemetry::metric::NETDEV_STAT_PREFIX;

/// Counter values grouped by entity: (entity, [(counter name, raw value)]).
pub type Groups = Vec<(String, Vec<(String, u64)>)>;

/// Rounds a vanished counter's state is kept, in case it comes back.
const TOMBSTONE_ROUNDS: u64 = 10;

/// What the collector remembers of one counter.
struct Slot {
    metric: std::sync::Arc<Metric>,
    spec: CounterSpec,
    /// A derived signal reads this counter's increases.
    signal: bool,
    last: Option<(u64, u64)>,
    total: u64,
    round: u64,
}

/// Counters the derived signals read.
fn is_signal_input(name: &str) -> bool {
    LINK_ERRORS.contains(&name)
        || RETRANS.contains(&name)
        || DISCARDS.contains(&name)
        || PHY_ERRORS.contains(&name)
        || matches!(
            name,
            "np_ecn_marked_roce_packets"
                | "port_rcv_packets"
                | "np_cnp_sent"
                | "rp_cnp_handled"
                | "link_downed"
                | "carrier_changes"
                | "link_down_events_phy"
                | "rx_discards_phy"
                | "tx_discards_phy"
                | "rx_out_of_buffer"
        )
        || name.ends_with("_pause_duration")
        || (name.starts_with("SAI_PORT_STAT_PFC_") && name.ends_with("_RX_PAUSE_DURATION_US"))
}

/// Accumulated state across rounds.
pub struct Collector {
    source: Source,
    host_label: Option<String>,
    /// Per entity and counter: its metric, spec, last sample and exported total.
    slots: FnvMap<String, FnvMap<String, Slot>>,
    /// The host tree's structure, kept between rounds.
    cache: ReadCache,
    /// Problems met since start (`xirang_collector_errors_total`).
    pub errors_total: u64,
    /// Rounds done.
    pub rounds: u64,
    /// Also read every PCI function as node_exporter's pcidevice collector does and publish
    /// its `node_pcidevice_*` series (off by default, as in node_exporter: a host has
    /// hundreds of functions, each a dozen files a round).
    pub pcidevice: bool,
    /// Other sources read every round beside the first (NCCL Inspector's files, a job's
    /// NCCL RAS events, on a host the agent also samples).
    pub extra: Vec<Feed>,
}

/// Counters whose increase counts as link errors (docs/reference/linux-rdma-sysfs.md §1.2).
const LINK_ERRORS: &[&str] = &[
    "symbol_error",
    "port_rcv_errors",
    "link_error_recovery",
    "local_link_integrity_errors",
];
/// Transport retransmission and timeout counters (docs/reference/linux-rdma-sysfs.md §1.3).
const RETRANS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
];
/// Discard counters (NIC port and receive queues).
const DISCARDS: &[&str] = &["port_xmit_discards", "out_of_buffer"];
/// ethtool physical error counters (docs/reference/linux-rdma-sysfs.md §2.1).
const PHY_ERRORS: &[&str] = &["rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy"];

/// Per-entity increases in one round, for the derived signals.
#[derive(Default)]
struct Deltas {
    by: BTreeMap<String, BTreeMap<String, u64>>,
    dt_s: BTreeMap<String, f64>,
}

impl Deltas {
    fn add(&mut self, entity: &str, name: &str, c: &Change) {
        if let Change::Delta { dt_s, .. } | Change::Reset { dt_s, .. } = c {
            *self
                .by
                .entry(entity.to_string())
                .or_default()
                .entry(name.to_string())
                .or_default() += c.increase();
            self.dt_s.insert(entity.to_string(), *dt_s);
        }
    }

    fn sum(&self, entity: &str, names: &[&str]) -> Option<u64> {
        let m = self.by.get(entity)?;
        let v: Vec<u64> = names.iter().filter_map(|n| m.get(*n).copied()).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }
}

impl Collector {
    /// A collector over `source`. `host_label` adds a `host` label to every host metric
    /// (for replays of many hosts).
    pub fn new(source: Source, host_label: Option<String>) -> Self {
        Collector {
            source,
            host_label,
            slots: FnvMap::default(),
            cache: ReadCache::new(),
            errors_total: 0,
            rounds: 0,
            pcidevice: false,
            extra: Vec::new(),
        }
    }

    /// Samples a tree other than the collector's own at `ts_ns` (one snapshot of a
    /// recorded series), with the same reading and folding as a live round.
    pub fn round_from(&mut self, tree: &dyn Tree, ts_ns: u64) -> Round {
        let started = std::time::Instant::now();
        let mut cache = ReadCache::off();
        let (values, mut gauges, mut problems) = host_values(
            tree,
            &mut cache,
            false,
            self.host_label.as_deref().unwrap_or("local"),
        );
        if self.pcidevice {
            pcidevice_points(tree, &mut gauges, &mut problems);
        }
        let mut round = self.fold_groups(ts_ns, &values, gauges, problems);
        round.duration_s = started.elapsed().as_secs_f64();
        round
    }

    /// Samples the source at `ts_ns`.
    pub fn round(&mut self, ts_ns: u64) -> Round {
        let started = std::time::Instant::now();
        let mut extra = FeedRound::default();
        for f in &mut self.extra {
            let r = f(ts_ns);
            extra.values.extend(r.values);
            extra.points.extend(r.points);
            extra.problems.extend(r.problems);
        }
        if let Source::Feed(feed) = &mut self.source {
            let mut r = feed(ts_ns);
            r.values.extend(extra.values);
            r.points.extend(extra.points);
            r.problems.extend(extra.problems);
            let mut round = self.fold(ts_ns, &r.values, r.points, r.problems);
            round.duration_s = started.elapsed().as_secs_f64();
            return round;
        }
        let (mut values, mut gauges, mut problems) = match &self.source {
            Source::Host { tree, run_ethtool } => {
                let mut v = host_values(
                    tree.as_ref(),
                    &mut self.cache,
                    *run_ethtool,
                    self.host_label.as_deref().unwrap_or("local"),
                );
                if self.pcidevice {
                    pcidevice_points(tree.as_ref(), &mut v.1, &mut v.2);
                }
                tree.end_round();
                v
            }
            Source::External | Source::Feed(_) => (Vec::new(), Vec::new(), Vec::new()),
        };
        for v in extra.values {
            match values.iter_mut().find(|(e, _)| *e == v.entity) {
                Some((_, c)) => c.push((v.name, v.value)),
                None => values.push((v.entity, vec![(v.name, v.value)])),
            }
        }
        gauges.extend(extra.points);
        problems.extend(extra.problems);
        let mut round = self.fold_groups(ts_ns, &values, gauges, problems);
        round.duration_s = started.elapsed().as_secs_f64();
        round
    }

    /// Folds one set of raw counter values (and ready gauges) into a round: used by
    /// replays of simulated counters.
    pub fn fold(
        &mut self,
        ts_ns: u64,
        values: &[CounterValue],
        gauges: Vec<Point>,
        problems: Vec<String>,
    ) -> Round {
        let mut groups: Vec<(String, Vec<(String, u64)>)> = Vec::new();
        let mut at: FnvMap<&str, usize> = FnvMap::default();
        for cv in values {
            let i = *at.entry(cv.entity.as_str()).or_insert_with(|| {
                groups.push((cv.entity.clone(), Vec::new()));
                groups.len() - 1
            });
            groups[i].1.push((cv.name.clone(), cv.value));
        }
        self.fold_groups(ts_ns, &groups, gauges, problems)
    }

    /// Folds counter values grouped by entity (the entity written once per group, not
    /// once per counter) into a round.
    pub fn fold_groups(
        &mut self,
        ts_ns: u64,
        groups: &[(String, Vec<(String, u64)>)],
        mut gauges: Vec<Point>,
        problems: Vec<String>,
    ) -> Round {
        self.rounds += 1;
        self.errors_total += problems.len() as u64;
        let mut round = Round {
            ts_ns,
            problems,
            ..Round::default()
        };
        let mut deltas = Deltas::default();
        let with_host = self.host_label.is_some();
        let round_no = self.rounds;
        for (entity_s, counters) in groups {
            // Parsing the entity and naming the metric happen once per counter, not once
            // per round: a round touches about a thousand counters.
            if !self.slots.contains_key(entity_s.as_str()) {
                self.slots.insert(entity_s.clone(), FnvMap::default());
            }
            let Some(by_name) = self.slots.get_mut(entity_s.as_str()) else {
                continue;
            };
            for (name, value) in counters {
                let value = *value;
                let slot = match by_name.get_mut(name.as_str()) {
                    Some(s) => s,
                    None => {
                        let Ok(entity) = entity_s.parse::<Entity>() else {
                            self.errors_total += 1;
                            round.problems.push(format!("{}: not an entity", entity_s));
                            continue;
                        };
                        by_name.entry(name.clone()).or_insert(Slot {
                            metric: std::sync::Arc::new(metric_for(&entity, name, with_host)),
                            spec: spec(name),
                            signal: is_signal_input(name),
                            last: None,
                            total: 0,
                            round: round_no,
                        })
                    }
                };
                slot.round = round_no;
                if slot.spec.kind == Kind::Gauge {
                    round.points.push(Point {
                        value: value as f64 * slot.metric.scale,
                        metric: slot.metric.clone(),
                    });
                    continue;
                }
                let change = change_since(slot.last, ts_ns, value, slot.spec.width);
                if change != Change::Stale {
                    slot.last = Some((ts_ns, value));
                }
                // The exported counter is the sum of increases since the agent started (the
                // first raw value included), so it never goes down across wraps and resets.
                match change {
                    Change::First => slot.total = value,
                    Change::Reset { .. } => {
                        round.resets.push(format!("{} {}", entity_s, name));
                        slot.total = slot.total.saturating_add(change.increase());
                    }
                    _ => slot.total = slot.total.saturating_add(change.increase()),
                }
                if slot.signal {
                    deltas.add(entity_s, name, &change);
                }
                round.points.push(Point {
                    value: slot.total as f64 * slot.metric.scale,
                    metric: slot.metric.clone(),
                });
            }
        }
        // Counters not seen this round vanish from the output (no stale values). Their
        // last raw value and total are kept for a while, so a counter that misses a
        // round (a transient read error, a firmware reset) continues its total instead
        // of restarting from its raw value, which after a wrap would go backwards.
        for (entity, by_name) in self.slots.iter_mut() {
            by_name.retain(|name, slot| {
                if slot.round + 1 == round_no {
                    round.vanished.push(format!("{entity} {name}"));
                }
                round_no.saturating_sub(slot.round) <= TOMBSTONE_ROUNDS
            });
        }
        self.slots.retain(|_, m| !m.is_empty());
        round.vanished.sort();
        round.points.append(&mut gauges);
        signals(&deltas, with_host, &mut round.points);
        round.points.push(Point {
            metric: std::sync::Arc::new(Metric {
                name: "xirang_collector_errors_total".into(),
                labels: vec![],
                kind: Kind::Counter,
                scale: 1.0,
                help: "Files the collector could not read or understand, since it started.",
            }),
            value: self.errors_total as f64,
        });
        round
    }
}

/// A gauge point.
pub fn gauge(name: &str, labels: Vec<(&'static str, String)>, value: f64, help: &'static str) -> Point {
    Point {
        metric: std::sync::Arc::new(Metric {
            name: name.to_string(),
            labels,
            kind: Kind::Gauge,
            scale: 1.0,
            help,
        }),
        value,
    }
}

/// The `power_state` values node_exporter publishes one series each for.
const POWER_STATES: [&str; 7] = ["D0", "D1", "D2", "D3hot", "D3cold", "unknown", "error"];

/// node_exporter's pcidevice series for every PCI function (names, labels, values and
/// help as its collector publishes them: docs/node-exporter-parity.md), and
/// `xirang_pcie_link_downgraded` for the functions the host reader does not keep (it
/// keeps NICs, GPUs and the bridges above them), so a downgraded link behind any bridge
/// is flagged.
fn pcidevice_points(tree: &dyn Tree, gauges: &mut Vec<Point>, problems: &mut Vec<String>) {
    use xirang_host::pcidevice;
    let (devices, read_problems) = pcidevice::read(tree);
    problems.extend(
        read_problems
            .into_iter()
            .map(|p| format!("{}: {}", p.path, p.message)),
    );
    let judged: std::collections::BTreeSet<String> = gauges
        .iter()
        .filter(|g| g.metric.name == "xirang_pcie_link_downgraded")
        .filter_map(|g| g.metric.labels.first().map(|l| l.1.clone()))
        .collect();
    for d in &devices {
        let loc = d.location;
        let labels = vec![
            ("bus", format!("{:02x}", loc.bus)),
            ("device", format!("{:02x}", loc.device)),
            ("function", format!("{:x}", loc.function)),
            ("segment", format!("{:04x}", loc.segment)),
        ];
        let parent = |f: fn(&pcidevice::Location) -> String| d.parent.as_ref().map_or("*".to_string(), f);
        let info = vec![
            ("bus", labels[0].1.clone()),
            ("class_id", format!("0x{:06x}", d.class)),
            ("device", labels[1].1.clone()),
            ("device_id", format!("0x{:04x}", d.device)),
            ("function", labels[2].1.clone()),
            ("parent_bus", parent(|p| format!("{:02x}", p.bus))),
            ("parent_device", parent(|p| format!("{:02x}", p.device))),
            ("parent_function", parent(|p| format!("{:x}", p.function))),
            ("parent_segment", parent(|p| format!("{:04x}", p.segment))),
            ("revision", format!("0x{:02x}", d.revision)),
            ("segment", labels[3].1.clone()),
            ("subsystem_device_id", format!("0x{:04x}", d.subsystem_device)),
            ("subsystem_vendor_id", format!("0x{:04x}", d.subsystem_vendor)),
            ("vendor_id", format!("0x{:04x}", d.vendor)),
        ];
        gauges.push(gauge(
            "node_pcidevice_info",
            info,
            1.0,
            "Non-numeric data from /sys/bus/pci/devices/<location>, value is always 1.",
        ));
        // Absent link attributes are -1, absent flags and counts 0, as node_exporter has it.
        for (name, value, help) in [
            (
                "node_pcidevice_max_link_transfers_per_second",
                d.max_link_speed_gts.map(|g| g * 1e9).unwrap_or(-1.0),
                "Value of maximum link's transfers per second (T/s)",
            ),
            (
                "node_pcidevice_max_link_width",
                d.max_link_width.map(f64::from).unwrap_or(-1.0),
                "Value of maximum link's width (number of lanes)",
            ),
            (
                "node_pcidevice_current_link_transfers_per_second",
                d.current_link_speed_gts.map(|g| g * 1e9).unwrap_or(-1.0),
                "Value of current link's transfers per second (T/s)",
            ),
            (
                "node_pcidevice_current_link_width",
                d.current_link_width.map(f64::from).unwrap_or(-1.0),
                "Value of current link's width (number of lanes)",
            ),
            (
                "node_pcidevice_d3cold_allowed",
                d.d3cold_allowed.map(|b| f64::from(u8::from(b))).unwrap_or(0.0),
                "Whether the PCIe device supports D3cold power state (0/1).",
            ),
            (
                "node_pcidevice_sriov_drivers_autoprobe",
                d.sriov_drivers_autoprobe
                    .map(|b| f64::from(u8::from(b)))
                    .unwrap_or(0.0),
                "Whether SR-IOV drivers autoprobe is enabled for the device (0/1).",
            ),
            (
                "node_pcidevice_sriov_numvfs",
                d.sriov_numvfs.map(|v| v as f64).unwrap_or(0.0),
                "Number of Virtual Functions (VFs) currently enabled for SR-IOV.",
            ),
            (
                "node_pcidevice_sriov_totalvfs",
                d.sriov_totalvfs.map(|v| v as f64).unwrap_or(0.0),
                "Total number of Virtual Functions (VFs) supported by the device.",
            ),
            (
                "node_pcidevice_sriov_vf_total_msix",
                d.sriov_vf_total_msix.map(|v| v as f64).unwrap_or(0.0),
                "Total number of MSI-X vectors for Virtual Functions.",
            ),
        ] {
            gauges.push(gauge(name, labels.clone(), value, help));
        }
        if let Some(state) = &d.power_state {
            for s in POWER_STATES {
                gauges.push(gauge(
                    "node_pcidevice_power_state",
                    [labels.clone(), vec![("state", s.to_string())]].concat(),
                    if state == s { 1.0 } else { 0.0 },
                    "PCIe device power state, one of: D0, D1, D2, D3hot, D3cold, unknown or error.",
                ));
            }
        }
        if let Some(n) = d.numa_node.filter(|n| *n != -1) {
            gauges.push(gauge(
                "node_pcidevice_numa_node",
                labels.clone(),
                f64::from(n),
                "NUMA node number for the PCI device. -1 indicates unknown or not available.",
            ));
        }
        let bdf = loc.to_string();
        if !judged.contains(&bdf)
            && let Some(down) = pcidevice::downgraded(d, pcidevice::upstream_max(tree, d))
        {
            gauges.push(gauge(
                "xirang_pcie_link_downgraded",
                vec![("pci", bdf)],
                if down { 1.0 } else { 0.0 },
                "1 when the PCIe link trained below what both its ends allow (speed or width).",
            ));
        }
    }
}

/// Reads a host: raw counters as `CounterValue`s and state gauges as points.
fn host_values(
    tree: &dyn Tree,
    cache: &mut ReadCache,
    run_ethtool: bool,
    host: &str,
) -> (Groups, Vec<Point>, Vec<String>) {
    let mut read: CounterRead = read_counters_with(tree, cache);
    let mut values = Vec::new();
    let mut gauges = Vec::new();
    let mut problems: Vec<String> = read
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect();
    for d in &mut read.rdma {
        gauges.push(gauge(
            "node_infiniband_info",
            vec![
                ("device", d.name.clone()),
                ("board_id", d.board_id.clone().unwrap_or_default()),
                ("firmware_version", d.fw_ver.clone().unwrap_or_default()),
                ("hca_type", d.hca_type.clone().unwrap_or_default()),
            ],
            1.0,
            "Non-numeric data from /sys/class/infiniband/<device>, value is always 1.",
        ));
        for p in &mut d.ports {
            let entity = format!("{host}/{}/{}", d.name, p.port);
            let labels = vec![("device", d.name.clone()), ("port", p.port.to_string())];
            if let Some(s) = &p.state {
                gauges.push(gauge("node_infiniband_state_id", labels.clone(), f64::from(s.code), "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)"));
            }
            if let Some(s) = &p.phys_state {
                gauges.push(gauge("node_infiniband_physical_state_id", labels.clone(), f64::from(s.code), "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)"));
            }
            if let Some(r) = p.rate_gbps {
                // Gb/s to bytes/s as node_exporter does (rate x 125 000 000).
                gauges.push(gauge(
                    "node_infiniband_rate_bytes_per_second",
                    labels.clone(),
                    r * 125_000_000.0,
                    "Maximum signal transfer rate",
                ));
            }
            // The names move out of the read: a round has about a thousand of them.
            let counters: Vec<(String, u64)> = std::mem::take(&mut p.counters)
                .into_iter()
                .chain(std::mem::take(&mut p.hw_counters))
                .chain(
                    std::mem::take(&mut p.counters_ext)
                        .into_iter()
                        .map(|(n, v)| (format!("{COUNTERS_EXT_PREFIX}{n}"), v)),
                )
                .collect();
            values.push((entity, counters));
        }
    }
    let commands = tree
        .resolve(xirang_host::snapshot::COMMANDS_DIR)
        .ok()
        .filter(|d| matches!(tree.lstat(d), Some(xirang_host::tree::Kind::Dir)));
    for n in &mut read.netdevs {
        let entity = format!("{host}/{}", n.name);
        let mut group: Vec<(String, u64)> = Vec::new();
        if let Some(c) = n.carrier_changes {
            group.push(("carrier_changes".into(), c));
        }
        // The kernel's generic interface statistics (`statistics/rx_bytes`, ...), named
        // apart from the driver's `ethtool -S` counters of the same interface.
        for (stat, value) in std::mem::take(&mut n.statistics) {
            group.push((format!("{NETDEV_STAT_PREFIX}{stat}"), value));
        }
        let captured = format!("commands/ethtool-S-{}.txt", n.name);
        // `commands` is resolved once per round with the tree's confined resolution (in a
        // captured tree it may be a link, which must not lead outside the root); the file
        // itself is read without walking its path again.
        let bytes = match &commands {
            Some(dir) => match tree.read_nofollow(&xirang_host::tree::join(
                dir,
                &format!("ethtool-S-{}.txt", n.name),
            )) {
                Err(xirang_host::tree::TreeError::BadLink { .. }) => tree.read(&captured),
                r => r,
            },
            None => tree.read(&captured),
        };
        let stats = match bytes {
            Ok(bytes) => match EthtoolStats::parse(&String::from_utf8_lossy(&bytes)) {
                Ok(s) => Some(s),
                Err(e) => {
                    problems.push(format!("{captured}: {e}"));
                    None
                }
            },
            Err(_) if run_ethtool => run_ethtool_s(&n.name).and_then(|t| EthtoolStats::parse(&t).ok()),
            Err(_) => None,
        };
        if let Some(stats) = stats {
            group.extend(stats.counters);
        }
        values.push((entity, group));
    }
    for f in &read.pci {
        if let Some(l) = f.link {
            let labels = vec![("pci", f.bdf.clone())];
            gauges.push(gauge(
                "xirang_pcie_link_downgraded",
                labels.clone(),
                {
                    // Judged by both ends: a Gen4 card in a Gen3 slot is not degraded.
                    let (up_speed, up_width) = read
                        .upstream_max
                        .get(&f.bdf)
                        .copied()
                        .unwrap_or((l.max_speed_gts, l.max_width));
                    let degraded = l.cur_speed_gts < l.max_speed_gts.min(up_speed)
                        || l.cur_width < l.max_width.min(up_width);
                    if degraded { 1.0 } else { 0.0 }
                },
                "1 when the PCIe link trained below what both its ends allow (speed or width).",
            ));
            gauges.push(gauge(
                "xirang_pcie_link_width",
                [labels.clone(), vec![("which", "current".into())]].concat(),
                f64::from(l.cur_width),
                "PCIe link width in lanes.",
            ));
            gauges.push(gauge(
                "xirang_pcie_link_width",
                [labels.clone(), vec![("which", "max".into())]].concat(),
                f64::from(l.max_width),
                "PCIe link width in lanes.",
            ));
            gauges.push(gauge(
                "xirang_pcie_link_speed_gts",
                [labels.clone(), vec![("which", "current".into())]].concat(),
                l.cur_speed_gts,
                "PCIe link speed in GT/s.",
            ));
            gauges.push(gauge(
                "xirang_pcie_link_speed_gts",
                [labels, vec![("which", "max".into())]].concat(),
                l.max_speed_gts,
                "PCIe link speed in GT/s.",
            ));
        }
    }
    (values, gauges, problems)
}

fn run_ethtool_s(ifname: &str) -> Option<String> {
    // A name read from sysfs becomes ethtool's argument only when it fits the grammar
    // (`-h` would be read as an option).
    if !xirang_host::names::fits(xirang_host::names::Kind::Netdev, ifname) {
        return None;
    }
    let out = std::process::Command::new("ethtool")
        .args(["-S", ifname])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Labels of an entity for derived signals.
fn labels_of(entity: &Entity, with_host: bool) -> Vec<(&'static str, String)> {
    let mut l = match entity {
        Entity::NicPort { device, port, .. } => vec![("device", device.clone()), ("port", port.to_string())],
        Entity::Netdev { ifname, .. } => vec![("device", ifname.clone())],
        Entity::SwitchPort { switch, port } => vec![("switch", switch.clone()), ("port", port.clone())],
        Entity::Queue { switch, port, queue } => vec![
            ("switch", switch.clone()),
            ("port", port.clone()),
            ("queue", queue.to_string()),
        ],
        Entity::PriorityGroup { switch, port, pg } => vec![
            ("switch", switch.clone()),
            ("port", port.clone()),
            ("pg", pg.to_string()),
        ],
    };
    if with_host && let Entity::NicPort { host, .. } | Entity::Netdev { host, .. } = entity {
        l.insert(0, ("host", host.clone()));
    }
    l
}

/// `rx_prio3_pause_duration` (µs) increases as the share of the interval paused.
fn pause_ratios(
    counters: &BTreeMap<String, u64>,
    labels: &[(&'static str, String)],
    dt: f64,
    out: &mut Vec<Point>,
) {
    for (name, v) in counters {
        if let Some(rest) = name.strip_suffix("_pause_duration")
            && let Some((dir, p)) = rest.split_once("_prio")
        {
            let mut l = labels.to_vec();
            l.push(("direction", dir.to_string()));
            l.push(("priority", p.to_string()));
            out.push(gauge("xirang_pfc_pause_ratio", l, (*v as f64 * 1e-6 / dt).min(1.0), "Share of the last interval the priority was paused by PFC (rx: by the switch, tx: the NIC pausing the switch)."));
        }
    }
}

/// The derived health signals of a round (MISSION 5.1 and 5.2).
fn signals(d: &Deltas, with_host: bool, out: &mut Vec<Point>) {
    for (entity_s, counters) in &d.by {
        let Ok(entity) = entity_s.parse::<Entity>() else {
            continue;
        };
        let Some(&dt) = d.dt_s.get(entity_s) else { continue };
        let labels = labels_of(&entity, with_host);
        let per_s = |v: u64| v as f64 / dt;
        match &entity {
            Entity::NicPort { .. } => {
                // The simulator reports the mlx5 per-priority counters on the port.
                pause_ratios(counters, &labels, dt, out);
                if let (Some(marked), Some(rcv)) = (
                    counters.get("np_ecn_marked_roce_packets"),
                    counters.get("port_rcv_packets"),
                ) && *rcv > 0
                {
                    out.push(gauge(
                        "xirang_ecn_marked_ratio",
                        labels.clone(),
                        *marked as f64 / *rcv as f64,
                        "Share of received packets marked CE by the network in the last interval.",
                    ));
                }
                if let Some(v) = counters.get("np_cnp_sent") {
                    out.push(gauge(
                        "xirang_cnp_sent_per_second",
                        labels.clone(),
                        per_s(*v),
                        "CNPs sent by this port (notification point) per second.",
                    ));
                }
                if let Some(v) = counters.get("rp_cnp_handled") {
                    out.push(gauge(
                        "xirang_cnp_handled_per_second",
                        labels.clone(),
                        per_s(*v),
                        "CNPs acted on by this port (reaction point) per second.",
                    ));
                }
                if let Some(v) = d.sum(entity_s, LINK_ERRORS) {
                    out.push(gauge(
                        "xirang_link_errors_per_second",
                        labels.clone(),
                        per_s(v),
                        "Symbol, receive, recovery and integrity errors per second.",
                    ));
                }
                if let Some(v) = counters.get("link_downed") {
                    out.push(gauge(
                        "xirang_link_flaps",
                        labels.clone(),
                        *v as f64,
                        "Times the link went down in the last interval.",
                    ));
                }
                if let Some(v) = d.sum(entity_s, RETRANS) {
                    out.push(gauge(
                        "xirang_retransmissions_per_second",
                        labels.clone(),
                        per_s(v),
                        "Transport sequence errors, timeouts and RNR retries per second.",
                    ));
                }
                if let Some(v) = d.sum(entity_s, DISCARDS) {
                    out.push(gauge(
                        "xirang_discards_per_second",
                        labels.clone(),
                        per_s(v),
                        "Transmit discards and receive-queue drops (out_of_buffer) per second.",
                    ));
                }
            }
            Entity::Netdev { .. } => {
                pause_ratios(counters, &labels, dt, out);
                if let Some(v) = d.sum(entity_s, PHY_ERRORS) {
                    out.push(gauge(
                        "xirang_phy_errors_per_second",
                        labels.clone(),
                        per_s(v),
                        "FCS, symbol and uncorrected FEC errors per second (ethtool -S).",
                    ));
                }
                // mlx5's link_down_events_phy counts link downs; carrier_changes counts
                // both transitions (and administrative ones), so it is halved.
                let flaps = counters
                    .get("link_down_events_phy")
                    .copied()
                    .or(counters.get("carrier_changes").map(|c| c.div_ceil(2)));
                if let Some(v) = flaps {
                    out.push(gauge(
                        "xirang_link_flaps",
                        labels.clone(),
                        v as f64,
                        "Times the link went down in the last interval.",
                    ));
                }
                if let Some(v) = d.sum(
                    entity_s,
                    &["rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer"],
                ) {
                    out.push(gauge(
                        "xirang_discards_per_second",
                        labels.clone(),
                        per_s(v),
                        "NIC discards per second (ethtool -S).",
                    ));
                }
            }
            Entity::SwitchPort { .. } | Entity::Queue { .. } | Entity::PriorityGroup { .. } => {
                for (name, v) in counters {
                    if let Some(rest) = name.strip_prefix("SAI_PORT_STAT_PFC_")
                        && let Some(p) = rest.strip_suffix("_RX_PAUSE_DURATION_US")
                    {
                        let mut l = labels.clone();
                        l.push(("direction", "rx".into()));
                        l.push(("priority", p.to_string()));
                        out.push(gauge("xirang_pfc_pause_ratio", l, (*v as f64 * 1e-6 / dt).min(1.0), "Share of the last interval the priority was paused by PFC (rx: by the switch, tx: the NIC pausing the switch)."));
                    }
                }
            }
        }
    }
}
