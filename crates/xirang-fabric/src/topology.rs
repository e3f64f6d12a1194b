//! Topology descriptions (the `[topology]` section of a scenario) and the generators that
//! turn them into a [`Fabric`].
//!
//! Every generator gives each host realistic PCIe placement: two CPU sockets, one PCIe
//! switch per GPU/NIC pair (as on an HGX H100 board, where GPU i and NIC i are `PIX` to
//! each other: crates/xirang-host/test_data/nvidia-smi-topo/h100-8gpu-8nic-nv18-topo-m.txt), the first
//! half of the PCIe switches on socket 0 and the second half on socket 1.

use serde::{Deserialize, Serialize};

use crate::config::FabricConfig;
use crate::diag::{Diagnostics, KeyPath};
use crate::limits::{MAX_BOND_PORTS, MAX_DEVICES_PER_HOST, MAX_GENERATED_NICS};
use crate::model::{
    Fabric, Gpu, GpuId, Host, HostId, Nic, NicId, NicPort, Node, PcieLink, PcieSwitch, PortRef, Switch,
    SwitchId, SwitchPort, Tier,
};
use crate::units::Count;

/// The one-way propagation delay of the HPCC reference fabrics, 1 µs
/// (docs/reference/reference-scenarios.md); it also stands in for switch latency.
pub const DEFAULT_LINK_DELAY_NS: u64 = 1000;
/// A ConnectX-7 firmware version string in the format `fw_ver` reports
/// (docs/reference/linux-rdma-sysfs.md §1: e.g. `28.39.2048`).
pub const DEFAULT_NIC_FIRMWARE: &str = "28.39.2048";
/// PCIe Gen5 per-lane rate in GT/s; ConnectX-7 and H100 are Gen5 x16 devices
/// (crates/xirang-host/test_data/lspci/esc8000a-connectx7-21.00.0-lspci-vvv.txt shows a CX-7 link).
pub const PCIE_GEN5_GTS: f64 = 32.0;
/// x16 link width.
pub const PCIE_X16: u8 = 16;
/// Sockets per generated host.
pub const HOST_SOCKETS: u8 = 2;

/// A topology: one generator with its parameters, or an explicit list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    /// Two-tier leaf-spine with a chosen oversubscription.
    LeafSpine(LeafSpineSpec),
    /// Three-tier k-ary fat-tree.
    FatTree(FatTreeSpec),
    /// Rail-optimized GPU cluster: NIC i of every host on rail leaf i.
    RailOptimized(RailOptimizedSpec),
    /// Hosts, switches and links listed one by one.
    Explicit(ExplicitTopology),
    /// A topology file in the HPCC ns-3 simulator's format.
    Hpcc(HpccTopologySpec),
}

impl TopologySpec {
    /// The template of every generated host (none for an explicit list).
    pub fn host(&self) -> Option<&HostTemplate> {
        match self {
            TopologySpec::LeafSpine(s) => Some(&s.host),
            TopologySpec::FatTree(s) => Some(&s.host),
            TopologySpec::RailOptimized(s) => Some(&s.host),
            TopologySpec::Hpcc(s) => Some(&s.host),
            TopologySpec::Explicit(_) => None,
        }
    }

    /// The template of every generated host, to change it.
    pub fn host_mut(&mut self) -> Option<&mut HostTemplate> {
        match self {
            TopologySpec::LeafSpine(s) => Some(&mut s.host),
            TopologySpec::FatTree(s) => Some(&mut s.host),
            TopologySpec::RailOptimized(s) => Some(&mut s.host),
            TopologySpec::Hpcc(s) => Some(&mut s.host),
            TopologySpec::Explicit(_) => None,
        }
    }

    /// The generator's key in scenario files.
    pub fn kind(&self) -> &'static str {
        match self {
            TopologySpec::LeafSpine(_) => "leaf_spine",
            TopologySpec::FatTree(_) => "fat_tree",
            TopologySpec::RailOptimized(_) => "rail_optimized",
            TopologySpec::Explicit(_) => "explicit",
            TopologySpec::Hpcc(_) => "hpcc",
        }
    }
}

/// What every generated host looks like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostTemplate {
    /// GPUs per host (0 for CPU-only clients).
    pub gpus: u32,
    /// NICs per host (at least 1), one port each.
    pub nics: u32,
    /// GPU model.
    pub gpu_model: String,
    /// NIC model.
    pub nic_model: String,
    /// NIC firmware version.
    pub nic_firmware: String,
    /// NIC PCIe link.
    pub nic_pcie: PcieLink,
    /// GPU PCIe link.
    pub gpu_pcie: PcieLink,
    /// How the host uses its NIC ports: `independent` (one RDMA device per port, its own
    /// QPs and rail) or `lag` (every `bond_ports` consecutive ports bonded into one RoCE
    /// LAG device, `mlx5_bond_N`, its QPs hashed over the member ports). Unset means
    /// independent; setting it, either way, asks `nccl advise` and `tune` to simulate both
    /// layouts and recommend one per class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<Aggregate>,
    /// Ports per bond under `aggregate = "lag"`: 2, the two ports of a dual-port
    /// ConnectX card (docs/reference/nic-aggregation.md §2).
    #[serde(skip_serializing_if = "is_default_bond_ports")]
    pub bond_ports: u32,
}

/// How a host uses several NIC ports (`[topology.*.host] aggregate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// One RDMA device per port.
    Independent,
    /// RoCE LAG: ports bonded into one device.
    Lag,
}

impl Aggregate {
    /// The key as scenario files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Independent => "independent",
            Aggregate::Lag => "lag",
        }
    }
}

/// Ports per bond when unset: a dual-port card.
pub const DEFAULT_BOND_PORTS: u32 = 2;

fn is_default_bond_ports(n: &u32) -> bool {
    *n == DEFAULT_BOND_PORTS
}

impl Default for HostTemplate {
    fn default() -> Self {
        HostTemplate::with_pairs(1)
    }
}

impl HostTemplate {
    /// A host with `n` GPU/NIC pairs of the default models.
    pub fn with_pairs(n: u32) -> Self {
        HostTemplate {
            gpus: n,
            nics: n,
            gpu_model: "H100".to_string(),
            nic_model: "ConnectX-7".to_string(),
            nic_firmware: DEFAULT_NIC_FIRMWARE.to_string(),
            nic_pcie: PcieLink::full(PCIE_GEN5_GTS, PCIE_X16),
            gpu_pcie: PcieLink::full(PCIE_GEN5_GTS, PCIE_X16),
            aggregate: None,
            bond_ports: DEFAULT_BOND_PORTS,
        }
    }

    /// Ports per RDMA device: `bond_ports` under LAG, else 1 (and 1 for a template the
    /// scenario check refuses, whose ports do not divide into bonds).
    pub fn ports_per_device(&self) -> u32 {
        match self.aggregate {
            Some(Aggregate::Lag) if self.bond_ports >= 2 && self.nics.is_multiple_of(self.bond_ports) => {
                self.bond_ports
            }
            _ => 1,
        }
    }

    /// RDMA devices per host.
    pub fn devices(&self) -> u32 {
        self.nics / self.ports_per_device()
    }
}

fn default_rail_host() -> HostTemplate {
    HostTemplate::with_pairs(8)
}
fn default_delay() -> u64 {
    DEFAULT_LINK_DELAY_NS
}
fn default_oversubscription() -> f64 {
    1.0
}

/// Two-tier leaf-spine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafSpineSpec {
    /// Number of leaf switches.
    pub leaves: Count,
    /// Number of spine switches; every leaf connects to every spine.
    pub spines: Count,
    /// Hosts per leaf; every NIC of a host plugs into its leaf.
    pub hosts_per_leaf: Count,
    /// Downlink to uplink bandwidth ratio at the leaves (1 = non-blocking, 2 = 2:1).
    #[serde(default = "default_oversubscription")]
    pub oversubscription: f64,
    /// Host link rate.
    pub host_rate_gbps: f64,
    /// Leaf-spine link rate.
    pub fabric_rate_gbps: f64,
    /// One-way delay of every link.
    #[serde(default = "default_delay")]
    pub link_delay_ns: u64,
    /// Host shape.
    #[serde(default)]
    pub host: HostTemplate,
}

/// Three-tier k-ary fat-tree (Al-Fares et al.): k pods of k/2 leaves and k/2 spines,
/// (k/2)^2 cores, k^3/4 host ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FatTreeSpec {
    /// Switch radix, even, at least 2.
    pub k: Count,
    /// Host link rate.
    pub host_rate_gbps: f64,
    /// Switch-to-switch link rate.
    pub fabric_rate_gbps: f64,
    /// One-way delay of every link.
    #[serde(default = "default_delay")]
    pub link_delay_ns: u64,
    /// Host shape; its NIC count must divide k/2 (each leaf has k/2 host ports).
    #[serde(default)]
    pub host: HostTemplate,
}

/// Rail-optimized cluster: hosts are grouped in scalable units (SUs); in each unit, NIC r of
/// every host plugs into the unit's rail leaf r.
///
/// Without `spines` the fabric is built as published reference architectures build it
/// (docs/large-fabrics.md): switches of `radix` ports, leaves to spines non-blocking or at
/// `oversubscription`, and a core tier when one spine cannot reach every leaf. With
/// `spines` it is the classic two-tier form: every leaf to every one of that many spines,
/// switches as large as that needs unless `radix` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RailOptimizedSpec {
    /// Number of hosts.
    pub hosts: Count,
    /// Hosts per scalable unit (default: 32, the DGX SuperPOD's SU; all hosts in one unit
    /// when `spines` is given). The last unit may be partly filled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_per_group: Option<Count>,
    /// Number of spines of a classic two-tier fabric (every leaf to every spine). Leave it
    /// out to size spines and cores from the radix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spines: Option<Count>,
    /// Ports per switch (default 64 when `spines` is not given; otherwise unchecked unless
    /// set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<Count>,
    /// Which leaves share spines in a three-tier fabric.
    #[serde(default, skip_serializing_if = "SpineGroups::is_default")]
    pub spine_groups: SpineGroups,
    /// Downlink to uplink bandwidth ratio at the rail leaves.
    #[serde(default = "default_oversubscription")]
    pub oversubscription: f64,
    /// Host link rate.
    pub host_rate_gbps: f64,
    /// Switch-to-switch link rate.
    pub fabric_rate_gbps: f64,
    /// One-way delay of every link.
    #[serde(default = "default_delay")]
    pub link_delay_ns: u64,
    /// Host shape; the number of rails is its NIC count.
    #[serde(default = "default_rail_host")]
    pub host: HostTemplate,
}

/// How a three-tier rail-optimized fabric groups leaves under spines (spine-leaf groups,
/// docs/large-fabrics.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpineGroups {
    /// A group holds the leaves of one rail in up to radix/2 units: traffic on its rail
    /// never crosses a core.
    #[default]
    Rail,
    /// A group holds every leaf of a block of units, as a fat-tree pod.
    Units,
}

impl SpineGroups {
    fn is_default(&self) -> bool {
        *self == SpineGroups::Rail
    }
}

/// Hosts per scalable unit of a DGX H100/B200 SuperPOD (docs/reference/scale-and-parallel.md
/// §1, docs/large-fabrics.md §1).
pub const DEFAULT_HOSTS_PER_SU: u32 = 32;
/// Ports of the switches those reference architectures use (QM9700 class, 64 x 400G; same
/// sources).
pub const DEFAULT_SWITCH_RADIX: u32 = 64;

/// A fabric listed element by element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ExplicitTopology {
    /// Hosts.
    #[serde(default)]
    pub hosts: Vec<HostSpec>,
    /// Switches.
    #[serde(default)]
    pub switches: Vec<SwitchSpec>,
    /// Links.
    #[serde(default)]
    pub links: Vec<LinkSpec>,
}

/// A host in an explicit topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Unique host name.
    pub name: String,
    /// CPU sockets.
    #[serde(default = "default_sockets")]
    pub sockets: u8,
    /// PCIe switches.
    #[serde(default)]
    pub pcie_switches: Vec<PcieSwitchSpec>,
    /// GPUs.
    #[serde(default)]
    pub gpus: Vec<GpuSpec>,
    /// NICs.
    #[serde(default)]
    pub nics: Vec<NicSpec>,
}

fn default_sockets() -> u8 {
    HOST_SOCKETS
}

/// A PCIe switch in an explicit host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieSwitchSpec {
    /// Name, unique in the host.
    pub name: String,
    /// Socket.
    pub socket: u8,
}

/// A GPU in an explicit host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Name, unique in the host.
    pub name: String,
    /// Model.
    pub model: String,
    /// Name of the PCIe switch it sits under.
    pub pcie_switch: String,
    /// PCIe link.
    pub pcie: PcieLink,
}

/// A NIC in an explicit host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// RDMA device name, unique in the host.
    pub name: String,
    /// Model.
    pub model: String,
    /// Firmware version.
    pub firmware: String,
    /// Name of the PCIe switch it sits under.
    pub pcie_switch: String,
    /// PCIe link.
    pub pcie: PcieLink,
    /// Number of ports.
    #[serde(default = "one_port")]
    pub ports: u16,
    /// Highest port speed.
    pub speed_gbps: f64,
}

fn one_port() -> u16 {
    1
}

/// A switch in an explicit topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Unique name.
    pub name: String,
    /// Tier.
    pub tier: Tier,
    /// Model, free text.
    #[serde(default)]
    pub model: String,
    /// Number of ports.
    pub ports: u16,
}

/// A link in an explicit topology. Ends are `host/nic` (port 1), `host/nic/port`,
/// `switch:port` (0-based) or `switch` (its next free port in link order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// One end.
    pub a: String,
    /// Other end.
    pub b: String,
    /// Rate.
    pub rate_gbps: f64,
    /// One-way delay.
    #[serde(default = "default_delay")]
    pub delay_ns: u64,
}

/// A topology in the HPCC ns-3 simulator's text format (see
/// docs/reference/reference-scenarios.md). Each host gets one NIC with one port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HpccTopologySpec {
    /// Path of the topology file, relative to the scenario file.
    pub file: String,
    /// Host shape (only models and PCIe are used; one GPU/NIC pair per host).
    #[serde(default)]
    pub host: HostTemplate,
}

/// Builds the fabric a spec describes, with port MTUs from `config`. Problems are reported
/// against `at` (the spec's key path) in `diags`; `None` when the spec cannot be built.
pub(crate) fn build(
    spec: &TopologySpec,
    config: &FabricConfig,
    hpcc_text: Option<&str>,
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<Fabric> {
    let mut b = Builder::new(config);
    let at = at.key(spec.kind());
    check_size(spec, &at, diags)?;
    match spec {
        TopologySpec::LeafSpine(s) => leaf_spine(&mut b, s, &at, diags)?,
        TopologySpec::FatTree(s) => fat_tree(&mut b, s, &at, diags)?,
        TopologySpec::RailOptimized(s) => rail_optimized(&mut b, s, &at, diags)?,
        TopologySpec::Explicit(s) => explicit(&mut b, s, &at, diags)?,
        TopologySpec::Hpcc(s) => {
            let text = hpcc_text.expect("invariant: the loader reads HPCC topology files");
            crate::hpcc::build_topology(&mut b, s, text, &at, diags)?
        }
    }
    Some(b.fabric)
}

/// Incremental fabric construction shared by the generators.
pub(crate) struct Builder<'c> {
    pub(crate) fabric: Fabric,
    config: &'c FabricConfig,
}

impl<'c> Builder<'c> {
    fn new(config: &'c FabricConfig) -> Self {
        Builder {
            fabric: Fabric::default(),
            config,
        }
    }

    /// Adds a host shaped by `t`: one PCIe switch per GPU/NIC pair (GPU i and NIC j share
    /// switch `i*S/gpus` and `j*S/nics` with S = min(gpus, nics), or S = nics without GPUs),
    /// the first half of the switches on socket 0. Under `aggregate = "lag"` a NIC is a
    /// bond device (`mlx5_bond_K`) of `bond_ports` ports, one card in one PCIe slot.
    /// Returns the host's physical ports in order (`nics` of them), which the generators
    /// cable rail by rail.
    pub(crate) fn add_host(&mut self, name: String, t: &HostTemplate, port_gbps: f64) -> Vec<(NicId, u16)> {
        let host = HostId(self.fabric.hosts.len() as u32);
        let per_dev = t.ports_per_device();
        let devices = t.devices();
        let n_pcie = if t.gpus == 0 { devices } else { t.gpus.min(devices) }.max(1);
        let pcie_switches = (0..n_pcie)
            .map(|s| PcieSwitch {
                name: format!("pcie{s}"),
                socket: if n_pcie >= 2 && s >= n_pcie / 2 { 1 } else { 0 },
            })
            .collect();
        let mut gpus = Vec::new();
        for i in 0..t.gpus {
            let id = GpuId(self.fabric.gpus.len() as u32);
            self.fabric.gpus.push(Gpu {
                name: format!("GPU{i}"),
                host,
                model: t.gpu_model.clone(),
                pcie_switch: (i * n_pcie / t.gpus) as usize,
                pcie: t.gpu_pcie,
            });
            gpus.push(id);
        }
        let mut nics = Vec::new();
        let mut ports = Vec::new();
        for j in 0..devices {
            let id = NicId(self.fabric.nics.len() as u32);
            let name = if per_dev > 1 {
                format!("mlx5_bond_{j}")
            } else {
                format!("mlx5_{j}")
            };
            self.fabric.nics.push(Nic {
                name,
                host,
                model: t.nic_model.clone(),
                firmware: t.nic_firmware.clone(),
                pcie_switch: (j * n_pcie / devices) as usize,
                pcie: t.nic_pcie,
                congestion: None,
                ports: vec![
                    NicPort {
                        speed_gbps: port_gbps,
                        mtu_bytes: self.config.mtu.nic_bytes,
                        link: None,
                    };
                    per_dev as usize
                ],
            });
            nics.push(id);
            ports.extend((0..per_dev as u16).map(|p| (id, p)));
        }
        self.fabric.hosts.push(Host {
            name,
            sockets: HOST_SOCKETS,
            pcie_switches,
            gpus,
            nics,
        });
        ports
    }

    pub(crate) fn add_switch(&mut self, name: String, tier: Tier, ports: usize) -> SwitchId {
        let id = SwitchId(self.fabric.switches.len() as u32);
        self.fabric.switches.push(Switch {
            name,
            tier,
            model: String::new(),
            ports: vec![
                SwitchPort {
                    mtu_bytes: self.config.mtu.switch_bytes,
                    link: None,
                    ecn: None,
                };
                ports
            ],
        });
        id
    }

    /// Connects port `nic.1` of NIC `nic.0` to switch `sw` port `port`.
    pub(crate) fn cable_nic(&mut self, nic: (NicId, u16), sw: SwitchId, port: u16, gbps: f64, delay_ns: u64) {
        self.fabric.connect(
            PortRef {
                node: Node::Nic(nic.0),
                port: nic.1,
            },
            PortRef {
                node: Node::Switch(sw),
                port,
            },
            gbps,
            delay_ns,
        );
    }

    pub(crate) fn cable_switches(
        &mut self,
        a: SwitchId,
        pa: u16,
        b: SwitchId,
        pb: u16,
        gbps: f64,
        delay_ns: u64,
    ) {
        self.fabric.connect(
            PortRef {
                node: Node::Switch(a),
                port: pa,
            },
            PortRef {
                node: Node::Switch(b),
                port: pb,
            },
            gbps,
            delay_ns,
        );
    }
}

fn check_size(spec: &TopologySpec, at: &KeyPath, diags: &mut Diagnostics) -> Option<()> {
    let (host, nics, key) = match spec {
        TopologySpec::LeafSpine(s) => (
            &s.host,
            u64::from(s.leaves.get()) * u64::from(s.hosts_per_leaf.get()) * u64::from(s.host.nics),
            "hosts_per_leaf",
        ),
        TopologySpec::FatTree(s) => (&s.host, u64::from(s.k.get()).pow(3) / 4, "k"),
        TopologySpec::RailOptimized(s) => (
            &s.host,
            u64::from(s.hosts.get()) * u64::from(s.host.nics),
            "hosts",
        ),
        TopologySpec::Hpcc(s) => (&s.host, 0, "file"),
        TopologySpec::Explicit(_) => return Some(()),
    };
    for (k, v) in [("gpus", host.gpus), ("nics", host.nics)] {
        if v > MAX_DEVICES_PER_HOST {
            diags.error(
                &at.key("host").key(k),
                format!("expected at most {MAX_DEVICES_PER_HOST} per host, found {v}"),
            );
            return None;
        }
    }
    if nics > MAX_GENERATED_NICS {
        diags.error(
            &at.key(key),
            format!("this would build {nics} NIC ports; expected at most {MAX_GENERATED_NICS}"),
        );
        return None;
    }
    Some(())
}

fn check_rate(v: f64, at: &KeyPath, diags: &mut Diagnostics) -> bool {
    crate::limits::check_link_rate_gbps(v, at, diags)
}

fn check_host(t: &HostTemplate, at: &KeyPath, diags: &mut Diagnostics) -> bool {
    if t.nics == 0 {
        diags.error(&at.key("nics"), "expected an integer >= 1, found 0".to_string());
        return false;
    }
    if t.aggregate == Some(Aggregate::Lag) {
        if !(2..=MAX_BOND_PORTS).contains(&t.bond_ports) {
            diags.error(
                &at.key("bond_ports"),
                format!(
                    "expected 2 to {MAX_BOND_PORTS} ports per bond, found {}",
                    t.bond_ports
                ),
            );
            return false;
        }
        if !t.nics.is_multiple_of(t.bond_ports) {
            diags.error(
                &at.key("nics"),
                format!(
                    "expected a multiple of bond_ports ({}) under aggregate = \"lag\", found {}",
                    t.bond_ports, t.nics
                ),
            );
            return false;
        }
    }
    true
}

/// Uplinks per (leaf, spine) pair for a leaf with `down_gbps` of host links: the leaf's
/// uplink capacity is `down_gbps / oversubscription`, spread evenly over the spines.
fn links_per_spine(
    down_gbps: f64,
    spines: u32,
    fabric_gbps: f64,
    oversub: f64,
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<u32> {
    if !(oversub.is_finite() && oversub > 0.0) {
        diags.error(
            &at.key("oversubscription"),
            format!("expected a ratio > 0 (1 = non-blocking), found {oversub}"),
        );
        return None;
    }
    let per_spine = down_gbps / oversub / (f64::from(spines) * fabric_gbps);
    let rounded = per_spine.round();
    // A port index is 16 bits: no leaf has more uplinks than that.
    if rounded * f64::from(spines) > f64::from(u16::MAX) {
        diags.error(
            &at.key("oversubscription"),
            format!(
                "{down_gbps} Gbit/s of host links at {oversub}:1 needs {rounded} uplinks per spine, more than a switch has ports (at most {})",
                u16::MAX
            ),
        );
        return None;
    }
    if per_spine < 0.5 {
        // Not a ratio problem: the leaf's host links cannot fill one uplink per spine
        // at any sensible ratio, so say what is too small.
        let max_ratio = down_gbps / (f64::from(spines) * fabric_gbps);
        diags.error(
            at,
            format!(
                "{} Gbit/s of host links per leaf cannot fill one {fabric_gbps} Gbit/s uplink to each of {spines} spines at {oversub}:1 (that takes {} Gbit/s); expected more or faster hosts per leaf, fewer spines, or an oversubscription of at most {}",
                crate::limits::Num(down_gbps),
                crate::limits::Num(f64::from(spines) * fabric_gbps * oversub),
                crate::limits::Num(max_ratio)
            ),
        );
        return None;
    }
    if rounded < 1.0 || (per_spine - rounded).abs() > 1e-9 {
        let valid: Vec<String> = (1..=4)
            .map(|k| down_gbps / (f64::from(k * spines) * fabric_gbps))
            .filter(|r| *r > 0.0)
            .map(|r| format!("{}", (r * 1000.0).round() / 1000.0))
            .collect();
        diags.error(
            &at.key("oversubscription"),
            format!(
                "{down_gbps} Gbit/s of host links over {spines} spines at {fabric_gbps} Gbit/s \
                 gives {:.3} uplinks per spine at {oversub}:1; expected a ratio giving a whole \
                 number of uplinks per spine, e.g. {}",
                per_spine,
                valid.join(", ")
            ),
        );
        return None;
    }
    Some(rounded as u32)
}

fn leaf_spine(b: &mut Builder<'_>, s: &LeafSpineSpec, at: &KeyPath, diags: &mut Diagnostics) -> Option<()> {
    let ok = check_rate(s.host_rate_gbps, &at.key("host_rate_gbps"), diags)
        & check_rate(s.fabric_rate_gbps, &at.key("fabric_rate_gbps"), diags)
        & crate::limits::check_delay_ns(s.link_delay_ns, &at.key("link_delay_ns"), diags)
        & check_host(&s.host, &at.key("host"), diags);
    if !ok {
        return None;
    }
    let (leaves, spines, hpl) = (s.leaves.get(), s.spines.get(), s.hosts_per_leaf.get());
    let down_ports = hpl * s.host.nics;
    let lps = links_per_spine(
        f64::from(down_ports) * s.host_rate_gbps,
        spines,
        s.fabric_rate_gbps,
        s.oversubscription,
        at,
        diags,
    )?;
    let leaf_ids: Vec<SwitchId> = (0..leaves)
        .map(|l| {
            b.add_switch(
                format!("leaf{l}"),
                Tier::Leaf,
                (down_ports + lps * spines) as usize,
            )
        })
        .collect();
    let spine_ids: Vec<SwitchId> = (0..spines)
        .map(|p| b.add_switch(format!("spine{p}"), Tier::Spine, (leaves * lps) as usize))
        .collect();
    for (l, &leaf) in leaf_ids.iter().enumerate() {
        let mut port = 0u16;
        for h in 0..hpl {
            let name = format!("h{}", l as u32 * hpl + h);
            for nic in b.add_host(name, &s.host, s.host_rate_gbps) {
                b.cable_nic(nic, leaf, port, s.host_rate_gbps, s.link_delay_ns);
                port += 1;
            }
        }
        for (p, &spine) in spine_ids.iter().enumerate() {
            for k in 0..lps {
                let spine_port = (l as u32 * lps + k) as u16;
                let leaf_port = (down_ports + p as u32 * lps + k) as u16;
                b.cable_switches(
                    leaf,
                    leaf_port,
                    spine,
                    spine_port,
                    s.fabric_rate_gbps,
                    s.link_delay_ns,
                );
            }
        }
    }
    Some(())
}

fn fat_tree(b: &mut Builder<'_>, s: &FatTreeSpec, at: &KeyPath, diags: &mut Diagnostics) -> Option<()> {
    let k = s.k.get();
    if k < 2 || !k.is_multiple_of(2) {
        diags.error(&at.key("k"), format!("expected an even integer >= 2, found {k}"));
        return None;
    }
    let ok = check_rate(s.host_rate_gbps, &at.key("host_rate_gbps"), diags)
        & check_rate(s.fabric_rate_gbps, &at.key("fabric_rate_gbps"), diags)
        & crate::limits::check_delay_ns(s.link_delay_ns, &at.key("link_delay_ns"), diags)
        & check_host(&s.host, &at.key("host"), diags);
    if !ok {
        return None;
    }
    let half = k / 2;
    if !half.is_multiple_of(s.host.nics) {
        diags.error(
            &at.key("host").key("nics"),
            format!(
                "expected a divisor of k/2 = {half} (each leaf has {half} host ports), found {}",
                s.host.nics
            ),
        );
        return None;
    }
    let hosts_per_leaf = half / s.host.nics;
    let mut leaves = Vec::new();
    let mut aggs = Vec::new();
    for p in 0..k {
        for i in 0..half {
            leaves.push(b.add_switch(format!("leaf{}", p * half + i), Tier::Leaf, k as usize));
        }
        for i in 0..half {
            aggs.push(b.add_switch(format!("spine{}", p * half + i), Tier::Spine, k as usize));
        }
    }
    let cores: Vec<SwitchId> = (0..half * half)
        .map(|c| b.add_switch(format!("core{c}"), Tier::Core, k as usize))
        .collect();
    let mut host_idx = 0;
    for p in 0..k {
        for i in 0..half {
            let leaf = leaves[(p * half + i) as usize];
            let mut port = 0u16;
            for _ in 0..hosts_per_leaf {
                for nic in b.add_host(format!("h{host_idx}"), &s.host, s.host_rate_gbps) {
                    b.cable_nic(nic, leaf, port, s.host_rate_gbps, s.link_delay_ns);
                    port += 1;
                }
                host_idx += 1;
            }
            // Leaf i's uplink j goes to pod spine j, which uses down port i for it.
            for j in 0..half {
                let agg = aggs[(p * half + j) as usize];
                b.cable_switches(
                    leaf,
                    (half + j) as u16,
                    agg,
                    i as u16,
                    s.fabric_rate_gbps,
                    s.link_delay_ns,
                );
            }
        }
        // Pod spine j connects to cores j*half .. j*half + half - 1; core c uses port p.
        for j in 0..half {
            let agg = aggs[(p * half + j) as usize];
            for m in 0..half {
                let core = cores[(j * half + m) as usize];
                b.cable_switches(
                    agg,
                    (half + m) as u16,
                    core,
                    p as u16,
                    s.fabric_rate_gbps,
                    s.link_delay_ns,
                );
            }
        }
    }
    Some(())
}

fn rail_optimized(
    b: &mut Builder<'_>,
    s: &RailOptimizedSpec,
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<()> {
    let ok = check_rate(s.host_rate_gbps, &at.key("host_rate_gbps"), diags)
        & check_rate(s.fabric_rate_gbps, &at.key("fabric_rate_gbps"), diags)
        & crate::limits::check_delay_ns(s.link_delay_ns, &at.key("link_delay_ns"), diags)
        & check_host(&s.host, &at.key("host"), diags);
    if !ok {
        return None;
    }
    match s.spines {
        Some(spines) => rail_classic(b, s, spines.get(), at, diags),
        None => rail_scalable_units(b, s, at, diags),
    }
}

/// The classic form: hosts in groups, every rail leaf cabled to every spine.
fn rail_classic(
    b: &mut Builder<'_>,
    s: &RailOptimizedSpec,
    spines: u32,
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<()> {
    let hosts = s.hosts.get();
    let per_group = s.hosts_per_group.map_or(hosts, Count::get);
    if !hosts.is_multiple_of(per_group) {
        diags.error(
            &at.key("hosts_per_group"),
            format!("expected a divisor of hosts = {hosts}, found {per_group}"),
        );
        return None;
    }
    let groups = hosts / per_group;
    let rails = s.host.nics;
    let lps = links_per_spine(
        f64::from(per_group) * s.host_rate_gbps,
        spines,
        s.fabric_rate_gbps,
        s.oversubscription,
        at,
        diags,
    )?;
    let n_leaves = groups * rails;
    let (leaf_ports, spine_ports) = (per_group + lps * spines, n_leaves * lps);
    if let Some(radix) = s.radix.map(Count::get) {
        if leaf_ports > radix {
            diags.error(
                &at.key("hosts_per_group"),
                format!(
                    "a rail leaf needs {per_group} host ports and {} uplinks = {leaf_ports} ports; \
                     expected at most radix = {radix}",
                    lps * spines
                ),
            );
            return None;
        }
        if spine_ports > radix {
            diags.error(
                &at.key("spines"),
                format!(
                    "each spine needs a port for each of {n_leaves} leaves x {lps} links = \
                     {spine_ports} ports; expected at most radix = {radix} (leave `spines` out to \
                     add a core tier instead)"
                ),
            );
            return None;
        }
    }
    let leaves: Vec<SwitchId> = (0..n_leaves)
        .map(|l| b.add_switch(format!("leaf{l}"), Tier::Leaf, leaf_ports as usize))
        .collect();
    let spine_ids: Vec<SwitchId> = (0..spines)
        .map(|p| b.add_switch(format!("spine{p}"), Tier::Spine, spine_ports as usize))
        .collect();
    for g in 0..groups {
        for h in 0..per_group {
            let nics = b.add_host(format!("h{}", g * per_group + h), &s.host, s.host_rate_gbps);
            for (r, nic) in nics.into_iter().enumerate() {
                let leaf = leaves[(g * rails + r as u32) as usize];
                b.cable_nic(nic, leaf, h as u16, s.host_rate_gbps, s.link_delay_ns);
            }
        }
    }
    for (l, &leaf) in leaves.iter().enumerate() {
        for (p, &spine) in spine_ids.iter().enumerate() {
            for k in 0..lps {
                let leaf_port = (per_group + p as u32 * lps + k) as u16;
                let spine_port = (l as u32 * lps + k) as u16;
                b.cable_switches(
                    leaf,
                    leaf_port,
                    spine,
                    spine_port,
                    s.fabric_rate_gbps,
                    s.link_delay_ns,
                );
            }
        }
    }
    Some(())
}

/// The largest divisor of `n` that is at most `max` (0 when `max` is 0).
fn largest_divisor_at_most(n: u32, max: u32) -> u32 {
    (1..=max.min(n)).rev().find(|d| n.is_multiple_of(*d)).unwrap_or(0)
}

/// How a scalable-unit fabric is sized (docs/large-fabrics.md §3).
#[derive(Debug, Clone, PartialEq)]
struct SuPlan {
    sus: u32,
    rails: u32,
    /// Host ports and uplinks per leaf.
    down: u32,
    up: u32,
    /// Links between a leaf and each spine of its group.
    k: u32,
    /// Spines per group.
    spines_per_group: u32,
    /// Leaf indices of each spine-leaf group.
    groups: Vec<Vec<u32>>,
    /// Cores per core group (0: two tiers) and each group's spines' uplinks.
    cores_per_cg: u32,
    spine_up: Vec<u32>,
}

/// Sizes a scalable-unit fabric, or says which key makes it impossible.
fn plan_scalable_units(s: &RailOptimizedSpec) -> Result<SuPlan, (&'static str, String)> {
    let radix = s.radix.map_or(DEFAULT_SWITCH_RADIX, Count::get);
    let per_su = s.hosts_per_group.map_or(DEFAULT_HOSTS_PER_SU, Count::get);
    let hosts = s.hosts.get();
    let rails = s.host.nics;
    let sus = hosts.div_ceil(per_su);
    let oversub = s.oversubscription;
    if !(oversub.is_finite() && oversub > 0.0) {
        return Err((
            "oversubscription",
            format!("expected a ratio > 0 (1 = non-blocking), found {oversub}"),
        ));
    }
    let up_f = f64::from(per_su) * s.host_rate_gbps / (s.fabric_rate_gbps * oversub);
    let up = up_f.round();
    if up < 1.0 || (up_f - up).abs() > 1e-9 {
        return Err((
            "oversubscription",
            format!(
                "{per_su} hosts at {} Gbit/s per leaf over uplinks at {} Gbit/s gives {up_f:.3} \
                 uplinks at {oversub}:1; expected a ratio giving a whole number of uplinks",
                s.host_rate_gbps, s.fabric_rate_gbps
            ),
        ));
    }
    let up = up as u32;
    if per_su + up > radix {
        return Err((
            "hosts_per_group",
            format!(
                "a rail leaf needs {per_su} host ports and {up} uplinks = {} ports; expected at \
                 most radix = {radix} (fewer hosts per unit, more oversubscription, or a larger \
                 radix)",
                per_su + up
            ),
        ));
    }
    let n_leaves = sus * rails;
    if n_leaves <= radix {
        // Two tiers: one group holds every leaf.
        let k = largest_divisor_at_most(up, radix / n_leaves);
        return Ok(SuPlan {
            sus,
            rails,
            down: per_su,
            up,
            k,
            spines_per_group: up / k,
            groups: vec![(0..n_leaves).collect()],
            cores_per_cg: 0,
            spine_up: vec![0],
        });
    }
    // Three tiers: spines split their ports between leaves and cores.
    let half = radix / 2;
    let groups: Vec<Vec<u32>> = match s.spine_groups {
        SpineGroups::Rail => {
            // One leaf per unit on each rail: a group takes `half` units of one rail.
            (0..rails)
                .flat_map(|r| {
                    (0..sus)
                        .collect::<Vec<_>>()
                        .chunks(half as usize)
                        .map(|units| units.iter().map(|u| u * rails + r).collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                })
                .collect()
        }
        SpineGroups::Units => {
            let per_group = half / rails;
            if per_group == 0 {
                return Err((
                    "spine_groups",
                    format!(
                        "a group of whole units needs a spine port per leaf of a unit ({rails} \
                         rails), more than the {half} down ports of a radix-{radix} spine; use \
                         `rail`"
                    ),
                ));
            }
            (0..sus)
                .collect::<Vec<_>>()
                .chunks(per_group as usize)
                .map(|units| {
                    units
                        .iter()
                        .flat_map(|u| (0..rails).map(move |r| u * rails + r))
                        .collect()
                })
                .collect()
        }
    };
    let full = groups.iter().map(Vec::len).max().unwrap_or(0) as u32;
    let k = largest_divisor_at_most(up, half / full.max(1));
    let spines_per_group = up / k;
    // Each spine sends up what comes down to it (non-blocking), and at least one link to
    // every core of its core group, so that every group reaches every other. More cores
    // can mean more uplinks on the spines of small groups, hence the loop; it ends because
    // the cores per group only grow and a spine's uplinks are bounded by its ports.
    let mut cores = (k * n_leaves).div_ceil(radix).max(1);
    let spine_up = loop {
        let spine_up: Vec<u32> = groups.iter().map(|g| (g.len() as u32 * k).max(cores)).collect();
        if let Some((g, u)) = groups
            .iter()
            .zip(&spine_up)
            .find(|(g, u)| g.len() as u32 * k + **u > radix)
        {
            return Err((
                "hosts",
                format!(
                    "{hosts} hosts in {} spine groups need spines with {} leaf links and {u} core \
                     links, more than radix = {radix}: the fabric would need a fourth tier",
                    groups.len(),
                    g.len() as u32 * k,
                ),
            ));
        }
        let need = spine_up
            .iter()
            .map(|u| u64::from(*u))
            .sum::<u64>()
            .div_ceil(u64::from(radix));
        if need <= u64::from(cores) {
            break spine_up;
        }
        cores = u32::try_from(need).unwrap_or(u32::MAX);
    };
    Ok(SuPlan {
        sus,
        rails,
        down: per_su,
        up,
        k,
        spines_per_group,
        groups,
        cores_per_cg: cores,
        spine_up,
    })
}

/// Scalable units as reference architectures build them (docs/large-fabrics.md).
fn rail_scalable_units(
    b: &mut Builder<'_>,
    s: &RailOptimizedSpec,
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<()> {
    let plan = match plan_scalable_units(s) {
        Ok(p) => p,
        Err((key, msg)) => {
            diags.error(&at.key(key), msg);
            return None;
        }
    };
    let radix = s.radix.map_or(DEFAULT_SWITCH_RADIX, Count::get) as usize;
    let (hosts, rails) = (s.hosts.get(), plan.rails);
    let leaves: Vec<SwitchId> = (0..plan.sus * rails)
        .map(|l| b.add_switch(format!("leaf{l}"), Tier::Leaf, radix))
        .collect();
    let n_groups = plan.groups.len() as u32;
    let spines: Vec<SwitchId> = (0..n_groups * plan.spines_per_group)
        .map(|p| b.add_switch(format!("spine{p}"), Tier::Spine, radix))
        .collect();
    let cores: Vec<SwitchId> = (0..plan.spines_per_group * plan.cores_per_cg)
        .map(|c| b.add_switch(format!("core{c}"), Tier::Core, radix))
        .collect();
    for h in 0..hosts {
        let (unit, slot) = (h / plan.down, h % plan.down);
        let nics = b.add_host(format!("h{h}"), &s.host, s.host_rate_gbps);
        for (r, nic) in nics.into_iter().enumerate() {
            let leaf = leaves[(unit * rails + r as u32) as usize];
            b.cable_nic(nic, leaf, slot as u16, s.host_rate_gbps, s.link_delay_ns);
        }
    }
    let (rate, delay) = (s.fabric_rate_gbps, s.link_delay_ns);
    // Leaf uplink p*k + m goes to spine p of the leaf's group; spine down port i*k + m to
    // the group's leaf i.
    for (g, group) in plan.groups.iter().enumerate() {
        for (i, &l) in group.iter().enumerate() {
            for p in 0..plan.spines_per_group {
                let spine = spines[(g as u32 * plan.spines_per_group + p) as usize];
                for m in 0..plan.k {
                    b.cable_switches(
                        leaves[l as usize],
                        (plan.down + p * plan.k + m) as u16,
                        spine,
                        (i as u32 * plan.k + m) as u16,
                        rate,
                        delay,
                    );
                }
            }
        }
    }
    if plan.cores_per_cg == 0 {
        return Some(());
    }
    // Core group j joins spine j of every group; each spine's uplinks go round robin over
    // the group's cores, continuing where the previous spine stopped, so cores fill evenly.
    let c = plan.cores_per_cg;
    for j in 0..plan.spines_per_group {
        let mut next_port = vec![0u16; c as usize];
        let mut turn = 0u32;
        for (g, group) in plan.groups.iter().enumerate() {
            let spine = spines[(g as u32 * plan.spines_per_group + j) as usize];
            let first_up = group.len() as u32 * plan.k;
            for t in 0..plan.spine_up[g] {
                let ci = (turn % c) as usize;
                turn += 1;
                b.cable_switches(
                    spine,
                    (first_up + t) as u16,
                    cores[(j * c) as usize + ci],
                    next_port[ci],
                    rate,
                    delay,
                );
                next_port[ci] += 1;
            }
        }
    }
    Some(())
}

fn explicit(b: &mut Builder<'_>, s: &ExplicitTopology, at: &KeyPath, diags: &mut Diagnostics) -> Option<()> {
    let before = diags.error_count();
    let mut host_names = std::collections::HashSet::new();
    for (hi, h) in s.hosts.iter().enumerate() {
        let hat = at.key("hosts").index(hi);
        if !host_names.insert(h.name.as_str()) {
            diags.error(&hat.key("name"), format!("duplicate host name `{}`", h.name));
        }
        let host = HostId(b.fabric.hosts.len() as u32);
        let pcie_index = |name: &str| h.pcie_switches.iter().position(|p| p.name == name);
        for (pi, p) in h.pcie_switches.iter().enumerate() {
            if p.socket >= h.sockets {
                diags.error(
                    &hat.key("pcie_switches").index(pi).key("socket"),
                    format!(
                        "expected a socket below {} (the host's `sockets`), found {}",
                        h.sockets, p.socket
                    ),
                );
            }
        }
        let mut gpus = Vec::new();
        for (gi, g) in h.gpus.iter().enumerate() {
            let Some(sw) = pcie_index(&g.pcie_switch) else {
                diags.error(
                    &hat.key("gpus").index(gi).key("pcie_switch"),
                    unknown_name(
                        "PCIe switch",
                        &g.pcie_switch,
                        h.pcie_switches.iter().map(|p| p.name.as_str()),
                    ),
                );
                continue;
            };
            gpus.push(GpuId(b.fabric.gpus.len() as u32));
            b.fabric.gpus.push(Gpu {
                name: g.name.clone(),
                host,
                model: g.model.clone(),
                pcie_switch: sw,
                pcie: g.pcie,
            });
        }
        let mut nics = Vec::new();
        for (ni, n) in h.nics.iter().enumerate() {
            let nat = hat.key("nics").index(ni);
            let Some(sw) = pcie_index(&n.pcie_switch) else {
                diags.error(
                    &nat.key("pcie_switch"),
                    unknown_name(
                        "PCIe switch",
                        &n.pcie_switch,
                        h.pcie_switches.iter().map(|p| p.name.as_str()),
                    ),
                );
                continue;
            };
            if n.ports == 0 {
                diags.error(&nat.key("ports"), "expected an integer >= 1, found 0".to_string());
                continue;
            }
            check_rate(n.speed_gbps, &nat.key("speed_gbps"), diags);
            nics.push(NicId(b.fabric.nics.len() as u32));
            b.fabric.nics.push(Nic {
                name: n.name.clone(),
                host,
                model: n.model.clone(),
                firmware: n.firmware.clone(),
                pcie_switch: sw,
                pcie: n.pcie,
                congestion: None,
                ports: vec![
                    NicPort {
                        speed_gbps: n.speed_gbps,
                        mtu_bytes: b.config.mtu.nic_bytes,
                        link: None,
                    };
                    n.ports as usize
                ],
            });
        }
        b.fabric.hosts.push(Host {
            name: h.name.clone(),
            sockets: h.sockets,
            pcie_switches: h
                .pcie_switches
                .iter()
                .map(|p| PcieSwitch {
                    name: p.name.clone(),
                    socket: p.socket,
                })
                .collect(),
            gpus,
            nics,
        });
    }
    let mut switch_names = std::collections::HashSet::new();
    for (si, sw) in s.switches.iter().enumerate() {
        if !switch_names.insert(sw.name.as_str()) || host_names.contains(sw.name.as_str()) {
            diags.error(
                &at.key("switches").index(si).key("name"),
                format!("duplicate node name `{}`", sw.name),
            );
        }
        let id = b.add_switch(sw.name.clone(), sw.tier, sw.ports as usize);
        b.fabric.switches[id.index()].model = sw.model.clone();
    }
    if diags.error_count() > before {
        return None;
    }
    let mut next_free: Vec<u16> = vec![0; b.fabric.switches.len()];
    for (li, l) in s.links.iter().enumerate() {
        let lat = at.key("links").index(li);
        if !(check_rate(l.rate_gbps, &lat.key("rate_gbps"), diags)
            & crate::limits::check_delay_ns(l.delay_ns, &lat.key("delay_ns"), diags))
        {
            continue;
        }
        let a = resolve_end(&b.fabric, &l.a, &mut next_free, &lat.key("a"), diags);
        let z = resolve_end(&b.fabric, &l.b, &mut next_free, &lat.key("b"), diags);
        let (Some(a), Some(z)) = (a, z) else { continue };
        if a.node == z.node {
            diags.error(&lat, format!("a link joins `{}` to itself", l.a));
            continue;
        }
        b.fabric.connect(a, z, l.rate_gbps, l.delay_ns);
    }
    (diags.error_count() == before).then_some(())
}

/// "unknown X `name`; did you mean `close`?" (or the list of known names).
pub(crate) fn unknown_name<'a>(what: &str, name: &str, known: impl Iterator<Item = &'a str>) -> String {
    let known: Vec<&str> = known.collect();
    match crate::diag::closest(name, known.iter().copied()) {
        Some(c) => format!("unknown {what} `{name}`; did you mean `{c}`?"),
        None if known.is_empty() => format!("unknown {what} `{name}`; there are none"),
        None if known.len() <= 8 => format!("unknown {what} `{name}`; expected one of {}", known.join(", ")),
        None => format!("unknown {what} `{name}`"),
    }
}

/// Resolves a link end string and checks the port is free.
fn resolve_end(
    fabric: &Fabric,
    s: &str,
    next_free: &mut [u16],
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<PortRef> {
    let p = parse_port_ref(fabric, s, Some(next_free))
        .map_err(|m| diags.error(at, m))
        .ok()?;
    if (p.port as usize) >= fabric.port_count(p.node) {
        diags.error(
            at,
            format!(
                "`{s}`: port {} does not exist; `{}` has {} ports",
                p.port,
                fabric.node_name(p.node),
                fabric.port_count(p.node)
            ),
        );
        return None;
    }
    if fabric.port_link(p).is_some() {
        diags.error(at, format!("`{s}`: port already carries a link"));
        return None;
    }
    Some(p)
}

/// Parses a port reference: `host/nic`, `host/nic/port` (1-based), `switch:port` (0-based),
/// or `switch` (next free port, only when `next_free` is given).
pub fn parse_port_ref(fabric: &Fabric, s: &str, next_free: Option<&mut [u16]>) -> Result<PortRef, String> {
    if let Some((host, rest)) = s.split_once('/') {
        let (nic, port) = match rest.split_once('/') {
            Some((nic, p)) => {
                let port: u16 = p.parse().ok().filter(|p| *p >= 1).ok_or_else(|| {
                    format!("`{s}`: expected a NIC port number >= 1 after the second `/`, found `{p}`")
                })?;
                (nic, port - 1)
            }
            None => (rest, 0),
        };
        if fabric.host_by_name(host).is_none() {
            return Err(unknown_name(
                "host",
                host,
                fabric.hosts.iter().map(|h| h.name.as_str()),
            ));
        }
        let id = fabric.nic_by_name(host, nic).ok_or_else(|| {
            let h = fabric.host_by_name(host).expect("checked above");
            unknown_name(
                &format!("NIC of host `{host}`"),
                nic,
                fabric.hosts[h.index()]
                    .nics
                    .iter()
                    .map(|n| fabric.nics[n.index()].name.as_str()),
            )
        })?;
        return Ok(PortRef {
            node: Node::Nic(id),
            port,
        });
    }
    let (name, port) = match s.split_once(':') {
        Some((n, p)) => (
            n,
            Some(
                p.parse::<u16>()
                    .map_err(|_| format!("`{s}`: expected a port number after `:`, found `{p}`"))?,
            ),
        ),
        None => (s, None),
    };
    let sw = fabric
        .switch_by_name(name)
        .ok_or_else(|| unknown_name("switch", name, fabric.switches.iter().map(|x| x.name.as_str())))?;
    let port = match (port, next_free) {
        (Some(p), _) => p,
        (None, Some(nf)) => {
            let ports = &fabric.switches[sw.index()].ports;
            let mut p = nf[sw.index()];
            while (p as usize) < ports.len() && ports[p as usize].link.is_some() {
                p += 1;
            }
            nf[sw.index()] = p + 1;
            p
        }
        (None, None) => return Err(format!("`{s}`: expected `switch:port`")),
    };
    Ok(PortRef {
        node: Node::Switch(sw),
        port,
    })
}

impl Fabric {
    /// Writes the fabric as an explicit topology (with explicit switch ports), so a
    /// generated fabric can be saved and edited by hand. Port MTUs are not part of the
    /// topology; see [`crate::scenario::Override`].
    pub fn to_explicit(&self) -> ExplicitTopology {
        let hosts = self
            .hosts
            .iter()
            .map(|h| HostSpec {
                name: h.name.clone(),
                sockets: h.sockets,
                pcie_switches: h
                    .pcie_switches
                    .iter()
                    .map(|p| PcieSwitchSpec {
                        name: p.name.clone(),
                        socket: p.socket,
                    })
                    .collect(),
                gpus: h
                    .gpus
                    .iter()
                    .map(|g| {
                        let g = &self.gpus[g.index()];
                        GpuSpec {
                            name: g.name.clone(),
                            model: g.model.clone(),
                            pcie_switch: h.pcie_switches[g.pcie_switch].name.clone(),
                            pcie: g.pcie,
                        }
                    })
                    .collect(),
                nics: h
                    .nics
                    .iter()
                    .map(|n| {
                        let n = &self.nics[n.index()];
                        NicSpec {
                            name: n.name.clone(),
                            model: n.model.clone(),
                            firmware: n.firmware.clone(),
                            pcie_switch: h.pcie_switches[n.pcie_switch].name.clone(),
                            pcie: n.pcie,
                            ports: n.ports.len() as u16,
                            speed_gbps: n.ports.first().map_or(0.0, |p| p.speed_gbps),
                        }
                    })
                    .collect(),
            })
            .collect();
        let switches = self
            .switches
            .iter()
            .map(|s| SwitchSpec {
                name: s.name.clone(),
                tier: s.tier,
                model: s.model.clone(),
                ports: s.ports.len() as u16,
            })
            .collect();
        let links = self
            .links
            .iter()
            .map(|l| LinkSpec {
                a: self.port_name(l.a),
                b: self.port_name(l.b),
                rate_gbps: l.rate_gbps,
                delay_ns: l.delay_ns,
            })
            .collect();
        ExplicitTopology {
            hosts,
            switches,
            links,
        }
    }
}
