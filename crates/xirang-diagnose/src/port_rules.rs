//! Rules beyond the link counters, each a row of docs/reference/diagnosis.md §2:
//!
//! - `MTU-MISMATCH` (row 12): oversize frames dropped at a switch port.
//! - `LINK-SLOW` (row 3): a port running below its nominal rate (or, without one, below
//!   what the other NIC ports run at); both ends of a link become one finding.
//! - `PFC-STORM` (row 4): a NIC keeps its switch port paused: the host does not drain
//!   what it receives, and the pause spreads upstream.
//! - `INGRESS-DROPS` (rows 7 and 8): a switch drops packets at admission from a port of
//!   a lossless fabric: PFC is not protecting that port.
//! - `PCIE-DOWNGRADED` (row 13): a NIC's PCIe link trained below its capability; the
//!   host side caps the NIC (and its receive back-pressure becomes PFC).
//! - `NIC-FUNNEL` (row 15's placement side): one NIC of a multi-NIC host carries its
//!   traffic while the others idle, where other hosts spread theirs.
//! - `ECN-OFF` (row 11): a switch queue builds deeper than queues that mark, and marks
//!   nothing (or nothing marks anywhere while the fabric pauses).

use std::collections::BTreeMap;

use crate::finding::{Class, Evidence, Finding, Severity};
use crate::window::{
    PCIE_DOWNGRADED, QUEUE_ECN_MARKED, QUEUE_PACKETS, QUEUE_WATERMARK, SWITCH_IN_DISCARDS, SWITCH_OVERSIZE,
    View, Window,
};
use xirang_telemetry::metric::{LINK_RATE, SWITCH_PORT_SPEED, metric_for};

/// Share of the window a NIC held its switch port paused from which the pause is a
/// storm (the monitor's `pfc_pause_storm` alert fires at 0.5 held for three rounds,
/// monitoring/alert-rules.toml; over a whole window a smaller share is already a host
/// that cannot keep up).
const STORM_SHARE_HIGH: f64 = 0.5;
/// Share from which a NIC's pausing is worth a medium finding: a healthy receiver
/// drains at line rate and pauses its switch only in short bursts.
const STORM_SHARE_MEDIUM: f64 = 0.05;

/// Share of a host's NIC traffic on its busiest NIC from which the host funnels its
/// GPUs through one NIC (with two NICs an even split is 0.5; a busy NIC carrying nine
/// tenths leaves the others nearly idle).
const FUNNEL_SHARE: f64 = 0.9;
/// The fleet's typical busiest-NIC share below which its hosts spread traffic over
/// their NICs, so that a host that does not is the odd one out.
const SPREAD_SHARE: f64 = 0.75;
/// A host's NIC traffic, as a share of the typical host's, below which it is idle.
const FUNNEL_MIN_TRAFFIC_SHARE: f64 = 0.25;

/// A rate below this share of the nominal one is a trained-down link (rounding in
/// Mbit/s and Gb/s renderings stays far above it).
const SLOW_RATE_SHARE: f64 = 0.99;

fn metric(entity_kind: &str, counter: &str) -> String {
    let e: xirang_telemetry::Entity = entity_kind.parse().expect("a valid sample entity");
    metric_for(&e, counter, false).name
}

/// Runs the rules of this module.
pub fn fabric_rules(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(mtu_mismatch(views));
    out.extend(link_slow(w, views));
    out.extend(pfc_storm(w, views));
    out.extend(ingress_drops(views));
    out.extend(ecn_off(views));
    out.extend(pcie_degraded(views));
    out.extend(nic_funnel(views));
    // A NIC whose PCIe link is degraded pauses its switch because of it: the storm is
    // the PCIe finding's consequence, not a second cause.
    let pcie: Vec<String> = out
        .iter()
        .filter(|f| f.rule == "PCIE-DOWNGRADED")
        .map(|f| f.entity.clone())
        .collect();
    for f in out
        .iter_mut()
        .filter(|f| f.rule == "PFC-STORM" && pcie.contains(&f.entity))
    {
        f.cause = format!(
            "{}; explained by its degraded PCIe link (PCIE-DOWNGRADED)",
            f.cause
        );
        f.confidence = f.confidence.min(0.5);
    }
    out
}

fn nic_funnel(views: &[View<'_>]) -> Vec<Finding> {
    let tx = metric("h/d/1", "port_xmit_data");
    let rx = metric("h/d/1", "port_rcv_data");
    // host -> NIC port -> (bytes moved, evidence)
    let mut hosts: BTreeMap<&str, BTreeMap<&str, (f64, Vec<Evidence>)>> = BTreeMap::new();
    // Every NIC port a host has in the window (an idle one has levels such as its rate,
    // and no traffic series at all).
    for v in views.iter().filter(|v| v.entity.matches('/').count() == 2) {
        if let Some((host, _)) = v.entity.split_once('/') {
            hosts.entry(host).or_default().entry(&v.entity).or_default();
        }
    }
    for v in views
        .iter()
        .filter(|v| v.series.metric == tx || v.series.metric == rx)
    {
        let Some((host, _)) = v.entity.split_once('/') else {
            continue;
        };
        let e = hosts.entry(host).or_default().entry(&v.entity).or_default();
        e.0 += v.inc;
        e.1.push(v.evidence.clone());
    }
    // Each multi-NIC host's busiest-NIC share.
    let shares: Vec<(&str, f64, &str, f64)> = hosts
        .iter()
        .filter(|(_, nics)| nics.len() >= 2)
        .filter_map(|(host, nics)| {
            let total: f64 = nics.values().map(|n| n.0).sum();
            let (busy, (bytes, _)) = nics.iter().max_by(|a, b| a.1.0.total_cmp(&b.1.0))?;
            (total > 0.0).then(|| (*host, bytes / total, *busy, total))
        })
        .collect();
    if shares.len() < 2 {
        return Vec::new();
    }
    let mut sorted: Vec<f64> = shares.iter().map(|s| s.1).collect();
    sorted.sort_by(f64::total_cmp);
    let typical = sorted[sorted.len() / 2];
    let mut totals: Vec<f64> = shares.iter().map(|s| s.3).collect();
    totals.sort_by(f64::total_cmp);
    let typical_total = totals[totals.len() / 2];
    if typical >= SPREAD_SHARE {
        // Most hosts use one NIC: the workload does, not one host's configuration.
        return Vec::new();
    }
    shares
        .iter()
        // A host moving a fraction of what the others move is idle (its traffic is
        // housekeeping on one NIC), not funnelling a job.
        .filter(|(_, share, _, total)| *share >= FUNNEL_SHARE && *total >= FUNNEL_MIN_TRAFFIC_SHARE * typical_total)
        .map(|(host, share, busy, total)| {
            let nics = &hosts[host];
            Finding {
                rule: "NIC-FUNNEL",
                class: Class::AppConfig,
                entity: busy.to_string(),
                severity: Severity::High,
                cause: format!(
                    "{host} moved {:.0}% of its {:.1} MB of NIC traffic through {busy} while its other {} NIC(s) stayed nearly idle, where the other hosts spread theirs (typical busiest share {:.0}%): the application funnels several GPUs through one NIC",
                    100.0 * share,
                    total / 1e6,
                    nics.len() - 1,
                    100.0 * typical
                ),
                confidence: 0.8,
                scope: format!(
                    "every rank on {host}: its GPUs share one NIC's bandwidth ({} NICs' worth of traffic on one), so collectives run at {host}'s pace",
                    nics.len()
                ),
                advice: vec![
                    format!("on {host}: check NCCL_IB_HCA, NCCL_TOPO_FILE and CUDA_VISIBLE_DEVICES against `nvidia-smi topo -m` (each GPU should use the NIC on its PCIe switch)"),
                    "run `xirang diagnose nccl` on the job's log: its NET/IB channel lines show which NIC each GPU uses".into(),
                ],
                evidence: nics.values().flat_map(|n| n.1.iter().cloned()).collect(),
            }
        })
        .collect()
}

fn pcie_degraded(views: &[View<'_>]) -> Vec<Finding> {
    #[derive(Default)]
    struct Link {
        width: [Option<f64>; 2],
        speed: [Option<f64>; 2],
        verdict: Option<f64>,
        evidence: Vec<Evidence>,
    }
    let mut links: BTreeMap<&str, Link> = BTreeMap::new();
    let rate = metric("h/d/1", LINK_RATE);
    let mut port_gbps: BTreeMap<&str, f64> = BTreeMap::new();
    for v in views {
        let m = v.series.metric.as_str();
        if m == rate {
            port_gbps.insert(&v.entity, v.last / 125_000_000.0);
            continue;
        }
        let slot = match v.label("which") {
            Some("current") => 0,
            Some("max") => 1,
            _ => 2,
        };
        match m {
            "xirang_pcie_link_width" if slot < 2 => {
                let l = links.entry(&v.entity).or_default();
                l.width[slot] = Some(v.last);
                l.evidence.push(v.evidence.clone());
            }
            "xirang_pcie_link_speed_gts" if slot < 2 => {
                let l = links.entry(&v.entity).or_default();
                l.speed[slot] = Some(v.last);
                l.evidence.push(v.evidence.clone());
            }
            PCIE_DOWNGRADED => {
                let l = links.entry(&v.entity).or_default();
                l.verdict = Some(v.last);
                l.evidence.push(v.evidence.clone());
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (entity, l) in links {
        let (Some(cur_w), Some(max_w), Some(cur_s), Some(max_s)) =
            (l.width[0], l.width[1], l.speed[0], l.speed[1])
        else {
            continue;
        };
        // The monitor's verdict weighs the upstream port too (a Gen4 card in a Gen3 slot
        // is not degraded); without it, the function's own maximum is the measure.
        let degraded = match l.verdict {
            Some(v) => v >= 1.0,
            None => cur_w < max_w || cur_s < max_s,
        };
        if !degraded {
            continue;
        }
        let link = |w: f64, s: f64| xirang_fabric::model::PcieLink::full(s, w as u8).usable_gbps();
        let (usable, full) = (link(cur_w, cur_s), link(max_w, max_s));
        let port = port_gbps.get(entity).copied();
        let limits = port.is_some_and(|p| usable < p);
        out.push(Finding {
            rule: "PCIE-DOWNGRADED",
            class: Class::Nic,
            entity: entity.to_string(),
            severity: if limits { Severity::High } else { Severity::Medium },
            cause: format!(
                "the NIC's PCIe link trained at x{cur_w} {cur_s} GT/s instead of x{max_w} {max_s} GT/s: {usable:.0} Gbit/s host-side instead of {full:.0}{}",
                match port {
                    Some(p) if limits => format!(", below its {p:.0} Gbit/s network port"),
                    Some(p) => format!(" (still above its {p:.0} Gbit/s port)"),
                    None => String::new(),
                }
            ),
            confidence: 0.9,
            scope: format!(
                "everything {entity} sends or receives: sends are capped at the PCIe rate, and receives beyond it back up into the NIC, which pauses its switch port (PFC)"
            ),
            advice: vec![
                "`lspci -vvv -s <bdf> | grep -E 'LnkCap|LnkSta'` on the host; reseat the card or move it to another slot, check the riser and retimer".into(),
                "update the NIC firmware and the BIOS; look for PCIe AER errors in `dmesg`".into(),
            ],
            evidence: l.evidence,
        });
    }
    out
}

fn mtu_mismatch(views: &[View<'_>]) -> Vec<Finding> {
    let m = metric("s:1", SWITCH_OVERSIZE);
    views
        .iter()
        .filter(|v| v.series.metric == m && v.inc > 0.0)
        .map(|v| Finding {
            rule: "MTU-MISMATCH",
            class: Class::SwitchPort,
            entity: v.entity.clone(),
            severity: Severity::High,
            cause: format!(
                "{} frames larger than the MTU of {} were dropped there: the port's MTU is below what the hosts send",
                v.inc, v.entity
            ),
            confidence: 0.9,
            scope: format!(
                "every flow entering {}: its full-size RoCE packets are dropped, so those flows stall on retransmission timeouts",
                v.entity
            ),
            advice: vec![
                format!(
                    "set the MTU of {} to the fabric's (SONiC default 9100: `sudo config interface mtu <port> 9100`), and check the other ports against the same value",
                    v.entity
                ),
                "compare with the hosts' netdev MTU (9000 for a 4096 RoCE MTU) and `ibv_devinfo` active_mtu".into(),
            ],
            evidence: vec![v.evidence.clone()],
        })
        .collect()
}

fn link_slow(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    let nic_rate = metric("h/d/1", LINK_RATE);
    let sw_speed = metric("s:1", SWITCH_PORT_SPEED);
    let rates: Vec<(&View<'_>, f64)> = views
        .iter()
        .filter(|v| v.series.metric == nic_rate || v.series.metric == sw_speed)
        .map(|v| (v, v.last / 125_000.0))
        .collect();
    // Without a nominal rate, a NIC port is judged against the NIC ports' usual rate
    // (a GPU cluster's NICs are one model); switch ports need the nominal rate, as a
    // switch mixes host-facing and fabric-facing speeds.
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for (v, r) in &rates {
        if v.series.metric == nic_rate {
            *counts.entry(r.round() as u64).or_insert(0) += 1;
        }
    }
    let usual_nic = counts
        .iter()
        .max_by_key(|(r, n)| (**n, **r))
        .map(|(r, _)| *r as f64);
    // Without a nominal rate, only a port that carried traffic is judged: a down or
    // uncabled port reports a meaningless rate.
    let data = [
        metric("h/d/1", "port_xmit_data"),
        metric("h/d/1", "port_rcv_data"),
    ];
    let busy: Vec<&str> = views
        .iter()
        .filter(|v| data.contains(&v.series.metric) && v.inc > 0.0)
        .map(|v| v.entity.as_str())
        .collect();
    let mut slow: BTreeMap<String, (f64, f64, Evidence)> = BTreeMap::new();
    for (v, r) in &rates {
        let nominal = w.nominal_rate_mbps.get(&v.entity).copied().or(
            if v.series.metric == nic_rate && busy.contains(&v.entity.as_str()) {
                usual_nic
            } else {
                None
            },
        );
        if let Some(n) = nominal
            && *r < SLOW_RATE_SHARE * n
        {
            slow.insert(v.entity.clone(), (*r, n, v.evidence.clone()));
        }
    }
    let peer_of = |e: &str| {
        w.links.iter().find_map(|(a, b)| {
            if a == e {
                Some(b.clone())
            } else if b == e {
                Some(a.clone())
            } else {
                None
            }
        })
    };
    let mut out = Vec::new();
    let mut done: Vec<String> = Vec::new();
    for (entity, (rate, nominal, ev)) in &slow {
        if done.contains(entity) {
            continue;
        }
        let peer = peer_of(entity);
        let mut evidence = vec![ev.clone()];
        // One finding per link, named by its host end when it has one.
        let mut name = entity.clone();
        if let Some(p) = &peer
            && let Some((_, _, pev)) = slow.get(p)
        {
            evidence.push(pev.clone());
            done.push(p.clone());
            if p.contains('/') && !entity.contains('/') {
                name = p.clone();
            }
        }
        done.push(entity.clone());
        let link = match &peer {
            Some(p) => format!("the link {entity} – {p}"),
            None => format!("the link at {entity}"),
        };
        out.push(Finding {
            rule: "LINK-SLOW",
            class: Class::Link,
            entity: name.clone(),
            severity: if *rate <= 0.5 * nominal {
                Severity::High
            } else {
                Severity::Medium
            },
            cause: format!(
                "{link} runs at {:.0} Gbit/s instead of {:.0}: trained down (a failed lane, the wrong cable, an autonegotiation or FEC mismatch)",
                rate / 1000.0,
                nominal / 1000.0
            ),
            confidence: 0.85,
            scope: format!(
                "every flow through {name} gets at most {:.0}% of its bandwidth; a collective over it runs at that link's pace",
                100.0 * rate / nominal
            ),
            advice: vec![
                format!("check the port's width and speed on both ends (`ibstat`, `ethtool <netdev>`, `mlxlink -d <dev> -m`; on the switch `show interfaces status`) for {name}"),
                "compare FEC mode and cable type on both ends; reseat or replace the cable or transceiver".into(),
            ],
            evidence,
        });
    }
    out
}

fn pfc_storm(w: &Window, views: &[View<'_>]) -> Vec<Finding> {
    let secs = w.seconds();
    // A NIC's tx pause time: the time it held its switch port paused.
    let nic_paused: Vec<&View<'_>> = views
        .iter()
        .filter(|v| {
            v.series.metric == "xirang_pfc_pause_seconds_total"
                && v.label("direction") == Some("tx")
                && v.entity.contains('/')
                && v.inc > 0.0
        })
        .collect();
    let switch_pausing: Vec<&View<'_>> = views
        .iter()
        .filter(|v| {
            v.series.metric == "xirang_switch_pfc_frames_total"
                && v.label("direction") == Some("tx")
                && v.inc > 0.0
        })
        .collect();
    let mut out = Vec::new();
    for v in nic_paused {
        // Over the time the pause counter kept rising (a storm that starts late in a long
        // window is still a storm), at least one sample interval.
        let pts = &v.series.points;
        let rising: Vec<usize> = (1..pts.len()).filter(|&i| pts[i].1 > pts[i - 1].1).collect();
        let span = match (rising.first(), rising.last()) {
            (Some(&a), Some(&b)) => {
                let units = (pts[b].0 - pts[a - 1].0).max(1) as f64;
                if w.relative { units / 1e6 } else { units / 1e3 }
            }
            _ => secs,
        };
        let share = (v.inc / span.min(secs)).min(1.0);
        let severity = if share >= STORM_SHARE_HIGH {
            Severity::High
        } else if share >= STORM_SHARE_MEDIUM {
            Severity::Medium
        } else {
            // Short bursts of pausing are a healthy receiver's.
            continue;
        };
        let host = v.entity.split('/').next().unwrap_or("?").to_string();
        let spread: Vec<String> = switch_pausing.iter().map(|s| s.entity.clone()).collect();
        let mut evidence = vec![v.evidence.clone()];
        evidence.extend(switch_pausing.iter().take(4).map(|s| s.evidence.clone()));
        out.push(Finding {
            rule: "PFC-STORM",
            class: Class::Nic,
            entity: v.entity.clone(),
            severity,
            cause: format!(
                "{} kept its switch port paused {:.0}% of the time while it paused (priority {}): the host does not drain what it receives (stuck or slow receive pipeline, PCIe back-pressure, a hung driver)",
                v.entity,
                100.0 * share,
                v.label("priority").unwrap_or("?")
            ),
            confidence: 0.8,
            scope: if spread.is_empty() {
                format!("flows to {host}")
            } else {
                format!(
                    "flows to {host}, and through {} switch port(s) pausing upstream ({}): the pause spreads to traffic that never goes to {host}",
                    spread.len(),
                    spread.iter().take(6).cloned().collect::<Vec<_>>().join(", ")
                )
            },
            advice: vec![
                format!("on {host}: `ethtool -S <netdev> | grep -E 'pci_stalled|rx_discards|pause_storm'` and `dmesg | grep -iE 'mlx5|AER'`"),
                "make sure the NIC's pause-storm prevention and the switch's PFC watchdog are on; drain or reboot the host".into(),
            ],
            evidence,
        });
    }
    out
}

fn ingress_drops(views: &[View<'_>]) -> Vec<Finding> {
    let m = metric("s:1", SWITCH_IN_DISCARDS);
    let pfc_tx: Vec<&View<'_>> = views
        .iter()
        .filter(|v| v.series.metric == "xirang_switch_pfc_frames_total" && v.label("direction") == Some("tx"))
        .collect();
    views
        .iter()
        .filter(|v| v.series.metric == m && v.inc > 0.0)
        .map(|v| {
            let sw = v.entity.split(':').next().unwrap_or("");
            let paused_here: f64 = pfc_tx.iter().filter(|p| p.entity == v.entity).map(|p| p.inc).sum();
            let paused_elsewhere: Vec<&&View<'_>> = pfc_tx
                .iter()
                .filter(|p| p.entity != v.entity && p.entity.starts_with(&format!("{sw}:")) && p.inc > 0.0)
                .collect();
            let mut evidence = vec![v.evidence.clone()];
            evidence.extend(pfc_tx.iter().filter(|p| p.entity == v.entity).map(|p| p.evidence.clone()));
            let cause = if paused_here == 0.0 {
                format!(
                    "{} dropped {} packets at admission from {} and sent no PFC pause on it{}: PFC is not enabled for the lossless priority on this port",
                    sw,
                    v.inc,
                    v.entity,
                    if paused_elsewhere.is_empty() {
                        String::new()
                    } else {
                        format!(" while {} other port(s) of {sw} did pause", paused_elsewhere.len())
                    }
                )
            } else {
                format!(
                    "{} dropped {} packets at admission from {} although it paused the sender: headroom too small for the link's length and rate",
                    sw, v.inc, v.entity
                )
            };
            Finding {
                rule: "INGRESS-DROPS",
                class: Class::SwitchPort,
                entity: v.entity.clone(),
                severity: Severity::High,
                cause,
                confidence: if paused_here == 0.0 { 0.85 } else { 0.6 },
                scope: format!(
                    "RoCE flows entering {sw} through {}: dropped packets cost go-back-N retransmissions and ACK timeouts",
                    v.entity
                ),
                advice: vec![
                    format!("check `pfc_enable` in PORT_QOS_MAP for {} (SONiC `show pfc config`) and the DSCP→TC→PG mapping", v.entity),
                    "compare the port's buffer profile (headroom, xoff) with the others of the switch".into(),
                ],
                evidence,
            }
        })
        .collect()
}

fn ecn_off(views: &[View<'_>]) -> Vec<Finding> {
    let marked_m = metric("s:1/q3", QUEUE_ECN_MARKED);
    let wm_m = metric("s:1/q3", QUEUE_WATERMARK);
    let pk_m = metric("s:1/q3", QUEUE_PACKETS);
    // (entity, queue) -> (marked, watermark, packets, evidence)
    #[derive(Default)]
    struct Q {
        marked: f64,
        watermark: f64,
        packets: f64,
        evidence: Vec<Evidence>,
    }
    let mut queues: BTreeMap<(String, String), Q> = BTreeMap::new();
    for v in views {
        let Some(queue) = v.label("queue") else {
            continue;
        };
        let q = queues.entry((v.entity.clone(), queue.to_string())).or_default();
        if v.series.metric == marked_m {
            q.marked = v.inc;
            q.evidence.push(v.evidence.clone());
        } else if v.series.metric == wm_m {
            // The deepest value seen in the window: a periodic watermark (cleared every
            // period) holds only its last period at the end. A persistent watermark may
            // still hold a peak from before the window; that is not told apart here.
            q.watermark = v.series.points.iter().map(|p| p.1).fold(0.0, f64::max);
            q.evidence.push(v.evidence.clone());
        } else if v.series.metric == pk_m {
            q.packets = v.inc;
        }
    }
    // The shallowest depth at which some queue of the same priority marked: marking works
    // there, so a queue that went deeper and marked nothing has no marking.
    let mut mark_depth: BTreeMap<&str, f64> = BTreeMap::new();
    for ((_, queue), q) in &queues {
        if q.marked > 0.0 {
            let d = mark_depth.entry(queue.as_str()).or_insert(f64::INFINITY);
            *d = d.min(q.watermark);
        }
    }
    // A queue its downstream peer paused is deep because it was held, not because its
    // traffic outran the link, and it dequeues (and marks) little: that is the pause's
    // symptom (PFC-STORM), not ECN's.
    let paused: Vec<&str> = views
        .iter()
        .filter(|v| {
            v.series.metric == "xirang_switch_pfc_frames_total"
                && v.label("direction") == Some("rx")
                && v.inc > 0.0
        })
        .map(|v| v.entity.as_str())
        .collect();
    let mut out = Vec::new();
    for ((entity, queue), q) in &queues {
        let Some(depth) = mark_depth.get(queue.as_str()) else {
            continue;
        };
        if q.marked > 0.0 || q.packets == 0.0 || q.watermark <= *depth || paused.contains(&entity.as_str()) {
            continue;
        }
        out.push(Finding {
            rule: "ECN-OFF",
            class: Class::SwitchPort,
            entity: entity.clone(),
            severity: Severity::Medium,
            cause: format!(
                "queue {queue} of {entity} built up to {:.0} bytes and marked none of {} packets, while queues of the same priority elsewhere marked from {:.0} bytes: ECN/WRED marking is off on this port",
                q.watermark, q.packets, depth
            ),
            confidence: 0.75,
            scope: format!(
                "flows through {entity}: senders get no congestion notification there, so the queue grows until PFC pauses the upstream ports (head-of-line blocking for unrelated flows)"
            ),
            advice: vec![
                format!("check the WRED profile bound to queue {queue} of {entity} (SONiC `show ecn`, QUEUE table `wred_profile`) and that `ecn` is `ecn_all`"),
                "Kmax must sit below the PFC XOFF trigger so that marking acts before pausing".into(),
            ],
            evidence: q.evidence.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{Series, diagnose_window};

    fn series(metric: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> Series {
        Series::new(metric, labels, points)
    }

    fn window(series: Vec<Series>) -> Window {
        Window {
            source: "test".into(),
            since_ms: 0,
            until_ms: 60_000,
            series,
            ..Window::default()
        }
    }

    fn rate(host: &str, gbps: f64) -> Series {
        series(
            "node_infiniband_rate_bytes_per_second",
            &[("instance", host), ("device", "mlx5_0"), ("port", "1")],
            &[(0, gbps * 125_000_000.0), (60_000, gbps * 125_000_000.0)],
        )
    }

    #[test]
    fn a_nic_below_the_fleets_usual_rate_is_a_slow_link() {
        let traffic = |host: &str| {
            series(
                "node_infiniband_port_data_transmitted_bytes_total",
                &[("instance", host), ("device", "mlx5_0"), ("port", "1")],
                &[(0, 0.0), (60_000, 1e9)],
            )
        };
        let mut s = vec![
            rate("h1", 400.0),
            rate("h2", 400.0),
            rate("h3", 200.0),
            rate("h4", 400.0),
        ];
        s.extend(["h1", "h2", "h3", "h4"].map(traffic));
        // A down port's rate says nothing: h5 carried no traffic.
        s.push(rate("h5", 10.0));
        let w = window(s);
        let f = diagnose_window(&w);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!((f[0].rule, f[0].entity.as_str()), ("LINK-SLOW", "h3/mlx5_0/1"));
        assert!(f[0].cause.contains("200 Gbit/s instead of 400"), "{}", f[0].cause);
        // A switch port has no usual rate to compare with: only a nominal one says.
        let sw = |speed_mbps: f64| {
            series(
                "xirang_switch_port_speed_bytes_per_second",
                &[("switch", "leaf0"), ("port", "Ethernet8")],
                &[(0, speed_mbps * 125_000.0)],
            )
        };
        assert!(diagnose_window(&window(vec![sw(100_000.0)])).is_empty());
        let mut w = window(vec![sw(100_000.0), rate("h9", 100.0)]);
        w.nominal_rate_mbps.insert("leaf0:Ethernet8".into(), 400_000.0);
        w.nominal_rate_mbps.insert("h9/mlx5_0/1".into(), 400_000.0);
        w.links.push(("h9/mlx5_0/1".into(), "leaf0:Ethernet8".into()));
        let f = diagnose_window(&w);
        assert_eq!(f.len(), 1, "both ends are one link: {f:#?}");
        assert_eq!(f[0].entity, "h9/mlx5_0/1");
        assert_eq!(f[0].evidence.len(), 2);
    }

    #[test]
    fn oversize_frames_are_the_mtu_rule_not_link_errors() {
        let l = [("switch", "leaf0"), ("port", "3")];
        let w = window(vec![
            series(
                "xirang_switch_port_if_in_errors_total",
                &l,
                &[(0, 0.0), (60_000, 40.0)],
            ),
            series(
                "xirang_switch_port_ether_rx_oversize_pkts_total",
                &l,
                &[(0, 0.0), (60_000, 40.0)],
            ),
        ]);
        let rules: Vec<&str> = diagnose_window(&w).iter().map(|f| f.rule).collect();
        assert_eq!(rules, vec!["MTU-MISMATCH"]);
        // More input errors than oversize frames: the rest are the link's.
        let w = window(vec![
            series(
                "xirang_switch_port_if_in_errors_total",
                &l,
                &[(0, 0.0), (60_000, 50.0)],
            ),
            series(
                "xirang_switch_port_ether_rx_oversize_pkts_total",
                &l,
                &[(0, 0.0), (60_000, 40.0)],
            ),
        ]);
        let f = diagnose_window(&w);
        let rules: Vec<&str> = f.iter().map(|f| f.rule).collect();
        assert_eq!(rules, vec!["MTU-MISMATCH", "LINK-ERRORS"]);
        assert!(f[1].cause.contains("+10"), "{}", f[1].cause);
    }

    #[test]
    fn a_netdev_pausing_its_switch_is_a_pfc_storm_at_the_nic() {
        // Production: the pause time comes from `ethtool -S` on the netdev.
        let w = window(vec![series(
            "xirang_pfc_pause_seconds_total",
            &[
                ("instance", "h5"),
                ("device", "ens1np0"),
                ("direction", "tx"),
                ("priority", "3"),
            ],
            &[
                (0, 0.0),
                (30_000, 0.0),
                (40_000, 6.0),
                (50_000, 12.0),
                (60_000, 18.0),
            ],
        )]);
        let f = diagnose_window(&w);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].class, f[0].entity.as_str()),
            ("PFC-STORM", Class::Nic, "h5/ens1np0")
        );
        // Paused 18 s of the 30 s since it started: a storm.
        assert_eq!(f[0].severity, Severity::High);
        // Received pauses are not the NIC's doing.
        let w = window(vec![series(
            "xirang_pfc_pause_seconds_total",
            &[
                ("instance", "h5"),
                ("device", "ens1np0"),
                ("direction", "rx"),
                ("priority", "3"),
            ],
            &[(0, 0.0), (60_000, 30.0)],
        )]);
        assert!(diagnose_window(&w).is_empty());
    }

    fn queue(port: &str, marked: f64, watermark: f64, packets: f64) -> Vec<Series> {
        let l = [("switch", "leaf0"), ("port", port), ("queue", "3")];
        vec![
            series(
                "xirang_switch_queue_wred_ecn_marked_packets_total",
                &l,
                &[(0, 0.0), (60_000, marked)],
            ),
            series("xirang_switch_queue_watermark_bytes", &l, &[(60_000, watermark)]),
            series(
                "xirang_switch_queue_packets_total",
                &l,
                &[(0, 0.0), (60_000, packets)],
            ),
        ]
    }

    #[test]
    fn a_deep_queue_that_never_marks_is_ecn_off_unless_held_by_a_pause() {
        let mut s = queue("1", 500.0, 1_500_000.0, 10_000.0);
        s.extend(queue("2", 0.0, 2_000_000.0, 10_000.0));
        s.extend(queue("3", 0.0, 200_000.0, 10_000.0));
        let f = diagnose_window(&window(s.clone()));
        let got: Vec<(&str, &str)> = f.iter().map(|f| (f.rule, f.entity.as_str())).collect();
        assert_eq!(
            got,
            vec![("ECN-OFF", "leaf0:2")],
            "the shallow queue had no reason to mark"
        );
        // Port 2's peer paused it: deep because held.
        s.push(series(
            "xirang_switch_pfc_frames_total",
            &[
                ("switch", "leaf0"),
                ("port", "2"),
                ("direction", "rx"),
                ("priority", "3"),
            ],
            &[(0, 0.0), (60_000, 90.0)],
        ));
        assert!(diagnose_window(&window(s)).is_empty());
    }
}

#[cfg(test)]
mod pcie_tests {
    use super::*;
    use crate::window::{Series, diagnose_window};

    fn gauge(metric: &str, labels: &[(&str, &str)], v: f64) -> Series {
        Series::new(metric, labels, &[(0, v), (60_000, v)])
    }

    fn live(verdict: f64) -> Window {
        let pci = |which: &'static str| [("instance", "h7"), ("pci", "0000:3b:00.0"), ("which", which)];
        Window {
            source: "test".into(),
            until_ms: 60_000,
            series: vec![
                gauge("xirang_pcie_link_width", &pci("current"), 8.0),
                gauge("xirang_pcie_link_width", &pci("max"), 16.0),
                gauge("xirang_pcie_link_speed_gts", &pci("current"), 16.0),
                gauge("xirang_pcie_link_speed_gts", &pci("max"), 16.0),
                gauge(
                    PCIE_DOWNGRADED,
                    &[("instance", "h7"), ("pci", "0000:3b:00.0")],
                    verdict,
                ),
            ],
            ..Window::default()
        }
    }

    #[test]
    fn a_live_hosts_pcie_link_is_judged_by_the_monitors_verdict() {
        let f = diagnose_window(&live(1.0));
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].rule, f[0].entity.as_str()),
            ("PCIE-DOWNGRADED", "h7/0000:3b:00.0")
        );
        assert!(
            f[0].cause.contains("x8 16 GT/s instead of x16 16 GT/s"),
            "{}",
            f[0].cause
        );
        // x8 where the slot above allows only x8: not degraded.
        assert!(diagnose_window(&live(0.0)).is_empty());
    }
}
