//! Counters, kept per port under the names real hardware uses, so diagnosis reads simulated
//! and production data through the same schema:
//!
//! - NIC ports: Linux `/sys/class/infiniband/DEV/ports/P/counters` (`port_xmit_data` in
//!   4-byte words), mlx5 `hw_counters` (`np_ecn_marked_roce_packets`, `rp_cnp_handled`, ...)
//!   and mlx5 `ethtool -S` per-priority counters (`rx_prio3_pause`, `rx_prio3_pause_duration`
//!   in µs, ...): shared/reference/linux-rdma-sysfs.md §1.2, §1.3, §2.1.
//! - Switch ports and queues: SONiC COUNTERS_DB / SAI statistics (`SAI_PORT_STAT_IF_OUT_OCTETS`,
//!   `SAI_PORT_STAT_PFC_3_RX_PKTS`, `SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS`, ...). The SAI
//!   names are the standard `sai_port_stat_t` / `sai_queue_stat_t` enumerators.

use crate::time::{PS_PER_US, Ps};

/// Priorities per port.
pub const N_PRIO: usize = 8;

/// Raw counters of one port (both directions), in engine units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

fn push(out: &mut Vec<CounterValue>, entity: &str, name: String, value: u64) {
    out.push(CounterValue {
        entity: entity.to_string(),
        name,
        value,
    });
}

impl PortCounters {
    /// The counters of a NIC port, as Linux sysfs, mlx5 hw_counters and `ethtool -S` name
    /// them. Per-priority pause counters appear only for priorities in `pfc_prios` (mlx5
    /// exposes them only where PFC is enabled).
    pub fn nic_named(&self, entity: &str, pfc_prios: &[u8], out: &mut Vec<CounterValue>) {
        // port_xmit_data / port_rcv_data count 4-octet words (linux-rdma-sysfs.md §1.2).
        push(out, entity, "port_xmit_data".into(), self.tx_bytes / 4);
        push(out, entity, "port_rcv_data".into(), self.rx_bytes / 4);
        push(out, entity, "port_xmit_packets".into(), self.tx_packets);
        push(out, entity, "port_rcv_packets".into(), self.rx_packets);
        push(out, entity, "port_xmit_discards".into(), self.tx_discards);
        // PMA error counters (linux-rdma-sysfs.md §1.2), present on every real port.
        push(out, entity, "symbol_error".into(), self.symbol_errors);
        push(out, entity, "port_rcv_errors".into(), self.rx_errors);
        push(out, entity, "link_downed".into(), self.link_downed);
        // The PHY's view of the same corrupted frames (mlx5 `ethtool -S`,
        // linux-rdma-sysfs.md §2.1): each failed its FCS, and each is an error FEC
        // could not correct. FEC-corrected bits and link-training recoveries
        // (`rx_corrected_bits_phy`, `link_error_recovery`) need a pre-FEC error model
        // the simulator does not have; they stay 0.
        push(out, entity, "rx_crc_errors_phy".into(), self.symbol_errors);
        push(out, entity, "rx_pcs_symbol_err_phy".into(), self.symbol_errors);
        // sysfs `rate` ("100 Gb/sec (4X EDR)"), kept in Mbit/s so that rates such as
        // 12.5 Gb/s stay whole.
        push(out, entity, "rate".into(), self.rate_mbps);
        // The NIC's PCIe link as sysfs gives it (/sys/bus/pci/devices/BDF/
        // current_link_width, ...), speeds in MT/s so that 2.5 GT/s stays whole.
        if let Some([cur_w, max_w, cur_s, max_s]) = self.pcie {
            push(out, entity, "current_link_width".into(), cur_w);
            push(out, entity, "max_link_width".into(), max_w);
            push(out, entity, "current_link_speed".into(), cur_s);
            push(out, entity, "max_link_speed".into(), max_s);
        }
        for (n, v) in [
            ("np_ecn_marked_roce_packets", self.np_ecn_marked_roce_packets),
            ("np_cnp_sent", self.np_cnp_sent),
            ("rp_cnp_handled", self.rp_cnp_handled),
            ("rp_cnp_ignored", self.rp_cnp_ignored),
            ("out_of_sequence", self.out_of_sequence),
            ("packet_seq_err", self.packet_seq_err),
            ("local_ack_timeout_err", self.local_ack_timeout_err),
            ("duplicate_request", self.duplicate_request),
        ] {
            push(out, entity, n.into(), v);
        }
        for p in 0..N_PRIO {
            push(out, entity, format!("rx_prio{p}_bytes"), self.rx_prio_bytes[p]);
            push(
                out,
                entity,
                format!("rx_prio{p}_packets"),
                self.rx_prio_packets[p],
            );
            push(out, entity, format!("tx_prio{p}_bytes"), self.tx_prio_bytes[p]);
            push(
                out,
                entity,
                format!("tx_prio{p}_packets"),
                self.tx_prio_packets[p],
            );
            if pfc_prios.contains(&(p as u8)) {
                push(out, entity, format!("rx_prio{p}_pause"), self.rx_pause[p]);
                push(
                    out,
                    entity,
                    format!("rx_prio{p}_pause_duration"),
                    self.rx_pause_ps[p] / PS_PER_US,
                );
                push(
                    out,
                    entity,
                    format!("rx_prio{p}_pause_transition"),
                    self.rx_pause_transition[p],
                );
                push(out, entity, format!("tx_prio{p}_pause"), self.tx_pause[p]);
                push(
                    out,
                    entity,
                    format!("tx_prio{p}_pause_duration"),
                    self.tx_pause_ps[p] / PS_PER_US,
                );
            }
        }
    }

    /// The counters of a switch port and its queues, as SAI names them.
    pub fn switch_named(&self, entity: &str, pfc_prios: &[u8], out: &mut Vec<CounterValue>) {
        push(out, entity, "SAI_PORT_STAT_IF_IN_OCTETS".into(), self.rx_bytes);
        push(out, entity, "SAI_PORT_STAT_IF_OUT_OCTETS".into(), self.tx_bytes);
        push(
            out,
            entity,
            "SAI_PORT_STAT_IF_IN_UCAST_PKTS".into(),
            self.rx_packets,
        );
        push(
            out,
            entity,
            "SAI_PORT_STAT_IF_OUT_UCAST_PKTS".into(),
            self.tx_packets,
        );
        push(
            out,
            entity,
            "SAI_PORT_STAT_IF_OUT_DISCARDS".into(),
            self.tx_discards,
        );
        push(out, entity, "SAI_PORT_STAT_IF_IN_ERRORS".into(), self.rx_errors);
        push(
            out,
            entity,
            "SAI_PORT_STAT_IF_IN_DISCARDS".into(),
            self.in_discards,
        );
        push(
            out,
            entity,
            "SAI_PORT_STAT_ETHER_RX_OVERSIZE_PKTS".into(),
            self.rx_oversize,
        );
        // The port's speed attribute (SAI_PORT_ATTR_SPEED, SONiC's PORT `speed`), Mbit/s.
        push(out, entity, "SAI_PORT_ATTR_SPEED".into(), self.rate_mbps);
        for p in 0..N_PRIO {
            if pfc_prios.contains(&(p as u8)) {
                push(
                    out,
                    entity,
                    format!("SAI_PORT_STAT_PFC_{p}_RX_PKTS"),
                    self.rx_pause[p],
                );
                push(
                    out,
                    entity,
                    format!("SAI_PORT_STAT_PFC_{p}_TX_PKTS"),
                    self.tx_pause[p],
                );
                push(
                    out,
                    entity,
                    format!("SAI_PORT_STAT_PFC_{p}_RX_PAUSE_DURATION_US"),
                    self.rx_pause_ps[p] / PS_PER_US,
                );
            }
        }
        for p in 0..N_PRIO {
            if self.q_packets[p] == 0 && self.q_dropped[p] == 0 {
                continue;
            }
            let q = format!("{entity}/q{p}");
            push(out, &q, "SAI_QUEUE_STAT_PACKETS".into(), self.q_packets[p]);
            push(out, &q, "SAI_QUEUE_STAT_BYTES".into(), self.q_bytes[p]);
            push(
                out,
                &q,
                "SAI_QUEUE_STAT_DROPPED_PACKETS".into(),
                self.q_dropped[p],
            );
            push(
                out,
                &q,
                "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS".into(),
                self.q_ecn_marked[p],
            );
            push(
                out,
                &q,
                "SAI_QUEUE_STAT_WATERMARK_BYTES".into(),
                self.q_watermark[p],
            );
        }
    }
}
