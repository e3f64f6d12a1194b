//! Read-only views of a rollout: what `advance` (or `resume`) would do now, one line per
//! step (`preview`), and the audit log as text (`render_log`). It must not append to the
//! log, call a driver or run anything.

use crate::store::{Event, Meta};

use super::commands::{apply_template, shown_command, values};
use super::live_gates::wave_scope;
use super::state::{NicPhase, State};
use super::utc;

/// What `advance` (or `resume`) would do now, without doing it: one line per step.
pub fn preview(meta: &Meta, st: &State) -> Vec<String> {
    let mut out = Vec::new();
    if st.rolled_back {
        out.push("this rollout was rolled back: `advance` refuses; plan and start a new one".into());
        return out;
    }
    if st.completed {
        out.push("the rollout is completed: nothing to do".into());
        return out;
    }
    if let Some(h) = &st.halt {
        out.push(format!(
            "halted ({}, log #{}): {}; `advance` refuses until it is resumed",
            h.kind, h.seq, h.reason
        ));
        return out;
    }
    if !st.failure_recorded.is_empty() {
        out.push("a failed check is recorded for the wave in progress: `advance` would halt".into());
        return out;
    }
    let next = st.current.or_else(|| {
        meta.plan
            .waves
            .iter()
            .map(|w| w.number)
            .find(|n| !st.passed.contains(n))
    });
    let Some(w) = next else {
        out.push("every wave passed: the next step records completion".into());
        return out;
    };
    let wave = &meta.plan.waves[w - 1];
    out.push(format!(
        "wave {w} ({}){}: {} node(s)",
        wave.stage,
        if st.current.is_some() { ", in progress" } else { "" },
        wave.nodes.len()
    ));
    for n in &wave.nodes {
        for u in &n.nics {
            match st.nic(&n.name, &u.nic) {
                NicPhase::Pending => out.push(format!(
                    "  would run: {}",
                    shown_command(apply_template(&meta.policy, u), &values(&n.name, u))
                )),
                NicPhase::Flashed => out.push(format!("  {}/{}: already flashed", n.name, u.nic)),
                NicPhase::Preexisting => out.push(format!("  {}/{}: was on target already", n.name, u.nic)),
                other => out.push(format!(
                    "  {}/{}: {other:?}: its firmware is read before anything else",
                    n.name, u.nic
                )),
            }
        }
    }
    let g = &meta.policy.gates;
    // A configuration's "firmware" gate is every knob reading its recommended value.
    let mut gates = vec![if meta.policy.configuration.is_some() {
        "configuration"
    } else {
        "firmware"
    }];
    if g.audit {
        gates.push("audit");
    }
    if g.soak_s > 0.0 {
        gates.push("soak");
    }
    if g.benchmark.is_some() {
        gates.push("benchmark");
    }
    let live;
    if let Some(l) = &g.live {
        live = format!(
            "live ({} against the control group: {})",
            l.metrics
                .iter()
                .filter(|m| m.scope == wave_scope(wave))
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if wave.control.is_empty() {
                "none left, not compared".to_string()
            } else {
                wave.control.join(", ")
            }
        );
        gates.push(&live);
    }
    out.push(format!(
        "  then gates on every node: {}{}",
        gates.join(", "),
        if g.soak_s > 0.0 {
            format!(" (soak {} s)", g.soak_s)
        } else {
            String::new()
        }
    ));
    out.push("dry run: nothing was run or recorded; add --execute".into());
    out
}

/// The audit log as text: one line per event (`#seq time actor kind wave node/nic:
/// detail`); `with_time` false leaves the time out (golden files).
pub fn render_log(events: &[Event], with_time: bool) -> String {
    let mut s = String::new();
    for e in events {
        let when = if with_time {
            format!("{} ", utc(e.ts_ms))
        } else {
            String::new()
        };
        let what = match (&e.node, &e.nic) {
            (Some(n), Some(c)) => format!(" {n}/{c}"),
            (Some(n), None) => format!(" {n}"),
            _ => String::new(),
        };
        let wave = e.wave.map(|w| format!(" w{w}")).unwrap_or_default();
        s.push_str(&format!(
            "#{:<4} {when}{:<8} {:<16}{wave}{what}: {}\n",
            e.seq,
            e.actor,
            e.kind,
            e.detail.to_value()
        ));
    }
    s
}
