//! The packet engine against the cost model (NCCL's tuner, `xirang_collective::cost`) on
//! uncongested fabrics (VALIDATION.md, "nccl-tests on the twin"): rail-optimized
//! scalable units without oversubscription, hosts of 8 GPUs and 8 x 400 Gbit/s NICs, no
//! congestion control, from 16 GPUs up; ring and tree AllReduce with Simple at sizes
//! where the model's time is mostly moving bytes (its bandwidth share at least 70 %).
//! Heavy: run it with
//!
//! ```sh
//! cargo test --release -p xirang-sim --test engine_vs_model -- --ignored --nocapture
//! ```
//!
//! Target (the NCCL-transport issue): within 10 %; a disagreement is listed with which
//! of the two is right. The hierarchical (rail) AllReduce is not compared: the cost model
//! has no such algorithm (NCCL has none either; it is the simulator's rail schedule), so
//! there is nothing to compare it with here.

use std::path::Path;

use xirang_collective::cost::{Algo, Coll, Platform, Proto, predict};
use xirang_fabric::config::NcclProto;
use xirang_fabric::scenario::Scenario;
use xirang_sim::sweep::{SweepSpec, run_size};

const MIB: u64 = 1 << 20;

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
        "| GPUs | algorithm | size | model busbw GB/s | model bandwidth share | engine busbw GB/s | engine/model |\n|---|---|---|---|---|---|---|\n",
    );
    let mut misses = Vec::new();
    // (hosts, largest size simulated): the largest bounded so that a run stays minutes.
    for (hosts, max_mib) in [(2u32, 4096u64), (8, 4096), (32, 1024), (128, 256)] {
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
                if m.bandwidth_share < 0.7 {
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
                let row = format!(
                    "| {} | {} | {} | {:.1} | {:.0} % | {:.1} | {:.2} |\n",
                    hosts * 8,
                    a.nccl_name(),
                    xirang_collective::nccl_tests::size_text(bytes),
                    m.busbw_gbs,
                    m.bandwidth_share * 100.0,
                    e,
                    ratio
                );
                // Each row as it is measured: the largest runs take minutes.
                print!("{row}");
                out.push_str(&row);
                if !(0.9..=1.1).contains(&ratio) {
                    misses.push(format!(
                        "{} GPUs {} {} MiB: {ratio:.2}",
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
