//! The packet engine against the cost model (NCCL's tuner, `xirang_collective::cost`) on
//! uncongested fabrics (VALIDATION.md, "nccl-tests on the twin"): rail-optimized
//! scalable units without oversubscription, hosts of 8 GPUs and 8 x 400 Gbit/s NICs, no
//! congestion control, 16 to 1,024 GPUs; ring and tree AllReduce with Simple at sizes
//! where the model's time is mostly moving bytes (its bandwidth share at least 80 %; the
//! target holds where it is at least 95 %, bandwidth-bound). 4,096 GPUs at 4 GiB would
//! take hours, so they are left out.
//! Heavy: run it with
//!
//! ```sh
//! cargo test --release -p xirang-sim --test engine_vs_model -- --ignored --nocapture
//! ```
//!
//! Target (the NCCL-transport issue): within 10 % at bandwidth-bound sizes. Two
//! disagreements are known and shown in their own columns rather than hidden
//! (VALIDATION.md says which side the real runs support):
//! - below 95 % the model adds NCCL's per-step latency in series with the bytes, while the
//!   engine's slices overlap a step's latency with the slots still in flight;
//! - NCCL's tuner counts 92 % of the tree's bound (`cost::TREE_SIMPLE_EFFICIENCY`, an
//!   empirical discount), the engine's chain runs at the bound itself, so tree rows are
//!   judged against the bound.
//!
//! The hierarchical (rail) AllReduce is not compared: the cost model has no such algorithm
//! (NCCL has none either; it is the simulator's rail schedule), so there is nothing to
//! compare it with here.

use std::path::Path;

use xirang_collective::cost::{Algo, Coll, Platform, Proto, TREE_SIMPLE_EFFICIENCY, predict};
use xirang_fabric::config::NcclProto;
use xirang_fabric::scenario::Scenario;
use xirang_sim::sweep::{SweepSpec, run_size};

const MIB: u64 = 1 << 20;
/// Sizes shown: the model's time at least this share bytes.
const SHOWN_SHARE: f64 = 0.8;
/// Sizes judged (bandwidth-bound): the model's time at least this share bytes.
const BANDWIDTH_BOUND_SHARE: f64 = 0.95;

fn fabric(hosts: u32) -> String {
    format!(
        r#"
[topology.rail_optimized]
hosts = {hosts}
host_rate_gbps = 400
fabric_rate_gbps = 400
link_delay_ns = 500

[topology.rail_optimized.host]
gpus = 8
nics = 8
gpu_model = "H100"

[config.classes.training]
priority = 3
cc = "none"

[workloads.ar.collective]
op = "all_reduce"
bytes = 1048576
"#
    )
}

#[test]
#[ignore = "minutes: the engine at 16 to 1,024 GPUs against the cost model (VALIDATION.md)"]
fn engine_agrees_with_the_cost_model_where_bytes_dominate() {
    use xirang_collective::schedule::CollectiveAlgorithm as A;
    let mut out = String::from(
        "| GPUs | algorithm | size | model busbw GB/s | model bandwidth share | engine busbw GB/s | engine/model | engine/model's bandwidth bound |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut misses = Vec::new();
    // (hosts, largest size simulated); the 1,024-GPU tree at 4 GiB is most of the run.
    for (hosts, max_mib) in [(2u32, 4096u64), (8, 4096), (32, 4096), (128, 4096)] {
        let text = fabric(hosts);
        let loaded = Scenario::parse(&text, Path::new("x.toml"))
            .and_then(|s| s.build(Path::new("x.toml"), Path::new("."), Some(&text)))
            .unwrap_or_else(|e| panic!("{e}"));
        let p = Platform::of_fabric(&loaded.fabric, &loaded.scenario.config, &[], 0).unwrap();
        for (algo, a) in [(A::Ring, Algo::Ring), (A::Tree, Algo::Tree)] {
            let mut mib = 1;
            while mib <= max_mib {
                let bytes = mib * MIB;
                mib *= 4;
                let Some(m) = predict(Coll::AllReduce, a, Proto::Simple, bytes, &p) else {
                    continue;
                };
                if m.bandwidth_share < SHOWN_SHARE {
                    continue;
                }
                let spec = SweepSpec {
                    workload: Some("ar".into()),
                    sizes: vec![bytes],
                    op: None,
                    algorithm: Some(algo),
                    proto: Some(NcclProto::Simple),
                    with_background: false,
                    warmup_iters: 0,
                    iters: 1,
                };
                let r = run_size(&loaded, &spec, "ar", bytes).unwrap();
                let e = r.busbw_gbs.unwrap_or(0.0);
                let ratio = e / m.busbw_gbs;
                // The model's busbw with its time all bytes, less NCCL's tree discount.
                let discount = if a == Algo::Tree {
                    TREE_SIMPLE_EFFICIENCY
                } else {
                    1.0
                };
                let bound = m.busbw_gbs / m.bandwidth_share / discount;
                let to_bound = e / bound;
                let row = format!(
                    "| {} | {} | {} | {:.1} | {:.0} % | {:.1} | {:.2} | {:.2} |\n",
                    hosts * 8,
                    a.nccl_name(),
                    xirang_collective::nccl_tests::size_text(bytes),
                    m.busbw_gbs,
                    m.bandwidth_share * 100.0,
                    e,
                    ratio,
                    to_bound
                );
                // Each row as it is measured: the largest runs take minutes.
                print!("{row}");
                out.push_str(&row);
                let judged = if a == Algo::Tree { to_bound } else { ratio };
                if m.bandwidth_share >= BANDWIDTH_BOUND_SHARE && !(0.9..=1.1).contains(&judged) {
                    misses.push(format!(
                        "{} GPUs {} {} MiB: {judged:.2}",
                        hosts * 8,
                        a.nccl_name(),
                        bytes / MIB
                    ));
                }
            }
        }
    }
    println!("{out}");
    assert!(misses.is_empty(), "{misses:#?}\n{out}");
}
