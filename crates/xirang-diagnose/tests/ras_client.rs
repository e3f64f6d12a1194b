//! The RAS client against fake servers that speak the protocol as NCCL's does, as an
//! older server does (no JSON), or badly: stalled, endless, or not RAS at all.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use xirang_diagnose::ras::MAX_REPORT_BYTES;
use xirang_diagnose::ras_client::fetch;

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
        "{}/test_data/nccl-ras/{name}",
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
