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
use crate::diag::{Diagnostic, Diagnostics, KeyPath, Severity};
use crate::hpcc::{self, HpccFlow};
use crate::limits;
use crate::model::{Fabric, Node, PcieLink, PortRef, Tier};
use crate::topology::{self, TopologySpec, parse_port_ref, unknown_name};
use crate::units::Count;

use crate::workload::{SizeDist, Workload};

mod faults;
mod models;
mod overrides;
mod settings;
mod stream;
mod workloads;

pub use crate::limits::MAX_STRAGGLER_FACTOR;
pub use overrides::mtu_overrides;

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

fn is_default_tune(t: &crate::tune::TuneSpec) -> bool {
    *t == crate::tune::TuneSpec::default()
}

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
    /// Skip a collective's steady pipeline periods instead of simulating them packet by
    /// packet: `true` for every collective, `false` never (every packet simulated); unset,
    /// for the kinds the validation matrix covers (AllReduce). `xirang sim --exact`
    /// overrides it, `--fast-forward` asks for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_forward: Option<bool>,
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
            fast_forward: None,
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
        if let Some(s) = stream::parse_in_pieces(text) {
            return Ok(s);
        }
        let invalid = |d| ScenarioError::Invalid {
            file: file.to_path_buf(),
            diagnostics: vec![d],
        };
        match models::merge(text, file).map_err(invalid)? {
            None => crate::diag::parse_toml(text).map_err(invalid),
            // A mistake is reported at its key, on its line of the scenario when it is
            // the scenario's own (a model's key has no line there).
            Some(merged) => crate::diag::parse_toml(&merged).map_err(|d| {
                invalid(Diagnostic {
                    line: d.path.line_in(text),
                    ..d
                })
            }),
        }
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
