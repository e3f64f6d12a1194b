//! The conservation ledger: every packet a device creates is delivered, dropped, or still
//! in a queue or on a link at the end. The totals are kept as packets are created,
//! delivered and dropped; what is in flight is counted independently by walking every
//! queue and link, so `RunResult::check_conservation` compares two separate counts.

use super::Sim;
use crate::packet::{Kind, Packet};
use crate::queue::Queue;
use crate::time::Ps;

/// Conservation accounting.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ledger {
    /// Packets created (by NICs, and PFC frames by switches).
    pub created_packets: u64,
    /// Their bytes.
    pub created_bytes: u64,
    /// Packets that reached the device they were for.
    pub delivered_packets: u64,
    /// Their bytes.
    pub delivered_bytes: u64,
    /// Packets dropped.
    pub dropped_packets: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// Data payload bytes sent by NICs, retransmissions included.
    pub data_sent_bytes: u64,
    /// Data payload bytes that reached the receiving NIC, duplicates included.
    pub data_delivered_bytes: u64,
    /// Data payload bytes dropped.
    pub data_dropped_bytes: u64,
    /// Packets alive now (created, neither delivered nor dropped).
    #[serde(skip)]
    pub(crate) live_packets: usize,
    /// Most packets alive at once.
    #[serde(skip)]
    pub(crate) peak_live_packets: usize,
}

impl Ledger {
    /// Adds another partition's accounts (its peak to this one's: a bound, since the
    /// two need not have peaked at once).
    pub(crate) fn absorb(&mut self, o: &Ledger) {
        self.created_packets += o.created_packets;
        self.created_bytes += o.created_bytes;
        self.delivered_packets += o.delivered_packets;
        self.delivered_bytes += o.delivered_bytes;
        self.dropped_packets += o.dropped_packets;
        self.dropped_bytes += o.dropped_bytes;
        self.data_sent_bytes += o.data_sent_bytes;
        self.data_delivered_bytes += o.data_delivered_bytes;
        self.data_dropped_bytes += o.data_dropped_bytes;
        self.live_packets += o.live_packets;
        self.peak_live_packets += o.peak_live_packets;
    }
}

impl<Q: Queue> Sim<Q> {
    /// Accounts a packet a NIC or switch creates.
    #[inline]
    pub(crate) fn alloc(&mut self, pkt: Packet) -> Packet {
        let l = self.stats.ledger_mut();
        l.created_packets += 1;
        l.created_bytes += u64::from(pkt.size);
        if pkt.kind == Kind::Data {
            l.data_sent_bytes += u64::from(pkt.payload);
        }
        l.live_packets += 1;
        if l.live_packets > l.peak_live_packets {
            l.peak_live_packets = l.live_packets;
        }
        pkt
    }

    /// Accounts a packet that reached the device it was for.
    #[inline]
    pub(crate) fn consume(&mut self, k: &Packet) {
        let l = self.stats.ledger_mut();
        l.delivered_packets += 1;
        l.delivered_bytes += u64::from(k.size);
        if k.kind == Kind::Data {
            l.data_delivered_bytes += u64::from(k.payload);
        }
        l.live_packets -= 1;
        // A data packet's INT went on in its ACK (or was returned by the receiver); an
        // ACK's INT ends here.
        if k.kind != Kind::Data
            && let Some(i) = k.int_index()
        {
            self.cc.ints_mut().give_back(i);
        }
    }

    /// Accounts a packet lost in the network (admission drop, corruption, link down).
    #[inline]
    pub(crate) fn account_drop(&mut self, k: &Packet) {
        if let Some(i) = k.int_index() {
            self.cc.ints_mut().give_back(i);
        }
        let l = self.stats.ledger_mut();
        l.dropped_packets += 1;
        l.dropped_bytes += u64::from(k.size);
        if k.kind == Kind::Data {
            l.data_dropped_bytes += u64::from(k.payload);
        }
        l.live_packets -= 1;
    }

    /// Packets alive (queued or on a link).
    pub fn live_packets(&self) -> usize {
        self.stats.ledger().live_packets
    }

    /// Most packets alive at once.
    pub fn peak_live_packets(&self) -> usize {
        self.stats.ledger().peak_live_packets
    }

    /// Bytes held by every packet ring (egress queues, PFC queues, links), at the
    /// capacity they grew to; rings never shrink, so this is what the peak needed.
    pub fn packet_ring_bytes(&self) -> usize {
        let pkt = std::mem::size_of::<Packet>();
        let flight = std::mem::size_of::<(Ps, u64, Packet)>();
        let queues: usize = self
            .fab
            .ports()
            .map(|(_, p)| {
                p.ctrl.capacity() * pkt + p.egress.iter().map(|s| s.queue.capacity() * pkt).sum::<usize>()
            })
            .sum();
        let links: usize = self.fab.links().map(|l| l.in_flight.capacity() * flight).sum();
        queues + links
    }

    /// What is still in the network: (packets, bytes, data payload bytes), counted by
    /// walking every queue and link, independently of the ledger.
    pub(crate) fn in_flight(&self) -> (usize, u64, u64, usize) {
        let (mut n, mut bytes, mut data, mut int) = (0usize, 0u64, 0u64, 0usize);
        let mut count = |k: &Packet| {
            n += 1;
            int += usize::from(k.int_index().is_some());
            bytes += u64::from(k.size);
            if k.kind == Kind::Data {
                data += u64::from(k.payload);
            }
        };
        for (_, port) in self.fab.ports() {
            port.ctrl.iter().for_each(&mut count);
            for q in port.egress.iter().map(|s| &s.queue) {
                q.iter().for_each(&mut count);
            }
        }
        for link in self.fab.links() {
            link.in_flight.iter().for_each(|(_, _, k)| count(k));
        }
        (n, bytes, data, int)
    }
}
