//! `xirang memreg`: the registered buffer pool's benchmark, its test on real devices, and
//! the region sizes a scenario's workloads need.

use anyhow::{Context, Result};

use crate::Outcome;
use crate::cmd::{out, table};

pub(crate) fn bench(a: &crate::cli::MemregBenchArgs) -> Result<Outcome> {
    // Bounds that keep one run to minutes: a get+put pair takes tens of ns and a
    // registration microseconds (BENCHMARKS.md), so a billion pairs and ten million
    // registrations are already long runs.
    const MAX_PAIRS: u64 = 1_000_000_000;
    const MAX_REGISTRATIONS: u64 = 10_000_000;
    anyhow::ensure!(
        (1..=MAX_PAIRS).contains(&a.pairs),
        "--pairs: expected 1..={MAX_PAIRS}, found {}",
        a.pairs
    );
    anyhow::ensure!(
        (1..=MAX_REGISTRATIONS).contains(&a.registrations),
        "--registrations: expected 1..={MAX_REGISTRATIONS}, found {}",
        a.registrations
    );
    let rows = xirang_memreg::bench::run(a.size, a.pairs, a.registrations)?;
    let pool_1 = rows
        .iter()
        .find(|r| r.what == xirang_memreg::bench::POOL_CACHED && r.threads == 1)
        .map_or(f64::NAN, |r| r.ns_per_pair);
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| serde_json::json!({"what": r.what, "threads": r.threads, "ns_per_pair": r.ns_per_pair}))
            .collect();
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        let mut t = table(&["operation", "threads", "ns per pair", "x pool cache (1 thread)"]);
        for r in &rows {
            t.add_row(vec![
                r.what.to_string(),
                r.threads.to_string(),
                format!("{:.1}", r.ns_per_pair),
                format!("{:.1}", r.ns_per_pair / pool_1),
            ]);
        }
        out(&format!(
            "{} byte buffers, {} pairs per thread\n{t}\n",
            a.size, a.pairs
        ))?;
    }
    Ok(Outcome::Clean)
}

pub(crate) fn loopback(a: &crate::cli::MemregLoopbackArgs) -> Result<Outcome> {
    let mut cfg = xirang_memreg::loopback::LoopbackConfig::new(&a.devices[0], &a.devices[1]);
    cfg.port = a.port;
    cfg.gid_index = a.gid_index;
    cfg.mtu_bytes = a.mtu;
    cfg.rounds = a.rounds;
    cfg.register_ops = a.registrations;
    cfg.sysfs_root = a.sysfs.clone();
    let r = xirang_memreg::loopback::run(&cfg)?;
    let short = r.short_counters();
    let (leaked, reregistered, ok) = (r.leaked(), r.reregistered(), r.passed());
    if a.json {
        let v = serde_json::json!({
            "ok": ok,
            "devices": r.devices,
            "dmabuf_supported": r.dmabuf,
            "writes": r.writes,
            "reads": r.reads,
            "bytes_checked": r.bytes_checked,
            "registrations_at_start": r.registrations_at_start,
            "registrations_during_traffic": r.registrations,
            "high_water": r.high_water,
            "in_use_after": r.in_use_after,
            "counters": r.counters.iter().map(|c| serde_json::json!({
                "device": c.device, "counter": c.counter, "before": c.before,
                "after": c.after, "rise": c.after.saturating_sub(c.before),
                "expected_min": c.expected_min,
            })).collect::<Vec<_>>(),
            "register_bytes": r.register_bytes,
            "register_dereg_ns": r.register_ns,
            "pool_get_put_ns": r.pool_pair_ns,
        });
        out(&(serde_json::to_string_pretty(&v)? + "\n"))?;
    } else {
        let mut t = table(&["device", "counter", "rise", "needed at least"]);
        for c in &r.counters {
            t.add_row(vec![
                c.device.clone(),
                c.counter.to_string(),
                c.after.saturating_sub(c.before).to_string(),
                c.expected_min.to_string(),
            ]);
        }
        out(&format!(
            "{} RDMA WRITEs and {} READs between pool buffers on {} and {}: {} bytes, every byte checked\n\
             registrations: {:?} at start (one region per pool), {:?} during the traffic\n\
             dma-buf registration offered: {} {}, {} {}\n{t}\n\
             ibv_reg_mr + ibv_dereg_mr of {} bytes: {:.0} ns; pool get+put: {:.1} ns ({:.0}x)\n",
            r.writes,
            r.reads,
            r.devices[0],
            r.devices[1],
            r.bytes_checked,
            r.registrations_at_start,
            r.registrations,
            r.devices[0],
            r.dmabuf[0],
            r.devices[1],
            r.dmabuf[1],
            r.register_bytes,
            r.register_ns,
            r.pool_pair_ns,
            r.register_ns / r.pool_pair_ns,
        ))?;
    }
    for c in &short {
        eprintln!(
            "error: {} {} rose by {}, the traffic needs at least {}",
            c.device,
            c.counter,
            c.after.saturating_sub(c.before),
            c.expected_min
        );
    }
    if leaked {
        eprintln!("error: buffers still out after the run: {:?}", r.in_use_after);
    }
    if reregistered {
        eprintln!(
            "error: expected one registration per pool at start and none during the traffic, found {:?} and {:?}",
            r.registrations_at_start, r.registrations
        );
    }
    Ok(if ok { Outcome::Clean } else { Outcome::Findings })
}

/// Whole MiB, for tables.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// What `memreg plan` found: the scenario's connections sized into each NIC's region.
struct Planned {
    connections: usize,
    skipped: Vec<(String, String)>,
    params: xirang_memreg::sizing::PlanParams,
    plan: xirang_memreg::sizing::Plan,
    configured: u64,
    verdict: xirang_memreg::sizing::Verdict,
    limit: Option<u64>,
    registered: Option<Result<String, String>>,
}

pub(crate) fn plan(a: &crate::cli::MemregPlanArgs) -> Result<Outcome> {
    use xirang_memreg::sizing::Verdict;
    let p = planned(a)?;
    if a.json {
        out(&(serde_json::to_string_pretty(&plan_json(a, &p))? + "\n"))?;
    } else {
        out(&plan_text(&p))?;
    }
    let failed = matches!(p.registered, Some(Err(_))) || !p.skipped.is_empty();
    Ok(if p.verdict == Verdict::TooSmall || failed {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}

/// The scenario's transfers between NICs as connections, each NIC's region sized for
/// them, the verdict on the configured region, and (with `--register`) a registration
/// of the busiest NIC's region on this machine.
fn planned(a: &crate::cli::MemregPlanArgs) -> Result<Planned> {
    use xirang_memreg::sizing::{Connections, PlanParams, Verdict, register_here};
    let loaded = crate::cmd::load(&a.file)?;
    let cfg = &loaded.scenario.config;
    let fabric = &loaded.fabric;
    let ex = xirang_sim::workload::expand(loaded.model(), a.seed);
    // A workload that could not be expanded is traffic the plan does not count: the
    // verdict cannot be trusted, so the command fails (below).
    for (w, why) in &ex.skipped {
        eprintln!("error: workload {w} is not in the plan (it could not be expanded: {why})");
    }
    let mut conns = Connections::default();
    ex.for_each_nic_transfer(fabric, cfg.transport.qps_per_connection, &mut |t| {
        conns.add(t.workload, t.src.0, t.dst.0, t.bytes, t.repeat, t.qps)
    });
    let ends = conns.ends(|id| {
        let n = &fabric.nics[id as usize];
        let h = &fabric.hosts[n.host.index()].name;
        (format!("{h}/{}", n.name), h.clone())
    });
    let params = PlanParams {
        wr_depth: cfg.transport.wr_depth,
        max_buffer_bytes: cfg.memory.buffer_bytes,
        cache_line_bytes: cfg.memory.cache_line_bytes,
        base_page_bytes: xirang_fabric::config::PAGE_BYTES,
        pin_page_bytes: cfg.memory.page_bytes,
        headroom: a.headroom,
    };
    let plan = xirang_memreg::sizing::plan(&ends, &params)?;
    let configured = cfg.memory.region_bytes;
    let busiest = plan.busiest();
    let verdict = Verdict::of(configured, busiest.map_or(0, |n| n.region_bytes));
    let registered = if a.register {
        let b = busiest.context("no NIC carries traffic in this scenario: nothing to register")?;
        Some(
            register_here(b, &params, a.device.as_deref())
                .map(|(bytes, why)| format!("{} of {} in one region ({why})", mib(bytes), b.nic)),
        )
    } else {
        None
    };
    Ok(Planned {
        connections: conns.len(),
        skipped: ex.skipped.clone(),
        params,
        plan,
        configured,
        verdict,
        limit: xirang_memreg::region::memlock_limit_bytes(),
        registered,
    })
}

/// `memreg plan --json`.
fn plan_json(a: &crate::cli::MemregPlanArgs, p: &Planned) -> serde_json::Value {
    let Planned {
        connections,
        skipped,
        params,
        plan,
        configured,
        verdict,
        limit,
        registered,
    } = p;
    let busiest = plan.busiest();
    serde_json::json!({
        "scenario": a.file,
        "connections": connections,
        "skipped_workloads": skipped.iter().map(|(w, why)| serde_json::json!({"workload": w, "why": why})).collect::<Vec<_>>(),
        "params": {
            "wr_depth": params.wr_depth, "max_buffer_bytes": params.max_buffer_bytes,
            "cache_line_bytes": params.cache_line_bytes, "pin_page_bytes": params.pin_page_bytes,
            "headroom": params.headroom,
        },
        "nics": plan.nics.iter().map(|n| serde_json::json!({
            "nic": n.nic, "host": n.host, "need_bytes": n.need_bytes, "region_bytes": n.region_bytes,
            "classes": n.classes.iter().map(|c| serde_json::json!({
                "size_bytes": c.size_bytes, "qps": c.qps, "buffers": c.buffers, "bytes": c.bytes,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "pinned_bytes_per_host": plan.hosts,
        "total_pinned_bytes": plan.total_pinned_bytes(),
        "busiest_nic": busiest.map(|n| n.nic.clone()),
        "configured_region_bytes": configured,
        "verdict": verdict.name(),
        "memlock_limit_bytes": limit,
        "registered_here": registered.as_ref().map(|r| match r {
            Ok(m) => serde_json::json!({"ok": true, "message": m}),
            Err(e) => serde_json::json!({"ok": false, "error": e}),
        }),
    })
}

/// `memreg plan`'s text.
fn plan_text(p: &Planned) -> String {
    let Planned {
        connections,
        params,
        plan,
        configured,
        verdict,
        limit,
        registered,
        ..
    } = p;
    let busiest = plan.busiest();
    let mut text = format!(
        "{} connections over {} NICs; WR depth {}, buffers up to {} bytes, headroom {:.0} %\n",
        connections,
        plan.nics.len(),
        params.wr_depth,
        params.max_buffer_bytes,
        params.headroom * 100.0
    );
    if let Some(b) = busiest {
        let mut t = table(&["class (bytes)", "QPs", "buffers", "bytes"]);
        for c in &b.classes {
            t.add_row(vec![
                c.size_bytes.to_string(),
                c.qps.to_string(),
                c.buffers.to_string(),
                mib(c.bytes),
            ]);
        }
        text += &format!(
            "busiest NIC {}: needs {}, register {} (with headroom, in {}-byte pages)\n{t}\n",
            b.nic,
            mib(b.need_bytes),
            mib(b.region_bytes),
            params.pin_page_bytes
        );
    }
    let per_host_max = plan.hosts.values().max().copied().unwrap_or(0);
    text += &format!(
        "pinned: up to {} per host, {} over {} hosts\n\
         configured memory.region_bytes {} per NIC: {}\n",
        mib(per_host_max),
        mib(plan.total_pinned_bytes()),
        plan.hosts.len(),
        mib(*configured),
        verdict.name()
    );
    if let Some(l) = *limit {
        text += &format!(
            "this machine's RLIMIT_MEMLOCK: {}{}\n",
            if l == u64::MAX {
                "unlimited".to_string()
            } else {
                mib(l)
            },
            if per_host_max > l {
                " (below what a host pins: raise `ulimit -l` / limits.conf memlock)"
            } else {
                ""
            }
        );
    }
    match &registered {
        Some(Ok(m)) => text += &format!("registered here: {m}\n"),
        Some(Err(e)) => text += &format!("registering here failed: {e}\n"),
        None => {}
    }
    text
}
