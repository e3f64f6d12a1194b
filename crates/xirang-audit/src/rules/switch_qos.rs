//! The switch ports' treatment of RoCE, on each cabled port (on every port when there is
//! no cabling): ECN marking on the queue RoCE's DSCP maps to (NET-ECN-SWITCH), a lossless
//! (headroom) buffer profile for its priority group (NET-LOSSLESS-PG), CNPs in a queue of
//! their own (NET-CNP-QUEUE), and the PFC watchdog on (NET-PFCWD-OFF). It reads the SONiC
//! config through `xirang_switch::sonic`'s lookups; it must not judge the hosts' side of
//! a link (`nic_qos`, `mtu`).

use super::{Evidence, Finding, Layer, Severity};
use crate::cluster::Cluster;

/// DSCP of CNPs: mlx5's `roce_np/cnp_dscp` default (docs/reference/switch-config.md §2).
const CNP_DSCP: u8 = 48;

/// Switch ports to check: the cabled ones when cabling is known, else every port.
fn switch_ports(c: &Cluster) -> Vec<(&crate::cluster::SwitchConfig, String)> {
    let mut v = Vec::new();
    for sw in &c.switches {
        match &c.cabling {
            Some(cab) => {
                for cable in &cab.links {
                    if cable.switch == sw.name {
                        v.push((sw, cable.port.clone()));
                    }
                    if cable.peer_switch.as_deref() == Some(&sw.name)
                        && let Some(pp) = &cable.peer_port
                    {
                        v.push((sw, pp.clone()));
                    }
                }
            }
            None => v.extend(sw.db.ports.keys().map(|p| (sw, p.clone()))),
        }
    }
    v.sort_by(|a, b| (&a.0.name, &a.1).cmp(&(&b.0.name, &b.1)));
    v.dedup_by(|a, b| a.0.name == b.0.name && a.1 == b.1);
    v
}

pub(super) fn switch_queues(c: &Cluster, out: &mut Vec<Finding>) {
    let dscp = c.policy.roce_dscp;
    let prio = c.policy.roce_priority;
    for (sw, port) in switch_ports(c) {
        let db = &sw.db;
        let entity = format!("{}:{port}", sw.name);
        let tc = db.dscp_to_tc(&port, dscp);
        let queue = tc.and_then(|tc| db.queue_of_tc(&port, tc));
        let wred_name = queue.and_then(|q| {
            db.queues
                .get(&port)
                .and_then(|m| m.get(&q))
                .and_then(|q| q.wred_profile.clone())
        });
        let wred = queue.and_then(|q| db.wred_of_queue(&port, q));
        if !wred.is_some_and(|w| w.marks_ecn_green()) {
            let why = match (tc, queue, &wred_name, wred) {
                (None, _, _, _) => {
                    format!("DSCP {dscp} has no traffic class on this port (no dscp_to_tc_map entry)")
                }
                (_, None, _, _) => format!(
                    "traffic class {} has no queue (tc_to_queue_map)",
                    tc.unwrap_or_default()
                ),
                (_, Some(q), None, _) => format!("queue {q} has no WRED profile"),
                (_, Some(q), Some(n), None) => {
                    format!("queue {q} names WRED profile `{n}`, which does not exist")
                }
                (_, Some(q), Some(n), Some(_)) => {
                    format!("queue {q}'s WRED profile `{n}` does not mark green packets with ECN")
                }
            };
            let q = queue.unwrap_or(prio);
            out.push(Finding {
                rule: "NET-ECN-SWITCH",
                severity: Severity::Error,
                layer: Layer::Network,
                entity: entity.clone(),
                message: format!("RoCE (DSCP {dscp}) gets no ECN marking: {why}; DCQCN never sees congestion and PFC does all the work"),
                evidence: vec![Evidence { source: format!("{}: QUEUE|{port}|{q}.wred_profile", sw.source), value: wred_name.unwrap_or_else(|| "absent".into()) }],
                fix: format!("bind a WRED profile with ecn ecn_all and wred_green_enable true to QUEUE|{port}|{q} (e.g. AZURE_LOSSLESS)"),
            });
        }
        if db.pfc_enabled(&port).contains(&prio) {
            // The PG that the RoCE priority lands in must hold PFC headroom (xoff), or
            // in-flight data after a pause is dropped (docs/reference/switch-config.md, check 2).
            let pg = tc.and_then(|tc| db.pg_of_tc(&port, tc));
            let lossless = pg
                .and_then(|pg| db.pg_profile(&port, pg))
                .is_some_and(|p| p.is_lossless());
            let dynamic = pg
                .and_then(|pg| db.buffer_pgs.get(&port).and_then(|m| m.get(&pg)))
                .is_some_and(|b| b.dynamic);
            if !lossless && !dynamic {
                let name = pg
                    .and_then(|pg| db.buffer_pgs.get(&port).and_then(|m| m.get(&pg)))
                    .and_then(|b| b.profile.clone());
                out.push(Finding {
                    rule: "NET-LOSSLESS-PG",
                    severity: Severity::Error,
                    layer: Layer::Network,
                    entity: entity.clone(),
                    message: format!(
                        "PFC is on for priority {prio}, but its priority group {} has {}: data in flight after a pause has nowhere to go and is dropped",
                        pg.map_or("(none: no tc_to_pg_map entry)".into(), |p| p.to_string()),
                        name.as_deref().map_or("no BUFFER_PG profile".to_string(), |n| format!("profile `{n}` without xoff headroom"))
                    ),
                    evidence: vec![Evidence { source: format!("{}: BUFFER_PG|{port}|{}", sw.source, pg.unwrap_or(prio)), value: name.unwrap_or_else(|| "absent".into()) }],
                    fix: format!("bind a lossless profile (pg_lossless_<speed>_<cable>_profile, with xoff and xon) to BUFFER_PG|{port}|{}", pg.unwrap_or(prio)),
                });
            }
        }
        // CNPs (DSCP 48 by default, roce_np/cnp_dscp) must not queue behind the data they
        // are meant to slow down (docs/reference/switch-config.md, check 3).
        let cnp_queue = db
            .dscp_to_tc(&port, CNP_DSCP)
            .and_then(|tc| db.queue_of_tc(&port, tc));
        if cnp_queue.is_some() && cnp_queue == queue {
            out.push(Finding {
                rule: "NET-CNP-QUEUE",
                severity: Severity::Warning,
                layer: Layer::Network,
                entity: entity.clone(),
                message: format!("CNPs (DSCP {CNP_DSCP}) go to queue {}, the RoCE data queue: congestion notifications wait behind the congestion", cnp_queue.unwrap_or_default()),
                evidence: vec![Evidence { source: format!("{}: DSCP_TO_TC_MAP", sw.source), value: format!("DSCP {CNP_DSCP} and DSCP {dscp} -> queue {}", cnp_queue.unwrap_or_default()) }],
                fix: format!("map DSCP {CNP_DSCP} to its own traffic class and a strict-priority queue (e.g. TC 6, SCHEDULER type STRICT)"),
            });
        }
        if db.pfc_enabled(&port).contains(&prio) && !db.pfc_wd_on(&port) {
            out.push(Finding {
                rule: "NET-PFCWD-OFF",
                severity: Severity::Warning,
                layer: Layer::Network,
                entity,
                message: format!("PFC is on for priority {prio} but the PFC watchdog is not: a stuck receiver can spread a pause storm (switch-config.md, PFC_WD)"),
                evidence: vec![Evidence { source: format!("{}: PFC_WD|{port}", sw.source), value: "absent".into() }],
                fix: format!("pfcwd start --action drop {port} 200  (or `pfcwd start_default`)"),
            });
        }
    }
}
