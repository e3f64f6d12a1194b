//! The NCCL advisor: environment settings for a fabric, each with the reason, and the
//! cost model's bus bandwidth per size and algorithm behind them.
//!
//! Variables, meanings and defaults: docs/reference/collectives-and-nccl.md §5.

use serde::Serialize;
use xirang_fabric::Loaded;
use xirang_fabric::config::FabricConfig;
use xirang_fabric::model::{Fabric, Host};
use xirang_fabric::routing::Graph;

use crate::cost::{self, Algo, Coll, Platform};

/// One line of the environment file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    /// Variable.
    pub name: &'static str,
    /// Value; `None` leaves the variable to NCCL (written as a comment).
    pub value: Option<String>,
    /// Why.
    pub why: String,
}

/// Predicted bus bandwidth of each algorithm (best protocol) at one size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeRow {
    /// Bytes.
    pub bytes: u64,
    /// (algorithm, protocol, busbw GB/s), for each algorithm the platform supports.
    pub algorithms: Vec<(Algo, crate::cost::Proto, f64)>,
    /// The algorithm the model picks.
    pub best: Algo,
}

/// The advice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// The hosts it is for (the first collective workload's, else all).
    pub hosts: Vec<String>,
    /// The platform the model used.
    pub platform: Platform,
    /// Environment settings in file order.
    pub settings: Vec<Setting>,
    /// AllReduce bus bandwidth per size.
    pub table: Vec<SizeRow>,
    /// Problems found on the way (a lossy training class, GPUs far from NICs).
    pub warnings: Vec<String>,
}

impl Advice {
    /// The environment file: one `NAME=value` per setting, each after a comment line
    /// saying why; settings left to NCCL are commented out.
    pub fn env_file(&self, scenario: &str) -> String {
        let mut s = format!(
            "# NCCL settings for `{scenario}` (hosts {}), written by `xirang nccl advise`.\n# Source it before launching: `set -a; . ./nccl.env; set +a`.\n",
            self.hosts.join(", ")
        );
        for w in &self.warnings {
            s.push_str(&format!("# WARNING: {w}\n"));
        }
        for st in &self.settings {
            s.push_str(&format!("\n# {}\n", st.why));
            match &st.value {
                Some(v) => s.push_str(&format!("{}={v}\n", st.name)),
                None => s.push_str(&format!("# {} (left to NCCL)\n", st.name)),
            }
        }
        s
    }
}

/// A clear win: the best algorithm is at least this much faster than every other one at
/// every size from [`ALGO_FROM_BYTES`] up before the advisor pins `NCCL_ALGO`.
pub const CLEAR_WIN: f64 = 1.2;
/// Sizes below this are latency-bound and do not decide `NCCL_ALGO`.
pub const ALGO_FROM_BYTES: u64 = 1 << 20;
/// The class collectives use when the scenario declares no collective workload (the
/// workload default, `xirang_fabric::workload`).
const DEFAULT_CLASS: &str = "training";
/// QPs per connection on multi-path fabrics: enough UDP source ports for ECMP to spread a
/// rank pair's traffic (our choice; NCCL's range is 1-128, default 1).
pub const MULTIPATH_QPS: u32 = 4;

/// Advice for the hosts of the scenario's first collective workload (else all hosts).
pub fn advise(loaded: &Loaded) -> Result<Advice, String> {
    let fabric = &loaded.fabric;
    let config = &loaded.scenario.config;
    let (hosts, class_name, channels) = loaded.scenario.first_collective().map_or_else(
        || (Vec::new(), DEFAULT_CLASS.to_string(), 0),
        |(_, c)| (c.hosts.clone(), c.class.clone(), c.channels.unwrap_or(0)),
    );
    let hs = fabric.hosts_named(&hosts);
    let first = *hs.first().ok_or("the scenario has no hosts")?;
    if first.nics.is_empty() {
        return Err(format!("host `{}` has no NIC", first.name));
    }
    let platform = Platform::of_fabric(fabric, config, &hosts, 0).ok_or("the scenario has no hosts")?;
    let mut settings = Vec::new();
    let mut warnings = Vec::new();

    let order = nic_order(fabric, first);
    settings.push(hca_setting(first, &order));
    settings.push(Setting {
        name: "NCCL_IB_GID_INDEX",
        value: None,
        why: "NCCL picks the RoCE v2 GID itself since 2.21; on older NCCL set the index whose /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/<idx> reads `RoCE v2` with an IPv4-mapped GID".to_string(),
    });

    // The collective's traffic class.
    class_settings(config, &class_name, &mut settings, &mut warnings);
    qp_settings(loaded, first, &hs, &order, &mut settings, &mut warnings);
    // GPUDirect RDMA reach from the PCIe placement.
    settings.push(gdr_setting(fabric, first, &mut warnings));
    // Buffers against the bandwidth-delay product of the longest path.
    buffer_settings(fabric, first, &hs, channels, &mut settings);

    // The algorithm, only on a clear win.
    let table = table(&platform);
    settings.push(algo_setting(&table));
    Ok(Advice {
        hosts: hs.iter().map(|h| h.name.clone()).collect(),
        platform,
        settings,
        table,
        warnings,
    })
}

/// The first host's NICs in the order of the GPUs they serve, then any NIC no GPU is
/// served by.
fn nic_order(fabric: &Fabric, first: &Host) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for g in &first.gpus {
        if let Some(n) = fabric.nic_for_gpu(*g) {
            let name = &fabric.nics[n.index()].name;
            if !order.contains(name) {
                order.push(name.clone());
            }
        }
    }
    for n in &first.nics {
        let name = &fabric.nics[n.index()].name;
        if !order.contains(name) {
            order.push(name.clone());
        }
    }
    order
}

/// `NCCL_IB_HCA`: the NICs by exact name, in the order of the GPUs they serve.
fn hca_setting(first: &Host, order: &[String]) -> Setting {
    Setting {
        name: "NCCL_IB_HCA",
        value: Some(format!(
            "={}",
            order
                .iter()
                .map(|n| format!("{n}:1"))
                .collect::<Vec<_>>()
                .join(",")
        )),
        why: format!(
            "{} of `{}` in the order of the GPUs they serve (GPU i -> the NIC under its PCIe switch); `=` matches names exactly, so mlx5_1 does not also select mlx5_10..19",
            if order.len() == 1 {
                "the NIC".to_string()
            } else {
                format!("the {} NICs", order.len())
            },
            first.name
        ),
    }
}

/// The traffic class settings (`NCCL_IB_TC`, `NCCL_IB_SL`) from the collective's class,
/// with a warning when the class is not lossless or not defined.
fn class_settings(
    config: &FabricConfig,
    class_name: &str,
    settings: &mut Vec<Setting>,
    warnings: &mut Vec<String>,
) {
    match config.classes.get(class_name) {
        Some(class) => {
            let lossless = config.pfc.enabled && config.pfc.priorities.contains(&class.priority);
            if !lossless {
                warnings.push(format!(
                    "class `{class_name}` (priority {}) is not lossless: PFC is {} for it; RoCE collectives then depend on go-back-N retransmission",
                    class.priority,
                    if config.pfc.enabled { "off" } else { "disabled" }
                ));
            }
            settings.push(Setting {
                name: "NCCL_IB_TC",
                value: Some((u32::from(class.dscp) << 2).to_string()),
                why: format!(
                    "class `{class_name}`: DSCP {} (TOS = DSCP << 2), which the switches map to priority {}{}; the NIC sets the ECN bits itself",
                    class.dscp,
                    class.priority,
                    if lossless { ", a PFC-protected (lossless) priority" } else { "" }
                ),
            });
            settings.push(Setting {
                name: "NCCL_IB_SL",
                value: Some(class.priority.to_string()),
                why: format!(
                    "priority {} for fabrics that classify by VLAN PCP (or InfiniBand SL) rather than DSCP",
                    class.priority
                ),
            });
        }
        None => warnings.push(format!(
            "the collective's class `{class_name}` is not defined in the scenario"
        )),
    }
}

/// QPs per connection: as many as a bond's member ports (with a warning that separate
/// devices are better), or enough for ECMP to spread over several paths, else left to
/// NCCL.
fn qp_settings(
    loaded: &Loaded,
    first: &Host,
    hs: &[&Host],
    order: &[String],
    settings: &mut Vec<Setting>,
    warnings: &mut Vec<String>,
) {
    let fabric = &loaded.fabric;
    // A bond is one device whose QPs each use one member port: a connection reaches
    // every member only with as many QPs, placed by a hash (docs/reference/nic-aggregation.md §3).
    let bond_ports = first
        .nics
        .iter()
        .map(|n| {
            fabric.nics[n.index()]
                .ports
                .iter()
                .filter(|p| p.link.is_some())
                .count()
        })
        .max()
        .unwrap_or(1) as u32;
    let paths = multipath(fabric, hs);
    if bond_ports > 1 {
        // The hint is for generated topologies; an explicit list has no template.
        let compared = loaded
            .scenario
            .topology
            .host()
            .is_none_or(|h| h.aggregate.is_some());
        warnings.push(format!(
            "`{}` uses bonded devices ({}): each QP uses one member port, and NCCL's maintainers recommend exposing the ports as separate devices, which NCCL merges itself (NCCL_IB_MERGE_NICS=1) with one QP per port{}",
            first.name,
            order.join(", "),
            if compared {
                ""
            } else {
                "; set `aggregate` in the scenario's host template and `xirang nccl advise` simulates both layouts"
            }
        ));
        let qps = bond_ports.max(if paths > 1 { MULTIPATH_QPS } else { 1 });
        settings.push(Setting {
            name: "NCCL_IB_QPS_PER_CONNECTION",
            value: Some(qps.to_string()),
            why: format!(
                "bonds of {bond_ports} ports: one QP never uses more than one port, so {qps} QPs per connection let a connection reach every member (likely, not certain: the port is a hash of each QP's header fields)"
            ),
        });
        settings.push(Setting {
            name: "NCCL_IB_SPLIT_DATA_ON_QPS",
            value: Some("0".to_string()),
            why: "round-robin whole messages over the QPs, as NCCL's maintainers advise for bonded devices"
                .to_string(),
        });
    } else if paths > 1 {
        settings.push(Setting {
            name: "NCCL_IB_QPS_PER_CONNECTION",
            value: Some(MULTIPATH_QPS.to_string()),
            why: format!(
                "up to {paths} equal-cost paths between the hosts; each QP has its own UDP source port, so {MULTIPATH_QPS} QPs give ECMP {MULTIPATH_QPS} flows to spread instead of 1"
            ),
        });
        settings.push(Setting {
            name: "NCCL_IB_SPLIT_DATA_ON_QPS",
            value: Some("0".to_string()),
            why: "round-robin whole messages over the QPs (NCCL's default since 2.20): splitting every message costs more work requests for no extra entropy".to_string(),
        });
    } else {
        settings.push(Setting {
            name: "NCCL_IB_QPS_PER_CONNECTION",
            value: None,
            why: "one path between the hosts (or traffic stays on its rail): more QPs add no entropy"
                .to_string(),
        });
    }
}

/// `NCCL_NET_GDR_LEVEL`: GPUDirect RDMA's reach from the PCIe placement of the first
/// host's GPUs and NICs, with a warning for GPUs without a NIC under their switch.
fn gdr_setting(fabric: &Fabric, first: &Host, warnings: &mut Vec<String>) -> Setting {
    let (pix, node, sys) = pcie_distances(fabric, first);
    if node + sys == 0 {
        Setting {
            name: "NCCL_NET_GDR_LEVEL",
            value: Some("PXB".to_string()),
            why: format!(
                "all {pix} GPUs of `{}` share a PCIe switch with a NIC (PIX), so GPUDirect RDMA works at NCCL's default reach; pinned so that a changed default does not silently stage data through host memory",
                first.name
            ),
        }
    } else {
        warnings.push(format!(
            "{} of {} GPUs on `{}` have no NIC under their PCIe switch ({node} through the host bridge, {sys} only across sockets): GPUDirect RDMA is off for them at NCCL's default reach (PXB)",
            node + sys,
            pix + node + sys,
            first.name
        ));
        Setting {
            name: "NCCL_NET_GDR_LEVEL",
            value: Some(if sys > 0 { "SYS" } else { "PHB" }.to_string()),
            why: "lets GPUDirect RDMA cross the host bridge for GPUs without a NIC under their PCIe switch; measure with nccl-tests, since peer-to-peer through the root complex is slow on some CPUs, and prefer fixing the placement".to_string(),
        }
    }
}

/// `NCCL_BUFFSIZE` against the longest path's bandwidth-delay product, and
/// `NCCL_MIN_NCHANNELS`: the scenario's own channels, else two per NIC.
fn buffer_settings(fabric: &Fabric, first: &Host, hs: &[&Host], channels: u32, settings: &mut Vec<Setting>) {
    let bdp = bdp_bytes(fabric, hs);
    settings.push(Setting {
        name: "NCCL_BUFFSIZE",
        value: None,
        why: format!(
            "the default 4 MiB per channel and peer (8 slots of 512 KiB) already covers the {:.0} KiB bandwidth-delay product of the longest path",
            bdp as f64 / 1024.0
        ),
    });
    let nics = first.nics.len() as u32;
    // The scenario's own channel count is what was simulated and tuned: the file says
    // that, not a floor of ours (it had said 2 "as the scenario uses" for a scenario of 1).
    settings.push(Setting {
        name: "NCCL_MIN_NCHANNELS",
        value: Some(if channels > 0 { channels } else { (2 * nics).max(2) }.to_string()),
        why: if channels > 0 {
            format!("{channels} channel(s), as the scenario's collective uses (what was simulated)")
        } else {
            format!(
                "{} channels: two per NIC ({nics} NIC{}), as NCCL chooses on the HDR fixture; fewer would leave NICs idle in rings and trees",
                (2 * nics).max(2),
                if nics == 1 { "" } else { "s" }
            )
        },
    });
}

/// AllReduce bus bandwidth for every algorithm (best protocol each) from 1 KiB to 4 GiB.
pub fn table(p: &Platform) -> Vec<SizeRow> {
    (10..=32)
        .step_by(2)
        .map(|k| {
            let bytes = 1u64 << k;
            let all = cost::all(Coll::AllReduce, bytes, p);
            let mut algorithms = Vec::new();
            for a in [Algo::Ring, Algo::Tree, Algo::Nvls, Algo::NvlsTree] {
                if let Some(best) = all
                    .iter()
                    .filter(|x| x.algo == a)
                    .min_by(|x, y| x.time_us.total_cmp(&y.time_us))
                {
                    algorithms.push((a, best.proto, best.busbw_gbs));
                }
            }
            let best = cost::choose(Coll::AllReduce, bytes, p).map_or(Algo::Ring, |x| x.algo);
            SizeRow {
                bytes,
                algorithms,
                best,
            }
        })
        .collect()
}

/// `NCCL_ALGO`: pinned only when one algorithm wins clearly (by [`CLEAR_WIN`]) at every size
/// from [`ALGO_FROM_BYTES`], else left to NCCL.
pub fn algo_setting(table: &[SizeRow]) -> Setting {
    let big: Vec<&SizeRow> = table.iter().filter(|r| r.bytes >= ALGO_FROM_BYTES).collect();
    let winner = big.first().map(|r| r.best);
    let clear = winner.is_some_and(|w| {
        big.iter().all(|r| {
            let bw = |a: Algo| r.algorithms.iter().find(|x| x.0 == a).map(|x| x.2);
            let Some(best) = bw(w) else { return false };
            r.best == w
                && r.algorithms
                    .iter()
                    .filter(|x| x.0 != w)
                    .all(|x| best >= CLEAR_WIN * x.2)
        })
    });
    match (winner, clear) {
        (Some(w), true) => Setting {
            name: "NCCL_ALGO",
            value: Some(format!("allreduce:{}", w.nccl_name())),
            why: format!(
                "the model has {} at least {:.0}% ahead of every other algorithm at every size from 1 MiB (table below): pin it for AllReduce so a mis-estimate cannot pick another",
                w.nccl_name(),
                (CLEAR_WIN - 1.0) * 100.0
            ),
        },
        _ => Setting {
            name: "NCCL_ALGO",
            value: None,
            why: "no algorithm wins clearly at every size (table below): NCCL's own per-size choice is better than any fixed one".to_string(),
        },
    }
}

/// Most equal-cost paths from the first host's first NIC to another host's first NIC.
fn multipath(fabric: &Fabric, hs: &[&Host]) -> u128 {
    let g = Graph::new(fabric);
    let Some(a) = hs.first().and_then(|h| h.nics.first()) else {
        return 1;
    };
    hs.iter()
        .skip(1)
        .filter_map(|h| h.nics.first())
        .map(|b| g.count_paths(*a, *b))
        .max()
        .unwrap_or(1)
}

/// GPUs of `host` whose nearest NIC is under their PCIe switch, on their socket only, or on
/// the other socket only.
fn pcie_distances(fabric: &Fabric, host: &Host) -> (usize, usize, usize) {
    let (mut pix, mut node, mut sys) = (0, 0, 0);
    for g in &host.gpus {
        let gpu = &fabric.gpus[g.index()];
        let socket = host.pcie_switches[gpu.pcie_switch].socket;
        let nics = host.nics.iter().map(|n| &fabric.nics[n.index()]);
        if nics.clone().any(|n| n.pcie_switch == gpu.pcie_switch) {
            pix += 1;
        } else if nics
            .clone()
            .any(|n| host.pcie_switches[n.pcie_switch].socket == socket)
        {
            node += 1;
        } else {
            sys += 1;
        }
    }
    (pix, node, sys)
}

/// Line rate x round-trip delay of the longest first-NIC path between the hosts.
fn bdp_bytes(fabric: &Fabric, hs: &[&Host]) -> u64 {
    let g = Graph::new(fabric);
    let Some(a) = hs.first().and_then(|h| h.nics.first()) else {
        return 0;
    };
    hs.iter()
        .skip(1)
        .filter_map(|h| h.nics.first())
        .filter_map(|b| g.ecmp_paths(*a, *b, 1).into_iter().next())
        .map(|p| (p.bottleneck_gbps(fabric) * 2.0 * p.delay_ns(fabric) as f64 / 8.0) as u64)
        .max()
        .unwrap_or(0)
}
