//! The audit rules, layer by layer. Each rule reads the cluster and emits findings with
//! the evidence it read (file and value) and the fix. Facts and thresholds come from
//! docs/reference/linux-rdma-sysfs.md and docs/reference/switch-config.md, cited where
//! used.

use std::collections::BTreeMap;
use xirang_fabric::mlx5::Dir;

use serde::Serialize;
use xirang_host::HostInventory;
use xirang_host::inventory::{PciDistance, PciRole, RdmaDevice, RdmaPort, roce_active_mtu};

use crate::cluster::Cluster;

/// How bad a finding is. Any `Error` makes `xirang audit` exit non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Breaks lossless RDMA or costs bandwidth now.
    Error,
    /// Likely to cost performance or reliability; worth fixing.
    Warning,
    /// Worth knowing.
    Info,
}

/// The layer a finding belongs to (MISSION's four layers, plus the audit's own inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Links, firmware, PCIe.
    Physical,
    /// MTU, PFC, ECN, congestion control.
    Network,
    /// RoCE transport: GIDs, QPs.
    Transport,
    /// What applications use by default (traffic class of QPs).
    Application,
    /// The audit's inputs themselves (files that could not be read).
    Inputs,
}

/// What a finding rests on: a value read, and where. Shared with the diagnosis
/// (`xirang_diagnose::Evidence` is this type), so a configuration finding carries over
/// into a diagnosis as it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Where it was read: a file and key (`hosts/h3: sys/class/net/ens1np0/mtu`), a log's
    /// `file:line`, or a counter with its labels and window.
    pub source: String,
    /// The value or text read.
    pub value: String,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Rule id, e.g. `PHY-PCIE-DOWNGRADE`.
    pub rule: &'static str,
    /// Severity.
    pub severity: Severity,
    /// Layer.
    pub layer: Layer,
    /// What it is about: `h3/mlx5_1`, `leaf2:Ethernet12`, `h3/0000:19:00.0`.
    pub entity: String,
    /// What is wrong.
    pub message: String,
    /// What was read.
    pub evidence: Vec<Evidence>,
    /// How to fix it (a command or a configuration change).
    pub fix: String,
}

/// A rule's identity, for listings and SARIF.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RuleInfo {
    /// Id.
    pub id: &'static str,
    /// Layer.
    pub layer: Layer,
    /// One line on what it checks.
    pub title: &'static str,
}

/// Every rule the audit runs.
pub const RULES: &[RuleInfo] = &[
    RuleInfo {
        id: "PHY-BOND-MEMBER-DOWN",
        layer: Layer::Physical,
        title: "a bond member's link is down",
    },
    RuleInfo {
        id: "NET-BOND-NO-LAG",
        layer: Layer::Network,
        title: "RDMA uses a bond's addresses through separate devices (no RoCE LAG): no spreading, no failover",
    },
    RuleInfo {
        id: "NET-BOND-HASH",
        layer: Layer::Network,
        title: "a bond carrying RDMA whose mode or hash policy cannot spread queue pairs over its members",
    },
    RuleInfo {
        id: "NET-NIC-LAYOUT",
        layer: Layer::Network,
        title: "NIC ports bonded or independent against the policy's nic_layout (the simulated recommendation)",
    },
    RuleInfo {
        id: "APP-BOND-NCCL-QPS",
        layer: Layer::Application,
        title: "NCCL with fewer queue pairs per connection than its RoCE LAG device has ports",
    },
    RuleInfo {
        id: "PHY-FW-DRIFT",
        layer: Layer::Physical,
        title: "NICs of one model run different firmware",
    },
    RuleInfo {
        id: "PHY-FW-POLICY",
        layer: Layer::Physical,
        title: "NIC firmware outside the policy's allowed versions",
    },
    RuleInfo {
        id: "PHY-LINK-RATE",
        layer: Layer::Physical,
        title: "port running below its switch port's speed or its peers' rate, or an IB link below what both ends allow (iblinkinfo)",
    },
    RuleInfo {
        id: "PHY-PCIE-DOWNGRADE",
        layer: Layer::Physical,
        title: "PCIe link trained below its maximum speed or width",
    },
    RuleInfo {
        id: "PHY-PCIE-AFFINITY",
        layer: Layer::Physical,
        title: "GPU without a NIC under the same PCIe switch, or only across sockets",
    },
    RuleInfo {
        id: "PHY-SOURCES-DISAGREE",
        layer: Layer::Physical,
        title: "two captures of one host (sysfs, lspci, nvidia-smi topo) disagree on a PCIe link or GPU-NIC distance",
    },
    RuleInfo {
        id: "PHY-NIC-MISSING",
        layer: Layer::Physical,
        title: "a NIC the cabling lists is not on its host",
    },
    RuleInfo {
        id: "PHY-PORT-DOWN",
        layer: Layer::Physical,
        title: "RDMA port not ACTIVE / LinkUp (down, polling, disabled)",
    },
    RuleInfo {
        id: "PHY-COUNTER-ERRORS",
        layer: Layer::Physical,
        title: "link error counters already non-zero",
    },
    RuleInfo {
        id: "NET-MTU-PATH",
        layer: Layer::Network,
        title: "MTU inconsistent along a host-switch-host path",
    },
    RuleInfo {
        id: "NET-MTU-JUMBO",
        layer: Layer::Network,
        title: "jumbo frames not in use (RoCE MTU below 4096)",
    },
    RuleInfo {
        id: "NET-PFC-MISMATCH",
        layer: Layer::Network,
        title: "PFC priorities differ between host and switch port",
    },
    RuleInfo {
        id: "NET-ECN-HOST",
        layer: Layer::Network,
        title: "DCQCN (ECN reaction/notification) off for the RoCE priority on a host",
    },
    RuleInfo {
        id: "NET-ECN-SWITCH",
        layer: Layer::Network,
        title: "no WRED profile with ECN marking on the RoCE queue of a switch port",
    },
    RuleInfo {
        id: "NET-PFCWD-OFF",
        layer: Layer::Network,
        title: "PFC watchdog off on a lossless switch port",
    },
    RuleInfo {
        id: "NET-DCQCN-DRIFT",
        layer: Layer::Network,
        title: "DCQCN parameters differ across hosts",
    },
    RuleInfo {
        id: "NET-DISCARDS",
        layer: Layer::Network,
        title: "discard counters already non-zero",
    },
    RuleInfo {
        id: "NET-HOST-DRAIN",
        layer: Layer::Network,
        title: "the NIC sends pause frames while its receive side overflows: the host cannot drain",
    },
    RuleInfo {
        id: "NET-TRUST",
        layer: Layer::Network,
        title: "host NIC trusts PCP while the switch classifies RoCE by DSCP",
    },
    RuleInfo {
        id: "NET-LOSSLESS-PG",
        layer: Layer::Network,
        title: "the RoCE priority's priority group has no lossless (headroom) buffer profile",
    },
    RuleInfo {
        id: "NET-CNP-QUEUE",
        layer: Layer::Network,
        title: "CNPs share the RoCE data queue on a switch port",
    },
    RuleInfo {
        id: "TRN-RETRANS",
        layer: Layer::Transport,
        title: "RoCE transport retransmissions or retry failures already counted",
    },
    RuleInfo {
        id: "TRN-GID-V2",
        layer: Layer::Transport,
        title: "RoCE v2 GID missing, or at a different index than on the other hosts",
    },
    RuleInfo {
        id: "APP-ROCE-TCLASS",
        layer: Layer::Application,
        title: "QPs' default traffic class is not the RoCE DSCP",
    },
    RuleInfo {
        id: "INPUT-UNREADABLE",
        layer: Layer::Inputs,
        title: "a file the audit needs could not be read or understood",
    },
    RuleInfo {
        id: "INPUT-BAD-NAME",
        layer: Layer::Inputs,
        title: "a name or value read from a host does not fit its grammar (never used in a command)",
    },
];

/// A RoCE port must reach this IB MTU to use jumbo frames (docs/reference/linux-rdma-sysfs.md §4).
const ROCE_JUMBO_MTU_BYTES: u32 = 4096;
/// `phys_state` codes (docs/reference/linux-rdma-sysfs.md §1.1).
const PHYS_POLLING: u8 = 2;
const PHYS_DISABLED: u8 = 3;
/// PMA counters that count link errors (docs/reference/linux-rdma-sysfs.md §1.2).
const LINK_ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
];
/// mlx5 `hw_counters` that count transport-level loss and retries
/// (docs/reference/linux-rdma-sysfs.md §1.3: out_of_seq and retrans groups).
const RETRANS_COUNTERS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
];
/// SONiC's port MTU when `PORT|<port>` has no `mtu` field
/// (docs/reference/switch-config.md §1, PORT).
const SONIC_DEFAULT_MTU_BYTES: u32 = 9100;

/// DSCP of CNPs: mlx5's `roce_np/cnp_dscp` default (docs/reference/switch-config.md §2).
const CNP_DSCP: u8 = 48;
/// Counters that count discards (docs/reference/linux-rdma-sysfs.md §1.2 and §1.3).
const DISCARD_COUNTERS: &[&str] = &["port_xmit_discards", "out_of_buffer"];

/// Evidence read from a host's file.
pub(crate) fn ev(host: &HostInventory, path: &str, value: impl ToString) -> Evidence {
    Evidence {
        source: format!("{}: {path}", host.source),
        value: value.to_string(),
    }
}

/// Runs every rule; findings sorted by layer, severity, rule and entity.
pub fn audit(c: &Cluster) -> Vec<Finding> {
    let mut f = Vec::new();
    firmware(c, &mut f);
    link_rate(c, &mut f);
    ib_links(c, &mut f);
    pcie(c, &mut f);
    pcie_from_tools(c, &mut f);
    ports(c, &mut f);
    counters(c, &mut f);
    ethtool_counters(c, &mut f);
    mtu(c, &mut f);
    pfc(c, &mut f);
    ecn_host(c, &mut f);
    switch_queues(c, &mut f);
    dcqcn_drift(c, &mut f);
    gids(c, &mut f);
    tclass(c, &mut f);
    crate::bonds::check(c, &mut f);
    inputs(c, &mut f);
    f.sort_by(|a, b| (a.layer, a.severity, a.rule, &a.entity).cmp(&(b.layer, b.severity, b.rule, &b.entity)));
    f
}

fn devices(c: &Cluster) -> impl Iterator<Item = (&HostInventory, &RdmaDevice)> {
    c.hosts.iter().flat_map(|h| h.rdma.iter().map(move |d| (h, d)))
}

fn model_of(d: &RdmaDevice) -> String {
    d.hca_type
        .clone()
        .or_else(|| d.board_id.clone())
        .unwrap_or_else(|| "unknown".into())
}

/// The most common value and its count; ties go to the greatest value (for firmware,
/// the newest).
fn majority<T: Ord + Clone>(values: impl Iterator<Item = T>) -> Option<(T, usize)> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
}

fn firmware(c: &Cluster, out: &mut Vec<Finding>) {
    let mut by_model: BTreeMap<String, Vec<(&HostInventory, &RdmaDevice)>> = BTreeMap::new();
    for (h, d) in devices(c) {
        if d.fw_ver.is_some() {
            by_model.entry(model_of(d)).or_default().push((h, d));
        }
    }
    for (model, devs) in &by_model {
        let Some((common, n)) = majority(devs.iter().filter_map(|(_, d)| d.fw_ver.clone())) else {
            continue;
        };
        for (h, d) in devs {
            let fw = d.fw_ver.clone().unwrap_or_default();
            if fw != common {
                out.push(Finding {
                    rule: "PHY-FW-DRIFT",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: format!("{}/{}", h.hostname, d.name),
                    message: format!("firmware {fw} where {n} of {} {model} NICs run {common}", devs.len()),
                    evidence: vec![ev(h, &format!("sys/class/infiniband/{}/fw_ver", d.name), &fw)],
                    fix: format!("flash {common} (mlxfwmanager -d {} -i <image> -u) in a staged rollout, then reboot or mlxfwreset", d.pci.as_deref().unwrap_or(&d.name)),
                });
            }
        }
    }
    for (h, d) in devices(c) {
        let Some(fw) = &d.fw_ver else { continue };
        let rule = c.policy.firmware.iter().find(|r| {
            (r.hca_type.is_some() && r.hca_type == d.hca_type)
                || (r.board_id.is_some() && r.board_id == d.board_id)
        });
        if let Some(rule) = rule
            && !rule.allowed.contains(fw)
        {
            out.push(Finding {
                rule: "PHY-FW-POLICY",
                severity: Severity::Error,
                layer: Layer::Physical,
                entity: format!("{}/{}", h.hostname, d.name),
                message: format!(
                    "firmware {fw} is not allowed for {} (allowed: {})",
                    model_of(d),
                    rule.allowed.join(", ")
                ),
                evidence: vec![ev(h, &format!("sys/class/infiniband/{}/fw_ver", d.name), fw)],
                fix: format!(
                    "flash an allowed version ({}) with mlxfwmanager",
                    rule.allowed.first().cloned().unwrap_or_default()
                ),
            });
        }
    }
}

fn port_name(h: &HostInventory, d: &RdmaDevice, p: &RdmaPort) -> String {
    format!("{}/{}/{}", h.hostname, d.name, p.port)
}

fn link_rate(c: &Cluster, out: &mut Vec<Finding>) {
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
fn ib_links(c: &Cluster, out: &mut Vec<Finding>) {
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

fn pcie(c: &Cluster, out: &mut Vec<Finding>) {
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
fn pcie_from_tools(c: &Cluster, out: &mut Vec<Finding>) {
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

fn ports(c: &Cluster, out: &mut Vec<Finding>) {
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

fn counters(c: &Cluster, out: &mut Vec<Finding>) {
    for (h, d) in devices(c) {
        for p in &d.ports {
            let dir = format!("sys/class/infiniband/{}/ports/{}", d.name, p.port);
            let errs: Vec<(&str, u64)> = LINK_ERROR_COUNTERS
                .iter()
                .filter_map(|n| p.counters.get(*n).filter(|v| **v > 0).map(|v| (*n, *v)))
                .collect();
            if !errs.is_empty() {
                out.push(Finding {
                    rule: "PHY-COUNTER-ERRORS",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: port_name(h, d, p),
                    message: format!("link error counters are non-zero: {}", errs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")),
                    evidence: errs.iter().map(|(n, v)| ev(h, &format!("{dir}/counters/{n}"), v)).collect(),
                    fix: "watch whether they rise (`xirang monitor`); rising symbol errors or link_downed mean a bad cable or transceiver: clean or replace it".into(),
                });
            }
            let retrans: Vec<(&str, u64)> = RETRANS_COUNTERS
                .iter()
                .filter_map(|n| p.hw_counters.get(*n).filter(|v| **v > 0).map(|v| (*n, *v)))
                .collect();
            if !retrans.is_empty() {
                out.push(Finding {
                    rule: "TRN-RETRANS",
                    severity: Severity::Warning,
                    layer: Layer::Transport,
                    entity: port_name(h, d, p),
                    message: format!(
                        "the RoCE transport has already lost packets or timed out: {} (on a lossless fabric these stay at zero)",
                        retrans.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")
                    ),
                    evidence: retrans.iter().map(|(n, v)| ev(h, &format!("{dir}/hw_counters/{n}"), v)).collect(),
                    fix: "check PFC on the RoCE priority end to end (NET-PFC-MISMATCH), switch discards and link errors on the path; rnr_* means receivers run out of posted buffers".into(),
                });
            }
            let mut disc: Vec<(String, &str, u64)> = DISCARD_COUNTERS
                .iter()
                .filter_map(|n| {
                    p.counters
                        .get(*n)
                        .map(|v| (format!("{dir}/counters/{n}"), *n, *v))
                        .or_else(|| {
                            p.hw_counters
                                .get(*n)
                                .map(|v| (format!("{dir}/hw_counters/{n}"), *n, *v))
                        })
                })
                .filter(|x| x.2 > 0)
                .collect();
            disc.sort();
            if !disc.is_empty() {
                out.push(Finding {
                    rule: "NET-DISCARDS",
                    severity: Severity::Warning,
                    layer: Layer::Network,
                    entity: port_name(h, d, p),
                    message: format!("discards are non-zero: {}", disc.iter().map(|(_, n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")),
                    evidence: disc.iter().map(|(path, _, v)| ev(h, path, v)).collect(),
                    fix: "out_of_buffer: the application posts receive buffers too slowly (raise the receive queue depth); port_xmit_discards: congestion or a down link, check PFC on the RoCE priority".into(),
                });
            }
        }
    }
}

/// `ethtool -S` counters, when captured: physical errors and discards per interface
/// (docs/reference/linux-rdma-sysfs.md §2.1).
fn ethtool_counters(c: &Cluster, out: &mut Vec<Finding>) {
    for h in &c.hosts {
        for (ifname, stats) in &h.tools.ethtool {
            let e = stats.phy_errors();
            let path = format!("commands/ethtool-S-{ifname}.txt");
            let pick = |v: &[(&'static str, Option<u64>)]| -> Vec<(&'static str, u64)> {
                v.iter()
                    .filter_map(|(n, x)| x.filter(|x| *x > 0).map(|x| (*n, x)))
                    .collect()
            };
            let phy = pick(&[
                ("rx_crc_errors_phy", e.rx_crc_errors_phy),
                ("rx_symbol_err_phy", e.rx_symbol_err_phy),
                ("rx_pcs_symbol_err_phy", e.rx_pcs_symbol_err_phy),
                ("link_down_events_phy", e.link_down_events_phy),
                ("rx_oversize_pkts_phy", e.rx_oversize_pkts_phy),
                ("tx_pause_storm_error_events", e.tx_pause_storm_error_events),
            ]);
            if !phy.is_empty() {
                let oversize = phy.iter().any(|(n, _)| *n == "rx_oversize_pkts_phy");
                out.push(Finding {
                    rule: "PHY-COUNTER-ERRORS",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: format!("{}/{ifname}", h.hostname),
                    message: format!(
                        "NIC error counters are non-zero: {}{}",
                        phy.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", "),
                        if oversize { " (oversize frames: the peer sends a larger MTU than this port accepts)" } else { "" }
                    ),
                    evidence: phy.iter().map(|(n, v)| ev(h, &format!("{path} {n}"), v)).collect(),
                    fix: "watch whether they rise (`xirang monitor`); CRC/symbol errors and link-down events point at the cable or transceiver, oversize frames at an MTU mismatch".into(),
                });
            }
            // Pause frames this NIC sent (link-level and per priority) beside a receive
            // side that overflows: the NIC pauses its switch because the host does not take
            // the data off it fast enough (docs/reference/linux-rdma-sysfs.md §2.1:
            // rx_out_of_buffer is a receive queue with no posted buffer, rx_discards_phy the
            // port's own buffer).
            let sent_pause: Vec<(String, u64)> = std::iter::once("tx_pause_ctrl_phy".to_string())
                .chain((0..8).map(|p| format!("tx_prio{p}_pause")))
                .filter_map(|n| stats.get(&n).filter(|v| *v > 0).map(|v| (n, v)))
                .collect();
            let overflow = pick(&[
                ("rx_out_of_buffer", e.rx_out_of_buffer),
                ("rx_discards_phy", e.rx_discards_phy),
            ]);
            let drain = !sent_pause.is_empty() && !overflow.is_empty();
            if drain {
                out.push(Finding {
                    rule: "NET-HOST-DRAIN",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: format!("{}/{ifname}", h.hostname),
                    message: format!(
                        "the NIC sends pause frames ({}) while its receive side overflows ({}): the host cannot drain what arrives (PCIe, memory or a slow consumer), and its pauses spread the congestion into the fabric",
                        sent_pause.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", "),
                        overflow.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")
                    ),
                    evidence: sent_pause
                        .iter()
                        .map(|(n, v)| ev(h, &format!("{path} {n}"), v))
                        .chain(overflow.iter().map(|(n, v)| ev(h, &format!("{path} {n}"), v)))
                        .collect(),
                    fix: "check the NIC's PCIe link (width and speed, `lspci -vvv` LnkSta) and its NUMA placement, the receiving processes' memory bandwidth and CPU, and that consumers post receive buffers ahead of the traffic; watch rx_out_of_buffer and tx_pause_ctrl_phy fall after the fix".into(),
                });
            }
            // Discards the drain finding already explains are not repeated.
            let disc = pick(&[
                ("rx_discards_phy", e.rx_discards_phy.filter(|_| !drain)),
                ("tx_discards_phy", e.tx_discards_phy),
                ("rx_out_of_buffer", e.rx_out_of_buffer.filter(|_| !drain)),
            ]);
            if !disc.is_empty() {
                out.push(Finding {
                    rule: "NET-DISCARDS",
                    severity: Severity::Warning,
                    layer: Layer::Network,
                    entity: format!("{}/{ifname}", h.hostname),
                    message: format!("NIC discard counters are non-zero: {}", disc.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")),
                    evidence: disc.iter().map(|(n, v)| ev(h, &format!("{path} {n}"), v)).collect(),
                    fix: "rx_discards_phy: the NIC ran out of receive buffer (is PFC on for this traffic?); rx_out_of_buffer: the host posts receive buffers too slowly".into(),
                });
            }
        }
    }
}

fn mtu(c: &Cluster, out: &mut Vec<Finding>) {
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

fn host_pfc(h: &HostInventory, netdev: &str) -> Option<Vec<u8>> {
    h.tools.mlnx_qos.get(netdev).map(|q| q.pfc_priorities())
}

fn pfc(c: &Cluster, out: &mut Vec<Finding>) {
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

fn ecn_host(c: &Cluster, out: &mut Vec<Finding>) {
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

/// Switch ports to check: the cabled ones when cabling is known, else every port.
fn switch_ports(c: &Cluster) -> Vec<(&crate::cluster::SwitchConfig, String)> {
    let mut v = Vec::new();
    for sw in &c.switches {
        match &c.cabling {
            Some(cab) => {
                for cable in &cab.links {
                    if cable.switch == sw.name {
                        v.push((sw, cable.port.clone()));
                    }
                    if cable.peer_switch.as_deref() == Some(&sw.name)
                        && let Some(pp) = &cable.peer_port
                    {
                        v.push((sw, pp.clone()));
                    }
                }
            }
            None => v.extend(sw.db.ports.keys().map(|p| (sw, p.clone()))),
        }
    }
    v.sort_by(|a, b| (&a.0.name, &a.1).cmp(&(&b.0.name, &b.1)));
    v.dedup_by(|a, b| a.0.name == b.0.name && a.1 == b.1);
    v
}

fn switch_queues(c: &Cluster, out: &mut Vec<Finding>) {
    let dscp = c.policy.roce_dscp;
    let prio = c.policy.roce_priority;
    for (sw, port) in switch_ports(c) {
        let db = &sw.db;
        let entity = format!("{}:{port}", sw.name);
        let tc = db.dscp_to_tc(&port, dscp);
        let queue = tc.and_then(|tc| db.queue_of_tc(&port, tc));
        let wred_name = queue.and_then(|q| {
            db.queues
                .get(&port)
                .and_then(|m| m.get(&q))
                .and_then(|q| q.wred_profile.clone())
        });
        let wred = queue.and_then(|q| db.wred_of_queue(&port, q));
        if !wred.is_some_and(|w| w.marks_ecn_green()) {
            let why = match (tc, queue, &wred_name, wred) {
                (None, _, _, _) => {
                    format!("DSCP {dscp} has no traffic class on this port (no dscp_to_tc_map entry)")
                }
                (_, None, _, _) => format!(
                    "traffic class {} has no queue (tc_to_queue_map)",
                    tc.unwrap_or_default()
                ),
                (_, Some(q), None, _) => format!("queue {q} has no WRED profile"),
                (_, Some(q), Some(n), None) => {
                    format!("queue {q} names WRED profile `{n}`, which does not exist")
                }
                (_, Some(q), Some(n), Some(_)) => {
                    format!("queue {q}'s WRED profile `{n}` does not mark green packets with ECN")
                }
            };
            let q = queue.unwrap_or(prio);
            out.push(Finding {
                rule: "NET-ECN-SWITCH",
                severity: Severity::Error,
                layer: Layer::Network,
                entity: entity.clone(),
                message: format!("RoCE (DSCP {dscp}) gets no ECN marking: {why}; DCQCN never sees congestion and PFC does all the work"),
                evidence: vec![Evidence { source: format!("{}: QUEUE|{port}|{q}.wred_profile", sw.source), value: wred_name.unwrap_or_else(|| "absent".into()) }],
                fix: format!("bind a WRED profile with ecn ecn_all and wred_green_enable true to QUEUE|{port}|{q} (e.g. AZURE_LOSSLESS)"),
            });
        }
        if db.pfc_enabled(&port).contains(&prio) {
            // The PG that the RoCE priority lands in must hold PFC headroom (xoff), or
            // in-flight data after a pause is dropped (docs/reference/switch-config.md, check 2).
            let pg = tc.and_then(|tc| db.pg_of_tc(&port, tc));
            let lossless = pg
                .and_then(|pg| db.pg_profile(&port, pg))
                .is_some_and(|p| p.is_lossless());
            let dynamic = pg
                .and_then(|pg| db.buffer_pgs.get(&port).and_then(|m| m.get(&pg)))
                .is_some_and(|b| b.dynamic);
            if !lossless && !dynamic {
                let name = pg
                    .and_then(|pg| db.buffer_pgs.get(&port).and_then(|m| m.get(&pg)))
                    .and_then(|b| b.profile.clone());
                out.push(Finding {
                    rule: "NET-LOSSLESS-PG",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: entity.clone(),
                    message: format!(
                        "PFC is on for priority {prio}, but its priority group {} has {}: data in flight after a pause has nowhere to go and is dropped",
                        pg.map_or("(none: no tc_to_pg_map entry)".into(), |p| p.to_string()),
                        name.as_deref().map_or("no BUFFER_PG profile".to_string(), |n| format!("profile `{n}` without xoff headroom"))
                    ),
                    evidence: vec![Evidence { source: format!("{}: BUFFER_PG|{port}|{}", sw.source, pg.unwrap_or(prio)), value: name.unwrap_or_else(|| "absent".into()) }],
                    fix: format!("bind a lossless profile (pg_lossless_<speed>_<cable>_profile, with xoff and xon) to BUFFER_PG|{port}|{}", pg.unwrap_or(prio)),
                });
            }
        }
        // CNPs (DSCP 48 by default, roce_np/cnp_dscp) must not queue behind the data they
        // are meant to slow down (docs/reference/switch-config.md, check 3).
        let cnp_queue = db
            .dscp_to_tc(&port, CNP_DSCP)
            .and_then(|tc| db.queue_of_tc(&port, tc));
        if cnp_queue.is_some() && cnp_queue == queue {
            out.push(Finding {
                rule: "NET-CNP-QUEUE",
                severity: Severity::Warning,
                layer: Layer::Network,
                entity: entity.clone(),
                message: format!("CNPs (DSCP {CNP_DSCP}) go to queue {}, the RoCE data queue: congestion notifications wait behind the congestion", cnp_queue.unwrap_or_default()),
                evidence: vec![Evidence { source: format!("{}: DSCP_TO_TC_MAP", sw.source), value: format!("DSCP {CNP_DSCP} and DSCP {dscp} -> queue {}", cnp_queue.unwrap_or_default()) }],
                fix: format!("map DSCP {CNP_DSCP} to its own traffic class and a strict-priority queue (e.g. TC 6, SCHEDULER type STRICT)"),
            });
        }
        if db.pfc_enabled(&port).contains(&prio) && !db.pfc_wd_on(&port) {
            out.push(Finding {
                rule: "NET-PFCWD-OFF",
                severity: Severity::Warning,
                layer: Layer::Network,
                entity,
                message: format!("PFC is on for priority {prio} but the PFC watchdog is not: a stuck receiver can spread a pause storm (switch-config.md, PFC_WD)"),
                evidence: vec![Evidence { source: format!("{}: PFC_WD|{port}", sw.source), value: "absent".into() }],
                fix: format!("pfcwd start --action drop {port} 200  (or `pfcwd start_default`)"),
            });
        }
    }
}

fn dcqcn_drift(c: &Cluster, out: &mut Vec<Finding>) {
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

/// Index of the RoCE v2 GID NCCL would pick: the first IPv4-mapped RoCE v2 entry, else
/// the first RoCE v2 entry.
fn v2_gid_index(p: &RdmaPort) -> Option<u16> {
    let v2 = || p.gids.iter().filter(|g| g.kind.as_deref() == Some("RoCE v2"));
    v2().find(|g| g.gid.starts_with("0000:0000:0000:0000:0000:ffff:"))
        .or_else(|| v2().next())
        .map(|g| g.index)
}

fn gids(c: &Cluster, out: &mut Vec<Finding>) {
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

fn tclass(c: &Cluster, out: &mut Vec<Finding>) {
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

fn inputs(c: &Cluster, out: &mut Vec<Finding>) {
    use xirang_host::names::{Kind, check};
    for h in &c.hosts {
        let mut bad = Vec::new();
        if let Err(e) = check(Kind::Hostname, &h.hostname) {
            bad.push(("etc/hostname".to_string(), e));
        }
        for d in &h.rdma {
            let dir = format!("sys/class/infiniband/{}", d.name);
            if let Err(e) = check(Kind::RdmaDevice, &d.name) {
                bad.push((dir.clone(), e));
            }
            for (file, kind, v) in [
                ("board_id", Kind::BoardId, &d.board_id),
                ("fw_ver", Kind::FwVersion, &d.fw_ver),
                ("hca_type", Kind::HcaType, &d.hca_type),
                ("device (PCI address)", Kind::PciAddress, &d.pci),
            ] {
                if let Some(v) = v
                    && let Err(e) = check(kind, v)
                {
                    bad.push((format!("{dir}/{file}"), e));
                }
            }
            for n in &d.netdevs {
                if let Err(e) = check(Kind::Netdev, n) {
                    bad.push((format!("{dir}/device/net/{n}"), e));
                }
            }
        }
        for n in &h.netdevs {
            if let Err(e) = check(Kind::Netdev, &n.name) {
                bad.push((format!("sys/class/net/{}", n.name), e));
            }
        }
        bad.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = Vec::new();
        bad.retain(|(_, e)| {
            let fresh = !seen.contains(e);
            if fresh {
                seen.push(e.clone());
            }
            fresh
        });
        for (path, e) in bad {
            out.push(Finding {
                rule: "INPUT-BAD-NAME",
                severity: Severity::Error,
                layer: Layer::Inputs,
                entity: h.hostname.clone(),
                message: e.to_string(),
                evidence: vec![ev(h, &path, &e.value)],
                fix: "find out why the host reports it (a misconfigured or compromised node writes its own sysfs and snapshot); the rollout skips the node until it fits".into(),
            });
        }
    }
    for (path, why) in &c.unreadable {
        out.push(Finding {
            rule: "INPUT-UNREADABLE",
            severity: Severity::Error,
            layer: Layer::Inputs,
            entity: path.clone(),
            message: format!("could not be read: {why}"),
            evidence: vec![],
            fix: "recapture it (`xirang host snapshot`, or copy config_db.json again)".into(),
        });
    }
    for h in &c.hosts {
        for p in &h.problems {
            out.push(Finding {
                rule: "INPUT-UNREADABLE",
                severity: Severity::Warning,
                layer: Layer::Inputs,
                entity: h.hostname.clone(),
                message: p.message.clone(),
                evidence: vec![ev(h, &p.path, "unreadable")],
                fix: "recapture the host; values from this file are unknown to the audit".into(),
            });
        }
    }
}
