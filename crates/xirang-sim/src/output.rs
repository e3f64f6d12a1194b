//! Results of a run and their renderings: the HPCC simulator's FCT and PFC text formats,
//! JSON, CSV time series, and the summary. Rendering returns strings; writing files is the
//! caller's business (the simulator does no IO).

use std::fmt::Write as _;

use serde::Serialize;

use crate::counters::CounterValue;
use crate::engine::{Ledger, PfcEvent};
use crate::time::{PS_PER_NS, PS_PER_US, Ps};

/// One flow's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowResult {
    /// Flow id: flows are numbered in workload order, a collective's transfers iteration
    /// by iteration in schedule order.
    pub id: u64,
    /// Workload name.
    pub workload: String,
    /// Traffic class.
    pub class: String,
    /// Sender `host/nic`.
    pub src: String,
    /// Receiver `host/nic`.
    pub dst: String,
    /// Sender node id (HPCC numbering for HPCC topologies).
    pub src_node: u32,
    /// Receiver node id.
    pub dst_node: u32,
    /// UDP source port of the first QP.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// Message size.
    pub bytes: u64,
    /// Start, including the workload's time offset.
    pub start_ps: Ps,
    /// Completion time: start to the ACK of the last byte at the sender (None: unfinished).
    pub fct_ps: Option<Ps>,
    /// A QP of the flow gave up after its retries (a retry-exceeded completion error): the
    /// flow will never finish.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Start to the arrival of the last byte at the receiver (a collective's transfer:
    /// to the receiving GPU consuming its last slice).
    pub rx_done_ps: Option<Ps>,
    /// FCT on an empty network as the HPCC simulator estimates it (its standalone FCT);
    /// slowdown is FCT over this, as in that simulator's outputs.
    pub ideal_ps: Ps,
    /// No FCT can be shorter: all wire bytes at the bottleneck rate plus the propagation
    /// delay there and back.
    pub lower_bound_ps: Ps,
    /// Bytes the receiver got in order (all of them for a finished flow).
    pub bytes_received: u64,
    /// Egress ports of the first QP's data path, sender NIC first (empty over NVLink).
    pub path: Vec<String>,
    /// A step of a collective (reported in [`RunResult::collectives`], not per class).
    pub in_collective: bool,
    /// Moved over NVLink inside a host, not through the network.
    pub nvlink: bool,
}

/// A collective's outcome, as nccl-tests would report it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveResult {
    /// Workload name.
    pub workload: String,
    /// Traffic class.
    pub class: String,
    /// Operation (`all_reduce`, ...).
    pub op: String,
    /// Algorithm simulated.
    pub algorithm: String,
    /// Protocol (`LL`, `LL128`, `Simple`).
    pub protocol: String,
    /// Channels that carried data (NCCL uses fewer than its communicator's for small
    /// sizes), and the communicator's.
    pub channels: u32,
    /// The communicator's channels.
    pub comm_channels: u32,
    /// Where the algorithm, protocol and channels came from, and NCCL's own pick where
    /// it is not what was simulated.
    pub choice: crate::workload::NcclChoice,
    /// Ranks.
    pub ranks: u32,
    /// The hosts of its ranks, in rank order (a host's GPUs are consecutive ranks).
    pub hosts: Vec<String>,
    /// Ranks on each of [`CollectiveResult::hosts`].
    pub ranks_per_host: Vec<u32>,
    /// Buffer bytes.
    pub bytes: u64,
    /// Repetitions.
    pub iterations: u32,
    /// Every transfer arrived.
    pub finished: bool,
    /// First transfer start to last arrival, all iterations.
    pub total_ps: Option<Ps>,
    /// `total_ps / iterations`.
    pub time_ps: Option<Ps>,
    /// Algorithm bandwidth, bytes / time, GB/s (10^9 bytes per second, as nccl-tests).
    pub algbw_gbs: Option<f64>,
    /// Bus bandwidth, algbw x nccl-tests' factor for the operation, GB/s.
    pub busbw_gbs: Option<f64>,
    /// When each iteration ended (its last rank finished it), from the collective's start.
    pub iteration_end_ps: Vec<Option<Ps>>,
    /// Transfers of all iterations, and how many arrived.
    pub transfers: u64,
    /// Transfers that arrived.
    pub transfers_arrived: u64,
    /// Its transfers are among the run's flows (`[run] transfer_records`).
    pub transfers_recorded: bool,
}

impl FlowResult {
    /// FCT over ideal FCT.
    pub fn slowdown(&self) -> Option<f64> {
        self.fct_ps.map(|f| f as f64 / self.ideal_ps.max(1) as f64)
    }
}

/// One inference request's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestResult {
    /// Workload name.
    pub workload: String,
    /// Traffic class.
    pub class: String,
    /// Request flow id.
    pub request: u64,
    /// Response flow id.
    pub response: u64,
    /// Request sent to response fully received (None: unfinished).
    pub latency_ps: Option<Ps>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// Totals of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStats {
    /// Simulated time at the end.
    pub sim_time_ps: Ps,
    /// Events processed.
    pub events: u64,
    /// Packets put on any link (data, ACK, NACK, CNP and PFC frames).
    pub packet_hops: u64,
    /// Packets that arrived for a QP after its slot went to another: always 0 since
    /// collectives' QPs are persistent (kept for readers of earlier outputs).
    pub stray_packets: u64,
    /// QPs that gave up after their retries (each fails its message).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub qps_failed: u64,
    /// Packets alive at the end (queued or on a link).
    pub packets_in_flight_at_end: usize,
    /// Bytes of those packets, counted by walking every queue and link.
    pub bytes_in_flight_at_end: u64,
    /// Data payload bytes of those packets.
    pub data_bytes_in_flight_at_end: u64,
    /// Of those packets, the ones carrying an INT record (HPCC).
    #[serde(skip)]
    pub int_packets_at_end: usize,
    /// INT records not returned at the end: one per packet carrying one, or the engine
    /// leaked (or double-freed) a record.
    #[serde(skip)]
    pub int_records_at_end: usize,
    /// Conservation ledger.
    pub ledger: Ledger,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// What the run cost the engine (not a result: a parallel run's figures differ).
    pub engine: EngineStats,
    /// Flows in definition order.
    pub flows: Vec<FlowResult>,
    /// Inference requests.
    pub requests: Vec<RequestResult>,
    /// Collectives.
    pub collectives: Vec<CollectiveResult>,
    /// Final counters of every port, named as hardware names them.
    pub counters: Vec<CounterValue>,
    /// Every PFC frame received.
    pub pfc: Vec<PfcEvent>,
    /// Totals.
    pub stats: RunStats,
    /// (time, flow id, the QP's place in its flow, rate bit/s) samples.
    pub rate_series: Vec<(Ps, u64, u32, f64)>,
    /// (time, `switch:port`, priority, queued bytes) samples.
    pub queue_series: Vec<(Ps, String, u8, u64)>,
    /// (time, counter) samples of counters that changed since the previous sample.
    pub counter_series: Vec<(Ps, CounterValue)>,
    /// Workloads not simulated, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Priorities PFC protects in this run.
    pub priorities_with_pfc: Vec<u8>,
    /// MoE workloads' dispatch, combine and step times.
    pub moe: Vec<crate::serving::MoeResult>,
    /// KV-transfer workloads' transfer times and time to first token.
    pub kv: Vec<crate::serving::KvResult>,
}

/// What a run cost the engine: its peaks of memory and work. A run divided among
/// partitions reports the sum of the partitions' peaks, which bounds the run's (the
/// partitions need not peak at once), so these are kept apart from the results, which
/// are the same however the run is divided.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EngineStats {
    /// Most packets alive at once.
    pub peak_packets: usize,
    /// Memory of all packet rings (queues and links) at their grown size; over
    /// `peak_packets` it is the memory cost of a packet in flight.
    pub packet_ring_bytes: usize,
    /// Most events pending at once.
    pub peak_events_pending: usize,
    /// Most transfers of collectives under way at once (a slice written, the last not yet
    /// consumed).
    pub peak_transfers_in_flight: usize,
    /// QPs of the collectives' connections (data and clear-to-send), for the run.
    pub peak_transfer_qps: usize,
    /// Most slices one connection had outstanding at once (sent and not given back to
    /// its GPU, or receives posted and not consumed): at most its slots.
    pub peak_slices_outstanding: u64,
    /// How much of the QPs' sending was steady, per criterion (with
    /// `RunOptions::steady_probe`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<crate::engine::steady::SteadyReport>,
    /// What fast-forward skipped (with `RunOptions::fast_forward`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_forward: Option<crate::engine::ffwd::FastForwardReport>,
}

/// Nearest-rank percentile of sorted values (q in 0..=100).
pub fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Per-class figures of the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSummary {
    /// Class name.
    pub class: String,
    /// Flows in the class.
    pub flows: usize,
    /// Flows that finished.
    pub finished: usize,
    /// FCT percentiles, µs.
    pub fct_p50_us: Option<f64>,
    /// p95.
    pub fct_p95_us: Option<f64>,
    /// p99.
    pub fct_p99_us: Option<f64>,
    /// Slowdown percentiles.
    pub slowdown_p50: Option<f64>,
    /// p99.
    pub slowdown_p99: Option<f64>,
    /// Bytes of finished flows over the span from first start to last finish, Gbit/s.
    pub goodput_gbps: Option<f64>,
}

/// Per-workload request latency of inference traffic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Workload.
    pub workload: String,
    /// Its traffic class.
    pub class: String,
    /// Requests issued.
    pub requests: usize,
    /// Requests answered.
    pub answered: usize,
    /// Latency percentiles, µs.
    pub p50_us: Option<f64>,
    /// p99.
    pub p99_us: Option<f64>,
    /// p99.9.
    pub p999_us: Option<f64>,
}

/// The closing summary of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Per class (flows that are not collective steps).
    pub classes: Vec<ClassSummary>,
    /// Collectives.
    pub collectives: Vec<CollectiveResult>,
    /// Per inference workload.
    pub latency: Vec<LatencySummary>,
    /// MoE workloads (dispatch, combine, time per output token); left out when there are
    /// none, so a run without them writes what it wrote before they existed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moe: Vec<crate::serving::MoeResult>,
    /// KV-transfer workloads (transfer time, time to first token); left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kv: Vec<crate::serving::KvResult>,
    /// PFC frames sent (XOFF and XON), all ports.
    pub pfc_frames: u64,
    /// Total time transmitters spent paused, µs, all ports and priorities.
    pub pfc_pause_us: f64,
    /// Packets marked CE at switches.
    pub ecn_marks: u64,
    /// CNPs sent.
    pub cnps: u64,
    /// Packets dropped.
    pub drops: u64,
    /// Totals.
    pub stats: RunStats,
}

fn us_f(ps: Ps) -> f64 {
    ps as f64 / PS_PER_US as f64
}

impl RunResult {
    /// Sum of a counter over all entities.
    pub fn counter_total(&self, name_matches: impl Fn(&str) -> bool) -> u64 {
        self.counters
            .iter()
            .filter(|c| name_matches(&c.name))
            .map(|c| c.value)
            .sum()
    }

    /// The summary.
    pub fn summary(&self) -> Summary {
        let mut class_names: Vec<&str> = self
            .flows
            .iter()
            .filter(|f| !f.in_collective)
            .map(|f| f.class.as_str())
            .collect();
        class_names.sort();
        class_names.dedup();
        let classes = class_names
            .into_iter()
            .map(|c| {
                let fl: Vec<&FlowResult> = self
                    .flows
                    .iter()
                    .filter(|f| f.class == c && !f.in_collective)
                    .collect();
                let mut fct: Vec<Ps> = fl.iter().filter_map(|f| f.fct_ps).collect();
                fct.sort_unstable();
                let mut sd: Vec<f64> = fl.iter().filter_map(|f| f.slowdown()).collect();
                sd.sort_by(f64::total_cmp);
                let done: Vec<&&FlowResult> = fl.iter().filter(|f| f.fct_ps.is_some()).collect();
                let goodput = (!done.is_empty()).then(|| {
                    let bytes: u64 = done.iter().map(|f| f.bytes).sum();
                    let first = done.iter().map(|f| f.start_ps).min().unwrap_or(0);
                    let last = done
                        .iter()
                        .map(|f| f.start_ps + f.fct_ps.unwrap_or(0))
                        .max()
                        .unwrap_or(0);
                    bytes as f64 * 8.0 / ((last - first).max(1) as f64 / 1e12) / 1e9
                });
                ClassSummary {
                    class: c.to_string(),
                    flows: fl.len(),
                    finished: fct.len(),
                    fct_p50_us: percentile(&fct, 50.0).map(us_f),
                    fct_p95_us: percentile(&fct, 95.0).map(us_f),
                    fct_p99_us: percentile(&fct, 99.0).map(us_f),
                    slowdown_p50: percentile(&sd, 50.0),
                    slowdown_p99: percentile(&sd, 99.0),
                    goodput_gbps: goodput,
                }
            })
            .collect();
        let mut wl: Vec<&str> = self.requests.iter().map(|r| r.workload.as_str()).collect();
        wl.dedup();
        let latency = wl
            .into_iter()
            .map(|w| {
                let rs: Vec<&RequestResult> = self.requests.iter().filter(|r| r.workload == w).collect();
                let mut lat: Vec<Ps> = rs.iter().filter_map(|r| r.latency_ps).collect();
                lat.sort_unstable();
                LatencySummary {
                    workload: w.to_string(),
                    class: rs.first().map(|r| r.class.clone()).unwrap_or_default(),
                    requests: rs.len(),
                    answered: lat.len(),
                    p50_us: percentile(&lat, 50.0).map(us_f),
                    p99_us: percentile(&lat, 99.0).map(us_f),
                    p999_us: percentile(&lat, 99.9).map(us_f),
                }
            })
            .collect();
        let is_pfc_tx = |n: &str| {
            (n.starts_with("tx_prio") && n.ends_with("_pause"))
                || (n.starts_with("SAI_PORT_STAT_PFC_") && n.ends_with("_TX_PKTS"))
        };
        let is_pause_dur = |n: &str| {
            n.ends_with("_RX_PAUSE_DURATION_US")
                || (n.starts_with("rx_prio") && n.ends_with("_pause_duration"))
        };
        Summary {
            classes,
            collectives: self.collectives.clone(),
            latency,
            moe: self.moe.clone(),
            kv: self.kv.clone(),
            pfc_frames: self.counter_total(is_pfc_tx),
            pfc_pause_us: self.counter_total(is_pause_dur) as f64,
            ecn_marks: self.counter_total(|n| n == "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS"),
            cnps: self.counter_total(|n| n == "np_cnp_sent"),
            drops: self.counter_total(|n| n == "SAI_QUEUE_STAT_DROPPED_PACKETS"),
            stats: self.stats.clone(),
        }
    }

    /// The HPCC simulator's FCT file: one line per finished flow, in completion order,
    /// `sip dip sport dport size start_ns fct_ns standalone_fct_ns` with IPs in hex.
    pub fn fct_hpcc(&self) -> String {
        let mut done: Vec<&FlowResult> = self
            .flows
            .iter()
            .filter(|f| f.fct_ps.is_some() && !f.nvlink)
            .collect();
        done.sort_by_key(|f| (f.start_ps + f.fct_ps.unwrap_or(0), f.id));
        let mut s = String::new();
        for f in done {
            let _ = writeln!(
                s,
                "{:08x} {:08x} {} {} {} {} {} {}",
                xirang_fabric::hpcc::node_ip(f.src_node),
                xirang_fabric::hpcc::node_ip(f.dst_node),
                f.sport,
                f.dport,
                f.bytes,
                f.start_ps / PS_PER_NS,
                f.fct_ps.unwrap_or(0) / PS_PER_NS,
                f.ideal_ps / PS_PER_NS
            );
        }
        s
    }

    /// The HPCC simulator's PFC file: `time_ns node_id node_type ifindex 1|0` per PFC frame
    /// received (node_type 0 host, 1 switch; 1 pause, 0 resume). Times include the
    /// workloads' time offset if all flows share one.
    pub fn pfc_hpcc(&self, time_offset: Ps) -> String {
        let mut s = String::new();
        for e in &self.pfc {
            let _ = writeln!(
                s,
                "{} {} {} {} {}",
                (e.time + time_offset) / PS_PER_NS,
                e.node_id,
                u8::from(e.at_switch),
                e.ifindex,
                u8::from(e.pause)
            );
        }
        s
    }

    /// Flows as JSON.
    pub fn flows_json(&self) -> String {
        #[derive(Serialize)]
        struct Row<'a> {
            #[serde(flatten)]
            flow: &'a FlowResult,
            slowdown: Option<f64>,
        }
        let rows: Vec<Row<'_>> = self
            .flows
            .iter()
            .map(|f| Row {
                flow: f,
                slowdown: f.slowdown(),
            })
            .collect();
        serde_json::to_string_pretty(&rows).expect("serializable") + "\n"
    }

    /// Answered requests as CSV, `end_us,workload,class,latency_us,client,server`, in
    /// order of completion (what a service's latency histogram is made of); `client` is
    /// the NIC the request was sent from (`h6/mlx5_0`), `server` the one that answered it.
    pub fn requests_csv(&self) -> String {
        let ends_of: std::collections::HashMap<u64, (Ps, &str, &str)> = self
            .flows
            .iter()
            .map(|f| (f.id, (f.start_ps, f.src.as_str(), f.dst.as_str())))
            .collect();
        let mut rows: Vec<(Ps, &RequestResult, Ps, &str, &str)> = self
            .requests
            .iter()
            .filter_map(|q| {
                let lat = q.latency_ps?;
                let (start, client, server) = *ends_of.get(&q.request)?;
                Some((start + lat, q, lat, client, server))
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        let mut s = String::from("end_us,workload,class,latency_us,client,server\n");
        for (end, q, lat, client, server) in rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{client},{server}",
                us_f(end),
                q.workload,
                q.class,
                us_f(lat)
            );
        }
        s
    }

    /// Final counters as CSV: `entity,counter,value`.
    pub fn counters_csv(&self) -> String {
        let mut s = String::from("entity,counter,value\n");
        for c in &self.counters {
            let _ = writeln!(s, "{},{},{}", c.entity, c.name, c.value);
        }
        s
    }

    /// Per-QP rate samples as CSV.
    pub fn rates_csv(&self) -> String {
        let mut s = String::from("time_us,flow,qp,rate_gbps\n");
        for (t, f, q, r) in &self.rate_series {
            let _ = writeln!(s, "{},{},{},{:.3}", us_f(*t), f, q, r / 1e9);
        }
        s
    }

    /// Counter samples as CSV (`time_us,entity,counter,value`, changed values only).
    pub fn counter_series_csv(&self) -> String {
        let mut s = String::from("time_us,entity,counter,value\n");
        for (t, c) in &self.counter_series {
            let _ = writeln!(s, "{},{},{},{}", us_f(*t), c.entity, c.name, c.value);
        }
        s
    }

    /// Queue depth samples as CSV.
    pub fn queues_csv(&self) -> String {
        let mut s = String::from("time_us,port,priority,bytes\n");
        for (t, p, prio, b) in &self.queue_series {
            let _ = writeln!(s, "{},{},{},{}", us_f(*t), p, prio, b);
        }
        s
    }

    /// Checks conservation: every packet created was delivered, dropped or is still in a
    /// queue or on a link; the same for data payload bytes; every finished flow received
    /// all its bytes. Returns what does not add up.
    pub fn check_conservation(&self) -> Result<(), String> {
        let l = &self.stats.ledger;
        let s = &self.stats;
        let mut errors = Vec::new();
        if l.created_packets != l.delivered_packets + l.dropped_packets + s.packets_in_flight_at_end as u64 {
            errors.push(format!(
                "packets: created {} != delivered {} + dropped {} + in flight {}",
                l.created_packets, l.delivered_packets, l.dropped_packets, s.packets_in_flight_at_end
            ));
        }
        if l.created_bytes != l.delivered_bytes + l.dropped_bytes + s.bytes_in_flight_at_end {
            errors.push(format!(
                "bytes: created {} != delivered {} + dropped {} + in flight {}",
                l.created_bytes, l.delivered_bytes, l.dropped_bytes, s.bytes_in_flight_at_end
            ));
        }
        if l.data_sent_bytes != l.data_delivered_bytes + l.data_dropped_bytes + s.data_bytes_in_flight_at_end
        {
            errors.push(format!(
                "data bytes: sent {} != delivered {} + dropped {} + in flight {}",
                l.data_sent_bytes,
                l.data_delivered_bytes,
                l.data_dropped_bytes,
                s.data_bytes_in_flight_at_end
            ));
        }
        if s.int_records_at_end != s.int_packets_at_end {
            errors.push(format!(
                "INT records: {} outstanding for {} packets carrying one",
                s.int_records_at_end, s.int_packets_at_end
            ));
        }
        for f in &self.flows {
            // A collective's transfer is done at its receiver when the receiving GPU has
            // consumed every slice, which may come after the sender's last completion;
            // it must have every byte by then.
            if f.in_collective {
                if f.rx_done_ps.is_some() && f.bytes_received != f.bytes {
                    errors.push(format!(
                        "transfer {}: consumed with {} of its {} bytes",
                        f.id, f.bytes_received, f.bytes
                    ));
                }
                continue;
            }
            if let Some(fct) = f.fct_ps {
                match f.rx_done_ps {
                    Some(rx) if rx <= fct => {}
                    other => errors.push(format!(
                        "flow {}: finished at {fct} ps but received everything at {other:?}",
                        f.id
                    )),
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }
}

/// The fabric's cabling as `links.csv` (`port_a,port_b,rate_gbps`, one link per line, by
/// the port names the counters use): what LLDP and the inventory give diagnosis on a real
/// fabric, so that both ends of a link and each port's nominal rate are known.
pub fn links_csv(fabric: &xirang_fabric::model::Fabric) -> String {
    let mut s = String::from("port_a,port_b,rate_gbps\n");
    for l in &fabric.links {
        let _ = writeln!(
            s,
            "{},{},{}",
            fabric.port_name(l.a),
            fabric.port_name(l.b),
            l.rate_gbps
        );
    }
    s
}
