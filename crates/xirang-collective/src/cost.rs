//! The collective cost model: what a collective should cost on a platform, per algorithm
//! and protocol, and which one NCCL would pick.
//!
//! Structure and constants follow NCCL's own tuning model (`src/graph/tuning.cc`, as
//! summarised in docs/reference/collectives-and-nccl.md §2): time = latency + bytes /
//! algorithm bandwidth, latency = base + per-hop latencies (NVLink or PCIe inside a node,
//! network between nodes), bandwidth = channels x per-channel bandwidth with the protocol's
//! efficiency and per-channel caps, and NCCL picks the (algorithm, protocol) with the least
//! time. One deliberate difference: NCCL's per-channel bandwidth comes from its topology
//! search; here it comes from the bottleneck a schedule actually loads (GPU links inside a
//! node, the node's NICs between nodes), so that predictions are bandwidths a run can
//! reach. VALIDATION.md compares predictions with real nccl-tests runs.

use serde::Serialize;

use xirang_fabric::config::FabricConfig;
use xirang_fabric::model::{Fabric, Host};

/// GPU generations NCCL distinguishes in its tuning tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuGen {
    /// V100.
    Volta,
    /// A100 (and other SM80/SM86/SM89 parts such as L40S).
    Ampere,
    /// H100, H200, H800.
    Hopper,
    /// B100, B200, GB200.
    Blackwell,
}

impl GpuGen {
    /// The generation of a GPU model name (`H100`, `A100-SXM4-40GB`, `NVIDIA B200`, ...).
    pub fn from_model(model: &str) -> GpuGen {
        let m = model.to_ascii_uppercase();
        if m.contains("B100") || m.contains("B200") || m.contains("GB200") {
            GpuGen::Blackwell
        } else if m.contains("H100") || m.contains("H200") || m.contains("H800") || m.contains("GH200") {
            GpuGen::Hopper
        } else if m.contains("V100") {
            GpuGen::Volta
        } else {
            GpuGen::Ampere
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One GPU's NVLink bandwidth in one direction, GB/s, for SXM parts by model name: NVLink 2
/// (V100, 6 links), 3 (A100, 12), 4 (H100/H200, 18) at 25 GB/s per link, NVLink 5 (B200,
/// 18 links at 50 GB/s). `None` for PCIe cards (L40S, L4, A10, `... PCIe`), whose GPUs
/// talk over PCIe. Link counts are NVIDIA data-sheet figures, not in docs/reference:
/// unconfirmed.
pub fn nvlink_gbs_of_model(model: &str) -> Option<f64> {
    const LINK_GBS: f64 = 25.0;
    let m = model.to_ascii_uppercase();
    // Model names are words: `A10` must not match `A100`.
    let words: Vec<&str> = m.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    let pcie_cards = [
        "L40", "L40S", "L4", "A10", "A10G", "A30", "A40", "T4", "A2", "A16",
    ];
    if m.contains("PCIE") || m.contains("RTX") || words.iter().any(|w| pcie_cards.contains(w)) {
        return None;
    }
    Some(match GpuGen::from_model(model) {
        GpuGen::Volta => 6.0 * LINK_GBS,
        GpuGen::Ampere if m.contains("A100") || m.contains("A800") => 12.0 * LINK_GBS,
        GpuGen::Ampere => return None,
        GpuGen::Hopper => 18.0 * LINK_GBS,
        GpuGen::Blackwell => 18.0 * 2.0 * LINK_GBS,
    })
}

/// Collectives the model knows, named as nccl-tests names its binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Coll {
    /// `all_reduce_perf`.
    AllReduce,
    /// `all_gather_perf`.
    AllGather,
    /// `reduce_scatter_perf`.
    ReduceScatter,
    /// `alltoall_perf`.
    AllToAll,
    /// `broadcast_perf`.
    Broadcast,
    /// `sendrecv_perf`: every rank sends to the next and receives from the previous.
    SendRecv,
}

impl Coll {
    /// From an nccl-tests test name (`all_reduce_perf`, `all_reduce_perf_mpi`, `alltoall`, ...).
    pub fn from_test_name(name: &str) -> Option<Coll> {
        let n = name
            .trim_end_matches("_mpi")
            .trim_end_matches("_perf")
            .replace('_', "");
        Some(match n.as_str() {
            "allreduce" => Coll::AllReduce,
            "allgather" => Coll::AllGather,
            "reducescatter" => Coll::ReduceScatter,
            "alltoall" => Coll::AllToAll,
            "broadcast" => Coll::Broadcast,
            "sendrecv" => Coll::SendRecv,
            _ => return None,
        })
    }

    /// The nccl-tests binary that runs it (`all_reduce_perf`).
    pub fn test_name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce_perf",
            Coll::AllGather => "all_gather_perf",
            Coll::ReduceScatter => "reduce_scatter_perf",
            Coll::AllToAll => "alltoall_perf",
            Coll::Broadcast => "broadcast_perf",
            Coll::SendRecv => "sendrecv_perf",
        }
    }

    /// nccl-tests' bus bandwidth factor (docs/reference/collectives-and-nccl.md §3).
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = f64::from(n);
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => (n - 1.0) / n,
            Coll::Broadcast | Coll::SendRecv => 1.0,
        }
    }
}

/// NCCL algorithms the model covers. CollNet (in-network reduction by IB SHARP switches)
/// and PAT need switch or plugin support the model does not describe; their absence is
/// noted where it matters (VALIDATION.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Algo {
    /// Ring.
    Ring,
    /// Double binary tree (AllReduce between nodes).
    Tree,
    /// NVLink SHARP inside one node (AllReduce, Hopper and later, NVSwitch).
    Nvls,
    /// NVLink SHARP inside each node and a double binary tree between nodes.
    NvlsTree,
}

impl Algo {
    /// The name `NCCL_ALGO` takes.
    pub fn nccl_name(self) -> &'static str {
        match self {
            Algo::Ring => "Ring",
            Algo::Tree => "Tree",
            Algo::Nvls => "NVLS",
            Algo::NvlsTree => "NVLSTree",
        }
    }
}

impl Proto {
    /// The name `NCCL_PROTO` takes.
    pub fn nccl_name(self) -> &'static str {
        match self {
            Proto::Ll => "LL",
            Proto::Ll128 => "LL128",
            Proto::Simple => "Simple",
        }
    }
}

/// NCCL protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// LL.
    Ll,
    /// LL128.
    Ll128,
    /// Simple.
    Simple,
}

impl Proto {
    fn index(self) -> usize {
        self as usize
    }

    /// Payload bytes in one of a connection's `NCCL_STEPS` (8) slots: the protocol's
    /// default buffer / 8, times its payload share (docs/reference/collectives-and-nccl.md §1:
    /// LL 512 KiB at 50%, LL128 4 800 KiB at 120/128, Simple 4 MiB).
    fn slot_payload_bytes(self) -> f64 {
        const NCCL_STEPS: f64 = 8.0;
        match self {
            Proto::Ll => 512.0 * 1024.0 / NCCL_STEPS * 0.5,
            Proto::Ll128 => 4_915_200.0 / NCCL_STEPS * 120.0 / 128.0,
            Proto::Simple => 4.0 * 1024.0 * 1024.0 / NCCL_STEPS,
        }
    }
}

/// NCCL tuning constants, index order LL / LL128 / Simple
/// (docs/reference/collectives-and-nccl.md §2.2).
mod nccl {
    /// Base latency, µs: [Tree, Ring].
    pub(super) const BASE_LAT: [[f64; 3]; 2] = [[6.8, 14.0, 8.4], [6.6, 14.0, 8.4]];
    /// Per-hop latency over NVLink, µs: [Tree, Ring].
    pub(super) const NVLINK_LAT: [[f64; 3]; 2] = [[0.6, 1.25, 4.0], [0.6, 1.9, 3.4]];
    /// Per-hop latency over PCIe, µs.
    pub(super) const PCI_LAT: [[f64; 3]; 2] = [[1.0, 1.9, 4.0], [1.0, 2.5, 5.7]];
    /// Per-hop latency over the network, µs.
    pub(super) const NET_LAT: [[f64; 3]; 2] = [[5.0, 8.5, 14.0], [2.7, 4.0, 14.0]];
    /// LL bandwidth cap, GB/s, by GPU generation and node count (1, 2, more).
    pub(super) const LL_MAX_BW: [[f64; 3]; 4] = [
        [39.0, 39.0, 20.4],
        [87.7, 22.5, 19.0],
        [141.0, 45.0, 35.0],
        [282.0, 90.0, 70.0],
    ];
    /// Ring LL128 per-channel cap, GB/s, by generation.
    pub(super) const RING_LL128_PER_CH: [f64; 4] = [20.0, 20.0, 36.7, 40.0];
    /// Tree LL128 per-channel cap, GB/s, by generation and node count.
    pub(super) const TREE_LL128_PER_CH: [[f64; 3]; 4] =
        [[20.0; 3], [20.0; 3], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]];
    /// Tree Simple per-channel cap, GB/s.
    pub(super) const TREE_PER_CH: [[f64; 3]; 4] = [
        [26.5, 18.5, 10.0],
        [24.0, 23.6, 17.8],
        [38.7, 41.4, 36.0],
        [70.0, 42.8, 24.0],
    ];
    /// Ring LL bandwidth factor and LL128 / tree Simple efficiency.
    pub(super) const LL_FACTOR: f64 = 0.5;
    pub(super) const LL128_EFF: f64 = 0.92;
    pub(super) const TREE_EFF: f64 = 0.92;
    /// Tree LL bandwidth divisor.
    pub(super) const TREE_LL_DIV: f64 = 3.8;
    /// Multi-node Ring/Simple AllReduce latency penalty (Ampere and later).
    pub(super) const RING_SIMPLE_LAT_PENALTY: f64 = 1.4;
    /// Net post overhead, µs (Intel 1.0, AMD 2.0), times 3 for Simple.
    pub(super) const NET_OVERHEAD_INTEL: f64 = 1.0;
    pub(super) const NET_OVERHEAD_AMD: f64 = 2.0;
    pub(super) const SIMPLE_OVERHEAD_MULT: f64 = 3.0;
    /// NVLS efficiency by generation (Hopper 0.85, Blackwell 0.74; none before).
    pub(super) const NVLS_EFF: [f64; 4] = [0.0, 0.0, 0.85, 0.74];
    /// NVLS / NVLSTree hop latencies (Simple only), µs: NVLink, then NVLSTree's network hop.
    pub(super) const NVLS_NVLINK_LAT: f64 = 25.0;
    pub(super) const NVLSTREE_NET_LAT: f64 = 20.9;
    /// NVLSTree per-channel cap, GB/s, by generation and node count (1, 2, more).
    pub(super) const NVLSTREE_PER_CH: [[f64; 3]; 4] =
        [[0.0; 3], [0.0; 3], [0.0, 57.7, 45.5], [0.0, 96.0, 80.0]];
}

/// What a collective runs on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Platform {
    /// GPU generation.
    pub generation: GpuGen,
    /// AMD host CPUs (NCCL's network overhead and LL caps differ).
    pub amd_cpu: bool,
    /// Nodes.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// One GPU's bandwidth to the other GPUs of its node, one direction, GB/s.
    pub intra_gbs: f64,
    /// The intra-node path is NVLink (else PCIe).
    pub nvlink: bool,
    /// A node's network bandwidth, one direction, GB/s: NICs x line rate x the share of
    /// each frame that is payload.
    pub node_net_gbs: f64,
    /// NCCL channels.
    pub channels: u32,
    /// NVLink SHARP is available (NVSwitch, Hopper or later).
    pub nvls: bool,
}

/// A prediction for one (algorithm, protocol, size).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// Algorithm.
    pub algo: Algo,
    /// Protocol.
    pub proto: Proto,
    /// Time, µs.
    pub time_us: f64,
    /// Algorithm bandwidth (bytes / time), GB/s.
    pub algbw_gbs: f64,
    /// Bus bandwidth as nccl-tests reports it, GB/s.
    pub busbw_gbs: f64,
    /// Share of the time spent moving bytes at full bandwidth (the rest is latency and
    /// pipeline fill).
    pub bandwidth_share: f64,
}

/// The share of the tree's bandwidth bound NCCL's tuner counts for Tree/Simple AllReduce
/// (`tuning.cc`'s `busBw * .92`: docs/reference/collectives-and-nccl.md §2.3): an empirical
/// discount, not a mechanism, so the packet simulator's tree has no counterpart of it.
pub const TREE_SIMPLE_EFFICIENCY: f64 = nccl::TREE_EFF;

/// Payload share of a RoCE frame at a 4096-byte MTU: 4096 / (4096 + 62)
/// (header bytes: xirang_fabric::config::ROCEV2_HEADER_BYTES).
pub const ROCE_PAYLOAD_SHARE: f64 = 4096.0 / (4096.0 + xirang_fabric::config::ROCEV2_HEADER_BYTES as f64);
/// NVLink bandwidth NCCL can use: NCCL counts 20 GB/s per NVLink 4 link where the link
/// carries 25 (NCCL `topo.h` SM90 constant as we recall it; unconfirmed in docs/reference).
pub const NVLINK_EFFICIENCY: f64 = 0.8;
/// What NCCL's point-to-point transport moves between two GPUs on different nodes with
/// default settings (2 channels per network peer, 128 KiB chunks:
/// docs/reference/collectives-and-nccl.md §1), GB/s. An empirical calibration, not a derivation:
/// three independent fixtures agree (crates/xirang-collective/test_data/nccl-tests: a healthy H100
/// pair 13.5, a 400 Gbit/s RoCE pair 14.0 whose link reaches 370 Gbit/s in perftest, 80-rank
/// sendrecv 15.2), all far below the NIC.
pub const P2P_NET_PEER_GBS: f64 = 14.0;
/// PCIe Gen4 x16 usable GB/s when GPUs have no NVLink (NCCL counts Gen3 x16 as 12 GB/s,
/// docs/reference/collectives-and-nccl.md §2.3; Gen4 doubles it).
pub const PCIE_GEN4_X16_GBS: f64 = 24.0;

impl Platform {
    /// Hosts with `nics` NICs of `nic_gbps` each and the default configuration's GPU links
    /// (H100 NVLink with NVSwitch): the template `xirang nccl check` and `xirang diagnose
    /// nccl` fill in with the node count, GPUs per node and GPU model a log shows
    /// ([`crate::check::platform_of_run`]). Two channels per NIC, as NCCL opens.
    pub fn of_nics(nics: u32, nic_gbps: f64) -> Platform {
        let cfg = FabricConfig::default();
        let nvlink = cfg.intra_host.nvlink_gbps > 0.0;
        Platform {
            generation: GpuGen::Hopper,
            amd_cpu: false,
            nodes: 1,
            gpus_per_node: 1,
            intra_gbs: cfg.intra_host.nvlink_gbps / 8.0 * NVLINK_EFFICIENCY,
            nvlink,
            node_net_gbs: f64::from(nics) * nic_gbps / 8.0 * ROCE_PAYLOAD_SHARE,
            channels: 2 * nics,
            nvls: nvlink && cfg.intra_host.nvswitch,
        }
    }

    /// The platform of a scenario's data-parallel group: the hosts and channels of its
    /// first collective workload, else all hosts; with what it is (`the hosts of workload
    /// `x``, `all hosts`). `None` when the scenario has no host.
    pub fn of_scenario(loaded: &xirang_fabric::Loaded) -> Option<(Platform, String)> {
        let (hosts, channels, what) = loaded.scenario.first_collective().map_or_else(
            || (Vec::new(), 0, "all hosts".to_string()),
            |(name, c)| {
                (
                    c.hosts.clone(),
                    c.channels.unwrap_or(0),
                    format!("the hosts of workload `{name}`"),
                )
            },
        );
        Platform::of_fabric(&loaded.fabric, &loaded.scenario.config, &hosts, channels).map(|p| (p, what))
    }

    /// The platform of the given hosts of a fabric (all hosts when empty): GPU generation
    /// from the first GPU's model, NVLink from the configuration, network bandwidth from
    /// the host's NIC ports. `channels` 0 picks twice the NICs per node (at least 2), enough
    /// that no per-channel cap binds.
    pub fn of_fabric(
        fabric: &Fabric,
        config: &FabricConfig,
        hosts: &[String],
        channels: u32,
    ) -> Option<Platform> {
        Platform::of_hosts(fabric, config, &fabric.hosts_named(hosts), channels)
    }

    /// [`Platform::of_fabric`] of hosts already resolved (the simulator's, which looks up
    /// no name).
    pub fn of_hosts(fabric: &Fabric, config: &FabricConfig, hs: &[&Host], channels: u32) -> Option<Platform> {
        let first = hs.first()?;
        let gpus = first.gpus.len().max(1) as u32;
        let generation = first.gpus.first().map_or(GpuGen::Ampere, |g| {
            GpuGen::from_model(&fabric.gpus[g.index()].model)
        });
        // A NIC's bandwidth is capped by its PCIe link as well as its port.
        let node_net_gbs = first
            .nics
            .iter()
            .map(|n| {
                let nic = &fabric.nics[n.index()];
                let port: f64 = nic
                    .ports
                    .iter()
                    .filter_map(|p| p.link.map(|l| fabric.links[l.index()].rate_gbps))
                    .sum();
                port.min(nic.pcie.usable_gbps()) / 8.0 * ROCE_PAYLOAD_SHARE
            })
            .sum();
        let nvlink = config.intra_host.nvlink_gbps > 0.0;
        let intra_gbs = if nvlink {
            config.intra_host.nvlink_gbps / 8.0 * NVLINK_EFFICIENCY
        } else {
            PCIE_GEN4_X16_GBS
        };
        let channels = if channels > 0 {
            channels
        } else {
            (2 * first.nics.len() as u32).max(2)
        };
        let nvls =
            nvlink && config.intra_host.nvswitch && matches!(generation, GpuGen::Hopper | GpuGen::Blackwell);
        Some(Platform {
            nvls,
            generation,
            amd_cpu: false,
            nodes: hs.len() as u32,
            gpus_per_node: gpus,
            intra_gbs,
            nvlink,
            node_net_gbs,
            channels,
        })
    }

    fn ranks(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    fn node_index(&self) -> usize {
        match self.nodes {
            0 | 1 => 0,
            2 => 1,
            _ => 2,
        }
    }
}

/// Physical bus bandwidth a schedule of `coll` with `algo` can reach on `p` (nccl-tests
/// units), before protocol efficiency: the load it puts on its bottleneck.
fn bus_bandwidth(coll: Coll, algo: Algo, p: &Platform) -> Option<f64> {
    let n = f64::from(p.ranks());
    let g = f64::from(p.gpus_per_node);
    let single = p.nodes <= 1;
    match (coll, algo) {
        // A ring moves busbw-worth of bytes over every GPU link and, between nodes, over each
        // node's NICs once per channel ring.
        (Coll::AllReduce | Coll::AllGather | Coll::ReduceScatter | Coll::Broadcast, Algo::Ring) => {
            Some(if single {
                p.intra_gbs
            } else if p.gpus_per_node == 1 {
                p.node_net_gbs
            } else {
                p.intra_gbs.min(p.node_net_gbs)
            })
        }
        // Double binary trees: each tree reduces half the buffer up and broadcasts it down;
        // the busiest node carries `tree_load` buffers per direction (1 with two nodes, 2
        // beyond). Inside a node the GPUs form a chain that every byte climbs and comes
        // back down: a GPU in the middle of a channel's chain sends its share twice, the
        // head and the tail once, and the head moves from GPU to GPU with the channel, so a
        // GPU's links carry 2(g-1)/g buffers per direction.
        (Coll::AllReduce, Algo::Tree) if !single => {
            let net = p.node_net_gbs / tree_load(p.nodes);
            let algbw = if p.gpus_per_node == 1 {
                net
            } else {
                net.min(p.intra_gbs * g / (2.0 * (g - 1.0)))
            };
            Some(algbw * Coll::AllReduce.bus_factor(p.ranks()))
        }
        (Coll::AllToAll, Algo::Ring) => {
            // Each rank sends (n - g)/n of its buffer off the node and (g - 1)/n over GPU
            // links; busbw counts (n-1)/n.
            // Each GPU's remote peers are each bounded by NCCL's per-peer network path.
            let off = if single {
                0.0
            } else {
                g * (n - g) / n / p.node_net_gbs.min(g * (n - g) * P2P_NET_PEER_GBS)
            };
            let on = (g - 1.0) / n / p.intra_gbs;
            Some((n - 1.0) / n / off.max(on).max(f64::MIN_POSITIVE))
        }
        // A pair sends one buffer each way: bounded by one GPU's share of the NICs between
        // nodes, by its GPU link inside one.
        (Coll::SendRecv, Algo::Ring) => Some(if single {
            p.intra_gbs
        } else {
            (p.node_net_gbs / g).min(P2P_NET_PEER_GBS)
        }),
        // NVLS: every GPU writes its buffer once into the switch and reads the reduction
        // once, so its links carry one buffer per direction instead of the ring's 2(n-1)/n.
        // NCCL keeps one channel of the NVLS set for synchronisation: (nCh-1)/nCh.
        (Coll::AllReduce, Algo::Nvls) if single && p.nvls => {
            Some(nvls_algbw(p) * Coll::AllReduce.bus_factor(p.ranks()))
        }
        // NVLSTree: NVLS inside each node, a double binary tree of nodes between them.
        (Coll::AllReduce, Algo::NvlsTree) if !single && p.nvls => {
            let inter = p.node_net_gbs / tree_load(p.nodes);
            // NCCL's cap is on its internal bus bandwidth, twice the algorithm bandwidth.
            let cap =
                f64::from(p.channels) * nccl::NVLSTREE_PER_CH[p.generation.index()][p.node_index()] / 2.0;
            Some(nvls_algbw(p).min(inter).min(cap) * Coll::AllReduce.bus_factor(p.ranks()))
        }
        _ => None,
    }
}

/// Algorithm bandwidth NVLS reaches inside a node.
fn nvls_algbw(p: &Platform) -> f64 {
    let nch = f64::from(p.channels.max(2));
    p.intra_gbs * nccl::NVLS_EFF[p.generation.index()] * (nch - 1.0) / nch
}

/// Buffers per direction through the busiest node of NCCL's double binary tree over
/// `nodes` nodes: in each tree a node with c children receives c halves and sends one
/// half up, then receives one half and sends c halves down.
pub fn tree_load(nodes: u32) -> f64 {
    use crate::schedule::btree_parent;
    let mut load = vec![0.0f64; nodes as usize];
    // Children counted in one pass: linear in the nodes (a scan per node was quadratic
    // and held `plan batching` for minutes on a 16,384-GPU group).
    let mut children = vec![0u32; nodes as usize];
    for u in 0..nodes {
        if let Some(p) = btree_parent(nodes, u) {
            children[p as usize] += 1;
        }
    }
    for tree in 0..2u32 {
        let map = |v: u32| if tree == 0 { v } else { (v + 1) % nodes };
        for v in 0..nodes {
            let children = f64::from(children[v as usize]);
            let root = btree_parent(nodes, v).is_none();
            // In and out are equal: c halves plus one half if it has a parent.
            load[map(v) as usize] += 0.5 * children + if root { 0.0 } else { 0.5 };
        }
    }
    load.into_iter().fold(0.0, f64::max).max(0.5)
}

/// Predicts one (algorithm, protocol) for `bytes` (nccl-tests' size for the test).
pub fn predict(coll: Coll, algo: Algo, proto: Proto, bytes: u64, p: &Platform) -> Option<Prediction> {
    if algo == Algo::Tree && !(coll == Coll::AllReduce && p.nodes > 1) {
        return None;
    }
    if coll == Coll::SendRecv && algo != Algo::Ring {
        return None;
    }
    let n = p.ranks();
    let nch = f64::from(p.channels);
    let generation = p.generation.index();
    let ni = p.node_index();
    let bus = bus_bandwidth(coll, algo, p)?;
    if matches!(algo, Algo::Nvls | Algo::NvlsTree) && proto != Proto::Simple {
        // NVLS runs the Simple protocol only (NCCL's tables have no LL/LL128 entries).
        return None;
    }
    // Protocol efficiency and NCCL's caps, applied to the bus bandwidth.
    let bus = match (algo, proto) {
        (Algo::Nvls | Algo::NvlsTree, _) => bus,
        (Algo::Ring, Proto::Ll) => (bus * nccl::LL_FACTOR).min(nccl::LL_MAX_BW[generation][ni]),
        (Algo::Ring, Proto::Ll128) => (bus * nccl::LL128_EFF).min(nch * nccl::RING_LL128_PER_CH[generation]),
        (Algo::Ring, Proto::Simple) => bus,
        (Algo::Tree, Proto::Ll) => (bus / nccl::TREE_LL_DIV).min(nccl::LL_MAX_BW[generation][ni]),
        (Algo::Tree, Proto::Ll128) => {
            let eff = if p.nodes > 1 { 120.0 / 128.0 } else { 7.0 / 9.0 };
            (bus * eff).min(nch * nccl::TREE_LL128_PER_CH[generation][ni])
        }
        // NCCL also scales tree bandwidth by a size-dependent `treeCorrectionFactor`; the
        // model gets that effect from the pipeline fill below instead (see `fill_us`).
        (Algo::Tree, Proto::Simple) => (bus * nccl::TREE_EFF).min(nch * nccl::TREE_PER_CH[generation][ni]),
    };
    // Latency (docs/reference/collectives-and-nccl.md §2.4).
    let a = match algo {
        Algo::Tree | Algo::Nvls | Algo::NvlsTree => 0,
        Algo::Ring => 1,
    };
    let pr = proto.index();
    let intra_hop = if p.nvlink {
        nccl::NVLINK_LAT[a][pr]
    } else {
        nccl::PCI_LAT[a][pr]
    };
    let overhead = if p.amd_cpu {
        nccl::NET_OVERHEAD_AMD
    } else {
        nccl::NET_OVERHEAD_INTEL
    } * if proto == Proto::Simple {
        nccl::SIMPLE_OVERHEAD_MULT
    } else {
        1.0
    };
    let net_hop = if algo == Algo::Tree || p.gpus_per_node == 1 {
        nccl::NET_LAT[0][pr]
    } else {
        nccl::NET_LAT[a][pr]
    };
    let nodes = f64::from(p.nodes);
    // NVLS and NVLSTree have no base latency.
    let mut lat = if matches!(algo, Algo::Nvls | Algo::NvlsTree) {
        0.0
    } else {
        nccl::BASE_LAT[a][pr]
    };
    match (coll, algo) {
        (_, Algo::Nvls) => lat += nccl::NVLS_NVLINK_LAT,
        (_, Algo::NvlsTree) => lat += nccl::NVLS_NVLINK_LAT + 2.0 * nodes.log2() * nccl::NVLSTREE_NET_LAT,
        (Coll::AllReduce | Coll::AllGather | Coll::ReduceScatter, Algo::Ring) => {
            let nsteps = if coll == Coll::AllReduce {
                2.0 * f64::from(n - 1)
            } else {
                f64::from(n - 1)
            };
            let ninter = if p.nodes > 1 {
                if coll == Coll::AllReduce {
                    2.0 * (nodes - 1.0)
                } else {
                    nodes - 1.0
                }
            } else {
                0.0
            };
            let intra = intra_hop.max(if p.nodes > 1 { overhead } else { 0.0 });
            lat += (nsteps - ninter) * intra + ninter * net_hop;
            if coll == Coll::AllReduce
                && proto == Proto::Simple
                && p.nodes > 1
                && p.generation != GpuGen::Volta
            {
                lat *= nccl::RING_SIMPLE_LAT_PENALTY;
            }
        }
        (Coll::AllReduce, Algo::Tree) => {
            lat += 2.0 * (f64::from(p.gpus_per_node - 1) * intra_hop + nodes.log2() * net_hop);
        }
        _ => {
            // Broadcast, all-to-all and send/receive: one hop of the slowest kind.
            lat += if p.nodes > 1 { net_hop } else { intra_hop };
        }
    }
    let busbw = bus;
    let algbw = busbw / coll.bus_factor(n);
    // A tree pipelines slot by slot through its depth (up the chain of GPUs in a node and
    // the nodes' tree, then down again); until the pipeline is full, part of it idles.
    // NCCL's latency terms count the hops but not this fill; NCCL accounts for it with
    // `treeCorrectionFactor` (0.4-1.0 by size; only its Simple row is in
    // docs/reference). Modelling the fill instead makes the loss follow depth and
    // channels; it reproduces the HDR fixture's mid-size curve (VALIDATION.md), where the
    // tree loses about a third of its bandwidth at 32-256 MiB.
    let fill_us = if matches!(algo, Algo::Tree | Algo::NvlsTree | Algo::Nvls) {
        // NVLS is one step into the switch and one out; NVLSTree replaces the chain inside
        // a node by those two steps.
        let intra_depth = if algo == Algo::Tree {
            f64::from(p.gpus_per_node - 1)
        } else {
            1.0
        };
        let depth = 2.0 * (intra_depth + nodes.log2().ceil());
        let per_channel_gbs = algbw / nch;
        // A message smaller than a slot per channel moves in one piece per hop.
        let piece_bytes = proto.slot_payload_bytes().min(bytes as f64 / nch);
        (depth - 1.0).max(0.0) * piece_bytes / (1000.0 * per_channel_gbs)
    } else {
        0.0
    };
    let transfer_us = bytes as f64 / (1000.0 * algbw);
    let time_us = lat + fill_us + transfer_us;
    let algbw_eff = bytes as f64 / (time_us * 1000.0);
    Some(Prediction {
        algo,
        proto,
        time_us,
        algbw_gbs: algbw_eff,
        busbw_gbs: algbw_eff * coll.bus_factor(n),
        bandwidth_share: transfer_us / time_us,
    })
}

/// The rate at which NCCL's tables let one channel's GPU thread move `proto`'s data with
/// `algo` on `p`, GB/s: the LL cap spread over the channels, LL128's per-channel caps,
/// the tree's Simple per-channel cap (docs/reference/collectives-and-nccl.md §2.2-§2.3;
/// bus-bandwidth caps taken as the data a thread moves). None where the tables set none
/// (a ring's Simple is bounded by its links).
pub fn channel_cap_gbs(algo: Algo, proto: Proto, p: &Platform) -> Option<f64> {
    let generation = p.generation.index();
    let ni = p.node_index();
    let nch = f64::from(p.channels.max(1));
    match (algo, proto) {
        (_, Proto::Ll) => Some(nccl::LL_MAX_BW[generation][ni] / nch),
        (Algo::Tree, Proto::Ll128) => Some(nccl::TREE_LL128_PER_CH[generation][ni]),
        (_, Proto::Ll128) => Some(nccl::RING_LL128_PER_CH[generation]),
        (Algo::Tree, Proto::Simple) => Some(nccl::TREE_PER_CH[generation][ni]),
        _ => None,
    }
}

impl Coll {
    /// The collective of a workload's operation.
    pub fn of_op(op: xirang_fabric::workload::CollectiveOp) -> Coll {
        use xirang_fabric::workload::CollectiveOp as O;
        match op {
            O::AllReduce => Coll::AllReduce,
            O::AllGather => Coll::AllGather,
            O::ReduceScatter => Coll::ReduceScatter,
            O::Broadcast => Coll::Broadcast,
            O::AllToAll => Coll::AllToAll,
            O::SendRecv => Coll::SendRecv,
        }
    }
}

/// Every (algorithm, protocol) the model covers for `coll` on `p` at `bytes`.
pub fn all(coll: Coll, bytes: u64, p: &Platform) -> Vec<Prediction> {
    let mut v = Vec::new();
    for algo in [Algo::Ring, Algo::Tree, Algo::Nvls, Algo::NvlsTree] {
        for proto in [Proto::Ll, Proto::Ll128, Proto::Simple] {
            if let Some(x) = predict(coll, algo, proto, bytes, p) {
                v.push(x);
            }
        }
    }
    v
}

/// The (algorithm, protocol) NCCL would pick: the least predicted time.
pub fn choose(coll: Coll, bytes: u64, p: &Platform) -> Option<Prediction> {
    all(coll, bytes, p)
        .into_iter()
        .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
}

/// The message size above which Tree beats Ring for AllReduce on `p` (Simple protocol),
/// if they cross in 1 KiB .. 16 GiB.
pub fn ring_tree_crossover(p: &Platform) -> Option<u64> {
    let mut prev: Option<bool> = None;
    for k in 10..=34 {
        let bytes = 1u64 << k;
        let ring = predict(Coll::AllReduce, Algo::Ring, Proto::Simple, bytes, p)?;
        let tree = predict(Coll::AllReduce, Algo::Tree, Proto::Simple, bytes, p)?;
        let tree_wins = tree.time_us < ring.time_us;
        if let Some(pw) = prev
            && pw != tree_wins
        {
            return Some(bytes);
        }
        prev = Some(tree_wins);
    }
    None
}
