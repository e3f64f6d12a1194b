//! What a host is: its RDMA devices, netdevs, PCIe functions (NICs, GPUs and the bridges
//! above them), the mlx5 congestion knobs, and the tool outputs captured with it.
//! Every value is what the host reported; nothing here is a default.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::parse::{
    ethtool::EthtoolStats, ibv_devinfo::IbvDevice, lspci::PciDevice, mlnx_qos::MlnxQos,
    nvidia_topo::TopoMatrix,
};

/// One host's inventory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostInventory {
    /// Host name (`etc/hostname`, else `proc/sys/kernel/hostname`, else the tree's name).
    pub hostname: String,
    /// Where it was read from (a directory or a snapshot file).
    pub source: String,
    /// RDMA devices under `/sys/class/infiniband`, by name.
    pub rdma: Vec<RdmaDevice>,
    /// Network interfaces under `/sys/class/net` (loopback left out).
    pub netdevs: Vec<Netdev>,
    /// PCIe functions that matter: NICs, GPUs, and every bridge above them.
    pub pci: Vec<PciFunction>,
    /// Tool outputs captured with the host (snapshot or `commands/` directory).
    pub tools: ToolOutputs,
    /// Linux bonds (`/sys/class/net/<bond>/bonding`), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bonds: Vec<Bond>,
    /// NCCL settings from `/etc/nccl.conf` (`NAME=value` lines), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub nccl_conf: BTreeMap<String, String>,
    /// What could not be read, and why. A problem here is not fatal: the audit reports it.
    pub problems: Vec<ReadProblem>,
}

/// A Linux bond and what RDMA makes of it (docs/reference/nic-aggregation.md §1-§2).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Bond {
    /// Interface name, e.g. `bond0`.
    pub name: String,
    /// `bonding/mode`, e.g. `802.3ad` 4.
    pub mode: Option<CodedState>,
    /// `bonding/xmit_hash_policy`, e.g. `layer3+4` 1.
    pub xmit_hash_policy: Option<CodedState>,
    /// `bonding/miimon`, ms (0: link monitoring off).
    pub miimon_ms: Option<u32>,
    /// `bonding/lacp_rate` (802.3ad).
    pub lacp_rate: Option<CodedState>,
    /// `bonding/active_slave` (empty outside active-backup, tlb and alb).
    pub active_slave: Option<String>,
    /// `bonding/mii_status` of the bond itself.
    pub mii_status: Option<String>,
    /// `bonding/slaves`, in order, with their `bonding_slave/` state.
    pub members: Vec<BondMember>,
    /// RDMA devices whose GIDs use the bond's addresses.
    pub rdma_devices: Vec<String>,
    /// The RoCE LAG device over the bond: the one RDMA device using it, when the bond has
    /// several members (mlx5 replaces the members' devices by one, `mlx5_bond_N`).
    pub roce_lag: Option<String>,
    /// How the LAG places QPs on ports, where the driver says (`hash` or
    /// `queue_affinity`, from MLNX_OFED's `compat/devlink/lag_port_select_mode` of the first
    /// member that has it; mainline kernels do not expose it in sysfs).
    pub port_select_mode: Option<String>,
}

/// The card a PCI function belongs to: its address less the function digit. The ports of
/// a multi-port card share it (docs/reference/nic-aggregation.md §3, how NCCL tells them
/// apart).
pub fn pci_card(bdf: &str) -> &str {
    bdf.rsplit_once('.').map_or(bdf, |(d, _)| d)
}

/// `lag_port_select_mode` of a LAG that places QPs round-robin as they are created.
pub const QUEUE_AFFINITY: &str = "queue_affinity";

/// Bonding modes whose transmit hash policy places the traffic (balance-xor, 802.3ad).
pub const HASHED_BOND_MODES: [u8; 2] = [2, 4];
/// Bonding mode numbers that activate mlx5 RoCE LAG: active-backup, balance-xor, 802.3ad.
pub const ROCE_LAG_BOND_MODES: [u8; 3] = [1, 2, 4];
/// Transmit hash policies that hash L4 ports (layer3+4, encap3+4): the only ones that
/// spread the QPs between two hosts, which differ only in UDP source port.
pub const L4_HASH_POLICIES: [u8; 2] = [1, 4];

impl Bond {
    /// Whether the bond spreads RoCE QPs between one pair of hosts over its members: a
    /// hashed mode with an L4 policy, or a RoCE LAG in queue affinity
    /// (docs/reference/nic-aggregation.md §1.3, §2.1).
    /// `None` when the mode or policy is unknown.
    pub fn spreads_qps(&self) -> Option<bool> {
        let mode = self.mode.as_ref()?.code;
        if !HASHED_BOND_MODES.contains(&mode) {
            return Some(false);
        }
        // Queue affinity takes each new QP to the next port whatever the policy.
        if self.roce_lag.is_some() && self.port_select_mode.as_deref() == Some(QUEUE_AFFINITY) {
            return Some(true);
        }
        Some(L4_HASH_POLICIES.contains(&self.xmit_hash_policy.as_ref()?.code))
    }
}

/// A bond member (`/sys/class/net/<slave>/bonding_slave`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct BondMember {
    /// Interface name.
    pub name: String,
    /// `state`: `active` or `backup`.
    pub state: Option<String>,
    /// `mii_status`: `up`, `down`, `going down`, `going back`.
    pub mii_status: Option<String>,
    /// `link_failure_count`.
    pub link_failure_count: Option<u64>,
    /// PCI function of the member's netdev.
    pub pci: Option<String>,
}

impl BondMember {
    /// The member's link is up.
    pub fn is_up(&self) -> bool {
        self.mii_status.as_deref() == Some("up")
    }
}

/// Something the reader could not read or understand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadProblem {
    /// Path inside the host's tree.
    pub path: String,
    /// What went wrong, and what was expected.
    pub message: String,
}

/// A state attribute as sysfs prints it: `4: ACTIVE`, `5: LinkUp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CodedState {
    /// The number.
    pub code: u8,
    /// The name.
    pub name: String,
}

/// An RDMA device (`/sys/class/infiniband/<dev>`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RdmaDevice {
    /// Device name, e.g. `mlx5_0`.
    pub name: String,
    /// Firmware version (`fw_ver`).
    pub fw_ver: Option<String>,
    /// Board id / PSID (`board_id`), e.g. `MT_0000000970`.
    pub board_id: Option<String>,
    /// HCA type (`hca_type`), e.g. `MT4129`.
    pub hca_type: Option<String>,
    /// Node GUID.
    pub node_guid: Option<String>,
    /// `node_type`, e.g. `1: CA`.
    pub node_type: Option<String>,
    /// PCI function behind it (`device` link), when the tree has one.
    pub pci: Option<String>,
    /// Netdevs on the same PCI function.
    pub netdevs: Vec<String>,
    /// Default traffic class (IP TOS) of the device's QPs, from MLNX_OFED's
    /// `tc/1/traffic_class` (`Global tclass=106`), when set.
    pub traffic_class: Option<u8>,
    /// Ports, by number.
    pub ports: Vec<RdmaPort>,
    /// Device-wide `hw_counters`.
    pub hw_counters: BTreeMap<String, u64>,
}

/// A port of an RDMA device.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RdmaPort {
    /// Port number (from 1).
    pub port: u8,
    /// Logical state (`state`), healthy `4: ACTIVE`.
    pub state: Option<CodedState>,
    /// Physical state (`phys_state`), healthy `5: LinkUp`.
    pub phys_state: Option<CodedState>,
    /// Rate in Gbit/s (first number of `rate`).
    pub rate_gbps: Option<f64>,
    /// The `rate` text, e.g. `400 Gb/sec (4X NDR)`.
    pub rate_text: Option<String>,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: Option<String>,
    /// Non-empty GID table entries.
    pub gids: Vec<Gid>,
    /// Standard PMA counters (`counters/`), raw values (`port_*_data` in 4-byte words).
    pub counters: BTreeMap<String, u64>,
    /// Driver counters (`hw_counters/`).
    pub hw_counters: BTreeMap<String, u64>,
    /// Legacy 64-bit PMA counters (`counters_ext/`: mlx4 and kernels before 4.5), raw
    /// values under their file names (`port_xmit_data_64` in 4-byte words).
    pub counters_ext: BTreeMap<String, u64>,
}

impl RdmaPort {
    /// True when the port is `ACTIVE` and `LinkUp`.
    pub fn is_up(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.code == 4)
            && self.phys_state.as_ref().is_some_and(|s| s.code == 5)
    }

    /// True for RoCE ports.
    pub fn is_roce(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
}

/// A GID table entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gid {
    /// Index in the table.
    pub index: u16,
    /// The GID, 8 groups of 4 hex digits.
    pub gid: String,
    /// `IB/RoCE v1` or `RoCE v2` (`gid_attrs/types`), when readable.
    pub kind: Option<String>,
    /// The netdev it belongs to (`gid_attrs/ndevs`), when readable.
    pub ndev: Option<String>,
    /// Read from the captured `show_gids` because sysfs showed no GID table.
    pub from_show_gids: bool,
}

/// A network interface (`/sys/class/net/<if>`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Netdev {
    /// Interface name.
    pub name: String,
    /// MTU in bytes.
    pub mtu_bytes: Option<u32>,
    /// Speed in Mbit/s; `None` when the link is down (`-1` or unreadable).
    pub speed_mbps: Option<u64>,
    /// `operstate` (`up`, `down`, ...).
    pub operstate: Option<String>,
    /// MAC address.
    pub address: Option<String>,
    /// PCI function behind it, when it has one (virtual interfaces do not).
    pub pci: Option<String>,
    /// RDMA device on the same PCI function.
    pub rdma: Option<String>,
    /// mlx5 DCQCN knobs (`ecn/roce_rp`, `ecn/roce_np`), present under MLNX_OFED only.
    pub ecn: Option<RoceEcn>,
}

/// The mlx5 DCQCN knobs of one interface (docs/reference/linux-rdma-sysfs.md §2,
/// docs/reference/congestion-control.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RoceEcn {
    /// Reaction point (sender) enabled per priority 0..7; `None` when unreadable.
    pub rp_enable: [Option<bool>; 8],
    /// Notification point (receiver) enabled per priority.
    pub np_enable: [Option<bool>; 8],
    /// Numeric `roce_rp/*` parameters by name.
    pub rp: BTreeMap<String, u64>,
    /// Numeric `roce_np/*` parameters by name.
    pub np: BTreeMap<String, u64>,
}

/// What a PCIe function is, from its class and vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PciRole {
    /// A GPU (display or 3D controller class).
    Gpu,
    /// A network controller (Ethernet, InfiniBand).
    Nic,
    /// A PCI-to-PCI bridge (a root port or a switch port).
    Bridge,
    /// Anything else (NVMe, ...).
    Other,
}

/// Negotiated and maximum link of a PCIe function.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PcieLinkState {
    /// Current speed, GT/s.
    pub cur_speed_gts: f64,
    /// Current width, lanes.
    pub cur_width: u8,
    /// Maximum speed, GT/s.
    pub max_speed_gts: f64,
    /// Maximum width, lanes.
    pub max_width: u8,
}

impl PcieLinkState {
    /// True when the link trained below what it is capable of.
    pub fn is_downgraded(&self) -> bool {
        self.cur_speed_gts < self.max_speed_gts || self.cur_width < self.max_width
    }
}

/// A PCIe function.
#[derive(Debug, Clone, Serialize)]
pub struct PciFunction {
    /// Domain:bus:device.function, e.g. `0000:17:00.0`.
    pub bdf: String,
    /// Role.
    pub role: PciRole,
    /// Class code, e.g. `0x020000`.
    pub class: Option<u32>,
    /// Vendor id.
    pub vendor: Option<u16>,
    /// Device id.
    pub device: Option<u16>,
    /// NUMA node; `None` when the host reports -1 (no affinity).
    pub numa_node: Option<u32>,
    /// CPUs near the device (`local_cpulist`).
    pub local_cpulist: Option<String>,
    /// Link state, when the function has a PCIe link.
    pub link: Option<PcieLinkState>,
    /// The host bridge it hangs off, e.g. `pci0000:16`.
    pub root: String,
    /// Bridges from the root down to its parent, outermost first.
    pub upstream: Vec<String>,
    /// SR-IOV: virtual functions supported / enabled.
    pub sriov: Option<(u32, u32)>,
    /// AER error counters by name, when AER is on.
    pub aer: Option<Aer>,
}

/// AER counters of a PCIe function (`aer_dev_correctable`, `_nonfatal`, `_fatal`), each
/// by the name the kernel prints (`RxErr`, `BadTLP`, ..., `TOTAL_ERR_COR`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aer {
    /// Correctable errors.
    pub correctable: BTreeMap<String, u64>,
    /// Uncorrectable, non-fatal errors.
    pub nonfatal: BTreeMap<String, u64>,
    /// Fatal errors.
    pub fatal: BTreeMap<String, u64>,
}

impl Aer {
    /// Total errors of one kind: the kernel's `TOTAL_ERR_*` line when present, else the
    /// sum of the named counters.
    pub fn total(map: &BTreeMap<String, u64>) -> u64 {
        map.iter()
            .find(|(k, _)| k.starts_with("TOTAL_ERR"))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| map.values().fold(0u64, |a, v| a.saturating_add(*v)))
    }
}

/// How far apart two PCIe functions are, in NCCL's and `nvidia-smi topo`'s terms
/// (docs/reference/linux-rdma-sysfs.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum PciDistance {
    /// At most one PCIe bridge between them.
    Pix,
    /// Several bridges, without crossing the host bridge.
    Pxb,
    /// Through the host bridge (CPU).
    Phb,
    /// Different host bridges on one NUMA node.
    Node,
    /// Across NUMA nodes (the SMP interconnect).
    Sys,
}

impl PciDistance {
    /// The code `nvidia-smi topo -m` prints.
    pub fn code(self) -> &'static str {
        match self {
            PciDistance::Pix => "PIX",
            PciDistance::Pxb => "PXB",
            PciDistance::Phb => "PHB",
            PciDistance::Node => "NODE",
            PciDistance::Sys => "SYS",
        }
    }
}

impl PciFunction {
    /// The distance between two functions from their paths: the longest common chain of
    /// bridges decides PIX/PXB/PHB; different roots decide NODE or SYS by NUMA node.
    pub fn distance(&self, other: &PciFunction) -> PciDistance {
        if self.root != other.root {
            return match (self.numa_node, other.numa_node) {
                (Some(a), Some(b)) if a == b => PciDistance::Node,
                (None, None) => PciDistance::Node,
                _ => PciDistance::Sys,
            };
        }
        let common = self
            .upstream
            .iter()
            .zip(&other.upstream)
            .take_while(|(a, b)| a == b)
            .count();
        if common == 0 {
            return PciDistance::Phb;
        }
        // Bridges each side traverses below the common one, plus the common bridge.
        let hops = (self.upstream.len() - common) + (other.upstream.len() - common) + 1;
        if hops <= 1
            || (self.upstream.len() - common <= 1 && other.upstream.len() - common <= 1 && common >= 2)
        {
            PciDistance::Pix
        } else {
            PciDistance::Pxb
        }
    }
}

/// Tool outputs captured with a host, parsed. A tool that was not captured is `None`
/// (or absent from the maps); `missing` lists what the capture could not run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolOutputs {
    /// `ethtool -S IF` per interface.
    pub ethtool: BTreeMap<String, EthtoolStats>,
    /// `mlnx_qos -i IF` per interface.
    pub mlnx_qos: BTreeMap<String, MlnxQos>,
    /// `ibv_devinfo -v`.
    pub ibv_devinfo: Option<Vec<IbvDevice>>,
    /// `nvidia-smi topo -m`.
    pub nvidia_topo: Option<TopoMatrix>,
    /// `lspci -vvv`.
    pub lspci: Option<Vec<PciDevice>>,
    /// `show_gids`.
    pub show_gids: Option<Vec<crate::parse::show_gids::GidRow>>,
    /// `iblinkinfo` (the whole IB fabric's switch ports, as seen from this host).
    pub iblinkinfo: Option<Vec<crate::parse::iblinkinfo::IbLink>>,
    /// Commands the capture could not run (not installed, failed), with the reason.
    pub missing: Vec<(String, String)>,
}

impl HostInventory {
    /// The PCIe function with this address.
    pub fn pci(&self, bdf: &str) -> Option<&PciFunction> {
        self.pci.iter().find(|f| f.bdf == bdf)
    }

    /// The netdev with this name.
    pub fn netdev(&self, name: &str) -> Option<&Netdev> {
        self.netdevs.iter().find(|n| n.name == name)
    }

    /// GPUs among the PCIe functions.
    pub fn gpus(&self) -> impl Iterator<Item = &PciFunction> {
        self.pci.iter().filter(|f| f.role == PciRole::Gpu)
    }

    /// The RDMA device's netdev, when it has one.
    pub fn netdev_of(&self, rdma: &RdmaDevice) -> Option<&Netdev> {
        rdma.netdevs.first().and_then(|n| self.netdev(n))
    }

    /// RoCE `active_mtu` of a device port from the captured `ibv_devinfo`, else derived
    /// from the netdev MTU as the kernel does (`iboe_get_mtu`,
    /// docs/reference/linux-rdma-sysfs.md §4).
    pub fn active_mtu_bytes(&self, rdma: &RdmaDevice, port: u8) -> Option<u32> {
        if let Some(devs) = &self.tools.ibv_devinfo
            && let Some(p) = devs
                .iter()
                .find(|d| d.hca_id == rdma.name)
                .and_then(|d| d.ports.iter().find(|p| p.port == port))
            && let Some(m) = p.active_mtu_bytes
        {
            return Some(m);
        }
        let mtu = self.netdev_of(rdma)?.mtu_bytes?;
        Some(roce_active_mtu(mtu))
    }
}

/// RoCE header overhead the kernel subtracts from the netdev MTU (GRH 40 + UDP 8 + BTH 12
/// + XRC 4 + AtomicETH 28 + ICRC 4; docs/reference/linux-rdma-sysfs.md §4, `iboe_get_mtu`).
pub const ROCE_MTU_OVERHEAD_BYTES: u32 = 96;

/// The IB MTU a RoCE port uses for a netdev MTU: the largest of 256..4096 that fits.
pub fn roce_active_mtu(netdev_mtu_bytes: u32) -> u32 {
    let room = netdev_mtu_bytes.saturating_sub(ROCE_MTU_OVERHEAD_BYTES);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m <= room)
        .unwrap_or(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(root: &str, up: &[&str], numa: Option<u32>) -> PciFunction {
        PciFunction {
            bdf: "x".into(),
            role: PciRole::Nic,
            class: None,
            vendor: None,
            device: None,
            numa_node: numa,
            local_cpulist: None,
            link: None,
            root: root.into(),
            upstream: up.iter().map(|s| s.to_string()).collect(),
            sriov: None,
            aer: None,
        }
    }

    #[test]
    fn distances_follow_the_reference_ladder() {
        // GPU and NIC under one downstream port pair of a PCIe switch:
        // root port 15:01.0 -> switch upstream 16:00.0 -> downstream 17:02.0 / 17:03.0.
        let gpu = f(
            "pci0000:15",
            &["0000:15:01.0", "0000:16:00.0", "0000:17:02.0"],
            Some(0),
        );
        let nic_same_port = f(
            "pci0000:15",
            &["0000:15:01.0", "0000:16:00.0", "0000:17:02.0"],
            Some(0),
        );
        let nic_same_switch = f(
            "pci0000:15",
            &["0000:15:01.0", "0000:16:00.0", "0000:17:03.0"],
            Some(0),
        );
        let nic_other_port = f("pci0000:15", &["0000:15:02.0"], Some(0));
        let nic_other_root = f("pci0000:30", &["0000:30:01.0"], Some(0));
        let nic_other_socket = f("pci0000:90", &["0000:90:01.0"], Some(1));
        assert_eq!(gpu.distance(&nic_same_port), PciDistance::Pix);
        assert_eq!(gpu.distance(&nic_same_switch), PciDistance::Pix);
        assert_eq!(gpu.distance(&nic_other_port), PciDistance::Phb);
        assert_eq!(gpu.distance(&nic_other_root), PciDistance::Node);
        assert_eq!(gpu.distance(&nic_other_socket), PciDistance::Sys);
        let deep = f(
            "pci0000:15",
            &[
                "0000:15:01.0",
                "0000:16:00.0",
                "0000:17:04.0",
                "0000:18:00.0",
                "0000:19:01.0",
            ],
            Some(0),
        );
        assert_eq!(gpu.distance(&deep), PciDistance::Pxb);
    }

    #[test]
    fn roce_mtu_follows_iboe_get_mtu() {
        assert_eq!(roce_active_mtu(1500), 1024);
        assert_eq!(roce_active_mtu(4200), 4096);
        assert_eq!(roce_active_mtu(9000), 4096);
        assert_eq!(roce_active_mtu(4190), 2048);
    }
}
