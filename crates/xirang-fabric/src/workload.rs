//! Workload descriptions (the `[workloads.NAME.KIND]` sections of a scenario).
//!
//! These are declarations; the simulator (`xirang-sim`) turns them into flows and
//! requests. Endpoints are written as `host` (its first NIC), `host/nic`, or `host/GPUi`
//! (the NIC closest to that GPU on PCIe).

use serde::{Deserialize, Serialize};

use crate::units::Count;

mod serving;
pub use serving::*;

/// One workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Workload {
    /// Flows listed one by one.
    Flows(FlowsSpec),
    /// N senders to one receiver, all starting together.
    Incast(IncastSpec),
    /// Every host sends to one other host, a random permutation.
    Permutation(PermutationSpec),
    /// Every host sends to every other host.
    AllToAll(AllToAllSpec),
    /// A collective operation (schedules are filled in by `xirang-collective`).
    Collective(CollectiveSpec),
    /// Request/response traffic between clients and servers (inference).
    Inference(InferenceSpec),
    /// A flow file in the HPCC ns-3 simulator's format.
    HpccFlows(HpccFlowsSpec),
    /// Expert-parallel all-to-all of mixture-of-experts layers (dispatch and combine).
    Moe(MoeSpec),
    /// Prefill-to-decode KV-cache transfers of disaggregated serving.
    KvTransfer(KvTransferSpec),
}

impl Workload {
    /// Kind key in scenario files.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Flows(_) => "flows",
            Workload::Incast(_) => "incast",
            Workload::Permutation(_) => "permutation",
            Workload::AllToAll(_) => "all_to_all",
            Workload::Collective(_) => "collective",
            Workload::Inference(_) => "inference",
            Workload::HpccFlows(_) => "hpcc_flows",
            Workload::Moe(_) => "moe",
            Workload::KvTransfer(_) => "kv_transfer",
        }
    }

    /// Traffic class of the workload.
    pub fn class(&self) -> &str {
        match self {
            Workload::Flows(w) => &w.class,
            Workload::Incast(w) => &w.class,
            Workload::Permutation(w) => &w.class,
            Workload::AllToAll(w) => &w.class,
            Workload::Collective(w) => &w.class,
            Workload::Inference(w) => &w.class,
            Workload::HpccFlows(w) => &w.class,
            Workload::Moe(w) => &w.class,
            Workload::KvTransfer(w) => &w.class,
        }
    }
}

fn default_class() -> String {
    "training".to_string()
}

/// Explicit flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowsSpec {
    /// Default class of the listed flows.
    #[serde(default = "default_class")]
    pub class: String,
    /// The flows.
    pub list: Vec<FlowSpec>,
}

/// One explicit flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    /// Optional id, so that other flows can wait for this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Sender endpoint.
    pub src: String,
    /// Receiver endpoint.
    pub dst: String,
    /// Message size.
    pub bytes: u64,
    /// Start time (or earliest start, with `after`).
    #[serde(default)]
    pub start_us: f64,
    /// Class (default: the list's class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Priority override (default: the class's priority).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Ids of flows that must complete before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// N-to-1 incast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncastSpec {
    /// Receiving endpoint.
    pub receiver: String,
    /// Number of senders, chosen with the run's seed among hosts not under the receiver's
    /// leaf (ignored when `sender_hosts` is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub senders: Option<Count>,
    /// Explicit sender endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sender_hosts: Vec<String>,
    /// Bytes per sender.
    pub bytes: u64,
    /// Start time.
    #[serde(default)]
    pub start_us: f64,
    /// Traffic class.
    #[serde(default = "default_class")]
    pub class: String,
}

/// Random permutation traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermutationSpec {
    /// Bytes per flow.
    pub bytes: u64,
    /// Start time.
    #[serde(default)]
    pub start_us: f64,
    /// Participating endpoints (default: the first NIC of every host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Traffic class.
    #[serde(default = "default_class")]
    pub class: String,
}

/// All-to-all traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllToAllSpec {
    /// Bytes per (sender, receiver) pair.
    pub bytes: u64,
    /// Start time.
    #[serde(default)]
    pub start_us: f64,
    /// Participating endpoints (default: the first NIC of every host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Traffic class.
    #[serde(default = "default_class")]
    pub class: String,
}

/// Collective operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    /// AllReduce.
    AllReduce,
    /// AllGather.
    AllGather,
    /// ReduceScatter.
    ReduceScatter,
    /// Broadcast.
    Broadcast,
    /// All-to-all.
    AllToAll,
    /// nccl-tests' `sendrecv`: every rank sends its buffer to the next rank and receives
    /// the previous rank's.
    SendRecv,
}

/// Collective algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveAlgorithm {
    /// Ring (reduce-scatter + all-gather for AllReduce).
    Ring,
    /// NCCL-style double binary tree.
    Tree,
    /// Recursive halving-doubling.
    HalvingDoubling,
    /// Intra-host NVLink + inter-host per rail.
    Hierarchical,
}

/// A collective across GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSpec {
    /// Operation.
    pub op: CollectiveOp,
    /// Algorithm (absent: `config.nccl.algo`, and when that is `auto`, what NCCL's tuner
    /// would pick for the size and the hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<CollectiveAlgorithm>,
    /// Protocol (absent: `config.nccl.proto`, and when that is `auto`, NCCL's tuner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<crate::config::NcclProto>,
    /// Buffer size as nccl-tests defines it for the operation.
    pub bytes: u64,
    /// Participating hosts (default: all); every GPU of each host is a rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The communicator's channels (absent: NCCL's, two per NIC of a host, within
    /// `config.nccl.min_channels`/`max_channels`); NCCL uses fewer for small sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<u32>,
    /// Back-to-back repetitions.
    #[serde(default = "one")]
    pub iterations: u32,
    /// Reduction/kernel time before each step's send, µs.
    #[serde(default)]
    pub step_us: f64,
    /// Start time.
    #[serde(default)]
    pub start_us: f64,
    /// Traffic class.
    #[serde(default = "default_class")]
    pub class: String,
    /// Hosts whose GPUs run the collective's kernels slower, by a factor (a straggler:
    /// a throttled or shared GPU): their slices take `factor` times as long, so they free
    /// their receive slots late and their senders wait for clear-to-send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stragglers: Vec<Straggler>,
}

/// A host whose GPUs are slower than the others'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Straggler {
    /// The host.
    pub host: String,
    /// How many times longer its GPUs take per slice (1 to 1000).
    pub factor: f64,
}

fn one() -> u32 {
    1
}

/// A distribution of message sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SizeDist {
    /// Always this many bytes.
    Fixed(u64),
    /// Uniform between two sizes.
    Uniform {
        /// Smallest size.
        min_bytes: u64,
        /// Largest size.
        max_bytes: u64,
    },
    /// An empirical CDF: `[[bytes, cumulative probability], ...]`, increasing in both,
    /// ending at probability 1.
    Cdf(Vec<(u64, f64)>),
}

/// Inference request/response traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferenceSpec {
    /// Client endpoints (send requests).
    pub clients: Vec<String>,
    /// Server endpoints (answer them); each request goes to a server chosen uniformly.
    pub servers: Vec<String>,
    /// Poisson arrival rate of requests per client, per second.
    pub requests_per_sec: f64,
    /// Request sizes.
    pub request: SizeDist,
    /// Response sizes.
    pub response: SizeDist,
    /// Time between receiving a request and starting its response (server compute).
    #[serde(default)]
    pub service_us: f64,
    /// Share of each client's requests sent to a server under the client's own leaf
    /// switch, the rest to servers under other leaves (each group chosen from uniformly;
    /// a client with no server in one group sends everything to the other). Unset: every
    /// request picks a server uniformly from all of them. This is the tier-crossing share
    /// `xirang calibrate` fits to the observed spine utilisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_share: Option<f64>,
    /// First arrival window start.
    #[serde(default)]
    pub start_us: f64,
    /// Arrivals stop after this long.
    pub duration_us: f64,
    /// Traffic class.
    #[serde(default = "default_inference_class")]
    pub class: String,
}

fn default_inference_class() -> String {
    "inference".to_string()
}

/// A flow file in the HPCC simulator's format, relative to the scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HpccFlowsSpec {
    /// Path of the flow file.
    pub file: String,
    /// Subtract this from every start time, so that a file whose flows start at 2.0 s
    /// (the HPCC convention) starts at 0.
    #[serde(default)]
    pub time_offset_us: f64,
    /// Traffic class.
    #[serde(default = "default_class")]
    pub class: String,
}
