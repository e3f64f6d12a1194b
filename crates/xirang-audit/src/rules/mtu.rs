//! MTU: an RDMA netdev's MTU against the policy's (else the fabric's most common), a
//! RoCE active MTU below what its netdev gives, a switch port below the host behind it,
//! the two ends of a switch link apart (NET-MTU-PATH), and jumbo frames not in use at
//! all (NET-MTU-JUMBO). A switch port without an `mtu` field has SONiC's default; one
//! without a PORT entry has no MTU, and must not be taken for the default.

use xirang_host::HostInventory;
use xirang_host::inventory::{RdmaDevice, roce_active_mtu};

use super::{Evidence, Finding, Layer, Severity, devices, ev, majority, port_name};
use crate::cluster::Cluster;

/// A RoCE port must reach this IB MTU to use jumbo frames (docs/reference/linux-rdma-sysfs.md §4).
const ROCE_JUMBO_MTU_BYTES: u32 = 4096;

/// SONiC's port MTU when `PORT|<port>` has no `mtu` field
/// (docs/reference/switch-config.md §1, PORT).
const SONIC_DEFAULT_MTU_BYTES: u32 = 9100;

pub(super) fn mtu(c: &Cluster, out: &mut Vec<Finding>) {
    // Netdev MTU of every RDMA interface: against the policy, else the majority.
    let nics: Vec<(&HostInventory, &RdmaDevice, u32)> = devices(c)
        .filter(|(_, d)| d.ports.iter().any(|p| p.is_roce()))
        .filter_map(|(h, d)| h.netdev_of(d).and_then(|n| n.mtu_bytes).map(|m| (h, d, m)))
        .collect();
    let expected = c
        .policy
        .mtu_bytes
        .or_else(|| majority(nics.iter().map(|x| x.2)).map(|x| x.0));
    if let Some(want) = expected {
        for (h, d, m) in &nics {
            if *m != want {
                let nd = h.netdev_of(d).map(|n| n.name.clone()).unwrap_or_default();
                out.push(Finding {
                    rule: "NET-MTU-PATH",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: format!("{}/{nd}", h.hostname),
                    message: format!(
                        "netdev MTU {m} (RoCE MTU {}) where the fabric uses {want} (RoCE MTU {}): QPs to this host fall to the smaller path MTU",
                        roce_active_mtu(*m),
                        roce_active_mtu(want)
                    ),
                    evidence: vec![ev(h, &format!("sys/class/net/{nd}/mtu"), m)],
                    fix: format!("ip link set {nd} mtu {want} (and persist it in the network configuration)"),
                });
            }
        }
        // RoCE active MTU as ibv_devinfo reports it, where the netdev MTU is fine: the
        // port negotiated less than the netdev allows (docs/reference/linux-rdma-sysfs.md §4).
        for (h, d, m) in &nics {
            if *m != want {
                continue;
            }
            // A port that is down has no active MTU to judge (ibv_devinfo still prints
            // one); PHY-PORT-DOWN says what is wrong with it.
            let Some(p) = d.ports.iter().find(|p| p.is_roce() && p.is_up()) else {
                continue;
            };
            // Reported by ibv_devinfo when captured; otherwise derived from the netdev MTU,
            // which is `want` here, so only a captured value can differ.
            let reported = h.active_mtu_bytes(d, p.port);
            if let Some(active) = reported
                && active != roce_active_mtu(want)
            {
                out.push(Finding {
                    rule: "NET-MTU-PATH",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: port_name(h, d, p),
                    message: format!("RoCE active MTU {active} where netdev MTU {want} gives {} on the other hosts", roce_active_mtu(want)),
                    evidence: vec![ev(h, "commands/ibv_devinfo-v.txt", format!("{} port {} active_mtu {active}", d.name, p.port))],
                    fix: format!("check the MTU of the netdev the GID uses (a VLAN or bond above {} may have a smaller MTU) and re-create the QPs", d.netdevs.first().map(String::as_str).unwrap_or("the port")),
                });
            }
        }
        // Cluster-wide: jumbo frames at all?
        if roce_active_mtu(want) < ROCE_JUMBO_MTU_BYTES && !nics.is_empty() {
            out.push(Finding {
                rule: "NET-MTU-JUMBO",
                severity: Severity::Warning,
                layer: Layer::Network,
                entity: "cluster".into(),
                message: format!("RDMA interfaces use MTU {want}, so RoCE runs with {}-byte packets instead of 4096", roce_active_mtu(want)),
                evidence: nics.iter().take(3).map(|(h, d, m)| ev(h, &format!("sys/class/net/{}/mtu", h.netdev_of(d).map(|n| n.name.as_str()).unwrap_or("?")), m)).collect(),
                fix: "set MTU 9000 on the RDMA interfaces and at least 9100 on every switch port on their paths".into(),
            });
        }
    }
    let Some(cabling) = &c.cabling else { return };
    // Host to switch port: the switch port must carry the host's frames.
    for cable in &cabling.links {
        let Some(sw) = c.switch(&cable.switch) else {
            continue;
        };
        let sw_mtu = effective_mtu(&sw.db, &cable.port);
        let sw_ev = Evidence {
            source: format!("{}: PORT|{}.mtu", sw.source, cable.port),
            value: mtu_text(&sw.db, &cable.port),
        };
        if let (Some(host), Some(nic)) = (&cable.host, &cable.nic) {
            let Some(h) = c.hosts.iter().find(|x| &x.hostname == host) else {
                continue;
            };
            let nd = h
                .rdma
                .iter()
                .find(|d| &d.name == nic)
                .and_then(|d| h.netdev_of(d))
                .or_else(|| h.netdev(nic));
            let Some(nd) = nd else { continue };
            let Some(m) = nd.mtu_bytes else { continue };
            match sw_mtu {
                Some(s) if s >= m => {}
                _ => out.push(Finding {
                    rule: "NET-MTU-PATH",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: format!("{}:{}", cable.switch, cable.port),
                    message: format!(
                        "switch port MTU {} is below the MTU {m} of {host}/{} behind it: full-size RoCE frames are dropped (rx_oversize_pkts_phy)",
                        sw_mtu.map_or("(no PORT entry)".into(), |s| s.to_string()),
                        nd.name
                    ),
                    evidence: vec![sw_ev.clone(), ev(h, &format!("sys/class/net/{}/mtu", nd.name), m)],
                    fix: format!("config interface mtu {} {}  (SONiC; then `config save`)", cable.port, m.max(9100)),
                }),
            }
        } else if let (Some(ps), Some(pp)) = (&cable.peer_switch, &cable.peer_port) {
            let Some(peer) = c.switch(ps) else { continue };
            let peer_mtu = effective_mtu(&peer.db, pp);
            if sw_mtu != peer_mtu {
                out.push(Finding {
                    rule: "NET-MTU-PATH",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: format!("{}:{} - {ps}:{pp}", cable.switch, cable.port),
                    message: format!(
                        "the two ends of a switch link disagree on MTU ({} vs {})",
                        sw_mtu.map_or("no PORT entry".into(), |m| m.to_string()),
                        peer_mtu.map_or("no PORT entry".into(), |m| m.to_string())
                    ),
                    evidence: vec![
                        sw_ev,
                        Evidence {
                            source: format!("{}: PORT|{pp}.mtu", peer.source),
                            value: mtu_text(&peer.db, pp),
                        },
                    ],
                    fix: "set the same MTU (9100) on both ends: config interface mtu <port> 9100".into(),
                });
            }
        }
    }
}

/// A port's MTU: its `mtu` field, SONiC's default when the field is absent, `None` when
/// the port has no PORT entry at all.
fn effective_mtu(db: &xirang_switch::sonic::ConfigDb, port: &str) -> Option<u32> {
    db.ports
        .get(port)
        .map(|p| p.mtu_bytes.unwrap_or(SONIC_DEFAULT_MTU_BYTES))
}

fn mtu_text(db: &xirang_switch::sonic::ConfigDb, port: &str) -> String {
    match db.ports.get(port) {
        None => "no PORT entry".into(),
        Some(p) => p
            .mtu_bytes
            .map_or(format!("absent (SONiC default {SONIC_DEFAULT_MTU_BYTES})"), |m| {
                m.to_string()
            }),
    }
}
