//! The NIC layout advice on the shipped scenarios (acceptance 3 of the multi-NIC issue):
//! independent ports win the rail-aligned training class, bonded ports win (or are no
//! worse and survive a member link down) for the inference class.

use std::path::Path;

use xirang_fabric::scenario::Scenario;
use xirang_fabric::topology::Aggregate;
use xirang_tune::layout::{LayoutAdvice, compare};

fn advise(file: &str) -> LayoutAdvice {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(file);
    let loaded = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
    let a = compare(&loaded, &[1, 2, 3], &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{file}: {}", serde_json::to_string_pretty(&a).unwrap());
    a
}

#[test]
fn independent_ports_win_rail_aligned_training() {
    let a = advise("nic-layout-training.toml");
    let c = &a.classes[0];
    assert_eq!(c.class, "training");
    assert_eq!(c.winner, Aggregate::Independent, "{}", c.reason);
    let (ind, lag) = (c.independent.healthy.unwrap(), c.lag.healthy.unwrap());
    assert!(
        lag > ind * 1.1,
        "bonds slow the ring by more than 10 %: {ind} against {lag}"
    );
}

#[test]
fn bonded_ports_win_inference_and_survive_a_member_down() {
    let a = advise("nic-layout-inference.toml");
    let c = &a.classes[0];
    assert_eq!(c.class, "inference");
    assert_eq!(c.winner, Aggregate::Lag, "{}", c.reason);
    assert!(c.lag.member_down.is_some(), "the bond survives: {:?}", c.lag);
    assert!(
        c.independent.member_down.is_none(),
        "the lone port does not: {:?}",
        c.independent
    );
}

/// The same inference hosts with a bond policy that ignores UDP ports (layer2+3): a host
/// pair's queue pairs share one member, the speed advantage is gone, and bonds are kept
/// only for surviving a member failure.
#[test]
fn bonds_without_l4_hashing_win_only_by_surviving() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/nic-layout-inference.toml");
    let mut loaded = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
    loaded.scenario.config.intra_host.bond_hash_policy = xirang_fabric::config::BondHash::Layer2Plus3;
    let a = compare(&loaded, &[1, 2, 3], &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let c = &a.classes[0];
    eprintln!("{}", serde_json::to_string_pretty(c).unwrap());
    assert_eq!(c.winner, Aggregate::Lag, "{}", c.reason);
    assert!(
        c.reason.contains("no clear difference") && c.reason.contains("survives"),
        "{}",
        c.reason
    );
}

/// Under queue affinity (older kernels and firmware) a bond's QPs take its ports in
/// turn, so each bond's two channels land on different ports: the bonds come within the
/// margin of independent ports, and independent ports are kept only as NCCL's preference.
#[test]
fn queue_affinity_bonds_come_close_on_training() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/nic-layout-training.toml");
    let mut loaded = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
    loaded.scenario.config.intra_host.lag_port_select = xirang_fabric::config::LagPortSelect::QueueAffinity;
    let a = compare(&loaded, &[1, 2, 3], &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let c = &a.classes[0];
    let (ind, lag) = (c.independent.healthy.unwrap(), c.lag.healthy.unwrap());
    assert!(lag < ind * 1.05, "within 5 %: {ind} against {lag}");
    assert_eq!(c.winner, Aggregate::Independent, "{}", c.reason);
    assert!(c.reason.contains("as NCCL's maintainers prefer"), "{}", c.reason);
}
