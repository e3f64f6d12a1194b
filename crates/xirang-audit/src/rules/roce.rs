//! RoCE addressing and the QPs' defaults: each active RoCE port's v2 GID, missing or at
//! another index than on the other hosts (TRN-GID-V2, at the index NCCL would pick), and
//! a device's default traffic class against the RoCE DSCP (APP-ROCE-TCLASS). It must not
//! judge the port's link (`links`) or the QoS of the class the traffic lands in
//! (`nic_qos`, `switch_qos`).

use xirang_host::HostInventory;
use xirang_host::inventory::{RdmaDevice, RdmaPort};

use super::{Finding, Layer, Severity, devices, ev, majority, port_name};
use crate::cluster::Cluster;

/// Index of the RoCE v2 GID NCCL would pick: the first IPv4-mapped RoCE v2 entry, else
/// the first RoCE v2 entry.
fn v2_gid_index(p: &RdmaPort) -> Option<u16> {
    let v2 = || p.gids.iter().filter(|g| g.kind.as_deref() == Some("RoCE v2"));
    v2().find(|g| g.gid.starts_with("0000:0000:0000:0000:0000:ffff:"))
        .or_else(|| v2().next())
        .map(|g| g.index)
}

pub(super) fn gids(c: &Cluster, out: &mut Vec<Finding>) {
    let roce: Vec<(&HostInventory, &RdmaDevice, &RdmaPort)> = devices(c)
        .flat_map(|(h, d)| {
            d.ports
                .iter()
                .filter(|p| p.is_roce() && p.is_up())
                .map(move |p| (h, d, p))
        })
        .collect();
    let usual = majority(roce.iter().filter_map(|(_, _, p)| v2_gid_index(p))).map(|x| x.0);
    for (h, d, p) in roce {
        let dir = format!("sys/class/infiniband/{}/ports/{}/gid_attrs/types", d.name, p.port);
        match v2_gid_index(p) {
            None => out.push(Finding {
                rule: "TRN-GID-V2",
                severity: Severity::Error,
                layer: Layer::Transport,
                entity: port_name(h, d, p),
                message: format!(
                    "no RoCE v2 GID on this RoCE port ({} GIDs, types: {}): RoCE v2 QPs cannot be routed over IP",
                    p.gids.len(),
                    p.gids.iter().map(|g| g.kind.clone().unwrap_or_else(|| "?".into())).collect::<Vec<_>>().join(", ")
                ),
                evidence: p
                    .gids
                    .iter()
                    .map(|g| {
                        let kind = g.kind.clone().unwrap_or_else(|| "unreadable".into());
                        if g.from_show_gids {
                            ev(h, &format!("commands/show_gids.txt {} {} {}", d.name, p.port, g.index), kind)
                        } else {
                            ev(h, &format!("{dir}/{}", g.index), kind)
                        }
                    })
                    .collect(),
                fix: "give the netdev an IP address (the kernel then adds its RoCE v2 GID); check `cma_roce_mode -d <dev> -p 1` is 2".into(),
            }),
            Some(i) if usual.is_some_and(|u| u != i) => out.push(Finding {
                rule: "TRN-GID-V2",
                severity: Severity::Warning,
                layer: Layer::Transport,
                entity: port_name(h, d, p),
                message: format!("RoCE v2 GID at index {i} where the other hosts have it at {}: one NCCL_IB_GID_INDEX for the job picks the wrong GID here", usual.unwrap_or_default()),
                evidence: vec![if p.gids.iter().any(|g| g.from_show_gids) {
                    ev(h, &format!("commands/show_gids.txt {} {} {i}", d.name, p.port), "v2")
                } else {
                    ev(h, &format!("{dir}/{i}"), "RoCE v2")
                }],
                fix: "use the same address layout on every host (or leave NCCL_IB_GID_INDEX unset so NCCL picks per host)".into(),
            }),
            Some(_) => {}
        }
    }
}

pub(super) fn tclass(c: &Cluster, out: &mut Vec<Finding>) {
    let want = c.policy.roce_dscp;
    for (h, d) in devices(c) {
        let Some(tos) = d.traffic_class else { continue };
        // TOS = DSCP x 4 + ECN bits (docs/reference/switch-config.md §2).
        let dscp = tos >> 2;
        if dscp == want {
            continue;
        }
        let want_tos = (want << 2) | 0b10;
        out.push(Finding {
            rule: "APP-ROCE-TCLASS",
            severity: Severity::Error,
            layer: Layer::Application,
            entity: format!("{}/{}", h.hostname, d.name),
            message: format!("QPs default to traffic class {tos} (DSCP {dscp}), not the RoCE DSCP {want}: applications that do not set it (NCCL without NCCL_IB_TC) send on a lossy class"),
            evidence: vec![ev(h, &format!("sys/class/infiniband/{}/tc/1/traffic_class", d.name), tos)],
            fix: format!("echo {want_tos} > /sys/class/infiniband/{}/tc/1/traffic_class; cma_roce_tos -d {} -t {want_tos}; NCCL_IB_TC={want_tos}", d.name, d.name),
        });
    }
}
