//! What the audit looks at: hosts (directories or snapshots), switch configurations,
//! the cabling between them, and the policy; loaded with errors that name the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xirang_fabric::model::Tier;
use xirang_host::HostInventory;
use xirang_switch::sonic::ConfigDb;

/// Why the inputs could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A directory or file could not be read.
    #[error("{path}: {reason}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A file could not be read (missing, not a file, too large, not UTF-8).
    #[error(transparent)]
    Read(#[from] xirang_files::ReadError),
    /// A TOML file (topology, policy) is malformed.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Toml {
        /// The file.
        path: PathBuf,
        /// The line of the problem, when it has one.
        line: Option<usize>,
        /// The key path, what was expected and what was found.
        message: String,
    },
    /// The cabling names something that is not there.
    #[error("{path}: link {index}: {message}")]
    Topology {
        /// The topology file.
        path: PathBuf,
        /// 1-based index of the `[[link]]` entry.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// A switch and its configuration.
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    /// Name (the file stem, or `DEVICE_METADATA.localhost.hostname`).
    pub name: String,
    /// The file it was read from.
    pub source: String,
    /// Its config_db.
    pub db: ConfigDb,
}

/// One cable, as the topology file lists it: a host NIC to a switch port, or a switch
/// port to another switch's port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cable {
    /// Host name (host-to-switch cables).
    #[serde(default)]
    pub host: Option<String>,
    /// RDMA device (`mlx5_0`) or netdev (`ens1np0`) of that host.
    #[serde(default)]
    pub nic: Option<String>,
    /// Switch name.
    pub switch: String,
    /// Switch port (`Ethernet8`).
    pub port: String,
    /// The other switch (switch-to-switch cables).
    #[serde(default)]
    pub peer_switch: Option<String>,
    /// The other switch's port.
    #[serde(default)]
    pub peer_port: Option<String>,
}

/// The cabling file (`--topology`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cabling {
    /// Tier of each switch (default leaf).
    #[serde(default)]
    pub switches: BTreeMap<String, Tier>,
    /// Cables.
    #[serde(default, rename = "link")]
    pub links: Vec<Cable>,
}

/// Allowed firmware for one NIC model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareRule {
    /// `hca_type` it applies to (`MT4129`), or
    #[serde(default)]
    pub hca_type: Option<String>,
    /// `board_id` / PSID it applies to (`MT_0000000838`).
    #[serde(default)]
    pub board_id: Option<String>,
    /// Versions allowed.
    pub allowed: Vec<String>,
}

/// RoCE priority that carries lossless RDMA traffic by default
/// (docs/reference/switch-config.md: RoCE on priority 3, the SONiC and Onyx convention).
pub const DEFAULT_ROCE_PRIORITY: u8 = 3;
/// DSCP of RoCE data by default (docs/reference/switch-config.md: DSCP 26, TOS 106).
pub const DEFAULT_ROCE_DSCP: u8 = 26;

/// What the cluster should run (`--policy`); every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Priority of lossless RoCE traffic.
    #[serde(default = "default_prio")]
    pub roce_priority: u8,
    /// DSCP of RoCE data.
    #[serde(default = "default_dscp")]
    pub roce_dscp: u8,
    /// Netdev MTU every RDMA interface should use; `None`: the cluster's majority.
    #[serde(default)]
    pub mtu_bytes: Option<u32>,
    /// Allowed firmware per model.
    #[serde(default)]
    pub firmware: Vec<FirmwareRule>,
    /// The NIC layout hosts should use, as `xirang nccl advise` or `xirang tune`
    /// recommend it: `independent` (one RDMA device per port) or `lag` (RoCE LAG bonds);
    /// unset: no expectation.
    #[serde(default)]
    pub nic_layout: Option<xirang_fabric::topology::Aggregate>,
}

fn default_prio() -> u8 {
    DEFAULT_ROCE_PRIORITY
}
fn default_dscp() -> u8 {
    DEFAULT_ROCE_DSCP
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            roce_priority: DEFAULT_ROCE_PRIORITY,
            roce_dscp: DEFAULT_ROCE_DSCP,
            mtu_bytes: None,
            firmware: Vec::new(),
            nic_layout: None,
        }
    }
}

// The inventory directory's layout (docs/formats/inventory.md), owned here for every
// reader: `xirang audit`, `xirang rollout` (which adds FLEET_FILE) and
// `xirang diagnose --inventory`.

/// One host tree or snapshot per host (required).
pub const HOSTS_DIR: &str = "hosts";
/// One SONiC `config_db.json` per switch.
pub const SWITCHES_DIR: &str = "switches";
/// The cabling and switch tiers.
pub const TOPOLOGY_FILE: &str = "topology.toml";
/// The audit policy.
pub const POLICY_FILE: &str = "policy.toml";
/// Racks and jobs: the rollout's failure domains (read by `xirang_rollout::fleet`).
pub const FLEET_FILE: &str = "fleet.toml";

/// Largest cabling or policy file read: a cabling file lists one line per cable, about
/// 80 bytes; 64 MiB holds the cables of a fabric of hundreds of thousands of NICs.
pub const INVENTORY_FILE_LIMIT: xirang_files::Limit =
    xirang_files::Limit::new(64 << 20, "cabling or policy file");

/// Everything the audit looks at.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Hosts.
    pub hosts: Vec<HostInventory>,
    /// Switches.
    pub switches: Vec<SwitchConfig>,
    /// Cabling, when given.
    pub cabling: Option<Cabling>,
    /// Policy.
    pub policy: Policy,
    /// Inputs that could not be read at all (a host directory that is not a host, a
    /// switch file that is not config_db JSON): reported as findings, never fatal.
    pub unreadable: Vec<(String, String)>,
    /// Cables whose host NIC the host does not show (host, NIC, switch, port): a dead
    /// card or a driver that failed to load, reported as a finding.
    pub missing_nics: Vec<(String, String, String, String)>,
}

fn io_err(path: &Path, e: impl ToString) -> AuditError {
    AuditError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let rd = std::fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    v.sort();
    Ok(v)
}

impl Cluster {
    /// Loads hosts from `hosts_dir` (each subdirectory a host tree, each `.tar.gz` /
    /// `.tgz` a snapshot), switches from `switches_dir` (each `*.json` a config_db,
    /// or `<name>/config_db.json`), and the optional cabling and policy files.
    pub fn load(
        hosts_dir: Option<&Path>,
        switches_dir: Option<&Path>,
        topology: Option<&Path>,
        policy: Option<&Path>,
    ) -> Result<Cluster, AuditError> {
        let mut c = Cluster::default();
        if let Some(dir) = hosts_dir {
            for p in sorted_entries(dir)? {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let is_snapshot = name.ends_with(".tar.gz") || name.ends_with(".tgz");
                if name.starts_with('.') || !(p.is_dir() || is_snapshot) {
                    continue;
                }
                match xirang_host::read(&p) {
                    Ok(mut inv) => {
                        if inv.hostname.is_empty() {
                            inv.hostname = name;
                        }
                        c.hosts.push(inv);
                    }
                    Err(e) => c.unreadable.push((p.display().to_string(), e.to_string())),
                }
            }
        }
        if let Some(dir) = switches_dir {
            for p in sorted_entries(dir)? {
                let (file, stem) = if p.is_dir() {
                    (
                        p.join("config_db.json"),
                        p.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    )
                } else if p.extension().is_some_and(|e| e == "json") {
                    (
                        p.clone(),
                        p.file_stem()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    )
                } else {
                    continue;
                };
                if !file.is_file() {
                    continue;
                }
                match xirang_switch::sonic::load(&file) {
                    Ok(db) => c.switches.push(SwitchConfig {
                        name: stem,
                        source: file.display().to_string(),
                        db,
                    }),
                    Err(e) => c.unreadable.push((file.display().to_string(), e.to_string())),
                }
            }
        }
        if let Some(p) = topology {
            let text = xirang_files::read_text(p, INVENTORY_FILE_LIMIT)?;
            let cabling: Cabling = xirang_fabric::diag::parse_toml(&text).map_err(|d| AuditError::Toml {
                path: p.to_path_buf(),
                line: d.line,
                message: d.keyed(),
            })?;
            c.missing_nics = c.check_cabling(&cabling, p)?;
            c.cabling = Some(cabling);
        }
        if let Some(p) = policy {
            let text = xirang_files::read_text(p, INVENTORY_FILE_LIMIT)?;
            c.policy = xirang_fabric::diag::parse_toml(&text).map_err(|d| AuditError::Toml {
                path: p.to_path_buf(),
                line: d.line,
                message: d.keyed(),
            })?;
        }
        Ok(c)
    }

    /// The configuration file of switch `name` that could not be read, and why.
    fn unreadable_switch(&self, name: &str) -> Option<(&str, &str)> {
        self.unreadable.iter().find_map(|(file, why)| {
            let p = Path::new(file);
            let named = p.file_stem().is_some_and(|s| s == name)
                || (p.file_name().is_some_and(|f| f == "config_db.json")
                    && p.parent().and_then(|d| d.file_name()).is_some_and(|d| d == name));
            named.then_some((file.as_str(), why.as_str()))
        })
    }

    /// Every cable's ends must be hosts and switches that were loaded; cables to NICs a
    /// host does not show are returned (they are findings, not input errors).
    fn check_cabling(
        &self,
        cabling: &Cabling,
        path: &Path,
    ) -> Result<Vec<(String, String, String, String)>, AuditError> {
        let mut missing = Vec::new();
        // A switch port holds one cable: a second is a typo that would hide the first
        // cable's checks behind it. (A NIC may have two: a bond's device, or a
        // dual-port card, cabled to two leaves.)
        let mut ports: std::collections::HashMap<(&str, &str), usize> = std::collections::HashMap::new();
        for (i, cable) in cabling.links.iter().enumerate() {
            let err = |message: String| AuditError::Topology {
                path: path.to_path_buf(),
                index: i + 1,
                message,
            };
            let mut ends = vec![(cable.switch.as_str(), cable.port.as_str())];
            if let (Some(ps), Some(pp)) = (&cable.peer_switch, &cable.peer_port) {
                ends.push((ps.as_str(), pp.as_str()));
            }
            for end in ends {
                if let Some(first) = ports.insert(end, i + 1) {
                    return Err(err(format!(
                        "switch port `{}` `{}` is cabled twice (link {first} and link {}); expected one cable per port",
                        end.0,
                        end.1,
                        i + 1
                    )));
                }
            }
            let known_switch =
                |s: &str| self.switches.is_empty() || self.switches.iter().any(|x| x.name == s);
            if !known_switch(&cable.switch) {
                // A configuration that failed to read is the cause to report, not the
                // missing switch it leaves behind.
                if let Some((file, why)) = self.unreadable_switch(&cable.switch) {
                    return Err(err(format!(
                        "switch `{}`: its configuration {file} could not be read: {why}",
                        cable.switch
                    )));
                }
                return Err(err(format!(
                    "switch `{}` is not among the switch configurations",
                    cable.switch
                )));
            }
            match (&cable.host, &cable.nic, &cable.peer_switch, &cable.peer_port) {
                (Some(h), Some(n), None, None) => {
                    if !self.hosts.is_empty() {
                        let host = self.hosts.iter().find(|x| &x.hostname == h).ok_or_else(|| err(format!("host `{h}` is not among the hosts read")))?;
                        if !host.rdma.iter().any(|d| &d.name == n) && !host.netdevs.iter().any(|d| &d.name == n) {
                            missing.push((h.clone(), n.clone(), cable.switch.clone(), cable.port.clone()));
                        }
                    }
                }
                (None, None, Some(ps), Some(_)) => {
                    if !known_switch(ps) {
                        return Err(err(format!("switch `{ps}` is not among the switch configurations")));
                    }
                }
                _ => return Err(err("expected either `host` and `nic`, or `peer_switch` and `peer_port`, besides `switch` and `port`".into())),
            }
        }
        Ok(missing)
    }

    /// Loads an inventory directory (docs/formats/inventory.md): [`HOSTS_DIR`]
    /// (required: one host tree or snapshot per host), and where present
    /// [`SWITCHES_DIR`], [`TOPOLOGY_FILE`] (cabling) and [`POLICY_FILE`].
    pub fn load_dir(dir: &Path) -> Result<Cluster, AuditError> {
        let hosts = dir.join(HOSTS_DIR);
        if !hosts.is_dir() {
            return Err(io_err(
                dir,
                format!(
                    "expected an inventory directory with `{HOSTS_DIR}/` (one host tree or snapshot per host), and optionally {SWITCHES_DIR}/, {TOPOLOGY_FILE}, {POLICY_FILE}"
                ),
            ));
        }
        let opt = |name: &str| {
            let p = dir.join(name);
            p.exists().then_some(p)
        };
        let (switches, topology, policy) = (opt(SWITCHES_DIR), opt(TOPOLOGY_FILE), opt(POLICY_FILE));
        Cluster::load(
            Some(&hosts),
            switches.as_deref(),
            topology.as_deref(),
            policy.as_deref(),
        )
    }

    /// The switch called `name`.
    pub fn switch(&self, name: &str) -> Option<&SwitchConfig> {
        self.switches.iter().find(|s| s.name == name)
    }

    /// The switch port a host NIC (RDMA device or netdev name) is cabled to.
    pub fn cable_of(&self, host: &str, rdma: &str, netdev: Option<&str>) -> Option<&Cable> {
        self.cabling.as_ref()?.links.iter().find(|c| {
            c.host.as_deref() == Some(host)
                && (c.nic.as_deref() == Some(rdma) || (netdev.is_some() && c.nic.as_deref() == netdev))
        })
    }
}
