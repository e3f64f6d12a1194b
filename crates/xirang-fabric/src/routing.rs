//! Shortest-path routing: the graph view of a fabric, ECMP path enumeration between NICs
//! and path MTU.
//!
//! Hosts do not forward: a path may touch a NIC only at its two ends.

use crate::model::{Fabric, LinkId, NicId, Node, PortRef, SwitchId};

/// Sentinel distance of an unreachable node.
pub const UNREACHABLE: u32 = u32::MAX;

/// One adjacency: leaving a node through `port` over `link` arrives at `peer` on `peer_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adj {
    /// Local port.
    pub port: u16,
    /// The link.
    pub link: LinkId,
    /// Dense index of the node at the other end.
    pub peer: u32,
    /// Port at the other end.
    pub peer_port: u16,
}

/// The fabric as a graph over dense node indices: NICs first (index = NIC id), then
/// switches (index = NIC count + switch id).
#[derive(Debug, Clone)]
pub struct Graph {
    n_nics: u32,
    adj: Vec<Vec<Adj>>,
}

/// A path from one NIC to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    /// Hops in order; each leaves `from` and arrives at `to`.
    pub hops: Vec<Hop>,
}

/// One hop of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// The link crossed.
    pub link: LinkId,
    /// Egress port.
    pub from: PortRef,
    /// Ingress port.
    pub to: PortRef,
}

impl Graph {
    /// Builds the graph of a fabric. Adjacency lists are in port order, so every
    /// enumeration below is deterministic.
    pub fn new(fabric: &Fabric) -> Self {
        let n_nics = fabric.nics.len() as u32;
        let mut adj = vec![Vec::new(); fabric.nics.len() + fabric.switches.len()];
        let mut g = Graph {
            n_nics,
            adj: Vec::new(),
        };
        for (i, l) in fabric.links.iter().enumerate() {
            let link = LinkId(i as u32);
            let (a, b) = (g.index(l.a.node), g.index(l.b.node));
            adj[a as usize].push(Adj {
                port: l.a.port,
                link,
                peer: b,
                peer_port: l.b.port,
            });
            adj[b as usize].push(Adj {
                port: l.b.port,
                link,
                peer: a,
                peer_port: l.a.port,
            });
        }
        for a in &mut adj {
            a.sort_by_key(|x| x.port);
        }
        g.adj = adj;
        g
    }

    /// Dense index of a node.
    pub fn index(&self, node: Node) -> u32 {
        match node {
            Node::Nic(n) => n.0,
            Node::Switch(s) => self.n_nics + s.0,
        }
    }

    /// The node of a dense index.
    pub fn node(&self, idx: u32) -> Node {
        if idx < self.n_nics {
            Node::Nic(NicId(idx))
        } else {
            Node::Switch(SwitchId(idx - self.n_nics))
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.adj.len()
    }

    /// True for an empty fabric.
    pub fn is_empty(&self) -> bool {
        self.adj.is_empty()
    }

    /// Adjacencies of a node, in port order.
    pub fn adj(&self, idx: u32) -> &[Adj] {
        &self.adj[idx as usize]
    }

    fn is_nic(&self, idx: u32) -> bool {
        idx < self.n_nics
    }

    /// Hop distance of every node to `dst`, moving only through switches
    /// ([`UNREACHABLE`] where there is no path).
    pub fn distances_to(&self, dst: u32) -> Vec<u32> {
        let mut dist = vec![UNREACHABLE; self.adj.len()];
        let mut queue = std::collections::VecDeque::new();
        dist[dst as usize] = 0;
        queue.push_back(dst);
        while let Some(v) = queue.pop_front() {
            // Only the destination itself and switches forward.
            if v != dst && self.is_nic(v) {
                continue;
            }
            for a in &self.adj[v as usize] {
                if dist[a.peer as usize] == UNREACHABLE {
                    dist[a.peer as usize] = dist[v as usize] + 1;
                    queue.push_back(a.peer);
                }
            }
        }
        dist
    }

    /// Equal-cost next hops from `at` towards the destination `dist` was computed for.
    pub fn next_hops<'a>(&'a self, dist: &'a [u32], at: u32) -> impl Iterator<Item = &'a Adj> + 'a {
        let d = dist[at as usize];
        self.adj[at as usize].iter().filter(move |a| {
            let pd = dist[a.peer as usize];
            d != UNREACHABLE && d > 0 && pd == d - 1 && (pd == 0 || !self.is_nic(a.peer))
        })
    }

    /// Number of equal-cost shortest paths between two NICs (0 if unreachable).
    pub fn count_paths(&self, a: NicId, b: NicId) -> u128 {
        let dist = self.distances_to(b.0);
        if a == b || dist[a.0 as usize] == UNREACHABLE {
            return 0;
        }
        // Paths from v = sum over next hops; memoised bottom-up by distance.
        let mut memo: Vec<Option<u128>> = vec![None; self.adj.len()];
        memo[b.0 as usize] = Some(1);
        fn go(g: &Graph, dist: &[u32], memo: &mut [Option<u128>], v: u32) -> u128 {
            if let Some(c) = memo[v as usize] {
                return c;
            }
            let hops: Vec<u32> = g.next_hops(dist, v).map(|a| a.peer).collect();
            let c = hops.into_iter().map(|p| go(g, dist, memo, p)).sum();
            memo[v as usize] = Some(c);
            c
        }
        go(self, &dist, &mut memo, a.0)
    }

    /// All equal-cost shortest paths between two NICs, at most `limit`, in port order.
    pub fn ecmp_paths(&self, a: NicId, b: NicId, limit: usize) -> Vec<Path> {
        let dist = self.distances_to(b.0);
        let mut out = Vec::new();
        if a == b || dist[a.0 as usize] == UNREACHABLE {
            return out;
        }
        let mut stack = Vec::new();
        self.walk(&dist, a.0, b.0, &mut stack, &mut out, limit);
        out
    }

    fn walk(&self, dist: &[u32], v: u32, dst: u32, stack: &mut Vec<Hop>, out: &mut Vec<Path>, limit: usize) {
        if out.len() >= limit {
            return;
        }
        if v == dst {
            out.push(Path { hops: stack.clone() });
            return;
        }
        for a in self.next_hops(dist, v) {
            stack.push(Hop {
                link: a.link,
                from: PortRef {
                    node: self.node(v),
                    port: a.port,
                },
                to: PortRef {
                    node: self.node(a.peer),
                    port: a.peer_port,
                },
            });
            self.walk(dist, a.peer, dst, stack, out, limit);
            stack.pop();
        }
    }
}

impl Path {
    /// Smallest MTU of any port along the path (both ends of every link).
    pub fn mtu_bytes(&self, fabric: &Fabric) -> u32 {
        self.hops
            .iter()
            .flat_map(|h| [fabric.port_mtu_bytes(h.from), fabric.port_mtu_bytes(h.to)])
            .min()
            .unwrap_or(0)
    }

    /// Slowest link along the path, in Gbit/s.
    pub fn bottleneck_gbps(&self, fabric: &Fabric) -> f64 {
        self.hops
            .iter()
            .map(|h| fabric.links[h.link.index()].rate_gbps)
            .fold(f64::INFINITY, f64::min)
    }

    /// Sum of one-way propagation delays.
    pub fn delay_ns(&self, fabric: &Fabric) -> u64 {
        self.hops
            .iter()
            .map(|h| fabric.links[h.link.index()].delay_ns)
            .sum()
    }
}
