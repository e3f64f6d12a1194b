//! The agent: a sampling thread (collector → alert rules → history) and an HTTP server
//! with `/metrics` (Prometheus text, or OpenMetrics when the scraper asks for it) and
//! `/healthz`, on loopback by default; over TLS and behind basic authentication when a
//! web configuration ([`crate::web`]) says so.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use xirang_telemetry::metric::Metric;
use xirang_telemetry::spec::Kind;

use crate::alerts::{Evaluator, Rule, alert_points};
use crate::collect::{Collector, Point, Round};
use crate::expose;
use crate::history::{History, Retention, SeriesKey};
use crate::web::{BasicAuth, Web};

/// How often history is rolled up and trimmed.
const MAINTAIN_EVERY: Duration = Duration::from_secs(3600);

/// How long a client has to complete the TLS handshake before its connection is dropped
/// (a scraper on a LAN takes milliseconds; this only frees stalled connections).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after a failed `accept` (out of file descriptors, say) before the next one, so a
/// persistent failure does not spin the runtime.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What the agent runs with.
pub struct AgentConfig {
    /// Where to listen (loopback by default: the agent exposes host details).
    pub listen: SocketAddr,
    /// Sampling interval.
    pub interval: Duration,
    /// History file, if any.
    pub history: Option<PathBuf>,
    /// History retention.
    pub retention: Retention,
    /// Alert rules.
    pub rules: Vec<Rule>,
    /// TLS and basic authentication, from `--web-config`; plain HTTP when `None`.
    pub web: Option<Web>,
}

/// The latest round and the agent's own figures, shared with the HTTP handlers.
#[derive(Default)]
pub struct Latest {
    round: Option<Round>,
    alerts: Vec<Point>,
    sampled_at: Option<Instant>,
    last_render_s: f64,
    history_errors: u64,
}

/// Shared state.
pub type Shared = Arc<Mutex<Latest>>;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn self_gauge(name: &str, value: f64, help: &'static str, kind: Kind) -> Point {
    Point {
        metric: std::sync::Arc::new(Metric {
            name: name.to_string(),
            labels: vec![],
            kind,
            scale: 1.0,
            help,
        }),
        value,
    }
}

/// Whether a metric goes to history. A host with 8 NICs exports about 1 400 series; the
/// history keeps the ones an operator asks about afterwards (traffic, errors, discards,
/// pauses, congestion notifications, states and every derived signal: about 40 per NIC),
/// so a month of 1-minute roll-ups fits the default bound. Per-priority byte and packet
/// counters and the generic ethtool counters stay in Prometheus only.
pub fn keep_in_history(name: &str) -> bool {
    if name.ends_with("_info") || name.starts_with("xirang_priority_") {
        return false;
    }
    if name.starts_with("xirang_ethtool_") {
        return [
            "error",
            "err_",
            "discard",
            "out_of_buffer",
            "down",
            "storm",
            "oversize",
        ]
        .iter()
        .any(|k| name.contains(k));
    }
    true
}

/// Points of a round worth keeping in history.
pub fn history_rows(round: &Round) -> Vec<(SeriesKey, f64)> {
    round
        .points
        .iter()
        .filter(|p| keep_in_history(&p.metric.name))
        .map(|p| {
            (
                SeriesKey::new(
                    p.metric.name.as_str(),
                    p.metric.labels.iter().map(|(k, v)| (*k, v.as_str())),
                ),
                p.value,
            )
        })
        .collect()
}

/// One sampling step: collect, evaluate, record. Returns the round's problems for logging.
pub fn step(
    collector: &mut Collector,
    evaluator: &mut Evaluator,
    history: Option<&mut History>,
    shared: &Shared,
    ts_ns: u64,
) -> Vec<String> {
    let round = collector.round(ts_ns);
    let firing = evaluator.eval(&round);
    let mut history_error = false;
    if let Some(h) = history {
        let ms = (ts_ns / 1_000_000) as i64;
        if h.append(ms, &history_rows(&round)).is_err() {
            history_error = true;
        }
    }
    let problems = round.problems.clone();
    let mut l = shared.lock().unwrap_or_else(|e| e.into_inner());
    l.alerts = alert_points(&firing);
    l.round = Some(round);
    l.sampled_at = Some(Instant::now());
    if history_error {
        l.history_errors += 1;
    }
    problems
}

/// Renders `/metrics`.
pub fn render(shared: &Shared, openmetrics: bool) -> String {
    let started = Instant::now();
    let mut l = shared.lock().unwrap_or_else(|e| e.into_inner());
    let mut extra = l.alerts.clone();
    if let Some(r) = &l.round {
        extra.push(self_gauge(
            "xirang_collector_duration_seconds",
            r.duration_s,
            "Seconds the last sampling round took.",
            Kind::Gauge,
        ));
    }
    extra.push(self_gauge(
        "xirang_scrape_render_duration_seconds",
        l.last_render_s,
        "Seconds the previous /metrics render took.",
        Kind::Gauge,
    ));
    extra.push(self_gauge(
        "xirang_history_errors_total",
        l.history_errors as f64,
        "History writes that failed.",
        Kind::Counter,
    ));
    let text = match &l.round {
        Some(r) => expose::render_round_stamped(r, &extra, openmetrics),
        None => {
            let refs: Vec<&Point> = extra.iter().collect();
            expose::render(&refs, openmetrics)
        }
    };
    l.last_render_s = started.elapsed().as_secs_f64();
    text
}

async fn metrics(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let om = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let body = render(&shared, om);
    let ct = if om {
        expose::OPENMETRICS_CONTENT_TYPE
    } else {
        expose::TEXT_CONTENT_TYPE
    };
    ([(header::CONTENT_TYPE, ct)], body).into_response()
}

async fn healthz(State((shared, interval)): State<(Shared, Duration)>) -> Response {
    let l = shared.lock().unwrap_or_else(|e| e.into_inner());
    match l.sampled_at {
        // Healthy while rounds keep coming: at most three intervals old.
        Some(t) if t.elapsed() <= interval * 3 => (StatusCode::OK, "ok\n").into_response(),
        Some(t) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("stale: last round {:.1} s ago\n", t.elapsed().as_secs_f64()),
        )
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no round yet\n").into_response(),
    }
}

/// Refuses requests without valid basic-auth credentials: 401 with `WWW-Authenticate`.
async fn require_auth(State(auth): State<Arc<BasicAuth>>, req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // bcrypt takes tens of milliseconds on a cache miss: off the single-threaded runtime.
    let ok = tokio::task::spawn_blocking(move || auth.check(header.as_deref()))
        .await
        .unwrap_or(false);
    if ok {
        next.run(req).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"xirang monitor\"")],
            "Unauthorized\n",
        )
            .into_response()
    }
}

/// Serves `app` over TLS: a failed or stalled handshake drops that connection only.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
) -> Result<(), AgentError> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("xirang monitor: accept: {e}");
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    eprintln!("xirang monitor: TLS handshake with {peer}: {e}");
                    return;
                }
                Err(_) => {
                    eprintln!("xirang monitor: TLS handshake with {peer}: timed out");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Could not listen.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Error.
        source: std::io::Error,
    },
    /// History could not be opened.
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
    /// The runtime failed.
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs the agent until the process is stopped: samples every `interval` and serves
/// `/metrics` and `/healthz`. `on_round` sees each round's problems (for logging).
pub fn run(
    mut collector: Collector,
    cfg: AgentConfig,
    on_round: impl Fn(&[String]) + Send + 'static,
) -> Result<(), AgentError> {
    let shared: Shared = Arc::new(Mutex::new(Latest::default()));
    let mut history = match &cfg.history {
        Some(p) => Some(History::open(p, cfg.retention)?),
        None => None,
    };
    let listener = std::net::TcpListener::bind(cfg.listen).map_err(|source| AgentError::Listen {
        addr: cfg.listen,
        source,
    })?;
    listener.set_nonblocking(true).map_err(AgentError::Runtime)?;
    let mut evaluator = Evaluator::new(cfg.rules.clone());
    let interval = cfg.interval;
    let sampler_shared = shared.clone();
    std::thread::spawn(move || {
        let mut next = Instant::now();
        let mut last_maintain = Instant::now();
        loop {
            // A panic here would leave /metrics serving the last round forever: stop the
            // agent instead, so its supervisor restarts it and Prometheus sees it down.
            let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                step(
                    &mut collector,
                    &mut evaluator,
                    history.as_mut(),
                    &sampler_shared,
                    now_ns(),
                )
            }));
            let Ok(problems) = stepped else {
                eprintln!("xirang monitor: the sampling thread panicked; exiting");
                std::process::exit(1);
            };
            on_round(&problems);
            if let Some(h) = history.as_mut()
                && last_maintain.elapsed() >= MAINTAIN_EVERY
            {
                let _ = h.maintain((now_ns() / 1_000_000) as i64);
                last_maintain = Instant::now();
            }
            next += interval;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                // Fell behind (a slow round): start the next one now rather than bursting.
                next = now;
            }
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(AgentError::Runtime)?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).map_err(AgentError::Runtime)?;
        let mut app = Router::new()
            .route("/metrics", get(metrics).with_state(shared.clone()))
            .route("/healthz", get(healthz).with_state((shared, interval)));
        // Every path, as node_exporter does (unknown paths too: a 404 tells nothing then).
        if let Some(auth) = cfg.web.as_ref().and_then(|w| w.basic_auth.clone()) {
            app = app.layer(middleware::from_fn_with_state(auth, require_auth));
        }
        match cfg.web.as_ref().and_then(|w| w.tls.clone()) {
            Some(tls) => serve_tls(listener, tls, app).await,
            None => axum::serve(listener, app).await.map_err(AgentError::Runtime),
        }
    })
}
