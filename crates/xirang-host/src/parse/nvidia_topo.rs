//! `nvidia-smi topo -m`: the GPU/NIC connection matrix, per-GPU CPU/NUMA affinity and the
//! `NIC Legend:` that maps `NIC0` to the RDMA device name (`mlx5_0`).
//!
//! Cells are read as whitespace-separated tokens rather than tab-separated ones: pasted output
//! has its tabs expanded, and even on a terminal nvidia-smi pads with several tabs in a row, so
//! tab positions carry no information. The affinity columns are recognised by their header
//! words, because their number differs between driver versions (none, `CPU Affinity` only, or
//! `CPU Affinity`, `NUMA Affinity` and `GPU NUMA ID`).

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT: &str = "nvidia-smi topo -m";

const CONN_CODES: &str = "a connection code (X, NV#, PIX, PXB, PHB, NODE, SYS)";

/// How two devices of the matrix are connected, nearest first (legend codes of `topo -m`).
///
/// The order (`Ord`) is the distance ladder NV# < PIX < PXB < PHB < NODE < SYS, with `X` before
/// everything; among NVLink connections more bonded links sort as nearer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub enum Conn {
    /// `X`: the device itself.
    SelfLink,
    /// `NV#`: a bonded set of # NVLinks.
    NvLink(u8),
    /// `PIX`: at most one PCIe bridge.
    Pix,
    /// `PXB`: several PCIe bridges, without the host bridge.
    Pxb,
    /// `PHB`: through a PCIe host bridge (typically the CPU).
    Phb,
    /// `NODE`: between host bridges within one NUMA node.
    Node,
    /// `SYS` (`SOC` in old drivers): across the SMP interconnect between NUMA nodes.
    Sys,
}

impl Conn {
    /// The code as nvidia-smi prints it: `X`, `NV18`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`.
    pub fn code(&self) -> String {
        match self {
            Conn::SelfLink => "X".to_string(),
            Conn::NvLink(n) => format!("NV{n}"),
            Conn::Pix => "PIX".to_string(),
            Conn::Pxb => "PXB".to_string(),
            Conn::Phb => "PHB".to_string(),
            Conn::Node => "NODE".to_string(),
            Conn::Sys => "SYS".to_string(),
        }
    }

    /// Position on the distance ladder: 0 self, 1 NVLink, 2 PIX, 3 PXB, 4 PHB, 5 NODE, 6 SYS.
    pub fn rank(&self) -> u8 {
        match self {
            Conn::SelfLink => 0,
            Conn::NvLink(_) => 1,
            Conn::Pix => 2,
            Conn::Pxb => 3,
            Conn::Phb => 4,
            Conn::Node => 5,
            Conn::Sys => 6,
        }
    }

    /// Reads one matrix cell; `None` if it is not a known code.
    pub fn from_code(code: &str) -> Option<Conn> {
        Some(match code {
            "X" => Conn::SelfLink,
            "PIX" => Conn::Pix,
            "PXB" => Conn::Pxb,
            "PHB" => Conn::Phb,
            "NODE" => Conn::Node,
            // Drivers before NODE existed called the cross-socket path SOC.
            "SYS" | "SOC" => Conn::Sys,
            _ => {
                let n = code.strip_prefix("NV")?;
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Conn::NvLink(n.parse().ok()?)
            }
        })
    }
}

impl Ord for Conn {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            // More bonded NVLinks means more bandwidth, so it counts as nearer.
            (Conn::NvLink(a), Conn::NvLink(b)) => b.cmp(a),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Conn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.code())
    }
}

impl From<Conn> for String {
    fn from(c: Conn) -> String {
        c.code()
    }
}

/// Whether a matrix row/column is a GPU or a NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DeviceKind {
    /// `GPU<n>`.
    Gpu,
    /// Anything else: `NIC<n>`, or an RDMA device name (`mlx5_0`) in older drivers.
    Nic,
}

/// One row/column of the matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoDevice {
    /// Name as printed in the header: `GPU0`, `NIC3`, or `mlx5_0` in older drivers.
    pub name: String,
    /// GPU or NIC.
    pub kind: DeviceKind,
    /// `CPU Affinity` cell (`0-47,96-143`); `None` if absent, empty or `N/A` (NIC rows).
    pub cpu_affinity: Option<String>,
    /// `NUMA Affinity` cell (`0`); `None` if absent, empty or `N/A`.
    pub numa_affinity: Option<String>,
    /// `GPU NUMA ID` cell; `None` if absent, empty or `N/A` (the usual value off Grace systems).
    pub gpu_numa_id: Option<String>,
}

/// A parsed `nvidia-smi topo -m`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopoMatrix {
    /// Devices in header order.
    pub devices: Vec<TopoDevice>,
    /// Square: `conn[i][j]` is how `devices[i]` reaches `devices[j]`.
    pub conn: Vec<Vec<Conn>>,
    /// `NIC Legend:` entries in order, e.g. (`NIC0`, `mlx5_0`); empty if there is none.
    pub nic_names: Vec<(String, String)>,
}

impl TopoMatrix {
    /// Index of a device named as in the header, or by the RDMA name the NIC legend gives it.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        if let Some(i) = self.devices.iter().position(|d| d.name == name) {
            return Some(i);
        }
        let (alias, _) = self.nic_names.iter().find(|(_, real)| real == name)?;
        self.devices.iter().position(|d| d.name == *alias)
    }

    /// Connection from `a` to `b`; each is `GPU0`/`NIC0` or a NIC's legend name (`mlx5_0`).
    pub fn between(&self, a: &str, b: &str) -> Option<&Conn> {
        let i = self.index_of(a)?;
        let j = self.index_of(b)?;
        self.conn.get(i)?.get(j)
    }

    /// The NIC nearest to `gpu` (lowest [`Conn`]; the first in header order on a tie), by its
    /// header name (`NIC0`, or `mlx5_0` in older drivers; see [`TopoMatrix::nic_name`]).
    pub fn nearest_nic(&self, gpu: &str) -> Option<(&str, &Conn)> {
        let i = self.index_of(gpu)?;
        let row = self.conn.get(i)?;
        self.devices
            .iter()
            .zip(row)
            .enumerate()
            .filter(|(j, (d, _))| *j != i && d.kind == DeviceKind::Nic)
            .min_by(|(_, (_, x)), (_, (_, y))| x.cmp(y))
            .map(|(_, (d, c))| (d.name.as_str(), c))
    }

    /// The RDMA device name of a header name (`NIC0` -> `mlx5_0`), or `name` itself when the
    /// legend does not list it (older drivers print `mlx5_0` in the header already).
    pub fn nic_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.nic_names
            .iter()
            .find(|(alias, _)| alias == name)
            .map_or(name, |(_, real)| real.as_str())
    }
}

/// The columns to the right of the device columns, in the order printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extra {
    CpuAffinity,
    NumaAffinity,
    GpuNumaId,
}

fn kind_of(name: &str) -> DeviceKind {
    match name.strip_prefix("GPU") {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => DeviceKind::Gpu,
        _ => DeviceKind::Nic,
    }
}

/// Splits the header (a line whose first word is `GPU<n>`) into device names and affinity columns.
fn parse_header(no: usize, line: &str) -> Result<(Vec<String>, Vec<Extra>), ParseError> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    let mut devices = Vec::new();
    let mut extras = Vec::new();
    let mut k = 0;
    while let Some(&t) = toks.get(k) {
        let next = |n: usize| toks.get(k + n).copied();
        let (extra, width) = match (t, next(1), next(2)) {
            ("CPU", Some("Affinity"), _) => (Some(Extra::CpuAffinity), 2),
            ("NUMA", Some("Affinity"), _) => (Some(Extra::NumaAffinity), 2),
            ("GPU", Some("NUMA"), Some("ID")) => (Some(Extra::GpuNumaId), 3),
            _ => (None, 1),
        };
        match extra {
            Some(e) => extras.push(e),
            None if extras.is_empty() => devices.push(t.to_string()),
            None => {
                return Err(ParseError::new(
                    FORMAT,
                    no,
                    "only affinity columns (CPU Affinity, NUMA Affinity, GPU NUMA ID) after the device columns",
                    t,
                ));
            }
        }
        k += width;
    }
    for (k, d) in devices.iter().enumerate() {
        if devices.get(..k).is_some_and(|before| before.contains(d)) {
            return Err(ParseError::new(FORMAT, no, "distinct device column names", d));
        }
    }
    Ok((devices, extras))
}

fn cell(v: Option<&str>) -> Option<String> {
    v.filter(|s| !s.is_empty() && *s != "N/A").map(str::to_string)
}

/// Parses the whole output of `nvidia-smi topo -m` (the legend is skipped, except for the
/// `NIC Legend:` lines). Lines before the header (a shell prompt, `NVIDIA Topology:` from
/// `sglang.check_env`) are skipped.
pub fn parse(text: &str) -> Result<TopoMatrix, ParseError> {
    const HEADER: &str = "a header row of device columns starting with GPU0";
    let mut it = lines(text).filter(|(_, l)| !l.trim().is_empty()).peekable();
    let first = it.peek().copied();
    let is_header = |l: &str| l.split_whitespace().next().map(kind_of) == Some(DeviceKind::Gpu);
    let Some((hno, header)) = it.find(|(_, l)| is_header(l)) else {
        // Point at the first text there is: a header that is missing is usually one that was
        // mangled or cut off in the paste.
        return Err(match first {
            Some((no, l)) => ParseError::new(FORMAT, no, HEADER, l.trim()),
            None => ParseError::new(FORMAT, 0, HEADER, ""),
        });
    };
    let (names, extras) = parse_header(hno, header)?;
    let n = names.len();

    let mut devices = Vec::with_capacity(n);
    let mut conn = Vec::with_capacity(n);
    let mut last_no = hno;
    for (i, name) in names.iter().enumerate() {
        let expected_row = || format!("the matrix row for {name}");
        let Some((no, line)) = it.next() else {
            return Err(ParseError::new(FORMAT, last_no + 1, expected_row(), ""));
        };
        last_no = no;
        let mut toks = line.split_whitespace();
        if toks.next() != Some(name.as_str()) {
            return Err(ParseError::new(FORMAT, no, expected_row(), line.trim()));
        }
        let mut row = Vec::with_capacity(n);
        for j in 0..n {
            let Some(t) = toks.next() else {
                return Err(ParseError::new(
                    FORMAT,
                    no,
                    format!("{n} connection cells in the row for {name}, found only {j}"),
                    line.trim(),
                ));
            };
            let c = Conn::from_code(t).ok_or_else(|| ParseError::new(FORMAT, no, CONN_CODES, t))?;
            if (c == Conn::SelfLink) != (i == j) {
                let what = if i == j {
                    format!("X on the diagonal (column {name})")
                } else {
                    format!(
                        "X only on the diagonal, not in column {}",
                        names.get(j).map_or("?", |s| s)
                    )
                };
                return Err(ParseError::new(FORMAT, no, what, t));
            }
            row.push(c);
        }
        let rest: Vec<&str> = toks.collect();
        if rest.len() > extras.len() {
            return Err(ParseError::new(
                FORMAT,
                no,
                format!(
                    "at most {} affinity cells after the connection cells",
                    extras.len()
                ),
                &rest.join(" "),
            ));
        }
        let mut dev = TopoDevice {
            name: name.clone(),
            kind: kind_of(name),
            cpu_affinity: None,
            numa_affinity: None,
            gpu_numa_id: None,
        };
        for (e, v) in extras.iter().zip(rest) {
            let slot = match e {
                Extra::CpuAffinity => &mut dev.cpu_affinity,
                Extra::NumaAffinity => &mut dev.numa_affinity,
                Extra::GpuNumaId => &mut dev.gpu_numa_id,
            };
            *slot = cell(Some(v));
        }
        devices.push(dev);
        conn.push(row);
    }

    let nic_names = parse_nic_legend(it)?;
    Ok(TopoMatrix {
        devices,
        conn,
        nic_names,
    })
}

/// Reads the `NIC Legend:` block from what follows the matrix, skipping everything else
/// (the code legend, and whatever a paste carries after the output).
fn parse_nic_legend<'a>(
    rest: impl Iterator<Item = (usize, &'a str)>,
) -> Result<Vec<(String, String)>, ParseError> {
    let mut names = Vec::new();
    let mut in_legend = false;
    for (no, line) in rest {
        let t = line.trim();
        if t == "NIC Legend:" {
            in_legend = true;
            continue;
        }
        if !in_legend {
            continue;
        }
        let entry = t.split_once(':').filter(|(k, _)| {
            k.strip_prefix("NIC")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        let Some((alias, real)) = entry else {
            // The legend is the last block nvidia-smi prints; anything else is the paste's.
            in_legend = false;
            continue;
        };
        let real = real.trim();
        if real.is_empty() || real.split_whitespace().nth(1).is_some() {
            return Err(ParseError::new(
                FORMAT,
                no,
                "a NIC legend entry like `NIC0: mlx5_0`",
                t,
            ));
        }
        names.push((alias.to_string(), real.to_string()));
    }
    Ok(names)
}
