//! `lspci -vvv` (PCIe link capability/status, NUMA node, driver, ACS control of each device)
//! and `lspci -tv` (the bridge/switch tree, to tell which switch a GPU and a NIC share).

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT_VVV: &str = "lspci -vvv";
const FORMAT_TREE: &str = "lspci -tv";

/// A PCIe link as `LnkCap:` or `LnkSta:` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcieLinkInfo {
    /// Transfer rate per lane in GT/s (2.5, 5, 8, 16, 32, 64); 0.0 when lspci prints `unknown`
    /// (a link that is down).
    pub speed_gts: f64,
    /// Lanes (`x16` -> 16).
    pub width: u8,
    /// lspci marked the speed or the width `(downgraded)` (only in `LnkSta:`).
    pub downgraded_note: bool,
}

/// One device of `lspci -vvv`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PciDevice {
    /// `domain:bus:device.function`, lower case, domain added if lspci left it out (`0000:21:00.0`).
    pub bdf: String,
    /// Class as printed (`Ethernet controller`; with `-nn` it keeps its `[0200]`).
    pub class_desc: String,
    /// Vendor and device text after the class.
    pub description: String,
    /// `LnkCap:` (what the device supports).
    pub lnk_cap: Option<PcieLinkInfo>,
    /// `LnkSta:` (what the link trained to).
    pub lnk_sta: Option<PcieLinkInfo>,
    /// `LnkCtl2: Target Link Speed` in GT/s: GPUs train down to 2.5 GT/s when idle while the
    /// target stays at full speed, which tells power saving apart from a bad slot or riser.
    pub lnk_ctl2_target_gts: Option<f64>,
    /// `NUMA node:`.
    pub numa_node: Option<i32>,
    /// `Physical Slot:`.
    pub physical_slot: Option<String>,
    /// `Kernel driver in use:`.
    pub driver: Option<String>,
    /// `ACSCtl:` flags as printed (`SrcValid- TransBlk- ...`); GPUDirect P2P wants all `-`.
    pub acs_ctl: Option<String>,
}

impl PciDevice {
    /// The link runs below its capability: `LnkSta` speed or width below `LnkCap`. Without a
    /// `LnkCap` line, lspci's own `(downgraded)` note decides.
    ///
    /// NVIDIA GPUs drop to 2.5 GT/s when idle; compare with
    /// [`lnk_ctl2_target_gts`](PciDevice::lnk_ctl2_target_gts) or re-check under load before
    /// calling it a fault.
    pub fn is_downgraded(&self) -> bool {
        match (&self.lnk_cap, &self.lnk_sta) {
            (Some(cap), Some(sta)) => sta.speed_gts < cap.speed_gts || sta.width < cap.width,
            (None, Some(sta)) => sta.downgraded_note,
            _ => false,
        }
    }
}

/// Normalises `21:00.0` or `0000:21:00.0` to `0000:21:00.0`; `None` if it is not an address.
fn normalize_bdf(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [bus, devfn] => ("0", *bus, *devfn),
        [domain, bus, devfn] => (*domain, *bus, *devfn),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let hex = |t: &str, max_len: usize| {
        (!t.is_empty() && t.len() <= max_len && t.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(t, 16).ok())
            .flatten()
    };
    let domain = hex(domain, 8)?;
    let bus = hex(bus, 2)?;
    let dev = hex(dev, 2)?;
    let func = hex(func, 1)?;
    if dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// A first token that is meant as an address (so a malformed one is an error, while prompts
/// and warnings around the output are skipped).
fn looks_like_bdf(tok: &str) -> bool {
    tok.contains(':')
        && tok.contains('.')
        && tok
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

/// Reads `2.5GT/s`, `16GT/s`, `8 GT/s`, `unknown`; GT/s number before the unit.
fn parse_speed(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.starts_with("unknown") {
        return Some(0.0);
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let unit = unit.trim_start();
    if !(unit.starts_with("GT/s") || unit.starts_with("Gb/s")) {
        return None;
    }
    num.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Parses the first line of `LnkCap:`/`LnkSta:` (`Port #0, Speed 32GT/s, Width x16, ...`).
fn parse_link(no: usize, key: &str, value: &str) -> Result<PcieLinkInfo, ParseError> {
    let mut speed = None;
    let mut width = None;
    let mut note = false;
    for part in value.split(',') {
        let part = part.trim();
        if part.contains("(downgraded)") {
            note = true;
        }
        if let Some(v) = part.strip_prefix("Speed ") {
            speed =
                Some(parse_speed(v).ok_or_else(|| {
                    ParseError::new(FORMAT_VVV, no, format!("{key} `Speed <n>GT/s`"), part)
                })?);
        } else if let Some(v) = part.strip_prefix("Width ") {
            let digits = v.trim().strip_prefix('x').map(|d| {
                let end = d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len());
                d.split_at(end).0
            });
            width = Some(digits.and_then(|d| d.parse::<u8>().ok()).ok_or_else(|| {
                ParseError::new(
                    FORMAT_VVV,
                    no,
                    format!("{key} `Width x<lanes>` (lanes 0-255)"),
                    part,
                )
            })?);
        }
    }
    match (speed, width) {
        (Some(speed_gts), Some(width)) => Ok(PcieLinkInfo {
            speed_gts,
            width,
            downgraded_note: note,
        }),
        (None, _) => Err(ParseError::new(
            FORMAT_VVV,
            no,
            format!("{key} with `Speed <n>GT/s`"),
            value,
        )),
        (_, None) => Err(ParseError::new(
            FORMAT_VVV,
            no,
            format!("{key} with `Width x<lanes>`"),
            value,
        )),
    }
}

/// Parses `lspci -vvv` (also `-v`, `-vv`, `-s`, `-D`, `-nn`): one entry per device header line.
///
/// Unindented lines that do not start with an address (shell prompts, warnings) are skipped, as
/// are indented lines before the first device, so `lspci -vvv | grep ...` output parses to no
/// devices rather than failing; see [`acs_ctl_values`] for that case.
pub fn parse_vvv(text: &str) -> Result<Vec<PciDevice>, ParseError> {
    let mut devices: Vec<PciDevice> = Vec::new();
    for (no, line) in lines(text) {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(|c: char| c.is_whitespace()) {
            let (tok, rest) = line.split_once(' ').unwrap_or((line, ""));
            if !looks_like_bdf(tok) {
                continue;
            }
            let bdf = normalize_bdf(tok).ok_or_else(|| {
                ParseError::new(
                    FORMAT_VVV,
                    no,
                    "a device address like 21:00.0 or 0000:21:00.0",
                    tok,
                )
            })?;
            let (class_desc, description) = rest
                .split_once(": ")
                .ok_or_else(|| ParseError::new(FORMAT_VVV, no, "`<address> <class>: <description>`", line))?;
            devices.push(PciDevice {
                bdf,
                class_desc: class_desc.trim().to_string(),
                description: description.trim().to_string(),
                lnk_cap: None,
                lnk_sta: None,
                lnk_ctl2_target_gts: None,
                numa_node: None,
                physical_slot: None,
                driver: None,
                acs_ctl: None,
            });
            continue;
        }
        let Some(dev) = devices.last_mut() else {
            continue;
        };
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            // The first occurrence wins: a device has one Express capability, and later lines
            // with the same key could only come from a vendor-specific dump.
            "LnkCap" if dev.lnk_cap.is_none() => dev.lnk_cap = Some(parse_link(no, key, value)?),
            "LnkSta" if dev.lnk_sta.is_none() => dev.lnk_sta = Some(parse_link(no, key, value)?),
            "LnkCtl2" if dev.lnk_ctl2_target_gts.is_none() => {
                if let Some(v) = value
                    .split(',')
                    .find_map(|p| p.trim().strip_prefix("Target Link Speed:"))
                {
                    dev.lnk_ctl2_target_gts = Some(parse_speed(v).ok_or_else(|| {
                        ParseError::new(FORMAT_VVV, no, "LnkCtl2 `Target Link Speed: <n>GT/s`", value)
                    })?);
                }
            }
            "NUMA node" => {
                dev.numa_node = Some(value.parse().map_err(|_| {
                    ParseError::new(FORMAT_VVV, no, "a NUMA node number after `NUMA node:`", value)
                })?);
            }
            "Physical Slot" => dev.physical_slot = Some(value.to_string()),
            "Kernel driver in use" => dev.driver = Some(value.to_string()),
            "ACSCtl" if dev.acs_ctl.is_none() => dev.acs_ctl = Some(value.to_string()),
            _ => {}
        }
    }
    Ok(devices)
}

/// Every `ACSCtl:` value in `text`, in order, whether or not a device header precedes it:
/// enough to check `lspci -vvv | grep ACSCtl` output for any enabled (`+`) ACS feature.
pub fn acs_ctl_values(text: &str) -> Vec<String> {
    lines(text)
        .filter_map(|(_, l)| l.trim().strip_prefix("ACSCtl:"))
        .map(|v| v.trim().to_string())
        .collect()
}

/// A node of `lspci -tv`: a root bus (`[0000:60]`) or a device; a bridge's children are the
/// devices on its secondary bus.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PciTreeNode {
    /// The node as printed without the tree drawing: `[0000:60]` for a bus, `00.0` for a
    /// device, `01.1-[61-73]` for a bridge.
    pub bdf_suffix: String,
    /// Full `domain:bus:device.function` of a device; `None` for a bus node.
    pub bdf: Option<String>,
    /// A bridge's secondary and subordinate bus numbers (`[61-73]` -> (0x61, 0x73);
    /// `[01]` -> (1, 1)).
    pub bus_range: Option<(u8, u8)>,
    /// Vendor and device text (`-v`); empty for bridges, bus nodes and plain `-t`.
    pub description: String,
    /// Devices below (a bus's devices, a bridge's secondary bus), or buses under a host.
    pub children: Vec<PciTreeNode>,
}

/// A device of the tree with the bridges above it, root first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PciTreeEntry {
    /// `0000:71:00.0`.
    pub bdf: String,
    /// As in [`PciTreeNode::description`].
    pub description: String,
    /// Bridges (root port, switch ports) from the root bus down to the device's parent.
    pub ancestors: Vec<String>,
}

impl PciTreeNode {
    /// The devices of this subtree (this node too if it is one), each with its bridge chain,
    /// in printed order; `above` is the chain above this node.
    fn collect(&self, above: &mut Vec<String>, out: &mut Vec<PciTreeEntry>) {
        if let Some(bdf) = &self.bdf {
            out.push(PciTreeEntry {
                bdf: bdf.clone(),
                description: self.description.clone(),
                ancestors: above.clone(),
            });
            above.push(bdf.clone());
        }
        for c in &self.children {
            c.collect(above, out);
        }
        if self.bdf.is_some() {
            above.pop();
        }
    }
}

/// Every device of a parsed tree, in printed order, with its chain of bridges.
pub fn tree_entries(roots: &[PciTreeNode]) -> Vec<PciTreeEntry> {
    let mut out = Vec::new();
    let mut above = Vec::new();
    for r in roots {
        r.collect(&mut above, &mut out);
    }
    out
}

/// `(bdf, description, ancestor bdfs root first)` for every device of a parsed tree.
pub fn device_ancestry(roots: &[PciTreeNode]) -> Vec<(String, String, Vec<String>)> {
    tree_entries(roots)
        .into_iter()
        .map(|e| (e.bdf, e.description, e.ancestors))
        .collect()
}

/// Flat node storage while parsing; lines attach children to nodes printed on earlier lines.
struct Arena {
    nodes: Vec<PciTreeNode>,
    children: Vec<Vec<usize>>,
    roots: Vec<usize>,
}

impl Arena {
    fn add(&mut self, parent: Option<usize>, node: PciTreeNode) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        self.children.push(Vec::new());
        match parent.and_then(|p| self.children.get_mut(p)) {
            Some(c) => c.push(id),
            None => self.roots.push(id),
        }
        id
    }

    fn into_tree(self) -> Vec<PciTreeNode> {
        let Arena {
            nodes,
            children,
            roots,
        } = self;
        let mut slots: Vec<Option<PciTreeNode>> = nodes.into_iter().map(Some).collect();
        // Children always have larger ids than their parent, so building from the last id
        // down finishes every child before its parent takes it.
        for id in (0..slots.len()).rev() {
            let kids: Vec<PciTreeNode> = children
                .get(id)
                .into_iter()
                .flatten()
                .filter_map(|&k| slots.get_mut(k).and_then(Option::take))
                .collect();
            if let Some(Some(n)) = slots.get_mut(id) {
                n.children = kids;
            }
        }
        roots
            .into_iter()
            .filter_map(|r| slots.get_mut(r).and_then(Option::take))
            .collect()
    }
}

/// Where the children of one bus are drawn: the column of their `+-`/`\-` markers.
#[derive(Debug, Clone, Copy)]
struct Frame {
    col: usize,
    ctx: Ctx,
}

/// What an entry at the current position belongs to.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    parent: Option<usize>,
    domain: u32,
    /// Bus of device entries here; `None` at the top, where only `[domain:bus]` may appear.
    bus: Option<u8>,
    /// Buses above; bounded so that hostile input cannot nest deep enough to overflow the stack
    /// when the tree is later walked or dropped.
    depth: usize,
}

/// More nesting than this cannot be real: PCI has 256 bus numbers per domain.
const MAX_DEPTH: usize = 260;

/// Position-tracking reader over one line; only ASCII is ever consumed, so every position is
/// a char boundary.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
    no: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.rest().starts_with(lit) {
            self.pos += lit.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, lit: &str, what: &str) -> Result<(), ParseError> {
        if self.eat(lit) {
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    fn err(&self, what: &str) -> ParseError {
        ParseError::new(
            FORMAT_TREE,
            self.no,
            format!("{what} at column {}", self.pos + 1),
            self.rest(),
        )
    }

    /// Hex digits up to `stop` (not consumed).
    fn hex_until(&mut self, stop: &[u8], what: &str) -> Result<u32, ParseError> {
        let r = self.rest();
        let end = r.bytes().position(|b| stop.contains(&b)).unwrap_or(r.len());
        let t = r.get(..end).unwrap_or("");
        if t.is_empty() || t.len() > 8 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.err(what));
        }
        let v = u32::from_str_radix(t, 16).map_err(|_| self.err(what))?;
        self.pos += end;
        Ok(v)
    }

    fn hex_u8(&mut self, stop: &[u8], what: &str) -> Result<u8, ParseError> {
        let start = self.pos;
        let v = self.hex_until(stop, what)?;
        u8::try_from(v).map_err(|_| {
            self.pos = start;
            self.err(what)
        })
    }
}

fn deeper(cur: &Cursor<'_>, depth: usize) -> Result<usize, ParseError> {
    if depth >= MAX_DEPTH {
        return Err(cur.err("at most 256 nested buses"));
    }
    Ok(depth + 1)
}

/// Parser state between lines: the columns where sibling markers may continue a bus.
struct TreeParser {
    arena: Arena,
    frames: Vec<Frame>,
}

/// What the cursor is at inside one line.
enum Step {
    /// Right after the `-` that opens a bridge's (or the host's) buses.
    BridgeBody,
    /// Where a bus's device markers (`+-`, `\-`, `--`) start, or the line ends (empty bus).
    BusBody,
    /// Right after a marker: a `[domain:bus]` header or a `dev.fn` entry.
    Entry,
}

impl TreeParser {
    fn open_frame(&mut self, col: usize, ctx: Ctx) {
        // A new bus drawn at `col` ends every bus drawn at or right of it.
        self.frames.retain(|f| f.col < col);
        self.frames.push(Frame { col, ctx });
    }

    fn parse_from(&mut self, cur: &mut Cursor<'_>, mut ctx: Ctx, mut step: Step) -> Result<(), ParseError> {
        loop {
            match step {
                Step::BridgeBody => {
                    if cur.rest().starts_with('[') {
                        ctx = self.bus_header(cur, ctx)?;
                    }
                    step = Step::BusBody;
                }
                Step::BusBody => {
                    if cur.rest().is_empty() {
                        return Ok(());
                    }
                    let col = cur.pos;
                    if cur.eat("+-") {
                        self.open_frame(col, ctx);
                    } else if !(cur.eat("\\-") || cur.eat("--")) {
                        return Err(cur.err("a branch `+-`, `\\-` or `--`"));
                    }
                    step = Step::Entry;
                }
                Step::Entry => {
                    if cur.rest().starts_with('[') {
                        ctx = self.bus_header(cur, ctx)?;
                        step = Step::BusBody;
                        continue;
                    }
                    let Some(bus) = ctx.bus else {
                        return Err(cur.err("a root bus `[domain:bus]`"));
                    };
                    let start = cur.pos;
                    let dev = cur.hex_u8(b".", "a device number `dd.f`")?;
                    cur.expect(".", "`.` between device and function")?;
                    let func = cur.hex_u8(b"- \t", "a function number `dd.f`")?;
                    if dev > 0x1f || func > 7 {
                        cur.pos = start;
                        return Err(cur.err("a device.function within 00.0-1f.7"));
                    }
                    let bdf = format!("{:04x}:{bus:02x}:{dev:02x}.{func:x}", ctx.domain);
                    if cur.eat("-[") {
                        let secondary = cur.hex_u8(b"-]", "a secondary bus number `[bb]` or `[bb-ss]`")?;
                        let subordinate = if cur.eat("-") {
                            cur.hex_u8(b"]", "a subordinate bus number `[bb-ss]`")?
                        } else {
                            secondary
                        };
                        cur.expect("]-", "`]-` after a bridge's bus range")?;
                        let suffix = cur.s.get(start..cur.pos - 1).unwrap_or("").to_string();
                        let id = self.arena.add(
                            ctx.parent,
                            PciTreeNode {
                                bdf_suffix: suffix,
                                bdf: Some(bdf),
                                bus_range: Some((secondary, subordinate)),
                                description: String::new(),
                                children: Vec::new(),
                            },
                        );
                        cur.expect("-", "`-` opening the bridge's bus")?;
                        ctx = Ctx {
                            parent: Some(id),
                            domain: ctx.domain,
                            bus: Some(secondary),
                            depth: deeper(cur, ctx.depth)?,
                        };
                        step = Step::BridgeBody;
                        continue;
                    }
                    let suffix = cur.s.get(start..cur.pos).unwrap_or("").to_string();
                    let rest = cur.rest();
                    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
                        return Err(cur.err("two spaces and a description, or the end of the line"));
                    }
                    self.arena.add(
                        ctx.parent,
                        PciTreeNode {
                            bdf_suffix: suffix,
                            bdf: Some(bdf),
                            bus_range: None,
                            description: rest.trim().to_string(),
                            children: Vec::new(),
                        },
                    );
                    return Ok(());
                }
            }
        }
    }

    /// `[dddd:bb]` (or old `[bb]`) then `-`: a bus node whose devices follow.
    fn bus_header(&mut self, cur: &mut Cursor<'_>, ctx: Ctx) -> Result<Ctx, ParseError> {
        let start = cur.pos;
        cur.expect("[", "`[` opening a root bus")?;
        let first = cur.hex_until(b":]", "a root bus `[domain:bus]`")?;
        let (domain, bus) = if cur.eat(":") {
            (first, cur.hex_u8(b"]", "a bus number in `[domain:bus]`")?)
        } else {
            let bus = u8::try_from(first).map_err(|_| cur.err("a bus number 00-ff"))?;
            (ctx.domain, bus)
        };
        cur.expect("]", "`]` closing a root bus")?;
        let suffix = cur.s.get(start..cur.pos).unwrap_or("").to_string();
        cur.expect("-", "`-` after a root bus")?;
        let id = self.arena.add(
            ctx.parent,
            PciTreeNode {
                bdf_suffix: suffix,
                bdf: None,
                bus_range: None,
                description: String::new(),
                children: Vec::new(),
            },
        );
        Ok(Ctx {
            parent: Some(id),
            domain,
            bus: Some(bus),
            depth: deeper(cur, ctx.depth)?,
        })
    }
}

/// Parses `lspci -t` / `lspci -tv` into root bus nodes (`[0000:00]`, ...).
pub fn parse_tree(text: &str) -> Result<Vec<PciTreeNode>, ParseError> {
    let mut p = TreeParser {
        arena: Arena {
            nodes: Vec::new(),
            children: Vec::new(),
            roots: Vec::new(),
        },
        frames: Vec::new(),
    };
    let mut started = false;
    for (no, line) in lines(text) {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let mut cur = Cursor { s: line, pos: 0, no };
        if !started {
            started = true;
            cur.expect("-", "the tree's first line starting with `-[` or `-+-[`")?;
            let top = Ctx {
                parent: None,
                domain: 0,
                bus: None,
                depth: 0,
            };
            p.parse_from(&mut cur, top, Step::BridgeBody)?;
            continue;
        }
        let col = line
            .bytes()
            .position(|b| b != b' ' && b != b'|')
            .unwrap_or(line.len());
        cur.pos = col;
        p.frames.retain(|f| f.col <= col);
        let Some(frame) = p.frames.last().copied().filter(|f| f.col == col) else {
            return Err(cur.err("a `+-` or `\\-` branch under an open `+-` above"));
        };
        p.parse_from(&mut cur, frame.ctx, Step::BusBody)?;
    }
    if !started {
        return Err(ParseError::new(
            FORMAT_TREE,
            0,
            "a tree starting with `-[` or `-+-[`",
            "",
        ));
    }
    Ok(p.arena.into_tree())
}
