//! LLM-serving workloads: the expert-parallel all-to-all of mixture-of-experts layers
//! (`moe`) and the prefill-to-decode KV-cache transfer of disaggregated serving
//! (`kv_transfer`). Facts and formulas: docs/reference/llm-inference-traffic.md.

use serde::{Deserialize, Serialize};

/// Element types of activations and KV caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// 8-bit float (E4M3), one byte.
    Fp8,
    /// bfloat16, two bytes.
    Bf16,
    /// IEEE half, two bytes.
    Fp16,
    /// IEEE single, four bytes.
    Fp32,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp8 => 1,
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::Fp32 => 4,
        }
    }
}

/// How an expert-parallel group moves tokens (DeepEP's two kernel families,
/// llm-inference-traffic.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoeMode {
    /// Decode: one RDMA write per (token, chosen expert), any GPU to any GPU, a QP per
    /// destination expert; peers on the same host over NVLink.
    #[default]
    LowLatency,
    /// Training and prefill: each token goes once per destination host over RDMA to the
    /// GPU of the same local index (rail-aligned), which forwards it over NVLink to the
    /// experts of its host.
    Normal,
}

/// How tokens choose their experts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Routing {
    /// Every expert equally likely (DeepEP's benchmarks draw random scores).
    #[default]
    Uniform,
    /// Expert popularity follows a Zipf law of this exponent over a seeded order of the
    /// experts (a hot expert draws more tokens, as real routers do under skewed inputs).
    Zipf {
        /// The exponent s > 0: expert of rank r is chosen in proportion to 1 / r^s.
        exponent: f64,
    },
}

/// An expert-parallel all-to-all: every layer of every step runs a dispatch (tokens to
/// their experts) and a combine (expert outputs back to the tokens' GPUs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpec {
    /// Hosts of the expert-parallel group (default: all); every GPU of each is a rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Kernel family.
    #[serde(default)]
    pub mode: MoeMode,
    /// Routed experts each GPU holds.
    #[serde(default = "one")]
    pub experts_per_gpu: u32,
    /// Tokens each GPU routes per layer (its micro-batch).
    pub tokens_per_gpu: u32,
    /// The model's hidden size (elements of one token's activation).
    pub hidden: u32,
    /// Experts each token is routed to.
    pub top_k: u32,
    /// Type of dispatched activations (DeepEP: FP8 with one fp32 scale per 128 elements).
    #[serde(default = "fp8")]
    pub dispatch_dtype: Dtype,
    /// Type of combined expert outputs.
    #[serde(default = "bf16")]
    pub combine_dtype: Dtype,
    /// Node-limited routing: a token's experts lie on at most this many hosts
    /// (DeepSeek-V3 routes to at most 4 nodes; DeepEP's normal benchmark uses 4 groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hosts_per_token: Option<u32>,
    /// Which experts tokens pick.
    #[serde(default)]
    pub routing: Routing,
    /// MoE layers per step (DeepSeek-V3: 58).
    #[serde(default = "one")]
    pub layers: u32,
    /// Steps (decode iterations) run back to back.
    #[serde(default = "one")]
    pub steps: u32,
    /// Compute between a layer's combine and the next layer's dispatch on a GPU
    /// (attention and the dense parts), µs.
    #[serde(default)]
    pub layer_compute_us: f64,
    /// Expert compute between a GPU's last dispatched token and its combine, µs.
    #[serde(default)]
    pub expert_compute_us: f64,
    /// GPU time of a dispatch kernel beyond its transfers, µs (default: low latency,
    /// [`DEEPEP_LL_DISPATCH_KERNEL_US`]; normal, 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_kernel_us: Option<f64>,
    /// GPU time of a combine kernel beyond its transfers, µs (default: low latency,
    /// [`DEEPEP_LL_COMBINE_KERNEL_US`]; normal, 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combine_kernel_us: Option<f64>,
    /// Normal mode: QPs per (GPU, destination host) (DeepEP: one per channel, channels =
    /// SMs / 2; 12 with its 24 SMs).
    #[serde(default = "normal_channels")]
    pub channels: u32,
    /// Start of the first step.
    #[serde(default)]
    pub start_us: f64,
    /// Traffic class.
    #[serde(default = "inference_class")]
    pub class: String,
}

/// DeepEP's normal kernels use 24 SMs by default, one channel per two SMs
/// (llm-inference-traffic.md §1, `csrc/legacy/config.hpp:62`).
pub const DEEPEP_NORMAL_CHANNELS: u32 = 12;

fn normal_channels() -> u32 {
    DEEPEP_NORMAL_CHANNELS
}

/// DeepEP's low-latency dispatch message: a 16-byte header (llm-inference-traffic.md §1,
/// `internode_ll.cu:172-181`).
pub const LL_DISPATCH_HEADER_BYTES: u64 = 16;
/// Elements per FP8 scale (one fp32 scale per 128 elements, `internode_ll.cu:254-266`).
pub const FP8_SCALE_BLOCK: u64 = 128;
/// Bytes of one FP8 scale (fp32).
pub const FP8_SCALE_BYTES: u64 = 4;
/// A normal-mode token record carries an 8-byte SourceMeta (`internode.cu:22-23`).
pub const NORMAL_SOURCE_META_BYTES: u64 = 8;
/// ... and each top-k entry's index (int32 on the wire, 4 B) and weight (fp32, 4 B)
/// (`internode.cu:47-51`).
pub const NORMAL_TOPK_ENTRY_BYTES: u64 = 8;
/// Normal-mode records are 16-byte aligned (`internode.cu:47-51`).
pub const NORMAL_RECORD_ALIGN: u64 = 16;

/// The GPU time of DeepEP's low-latency dispatch kernel beyond its copies, from the
/// benchmark's EP 8 row, where every byte goes over NVLink and none over the network
/// (llm-inference-traffic.md §1): 128 tokens x top-8 x 7,408 B, of which 7/8 go to the
/// other 7 GPUs: 6.64 MB at 160 GB/s (H800's 200 GB/s NVLink at NCCL's 0.8 efficiency) is
/// 41.5 µs, plus 1 µs of NVLink latency, against 77 µs measured: 34.5 µs. A derivation from
/// one published row; the RDMA rows (EP 16 to 256) then check it (VALIDATION.md).
pub const DEEPEP_LL_DISPATCH_KERNEL_US: f64 = 34.5;
/// The same for the combine: 7/8 of 128 x 8 x 14,336 B is 12.85 MB, 80.3 µs at 160 GB/s,
/// plus 1 µs, against 114 µs measured: 32.7 µs.
pub const DEEPEP_LL_COMBINE_KERNEL_US: f64 = 32.7;

impl MoeSpec {
    /// The dispatch kernel's own time, µs.
    pub fn dispatch_kernel_us(&self) -> f64 {
        self.dispatch_kernel_us.unwrap_or(match self.mode {
            MoeMode::LowLatency => DEEPEP_LL_DISPATCH_KERNEL_US,
            MoeMode::Normal => 0.0,
        })
    }

    /// The combine kernel's own time, µs.
    pub fn combine_kernel_us(&self) -> f64 {
        self.combine_kernel_us.unwrap_or(match self.mode {
            MoeMode::LowLatency => DEEPEP_LL_COMBINE_KERNEL_US,
            MoeMode::Normal => 0.0,
        })
    }

    /// One token's activation in the dispatch type, FP8 scales included.
    pub fn dispatch_payload_bytes(&self) -> u64 {
        let h = u64::from(self.hidden);
        let scales = if self.dispatch_dtype == Dtype::Fp8 {
            h.div_ceil(FP8_SCALE_BLOCK) * FP8_SCALE_BYTES
        } else {
            0
        };
        h * self.dispatch_dtype.bytes() + scales
    }

    /// Bytes of one dispatch message: low latency, one (token, expert) write with its
    /// header (7,408 B at hidden 7168 in FP8); normal, one (token, host) record with its
    /// metadata and top-k entries, 16-byte aligned (7,472 B at hidden 7168, top-8).
    pub fn dispatch_message_bytes(&self) -> u64 {
        match self.mode {
            MoeMode::LowLatency => LL_DISPATCH_HEADER_BYTES + self.dispatch_payload_bytes(),
            MoeMode::Normal => (self.dispatch_payload_bytes()
                + NORMAL_SOURCE_META_BYTES
                + u64::from(self.top_k) * NORMAL_TOPK_ENTRY_BYTES)
                .next_multiple_of(NORMAL_RECORD_ALIGN),
        }
    }

    /// Bytes of one combine message: one expert output in the combine type (14,336 B at
    /// hidden 7168 in BF16). Normal mode's combine record metadata is not counted (not in
    /// the reference).
    pub fn combine_message_bytes(&self) -> u64 {
        u64::from(self.hidden) * self.combine_dtype.bytes()
    }
}

/// How a request's KV cache is sized.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum KvLayout {
    /// Grouped-query (or multi-head) attention: K and V of every KV head, every layer:
    /// 2 × kv_heads × head_dim × dtype bytes per token per layer.
    Gqa {
        /// Transformer layers.
        layers: u32,
        /// Key/value heads.
        kv_heads: u32,
        /// Elements per head.
        head_dim: u32,
        /// Cache type.
        dtype: Dtype,
    },
    /// Multi-head latent attention (DeepSeek): one latent vector per token per layer,
    /// (kv_lora_rank + rope_head_dim) × dtype bytes.
    Mla {
        /// Transformer layers.
        layers: u32,
        /// The compressed KV dimension (DeepSeek-V3: 512).
        kv_lora_rank: u32,
        /// The decoupled RoPE key dimension (DeepSeek-V3: 64).
        rope_head_dim: u32,
        /// Cache type.
        dtype: Dtype,
    },
    /// Given directly (a quantized or custom layout).
    BytesPerToken(u64),
}

impl KvLayout {
    /// KV bytes of one token, every layer (Llama-3-70B BF16: 327,680; DeepSeek-V3 BF16:
    /// 70,272).
    pub fn bytes_per_token(&self) -> u64 {
        match *self {
            KvLayout::Gqa {
                layers,
                kv_heads,
                head_dim,
                dtype,
            } => 2 * u64::from(kv_heads) * u64::from(head_dim) * dtype.bytes() * u64::from(layers),
            KvLayout::Mla {
                layers,
                kv_lora_rank,
                rope_head_dim,
                dtype,
            } => (u64::from(kv_lora_rank) + u64::from(rope_head_dim)) * dtype.bytes() * u64::from(layers),
            KvLayout::BytesPerToken(b) => b,
        }
    }
}

/// A distribution of token counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenDist {
    /// Always this many tokens.
    Fixed(u64),
    /// Uniform between two counts.
    Uniform {
        /// Fewest tokens.
        min: u64,
        /// Most tokens.
        max: u64,
    },
    /// An empirical CDF: `[[tokens, cumulative probability], ...]`, increasing in both,
    /// ending at probability 1.
    Cdf(Vec<(u64, f64)>),
}

/// Which side drives a KV transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvMode {
    /// The prefill side writes (Mooncake through SGLang: `batch_transfer_sync_write`).
    #[default]
    Push,
    /// The decode side reads (vLLM's NixlConnector): a read request travels first.
    Pull,
}

/// Prefill-to-decode KV-cache transfers of disaggregated serving: requests arrive (Poisson),
/// wait for their prefill host, are prefilled, and their KV cache moves to a decode host in
/// slices spread over several NICs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvTransferSpec {
    /// Prefill hosts (each one serving instance; requests go round robin).
    pub prefill: Vec<String>,
    /// Decode hosts (each request's destination, drawn uniformly).
    pub decode: Vec<String>,
    /// KV cache size per token.
    pub kv: KvLayout,
    /// Prompt lengths.
    pub prompt_tokens: TokenDist,
    /// Poisson arrival rate of requests over the whole prefill pool, per second.
    pub requests_per_sec: f64,
    /// Arrivals stop after this long.
    pub duration_us: f64,
    /// Prefill compute per prompt token on one prefill host, µs (0: not modelled; time to
    /// first token is then queueing-free transfer time only).
    #[serde(default)]
    pub prefill_us_per_token: f64,
    /// Slice size (Mooncake: 64 KiB).
    #[serde(default = "kv_slice")]
    pub slice_bytes: u64,
    /// NICs each transfer spreads its slices over (default: every NIC the two hosts pair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics_per_transfer: Option<u32>,
    /// QPs per NIC pair (default: the fabric's `transport.qps_per_connection`, which a
    /// tune can move; Mooncake's transfer engine opens 2, [`MOONCAKE_QPS_PER_ENDPOINT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<u32>,
    /// Push (write) or pull (read).
    #[serde(default)]
    pub mode: KvMode,
    /// First arrival window start.
    #[serde(default)]
    pub start_us: f64,
    /// Traffic class.
    #[serde(default = "inference_class")]
    pub class: String,
}

/// Mooncake's transfer engine slices requests above 64 KB (llm-inference-traffic.md §2).
pub const MOONCAKE_SLICE_BYTES: u64 = 64 * 1024;
/// Mooncake's transfer engine opens 2 QPs per endpoint (llm-inference-traffic.md §2).
pub const MOONCAKE_QPS_PER_ENDPOINT: u32 = 2;

fn kv_slice() -> u64 {
    MOONCAKE_SLICE_BYTES
}

fn one() -> u32 {
    1
}

fn fp8() -> Dtype {
    Dtype::Fp8
}

fn bf16() -> Dtype {
    Dtype::Bf16
}

fn inference_class() -> String {
    "inference".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds_v3(mode: MoeMode) -> MoeSpec {
        MoeSpec {
            hosts: Vec::new(),
            mode,
            experts_per_gpu: 1,
            tokens_per_gpu: 128,
            hidden: 7168,
            top_k: 8,
            dispatch_dtype: Dtype::Fp8,
            combine_dtype: Dtype::Bf16,
            max_hosts_per_token: None,
            routing: Routing::Uniform,
            layers: 1,
            steps: 1,
            layer_compute_us: 0.0,
            expert_compute_us: 0.0,
            dispatch_kernel_us: None,
            combine_kernel_us: None,
            channels: DEEPEP_NORMAL_CHANNELS,
            start_us: 0.0,
            class: "inference".into(),
        }
    }

    /// DeepEP's message sizes at hidden 7168, top-8 (llm-inference-traffic.md §1).
    #[test]
    fn deepep_message_sizes() {
        let ll = ds_v3(MoeMode::LowLatency);
        assert_eq!(ll.dispatch_message_bytes(), 7408);
        assert_eq!(ll.combine_message_bytes(), 14336);
        assert_eq!(ds_v3(MoeMode::Normal).dispatch_message_bytes(), 7472);
    }

    /// The reference's KV sizes per token (llm-inference-traffic.md §2).
    #[test]
    fn kv_bytes_per_token() {
        let llama = KvLayout::Gqa {
            layers: 80,
            kv_heads: 8,
            head_dim: 128,
            dtype: Dtype::Bf16,
        };
        assert_eq!(llama.bytes_per_token(), 327_680);
        let dsv3 = KvLayout::Mla {
            layers: 61,
            kv_lora_rank: 512,
            rope_head_dim: 64,
            dtype: Dtype::Bf16,
        };
        assert_eq!(dsv3.bytes_per_token(), 70_272);
        assert_eq!(KvLayout::BytesPerToken(40_016).bytes_per_token(), 40_016);
    }
}
