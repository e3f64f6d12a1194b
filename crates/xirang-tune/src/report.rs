//! The tune report: one self-contained HTML file (inline SVG plots drawn with `plotters`,
//! inline CSS, no network) with the search, the result against the baselines, what the
//! fabric did under the recommended and the vendor settings, and which settings mattered.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plotters::prelude::*;
use xirang_sim::RunResult;
use xirang_sim::time::{PS_PER_US, Ps};

use crate::render::Context;
use crate::search::TuneResult;
use crate::space::{Domain, Param};

/// A sampled full run of one configuration, for the time-series plots.
#[derive(Debug)]
pub struct Sample {
    /// `tuned`, `vendor`, ...
    pub name: String,
    /// The run (with time series).
    pub run: RunResult,
}

/// Sampling interval of the report's time series, µs.
pub const SAMPLE_US: f64 = 20.0;

/// Largest time series the report samples, in values: sample points times the NICs and
/// link ends that report at each. A sampled run holds its series in memory, 32 to 48
/// bytes a value: 20 million is about a gigabyte for each of the three runs. rail-1024gpu
/// (6,278 µs, 1,024 NICs, 2,048 links) is about 1.6 million; rail-8192gpu's (29,526 µs,
/// 8,192 NICs, 24,576 links) would be about 85 million each, 3 to 4 GB a run. A sampled
/// run fast-forwards where the scenario lets it, the samples of skipped time made up
/// from the steady state (docs/fast-forward.md, "Samples in skipped time"): its time is
/// not what limits it (until those were made up, rail-8192gpu's would have been exact
/// runs of 1,616 to 2,018 s each here, BENCHMARKS.md).
pub const REPORT_SERIES_BUDGET: u64 = 20_000_000;

/// The report's sampled runs, or why there are none.
#[derive(Debug, Default)]
pub struct Sampled {
    /// The runs, in the order tuned (when recommended), vendor, paper.
    pub runs: Vec<Sample>,
    /// Why the runs were not sampled.
    pub skipped: Option<String>,
}

/// The values a run's time series would hold: a sample every [`SAMPLE_US`] over
/// `sim_us`, each with a rate per NIC (a busy NIC sends on a QP at least) and the
/// counters of both ends of every link.
pub fn series_estimate(sim_us: f64, nics: usize, links: usize) -> u64 {
    let points = (sim_us / SAMPLE_US).ceil().max(1.0) as u64;
    points * (nics as u64 + 2 * links as u64)
}

/// Runs the recommendation (when it differs from the vendor's) and the vendor and paper
/// baselines once more, on the first held-out seed, with time series, in parallel; none
/// when their series would be larger than [`REPORT_SERIES_BUDGET`].
pub fn samples(
    eval: &crate::eval::Evaluator<'_>,
    r: &TuneResult,
    baselines: &[crate::space::Baseline],
) -> Sampled {
    use rayon::prelude::*;
    let fabric = &eval.loaded().fabric;
    let vendor_us = r
        .held_out
        .iter()
        .find(|h| h.name == "vendor")
        .and_then(|h| h.metrics.first())
        .map_or(0.0, |m| m.sim_us);
    let values = series_estimate(vendor_us, fabric.nics.len(), fabric.links.len());
    if values > REPORT_SERIES_BUDGET {
        return Sampled {
            runs: Vec::new(),
            skipped: Some(format!(
                "Time series not sampled: the vendor's run ({vendor_us:.0} µs over {} NICs and {} links) would hold about {:.0} million values a configuration, over the report's budget of {:.0} million (they are held in memory). `xirang sim recommendation.toml --sample 20us` draws them for one configuration.",
                fabric.nics.len(),
                fabric.links.len(),
                values as f64 / 1e6,
                REPORT_SERIES_BUDGET as f64 / 1e6
            )),
        };
    }
    let seed = r
        .seeds
        .1
        .first()
        .copied()
        .unwrap_or(eval.loaded().scenario.run.seed);
    let mut configs: Vec<(String, &xirang_fabric::config::FabricConfig)> = Vec::new();
    if matches!(r.verdict, crate::search::Verdict::Recommended) {
        configs.push(("tuned".to_string(), &r.config));
    }
    for b in baselines.iter().take(2) {
        configs.push((b.name.to_string(), &b.config));
    }
    let runs = configs
        .par_iter()
        .map(|(name, c)| Sample {
            name: name.clone(),
            run: eval.run_full(c, seed, SAMPLE_US),
        })
        .collect();
    Sampled { runs, skipped: None }
}

/// Plot size in pixels.
const W: u32 = 960;
const H: u32 = 400;
/// One colour per configuration, in the order tuned, vendor, paper, scenario.
const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws one plot into an SVG string; a drawing error becomes a visible message in the
/// report instead of a missing figure.
fn svg(
    name: &str,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> DrawResult,
) -> String {
    let mut buf = String::new();
    let err = {
        let root = SVGBackend::with_string(&mut buf, (W, H)).into_drawing_area();
        let r = root.fill(&WHITE).map_err(|e| e.into()).and_then(|_| draw(&root));
        let p = root.present();
        r.err().map(|e| e.to_string()).or(p.err().map(|e| e.to_string()))
    };
    match err {
        Some(e) => format!("<p class=\"error\">plot {name} failed: {}</p>", html_escape(&e)),
        None => format!("<div class=\"plot\" data-name=\"{name}\">{buf}</div>"),
    }
}

/// Every plot's legend: the series' labels in a framed, nearly opaque box.
fn draw_legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> DrawResult
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Objective of every candidate's first round, and the best final-round objective so far.
fn plot_objective(r: &TuneResult) -> String {
    svg("objective", |root| {
        let pts: Vec<(f64, f64)> = r
            .candidates
            .iter()
            .map(|c| (c.id as f64, c.objectives[0].min(3.0)))
            .collect();
        let n = r.candidates.len().max(1) as f64;
        let ymax = pts.iter().map(|p| p.1).fold(1.2, f64::max) * 1.05;
        let ymin = pts.iter().map(|p| p.1).fold(1.0, f64::min) * 0.95;
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Objective per candidate (first round, 2 seeds) and best so far (all search seeds)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n, ymin..ymax)?;
        chart
            .configure_mesh()
            .x_desc("candidate")
            .y_desc("objective (vendor = 1, lower is better)")
            .draw()?;
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color(0).filled())))?
            .label("candidate, first round")
            .legend(|(x, y)| Circle::new((x + 10, y), 3, color(0).filled()));
        let mut best = f64::INFINITY;
        let mut line = Vec::new();
        for c in &r.candidates {
            if c.violation.is_none()
                && let Some(o) = c.objectives.get(2)
            {
                best = best.min(*o);
            }
            if best.is_finite() {
                line.push((c.id as f64, best));
            }
        }
        chart
            .draw_series(LineSeries::new(line, color(2).stroke_width(3)))?
            .label("best so far, final round")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(2).stroke_width(3)));
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, 1.0), (n, 1.0)],
                color(1).stroke_width(2),
            ))?
            .label("vendor defaults")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(1).stroke_width(2)));
        draw_legend(&mut chart)?;
        Ok(())
    })
}

/// Held-out bars: each class's metric relative to the vendor's, per configuration, with
/// one standard deviation over the seeds.
fn plot_classes(r: &TuneResult) -> String {
    svg("classes", |root| {
        let classes: Vec<String> = r
            .held_out
            .first()
            .map(|h| h.classes.keys().cloned().collect())
            .unwrap_or_default();
        let configs: Vec<&str> = r.held_out.iter().map(|h| h.name.as_str()).collect();
        let groups = (classes.len() + 1) as f64;
        let mut ymax: f64 = 1.2;
        for h in &r.held_out {
            for v in h.classes.values() {
                ymax = ymax.max(v * 1.25);
            }
        }
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Held-out seeds: each class's metric and the objective, relative to vendor defaults",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..groups, 0.0..ymax)?;
        let labels: Vec<String> = classes
            .iter()
            .map(|c| {
                let kind = if r.held_out[0]
                    .metrics
                    .iter()
                    .any(|m| m.classes.get(c).and_then(|x| x.collective_us).is_some())
                {
                    "collective time"
                } else if r.held_out[0].serving().iter().any(|f| &f.class == c) {
                    "TTFT/TPOT p50/p99"
                } else {
                    "latency p99/p99.9"
                };
                format!("{c} ({kind})")
            })
            .chain(std::iter::once("objective".to_string()))
            .collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("relative to vendor (lower is better)")
            .draw()?;
        chart.draw_series(
            labels
                .iter()
                .enumerate()
                .map(|(g, l)| Text::new(l.clone(), (g as f64 + 0.1, ymax * 0.97), ("sans-serif", 14))),
        )?;
        let width = 0.8 / configs.len().max(1) as f64;
        for (k, h) in r.held_out.iter().enumerate() {
            let mut bars = Vec::new();
            let mut errs = Vec::new();
            for (g, c) in classes.iter().enumerate() {
                let v = h.classes.get(c).copied().unwrap_or(0.0);
                let x0 = g as f64 + 0.1 + k as f64 * width;
                bars.push(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, v)],
                    color(k).filled(),
                ));
                // Per-seed spread of this class's ratio.
                let per_seed: Vec<f64> = h
                    .metrics
                    .iter()
                    .enumerate()
                    .filter_map(|(i, _)| per_seed_ratio(r, k, i, c))
                    .collect();
                let sd = std_dev(&per_seed);
                let xm = x0 + width * 0.45;
                errs.push(PathElement::new(
                    vec![(xm, v - sd), (xm, v + sd)],
                    BLACK.stroke_width(2),
                ));
            }
            let v = h.mean();
            let x0 = classes.len() as f64 + 0.1 + k as f64 * width;
            bars.push(Rectangle::new(
                [(x0, 0.0), (x0 + width * 0.9, v)],
                color(k).filled(),
            ));
            let xm = x0 + width * 0.45;
            errs.push(PathElement::new(
                vec![(xm, v - h.std()), (xm, v + h.std())],
                BLACK.stroke_width(2),
            ));
            chart
                .draw_series(bars)?
                .label(h.name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color(k).filled()));
            chart.draw_series(errs)?;
        }
        draw_legend(&mut chart)?;
        Ok(())
    })
}

/// One class's metric ratio on one held-out seed for configuration `k` (the bars' spread).
fn per_seed_ratio(r: &TuneResult, k: usize, seed: usize, class: &str) -> Option<f64> {
    let m = r.held_out.get(k)?.metrics.get(seed)?.classes.get(class)?;
    let v = r
        .held_out
        .iter()
        .find(|h| h.name == "vendor")?
        .metrics
        .get(seed)?
        .classes
        .get(class)?;
    match (m.collective_us, v.collective_us, m.p99_us, v.p99_us) {
        (Some(a), Some(b), _, _) if b > 0.0 => Some(a / b),
        (_, _, Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// Empirical CDFs, one per sample.
fn plot_cdf(name: &str, title: &str, x_desc: &str, series: &[(String, Vec<f64>)]) -> String {
    svg(name, |root| {
        let xmax = series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .fold(1.0, f64::max)
            * 1.05;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..1.0)?;
        chart.configure_mesh().x_desc(x_desc).y_desc("fraction").draw()?;
        if series.iter().all(|s| s.1.is_empty()) {
            chart.draw_series(std::iter::once(Text::new(
                "no values in these runs",
                (0.0, 0.5),
                ("sans-serif", 20),
            )))?;
        }
        for (k, (label, values)) in series.iter().enumerate() {
            let mut v = values.clone();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1) as f64;
            let pts: Vec<(f64, f64)> = v
                .iter()
                .enumerate()
                .map(|(i, x)| (*x, (i + 1) as f64 / n))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, color(k).stroke_width(2)))?
                .label(format!("{label} ({} values)", values.len()))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(k).stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

fn us(t: Ps) -> f64 {
    t as f64 / PS_PER_US as f64
}

/// Queue depth over time at the queue that grew deepest in the vendor run, in every sample.
fn plot_queues(samples: &[Sample]) -> String {
    // The deepest queue of the first sample that has one.
    let mut peak: BTreeMap<(String, u8), u64> = BTreeMap::new();
    if let Some(s) = samples.iter().find(|s| s.name == "vendor").or(samples.first()) {
        for (_, port, prio, bytes) in &s.run.queue_series {
            let e = peak.entry((port.clone(), *prio)).or_default();
            *e = (*e).max(*bytes);
        }
    }
    let target = peak.iter().max_by_key(|(_, v)| **v).map(|(k, _)| k.clone());
    svg("queues", |root| {
        let series: Vec<(String, Vec<(f64, f64)>)> = samples
            .iter()
            .map(|s| {
                let pts = s
                    .run
                    .queue_series
                    .iter()
                    .filter(|(_, port, prio, _)| target.as_ref().is_some_and(|(p, q)| p == port && q == prio))
                    .map(|(t, _, _, b)| (us(*t), *b as f64 / 1e3))
                    .collect();
                (s.name.clone(), pts)
            })
            .collect();
        let xmax = series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.0))
            .fold(1.0, f64::max);
        let ymax = series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.1;
        let title = match &target {
            Some((p, q)) => format!("Queue depth at {p} priority {q} (deepest under vendor defaults)"),
            None => "Queue depth (no queue built up)".to_string(),
        };
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("time (µs)")
            .y_desc("queue (KB)")
            .draw()?;
        for (k, (label, pts)) in series.into_iter().enumerate() {
            chart
                .draw_series(LineSeries::new(pts, color(k).stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(k).stroke_width(2)));
        }
        draw_legend(&mut chart)?;
        Ok(())
    })
}

/// Sending rate over time of the four QPs with the most rate samples in the tuned run.
fn plot_rates(samples: &[Sample]) -> String {
    svg("rates", |root| {
        let Some(s) = samples.first() else {
            return Ok(());
        };
        let mut count: BTreeMap<(u64, u32), usize> = BTreeMap::new();
        for (_, flow, qp, _) in &s.run.rate_series {
            *count.entry((*flow, *qp)).or_default() += 1;
        }
        let mut qps: Vec<((u64, u32), usize)> = count.into_iter().collect();
        qps.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let chosen: Vec<(u64, u32)> = qps.iter().take(4).map(|x| x.0).collect();
        let xmax = s.run.rate_series.iter().map(|r| us(r.0)).fold(1.0, f64::max);
        // Rates are kept in bit/s.
        let ymax = s.run.rate_series.iter().map(|r| r.3 / 1e9).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Sending rate of four QPs over time ({} settings)", s.name),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("time (µs)")
            .y_desc("rate (Gbit/s)")
            .draw()?;
        for (k, &(flow, qp)) in chosen.iter().enumerate() {
            let pts: Vec<(f64, f64)> = s
                .run
                .rate_series
                .iter()
                .filter(|r| (r.1, r.2) == (flow, qp))
                .map(|r| (us(r.0), r.3 / 1e9))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, color(k).stroke_width(2)))?
                .label(format!("flow {flow} QP {qp}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(k).stroke_width(2)));
        }
        draw_legend(&mut chart)?;
        Ok(())
    })
}

/// PFC pause frames over time, one row per port that sent any, per sample.
fn plot_pfc(samples: &[Sample]) -> String {
    svg("pfc", |root| {
        let mut ports: Vec<(u32, bool, u16)> = samples
            .iter()
            .flat_map(|s| {
                s.run
                    .pfc
                    .iter()
                    .filter(|e| e.pause)
                    .map(|e| (e.node_id, e.at_switch, e.ifindex))
            })
            .collect();
        ports.sort();
        ports.dedup();
        let xmax = samples
            .iter()
            .map(|s| us(s.run.stats.sim_time_ps))
            .fold(1.0, f64::max);
        let total: usize = samples
            .iter()
            .map(|s| s.run.pfc.iter().filter(|e| e.pause).count())
            .sum();
        let title = if total == 0 {
            "PFC pause frames over time: none in these runs".to_string()
        } else {
            format!(
                "PFC pause frames over time ({total} XOFF frames, {} ports)",
                ports.len()
            )
        };
        let rows = ports.len().max(1) as f64;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, -0.5..rows)?;
        chart
            .configure_mesh()
            .x_desc("time (µs)")
            .y_desc("port (row)")
            .draw()?;
        for (k, s) in samples.iter().enumerate() {
            let offset = k as f64 / (samples.len() as f64 + 1.0) * 0.6;
            let pts: Vec<(f64, f64)> = s
                .run
                .pfc
                .iter()
                .filter(|e| e.pause)
                .filter_map(|e| {
                    ports
                        .iter()
                        .position(|p| *p == (e.node_id, e.at_switch, e.ifindex))
                        .map(|i| (us(e.time), i as f64 + offset))
                })
                .collect();
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color(k).filled())))?
                .label(s.name.clone())
                .legend(move |(x, y)| Circle::new((x + 10, y), 3, color(k).filled()));
        }
        draw_legend(&mut chart)?;
        Ok(())
    })
}

/// |Spearman rank correlation| between each parameter and the first-round objective over
/// the feasible candidates: which settings the objective moved with during the search
/// (the sweeps, [`plot_sweep`], are the measured one-at-a-time effect).
pub fn search_correlation(r: &TuneResult, space: &[Param]) -> Vec<(String, f64)> {
    let feasible: Vec<_> = r.candidates.iter().filter(|c| c.violation.is_none()).collect();
    let objective: Vec<f64> = feasible.iter().map(|c| c.objectives[0]).collect();
    let ro = ranks(&objective);
    let mut v: Vec<(String, f64)> = space
        .iter()
        .filter_map(|p| {
            let xs: Vec<f64> = feasible
                .iter()
                .map(|c| {
                    let val = c.values.iter().find(|(n, _)| *n == p.name).map(|(_, v)| v);
                    match (&p.domain, val) {
                        (_, Some(xirang_fabric::tune::ParamValue::Number(x))) => *x,
                        (Domain::Choice(ch), Some(xirang_fabric::tune::ParamValue::Choice(s))) => {
                            ch.iter().position(|c| c == s).unwrap_or(0) as f64
                        }
                        _ => 0.0,
                    }
                })
                .collect();
            let rx = ranks(&xs);
            let c = pearson(&rx, &ro)?;
            Some((p.name.clone(), c.abs()))
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// Ranks with ties averaged.
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    idx.sort_by(|a, b| xs[*a].total_cmp(&xs[*b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && xs[idx[j + 1]] == xs[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0;
        for k in &idx[i..=j] {
            r[*k] = avg;
        }
        i = j + 1;
    }
    r
}

fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len() as f64;
    if a.len() < 3 {
        return None;
    }
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

fn plot_correlation(sens: &[(String, f64)]) -> String {
    svg("correlation", |root| {
        let top: Vec<&(String, f64)> = sens.iter().take(12).collect();
        let n = top.len().max(1) as f64;
        let mut chart = ChartBuilder::on(root)
            .caption(
                "During the search: |rank correlation| of each setting with the first-round objective",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(330)
            .build_cartesian_2d(0.0..1.0, 0.0..n)?;
        let names: Vec<String> = top.iter().map(|x| x.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(names.len() * 2 + 1)
            .y_label_formatter(&|y| {
                let i = y.floor() as usize;
                if (y - y.floor() - 0.5).abs() < 0.01 {
                    names
                        .get(names.len().saturating_sub(i + 1))
                        .cloned()
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_desc("|Spearman ρ|")
            .draw()?;
        chart.draw_series(top.iter().enumerate().map(|(i, (_, v))| {
            let y = n - 1.0 - i as f64;
            Rectangle::new([(0.0, y + 0.15), (*v, y + 0.85)], color(0).filled())
        }))?;
        Ok(())
    })
}

/// One sensitivity sweep: each class's metric and the objective against the setting
/// (change from the vendor's, %), each class's guardrail as a thin line of its colour, the
/// recommended value as a vertical line. A log-scale setting is drawn on a log axis.
fn plot_sweep(sw: &crate::search::Sweep, p: Option<&Param>, tolerance: impl Fn(&str) -> f64) -> String {
    use xirang_fabric::tune::ParamValue;
    let log = matches!(p.map(|p| &p.domain), Some(Domain::Number { log: true, .. }));
    let choices: Vec<String> = sw.points.iter().map(|pt| pt.value.to_string()).collect();
    let x_of = |v: &ParamValue, i: usize| match v {
        ParamValue::Number(x) if log => x.max(f64::MIN_POSITIVE).log10(),
        ParamValue::Number(x) => *x,
        ParamValue::Choice(_) => i as f64,
    };
    let name = format!("sweep {}", sw.name);
    svg(&name, |root| {
        let classes: Vec<String> = sw
            .points
            .first()
            .map(|pt| pt.classes.keys().cloned().collect())
            .unwrap_or_default();
        let xs: Vec<f64> = sw
            .points
            .iter()
            .enumerate()
            .map(|(i, pt)| x_of(&pt.value, i))
            .collect();
        let (xmin, xmax) = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        let pad = if xmax > xmin { (xmax - xmin) * 0.05 } else { 0.5 };
        let mut ys: Vec<f64> = sw
            .points
            .iter()
            .flat_map(|pt| {
                pt.classes
                    .values()
                    .map(|r| (r - 1.0) * 100.0)
                    .chain(std::iter::once((pt.objective - 1.0) * 100.0))
            })
            .collect();
        ys.extend(classes.iter().map(|c| tolerance(c) * 100.0));
        let (ymin, ymax) = ys
            .iter()
            .fold((-1.0f64, 1.0f64), |(a, b), y| (a.min(*y), b.max(*y)));
        let ypad = (ymax - ymin) * 0.08;
        let at_x = sw.points.iter().position(|pt| pt.value == sw.at).map(|i| xs[i]);
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "{}: each class's metric against the setting (others at the recommendation)",
                    sw.name
                ),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(xmin - pad..xmax + pad, ymin - ypad..ymax + ypad)?;
        chart
            .configure_mesh()
            .x_desc(if log {
                format!("{} (log scale)", sw.name)
            } else {
                sw.name.clone()
            })
            .y_desc("change from vendor, % (lower is better)")
            .x_label_formatter(&|x| {
                if !choices.is_empty() && matches!(sw.points[0].value, ParamValue::Choice(_)) {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 {
                        return choices.get(i as usize).cloned().unwrap_or_default();
                    }
                    return String::new();
                }
                let v = if log { 10f64.powf(*x) } else { *x };
                if v.abs() >= 1000.0 {
                    format!("{:.0}", v)
                } else {
                    format!("{:.3}", v)
                        .trim_end_matches('0')
                        .trim_end_matches('.')
                        .to_string()
                }
            })
            .draw()?;
        for (k, c) in classes.iter().enumerate() {
            let pts: Vec<(f64, f64)> = sw
                .points
                .iter()
                .zip(&xs)
                .filter_map(|(pt, x)| pt.classes.get(c).map(|r| (*x, (r - 1.0) * 100.0)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color(k).stroke_width(2)))?
                .label(format!("{c} (guardrail +{:.1} %)", tolerance(c) * 100.0))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color(k).stroke_width(2)));
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color(k).filled())))?;
            let g = tolerance(c) * 100.0;
            chart.draw_series(LineSeries::new(
                vec![(xmin - pad, g), (xmax + pad, g)],
                color(k).mix(0.5).stroke_width(1),
            ))?;
        }
        let obj: Vec<(f64, f64)> = sw
            .points
            .iter()
            .zip(&xs)
            .map(|(pt, x)| (*x, (pt.objective - 1.0) * 100.0))
            .collect();
        chart
            .draw_series(LineSeries::new(obj, BLACK.stroke_width(2)))?
            .label("objective")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
        if let Some(x) = at_x {
            chart
                .draw_series(LineSeries::new(
                    vec![(x, ymin - ypad), (x, ymax + ypad)],
                    RGBColor(0x7f, 0x7f, 0x7f).stroke_width(1),
                ))?
                .label(format!("recommended: {}", sw.at))
                .legend(|(x, y)| {
                    PathElement::new(
                        vec![(x, y), (x + 20, y)],
                        RGBColor(0x7f, 0x7f, 0x7f).stroke_width(1),
                    )
                });
        }
        draw_legend(&mut chart)?;
        Ok(())
    })
}

/// The plots drawn from the sampled runs, or why there are none.
fn html_sampled(s: &mut String, sampled: &Sampled) {
    if let Some(why) = &sampled.skipped {
        let _ = writeln!(s, "\n<h2>What the fabric did</h2>\n<p>{}</p>", html_escape(why));
        return;
    }
    let samples = sampled.runs.as_slice();
    html_cdfs(s, samples);
    s.push_str("\n<h2>What the fabric did</h2>\n");
    s.push_str(&plot_queues(samples));
    s.push_str(&plot_rates(samples));
    s.push_str(&plot_pfc(samples));
}

/// The whole report.
pub fn html(cx: &Context<'_>, r: &TuneResult, space: &[Param], sampled: &Sampled) -> String {
    let mut s = String::new();
    html_head(&mut s, cx, r);
    html_held_out(&mut s, r);
    html_changes(&mut s, cx);
    html_guardrails(&mut s, r);
    if let Some(a) = &r.ablation {
        html_ablation(&mut s, r, a);
    }
    s.push_str("<h2>Search</h2>\n");
    s.push_str(&plot_objective(r));
    s.push_str("\n<h2>Against the baselines</h2>\n");
    s.push_str(&plot_classes(r));
    html_sampled(&mut s, sampled);
    if !r.sensitivity.is_empty() {
        html_sensitivity(&mut s, cx, r, space);
    }
    s.push_str("\n<h2>Which settings the search moved with</h2>\n");
    s.push_str(&plot_correlation(&search_correlation(r, space)));
    s.push_str("\n<pre id=\"plot-check\"></pre>\n<script>");
    s.push_str(CHECK_JS);
    s.push_str("</script>\n</body></html>\n");
    s
}

/// The title, the verdict and what the tune cost, and why the search stopped early if it
/// did: what a reader needs before any figure.
fn html_head(s: &mut String, cx: &Context<'_>, r: &TuneResult) {
    let name = html_escape(&cx.loaded.scenario.name);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Xirang tune: {name}</title>\n<style>{CSS}</style></head><body>\n<h1>Xirang tune: <code>{name}</code></h1>\n<p>{}</p>\n",
        html_escape(&cx.verdict)
    );
    let _ = writeln!(
        s,
        "<p>{} candidates, {} simulations run, {} read back from the trial log, {:.0} s. Search seeds {:?}; held-out seeds {:?} (never used during the search).</p>",
        r.candidates.len(),
        r.runs.0,
        r.runs.1,
        r.wall_s,
        r.seeds.0,
        r.seeds.1
    );
    let _ = writeln!(s, "<p>{}</p>", html_escape(&r.seed_noise.describe()));
    if let Some(why) = &r.search_stopped {
        let _ = writeln!(s, "<p><strong>{}</strong></p>", html_escape(why));
    }
}

/// The held-out table: every configuration's objective on seeds the search never saw,
/// the figures the verdict rests on.
fn html_held_out(s: &mut String, r: &TuneResult) {
    s.push_str("<h2>Result on held-out seeds</h2>\n<table><tr><th>configuration</th><th>objective (mean)</th><th>sd</th><th>vs vendor</th><th>tuned better by (paired, 95 %)</th><th>per class (relative to vendor)</th><th>violations</th></tr>\n");
    for h in &r.held_out {
        let classes: Vec<String> = h.classes.iter().map(|(c, x)| format!("{c} {x:.3}")).collect();
        let versus = r
            .versus_baselines
            .iter()
            .find(|(n, _)| *n == h.name)
            .map_or_else(String::new, |(_, d)| d.percent());
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{:.4}</td><td>{:.4}</td><td>{:+.1}%</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            html_escape(&h.name),
            h.mean(),
            h.std(),
            (1.0 - h.mean()) * 100.0,
            html_escape(&versus),
            html_escape(&classes.join(", ")),
            if h.violations.is_empty() {
                "none".to_string()
            } else {
                html_escape(&h.violations.join("; "))
            }
        );
    }
    s.push_str("</table>\n");
    html_serving(s, r);
}

/// Time to first token and time per output token of every configuration on the held-out
/// seeds (only for scenarios with serving workloads).
fn html_serving(s: &mut String, r: &TuneResult) {
    if r.held_out.iter().all(|h| h.serving().is_empty()) {
        return;
    }
    s.push_str("<h2>Serving on held-out seeds</h2>\n<p>Means over the held-out seeds of each run's median and p99: time to first token (queueing, prefill and KV transfer) and time per output token (a decode step: compute and its MoE all-to-alls), µs.</p>\n<table><tr><th>configuration</th><th>class</th><th>TTFT p50</th><th>TTFT p99</th><th>TPOT p50</th><th>TPOT p99</th></tr>\n");
    let cell = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    for h in &r.held_out {
        for f in h.serving() {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                html_escape(&h.name),
                html_escape(&f.class),
                cell(f.ttft_p50_us),
                cell(f.ttft_p99_us),
                cell(f.tpot_p50_us),
                cell(f.tpot_p99_us)
            );
        }
    }
    s.push_str("</table>\n");
}

/// The recommended changes from the vendor's values (none: the vendor defaults stand).
fn html_changes(s: &mut String, cx: &Context<'_>) {
    s.push_str(
        "<h2>Recommended changes</h2>\n<table><tr><th>setting</th><th>vendor</th><th>recommended</th></tr>\n",
    );
    if cx.changes.is_empty() {
        s.push_str("<tr><td colspan=\"3\">none: the vendor defaults stand</td></tr>\n");
    }
    for (n, a, b) in &cx.changes {
        let _ = writeln!(
            s,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            html_escape(n),
            html_escape(a),
            html_escape(b)
        );
    }
    s.push_str("</table>\n");
}

/// Each class's guardrail on the held-out seeds, when a recommendation was tested.
fn html_guardrails(s: &mut String, r: &TuneResult) {
    if r.guardrails.is_empty() {
        return;
    }
    s.push_str("<h2>Guardrails on held-out seeds</h2>\n<table><tr><th>class</th><th>tolerance</th><th>change (95 % interval)</th><th>margin</th></tr>\n");
    for g in &r.guardrails {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{:.1} %</td><td>{}</td><td>{:+.1} %</td></tr>",
            html_escape(&g.class),
            g.tolerance * 100.0,
            html_escape(&g.change.percent()),
            g.margin * 100.0
        );
    }
    s.push_str("</table>\n");
}

/// The ablation: what each kept change is worth, and what was reverted and why.
fn html_ablation(s: &mut String, r: &TuneResult, a: &crate::search::Ablation) {
    let _ = writeln!(
        s,
        "<h2>What each change is worth</h2>\n<p>Of the candidate's {} changed settings, in {} changes (a class's congestion control is one), {} are kept: each is significantly worse to revert (objective without it minus with it, paired by seed, on {} validation seeds no other step used; 95 % bootstrap interval). {} were reverted.</p>\n<table><tr><th>setting</th><th>vendor</th><th>recommended</th><th>worse without it</th></tr>",
        a.before.len(),
        a.kept.len() + a.reverted.len(),
        a.kept.len(),
        r.validation_seeds.len(),
        a.reverted.len()
    );
    for (name, cost, why) in &a.reverted {
        let _ = writeln!(
            s,
            "<tr><td><code>{}</code> (reverted)</td><td colspan=\"2\">{}</td><td>{}</td></tr>",
            html_escape(name),
            html_escape(why),
            html_escape(&cost.percent())
        );
    }
    for c in &a.kept {
        for (i, (n, vendor, value)) in c.settings.iter().enumerate() {
            let worth = if i == 0 {
                match &c.revert_breaks {
                    Some(b) => format!("{}; reverting it breaks: {b}", c.without.percent()),
                    None => c.without.percent(),
                }
            } else {
                format!("(with {})", c.name)
            };
            let _ = writeln!(
                s,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                html_escape(n),
                html_escape(&vendor.to_string()),
                html_escape(&value.to_string()),
                html_escape(&worth)
            );
        }
    }
    s.push_str("</table>\n");
}

/// The request latency and FCT slowdown CDFs of one held-out seed per configuration.
fn html_cdfs(s: &mut String, samples: &[Sample]) {
    let latency: Vec<(String, Vec<f64>)> = samples
        .iter()
        .map(|x| {
            (
                x.name.clone(),
                x.run
                    .requests
                    .iter()
                    .filter_map(|q| q.latency_ps.map(us))
                    .collect(),
            )
        })
        .collect();
    s.push_str(&plot_cdf(
        "latency",
        "Request latency CDF (one held-out seed)",
        "latency (µs)",
        &latency,
    ));
    let slowdown: Vec<(String, Vec<f64>)> = samples
        .iter()
        .map(|x| {
            (
                x.name.clone(),
                x.run
                    .flows
                    .iter()
                    .filter(|f| !f.in_collective)
                    .filter_map(|f| f.slowdown())
                    .collect(),
            )
        })
        .collect();
    s.push_str(&plot_cdf(
        "slowdown",
        "FCT slowdown CDF of flows outside collectives (one held-out seed)",
        "slowdown (FCT / ideal)",
        &slowdown,
    ));
}

/// The sensitivity sweeps: a table of how far each swept setting is from a guardrail
/// break, then a plot per sweep.
fn html_sensitivity(s: &mut String, cx: &Context<'_>, r: &TuneResult, space: &[Param]) {
    let spec = &cx.loaded.scenario.tune;
    let _ = writeln!(
        s,
        "\n<h2>How close to a cliff</h2>\n<p>Each kept setting, and every tier's ECN Kmin and Kmax (as a multiple of Kmin), moved one at a time around the recommendation, every other setting at its recommended value, on {} held-out seeds per point. Thin lines are each class's guardrail.</p>\n<table><tr><th>swept setting</th><th>recommended</th><th>objective over the sweep</th><th>nearest guardrail break</th></tr>",
        r.sensitivity_seeds.len()
    );
    for sw in &r.sensitivity {
        let (lo, hi) = sw.objective_range();
        let brk = match sw.nearest_break(|c| spec.guardrail(c)) {
            Some((p, class, x)) => format!("{class} {:+.1} % at {}", x * 100.0, p.value),
            None => "none".to_string(),
        };
        let _ = writeln!(
            s,
            "<tr><td><code>{}</code></td><td>{}</td><td>{lo:.3} .. {hi:.3} of vendor</td><td>{}</td></tr>",
            html_escape(&sw.name),
            html_escape(&sw.at.to_string()),
            html_escape(&brk)
        );
    }
    s.push_str("</table>\n");
    for sw in &r.sensitivity {
        let p = space.iter().find(|p| p.name == sw.name);
        s.push_str(&plot_sweep(sw, p, |c| spec.guardrail(c)));
    }
}

const CSS: &str = "#plot-check{display:none}body{font-family:sans-serif;max-width:1000px;margin:20px auto;color:#222}table{border-collapse:collapse;margin:10px 0}td,th{border:1px solid #bbb;padding:4px 8px;text-align:left}.plot{margin:16px 0;width:960px;height:400px}.error{color:#b00}code{font-size:90%}";

/// After load, records for every plot how many drawn shapes it has and where it is on the
/// page, so that a headless browser run can check that every plot drew (the test reads
/// this with `--dump-dom` and checks the pixels of each plot's box in a screenshot).
const CHECK_JS: &str = r#"
window.addEventListener('load', function () {
  var out = [];
  document.querySelectorAll('div.plot').forEach(function (d) {
    var shapes = 0;
    d.querySelectorAll('path, polyline, line, rect, circle').forEach(function (e) {
      var b = e.getBBox();
      if (b.width > 0 || b.height > 0) { shapes += 1; }
    });
    var r = d.getBoundingClientRect();
    out.push({ name: d.dataset.name, shapes: shapes, x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height });
  });
  document.getElementById('plot-check').textContent = JSON.stringify(out);
});
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_samples_a_thousand_gpus_and_not_eight_thousand() {
        // The two rail fabrics' vendor runs (`xirang topo show`, their tunes' result.json).
        let r1024 = series_estimate(6_278.4, 1_024, 2_048);
        let r8192 = series_estimate(29_525.5, 8_192, 24_576);
        assert_eq!(r1024, 314 * (1_024 + 2 * 2_048));
        assert!(r1024 < REPORT_SERIES_BUDGET, "{r1024}");
        assert!(r8192 > REPORT_SERIES_BUDGET && r8192 / 1_000_000 == 84, "{r8192}");
        // A run that reports nothing still costs one sample.
        assert_eq!(series_estimate(0.0, 2, 1), 4);
    }

    #[test]
    fn runs_not_sampled_draw_no_plot_and_say_why() {
        let mut s = String::new();
        let why = "Time series not sampled: 85 million values";
        html_sampled(
            &mut s,
            &Sampled {
                runs: Vec::new(),
                skipped: Some(why.into()),
            },
        );
        assert!(s.contains(why) && !s.contains("<svg"), "{s}");
        let mut drawn = String::new();
        html_sampled(&mut drawn, &Sampled::default());
        assert!(drawn.contains("<svg"), "{drawn}");
    }
}
