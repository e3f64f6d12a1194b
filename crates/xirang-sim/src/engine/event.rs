//! The engine's events: a closed set, each naming the one component it is for.
//!
//! Events travel through the queue as a `u64` (kind in the top byte, a 32-bit target in
//! the low half, 24 bits of detail between), because the queue moves millions of them and
//! an 8-byte payload keeps a bucket entry at 24 bytes. [`Event::encode`] and
//! [`Event::decode`] are exact inverses for every value an event can hold (tested).

use super::ids::{FaultId, FlowId, PortId, QpId};
use crate::queue::EventCode;

/// Bits of the PFC refresh generation carried in an event.
pub(crate) const PFC_GEN_BITS: u32 = 21;
/// Mask of those bits.
pub(crate) const PFC_GEN_MASK: u32 = (1 << PFC_GEN_BITS) - 1;

/// What a proxy (NCCL's progress thread) does for one slice of a connection, at the end
/// of the connection it serves (`engine::transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProxyAction {
    /// Sender: post the next slice's send (its data is written and its clear-to-send came).
    Send = 0,
    /// Sender: a completed send frees its slot for the GPU.
    Head = 1,
    /// Receiver: an arrived slice becomes visible to the GPU (Simple's tail update).
    Tail = 2,
    /// Receiver: post a receive, which writes the clear-to-send to the sender.
    Cts = 3,
    /// Sender: the completion queue's moderation timer.
    CqTx = 4,
    /// Receiver: the completion queue's moderation timer.
    CqRx = 5,
}

impl ProxyAction {
    const ALL: [ProxyAction; 6] = [
        ProxyAction::Send,
        ProxyAction::Head,
        ProxyAction::Tail,
        ProxyAction::Cts,
        ProxyAction::CqTx,
        ProxyAction::CqRx,
    ];

    /// Whether it happens at the connection's sending end.
    pub(crate) fn at_sender(self) -> bool {
        matches!(self, ProxyAction::Send | ProxyAction::Head | ProxyAction::CqTx)
    }
}

/// Something that happens at a time, to one component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A port's transmitter may be able to send (its link is free, a pause or a rate
    /// limiter expired). Superseded wakes are recognised by the port's `wake_at`.
    Wake(PortId),
    /// The head packet of the link leaving this port reaches the port at the other end.
    Arrive(PortId),
    /// A flow's dependencies are met and its start time has come.
    FlowStart(FlowId),
    /// A DCQCN reaction point's rate-decrease check (`rate_reduce_monitor_period`).
    DcqcnDec(QpId),
    /// A DCQCN reaction point's rate-increase timer (`rpg_time_reset`).
    DcqcnInc(QpId),
    /// A QP's local ACK timeout.
    Rto(QpId),
    /// Re-send XOFF on a port still asserting PFC; stale when the generation moved on.
    PfcRefresh {
        /// The port holding its peer paused.
        port: PortId,
        /// Priority.
        prio: u8,
        /// Generation of the XOFF this refresh belongs to.
        generation: u32,
    },
    /// An NVLink transfer inside a host is complete.
    LocalDone(FlowId),
    /// A GPU thread of a collective starts its first iteration (`engine::collective`).
    GpuStart(u32),
    /// A GPU thread of a collective finished its slice.
    GpuDone(u32),
    /// A connection's proxy acts (`engine::transport`).
    Proxy {
        /// The connection.
        conn: u32,
        /// What it does.
        action: ProxyAction,
    },
    /// An injected fault begins, or (`end`) ends, at its port or (`peer`) at the port at
    /// the other end of the port's link: a fault of a link acts on each end separately.
    Fault {
        /// Which fault.
        fault: FaultId,
        /// True when it ends.
        end: bool,
        /// True for the far end of the fault's link.
        peer: bool,
    },
    /// A slow receiver's backlog may have drained below XON.
    RxDrain {
        /// The NIC port.
        port: PortId,
        /// Priority it paused.
        prio: u8,
    },
}

const WAKE: u64 = 0;
const ARRIVE: u64 = 1;
const FLOW_START: u64 = 2;
const DCQCN_DEC: u64 = 3;
const DCQCN_INC: u64 = 4;
const RTO: u64 = 5;
const PFC_REFRESH: u64 = 6;
// 7 was the sample event, now the run loop's own.
const LOCAL_DONE: u64 = 8;
const FAULT: u64 = 9;
const RX_DRAIN: u64 = 10;
// 11 was a collective's NVLink transfer, now a GPU thread's slice (`GPU_DONE`).
const GPU_DONE: u64 = 12;
const PROXY: u64 = 13;
const GPU_START: u64 = 14;

#[inline]
fn pack(kind: u64, a: u32, b: u32) -> u64 {
    debug_assert!(b <= 0xFF_FFFF, "invariant: event detail fits 24 bits");
    (kind << 56) | ((u64::from(b) & 0xFF_FFFF) << 32) | u64::from(a)
}

impl Event {
    /// The queue's 8-byte form.
    #[inline(always)]
    pub(crate) fn encode(self) -> EventCode {
        EventCode(self.encode_bits())
    }

    fn encode_bits(self) -> u64 {
        match self {
            Event::Wake(p) => pack(WAKE, p.0, 0),
            Event::Arrive(p) => pack(ARRIVE, p.0, 0),
            Event::FlowStart(f) => pack(FLOW_START, f.0, 0),
            Event::DcqcnDec(q) => pack(DCQCN_DEC, q.0, 0),
            Event::DcqcnInc(q) => pack(DCQCN_INC, q.0, 0),
            Event::Rto(q) => pack(RTO, q.0, 0),
            Event::PfcRefresh {
                port,
                prio,
                generation,
            } => pack(
                PFC_REFRESH,
                port.0,
                ((generation & PFC_GEN_MASK) << 3) | u32::from(prio & 7),
            ),
            Event::LocalDone(f) => pack(LOCAL_DONE, f.0, 0),
            Event::GpuStart(t) => pack(GPU_START, t, 0),
            Event::GpuDone(t) => pack(GPU_DONE, t, 0),
            Event::Proxy { conn, action } => pack(PROXY, conn, action as u32),
            Event::Fault { fault, end, peer } => {
                pack(FAULT, fault.0, u32::from(end) | (u32::from(peer) << 1))
            }
            Event::RxDrain { port, prio } => pack(RX_DRAIN, port.0, u32::from(prio)),
        }
    }

    /// Back from the queue's form.
    ///
    /// # Panics
    /// On a kind no [`Event::encode`] produces (a corrupted queue: an engine bug).
    #[inline(always)]
    pub(crate) fn decode(code: EventCode) -> Event {
        let e = code.0;
        let a = e as u32;
        let b = ((e >> 32) & 0xFF_FFFF) as u32;
        match e >> 56 {
            WAKE => Event::Wake(PortId(a)),
            ARRIVE => Event::Arrive(PortId(a)),
            FLOW_START => Event::FlowStart(FlowId(a)),
            DCQCN_DEC => Event::DcqcnDec(QpId(a)),
            DCQCN_INC => Event::DcqcnInc(QpId(a)),
            RTO => Event::Rto(QpId(a)),
            PFC_REFRESH => Event::PfcRefresh {
                port: PortId(a),
                prio: (b & 7) as u8,
                generation: b >> 3,
            },
            LOCAL_DONE => Event::LocalDone(FlowId(a)),
            GPU_START => Event::GpuStart(a),
            GPU_DONE => Event::GpuDone(a),
            PROXY => Event::Proxy {
                conn: a,
                action: ProxyAction::ALL[b as usize],
            },
            FAULT => Event::Fault {
                fault: FaultId(a),
                end: b & 1 == 1,
                peer: b & 2 == 2,
            },
            RX_DRAIN => Event::RxDrain {
                port: PortId(a),
                prio: b as u8,
            },
            k => unreachable!("invariant: only known event kinds are queued (found kind {k})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_event() -> impl Strategy<Value = Event> {
        let id = any::<u32>();
        prop_oneof![
            id.prop_map(|a| Event::Wake(PortId(a))),
            id.prop_map(|a| Event::Arrive(PortId(a))),
            id.prop_map(|a| Event::FlowStart(FlowId(a))),
            id.prop_map(|a| Event::DcqcnDec(QpId(a))),
            id.prop_map(|a| Event::DcqcnInc(QpId(a))),
            id.prop_map(|a| Event::Rto(QpId(a))),
            (id, 0u8..8, 0..=PFC_GEN_MASK).prop_map(|(a, prio, generation)| Event::PfcRefresh {
                port: PortId(a),
                prio,
                generation
            }),
            id.prop_map(|a| Event::LocalDone(FlowId(a))),
            id.prop_map(Event::GpuStart),
            id.prop_map(Event::GpuDone),
            (id, 0usize..6).prop_map(|(conn, k)| Event::Proxy {
                conn,
                action: ProxyAction::ALL[k]
            }),
            (id, any::<bool>(), any::<bool>()).prop_map(|(a, end, peer)| Event::Fault {
                fault: FaultId(a),
                end,
                peer
            }),
            (id, 0u8..8).prop_map(|(a, prio)| Event::RxDrain {
                port: PortId(a),
                prio
            }),
        ]
    }

    proptest! {
        /// Every event survives the trip through the queue's 8-byte form.
        #[test]
        fn events_round_trip_through_their_encoding(e in any_event()) {
            prop_assert_eq!(Event::decode(e.encode()), e);
        }
    }

    #[test]
    fn kinds_are_distinct() {
        let kinds: std::collections::BTreeSet<u64> = [
            Event::Wake(PortId(1)),
            Event::Arrive(PortId(1)),
            Event::FlowStart(FlowId(1)),
            Event::DcqcnDec(QpId(1)),
            Event::DcqcnInc(QpId(1)),
            Event::Rto(QpId(1)),
            Event::PfcRefresh {
                port: PortId(1),
                prio: 0,
                generation: 0,
            },
            Event::LocalDone(FlowId(1)),
            Event::GpuStart(1),
            Event::GpuDone(1),
            Event::Proxy {
                conn: 1,
                action: ProxyAction::Send,
            },
            Event::Fault {
                fault: FaultId(1),
                end: false,
                peer: false,
            },
            Event::RxDrain {
                port: PortId(1),
                prio: 0,
            },
        ]
        .iter()
        .map(|e| e.encode().0 >> 56)
        .collect();
        assert_eq!(kinds.len(), 13);
    }
}
