//! The fabric as the engine runs it, its component: ports, the directed link leaving each,
//! the switches' and NICs' device state, the routes, and the fabric-wide settings. Its
//! fields are its own: handlers take one port, link or device at a time (or a port with
//! the routes, where a QP's path decides what moves), read the settings, and a parallel
//! run moves a partition's ports, links and switches out and back through it.
//!
//! ```compile_fail
//! // A handler cannot take the port array itself.
//! fn ports(f: &xirang_sim::engine::fab::Fab) -> usize {
//!     f.ports.len()
//! }
//! ```

use super::NetConfig;
use super::NicState;
use super::ids::{IdVec, PortId};
use super::link::{Link, Port};
use super::routes::RouteArena;
use super::switch::SwitchState;

/// A partition's share of the fabric: its ports with their counters, the links whose
/// packets arrive at its devices, and its switches.
pub(crate) type Owned<C> = (
    Vec<(PortId, Port, C)>,
    Vec<(PortId, Link)>,
    Vec<(u32, SwitchState)>,
);

/// Ports, links, devices and routes.
pub struct Fab {
    ports: IdVec<PortId, Port>,
    /// The directed link leaving each port (same index as the port).
    links: IdVec<PortId, Link>,
    /// Each port's name (`h3/mlx5_0/1`, `leaf2:7`).
    port_names: IdVec<PortId, String>,
    switches: Vec<SwitchState>,
    nics: Vec<NicState>,
    routes: RouteArena,
    net: NetConfig,
    /// Some NIC port has a `gdr_off` credit gate.
    rx_gated: bool,
}

impl Fab {
    /// The fabric of a run: its ports and links (one per port), their names, its devices
    /// and settings; routes come later.
    pub(crate) fn new(
        ports: IdVec<PortId, Port>,
        links: IdVec<PortId, Link>,
        port_names: IdVec<PortId, String>,
        switches: Vec<SwitchState>,
        nics: Vec<NicState>,
        net: NetConfig,
    ) -> Fab {
        Fab {
            ports,
            links,
            port_names,
            switches,
            nics,
            routes: RouteArena::default(),
            net,
            rx_gated: false,
        }
    }

    /// Port `p`.
    #[inline(always)]
    pub(crate) fn port(&self, p: PortId) -> &Port {
        &self.ports[p]
    }

    /// Port `p`, to change.
    #[inline(always)]
    pub(crate) fn port_mut(&mut self, p: PortId) -> &mut Port {
        &mut self.ports[p]
    }

    /// Every port, in order.
    pub(crate) fn ports(&self) -> impl Iterator<Item = (PortId, &Port)> {
        self.ports.iter_enumerated()
    }

    /// Every port, to change, in order.
    pub(crate) fn ports_mut(&mut self) -> impl Iterator<Item = &mut Port> {
        self.ports.iter_mut()
    }

    /// The link leaving port `p`.
    #[inline(always)]
    pub(crate) fn link(&self, p: PortId) -> &Link {
        &self.links[p]
    }

    /// The link leaving port `p`, to change.
    #[inline(always)]
    pub(crate) fn link_mut(&mut self, p: PortId) -> &mut Link {
        &mut self.links[p]
    }

    /// Every link, in port order.
    pub(crate) fn links(&self) -> impl Iterator<Item = &Link> {
        self.links.iter()
    }

    /// Every link, to change, in port order.
    pub(crate) fn links_mut(&mut self) -> impl Iterator<Item = &mut Link> {
        self.links.iter_mut()
    }

    /// Marks as cut each link `cut(device it leaves, device it reaches)` says is: what a
    /// partition puts on a cut link goes to another partition.
    pub(crate) fn cut_links(&mut self, cut: impl Fn(u32, u32) -> bool) {
        for (link, port) in self.links.iter_mut().zip(self.ports.iter()) {
            link.cut = cut(port.dev_idx, link.to_dev);
        }
    }

    /// Port `p`'s name.
    pub(crate) fn port_name(&self, p: PortId) -> &str {
        &self.port_names[p]
    }

    /// Switch `s`.
    #[inline(always)]
    pub(crate) fn switch(&self, s: usize) -> &SwitchState {
        &self.switches[s]
    }

    /// Switch `s` and its port `p`, both to change (a packet's buffer accounting).
    #[inline(always)]
    pub(crate) fn switch_and_port_mut(&mut self, s: usize, p: PortId) -> (&mut SwitchState, &mut Port) {
        (&mut self.switches[s], &mut self.ports[p])
    }

    /// Every switch, in order.
    pub(crate) fn switches(&self) -> &[SwitchState] {
        &self.switches
    }

    /// NIC `n`.
    #[inline(always)]
    pub(crate) fn nic(&self, n: usize) -> &NicState {
        &self.nics[n]
    }

    /// Every NIC, in order.
    pub(crate) fn nics(&self) -> &[NicState] {
        &self.nics
    }

    /// The routes.
    #[inline(always)]
    pub(crate) fn routes(&self) -> &RouteArena {
        &self.routes
    }

    /// The ports route `r` leaves from, in order.
    #[inline]
    pub(crate) fn route_ports(&self, r: super::ids::RouteId) -> impl Iterator<Item = PortId> + '_ {
        self.routes.ports_of(r, &self.ports)
    }

    /// The routes, to add or move one.
    pub(crate) fn routes_mut(&mut self) -> &mut RouteArena {
        &mut self.routes
    }

    /// The routes with the switches they are computed over, to compute them.
    pub(crate) fn routes_and_switches(&mut self) -> (&mut RouteArena, &[SwitchState]) {
        (&mut self.routes, &self.switches)
    }

    /// The routes, and port `p` to change (a port's QPs follow their routes).
    #[inline]
    pub(crate) fn routes_and_port_mut(&mut self, p: PortId) -> (&RouteArena, &mut Port) {
        (&self.routes, &mut self.ports[p])
    }

    /// The fabric-wide settings.
    #[inline(always)]
    pub(crate) fn net(&self) -> &NetConfig {
        &self.net
    }

    /// Whether some NIC port has a `gdr_off` credit gate.
    #[inline(always)]
    pub(crate) fn rx_gated(&self) -> bool {
        self.rx_gated
    }

    /// Some NIC port has a `gdr_off` credit gate.
    pub(crate) fn gate_rx(&mut self) {
        self.rx_gated = true;
    }

    /// Takes the ports (with their counters, given), links and switches a partition's
    /// devices own, per `owns_port`, `owns_link` and `owns_switch`.
    pub(crate) fn take_owned<C>(
        &mut self,
        counters: IdVec<PortId, C>,
        owns_port: impl Fn(&Port) -> bool,
        owns_link: impl Fn(&Link) -> bool,
        owns_switch: impl Fn(usize) -> bool,
    ) -> Owned<C> {
        let port_owned: Vec<bool> = self.ports.iter().map(&owns_port).collect();
        let ports = std::mem::take(&mut self.ports)
            .into_iter_enumerated()
            .zip(counters.into_iter_enumerated())
            .filter(|((p, _), _)| port_owned[p.idx()])
            .map(|((p, port), (_, c))| (p, port, c))
            .collect();
        let links = std::mem::take(&mut self.links)
            .into_iter_enumerated()
            .filter(|(_, l)| owns_link(l))
            .collect();
        let switches = std::mem::take(&mut self.switches)
            .into_iter()
            .enumerate()
            .filter(|(s, _)| owns_switch(*s))
            .map(|(s, sw)| (s as u32, sw))
            .collect();
        (ports, links, switches)
    }

    /// Puts port `p` back from the partition that ran it.
    pub(crate) fn set_port(&mut self, p: PortId, port: Port) {
        self.ports[p] = port;
    }

    /// Puts the link leaving `p` back from the partition where its packets arrive.
    pub(crate) fn set_link(&mut self, p: PortId, link: Link) {
        self.links[p] = link;
    }

    /// Puts switch `s` back from the partition that ran it.
    pub(crate) fn set_switch(&mut self, s: usize, sw: SwitchState) {
        self.switches[s] = sw;
    }
}
