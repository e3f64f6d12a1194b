//! The workload parameters calibration fits, and how each is read and written.
//!
//! Per workload: its offered load (a collective's or a synthetic pattern's message size
//! in bytes, an inference service's request rate) and, for an inference service whose
//! clients have servers both under their own leaf and elsewhere, the share of requests
//! that stay under the leaf (what decides the traffic crossing the spines). Flow lists
//! and HPCC flow files are replayed as written: they have no parameter to fit.

use serde::Serialize;
use xirang_fabric::model::{Fabric, NicId, Node};
use xirang_fabric::scenario::{Scenario, resolve_endpoint};
use xirang_fabric::workload::Workload;

/// Which parameter of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Param {
    /// `bytes` of a collective, incast, permutation or all-to-all.
    Bytes,
    /// `requests_per_sec` of an inference workload.
    RequestsPerSec,
    /// `local_share` of an inference workload.
    LocalShare,
}

impl Param {
    /// The key in the workload's table.
    pub fn field(self) -> &'static str {
        match self {
            Param::Bytes => "bytes",
            Param::RequestsPerSec => "requests_per_sec",
            Param::LocalShare => "local_share",
        }
    }
}

/// How far a load parameter may move from the scenario's value, either way: a factor of
/// 64 spans a job at a few percent of its load to one far past saturation.
pub const LOAD_RANGE: f64 = 64.0;

/// One fitted parameter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Knob {
    /// Workload name.
    pub workload: String,
    /// Its kind key (`collective`, `inference`, ...).
    pub kind: &'static str,
    /// The parameter.
    pub param: Param,
    /// Value in the scenario.
    pub initial: f64,
    /// Smallest value tried.
    pub min: f64,
    /// Largest value tried.
    pub max: f64,
}

impl Knob {
    /// Its key path in the scenario file (`workloads.inference.inference.requests_per_sec`).
    pub fn key(&self) -> String {
        format!("workloads.{}.{}.{}", self.workload, self.kind, self.param.field())
    }

    /// Whether it moves on a log scale (loads) or a linear one (shares).
    fn log(&self) -> bool {
        self.param != Param::LocalShare
    }

    /// The value at `u` in [0, 1] of its range.
    pub fn at(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        let v = if self.log() {
            self.min * (self.max / self.min).powf(u)
        } else {
            self.min + (self.max - self.min) * u
        };
        if self.param == Param::Bytes {
            v.round().max(1.0)
        } else {
            v
        }
    }

    /// Where `v` sits in [0, 1] of its range.
    pub fn position(&self, v: f64) -> f64 {
        let u = if self.log() {
            (v / self.min).ln() / (self.max / self.min).ln()
        } else if self.max > self.min {
            (v - self.min) / (self.max - self.min)
        } else {
            0.0
        };
        u.clamp(0.0, 1.0)
    }

    /// Writes `v` into the scenario.
    pub fn set(&self, s: &mut Scenario, v: f64) {
        let Some(w) = s.workloads.get_mut(&self.workload) else {
            return;
        };
        match (w, self.param) {
            (Workload::Collective(c), Param::Bytes) => c.bytes = v as u64,
            (Workload::Incast(c), Param::Bytes) => c.bytes = v as u64,
            (Workload::Permutation(c), Param::Bytes) => c.bytes = v as u64,
            (Workload::AllToAll(c), Param::Bytes) => c.bytes = v as u64,
            (Workload::Inference(x), Param::RequestsPerSec) => x.requests_per_sec = v,
            (Workload::Inference(x), Param::LocalShare) => x.local_share = Some(v),
            _ => {}
        }
    }
}

fn load_knob(workload: &str, kind: &'static str, param: Param, v: f64) -> Knob {
    // Bytes are whole and at least one; a rate may be any positive number.
    let floor = if param == Param::Bytes { 1.0 } else { 0.0 };
    Knob {
        workload: workload.to_string(),
        kind,
        param,
        initial: v,
        min: (v / LOAD_RANGE).max(floor),
        max: (v * LOAD_RANGE).max(floor * LOAD_RANGE),
    }
}

/// The leaf a NIC's first port is cabled to.
fn leaf(fabric: &Fabric, n: NicId) -> Option<Node> {
    fabric.attached_switch(n, 0).map(|p| p.node)
}

/// The parameters of a scenario's workloads that calibration can fit, in workload order.
pub fn knobs(s: &Scenario, fabric: &Fabric) -> Vec<Knob> {
    let mut out = Vec::new();
    for (name, w) in &s.workloads {
        let kind = w.kind();
        match w {
            Workload::Collective(c) => out.push(load_knob(name, kind, Param::Bytes, c.bytes as f64)),
            Workload::Incast(c) => out.push(load_knob(name, kind, Param::Bytes, c.bytes as f64)),
            Workload::Permutation(c) => out.push(load_knob(name, kind, Param::Bytes, c.bytes as f64)),
            Workload::AllToAll(c) => out.push(load_knob(name, kind, Param::Bytes, c.bytes as f64)),
            Workload::Inference(x) => {
                out.push(load_knob(name, kind, Param::RequestsPerSec, x.requests_per_sec));
                let ep = |e: &String| resolve_endpoint(fabric, e).ok();
                let servers: Vec<NicId> = x.servers.iter().filter_map(ep).collect();
                let clients: Vec<NicId> = x.clients.iter().filter_map(ep).collect();
                // Pairs under one leaf, and clients that could go either way.
                let mut local_pairs = 0usize;
                let mut either = false;
                for &c in &clients {
                    let l = servers
                        .iter()
                        .filter(|&&sv| leaf(fabric, sv) == leaf(fabric, c))
                        .count();
                    local_pairs += l;
                    either |= l > 0 && l < servers.len();
                }
                if either {
                    let uniform = local_pairs as f64 / (clients.len() * servers.len()) as f64;
                    out.push(Knob {
                        workload: name.clone(),
                        kind,
                        param: Param::LocalShare,
                        initial: x.local_share.unwrap_or(uniform),
                        min: 0.0,
                        max: 1.0,
                    });
                }
            }
            // Serving workloads' load is their model's and their batch's, not a
            // calibration knob (calibration fits traffic volume from counters).
            Workload::Flows(_) | Workload::HpccFlows(_) | Workload::Moe(_) | Workload::KvTransfer(_) => {}
        }
    }
    out
}
