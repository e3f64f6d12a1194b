//! Xirang calibration: fits a scenario's workload parameters ([`knobs`]) so that the
//! simulated counters match the ones a fabric reported ([`counters`]), and says how
//! close the fit came, figure by figure.
//!
//! The observed side is any window of counters (`xirang_diagnose::source` reads
//! Prometheus, a monitor history or a simulator's output); the simulated side is the
//! final counters of runs of candidate scenarios. Both go through the same
//! [`counters::figures`], so a figure means the same on both sides.
//!
//! The search has two stages. First, moment matching from the scenario's own values:
//! each class's load is scaled by the ratio of its observed to simulated host
//! utilisation, each tier-crossing share by the ratio of the crossing it shows, a few
//! rounds, each kept only if it lowers the objective (the sum of squared relative
//! residuals). Then a compass search polishes the result (pattern search on the
//! coordinates; Kolda, Lewis and Torczon, "Optimization by direct search", SIAM Review
//! 45(3), 2003): each parameter is moved a step up and down (a load on a log scale, a
//! share on a linear one), the best move that lowers the objective is taken, and the
//! step is halved when none does, down to [`MIN_STEP`]. Neither needs a gradient, which
//! a packet simulation does not have, and each compass round's runs are independent, so
//! they run in parallel. Moment matching matters: the ECN, CNP and PFC figures jump as
//! flows collide, so from far away a compass search alone settles in whatever valley
//! trades one class's load against another's.
//!
//! This crate runs the simulator and reads windows; it fetches nothing itself and does
//! not tune configuration (that is `xirang-tune`, which takes the calibrated scenario).

pub mod app;
pub mod counters;
pub mod knobs;
pub mod twin;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use serde::Serialize;
use thiserror::Error;
use xirang_fabric::Loaded;

pub use counters::{Figure, Tiers, figures};
pub use knobs::{Knob, Param, knobs};

/// What can go wrong.
#[derive(Debug, Error)]
pub enum CalibrateError {
    /// The observed window gave nothing to fit to.
    #[error("no counter to calibrate against in {window}: expected series of {metrics}")]
    NothingObserved {
        /// Where the window came from.
        window: String,
        /// The metrics looked for.
        metrics: String,
    },
    /// No parameter to fit.
    #[error("{0}")]
    NoKnobs(String),
    /// The scenario has no fixed window to compare rates over.
    #[error("{0}")]
    Window(String),
    /// The scenario as it is does not build or run.
    #[error("the scenario with its own values: {0}")]
    Scenario(String),
    /// The calibrated scenario could not be written as TOML.
    #[error("writing the calibrated scenario: {0}")]
    Write(String),
}

/// Default largest relative residual per figure: 20 %. The simulated workload is drawn
/// from a seeded process, so a seed other than the observed fleet's moves ECN and PFC
/// figures by around 10 % at the scales tests run (VALIDATION.md, "Calibration").
pub const DEFAULT_TOLERANCE: f64 = 0.2;
/// Last step: 1/256 of the range (3.3 % of a load; 0.004 of a share).
pub const MIN_STEP: f64 = 1.0 / 256.0;
/// Default budget of simulated runs.
pub const DEFAULT_MAX_RUNS: usize = 200;

/// How to calibrate.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest relative residual accepted per figure.
    pub tolerance: f64,
    /// Seeds each candidate runs on (results averaged).
    pub seeds: Vec<u64>,
    /// Most simulated runs (candidates x seeds).
    pub max_runs: usize,
    /// Only the knobs with these keys (empty: every knob).
    pub fit: Vec<String>,
}

/// One figure after the fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Residual {
    /// Figure name.
    pub name: String,
    /// Unit.
    pub unit: &'static str,
    /// Observed.
    pub observed: f64,
    /// Simulated with the fitted parameters.
    pub simulated: f64,
    /// (simulated - observed) / max(|observed|, floor).
    pub residual: f64,
    /// |residual| <= tolerance.
    pub within: bool,
    /// The metrics behind it.
    pub metrics: Vec<String>,
}

/// One parameter after the fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fitted {
    /// Key path in the scenario.
    pub key: String,
    /// Scenario's value.
    pub initial: f64,
    /// Fitted value.
    pub fitted: f64,
    /// Range searched.
    pub min: f64,
    /// Range searched.
    pub max: f64,
    /// The key path's parts (a workload's name may hold a dot).
    #[serde(skip)]
    pub path: [String; 4],
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// Parameters.
    pub knobs: Vec<Fitted>,
    /// Figures.
    pub residuals: Vec<Residual>,
    /// Tolerance applied.
    pub tolerance: f64,
    /// Simulated runs made.
    pub runs: usize,
    /// Objective at the scenario's own values and at the fit.
    pub objective_initial: f64,
    /// At the fit.
    pub objective: f64,
    /// Figures outside the tolerance (empty: the fit holds).
    pub outside: Vec<String>,
    /// The calibrated scenario.
    #[serde(skip)]
    pub scenario: xirang_fabric::scenario::Scenario,
}

impl Calibration {
    /// Whether every figure is within the tolerance.
    pub fn holds(&self) -> bool {
        self.outside.is_empty()
    }
}

/// What a window offers to fit a scenario to ([`observed_figures`]).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The figures to fit to: the counter figures, then the application figures the
    /// scenario has a workload to compare with.
    pub figures: Vec<Figure>,
    /// Application figures left out: the scenario has no workload of their class (for a
    /// collective time, no collective of it), so no run of it could ever match them.
    pub left_out: Vec<Figure>,
    /// Switches the window has counters of and the scenario does not, each once.
    pub unknown_switches: Vec<String>,
}

/// Which of a window's figures a calibration of `loaded` fits to. Every counter figure
/// of the scenario's tiers is kept; an application figure only when the scenario has
/// something to simulate it with: a request p99 needs a workload of its class, a
/// collective time a collective of its class (every kind of workload defaults to the
/// training class, so the class alone would not do). The rest is returned apart, for
/// the caller to say what was left out.
pub fn observed_figures(w: &xirang_diagnose::window::Window, loaded: &Loaded) -> Observed {
    let tiers = Tiers::of(loaded);
    let mut unknown_switches = Vec::new();
    let mut figures = figures(w, &tiers, &mut unknown_switches);
    let mut left_out = Vec::new();
    // Each class with collectives, and the collectives it runs under NCCL's names
    // (`AllReduce`), which the Inspector's series are matched by.
    let mut collective_classes: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for w in loaded.scenario.workloads.values() {
        if let xirang_fabric::workload::Workload::Collective(c) = w {
            let op = serde_json::to_value(c.op)
                .ok()
                .and_then(|v| v.as_str().map(xirang_telemetry::inspector::collective_name))
                .unwrap_or_default();
            let ops = collective_classes.entry(w.class().to_string()).or_default();
            if !ops.contains(&op) {
                ops.push(op);
            }
        }
    }
    for f in app::figures(w)
        .into_iter()
        .chain(app::collective_figures(w, &collective_classes))
    {
        let Some(a) = &f.app else { continue };
        let collective = matches!(a, counters::AppFigure::CollectiveTime { .. });
        let fits = loaded.scenario.workloads.values().any(|w| {
            w.class() == a.class()
                && (!collective || matches!(w, xirang_fabric::workload::Workload::Collective(_)))
        });
        if fits {
            figures.push(f);
        } else {
            left_out.push(f);
        }
    }
    Observed {
        figures,
        left_out,
        unknown_switches,
    }
}

fn residual(sim: f64, obs: &Figure) -> f64 {
    (sim - obs.value) / obs.value.abs().max(obs.floor)
}

/// One evaluated point: its objective and simulated figures (averaged over seeds).
#[derive(Debug, Clone)]
struct Point {
    objective: f64,
    figures: Vec<Figure>,
}

/// Runs `loaded` with the knobs at `u` and compares with `observed`.
fn evaluate(
    loaded: &Loaded,
    knobs: &[Knob],
    u: &[f64],
    observed: &[Figure],
    tiers: &Tiers,
    seeds: &[u64],
) -> Result<Point, String> {
    let mut s = loaded.scenario.clone();
    for (k, &x) in knobs.iter().zip(u) {
        k.set(&mut s, k.at(x));
    }
    let dir = loaded.file.parent().unwrap_or(std::path::Path::new("."));
    let l = s.build(&loaded.file, dir, None).map_err(|e| e.to_string())?;
    let mut sums: BTreeMap<String, (Figure, f64)> = BTreeMap::new();
    for &seed in seeds {
        let mut opts = xirang_sim::options(&l);
        opts.seed = seed;
        opts.sample_interval = None;
        let r = xirang_sim::simulate(&l, &opts, &mut |_| {});
        let w = counters::window_of_run(&r, Some((l.scenario.run.end_us * 1e3) as u64));
        for f in figures(&w, tiers, &mut Vec::new()) {
            let e = sums.entry(f.name.clone()).or_insert((f.clone(), 0.0));
            e.1 += f.value;
        }
        // Application figures the fleet exported, through the fleet's buckets (no
        // answered request: the highest bound, as the fleet's +Inf bucket would say).
        for o in observed {
            let v = match &o.app {
                None => continue,
                Some(counters::AppFigure::RequestP99 { class, les }) => app::simulated(&r, class, les)
                    .unwrap_or_else(|| les.iter().copied().filter(|x| x.is_finite()).fold(0.0, f64::max)),
                Some(counters::AppFigure::CollectiveTime { class }) => {
                    app::simulated_collective(&r, class, l.scenario.run.end_us * 1e-6)
                }
            };
            let e = sums.entry(o.name.clone()).or_insert((o.clone(), 0.0));
            e.1 += v;
        }
    }
    let figures: Vec<Figure> = sums
        .into_values()
        .map(|(mut f, total)| {
            f.value = total / seeds.len() as f64;
            f
        })
        .collect();
    let objective = observed
        .iter()
        .map(|o| {
            let sim = figures.iter().find(|f| f.name == o.name).map_or(0.0, |f| f.value);
            o.weight * residual(sim, o).powi(2)
        })
        .sum();
    Ok(Point { objective, figures })
}

/// Rounds of moment matching before the compass search.
const MOMENT_ROUNDS: usize = 4;
/// The compass search's first step after moment matching: 1/32 of each range (a load
/// factor of 1.3, a share of 0.03).
const POLISH_STEP: f64 = 1.0 / 32.0;

/// Each workload's class priority.
fn class_priorities(loaded: &Loaded) -> BTreeMap<String, u8> {
    loaded
        .scenario
        .workloads
        .iter()
        .filter_map(|(name, w)| {
            let c = loaded.scenario.config.classes.get(w.class())?;
            Some((name.clone(), c.priority))
        })
        .collect()
}

/// The figure whose name starts with `prefix` (`util host p3 `), if any.
fn figure<'a>(figs: &'a [Figure], prefix: &str) -> Option<&'a Figure> {
    figs.iter().find(|f| f.name.starts_with(prefix))
}

/// One step of moment matching from `u`, whose run gave `simulated`: a load knob is
/// scaled by its class's observed over simulated host utilisation (utilisation is
/// proportional to offered load below saturation); a local-share knob moves the
/// crossing share `1 - share` by the ratio of the class's observed to simulated spine
/// over host utilisation (crossing traffic is what reaches the spines). Without
/// per-class figures, every load is scaled by the total host utilisation.
fn moment_step(
    knobs: &[Knob],
    u: &[f64],
    simulated: &[Figure],
    observed: &[Figure],
    classes: &BTreeMap<String, u8>,
) -> Vec<f64> {
    let ratio = |prefix: &str| -> Option<f64> {
        let o = figure(observed, prefix)?.value;
        let s = figure(simulated, prefix)?.value;
        (o > 0.0 && s > 0.0).then(|| o / s)
    };
    let ratio_exact = |name: &str| -> Option<f64> {
        let o = observed.iter().find(|f| f.name == name)?.value;
        let s = simulated.iter().find(|f| f.name == name)?.value;
        (o > 0.0 && s > 0.0).then(|| o / s)
    };
    let upper = figure(observed, "util spine").map_or("core", |_| "spine");
    knobs
        .iter()
        .zip(u)
        .map(|(k, &x)| {
            let prio = classes.get(&k.workload);
            let v = k.at(x);
            let moved = match k.param {
                Param::Bytes | Param::RequestsPerSec => prio
                    .and_then(|p| ratio(&format!("util host p{p} ")))
                    .or_else(|| ratio_exact("util host"))
                    .map(|r| v * r),
                Param::LocalShare => prio.and_then(|p| {
                    let cross = |figs: &[Figure]| -> Option<f64> {
                        let up = figure(figs, &format!("util {upper} p{p} "))?.value;
                        let host = figure(figs, &format!("util host p{p} "))?.value;
                        (host > 0.0).then(|| up / host)
                    };
                    let (o, s) = (cross(observed)?, cross(simulated)?);
                    (s > 0.0).then(|| 1.0 - (1.0 - v) * o / s)
                }),
            };
            match moved {
                Some(m) if m.is_finite() => k.position(m.clamp(k.min, k.max)),
                _ => x,
            }
        })
        .collect()
}

/// A grid key for a point, so that no point is simulated twice.
fn grid(u: &[f64]) -> Vec<i64> {
    u.iter().map(|x| (x / MIN_STEP * 4.0).round() as i64).collect()
}

/// Fits `loaded`'s workload to the `observed` figures. `progress` is told after each
/// simulated candidate how many runs are done and the budget.
pub fn calibrate(
    loaded: &Loaded,
    observed: &[Figure],
    opts: &Options,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Calibration, CalibrateError> {
    if loaded.scenario.run.end_us.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return Err(CalibrateError::Window(format!(
            "{}: [run] end_us: expected the simulated window the counters are compared over (for example the inference workload's duration_us); without it the run lasts until its last transfer, so a heavier load shows as a longer run at the same utilisation and cannot be told from a lighter one",
            loaded.file.display()
        )));
    }
    let tiers = Tiers::of(loaded);
    let chosen = chosen_knobs(loaded, &opts.fit)?;
    let seeds = if opts.seeds.is_empty() {
        vec![loaded.scenario.run.seed]
    } else {
        opts.seeds.clone()
    };
    let search = Search {
        loaded,
        knobs: &chosen,
        observed,
        tiers,
        per_point: seeds.len(),
        seeds,
        max_runs: opts.max_runs,
        progress,
        cache: Mutex::new(BTreeMap::new()),
        runs: AtomicUsize::new(0),
    };
    let mut u: Vec<f64> = chosen.iter().map(|k| k.position(k.initial)).collect();
    let start = search.start(&u)?;
    let objective_initial = start.objective;
    let mut best = start;
    search.match_moments(&mut u, &mut best, &class_priorities(loaded));
    search.polish(&mut u, &mut best);
    Ok(search.calibration(&u, &best, objective_initial, opts.tolerance))
}

/// The knobs `--fit` names (every knob when it names none), refused when one is not a
/// parameter of the scenario or when there is nothing to fit.
fn chosen_knobs(loaded: &Loaded, fit: &[String]) -> Result<Vec<Knob>, CalibrateError> {
    let all = knobs(&loaded.scenario, &loaded.fabric);
    let chosen: Vec<Knob> = if fit.is_empty() {
        all.clone()
    } else {
        let mut v = Vec::new();
        for key in fit {
            match all.iter().find(|k| &k.key() == key) {
                Some(k) => v.push(k.clone()),
                None => {
                    return Err(CalibrateError::NoKnobs(format!(
                        "--fit {key}: not a parameter of this scenario; expected one of: {}",
                        all.iter().map(Knob::key).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
        }
        v
    };
    if chosen.is_empty() {
        return Err(CalibrateError::NoKnobs(
            "the scenario has no workload parameter to fit (flow lists and HPCC flow files are replayed as written)".into(),
        ));
    }
    Ok(chosen)
}

/// What both stages of the search share: what is fitted and compared, the budget, and
/// the points already simulated, so that the stages spend one budget and never run a
/// point twice.
struct Search<'a> {
    loaded: &'a Loaded,
    knobs: &'a [Knob],
    observed: &'a [Figure],
    tiers: Tiers,
    seeds: Vec<u64>,
    /// Runs per point: one per seed.
    per_point: usize,
    max_runs: usize,
    progress: &'a (dyn Fn(usize, usize) + Sync),
    cache: Mutex<BTreeMap<Vec<i64>, Point>>,
    runs: AtomicUsize,
}

impl Search<'_> {
    /// Simulated runs made so far.
    fn runs(&self) -> usize {
        self.runs.load(Ordering::Relaxed)
    }

    /// The scenario's own values: the point the fit starts from and is measured against,
    /// which must run (a failure is the scenario's, not the search's).
    fn start(&self, u: &[f64]) -> Result<Point, CalibrateError> {
        let start = evaluate(
            self.loaded,
            self.knobs,
            u,
            self.observed,
            &self.tiers,
            &self.seeds,
        )
        .map_err(CalibrateError::Scenario)?;
        self.runs.fetch_add(self.per_point, Ordering::Relaxed);
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(grid(u), start.clone());
        Ok(start)
    }

    /// A candidate's point, from the cache when it was simulated before; `None` when the
    /// candidate does not run. Each simulated candidate is counted and reported.
    fn eval(&self, u: &[f64]) -> Option<Point> {
        if let Some(p) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&grid(u)) {
            return Some(p.clone());
        }
        let p = evaluate(
            self.loaded,
            self.knobs,
            u,
            self.observed,
            &self.tiers,
            &self.seeds,
        )
        .ok();
        let done = self.runs.fetch_add(self.per_point, Ordering::Relaxed) + self.per_point;
        (self.progress)(done.min(self.max_runs), self.max_runs);
        if let Some(p) = &p {
            self.cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(grid(u), p.clone());
        }
        p
    }

    /// First, moments: each class's load scaled by its observed over simulated host
    /// utilisation, each share by the crossing it shows, a few times over, each round
    /// kept only while it lowers the objective.
    fn match_moments(&self, u: &mut Vec<f64>, best: &mut Point, classes: &BTreeMap<String, u8>) {
        for _ in 0..MOMENT_ROUNDS {
            if self.runs() + self.per_point > self.max_runs {
                break;
            }
            let next = moment_step(self.knobs, u, &best.figures, self.observed, classes);
            if grid(&next) == grid(u) {
                break;
            }
            match self.eval(&next) {
                Some(p) if p.objective < best.objective => {
                    *best = p;
                    *u = next;
                }
                _ => break,
            }
        }
    }

    /// Then the compass search: every knob a step each way, the rounds' runs in
    /// parallel, the step halved when no move helps, until the last step or the budget.
    fn polish(&self, u: &mut Vec<f64>, best: &mut Point) {
        let mut step = POLISH_STEP;
        while step >= MIN_STEP {
            let round = 2 * self.knobs.len() * self.per_point;
            if self.runs() + round > self.max_runs {
                break;
            }
            let mut candidates: Vec<Vec<f64>> = Vec::new();
            for i in 0..self.knobs.len() {
                for dir in [-1.0, 1.0] {
                    let mut c = u.clone();
                    c[i] = (c[i] + dir * step).clamp(0.0, 1.0);
                    if grid(&c) != grid(u) {
                        candidates.push(c);
                    }
                }
            }
            let results: Vec<(Vec<f64>, Option<Point>)> = candidates
                .into_par_iter()
                .map(|c| {
                    let p = self.eval(&c);
                    (c, p)
                })
                .collect();
            // The best candidate, ties to the first listed: the order is fixed, so the
            // search is deterministic however the runs were scheduled.
            let mut moved = false;
            for (c, p) in results {
                if let Some(p) = p
                    && p.objective < best.objective
                {
                    *best = p;
                    *u = c;
                    moved = true;
                }
            }
            if !moved {
                step /= 2.0;
            }
        }
    }

    /// The result at the search's last point `u`: the calibrated scenario, each knob's
    /// fitted value and each observed figure's residual against `best`'s simulation.
    fn calibration(&self, u: &[f64], best: &Point, objective_initial: f64, tolerance: f64) -> Calibration {
        let mut scenario = self.loaded.scenario.clone();
        for (k, &x) in self.knobs.iter().zip(u) {
            k.set(&mut scenario, k.at(x));
        }
        let residuals: Vec<Residual> = self
            .observed
            .iter()
            .map(|o| {
                let f = best.figures.iter().find(|f| f.name == o.name);
                let sim = f.map_or(0.0, |f| f.value);
                let r = residual(sim, o);
                Residual {
                    name: o.name.clone(),
                    unit: o.unit,
                    observed: o.value,
                    simulated: sim,
                    residual: r,
                    within: r.abs() <= tolerance,
                    metrics: o.metrics.clone(),
                }
            })
            .collect();
        Calibration {
            knobs: self
                .knobs
                .iter()
                .zip(u)
                .map(|(k, &x)| Fitted {
                    key: k.key(),
                    initial: k.initial,
                    fitted: k.at(x),
                    min: k.min,
                    max: k.max,
                    path: [
                        "workloads".into(),
                        k.workload.clone(),
                        k.kind.into(),
                        k.param.field().into(),
                    ],
                })
                .collect(),
            outside: residuals
                .iter()
                .filter(|r| !r.within)
                .map(|r| r.name.clone())
                .collect(),
            residuals,
            tolerance,
            runs: self.runs(),
            objective_initial,
            objective: best.objective,
            scenario,
        }
    }
}

/// The calibrated scenario as TOML: `original` (the scenario file's text) with each
/// fitted value written in place, its comments and layout kept, under `header` (comment
/// lines, each starting with `#`).
pub fn calibrated_toml(original: &str, c: &Calibration, header: &str) -> Result<String, CalibrateError> {
    let mut doc: toml_edit::DocumentMut = original
        .parse()
        .map_err(|e: toml_edit::TomlError| CalibrateError::Write(e.to_string()))?;
    for k in &c.knobs {
        let mut item: &mut toml_edit::Item = doc.as_item_mut();
        for p in &k.path {
            item = &mut item[p.as_str()];
        }
        let mut v: toml_edit::Value = if k.key.ends_with(".bytes") {
            (k.fitted.round() as i64).into()
        } else {
            // Four significant digits: the search's last step is 3 % of a load.
            let digits = 4 - (k.fitted.abs().max(1e-9).log10().floor() as i32) - 1;
            let scale = 10f64.powi(digits.max(0));
            ((k.fitted * scale).round() / scale).into()
        };
        if let Some(old) = item.as_value() {
            *v.decor_mut() = old.decor().clone();
        }
        *item = toml_edit::Item::Value(v);
    }
    Ok(format!("{header}{doc}"))
}

#[cfg(test)]
mod tests {
    use xirang_diagnose::window::{Series, Window, metric_of};

    use super::*;

    fn series(metric: &str, labels: &[(&str, &str)], points: &[(i64, f64)]) -> Series {
        Series::new(metric, labels, points)
    }

    #[test]
    fn application_figures_need_a_workload_to_simulate_them_with() {
        // The twin: a collective of class `training`, an inference service of class
        // `inference`.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/twin.toml");
        let loaded = xirang_fabric::scenario::Scenario::load(&path).unwrap();
        let buckets = |class: &'static str| {
            [("0.001", 5.0), ("+Inf", 10.0)].map(|(le, n)| {
                series(
                    app::REQUEST_BUCKETS,
                    &[("class", class), ("le", le)],
                    &[(0, 0.0), (1000, n)],
                )
            })
        };
        let collective = |class: &str| {
            series(
                app::COLLECTIVE_SECONDS,
                &[("class", class)],
                &[(0, 0.002), (1000, 0.004)],
            )
        };
        let switch_bytes = |switch: &str| {
            series(
                &metric_of("SAI_PORT_STAT_IF_OUT_OCTETS"),
                &[("switch", switch), ("port", "Ethernet0")],
                &[(0, 0.0), (1000, 1e6)],
            )
        };
        let mut w = Window {
            source: "test".into(),
            ..Window::default()
        };
        w.series.push(series(
            &metric_of("port_xmit_data"),
            &[("node", "h0"), ("device", "mlx5_0"), ("port", "1")],
            &[(0, 0.0), (1000, 1e6)],
        ));
        w.series.extend(buckets("inference"));
        w.series.extend(buckets("batch"));
        w.series.push(collective("training"));
        w.series.push(collective("inference"));
        w.series.push(switch_bytes("ghost"));
        w.series.push(switch_bytes("ghost"));

        let o = observed_figures(&w, &loaded);
        let names = |f: &[Figure]| f.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&o.figures),
            [
                "util host",
                "request p99 (inference)",
                "collective time (training)"
            ]
        );
        // No workload of class `batch`; the inference service is no collective.
        assert_eq!(
            names(&o.left_out),
            ["request p99 (batch)", "collective time (inference)"]
        );
        assert_eq!(o.unknown_switches, ["ghost"]);
    }
}
