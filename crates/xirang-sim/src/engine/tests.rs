//! Unit tests of engine internals that the public API cannot reach.

use super::*;
use crate::packet::{Kind, Packet};

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
    let ex = crate::workload::expand(&loaded, 1);
    let opts = crate::options(&loaded);
    let mut sim: Sim = Sim::new(&loaded.fabric, &loaded.scenario.config, &ex, &opts);
    sim.run(&mut |_| {});
    let q0 = QpId(0);
    let route = sim.route_of(q0);
    let rx_port = sim.ports[*route.last().unwrap()].peer;
    // The ACK of the duplicate leaves the receiver on the link of its own port.
    assert!(sim.links[rx_port].in_flight.is_empty());
    let dup = Packet {
        seq: 0,
        ts: sim.now,
        qp: q0,
        slot_gen: 0,
        route: sim.qps_tx[q0].route,
        in_port: PortId(0),
        size: 1062,
        payload: 1000,
        hop: 2,
        kind: Kind::Data,
        prio: sim.qps_tx[q0].prio,
        ce: false,
    };
    sim.ledger.live_packets += 1;
    sim.nic_receive(rx_port, dup);
    let (_, _, ack) = sim.links[rx_port]
        .in_flight
        .front()
        .copied()
        .expect("an ACK went out");
    assert_eq!((ack.kind, ack.seq), (Kind::Ack, 10_000));
    assert_eq!(sim.counters[rx_port].duplicate_request, 1);
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
    let mut port = Port::new(
        Dev::Switch(SwitchId(0)),
        0,
        0,
        PortId(1),
        Rate::from_gbps(100.0),
        0,
        red,
        Some(Stream::new(42, Purpose::Ecn, 0)),
    );
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

/// A packet of a finished transfer that arrives after its QP slot went to another transfer
/// (a retransmission, or the answer to one) is told apart by the slot's generation: it is
/// counted and dropped, and the slot's new QP never sees it.
#[test]
fn packets_of_a_reused_qp_slot_never_reach_its_new_qp() {
    let text = r#"
[topology.leaf_spine]
leaves = 1
spines = 1
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100

[topology.leaf_spine.host]
gpus = 2
nics = 1

[workloads.allreduce.collective]
op = "all_reduce"
algorithm = "ring"
bytes = 1_048_576
channels = 2
iterations = 4
"#;
    let path = std::path::Path::new("t.toml");
    let loaded = xirang_fabric::Scenario::parse(text, path)
        .and_then(|s| s.build(path, std::path::Path::new("."), Some(text)))
        .unwrap();
    let ex = crate::workload::expand(&loaded, 1);
    let mut sim: Sim = Sim::new(
        &loaded.fabric,
        &loaded.scenario.config,
        &ex,
        &crate::options(&loaded),
    );
    sim.run(&mut |_| {});
    // Some slot served several transfers one after the other.
    let (qi, q) = sim
        .qps_tx
        .iter_enumerated()
        .find(|(_, q)| q.slot_gen > 0)
        .expect("transfers reused QP slots");
    let (rx_port, tx_port, old) = (q.dst_port, q.src_port, q.slot_gen - 1);
    let before_rx = (sim.qps_rx[qi].rx_expected, sim.qps_rx[qi].rx_done);
    let before_tx = (sim.qps_tx[qi].snd_una, sim.qps_tx[qi].done);
    let stray = |kind, seq| Packet {
        seq,
        ts: sim.now,
        qp: qi,
        slot_gen: old,
        route: sim.qps_tx[qi].route,
        in_port: PortId(0),
        size: 1062,
        payload: if kind == Kind::Data { 1000 } else { 0 },
        hop: 2,
        kind,
        prio: sim.qps_tx[qi].prio,
        ce: true,
    };
    let (data, ack, cnp) = (
        stray(Kind::Data, 0),
        stray(Kind::Ack, 1 << 40),
        stray(Kind::Cnp, 0),
    );
    let dups = sim.counters[rx_port].duplicate_request;
    let ignored = sim.counters[tx_port].rp_cnp_ignored;
    let on_link = sim.links[rx_port].in_flight.len();
    sim.ledger.live_packets += 3;
    sim.nic_receive(rx_port, data);
    sim.nic_receive(tx_port, ack);
    sim.nic_receive(tx_port, cnp);
    assert_eq!(sim.stray_packets, 3);
    assert_eq!(sim.counters[rx_port].duplicate_request, dups + 1);
    assert_eq!(sim.counters[tx_port].rp_cnp_ignored, ignored + 1);
    // Nothing answered, nothing changed on either half of the slot's QP.
    assert_eq!(sim.links[rx_port].in_flight.len(), on_link);
    assert_eq!((sim.qps_rx[qi].rx_expected, sim.qps_rx[qi].rx_done), before_rx);
    assert_eq!((sim.qps_tx[qi].snd_una, sim.qps_tx[qi].done), before_tx);
    assert_eq!(sim.ledger.live_packets, 0);
}
