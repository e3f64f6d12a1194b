//! Scenarios for runs on the HPCC simulator's own input files (`xirang sim
//! --hpcc-topology T --hpcc-flows F --cc ALGO`): the settings are those of the shipped
//! reference scenarios (`scenarios/reference/incast16-4mb-*.toml`, the HPCC simulator's
//! reference runs, docs/reference/reference-scenarios.md), the topology and flows are
//! the user's files.

use std::path::Path;

use crate::Loaded;
use crate::model::Tier;
use crate::scenario::{Scenario, ScenarioError};
use crate::topology::TopologySpec;
use crate::workload::Workload;

const DCQCN: &str = include_str!("../../../scenarios/reference/incast16-4mb-dcqcn.toml");
const TIMELY: &str = include_str!("../../../scenarios/reference/incast16-4mb-timely.toml");
const HPCC: &str = include_str!("../../../scenarios/reference/incast16-4mb-hpcc.toml");
const DCTCP: &str = include_str!("../../../scenarios/reference/incast16-4mb-dctcp.toml");

/// The algorithms the HPCC simulator's reference runs cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceCc {
    /// DCQCN.
    Dcqcn,
    /// TIMELY.
    Timely,
    /// HPCC.
    Hpcc,
    /// DCTCP.
    Dctcp,
}

impl ReferenceCc {
    /// As scenario files and run names spell it.
    pub fn name(self) -> &'static str {
        match self {
            ReferenceCc::Dcqcn => "dcqcn",
            ReferenceCc::Timely => "timely",
            ReferenceCc::Hpcc => "hpcc",
            ReferenceCc::Dctcp => "dctcp",
        }
    }

    fn template(self) -> &'static str {
        match self {
            ReferenceCc::Dcqcn => DCQCN,
            ReferenceCc::Timely => TIMELY,
            ReferenceCc::Hpcc => HPCC,
            ReferenceCc::Dctcp => DCTCP,
        }
    }
}

/// The scenario of a run on HPCC topology and flow files under `cc`'s reference
/// settings, named `<flows file stem>-<cc>`.
pub fn hpcc_files(topo: &Path, flows: &Path, cc: ReferenceCc) -> Result<Loaded, ScenarioError> {
    let mut s = Scenario::parse(cc.template(), Path::new("<reference settings>"))?;
    // Absolute, since the reference scenario's own directory is not the user's; a path
    // that does not resolve is reported by the build below, which reads it.
    let abs = |p: &Path| {
        std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    if let TopologySpec::Hpcc(h) = &mut s.topology {
        h.file = abs(topo);
    }
    for w in s.workloads.values_mut() {
        if let Workload::HpccFlows(f) = w {
            f.file = abs(flows);
        }
    }
    // The reference settings name ECN profiles for the tiers of their own fat tree; a file
    // without some tier must not be blamed for profiles its user never wrote. (A file that
    // does not parse is reported with its line by the build below.)
    if let Ok(text) = xirang_files::read_text(topo, crate::hpcc::FILE_LIMIT)
        && let Ok(t) = crate::hpcc::parse_topology(&text)
    {
        let present = t.tiers();
        for tier in Tier::ALL {
            if !present.contains(&Some(tier)) {
                s.config.ecn.clear(tier);
            }
        }
    }
    s.name = format!(
        "{}-{}",
        flows.file_stem().unwrap_or_default().to_string_lossy(),
        cc.name()
    );
    s.build(topo, Path::new("."), None)
}
