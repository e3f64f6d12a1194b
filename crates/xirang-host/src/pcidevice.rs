//! Every PCI function under `/sys/bus/pci/devices`, read as node_exporter's `pcidevice`
//! collector reads it (its reader is prometheus/procfs `sysfs/pci_device.go`; facts in
//! docs/node-exporter-parity.md): the function's address, its parent's (the directory
//! above it, unless that is a root complex), identity, link, NUMA node, SR-IOV and power
//! attributes. Unlike [`crate::sysfs`], which keeps the NICs, GPUs and the bridges above
//! them, this keeps every function: a downgraded link behind a bridge is found wherever
//! it is.

use serde::Serialize;

use crate::inventory::ReadProblem;
use crate::sysfs::{is_bdf, parse_gts};
use crate::tree::{Tree, TreeError, base_name, join, parent_of};

/// Where the kernel lists PCI functions.
pub const DEVICES_DIR: &str = "sys/bus/pci/devices";

/// A PCI address, `SSSS:BB:DD.F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Location {
    /// Segment (domain).
    pub segment: u32,
    /// Bus.
    pub bus: u32,
    /// Device.
    pub device: u32,
    /// Function.
    pub function: u32,
}

impl Location {
    /// Parses `0000:01:00.0` (hexadecimal fields).
    pub fn parse(s: &str) -> Option<Location> {
        if !is_bdf(s) {
            return None;
        }
        let hex = |a: usize, b: usize| u32::from_str_radix(&s[a..b], 16).ok();
        Some(Location {
            segment: hex(0, 4)?,
            bus: hex(5, 7)?,
            device: hex(8, 10)?,
            function: hex(11, 12)?,
        })
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.segment, self.bus, self.device, self.function
        )
    }
}

/// One PCI function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    /// Its address.
    pub location: Location,
    /// The bridge above it; `None` directly under a root complex.
    pub parent: Option<Location>,
    /// Its directory in the tree (resolved).
    pub dir: String,
    /// `class` (24 bits: base class, subclass, programming interface).
    pub class: u32,
    /// `vendor`.
    pub vendor: u32,
    /// `device`.
    pub device: u32,
    /// `subsystem_vendor`.
    pub subsystem_vendor: u32,
    /// `subsystem_device`.
    pub subsystem_device: u32,
    /// `revision`.
    pub revision: u32,
    /// `max_link_speed`, GT/s.
    pub max_link_speed_gts: Option<f64>,
    /// `max_link_width`, lanes.
    pub max_link_width: Option<u32>,
    /// `current_link_speed`, GT/s.
    pub current_link_speed_gts: Option<f64>,
    /// `current_link_width`, lanes.
    pub current_link_width: Option<u32>,
    /// `numa_node` (-1: none).
    pub numa_node: Option<i32>,
    /// `d3cold_allowed`.
    pub d3cold_allowed: Option<bool>,
    /// `power_state` as the kernel prints it (`D0`, `D3hot`, ...).
    pub power_state: Option<String>,
    /// `sriov_drivers_autoprobe`.
    pub sriov_drivers_autoprobe: Option<bool>,
    /// `sriov_numvfs`.
    pub sriov_numvfs: Option<u64>,
    /// `sriov_totalvfs`.
    pub sriov_totalvfs: Option<u64>,
    /// `sriov_vf_total_msix`.
    pub sriov_vf_total_msix: Option<u64>,
}

/// The maxima of the bridge above a function, read from its directory (it need not be
/// listed in `bus/pci/devices` itself).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UpstreamMax {
    /// `max_link_speed`, GT/s.
    pub speed_gts: Option<f64>,
    /// `max_link_width`, lanes.
    pub width: Option<u32>,
}

/// Every function under [`DEVICES_DIR`], sorted by address, and what could not be read. A
/// tree without the directory has no functions and no problem.
pub fn read(tree: &dyn Tree) -> (Vec<Device>, Vec<ReadProblem>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let names = match tree.list(DEVICES_DIR) {
        Ok(n) => n,
        Err(TreeError::NotFound { .. }) => return (out, problems),
        Err(e) => {
            problems.push(ReadProblem {
                path: DEVICES_DIR.into(),
                message: e.to_string(),
            });
            return (out, problems);
        }
    };
    for name in names {
        let link = join(DEVICES_DIR, &name);
        match one(tree, &link) {
            Ok(d) => out.push(d),
            Err(p) => problems.push(p),
        }
    }
    out.sort_by_key(|d| d.location);
    (out, problems)
}

fn one(tree: &dyn Tree, link: &str) -> Result<Device, ReadProblem> {
    let bad = |path: &str, message: String| ReadProblem {
        path: path.to_string(),
        message,
    };
    let dir = tree
        .link_target(link)
        .map_err(|e| bad(link, format!("expected a link to the function's directory: {e}")))?;
    let location = Location::parse(base_name(&dir)).ok_or_else(|| {
        bad(
            link,
            format!("expected a link to a `SSSS:BB:DD.F` directory, found {dir}"),
        )
    })?;
    // The directory above: a bridge's address, or a root complex (`pci0000:00`).
    let up = base_name(parent_of(&dir));
    let parent = if up.starts_with("pci") {
        None
    } else {
        Some(Location::parse(up).ok_or_else(|| {
            bad(
                link,
                format!("expected the parent directory to be a PCI address or a root complex, found {up}"),
            )
        })?)
    };
    let text =
        |file: &str| -> Option<String> { tree.read_text(&join(&dir, file)).ok().filter(|t| !t.is_empty()) };
    // Identity is required, as node_exporter requires it.
    let id = |file: &str| -> Result<u32, ReadProblem> {
        let path = join(&dir, file);
        let t = tree
            .read_text(&path)
            .map_err(|e| bad(&path, format!("expected a hexadecimal id: {e}")))?;
        u32::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| {
            bad(
                &path,
                format!("expected a hexadecimal id like 0x15b3, found {t:?}"),
            )
        })
    };
    // Link attributes read `Unknown` on a link that is down: absent, as for node_exporter.
    let speed = |file: &str| {
        text(file)
            .filter(|t| !t.starts_with("Unknown"))
            .and_then(|t| parse_gts(&t))
    };
    let width = |file: &str| text(file).and_then(|t| t.parse::<u32>().ok());
    let flag = |file: &str| text(file).and_then(|t| t.parse::<i64>().ok()).map(|v| v != 0);
    let count = |file: &str| text(file).and_then(|t| t.parse::<u64>().ok());
    Ok(Device {
        location,
        parent,
        class: id("class")?,
        vendor: id("vendor")?,
        device: id("device")?,
        subsystem_vendor: id("subsystem_vendor")?,
        subsystem_device: id("subsystem_device")?,
        revision: id("revision")?,
        max_link_speed_gts: speed("max_link_speed"),
        max_link_width: width("max_link_width"),
        current_link_speed_gts: speed("current_link_speed"),
        current_link_width: width("current_link_width"),
        numa_node: text("numa_node").and_then(|t| t.parse().ok()),
        d3cold_allowed: flag("d3cold_allowed"),
        power_state: text("power_state"),
        sriov_drivers_autoprobe: flag("sriov_drivers_autoprobe"),
        sriov_numvfs: count("sriov_numvfs"),
        sriov_totalvfs: count("sriov_totalvfs"),
        sriov_vf_total_msix: count("sriov_vf_total_msix"),
        dir,
    })
}

/// The maxima of the port above `d`, from its directory.
pub fn upstream_max(tree: &dyn Tree, d: &Device) -> Option<UpstreamMax> {
    d.parent?;
    let up = parent_of(&d.dir);
    let text = |file: &str| tree.read_text(&join(up, file)).ok();
    Some(UpstreamMax {
        speed_gts: text("max_link_speed").and_then(|t| parse_gts(&t)),
        width: text("max_link_width").and_then(|t| t.parse().ok()),
    })
}

/// The link of `d` trained below what both its ends allow (speed or width): the
/// function's maxima and its upstream port's, as NCCL judges a link
/// (docs/reference/linux-rdma-sysfs.md §3). `None` when the link attributes are absent, and for a
/// function directly under a root complex: that is a root port, whose link attributes
/// describe the link below it, judged at the function there.
pub fn downgraded(d: &Device, up: Option<UpstreamMax>) -> Option<bool> {
    d.parent?;
    let (cs, cw) = (d.current_link_speed_gts?, d.current_link_width?);
    let (ms, mw) = (d.max_link_speed_gts?, d.max_link_width?);
    let us = up.and_then(|u| u.speed_gts).unwrap_or(ms);
    let uw = up.and_then(|u| u.width).unwrap_or(mw);
    Some(cs < ms.min(us) || cw < mw.min(uw))
}
