//! `xirang monitor --twin SCENARIO --inventory DIR`: the simulator plays the fleet as it
//! is configured now. The scenario gives the fabric and its workload; the inventory's
//! hosts and switches give the knobs (each NIC's DCQCN settings from its mlx5 sysfs,
//! each switch port's ECN profile from its config_db, `xirang_audit::as_scenario::
//! knob_overrides`). The run is served as a live fleet (`replay::Live`); when the
//! inventory's knobs change (a rollout applied or rolled back a configuration), the
//! scenario is simulated again with them and the new run takes over, counters carrying
//! on (`replay::Spliced`). Rollout gates reading Prometheus then see what the simulator
//! says the change does to canaries and control.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use xirang_fabric::scenario::{Override, Scenario, ScenarioError};
use xirang_monitor::collect::{Collector, Source};
use xirang_monitor::replay::{self, Live, ReplayError, Spliced};

/// Why the twin cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
    /// The inventory does not load.
    #[error("--inventory {}: {error}", path.display())]
    Inventory {
        /// The inventory directory.
        path: PathBuf,
        /// What is wrong with it (in the message, so not a separate cause).
        error: xirang_audit::AuditError,
    },
    /// The scenario file cannot be read.
    #[error(transparent)]
    Read(#[from] xirang_files::ReadError),
    /// The scenario is wrong on its own.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The scenario has no samples to serve.
    #[error("{}: the twin needs `[run] sample_interval_us` (a few hundred samples per run, e.g. end_us / 200): a run without samples would be served as one step per pass", path.display())]
    NoSamples {
        /// The scenario.
        path: PathBuf,
    },
    /// The inventory's knobs do not fit the scenario.
    #[error("the inventory's knobs (overrides[{own}..]) do not fit {}: an unknown host, NIC or switch port (the scenario's topology must name the inventory's: `xirang audit --emit-scenario` writes it) or a knob out of range: {error}", path.display())]
    Knobs {
        /// The scenario.
        path: PathBuf,
        /// The scenario's own overrides (the knobs come after them).
        own: usize,
        /// What the build said (in the message, so not a separate cause).
        error: ScenarioError,
    },
    /// The simulator broke an invariant.
    #[error("conservation check failed (a simulator bug):\n{0}")]
    Conservation(String),
    /// The run's outputs do not replay.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The replay refused the run.
    #[error("{}: {message}", path.display())]
    Live {
        /// The scenario.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The knobs do not serialize (not expected).
    #[error("the knobs do not serialize: {0}")]
    Json(#[from] serde_json::Error),
    /// The simulator panicked (a bug).
    #[error("the simulator panicked (a bug)")]
    Panicked,
}

/// How often the inventory is read for changed knobs. A change is taken once two reads
/// a poll apart agree, so that a script caught halfway through writing its knobs is not
/// simulated.
const POLL: Duration = Duration::from_secs(1);

/// What the twin simulates and serves.
#[derive(Debug, Clone)]
pub struct Twin {
    /// The scenario: topology naming the inventory's hosts, NICs and switches (as
    /// `xirang audit --emit-scenario` writes it), workloads, classes, `[run]`.
    pub scenario: PathBuf,
    /// The inventory directory (`hosts/`, `switches/`, `policy.toml`).
    pub inventory: PathBuf,
    /// Replay dilation.
    pub dilation: u64,
    /// Under which names the jobs' collective figures are served.
    pub app_series: xirang_monitor::replay::AppSeries,
}

/// The inventory's knobs now, with a fingerprint to compare reads by.
fn read_knobs(inventory: &Path) -> Result<(Vec<Override>, String), TwinError> {
    let cluster = xirang_audit::Cluster::load_dir(inventory).map_err(|error| TwinError::Inventory {
        path: inventory.to_path_buf(),
        error,
    })?;
    let knobs = xirang_audit::as_scenario::knob_overrides(&cluster);
    let print = serde_json::to_string(&knobs)?;
    Ok((knobs, print))
}

/// How many targets' knobs differ between two reads.
fn changed(a: &[Override], b: &[Override]) -> usize {
    let by = |v: &[Override]| {
        v.iter()
            .map(|o| (o.target.clone(), serde_json::to_string(o).unwrap_or_default()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (a, b) = (by(a), by(b));
    a.keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .count()
}

/// Simulates the scenario with `knobs` and returns the run as a live replay.
fn simulate(t: &Twin, knobs: Vec<Override>) -> Result<Live, TwinError> {
    let path = &t.scenario;
    let text = xirang_files::read_text(path, xirang_fabric::scenario::SCENARIO_LIMIT)?;
    let mut scenario = Scenario::parse(&text, path)?;
    if scenario.run.sample_interval_us <= 0.0 {
        return Err(TwinError::NoSamples { path: path.clone() });
    }
    let own = scenario.overrides.len();
    scenario.overrides.extend(knobs);
    let base = path.parent().unwrap_or(Path::new("."));
    // Built without the file's text: the knobs' overrides have no line in it.
    let loaded = match scenario.build(path, base, None) {
        Ok(l) => l,
        Err(knob_error) => {
            // The scenario's own error, with its lines, if it has one.
            Scenario::parse(&text, path)?.build(path, base, Some(&text))?;
            return Err(TwinError::Knobs {
                path: path.clone(),
                own,
                error: knob_error,
            });
        }
    };
    let opts = xirang_sim::options(&loaded);
    let r = xirang_sim::simulate(&loaded, &opts, &mut |_| {});
    if let Err(e) = r.check_conservation() {
        return Err(TwinError::Conservation(e.to_string()));
    }
    // Sampled: checked above.
    let rows = replay::parse_rows(&r.counter_series_csv(), "the twin's counter series", true)?;
    let every: Vec<_> = replay::parse_rows(&r.counters_csv(), "the twin's counters", false)?
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    let summary = r.summary();
    let period_ns = summary.stats.sim_time_ps / 1_000;
    let summary = serde_json::json!({ "summary": summary }).to_string();
    Ok(Live::new(replay::from_rows(rows), &every, period_ns, t.dilation)
        .map_err(|message| TwinError::Live {
            path: path.clone(),
            message,
        })?
        .with_requests(&r.requests_csv(), "the twin's requests")?
        .with_collectives(&summary, "the twin's summary")?
        .with_app_series(t.app_series))
}

/// A collector serving the twin: simulated once before it returns, then again whenever
/// the inventory's knobs change (a thread watches them).
pub fn collector(t: Twin) -> Result<Collector, TwinError> {
    let (knobs, print) = read_knobs(&t.inventory)?;
    let started = Instant::now();
    let live = simulate(&t, knobs.clone())?;
    eprintln!(
        "xirang monitor: twin: {} simulated with the knobs of {} ({} overrides) in {:.1} s",
        t.scenario.display(),
        t.inventory.display(),
        knobs.len(),
        started.elapsed().as_secs_f64()
    );
    let (tx, rx) = mpsc::channel::<Live>();
    let watcher = t.clone();
    std::thread::spawn(move || watch(&watcher, knobs, print, &tx));
    let mut spliced = Spliced::new(live);
    let mut start: Option<u64> = None;
    Ok(Collector::new(
        Source::Feed(Box::new(move |ts_ns| {
            let t0 = *start.get_or_insert(ts_ns);
            let at = ts_ns.saturating_sub(t0);
            while let Ok(next) = rx.try_recv() {
                spliced.replace(next, at);
            }
            spliced.at(at).into()
        })),
        Some("replay".into()),
    ))
}

/// Reads the inventory every [`POLL`]; a change two reads agree on is simulated and
/// sent. A read or a simulation that fails is reported and the served run kept; knobs
/// whose simulation failed are not simulated again (it is deterministic) until they
/// change. Ends when the collector is gone.
fn watch(t: &Twin, mut knobs: Vec<Override>, mut print: String, tx: &mpsc::Sender<Live>) {
    let mut pending: Option<String> = None;
    let mut failed: Option<String> = None;
    let mut last_error = String::new();
    loop {
        std::thread::sleep(POLL);
        let (now, p) = match read_knobs(&t.inventory) {
            Ok(x) => {
                if !last_error.is_empty() && x.1 == print {
                    last_error.clear();
                }
                x
            }
            Err(e) => {
                let m = error_chain(&e);
                if m != last_error {
                    eprintln!("xirang monitor: twin: {m}; serving the last run");
                    last_error = m;
                }
                continue;
            }
        };
        if p == print {
            pending = None;
            failed = None;
            continue;
        }
        if failed.as_deref() == Some(p.as_str()) {
            continue;
        }
        if pending.as_deref() != Some(p.as_str()) {
            pending = Some(p);
            continue;
        }
        let started = Instant::now();
        let n = changed(&knobs, &now);
        // A panic in the simulator must not end the watch: the twin would go on serving
        // the old knobs' run without a word.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| simulate(t, now.clone())))
            .unwrap_or(Err(TwinError::Panicked));
        match run {
            Ok(live) => {
                eprintln!(
                    "xirang monitor: twin: the knobs of {n} NIC(s) or switch port(s) changed; simulated again in {:.1} s, serving the new run",
                    started.elapsed().as_secs_f64()
                );
                if tx.send(live).is_err() {
                    return;
                }
                knobs = now;
                print = p;
                last_error.clear();
            }
            Err(e) => {
                eprintln!("xirang monitor: twin: {}; serving the last run", error_chain(&e));
                failed = Some(p);
            }
        }
        pending = None;
    }
}

/// An error with its causes, as `anyhow`'s `{:#}` prints them.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
