//! `xirang monitor` and `xirang monitor query`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use xirang_host::tree::DirTree;
use xirang_monitor::alerts::{self, Evaluator, Rule};
use xirang_monitor::collect::{Collector, Source};
use xirang_monitor::history::{History, Retention};
use xirang_monitor::serve::{self, AgentConfig};
use xirang_monitor::web::{self, Web};
use xirang_monitor::{expose, replay};

use crate::Outcome;
use crate::cli::{MonitorArgs, MonitorCmd, MonitorQueryArgs};
use crate::cmd::{out, table};

fn rules(a: &MonitorArgs) -> Result<Vec<Rule>> {
    Ok(match &a.alerts {
        Some(p) => alerts::load_rules(p)?,
        None => alerts::parse_rules(alerts::DEFAULT_RULES, "monitoring/alert-rules.toml")?,
    })
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(crate) fn run(a: &MonitorArgs) -> Result<Outcome> {
    match &a.command {
        Some(MonitorCmd::Query(q)) => return query(q),
        Some(MonitorCmd::Bench(b)) => return crate::bench::monitor::run(b),
        None => {}
    }
    let interval = xirang_fabric::limits::wall_duration(&a.interval)
        .map_err(anyhow::Error::msg)
        .context("--interval")?;
    let retention = Retention {
        raw_s: xirang_fabric::limits::wall_duration(&a.raw_retention)
            .map_err(anyhow::Error::msg)
            .context("--raw-retention")?
            .as_secs(),
        minute_s: xirang_fabric::limits::wall_duration(&a.minute_retention)
            .map_err(anyhow::Error::msg)
            .context("--minute-retention")?
            .as_secs(),
        max_bytes: a.history_max_mib.saturating_mul(1024 * 1024),
    };
    let rules = rules(a)?;
    if let Some(dir) = &a.replay
        && !a.live
    {
        return replay_dir(dir, a, rules, retention);
    }
    let root = a.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    // Refused before a twin's first simulation or a host's first read.
    let web = if a.once { None } else { web_config(a)? };
    let (collector, what) = match (&a.replay, &a.twin) {
        _ if !a.sonic.is_empty() => sonic(&a.sonic)?,
        (_, Some(scenario)) => (
            xirang_calibrate::twin::collector(xirang_calibrate::twin::Twin {
                scenario: scenario.clone(),
                inventory: a.inventory.clone().unwrap_or_default(),
                dilation: a.dilation,
                app_series: a.app_series.into(),
            })?,
            format!(
                "the twin {} on the knobs of {} (live, x{})",
                scenario.display(),
                a.inventory.as_deref().unwrap_or(Path::new("")).display(),
                a.dilation
            ),
        ),
        (Some(dir), None) => (
            live_replay(dir, a.dilation, a.app_series.into())?,
            format!("the run in {} (live replay, x{})", dir.display(), a.dilation),
        ),
        (None, None) => {
            anyhow::ensure!(root.is_dir(), "--root {}: expected a directory", root.display());
            let live = a.root.is_none();
            let mut collector = Collector::new(
                Source::Host {
                    tree: Box::new(DirTree::for_sampling(&root)),
                    run_ethtool: live && !a.no_ethtool,
                },
                None,
            );
            collector.pcidevice = a.pcidevice;
            (collector, root.display().to_string())
        }
    };
    let mut collector = collector;
    let mut what = what;
    if let Some(dir) = &a.nccl_inspector {
        anyhow::ensure!(
            dir.is_dir(),
            "--nccl-inspector {}: expected a directory",
            dir.display()
        );
        let mut reader = xirang_monitor::inspector::InspectorDir::new(dir);
        collector.extra.push(Box::new(move |_| reader.round()));
        what = format!("{what} and NCCL Inspector's files in {}", dir.display());
    }
    if let Some(addr) = &a.nccl_ras {
        collector
            .extra
            .push(xirang_monitor::nccl_ras::feed(addr.clone(), RAS_TIMEOUT));
        what = format!("{what} and NCCL RAS's events from {addr}");
    }
    if a.once {
        return once(collector, interval, rules, a.json);
    }
    eprintln!(
        "xirang monitor: sampling {} every {:?}, serving {}://{}/metrics",
        what,
        interval,
        if web.as_ref().is_some_and(|w| w.tls.is_some()) {
            "https"
        } else {
            "http"
        },
        a.listen
    );
    let cfg = AgentConfig {
        listen: a.listen,
        interval,
        history: a.history.clone(),
        retention,
        rules,
        web,
    };
    serve::run(collector, cfg, |problems| {
        for p in problems {
            eprintln!("xirang monitor: {p}");
        }
    })?;
    Ok(Outcome::Clean)
}

/// A collector of the SONiC switches (or ASIC namespaces) at `urls`, and what it reads.
fn sonic(urls: &[String]) -> Result<(Collector, String)> {
    let parsed = urls
        .iter()
        .map(|u| u.parse::<xirang_monitor::sonic::SonicUrl>())
        .collect::<Result<Vec<_>, String>>()
        .map_err(anyhow::Error::msg)
        .context("--sonic")?;
    let what = format!(
        "SONiC COUNTERS_DB at {}",
        parsed
            .iter()
            .map(|u| u.endpoint.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((
        Collector::new(Source::Feed(xirang_monitor::sonic::feed(parsed)), None),
        what,
    ))
}

/// How long the agent waits for a job's RAS server to connect and answer.
const RAS_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit status of a refused `--listen` (a usage error, as clap's own).
const EXIT_USAGE: i32 = 2;

/// Loads `--web-config` and refuses a non-loopback `--listen` that nothing protects.
fn web_config(a: &MonitorArgs) -> Result<Option<Web>> {
    let web = match &a.web_config {
        Some(p) => Some(web::load(p)?.build()?),
        None => None,
    };
    let protected = web.as_ref().is_some_and(Web::protects);
    if !a.listen.ip().is_loopback() && !protected && !a.insecure_listen {
        let why = match &a.web_config {
            Some(p) => format!("{} configures neither TLS nor basic authentication", p.display()),
            None => "no --web-config was given".to_string(),
        };
        eprintln!(
            "error: --listen {}: not a loopback address, and {why}: anyone who reaches the port \
             would read this host's metrics over plain HTTP.\n\
             Give --web-config FILE (the Prometheus exporter-toolkit format, as node_exporter's \
             --web.config.file: tls_server_config and/or basic_auth_users), or \
             --insecure-listen to serve plain HTTP anyway.",
            a.listen
        );
        std::process::exit(EXIT_USAGE);
    }
    if let Some(w) = &web
        && w.basic_auth.is_some()
        && w.tls.is_none()
    {
        eprintln!(
            "xirang monitor: warning: basic authentication without TLS: passwords travel in \
             clear text (add tls_server_config to the web configuration)"
        );
    }
    Ok(web)
}

fn once(mut collector: Collector, interval: Duration, rules: Vec<Rule>, json: bool) -> Result<Outcome> {
    let mut ev = Evaluator::new(rules);
    let first = collector.round(now_ns());
    ev.eval(&first);
    std::thread::sleep(interval.min(Duration::from_secs(10)));
    let round = collector.round(now_ns());
    let firing = ev.eval(&round);
    if json {
        out(&(serde_json::to_string_pretty(&serde_json::json!({"round": round, "alerts": firing}))? + "\n"))?;
    } else {
        out(&expose::render_round(
            &round,
            &alerts::alert_points(&firing),
            false,
        ))?;
    }
    for p in &round.problems {
        eprintln!("xirang monitor: {p}");
    }
    Ok(Outcome::Clean)
}

/// A collector serving a simulator's output directory as a live fleet
/// ([`replay::Live`]).
fn live_replay(
    dir: &std::path::Path,
    dilation: u64,
    app_series: xirang_monitor::replay::AppSeries,
) -> Result<Collector> {
    anyhow::ensure!(
        replay::is_sim_output(dir),
        "--replay {} --live: expected a `xirang sim --out` directory (host snapshot series are replayed at once, not live)",
        dir.display()
    );
    let r = replay::load(dir)?;
    let last = r.rounds.last().map_or(0, |x| x.0);
    let period_ns = replay::run_length_ns(dir)?.unwrap_or(last);
    let every = match xirang_telemetry::sim_out::SimOut::open(dir)
        .and_then(|o| o.optional(xirang_telemetry::sim_out::COUNTERS))
        .map_err(|e| anyhow::anyhow!("{}: {}", e.path, e.message))?
    {
        Some((text, path)) => replay::parse_rows(&text, &path.display().to_string(), false)?
            .into_iter()
            .map(|(_, c)| c)
            .collect(),
        None => Vec::new(),
    };
    let mut live = replay::Live::new(r, &every, period_ns, dilation)
        .map_err(|m| anyhow::anyhow!("--replay {}: {m}", dir.display()))?;
    if let Some((text, path)) = xirang_telemetry::sim_out::SimOut::open(dir)
        .and_then(|o| o.optional(xirang_telemetry::sim_out::REQUESTS))
        .map_err(|e| anyhow::anyhow!("{}: {}", e.path, e.message))?
    {
        live = live.with_requests(&text, &path.display().to_string())?;
    }
    if let Some((text, path)) = xirang_telemetry::sim_out::SimOut::open(dir)
        .and_then(|o| o.optional(xirang_telemetry::sim_out::SUMMARY))
        .map_err(|e| anyhow::anyhow!("{}: {}", e.path, e.message))?
    {
        live = live.with_collectives(&text, &path.display().to_string())?;
    }
    let live = live.with_app_series(app_series);
    let mut start: Option<u64> = None;
    Ok(Collector::new(
        Source::Feed(Box::new(move |ts_ns| {
            let t0 = *start.get_or_insert(ts_ns);
            let at = ts_ns.saturating_sub(t0);
            (live.values_at(at), live.app_points(at)).into()
        })),
        Some("replay".into()),
    ))
}

fn replay_dir(
    dir: &std::path::Path,
    a: &MonitorArgs,
    rules: Vec<Rule>,
    retention: Retention,
) -> Result<Outcome> {
    let mut collector = Collector::new(Source::External, Some("replay".into()));
    if !replay::is_sim_output(dir) {
        return replay_snapshots(dir, collector, rules, a.json);
    }
    let r = replay::load(dir)?;
    let mut ev = Evaluator::new(rules);
    let mut history = match &a.history {
        Some(p) => Some(History::open(p, retention)?),
        None => None,
    };
    let done = r.evaluate(
        &mut collector,
        &mut ev,
        history.as_mut(),
        (now_ns() / 1_000_000) as i64,
    )?;
    let fired = done.fired;
    let Some(last) = done.last else {
        bail!("{}: no counter samples to replay", dir.display())
    };
    if a.json {
        let alerts: Vec<_> = fired
            .iter()
            .map(|(t, f)| serde_json::json!({"first_at_us": t / 1000, "alert": f}))
            .collect();
        out(&(serde_json::to_string_pretty(
            &serde_json::json!({"rounds": r.rounds.len(), "alerts": alerts, "final": last}),
        )? + "\n"))?;
    } else {
        let mut t = table(&["first at (µs)", "rule", "entity", "severity", "value"]);
        for (ts, f) in &fired {
            t.add_row(vec![
                format!("{:.1}", *ts as f64 / 1000.0),
                f.rule.clone(),
                f.entity.clone(),
                f.severity.clone(),
                format!("{:.4}", f.value),
            ]);
        }
        out(&format!(
            "replayed {} rounds from {}; {} alerts fired\n{t}\n",
            r.rounds.len(),
            dir.display(),
            fired.len()
        ))?;
    }
    Ok(Outcome::Clean)
}

/// A directory of host snapshots taken over time, replayed as rounds at their capture times.
fn replay_snapshots(
    dir: &std::path::Path,
    mut collector: Collector,
    rules: Vec<Rule>,
    json: bool,
) -> Result<Outcome> {
    let series = replay::load_snapshots(dir)?;
    let mut ev = Evaluator::new(rules);
    let done = replay::evaluate_snapshots(&series, &mut collector, &mut ev, |p| {
        eprintln!("xirang monitor: {p}")
    });
    let fired = done.fired;
    let Some(last) = done.last else {
        bail!("{}: no snapshots", dir.display())
    };
    if json {
        let alerts: Vec<_> = fired
            .iter()
            .map(|(t, f)| serde_json::json!({"at_unix_s": t / 1_000_000_000, "alert": f}))
            .collect();
        out(&(serde_json::to_string_pretty(
            &serde_json::json!({"rounds": series.len(), "alerts": alerts, "final": last}),
        )? + "\n"))?;
    } else {
        let mut t = table(&["at (unix s)", "rule", "entity", "severity", "value"]);
        for (ts, f) in &fired {
            t.add_row(vec![
                (ts / 1_000_000_000).to_string(),
                f.rule.clone(),
                f.entity.clone(),
                f.severity.clone(),
                format!("{:.4}", f.value),
            ]);
        }
        out(&format!(
            "replayed {} snapshots from {}; {} alerts fired\n{t}\n",
            series.len(),
            dir.display(),
            fired.len()
        ))?;
    }
    Ok(Outcome::Clean)
}

fn query(q: &MonitorQueryArgs) -> Result<Outcome> {
    let since = xirang_fabric::limits::wall_duration(&q.since)
        .map_err(anyhow::Error::msg)
        .context("--since")?;
    // A missing file, a FIFO or a directory is named as such before SQLite sees it.
    xirang_files::open_regular(&q.history).context("--history")?;
    let h = History::open_read_only(&q.history)?;
    let now = (now_ns() / 1_000_000) as i64;
    let from = now - since.as_millis() as i64;
    // A name that matches no series of the history is a typo, not an empty window.
    if let Some(c) = q.counter.as_deref() {
        let names = h.series_names()?;
        let matches = match c.strip_suffix('*') {
            Some(prefix) => names.iter().any(|n| n.starts_with(prefix)),
            None => names.iter().any(|n| n == c),
        };
        if !matches && !names.is_empty() {
            let hint = xirang_fabric::diag::closest(c, names.iter().map(String::as_str))
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_else(|| {
                    format!(
                        "; it has {} series names (`monitor query` without --counter lists them)",
                        names.len()
                    )
                });
            anyhow::bail!(
                "--counter {c}: no series of {} has this name{hint}",
                q.history.display()
            );
        }
    }
    let windows = h.query(from, now, q.counter.as_deref())?;
    if q.json {
        out(&(serde_json::to_string_pretty(&windows)? + "\n"))?;
        return Ok(Outcome::Clean);
    }
    let mut t = table(&["series", "resolution", "points", "first", "last", "min", "max"]);
    for w in &windows {
        let vals: Vec<f64> = w.points.iter().map(|p| p.value).collect();
        let (Some(first), Some(last)) = (vals.first(), vals.last()) else {
            continue;
        };
        let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let labels = w
            .key
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join(",");
        t.add_row(vec![
            if labels.is_empty() {
                w.key.name.clone()
            } else {
                format!("{}{{{labels}}}", w.key.name)
            },
            format!("{:?}", w.resolution).to_lowercase(),
            vals.len().to_string(),
            first.to_string(),
            last.to_string(),
            min.to_string(),
            max.to_string(),
        ]);
    }
    out(&format!(
        "{} series in the last {}\n{t}\n",
        windows.len(),
        q.since
    ))?;
    Ok(Outcome::Clean)
}
