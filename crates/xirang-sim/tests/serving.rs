//! LLM-serving workloads: MoE dispatch and combine, KV-cache transfers
//! (docs/reference/llm-inference-traffic.md): what they put on the fabric is what the
//! model says, and their metrics hold exactly the parts they are defined with.

use std::path::Path;

use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::serving::MoePart;
use xirang_sim::workload::{Expanded, expand};
use xirang_sim::{RunResult, options, simulate};

fn load(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("serving.toml"))
        .and_then(|s| s.build(Path::new("serving.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn run(l: &Loaded) -> RunResult {
    let r = simulate(l, &options(l), &mut |_| {});
    r.check_conservation()
        .unwrap_or_else(|e| panic!("conservation: {e}"));
    r
}

/// `hosts` HGX-style hosts of `gpus` GPUs, one 400 Gbit/s NIC per GPU on rail leaves.
fn fabric(hosts: u32, gpus: u32, workloads: &str) -> String {
    format!(
        r#"
[topology.rail_optimized]
hosts = {hosts}
spines = {hosts}
host_rate_gbps = 400
fabric_rate_gbps = 400
link_delay_ns = 500

[topology.rail_optimized.host]
gpus = {gpus}
nics = {gpus}

[config.intra_host]
nvlink_gbps = 1600

{workloads}

[run]
seed = 3
"#
    )
}

fn moe(mode: &str, extra: &str) -> String {
    format!(
        r#"
[workloads.ep.moe]
mode = "{mode}"
experts_per_gpu = 2
tokens_per_gpu = 16
hidden = 7168
top_k = 8
{extra}
"#
    )
}

fn expanded(l: &Loaded) -> Expanded {
    expand(l.model(), options(l).seed)
}

/// Sum of bytes of a MoE workload's flows of one part.
fn part_bytes(ex: &Expanded, part: MoePart) -> (u64, usize) {
    let run = &ex.moe[0];
    let mut b = (0, 0);
    for (k, p) in run.parts.iter().enumerate() {
        if *p == part {
            b.0 += ex.flows[run.first_flow as usize + k].bytes;
            b.1 += 1;
        }
    }
    b
}

/// Low latency: every (token, expert) pair is one dispatch message and one combine
/// message, so a phase carries tokens x top-k x message bytes, no more and no less; the
/// signals are where no token goes.
#[test]
fn low_latency_bytes_are_tokens_times_top_k_times_message() {
    let l = load(&fabric(2, 4, &moe("low_latency", "layers = 2")));
    let ex = expanded(&l);
    let run = &ex.moe[0];
    let (ranks, tokens, top_k, layers) = (8u64, 16u64, 8u64, 2u64);
    assert_eq!(run.token_experts, ranks * tokens * top_k * layers);
    let (d, _) = part_bytes(&ex, MoePart::Dispatch);
    let (c, _) = part_bytes(&ex, MoePart::Combine);
    assert_eq!(d, run.token_experts * 7408);
    assert_eq!(c, run.token_experts * 14336);
    // One flow per (rank, expert) pair and phase, data or signal.
    let experts = ranks * 2;
    let (_, dn) = part_bytes(&ex, MoePart::Dispatch);
    let (_, cn) = part_bytes(&ex, MoePart::Combine);
    let (_, sn) = part_bytes(&ex, MoePart::Signal);
    assert_eq!((dn + cn + sn) as u64, 2 * ranks * experts * layers);
    let r = run_and_check(&l);
    let m = &r.moe[0];
    assert!(m.finished);
    assert_eq!(m.dispatch_bytes, d);
    assert_eq!(m.dispatch.n as u64, ranks * layers);
}

fn run_and_check(l: &Loaded) -> RunResult {
    let r = run(l);
    assert!(r.flows.iter().all(|f| f.fct_ps.is_some()), "every flow finishes");
    r
}

/// Low latency goes any GPU to any GPU: across hosts, NIC i talks to NIC j != i. Normal
/// mode stays on rails: every RDMA flow joins NICs of one local index, and hands over to
/// other GPUs over NVLink.
#[test]
fn low_latency_crosses_rails_and_normal_stays_on_its_rail() {
    let rail_of = |l: &Loaded, nic: xirang_fabric::model::NicId| {
        let n = &l.fabric.nics[nic.index()];
        l.fabric.hosts[n.host.index()]
            .nics
            .iter()
            .position(|&x| x == nic)
            .unwrap()
    };
    let net_flows = |l: &Loaded, ex: &Expanded| {
        ex.flows
            .iter()
            .filter(|f| f.local.is_none())
            .map(|f| (rail_of(l, f.src), rail_of(l, f.dst)))
            .collect::<Vec<_>>()
    };
    let ll = load(&fabric(2, 4, &moe("low_latency", "")));
    let flows = net_flows(&ll, &expanded(&ll));
    assert!(
        flows.iter().any(|(a, b)| a != b),
        "some low-latency flow crosses rails"
    );
    let normal = load(&fabric(2, 4, &moe("normal", "")));
    let ex = expanded(&normal);
    let flows = net_flows(&normal, &ex);
    assert!(!flows.is_empty());
    assert!(
        flows.iter().all(|(a, b)| a == b),
        "every normal-mode RDMA flow stays on its rail"
    );
    assert!(
        ex.flows.iter().any(|f| f.local.is_some() && !f.marker),
        "normal mode forwards over NVLink"
    );
    let r = run_and_check(&normal);
    assert!(r.moe[0].finished);
    assert!(r.moe[0].dispatch_rdma_gbs.is_some());
}

/// The time per output token is the step's compute plus its all-to-alls: compute added
/// before every dispatch and combine shifts every rank alike, so the network part is
/// unchanged and the step grows by exactly layers x (layer + expert compute).
#[test]
fn time_per_token_is_compute_plus_all_to_alls() {
    let bare = run_and_check(&load(&fabric(2, 4, &moe("low_latency", "layers = 3"))));
    let with = run_and_check(&load(&fabric(
        2,
        4,
        &moe(
            "low_latency",
            "layers = 3\nlayer_compute_us = 40\nexpert_compute_us = 25",
        ),
    )));
    let (a, b) = (&bare.moe[0], &with.moe[0]);
    let close = |x: Option<f64>, y: Option<f64>, what: &str| {
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!((x - y).abs() < 1e-3, "{what}: {x} vs {y}");
    };
    close(a.step_network.mean_us, b.step_network.mean_us, "network part");
    close(a.step_network.max_us, b.step_network.max_us, "network part, max");
    close(b.step.mean_us.map(|s| s - 3.0 * 65.0), a.step.mean_us, "step");
    close(a.dispatch.mean_us, b.dispatch.mean_us, "dispatch");
    close(a.combine.mean_us, b.combine.mean_us, "combine");
}

fn kv(mode: &str) -> String {
    format!(
        r#"
[workloads.kv.kv_transfer]
prefill = ["h0"]
decode = ["h1", "h2"]
kv = {{ gqa = {{ layers = 80, kv_heads = 8, head_dim = 128, dtype = "bf16" }} }}
prompt_tokens = {{ uniform = {{ min = 100, max = 900 }} }}
requests_per_sec = 20000
duration_us = 400
prefill_us_per_token = 0.05
mode = "{mode}"
"#
    )
}

/// A request's KV bytes are its prompt times the model's bytes per token (Llama-3-70B:
/// 327,680), spread over the NIC pairs; its time to first token is its queueing, its
/// prefill and its transfer, exactly.
#[test]
fn kv_bytes_follow_the_model_and_ttft_adds_its_parts() {
    for mode in ["push", "pull"] {
        let l = load(&fabric(3, 4, &kv(mode)));
        let ex = expanded(&l);
        assert!(ex.kv.len() > 2, "{mode}: a few requests");
        for r in &ex.kv {
            assert_eq!(r.bytes, r.tokens * 327_680);
            let data: u64 = (r.flows.0..r.flows.1)
                .map(|i| &ex.flows[i as usize])
                .filter(|f| {
                    // Data leaves the prefill host; read requests come to it.
                    l.fabric.nics[f.src.index()].host.index() == 0
                })
                .map(|f| f.bytes)
                .sum();
            assert_eq!(data, r.bytes, "{mode}: data flows carry the KV cache");
            let pairs = (r.flows.1 - r.flows.0) as usize;
            assert_eq!(pairs, if mode == "pull" { 8 } else { 4 }, "{mode}: 4 NIC pairs");
        }
        let res = run_and_check(&l);
        let k = &res.kv[0];
        assert_eq!(k.transferred, ex.kv.len());
        assert_eq!(k.bytes, ex.kv.iter().map(|r| r.bytes).sum::<u64>());
        // The queue, computed again from the arrivals: one prefill host here, first come
        // first served, 0.05 µs per token.
        let mut free = 0.0f64;
        let mut waits = Vec::new();
        for r in &ex.kv {
            let arrival = r.arrival as f64 / 1e6;
            let start = arrival.max(free);
            waits.push(start - arrival);
            free = start + r.tokens as f64 * 0.05;
        }
        let mean_wait = waits.iter().sum::<f64>() / waits.len() as f64;
        assert!(
            (k.queueing.mean_us.unwrap() - mean_wait).abs() < 1e-3,
            "{mode}: queueing {k:?} vs {mean_wait}"
        );
        // TTFT = queueing + prefill + transfer, request by request, so in the mean.
        let prefill_us: f64 = ex.kv.iter().map(|r| r.tokens as f64 * 0.05).sum::<f64>() / ex.kv.len() as f64;
        let sum = k.queueing.mean_us.unwrap() + prefill_us + k.transfer.mean_us.unwrap();
        assert!((k.ttft.mean_us.unwrap() - sum).abs() < 1e-3, "{mode}: {k:?}");
        assert!(
            k.queueing.max_us.unwrap() > 0.0,
            "{mode}: a busy prefill host queues"
        );
    }
}

/// A normal-mode group on two of the hosts, node-limited to one host per token.
const NORMAL_EP: &str = r#"
[workloads.prefill_ep.moe]
mode = "normal"
hosts = ["h1", "h2"]
tokens_per_gpu = 24
hidden = 7168
top_k = 4
max_hosts_per_token = 1
layers = 2
"#;

/// The same scenario and seed give the same results, on one thread or several.
#[test]
fn serving_results_are_deterministic_and_thread_count_independent() {
    let text = fabric(
        3,
        4,
        &format!(
            "{}\n{}\n{NORMAL_EP}",
            moe(
                "low_latency",
                "layers = 2\nrouting = { zipf = { exponent = 1.2 } }"
            ),
            kv("push")
        ),
    );
    let l = load(&text);
    let one = run(&l);
    let again = run(&l);
    assert_eq!(one.moe, again.moe);
    assert_eq!(one.kv, again.kv);
    let opts = options(&l);
    for threads in [2, 4] {
        let (par, _) = xirang_sim::parallel::simulate_threads(&l, &opts, 4, threads, &mut |_| {});
        assert_eq!(par.moe, one.moe, "{threads} threads");
        assert_eq!(par.kv, one.kv, "{threads} threads");
    }
}

/// A scenario of `scenarios/validation/`, as shipped.
fn shipped(name: &str) -> Loaded {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/validation")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Scenario::parse(&text, &path)
        .and_then(|s| s.build(&path, path.parent().unwrap(), Some(&text)))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn within(what: &str, twin: f64, published: f64, tolerance: f64) {
    let d = (twin - published) / published;
    assert!(
        d.abs() <= tolerance,
        "{what}: {twin:.1} against {published}: {:+.1} %",
        d * 100.0
    );
}

/// DeepEP's low-latency kernels at EP 16 and 32, dispatch and combine latency within the
/// issue's 20 % (the whole table, EP 8 to 256: scripts/validate-serving.sh, VALIDATION.md).
#[test]
fn deepep_low_latency_latency_within_20_percent() {
    for (ep, dispatch_us, combine_us) in [(16, 118.0, 195.0), (32, 155.0, 273.0)] {
        let r = run(&shipped(&format!("deepep-ll-ep{ep}.toml")));
        let m = &r.moe[0];
        assert!(m.finished);
        within(
            &format!("EP {ep} dispatch"),
            m.dispatch.mean_us.unwrap(),
            dispatch_us,
            0.2,
        );
        within(
            &format!("EP {ep} combine"),
            m.combine.mean_us.unwrap(),
            combine_us,
            0.2,
        );
    }
}

/// DeepEP's normal kernels at EP 32: the RDMA bandwidth as its benchmark counts it.
#[test]
fn deepep_normal_rdma_bandwidth_at_ep32_within_20_percent() {
    let r = run(&shipped("deepep-normal-ep32.toml"));
    within("EP 32 RDMA GB/s", r.moe[0].dispatch_rdma_gbs.unwrap(), 58.0, 0.2);
}

/// Mooncake's transfer engine on 4 x 200 Gbit/s: 87 GB/s, within the issue's 15 %.
#[test]
fn mooncake_4x200_within_15_percent() {
    let r = run(&shipped("mooncake-4x200.toml"));
    let k = &r.kv[0];
    assert_eq!(k.transferred, k.requests);
    within("4x200 GB/s", k.throughput_gbs.unwrap(), 87.0, 0.15);
}

/// Normal mode with almost nothing to send: a rank that routes no token to itself still
/// runs its phases in order (its dispatch ends after its own sends, its combine starts
/// after its own experts; a combine whose outputs are all in by then takes no time).
#[test]
fn normal_mode_phases_keep_their_order_with_few_tokens() {
    let spec = moe(
        "normal",
        "layers = 3\nlayer_compute_us = 5\nexpert_compute_us = 7",
    )
    .replace("tokens_per_gpu = 16", "tokens_per_gpu = 1")
    .replace("top_k = 8", "top_k = 1");
    let r = run_and_check(&load(&fabric(2, 4, &spec)));
    let m = &r.moe[0];
    assert!(m.finished);
    assert_eq!(m.dispatch.n, 8 * 3);
    // A rank's dispatch ends after its own sends (at least one NVLink latency).
    assert!(m.dispatch.min_us.unwrap() >= 1.0, "{m:?}");
    // Every layer of every rank's step passes its own layer and expert compute.
    assert!(m.step.min_us.unwrap() >= 3.0 * (5.0 + 7.0), "{m:?}");
}
