//! `ibv_devinfo`, `ibv_devinfo -v` and `ibv_devinfo -vv` (rdma-core and MLNX_OFED builds).
//!
//! The output is one block per device starting with `hca_id:`, device attributes as
//! `key: value` lines, then one block per port starting with `port:`. The verbose forms add
//! many capability lines whose spelling differs between rdma-core and MLNX_OFED releases
//! (flag lists on continuation lines, `key = value`, keys without colons), so only the
//! attributes an audit uses get typed fields; every other line is kept in `extra` rather
//! than rejected. Structure is still checked: a port or GID outside its parent is an error.

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT: &str = "ibv_devinfo";

/// Tab stop used to measure indentation; ibv_devinfo indents with tabs and copies that
/// went through an editor or a web page have them expanded to 8-column stops.
const TAB: usize = 8;

/// ibv_devinfo never prints a key deeper than three tabs; flag lists hang at five, so
/// anything from four tabs on continues the previous key.
const CONTINUATION_INDENT: usize = 4 * TAB;

/// A value printed as `TEXT (code)`, e.g. `PORT_ACTIVE (4)` or `50.0 Gbps (64)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coded {
    /// The text before the parenthesised code (`PORT_ACTIVE`, `LINK_UP`, `4X`, `2.5 Gbps`).
    pub text: String,
    /// The numeric code in parentheses, when printed.
    pub code: Option<u32>,
}

/// One RDMA device (`hca_id:` block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IbvDevice {
    /// Device name, e.g. `mlx5_0`.
    pub hca_id: String,
    /// `transport`, e.g. `InfiniBand (0)` (RoCE devices also report InfiniBand).
    pub transport: Option<Coded>,
    /// Firmware version, e.g. `20.37.1700`.
    pub fw_ver: Option<String>,
    /// Node GUID as printed (`88e9:a4ff:ff25:a462`).
    pub node_guid: Option<String>,
    /// System image GUID as printed; equal on the ports/functions of one adapter.
    pub sys_image_guid: Option<String>,
    /// PCI vendor id (0x02c9 for Mellanox/NVIDIA).
    pub vendor_id: Option<u32>,
    /// Vendor part id (4123 = ConnectX-6, 4129 = ConnectX-7, ...).
    pub vendor_part_id: Option<u32>,
    /// Hardware revision as printed (`0x0`).
    pub hw_ver: Option<String>,
    /// Board id / PSID, e.g. `MT_0000000594`.
    pub board_id: Option<String>,
    /// Number of physical ports of the device (not of `ports`: `-i` selects one).
    pub phys_port_cnt: Option<u8>,
    /// Ports printed for this device, in file order.
    pub ports: Vec<IbvPort>,
    /// Other device lines as `(key, value)`; flag-list lines are appended to the value of
    /// the key they belong to, lines without a value have an empty value.
    pub extra: Vec<(String, String)>,
}

/// One port of a device (`port:` block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IbvPort {
    /// Port number (from 1).
    pub port: u8,
    /// Logical state, e.g. `PORT_ACTIVE (4)`, `PORT_DOWN (1)`.
    pub state: Option<Coded>,
    /// Largest IB MTU the port supports, in bytes.
    pub max_mtu_bytes: Option<u32>,
    /// IB MTU in use, in bytes (on RoCE derived from the netdev MTU).
    pub active_mtu_bytes: Option<u32>,
    /// LID of the subnet manager (0 on RoCE).
    pub sm_lid: Option<u16>,
    /// LID of the port (0 on RoCE, 65535 when unassigned).
    pub port_lid: Option<u16>,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: Option<String>,
    /// Lane count, e.g. `4X (2)` (verbose output only).
    pub active_width: Option<Coded>,
    /// Per-lane speed, e.g. `50.0 Gbps (64)` (verbose output only).
    pub active_speed: Option<Coded>,
    /// Physical state, e.g. `LINK_UP (5)`, `POLLING (2)` (verbose output only).
    pub phys_state: Option<Coded>,
    /// Non-zero GID table entries (verbose output only).
    pub gids: Vec<IbvGid>,
    /// Other port lines as `(key, value)`.
    pub extra: Vec<(String, String)>,
}

/// One `GID[ i]:` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IbvGid {
    /// GID table index.
    pub index: u32,
    /// The GID as printed (hex groups, or IPv6 text for RoCE v2 in newer rdma-core).
    pub gid: String,
    /// GID type after the comma on Ethernet ports (`RoCE v1`, `RoCE v2`), if printed.
    pub kind: Option<String>,
}

impl IbvDevice {
    fn new(hca_id: String) -> Self {
        IbvDevice {
            hca_id,
            transport: None,
            fw_ver: None,
            node_guid: None,
            sys_image_guid: None,
            vendor_id: None,
            vendor_part_id: None,
            hw_ver: None,
            board_id: None,
            phys_port_cnt: None,
            ports: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// The port numbered `port`, if it was printed.
    pub fn port(&self, port: u8) -> Option<&IbvPort> {
        self.ports.iter().find(|p| p.port == port)
    }
}

impl IbvPort {
    fn new(port: u8) -> Self {
        IbvPort {
            port,
            state: None,
            max_mtu_bytes: None,
            active_mtu_bytes: None,
            sm_lid: None,
            port_lid: None,
            link_layer: None,
            active_width: None,
            active_speed: None,
            phys_state: None,
            gids: Vec::new(),
            extra: Vec::new(),
        }
    }
}

/// Parses the output of `ibv_devinfo [-v|-vv]`, one or more devices.
pub fn parse(text: &str) -> Result<Vec<IbvDevice>, ParseError> {
    let mut devices: Vec<IbvDevice> = Vec::new();
    // Whether the last key line went to `extra` (of the current port if any, else the
    // device), so that flag-list continuation lines can join it.
    let mut last_was_extra = false;

    for (no, raw) in lines(text) {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |expected: &str| ParseError::new(FORMAT, no, expected, line);

        if let Some(id) = line.strip_prefix("hca_id:") {
            let id = id.trim();
            if id.is_empty() {
                return Err(bad("a device name after `hca_id:`"));
            }
            devices.push(IbvDevice::new(id.to_string()));
            last_was_extra = false;
            continue;
        }
        let Some(dev) = devices.last_mut() else {
            return Err(bad("an `hca_id:` line starting a device"));
        };

        if indent(raw) >= CONTINUATION_INDENT {
            let target = match dev.ports.last_mut() {
                Some(port) => &mut port.extra,
                None => &mut dev.extra,
            };
            match target.last_mut() {
                Some((_, value)) if last_was_extra => {
                    if !value.is_empty() {
                        value.push(' ');
                    }
                    value.push_str(line);
                }
                _ => {
                    target.push((line.to_string(), String::new()));
                    last_was_extra = true;
                }
            }
            continue;
        }

        if line == "Device ports:" {
            last_was_extra = false;
            continue;
        }

        let (key, value) = split_key_value(line);

        if key == "port" {
            let port = value
                .parse::<u8>()
                .map_err(|_| bad("a port number 1..255 after `port:`"))?;
            dev.ports.push(IbvPort::new(port));
            last_was_extra = false;
            continue;
        }

        if let Some(index) = key.strip_prefix("GID[").and_then(|k| k.strip_suffix(']')) {
            let Some(port) = dev.ports.last_mut() else {
                return Err(bad("a `port:` line before the port's GID lines"));
            };
            let index = index
                .trim()
                .parse::<u32>()
                .map_err(|_| bad("a decimal GID index in `GID[...]`"))?;
            if value.is_empty() {
                return Err(bad("a GID after `GID[...]:`"));
            }
            let (gid, kind) = match value.split_once(',') {
                Some((gid, kind)) => (gid.trim(), Some(kind.trim().to_string())),
                None => (value, None),
            };
            port.gids.push(IbvGid {
                index,
                gid: gid.to_string(),
                kind,
            });
            last_was_extra = false;
            continue;
        }

        last_was_extra = match dev.ports.last_mut() {
            Some(port) => port_field(port, key, value).map_err(|e| bad(&e))?,
            None => device_field(dev, key, value).map_err(|e| bad(&e))?,
        };
    }

    if devices.is_empty() {
        return Err(ParseError::new(FORMAT, 0, "at least one `hca_id:` device", ""));
    }
    Ok(devices)
}

/// Stores a device attribute; returns whether it went to `extra`, or what was expected.
fn device_field(dev: &mut IbvDevice, key: &str, value: &str) -> Result<bool, String> {
    match key {
        "transport" => dev.transport = Some(coded(value)),
        "fw_ver" => dev.fw_ver = Some(value.to_string()),
        "node_guid" => dev.node_guid = Some(value.to_string()),
        "sys_image_guid" => dev.sys_image_guid = Some(value.to_string()),
        "vendor_id" => {
            dev.vendor_id = Some(parse_hex(value).ok_or("a hex vendor id like `0x02c9` after `vendor_id:`")?)
        }
        "vendor_part_id" => {
            dev.vendor_part_id = Some(
                value
                    .parse()
                    .map_err(|_| "a decimal part id after `vendor_part_id:`")?,
            )
        }
        "hw_ver" => dev.hw_ver = Some(value.to_string()),
        "board_id" => dev.board_id = Some(value.to_string()),
        "phys_port_cnt" => {
            dev.phys_port_cnt = Some(
                value
                    .parse()
                    .map_err(|_| "a port count 0..255 after `phys_port_cnt:`")?,
            )
        }
        _ => {
            dev.extra.push((key.to_string(), value.to_string()));
            return Ok(true);
        }
    }
    Ok(false)
}

/// Stores a port attribute; returns whether it went to `extra`, or what was expected.
fn port_field(port: &mut IbvPort, key: &str, value: &str) -> Result<bool, String> {
    match key {
        "state" => port.state = Some(coded(value)),
        "max_mtu" | "active_mtu" => {
            // rdma-core prints `invalid MTU` for codes it does not know; keep that text.
            let Ok(bytes) = coded(value).text.parse::<u32>() else {
                port.extra.push((key.to_string(), value.to_string()));
                return Ok(true);
            };
            if key == "max_mtu" {
                port.max_mtu_bytes = Some(bytes);
            } else {
                port.active_mtu_bytes = Some(bytes);
            }
        }
        "sm_lid" => {
            port.sm_lid = Some(
                value
                    .parse()
                    .map_err(|_| "a decimal LID 0..65535 after `sm_lid:`")?,
            )
        }
        "port_lid" => {
            port.port_lid = Some(
                value
                    .parse()
                    .map_err(|_| "a decimal LID 0..65535 after `port_lid:`")?,
            )
        }
        "link_layer" => port.link_layer = Some(value.to_string()),
        "active_width" => port.active_width = Some(coded(value)),
        "active_speed" => port.active_speed = Some(coded(value)),
        "phys_state" => port.phys_state = Some(coded(value)),
        _ => {
            port.extra.push((key.to_string(), value.to_string()));
            return Ok(true);
        }
    }
    Ok(false)
}

/// Splits `key: value`, `key = value` or `key<tab or 2+ spaces>value`; a line with none of
/// these (`Multi-Packet RQ is not supported`) is all key.
fn split_key_value(line: &str) -> (&str, &str) {
    if let Some((k, v)) = line.split_once(':') {
        return (k.trim(), v.trim());
    }
    if let Some((k, v)) = line.split_once(" = ") {
        return (k.trim(), v.trim());
    }
    if let Some(at) = line.find('\t').or_else(|| line.find("  ")) {
        let (k, v) = line.split_at(at);
        return (k.trim(), v.trim());
    }
    (line, "")
}

/// `TEXT (code)` into its parts; anything else is all text.
fn coded(value: &str) -> Coded {
    if let Some((text, rest)) = value.rsplit_once('(')
        && let Some(code) = rest.strip_suffix(')')
        && let Ok(code) = code.trim().parse::<u32>()
    {
        return Coded {
            text: text.trim().to_string(),
            code: Some(code),
        };
    }
    Coded {
        text: value.to_string(),
        code: None,
    }
}

fn parse_hex(value: &str) -> Option<u32> {
    let digits = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X"))?;
    u32::from_str_radix(digits, 16).ok()
}

/// Display columns of the leading blanks, with tabs to the next multiple of [`TAB`].
fn indent(raw: &str) -> usize {
    let mut col = 0usize;
    for ch in raw.chars() {
        match ch {
            ' ' => col = col.saturating_add(1),
            '\t' => col = (col / TAB).saturating_add(1).saturating_mul(TAB),
            _ => break,
        }
    }
    col
}
