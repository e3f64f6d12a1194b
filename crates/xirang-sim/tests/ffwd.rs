//! Fast-forward (`engine::ffwd`): a steady ring's skipped periods give the exact run's
//! collective time and counters within the issue's tolerances (1 % and 3 %), every
//! transfer done and the ledger balanced; runs it cannot serve say why and are the exact
//! run, byte for byte; a skip never crosses the run's end nor another collective's start.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::engine::ffwd::{FF_CONFIRM_US, FastForwardCriterion, FastForwardReport};
use xirang_sim::parallel::simulate_threads;
use xirang_sim::{RunResult, options, simulate};

fn load_text(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("test.toml"))
        .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A rail-optimized fabric of `hosts` hosts of 8 GPUs and 8 NICs at 400 Gbit/s, and a
/// ring AllReduce of `mib` MiB on `channels` channels, then `extra` (more workloads,
/// `[run]` keys).
fn ring(hosts: u32, mib: u64, channels: u32, proto: &str, extra: &str) -> String {
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

[workloads.ar.collective]
op = "all_reduce"
algorithm = "ring"
protocol = "{proto}"
bytes = {bytes}
channels = {channels}
class = "training"
{extra}
"#,
        bytes = mib << 20
    )
}

/// Options with transfer records off (a fast-forward does not make them up) and, when
/// `window_us` is set, fast-forward by (5 %, that window).
fn run(l: &Loaded, window_us: Option<u32>) -> RunResult {
    let mut opts = options(l);
    opts.transfer_records = 0;
    opts.fast_forward = window_us.map(|w| FastForwardCriterion {
        theta: 0.05,
        window: Some(w),
        ..FastForwardCriterion::default()
    });
    simulate(l, &opts, &mut |_| {})
}

fn ff(r: &RunResult) -> &FastForwardReport {
    r.engine.fast_forward.as_ref().expect("asked for")
}

/// Every counter's total over the ports, by name.
fn counter_totals(r: &RunResult) -> BTreeMap<String, u64> {
    let mut t = BTreeMap::new();
    for c in &r.counters {
        *t.entry(c.name.clone()).or_default() += c.value;
    }
    t
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (b - a).abs() / a.abs().max(1e-9)
    }
}

/// The issue's matrix tolerances: collective times within 1 %, counters within 3 %,
/// every transfer done, conservation kept.
fn assert_close(exact: &RunResult, fast: &RunResult, what: &str) {
    assert_eq!(exact.collectives.len(), fast.collectives.len());
    for (a, b) in exact.collectives.iter().zip(&fast.collectives) {
        assert!(b.finished, "{what}: every transfer arrives");
        assert_eq!(a.transfers_arrived, b.transfers_arrived, "{what}");
        let (ta, tb) = (a.time_ps.expect("done") as f64, b.time_ps.expect("done") as f64);
        assert!(
            rel(ta, tb) < 0.01,
            "{what}: collective {ta} ps exact, {tb} ps fast-forwarded"
        );
    }
    fast.check_conservation()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_counters_within(exact, fast, 0.03, what);
}

// Levels (`xirang_sim::counters::LEVELS`) are not judged, as in the matrix: a skip
// sees no peak of the time it skips. The random ring of 11 hosts, 34 MiB, 4 channels,
// LL, two iterations (in ffwd.proptest-regressions) peaked 3.9 % higher in a queue
// during skipped time.

/// Every counter's total over the ports within `tol` (a share) of the exact run's, but
/// for the levels.
fn assert_counters_within(exact: &RunResult, fast: &RunResult, tol: f64, what: &str) {
    let (ca, cb) = (counter_totals(exact), counter_totals(fast));
    for (name, &a) in ca
        .iter()
        .filter(|(n, _)| !xirang_sim::counters::LEVELS.contains(&n.as_str()))
    {
        let b = cb.get(name).copied().unwrap_or(0);
        // Counters of a few events are not rates: ±3 % of ten is not a count.
        if a.max(b) >= 1000 {
            assert!(
                rel(a as f64, b as f64) < tol,
                "{what}: {name} {a} exact, {b} fast-forwarded"
            );
        }
    }
}

/// A 256-GPU ring AllReduce of 64 MiB (LL128, 4 channels) is steady for most of its
/// reduce-scatter and all-gather phases: the run skips most of them, and its collective
/// time and counters are the exact run's within the matrix's tolerances.
#[test]
fn a_steady_ring_skips_and_matches_the_exact_run() {
    let l = load_text(&ring(32, 64, 4, "ll128", ""));
    let exact = run(&l, None);
    assert!(exact.engine.fast_forward.is_none());
    let fast = run(&l, Some(300));
    let f = ff(&fast);
    assert_eq!(f.off, None);
    assert!(f.skips >= 1, "{f:?}");
    assert!(f.skipped_share > 0.5, "{f:?}");
    assert!(fast.stats.events < exact.stats.events);
    assert_close(&exact, &fast, "256 GPUs");
    // The same run again: the same bytes.
    let again = run(&l, Some(300));
    assert_eq!(fast.counters_csv(), again.counters_csv());
    assert_eq!(
        serde_json::to_string(&fast.summary()).unwrap(),
        serde_json::to_string(&again.summary()).unwrap()
    );
    assert_eq!(ff(&again), f);
}

/// Runs fast-forward cannot serve say why, and are the exact run byte for byte:
/// transfer records, a tree.
#[test]
fn runs_it_cannot_serve_say_why_and_run_exactly() {
    let text = ring(4, 8, 2, "ll128", "");
    let tree = text.replace("algorithm = \"ring\"", "algorithm = \"tree\"");
    for (text, records, why) in [
        (&text, 100_000, "transfers are recorded"),
        (&tree, 0, "no collective's program has runs of equal steps"),
    ] {
        let l = load_text(text);
        let mut opts = options(&l);
        opts.transfer_records = records;
        let exact = simulate(&l, &opts, &mut |_| {});
        opts.fast_forward = Some(FastForwardCriterion {
            theta: 0.05,
            window: Some(300),
            ..FastForwardCriterion::default()
        });
        let fast = simulate(&l, &opts, &mut |_| {});
        let f = ff(&fast);
        assert!(f.off.as_deref().is_some_and(|o| o.contains(why)), "{why}: {f:?}");
        assert_eq!(f.checks, 0);
        assert_eq!(exact.counters_csv(), fast.counters_csv(), "{why}");
        assert_eq!(exact.flows_json(), fast.flows_json(), "{why}");
        assert_eq!(
            serde_json::to_string(&exact.summary()).unwrap(),
            serde_json::to_string(&fast.summary()).unwrap(),
            "{why}"
        );
    }
}

/// Every output a run writes, by file name, and its fast-forward report.
fn outputs(r: &RunResult) -> Vec<(&'static str, String)> {
    vec![
        ("fct.txt", r.fct_hpcc()),
        ("pfc.txt", r.pfc_hpcc(0)),
        ("flows.json", r.flows_json()),
        ("counters.csv", r.counters_csv()),
        ("rates.csv", r.rates_csv()),
        ("counter_series.csv", r.counter_series_csv()),
        ("queues.csv", r.queues_csv()),
        (
            "summary.json",
            serde_json::to_string_pretty(&r.summary()).unwrap(),
        ),
        ("fast_forward", format!("{:?}", r.engine.fast_forward)),
        ("events", r.stats.events.to_string()),
    ]
}

/// `l` fast-forwarded (5 %, `window_us`) serially and on 2 to 4 partitions and threads:
/// every output and the fast-forward's report byte for byte the serial run's (the
/// partitions' surveys combine exactly, so they decide every skip as the serial run).
fn same_on_partitions(l: &Loaded, window_us: u32, what: &str) -> RunResult {
    let mut opts = options(l);
    opts.transfer_records = 0;
    opts.fast_forward = Some(FastForwardCriterion {
        theta: 0.05,
        window: Some(window_us),
        ..FastForwardCriterion::default()
    });
    let serial = simulate(l, &opts, &mut |_| {});
    for parts in 2..=4 {
        let (par, report) = simulate_threads(l, &opts, parts, parts, &mut |_| {});
        assert!(report.plan.parts() > 1, "{what}: divided");
        par.check_conservation()
            .unwrap_or_else(|e| panic!("{what}, {parts} partitions: {e}"));
        for ((name, a), (_, b)) in outputs(&serial).into_iter().zip(outputs(&par)) {
            if a != b {
                let line = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(0);
                panic!(
                    "{what}: {name} differs on {parts} partitions at line {}:\nserial:   {}\nparallel: {}",
                    line + 1,
                    a.lines().nth(line).unwrap_or("<end>"),
                    b.lines().nth(line).unwrap_or("<end>"),
                );
            }
        }
    }
    serial
}

/// A divided run fast-forwards as the serial run does: the same skips at the same
/// times, every output byte for byte, on 2, 3 and 4 partitions and threads.
/// `ring`'s fabric in groups of `per_group` hosts under leaves of their own, joined by
/// `spines` spines: a fabric whose hosts a parallel run divides.
fn grouped(text: &str, per_group: u32, spines: u32) -> String {
    let at = "link_delay_ns = 500\n";
    assert!(text.contains(at));
    text.replacen(
        at,
        &format!("{at}hosts_per_group = {per_group}\nspines = {spines}\n"),
        1,
    )
}

#[test]
fn fast_forward_is_identical_on_1_to_4_threads() {
    let l = load_text(&grouped(&ring(16, 32, 4, "ll128", ""), 4, 4));
    let serial = same_on_partitions(&l, 300, "128 GPUs");
    let f = ff(&serial);
    assert!(f.skips >= 1 && f.skipped_share > 0.3, "{f:?}");
    // Flows as interrupts: the skips stop short of their starts, which a divided run
    // queues again where the flow's sender runs, and the next window sees them.
    let t = run(&l, None).collectives[0].time_ps.expect("done");
    let start_us = t * 3 / 5 / 1_000_000;
    let flows = format!(
        "[workloads.rpc.flows]\nlist = [\n  {{ id = \"a\", src = \"h1\", dst = \"h9\", bytes = 2_000_000, start_us = {start_us} }},\n  {{ id = \"b\", src = \"h9\", dst = \"h14\", bytes = 1_000_000, start_us = {later}, after = [\"a\"] }},\n]\n",
        later = start_us + 150
    );
    let l = load_text(&grouped(&ring(16, 32, 4, "ll128", &flows), 4, 4));
    let serial = same_on_partitions(&l, 300, "128 GPUs and two flows");
    let f = ff(&serial);
    assert!(
        f.skips >= 1 && f.not_skipped.contains_key("a flow is under way"),
        "{f:?}"
    );
    // Whole-loop skips, too.
    let l = load_text(&grouped(&ring(8, 64, 2, "ll", ""), 2, 2));
    let serial = same_on_partitions(&l, 300, "16 loops");
    assert!(ff(&serial).loop_skips > 0, "{:?}", ff(&serial));
    // Skips from the memo: every partition holds the same entries (its own ports'
    // counters in them) and makes the same hits.
    let l = load_text(&grouped(&ring(16, 32, 4, "ll128", "iterations = 3\n"), 4, 4));
    let serial = same_on_partitions(&l, 300, "three iterations");
    let m = ff(&serial).memo.clone().expect("on");
    assert!(m.hits > 0, "{m:?}");
    // Faults as interrupts: each partition queues again the fault events of its own
    // devices (a skip before the fault moved its start and end), and every partition
    // resets alike at them.
    let late = t * 4 / 5 / 1_000_000;
    let fault = format!(
        "[run]\nsample_interval_us = 10\n[[faults]]\nkind = \"slow_link\"\ntarget = \"h0/mlx5_0\"\nrate_gbps = 200\nstart_us = {late}\nend_us = {}\n",
        late + 100
    );
    let l = load_text(&grouped(&ring(16, 32, 4, "ll128", &fault), 4, 4));
    let serial = same_on_partitions(&l, 300, "a slow link");
    assert!(ff(&serial).fault_times_moved >= 2, "{:?}", ff(&serial));
    assert_eq!(
        rate_changes(&serial),
        rate_changes(&run(&l, None)),
        "the link's rate changes at its times"
    );
    // Samples made up in skipped time: each partition makes up its own QPs' and ports'.
    let l = load_text(&grouped(
        &ring(16, 32, 4, "ll128", "[run]\nsample_interval_us = 25\n"),
        4,
        4,
    ));
    let serial = same_on_partitions(&l, 300, "sampled");
    assert!(ff(&serial).samples_made_up > 0 && !serial.rate_series.is_empty());
}

/// A skip never crosses an event that changes what the fabric carries: the run's end
/// time (the run stops at it exactly, as the exact run does), and a second collective
/// that starts while the first is steady (no skip until it has started; both match the
/// exact run).
#[test]
fn a_skip_never_crosses_the_end_nor_a_later_start() {
    let l = load_text(&ring(32, 64, 4, "ll128", ""));
    let full = run(&l, None);
    let t = full.collectives[0].time_ps.expect("done");
    // End in the middle of the all-gather phase, where the exact run is steady.
    let end = t * 3 / 4 / 1_000_000 * 1_000_000;
    let mut opts = options(&l);
    opts.transfer_records = 0;
    opts.end = Some(end);
    let exact = simulate(&l, &opts, &mut |_| {});
    opts.fast_forward = Some(FastForwardCriterion {
        theta: 0.05,
        window: Some(300),
        ..FastForwardCriterion::default()
    });
    let fast = simulate(&l, &opts, &mut |_| {});
    assert!(ff(&fast).skips > 0, "{:?}", ff(&fast));
    assert_eq!(exact.stats.sim_time_ps, end);
    assert_eq!(
        fast.stats.sim_time_ps, end,
        "the run stops at its end time, skips or not"
    );
    assert!(!fast.collectives[0].finished);
    let (a, b) = (
        exact.collectives[0].transfers_arrived,
        fast.collectives[0].transfers_arrived,
    );
    assert!(
        rel(a as f64, b as f64) < 0.01,
        "transfers done by the end: {a} exact, {b} fast"
    );

    // A second collective starting a third of the way in: the first's skip waits for it.
    let start_us = t / 3 / 1_000_000;
    let second = format!(
        "[workloads.ar2.collective]\nop = \"all_reduce\"\nalgorithm = \"ring\"\nprotocol = \"ll128\"\nbytes = 8_388_608\nchannels = 4\nclass = \"training\"\nstart_us = {start_us}\n"
    );
    let l = load_text(&ring(32, 64, 4, "ll128", &second));
    let exact = run(&l, None);
    let fast = run(&l, Some(300));
    let f = ff(&fast);
    assert!(f.not_skipped.contains_key("a collective starts later"), "{f:?}");
    assert_close(&exact, &fast, "two collectives");
}

/// Fast-forward when nobody asks (`xirang_sim::options` on a scenario without
/// `[run] fast_forward`): on for a ring AllReduce, which skips; off for a ring AllGather,
/// saying it is on by default for AllReduce only, unless the scenario asks; off for a
/// tree AllReduce from the start, saying why; absent with `fast_forward = false`.
#[test]
fn fast_forward_is_on_by_default_for_allreduce_only() {
    let with = |op: &str, alg: &str, key: &str| {
        let text = ring(
            32,
            64,
            4,
            "ll128",
            &format!("\n[run]\ntransfer_records = 0\n{key}"),
        )
        .replace("op = \"all_reduce\"", &format!("op = \"{op}\""))
        .replace("algorithm = \"ring\"", &format!("algorithm = \"{alg}\""));
        let l = load_text(&text);
        simulate(&l, &options(&l), &mut |_| {})
    };
    let r = with("all_reduce", "ring", "");
    let f = ff(&r);
    assert!(f.by_default && f.off.is_none() && f.skips > 0, "{f:?}");
    let r = with("all_gather", "ring", "");
    let f = ff(&r);
    assert!(f.by_default, "{f:?}");
    assert!(
        f.off.as_deref().is_some_and(|o| o.contains("AllReduce only")),
        "{f:?}"
    );
    let r = with("all_gather", "ring", "fast_forward = true\n");
    let f = ff(&r);
    assert!(!f.by_default && f.off.is_none() && f.checks > 0, "{f:?}");
    let r = with("all_reduce", "tree", "");
    let f = ff(&r);
    assert!(
        f.off
            .as_deref()
            .is_some_and(|o| o.contains("no collective's program")),
        "{f:?}"
    );
    assert_eq!(f.checks, 0);
    let r = with("all_reduce", "ring", "fast_forward = false\n");
    assert!(r.engine.fast_forward.is_none());
}

/// A flow that starts while the ring is steady changes what the fabric carries: no skip
/// crosses its start, and none is made while it runs. It starts at its time, as in the
/// exact run (a skip that crossed the start would start it late, or queue it in the
/// engine's past, which the engine asserts), its completion time and the ring's are the
/// exact run's within the tolerances, and no skip extrapolates counters from a window the
/// flow ran in (its priority's counters are the exact run's to the byte). A second flow
/// waits for the first and for its own earliest start (queued when the first arrives:
/// its earliest start, in reported time, goes to the engine's clock) and starts as in
/// the exact run too.
#[test]
fn a_skip_never_crosses_a_flow_start() {
    let l = load_text(&ring(32, 64, 4, "ll128", ""));
    let t = run(&l, None).collectives[0].time_ps.expect("done");
    // In the all-gather phase, where the ring is steady and skips; on a priority of their
    // own, so that their counters are theirs alone.
    let start_us = t * 3 / 5 / 1_000_000;
    let flows = format!(
        "[config.classes.training]\npriority = 3\ncc = \"dcqcn\"\n\n[config.classes.rpc]\npriority = 1\ncc = \"dcqcn\"\n\n[workloads.rpc.flows]\nclass = \"rpc\"\nlist = [\n  {{ id = \"a\", src = \"h0\", dst = \"h17\", bytes = 2_000_000, start_us = {start_us} }},\n  {{ id = \"b\", src = \"h17\", dst = \"h3\", bytes = 2_000_000, start_us = {later}, after = [\"a\"] }},\n]\n",
        later = start_us + 200
    );
    let l = load_text(&ring(32, 64, 4, "ll128", &flows));
    let exact = run(&l, None);
    let fast = run(&l, Some(300));
    let f = ff(&fast);
    assert_eq!(f.off, None, "{f:?}");
    assert!(f.skips >= 1, "{f:?}");
    assert!(f.not_skipped.contains_key("a flow is under way"), "{f:?}");
    assert_close(&exact, &fast, "a ring and two flows");
    // No skip extrapolated a window the flows ran in: their priority's counts are the
    // exact run's to the byte.
    let (ca, cb) = (counter_totals(&exact), counter_totals(&fast));
    let prio1: Vec<_> = ca.keys().filter(|k| k.contains("prio1_")).collect();
    assert!(!prio1.is_empty() && ca[prio1[0]] > 0, "{ca:?}");
    for k in prio1 {
        assert_eq!(ca[k], cb.get(k).copied().unwrap_or(0), "{k}");
    }
    let flow = |r: &RunResult, w: &str| {
        r.flows
            .iter()
            .filter(|x| x.workload == w)
            .map(|x| (x.start_ps, x.fct_ps.expect("finished")))
            .collect::<Vec<_>>()
    };
    let (a, b) = (flow(&exact, "rpc"), flow(&fast, "rpc"));
    assert_eq!(a.len(), 2);
    assert_eq!(a[0].0, start_us * 1_000_000, "the first flow starts at its time");
    assert_eq!(a[0].0, b[0].0, "the first flow starts as in the exact run");
    for ((sa, fa), (sb, fb)) in a.iter().zip(&b) {
        assert!(
            rel(*sa as f64, *sb as f64) < 0.001,
            "starts {sa} exact, {sb} fast-forwarded"
        );
        assert!(
            rel(*fa as f64, *fb as f64) < 0.03,
            "completion times {fa} exact, {fb} fast-forwarded"
        );
    }
}

/// A ring of many loops (LL, 64 GPUs, 64 MiB on 2 channels: 16 loops a channel) skips by
/// whole loops, and a skip cut short by the end time never crosses it, wherever the end
/// falls (the engine asserts it in debug builds; the run stops exactly at the end).
#[test]
fn whole_loop_skips_stop_short_of_the_end() {
    let l = load_text(&ring(8, 64, 2, "ll", ""));
    let exact = run(&l, None);
    let fast = run(&l, Some(300));
    let f = ff(&fast);
    assert!(f.loop_skips > 0, "{f:?}");
    assert_close(&exact, &fast, "16 loops");
    let t = exact.collectives[0].time_ps.expect("done");
    for twentieth in 4..20 {
        let end = t * twentieth / 20;
        let mut opts = options(&l);
        opts.transfer_records = 0;
        opts.end = Some(end);
        opts.fast_forward = Some(FastForwardCriterion {
            theta: 0.05,
            window: Some(300),
            ..FastForwardCriterion::default()
        });
        let r = simulate(&l, &opts, &mut |_| {});
        assert_eq!(r.stats.sim_time_ps, end, "end at {twentieth}/20");
        assert!(!r.collectives[0].finished, "end at {twentieth}/20");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Fast-forward against exact on random rings: hosts, bytes, channels, protocol,
    /// window and iterations (whose later phases the memo serves); within the matrix's
    /// tolerances, every transfer done, conservation kept.
    #[test]
    fn fast_forward_matches_exact_on_random_rings(
        hosts in 4u32..17,
        mib in 8u64..48,
        channels in 1u32..5,
        proto in prop_oneof![Just("ll"), Just("ll128"), Just("simple")],
        window in prop_oneof![Just(300u32), Just(400), Just(500)],
        iterations in 1u32..3,
    ) {
        let extra = format!("iterations = {iterations}\n");
        let l = load_text(&ring(hosts, mib, channels, proto, &extra));
        let exact = run(&l, None);
        let fast = run(&l, Some(window));
        let what = format!(
            "{hosts} hosts, {mib} MiB, {channels} ch, {proto}, l {window}, {iterations} iterations"
        );
        assert_close(&exact, &fast, &what);
    }

    /// Fast-forward on random rings of hosts in pairs under leaves of their own (so a
    /// parallel run divides the hosts), on 2 to 4 partitions: the serial run's outputs and
    /// skips, byte for byte.
    #[test]
    fn fast_forward_is_identical_on_partitions_of_random_rings(
        pairs in 2u32..7,
        mib in 8u64..32,
        channels in 1u32..4,
        proto in prop_oneof![Just("ll"), Just("ll128"), Just("simple")],
        iterations in 1u32..3,
    ) {
        let hosts = 2 * pairs;
        let text = ring(hosts, mib, channels, proto, &format!("iterations = {iterations}\n"));
        let l = load_text(&grouped(&text, 2, 2));
        let what = format!("{hosts} hosts, {mib} MiB, {channels} ch, {proto}, {iterations} iterations");
        same_on_partitions(&l, 300, &what);
    }
}

/// The memo of steady states (the issue's memoized transients, `engine::ffwd`): a ring
/// AllReduce of three iterations measures its steady state over the full window at its
/// first skip, and every later phase of the same shape (its all-gather, the next
/// iterations) skips on the memo's entry once it has held again for the confirmation,
/// instead of waiting for a new window. It skips more than without the memo, within the
/// matrix's tolerances, at every confirmation from 20 to 100 µs (the sensitivity of
/// `FF_CONFIRM_US`; docs/fast-forward.md has the same on 1,024 GPUs); the report counts the hits
/// and says the key and the rule.
#[test]
fn the_memo_skips_again_on_a_steady_state_seen_before() {
    let l = load_text(&ring(16, 32, 4, "ll128", "iterations = 3\n"));
    let exact = run(&l, None);
    let with = |confirm_us: Option<u32>| {
        let mut opts = options(&l);
        opts.transfer_records = 0;
        opts.fast_forward = Some(FastForwardCriterion {
            theta: 0.05,
            window: Some(300),
            memo_confirm: confirm_us,
            ..FastForwardCriterion::default()
        });
        simulate(&l, &opts, &mut |_| {})
    };
    let without = with(None);
    let f0 = ff(&without);
    assert!(f0.memo.is_none() && f0.skips >= 1, "{f0:?}");
    assert_close(&exact, &without, "no memo");
    for us in [20, FF_CONFIRM_US, 100] {
        let fast = with(Some(us));
        let f = ff(&fast);
        let m = f.memo.as_ref().expect("on");
        assert!(m.entries >= 1 && m.hits >= 2, "{us} us: {m:?}");
        assert_eq!(m.hits + m.misses, f.skips, "every skip is one or the other");
        assert!(
            m.hit_rate > 0.0 && m.hit_rate < 1.0,
            "the first skip measures: {m:?}"
        );
        assert!(m.rule.contains(&format!("{us} us")) && m.key.contains("of a chunk"));
        assert!(
            f.skipped_share > f0.skipped_share + 0.1,
            "{us} us: {} skipped with the memo, {} without",
            f.skipped_share,
            f0.skipped_share
        );
        assert!(fast.stats.events < without.stats.events);
        assert_close(&exact, &fast, &format!("memo, {us} us"));
    }
}

/// A skip never takes the time per slice of one shape of work for another's: when a
/// ring's last loop is rebalanced (shorter chunks, shorter slices), the slices in flight
/// as the threads move on are the old loop's, and the time per slice measured on them is
/// not the new loop's. Found by the property test above: before the rule (every
/// connection receives a period of the new shape's slices before a skip), this 88-GPU
/// ring was 7.1 % off the exact collective time, its counters 9.7 %.
#[test]
fn a_skip_never_takes_one_shape_for_another() {
    // The second: two iterations, where a skip from the memo came just after the shape
    // changed (10.9 % off before the rule).
    for (hosts, mib, channels, proto, extra, window) in [
        (11, 34, 3, "ll", "", 500),
        (8, 41, 1, "ll128", "iterations = 2\n", 400),
    ] {
        shape_case(&ring(hosts, mib, channels, proto, extra), window);
    }
}

fn shape_case(text: &str, window: u32) {
    let l = load_text(text);
    let exact = run(&l, None);
    for memo in [None, Some(FF_CONFIRM_US)] {
        let mut opts = options(&l);
        opts.transfer_records = 0;
        opts.fast_forward = Some(FastForwardCriterion {
            theta: 0.05,
            window: Some(window),
            memo_confirm: memo,
            ..FastForwardCriterion::default()
        });
        let fast = simulate(&l, &opts, &mut |_| {});
        let f = ff(&fast);
        assert!(f.skips >= 1, "{f:?}");
        // Every run's first check sees a shape for the first time; the rebalanced last
        // loop is a second.
        let reshaped: u64 = f
            .not_skipped
            .iter()
            .filter(|(k, _)| k.contains("changed shape"))
            .map(|(_, n)| n)
            .sum();
        assert!(reshaped >= 2, "{f:?}");
        assert_close(&exact, &fast, &format!("rebalanced last loop, memo {memo:?}"));
    }
}

/// The counters' window of a skip is cut to slices carried, not slices handed to the QPs
/// (`Sim::ff_carried`). Found by `fast_forward_matches_exact_on_random_rings` on
/// 2026-12-07: on this 88-GPU ring (one channel, LL128's large slices, 16 a connection in
/// the window) the window began with 11 slices in flight and ended with none, so its
/// counters per slice handed were 6 % high, and the memo took them into the later phases:
/// every traffic counter was +3.4 % (one iteration) and +3.6 to +4.0 % (two) above the
/// exact run's, the collective time exact. Counted by the NICs' payload they are within
/// 0.7 %; the bound here is 1 %, a third of the matrix's tolerance.
#[test]
fn the_memo_counts_counters_per_slice_carried_on_an_88_gpu_ring() {
    for iterations in [1, 2] {
        let what = format!("11 hosts, 33 MiB, 1 ch, ll128, l 400, {iterations} iteration(s)");
        let l = load_text(&ring(11, 33, 1, "ll128", &format!("iterations = {iterations}\n")));
        let exact = run(&l, None);
        let fast = run(&l, Some(400));
        assert!(ff(&fast).memo.as_ref().expect("on").hits >= 1, "{what}");
        assert_close(&exact, &fast, &what);
        assert_counters_within(&exact, &fast, 0.01, &what);
    }
}

/// Each counter's total over the ports at each sample time (a sample lists only the
/// counters that changed; the others keep their last value).
fn sampled_totals(r: &RunResult) -> BTreeMap<String, BTreeMap<u64, u64>> {
    let mut last: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut out: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
    let mut i = 0;
    let s = &r.counter_series;
    while i < s.len() {
        let t = s[i].0;
        while i < s.len() && s[i].0 == t {
            let c = &s[i].1;
            last.insert((c.entity.as_str(), c.name.as_str()), c.value);
            i += 1;
        }
        for (&(_, name), &v) in &last {
            *out.entry(name.to_string()).or_default().entry(t).or_default() += v;
        }
    }
    out
}

/// Every QP's rate summed, and the transfers named, at each sample time.
fn sampled_rates(r: &RunResult) -> BTreeMap<u64, (f64, std::collections::BTreeSet<u64>)> {
    let mut out: BTreeMap<u64, (f64, std::collections::BTreeSet<u64>)> = BTreeMap::new();
    for &(t, id, _, rate) in &r.rate_series {
        let e = out.entry(t).or_default();
        e.0 += rate;
        e.1.insert(id);
    }
    out
}

/// Samples that fall in skipped time are made up from the steady state: rates at every
/// sample time the exact run has them, summed within 3 % of its, and the same transfers
/// named but for a few; every counter's total over the ports at each sample time within
/// the matrix's 3 % of the exact run's (0.82 % here at most).
#[test]
fn samples_in_skipped_time_are_made_up_from_the_steady_state() {
    let l = load_text(&ring(32, 64, 4, "ll128", "[run]\nsample_interval_us = 50\n"));
    let exact = run(&l, None);
    let fast = run(&l, Some(300));
    let f = ff(&fast);
    assert!(f.skipped_share > 0.5 && f.samples_made_up > 0, "{f:?}");
    assert_close(&exact, &fast, "256 GPUs, sampled");
    let (te, tf) = (sampled_totals(&exact), sampled_totals(&fast));
    let mut worst = (0.0, String::new());
    for (name, e) in &te {
        let fs = tf.get(name).unwrap_or_else(|| panic!("{name} sampled"));
        for (t, &a) in e {
            let Some(&b) = fs.get(t) else { continue };
            if a.max(b) >= 1000 && rel(a as f64, b as f64) > worst.0 {
                worst = (
                    rel(a as f64, b as f64),
                    format!("{name} at {t} ps: {a} exact, {b} fast"),
                );
            }
        }
    }
    assert!(worst.0 < 0.03, "{}", worst.1);
    // The sample times: every one at which the exact run saw a QP sending has rates
    // (a steady pipeline's QPs send in step, so the exact run at an instant sees all of
    // them or none; a made-up sample takes them all as sending).
    let (re, rf) = (sampled_rates(&exact), sampled_rates(&fast));
    let (mut named, mut near, mut both) = (0, 0, 0);
    for (t, (a, ids)) in &re {
        let (b, fids) = rf.get(t).unwrap_or_else(|| panic!("rates sampled at {t} ps"));
        assert!(rel(*a, *b) < 0.03, "rates summed at {t} ps: {a} exact, {b} fast");
        named += ids.intersection(fids).count();
        near += ids
            .iter()
            .filter(|&&i| fids.contains(&i) || fids.contains(&(i + 1)) || fids.contains(&(i.wrapping_sub(1))))
            .count();
        both += ids.len();
    }
    assert!(rf.len() > re.len() / 2 && f.samples_made_up as usize > re.len() / 2);
    // A made-up sample names the transfer a QP sends from the pipeline's phase and pace
    // (`sampling::MadeUp`): 88 % of the exact run's names here (26 % if the names stayed
    // where the skip began), and all but a few to within one transfer (a pace a slice
    // off over the skip).
    assert!(
        named * 20 >= both * 17,
        "{named} of {both} transfers named as the exact run"
    );
    assert!(
        near * 100 >= both * 99,
        "{near} of {both} transfers named to within one"
    );
}

/// When each port's `rate` level changed to what, in the sampled counters: the times a
/// link trained down and back.
fn rate_changes(r: &RunResult) -> Vec<(u64, String, u64)> {
    r.counter_series
        .iter()
        .filter(|(_, c)| c.name == "rate")
        .map(|(t, c)| (*t, c.entity.clone(), c.value))
        .collect()
}

/// Faults are interrupts: a skip stops short of a fault's start and end, which come at
/// their times, and the run skips again once the fabric is steady after each; the
/// collective and counters stay within the matrix's tolerances. A fault that corrupts
/// packets at random stops skipping while it is in force.
#[test]
fn a_skip_never_crosses_a_fault() {
    let fault = |kind: &str, target: &str, from: u64, to: u64| {
        let rate = if kind == "slow_link" {
            "rate_gbps = 200\n"
        } else {
            ""
        };
        format!(
            "[[faults]]\nkind = \"{kind}\"\ntarget = \"{target}\"\n{rate}start_us = {from}\nend_us = {to}\n"
        )
    };
    let sampled = "[run]\nsample_interval_us = 10\n";
    // ECN off on a port where nothing marks: the fabric carries the same, so the ring
    // skips before the fault's start and again after its end (71.5 % without it).
    let l = load_text(&ring(32, 64, 4, "ll128", &fault("ecn_off", "leaf0:0", 700, 900)));
    let (exact, fast) = (run(&l, None), run(&l, Some(300)));
    let f = ff(&fast);
    assert_eq!(f.off, None, "{f:?}");
    assert!(f.skips >= 2 && f.skipped_share > 0.5, "{f:?}");
    assert_close(&exact, &fast, "ECN off from 700 to 900 us");
    // A link trained down from 1,200 to 1,300 µs: its rate changes at the exact run's
    // sample times in the fast-forwarded run too, so neither change was skipped over.
    let l = load_text(&ring(
        32,
        64,
        4,
        "ll128",
        &format!("{sampled}{}", fault("slow_link", "h0/mlx5_0", 1200, 1300)),
    ));
    let (exact, fast) = (run(&l, None), run(&l, Some(300)));
    assert!(
        ff(&fast).skips >= 1 && ff(&fast).skipped_share > 0.2,
        "{:?}",
        ff(&fast)
    );
    assert_close(&exact, &fast, "a link slow from 1,200 to 1,300 us");
    let changes = rate_changes(&exact);
    assert!(
        changes.iter().any(|c| c.0 == 1_200_000_000 && c.2 == 200_000)
            && changes.iter().any(|c| c.0 == 1_300_000_000 && c.2 == 400_000),
        "{changes:?}"
    );
    assert_eq!(changes, rate_changes(&fast));
    // A link slow for the whole run is a steady state like any other.
    let l = load_text(&ring(
        32,
        64,
        4,
        "ll128",
        &fault("slow_link", "h0/mlx5_0", 0, 1_000_000),
    ));
    let (exact, fast) = (run(&l, None), run(&l, Some(300)));
    assert!(ff(&fast).skips >= 1, "{:?}", ff(&fast));
    assert_close(&exact, &fast, "a link slow throughout");
    // Random corruption: no skip while it is in force (from 600 us on), the time before
    // it skipped; the run is the exact run's within the tolerances (its draws fall on
    // other packets after a skip: the few losses are not the same ones).
    let errors =
        "[[faults]]\nkind = \"link_errors\"\ntarget = \"h0/mlx5_0\"\nloss = 0.0001\nstart_us = 600\n";
    let l = load_text(&ring(32, 64, 4, "ll128", errors));
    let (exact, fast) = (run(&l, None), run(&l, Some(300)));
    let f = ff(&fast);
    assert!(
        f.skips >= 1
            && f.not_skipped
                .contains_key("a fault corrupts packets at random (link_errors)"),
        "{f:?}"
    );
    assert_close(&exact, &fast, "link errors from 600 us");
}
