//! Collectives in the simulator, checked against the analytic cost model.

use std::path::Path;

use xirang_collective::cost::{Algo, Coll, Platform, Proto, predict};
use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;
use xirang_sim::{RunResult, options, simulate};

fn load_text(text: &str) -> Loaded {
    Scenario::parse(text, Path::new("test.toml"))
        .and_then(|s| s.build(Path::new("test.toml"), Path::new("."), Some(text)))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn run(loaded: &Loaded) -> RunResult {
    let r = simulate(loaded, &options(loaded), &mut |_| {});
    r.check_conservation()
        .unwrap_or_else(|e| panic!("conservation: {e}"));
    r
}

/// Four hosts of four GPUs and four 100 Gbit/s NICs on four rails, non-blocking.
fn rail_fabric(op: &str, algorithm: &str, bytes: u64, channels: u32) -> String {
    format!(
        r#"
[topology.rail_optimized]
hosts = 4
spines = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 500

[topology.rail_optimized.host]
gpus = 4
nics = 4

[workloads.ar.collective]
op = "{op}"
algorithm = "{algorithm}"
bytes = {bytes}
channels = {channels}
"#
    )
}

/// Acceptance 2 of the collectives issue: the simulated ring AllReduce on an uncongested
/// rail-optimized fabric reaches a bus bandwidth within 10% of the cost model's at 256 MB,
/// and both are below the NICs' line rate.
#[test]
fn ring_allreduce_matches_the_cost_model_at_256mb() {
    const BYTES: u64 = 256 << 20;
    let l = load_text(&rail_fabric("all_reduce", "ring", BYTES, 4));
    let r = run(&l);
    let s = r.summary();
    let c = &s.collectives[0];
    assert!(c.finished, "{c:?}");
    assert_eq!(c.ranks, 16);
    let sim_busbw = c.busbw_gbs.unwrap();

    let platform = Platform::of_fabric(&l.fabric, &l.scenario.config, &[], 4).unwrap();
    assert_eq!((platform.nodes, platform.gpus_per_node), (4, 4));
    let model = predict(Coll::AllReduce, Algo::Ring, Proto::Simple, BYTES, &platform).unwrap();
    let ratio = sim_busbw / model.busbw_gbs;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "simulated {sim_busbw:.2} GB/s vs model {:.2} GB/s",
        model.busbw_gbs
    );

    // Four 100 Gbit/s NICs per host: 50 GB/s of line rate per direction.
    let line_rate_gbs = 4.0 * 100.0 / 8.0;
    assert!(sim_busbw < line_rate_gbs && model.busbw_gbs < line_rate_gbs);
    // Rail-aligned rings keep the spines idle and nothing is dropped or paused.
    assert_eq!(s.drops, 0);
    assert_eq!(s.pfc_frames, 0, "an uncongested ring should not pause");
}

/// Every other schedule completes in the simulator at a plausible bandwidth.
#[test]
fn every_schedule_runs_to_completion() {
    for (op, algorithm) in [
        ("all_reduce", "tree"),
        ("all_reduce", "halving_doubling"),
        ("all_reduce", "hierarchical"),
        ("all_gather", "ring"),
        ("reduce_scatter", "ring"),
        ("broadcast", "ring"),
        ("all_to_all", "ring"),
    ] {
        let l = load_text(&rail_fabric(op, algorithm, 4 << 20, 2));
        let r = run(&l);
        let s = r.summary();
        let c = &s.collectives[0];
        assert!(c.finished, "{op}/{algorithm}: {c:?}");
        // Bus bandwidth can exceed the NICs' line rate (hierarchical AllReduce sends only a
        // quarter of the buffer per rail); the algorithm bandwidth cannot.
        let (algbw, busbw) = (c.algbw_gbs.unwrap(), c.busbw_gbs.unwrap());
        assert!(busbw > 1.0 && algbw < 50.0, "{op}/{algorithm}: {algbw} {busbw}");
    }
}

fn load_data(name: &str) -> Loaded {
    Scenario::load(&Path::new("test_data/collectives").join(format!("{name}.toml")))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A collective's transfers are created as their dependencies arrive and give their slots
/// back when they are sent and received, so a 256-rank collective holds a few transfers
/// per rank and channel at a time, never its schedule.
#[test]
fn a_256_rank_collective_holds_only_what_it_has_in_flight() {
    // (scenario, channels x chunks, transfers a rank and channel may hold at once). A ring
    // rank holds one transfer on the wire and may still hold the one before, whose data
    // arrived (which started the next) while its last ACK is on its way back; a tree node
    // sends to up to two children and up.
    for (file, lanes, per_lane) in [("ring-256gpu", 2, 2), ("tree-256gpu", 2, 4)] {
        let l = load_data(file);
        let r = run(&l);
        let s = r.summary();
        let c = &s.collectives[0];
        assert!(c.finished, "{file}: {c:?}");
        assert_eq!(c.ranks, 256);
        assert_eq!(c.transfers_arrived, c.transfers);
        assert!(
            !c.transfers_recorded && r.flows.is_empty(),
            "{file}: nothing recorded"
        );
        let bound = 256 * lanes * per_lane;
        let peak = r.engine.peak_transfers_in_flight;
        assert!(
            peak > 0 && peak <= bound,
            "{file}: {peak} transfers at once, bound {bound}"
        );
        // Only transfers between hosts have QPs (one per connection by default).
        assert!(r.engine.peak_transfer_qps <= peak);
        if file.starts_with("ring") {
            assert!(
                c.transfers as usize > 100 * peak,
                "{file}: {} transfers, {peak} at once",
                c.transfers
            );
        }
    }
}

/// Whether a collective's transfers are reported one by one changes the results it reports
/// and nothing the network did.
#[test]
fn recording_transfers_changes_only_what_is_reported() {
    let text = rail_fabric("all_reduce", "ring", 4 << 20, 2);
    let recorded = run(&load_text(&text));
    let totals = run(&load_text(&format!("{text}\n[run]\ntransfer_records = 0\n")));
    let (a, b) = (
        &recorded.summary().collectives[0],
        &totals.summary().collectives[0],
    );
    assert!(a.transfers_recorded && !b.transfers_recorded);
    assert_eq!((a.time_ps, a.transfers_arrived), (b.time_ps, b.transfers_arrived));
    assert_eq!(recorded.counters_csv(), totals.counters_csv());
    assert_eq!(recorded.pfc_hpcc(0), totals.pfc_hpcc(0));
    assert_eq!(recorded.flows.len() as u64, a.transfers);
    assert!(totals.flows.is_empty());
    // The recorded transfers are the schedule's, each finished, in id order.
    assert!(recorded.flows.windows(2).all(|w| w[0].id + 1 == w[1].id));
    assert!(
        recorded
            .flows
            .iter()
            .all(|f| f.in_collective && f.fct_ps.is_some())
    );
}

/// On a lossy link, transfers recover by going back (and, when a last ACK is lost, after
/// the ACK timeout): every iteration completes, and conservation holds (checked by `run`).
/// That a packet of a finished transfer cannot reach the transfer that took its QP slot is
/// tested in the engine's unit tests.
#[test]
fn a_lossy_collective_recovers_and_reused_qp_slots_stay_apart() {
    let l = load_data("ring-lossy");
    let r = run(&l);
    let c = &r.summary().collectives[0];
    assert!(c.finished && c.iterations == 3, "{c:?}");
    let sum = |name: &str| r.counter_total(|n| n == name);
    assert!(sum("port_rcv_errors") > 0, "the fault corrupted packets");
    assert!(sum("packet_seq_err") > 0, "senders went back on NACKs");
    assert!(
        sum("local_ack_timeout_err") > 0,
        "and timed out on lost last ACKs"
    );
    assert!(r.flows.iter().all(|f| f.bytes_received == f.bytes));
}

/// A run cut by its end time reports only the arrivals that happened before it, at the
/// times the full run has them, NVLink steps included (made slow, 100 µs each, so that
/// cuts fall among them): an engine that settles steps ahead of the clock must not count
/// them early.
#[test]
fn a_run_cut_by_its_end_time_reports_only_arrivals_before_it() {
    let text = format!(
        "{}\n[config.intra_host]\nnvlink_latency_us = 100\n",
        rail_fabric("all_reduce", "ring", 4 << 20, 2)
    );
    let full = run(&load_text(&text));
    let time_ps = full.summary().collectives[0].time_ps.expect("finished");
    let by_id: std::collections::HashMap<u64, _> = full.flows.iter().map(|f| (f.id, f)).collect();
    for eighths in [3, 4, 5] {
        let end_ps = time_ps / 8 * eighths;
        let cut = run(&load_text(&format!(
            "{text}\n[run]\nend_us = {}\n",
            end_ps as f64 / 1e6
        )));
        let c = &cut.summary().collectives[0];
        assert!(!c.finished, "{c:?}");
        // Transfers the receiving GPU consumed before the cut are those the collective
        // counts, each at the time the full run has it; so are the sends completed.
        let done: Vec<_> = cut.flows.iter().filter(|f| f.rx_done_ps.is_some()).collect();
        assert!(!done.is_empty() && (done.len() as u64) < c.transfers);
        assert_eq!(done.len() as u64, c.transfers_arrived, "cut at {end_ps} ps");
        for f in cut
            .flows
            .iter()
            .filter(|f| f.fct_ps.is_some() || f.rx_done_ps.is_some())
        {
            let g = by_id[&f.id];
            for (at, full) in [(f.fct_ps, g.fct_ps), (f.rx_done_ps, g.rx_done_ps)] {
                if let Some(t) = at {
                    assert!(
                        f.start_ps + t <= end_ps,
                        "transfer {} done at {} ps, cut at {end_ps}",
                        f.id,
                        f.start_ps + t
                    );
                    assert_eq!((f.start_ps, at), (g.start_ps, full), "transfer {}", f.id);
                }
            }
        }
        // Some of them are NVLink steps.
        assert!(done.iter().any(|f| f.src_node == f.dst_node));
    }
}
