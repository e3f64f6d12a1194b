//! Packets and their pool. A packet is a small `Copy` struct that lives in one arena slot
//! from creation to consumption; queues and links hold 4-byte ids. Freed slots are reused,
//! so steady-state simulation allocates nothing per packet.

use crate::time::Ps;

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A packet. 40 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    /// Data: byte offset of the payload; Ack/Nack: cumulative ACK; Pause: quanta.
    pub seq: u64,
    /// Data: NIC send time; echoed by the ACK for RTT measurement.
    pub ts: Ps,
    /// Queue pair the packet belongs to (unused for Pause).
    pub qp: u32,
    /// Start of the route in the route arena.
    pub route: u32,
    /// Switch ingress port while the packet is queued in a switch.
    pub in_port: u32,
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
}

/// Pool of packets with a free list.
#[derive(Debug, Default)]
pub struct Pool {
    slots: Vec<Packet>,
    free: Vec<u32>,
    live: usize,
    peak_live: usize,
}

impl Pool {
    /// Stores a packet and returns its id.
    #[inline]
    pub fn alloc(&mut self, p: Packet) -> u32 {
        self.live += 1;
        if self.live > self.peak_live {
            self.peak_live = self.live;
        }
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = p;
                id
            }
            None => {
                self.slots.push(p);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Releases a packet.
    #[inline]
    pub fn free(&mut self, id: u32) {
        self.live -= 1;
        self.free.push(id);
    }

    /// The packet `id`.
    #[inline]
    pub fn get(&self, id: u32) -> &Packet {
        &self.slots[id as usize]
    }

    /// The packet `id`, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Packet {
        &mut self.slots[id as usize]
    }

    /// Packets alive now.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Most packets alive at once.
    pub fn peak_live(&self) -> usize {
        self.peak_live
    }

    /// Slots allocated (peak live, rounded up by growth).
    pub fn capacity(&self) -> usize {
        self.slots.capacity()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn packet_is_compact() {
        assert!(std::mem::size_of::<super::Packet>() <= 40);
    }
}
