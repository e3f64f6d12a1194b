//! The search space: which settings the tuner moves, over which ranges, and the baselines
//! it always compares against.

use serde::Serialize;
use xirang_fabric::Loaded;
use xirang_fabric::config::{
    CcAlgorithm, DcqcnParams, DctcpParams, EcnConfig, FabricConfig, HpccParams, RedProfile, TimelyParams,
    TransportConfig,
};
use xirang_fabric::model::Tier;
use xirang_fabric::tune::{ParamKind, ParamSpec, ParamValue, param_kind};

/// How a parameter is searched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Domain {
    /// A number in `[lo, hi]`, on a log scale if `log`, a multiple of `step` if it has
    /// one.
    Number {
        /// Lower bound.
        lo: f64,
        /// Upper bound.
        hi: f64,
        /// Search the logarithm.
        log: bool,
        /// The device's resolution (1 for whole numbers): the search only proposes values
        /// the device takes, so what it judged is what is deployed.
        step: Option<f64>,
    },
    /// One of these values.
    Choice(Vec<String>),
}

/// One searched parameter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Param {
    /// Configuration path (see `xirang_fabric::tune`).
    pub name: String,
    /// Range.
    pub domain: Domain,
    /// Why this range (the reference it comes from).
    pub source: &'static str,
}

impl Param {
    /// The value at position `u` in [0, 1) along the domain (on its log scale if it has
    /// one; the n-th of n choices for `u` in [n/k, (n+1)/k)).
    pub fn at(&self, u: f64) -> ParamValue {
        let u = u.clamp(0.0, 1.0);
        match &self.domain {
            Domain::Number { lo, hi, log, .. } => ParamValue::Number(if *log {
                (lo.ln() + u * (hi.ln() - lo.ln())).exp()
            } else {
                lo + u * (hi - lo)
            }),
            Domain::Choice(c) => {
                ParamValue::Choice(c[((u * c.len() as f64) as usize).min(c.len() - 1)].clone())
            }
        }
    }

    /// Where `v` lies along the domain, in [0, 1]: the inverse of [`Param::at`] (a choice
    /// at the middle of its share).
    pub fn position(&self, v: &ParamValue) -> f64 {
        let u = match (&self.domain, v) {
            (Domain::Number { lo, hi, log, .. }, ParamValue::Number(x)) => {
                if hi <= lo {
                    0.0
                } else if *log {
                    (x.ln() - lo.ln()) / (hi.ln() - lo.ln())
                } else {
                    (x - lo) / (hi - lo)
                }
            }
            (Domain::Choice(c), ParamValue::Choice(s)) => match c.iter().position(|x| x == s) {
                Some(i) => (i as f64 + 0.5) / c.len() as f64,
                None => 0.0,
            },
            _ => 0.0,
        };
        if u.is_finite() { u.clamp(0.0, 1.0) } else { 0.0 }
    }

    /// Clamps and rounds a value into the domain.
    pub fn normalize(&self, v: &ParamValue) -> ParamValue {
        match (&self.domain, v) {
            (Domain::Number { lo, hi, step, .. }, ParamValue::Number(x)) => {
                let x = x.clamp(*lo, *hi);
                ParamValue::Number(match step {
                    Some(q) => {
                        // Rounding may step past a bound that is not a multiple of the
                        // step: then the nearest multiple inside.
                        let r = quantize(x, *q);
                        if r > *hi {
                            quantize(r - q, *q)
                        } else if r < *lo {
                            quantize(r + q, *q)
                        } else {
                            r
                        }
                    }
                    None => x,
                })
            }
            (Domain::Choice(c), ParamValue::Choice(s)) if c.contains(s) => v.clone(),
            (Domain::Choice(c), _) => ParamValue::Choice(c[0].clone()),
            (Domain::Number { lo, .. }, ParamValue::Choice(_)) => ParamValue::Number(*lo),
        }
    }
}

/// `x` rounded to a multiple of `step`; for steps below one, computed as a whole number of
/// `1/step`ths so that 0.17 is written `0.17`, not `0.17000000000000001`.
fn quantize(x: f64, step: f64) -> f64 {
    if step >= 1.0 {
        (x / step).round() * step
    } else {
        let per_unit = (1.0 / step).round();
        (x * per_unit).round() / per_unit
    }
}

/// The resolution a setting is deployed with, by its path's last segment (`None`: the
/// setting is simulator-only or continuous). Whole numbers for the firmware's fields
/// (their kind says so); WRED's drop probability is a whole percent in SONiC's
/// WRED_PROFILE (docs/reference/switch-config.md, `green_drop_probability`), and Kmax's ratio to
/// Kmin is kept to two decimals (the renderer writes Kmax in whole bytes). TIMELY's
/// thresholds are stated in whole microseconds and its beta in hundredths (TIMELY
/// paper: T_low 50 µs, T_high 500 µs, beta 0.8), HPCC's eta in whole percent (95 %), the
/// additive increases in whole Mbit/s, DCTCP's g in 256ths (1/16 in the HPCC simulator;
/// the range's own lower bound is 1/256).
pub fn device_step(name: &str, kind: ParamKind) -> Option<f64> {
    if kind == ParamKind::Integer {
        return Some(1.0);
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    let parent = name.rsplit('.').nth(1).unwrap_or("");
    match (parent, last) {
        (_, "pmax" | "kmax_ratio") => Some(0.01),
        ("timely", "t_low_us" | "t_high_us") => Some(1.0),
        ("timely", "beta") | ("hpcc", "eta") => Some(0.01),
        (_, "add_step_mbps" | "ai_mbps") => Some(1.0),
        ("dctcp", "g") => Some(1.0 / 256.0),
        _ => None,
    }
}

/// A named range (one line of the built-in space), at the setting's device resolution
/// (whole numbers if `integer`).
fn num(name: String, lo: f64, hi: f64, log: bool, integer: bool, source: &'static str) -> Param {
    let kind = if integer {
        ParamKind::Integer
    } else {
        ParamKind::Real
    };
    let step = device_step(&name, kind);
    Param {
        name,
        domain: Domain::Number { lo, hi, log, step },
        source,
    }
}

/// Classes whose congestion control is worth searching: those some workload uses.
fn active_classes(loaded: &Loaded) -> Vec<String> {
    let mut v: Vec<String> = loaded
        .scenario
        .workloads
        .values()
        .map(|w| w.class().to_string())
        .filter(|c| loaded.scenario.config.classes.contains_key(c))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The built-in space for a scenario: per used class the algorithm and its main knobs,
/// per switch tier the RED/ECN profile, and QPs per connection. Ranges:
/// docs/reference/congestion-control.md §1.4-1.5 (DCQCN: firmware defaults, paper
/// values, the published tuning ranges), §2 (TIMELY), §5 (ECN thresholds from 5 KB to
/// SONiC's 2 MB); docs/reference/collectives-and-nccl.md §5 (QPs per connection).
pub fn builtin(loaded: &Loaded) -> Vec<Param> {
    const DCQCN: &str =
        "docs/reference/congestion-control.md §1.4-1.5 (firmware default, DCQCN paper, published tuning)";
    const TIMELY: &str = "docs/reference/congestion-control.md §2 (TIMELY paper and HPCC simulator)";
    const ECN: &str = "docs/reference/congestion-control.md §5 (5 KB in the DCQCN paper to SONiC's 2 MB)";
    const HPCC: &str = "docs/reference/congestion-control.md §3 (HPCC paper: eta 95 %, maxStage 5; the HPCC simulator: maxStage 0, AI 40 Mbit/s at 100 Gbit/s)";
    const DCTCP: &str =
        "docs/reference/reference-scenarios.md (the HPCC simulator's DCTCP: g 1/16, AI 615 Mbit/s)";
    let algorithms = &loaded.scenario.tune.algorithms;
    let runs = |a: CcAlgorithm| algorithms.contains(&a);
    let mut v = Vec::new();
    for c in active_classes(loaded) {
        let p = |k: &str| format!("classes.{c}.{k}");
        v.push(Param {
            name: p("cc"),
            domain: Domain::Choice(algorithms.iter().map(|a| a.as_str().to_string()).collect()),
            source: "MISSION 2.1: an algorithm per traffic class, among those the fabric runs ([tune] algorithms)",
        });
        // The firmware takes whole numbers (µs, Mbit/s, percent): the search does too, so
        // that what it judged is what `mlx5-congestion.sh` writes.
        let dcqcn = [
            ("rpg_time_reset_us", 10.0, 300.0, true),
            ("rpg_ai_rate_mbps", 1.0, 200.0, true),
            ("rpg_hai_rate_mbps", 10.0, 1000.0, true),
            ("rpg_min_dec_fac_pct", 50.0, 99.0, false),
            ("dce_tcp_g", 768.0, 1023.0, false),
            ("min_time_between_cnps_us", 1.0, 50.0, true),
            ("rate_reduce_monitor_period_us", 1.0, 50.0, true),
            ("rpg_threshold", 1.0, 31.0, false),
        ];
        for (k, lo, hi, log) in dcqcn {
            v.push(num(p(&format!("dcqcn.{k}")), lo, hi, log, true, DCQCN));
        }
        v.push(num(p("timely.t_low_us"), 5.0, 50.0, true, false, TIMELY));
        v.push(num(p("timely.t_high_us"), 50.0, 1000.0, true, false, TIMELY));
        v.push(num(p("timely.beta"), 0.1, 0.9, false, false, TIMELY));
        v.push(num(p("timely.add_step_mbps"), 10.0, 1000.0, true, false, TIMELY));
        if runs(CcAlgorithm::Hpcc) {
            v.push(num(p("hpcc.eta"), 0.8, 0.99, false, false, HPCC));
            v.push(num(p("hpcc.max_stage"), 0.0, 5.0, false, true, HPCC));
            v.push(num(p("hpcc.ai_mbps"), 5.0, 400.0, true, false, HPCC));
        }
        if runs(CcAlgorithm::Dctcp) {
            v.push(num(p("dctcp.g"), 1.0 / 256.0, 0.25, true, false, DCTCP));
            v.push(num(p("dctcp.ai_mbps"), 50.0, 2000.0, true, false, DCTCP));
        }
    }
    for t in loaded.fabric.tiers() {
        let p = |k: &str| format!("ecn.{}.{k}", t.as_str());
        v.push(num(p("kmin_bytes"), 5_000.0, 2_000_000.0, true, true, ECN));
        v.push(num(p("kmax_ratio"), 1.5, 20.0, true, false, ECN));
        v.push(num(p("pmax"), 0.01, 1.0, true, false, ECN));
    }
    v.push(num(
        "transport.qps_per_connection".into(),
        1.0,
        8.0,
        false,
        true,
        "docs/reference/collectives-and-nccl.md §5 (NCCL_IB_QPS_PER_CONNECTION)",
    ));
    v
}

/// The scenario's space: the built-in one (unless switched off) with the scenario's
/// `[[tune.param]]` entries replacing built-in ones of the same name or added after them.
pub fn space(loaded: &Loaded) -> Vec<Param> {
    let spec = &loaded.scenario.tune;
    let mut v = if spec.builtin_space {
        builtin(loaded)
    } else {
        Vec::new()
    };
    let tiers = loaded.fabric.tiers();
    for p in &spec.params {
        let param = from_spec(&loaded.scenario.config, &tiers, p, &spec.algorithms);
        match v.iter_mut().find(|x| x.name == p.name) {
            Some(slot) => *slot = param,
            None => v.push(param),
        }
    }
    v
}

fn from_spec(config: &FabricConfig, tiers: &[Tier], p: &ParamSpec, algorithms: &[CcAlgorithm]) -> Param {
    // The scenario was validated: the kind resolves and numeric ranges are present.
    let kind = param_kind(config, tiers, &p.name).unwrap_or(ParamKind::Real);
    let domain = match kind {
        ParamKind::Algorithm => Domain::Choice(if p.choices.is_empty() {
            algorithms.iter().map(|a| a.as_str().to_string()).collect()
        } else {
            p.choices.clone()
        }),
        _ => Domain::Number {
            lo: p.min.unwrap_or(0.0),
            hi: p.max.unwrap_or(1.0),
            log: p.log,
            step: device_step(&p.name, kind),
        },
    };
    Param {
        name: p.name.clone(),
        domain,
        source: "the scenario's [[tune.param]]",
    }
}

/// A named reference configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// Short name (`vendor`, `paper`, `scenario`).
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// The configuration.
    pub config: FabricConfig,
}

/// The vendor baseline: every used class on DCQCN with the mlx5 firmware defaults
/// (docs/reference/congestion-control.md §1.5), TIMELY parameters at their defaults, SONiC's
/// default WRED profile on every tier (§5), one QP per connection (NCCL's default). This is the
/// objective's reference: it scores 1.0.
pub fn vendor(config: &FabricConfig) -> FabricConfig {
    let mut c = config.clone();
    for class in c.classes.values_mut() {
        class.cc = CcAlgorithm::Dcqcn;
        class.dcqcn = DcqcnParams::default();
        class.timely = TimelyParams::default();
        class.hpcc = HpccParams::default();
        class.dctcp = DctcpParams::default();
    }
    c.ecn = EcnConfig::default();
    c.transport.qps_per_connection = TransportConfig::default().qps_per_connection;
    c
}

/// DCQCN paper (Zhu et al. 2015, docs/reference/congestion-control.md §1.4): g = 1/256 (G = 1020),
/// CNP interval 50 µs, alpha and rate timers 55 µs, byte counter 10 MB, F = 5, R_AI 40 Mbit/s,
/// RED 5 KB / 200 KB / 1% on every tier. R_HAI is unconfirmed there and keeps the firmware
/// value.
pub fn paper(config: &FabricConfig, tiers: &[Tier]) -> FabricConfig {
    let mut c = vendor(config);
    for class in c.classes.values_mut() {
        let d = &mut class.dcqcn;
        d.dce_tcp_g = 1020;
        d.min_time_between_cnps_us = 50.0;
        d.dce_tcp_rtt_us = 55.0;
        d.rpg_time_reset_us = 55.0;
        d.rpg_byte_reset_bytes = 10_000_000;
        d.rpg_threshold = 5;
        d.rpg_ai_rate_mbps = 40.0;
    }
    let red = RedProfile {
        enabled: true,
        kmin_bytes: 5_000,
        kmax_bytes: 200_000,
        pmax: 0.01,
    };
    c.ecn = EcnConfig::default();
    for t in tiers {
        c.ecn.set(*t, red);
    }
    c
}

/// Gbit/s of the fastest link on a tier's switches (an ECN threshold scaled "by the port's
/// rate" takes the tier's fastest port: its queues fill fastest).
fn tier_rate_gbps(fabric: &xirang_fabric::model::Fabric, tier: Tier) -> f64 {
    use xirang_fabric::model::Node;
    fabric
        .links
        .iter()
        .filter(|l| {
            [l.a.node, l.b.node]
                .iter()
                .any(|n| matches!(n, Node::Switch(s) if fabric.switches[s.index()].tier == tier))
        })
        .map(|l| l.rate_gbps)
        .fold(0.0, f64::max)
}

/// ECN thresholds per 25 Gbit/s of port rate in Alibaba's production DCQCN setting, as the
/// HPCC authors quote it (alibaba-edu/High-Precision-Congestion-Control issue 21: Kmin
/// 100 KB, Kmax 400 KB per 25G, Pmax 20 %); the HPCC simulator's run.py uses the same
/// (400/1600 KB at 100G).
const PRODUCTION_KMIN_BYTES_PER_25G: f64 = 100_000.0;
const PRODUCTION_KMAX_BYTES_PER_25G: f64 = 400_000.0;
const PRODUCTION_PMAX: f64 = 0.2;
/// The HPCC simulator's DCQCN (run.py): additive increase 5 Mbit/s and hyper increase
/// 50 Mbit/s per 25 Gbit/s of NIC rate, rate-increase timer 300 us.
const HPCC_SIM_AI_MBPS_PER_25G: f64 = 5.0;
const HPCC_SIM_HAI_MBPS_PER_25G: f64 = 50.0;
const HPCC_SIM_RATE_TIMER_US: f64 = 300.0;

/// Alibaba's production ECN setting (see the constants) on every tier, scaled by each
/// tier's port rate, with the vendor's DCQCN.
pub fn production_ecn(config: &FabricConfig, fabric: &xirang_fabric::model::Fabric) -> FabricConfig {
    let mut c = vendor(config);
    for t in fabric.tiers() {
        let scale = tier_rate_gbps(fabric, t) / 25.0;
        c.ecn.set(
            t,
            RedProfile {
                enabled: true,
                kmin_bytes: (PRODUCTION_KMIN_BYTES_PER_25G * scale) as u64,
                kmax_bytes: (PRODUCTION_KMAX_BYTES_PER_25G * scale) as u64,
                pmax: PRODUCTION_PMAX,
            },
        );
    }
    c
}

/// The HPCC simulator's DCQCN setting (run.py): the production ECN thresholds and its
/// DCQCN increase steps scaled by the NIC rate.
pub fn hpcc_simulator(config: &FabricConfig, fabric: &xirang_fabric::model::Fabric) -> FabricConfig {
    let mut c = production_ecn(config, fabric);
    let nic_gbps = fabric
        .nics
        .iter()
        .flat_map(|n| {
            n.ports
                .iter()
                .filter_map(|p| p.link.map(|l| fabric.links[l.index()].rate_gbps))
        })
        .fold(0.0, f64::max);
    let scale = nic_gbps / 25.0;
    for class in c.classes.values_mut() {
        class.dcqcn.rpg_ai_rate_mbps = HPCC_SIM_AI_MBPS_PER_25G * scale;
        class.dcqcn.rpg_hai_rate_mbps = HPCC_SIM_HAI_MBPS_PER_25G * scale;
        class.dcqcn.rpg_time_reset_us = HPCC_SIM_RATE_TIMER_US;
    }
    c
}

/// The baselines every tune evaluates: vendor, paper, the scenario as written, Alibaba's
/// production ECN and the HPCC simulator's DCQCN.
pub fn baselines(loaded: &Loaded) -> Vec<Baseline> {
    let config = &loaded.scenario.config;
    let tiers = loaded.fabric.tiers();
    vec![
        Baseline {
            name: "vendor",
            description: "mlx5 firmware DCQCN defaults, SONiC default WRED, 1 QP per connection",
            config: vendor(config),
        },
        Baseline {
            name: "paper",
            description: "DCQCN paper parameters and RED thresholds (Zhu et al. 2015)",
            config: paper(config, &tiers),
        },
        Baseline {
            name: "scenario",
            description: "the scenario's own configuration",
            config: config.clone(),
        },
        Baseline {
            name: "production",
            description: "Alibaba's production ECN (Kmin/Kmax 100/400 KB per 25G, Pmax 20 %; HPCC authors, alibaba-edu/High-Precision-Congestion-Control issue 21) with vendor DCQCN",
            config: production_ecn(config, &loaded.fabric),
        },
        Baseline {
            name: "hpcc-sim",
            description: "the HPCC simulator's DCQCN (run.py: production ECN, AI/HAI 5/50 Mbit/s per 25G, 300 us timer)",
            config: hpcc_simulator(config, &loaded.fabric),
        },
    ]
}

/// `values` with every parameter of an algorithm a class does not use set back to
/// `vendor`'s value: a recommendation should change only what takes effect (DCQCN knobs
/// of a class on TIMELY do nothing, and writing them to NICs would only confuse).
pub fn effective(
    values: &[(String, ParamValue)],
    vendor: &[(String, ParamValue)],
) -> Vec<(String, ParamValue)> {
    let algorithm = |class: &str| {
        values
            .iter()
            .find(|(n, _)| *n == format!("classes.{class}.cc"))
            .map(|(_, v)| v.to_string())
    };
    values
        .iter()
        .map(|(name, v)| {
            let segs: Vec<&str> = name.split('.').collect();
            if let [
                "classes",
                class,
                algo @ ("dcqcn" | "timely" | "hpcc" | "dctcp"),
                _,
            ] = segs.as_slice()
                && algorithm(class).is_some_and(|a| a != *algo)
                && let Some((_, vv)) = vendor.iter().find(|(n, _)| n == name)
            {
                return (name.clone(), vv.clone());
            }
            (name.clone(), v.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use xirang_fabric::scenario::Scenario;

    fn default_scenario() -> Loaded {
        Scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/default.toml"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn names(space: &[Param]) -> Vec<&str> {
        space.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn published_baselines_scale_with_the_port_rate() {
        let l = default_scenario();
        let b = baselines(&l);
        let names: Vec<&str> = b.iter().map(|x| x.name).collect();
        assert_eq!(names, ["vendor", "paper", "scenario", "production", "hpcc-sim"]);
        // 100G ports: 400 KB / 1600 KB / 20 % on every tier, as the HPCC simulator's run.py
        // has them at 100G.
        for t in l.fabric.tiers() {
            let p = b[3].config.ecn.profile(t);
            assert_eq!(
                (p.kmin_bytes, p.kmax_bytes, p.pmax),
                (400_000, 1_600_000, 0.2),
                "{t:?}"
            );
            assert_eq!(b[4].config.ecn.profile(t), p);
        }
        let d = &b[4].config.classes["training"].dcqcn;
        assert_eq!(
            (d.rpg_ai_rate_mbps, d.rpg_hai_rate_mbps, d.rpg_time_reset_us),
            (20.0, 200.0, 300.0)
        );
        assert_eq!(
            b[3].config.classes["training"].dcqcn,
            b[0].config.classes["training"].dcqcn
        );
    }

    #[test]
    fn hpcc_and_dctcp_are_offered_only_where_the_fabric_runs_them() {
        let mut l = default_scenario();
        let plain = builtin(&l);
        assert!(
            !names(&plain)
                .iter()
                .any(|n| n.contains(".hpcc.") || n.contains(".dctcp."))
        );
        let cc = plain.iter().find(|p| p.name.ends_with(".cc")).unwrap();
        assert_eq!(cc.domain, Domain::Choice(vec!["dcqcn".into(), "timely".into()]));

        l.scenario.tune.algorithms = xirang_fabric::tune::SEARCHABLE_ALGORITHMS.to_vec();
        let all = builtin(&l);
        for k in [
            "hpcc.eta",
            "hpcc.max_stage",
            "hpcc.ai_mbps",
            "dctcp.g",
            "dctcp.ai_mbps",
        ] {
            assert!(names(&all).iter().any(|n| n.ends_with(k)), "{k} missing");
        }
        let cc = all.iter().find(|p| p.name.ends_with(".cc")).unwrap();
        assert_eq!(
            cc.domain,
            Domain::Choice(vec![
                "dcqcn".into(),
                "timely".into(),
                "hpcc".into(),
                "dctcp".into(),
                "none".into()
            ])
        );
        // Every offered parameter names a real setting of the configuration.
        let tiers = l.fabric.tiers();
        for p in &all {
            assert!(
                param_kind(&l.scenario.config, &tiers, &p.name).is_ok(),
                "{}",
                p.name
            );
        }
    }

    #[test]
    fn every_searched_value_is_one_the_device_takes() {
        let l = default_scenario();
        let space = space(&l);
        for p in &space {
            let Domain::Number { step, .. } = &p.domain else {
                continue;
            };
            let step = step.unwrap_or_else(|| panic!("{} has no device resolution", p.name));
            for k in 0..=50 {
                let ParamValue::Number(x) = p.normalize(&p.at(k as f64 / 50.0)) else {
                    panic!("{}: not a number", p.name)
                };
                let units = x / step;
                assert!(
                    (units - units.round()).abs() < 1e-9,
                    "{}: {x} is not a multiple of {step}",
                    p.name
                );
                // Written as short as the step: no `0.17000000000000001`.
                let text = ParamValue::Number(x).to_string();
                assert!(text.len() <= 12, "{}: {text}", p.name);
            }
        }
        // A whole percent on the switch, two decimals of beta.
        let pmax = space.iter().find(|p| p.name == "ecn.leaf.pmax").unwrap();
        assert_eq!(
            pmax.normalize(&ParamValue::Number(0.17957)),
            ParamValue::Number(0.18)
        );
        let beta = space.iter().find(|p| p.name.ends_with("timely.beta")).unwrap();
        assert_eq!(
            beta.normalize(&ParamValue::Number(0.1957)),
            ParamValue::Number(0.2)
        );
        let t_low = space
            .iter()
            .find(|p| p.name.ends_with("timely.t_low_us"))
            .unwrap();
        assert_eq!(
            t_low.normalize(&ParamValue::Number(17.957023227403575)),
            ParamValue::Number(18.0)
        );
    }

    #[test]
    fn a_bound_off_the_step_stays_inside() {
        let p = Param {
            name: "ecn.leaf.pmax".into(),
            domain: Domain::Number {
                lo: 0.015,
                hi: 0.995,
                log: false,
                step: Some(0.01),
            },
            source: "test",
        };
        assert_eq!(p.normalize(&ParamValue::Number(0.0)), ParamValue::Number(0.02));
        assert_eq!(p.normalize(&ParamValue::Number(1.0)), ParamValue::Number(0.99));
        for v in [0.0, 0.3, 1.0] {
            let u = p.position(&p.normalize(&ParamValue::Number(v)));
            assert!((0.0..=1.0).contains(&u));
        }
    }
}
