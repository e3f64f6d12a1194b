//! `xirang monitor bench`: one sampling round and one `/metrics` render over a synthetic
//! host with 8 NICs of about 150 counters each, the agent's resident memory, and the
//! scrape time of the agent against Debian's `prometheus-node-exporter` (infiniband
//! collector, `--path.sysfs` on the same tree) in the same run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use xirang_host::tree::DirTree;
use xirang_monitor::collect::{Collector, Source};
use xirang_monitor::expose;

use crate::Outcome;
use crate::cli::MonitorBenchArgs;
use crate::cmd::{out, table};

/// PMA `counters/` files of one port (docs/reference/linux-rdma-sysfs.md §1.2).
const PMA: &[&str] = &[
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
];
/// mlx5 `hw_counters/` files of one port (docs/reference/linux-rdma-sysfs.md §1.3).
const HW: &[&str] = &[
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
];
/// mlx5 `ethtool -S` physical-port counters (docs/reference/linux-rdma-sysfs.md §2.1).
const ETHTOOL_PHY: &[&str] = &[
    "rx_discards_phy",
    "tx_discards_phy",
    "rx_out_of_buffer",
    "rx_crc_errors_phy",
    "rx_symbol_err_phy",
    "rx_pcs_symbol_err_phy",
    "rx_corrected_bits_phy",
    "rx_oversize_pkts_phy",
    "link_down_events_phy",
    "rx_pause_ctrl_phy",
    "tx_pause_ctrl_phy",
    "tx_pause_storm_warning_events",
    "tx_pause_storm_error_events",
    "rx_buffer_passed_thres_phy",
    "rx_pci_signal_integrity",
    "tx_pci_signal_integrity",
    "outbound_pci_buffer_overflow",
    "dev_out_of_buffer",
    "rx_bytes_phy",
    "tx_bytes_phy",
];

/// Writes the synthetic host; returns the number of counters per NIC.
fn make_host(root: &Path, nics: usize) -> Result<usize> {
    let w = |rel: String, text: String| -> Result<()> {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().context("path has a parent")?)?;
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    let mut per_nic = 0;
    for i in 0..nics {
        let dev = format!("mlx5_{i}");
        let bus = 0x18 + i;
        let bdf = format!("0000:{bus:02x}:00.0");
        let pci = format!("sys/devices/pci0000:{bus:02x}/{bdf}");
        for (f, v) in [
            ("class", "0x020000"),
            ("vendor", "0x15b3"),
            ("device", "0x1021"),
            ("current_link_speed", "32.0 GT/s PCIe"),
            ("max_link_speed", "32.0 GT/s PCIe"),
            ("current_link_width", "16"),
            ("max_link_width", "16"),
            ("numa_node", "0"),
        ] {
            w(format!("{pci}/{f}"), format!("{v}\n"))?;
        }
        let ib = format!("sys/class/infiniband/{dev}");
        std::fs::create_dir_all(root.join(&ib))?;
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:{bus:02x}/{bdf}"),
            root.join(format!("{ib}/device")),
        )?;
        for (f, v) in [
            ("fw_ver", "28.39.2048"),
            ("board_id", "MT_0000000838"),
            ("hca_type", "MT4129"),
        ] {
            w(format!("{ib}/{f}"), format!("{v}\n"))?;
        }
        let port = format!("{ib}/ports/1");
        for (f, v) in [
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "400 Gb/sec (4X NDR)"),
            ("link_layer", "Ethernet"),
        ] {
            w(format!("{port}/{f}"), format!("{v}\n"))?;
        }
        for (k, c) in PMA.iter().enumerate() {
            w(
                format!("{port}/counters/{c}"),
                format!("{}\n", 1_000_000 * (k as u64 + 1)),
            )?;
        }
        for (k, c) in HW.iter().enumerate() {
            w(
                format!("{port}/hw_counters/{c}"),
                format!(
                    "{}\n",
                    if *c == "lifespan" {
                        10
                    } else {
                        1000 * (k as u64 + 1)
                    }
                ),
            )?;
        }
        let ifname = format!("ens{}np0", i + 1);
        let nd = format!("sys/class/net/{ifname}");
        std::fs::create_dir_all(root.join(&nd))?;
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:{bus:02x}/{bdf}"),
            root.join(format!("{nd}/device")),
        )?;
        w(format!("{nd}/operstate"), "up\n".into())?;
        w(format!("{nd}/carrier_changes"), "2\n".into())?;
        let mut eth = String::from("NIC statistics:\n");
        let mut n_eth = 0;
        for p in 0..8 {
            for what in ["bytes", "packets", "pause", "pause_duration", "pause_transition"] {
                eth.push_str(&format!("     rx_prio{p}_{what}: {}\n", 12345 * (p + 1)));
                n_eth += 1;
            }
            for what in ["bytes", "packets", "pause", "pause_duration"] {
                eth.push_str(&format!("     tx_prio{p}_{what}: {}\n", 23456 * (p + 1)));
                n_eth += 1;
            }
        }
        for c in ETHTOOL_PHY {
            eth.push_str(&format!("     {c}: 0\n"));
            n_eth += 1;
        }
        w(format!("commands/ethtool-S-{ifname}.txt"), eth)?;
        per_nic = PMA.len() + HW.len() + n_eth + 1;
    }
    Ok(per_nic)
}

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One HTTP GET of /metrics; returns the body length.
fn scrape(addr: SocketAddr) -> Result<usize> {
    let mut s = TcpStream::connect(addr)?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    anyhow::ensure!(body.starts_with(b"HTTP/1.1 200"), "scrape of {addr} failed");
    Ok(body.len())
}

fn wait_ready(addr: SocketAddr) -> Result<()> {
    let t0 = Instant::now();
    while scrape(addr).is_err() {
        anyhow::ensure!(t0.elapsed() < Duration::from_secs(20), "{addr} did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The agent's in-process figures, seconds: a sampling round with files kept open and
/// opened each time, and a `/metrics` render, each as (median, best).
struct InProcess {
    round: (f64, f64),
    plain: (f64, f64),
    render: (f64, f64),
    points: usize,
}

/// Scrapes over HTTP, seconds, with the last reply's size, and peak resident memory, KiB,
/// of the agent and of node_exporter (None: not installed).
struct OverHttp {
    ours: Vec<f64>,
    ours_bytes: usize,
    theirs: Vec<f64>,
    theirs_bytes: usize,
    agent_rss: Option<u64>,
    ne_rss: Option<u64>,
}

pub(crate) fn run(a: &MonitorBenchArgs) -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let per_nic = make_host(dir.path(), a.nics)?;
    let ip = in_process(a, dir.path());
    let http = over_http(a, dir.path())?;
    out(&render(a, per_nic, &ip, http))?;
    Ok(Outcome::Clean)
}

fn in_process(a: &MonitorBenchArgs, dir: &Path) -> InProcess {
    // In-process: rounds and renders after a warm-up round, reading files the plain way
    // (open, read, close: what a fixture tree gets) and keeping them open (what a live
    // sysfs gets, see DirTree::for_sampling).
    let timed = |tree: DirTree| {
        let mut c = Collector::new(
            Source::Host {
                tree: Box::new(tree),
                run_ethtool: false,
            },
            None,
        );
        let mut rounds = Vec::new();
        let mut renders = Vec::new();
        let mut last = c.round(1);
        for i in 0..a.rounds {
            let t = Instant::now();
            last = c.round(2 + i as u64 * 1_000_000_000);
            rounds.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let text = expose::render_round_stamped(&last, &[], false);
            renders.push(t.elapsed().as_secs_f64());
            std::hint::black_box(text);
        }
        (rounds, renders, last.points.len())
    };
    let (mut rounds_plain, _, _) = timed(DirTree::new(dir));
    let (mut rounds, mut renders, points) = timed(DirTree::keeping_files_open(dir));
    let best = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let (round_best, render_best, plain_best) = (best(&rounds), best(&renders), best(&rounds_plain));
    let (round_med, render_med, plain_med) = (
        median(&mut rounds),
        median(&mut renders),
        median(&mut rounds_plain),
    );
    InProcess {
        round: (round_med, round_best),
        plain: (plain_med, plain_best),
        render: (render_med, render_best),
        points,
    }
}

fn over_http(a: &MonitorBenchArgs, dir: &Path) -> Result<OverHttp> {
    // Over HTTP: the agent and node_exporter on the same tree, scraped alternately.
    let exe = std::env::current_exe()?;
    let agent_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let agent = Guard(
        Command::new(exe)
            .args(["monitor", "--root"])
            .arg(dir)
            .args(["--interval", "1s", "--listen", &agent_addr.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_ready(agent_addr)?;
    let ne_bin = [
        "/usr/bin/prometheus-node-exporter",
        "/usr/local/bin/node_exporter",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists());
    let ne = match ne_bin {
        Some(bin) => {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
            let g = Guard(
                Command::new(bin)
                    .arg(format!("--path.sysfs={}", dir.join("sys").display()))
                    .args(["--collector.disable-defaults", "--collector.infiniband"])
                    .arg(format!("--web.listen-address={addr}"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?,
            );
            wait_ready(addr)?;
            Some((g, addr))
        }
        None => None,
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_bytes, mut theirs_bytes) = (0, 0);
    for _ in 0..a.scrapes {
        let t = Instant::now();
        ours_bytes = scrape(agent_addr)?;
        ours.push(t.elapsed().as_secs_f64());
        if let Some((_, addr)) = &ne {
            let t = Instant::now();
            theirs_bytes = scrape(*addr)?;
            theirs.push(t.elapsed().as_secs_f64());
        }
    }
    let agent_rss = rss_kib(agent.0.id(), "VmHWM:");
    let ne_rss = ne.as_ref().and_then(|(g, _)| rss_kib(g.0.id(), "VmHWM:"));
    Ok(OverHttp {
        ours,
        ours_bytes,
        theirs,
        theirs_bytes,
        agent_rss,
        ne_rss,
    })
}

/// The table, each figure beside its target and node_exporter's from the same run.
fn render(a: &MonitorBenchArgs, per_nic: usize, ip: &InProcess, http: OverHttp) -> String {
    let InProcess {
        round: (round_med, round_best),
        plain: (plain_med, plain_best),
        render: (render_med, render_best),
        points,
    } = *ip;
    let OverHttp {
        mut ours,
        ours_bytes,
        mut theirs,
        theirs_bytes,
        agent_rss,
        ne_rss,
    } = http;
    let ms = |s: f64| format!("{:.3}", s * 1e3);
    let mut t = table(&["measure", "xirang", "target", "node_exporter (same run)"]);
    t.add_row(vec![
        format!(
            "sampling round, {} NICs x {per_nic} counters, files kept open (median / best ms)",
            a.nics
        ),
        format!("{} / {}", ms(round_med), ms(round_best)),
        "< 1 ms".into(),
        "-".into(),
    ]);
    t.add_row(vec![
        "sampling round, files opened each time (median / best ms)".into(),
        format!("{} / {}", ms(plain_med), ms(plain_best)),
        "-".into(),
        "-".into(),
    ]);
    t.add_row(vec![
        format!("/metrics render, {points} samples (median / best ms)"),
        format!("{} / {}", ms(render_med), ms(render_best)),
        "< 2 ms".into(),
        "-".into(),
    ]);
    t.add_row(vec![
        format!("HTTP scrape of /metrics, median of {} (ms)", a.scrapes),
        format!("{} ({ours_bytes} B)", ms(median(&mut ours))),
        "-".into(),
        if theirs.is_empty() {
            "not installed".into()
        } else {
            format!("{} ({theirs_bytes} B)", ms(median(&mut theirs)))
        },
    ]);
    t.add_row(vec![
        "peak resident memory (MiB)".into(),
        agent_rss.map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
        "< 30 MiB".into(),
        ne_rss.map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
    ]);
    format!(
        "{t}\nnode_exporter samples sysfs at each scrape (infiniband collector only); the agent samples on its own interval and serves the last round.\n"
    )
}
