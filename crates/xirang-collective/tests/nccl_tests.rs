//! The nccl-tests reader on every real log in test_data/nccl-tests (copied from
//! shared/fixtures/nccl-tests; SOURCE.md there says where each came from). Expected values
//! were read by eye from the files.

use proptest::prelude::*;
use xirang_collective::cost::Coll;
use xirang_collective::nccl_tests::{Report, Step, TestRun, parse};

fn load(name: &str) -> Report {
    let path = format!("{}/test_data/nccl-tests/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn one(name: &str) -> TestRun {
    let r = load(name);
    assert_eq!(r.tests.len(), 1, "{name}");
    assert!(r.warnings.is_empty(), "{name}: {:?}", r.warnings);
    r.tests.into_iter().next().unwrap()
}

/// (size, out-of-place busbw, in-place busbw) of the largest row.
fn largest(t: &TestRun) -> (u64, f64, f64) {
    let r = t.largest().unwrap();
    (r.size_bytes, r.out_of_place.busbw_gbs, r.in_place.busbw_gbs)
}

#[test]
fn every_fixture_parses() {
    let dir = format!("{}/test_data/nccl-tests", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "txt") {
            let text = std::fs::read_to_string(&p).unwrap();
            let r = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!r.tests.is_empty(), "{}", p.display());
            n += 1;
        }
    }
    assert_eq!(n, 19);
}

#[test]
fn new_captures_read_as_their_sources_state() {
    // Four GPUs per host behind one NIC, no test named (SOURCE.md: 5.85/5.86 at 25 GiB).
    let t = one("sendrecv-2node-4gpu-roce400-one-nic.txt");
    assert_eq!(
        (t.name.as_deref(), t.collective, t.nranks()),
        (None, None, Some(8))
    );
    assert_eq!(t.hosts(), ["MOC-R4PCC04U37", "MOC-R4PCC04U35"]);
    assert_eq!(largest(&t), (26_843_545_600, 5.85, 5.86));
    assert_eq!(t.rows.len(), 13);
    // The collapsing pair: two tests, 0.90/0.84 and 0.97/0.99 at 16 GiB.
    let r = load("pair-2node-1gpu-collapse-cnode2-001_cnode2-004.txt");
    let ends: Vec<_> = r.tests.iter().map(largest).collect();
    assert_eq!(ends, [(17_179_869_184, 0.90, 0.84), (17_179_869_184, 0.97, 0.99)]);
    let t = one("allreduce-2node-1gpu-roce400.txt");
    assert_eq!(largest(&t), (26_843_545_600, 14.97, 15.00));
}

#[test]
fn single_node_h100_five_collectives() {
    let r = load("h100-1node-8gpu-all-collectives.txt");
    let names: Vec<_> = r.tests.iter().map(|t| t.name.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "all_reduce_perf",
            "all_gather_perf",
            "reduce_scatter_perf",
            "alltoall_perf",
            "sendrecv_perf"
        ]
    );
    let colls: Vec<_> = r.tests.iter().map(|t| t.collective.unwrap()).collect();
    assert_eq!(
        colls,
        [
            Coll::AllReduce,
            Coll::AllGather,
            Coll::ReduceScatter,
            Coll::AllToAll,
            Coll::SendRecv
        ]
    );
    let ar = &r.tests[0];
    assert_eq!(ar.nranks(), Some(8));
    assert_eq!(ar.hosts(), ["cnode3-002"]);
    assert_eq!(ar.gpu_model(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(ar.nccl_version.as_deref(), Some("2.29.2"));
    assert_eq!(ar.max_bytes_reduced_to, Some(26_549_638_485));
    let p = ar.params.as_ref().unwrap();
    assert_eq!(
        (p.min_bytes, p.max_bytes, p.step, p.warmup_iters, p.iters),
        (33_554_432, 68_719_476_736, Step::Factor(2), 5, 20)
    );
    assert_eq!(ar.rows.len(), 10);
    assert_eq!(largest(ar), (17_179_869_184, 482.27, 482.12));
    let first = &ar.rows[0];
    assert_eq!(
        (
            first.size_bytes,
            first.count,
            first.dtype.as_str(),
            first.redop.as_str(),
            first.root
        ),
        (33_554_432, 4_194_304, "double", "sum", -1)
    );
    assert_eq!(
        (
            first.out_of_place.time_us,
            first.out_of_place.algbw_gbs,
            first.in_place.time_us
        ),
        (182.87, 183.49, 182.88)
    );
    assert_eq!(ar.avg_busbw_gbs, Some(437.957));
    assert_eq!(ar.out_of_bounds, Some(0));
    assert_eq!(ar.wrong(), 0);
    let busbw: Vec<f64> = r.tests.iter().map(|t| largest(t).1).collect();
    assert_eq!(busbw, [482.27, 361.86, 364.76, 348.03, 367.25]);
    let avg: Vec<f64> = r.tests.iter().map(|t| t.avg_busbw_gbs.unwrap()).collect();
    assert_eq!(avg, [437.957, 328.618, 330.721, 313.838, 279.874]);
    // all_gather sizes count the whole gathered buffer: 524288 doubles per rank x 8.
    assert_eq!(r.tests[1].rows[0].count, 524_288);
    assert_eq!(r.tests[1].rows[0].redop, "none");
}

#[test]
fn ten_nodes_eighty_ranks() {
    let r = load("h100-10node-80gpu-all-collectives.txt");
    assert_eq!(r.tests.len(), 5);
    for t in &r.tests {
        assert_eq!(t.nranks(), Some(80));
        assert_eq!(t.hosts().len(), 10);
        assert_eq!(t.rows.len(), 10);
    }
    let busbw: Vec<f64> = r.tests.iter().map(|t| largest(t).1).collect();
    assert_eq!(busbw, [320.54, 324.29, 323.40, 50.38, 15.22]);
    let avg: Vec<f64> = r.tests.iter().map(|t| t.avg_busbw_gbs.unwrap()).collect();
    assert_eq!(avg, [265.631, 218.677, 216.683, 47.1472, 15.1671]);
    // The all_reduce peak is below the largest size.
    let peak = r.tests[0]
        .rows
        .iter()
        .map(|r| r.out_of_place.busbw_gbs)
        .fold(0.0, f64::max);
    assert_eq!(peak, 344.87);
}

#[test]
fn debug_log_with_a_row_split_by_info_lines() {
    let t = one("h100-2node-4gpu-hdr-ib-debug-info.txt");
    assert_eq!(t.name.as_deref(), Some("all_reduce_perf_mpi"));
    assert_eq!(t.collective, Some(Coll::AllReduce));
    assert_eq!(t.nccl_version.as_deref(), Some("2.22.3+cuda12.6"));
    assert_eq!(t.nranks(), Some(8));
    assert_eq!(t.hosts(), ["gcn151", "gcn154"]);
    assert_eq!(t.gpu_model(), Some("NVIDIA H100"));
    // 31 sizes, 8 B .. 8 GiB, including the one split across lines 334 and 396.
    assert_eq!(t.rows.len(), 31);
    assert_eq!(t.rows[0].size_bytes, 8);
    let split = t.rows.iter().find(|r| r.size_bytes == 2_097_152).unwrap();
    assert_eq!(split.line, 334);
    assert_eq!(split.root, -1);
    assert_eq!(
        (
            split.out_of_place.time_us,
            split.out_of_place.algbw_gbs,
            split.out_of_place.busbw_gbs
        ),
        (87.18, 24.05, 42.10)
    );
    assert_eq!(
        (
            split.in_place.time_us,
            split.in_place.busbw_gbs,
            split.in_place.wrong
        ),
        (85.11, 43.12, Some(0))
    );
    assert_eq!(t.rows[19].size_bytes, 4_194_304);
    assert_eq!(largest(&t), (8_589_934_592, 156.14, 156.30));
    assert_eq!(t.avg_busbw_gbs, Some(48.8121));
    // Sizes double from row to row with nothing missing.
    assert!(t.rows.windows(2).all(|w| w[1].size_bytes == 2 * w[0].size_bytes));
}

#[test]
fn slurm_output_without_test_name_is_recognised_as_all_reduce() {
    let t = one("h100-2node-8gpu-roce-oci.txt");
    assert_eq!(t.name, None);
    assert_eq!(t.params, None);
    assert_eq!(
        (t.collective, t.collective_inferred),
        (Some(Coll::AllReduce), true)
    );
    assert_eq!(t.nccl_version.as_deref(), Some("2.23.4+cuda12.6"));
    assert_eq!((t.nranks(), t.hosts().len()), (Some(16), 2));
    assert_eq!(t.rows.len(), 5);
    assert_eq!(t.rows[4].out_of_place.time_us, 68359.0);
    assert_eq!(largest(&t), (17_179_869_184, 471.22, 470.75));
    assert_eq!(t.avg_busbw_gbs, Some(464.075));
}

#[test]
fn partial_rank_list_and_no_average() {
    let t = one("a100-2node-8gpu-roce-oci-b4.txt");
    assert_eq!(t.name.as_deref(), Some("all_reduce_perf"));
    assert_eq!(t.ranks.len(), 4);
    assert_eq!(t.nranks(), Some(16));
    assert_eq!(t.gpu_model(), Some("NVIDIA A100-SXM4-40GB"));
    assert_eq!(t.nccl_version.as_deref(), Some("2.29.3+cuda13.1"));
    assert_eq!(t.rows.len(), 4);
    assert_eq!(largest(&t), (8_589_934_592, 189.60, 189.50));
    assert_eq!(t.avg_busbw_gbs, None);
    assert_eq!(t.params.as_ref().unwrap().warmup_iters, 1);
    assert_eq!(t.params.as_ref().unwrap().iters, 100);
}

#[test]
fn rccl_tests_variant() {
    let t = one("rccl-mi300x-2node-8gpu-roce-oci.txt");
    assert_eq!(t.name.as_deref(), Some("all_reduce_perf"));
    assert_eq!(t.gpu_model(), None);
    assert_eq!(t.ranks[1].bus_id, "0000:da:00");
    assert_eq!(t.nranks(), Some(16));
    assert_eq!(largest(&t), (17_179_869_184, 358.37, 358.24));
}

#[test]
fn fixed_increment_and_unchecked_results() {
    let t = one("sendrecv-2node-1gpu-roce400.txt");
    assert_eq!(t.params.as_ref().unwrap().step, Step::Bytes(2_147_483_648));
    // Nothing in the log names the test; two ranks make AllReduce and sendrecv look alike.
    assert_eq!((t.name.as_deref(), t.collective), (None, None));
    assert_eq!(t.nccl_version.as_deref(), Some("2.26.2+cuda."));
    assert_eq!(t.rows.len(), 13);
    assert!(
        t.rows
            .windows(2)
            .all(|w| w[1].size_bytes == w[0].size_bytes + 2_147_483_648)
    );
    assert_eq!(largest(&t), (26_843_545_600, 13.96, 13.97));
    assert_eq!(t.rows[0].out_of_place.wrong, Some(0));
    assert_eq!(t.rows[0].in_place.wrong, None);
    assert_eq!(t.avg_busbw_gbs, Some(13.9592));
}

#[test]
fn tcp_sockets_and_sriov_runs() {
    let t = one("l40s-2node-1gpu-socket-ib-disabled.txt");
    assert_eq!(t.name.as_deref(), Some("all_reduce_perf"));
    assert_eq!((t.nranks(), t.hosts().len()), (Some(2), 2));
    assert_eq!(t.rows.len(), 31);
    assert_eq!(t.rows[30].out_of_place.time_us, 1_059_765.0);
    assert_eq!(largest(&t), (8_589_934_592, 8.11, 8.12));
    assert_eq!(t.avg_busbw_gbs, Some(3.98762));
    assert_eq!(t.max_bytes_reduced_to, Some(15_534_478_677));
    let t = one("l40s-2node-2gpu-roce-sriov.txt");
    assert_eq!((t.nranks(), t.hosts().len()), (Some(4), 2));
    assert_eq!(t.params.as_ref().unwrap().gpus, 2);
    assert_eq!(largest(&t), (8_589_934_592, 9.63, 9.62));
    assert_eq!(t.avg_busbw_gbs, Some(4.74277));
}

#[test]
fn pairwise_runs_healthy_and_failed() {
    let r = load("pair-2node-1gpu-healthy.txt");
    assert_eq!(r.tests.len(), 2);
    assert_eq!(largest(&r.tests[0]), (17_179_869_184, 13.51, 13.60));
    assert_eq!(largest(&r.tests[1]), (17_179_869_184, 13.59, 13.61));
    assert_eq!(r.tests[0].rows[0].in_place.wrong, None);
    let t = one("pair-2node-1gpu-network-error.txt");
    assert_eq!(t.collective, Some(Coll::AllToAll));
    assert!(t.rows.is_empty());
    assert_eq!(t.failures.len(), 7);
    assert_eq!(t.failures[0].0, 12);
    assert!(
        t.failures[0]
            .1
            .contains("remote process exited or there was a network error")
    );
}

const HEADER: &str = "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n#  Rank  0 Group  0 Pid 1 on a device  0 [0x0f] NVIDIA H100\n#  Rank  1 Group  0 Pid 2 on b device  0 [0x0f] NVIDIA H100\n#  Rank  2 Group  0 Pid 3 on c device  0 [0x0f] NVIDIA H100\n";

#[test]
fn exponent_times_and_wrong_counts() {
    let text = format!(
        "{HEADER}  8589934592  2147483648  float  sum  -1  1.0e+07  0.86  1.15  0  1.1e+07  0.78  1.04  3\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.1\n"
    );
    let r = parse(&text).unwrap();
    let row = &r.tests[0].rows[0];
    assert_eq!((row.out_of_place.time_us, row.in_place.time_us), (1.0e7, 1.1e7));
    assert_eq!(row.wrong(), 3);
    assert_eq!(r.tests[0].wrong(), 3);
}

#[test]
fn malformed_rows_name_their_line() {
    let cases = [
        (
            "      8      2   float   sum   -1   13.2   0.00   0.00   0   12.2   0.00\n",
            6,
            "11 fields where 13 were expected",
        ),
        (
            "      8      2   float   sum   -1   13.2   fast   0.00   0   12.2   0.00   0.00   0\n",
            6,
            "expected algbw in GB/s (a number) in column 7, found `fast`",
        ),
        (
            "      8      2   float   sum   x1   13.2   0.00   0.00   0   12.2   0.00   0.00   0\n",
            6,
            "expected the root rank",
        ),
        (
            "      8      2   float   sum   -1   13.2   0.00   0.00   ?   12.2   0.00   0.00   0\n",
            6,
            "expected #wrong (an unsigned integer) in column 9, found `?`",
        ),
        (
            "# Avg bus bandwidth : lots\n",
            6,
            "expected `# Avg bus bandwidth : <GB/s>`",
        ),
    ];
    for (body, line, msg) in cases {
        let e = parse(&format!("{HEADER}{body}")).unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert!(e.to_string().contains(msg), "{e}");
    }
    let e = parse("# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(lots) warmup iters: 5 iters: 20\n")
        .unwrap_err();
    assert_eq!(e.line, 1);
    assert!(e.message.contains("step"), "{e}");
}

#[test]
fn a_row_cut_short_by_a_failure_is_a_warning() {
    let text = format!(
        "{HEADER}      8      2   float   sum   -1h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0]\nh: Test NCCL failure common.cu:100 'unhandled system error'\n"
    );
    let r = parse(&text).unwrap();
    assert!(r.tests[0].rows.is_empty());
    assert_eq!(r.tests[0].failures.len(), 1);
    assert_eq!(r.warnings.len(), 1);
    assert!(r.warnings[0].1.contains("never finished"), "{:?}", r.warnings);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Fuzzing: arbitrary text, and real logs with lines dropped or garbled, never panic;
    /// every error names a line that exists.
    #[test]
    fn never_panics(text in "\\PC{0,400}") {
        if let Err(e) = parse(&text) {
            prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1));
        }
    }

    #[test]
    fn garbled_real_logs_never_panic(drop in proptest::collection::vec(0usize..421, 0..6), cut in 0usize..200, at in 0usize..421) {
        let path = format!("{}/test_data/nccl-tests/h100-2node-4gpu-hdr-ib-debug-info.txt", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<String> = text
            .lines()
            .enumerate()
            .filter(|(i, _)| !drop.contains(i))
            .map(|(i, l)| if i == at { l.chars().take(cut).collect() } else { l.to_string() })
            .collect();
        let text = lines.join("\n");
        if let Err(e) = parse(&text) {
            prop_assert!(e.line >= 1 && e.line <= lines.len());
        }
    }
}

/// What `render` writes, `parse` reads back: every field of every row, the header's
/// parameters and ranks, the average line (in nccl-tests' own widths and number forms).
#[test]
fn rendered_runs_parse_back_to_the_same_rows() {
    use xirang_collective::nccl_tests::{Measure, Params, Rank, Row, Step, render};
    let m = |t: f64, a: f64, b: f64| Measure {
        time_us: t,
        algbw_gbs: a,
        busbw_gbs: b,
        wrong: None,
    };
    let mut run = load("h100-10node-80gpu-all-collectives.txt").tests[0].clone();
    // Times of every width nccl-tests prints: 2, 1 and 0 decimals.
    run.rows = [
        (1_048_576u64, 25.41),
        (67_108_864, 12586.1),
        (1_073_741_824, 105854.0),
    ]
    .iter()
    .map(|&(size, t)| Row {
        line: 0,
        size_bytes: size,
        count: size / 4,
        dtype: "float".into(),
        redop: "sum".into(),
        root: -1,
        out_of_place: m(t, size as f64 / t / 1e3, 1.97 * size as f64 / t / 1e3),
        in_place: m(t, size as f64 / t / 1e3, 1.97 * size as f64 / t / 1e3),
    })
    .collect();
    run.params = Some(Params {
        threads: 1,
        gpus: 1,
        min_bytes: 1_048_576,
        max_bytes: 1_073_741_824,
        step: Step::Factor(2),
        warmup_iters: 1,
        iters: 2,
    });
    run.ranks.truncate(3);
    run.ranks.push(Rank {
        rank: 3,
        host: "h1".into(),
        device: 0,
        bus_id: "0000:1b:00".into(),
        gpu: Some("NVIDIA H100 80GB HBM3".into()),
    });
    run.avg_busbw_gbs = Some(12.345);
    let out = render(&run, &["simulated".to_string()]);
    let back = parse(&out).unwrap();
    assert_eq!(back.tests.len(), 1, "{out}");
    let b = &back.tests[0];
    assert_eq!(b.name, run.name);
    assert_eq!(b.params, run.params);
    assert_eq!(b.ranks, run.ranks);
    assert_eq!(b.avg_busbw_gbs, Some(12.345));
    assert_eq!(b.rows.len(), 3);
    for (x, y) in b.rows.iter().zip(&run.rows) {
        assert_eq!(
            (x.size_bytes, x.count, &x.dtype, &x.redop, x.root),
            (y.size_bytes, y.count, &y.dtype, &y.redop, y.root)
        );
        // Printed to nccl-tests' precision.
        assert!(
            (x.out_of_place.time_us - y.out_of_place.time_us).abs() <= 0.5,
            "{out}"
        );
        assert!(
            (x.out_of_place.busbw_gbs - y.out_of_place.busbw_gbs).abs() <= 0.005,
            "{out}"
        );
        assert_eq!(x.out_of_place.wrong, None);
    }
}
