//! NCCL RAS (docs/reference/live-signals.md §B): its client protocol, to ask a running
//! job's RAS server for its report or to follow its monitor events, and those events as
//! the agent's series, a live feed for the alert rules (`monitor --nccl-ras HOST[:PORT]`).
//! Findings from reports are `xirang_diagnose::ras`'s.
//!
//! The protocol: line-based text over TCP, `CLIENT PROTOCOL 2` answered by `SERVER
//! PROTOCOL 2`; `TIMEOUT <s>` and `SET FORMAT json` answered by `OK` (or `ERROR: ...`,
//! the format command by servers older than 2.28.7); `VERBOSE STATUS`, whose report ends
//! when the server closes the connection; `MONITOR all`, answered by `OK` and then one line
//! per event (`[date time] EVENT: peer details`, 2.29 and later) until either side closes.
//! Every read is bounded in bytes and time.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xirang_telemetry::metric::Metric;
use xirang_telemetry::spec::Kind;

use crate::collect::{Feed, FeedRound, Point};

/// Reports larger than this are refused: a 32,768-rank job's verbose JSON report is
/// about 20 MB (some 600 bytes per rank).
pub const MAX_REPORT_BYTES: usize = 64 << 20;

/// How long RAS waits before it declares an unreachable process dead, seconds (×
/// `NCCL_RAS_TIMEOUT_FACTOR`; docs/reference/live-signals.md §B, `ras_internal.h`).
pub const PEER_DEAD_S: u32 = 60;

/// A job process as RAS names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Process {
    /// Node (host name or address).
    pub host: String,
    /// Process id.
    pub pid: Option<i64>,
    /// CUDA device.
    pub gpu: Option<u32>,
    /// Rank in the communicator, when named per rank.
    pub rank: Option<u32>,
}

impl std::fmt::Display for Process {
    /// `rank 0 (process 483072, GPU 0) on 172.16.64.210`, `process 3487984 (GPU 5) on
    /// 172.16.64.213`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = match (self.rank, self.pid) {
            (Some(r), _) => format!("rank {r}"),
            (None, Some(p)) => format!("process {p}"),
            (None, None) => "a process".into(),
        };
        let mut inner = Vec::new();
        if let (Some(_), Some(p)) = (self.rank, self.pid) {
            inner.push(format!("process {p}"));
        }
        if let Some(g) = self.gpu {
            inner.push(format!("GPU {g}"));
        }
        if inner.is_empty() {
            write!(f, "{head} on {}", self.host)
        } else {
            write!(f, "{head} ({}) on {}", inner.join(", "), self.host)
        }
    }
}

/// `Process 3487984 on node 172.16.64.213 managing GPU 5`.
pub fn process_line(l: &str) -> Option<Process> {
    let rest = l.strip_prefix("Process ")?;
    let (pid, rest) = rest.split_once(" on node ")?;
    let (host, gpu) = match rest.split_once(" managing GPU ") {
        Some((h, g)) => (h, g.split_whitespace().next()?.parse().ok()),
        None => (rest.split_whitespace().next()?, None),
    };
    Some(Process {
        host: host.to_string(),
        pid: pid.trim().parse().ok(),
        gpu,
        rank: None,
    })
}

/// A monitor event: its name and the peer it is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `PEER_DEAD`, `PEER_UNRESPONSIVE`, ...
    pub name: String,
    /// The peer.
    pub peer: Process,
}

/// `[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1`.
pub fn monitor_event(t: &str) -> Option<Event> {
    let rest = t.strip_prefix('[')?;
    let (_when, rest) = rest.split_once("] ")?;
    let (name, peer) = rest.split_once(": ")?;
    if !name.starts_with("PEER_") {
        return None;
    }
    let peer = process_line(peer.trim()).unwrap_or_else(|| Process {
        host: peer.split_whitespace().next().unwrap_or_default().to_string(),
        ..Process::default()
    });
    Some(Event {
        name: name.to_string(),
        peer,
    })
}

/// The same process (host and pid; GPU when both name one).
pub fn same(a: &Process, b: &Process) -> bool {
    a.host == b.host && a.pid == b.pid
}

/// What a monitor event says of its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Declared dead (`PEER_DEAD`, `PEER_TIMEOUT_DEAD`).
    Dead,
    /// Not answering (`PEER_UNRESPONSIVE`, `PEER_SEND_STUCK`, `PEER_KEEPALIVE_TIMEOUT`,
    /// `PEER_INIT_TIMEOUT`).
    Unresponsive,
    /// Answering again (`PEER_RECOVERED`, `PEER_CONNECTED`).
    Recovered,
    /// A new process (`PEER_NEW`): whatever was said of that pid before is over.
    New,
    /// Nothing to judge (`PEER_CONNECTING`, `PEER_RETRY`, `PEER_DISCONNECTED`).
    None,
    /// An event this reader does not know.
    Unknown,
}

/// The effect of the event `name` (`src/ras/peers.cc`, `rasnet.cc`).
pub fn effect(name: &str) -> Effect {
    match name {
        "PEER_DEAD" | "PEER_TIMEOUT_DEAD" => Effect::Dead,
        "PEER_UNRESPONSIVE" | "PEER_SEND_STUCK" | "PEER_KEEPALIVE_TIMEOUT" | "PEER_INIT_TIMEOUT" => {
            Effect::Unresponsive
        }
        "PEER_RECOVERED" | "PEER_CONNECTED" => Effect::Recovered,
        "PEER_NEW" => Effect::New,
        "PEER_CONNECTING" | "PEER_RETRY" | "PEER_DISCONNECTED" => Effect::None,
        _ => Effect::Unknown,
    }
}

/// RAS's client port (`ras_internal.h`).
pub const RAS_PORT: u16 = 28028;
/// The protocol version this client speaks (2 in every release with RAS).
const PROTOCOL: u32 = 2;
/// Longest handshake line read.
const MAX_LINE_BYTES: u64 = 1024;
/// A report has this long after the handshake, at least, to arrive in full (RAS's own
/// collection takes up to its timeout per leg; a server that trickles bytes is cut off).
const MIN_REPORT_DEADLINE: Duration = Duration::from_secs(30);
/// ... and at most this many times RAS's timeout.
const REPORT_DEADLINE_FACTOR: u32 = 6;

/// Why the RAS server could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{addr}: {message}")]
pub struct ClientError {
    /// `host:port`.
    pub addr: String,
    /// What went wrong.
    pub message: String,
}

/// What the server sent: the report's text and whether it is JSON.
pub struct Fetched {
    /// The report.
    pub text: String,
    /// False when the server is older than JSON reports (2.28.7) and answered in text.
    pub json: bool,
}

/// Asks the RAS server at `addr` (`host:port`, or a host: port 28028) for its verbose
/// status, in JSON where the server has it. `timeout` is RAS's own collection timeout
/// (`TIMEOUT`) and the longest silence tolerated on the socket.
pub fn fetch(addr: &str, timeout: Duration) -> Result<Fetched, ClientError> {
    let (mut r, mut w, target) = hello(addr, timeout)?;
    let err = |m: String| ClientError {
        addr: target.clone(),
        message: m,
    };
    let mut say = |cmd: &str, r: &mut BufReader<TcpStream>| ask(r, &mut w, cmd, &target);
    let secs = timeout.as_secs().max(1);
    let ok = say(&format!("TIMEOUT {secs}"), &mut r)?;
    if ok != "OK" {
        return Err(err(format!("refused `TIMEOUT {secs}`: {ok}")));
    }
    let json = say("SET FORMAT json", &mut r)? == "OK";
    let deadline = Instant::now() + MIN_REPORT_DEADLINE.max(timeout * REPORT_DEADLINE_FACTOR);
    r.get_mut()
        .write_all(b"VERBOSE STATUS\n")
        .map_err(|e| err(format!("sending `VERBOSE STATUS`: {e}")))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        if Instant::now() > deadline {
            return Err(err(format!(
                "the report did not end within {:?} ({} bytes so far)",
                MIN_REPORT_DEADLINE.max(timeout * REPORT_DEADLINE_FACTOR),
                buf.len()
            )));
        }
        let n = r
            .read(&mut chunk)
            .map_err(|e| err(format!("reading the report ({} bytes so far): {e}", buf.len())))?;
        if n == 0 {
            break;
        }
        if buf.len() + n > MAX_REPORT_BYTES {
            return Err(err(format!("a report of more than {MAX_REPORT_BYTES} bytes")));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Fetched {
        text: String::from_utf8_lossy(&buf).into_owned(),
        json,
    })
}

/// Longest monitor event line kept (an event is one peer and a few words).
const MAX_EVENT_LINE_BYTES: usize = 4096;
/// Most bytes of events taken in one round; the rest wait for the next.
const MAX_EVENT_BYTES_PER_ROUND: usize = 1 << 20;
/// How long one round waits for events before it reports what it has.
const EVENT_POLL: Duration = Duration::from_millis(50);
/// The longest one round reads events (a server that trickles them is read on in the
/// next round).
const EVENT_ROUND_DEADLINE: Duration = Duration::from_millis(500);
/// Most nodes followed (a job of this many hosts is far above any today's).
const MAX_HOSTS: usize = 65_536;

/// A connection following a RAS server's monitor events.
pub struct MonitorConn {
    r: BufReader<TcpStream>,
    partial: Vec<u8>,
}

/// `host:port`, with RAS's port when none is given.
fn target(addr: &str) -> String {
    if addr
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !addr.ends_with(']')
    {
        addr.to_string()
    } else {
        format!("{addr}:{RAS_PORT}")
    }
}

/// Connects and says hello; returns the reader and writer.
fn hello(addr: &str, timeout: Duration) -> Result<(BufReader<TcpStream>, TcpStream, String), ClientError> {
    let target = target(addr);
    let err = |m: String| ClientError {
        addr: target.clone(),
        message: m,
    };
    let addrs: Vec<_> = target
        .to_socket_addrs()
        .map_err(|e| err(format!("resolving: {e}")))?
        .collect();
    // `localhost` may name ::1 first while RAS listens on 127.0.0.1: try each address.
    let mut last = None;
    let mut found = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => {
                found = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let stream = found.ok_or_else(|| match last {
        Some(e) => err(format!(
            "connecting: {e} (is an NCCL job with RAS running there? NCCL_RAS_ADDR moves it)"
        )),
        None => err("the host has no address".into()),
    })?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| err(format!("setting timeouts: {e}")))?;
    let w = stream.try_clone().map_err(|e| err(e.to_string()))?;
    let mut r = BufReader::new(stream);
    let mut w2 = w.try_clone().map_err(|e| err(e.to_string()))?;
    let answer = ask(&mut r, &mut w2, &format!("CLIENT PROTOCOL {PROTOCOL}"), &target)?;
    if !answer.to_ascii_uppercase().starts_with("SERVER PROTOCOL") {
        return Err(err(format!(
            "answered `{}`: expected `SERVER PROTOCOL {PROTOCOL}` (not an NCCL RAS server?)",
            answer.chars().take(60).collect::<String>()
        )));
    }
    Ok((r, w, target))
}

/// How long a handshake answer may take to arrive in full (a server that trickles bytes
/// is cut off).
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// Sends a command line and reads its one-line answer (at most [`MAX_LINE_BYTES`], within
/// [`ANSWER_DEADLINE`]).
fn ask(
    r: &mut BufReader<TcpStream>,
    w: &mut TcpStream,
    cmd: &str,
    target: &str,
) -> Result<String, ClientError> {
    let err = |m: String| ClientError {
        addr: target.to_string(),
        message: m,
    };
    w.write_all(format!("{cmd}\n").as_bytes())
        .map_err(|e| err(format!("sending `{cmd}`: {e}")))?;
    let until = Instant::now() + ANSWER_DEADLINE;
    let mut line = Vec::new();
    loop {
        if Instant::now() > until {
            return Err(err(format!(
                "the answer to `{cmd}` did not arrive within {ANSWER_DEADLINE:?}"
            )));
        }
        let avail = r
            .fill_buf()
            .map_err(|e| err(format!("reading the answer to `{cmd}`: {e}")))?;
        if avail.is_empty() {
            return Err(err(format!(
                "answered `{cmd}` with `{}` and closed: expected a line",
                String::from_utf8_lossy(&line)
                    .chars()
                    .take(60)
                    .collect::<String>()
            )));
        }
        let (take, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        line.extend_from_slice(&avail[..take]);
        r.consume(take);
        if line.len() as u64 > MAX_LINE_BYTES {
            return Err(err(format!(
                "answered `{cmd}` with `{}` and more: expected a line",
                String::from_utf8_lossy(&line)
                    .chars()
                    .take(60)
                    .collect::<String>()
            )));
        }
        if done {
            return Ok(String::from_utf8_lossy(&line).trim().to_string());
        }
    }
}

impl MonitorConn {
    /// Connects to the RAS server at `addr` and asks for every monitor event (`MONITOR all`:
    /// the lifecycle and trace groups).
    pub fn connect(addr: &str, timeout: Duration) -> Result<MonitorConn, ClientError> {
        let (mut r, mut w, target) = hello(addr, timeout)?;
        let ok = ask(&mut r, &mut w, "MONITOR all", &target)?;
        if ok != "OK" {
            return Err(ClientError {
                addr: target,
                message: format!("refused `MONITOR all`: {ok} (monitor mode needs NCCL 2.29 or later)"),
            });
        }
        r.get_ref()
            .set_read_timeout(Some(EVENT_POLL))
            .map_err(|e| ClientError {
                addr: target.clone(),
                message: format!("setting timeouts: {e}"),
            })?;
        Ok(MonitorConn {
            r,
            partial: Vec::new(),
        })
    }

    /// The event lines that arrived since the last call (waiting at most a moment), and
    /// why the connection ended if it did (the server closed it, or it failed): the lines
    /// that came before the end are kept.
    pub fn poll(&mut self) -> (Vec<String>, Option<String>) {
        let mut lines = Vec::new();
        let mut taken = 0;
        let until = Instant::now() + EVENT_ROUND_DEADLINE;
        loop {
            if Instant::now() > until {
                return (lines, None);
            }
            let avail = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return (lines, None);
                }
                Err(e) => return (lines, Some(e.to_string())),
            };
            if avail.is_empty() {
                return (lines, Some("the server closed the connection".into()));
            }
            let n = avail.len();
            for &b in avail {
                if b == b'\n' {
                    if self.partial.len() <= MAX_EVENT_LINE_BYTES {
                        lines.push(String::from_utf8_lossy(&self.partial).trim().to_string());
                    }
                    self.partial.clear();
                } else if self.partial.len() <= MAX_EVENT_LINE_BYTES {
                    self.partial.push(b);
                }
            }
            self.r.consume(n);
            taken += n;
            if taken >= MAX_EVENT_BYTES_PER_ROUND {
                return (lines, None);
            }
        }
    }
}

/// What the events said so far: each peer's latest state, and how many events of each
/// kind came.
#[derive(Debug, Default, Clone)]
pub struct PeerStates {
    /// Dead processes.
    pub dead: Vec<Process>,
    /// Processes not answering.
    pub unresponsive: Vec<Process>,
    /// Events by name.
    pub events: BTreeMap<String, u64>,
    /// Hosts ever named, so that their gauges read 0 once their peers recover.
    pub hosts: std::collections::BTreeSet<String>,
}

impl PeerStates {
    /// Folds one event in: the latest word on a peer wins.
    pub fn apply(&mut self, ev: &Event) {
        // Event names are the server's words: one it does not define counts as `other`,
        // so the label's values stay few.
        let name = if effect(&ev.name) == Effect::Unknown {
            "other"
        } else {
            ev.name.as_str()
        };
        *self.events.entry(name.to_string()).or_default() += 1;
        if self.hosts.len() < MAX_HOSTS {
            self.hosts.insert(ev.peer.host.clone());
        }
        let p = &ev.peer;
        match effect(&ev.name) {
            Effect::Dead => {
                self.unresponsive.retain(|q| !same(q, p));
                if !self.dead.iter().any(|q| same(q, p)) {
                    self.dead.push(p.clone());
                }
            }
            Effect::Unresponsive => {
                if !self.dead.iter().chain(&self.unresponsive).any(|q| same(q, p)) {
                    self.unresponsive.push(p.clone());
                }
            }
            Effect::Recovered => self.unresponsive.retain(|q| !same(q, p)),
            Effect::New => {
                self.unresponsive.retain(|q| !same(q, p));
                self.dead.retain(|q| !same(q, p));
            }
            Effect::None | Effect::Unknown => {}
        }
    }

    /// Forgets every process's state (the nodes stay, reading 0).
    pub fn forget_peers(&mut self) {
        self.dead.clear();
        self.unresponsive.clear();
    }

    /// The series: per host, its dead and unresponsive processes (gauges, 0 once they
    /// recover), and the events by name (counters); `connected` says whether the feed
    /// reads the server now.
    pub fn points(&self, connected: bool) -> Vec<Point> {
        use crate::collect::gauge;
        let mut out = vec![gauge(
            "xirang_nccl_ras_connected",
            vec![],
            f64::from(u8::from(connected)),
            "1 while the agent follows the job's NCCL RAS monitor events.",
        )];
        for h in &self.hosts {
            let n = |v: &[Process]| v.iter().filter(|p| p.host == *h).count() as f64;
            out.push(gauge(
                "xirang_nccl_ras_dead_processes",
                vec![("node", h.clone())],
                n(&self.dead),
                "Job processes on the node NCCL RAS declared dead (unreachable for 60 s).",
            ));
            out.push(gauge(
                "xirang_nccl_ras_unresponsive_processes",
                vec![("node", h.clone())],
                n(&self.unresponsive),
                "Job processes on the node that NCCL RAS found not answering, not yet dead.",
            ));
        }
        for (e, n) in &self.events {
            out.push(Point {
                metric: Arc::new(Metric {
                    name: "xirang_nccl_ras_events_total".into(),
                    labels: vec![("event", e.clone())],
                    kind: Kind::Counter,
                    scale: 1.0,
                    help: "NCCL RAS monitor events since the agent started, by event.",
                }),
                value: *n as f64,
            });
        }
        out
    }
}

/// A feed of the RAS server at `addr`'s monitor events for a
/// [`crate::collect::Collector`]: each round takes the events that came and serves the
/// peers' states; a connection that fails is a problem of the round, and the next round
/// connects again; the states last as long as the connection (a dead process is dead
/// until RAS says a new one took its pid, or the job's server goes away).
pub fn feed(addr: String, timeout: Duration) -> Feed {
    let mut conn: Option<MonitorConn> = None;
    let mut states = PeerStates::default();
    Box::new(move |_| {
        let mut round = FeedRound::default();
        if conn.is_none() {
            match MonitorConn::connect(&addr, timeout) {
                Ok(c) => conn = Some(c),
                Err(e) => round.problems.push(format!("NCCL RAS: {e}")),
            }
        }
        if let Some(c) = conn.as_mut() {
            let (lines, ended) = c.poll();
            for l in lines.iter().filter(|l| !l.is_empty()) {
                match monitor_event(l) {
                    Some(ev) => states.apply(&ev),
                    None if l.starts_with('[') => round.problems.push(format!(
                        "NCCL RAS {addr}: not a monitor event: {}",
                        l.chars().take(80).collect::<String>()
                    )),
                    // Other chatter.
                    None => {}
                }
            }
            if let Some(e) = ended {
                round
                    .problems
                    .push(format!("NCCL RAS {addr}: {e}; connecting again next round"));
                conn = None;
                // What the events said holds for the job this connection followed: a
                // server that went away took its job with it (or a new one will say
                // again), so its processes' states end with it; the nodes read 0.
                states.forget_peers();
            }
        }
        round.points = states.points(conn.is_some());
        round
    })
}
