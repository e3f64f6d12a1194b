//! Rules about where traffic goes and how fast hosts feed it, each a row of
//! docs/reference/diagnosis.md §2:
//!
//! - `ECMP-HOT-SPINE` (row 9, the fabric side): the leaves hash far more than their
//!   share of uplink bytes to one spine, at several leaves at once (a polarised hash,
//!   unequal weights); the hot spine's links congest while the others idle.
//! - `ECMP-COLLISIONS` (row 9, the traffic side): at several leaves an uplink idles while
//!   a sibling uplink congests, with no spine favoured: too few flows for ECMP to spread
//!   (one QP per connection, §1.5's QP scaling).
//! - `HOST-BOUNCE` (row 15): a NIC that sends and receives well below what the other NIC
//!   ports do, unpaused, without congestion notifications, errors or a degraded link:
//!   the host cannot feed it (GPUDirect RDMA off, data bouncing through host memory).
//!
//! The ECMP rules need the cabling (`Window::links`: the fabric model, LLDP); without it
//! they stay silent.

use std::collections::{BTreeMap, BTreeSet};

use crate::finding::{Class, Evidence, Finding, Severity};
use crate::window::{QUEUE_ECN_MARKED, View, Window};
use xirang_telemetry::metric::{LINK_RATE, metric_for};

/// A spine is hot when it takes this many times its fair share (1 / spines) of the
/// leaves' uplink bytes; a hash spreading many flows stays well inside it (64 flows
/// over 4 spines: a share of 25 % ± 5 %).
const HOT_SPINE_FACTOR: f64 = 2.0;
/// ... and at each of at least half of the leaves that send up, more than this many
/// times its fair share of that leaf's uplink bytes (the fault is the leaves' hashing,
/// not one leaf's traffic).
const HOT_LEAF_FACTOR: f64 = 1.5;
/// An uplink carrying less than this share of its leaf's mean uplink bytes is idle
/// (not one flow's worth where the leaf has a few flows per uplink).
const IDLE_UPLINK_SHARE: f64 = 0.1;
/// A NIC moving less than this share of its link's rate while busy, in both
/// directions, and of what the fleet's faster NIC ports move (the upper quartile: a
/// lightly loaded fleet is not a fleet of starved hosts), is held back by its host.
const BOUNCE_RATE_SHARE: f64 = 0.6;
/// ... and below this share the loss is high.
const BOUNCE_RATE_SHARE_HIGH: f64 = 0.5;
/// Share of its active time a NIC may be paused (either way) and still count as
/// unpaused (the PFC-STORM rule's medium threshold, rules.rs).
const BOUNCE_MAX_PAUSE_SHARE: f64 = 0.05;
/// ECN-marked packets received per MB above which what a NIC was sent came slowly
/// because its path congested, not because its host held its senders back. An
/// uncongested path marks none, and DCQCN halves a sender's rate on a single CNP, so
/// even one mark in a few MB explains a slow receive side (the suite's congested
/// receivers see 0.5 to 200 per MB; host-capped ones none).
const BOUNCE_MAX_MARKED_PER_MB: f64 = 0.1;
/// A NIC must have moved at least this share of what the busier NIC ports moved (the
/// upper quartile) in each direction to be judged: one that was sent little (only
/// acknowledgements, or a light job beside a heavy one) has no rate to speak of.
const BOUNCE_MIN_VOLUME_SHARE: f64 = 0.25;
/// At most this share of the judged NIC ports may look host-capped: more is a workload
/// that runs below line rate (a fault of one host's configuration is the odd one out).
const BOUNCE_MAX_FLEET_SHARE: f64 = 0.2;

fn metric(entity_kind: &str, counter: &str) -> String {
    let e: xirang_telemetry::Entity = entity_kind.parse().expect("a valid sample entity");
    metric_for(&e, counter, false).name
}

/// Runs the rules of this module.
pub fn balance_rules(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    let mut out = ecmp(w, views);
    out.extend(host_bounce(w, views));
    out
}

/// Share of a port's busiest sampling interval below which an interval carried only
/// acknowledgements and stragglers, not the port's traffic: an ACK is a few dozen bytes
/// per MTU-sized packet acknowledged, far below a tenth.
const BUSY_INTERVAL_SHARE: f64 = 0.1;

/// Bytes and seconds of a data counter's busy intervals (those moving at least
/// `BUSY_INTERVAL_SHARE` of its busiest one), or None if it never moved: the rate a
/// port ran at while it carried traffic, not diluted by the acknowledgements that trail
/// a slow peer's flow.
fn busy_rate(w: &Window, pts: &[(i64, f64)]) -> Option<(f64, f64)> {
    let steps: Vec<(f64, f64)> = pts
        .windows(2)
        .map(|p| ((p[1].1 - p[0].1).max(0.0), (p[1].0 - p[0].0).max(1) as f64))
        .collect();
    let peak = steps.iter().map(|(b, t)| b / t).fold(0.0, f64::max);
    if peak <= 0.0 {
        return None;
    }
    let (bytes, units) = steps
        .iter()
        .filter(|(b, t)| b / t >= BUSY_INTERVAL_SHARE * peak)
        .fold((0.0, 0.0), |(b0, t0), (b, t)| (b0 + b, t0 + t));
    Some((bytes, if w.relative { units / 1e6 } else { units / 1e3 }))
}

/// One leaf's uplinks: spine -> (bytes sent up, ports, evidence).
type Uplinks = BTreeMap<String, (f64, Vec<String>, Vec<Evidence>)>;

/// The ECMP rules: from the leaves' uplink bytes, a hot spine; failing that, uplinks
/// that idle beside congested siblings.
fn ecmp(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    if w.links.is_empty() {
        return Vec::new();
    }
    let up = uplinks(w);
    let spines: BTreeSet<&String> = up.values().collect();
    if spines.len() < 2 {
        return Vec::new();
    }
    let (by_leaf, marked) = uplink_traffic(views, &up);
    if by_leaf.is_empty() {
        return Vec::new();
    }
    let out = hot_spines(&spines, &by_leaf, &marked);
    if !out.is_empty() {
        // A hot spine explains idle uplinks to the others.
        return out;
    }
    collisions(&by_leaf, &marked)
}

/// A switch's port (`switch:port`); a NIC's port names a host and device with `/`.
fn is_switch_port(e: &str) -> bool {
    e.contains(':') && !e.contains('/')
}

/// The switch of a port.
fn switch_of(e: &str) -> String {
    e.split(':').next().unwrap_or("").to_string()
}

/// Each leaf port cabled up, and the spine it goes to. Leaves are the switches cabled
/// to a NIC; the switches they are cabled to are spines.
fn uplinks(w: &Window) -> BTreeMap<&str, String> {
    let mut leaves: BTreeSet<String> = BTreeSet::new();
    for (a, b) in &w.links {
        for (x, y) in [(a, b), (b, a)] {
            if is_switch_port(x) && !is_switch_port(y) {
                leaves.insert(switch_of(x));
            }
        }
    }
    // Leaf port -> spine it goes up to.
    let mut up: BTreeMap<&str, String> = BTreeMap::new();
    for (a, b) in &w.links {
        for (x, y) in [(a, b), (b, a)] {
            if is_switch_port(x)
                && is_switch_port(y)
                && leaves.contains(&switch_of(x))
                && !leaves.contains(&switch_of(y))
            {
                up.insert(x.as_str(), switch_of(y));
            }
        }
    }
    up
}

/// The bytes each leaf sent up to each spine (leaves with at least two counted
/// uplinks that carried anything), and the packets each uplink marked for congestion.
fn uplink_traffic(
    views: &[View<'_>],
    up: &BTreeMap<&str, String>,
) -> (BTreeMap<String, Uplinks>, BTreeMap<String, f64>) {
    let out_m = metric("s:1", "SAI_PORT_STAT_IF_OUT_OCTETS");
    let marked_m = metric("s:1/q3", QUEUE_ECN_MARKED);
    let mut by_leaf: BTreeMap<String, Uplinks> = BTreeMap::new();
    let mut marked: BTreeMap<String, f64> = BTreeMap::new();
    for v in views {
        let Some(spine) = up.get(v.entity.as_str()) else {
            continue;
        };
        if v.series.metric == out_m {
            let e = by_leaf
                .entry(switch_of(&v.entity))
                .or_default()
                .entry(spine.clone())
                .or_default();
            e.0 += v.inc;
            e.1.push(v.entity.clone());
            e.2.push(v.evidence.clone());
        } else if v.series.metric == marked_m {
            *marked.entry(v.entity.clone()).or_default() += v.inc;
        }
    }
    // Each leaf's uplinks are those cabled and counted: an idle uplink reads 0, an
    // uplink without a series (a scrape gap, a spine of another pod) is not judged.
    by_leaf.retain(|_, l| l.len() >= 2 && l.values().map(|x| x.0).sum::<f64>() > 0.0);
    (by_leaf, marked)
}

/// `ECMP-HOT-SPINE`: each spine that takes far more than its fair share of the
/// leaves' uplink bytes, favoured by at least half of the leaves (and two).
fn hot_spines(
    spines: &BTreeSet<&String>,
    by_leaf: &BTreeMap<String, Uplinks>,
    marked: &BTreeMap<String, f64>,
) -> Vec<Finding> {
    let n = spines.len() as f64;
    let fair = 1.0 / n;
    let total: f64 = by_leaf.values().flat_map(|l| l.values().map(|x| x.0)).sum();
    let mut out = Vec::new();
    for spine in spines {
        let bytes: f64 = by_leaf.values().filter_map(|l| l.get(*spine)).map(|x| x.0).sum();
        let share = bytes / total;
        let hot_leaves: Vec<(&String, f64)> = by_leaf
            .iter()
            .filter_map(|(leaf, l)| {
                let s = l.get(*spine)?.0 / l.values().map(|x| x.0).sum::<f64>();
                (s > HOT_LEAF_FACTOR / l.len() as f64).then_some((leaf, s))
            })
            .collect();
        // With two spines the factor asks for every byte: some always take the other.
        if share < HOT_SPINE_FACTOR * fair || 2 * hot_leaves.len() < by_leaf.len() || hot_leaves.len() < 2 {
            continue;
        }
        let ports: Vec<&String> = by_leaf
            .values()
            .filter_map(|l| l.get(*spine))
            .flat_map(|x| x.1.iter())
            .collect();
        let marks: f64 = ports
            .iter()
            .map(|p| marked.get(p.as_str()).copied().unwrap_or(0.0))
            .sum();
        out.push(Finding {
            rule: "ECMP-HOT-SPINE",
            class: Class::Switch,
            entity: (*spine).clone(),
            severity: if marks > 0.0 { Severity::High } else { Severity::Low },
            cause: format!(
                "the leaves sent {:.0}% of their uplink bytes to {spine} where an even hash gives each of the {} spines {:.0}% ({} of {} leaves favour it){}: ECMP hashing or weights are skewed towards it",
                100.0 * share,
                spines.len(),
                100.0 * fair,
                hot_leaves.len(),
                by_leaf.len(),
                if marks > 0.0 {
                    format!(", and its uplinks marked {marks} packets for congestion while the others had room")
                } else {
                    String::new()
                }
            ),
            confidence: 0.75,
            scope: format!(
                "every flow hashed to {spine} from {}: they share {} uplink(s) while the other spines' links idle, so cross-leaf bandwidth falls towards {:.0}% of the fabric's",
                hot_leaves.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>().join(", "),
                ports.len(),
                100.0 / (share * n)
            ),
            advice: vec![
                "compare the leaves' ECMP hash configuration (fields, seed, algorithm) with the spines': the same hash at two tiers polarises".into(),
                format!("check the routes' next-hop weights towards {spine} (`show ip route` on a leaf) and whether other spines' uplinks are down or drained"),
                "spread RoCE flows with more entropy (E-ECMP on the destination QP, adaptive routing, NCCL_IB_QPS_PER_CONNECTION)".into(),
            ],
            evidence: by_leaf
                .values()
                .filter_map(|l| l.get(*spine))
                .flat_map(|x| x.2.iter().cloned())
                .collect(),
        });
    }
    out
}

/// `ECMP-COLLISIONS`: leaves where an uplink idles while a sibling was congested; at
/// several leaves, too few flows per connection.
fn collisions(by_leaf: &BTreeMap<String, Uplinks>, marked: &BTreeMap<String, f64>) -> Vec<Finding> {
    // Leaves where an uplink idles while a sibling was congested.
    let mut colliding: Vec<(String, String, String, f64)> = Vec::new();
    let mut evidence = Vec::new();
    for (leaf, l) in by_leaf {
        let mean = l.values().map(|x| x.0).sum::<f64>() / l.len() as f64;
        let idle: Vec<&String> = l
            .iter()
            .filter(|(_, x)| x.0 < IDLE_UPLINK_SHARE * mean)
            .map(|(s, _)| s)
            .collect();
        let congested = l
            .iter()
            .filter(|(_, x)| {
                x.1.iter()
                    .any(|p| marked.get(p.as_str()).copied().unwrap_or(0.0) > 0.0)
            })
            .max_by(|a, b| a.1.0.total_cmp(&b.1.0));
        if let (Some(i), Some((hot, x))) = (idle.first(), congested) {
            colliding.push((leaf.clone(), (*i).clone(), hot.clone(), x.0 / mean));
            evidence.extend(l.values().flat_map(|x| x.2.iter().cloned()));
        }
    }
    if colliding.is_empty() {
        return Vec::new();
    }
    let widespread = colliding.len() >= 2;
    let list = colliding
        .iter()
        .map(|(leaf, idle, hot, k)| {
            format!("{leaf}: to {idle} idle, to {hot} {k:.1}x the mean and congested")
        })
        .collect::<Vec<_>>()
        .join("; ");
    vec![Finding {
        rule: "ECMP-COLLISIONS",
        // At several leaves with no spine favoured, the traffic has too few flows to
        // spread; at one leaf alone, that leaf's hashing is as likely.
        class: if widespread { Class::AppConfig } else { Class::Switch },
        entity: if widespread {
            "NCCL_IB_QPS_PER_CONNECTION".into()
        } else {
            colliding[0].0.clone()
        },
        severity: if widespread { Severity::Medium } else { Severity::Low },
        cause: format!(
            "flows collide on ECMP uplinks while others idle ({list}){}",
            if widespread {
                ": the traffic has too few flows (QPs) per connection for hashing to spread it"
            } else {
                ""
            }
        ),
        confidence: if widespread { 0.6 } else { 0.3 },
        scope: format!(
            "cross-leaf flows from {}: colliding flows share one uplink's bandwidth while sibling uplinks stay idle",
            colliding.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", ")
        ),
        advice: vec![
            "raise NCCL_IB_QPS_PER_CONNECTION (e.g. 4) so each connection spreads over several paths (`xirang tune` judges the value on this fabric)".into(),
            "enable E-ECMP (hash on the RoCE destination QP) or adaptive routing on the leaves".into(),
        ],
        evidence,
    }]
}

/// Per NIC port: the rate it sent and received at while busy, its link's rate, and
/// what could explain a low one.
#[derive(Default)]
struct Nic {
    tx: Option<(f64, f64)>,
    rx: Option<(f64, f64)>,
    link_bytes_per_s: Option<f64>,
    paused_secs: [f64; 2],
    marked_rx: f64,
    evidence: Vec<Evidence>,
}

fn host_bounce(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    let tx_m = metric("h/d/1", "port_xmit_data");
    let rx_m = metric("h/d/1", "port_rcv_data");
    let marked_m = metric("h/d/1", "np_ecn_marked_roce_packets");
    let rate_m = metric("h/d/1", LINK_RATE);
    let mut nics: BTreeMap<&str, Nic> = BTreeMap::new();
    // A live host's pause time comes from `ethtool -S` on its netdevs (`host/ens1np0`),
    // which the window does not tie to an RDMA device: any pause on the host counts for
    // each of its NIC ports (it may spare a NIC that paused; it never blames one).
    let mut host_paused: BTreeMap<&str, [f64; 2]> = BTreeMap::new();
    for v in views
        .iter()
        .filter(|v| v.entity.matches('/').count() == 1 && v.series.metric == "xirang_pfc_pause_seconds_total")
    {
        let host = v.entity.split('/').next().unwrap_or("");
        let k = usize::from(v.label("direction") == Some("rx"));
        let e = host_paused.entry(host).or_default();
        e[k] = e[k].max(v.inc);
    }
    for v in views.iter().filter(|v| v.entity.matches('/').count() == 2) {
        let m = v.series.metric.as_str();
        let n = nics.entry(&v.entity).or_default();
        if m == tx_m {
            n.tx = busy_rate(w, &v.series.points);
            n.evidence.push(v.evidence.clone());
        } else if m == rx_m {
            n.rx = busy_rate(w, &v.series.points);
            n.evidence.push(v.evidence.clone());
        } else if m == marked_m {
            n.marked_rx = v.inc;
            n.evidence.push(v.evidence.clone());
        } else if m == rate_m {
            n.link_bytes_per_s = Some(v.last);
            n.evidence.push(v.evidence.clone());
        } else if m == "xirang_pfc_pause_seconds_total" {
            let k = usize::from(v.label("direction") == Some("rx"));
            n.paused_secs[k] += v.inc;
        }
    }
    // The fleet's busier NIC ports: what they moved and how fast (upper quartiles).
    let upper_quartile = |f: &dyn Fn(&Nic) -> Option<f64>| {
        let mut v: Vec<f64> = nics.values().filter_map(f).filter(|x| *x > 0.0).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() * 3 / 4).copied().unwrap_or(0.0)
    };
    let rate = |x: Option<(f64, f64)>| x.filter(|(_, s)| *s > 0.0).map(|(b, s)| b / s);
    let (busy_tx, busy_rx) = (
        upper_quartile(&|n: &Nic| n.tx.map(|x| x.0)),
        upper_quartile(&|n: &Nic| n.rx.map(|x| x.0)),
    );
    let (fleet_tx, fleet_rx) = (
        upper_quartile(&|n: &Nic| rate(n.tx)),
        upper_quartile(&|n: &Nic| rate(n.rx)),
    );
    let mut judged = 0usize;
    let mut out = Vec::new();
    for (entity, n) in &nics {
        let link = n
            .link_bytes_per_s
            .or_else(|| w.nominal_rate_mbps.get(*entity).map(|m| m * 125_000.0));
        let (Some((tx_bytes, tx_s)), Some((rx_bytes, rx_s)), Some(link)) = (n.tx, n.rx, link) else {
            continue;
        };
        // A NIC that moved a fraction of what the busier ones moved carries other
        // (lighter) work: its rate says nothing about its host.
        if tx_s <= 0.0
            || rx_s <= 0.0
            || link <= 0.0
            || tx_bytes < BOUNCE_MIN_VOLUME_SHARE * busy_tx
            || rx_bytes < BOUNCE_MIN_VOLUME_SHARE * busy_rx
        {
            continue;
        }
        judged += 1;
        let (tx, rx) = (tx_bytes / tx_s, rx_bytes / rx_s);
        let (tx_share, rx_share) = (tx / link, rx / link);
        if tx_share >= BOUNCE_RATE_SHARE
            || rx_share >= BOUNCE_RATE_SHARE
            || tx >= BOUNCE_RATE_SHARE * fleet_tx
            || rx >= BOUNCE_RATE_SHARE * fleet_rx
        {
            continue;
        }
        // Paused (held by its switch, or holding it), or sent slowly because the path
        // to it congested (its senders' packets arrive ECN-marked): the fabric explains
        // the receive side, not the host. The send side may be congestion too; the host
        // is named only when what it is sent was held back with the fabric clear.
        let active = tx_s.max(rx_s);
        let host = entity.split('/').next().unwrap_or("?");
        let on_host = host_paused.get(host).copied().unwrap_or_default();
        if n.paused_secs
            .iter()
            .chain(&on_host)
            .any(|p| *p > BOUNCE_MAX_PAUSE_SHARE * active)
            || n.marked_rx > BOUNCE_MAX_MARKED_PER_MB * rx_bytes / 1e6
        {
            continue;
        }
        let gbps = |bps: f64| bps * 8.0 / 1e9;
        out.push(Finding {
            rule: "HOST-BOUNCE",
            class: Class::HostConfig,
            entity: entity.to_string(),
            severity: if tx_share < BOUNCE_RATE_SHARE_HIGH && rx_share < BOUNCE_RATE_SHARE_HIGH {
                Severity::High
            } else {
                Severity::Medium
            },
            cause: format!(
                "{entity} sent at {:.1} and was sent {:.1} Gbit/s while busy, on a {:.0} Gbit/s link, unpaused, with what it received unmarked by congestion and no link fault: its host cannot feed or drain it (GPUDirect RDMA off, data bouncing through host memory)",
                gbps(tx),
                gbps(rx),
                gbps(link)
            ),
            confidence: 0.6,
            scope: format!(
                "every rank on {host} and its peers: collectives wait for {host}, which moves {:.0}% of its link's rate",
                100.0 * tx_share.max(rx_share)
            ),
            advice: vec![
                format!("on {host}: `lsmod | grep nvidia_peermem` (load it) or enable dma-buf (NCCL_DMABUF_ENABLE=1, kernel >= 5.12); `nvidia-smi topo -m` for the GPU-NIC path (PIX/PXB, not SYS)"),
                "run the job with NCCL_DEBUG=INFO and `xirang diagnose nccl` on its log: `GDR 0` or channels without `GDRDMA` confirm it".into(),
                "check PCIe ACS on the switches between GPU and NIC (`lspci -vvv | grep ACSCtl`: SrcValid+ redirects peer-to-peer traffic)".into(),
            ],
            evidence: n.evidence.clone(),
        });
    }
    if out.len() as f64 > BOUNCE_MAX_FLEET_SHARE * judged as f64 {
        return Vec::new();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{Series, diagnose_window};
    use xirang_telemetry::Entity;

    /// A counter rising by `per_step` every 10 s for a minute.
    fn counter(entity: &str, name: &str, per_step: f64) -> Series {
        let e: Entity = entity.parse().unwrap();
        let m = metric_for(&e, name, true);
        Series {
            metric: m.name,
            labels: m.labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            points: (0..=6)
                .map(|i| (i * 10_000, i as f64 * per_step * m.scale))
                .collect(),
        }
    }

    fn window(series: Vec<Series>, links: Vec<(String, String)>) -> Window {
        Window {
            source: "test".into(),
            since_ms: 0,
            until_ms: 60_000,
            series,
            links,
            ..Window::default()
        }
    }

    /// Four leaves (port 0 to a host, ports 4..8 up to spines 0..4), each sending
    /// `up(leaf, spine)` bytes per step to each spine, with ECN marks on the uplinks
    /// `marked(leaf, spine)` says.
    fn fabric(
        up: impl Fn(usize, usize) -> f64,
        marked: impl Fn(usize, usize) -> bool,
    ) -> (Vec<Series>, Vec<(String, String)>) {
        let mut s = Vec::new();
        let mut links = Vec::new();
        for l in 0..4 {
            links.push((format!("leaf{l}:0"), format!("h{l}/mlx5_0/1")));
            for sp in 0..4 {
                let port = format!("leaf{l}:{}", 4 + sp);
                links.push((port.clone(), format!("spine{sp}:{l}")));
                s.push(counter(&port, "SAI_PORT_STAT_IF_OUT_OCTETS", up(l, sp)));
                s.push(counter(
                    &format!("{port}/q3"),
                    QUEUE_ECN_MARKED,
                    if marked(l, sp) { 100.0 } else { 0.0 },
                ));
            }
        }
        (s, links)
    }

    #[test]
    fn a_spine_most_leaves_favour_is_hot() {
        // 70 % to spine1 from every leaf, 10 % to each other spine.
        let (s, links) = fabric(|_, sp| if sp == 1 { 7e9 } else { 1e9 }, |_, sp| sp == 1);
        let f = diagnose_window(&window(s.clone(), links));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].class, f[0].entity.as_str()),
            ("ECMP-HOT-SPINE", Class::Switch, "spine1")
        );
        assert_eq!(f[0].severity, Severity::High);
        assert!(
            f[0].cause.contains("70% of their uplink bytes to spine1"),
            "{}",
            f[0].cause
        );
        // Without the cabling there are no uplinks to compare.
        assert!(diagnose_window(&window(s, vec![])).is_empty());
        // One leaf favouring a spine is not the leaves' hashing.
        let (s, links) = fabric(|l, sp| if l == 0 && sp == 1 { 7e9 } else { 2.5e9 }, |_, _| false);
        assert!(diagnose_window(&window(s, links)).is_empty());
    }

    #[test]
    fn idle_uplinks_beside_congested_ones_at_several_leaves_are_too_few_flows() {
        // Leaves 0 and 1: nothing to one spine, double to another that marks; no spine
        // favoured overall.
        let up = |l: usize, sp: usize| match (l, sp) {
            (0, 3) | (1, 2) => 0.0,
            (0, 0) | (1, 1) => 5e9,
            _ => 2.5e9,
        };
        let (s, links) = fabric(up, |l, sp| (l, sp) == (0, 0) || (l, sp) == (1, 1));
        let f = diagnose_window(&window(s, links));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].class, f[0].entity.as_str(), f[0].severity),
            (
                "ECMP-COLLISIONS",
                Class::AppConfig,
                "NCCL_IB_QPS_PER_CONNECTION",
                Severity::Medium
            )
        );
        assert!(
            f[0].cause
                .contains("leaf0: to spine3 idle, to spine0 2.0x the mean"),
            "{}",
            f[0].cause
        );
        // At one leaf only: that leaf, low.
        let (s, links) = fabric(up, |l, sp| (l, sp) == (0, 0));
        let f = diagnose_window(&window(s, links));
        assert_eq!(
            (f[0].rule, f[0].class, f[0].entity.as_str(), f[0].severity),
            ("ECMP-COLLISIONS", Class::Switch, "leaf0", Severity::Low)
        );
        // An idle uplink with nothing congested is spare capacity, not a collision.
        let (s, links) = fabric(up, |_, _| false);
        assert!(diagnose_window(&window(s, links)).is_empty());
    }

    /// Eight 100 Gbit/s NIC ports; `h3` moves `slow_gbps` each way, h0 to h2
    /// `others_gbps[0]`, h4 to h7 `others_gbps[1]`.
    fn fleet(slow_gbps: f64, others_gbps: [f64; 2], extra: impl Fn(&str) -> Vec<Series>) -> Window {
        let mut s = Vec::new();
        for h in 0..8 {
            let e = format!("h{h}/mlx5_0/1");
            let gbps = match h {
                3 => slow_gbps,
                0..3 => others_gbps[0],
                _ => others_gbps[1],
            };
            let per_step = gbps / 8.0 * 1e9 * 10.0;
            s.push(counter(&e, "port_xmit_data", per_step / 4.0));
            s.push(counter(&e, "port_rcv_data", per_step / 4.0));
            // The link rate is a level (Mbit/s in sysfs): constant, not rising.
            let mut rate = counter(&e, "rate", 0.0);
            let m = metric_for(&e.parse::<Entity>().unwrap(), "rate", true);
            rate.points.iter_mut().for_each(|p| p.1 = 100_000.0 * m.scale);
            s.push(rate);
            s.extend(extra(&e));
        }
        window(s, vec![])
    }

    fn nics(slow_gbps: f64, extra: impl Fn(&str) -> Vec<Series>) -> Window {
        fleet(slow_gbps, [90.0, 90.0], extra)
    }

    #[test]
    fn a_nic_its_host_cannot_feed_is_host_bounce() {
        let f = diagnose_window(&nics(25.0, |_| vec![]));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].class, f[0].entity.as_str(), f[0].severity),
            ("HOST-BOUNCE", Class::HostConfig, "h3/mlx5_0/1", Severity::High)
        );
        assert!(
            f[0].cause.contains("sent at 25.0 and was sent 25.0 Gbit/s"),
            "{}",
            f[0].cause
        );
        // 52 of 100 Gbit/s (and of the others' 90): medium.
        assert_eq!(
            diagnose_window(&nics(52.0, |_| vec![]))[0].severity,
            Severity::Medium
        );
        // A lightly loaded fleet is not a fleet of starved hosts; nor is a light job
        // beside a heavy one (h3 to h7 at 10, h0 to h2 at 90 Gbit/s).
        assert!(diagnose_window(&fleet(25.0, [25.0, 25.0], |_| vec![])).is_empty());
        assert!(diagnose_window(&fleet(10.0, [90.0, 10.0], |_| vec![])).is_empty());
        // Five slow NICs of eight are a workload that runs below line rate, not five
        // hosts without GPUDirect.
        assert!(diagnose_window(&fleet(25.0, [90.0, 25.0], |_| vec![])).is_empty());
        // What it received came ECN-marked (a few per MB): the path congested, not the
        // host. At 25 Gbit/s a 10 s step is 31 GB.
        let marked = |e: &str| {
            if e.starts_with("h3/") {
                vec![counter(e, "np_ecn_marked_roce_packets", 1e5)]
            } else {
                vec![]
            }
        };
        assert!(diagnose_window(&nics(25.0, marked)).is_empty());
        // Held by its switch's pauses: the fabric's.
        let paused = |e: &str| {
            if e.starts_with("h3/") {
                vec![counter(e, "rx_prio3_pause_duration", 5e6)]
            } else {
                vec![]
            }
        };
        assert!(diagnose_window(&nics(25.0, paused)).is_empty());
        // On a live host the pause time is the netdev's (`ethtool -S`): it counts too.
        let netdev_paused = |e: &str| {
            if e.starts_with("h3/") {
                vec![counter("h3/ens1np0", "rx_prio3_pause_duration", 5e6)]
            } else {
                vec![]
            }
        };
        assert!(diagnose_window(&nics(25.0, netdev_paused)).is_empty());
    }
}
