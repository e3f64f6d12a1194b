//! Scenario files: a topology, configuration overrides, workloads and run settings, in TOML.
//!
//! Loading is two steps. [`Scenario::parse`] reads the text into typed sections, rejecting
//! unknown keys (with a "did you mean") and values of the wrong type or range; each error
//! names the file, the line, the key path and what was expected. [`Scenario::build`] then
//! checks the values against each other (Kmin above Kmax, an ECN profile for a tier that
//! does not exist, an unknown traffic class, ...) and constructs the [`Fabric`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::built::{self, BuiltWorkload, WorkloadId};
use crate::config::{
    FabricConfig, MAX_HEADER_BYTES, MAX_MTU_BYTES, MAX_ROCE_MTU_BYTES, MAX_WR_DEPTH, MIN_MTU_BYTES,
    RedProfile,
};
use crate::diag::{Diagnostic, Diagnostics, KeyPath, Severity, humanize_serde_message, line_of_offset};
use crate::hpcc::{self, HpccFlow};
use crate::limits;
use crate::model::{Fabric, Node, PcieLink, PortRef, Tier};
use crate::topology::{self, TopologySpec, parse_port_ref, unknown_name};
use crate::units::Count;

/// Smallest MTU an `mtu_mismatch` fault may set: the IPv4 datagram size every host must
/// accept (RFC 791); 1500 (plain Ethernet) is the usual wrong setting.
const MIN_FAULT_MTU_BYTES: u32 = 576;
/// Largest: SONiC's default port MTU (docs/reference/switch-config.md); a port at the
/// default passes every frame a host with a 9000-byte netdev MTU sends.
const MAX_FAULT_MTU_BYTES: u32 = 9100;
/// PCIe link speeds, GT/s (Gen1 to Gen6), as `PcieLink` documents them.
const PCIE_SPEEDS_GTS: [f64; 6] = [2.5, 5.0, 8.0, 16.0, 32.0, 64.0];
use crate::workload::{SizeDist, Workload};

/// A scenario as written in a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    #[serde(default)]
    pub name: String,
    /// What the scenario models.
    #[serde(default)]
    pub description: String,
    /// The fabric.
    pub topology: TopologySpec,
    /// Configuration of all four layers (defaults from docs/reference).
    #[serde(default)]
    pub config: FabricConfig,
    /// Per-element deviations from the configuration (an MTU on one port, a firmware on
    /// one NIC, a PCIe link trained down).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<Override>,
    /// Workloads by name.
    #[serde(default)]
    pub workloads: BTreeMap<String, Workload>,
    /// Run settings.
    #[serde(default)]
    pub run: RunSettings,
    /// How `xirang tune` searches this scenario (defaults: the built-in space).
    #[serde(default, skip_serializing_if = "is_default_tune")]
    pub tune: crate::tune::TuneSpec,
    /// Faults injected into the run (diagnosis rules are proven on them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
}

/// Kind of an injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Bit errors on a link: a share (`loss`) of the packets arriving at `target` are
    /// corrupted and dropped there (FCS/ICRC failure), counted in `symbol_error`,
    /// `port_rcv_errors`, `rx_crc_errors_phy` and `rx_pcs_symbol_err_phy` (not corrected
    /// by FEC) of a NIC port, SAI in-errors of a switch port; the senders retransmit.
    /// FEC-corrected bits and `link_error_recovery` are not modelled.
    LinkErrors,
    /// The link at `target` is down from `start_us` to `end_us`: everything on it is
    /// lost, and `link_downed` counts once at both ends. Routes are not recomputed while
    /// it is down (the simulator's routes are fixed per QP; a simplification).
    LinkDown,
    /// The link at `target` trained below its rate: both ends run at `rate_gbps` (and
    /// report it: sysfs `rate` at NIC ports, the port speed at switch ports).
    SlowLink,
    /// ECN marking is off on the egress queues of switch port `target` (no WRED/ECN on
    /// the lossless queue).
    EcnOff,
    /// PFC is not enabled for the lossless priorities on switch port `target`: packets
    /// entering there are admitted as lossy (dropped when the buffer share is exceeded,
    /// counted in the port's `SAI_PORT_STAT_IF_IN_DISCARDS`) and the port never pauses
    /// its peer.
    PfcOff,
    /// Switch port `target` has an MTU of `mtu_bytes`: larger frames arriving there are
    /// dropped and counted as oversize input errors.
    MtuMismatch,
    /// The host behind NIC port `target` drains received data at only `drain_gbps`: its
    /// receive buffer fills and the NIC keeps asserting PFC towards the switch (a slow or
    /// stuck receiver; the pause spreads upstream).
    SlowReceiver,
    /// The PCIe link of the NIC at `target` trained down to `pcie_width` lanes and/or
    /// `pcie_speed_gts`: the host side caps what the NIC can send and drain (receive
    /// back-pressure becomes PFC towards the switch), and the NIC's PCIe link reports
    /// the degraded width and speed.
    PcieDegraded,
    /// Application configuration: every flow of the host of NIC `target` goes through
    /// that NIC (several GPUs funnelled through one NIC, e.g. a wrong `NCCL_IB_HCA` or
    /// topology file). It holds for the whole run.
    NicFunnel,
    /// ECMP hashing favours one switch: every switch with a choice of next hops that
    /// includes switch `target` (a switch name: the hot spine) sends a `share` of its
    /// flows there and hashes the rest over the other next hops (a polarised hash,
    /// or unequal weights). Routes are fixed per QP, so it holds for the whole run.
    EcmpImbalance,
    /// Host configuration: the host of NIC `target` has no GPUDirect RDMA (no
    /// `nvidia-peermem` or dma-buf): its GPUs' traffic bounces through host memory,
    /// which caps what the NIC sends, and what it is sent (NCCL's receiver grants
    /// credits as its copies drain), at `bounce_gbps`. Nothing pauses: the host side
    /// simply moves less. It holds for the whole run.
    GdrOff,
    /// Application configuration: workload `target` opens one QP per connection
    /// (`NCCL_IB_QPS_PER_CONNECTION=1`) whatever `transport.qps_per_connection` says,
    /// so each connection is one ECMP flow (poor entropy). It holds for the whole run.
    SingleQp,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 12] = [
        FaultKind::LinkErrors,
        FaultKind::LinkDown,
        FaultKind::SlowLink,
        FaultKind::EcnOff,
        FaultKind::PfcOff,
        FaultKind::MtuMismatch,
        FaultKind::SlowReceiver,
        FaultKind::PcieDegraded,
        FaultKind::NicFunnel,
        FaultKind::EcmpImbalance,
        FaultKind::GdrOff,
        FaultKind::SingleQp,
    ];

    /// The kind as scenarios spell it.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::LinkErrors => "link_errors",
            FaultKind::LinkDown => "link_down",
            FaultKind::SlowLink => "slow_link",
            FaultKind::EcnOff => "ecn_off",
            FaultKind::PfcOff => "pfc_off",
            FaultKind::MtuMismatch => "mtu_mismatch",
            FaultKind::SlowReceiver => "slow_receiver",
            FaultKind::PcieDegraded => "pcie_degraded",
            FaultKind::NicFunnel => "nic_funnel",
            FaultKind::EcmpImbalance => "ecmp_imbalance",
            FaultKind::GdrOff => "gdr_off",
            FaultKind::SingleQp => "single_qp",
        }
    }

    /// Kinds that are configuration, fixed before the run starts (no start or end).
    pub fn whole_run(self) -> bool {
        matches!(
            self,
            FaultKind::NicFunnel | FaultKind::EcmpImbalance | FaultKind::GdrOff | FaultKind::SingleQp
        )
    }

    /// What `target` names for this kind.
    pub fn target_kind(self) -> TargetKind {
        match self {
            FaultKind::EcmpImbalance => TargetKind::Switch,
            FaultKind::SingleQp => TargetKind::Workload,
            _ => TargetKind::Port,
        }
    }
}

/// What a fault's `target` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A port with a link: `switch:port` or `host/nic[/port]`.
    Port,
    /// A switch, by name.
    Switch,
    /// A workload, by name.
    Workload,
}

/// Where a fault acts, resolved when the scenario is built: the simulator takes ids,
/// never the names a file gives.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultTarget {
    /// A port with a link.
    Port(PortRef),
    /// A switch (`ecmp_imbalance`).
    Switch(crate::model::SwitchId),
    /// A workload (`single_qp`).
    Workload(WorkloadId),
}

/// A fault of the scenario with its target resolved ([`Loaded::faults`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedFault {
    /// Where it acts.
    pub target: FaultTarget,
    /// The fault as the file gives it.
    pub fault: Fault,
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// What goes wrong.
    pub kind: FaultKind,
    /// The port where it shows: `switch:port` or `host/nic[/port]` (a port with a link);
    /// a switch name for `ecmp_imbalance`, a workload name for `single_qp`.
    pub target: String,
    /// When it starts, µs into the run.
    #[serde(default)]
    pub start_us: f64,
    /// When it ends (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<f64>,
    /// `link_errors`: share of arriving packets corrupted, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// `slow_link`: the rate the link trained at, Gbit/s (below its nominal rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_gbps: Option<f64>,
    /// `mtu_mismatch`: the port's MTU, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu_bytes: Option<u32>,
    /// `slow_receiver`: the rate the host drains received data at, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_gbps: Option<f64>,
    /// `pcie_degraded`: the lanes the NIC's PCIe link trained at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width: Option<u8>,
    /// `pcie_degraded`: the speed it trained at, GT/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_speed_gts: Option<f64>,
    /// `ecmp_imbalance`: the share of flows hashed to the target switch, in (0, 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// `gdr_off`: the rate the host's bounce through its memory moves data at, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounce_gbps: Option<f64>,
}

/// Whether switch `sw` is one of several equal-cost next hops of some neighbour towards
/// some NIC (what an `ecmp_imbalance` fault can favour). Stops at the first NIC that
/// shows it, so it is one breadth-first search on a regular fabric.
fn is_ecmp_choice(fabric: &Fabric, sw: crate::model::SwitchId) -> bool {
    let g = crate::routing::Graph::new(fabric);
    let target = g.index(Node::Switch(sw));
    (0..fabric.nics.len()).any(|n| {
        let dist = g.distances_to(g.index(Node::Nic(crate::model::NicId(n as u32))));
        g.adj(target).iter().any(|a| {
            let hops: Vec<u32> = g.next_hops(&dist, a.peer).map(|h| h.peer).collect();
            hops.len() >= 2 && hops.contains(&target)
        })
    })
}

fn is_default_tune(t: &crate::tune::TuneSpec) -> bool {
    *t == crate::tune::TuneSpec::default()
}

/// Largest 802.1p priority: the PCP field of an 802.1Q tag has 3 bits.
const MAX_PRIORITY: u8 = 7;

/// A deviation of one element from the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// `switch` (all its ports), `switch:port`, `host/nic` or `host/nic/port`.
    pub target: String,
    /// Port MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu_bytes: Option<u32>,
    /// NIC firmware version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// NIC PCIe link as trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieLink>,
    /// Rate of the link plugged into the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_rate_gbps: Option<f64>,
    /// The NIC's own DCQCN knobs (a NIC target only: `host/nic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<crate::config::NicCongestion>,
    /// The port's own ECN marking profile, replacing its tier's (switch targets only). The
    /// simulator marks every priority of a port with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<crate::config::RedProfile>,
}

/// Run settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSettings {
    /// Seed of every random stream in the run.
    pub seed: u64,
    /// Simulated time limit (0 = until every flow finishes).
    pub end_us: f64,
    /// Counter sampling interval (0 = no time series).
    pub sample_interval_us: f64,
    /// How switches hash flows onto equal-cost paths.
    pub ecmp: EcmpMode,
    /// A collective's transfers are reported one by one (flows.json, fct.txt) while all
    /// the run's recorded collectives have at most this many transfers together; larger
    /// collectives report their totals only, so that their results stay in proportion to
    /// the fabric rather than to the schedule.
    #[serde(skip_serializing_if = "is_default_transfer_records")]
    pub transfer_records: u64,
}

fn is_default_transfer_records(n: &u64) -> bool {
    *n == DEFAULT_TRANSFER_RECORDS
}

/// Transfers of collectives a run reports one by one unless the scenario says otherwise:
/// about 50 MB of flows.json. A 1,024-GPU ring AllReduce has 16.7 million transfers.
pub const DEFAULT_TRANSFER_RECORDS: u64 = 100_000;

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            seed: 1,
            end_us: 0.0,
            sample_interval_us: 0.0,
            ecmp: EcmpMode::Seeded,
            transfer_records: DEFAULT_TRANSFER_RECORDS,
        }
    }
}

/// ECMP hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EcmpMode {
    /// Each switch hashes the 5-tuple with a seed derived from its id and the run seed;
    /// UDP source ports are drawn from the run seed, as RoCE NICs derive them from QP
    /// numbers. A different seed gives different paths.
    Seeded,
    /// As the HPCC ns-3 simulator does it: MurmurHash3 seeded with the switch's node id,
    /// source ports counted from 10000 per (source, destination) pair; the run seed does
    /// not change paths. For comparing runs with that simulator.
    Hpcc,
}

/// Largest scenario file read. An explicit list of a 16,384-GPU rail fabric (what
/// `xirang scenario expand scenarios/rail-16384gpu.toml` writes) is 13.5 MB; this leaves
/// room for explicit fabrics ten times that size while keeping a wrong file (a disk
/// image, `/dev/zero`) from filling memory.
pub const SCENARIO_LIMIT: xirang_files::Limit = xirang_files::Limit::new(256 << 20, "scenario file");

/// Errors from loading a scenario.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file (or a file it names) could not be read: missing, not a file, larger
    /// than its format's limit, or not UTF-8.
    #[error(transparent)]
    Read(#[from] xirang_files::ReadError),
    /// The scenario is invalid; every error found is listed.
    #[error("{}", render_all(file, diagnostics))]
    Invalid {
        /// The scenario file.
        file: PathBuf,
        /// What is wrong, errors first.
        diagnostics: Vec<Diagnostic>,
    },
}

fn render_all(file: &Path, diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.render(file))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The built-in default scenario's text (`scenarios/default.toml`).
pub const BUILTIN_DEFAULT: &str = include_str!("../../../scenarios/default.toml");

/// The name the built-in default scenario's diagnostics carry.
pub const BUILTIN_DEFAULT_NAME: &str = "scenarios/default.toml (built in)";

/// A scenario with its fabric built and outside files read.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file it came from.
    pub file: PathBuf,
    /// The scenario.
    pub scenario: Scenario,
    /// The fabric, with overrides applied.
    pub fabric: Fabric,
    /// The workloads as they run, in name order, their endpoints resolved. Editing
    /// `scenario.workloads` after the build changes nothing that runs: edit these, or
    /// build again.
    pub workloads: Vec<BuiltWorkload>,
    /// The scenario's `[[faults]]`, in order, their targets resolved.
    pub faults: Vec<ResolvedFault>,
    /// Warnings (nothing is wrong enough to stop).
    pub warnings: Vec<Diagnostic>,
}

impl Scenario {
    /// The faults with their targets resolved on `fabric`. Validation has checked every
    /// target, so each resolves; one that did not would be dropped, not guessed.
    fn resolve_faults(&self, fabric: &Fabric) -> Vec<ResolvedFault> {
        self.faults
            .iter()
            .filter_map(|f| {
                let target = match f.kind.target_kind() {
                    TargetKind::Port => FaultTarget::Port(parse_port_ref(fabric, &f.target, None).ok()?),
                    TargetKind::Switch => FaultTarget::Switch(fabric.switch_by_name(&f.target)?),
                    TargetKind::Workload => FaultTarget::Workload(WorkloadId(
                        self.workloads.keys().position(|n| *n == f.target)? as u16,
                    )),
                };
                Some(ResolvedFault {
                    target,
                    fault: f.clone(),
                })
            })
            .collect()
    }

    /// The workloads with their endpoints resolved on `fabric`, in name order. Validation
    /// has checked every name; one that still does not resolve is an error at its key.
    fn resolve_workloads(
        &self,
        fabric: &Fabric,
        hpcc_flows: &BTreeMap<String, Vec<HpccFlow>>,
        at: &KeyPath,
        d: &mut Diagnostics,
    ) -> Vec<BuiltWorkload> {
        let mut out = Vec::with_capacity(self.workloads.len());
        for (i, (name, spec)) in self.workloads.iter().enumerate() {
            let hpcc = hpcc_flows.get(name).map(Vec::as_slice);
            match built::resolve(fabric, spec, hpcc) {
                Ok(ends) => out.push(BuiltWorkload {
                    id: WorkloadId(i as u16),
                    name: name.clone(),
                    spec: spec.clone(),
                    ends,
                }),
                Err(why) => d.error(&at.key(name).key(spec.kind()), why),
            }
        }
        out
    }

    /// The first `collective` workload (in name order) with its name: the job whose hosts
    /// and traffic class the collective tools plan for.
    pub fn first_collective(&self) -> Option<(&str, &crate::workload::CollectiveSpec)> {
        self.workloads.iter().find_map(|(name, w)| match w {
            crate::workload::Workload::Collective(c) => Some((name.as_str(), c)),
            _ => None,
        })
    }

    /// The built-in default scenario (`scenarios/default.toml`, compiled in): what
    /// `xirang tune` and the planners run on without a scenario argument.
    pub fn builtin_default() -> Result<Loaded, ScenarioError> {
        let p = Path::new(BUILTIN_DEFAULT_NAME);
        Scenario::parse(BUILTIN_DEFAULT, p).and_then(|s| s.build(p, Path::new("."), Some(BUILTIN_DEFAULT)))
    }

    /// The scenario at `path`, or the built-in default without one.
    pub fn load_or_default(path: Option<&Path>) -> Result<Loaded, ScenarioError> {
        match path {
            Some(p) => Scenario::load(p),
            None => Scenario::builtin_default(),
        }
    }

    /// Reads, parses, validates and builds the scenario at `path`.
    pub fn load(path: &Path) -> Result<Loaded, ScenarioError> {
        let text = xirang_files::read_text(path, SCENARIO_LIMIT)?;
        let scenario = Scenario::parse(&text, path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        scenario.build(path, base, Some(&text))
    }

    /// Parses scenario text. `file` is only used in messages.
    pub fn parse(text: &str, file: &Path) -> Result<Scenario, ScenarioError> {
        let invalid = |line: Option<usize>, path: KeyPath, message: String| ScenarioError::Invalid {
            file: file.to_path_buf(),
            diagnostics: vec![Diagnostic {
                severity: Severity::Error,
                path,
                line,
                message,
            }],
        };
        let de = toml::Deserializer::parse(text).map_err(|e| {
            let line = e.span().map(|s| line_of_offset(text, s.start));
            invalid(line, KeyPath::root(), format!("not valid TOML: {}", e.message()))
        })?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = KeyPath::parse(&e.path().to_string());
            let inner = e.into_inner();
            let message = humanize_serde_message(inner.message());
            // An unknown key is reported at the key itself, not at its table.
            let path = match message.strip_prefix("unknown key `") {
                Some(rest) => {
                    let name = rest.split('`').next().unwrap_or_default();
                    if path.to_string().ends_with(name) {
                        path
                    } else {
                        path.key(name)
                    }
                }
                None => path,
            };
            let line = inner
                .span()
                .map(|s| line_of_offset(text, s.start))
                .or_else(|| path.line_in(text));
            invalid(line, path, message)
        })
    }

    /// Serializes to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("invariant: every scenario type serializes to TOML")
    }

    /// Checks values against each other, reads outside files (relative to `base_dir`) and
    /// builds the fabric. `text` (the scenario source) is used to put line numbers on
    /// messages.
    pub fn build(&self, file: &Path, base_dir: &Path, text: Option<&str>) -> Result<Loaded, ScenarioError> {
        let mut d = Diagnostics::default();
        let root = KeyPath::root();
        self.config.validate(&root.key("config"), &mut d);
        // 0 means "no end" and "no sampling".
        for (k, v, check) in [
            (
                "end_us",
                self.run.end_us,
                limits::end_time_us as fn(f64) -> Result<(), String>,
            ),
            (
                "sample_interval_us",
                self.run.sample_interval_us,
                limits::sample_interval_us,
            ),
        ] {
            if v != 0.0
                && let Err(m) = check(v)
            {
                d.error(&root.key("run").key(k), m);
            }
        }

        let topo_at = root.key("topology");
        let hpcc_text = match &self.topology {
            TopologySpec::Hpcc(h) => Some(read_relative(base_dir, &h.file)?),
            _ => None,
        };
        let fabric = if d.error_count() == 0 {
            topology::build(
                &self.topology,
                &self.config,
                hpcc_text.as_deref(),
                &topo_at,
                &mut d,
            )
        } else {
            None
        };
        let mut hpcc_flows = BTreeMap::new();
        if let Some(mut fabric) = fabric {
            self.apply_overrides(&mut fabric, &root.key("overrides"), &mut d);
            self.validate_faults(&fabric, &root.key("faults"), &mut d);
            self.check_buffers(
                &fabric,
                &root.key("config").key("buffer").key("switch_bytes"),
                &mut d,
            );
            let tiers = fabric.tiers();
            for tier in Tier::ALL {
                if self.config.ecn.explicit(tier).is_some() && !tiers.contains(&tier) {
                    d.error(
                        &root.key("config").key("ecn").key(tier.as_str()),
                        format!(
                            "ECN profile for tier `{tier}`, which this topology does not have (tiers: {})",
                            tiers.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
            }
            self.validate_tune(&tiers, &root.key("tune"), &mut d);
            for (name, w) in &self.workloads {
                let at = root.key("workloads").key(name).key(w.kind());
                self.validate_workload(w, &fabric, &at, &mut d);
                if let Workload::HpccFlows(h) = w {
                    let text = read_relative(base_dir, &h.file)?;
                    match hpcc::parse_flows(&text) {
                        Ok(flows) => {
                            let parts = fabric.nic_components();
                            let part = |id: u32| {
                                fabric
                                    .host_by_name(&format!("h{id}"))
                                    .and_then(|h| fabric.hosts[h.index()].nics.first())
                                    .map(|n| parts[n.index()])
                            };
                            for (i, f) in flows.iter().enumerate() {
                                if f.src == f.dst {
                                    d.error(
                                        &at.key("file"),
                                        format!(
                                            "`{}` flow {}: node {} sends to itself; a flow needs two hosts",
                                            h.file,
                                            i + 1,
                                            f.src
                                        ),
                                    );
                                } else if let (Some(a), Some(b)) = (part(f.src), part(f.dst))
                                    && a != b
                                {
                                    d.error(
                                        &at.key("file"),
                                        format!(
                                            "`{}` flow {}: node {} cannot be reached from node {}: no links join them",
                                            h.file,
                                            i + 1,
                                            f.dst,
                                            f.src
                                        ),
                                    );
                                }
                                for id in [f.src, f.dst] {
                                    if fabric.host_by_name(&format!("h{id}")).is_none() {
                                        d.error(
                                            &at.key("file"),
                                            format!(
                                                "`{}` flow {}: node {id} is not a host of the topology",
                                                h.file,
                                                i + 1
                                            ),
                                        );
                                    }
                                }
                            }
                            hpcc_flows.insert(name.clone(), flows);
                        }
                        Err(e) => d.error(&at.key("file"), format!("`{}` {e}", h.file)),
                    }
                }
            }
            let workloads = if d.error_count() == 0 {
                self.resolve_workloads(&fabric, &hpcc_flows, &root.key("workloads"), &mut d)
            } else {
                Vec::new()
            };
            if d.error_count() == 0 {
                let mut all = d.finish(text);
                all.sort_by_key(|x| x.severity != Severity::Error);
                let faults = self.resolve_faults(&fabric);
                return Ok(Loaded {
                    file: file.to_path_buf(),
                    scenario: self.clone(),
                    fabric,
                    workloads,
                    faults,
                    warnings: all,
                });
            }
        }
        let mut all = d.finish(text);
        all.sort_by_key(|x| x.severity != Severity::Error);
        Err(ScenarioError::Invalid {
            file: file.to_path_buf(),
            diagnostics: all,
        })
    }

    /// Every switch's buffer must hold what it sets aside: PFC headroom for each port (when
    /// PFC is on) and the reserved bytes of each port; otherwise the shared pool is empty and
    /// every packet beyond the reserve is dropped.
    fn check_buffers(&self, fabric: &Fabric, at: &KeyPath, d: &mut Diagnostics) {
        let cfg = &self.config;
        for sw in &fabric.switches {
            // Saturating: sizes are bounded, but a sum that could wrap must never pass.
            let mut headroom = 0u64;
            let mut ports = 0u64;
            for p in sw.ports.iter().filter_map(|p| p.link) {
                let l = &fabric.links[p.index()];
                ports += 1;
                if cfg.pfc.enabled {
                    headroom =
                        headroom.saturating_add(cfg.pfc.headroom_bytes.unwrap_or_else(|| {
                            crate::config::default_headroom_bytes(l.rate_gbps, l.delay_ns)
                        }));
                }
            }
            let aside = headroom.saturating_add(ports.saturating_mul(cfg.buffer.reserved_bytes));
            if aside >= cfg.buffer.switch_bytes {
                d.error(
                    at,
                    format!(
                        "{} bytes cannot hold what switch `{}` sets aside: {headroom} bytes of PFC headroom and {} \
                         reserved for its {ports} ports; expected more than {aside} bytes",
                        cfg.buffer.switch_bytes,
                        sw.name,
                        ports.saturating_mul(cfg.buffer.reserved_bytes)
                    ),
                );
                return;
            }
        }
    }

    fn apply_overrides(&self, fabric: &mut Fabric, at: &KeyPath, d: &mut Diagnostics) {
        for (i, o) in self.overrides.iter().enumerate() {
            let at = at.index(i);
            if let Some(m) = o.mtu_bytes
                && m < MIN_MTU_BYTES
            {
                d.error(
                    &at.key("mtu_bytes"),
                    format!("expected an MTU >= {MIN_MTU_BYTES}, found {m}"),
                );
                continue;
            }
            if let Some(red) = &o.ecn {
                let before = d.error_count();
                red.validate(&at.key("ecn"), d);
                if d.error_count() > before {
                    continue;
                }
            }
            // A bare switch name targets all of its ports.
            let targets: Vec<crate::model::PortRef> = match fabric.switch_by_name(&o.target) {
                Some(sw) if !o.target.contains(':') => (0..fabric.switches[sw.index()].ports.len())
                    .map(|p| crate::model::PortRef {
                        node: Node::Switch(sw),
                        port: p as u16,
                    })
                    .collect(),
                _ => match parse_port_ref(fabric, &o.target, None) {
                    Ok(p) if (p.port as usize) < fabric.port_count(p.node) => vec![p],
                    Ok(p) => {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}`: port {} does not exist; `{}` has {} ports",
                                o.target,
                                p.port,
                                fabric.node_name(p.node),
                                fabric.port_count(p.node)
                            ),
                        );
                        continue;
                    }
                    Err(m) => {
                        d.error(&at.key("target"), m);
                        continue;
                    }
                },
            };
            for p in targets {
                if let Some(m) = o.mtu_bytes {
                    match p.node {
                        Node::Nic(n) => fabric.nics[n.index()].ports[p.port as usize].mtu_bytes = m,
                        Node::Switch(s) => fabric.switches[s.index()].ports[p.port as usize].mtu_bytes = m,
                    }
                }
                if let Some(r) = o.link_rate_gbps {
                    match fabric.port_link(p) {
                        Some(l) if r.is_finite() && r > 0.0 && r <= crate::limits::MAX_LINK_RATE_GBPS => {
                            fabric.links[l.index()].rate_gbps = r
                        }
                        Some(_) => d.error(
                            &at.key("link_rate_gbps"),
                            format!(
                                "expected a rate above 0 and at most {} Gbit/s, found {r:?}",
                                crate::limits::MAX_LINK_RATE_GBPS
                            ),
                        ),
                        None => d.error(&at.key("target"), format!("`{}`: no link on this port", o.target)),
                    }
                }
                match p.node {
                    Node::Nic(n) => {
                        if let Some(fw) = &o.firmware {
                            fabric.nics[n.index()].firmware = fw.clone();
                        }
                        if let Some(pcie) = o.pcie {
                            fabric.nics[n.index()].pcie = pcie;
                        }
                        if o.ecn.is_some() {
                            d.error(
                                &at.key("target"),
                                format!("`{}` is a NIC; `ecn` applies to switch ports", o.target),
                            );
                        }
                        if let Some(c) = &o.congestion {
                            let before = d.error_count();
                            for (k, list) in [
                                ("rp_priorities", &c.rp_priorities),
                                ("np_priorities", &c.np_priorities),
                            ] {
                                if let Some(p) = list.iter().find(|&&p| p > MAX_PRIORITY) {
                                    d.error(
                                        &at.key("congestion").key(k),
                                        format!("expected priorities 0 to {MAX_PRIORITY}, found {p}"),
                                    );
                                }
                            }
                            c.dcqcn.validate(&at.key("congestion").key("dcqcn"), d);
                            if d.error_count() == before {
                                fabric.nics[n.index()].congestion = Some(c.clone());
                            }
                        }
                    }
                    Node::Switch(s) => {
                        if let Some(red) = o.ecn {
                            fabric.switches[s.index()].ports[p.port as usize].ecn = Some(red);
                        }
                        if o.firmware.is_some() || o.pcie.is_some() || o.congestion.is_some() {
                            d.error(
                                &at.key("target"),
                                format!(
                                    "`{}` is a switch port; `firmware`, `pcie` and `congestion` apply to NICs",
                                    o.target
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    fn validate_faults(&self, fabric: &Fabric, at: &KeyPath, d: &mut Diagnostics) {
        // Faults that change a place's state (and restore it when they end) must not
        // overlap or touch on the same place: each restores what it found.
        let mut held: Vec<(usize, String, f64, f64)> = Vec::new();
        for (i, f) in self.faults.iter().enumerate() {
            // One hashing bias per run: the switches' hash is one configuration.
            let global = match f.kind {
                FaultKind::EcmpImbalance => Some("the switches' ECMP hashing".to_string()),
                FaultKind::SingleQp => Some(format!("workload `{}`", f.target)),
                _ => None,
            };
            if let Some(place) = global {
                if let Some((j, _, _, _)) = held.iter().find(|(_, p, _, _)| *p == place) {
                    d.error(
                        &at.index(i).key("kind"),
                        format!(
                            "faults[{j}] already sets {place}: one `{}` per run",
                            f.kind.name()
                        ),
                    );
                }
                held.push((i, place, 0.0, f64::INFINITY));
                continue;
            }
            let Ok(p) = parse_port_ref(fabric, &f.target, None) else {
                continue;
            };
            let place = match (f.kind, p.node) {
                (FaultKind::SlowLink, _) => fabric.port_link(p).map(|l| format!("link {}", l.index())),
                (FaultKind::EcnOff | FaultKind::PfcOff, _) => {
                    Some(format!("{} port {}", f.kind.name(), f.target))
                }
                (FaultKind::SlowReceiver | FaultKind::PcieDegraded | FaultKind::GdrOff, Node::Nic(n)) => {
                    Some(format!("receive path of NIC {}", n.index()))
                }
                (FaultKind::NicFunnel, Node::Nic(n)) => {
                    Some(format!("host {}", fabric.nics[n.index()].host.index()))
                }
                _ => None,
            };
            let Some(place) = place else {
                continue;
            };
            let end = f.end_us.unwrap_or(f64::INFINITY);
            if let Some((j, _, _, _)) = held
                .iter()
                .find(|(_, p, s, e)| *p == place && f.start_us <= *e && *s <= end)
            {
                d.error(
                    &at.index(i).key("start_us"),
                    format!(
                        "overlaps or touches faults[{j}] on the same place (`{}`): faults that change a port's, link's or NIC's state must be apart in time",
                        f.target
                    ),
                );
            }
            held.push((i, place, f.start_us, end));
        }
        for (i, f) in self.faults.iter().enumerate() {
            let at = at.index(i);
            match f.kind.target_kind() {
                TargetKind::Port => match parse_port_ref(fabric, &f.target, None) {
                    Ok(p) if fabric.port_link(p).is_some() => {}
                    Ok(_) => d.error(&at.key("target"), format!("`{}`: no link on this port", f.target)),
                    Err(m) => d.error(&at.key("target"), m),
                },
                TargetKind::Switch => {
                    if fabric.switch_by_name(&f.target).is_none() {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}` takes a switch name: {}",
                                f.kind.name(),
                                unknown_name(
                                    "switch",
                                    &f.target,
                                    fabric.switches.iter().map(|s| s.name.as_str())
                                )
                            ),
                        );
                    }
                }
                TargetKind::Workload => {
                    if !self.workloads.contains_key(&f.target) {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}` takes a workload name: {}",
                                f.kind.name(),
                                unknown_name(
                                    "workload",
                                    &f.target,
                                    self.workloads.keys().map(String::as_str)
                                )
                            ),
                        );
                    }
                }
            }
            if f.kind.whole_run() && (f.start_us != 0.0 || f.end_us.is_some()) {
                d.error(
                    &at.key("start_us"),
                    format!(
                        "`{}` is configuration and holds for the whole run: it takes no start_us or end_us",
                        f.kind.name()
                    ),
                );
            }
            limits::check_time_us(f.start_us, &at.key("start_us"), d);
            if let Some(e) = f.end_us
                && limits::check_time_us(e, &at.key("end_us"), d)
                && e <= f.start_us
            {
                d.error(
                    &at.key("end_us"),
                    format!("expected a time after start_us ({}), found {e}", f.start_us),
                );
            }
            self.validate_fault_params(fabric, f, &at, d);
        }
    }

    /// Each kind takes exactly its own parameter, in range; config faults sit on a
    /// switch port, a slow receiver on a NIC port.
    fn validate_fault_params(&self, fabric: &Fabric, f: &Fault, at: &KeyPath, d: &mut Diagnostics) {
        let kind = f.kind.name();
        let target = parse_port_ref(fabric, &f.target, None).ok();
        let link_rate = target
            .and_then(|p| fabric.port_link(p))
            .map(|l| fabric.links[l.index()].rate_gbps);
        let on_switch = target.map(|p| matches!(p.node, Node::Switch(_)));
        let pcie = f.kind == FaultKind::PcieDegraded;
        let params: [(&str, Option<f64>, bool); 8] = [
            ("loss", f.loss, f.kind == FaultKind::LinkErrors),
            ("rate_gbps", f.rate_gbps, f.kind == FaultKind::SlowLink),
            (
                "mtu_bytes",
                f.mtu_bytes.map(f64::from),
                f.kind == FaultKind::MtuMismatch,
            ),
            ("drain_gbps", f.drain_gbps, f.kind == FaultKind::SlowReceiver),
            ("pcie_width", f.pcie_width.map(f64::from), pcie),
            ("pcie_speed_gts", f.pcie_speed_gts, pcie),
            ("share", f.share, f.kind == FaultKind::EcmpImbalance),
            ("bounce_gbps", f.bounce_gbps, f.kind == FaultKind::GdrOff),
        ];
        for (key, value, wanted) in params {
            match (value, wanted) {
                (Some(_), false) => d.error(&at.key(key), format!("`{kind}` takes no `{key}`")),
                // A degraded PCIe link needs a width or a speed (or both).
                (None, true) if !pcie => d.error(
                    &at.key(key),
                    format!(
                        "`{kind}` needs `{key}`, {}",
                        match key {
                            "loss" => "the share of packets corrupted (e.g. 0.001)",
                            "rate_gbps" => "the rate the link trained at, Gbit/s (e.g. 200)",
                            "mtu_bytes" => "the port's MTU, bytes (e.g. 1500)",
                            "share" => "the share of flows hashed to the switch, in (0, 1) (e.g. 0.7)",
                            "bounce_gbps" =>
                                "the rate the host's bounce buffers move data at, Gbit/s (e.g. 30)",
                            _ => "the rate the host drains received data at, Gbit/s (e.g. 20)",
                        }
                    ),
                ),
                _ => {}
            }
        }
        match f.kind {
            FaultKind::LinkErrors => {
                if let Some(l) = f.loss
                    && !(l > 0.0 && l <= 1.0)
                {
                    d.error(
                        &at.key("loss"),
                        format!("expected a share of packets in (0, 1], found {l}"),
                    );
                }
            }
            FaultKind::SlowLink => {
                if let (Some(r), Some(nominal)) = (f.rate_gbps, link_rate)
                    && !(r > 0.0 && r < nominal)
                {
                    d.error(
                        &at.key("rate_gbps"),
                        format!("expected a rate above 0 and below the link's {nominal} Gbit/s, found {r}"),
                    );
                }
            }
            FaultKind::SlowReceiver => {
                if on_switch == Some(true) {
                    d.error(
                        &at.key("target"),
                        format!("`{kind}` sits on a NIC port, found switch port `{}`", f.target),
                    );
                }
                if let (Some(r), Some(nominal)) = (f.drain_gbps, link_rate)
                    && !(r > 0.0 && r < nominal)
                {
                    d.error(
                        &at.key("drain_gbps"),
                        format!("expected a rate above 0 and below the link's {nominal} Gbit/s, found {r}"),
                    );
                }
            }
            FaultKind::EcnOff | FaultKind::PfcOff | FaultKind::MtuMismatch => {
                if on_switch == Some(false) {
                    d.error(
                        &at.key("target"),
                        format!("`{kind}` sits on a switch port, found NIC port `{}`", f.target),
                    );
                }
                if let Some(m) = f.mtu_bytes
                    && !(MIN_FAULT_MTU_BYTES..=MAX_FAULT_MTU_BYTES).contains(&m)
                {
                    d.error(
                        &at.key("mtu_bytes"),
                        format!("expected an MTU of {MIN_FAULT_MTU_BYTES}..={MAX_FAULT_MTU_BYTES} bytes, found {m}"),
                    );
                }
            }
            FaultKind::PcieDegraded => {
                let nic = match target.map(|p| p.node) {
                    Some(Node::Nic(n)) => Some(&fabric.nics[n.index()]),
                    Some(Node::Switch(_)) => {
                        d.error(
                            &at.key("target"),
                            format!("`{kind}` sits on a NIC, found switch port `{}`", f.target),
                        );
                        None
                    }
                    None => None,
                };
                if f.pcie_width.is_none() && f.pcie_speed_gts.is_none() {
                    d.error(
                        &at.key("pcie_width"),
                        format!("`{kind}` needs `pcie_width`, `pcie_speed_gts` or both"),
                    );
                }
                if let Some(nic) = nic {
                    let max = nic.pcie;
                    if let Some(w) = f.pcie_width
                        && !(w >= 1 && w <= max.max_width && w.is_power_of_two())
                    {
                        d.error(
                            &at.key("pcie_width"),
                            format!(
                                "expected a PCIe width of 1, 2, 4, ... up to the NIC's x{}, found {w}",
                                max.max_width
                            ),
                        );
                    }
                    if let Some(g) = f.pcie_speed_gts
                        && !(PCIE_SPEEDS_GTS.contains(&g) && g <= max.max_speed_gts)
                    {
                        d.error(
                            &at.key("pcie_speed_gts"),
                            format!(
                                "expected a PCIe speed of {PCIE_SPEEDS_GTS:?} GT/s up to the NIC's {}, found {g}",
                                max.max_speed_gts
                            ),
                        );
                    }
                }
            }
            FaultKind::NicFunnel | FaultKind::GdrOff => {
                if on_switch == Some(true) {
                    d.error(
                        &at.key("target"),
                        format!("`{kind}` names a NIC, found switch port `{}`", f.target),
                    );
                }
                if let (Some(r), Some(nominal)) = (f.bounce_gbps, link_rate)
                    && !(r > 0.0 && r < nominal)
                {
                    d.error(
                        &at.key("bounce_gbps"),
                        format!("expected a rate above 0 and below the link's {nominal} Gbit/s, found {r}"),
                    );
                }
            }
            FaultKind::EcmpImbalance => {
                if let Some(s) = f.share
                    && !(s > 0.0 && s < 1.0)
                {
                    d.error(
                        &at.key("share"),
                        format!("expected a share of flows in (0, 1), found {s}"),
                    );
                }
                if let Some(sw) = fabric.switch_by_name(&f.target)
                    && !is_ecmp_choice(fabric, sw)
                {
                    d.error(
                        &at.key("target"),
                        format!(
                            "`{}` is never one of several equal-cost next hops (a spine with siblings is): favouring it would change nothing",
                            f.target
                        ),
                    );
                }
            }
            FaultKind::SingleQp => {}
            FaultKind::LinkDown => {
                if let Some(nic) = target.and_then(|t| bond_at(fabric, t)) {
                    let switches: BTreeSet<_> = (0..fabric.nics[nic.index()].ports.len() as u16)
                        .filter_map(|p| fabric.attached_switch(nic, p).map(|s| s.node))
                        .collect();
                    if switches.len() > 1 {
                        d.error(
                            &at.key("target"),
                            format!(
                                "`{}` is a member of a bond whose ports go to {} different switches; the simulator models failover for members on one switch only",
                                f.target,
                                switches.len()
                            ),
                        );
                    }
                }
            }
        }
    }

    fn validate_tune(&self, tiers: &[Tier], at: &KeyPath, d: &mut Diagnostics) {
        use crate::tune::{ParamKind, param_kind};
        let t = &self.tune;
        for (k, v, max) in [
            ("budget", t.budget, crate::tune::MAX_BUDGET),
            ("search_seeds", t.search_seeds, crate::tune::MAX_SEEDS),
            ("held_out_seeds", t.held_out_seeds, crate::tune::MAX_SEEDS),
        ] {
            if !(1..=max).contains(&v) {
                d.error(&at.key(k), format!("expected 1..={max}, found {v}"));
            }
        }
        if t.algorithms.is_empty() {
            d.error(
                &at.key("algorithms"),
                "expected at least one algorithm".to_string(),
            );
        }
        for (i, a) in t.algorithms.iter().enumerate() {
            if !crate::tune::SEARCHABLE_ALGORITHMS.contains(a) {
                d.error(
                    &at.key("algorithms").index(i),
                    format!(
                        "`{}`: expected one of {}",
                        a.as_str(),
                        crate::tune::SEARCHABLE_ALGORITHMS.map(|a| a.as_str()).join(", ")
                    ),
                );
            }
        }
        if !(0.0..=1.0).contains(&t.max_pause_ratio) {
            d.error(
                &at.key("max_pause_ratio"),
                format!(
                    "expected a share between 0 and 1, found {}",
                    limits::Num(t.max_pause_ratio)
                ),
            );
        }
        for (class, w) in &t.weights {
            if !self.config.classes.contains_key(class) {
                d.error(
                    &at.key("weights").key(class),
                    unknown_name(
                        "traffic class",
                        class,
                        self.config.classes.keys().map(String::as_str),
                    ),
                );
            } else if !(w.is_finite() && *w >= 0.0) {
                d.error(
                    &at.key("weights").key(class),
                    format!("expected a weight >= 0, found {w}"),
                );
            }
        }
        for (class, tol) in &t.guardrails {
            if !self.config.classes.contains_key(class) {
                d.error(
                    &at.key("guardrails").key(class),
                    unknown_name(
                        "traffic class",
                        class,
                        self.config.classes.keys().map(String::as_str),
                    ),
                );
            } else if !(tol.is_finite() && (0.0..=1.0).contains(tol)) {
                d.error(
                    &at.key("guardrails").key(class),
                    format!(
                        "expected a tolerance between 0 and 1 (0.01 = 1 % worse than the vendor at most), found {}",
                        limits::Num(*tol)
                    ),
                );
            }
        }
        for (i, p) in t.params.iter().enumerate() {
            let pat = at.key("param").index(i);
            match param_kind(&self.config, tiers, &p.name) {
                Err(e) => d.error(&pat.key("name"), e),
                Ok(ParamKind::Algorithm) => {
                    if p.min.is_some() || p.max.is_some() || p.log {
                        d.error(&pat, "an algorithm takes `choices`, not min/max/log".to_string());
                    }
                    for c in &p.choices {
                        if !crate::tune::SEARCHABLE_ALGORITHMS.iter().any(|a| a.as_str() == c) {
                            d.error(
                                &pat.key("choices"),
                                format!(
                                    "`{c}`: expected one of {}",
                                    crate::tune::SEARCHABLE_ALGORITHMS.map(|a| a.as_str()).join(", ")
                                ),
                            );
                        }
                    }
                }
                Ok(_) => match (p.min, p.max) {
                    (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() && lo < hi => {
                        if p.log && lo <= 0.0 {
                            d.error(
                                &pat.key("min"),
                                format!("a log-scale range needs min > 0, found {lo}"),
                            );
                        }
                        if !p.choices.is_empty() {
                            d.error(
                                &pat.key("choices"),
                                "a numeric parameter takes min and max, not choices".to_string(),
                            );
                        }
                    }
                    _ => d.error(&pat, format!("`{}`: expected numbers min < max", p.name)),
                },
            }
        }
    }

    fn validate_workload(&self, w: &Workload, fabric: &Fabric, at: &KeyPath, d: &mut Diagnostics) {
        let classes = &self.config.classes;
        let check_class = |c: &str, at: &KeyPath, d: &mut Diagnostics| {
            if !classes.contains_key(c) {
                d.error(
                    at,
                    unknown_name("traffic class", c, classes.keys().map(String::as_str)),
                );
            }
        };
        let check_ep = |e: &str, at: &KeyPath, d: &mut Diagnostics| {
            if let Err(m) = resolve_endpoint(fabric, e) {
                d.error(at, m);
            }
        };
        let check_start = |s: f64, at: &KeyPath, d: &mut Diagnostics| {
            limits::check_time_us(s, at, d);
        };
        check_class(w.class(), &at.key("class"), d);
        // Every pair of NICs a workload joins must have a path of links between them: the
        // simulator routes every flow before it starts.
        let parts = fabric.nic_components();
        let part = |e: &str| resolve_endpoint(fabric, e).ok().map(|n| parts[n.index()]);
        let unreachable = |a: &str, b: &str| matches!((part(a), part(b)), (Some(x), Some(y)) if x != y);
        let no_path =
            |a: &str, b: &str| format!("`{b}` cannot be reached from `{a}`: no links join their NICs");
        // A set of hosts that must all reach each other (`all` when the workload uses
        // every host).
        let check_joined = |list: &[String], at: &KeyPath, d: &mut Diagnostics| {
            let names: Vec<String> = if list.is_empty() {
                fabric
                    .hosts
                    .iter()
                    .filter(|h| !h.nics.is_empty())
                    .map(|h| h.name.clone())
                    .collect()
            } else {
                list.to_vec()
            };
            if let Some(first) = names.first()
                && let Some(i) = names.iter().position(|x| unreachable(first, x))
            {
                let at = if list.is_empty() { at.clone() } else { at.index(i) };
                d.error(&at, no_path(first, &names[i]));
            }
        };
        let same_nic = |a: &str, b: &str| match (resolve_endpoint(fabric, a), resolve_endpoint(fabric, b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        };
        // Endpoints listed twice in a set that must be distinct NICs.
        let check_distinct = |list: &[String], at: &KeyPath, d: &mut Diagnostics| {
            for (i, x) in list.iter().enumerate() {
                if let Some(j) = list[..i].iter().position(|y| same_nic(x, y)) {
                    d.error(
                        &at.index(i),
                        format!(
                            "`{x}` is the same NIC as entry {j} (`{}`); list each NIC once",
                            list[j]
                        ),
                    );
                }
            }
        };
        match w {
            Workload::Flows(f) => {
                let ids: Vec<&str> = f.list.iter().filter_map(|x| x.id.as_deref()).collect();
                for (i, fl) in f.list.iter().enumerate() {
                    let at = at.key("list").index(i);
                    check_ep(&fl.src, &at.key("src"), d);
                    check_ep(&fl.dst, &at.key("dst"), d);
                    if same_nic(&fl.src, &fl.dst) {
                        d.error(
                            &at.key("dst"),
                            format!("`{}` is the sender's own NIC; a flow needs two NICs", fl.dst),
                        );
                    } else if unreachable(&fl.src, &fl.dst) {
                        d.error(&at.key("dst"), no_path(&fl.src, &fl.dst));
                    }
                    check_start(fl.start_us, &at.key("start_us"), d);
                    if let Some(c) = &fl.class {
                        check_class(c, &at.key("class"), d);
                    }
                    if let Some(p) = fl.priority
                        && p > 7
                    {
                        d.error(
                            &at.key("priority"),
                            format!("expected a priority 0..7, found {p}"),
                        );
                    }
                    limits::check_transfer_bytes(fl.bytes, &at.key("bytes"), d);
                    for a in &fl.after {
                        if !ids.contains(&a.as_str()) {
                            d.error(&at.key("after"), unknown_name("flow id", a, ids.iter().copied()));
                        }
                    }
                }
                if let Some((i, cycle)) = after_cycle(&f.list) {
                    d.error(
                        &at.key("list").index(i).key("after"),
                        format!("flows wait for each other in a cycle: {}", cycle.join(" -> ")),
                    );
                }
            }
            Workload::Incast(x) => {
                check_ep(&x.receiver, &at.key("receiver"), d);
                for (i, s) in x.sender_hosts.iter().enumerate() {
                    check_ep(s, &at.key("sender_hosts").index(i), d);
                    if same_nic(s, &x.receiver) {
                        d.error(
                            &at.key("sender_hosts").index(i),
                            format!("`{s}` is the receiver's NIC; it cannot send to itself"),
                        );
                    } else if unreachable(&x.receiver, s) {
                        d.error(&at.key("sender_hosts").index(i), no_path(&x.receiver, s));
                    }
                }
                if x.sender_hosts.is_empty()
                    && let Some(h) = fabric
                        .hosts
                        .iter()
                        .find(|h| !h.nics.is_empty() && unreachable(&x.receiver, &h.name))
                {
                    d.error(
                        &at.key("receiver"),
                        format!(
                            "{}; senders are picked among every host: list reachable ones in `sender_hosts`",
                            no_path(&x.receiver, &h.name)
                        ),
                    );
                }
                if x.senders.is_none() && x.sender_hosts.is_empty() {
                    d.error(
                        at,
                        "expected `senders` (a count) or `sender_hosts` (a list)".to_string(),
                    );
                }
                if let Some(n) = x.senders
                    && n.get() as usize >= fabric.hosts.len()
                {
                    d.error(
                        &at.key("senders"),
                        format!(
                            "expected fewer senders than the {} hosts, found {n}",
                            fabric.hosts.len()
                        ),
                    );
                }
                limits::check_transfer_bytes(x.bytes, &at.key("bytes"), d);
                check_start(x.start_us, &at.key("start_us"), d);
            }
            Workload::Permutation(x) => {
                for (i, s) in x.hosts.iter().enumerate() {
                    check_ep(s, &at.key("hosts").index(i), d);
                }
                check_distinct(&x.hosts, &at.key("hosts"), d);
                check_joined(&x.hosts, &at.key("hosts"), d);
                limits::check_transfer_bytes(x.bytes, &at.key("bytes"), d);
                check_start(x.start_us, &at.key("start_us"), d);
            }
            Workload::AllToAll(x) => {
                for (i, s) in x.hosts.iter().enumerate() {
                    check_ep(s, &at.key("hosts").index(i), d);
                }
                check_distinct(&x.hosts, &at.key("hosts"), d);
                check_joined(&x.hosts, &at.key("hosts"), d);
                limits::check_transfer_bytes(x.bytes, &at.key("bytes"), d);
                check_start(x.start_us, &at.key("start_us"), d);
            }
            Workload::Collective(x) => {
                if let Some(ch) = x.channels
                    && (ch == 0 || ch > crate::config::NCCL_MAX_CHANNELS)
                {
                    d.error(
                        &at.key("channels"),
                        format!(
                            "expected 1..{} channels, found {ch}",
                            crate::config::NCCL_MAX_CHANNELS
                        ),
                    );
                }
                if !(1..=limits::MAX_ITERATIONS).contains(&x.iterations) {
                    d.error(
                        &at.key("iterations"),
                        format!(
                            "expected 1..={} iterations, found {}",
                            limits::MAX_ITERATIONS,
                            x.iterations
                        ),
                    );
                }
                limits::check_time_us(x.step_us, &at.key("step_us"), d);
                limits::check_transfer_bytes(x.bytes, &at.key("bytes"), d);
                for (i, st) in x.stragglers.iter().enumerate() {
                    let sat = at.key("stragglers").index(i);
                    if !(st.factor.is_finite() && (1.0..=MAX_STRAGGLER_FACTOR).contains(&st.factor)) {
                        d.error(
                            &sat.key("factor"),
                            format!(
                                "expected a slowdown of 1 to {MAX_STRAGGLER_FACTOR} (times the time per slice), found {}",
                                limits::Num(st.factor)
                            ),
                        );
                    }
                    if fabric.host_by_name(&st.host).is_none() {
                        d.error(
                            &sat.key("host"),
                            unknown_name("host", &st.host, fabric.hosts.iter().map(|h| h.name.as_str())),
                        );
                    } else if !x.hosts.is_empty() && !x.hosts.contains(&st.host) {
                        d.error(
                            &sat.key("host"),
                            format!("expected one of the collective's hosts, found `{}`", st.host),
                        );
                    }
                }
                check_distinct(&x.hosts, &at.key("hosts"), d);
                for (i, h) in x.hosts.iter().enumerate() {
                    if fabric.host_by_name(h).is_none() {
                        d.error(
                            &at.key("hosts").index(i),
                            unknown_name("host", h, fabric.hosts.iter().map(|h| h.name.as_str())),
                        );
                    }
                }
                check_start(x.start_us, &at.key("start_us"), d);
            }
            Workload::Inference(x) => {
                for (key, list) in [("clients", &x.clients), ("servers", &x.servers)] {
                    if list.is_empty() {
                        d.error(&at.key(key), "expected at least one endpoint".to_string());
                    }
                    for (i, s) in list.iter().enumerate() {
                        check_ep(s, &at.key(key).index(i), d);
                    }
                }
                for (i, c) in x.clients.iter().enumerate() {
                    if let Some(sv) = x.servers.iter().find(|sv| same_nic(c, sv)) {
                        d.error(
                            &at.key("clients").index(i),
                            format!("`{c}` is also a server (`{sv}`); a NIC cannot send requests to itself"),
                        );
                    } else if let Some(sv) = x.servers.iter().find(|sv| unreachable(c, sv)) {
                        d.error(&at.key("clients").index(i), no_path(c, sv));
                    }
                }
                if !(x.requests_per_sec.is_finite() && x.requests_per_sec > 0.0) {
                    d.error(
                        &at.key("requests_per_sec"),
                        format!("expected a rate > 0, found {}", limits::Num(x.requests_per_sec)),
                    );
                } else if x.duration_us.is_finite() && x.duration_us > 0.0 {
                    // Every request is created before the run starts.
                    let expected = x.clients.len() as f64 * x.requests_per_sec * x.duration_us / 1e6;
                    if expected > limits::MAX_INFERENCE_REQUESTS {
                        d.error(
                            &at.key("requests_per_sec"),
                            format!(
                                "{} clients at {} requests/s for {} µs make about {expected:.3e} requests; expected at most {:e} per workload (lower the rate, the duration or the clients)",
                                x.clients.len(),
                                limits::Num(x.requests_per_sec),
                                limits::Num(x.duration_us),
                                limits::MAX_INFERENCE_REQUESTS
                            ),
                        );
                    }
                }
                for (key, dist) in [("request", &x.request), ("response", &x.response)] {
                    if let Err(m) = dist.check() {
                        d.error(&at.key(key), m);
                    }
                }
                if let Some(share) = x.local_share
                    && !(0.0..=1.0).contains(&share)
                {
                    d.error(
                        &at.key("local_share"),
                        format!("expected a share between 0 and 1, found {}", limits::Num(share)),
                    );
                }
                check_start(x.start_us, &at.key("start_us"), d);
                limits::check_period_us(x.duration_us, &at.key("duration_us"), d);
                limits::check_time_us(x.service_us, &at.key("service_us"), d);
            }
            Workload::HpccFlows(h) => {
                limits::check_time_us(h.time_offset_us, &at.key("time_offset_us"), d);
            }
        }
    }
}

/// A cycle in the `after` dependencies of explicit flows: the index of a flow on it and
/// the ids around it.
fn after_cycle(list: &[crate::workload::FlowSpec]) -> Option<(usize, Vec<String>)> {
    let index = |id: &str| list.iter().position(|f| f.id.as_deref() == Some(id));
    // Colours: 0 unvisited, 1 on the current path, 2 done.
    let mut colour = vec![0u8; list.len()];
    fn visit(
        i: usize,
        list: &[crate::workload::FlowSpec],
        index: &dyn Fn(&str) -> Option<usize>,
        colour: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        colour[i] = 1;
        path.push(i);
        for a in &list[i].after {
            let Some(j) = index(a) else { continue };
            if colour[j] == 1 {
                let start = path.iter().position(|x| *x == j).expect("on the path");
                let mut cycle = path[start..].to_vec();
                cycle.push(j);
                return Some(cycle);
            }
            if colour[j] == 0
                && let Some(c) = visit(j, list, index, colour, path)
            {
                return Some(c);
            }
        }
        path.pop();
        colour[i] = 2;
        None
    }
    for i in 0..list.len() {
        if colour[i] == 0
            && let Some(c) = visit(i, list, &index, &mut colour, &mut Vec::new())
        {
            let names = c
                .iter()
                .map(|k| list[*k].id.clone().unwrap_or_default())
                .collect();
            return Some((c[0], names));
        }
    }
    None
}

impl SizeDist {
    /// Checks the distribution is usable.
    pub fn check(&self) -> Result<(), String> {
        let max = limits::MAX_TRANSFER_BYTES;
        let largest = match self {
            SizeDist::Fixed(b) => *b,
            SizeDist::Uniform { max_bytes, .. } => *max_bytes,
            SizeDist::Cdf(points) => points.iter().map(|p| p.0).max().unwrap_or(0),
        };
        if largest > max {
            return Err(format!(
                "expected sizes of at most {max} bytes (1 TiB), found {largest}"
            ));
        }
        match self {
            SizeDist::Fixed(0) => Err("expected a size >= 1 byte, found 0".to_string()),
            SizeDist::Fixed(_) => Ok(()),
            SizeDist::Uniform { min_bytes, max_bytes } if *min_bytes == 0 || min_bytes > max_bytes => Err(
                format!("expected 1 <= min_bytes <= max_bytes, found {min_bytes} and {max_bytes}"),
            ),
            SizeDist::Uniform { .. } => Ok(()),
            SizeDist::Cdf(points) => {
                let ok = !points.is_empty()
                    && points.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
                    && points.iter().all(|p| p.0 >= 1 && (0.0..=1.0).contains(&p.1))
                    && (points.last().map(|p| p.1) == Some(1.0));
                if ok {
                    Ok(())
                } else {
                    Err("expected a CDF of [bytes, probability] points, increasing in both, ending at probability 1".to_string())
                }
            }
        }
    }
}

fn read_relative(base: &Path, file: &str) -> Result<String, ScenarioError> {
    Ok(xirang_files::read_text(&base.join(file), hpcc::FILE_LIMIT)?)
}

/// An endpoint string resolved to a NIC: `host` (first NIC), `host/nic`, or `host/GPUi`
/// (the NIC closest to that GPU on PCIe).
pub fn resolve_endpoint(fabric: &Fabric, s: &str) -> Result<crate::model::NicId, String> {
    let (host, rest) = match s.split_once('/') {
        Some((h, r)) => (h, Some(r)),
        None => (s, None),
    };
    let h = fabric
        .host_by_name(host)
        .ok_or_else(|| unknown_name("host", host, fabric.hosts.iter().map(|h| h.name.as_str())))?;
    let host_ref = &fabric.hosts[h.index()];
    match rest {
        None => host_ref
            .nics
            .first()
            .copied()
            .ok_or_else(|| format!("host `{host}` has no NIC")),
        Some(r) => {
            if let Some(n) = fabric.nic_by_name(host, r) {
                return Ok(n);
            }
            if let Some(g) = host_ref
                .gpus
                .iter()
                .copied()
                .find(|g| fabric.gpus[g.index()].name == r)
            {
                return fabric
                    .nic_for_gpu(g)
                    .ok_or_else(|| format!("host `{host}` has no NIC"));
            }
            let names = host_ref
                .nics
                .iter()
                .map(|n| fabric.nics[n.index()].name.as_str())
                .chain(host_ref.gpus.iter().map(|g| fabric.gpus[g.index()].name.as_str()));
            Err(unknown_name(&format!("NIC or GPU of host `{host}`"), r, names))
        }
    }
}

impl FabricConfig {
    /// Checks ranges and consistency of the configuration.
    pub fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        self.validate_switching(at, d);
        self.validate_classes(at, d);
        self.validate_transport(at, d);
        self.validate_memory(at, d);
    }

    /// MTUs, PFC, ECN scaling and the switch buffer.
    fn validate_switching(&self, at: &KeyPath, d: &mut Diagnostics) {
        for (key, m) in [
            ("nic_bytes", self.mtu.nic_bytes),
            ("switch_bytes", self.mtu.switch_bytes),
        ] {
            if !(MIN_MTU_BYTES..=MAX_MTU_BYTES).contains(&m) {
                d.error(
                    &at.key("mtu").key(key),
                    format!("expected an MTU of {MIN_MTU_BYTES}..={MAX_MTU_BYTES} bytes, found {m}"),
                );
            }
        }
        if self.mtu.switch_bytes < self.mtu.nic_bytes {
            d.warning(
                &at.key("mtu").key("switch_bytes"),
                format!(
                    "switch MTU {} is below the host MTU {}: full-size frames will be dropped",
                    self.mtu.switch_bytes, self.mtu.nic_bytes
                ),
            );
        }
        let pfc = at.key("pfc");
        for (i, p) in self.pfc.priorities.iter().enumerate() {
            if *p > 7 {
                d.error(
                    &pfc.key("priorities").index(i),
                    format!("expected a priority 0..7, found {p}"),
                );
            }
        }
        if self.pfc.pause_quanta == 0 {
            d.error(
                &pfc.key("pause_quanta"),
                "expected a pause time >= 1 quantum (0 means resume), found 0".to_string(),
            );
        }
        if !(-8..=8).contains(&self.pfc.dynamic_th) {
            d.error(
                &pfc.key("dynamic_th"),
                format!(
                    "expected a dynamic threshold exponent -8..8, found {}",
                    self.pfc.dynamic_th
                ),
            );
        }
        if let Some(g) = self.ecn.scale_from_gbps
            && !(g.is_finite() && g > 0.0)
        {
            d.error(
                &at.key("ecn").key("scale_from_gbps"),
                format!("expected a rate > 0 Gbit/s, found {g}"),
            );
        }
        for tier in Tier::ALL {
            if let Some(p) = self.ecn.explicit(tier) {
                p.validate(&at.key("ecn").key(tier.as_str()), d);
            }
        }
        if self.buffer.switch_bytes == 0 {
            d.error(
                &at.key("buffer").key("switch_bytes"),
                "expected a buffer size > 0, found 0".to_string(),
            );
        }
    }

    /// The traffic classes: priorities, congestion-control algorithms and their parameters.
    fn validate_classes(&self, at: &KeyPath, d: &mut Diagnostics) {
        if self.classes.is_empty() {
            d.error(
                &at.key("classes"),
                "expected at least one traffic class".to_string(),
            );
        }
        for (name, c) in &self.classes {
            let cat = at.key("classes").key(name);
            if c.priority > 7 {
                d.error(
                    &cat.key("priority"),
                    format!("expected a priority 0..7, found {}", c.priority),
                );
            }
            if c.dscp > 63 {
                d.error(
                    &cat.key("dscp"),
                    format!("expected a DSCP 0..63, found {}", c.dscp),
                );
            }
            if c.priority == self.cnp.priority {
                d.error(
                    &cat.key("priority"),
                    format!(
                        "priority {} is the CNP priority (config.cnp.priority); data needs its own",
                        c.priority
                    ),
                );
            }
            c.dcqcn.validate(&cat.key("dcqcn"), d);
            let t = &c.timely;
            let tat = cat.key("timely");
            if limits::check_period_us(t.t_high_us, &tat.key("t_high_us"), d)
                && !(t.t_low_us > 0.0 && t.t_low_us < t.t_high_us)
            {
                d.error(
                    &tat.key("t_low_us"),
                    format!(
                        "expected 0 < t_low_us < t_high_us, found {} and {}",
                        limits::Num(t.t_low_us),
                        limits::Num(t.t_high_us)
                    ),
                );
            }
            for (k, v) in [("ewma_alpha", t.ewma_alpha), ("beta", t.beta)] {
                if !(v > 0.0 && v <= 1.0) {
                    d.error(
                        &tat.key(k),
                        format!("expected a fraction in (0, 1], found {}", limits::Num(v)),
                    );
                }
            }
            for (k, v) in [
                ("add_step_mbps", t.add_step_mbps),
                ("hai_step_mbps", t.hai_step_mbps),
                ("min_rate_mbps", t.min_rate_mbps),
            ] {
                limits::check_rate_mbps(v, true, &tat.key(k), d);
            }
            limits::check_period_us(t.min_rtt_us, &tat.key("min_rtt_us"), d);
            let h = &c.hpcc;
            let hat = cat.key("hpcc");
            if !(h.eta > 0.0 && h.eta <= 1.0) {
                d.error(
                    &hat.key("eta"),
                    format!(
                        "expected a target utilisation in (0, 1], found {}",
                        limits::Num(h.eta)
                    ),
                );
            }
            for (k, v) in [("ai_mbps", h.ai_mbps), ("min_rate_mbps", h.min_rate_mbps)] {
                limits::check_rate_mbps(v, true, &hat.key(k), d);
            }
            // The INT record holds the multiplier in a byte; the simulator's INT_MULTI is the
            // NIC rate / 25 Gbit/s, 16 at 400 Gbit/s.
            if h.int_multi > u32::from(u8::MAX) {
                d.error(
                    &hat.key("int_multi"),
                    format!("expected 0 (from the NIC rate) or 1..255, found {}", h.int_multi),
                );
            }
            let t = &c.dctcp;
            let tat = cat.key("dctcp");
            if !(t.g > 0.0 && t.g <= 1.0) {
                d.error(
                    &tat.key("g"),
                    format!("expected a gain in (0, 1], found {}", limits::Num(t.g)),
                );
            }
            for (k, v) in [("ai_mbps", t.ai_mbps), ("min_rate_mbps", t.min_rate_mbps)] {
                limits::check_rate_mbps(v, true, &tat.key(k), d);
            }
        }
    }

    /// CNP marking, the RoCE transport, NVLink, and the buffer sizes.
    fn validate_transport(&self, at: &KeyPath, d: &mut Diagnostics) {
        let pfc = at.key("pfc");
        if self.cnp.priority > 7 {
            d.error(
                &at.key("cnp").key("priority"),
                format!("expected a priority 0..7, found {}", self.cnp.priority),
            );
        }
        let tr = at.key("transport");
        if !(MIN_MTU_BYTES..=MAX_ROCE_MTU_BYTES).contains(&self.transport.roce_mtu_bytes) {
            d.error(
                &tr.key("roce_mtu_bytes"),
                format!(
                    "expected a RoCE MTU of {MIN_MTU_BYTES}..={MAX_ROCE_MTU_BYTES} bytes (the largest IB MTU), found {}",
                    self.transport.roce_mtu_bytes
                ),
            );
        }
        if !(1..=crate::config::MAX_IB_TIMEOUT).contains(&self.transport.ib_timeout) {
            d.error(
                &tr.key("ib_timeout"),
                format!(
                    "expected an ACK timeout exponent of 1..={} (4.096 µs x 2^n; NCCL_IB_TIMEOUT), found {}",
                    crate::config::MAX_IB_TIMEOUT,
                    self.transport.ib_timeout
                ),
            );
        }
        if self.transport.retry_cnt > crate::config::DEFAULT_RETRY_CNT {
            d.error(
                &tr.key("retry_cnt"),
                format!(
                    "expected a retry count of 0..={} (NCCL_IB_RETRY_CNT), found {}",
                    crate::config::DEFAULT_RETRY_CNT,
                    self.transport.retry_cnt
                ),
            );
        }
        if self.transport.header_bytes > MAX_HEADER_BYTES {
            d.error(
                &tr.key("header_bytes"),
                format!(
                    "expected at most {MAX_HEADER_BYTES} header bytes per packet, found {}",
                    self.transport.header_bytes
                ),
            );
        }
        if self.transport.qps_per_connection == 0 || self.transport.qps_per_connection > 128 {
            d.error(
                &tr.key("qps_per_connection"),
                format!(
                    "expected 1..128 (NCCL's range), found {}",
                    self.transport.qps_per_connection
                ),
            );
        }
        if !(1..=MAX_WR_DEPTH).contains(&self.transport.wr_depth) {
            d.error(
                &tr.key("wr_depth"),
                format!(
                    "expected a queue depth of 1..={MAX_WR_DEPTH} (max_qp_wr of ConnectX NICs), found {}",
                    self.transport.wr_depth
                ),
            );
        }
        let nv = self.intra_host.nvlink_gbps;
        if !(nv.is_finite() && nv > 0.0 && nv <= crate::limits::MAX_LINK_RATE_GBPS) {
            d.error(
                &at.key("intra_host").key("nvlink_gbps"),
                format!(
                    "expected a rate above 0 and at most {} Gbit/s, found {}",
                    crate::limits::MAX_LINK_RATE_GBPS,
                    limits::Num(nv)
                ),
            );
        }
        limits::check_time_us(
            self.intra_host.nvlink_latency_us,
            &at.key("intra_host").key("nvlink_latency_us"),
            d,
        );
        for (k, v) in [
            ("switch_bytes", self.buffer.switch_bytes),
            ("reserved_bytes", self.buffer.reserved_bytes),
        ] {
            limits::check_buffer_bytes(v, &at.key("buffer").key(k), d);
        }
        limits::check_buffer_bytes(self.pfc.xon_offset_bytes, &pfc.key("xon_offset_bytes"), d);
        if let Some(h) = self.pfc.headroom_bytes {
            limits::check_buffer_bytes(h, &pfc.key("headroom_bytes"), d);
        }
    }

    /// The registered-memory pool.
    fn validate_memory(&self, at: &KeyPath, d: &mut Diagnostics) {
        let mem = &self.memory;
        let mat = at.key("memory");
        for (k, v) in [
            ("region_bytes", mem.region_bytes),
            ("buffer_bytes", mem.buffer_bytes),
            ("page_bytes", mem.page_bytes),
            ("cache_line_bytes", mem.cache_line_bytes),
        ] {
            limits::check_buffer_bytes(v, &mat.key(k), d);
        }
        if !mem.page_bytes.is_power_of_two() || mem.page_bytes < 4096 {
            d.error(
                &mat.key("page_bytes"),
                format!("expected a power of two >= 4096, found {}", mem.page_bytes),
            );
        }
        if mem.cache_line_bytes == 0
            || mem.buffer_bytes == 0
            || !mem.buffer_bytes.is_multiple_of(mem.cache_line_bytes)
        {
            d.error(
                &mat.key("buffer_bytes"),
                format!(
                    "expected a non-zero multiple of cache_line_bytes ({}), found {}",
                    mem.cache_line_bytes, mem.buffer_bytes
                ),
            );
        }
        if mem.buffer_bytes > mem.region_bytes {
            d.error(
                &mat.key("region_bytes"),
                format!(
                    "expected a region of at least one buffer ({} bytes), found {}",
                    mem.buffer_bytes, mem.region_bytes
                ),
            );
        }
    }
}

/// Most a straggler's GPUs may be slowed by (`stragglers[].factor`): a thousandfold is a
/// stalled GPU, far past any throttling.
pub const MAX_STRAGGLER_FACTOR: f64 = 1000.0;

impl crate::config::DcqcnParams {
    /// Checks each parameter against the firmware's range (docs/reference/congestion-control.md §1.5).
    fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        let dc = self;
        let dat = at;
        // The integer knobs' ranges are the mlx5 knob table's; times and rates are
        // checked below in the model's units.
        for k in crate::mlx5::KNOBS {
            if let crate::mlx5::Field::Dcqcn { model_key, get, .. } = k.field
                && k.max < crate::mlx5::MAX_SYSFS_VALUE
            {
                let v = get(dc);
                if !(k.min..=k.max).contains(&v) {
                    d.error(
                        &dat.key(model_key),
                        format!("expected {}..{}, found {v}", k.min, k.max),
                    );
                }
            }
        }
        for (k, v) in [
            ("rpg_time_reset_us", dc.rpg_time_reset_us),
            ("dce_tcp_rtt_us", dc.dce_tcp_rtt_us),
            ("rate_reduce_monitor_period_us", dc.rate_reduce_monitor_period_us),
        ] {
            limits::check_period_us(v, &dat.key(k), d);
        }
        for (k, v) in [
            ("rpg_ai_rate_mbps", dc.rpg_ai_rate_mbps),
            ("rpg_hai_rate_mbps", dc.rpg_hai_rate_mbps),
            ("rpg_min_rate_mbps", dc.rpg_min_rate_mbps),
            ("rpg_max_rate_mbps", dc.rpg_max_rate_mbps),
            ("rate_to_set_on_first_cnp_mbps", dc.rate_to_set_on_first_cnp_mbps),
        ] {
            limits::check_rate_mbps(v, false, &dat.key(k), d);
        }
        limits::check_time_us(
            dc.min_time_between_cnps_us,
            &dat.key("min_time_between_cnps_us"),
            d,
        );
    }
}

impl RedProfile {
    fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        limits::check_buffer_bytes(self.kmin_bytes, &at.key("kmin_bytes"), d);
        limits::check_buffer_bytes(self.kmax_bytes, &at.key("kmax_bytes"), d);
        if self.kmin_bytes > self.kmax_bytes {
            d.error(
                &at.key("kmin_bytes"),
                format!(
                    "expected kmin_bytes <= kmax_bytes, found {} > {}",
                    self.kmin_bytes, self.kmax_bytes
                ),
            );
        }
        if !(self.pmax >= 0.0 && self.pmax <= 1.0) {
            d.error(
                &at.key("pmax"),
                format!("expected a probability 0..1, found {}", limits::Num(self.pmax)),
            );
        }
    }
}

/// Convenience for tests and tools: a scenario with just a topology and defaults.
pub fn with_topology(topology: TopologySpec) -> Scenario {
    Scenario {
        name: String::new(),
        description: String::new(),
        topology,
        config: FabricConfig::default(),
        overrides: Vec::new(),
        workloads: BTreeMap::new(),
        run: RunSettings::default(),
        tune: crate::tune::TuneSpec::default(),
        faults: Vec::new(),
    }
}

/// A count for tests and tools.
///
/// # Panics
/// On 0.
pub fn count(n: u32) -> Count {
    Count::new(n).expect("count >= 1")
}

/// Overrides that reproduce every port MTU of `fabric` that differs from `config`'s
/// defaults, for writing a fabric back out as an explicit scenario.
pub fn mtu_overrides(fabric: &Fabric, config: &FabricConfig) -> Vec<Override> {
    let mut v = Vec::new();
    let mut push = |target: String, mtu: u32| {
        v.push(Override {
            target,
            mtu_bytes: Some(mtu),
            firmware: None,
            pcie: None,
            link_rate_gbps: None,
            congestion: None,
            ecn: None,
        })
    };
    for (ni, n) in fabric.nics.iter().enumerate() {
        for (pi, p) in n.ports.iter().enumerate() {
            if p.mtu_bytes != config.mtu.nic_bytes {
                let r = crate::model::PortRef {
                    node: Node::Nic(crate::model::NicId(ni as u32)),
                    port: pi as u16,
                };
                push(fabric.port_name(r), p.mtu_bytes);
            }
        }
    }
    for (si, s) in fabric.switches.iter().enumerate() {
        for (pi, p) in s.ports.iter().enumerate() {
            if p.mtu_bytes != config.mtu.switch_bytes {
                let r = crate::model::PortRef {
                    node: Node::Switch(crate::model::SwitchId(si as u32)),
                    port: pi as u16,
                };
                push(fabric.port_name(r), p.mtu_bytes);
            }
        }
    }
    v
}

/// The NIC of several cabled ports (a bond) at either end of the link at `p`, if any.
fn bond_at(fabric: &Fabric, p: PortRef) -> Option<crate::model::NicId> {
    let nic = match p.node {
        Node::Nic(n) => n,
        Node::Switch(s) => {
            let l = fabric.switches[s.index()].ports.get(p.port as usize)?.link?;
            match fabric.links[l.index()].other(p.node).node {
                Node::Nic(n) => n,
                Node::Switch(_) => return None,
            }
        }
    };
    let cabled = fabric.nics[nic.index()]
        .ports
        .iter()
        .filter(|p| p.link.is_some())
        .count();
    (cabled > 1).then_some(nic)
}
