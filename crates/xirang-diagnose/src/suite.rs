//! The fault-injection suite: every diagnosis rule proven on faults injected in the
//! simulator, which emits the counters real hardware exposes. Each case is a scenario
//! (one fabric, one workload) with zero, one or two faults at different places and
//! loads; the run's sampled counters go through the same rules as production telemetry,
//! and the top findings are scored against what was injected.
//!
//! Loss rates are chosen so that each run corrupts at least a few of the ~1000 packets a
//! port receives: a fault that corrupts nothing leaves no signature to find.
//!
//! Every fault kind the simulator injects is covered: link bit errors (at NIC ports and
//! at switch ports), link flaps, links trained below their rate, slow receivers (PFC
//! storms), ECN marking off and PFC off on a switch port, MTU mismatches, degraded PCIe
//! links, GPUs funnelled through one NIC, a hot spine, GPUDirect RDMA off, and one QP
//! per connection.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use xirang_fabric::scenario::{FaultKind, Scenario};

use crate::counters::diagnose_window;
use crate::finding::{Class, Severity};
use crate::source::window_from_samples;

/// Simulated time of every case, µs: the healthy workload ends in under 1 ms.
const RUN_END_US: u32 = 3_000;

/// What a case injects: the class and entity diagnosis should name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Injected {
    /// The fault's kind, as scenarios spell it.
    pub kind: &'static str,
    /// `[[faults]]` TOML of the fault.
    pub toml: String,
    /// Class diagnosis should say.
    pub class: Class,
    /// Entity diagnosis should name.
    pub entity: String,
    /// The other end of the link, for link faults that both ends report (either name
    /// locates the link).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

impl Injected {
    fn names(&self, class: Class, entity: &str) -> bool {
        class == self.class && (entity == self.entity || self.peer.as_deref() == Some(entity))
    }
}

/// The traffic of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Every host sends 4 MB to a host on the other leaf (no hot spot).
    Permutation,
    /// The permutation plus two 3-to-1 incasts (into h0 from its own leaf, into h4 from
    /// its own leaf), so that queues build and mark.
    Incast,
    /// The incast on shallow-buffer switches, where PFC pauses in a healthy run (and a
    /// port without PFC overflows).
    ShallowIncast,
    /// A rail-optimised fabric of 4 hosts with 2 GPUs and 2 NICs each: every GPU sends
    /// 4 MB to the same GPU of the next host, on its own rail.
    Rail,
    /// A 4x4 leaf-spine of 16 hosts where every host sends 4 MB to the host four places
    /// on (on the next leaf) over 4 QPs per connection: ECMP has 16 flows per leaf to
    /// spread over 4 uplinks.
    Wide,
    /// The same fabric where every host sends 8 MB to the host eight places on (two
    /// leaves on).
    WideFar,
}

/// Workload name of [`Load::Wide`] (what a `single_qp` fault names).
const WIDE_WORKLOAD: &str = "wide";

/// The fabric and traffic of [`Load::Wide`] (`shift` 4, 4 MB) and [`Load::WideFar`]
/// (`shift` 8, 8 MB).
fn wide(shift: usize, bytes: u64) -> String {
    let flows: Vec<String> = (0..16)
        .map(|i| {
            format!(
                "{{ src = \"h{i}\", dst = \"h{}\", bytes = {bytes} }}",
                (i + shift) % 16
            )
        })
        .collect();
    format!(
        "[topology.leaf_spine]\nleaves = 4\nspines = 4\nhosts_per_leaf = 4\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\nlink_delay_ns = 1000\n\n[config.transport]\nqps_per_connection = 4\n\n[workloads.{WIDE_WORKLOAD}.flows]\nlist = [\n  {},\n]\n",
        flows.join(",\n  ")
    )
}

/// One case.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// Name.
    pub name: String,
    /// Run seed.
    pub seed: u64,
    /// Faults (empty: a healthy run).
    pub faults: Vec<Injected>,
    /// Traffic.
    pub load: Load,
}

/// The fabric and workload of every case: 8 hosts on a 2x2 leaf-spine at 100 Gbit/s,
/// each sending 4 MB to a host on the other leaf and back, so every NIC port and every
/// host-facing leaf port carries traffic; counters sampled every 20 µs.
const BASE: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 2
hosts_per_leaf = 4
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[workloads.perm.flows]
list = [
  { src = "h0", dst = "h4", bytes = 4_000_000 }, { src = "h1", dst = "h5", bytes = 4_000_000 },
  { src = "h2", dst = "h6", bytes = 4_000_000 }, { src = "h3", dst = "h7", bytes = 4_000_000 },
  { src = "h4", dst = "h1", bytes = 4_000_000 }, { src = "h5", dst = "h2", bytes = 4_000_000 },
  { src = "h6", dst = "h3", bytes = 4_000_000 }, { src = "h7", dst = "h0", bytes = 4_000_000 },
]
"#;

/// The incasts added to the permutation for [`Load::Incast`].
const INCAST: &str = r#"
[workloads.incast.flows]
list = [
  { src = "h1", dst = "h0", bytes = 2_000_000 }, { src = "h2", dst = "h0", bytes = 2_000_000 },
  { src = "h3", dst = "h0", bytes = 2_000_000 },
  { src = "h5", dst = "h4", bytes = 2_000_000 }, { src = "h6", dst = "h4", bytes = 2_000_000 },
  { src = "h7", dst = "h4", bytes = 2_000_000 },
]
"#;

/// The fabric and traffic of [`Load::Rail`].
const RAIL: &str = r#"
[topology.rail_optimized]
hosts = 4
spines = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 1000

[topology.rail_optimized.host]
gpus = 2
nics = 2

[workloads.ring.flows]
list = [
  { src = "h0/GPU0", dst = "h1/GPU0", bytes = 4_000_000 }, { src = "h0/GPU1", dst = "h1/GPU1", bytes = 4_000_000 },
  { src = "h1/GPU0", dst = "h2/GPU0", bytes = 4_000_000 }, { src = "h1/GPU1", dst = "h2/GPU1", bytes = 4_000_000 },
  { src = "h2/GPU0", dst = "h3/GPU0", bytes = 4_000_000 }, { src = "h2/GPU1", dst = "h3/GPU1", bytes = 4_000_000 },
  { src = "h3/GPU0", dst = "h0/GPU0", bytes = 4_000_000 }, { src = "h3/GPU1", dst = "h0/GPU1", bytes = 4_000_000 },
]
"#;

/// The switch buffer of [`Load::ShallowIncast`]: small enough that the incasts reach
/// the lossless XOFF threshold (2^-3 of the free buffer) before ECN slows the senders.
const SHALLOW: &str = "\n[config.buffer]\nswitch_bytes = 700_000\n";

fn errors_at(target: &str, entity: &str, loss: f64) -> Injected {
    Injected {
        kind: FaultKind::LinkErrors.name(),
        toml: format!("[[faults]]\nkind = \"link_errors\"\ntarget = \"{target}\"\nloss = {loss}\n"),
        class: Class::Link,
        entity: entity.into(),
        peer: None,
    }
}

fn down_at(target: &str, entity: &str, start_us: f64, end_us: f64) -> Injected {
    Injected {
        kind: FaultKind::LinkDown.name(),
        toml: format!(
            "[[faults]]\nkind = \"link_down\"\ntarget = \"{target}\"\nstart_us = {start_us}\nend_us = {end_us}\n"
        ),
        class: Class::Link,
        entity: entity.into(),
        peer: None,
    }
}

fn slow_link(target: &str, entity: &str, peer: &str, rate_gbps: f64) -> Injected {
    Injected {
        kind: FaultKind::SlowLink.name(),
        toml: format!("[[faults]]\nkind = \"slow_link\"\ntarget = \"{target}\"\nrate_gbps = {rate_gbps}\n"),
        class: Class::Link,
        entity: entity.into(),
        peer: Some(peer.into()),
    }
}

fn slow_receiver(nic: &str, drain_gbps: f64, start_us: f64) -> Injected {
    Injected {
        kind: FaultKind::SlowReceiver.name(),
        toml: format!(
            "[[faults]]\nkind = \"slow_receiver\"\ntarget = \"{nic}\"\ndrain_gbps = {drain_gbps}\nstart_us = {start_us}\n"
        ),
        class: Class::Nic,
        entity: format!("{nic}/1"),
        peer: None,
    }
}

fn pcie(nic: &str, params: &str) -> Injected {
    Injected {
        kind: FaultKind::PcieDegraded.name(),
        toml: format!("[[faults]]\nkind = \"pcie_degraded\"\ntarget = \"{nic}\"\n{params}"),
        class: Class::Nic,
        entity: format!("{nic}/1"),
        peer: None,
    }
}

fn funnel(nic: &str) -> Injected {
    Injected {
        kind: FaultKind::NicFunnel.name(),
        toml: format!("[[faults]]\nkind = \"nic_funnel\"\ntarget = \"{nic}\"\n"),
        class: Class::AppConfig,
        entity: format!("{nic}/1"),
        peer: None,
    }
}

fn gdr_off(nic: &str, bounce_gbps: f64) -> Injected {
    Injected {
        kind: FaultKind::GdrOff.name(),
        toml: format!("[[faults]]\nkind = \"gdr_off\"\ntarget = \"{nic}\"\nbounce_gbps = {bounce_gbps}\n"),
        class: Class::HostConfig,
        entity: format!("{nic}/1"),
        peer: None,
    }
}

fn hot_spine(spine: &str, share: f64) -> Injected {
    Injected {
        kind: FaultKind::EcmpImbalance.name(),
        toml: format!("[[faults]]\nkind = \"ecmp_imbalance\"\ntarget = \"{spine}\"\nshare = {share}\n"),
        class: Class::Switch,
        entity: spine.into(),
        peer: None,
    }
}

fn single_qp() -> Injected {
    Injected {
        kind: FaultKind::SingleQp.name(),
        toml: format!("[[faults]]\nkind = \"single_qp\"\ntarget = \"{WIDE_WORKLOAD}\"\n"),
        class: Class::AppConfig,
        entity: "NCCL_IB_QPS_PER_CONNECTION".into(),
        peer: None,
    }
}

fn switch_fault(kind: FaultKind, port: &str, extra: &str) -> Injected {
    Injected {
        kind: kind.name(),
        toml: format!(
            "[[faults]]\nkind = \"{}\"\ntarget = \"{port}\"\n{extra}",
            kind.name()
        ),
        class: Class::SwitchPort,
        entity: port.into(),
        peer: None,
    }
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    // One single-fault case under a load.
    let under = |load: Load| {
        move |name: &str, seed: u64, f: Injected| Case {
            name: name.into(),
            seed,
            faults: vec![f],
            load,
        }
    };
    let one = under(Load::Permutation);
    let incast = under(Load::Incast);
    let rail = under(Load::Rail);
    let shallow = under(Load::ShallowIncast);
    let wide_case = under(Load::Wide);
    let wide_far = under(Load::WideFar);
    let mut v = vec![
        one(
            "errors-nic-h1-0.2%",
            1,
            errors_at("h1/mlx5_0", "h1/mlx5_0/1", 0.002),
        ),
        one("errors-nic-h5-1%", 2, errors_at("h5/mlx5_0", "h5/mlx5_0/1", 0.01)),
        one(
            "errors-nic-h6-0.3%",
            3,
            errors_at("h6/mlx5_0", "h6/mlx5_0/1", 0.003),
        ),
        one(
            "errors-switch-leaf0:1-0.5%",
            1,
            errors_at("leaf0:1", "leaf0:1", 0.005),
        ),
        one(
            "errors-switch-leaf1:3-0.1%",
            2,
            errors_at("leaf1:3", "leaf1:3", 0.001),
        ),
        one(
            "errors-switch-leaf0:2-2%",
            3,
            errors_at("leaf0:2", "leaf0:2", 0.02),
        ),
        one(
            "flap-nic-h2",
            1,
            down_at("h2/mlx5_0", "h2/mlx5_0/1", 200.0, 400.0),
        ),
        one(
            "flap-nic-h7",
            2,
            down_at("h7/mlx5_0", "h7/mlx5_0/1", 100.0, 300.0),
        ),
        one(
            "flap-nic-h4-short",
            3,
            down_at("h4/mlx5_0", "h4/mlx5_0/1", 300.0, 350.0),
        ),
        one(
            "slow-link-h3-25G",
            1,
            slow_link("h3/mlx5_0", "h3/mlx5_0/1", "leaf0:3", 25.0),
        ),
        incast(
            "slow-link-h5-50G",
            2,
            slow_link("leaf1:1", "h5/mlx5_0/1", "leaf1:1", 50.0),
        ),
        one(
            "slow-link-leaf0:4-40G",
            3,
            slow_link("leaf0:4", "leaf0:4", "spine0:0", 40.0),
        ),
        incast("slow-receiver-h0-20G", 1, slow_receiver("h0/mlx5_0", 20.0, 0.0)),
        one("slow-receiver-h6-10G", 2, slow_receiver("h6/mlx5_0", 10.0, 100.0)),
        incast("slow-receiver-h4-5G", 3, slow_receiver("h4/mlx5_0", 5.0, 200.0)),
        rail("funnel-h1-mlx5_0", 1, funnel("h1/mlx5_0")),
        rail("funnel-h2-mlx5_1", 2, funnel("h2/mlx5_1")),
        rail("funnel-h3-mlx5_0", 3, funnel("h3/mlx5_0")),
        one("pcie-h2-x2", 1, pcie("h2/mlx5_0", "pcie_width = 2\n")),
        incast("pcie-h5-gen1", 2, pcie("h5/mlx5_0", "pcie_speed_gts = 2.5\n")),
        one(
            "pcie-h7-x4-gen3-late",
            3,
            pcie(
                "h7/mlx5_0",
                "pcie_width = 4\npcie_speed_gts = 8\nstart_us = 200\n",
            ),
        ),
        incast(
            "ecn-off-leaf0:0",
            1,
            switch_fault(FaultKind::EcnOff, "leaf0:0", ""),
        ),
        incast(
            "ecn-off-leaf1:0",
            2,
            switch_fault(FaultKind::EcnOff, "leaf1:0", ""),
        ),
        incast(
            "ecn-off-leaf1:0-seed3",
            3,
            switch_fault(FaultKind::EcnOff, "leaf1:0", ""),
        ),
        shallow(
            "pfc-off-leaf0:1",
            1,
            switch_fault(FaultKind::PfcOff, "leaf0:1", ""),
        ),
        shallow(
            "pfc-off-leaf1:2",
            2,
            switch_fault(FaultKind::PfcOff, "leaf1:2", ""),
        ),
        shallow(
            "pfc-off-leaf0:3",
            3,
            switch_fault(FaultKind::PfcOff, "leaf0:3", ""),
        ),
        one(
            "mtu-leaf0:2-1500",
            1,
            switch_fault(FaultKind::MtuMismatch, "leaf0:2", "mtu_bytes = 1500\n"),
        ),
        incast(
            "mtu-leaf1:5-4096",
            2,
            switch_fault(FaultKind::MtuMismatch, "leaf1:5", "mtu_bytes = 4096\n"),
        ),
        one(
            "mtu-spine0:0-1500",
            3,
            switch_fault(FaultKind::MtuMismatch, "spine0:0", "mtu_bytes = 1500\n"),
        ),
        wide_case("hot-spine1-70%", 1, hot_spine("spine1", 0.7)),
        wide_case("hot-spine3-60%", 2, hot_spine("spine3", 0.6)),
        wide_far("hot-spine0-90%-far", 3, hot_spine("spine0", 0.9)),
        one("gdr-off-h2-25G", 1, gdr_off("h2/mlx5_0", 25.0)),
        incast("gdr-off-h0-30G", 2, gdr_off("h0/mlx5_0", 30.0)),
        rail("gdr-off-h3-mlx5_1-40G", 3, gdr_off("h3/mlx5_1", 40.0)),
        wide_case("single-qp-seed1", 1, single_qp()),
        wide_case("single-qp-seed2", 2, single_qp()),
        wide_far("single-qp-far-seed3", 3, single_qp()),
    ];
    for seed in 1..=5 {
        v.push(Case {
            name: format!("healthy-seed{seed}"),
            seed,
            faults: vec![],
            load: Load::Permutation,
        });
    }
    for (seed, load, name) in [
        (6, Load::Incast, "incast"),
        (7, Load::Incast, "incast"),
        (8, Load::ShallowIncast, "shallow-incast"),
        (9, Load::ShallowIncast, "shallow-incast"),
        (10, Load::Rail, "rail"),
        (11, Load::Rail, "rail"),
        (12, Load::Wide, "wide"),
        (13, Load::Wide, "wide"),
        (14, Load::WideFar, "wide-far"),
    ] {
        v.push(Case {
            name: format!("healthy-{name}-seed{seed}"),
            seed,
            faults: vec![],
            load,
        });
    }
    for (i, (a, b, load)) in [
        (
            errors_at("h1/mlx5_0", "h1/mlx5_0/1", 0.005),
            down_at("h6/mlx5_0", "h6/mlx5_0/1", 200.0, 300.0),
            Load::Permutation,
        ),
        (
            errors_at("leaf1:0", "leaf1:0", 0.01),
            errors_at("h3/mlx5_0", "h3/mlx5_0/1", 0.002),
            Load::Permutation,
        ),
        (
            down_at("h0/mlx5_0", "h0/mlx5_0/1", 150.0, 250.0),
            errors_at("leaf0:3", "leaf0:3", 0.003),
            Load::Permutation,
        ),
        (
            slow_receiver("h6/mlx5_0", 10.0, 0.0),
            switch_fault(FaultKind::MtuMismatch, "leaf0:1", "mtu_bytes = 1500\n"),
            Load::Permutation,
        ),
        (
            switch_fault(FaultKind::EcnOff, "leaf0:0", ""),
            errors_at("h6/mlx5_0", "h6/mlx5_0/1", 0.005),
            Load::Incast,
        ),
        (
            pcie("h3/mlx5_0", "pcie_width = 2\n"),
            errors_at("leaf1:2", "leaf1:2", 0.005),
            Load::Permutation,
        ),
        (
            funnel("h0/mlx5_1"),
            errors_at("leaf1:2", "leaf1:2", 0.005),
            Load::Rail,
        ),
        (
            slow_link("h2/mlx5_0", "h2/mlx5_0/1", "leaf0:2", 50.0),
            switch_fault(FaultKind::PfcOff, "leaf1:1", ""),
            Load::ShallowIncast,
        ),
        (
            gdr_off("h5/mlx5_0", 25.0),
            errors_at("leaf0:1", "leaf0:1", 0.005),
            Load::Permutation,
        ),
        (
            hot_spine("spine2", 0.7),
            errors_at("h9/mlx5_0", "h9/mlx5_0/1", 0.005),
            Load::Wide,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        v.push(Case {
            name: format!("double-{}", i + 1),
            seed: 10 + i as u64,
            faults: vec![a, b],
            load,
        });
    }
    v
}

/// How a case went.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// Injected (class, entity) pairs.
    pub injected: Vec<(Class, String)>,
    /// Injected fault kinds.
    pub kinds: Vec<&'static str>,
    /// The findings (rule, class, entity, severity), ranked.
    pub found: Vec<(String, Class, String, Severity)>,
    /// Top-1 class and entity match an injected fault (healthy: no finding above low).
    pub correct: bool,
    /// The finding the degraded flows' path votes joined (corroborating a counter
    /// finding, or `PATH-VOTE` on its own), and whether it names an injected fault.
    pub votes: Option<(String, bool)>,
}

/// Runs one case through the simulator and the rules.
pub fn run_case(c: &Case) -> Result<CaseResult, String> {
    // The run stops at 3 ms: a flow whose tail was lost on a down link waits for the
    // 4.3 s ACK timeout (NCCL_IB_TIMEOUT 20), which would only lengthen the window.
    let mut text = format!(
        "{}\n[run]\nseed = {}\nsample_interval_us = 20\nend_us = {RUN_END_US}\n",
        match c.load {
            Load::Permutation => BASE.to_string(),
            Load::Incast => format!("{BASE}{INCAST}"),
            Load::ShallowIncast => format!("{BASE}{INCAST}{SHALLOW}"),
            Load::Rail => RAIL.to_string(),
            Load::Wide => wide(4, 4_000_000),
            Load::WideFar => wide(8, 8_000_000),
        },
        c.seed
    );
    for f in &c.faults {
        text.push('\n');
        text.push_str(&f.toml);
    }
    let path = Path::new("suite.toml");
    let loaded = Scenario::parse(&text, path)
        .and_then(|s| s.build(path, Path::new("."), Some(&text)))
        .map_err(|e| format!("{}: {e}", c.name))?;
    let r = xirang_sim::simulate(&loaded, &xirang_sim::options(&loaded), &mut |_| {});
    r.check_conservation()
        .map_err(|e| format!("{}: conservation: {e}", c.name))?;
    let samples = r
        .counter_series
        .iter()
        .map(|(t, cv)| ((*t / xirang_sim::time::PS_PER_US) as i64, cv));
    let mut w = window_from_samples(format!("sim {}", c.name), samples);
    // What LLDP and the inventory give in production: the cabling and each port's
    // nominal rate, here from the fabric model.
    crate::source::add_links(&mut w, &xirang_sim::output::links_csv(&loaded.fabric))
        .map_err(|e| format!("{}: links: {e}", c.name))?;
    // What probes of the flows' own paths give in production (R-Pingmesh's service
    // tracing): each flow's path and how much it slowed.
    w.flows = r
        .flows
        .iter()
        .filter(|f| !f.nvlink && !f.path.is_empty())
        .map(|f| crate::paths::FlowPath {
            src: f.src.clone(),
            dst: f.dst.clone(),
            path: f.path.clone(),
            slowdown: f.slowdown(),
        })
        .collect();
    let findings = diagnose_window(&w);
    let found: Vec<(String, Class, String, Severity)> = findings
        .iter()
        .map(|f| (f.rule.to_string(), f.class, f.entity.clone(), f.severity))
        .collect();
    let injected: Vec<(Class, String)> = c.faults.iter().map(|f| (f.class, f.entity.clone())).collect();
    let correct = if injected.is_empty() {
        findings.iter().all(|f| f.severity == Severity::Low)
    } else {
        // Top-1 names an injected fault, and every injected fault is among the findings.
        findings
            .first()
            .is_some_and(|f| c.faults.iter().any(|i| i.names(f.class, &f.entity)))
            && c.faults
                .iter()
                .all(|i| findings.iter().any(|f| i.names(f.class, &f.entity)))
    };
    let votes = findings
        .iter()
        .find(|f| f.evidence.iter().any(|e| e.source == crate::paths::VOTE_SOURCE))
        .map(|f| {
            let hit = c.faults.iter().any(|i| {
                i.names(f.class, &f.entity)
                    || f.entity
                        .split(" -> ")
                        .any(|e| i.entity == e || i.peer.as_deref() == Some(e))
            });
            (format!("{} {}", f.rule, f.entity), hit)
        });
    Ok(CaseResult {
        votes,
        name: c.name.clone(),
        injected,
        kinds: c.faults.iter().map(|f| f.kind).collect(),
        found,
        correct,
    })
}

/// The suite's results as the markdown VALIDATION.md holds: the confusion matrix of
/// injected class against top-1 diagnosed class, accuracy, and every case.
pub fn render_markdown(results: &[CaseResult]) -> String {
    let label = |c: Option<Class>| c.map(|c| c.name()).unwrap_or("none (healthy)");
    let mut matrix: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut rows: Vec<&str> = Vec::new();
    let mut cols: Vec<&str> = Vec::new();
    let row_names: Vec<String> = results
        .iter()
        .map(|r| match (r.kinds.as_slice(), r.injected.as_slice()) {
            ([], _) => label(None).to_string(),
            ([k], [(c, _)]) => format!("{k} ({})", c.name()),
            _ => "two faults".to_string(),
        })
        .collect();
    for (r, injected) in results.iter().zip(&row_names) {
        let injected = injected.as_str();
        let got = label(r.found.first().map(|x| x.1));
        *matrix.entry((injected, got)).or_insert(0) += 1;
        if !rows.contains(&injected) {
            rows.push(injected);
        }
        if !cols.contains(&got) {
            cols.push(got);
        }
    }
    // Columns in the classes' own order, "none" last.
    let order = [
        Class::Link,
        Class::Nic,
        Class::SwitchPort,
        Class::Switch,
        Class::HostConfig,
        Class::AppConfig,
    ];
    cols.sort_by_key(|c| order.iter().position(|o| o.name() == *c).unwrap_or(order.len()));
    let mut s = String::new();
    let _ = writeln!(s, "| injected \\ top-1 diagnosed | {} |", cols.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(cols.len()));
    for r in &rows {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| matrix.get(&(*r, *c)).copied().unwrap_or(0).to_string())
            .collect();
        let _ = writeln!(s, "| {r} | {} |", cells.join(" | "));
    }
    let faulty: Vec<&CaseResult> = results.iter().filter(|r| !r.injected.is_empty()).collect();
    let ok = faulty.iter().filter(|r| r.correct).count();
    let healthy_ok = results
        .iter()
        .filter(|r| r.injected.is_empty() && r.correct)
        .count();
    let _ = writeln!(
        s,
        "\nTop-1 class and location correct in {ok} of {} faulty runs ({:.0}%); {healthy_ok} of {} healthy runs without a finding above low severity.\n",
        faulty.len(),
        100.0 * ok as f64 / faulty.len().max(1) as f64,
        results.len() - faulty.len()
    );
    let voted: Vec<&CaseResult> = results.iter().filter(|r| r.votes.is_some()).collect();
    let _ = writeln!(
        s,
        "Path votes of the degraded flows pointed at a place in {} runs: an injected fault's in {}, elsewhere in {} (a hot spot or a fault's consequence; such a vote alone is a low finding).\n",
        voted.len(),
        voted
            .iter()
            .filter(|r| r.votes.as_ref().is_some_and(|v| v.1))
            .count(),
        voted
            .iter()
            .filter(|r| r.votes.as_ref().is_some_and(|v| !v.1))
            .count()
    );
    let _ = writeln!(s, "| case | injected | top findings | path votes | correct |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for r in results {
        let inj: Vec<String> = r
            .injected
            .iter()
            .map(|(c, e)| format!("{} {e}", c.name()))
            .collect();
        let got: Vec<String> = r
            .found
            .iter()
            .take(3)
            .map(|(rule, _, e, sev)| format!("{rule} {e} ({sev:?})"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.name,
            if inj.is_empty() {
                "-".into()
            } else {
                inj.join(", ")
            },
            if got.is_empty() {
                "-".into()
            } else {
                got.join(", ")
            },
            r.votes.as_ref().map_or("-".to_string(), |v| v.0.clone()),
            if r.correct { "yes" } else { "**no**" }
        );
    }
    s
}
