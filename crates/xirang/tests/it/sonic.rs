//! `xirang monitor --sonic`: SONiC switches played by real Redis servers (Debian's
//! `redis-server`, installed by scripts/test.sh) loaded with SONiC's own mock
//! COUNTERS_DB tables, read by the agent and scraped by a real Prometheus.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xirang_monitor::redis::{Conn, Endpoint, SWITCH_LIMITS};

use crate::monitor::{Guard, free_port, get, prometheus_binary, start_prometheus, wait_ready};

fn redis_binary() -> &'static str {
    ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("redis-server is not installed: scripts/test.sh installs it (Debian package `redis-server`)")
}

fn endpoint(port: u16) -> Endpoint {
    Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

/// Starts a Redis server listening as `listen` says (`--port P --bind 127.0.0.1`, or a
/// unix socket) that keeps nothing on disk; returns once it answers at `at`.
fn start_redis_at(listen: &[&str], at: &Endpoint) -> Guard {
    let g = Guard(
        Command::new(redis_binary())
            .args(listen)
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while Conn::connect(at, SWITCH_LIMITS).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    g
}

/// A Redis server on TCP `port` of the loopback.
fn start_redis(port: u16) -> Guard {
    start_redis_at(
        &["--port", &port.to_string(), "--bind", "127.0.0.1"],
        &endpoint(port),
    )
}

/// The mock tables of `file`.
fn fixture(file: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let path = crate::util::root()
        .join("crates/xirang-monitor/test_data/sonic")
        .join(file);
    xirang_monitor::sonic::snapshot_from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Loads `file` into COUNTERS_DB (2) and the switch's metadata into CONFIG_DB (4), as
/// SONiC's orchagent and its configuration would.
fn load(port: u16, file: &str, metadata: &[(&str, &str)]) {
    load_at(&endpoint(port), file, metadata);
}

/// [`load`] into the server at `at`.
fn load_at(at: &Endpoint, file: &str, metadata: &[(&str, &str)]) {
    let mut c = Conn::connect(at, SWITCH_LIMITS).unwrap();
    let mut cmds: Vec<Vec<String>> = vec![vec!["SELECT".into(), "2".into()]];
    // An empty hash is no key in Redis (the tables have a few).
    for (k, h) in fixture(file).into_iter().filter(|(_, h)| !h.is_empty()) {
        let mut cmd = vec!["HSET".to_string(), k];
        for (f, v) in h {
            cmd.push(f);
            cmd.push(v);
        }
        cmds.push(cmd);
    }
    let mut meta = vec!["HSET".to_string(), "DEVICE_METADATA|localhost".into()];
    meta.extend(metadata.iter().flat_map(|(k, v)| [k.to_string(), v.to_string()]));
    cmds.push(vec!["SELECT".into(), "4".into()]);
    cmds.push(meta);
    let refs: Vec<Vec<&str>> = cmds
        .iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    c.pipeline(&refs).unwrap();
}

fn start_agent(urls: &[String]) -> (Guard, u16) {
    let port = free_port();
    let mut args = vec![
        "monitor".to_string(),
        "--interval".into(),
        "1s".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    for u in urls {
        args.push("--sonic".into());
        args.push(u.clone());
    }
    let g = Guard(
        Command::new(env!("CARGO_BIN_EXE_xirang"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_ready(port, "the agent");
    (g, port)
}

/// What the tables say each series must be, joined by hand here (port name map →
/// counters; queue name map and index map → counters and the persistent watermark), as
/// `(metric, sorted labels) → value`.
fn expected(file: &str, switch: &str) -> BTreeMap<(String, String), f64> {
    let t = fixture(file);
    let get = |k: &str, f: &str| -> Option<f64> {
        t.get(k)?
            .iter()
            .find(|(x, _)| x == f)
            .map(|(_, v)| v.parse().unwrap())
    };
    let mut want = BTreeMap::new();
    for (port, oid) in &t["COUNTERS_PORT_NAME_MAP"] {
        for p in 0..8 {
            for dir in ["rx", "tx"] {
                let f = format!("SAI_PORT_STAT_PFC_{p}_{}_PKTS", dir.to_uppercase());
                if let Some(v) = get(&format!("COUNTERS:{oid}"), &f) {
                    let labels = format!("direction={dir},port={port},priority={p},switch={switch}");
                    want.insert(("xirang_switch_pfc_frames_total".to_string(), labels), v);
                }
            }
        }
    }
    let index: BTreeMap<&str, &str> = t["COUNTERS_QUEUE_INDEX_MAP"]
        .iter()
        .map(|(o, i)| (o.as_str(), i.as_str()))
        .collect();
    for (name, oid) in &t["COUNTERS_QUEUE_NAME_MAP"] {
        let port = name.rsplit_once(':').unwrap().0;
        let labels = format!("port={port},queue={},switch={switch}", index[oid.as_str()]);
        for (metric, table, field) in [
            (
                "xirang_switch_queue_wred_ecn_marked_packets_total",
                "COUNTERS",
                "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
            ),
            (
                "xirang_switch_queue_dropped_packets_total",
                "COUNTERS",
                "SAI_QUEUE_STAT_DROPPED_PACKETS",
            ),
            (
                "xirang_switch_queue_watermark_bytes",
                "PERSISTENT_WATERMARKS",
                "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
            ),
        ] {
            if let Some(v) = get(&format!("{table}:{oid}"), field) {
                want.insert((metric.to_string(), labels.clone()), v);
            }
        }
    }
    want
}

/// Every series of `metric` Prometheus holds now, as (metric, sorted labels) → value.
fn scraped(prom: u16, metric: &str, job: &str) -> BTreeMap<(String, String), f64> {
    let body = get(&format!("http://127.0.0.1:{prom}/api/v1/query?query={metric}")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut out = BTreeMap::new();
    for r in v["data"]["result"].as_array().unwrap() {
        let m = r["metric"].as_object().unwrap();
        let labels = m
            .iter()
            .filter(|(k, _)| !["__name__", "instance", "job"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(m["job"], job);
        out.insert(
            (metric.to_string(), labels),
            r["value"][1].as_str().unwrap().parse().unwrap(),
        );
    }
    out
}

/// Acceptance 2 of the live-signals issue: every port's PFC frames per priority, every
/// queue's ECN-marked packets, drops and watermark read back through a real Prometheus
/// equal the tables' values; a single-ASIC switch and a two-namespace one (asic1 reuses
/// asic0's object ids) kept apart.
#[test]
fn sonic_counters_db_reads_back_through_prometheus() {
    let _turn = crate::monitor::live_shared();
    let prometheus = prometheus_binary();
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let _servers: Vec<Guard> = ports.iter().map(|p| start_redis(*p)).collect();
    load(ports[0], "counters_db.json", &[("hostname", "sonic1")]);
    load(
        ports[1],
        "asic0-counters_db.json",
        &[("hostname", "sonic2"), ("asic_name", "asic0")],
    );
    load(
        ports[2],
        "asic1-counters_db.json",
        &[("hostname", "sonic2"), ("asic_name", "asic1")],
    );
    let urls: Vec<String> = ports.iter().map(|p| format!("redis://127.0.0.1:{p}/2")).collect();
    let (_agent, agent) = start_agent(&urls);
    let (_prom, prom) = start_prometheus(prometheus, dir.path(), agent);
    crate::monitor::wait_stored(
        &format!("http://127.0.0.1:{prom}"),
        "xirang_switch_queue_watermark_bytes",
        2,
        Duration::from_secs(120),
    );
    let mut want = expected("counters_db.json", "sonic1");
    want.extend(expected("asic0-counters_db.json", "sonic2"));
    want.extend(expected("asic1-counters_db.json", "sonic2"));
    let mut got = BTreeMap::new();
    for m in [
        "xirang_switch_pfc_frames_total",
        "xirang_switch_queue_wred_ecn_marked_packets_total",
        "xirang_switch_queue_dropped_packets_total",
        "xirang_switch_queue_watermark_bytes",
    ] {
        got.extend(scraped(prom, m, "xirang"));
    }
    let ecn = want.keys().filter(|(m, _)| m.contains("ecn")).count();
    assert!(
        want.len() > 300 && ecn >= 60,
        "{} series, {ecn} of ECN marks",
        want.len()
    );
    let diff: Vec<_> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k:?}: want {v}, got {:?}", got.get(k)))
        .take(10)
        .collect();
    assert!(diff.is_empty(), "{diff:#?}");
    assert_eq!(got.len(), want.len(), "series the tables do not have");
    // The namespaces are on the port info series, and no counter was refused.
    let info = scraped(prom, "xirang_switch_port_info", "xirang");
    assert!(
        info.keys()
            .any(|(_, l)| l.contains("namespace=asic1") && l.contains("port=Ethernet-BP256"))
    );
    assert_eq!(
        scraped(prom, "xirang_collector_errors_total", "xirang")
            .values()
            .sum::<f64>(),
        0.0
    );
}

/// A Redis that dies and comes back: the agent keeps serving, counts the failed reads in
/// `xirang_collector_errors_total`, and reads the switch again once it is back.
#[test]
fn the_agent_survives_a_redis_that_dies_and_comes_back() {
    let port = free_port();
    let redis = start_redis(port);
    load(port, "counters_db.json", &[("hostname", "sonic1")]);
    let (_agent, agent) = start_agent(&[format!("redis://127.0.0.1:{port}")]);
    let metrics = format!("http://127.0.0.1:{agent}/metrics");
    let value = |body: &str, prefix: &str| -> Option<f64> {
        // `name{labels} value timestamp`
        body.lines()
            .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    let pfc = "xirang_switch_pfc_frames_total{switch=\"sonic1\",port=\"Ethernet0\",direction=\"rx\",priority=\"3\"}";
    let wait = |what: &str, ok: &dyn Fn(&str) -> bool| {
        let t0 = Instant::now();
        loop {
            if let Some(b) = get(&metrics)
                && ok(&b)
            {
                return b;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait("the switch's counters", &|b| value(b, pfc) == Some(203.0));
    drop(redis);
    let b = wait("failed reads counted", &|b| {
        value(b, "xirang_collector_errors_total").is_some_and(|e| e >= 2.0)
    });
    assert_eq!(
        value(&b, pfc),
        None,
        "a dead switch's counters are not served as fresh"
    );
    let _redis = start_redis(port);
    load(port, "counters_db.json", &[("hostname", "sonic1")]);
    wait("the counters back", &|b| value(b, pfc) == Some(203.0));
}

/// SONiC's default: Redis on a unix socket (`unix:///var/run/redis/redis.sock`), the
/// switch's name given in the URL.
#[test]
fn a_switch_is_read_over_its_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("redis.sock");
    let ep = Endpoint::Unix(sock.clone());
    let _redis = start_redis_at(&["--port", "0", "--unixsocket", sock.to_str().unwrap()], &ep);
    // No DEVICE_METADATA hostname: the URL names the switch.
    load_at(&ep, "counters_db.json", &[("platform", "x86_64-mlnx_msn2700-r0")]);
    let url = format!("unix://{}?switch=leaf9", sock.display());
    let o = Command::new(env!("CARGO_BIN_EXE_xirang"))
        .args(["monitor", "--sonic", &url, "--once", "--interval", "100ms"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(r#"xirang_switch_pfc_frames_total{switch="leaf9",port="Ethernet0",direction="rx",priority="3"} 203"#),
        "{out}"
    );
}
