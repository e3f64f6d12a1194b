//! The RAS client against fake servers that speak the protocol as NCCL's does, as an
//! older server does (no JSON), or badly: stalled, endless, or not RAS at all. The
//! reports they serve are NCCL's examples, kept with the diagnosis crate that reads them.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use xirang_monitor::nccl_ras::MAX_REPORT_BYTES;
use xirang_monitor::nccl_ras::fetch;

enum Behaviour {
    /// NCCL 2.28.7 or later: JSON on request.
    Json(String),
    /// Older: `SET FORMAT` is an unknown command.
    TextOnly(String),
    /// Says hello, then never answers `TIMEOUT`.
    StallAfterHello,
    /// Sends more than a report may have.
    Endless,
    /// Something else on the port.
    NotRas,
}

fn serve(b: Behaviour) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut json = false;
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let cmd = line.trim().to_ascii_uppercase();
            let answer = match (&b, cmd.as_str()) {
                (Behaviour::NotRas, _) => "HTTP/1.1 400 Bad Request\r\n".to_string(),
                (_, c) if c.starts_with("CLIENT PROTOCOL") => "SERVER PROTOCOL 2\n".into(),
                (Behaviour::StallAfterHello, _) => {
                    std::thread::sleep(Duration::from_secs(5));
                    return;
                }
                (_, c) if c.starts_with("TIMEOUT") => "OK\n".into(),
                (Behaviour::TextOnly(_), "SET FORMAT JSON") => "ERROR: Unknown command SET\n".into(),
                (_, "SET FORMAT JSON") => {
                    json = true;
                    "OK\n".into()
                }
                (Behaviour::Json(j), "VERBOSE STATUS") => {
                    assert!(json, "the report was asked before its format");
                    let _ = w.write_all(j.as_bytes());
                    return;
                }
                (Behaviour::TextOnly(t), "VERBOSE STATUS") => {
                    let _ = w.write_all(t.as_bytes());
                    return;
                }
                (Behaviour::Endless, "VERBOSE STATUS") => {
                    let chunk = vec![b' '; 1 << 20];
                    while w.write_all(&chunk).is_ok() {}
                    return;
                }
                _ => format!("ERROR: Unknown command {cmd}\n"),
            };
            if w.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    addr
}

fn data(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../xirang-diagnose/test_data/nccl-ras/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn a_current_server_answers_in_json_and_an_older_one_in_text() {
    let j = data("08-status-json.json");
    let f = fetch(&serve(Behaviour::Json(j.clone())), Duration::from_secs(2)).unwrap();
    assert!(f.json);
    assert_eq!(f.text, j);
    let t = data("07-text-errors-dead-process.txt");
    let f = fetch(&serve(Behaviour::TextOnly(t.clone())), Duration::from_secs(2)).unwrap();
    assert!(!f.json);
    assert_eq!(f.text, t);
}

#[test]
fn a_stalled_an_endless_or_a_foreign_server_ends_in_an_error() {
    let t0 = Instant::now();
    let e = fetch(&serve(Behaviour::StallAfterHello), Duration::from_secs(1))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("reading the answer to `TIMEOUT 1`"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    let e = fetch(&serve(Behaviour::Endless), Duration::from_secs(2))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(&format!("more than {MAX_REPORT_BYTES} bytes")), "{e}");
    let e = fetch(&serve(Behaviour::NotRas), Duration::from_secs(2))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("expected `SERVER PROTOCOL 2`"), "{e}");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let e = fetch(&addr, Duration::from_secs(1)).err().unwrap().to_string();
    assert!(e.starts_with(&format!("{addr}: connecting")), "{e}");
}

/// A RAS server in monitor mode: answers the handshake and `MONITOR all`, then sends
/// `events` (each after a pause), then closes.
fn serve_events(events: Vec<(&'static str, u64)>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        for want in ["CLIENT PROTOCOL", "MONITOR ALL"] {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.to_ascii_uppercase().starts_with(want), "{line}");
            let a = if want == "MONITOR ALL" {
                "OK\n"
            } else {
                "SERVER PROTOCOL 2\n"
            };
            w.write_all(a.as_bytes()).unwrap();
        }
        for (e, pause_ms) in events {
            std::thread::sleep(Duration::from_millis(pause_ms));
            w.write_all(format!("{e}\n").as_bytes()).unwrap();
        }
    });
    addr
}

/// (metric, node or event) -> value.
type Gauges = std::collections::BTreeMap<(String, String), f64>;

/// A feed round's points as [`Gauges`].
fn gauges(r: &xirang_monitor::collect::FeedRound) -> Gauges {
    r.points
        .iter()
        .map(|p| {
            let node = p
                .metric
                .labels
                .iter()
                .find(|(k, _)| *k == "node" || *k == "event")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            ((p.metric.name.clone(), node), p.value)
        })
        .collect()
}

#[test]
fn monitor_events_become_each_nodes_dead_and_unresponsive_processes() {
    let addr = serve_events(vec![
        (
            "[2026-12-06 10:00:00] PEER_UNRESPONSIVE: Process 11 on node 10.0.0.1 managing GPU 0",
            0,
        ),
        (
            "[2026-12-06 10:00:01] PEER_DEAD: Process 22 on node 10.0.0.2 managing GPU 1",
            0,
        ),
        (
            "[2026-12-06 10:00:02] PEER_RECOVERED: Process 11 on node 10.0.0.1 managing GPU 0",
            400,
        ),
        ("[2026-12-06 10:00:03] garbled", 0),
    ]);
    let mut feed = xirang_monitor::nccl_ras::feed(addr.clone(), Duration::from_secs(2));
    let wait_for = |feed: &mut xirang_monitor::collect::Feed, ok: &dyn Fn(&Gauges) -> bool| {
        let t0 = Instant::now();
        let mut problems = Vec::new();
        loop {
            let r = feed(0);
            let g = gauges(&r);
            problems.extend(r.problems.clone());
            if ok(&g) {
                return (g, problems);
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "{g:?} {:?}", r.problems);
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let key = |m: &str, n: &str| (m.to_string(), n.to_string());
    let (g, _) = wait_for(&mut feed, &|g| {
        g.get(&key("xirang_nccl_ras_dead_processes", "10.0.0.2")) == Some(&1.0)
    });
    assert_eq!(
        g[&key("xirang_nccl_ras_unresponsive_processes", "10.0.0.1")],
        1.0,
        "{g:?}"
    );
    assert_eq!(g[&key("xirang_nccl_ras_connected", "")], 1.0);
    // Recovered: back to 0, and the garbled line named.
    let (g, mut problems) = wait_for(&mut feed, &|g| {
        g.get(&key("xirang_nccl_ras_unresponsive_processes", "10.0.0.1")) == Some(&0.0)
    });
    assert_eq!(g[&key("xirang_nccl_ras_events_total", "PEER_RECOVERED")], 1.0);
    // The server closes: a problem, then reconnecting fails; the job it followed is gone
    // with it, so its processes' states are forgotten and the nodes read 0.
    let (g, more) = wait_for(&mut feed, &|g| {
        g.get(&key("xirang_nccl_ras_connected", "")) == Some(&0.0)
    });
    problems.extend(more);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("not a monitor event: [2026-12-06 10:00:03] garbled")),
        "{problems:?}"
    );
    assert_eq!(g[&key("xirang_nccl_ras_dead_processes", "10.0.0.2")], 0.0);
    let r = feed(0);
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains(&addr) && p.contains("connecting")),
        "{:?}",
        r.problems
    );
}
