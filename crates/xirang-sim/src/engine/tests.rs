//! Unit tests of engine internals that the public API cannot reach.

use super::link::SwitchPort;
use super::*;
use crate::packet::{Kind, Packet, Stamp};
use crate::rng::{Purpose, Stream};
use xirang_fabric::config::RedProfile;

/// Regression (review): a duplicate data packet (the sender went back after its last ACK
/// was lost) is answered with the cumulative ACK, so the sender can finish.
#[test]
fn duplicates_are_acknowledged() {
    let text = r#"
[topology.leaf_spine]
leaves = 1
spines = 1
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100

[workloads.one.flows]
list = [{ src = "h0", dst = "h1", bytes = 10_000 }]
"#;
    let path = std::path::Path::new("t.toml");
    let loaded = xirang_fabric::Scenario::parse(text, path)
        .and_then(|s| s.build(path, std::path::Path::new("."), Some(text)))
        .unwrap();
    let ex = crate::workload::expand(loaded.model(), 1);
    let opts = crate::options(&loaded);
    let mut sim: Sim = Sim::new(&loaded.fabric, loaded.model().config, &ex, &opts);
    sim.run(&mut |_| {});
    let q0 = QpId(0);
    let route = sim.route_of(q0);
    let rx_port = sim.fab.port(*route.last().unwrap()).peer;
    // The ACK of the duplicate leaves the receiver on the link of its own port.
    assert!(sim.fab.link(rx_port).in_flight.is_empty());
    let dup = Packet {
        seq: 0,
        stamp: Stamp::sent_at(sim.now),
        qp: q0,
        route: sim.xport.tx(q0).route,
        in_port: PortId(0),
        size: 1062,
        payload: 1000,
        hop: 2,
        kind: Kind::Data,
        prio: sim.xport.tx(q0).prio,
        ce: false,
        last: false,
    };
    sim.stats.ledger_mut().live_packets += 1;
    sim.nic_receive(rx_port, dup);
    let (_, _, ack) = sim
        .fab
        .link(rx_port)
        .in_flight
        .front()
        .copied()
        .expect("an ACK went out");
    assert_eq!((ack.kind, ack.seq), (Kind::Ack, 10_000));
    assert_eq!(sim.stats.counters(rx_port).duplicate_request, 1);
}

/// The marking probability measured at a queue held at a fixed length between Kmin and
/// Kmax follows the RED line within statistical error (4 sigma).
#[test]
fn red_marking_follows_the_red_line() {
    let red = RedProfile {
        enabled: true,
        kmin_bytes: 100_000,
        kmax_bytes: 400_000,
        pmax: 0.2,
    };
    let mut port = SwitchPort::new(0, red, Stream::new(42, Purpose::Ecn, 0));
    const TRIALS: u32 = 200_000;
    for q in [100_000u64, 150_000, 250_000, 399_000, 400_000, 400_001, 1_000_000] {
        let expected = red.mark_probability(q);
        let marked = (0..TRIALS).filter(|_| port.red_mark(q)).count() as f64;
        let measured = marked / f64::from(TRIALS);
        let sigma = (expected * (1.0 - expected) / f64::from(TRIALS)).sqrt();
        assert!(
            (measured - expected).abs() <= 4.0 * sigma + 1e-12,
            "q = {q}: measured {measured:.5}, RED line {expected:.5} (sigma {sigma:.5})"
        );
    }
    // Below Kmin nothing, above Kmax everything.
    assert!(!(0..1000).any(|_| port.red_mark(99_999)));
    assert!((0..1000).all(|_| port.red_mark(400_001)));
}

/// Two hosts of one GPU with one NIC each on two leaves, a ring AllReduce over `qps`
/// QPs per connection; `extra` goes into the configuration. Built, not run.
fn persistent_pair(qps: u32, fabric_gbps: u32, extra: &str) -> Sim {
    let text = format!(
        r#"
[topology.leaf_spine]
leaves = 2
spines = 1
hosts_per_leaf = 1
host_rate_gbps = 100
fabric_rate_gbps = {fabric_gbps}

[workloads.ar.collective]
op = "all_reduce"
algorithm = "ring"
protocol = "simple"
bytes = 67_108_864
channels = 1
iterations = 2

[config.transport]
qps_per_connection = {qps}
{extra}
"#
    );
    let path = std::path::Path::new("t.toml");
    let loaded = xirang_fabric::Scenario::parse(&text, path)
        .and_then(|s| s.build(path, std::path::Path::new("."), Some(&text)))
        .unwrap_or_else(|e| panic!("{e}"));
    let ex = crate::workload::expand(loaded.model(), 1);
    Sim::new(
        &loaded.fabric,
        loaded.model().config,
        &ex,
        &crate::options(&loaded),
    )
}

/// The data QPs of the run's connections, by connection.
fn data_qps(sim: &Sim) -> Vec<Vec<QpId>> {
    sim.work
        .conns()
        .iter()
        .filter_map(|c| {
            c.net
                .as_ref()
                .map(|n| (n.qps.start..n.qps.end).map(QpId).collect())
        })
        .collect()
}

/// With `NCCL_IB_SPLIT_DATA_ON_QPS=0` (the default) each slice goes whole on one of the
/// connection's QPs, round robin; with 1 every slice is cut over all of them.
#[test]
fn split_data_puts_a_slice_on_one_qp_or_on_all() {
    for split in [false, true] {
        let mut sim = persistent_pair(
            4,
            100,
            &format!("\n[config.nccl]\nib_split_data_on_qps = {split}"),
        );
        sim.run(&mut |_| {});
        for qps in data_qps(&sim) {
            assert_eq!(qps.len(), 4);
            let msgs: Vec<u64> = qps.iter().map(|&q| sim.xport.rx(q).msgs).collect();
            let slices = sim
                .work
                .conns()
                .iter()
                .find(|c| c.net.is_some())
                .map(|c| c.total_slices)
                .unwrap();
            if split {
                assert!(
                    msgs.iter().all(|&m| m == slices),
                    "split: every QP every slice: {msgs:?} of {slices}"
                );
            } else {
                assert_eq!(
                    msgs.iter().sum::<u64>(),
                    slices,
                    "whole: each slice once: {msgs:?}"
                );
                assert!(
                    msgs.iter().all(|&m| m.abs_diff(slices / 4) <= 1),
                    "round robin: {msgs:?}"
                );
            }
        }
    }
}

/// A connection's QP lives for the run and carries every slice of both iterations in
/// one sequence space, its congestion-control state with it: where ECN marks at a
/// 25 Gbit/s uplink make DCQCN cut its rate, the QP starts later slices at the cut rate
/// (a fresh QP per step would start each at line rate).
#[test]
fn a_qp_carries_its_dcqcn_rate_from_one_slice_to_the_next() {
    let mut sim = persistent_pair(1, 25, "\n[config.classes.training]\npriority = 3\ncc = \"dcqcn\"");
    let qps: Vec<QpId> = data_qps(&sim).into_iter().flatten().collect();
    let mut idle: Vec<bool> = qps.iter().map(|&q| sim.xport.tx(q).done).collect();
    let mut below_line_starts = 0;
    let mut starts = 0;
    sim.start_run();
    let mut t = 0;
    while sim.flows_done().0 < sim.flows_done().1 && t < 200_000 * PS_PER_US {
        t += PS_PER_US;
        sim.run_until(t, &mut |_| {});
        for (i, &q) in qps.iter().enumerate() {
            let tx = sim.xport.tx(q);
            if idle[i] && !tx.done {
                starts += 1;
                if tx.rate_bps() < tx.line_bps {
                    below_line_starts += 1;
                }
            }
            idle[i] = tx.done;
        }
    }
    sim.finish_run();
    assert!(starts > 10, "the QPs went idle and back many times: {starts}");
    assert!(
        below_line_starts > 0,
        "some slice started at the rate the previous ones left ({below_line_starts} of {starts})"
    );
    for &q in &qps {
        assert_eq!(
            sim.xport.tx(q).snd_una,
            sim.xport.tx(q).size,
            "every byte acknowledged"
        );
        assert!(sim.xport.rx(q).msgs > 10, "one QP for every slice");
    }
}
