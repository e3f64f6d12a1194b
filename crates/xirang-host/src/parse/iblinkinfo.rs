//! `iblinkinfo` (infiniband-diags): every switch port of an IB fabric and the link on it.
//! A link line reads `<lid> <port>[..] ==( <width> <speed> Gbps <state>/ <phys>)==> <remote
//! lid> <remote port>[..] "<remote>" (<could be>)`; a port that is down reads
//! `==(  Down/ Polling)==>`. The last parenthesis holds what the link could run at when
//! both ends allow more (`Could be 53.125 Gbps`, `Could be 12X`): a link trained below its
//! capability (rdma-core `iblinkinfo.c`, `get_max_msg`). The default mode prints a
//! `Switch: 0x<guid> <description>:` header per switch; line mode (`-l`) repeats
//! `0x<guid> "<description>"` on every line instead.

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT: &str = "iblinkinfo";

/// One switch port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IbLink {
    /// The switch: its description, or its GUID when the description is empty.
    pub switch: String,
    /// 1-based line of the output.
    pub line: usize,
    /// Switch port number.
    pub port: u32,
    /// Link width (`4X`) when up.
    pub width: Option<String>,
    /// Link speed per lane group as printed, Gbit/s, when up.
    pub speed_gbps: Option<f64>,
    /// Logical state (`Active`, `Down`, ...).
    pub state: String,
    /// Physical state (`LinkUp`, `Polling`, ...).
    pub phys_state: String,
    /// The remote end's description (`node3 HCA-2`), when connected.
    pub remote: Option<String>,
    /// What the link could run at, when it trained below (`Could be 53.125 Gbps`).
    pub could_be: Option<String>,
}

impl IbLink {
    /// Up and running (`Active` / `LinkUp`).
    pub fn is_up(&self) -> bool {
        self.state == "Active" && self.phys_state == "LinkUp"
    }
}

/// Parses the whole output (lines that are not link lines or switch headers, such as a
/// shell prompt or `ibswitches` output pasted with it, are skipped).
pub fn parse(text: &str) -> Result<Vec<IbLink>, ParseError> {
    let mut out = Vec::new();
    let mut switch: Option<String> = None;
    for (n, line) in lines(text) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Switch:") {
            // `Switch: 0x08c0eb0300add04e Quantum Mellanox Technologies:`
            let rest = rest.trim().trim_end_matches(':');
            let (guid, desc) = rest.split_once(' ').unwrap_or((rest, ""));
            switch = Some(if desc.trim().is_empty() {
                guid.to_string()
            } else {
                desc.trim().to_string()
            });
            continue;
        }
        let (Some(open), Some(close)) = (t.find("==("), t.find(")==>")) else {
            continue;
        };
        let bad = |what: &str| ParseError::new(FORMAT, n, what.to_string(), t);
        if close < open {
            return Err(bad("`==(` before `)==>`"));
        }
        let (left, link, right) = (&t[..open], &t[open + 3..close], &t[close + 4..]);
        // Line mode: `0x<guid> "<description>" <lid> <port>[..]`.
        let mut this_switch = switch.clone();
        let mut left = left.trim();
        if left.starts_with("0x") {
            let (guid, rest) = left.split_once(' ').unwrap_or((left, ""));
            let rest = rest.trim();
            if let Some(q) = rest.strip_prefix('"') {
                let end = q
                    .find('"')
                    .ok_or_else(|| bad("a closing `\"` after the switch description"))?;
                let desc = q[..end].trim();
                this_switch = Some(if desc.is_empty() {
                    guid.to_string()
                } else {
                    desc.to_string()
                });
                left = q[end + 1..].trim();
            } else {
                this_switch = Some(guid.to_string());
                left = rest;
            }
        }
        // `<lid> <port>[<ext>]`: the brackets may hold spaces (`1[  ]`).
        let before_bracket = left.rfind('[').map_or(left, |b| &left[..b]);
        let port: u32 = before_bracket
            .split_whitespace()
            .last()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| bad("a port number like `21[  ]` before `==(`"))?;
        // `<state>/ <phys>` ends the link part; before it, `<width> <speed> Gbps` when up.
        let slash = link
            .rfind('/')
            .ok_or_else(|| bad("`<state>/ <phys>` inside `==( )==>`"))?;
        let phys_state = link[slash + 1..].trim().to_string();
        let before = link[..slash].trim();
        let mut words: Vec<&str> = before.split_whitespace().collect();
        let state = words
            .pop()
            .ok_or_else(|| bad("a port state before `/`"))?
            .to_string();
        let (width, speed_gbps) = match words.as_slice() {
            [] => (None, None),
            [w, s, unit] if unit.eq_ignore_ascii_case("Gbps") => (
                Some(w.to_string()),
                Some(s.parse::<f64>().map_err(|_| bad("a speed in Gbps"))?),
            ),
            _ => return Err(bad("`<width> <speed> Gbps` before the state")),
        };
        let remote = right
            .find('"')
            .and_then(|a| {
                right[a + 1..]
                    .find('"')
                    .map(|b| right[a + 1..a + 1 + b].trim().to_string())
            })
            .filter(|r| !r.is_empty());
        let could_be = right
            .rfind('(')
            .map(|a| right[a + 1..].trim_end_matches(')').trim().to_string())
            .filter(|c| !c.is_empty());
        out.push(IbLink {
            switch: this_switch.clone().unwrap_or_default(),
            line: n,
            port,
            width,
            speed_gbps,
            state,
            phys_state,
            remote,
            could_be,
        });
    }
    Ok(out)
}
