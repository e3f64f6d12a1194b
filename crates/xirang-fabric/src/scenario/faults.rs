//! Validation of `[[faults]]`: each fault's target against the built fabric and its
//! parameters against its kind. It reads the fabric and reports; it changes nothing.

use super::overrides::bond_at;
use super::*;

/// Smallest MTU an `mtu_mismatch` fault may set: the IPv4 datagram size every host must
/// accept (RFC 791); 1500 (plain Ethernet) is the usual wrong setting.
const MIN_FAULT_MTU_BYTES: u32 = 576;
/// Largest: SONiC's default port MTU (docs/reference/switch-config.md); a port at the
/// default passes every frame a host with a 9000-byte netdev MTU sends.
const MAX_FAULT_MTU_BYTES: u32 = 9100;
/// PCIe link speeds, GT/s (Gen1 to Gen6), as `PcieLink` documents them.
const PCIE_SPEEDS_GTS: [f64; 6] = [2.5, 5.0, 8.0, 16.0, 32.0, 64.0];

/// Whether switch `sw` is one of several equal-cost next hops of some neighbour towards
/// some NIC (what an `ecmp_imbalance` fault can favour). Stops at the first NIC that
/// shows it, so it is one breadth-first search on a regular fabric.
fn is_ecmp_choice(fabric: &Fabric, sw: crate::model::SwitchId) -> bool {
    let g = crate::routing::Graph::new(fabric);
    let target = g.index(Node::Switch(sw));
    (0..fabric.nics.len()).any(|n| {
        let dist = g.distances_to(g.index(Node::Nic(crate::model::NicId(n as u32))));
        g.adj(target).iter().any(|a| {
            let hops: Vec<u32> = g.next_hops(&dist, a.peer).map(|h| h.peer).collect();
            hops.len() >= 2 && hops.contains(&target)
        })
    })
}

impl Scenario {
    pub(super) fn validate_faults(&self, fabric: &Fabric, at: &KeyPath, d: &mut Diagnostics) {
        // Faults that change a place's state (and restore it when they end) must not
        // overlap or touch on the same place: each restores what it found.
        let mut held: Vec<(usize, String, f64, f64)> = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            // One hashing bias per run: the switches' hash is one configuration.
            let global = match f.kind {
                FaultKind::EcmpImbalance => Some("the switches' ECMP hashing".to_string()),
                FaultKind::SingleQp => Some(format!("workload `{}`", f.target)),
                _ => None,
            };
            if let Some(place) = global {
                if let Some((j, _, _, _)) = held.iter().find(|(_, p, _, _)| *p == place) {
                    d.error(
                        &at.index(i).key("kind"),
                        format!(
                            "faults[{j}] already sets {place}: one `{}` per run",
                            f.kind.name()
                        ),
                    );
                }
                held.push((i, place, 0.0, f64::INFINITY));
                continue;
            }
            let Ok(p) = parse_port_ref(fabric, &f.target, None) else {
                continue;
            };
            let place = match (f.kind, p.node) {
                (FaultKind::SlowLink, _) => fabric.port_link(p).map(|l| format!("link {}", l.index())),
                (FaultKind::EcnOff | FaultKind::PfcOff, _) => {
                    Some(format!("{} port {}", f.kind.name(), f.target))
                }
                (FaultKind::SlowReceiver | FaultKind::PcieDegraded | FaultKind::GdrOff, Node::Nic(n)) => {
                    Some(format!("receive path of NIC {}", n.index()))
                }
                (FaultKind::NicFunnel, Node::Nic(n)) => {
                    Some(format!("host {}", fabric.nics[n.index()].host.index()))
                }
                _ => None,
            };
            let Some(place) = place else {
                continue;
            };
            let end = f.end_us.unwrap_or(f64::INFINITY);
            if let Some((j, _, _, _)) = held
                .iter()
                .find(|(_, p, s, e)| *p == place && f.start_us <= *e && *s <= end)
            {
                d.error(
                    &at.index(i).key("start_us"),
                    format!(
                        "overlaps or touches faults[{j}] on the same place (`{}`): faults that change a port's, link's or NIC's state must be apart in time",
                        f.target
                    ),
                );
            }
            held.push((i, place, f.start_us, end));
        }
        for (i, f) in self.faults.iter().enumerate() {
            let at = at.index(i);
            match f.kind.target_kind() {
                TargetKind::Port => match parse_port_ref(fabric, &f.target, None) {
                    Ok(p) if fabric.port_link(p).is_some() => {}
                    Ok(_) => d.error(&at.key("target"), format!("`{}`: no link on this port", f.target)),
                    Err(m) => d.error(&at.key("target"), m),
                },
                TargetKind::Switch => {
                    if fabric.switch_by_name(&f.target).is_none() {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}` takes a switch name: {}",
                                f.kind.name(),
                                unknown_name(
                                    "switch",
                                    &f.target,
                                    fabric.switches.iter().map(|s| s.name.as_str())
                                )
                            ),
                        );
                    }
                }
                TargetKind::Workload => {
                    if !self.workloads.contains_key(&f.target) {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}` takes a workload name: {}",
                                f.kind.name(),
                                unknown_name(
                                    "workload",
                                    &f.target,
                                    self.workloads.keys().map(String::as_str)
                                )
                            ),
                        );
                    }
                }
            }
            if f.kind.whole_run() && (f.start_us != 0.0 || f.end_us.is_some()) {
                d.error(
                    &at.key("start_us"),
                    format!(
                        "`{}` is configuration and holds for the whole run: it takes no start_us or end_us",
                        f.kind.name()
                    ),
                );
            }
            limits::check_time_us(f.start_us, &at.key("start_us"), d);
            if let Some(e) = f.end_us
                && limits::check_time_us(e, &at.key("end_us"), d)
                && e <= f.start_us
            {
                d.error(
                    &at.key("end_us"),
                    format!("expected a time after start_us ({}), found {e}", f.start_us),
                );
            }
            self.validate_fault_params(fabric, f, &at, d);
        }
    }

    /// Each kind takes exactly its own parameter, in range; config faults sit on a
    /// switch port, a slow receiver on a NIC port.
    fn validate_fault_params(&self, fabric: &Fabric, f: &Fault, at: &KeyPath, d: &mut Diagnostics) {
        let kind = f.kind.name();
        let target = parse_port_ref(fabric, &f.target, None).ok();
        let link_rate = target
            .and_then(|p| fabric.port_link(p))
            .map(|l| fabric.links[l.index()].rate_gbps);
        let on_switch = target.map(|p| matches!(p.node, Node::Switch(_)));
        params_of_kind(f, at, d);
        match f.kind {
            FaultKind::LinkErrors => {
                if let Some(l) = f.loss
                    && !(l > 0.0 && l <= 1.0)
                {
                    d.error(
                        &at.key("loss"),
                        format!("expected a share of packets in (0, 1], found {l}"),
                    );
                }
            }
            FaultKind::SlowLink => {
                if let (Some(r), Some(nominal)) = (f.rate_gbps, link_rate) {
                    below_link(r, nominal, &at.key("rate_gbps"), d);
                }
            }
            FaultKind::SlowReceiver => {
                if on_switch == Some(true) {
                    d.error(
                        &at.key("target"),
                        format!("`{kind}` sits on a NIC port, found switch port `{}`", f.target),
                    );
                }
                if let (Some(r), Some(nominal)) = (f.drain_gbps, link_rate) {
                    below_link(r, nominal, &at.key("drain_gbps"), d);
                }
            }
            FaultKind::EcnOff | FaultKind::PfcOff | FaultKind::MtuMismatch => {
                if on_switch == Some(false) {
                    d.error(
                        &at.key("target"),
                        format!("`{kind}` sits on a switch port, found NIC port `{}`", f.target),
                    );
                }
                if let Some(m) = f.mtu_bytes
                    && !(MIN_FAULT_MTU_BYTES..=MAX_FAULT_MTU_BYTES).contains(&m)
                {
                    d.error(
                        &at.key("mtu_bytes"),
                        format!("expected an MTU of {MIN_FAULT_MTU_BYTES}..={MAX_FAULT_MTU_BYTES} bytes, found {m}"),
                    );
                }
            }
            FaultKind::PcieDegraded => pcie_degraded(fabric, f, target, at, d),
            FaultKind::NicFunnel | FaultKind::GdrOff => {
                if on_switch == Some(true) {
                    d.error(
                        &at.key("target"),
                        format!("`{kind}` names a NIC, found switch port `{}`", f.target),
                    );
                }
                if let (Some(r), Some(nominal)) = (f.bounce_gbps, link_rate) {
                    below_link(r, nominal, &at.key("bounce_gbps"), d);
                }
            }
            FaultKind::EcmpImbalance => ecmp_imbalance(fabric, f, at, d),
            FaultKind::SingleQp => {}
            FaultKind::LinkDown => bond_on_two_switches(fabric, f, target, at, d),
        }
    }
}

/// Each kind takes exactly its own parameter: one it does not take, or its own missing,
/// is an error at that key.
fn params_of_kind(f: &Fault, at: &KeyPath, d: &mut Diagnostics) {
    let kind = f.kind.name();
    let pcie = f.kind == FaultKind::PcieDegraded;
    let params: [(&str, Option<f64>, bool); 8] = [
        ("loss", f.loss, f.kind == FaultKind::LinkErrors),
        ("rate_gbps", f.rate_gbps, f.kind == FaultKind::SlowLink),
        (
            "mtu_bytes",
            f.mtu_bytes.map(f64::from),
            f.kind == FaultKind::MtuMismatch,
        ),
        ("drain_gbps", f.drain_gbps, f.kind == FaultKind::SlowReceiver),
        ("pcie_width", f.pcie_width.map(f64::from), pcie),
        ("pcie_speed_gts", f.pcie_speed_gts, pcie),
        ("share", f.share, f.kind == FaultKind::EcmpImbalance),
        ("bounce_gbps", f.bounce_gbps, f.kind == FaultKind::GdrOff),
    ];
    for (key, value, wanted) in params {
        match (value, wanted) {
            (Some(_), false) => d.error(&at.key(key), format!("`{kind}` takes no `{key}`")),
            // A degraded PCIe link needs a width or a speed (or both).
            (None, true) if !pcie => d.error(
                &at.key(key),
                format!(
                    "`{kind}` needs `{key}`, {}",
                    match key {
                        "loss" => "the share of packets corrupted (e.g. 0.001)",
                        "rate_gbps" => "the rate the link trained at, Gbit/s (e.g. 200)",
                        "mtu_bytes" => "the port's MTU, bytes (e.g. 1500)",
                        "share" => "the share of flows hashed to the switch, in (0, 1) (e.g. 0.7)",
                        "bounce_gbps" => "the rate the host's bounce buffers move data at, Gbit/s (e.g. 30)",
                        _ => "the rate the host drains received data at, Gbit/s (e.g. 20)",
                    }
                ),
            ),
            _ => {}
        }
    }
}

/// A degraded PCIe link sits on a NIC, with a width or a speed the NIC can train at.
fn pcie_degraded(fabric: &Fabric, f: &Fault, target: Option<PortRef>, at: &KeyPath, d: &mut Diagnostics) {
    let kind = f.kind.name();
    let nic = match target.map(|p| p.node) {
        Some(Node::Nic(n)) => Some(&fabric.nics[n.index()]),
        Some(Node::Switch(_)) => {
            d.error(
                &at.key("target"),
                format!("`{kind}` sits on a NIC, found switch port `{}`", f.target),
            );
            None
        }
        None => None,
    };
    if f.pcie_width.is_none() && f.pcie_speed_gts.is_none() {
        d.error(
            &at.key("pcie_width"),
            format!("`{kind}` needs `pcie_width`, `pcie_speed_gts` or both"),
        );
    }
    if let Some(nic) = nic {
        let max = nic.pcie;
        if let Some(w) = f.pcie_width
            && !(w >= 1 && w <= max.max_width && w.is_power_of_two())
        {
            d.error(
                &at.key("pcie_width"),
                format!(
                    "expected a PCIe width of 1, 2, 4, ... up to the NIC's x{}, found {w}",
                    max.max_width
                ),
            );
        }
        if let Some(g) = f.pcie_speed_gts
            && !(PCIE_SPEEDS_GTS.contains(&g) && g <= max.max_speed_gts)
        {
            d.error(
                &at.key("pcie_speed_gts"),
                format!(
                    "expected a PCIe speed of {PCIE_SPEEDS_GTS:?} GT/s up to the NIC's {}, found {g}",
                    max.max_speed_gts
                ),
            );
        }
    }
}

/// A favoured switch must be one of several equal-cost next hops, or the fault changes
/// nothing.
fn ecmp_imbalance(fabric: &Fabric, f: &Fault, at: &KeyPath, d: &mut Diagnostics) {
    if let Some(s) = f.share
        && !(s > 0.0 && s < 1.0)
    {
        d.error(
            &at.key("share"),
            format!("expected a share of flows in (0, 1), found {s}"),
        );
    }
    if let Some(sw) = fabric.switch_by_name(&f.target)
        && !is_ecmp_choice(fabric, sw)
    {
        d.error(
            &at.key("target"),
            format!(
                "`{}` is never one of several equal-cost next hops (a spine with siblings is): favouring it would change nothing",
                f.target
            ),
        );
    }
}

/// A bond member going down fails over only to members on the same switch.
fn bond_on_two_switches(
    fabric: &Fabric,
    f: &Fault,
    target: Option<PortRef>,
    at: &KeyPath,
    d: &mut Diagnostics,
) {
    if let Some(nic) = target.and_then(|t| bond_at(fabric, t)) {
        let switches: BTreeSet<_> = (0..fabric.nics[nic.index()].ports.len() as u16)
            .filter_map(|p| fabric.attached_switch(nic, p).map(|s| s.node))
            .collect();
        if switches.len() > 1 {
            d.error(
                &at.key("target"),
                format!(
                    "`{}` is a member of a bond whose ports go to {} different switches; the simulator models failover for members on one switch only",
                    f.target,
                    switches.len()
                ),
            );
        }
    }
}

/// A degraded rate: a rate a link can run at (1 Mbit/s or more), below the link's own.
fn below_link(r: f64, nominal: f64, at: &KeyPath, d: &mut Diagnostics) {
    let min = crate::limits::MIN_LINK_RATE_GBPS;
    if !(r.is_finite() && r >= min && r < nominal) {
        d.error(
            at,
            format!(
                "expected a rate of at least {min} Gbit/s (1 Mbit/s) and below the link's {nominal} Gbit/s, found {}",
                crate::limits::Num(r)
            ),
        );
    }
}
