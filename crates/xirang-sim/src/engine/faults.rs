//! Injected faults, applied where the hardware would see them and visible only in the
//! counters it exposes: corruption on packets arriving at a port, loss at both ends of a
//! link that is down (and a bond's failover around it), MTU drops, a link trained down
//! (each end's rate), ECN and PFC off on a switch port, a slow receiver and a degraded PCIe
//! link at a NIC, GPUDirect RDMA off. A fault of a link acts on each of its two ends by an
//! event of that end's own.

use xirang_fabric::model::{Fabric, Node, PcieLink};
use xirang_fabric::scenario::{FaultKind, FaultTarget, ResolvedFault};

use super::event::Event;
use super::ids::{FaultId, IdVec, PortId};
use super::{Dev, NEVER, Sim};
use crate::counters::N_PRIO;
use crate::packet::{Kind, Packet};
use crate::queue::Queue;
use crate::rng::{Purpose, Stream};
use crate::time::{PS_PER_S, PS_PER_US, Ps, Rate};

/// Ethernet header (14) and FCS (4) of a frame, outside the IP MTU (the parts of
/// `ROCEV2_HEADER_BYTES`, xirang_fabric::config).
const ETH_HEADER_FCS_BYTES: u32 = 18;

/// Receive buffer of a NIC whose host drains slowly (`slow_receiver` fault): the NIC asks
/// its peer to pause above the XOFF level and to resume below XON. mlx5 receive buffer
/// sizes are per-port configuration (`mlnx_qos --buffer_size`) and not in
/// docs/reference; these levels are a modelling choice, a few jumbo frames apart.
const NIC_RX_XOFF_BYTES: f64 = 65_536.0;
const NIC_RX_XON_BYTES: f64 = 32_768.0;

/// An injected fault as the engine applies it.
#[derive(Debug)]
struct ActiveFault {
    kind: FaultKind,
    /// The port whose receiver sees it.
    port: PortId,
    start: Ps,
    end: Ps,
    /// `LinkErrors`: probability that an arriving packet is corrupted, as a threshold
    /// on a uniform u64 draw.
    threshold: u64,
    rng: Stream,
    /// The kind's parameter: `SlowLink` Gbit/s, `MtuMismatch` bytes, `SlowReceiver`
    /// Gbit/s.
    param: f64,
    /// What the fault changed, restored when it ends: `SlowLink` each end's rate (the
    /// fault's port, then its peer), `EcnOff` whether RED was on.
    saved_rates: [Option<Rate>; 2],
    saved_red: bool,
    /// `PcieDegraded`: the link as it trained, and as it was.
    pcie: Option<PcieLink>,
    saved_pcie: Option<PcieLink>,
}

/// The fault component: the run's injected faults and bond failover. Its state is its
/// own; the handlers of this module change it, the others ask it.
///
/// ```
/// let faults = xirang_sim::engine::faults::Faults::default();
/// assert!(!faults.any());
/// ```
///
/// ```compile_fail
/// let faults = xirang_sim::engine::faults::Faults::default();
/// let _ = faults.active.len(); // private to the fault component
/// ```
#[derive(Debug, Default)]
pub struct Faults {
    /// The faults (few; checked on every arrival only when there are any).
    active: IdVec<FaultId, ActiveFault>,
    /// Bond failover: where each bonded NIC's ports, and the switch ports facing them,
    /// sit in the routes as computed, recorded at the bond's first member event.
    bond_hops: Vec<(PortId, Vec<u32>)>,
}

impl Faults {
    /// True when the run has a fault (arrivals are checked only then).
    #[inline(always)]
    pub fn any(&self) -> bool {
        !self.active.is_empty()
    }

    /// The port whose receiver sees fault `f`.
    pub(crate) fn port_of(&self, f: FaultId) -> PortId {
        self.active[f].port
    }

    /// The arena positions a bond failover has moved, with the port each held as
    /// computed.
    pub(crate) fn failover_originals(&self) -> std::collections::HashMap<u32, PortId> {
        self.bond_hops
            .iter()
            .flat_map(|(p, at)| at.iter().map(move |i| (*i, *p)))
            .collect()
    }
}

/// Receive backlog of a NIC whose host drains slowly.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct SlowRx {
    drain_bps: f64,
    backlog_bytes: f64,
    last: Ps,
}

impl SlowRx {
    /// Drains the backlog up to `now`.
    fn drain_to(&mut self, now: Ps) {
        let drained = (now - self.last) as f64 * self.drain_bps / (8.0 * PS_PER_S as f64);
        self.backlog_bytes = (self.backlog_bytes - drained).max(0.0);
        self.last = now;
    }
}

/// Whether a fault of `kind` acts by time: from its start to its end, by events or
/// packet by packet. The others are applied before the run (`nic_funnel`,
/// `ecmp_imbalance`, `single_qp` to the flows, `gdr_off` to the NICs).
fn timed(kind: FaultKind) -> bool {
    !matches!(
        kind,
        FaultKind::NicFunnel | FaultKind::EcmpImbalance | FaultKind::SingleQp | FaultKind::GdrOff
    )
}

impl Faults {
    /// The first time after `t` (engine time) a fault starts or ends ([`NEVER`]: none):
    /// a fast-forward skip stops short of it (`engine::ffwd`).
    pub(crate) fn next_change_after(&self, t: Ps) -> Ps {
        self.active
            .iter()
            .filter(|f| timed(f.kind))
            .flat_map(|f| [f.start, f.end])
            .filter(|&x| x > t && x != NEVER)
            .min()
            .unwrap_or(NEVER)
    }

    /// Whether a fault started or ended in (`from`, `to`] (engine time).
    pub(crate) fn changed_in(&self, from: Ps, to: Ps) -> bool {
        self.active
            .iter()
            .filter(|f| timed(f.kind))
            .any(|f| [f.start, f.end].iter().any(|&x| x > from && x <= to))
    }

    /// Whether a fault that corrupts packets at random (`link_errors`) is in force at
    /// `t`: its losses are draws a skip would not make, so the run does not skip then.
    pub(crate) fn random_loss_at(&self, t: Ps) -> bool {
        self.active
            .iter()
            .any(|f| f.kind == FaultKind::LinkErrors && f.threshold > 0 && f.start <= t && t < f.end)
    }
}

impl<Q: Queue> Sim<Q> {
    /// A fast-forward skipped `dt` at `now` (engine time): every fault start or end still
    /// to come moves `dt` earlier on the engine's clock, so that it comes at its time in
    /// reported time, and its events are queued again there (by the devices this run
    /// owns); the events left behind find the fault's time changed and do nothing
    /// ([`Sim::fault_event`]). Returns how many starts and ends it moved.
    pub(crate) fn shift_faults(&mut self, now: Ps, dt: Ps) -> u64 {
        let mut moved = 0;
        for i in 0..self.faults.active.len() {
            let id = FaultId(i as u32);
            let f = &mut self.faults.active[id];
            if !timed(f.kind) {
                continue;
            }
            let starts = f.start > now && f.start != NEVER;
            let ends = f.end > now && f.end != NEVER;
            if starts {
                debug_assert!(f.start - dt > now, "invariant: a skip stops short of a fault");
                f.start -= dt;
            }
            if ends {
                debug_assert!(f.end - dt > now, "invariant: a skip stops short of a fault");
                f.end -= dt;
            }
            moved += u64::from(starts) + u64::from(ends);
            self.queue_fault_events(id, starts, ends);
        }
        moved
    }

    /// The first time after `t` (engine time) a fault has an event queued, in any
    /// partition ([`NEVER`]: none): where the next window must start after a skip moved
    /// them (`crate::parallel`), the same in every partition.
    pub(crate) fn next_fault_event_after(&self, t: Ps) -> Ps {
        (0..self.faults.active.len())
            .flat_map(|i| self.fault_events(FaultId(i as u32), true, true))
            .map(|(at, _)| at)
            .filter(|&at| at > t)
            .min()
            .unwrap_or(NEVER)
    }

    /// Queues fault `i`'s events at its start (`starts`) and at its end (`ends`), those
    /// of the devices this run owns, each by its own device.
    fn queue_fault_events(&mut self, i: FaultId, starts: bool, ends: bool) {
        for (t, e) in self.fault_events(i, starts, ends) {
            let dev = self.target_of(e);
            // At set-up every partition builds every device and `schedule` keeps its
            // own (each device queueing its own first events); later a partition queues
            // only what its devices run, each device as if its own event ran, so the tie
            // depends on that device alone.
            if self.sched.in_setup() {
                self.schedule(t, e);
            } else if self.owns(dev) {
                self.sched.act_as(dev);
                self.schedule(t, e);
            }
        }
    }

    /// Fault `i`'s events at its start (`starts`) and at its end (`ends`), in the order
    /// they are queued, whichever partition runs their devices.
    fn fault_events(&self, i: FaultId, starts: bool, ends: bool) -> Vec<(Ps, Event)> {
        let (kind, port, start, end) = {
            let f = &self.faults.active[i];
            (f.kind, f.port, f.start, f.end)
        };
        let at = |end, peer| Event::Fault { fault: i, end, peer };
        let mut events: Vec<(Ps, Event)> = Vec::new();
        match kind {
            // Checked on every arriving packet, or applied to the flows or the NICs
            // before the run.
            FaultKind::LinkErrors
            | FaultKind::MtuMismatch
            | FaultKind::NicFunnel
            | FaultKind::EcmpImbalance
            | FaultKind::SingleQp
            | FaultKind::GdrOff => {}
            // Both ends of the link count it going down; a bond member's link also
            // comes back up, when the fault ends, and its traffic returns.
            FaultKind::LinkDown => {
                if starts {
                    events.extend([(start, at(false, false)), (start, at(false, true))]);
                }
                if ends && end != NEVER && self.bond_of(port).is_some() {
                    events.extend([(end, at(true, false)), (end, at(true, true))]);
                }
            }
            // A link trained down runs slower at both ends.
            FaultKind::SlowLink => {
                if starts {
                    events.extend([(start, at(false, false)), (start, at(false, true))]);
                }
                if ends && end != NEVER {
                    events.extend([(end, at(true, false)), (end, at(true, true))]);
                }
            }
            FaultKind::EcnOff | FaultKind::PfcOff | FaultKind::SlowReceiver | FaultKind::PcieDegraded => {
                if starts {
                    events.push((start, at(false, false)));
                }
                if ends && end != NEVER {
                    events.push((end, at(true, false)));
                }
            }
        }
        events
    }

    /// Applies the faults at receiving port `q` to an arriving packet; true when the
    /// packet is lost (and accounted).
    pub(crate) fn faulted(&mut self, q: PortId, pkt: &Packet) -> bool {
        let now = self.now;
        let mut lost = false;
        for f in self.faults.active.iter_mut() {
            if now < f.start || now >= f.end {
                continue;
            }
            if f.port != q {
                // A link that is down loses what arrives at either of its ends.
                if f.kind == FaultKind::LinkDown && self.fab.port(f.port).peer == q {
                    lost = true;
                }
                continue;
            }
            match f.kind {
                FaultKind::LinkDown => lost = true,
                FaultKind::MtuMismatch => {
                    // The port MTU bounds the IP packet: the frame less its Ethernet
                    // header and FCS.
                    if u32::from(pkt.size).saturating_sub(ETH_HEADER_FCS_BYTES) as f64 > f.param {
                        let c = self.stats.port(q);
                        c.rx_errors += 1;
                        c.rx_oversize += 1;
                        lost = true;
                    }
                }
                // Applied at their start and end events.
                FaultKind::SlowLink
                | FaultKind::EcnOff
                | FaultKind::PfcOff
                | FaultKind::SlowReceiver
                | FaultKind::PcieDegraded
                | FaultKind::NicFunnel
                | FaultKind::EcmpImbalance
                | FaultKind::GdrOff
                | FaultKind::SingleQp => {}
                FaultKind::LinkErrors => {
                    // PFC frames are left alone: a lost pause frame only shortens a
                    // pause, and corrupting them would change nothing the rules read.
                    if pkt.kind != Kind::Pause && f.rng.next_u64() < f.threshold {
                        let c = self.stats.port(q);
                        c.rx_errors += 1;
                        c.symbol_errors += 1;
                        lost = true;
                    }
                }
            }
        }
        if lost {
            self.account_drop(pkt);
        }
        lost
    }

    /// A fault begins or (with `end`) ends at its port, or (with `peer`) at the other end
    /// of the port's link.
    pub(crate) fn fault_event(&mut self, i: FaultId, end: bool, peer: bool) {
        let f = &mut self.faults.active[i];
        if self.now != if end { f.end } else { f.start } {
            // Left behind by a fast-forward skip, which queued it again earlier.
            return;
        }
        let own = f.port;
        let q = if peer { self.fab.port(own).peer } else { own };
        let side = usize::from(peer);
        match (f.kind, end) {
            // Both ends count a link going down; a bond moves the member's traffic.
            (FaultKind::LinkDown, false) => {
                self.stats.port(q).link_downed += 1;
                self.bond_event(q);
            }
            (FaultKind::LinkDown, true) => self.bond_event(q),
            (FaultKind::SlowLink, false) => {
                f.saved_rates[side] = Some(self.fab.port(q).rate);
                self.fab.port_mut(q).rate = Rate::from_gbps(f.param);
            }
            (FaultKind::SlowLink, true) => {
                if let Some(r) = f.saved_rates[side].take() {
                    self.fab.port_mut(q).rate = r;
                }
            }
            (FaultKind::EcnOff, false) => {
                // Scenario validation puts `ecn_off` and `pfc_off` on switch ports.
                f.saved_red = self.fab.port(q).switch().red.enabled;
                self.fab.port_mut(q).switch_mut().red.enabled = false;
            }
            (FaultKind::EcnOff, true) => self.fab.port_mut(q).switch_mut().red.enabled = f.saved_red,
            (FaultKind::PfcOff, off) => self.fab.port_mut(q).switch_mut().pfc_off = !off,
            (FaultKind::SlowReceiver, false) => {
                // Scenario validation puts `slow_receiver` and `pcie_degraded` on NIC ports.
                self.fab.port_mut(q).nic_mut().slow_rx = Some(SlowRx {
                    drain_bps: f.param * 1e9,
                    backlog_bytes: 0.0,
                    last: self.now,
                });
            }
            (FaultKind::PcieDegraded, false) => {
                // Every port of the NIC sees the degraded link; each is capped at its
                // rate on its own (a simplification for multi-port NICs, whose ports
                // would share it).
                let Some(link) = f.pcie else { return };
                f.saved_pcie = self.fab.port(q).nic().pcie;
                let gbps = link.usable_gbps();
                for p in self.nic_port_ids(q) {
                    let port = self.fab.port_mut(p).nic_mut();
                    port.pcie = Some(link);
                    port.host_cap = Some(Rate::from_gbps(gbps));
                    port.slow_rx = Some(SlowRx {
                        drain_bps: gbps * 1e9,
                        backlog_bytes: 0.0,
                        last: self.now,
                    });
                }
            }
            (FaultKind::PcieDegraded, true) => {
                let saved = f.saved_pcie;
                for p in self.nic_port_ids(q) {
                    let port = self.fab.port_mut(p).nic_mut();
                    port.pcie = saved;
                    port.host_cap = None;
                }
                self.end_slow_rx(q);
            }
            (FaultKind::SlowReceiver, true) => self.end_slow_rx(q),
            // Applied to the flows before the run (`nic_funnel`) or per packet.
            (
                FaultKind::LinkErrors
                | FaultKind::MtuMismatch
                | FaultKind::NicFunnel
                | FaultKind::EcmpImbalance
                | FaultKind::GdrOff
                | FaultKind::SingleQp,
                _,
            ) => {}
        }
    }

    /// The member ports of the bond at either end of port `q`'s link: (the NIC's ports,
    /// the NIC side of the link), when that NIC has several ports.
    fn bond_of(&self, q: PortId) -> Option<(Vec<PortId>, PortId)> {
        let nic_side = match self.fab.port(q).dev {
            Dev::Nic(_) => q,
            Dev::Switch(_) => self.fab.port(q).peer,
        };
        let Dev::Nic(_) = self.fab.port(nic_side).dev else {
            return None;
        };
        let members = self.nic_port_ids(nic_side);
        (members.len() > 1).then_some((members, nic_side))
    }

    /// A bond member's link went down or came back, seen at port `q` (either end): at
    /// this end, every hop that left through a member's port leaves through it again if
    /// its link is up, else through the members that are up, in turn (the NIC remaps the
    /// failed port's QPs, hash mode spreading them over the survivors; the switch's
    /// port-channel drops the member), at once, as the NIC reacts to the link event
    /// (docs/reference/nic-aggregation.md §2.2; detection delay not modelled). The state is
    /// recomputed from the faults in force, so overlapping faults, several members down
    /// and members coming back in any order all end where the hardware would. Members
    /// are on one switch (the scenario checks), so a moved route keeps its length and its
    /// next device. The receivers' `gdr_off` gates stay with the port the QP was made for
    /// (a simplification: the two faults do not meet in any case).
    fn bond_event(&mut self, q: PortId) {
        let Some((members, _)) = self.bond_of(q) else {
            return;
        };
        let nic_end = matches!(self.fab.port(q).dev, Dev::Nic(_));
        // This end's port of each member: the NIC's own, or the switch's facing it.
        let ends: Vec<PortId> = members
            .iter()
            .map(|&m| if nic_end { m } else { self.fab.port(m).peer })
            .collect();
        if !nic_end && ends.iter().any(|&e| self.fab.port(e).dev != self.fab.port(q).dev) {
            return;
        }
        // Where each end's port sits in the routes as computed, recorded before the
        // first change at this end.
        for &e in &ends {
            if !self.faults.bond_hops.iter().any(|(p, _)| *p == e) {
                let at = self.fab.routes().positions(e);
                self.faults.bond_hops.push((e, at));
            }
        }
        let now = self.now;
        let up: Vec<bool> = members.iter().map(|&m| !self.link_down_at(m, now)).collect();
        let survivors: Vec<PortId> = ends
            .iter()
            .zip(&up)
            .filter(|(_, u)| **u)
            .map(|(e, _)| *e)
            .collect();
        for (k, &e) in ends.iter().enumerate() {
            let (_, at) = self
                .faults
                .bond_hops
                .iter()
                .find(|(p, _)| *p == e)
                .expect("recorded above");
            let at = at.clone();
            if up[k] || survivors.is_empty() {
                self.fab.routes_mut().set(&at, &[e]);
            } else {
                self.fab.routes_mut().set(&at, &survivors);
            }
        }
        if nic_end {
            self.resync_bond_qps(q);
        }
    }

    /// Whether NIC port `m`'s link is down at `now` by some `link_down` fault, named at
    /// either end.
    fn link_down_at(&self, m: PortId, now: super::Ps) -> bool {
        self.faults.active.iter().any(|f| {
            f.kind == FaultKind::LinkDown
                && now >= f.start
                && now < f.end
                && (f.port == m || self.fab.port(f.port).peer == m)
        })
    }

    /// QPs sending from a NIC whose routes' first hops moved follow them to their new
    /// port. `q` is a port at either end of one of the NIC's links.
    fn resync_bond_qps(&mut self, q: PortId) {
        let Some((members, _)) = self.bond_of(q) else {
            return;
        };
        let mut moved = Vec::new();
        for &m in &members {
            let xport = &self.xport;
            let (routes, port) = self.fab.routes_and_port_mut(m);
            let port = port.nic_mut();
            let before = port.qps.len();
            port.qps.retain(|&qi| {
                let stays = routes.first(xport.tx(qi).route) == m;
                if !stays {
                    moved.push(qi);
                }
                stays
            });
            if port.qps.len() != before {
                port.rr_qp = 0;
            }
        }
        for qi in moved {
            let to = self.fab.routes().first(self.xport.tx(qi).route);
            self.xport.tx_mut(qi).src_port = to;
            self.fab.port_mut(to).nic_mut().qps.push(qi);
            self.kick(to);
        }
        // QPs not yet started take their port from the route when they start
        // (`Sim::start_flow`).
    }

    /// The ports of the NIC that owns port `q`.
    fn nic_port_ids(&self, q: PortId) -> Vec<PortId> {
        let dev = self.fab.port(q).dev;
        self.fab
            .ports()
            .filter(|(_, p)| p.dev == dev)
            .map(|(i, _)| i)
            .collect()
    }

    /// A slow receiver drains at full speed again: resume whatever it paused.
    fn end_slow_rx(&mut self, q: PortId) {
        for q in self.nic_port_ids(q) {
            self.fab.port_mut(q).nic_mut().slow_rx = None;
            for prio in 0..N_PRIO {
                if self.fab.port(q).xoff.contains(prio) {
                    self.send_pfc(q, prio, false);
                }
            }
        }
    }

    /// A slow receiver's NIC accounts a data packet into its backlog and asks its peer to
    /// pause when the backlog passes XOFF. Delivery itself is not delayed (a
    /// simplification: the pause, not the receive queue, is what limits the sender, and
    /// what the counters show).
    pub(crate) fn slow_rx_arrival(&mut self, p: PortId, pkt: &Packet) {
        let now = self.now;
        let prio = pkt.prio as usize;
        let lossless = self.fab.net().pfc_lossless[prio];
        let port = self.fab.port_mut(p);
        let xoff = port.xoff.contains(prio);
        let Some(rx) = port.nic_mut().slow_rx.as_mut() else {
            return;
        };
        rx.drain_to(now);
        rx.backlog_bytes += f64::from(pkt.size);
        let backlog = rx.backlog_bytes;
        let drain_bps = rx.drain_bps;
        if backlog >= NIC_RX_XOFF_BYTES && lossless && !xoff {
            self.send_pfc(p, prio, true);
            self.schedule_rx_drain(p, prio, backlog, drain_bps);
        }
    }

    fn schedule_rx_drain(&mut self, p: PortId, prio: usize, backlog: f64, drain_bps: f64) {
        let wait_s = (backlog - NIC_RX_XON_BYTES).max(0.0) * 8.0 / drain_bps;
        let at = self.now + ((wait_s * PS_PER_S as f64) as Ps).max(1);
        self.schedule(
            at,
            Event::RxDrain {
                port: p,
                prio: prio as u8,
            },
        );
    }

    /// A slow receiver's backlog may have drained to XON: resume the peer, or wait more.
    pub(crate) fn rx_drain(&mut self, p: PortId, prio: usize) {
        let now = self.now;
        let port = self.fab.port_mut(p);
        let xoff = port.xoff.contains(prio);
        let Some(rx) = port.nic_mut().slow_rx.as_mut() else {
            return;
        };
        if !xoff {
            return;
        }
        rx.drain_to(now);
        let (backlog, drain_bps) = (rx.backlog_bytes, rx.drain_bps);
        if backlog <= NIC_RX_XON_BYTES {
            self.send_pfc(p, prio, false);
        } else {
            self.schedule_rx_drain(p, prio, backlog, drain_bps);
        }
    }

    /// Injects the scenario's faults (validated and resolved by the scenario: every port
    /// target has a link). Call before [`Sim::run`].
    pub fn inject(&mut self, fabric: &Fabric, faults: &[ResolvedFault], seed: u64) {
        for (i, rf) in faults.iter().enumerate() {
            let FaultTarget::Port(pr) = rf.target else {
                continue;
            };
            let f = &rf.fault;
            let dev = match pr.node {
                Node::Nic(n) => Dev::Nic(n),
                Node::Switch(s) => Dev::Switch(s),
            };
            let Some((port, _)) = self.fab.ports().find(|(_, p)| p.dev == dev && p.local == pr.port) else {
                continue;
            };
            let start = (f.start_us * PS_PER_US as f64) as Ps;
            let end = f.end_us.map(|e| (e * PS_PER_US as f64) as Ps).unwrap_or(NEVER);
            let loss = f.loss.unwrap_or(0.0).clamp(0.0, 1.0);
            let idx = self.faults.active.push(ActiveFault {
                kind: f.kind,
                port,
                start,
                end,
                threshold: if loss >= 1.0 {
                    u64::MAX
                } else {
                    (loss * u64::MAX as f64) as u64
                },
                rng: Stream::new(seed, Purpose::Fault, i as u64),
                param: f
                    .rate_gbps
                    .or(f.drain_gbps)
                    .or(f.mtu_bytes.map(f64::from))
                    .unwrap_or(0.0),
                saved_rates: [None, None],
                saved_red: false,
                pcie: match pr.node {
                    Node::Nic(n) if f.kind == FaultKind::PcieDegraded => {
                        let mut l = fabric.nics[n.index()].pcie;
                        l.cur_width = f.pcie_width.unwrap_or(l.cur_width);
                        l.cur_speed_gts = f.pcie_speed_gts.unwrap_or(l.cur_speed_gts);
                        Some(l)
                    }
                    _ => None,
                },
                saved_pcie: None,
            });
            self.queue_fault_events(idx, true, true);
            if f.kind == FaultKind::GdrOff {
                // Configuration: in force before the first packet. Each port of the NIC
                // gets the cap on its own (a multi-port NIC would share it, as with
                // `pcie_degraded`); the cap counts wire bytes, headers included.
                let cap = Rate::from_gbps(f.bounce_gbps.unwrap_or(0.0));
                for p in self.nic_port_ids(port) {
                    let n = self.fab.port_mut(p).nic_mut();
                    n.host_cap = Some(cap);
                    n.rx_cap = Some(cap);
                    self.fab.gate_rx();
                }
            }
        }
    }
}
