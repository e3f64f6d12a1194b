//! PCIe: every link from the root down to a NIC or a GPU trained below what both its ends
//! allow (PHY-PCIE-DOWNGRADE; a GPU's speed alone only warns, idle GPUs train down), a
//! GPU whose nearest RDMA NIC is not under a shared PCIe switch (PHY-PCIE-AFFINITY), and
//! the captured tools where sysfs is silent (`lspci -vvv`, `nvidia-smi topo -m`) or
//! against it where both speak (PHY-SOURCES-DISAGREE). It judges what the host reader
//! parsed: it must not parse the tools' output itself (`xirang_host::parse` does).

use xirang_host::HostInventory;
use xirang_host::inventory::{PciDistance, PciRole};

use super::{Finding, Layer, Severity, ev};
use crate::cluster::Cluster;

pub(super) fn pcie(c: &Cluster, out: &mut Vec<Finding>) {
    for h in &c.hosts {
        // Every link from the root down to each NIC and GPU, judged by its two ends: it
        // can train no faster than the slower end allows, min(device max, upstream port
        // max), as NCCL computes it (docs/reference/linux-rdma-sysfs.md §3). The child's attributes
        // describe the link to its parent, so each link is judged once, at the child.
        let mut seen = std::collections::BTreeSet::new();
        for f in h
            .pci
            .iter()
            .filter(|f| matches!(f.role, PciRole::Nic | PciRole::Gpu))
        {
            let chain: Vec<&String> = f.upstream.iter().chain(std::iter::once(&f.bdf)).collect();
            for pair in chain.windows(2) {
                let (parent_bdf, bdf) = (pair[0], pair[1]);
                if !seen.insert(bdf.clone()) {
                    continue;
                }
                let (Some(g), Some(p)) = (h.pci(bdf), h.pci(parent_bdf)) else {
                    continue;
                };
                let (Some(l), Some(pl)) = (g.link, p.link) else {
                    continue;
                };
                let want_speed = l.max_speed_gts.min(pl.max_speed_gts);
                let want_width = l.max_width.min(pl.max_width);
                let slow = l.cur_speed_gts < want_speed;
                let narrow = l.cur_width < want_width;
                if !slow && !narrow {
                    continue;
                }
                // GPUs lower their link speed when idle to save power
                // (docs/reference/linux-rdma-sysfs.md §3): a speed-only drop on a GPU
                // link is a warning.
                let severity = if g.role == PciRole::Gpu && !narrow {
                    Severity::Warning
                } else {
                    Severity::Error
                };
                let what = match g.role {
                    PciRole::Gpu => "GPU",
                    PciRole::Nic => "NIC",
                    PciRole::Bridge => "PCIe bridge",
                    PciRole::Other => "device",
                };
                let base = format!("sys/bus/pci/devices/{bdf}");
                out.push(Finding {
                    rule: "PHY-PCIE-DOWNGRADE",
                    severity,
                    layer: Layer::Physical,
                    entity: format!("{}/{bdf}", h.hostname),
                    message: format!(
                        "{what} link trained at {} GT/s x{} where it and its upstream port {parent_bdf} allow {} GT/s x{} ({:.0}% of the bandwidth)",
                        l.cur_speed_gts,
                        l.cur_width,
                        want_speed,
                        want_width,
                        100.0 * l.cur_speed_gts * f64::from(l.cur_width) / (want_speed * f64::from(want_width))
                    ),
                    evidence: vec![
                        ev(h, &format!("{base}/current_link_speed"), format!("{} GT/s", l.cur_speed_gts)),
                        ev(h, &format!("{base}/current_link_width"), l.cur_width),
                        ev(h, &format!("{base}/max_link_speed"), format!("{} GT/s", l.max_speed_gts)),
                        ev(h, &format!("{base}/max_link_width"), l.max_width),
                        ev(h, &format!("sys/bus/pci/devices/{parent_bdf}/max_link_speed"), format!("{} GT/s", pl.max_speed_gts)),
                        ev(h, &format!("sys/bus/pci/devices/{parent_bdf}/max_link_width"), pl.max_width),
                    ],
                    fix: if severity == Severity::Warning {
                        format!("re-check under load (`lspci -vvv -s {bdf}` LnkSta); idle GPUs train down to save power")
                    } else {
                        format!("reseat the card or its riser, check the slot's bifurcation setting in the BIOS; confirm with `lspci -vvv -s {bdf}` (LnkSta)")
                    },
                });
            }
        }
        let nics: Vec<_> = h
            .rdma
            .iter()
            .filter_map(|d| d.pci.as_ref().and_then(|b| h.pci(b)).map(|f| (d, f)))
            .collect();
        if nics.is_empty() {
            continue;
        }
        for gpu in h.gpus() {
            let Some((d, nic_f, dist)) = nics
                .iter()
                .map(|(d, f)| (*d, *f, gpu.distance(f)))
                .min_by_key(|x| x.2)
            else {
                continue;
            };
            if dist <= PciDistance::Pxb {
                continue;
            }
            let severity = if dist == PciDistance::Sys {
                Severity::Error
            } else {
                Severity::Warning
            };
            out.push(Finding {
                rule: "PHY-PCIE-AFFINITY",
                severity,
                layer: Layer::Physical,
                entity: format!("{}/{}", h.hostname, gpu.bdf),
                message: format!(
                    "GPU's nearest RDMA NIC {} ({}) is {}: {}",
                    d.name,
                    nic_f.bdf,
                    dist.code(),
                    if dist == PciDistance::Sys {
                        "on another socket; every transfer crosses the CPU interconnect"
                    } else {
                        "not under a shared PCIe switch, so NCCL disables GPUDirect RDMA at its default NCCL_NET_GDR_LEVEL (PXB)"
                    }
                ),
                evidence: vec![
                    ev(h, &format!("sys/bus/pci/devices/{}", gpu.bdf), std::iter::once(gpu.root.clone()).chain(gpu.upstream.iter().cloned()).collect::<Vec<_>>().join("/")),
                    ev(h, &format!("sys/bus/pci/devices/{}", nic_f.bdf), std::iter::once(nic_f.root.clone()).chain(nic_f.upstream.iter().cloned()).collect::<Vec<_>>().join("/")),
                ],
                fix: "move the NIC (or GPU) to a slot under the same PCIe switch, or pin the job's ranks to the NIC's socket and set NCCL_NET_GDR_LEVEL deliberately".into(),
            });
        }
    }
}

/// What a device is, from lspci's class text and vendor.
fn lspci_role(d: &xirang_host::parse::lspci::PciDevice) -> PciRole {
    let class = d.class_desc.to_ascii_lowercase();
    let gpu_vendor =
        d.description.contains("NVIDIA") || d.description.contains("AMD") || d.description.contains("ATI");
    if class.starts_with("ethernet controller")
        || class.starts_with("infiniband controller")
        || class.starts_with("network controller")
    {
        PciRole::Nic
    } else if (class.starts_with("vga compatible controller")
        || class.starts_with("3d controller")
        || class.starts_with("display controller"))
        && gpu_vendor
    {
        PciRole::Gpu
    } else {
        PciRole::Other
    }
}

/// The captured tools where sysfs is silent, and against sysfs where both speak:
/// `lspci -vvv` for PCIe links (every device it lists: a storage controller at x1 of x2 is
/// found too), `nvidia-smi topo -m` for GPU-NIC distances.
pub(super) fn pcie_from_tools(c: &Cluster, out: &mut Vec<Finding>) {
    for h in &c.hosts {
        for d in h.tools.lspci.iter().flatten() {
            lspci_link(h, d, out);
        }
        if let Some(topo) = &h.tools.nvidia_topo {
            nvidia_topo_affinity(h, topo, out);
        }
    }
}

/// Where `lspci -vvv` was captured.
const LSPCI: &str = "commands/lspci-vvv.txt";
/// Where `nvidia-smi topo -m` was captured.
const TOPO: &str = "commands/nvidia-smi-topo-m.txt";

/// One device's link as lspci saw it: against sysfs's reading of the same link, or, where
/// sysfs has none, on its own (trained below its capability).
fn lspci_link(h: &HostInventory, d: &xirang_host::parse::lspci::PciDevice, out: &mut Vec<Finding>) {
    let Some(sta) = &d.lnk_sta else { return };
    let role = lspci_role(d);
    let gpu = role == PciRole::Gpu;
    let cap = d.lnk_cap.as_ref();
    let link_text =
        |l: &xirang_host::parse::lspci::PcieLinkInfo| format!("{} GT/s x{}", l.speed_gts, l.width);
    match h.pci(&d.bdf).and_then(|f| f.link) {
        // Both read the same link: they must agree, except a GPU's speed, which
        // changes with load between the two captures.
        Some(l) => {
            let width_differs = l.cur_width != sta.width;
            let speed_differs = !gpu && (l.cur_speed_gts - sta.speed_gts).abs() > 1e-6;
            if width_differs || speed_differs {
                out.push(Finding {
                    rule: "PHY-SOURCES-DISAGREE",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: format!("{}/{}", h.hostname, d.bdf),
                    message: format!(
                        "sysfs says the link runs at {} GT/s x{}, lspci says {}: the captures were taken at different times or one of them is stale",
                        l.cur_speed_gts,
                        l.cur_width,
                        link_text(sta)
                    ),
                    evidence: vec![
                        ev(h, &format!("sys/bus/pci/devices/{}/current_link_width", d.bdf), l.cur_width),
                        ev(h, &format!("sys/bus/pci/devices/{}/current_link_speed", d.bdf), format!("{} GT/s", l.cur_speed_gts)),
                        ev(h, &format!("{LSPCI} {} LnkSta", d.bdf), link_text(sta)),
                    ],
                    fix: format!("recapture the host (`xirang host snapshot`) and read `lspci -vvv -s {}` beside the sysfs attributes; a link that changes width between reads is retraining (a marginal slot, riser or cable)", d.bdf),
                });
            }
        }
        None if d.is_downgraded() => {
            let narrow = cap.is_some_and(|c| sta.width < c.width);
            // An idle GPU trains its speed down and keeps its target (LnkCtl2).
            let idle_gpu = gpu && !narrow;
            let severity = if role == PciRole::Other || idle_gpu {
                Severity::Warning
            } else {
                Severity::Error
            };
            let what = match role {
                PciRole::Gpu => "GPU",
                PciRole::Nic => "NIC",
                _ => "device",
            };
            let mut evidence = vec![ev(h, &format!("{LSPCI} {} LnkSta", d.bdf), link_text(sta))];
            if let Some(c) = cap {
                evidence.push(ev(h, &format!("{LSPCI} {} LnkCap", d.bdf), link_text(c)));
            }
            out.push(Finding {
                rule: "PHY-PCIE-DOWNGRADE",
                severity,
                layer: Layer::Physical,
                entity: format!("{}/{}", h.hostname, d.bdf),
                message: format!(
                    "{what} ({}) link trained at {}{} (lspci; sysfs has no link state for it)",
                    d.description.chars().take(60).collect::<String>(),
                    link_text(sta),
                    cap.map(|c| format!(" of {}", link_text(c))).unwrap_or_else(|| " (lspci marks it downgraded)".into())
                ),
                evidence,
                fix: if idle_gpu {
                    format!("re-check under load (`lspci -vvv -s {}` LnkSta); idle GPUs train down to save power", d.bdf)
                } else {
                    format!("reseat the card or its riser, check the slot's bifurcation setting in the BIOS; confirm with `lspci -vvv -s {}` (LnkSta)", d.bdf)
                },
            });
        }
        None => {}
    }
}

/// GPU-NIC distances by `nvidia-smi topo -m`: the source of the affinity findings when
/// sysfs shows no GPU or no NIC, otherwise checked against sysfs's distances.
fn nvidia_topo_affinity(
    h: &HostInventory,
    topo: &xirang_host::parse::nvidia_topo::TopoMatrix,
    out: &mut Vec<Finding>,
) {
    use xirang_host::parse::nvidia_topo::{Conn, DeviceKind};
    let from_topo: Vec<(&str, &str, Conn)> = topo
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Gpu)
        .filter_map(|g| {
            topo.nearest_nic(&g.name)
                .map(|(n, c)| (g.name.as_str(), topo.nic_name(n), c.clone()))
        })
        .collect();
    let sysfs_gpus: Vec<&xirang_host::inventory::PciFunction> = h.gpus().collect();
    let nics: Vec<_> = h
        .rdma
        .iter()
        .filter_map(|d| d.pci.as_ref().and_then(|b| h.pci(b)))
        .collect();
    if sysfs_gpus.is_empty() || nics.is_empty() {
        // sysfs shows no GPU (or no NIC's PCIe function): the matrix is the source.
        for (gpu, nic, conn) in &from_topo {
            if conn.rank() <= Conn::Pxb.rank() {
                continue;
            }
            let sys = *conn == Conn::Sys;
            out.push(Finding {
                rule: "PHY-PCIE-AFFINITY",
                severity: if sys { Severity::Error } else { Severity::Warning },
                layer: Layer::Physical,
                entity: format!("{}/{gpu}", h.hostname),
                message: format!(
                    "GPU's nearest NIC {nic} is {} (nvidia-smi topo -m): {}",
                    conn.code(),
                    if sys {
                        "on another socket; every transfer crosses the CPU interconnect"
                    } else {
                        "not under a shared PCIe switch, so NCCL disables GPUDirect RDMA at its default NCCL_NET_GDR_LEVEL (PXB)"
                    }
                ),
                evidence: vec![ev(h, &format!("{TOPO} {gpu}"), format!("nearest NIC {nic}: {}", conn.code()))],
                fix: "move the NIC (or GPU) to a slot under the same PCIe switch, or pin the job's ranks to the NIC's socket and set NCCL_NET_GDR_LEVEL deliberately".into(),
            });
        }
    } else {
        // Both speak: each GPU's nearest-NIC distance, as two sorted lists (the matrix
        // names GPUs by index, sysfs by address).
        let mut a: Vec<String> = sysfs_gpus
            .iter()
            .filter_map(|g| {
                nics.iter()
                    .map(|n| g.distance(n))
                    .min()
                    .map(|d| d.code().to_string())
            })
            .collect();
        let mut b: Vec<String> = from_topo.iter().map(|x| x.2.code()).collect();
        a.sort();
        b.sort();
        if a != b {
            out.push(Finding {
                rule: "PHY-SOURCES-DISAGREE",
                severity: Severity::Warning,
                layer: Layer::Physical,
                entity: format!("{}/gpu-nic", h.hostname),
                message: format!(
                    "each GPU's nearest NIC is [{}] by sysfs but [{}] by nvidia-smi topo -m: one capture is partial or from another boot",
                    a.join(", "),
                    b.join(", ")
                ),
                evidence: vec![
                    ev(h, "sys/bus/pci/devices", format!("{} GPU(s), {} NIC(s)", sysfs_gpus.len(), nics.len())),
                    ev(h, TOPO, format!("{} GPU(s)", from_topo.len())),
                ],
                fix: "recapture the host (`xirang host snapshot`) so sysfs and the tools come from one moment; if they still differ, trust sysfs and check the driver's view (`nvidia-smi -q`)".into(),
            });
        }
    }
}
