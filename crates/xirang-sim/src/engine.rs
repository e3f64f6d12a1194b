//! The discrete-event engine: ports and links, switches (shared buffer, PFC, ECN/RED,
//! strict + DWRR scheduling), NICs (QPs, pacing, ACK/NACK, CNP, go-back-N), and the event
//! loop.
//!
//! How a packet moves: a port that starts transmitting pushes the packet into its link's
//! in-flight ring with its arrival time (start + serialization + propagation); only the
//! ring's head has an `Arrive` event. A port keeps one wake time, when it can next send;
//! a wake superseded by an earlier one stays queued and is ignored when it fires. So the
//! event queue holds about one entry per busy port and link, not one per packet.

use std::collections::VecDeque;

use xirang_fabric::config::{CcAlgorithm, FabricConfig, RedProfile, roce_active_mtu};
use xirang_fabric::model::{Fabric, NicId, Node, PcieLink};
use xirang_fabric::routing::{Adj, Graph};
use xirang_fabric::scenario::{EcmpMode, Fault, FaultKind};
use xirang_fabric::topology::parse_port_ref;

use crate::cc::{Dcqcn, DcqcnState, Timely, TimelyState};
use crate::counters::{CounterValue, N_PRIO, PortCounters};
use crate::packet::{Kind, Packet};
use crate::queue::{EventQueue, Queue};
use crate::rng::{Purpose, Stream, murmur3_32};
use crate::time::{PS_PER_NS, PS_PER_S, PS_PER_US, Ps, Rate, tx_time_at};
use crate::workload::FlowDef;

/// A time that never comes.
pub(crate) const NEVER: Ps = Ps::MAX;

/// ACK size on the wire: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4 + FCS 4.
/// Header sizes: shared/reference/linux-rdma-sysfs.md §4 (AETH's 4 bytes: IBTA, unconfirmed
/// there).
pub const ACK_BYTES: u16 = 66;
/// CNP size: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4 + FCS 4 (the
/// 16-byte CNP payload is IBTA RoCEv2 annex A17, unconfirmed in shared/reference).
pub const CNP_BYTES: u16 = 78;
/// A PFC frame is a minimum-size Ethernet frame (shared/reference/congestion-control.md §6).
pub const PFC_FRAME_BYTES: u16 = 64;
/// A pause quantum is 512 bit times (congestion-control.md §6) = 64 bytes of line time.
const PAUSE_QUANTUM_BYTES: u32 = 64;
/// The HPCC simulator's NACK generation interval, 500 µs (docs/hpcc-model.md §5).
const NACK_INTERVAL: Ps = 500 * PS_PER_US;
/// DWRR quantum per visit: one jumbo frame, so equal-weight queues share bytes fairly.
const DWRR_QUANTUM_BYTES: i64 = 9216;
/// Salt of the second hash an `ecmp_imbalance` fault decides with (a different
/// MurmurHash3 seed), so that it is independent of the hash that picks among the other
/// next hops.
const HOT_HASH_SALT: u32 = 0x9e37_79b9;
/// NCCL's default local ACK timeout: 4.096 µs x 2^20 (`NCCL_IB_TIMEOUT` 20,
/// shared/reference/collectives-and-nccl.md §5).
const ACK_TIMEOUT: Ps = 4_096 * PS_PER_NS * (1 << 20);

/// Event kinds (top byte of an encoded event).
const EV_WAKE: u64 = 0;
const EV_ARRIVE: u64 = 1;
const EV_FLOW_START: u64 = 2;
const EV_DCQCN_DEC: u64 = 3;
const EV_DCQCN_INC: u64 = 4;
const EV_RTO: u64 = 5;
const EV_PFC_REFRESH: u64 = 6;
const EV_SAMPLE: u64 = 7;
const EV_LOCAL_DONE: u64 = 8;
const EV_FAULT: u64 = 9;
const EV_RX_DRAIN: u64 = 10;

/// Ethernet header (14) and FCS (4) of a frame, outside the IP MTU (the parts of
/// `ROCEV2_HEADER_BYTES`, xirang_fabric::config).
const ETH_HEADER_FCS_BYTES: u32 = 18;

/// Receive buffer of a NIC whose host drains slowly (`slow_receiver` fault): the NIC asks
/// its peer to pause above the XOFF level and to resume below XON. mlx5 receive buffer
/// sizes are per-port configuration (`mlnx_qos --buffer_size`) and not in
/// shared/reference; these levels are a modelling choice, a few jumbo frames apart.
const NIC_RX_XOFF_BYTES: f64 = 65_536.0;
const NIC_RX_XON_BYTES: f64 = 32_768.0;

#[inline]
fn ev(kind: u64, a: u32, b: u32) -> u64 {
    (kind << 56) | ((u64::from(b) & 0xFF_FFFF) << 32) | u64::from(a)
}

/// Owner of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dev {
    Nic(u32),
    Switch(u32),
}

/// One port of a NIC or switch: its transmitter, the link leaving it, and (at switches) the
/// buffer accounting of packets that entered through it.
#[derive(Debug)]
pub(crate) struct Port {
    pub(crate) dev: Dev,
    pub(crate) local: u16,
    pub(crate) peer: u32,
    pub(crate) rate: Rate,
    pub(crate) delay: Ps,
    busy_until: Ps,
    wake_at: Ps,
    /// PFC frames to send, ahead of everything.
    ctrl: VecDeque<Packet>,
    /// Invariant: bit p set iff `pr[p].queue` is non-empty. Only [`Port::push_q`] and
    /// [`Port::pop_q`] touch the queues.
    nonempty: u8,
    /// Bit p set when a pause was received on p that may still be in force; `is_paused`
    /// clears it once the pause ended.
    pause_mask: u8,
    /// DWRR round-robin pointer.
    rr: u8,
    /// The queue under `rr` already got its quantum for this turn.
    turn_credited: bool,
    /// Priorities on which this port told its peer to pause (XOFF sent, no XON yet).
    xoff: u8,
    /// Headroom for bytes arriving after XOFF (switch ingress).
    headroom: u64,
    /// Packets on the link leaving this port, with their arrival times.
    in_flight: VecDeque<(Ps, Packet)>,
    /// Everything kept per priority, together, so that handling a packet touches one block.
    pr: [PrioState; N_PRIO],
    /// NIC: QPs sending through this port.
    qps: Vec<u32>,
    rr_qp: usize,
    ecn_rng: Option<Stream>,
    /// RED profile of this egress port (switch ports).
    red: RedProfile,
    /// `pfc_off` fault: packets entering here are admitted as lossy and never paused.
    pfc_off: bool,
    /// `slow_receiver` fault (NIC ports): the host's drain rate and receive backlog.
    slow_rx: Option<SlowRx>,
    /// NIC ports: the NIC's PCIe link (what it reports).
    pcie: Option<PcieLink>,
    /// `pcie_degraded` fault: the host-side rate data can leave at, and when the
    /// host side is next free.
    host_cap: Option<Rate>,
    host_free_at: Ps,
    /// `gdr_off` fault (NIC ports): the rate the host grants its senders credit at
    /// (receive bounce through host memory), and when the next credit is free. Senders
    /// wait for it; nothing pauses.
    rx_cap: Option<Rate>,
    rx_free_at: Ps,
}

/// Receive backlog of a NIC whose host drains slowly.
#[derive(Debug, Clone, Copy)]
struct SlowRx {
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

/// Per-priority state of a port.
#[derive(Debug, Default)]
struct PrioState {
    /// Egress queue (at NICs: ACKs, NACKs and CNPs only; data comes from QPs). Packets live
    /// in the queues and link rings themselves: moving 40 bytes along a ring is cheaper than
    /// chasing an id into a pool, and the rings never shrink, so nothing is allocated per
    /// packet once they have grown.
    queue: VecDeque<Packet>,
    /// Switch egress bytes queued (RED input).
    egr: u64,
    /// Switch ingress accounting of packets that entered here (HPCC switch-mmu model).
    ing: u64,
    hdrm: u64,
    deficit: i64,
    /// PFC received: transmitter paused until this time.
    paused_until: Ps,
    /// Bytes and packets sent: the only counters touched per packet; receive counters are
    /// derived from the peer's at the end (see [`Sim::port_counters`]).
    tx_bytes: u64,
    tx_packets: u64,
    /// Peak egress queue bytes (switch ports).
    watermark: u64,
    pause_since: Ps,
    xoff_since: Ps,
    pfc_gen: u32,
}

impl Port {
    #[allow(clippy::too_many_arguments)]
    fn new(
        dev: Dev,
        local: u16,
        peer: u32,
        rate: Rate,
        delay: Ps,
        headroom: u64,
        red: RedProfile,
        ecn_rng: Option<Stream>,
    ) -> Self {
        Port {
            dev,
            local,
            peer,
            rate,
            delay,
            busy_until: 0,
            wake_at: NEVER,
            ctrl: VecDeque::new(),
            nonempty: 0,
            pause_mask: 0,
            rr: 0,
            turn_credited: false,
            xoff: 0,
            headroom,
            in_flight: VecDeque::new(),
            pr: std::array::from_fn(|_| PrioState {
                pause_since: NEVER,
                xoff_since: NEVER,
                ..PrioState::default()
            }),
            qps: Vec::new(),
            rr_qp: 0,
            ecn_rng,
            red,
            pfc_off: false,
            slow_rx: None,
            pcie: None,
            host_cap: None,
            host_free_at: 0,
            rx_cap: None,
            rx_free_at: 0,
        }
    }

    #[inline]
    fn push_q(&mut self, prio: usize, pkt: Packet) {
        self.pr[prio].queue.push_back(pkt);
        self.nonempty |= 1 << prio;
    }

    /// Pops the head of a queue; an emptied queue loses its DWRR deficit.
    #[inline]
    fn pop_q(&mut self, prio: usize) -> Packet {
        let pkt = self.pr[prio]
            .queue
            .pop_front()
            .expect("invariant: popped queues are non-empty");
        if self.pr[prio].queue.is_empty() {
            self.nonempty &= !(1 << prio);
            self.pr[prio].deficit = 0;
        }
        pkt
    }

    /// RED decision for a data packet leaving with `queued_bytes` still behind it
    /// (shared/reference/congestion-control.md §1.1: marking on the egress queue, evaluated
    /// at dequeue as the HPCC simulator does).
    #[inline]
    fn red_mark(&mut self, queued_bytes: u64) -> bool {
        if !self.red.enabled {
            return false;
        }
        let p = self.red.mark_probability(queued_bytes);
        p >= 1.0
            || (p > 0.0
                && self
                    .ecn_rng
                    .as_mut()
                    .expect("switch ports have an ECN stream")
                    .uniform()
                    < p)
    }
}

/// Switch-wide state.
#[derive(Debug)]
pub(crate) struct SwitchState {
    hash_seed: u32,
    buffer: u64,
    /// Bytes of the buffer set aside (headroom of all ports + reserved per port).
    set_aside: u64,
    shared_used: u64,
    used: u64,
}

impl SwitchState {
    /// Threshold 2^th x free shared buffer (`dynamic_th`, shared/reference/switch-config.md).
    #[inline]
    fn threshold(&self, th: i8) -> u64 {
        let free = self.buffer.saturating_sub(self.set_aside + self.shared_used);
        if th < 0 {
            free >> (-th) as u32
        } else {
            free << th as u32
        }
    }
}

/// NIC-wide identity.
#[derive(Debug)]
pub(crate) struct NicState {
    pub(crate) node_id: u32,
    pub(crate) ip: u32,
}

#[derive(Debug, Clone)]
pub(crate) enum Cc {
    None,
    Dcqcn(u16, Box<DcqcnState>),
    Timely(u16, Box<TimelyState>),
}

/// A queue pair: one message from its flow, sender and receiver state together.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) flow: u32,
    pub(crate) src_port: u32,
    pub(crate) route: u32,
    ack_route: u32,
    pub(crate) size: u64,
    snd_nxt: u64,
    snd_una: u64,
    next_avail: Ps,
    /// When the last data packet left, and its size: a rate increase re-times the gap
    /// after it, as a NIC's rate limiter applies a new rate at once.
    last_sent: Ps,
    last_wire: u32,
    pub(crate) prio: u8,
    class: u16,
    pub(crate) cc: Cc,
    line_bps: f64,
    mtu: u32,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    /// The receiving NIC port (where a `gdr_off` credit gate sits).
    dst_port: u32,
    /// This QP holds the gate's next credit, from its `next_avail` on.
    rx_reserved: bool,
    rx_expected: u64,
    rx_next_cnp: Ps,
    rx_nack_at: Ps,
    rx_last_nack: u64,
    last_progress: Ps,
    rto_pending: bool,
    inc_pending: bool,
    pub(crate) done: bool,
    rx_done: bool,
}

impl Qp {
    /// Current sending rate, bit/s.
    #[inline]
    pub(crate) fn rate_bps(&self) -> f64 {
        match &self.cc {
            Cc::None => self.line_bps,
            Cc::Dcqcn(_, s) => s.rc,
            Cc::Timely(_, s) => s.rate,
        }
    }
}

/// A flow's progress.
#[derive(Debug)]
pub(crate) struct Flow {
    pub(crate) qps: std::ops::Range<u32>,
    qps_left: u32,
    rx_left: u32,
    deps_left: u32,
    dependents: Vec<u32>,
    /// Earliest start (the workload's start time).
    earliest: Ps,
    /// Delay after the last dependency arrived.
    after_delay: Ps,
    /// A transfer inside a host (NVLink) that takes this long and uses no network port.
    pub(crate) local: Option<Ps>,
    pub(crate) started: Option<Ps>,
    pub(crate) finish: Option<Ps>,
    pub(crate) rx_done: Option<Ps>,
    pub(crate) ideal: Ps,
    pub(crate) lower_bound: Ps,
}

/// A traffic class at run time.
#[derive(Debug, Clone)]
pub(crate) struct ClassRt {
    pub(crate) name: String,
    pub(crate) prio: u8,
    pub(crate) cc: CcAlgorithm,
    dcqcn: xirang_fabric::config::DcqcnParams,
    timely: xirang_fabric::config::TimelyParams,
}

/// One PFC frame received, in the HPCC simulator's PFC-file terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcEvent {
    /// When it arrived.
    pub time: Ps,
    /// Node id of the receiving device.
    pub node_id: u32,
    /// True if the receiver is a switch.
    pub at_switch: bool,
    /// 1-based interface index of the receiving port.
    pub ifindex: u16,
    /// Priority.
    pub prio: u8,
    /// Pause (true) or resume.
    pub pause: bool,
}

/// Time-series samples.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// (time, counter) for every counter whose value changed since the previous sample.
    pub counters: Vec<(Ps, CounterValue)>,
    last_counters: std::collections::HashMap<(String, String), u64>,
    /// (time, qp, rate bit/s) of sending QPs.
    pub rates: Vec<(Ps, u32, f64)>,
    /// (time, port, prio, bytes) of non-empty switch egress queues.
    pub queues: Vec<(Ps, u32, u8, u64)>,
}

/// Conservation accounting.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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
}

/// Run options.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// Seed of every random stream.
    pub seed: u64,
    /// Stop at this time (None: when every flow is done).
    pub end: Option<Ps>,
    /// Sampling interval for time series (None: off).
    pub sample_interval: Option<Ps>,
    /// ECMP hashing mode.
    pub ecmp: xirang_fabric::scenario::EcmpMode,
    /// `ecmp_imbalance` fault: switches hash this share of their flows to this switch
    /// where it is one of their next hops.
    pub hot_switch: Option<(xirang_fabric::model::SwitchId, f64)>,
}

/// The simulation state.
///
/// `Q` is the event queue; the default calendar queue is the fast one, [`crate::queue::HeapQueue`]
/// is kept as the reference the benchmarks compare it with.
pub struct Sim<Q: Queue = EventQueue> {
    pub(crate) now: Ps,
    q: Q,
    live_packets: usize,
    peak_live_packets: usize,
    pub(crate) ports: Vec<Port>,
    /// Counters of each port that are not touched per packet.
    counters: Vec<PortCounters>,
    /// Each port's name (`h3/mlx5_0/1`, `leaf2:7`).
    pub(crate) port_names: Vec<String>,
    pub(crate) switches: Vec<SwitchState>,
    pub(crate) nics: Vec<NicState>,
    routes: Vec<u32>,
    pub(crate) flows: Vec<Flow>,
    pub(crate) qps: Vec<Qp>,
    pub(crate) classes: Vec<ClassRt>,
    dcqcn: Vec<Dcqcn>,
    timely: Vec<Timely>,
    pfc_lossless: [bool; N_PRIO],
    pub(crate) pfc_prios: Vec<u8>,
    pfc_th: i8,
    lossy_th: i8,
    reserved: u64,
    xon_offset: u64,
    pause_quanta: u16,
    /// `ecmp_imbalance`: the favoured switch and the share of flows sent to it, as a
    /// threshold on a 32-bit hash.
    hot_switch: Option<(u32, u64)>,
    /// Some NIC port has a `gdr_off` credit gate.
    rx_gated: bool,
    cnp_prio: u8,
    ack_prio_high: bool,
    header_bytes: u32,
    pub(crate) flows_left: usize,
    pub(crate) events: u64,
    pub(crate) packet_hops: u64,
    pub(crate) ledger: Ledger,
    pub(crate) pfc_log: Vec<PfcEvent>,
    pub(crate) samples: Samples,
    sample_interval: Option<Ps>,
    end: Option<Ps>,
    /// Injected faults (few; checked on every arrival only when there are any).
    faults: Vec<ActiveFault>,
}

/// An injected fault as the engine applies it.
#[derive(Debug)]
struct ActiveFault {
    kind: FaultKind,
    /// The port whose receiver sees it.
    port: u32,
    start: Ps,
    end: Ps,
    /// `LinkErrors`: probability that an arriving packet is corrupted, as a threshold
    /// on a uniform u64 draw.
    threshold: u64,
    rng: Stream,
    /// The kind's parameter: `SlowLink` Gbit/s, `MtuMismatch` bytes, `SlowReceiver`
    /// Gbit/s.
    param: f64,
    /// What the fault changed, restored when it ends: `SlowLink` both ends' rates,
    /// `EcnOff` whether RED was on.
    saved_rates: [Option<Rate>; 2],
    saved_red: bool,
    /// `PcieDegraded`: the link as it trained, and as it was.
    pcie: Option<PcieLink>,
    saved_pcie: Option<PcieLink>,
}

impl<Q: Queue> Sim<Q> {
    /// Builds a simulation of `flows` on `fabric` under `config`.
    pub fn new(fabric: &Fabric, config: &FabricConfig, flows: &[FlowDef], opts: &RunOptions) -> Sim<Q> {
        let mut ports = Vec::with_capacity(fabric.links.len() * 2);
        let mut nic_ports: Vec<Vec<u32>> = fabric
            .nics
            .iter()
            .map(|n| vec![u32::MAX; n.ports.len()])
            .collect();
        let mut sw_ports: Vec<Vec<u32>> = fabric
            .switches
            .iter()
            .map(|s| vec![u32::MAX; s.ports.len()])
            .collect();
        let dev_of = |n: Node| match n {
            Node::Nic(x) => Dev::Nic(x.0),
            Node::Switch(x) => Dev::Switch(x.0),
        };
        let pfc = &config.pfc;
        for l in &fabric.links {
            let base = ports.len() as u32;
            for (end, peer) in [(l.a, base + 1), (l.b, base)] {
                let id = ports.len() as u32;
                match end.node {
                    Node::Nic(n) => nic_ports[n.index()][end.port as usize] = id,
                    Node::Switch(s) => sw_ports[s.index()][end.port as usize] = id,
                }
                let rate = Rate::from_gbps(l.rate_gbps);
                let delay = l.delay_ns * PS_PER_NS;
                // HPCC sizes headroom per port as 3 x rate x one-way delay
                // (shared/reference/congestion-control.md §6).
                let headroom = pfc.headroom_bytes.unwrap_or_else(|| {
                    xirang_fabric::config::default_headroom_bytes(l.rate_gbps, l.delay_ns)
                });
                let red = match end.node {
                    Node::Switch(s) => config
                        .ecn
                        .profile_at(fabric.switches[s.index()].tier, l.rate_gbps),
                    Node::Nic(_) => RedProfile {
                        enabled: false,
                        ..RedProfile::default()
                    },
                };
                let ecn_rng = matches!(end.node, Node::Switch(_))
                    .then(|| Stream::new(opts.seed, Purpose::Ecn, u64::from(id)));
                ports.push(Port::new(
                    dev_of(end.node),
                    end.port,
                    peer,
                    rate,
                    delay,
                    headroom,
                    red,
                    ecn_rng,
                ));
            }
        }
        for p in &mut ports {
            if let Dev::Nic(n) = p.dev {
                p.pcie = Some(fabric.nics[n as usize].pcie);
            }
        }
        let n_nics = fabric.nics.len() as u32;
        // Node ids: HPCC topologies keep the file's ids (hosts `h<id>`, switches `sw<id>`);
        // otherwise NICs count from 0 and switches follow.
        let hpcc_ids = fabric
            .hosts
            .iter()
            .all(|h| h.nics.len() == 1 && xirang_fabric::hpcc::node_id_from_name(&h.name).is_some())
            && fabric
                .switches
                .iter()
                .all(|s| xirang_fabric::hpcc::node_id_from_name(&s.name).is_some());
        let nic_node_id = |i: usize| {
            if hpcc_ids {
                xirang_fabric::hpcc::node_id_from_name(&fabric.hosts[fabric.nics[i].host.index()].name)
                    .expect("checked")
            } else {
                i as u32
            }
        };
        let sw_node_id = |i: usize| {
            if hpcc_ids {
                xirang_fabric::hpcc::node_id_from_name(&fabric.switches[i].name).expect("checked")
            } else {
                n_nics + i as u32
            }
        };
        let seed_mix = match opts.ecmp {
            EcmpMode::Hpcc => 0,
            EcmpMode::Seeded => Stream::new(opts.seed, Purpose::Ecmp, 0).next_u64() as u32,
        };
        let n_lossless_ports = |s: usize| sw_ports[s].iter().filter(|p| **p != u32::MAX).count() as u64;
        let switches: Vec<SwitchState> = fabric
            .switches
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let total_hdrm: u64 = if pfc.enabled {
                    sw_ports[i]
                        .iter()
                        .filter(|p| **p != u32::MAX)
                        .map(|p| ports[*p as usize].headroom)
                        .sum()
                } else {
                    0
                };
                SwitchState {
                    hash_seed: sw_node_id(i) ^ seed_mix,
                    buffer: config.buffer.switch_bytes,
                    set_aside: total_hdrm + n_lossless_ports(i) * config.buffer.reserved_bytes,
                    shared_used: 0,
                    used: 0,
                }
            })
            .collect();
        let nics: Vec<NicState> = (0..fabric.nics.len())
            .map(|i| {
                let id = nic_node_id(i);
                NicState {
                    node_id: id,
                    ip: xirang_fabric::hpcc::node_ip(id),
                }
            })
            .collect();
        let classes: Vec<ClassRt> = config
            .classes
            .iter()
            .map(|(name, c)| ClassRt {
                name: name.clone(),
                prio: c.priority,
                cc: c.cc,
                dcqcn: c.dcqcn,
                timely: c.timely,
            })
            .collect();
        let pfc_lossless: [bool; N_PRIO] = std::array::from_fn(|p| pfc.is_lossless(p as u8));
        let mut sim = Sim {
            now: 0,
            // Most events are scheduled one serialization plus one link delay ahead.
            q: Q::with_horizon(
                fabric.links.iter().map(|l| l.delay_ns).max().unwrap_or(0) * PS_PER_NS + PS_PER_US,
            ),
            live_packets: 0,
            peak_live_packets: 0,
            counters: vec![PortCounters::default(); ports.len()],
            port_names: ports
                .iter()
                .map(|p| {
                    let node = match p.dev {
                        Dev::Nic(n) => Node::Nic(NicId(n)),
                        Dev::Switch(s) => Node::Switch(xirang_fabric::model::SwitchId(s)),
                    };
                    fabric.port_name(xirang_fabric::model::PortRef { node, port: p.local })
                })
                .collect(),
            ports,
            switches,
            nics,
            routes: Vec::new(),
            flows: Vec::with_capacity(flows.len()),
            qps: Vec::new(),
            classes,
            dcqcn: Vec::new(),
            timely: Vec::new(),
            pfc_lossless,
            pfc_prios: if pfc.enabled {
                pfc.priorities.clone()
            } else {
                Vec::new()
            },
            pfc_th: pfc.dynamic_th,
            lossy_th: config.buffer.lossy_dynamic_th,
            reserved: config.buffer.reserved_bytes,
            xon_offset: pfc.xon_offset_bytes,
            pause_quanta: pfc.pause_quanta,
            rx_gated: false,
            hot_switch: opts
                .hot_switch
                .map(|(s, share)| (s.0, (share.clamp(0.0, 1.0) * f64::from(u32::MAX)) as u64)),
            cnp_prio: config.cnp.priority,
            ack_prio_high: config.cnp.ack_on_cnp_priority,
            header_bytes: config.transport.header_bytes,
            flows_left: flows.len(),
            events: 0,
            packet_hops: 0,
            ledger: Ledger::default(),
            faults: Vec::new(),
            pfc_log: Vec::new(),
            samples: Samples::default(),
            sample_interval: opts.sample_interval,
            end: opts.end,
        };
        sim.add_flows(fabric, config, flows, &nic_ports, &sw_ports, opts);
        if let Some(iv) = opts.sample_interval {
            sim.q.push(iv, ev(EV_SAMPLE, 0, 0));
        }
        sim
    }

    fn add_flows(
        &mut self,
        fabric: &Fabric,
        config: &FabricConfig,
        defs: &[FlowDef],
        nic_ports: &[Vec<u32>],
        sw_ports: &[Vec<u32>],
        opts: &RunOptions,
    ) {
        let graph = Graph::new(fabric);
        let mut hop_cache: Vec<Option<Vec<Vec<Adj>>>> = vec![None; fabric.nics.len()];
        let mut sport_rng = Stream::new(opts.seed, Purpose::Ecmp, 1);
        let mut pair_sport: std::collections::BTreeMap<(u32, u32), u16> = Default::default();
        let config_qps = config.transport.qps_per_connection.max(1);
        for (fi, d) in defs.iter().enumerate() {
            let n_qps = d.qps.unwrap_or(config_qps).max(1);
            if let Some(dur) = d.local {
                let at = self.qps.len() as u32;
                self.flows.push(Flow {
                    qps: at..at,
                    qps_left: 0,
                    rx_left: 0,
                    deps_left: d.after.len() as u32,
                    dependents: Vec::new(),
                    earliest: d.start,
                    after_delay: d.after_delay,
                    local: Some(dur),
                    started: None,
                    finish: None,
                    rx_done: None,
                    ideal: dur,
                    lower_bound: dur,
                });
                continue;
            }
            let class_idx = self
                .classes
                .iter()
                .position(|c| c.name == d.class)
                .expect("invariant: classes are validated at load") as u16;
            let class = self.classes[class_idx as usize].clone();
            let prio = d.prio.unwrap_or(class.prio);
            let src_mtu = fabric.nics[d.src.index()].ports[0].mtu_bytes;
            let dst_mtu = fabric.nics[d.dst.index()].ports[0].mtu_bytes;
            let mtu = config
                .transport
                .roce_mtu_bytes
                .min(roce_active_mtu(src_mtu).unwrap_or(256))
                .min(roce_active_mtu(dst_mtu).unwrap_or(256));
            let first_qp = self.qps.len() as u32;
            let per_qp = d.bytes / u64::from(n_qps);
            for k in 0..n_qps {
                let bytes = if k == 0 {
                    d.bytes - per_qp * u64::from(n_qps - 1)
                } else {
                    per_qp
                };
                let (sport, dport) = match (d.hpcc_ports, opts.ecmp) {
                    (Some(p), _) if k == 0 => p,
                    (_, EcmpMode::Hpcc) => {
                        let e = pair_sport.entry((d.src.0, d.dst.0)).or_insert(10000);
                        let s = *e;
                        *e = e.wrapping_add(1);
                        (s, 100)
                    }
                    // RoCE v2 source ports come from a hash of the QP number; draw one from
                    // the ephemeral range (49152..65535).
                    _ => (49152 + sport_rng.below(16384) as u16, 4791),
                };
                let src_ip = self.nics[d.src.index()].ip;
                let dst_ip = self.nics[d.dst.index()].ip;
                let route = self.route(
                    fabric,
                    &graph,
                    &mut hop_cache,
                    nic_ports,
                    sw_ports,
                    d.src,
                    d.dst,
                    [src_ip, dst_ip, u32::from(sport) | (u32::from(dport) << 16)],
                    opts.ecmp,
                );
                let ack_route = self.route(
                    fabric,
                    &graph,
                    &mut hop_cache,
                    nic_ports,
                    sw_ports,
                    d.dst,
                    d.src,
                    [dst_ip, src_ip, u32::from(dport) | (u32::from(sport) << 16)],
                    opts.ecmp,
                );
                let src_port = self.routes[route as usize];
                let line_bps = self.ports[src_port as usize].rate.bps;
                let cc = match class.cc {
                    CcAlgorithm::None => Cc::None,
                    CcAlgorithm::Dcqcn => {
                        let p = Dcqcn::new(&class.dcqcn, line_bps);
                        let idx = intern(&mut self.dcqcn, p);
                        Cc::Dcqcn(idx, Box::new(DcqcnState::new(&self.dcqcn[idx as usize])))
                    }
                    CcAlgorithm::Timely => {
                        let p = Timely::new(&class.timely, line_bps);
                        let idx = intern(&mut self.timely, p);
                        Cc::Timely(idx, Box::new(TimelyState::new(&self.timely[idx as usize])))
                    }
                };
                self.qps.push(Qp {
                    flow: fi as u32,
                    src_port,
                    route,
                    ack_route,
                    size: bytes,
                    snd_nxt: 0,
                    snd_una: 0,
                    next_avail: 0,
                    last_sent: 0,
                    last_wire: 0,
                    prio,
                    class: class_idx,
                    cc,
                    line_bps,
                    mtu,
                    sport,
                    dport,
                    dst_port: self.route_end(route),
                    rx_reserved: false,
                    rx_expected: 0,
                    rx_next_cnp: 0,
                    rx_nack_at: 0,
                    rx_last_nack: u64::MAX,
                    last_progress: 0,
                    rto_pending: false,
                    inc_pending: false,
                    done: false,
                    rx_done: false,
                });
            }
            let qps = first_qp..self.qps.len() as u32;
            let (ideal, lower_bound) = self.ideal_fct(self.qps[first_qp as usize].route, d.bytes, mtu);
            self.flows.push(Flow {
                qps_left: qps.len() as u32,
                rx_left: qps.len() as u32,
                qps,
                deps_left: d.after.len() as u32,
                dependents: Vec::new(),
                earliest: d.start,
                after_delay: d.after_delay,
                local: None,
                started: None,
                finish: None,
                rx_done: None,
                ideal,
                lower_bound,
            });
        }
        for (fi, d) in defs.iter().enumerate() {
            for &a in &d.after {
                self.flows[a as usize].dependents.push(fi as u32);
            }
            if d.after.is_empty() {
                self.q.push(d.start, ev(EV_FLOW_START, fi as u32, 0));
            }
        }
        // Zero-byte QPs are complete from the start.
        for (qi, qp) in self.qps.iter_mut().enumerate() {
            if qp.size == 0 {
                let _ = qi;
                qp.done = true;
                qp.rx_done = true;
            }
        }
    }

    /// Computes a route from `src` to `dst` hop by hop, as switches would forward it: at
    /// each node one of the equal-cost next hops is picked by MurmurHash3 of the flow key
    /// with the node's seed (HPCC switch-node.cc `EcmpHash`). Returns its start in the route
    /// arena; the route lists the egress port at every hop, NIC first.
    #[allow(clippy::too_many_arguments)]
    fn route(
        &mut self,
        fabric: &Fabric,
        graph: &Graph,
        hop_cache: &mut [Option<Vec<Vec<Adj>>>],
        nic_ports: &[Vec<u32>],
        sw_ports: &[Vec<u32>],
        src: NicId,
        dst: NicId,
        key: [u32; 3],
        ecmp: EcmpMode,
    ) -> u32 {
        let (nics, switches) = (&self.nics, &self.switches);
        let lists = hop_cache[dst.index()].get_or_insert_with(|| {
            // HPCC orders next hops by the addresses of its node objects: hosts (small,
            // heap) below switches (megabytes each, mmap'd top down), so hosts ascend and
            // switches descend by id (docs/hpcc-model.md §3). Otherwise: ascending ids.
            let rank = |idx: u32| -> u64 {
                match (graph.node(idx), ecmp) {
                    (Node::Nic(n), _) => u64::from(nics[n.index()].node_id),
                    (Node::Switch(s), EcmpMode::Hpcc) => (1 << 40) - u64::from(switches[s.index()].hash_seed),
                    (Node::Switch(s), EcmpMode::Seeded) => (1 << 32) + u64::from(s.0),
                }
            };
            next_hop_lists(graph, graph.index(Node::Nic(dst)), &rank, ecmp == EcmpMode::Hpcc)
        });
        let mut bytes = [0u8; 12];
        for (i, k) in key.iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&k.to_le_bytes());
        }
        let start = self.routes.len() as u32;
        let mut at = graph.index(Node::Nic(src));
        let target = graph.index(Node::Nic(dst));
        while at != target {
            let hops = &lists[at as usize];
            assert!(
                !hops.is_empty(),
                "invariant: every flow's endpoints are connected ({} to {})",
                fabric.node_name(Node::Nic(src)),
                fabric.node_name(Node::Nic(dst))
            );
            let (pick, port) = match graph.node(at) {
                Node::Switch(s) => {
                    let seed = self.switches[s.index()].hash_seed;
                    let h = murmur3_32(&bytes, seed);
                    let hot = self.hot_switch.and_then(|(hot, th)| {
                        let i = hops.iter().position(|a| {
                            graph.node(a.peer) == Node::Switch(xirang_fabric::model::SwitchId(hot))
                        })?;
                        (hops.len() > 1).then_some((i, th))
                    });
                    let a = match hot {
                        // A second, independent hash decides whether the flow goes to the
                        // favoured switch; the rest spread over the other next hops.
                        Some((i, th)) => {
                            if u64::from(murmur3_32(&bytes, seed ^ HOT_HASH_SALT)) < th {
                                hops[i]
                            } else {
                                let k = h as usize % (hops.len() - 1);
                                hops[if k >= i { k + 1 } else { k }]
                            }
                        }
                        None => hops[h as usize % hops.len()],
                    };
                    (a, sw_ports[s.index()][a.port as usize])
                }
                // A multi-port NIC spreads QPs over its ports by the same key.
                Node::Nic(n) => {
                    let a = hops[murmur3_32(&bytes, 0) as usize % hops.len()];
                    (a, nic_ports[n.index()][a.port as usize])
                }
            };
            self.routes.push(port);
            at = pick.peer;
        }
        start
    }

    /// The NIC port at the end of the route starting at `route`.
    fn route_end(&self, route: u32) -> u32 {
        let mut i = route as usize;
        loop {
            let peer = self.ports[self.routes[i] as usize].peer;
            if matches!(self.ports[peer as usize].dev, Dev::Nic(_)) {
                return peer;
            }
            i += 1;
        }
    }

    /// When a `gdr_off` receiver grants QP `qi` its next credit (0: no gate, or the QP
    /// already holds one).
    #[inline]
    fn rx_gate(&self, qi: u32) -> Ps {
        // Runs without a `gdr_off` fault (nearly all) skip the receiver lookup per QP.
        if !self.rx_gated {
            return 0;
        }
        let q = &self.qps[qi as usize];
        let d = &self.ports[q.dst_port as usize];
        if d.rx_cap.is_some() && !q.rx_reserved {
            d.rx_free_at
        } else {
            0
        }
    }

    /// QP `qi` finds the receiver's credit gate busy: it takes the next credit in turn
    /// (free at `at`) and waits for it, so that the receiver's senders share its rate in
    /// the order they asked, as NCCL's receiver grants credit per connection.
    fn reserve_rx(&mut self, qi: u32, at: Ps) {
        let header = self.header_bytes;
        let q = &mut self.qps[qi as usize];
        let wire = (q.size - q.snd_nxt).min(u64::from(q.mtu)) as u32 + header;
        let d = &mut self.ports[q.dst_port as usize];
        if let Some(cap) = d.rx_cap {
            d.rx_free_at = at + cap.tx_time(wire);
            q.next_avail = at;
            q.rx_reserved = true;
        }
    }

    /// The HPCC simulator's "standalone" FCT: base RTT (twice the path's propagation delay
    /// plus one MTU-sized payload serialised at every hop) plus all bytes with headers at
    /// the bottleneck rate (docs/hpcc-model.md §6, `qp_finish`). It counts the first hop's
    /// serialization twice, so a real FCT can come in under it; the second value is a
    /// strict lower bound: every wire byte at the bottleneck plus the propagation delay
    /// there and back.
    fn ideal_fct(&self, route: u32, bytes: u64, mtu: u32) -> (Ps, Ps) {
        let mut delay = 0;
        let mut tx_one = 0;
        let mut bottleneck = f64::INFINITY;
        let mut i = route as usize;
        loop {
            let p = &self.ports[self.routes[i] as usize];
            delay += p.delay;
            tx_one += p.rate.tx_time(mtu);
            bottleneck = bottleneck.min(p.rate.bps);
            if matches!(self.ports[p.peer as usize].dev, Dev::Nic(_)) {
                break;
            }
            i += 1;
        }
        let pkts = bytes.div_ceil(u64::from(mtu)).max(1);
        let wire = bytes + pkts * u64::from(self.header_bytes);
        let at_bottleneck = (wire as f64 * 8.0 * 1e12 / bottleneck).floor() as Ps;
        (2 * delay + tx_one + at_bottleneck, 2 * delay + at_bottleneck)
    }

    /// Runs until every flow is done, the end time, or no events remain. `progress` is
    /// called with the simulated time every few thousand events.
    pub fn run(&mut self, progress: &mut dyn FnMut(Ps)) {
        const PROGRESS_EVERY: u64 = 1 << 16;
        let end = self.end.unwrap_or(NEVER);
        while self.flows_left > 0 {
            let Some((t, e)) = self.q.pop_until(end) else {
                if self.end.is_some() && !self.q.is_empty() {
                    self.now = end;
                }
                break;
            };
            debug_assert!(t >= self.now, "invariant: time never goes backwards");
            self.now = t;
            self.dispatch(e);
            self.events += 1;
            if self.events.is_multiple_of(PROGRESS_EVERY) {
                progress(self.now);
            }
        }
        self.settle_pause_durations();
    }

    #[inline]
    fn dispatch(&mut self, e: u64) {
        let a = e as u32;
        let b = ((e >> 32) & 0xFF_FFFF) as u32;
        match e >> 56 {
            EV_WAKE => {
                if self.ports[a as usize].wake_at == self.now {
                    self.ports[a as usize].wake_at = NEVER;
                    self.try_send(a);
                }
            }
            EV_ARRIVE => self.arrive(a),
            EV_FLOW_START => self.start_flow(a),
            EV_DCQCN_DEC => self.dcqcn_dec(a),
            EV_DCQCN_INC => self.dcqcn_inc(a),
            EV_RTO => self.rto(a),
            EV_PFC_REFRESH => self.pfc_refresh(a, (b & 7) as usize, b >> 3),
            EV_SAMPLE => self.sample(),
            EV_FAULT => self.fault_event(a, b == 1),
            EV_RX_DRAIN => self.rx_drain(a, b as usize),
            EV_LOCAL_DONE => {
                self.flows[a as usize].finish = Some(self.now);
                self.flows_left -= 1;
                self.flow_arrived(a);
            }
            _ => unreachable!("invariant: only known event kinds are scheduled"),
        }
    }

    #[inline]
    fn schedule_wake(&mut self, p: u32, t: Ps) {
        let port = &mut self.ports[p as usize];
        if port.wake_at <= t {
            return;
        }
        port.wake_at = t;
        self.q.push(t, ev(EV_WAKE, p, 0));
    }

    /// Something may be sendable on port `p`: send now or schedule a wake.
    #[inline]
    fn kick(&mut self, p: u32) {
        let busy = self.ports[p as usize].busy_until;
        if busy > self.now {
            self.schedule_wake(p, busy);
        } else if self.ports[p as usize].wake_at > self.now {
            self.try_send(p);
        }
    }

    fn try_send(&mut self, p: u32) {
        let busy = self.ports[p as usize].busy_until;
        if busy > self.now {
            self.schedule_wake(p, busy);
            return;
        }
        match self.ports[p as usize].dev {
            Dev::Switch(_) => self.switch_send(p),
            Dev::Nic(_) => self.nic_send(p),
        }
    }

    /// Puts a packet on the wire of port `p`.
    #[inline]
    fn transmit(&mut self, p: u32, pkt: Packet) {
        let (size, prio) = (pkt.size, pkt.prio);
        let now = self.now;
        let port = &mut self.ports[p as usize];
        let tx = port.rate.tx_time(u32::from(size));
        port.busy_until = now + tx;
        let st = &mut port.pr[prio as usize];
        st.tx_bytes += u64::from(size);
        st.tx_packets += 1;
        if pkt.kind == Kind::Pause {
            // Counted when sent, like the hardware counter (and like the transmit counters
            // it is subtracted from).
            self.counters[p as usize].tx_pause[prio as usize] += 1;
        }
        let at = now + tx + port.delay;
        let was_empty = port.in_flight.is_empty();
        port.in_flight.push_back((at, pkt));
        self.packet_hops += 1;
        if was_empty {
            self.q.push(at, ev(EV_ARRIVE, p, 0));
        }
    }

    fn arrive(&mut self, p: u32) {
        let port = &mut self.ports[p as usize];
        let (_, pkt) = port
            .in_flight
            .pop_front()
            .expect("invariant: an Arrive event has a packet in flight");
        if let Some(&(next, _)) = port.in_flight.front() {
            self.q.push(next, ev(EV_ARRIVE, p, 0));
        }
        let q = port.peer;
        if !self.faults.is_empty() && self.faulted(q, &pkt) {
            return;
        }
        match self.ports[q as usize].dev {
            Dev::Switch(s) => self.switch_receive(s, q, pkt),
            Dev::Nic(_) => self.nic_receive(q, pkt),
        }
    }

    /// Applies the faults at receiving port `q` to an arriving packet; true when the
    /// packet is lost (and accounted).
    fn faulted(&mut self, q: u32, pkt: &Packet) -> bool {
        let now = self.now;
        let mut lost = false;
        for f in &mut self.faults {
            if f.port != q || now < f.start || now >= f.end {
                continue;
            }
            match f.kind {
                FaultKind::LinkDown => lost = true,
                FaultKind::MtuMismatch => {
                    // The port MTU bounds the IP packet: the frame less its Ethernet
                    // header and FCS.
                    if u32::from(pkt.size).saturating_sub(ETH_HEADER_FCS_BYTES) as f64 > f.param {
                        let c = &mut self.counters[q as usize];
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
                        let c = &mut self.counters[q as usize];
                        c.rx_errors += 1;
                        c.symbol_errors += 1;
                        lost = true;
                    }
                }
            }
        }
        if lost {
            self.ledger.dropped_packets += 1;
            self.ledger.dropped_bytes += u64::from(pkt.size);
            if pkt.kind == Kind::Data {
                self.ledger.data_dropped_bytes += u64::from(pkt.payload);
            }
            self.live_packets -= 1;
        }
        lost
    }

    /// A fault begins or (with `end`) ends.
    fn fault_event(&mut self, i: u32, end: bool) {
        let f = &mut self.faults[i as usize];
        let q = f.port as usize;
        let peer = self.ports[q].peer as usize;
        match (f.kind, end) {
            // Both ends count a link going down.
            (FaultKind::LinkDown, false) => {
                self.counters[q].link_downed += 1;
                self.counters[peer].link_downed += 1;
            }
            (FaultKind::SlowLink, false) => {
                for (k, p) in [q, peer].into_iter().enumerate() {
                    f.saved_rates[k] = Some(self.ports[p].rate);
                    self.ports[p].rate = Rate::from_gbps(f.param);
                }
            }
            (FaultKind::SlowLink, true) => {
                for (k, p) in [q, peer].into_iter().enumerate() {
                    if let Some(r) = f.saved_rates[k].take() {
                        self.ports[p].rate = r;
                    }
                }
            }
            (FaultKind::EcnOff, false) => {
                f.saved_red = self.ports[q].red.enabled;
                self.ports[q].red.enabled = false;
            }
            (FaultKind::EcnOff, true) => self.ports[q].red.enabled = f.saved_red,
            (FaultKind::PfcOff, off) => self.ports[q].pfc_off = !off,
            (FaultKind::SlowReceiver, false) => {
                self.ports[q].slow_rx = Some(SlowRx {
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
                f.saved_pcie = self.ports[q].pcie;
                let gbps = link.usable_gbps();
                for p in self.nic_port_ids(q) {
                    let port = &mut self.ports[p];
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
                    let port = &mut self.ports[p];
                    port.pcie = saved;
                    port.host_cap = None;
                }
                self.end_slow_rx(q);
            }
            (FaultKind::SlowReceiver, true) => self.end_slow_rx(q),
            // Applied to the flows before the run (`nic_funnel`) or per packet.
            (
                FaultKind::LinkDown
                | FaultKind::LinkErrors
                | FaultKind::MtuMismatch
                | FaultKind::NicFunnel
                | FaultKind::EcmpImbalance
                | FaultKind::GdrOff
                | FaultKind::SingleQp,
                _,
            ) => {}
        }
    }

    /// The ports of the NIC that owns port `q`.
    fn nic_port_ids(&self, q: usize) -> Vec<usize> {
        let dev = self.ports[q].dev;
        (0..self.ports.len())
            .filter(|&p| self.ports[p].dev == dev)
            .collect()
    }

    /// A slow receiver drains at full speed again: resume whatever it paused.
    fn end_slow_rx(&mut self, q: usize) {
        for q in self.nic_port_ids(q) {
            self.ports[q].slow_rx = None;
            for prio in 0..N_PRIO {
                if self.ports[q].xoff & (1 << prio) != 0 {
                    self.send_pfc(q as u32, prio, false);
                }
            }
        }
    }

    /// A slow receiver's NIC accounts a data packet into its backlog and asks its peer to
    /// pause when the backlog passes XOFF. Delivery itself is not delayed (a
    /// simplification: the pause, not the receive queue, is what limits the sender, and
    /// what the counters show).
    fn slow_rx_arrival(&mut self, p: u32, pkt: &Packet) {
        let now = self.now;
        let prio = pkt.prio as usize;
        let port = &mut self.ports[p as usize];
        let Some(rx) = port.slow_rx.as_mut() else {
            return;
        };
        rx.drain_to(now);
        rx.backlog_bytes += f64::from(pkt.size);
        let backlog = rx.backlog_bytes;
        let drain_bps = rx.drain_bps;
        if backlog >= NIC_RX_XOFF_BYTES && self.pfc_lossless[prio] && port.xoff & (1 << prio) == 0 {
            self.send_pfc(p, prio, true);
            self.schedule_rx_drain(p, prio, backlog, drain_bps);
        }
    }

    fn schedule_rx_drain(&mut self, p: u32, prio: usize, backlog: f64, drain_bps: f64) {
        let wait_s = (backlog - NIC_RX_XON_BYTES).max(0.0) * 8.0 / drain_bps;
        let at = self.now + ((wait_s * PS_PER_S as f64) as Ps).max(1);
        self.q.push(at, ev(EV_RX_DRAIN, p, prio as u32));
    }

    /// A slow receiver's backlog may have drained to XON: resume the peer, or wait more.
    fn rx_drain(&mut self, p: u32, prio: usize) {
        let now = self.now;
        let port = &mut self.ports[p as usize];
        let Some(rx) = port.slow_rx.as_mut() else {
            return;
        };
        if port.xoff & (1 << prio) == 0 {
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

    /// Injects the scenario's faults (validated by the scenario: every target is a port
    /// with a link). Call before [`Sim::run`].
    pub fn inject(&mut self, fabric: &Fabric, faults: &[Fault], seed: u64) {
        for (i, f) in faults.iter().enumerate() {
            let Ok(pr) = parse_port_ref(fabric, &f.target, None) else {
                continue;
            };
            let name = fabric.port_name(pr);
            let Some(port) = self.port_names.iter().position(|n| *n == name) else {
                continue;
            };
            let start = (f.start_us * PS_PER_US as f64) as Ps;
            let end = f.end_us.map(|e| (e * PS_PER_US as f64) as Ps).unwrap_or(NEVER);
            let loss = f.loss.unwrap_or(0.0).clamp(0.0, 1.0);
            let idx = self.faults.len() as u32;
            self.faults.push(ActiveFault {
                kind: f.kind,
                port: port as u32,
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
            match f.kind {
                // Checked on every arriving packet, or applied to the flows before the run.
                FaultKind::LinkErrors
                | FaultKind::MtuMismatch
                | FaultKind::NicFunnel
                | FaultKind::EcmpImbalance
                | FaultKind::SingleQp => {}
                // Configuration: in force before the first packet. Each port of the NIC
                // gets the cap on its own (a multi-port NIC would share it, as with
                // `pcie_degraded`); the cap counts wire bytes, headers included.
                FaultKind::GdrOff => {
                    let cap = Rate::from_gbps(f.bounce_gbps.unwrap_or(0.0));
                    for p in self.nic_port_ids(port) {
                        self.ports[p].host_cap = Some(cap);
                        self.ports[p].rx_cap = Some(cap);
                        self.rx_gated = true;
                    }
                }
                FaultKind::LinkDown => self.q.push(start, ev(EV_FAULT, idx, 0)),
                FaultKind::SlowLink
                | FaultKind::EcnOff
                | FaultKind::PfcOff
                | FaultKind::SlowReceiver
                | FaultKind::PcieDegraded => {
                    self.q.push(start, ev(EV_FAULT, idx, 0));
                    if end != NEVER {
                        self.q.push(end, ev(EV_FAULT, idx, 1));
                    }
                }
            }
        }
    }

    /// Accounts a packet a NIC or switch creates.
    #[inline]
    fn alloc(&mut self, pkt: Packet) -> Packet {
        self.ledger.created_packets += 1;
        self.ledger.created_bytes += u64::from(pkt.size);
        if pkt.kind == Kind::Data {
            self.ledger.data_sent_bytes += u64::from(pkt.payload);
        }
        self.live_packets += 1;
        if self.live_packets > self.peak_live_packets {
            self.peak_live_packets = self.live_packets;
        }
        pkt
    }

    /// Accounts a packet that reached the device it was for.
    #[inline]
    fn consume(&mut self, k: &Packet) {
        self.ledger.delivered_packets += 1;
        self.ledger.delivered_bytes += u64::from(k.size);
        if k.kind == Kind::Data {
            self.ledger.data_delivered_bytes += u64::from(k.payload);
        }
        self.live_packets -= 1;
    }

    fn drop_packet(&mut self, out: u32, k: &Packet) {
        self.ledger.dropped_packets += 1;
        self.ledger.dropped_bytes += u64::from(k.size);
        if k.kind == Kind::Data {
            self.ledger.data_dropped_bytes += u64::from(k.payload);
        }
        let c = &mut self.counters[out as usize];
        c.tx_discards += 1;
        c.q_dropped[k.prio as usize] += 1;
        self.live_packets -= 1;
    }

    // ----- PFC ---------------------------------------------------------------------------

    /// Is port `p`'s transmitter paused on `prio`? Settles expired pauses' durations.
    #[inline]
    fn is_paused(&mut self, p: u32, prio: usize) -> bool {
        let now = self.now;
        let port = &mut self.ports[p as usize];
        if port.pr[prio].paused_until > now {
            return true;
        }
        port.pause_mask &= !(1 << prio);
        if port.pr[prio].pause_since != NEVER {
            self.counters[p as usize].rx_pause_ps[prio] +=
                port.pr[prio].paused_until - port.pr[prio].pause_since;
            port.pr[prio].pause_since = NEVER;
        }
        false
    }

    fn settle_pause_durations(&mut self) {
        let now = self.now;
        for (pi, port) in self.ports.iter_mut().enumerate() {
            let c = &mut self.counters[pi];
            for prio in 0..N_PRIO {
                if port.pr[prio].pause_since != NEVER {
                    c.rx_pause_ps[prio] += port.pr[prio].paused_until.min(now) - port.pr[prio].pause_since;
                    port.pr[prio].pause_since = if port.pr[prio].paused_until > now {
                        now
                    } else {
                        NEVER
                    };
                }
                if port.xoff & (1 << prio) != 0 {
                    c.tx_pause_ps[prio] += now - port.pr[prio].xoff_since;
                    port.pr[prio].xoff_since = now;
                }
            }
        }
    }

    /// Sends a PFC frame out of port `p` (towards its peer) for `prio`.
    fn send_pfc(&mut self, p: u32, prio: usize, xoff: bool) {
        let quanta = if xoff { self.pause_quanta } else { 0 };
        let pkt = self.alloc(Packet {
            seq: u64::from(quanta),
            ts: self.now,
            qp: u32::MAX,
            route: 0,
            in_port: p,
            size: PFC_FRAME_BYTES,
            payload: 0,
            hop: 0,
            kind: Kind::Pause,
            prio: prio as u8,
            ce: false,
        });
        let now = self.now;
        let port = &mut self.ports[p as usize];
        port.ctrl.push_back(pkt);
        if xoff {
            if port.xoff & (1 << prio) == 0 {
                port.xoff |= 1 << prio;
                port.pr[prio].xoff_since = now;
            }
            port.pr[prio].pfc_gen = port.pr[prio].pfc_gen.wrapping_add(1) & 0x1F_FFFF;
            // Re-send XOFF when half the pause time has passed, as switches refresh pauses
            // before they expire.
            let half = port.rate.tx_time(u32::from(quanta) * PAUSE_QUANTUM_BYTES) / 2;
            let gen_ = port.pr[prio].pfc_gen;
            self.q.push(
                now + half.max(1),
                ev(EV_PFC_REFRESH, p, (gen_ << 3) | prio as u32),
            );
        } else {
            port.xoff &= !(1 << prio);
            self.counters[p as usize].tx_pause_ps[prio] += now - port.pr[prio].xoff_since;
            port.pr[prio].xoff_since = NEVER;
        }
        self.kick(p);
    }

    fn pfc_refresh(&mut self, p: u32, prio: usize, gen_: u32) {
        let port = &self.ports[p as usize];
        if port.xoff & (1 << prio) != 0 && port.pr[prio].pfc_gen == gen_ {
            self.send_pfc(p, prio, true);
        }
    }

    /// Port `p` received a PFC frame from its peer.
    fn receive_pause(&mut self, p: u32, pkt: &Packet) {
        let prio = pkt.prio as usize;
        let quanta = pkt.seq as u32;
        let now = self.now;
        let paused = self.is_paused(p, prio);
        let port = &mut self.ports[p as usize];
        self.counters[p as usize].rx_pause[prio] += 1;
        let (node_id, at_switch) = match port.dev {
            Dev::Nic(n) => (self.nics[n as usize].node_id, false),
            Dev::Switch(s) => (self.switches[s as usize].hash_seed, true),
        };
        self.pfc_log.push(PfcEvent {
            time: now,
            node_id,
            at_switch,
            ifindex: port.local + 1,
            prio: prio as u8,
            pause: quanta > 0,
        });
        if quanta > 0 {
            if !paused {
                port.pr[prio].pause_since = now;
            }
            port.pr[prio].paused_until = now + port.rate.tx_time(quanta * PAUSE_QUANTUM_BYTES);
            port.pause_mask |= 1 << prio;
        } else {
            if paused {
                self.counters[p as usize].rx_pause_ps[prio] += now - port.pr[prio].pause_since;
                port.pr[prio].pause_since = NEVER;
                self.counters[p as usize].rx_pause_transition[prio] += 1;
            }
            port.pr[prio].paused_until = 0;
            port.pause_mask &= !(1 << prio);
            self.kick(p);
        }
    }

    // ----- switches ----------------------------------------------------------------------

    fn switch_receive(&mut self, s: u32, inp: u32, mut pkt: Packet) {
        if pkt.kind == Kind::Pause {
            self.receive_pause(inp, &pkt);
            self.consume(&pkt);
            return;
        }
        let out = self.routes[(pkt.route + u32::from(pkt.hop)) as usize];
        pkt.hop += 1;
        let prio = pkt.prio as usize;
        let size = u64::from(pkt.size);
        let lossless = self.pfc_lossless[prio] && !self.ports[inp as usize].pfc_off;
        let reserved = self.reserved;
        let sw = &mut self.switches[s as usize];
        if sw.used + size > sw.buffer {
            self.counters[inp as usize].in_discards += 1;
            self.drop_packet(out, &pkt);
            return;
        }
        // Thresholds are taken before this packet is counted (HPCC `CheckIngressAdmission`).
        let port = &mut self.ports[inp as usize];
        let shared_pq = port.pr[prio].ing.saturating_sub(reserved);
        let new = port.pr[prio].ing + size;
        if lossless {
            let thr = sw.threshold(self.pfc_th);
            if port.pr[prio].hdrm + size > port.headroom && shared_pq + size > thr {
                // Headroom overflow: a lossless packet is lost. Sized headroom prevents it.
                self.counters[inp as usize].in_discards += 1;
                self.drop_packet(out, &pkt);
                return;
            }
            if new <= reserved {
                port.pr[prio].ing = new;
            } else if new - reserved > thr {
                port.pr[prio].hdrm += size;
            } else {
                port.pr[prio].ing = new;
                sw.shared_used += size.min(new - reserved);
            }
        } else {
            let thr = sw.threshold(self.lossy_th);
            if shared_pq + size > thr {
                self.counters[inp as usize].in_discards += 1;
                self.drop_packet(out, &pkt);
                return;
            }
            port.pr[prio].ing = new;
            if new > reserved {
                sw.shared_used += size.min(new - reserved);
            }
        }
        sw.used += size;
        if lossless && port.xoff & (1 << prio) == 0 {
            let thr = sw.threshold(self.pfc_th);
            if port.pr[prio].hdrm > 0 || port.pr[prio].ing.saturating_sub(reserved) >= thr {
                self.send_pfc(inp, prio, true);
            }
        }
        pkt.in_port = inp;
        let o = &mut self.ports[out as usize];
        o.pr[prio].egr += size;
        if o.pr[prio].egr > o.pr[prio].watermark {
            o.pr[prio].watermark = o.pr[prio].egr;
        }
        o.push_q(prio, pkt);
        self.kick(out);
    }

    /// Priorities of port `p` with packets waiting and no pause in force.
    #[inline]
    fn sendable(&mut self, p: u32) -> u8 {
        let port = &self.ports[p as usize];
        let mut ready = port.nonempty;
        let mut maybe_paused = ready & port.pause_mask;
        while maybe_paused != 0 {
            let prio = maybe_paused.trailing_zeros() as usize;
            maybe_paused &= maybe_paused - 1;
            if self.is_paused(p, prio) {
                ready &= !(1 << prio);
            }
        }
        ready
    }

    /// Picks the next queue of switch port `p`: the CNP priority strictly first, then DWRR
    /// over the others with a quantum of one jumbo frame.
    fn pick_queue(&mut self, p: u32) -> Option<usize> {
        let cnp = self.cnp_prio as usize;
        let ready = self.sendable(p);
        if ready & (1 << cnp) != 0 {
            return Some(cnp);
        }
        let others = ready & !(1 << cnp);
        if others == 0 {
            return None;
        }
        let port = &mut self.ports[p as usize];
        // Classic DWRR: a queue gets one quantum when its turn starts and sends while its
        // deficit covers the head packet; then the turn passes to the next ready queue.
        // Each pass either serves or moves the pointer, so two rotations always suffice.
        for _ in 0..3 * N_PRIO {
            let rr = u32::from(port.rr);
            let prio = ((rr + others.rotate_right(rr).trailing_zeros()) % N_PRIO as u32) as usize;
            if prio as u32 != rr {
                port.rr = prio as u8;
                port.turn_credited = false;
            }
            if !port.turn_credited {
                port.pr[prio].deficit += DWRR_QUANTUM_BYTES;
                port.turn_credited = true;
            }
            let head = i64::from(port.pr[prio].queue[0].size);
            if port.pr[prio].deficit >= head {
                port.pr[prio].deficit -= head;
                return Some(prio);
            }
            port.rr = ((prio + 1) % N_PRIO) as u8;
            port.turn_credited = false;
        }
        unreachable!("invariant: DWRR serves a ready queue within two rotations")
    }

    fn switch_send(&mut self, p: u32) {
        if let Some(pkt) = self.ports[p as usize].ctrl.pop_front() {
            self.transmit(p, pkt);
            self.after_switch_tx(p);
            return;
        }
        let Some(prio) = self.pick_queue(p) else {
            self.wake_for_pause(p);
            return;
        };
        let mut pkt = self.ports[p as usize].pop_q(prio);
        self.switch_dequeue(p, &mut pkt);
        self.transmit(p, pkt);
        self.after_switch_tx(p);
    }

    fn after_switch_tx(&mut self, p: u32) {
        let port = &self.ports[p as usize];
        if port.nonempty != 0 || !port.ctrl.is_empty() {
            let t = port.busy_until;
            self.schedule_wake(p, t);
        }
    }

    /// Nothing sendable: if queues wait behind a pause, wake when it expires.
    fn wake_for_pause(&mut self, p: u32) {
        let port = &self.ports[p as usize];
        let mut t = NEVER;
        for prio in 0..N_PRIO {
            if port.nonempty & (1 << prio) != 0 && port.pr[prio].paused_until > self.now {
                t = t.min(port.pr[prio].paused_until);
            }
        }
        if t != NEVER {
            self.schedule_wake(p, t);
        }
    }

    /// A packet leaves switch port `out`: release its buffer, decide ECN, maybe resume.
    fn switch_dequeue(&mut self, out: u32, pkt: &mut Packet) {
        let prio = pkt.prio as usize;
        let size = u64::from(pkt.size);
        let inp = pkt.in_port;
        let reserved = self.reserved;
        let Dev::Switch(s) = self.ports[out as usize].dev else {
            unreachable!("invariant: switch_dequeue runs on switch ports")
        };
        let sw = &mut self.switches[s as usize];
        let port = &mut self.ports[inp as usize];
        let from_hdrm = port.pr[prio].hdrm.min(size);
        let from_shared = (size - from_hdrm).min(port.pr[prio].ing.saturating_sub(reserved));
        port.pr[prio].hdrm -= from_hdrm;
        port.pr[prio].ing -= size - from_hdrm;
        sw.shared_used -= from_shared;
        sw.used -= size;
        let resume = self.pfc_lossless[prio] && port.xoff & (1 << prio) != 0 && port.pr[prio].hdrm == 0 && {
            let shared = port.pr[prio].ing.saturating_sub(reserved);
            shared == 0 || shared + self.xon_offset <= sw.threshold(self.pfc_th)
        };
        let o = &mut self.ports[out as usize];
        o.pr[prio].egr -= size;
        if pkt.kind == Kind::Data && o.red_mark(o.pr[prio].egr) {
            self.counters[out as usize].q_ecn_marked[prio] += 1;
            pkt.ce = true;
        }
        if resume {
            self.send_pfc(inp, prio, false);
        }
    }

    // ----- NICs --------------------------------------------------------------------------

    fn nic_receive(&mut self, p: u32, pkt: Packet) {
        match pkt.kind {
            Kind::Data => {
                if self.ports[p as usize].slow_rx.is_some() {
                    self.slow_rx_arrival(p, &pkt);
                }
                self.nic_rx_data(p, &pkt)
            }
            Kind::Ack | Kind::Nack => self.nic_rx_ack(&pkt),
            Kind::Cnp => self.nic_rx_cnp(&pkt),
            Kind::Pause => self.receive_pause(p, &pkt),
        }
        self.consume(&pkt);
    }

    /// Queues an ACK, NACK or CNP from the receiver of `qp` back to its sender.
    fn send_ctrl(&mut self, qp: u32, kind: Kind, seq: u64, ts: Ps) {
        let q = &self.qps[qp as usize];
        let prio = if kind == Kind::Cnp || self.ack_prio_high {
            self.cnp_prio
        } else {
            q.prio
        };
        let route = q.ack_route;
        let size = if kind == Kind::Cnp { CNP_BYTES } else { ACK_BYTES };
        let pkt = self.alloc(Packet {
            seq,
            ts,
            qp,
            route,
            in_port: 0,
            size,
            payload: 0,
            hop: 1,
            kind,
            prio,
            ce: false,
        });
        let port = self.routes[route as usize];
        self.ports[port as usize].push_q(prio as usize, pkt);
        self.kick(port);
    }

    fn nic_rx_data(&mut self, p: u32, pkt: &Packet) {
        let now = self.now;
        let qi = pkt.qp;
        let class = self.qps[qi as usize].class;
        if pkt.ce {
            self.counters[p as usize].np_ecn_marked_roce_packets += 1;
            // The NP answers CE marks only for classes running DCQCN (roce_np enabled on
            // their priority), at most one CNP per QP per interval.
            if let Cc::Dcqcn(pi, _) = self.qps[qi as usize].cc
                && self.classes[class as usize].cc == CcAlgorithm::Dcqcn
                && now >= self.qps[qi as usize].rx_next_cnp
            {
                self.qps[qi as usize].rx_next_cnp = now + self.dcqcn[pi as usize].cnp_interval;
                self.counters[p as usize].np_cnp_sent += 1;
                self.send_ctrl(qi, Kind::Cnp, 0, now);
            }
        }
        let q = &mut self.qps[qi as usize];
        if pkt.seq == q.rx_expected {
            q.rx_expected += u64::from(pkt.payload);
            let ack = q.rx_expected;
            let complete = !q.rx_done && ack >= q.size;
            if complete {
                q.rx_done = true;
            }
            self.send_ctrl(qi, Kind::Ack, ack, pkt.ts);
            if complete {
                self.qp_received(qi);
            }
        } else if pkt.seq > q.rx_expected {
            self.counters[p as usize].out_of_sequence += 1;
            let q = &mut self.qps[qi as usize];
            if now >= q.rx_nack_at || q.rx_last_nack != q.rx_expected {
                q.rx_nack_at = now + NACK_INTERVAL;
                q.rx_last_nack = q.rx_expected;
                let exp = q.rx_expected;
                self.send_ctrl(qi, Kind::Nack, exp, pkt.ts);
            }
        } else {
            // A duplicate: the sender went back (NACK or timeout) or an ACK was lost. An RC
            // responder answers with the cumulative ACK, so a lost last ACK cannot leave
            // the sender retransmitting forever.
            self.counters[p as usize].duplicate_request += 1;
            let ack = self.qps[qi as usize].rx_expected;
            self.send_ctrl(qi, Kind::Ack, ack, pkt.ts);
        }
    }

    fn qp_received(&mut self, qi: u32) {
        let f = self.qps[qi as usize].flow;
        let flow = &mut self.flows[f as usize];
        flow.rx_left -= 1;
        if flow.rx_left > 0 {
            return;
        }
        self.flow_arrived(f);
    }

    /// All of a flow's data arrived: start the flows waiting for it.
    fn flow_arrived(&mut self, f: u32) {
        let flow = &mut self.flows[f as usize];
        flow.rx_done = Some(self.now);
        let deps = std::mem::take(&mut flow.dependents);
        for d in &deps {
            let dep = &mut self.flows[*d as usize];
            dep.deps_left -= 1;
            if dep.deps_left == 0 {
                let t = (self.now + dep.after_delay).max(dep.earliest);
                self.q.push(t, ev(EV_FLOW_START, *d, 0));
            }
        }
        self.flows[f as usize].dependents = deps;
    }

    fn nic_rx_ack(&mut self, pkt: &Packet) {
        let now = self.now;
        let qi = pkt.qp;
        let q = &mut self.qps[qi as usize];
        if q.done {
            return;
        }
        if pkt.seq > q.snd_una {
            q.snd_una = pkt.seq;
            q.last_progress = now;
        }
        let mut kick = false;
        if pkt.kind == Kind::Nack {
            let sp = q.src_port;
            if q.snd_nxt > q.snd_una {
                q.snd_nxt = q.snd_una;
                kick = true;
            }
            self.counters[sp as usize].packet_seq_err += 1;
        }
        let q = &mut self.qps[qi as usize];
        let mut raised = false;
        if let Cc::Timely(pi, s) = &mut q.cc {
            let before = s.rate;
            s.on_ack(
                pkt.seq,
                q.snd_nxt,
                now.saturating_sub(pkt.ts),
                &self.timely[*pi as usize],
            );
            raised = s.rate > before;
        }
        if q.snd_una >= q.size {
            self.qp_complete(qi);
        } else if kick {
            let sp = self.qps[qi as usize].src_port;
            self.kick(sp);
        } else if raised {
            self.rate_raised(qi);
        }
    }

    fn qp_complete(&mut self, qi: u32) {
        let q = &mut self.qps[qi as usize];
        q.done = true;
        let f = q.flow;
        let flow = &mut self.flows[f as usize];
        flow.qps_left -= 1;
        if flow.qps_left == 0 {
            flow.finish = Some(self.now);
            self.flows_left -= 1;
        }
    }

    fn nic_rx_cnp(&mut self, pkt: &Packet) {
        let now = self.now;
        let qi = pkt.qp;
        let q = &mut self.qps[qi as usize];
        let sp = q.src_port;
        match &mut q.cc {
            Cc::Dcqcn(pi, s) if !q.done => {
                self.counters[sp as usize].rp_cnp_handled += 1;
                if let Some(t) = s.on_cnp(now, &self.dcqcn[*pi as usize]) {
                    self.q.push(t, ev(EV_DCQCN_DEC, qi, 0));
                }
            }
            _ => self.counters[sp as usize].rp_cnp_ignored += 1,
        }
    }

    fn dcqcn_dec(&mut self, qi: u32) {
        let now = self.now;
        let q = &mut self.qps[qi as usize];
        if q.done {
            return;
        }
        let Cc::Dcqcn(pi, s) = &mut q.cc else { return };
        if s.on_dec_check(now, &self.dcqcn[*pi as usize]) && !q.inc_pending {
            q.inc_pending = true;
            let t = s.inc_deadline.expect("set by a decrease");
            self.q.push(t, ev(EV_DCQCN_INC, qi, 0));
        }
    }

    fn dcqcn_inc(&mut self, qi: u32) {
        let now = self.now;
        let q = &mut self.qps[qi as usize];
        let Cc::Dcqcn(pi, s) = &mut q.cc else { return };
        if q.done {
            q.inc_pending = false;
            return;
        }
        let deadline = s.inc_deadline.expect("armed");
        if deadline > now {
            // A later decrease restarted the timer: chase the new deadline.
            self.q.push(deadline, ev(EV_DCQCN_INC, qi, 0));
            return;
        }
        s.on_inc_timer(now, &self.dcqcn[*pi as usize]);
        let next = s.inc_deadline.expect("rearmed");
        self.q.push(next, ev(EV_DCQCN_INC, qi, 0));
        self.rate_raised(qi);
    }

    /// The QP's rate went up: the packet after the last one may leave sooner.
    fn rate_raised(&mut self, qi: u32) {
        let now = self.now;
        let q = &mut self.qps[qi as usize];
        if q.done || q.snd_nxt >= q.size || q.next_avail <= now {
            return;
        }
        let line_tx = self.ports[q.src_port as usize].rate.tx_time(q.last_wire);
        let sooner = (q.last_sent + paced_gap(q, line_tx)).max(now);
        if sooner < q.next_avail {
            q.next_avail = sooner;
            let sp = q.src_port;
            self.kick(sp);
        }
    }

    fn rto(&mut self, qi: u32) {
        let now = self.now;
        let q = &mut self.qps[qi as usize];
        if q.done || q.snd_una >= q.snd_nxt {
            q.rto_pending = false;
            return;
        }
        let deadline = q.last_progress + ACK_TIMEOUT;
        if deadline > now {
            self.q.push(deadline, ev(EV_RTO, qi, 0));
            return;
        }
        q.snd_nxt = q.snd_una;
        q.last_progress = now;
        let sp = q.src_port;
        self.counters[sp as usize].local_ack_timeout_err += 1;
        self.q.push(now + ACK_TIMEOUT, ev(EV_RTO, qi, 0));
        self.kick(sp);
    }

    fn start_flow(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.flows[f as usize];
        flow.started = Some(now);
        if let Some(dur) = flow.local {
            self.q.push(now + dur, ev(EV_LOCAL_DONE, f, 0));
            return;
        }
        let qps = flow.qps.clone();
        for qi in qps {
            let q = &mut self.qps[qi as usize];
            if q.done {
                // A zero-byte message completes as it starts.
                self.qp_received_empty(qi);
                continue;
            }
            q.next_avail = now;
            q.last_progress = now;
            let sp = q.src_port;
            self.ports[sp as usize].qps.push(qi);
            self.kick(sp);
        }
    }

    fn qp_received_empty(&mut self, qi: u32) {
        let f = self.qps[qi as usize].flow as usize;
        self.flows[f].qps_left -= 1;
        if self.flows[f].qps_left == 0 {
            self.flows[f].finish = Some(self.now);
            self.flows_left -= 1;
        }
        self.qp_received(qi);
    }

    fn nic_send(&mut self, p: u32) {
        let now = self.now;
        if let Some(pkt) = self.ports[p as usize].ctrl.pop_front() {
            self.transmit(p, pkt);
            self.after_nic_tx(p);
            return;
        }
        let ready = self.sendable(p);
        if ready != 0 {
            // Control packets, highest priority first.
            let prio = 7 - ready.leading_zeros() as usize;
            let pkt = self.ports[p as usize].pop_q(prio);
            self.transmit(p, pkt);
            self.after_nic_tx(p);
            return;
        }
        // Data waits while the host side (a degraded PCIe link) is still busy.
        if self.ports[p as usize].host_free_at > now {
            self.after_nic_tx(p);
            return;
        }
        // Data: round robin over QPs whose rate limiter allows a packet now.
        let n = self.ports[p as usize].qps.len();
        let start = self.ports[p as usize].rr_qp;
        let mut any_done = false;
        let mut chosen = None;
        for i in 1..=n {
            let idx = (start + i) % n;
            let qi = self.ports[p as usize].qps[idx];
            let q = &self.qps[qi as usize];
            if q.done {
                any_done = true;
                continue;
            }
            if q.snd_nxt >= q.size || q.next_avail > now {
                continue;
            }
            let prio = q.prio as usize;
            if self.is_paused(p, prio) {
                continue;
            }
            let gate = self.rx_gate(qi);
            if gate > now {
                self.reserve_rx(qi, gate);
                continue;
            }
            chosen = Some((idx, qi));
            break;
        }
        if let Some((idx, qi)) = chosen {
            self.ports[p as usize].rr_qp = idx;
            self.send_data(p, qi);
        }
        if any_done {
            let qps = &self.qps;
            let port = &mut self.ports[p as usize];
            // Keep the round-robin pointer on the same QP: shift it by the finished QPs
            // removed before it.
            let removed_before = port.qps[..port.rr_qp.min(port.qps.len())]
                .iter()
                .filter(|q| qps[**q as usize].done)
                .count();
            port.qps.retain(|q| !qps[*q as usize].done);
            port.rr_qp = (port.rr_qp - removed_before).min(port.qps.len().saturating_sub(1));
        }
        self.after_nic_tx(p);
    }

    fn send_data(&mut self, p: u32, qi: u32) {
        let now = self.now;
        let header = self.header_bytes;
        let q = &mut self.qps[qi as usize];
        let payload = (q.size - q.snd_nxt).min(u64::from(q.mtu)) as u32;
        let seq = q.snd_nxt;
        q.snd_nxt += u64::from(payload);
        let wire = payload + header;
        if let Cc::Dcqcn(pi, s) = &mut q.cc {
            s.on_sent(wire, &self.dcqcn[*pi as usize]);
        }
        q.last_sent = now;
        q.last_wire = wire;
        q.next_avail = now + paced_gap(q, self.ports[p as usize].rate.tx_time(wire));
        let dst = q.dst_port as usize;
        let port = &mut self.ports[p as usize];
        if let Some(cap) = port.host_cap {
            port.host_free_at = port.host_free_at.max(now) + cap.tx_time(wire);
        }
        let d = &mut self.ports[dst];
        if q.rx_reserved {
            // The credit was taken when the QP asked for it.
            q.rx_reserved = false;
        } else if let Some(cap) = d.rx_cap {
            d.rx_free_at = d.rx_free_at.max(now) + cap.tx_time(wire);
        }
        let arm_rto = !q.rto_pending;
        q.rto_pending = true;
        let (prio, route) = (q.prio, q.route);
        let pkt = self.alloc(Packet {
            seq,
            ts: now,
            qp: qi,
            route,
            in_port: 0,
            size: wire as u16,
            payload: payload as u16,
            hop: 1,
            kind: Kind::Data,
            prio,
            ce: false,
        });
        self.transmit(p, pkt);
        if arm_rto {
            self.q.push(now + ACK_TIMEOUT, ev(EV_RTO, qi, 0));
        }
    }

    /// Schedules the next wake of NIC port `p`: when the link is free if control packets
    /// wait, else when the earliest rate limiter or pause lets a QP send.
    fn after_nic_tx(&mut self, p: u32) {
        let now = self.now;
        let port = &self.ports[p as usize];
        let busy = port.busy_until.max(now);
        let mut t = NEVER;
        if !port.ctrl.is_empty() {
            t = busy;
        }
        let mut waiting = port.nonempty;
        while waiting != 0 {
            let prio = waiting.trailing_zeros() as usize;
            waiting &= waiting - 1;
            let pause_end = port.pr[prio].paused_until;
            t = t.min(if pause_end > now {
                pause_end.max(busy)
            } else {
                busy
            });
        }
        for &qi in &port.qps {
            let q = &self.qps[qi as usize];
            if q.done || q.snd_nxt >= q.size {
                continue;
            }
            let pause_end = port.pr[q.prio as usize].paused_until;
            let ready = q
                .next_avail
                .max(busy)
                .max(port.host_free_at)
                .max(self.rx_gate(qi))
                .max(if pause_end > now { pause_end } else { 0 });
            t = t.min(ready);
        }
        if t != NEVER {
            debug_assert!(
                t > now || self.ports[p as usize].busy_until > now,
                "invariant: nic_send sends whatever is sendable now"
            );
            self.schedule_wake(p, t.max(now + 1));
        }
    }

    fn sample(&mut self) {
        let now = self.now;
        for (qi, q) in self.qps.iter().enumerate() {
            if q.done || self.flows[q.flow as usize].started.is_none() {
                continue;
            }
            self.samples.rates.push((now, qi as u32, q.rate_bps()));
        }
        for (pi, port) in self.ports.iter().enumerate() {
            if matches!(port.dev, Dev::Switch(_)) {
                for prio in 0..N_PRIO {
                    if port.pr[prio].egr > 0 {
                        self.samples
                            .queues
                            .push((now, pi as u32, prio as u8, port.pr[prio].egr));
                    }
                }
            }
        }
        for c in self.named_counters() {
            let key = (c.entity.clone(), c.name.clone());
            let last = self.samples.last_counters.get(&key).copied();
            if last != Some(c.value) && !(last.is_none() && c.value == 0) {
                self.samples.last_counters.insert(key, c.value);
                self.samples.counters.push((now, c));
            }
        }
        // Keep sampling only while something else can still happen.
        if let Some(iv) = self.sample_interval
            && !self.q.is_empty()
        {
            self.q.push(now + iv, ev(EV_SAMPLE, 0, 0));
        }
    }

    /// Every port's counters under their hardware names.
    pub fn named_counters(&self) -> Vec<CounterValue> {
        let mut out = Vec::new();
        for (pi, c) in self.port_counters().iter().enumerate() {
            let name = &self.port_names[pi];
            match self.ports[pi].dev {
                Dev::Nic(_) => c.nic_named(name, &self.pfc_prios, &mut out),
                Dev::Switch(_) => c.switch_named(name, &self.pfc_prios, &mut out),
            }
        }
        out
    }

    /// Packets alive (queued or on a link).
    pub fn live_packets(&self) -> usize {
        self.live_packets
    }

    /// Most packets alive at once.
    pub fn peak_live_packets(&self) -> usize {
        self.peak_live_packets
    }

    /// Bytes held by every packet ring (egress queues, PFC queues, links), at the
    /// capacity they grew to; rings never shrink, so this is what the peak needed.
    pub fn packet_ring_bytes(&self) -> usize {
        let pkt = std::mem::size_of::<Packet>();
        let flight = std::mem::size_of::<(Ps, Packet)>();
        self.ports
            .iter()
            .map(|p| {
                p.ctrl.capacity() * pkt
                    + p.pr.iter().map(|s| s.queue.capacity() * pkt).sum::<usize>()
                    + p.in_flight.capacity() * flight
            })
            .sum()
    }

    /// Largest number of pending events.
    pub fn peak_events_pending(&self) -> usize {
        self.q.peak()
    }

    /// Current simulated time.
    pub fn now(&self) -> Ps {
        self.now
    }

    /// Bytes the receiver of a QP got in order.
    pub(crate) fn qp_received_bytes(&self, qp: u32) -> u64 {
        self.qps[qp as usize].rx_expected.min(self.qps[qp as usize].size)
    }

    /// Data path of a QP as egress port ids, sender NIC first.
    pub(crate) fn route_of(&self, qp: u32) -> Vec<u32> {
        let mut v = Vec::new();
        let mut i = self.qps[qp as usize].route as usize;
        loop {
            let p = self.routes[i];
            v.push(p);
            if matches!(self.ports[self.ports[p as usize].peer as usize].dev, Dev::Nic(_)) {
                return v;
            }
            i += 1;
        }
    }
}

/// Index of `x` in `v`, appending it if absent: QPs share parameter sets by index.
fn intern<T: PartialEq>(v: &mut Vec<T>, x: T) -> u16 {
    let i = v.iter().position(|y| *y == x).unwrap_or_else(|| {
        v.push(x);
        v.len() - 1
    });
    u16::try_from(i).expect("invariant: fewer than 65536 distinct parameter sets")
}

/// Time a QP's rate limiter waits after a packet whose line serialization is `line_tx`.
#[inline]
fn paced_gap(q: &Qp, line_tx: Ps) -> Ps {
    let rate = q.rate_bps();
    if rate >= q.line_bps {
        line_tx
    } else {
        tx_time_at(q.last_wire, rate).max(line_tx)
    }
}

/// Next hops towards `dst` for every node, in the order a BFS from `dst` discovers them
/// (the HPCC simulator's `CalculateRoute`): nodes are expanded in BFS order with their
/// neighbours visited by `rank`, and a node's list grows as its closer neighbours are
/// expanded. Hosts are never expanded (they do not forward). With `one_per_neighbour`,
/// parallel links to the same neighbour count once, as in that simulator's neighbour map.
fn next_hop_lists(
    graph: &Graph,
    dst: u32,
    rank: &dyn Fn(u32) -> u64,
    one_per_neighbour: bool,
) -> Vec<Vec<Adj>> {
    let n = graph.len();
    let mut dist = vec![u32::MAX; n];
    let mut lists: Vec<Vec<Adj>> = vec![Vec::new(); n];
    let mut queue = VecDeque::new();
    dist[dst as usize] = 0;
    queue.push_back(dst);
    let is_switch = |i: u32| matches!(graph.node(i), Node::Switch(_));
    while let Some(now) = queue.pop_front() {
        let mut nbrs: Vec<Adj> = graph.adj(now).to_vec();
        nbrs.sort_by_key(|a| (rank(a.peer), a.port));
        if one_per_neighbour {
            nbrs.dedup_by_key(|a| a.peer);
        }
        for a in nbrs {
            if dist[a.peer as usize] == u32::MAX {
                dist[a.peer as usize] = dist[now as usize] + 1;
                if is_switch(a.peer) {
                    queue.push_back(a.peer);
                }
            }
            if dist[now as usize] + 1 == dist[a.peer as usize] {
                lists[a.peer as usize].push(Adj {
                    port: a.peer_port,
                    link: a.link,
                    peer: now,
                    peer_port: a.port,
                });
            }
        }
    }
    lists
}

impl<Q: Queue> Sim<Q> {
    /// Complete counters of every port: the rarely-touched ones as kept, the per-packet ones
    /// derived from the transmit side. A port received what its peer sent minus what is
    /// still on the link between them.
    pub(crate) fn port_counters(&self) -> Vec<PortCounters> {
        let mut on_link = vec![[[0u64; 2]; N_PRIO]; self.ports.len()];
        for (pi, port) in self.ports.iter().enumerate() {
            for (_, k) in &port.in_flight {
                on_link[pi][k.prio as usize][0] += u64::from(k.size);
                on_link[pi][k.prio as usize][1] += 1;
            }
        }
        self.ports
            .iter()
            .enumerate()
            .map(|(pi, port)| {
                let mut c = self.counters[pi].clone();
                // Pauses still in force count up to now, as the hardware's running
                // duration counters do (they are settled into the totals at the end).
                for prio in 0..N_PRIO {
                    if port.xoff & (1 << prio) != 0 {
                        c.tx_pause_ps[prio] += self.now - port.pr[prio].xoff_since;
                    }
                    if port.pr[prio].pause_since != NEVER {
                        c.rx_pause_ps[prio] +=
                            port.pr[prio].paused_until.min(self.now) - port.pr[prio].pause_since;
                    }
                }
                c.rate_mbps = (port.rate.bps / 1e6).round() as u64;
                c.pcie = port.pcie.map(|l| {
                    let mts = |gts: f64| (gts * 1000.0).round() as u64;
                    [
                        u64::from(l.cur_width),
                        u64::from(l.max_width),
                        mts(l.cur_speed_gts),
                        mts(l.max_speed_gts),
                    ]
                });
                let peer = port.peer as usize;
                for (prio, in_link) in on_link[peer].iter().enumerate() {
                    let (tb, tp) = (port.pr[prio].tx_bytes, port.pr[prio].tx_packets);
                    c.tx_prio_bytes[prio] = tb;
                    c.tx_prio_packets[prio] = tp;
                    let (pb, pp) = (
                        self.ports[peer].pr[prio].tx_bytes,
                        self.ports[peer].pr[prio].tx_packets,
                    );
                    c.rx_prio_bytes[prio] = pb - in_link[0];
                    c.rx_prio_packets[prio] = pp - in_link[1];
                    if matches!(port.dev, Dev::Switch(_)) {
                        // Egress queues carry everything but PFC frames, which bypass them.
                        c.q_packets[prio] = tp - c.tx_pause[prio];
                        c.q_bytes[prio] = tb - c.tx_pause[prio] * u64::from(PFC_FRAME_BYTES);
                        c.q_watermark[prio] = port.pr[prio].watermark;
                    }
                }
                c.tx_bytes = c.tx_prio_bytes.iter().sum();
                c.tx_packets = c.tx_prio_packets.iter().sum();
                c.rx_bytes = c.rx_prio_bytes.iter().sum();
                c.rx_packets = c.rx_prio_packets.iter().sum();
                c
            })
            .collect()
    }
}

/// What is still in the network at the end: (packets, bytes, data payload bytes), counted
/// by walking every queue and link, independently of the ledger.
impl<Q: Queue> Sim<Q> {
    pub(crate) fn in_flight(&self) -> (usize, u64, u64) {
        let (mut n, mut bytes, mut data) = (0usize, 0u64, 0u64);
        let mut count = |k: &Packet| {
            n += 1;
            bytes += u64::from(k.size);
            if k.kind == Kind::Data {
                data += u64::from(k.payload);
            }
        };
        for port in &self.ports {
            port.ctrl.iter().for_each(&mut count);
            for q in port.pr.iter().map(|s| &s.queue) {
                q.iter().for_each(&mut count);
            }
            port.in_flight.iter().for_each(|(_, k)| count(k));
        }
        (n, bytes, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (review): a duplicate data packet (the sender went back after its last ACK
    /// was lost) is answered with the cumulative ACK, so the sender can finish.
    #[test]
    fn duplicates_are_acknowledged() {
        let text = r#"
[topology.leaf_spine]
leaves = 1
spines = 1
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100

[workloads.one.flows]
list = [{ src = "h0", dst = "h1", bytes = 10_000 }]
"#;
        let path = std::path::Path::new("t.toml");
        let loaded = xirang_fabric::Scenario::parse(text, path)
            .and_then(|s| s.build(path, std::path::Path::new("."), Some(text)))
            .unwrap();
        let ex = crate::workload::expand(&loaded, 1);
        let opts = crate::options(&loaded);
        let mut sim: Sim = Sim::new(&loaded.fabric, &loaded.scenario.config, &ex.flows, &opts);
        sim.run(&mut |_| {});
        let route = sim.route_of(0);
        let rx_port = sim.ports[*route.last().unwrap() as usize].peer;
        assert!(sim.ports[rx_port as usize].in_flight.is_empty());
        let dup = Packet {
            seq: 0,
            ts: sim.now,
            qp: 0,
            route: sim.qps[0].route,
            in_port: 0,
            size: 1062,
            payload: 1000,
            hop: 2,
            kind: Kind::Data,
            prio: sim.qps[0].prio,
            ce: false,
        };
        sim.live_packets += 1;
        sim.nic_receive(rx_port, dup);
        let (_, ack) = sim.ports[rx_port as usize]
            .in_flight
            .front()
            .copied()
            .expect("an ACK went out");
        assert_eq!((ack.kind, ack.seq), (Kind::Ack, 10_000));
        assert_eq!(sim.counters[rx_port as usize].duplicate_request, 1);
    }

    /// The marking probability measured at a queue held at a fixed length between Kmin and
    /// Kmax follows the RED line within statistical error (4 sigma).
    #[test]
    fn red_marking_follows_the_red_line() {
        let red = RedProfile {
            enabled: true,
            kmin_bytes: 100_000,
            kmax_bytes: 400_000,
            pmax: 0.2,
        };
        let mut port = Port::new(
            Dev::Switch(0),
            0,
            1,
            Rate::from_gbps(100.0),
            1000,
            0,
            red,
            Some(Stream::new(42, Purpose::Ecn, 0)),
        );
        const TRIALS: u32 = 200_000;
        for q in [100_000u64, 150_000, 250_000, 399_000, 400_000, 400_001, 1_000_000] {
            let expected = red.mark_probability(q);
            let marked = (0..TRIALS).filter(|_| port.red_mark(q)).count() as f64;
            let measured = marked / f64::from(TRIALS);
            let sigma = (expected * (1.0 - expected) / f64::from(TRIALS)).sqrt();
            assert!(
                (measured - expected).abs() <= 4.0 * sigma + 1e-12,
                "q = {q}: measured {measured:.5}, RED line {expected:.5} (sigma {sigma:.5})"
            );
        }
        // Below Kmin nothing, above Kmax everything.
        assert!(!(0..1000).any(|_| port.red_mark(99_999)));
        assert!((0..1000).all(|_| port.red_mark(400_001)));
    }
}
