//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Xirang: RDMA fabric tuning and diagnosis for GPU clusters.
///
/// Exit status: 0 when the command ran clean, 1 when it found problems or failed,
/// 2 on a usage error.
#[derive(Debug, Parser)]
#[command(name = "xirang", version, about, long_about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Scenario files: check them, expand generators into explicit lists.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Topology figures and drawings.
    #[command(subcommand)]
    Topo(TopoCmd),
    /// Simulate a scenario packet by packet; write FCTs, counters and time series.
    Sim(SimArgs),
    /// Measure simulator speed on the reference scenarios (wall time, events/s,
    /// packet-hops/s, memory), each in a fresh process, against the plain-heap engine.
    Bench(BenchArgs),
    /// NCCL: check nccl-tests results against the cost model; advise settings.
    #[command(subcommand)]
    Nccl(NcclCmd),
    /// Planners built on the collective cost model.
    #[command(subcommand)]
    Plan(PlanCmd),
    /// Fit a scenario's workload (offered load per class, request rates, the share of
    /// traffic crossing the spines) so the simulated counters match a fabric's observed
    /// ones: link utilisation, ECN-marked ratio and PFC per tier, CNP rate, and the
    /// applications' request p99 and collective time when exported. Writes the
    /// calibrated scenario and the observed-vs-simulated table; exit status 1, writing
    /// nothing, when a figure stays outside the tolerance.
    Calibrate(CalibrateArgs),
    /// Search congestion-control, ECN and transport settings by application metrics in
    /// the simulator; report the gain over vendor defaults and write the configuration.
    Tune(TuneArgs),
    /// Read a host: its RDMA devices, netdevs, PCIe placement and congestion knobs, live or
    /// from a snapshot; capture a snapshot for offline audits.
    #[command(subcommand)]
    Host(HostCmd),
    /// Audit hosts, switches and their cabling layer by layer (physical, network,
    /// transport, application); exit status 1 when any finding is an error.
    Audit(AuditArgs),
    /// Monitoring agent: sample RDMA counters every interval, derive health signals,
    /// serve them to Prometheus on /metrics, keep local history, evaluate alert rules.
    Monitor(MonitorArgs),
    /// Diagnosis: say whether a slowdown is a NIC, a link, a switch or the application's
    /// configuration, with scope, advice and evidence, from counters (the monitor's
    /// history or Prometheus) or from nccl-tests logs (`diagnose nccl`). Exit status 1
    /// when a fault is found.
    Diagnose(DiagnoseArgs),
    /// NIC firmware rollout: plan canary and waves over the inventory, run them with
    /// validation gates (dry run unless --execute), state and audit log in SQLite.
    #[command(subcommand)]
    Rollout(RolloutCmd),
    /// Registered memory: the pre-registered buffer pool.
    #[command(subcommand)]
    Memreg(MemregCmd),
}

#[derive(Debug, Subcommand)]
pub(crate) enum MemregCmd {
    /// Time get+put pairs of the pool against malloc/free and a crossbeam ArrayQueue
    /// pool, on 1 and 2 threads, and registering per operation (mlock/munlock).
    Bench(MemregBenchArgs),
    /// The pool on real RDMA devices: one registered pool per device, RDMA WRITE and
    /// READ between pool buffers over an RC queue pair (every byte checked), the
    /// devices' packet counters before and after, and ibv_reg_mr per operation timed
    /// against a pool get+put. Needs libibverbs and two devices (or one, twice).
    Loopback(MemregLoopbackArgs),
    /// Size each NIC's registered region for a scenario's workloads: QPs x WR depth x
    /// buffer size per class (bounded by each connection's traffic), plus headroom;
    /// what it pins per host and in all, against the scenario's memory.region_bytes.
    /// Exits 1 when the configured region is too small, a workload could not be
    /// expanded (its traffic would be missing), or --register fails.
    Plan(MemregPlanArgs),
}

/// `xirang memreg plan`.
#[derive(Debug, Args)]
pub(crate) struct MemregPlanArgs {
    /// Scenario file.
    pub(crate) file: std::path::PathBuf,
    /// Run seed for the workloads' random choices (inference sizes, permutations).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Extra fraction on top of the computed need.
    #[arg(long, default_value_t = 0.25)]
    pub(crate) headroom: f64,
    /// Also map and register the busiest NIC's pool on this machine (verbs on the first
    /// RDMA device, or --device; else host mlock), to show it can be pinned here.
    #[arg(long)]
    pub(crate) register: bool,
    /// RDMA device for --register.
    #[arg(long, requires = "register")]
    pub(crate) device: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang memreg loopback`.
#[derive(Debug, Args)]
pub(crate) struct MemregLoopbackArgs {
    /// The two devices, initiator first (the same name twice loops one device).
    #[arg(long, num_args = 2, value_names = ["DEV_A", "DEV_B"], required = true)]
    pub(crate) devices: Vec<String>,
    /// Port on each device.
    #[arg(long, default_value_t = 1)]
    pub(crate) port: u8,
    /// GID index on each device.
    #[arg(long, default_value_t = 0)]
    pub(crate) gid_index: u8,
    /// Path MTU, bytes (256 to 4096).
    #[arg(long, default_value_t = 1024)]
    pub(crate) mtu: u32,
    /// Rounds over every buffer class.
    #[arg(long, default_value_t = 8)]
    pub(crate) rounds: u32,
    /// Registrations timed (ibv_reg_mr + ibv_dereg_mr).
    #[arg(long, default_value_t = 200)]
    pub(crate) registrations: u32,
    /// Where the devices' hw_counters are.
    #[arg(long, default_value = "/sys/class/infiniband")]
    pub(crate) sysfs: std::path::PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang memreg bench`.
#[derive(Debug, Args)]
pub(crate) struct MemregBenchArgs {
    /// Buffer size, bytes.
    #[arg(long, default_value_t = 4096)]
    pub(crate) size: usize,
    /// Pairs per thread.
    #[arg(long, default_value_t = 10_000_000)]
    pub(crate) pairs: u64,
    /// Registrations timed.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) registrations: u64,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum RolloutCmd {
    /// Plan the waves: canaries covering every model/firmware combination, then stages
    /// under the failure-domain limits; every node once, with the reason.
    Plan(RolloutPlanArgs),
    /// Record a new rollout (the plan and policy) in the state file.
    Start(RolloutStartArgs),
    /// Where the rollout stands: waves, halts, failed gates with evidence.
    Status(RolloutStateArgs),
    /// Run the next wave: flash, then gates; halts at the first failed gate.
    Advance(RolloutRunArgs),
    /// Halt the rollout (recorded; `resume` lifts it).
    Halt(RolloutHaltArgs),
    /// Continue after a halt or an interruption (kill -9, reboot).
    Resume(RolloutResumeArgs),
    /// Put flashed NICs back on their previous firmware, latest wave first.
    Rollback(RolloutRollbackArgs),
    /// Print the append-only audit log.
    Log(RolloutStateArgs),
    /// Run a plan on a synthetic fleet where some upgraded nodes degrade: where does
    /// the rollout halt, and how many nodes were exposed?
    Simulate(RolloutSimArgs),
    /// Apply a SONiC config_db JSON Patch (a configuration's `sonic-TIER.patch.json`) to
    /// a saved config_db file, all or nothing, as `config apply-patch` does on the
    /// switch: to preview (and audit) a tier's patch before a rollout, or to stand in
    /// for a switch in a test bed.
    ApplyPatch(RolloutPatchArgs),
}

/// `xirang rollout apply-patch`.
#[derive(Debug, Args)]
pub(crate) struct RolloutPatchArgs {
    /// The switch's config_db JSON (`show runningconfiguration all` saved, or an
    /// inventory's switches/NAME.json).
    pub(crate) config_db: PathBuf,
    /// The JSON Patch (RFC 6902).
    pub(crate) patch: PathBuf,
    /// Write the result here (atomically) instead of printing it; may be CONFIG_DB itself.
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
}

/// Inventory and policy.
#[derive(Debug, Args)]
pub(crate) struct RolloutPlanArgs {
    /// Inventory directory: hosts/ (trees or snapshots), and optionally switches/,
    /// topology.toml (cabling), policy.toml (audit policy), fleet.toml (racks, jobs).
    #[arg(long)]
    pub(crate) inventory: PathBuf,
    /// Rollout policy (TOML): targets, stages, limits, gates, commands.
    #[arg(long)]
    pub(crate) policy: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang rollout start`.
#[derive(Debug, Args)]
pub(crate) struct RolloutStartArgs {
    #[command(flatten)]
    pub(crate) plan: RolloutPlanArgs,
    /// State file (SQLite) to create.
    #[arg(long, default_value = "rollout.sqlite")]
    pub(crate) state: PathBuf,
}

/// A state file.
#[derive(Debug, Args)]
pub(crate) struct RolloutStateArgs {
    /// State file (SQLite).
    #[arg(long, default_value = "rollout.sqlite")]
    pub(crate) state: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Commands that run things.
#[derive(Debug, Args)]
pub(crate) struct RolloutRunArgs {
    /// State file (SQLite).
    #[arg(long, default_value = "rollout.sqlite")]
    pub(crate) state: PathBuf,
    /// Really run the commands (without it: print what would run, change nothing).
    #[arg(long)]
    pub(crate) execute: bool,
    /// Seconds a command may run before it is killed (and counted as failed).
    #[arg(long, default_value_t = 3600)]
    pub(crate) command_timeout_s: u64,
    /// Seconds to wait for another executor (or its still-running command) holding the state.
    #[arg(long, default_value_t = 600)]
    pub(crate) lock_wait_s: u64,
}

/// `xirang rollout halt`.
#[derive(Debug, Args)]
pub(crate) struct RolloutHaltArgs {
    /// State file (SQLite).
    #[arg(long, default_value = "rollout.sqlite")]
    pub(crate) state: PathBuf,
    /// Why (recorded in the log).
    #[arg(long)]
    pub(crate) reason: String,
}

/// `xirang rollout resume`.
#[derive(Debug, Args)]
pub(crate) struct RolloutResumeArgs {
    #[command(flatten)]
    pub(crate) run: RolloutRunArgs,
    /// After a failed gate or flash: read the nodes again and re-evaluate.
    #[arg(long)]
    pub(crate) recheck: bool,
    /// Allow one more flash of this node's failed or interrupted NICs (repeatable).
    #[arg(long)]
    pub(crate) reflash: Vec<String>,
}

/// `xirang rollout rollback`.
#[derive(Debug, Args)]
pub(crate) struct RolloutRollbackArgs {
    #[command(flatten)]
    pub(crate) run: RolloutRunArgs,
    /// Only these nodes (repeatable); default every flashed NIC.
    #[arg(long)]
    pub(crate) node: Vec<String>,
}

/// `xirang rollout simulate`.
#[derive(Debug, Args)]
pub(crate) struct RolloutSimArgs {
    /// Nodes in the synthetic fleet.
    #[arg(long, default_value_t = 512)]
    pub(crate) nodes: usize,
    /// Nodes per rack.
    #[arg(long, default_value_t = 16)]
    pub(crate) rack_size: usize,
    /// Seed (fleet, bad nodes, benchmark noise).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Share of nodes that degrade once upgraded.
    #[arg(long, default_value_t = 0.02)]
    pub(crate) degrade_share: f64,
    /// Make this node degrade (repeatable; names are n0001, n0002, ...).
    #[arg(long)]
    pub(crate) degraded: Vec<String>,
    /// How bad nodes degrade: bandwidth (benchmark at 70 %), errors (symbol errors
    /// rising), stays-old (the new firmware does not stick), latency (request p99 30 %
    /// higher, which only a live gate sees; the built-in policy then has one).
    #[arg(long, default_value = "bandwidth")]
    pub(crate) degradation: String,
    /// Rollout policy (TOML) instead of the built-in one (its targets must name
    /// MT4125/MT4129 NICs to match the synthetic fleet).
    #[arg(long)]
    pub(crate) policy: Option<PathBuf>,
    /// Simulate over this inventory's fleet (its hosts, NICs and domains) instead of a
    /// synthetic one; needs --policy.
    #[arg(long, requires = "policy")]
    pub(crate) inventory: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang monitor`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(group(clap::ArgGroup::new("served_run").args(["live", "twin"]).multiple(true)))]
pub(crate) struct MonitorArgs {
    #[command(subcommand)]
    pub(crate) command: Option<MonitorCmd>,
    /// Read the host rooted here instead of `/` (a fixture or copied tree).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Address to serve /metrics and /healthz on (loopback by default).
    /// A non-loopback address needs --web-config (TLS and/or basic auth) or
    /// --insecure-listen.
    #[arg(long, default_value = "127.0.0.1:9316")]
    pub(crate) listen: std::net::SocketAddr,
    /// Web configuration file in the Prometheus exporter-toolkit format (node_exporter's
    /// --web.config.file): TLS (`tls_server_config`) and basic authentication
    /// (`basic_auth_users`, bcrypt hashes).
    #[arg(long, visible_alias = "web.config.file", value_name = "FILE")]
    pub(crate) web_config: Option<PathBuf>,
    /// Allow a non-loopback --listen without --web-config: anyone who reaches the port
    /// reads the host's metrics over plain HTTP.
    #[arg(long)]
    pub(crate) insecure_listen: bool,
    /// Sampling interval (e.g. 10s, 500ms, 1m).
    #[arg(long, default_value = "10s")]
    pub(crate) interval: String,
    /// Keep history in this SQLite file.
    #[arg(long)]
    pub(crate) history: Option<PathBuf>,
    /// Keep raw samples this long (e.g. 1d).
    #[arg(long, default_value = "1d")]
    pub(crate) raw_retention: String,
    /// Keep 1-minute roll-ups this long (e.g. 30d).
    #[arg(long, default_value = "30d")]
    pub(crate) minute_retention: String,
    /// Bound on the history file, in MiB.
    #[arg(long, default_value_t = 256)]
    pub(crate) history_max_mib: u64,
    /// Alert rules file (default: the shipped monitoring/alert-rules.toml).
    #[arg(long)]
    pub(crate) alerts: Option<PathBuf>,
    /// Do not run `ethtool -S` (captured `commands/ethtool-S-IF.txt` files are still read).
    #[arg(long)]
    pub(crate) no_ethtool: bool,
    /// Also publish node_exporter's pcidevice series (`node_pcidevice_*`) for every PCI
    /// function, and flag a downgraded link on any of them (off by default, as in
    /// node_exporter: hundreds of functions, a dozen files each per round).
    #[arg(long)]
    pub(crate) pcidevice: bool,
    /// Sample twice (one interval apart, so rates exist), print the metrics and exit
    /// (nothing is kept: not with --history).
    #[arg(long, conflicts_with = "history")]
    pub(crate) once: bool,
    /// Replay a `xirang sim --out` directory, or a directory of host snapshots taken over
    /// time, instead of sampling a host.
    #[arg(long, conflicts_with_all = ["root", "once"])]
    pub(crate) replay: Option<PathBuf>,
    /// With --replay of a simulator's output: serve the run on --listen as a live
    /// agent does, looping, instead of evaluating it at once (a digital twin for
    /// Prometheus, `xirang calibrate` and rollout gates).
    #[arg(long, requires = "replay", conflicts_with = "json")]
    pub(crate) live: bool,
    /// With --live or --twin: play the run this many times slower than simulated and multiply
    /// every counter by the same factor, so every rate is the simulated one (a run of
    /// 2 ms at 1000 lasts 2 s per pass).
    #[arg(long, default_value_t = 1000, requires = "served_run", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(crate) dilation: u64,
    /// With --live or --twin: under which names the training jobs' collective figures are
    /// served: Xirang's gauge `xirang_job_collective_seconds`, NCCL Inspector's series
    /// (`nccl_collective_exec_time_microseconds`, `nccl_bus_bandwidth_gbs`, one per rank's
    /// GPU, as jobs that load the Inspector plugin export them), or both.
    #[arg(long, value_enum, default_value = "both", requires = "served_run")]
    pub(crate) app_series: AppSeriesArg,
    /// Serve the simulator's run of this scenario as a live fleet (as --replay --live
    /// does) with the knobs the --inventory's hosts and switches hold (each NIC's DCQCN
    /// settings, each switch port's ECN profile), simulated again whenever they change:
    /// the digital twin a configuration rollout's live gates read. The scenario's
    /// topology names the inventory's hosts, NICs and switches (`xirang audit
    /// --emit-scenario` writes it), and its `[run]` sets `sample_interval_us`.
    #[arg(long, requires = "inventory", conflicts_with_all = ["root", "once", "replay", "json", "history"])]
    pub(crate) twin: Option<PathBuf>,
    /// With --twin: the inventory directory (hosts/, switches/, policy.toml) whose knobs
    /// the twin runs on, read again every second.
    #[arg(long, requires = "twin")]
    pub(crate) inventory: Option<PathBuf>,
    /// Read a SONiC switch's counters from its Redis instead of sampling a host (PFC
    /// frames and pause time per priority, queues' ECN marks, drops and watermarks, priority
    /// groups, the PFC watchdog), exported as the `xirang_switch_*` series a replayed
    /// simulation has: `redis://HOST[:PORT][/DB]` or `unix:///var/run/redis/redis.sock`
    /// (SONiC's default), with `?switch=NAME` instead of DEVICE_METADATA's hostname and
    /// `?namespace=NS` instead of its `asic_name`. Repeat it for each ASIC namespace of a
    /// multi-ASIC switch (one Redis each) or for several switches. Read only: watermarks are
    /// taken from the persistent and user tables and never cleared.
    #[arg(long, value_name = "URL", conflicts_with_all = ["root", "replay", "twin", "pcidevice"])]
    pub(crate) sonic: Vec<String>,
    /// Also read NCCL Inspector's JSON-lines files in this directory (`NCCL_INSPECTOR_DUMP_DIR`:
    /// `<host>-pid<pid>.log`, `.jsonl`) every round and export their records as the
    /// Inspector's own series (`nccl_collective_exec_time_microseconds`,
    /// `nccl_bus_bandwidth_gbs`), for a host whose node_exporter has no textfile collector.
    /// Files are read from where the last round stopped, a bounded amount per round; a
    /// replaced or truncated file is read again from its start.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["replay", "twin"])]
    pub(crate) nccl_inspector: Option<PathBuf>,
    /// Also follow a running job's NCCL RAS monitor events (`HOST[:PORT]`, port 28028:
    /// `localhost` on one of the job's nodes; NCCL 2.29 or later) and serve each node's dead
    /// and unresponsive job processes (`xirang_nccl_ras_dead_processes`,
    /// `xirang_nccl_ras_unresponsive_processes`) for the alert rules; a lost connection is
    /// a problem of the round and is made again the next.
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with_all = ["replay", "twin"])]
    pub(crate) nccl_ras: Option<String>,
    /// With --once or --replay: print JSON instead of the exposition text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--app-series`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum AppSeriesArg {
    /// `xirang_job_collective_seconds`.
    Xirang,
    /// NCCL Inspector's series.
    Inspector,
    /// Both.
    Both,
}

impl From<AppSeriesArg> for xirang_monitor::replay::AppSeries {
    fn from(a: AppSeriesArg) -> Self {
        match a {
            AppSeriesArg::Xirang => Self::Xirang,
            AppSeriesArg::Inspector => Self::Inspector,
            AppSeriesArg::Both => Self::Both,
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum MonitorCmd {
    /// Print recent history windows.
    Query(MonitorQueryArgs),
    /// Time a sampling round and a render over a synthetic 8-NIC host, the agent's memory,
    /// and its scrape time against prometheus-node-exporter on the same tree.
    Bench(MonitorBenchArgs),
}

/// `xirang monitor bench`.
#[derive(Debug, Args)]
pub(crate) struct MonitorBenchArgs {
    /// NICs in the synthetic host (1 to 64).
    #[arg(long, default_value_t = 8, value_parser = count::<1, 64>)]
    pub(crate) nics: usize,
    /// Rounds and renders timed in-process (1 to 1,000,000).
    #[arg(long, default_value_t = 200, value_parser = count::<1, 1_000_000>)]
    pub(crate) rounds: usize,
    /// HTTP scrapes of each exporter (1 to 100,000).
    #[arg(long, default_value_t = 100, value_parser = count::<1, 100_000>)]
    pub(crate) scrapes: usize,
}

/// `xirang monitor query`.
#[derive(Debug, Args)]
pub(crate) struct MonitorQueryArgs {
    /// History file written by the agent.
    #[arg(long)]
    pub(crate) history: PathBuf,
    /// How far back (e.g. 10m, 2h, 1d).
    #[arg(long, default_value = "10m")]
    pub(crate) since: String,
    /// Metric name, or a prefix ending in `*`.
    #[arg(long)]
    pub(crate) counter: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang calibrate`.
#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Scenario to calibrate (default: the built-in default scenario): its fabric names
    /// the switches and tiers the counters come from; its workloads are fitted.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// Read a Prometheus server scraping the agents (`http://host:9090`).
    #[arg(long, conflicts_with_all = ["history", "sim_out"])]
    pub(crate) prometheus: Option<String>,
    /// Read the monitoring agent's history (SQLite).
    #[arg(long, conflicts_with = "sim_out")]
    pub(crate) history: Option<PathBuf>,
    /// Read a recorded run (`xirang sim --out DIR`): its whole run is the window.
    #[arg(long)]
    pub(crate) sim_out: Option<PathBuf>,
    /// The window to read, back from now (`1h`, `30m`, `90s`).
    #[arg(long, default_value = "1h")]
    pub(crate) since: String,
    /// Where to write the calibrated scenario.
    #[arg(long, short, default_value = "calibrated.toml")]
    pub(crate) out: PathBuf,
    /// Largest relative residual accepted per figure (0.2: within 20 % of the observed
    /// value, or of the figure's noise floor when that is larger).
    #[arg(long, default_value_t = xirang_calibrate::DEFAULT_TOLERANCE, value_parser = share_01)]
    pub(crate) tolerance: f64,
    /// Fit only this parameter (key path, e.g.
    /// `workloads.inference.inference.requests_per_sec`); repeat for several. Default:
    /// every load, rate and tier-crossing share the workloads have.
    #[arg(long)]
    pub(crate) fit: Vec<String>,
    /// Seeds each candidate runs on, from the scenario's own (1 to 16).
    #[arg(long, default_value_t = 1, value_parser = count::<1, 16>)]
    pub(crate) seeds: usize,
    /// Most simulated runs (10 to 10,000).
    #[arg(long, default_value_t = xirang_calibrate::DEFAULT_MAX_RUNS, value_parser = count::<10, 10_000>)]
    pub(crate) max_runs: usize,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

fn share_01(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number, found `{s}`"))?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("expected a share in (0, 1], found {s}"))
    }
}

/// `xirang audit`.
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Directory of hosts: each subdirectory a host tree (`/` copy), each .tar.gz a snapshot.
    #[arg(long)]
    pub(crate) hosts: Option<PathBuf>,
    /// Directory of SONiC switch configurations: `<switch>.json` or `<switch>/config_db.json`.
    #[arg(long)]
    pub(crate) switches: Option<PathBuf>,
    /// Cabling file (TOML): which NIC plugs into which switch port, switch tiers.
    #[arg(long)]
    pub(crate) topology: Option<PathBuf>,
    /// Policy file (TOML): RoCE priority and DSCP, MTU, allowed firmware.
    #[arg(long)]
    pub(crate) policy: Option<PathBuf>,
    /// Print findings as JSON.
    #[arg(long, conflicts_with = "sarif")]
    pub(crate) json: bool,
    /// Print findings as SARIF 2.1.0.
    #[arg(long)]
    pub(crate) sarif: bool,
    /// Also write the audited fabric as a scenario file (explicit topology).
    #[arg(long)]
    pub(crate) emit_scenario: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum HostCmd {
    /// Print the inventory of a host (default: this machine's `/`).
    Show(HostShowArgs),
    /// Capture every file and tool output the audit needs into one .tar.gz archive.
    Snapshot(HostSnapshotArgs),
}

/// `xirang host show`.
#[derive(Debug, Args)]
pub(crate) struct HostShowArgs {
    /// Read the host rooted at this directory (a copied or fixture tree) instead of `/`.
    #[arg(long, conflicts_with = "snapshot")]
    pub(crate) root: Option<PathBuf>,
    /// Read a snapshot archive written by `xirang host snapshot`.
    #[arg(long)]
    pub(crate) snapshot: Option<PathBuf>,
    /// Print the inventory as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang host snapshot`.
#[derive(Debug, Args)]
pub(crate) struct HostSnapshotArgs {
    /// Archive to write (`.tar.gz`); written atomically.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Capture the host rooted at this directory instead of `/`.
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
    /// Do not run the tools (ethtool, ibv_devinfo, nvidia-smi, mlnx_qos, lspci).
    #[arg(long)]
    pub(crate) no_commands: bool,
}

/// `xirang tune`.
#[derive(Debug, Args)]
pub(crate) struct TuneArgs {
    /// Scenario file (default: the built-in default scenario).
    pub(crate) scenario: Option<PathBuf>,
    /// Candidate settings to try (default: the scenario's `tune.budget`, 96; at most 10,000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(xirang_fabric::tune::MAX_BUDGET)))]
    pub(crate) budget: Option<u32>,
    /// Wall-time budget of the search (`90s`, `10m`, `1h`): no bracket of candidates starts
    /// after it is spent; the ablation, held-out evaluation and report still run.
    #[arg(long)]
    pub(crate) time: Option<String>,
    /// Output directory (default: out/tune-<scenario name>).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Continue a killed tune from the trial log in the output directory.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Seed of the search (default: the scenario's `tune.seed`).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Run as one rank of an MPI job (`mpirun -np N xirang tune --mpi`): rank 0 searches
    /// and keeps the trial log, every rank simulates a share of each batch; the result is
    /// the single-process tune's. Needs a build with `--features mpi`.
    #[arg(long)]
    pub(crate) mpi: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCmd {
    /// DDP gradient buckets: iteration time and exposed communication for each bucket size,
    /// and the best one, for a model's backward pass (see models/*.toml).
    Overlap(OverlapArgs),
    /// Inference batching: the batch size and window that serve the most requests within a
    /// p99 SLO, comparing per-request, batched and sharded tensor-parallel collectives.
    Batching(BatchingArgs),
    /// LLM serving on the twin: for each decode batch size, the time per output token and
    /// time to first token of a serving scenario (`moe` and `kv_transfer` workloads),
    /// against SLOs, under the scenario's settings and, with `--settings`, another's.
    Serving(ServingArgs),
}

/// `xirang plan serving`.
#[derive(Debug, Args)]
pub(crate) struct ServingArgs {
    /// Serving scenario (scenarios/serving-moe.toml).
    pub(crate) scenario: PathBuf,
    /// Decode batch sizes to try: tokens per GPU of every `moe` workload (each 1 to 65,536).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128,256", value_parser = count::<1, 65_536>)]
    pub(crate) batches: Vec<usize>,
    /// SLO on the p99 time per output token (`50ms`, `800us`; absent: none).
    #[arg(long, value_parser = parse_duration_us)]
    pub(crate) tpot_p99: Option<f64>,
    /// SLO on the p99 time to first token (`2s`, `500ms`; absent: none).
    #[arg(long, value_parser = parse_duration_us)]
    pub(crate) ttft_p99: Option<f64>,
    /// A second scenario whose `[config]` is tried too (a tune's recommendation.toml).
    #[arg(long)]
    pub(crate) settings: Option<PathBuf>,
    /// Run seed (default: the scenario's).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang plan batching`.
#[derive(Debug, Args)]
pub(crate) struct BatchingArgs {
    /// Serving file (models/llama-70b-tp8-serving.toml).
    pub(crate) file: PathBuf,
    /// Scenario whose hosts run the tensor-parallel group (default: the built-in default).
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// Requests per simulated run (100 to 10,000,000: a p99 needs at least 100).
    #[arg(long, default_value_t = 20_000, value_parser = count::<100, 10_000_000>)]
    pub(crate) requests: usize,
    /// Seed of the arrival process.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang plan overlap`.
#[derive(Debug, Args)]
pub(crate) struct OverlapArgs {
    /// Model file: per-layer backward time and gradient bytes (models/transformer-7b.toml).
    pub(crate) file: PathBuf,
    /// Scenario whose fabric runs the AllReduce (default: the built-in default scenario).
    /// The data-parallel group is the hosts of its first collective workload, else all hosts.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// First bucket size, MiB (PyTorch DDP: 1).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) first_bucket_mib: f64,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum NcclCmd {
    /// Read an nccl-tests (or rccl-tests) log and compare every size with the cost model:
    /// flags sizes below 80% of the model and any '#wrong' > 0 (data corruption).
    Check(NcclCheckArgs),
    /// Write an NCCL environment file for a scenario (each setting with its reason) and
    /// print the model's AllReduce bus bandwidth per size and algorithm.
    Advise(NcclAdviseArgs),
    /// nccl-tests on the twin: run the scenario's collective at each size, each a fresh
    /// packet-level run, and print nccl-tests' own table (readable by `nccl check` and
    /// `diagnose nccl`). Exit status 1 when a size did not finish.
    Sweep(NcclSweepArgs),
}

/// `xirang nccl sweep`.
#[derive(Debug, Args)]
pub(crate) struct NcclSweepArgs {
    /// Scenario file (default: the built-in default scenario).
    pub(crate) scenario: Option<PathBuf>,
    /// The collective workload to run, when the scenario has several.
    #[arg(long)]
    pub(crate) workload: Option<String>,
    /// Smallest size, bytes (K, M, G: powers of 1024), as nccl-tests' -b.
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = parse_nccl_size)]
    pub(crate) min_bytes: u64,
    /// Largest size, as nccl-tests' -e.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_nccl_size)]
    pub(crate) max_bytes: u64,
    /// Multiply the size by this from one row to the next (nccl-tests' -f; 2 or more).
    #[arg(short = 'f', long = "stepfactor", value_parser = count::<2, 1024>)]
    pub(crate) step_factor: Option<usize>,
    /// Else add this many bytes (nccl-tests' -i).
    #[arg(short = 'i', long = "stepbytes", default_value = "1M", value_parser = parse_nccl_size)]
    pub(crate) step_bytes: u64,
    /// Run this operation instead of the workload's.
    #[arg(long, value_enum)]
    pub(crate) op: Option<SweepOpArg>,
    /// Force an algorithm (as NCCL_ALGO; default: the workload's, else NCCL's choice).
    #[arg(long, value_enum)]
    pub(crate) algo: Option<SweepAlgoArg>,
    /// Force a protocol (as NCCL_PROTO).
    #[arg(long, value_enum)]
    pub(crate) proto: Option<ProtoArg>,
    /// Keep the scenario's other workloads running beside the collective.
    #[arg(long)]
    pub(crate) with_background: bool,
    /// Untimed iterations before the timed ones (nccl-tests' -w; its default is 5, one
    /// here since every iteration is simulated packet by packet).
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 1, value_parser = count::<0, 1000>)]
    pub(crate) warmup_iters: usize,
    /// Timed iterations (nccl-tests' -n; its default is 20).
    #[arg(short = 'n', long = "iters", default_value_t = 1, value_parser = count::<1, 1000>)]
    pub(crate) iters: usize,
    /// Sizes simulated at once (default: the cores there are).
    #[arg(long, value_parser = count::<1, 1024>)]
    pub(crate) threads: Option<usize>,
    /// Print JSON: per size the time, algbw, busbw, what was simulated and the cost
    /// model's busbw.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the table to FILE (whole or not at all) instead of stdout.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub(crate) out: Option<std::path::PathBuf>,
}

/// Operations `nccl sweep --op` runs, as nccl-tests names its binaries.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum SweepOpArg {
    /// all_reduce_perf.
    AllReduce,
    /// all_gather_perf.
    AllGather,
    /// reduce_scatter_perf.
    ReduceScatter,
    /// alltoall_perf.
    Alltoall,
    /// broadcast_perf.
    Broadcast,
    /// sendrecv_perf.
    Sendrecv,
}

/// Algorithms `nccl sweep --algo` forces.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum SweepAlgoArg {
    /// Ring.
    Ring,
    /// Double binary tree (AllReduce).
    Tree,
    /// NVLink inside hosts, rings across them (AllReduce; not an NCCL algorithm).
    Hierarchical,
    /// Recursive halving-doubling (AllReduce; not an NCCL algorithm).
    HalvingDoubling,
}

/// A size as nccl-tests reads one: bytes, with an optional K, M or G (powers of 1024).
pub(crate) fn parse_nccl_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let max = xirang_fabric::limits::MAX_TRANSFER_BYTES;
    match digits.parse::<u64>().ok().and_then(|v| v.checked_mul(mult)) {
        Some(v) if (1..=max).contains(&v) => Ok(v),
        _ => Err(format!(
            "expected a size of 1 B to {max} B (a number with an optional K, M or G), found `{t}`"
        )),
    }
}

/// `xirang nccl advise`.
#[derive(Debug, Args)]
pub(crate) struct NcclAdviseArgs {
    /// Scenario file (default: the built-in default scenario).
    pub(crate) scenario: Option<PathBuf>,
    /// Where to write the environment file.
    #[arg(long, default_value = "nccl.env")]
    pub(crate) out: PathBuf,
    /// Print JSON instead (the file is still written).
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang nccl check`.
#[derive(Debug, Args)]
pub(crate) struct NcclCheckArgs {
    /// nccl-tests output (stdout of all_reduce_perf and friends; NCCL_DEBUG lines are fine).
    pub(crate) file: PathBuf,
    /// Scenario describing the hosts (NICs, link rates, NVLink); the log gives node and GPU
    /// counts and the GPU model.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// NICs per node, without --scenario.
    #[arg(long, conflicts_with = "scenario", default_value_t = 8)]
    pub(crate) nics: u32,
    /// NIC line rate, Gbit/s, without --scenario.
    #[arg(long, conflicts_with = "scenario", default_value_t = 400.0)]
    pub(crate) nic_gbps: f64,
    /// The collective, for logs that do not name their test.
    #[arg(long, value_enum)]
    pub(crate) collective: Option<CollArg>,
    /// Compare with this algorithm (as NCCL_ALGO would force) instead of the model's pick.
    #[arg(long, value_enum)]
    pub(crate) algo: Option<AlgoArg>,
    /// Protocol to go with --algo.
    #[arg(long, value_enum, default_value = "simple", requires = "algo")]
    pub(crate) proto: ProtoArg,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Collectives as nccl-tests names them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum CollArg {
    /// all_reduce_perf.
    AllReduce,
    /// all_gather_perf.
    AllGather,
    /// reduce_scatter_perf.
    ReduceScatter,
    /// alltoall_perf.
    Alltoall,
    /// broadcast_perf.
    Broadcast,
    /// sendrecv_perf.
    Sendrecv,
}

/// NCCL algorithms.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum AlgoArg {
    /// Ring.
    Ring,
    /// Double binary tree.
    Tree,
    /// NVLink SHARP (one node).
    Nvls,
    /// NVLink SHARP with a tree between nodes.
    Nvlstree,
}

/// NCCL protocols.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ProtoArg {
    /// LL.
    Ll,
    /// LL128.
    Ll128,
    /// Simple.
    Simple,
}

/// `xirang bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Scenario files (default: the incast, permutation and websearch reference scenarios).
    pub(crate) scenarios: Vec<PathBuf>,
    /// Runs per scenario and engine; the best and median are reported (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) runs: u32,
    /// Skip the plain-heap reference engine.
    #[arg(long)]
    pub(crate) no_reference: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Internal: measure one scenario with one engine in this process.
    #[arg(long, hide = true, value_parser = ["calendar", "heap", "exact", "ffwd"])]
    pub(crate) child: Option<String>,
    /// The scale benchmark instead: ring and tree AllReduce of 256 MiB on rail-optimized
    /// fabrics of scalable units from 128 GPUs up to --max-gpus, the classic
    /// rail fabric (one group, 8 spines) up to 1,024 GPUs, and 4 MB permutations on k = 8,
    /// 16 and 32 fat trees, each case in a fresh process (expect about an hour at the
    /// default sizes on two cores).
    #[arg(long, conflicts_with_all = ["scenarios", "no_reference"])]
    pub(crate) scale: bool,
    /// Largest fabric of --scale, in GPUs (128 to 131,072).
    #[arg(long, default_value_t = 16384, requires = "scale", value_parser = clap::value_parser!(u32).range(128..=131_072))]
    pub(crate) max_gpus: u32,
    /// Only the --scale, --parallel or --fast-forward cases whose name contains this text
    /// (e.g. `ring`, `perm`).
    #[arg(long)]
    pub(crate) only: Option<String>,
    /// A previous xirang binary to run the same --scale cases with, where it can read them
    /// (it needs `bench --child`; cases it cannot load are reported as such).
    #[arg(long, requires = "scale")]
    pub(crate) reference_binary: Option<PathBuf>,
    /// Print the --scale or --parallel table as markdown (for BENCHMARKS.md).
    #[arg(long)]
    pub(crate) markdown: bool,
    /// The parallel benchmark instead: the 1,024-GPU ring AllReduce (`ring-su-1024`), the
    /// k = 16 fat-tree permutation (`perm-k16`) and the perm128 reference scenario, each
    /// run serially and on --threads threads, alternately in fresh processes, --runs times.
    #[arg(long, conflicts_with_all = ["scenarios", "no_reference", "scale"])]
    pub(crate) parallel: bool,
    /// Under `mpirun`: the cost of one window's synchronization between the ranks (an
    /// exchange with no packets, 10,000 times), as rank 0 prints it. Needs `--features mpi`.
    #[arg(long, conflicts_with_all = ["scenarios", "scale", "parallel"])]
    pub(crate) mpi_sync: bool,
    /// Fast-forward against the exact run instead: each scenario (default: the 1,024-GPU
    /// ring and the incast, permutation and websearch reference cases) run exactly and
    /// with `sim --fast-forward`, alternately in fresh processes, --runs times; the
    /// speedup, the simulated time skipped, and how far the collective times, FCTs and
    /// counters are from the exact run's.
    #[arg(long, conflicts_with_all = ["no_reference", "scale", "parallel", "mpi_sync"])]
    pub(crate) fast_forward: bool,
    /// With --fast-forward: the validation matrix instead of the scenarios given: every
    /// reference case, the default and tuning scenarios, ring, tree and hierarchical
    /// AllReduce on 16, 128 and 1,024 GPUs at 1 MiB, 64 MiB and 1 GiB, and 64 MiB rings
    /// over four iterations, with flows beside them, with DCQCN marking and with a fault.
    #[arg(long, requires = "fast_forward", conflicts_with = "scenarios")]
    pub(crate) matrix: bool,
    /// Threads of the --parallel runs (default 2), or of a --child run (default 1); 1 to 256.
    #[arg(long, value_parser = count::<1, MAX_THREADS>)]
    pub(crate) threads: Option<usize>,
}

/// `xirang sim`.
#[derive(Debug, Args)]
pub(crate) struct SimArgs {
    /// Scenario file (omit with --hpcc-topology/--hpcc-flows).
    pub(crate) scenario: Option<PathBuf>,
    /// An HPCC-simulator topology file to run instead of a scenario (with --hpcc-flows).
    #[arg(long, requires = "hpcc_flows", conflicts_with = "scenario")]
    pub(crate) hpcc_topology: Option<PathBuf>,
    /// An HPCC-simulator flow file (with --hpcc-topology).
    #[arg(long, requires = "hpcc_topology")]
    pub(crate) hpcc_flows: Option<PathBuf>,
    /// Congestion control for --hpcc-* runs, with the reference settings.
    #[arg(long, value_enum, default_value = "dcqcn")]
    pub(crate) cc: HpccCc,
    /// Output directory (default: out/<scenario name>).
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Seed of every random stream (default: the scenario's).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Stop at this simulated time, e.g. 20ms, 500us, 2s (default: when all flows finish;
    /// at most one hour).
    #[arg(long, value_parser = parse_until_us)]
    pub(crate) until: Option<f64>,
    /// Sample rates, queue depths and counters at this interval, e.g. 10us (at least 0.1us).
    #[arg(long, value_parser = parse_sample_us)]
    pub(crate) sample: Option<f64>,
    /// Measure how much of the QPs' and collectives' connections' sending is steady by
    /// Wormhole's criterion, at several thresholds and windows (engine.json
    /// `engine.steady`, and a table); the results are the same as without it.
    #[arg(long)]
    pub(crate) steady_probe: bool,
    /// Skip a collective's pipeline periods once every connection has been steady for
    /// a window, instead of simulating them packet by packet (engine.json
    /// `engine.fast_forward` says what was skipped, or why the run could not skip), for
    /// every collective: by default only AllReduce is, what the validation matrix
    /// covers. Also `[run] fast_forward = true`.
    #[arg(long, conflicts_with = "exact")]
    pub(crate) fast_forward: bool,
    /// Simulate every packet: no fast-forward, whatever the scenario or the default says
    /// (also `[run] fast_forward = false`).
    #[arg(long)]
    pub(crate) exact: bool,
    /// Fast-forward's steadiness threshold: the largest spread, (max - min) / mean, of a
    /// connection's time per slice over the window (default 0.05); turns fast-forward on.
    #[arg(long, value_parser = parse_ff_theta, conflicts_with = "exact")]
    pub(crate) ff_theta: Option<f64>,
    /// Fast-forward's window, e.g. 500us (300us to 100ms; default 300us, or the run's
    /// longest DCQCN rate-increase period if longer); turns fast-forward on.
    #[arg(long, value_parser = parse_ff_window_us, conflicts_with = "exact")]
    pub(crate) ff_window: Option<f64>,
    /// How long a steady state the run measured before must hold again before it skips on
    /// it from the memo, e.g. 100us (20us to 200us; default 50us); turns fast-forward on.
    #[arg(long, value_parser = parse_ff_confirm_us, conflicts_with_all = ["exact", "ff_no_memo"])]
    pub(crate) ff_confirm: Option<f64>,
    /// No memo of steady states: every skip waits for the full window; turns
    /// fast-forward on.
    #[arg(long, conflicts_with = "exact")]
    pub(crate) ff_no_memo: bool,
    /// Run on this many threads (1 to 256), the fabric divided into as many partitions
    /// (or --partitions); the outputs are the serial run's, byte for byte.
    #[arg(long, default_value_t = 1, value_parser = count::<1, MAX_THREADS>)]
    pub(crate) threads: usize,
    /// Divide the fabric into this many partitions (1 to 256; default: --threads), each
    /// thread running its share.
    #[arg(long, value_parser = count::<1, MAX_PARTITIONS>)]
    pub(crate) partitions: Option<usize>,
    /// Run as one rank of an MPI job (`mpirun -np N xirang sim --mpi SCENARIO`): the fabric
    /// divided into N x --threads partitions (or --partitions, at least N), each rank
    /// running its share on --threads threads, rank 0 writing the outputs, byte-identical
    /// to the serial run's. Needs a build with `--features mpi`.
    #[arg(long)]
    pub(crate) mpi: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bar.
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// Most threads of one `sim` process: past the cores of any one machine, more only
/// adds synchronization.
pub(crate) const MAX_THREADS: usize = 256;
/// Most partitions of one run: every partition builds the whole fabric's routes, so
/// memory grows with the count.
pub(crate) const MAX_PARTITIONS: usize = 256;

/// Algorithm for runs on HPCC input files.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum HpccCc {
    /// DCQCN.
    Dcqcn,
    /// TIMELY.
    Timely,
    /// HPCC.
    Hpcc,
    /// DCTCP.
    Dctcp,
}

/// A count in `MIN..=MAX`: the range every count flag states in its help.
fn count<const MIN: usize, const MAX: usize>(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if (MIN..=MAX).contains(&v) => Ok(v),
        _ => Err(format!("expected a whole number {MIN}..={MAX}, found `{s}`")),
    }
}

/// Parses a simulated time (`20ms`, `500us`, `1.5s`, `800ns`; the unit is required) into µs.
pub(crate) fn parse_duration_us(s: &str) -> Result<f64, String> {
    let us = xirang_fabric::limits::parse_duration_s(s)? * 1e6;
    if !(us > 0.0 && us <= xirang_fabric::limits::MAX_SIM_TIME_US) {
        return Err(format!(
            "expected a duration above 0 and at most one hour of simulated time, found `{}`",
            s.trim()
        ));
    }
    Ok(us)
}

/// `--until`: a duration that is a valid end time.
fn parse_until_us(s: &str) -> Result<f64, String> {
    let us = parse_duration_us(s)?;
    xirang_fabric::limits::end_time_us(us)?;
    Ok(us)
}

/// A fast-forward threshold: a spread above 0 and below 1.
fn parse_ff_theta(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a spread between 0 and 1 such as 0.05, found {s:?}"))?;
    if v.is_finite() && v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(format!(
            "expected a spread between 0 and 1 such as 0.05, found {s}"
        ))
    }
}

/// A fast-forward window: at least the counters' window it holds
/// (`engine::ffwd::FF_MIN_WINDOW` µs), at most 100 ms.
fn parse_ff_window_us(s: &str) -> Result<f64, String> {
    let least = f64::from(xirang_sim::engine::ffwd::FF_MIN_WINDOW);
    duration_within(s, "window", least, (100_000.0, "100ms"))
}

/// The memo's confirmation: from `engine::ffwd::FF_MIN_CONFIRM_US` to
/// `FF_MAX_CONFIRM_US` (the counters' window, which the copies of the counters kept
/// cover).
fn parse_ff_confirm_us(s: &str) -> Result<f64, String> {
    use xirang_sim::engine::ffwd::{FF_MAX_CONFIRM_US, FF_MIN_CONFIRM_US};
    let most = f64::from(FF_MAX_CONFIRM_US);
    duration_within(
        s,
        "confirmation",
        f64::from(FF_MIN_CONFIRM_US),
        (most, &format!("{most}us")),
    )
}

/// A duration `s`, µs, from `least` to `most.0` µs (`most.1` as the user reads it); the
/// error names `what`.
fn duration_within(s: &str, what: &str, least: f64, most: (f64, &str)) -> Result<f64, String> {
    let us = parse_duration_us(s)?;
    if (least..=most.0).contains(&us) {
        Ok(us)
    } else {
        Err(format!(
            "expected a {what} from {least}us to {}, found {s}",
            most.1
        ))
    }
}

/// `--sample`: a duration that is a valid sampling interval.
fn parse_sample_us(s: &str) -> Result<f64, String> {
    let us = parse_duration_us(s)?;
    xirang_fabric::limits::sample_interval_us(us)?;
    Ok(us)
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScenarioCmd {
    /// Parse and validate a scenario; report every error with file, line and key path.
    Check(FileArgs),
    /// Print the scenario with its topology expanded into an explicit list (TOML).
    Expand {
        /// Scenario file.
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TopoCmd {
    /// Counts per tier, oversubscription, bisection bandwidth, diameter, ECMP width and
    /// path MTU between two sample hosts, GPU/NIC PCIe affinity; with --partitions, how
    /// `sim --threads`/`--mpi` would divide the fabric.
    Show(TopoShowArgs),
    /// The topology in Graphviz DOT (render with `dot -Tsvg`).
    Dot {
        /// Scenario file.
        file: PathBuf,
    },
}

/// `xirang topo show`.
#[derive(Debug, Args)]
pub(crate) struct TopoShowArgs {
    /// Scenario file.
    pub(crate) file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also show the fabric divided into this many partitions (1 to 256) as a parallel
    /// run divides it: each partition's hosts, switches and ports, the links cut between
    /// them and the lookahead, or why the run would stay serial.
    #[arg(long, value_parser = count::<1, MAX_PARTITIONS>)]
    pub(crate) partitions: Option<usize>,
}

#[derive(Debug, Args)]
pub(crate) struct FileArgs {
    /// Scenario file.
    pub(crate) file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang diagnose`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct DiagnoseArgs {
    #[command(subcommand)]
    pub(crate) command: Option<DiagnoseCmd>,
    /// The window to read, back from now (`30m`, `2h`, `90s`).
    #[arg(long, default_value = "30m")]
    pub(crate) since: String,
    /// Read the monitoring agent's history (SQLite).
    #[arg(long, conflicts_with = "prometheus")]
    pub(crate) history: Option<PathBuf>,
    /// Read a Prometheus server scraping the agents (`http://host:9090`).
    #[arg(long, conflicts_with = "sim_out")]
    pub(crate) prometheus: Option<String>,
    /// Read a simulator output directory (`xirang sim --out DIR --sample 20us`): the
    /// whole run is the window.
    #[arg(long, conflicts_with = "history")]
    pub(crate) sim_out: Option<PathBuf>,
    /// Inventory directory (as `xirang rollout` reads it: hosts/, switches/,
    /// topology.toml, policy.toml; docs/formats/inventory.md): adds the cabling and configured port
    /// speeds to the window, and the audit's configuration findings to the report.
    #[arg(long)]
    pub(crate) inventory: Option<PathBuf>,
    /// Also write the evidence bundle (`.tar.gz`: report, counter window, kernel log
    /// lines on this host).
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DiagnoseCmd {
    /// From nccl-tests logs alone: aborts, socket transport, GPUDirect RDMA off, GPUs
    /// sharing a NIC, and (over pairwise logs) slow nodes and slow pairs. Exit status 1
    /// when a fault is found.
    Nccl(DiagnoseNcclArgs),
    /// From an NCCL RAS report (`ncclras`, its JSON form, or its monitor events; or asked
    /// of a running job with --connect): dead and unreachable job processes and their
    /// hosts, ranks behind the rest (the straggler or hung rank), communicators whose ranks
    /// disagree, NCCL errors. With --inventory, each named host's NICs and switch ports;
    /// with --prometheus too, the counter findings of those in the same window. Exit
    /// status 1 when a fault is found.
    #[command(name = "nccl-ras")]
    NcclRas(DiagnoseNcclRasArgs),
    /// Run the fault-injection suite: faults injected in the simulator, diagnosed from
    /// its counters, scored (the confusion matrix in VALIDATION.md). Exit status 1 when
    /// fewer than 95 % of the faulty runs are located or a healthy run has a finding.
    Suite(DiagnoseSuiteArgs),
    /// Time the counter rules on a synthetic fleet window (the monitor's history of
    /// `--hosts` hosts x `--nics` NIC ports over `--minutes`, sampled every 10 s).
    Bench(DiagnoseBenchArgs),
}

/// `xirang diagnose nccl-ras`.
#[derive(Debug, Args)]
pub(crate) struct DiagnoseNcclRasArgs {
    /// The report: a file, or `-` for standard input (`ncclras | xirang diagnose nccl-ras -`).
    #[arg(required_unless_present = "connect", conflicts_with = "connect")]
    pub(crate) report: Option<PathBuf>,
    /// Ask a running job's RAS server instead (`HOST[:PORT]`, port 28028 by default:
    /// `localhost` on one of the job's nodes), speaking NCCL's client protocol.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub(crate) connect: Option<String>,
    /// With --connect: RAS's collection timeout, and the longest silence tolerated.
    #[arg(long, default_value = "5s", requires = "connect")]
    pub(crate) timeout: String,
    /// Inventory directory (hosts/, switches/, topology.toml): names each host's NICs and
    /// the switch ports they are cabled to.
    #[arg(long)]
    pub(crate) inventory: Option<PathBuf>,
    /// With --inventory: also read this Prometheus over --since and add the counter
    /// findings about those hosts' NICs and switch ports.
    #[arg(long, requires = "inventory")]
    pub(crate) prometheus: Option<String>,
    /// With --prometheus: the window, back from now.
    #[arg(long, default_value = "30m", requires = "prometheus")]
    pub(crate) since: String,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `xirang diagnose bench`.
#[derive(Debug, Args)]
pub(crate) struct DiagnoseBenchArgs {
    /// Hosts (1 to 100,000).
    #[arg(long, default_value_t = 1024, value_parser = count::<1, 100_000>)]
    pub(crate) hosts: usize,
    /// NIC ports per host (1 to 64).
    #[arg(long, default_value_t = 8, value_parser = count::<1, 64>)]
    pub(crate) nics: usize,
    /// Window length, minutes (1 to 1,440).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1440))]
    pub(crate) minutes: u32,
    /// Timed repetitions; the median is reported (1 to 1,000).
    #[arg(long, default_value_t = 5, value_parser = count::<1, 1000>)]
    pub(crate) runs: usize,
    /// Also time reading the window back from a monitor history file (written first,
    /// untimed, in a temporary directory).
    #[arg(long)]
    pub(crate) from_history: bool,
}

/// `xirang diagnose suite`.
#[derive(Debug, Args)]
pub(crate) struct DiagnoseSuiteArgs {
    /// Print the markdown VALIDATION.md holds.
    #[arg(long, conflicts_with = "json")]
    pub(crate) markdown: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Run only the cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    pub(crate) only: Option<String>,
}

/// `xirang diagnose nccl`.
#[derive(Debug, Args)]
pub(crate) struct DiagnoseNcclArgs {
    /// nccl-tests or rccl-tests logs (several pairwise logs are also read as a matrix).
    #[arg(required = true)]
    pub(crate) logs: Vec<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write the evidence bundle (`.tar.gz`: report, the logs, kernel log lines on
    /// this host).
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// Scenario describing the hosts (NICs, link rates, NVLink), to judge bandwidth
    /// against the cost model.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// NICs per node (default: the NICs NCCL lists in the log).
    #[arg(long, conflicts_with = "scenario")]
    pub(crate) nics: Option<u32>,
    /// NIC line rate, Gbit/s. No log states it: without it (or --scenario) bandwidth
    /// levels are not judged against the model, only shapes and what NCCL printed.
    #[arg(long, conflicts_with = "scenario")]
    pub(crate) nic_gbps: Option<f64>,
}
