//! The audited inventory as the fabric model: an explicit-topology scenario that
//! `xirang scenario check`, `xirang sim` and `xirang tune` load, so a real cluster can be
//! simulated and tuned.
//!
//! What is read, not assumed: hosts, their GPUs and NICs with PCIe links and firmware,
//! PCIe switches (the bridge each device hangs under, with its NUMA node as socket), NIC
//! port speeds, switch ports, the cabling, and MTUs (as overrides). What the inventory
//! cannot tell (GPU model names, cable lengths) is filled with the PCI id and the
//! scenario default delay. The knobs the simulator runs on, each NIC's DCQCN settings and
//! each switch port's ECN profile, are [`knob_overrides`], kept out of the written
//! scenario: there they would shadow the classes' and tiers' settings that `xirang tune`
//! searches (`xirang monitor --twin` adds them to a scenario as the inventory holds them).

use std::collections::BTreeMap;

use xirang_fabric::config::{NicCongestion, RedProfile};
use xirang_fabric::model::{PcieLink, Tier};
use xirang_fabric::scenario::Override;
use xirang_fabric::topology::{
    ExplicitTopology, GpuSpec, HostSpec, LinkSpec, NicSpec, PcieSwitchSpec, SwitchSpec,
};
use xirang_host::inventory::{HostInventory, PciFunction, PciRole, RoceEcn};
use xirang_switch::sonic::{ConfigDb, WredProfile};

use crate::cluster::{Cable, Cluster};

/// Delay of a cable whose length is unknown: the scenario default (1 µs, a few metres of
/// fibre plus the switch's pipeline) is set by leaving `delay_ns` at its default.
fn pcie(f: &PciFunction) -> Option<PcieLink> {
    f.link.map(|l| PcieLink {
        cur_speed_gts: l.cur_speed_gts,
        cur_width: l.cur_width,
        max_speed_gts: l.max_speed_gts,
        max_width: l.max_width,
    })
}

/// The PCIe switch a function sits under: the outermost bridge below its root port
/// (the switch's upstream port), or the root port itself when it hangs off the CPU.
fn pcie_switch_of(f: &PciFunction) -> String {
    f.upstream
        .get(1)
        .or_else(|| f.upstream.first())
        .cloned()
        .unwrap_or_else(|| f.root.clone())
}

/// Builds the explicit topology and the TOML of a scenario holding it.
pub fn to_scenario(c: &Cluster, name: &str) -> (ExplicitTopology, String) {
    let mut topo = ExplicitTopology::default();
    // Each NIC's and switch port's MTU, as `[[overrides]]` targets.
    let mut overrides: Vec<(String, u32)> = Vec::new();
    for h in &c.hosts {
        topo.hosts.push(host_spec(h, &mut overrides));
    }
    let port_index = add_switches(c, &mut topo, &mut overrides);
    if let Some(cab) = &c.cabling {
        for cable in &cab.links {
            if let Some(l) = cable_link(c, cable, &port_index) {
                topo.links.push(l);
            }
        }
    }
    let text = scenario_text(c, name, &topo, overrides);
    (topo, text)
}

/// A host as the model has it: its GPUs and RDMA NICs under the PCIe switches they hang
/// under (a socket per NUMA node seen), with each NIC's MTU added to `overrides`.
fn host_spec(h: &HostInventory, overrides: &mut Vec<(String, u32)>) -> HostSpec {
    let mut switches: BTreeMap<String, u8> = BTreeMap::new();
    let mut spec = HostSpec {
        name: h.hostname.clone(),
        sockets: 1,
        pcie_switches: Vec::new(),
        gpus: Vec::new(),
        nics: Vec::new(),
    };
    let mut add_switch = |f: &PciFunction| {
        let key = pcie_switch_of(f);
        let socket = f.numa_node.map_or(0, |n| u8::try_from(n).unwrap_or(u8::MAX));
        switches.entry(key.clone()).or_insert(socket);
        key
    };
    for (i, g) in h.pci.iter().filter(|f| f.role == PciRole::Gpu).enumerate() {
        let Some(link) = pcie(g) else { continue };
        spec.gpus.push(GpuSpec {
            name: format!("GPU{i}"),
            model: format!("{:04x}:{:04x}", g.vendor.unwrap_or(0), g.device.unwrap_or(0)),
            pcie_switch: add_switch(g),
            pcie: link,
        });
    }
    for d in &h.rdma {
        let Some(f) = d.pci.as_ref().and_then(|b| h.pci(b)) else {
            continue;
        };
        let Some(link) = pcie(f) else { continue };
        let speed = d.ports.iter().filter_map(|p| p.rate_gbps).fold(0.0_f64, f64::max);
        // A RoCE LAG device is one NIC over its bond's members, a port each; its
        // rate is one member's (docs/reference/nic-aggregation.md §2).
        let members = h
            .bonds
            .iter()
            .find(|b| b.roce_lag.as_deref() == Some(d.name.as_str()))
            .map_or(0, |b| b.members.len());
        spec.nics.push(NicSpec {
            name: d.name.clone(),
            model: d.hca_type.clone().unwrap_or_else(|| "unknown".into()),
            firmware: d.fw_ver.clone().unwrap_or_default(),
            pcie_switch: add_switch(f),
            pcie: link,
            ports: u16::try_from(d.ports.len().max(members).max(1)).unwrap_or(1),
            speed_gbps: if speed > 0.0 { speed } else { 100.0 },
        });
        if let Some(m) = h.netdev_of(d).and_then(|n| n.mtu_bytes) {
            overrides.push((format!("{}/{}", h.hostname, d.name), m));
        }
    }
    spec.sockets = switches
        .values()
        .copied()
        .max()
        .map_or(1, |m| m.saturating_add(1));
    spec.pcie_switches = switches
        .into_iter()
        .map(|(name, socket)| PcieSwitchSpec { name, socket })
        .collect();
    spec
}

/// Adds the switches to `topo`, each port's MTU to `overrides`; returns each (switch,
/// port name)'s port number, which the cabling is resolved against. Ports are EthernetN
/// in index order, so port numbers follow the front panel.
fn add_switches(
    c: &Cluster,
    topo: &mut ExplicitTopology,
    overrides: &mut Vec<(String, u32)>,
) -> BTreeMap<(String, String), u16> {
    let mut port_index: BTreeMap<(String, String), u16> = BTreeMap::new();
    for sw in &c.switches {
        let names = port_names(&sw.db);
        for (i, n) in names.iter().enumerate() {
            port_index.insert(
                (sw.name.clone(), (*n).clone()),
                u16::try_from(i).unwrap_or(u16::MAX),
            );
            if let Some(m) = sw.db.port_mtu(n) {
                overrides.push((format!("{}:{i}", sw.name), m));
            }
        }
        let tier = c
            .cabling
            .as_ref()
            .and_then(|cb| cb.switches.get(&sw.name))
            .copied()
            .unwrap_or(Tier::Leaf);
        topo.switches.push(SwitchSpec {
            name: sw.name.clone(),
            tier,
            model: sw
                .db
                .device_metadata
                .as_ref()
                .and_then(|m| m.hwsku.clone())
                .unwrap_or_default(),
            ports: u16::try_from(names.len().max(1)).unwrap_or(u16::MAX),
        });
    }
    port_index
}

/// A cable as a link of the model: host NIC to switch port (a bond member's cable ends at
/// its port of the RoCE LAG device), or switch to switch. `None` when an end is not in
/// the inventory.
fn cable_link(c: &Cluster, cable: &Cable, port_index: &BTreeMap<(String, String), u16>) -> Option<LinkSpec> {
    let &p = port_index.get(&(cable.switch.clone(), cable.port.clone()))?;
    let sw_end = format!("{}:{p}", cable.switch);
    let sw_speed = c
        .switch(&cable.switch)
        .and_then(|s| s.db.ports.get(&cable.port))
        .and_then(|p| p.speed_mbps)
        .map(|m| m as f64 / 1000.0);
    if let (Some(host), Some(nic)) = (&cable.host, &cable.nic) {
        let h = c.hosts.iter().find(|x| &x.hostname == host);
        // A bond member's cable ends at its port of the RoCE LAG device.
        let member = h.and_then(|h| {
            h.bonds.iter().find_map(|b| {
                let lag = b.roce_lag.as_ref()?;
                let i = b.members.iter().position(|m| &m.name == nic)?;
                Some((h.rdma.iter().find(|d| &d.name == lag)?, i + 1))
            })
        });
        let dev = member
            .map(|(d, _)| d)
            .or_else(|| h.and_then(|h| h.rdma.iter().find(|d| &d.name == nic || d.netdevs.contains(nic))))?;
        let end = match member {
            Some((_, port)) => format!("{host}/{}/{port}", dev.name),
            None => format!("{host}/{}", dev.name),
        };
        let rate = dev
            .ports
            .iter()
            .filter_map(|p| p.rate_gbps)
            .fold(0.0_f64, f64::max);
        Some(LinkSpec {
            a: end,
            b: sw_end,
            rate_gbps: if rate > 0.0 {
                rate
            } else {
                sw_speed.unwrap_or(100.0)
            },
            delay_ns: default_delay(),
        })
    } else if let (Some(ps), Some(pp)) = (&cable.peer_switch, &cable.peer_port) {
        let &q = port_index.get(&(ps.clone(), pp.clone()))?;
        Some(LinkSpec {
            a: sw_end,
            b: format!("{ps}:{q}"),
            rate_gbps: sw_speed.unwrap_or(100.0),
            delay_ns: default_delay(),
        })
    } else {
        None
    }
}

/// The scenario file: a header saying where it came from, the explicit topology, and the
/// MTUs as overrides.
fn scenario_text(c: &Cluster, name: &str, topo: &ExplicitTopology, overrides: Vec<(String, u32)>) -> String {
    let mut text = format!(
        "# The fabric read by `xirang audit` ({} hosts, {} switches): the explicit topology and\n# the MTUs it found. Load it with `xirang scenario check`; add workloads to simulate it.\nname = {}\n\n",
        c.hosts.len(),
        c.switches.len(),
        toml_str(name)
    );
    let mut doc = toml::Table::new();
    let mut t = toml::Table::new();
    t.insert(
        "explicit".into(),
        toml::Value::try_from(topo).unwrap_or(toml::Value::Table(toml::Table::new())),
    );
    doc.insert("topology".into(), toml::Value::Table(t));
    text.push_str(&toml::to_string(&doc).unwrap_or_default());
    for (target, mtu) in overrides {
        text.push_str(&format!(
            "\n[[overrides]]\ntarget = {}\nmtu_bytes = {mtu}\n",
            toml_str(&target)
        ));
    }
    text
}

/// A switch's ports in front-panel order (EthernetN by N): index i is port i of the
/// model's switch.
fn port_names(db: &ConfigDb) -> Vec<&String> {
    let mut names: Vec<&String> = db.ports.keys().collect();
    names.sort_by_key(|n| {
        (
            n.trim_start_matches(|ch: char| !ch.is_ascii_digit())
                .parse::<u64>()
                .unwrap_or(u64::MAX),
            (*n).clone(),
        )
    });
    names
}

/// The knobs of an inventory as scenario overrides, what a simulation of the cluster as
/// it is configured now needs: each RDMA NIC's DCQCN knobs as its interface's mlx5
/// sysfs shows them ([`nic_congestion`]; a NIC without `ecn/` keeps its class's), and
/// each switch port's ECN profile, the WRED profile of the queue the policy's RoCE DSCP
/// maps to ([`red_profile`]; a queue without one, or a port without the maps, marks
/// nothing). The simulator marks every priority of a port with that one profile.
pub fn knob_overrides(c: &Cluster) -> Vec<Override> {
    let blank = |target: String| Override {
        target,
        mtu_bytes: None,
        firmware: None,
        pcie: None,
        link_rate_gbps: None,
        congestion: None,
        ecn: None,
    };
    let mut out = Vec::new();
    for h in &c.hosts {
        for d in &h.rdma {
            // The NICs `to_scenario` writes: those with a PCIe link.
            let in_model = d.pci.as_ref().and_then(|b| h.pci(b)).and_then(pcie).is_some();
            if !in_model {
                continue;
            }
            if let Some(ecn) = h.netdev_of(d).and_then(|n| n.ecn.as_ref()) {
                out.push(Override {
                    congestion: Some(nic_congestion(ecn)),
                    ..blank(format!("{}/{}", h.hostname, d.name))
                });
            }
        }
    }
    let dscp = c.policy.roce_dscp;
    for sw in &c.switches {
        for (i, port) in port_names(&sw.db).into_iter().enumerate() {
            // RoCE's queue as the switch maps it (DSCP -> traffic class -> queue, as the
            // audit's NET-ECN-SWITCH reads it); a port without the maps marks nothing.
            let queue = sw
                .db
                .dscp_to_tc(port, dscp)
                .and_then(|tc| sw.db.queue_of_tc(port, tc));
            out.push(Override {
                ecn: Some(red_profile(queue.and_then(|q| sw.db.wred_of_queue(port, q)))),
                ..blank(format!("{}:{i}", sw.name))
            });
        }
    }
    out
}

/// A NIC's DCQCN knobs from its mlx5 sysfs (`ecn/roce_rp/*`, `ecn/roce_np/*`), in the
/// model's units: the inverse of what `xirang tune` renders into `mlx5-congestion.sh`
/// (docs/reference/congestion-control.md §1.5 for names, units and defaults). A knob
/// the NIC does not show keeps the firmware default, and so does a priority whose enable
/// is unreadable (on: the firmware's mask enables every priority,
/// docs/reference/congestion-control.md §1.5).
pub fn nic_congestion(ecn: &RoceEcn) -> NicCongestion {
    use xirang_fabric::mlx5::{self, Dir};
    let p = mlx5::params(|dir, file| {
        match dir {
            Dir::Rp => ecn.rp.get(file),
            Dir::Np => ecn.np.get(file),
        }
        .copied()
    });
    let on = |en: &[Option<bool>; 8]| (0u8..8).filter(|&i| en[usize::from(i)] != Some(false)).collect();
    NicCongestion {
        dcqcn: p,
        rp_priorities: on(&ecn.rp_enable),
        np_priorities: on(&ecn.np_enable),
    }
}

/// A queue's ECN marking in the model's terms, from its SONiC WRED profile (green, the
/// colour RoCE traffic carries): thresholds in bytes, Pmax from the drop probability in
/// percent; no profile, or one that does not mark green, marks nothing.
pub fn red_profile(w: Option<&WredProfile>) -> RedProfile {
    let off = RedProfile {
        enabled: false,
        ..RedProfile::default()
    };
    let Some(w) = w.filter(|w| w.marks_ecn_green()) else {
        return off;
    };
    let (Some(kmin), Some(kmax)) = (w.green_min_bytes, w.green_max_bytes) else {
        return off;
    };
    RedProfile {
        enabled: true,
        kmin_bytes: kmin.min(kmax),
        kmax_bytes: kmax,
        // Percent to a probability.
        pmax: f64::from(w.green_drop_probability_pct.unwrap_or(100).min(100)) / 100.0,
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The scenario's default link delay (`topology::LinkSpec` default).
fn default_delay() -> u64 {
    xirang_fabric::topology::DEFAULT_LINK_DELAY_NS
}
