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

/// Marks a `ts` that holds an INT record's index instead of a send time: HPCC's QPs
/// measure no RTT, and a send time never reaches 2^63 ps (107 days), so the packet stays
/// 40 bytes and the record lives out of line (`engine::Sim::ints`). The ACK echoes `ts`,
/// so it carries the record back, as the HPCC simulator's ACK carries the INT header.
pub const INT_TAG: u64 = 1 << 63;

/// A packet. 40 bytes (the test below keeps it so).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Packet {
    /// Data: byte offset of the payload; Ack/Nack: cumulative ACK; Pause: quanta.
    pub seq: u64,
    /// Data: NIC send time; echoed by the ACK for RTT measurement.
    pub ts: Ps,
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
        (self.ts & INT_TAG != 0).then_some((self.ts & !INT_TAG) as u32)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn packet_is_compact() {
        assert!(std::mem::size_of::<super::Packet>() <= 40);
    }
}
