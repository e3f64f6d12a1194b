//! Routes: the egress port at every hop from a sending NIC to a receiving NIC, computed
//! once per QP as the switches would forward the QP's packets (ECMP by a hash of the flow
//! key), and stored back to back in one arena. Forwarding a packet is a lookup of its
//! route at its hop index.

use std::collections::VecDeque;

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

/// Computes routes for a run: the fabric's graph, each destination's next-hop lists (kept
/// while routes to it are computed), and how switches hash.
pub(crate) struct RouteBuilder<'a> {
    fabric: &'a Fabric,
    graph: Graph,
    hop_cache: Vec<Option<Vec<Vec<Adj>>>>,
    nic_ports: &'a [Vec<PortId>],
    sw_ports: &'a [Vec<PortId>],
    ecmp: EcmpMode,
    /// `ecmp_imbalance`: the favoured switch and the share of flows sent to it, as a
    /// threshold on a 32-bit hash.
    hot_switch: Option<(SwitchId, u64)>,
}

impl<'a> RouteBuilder<'a> {
    pub(crate) fn new(
        fabric: &'a Fabric,
        nic_ports: &'a [Vec<PortId>],
        sw_ports: &'a [Vec<PortId>],
        ecmp: EcmpMode,
        hot_switch: Option<(SwitchId, f64)>,
    ) -> Self {
        RouteBuilder {
            fabric,
            graph: Graph::new(fabric),
            hop_cache: vec![None; fabric.nics.len()],
            nic_ports,
            sw_ports,
            ecmp,
            hot_switch: hot_switch
                .map(|(s, share)| (s, (share.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u64)),
        }
    }

    /// Computes a route from `src` to `dst` hop by hop, as switches would forward it: at
    /// each node one of the equal-cost next hops is picked by MurmurHash3 of the flow key
    /// with the node's seed (HPCC switch-node.cc `EcmpHash`). Appends it to `arena` and
    /// returns it; the route lists the egress port at every hop, NIC first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn route(
        &mut self,
        arena: &mut RouteArena,
        nics: &[NicState],
        switches: &[SwitchState],
        src: NicId,
        dst: NicId,
        key: [u32; 3],
    ) -> RouteId {
        let (graph, ecmp) = (&self.graph, self.ecmp);
        let lists = self.hop_cache[dst.index()].get_or_insert_with(|| {
            // HPCC orders next hops by the addresses of its node objects: hosts (small,
            // heap) below switches (megabytes each, mmap'd top down), so hosts ascend and
            // switches descend by id (docs/hpcc-model.md §3). Otherwise: ascending ids.
            let rank = |idx: u32| -> u64 {
                match (graph.node(idx), ecmp) {
                    (Node::Nic(n), _) => u64::from(nics[n.index()].node_id),
                    (Node::Switch(s), EcmpMode::Hpcc) => (1 << 40) - u64::from(switches[s.index()].hash_seed),
                    (Node::Switch(s), EcmpMode::Seeded) => (1 << 32) + u64::from(s.0),
                }
            };
            next_hop_lists(graph, graph.index(Node::Nic(dst)), &rank, ecmp == EcmpMode::Hpcc)
        });
        let mut bytes = [0u8; 12];
        for (i, k) in key.iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&k.to_le_bytes());
        }
        let start = RouteId::from(arena.ports.len());
        let mut at = graph.index(Node::Nic(src));
        let target = graph.index(Node::Nic(dst));
        while at != target {
            let hops = &lists[at as usize];
            assert!(
                !hops.is_empty(),
                "invariant: every flow's endpoints are connected ({} to {})",
                self.fabric.node_name(Node::Nic(src)),
                self.fabric.node_name(Node::Nic(dst))
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
                // A multi-port NIC spreads QPs over its ports by the same key.
                Node::Nic(n) => {
                    let a = hops[murmur3_32(&bytes, 0) as usize % hops.len()];
                    (a, self.nic_ports[n.index()][a.port as usize])
                }
            };
            arena.ports.push(port);
            at = pick.peer;
        }
        start
    }
}

/// Next hops towards `dst` for every node, in the order a BFS from `dst` discovers them
/// (the HPCC simulator's `CalculateRoute`): nodes are expanded in BFS order with their
/// neighbours visited by `rank`, and a node's list grows as its closer neighbours are
/// expanded. Hosts are never expanded (they do not forward). With `one_per_neighbour`,
/// parallel links to the same neighbour count once, as in that simulator's neighbour map.
fn next_hop_lists(
    graph: &Graph,
    dst: u32,
    rank: &dyn Fn(u32) -> u64,
    one_per_neighbour: bool,
) -> Vec<Vec<Adj>> {
    let n = graph.len();
    let mut dist = vec![u32::MAX; n];
    let mut lists: Vec<Vec<Adj>> = vec![Vec::new(); n];
    let mut queue = VecDeque::new();
    dist[dst as usize] = 0;
    queue.push_back(dst);
    let is_switch = |i: u32| matches!(graph.node(i), Node::Switch(_));
    while let Some(now) = queue.pop_front() {
        let mut nbrs: Vec<Adj> = graph.adj(now).to_vec();
        nbrs.sort_by_key(|a| (rank(a.peer), a.port));
        if one_per_neighbour {
            nbrs.dedup_by_key(|a| a.peer);
        }
        for a in nbrs {
            if dist[a.peer as usize] == u32::MAX {
                dist[a.peer as usize] = dist[now as usize] + 1;
                if is_switch(a.peer) {
                    queue.push_back(a.peer);
                }
            }
            if dist[now as usize] + 1 == dist[a.peer as usize] {
                lists[a.peer as usize].push(Adj {
                    port: a.peer_port,
                    link: a.link,
                    peer: now,
                    peer_port: a.port,
                });
            }
        }
    }
    lists
}
