//! `[[overrides]]`: per-element deviations from the configuration, checked and applied to
//! the built fabric, and the overrides a fabric's own MTUs amount to.

use super::*;

/// Largest 802.1p priority: the PCP field of an 802.1Q tag has 3 bits.
pub(super) const MAX_PRIORITY: u8 = 7;

impl Scenario {
    pub(super) fn apply_overrides(&self, fabric: &mut Fabric, at: &KeyPath, d: &mut Diagnostics) {
        for (i, o) in self.overrides.iter().enumerate() {
            let at = at.index(i);
            if let Some(m) = o.mtu_bytes
                && m < MIN_MTU_BYTES
            {
                d.error(
                    &at.key("mtu_bytes"),
                    format!("expected an MTU >= {MIN_MTU_BYTES}, found {m}"),
                );
                continue;
            }
            if let Some(red) = &o.ecn {
                let before = d.error_count();
                red.validate(&at.key("ecn"), d);
                if d.error_count() > before {
                    continue;
                }
            }
            // A bare switch name targets all of its ports.
            let targets: Vec<crate::model::PortRef> = match fabric.switch_by_name(&o.target) {
                Some(sw) if !o.target.contains(':') => (0..fabric.switches[sw.index()].ports.len())
                    .map(|p| crate::model::PortRef {
                        node: Node::Switch(sw),
                        port: p as u16,
                    })
                    .collect(),
                _ => match parse_port_ref(fabric, &o.target, None) {
                    Ok(p) if (p.port as usize) < fabric.port_count(p.node) => vec![p],
                    Ok(p) => {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}`: port {} does not exist; `{}` has {} ports",
                                o.target,
                                p.port,
                                fabric.node_name(p.node),
                                fabric.port_count(p.node)
                            ),
                        );
                        continue;
                    }
                    Err(m) => {
                        d.error(&at.key("target"), m);
                        continue;
                    }
                },
            };
            for p in targets {
                if let Some(m) = o.mtu_bytes {
                    match p.node {
                        Node::Nic(n) => fabric.nics[n.index()].ports[p.port as usize].mtu_bytes = m,
                        Node::Switch(s) => fabric.switches[s.index()].ports[p.port as usize].mtu_bytes = m,
                    }
                }
                if let Some(r) = o.link_rate_gbps {
                    match fabric.port_link(p) {
                        Some(l) => {
                            if crate::limits::check_link_rate_gbps(r, &at.key("link_rate_gbps"), d) {
                                fabric.links[l.index()].rate_gbps = r
                            }
                        }
                        None => d.error(&at.key("target"), format!("`{}`: no link on this port", o.target)),
                    }
                }
                match p.node {
                    Node::Nic(n) => {
                        if let Some(fw) = &o.firmware {
                            fabric.nics[n.index()].firmware = fw.clone();
                        }
                        if let Some(pcie) = o.pcie {
                            fabric.nics[n.index()].pcie = pcie;
                        }
                        if o.ecn.is_some() {
                            d.error(
                                &at.key("target"),
                                format!("`{}` is a NIC; `ecn` applies to switch ports", o.target),
                            );
                        }
                        if let Some(c) = &o.congestion {
                            let before = d.error_count();
                            for (k, list) in [
                                ("rp_priorities", &c.rp_priorities),
                                ("np_priorities", &c.np_priorities),
                            ] {
                                if let Some(p) = list.iter().find(|&&p| p > MAX_PRIORITY) {
                                    d.error(
                                        &at.key("congestion").key(k),
                                        format!("expected priorities 0 to {MAX_PRIORITY}, found {p}"),
                                    );
                                }
                            }
                            c.dcqcn.validate(&at.key("congestion").key("dcqcn"), d);
                            if d.error_count() == before {
                                fabric.nics[n.index()].congestion = Some(c.clone());
                            }
                        }
                    }
                    Node::Switch(s) => {
                        if let Some(red) = o.ecn {
                            fabric.switches[s.index()].ports[p.port as usize].ecn = Some(red);
                        }
                        if o.firmware.is_some() || o.pcie.is_some() || o.congestion.is_some() {
                            d.error(
                                &at.key("target"),
                                format!(
                                    "`{}` is a switch port; `firmware`, `pcie` and `congestion` apply to NICs",
                                    o.target
                                ),
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Overrides that reproduce every port MTU of `fabric` that differs from `config`'s
/// defaults, for writing a fabric back out as an explicit scenario.
pub fn mtu_overrides(fabric: &Fabric, config: &FabricConfig) -> Vec<Override> {
    let mut v = Vec::new();
    let mut push = |target: String, mtu: u32| {
        v.push(Override {
            target,
            mtu_bytes: Some(mtu),
            firmware: None,
            pcie: None,
            link_rate_gbps: None,
            congestion: None,
            ecn: None,
        })
    };
    for (ni, n) in fabric.nics.iter().enumerate() {
        for (pi, p) in n.ports.iter().enumerate() {
            if p.mtu_bytes != config.mtu.nic_bytes {
                let r = crate::model::PortRef {
                    node: Node::Nic(crate::model::NicId(ni as u32)),
                    port: pi as u16,
                };
                push(fabric.port_name(r), p.mtu_bytes);
            }
        }
    }
    for (si, s) in fabric.switches.iter().enumerate() {
        for (pi, p) in s.ports.iter().enumerate() {
            if p.mtu_bytes != config.mtu.switch_bytes {
                let r = crate::model::PortRef {
                    node: Node::Switch(crate::model::SwitchId(si as u32)),
                    port: pi as u16,
                };
                push(fabric.port_name(r), p.mtu_bytes);
            }
        }
    }
    v
}

/// The NIC of several cabled ports (a bond) at either end of the link at `p`, if any.
pub(super) fn bond_at(fabric: &Fabric, p: PortRef) -> Option<crate::model::NicId> {
    let nic = match p.node {
        Node::Nic(n) => n,
        Node::Switch(s) => {
            let l = fabric.switches[s.index()].ports.get(p.port as usize)?.link?;
            match fabric.links[l.index()].other(p.node).node {
                Node::Nic(n) => n,
                Node::Switch(_) => return None,
            }
        }
    };
    let cabled = fabric.nics[nic.index()]
        .ports
        .iter()
        .filter(|p| p.link.is_some())
        .count();
    (cabled > 1).then_some(nic)
}
