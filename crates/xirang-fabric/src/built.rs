//! The scenario as the simulator takes it: every name a workload or fault holds resolved
//! to an id once, by [`Scenario::build`](crate::Scenario::build), so that a run looks up
//! no name (names are for people and files; [`BuiltWorkload::name`] is kept only to label
//! results).

use crate::config::FabricConfig;
use crate::hpcc::HpccFlow;
use crate::model::{Fabric, HostId, NicId};
use crate::scenario::{Loaded, ResolvedFault, resolve_endpoint};
use crate::workload::Workload;

/// A workload's place in the scenario (its index in name order), the handle faults use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadId(pub u16);

/// One workload of a built scenario: the file's spec for its numbers, its endpoints as ids.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltWorkload {
    /// Its place in the scenario.
    pub id: WorkloadId,
    /// Its name in the file (a label for results, never looked up by a run).
    pub name: String,
    /// The workload as the file gives it.
    pub spec: Workload,
    /// Every endpoint it names, resolved.
    pub ends: Ends,
}

/// A workload's endpoints resolved on the fabric, by workload kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Ends {
    /// `flows`: one entry per flow of the list, in order.
    Flows(Vec<FlowEnds>),
    /// `incast`: the receiver and the listed senders (none: the run draws them).
    Incast {
        /// The receiving NIC.
        receiver: NicId,
        /// The senders the file lists, in order.
        senders: Vec<NicId>,
    },
    /// `permutation` and `all_to_all`: the first NIC of each listed host, in order (of
    /// every host when none is listed).
    Hosts(Vec<NicId>),
    /// `inference`: clients and servers, in the file's order.
    Inference {
        /// Clients' NICs.
        clients: Vec<NicId>,
        /// Servers' NICs.
        servers: Vec<NicId>,
    },
    /// `hpcc_flows`: the flow file's lines with their nodes' NICs.
    Hpcc(Vec<HpccEnds>),
    /// `collective`: the hosts of the ranks and each host's slowdown.
    Collective(CollectiveEnds),
    /// `moe`: the expert-parallel group's hosts, in order (every host when none is listed).
    Moe(Vec<HostId>),
    /// `kv_transfer`: the prefill and decode pools' hosts, in the file's order.
    Kv {
        /// Prefill hosts.
        prefill: Vec<HostId>,
        /// Decode hosts.
        decode: Vec<HostId>,
    },
}

/// One flow of a `flows` workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEnds {
    /// Sending NIC.
    pub src: NicId,
    /// Receiving NIC.
    pub dst: NicId,
    /// The flows it starts after, by index in the workload's list.
    pub after: Vec<u32>,
}

/// One line of an HPCC flow file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HpccEnds {
    /// The line as read.
    pub flow: HpccFlow,
    /// Node `src`'s first NIC.
    pub src: NicId,
    /// Node `dst`'s first NIC.
    pub dst: NicId,
}

/// A collective's hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveEnds {
    /// The listed hosts in order (every host when none is listed).
    pub hosts: Vec<HostId>,
    /// Each host's compute slowdown: the largest `stragglers` factor naming it, else 1.
    pub slowdown: Vec<f64>,
}

/// What a run simulates, borrowed: a run of a tuning candidate swaps `config` and borrows
/// the rest instead of copying the fabric.
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    /// The fabric, overrides applied.
    pub fabric: &'a Fabric,
    /// Its configuration.
    pub config: &'a FabricConfig,
    /// The workloads in the scenario's (name) order.
    pub workloads: &'a [BuiltWorkload],
    /// The faults in the file's order.
    pub faults: &'a [ResolvedFault],
}

impl Loaded {
    /// The built scenario as the simulator takes it.
    pub fn model(&self) -> Model<'_> {
        Model {
            fabric: &self.fabric,
            config: &self.scenario.config,
            workloads: &self.workloads,
            faults: &self.faults,
        }
    }
}

/// Resolves one workload's endpoints; `hpcc` is the flow file an `hpcc_flows` workload
/// read. An error names the endpoint that does not resolve (validation has normally
/// reported it first).
pub(crate) fn resolve(fabric: &Fabric, spec: &Workload, hpcc: Option<&[HpccFlow]>) -> Result<Ends, String> {
    let ep = |s: &str| resolve_endpoint(fabric, s);
    let eps = |names: &[String]| names.iter().map(|s| ep(s)).collect::<Result<Vec<_>, _>>();
    let first_nics = |names: &[String]| -> Result<Vec<NicId>, String> {
        if names.is_empty() {
            Ok(fabric
                .hosts
                .iter()
                .filter_map(|h| h.nics.first().copied())
                .collect())
        } else {
            eps(names)
        }
    };
    // Named hosts, or every host when none is named.
    let hosts = |names: &[String]| -> Result<Vec<HostId>, String> {
        if names.is_empty() {
            Ok((0..fabric.hosts.len() as u32).map(HostId).collect())
        } else {
            names
                .iter()
                .map(|n| fabric.host_by_name(n).ok_or_else(|| format!("no host `{n}`")))
                .collect()
        }
    };
    Ok(match spec {
        Workload::Flows(f) => {
            let index = |id: &str| {
                f.list
                    .iter()
                    .rposition(|x| x.id.as_deref() == Some(id))
                    .map(|i| i as u32)
                    .ok_or_else(|| format!("no flow has id `{id}`"))
            };
            let mut out = Vec::with_capacity(f.list.len());
            for x in &f.list {
                out.push(FlowEnds {
                    src: ep(&x.src)?,
                    dst: ep(&x.dst)?,
                    after: x.after.iter().map(|a| index(a)).collect::<Result<_, _>>()?,
                });
            }
            Ends::Flows(out)
        }
        Workload::Incast(x) => Ends::Incast {
            receiver: ep(&x.receiver)?,
            senders: eps(&x.sender_hosts)?,
        },
        Workload::Permutation(x) => Ends::Hosts(first_nics(&x.hosts)?),
        Workload::AllToAll(x) => Ends::Hosts(first_nics(&x.hosts)?),
        Workload::Inference(x) => Ends::Inference {
            clients: eps(&x.clients)?,
            servers: eps(&x.servers)?,
        },
        Workload::HpccFlows(_) => {
            let node = |id: u32| ep(&format!("h{id}"));
            let mut out = Vec::new();
            for &flow in hpcc.unwrap_or_default() {
                out.push(HpccEnds {
                    flow,
                    src: node(flow.src)?,
                    dst: node(flow.dst)?,
                });
            }
            Ends::Hpcc(out)
        }
        Workload::Moe(m) => Ends::Moe(hosts(&m.hosts)?),
        Workload::KvTransfer(k) => Ends::Kv {
            prefill: hosts(&k.prefill)?,
            decode: hosts(&k.decode)?,
        },
        Workload::Collective(c) => {
            let hosts = hosts(&c.hosts)?;
            let slowdown = hosts
                .iter()
                .map(|&h| {
                    let name = &fabric.hosts[h.index()].name;
                    c.stragglers
                        .iter()
                        .filter(|s| &s.host == name)
                        .map(|s| s.factor)
                        .fold(1.0, f64::max)
                })
                .collect();
            Ends::Collective(CollectiveEnds { hosts, slowdown })
        }
    })
}
