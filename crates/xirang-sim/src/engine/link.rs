//! Ports and links: a port's transmitter (one packet at a time, at the port's rate) and
//! the directed link leaving it (propagation delay, packets in flight in arrival order).
//!
//! A port keeps one pending wake, when it can next send; a link keeps its packets in a
//! ring and only its head has an `Arrive` event. Handing a packet to the device at the
//! other end is the only way a device affects another.

use std::collections::VecDeque;

use xirang_fabric::config::RedProfile;
use xirang_fabric::model::PcieLink;

use super::event::Event;
use super::ids::{PortId, QpId};
use super::prios::Prios;
use super::{Dev, NEVER, Sim};
use crate::counters::N_PRIO;
use crate::packet::{Kind, Packet};
use crate::queue::{Queue, Tie};
use crate::rng::Stream;
use crate::time::{Ps, Rate};

/// A PFC frame is a minimum-size Ethernet frame (docs/reference/congestion-control.md §6).
pub const PFC_FRAME_BYTES: u16 = 64;

/// One port of a NIC or switch: its transmitter, its per-priority state, and what only a
/// NIC's port or only a switch's port has ([`Role`]: [`NicPort`] or [`SwitchPort`], reached
/// through [`Port::nic`] and [`Port::switch`], so NIC-only state is never read on a
/// switch's port by accident).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Port {
    pub(crate) dev: Dev,
    /// The device's dense index (`Sim::dev_index`): what event ties name.
    pub(crate) dev_idx: u32,
    pub(crate) local: u16,
    /// The port at the other end of this port's link.
    pub(crate) peer: PortId,
    pub(crate) rate: Rate,
    pub(crate) busy_until: Ps,
    pub(crate) wake_at: Ps,
    /// PFC frames to send, ahead of everything.
    pub(crate) ctrl: VecDeque<Packet>,
    /// Invariant: bit p set iff `egress[p].queue` is non-empty. Only [`Port::push_q`] and
    /// [`Port::pop_q`] touch the queues.
    pub(crate) nonempty: Prios,
    /// Bit p set when a pause was received on p that may still be in force;
    /// [`Port::paused`] clears it once the pause ended.
    pub(crate) pause_mask: Prios,
    /// DWRR round-robin pointer.
    pub(crate) rr: u8,
    /// The queue under `rr` already got its quantum for this turn.
    pub(crate) turn_credited: bool,
    /// Priorities on which this port told its peer to pause (XOFF sent, no XON yet).
    pub(crate) xoff: Prios,
    /// Per-priority state by when a packet touches it ([`Ingress`], [`Egress`], [`PrioPfc`]).
    pub(crate) ingress: [Ingress; N_PRIO],
    pub(crate) egress: [Egress; N_PRIO],
    pub(crate) pfc: [PrioPfc; N_PRIO],
    /// What only a NIC's or only a switch's port has.
    pub(crate) role: Role,
}

/// The part of a port only a NIC's or only a switch's port has.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Role {
    Nic(NicPort),
    Switch(SwitchPort),
}

/// What only a NIC's port has: the QPs sending through it, its PCIe link, and the state
/// of the host-side faults.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct NicPort {
    /// QPs sending through this port.
    pub(crate) qps: Vec<QpId>,
    pub(crate) rr_qp: usize,
    /// `slow_receiver` fault: the host's drain rate and receive backlog.
    pub(crate) slow_rx: Option<super::faults::SlowRx>,
    /// The NIC's PCIe link (what it reports).
    pub(crate) pcie: Option<PcieLink>,
    /// `pcie_degraded` fault: the host-side rate data can leave at, and when the
    /// host side is next free.
    pub(crate) host_cap: Option<Rate>,
    pub(crate) host_free_at: Ps,
    /// `gdr_off` fault: the rate the host grants its senders credit at (receive bounce
    /// through host memory), and when the next credit is free. Senders wait for it;
    /// nothing pauses.
    pub(crate) rx_cap: Option<Rate>,
    pub(crate) rx_free_at: Ps,
}

/// What only a switch's port has: the headroom of its ingress, the RED profile and random
/// stream of its egress, and the `pfc_off` fault.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct SwitchPort {
    /// Headroom for bytes arriving after XOFF.
    pub(crate) headroom: u64,
    /// RED profile of this egress port.
    pub(crate) red: RedProfile,
    pub(crate) ecn_rng: Stream,
    /// `pfc_off` fault: packets entering here are admitted as lossy and never paused.
    pub(crate) pfc_off: bool,
}

impl SwitchPort {
    /// A switch port with `headroom` bytes of ingress headroom, marking with `red` drawn
    /// from `ecn_rng`.
    pub(crate) fn new(headroom: u64, red: RedProfile, ecn_rng: Stream) -> SwitchPort {
        SwitchPort {
            headroom,
            red,
            ecn_rng,
            pfc_off: false,
        }
    }
}

/// What a packet entering through a port touches, per priority: the receive counters and
/// the switch's ingress accounting. A port's per-priority state is kept in three arrays by
/// when it is touched, not as one block per priority, so that what one step of a packet
/// touches sits on one cache line. That saved about 1 % of instructions but no measurable
/// wall time at 8,192 hosts, where each of those lines is still a miss (BENCHMARKS.md,
/// "Per-port state laid out for the cache").
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[repr(C, align(32))]
pub(crate) struct Ingress {
    /// Bytes and packets received: the only receive counters touched per packet (a
    /// packet counts as received when it reaches the port, whatever happens to it then).
    pub(crate) rx_bytes: u64,
    pub(crate) rx_packets: u64,
    /// Switch ingress accounting of packets that entered here (HPCC switch-mmu model).
    pub(crate) ing: u64,
    pub(crate) hdrm: u64,
}

/// What a packet leaving through a port touches, per priority: its queue, the bytes
/// queued, the DWRR deficit and the transmit counters. One cache line.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[repr(C, align(64))]
pub(crate) struct Egress {
    /// Egress queue (at NICs: ACKs, NACKs and CNPs only; data comes from QPs). Packets live
    /// in the queues and link rings themselves: moving 40 bytes along a ring is cheaper than
    /// chasing an id into a pool, and the rings never shrink, so nothing is allocated per
    /// packet once they have grown.
    pub(crate) queue: VecDeque<Packet>,
    /// Switch egress bytes queued (RED input).
    pub(crate) egr: u64,
    pub(crate) deficit: i64,
    pub(crate) tx_bytes: u64,
    pub(crate) tx_packets: u64,
}

/// Per-priority state that PFC touches, and the queue's peak.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct PrioPfc {
    /// PFC received: transmitter paused until this time.
    pub(crate) paused_until: Ps,
    pub(crate) pause_since: Ps,
    pub(crate) xoff_since: Ps,
    /// Peak egress queue bytes (switch ports).
    pub(crate) watermark: u64,
    pub(crate) pfc_gen: u32,
}

impl Default for PrioPfc {
    fn default() -> Self {
        PrioPfc {
            paused_until: 0,
            pause_since: NEVER,
            xoff_since: NEVER,
            watermark: 0,
            pfc_gen: 0,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Ingress>() == 32 && std::mem::size_of::<Egress>() == 64);

/// The directed link leaving a port: what is on the wire, towards the peer port.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Link {
    pub(crate) delay: Ps,
    /// Dense index of the device at the other end (where `Arrive` events happen).
    pub(crate) to_dev: u32,
    /// The device at the other end is in another partition: packets put on this link
    /// go to the partition's outbox, and arrive there.
    pub(crate) cut: bool,
    /// Packets on the link with their arrival times and the ties of their `Arrive`
    /// events, earliest first. A packet's tie is taken when it is sent, so its arrival
    /// orders the same whoever queues the event: the sender for a packet put on an empty
    /// link, the receiver when the packet before it arrives, or, across a partition, the
    /// receiving partition when the packet reaches it.
    pub(crate) in_flight: VecDeque<(Ps, Tie, Packet)>,
}

impl Link {
    pub(crate) fn new(delay: Ps, to_dev: u32) -> Self {
        Link {
            delay,
            to_dev,
            cut: false,
            in_flight: VecDeque::new(),
        }
    }
}

impl Port {
    pub(crate) fn new(dev: Dev, dev_idx: u32, local: u16, peer: PortId, rate: Rate, role: Role) -> Self {
        debug_assert_eq!(
            matches!(dev, Dev::Nic(_)),
            matches!(role, Role::Nic(_)),
            "a port's role is its device's kind"
        );
        Port {
            dev,
            dev_idx,
            local,
            peer,
            rate,
            busy_until: 0,
            wake_at: NEVER,
            ctrl: VecDeque::new(),
            nonempty: Prios::NONE,
            pause_mask: Prios::NONE,
            rr: 0,
            turn_credited: false,
            xoff: Prios::NONE,
            ingress: [Ingress::default(); N_PRIO],
            egress: std::array::from_fn(|_| Egress::default()),
            pfc: [PrioPfc::default(); N_PRIO],
            role,
        }
    }

    /// The NIC-only part of a NIC's port.
    #[inline(always)]
    pub(crate) fn nic(&self) -> &NicPort {
        match &self.role {
            Role::Nic(n) => n,
            Role::Switch(_) => wrong_role("a NIC's", self.dev),
        }
    }

    /// The NIC-only part of a NIC's port, to change.
    #[inline(always)]
    pub(crate) fn nic_mut(&mut self) -> &mut NicPort {
        match &mut self.role {
            Role::Nic(n) => n,
            Role::Switch(_) => wrong_role("a NIC's", self.dev),
        }
    }

    /// The NIC-only part, if this is a NIC's port.
    pub(crate) fn as_nic(&self) -> Option<&NicPort> {
        match &self.role {
            Role::Nic(n) => Some(n),
            Role::Switch(_) => None,
        }
    }

    /// The switch-only part of a switch's port.
    #[inline(always)]
    pub(crate) fn switch(&self) -> &SwitchPort {
        match &self.role {
            Role::Switch(s) => s,
            Role::Nic(_) => wrong_role("a switch's", self.dev),
        }
    }

    /// The switch-only part of a switch's port, to change.
    #[inline(always)]
    pub(crate) fn switch_mut(&mut self) -> &mut SwitchPort {
        match &mut self.role {
            Role::Switch(s) => s,
            Role::Nic(_) => wrong_role("a switch's", self.dev),
        }
    }

    #[inline(always)]
    pub(crate) fn push_q(&mut self, prio: usize, pkt: Packet) {
        self.egress[prio].queue.push_back(pkt);
        self.nonempty.insert(prio);
    }

    /// Pops the head of a queue; an emptied queue loses its DWRR deficit.
    #[inline(always)]
    pub(crate) fn pop_q(&mut self, prio: usize) -> Packet {
        let pkt = self.egress[prio]
            .queue
            .pop_front()
            .expect("invariant: popped queues are non-empty");
        if self.egress[prio].queue.is_empty() {
            self.nonempty.remove(prio);
            self.egress[prio].deficit = 0;
        }
        pkt
    }
}

#[cold]
#[inline(never)]
fn wrong_role(wanted: &str, dev: Dev) -> ! {
    panic!("invariant: a handler asked for {wanted} port state on a port of {dev:?}")
}

impl<Q: Queue> Sim<Q> {
    #[inline(always)]
    pub(crate) fn schedule_wake(&mut self, p: PortId, t: Ps) {
        let port = self.fab.port_mut(p);
        if port.wake_at <= t {
            return;
        }
        port.wake_at = t;
        self.schedule(t, Event::Wake(p));
    }

    /// Something may be sendable on port `p`: send now or schedule a wake.
    #[inline(always)]
    pub(crate) fn kick(&mut self, p: PortId) {
        let busy = self.fab.port(p).busy_until;
        if busy > self.now {
            self.schedule_wake(p, busy);
        } else if self.fab.port(p).wake_at > self.now {
            self.try_send(p);
        }
    }

    pub(crate) fn try_send(&mut self, p: PortId) {
        let busy = self.fab.port(p).busy_until;
        if busy > self.now {
            self.schedule_wake(p, busy);
            return;
        }
        match self.fab.port(p).dev {
            Dev::Switch(_) => self.switch_send(p),
            Dev::Nic(_) => self.nic_send(p),
        }
    }

    /// Puts a packet on the wire of port `p`.
    #[inline(always)]
    pub(crate) fn transmit(&mut self, p: PortId, pkt: Packet) {
        let (size, prio) = (pkt.size, pkt.prio);
        let now = self.now;
        let port = self.fab.port_mut(p);
        let tx = port.rate.tx_time(u32::from(size));
        port.busy_until = now + tx;
        let st = &mut port.egress[prio as usize];
        st.tx_bytes += u64::from(size);
        st.tx_packets += 1;
        if pkt.kind == Kind::Pause {
            // Counted when sent, like the hardware counter (and like the transmit counters
            // it is subtracted from).
            self.stats.port(p).tx_pause[prio as usize] += 1;
        }
        let (delay, to_dev, cut) = {
            let l = self.fab.link_mut(p);
            (l.delay, l.to_dev, l.cut)
        };
        let at = now + tx + delay;
        let tie = self.tie(at, to_dev);
        self.stats.hop();
        if cut {
            self.ship(p, at, tie, pkt);
            return;
        }
        self.put_on_link(p, at, tie, pkt);
    }

    /// Puts a packet on the ring of the link leaving `p`, and queues its arrival if it
    /// is the ring's head.
    #[inline(always)]
    pub(crate) fn put_on_link(&mut self, p: PortId, at: Ps, tie: Tie, pkt: Packet) {
        let link = self.fab.link_mut(p);
        let was_empty = link.in_flight.is_empty();
        link.in_flight.push_back((at, tie, pkt));
        if was_empty {
            self.q.push(at, tie, Event::Arrive(p).encode());
        }
    }

    /// The head packet of the link leaving `p` arrives at the peer port.
    pub(crate) fn arrive(&mut self, p: PortId) {
        let link = self.fab.link_mut(p);
        let (_, _, pkt) = link
            .in_flight
            .pop_front()
            .expect("invariant: an Arrive event has a packet in flight");
        if let Some(&(next, tie, _)) = link.in_flight.front() {
            self.q.push(next, tie, Event::Arrive(p).encode());
        }
        let q = self.fab.port(p).peer;
        let st = &mut self.fab.port_mut(q).ingress[pkt.prio as usize];
        st.rx_bytes += u64::from(pkt.size);
        st.rx_packets += 1;
        if self.faults.any() && self.faulted(q, &pkt) {
            return;
        }
        match self.fab.port(q).dev {
            Dev::Switch(s) => self.switch_receive(s, q, pkt),
            Dev::Nic(_) => self.nic_receive(q, pkt),
        }
    }

    /// Priorities of port `p` with packets waiting and no pause in force.
    #[inline(always)]
    pub(crate) fn sendable(&mut self, p: PortId) -> Prios {
        let port = self.fab.port(p);
        let mut ready = port.nonempty;
        for prio in ready.and(port.pause_mask).iter() {
            if self.is_paused(p, prio) {
                ready.remove(prio);
            }
        }
        ready
    }
}
