//! Packets. A packet is a small `Copy` struct that lives by value in the ring it waits in:
//! an egress queue or a link's in-flight ring. The rings keep their capacity, so once they
//! have grown the simulation allocates nothing per packet.

use crate::engine::ids::{PortId, QpId, RouteId};
use crate::time::Ps;

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum Kind {
    /// RoCE data.
    Data = 0,
    /// Cumulative acknowledgement.
    Ack = 1,
    /// Negative acknowledgement (PSN sequence error): go back to `seq`.
    Nack = 2,
    /// Congestion notification to the sender QP.
    Cnp = 3,
    /// PFC frame; `seq` carries the pause time in quanta (0 = resume), `prio` the priority.
    Pause = 4,
}

/// What a packet carries for its sender's congestion control, echoed by the ACK: the
/// time the NIC sent it (an RTT sample for TIMELY), or for HPCC the index of the INT record
/// it carries (HPCC measures no RTT; the record lives out of line, `engine::Sim::ints`, so
/// the packet stays 40 bytes, and the ACK carries it back as the HPCC simulator's ACK
/// carries the INT header). One word: the top bit tells which, since a send time never
/// reaches 2^63 ps (107 days). This is the only place that knows the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Stamp(u64);

/// The bit that marks an INT index.
const INT_TAG: u64 = 1 << 63;

impl Stamp {
    /// Nothing: a packet whose INT record went elsewhere (shipped to another partition).
    pub const NONE: Stamp = Stamp(0);

    /// Sent at `t`.
    #[inline(always)]
    pub fn sent_at(t: Ps) -> Stamp {
        debug_assert!(t & INT_TAG == 0, "invariant: times stay below 2^63 ps");
        Stamp(t)
    }

    /// Carries INT record `index`.
    #[inline(always)]
    pub fn int(index: u32) -> Stamp {
        Stamp(INT_TAG | u64::from(index))
    }

    /// The INT record's index, if the stamp is one.
    #[inline(always)]
    pub fn int_index(self) -> Option<u32> {
        (self.0 & INT_TAG != 0).then_some((self.0 & !INT_TAG) as u32)
    }

    /// The send time, if the stamp is one.
    #[inline(always)]
    pub fn sent_time(self) -> Option<Ps> {
        (self.0 & INT_TAG == 0).then_some(self.0)
    }
}

/// A packet. 40 bytes (the test below keeps it so).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Packet {
    /// Data: byte offset of the payload; Ack/Nack: cumulative ACK; Pause: quanta.
    pub seq: u64,
    /// Data: the send time or INT record ([`Stamp`]); ACK and NACK: the data packet's,
    /// echoed.
    pub stamp: Stamp,
    /// Queue pair the packet belongs to (unused for Pause).
    pub qp: QpId,
    /// Start of the route in the route arena.
    pub route: RouteId,
    /// Switch ingress port while the packet is queued in a switch.
    pub in_port: PortId,
    /// Bytes on the wire.
    pub size: u16,
    /// Payload bytes (Data only).
    pub payload: u16,
    /// Index of the next hop in the route.
    pub hop: u8,
    /// Kind.
    pub kind: Kind,
    /// 802.1p priority (egress queue).
    pub prio: u8,
    /// ECN Congestion Experienced.
    pub ce: bool,
    /// Data: the last packet of a message (an RDMA write's last packet, which carries the
    /// immediate data and so completes a receive at the responder).
    pub last: bool,
}

impl Packet {
    /// The index of the INT record the packet carries, if any.
    #[inline]
    pub fn int_index(&self) -> Option<u32> {
        self.stamp.int_index()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip() {
        for t in [0, 1, 1 << 40, (1 << 63) - 1] {
            assert_eq!(Stamp::sent_at(t).sent_time(), Some(t));
            assert_eq!(Stamp::sent_at(t).int_index(), None);
        }
        for i in [0, 7, u32::MAX] {
            assert_eq!(Stamp::int(i).int_index(), Some(i));
            assert_eq!(Stamp::int(i).sent_time(), None);
        }
    }

    #[test]
    fn packet_is_compact() {
        assert!(std::mem::size_of::<super::Packet>() <= 40);
    }
}
