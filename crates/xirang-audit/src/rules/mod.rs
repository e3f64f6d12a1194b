//! The audit rules, layer by layer. Each rule reads the cluster and emits findings with
//! the evidence it read (file and value) and the fix. Facts and thresholds come from
//! docs/reference/linux-rdma-sysfs.md and docs/reference/switch-config.md, cited where
//! used.
//!
//! This file holds what every layer's rules share: a finding's types, [`RULES`] (each
//! rule's id, layer and title), [`audit`] (every layer's rules in a fixed order, then the
//! findings sorted) and the helpers the layers use (`ev`, `devices`, `model_of`,
//! `majority`, `port_name`). It judges nothing itself. Each layer's rules are in a file
//! of their own (the bonds' and the NIC layout's in [`crate::bonds`]); every one reads
//! the loaded cluster and pushes findings, and none reads a file or changes anything.
//!
//! | file | checks |
//! |---|---|
//! | `firmware` | NIC firmware: drift within a model, versions the policy does not allow |
//! | `links` | the physical links: a cabled NIC missing, a port down, a link below its rate |
//! | `pcie` | PCIe links trained down, GPU-NIC affinity, sysfs against `lspci` and `nvidia-smi topo` |
//! | `counters` | link error, retransmission, discard and pause counters already non-zero |
//! | `mtu` | the MTU along host-switch-host paths, and jumbo frames |
//! | `nic_qos` | the hosts' QoS and congestion control: trust, PFC against the switch port, DCQCN |
//! | `switch_qos` | the switch ports' queues for RoCE: ECN marking, lossless buffers, CNPs, the PFC watchdog |
//! | `roce` | RoCE addressing and QP defaults: the v2 GID, the default traffic class |
//! | `inputs` | the audit's inputs: names that do not fit their grammar, files that could not be read |

mod counters;
mod firmware;
mod inputs;
mod links;
mod mtu;
mod nic_qos;
mod pcie;
mod roce;
mod switch_qos;

use std::collections::BTreeMap;

use serde::Serialize;
use xirang_host::HostInventory;
use xirang_host::inventory::{RdmaDevice, RdmaPort};

use crate::cluster::Cluster;

use counters::{counters, ethtool_counters};
use firmware::firmware;
use inputs::inputs;
use links::{ib_links, link_rate, ports};
use mtu::mtu;
use nic_qos::{dcqcn_drift, ecn_host, pfc};
use pcie::{pcie, pcie_from_tools};
use roce::{gids, tclass};
use switch_qos::switch_queues;

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

fn port_name(h: &HostInventory, d: &RdmaDevice, p: &RdmaPort) -> String {
    format!("{}/{}/{}", h.hostname, d.name, p.port)
}
