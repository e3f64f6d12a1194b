//! Several NIC ports per host: bonded into one device (RoCE LAG) or used independently,
//! chosen per traffic class by simulating both.
//!
//! The scenario is run with each layout on the same seeds; each class is judged by its
//! application metric (collective time, request p99, flow slowdown p99), and again with
//! one member link of one of the class's hosts down for good, which a bond survives and
//! an independent port does not (docs/reference/nic-aggregation.md §4). A layout wins a
//! class when its mean metric is better by more than [`TIE_MARGIN`] and it is worse by no
//! more than that on any seed; otherwise the layout that finishes with the link down wins; otherwise
//! independent ports, which NCCL's maintainers recommend (docs/reference/nic-aggregation.md §3).

use std::path::Path;

use serde::Serialize;
use xirang_fabric::Loaded;
use xirang_fabric::scenario::{Fault, FaultKind, ScenarioError};
use xirang_fabric::topology::{Aggregate, TopologySpec};
use xirang_fabric::workload::Workload;

use crate::eval::{ClassMetrics, Evaluator, RunMetrics};

/// Relative difference of two layouts' mean metrics below which neither wins on speed.
/// The winner must also be worse by no more than this on any seed, paired: the inference
/// class's p99 moves by up to 2.3x from seed to seed under one layout (VALIDATION.md "NIC
/// layout"), so a mean alone could be one lucky seed.
pub const TIE_MARGIN: f64 = 0.03;

/// A run with a dead link is stopped at this multiple of the healthy run's simulated
/// time: a flow that lost its only port never finishes, and waiting for its retries to
/// run out says nothing more.
const FAILURE_CAP_FACTOR: f64 = 4.0;

/// Why the comparison cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The hosts are listed one by one (or read from an HPCC topology file, one port per
    /// host); the layout is in the list, not a template.
    #[error(
        "the NIC layout is compared on generated topologies; `{0}` lists its hosts explicitly or in an HPCC topology file"
    )]
    Explicit(String),
    /// No seed to run.
    #[error("the NIC layout comparison needs at least one run seed")]
    NoSeeds,
    /// One port per host: nothing to bond.
    #[error("hosts have {0} NIC port(s); a layout choice needs at least 2 (`[topology.*.host] nics`)")]
    OnePort(u32),
    /// A layout variant does not build.
    #[error("the scenario with aggregate = \"{layout}\" does not build: {source}")]
    Variant {
        /// The layout.
        layout: &'static str,
        /// Why.
        #[source]
        source: Box<ScenarioError>,
    },
}

/// Which metric judges a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Mean collective completion time.
    CollectiveUs,
    /// Request latency p99.
    P99Us,
    /// p99 flow slowdown.
    SlowdownP99,
    /// Time per output token p99 (MoE decode).
    TpotP99Us,
    /// Time to first token p99 (KV transfers).
    TtftP99Us,
}

impl Metric {
    /// How reports name it, with its unit.
    pub fn label(self) -> &'static str {
        match self {
            Metric::CollectiveUs => "collective time, µs",
            Metric::P99Us => "request p99, µs",
            Metric::SlowdownP99 => "flow slowdown p99",
            Metric::TpotP99Us => "time per output token p99, µs",
            Metric::TtftP99Us => "time to first token p99, µs",
        }
    }

    fn of(self, m: &ClassMetrics) -> Option<f64> {
        match self {
            Metric::CollectiveUs => m.collective_us,
            Metric::P99Us => m.p99_us,
            Metric::SlowdownP99 => m.slowdown_p99,
            Metric::TpotP99Us => m.tpot_p99_us,
            Metric::TtftP99Us => m.ttft_p99_us,
        }
    }
}

/// One layout's figures for one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Mean of the metric over the healthy runs (None: a run did not finish).
    pub healthy: Option<f64>,
    /// The metric per seed, in the seeds' order (None: that run did not finish).
    pub per_seed: Vec<Option<f64>>,
    /// The metric with the member link down (None: the class did not finish).
    pub member_down: Option<f64>,
    /// Why the failure case was not run, when it was not.
    pub member_down_skipped: Option<String>,
}

/// The verdict for one class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassChoice {
    /// Traffic class.
    pub class: String,
    /// Its metric (lower is better).
    pub metric: Metric,
    /// Independent ports.
    pub independent: Figures,
    /// Bonded ports.
    pub lag: Figures,
    /// The layout recommended for the class.
    pub winner: Aggregate,
    /// Why, in one sentence with the figures.
    pub reason: String,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutAdvice {
    /// NIC ports per host.
    pub ports_per_host: u32,
    /// Ports per bond in the LAG layout.
    pub bond_ports: u32,
    /// Run seeds of the healthy runs.
    pub seeds: Vec<u64>,
    /// Per class, in name order.
    pub classes: Vec<ClassChoice>,
    /// Simulations run.
    pub simulations: usize,
}

impl LayoutAdvice {
    /// The winner for `class`.
    pub fn winner(&self, class: &str) -> Option<Aggregate> {
        self.classes.iter().find(|c| c.class == class).map(|c| c.winner)
    }
}

/// The scenario with the given layout. Endpoints, fault targets and overrides that name
/// a NIC are renamed to the same physical port in the other layout (`h1/mlx5_3` is
/// `h1/mlx5_bond_1`, port 2, in bonds of 2).
pub fn variant(base: &Loaded, layout: Aggregate) -> Result<Loaded, LayoutError> {
    let mut s = base.scenario.clone();
    let host = s
        .topology
        .host_mut()
        .ok_or_else(|| LayoutError::Explicit(base.file.display().to_string()))?;
    let from = host.aggregate.unwrap_or(Aggregate::Independent);
    let bond_ports = host.bond_ports.max(1);
    host.aggregate = Some(layout);
    if from != layout {
        rename_nics(&mut s, layout, bond_ports);
    }
    let dir = base.file.parent().unwrap_or(Path::new("."));
    s.build(&base.file, dir, None).map_err(|e| LayoutError::Variant {
        layout: layout.as_str(),
        source: Box::new(e),
    })
}

/// The device name and port (1-based, if named) of `dev[/port]` in layout `to`, for a
/// device of the other layout; `None` for a name of neither form.
fn renamed_device(
    dev: &str,
    port: Option<u32>,
    to: Aggregate,
    bond_ports: u32,
) -> Option<(String, Option<u32>)> {
    match to {
        Aggregate::Lag => {
            let j: u32 = dev.strip_prefix("mlx5_")?.parse().ok()?;
            Some((format!("mlx5_bond_{}", j / bond_ports), Some(j % bond_ports + 1)))
        }
        Aggregate::Independent => {
            let k: u32 = dev.strip_prefix("mlx5_bond_")?.parse().ok()?;
            Some((
                format!("mlx5_{}", k * bond_ports + port.unwrap_or(1).saturating_sub(1)),
                None,
            ))
        }
    }
}

/// `host/dev[/port]` renamed for layout `to`; `ports` keeps the member port (a fault or
/// override target), else the device alone (a workload endpoint). Other strings (a host,
/// a switch port, a GPU) are returned as they are.
fn renamed(target: &str, to: Aggregate, bond_ports: u32, ports: bool) -> String {
    let mut parts = target.splitn(3, '/');
    let (Some(host), Some(dev)) = (parts.next(), parts.next()) else {
        return target.to_string();
    };
    let port = parts.next().map(|p| p.parse::<u32>().ok());
    let port = match port {
        Some(None) => return target.to_string(),
        Some(Some(p)) => Some(p),
        None => None,
    };
    match renamed_device(dev, port, to, bond_ports) {
        Some((d, Some(p))) if ports => format!("{host}/{d}/{p}"),
        Some((d, _)) => format!("{host}/{d}"),
        None => target.to_string(),
    }
}

/// Renames every NIC the scenario names for layout `to`.
fn rename_nics(s: &mut xirang_fabric::scenario::Scenario, to: Aggregate, bond_ports: u32) {
    let ep = |e: &mut String| *e = renamed(e, to, bond_ports, false);
    for w in s.workloads.values_mut() {
        match w {
            Workload::Flows(f) => f.list.iter_mut().for_each(|f| {
                ep(&mut f.src);
                ep(&mut f.dst);
            }),
            Workload::Incast(i) => {
                ep(&mut i.receiver);
                i.sender_hosts.iter_mut().for_each(ep);
            }
            Workload::Permutation(p) => p.hosts.iter_mut().for_each(ep),
            Workload::AllToAll(a) => a.hosts.iter_mut().for_each(ep),
            Workload::Inference(i) => {
                i.clients.iter_mut().for_each(ep);
                i.servers.iter_mut().for_each(ep);
            }
            // These name hosts, which keep their names in either layout.
            Workload::Collective(_) | Workload::HpccFlows(_) | Workload::Moe(_) | Workload::KvTransfer(_) => {
            }
        }
    }
    for f in &mut s.faults {
        f.target = renamed(&f.target, to, bond_ports, true);
    }
    for o in &mut s.overrides {
        o.target = renamed(&o.target, to, bond_ports, true);
    }
}

/// Compares the two layouts of `base` on `seeds`; `progress` hears of each simulation.
pub fn compare(
    base: &Loaded,
    seeds: &[u64],
    progress: &mut dyn FnMut(&str),
) -> Result<LayoutAdvice, LayoutError> {
    if let TopologySpec::Explicit(_) | TopologySpec::Hpcc(_) = base.scenario.topology {
        return Err(LayoutError::Explicit(base.file.display().to_string()));
    }
    if seeds.is_empty() {
        return Err(LayoutError::NoSeeds);
    }
    let template = base.scenario.topology.host().cloned().unwrap_or_default();
    if template.nics < 2 {
        return Err(LayoutError::OnePort(template.nics));
    }
    let layouts = [Aggregate::Independent, Aggregate::Lag];
    let loaded = [variant(base, layouts[0])?, variant(base, layouts[1])?];
    let mut simulations = 0;
    // Healthy runs, layout by layout, seed by seed.
    let mut healthy: Vec<Vec<RunMetrics>> = Vec::new();
    for (l, layout) in loaded.iter().zip(layouts) {
        let ev = Evaluator::new(l);
        let mut runs = Vec::new();
        for &seed in seeds {
            progress(&format!("{} seed {seed}", layout.as_str()));
            runs.push(ev.run(&l.scenario.config, seed, None));
            simulations += 1;
        }
        healthy.push(runs);
    }
    let kinds = Evaluator::new(base).kinds;
    let mut classes = Vec::new();
    for (class, k) in &kinds {
        let metric = if k.collective {
            Metric::CollectiveUs
        } else if k.inference {
            Metric::P99Us
        } else if k.moe {
            Metric::TpotP99Us
        } else if k.kv {
            Metric::TtftP99Us
        } else {
            Metric::SlowdownP99
        };
        let mut figures = Vec::new();
        for (i, (l, layout)) in loaded.iter().zip(layouts).enumerate() {
            let runs = &healthy[i];
            let per_seed: Vec<Option<f64>> = runs
                .iter()
                .map(|r| {
                    r.classes
                        .get(class)
                        .and_then(|m| metric.of(m))
                        .filter(|_| r.finished)
                })
                .collect();
            let values: Option<Vec<f64>> = per_seed.iter().copied().collect();
            let mean = values.map(|v| v.iter().sum::<f64>() / v.len().max(1) as f64);
            let cap_us = runs.iter().map(|r| r.sim_us).fold(0.0, f64::max) * FAILURE_CAP_FACTOR;
            progress(&format!("{} with a member link down ({class})", layout.as_str()));
            let (member_down, skipped) = match member_down_run(l, class, layout, seeds[0], cap_us) {
                Ok(m) => {
                    simulations += 1;
                    (m.and_then(|m| metric.of(&m)), None)
                }
                Err(why) => (None, Some(why)),
            };
            figures.push(Figures {
                healthy: mean,
                per_seed,
                member_down,
                member_down_skipped: skipped,
            });
        }
        let lag = figures.pop().expect("two layouts");
        let independent = figures.pop().expect("two layouts");
        let (winner, reason) = judge(metric, &independent, &lag);
        classes.push(ClassChoice {
            class: class.clone(),
            metric,
            independent,
            lag,
            winner,
            reason,
        });
    }
    Ok(LayoutAdvice {
        ports_per_host: template.nics,
        bond_ports: template.bond_ports,
        seeds: seeds.to_vec(),
        classes,
        simulations,
    })
}

/// The class's metric, the class's workloads alone, with the first port of one of its
/// hosts down from the start of the run: `Ok(None)` when the class did not finish, `Err` when the case cannot be
/// simulated (no host, or a bond across switches, whose failover is not modelled).
fn member_down_run(
    l: &Loaded,
    class: &str,
    layout: Aggregate,
    seed: u64,
    cap_us: f64,
) -> Result<Option<ClassMetrics>, String> {
    let endpoint = class_endpoint(l, class).ok_or_else(|| format!("no endpoint of class `{class}` found"))?;
    // The NIC the class's endpoint uses (a host alone is its first NIC).
    let nic = xirang_fabric::scenario::resolve_endpoint(&l.fabric, &endpoint)
        .map_err(|e| format!("endpoint `{endpoint}`: {e}"))?;
    let n = &l.fabric.nics[nic.index()];
    let (host, nic_name) = (&l.fabric.hosts[n.host.index()].name, &n.name);
    let target = match layout {
        Aggregate::Independent => format!("{host}/{nic_name}"),
        Aggregate::Lag => format!("{host}/{nic_name}/1"),
    };
    // The class alone, so that the run's finishing speaks for the class.
    let mut s = l.scenario.clone();
    s.workloads.retain(|_, w| w.class() == class);
    s.faults.push(Fault {
        kind: FaultKind::LinkDown,
        target: target.clone(),
        start_us: 0.0,
        end_us: None,
        loss: None,
        rate_gbps: None,
        mtu_bytes: None,
        drain_gbps: None,
        pcie_width: None,
        pcie_speed_gts: None,
        share: None,
        bounce_gbps: None,
    });
    let dir = l.file.parent().unwrap_or(Path::new("."));
    let failed = s.build(&l.file, dir, None).map_err(|e| {
        let msg = e.to_string();
        if msg.contains("failover for members on one switch only") {
            "not modelled (bond across switches)".to_string()
        } else {
            format!("link_down on `{target}` does not build: {msg}")
        }
    })?;
    let ev = Evaluator::new(&failed);
    let m = ev.run(&failed.scenario.config, seed, Some(cap_us));
    Ok(m.finished
        .then(|| m.classes.get(class).cloned().unwrap_or_default()))
}

/// An endpoint the class's first workload uses: an inference server, a collective's
/// first host, a flow's sender, an incast's receiver, else the first host.
fn class_endpoint(l: &Loaded, class: &str) -> Option<String> {
    let first_host = || l.fabric.hosts.first().map(|h| h.name.clone());
    for w in l.scenario.workloads.values().filter(|w| w.class() == class) {
        let h = match w {
            Workload::Inference(i) => i.servers.first().cloned(),
            Workload::Collective(c) => c.hosts.first().cloned().or_else(first_host),
            Workload::Flows(f) => f.list.first().map(|f| f.src.clone()),
            Workload::Incast(i) => Some(i.receiver.clone()),
            Workload::Permutation(p) => p.hosts.first().cloned().or_else(first_host),
            Workload::AllToAll(a) => a.hosts.first().cloned().or_else(first_host),
            Workload::HpccFlows(_) => first_host(),
            Workload::Moe(m) => m.hosts.first().cloned().or_else(first_host),
            Workload::KvTransfer(k) => k.decode.first().cloned(),
        };
        if h.is_some() {
            return h;
        }
    }
    None
}

/// The winner and the sentence saying why.
fn judge(metric: Metric, ind: &Figures, lag: &Figures) -> (Aggregate, String) {
    let unit = metric.label();
    let survives = |f: &Figures| f.member_down.is_some();
    // Paired by seed: is one layout worse by more than the margin on some seed?
    let pairs: Vec<(f64, f64)> = ind
        .per_seed
        .iter()
        .zip(&lag.per_seed)
        .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
        .collect();
    let lag_every = !pairs.is_empty() && pairs.iter().all(|(a, b)| *b <= a * (1.0 + TIE_MARGIN));
    let ind_every = !pairs.is_empty() && pairs.iter().all(|(a, b)| *a <= b * (1.0 + TIE_MARGIN));
    let margin = TIE_MARGIN * 100.0;
    match (ind.healthy, lag.healthy) {
        (Some(a), Some(b)) => {
            let change = b / a - 1.0;
            if change < -TIE_MARGIN && lag_every {
                (
                    Aggregate::Lag,
                    format!(
                        "{:.1} % better than independent ports ({b:.1} against {a:.1}, {unit}; worse on none of {} seeds by more than {margin:.0} %)",
                        -change * 100.0,
                        pairs.len()
                    ),
                )
            } else if change > TIE_MARGIN && ind_every {
                (
                    Aggregate::Independent,
                    format!(
                        "{:.1} % better than bonded ports ({a:.1} against {b:.1}, {unit}; worse on none of {} seeds by more than {margin:.0} %)",
                        (1.0 - a / b) * 100.0,
                        pairs.len()
                    ),
                )
            } else if survives(lag) && !survives(ind) {
                (
                    Aggregate::Lag,
                    format!(
                        "no clear difference ({b:.1} against {a:.1}, {unit}: within {margin:.0} % on average, or worse by more on some seed), and the class survives a member link down on bonded ports only"
                    ),
                )
            } else {
                (
                    Aggregate::Independent,
                    format!(
                        "no clear difference ({a:.1} against {b:.1}, {unit}: within {margin:.0} % on average, or worse by more on some seed); independent, as NCCL's maintainers prefer"
                    ),
                )
            }
        }
        (Some(a), None) => (
            Aggregate::Independent,
            format!("the class did not finish on bonded ports ({a:.1} on independent ones, {unit})"),
        ),
        (None, Some(b)) => (
            Aggregate::Lag,
            format!("the class did not finish on independent ports ({b:.1} on bonded ones, {unit})"),
        ),
        (None, None) => (
            Aggregate::Independent,
            "the class did not finish on either layout; independent by default".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(seeds: &[f64], down: Option<f64>) -> Figures {
        let per_seed: Vec<Option<f64>> = seeds.iter().map(|v| Some(*v)).collect();
        Figures {
            healthy: Some(seeds.iter().sum::<f64>() / seeds.len() as f64),
            per_seed,
            member_down: down,
            member_down_skipped: None,
        }
    }

    #[test]
    fn a_clear_win_on_every_seed_decides() {
        let (w, why) = judge(
            Metric::P99Us,
            &fig(&[250.0, 330.0], None),
            &fig(&[117.0, 101.0], Some(220.0)),
        );
        assert_eq!(w, Aggregate::Lag, "{why}");
        assert!(why.contains("worse on none of 2 seeds"), "{why}");
        let (w, _) = judge(
            Metric::CollectiveUs,
            &fig(&[2683.0, 2683.0], None),
            &fig(&[5815.0, 5889.0], None),
        );
        assert_eq!(w, Aggregate::Independent);
    }

    #[test]
    fn a_mean_won_on_one_lucky_seed_is_no_win() {
        // Bonds better on average, 20 % worse on the first seed: not a speed win; the bond
        // survives the member failure, so it wins on that.
        let (w, why) = judge(
            Metric::P99Us,
            &fig(&[250.0, 569.0], None),
            &fig(&[300.0, 199.0], Some(300.0)),
        );
        assert_eq!(w, Aggregate::Lag);
        assert!(
            why.contains("no clear difference") && why.contains("survives"),
            "{why}"
        );
        // Neither survives: independent, NCCL's preference.
        let (w, why) = judge(
            Metric::P99Us,
            &fig(&[250.0, 569.0], None),
            &fig(&[300.0, 199.0], None),
        );
        assert_eq!(w, Aggregate::Independent);
        assert!(why.contains("as NCCL's maintainers prefer"), "{why}");
        // A seed equal within the margin does not stop a win on average.
        let (w, why) = judge(
            Metric::P99Us,
            &fig(&[250.6, 251.3], None),
            &fig(&[250.7, 199.1], None),
        );
        assert_eq!(w, Aggregate::Lag, "{why}");
    }

    #[test]
    fn within_the_margin_is_a_tie() {
        let (w, why) = judge(
            Metric::CollectiveUs,
            &fig(&[1000.0, 1000.0], None),
            &fig(&[990.0, 985.0], None),
        );
        assert_eq!(w, Aggregate::Independent, "{why}");
    }

    #[test]
    fn a_layout_that_does_not_finish_loses() {
        let unfinished = Figures {
            healthy: None,
            per_seed: vec![None, Some(1.0)],
            member_down: None,
            member_down_skipped: None,
        };
        let (w, _) = judge(Metric::P99Us, &unfinished, &fig(&[5.0, 5.0], None));
        assert_eq!(w, Aggregate::Lag);
    }
}

#[cfg(test)]
mod rename_tests {
    use super::*;

    #[test]
    fn endpoints_and_targets_name_the_same_physical_port_in_the_other_layout() {
        let lag = Aggregate::Lag;
        let ind = Aggregate::Independent;
        assert_eq!(renamed("h1/mlx5_3", lag, 2, false), "h1/mlx5_bond_1");
        assert_eq!(renamed("h1/mlx5_3", lag, 2, true), "h1/mlx5_bond_1/2");
        assert_eq!(renamed("h1/mlx5_bond_1", ind, 2, false), "h1/mlx5_2");
        assert_eq!(renamed("h1/mlx5_bond_1/2", ind, 2, true), "h1/mlx5_3");
        assert_eq!(renamed("h1/mlx5_bond_0/1", ind, 4, true), "h1/mlx5_0");
        // Hosts, GPUs, switch ports and foreign names stay as they are.
        for s in [
            "h1",
            "h1/GPU3",
            "leaf0:4",
            "h1/rxe0",
            "h1/mlx5_x",
            "h1/mlx5_bond_1/x",
        ] {
            assert_eq!(renamed(s, lag, 2, true), s);
            assert_eq!(renamed(s, ind, 2, true), s);
        }
    }
}
