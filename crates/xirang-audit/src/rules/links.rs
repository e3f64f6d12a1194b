//! The physical links: a NIC the cabling lists but its host does not show
//! (PHY-NIC-MISSING), an RDMA port not ACTIVE / LinkUp (PHY-PORT-DOWN; a disabled port
//! nothing is cabled to is a choice), and a link running below its switch port's speed,
//! its model's usual rate, or what both ends of an IB link allow by `iblinkinfo`
//! (PHY-LINK-RATE). It must not judge a link's error counters (`counters`) or its PCIe
//! side (`pcie`).

use std::collections::BTreeMap;

use super::{Evidence, Finding, Layer, Severity, devices, ev, majority, model_of, port_name};
use crate::cluster::Cluster;

/// `phys_state` codes (docs/reference/linux-rdma-sysfs.md §1.1).
const PHYS_POLLING: u8 = 2;
const PHYS_DISABLED: u8 = 3;

pub(super) fn link_rate(c: &Cluster, out: &mut Vec<Finding>) {
    let mut rates: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (_, d) in devices(c) {
        for p in &d.ports {
            if p.is_up()
                && let Some(r) = p.rate_gbps
            {
                rates.entry(model_of(d)).or_default().push(r as u64);
            }
        }
    }
    for (h, d) in devices(c) {
        for p in d.ports.iter().filter(|p| p.is_up()) {
            let Some(rate) = p.rate_gbps else { continue };
            let rate_path = format!("sys/class/infiniband/{}/ports/{}/rate", d.name, p.port);
            let netdev = d.netdevs.first().map(String::as_str);
            // Against the switch port it is cabled to.
            if let Some(cable) = c.cable_of(&h.hostname, &d.name, netdev)
                && let Some(sw) = c.switch(&cable.switch)
                && let Some(speed) = sw.db.ports.get(&cable.port).and_then(|p| p.speed_mbps)
                && rate * 1000.0 < speed as f64
            {
                out.push(Finding {
                    rule: "PHY-LINK-RATE",
                    severity: Severity::Error,
                    layer: Layer::Physical,
                    entity: port_name(h, d, p),
                    message: format!("runs at {rate} Gb/s on a {} Gb/s switch port {}:{}", speed / 1000, cable.switch, cable.port),
                    evidence: vec![
                        ev(h, &rate_path, p.rate_text.as_deref().unwrap_or_default()),
                        Evidence { source: format!("{}: PORT|{}.speed", sw.source, cable.port), value: speed.to_string() },
                    ],
                    fix: "check the cable and transceiver (lanes down or a lower-speed module); reseat or replace, then confirm with `ethtool <if>`".into(),
                });
                continue;
            }
            // Against the same model's usual rate.
            if let Some((usual, n)) = majority(rates.get(&model_of(d)).into_iter().flatten().copied())
                && (rate as u64) < usual
            {
                out.push(Finding {
                    rule: "PHY-LINK-RATE",
                    severity: Severity::Error,
                    layer: Layer::Physical,
                    entity: port_name(h, d, p),
                    message: format!("runs at {rate} Gb/s where {n} {} ports run {usual} Gb/s", model_of(d)),
                    evidence: vec![ev(h, &rate_path, p.rate_text.as_deref().unwrap_or_default())],
                    fix: "check the cable and transceiver (lanes down or a lower-speed module); reseat or replace".into(),
                });
            }
        }
    }
}

/// IB links trained below what both ends allow, as `iblinkinfo` reports them (its `Could
/// be ...` note), from whichever host captured it; one finding per switch port.
pub(super) fn ib_links(c: &Cluster, out: &mut Vec<Finding>) {
    let mut seen = std::collections::BTreeSet::new();
    for h in &c.hosts {
        for l in h.tools.iblinkinfo.iter().flatten() {
            let Some(could) = &l.could_be else { continue };
            if !l.is_up() || !seen.insert((l.switch.clone(), l.port)) {
                continue;
            }
            let now = format!(
                "{} {} Gbps",
                l.width.as_deref().unwrap_or("?"),
                l.speed_gbps.map_or("?".to_string(), |s| s.to_string())
            );
            out.push(Finding {
                rule: "PHY-LINK-RATE",
                severity: Severity::Error,
                layer: Layer::Physical,
                entity: format!("{}:{}", l.switch, l.port),
                message: format!(
                    "IB link to {} trained at {now}; iblinkinfo: {could}",
                    l.remote.as_deref().map_or("its peer".to_string(), |r| format!("\"{r}\""))
                ),
                evidence: vec![ev(h, &format!("commands/iblinkinfo.txt:{}", l.line), format!("{now} ({could})"))],
                fix: "check the cable and transceivers of this link (a lower-rated or damaged cable trains down), then reset the port (`ibportstate <lid> <port> reset`) and confirm with iblinkinfo".into(),
            });
        }
    }
}

pub(super) fn ports(c: &Cluster, out: &mut Vec<Finding>) {
    for (host, nic, sw, port) in &c.missing_nics {
        out.push(Finding {
            rule: "PHY-NIC-MISSING",
            severity: Severity::Error,
            layer: Layer::Physical,
            entity: format!("{host}/{nic}"),
            message: format!("the cabling puts {nic} on {sw}:{port}, but {host} shows no RDMA device or netdev of that name (dead card, failed driver, or renamed interface)"),
            evidence: c
                .hosts
                .iter()
                .filter(|h| &h.hostname == host)
                .map(|h| ev(h, "sys/class/infiniband", h.rdma.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(" ")))
                .collect(),
            fix: "check `dmesg` for mlx5 errors and `lspci` for the card; reseat or replace it, or fix the cabling file".into(),
        });
    }
    for (h, d) in devices(c) {
        for p in &d.ports {
            if p.is_up() || (p.state.is_none() && p.phys_state.is_none()) {
                continue;
            }
            let netdev = d.netdevs.first().map(String::as_str);
            let cabled = c.cable_of(&h.hostname, &d.name, netdev).is_some();
            let phys = p.phys_state.as_ref().map(|s| s.code);
            // An administratively disabled port that nothing is cabled to is a choice.
            if phys == Some(PHYS_DISABLED) && c.cabling.is_some() && !cabled {
                continue;
            }
            let dir = format!("sys/class/infiniband/{}/ports/{}", d.name, p.port);
            let state = p
                .state
                .as_ref()
                .map_or("?".into(), |s| format!("{}: {}", s.code, s.name));
            let phys_s = p
                .phys_state
                .as_ref()
                .map_or("?".into(), |s| format!("{}: {}", s.code, s.name));
            out.push(Finding {
                rule: "PHY-PORT-DOWN",
                severity: Severity::Error,
                layer: Layer::Physical,
                entity: port_name(h, d, p),
                message: match phys {
                    Some(PHYS_POLLING) => "port is polling: no link partner (cable unplugged, bad cable or transceiver, switch port down)".into(),
                    Some(PHYS_DISABLED) => "port is disabled".into(),
                    _ => format!("port state {state}, physical state {phys_s} (a working port reads 4: ACTIVE and 5: LinkUp)"),
                },
                evidence: vec![ev(h, &format!("{dir}/state"), state), ev(h, &format!("{dir}/phys_state"), phys_s)],
                fix: "check the cable, the transceiver and the switch port (admin up, same speed and FEC); `ip link set <if> up` if disabled".into(),
            });
        }
    }
}
