//! What a scenario says about tuning it: the objective's weights, the constraints, the
//! seeds and the search space. The search itself lives in `xirang-tune`; this module owns
//! the declarations, their checks, and how a named parameter reads and writes a
//! [`FabricConfig`].
//!
//! A parameter is named by its path in the configuration as written in scenario files
//! (`classes.training.dcqcn.rpg_ai_rate_mbps`, `ecn.leaf.kmin_bytes`,
//! `transport.qps_per_connection`), so any numeric setting can be searched. Two names are
//! not plain paths: `classes.<class>.cc` picks the congestion-control algorithm
//! (`dcqcn`, `timely`, `hpcc` or `dctcp`), and `ecn.<tier>.kmax_ratio` sets Kmax as a multiple of Kmin so
//! that a search cannot put Kmax below Kmin. Values are read and written in place through
//! [`crate::settings`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{CcAlgorithm, FabricConfig};
use crate::model::Tier;

/// The `[tune]` section of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TuneSpec {
    /// Candidate settings to try (each first judged by a short run).
    pub budget: u32,
    /// Seed of the search (which candidates it proposes), independent of the run seeds.
    pub seed: u64,
    /// Run seeds every candidate that reaches the last round is judged on.
    pub search_seeds: u32,
    /// Further run seeds, never used during the search, on which the result is reported.
    pub held_out_seeds: u32,
    /// Weight of each traffic class in the objective; empty: 1 for every class that has
    /// a workload. A class's metric follows its workloads: collective completion time,
    /// inference p99/p99.9 latency, FCT slowdown for other flows.
    pub weights: BTreeMap<String, f64>,
    /// How much worse than the vendor baseline each class's metric may get, as a share
    /// (0.01: 1 %); classes not listed get [`DEFAULT_GUARDRAIL`]. A candidate past a
    /// guardrail is not recommended.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub guardrails: BTreeMap<String, f64>,
    /// Largest share of the run during which PFC may hold a port paused, summed over ports
    /// and divided by the number of ports (a constraint, not an objective).
    pub max_pause_ratio: f64,
    /// Include the built-in search space.
    pub builtin_space: bool,
    /// Algorithms the fabric can run, which the built-in space chooses from per class:
    /// HPCC needs switches and NICs with in-band network telemetry, DCTCP a host transport
    /// that implements it. Default `dcqcn` and `timely`.
    #[serde(skip_serializing_if = "is_default_algorithms")]
    pub algorithms: Vec<CcAlgorithm>,
    /// Parameters to add to the search space, or to narrow built-in ones of the same name.
    #[serde(rename = "param", skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<ParamSpec>,
    /// Held-out seeds each point of the sensitivity sweeps is run on, at most
    /// `held_out_seeds` (0: no sweeps).
    pub sensitivity_seeds: u32,
    /// Measure the seeds' effect first: the vendor's and the baselines' figures on up to
    /// four seeds the tune runs anyway, and where none moves by more than the smallest
    /// effect a tune claims, every seed set cut to two (one per sweep point). `false`
    /// runs every seed set at its full size.
    #[serde(skip_serializing_if = "is_true")]
    pub seed_pilot: bool,
    /// Wall-time budget of the search, seconds: no bracket starts after it is spent (the
    /// ablation, held-out evaluation and report still run). Set by `xirang tune --time`,
    /// never by a scenario file; a budgeted search depends on the machine's speed.
    #[serde(skip)]
    pub time_budget_s: Option<f64>,
}

/// Candidates tried by default: small enough that `xirang tune` runs in under two
/// minutes on two cores (BENCHMARKS.md).
pub const DEFAULT_BUDGET: u32 = 96;
/// Default run seeds of the search: the last round judges on all of them. ECMP hashing
/// and request arrivals change with the seed, and the default scenario's inference p99
/// moves by about 20% from seed to seed under the same settings (VALIDATION.md), so a
/// settings change is only visible over many seeds.
pub const DEFAULT_SEARCH_SEEDS: u32 = 12;
/// Default held-out seeds.
pub const DEFAULT_HELD_OUT_SEEDS: u32 = 16;
/// Default guardrail: a class's metric may get 1 % worse than the vendor's, no more
/// (issue 19: an operator will not deploy a change that hurts a service it does not
/// target).
pub const DEFAULT_GUARDRAIL: f64 = 0.01;
/// Default seeds per point of the sensitivity sweeps: a sweep shows where a cliff lies
/// (a class tens of percent worse), not a 1 % difference, so a few seeds suffice; with
/// the default scenario's six settings swept this adds about a tenth to a tune.
pub const DEFAULT_SENSITIVITY_SEEDS: u32 = 3;

impl TuneSpec {
    /// The guardrail of `class`: its tolerance, or the default.
    pub fn guardrail(&self, class: &str) -> f64 {
        self.guardrails.get(class).copied().unwrap_or(DEFAULT_GUARDRAIL)
    }
}

/// Default pause budget: 5% of the time of an average port.
pub const DEFAULT_MAX_PAUSE_RATIO: f64 = 0.05;

pub use crate::limits::{MAX_BUDGET, MAX_SEEDS};

impl Default for TuneSpec {
    fn default() -> Self {
        TuneSpec {
            budget: DEFAULT_BUDGET,
            seed: 1,
            search_seeds: DEFAULT_SEARCH_SEEDS,
            held_out_seeds: DEFAULT_HELD_OUT_SEEDS,
            weights: BTreeMap::new(),
            guardrails: BTreeMap::new(),
            max_pause_ratio: DEFAULT_MAX_PAUSE_RATIO,
            builtin_space: true,
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            params: Vec::new(),
            sensitivity_seeds: DEFAULT_SENSITIVITY_SEEDS,
            seed_pilot: true,
            time_budget_s: None,
        }
    }
}

/// Algorithms a tune chooses from unless the scenario says its fabric runs others:
/// DCQCN (mlx5 firmware, SONiC ECN) and TIMELY (MISSION 2.1).
pub const DEFAULT_ALGORITHMS: [CcAlgorithm; 2] = [CcAlgorithm::Dcqcn, CcAlgorithm::Timely];

fn is_default_algorithms(a: &[CcAlgorithm]) -> bool {
    a == DEFAULT_ALGORITHMS
}

fn is_true(b: &bool) -> bool {
    *b
}

/// One searched parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// Path in the configuration (see the module documentation).
    pub name: String,
    /// Lower bound (numeric parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Upper bound (numeric parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Search the logarithm (for ranges spanning orders of magnitude).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log: bool,
    /// Values to choose from (`classes.<class>.cc`: `dcqcn`, `timely`, `hpcc`, `dctcp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

/// What kind of value a parameter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A whole number.
    Integer,
    /// A real number.
    Real,
    /// One of the congestion-control algorithms.
    Algorithm,
}

/// A parameter's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// A number (rounded for integer parameters).
    Number(f64),
    /// A choice.
    Choice(String),
}

impl std::fmt::Display for ParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::Number(x) if x.fract() == 0.0 && x.abs() < 1e15 => write!(f, "{}", *x as i64),
            ParamValue::Number(x) => write!(f, "{x}"),
            ParamValue::Choice(c) => f.write_str(c),
        }
    }
}

/// Algorithms a search may choose. `none` only when a scenario lists it in
/// `[tune] algorithms` (never by default): DeepEP advises no congestion control for its
/// all-to-all traffic on a lossless fabric (docs/reference/llm-inference-traffic.md §1),
/// and the constraints (lossless drops, pause budget) and guardrails judge what it does to
/// the other classes.
pub const SEARCHABLE_ALGORITHMS: [CcAlgorithm; 5] = [
    CcAlgorithm::Dcqcn,
    CcAlgorithm::Timely,
    CcAlgorithm::Hpcc,
    CcAlgorithm::Dctcp,
    CcAlgorithm::None,
];

fn tier_of(name: &str) -> Option<Tier> {
    Tier::ALL.into_iter().find(|t| t.as_str() == name)
}

/// The kind of parameter `name` is, on a fabric with switches of `tiers`, or why it is
/// not one.
pub fn param_kind(config: &FabricConfig, tiers: &[Tier], name: &str) -> Result<ParamKind, String> {
    let segs: Vec<&str> = name.split('.').collect();
    if let ["classes", class, "cc"] = segs.as_slice() {
        return if config.classes.contains_key(*class) {
            Ok(ParamKind::Algorithm)
        } else {
            Err(format!(
                "no traffic class `{class}` (classes: {})",
                config.classes.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        };
    }
    if let ["ecn", tier, rest] = segs.as_slice() {
        let Some(t) = tier_of(tier) else {
            return Err(format!("`{tier}` is not a switch tier (leaf, spine, core)"));
        };
        if !tiers.contains(&t) {
            return Err(format!("this topology has no `{tier}` switches"));
        }
        if *rest == "kmax_ratio" {
            return Ok(ParamKind::Real);
        }
    }
    let mut c = config.clone();
    crate::settings::with_num(&mut c, tiers, name, |n| {
        if n.is_integer() {
            ParamKind::Integer
        } else {
            ParamKind::Real
        }
    })
}

/// Sets parameters on a copy of `config`, in order; `ecn.<tier>.kmax_ratio` after the
/// others, so that it applies to the final Kmin.
pub fn apply(
    config: &FabricConfig,
    tiers: &[Tier],
    values: &[(String, ParamValue)],
) -> Result<FabricConfig, String> {
    let mut out = config.clone();
    // Every tier of the fabric gets its profile written out, so that a candidate names
    // the ECN thresholds it runs with whether or not the scenario gave them.
    for t in tiers {
        out.ecn.set(*t, out.ecn.profile(*t));
    }
    let mut algorithms: Vec<(&str, CcAlgorithm)> = Vec::new();
    let mut ratios: Vec<(&str, f64)> = Vec::new();
    for (name, value) in values {
        let segs: Vec<&str> = name.split('.').collect();
        match (segs.as_slice(), value) {
            (["classes", class, "cc"], ParamValue::Choice(c)) => {
                let a = SEARCHABLE_ALGORITHMS
                    .into_iter()
                    .find(|a| a.as_str() == c)
                    .ok_or_else(|| {
                        format!(
                            "{name}: `{c}` is not one of {}",
                            SEARCHABLE_ALGORITHMS.map(|a| a.as_str()).join(", ")
                        )
                    })?;
                algorithms.push((class, a));
            }
            (["ecn", tier, "kmax_ratio"], ParamValue::Number(r)) => ratios.push((tier, *r)),
            (_, ParamValue::Number(x)) => {
                crate::settings::with_num(&mut out, tiers, name, |n| n.set(*x))?
                    .map_err(|e| format!("{name}: {e}"))?;
            }
            (_, ParamValue::Choice(c)) => return Err(format!("{name}: expected a number, found `{c}`")),
        }
    }
    for (class, a) in algorithms {
        out.classes
            .get_mut(class)
            .ok_or_else(|| format!("no traffic class `{class}`"))?
            .cc = a;
    }
    for (tier, r) in ratios {
        let t = tier_of(tier).ok_or_else(|| format!("`{tier}` is not a switch tier"))?;
        let mut p = out.ecn.profile(t);
        p.kmax_bytes = ((p.kmin_bytes as f64) * r.max(1.0)).round() as u64;
        out.ecn.set(t, p);
    }
    Ok(out)
}

/// The value `config` has for parameter `name` (what a baseline or the current setting
/// is, in the search's terms).
pub fn value_of(config: &FabricConfig, tiers: &[Tier], name: &str) -> Option<ParamValue> {
    let segs: Vec<&str> = name.split('.').collect();
    match segs.as_slice() {
        ["classes", class, "cc"] => config
            .classes
            .get(*class)
            .map(|c| ParamValue::Choice(c.cc.as_str().to_string())),
        ["ecn", tier, "kmax_ratio"] => {
            let p = config.ecn.profile(tier_of(tier)?);
            Some(ParamValue::Number(
                p.kmax_bytes as f64 / p.kmin_bytes.max(1) as f64,
            ))
        }
        _ => {
            crate::settings::with_num(&mut config.clone(), tiers, name, |n| ParamValue::Number(n.get())).ok()
        }
    }
}
