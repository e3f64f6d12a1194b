//! The fleet a rollout runs over: nodes, their NICs (model and firmware), and the
//! failure domains each node belongs to (rack, switch, rail, job).
//!
//! Built from an audited inventory (`xirang_audit::cluster::Cluster` plus an optional
//! `fleet.toml` naming racks and jobs), or generated for property tests and the fleet
//! simulation.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use xirang_audit::cluster::Cluster;

use crate::RolloutError;

/// Kind of failure domain a limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DomainKind {
    /// A rack (from `fleet.toml`).
    Rack,
    /// A switch one of the node's NICs is cabled to (from the cabling).
    Switch,
    /// A rail: the k-th RDMA NIC of every host (NCCL's rail convention).
    Rail,
    /// A job running on the node (from `fleet.toml`).
    Job,
}

impl DomainKind {
    /// Every kind, in the order plans print them.
    pub const ALL: [DomainKind; 4] = [
        DomainKind::Rack,
        DomainKind::Switch,
        DomainKind::Rail,
        DomainKind::Job,
    ];

    /// Lower-case name (`rack`, `switch`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DomainKind::Rack => "rack",
            DomainKind::Switch => "switch",
            DomainKind::Rail => "rail",
            DomainKind::Job => "job",
        }
    }
}

/// One failure domain: kind and name (`rack:r3`, `switch:leaf1`, `rail:1`, `job:train-a`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Domain {
    /// Kind.
    pub kind: DomainKind,
    /// Name within the kind.
    pub name: String,
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.name)
    }
}

/// One RDMA NIC of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// RDMA device name (`mlx5_0`).
    pub name: String,
    /// HCA type / part (`MT4125`), from sysfs `hca_type`.
    pub hca_type: Option<String>,
    /// Board id / PSID (`MT_0000000359`), from sysfs `board_id`.
    pub board_id: Option<String>,
    /// Firmware version (`22.38.1002`), from sysfs `fw_ver`.
    pub fw: Option<String>,
    /// PCI address (`0000:19:00.0`), for the flashing tool's `-d`.
    pub pci: Option<String>,
    /// Its interface (`ens1np0`), for a configuration's script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// Its interface's DCQCN knobs ([`crate::config::ecn_values`]), for a configuration
    /// rollout's states; empty when the host shows none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ecn: BTreeMap<String, u64>,
}

impl Nic {
    /// The model as plans print it: `board_id` when known, else `hca_type`, else `unknown`.
    pub fn model(&self) -> String {
        match (&self.board_id, &self.hca_type) {
            (Some(b), Some(h)) => format!("{h}/{b}"),
            (Some(b), None) => b.clone(),
            (None, Some(h)) => h.clone(),
            (None, None) => "unknown".into(),
        }
    }
}

/// One node (host) of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Host name.
    pub name: String,
    /// RDMA NICs, sorted by name.
    pub nics: Vec<Nic>,
    /// Failure domains it belongs to.
    pub domains: BTreeSet<Domain>,
}

/// One switch of the fleet (a configuration rollout's switch side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    /// Name (its config_db file's stem).
    pub name: String,
    /// Tier, from the cabling's `[switches]`; `None` when it does not say (a patch for
    /// a tier is never applied to a switch of unknown tier).
    pub tier: Option<String>,
    /// Host NIC cables to it (the links whose errors its soak reads from the hosts' side).
    pub host_cables: usize,
    /// Its config_db file.
    pub source: String,
    /// Its config_db as JSON, or why it could not be read as such.
    #[serde(skip)]
    pub db: Option<Result<serde_json::Value, String>>,
}

/// The fleet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fleet {
    /// Nodes, sorted by name (names unique).
    pub nodes: Vec<Node>,
    /// Switches, sorted by name; no switch has a host's name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<Switch>,
}

/// `fleet.toml`: what the readers cannot see (racks, jobs).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    /// Rack name → its hosts.
    #[serde(default)]
    pub racks: BTreeMap<String, Vec<String>>,
    /// Job name → the hosts it runs on.
    #[serde(default)]
    pub jobs: BTreeMap<String, Vec<String>>,
    /// The file's text, for the line of a problem found later.
    #[serde(skip)]
    pub text: String,
}

impl FleetFile {
    /// `PATH:LINE` of `key` (`racks.r1[2]`), or the path alone when it has no line.
    fn at(&self, path: &Path, key: &str) -> String {
        // A rack or job named with a dot would be split by the key path: no line then.
        let plain = key.matches('.').count() == 1;
        let line = (plain && !self.text.is_empty())
            .then(|| xirang_fabric::diag::KeyPath::parse(key).line_in(&self.text))
            .flatten();
        match line {
            Some(l) => format!("{}:{l}", path.display()),
            None => path.display().to_string(),
        }
    }
}

/// Largest `fleet.toml` read: a line per rack or job naming its hosts; 64 MiB holds
/// hundreds of thousands of host names.
pub const FLEET_LIMIT: xirang_files::Limit = xirang_files::Limit::new(64 << 20, "fleet file");

impl FleetFile {
    /// Reads a `fleet.toml`.
    pub fn load(path: &Path) -> Result<FleetFile, RolloutError> {
        let text = xirang_files::read_text(path, FLEET_LIMIT).map_err(|e| RolloutError::Read(Box::new(e)))?;
        FleetFile::parse(&text, path)
    }

    /// Parses a `fleet.toml`'s text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<FleetFile, RolloutError> {
        let mut f: FleetFile =
            xirang_fabric::diag::parse_toml(text).map_err(|d| RolloutError::diag(path, &d))?;
        f.text = text.to_string();
        Ok(f)
    }
}

impl Fleet {
    /// The fleet of an audited inventory: every host with its RDMA NICs; switches from
    /// the cabling; rails by NIC order; racks and jobs from `extra`. A rack or job that
    /// names an unknown host, or a host in two racks, is an error naming `extra_path`.
    pub fn from_cluster(
        cluster: &Cluster,
        extra: &FleetFile,
        extra_path: &Path,
    ) -> Result<Fleet, RolloutError> {
        let mut nodes: Vec<Node> = cluster
            .hosts
            .iter()
            .map(|h| {
                let mut nics: Vec<Nic> = h
                    .rdma
                    .iter()
                    .map(|d| {
                        let nd = crate::config::netdev_of(h, &d.name);
                        Nic {
                            name: d.name.clone(),
                            hca_type: d.hca_type.clone(),
                            board_id: d.board_id.clone(),
                            fw: d.fw_ver.clone(),
                            pci: d.pci.clone(),
                            netdev: nd.map(|n| n.name.clone()),
                            ecn: nd
                                .and_then(|n| n.ecn.as_ref())
                                .map(crate::config::ecn_values)
                                .unwrap_or_default(),
                        }
                    })
                    .collect();
                nics.sort_by(|a, b| a.name.cmp(&b.name));
                let mut domains = BTreeSet::new();
                for (rail, nic) in nics.iter().enumerate() {
                    domains.insert(Domain {
                        kind: DomainKind::Rail,
                        name: rail.to_string(),
                    });
                    let netdev = h
                        .rdma
                        .iter()
                        .find(|d| d.name == nic.name)
                        .and_then(|d| d.netdevs.first())
                        .map(String::as_str);
                    if let Some(c) = cluster.cable_of(&h.hostname, &nic.name, netdev) {
                        domains.insert(Domain {
                            kind: DomainKind::Switch,
                            name: c.switch.clone(),
                        });
                    }
                }
                Node {
                    name: h.hostname.clone(),
                    nics,
                    domains,
                }
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        for w in nodes.windows(2) {
            if w[0].name == w[1].name {
                return Err(RolloutError::Inventory(format!(
                    "two hosts are called `{}`",
                    w[0].name
                )));
            }
        }
        let mut rack_of: BTreeMap<String, String> = BTreeMap::new();
        for (kind, key, table) in [
            (DomainKind::Rack, "racks", &extra.racks),
            (DomainKind::Job, "jobs", &extra.jobs),
        ] {
            for (dom, hosts) in table {
                let mut seen = std::collections::HashSet::new();
                for (j, h) in hosts.iter().enumerate() {
                    let at = || extra.at(extra_path, &format!("{key}.{dom}[{j}]"));
                    let Ok(i) = nodes.binary_search_by(|n| n.name.as_str().cmp(h)) else {
                        return Err(RolloutError::Inventory(format!(
                            "{}: {} `{dom}` lists host `{h}`, which is not in the inventory",
                            at(),
                            kind.name()
                        )));
                    };
                    if !seen.insert(h.as_str()) {
                        return Err(RolloutError::Inventory(format!(
                            "{}: {} `{dom}` lists host `{h}` twice",
                            at(),
                            kind.name()
                        )));
                    }
                    if kind == DomainKind::Rack
                        && let Some(prev) = rack_of.insert(h.clone(), dom.clone())
                    {
                        return Err(RolloutError::Inventory(format!(
                            "{}: host `{h}` is in two racks (`{prev}` and `{dom}`)",
                            at()
                        )));
                    }
                    nodes[i].domains.insert(Domain {
                        kind,
                        name: dom.clone(),
                    });
                }
            }
        }
        let mut switches: Vec<Switch> = cluster
            .switches
            .iter()
            .map(|sw| Switch {
                name: sw.name.clone(),
                tier: cluster
                    .cabling
                    .as_ref()
                    .and_then(|c| c.switches.get(&sw.name))
                    .map(|t| t.as_str().to_string()),
                // Cables to hosts the inventory has: the others' errors cannot be read.
                host_cables: cluster.cabling.as_ref().map_or(0, |c| {
                    c.links
                        .iter()
                        .filter(|l| {
                            l.switch == sw.name
                                && l.host
                                    .as_ref()
                                    .is_some_and(|h| cluster.hosts.iter().any(|x| &x.hostname == h))
                        })
                        .count()
                }),
                source: sw.source.clone(),
                db: Some(crate::config::read_config_db(Path::new(&sw.source))),
            })
            .collect();
        switches.sort_by(|a, b| a.name.cmp(&b.name));
        for sw in &switches {
            if nodes.binary_search_by(|n| n.name.as_str().cmp(&sw.name)).is_ok() {
                return Err(RolloutError::Inventory(format!(
                    "switch `{}` ({}) has the name of a host; expected distinct names",
                    sw.name, sw.source
                )));
            }
        }
        Ok(Fleet { nodes, switches })
    }

    /// The switch called `name`.
    pub fn switch(&self, name: &str) -> Option<&Switch> {
        self.switches
            .binary_search_by(|s| s.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.switches[i])
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes
            .binary_search_by(|n| n.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// Number of nodes in every domain.
    pub fn domain_sizes(&self) -> BTreeMap<Domain, usize> {
        let mut m = BTreeMap::new();
        for n in &self.nodes {
            for d in &n.domains {
                *m.entry(d.clone()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Which domain kinds any node belongs to.
    pub fn kinds_present(&self) -> BTreeSet<DomainKind> {
        self.nodes
            .iter()
            .flat_map(|n| n.domains.iter().map(|d| d.kind))
            .collect()
    }
}

/// Most nodes a synthetic fleet may have: 50,000 nodes is 400,000 GPUs at eight per
/// node, four times the largest clusters described publicly. A simulated rollout keeps
/// about 28 KB per node (measured: 100,000 nodes took 2.8 GB), so this bound also keeps
/// it near 1.4 GB.
pub const MAX_SYNTHETIC_NODES: usize = 50_000;

/// Shape of a generated fleet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyntheticSpec {
    /// Number of nodes.
    pub nodes: usize,
    /// Nodes per rack (one leaf switch per rack and rail).
    pub rack_size: usize,
    /// RDMA NICs per node (rails).
    pub nics_per_node: usize,
    /// NIC models: (hca_type, board_id, share of nodes).
    pub models: Vec<(String, String, f64)>,
    /// Current firmware versions per model: (version, share).
    pub versions: Vec<(String, f64)>,
    /// Jobs: each takes this many consecutive racks' nodes, until nodes run out; 0 = none.
    pub racks_per_job: usize,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            nodes: 512,
            rack_size: 16,
            nics_per_node: 8,
            // ConnectX-6 Dx and ConnectX-7 (sysfs hca_type MT4125 / MT4129); the PSIDs
            // are examples of the form `MT_00000xxxxx`.
            models: vec![
                ("MT4125".into(), "MT_0000000359".into(), 0.75),
                ("MT4129".into(), "MT_0000000834".into(), 0.25),
            ],
            versions: vec![("22.38.1002".into(), 0.9), ("22.36.1010".into(), 0.1)],
            racks_per_job: 4,
        }
    }
}

fn pick_weighted<'a, T>(rng: &mut Xoshiro256PlusPlus, items: &'a [(T, f64)]) -> &'a T {
    let total: f64 = items.iter().map(|x| x.1).sum();
    let mut u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    for (x, w) in items {
        if u < *w {
            return x;
        }
        u -= w;
    }
    &items[items.len() - 1].0
}

impl Fleet {
    /// A generated fleet: `spec.nodes` nodes named `n0001`.., racks of `rack_size`
    /// (rack `rK`, leaf switch `rK-leafJ` per rail J), a model per node and a current
    /// firmware per node drawn with the given shares from `seed`.
    pub fn synthetic(spec: &SyntheticSpec, seed: u64) -> Fleet {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let rack_size = spec.rack_size.max(1);
        let width = spec.nodes.to_string().len().max(4);
        let mut nodes = Vec::with_capacity(spec.nodes);
        let models: Vec<((String, String), f64)> = spec
            .models
            .iter()
            .map(|(h, b, w)| ((h.clone(), b.clone()), *w))
            .collect();
        for i in 0..spec.nodes {
            let rack = i / rack_size + 1;
            let (hca, board) = pick_weighted(&mut rng, &models).clone();
            let fw = pick_weighted(&mut rng, &spec.versions).clone();
            let mut domains = BTreeSet::new();
            domains.insert(Domain {
                kind: DomainKind::Rack,
                name: format!("r{rack}"),
            });
            if let Some(job) = (rack - 1).checked_div(spec.racks_per_job) {
                domains.insert(Domain {
                    kind: DomainKind::Job,
                    name: format!("job{}", job + 1),
                });
            }
            let nics = (0..spec.nics_per_node)
                .map(|k| {
                    domains.insert(Domain {
                        kind: DomainKind::Rail,
                        name: k.to_string(),
                    });
                    domains.insert(Domain {
                        kind: DomainKind::Switch,
                        name: format!("r{rack}-leaf{k}"),
                    });
                    Nic {
                        name: format!("mlx5_{k}"),
                        hca_type: Some(hca.clone()),
                        board_id: Some(board.clone()),
                        fw: Some(fw.clone()),
                        pci: Some(format!("0000:{:02x}:00.0", 0x10 + k)),
                        netdev: Some(format!("ens{}np0", k + 1)),
                        ecn: BTreeMap::new(),
                    }
                })
                .collect();
            nodes.push(Node {
                name: format!("n{:0width$}", i + 1),
                nics,
                domains,
            });
        }
        Fleet {
            nodes,
            switches: Vec::new(),
        }
    }
}
