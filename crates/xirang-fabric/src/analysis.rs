//! Structural figures of a fabric: counts per tier, oversubscription, bisection bandwidth,
//! diameter, ECMP width, path MTU and GPU/NIC PCIe affinity.

use serde::Serialize;

use crate::model::{Fabric, NicId, Node, Tier};
use crate::routing::{Graph, UNREACHABLE};

/// What `xirang topo show` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoSummary {
    /// Hosts.
    pub hosts: usize,
    /// NICs (network endpoints).
    pub nics: usize,
    /// GPUs.
    pub gpus: usize,
    /// All switches.
    pub switches: usize,
    /// Links.
    pub links: usize,
    /// Per tier, bottom up.
    pub tiers: Vec<TierSummary>,
    /// Total host link capacity, Gbit/s.
    pub host_capacity_gbps: f64,
    /// Bisection bandwidth, Gbit/s: the smallest capacity crossing any tier boundary when
    /// the switches of each tier are split in two equal halves. For the symmetric Clos
    /// fabrics the generators build this is half the total uplink capacity of the
    /// narrowest tier boundary (and half the host capacity at the edge). 0 when the
    /// fabric is not connected.
    pub bisection_gbps: f64,
    /// True when the bisection equals half the host capacity (no oversubscription
    /// anywhere).
    pub full_bisection: bool,
    /// Longest shortest path between two NICs that reach each other, in links (when
    /// `connected` is false some pairs have no path at all).
    pub diameter_hops: u32,
    /// True when every NIC reaches every other NIC.
    pub connected: bool,
    /// ECMP figures between two sample endpoints (the first NIC and the farthest one).
    pub sample_pair: Option<PairSummary>,
    /// GPU/NIC PCIe affinity over all hosts.
    pub pcie: PcieSummary,
}

/// Figures of one tier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierSummary {
    /// Tier.
    pub tier: Tier,
    /// Switches in it.
    pub switches: usize,
    /// Largest ratio of downlink to uplink capacity over its switches (None for the top
    /// tier, which has no uplinks).
    pub oversubscription: Option<f64>,
    /// Total capacity of the links from this tier to the tier above, Gbit/s.
    pub uplink_gbps: f64,
}

/// ECMP figures between two endpoints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSummary {
    /// Source `host/nic`.
    pub src: String,
    /// Destination `host/nic`.
    pub dst: String,
    /// Links on each shortest path.
    pub hops: u32,
    /// Number of equal-cost shortest paths.
    pub ecmp_paths: u128,
    /// Smallest MTU over all those paths.
    pub path_mtu_bytes: u32,
}

/// How GPUs sit relative to NICs on PCIe (nvidia-smi topo's PIX / NODE / SYS).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcieSummary {
    /// GPUs with a NIC under the same PCIe switch (PIX).
    pub gpus_with_pix_nic: usize,
    /// GPUs whose nearest NIC is on the same socket only (NODE).
    pub gpus_with_node_nic: usize,
    /// GPUs with NICs only on the other socket (SYS).
    pub gpus_with_sys_nic_only: usize,
    /// On hosts with as many GPUs as NICs: GPU i and NIC i share a PCIe switch on every
    /// such host.
    pub gpu_i_with_nic_i: bool,
    /// NICs or GPUs whose PCIe link runs below capability.
    pub downgraded_pcie_links: usize,
}

/// Computes the summary.
pub fn summarize(fabric: &Fabric) -> TopoSummary {
    let g = Graph::new(fabric);
    let tiers = fabric.tiers();
    let tier_of = |n: Node| match n {
        Node::Nic(_) => None,
        Node::Switch(s) => Some(fabric.switches[s.index()].tier),
    };
    let host_capacity_gbps: f64 = fabric
        .links
        .iter()
        .filter(|l| matches!(l.a.node, Node::Nic(_)) || matches!(l.b.node, Node::Nic(_)))
        .map(|l| l.rate_gbps)
        .sum();
    let mut tier_summaries = Vec::new();
    for &tier in &tiers {
        let mut worst: Option<f64> = None;
        let mut uplink_total = 0.0;
        for (si, s) in fabric.switches.iter().enumerate() {
            if s.tier != tier {
                continue;
            }
            let (mut down, mut up) = (0.0, 0.0);
            for a in g.adj(g.index(Node::Switch(crate::model::SwitchId(si as u32)))) {
                let rate = fabric.links[a.link.index()].rate_gbps;
                match tier_of(g.node(a.peer)) {
                    None => down += rate,
                    Some(t) if t < tier => down += rate,
                    Some(t) if t > tier => up += rate,
                    Some(_) => {}
                }
            }
            uplink_total += up;
            if up > 0.0 {
                let r = down / up;
                worst = Some(worst.map_or(r, |w: f64| w.max(r)));
            }
        }
        tier_summaries.push(TierSummary {
            tier,
            switches: fabric.switch_count(tier),
            oversubscription: worst,
            uplink_gbps: uplink_total,
        });
    }
    let mut bisection = host_capacity_gbps / 2.0;
    for t in &tier_summaries {
        if t.uplink_gbps > 0.0 {
            bisection = bisection.min(t.uplink_gbps / 2.0);
        }
    }
    let (diameter, connected) = diameter_and_connectivity(fabric, &g);
    // Hosts that cannot reach each other split the fabric with no link crossing: its
    // smallest cut carries nothing, whatever the tiers' uplinks add up to.
    if !connected {
        bisection = 0.0;
    }
    let full_bisection = host_capacity_gbps > 0.0
        && (bisection - host_capacity_gbps / 2.0).abs() <= 1e-9 * host_capacity_gbps.max(1.0);

    let sample_pair = sample_pair(fabric, &g);
    TopoSummary {
        hosts: fabric.hosts.len(),
        nics: fabric.nics.len(),
        gpus: fabric.gpus.len(),
        switches: fabric.switches.len(),
        links: fabric.links.len(),
        tiers: tier_summaries,
        host_capacity_gbps,
        bisection_gbps: bisection,
        full_bisection,
        diameter_hops: diameter,
        connected,
        sample_pair,
        pcie: pcie_summary(fabric),
    }
}

/// The most hops between any two NICs, and whether every NIC reaches every other.
///
/// NICs hang off switches, so the NIC-to-NIC distance is the distance between their
/// attachment nodes plus the two edge hops. Breadth-first searches run from every
/// distinct attachment node over the graph without the NICs (hosts do not forward), 64
/// sources at a time as the bits of one word per node: per level, a node's new sources
/// are the union of its neighbours' frontiers. The cost is the sources / 64 times the
/// levels times the switch links, which keeps a 250,000-host fat tree to seconds where
/// one search per source took minutes.
fn diameter_and_connectivity(fabric: &Fabric, g: &Graph) -> (u32, bool) {
    const BATCH: usize = 64;
    let n_nics = fabric.nics.len();
    if n_nics < 2 {
        return (0, true);
    }
    let n = g.len();
    // Each NIC's attachment node; a NIC with no link reaches nothing.
    let mut attach = Vec::with_capacity(n_nics);
    for nic in 0..n_nics as u32 {
        match g.adj(nic).first() {
            Some(a) => attach.push(a.peer),
            None => return (0, false),
        }
    }
    // Distinct attachment nodes, in first-seen order, and how many NICs each carries.
    let mut nics_at = vec![0u32; n];
    let mut sources = Vec::new();
    for &a in &attach {
        if nics_at[a as usize] == 0 {
            sources.push(a);
        }
        nics_at[a as usize] += 1;
    }
    // Two NICs on one switch are two hops apart.
    let mut diameter = if sources.len() < n_nics { 2 } else { 0 };
    let forwards = |v: u32| v >= n_nics as u32 || nics_at[v as usize] > 0;
    let mut visited = vec![0u64; n];
    let mut frontier = vec![0u64; n];
    let mut next = vec![0u64; n];
    let mut connected = true;
    for batch in sources.chunks(BATCH) {
        visited.iter_mut().for_each(|w| *w = 0);
        frontier.iter_mut().for_each(|w| *w = 0);
        for (bit, &s) in batch.iter().enumerate() {
            visited[s as usize] |= 1 << bit;
            frontier[s as usize] |= 1 << bit;
        }
        let mut level = 0;
        loop {
            let mut any = false;
            for v in 0..n as u32 {
                let f = frontier[v as usize];
                if f == 0 || !forwards(v) {
                    continue;
                }
                for a in g.adj(v) {
                    if forwards(a.peer) {
                        next[a.peer as usize] |= f;
                    }
                }
            }
            level += 1;
            for v in 0..n {
                let new = next[v] & !visited[v];
                next[v] = 0;
                frontier[v] = new;
                if new != 0 {
                    any = true;
                    visited[v] |= new;
                    if nics_at[v] > 0 {
                        diameter = diameter.max(level + 2);
                    }
                }
            }
            if !any {
                break;
            }
        }
        let all = if batch.len() == BATCH {
            u64::MAX
        } else {
            (1u64 << batch.len()) - 1
        };
        if sources.iter().any(|&t| visited[t as usize] != all) {
            connected = false;
        }
    }
    (diameter, connected)
}

fn sample_pair(fabric: &Fabric, g: &Graph) -> Option<PairSummary> {
    if fabric.nics.len() < 2 {
        return None;
    }
    let a = NicId(0);
    let dist = g.distances_to(a.0);
    // The farthest NIC, last one on ties, so leaf-spine and fat-tree samples cross the top tier.
    let b = (1..fabric.nics.len() as u32)
        .filter(|n| dist[*n as usize] != UNREACHABLE)
        .max_by_key(|n| (dist[*n as usize], *n))?;
    let b = NicId(b);
    let paths = g.ecmp_paths(a, b, usize::MAX);
    Some(PairSummary {
        src: fabric.node_name(Node::Nic(a)),
        dst: fabric.node_name(Node::Nic(b)),
        hops: dist[b.index()],
        ecmp_paths: g.count_paths(a, b),
        path_mtu_bytes: paths.iter().map(|p| p.mtu_bytes(fabric)).min().unwrap_or(0),
    })
}

fn pcie_summary(fabric: &Fabric) -> PcieSummary {
    let mut s = PcieSummary {
        gpus_with_pix_nic: 0,
        gpus_with_node_nic: 0,
        gpus_with_sys_nic_only: 0,
        gpu_i_with_nic_i: true,
        downgraded_pcie_links: 0,
    };
    for h in &fabric.hosts {
        for g in &h.gpus {
            let gpu = &fabric.gpus[g.index()];
            let socket = h.pcie_switches[gpu.pcie_switch].socket;
            let nics = h.nics.iter().map(|n| &fabric.nics[n.index()]);
            if nics.clone().any(|n| n.pcie_switch == gpu.pcie_switch) {
                s.gpus_with_pix_nic += 1;
            } else if nics
                .clone()
                .any(|n| h.pcie_switches[n.pcie_switch].socket == socket)
            {
                s.gpus_with_node_nic += 1;
            } else {
                s.gpus_with_sys_nic_only += 1;
            }
        }
        if h.gpus.len() == h.nics.len() {
            for (g, n) in h.gpus.iter().zip(&h.nics) {
                if fabric.gpus[g.index()].pcie_switch != fabric.nics[n.index()].pcie_switch {
                    s.gpu_i_with_nic_i = false;
                }
            }
        }
    }
    s.downgraded_pcie_links = fabric.nics.iter().filter(|n| n.pcie.is_downgraded()).count()
        + fabric.gpus.iter().filter(|g| g.pcie.is_downgraded()).count();
    s
}

/// A name as the inside of a DOT quoted string: `"` and `\` escaped, line breaks as
/// `\n` (names come from scenario and topology files, which allow any text).
fn dot_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' | '\r' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Renders the fabric in Graphviz DOT: one node per host and switch, tiers on ranks,
/// each cable an edge labelled with its rate (and the NIC for host edges).
pub fn to_dot(fabric: &Fabric) -> String {
    let mut out = String::from("graph fabric {\n  rankdir=BT;\n  node [fontname=\"Helvetica\"];\n");
    out.push_str("  subgraph hosts {\n    rank=same;\n");
    for h in &fabric.hosts {
        out.push_str(&format!(
            "    \"{}\" [shape=box, label=\"{}\\n{} GPU / {} NIC\"];\n",
            dot_escape(&h.name),
            dot_escape(&h.name),
            h.gpus.len(),
            h.nics.len()
        ));
    }
    out.push_str("  }\n");
    for tier in fabric.tiers() {
        out.push_str(&format!("  subgraph {tier} {{\n    rank=same;\n"));
        for s in fabric.switches.iter().filter(|s| s.tier == tier) {
            out.push_str(&format!(
                "    \"{}\" [shape=ellipse, label=\"{}\\n{}\"];\n",
                dot_escape(&s.name),
                dot_escape(&s.name),
                tier
            ));
        }
        out.push_str("  }\n");
    }
    let end_name = |n: Node| match n {
        Node::Nic(id) => dot_escape(&fabric.hosts[fabric.nics[id.index()].host.index()].name),
        Node::Switch(s) => dot_escape(&fabric.switches[s.index()].name),
    };
    for l in &fabric.links {
        let label = match (l.a.node, l.b.node) {
            (Node::Nic(n), _) | (_, Node::Nic(n)) => {
                format!("{} {}G", dot_escape(&fabric.nics[n.index()].name), l.rate_gbps)
            }
            _ => format!("{}G", l.rate_gbps),
        };
        out.push_str(&format!(
            "  \"{}\" -- \"{}\" [label=\"{}\"];\n",
            end_name(l.a.node),
            end_name(l.b.node),
            label
        ));
    }
    out.push_str("}\n");
    out
}
