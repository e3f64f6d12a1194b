//! Partitions of a fabric for a parallel simulation: logical processes that each own some
//! hosts (with all their NICs) and switches, and meet only through the links cut between
//! them, whose shortest delay is the lookahead (docs/reference/scale-and-parallel.md §3).
//!
//! The fabric is split where its own structure splits it: the switches of the top tiers
//! are set aside, and what stays connected below them (a pod of a fat tree, a scalable
//! unit of a rail fabric, a leaf and its hosts) is one group, never divided. Groups go to
//! partitions largest first, each to the lightest partition by ports (the longest
//! processing time rule); the top-tier switches follow the same way. A host is never
//! divided: its GPUs talk over NVLink and its NICs through the host with no link delay.
//! Hosts the application couples without a link between them (a flow that starts when
//! another host received data) are kept together too.

use serde::Serialize;

use crate::model::{Fabric, HostId, Node, Tier};

/// How a fabric is divided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// Partitions made (at most the number asked for: never more than groups and
    /// top-tier switches).
    pub parts: usize,
    /// The lowest tier set aside to form the groups (None: nothing could be set aside).
    pub split_above: Option<Tier>,
    /// Groups found below it, after joining coupled hosts.
    pub groups: usize,
    /// Partition of each host (index = host id).
    pub host_part: Vec<u16>,
    /// Partition of each switch (index = switch id).
    pub switch_part: Vec<u16>,
    /// Links whose two ends are in different partitions.
    pub cut_links: usize,
    /// The shortest delay of a cut link, ns (None: nothing is cut).
    pub lookahead_ns: Option<u64>,
    /// Each partition's share.
    pub members: Vec<PartMembers>,
}

/// What one partition holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartMembers {
    /// Hosts.
    pub hosts: usize,
    /// Switches.
    pub switches: usize,
    /// Ports (both ends of every link end here): the weight balanced across partitions,
    /// as a busy simulation spends its time per port.
    pub ports: usize,
    /// Ports whose link leads to another partition.
    pub cut_ports: usize,
}

/// Union-find over hosts (`0..H`) and switches (`H..H+S`).
struct Sets(Vec<usize>);

impl Sets {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        // The smaller index leads, so the result does not depend on the order of joins.
        if a < b {
            self.0[b] = a;
        } else {
            self.0[a] = b;
        }
    }
}

/// Divides `fabric` into at most `n` partitions; `couplings` are pairs of hosts that must
/// share one.
pub fn partition(fabric: &Fabric, n: usize, couplings: &[(HostId, HostId)]) -> Partition {
    let n = n.max(1);
    let hosts = fabric.hosts.len();
    let unit = |node: Node| match node {
        Node::Nic(x) => fabric.nics[x.index()].host.index(),
        Node::Switch(s) => hosts + s.index(),
    };
    let top = fabric.switches.iter().map(|s| s.tier).max();
    // Set aside the top tier, then the tiers below it, until there are enough groups; the
    // leaves always stay with their hosts.
    let mut best: Option<(Option<Tier>, Sets, usize, usize)> = None;
    for cut in [None, Some(Tier::Core), Some(Tier::Spine)] {
        if cut.is_some_and(|c| top.is_none_or(|t| c > t)) {
            continue;
        }
        let aside = |node: Node| matches!((node, cut), (Node::Switch(s), Some(c)) if fabric.switches[s.index()].tier >= c);
        let mut sets = Sets((0..hosts + fabric.switches.len()).collect());
        for l in &fabric.links {
            if !aside(l.a.node) && !aside(l.b.node) {
                sets.join(unit(l.a.node), unit(l.b.node));
            }
        }
        for &(a, b) in couplings {
            sets.join(a.index(), b.index());
        }
        let groups = (0..hosts + fabric.switches.len())
            .filter(|&u| {
                let is_aside = u >= hosts && aside(Node::Switch(crate::model::SwitchId((u - hosts) as u32)));
                !is_aside && sets.find(u) == u
            })
            .count();
        let enough = groups >= n;
        // More groups first; with as many (coupled hosts can join every group into one),
        // more switches set aside still gives something to divide.
        let aside_switches = fabric
            .switches
            .iter()
            .filter(|s| cut.is_some_and(|c| s.tier >= c))
            .count();
        let items = groups + aside_switches;
        if best
            .as_ref()
            .is_none_or(|(_, _, g, i)| (groups, items.min(n)) > (*g, (*i).min(n)))
        {
            best = Some((cut, sets, groups, items));
        }
        if enough {
            break;
        }
    }
    let (split_above, mut sets, groups, _) = best.expect("invariant: the first candidate is always kept");
    let is_aside = |u: usize| u >= hosts && split_above.is_some_and(|c| fabric.switches[u - hosts].tier >= c);
    // Ports per unit.
    let mut ports = vec![0usize; hosts + fabric.switches.len()];
    for l in &fabric.links {
        ports[unit(l.a.node)] += 1;
        ports[unit(l.b.node)] += 1;
    }
    // Items to place: each group (by its leader) and each set-aside switch, with weights.
    let mut weight = vec![0usize; hosts + fabric.switches.len()];
    for (u, &w) in ports.iter().enumerate() {
        let lead = if is_aside(u) { u } else { sets.find(u) };
        weight[lead] += w;
    }
    let mut items: Vec<usize> = (0..weight.len())
        .filter(|&u| is_aside(u) || sets.find(u) == u)
        .collect();
    // Groups first (they carry the hosts), then the top tiers, each heaviest first; ties by
    // index, so the result is a function of the fabric alone.
    items.sort_by_key(|&u| (is_aside(u), std::cmp::Reverse(weight[u]), u));
    let mut load = vec![0usize; n];
    let mut part_of_item = vec![u16::MAX; weight.len()];
    for &u in &items {
        let p = (0..n).min_by_key(|&p| (load[p], p)).expect("n >= 1");
        load[p] += weight[u];
        part_of_item[u] = p as u16;
    }
    let mut part: Vec<u16> = (0..weight.len())
        .map(|u| part_of_item[if is_aside(u) { u } else { sets.find(u) }])
        .collect();
    // Number the partitions that got something 0.. in order.
    let mut renum = vec![u16::MAX; n];
    let mut used = 0u16;
    for p in part.iter_mut() {
        let r = &mut renum[*p as usize];
        if *r == u16::MAX {
            *r = used;
            used += 1;
        }
        *p = *r;
    }
    let parts = usize::from(used).max(1);
    let mut members = vec![PartMembers::default(); parts];
    for (u, &p) in part.iter().enumerate() {
        let m = &mut members[p as usize];
        if u < hosts {
            m.hosts += 1;
        } else {
            m.switches += 1;
        }
        m.ports += ports[u];
    }
    let mut cut_links = 0;
    let mut lookahead_ns: Option<u64> = None;
    for l in &fabric.links {
        let (pa, pb) = (part[unit(l.a.node)], part[unit(l.b.node)]);
        if pa != pb {
            cut_links += 1;
            members[pa as usize].cut_ports += 1;
            members[pb as usize].cut_ports += 1;
            lookahead_ns = Some(lookahead_ns.map_or(l.delay_ns, |d| d.min(l.delay_ns)));
        }
    }
    let switch_part = part.split_off(hosts);
    Partition {
        parts,
        split_above,
        groups,
        host_part: part,
        switch_part,
        cut_links,
        lookahead_ns,
        members,
    }
}

impl Partition {
    /// The partition that owns a node (a NIC goes with its host).
    pub fn of(&self, fabric: &Fabric, node: Node) -> u16 {
        match node {
            Node::Nic(x) => self.host_part[fabric.nics[x.index()].host.index()],
            Node::Switch(s) => self.switch_part[s.index()],
        }
    }
}
