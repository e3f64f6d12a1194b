//! What calibration compares: a handful of fabric-wide figures per tier, computed by the
//! same code from any window of counters (a Prometheus server's, a monitor history's, a
//! simulated run's), because the simulator speaks the hardware's counter schema.
//!
//! Each figure is a ratio of rates summed over a tier, so it does not depend on how long
//! the window is or how often it was sampled:
//! - `util`: bytes sent per second over the tier's capacity (NIC ports for `host`, switch
//!   ports for `leaf`, `spine`, `core`), the nominal rates taken from the fabric model;
//! - `ecn_ratio`: packets a tier's switches marked CE over the packets they queued;
//! - `cnp_rate`: CNPs the NICs sent per second (one per marked packet or per CNP
//!   interval, docs/reference/congestion-control.md);
//! - `pause_ratio host`: the pause time NICs sent to their switch ports (mlx5
//!   `tx_prioN_pause_duration`: how long each NIC held its port paused), per NIC port
//!   and second, summed over priorities;
//! - `pfc_ratio`: PFC frames a tier's switches sent per packet they sent (SAI counts
//!   frames, not pause time, on switch ports).

use std::collections::BTreeMap;

use serde::Serialize;
use xirang_diagnose::window::{Series, Window, increase, metric_of};
use xirang_fabric::model::{Fabric, Node, Tier};

/// What a counter contributes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    NicTxBytes,
    NicTxPrioBytes,
    NicCnp,
    NicPauseSeconds,
    SwitchOutBytes,
    SwitchOutPackets,
    SwitchPfcFrames,
    QueueEcnMarked,
    QueuePackets,
    QueueBytes,
}

/// PFC priorities counted (IEEE 802.1Qbb's eight).
const PRIORITIES: u8 = 8;

/// The counters calibration reads, by their hardware names, with their roles.
fn roles() -> Vec<(String, Role)> {
    let mut v = vec![
        ("port_xmit_data".to_string(), Role::NicTxBytes),
        ("np_cnp_sent".to_string(), Role::NicCnp),
        ("SAI_PORT_STAT_IF_OUT_OCTETS".to_string(), Role::SwitchOutBytes),
        (
            "SAI_PORT_STAT_IF_OUT_UCAST_PKTS".to_string(),
            Role::SwitchOutPackets,
        ),
        (
            "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS".to_string(),
            Role::QueueEcnMarked,
        ),
        ("SAI_QUEUE_STAT_PACKETS".to_string(), Role::QueuePackets),
        ("SAI_QUEUE_STAT_BYTES".to_string(), Role::QueueBytes),
    ];
    for p in 0..PRIORITIES {
        v.push((format!("tx_prio{p}_bytes"), Role::NicTxPrioBytes));
        v.push((format!("tx_prio{p}_pause_duration"), Role::NicPauseSeconds));
        v.push((format!("SAI_PORT_STAT_PFC_{p}_TX_PKTS"), Role::SwitchPfcFrames));
    }
    v
}

/// The hardware counters calibration reads (for a simulated run or a sim-out window).
pub fn counter_names() -> Vec<String> {
    roles().into_iter().map(|(c, _)| c).collect()
}

/// The metrics calibration reads, as the monitoring agent exports them (what a
/// Prometheus query asks for), each once.
pub fn metric_names() -> Vec<String> {
    let mut v: Vec<String> = vec![
        crate::app::REQUEST_BUCKETS.to_string(),
        crate::app::COLLECTIVE_SECONDS.to_string(),
        crate::app::INSPECTOR_EXEC_TIME_US.to_string(),
    ];
    for (c, _) in roles() {
        let m = metric_of(&c);
        if !v.contains(&m) {
            v.push(m);
        }
    }
    v
}

/// Below these values a figure is noise, so a residual is taken against at least this
/// much (otherwise 2 marks against 1 would be a 100 % miss). Chosen, not sourced: 1 % of
/// capacity, one marked packet or PFC frame in a thousand, a thousand CNPs a second (a
/// single DCQCN flow under steady marking sends one per 50 µs interval per QP, 20,000/s,
/// docs/reference/congestion-control.md), a thousandth of the time paused.
pub const UTIL_FLOOR: f64 = 0.01;
/// See [`UTIL_FLOOR`].
pub const RATIO_FLOOR: f64 = 1e-3;
/// See [`UTIL_FLOOR`].
pub const CNP_RATE_FLOOR: f64 = 1_000.0;

/// Weight of the congestion figures (ECN, CNP, PFC) in the fit: none. They are held to
/// the tolerance like every figure, but they do not steer the search. Utilisation is
/// what the workload parameters set directly, per class and tier; marking and pausing
/// follow from it through which flows happen to collide on a port, and on the test twin
/// they move by 30-70 % from seed to seed at the same load, often between zero and
/// thousands of marks (VALIDATION.md, "Calibration"). Weighted in, even at a tenth,
/// that noise pulled a training load 35 % away from the value that matched its
/// utilisation. A congestion figure that stays outside the tolerance at the fitted load
/// is a finding: the scenario's congestion settings, or its placement, are not the
/// fleet's.
pub const CONGESTION_WEIGHT: f64 = 0.0;

/// One figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// `util host`, `ecn_ratio leaf`, `cnp_rate`, ...
    pub name: String,
    /// Its value.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// The smallest value a residual is measured against.
    pub floor: f64,
    /// Its weight in the fit's objective.
    pub weight: f64,
    /// The metrics it is computed from, as exported.
    pub metrics: Vec<String>,
    /// An application figure: what the simulated side computes for it ([`crate::app`]).
    /// `None` for a counter figure, which [`figures`] computes on both sides.
    #[serde(skip)]
    pub app: Option<AppFigure>,
}

/// What an application figure is, for its simulated side.
#[derive(Debug, Clone, PartialEq)]
pub enum AppFigure {
    /// A class's request p99 through the observed histogram's bucket bounds.
    RequestP99 {
        /// Traffic class.
        class: String,
        /// The bucket bounds (`le`), the last `+Inf`.
        les: Vec<f64>,
    },
    /// A class's collective time per iteration.
    CollectiveTime {
        /// Traffic class.
        class: String,
    },
}

impl AppFigure {
    /// The traffic class it is about.
    pub fn class(&self) -> &str {
        match self {
            AppFigure::RequestP99 { class, .. } | AppFigure::CollectiveTime { class } => class,
        }
    }
}

/// The fabric's tiers and capacities, as the figures need them.
#[derive(Debug, Clone)]
pub struct Tiers {
    /// Switch name -> tier.
    switch_tier: BTreeMap<String, Tier>,
    /// NIC ports with a link, and their summed capacity, bytes/s.
    nic_ports: usize,
    nic_capacity: f64,
    /// Per switch tier: capacity of its cabled ports, bytes/s.
    switch_capacity: BTreeMap<Tier, f64>,
    /// The priorities the scenario's traffic classes use, with the classes' names.
    priorities: BTreeMap<u8, String>,
}

const BITS_PER_BYTE: f64 = 8.0;

impl Tiers {
    /// From a scenario: its fabric and the priorities of its traffic classes.
    pub fn of(loaded: &xirang_fabric::Loaded) -> Tiers {
        let mut priorities: BTreeMap<u8, String> = BTreeMap::new();
        for (name, c) in &loaded.scenario.config.classes {
            let e = priorities.entry(c.priority).or_default();
            if !e.is_empty() {
                e.push('+');
            }
            e.push_str(name);
        }
        Tiers::new(&loaded.fabric, priorities)
    }

    /// From the fabric model and the priorities to break utilisation down by.
    pub fn new(fabric: &Fabric, priorities: BTreeMap<u8, String>) -> Tiers {
        let mut t = Tiers {
            switch_tier: fabric.switches.iter().map(|s| (s.name.clone(), s.tier)).collect(),
            nic_ports: 0,
            nic_capacity: 0.0,
            switch_capacity: BTreeMap::new(),
            priorities,
        };
        for l in &fabric.links {
            let bytes_per_s = l.rate_gbps * 1e9 / BITS_PER_BYTE;
            for end in [l.a, l.b] {
                match end.node {
                    Node::Nic(_) => {
                        t.nic_ports += 1;
                        t.nic_capacity += bytes_per_s;
                    }
                    Node::Switch(s) => {
                        *t.switch_capacity
                            .entry(fabric.switches[s.index()].tier)
                            .or_default() += bytes_per_s;
                    }
                }
            }
        }
        t
    }
}

/// Rate of a counter series per second: its increase over the span of its points.
fn rate(s: &Series, seconds_per_unit: f64) -> Option<f64> {
    let (first, last) = (s.points.first()?, s.points.last()?);
    let span = (last.0 - first.0) as f64 * seconds_per_unit;
    (span > 0.0).then(|| increase(&s.points) / span)
}

/// Sums of rates per role and tier, and which metrics had any series.
#[derive(Default)]
struct Sums {
    by: BTreeMap<(u8, Option<Tier>, Option<u8>), f64>,
    seen: BTreeMap<u8, bool>,
}

fn role_key(r: Role) -> u8 {
    r as u8
}

impl Sums {
    fn get(&self, r: Role, tier: Option<Tier>) -> f64 {
        self.by.get(&(role_key(r), tier, None)).copied().unwrap_or(0.0)
    }
    fn get_prio(&self, r: Role, tier: Option<Tier>, p: u8) -> f64 {
        self.by.get(&(role_key(r), tier, Some(p))).copied().unwrap_or(0.0)
    }
    fn seen(&self, r: Role) -> bool {
        self.seen.get(&role_key(r)).copied().unwrap_or(false)
    }
}

/// The figures of a window, over the fabric's tiers. A figure whose counters have no
/// series in the window is left out (a fleet without switch telemetry has no switch
/// figures); `unknown` receives the switches the fabric model does not have.
pub fn figures(w: &Window, tiers: &Tiers, unknown: &mut Vec<String>) -> Vec<Figure> {
    let sums = sums(w, tiers, unknown);
    let mut out = Vec::new();
    util_figures(&sums, tiers, &mut out);
    congestion_figures(&sums, tiers, &mut out);
    out
}

/// The window's counter rates summed by role, tier and priority: every figure is a
/// ratio of these sums, so a series counts once whichever figures use it.
fn sums(w: &Window, tiers: &Tiers, unknown: &mut Vec<String>) -> Sums {
    let seconds_per_unit = if w.relative { 1e-6 } else { 1e-3 };
    let by_metric: BTreeMap<String, Role> = roles().into_iter().map(|(c, r)| (metric_of(&c), r)).collect();
    let mut sums = Sums::default();
    for s in &w.series {
        let Some(&role) = by_metric.get(&s.metric) else {
            continue;
        };
        let is_switch = s.labels.contains_key("switch");
        let nic_role = matches!(
            role,
            Role::NicTxBytes | Role::NicTxPrioBytes | Role::NicCnp | Role::NicPauseSeconds
        );
        // Per-priority metrics carry both directions under one name: what a port sent
        // is `tx`.
        let pfc_role = matches!(
            role,
            Role::NicPauseSeconds | Role::SwitchPfcFrames | Role::NicTxPrioBytes
        );
        if nic_role == is_switch || (pfc_role && s.labels.get("direction").is_some_and(|d| d != "tx")) {
            continue;
        }
        let prio = match role {
            Role::NicTxPrioBytes => s.labels.get("priority").and_then(|p| p.parse::<u8>().ok()),
            Role::QueueBytes => s.labels.get("queue").and_then(|p| p.parse::<u8>().ok()),
            _ => None,
        };
        let tier = match role {
            _ if nic_role => None,
            _ => {
                let Some(sw) = s.labels.get("switch") else {
                    continue;
                };
                match tiers.switch_tier.get(sw) {
                    Some(t) => Some(*t),
                    None => {
                        if !unknown.contains(sw) {
                            unknown.push(sw.clone());
                        }
                        continue;
                    }
                }
            }
        };
        // Seen only once its switch is known: a series of a switch the model lacks
        // must not make a figure of zeros.
        sums.seen.insert(role_key(role), true);
        if let Some(r) = rate(s, seconds_per_unit) {
            *sums.by.entry((role_key(role), tier, prio)).or_default() += r;
        }
    }
    sums
}

/// Utilisation, host tier first, then each switch tier: the figures the workload
/// parameters set directly, so the only counter figures that steer the fit.
fn util_figures(sums: &Sums, tiers: &Tiers, out: &mut Vec<Figure>) {
    let m = |c: &str| metric_of(c);
    // Utilisation per class (priority) where the counters have it, which is what tells
    // one class's load from another's; the port totals otherwise.
    let per_prio_nic = sums.seen(Role::NicTxPrioBytes) && !tiers.priorities.is_empty();
    let per_prio_switch = sums.seen(Role::QueueBytes) && !tiers.priorities.is_empty();
    let util = |name: String, value: f64, metric: String| Figure {
        name,
        value,
        unit: "of capacity",
        floor: UTIL_FLOOR,
        weight: 1.0,
        metrics: vec![metric],
        app: None,
    };
    if tiers.nic_capacity > 0.0 {
        if per_prio_nic {
            for (&p, class) in &tiers.priorities {
                out.push(util(
                    format!("util host p{p} ({class})"),
                    sums.get_prio(Role::NicTxPrioBytes, None, p) / tiers.nic_capacity,
                    m("tx_prio3_bytes"),
                ));
            }
        }
        // The totals too: a fleet whose exporters lack per-priority counters is
        // compared on them (the objective takes the observed window's figures).
        if sums.seen(Role::NicTxBytes) {
            out.push(util(
                "util host".into(),
                sums.get(Role::NicTxBytes, None) / tiers.nic_capacity,
                m("port_xmit_data"),
            ));
        }
    }
    for (&tier, &cap) in &tiers.switch_capacity {
        if cap <= 0.0 {
            continue;
        }
        if per_prio_switch {
            for (&p, class) in &tiers.priorities {
                out.push(util(
                    format!("util {tier} p{p} ({class})"),
                    sums.get_prio(Role::QueueBytes, Some(tier), p) / cap,
                    m("SAI_QUEUE_STAT_BYTES"),
                ));
            }
        }
        if sums.seen(Role::SwitchOutBytes) {
            out.push(util(
                format!("util {tier}"),
                sums.get(Role::SwitchOutBytes, Some(tier)) / cap,
                m("SAI_PORT_STAT_IF_OUT_OCTETS"),
            ));
        }
    }
}

/// ECN marking, CNPs, NIC pause time and switch PFC frames: held to the tolerance but
/// weighted out of the fit ([`CONGESTION_WEIGHT`]).
fn congestion_figures(sums: &Sums, tiers: &Tiers, out: &mut Vec<Figure>) {
    let m = |c: &str| metric_of(c);
    for &tier in tiers.switch_capacity.keys() {
        if sums.seen(Role::QueueEcnMarked) && sums.seen(Role::QueuePackets) {
            let pkts = sums.get(Role::QueuePackets, Some(tier));
            out.push(Figure {
                name: format!("ecn_ratio {tier}"),
                value: if pkts > 0.0 {
                    sums.get(Role::QueueEcnMarked, Some(tier)) / pkts
                } else {
                    0.0
                },
                unit: "marked/packet",
                floor: RATIO_FLOOR,
                weight: CONGESTION_WEIGHT,
                metrics: vec![
                    m("SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS"),
                    m("SAI_QUEUE_STAT_PACKETS"),
                ],
                app: None,
            });
        }
    }
    if sums.seen(Role::NicCnp) {
        out.push(Figure {
            name: "cnp_rate".into(),
            value: sums.get(Role::NicCnp, None),
            unit: "CNP/s",
            floor: CNP_RATE_FLOOR,
            weight: CONGESTION_WEIGHT,
            metrics: vec![m("np_cnp_sent")],
            app: None,
        });
    }
    if sums.seen(Role::NicPauseSeconds) && tiers.nic_ports > 0 {
        out.push(Figure {
            name: "pause_ratio host".into(),
            value: sums.get(Role::NicPauseSeconds, None) / tiers.nic_ports as f64,
            unit: "of time",
            floor: RATIO_FLOOR,
            weight: CONGESTION_WEIGHT,
            metrics: vec![m("tx_prio3_pause_duration")],
            app: None,
        });
    }
    for &tier in tiers.switch_capacity.keys() {
        if sums.seen(Role::SwitchPfcFrames) && sums.seen(Role::SwitchOutPackets) {
            let pkts = sums.get(Role::SwitchOutPackets, Some(tier));
            out.push(Figure {
                name: format!("pfc_ratio {tier}"),
                value: if pkts > 0.0 {
                    sums.get(Role::SwitchPfcFrames, Some(tier)) / pkts
                } else {
                    0.0
                },
                unit: "frames/packet",
                floor: RATIO_FLOOR,
                weight: CONGESTION_WEIGHT,
                metrics: vec![
                    m("SAI_PORT_STAT_PFC_3_TX_PKTS"),
                    m("SAI_PORT_STAT_IF_OUT_UCAST_PKTS"),
                ],
                app: None,
            });
        }
    }
}

/// The window of a finished simulated run: its final counters over its simulated length.
/// The span is the scenario's window (`run.end_us`) when given: the engine stops early
/// once nothing is left to do, and a run that finished early still stands for its whole
/// window.
pub fn window_of_run(r: &xirang_sim::RunResult, window_ns: Option<u64>) -> Window {
    let run_ns = r.stats.sim_time_ps / 1_000;
    window_of_counters(
        "simulation".into(),
        &r.counters,
        window_ns.map_or(run_ns, |w| w.max(run_ns)),
    )
}

/// The window of a run's final counters (every counter 0 at its start) over its length.
pub fn window_of_counters(source: String, values: &[xirang_telemetry::CounterValue], run_ns: u64) -> Window {
    let end_us = (run_ns / 1_000).max(1) as i64;
    xirang_diagnose::source::window_from_samples_of(
        source,
        values.iter().map(|c| (end_us, c)),
        &counter_names(),
    )
}
