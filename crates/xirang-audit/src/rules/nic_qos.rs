//! The hosts' QoS and congestion control on their RDMA netdevs: a NIC that trusts PCP
//! where its switch classifies RoCE by DSCP (NET-TRUST), PFC priorities apart from the
//! switch port's or off for the RoCE priority (NET-PFC-MISMATCH), DCQCN's reaction or
//! notification point off for the RoCE priority (NET-ECN-HOST), and DCQCN parameters
//! apart from the other hosts' (NET-DCQCN-DRIFT). It reads a switch only at the port a
//! host is cabled to; it must not judge the switch ports' queues and buffers
//! (`switch_qos`).

use std::collections::BTreeMap;

use xirang_fabric::mlx5::Dir;
use xirang_host::HostInventory;

use super::{Evidence, Finding, Layer, Severity, devices, ev, majority};
use crate::cluster::Cluster;

fn host_pfc(h: &HostInventory, netdev: &str) -> Option<Vec<u8>> {
    h.tools.mlnx_qos.get(netdev).map(|q| q.pfc_priorities())
}

pub(super) fn pfc(c: &Cluster, out: &mut Vec<Finding>) {
    let prio = c.policy.roce_priority;
    for (h, d) in devices(c) {
        let Some(nd) = h.netdev_of(d) else { continue };
        let Some(host) = host_pfc(h, &nd.name) else {
            continue;
        };
        let qos_path = format!("commands/mlnx_qos-i-{}.txt", nd.name);
        let show = |v: &[u8]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
            }
        };
        if let Some(cable) = c.cable_of(&h.hostname, &d.name, Some(&nd.name))
            && let Some(sw) = c.switch(&cable.switch)
            && let Some(q) = h.tools.mlnx_qos.get(&nd.name)
            && q.trust == Some(xirang_host::parse::mlnx_qos::Trust::Pcp)
            && sw.db.dscp_to_tc(&cable.port, c.policy.roce_dscp).is_some()
        {
            out.push(Finding {
                rule: "NET-TRUST",
                severity: Severity::Error,
                layer: Layer::Network,
                entity: format!("{}/{} - {}:{}", h.hostname, nd.name, cable.switch, cable.port),
                message: "the NIC trusts PCP (VLAN priority) but the switch classifies by DSCP: without a VLAN tag RoCE leaves on priority 0, outside the lossless class (switch-config.md, check 1)".into(),
                evidence: vec![
                    ev(h, &qos_path, "Priority trust state: pcp"),
                    Evidence { source: format!("{}: PORT_QOS_MAP|{}.dscp_to_tc_map", sw.source, cable.port), value: format!("DSCP {} -> TC {}", c.policy.roce_dscp, sw.db.dscp_to_tc(&cable.port, c.policy.roce_dscp).unwrap_or_default()) },
                ],
                fix: format!("mlnx_qos -i {} --trust dscp", nd.name),
            });
        }
        if let Some(cable) = c.cable_of(&h.hostname, &d.name, Some(&nd.name))
            && let Some(sw) = c.switch(&cable.switch)
        {
            let switch = sw.db.pfc_enabled(&cable.port);
            if switch != host {
                out.push(Finding {
                    rule: "NET-PFC-MISMATCH",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: format!("{}/{} - {}:{}", h.hostname, nd.name, cable.switch, cable.port),
                    message: format!("PFC on priorities {} on the host but {} on the switch port: pauses on the others are ignored and traffic there is lossy", show(&host), show(&switch)),
                    evidence: vec![ev(h, &qos_path, format!("PFC enabled {}", show(&host))), Evidence { source: format!("{}: PORT_QOS_MAP|{}.pfc_enable", sw.source, cable.port), value: show(&switch) }],
                    fix: format!(
                        "make both {}: host `mlnx_qos -i {} --pfc {}`; switch PORT_QOS_MAP|{}.pfc_enable \"{}\"",
                        prio,
                        nd.name,
                        (0..8).map(|p| if p == prio { "1" } else { "0" }).collect::<Vec<_>>().join(","),
                        cable.port,
                        prio
                    ),
                });
                continue;
            }
        }
        if !host.contains(&prio) {
            out.push(Finding {
                rule: "NET-PFC-MISMATCH",
                severity: Severity::Error,
                layer: Layer::Network,
                entity: format!("{}/{}", h.hostname, nd.name),
                message: format!(
                    "PFC is not enabled on the RoCE priority {prio} on the host (enabled: {})",
                    show(&host)
                ),
                evidence: vec![ev(h, &qos_path, format!("PFC enabled {}", show(&host)))],
                fix: format!(
                    "mlnx_qos -i {} --pfc {}",
                    nd.name,
                    (0..8)
                        .map(|p| if p == prio { "1" } else { "0" })
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            });
        }
    }
}

pub(super) fn ecn_host(c: &Cluster, out: &mut Vec<Finding>) {
    let prio = usize::from(c.policy.roce_priority);
    for h in &c.hosts {
        for nd in h.netdevs.iter().filter(|n| n.rdma.is_some()) {
            let Some(ecn) = &nd.ecn else { continue };
            let (Some(rp), Some(np)) = (ecn.rp_enable.get(prio), ecn.np_enable.get(prio)) else {
                continue;
            };
            let mut off = Vec::new();
            if *rp != Some(true) {
                off.push((
                    Dir::Rp.name(),
                    "reaction point: the sender ignores CNPs and never slows down",
                ));
            }
            if *np != Some(true) {
                off.push((
                    Dir::Np.name(),
                    "notification point: CE-marked packets are not answered with CNPs",
                ));
            }
            if off.is_empty() {
                continue;
            }
            out.push(Finding {
                rule: "NET-ECN-HOST",
                severity: Severity::Error,
                layer: Layer::Network,
                entity: format!("{}/{}", h.hostname, nd.name),
                message: format!(
                    "DCQCN is off for the RoCE priority {prio}: {}",
                    off.iter()
                        .map(|(s, why)| format!("{s} ({why})"))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                evidence: off
                    .iter()
                    .map(|(s, _)| {
                        ev(
                            h,
                            &format!("sys/class/net/{}/ecn/{s}/enable/{prio}", nd.name),
                            if *s == Dir::Rp.name() {
                                rp.map_or("unreadable".into(), |v| u8::from(v).to_string())
                            } else {
                                np.map_or("unreadable".into(), |v| u8::from(v).to_string())
                            },
                        )
                    })
                    .collect(),
                fix: off
                    .iter()
                    .map(|(s, _)| format!("echo 1 > /sys/class/net/{}/ecn/{s}/enable/{prio}", nd.name))
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
    }
}

pub(super) fn dcqcn_drift(c: &Cluster, out: &mut Vec<Finding>) {
    let knobs: Vec<(&HostInventory, &xirang_host::inventory::Netdev, String, u64)> = c
        .hosts
        .iter()
        .flat_map(|h| h.netdevs.iter().filter(|n| n.rdma.is_some()).map(move |n| (h, n)))
        .filter_map(|(h, n)| n.ecn.as_ref().map(|e| (h, n, e)))
        .flat_map(|(h, n, e)| {
            e.rp.iter()
                .map(|(k, v)| (format!("{}/{k}", Dir::Rp.name()), *v))
                .chain(e.np.iter().map(|(k, v)| (format!("{}/{k}", Dir::Np.name()), *v)))
                .map(move |(k, v)| (h, n, k, v))
        })
        .collect();
    let mut usual: BTreeMap<&str, u64> = BTreeMap::new();
    let names: std::collections::BTreeSet<&str> = knobs.iter().map(|k| k.2.as_str()).collect();
    for name in names {
        if let Some((v, _)) = majority(knobs.iter().filter(|k| k.2 == name).map(|k| k.3)) {
            usual.insert(name, v);
        }
    }
    // (host, netdev) -> (knob, its value, the usual value, host)
    type Drift<'a> = Vec<(&'a str, u64, u64, &'a HostInventory)>;
    let mut by_nd: BTreeMap<(String, String), Drift<'_>> = BTreeMap::new();
    for (h, n, k, v) in &knobs {
        let u = usual[k.as_str()];
        if *v != u {
            by_nd
                .entry((h.hostname.clone(), n.name.clone()))
                .or_default()
                .push((k.as_str(), *v, u, h));
        }
    }
    for ((host, nd), diffs) in by_nd {
        let h = diffs[0].3;
        out.push(Finding {
            rule: "NET-DCQCN-DRIFT",
            severity: Severity::Warning,
            layer: Layer::Network,
            entity: format!("{host}/{nd}"),
            message: format!(
                "DCQCN parameters differ from the other hosts: {}",
                diffs
                    .iter()
                    .map(|(k, v, u, _)| format!("{k} {v} (others {u})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            evidence: diffs
                .iter()
                .map(|(k, v, _, _)| ev(h, &format!("sys/class/net/{nd}/ecn/{k}"), v))
                .collect(),
            fix: diffs
                .iter()
                .map(|(k, _, u, _)| format!("echo {u} > /sys/class/net/{nd}/ecn/{k}"))
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
}
