//! Counters, kept per port under the names real hardware uses, so diagnosis reads simulated
//! and production data through the same schema:
//!
//! - NIC ports: Linux `/sys/class/infiniband/DEV/ports/P/counters` (`port_xmit_data` in
//!   4-byte words), mlx5 `hw_counters` (`np_ecn_marked_roce_packets`, `rp_cnp_handled`, ...)
//!   and mlx5 `ethtool -S` per-priority counters (`rx_prio3_pause`, `rx_prio3_pause_duration`
//!   in µs, ...): docs/reference/linux-rdma-sysfs.md §1.2, §1.3, §2.1.
//! - Switch ports and queues: SONiC COUNTERS_DB / SAI statistics (`SAI_PORT_STAT_IF_OUT_OCTETS`,
//!   `SAI_PORT_STAT_PFC_3_RX_PKTS`, `SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS`, ...). The SAI
//!   names are the standard `sai_port_stat_t` / `sai_queue_stat_t` enumerators.

use crate::time::{PS_PER_US, Ps};

/// Priorities per port.
pub const N_PRIO: usize = 8;

/// Raw counters of one port (both directions), in engine units.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortCounters {
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets dropped on their way out of this port (switch buffer admission).
    pub tx_discards: u64,
    /// Per priority: bytes sent.
    pub tx_prio_bytes: [u64; N_PRIO],
    /// Per priority: packets sent.
    pub tx_prio_packets: [u64; N_PRIO],
    /// Per priority: bytes received.
    pub rx_prio_bytes: [u64; N_PRIO],
    /// Per priority: packets received.
    pub rx_prio_packets: [u64; N_PRIO],
    /// PFC frames sent (XOFF and XON).
    pub tx_pause: [u64; N_PRIO],
    /// Time this port held its peer paused.
    pub tx_pause_ps: [Ps; N_PRIO],
    /// PFC frames received.
    pub rx_pause: [u64; N_PRIO],
    /// Time this port's transmitter was paused.
    pub rx_pause_ps: [Ps; N_PRIO],
    /// XOFF to XON transitions received.
    pub rx_pause_transition: [u64; N_PRIO],
    /// NP: CE-marked RoCE packets received.
    pub np_ecn_marked_roce_packets: u64,
    /// NP: CNPs sent.
    pub np_cnp_sent: u64,
    /// RP: CNPs acted on.
    pub rp_cnp_handled: u64,
    /// RP: CNPs ignored (QP not running DCQCN).
    pub rp_cnp_ignored: u64,
    /// Responder: out-of-order packets (a PSN gap: loss upstream).
    pub out_of_sequence: u64,
    /// Requester: NAKs for PSN sequence errors received.
    pub packet_seq_err: u64,
    /// Requester: ACK timer expirations.
    pub local_ack_timeout_err: u64,
    /// Responder: duplicate packets received.
    pub duplicate_request: u64,
    /// Switch egress queues: packets dropped.
    pub q_dropped: [u64; N_PRIO],
    /// Switch egress queues: packets marked CE.
    pub q_ecn_marked: [u64; N_PRIO],
    /// Switch egress queues: packets sent.
    pub q_packets: [u64; N_PRIO],
    /// Switch egress queues: bytes sent.
    pub q_bytes: [u64; N_PRIO],
    /// Switch egress queues: peak occupancy.
    pub q_watermark: [u64; N_PRIO],
    /// Packets received corrupted (FCS/ICRC failure) and dropped here.
    pub rx_errors: u64,
    /// Symbol errors seen by this port's receiver (one per corrupted packet: a
    /// simplification; a real PHY counts errored symbols, which FEC may correct).
    pub symbol_errors: u64,
    /// Times this port's link went down.
    pub link_downed: u64,
    /// Packets dropped at admission into the buffer from this (ingress) port.
    pub in_discards: u64,
    /// Frames received larger than the port's MTU (dropped; also in `rx_errors`).
    pub rx_oversize: u64,
    /// The port's link rate, Mbit/s (a level, not a counter).
    pub rate_mbps: u64,
    /// NIC ports: the NIC's PCIe link (current width, maximum width, current speed
    /// MT/s, maximum speed MT/s).
    pub pcie: Option<[u64; 4]>,
}

/// One named counter value of one entity: the schema the monitoring agent uses for real
/// hosts (`xirang-telemetry`), so the same metrics, rules and dashboards read both.
pub use xirang_telemetry::CounterValue;

/// Counters with one name each, in the order a port reports them.
const FIXED: [&str; 31] = [
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_discards",
    "symbol_error",
    "port_rcv_errors",
    "link_downed",
    "rx_crc_errors_phy",
    "rx_pcs_symbol_err_phy",
    "rate",
    "current_link_width",
    "max_link_width",
    "current_link_speed",
    "max_link_speed",
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "duplicate_request",
    "SAI_PORT_STAT_IF_IN_OCTETS",
    "SAI_PORT_STAT_IF_OUT_OCTETS",
    "SAI_PORT_STAT_IF_IN_UCAST_PKTS",
    "SAI_PORT_STAT_IF_OUT_UCAST_PKTS",
    "SAI_PORT_STAT_IF_OUT_DISCARDS",
    "SAI_PORT_STAT_IF_IN_ERRORS",
    "SAI_PORT_STAT_IF_IN_DISCARDS",
    "SAI_PORT_STAT_ETHER_RX_OVERSIZE_PKTS",
];
/// The switch port's speed attribute and the queue statistics, after the fixed ones.
const FIXED2: [&str; 6] = [
    "SAI_PORT_ATTR_SPEED",
    "SAI_QUEUE_STAT_PACKETS",
    "SAI_QUEUE_STAT_BYTES",
    "SAI_QUEUE_STAT_DROPPED_PACKETS",
    "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
    "SAI_QUEUE_STAT_WATERMARK_BYTES",
];
/// Counters named per priority (`{p}` is the priority).
const PER_PRIO: [(&str, &str); 12] = [
    ("rx_prio", "_bytes"),
    ("rx_prio", "_packets"),
    ("tx_prio", "_bytes"),
    ("tx_prio", "_packets"),
    ("rx_prio", "_pause"),
    ("rx_prio", "_pause_duration"),
    ("rx_prio", "_pause_transition"),
    ("tx_prio", "_pause"),
    ("tx_prio", "_pause_duration"),
    ("SAI_PORT_STAT_PFC_", "_RX_PKTS"),
    ("SAI_PORT_STAT_PFC_", "_TX_PKTS"),
    ("SAI_PORT_STAT_PFC_", "_RX_PAUSE_DURATION_US"),
];

/// A counter's name, as a small code: sampling compares values by code and renders names
/// only for output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct CounterName(u16);

impl CounterName {
    const fn fixed(i: usize) -> Self {
        CounterName(i as u16)
    }
    const fn fixed2(i: usize) -> Self {
        CounterName((FIXED.len() + i) as u16)
    }
    const fn per_prio(t: usize, prio: usize) -> Self {
        CounterName((FIXED.len() + FIXED2.len() + t * N_PRIO + prio) as u16)
    }

    /// The name hardware gives the counter.
    pub fn render(self) -> String {
        let i = self.0 as usize;
        if let Some(n) = FIXED.get(i) {
            return (*n).to_string();
        }
        if let Some(n) = FIXED2.get(i - FIXED.len()) {
            return (*n).to_string();
        }
        let j = i - FIXED.len() - FIXED2.len();
        let (pre, post) = PER_PRIO[j / N_PRIO];
        format!("{pre}{}{post}", j % N_PRIO)
    }
}

/// Where a counter belongs: the port, or one of its egress queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Scope {
    /// The port itself.
    Port,
    /// Egress queue of this priority (switch ports).
    Queue(u8),
}

/// Counters a NIC port reports at most: 11 port counters, 4 PCIe, 8 RoCE, 9 per priority.
const NIC_SLOTS: usize = 11 + 4 + 8 + 9 * N_PRIO;
/// Counters a switch port and its queues report at most: 9, 3 PFC per priority, 5 per queue.
const SWITCH_SLOTS: usize = 9 + 3 * N_PRIO + 5 * N_PRIO;
/// The size of a port's range in a sampler's table of last values (the visitors number
/// their counters from 0 below it).
pub const SLOTS_PER_PORT: usize = if NIC_SLOTS > SWITCH_SLOTS {
    NIC_SLOTS
} else {
    SWITCH_SLOTS
};

impl PortCounters {
    /// Calls `f(mine, a, b)` with each counter that only ever grows (not the port totals,
    /// which are the per-priority counters' sums, nor the switch queues' packets and
    /// bytes, which follow from the port's, nor levels: watermarks, rate, PCIe), with the
    /// same counter of `a` and `b`. A fast-forward adds what the skipped time would have
    /// counted through it (`engine::ffwd`).
    pub fn zip_cumulative(
        &mut self,
        a: &PortCounters,
        b: &PortCounters,
        f: &mut dyn FnMut(&mut u64, u64, u64),
    ) {
        // Every field named, so that a counter added to the struct must be sorted here.
        let PortCounters {
            tx_bytes: _,
            rx_bytes: _,
            tx_packets: _,
            rx_packets: _,
            q_packets: _,
            q_bytes: _,
            q_watermark: _,
            rate_mbps: _,
            pcie: _,
            tx_discards: _,
            tx_prio_bytes: _,
            tx_prio_packets: _,
            rx_prio_bytes: _,
            rx_prio_packets: _,
            tx_pause: _,
            tx_pause_ps: _,
            rx_pause: _,
            rx_pause_ps: _,
            rx_pause_transition: _,
            np_ecn_marked_roce_packets: _,
            np_cnp_sent: _,
            rp_cnp_handled: _,
            rp_cnp_ignored: _,
            out_of_sequence: _,
            packet_seq_err: _,
            local_ack_timeout_err: _,
            duplicate_request: _,
            q_dropped: _,
            q_ecn_marked: _,
            rx_errors: _,
            symbol_errors: _,
            link_downed: _,
            in_discards: _,
            rx_oversize: _,
        } = a;
        macro_rules! scalars {
            ($($x:ident),*) => { $( f(&mut self.$x, a.$x, b.$x); )* };
        }
        macro_rules! arrays {
            ($($x:ident),*) => { $( for i in 0..N_PRIO { f(&mut self.$x[i], a.$x[i], b.$x[i]); } )* };
        }
        scalars!(
            tx_discards,
            np_ecn_marked_roce_packets,
            np_cnp_sent,
            rp_cnp_handled,
            rp_cnp_ignored,
            out_of_sequence,
            packet_seq_err,
            local_ack_timeout_err,
            duplicate_request,
            rx_errors,
            symbol_errors,
            link_downed,
            in_discards,
            rx_oversize
        );
        arrays!(
            tx_prio_bytes,
            tx_prio_packets,
            rx_prio_bytes,
            rx_prio_packets,
            tx_pause,
            tx_pause_ps,
            rx_pause,
            rx_pause_ps,
            rx_pause_transition,
            q_dropped,
            q_ecn_marked
        );
    }

    /// Calls `f` with each counter a NIC port reports, in order: its slot (stable over a
    /// run, below [`SLOTS_PER_PORT`]), scope, name and value.
    pub fn visit_nic(&self, pfc_prios: &[u8], f: &mut dyn FnMut(usize, Scope, CounterName, u64)) {
        let mut slot = 0;
        let mut emit = |slot: &mut usize, name: CounterName, value: u64| {
            f(*slot, Scope::Port, name, value);
            *slot += 1;
        };
        // port_xmit_data / port_rcv_data count 4-octet words
        // (docs/reference/linux-rdma-sysfs.md §1.2).
        emit(&mut slot, CounterName::fixed(0), self.tx_bytes / 4);
        emit(&mut slot, CounterName::fixed(1), self.rx_bytes / 4);
        emit(&mut slot, CounterName::fixed(2), self.tx_packets);
        emit(&mut slot, CounterName::fixed(3), self.rx_packets);
        emit(&mut slot, CounterName::fixed(4), self.tx_discards);
        // PMA error counters (docs/reference/linux-rdma-sysfs.md §1.2), present on every real port.
        emit(&mut slot, CounterName::fixed(5), self.symbol_errors);
        emit(&mut slot, CounterName::fixed(6), self.rx_errors);
        emit(&mut slot, CounterName::fixed(7), self.link_downed);
        // The PHY's view of the same corrupted frames (mlx5 `ethtool -S`,
        // docs/reference/linux-rdma-sysfs.md §2.1): each failed its FCS, and each is an error FEC
        // could not correct. FEC-corrected bits and link-training recoveries
        // (`rx_corrected_bits_phy`, `link_error_recovery`) need a pre-FEC error model
        // the simulator does not have; they stay 0.
        emit(&mut slot, CounterName::fixed(8), self.symbol_errors);
        emit(&mut slot, CounterName::fixed(9), self.symbol_errors);
        // sysfs `rate` ("100 Gb/sec (4X EDR)"), kept in Mbit/s so that rates such as
        // 12.5 Gb/s stay whole.
        emit(&mut slot, CounterName::fixed(10), self.rate_mbps);
        // The NIC's PCIe link as sysfs gives it (/sys/bus/pci/devices/BDF/
        // current_link_width, ...), speeds in MT/s so that 2.5 GT/s stays whole.
        match self.pcie {
            Some(v) => (0..4).for_each(|i| emit(&mut slot, CounterName::fixed(11 + i), v[i])),
            None => slot += 4,
        }
        for (i, v) in [
            self.np_ecn_marked_roce_packets,
            self.np_cnp_sent,
            self.rp_cnp_handled,
            self.rp_cnp_ignored,
            self.out_of_sequence,
            self.packet_seq_err,
            self.local_ack_timeout_err,
            self.duplicate_request,
        ]
        .into_iter()
        .enumerate()
        {
            emit(&mut slot, CounterName::fixed(15 + i), v);
        }
        for p in 0..N_PRIO {
            emit(&mut slot, CounterName::per_prio(0, p), self.rx_prio_bytes[p]);
            emit(&mut slot, CounterName::per_prio(1, p), self.rx_prio_packets[p]);
            emit(&mut slot, CounterName::per_prio(2, p), self.tx_prio_bytes[p]);
            emit(&mut slot, CounterName::per_prio(3, p), self.tx_prio_packets[p]);
            if pfc_prios.contains(&(p as u8)) {
                emit(&mut slot, CounterName::per_prio(4, p), self.rx_pause[p]);
                emit(
                    &mut slot,
                    CounterName::per_prio(5, p),
                    self.rx_pause_ps[p] / PS_PER_US,
                );
                emit(
                    &mut slot,
                    CounterName::per_prio(6, p),
                    self.rx_pause_transition[p],
                );
                emit(&mut slot, CounterName::per_prio(7, p), self.tx_pause[p]);
                emit(
                    &mut slot,
                    CounterName::per_prio(8, p),
                    self.tx_pause_ps[p] / PS_PER_US,
                );
            } else {
                slot += 5;
            }
        }
        debug_assert_eq!(slot, NIC_SLOTS, "invariant: every NIC counter has its slot");
    }

    /// Calls `f` with each counter a switch port and its queues report, as
    /// [`PortCounters::visit_nic`] does.
    pub fn visit_switch(&self, pfc_prios: &[u8], f: &mut dyn FnMut(usize, Scope, CounterName, u64)) {
        let mut slot = 0;
        let mut emit = |slot: &mut usize, scope, name: CounterName, value: u64| {
            f(*slot, scope, name, value);
            *slot += 1;
        };
        for (i, v) in [
            self.rx_bytes,
            self.tx_bytes,
            self.rx_packets,
            self.tx_packets,
            self.tx_discards,
            self.rx_errors,
            self.in_discards,
            self.rx_oversize,
        ]
        .into_iter()
        .enumerate()
        {
            emit(&mut slot, Scope::Port, CounterName::fixed(23 + i), v);
        }
        // The port's speed attribute (SAI_PORT_ATTR_SPEED, SONiC's PORT `speed`), Mbit/s.
        emit(&mut slot, Scope::Port, CounterName::fixed2(0), self.rate_mbps);
        for p in 0..N_PRIO {
            if pfc_prios.contains(&(p as u8)) {
                emit(
                    &mut slot,
                    Scope::Port,
                    CounterName::per_prio(9, p),
                    self.rx_pause[p],
                );
                emit(
                    &mut slot,
                    Scope::Port,
                    CounterName::per_prio(10, p),
                    self.tx_pause[p],
                );
                emit(
                    &mut slot,
                    Scope::Port,
                    CounterName::per_prio(11, p),
                    self.rx_pause_ps[p] / PS_PER_US,
                );
            } else {
                slot += 3;
            }
        }
        for p in 0..N_PRIO {
            if self.q_packets[p] == 0 && self.q_dropped[p] == 0 {
                slot += 5;
                continue;
            }
            let q = Scope::Queue(p as u8);
            emit(&mut slot, q, CounterName::fixed2(1), self.q_packets[p]);
            emit(&mut slot, q, CounterName::fixed2(2), self.q_bytes[p]);
            emit(&mut slot, q, CounterName::fixed2(3), self.q_dropped[p]);
            emit(&mut slot, q, CounterName::fixed2(4), self.q_ecn_marked[p]);
            emit(&mut slot, q, CounterName::fixed2(5), self.q_watermark[p]);
        }
        debug_assert_eq!(slot, SWITCH_SLOTS, "invariant: every switch counter has its slot");
    }
}

impl PortCounters {
    /// The counters of a NIC port, as Linux sysfs, mlx5 hw_counters and `ethtool -S` name
    /// them. Per-priority pause counters appear only for priorities in `pfc_prios` (mlx5
    /// exposes them only where PFC is enabled).
    pub fn nic_named(&self, entity: &str, pfc_prios: &[u8], out: &mut Vec<CounterValue>) {
        self.visit_nic(pfc_prios, &mut |_, _, name, value| {
            out.push(CounterValue {
                entity: entity.to_string(),
                name: name.render(),
                value,
            })
        });
    }

    /// The counters of a switch port and its queues, as SAI names them.
    pub fn switch_named(&self, entity: &str, pfc_prios: &[u8], out: &mut Vec<CounterValue>) {
        self.visit_switch(pfc_prios, &mut |_, scope, name, value| {
            out.push(CounterValue {
                entity: match scope {
                    Scope::Port => entity.to_string(),
                    Scope::Queue(p) => format!("{entity}/q{p}"),
                },
                name: name.render(),
                value,
            })
        });
    }
}

/// Levels among the counters, not counts: a port's rate, PCIe link and queue watermark.
/// A fast-forward skip sees no peak of the time it skips (`PortCounters::zip_cumulative`
/// leaves them out), so its comparisons with the exact run judge counts only
/// (`xirang bench --fast-forward`, `tests/ffwd.rs`).
pub const LEVELS: [&str; 7] = [
    "rate",
    "current_link_width",
    "max_link_width",
    "current_link_speed",
    "max_link_speed",
    "SAI_PORT_ATTR_SPEED",
    "SAI_QUEUE_STAT_WATERMARK_BYTES",
];
