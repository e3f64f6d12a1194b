//! The rollout policy (TOML): which firmware goes on which NIC model, from which current
//! versions, the validation gates, the stages and the failure-domain limits, and the
//! command templates the executor runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RolloutError;
use crate::fleet::{DomainKind, Nic};

/// Target firmware for one NIC model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareTarget {
    /// HCA type the rule applies to (`MT4125`); with `board_id`, both must match.
    #[serde(default)]
    pub hca_type: Option<String>,
    /// Board id / PSID the rule applies to (`MT_0000000359`).
    #[serde(default)]
    pub board_id: Option<String>,
    /// Version to install.
    pub target: String,
    /// Current versions this upgrade has been qualified from. A NIC on any other
    /// version blocks its node (it is listed as skipped, with the reason).
    pub allowed_from: Vec<String>,
    /// Image file handed to the flashing tool (`{image}` in the command templates).
    pub image: String,
}

impl FirmwareTarget {
    /// Whether this rule is about `nic`'s model.
    pub fn matches(&self, nic: &Nic) -> bool {
        let h = self
            .hca_type
            .as_ref()
            .is_none_or(|h| nic.hca_type.as_deref() == Some(h.as_str()));
        let b = self
            .board_id
            .as_ref()
            .is_none_or(|b| nic.board_id.as_deref() == Some(b.as_str()));
        h && b
    }
}

/// Most flash commands run at once: each is a child process with its own pipes, and
/// ten thousand is above any fleet's wave (2^64 - 1 once panicked the executor).
const MAX_PARALLEL: usize = 10_000;

/// The smallest Ethernet frame, bits: 64 bytes (IEEE 802.3).
const MIN_FRAME_BITS: f64 = 512.0;

/// Whether some NIC could match both targets: on each of the model's fields, one leaves
/// it open or both name the same.
fn overlaps(a: &FirmwareTarget, b: &FirmwareTarget) -> bool {
    let same = |x: &Option<String>, y: &Option<String>| match (x, y) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    };
    same(&a.hca_type, &b.hca_type) && same(&a.board_id, &b.board_id)
}

/// A target's model as a message names it: `hca_type MT4125, board_id MT_0000000359`.
fn model(t: &FirmwareTarget) -> String {
    [("hca_type", &t.hca_type), ("board_id", &t.board_id)]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Stages: cumulative shares of the upgradable nodes done after each stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stages {
    /// Cumulative shares, increasing, the last 1.0; the first stage is the canary.
    /// Default 1 %, 5 %, 25 %, 100 % (the example).
    #[serde(default = "default_fractions")]
    pub fractions: Vec<f64>,
    /// At least this many canaries (more when the model/firmware combinations need it).
    #[serde(default = "one")]
    pub min_canaries: usize,
}

fn default_fractions() -> Vec<f64> {
    vec![0.01, 0.05, 0.25, 1.0]
}
fn one() -> usize {
    1
}

impl Default for Stages {
    fn default() -> Self {
        Stages {
            fractions: default_fractions(),
            min_canaries: 1,
        }
    }
}

/// Largest share of each failure domain upgraded in one wave. A domain always allows
/// at least one node per wave (otherwise a small rack could never be upgraded); plans
/// say where that floor applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Share of a rack.
    #[serde(default = "quarter")]
    pub rack: f64,
    /// Share of the nodes cabled to one switch.
    #[serde(default = "quarter")]
    pub switch: f64,
    /// Share of a rail.
    #[serde(default = "quarter")]
    pub rail: f64,
    /// Share of a job's nodes.
    #[serde(default = "quarter")]
    pub job: f64,
}

fn quarter() -> f64 {
    0.25
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rack: quarter(),
            switch: quarter(),
            rail: quarter(),
            job: quarter(),
        }
    }
}

impl Limits {
    /// The share for one kind.
    pub fn share(&self, kind: DomainKind) -> f64 {
        match kind {
            DomainKind::Rack => self.rack,
            DomainKind::Switch => self.switch,
            DomainKind::Rail => self.rail,
            DomainKind::Job => self.job,
        }
    }

    /// Most nodes of a domain of `size` nodes in one wave: floor(share x size), at least 1.
    pub fn cap(&self, kind: DomainKind, size: usize) -> usize {
        ((self.share(kind) * size as f64 + 1e-9).floor() as usize).max(1)
    }
}

/// Benchmark gate: a result file after the upgrade against the node's baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkGate {
    /// Baseline file template (before the upgrade), e.g. `bench/{node}.before.txt`;
    /// relative paths are relative to the policy file.
    pub baseline: String,
    /// Result file template (after the upgrade).
    pub result: String,
    /// Command template run after flashing to produce the result file (optional: the
    /// file may be produced by other means).
    #[serde(default)]
    pub command: Option<String>,
    /// Pass when result >= min_ratio x baseline.
    #[serde(default = "default_min_ratio")]
    pub min_ratio: f64,
}

/// 5 % below baseline: run-to-run spread of nccl-tests busbw on a healthy pair is a few
/// percent (the 20-iteration averages in crates/xirang-collective/test_data/nccl-tests differ by 1-3 %).
fn default_min_ratio() -> f64 {
    0.95
}

/// Default soak: ten minutes. No figure in docs/reference; chosen to span several
/// monitoring intervals (the agent samples every 10-60 s) and ibdiagnet's snapshot pairs.
pub const DEFAULT_SOAK_S: f64 = 600.0;
/// Longest soak accepted: one day.
const MAX_SOAK_S: f64 = 86_400.0;

/// Validation gates evaluated on every node of a wave after it is flashed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    /// No error finding from the audit on the node (its NICs, ports, PCIe, config).
    #[serde(default = "yes")]
    pub audit: bool,
    /// Seconds to watch error counters after the wave is flashed (0: no soak gate).
    #[serde(default = "default_soak")]
    pub soak_s: f64,
    /// Largest allowed increase of any link error counter over the soak window.
    #[serde(default)]
    pub max_error_increase: u64,
    /// Optional benchmark comparison.
    #[serde(default)]
    pub benchmark: Option<BenchmarkGate>,
    /// Optional gates on live application metrics from Prometheus: each wave against a
    /// control group of unchanged nodes in the same failure domains ([`crate::live`]).
    #[serde(default)]
    pub live: Option<LiveGates>,
}

/// Gates on live application metrics: after the soak, each metric of the wave's nodes
/// against the control group's over the soak window, one sample per `step_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveGates {
    /// Prometheus base URL (`http://prometheus:9090`).
    pub prometheus: String,
    /// Seconds per sample (the query_range step).
    #[serde(default = "default_live_step")]
    pub step_s: f64,
    /// The test's level.
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Fewest samples per group before a verdict other than "soak longer".
    #[serde(default = "default_min_samples")]
    pub min_samples: usize,
    /// Times the soak is repeated while the test cannot tell; then the wave halts as
    /// inconclusive (fail closed).
    #[serde(default = "default_extensions")]
    pub max_extensions: u32,
    /// The metrics.
    pub metrics: Vec<LiveMetric>,
}

/// One live metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveMetric {
    /// Name in messages (`inference p99`).
    pub name: String,
    /// PromQL with `{nodes}` where a regex alternation of the group's node names goes,
    /// e.g. `histogram_quantile(0.99, sum by (le) (rate(request_seconds_bucket{node=~"{nodes}"}[1m])))`.
    pub query: String,
    /// Which way is better.
    pub better: crate::live::Better,
    /// Relative margin the canaries may be worse by (the tuner's guardrail: 0.01 = 1 %).
    #[serde(default)]
    pub tolerance: f64,
    /// Absolute margin the canaries may be worse by, in the metric's unit, on top of the
    /// relative one: for a ratio that can be 0 on both sides (ECN marks, pauses, drops),
    /// where no relative margin shows the canaries no worse. Default 0.
    #[serde(default)]
    pub absolute_tolerance: f64,
    /// Which waves it judges: the hosts' (`{nodes}` host names) or the switches' of a
    /// configuration's switch side (`{nodes}` switch names).
    #[serde(default)]
    pub scope: Scope,
}

/// What a live metric is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Host waves.
    #[default]
    Hosts,
    /// Switch waves.
    Switches,
}

/// The most points Prometheus returns per series from one `query_range` (it refuses a
/// query beyond: "exceeded maximum resolution of 11,000 points per timeseries").
const PROMETHEUS_MAX_POINTS: f64 = 11_000.0;

/// 30 s: two scrapes at Prometheus's common 15 s interval per sample, twenty samples in
/// the default 600 s soak. A step shorter than the scrape interval repeats samples (and
/// inflates the test's count): keep it at least the scrape interval.
fn default_live_step() -> f64 {
    30.0
}
/// The usual 5 % level.
fn default_alpha() -> f64 {
    0.05
}
/// Eight per group: with 4 and 4 the smallest exact one-sided Mann-Whitney p is
/// 1/C(8,4) = 0.014, too near 0.05 for the normal approximation used here; 8 and 8 leave
/// room (1/C(16,8) = 8e-5).
fn default_min_samples() -> usize {
    8
}
fn default_extensions() -> u32 {
    2
}

fn yes() -> bool {
    true
}
fn default_soak() -> f64 {
    DEFAULT_SOAK_S
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            audit: true,
            soak_s: DEFAULT_SOAK_S,
            max_error_increase: 0,
            benchmark: None,
            live: None,
        }
    }
}

/// Command templates, run by `sh -c` on the executor's machine in the inventory
/// directory. Placeholders: `{node} {nic} {pci} {hca_type} {board_id} {image} {target}
/// {previous}`; a template is parsed as a command line and every value stays one word
/// (or part of its word) for the local shell, and for the remote one behind `ssh` or
/// `sh -c` ([`crate::template`]). `flash` and `rollback` have no
/// default and must use `{node}`: they run here and must reach the node (for example
/// `ssh {node} mlxfwmanager -d {pci} -i {image} -u -y`), so that a forgotten template
/// never burns the executor's own NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Commands {
    /// Flashes one NIC.
    pub flash: String,
    /// Puts one NIC back on its previous firmware.
    pub rollback: String,
    /// Applies a configuration's patch to one switch (`{node}` the switch, `{tier}`,
    /// `{patch}` the file, `{dir}`), for example `ssh {node} 'cd /srv/xirang/tuned &&
    /// sudo config checkpoint xirang-before && sudo config apply-patch {patch}'`.
    /// Required when the configuration has switch patches.
    #[serde(default)]
    pub switch_apply: Option<String>,
    /// Puts one switch back (`ssh {node} sudo config rollback xirang-before`).
    #[serde(default)]
    pub switch_rollback: Option<String>,
    /// Refreshes the inventory's copy of a switch's config_db before it is read again
    /// (`ssh {node} show runningconfiguration all > switches/{node}.json`): the gates
    /// and the rollback check read that file. `{node}` only.
    #[serde(default)]
    pub switch_collect: Option<String>,
    /// Run before a node's inventory is read again (for example to refresh a
    /// snapshot: `ssh {node} xirang host snapshot -o - > hosts/{node}.tar.gz`).
    #[serde(default)]
    pub collect: Option<String>,
    /// Flash commands run at once within a wave (each node's NICs still one at a
    /// time). The wave itself is what the failure-domain limits bound.
    #[serde(default = "default_parallel")]
    pub parallel: usize,
}

fn default_parallel() -> usize {
    16
}

impl Commands {
    /// Templates in NVIDIA's style over ssh, for examples and the simulation:
    /// mlxfwmanager burns an image on a device (`-d`, `-i`, `-u` update, `-y` no
    /// prompt); the firmware takes effect after a reset (`mlxfwreset`).
    pub fn ssh_mlxfwmanager() -> Commands {
        Commands {
            flash: "ssh {node} 'mlxfwmanager -d {pci} -i {image} -u -y && mlxfwreset -d {pci} -y reset'".into(),
            rollback: "ssh {node} 'mlxfwmanager -d {pci} -i /srv/firmware/{board_id}-{previous}.bin -u -y && mlxfwreset -d {pci} -y reset'".into(),
            collect: None,
            switch_apply: None,
            switch_rollback: None,
            switch_collect: None,
            parallel: default_parallel(),
        }
    }
}

/// A tuned configuration as the change (in place of `[[firmware]]`): the directory
/// `xirang tune` wrote, whose `mlx5-congestion.sh` is applied per NIC interface
/// ([`crate::config`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// The directory (relative to the policy file), `{dir}` in the command templates.
    pub dir: String,
    /// The knobs its script sets, read from it when the policy loads (and kept with a
    /// started rollout, so that later edits of the directory change nothing for it).
    #[serde(default)]
    pub knobs: Vec<crate::config::Knob>,
    /// The state the knobs put a NIC in ([`crate::config::target`]).
    #[serde(default)]
    pub target: String,
    /// Whether the directory's switch patches (`sonic-TIER.patch.json`) are rolled out
    /// too, after every host: `false` rolls out the hosts' knobs only, and says so.
    #[serde(default = "yes")]
    pub switches: bool,
    /// The switch patches, read when the policy loads (and kept with a started rollout,
    /// as the knobs are). Empty when `switches` is false.
    #[serde(default)]
    pub patches: Vec<crate::config::SwitchPatch>,
}

/// The policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Targets per NIC model; the first rule that matches a NIC applies. Empty for a
    /// configuration rollout.
    #[serde(default)]
    pub firmware: Vec<FirmwareTarget>,
    /// A tuned configuration as the change instead of firmware.
    #[serde(default)]
    pub configuration: Option<Configuration>,
    /// Stages.
    #[serde(default)]
    pub stages: Stages,
    /// Limits.
    #[serde(default)]
    pub limits: Limits,
    /// Gates.
    #[serde(default)]
    pub gates: Gates,
    /// Commands.
    pub commands: Commands,
    /// Directory relative paths are taken from (the policy file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

const PLACEHOLDERS: &[&str] = &[
    "node", "nic", "pci", "hca_type", "board_id", "image", "target", "previous", "netdev", "dir",
];

/// A host's and a switch's placeholders: what [`fill`] substitutes.
const ALL_PLACEHOLDERS: &[&str] = &[
    "node", "nic", "pci", "hca_type", "board_id", "image", "target", "previous", "netdev", "dir", "tier",
    "patch",
];

/// The placeholders of a switch's commands.
const SWITCH_PLACEHOLDERS: &[&str] = &["node", "tier", "patch", "dir", "target", "previous"];

/// The first placeholder of `template` not in `allowed`.
fn placeholder_not_in(template: &str, allowed: &[&str]) -> Option<String> {
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        let end = after.find('}')?;
        if !allowed.contains(&&after[..end]) {
            return Some(after[..end].to_string());
        }
        rest = &after[end + 1..];
    }
    None
}

/// Checks a template's placeholders; returns the first unknown one.
pub fn unknown_placeholder(template: &str) -> Option<String> {
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        let end = after.find('}')?;
        let name = &after[..end];
        if !PLACEHOLDERS.contains(&name) {
            return Some(name.to_string());
        }
        rest = &after[end + 1..];
    }
    None
}

pub use crate::template::shell_quote;
use crate::template::{Template, TemplateError};

/// Fills a template: parsed as a command line, every value one word (or part of the
/// template's word) at every shell level it reaches (see [`crate::template`]).
pub fn fill(template: &str, values: &BTreeMap<&str, String>) -> Result<String, TemplateError> {
    Template::parse(template, ALL_PLACEHOLDERS)?.render(values)
}

/// Largest policy file read: policies are a few dozen lines.
pub const POLICY_LIMIT: xirang_files::Limit = xirang_files::Limit::new(16 << 20, "rollout policy");

impl LiveGates {
    fn check(&self, soak_s: f64) -> Result<(), String> {
        let p = self.prometheus.trim();
        if !(p.starts_with("http://") || p.starts_with("https://")) {
            return Err(format!(
                "gates.live.prometheus: expected an http:// or https:// URL, found `{p}`"
            ));
        }
        if soak_s <= 0.0 {
            return Err(
                "gates.live: expected gates.soak_s > 0 (the live metrics are compared over the soak)".into(),
            );
        }
        if !(self.step_s >= 1.0 && self.step_s <= soak_s) {
            return Err(format!(
                "gates.live.step_s: expected seconds from 1 to the soak ({soak_s}), found {}",
                self.step_s
            ));
        }
        if !(self.alpha > 0.0 && self.alpha < 0.5) {
            return Err(format!(
                "gates.live.alpha: expected a level in (0, 0.5), found {}",
                self.alpha
            ));
        }
        if !(3..=10_000).contains(&self.min_samples) {
            return Err(format!(
                "gates.live.min_samples: expected 3 to 10000, found {}",
                self.min_samples
            ));
        }
        // Samples one window can hold: the soak and its extensions, one per step.
        let most = soak_s * f64::from(1 + self.max_extensions.min(10)) / self.step_s;
        if most < self.min_samples as f64 {
            return Err(format!(
                "gates.live.min_samples: {} samples per group cannot be had: the soak ({soak_s} s) and its {} extension(s) hold {} steps of {} s (lower step_s or min_samples, or lengthen the soak)",
                self.min_samples,
                self.max_extensions,
                most.floor(),
                self.step_s
            ));
        }
        if most > PROMETHEUS_MAX_POINTS {
            return Err(format!(
                "gates.live.step_s: the soak and its extensions make {} steps of {} s; Prometheus answers at most {PROMETHEUS_MAX_POINTS} points per query (raise step_s)",
                most.floor(),
                self.step_s
            ));
        }
        if self.max_extensions > 10 {
            return Err(format!(
                "gates.live.max_extensions: expected at most 10, found {}",
                self.max_extensions
            ));
        }
        if self.metrics.is_empty() {
            return Err("gates.live.metrics: expected at least one metric".into());
        }
        for (i, m) in self.metrics.iter().enumerate() {
            if !m.query.contains("{nodes}") {
                return Err(format!(
                    "gates.live.metrics[{i}].query: expected {{nodes}} where the group's node names go (e.g. node=~\"{{nodes}}\")"
                ));
            }
            if !(0.0..1.0).contains(&m.tolerance) {
                return Err(format!(
                    "gates.live.metrics[{i}].tolerance: expected a share in [0, 1), found {}",
                    m.tolerance
                ));
            }
            if !(m.absolute_tolerance.is_finite() && m.absolute_tolerance >= 0.0) {
                return Err(format!(
                    "gates.live.metrics[{i}].absolute_tolerance: expected a finite amount >= 0, found {}",
                    m.absolute_tolerance
                ));
            }
            if m.name.trim().is_empty() {
                return Err(format!("gates.live.metrics[{i}].name: expected a name"));
            }
        }
        Ok(())
    }
}

impl Policy {
    /// Reads and checks a policy file.
    pub fn load(path: &Path) -> Result<Policy, RolloutError> {
        let text =
            xirang_files::read_text(path, POLICY_LIMIT).map_err(|e| RolloutError::Read(Box::new(e)))?;
        Policy::parse(&text, path)
    }

    /// Parses and checks a policy's text; `path` names the file in errors, and relative
    /// benchmark paths are taken from its directory.
    pub fn parse(text: &str, path: &Path) -> Result<Policy, RolloutError> {
        let mut p: Policy =
            xirang_fabric::diag::parse_toml(text).map_err(|d| RolloutError::diag(path, &d))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        p.base_dir = std::fs::canonicalize(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &dir
        })
        .unwrap_or(dir);
        // A configuration's directory likewise, and its knobs are read now.
        if let Some(c) = &mut p.configuration {
            if !Path::new(&c.dir).is_absolute() {
                c.dir = p.base_dir.join(&c.dir).display().to_string();
            }
            c.knobs = crate::config::load_knobs(Path::new(&c.dir))?;
            c.target = crate::config::target(&c.knobs);
            c.patches = if c.switches {
                crate::config::load_switch_patches(Path::new(&c.dir))?
            } else {
                Vec::new()
            };
        }
        // Benchmark paths are relative to the policy file; made absolute now, because
        // the policy is stored with the rollout and used from any working directory.
        if let Some(b) = &mut p.gates.benchmark {
            for t in [&mut b.baseline, &mut b.result] {
                if !Path::new(t.as_str()).is_absolute() {
                    *t = p.base_dir.join(t.as_str()).display().to_string();
                }
            }
        }
        // Each message starts with the key it is about: point at its line.
        p.check()
            .map_err(|m| RolloutError::diag(path, &xirang_fabric::diag::keyed_message(text, &m)))?;
        Ok(p)
    }

    /// Semantic checks the TOML types cannot express.
    pub fn check(&self) -> Result<(), String> {
        self.check_change()?;
        self.check_stages()?;
        self.check_limits()?;
        self.check_gates()?;
        self.check_commands()
    }

    /// The change itself: firmware targets or a configuration, one of them, and each
    /// firmware target says which NICs it is for and is not among its own sources.
    fn check_change(&self) -> Result<(), String> {
        match (&self.configuration, self.firmware.is_empty()) {
            (None, true) => {
                return Err(
                    "expected at least one [[firmware]] target, or a [configuration] (a tuned configuration's directory)".into(),
                );
            }
            (Some(_), false) => {
                return Err(
                    "configuration: expected either [[firmware]] targets or a [configuration], not both (one change per rollout)".into(),
                );
            }
            _ => {}
        }
        for (i, f) in self.firmware.iter().enumerate() {
            if f.hca_type.is_none() && f.board_id.is_none() {
                return Err(format!(
                    "firmware[{i}]: expected `hca_type` or `board_id` (which NICs the target is for)"
                ));
            }
            for (k, v) in [("target", &f.target), ("image", &f.image)] {
                if v.trim().is_empty() {
                    return Err(format!(
                        "firmware[{i}].{k}: expected a {}, found an empty string",
                        if k == "target" {
                            "firmware version such as 16.35.2000"
                        } else {
                            "firmware image file"
                        }
                    ));
                }
            }
            if let Some(j) = f.allowed_from.iter().position(|v| v.trim().is_empty()) {
                return Err(format!(
                    "firmware[{i}].allowed_from[{j}]: expected a firmware version, found an empty string"
                ));
            }
            for (k, v) in [("hca_type", &f.hca_type), ("board_id", &f.board_id)] {
                if v.as_deref().is_some_and(|v| v.trim().is_empty()) {
                    return Err(format!(
                        "firmware[{i}].{k}: expected a NIC model, found an empty string"
                    ));
                }
            }
            // A NIC takes the first target that matches it: a second one for the same
            // model would be ignored without a word.
            if let Some(j) = self.firmware[..i].iter().position(|e| overlaps(e, f)) {
                return Err(format!(
                    "firmware[{i}]: expected one target per NIC model, found a second for {} (firmware[{j}] is for {}; a NIC of both would take firmware[{j}]'s {} and never this {})",
                    model(f),
                    model(&self.firmware[j]),
                    self.firmware[j].target,
                    f.target
                ));
            }
            if f.allowed_from.iter().any(|v| v == &f.target) {
                return Err(format!(
                    "firmware[{i}]: `allowed_from` contains the target {} itself",
                    f.target
                ));
            }
        }
        Ok(())
    }

    /// The stages' cumulative shares: finite, increasing, in (0, 1], the last every node.
    fn check_stages(&self) -> Result<(), String> {
        let fr = &self.stages.fractions;
        if fr.iter().any(|f| !f.is_finite()) {
            return Err(format!("stages.fractions: expected finite shares, found {fr:?}"));
        }
        if fr.is_empty() {
            return Err("stages.fractions: expected at least one stage".into());
        }
        for w in fr.windows(2) {
            if w[1] <= w[0] {
                return Err(format!(
                    "stages.fractions: expected increasing shares, found {} then {}",
                    w[0], w[1]
                ));
            }
        }
        if fr[0] <= 0.0 || (fr[fr.len() - 1] - 1.0).abs() > 1e-9 {
            return Err(format!(
                "stages.fractions: expected shares in (0, 1] ending with 1.0 (every node), found {fr:?}"
            ));
        }
        Ok(())
    }

    /// Each kind of domain's per-wave share is in (0, 1].
    fn check_limits(&self) -> Result<(), String> {
        for k in DomainKind::ALL {
            let s = self.limits.share(k);
            if !(s > 0.0 && s <= 1.0) {
                return Err(format!(
                    "limits.{}: expected a share in (0, 1], found {s}",
                    k.name()
                ));
            }
        }
        Ok(())
    }

    /// The gates: the soak's length, the benchmark's ratio, the live gates (a metric for
    /// every kind of wave, none for switches that are not rolled out), and no per-host
    /// benchmark when switches are.
    fn check_gates(&self) -> Result<(), String> {
        if !(self.gates.soak_s >= 0.0 && self.gates.soak_s <= MAX_SOAK_S) {
            return Err(format!(
                "gates.soak_s: expected seconds between 0 and {MAX_SOAK_S} (one day), found {}",
                self.gates.soak_s
            ));
        }
        // An error counter cannot rise faster than frames arrive: a limit above every
        // minimum-size frame of the fastest link over the soak could never be reached,
        // so the gate would pass whatever the NICs did.
        let most = (xirang_fabric::limits::MAX_LINK_RATE_GBPS * 1e9 / MIN_FRAME_BITS
            * self.gates.soak_s.max(1.0)) as u64;
        if self.gates.max_error_increase > most {
            return Err(format!(
                "gates.max_error_increase: expected at most {most} (every 64-byte frame of a 16 Tbit/s link over the soak, so the gate can trip), found {}",
                self.gates.max_error_increase
            ));
        }
        if let Some(b) = &self.gates.benchmark
            && !(b.min_ratio > 0.0 && b.min_ratio <= 2.0)
        {
            return Err(format!(
                "gates.benchmark.min_ratio: expected a ratio in (0, 2], found {}",
                b.min_ratio
            ));
        }
        if let Some(l) = &self.gates.live {
            l.check(self.gates.soak_s)?;
        }
        let switches = self.configuration.as_ref().is_some_and(|c| !c.patches.is_empty());
        if let Some(l) = &self.gates.live {
            // Every kind of wave is judged by some live metric: a wave without one would
            // pass its live gate untested.
            for (scope, present) in [(Scope::Hosts, true), (Scope::Switches, switches)] {
                if present && !l.metrics.iter().any(|m| m.scope == scope) {
                    return Err(format!(
                        "gates.live.metrics: expected at least one metric with scope = \"{}\" (the {} waves are judged by them)",
                        match scope {
                            Scope::Hosts => "hosts",
                            Scope::Switches => "switches",
                        },
                        match scope {
                            Scope::Hosts => "hosts'",
                            Scope::Switches => "configuration's switch",
                        }
                    ));
                }
            }
            if !switches && let Some(m) = l.metrics.iter().find(|m| m.scope == Scope::Switches) {
                return Err(format!(
                    "gates.live.metrics: `{}` has scope = \"switches\", but no switch patch is rolled out",
                    m.name
                ));
            }
        }
        if switches && self.gates.benchmark.is_some() {
            return Err(
                "gates.benchmark: a per-host benchmark cannot judge a switch; with switch patches, gate on [gates.live] metrics".into(),
            );
        }
        Ok(())
    }

    /// The command and path templates: each parses, the per-node ones use `{node}`
    /// only, the flash and rollback commands reach the node and use the placeholders of
    /// their kind of change, and the switch commands fit the switch patches.
    fn check_commands(&self) -> Result<(), String> {
        let templates = vec![
            ("commands.flash", self.commands.flash.as_str()),
            ("commands.rollback", self.commands.rollback.as_str()),
        ];
        if !(1..=MAX_PARALLEL).contains(&self.commands.parallel) {
            return Err(format!(
                "commands.parallel: expected 1..={MAX_PARALLEL} commands at once, found {}",
                self.commands.parallel
            ));
        }
        // `collect` and the benchmark templates are per node: `{node}` only.
        let mut per_node: Vec<(&str, &str)> = Vec::new();
        if let Some(c) = &self.commands.collect {
            per_node.push(("commands.collect", c));
        }
        if let Some(b) = &self.gates.benchmark {
            per_node.push(("gates.benchmark.baseline", &b.baseline));
            per_node.push(("gates.benchmark.result", &b.result));
            if let Some(c) = &b.command {
                per_node.push(("gates.benchmark.command", c));
            }
        }
        for (key, t) in per_node.iter().chain(&templates) {
            if key.ends_with(".baseline") || key.ends_with(".result") {
                continue;
            }
            Template::parse(t, PLACEHOLDERS).map_err(|e| format!("{key}: {e}"))?;
        }
        for (key, t) in per_node {
            if t.trim().is_empty() {
                return Err(format!(
                    "{key}: expected a command or path, found an empty string"
                ));
            }
            if let Some(name) = unknown_placeholder(t).or_else(|| placeholder_not_in(t, &["node"])) {
                return Err(format!(
                    "{key}: placeholder {{{name}}} cannot be used here; expected only {{node}}"
                ));
            }
        }
        if self.configuration.is_some() {
            // Each NIC has its interface and its rollback file: a command without
            // `{netdev}` would run the same thing for every NIC of a node.
            for (key, t) in &templates {
                if !t.contains("{netdev}") {
                    return Err(format!(
                        "{key}: expected {{netdev}} in a configuration's command (the script is applied per interface)"
                    ));
                }
            }
        } else {
            for (key, t) in &templates {
                if t.contains("{netdev}") || t.contains("{dir}") {
                    return Err(format!(
                        "{key}: {{netdev}} and {{dir}} are a configuration's placeholders; a firmware command has {{image}}"
                    ));
                }
            }
        }
        self.check_switch_commands()?;
        for (key, t) in &templates {
            if t.trim().is_empty() {
                return Err(format!("{key}: expected a command, found an empty string"));
            }
            if !t.contains("{node}") {
                return Err(format!(
                    "{key}: expected {{node}} in the command: it runs on this machine and must reach the node (for example `ssh {{node}} ...`)"
                ));
            }
        }
        for (key, t) in templates {
            if let Some(name) = unknown_placeholder(t) {
                return Err(format!(
                    "{key}: unknown placeholder {{{name}}}; expected one of {}",
                    PLACEHOLDERS
                        .iter()
                        .map(|p| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
            }
        }
        Ok(())
    }

    /// The switch commands: both present exactly when switch patches are rolled out,
    /// each reaching its switch, with a switch's placeholders only.
    fn check_switch_commands(&self) -> Result<(), String> {
        let cmds = [
            (
                "commands.switch_apply",
                &self.commands.switch_apply,
                SWITCH_PLACEHOLDERS,
            ),
            (
                "commands.switch_rollback",
                &self.commands.switch_rollback,
                SWITCH_PLACEHOLDERS,
            ),
            (
                "commands.switch_collect",
                &self.commands.switch_collect,
                &["node"][..],
            ),
        ];
        let patches: Vec<&str> = self
            .configuration
            .iter()
            .flat_map(|c| c.patches.iter().map(|p| p.file.as_str()))
            .collect();
        for (key, t, allowed) in cmds {
            match (t, patches.is_empty()) {
                (None, false) => {
                    return Err(format!(
                        "{key}: expected a command: the configuration has {} (or set `switches = false` under [configuration] to roll out the hosts only)",
                        patches.join(", ")
                    ));
                }
                (Some(_), true) => {
                    return Err(format!(
                        "{key}: no switch patch is rolled out (a configuration with sonic-TIER.patch.json and `switches` on); remove it"
                    ));
                }
                (Some(t), false) => {
                    if t.trim().is_empty() {
                        return Err(format!("{key}: expected a command, found an empty string"));
                    }
                    Template::parse(t, allowed).map_err(|e| format!("{key}: {e}"))?;
                    if !t.contains("{node}") {
                        return Err(format!(
                            "{key}: expected {{node}} in the command: it runs on this machine and must reach the switch (for example `ssh {{node}} ...`)"
                        ));
                    }
                    if let Some(name) = placeholder_not_in(t, allowed) {
                        return Err(format!(
                            "{key}: placeholder {{{name}}} cannot be used here; expected {}",
                            allowed
                                .iter()
                                .map(|p| format!("{{{p}}}"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        ));
                    }
                }
                (None, true) => {}
            }
        }
        Ok(())
    }

    /// The rule for a NIC, if any.
    pub fn target_for(&self, nic: &Nic) -> Option<&FirmwareTarget> {
        self.firmware.iter().find(|f| f.matches(nic))
    }

    /// A path template filled for a node, relative to the policy's directory.
    pub fn path_for(&self, template: &str, node: &str) -> PathBuf {
        let p = PathBuf::from(template.replace("{node}", node));
        if p.is_absolute() { p } else { self.base_dir.join(p) }
    }
}
