//! `xirang monitor` through the real binary, scraped by a real Prometheus server
//! (Debian's `prometheus`, installed by scripts/test.sh).

use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{root, run_expect};

/// Kills a child process when dropped, so a failing test leaves nothing running.
pub(crate) struct Guard(pub(crate) Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    // Write beside and rename: the agent never reads a half-written file.
    let tmp = p.with_extension("tmp");
    std::fs::File::create(&tmp)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    std::fs::rename(tmp, p).unwrap();
}

pub(crate) fn get(url: &str) -> Option<String> {
    ureq::get(url).call().ok()?.body_mut().read_to_string().ok()
}

pub(crate) fn wait_for(url: &str, what: &str) -> String {
    let t0 = Instant::now();
    loop {
        if let Some(body) = get(url) {
            return body;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} did not answer at {url}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the agent on `port` has its first round in: `/healthz` answers 200 only
/// then, while `/metrics` answers from the start (with the agent's own figures only, so a
/// test that reads a counter right after start would race the first round).
pub(crate) fn wait_ready(port: u16, what: &str) {
    let url = format!("http://127.0.0.1:{port}/healthz");
    let t0 = Instant::now();
    while get(&url).as_deref() != Some("ok\n") {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what} had no round in 60 s ({url})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Injected rates: 3 125 000 000 bytes/s of data (25 Gb/s, as 4-byte words) and
/// 250 ms of pause per second on priority 3.
const WORDS_PER_S: f64 = 781_250_000.0;
const PAUSE_US_PER_S: f64 = 250_000.0;

fn write_counters(root: &Path, elapsed_s: f64) {
    let p = "sys/class/infiniband/mlx5_0/ports/1";
    write(
        root,
        &format!("{p}/counters/port_xmit_data"),
        &format!("{}\n", (WORDS_PER_S * elapsed_s) as u64),
    );
    write(
        root,
        "commands/ethtool-S-ens1np0.txt",
        &format!(
            "NIC statistics:\n     rx_prio3_pause: {}\n     rx_prio3_pause_duration: {}\n",
            (elapsed_s * 10.0) as u64,
            (PAUSE_US_PER_S * elapsed_s) as u64
        ),
    );
}

/// Starts the agent on a host tree, sampling every second; returns it and its port.
fn start_agent(host: &Path) -> (Guard, u16) {
    start_agent_with(host, &[])
}

/// [`start_agent`] with more arguments.
fn start_agent_with(host: &Path, more: &[&str]) -> (Guard, u16) {
    let agent_port = free_port();
    let agent = Guard(
        Command::new(env!("CARGO_BIN_EXE_xirang"))
            .args([
                "monitor",
                "--root",
                host.to_str().unwrap(),
                "--interval",
                "1s",
                "--listen",
                &format!("127.0.0.1:{agent_port}"),
            ])
            .args(more)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_ready(agent_port, "the agent");
    (agent, agent_port)
}

/// Turns at the machine for tests that run agents, twins and a real Prometheus. A test
/// whose verdict rests on rates over seconds of wall time (a calibration, rates against
/// injected deltas) takes it alone ([`live_alone`]): on a two-core machine another such
/// test beside it starves those rates enough to move them. One that compares groups
/// measured in the same window (a rollout's canaries against control), or values that
/// do not depend on time, shares it ([`live_shared`]).
static LIVE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// This test's turn, alone (a failed test's poisoned lock is still a free turn).
pub(crate) fn live_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    LIVE.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This test's turn, shared with others that share.
pub(crate) fn live_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    LIVE.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running Prometheus (stopped when dropped).
pub(crate) type Prom = Guard;

/// Starts Prometheus scraping the agent every second, storing under `dir`; returns it
/// once ready, and its port.
pub(crate) fn start_prometheus(prometheus: &str, dir: &Path, agent_port: u16) -> (Prom, u16) {
    start_prometheus_with(
        prometheus,
        dir,
        &format!("  - job_name: xirang\n    static_configs:\n      - targets: ['127.0.0.1:{agent_port}']\n"),
    )
}

/// Starts Prometheus with these `scrape_configs` entries (YAML, indented by two).
pub(crate) fn start_prometheus_with(prometheus: &str, dir: &Path, scrape_configs: &str) -> (Prom, u16) {
    let prom_port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{scrape_configs}"
        ),
    )
    .unwrap();
    let prom = Guard(
        Command::new(prometheus)
            .args([
                &format!("--config.file={}", config.display()),
                &format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
                &format!("--web.listen-address=127.0.0.1:{prom_port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&format!("http://127.0.0.1:{prom_port}/-/ready"), "prometheus");
    (prom, prom_port)
}

/// Waits until Prometheus at `url` holds at least `n` samples of `metric` (its first
/// series) from the last minute; fails the test after `limit`.
pub(crate) fn wait_stored(url: &str, metric: &str, n: u64, limit: Duration) {
    let query = format!("{url}/api/v1/query?query=count_over_time({metric}%5B1m%5D)");
    let t0 = Instant::now();
    loop {
        let stored = get(&query)
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| v["data"]["result"][0]["value"][1].as_str().map(str::to_owned))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if stored >= n {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "Prometheus stored {stored} samples of {metric} in {limit:?}, expected {n}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub(crate) fn prometheus_binary() -> &'static str {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("prometheus is not installed: scripts/test.sh installs it (Debian package `prometheus`)")
}

/// A minimal RoCE port tree the agent reads.
fn port_tree(host: &Path) {
    let p = "sys/class/infiniband/mlx5_0/ports/1";
    write(host, &format!("{p}/state"), "4: ACTIVE\n");
    write(host, &format!("{p}/phys_state"), "5: LinkUp\n");
    write(host, &format!("{p}/rate"), "25 Gb/sec (1X EDR)\n");
    write(host, &format!("{p}/link_layer"), "Ethernet\n");
    write(host, "sys/class/net/ens1np0/operstate", "up\n");
}

/// Acceptance 3 of the diagnosis issue: the agent on a tree whose symbol errors ramp up,
/// scraped by a real Prometheus, and `xirang diagnose --prometheus` finds the link
/// fault through PromQL; a steady tree gives no finding.
#[test]
fn diagnose_finds_a_link_error_ramp_through_prometheus() {
    let _turn = live_alone();
    let prometheus = prometheus_binary();
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    port_tree(&host);
    let errors = "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error";
    write(&host, errors, "7\n");
    write(
        &host,
        "sys/class/infiniband/mlx5_0/ports/1/counters/link_downed",
        "0\n",
    );
    // The host's job writes NCCL Inspector's records (its hostname is the address
    // Prometheus knows the agent by, as a fleet's scrape targets name hosts).
    let ins = dir.path().join("inspector");
    std::fs::create_dir(&ins).unwrap();
    let mut rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("crates/xirang-monitor/test_data/nccl-inspector/readme-json-coll-record.json"),
        )
        .unwrap(),
    )
    .unwrap();
    rec["metadata"]["hostname"] = "127.0.0.1".into();
    let job = move || {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(ins.join("127.0.0.1-pid1.log"))
            .unwrap();
        f.write_all((rec.to_string() + "\n").as_bytes()).unwrap();
    };
    let (_agent, agent_port) = start_agent_with(
        &host,
        &["--nccl-inspector", dir.path().join("inspector").to_str().unwrap()],
    );
    let (_prom, prom_port) = start_prometheus(prometheus, dir.path(), agent_port);
    let url = format!("http://127.0.0.1:{prom_port}");
    // Steady until Prometheus holds a few samples of the unchanged counter (its start and
    // first scrapes can take many seconds on a loaded machine; ramping earlier would make
    // the window's first value a ramp value).
    wait_stored(
        &format!("http://127.0.0.1:{prom_port}"),
        "node_infiniband_symbol_error_total",
        3,
        Duration::from_secs(120),
    );
    let (out, _) = run_expect(&["diagnose", "--prometheus", &url, "--since", "1m"], 0);
    assert_eq!(out, "No fault found.\n");
    // Then 5 symbol errors per second for 8 s, while the job runs its collectives.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(8) {
        write(
            &host,
            errors,
            &format!("{}\n", 7 + (5.0 * t0.elapsed().as_secs_f64()) as u64),
        );
        job();
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let o = crate::util::run(&["diagnose", "--prometheus", &url, "--since", "1m", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v[0];
    assert_eq!(f["rule"], "LINK-ERRORS", "{v:#}");
    assert_eq!(f["class"], "link");
    assert_eq!(f["entity"], format!("127.0.0.1:{agent_port}/mlx5_0/1"));
    let ev = f["evidence"][0]["source"].as_str().unwrap();
    assert!(
        ev.starts_with(&format!("prometheus {url} node_infiniband_symbol_error_total{{")),
        "{ev}"
    );
    let text = f["evidence"][0]["value"].as_str().unwrap();
    let (from, rest) = text.split_once(" → ").unwrap();
    let to: f64 = rest.split(' ').next().unwrap().parse().unwrap();
    assert_eq!(from, "7", "{text}");
    assert!((30.0..=50.0).contains(&(to - 7.0)), "{text}");
    // What the host's job saw meanwhile, from its own figures (NCCL Inspector's).
    let scope = f["scope"].as_str().unwrap();
    assert!(
        scope.contains("jobs on 127.0.0.1 meanwhile: AllReduce 16-17GB of `unknown` at 61974 µs, bus bandwidth 485.1 GB/s"),
        "{scope}"
    );
    assert_eq!(v.as_array().unwrap().len(), 1, "{v:#}");
}

#[test]
fn prometheus_scrapes_the_agent_and_rates_match_the_injected_deltas() {
    let _turn = live_alone();
    let prometheus = prometheus_binary();
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    port_tree(&host);
    write_counters(&host, 0.0);

    let (agent, agent_port) = start_agent(&host);
    let body = wait_for(&format!("http://127.0.0.1:{agent_port}/metrics"), "the agent");
    assert!(
        body.contains("node_infiniband_port_data_transmitted_bytes_total"),
        "{body}"
    );
    assert_eq!(
        get(&format!("http://127.0.0.1:{agent_port}/healthz")).as_deref(),
        Some("ok\n")
    );
    let (_prom, prom_port) = start_prometheus(prometheus, dir.path(), agent_port);

    // The counters grow linearly with wall time, rewritten every 20 ms for 26 s.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(26) {
        write_counters(&host, t0.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(20));
    }
    let api = |path: &str, q: &str, extra: &str| -> serde_json::Value {
        let enc = q
            .replace('[', "%5B")
            .replace(']', "%5D")
            .replace('{', "%7B")
            .replace('}', "%7D")
            .replace('"', "%22")
            .replace('=', "%3D")
            .replace(' ', "%20");
        let url = format!("http://127.0.0.1:{prom_port}/api/v1/{path}?query={enc}{extra}");
        let body = get(&url).unwrap_or_else(|| panic!("query failed: {q}"));
        serde_json::from_str(&body).unwrap()
    };
    // rate() over a window that starts just before a stored sample and ends on the last
    // one: Prometheus then extrapolates by at most the 50 ms margin, so the result is the
    // slope between real samples, over about 20 s (writer lag under a loaded machine is
    // tens of ms: well under 1 % of the span).
    let rate_of = |series: &str| -> f64 {
        let v = api("query", &format!("{series}[40s]"), "");
        let values = v["data"]["result"][0]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("no samples of {series}: {v}"));
        let ts: Vec<f64> = values.iter().map(|x| x[0].as_f64().unwrap()).collect();
        let last = *ts.last().unwrap();
        let first = *ts.iter().find(|t| **t >= last - 20.0).unwrap();
        assert!(last - first >= 15.0, "too few samples of {series}: {ts:?}");
        let window_ms = ((last - first) * 1000.0).round() as u64 + 50;
        let r = api(
            "query",
            &format!("rate({series}[{window_ms}ms])"),
            &format!("&time={last:.3}"),
        );
        r["data"]["result"][0]["value"][1]
            .as_str()
            .unwrap_or_else(|| panic!("no rate of {series}: {r}"))
            .parse()
            .unwrap()
    };
    let bytes = rate_of("node_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"}");
    let want = WORDS_PER_S * 4.0;
    eprintln!("byte rate {bytes} vs injected {want}");
    assert!(
        (bytes / want - 1.0).abs() < 0.01,
        "byte rate {bytes} vs injected {want}"
    );
    let pause = rate_of("xirang_pfc_pause_seconds_total{device=\"ens1np0\",priority=\"3\"}");
    let want = PAUSE_US_PER_S * 1e-6;
    eprintln!("pause rate {pause} vs injected {want}");
    assert!(
        (pause / want - 1.0).abs() < 0.01,
        "pause rate {pause} vs injected {want}"
    );
    let query = |q: &str| -> f64 {
        api("query", q, "")["data"]["result"][0]["value"][1]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    // The agent's own health is scraped too.
    assert_eq!(query("xirang_collector_errors_total"), 0.0);
    drop(agent);
}

#[test]
fn monitor_once_and_query_through_the_binary() {
    let procfs = root().join("crates/xirang-host/test_data/sysfs/procfs");
    let (out, _) = run_expect(
        &[
            "monitor",
            "--root",
            procfs.to_str().unwrap(),
            "--once",
            "--interval",
            "50ms",
        ],
        0,
    );
    assert!(
        out.contains(
            "node_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"} 11523046035392"
        ),
        "{out}"
    );
    let (_, err) = run_expect(&["monitor", "--interval", "ten"], 1);
    assert!(
        err.contains("--interval") && err.contains("expected a duration"),
        "{err}"
    );
    // Durations a `Duration` cannot hold, or that round to nothing, are errors, not
    // panics or a busy loop.
    for (flag, d) in [
        ("--interval", "999999999999999999999999999d"),
        ("--interval", "0.0001ms"),
        ("--raw-retention", "99999999999999999999d"),
    ] {
        let (_, err) = run_expect(&["monitor", "--once", flag, d], 1);
        assert!(
            err.contains(flag) && err.contains("from 1ms to 3650 days"),
            "{flag} {d}: {err}"
        );
    }
    let (_, err) = run_expect(
        &[
            "monitor",
            "query",
            "--since",
            "99999999999d",
            "--history",
            "/no/such.sqlite",
        ],
        1,
    );
    assert!(
        err.contains("--since") && err.contains("from 1ms to 3650 days"),
        "{err}"
    );
    let (_, err) = run_expect(&["monitor", "query", "--history", "/no/such.sqlite"], 1);
    assert!(err.contains("/no/such.sqlite"), "{err}");
}

#[test]
fn a_simulated_run_replays_through_the_same_metrics_and_rules() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    run_expect(
        &[
            "sim",
            "scenarios/incast-16to1.toml",
            "--out",
            out,
            "--sample",
            "20us",
            "--quiet",
        ],
        0,
    );
    let (json, _) = run_expect(&["monitor", "--replay", out, "--json"], 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["rounds"].as_u64().unwrap() > 100, "{}", v["rounds"]);
    // The incast pauses the fabric: the PFC storm rule fires somewhere on priority 3.
    let alerts = v["alerts"].as_array().unwrap();
    assert!(
        alerts.iter().any(|a| a["alert"]["rule"] == "pfc_pause_storm"
            && a["alert"]["entity"].as_str().unwrap().contains("priority=3")),
        "{alerts:?}"
    );
    // The last exported byte counter of a host port is 4 x the simulator's last sampled
    // port_xmit_data (words), under node_exporter's name with a host label.
    let series = std::fs::read_to_string(dir.path().join("counters_series.csv")).unwrap();
    let words: f64 = series
        .lines()
        .rfind(|l| l.contains(",h0/mlx5_0/1,port_xmit_data,"))
        .unwrap()
        .rsplit(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let point = v["final"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["metric"]["name"] == "node_infiniband_port_data_transmitted_bytes_total"
                && p["metric"]["labels"][0] == serde_json::json!(["host", "h0"])
        })
        .expect("h0's byte counter");
    assert_eq!(point["value"].as_f64().unwrap(), words * 4.0);
}

#[test]
fn history_survives_kill_9_of_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.sqlite");
    let procfs = root().join("crates/xirang-host/test_data/sysfs/procfs");
    for attempt in 0..3u64 {
        let port = free_port();
        let mut agent = Guard(
            Command::new(env!("CARGO_BIN_EXE_xirang"))
                .args([
                    "monitor",
                    "--root",
                    procfs.to_str().unwrap(),
                    "--interval",
                    "100ms",
                ])
                .args([
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--history",
                    history.to_str().unwrap(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_ready(port, "the agent");
        std::thread::sleep(Duration::from_millis(700 + 300 * attempt));
        // A round visible on /metrics was committed to history before it was published.
        let body = get(&format!("http://127.0.0.1:{port}/metrics")).unwrap();
        let line = body
            .lines()
            .find(|l| l.starts_with("node_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_0\""))
            .unwrap();
        let published_ms: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        agent.0.kill().unwrap();
        agent.0.wait().unwrap();
        let (json, _) = run_expect(
            &[
                "monitor",
                "query",
                "--history",
                history.to_str().unwrap(),
                "--since",
                "1h",
                "--counter",
                "node_infiniband_port_data_transmitted_bytes_total",
                "--json",
            ],
            0,
        );
        let windows: serde_json::Value = serde_json::from_str(&json).unwrap();
        let w = windows
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["key"]["labels"].to_string().contains("mlx5_0"))
            .expect("mlx5_0's series");
        let last_ms = w["points"].as_array().unwrap().last().unwrap()["ts_ms"]
            .as_i64()
            .unwrap();
        assert!(
            last_ms >= published_ms,
            "attempt {attempt}: history ends at {last_ms}, /metrics showed {published_ms}"
        );
        assert_eq!(
            w["points"].as_array().unwrap().last().unwrap()["value"].as_f64(),
            Some(11523046035392.0)
        );
    }
}

#[test]
fn a_recorded_snapshot_series_replays_as_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    let snaps = dir.path().join("snaps");
    let p = "sys/class/infiniband/mlx5_0/ports/1";
    write(&host, &format!("{p}/state"), "4: ACTIVE\n");
    write(&host, &format!("{p}/phys_state"), "5: LinkUp\n");
    for (i, symbol_errors) in [0u64, 40, 90].iter().enumerate() {
        write(
            &host,
            &format!("{p}/counters/symbol_error"),
            &format!("{symbol_errors}\n"),
        );
        write(
            &host,
            &format!("{p}/counters/port_xmit_data"),
            &format!("{}\n", 1000 * i),
        );
        let out = snaps.join(format!("h1-{i}.tar.gz"));
        run_expect(
            &[
                "host",
                "snapshot",
                "--root",
                host.to_str().unwrap(),
                "--no-commands",
                "--out",
                out.to_str().unwrap(),
            ],
            0,
        );
        if i < 2 {
            // Manifests record capture time in whole seconds.
            std::thread::sleep(Duration::from_millis(1100));
        }
    }
    let (json, _) = run_expect(&["monitor", "--replay", snaps.to_str().unwrap(), "--json"], 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["rounds"], 3);
    let alerts = v["alerts"].as_array().unwrap();
    assert!(
        alerts.iter().any(|a| a["alert"]["rule"] == "link_errors_rising"),
        "{alerts:?}"
    );
    let total = v["final"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metric"]["name"] == "node_infiniband_symbol_error_total")
        .unwrap()["value"]
        .as_f64();
    assert_eq!(total, Some(90.0));
}

/// Runs a command that must succeed (the test's certificate tooling).
fn must(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// EC P-256 key options for `openssl req`.
const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A test CA in `dir`, and a server certificate for 127.0.0.1/localhost signed by it:
/// (CA certificate, server certificate, server key).
fn make_certs(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let p = |n: &str| dir.join(n);
    must(Command::new("openssl").args(["req", "-x509"]).args(EC_KEY).args([
        "-keyout",
        p("ca.key").to_str().unwrap(),
        "-out",
        p("ca.crt").to_str().unwrap(),
        "-days",
        "2",
        "-subj",
        "/CN=xirang test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]));
    let (crt, key) = issue_cert(
        dir,
        "server",
        "/CN=localhost",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    );
    (p("ca.crt"), crt, key)
}

/// A client certificate signed by `make_certs`'s CA in `dir`: (certificate, key).
fn make_client_cert(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    issue_cert(
        dir,
        "client",
        "/CN=prometheus",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
}

/// A key and a certificate `NAME.crt` for `subject` with the extensions `ext`, signed by
/// the CA `make_certs` wrote in `dir`: (certificate, key).
fn issue_cert(dir: &Path, name: &str, subject: &str, ext: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let p = |suffix: &str| dir.join(format!("{name}.{suffix}"));
    must(Command::new("openssl").args(["req"]).args(EC_KEY).args([
        "-keyout",
        p("key").to_str().unwrap(),
        "-out",
        p("csr").to_str().unwrap(),
        "-subj",
        subject,
    ]));
    std::fs::write(p("ext"), ext).unwrap();
    must(Command::new("openssl").args([
        "x509",
        "-req",
        "-in",
        p("csr").to_str().unwrap(),
        "-CA",
        dir.join("ca.crt").to_str().unwrap(),
        "-CAkey",
        dir.join("ca.key").to_str().unwrap(),
        "-CAcreateserial",
        "-out",
        p("crt").to_str().unwrap(),
        "-days",
        "2",
        "-extfile",
        p("ext").to_str().unwrap(),
    ]));
    (p("crt"), p("key"))
}

/// `client_auth_type: RequireAndVerifyClientCert`: a client without a certificate signed
/// by `client_ca_file` is refused at the handshake; one with it is served. Relative file
/// names are read beside the web config.
#[test]
fn required_client_certificates_are_verified() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, _, _) = make_certs(dir.path());
    let (client_cert, client_key) = make_client_cert(dir.path());
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    )
    .unwrap();
    let procfs = root().join("crates/xirang-host/test_data/sysfs/procfs");
    let port = free_port();
    let _agent = Guard(
        Command::new(env!("CARGO_BIN_EXE_xirang"))
            .args(["monitor", "--root", procfs.to_str().unwrap(), "--interval", "1s"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--web-config", web.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("https://127.0.0.1:{port}/metrics");
    let ca_s = ca.to_str().unwrap();
    let with_cert = [
        "--cacert",
        ca_s,
        "--cert",
        client_cert.to_str().unwrap(),
        "--key",
        client_key.to_str().unwrap(),
    ];
    let t0 = Instant::now();
    while curl(&with_cert, &url) != (true, "200".into()) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the agent did not answer at {url}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, code) = curl(&["--cacert", ca_s], &url);
    assert!(
        !ok && code != "200",
        "served without a client certificate: {code}"
    );
    assert_eq!(curl(&with_cert, &url), (true, "200".into()));
}

/// `curl` of a URL: its exit status and the HTTP status it printed.
fn curl(args: &[&str], url: &str) -> (bool, String) {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl is not installed: scripts/install-test-deps.sh installs it");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// bcrypt's lowest cost: the test's hash verifies in about a millisecond.
const TEST_BCRYPT_COST: u32 = 4;

/// Issue 25 point 3: the agent behind TLS and basic auth from an exporter-toolkit web
/// config, scraped by a real Prometheus over https with basic auth; requests without or
/// with wrong credentials get 401, plain HTTP gets nothing, and the server survives it.
#[test]
fn prometheus_scrapes_the_agent_over_tls_with_basic_auth() {
    let _turn = live_shared();
    let prometheus = prometheus_binary();
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    port_tree(&host);
    write_counters(&host, 0.0);
    let (ca, cert, key) = make_certs(dir.path());
    let hash = bcrypt::hash("scrape-secret", TEST_BCRYPT_COST).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  min_version: TLS12\nbasic_auth_users:\n  prom: '{hash}'\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let _agent = Guard(
        Command::new(env!("CARGO_BIN_EXE_xirang"))
            .args(["monitor", "--root", host.to_str().unwrap(), "--interval", "1s"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--web.config.file", web.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("https://127.0.0.1:{port}/metrics");
    let ca_s = ca.to_str().unwrap();
    let t0 = Instant::now();
    while curl(&["--cacert", ca_s, "-u", "prom:scrape-secret"], &url) != (true, "200".into()) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the agent did not answer at {url}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(curl(&["--cacert", ca_s], &url), (true, "401".into()));
    assert_eq!(
        curl(&["--cacert", ca_s, "-u", "prom:wrong"], &url),
        (true, "401".into())
    );
    assert_eq!(
        curl(&["--cacert", ca_s, "-u", "nobody:scrape-secret"], &url),
        (true, "401".into())
    );
    // Every path is protected, as in node_exporter.
    assert_eq!(
        curl(&["--cacert", ca_s], &format!("https://127.0.0.1:{port}/healthz")),
        (true, "401".into())
    );
    assert_eq!(
        curl(
            &["--cacert", ca_s],
            &format!("https://127.0.0.1:{port}/no-such-path")
        ),
        (true, "401".into())
    );
    let o = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--cacert",
            ca_s,
        ])
        .arg(&url)
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&o.stdout).to_lowercase();
    assert!(head.contains("www-authenticate: basic"), "{head}");
    // Plain HTTP gets no answer, and the failed handshake does not stop the server.
    let (ok, code) = curl(&[], &format!("http://127.0.0.1:{port}/metrics"));
    assert!(
        !ok && code != "200" && code != "401",
        "plain HTTP answered {code}"
    );
    // A client that does not trust the CA is refused at the handshake.
    assert!(!curl(&[], &url).0);
    assert_eq!(
        curl(&["--cacert", ca_s, "-u", "prom:scrape-secret"], &url),
        (true, "200".into())
    );

    let (_prom, prom_port) = start_prometheus_with(
        prometheus,
        dir.path(),
        &format!(
            "  - job_name: xirang-tls\n    scheme: https\n    tls_config:\n      ca_file: {ca_s}\n    basic_auth:\n      username: prom\n      password: scrape-secret\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    );
    let value = |q: &str| -> Option<f64> {
        let enc = q
            .replace('{', "%7B")
            .replace('}', "%7D")
            .replace('"', "%22")
            .replace('=', "%3D");
        let body = get(&format!("http://127.0.0.1:{prom_port}/api/v1/query?query={enc}"))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    let t0 = Instant::now();
    loop {
        let up = value("up{job=\"xirang-tls\"}");
        let series = value("count(node_infiniband_port_data_transmitted_bytes_total{job=\"xirang-tls\"})");
        if up == Some(1.0) && series.is_some_and(|n| n >= 1.0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "Prometheus did not scrape the agent over TLS: up={up:?}, series={series:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A non-loopback --listen needs a web config, or --insecure-listen.
#[test]
fn a_non_loopback_listen_needs_a_web_config_or_insecure_listen() {
    let procfs = root().join("crates/xirang-host/test_data/sysfs/procfs");
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let (_, err) = run_expect(
        &["monitor", "--root", procfs.to_str().unwrap(), "--listen", &listen],
        2,
    );
    assert!(
        err.contains("not a loopback address")
            && err.contains("--web-config")
            && err.contains("--insecure-listen"),
        "{err}"
    );
    // A web config that protects nothing does not count.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("web.yml");
    std::fs::write(&empty, "").unwrap();
    let (_, err) = run_expect(
        &[
            "monitor",
            "--root",
            procfs.to_str().unwrap(),
            "--listen",
            &listen,
            "--web-config",
            empty.to_str().unwrap(),
        ],
        2,
    );
    assert!(err.contains("neither TLS nor basic authentication"), "{err}");
    // A refused key stops the agent with the file and the key path.
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "tls_server_config:\n  cert_file: c\n  key_file: k\n  cipher_suites: [x]\n",
    )
    .unwrap();
    let (_, err) = run_expect(&["monitor", "--web-config", bad.to_str().unwrap()], 1);
    assert!(
        err.contains(&format!("{}: tls_server_config.cipher_suites", bad.display()))
            && err.contains("not supported"),
        "{err}"
    );
    let _agent = Guard(
        Command::new(env!("CARGO_BIN_EXE_xirang"))
            .args(["monitor", "--root", procfs.to_str().unwrap(), "--interval", "1s"])
            .args(["--listen", &listen, "--insecure-listen"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(
        &format!("http://127.0.0.1:{port}/metrics"),
        "the agent with --insecure-listen",
    );
}

/// The shipped scrape configuration for rollouts is one Prometheus accepts.
#[test]
fn the_shipped_rollout_scrape_configuration_is_valid() {
    let promtool = std::path::Path::new(prometheus_binary()).with_file_name("promtool");
    let o = Command::new(&promtool)
        .args(["check", "config"])
        .arg(root().join("monitoring/prometheus-rollout.yml"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/test.sh installs it with `prometheus`)",
                promtool.display()
            )
        });
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `--twin`'s inputs: a missing inventory, an inventory whose hosts the scenario does
/// not name, and flags that need the twin or a replay.
#[test]
fn the_twin_refuses_what_it_cannot_play() {
    let twin = root().join("crates/xirang-rollout/test_data/twin/fleet-twin.toml");
    let twin = twin.to_str().unwrap();
    let (_, err) = run_expect(&["monitor", "--twin", twin, "--inventory", "no/such/inv"], 1);
    assert!(err.contains("--inventory no/such/inv"), "{err}");
    // A run without samples would be served in steps.
    let other = root().join("crates/xirang-calibrate/test_data/twin.toml");
    let inv = root().join("crates/xirang-audit/test_data/cluster");
    let twin_of = |scenario: &Path| {
        run_expect(
            &[
                "monitor",
                "--twin",
                scenario.to_str().unwrap(),
                "--inventory",
                inv.to_str().unwrap(),
            ],
            1,
        )
        .1
    };
    let err = twin_of(&other);
    assert!(err.contains("sample_interval_us"), "{err}");
    // The calibration twin names h0..h7 under leaf0/leaf1; the fixture cluster h1..h8.
    let dir = tempfile::tempdir().unwrap();
    let sampled = dir.path().join("twin.toml");
    let text = std::fs::read_to_string(&other).unwrap();
    assert!(
        text.contains("[run]\n"),
        "the calibration twin has a [run] section"
    );
    std::fs::write(
        &sampled,
        text.replace("[run]\n", "[run]\nsample_interval_us = 100\n"),
    )
    .unwrap();
    let err = twin_of(&sampled);
    assert!(err.contains("the inventory's knobs"), "{err}");
    assert!(
        err.contains("h8/mlx5_0") || err.contains("leaf2"),
        "names what does not fit: {err}"
    );
    let (_, err) = run_expect(&["monitor", "--twin", twin], 2);
    assert!(err.contains("--inventory"), "{err}");
    let (_, err) = run_expect(&["monitor", "--dilation", "10"], 2);
    assert!(err.contains("--live") || err.contains("--twin"), "{err}");
}

/// `monitor --nccl-inspector DIR` beside a host's own counters: the records a job's
/// processes keep appending are served as the Inspector's series.
#[test]
fn the_agent_serves_nccl_inspector_records_beside_the_hosts_counters() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    port_tree(&host);
    let ins = dir.path().join("nccl-inspector-77");
    std::fs::create_dir(&ins).unwrap();
    let rec = std::fs::read_to_string(
        root().join("crates/xirang-monitor/test_data/nccl-inspector/readme-json-coll-record.json"),
    )
    .unwrap();
    let line =
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(&rec).unwrap()).unwrap() + "\n";
    let (_agent, port) = start_agent_with(&host, &["--nccl-inspector", ins.to_str().unwrap()]);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let want = r#"nccl_collective_exec_time_microseconds{version="v5.1",slurm_job_id="77",node="example-hostname",gpu="unknown",comm_name="unknown",n_nodes="1",nranks="8",collective="AllReduce",message_size="16-17GB",algo_proto="unknown"} 61974"#;
    let t0 = Instant::now();
    loop {
        // The job keeps finishing collectives.
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(ins.join("example-hostname-pid1639453.log"))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
        let m = get(&url).unwrap_or_default();
        if m.contains(want) && m.contains("node_infiniband_state_id") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{want} not served:\n{m}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `monitor --nccl-ras`: a job's RAS server (played here) says a process died; the
/// agent serves the node's dead processes and its default rule fires on them.
#[test]
fn a_dead_process_from_nccl_ras_fires_the_agents_alert() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    port_tree(&host);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ras = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        for answer in ["SERVER PROTOCOL 2\n", "OK\n"] {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            w.write_all(answer.as_bytes()).unwrap();
        }
        w.write_all(
            b"[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1\n",
        )
        .unwrap();
        std::thread::sleep(Duration::from_secs(60));
    });
    let (_agent, port) = start_agent_with(&host, &["--nccl-ras", &ras]);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let t0 = Instant::now();
    loop {
        let m = get(&url).unwrap_or_default();
        if m.contains(r#"xirang_nccl_ras_dead_processes{node="172.16.64.245"} 1"#)
            && m.contains(r#"xirang_alert{rule="nccl_ras_process_dead",entity="node=172.16.64.245",severity="critical",layer="application"} 1"#)
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no RAS alert served:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
