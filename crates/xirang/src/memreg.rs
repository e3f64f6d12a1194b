//! `xirang memreg`: the registered buffer pool's benchmark and its test on real devices.

use anyhow::Result;

use crate::Outcome;
use crate::cmd::{out, table};

pub(crate) fn bench(a: &crate::cli::MemregBenchArgs) -> Result<Outcome> {
    anyhow::ensure!(
        a.pairs > 0 && a.registrations > 0,
        "expected --pairs and --registrations above 0"
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
    let leaked = r.in_use_after.iter().any(|&n| n > 0);
    // One region per pool, registered before the traffic: none during it.
    let reregistered = r.registrations.iter().any(|&n| n > 0);
    let ok = short.is_empty() && !leaked && !reregistered;
    if a.json {
        let v = serde_json::json!({
            "ok": ok,
            "devices": r.devices,
            "dmabuf_supported": r.dmabuf,
            "writes": r.writes,
            "reads": r.reads,
            "bytes_checked": r.bytes_checked,
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
             registrations during the traffic: {:?} (pools registered once, at start)\n\
             dma-buf registration offered: {} {}, {} {}\n{t}\n\
             ibv_reg_mr + ibv_dereg_mr of {} bytes: {:.0} ns; pool get+put: {:.1} ns ({:.0}x)\n",
            r.writes,
            r.reads,
            r.devices[0],
            r.devices[1],
            r.bytes_checked,
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
            "error: the pools registered memory during the traffic: {:?}",
            r.registrations
        );
    }
    Ok(if ok { Outcome::Clean } else { Outcome::Findings })
}
