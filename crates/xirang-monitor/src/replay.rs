//! A simulator output directory (`xirang sim --out DIR`) as a series of monitoring
//! rounds: `counters_series.csv` (`time_us,entity,counter,value`, changed values only)
//! when the run sampled counters, else the final `counters.csv` as one round. The
//! counters carry the hardware's names and the telemetry schema's entities, so the
//! same metrics, signals and alert rules apply to simulated and real fabrics.

use std::collections::BTreeMap;
use std::path::Path;

use xirang_telemetry::CounterValue;
use xirang_telemetry::sim_out::SimOut;

use crate::collect::{Collector, Round};

/// Why a directory could not be replayed.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ReplayError {
    /// File.
    pub path: String,
    /// What is wrong, with the line.
    pub message: String,
}

/// Counter values by sample time.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// (time in ns since the run started, the full set of counter values at that time).
    pub rounds: Vec<(u64, Vec<CounterValue>)>,
}

/// The rows of a simulator's counter CSV: `time_us,entity,counter,value` when
/// `with_time` (the series), else `entity,counter,value` (the final counters, at time 0).
/// `path` names the file in errors, with the line.
pub fn parse_rows(text: &str, path: &str, with_time: bool) -> Result<Vec<(u64, CounterValue)>, ReplayError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let err = |m: &str| ReplayError {
            path: path.to_string(),
            message: format!(
                "line {}: {m}, found `{}`",
                i + 1,
                line.chars().take(80).collect::<String>()
            ),
        };
        let f: Vec<&str> = line.split(',').collect();
        let (t, rest) = if with_time {
            let t: f64 = f
                .first()
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| err("expected a time in µs"))?;
            if !(t.is_finite() && t >= 0.0) {
                return Err(err("expected a time in µs"));
            }
            ((t * 1000.0).round() as u64, &f[1..])
        } else {
            (0, &f[..])
        };
        let [entity, name, value] = rest else {
            return Err(err("expected `entity,counter,value`"));
        };
        rows.push((
            t,
            CounterValue {
                entity: entity.to_string(),
                name: name.to_string(),
                value: value
                    .parse()
                    .map_err(|_| err("expected an unsigned counter value"))?,
            },
        ));
    }
    Ok(rows)
}

/// Loads a simulator output directory: its counter series, or the final counters of an
/// unsampled run (one round).
pub fn load(dir: &Path) -> Result<Replay, ReplayError> {
    let fail = |e: xirang_telemetry::sim_out::SimOutError| ReplayError {
        path: e.path,
        message: e.message,
    };
    let (text, path, with_time) = SimOut::open(dir).and_then(|s| s.counters()).map_err(fail)?;
    let p = path.display().to_string();
    Ok(from_rows(parse_rows(&text, &p, with_time)?))
}

/// The rounds of a run's counter rows ([`parse_rows`]): every counter carried forward
/// from its last change.
pub fn from_rows(rows: Vec<(u64, CounterValue)>) -> Replay {
    // Carry every counter forward: the series lists only changes.
    let mut current: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut by_time: BTreeMap<u64, Vec<CounterValue>> = BTreeMap::new();
    for (t, cv) in rows {
        by_time.entry(t).or_default().push(cv);
    }
    let mut replay = Replay::default();
    for (t, changes) in by_time {
        for cv in changes {
            current.insert((cv.entity, cv.name), cv.value);
        }
        let values = current
            .iter()
            .map(|((e, n), v)| CounterValue {
                entity: e.clone(),
                name: n.clone(),
                value: *v,
            })
            .collect();
        replay.rounds.push((t, values));
    }
    replay
}

impl Replay {
    /// Runs every round through a collector (created with a `host` label, since a
    /// simulated fabric has many hosts).
    pub fn run(&self, collector: &mut Collector) -> Vec<Round> {
        self.rounds
            .iter()
            .map(|(t, values)| collector.fold(*t, values, Vec::new(), Vec::new()))
            .collect()
    }
}

/// A simulated run served as a live fleet: the run plays `dilation` times slower than
/// it was simulated, and every counter is multiplied by `dilation`, so that every rate a
/// scraper computes (bytes per second, marks per second, paused time per second) is the
/// simulated one; levels (link rates, watermarks) are served as they are. At the end the
/// run starts again, counters carrying on from where they were, as a fleet in a steady
/// state does. This is the digital twin's side of `xirang calibrate`'s end-to-end test:
/// the monitoring agent serves it, a real Prometheus scrapes it.
#[derive(Debug, Clone)]
pub struct Live {
    /// Answered requests by completion: (simulated ns, class, latency s, serving host;
    /// the client's for a run written before requests named their server, empty before
    /// they named their client).
    requests: Vec<(u64, String, f64, String)>,
    /// Finished collectives.
    collectives: Vec<FinishedCollective>,
    /// Under which names the applications' figures are served.
    app_series: AppSeries,
    rounds: Vec<(u64, Vec<CounterValue>)>,
    gauge: Vec<bool>,
    /// One pass of the run, simulated ns.
    period_ns: u64,
    dilation: u64,
}

/// The replayed latency histogram's buckets: 10 µs doubling 15 times (to 164 ms), then
/// `+Inf`: a request's latency at packet level runs from tens of µs to a few ms.
const FIRST_BUCKET_S: f64 = 10e-6;
/// See [`FIRST_BUCKET_S`].
const REQUEST_BUCKETS: u32 = 15;

/// The help text of the replayed latency histogram.
const REQUESTS_HELP: &str = "Requests answered within `le` seconds (the simulated run's, replayed).";

/// The training jobs' collective time gauge (README's metric contract).
pub const COLLECTIVE_SECONDS: &str = "xirang_job_collective_seconds";

/// Largest dilation accepted: a microsecond of simulation per 10 s of wall time.
pub const MAX_DILATION: u64 = 10_000_000;

impl Live {
    /// A live replay of `replay`, one pass lasting `period_ns` of simulated time (the
    /// run's length: `summary.json`'s `sim_time_ps`), played `dilation` times slower.
    /// `every` lists counters to serve even when they never change (the run's final
    /// `counters.csv`: a series lists changes only, and a fleet's agents export their
    /// zeros too, which is how a reader tells "no PFC" from "no PFC counters").
    pub fn new(
        replay: Replay,
        every: &[CounterValue],
        period_ns: u64,
        dilation: u64,
    ) -> Result<Live, String> {
        if !(1..=MAX_DILATION).contains(&dilation) {
            return Err(format!(
                "expected a dilation from 1 to {MAX_DILATION}, found {dilation}"
            ));
        }
        let last = replay.rounds.last().map_or(0, |r| r.0);
        if replay.rounds.is_empty() {
            return Err("no counter samples to replay".into());
        }
        if period_ns == 0 && last == 0 {
            return Err(
                "a run of no length (summary.json's sim_time_ps is 0 and every sample is at 0)".into(),
            );
        }
        // Index i is one counter in every round: the union of the names, every round
        // padded with zeros for the counters it does not list.
        let mut names: Vec<(String, String)> = replay.rounds[replay.rounds.len() - 1]
            .1
            .iter()
            .chain(every)
            .map(|c| (c.entity.clone(), c.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        let gauge = names.iter().map(|(_, n)| is_gauge(n)).collect();
        let rounds = replay
            .rounds
            .into_iter()
            .map(|(t, values)| {
                let by: BTreeMap<(&str, &str), u64> = values
                    .iter()
                    .map(|c| ((c.entity.as_str(), c.name.as_str()), c.value))
                    .collect();
                let full = names
                    .iter()
                    .map(|(e, n)| CounterValue {
                        entity: e.clone(),
                        name: n.clone(),
                        value: by.get(&(e.as_str(), n.as_str())).copied().unwrap_or(0),
                    })
                    .collect();
                (t, full)
            })
            .collect();
        Ok(Live {
            requests: Vec::new(),
            collectives: Vec::new(),
            app_series: AppSeries::Both,
            rounds,
            gauge,
            period_ns: period_ns.max(last).max(1),
            dilation,
        })
    }

    /// Simulated ns of one pass.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Adds the run's answered requests (its `requests.csv`), served as the inference
    /// services' latency histogram `xirang_service_request_seconds` per class, counts
    /// scaled by the dilation like every counter, latencies as simulated.
    pub fn with_requests(mut self, csv: &str, path: &str) -> Result<Live, ReplayError> {
        let mut v = Vec::new();
        for (i, line) in csv.lines().enumerate().skip(1) {
            if line.trim().is_empty() {
                continue;
            }
            let err = || ReplayError {
                path: path.to_string(),
                message: format!(
                    "line {}: expected `end_us,workload,class,latency_us,client,server`, found `{line}`",
                    i + 1
                ),
            };
            let f: Vec<&str> = line.split(',').collect();
            // Runs written before requests named their server label by client host, and
            // before they named their client not at all.
            let (end, class, lat, host_of) = match f[..] {
                [end, _, class, lat] => (end, class, lat, ""),
                [end, _, class, lat, client] => (end, class, lat, client),
                [end, _, class, lat, _, server] => (end, class, lat, server),
                _ => return Err(err()),
            };
            let end: f64 = end.parse().map_err(|_| err())?;
            let lat: f64 = lat.parse().map_err(|_| err())?;
            if !(end.is_finite() && end >= 0.0 && lat.is_finite() && lat >= 0.0) {
                return Err(err());
            }
            // The serving host: each host's service exports the requests it answered.
            let host = host_of.split('/').next().unwrap_or_default();
            v.push((
                (end * 1e3).round() as u64,
                class.to_string(),
                lat * 1e-6,
                host.to_string(),
            ));
        }
        v.sort_by_key(|r| r.0);
        self.requests = v;
        Ok(self)
    }

    /// Adds the run's finished collectives (its `summary.json`), served as the training
    /// jobs' gauge `xirang_job_collective_seconds{class, op, workload}`: each one's time
    /// per iteration as simulated (a time, not scaled by the dilation). A collective that
    /// did not finish in the run has no time and is not served.
    pub fn with_collectives(mut self, summary: &str, path: &str) -> Result<Live, ReplayError> {
        self.collectives = finished_collectives(summary, path)?;
        Ok(self)
    }

    /// Serves the applications' collective figures under these names (both by default).
    pub fn with_app_series(mut self, a: AppSeries) -> Live {
        self.app_series = a;
        self
    }

    /// The application points `wall_ns` after the replay started: the latency histogram
    /// and the collectives' times.
    pub fn app_points(&self, wall_ns: u64) -> Vec<crate::collect::Point> {
        let mut out = self.request_points(wall_ns);
        for c in &self.collectives {
            if self.app_series != AppSeries::Inspector {
                out.push(crate::collect::Point {
                    metric: std::sync::Arc::new(xirang_telemetry::metric::Metric {
                        name: COLLECTIVE_SECONDS.into(),
                        labels: vec![
                            ("class", c.class.clone()),
                            ("op", c.op.clone()),
                            ("workload", c.workload.clone()),
                        ],
                        kind: xirang_telemetry::spec::Kind::Gauge,
                        scale: 1.0,
                        help: "Time of the collective per iteration, s (the simulated run's, replayed).",
                    }),
                    value: c.seconds,
                });
            }
            if self.app_series != AppSeries::Xirang {
                inspector_points(c, &mut out);
            }
        }
        out
    }

    /// The latency histogram's points `wall_ns` after the replay started.
    fn request_points(&self, wall_ns: u64) -> Vec<crate::collect::Point> {
        if self.requests.is_empty() {
            return Vec::new();
        }
        let sim_ns = wall_ns / self.dilation;
        let passes = sim_ns / self.period_ns;
        let within = sim_ns % self.period_ns;
        let done = self.requests.partition_point(|r| r.0 <= within);
        // One histogram per class and serving host, as each host's service exports its own.
        let mut groups: Vec<(&str, &str)> = self
            .requests
            .iter()
            .map(|r| (r.1.as_str(), r.3.as_str()))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let mut out = Vec::new();
        for (class, node) in groups {
            let count = |upto: usize, le: f64| {
                self.requests[..upto]
                    .iter()
                    .filter(|r| r.1 == class && r.3 == node && r.2 <= le)
                    .count() as u64
            };
            let all = self.requests.len();
            let mut les: Vec<f64> = (0..REQUEST_BUCKETS)
                .map(|k| FIRST_BUCKET_S * f64::from(1u32 << k))
                .collect();
            les.push(f64::INFINITY);
            for le in les {
                let n = passes
                    .saturating_mul(count(all, le))
                    .saturating_add(count(done, le));
                out.push(crate::collect::Point {
                    metric: std::sync::Arc::new(xirang_telemetry::metric::Metric {
                        name: "xirang_service_request_seconds_bucket".into(),
                        labels: {
                            let mut l = vec![("class", class.to_string())];
                            if !node.is_empty() {
                                l.push(("node", node.to_string()));
                            }
                            l.push((
                                "le",
                                if le.is_infinite() {
                                    "+Inf".into()
                                } else {
                                    format!("{le}")
                                },
                            ));
                            l
                        },
                        kind: xirang_telemetry::spec::Kind::Counter,
                        scale: 1.0,
                        help: REQUESTS_HELP,
                    }),
                    value: n.saturating_mul(self.dilation) as f64,
                });
            }
        }
        out
    }

    /// The counters `wall_ns` after the replay started.
    pub fn values_at(&self, wall_ns: u64) -> Vec<CounterValue> {
        let sim_ns = wall_ns / self.dilation;
        let passes = sim_ns / self.period_ns;
        let within = sim_ns % self.period_ns;
        let end = &self.rounds[self.rounds.len() - 1].1;
        // The last round at or before `within`; before the first, every counter is 0.
        let at = self.rounds.partition_point(|r| r.0 <= within);
        let now = (at > 0).then(|| &self.rounds[at - 1].1);
        end.iter()
            .enumerate()
            .map(|(i, last)| {
                let v = now.map_or(0, |n| n[i].value);
                let value = if self.gauge[i] {
                    if at > 0 { v } else { last.value }
                } else {
                    passes
                        .saturating_mul(last.value)
                        .saturating_add(v)
                        .saturating_mul(self.dilation)
                };
                CounterValue {
                    entity: last.entity.clone(),
                    name: last.name.clone(),
                    value,
                }
            })
            .collect()
    }
}

/// A live replay whose run is replaced while it is served: the digital twin simulated
/// again after its configuration changed. Counters and histogram buckets carry on from
/// what was served when the run changed, as a fleet's counters do across a
/// configuration change; levels (gauges) are the new run's. A counter the new run
/// lacks keeps its last value.
#[derive(Debug)]
pub struct Spliced {
    live: Live,
    /// Wall ns (since serving began) at which `live` took over.
    since_ns: u64,
    /// Counter totals served at the takeover.
    base: BTreeMap<(String, String), u64>,
    /// Bucket counts served at the takeover, by series name and labels.
    base_points: BTreeMap<SeriesKey, f64>,
}

/// A series: metric name and labels.
type SeriesKey = (String, Vec<(&'static str, String)>);

impl Spliced {
    /// Serves `live` from wall time 0.
    pub fn new(live: Live) -> Spliced {
        Spliced {
            live,
            since_ns: 0,
            base: BTreeMap::new(),
            base_points: BTreeMap::new(),
        }
    }

    /// Serves `next` from `wall_ns` on, its counters added to what was served then.
    pub fn replace(&mut self, next: Live, wall_ns: u64) {
        let at = wall_ns.max(self.since_ns);
        let (values, points) = self.at(at);
        self.base = values
            .into_iter()
            .filter(|c| !is_gauge(&c.name))
            .map(|c| ((c.entity, c.name), c.value))
            .collect();
        self.base_points = points
            .into_iter()
            .filter(|p| p.metric.kind == xirang_telemetry::spec::Kind::Counter)
            .map(|p| ((p.metric.name.clone(), p.metric.labels.clone()), p.value))
            .collect();
        self.live = next;
        self.since_ns = at;
    }

    /// The counters and application points `wall_ns` after serving began.
    pub fn at(&self, wall_ns: u64) -> (Vec<CounterValue>, Vec<crate::collect::Point>) {
        let t = wall_ns.saturating_sub(self.since_ns);
        let mut seen = std::collections::BTreeSet::new();
        let mut values: Vec<CounterValue> = self
            .live
            .values_at(t)
            .into_iter()
            .map(|mut c| {
                let key = (c.entity.clone(), c.name.clone());
                if let Some(b) = self.base.get(&key) {
                    c.value = c.value.saturating_add(*b);
                }
                seen.insert(key);
                c
            })
            .collect();
        values.extend(
            self.base
                .iter()
                .filter(|(k, _)| !seen.contains(*k))
                .map(|((e, n), v)| CounterValue {
                    entity: e.clone(),
                    name: n.clone(),
                    value: *v,
                }),
        );
        let mut seen = std::collections::BTreeSet::new();
        let mut points: Vec<crate::collect::Point> = self
            .live
            .app_points(t)
            .into_iter()
            .map(|mut p| {
                let key = (p.metric.name.clone(), p.metric.labels.clone());
                if p.metric.kind == xirang_telemetry::spec::Kind::Counter
                    && let Some(b) = self.base_points.get(&key)
                {
                    p.value += b;
                }
                seen.insert(key);
                p
            })
            .collect();
        for ((name, labels), v) in &self.base_points {
            if !seen.contains(&(name.clone(), labels.clone())) {
                points.push(crate::collect::Point {
                    metric: std::sync::Arc::new(xirang_telemetry::metric::Metric {
                        name: name.clone(),
                        labels: labels.clone(),
                        kind: xirang_telemetry::spec::Kind::Counter,
                        scale: 1.0,
                        help: REQUESTS_HELP,
                    }),
                    value: *v,
                });
            }
        }
        (values, points)
    }
}

fn is_gauge(name: &str) -> bool {
    xirang_telemetry::spec::spec(name).kind == xirang_telemetry::spec::Kind::Gauge
}

/// Under which names a replay serves the applications' collective figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppSeries {
    /// Xirang's gauge `xirang_job_collective_seconds` (README's metric contract).
    Xirang,
    /// NCCL Inspector's `nccl_collective_exec_time_microseconds` and
    /// `nccl_bus_bandwidth_gbs`, one series per rank's GPU, as a fleet whose jobs load the
    /// Inspector plugin exports them.
    Inspector,
    /// Both.
    Both,
}

/// A collective that finished in a run, as its `summary.json` states it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedCollective {
    /// Traffic class.
    pub class: String,
    /// Operation (`all_reduce`).
    pub op: String,
    /// Workload.
    pub workload: String,
    /// Time per iteration, s.
    pub seconds: f64,
    /// Buffer bytes.
    pub bytes: u64,
    /// Ranks.
    pub ranks: u32,
    /// Its hosts in rank order, with their ranks (empty in a summary written before
    /// collectives named them).
    pub hosts: Vec<(String, u32)>,
    /// Algorithm and protocol simulated (`ring`, `Simple`).
    pub algorithm: String,
    /// See `algorithm`.
    pub protocol: String,
    /// Bus bandwidth, GB/s.
    pub busbw_gbs: Option<f64>,
}

/// The Inspector's series of one finished collective: each rank's GPU reports the
/// collective's time and bus bandwidth (a simulated collective's time is the same for
/// every rank; the job's name stands in for the Slurm job id, its class for the
/// communicator's name).
fn inspector_points(c: &FinishedCollective, out: &mut Vec<crate::collect::Point>) {
    use xirang_telemetry::inspector as ins;
    let unknown = [(ins::UNKNOWN.to_string(), 1)];
    let hosts: &[(String, u32)] = if c.hosts.is_empty() { &unknown } else { &c.hosts };
    let n_nodes = if c.hosts.is_empty() {
        ins::UNKNOWN.to_string()
    } else {
        c.hosts.len().to_string()
    };
    for (host, ranks) in hosts {
        for g in 0..*ranks {
            let labels = || {
                vec![
                    ("version", ins::FORMAT_VERSION.to_string()),
                    ("slurm_job_id", c.workload.clone()),
                    ("node", host.clone()),
                    (
                        "gpu",
                        if c.hosts.is_empty() {
                            ins::UNKNOWN.to_string()
                        } else {
                            format!("GPU{g}")
                        },
                    ),
                    ("comm_name", c.class.clone()),
                    ("n_nodes", n_nodes.clone()),
                    ("nranks", c.ranks.to_string()),
                    ("collective", ins::collective_name(&c.op)),
                    ("message_size", ins::message_size_bucket(c.bytes)),
                    ("algo_proto", ins::algo_proto(&c.algorithm, &c.protocol)),
                ]
            };
            out.push(crate::collect::Point {
                metric: std::sync::Arc::new(xirang_telemetry::metric::Metric {
                    name: ins::EXEC_TIME_US.into(),
                    labels: labels(),
                    kind: xirang_telemetry::spec::Kind::Gauge,
                    scale: 1.0,
                    help: "Mean execution time of the bucket's collectives, µs (NCCL Inspector's series; the simulated run's, replayed).",
                }),
                value: c.seconds * 1e6,
            });
            if let Some(bw) = c.busbw_gbs {
                out.push(crate::collect::Point {
                    metric: std::sync::Arc::new(xirang_telemetry::metric::Metric {
                        name: ins::BUS_BANDWIDTH_GBS.into(),
                        labels: labels(),
                        kind: xirang_telemetry::spec::Kind::Gauge,
                        scale: 1.0,
                        help: "Bus bandwidth of the bucket's collectives, GB/s (NCCL Inspector's series; the simulated run's, replayed).",
                    }),
                    value: bw,
                });
            }
        }
    }
}

/// The finished collectives of a run's `summary.json` (`summary.collectives`); one that
/// did not finish has no time and is left out, as is every one of a summary written
/// before collectives carried their class.
pub fn finished_collectives(summary: &str, path: &str) -> Result<Vec<FinishedCollective>, ReplayError> {
    let err = |message: String| ReplayError {
        path: path.to_string(),
        message,
    };
    let v: serde_json::Value =
        serde_json::from_str(summary).map_err(|e| err(format!("expected JSON: {e}")))?;
    let mut out = Vec::new();
    let Some(list) = v["summary"]["collectives"].as_array() else {
        return Ok(out);
    };
    for (i, c) in list.iter().enumerate() {
        let Some(ps) = c["time_ps"].as_u64() else {
            continue;
        };
        if c.get("class").is_none() {
            continue;
        }
        let field = |k: &str| {
            c[k].as_str()
                .map(str::to_string)
                .ok_or_else(|| err(format!("summary.collectives[{i}].{k}: expected a string")))
        };
        let number = |k: &str| {
            c[k].as_u64().ok_or_else(|| {
                err(format!(
                    "summary.collectives[{i}].{k}: expected an unsigned integer"
                ))
            })
        };
        let names: Vec<String> = match c.get("hosts") {
            None => Vec::new(),
            Some(h) => serde_json::from_value(h.clone()).map_err(|e| {
                err(format!(
                    "summary.collectives[{i}].hosts: expected host names: {e}"
                ))
            })?,
        };
        let per: Vec<u32> = match c.get("ranks_per_host") {
            None => Vec::new(),
            Some(h) => serde_json::from_value(h.clone()).map_err(|e| {
                err(format!(
                    "summary.collectives[{i}].ranks_per_host: expected counts: {e}"
                ))
            })?,
        };
        let ranks = number("ranks")?;
        // The per-GPU series are made from these counts: they must add up to the ranks.
        if !per.is_empty() && per.iter().map(|n| u64::from(*n)).sum::<u64>() != ranks {
            return Err(err(format!(
                "summary.collectives[{i}].ranks_per_host: they add up to {}, not to its {ranks} ranks",
                per.iter().map(|n| u64::from(*n)).sum::<u64>()
            )));
        }
        if per.len() != names.len() {
            return Err(err(format!(
                "summary.collectives[{i}]: {} hosts but {} ranks_per_host",
                names.len(),
                per.len()
            )));
        }
        out.push(FinishedCollective {
            class: field("class")?,
            op: field("op")?,
            workload: field("workload")?,
            seconds: ps as f64 * 1e-12,
            bytes: number("bytes")?,
            ranks: u32::try_from(ranks)
                .map_err(|_| err(format!("summary.collectives[{i}].ranks: too large")))?,
            hosts: names.into_iter().zip(per).collect(),
            algorithm: field("algorithm")?,
            protocol: field("protocol")?,
            busbw_gbs: c["busbw_gbs"].as_f64(),
        });
    }
    Ok(out)
}

/// A run's simulated length, ns, from its `summary.json` (`summary.stats.sim_time_ps`);
/// `None` when the file or the field is missing.
pub fn run_length_ns(dir: &Path) -> Result<Option<u64>, ReplayError> {
    let out = SimOut::open(dir).map_err(|e| ReplayError {
        path: e.path,
        message: e.message,
    })?;
    let Some((text, path)) = out
        .optional(xirang_telemetry::sim_out::SUMMARY)
        .map_err(|e| ReplayError {
            path: e.path,
            message: e.message,
        })?
    else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ReplayError {
        path: path.display().to_string(),
        message: format!("expected JSON: {e}"),
    })?;
    Ok(v["summary"]["stats"]["sim_time_ps"].as_u64().map(|ps| ps / 1_000))
}

/// What a replay found: the rounds, each alert with the time it first fired, and the
/// last round (what `--json` shows as `final`).
#[derive(Debug)]
pub struct Replayed {
    /// Rounds replayed.
    pub rounds: usize,
    /// Alerts, with the sample time (ns) they fired at.
    pub fired: Vec<(u64, crate::alerts::Firing)>,
    /// The last round, if there was any.
    pub last: Option<Round>,
}

impl Replay {
    /// Runs every round through `collector` and the alert rules of `alerts`; an alert is
    /// listed once, at the first round it fires. With a history, each round is appended
    /// to it, the run anchored so that it ends at `now_ms` (history queries by `--since`
    /// then find it).
    pub fn evaluate(
        &self,
        collector: &mut Collector,
        alerts: &mut crate::alerts::Evaluator,
        mut history: Option<&mut crate::history::History>,
        now_ms: i64,
    ) -> Result<Replayed, crate::history::HistoryError> {
        let end = self.rounds.last().map_or(0, |x| x.0);
        let base_ms = now_ms - (end / 1_000_000) as i64;
        let mut out = Replayed {
            rounds: self.rounds.len(),
            fired: Vec::new(),
            last: None,
        };
        for (t, values) in &self.rounds {
            let round = collector.fold(*t, values, Vec::new(), Vec::new());
            for f in alerts.eval(&round) {
                if !out
                    .fired
                    .iter()
                    .any(|(_, g)| g.rule == f.rule && g.entity == f.entity)
                {
                    out.fired.push((*t, f));
                }
            }
            if let Some(h) = history.as_deref_mut() {
                h.append(
                    base_ms + (*t / 1_000_000) as i64,
                    &crate::serve::history_rows(&round),
                )?;
            }
            out.last = Some(round);
        }
        Ok(out)
    }
}

/// Replays host snapshots (see [`load_snapshots`]) as rounds at their capture times through
/// `collector` and the alert rules; every firing is listed, with its round's time. The
/// problems each round met are passed to `problem`.
pub fn evaluate_snapshots(
    series: &[(u64, xirang_host::tree::MemTree)],
    collector: &mut Collector,
    alerts: &mut crate::alerts::Evaluator,
    mut problem: impl FnMut(&str),
) -> Replayed {
    let mut out = Replayed {
        rounds: series.len(),
        fired: Vec::new(),
        last: None,
    };
    for (t, tree) in series {
        let round = collector.round_from(tree, *t);
        for f in alerts.eval(&round) {
            out.fired.push((*t, f));
        }
        for p in &round.problems {
            problem(p);
        }
        out.last = Some(round);
    }
    out
}

/// A recorded series of host snapshots (`xirang host snapshot` archives in one
/// directory), in capture order: each becomes a round at its capture time.
pub fn load_snapshots(dir: &Path) -> Result<Vec<(u64, xirang_host::tree::MemTree)>, ReplayError> {
    let err = |path: &Path, message: String| ReplayError {
        path: path.display().to_string(),
        message,
    };
    let rd = std::fs::read_dir(dir).map_err(|e| err(dir, e.to_string()))?;
    let mut files: Vec<std::path::PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz") || p.to_string_lossy().ends_with(".tgz"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let tree = xirang_host::snapshot::load(&f).map_err(|e| err(&f, e.to_string()))?;
        let manifest: xirang_host::snapshot::Manifest =
            xirang_host::tree::Tree::read(&tree, xirang_host::snapshot::MANIFEST)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| err(&f, "expected a snapshot manifest with its capture time".into()))?;
        out.push((manifest.captured_unix_s.saturating_mul(1_000_000_000), tree));
    }
    if out.is_empty() {
        return Err(err(
            dir,
            "expected snapshot archives (*.tar.gz written by `xirang host snapshot`)".into(),
        ));
    }
    out.sort_by_key(|(t, _)| *t);
    Ok(out)
}

/// True when `dir` holds simulator output rather than a snapshot series.
pub fn is_sim_output(dir: &Path) -> bool {
    xirang_telemetry::sim_out::is_sim_output(dir)
}
