//! `mlnx_qos -i <if>` (MLNX_OFED) output: trust mode, DSCP→priority map, PFC and ETS.
//!
//! The audit needs the PFC rows above all (which priorities are lossless), so a dump
//! without a `PFC configuration:` section is rejected; everything else is optional because
//! mlnx_qos prints sections depending on the trust mode and the driver version. Unknown
//! `Key: value` lines are kept in `extra` so newer releases do not break the parser.

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT: &str = "mlnx_qos";

/// Which packet field the NIC uses to classify traffic into priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Trust {
    /// VLAN PCP bits (the default).
    Pcp,
    /// IP DSCP bits; needed for lossless RoCE without VLANs.
    Dscp,
}

/// One traffic class row (`tc: N ratelimit: ..., tsa: ...`) with its priorities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tc {
    /// Traffic class number.
    pub tc: u8,
    /// Rate limit as printed (`unlimited`, or a rate).
    pub ratelimit: String,
    /// Transmission selection algorithm (`vendor`, `ets`, `strict`).
    pub tsa: String,
    /// ETS bandwidth share in percent, when the TC is `ets`.
    pub bw_pct: Option<u8>,
    /// Priorities mapped to this TC, in file order.
    pub priorities: Vec<u8>,
}

/// The parsed `mlnx_qos -i <if>` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MlnxQos {
    /// `DCBX mode:`, e.g. `OS controlled`.
    pub dcbx_mode: Option<String>,
    /// `Priority trust state:` (`Priority trust mode:` in older releases).
    pub trust: Option<Trust>,
    /// `(dscp, prio)` pairs, sorted by DSCP; printed only when trust is DSCP.
    pub dscp2prio: Vec<(u8, u8)>,
    /// `Cable len:` in metres (sizes the PFC headroom buffer).
    pub cable_len_m: Option<u32>,
    /// PFC enabled per priority 0..7.
    pub pfc_enabled: [bool; 8],
    /// Receive buffer of each priority 0..7, when mlnx_qos prints a `buffer` row.
    pub pfc_buffer: Option<[u8; 8]>,
    /// Traffic classes in file order.
    pub tcs: Vec<Tc>,
    /// Other top-level `Key: value` lines as printed.
    pub extra: Vec<(String, String)>,
}

impl MlnxQos {
    /// The priority DSCP value `dscp` maps to, if the map was printed.
    pub fn prio_of_dscp(&self, dscp: u8) -> Option<u8> {
        self.dscp2prio
            .binary_search_by_key(&dscp, |&(d, _)| d)
            .ok()
            .and_then(|i| self.dscp2prio.get(i))
            .map(|&(_, p)| p)
    }

    /// Priorities with PFC enabled, ascending.
    pub fn pfc_priorities(&self) -> Vec<u8> {
        (0u8..8)
            .zip(self.pfc_enabled)
            .filter_map(|(p, on)| on.then_some(p))
            .collect()
    }

    /// The traffic class priority `prio` is mapped to.
    pub fn tc_of_prio(&self, prio: u8) -> Option<u8> {
        self.tcs
            .iter()
            .find(|tc| tc.priorities.contains(&prio))
            .map(|tc| tc.tc)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Top,
    Dscp2prio,
    Pfc,
}

/// Parses the output of `mlnx_qos -i <if>`.
pub fn parse(text: &str) -> Result<MlnxQos, ParseError> {
    let mut qos = MlnxQos {
        dcbx_mode: None,
        trust: None,
        dscp2prio: Vec::new(),
        cable_len_m: None,
        pfc_enabled: [false; 8],
        pfc_buffer: None,
        tcs: Vec::new(),
        extra: Vec::new(),
    };
    let mut section = Section::Top;
    // Line of the `PFC configuration:` header and whether its `enabled` row was seen.
    let mut pfc_header: Option<usize> = None;
    let mut pfc_rows_seen = false;
    // DSCP values already mapped, to catch a value listed under two priorities.
    let mut dscp_seen = [false; 64];

    for (no, raw) in lines(text) {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |expected: &str| ParseError::new(FORMAT, no, expected, line);
        let first = line.split_whitespace().next().unwrap_or("");

        if section == Section::Pfc && matches!(first, "priority" | "enabled" | "buffer") {
            let values = pfc_row(line).ok_or_else(|| bad("a PFC row of 8 numbers 0..255"))?;
            match first {
                "priority" => {
                    if values != [0, 1, 2, 3, 4, 5, 6, 7] {
                        return Err(bad("the PFC header row `priority 0 1 2 3 4 5 6 7`"));
                    }
                }
                "enabled" => {
                    for (on, v) in qos.pfc_enabled.iter_mut().zip(values) {
                        *on = match v {
                            0 => false,
                            1 => true,
                            _ => return Err(bad("0 or 1 for each priority in the PFC `enabled` row")),
                        };
                    }
                    pfc_rows_seen = true;
                }
                _ => qos.pfc_buffer = Some(values),
            }
            continue;
        }
        if section == Section::Pfc && !pfc_rows_seen {
            return Err(bad("a PFC `enabled` row of 8 values 0 or 1"));
        }

        if section == Section::Dscp2prio && first.starts_with("prio:") {
            for (dscp, prio) in
                dscp_row(line).ok_or_else(|| bad("`prio:P dscp:D,D,...` with P 0..7 and D 0..63"))?
            {
                let seen = dscp_seen
                    .get_mut(usize::from(dscp))
                    .ok_or_else(|| bad("DSCP values 0..63"))?;
                if *seen {
                    return Err(bad("each DSCP value under one priority only"));
                }
                *seen = true;
                qos.dscp2prio.push((dscp, prio));
            }
            continue;
        }

        section = Section::Top;
        if line == "PFC configuration:" {
            if pfc_header.is_some() {
                return Err(bad("one `PFC configuration:` section"));
            }
            pfc_header = Some(no);
            section = Section::Pfc;
            continue;
        }
        if line == "dscp2prio mapping:" {
            section = Section::Dscp2prio;
            continue;
        }
        if first == "tc:" {
            qos.tcs
                .push(tc_row(line).ok_or_else(|| {
                    bad("`tc: N ratelimit: R, tsa: T` with N 0..7 (optionally `, bw: P%`)")
                })?);
            continue;
        }
        if let Some(prio) = line.strip_prefix("priority:") {
            let Some(tc) = qos.tcs.last_mut() else {
                return Err(bad("a `tc:` line before its `priority:` lines"));
            };
            let prio = prio
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p < 8)
                .ok_or_else(|| bad("a priority 0..7 after `priority:`"))?;
            tc.priorities.push(prio);
            continue;
        }

        let Some((key, value)) = line.split_once(':') else {
            return Err(bad("a `Key: value` line, a section header or a section row"));
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "DCBX mode" => qos.dcbx_mode = Some(value.to_string()),
            "Priority trust state" | "Priority trust mode" => {
                qos.trust = Some(match value {
                    "pcp" => Trust::Pcp,
                    "dscp" => Trust::Dscp,
                    _ => return Err(bad("trust `pcp` or `dscp`")),
                })
            }
            "Cable len" => {
                qos.cable_len_m = Some(
                    value
                        .parse()
                        .map_err(|_| bad("a cable length in whole metres after `Cable len:`"))?,
                )
            }
            _ => qos.extra.push((key.to_string(), value.to_string())),
        }
    }

    match pfc_header {
        None => Err(ParseError::new(FORMAT, 0, "a `PFC configuration:` section", "")),
        Some(no) if !pfc_rows_seen => Err(ParseError::new(
            FORMAT,
            no,
            "a PFC `enabled` row after `PFC configuration:`",
            "end of text",
        )),
        Some(_) => {
            qos.dscp2prio.sort_unstable();
            Ok(qos)
        }
    }
}

/// `enabled     0   0   0   1   0   0   0   0` into its 8 values.
fn pfc_row(line: &str) -> Option<[u8; 8]> {
    let mut words = line.split_whitespace().skip(1);
    let mut values = [0u8; 8];
    for v in &mut values {
        *v = words.next()?.parse().ok()?;
    }
    words.next().is_none().then_some(values)
}

/// `prio:3 dscp:31,30,29,28,27,26,25,24,` into `(dscp, prio)` pairs.
fn dscp_row(line: &str) -> Option<Vec<(u8, u8)>> {
    let rest = line.strip_prefix("prio:")?;
    let (prio, dscps) = rest.split_once("dscp:")?;
    let prio: u8 = prio.trim().parse().ok().filter(|p| *p < 8)?;
    dscps
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<u8>().ok().filter(|d| *d < 64).map(|d| (d, prio)))
        .collect()
}

/// `tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%` into a [`Tc`] without priorities.
fn tc_row(line: &str) -> Option<Tc> {
    let rest = line.strip_prefix("tc:")?.trim_start();
    let (tc, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let tc: u8 = tc.parse().ok().filter(|t| *t < 8)?;
    let (mut ratelimit, mut tsa, mut bw_pct) = (None, None, None);
    for part in rest.split(',') {
        let (key, value) = part.split_once(':')?;
        let value = value.trim();
        match key.trim() {
            "ratelimit" => ratelimit = Some(value.to_string()),
            "tsa" => tsa = Some(value.to_string()),
            "bw" => {
                bw_pct = Some(
                    value
                        .strip_suffix('%')?
                        .trim()
                        .parse::<u8>()
                        .ok()
                        .filter(|b| *b <= 100)?,
                )
            }
            _ => return None,
        }
    }
    Some(Tc {
        tc,
        ratelimit: ratelimit?,
        tsa: tsa?,
        bw_pct,
        priorities: Vec::new(),
    })
}
