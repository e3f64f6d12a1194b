//! The HPCC ns-3 simulator's plain-text formats (alibaba-edu/High-Precision-Congestion-Control),
//! as described in docs/reference/reference-scenarios.md:
//!
//! - topology: `<n_nodes> <n_switches> <n_links>`, then the switch ids, then one line per
//!   link `<a> <b> <rate e.g. 100Gbps> <delay e.g. 0.001ms> <error_rate>`;
//! - flows: `<count>`, then `<src> <dst> <pg> <dport> <size_bytes> <start_seconds>`.
//!
//! Hosts are named `h<id>` and switches `sw<id>` after their HPCC node ids, so results can
//! be written back with the same ids. Switch tiers are inferred from distance to hosts.

use std::fmt;

use crate::diag::{Diagnostics, KeyPath};
use crate::model::{SwitchId, Tier};
use crate::topology::{Builder, HpccTopologySpec};

/// Largest HPCC topology or flow file read: 256 MiB holds a flow file of about seven
/// million flows (a line is about 35 bytes) and a topology file of millions of links.
pub const FILE_LIMIT: xirang_files::Limit = xirang_files::Limit::new(256 << 20, "HPCC input file");

/// Most nodes an HPCC topology file may declare: the same bound as the NIC ports a
/// generator builds ([`crate::limits::MAX_GENERATED_NICS`]); every node is a host or a
/// switch with its own ports.
pub const MAX_NODES: u32 = crate::limits::MAX_GENERATED_NICS as u32;

/// A parse error in an HPCC file: line and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HpccError {
    /// 1-based line.
    pub line: usize,
    /// What was expected and found.
    pub message: String,
}

impl fmt::Display for HpccError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for HpccError {}

/// Parsed HPCC topology.
#[derive(Debug, Clone, PartialEq)]
pub struct HpccTopology {
    /// Number of nodes (hosts + switches).
    pub n_nodes: u32,
    /// Ids of the switches.
    pub switches: Vec<u32>,
    /// Links in file order.
    pub links: Vec<HpccLink>,
}

/// One link line.
#[derive(Debug, Clone, PartialEq)]
pub struct HpccLink {
    /// One end.
    pub a: u32,
    /// Other end.
    pub b: u32,
    /// Rate.
    pub rate_gbps: f64,
    /// One-way delay.
    pub delay_ns: u64,
    /// Packet error rate (the simulator drops this fraction of packets).
    pub error_rate: f64,
}

/// One flow line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HpccFlow {
    /// Sender node id.
    pub src: u32,
    /// Receiver node id.
    pub dst: u32,
    /// Priority group.
    pub pg: u8,
    /// Destination port.
    pub dport: u16,
    /// Bytes.
    pub bytes: u64,
    /// Start time in picoseconds (parsed exactly from the decimal seconds).
    pub start_ps: u64,
}

/// Whitespace tokens with their line numbers; blank lines are skipped.
struct Tokens<'a> {
    it: Box<dyn Iterator<Item = (usize, &'a str)> + 'a>,
    last_line: usize,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Self {
        Tokens {
            it: Box::new(
                text.lines()
                    .enumerate()
                    .flat_map(|(i, l)| l.split_whitespace().map(move |t| (i + 1, t))),
            ),
            last_line: 1,
        }
    }

    fn next(&mut self, what: &str) -> Result<(usize, &'a str), HpccError> {
        match self.it.next() {
            Some((l, t)) => {
                self.last_line = l;
                Ok((l, t))
            }
            None => Err(HpccError {
                line: self.last_line,
                message: format!("expected {what}, found the end of the file"),
            }),
        }
    }

    fn parse<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, HpccError> {
        let (line, t) = self.next(what)?;
        t.parse().map_err(|_| HpccError {
            line,
            message: format!("expected {what}, found `{t}`"),
        })
    }

    /// Nothing may follow what the header declared: a file with more lines than its count
    /// says is a file whose count is wrong.
    fn end(&mut self, count: &str, n: u32) -> Result<(), HpccError> {
        match self.it.next() {
            None => Ok(()),
            Some((line, t)) => Err(HpccError {
                line,
                message: format!(
                    "expected the end of the file after the {n} {count} the first line declares, found `{t}`"
                ),
            }),
        }
    }

    fn with<T>(&mut self, what: &str, f: impl FnOnce(&str) -> Option<T>) -> Result<T, HpccError> {
        let (line, t) = self.next(what)?;
        f(t).ok_or_else(|| HpccError {
            line,
            message: format!("expected {what}, found `{t}`"),
        })
    }
}

/// Parses a rate such as `100Gbps`, `25Gb/s`, `400Mbps` into Gbit/s.
pub fn parse_rate_gbps(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "Gbps" | "Gb/s" => 1.0,
        "Mbps" | "Mb/s" => 1e-3,
        "Kbps" | "Kb/s" => 1e-6,
        "bps" | "b/s" => 1e-9,
        _ => return None,
    };
    (v.is_finite() && v > 0.0).then_some(v * scale)
}

/// Parses a delay such as `0.001ms`, `1000ns`, `1us`, `0.000001s` into whole nanoseconds.
pub fn parse_delay_ns(s: &str) -> Option<u64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let ps = decimal_to_scaled(
        num,
        match unit {
            "s" => 12,
            "ms" => 9,
            "us" => 6,
            "ns" => 3,
            "ps" => 0,
            _ => return None,
        },
    )?;
    Some(ps.div_ceil(1000))
}

/// `digits[.digits]` times 10^exp10, exactly, as an integer (None on overflow or junk).
fn decimal_to_scaled(s: &str, exp10: u32) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    v = v.checked_mul(10u64.checked_pow(exp10)?)?;
    for (i, d) in frac.bytes().enumerate() {
        let place = exp10.checked_sub(i as u32 + 1);
        match place {
            Some(p) => v = v.checked_add(u64::from(d - b'0') * 10u64.pow(p))?,
            // Digits below a picosecond are truncated.
            None => break,
        }
    }
    Some(v)
}

impl HpccTopology {
    /// Each node's switch tier, by node id (`None` for hosts): switches next to a host are
    /// leaves, next to a leaf spines, the rest cores.
    pub fn tiers(&self) -> Vec<Option<Tier>> {
        let n = self.n_nodes as usize;
        let mut is_switch = vec![false; n];
        for s in &self.switches {
            is_switch[*s as usize] = true;
        }
        let mut tier = vec![None; n];
        for l in &self.links {
            for (x, y) in [(l.a, l.b), (l.b, l.a)] {
                if is_switch[x as usize] && !is_switch[y as usize] {
                    tier[x as usize] = Some(Tier::Leaf);
                }
            }
        }
        for l in &self.links {
            for (x, y) in [(l.a, l.b), (l.b, l.a)] {
                if is_switch[x as usize] && tier[x as usize].is_none() && tier[y as usize] == Some(Tier::Leaf)
                {
                    tier[x as usize] = Some(Tier::Spine);
                }
            }
        }
        for (t, s) in tier.iter_mut().zip(&is_switch) {
            if *s && t.is_none() {
                *t = Some(Tier::Core);
            }
        }
        tier
    }
}

/// Parses an HPCC topology file.
pub fn parse_topology(text: &str) -> Result<HpccTopology, HpccError> {
    let mut t = Tokens::new(text);
    let n_nodes: u32 = t.with(&format!("a node count of 2..={MAX_NODES}"), |s| {
        s.parse().ok().filter(|n| (2..=MAX_NODES).contains(n))
    })?;
    let n_switches: u32 = t.with(&format!("a switch count of at most the {n_nodes} nodes"), |s| {
        s.parse().ok().filter(|n| *n <= n_nodes)
    })?;
    let n_links: u32 = t.parse("the link count")?;
    let mut switches = Vec::new();
    for _ in 0..n_switches {
        let (line, tok) = t.next("a switch id")?;
        let id: u32 = tok
            .parse()
            .ok()
            .filter(|v| *v < n_nodes)
            .ok_or_else(|| HpccError {
                line,
                message: format!("expected a switch id below the node count {n_nodes}, found `{tok}`"),
            })?;
        switches.push(id);
    }
    let mut links = Vec::new();
    for _ in 0..n_links {
        let node = |t: &mut Tokens<'_>| -> Result<u32, HpccError> {
            let (line, tok) = t.next("a node id")?;
            tok.parse()
                .ok()
                .filter(|v| *v < n_nodes)
                .ok_or_else(|| HpccError {
                    line,
                    message: format!("expected a node id below the node count {n_nodes}, found `{tok}`"),
                })
        };
        let a = node(&mut t)?;
        let line = t.last_line;
        let b = node(&mut t)?;
        if a == b {
            return Err(HpccError {
                line,
                message: format!("expected a link between two nodes, found node {a} linked to itself"),
            });
        }
        let (min_rate, max_rate) = (
            crate::limits::MIN_LINK_RATE_GBPS,
            crate::limits::MAX_LINK_RATE_GBPS,
        );
        let rate_gbps = t.with(
            &format!("a rate like `100Gbps`, {min_rate}Gbps to {max_rate}Gbps"),
            |s| parse_rate_gbps(s).filter(|r| crate::limits::link_rate_ok(*r)),
        )?;
        let max_delay = crate::limits::MAX_LINK_DELAY_NS;
        let delay_ns = t.with(
            &format!("a delay like `0.001ms` or `1000ns`, at most {max_delay}ns"),
            |s| parse_delay_ns(s).filter(|d| *d <= max_delay),
        )?;
        let error_rate: f64 = t.with("an error rate 0..=1", |s| {
            s.parse().ok().filter(|r: &f64| (0.0..=1.0).contains(r))
        })?;
        links.push(HpccLink {
            a,
            b,
            rate_gbps,
            delay_ns,
            error_rate,
        });
    }
    t.end("links", n_links)?;
    Ok(HpccTopology {
        n_nodes,
        switches,
        links,
    })
}

/// Parses an HPCC flow file.
pub fn parse_flows(text: &str) -> Result<Vec<HpccFlow>, HpccError> {
    let mut t = Tokens::new(text);
    let n: u32 = t.parse("the flow count")?;
    // The count is the file's word: reserve no more than its lines can hold (a flow line
    // has at least 11 characters).
    const MIN_FLOW_LINE_BYTES: usize = 11;
    let mut flows = Vec::with_capacity((n as usize).min(text.len() / MIN_FLOW_LINE_BYTES));
    for _ in 0..n {
        let src = t.parse("a source node id")?;
        let dst = t.parse("a destination node id")?;
        let pg = t.with("a priority group 0..7", |s| {
            s.parse::<u8>().ok().filter(|p| *p < 8)
        })?;
        let dport = t.parse("a destination port")?;
        let max_bytes = crate::limits::MAX_TRANSFER_BYTES;
        let bytes = t.with(&format!("a size of 1..={max_bytes} bytes"), |s| {
            s.parse().ok().filter(|b| (1..=max_bytes).contains(b))
        })?;
        let max_ps = (crate::limits::MAX_SIM_TIME_US * 1e6) as u64;
        let start_ps = t.with("a start time in seconds, at most 3600", |s| {
            decimal_to_scaled(s, 12).filter(|p| *p <= max_ps)
        })?;
        flows.push(HpccFlow {
            src,
            dst,
            pg,
            dport,
            bytes,
            start_ps,
        });
    }
    t.end("flows", n)?;
    Ok(flows)
}

/// HPCC's node-id-derived IPv4 address: `0x0b000001 + ((id / 256) << 16) + ((id % 256) << 8)`
/// (docs/reference/reference-scenarios.md).
pub fn node_ip(id: u32) -> u32 {
    0x0b00_0001 + ((id / 256) << 16) + ((id % 256) << 8)
}

/// The HPCC node id encoded in a host or switch name made by [`build_topology`].
pub fn node_id_from_name(name: &str) -> Option<u32> {
    name.strip_prefix('h')
        .or_else(|| name.strip_prefix("sw"))?
        .parse()
        .ok()
}

pub(crate) fn build_topology(
    b: &mut Builder<'_>,
    spec: &HpccTopologySpec,
    text: &str,
    at: &KeyPath,
    diags: &mut Diagnostics,
) -> Option<()> {
    let topo = match parse_topology(text) {
        Ok(t) => t,
        Err(e) => {
            diags.error(&at.key("file"), format!("`{}` {e}", spec.file));
            return None;
        }
    };
    let n = topo.n_nodes as usize;
    let mut is_switch = vec![false; n];
    for s in &topo.switches {
        is_switch[*s as usize] = true;
    }
    let mut degree = vec![0usize; n];
    for (li, l) in topo.links.iter().enumerate() {
        degree[l.a as usize] += 1;
        degree[l.b as usize] += 1;
        // A port index is 16 bits.
        if let Some(x) = [l.a, l.b]
            .into_iter()
            .find(|x| degree[*x as usize] > usize::from(u16::MAX))
        {
            diags.error(
                &at.key("file"),
                format!(
                    "`{}` link {}: node {x} has more than {} links, more than a switch has ports",
                    spec.file,
                    li + 1,
                    u16::MAX
                ),
            );
            return None;
        }
        if l.error_rate != 0.0 {
            diags.warning(
                &at.key("file"),
                format!(
                    "`{}`: link {}-{} has error rate {}; packet errors are not simulated from topology files",
                    spec.file, l.a, l.b, l.error_rate
                ),
            );
        }
    }
    let tier = topo.tiers();
    // Host port rate: the rate of the host's first link.
    let mut host_rate = vec![0.0f64; n];
    for l in &topo.links {
        for x in [l.a, l.b] {
            if !is_switch[x as usize] && host_rate[x as usize] == 0.0 {
                host_rate[x as usize] = l.rate_gbps;
            }
        }
    }
    enum Slot {
        Nic(crate::model::NicId),
        Switch(SwitchId),
    }
    let mut slot = Vec::with_capacity(n);
    let template = crate::topology::HostTemplate {
        gpus: 1,
        nics: 1,
        // One port per host, as the file's links have it: nothing to bond.
        aggregate: None,
        ..spec.host.clone()
    };
    for id in 0..n {
        if is_switch[id] {
            let t = tier[id].unwrap_or(Tier::Core);
            slot.push(Slot::Switch(b.add_switch(format!("sw{id}"), t, degree[id])));
        } else {
            let nics = b.add_host(format!("h{id}"), &template, host_rate[id]);
            slot.push(Slot::Nic(nics[0].0));
        }
    }
    let mut next_port = vec![0u16; n];
    for (li, l) in topo.links.iter().enumerate() {
        let mut end = |x: u32| -> Option<crate::model::PortRef> {
            let p = next_port[x as usize];
            next_port[x as usize] += 1;
            match slot[x as usize] {
                Slot::Nic(_) if p > 0 => {
                    diags.error(
                        &at.key("file"),
                        format!(
                            "`{}` link {}: host {x} has a second link; hosts have one port",
                            spec.file,
                            li + 1
                        ),
                    );
                    None
                }
                Slot::Nic(nic) => Some(crate::model::PortRef {
                    node: crate::model::Node::Nic(nic),
                    port: 0,
                }),
                Slot::Switch(s) => Some(crate::model::PortRef {
                    node: crate::model::Node::Switch(s),
                    port: p,
                }),
            }
        };
        let (Some(pa), Some(pb)) = (end(l.a), end(l.b)) else {
            return None;
        };
        b.fabric.connect(pa, pb, l.rate_gbps, l.delay_ns);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_exactly() {
        assert_eq!(parse_rate_gbps("100Gbps"), Some(100.0));
        assert_eq!(parse_rate_gbps("400Mbps"), Some(0.4));
        assert_eq!(parse_delay_ns("0.001ms"), Some(1000));
        assert_eq!(parse_delay_ns("1000ns"), Some(1000));
        assert_eq!(decimal_to_scaled("2.000000962", 12), Some(2_000_000_962_000));
        assert_eq!(parse_rate_gbps("100G"), None);
    }

    #[test]
    fn flow_errors_name_the_line() {
        let e = parse_flows("2\n1 2 3 100 1000 2.0\n1 2 3 100 abc 2.0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: expected a size of 1..=1099511627776 bytes, found `abc`"
        );
        let e = parse_flows("2\n1 2 3 100 1000 2.0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: expected a source node id, found the end of the file"
        );
    }

    #[test]
    fn more_lines_than_the_header_declares_is_an_error() {
        let e = parse_flows("1\n1 2 3 100 1000 2.0\n1 3 3 100 1000 2.0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: expected the end of the file after the 1 flows the first line declares, found `1`"
        );
        let e = parse_topology("3 1 1\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 4: expected the end of the file after the 1 links"),
            "{e}"
        );
        // A huge count is not trusted for memory: the file runs out first.
        let e = parse_flows("4000000000\n1 2 3 100 1000 2.0\n").unwrap_err();
        assert!(e.to_string().contains("found the end of the file"), "{e}");
    }

    #[test]
    fn ip_matches_the_reference_outputs() {
        // hpcc-ns3-results/fct_dcqcn.txt: node 33 sends from 0b002101, node 0 is 0b000001.
        assert_eq!(node_ip(0), 0x0b00_0001);
        assert_eq!(node_ip(33), 0x0b00_2101);
        assert_eq!(node_ip(300), 0x0b01_2c01);
    }
}
