//! The four-layer configuration of a fabric: physical (MTU), network (PFC, ECN, switch
//! buffers, congestion control per traffic class), transport (QPs, WR depth, CQ
//! moderation) and application (NCCL, registered memory pool).
//!
//! Every default comes from `docs/reference/` and says where in a comment. A scenario's
//! `[config]` section overrides any subset; unspecified keys keep these defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Tier;

/// All configuration layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FabricConfig {
    /// Physical layer: MTUs.
    pub mtu: MtuConfig,
    /// Priority flow control (IEEE 802.1Qbb).
    pub pfc: PfcConfig,
    /// ECN/RED marking profiles per switch tier.
    pub ecn: EcnConfig,
    /// Switch shared-buffer model.
    pub buffer: BufferConfig,
    /// Traffic classes by name (e.g. `training`, `inference`), each with its priority and
    /// congestion-control algorithm. QPs take the algorithm of their class.
    pub classes: BTreeMap<String, TrafficClass>,
    /// Congestion notification packets (CNP) and ACKs.
    pub cnp: CnpConfig,
    /// Transport layer: QPs, queue depths, completion moderation, RoCE MTU.
    pub transport: TransportConfig,
    /// NCCL settings.
    pub nccl: NcclConfig,
    /// Pre-registered memory region and buffer pool.
    pub memory: MemoryPoolConfig,
    /// GPU-to-GPU links inside a host.
    pub intra_host: IntraHostConfig,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            mtu: MtuConfig::default(),
            pfc: PfcConfig::default(),
            ecn: EcnConfig::default(),
            buffer: BufferConfig::default(),
            classes: default_classes(),
            cnp: CnpConfig::default(),
            transport: TransportConfig::default(),
            nccl: NcclConfig::default(),
            memory: MemoryPoolConfig::default(),
            intra_host: IntraHostConfig::default(),
        }
    }
}

/// NVLink 4 (H100, "NV18" in `nvidia-smi topo -m`: 18 links,
/// crates/xirang-host/test_data/nvidia-smi-topo/h100-8gpu-8nic-nv18-topo-m.txt) at 25 GB/s per link and
/// direction: 450 GB/s. The per-link figure is not in docs/reference: unconfirmed.
pub const H100_NVLINK_GBPS: f64 = 18.0 * 25.0 * 8.0;
/// Start-up time of a GPU-to-GPU copy: our estimate, unconfirmed.
pub const NVLINK_LATENCY_US: f64 = 1.0;

/// GPU-to-GPU links inside a host. Collective steps between GPUs of one host run over
/// them instead of the network; the simulator gives each channel an equal share and does
/// not model contention on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntraHostConfig {
    /// Bandwidth of one GPU's NVLinks in one direction, Gbit/s (0 = no NVLink: PCIe).
    pub nvlink_gbps: f64,
    /// Latency of one GPU-to-GPU transfer, µs.
    pub nvlink_latency_us: f64,
    /// The GPUs' NVLinks meet in NVSwitches (HGX 8-GPU boards) rather than joining GPU to
    /// GPU (4-GPU boards): enables NVLink SHARP (NCCL's NVLS algorithms) on Hopper and later
    /// (docs/reference/collectives-and-nccl.md §1).
    pub nvswitch: bool,
    /// The `xmit_hash_policy` of the hosts' bonds, which places a bonded NIC's QPs on its
    /// ports: `layer3+4` (IPs and UDP ports: QPs spread) or `layer2+3` / `layer2` (every
    /// QP between two hosts on one port) (docs/reference/nic-aggregation.md §1.3, §4).
    #[serde(skip_serializing_if = "BondHash::is_default")]
    pub bond_hash_policy: BondHash,
    /// How a RoCE LAG device places its QPs on ports: `hash` (the port-selection table
    /// hashes each QP's headers by `bond_hash_policy`; mainline's default where firmware
    /// supports it) or `queue_affinity` (each new QP takes the next port, round-robin,
    /// whatever the policy; older kernels and firmware) (docs/reference/nic-aggregation.md §2.1).
    #[serde(skip_serializing_if = "LagPortSelect::is_default")]
    pub lag_port_select: LagPortSelect,
}

/// How a RoCE LAG device chooses a QP's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LagPortSelect {
    /// A hash of the QP's header fields.
    #[default]
    Hash,
    /// Round-robin over the ports as QPs are created.
    QueueAffinity,
}

impl LagPortSelect {
    fn is_default(&self) -> bool {
        *self == LagPortSelect::default()
    }
}

/// A bond's transmit hash policy, as the simulator distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum BondHash {
    /// IPs and L4 ports (`layer3+4`; `encap3+4` is read as it, the same fields without
    /// tunnels).
    #[default]
    #[serde(rename = "layer3+4", alias = "encap3+4")]
    Layer3Plus4,
    /// MACs and IPs (`layer2+3`; `encap2+3` is read as it).
    #[serde(rename = "layer2+3", alias = "encap2+3")]
    Layer2Plus3,
    /// MACs (`layer2`).
    #[serde(rename = "layer2")]
    Layer2,
}

impl BondHash {
    fn is_default(&self) -> bool {
        *self == BondHash::default()
    }

    /// Whether QPs between one pair of hosts can land on different members.
    pub fn uses_ports(self) -> bool {
        self == BondHash::Layer3Plus4
    }
}

impl Default for IntraHostConfig {
    fn default() -> Self {
        IntraHostConfig {
            nvlink_gbps: H100_NVLINK_GBPS,
            nvlink_latency_us: NVLINK_LATENCY_US,
            nvswitch: true,
            bond_hash_policy: BondHash::default(),
            lag_port_select: LagPortSelect::default(),
        }
    }
}

/// Jumbo host MTU: docs/reference/linux-rdma-sysfs.md §2 (`mtu` e.g. 9000); 9000 gives
/// RoCE active_mtu 4096 (§4).
pub const DEFAULT_NIC_MTU_BYTES: u32 = 9000;
/// SONiC default switch port MTU: docs/reference/switch-config.md, PORT table.
pub const DEFAULT_SWITCH_MTU_BYTES: u32 = 9100;
/// Smallest MTU accepted anywhere: the smallest IB MTU enum value
/// (docs/reference/linux-rdma-sysfs.md §4).
pub const MIN_MTU_BYTES: u32 = 256;

/// MTUs applied to every port unless an override says otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MtuConfig {
    /// Host netdev MTU.
    pub nic_bytes: u32,
    /// Switch port MTU.
    pub switch_bytes: u32,
}

impl Default for MtuConfig {
    fn default() -> Self {
        MtuConfig {
            nic_bytes: DEFAULT_NIC_MTU_BYTES,
            switch_bytes: DEFAULT_SWITCH_MTU_BYTES,
        }
    }
}

/// SONiC default lossless priorities (`pfc_enable` "3,4"): docs/reference/switch-config.md,
/// PORT_QOS_MAP.
pub const DEFAULT_PFC_PRIORITIES: [u8; 2] = [3, 4];
/// Largest pause time a PFC frame can carry, in quanta of 512 bit times:
/// docs/reference/congestion-control.md §6.
pub const MAX_PAUSE_QUANTA: u16 = 65535;
/// Resume offset below the XOFF threshold: the HPCC simulator's 3 KiB
/// (docs/reference/congestion-control.md §6).
pub const DEFAULT_XON_OFFSET_BYTES: u64 = 3 * 1024;
/// SONiC lossless `dynamic_th` -3 (threshold = 2^-3 of the free shared buffer); the same
/// alpha 1/8 as the HPCC simulator's shift 3. docs/reference/switch-config.md, BUFFER_PROFILE.
pub const DEFAULT_LOSSLESS_DYNAMIC_TH: i8 = -3;
/// SONiC lossy `dynamic_th` 3 (threshold = 8 x free buffer): docs/reference/switch-config.md.
pub const DEFAULT_LOSSY_DYNAMIC_TH: i8 = 3;

/// Priority flow control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PfcConfig {
    /// Master switch; `false` makes every class lossy.
    pub enabled: bool,
    /// Priorities (0..=7) with PFC on, on hosts and switches alike.
    pub priorities: Vec<u8>,
    /// Pause time carried by XOFF frames, in quanta of 512 bit times.
    pub pause_quanta: u16,
    /// Ingress XOFF threshold: `dynamic_th` n, threshold = 2^n x free shared buffer.
    pub dynamic_th: i8,
    /// Resume when usage falls this far below the XOFF threshold.
    pub xon_offset_bytes: u64,
    /// Headroom per ingress port for bytes in flight after XOFF. `None`: 3 x rate x
    /// one-way delay of the port's link, as the HPCC simulator sizes it
    /// (docs/reference/congestion-control.md §6).
    pub headroom_bytes: Option<u64>,
}

impl Default for PfcConfig {
    fn default() -> Self {
        PfcConfig {
            enabled: true,
            priorities: DEFAULT_PFC_PRIORITIES.to_vec(),
            pause_quanta: MAX_PAUSE_QUANTA,
            dynamic_th: DEFAULT_LOSSLESS_DYNAMIC_TH,
            xon_offset_bytes: DEFAULT_XON_OFFSET_BYTES,
            headroom_bytes: None,
        }
    }
}

/// PFC headroom of a port when none is configured: 3 x rate x one-way delay of its link,
/// as the HPCC simulator sizes it (docs/reference/congestion-control.md §6).
pub fn default_headroom_bytes(rate_gbps: f64, delay_ns: u64) -> u64 {
    /// Round trips of data in flight that headroom absorbs, in the HPCC simulator's sizing.
    const HEADROOM_DELAYS: f64 = 3.0;
    (rate_gbps * 1e9 * delay_ns as f64 / 8.0 / 1e9 * HEADROOM_DELAYS) as u64
}

impl PfcConfig {
    /// True when PFC protects this priority.
    pub fn is_lossless(&self, priority: u8) -> bool {
        self.enabled && self.priorities.contains(&priority)
    }
}

/// SONiC default `AZURE_LOSSLESS` WRED profile: min 1048576 B, max 2097152 B, 5 %
/// (docs/reference/congestion-control.md §5, docs/reference/switch-config.md WRED_PROFILE). Used as
/// the vendor default the tuner must beat.
pub const SONIC_DEFAULT_RED: RedProfile = RedProfile {
    enabled: true,
    kmin_bytes: 1_048_576,
    kmax_bytes: 2_097_152,
    pmax: 0.05,
};

/// A RED/WRED ECN marking profile on the egress queue length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedProfile {
    /// `false` disables marking (WRED `ecn: ecn_none`).
    pub enabled: bool,
    /// Marking starts above this queue length.
    pub kmin_bytes: u64,
    /// Every packet is marked above this queue length.
    pub kmax_bytes: u64,
    /// Marking probability at Kmax (0..=1).
    pub pmax: f64,
}

impl Default for RedProfile {
    fn default() -> Self {
        SONIC_DEFAULT_RED
    }
}

impl RedProfile {
    /// Marking probability at queue length `q_bytes`
    /// (docs/reference/congestion-control.md §1.1).
    // Called for every packet a switch dequeues, from the simulator's crate: inlined
    // there without cross-crate LTO.
    #[inline]
    pub fn mark_probability(&self, q_bytes: u64) -> f64 {
        if !self.enabled || q_bytes <= self.kmin_bytes {
            0.0
        } else if q_bytes > self.kmax_bytes {
            1.0
        } else {
            self.pmax * (q_bytes - self.kmin_bytes) as f64 / (self.kmax_bytes - self.kmin_bytes).max(1) as f64
        }
    }
}

/// ECN profiles per switch tier; a tier without one uses [`SONIC_DEFAULT_RED`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct EcnConfig {
    /// When set, Kmin and Kmax are written for ports of this rate and scale linearly with
    /// each egress port's rate, the rule the HPCC artifact uses
    /// (docs/reference/congestion-control.md §5). Unset: the same bytes on every port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_from_gbps: Option<f64>,
    /// Leaf (ToR, edge, rail) switches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaf: Option<RedProfile>,
    /// Spine / aggregation switches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spine: Option<RedProfile>,
    /// Core switches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<RedProfile>,
}

impl EcnConfig {
    /// The profile in force on a tier.
    pub fn profile(&self, tier: Tier) -> RedProfile {
        self.explicit(tier).unwrap_or(SONIC_DEFAULT_RED)
    }

    /// The profile in force on an egress port of a tier running at `port_gbps`.
    pub fn profile_at(&self, tier: Tier, port_gbps: f64) -> RedProfile {
        let mut p = self.profile(tier);
        if let Some(base) = self.scale_from_gbps {
            let k = port_gbps / base;
            p.kmin_bytes = (p.kmin_bytes as f64 * k).round() as u64;
            p.kmax_bytes = (p.kmax_bytes as f64 * k).round() as u64;
        }
        p
    }

    /// The profile written for a tier, if any.
    pub fn explicit(&self, tier: Tier) -> Option<RedProfile> {
        match tier {
            Tier::Leaf => self.leaf,
            Tier::Spine => self.spine,
            Tier::Core => self.core,
        }
    }

    /// Removes the explicit profile of a tier (the vendor default applies).
    pub fn clear(&mut self, tier: Tier) {
        match tier {
            Tier::Leaf => self.leaf = None,
            Tier::Spine => self.spine = None,
            Tier::Core => self.core = None,
        }
    }

    /// Sets the profile of a tier.
    pub fn set(&mut self, tier: Tier, p: RedProfile) {
        match tier {
            Tier::Leaf => self.leaf = Some(p),
            Tier::Spine => self.spine = Some(p),
            Tier::Core => self.core = Some(p),
        }
    }
}

/// Switch buffer of the HPCC simulator's 100 Gbit/s runs: 32 MiB
/// (docs/reference/reference-scenarios.md; the simulator multiplies by 1024*1024).
pub const DEFAULT_SWITCH_BUFFER_BYTES: u64 = 32 * 1024 * 1024;
/// Guaranteed (reserved) bytes per ingress (port, priority): the HPCC simulator's 4 KiB
/// (docs/reference/congestion-control.md §6).
pub const DEFAULT_RESERVED_BYTES: u64 = 4 * 1024;

/// Switch shared-buffer model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BufferConfig {
    /// Total packet buffer per switch.
    pub switch_bytes: u64,
    /// Guaranteed bytes per ingress (port, priority group) before the shared pool is used.
    pub reserved_bytes: u64,
    /// Dynamic threshold of lossy queues: 2^n x free shared buffer; beyond it packets drop.
    pub lossy_dynamic_th: i8,
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            switch_bytes: DEFAULT_SWITCH_BUFFER_BYTES,
            reserved_bytes: DEFAULT_RESERVED_BYTES,
            lossy_dynamic_th: DEFAULT_LOSSY_DYNAMIC_TH,
        }
    }
}

/// Congestion-control algorithm of a traffic class (MISSION 2.1: chosen per QP by its class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CcAlgorithm {
    /// DCQCN (ECN + CNP, rate based).
    Dcqcn,
    /// TIMELY (RTT gradient, rate based).
    Timely,
    /// HPCC (in-band network telemetry from every switch hop, window and rate).
    Hpcc,
    /// DCTCP-style control (ECN echoed per ACK, one cut per window; rate based with a
    /// window, as the HPCC simulator runs it).
    Dctcp,
    /// No congestion control: send at line rate (PFC alone protects lossless classes).
    None,
}

impl CcAlgorithm {
    /// Name as written in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            CcAlgorithm::Dcqcn => "dcqcn",
            CcAlgorithm::Timely => "timely",
            CcAlgorithm::Hpcc => "hpcc",
            CcAlgorithm::Dctcp => "dctcp",
            CcAlgorithm::None => "none",
        }
    }
}

/// A traffic class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficClass {
    /// 802.1p priority (0..=7); lossless when PFC covers it.
    pub priority: u8,
    /// DSCP the hosts write (NCCL_IB_TC = DSCP << 2 | ECN bits).
    #[serde(default = "default_roce_dscp")]
    pub dscp: u8,
    /// Congestion-control algorithm of every QP in this class.
    pub cc: CcAlgorithm,
    /// DCQCN parameters (used when `cc = "dcqcn"`).
    #[serde(default)]
    pub dcqcn: DcqcnParams,
    /// TIMELY parameters (used when `cc = "timely"`).
    #[serde(default)]
    pub timely: TimelyParams,
    /// HPCC parameters (used when `cc = "hpcc"`; written out only when set).
    #[serde(default, skip_serializing_if = "HpccParams::is_default")]
    pub hpcc: HpccParams,
    /// DCTCP parameters (used when `cc = "dctcp"`; written out only when set).
    #[serde(default, skip_serializing_if = "DctcpParams::is_default")]
    pub dctcp: DctcpParams,
}

/// Typical RoCE data DSCP 26: docs/reference/switch-config.md, Maps.
pub const ROCE_DSCP: u8 = 26;

fn default_roce_dscp() -> u8 {
    ROCE_DSCP
}

/// Default classes: training on priority 3 with DCQCN (MISSION 2.1: DCQCN for large
/// AllReduce traffic), inference on priority 4 with TIMELY (point-to-point, latency
/// bound); 3 and 4 are SONiC's default lossless priorities. DSCP 34 for inference is our
/// choice (any DSCP that the switch maps to TC4 works; SONiC's default map uses DSCP 4).
pub fn default_classes() -> BTreeMap<String, TrafficClass> {
    /// Our choice for the inference class's DSCP; see [`default_classes`].
    const INFERENCE_DSCP: u8 = 34;
    let mut m = BTreeMap::new();
    m.insert(
        "training".to_string(),
        TrafficClass {
            priority: 3,
            dscp: ROCE_DSCP,
            cc: CcAlgorithm::Dcqcn,
            dcqcn: DcqcnParams::default(),
            timely: TimelyParams::default(),
            hpcc: HpccParams::default(),
            dctcp: DctcpParams::default(),
        },
    );
    m.insert(
        "inference".to_string(),
        TrafficClass {
            priority: 4,
            dscp: INFERENCE_DSCP,
            cc: CcAlgorithm::Timely,
            dcqcn: DcqcnParams::default(),
            timely: TimelyParams::default(),
            hpcc: HpccParams::default(),
            dctcp: DctcpParams::default(),
        },
    );
    m
}

/// DCQCN reaction-point and notification-point parameters, named as the mlx5 firmware
/// names them (`/sys/class/net/IF/ecn/roce_rp/*`, `roce_np/*`) with a unit suffix.
/// Defaults: docs/reference/congestion-control.md §1.5 (NVIDIA firmware defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DcqcnParams {
    /// Rate-increase timer period (`rpg_time_reset`), µs. Default 300.
    pub rpg_time_reset_us: f64,
    /// Byte counter period (`rpg_byte_reset`, 64-byte units in firmware, partly
    /// unconfirmed); 0 disables the byte counter. Default 32767 x 64 B.
    pub rpg_byte_reset_bytes: u64,
    /// Fast-recovery steps F (`rpg_threshold`), 1..=31. Default 1.
    pub rpg_threshold: u32,
    /// Additive increase (`rpg_ai_rate`), Mbit/s. Default 5.
    pub rpg_ai_rate_mbps: f64,
    /// Hyper increase (`rpg_hai_rate`), Mbit/s. Default 50.
    pub rpg_hai_rate_mbps: f64,
    /// Rate cap (`rpg_max_rate`), Mbit/s; 0 = line rate.
    pub rpg_max_rate_mbps: f64,
    /// Minimum rate (`rpg_min_rate`), Mbit/s. Default 1.
    pub rpg_min_rate_mbps: f64,
    /// Decrease divisor exponent (`rpg_gd`): Rc x (1 - alpha / 2^(gd-10)); 11 gives
    /// 1 - alpha/2. Default 11.
    pub rpg_gd: u32,
    /// Largest single cut (`rpg_min_dec_fac`), percent: new rate >= old x fac / 100.
    /// Default 50.
    pub rpg_min_dec_fac_pct: u32,
    /// Alpha gain (`dce_tcp_g`, 0..=1023): alpha <- alpha x G/1024 (+ (1024-G)/1024 with
    /// a CNP). Default 1019.
    pub dce_tcp_g: u32,
    /// Alpha update period (`dce_tcp_rtt`), µs. Default 1.
    pub dce_tcp_rtt_us: f64,
    /// Minimum time between two rate decreases (`rate_reduce_monitor_period`), µs. Default 4.
    pub rate_reduce_monitor_period_us: f64,
    /// Alpha on the first CNP (`initial_alpha_value`, 10-bit fixed point). Default 1023.
    pub initial_alpha_value: u32,
    /// Rate forced on the first CNP (`rate_to_set_on_first_cnp`), Mbit/s; 0 = off.
    pub rate_to_set_on_first_cnp_mbps: f64,
    /// Target rate follows current rate on every CNP (`clamp_tgt_rate`). Default false.
    pub clamp_tgt_rate: bool,
    /// Also clamp when the last increase was timer driven (`clamp_tgt_rate_after_time_inc`).
    /// Default true.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// NP: minimum time between CNPs per QP (`min_time_between_cnps`), µs. Default 4.
    pub min_time_between_cnps_us: f64,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        // docs/reference/congestion-control.md §1.5, column "Default".
        DcqcnParams {
            rpg_time_reset_us: 300.0,
            rpg_byte_reset_bytes: 32767 * 64,
            rpg_threshold: 1,
            rpg_ai_rate_mbps: 5.0,
            rpg_hai_rate_mbps: 50.0,
            rpg_max_rate_mbps: 0.0,
            rpg_min_rate_mbps: 1.0,
            rpg_gd: 11,
            rpg_min_dec_fac_pct: 50,
            dce_tcp_g: 1019,
            dce_tcp_rtt_us: 1.0,
            rate_reduce_monitor_period_us: 4.0,
            initial_alpha_value: 1023,
            rate_to_set_on_first_cnp_mbps: 0.0,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            min_time_between_cnps_us: 4.0,
        }
    }
}

impl DcqcnParams {
    /// Alpha gain g as a fraction: (1024 - G) / 1024.
    pub fn g(&self) -> f64 {
        (1024.0 - f64::from(self.dce_tcp_g)) / 1024.0
    }
}

/// A NIC's own DCQCN knobs, as mlx5 firmware holds them: one parameter set per port
/// (`/sys/class/net/IF/ecn/roce_rp/*`, `roce_np/*`) and per priority whether the NIC
/// rate-limits its QPs with it (`roce_rp/enable/P`, the reaction point) and whether it
/// answers ECN-marked packets with CNPs (`roce_np/enable/P`, the notification point).
/// It replaces the class's settings for QPs of classes running DCQCN or no congestion
/// control; classes running TIMELY, HPCC or DCTCP keep theirs (those are not the
/// firmware's knobs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicCongestion {
    /// The port's DCQCN parameters (unset ones at the firmware defaults).
    #[serde(default)]
    pub dcqcn: DcqcnParams,
    /// Priorities whose QPs this NIC sends under DCQCN (`roce_rp/enable/P = 1`). Required:
    /// the firmware's default enables every priority, a scenario's class only its own,
    /// so neither is assumed.
    pub rp_priorities: Vec<u8>,
    /// Priorities on which this NIC sends CNPs for marked packets (`roce_np/enable/P = 1`).
    /// Required, as `rp_priorities`.
    pub np_priorities: Vec<u8>,
}

/// TIMELY parameters. Defaults: the paper values and the HPCC simulator's, as listed in
/// docs/reference/congestion-control.md §2, with the 100 Gbit/s additive step of the
/// reference runs (docs/reference/reference-scenarios.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimelyParams {
    /// Below this RTT, always increase. µs. Default 50.
    pub t_low_us: f64,
    /// Above this RTT, always decrease. µs. Default 500.
    pub t_high_us: f64,
    /// EWMA weight of the newest RTT difference. Default 0.875.
    pub ewma_alpha: f64,
    /// Multiplicative decrease factor. Default 0.8.
    pub beta: f64,
    /// Additive increase step, Mbit/s. Default 100 (reference runs at 100 Gbit/s).
    pub add_step_mbps: f64,
    /// Hyper-additive step once `hai_threshold` increases in a row, Mbit/s. Default 500.
    pub hai_step_mbps: f64,
    /// Consecutive increases before HAI mode. Default 5.
    pub hai_threshold: u32,
    /// Normalising minimum RTT, µs. Default 20.
    pub min_rtt_us: f64,
    /// Rate floor, Mbit/s. Default 1000 (the reference runs' minimum rate).
    pub min_rate_mbps: f64,
    /// Also use the HAI step below `t_low_us` once in HAI mode. The paper (and the
    /// default) adds the plain step there; the HPCC simulator's TIMELY uses the HAI step in
    /// both increase branches, so its reference scenarios set this.
    pub hai_below_t_low: bool,
}

impl Default for TimelyParams {
    fn default() -> Self {
        TimelyParams {
            t_low_us: 50.0,
            t_high_us: 500.0,
            ewma_alpha: 0.875,
            beta: 0.8,
            add_step_mbps: 100.0,
            hai_step_mbps: 500.0,
            hai_threshold: 5,
            min_rtt_us: 20.0,
            min_rate_mbps: 1000.0,
            hai_below_t_low: false,
        }
    }
}

/// HPCC parameters (docs/reference/congestion-control.md §3). Defaults are the HPCC
/// simulator's reference runs at 100 Gbit/s (docs/reference/reference-scenarios.md:
/// eta 0.95, maxStage 0, window = max BDP, T = max RTT, AI 40 Mbit/s; its run.py:
/// fast react on, minimum rate 1000 Mbit/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HpccParams {
    /// Target utilisation eta. Default 0.95.
    pub eta: f64,
    /// maxStage: additive-only updates before a multiplicative one (the paper uses 5; the
    /// reference runs 0, every update multiplicative). Default 0.
    pub max_stage: u32,
    /// Additive step, Mbit/s. Default 40 (10 x 100/25, the simulator's rule at 100 Gbit/s).
    pub ai_mbps: f64,
    /// Rate floor, Mbit/s. Default 1000.
    pub min_rate_mbps: f64,
    /// React to every ACK between the once-per-RTT updates (without committing the
    /// reference rate). Default on.
    pub fast_react: bool,
    /// INT byte and queue counters are in units of 128 x `int_multi` and 80 x `int_multi`
    /// bytes (the simulator's INT_MULTI, port rate / 25 Gbit/s). 0: from the NIC rate.
    pub int_multi: u32,
}

impl HpccParams {
    /// Whether every field has its default.
    pub fn is_default(&self) -> bool {
        *self == HpccParams::default()
    }
}

impl Default for HpccParams {
    fn default() -> Self {
        HpccParams {
            eta: 0.95,
            max_stage: 0,
            ai_mbps: 40.0,
            min_rate_mbps: 1000.0,
            fast_react: true,
            int_multi: 0,
        }
    }
}

/// DCTCP parameters. Defaults are the HPCC simulator's DCTCP reference run at 100 Gbit/s
/// (docs/reference/reference-scenarios.md: g 1/16, AI 615 Mbit/s, which its run.py
/// derives as one 1000-byte packet per 13 µs RTT; minimum rate 1000 Mbit/s). The switches'
/// step marking is the ECN profile's job (Kmin = Kmax, Pmax 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DctcpParams {
    /// Alpha gain g. Default 1/16.
    pub g: f64,
    /// Additive increase per window, Mbit/s. Default 615.
    pub ai_mbps: f64,
    /// Rate floor, Mbit/s. Default 1000.
    pub min_rate_mbps: f64,
}

impl DctcpParams {
    /// Whether every field has its default.
    pub fn is_default(&self) -> bool {
        *self == DctcpParams::default()
    }
}

impl Default for DctcpParams {
    fn default() -> Self {
        DctcpParams {
            g: 1.0 / 16.0,
            ai_mbps: 615.0,
            min_rate_mbps: 1000.0,
        }
    }
}

/// mlx5 NP defaults `cnp_802p_prio` 6 and `cnp_dscp` 48: docs/reference/congestion-control.md
/// §1.5.
pub const DEFAULT_CNP_PRIORITY: u8 = 6;
/// See [`DEFAULT_CNP_PRIORITY`].
pub const DEFAULT_CNP_DSCP: u8 = 48;

/// Where CNPs and ACKs travel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CnpConfig {
    /// Priority of CNPs, scheduled strictly ahead of data.
    pub priority: u8,
    /// DSCP of CNPs.
    pub dscp: u8,
    /// ACKs travel on the CNP priority (the reference runs' "ACKs at high priority") instead
    /// of their data's priority.
    pub ack_on_cnp_priority: bool,
}

impl Default for CnpConfig {
    fn default() -> Self {
        CnpConfig {
            priority: DEFAULT_CNP_PRIORITY,
            dscp: DEFAULT_CNP_DSCP,
            ack_on_cnp_priority: true,
        }
    }
}

/// NCCL default `NCCL_IB_QPS_PER_CONNECTION` 1: docs/reference/collectives-and-nccl.md §5.
pub const DEFAULT_QPS_PER_CONNECTION: u32 = 1;
/// Largest IB MTU: docs/reference/linux-rdma-sysfs.md §4.
pub const MAX_ROCE_MTU_BYTES: u32 = 4096;
/// RoCEv2 bytes on the wire around a payload: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 +
/// ICRC 4 + FCS 4 (docs/reference/linux-rdma-sysfs.md §4 lists the RoCE header parts; preamble and
/// inter-frame gap are not counted).
pub const ROCEV2_HEADER_BYTES: u32 = 62;
/// Deepest send queue accepted: `max_qp_wr` of the ConnectX-5/6 devices in
/// crates/xirang-host/test_data/ibv_devinfo (32,768; the mlx4 card there has 16,351).
pub const MAX_WR_DEPTH: u32 = 32_768;
/// Most bytes a packet carries besides its payload: RoCEv2's 62 plus VLAN tags, IPv6
/// and extension headers stay far below this.
pub const MAX_HEADER_BYTES: u32 = 512;
/// Largest netdev or switch MTU accepted: the largest IPv4 packet. Ethernet jumbo frames
/// end near 9,216 bytes; packet sizes must also fit the simulator's 16-bit size field.
pub const MAX_MTU_BYTES: u32 = 65_535;
/// NCCL's default local ACK timeout exponent, `NCCL_IB_TIMEOUT` 20: 4.096 µs x 2^20,
/// about 4.3 s (docs/reference/collectives-and-nccl.md §5, NCCL 2.23 and later).
pub const DEFAULT_IB_TIMEOUT: u8 = 20;
/// Largest ACK timeout exponent: the QP attribute is 5 bits, and 0 means "wait forever",
/// which a simulation must not do.
pub const MAX_IB_TIMEOUT: u8 = 31;
/// NCCL's default transport retry count, `NCCL_IB_RETRY_CNT` 7, also the largest the
/// 3-bit QP attribute holds (docs/reference/collectives-and-nccl.md §5).
pub const DEFAULT_RETRY_CNT: u8 = 7;
/// Picoseconds per unit of the ACK timeout, 4.096 µs (the `4.096 µs × 2^t` of
/// docs/reference/collectives-and-nccl.md §5).
pub const IB_TIMEOUT_UNIT_PS: u64 = 4_096_000;
/// Send queue depth: our choice (NCCL does not document one); the audit treats it as a
/// tunable, not a fact. Unconfirmed as a vendor default.
pub const DEFAULT_WR_DEPTH: u32 = 512;
/// CQ moderation: our choice, unconfirmed as a vendor default (mlx5 exposes `cq_moderation`
/// per netdev, not per RDMA CQ).
pub const DEFAULT_CQ_MODERATION_COUNT: u32 = 1;

/// Transport layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// QPs per connection (ECMP entropy; NCCL_IB_QPS_PER_CONNECTION).
    pub qps_per_connection: u32,
    /// Send work-request queue depth per QP.
    pub wr_depth: u32,
    /// Completions coalesced per CQ event.
    pub cq_moderation_count: u32,
    /// Maximum CQ event delay, µs (0 = none).
    pub cq_moderation_us: u32,
    /// RoCE path MTU cap (payload bytes per packet). Real NICs use 256..4096 in powers of
    /// two; the simulator accepts any value from 256 so that it can match other simulators'
    /// payload sizes (the HPCC reference runs use 1000).
    pub roce_mtu_bytes: u32,
    /// Bytes each data packet carries besides its payload.
    pub header_bytes: u32,
    /// Local ACK timeout exponent (`NCCL_IB_TIMEOUT`): a requester that hears nothing
    /// for 4.096 µs x 2^ib_timeout sends again from the last acknowledged byte, 1..=31.
    pub ib_timeout: u8,
    /// Timeouts in a row a requester retries before it gives up with a retry-exceeded
    /// error (`NCCL_IB_RETRY_CNT`), 0..=7.
    pub retry_cnt: u8,
}

impl TransportConfig {
    /// The local ACK timeout, picoseconds.
    pub fn ack_timeout_ps(&self) -> u64 {
        IB_TIMEOUT_UNIT_PS << self.ib_timeout.min(MAX_IB_TIMEOUT)
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            qps_per_connection: DEFAULT_QPS_PER_CONNECTION,
            wr_depth: DEFAULT_WR_DEPTH,
            cq_moderation_count: DEFAULT_CQ_MODERATION_COUNT,
            cq_moderation_us: 0,
            roce_mtu_bytes: MAX_ROCE_MTU_BYTES,
            header_bytes: ROCEV2_HEADER_BYTES,
            ib_timeout: DEFAULT_IB_TIMEOUT,
            retry_cnt: DEFAULT_RETRY_CNT,
        }
    }
}

/// RoCE header overhead the kernel subtracts from the netdev MTU: GRH 40 + UDP 8 + BTH 12 +
/// XRC 4 + AtomicETH 28 + ICRC 4 (docs/reference/linux-rdma-sysfs.md §4, `iboe_get_mtu`).
pub const IBOE_MTU_OVERHEAD_BYTES: u32 = 96;

/// RoCE active MTU the kernel derives from a netdev MTU: the largest IB MTU (256..4096)
/// not above `netdev_mtu - 96`; `None` if even 256 does not fit.
pub fn roce_active_mtu(netdev_mtu_bytes: u32) -> Option<u32> {
    let room = netdev_mtu_bytes.checked_sub(IBOE_MTU_OVERHEAD_BYTES)?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| *m <= room)
}

/// NCCL algorithm choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclAlgo {
    /// Let NCCL's tuner pick.
    Auto,
    /// Ring.
    Ring,
    /// Double binary tree.
    Tree,
}

/// NCCL protocol choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclProto {
    /// Let NCCL's tuner pick.
    Auto,
    /// Low latency (8-byte lines).
    Ll,
    /// LL128 (128-byte lines).
    Ll128,
    /// Simple (bulk copies).
    Simple,
}

/// NCCL 2.30 defaults: docs/reference/collectives-and-nccl.md §1 and §5.
pub const NCCL_DEFAULT_BUFFSIZE_BYTES: u64 = 4 * 1024 * 1024;
/// `NCCL_P2P_NET_CHUNKSIZE` default 128 KiB: docs/reference/collectives-and-nccl.md §5.
pub const NCCL_DEFAULT_P2P_NET_CHUNK_BYTES: u64 = 128 * 1024;
/// `NCCL_NTHREADS` default 512: docs/reference/collectives-and-nccl.md §5.
pub const NCCL_DEFAULT_NTHREADS: u32 = 512;
/// `MAXCHANNELS` 64: docs/reference/collectives-and-nccl.md §1.
pub const NCCL_MAX_CHANNELS: u32 = 64;
/// `NCCL_LL_BUFFSIZE` default: 8 lines x 512 threads x 8 steps x 16 bytes
/// (docs/reference/nccl-transport-details.md §1).
pub const NCCL_DEFAULT_LL_BUFFSIZE_BYTES: u64 = 524_288;
/// `NCCL_LL128_BUFFSIZE` default: 120 x 640 x 8 x 8 bytes (same section).
pub const NCCL_DEFAULT_LL128_BUFFSIZE_BYTES: u64 = 4_915_200;
/// A GPU's time per slice, µs, LL / LL128 / Simple: NCCL's tuner's per-hop latency of a
/// ring over NVLink (docs/reference/collectives-and-nccl.md §2.2; the tuner's estimates,
/// not measurements: docs/reference/nccl-transport-details.md §9).
pub const NCCL_SLICE_US: [f64; 3] = [0.6, 1.9, 3.4];
/// A kernel's fixed cost, µs, Tree then Ring, LL / LL128 / Simple: NCCL's tuner's base
/// latency of a collective (docs/reference/collectives-and-nccl.md §2.2), paid by each
/// rank at the start of each call.
pub const NCCL_BASE_LATENCY_US: [[f64; 3]; 2] = [[6.8, 14.0, 8.4], [6.6, 14.0, 8.4]];
/// The proxy's overhead per action, µs: `NCCL_NET_OVERHEAD`'s automatic value on x86
/// Intel hosts (AMD: 2.0), tripled for Simple by the tuner
/// (docs/reference/nccl-transport-details.md §10).
pub const NCCL_NET_OVERHEAD_US: f64 = 1.0;
/// A GPUDirect flush: a 1-byte RDMA read on a loopback QP before a Simple slice is
/// visible (docs/reference/nccl-transport-details.md §7). Its time is our estimate of one
/// PCIe round trip through the NIC, unconfirmed.
pub const NCCL_FLUSH_US: f64 = 1.0;

/// When NCCL flushes a Simple receive (GPUDirect RDMA) before the GPU reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GdrFlush {
    /// As NCCL 2.30 decides: GPUs before Hopper (compute capability below 9.0)
    /// (docs/reference/nccl-transport-details.md §7).
    #[default]
    Auto,
    /// Always (`NCCL_NET_FORCE_FLUSH=1`).
    On,
    /// Never (`NCCL_GDR_FLUSH_DISABLE=1`).
    Off,
}

/// NCCL settings (rendered as `NCCL_*` environment variables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NcclConfig {
    /// `NCCL_ALGO`.
    pub algo: NcclAlgo,
    /// `NCCL_PROTO`.
    pub proto: NcclProto,
    /// `NCCL_BUFFSIZE`.
    pub buffsize_bytes: u64,
    /// `NCCL_MIN_NCHANNELS` (0 = NCCL's choice).
    pub min_channels: u32,
    /// `NCCL_MAX_NCHANNELS` (0 = NCCL's choice).
    pub max_channels: u32,
    /// `NCCL_NTHREADS`.
    pub nthreads: u32,
    /// `NCCL_P2P_NET_CHUNKSIZE`.
    pub p2p_net_chunk_bytes: u64,
    /// `NCCL_CROSS_NIC` (0, 1, 2).
    pub cross_nic: u8,
    /// `NCCL_NET_GDR_LEVEL` (LOC, PIX, PXB, PHB, SYS).
    pub net_gdr_level: String,
    /// `NCCL_IB_SPLIT_DATA_ON_QPS`: cut each message over all of a connection's QPs
    /// (else each goes whole on one, round robin).
    pub ib_split_data_on_qps: bool,
    /// `NCCL_LL_BUFFSIZE`.
    pub ll_buffsize_bytes: u64,
    /// `NCCL_LL128_BUFFSIZE`.
    pub ll128_buffsize_bytes: u64,
    /// The priority the clear-to-send writes ride (what `NCCL_IB_FIFO_TC` maps to; by
    /// default the data's, as NCCL's FIFO TC defaults to `NCCL_IB_TC`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fifo_priority: Option<u8>,
    /// A GPU's time per slice of LL, LL128 and Simple, µs.
    pub ll_slice_us: f64,
    /// See `ll_slice_us`.
    pub ll128_slice_us: f64,
    /// See `ll_slice_us`.
    pub simple_slice_us: f64,
    /// The proxy's overhead per action, µs (`NCCL_NET_OVERHEAD`; tripled for Simple).
    pub net_overhead_us: f64,
    /// A kernel's fixed cost at the start of each call, µs (None: NCCL's tuner's base
    /// latency for the algorithm and protocol).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_latency_us: Option<f64>,
    /// When a Simple receive is flushed before the GPU reads it.
    pub gdr_flush: GdrFlush,
    /// Time of one flush, µs.
    pub flush_us: f64,
}

impl Default for NcclConfig {
    fn default() -> Self {
        NcclConfig {
            algo: NcclAlgo::Auto,
            proto: NcclProto::Auto,
            buffsize_bytes: NCCL_DEFAULT_BUFFSIZE_BYTES,
            min_channels: 0,
            max_channels: 0,
            nthreads: NCCL_DEFAULT_NTHREADS,
            p2p_net_chunk_bytes: NCCL_DEFAULT_P2P_NET_CHUNK_BYTES,
            // NCCL_CROSS_NIC default 2, NCCL_NET_GDR_LEVEL auto = PXB,
            // NCCL_IB_SPLIT_DATA_ON_QPS default 0: docs/reference/collectives-and-nccl.md §5.
            cross_nic: 2,
            net_gdr_level: "PXB".to_string(),
            ib_split_data_on_qps: false,
            ll_buffsize_bytes: NCCL_DEFAULT_LL_BUFFSIZE_BYTES,
            ll128_buffsize_bytes: NCCL_DEFAULT_LL128_BUFFSIZE_BYTES,
            fifo_priority: None,
            ll_slice_us: NCCL_SLICE_US[0],
            ll128_slice_us: NCCL_SLICE_US[1],
            simple_slice_us: NCCL_SLICE_US[2],
            net_overhead_us: NCCL_NET_OVERHEAD_US,
            base_latency_us: None,
            gdr_flush: GdrFlush::Auto,
            flush_us: NCCL_FLUSH_US,
        }
    }
}

/// Base page size: docs/reference/memory-registration.md §5.
pub const PAGE_BYTES: u64 = 4096;
/// Cache line: docs/reference/memory-registration.md §5.
pub const CACHE_LINE_BYTES: u64 = 64;

/// The registered memory region and its fixed-size buffer pool (MISSION 3.1 to 3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryPoolConfig {
    /// Size of the one region registered at start-up.
    pub region_bytes: u64,
    /// Size of each pool buffer (a multiple of `cache_line_bytes`).
    pub buffer_bytes: u64,
    /// Page size backing the region (4 KiB, 2 MiB or 1 GiB); buffers start page aligned.
    pub page_bytes: u64,
    /// Cache-line size buffer sizes are rounded to.
    pub cache_line_bytes: u64,
}

impl Default for MemoryPoolConfig {
    fn default() -> Self {
        MemoryPoolConfig {
            // One NCCL_BUFFSIZE per buffer, 256 buffers: sized for peak traffic of one
            // 64-channel job with headroom; our choice, tuned per workload later.
            region_bytes: 256 * NCCL_DEFAULT_BUFFSIZE_BYTES,
            buffer_bytes: NCCL_DEFAULT_BUFFSIZE_BYTES,
            page_bytes: PAGE_BYTES,
            cache_line_bytes: CACHE_LINE_BYTES,
        }
    }
}
