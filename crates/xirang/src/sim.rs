//! `xirang sim`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use xirang_fabric::Loaded;
use xirang_sim::output::Summary;
use xirang_sim::time::{PS_PER_US, us};

use crate::Outcome;
use crate::cli::{HpccCc, SimArgs};
use xirang_telemetry::sim_out;

/// The HPCC files' scenario under the chosen algorithm's reference settings.
fn load_hpcc(topo: &Path, flows: &Path, cc: HpccCc) -> Result<Loaded> {
    use xirang_fabric::reference::{ReferenceCc, hpcc_files};
    let cc = match cc {
        HpccCc::Dcqcn => ReferenceCc::Dcqcn,
        HpccCc::Timely => ReferenceCc::Timely,
        HpccCc::Hpcc => ReferenceCc::Hpcc,
        HpccCc::Dctcp => ReferenceCc::Dctcp,
    };
    Ok(hpcc_files(topo, flows, cc)?)
}

/// Steps of the progress bar.
const PROGRESS_STEPS: u64 = 1000;

pub(crate) fn run(a: &SimArgs) -> Result<Outcome> {
    let loaded = match (&a.scenario, &a.hpcc_topology, &a.hpcc_flows) {
        (Some(f), None, None) => crate::cmd::load(f)?,
        (None, Some(t), Some(fl)) => load_hpcc(t, fl, a.cc)?,
        _ => bail!("give a scenario file, or --hpcc-topology and --hpcc-flows"),
    };
    let opts = options(a, &loaded);
    #[cfg(feature = "mpi")]
    let mpi = if a.mpi {
        Some(xirang_mpi::job::Job::start()?)
    } else {
        None
    };
    #[cfg(not(feature = "mpi"))]
    if a.mpi {
        bail!(xirang_mpi::NOT_BUILT);
    }
    // Ranks other than 0 simulate their partitions and write nothing.
    #[cfg(feature = "mpi")]
    if let Some(job) = &mpi
        && job.rank() != 0
    {
        let parts = a.partitions.unwrap_or(job.size() * a.threads);
        job.simulate(&loaded, &opts, parts, a.threads, &mut |_| {});
        return Ok(Outcome::Clean);
    }
    let out_dir = a.out.clone().unwrap_or_else(|| {
        let name = &loaded.scenario.name;
        PathBuf::from("out").join(if name.is_empty() { "sim" } else { name })
    });
    // Refuse someone else's directory before the run, not after it.
    let out = sim_out::create(&out_dir);
    #[cfg(feature = "mpi")]
    if let (Some(job), Err(e)) = (&mpi, &out) {
        // The other ranks are already in the run: end them too.
        job.abort(e);
    }
    let out = out?;

    let bar = progress_bar(a.quiet);
    let t0 = Instant::now();
    let mut on_progress = progress(&bar, opts.end);
    #[cfg(feature = "mpi")]
    let by_mpi = mpi.as_ref().map(|job| {
        let (r, report) = job
            .simulate(
                &loaded,
                &opts,
                a.partitions.unwrap_or(job.size() * a.threads),
                a.threads,
                &mut on_progress,
            )
            .expect("invariant: rank 0 has the results");
        (r, Some(report))
    });
    #[cfg(not(feature = "mpi"))]
    let by_mpi = None;
    let (result, parallel) = simulate(a, &loaded, &opts, by_mpi, &bar, &mut on_progress);
    let wall = t0.elapsed();
    bar.finish_and_clear();
    let summary = result.summary();
    warn(&loaded, &result, &summary);
    let wall_s = wall.as_secs_f64();
    let run = Run {
        loaded: &loaded,
        opts: &opts,
        result: &result,
        summary: &summary,
        parallel: parallel.as_ref(),
        wall_s,
    };
    let report = write(&out, &out_dir, &run)?;
    out.commit()?;
    if let Err(e) = result.check_conservation() {
        bail!("conservation check failed (a simulator bug):\n{e}");
    }
    if a.json {
        crate::cmd::out(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else {
        let mut text = render(&loaded.scenario.name, &summary, wall_s, &out_dir);
        if let Some(s) = &result.engine.steady {
            text.push_str(&steady_table(s));
        }
        if let Some(f) = &result.engine.fast_forward {
            text.push_str(&ff_line(f));
        }
        crate::cmd::out(&text)?;
    }
    Ok(Outcome::Clean)
}

/// The scenario's run options with `--seed`, `--until` and `--sample`.
fn options(a: &SimArgs, loaded: &Loaded) -> xirang_sim::RunOptions {
    let mut opts = xirang_sim::options(loaded);
    if let Some(s) = a.seed {
        opts.seed = s;
    }
    if let Some(u) = a.until {
        opts.end = Some(us(u));
    }
    if let Some(s) = a.sample {
        opts.sample_interval = Some(us(s));
    }
    opts.steady_probe = a.steady_probe;
    let asked = a.fast_forward
        || a.ff_theta.is_some()
        || a.ff_window.is_some()
        || a.ff_confirm.is_some()
        || a.ff_no_memo;
    if a.exact {
        opts.fast_forward = None;
    } else if asked || opts.fast_forward.is_some() {
        let mut c = opts.fast_forward.unwrap_or_default();
        // Asked for on the command line: for every collective, not only the validated.
        if asked {
            c.validated_only = false;
        }
        if let Some(t) = a.ff_theta {
            c.theta = t;
        }
        if let Some(w) = a.ff_window {
            c.window = Some(w.round() as u32);
        }
        if let Some(us) = a.ff_confirm {
            c.memo_confirm = Some(us.round() as u32);
        }
        if a.ff_no_memo {
            c.memo_confirm = None;
        }
        opts.fast_forward = Some(c);
    }
    opts
}

/// The run's progress bar (hidden with `--quiet`).
fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(PROGRESS_STEPS);
    b.set_style(
        ProgressStyle::with_template("{spinner} {bar:30} {percent}% {msg}  [{elapsed} < {eta}]")
            .expect("valid template"),
    );
    b
}

/// Progress is finished transfers of all of them, with an estimate of the time left;
/// with an end time, simulated time against it, whichever is further along.
fn progress(bar: &ProgressBar, end: Option<u64>) -> impl FnMut(xirang_sim::Progress) + '_ {
    move |p: xirang_sim::Progress| {
        let by_work = p.done as f64 / p.total.max(1) as f64;
        let by_time = end.map_or(0.0, |e| p.now as f64 / e.max(1) as f64);
        bar.set_position((by_work.max(by_time).min(1.0) * PROGRESS_STEPS as f64) as u64);
        bar.set_message(format!(
            "{}/{} sends and receives, simulated {:.1} us",
            p.done,
            p.total,
            p.now as f64 / PS_PER_US as f64
        ));
    }
}

/// A run's result, with the parallel engine's report when it ran in parallel.
type Simulated = (xirang_sim::RunResult, Option<xirang_sim::parallel::Report>);

/// The run: the MPI job's (`by_mpi`, already done), on threads when more than one
/// partition or thread is asked for, otherwise the serial engine; saying why a parallel
/// run went serial.
fn simulate(
    a: &SimArgs,
    loaded: &Loaded,
    opts: &xirang_sim::RunOptions,
    by_mpi: Option<Simulated>,
    bar: &ProgressBar,
    on_progress: &mut dyn FnMut(xirang_sim::Progress),
) -> Simulated {
    let parts = a.partitions.unwrap_or(a.threads);
    if let Some(r) = by_mpi {
        if let Some(why) = r.1.as_ref().and_then(|p| p.plan.serial_because.as_ref()) {
            bar.suspend(|| eprintln!("note: running serially on rank 0: {why}"));
        }
        r
    } else if parts > 1 || a.threads > 1 {
        let (r, report) = xirang_sim::parallel::simulate_threads(loaded, opts, parts, a.threads, on_progress);
        if let Some(why) = &report.plan.serial_because {
            bar.suspend(|| eprintln!("note: running serially: {why}"));
        }
        (r, Some(report))
    } else {
        (xirang_sim::simulate(loaded, opts, on_progress), None)
    }
}

/// Warns on stderr about what makes the run's figures not what they seem: workloads not
/// simulated, QPs that gave up, ACK timeouts that stalled flows, collectives cut short.
fn warn(loaded: &Loaded, result: &xirang_sim::RunResult, summary: &Summary) {
    for (w, why) in &result.skipped {
        eprintln!("warning: workload `{w}` was not simulated: {why}");
    }
    let failed: Vec<&xirang_sim::output::FlowResult> = result.flows.iter().filter(|f| f.failed).collect();
    if summary.stats.qps_failed > 0 {
        eprintln!(
            "warning: {} QP(s) gave up after {} ACK timeouts in a row (NCCL_IB_RETRY_CNT; a retry-exceeded completion error), failing {} flow(s){}: their path is down or loses every packet",
            summary.stats.qps_failed,
            loaded.scenario.config.transport.retry_cnt + 1,
            failed.len(),
            failed
                .first()
                .map(|f| format!(", first {} -> {} (flow {})", f.src, f.dst, f.id))
                .unwrap_or_default()
        );
    }
    let timeouts = result.counter_total(|n| n == "local_ack_timeout_err");
    if timeouts > 0 {
        let t = &loaded.scenario.config.transport;
        eprintln!(
            "warning: {timeouts} ACK timeout(s) of {:.3} s each (config.transport.ib_timeout {}, NCCL_IB_TIMEOUT) \
             stalled QPs whose packets were lost ({} dropped in switches, {} corrupted on links): go-back-N \
             recovers a lost packet that no later packet exposes only after the timeout, so the FCTs of those \
             flows measure the timeout, not the fabric. Find the loss, or model a shorter NCCL_IB_TIMEOUT.",
            t.ack_timeout_ps() as f64 / 1e12,
            t.ib_timeout,
            summary.drops,
            result.counter_total(|n| n == "port_rcv_errors" || n == "SAI_PORT_STAT_IF_IN_ERRORS"),
        );
    }
    for c in summary.collectives.iter().filter(|c| !c.finished) {
        eprintln!(
            "warning: collective `{}` did not finish before the run stopped; raise --until",
            c.workload
        );
    }
}

/// A finished run, as its output files need it.
struct Run<'a> {
    loaded: &'a Loaded,
    opts: &'a xirang_sim::RunOptions,
    result: &'a xirang_sim::RunResult,
    summary: &'a Summary,
    parallel: Option<&'a xirang_sim::parallel::Report>,
    wall_s: f64,
}

/// Writes the run's files into `out` (not yet committed); returns what `--json` prints:
/// the results, how the run went, and where the files are.
fn write(out: &xirang_files::OutputDir, out_dir: &Path, run: &Run<'_>) -> Result<serde_json::Value> {
    let Run {
        loaded,
        opts,
        result,
        summary,
        parallel,
        wall_s,
    } = *run;
    let offset = loaded
        .scenario
        .workloads
        .values()
        .find_map(|w| match w {
            xirang_fabric::workload::Workload::HpccFlows(h) => Some(us(h.time_offset_us)),
            _ => None,
        })
        .unwrap_or(0);
    // summary.json holds results only, the same for any thread count; how the run went
    // (time, peaks, partitions) goes to engine.json.
    let results = serde_json::json!({
        "scenario": loaded.scenario.name,
        "seed": opts.seed,
        "summary": summary,
    });
    let engine = serde_json::json!({
        "wall_seconds": wall_s,
        "events_per_second": summary.stats.events as f64 / wall_s.max(1e-9),
        "packet_hops_per_second": summary.stats.packet_hops as f64 / wall_s.max(1e-9),
        "engine": result.engine,
        "parallel": parallel.map(parallel_json),
    });
    sim_out::write(
        out,
        &sim_out::Contents {
            fct: result.fct_hpcc(),
            pfc: result.pfc_hpcc(offset),
            flows: result.flows_json(),
            counters: result.counters_csv(),
            requests: result.requests_csv(),
            links: xirang_sim::output::links_csv(&loaded.fabric),
            summary: serde_json::to_string_pretty(&results)? + "\n",
            engine: serde_json::to_string_pretty(&engine)? + "\n",
            series: opts.sample_interval.map(|_| sim_out::Series {
                rates: result.rates_csv(),
                queues: result.queues_csv(),
                counters: result.counter_series_csv(),
            }),
        },
    )?;
    let mut report = results;
    if let (Some(r), Some(e)) = (report.as_object_mut(), engine.as_object()) {
        r.extend(e.clone());
        r.insert("out_dir".to_string(), out_dir.display().to_string().into());
    }
    Ok(report)
}

/// How a parallel run was divided and what its synchronization cost.
fn parallel_json(r: &xirang_sim::parallel::Report) -> serde_json::Value {
    serde_json::json!({
        "partitions": r.plan.parts(),
        "threads": r.threads,
        "ranks": r.ranks,
        "lookahead_ns": (r.plan.parts() > 1).then_some(r.plan.lookahead_ps / xirang_sim::time::PS_PER_NS),
        "cut_links": r.plan.partition.cut_links,
        "windows": r.stats.windows,
        "packets_between_partitions": r.stats.shipped,
        "serial_because": r.plan.serial_because,
    })
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.prec$}"))
}

fn render(name: &str, s: &Summary, wall_s: f64, out: &Path) -> String {
    let mut t = crate::cmd::table(&[
        "class",
        "flows",
        "FCT p50 us",
        "p95 us",
        "p99 us",
        "slowdown p50",
        "p99",
        "goodput Gbit/s",
    ]);
    for c in &s.classes {
        t.add_row(vec![
            c.class.clone(),
            format!("{}/{}", c.finished, c.flows),
            opt(c.fct_p50_us, 1),
            opt(c.fct_p95_us, 1),
            opt(c.fct_p99_us, 1),
            opt(c.slowdown_p50, 2),
            opt(c.slowdown_p99, 2),
            opt(c.goodput_gbps, 1),
        ]);
    }
    // A run of collectives alone has no per-class flows to show.
    let mut text = if s.classes.is_empty() {
        format!("{name}\n")
    } else {
        format!("{name}\n{t}\n")
    };
    if !s.collectives.is_empty() {
        let mut c = crate::cmd::table(&[
            "collective",
            "operation",
            "ranks",
            "bytes",
            "time us",
            "algbw GB/s",
            "busbw GB/s",
        ]);
        for x in &s.collectives {
            c.add_row(vec![
                x.workload.clone(),
                format!("{} ({}/{}, {} ch)", x.op, x.algorithm, x.protocol, x.channels),
                x.ranks.to_string(),
                x.bytes.to_string(),
                opt(x.time_ps.map(|t| t as f64 / PS_PER_US as f64), 1),
                opt(x.algbw_gbs, 2),
                opt(x.busbw_gbs, 2),
            ]);
        }
        text.push_str(&format!("{c}\n"));
    }
    if !s.latency.is_empty() {
        let mut l = crate::cmd::table(&[
            "inference workload",
            "class",
            "answered",
            "latency p50 us",
            "p99 us",
            "p99.9 us",
        ]);
        for w in &s.latency {
            l.add_row(vec![
                w.workload.clone(),
                w.class.clone(),
                format!("{}/{}", w.answered, w.requests),
                opt(w.p50_us, 1),
                opt(w.p99_us, 1),
                opt(w.p999_us, 1),
            ]);
        }
        text.push_str(&format!("{l}\n"));
    }
    text.push_str(&serving_tables(s));
    let st = &s.stats;
    text.push_str(&format!(
        "PFC frames {} (paused {:.1} us in total), ECN marks {}, CNPs {}, drops {}\n\
         simulated {:.1} us in {:.2} s wall: {} events ({:.2} M/s), {} packet-hops ({:.2} M/s)\n\
         results in {}\n",
        s.pfc_frames,
        s.pfc_pause_us,
        s.ecn_marks,
        s.cnps,
        s.drops,
        st.sim_time_ps as f64 / PS_PER_US as f64,
        wall_s,
        st.events,
        st.events as f64 / wall_s.max(1e-9) / 1e6,
        st.packet_hops,
        st.packet_hops as f64 / wall_s.max(1e-9) / 1e6,
        out.display()
    ));
    text
}

/// What fast-forward did, in a line or two; nothing when nobody asked for it and the run
/// is one it does not serve (engine.json still says why).
fn ff_line(f: &xirang_sim::engine::ffwd::FastForwardReport) -> String {
    if let Some(why) = &f.off {
        if f.by_default {
            return String::new();
        }
        return format!("fast-forward: off for this run: {why}\n");
    }
    let mut s = format!(
        "fast-forward: skipped {:.1} us ({:.1} % of the run) in {} skip(s), {} slices, about {} events saved (spread below {} % for {} us)\n",
        f.skipped_ps as f64 / 1e6,
        f.skipped_share * 100.0,
        f.skips,
        f.slices_skipped,
        f.events_saved,
        f.theta * 100.0,
        f.window_us,
    );
    if let Some(m) = &f.memo
        && m.hits > 0
    {
        s.pop();
        s.push_str(&format!(
            "; {} of them from the memo of steady states ({} kept)\n",
            m.hits, m.entries
        ));
    }
    if f.samples_made_up > 0 {
        s.push_str(&format!(
            "  {} sample(s) fell in skipped time: made up from the steady state (rates and queues held, counters in proportion to time)\n",
            f.samples_made_up
        ));
    }
    if f.fault_times_moved > 0 {
        s.push_str(&format!(
            "  {} fault start(s) and end(s) came after a skip: each skip stopped short of them and they came at their times\n",
            f.fault_times_moved
        ));
    }
    if f.skips == 0
        && let Some((why, n)) = f.not_skipped.iter().max_by_key(|(_, n)| **n)
    {
        s.push_str(&format!(
            "  most checks did not skip because {why} ({n} of {})\n",
            f.checks
        ));
    }
    s
}

/// What `--steady-probe` measured: per criterion, the share of QPs' and connections'
/// time that was steady (docs/fast-forward.md reads it).
fn steady_table(s: &xirang_sim::engine::steady::SteadyReport) -> String {
    let mut t = crate::cmd::table(&[
        "steady: spread below",
        "for",
        "QPs: each / all",
        "connections: each / all",
        "over 16 slices: each / all",
    ]);
    let share = |x: &xirang_sim::engine::steady::SteadyShare, k: usize| {
        if x.active_ps == 0 {
            "-".to_string()
        } else {
            let c = &x.criteria[k];
            format!(
                "{:.1} % / {:.1} %",
                100.0 * c.steady_share,
                100.0 * c.all_steady_share
            )
        }
    };
    for (k, c) in s.qps.criteria.iter().enumerate() {
        t.add_row(vec![
            format!("{:.0} %", 100.0 * c.theta),
            format!("{} us", u64::from(c.window_samples) * s.sample_ns / 1000),
            share(&s.qps, k),
            share(&s.connections, k),
            share(&s.connections_over_periods, k),
        ]);
    }
    let ms = |ps: u64| ps as f64 / 1e9;
    format!(
        "{t}\neach: the share of each sender's time that was steady, summed over senders \
         (QPs {:.1} ms, connections {:.1} ms)\n\
         all: the share of the microseconds with a sender active in which all were steady \
         ({} us, {} us)\n",
        ms(s.qps.active_ps),
        ms(s.connections.active_ps),
        s.qps.active_us,
        s.connections.active_us,
    )
}

/// The MoE and KV-transfer tables of a run's summary (empty without such workloads).
fn serving_tables(s: &xirang_sim::Summary) -> String {
    let mut text = String::new();
    let spread = |x: &xirang_sim::serving::Spread| [opt(x.mean_us, 1), opt(x.p50_us, 1), opt(x.p99_us, 1)];
    if !s.moe.is_empty() {
        let mut t = crate::cmd::table(&[
            "MoE workload",
            "mode",
            "GPUs",
            "phase",
            "mean us",
            "p50 us",
            "p99 us",
            "GB/s",
        ]);
        for m in &s.moe {
            let head = |phase: &str| {
                vec![
                    m.workload.clone(),
                    m.mode.clone(),
                    m.ranks.to_string(),
                    phase.to_string(),
                ]
            };
            let (dgbs, cgbs) = match m.dispatch_rdma_gbs {
                Some(r) => (format!("{r:.1} RDMA"), String::new()),
                None => (opt(m.dispatch_logical_gbs, 1), opt(m.combine_logical_gbs, 1)),
            };
            for (phase, x, gbs) in [
                ("dispatch", &m.dispatch, dgbs),
                ("combine", &m.combine, cgbs),
                ("step (TPOT)", &m.step, String::new()),
                ("step network", &m.step_network, String::new()),
            ] {
                let mut row = head(phase);
                row.extend(spread(x));
                row.push(gbs);
                t.add_row(row);
            }
        }
        text.push_str(&format!("{t}\n"));
    }
    if !s.kv.is_empty() {
        let mut t = crate::cmd::table(&[
            "KV workload",
            "transferred",
            "GB",
            "transfer p50 us",
            "p99 us",
            "TTFT p50 us",
            "p99 us",
            "GB/s per request",
            "GB/s in all",
        ]);
        for k in &s.kv {
            t.add_row(vec![
                k.workload.clone(),
                format!("{}/{}", k.transferred, k.requests),
                format!("{:.2}", k.bytes as f64 / 1e9),
                opt(k.transfer.p50_us, 1),
                opt(k.transfer.p99_us, 1),
                opt(k.ttft.p50_us, 1),
                opt(k.ttft.p99_us, 1),
                opt(k.transfer_gbs, 1),
                opt(k.throughput_gbs, 1),
            ]);
        }
        text.push_str(&format!("{t}\n"));
    }
    text
}
