//! Reads a host's inventory from a [`Tree`]: `/sys/class/infiniband`, `/sys/class/net`,
//! `/sys/bus/pci/devices`, and the tool outputs under `commands/`
//! (docs/reference/linux-rdma-sysfs.md).
//!
//! Nothing here fails on a bad value: an unreadable or malformed attribute becomes a
//! [`ReadProblem`] with its path and the field stays `None`, so one broken file never
//! hides the rest of the host.

use std::collections::{BTreeMap, BTreeSet};

use crate::inventory::*;
use crate::parse;
use crate::snapshot::{COMMANDS_DIR, MANIFEST, Manifest};
use crate::tree::{Kind, Tree, TreeError, base_name, join};

/// NCCL's system-wide configuration file, read after `NCCL_CONF_FILE` and `~/.nccl.conf`
/// (NCCL's documentation of its environment variables).
pub const NCCL_CONF: &str = "etc/nccl.conf";
/// What mlx5 puts in the name of a RoCE LAG device (`mlx5_bond_0`,
/// docs/reference/nic-aggregation.md §2).
const LAG_DEVICE_MARK: &str = "_bond_";
/// What the bonding driver prints in place of names that do not fit its sysfs page
/// (docs/reference/nic-aggregation.md §1.1).
const BOND_LIST_OVERFLOW: &str = "++more++";

/// PCI vendor ids (docs/reference/linux-rdma-sysfs.md §3).
const VENDOR_NVIDIA: u16 = 0x10de;
const VENDOR_AMD: u16 = 0x1002;
/// PCI class codes, top 16 bits (base class + subclass).
const CLASS_VGA: u32 = 0x0300;
const CLASS_3D: u32 = 0x0302;
const CLASS_DISPLAY_OTHER: u32 = 0x0380;
const CLASS_NET_BASE: u32 = 0x02;
const CLASS_BRIDGE_PCI: u32 = 0x0604;

/// Reads everything the audit needs from `tree`.
pub fn read_host(tree: &dyn Tree) -> HostInventory {
    let mut r = Reader {
        tree,
        problems: Vec::new(),
        gids: true,
        light: false,
        dirs: Default::default(),
        lists: None,
        stale: false,
        statics: None,
    };
    let mut inv = HostInventory {
        hostname: r.hostname(),
        source: tree.describe(),
        ..HostInventory::default()
    };
    inv.netdevs = r.netdevs();
    inv.rdma = r.rdma_devices();
    // Netdev <-> RDMA device pairs share a PCI function (how ibdev2netdev maps them).
    for dev in &mut inv.rdma {
        if let Some(pci) = &dev.pci {
            dev.netdevs = inv
                .netdevs
                .iter()
                .filter(|n| n.pci.as_ref() == Some(pci))
                .map(|n| n.name.clone())
                .collect();
        }
        // GID ndevs name the netdev even when the tree has no `device` links.
        if dev.netdevs.is_empty() {
            let from_gids: BTreeSet<String> = dev
                .ports
                .iter()
                .flat_map(|p| p.gids.iter().filter_map(|g| g.ndev.clone()))
                .collect();
            dev.netdevs = from_gids
                .into_iter()
                .filter(|n| inv.netdevs.iter().any(|d| &d.name == n))
                .collect();
        }
        for n in &dev.netdevs {
            if let Some(nd) = inv.netdevs.iter_mut().find(|d| &d.name == n) {
                nd.rdma = Some(dev.name.clone());
            }
        }
    }
    inv.bonds = r.bonds(&inv);
    inv.nccl_conf = r.nccl_conf();
    inv.pci = r.pci_functions(&inv);
    inv.tools = r.tools();
    gids_from_show_gids(&mut inv);
    inv.problems = r.problems;
    inv
}

/// A port whose GID table sysfs does not show (a partial capture, a container without
/// `gid_attrs`) takes it from `show_gids`, which reads the same table, with the type as
/// sysfs names it.
fn gids_from_show_gids(inv: &mut HostInventory) {
    let Some(rows) = inv.tools.show_gids.clone() else {
        return;
    };
    for d in &mut inv.rdma {
        for p in d.ports.iter_mut().filter(|p| p.gids.is_empty()) {
            p.gids = rows
                .iter()
                .filter(|r| r.device == d.name && r.port == p.port)
                .map(|r| Gid {
                    index: r.index,
                    gid: r.gid.clone(),
                    kind: Some(r.sysfs_type().to_string()),
                    ndev: r.netdev.clone(),
                    from_show_gids: true,
                })
                .collect();
        }
    }
}

/// What a monitoring round samples: every RDMA device with its ports' state, rate,
/// `counters/` and `hw_counters/` (no GID tables, no static attributes beyond identity),
/// each netdev's `statistics/` and operational state, and the PCIe link of every NIC.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CounterRead {
    /// RDMA devices (ports without GIDs).
    pub rdma: Vec<RdmaDevice>,
    /// Netdevs: name, `operstate`, `carrier_changes`, and `statistics/*`.
    pub netdevs: Vec<NetdevCounters>,
    /// PCIe functions behind the netdevs and RDMA devices, with their link state.
    pub pci: Vec<PciFunction>,
    /// The most each function's upstream port allows (max speed GT/s, max width), by
    /// address: a link trains no faster than its slower end
    /// (docs/reference/linux-rdma-sysfs.md §3).
    pub upstream_max: BTreeMap<String, (f64, u8)>,
    /// What could not be read.
    pub problems: Vec<ReadProblem>,
}

/// A netdev's counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NetdevCounters {
    /// Interface name.
    pub name: String,
    /// `operstate`.
    pub operstate: Option<String>,
    /// `carrier_changes`: link flaps seen by the kernel.
    pub carrier_changes: Option<u64>,
    /// `statistics/*`.
    pub statistics: BTreeMap<String, u64>,
}

/// Reads the counters a monitoring round needs, with the same reader (and the same
/// handling of bad files) as [`read_host`].
pub fn read_counters(tree: &dyn Tree) -> CounterRead {
    read_counters_with(tree, &mut ReadCache::off())
}

/// What a sampler keeps between rounds: resolved directories and directory listings,
/// so a round is only the reads of the files themselves. Rebuilt every
/// [`ReadCache::REFRESH_ROUNDS`] rounds, and at once after a round in which something
/// listed was missing (a device went away), so new and vanished devices are seen.
#[derive(Debug, Default)]
pub struct ReadCache {
    on: bool,
    dirs: crate::tree::FnvMap<String, Option<String>>,
    lists: crate::tree::FnvMap<String, std::sync::Arc<Vec<String>>>,
    statics: crate::tree::FnvMap<String, Option<String>>,
    rounds_left: u32,
}

impl ReadCache {
    /// Rounds a structure is reused before it is read again.
    pub const REFRESH_ROUNDS: u32 = 10;

    /// A cache that keeps the structure between rounds.
    pub fn new() -> Self {
        ReadCache {
            on: true,
            ..ReadCache::default()
        }
    }

    /// No caching: every round reads the structure (what [`read_counters`] does).
    pub fn off() -> Self {
        ReadCache::default()
    }

    /// Forgets the structure; the next round reads it again.
    pub fn invalidate(&mut self) {
        self.dirs.clear();
        self.lists.clear();
        self.statics.clear();
        self.rounds_left = 0;
    }
}

/// [`read_counters`], reusing what `cache` remembers of the tree's structure.
pub fn read_counters_with(tree: &dyn Tree, cache: &mut ReadCache) -> CounterRead {
    if cache.on && cache.rounds_left == 0 {
        cache.invalidate();
        cache.rounds_left = ReadCache::REFRESH_ROUNDS;
    }
    let mut r = Reader {
        tree,
        problems: Vec::new(),
        gids: false,
        light: true,
        dirs: if cache.on {
            std::mem::take(&mut cache.dirs)
        } else {
            Default::default()
        },
        lists: cache.on.then(|| std::mem::take(&mut cache.lists)),
        stale: false,
        statics: cache.on.then(|| std::mem::take(&mut cache.statics)),
    };
    let read = read_counters_inner(&mut r);
    if cache.on {
        cache.dirs = std::mem::take(&mut r.dirs);
        cache.lists = r.lists.take().unwrap_or_default();
        cache.statics = r.statics.take().unwrap_or_default();
        cache.rounds_left -= 1;
        if r.stale {
            cache.rounds_left = 0;
        }
    }
    read
}

/// Reads the PCI function a `device` link leads to (once), with its upstream maximum.
fn add_function(
    r: &mut Reader<'_>,
    link: &str,
    functions: &mut BTreeMap<String, PciFunction>,
    upstream_max: &mut BTreeMap<String, (f64, u8)>,
) {
    let Ok(target) = r.link_target(link) else { return };
    let Some(bdf) = target.split('/').rev().find(|c| is_bdf(c)) else {
        return;
    };
    if functions.contains_key(bdf) {
        return;
    }
    // A virtio or auxiliary device sits below its function: cut the path there.
    let at = target
        .find(bdf)
        .map_or(target.as_str(), |i| &target[..i + bdf.len()])
        .to_string();
    let f = r.pci_function(&at);
    if let Some(m) = r.upstream_max(&at) {
        upstream_max.insert(f.bdf.clone(), m);
    }
    functions.insert(f.bdf.clone(), f);
}

fn read_counters_inner(r: &mut Reader<'_>) -> CounterRead {
    let rdma = r.rdma_devices();
    let mut netdevs = Vec::new();
    let mut functions: BTreeMap<String, PciFunction> = BTreeMap::new();
    let mut upstream_max: BTreeMap<String, (f64, u8)> = BTreeMap::new();
    for name in r.interfaces() {
        let d = join("sys/class/net", &name);
        add_function(r, &join(&d, "device"), &mut functions, &mut upstream_max);
        netdevs.push(NetdevCounters {
            operstate: r.text(&join(&d, "operstate")),
            carrier_changes: r.parsed(&join(&d, "carrier_changes"), "a count", |t| t.parse().ok()),
            statistics: r.counters(&join(&d, "statistics")),
            name,
        });
    }
    for dev in &rdma {
        add_function(
            r,
            &format!("sys/class/infiniband/{}/device", dev.name),
            &mut functions,
            &mut upstream_max,
        );
    }
    CounterRead {
        rdma,
        netdevs,
        pci: functions.into_values().collect(),
        upstream_max,
        problems: std::mem::take(&mut r.problems),
    }
}

struct Reader<'a> {
    tree: &'a dyn Tree,
    problems: Vec<ReadProblem>,
    /// GID tables are large (256 entries per port on mlx5) and static: the counter
    /// sampler skips them.
    gids: bool,
    /// Counter sampling: read only what changes (states, rates, counters, PCIe link), not
    /// the static attributes (GUIDs, traffic class, NUMA, SR-IOV, AER) a round repeats.
    light: bool,
    /// Directories resolved so far (logical path → path with no symlinks, or `None` when
    /// it does not resolve), so each is resolved once per read rather than once per file.
    dirs: crate::tree::FnvMap<String, Option<String>>,
    /// Directory listings, when kept across rounds (see [`ReadCache`]); `None`: list
    /// every time.
    lists: Option<crate::tree::FnvMap<String, std::sync::Arc<Vec<String>>>>,
    /// Something listed or resolved was not there: the structure changed.
    stale: bool,
    /// Attributes that change only with the device (firmware, board, link layer, the
    /// upstream port's maximum), kept with the structure.
    statics: Option<crate::tree::FnvMap<String, Option<String>>>,
}

impl Reader<'_> {
    fn problem(&mut self, path: &str, message: impl Into<String>) {
        self.problems.push(ReadProblem {
            path: path.to_string(),
            message: message.into(),
        });
    }

    fn tree_problem(&mut self, e: TreeError) {
        let (path, message) = match &e {
            TreeError::NotFound { path } => (path.clone(), "not found".to_string()),
            TreeError::Unreadable { path, reason } | TreeError::BadLink { path, reason } => {
                (path.clone(), reason.clone())
            }
        };
        self.problem(&path, message);
    }

    /// `path` with every symlink resolved, one component at a time on top of its parent's
    /// cached resolution (one `lstat` per new directory rather than one per component of
    /// every path); `None` when it does not resolve.
    fn resolved(&mut self, path: &str) -> Option<String> {
        if path.is_empty() {
            return Some(String::new());
        }
        if let Some(r) = self.dirs.get(path) {
            return r.clone();
        }
        let parent = self.resolved(crate::tree::parent_of(path));
        let r = parent.and_then(|p| {
            let here = join(&p, base_name(path));
            match self.tree.lstat(&here) {
                // A link (or `..`, `.`) needs the general resolution, bounded and confined.
                Some(Kind::Link(_)) => self.tree.resolve(path).ok(),
                _ if matches!(base_name(path), ".." | ".") => self.tree.resolve(path).ok(),
                Some(_) => Some(here),
                None => None,
            }
        });
        self.dirs.insert(path.to_string(), r.clone());
        r
    }

    /// Where the link at `path` points, resolved through the cache; flattened links and
    /// anything unusual take the tree's general (confined) resolution.
    fn link_target(&mut self, path: &str) -> Result<String, TreeError> {
        if let Some(parent) = self.resolved(crate::tree::parent_of(path)) {
            let here = join(&parent, base_name(path));
            if let Some(Kind::Link(text)) = self.tree.lstat(&here)
                && !text.starts_with('/')
                && let Some(target) = crate::tree::normalize(&parent, &text)
                && let Some(real) = self.resolved(&target)
            {
                return Ok(real);
            }
        }
        self.tree.link_target(path)
    }

    /// `path` with its directories resolved (cached), or `None` when they do not resolve.
    fn real(&mut self, path: &str) -> Option<String> {
        let dir = self.resolved(crate::tree::parent_of(path))?;
        Some(join(&dir, base_name(path)))
    }

    /// Reads a file: through the resolved-directory cache, falling back to a full
    /// resolution when the file itself is a link.
    fn read(&mut self, path: &str) -> Result<Vec<u8>, TreeError> {
        let fast = self.real(path).map(|real| self.tree.read_nofollow(&real));
        // A directory that no longer resolves means the structure changed.
        if self.lists.is_some() && fast.is_none() {
            self.stale = true;
        }
        match fast {
            Some(Err(TreeError::BadLink { .. })) | None => self.tree.read(path),
            Some(r) => r.map_err(|e| crate::tree::rename(e, path)),
        }
    }

    /// An attribute that changes only with the device: read once per structure.
    fn text_static(&mut self, path: &str) -> Option<String> {
        if let Some(v) = self.statics.as_ref().and_then(|m| m.get(path)) {
            return v.clone();
        }
        let v = self.text(path);
        if let Some(m) = self.statics.as_mut() {
            m.insert(path.to_string(), v.clone());
        }
        v
    }

    /// An optional attribute: absent is fine, unreadable is a problem.
    fn text(&mut self, path: &str) -> Option<String> {
        let res = self.read(path).and_then(|bytes| {
            String::from_utf8(bytes)
                .map(|s| s.trim().to_string())
                .map_err(|_| TreeError::Unreadable {
                    path: path.to_string(),
                    reason: "not valid UTF-8 text (binary data?)".into(),
                })
        });
        match res {
            Ok(t) => Some(t),
            Err(TreeError::NotFound { .. }) => None,
            Err(e) => {
                self.tree_problem(e);
                None
            }
        }
    }

    fn parsed<T>(&mut self, path: &str, expected: &str, f: impl FnOnce(&str) -> Option<T>) -> Option<T> {
        let t = self.text(path)?;
        match f(&t) {
            Some(v) => Some(v),
            None => {
                let shown: String = t.chars().take(60).collect();
                self.problem(path, format!("expected {expected}, found `{shown}`"));
                None
            }
        }
    }

    fn list(&mut self, path: &str) -> Vec<String> {
        self.list_shared(path).as_ref().clone()
    }

    /// A listing, shared with the cache (no copy of the names).
    fn list_shared(&mut self, path: &str) -> std::sync::Arc<Vec<String>> {
        if let Some(v) = self.lists.as_ref().and_then(|l| l.get(path)) {
            return v.clone();
        }
        let listed = std::sync::Arc::new(self.list_uncached(path));
        if let Some(l) = self.lists.as_mut() {
            l.insert(path.to_string(), listed.clone());
        }
        listed
    }

    fn list_uncached(&mut self, path: &str) -> Vec<String> {
        let real = self.resolved(path);
        let res = match real {
            Some(real) => match self.tree.lstat(&real) {
                Some(Kind::Dir) => self.tree.list_raw(&real),
                Some(_) => Err(TreeError::Unreadable {
                    path: path.to_string(),
                    reason: "is a file, expected a directory".into(),
                }),
                None => Err(TreeError::NotFound {
                    path: path.to_string(),
                }),
            },
            None => self.tree.list(path),
        };
        match res {
            Ok(v) => v,
            Err(TreeError::NotFound { .. }) => Vec::new(),
            Err(e) => {
                self.tree_problem(e);
                Vec::new()
            }
        }
    }

    fn hostname(&mut self) -> String {
        for p in ["etc/hostname", "proc/sys/kernel/hostname"] {
            if let Some(h) = self.text(p).filter(|h| !h.is_empty()) {
                return h.lines().next().unwrap_or_default().trim().to_string();
            }
        }
        if let Ok(bytes) = self.tree.read(MANIFEST)
            && let Ok(m) = serde_json::from_slice::<Manifest>(&bytes)
        {
            return m.hostname;
        }
        let d = self.tree.describe();
        base_name(d.trim_end_matches(".tar.gz")).to_string()
    }

    /// The PCI address a `device` link points at, when it is a PCI function.
    fn pci_of(&mut self, device_link: &str) -> Option<String> {
        match self.link_target(device_link) {
            // A virtio or auxiliary device sits below its PCI function: take the
            // nearest PCI address on the path.
            Ok(target) => target.split('/').rev().find(|c| is_bdf(c)).map(str::to_string),
            Err(TreeError::NotFound { .. }) => None,
            Err(e) => {
                self.tree_problem(e);
                None
            }
        }
    }

    /// The interfaces of `/sys/class/net`: its directories (links to them), less `lo`.
    /// Files beside them are not interfaces: the bonding driver's `bonding_masters`
    /// lists the bonds (Documentation/networking/bonding.rst).
    fn interfaces(&mut self) -> Vec<String> {
        let names = self.list("sys/class/net");
        names
            .into_iter()
            .filter(|n| n != "lo")
            .filter(|n| {
                let d = join("sys/class/net", n);
                matches!(
                    self.tree.resolve(&d).ok().and_then(|p| self.tree.lstat(&p)),
                    Some(Kind::Dir)
                )
            })
            .collect()
    }

    fn netdevs(&mut self) -> Vec<Netdev> {
        let mut out = Vec::new();
        for name in self.interfaces() {
            let d = join("sys/class/net", &name);
            let ecn = self.roce_ecn(&join(&d, "ecn"));
            let nd = Netdev {
                mtu_bytes: self.parsed(&join(&d, "mtu"), "an MTU in bytes", |t| t.parse().ok()),
                // `speed` reads -1 (or fails with EINVAL) while the link is down.
                speed_mbps: match self.tree.read_text(&join(&d, "speed")) {
                    Ok(t) => match t.parse::<i64>() {
                        Ok(v) if v >= 0 => Some(v as u64),
                        Ok(_) => None,
                        Err(_) => {
                            self.problem(
                                &join(&d, "speed"),
                                format!("expected a speed in Mb/s, found `{t}`"),
                            );
                            None
                        }
                    },
                    Err(_) => None,
                },
                operstate: self.text(&join(&d, "operstate")),
                address: self.text(&join(&d, "address")),
                pci: self.pci_of(&join(&d, "device")),
                rdma: None,
                ecn,
                name,
            };
            out.push(nd);
        }
        out
    }

    fn roce_ecn(&mut self, dir: &str) -> Option<RoceEcn> {
        let rp_dir = join(dir, "roce_rp");
        let np_dir = join(dir, "roce_np");
        if !self.tree.exists(&rp_dir) && !self.tree.exists(&np_dir) {
            return None;
        }
        let mut ecn = RoceEcn::default();
        for (side, dir) in [("rp", &rp_dir), ("np", &np_dir)] {
            for name in self.list(dir) {
                let path = join(dir, &name);
                if name == "enable" {
                    let mut en = [None; 8];
                    for (p, slot) in en.iter_mut().enumerate() {
                        *slot = self.parsed(&join(&path, &p.to_string()), "0 or 1", |t| match t {
                            "0" => Some(false),
                            "1" => Some(true),
                            _ => None,
                        });
                    }
                    if side == "rp" {
                        ecn.rp_enable = en;
                    } else {
                        ecn.np_enable = en;
                    }
                } else if let Some(v) = self.parsed(&path, "an unsigned integer", |t| t.parse::<u64>().ok()) {
                    if side == "rp" {
                        ecn.rp.insert(name, v);
                    } else {
                        ecn.np.insert(name, v);
                    }
                }
            }
        }
        Some(ecn)
    }

    fn counters(&mut self, dir: &str) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        let names = self.list_shared(dir);
        for name in names.iter() {
            let path = join(dir, name);
            let bytes = match self.read(&path) {
                Ok(b) => b,
                // A listed counter that is gone: the device changed (optional attributes
                // that are simply absent do not count).
                Err(TreeError::NotFound { .. }) => {
                    self.stale = true;
                    continue;
                }
                Err(e) => {
                    self.tree_problem(e);
                    continue;
                }
            };
            // Parsed from the bytes: a round reads about a thousand of these.
            let t = bytes.trim_ascii();
            // Old kernels print "N/A (no PMA)" for counters a RoCE port lacks: absent.
            if t.starts_with(b"N/A") {
                continue;
            }
            match std::str::from_utf8(t).ok().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) => {
                    out.insert(name.clone(), v);
                }
                None => {
                    let shown: String = String::from_utf8_lossy(t).chars().take(60).collect();
                    self.problem(
                        &path,
                        format!("expected an unsigned counter value, found `{shown}`"),
                    );
                }
            }
        }
        out
    }

    fn rdma_devices(&mut self) -> Vec<RdmaDevice> {
        let mut out = Vec::new();
        for name in self.list("sys/class/infiniband") {
            let d = join("sys/class/infiniband", &name);
            let mut dev = RdmaDevice {
                fw_ver: self.text_static(&join(&d, "fw_ver")),
                board_id: self.text_static(&join(&d, "board_id")),
                hca_type: self.text_static(&join(&d, "hca_type")),
                node_guid: if self.light {
                    None
                } else {
                    self.text(&join(&d, "node_guid"))
                },
                node_type: if self.light {
                    None
                } else {
                    self.text(&join(&d, "node_type"))
                },
                pci: self.pci_of(&join(&d, "device")),
                traffic_class: if self.light {
                    None
                } else {
                    self.parsed(
                        &join(&d, "tc/1/traffic_class"),
                        "`Global tclass=<TOS>` or a TOS value",
                        |t| t.rsplit('=').next()?.trim().parse::<u8>().ok(),
                    )
                },
                hw_counters: self.counters(&join(&d, "hw_counters")),
                name,
                ..RdmaDevice::default()
            };
            let ports_dir = join(&d, "ports");
            let mut ports: Vec<RdmaPort> = Vec::new();
            for p in self.list(&ports_dir) {
                let Ok(port) = p.parse::<u8>() else {
                    self.problem(&join(&ports_dir, &p), "expected a port number");
                    continue;
                };
                ports.push(self.rdma_port(&join(&ports_dir, &p), port));
            }
            ports.sort_by_key(|p| p.port);
            dev.ports = ports;
            out.push(dev);
        }
        out
    }

    fn rdma_port(&mut self, dir: &str, port: u8) -> RdmaPort {
        let rate_text = self.text(&join(dir, "rate"));
        let rate_gbps = match &rate_text {
            Some(t) => {
                let v = parse_rate_gbps(t);
                if v.is_none() {
                    self.problem(
                        &join(dir, "rate"),
                        format!("expected `<Gb/s> Gb/sec (...)`, found `{t}`"),
                    );
                }
                v
            }
            None => None,
        };
        let mut gids = Vec::new();
        let gid_dir = join(dir, "gids");
        let gid_entries = if self.gids {
            self.list(&gid_dir)
        } else {
            Vec::new()
        };
        for idx in gid_entries {
            let Ok(index) = idx.parse::<u16>() else { continue };
            // Unused entries read as all zeros; their attributes fail with EINVAL.
            let Ok(gid) = self.tree.read_text(&join(&gid_dir, &idx)) else {
                continue;
            };
            if gid.is_empty() || gid.chars().all(|c| c == '0' || c == ':') {
                continue;
            }
            let kind = self
                .tree
                .read_text(&join(dir, &format!("gid_attrs/types/{idx}")))
                .ok()
                .filter(|s| !s.is_empty());
            let ndev = self
                .tree
                .read_text(&join(dir, &format!("gid_attrs/ndevs/{idx}")))
                .ok()
                .filter(|s| !s.is_empty());
            gids.push(Gid {
                index,
                gid,
                kind,
                ndev,
                from_show_gids: false,
            });
        }
        gids.sort_by_key(|g| g.index);
        RdmaPort {
            port,
            state: self.coded(&join(dir, "state")),
            phys_state: self.coded(&join(dir, "phys_state")),
            rate_gbps,
            rate_text,
            link_layer: self.text_static(&join(dir, "link_layer")),
            gids,
            counters: self.counters(&join(dir, "counters")),
            hw_counters: self.counters(&join(dir, "hw_counters")),
            // node_exporter reads `counters_ext/` only beside `counters/`
            // (prometheus/procfs sysfs/class_infiniband.go); so does this.
            counters_ext: if self.tree.exists(&join(dir, "counters_ext"))
                && self.tree.exists(&join(dir, "counters"))
            {
                self.counters(&join(dir, "counters_ext"))
            } else {
                BTreeMap::new()
            },
        }
    }

    /// The interfaces with a `bonding/` directory, their members and the RDMA devices
    /// using them (docs/reference/nic-aggregation.md §1-§2).
    fn bonds(&mut self, inv: &HostInventory) -> Vec<Bond> {
        let mut out = Vec::new();
        for nd in &inv.netdevs {
            let dir = join(&join("sys/class/net", &nd.name), "bonding");
            if self.list(&dir).is_empty() {
                continue;
            }
            let at = |f: &str| join(&dir, f);
            let slaves = self.text(&at("slaves")).unwrap_or_default();
            let mut members = Vec::new();
            for name in slaves.split_whitespace() {
                if name == BOND_LIST_OVERFLOW {
                    self.problem(
                        &at("slaves"),
                        "the list overflowed the sysfs page (`++more++`): members are missing",
                    );
                    continue;
                }
                let sd = join(&join("sys/class/net", name), "bonding_slave");
                members.push(BondMember {
                    name: name.to_string(),
                    state: self.text(&join(&sd, "state")).filter(|t| !t.is_empty()),
                    mii_status: self.text(&join(&sd, "mii_status")).filter(|t| !t.is_empty()),
                    link_failure_count: self
                        .parsed(&join(&sd, "link_failure_count"), "a count", |t| t.parse().ok()),
                    pci: inv.netdev(name).and_then(|n| n.pci.clone()),
                });
            }
            let rdma_devices: Vec<String> = inv
                .rdma
                .iter()
                .filter(|d| {
                    d.ports
                        .iter()
                        .any(|p| p.gids.iter().any(|g| g.ndev.as_deref() == Some(nd.name.as_str())))
                })
                .map(|d| d.name.clone())
                .collect();
            // RoCE LAG joins the ports of one card into one device: one RDMA device uses
            // the bond, and the members are functions of one card (or the device has the
            // name mlx5 gives a LAG). One RDMA port bonded with another vendor's NIC also
            // leaves one device on the bond, and is no LAG.
            let one_card = {
                let cards: BTreeSet<&str> = members
                    .iter()
                    .filter_map(|m| m.pci.as_deref().map(crate::inventory::pci_card))
                    .collect();
                cards.len() == 1 && members.iter().all(|m| m.pci.is_some())
            };
            let roce_lag = match rdma_devices.as_slice() {
                [one] if members.len() > 1 && (one_card || one.contains(LAG_DEVICE_MARK)) => {
                    Some(one.clone())
                }
                _ => None,
            };
            let port_select_mode = members.iter().find_map(|m| {
                self.text(&format!(
                    "sys/class/net/{}/compat/devlink/lag_port_select_mode",
                    m.name
                ))
                .filter(|t| !t.is_empty())
            });
            out.push(Bond {
                name: nd.name.clone(),
                port_select_mode,
                mode: self.named_number(&at("mode")),
                xmit_hash_policy: self.named_number(&at("xmit_hash_policy")),
                miimon_ms: self.parsed(&at("miimon"), "an interval in ms", |t| t.parse().ok()),
                lacp_rate: self.named_number(&at("lacp_rate")),
                active_slave: self.text(&at("active_slave")).filter(|t| !t.is_empty()),
                mii_status: self.text(&at("mii_status")).filter(|t| !t.is_empty()),
                members,
                rdma_devices,
                roce_lag,
            });
        }
        out
    }

    /// A bonding option as sysfs prints it, `<name> <number>` (`802.3ad 4`); an empty
    /// file (the option does not apply) is `None` without a problem.
    fn named_number(&mut self, path: &str) -> Option<CodedState> {
        if self.text(path).is_some_and(|t| t.is_empty()) {
            return None;
        }
        self.parsed(path, "`<name> <number>`, e.g. `802.3ad 4`", |t| {
            let (name, n) = t.rsplit_once(' ')?;
            Some(CodedState {
                code: n.trim().parse().ok()?,
                name: name.trim().to_string(),
            })
        })
    }

    /// `/etc/nccl.conf`: `NAME=value` lines, `#` comments (NCCL's own format; the
    /// settings that merge or split NICs are docs/reference/nic-aggregation.md §3). A line
    /// of another shape is a problem with its number.
    fn nccl_conf(&mut self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(text) = self.text(NCCL_CONF) else {
            return out;
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) if is_env_name(k.trim()) => {
                    out.insert(k.trim().to_string(), v.trim().to_string());
                }
                _ => {
                    let shown: String = line.chars().take(60).collect();
                    self.problem(
                        &format!("{NCCL_CONF}: line {}", i + 1),
                        format!("expected `NAME=value`, found `{shown}`"),
                    );
                }
            }
        }
        out
    }

    fn coded(&mut self, path: &str) -> Option<CodedState> {
        self.parsed(path, "`<number>: <NAME>`", |t| {
            let (n, name) = t.split_once(':')?;
            Some(CodedState {
                code: n.trim().parse().ok()?,
                name: name.trim().to_string(),
            })
        })
    }

    fn pci_functions(&mut self, inv: &HostInventory) -> Vec<PciFunction> {
        let base = "sys/bus/pci/devices";
        let mut by_bdf: BTreeMap<String, PciFunction> = BTreeMap::new();
        let mut wanted: Vec<String> = Vec::new();
        for bdf in self.list(base) {
            let path = match self.tree.link_target(&join(base, &bdf)) {
                Ok(p) => p,
                Err(e) => {
                    self.tree_problem(e);
                    continue;
                }
            };
            let f = self.pci_function(&path);
            if matches!(f.role, PciRole::Gpu | PciRole::Nic) {
                wanted.push(f.bdf.clone());
            }
            by_bdf.insert(f.bdf.clone(), f);
        }
        // Functions reached through a netdev or RDMA device even if bus/pci is missing.
        let links: Vec<(String, String)> = inv
            .netdevs
            .iter()
            .filter_map(|n| {
                n.pci
                    .clone()
                    .map(|b| (b, format!("sys/class/net/{}/device", n.name)))
            })
            .chain(inv.rdma.iter().filter_map(|d| {
                d.pci
                    .clone()
                    .map(|b| (b, format!("sys/class/infiniband/{}/device", d.name)))
            }))
            .collect();
        for (bdf, link) in links {
            if !by_bdf.contains_key(&bdf)
                && let Ok(path) = self.tree.link_target(&link)
            {
                let f = self.pci_function(&path);
                by_bdf.insert(f.bdf.clone(), f);
            }
            if !wanted.contains(&bdf) {
                wanted.push(bdf);
            }
        }
        // Keep the NICs and GPUs and every bridge above them; other devices are noise.
        let mut keep: BTreeSet<String> = BTreeSet::new();
        for w in &wanted {
            if let Some(f) = by_bdf.get(w) {
                keep.insert(f.bdf.clone());
                keep.extend(f.upstream.iter().cloned());
            }
        }
        // Bridges above the kept functions may be missing from bus/pci/devices in a
        // partial tree; read them from their device directories.
        let mut bridge_dirs: Vec<(String, String)> = Vec::new();
        for f in by_bdf.values().filter(|f| keep.contains(&f.bdf)) {
            let mut d = format!("sys/devices/{}", f.root);
            for b in &f.upstream {
                d = join(&d, b);
                if !by_bdf.contains_key(b) {
                    bridge_dirs.push((b.clone(), d.clone()));
                }
            }
        }
        for (b, d) in bridge_dirs {
            if !by_bdf.contains_key(&b) && self.tree.exists(&d) {
                let f = self.pci_function(&d);
                by_bdf.insert(b, f);
            }
        }
        by_bdf.into_values().filter(|f| keep.contains(&f.bdf)).collect()
    }

    /// Max speed and width of the bridge above the function at `path`, when there is one.
    fn upstream_max(&mut self, path: &str) -> Option<(f64, u8)> {
        let parent = crate::tree::parent_of(path);
        if !is_bdf(base_name(parent)) {
            return None;
        }
        // A port's maximum changes only with the hardware: read once per structure.
        let speed = parse_gts(&self.text_static(&join(parent, "max_link_speed"))?)?;
        let width = self
            .text_static(&join(parent, "max_link_width"))?
            .parse::<u8>()
            .ok()?;
        Some((speed, width))
    }

    fn pci_function(&mut self, path: &str) -> PciFunction {
        let comps: Vec<&str> = path.split('/').collect();
        // sys/devices/pci0000:16/0000:16:01.0/.../<bdf>
        let root_at = comps.iter().position(|c| c.starts_with("pci") && c.contains(':'));
        let (root, upstream) = match root_at {
            Some(i) => (
                comps[i].to_string(),
                comps[i + 1..comps.len().saturating_sub(1)]
                    .iter()
                    .filter(|c| is_bdf(c))
                    .map(|c| c.to_string())
                    .collect(),
            ),
            None => (String::new(), Vec::new()),
        };
        let bdf = base_name(path).to_string();
        let hex = |t: &str| u32::from_str_radix(t.trim_start_matches("0x"), 16).ok();
        // Counter sampling reads only the link state; the rest does not change.
        let full = !self.light;
        let class = if full {
            self.parsed(&join(path, "class"), "a hex class code like 0x020000", hex)
        } else {
            None
        };
        let vendor = if full {
            self.parsed(&join(path, "vendor"), "a hex vendor id", |t| {
                hex(t).and_then(|v| u16::try_from(v).ok())
            })
        } else {
            None
        };
        let device = if full {
            self.parsed(&join(path, "device"), "a hex device id", |t| {
                hex(t).and_then(|v| u16::try_from(v).ok())
            })
        } else {
            None
        };
        let numa_node = if full {
            self.parsed(&join(path, "numa_node"), "a NUMA node number or -1", |t| {
                t.parse::<i64>().ok()
            })
            .and_then(|n| u32::try_from(n).ok())
        } else {
            None
        };
        let cur_speed = self.parsed(
            &join(path, "current_link_speed"),
            "a speed like `16.0 GT/s PCIe`",
            parse_gts,
        );
        let max_speed = self.parsed(
            &join(path, "max_link_speed"),
            "a speed like `16.0 GT/s PCIe`",
            parse_gts,
        );
        let cur_width = self.parsed(&join(path, "current_link_width"), "a lane count", |t| {
            t.parse::<u8>().ok()
        });
        let max_width = self.parsed(&join(path, "max_link_width"), "a lane count", |t| {
            t.parse::<u8>().ok()
        });
        let link = match (cur_speed, cur_width, max_speed, max_width) {
            (Some(cs), Some(cw), Some(ms), Some(mw)) => Some(PcieLinkState {
                cur_speed_gts: cs,
                cur_width: cw,
                max_speed_gts: ms,
                max_width: mw,
            }),
            _ => None,
        };
        let sriov = match if !full {
            (None, None)
        } else {
            (
                self.parsed(&join(path, "sriov_totalvfs"), "a VF count", |t| {
                    t.parse::<u32>().ok()
                }),
                self.parsed(&join(path, "sriov_numvfs"), "a VF count", |t| {
                    t.parse::<u32>().ok()
                }),
            )
        } {
            (Some(t), Some(n)) => Some((t, n)),
            _ => None,
        };
        let mut aer = Aer::default();
        let mut any_aer = false;
        for (f, map) in [
            ("aer_dev_correctable", &mut aer.correctable),
            ("aer_dev_nonfatal", &mut aer.nonfatal),
            ("aer_dev_fatal", &mut aer.fatal),
        ] {
            if !full {
                break;
            }
            let path = join(path, f);
            if let Some(t) = self.text(&path) {
                any_aer = true;
                match parse_aer(&t) {
                    Some(m) => *map = m,
                    None => self.problem(&path, "expected lines of `<name> <count>`"),
                }
            }
        }
        PciFunction {
            role: role_of(class, vendor),
            bdf,
            class,
            vendor,
            device,
            numa_node,
            local_cpulist: if full {
                self.text(&join(path, "local_cpulist"))
            } else {
                None
            },
            link,
            root,
            upstream,
            sriov,
            aer: any_aer.then_some(aer),
        }
    }

    fn tools(&mut self) -> ToolOutputs {
        let mut tools = ToolOutputs::default();
        if let Ok(bytes) = self.tree.read(MANIFEST) {
            match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) => {
                    tools.missing = m
                        .commands
                        .iter()
                        .filter(|c| c.status != "ok")
                        .map(|c| (c.name.clone(), c.status.clone()))
                        .collect();
                }
                Err(e) => self.problem(MANIFEST, format!("expected the snapshot manifest (JSON): {e}")),
            }
        }
        for file in self.list(COMMANDS_DIR) {
            let path = join(COMMANDS_DIR, &file);
            let Some(text) = self.text_lossy(&path) else {
                continue;
            };
            let Some(stem) = file.strip_suffix(".txt") else {
                continue;
            };
            let res: Result<(), parse::ParseError> = (|| {
                if let Some(ifname) = stem.strip_prefix("ethtool-S-") {
                    tools
                        .ethtool
                        .insert(ifname.to_string(), parse::ethtool::parse(&text)?);
                } else if let Some(ifname) = stem.strip_prefix("mlnx_qos-i-") {
                    tools
                        .mlnx_qos
                        .insert(ifname.to_string(), parse::mlnx_qos::parse(&text)?);
                } else if stem == "ibv_devinfo-v" {
                    tools.ibv_devinfo = Some(parse::ibv_devinfo::parse(&text)?);
                } else if stem == "nvidia-smi-topo-m" {
                    tools.nvidia_topo = Some(parse::nvidia_topo::parse(&text)?);
                } else if stem == "lspci-vvv" {
                    tools.lspci = Some(parse::lspci::parse_vvv(&text)?);
                } else if stem == "show_gids" {
                    tools.show_gids = Some(parse::show_gids::parse(&text)?);
                } else if stem == "iblinkinfo" {
                    tools.iblinkinfo = Some(parse::iblinkinfo::parse(&text)?);
                }
                Ok(())
            })();
            if let Err(e) = res {
                self.problem(&path, e.to_string());
            }
        }
        tools
    }

    fn text_lossy(&mut self, path: &str) -> Option<String> {
        match self.tree.read(path) {
            Ok(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Err(e) => {
                self.tree_problem(e);
                None
            }
        }
    }
}

fn role_of(class: Option<u32>, vendor: Option<u16>) -> PciRole {
    let Some(class) = class else { return PciRole::Other };
    let sub = class >> 8;
    if sub == CLASS_BRIDGE_PCI {
        PciRole::Bridge
    } else if class >> 16 == CLASS_NET_BASE {
        PciRole::Nic
    } else if matches!(sub, CLASS_VGA | CLASS_3D | CLASS_DISPLAY_OTHER)
        && matches!(vendor, Some(VENDOR_NVIDIA | VENDOR_AMD))
    {
        PciRole::Gpu
    } else {
        PciRole::Other
    }
}

/// True for `dddd:bb:dd.f`.
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The first number of an IB `rate` file, in Gbit/s (`100 Gb/sec (4X EDR)` → 100;
/// `0 GB/sec` → 0), as prometheus/procfs parses it.
pub fn parse_rate_gbps(text: &str) -> Option<f64> {
    let first = text.split_whitespace().next()?;
    let v: f64 = first.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// A PCIe speed: `16.0 GT/s PCIe`, or `16 GT/s` from kernels up to 5.6
/// (docs/reference/linux-rdma-sysfs.md §3). `Unknown` (a link that is down) is `None`.
pub fn parse_gts(text: &str) -> Option<f64> {
    let (num, _) = text.split_once("GT/s")?;
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// An `aer_dev_*` file: lines of `<name> <count>`.
fn parse_aer(text: &str) -> Option<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.split_whitespace();
        let (Some(name), Some(v), None) = (it.next(), it.next(), it.next()) else {
            return None;
        };
        out.insert(name.to_string(), v.parse().ok()?);
    }
    Some(out)
}

/// An environment variable's name as a shell takes it: a letter or `_`, then letters,
/// digits and `_`.
fn is_env_name(k: &str) -> bool {
    let mut c = k.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}
