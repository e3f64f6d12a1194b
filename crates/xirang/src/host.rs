//! `xirang host show|snapshot`: what a host is, read live or from a snapshot.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use xirang_host::inventory::{HostInventory, PciRole};
use xirang_host::{snapshot, sysfs};

use crate::Outcome;
use crate::cli::{HostShowArgs, HostSnapshotArgs};
use crate::cmd::{out, table};

pub(crate) fn show(a: &HostShowArgs) -> Result<Outcome> {
    let inv = match (&a.root, &a.snapshot) {
        (_, Some(file)) => {
            let tree = snapshot::load(file)?;
            sysfs::read_host(&tree)
        }
        (root, None) => {
            let root = root.clone().unwrap_or_else(|| PathBuf::from("/"));
            anyhow::ensure!(root.is_dir(), "--root {}: expected a directory", root.display());
            sysfs::read_host(&xirang_host::tree::DirTree::new(root))
        }
    };
    if a.json {
        out(&(serde_json::to_string_pretty(&inv)? + "\n"))?;
    } else {
        out(&render(&inv))?;
    }
    Ok(Outcome::Clean)
}

pub(crate) fn snapshot(a: &HostSnapshotArgs) -> Result<Outcome> {
    let root = a.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    anyhow::ensure!(root.is_dir(), "--root {}: expected a directory", root.display());
    if let Some(parent) = a.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let (tree, manifest) = snapshot::capture(&root, !a.no_commands);
    snapshot::write_archive(&tree, &a.out)?;
    let size = std::fs::metadata(&a.out).map(|m| m.len()).unwrap_or(0);
    let mut s = format!(
        "snapshot of {} written to {} ({} entries, {} bytes)\n",
        manifest.hostname,
        a.out.display(),
        tree.len(),
        size
    );
    for c in &manifest.commands {
        let _ = writeln!(s, "  {:<24} {}", c.name, c.status);
    }
    if !manifest.unreadable.is_empty() {
        let _ = writeln!(
            s,
            "  {} files could not be read (listed in the manifest)",
            manifest.unreadable.len()
        );
    }
    eprint!("{s}");
    Ok(Outcome::Clean)
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".to_string(), |v| v.to_string())
}

/// The inventory as tables, for people.
pub(crate) fn render(inv: &HostInventory) -> String {
    let mut s = format!("host {} (read from {})\n\n", inv.hostname, inv.source);
    rdma(&mut s, inv);
    if !inv.netdevs.is_empty() {
        netdevs(&mut s, inv);
    }
    if !inv.bonds.is_empty() {
        bonds(&mut s, inv);
    }
    if !inv.nccl_conf.is_empty() {
        let lines: Vec<String> = inv.nccl_conf.iter().map(|(k, v)| format!("  {k}={v}")).collect();
        let _ = writeln!(s, "NCCL settings (/etc/nccl.conf)\n{}\n", lines.join("\n"));
    }
    pci(&mut s, inv);
    tools(&mut s, inv);
    s
}

/// The RDMA devices, a row per port, or why there are none.
fn rdma(s: &mut String, inv: &HostInventory) {
    if inv.rdma.is_empty() {
        s.push_str("RDMA devices: none (no /sys/class/infiniband entries): this host has no RDMA NIC or its driver is not loaded\n\n");
    } else {
        let mut t = table(&[
            "device",
            "firmware",
            "board",
            "type",
            "PCI",
            "netdev",
            "port",
            "state",
            "phys",
            "rate",
            "layer",
            "RoCE v2 GIDs",
        ]);
        for d in &inv.rdma {
            for p in &d.ports {
                let v2: Vec<String> = p
                    .gids
                    .iter()
                    .filter(|g| g.kind.as_deref() == Some("RoCE v2"))
                    .map(|g| g.index.to_string())
                    .collect();
                t.add_row(vec![
                    d.name.clone(),
                    opt(&d.fw_ver),
                    opt(&d.board_id),
                    opt(&d.hca_type),
                    opt(&d.pci),
                    d.netdevs.join(","),
                    p.port.to_string(),
                    p.state.as_ref().map_or("-".into(), |x| x.name.clone()),
                    p.phys_state.as_ref().map_or("-".into(), |x| x.name.clone()),
                    p.rate_text.clone().unwrap_or_else(|| "-".into()),
                    opt(&p.link_layer),
                    if v2.is_empty() { "-".into() } else { v2.join(",") },
                ]);
            }
        }
        let _ = writeln!(s, "RDMA devices\n{t}\n");
    }
}

/// The network interfaces with their MTU, state and DCQCN priorities.
fn netdevs(s: &mut String, inv: &HostInventory) {
    let mut t = table(&[
        "netdev",
        "MTU",
        "speed Mb/s",
        "state",
        "PCI",
        "RDMA",
        "DCQCN rp/np prios",
    ]);
    for n in &inv.netdevs {
        let ecn = n.ecn.as_ref().map_or("-".into(), |e| {
            let on = |en: &[Option<bool>; 8]| {
                en.iter()
                    .enumerate()
                    .filter(|(_, v)| **v == Some(true))
                    .map(|(p, _)| p.to_string())
                    .collect::<Vec<_>>()
                    .join("")
            };
            format!("{}/{}", on(&e.rp_enable), on(&e.np_enable))
        });
        t.add_row(vec![
            n.name.clone(),
            opt(&n.mtu_bytes),
            opt(&n.speed_mbps),
            opt(&n.operstate),
            opt(&n.pci),
            opt(&n.rdma),
            ecn,
        ]);
    }
    let _ = writeln!(s, "Network interfaces\n{t}\n");
}

/// The bonds: their mode and hash policy, their members, and whether their RDMA traffic
/// is spread over the members.
fn bonds(s: &mut String, inv: &HostInventory) {
    let mut t = table(&["bond", "mode", "hash policy", "members", "RDMA", "spreads QPs"]);
    let named = |c: &Option<xirang_host::inventory::CodedState>| {
        c.as_ref()
            .map_or("-".to_string(), |c| format!("{} {}", c.name, c.code))
    };
    for b in &inv.bonds {
        let members: Vec<String> = b
            .members
            .iter()
            .map(|m| format!("{} ({})", m.name, m.mii_status.as_deref().unwrap_or("?")))
            .collect();
        let rdma = match (&b.roce_lag, b.rdma_devices.as_slice()) {
            (Some(lag), _) => match &b.port_select_mode {
                Some(mode) => format!("RoCE LAG {lag} ({mode})"),
                None => format!("RoCE LAG {lag}"),
            },
            (None, []) => "-".to_string(),
            (None, devs) => format!("separate: {}", devs.join(", ")),
        };
        t.add_row(vec![
            b.name.clone(),
            named(&b.mode),
            named(&b.xmit_hash_policy),
            members.join(", "),
            rdma,
            match b.spreads_qps() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "?",
            }
            .to_string(),
        ]);
    }
    let _ = writeln!(s, "Bonds\n{t}\n");
}

/// The NIC and GPU PCIe functions with their links and the bridges above them.
fn pci(s: &mut String, inv: &HostInventory) {
    let devs: Vec<_> = inv.pci.iter().filter(|f| f.role != PciRole::Bridge).collect();
    if devs.is_empty() {
        s.push_str("PCIe: no NIC or GPU functions found under /sys/bus/pci/devices\n\n");
    } else {
        let mut t = table(&[
            "PCI",
            "role",
            "vendor:device",
            "NUMA",
            "CPUs",
            "link now",
            "link max",
            "",
            "upstream bridges",
        ]);
        for f in devs {
            let (now, max, flag) = match f.link {
                Some(l) => (
                    format!("{} GT/s x{}", l.cur_speed_gts, l.cur_width),
                    format!("{} GT/s x{}", l.max_speed_gts, l.max_width),
                    if l.is_downgraded() { "DOWNGRADED" } else { "" },
                ),
                None => ("-".into(), "-".into(), ""),
            };
            t.add_row(vec![
                f.bdf.clone(),
                format!("{:?}", f.role).to_lowercase(),
                match (f.vendor, f.device) {
                    (Some(v), Some(d)) => format!("{v:04x}:{d:04x}"),
                    _ => "-".into(),
                },
                f.numa_node.map_or("-".into(), |n| n.to_string()),
                opt(&f.local_cpulist),
                now,
                max,
                flag.to_string(),
                std::iter::once(f.root.clone())
                    .chain(f.upstream.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(" > "),
            ]);
        }
        let _ = writeln!(s, "PCIe functions (NICs and GPUs)\n{t}\n");
    }
}

/// Which tool outputs the inventory holds and which are missing, and the files that could
/// not be read.
fn tools(s: &mut String, inv: &HostInventory) {
    let tools = &inv.tools;
    let mut captured = Vec::new();
    if !tools.ethtool.is_empty() {
        captured.push(format!(
            "ethtool -S ({})",
            tools.ethtool.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if !tools.mlnx_qos.is_empty() {
        captured.push(format!(
            "mlnx_qos -i ({})",
            tools.mlnx_qos.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if tools.lspci.is_some() {
        captured.push("lspci -vvv".into());
    }
    if tools.ibv_devinfo.is_some() {
        captured.push("ibv_devinfo -v".into());
    }
    if tools.nvidia_topo.is_some() {
        captured.push("nvidia-smi topo -m".into());
    }
    if !captured.is_empty() {
        let _ = writeln!(s, "Tool outputs: {}", captured.join("; "));
    }
    for (name, why) in &tools.missing {
        let _ = writeln!(s, "Tool output missing: {name} ({why})");
    }
    if !inv.problems.is_empty() {
        let _ = writeln!(
            s,
            "\n{} files could not be read or understood:",
            inv.problems.len()
        );
        for p in &inv.problems {
            let _ = writeln!(s, "  {}: {}", p.path, p.message);
        }
    }
}
