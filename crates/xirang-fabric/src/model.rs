//! The fabric model: hosts with their PCIe placement, NICs, switches and links.
//!
//! Components live in flat arenas indexed by typed ids ([`HostId`], [`NicId`], [`GpuId`],
//! [`SwitchId`], [`LinkId`]), so the simulator and the router can keep plain `u32`s instead
//! of names. Names are kept for people and for files.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into its arena.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// Index of a host in [`Fabric::hosts`].
    HostId
);
id_type!(
    /// Index of a NIC in [`Fabric::nics`] (global across hosts).
    NicId
);
id_type!(
    /// Index of a GPU in [`Fabric::gpus`] (global across hosts).
    GpuId
);
id_type!(
    /// Index of a switch in [`Fabric::switches`].
    SwitchId
);
id_type!(
    /// Index of a link in [`Fabric::links`].
    LinkId
);

/// The tier of a switch in a Clos fabric. A fat-tree's edge switches are leaves and its
/// aggregation switches are spines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Top-of-rack / edge / rail switch: the switch hosts plug into.
    Leaf,
    /// Second tier (spine, or aggregation in a three-tier fat-tree).
    Spine,
    /// Third tier (core of a fat-tree, or super-spine).
    Core,
}

impl Tier {
    /// All tiers, bottom up.
    pub const ALL: [Tier; 3] = [Tier::Leaf, Tier::Spine, Tier::Core];

    /// The snake-case name used in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Leaf => "leaf",
            Tier::Spine => "spine",
            Tier::Core => "core",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A PCIe link as Linux reports it in `current_link_speed`/`max_link_speed` (GT/s) and
/// `current_link_width`/`max_link_width` (lanes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieLink {
    /// Negotiated speed in GT/s (2.5, 5, 8, 16, 32, 64).
    pub cur_speed_gts: f64,
    /// Negotiated width in lanes.
    pub cur_width: u8,
    /// Capability of the device: speed in GT/s.
    pub max_speed_gts: f64,
    /// Capability of the device: width in lanes.
    pub max_width: u8,
}

impl PcieLink {
    /// A link running at its full capability.
    pub fn full(speed_gts: f64, width: u8) -> Self {
        PcieLink {
            cur_speed_gts: speed_gts,
            cur_width: width,
            max_speed_gts: speed_gts,
            max_width: width,
        }
    }

    /// True when the link trained below its capability (MISSION 1.2: a defect).
    pub fn is_downgraded(&self) -> bool {
        self.cur_speed_gts < self.max_speed_gts || self.cur_width < self.max_width
    }

    /// Usable one-direction bandwidth in Gbit/s after line encoding (8b/10b up to Gen2,
    /// 128b/130b from Gen3), ignoring TLP overhead.
    pub fn usable_gbps(&self) -> f64 {
        let encoding = if self.cur_speed_gts <= 5.0 {
            8.0 / 10.0
        } else {
            128.0 / 130.0
        };
        self.cur_speed_gts * f64::from(self.cur_width) * encoding
    }
}

/// A PCIe switch inside a host, under one CPU socket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcieSwitch {
    /// Name, e.g. `pcie0`.
    pub name: String,
    /// CPU socket (NUMA node) the switch's root port belongs to.
    pub socket: u8,
}

/// A server: CPU sockets, PCIe switches, and the GPUs and NICs under them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Host {
    /// Host name, e.g. `h12`.
    pub name: String,
    /// Number of CPU sockets.
    pub sockets: u8,
    /// The host's PCIe switches; GPUs and NICs refer to them by index.
    pub pcie_switches: Vec<PcieSwitch>,
    /// GPUs of this host, in local order (GPU0, GPU1, ...).
    pub gpus: Vec<GpuId>,
    /// NICs of this host, in local order (mlx5_0, mlx5_1, ...).
    pub nics: Vec<NicId>,
}

/// A GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// Local name, e.g. `GPU3`.
    pub name: String,
    /// Owning host.
    pub host: HostId,
    /// Model, e.g. `H100`.
    pub model: String,
    /// Index into the host's `pcie_switches`.
    pub pcie_switch: usize,
    /// The GPU's PCIe link.
    pub pcie: PcieLink,
}

/// A port of a NIC.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicPort {
    /// Highest speed the port supports, in Gbit/s.
    pub speed_gbps: f64,
    /// Interface (netdev) MTU in bytes.
    pub mtu_bytes: u32,
    /// The link plugged into this port, if any.
    pub link: Option<LinkId>,
}

/// An RDMA NIC.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Nic {
    /// RDMA device name, e.g. `mlx5_0`.
    pub name: String,
    /// Owning host.
    pub host: HostId,
    /// Model, e.g. `ConnectX-7`.
    pub model: String,
    /// Firmware version as `fw_ver` reports it, e.g. `28.39.1002`.
    pub firmware: String,
    /// Index into the host's `pcie_switches`.
    pub pcie_switch: usize,
    /// The NIC's PCIe link.
    pub pcie: PcieLink,
    /// Network ports.
    pub ports: Vec<NicPort>,
    /// The NIC's own DCQCN knobs when they differ from its traffic classes' (as read
    /// from a host's mlx5 sysfs, or a scenario's `[[overrides]]`); `None`: its QPs take
    /// their class's settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<crate::config::NicCongestion>,
}

/// A port of a switch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwitchPort {
    /// Port MTU in bytes (SONiC `PORT|EthernetN` `mtu`).
    pub mtu_bytes: u32,
    /// The link plugged into this port, if any.
    pub link: Option<LinkId>,
    /// The port's own ECN marking profile (its lossless queue's SONiC `WRED_PROFILE`, or
    /// a scenario's `[[overrides]]`); `None`: its tier's (`[config.ecn]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecn: Option<crate::config::RedProfile>,
}

/// A switch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Switch {
    /// Name, e.g. `leaf3`.
    pub name: String,
    /// Tier in the Clos.
    pub tier: Tier,
    /// Model / ASIC, free text.
    pub model: String,
    /// Ports, index = port number.
    pub ports: Vec<SwitchPort>,
}

/// A network node: something with ports that links plug into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    /// A NIC.
    Nic(NicId),
    /// A switch.
    Switch(SwitchId),
}

/// One end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PortRef {
    /// The node.
    pub node: Node,
    /// Port index on that node (0-based).
    pub port: u16,
}

/// A full-duplex point-to-point link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// One end.
    pub a: PortRef,
    /// The other end.
    pub b: PortRef,
    /// Signalling rate in Gbit/s, same in both directions.
    pub rate_gbps: f64,
    /// One-way propagation delay in nanoseconds.
    pub delay_ns: u64,
}

impl Link {
    /// The end of the link that is not `end`.
    ///
    /// # Panics
    /// If `end` is neither end of this link.
    pub fn other(&self, end: Node) -> PortRef {
        if self.a.node == end {
            self.b
        } else if self.b.node == end {
            self.a
        } else {
            panic!("invariant: node {end:?} is an end of the link it is asked about")
        }
    }
}

/// The fabric: every host, NIC, GPU, switch and link.
///
/// Built from a scenario's topology section (a generator or an explicit list) and
/// checked on construction: every link end exists, no port carries two links.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Fabric {
    /// Hosts.
    pub hosts: Vec<Host>,
    /// All NICs, across hosts.
    pub nics: Vec<Nic>,
    /// All GPUs, across hosts.
    pub gpus: Vec<Gpu>,
    /// Switches.
    pub switches: Vec<Switch>,
    /// Links.
    pub links: Vec<Link>,
}

/// The largest base RTT and bandwidth-delay product between two NICs, as the HPCC
/// simulator computes them for its window and its `T` (scratch/third.cc, GLOBAL_T 1): over
/// the first shortest path found by a breadth-first search that crosses switches only,
/// RTT = 2 x the propagation delays + one payload's serialization on every link, one way,
/// and BDP = RTT x the path's slowest link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaseRtt {
    /// Largest base RTT, ns.
    pub max_rtt_ns: f64,
    /// Largest bandwidth-delay product, bytes.
    pub max_bdp_bytes: u64,
}

impl Fabric {
    /// [`BaseRtt`] for `payload_bytes` per packet. NICs attached alike (the same switch
    /// port's neighbours with equal links) share one search, so a fat tree costs one
    /// search per leaf switch.
    pub fn base_rtt(&self, payload_bytes: u32) -> BaseRtt {
        let n_sw = self.switches.len();
        // Switch adjacency: (neighbour switch, delay ns, rate Gbit/s); NIC attachments.
        let mut adj: Vec<Vec<(usize, u64, f64)>> = vec![Vec::new(); n_sw];
        let mut attach: Vec<(usize, u64, f64)> = Vec::new();
        for l in &self.links {
            match (l.a.node, l.b.node) {
                (Node::Switch(a), Node::Switch(b)) => {
                    adj[a.index()].push((b.index(), l.delay_ns, l.rate_gbps));
                    adj[b.index()].push((a.index(), l.delay_ns, l.rate_gbps));
                }
                (Node::Nic(_), Node::Switch(s)) | (Node::Switch(s), Node::Nic(_)) => {
                    attach.push((s.index(), l.delay_ns, l.rate_gbps));
                }
                (Node::Nic(_), Node::Nic(_)) => {
                    // A back-to-back cable: one link.
                    attach.push((usize::MAX, l.delay_ns, l.rate_gbps));
                }
            }
        }
        let tx_ns = |gbps: f64| f64::from(payload_bytes) * 8.0 / gbps;
        let mut kinds: Vec<(usize, u64, u64)> = attach.iter().map(|&(s, d, r)| (s, d, r.to_bits())).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let mut best = BaseRtt {
            max_rtt_ns: 0.0,
            max_bdp_bytes: 0,
        };
        let mut keep = |delay: f64, tx: f64, bw: f64| {
            let rtt = 2.0 * delay + tx;
            best.max_rtt_ns = best.max_rtt_ns.max(rtt);
            best.max_bdp_bytes = best.max_bdp_bytes.max((rtt * bw / 8.0) as u64);
        };
        // Per switch: (delay, serialization, min rate) from the source NIC, set once.
        let mut at: Vec<Option<(f64, f64, f64)>> = vec![None; n_sw];
        let mut queue = std::collections::VecDeque::new();
        for &(s, d, r) in &kinds {
            let r = f64::from_bits(r);
            if s == usize::MAX {
                keep(d as f64, tx_ns(r), r);
                continue;
            }
            at.iter_mut().for_each(|x| *x = None);
            at[s] = Some((d as f64, tx_ns(r), r));
            queue.clear();
            queue.push_back(s);
            while let Some(u) = queue.pop_front() {
                let (du, tu, bu) = at[u].expect("queued switches are reached");
                for &(v, dv, rv) in &adj[u] {
                    if at[v].is_none() {
                        at[v] = Some((du + dv as f64, tu + tx_ns(rv), bu.min(rv)));
                        queue.push_back(v);
                    }
                }
            }
            // To every NIC attached to a reached switch.
            for &(t, d2, r2) in &kinds {
                if let Some(sw) = at.get(t).copied().flatten() {
                    keep(
                        sw.0 + d2 as f64,
                        sw.1 + tx_ns(f64::from_bits(r2)),
                        sw.2.min(f64::from_bits(r2)),
                    );
                }
            }
        }
        best
    }

    /// For each NIC, the id of the part of the fabric its links reach (NICs with equal ids
    /// have a path between them; a NIC without a link is alone in its part).
    pub fn nic_components(&self) -> Vec<usize> {
        let n_nic = self.nics.len();
        let index = |node: Node| match node {
            Node::Nic(n) => n.index(),
            Node::Switch(s) => n_nic + s.index(),
        };
        let mut parent: Vec<usize> = (0..n_nic + self.switches.len()).collect();
        fn root(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for l in &self.links {
            let (a, b) = (
                root(&mut parent, index(l.a.node)),
                root(&mut parent, index(l.b.node)),
            );
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        }
        (0..n_nic).map(|i| root(&mut parent, i)).collect()
    }

    /// Human name of a node (`h3/mlx5_0`, `spine1`).
    pub fn node_name(&self, node: Node) -> String {
        match node {
            Node::Nic(n) => {
                let nic = &self.nics[n.index()];
                format!("{}/{}", self.hosts[nic.host.index()].name, nic.name)
            }
            Node::Switch(s) => self.switches[s.index()].name.clone(),
        }
    }

    /// Human name of a port (`h3/mlx5_0/1` with 1-based NIC ports as RDMA tools print
    /// them, `spine1:7` for switch port 7).
    pub fn port_name(&self, p: PortRef) -> String {
        match p.node {
            Node::Nic(_) => format!("{}/{}", self.node_name(p.node), p.port + 1),
            Node::Switch(_) => format!("{}:{}", self.node_name(p.node), p.port),
        }
    }

    /// MTU configured on a port.
    pub fn port_mtu_bytes(&self, p: PortRef) -> u32 {
        match p.node {
            Node::Nic(n) => self.nics[n.index()].ports[p.port as usize].mtu_bytes,
            Node::Switch(s) => self.switches[s.index()].ports[p.port as usize].mtu_bytes,
        }
    }

    /// The MTU at each end of a link (a, b).
    pub fn link_mtu_bytes(&self, l: LinkId) -> (u32, u32) {
        let link = &self.links[l.index()];
        (self.port_mtu_bytes(link.a), self.port_mtu_bytes(link.b))
    }

    /// The link plugged into a port, if any.
    pub fn port_link(&self, p: PortRef) -> Option<LinkId> {
        match p.node {
            Node::Nic(n) => self.nics[n.index()].ports.get(p.port as usize)?.link,
            Node::Switch(s) => self.switches[s.index()].ports.get(p.port as usize)?.link,
        }
    }

    /// Number of ports of a node.
    pub fn port_count(&self, node: Node) -> usize {
        match node {
            Node::Nic(n) => self.nics[n.index()].ports.len(),
            Node::Switch(s) => self.switches[s.index()].ports.len(),
        }
    }

    /// Finds a host by name.
    pub fn host_by_name(&self, name: &str) -> Option<HostId> {
        self.hosts
            .iter()
            .position(|h| h.name == name)
            .map(|i| HostId(i as u32))
    }

    /// The named hosts in the order given, skipping unknown names; all hosts when `names`
    /// is empty (a workload's "all hosts").
    pub fn hosts_named(&self, names: &[String]) -> Vec<&Host> {
        if names.is_empty() {
            self.hosts.iter().collect()
        } else {
            names
                .iter()
                .filter_map(|n| self.host_by_name(n))
                .map(|h| &self.hosts[h.index()])
                .collect()
        }
    }

    /// Finds a switch by name.
    pub fn switch_by_name(&self, name: &str) -> Option<SwitchId> {
        self.switches
            .iter()
            .position(|s| s.name == name)
            .map(|i| SwitchId(i as u32))
    }

    /// Finds a NIC by `host/nic` name.
    pub fn nic_by_name(&self, host: &str, nic: &str) -> Option<NicId> {
        let h = self.host_by_name(host)?;
        self.hosts[h.index()]
            .nics
            .iter()
            .copied()
            .find(|n| self.nics[n.index()].name == nic)
    }

    /// Number of switches of a tier.
    pub fn switch_count(&self, tier: Tier) -> usize {
        self.switches.iter().filter(|s| s.tier == tier).count()
    }

    /// Tiers present in the fabric, bottom up.
    pub fn tiers(&self) -> Vec<Tier> {
        Tier::ALL
            .into_iter()
            .filter(|t| self.switches.iter().any(|s| s.tier == *t))
            .collect()
    }

    /// The switch port a NIC port is cabled to, if its link goes to a switch.
    pub fn attached_switch(&self, nic: NicId, port: u16) -> Option<PortRef> {
        let l = self.nics[nic.index()].ports.get(port as usize)?.link?;
        let other = self.links[l.index()].other(Node::Nic(nic));
        matches!(other.node, Node::Switch(_)).then_some(other)
    }

    /// The NIC closest to a GPU on PCIe, the one NCCL would pair it with: under the same
    /// PCIe switch (PIX), else on the same socket (NODE), else any (SYS); lowest index first.
    pub fn nic_for_gpu(&self, gpu: GpuId) -> Option<NicId> {
        let g = &self.gpus[gpu.index()];
        let host = &self.hosts[g.host.index()];
        let socket = host.pcie_switches[g.pcie_switch].socket;
        let nics = || host.nics.iter().copied();
        nics()
            .find(|n| self.nics[n.index()].pcie_switch == g.pcie_switch)
            .or_else(|| {
                nics().find(|n| host.pcie_switches[self.nics[n.index()].pcie_switch].socket == socket)
            })
            .or_else(|| nics().next())
    }

    /// Adds a link between two ports and records it on both ports.
    ///
    /// # Panics
    /// If a port does not exist or already carries a link; builders check this first and
    /// report it as a scenario error.
    pub(crate) fn connect(&mut self, a: PortRef, b: PortRef, rate_gbps: f64, delay_ns: u64) {
        let id = LinkId(self.links.len() as u32);
        for p in [a, b] {
            let slot = match p.node {
                Node::Nic(n) => &mut self.nics[n.index()].ports[p.port as usize].link,
                Node::Switch(s) => &mut self.switches[s.index()].ports[p.port as usize].link,
            };
            assert!(slot.is_none(), "invariant: a port carries at most one link");
            *slot = Some(id);
        }
        self.links.push(Link {
            a,
            b,
            rate_gbps,
            delay_ns,
        });
    }
}
