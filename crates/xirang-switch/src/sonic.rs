//! Reader for SONiC `config_db.json` (CONFIG_DB exported as JSON): the QoS, buffer, PFC and port
//! tables a lossless-RoCE audit needs, typed, with multi-port / ranged keys expanded.
//!
//! Every value in CONFIG_DB is a string; numeric fields are parsed here so that a malformed
//! number is reported once, with its `TABLE|key.field` location, instead of surfacing later as a
//! confusing audit finding. Tables this reader does not model are kept verbatim in
//! [`ConfigDb::other_tables`], and unknown fields of modelled tables in each entry's `extra`.
//!
//! Two document forms are read: the nested `config_db.json` form (`{"QUEUE": {"Ethernet0|3": {..}}}`)
//! and the flat Redis-dump form whose top-level keys are `TABLE|key` (`{"QUEUE|Ethernet0|3": {..}}`,
//! as in sonic-utilities' per-namespace mock tables); both give the same result.
//!
//! Multi-ASIC / VoQ chassis keys carry the host and ASIC before the port
//! (`dut-lc3|Asic0|Ethernet0|3`); see [`MultiAsic`] for which of them are kept.

mod decode;
mod pg_lookup;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use pg_lookup::{PgProfileLookup, find_pg_profile, load_pg_profile_lookup, parse_pg_profile_lookup};

/// A `{from: to}` QoS map such as one `DSCP_TO_TC_MAP` entry (DSCP → traffic class).
pub type QosMap = BTreeMap<u8, u8>;

/// Entries keyed by port, then by queue or priority-group index.
///
/// Nested rather than keyed by `(port, index)` so that it serialises to JSON (object keys must
/// be strings) and so that "everything on one port" is a single lookup.
pub type PerPortIndex<T> = BTreeMap<String, BTreeMap<u8, T>>;

/// Fields of a modelled entry that this reader does not interpret, kept as found.
pub type ExtraFields = BTreeMap<String, serde_json::Value>;

/// Errors from reading a `config_db.json` or a `pg_profile_lookup.ini`.
#[derive(Debug, thiserror::Error)]
pub enum SonicError {
    /// The text is not JSON at all.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line of the error, as reported by serde_json.
        line: usize,
        /// 1-based column of the error, as reported by serde_json.
        column: usize,
        /// serde_json's description of the problem.
        message: String,
    },
    /// The document is valid JSON but its top level is not an object of tables.
    #[error("top level: expected a JSON object of config_db tables, found {found}")]
    NotAnObject {
        /// A short rendering of what was found instead.
        found: String,
    },
    /// A table, key or field of a modelled table has the wrong shape or an unparsable value.
    #[error("{}: expected {expected}, found {found}", location(.table, .key.as_deref(), .field.as_deref()))]
    Field {
        /// The config_db table, e.g. `WRED_PROFILE`.
        table: String,
        /// The entry key within the table, e.g. `Ethernet0|3`; `None` when the table itself is wrong.
        key: Option<String>,
        /// The field within the entry; `None` when the key or the entry itself is wrong.
        field: Option<String>,
        /// What the reader expected there.
        expected: String,
        /// A short rendering of the value found (JSON syntax, so strings are quoted).
        found: String,
    },
    /// A row of a `pg_profile_lookup.ini` table could not be read.
    #[error("line {line}: expected {expected}, found {found}")]
    PgLookup {
        /// 1-based line number in the file.
        line: usize,
        /// What the reader expected on that line.
        expected: String,
        /// The offending text.
        found: String,
    },
    /// The file could not be read (missing, not a file, too large, not UTF-8).
    #[error(transparent)]
    Read(#[from] xirang_files::ReadError),
    /// A parse error in a named file; the path is prefixed so that multi-file audits say which.
    #[error("{}: {inner}", .path.display())]
    InFile {
        /// The file whose content failed to parse.
        path: PathBuf,
        /// The parse error inside it (part of the message, so not a `source`).
        inner: Box<SonicError>,
    },
}

fn location(table: &str, key: Option<&str>, field: Option<&str>) -> String {
    match (key, field) {
        (Some(k), Some(f)) => format!("{table}|{k}.{f}"),
        (Some(k), None) => format!("{table}|{k}"),
        (None, Some(f)) => format!("{table}.{f}"),
        (None, None) => table.to_owned(),
    }
}

/// `DEVICE_METADATA|localhost`: identity of the switch and which buffer model it runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceMetadata {
    /// `hostname`.
    pub hostname: Option<String>,
    /// `hwsku`, e.g. `Mellanox-SN4600C-C64`; selects the `pg_profile_lookup.ini` in use.
    pub hwsku: Option<String>,
    /// `platform`, e.g. `x86_64-mlnx_msn4600c-r0`.
    pub platform: Option<String>,
    /// `type` (deployment role), e.g. `ToRRouter`, `LeafRouter`.
    pub device_type: Option<String>,
    /// `buffer_model`: `traditional` (static) or `dynamic` (buffermgrd computes headroom).
    pub buffer_model: Option<String>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

/// One `PORT` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Port {
    /// `admin_status`: `up` or `down`.
    pub admin_status: Option<String>,
    /// `speed` in Mb/s (e.g. 400000).
    pub speed_mbps: Option<u64>,
    /// `mtu` in bytes (SONiC default 9100).
    pub mtu_bytes: Option<u32>,
    /// `fec`: `rs`, `fc` or `none`.
    pub fec: Option<String>,
    /// `lanes`: SerDes lane numbers.
    pub lanes: Vec<u32>,
    /// `alias`: the front-panel name.
    pub alias: Option<String>,
    /// Fields not interpreted by this reader (`autoneg`, `index`, `pfc_asym`, ...).
    pub extra: ExtraFields,
}

/// Packet colour for WRED / ECN purposes; RoCE traffic is normally green.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Color {
    /// Conforming traffic.
    Green,
    /// Exceeding traffic.
    Yellow,
    /// Violating traffic.
    Red,
}

/// One `WRED_PROFILE` entry (thresholds in bytes, probability in percent).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WredProfile {
    /// `ecn`: which colours are marked instead of dropped (`ecn_none`, `ecn_green`, ..., `ecn_all`).
    pub ecn: Option<String>,
    /// `wred_green_enable`; absent means disabled.
    pub green_enable: bool,
    /// `green_min_threshold` in bytes.
    pub green_min_bytes: Option<u64>,
    /// `green_max_threshold` in bytes.
    pub green_max_bytes: Option<u64>,
    /// `green_drop_probability` in percent (Pmax).
    pub green_drop_probability_pct: Option<u32>,
    /// `wred_yellow_enable`; absent means disabled.
    pub yellow_enable: bool,
    /// `yellow_min_threshold` in bytes.
    pub yellow_min_bytes: Option<u64>,
    /// `yellow_max_threshold` in bytes.
    pub yellow_max_bytes: Option<u64>,
    /// `yellow_drop_probability` in percent.
    pub yellow_drop_probability_pct: Option<u32>,
    /// `wred_red_enable`; absent means disabled.
    pub red_enable: bool,
    /// `red_min_threshold` in bytes.
    pub red_min_bytes: Option<u64>,
    /// `red_max_threshold` in bytes.
    pub red_max_bytes: Option<u64>,
    /// `red_drop_probability` in percent.
    pub red_drop_probability_pct: Option<u32>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

impl WredProfile {
    /// Whether packets of `color` are ECN-marked (rather than dropped) by this profile.
    ///
    /// Requires both the colour's WRED enable and an `ecn` mode covering the colour: the SAI
    /// ECN mark mode only changes what WRED does, so with WRED off for that colour nothing is
    /// marked.
    pub fn marks_ecn(&self, color: Color) -> bool {
        let (enabled, letter) = match color {
            Color::Green => (self.green_enable, "green"),
            Color::Yellow => (self.yellow_enable, "yellow"),
            Color::Red => (self.red_enable, "red"),
        };
        let covered = match self.ecn.as_deref().map(str::trim) {
            Some("ecn_all") => true,
            Some(mode) => mode
                .strip_prefix("ecn_")
                .is_some_and(|colours| colours.split('_').any(|c| c == letter)),
            None => false,
        };
        enabled && covered
    }

    /// Whether green (normal RoCE) traffic is ECN-marked: see [`WredProfile::marks_ecn`].
    pub fn marks_ecn_green(&self) -> bool {
        self.marks_ecn(Color::Green)
    }
}

/// One `SCHEDULER` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scheduler {
    /// `type`: `DWRR`, `WRR` or `STRICT`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// `weight` for DWRR/WRR.
    pub weight: Option<u32>,
    /// Fields not interpreted by this reader (`priority`, `meter_type`, `pir`, ...).
    pub extra: ExtraFields,
}

/// One `QUEUE|<port>|<q>` entry after key expansion.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Queue {
    /// `scheduler`: name of a `SCHEDULER` entry (reference normalised to the bare name).
    pub scheduler: Option<String>,
    /// `wred_profile`: name of a `WRED_PROFILE` entry (reference normalised to the bare name).
    pub wred_profile: Option<String>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

/// One `PORT_QOS_MAP` entry (a port, or `global`): which maps are bound and where PFC is on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PortQosMap {
    /// `dscp_to_tc_map`: name of a `DSCP_TO_TC_MAP` entry.
    pub dscp_to_tc_map: Option<String>,
    /// `tc_to_queue_map`: name of a `TC_TO_QUEUE_MAP` entry.
    pub tc_to_queue_map: Option<String>,
    /// `tc_to_pg_map`: name of a `TC_TO_PRIORITY_GROUP_MAP` entry.
    pub tc_to_pg_map: Option<String>,
    /// `pfc_to_queue_map`: name of a `MAP_PFC_PRIORITY_TO_QUEUE` entry.
    pub pfc_to_queue_map: Option<String>,
    /// `pfc_to_pg_map`: name of a `PFC_PRIORITY_TO_PRIORITY_GROUP_MAP` entry.
    pub pfc_to_pg_map: Option<String>,
    /// `pfc_enable`: priorities with PFC on, sorted and deduplicated (empty when absent).
    pub pfc_enable: Vec<u8>,
    /// `pfcwd_sw_enable`: priorities the software PFC watchdog covers, sorted (empty when absent).
    pub pfcwd_sw_enable: Vec<u8>,
    /// `dot1p_to_tc_map`: name of a `DOT1P_TO_TC_MAP` entry.
    pub dot1p_to_tc_map: Option<String>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

/// One `BUFFER_POOL` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BufferPool {
    /// `type`: `ingress` or `egress`.
    #[serde(rename = "type")]
    pub pool_type: Option<String>,
    /// `mode`: `static` or `dynamic` thresholds.
    pub mode: Option<String>,
    /// `size` in bytes; absent under the dynamic buffer model, where buffermgrd computes it.
    pub size_bytes: Option<u64>,
    /// `xoff` in bytes: size of the shared headroom pool, when one is used.
    pub xoff_bytes: Option<u64>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

/// One `BUFFER_PROFILE` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BufferProfile {
    /// `pool`: name of a `BUFFER_POOL` entry (reference normalised to the bare name).
    pub pool: Option<String>,
    /// `size` in bytes: reserved / guaranteed buffer.
    pub size_bytes: Option<u64>,
    /// `dynamic_th`: n such that the threshold is 2^n × free pool buffer.
    pub dynamic_th: Option<i8>,
    /// `static_th` in bytes.
    pub static_th: Option<u64>,
    /// `xoff` in bytes: headroom absorbed after sending PAUSE (lossless PGs only).
    pub xoff_bytes: Option<u64>,
    /// `xon` in bytes: resume threshold.
    pub xon_bytes: Option<u64>,
    /// `xon_offset` in bytes: hysteresis.
    pub xon_offset_bytes: Option<u64>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

impl BufferProfile {
    /// Whether this is a lossless (PFC headroom) profile, i.e. it has `xoff`.
    ///
    /// Decided by `xoff`, not by the name: SONiC names port-level profiles such as
    /// `ingress_lossless_profile` "lossless" although they carry no headroom.
    pub fn is_lossless(&self) -> bool {
        self.xoff_bytes.is_some()
    }
}

/// One `BUFFER_PG|<port>|<pg>` or `BUFFER_QUEUE|<port>|<q>` entry after key expansion.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BufferBinding {
    /// `profile`: name of a `BUFFER_PROFILE` entry; `None` when absent or `NULL`.
    pub profile: Option<String>,
    /// `profile` is `NULL`: the dynamic buffer model computes this PG's headroom at runtime.
    pub dynamic: bool,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

/// `PFC_WD|GLOBAL`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PfcWdGlobal {
    /// `POLL_INTERVAL` in ms.
    pub poll_interval_ms: Option<u32>,
    /// `BIG_RED_SWITCH` (`enable` / `disable`): forces every lossless queue into storm mode.
    pub big_red_switch: Option<bool>,
    /// Fields not interpreted by this reader.
    pub extra: ExtraFields,
}

/// One per-port `PFC_WD` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PfcWdPort {
    /// `action`: `drop`, `forward` or `alert`.
    pub action: Option<String>,
    /// `detection_time` in ms.
    pub detection_time_ms: Option<u32>,
    /// `restoration_time` in ms.
    pub restoration_time_ms: Option<u32>,
    /// Fields not interpreted by this reader (`pfc_stat_history`, ...).
    pub extra: ExtraFields,
}

/// The `PFC_WD` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PfcWd {
    /// The `GLOBAL` entry, if present.
    pub global: Option<PfcWdGlobal>,
    /// Per-port entries.
    pub ports: BTreeMap<String, PfcWdPort>,
}

/// Where the own host's name came from when keys carry `<host>|<asic>|` prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OwnHostSource {
    /// `DEVICE_METADATA|localhost.hostname`, as SONiC's own templates use it.
    DeviceMetadata,
    /// No hostname in the document: the host was inferred from the keys (see [`MultiAsic`]).
    Inferred,
}

/// How host- and ASIC-qualified keys (multi-ASIC / VoQ chassis) were read.
///
/// VoQ line cards key `QUEUE` and `BUFFER_QUEUE` by system port, `<host>|<asic>|<port>|<index>`
/// (e.g. `dut-lc3|Asic0|Ethernet0|3`; the ASIC name is `asic<N>` in any case), and list the
/// system ports of every line card in the chassis, not only their own: remote ports get a
/// `wred_profile` but no `scheduler` in `QUEUE`, and the same `BUFFER_QUEUE` profiles as local
/// ones. Only this switch's own entries are kept; the others are skipped (not errors) and
/// counted in [`MultiAsic::skipped`]. The prefix is accepted in every table keyed by port
/// (`QUEUE`, `BUFFER_QUEUE`, `BUFFER_PG`, `PORT_QOS_MAP`, `PORT`, `PFC_WD`); unprefixed keys are
/// always this switch's own.
///
/// The own host is `DEVICE_METADATA|localhost.hostname` (compared case-insensitively) when
/// present. Otherwise, with one host in the keys that host is kept; with several, the host with
/// the most `QUEUE` entries carrying a `scheduler` is kept, because SONiC's `qos_config.j2` gives
/// a scheduler only to the line card's own active ports (ties: most keys, then first by name,
/// and a note says the choice was a guess). When `DEVICE_METADATA|localhost.asic_name` is
/// present, entries of the own host's other ASICs are skipped too, for the same reason.
/// Otherwise every ASIC of the own host is kept: SONiC front-panel port names are unique across
/// the ASICs of one device, so dropping the ASIC from the port name loses nothing, and it is
/// kept in [`MultiAsic::port_asic`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiAsic {
    /// The host whose entries were kept, as spelt in `DEVICE_METADATA` or in the keys.
    pub own_host: String,
    /// Where [`MultiAsic::own_host`] came from.
    pub own_host_source: OwnHostSource,
    /// `DEVICE_METADATA|localhost.asic_name`, when present: only that ASIC's entries were kept.
    pub own_asic: Option<String>,
    /// The ASIC of each kept port, as written in its key (e.g. `Asic0`).
    pub port_asic: BTreeMap<String, String>,
    /// Entries skipped as another host's or ASIC's: `<host>|<asic>` → number of keys.
    pub skipped: BTreeMap<String, usize>,
    /// What a reader of an audit should know about the choices made (inferred or unmatched
    /// host, a port under two ASICs).
    pub notes: Vec<String>,
}

/// A typed view of a (possibly partial) `config_db.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ConfigDb {
    /// `DEVICE_METADATA|localhost`, when present.
    pub device_metadata: Option<DeviceMetadata>,
    /// `PORT`: port name → port.
    pub ports: BTreeMap<String, Port>,
    /// `WRED_PROFILE`: name → profile.
    pub wred_profiles: BTreeMap<String, WredProfile>,
    /// `SCHEDULER`: name → scheduler.
    pub schedulers: BTreeMap<String, Scheduler>,
    /// `QUEUE`, expanded to one entry per (port, queue index).
    pub queues: PerPortIndex<Queue>,
    /// `PORT_QOS_MAP`: port (or `global`) → bindings; multi-port keys expanded.
    pub port_qos_map: BTreeMap<String, PortQosMap>,
    /// `DSCP_TO_TC_MAP`: name → DSCP → TC.
    pub dscp_to_tc_maps: BTreeMap<String, QosMap>,
    /// `TC_TO_QUEUE_MAP`: name → TC → queue.
    pub tc_to_queue_maps: BTreeMap<String, QosMap>,
    /// `TC_TO_PRIORITY_GROUP_MAP`: name → TC → PG.
    pub tc_to_pg_maps: BTreeMap<String, QosMap>,
    /// `MAP_PFC_PRIORITY_TO_QUEUE`: name → PFC priority → queue.
    pub pfc_priority_to_queue_maps: BTreeMap<String, QosMap>,
    /// `PFC_PRIORITY_TO_PRIORITY_GROUP_MAP`: name → PFC priority → PG.
    pub pfc_priority_to_pg_maps: BTreeMap<String, QosMap>,
    /// `DOT1P_TO_TC_MAP`: name → 802.1p priority → TC.
    pub dot1p_to_tc_maps: BTreeMap<String, QosMap>,
    /// `BUFFER_POOL`: name → pool.
    pub buffer_pools: BTreeMap<String, BufferPool>,
    /// `BUFFER_PROFILE`: name → profile.
    pub buffer_profiles: BTreeMap<String, BufferProfile>,
    /// `BUFFER_PG`, expanded to one entry per (port, PG index).
    pub buffer_pgs: PerPortIndex<BufferBinding>,
    /// `BUFFER_QUEUE`, expanded to one entry per (port, queue index).
    pub buffer_queues: PerPortIndex<BufferBinding>,
    /// `CABLE_LENGTH` (all keys merged): port → cable length in metres.
    pub cable_length: BTreeMap<String, u32>,
    /// `PFC_WD`.
    pub pfc_wd: PfcWd,
    /// Tables this reader does not model, kept verbatim.
    pub other_tables: BTreeMap<String, serde_json::Value>,
    /// How `<host>|<asic>|`-prefixed keys were read; `None` (and not serialised) when no key
    /// carries one, so single-ASIC output is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_asic: Option<MultiAsic>,
}

/// Parses the text of a `config_db.json` (or a partial one holding only some tables).
pub fn parse(text: &str) -> Result<ConfigDb, SonicError> {
    decode::parse_document(text)
}

/// Largest `config_db.json` read: a 64-port switch's full configuration is a few hundred
/// KB, a multi-ASIC chassis's a few MB; 64 MiB is far above both.
pub const CONFIG_DB_LIMIT: xirang_files::Limit = xirang_files::Limit::new(64 << 20, "SONiC config_db.json");

/// Reads and parses a `config_db.json`; errors are prefixed with `path`.
pub fn load(path: &Path) -> Result<ConfigDb, SonicError> {
    let text = xirang_files::read_text(path, CONFIG_DB_LIMIT)?;
    parse(&text).map_err(|e| SonicError::InFile {
        path: path.to_path_buf(),
        inner: Box::new(e),
    })
}

impl ConfigDb {
    /// The `PORT_QOS_MAP` binding chosen by `pick` for `port`, falling back to `global`.
    fn binding(&self, port: &str, pick: fn(&PortQosMap) -> Option<&String>) -> Option<&str> {
        self.port_qos_map
            .get(port)
            .and_then(pick)
            .or_else(|| self.port_qos_map.get("global").and_then(pick))
            .map(String::as_str)
    }

    /// Priorities with PFC enabled on `port` (`PORT_QOS_MAP|port.pfc_enable`); empty if none.
    pub fn pfc_enabled(&self, port: &str) -> Vec<u8> {
        self.port_qos_map
            .get(port)
            .map(|m| m.pfc_enable.clone())
            .unwrap_or_default()
    }

    /// The traffic class `dscp` is classified into on `port`, via the port's `dscp_to_tc_map`
    /// or else the `global` one. `None` if no map is bound, the map is missing, or has no entry.
    pub fn dscp_to_tc(&self, port: &str, dscp: u8) -> Option<u8> {
        let name = self.binding(port, |m| m.dscp_to_tc_map.as_ref())?;
        self.dscp_to_tc_maps.get(name)?.get(&dscp).copied()
    }

    /// The egress queue of traffic class `tc` on `port` (`tc_to_queue_map`, port then global).
    pub fn queue_of_tc(&self, port: &str, tc: u8) -> Option<u8> {
        let name = self.binding(port, |m| m.tc_to_queue_map.as_ref())?;
        self.tc_to_queue_maps.get(name)?.get(&tc).copied()
    }

    /// The ingress priority group of traffic class `tc` on `port` (`tc_to_pg_map`, port then global).
    pub fn pg_of_tc(&self, port: &str, tc: u8) -> Option<u8> {
        let name = self.binding(port, |m| m.tc_to_pg_map.as_ref())?;
        self.tc_to_pg_maps.get(name)?.get(&tc).copied()
    }

    /// The WRED profile attached to `QUEUE|port|queue`, if any (and if it exists).
    pub fn wred_of_queue(&self, port: &str, queue: u8) -> Option<&WredProfile> {
        let name = self.queues.get(port)?.get(&queue)?.wred_profile.as_ref()?;
        self.wred_profiles.get(name)
    }

    /// The scheduler attached to `QUEUE|port|queue`, if any (and if it exists).
    pub fn scheduler_of_queue(&self, port: &str, queue: u8) -> Option<&Scheduler> {
        let name = self.queues.get(port)?.get(&queue)?.scheduler.as_ref()?;
        self.schedulers.get(name)
    }

    /// The buffer profile of `BUFFER_PG|port|pg`. `None` when there is no such PG, the profile
    /// is `NULL` (dynamic model: see [`BufferBinding::dynamic`]), or the profile is missing.
    pub fn pg_profile(&self, port: &str, pg: u8) -> Option<&BufferProfile> {
        let name = self.buffer_pgs.get(port)?.get(&pg)?.profile.as_ref()?;
        self.buffer_profiles.get(name)
    }

    /// The buffer profile of `BUFFER_QUEUE|port|queue`, if any.
    pub fn queue_profile(&self, port: &str, queue: u8) -> Option<&BufferProfile> {
        let name = self.buffer_queues.get(port)?.get(&queue)?.profile.as_ref()?;
        self.buffer_profiles.get(name)
    }

    /// Whether the PFC watchdog is configured on `port` (a `PFC_WD|port` entry exists).
    ///
    /// `pfcwd_sw_enable` alone does not count: it only selects priorities for a watchdog that
    /// `pfcwd start` must still have created.
    pub fn pfc_wd_on(&self, port: &str) -> bool {
        self.pfc_wd.ports.contains_key(port)
    }

    /// `PORT|port.mtu` in bytes, if the port and its MTU are present.
    pub fn port_mtu(&self, port: &str) -> Option<u32> {
        self.ports.get(port)?.mtu_bytes
    }
}

/// Normalises a table reference: `[BUFFER_PROFILE|name]` (old configs) and `name` (new) both
/// give `name`.
pub fn normalize_ref(value: &str) -> String {
    let v = value.trim();
    match v.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        Some(inner) => match inner.split_once('|') {
            Some((_, name)) => name.trim().to_owned(),
            None => inner.trim().to_owned(),
        },
        None => v.to_owned(),
    }
}
