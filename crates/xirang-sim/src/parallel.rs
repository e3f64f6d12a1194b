//! Parallel runs. The fabric is divided into partitions (`xirang_fabric::partition`),
//! each a [`Sim`] that handles only the events of its own devices; they meet only through
//! packets on the links cut between them. The run goes in windows no longer than the
//! lookahead (the shortest delay of a cut link), and after each window the partitions
//! exchange what crossed and agree on the next window: a conservative, YAWNS-style
//! synchronization (docs/reference/scale-and-parallel.md §3). A packet sent in a window
//! arrives after it, so no partition ever receives an event in its past.
//!
//! Event ties name devices, never partitions (`Sim::tie`), and the run stops on the same
//! grid as the serial one, so every output is byte-identical to the serial run's for
//! any number of partitions and threads (`tests/parallel.rs` checks it over random
//! scenarios).
//!
//! How the windows' exchange travels is an [`Exchange`]: threads of one process here
//! ([`simulate_threads`]), MPI ranks in the `xirang-mpi` crate.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use xirang_fabric::Loaded;
use xirang_fabric::built::Model;
use xirang_fabric::model::HostId;
use xirang_fabric::partition::{Partition, partition};
use xirang_fabric::scenario::FaultKind;

use crate::engine::ffwd::Survey;
use crate::engine::part::{Outbox, PartMap, PartState};
use crate::engine::{END_GRID_PS, NEVER, Progress, RunOptions, Sim};
use crate::output::RunResult;
use crate::queue::{EventQueue, Queue};
use crate::time::{PS_PER_NS, Ps};
use crate::workload::Expanded;

/// How a run is divided.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The fabric's partition (one part when the run is serial).
    pub partition: Partition,
    /// Partition of each device (NICs, then switches), as the engine indexes them.
    pub of_dev: Arc<Vec<u16>>,
    /// The shortest delay of a cut link: the longest window.
    pub lookahead_ps: Ps,
    /// Why the run is serial though more partitions were asked for.
    pub serial_because: Option<String>,
}

impl Plan {
    /// Partitions the run has.
    pub fn parts(&self) -> usize {
        self.partition.parts
    }
}

/// Divides the run of `ex` on `loaded`'s fabric into at most `parts` partitions, or says
/// why it must run serially.
///
/// Devices a flow's start couples are kept together: a flow that waits for others starts
/// the moment the last of them arrived, so its sender must share a partition with their
/// receivers. Collectives need nothing more: a GPU thread waits only for slices that
/// reached its own host and for slots freed by packets (completions, clear-to-sends), a
/// rank's next iteration only for its own threads, and a rank's GPUs and NICs are one
/// host, never divided.
pub fn plan(model: Model<'_>, ex: &Expanded, parts: usize) -> Plan {
    let fabric = model.fabric;
    let host = |n: xirang_fabric::model::NicId| fabric.nics[n.index()].host;
    let mut couplings: Vec<(HostId, HostId)> = Vec::new();
    for d in &ex.flows {
        for &a in &d.after {
            let dep = &ex.flows[a as usize];
            if host(dep.dst) != host(d.src) {
                couplings.push((host(dep.dst), host(d.src)));
            }
        }
    }
    couplings.sort_unstable();
    couplings.dedup();
    let serial_because = if parts < 2 {
        None
    } else if model.faults.iter().any(|f| f.fault.kind == FaultKind::GdrOff) {
        // The sender reads the receiving NIC's credit gate directly (`Sim::rx_gate`).
        Some("a gdr_off fault's receiver grants credit to its senders directly".to_string())
    } else {
        None
    };
    let mut p = partition(
        fabric,
        if serial_because.is_some() { 1 } else { parts.max(1) },
        &couplings,
    );
    let serial_because = serial_because.or_else(|| match p.lookahead_ns {
        Some(0) => Some("a link cut between partitions has no delay (no lookahead)".to_string()),
        _ if parts >= 2 && p.parts < 2 => Some("the fabric has nothing to divide".to_string()),
        _ => None,
    });
    if serial_because.is_some() && p.parts > 1 {
        p = partition(fabric, 1, &couplings);
    }
    let n_nics = fabric.nics.len();
    let mut of_dev = vec![0u16; n_nics + fabric.switches.len()];
    for (i, n) in fabric.nics.iter().enumerate() {
        of_dev[i] = p.host_part[n.host.index()];
    }
    for (s, &part) in p.switch_part.iter().enumerate() {
        of_dev[n_nics + s] = part;
    }
    Plan {
        lookahead_ps: p.lookahead_ns.map_or(NEVER, |ns| ns * PS_PER_NS),
        partition: p,
        of_dev: Arc::new(of_dev),
        serial_because,
    }
}

/// [`plan`] for a run of `loaded` with `opts` (its workloads expanded as a run would).
pub fn plan_for(loaded: &Loaded, opts: &RunOptions, parts: usize) -> Plan {
    crate::debug_assert_built(loaded);
    let model = loaded.model();
    plan(model, &crate::prepare(model, opts), parts)
}

/// Where a run stands after a window, combined over every partition.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    /// The earliest pending event, or packet on its way between partitions ([`NEVER`]:
    /// none).
    pub next: Ps,
    /// Flows and transfers done.
    pub done: u64,
    /// Something is pending (an event, a timer, or a packet between partitions).
    pub busy: bool,
    /// The latest simulated time reached.
    pub now: Ps,
    /// At a fast-forward check: what every partition knows, combined (`engine::ffwd`).
    pub ff: Option<Survey>,
}

impl Status {
    /// Nothing yet (the identity of [`Status::combine`]).
    pub const NONE: Status = Status {
        next: NEVER,
        done: 0,
        busy: false,
        now: 0,
        ff: None,
    };

    /// Both partitions' status as one.
    pub fn combine(self, o: Status) -> Status {
        Status {
            next: self.next.min(o.next),
            done: self.done + o.done,
            busy: self.busy || o.busy,
            now: self.now.max(o.now),
            ff: match (self.ff, o.ff) {
                (Some(a), Some(b)) => Some(a.combine(b)),
                (x, None) | (None, x) => x,
            },
        }
    }
}

/// An outbox on its way: from partition `from` to partition `to`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Mail {
    /// Sending partition.
    pub from: u16,
    /// Receiving partition.
    pub to: u16,
    /// What it carries.
    pub outbox: Outbox,
}

/// The end of a window: sends each outbox to its partition's worker, and returns what
/// this worker's partitions received (in any order) and the status of the whole run.
pub trait Exchange {
    /// Exchanges `out` and combines `status` with every other worker's.
    ///
    /// # Errors
    /// When another worker is gone: the run cannot go on.
    fn sync(&mut self, out: Vec<Mail>, status: Status) -> Result<(Vec<Mail>, Status), Aborted>;
}

/// Another worker of the run failed; the run stops.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Aborted(pub String);

/// Runs this worker's partitions `sims` (of a run of `total` flows and transfers) to the
/// end, window by window, in step with the other workers through `ex`. Every partition
/// ends finished (`Sim::finish_run`) at the run's end time; merge them with
/// [`Sim::merge`]. `progress` hears of each grid window.
///
/// # Errors
/// When the exchange fails (another worker is gone).
pub fn drive<Q: Queue>(
    sims: &mut [Sim<Q>],
    ex: &mut dyn Exchange,
    lookahead: Ps,
    progress: &mut dyn FnMut(Progress),
) -> Result<Stats, Aborted> {
    assert!(lookahead > 0, "invariant: a partitioned run has a lookahead");
    let Some(first) = sims.first() else {
        return Err(Aborted("a worker has no partition".to_string()));
    };
    let end = first.sched.end().unwrap_or(NEVER);
    let total = first.flows_done().1;
    let mut stats = Stats::default();
    for s in sims.iter_mut() {
        s.start_run();
    }
    let sync = |sims: &mut [Sim<Q>], ex: &mut dyn Exchange, stats: &mut Stats| -> Result<Status, Aborted> {
        let mut out = Vec::new();
        let mut st = Status::NONE;
        for s in sims.iter_mut() {
            let me = s.dist.me();
            let local = s.status();
            st = st.combine(local);
            for (to, outbox) in s.take_outboxes().into_iter().enumerate() {
                if !outbox.is_empty() {
                    stats.shipped += outbox.packets() as u64;
                    st.next = st.next.min(outbox.first_arrival().unwrap_or(NEVER));
                    st.busy |= outbox.packets() > 0;
                    out.push(Mail {
                        from: me,
                        to: to as u16,
                        outbox,
                    });
                }
            }
        }
        let (mut mail, st) = ex.sync(out, st)?;
        stats.windows += 1;
        // Deliveries in a fixed order, whatever order they came in.
        mail.sort_by_key(|m| (m.to, m.from));
        for m in &mut mail {
            let s = sims
                .iter_mut()
                .find(|s| s.dist.map().is_some_and(|p| p.me == m.to))
                .ok_or_else(|| Aborted(format!("mail for partition {} reached the wrong worker", m.to)))?;
            s.deliver(&mut m.outbox);
        }
        Ok(st)
    };
    // The receiving halves made at set-up go out before anything runs.
    let mut st = sync(sims, ex, &mut stats)?;
    loop {
        // As the serial run: the grid window of the next event, cut into windows of
        // one lookahead at most, skipping stretches where nothing happens anywhere. The
        // grid and the end are in reported time, which runs ahead of the engine's clock
        // by what a fast-forward skipped (the same in every partition); `last` is the
        // grid window's end on the engine's clock.
        let off = first_skipped(sims);
        let next = if st.next == NEVER {
            st.now
        } else {
            st.next.max(st.now)
        };
        let limit = (((next + off) / END_GRID_PS + 1) * END_GRID_PS - 1).min(end);
        let last = limit - off;
        let mut from = next;
        loop {
            let until = from.saturating_add(lookahead - 1).min(last);
            for s in sims.iter_mut() {
                s.run_until(until, &mut |_| {});
            }
            st = sync(sims, ex, &mut stats)?;
            if until == last {
                break;
            }
            // Samples up to the grid's end are due even when nothing else is.
            from = if st.next > last {
                last
            } else {
                st.next.max(until + 1)
            };
        }
        progress(Progress {
            now: limit,
            done: st.done,
            total,
        });
        if limit >= end {
            // Time stands at the end if anything was still to happen.
            if st.busy {
                st.now = last;
            }
            break;
        }
        if st.done == total || !st.busy {
            break;
        }
        if let Some(requeued) = ff_check(sims, ex, end, last)? {
            st.now = last;
            // A skip queues the flow starts still to come earlier: the next event may be
            // one of them, which the status of the last window does not know.
            st.next = st.next.min(requeued);
        }
    }
    let now = st.now;
    for s in sims.iter_mut() {
        s.stop_at_end(now, true);
        s.finish_run();
    }
    Ok(stats)
}

/// What fast-forward skipped so far: the same in every partition.
fn first_skipped<Q: Queue>(sims: &[Sim<Q>]) -> Ps {
    let off = sims[0].ff.skipped_ps();
    debug_assert!(
        sims.iter().all(|s| s.ff.skipped_ps() == off),
        "invariant: partitions skip together"
    );
    off
}

/// A fast-forward check, when one is due at `at` (the end of the grid window just run,
/// engine time), in step with every other partition: the serial run's steps
/// (`Sim::ff_check`), each partition's surveys combined through `ex` (one exchange, or
/// two when a collective is under way), so that every partition decides alike, and as
/// the serial run does. `Some` when a check was made (the partitions' clocks stand at
/// `at`), with the earliest flow start or fault event a skip queued again, engine time
/// ([`NEVER`]: none).
///
/// # Errors
/// When the exchange fails.
fn ff_check<Q: Queue>(
    sims: &mut [Sim<Q>],
    ex: &mut dyn Exchange,
    end: Ps,
    at: Ps,
) -> Result<Option<Ps>, Aborted> {
    let mut due = false;
    for s in sims.iter_mut() {
        due |= s.ff_due(at);
    }
    if !due {
        return Ok(None);
    }
    // The whole run's survey: this worker's partitions', then every worker's.
    let gather = |ex: &mut dyn Exchange, mine: Option<Survey>| -> Result<Survey, Aborted> {
        let status = Status {
            ff: mine,
            ..Status::NONE
        };
        let (mail, st) = ex.sync(Vec::new(), status)?;
        debug_assert!(mail.is_empty(), "invariant: nothing is in flight between windows");
        st.ff
            .ok_or_else(|| Aborted("a worker sent no fast-forward survey".to_string()))
    };
    let local = sims.iter().map(Sim::ff_survey_colls).reduce(Survey::combine);
    let colls = gather(ex, local)?;
    let c = match sims[0].ff_under_way(&colls) {
        Ok(c) => c,
        Err(why) => {
            for s in sims.iter_mut() {
                s.ff_refused(why);
            }
            return Ok(Some(NEVER));
        }
    };
    let local = sims.iter_mut().map(|s| s.ff_survey(c)).reduce(Survey::combine);
    let survey = gather(ex, local)?;
    let before = first_skipped(sims);
    for s in sims.iter_mut() {
        if let Err(why) = s.ff_decide(c, &survey, end) {
            s.ff_refused(why);
        }
    }
    let dt = first_skipped(sims) - before;
    if dt == 0 {
        return Ok(Some(NEVER));
    }
    let next = survey.next_flow_start();
    let flows = if next != NEVER { next - dt } else { NEVER };
    // A skip queues the fault events still to come earlier too (`Sim::shift_faults`).
    Ok(Some(flows.min(sims[0].ff_next_fault())))
}

/// What a parallel run cost in synchronization.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Windows (exchanges) run.
    pub windows: u64,
    /// Packets this worker's partitions sent to others.
    pub shipped: u64,
}

/// How a parallel run went, beside its results.
#[derive(Debug, Clone)]
pub struct Report {
    /// How the run was divided.
    pub plan: Plan,
    /// Threads it ran on (in each process).
    pub threads: usize,
    /// Processes (MPI ranks) it ran on.
    pub ranks: usize,
    /// Windows and packets exchanged.
    pub stats: Stats,
}

/// Partition `me` of `plan`'s run, set up and with its faults in place.
fn build_part(model: Model<'_>, opts: &RunOptions, expanded: &Expanded, plan: &Plan, me: usize) -> Sim {
    let map = PartMap {
        me: me as u16,
        parts: plan.parts() as u16,
        of_dev: plan.of_dev.clone(),
    };
    let mut sim = Sim::<EventQueue>::new_part(model.fabric, model.config, expanded, opts, Some(map));
    sim.inject(model.fabric, model.faults, opts.seed);
    sim
}

/// [`crate::simulate`] on `threads` threads, with the fabric divided into `parts`
/// partitions (each thread runs every `threads`-th one). The results are the serial
/// run's, byte for byte.
pub fn simulate_threads(
    loaded: &Loaded,
    opts: &RunOptions,
    parts: usize,
    threads: usize,
    progress: &mut dyn FnMut(Progress),
) -> (RunResult, Report) {
    crate::debug_assert_built(loaded);
    let model = loaded.model();
    let expanded = crate::prepare(model, opts);
    let plan = plan(model, &expanded, parts);
    let n = plan.parts();
    if n < 2 {
        let result = crate::run_prepared::<EventQueue>(model, opts, &expanded, progress);
        let report = Report {
            plan,
            threads: 1,
            ranks: 1,
            stats: Stats::default(),
        };
        return (result, report);
    }
    let threads = threads.clamp(1, n);
    let hub = Hub::new(threads);
    let build = |me: usize| build_part(model, opts, &expanded, &plan, me);
    let worker = |w: usize, progress: &mut dyn FnMut(Progress)| -> Result<(Vec<Sim>, Stats), Aborted> {
        let mut ex = HubEnd {
            hub: &hub,
            me: w,
            workers: threads,
            round: 0,
            route: None,
        };
        let mut sims: Vec<Sim> = (w..n).step_by(threads).map(build).collect();
        let stats = drive(&mut sims, &mut ex, plan.lookahead_ps, progress);
        if stats.is_err() {
            hub.abort("a worker failed");
        }
        stats.map(|s| (sims, s))
    };
    let results = on_threads(
        &hub,
        threads,
        "xirang-sim",
        || worker(0, progress),
        |w| worker(w, &mut |_| {}),
    );
    let mut sims = Vec::with_capacity(n);
    let mut stats = Stats::default();
    // A worker that failed was stopped by another's failure, which carried on as a panic.
    for (s, st) in results.into_iter().flatten() {
        sims.extend(s);
        stats.windows = stats.windows.max(st.windows);
        stats.shipped += st.shipped;
    }
    assert_eq!(sims.len(), n, "invariant: every worker finished or one panicked");
    let sim = Sim::merge(sims);
    let result = crate::collect(model, &expanded, &sim);
    let report = Report {
        plan,
        threads,
        ranks: 1,
        stats,
    };
    (result, report)
}

/// Spins of a worker waiting at the barrier before it sleeps: about 20 to 50 us on this
/// class of machine, longer than the other threads usually take to arrive when each has
/// a core (a window is a few hundred microseconds of work, its imbalance much less), and
/// short enough not to steal a core for long when threads outnumber cores.
const BARRIER_SPINS: u32 = 1 << 14;

/// The end of a run over several processes: every worker's finished partitions go to
/// worker 0, which writes the results.
pub trait Gather {
    /// Sends this worker's finished partitions and its figures to worker 0. Worker 0 gets
    /// every other worker's (in any order); the others get `None`.
    ///
    /// # Errors
    /// When another worker is gone.
    fn gather(
        &mut self,
        mine: Vec<PartState>,
        stats: Stats,
    ) -> Result<Option<(Vec<PartState>, Stats)>, Aborted>;
}

/// Why a run over several processes could not be done.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DistributedError {
    /// The fabric divides into fewer partitions than there are workers.
    #[error(
        "the fabric divides into only {parts} partitions, fewer than the {workers} processes; run with at most {parts}"
    )]
    TooFewPartitions {
        /// Partitions the fabric has.
        parts: usize,
        /// Processes of the run.
        workers: usize,
    },
    /// Another worker failed.
    #[error(transparent)]
    Aborted(#[from] Aborted),
}

/// [`crate::simulate`] as worker `worker` of `workers` processes: the fabric divided into
/// `parts` partitions (at least `workers`), this worker running those whose number is
/// `worker` modulo `workers`, one after another in each window; windows meet, and the
/// finished partitions are gathered, through `wire`. Worker 0 returns the run's results,
/// the serial run's byte for byte; the others `None`. A run that must be serial (see
/// [`plan`]) runs on worker 0 alone.
///
/// # Errors
/// When the fabric has fewer partitions than workers, or another worker failed.
#[allow(clippy::too_many_arguments)]
pub fn simulate_distributed<W: Exchange + Gather>(
    loaded: &Loaded,
    opts: &RunOptions,
    parts: usize,
    worker: usize,
    workers: usize,
    threads: usize,
    wire: &mut W,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<(RunResult, Report)>, DistributedError> {
    crate::debug_assert_built(loaded);
    let model = loaded.model();
    let expanded = crate::prepare(model, opts);
    let plan = plan(model, &expanded, parts.max(workers));
    let n = plan.parts();
    if n < 2 {
        if worker != 0 {
            return Ok(None);
        }
        let result = crate::run_prepared::<EventQueue>(model, opts, &expanded, progress);
        let report = Report {
            plan,
            threads: 1,
            ranks: workers,
            stats: Stats::default(),
        };
        return Ok(Some((result, report)));
    }
    if n < workers {
        return Err(DistributedError::TooFewPartitions { parts: n, workers });
    }
    let mine: Vec<usize> = (worker..n).step_by(workers).collect();
    let threads = threads.clamp(1, mine.len());
    if threads > 1 {
        return threaded_worker(
            model, opts, &expanded, plan, worker, workers, threads, wire, progress,
        );
    }
    let mut sims: Vec<Sim> = mine
        .iter()
        .map(|&me| build_part(model, opts, &expanded, &plan, me))
        .collect();
    let stats = drive(&mut sims, wire, plan.lookahead_ps, progress)?;
    // Partition 0 (worker 0's first) gathers; everything else becomes a state.
    let mut sims = sims.into_iter();
    let base = if worker == 0 { sims.next() } else { None };
    let mine: Vec<PartState> = sims.map(Sim::into_part_state).collect();
    let Some((mut states, all)) = wire.gather(mine, stats)? else {
        return Ok(None);
    };
    let mut sim = base.expect("invariant: worker 0 runs partition 0");
    states.sort_by_key(PartState::part);
    sim.gather(states);
    let result = crate::collect(model, &expanded, &sim);
    let report = Report {
        plan,
        threads: 1,
        ranks: workers,
        stats: all,
    };
    Ok(Some((result, report)))
}

/// A worker of a distributed run on `threads` threads: its partitions dealt round-robin to
/// the threads, which meet at a hub; at each window thread 0 carries what leaves the
/// worker over `wire` and hands out what arrived (two hub rounds around one wire
/// exchange), and at the end gathers the threads' partitions.
#[allow(clippy::too_many_arguments)]
fn threaded_worker<W: Exchange + Gather>(
    model: Model<'_>,
    opts: &RunOptions,
    expanded: &Expanded,
    plan: Plan,
    worker: usize,
    workers: usize,
    threads: usize,
    wire: &mut W,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<(RunResult, Report)>, DistributedError> {
    let n = plan.parts();
    let mine: Vec<usize> = (worker..n).step_by(workers).collect();
    // The thread of each partition; partitions of other workers go to thread 0, which
    // sends them on.
    let mut route = vec![0usize; n];
    for (i, &p) in mine.iter().enumerate() {
        route[p] = i % threads;
    }
    let hub = Hub::new(threads);
    let finished: Mutex<(Vec<PartState>, Option<Sim>, Stats)> =
        Mutex::new((Vec::new(), None, Stats::default()));
    let build = |me: usize| build_part(model, opts, expanded, &plan, me);
    let thread = |t: usize,
                  wire: Option<&mut W>,
                  progress: &mut dyn FnMut(Progress)|
     -> Result<Option<Vec<PartState>>, Aborted> {
        let mut sims: Vec<Sim> = mine.iter().skip(t).step_by(threads).map(|&p| build(p)).collect();
        let mut ex = Layered {
            end: HubEnd {
                hub: &hub,
                me: t,
                workers: threads,
                round: 0,
                route: Some(&route),
            },
            wire,
            worker,
            workers,
        };
        let st = drive(&mut sims, &mut ex, plan.lookahead_ps, progress);
        let st = match st {
            Ok(st) => st,
            Err(e) => {
                hub.abort(&e.0);
                return Err(e);
            }
        };
        {
            let mut f = finished.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for s in sims {
                if s.dist.map().is_some_and(|p| p.me == 0) {
                    f.1 = Some(s);
                } else {
                    f.0.push(s.into_part_state());
                }
            }
            f.2.windows = f.2.windows.max(st.windows);
            f.2.shipped += st.shipped;
        }
        // Every thread has handed its partitions over.
        ex.end.sync(Vec::new(), Status::NONE)?;
        Ok(None)
    };
    let name = format!("xirang-sim-{worker}");
    let results = on_threads(
        &hub,
        threads,
        &name,
        || thread(0, Some(&mut *wire), progress),
        |t| thread(t, None, &mut |_| {}),
    );
    for r in results {
        r?;
    }
    let (states, base, stats) = finished
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((mut states, all)) = wire.gather(states, stats)? else {
        return Ok(None);
    };
    let mut sim = base.expect("invariant: worker 0 runs partition 0");
    states.sort_by_key(PartState::part);
    sim.gather(states);
    let result = crate::collect(model, expanded, &sim);
    let report = Report {
        plan,
        threads,
        ranks: workers,
        stats: all,
    };
    Ok(Some((result, report)))
}

/// Runs `first` on this thread as thread 0 and `rest(t)` for threads 1 to `threads - 1` on
/// threads of their own (named `name-t`), and returns their results by thread. A thread
/// that panics breaks `hub`, so the others stop instead of waiting for it; its panic is
/// carried on once all have stopped (an engine bug, as in a serial run).
fn on_threads<R: Send>(
    hub: &Hub,
    threads: usize,
    name: &str,
    first: impl FnOnce() -> R,
    rest: impl Fn(usize) -> R + Sync,
) -> Vec<R> {
    let guarded = |f: &mut dyn FnMut() -> R| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        if r.is_err() {
            hub.abort("a simulation thread panicked");
        }
        r
    };
    let results: Vec<std::thread::Result<R>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .map(|t| {
                let (rest, guarded) = (&rest, &guarded);
                std::thread::Builder::new()
                    .name(format!("{name}-{t}"))
                    .spawn_scoped(scope, move || guarded(&mut || rest(t)))
                    .expect("spawning a simulation thread")
            })
            .collect();
        let mut first = Some(first);
        let mine = guarded(&mut || (first.take().expect("thread 0 runs once"))());
        std::iter::once(mine)
            .chain(handles.into_iter().map(|h| h.join().unwrap_or_else(Err)))
            .collect()
    });
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect()
}

/// One thread's exchange in a worker of several threads: mail within the worker goes
/// through the hub; thread 0 also carries the worker's mail to and from the others over
/// the wire.
struct Layered<'a, W: Exchange> {
    end: HubEnd<'a>,
    /// Thread 0's: the worker's link to the others.
    wire: Option<&'a mut W>,
    worker: usize,
    workers: usize,
}

impl<W: Exchange> Exchange for Layered<'_, W> {
    fn sync(&mut self, out: Vec<Mail>, status: Status) -> Result<(Vec<Mail>, Status), Aborted> {
        // Mail for this worker's partitions reaches its thread; the rest reaches thread 0.
        let (mut mail, local) = self.end.sync(out, status)?;
        let (remote_in, global) = match &mut self.wire {
            Some(wire) => {
                let (away, here): (Vec<Mail>, Vec<Mail>) = mail
                    .into_iter()
                    .partition(|m| usize::from(m.to) % self.workers != self.worker);
                mail = here;
                match wire.sync(away, local) {
                    Ok(r) => r,
                    Err(e) => {
                        self.end.hub.abort(&e.0);
                        return Err(e);
                    }
                }
            }
            None => (Vec::new(), Status::NONE),
        };
        // Thread 0 hands out what arrived, and the whole run's status.
        let (arrived, st) = self.end.sync(remote_in, global)?;
        mail.extend(arrived);
        Ok((mail, st))
    }
}

/// The meeting point of a run's threads: mailboxes and statuses behind one barrier that
/// can be broken. Each window is one barrier: mail and status are double-buffered by the
/// parity of the round, so a worker may post round `r + 1` while another still reads
/// round `r` (nobody posts round `r + 2` before everybody has passed round `r + 1`'s
/// barrier, which they reach only after reading round `r`).
struct Hub {
    workers: usize,
    /// Workers arrived at the barrier this round.
    arrived: AtomicUsize,
    /// Rounds completed.
    generation: AtomicU64,
    aborted: AtomicBool,
    state: Mutex<HubState>,
    turn: Condvar,
}

struct HubState {
    /// Mail for each worker, by round parity.
    mail: [Vec<Vec<Mail>>; 2],
    /// Each worker's status, by round parity.
    status: [Vec<Status>; 2],
    why: Option<String>,
}

impl Hub {
    fn new(workers: usize) -> Hub {
        Hub {
            workers,
            arrived: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            aborted: AtomicBool::new(false),
            state: Mutex::new(HubState {
                mail: [0, 1].map(|_| (0..workers).map(|_| Vec::new()).collect()),
                status: [0, 1].map(|_| vec![Status::NONE; workers]),
                why: None,
            }),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn abort(&self, why: &str) {
        let mut s = self.lock();
        s.why.get_or_insert_with(|| why.to_string());
        self.aborted.store(true, Ordering::SeqCst);
        self.turn.notify_all();
    }

    fn aborted(&self) -> Aborted {
        Aborted(
            self.lock()
                .why
                .clone()
                .unwrap_or_else(|| "the run was aborted".to_string()),
        )
    }

    /// Waits until every worker has arrived at round `round`'s barrier (or the run was
    /// aborted). Spins first, then sleeps.
    fn barrier(&self, round: u64) -> Result<(), Aborted> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(self.aborted());
        }
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.workers {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(round + 1, Ordering::Release);
            // Under the lock, so a worker between its last check and its sleep is woken.
            let _s = self.lock();
            self.turn.notify_all();
            return Ok(());
        }
        for _ in 0..BARRIER_SPINS {
            if self.generation.load(Ordering::Acquire) > round {
                return Ok(());
            }
            if self.aborted.load(Ordering::Relaxed) {
                return Err(self.aborted());
            }
            std::hint::spin_loop();
        }
        let mut s = self.lock();
        loop {
            if self.generation.load(Ordering::Acquire) > round {
                return Ok(());
            }
            if self.aborted.load(Ordering::SeqCst) {
                drop(s);
                return Err(self.aborted());
            }
            s = self
                .turn
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// One worker's end of the hub.
struct HubEnd<'a> {
    hub: &'a Hub,
    me: usize,
    workers: usize,
    /// Rounds this worker has completed.
    round: u64,
    /// The worker of each partition (`None`: partition `p` is worker `p % workers`'s).
    route: Option<&'a [usize]>,
}

impl Exchange for HubEnd<'_> {
    fn sync(&mut self, out: Vec<Mail>, status: Status) -> Result<(Vec<Mail>, Status), Aborted> {
        let side = (self.round % 2) as usize;
        {
            let mut s = self.hub.lock();
            for m in out {
                let w = match self.route {
                    Some(r) => r[usize::from(m.to)],
                    None => usize::from(m.to) % self.workers,
                };
                s.mail[side][w].push(m);
            }
            s.status[side][self.me] = status;
        }
        // Everyone has posted this round: read it.
        self.hub.barrier(self.round)?;
        self.round += 1;
        let mut s = self.hub.lock();
        let mail = std::mem::take(&mut s.mail[side][self.me]);
        let st = s.status[side]
            .iter()
            .fold(Status::NONE, |a, b| a.combine(b.clone()));
        Ok((mail, st))
    }
}

impl<Q: Queue> Sim<Q> {
    /// This partition's part of the run's [`Status`].
    fn status(&self) -> Status {
        Status {
            next: self.next_event_time().unwrap_or(NEVER),
            done: self.work.progress().0,
            busy: !self.idle(),
            now: self.now,
            ff: None,
        }
    }
}
