//! Routes: the egress port at every hop from a sending NIC to a receiving NIC, computed
//! once per QP as the switches would forward the QP's packets (ECMP by a hash of the flow
//! key), and stored back to back in one arena. Forwarding a packet is a lookup of its
//! route at its hop index.

use std::collections::VecDeque;

use xirang_fabric::config::{BondHash, LagPortSelect};
use xirang_fabric::model::{Fabric, NicId, Node, SwitchId};
use xirang_fabric::routing::{Adj, Graph};
use xirang_fabric::scenario::EcmpMode;

use super::ids::{IdVec, PortId, RouteId};
use super::link::Port;
use super::switch::SwitchState;
use super::{Dev, NicState};
use crate::rng::murmur3_32;

/// Salt of the second hash an `ecmp_imbalance` fault decides with (a different
/// MurmurHash3 seed), so that it is independent of the hash that picks among the other
/// next hops.
const HOT_HASH_SALT: u32 = 0x9e37_79b9;
/// Seed of a bonded NIC's member choice: any fixed value independent of the switches'
/// ECMP seeds, so that a QP's member and its first ECMP choice are not correlated.
const LAG_HASH_SEED: u32 = 0x4c41_4721;
/// The source and destination IPs at the head of a route key.
const ADDRESS_BYTES: usize = 8;

/// Every route of a run, back to back: a route is the run of egress ports starting at its
/// [`RouteId`] and ending at the port whose peer is a NIC.
#[derive(Debug, Default)]
pub(crate) struct RouteArena {
    ports: Vec<PortId>,
}

impl RouteArena {
    /// The egress port at hop `hop` of a route (hop 0 is the sending NIC's port).
    #[inline]
    pub(crate) fn hop(&self, r: RouteId, hop: u8) -> PortId {
        self.ports[r.idx() + usize::from(hop)]
    }

    /// The sending NIC's port of a route.
    #[inline]
    pub(crate) fn first(&self, r: RouteId) -> PortId {
        self.ports[r.idx()]
    }

    /// Where egress port `p` appears in the routes (a bond's failover, `engine::faults`).
    pub(crate) fn positions(&self, p: PortId) -> Vec<u32> {
        self.ports
            .iter()
            .enumerate()
            .filter(|(_, q)| **q == p)
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Puts `to[k % to.len()]` at the `k`-th of the positions `at`: one port, or several
    /// dealt out in turn. Routes keep their length: every port of `to` reaches the same
    /// next device.
    pub(crate) fn set(&mut self, at: &[u32], to: &[PortId]) {
        for (k, &i) in at.iter().enumerate() {
            self.ports[i as usize] = to[k % to.len()];
        }
    }

    /// The egress ports of a route, sender NIC first.
    pub(crate) fn ports_of<'a>(
        &'a self,
        r: RouteId,
        ports: &'a IdVec<PortId, Port>,
    ) -> impl Iterator<Item = PortId> + 'a {
        let mut i = r.idx();
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let p = self.ports[i];
            i += 1;
            done = matches!(ports[ports[p].peer].dev, Dev::Nic(_));
            Some(p)
        })
    }
}

/// One route to compute: from a NIC to a NIC, hashed by a flow key (source IP,
/// destination IP, ports).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteRequest {
    pub(crate) src: NicId,
    pub(crate) dst: NicId,
    pub(crate) key: [u32; 3],
    /// The ACK direction of a QP (from its responder).
    pub(crate) ack: bool,
}

/// Where the next-hop search for a destination starts: its leaf when the destination NIC
/// has a single link, to a switch (every NIC under one leaf then shares the search; the
/// leaf's last hop is the NIC's own port), else the NIC itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Leaf(u32),
    Nic(u32),
}

/// Computes routes for a run: the fabric's graph with every node's neighbours in the
/// order the search visits them, and how switches hash.
pub(crate) struct RouteBuilder<'a> {
    fabric: &'a Fabric,
    graph: Graph,
    /// Neighbours of each node sorted by (rank of the neighbour, local port), as CSR.
    nbr_start: Vec<u32>,
    nbrs: Vec<Adj>,
    nic_ports: &'a [Vec<PortId>],
    sw_ports: &'a [Vec<PortId>],
    /// `ecmp_imbalance`: the favoured switch and the share of flows sent to it, as a
    /// threshold on a 32-bit hash.
    hot_switch: Option<(SwitchId, u64)>,
    /// How bonded NICs place QPs on their members.
    bond_hash: BondHash,
    port_select: LagPortSelect,
    /// The search's work space, kept between destinations.
    dist: Vec<u32>,
    lists: Vec<Vec<Adj>>,
    queue: VecDeque<u32>,
}

impl<'a> RouteBuilder<'a> {
    pub(crate) fn new(
        fabric: &'a Fabric,
        nic_ports: &'a [Vec<PortId>],
        sw_ports: &'a [Vec<PortId>],
        nics: &[NicState],
        switches: &[SwitchState],
        ecmp: EcmpMode,
        hot_switch: Option<(SwitchId, f64)>,
    ) -> Self {
        let graph = Graph::new(fabric);
        // HPCC orders next hops by the addresses of its node objects: hosts (small, heap)
        // below switches (megabytes each, mmap'd top down), so hosts ascend and switches
        // descend by id (docs/hpcc-model.md §3). Otherwise: ascending ids. The order does
        // not depend on the destination, so it is sorted once.
        let rank = |idx: u32| -> u64 {
            match (graph.node(idx), ecmp) {
                (Node::Nic(n), _) => u64::from(nics[n.index()].node_id),
                (Node::Switch(s), EcmpMode::Hpcc) => (1 << 40) - u64::from(switches[s.index()].hash_seed),
                (Node::Switch(s), EcmpMode::Seeded) => (1 << 32) + u64::from(s.0),
            }
        };
        let mut nbr_start = Vec::with_capacity(graph.len() + 1);
        let mut nbrs = Vec::new();
        for v in 0..graph.len() as u32 {
            nbr_start.push(nbrs.len() as u32);
            let first = nbrs.len();
            nbrs.extend_from_slice(graph.adj(v));
            let mine = &mut nbrs[first..];
            mine.sort_by_key(|a| (rank(a.peer), a.port));
            if ecmp == EcmpMode::Hpcc {
                // Parallel links to one neighbour count once, as in that simulator's
                // neighbour map.
                let mut kept: Vec<Adj> = mine.to_vec();
                kept.dedup_by_key(|a| a.peer);
                nbrs.truncate(first);
                nbrs.extend(kept);
            }
        }
        nbr_start.push(nbrs.len() as u32);
        let n = graph.len();
        RouteBuilder {
            fabric,
            graph,
            nbr_start,
            nbrs,
            nic_ports,
            sw_ports,
            hot_switch: hot_switch
                .map(|(s, share)| (s, (share.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u64)),
            bond_hash: BondHash::default(),
            port_select: LagPortSelect::default(),
            dist: vec![u32::MAX; n],
            lists: vec![Vec::new(); n],
            queue: VecDeque::new(),
        }
    }

    /// Places bonded NICs' QPs by `select` and, when it hashes, `policy` (default: hash
    /// by layer3+4).
    pub(crate) fn with_bonds(mut self, policy: BondHash, select: LagPortSelect) -> Self {
        self.bond_hash = policy;
        self.port_select = select;
        self
    }

    fn target(&self, dst: NicId) -> Target {
        let linked: Vec<_> = (0..self.fabric.nics[dst.index()].ports.len() as u16)
            .filter(|p| self.fabric.nics[dst.index()].ports[*p as usize].link.is_some())
            .collect();
        match linked.as_slice() {
            [p] => match self.fabric.attached_switch(dst, *p) {
                Some(sw) => Target::Leaf(self.graph.index(sw.node)),
                None => Target::Nic(dst.0),
            },
            _ => Target::Nic(dst.0),
        }
    }

    /// Computes every route of `reqs`, appending them to `arena`; returns each request's
    /// route. Requests are taken destination by destination, so the search's tables exist
    /// for one destination at a time.
    pub(crate) fn compute(
        &mut self,
        reqs: &[RouteRequest],
        arena: &mut RouteArena,
        switches: &[SwitchState],
    ) -> Vec<RouteId> {
        let mut order: Vec<(Target, u32)> = reqs
            .iter()
            .enumerate()
            .map(|(i, r)| (self.target(r.dst), i as u32))
            .collect();
        order.sort_unstable();
        // Queue affinity: each QP a bonded NIC sends data from takes the NIC's next port as
        // it is created; requests come in creation order (the flows, then each collective's
        // connections). The ACK direction keeps the hash: the simulator gives every flow its
        // own QP pair where a service would reuse one connection's QPs both ways, and
        // counting the responders' QPs too would alternate a server's responses and ACKs
        // over the ports in lockstep, an artefact of that modelling. ACKs are too small
        // for their port to matter.
        let affinity: Vec<Option<u32>> = if self.port_select == LagPortSelect::QueueAffinity {
            let mut next = vec![0u32; self.fabric.nics.len()];
            reqs.iter()
                .map(|r| {
                    (!r.ack).then(|| {
                        let n = &mut next[r.src.index()];
                        *n += 1;
                        *n - 1
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut out = vec![RouteId(u32::MAX); reqs.len()];
        let mut at = 0;
        while at < order.len() {
            let target = order[at].0;
            let end = at + order[at..].iter().take_while(|(t, _)| *t == target).count();
            let root = match target {
                Target::Leaf(l) | Target::Nic(l) => l,
            };
            self.search(root);
            for &(_, i) in &order[at..end] {
                let turn = affinity.get(i as usize).copied().flatten();
                out[i as usize] = self.walk(&reqs[i as usize], turn, root, target, arena, switches);
            }
            at = end;
        }
        out
    }

    /// Next hops towards `root` for every node, in the order a BFS from `root` discovers
    /// them (the HPCC simulator's `CalculateRoute`): nodes are expanded in BFS order with
    /// their neighbours visited by rank, and a node's list grows as its closer neighbours
    /// are expanded. Hosts are never expanded (they do not forward).
    fn search(&mut self, root: u32) {
        self.dist.iter_mut().for_each(|d| *d = u32::MAX);
        self.lists.iter_mut().for_each(Vec::clear);
        self.queue.clear();
        self.dist[root as usize] = 0;
        self.queue.push_back(root);
        while let Some(now) = self.queue.pop_front() {
            let (a, b) = (
                self.nbr_start[now as usize] as usize,
                self.nbr_start[now as usize + 1] as usize,
            );
            for a in &self.nbrs[a..b] {
                let peer = a.peer as usize;
                if self.dist[peer] == u32::MAX {
                    self.dist[peer] = self.dist[now as usize] + 1;
                    if matches!(self.graph.node(a.peer), Node::Switch(_)) {
                        self.queue.push_back(a.peer);
                    }
                }
                if self.dist[now as usize] + 1 == self.dist[peer] {
                    self.lists[peer].push(Adj {
                        port: a.peer_port,
                        link: a.link,
                        peer: now,
                        peer_port: a.port,
                    });
                }
            }
        }
    }

    /// Walks a route from the request's source towards the searched root, picking at each
    /// node one of the equal-cost next hops by MurmurHash3 of the flow key with the node's
    /// seed (HPCC switch-node.cc `EcmpHash`); from a leaf root, the last hop is the leaf's
    /// port to the destination NIC.
    fn walk(
        &self,
        r: &RouteRequest,
        turn: Option<u32>,
        root: u32,
        target: Target,
        arena: &mut RouteArena,
        switches: &[SwitchState],
    ) -> RouteId {
        let graph = &self.graph;
        let mut bytes = [0u8; 12];
        for (i, k) in r.key.iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&k.to_le_bytes());
        }
        let start = RouteId::from(arena.ports.len());
        let mut at = graph.index(Node::Nic(r.src));
        while at != root {
            let hops = &self.lists[at as usize];
            assert!(
                !hops.is_empty(),
                "invariant: every flow's endpoints are connected ({} to {})",
                self.fabric.node_name(Node::Nic(r.src)),
                self.fabric.node_name(Node::Nic(r.dst))
            );
            let (pick, port) = match graph.node(at) {
                Node::Switch(s) => {
                    let seed = switches[s.index()].hash_seed;
                    let h = murmur3_32(&bytes, seed);
                    let hot = self.hot_switch.and_then(|(hot, th)| {
                        let i = hops
                            .iter()
                            .position(|a| graph.node(a.peer) == Node::Switch(hot))?;
                        (hops.len() > 1).then_some((i, th))
                    });
                    let a = match hot {
                        // A second, independent hash decides whether the flow goes to the
                        // favoured switch; the rest spread over the other next hops.
                        Some((i, th)) => {
                            if u64::from(murmur3_32(&bytes, seed ^ HOT_HASH_SALT)) < th {
                                hops[i]
                            } else {
                                let k = h as usize % (hops.len() - 1);
                                hops[if k >= i { k + 1 } else { k }]
                            }
                        }
                        None => hops[h as usize % hops.len()],
                    };
                    (a, self.sw_ports[s.index()][a.port as usize])
                }
                // A NIC of several cabled ports is one device over them (a RoCE LAG): the
                // QP's port is the hash of its headers over every member, whatever the
                // destination, as the NIC's port selection does not know the topology
                // (docs/reference/nic-aggregation.md §2). A member whose far switch cannot
                // reach the destination is skipped.
                Node::Nic(n) => {
                    let reachable = |a: &&Adj| self.dist[a.peer as usize] != u32::MAX;
                    let count = graph.adj(at).iter().filter(reachable).count();
                    let a = if count > 1 {
                        // Without L4 ports in the hash, only the addresses count: every
                        // QP of one host pair on one member (MACs follow the addresses
                        // here, so layer2 behaves as layer2+3).
                        let fields = if self.bond_hash.uses_ports() {
                            &bytes[..]
                        } else {
                            &bytes[..ADDRESS_BYTES]
                        };
                        let pick = match turn {
                            Some(t) => t as usize % count,
                            None => murmur3_32(fields, LAG_HASH_SEED) as usize % count,
                        };
                        *graph
                            .adj(at)
                            .iter()
                            .filter(reachable)
                            .nth(pick)
                            .expect("invariant: pick < count")
                    } else {
                        hops[0]
                    };
                    (a, self.nic_ports[n.index()][a.port as usize])
                }
            };
            arena.ports.push(port);
            at = pick.peer;
        }
        if let Target::Leaf(_) = target {
            let Node::Switch(leaf) = graph.node(root) else {
                unreachable!("invariant: a leaf target is a switch")
            };
            let p = self
                .fabric
                .attached_switch(r.dst, self.linked_port(r.dst))
                .expect("invariant: a leaf target has its NIC cabled to it");
            arena.ports.push(self.sw_ports[leaf.index()][p.port as usize]);
        }
        start
    }

    fn linked_port(&self, dst: NicId) -> u16 {
        self.fabric.nics[dst.index()]
            .ports
            .iter()
            .position(|p| p.link.is_some())
            .expect("invariant: a leaf target has a linked port") as u16
    }
}
