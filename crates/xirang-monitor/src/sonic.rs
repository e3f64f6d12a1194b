//! A SONiC switch's counters, read from its Redis (COUNTERS_DB) and named in the
//! telemetry schema the simulator writes, so `calibrate` and `diagnose` read a real
//! switch through the same series as `monitor --replay` of a simulated one.
//!
//! Facts (docs/reference/live-signals.md §C): COUNTERS_DB is Redis database 2, CONFIG_DB
//! 4, APPL_DB 0; counter hashes are `COUNTERS:oid:0x…`, found through the name maps
//! `COUNTERS_PORT_NAME_MAP` (`Ethernet0` → oid), `COUNTERS_QUEUE_NAME_MAP`
//! (`Ethernet0:3` → oid) with `_PORT_MAP`, `_INDEX_MAP`, `_TYPE_MAP`, and
//! `COUNTERS_PG_NAME_MAP` with `_PORT_MAP`, `_INDEX_MAP`; all values are decimal strings.
//! Queue and PG watermarks are read-and-clear on the ASIC, so the `COUNTERS` value is the
//! peak since the previous poll; `PERSISTENT_WATERMARKS:oid` and `USER_WATERMARKS:oid`
//! keep running maxima that only an operator's clear request resets. This reader only
//! reads (`SELECT`, `HGETALL`): it never clears a watermark.
//!
//! What becomes what:
//! - a port's `SAI_PORT_STAT_*` fields: entity `switch:Ethernet0`, under their SAI names
//!   (PFC frames per priority and direction, pause time in µs where the platform has it);
//!   the PFC history's estimates (`EST_PORT_STAT_PFC_<p>_RX_PAUSE_DURATION_US`,
//!   `..._ON2OFF_RX_PKTS`) stand in for the SAI statistic when the platform lacks it, as
//!   `pfcstat --history` reads them; the port's speed from APPL_DB `PORT_TABLE:<port>`;
//! - a queue's fields: entity `switch:Ethernet0/q3` (the queue index from
//!   `COUNTERS_QUEUE_INDEX_MAP`); its PERSISTENT shared watermark is the simulator's
//!   `SAI_QUEUE_STAT_WATERMARK_BYTES` (peak since the start of the record), its USER one
//!   `USER_WATERMARKS/…`; the PFC watchdog's state as `PFC_WD_STORMED` (0 or 1) and its
//!   counts (`PFC_WD_QUEUE_STATS_*`, not their `_LAST` copies, which are values at the
//!   last storm, not counters);
//! - a priority group's fields: entity `switch:Ethernet0/pg3`, persistent and user
//!   watermarks as `PERSISTENT_WATERMARKS/…` and `USER_WATERMARKS/…`;
//! - the switch's name from CONFIG_DB `DEVICE_METADATA|localhost` `hostname` (or the URL's
//!   `switch=`), its namespace from `asic_name` (or `namespace=`), shown on the
//!   `xirang_switch_port_info` series: each namespace (a multi-ASIC switch has one Redis
//!   per ASIC) is read through its own name maps, so equal object ids in two namespaces
//!   never mix.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use xirang_telemetry::CounterValue;
use xirang_telemetry::metric::{
    PFCWD_QUEUE_STATS_PREFIX, PFCWD_STORMED, SWITCH_PORT_SPEED, WATERMARK_TABLES,
};

use crate::collect::{FeedRound, Point};
use crate::redis::{Conn, Endpoint, Limits, RedisError, SWITCH_LIMITS, Value};

/// SONiC's Redis database ids (docs/reference/live-signals.md §C, `schema.h`).
pub const APPL_DB: u8 = 0;
/// COUNTERS_DB.
pub const COUNTERS_DB: u8 = 2;
/// CONFIG_DB.
pub const CONFIG_DB: u8 = 4;
/// Redis's TCP port.
pub const REDIS_PORT: u16 = 6379;
/// The most databases a Redis server has by default (`databases 16`).
const MAX_DB: u8 = 15;

/// The CONFIG_DB key of the switch's own metadata.
pub const DEVICE_METADATA_KEY: &str = "DEVICE_METADATA|localhost";

/// The queue shared-buffer watermark's SAI statistic.
const QUEUE_SHARED_WATERMARK: &str = "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES";
/// The simulator's name for a queue's peak occupancy since the run started: the
/// PERSISTENT table's maximum is its counterpart on a switch.
const QUEUE_WATERMARK: &str = "SAI_QUEUE_STAT_WATERMARK_BYTES";

/// Where and what to read: `redis://HOST[:PORT][/DB][?switch=NAME&namespace=NS]` or
/// `unix:///PATH[?db=DB&switch=NAME&namespace=NS]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SonicUrl {
    /// The server.
    pub endpoint: Endpoint,
    /// COUNTERS_DB's id (2 unless the URL says otherwise).
    pub db: u8,
    /// The switch's name, instead of DEVICE_METADATA's hostname.
    pub switch: Option<String>,
    /// The ASIC namespace, instead of DEVICE_METADATA's `asic_name`.
    pub namespace: Option<String>,
}

/// What the URL forms are, for error messages.
const URL_FORMS: &str = "expected redis://HOST[:PORT][/DB] or unix:///PATH/redis.sock, optionally with ?db=N&switch=NAME&namespace=NS";

impl std::str::FromStr for SonicUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let err = |what: &str| format!("`{s}`: {what}; {URL_FORMS}");
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let mut url = SonicUrl {
            endpoint: Endpoint::Unix(PathBuf::new()),
            db: COUNTERS_DB,
            switch: None,
            namespace: None,
        };
        let parse_db = |d: &str| -> Result<u8, String> {
            d.parse::<u8>()
                .ok()
                .filter(|d| *d <= MAX_DB)
                .ok_or_else(|| err(&format!("database `{d}` is not 0 to {MAX_DB}")))
        };
        if let Some(rest) = base.strip_prefix("redis://") {
            let (hostport, db) = rest.split_once('/').unwrap_or((rest, ""));
            let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
                let (h, p) = v6
                    .split_once(']')
                    .ok_or_else(|| err("an IPv6 host without `]`"))?;
                (h, p.strip_prefix(':'))
            } else {
                match hostport.rsplit_once(':') {
                    Some((h, p)) => (h, Some(p)),
                    None => (hostport, None),
                }
            };
            if host.is_empty() {
                return Err(err("no host"));
            }
            let port = match port {
                Some(p) => p
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| err(&format!("port `{p}` is not 1 to 65535")))?,
                None => REDIS_PORT,
            };
            url.endpoint = Endpoint::Tcp {
                host: host.to_string(),
                port,
            };
            if !db.is_empty() {
                url.db = parse_db(db)?;
            }
        } else if let Some(path) = base.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(err("a socket path that is not absolute"));
            }
            url.endpoint = Endpoint::Unix(PathBuf::from(path));
        } else {
            return Err(err("an unknown scheme"));
        }
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| err(&format!("`{kv}` is not KEY=VALUE")))?;
            if v.is_empty() {
                return Err(err(&format!("`{k}` has no value")));
            }
            match k {
                "db" => url.db = parse_db(v)?,
                "switch" => url.switch = Some(v.to_string()),
                "namespace" => url.namespace = Some(v.to_string()),
                _ => return Err(err(&format!("unknown parameter `{k}` (db, switch or namespace)"))),
            }
        }
        if let Some(name) = &url.switch
            && (name.contains(':') || name.contains('/'))
        {
            return Err(err(&format!("switch name `{name}` contains `:` or `/`")));
        }
        Ok(url)
    }
}

/// Redis hashes by key, as read (or as SONiC's mock tables hold them).
pub type Snapshot = BTreeMap<String, Vec<(String, String)>>;

/// A COUNTERS_DB as SONiC's own tests hold it (sonic-utilities `tests/mock_tables/*.json`:
/// an object of keys, each an object of fields): the reader's input without a Redis, for
/// tests and offline checks. Values are strings in Redis; the mock's few JSON numbers are
/// taken as their text.
pub fn snapshot_from_json(text: &str) -> Result<Snapshot, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("expected JSON: {e}"))?;
    let tables = v.as_object().ok_or("expected an object of Redis keys")?;
    let mut snap = Snapshot::new();
    for (k, h) in tables {
        let Some(h) = h.as_object() else {
            return Err(format!("{k}: expected an object of fields (a Redis hash)"));
        };
        snap.insert(
            k.clone(),
            h.iter()
                .map(|(f, v)| {
                    (
                        f.clone(),
                        v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect(),
        );
    }
    Ok(snap)
}

/// One switch's counters, named in the telemetry schema.
#[derive(Debug, Default)]
pub struct Reading {
    /// Raw counters.
    pub values: Vec<CounterValue>,
    /// `xirang_switch_port_info` and `xirang_switch_queue_info`.
    pub points: Vec<Point>,
    /// Values that are not what SONiC writes (with their key and field).
    pub problems: Vec<String>,
}

/// The object ids a COUNTERS_DB's name maps lead to.
#[derive(Debug, Default)]
pub struct Objects {
    /// (port name, oid).
    pub ports: Vec<(String, String)>,
    /// (port name, queue index, oid, queue type).
    pub queues: Vec<(String, u8, String, String)>,
    /// (port name, PG index, oid).
    pub pgs: Vec<(String, u8, String)>,
}

/// The name maps this reader reads.
pub const NAME_MAPS: [&str; 7] = [
    "COUNTERS_PORT_NAME_MAP",
    "COUNTERS_QUEUE_NAME_MAP",
    "COUNTERS_QUEUE_PORT_MAP",
    "COUNTERS_QUEUE_INDEX_MAP",
    "COUNTERS_QUEUE_TYPE_MAP",
    "COUNTERS_PG_NAME_MAP",
    "COUNTERS_PG_PORT_MAP",
];
const PG_INDEX_MAP: &str = "COUNTERS_PG_INDEX_MAP";

fn map<'a>(snap: &'a Snapshot, key: &str) -> HashMap<&'a str, &'a str> {
    snap.get(key)
        .map(|v| v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
        .unwrap_or_default()
}

/// Resolves the name maps into ports, queues and priority groups. A queue or PG is
/// placed on its port through the `_PORT_MAP` (oid → port oid) where that port is known,
/// else by the port part of its name (SONiC's own mock tables misspell some PG names);
/// its index from the `_INDEX_MAP`, else from its name.
pub fn objects(snap: &Snapshot, problems: &mut Vec<String>) -> Objects {
    let ports: Vec<(String, String)> = snap.get("COUNTERS_PORT_NAME_MAP").cloned().unwrap_or_default();
    let port_of_oid: HashMap<&str, &str> = ports.iter().map(|(n, o)| (o.as_str(), n.as_str())).collect();
    let known: std::collections::HashSet<&str> = ports.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = Objects {
        ports: ports.clone(),
        ..Objects::default()
    };
    let mut place = |kind: &str, names: &str, port_map: &str, index_map: &str| {
        let port_map = map(snap, port_map);
        let index_map = map(snap, index_map);
        let mut found = Vec::new();
        for (name, oid) in snap.get(names).map(Vec::as_slice).unwrap_or_default() {
            let Some((pname, idx)) = name.rsplit_once(':') else {
                problems.push(format!("{names}: `{name}`: expected PORT:INDEX"));
                continue;
            };
            let port = match port_map.get(oid.as_str()).and_then(|p| port_of_oid.get(p)) {
                Some(p) => p.to_string(),
                None if known.contains(pname) => pname.to_string(),
                None => {
                    problems.push(format!(
                        "{names}: {kind} `{name}` ({oid}) is on no port of COUNTERS_PORT_NAME_MAP"
                    ));
                    continue;
                }
            };
            let index = index_map.get(oid.as_str()).copied().unwrap_or(idx);
            let Ok(index) = index.parse::<u8>() else {
                problems.push(format!(
                    "{names}: {kind} `{name}`: index `{index}` is not 0 to 255"
                ));
                continue;
            };
            found.push((port, index, oid.clone()));
        }
        found
    };
    let types = map(snap, "COUNTERS_QUEUE_TYPE_MAP");
    out.queues = place(
        "queue",
        "COUNTERS_QUEUE_NAME_MAP",
        "COUNTERS_QUEUE_PORT_MAP",
        "COUNTERS_QUEUE_INDEX_MAP",
    )
    .into_iter()
    .map(|(p, i, oid)| {
        let t = types
            .get(oid.as_str())
            .map(|t| t.trim_start_matches("SAI_QUEUE_TYPE_").to_ascii_lowercase())
            .unwrap_or_else(|| "unknown".into());
        (p, i, oid, t)
    })
    .collect();
    out.pgs = place(
        "priority group",
        "COUNTERS_PG_NAME_MAP",
        "COUNTERS_PG_PORT_MAP",
        PG_INDEX_MAP,
    );
    let total = out.ports.len() + out.queues.len() + out.pgs.len();
    if total > MAX_OBJECTS {
        problems.push(format!(
            "{total} ports, queues and priority groups in the name maps, more than the {MAX_OBJECTS} read; the rest are left out"
        ));
        out.ports.truncate(MAX_OBJECTS);
        out.queues.truncate(MAX_OBJECTS - out.ports.len());
        out.pgs.truncate(MAX_OBJECTS - out.ports.len() - out.queues.len());
    }
    out
}

/// Most ports, queues and priority groups read from one COUNTERS_DB: a 64-port switch
/// has about 2,600 (its name maps are the server's to make, so they are bounded too).
pub const MAX_OBJECTS: usize = 16_384;

/// The hashes to read for these objects.
pub fn hash_keys(o: &Objects) -> Vec<String> {
    let mut keys: Vec<String> = o.ports.iter().map(|(_, oid)| format!("COUNTERS:{oid}")).collect();
    for oid in o.queues.iter().map(|q| &q.2).chain(o.pgs.iter().map(|p| &p.2)) {
        keys.push(format!("COUNTERS:{oid}"));
        keys.push(format!("PERSISTENT_WATERMARKS:{oid}"));
        keys.push(format!("USER_WATERMARKS:{oid}"));
    }
    keys
}

/// A decimal counter, or a problem naming its key and field.
fn number(key: &str, field: &str, v: &str, problems: &mut Vec<String>) -> Option<u64> {
    match v.trim().parse::<u64>() {
        Ok(n) => Some(n),
        Err(_) => {
            problems.push(format!(
                "{key}: {field}: expected a decimal counter, found `{}`",
                v.chars().take(40).collect::<String>()
            ));
            None
        }
    }
}

fn info(name: &str, help: &'static str, labels: Vec<(&'static str, String)>) -> Point {
    crate::collect::gauge(name, labels, 1.0, help)
}

impl Reading {
    /// Adds the counter `name` of `entity` from the hash field `key`/`field` holding `v`,
    /// or a problem when it is not a decimal counter.
    fn push(&mut self, entity: &str, name: String, key: &str, field: &str, v: &str) {
        if let Some(n) = number(key, field, v, &mut self.problems) {
            self.values.push(CounterValue {
                entity: entity.to_string(),
                name,
                value: n,
            });
        }
    }
}

/// The counters of one switch (or one ASIC namespace of it): `snap` holds the name maps,
/// the hashes [`hash_keys`] names, and APPL_DB's `PORT_TABLE:<port>` hashes when read.
pub fn translate(switch: &str, namespace: &str, snap: &Snapshot) -> Reading {
    let mut r = Reading::default();
    let objs = objects(snap, &mut r.problems);
    let empty = Vec::new();
    let hash = |k: &str| snap.get(k).unwrap_or(&empty);
    for (port, oid) in &objs.ports {
        let entity = format!("{switch}:{port}");
        let key = format!("COUNTERS:{oid}");
        let fields = hash(&key);
        let has: std::collections::HashSet<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
        for (f, v) in fields {
            let name = if let Some(est) = f.strip_prefix("EST_PORT_STAT_PFC_") {
                // The PFC history's estimates, where SAI has no statistic of its own.
                if !(est.ends_with("_RX_PAUSE_DURATION_US") || est.ends_with("_ON2OFF_RX_PKTS")) {
                    continue;
                }
                let sai = format!("SAI_PORT_STAT_PFC_{est}");
                if has.contains(sai.as_str()) {
                    continue;
                }
                sai
            } else if f.starts_with("SAI_PORT_STAT_") {
                f.clone()
            } else {
                continue;
            };
            r.push(&entity, name, &key, f, v);
        }
        if let Some((_, speed)) = snap
            .get(&format!("PORT_TABLE:{port}"))
            .and_then(|h| h.iter().find(|(f, _)| f == "speed"))
            && let Some(n) = number(
                &format!("APPL_DB PORT_TABLE:{port}"),
                "speed",
                speed,
                &mut r.problems,
            )
        {
            r.values.push(CounterValue {
                entity: entity.clone(),
                name: SWITCH_PORT_SPEED.into(),
                value: n,
            });
        }
        r.points.push(info(
            "xirang_switch_port_info",
            "A switch port read from SONiC: its ASIC namespace and COUNTERS_DB object id.",
            vec![
                ("switch", switch.to_string()),
                ("port", port.clone()),
                ("namespace", namespace.to_string()),
                ("oid", oid.clone()),
            ],
        ));
    }
    for (port, q, oid, qtype) in &objs.queues {
        let entity = format!("{switch}:{port}/q{q}");
        let key = format!("COUNTERS:{oid}");
        for (f, v) in hash(&key) {
            let name = if f == "PFC_WD_STATUS" {
                match v.as_str() {
                    "stormed" => r.values.push(CounterValue {
                        entity: entity.clone(),
                        name: PFCWD_STORMED.into(),
                        value: 1,
                    }),
                    "operational" => r.values.push(CounterValue {
                        entity: entity.clone(),
                        name: PFCWD_STORMED.into(),
                        value: 0,
                    }),
                    other => r.problems.push(format!(
                        "{key}: PFC_WD_STATUS: expected `operational` or `stormed`, found `{}`",
                        other.chars().take(40).collect::<String>()
                    )),
                }
                continue;
            } else if (f.starts_with(PFCWD_QUEUE_STATS_PREFIX) && !f.ends_with("_LAST"))
                || f.starts_with("SAI_QUEUE_STAT_")
            {
                f.clone()
            } else {
                continue;
            };
            r.push(&entity, name, &key, f, v);
        }
        watermarks(&mut r, &entity, oid, snap, true);
        r.points.push(info(
            "xirang_switch_queue_info",
            "A switch queue read from SONiC: its type (unicast, multicast, all, unicast_voq).",
            vec![
                ("switch", switch.to_string()),
                ("port", port.clone()),
                ("queue", q.to_string()),
                ("type", qtype.clone()),
            ],
        ));
    }
    for (port, pg, oid) in &objs.pgs {
        let entity = format!("{switch}:{port}/pg{pg}");
        let key = format!("COUNTERS:{oid}");
        for (f, v) in hash(&key) {
            if f.starts_with("SAI_INGRESS_PRIORITY_GROUP_STAT_") {
                r.push(&entity, f.clone(), &key, f, v);
            }
        }
        watermarks(&mut r, &entity, oid, snap, false);
    }
    r
}

/// The PERSISTENT and USER watermarks of a queue or PG.
fn watermarks(r: &mut Reading, entity: &str, oid: &str, snap: &Snapshot, queue: bool) {
    // The tables' counter names carry the table (`USER_WATERMARKS/…`), which the metric
    // names take as a word (`xirang_telemetry::metric::WATERMARK_TABLES`).
    for (prefix, _) in WATERMARK_TABLES {
        let table = prefix.trim_end_matches('/');
        let key = format!("{table}:{oid}");
        for (f, v) in snap.get(&key).map(Vec::as_slice).unwrap_or_default() {
            if !f.starts_with("SAI_") {
                continue;
            }
            let name = if queue && table == "PERSISTENT_WATERMARKS" && f == QUEUE_SHARED_WATERMARK {
                QUEUE_WATERMARK.to_string()
            } else {
                format!("{prefix}{f}")
            };
            r.push(entity, name, &key, f, v);
        }
    }
}

/// Reads one SONiC Redis (one switch, or one ASIC namespace of one), reconnecting after
/// a failure.
pub struct SonicReader {
    url: SonicUrl,
    limits: Limits,
    conn: Option<Conn>,
}

impl SonicReader {
    /// A reader of `url` (nothing is connected until the first [`SonicReader::read`]).
    pub fn new(url: SonicUrl) -> Self {
        SonicReader {
            url,
            limits: SWITCH_LIMITS,
            conn: None,
        }
    }

    /// The same with other limits (tests).
    pub fn with_limits(url: SonicUrl, limits: Limits) -> Self {
        SonicReader {
            url,
            limits,
            conn: None,
        }
    }

    /// Reads every counter. On an error the connection is dropped, and the next read
    /// connects again.
    pub fn read(&mut self) -> Result<Reading, RedisError> {
        let r = self.try_read();
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn try_read(&mut self) -> Result<Reading, RedisError> {
        if self.conn.is_none() {
            self.conn = Some(Conn::connect(&self.url.endpoint, self.limits)?);
        }
        let Some(conn) = self.conn.as_mut() else {
            unreachable!("invariant: connected just above");
        };
        let db = |d: u8| d.to_string();
        let meta = conn.pipeline(&[
            vec!["SELECT", &db(CONFIG_DB)],
            vec!["HGETALL", DEVICE_METADATA_KEY],
        ])?;
        let meta = pairs(conn_name(&self.url), DEVICE_METADATA_KEY, meta.into_iter().nth(1))?;
        let field = |f: &str| meta.iter().find(|(k, _)| k == f).map(|(_, v)| v.clone());
        let switch = match (&self.url.switch, field("hostname")) {
            (Some(s), _) => s.clone(),
            (None, Some(h)) if !h.is_empty() && !h.contains(':') && !h.contains('/') => h,
            (None, h) => {
                return Err(RedisError::Protocol {
                    endpoint: conn_name(&self.url),
                    message: format!(
                        "CONFIG_DB {DEVICE_METADATA_KEY} has {}: give the switch's name in the URL (?switch=NAME)",
                        match h {
                            Some(h) => format!("hostname `{h}`, which is no switch name"),
                            None => "no hostname".into(),
                        }
                    ),
                });
            }
        };
        let namespace = self
            .url
            .namespace
            .clone()
            .or_else(|| field("asic_name"))
            .unwrap_or_default();

        let counters_db = db(self.url.db);
        let mut cmds = vec![vec!["SELECT", counters_db.as_str()]];
        let maps: Vec<&str> = NAME_MAPS.iter().copied().chain([PG_INDEX_MAP]).collect();
        cmds.extend(maps.iter().map(|m| vec!["HGETALL", *m]));
        let replies = conn.pipeline(&cmds)?;
        let mut snap = Snapshot::new();
        for (m, v) in maps.iter().zip(replies.into_iter().skip(1)) {
            snap.insert(m.to_string(), pairs(conn_name(&self.url), m, Some(v))?);
        }
        let mut problems = Vec::new();
        let objs = objects(&snap, &mut problems);
        if objs.ports.is_empty() {
            problems.push(format!(
                "COUNTERS_DB (database {}) has no COUNTERS_PORT_NAME_MAP entries: is it a SONiC switch, and are its port counters enabled?",
                self.url.db
            ));
        }
        let keys = hash_keys(&objs);
        let cmds: Vec<Vec<&str>> = keys.iter().map(|k| vec!["HGETALL", k.as_str()]).collect();
        for (k, v) in keys.iter().zip(conn.pipeline(&cmds)?) {
            snap.insert(k.clone(), pairs(conn_name(&self.url), k, Some(v))?);
        }
        let port_keys: Vec<String> = objs
            .ports
            .iter()
            .map(|(p, _)| format!("PORT_TABLE:{p}"))
            .collect();
        let mut cmds = vec![vec!["SELECT", "0"]];
        cmds.extend(port_keys.iter().map(|k| vec!["HGET", k.as_str(), "speed"]));
        let appl = conn.pipeline(&cmds)?;
        for (k, v) in port_keys.iter().zip(appl.into_iter().skip(1)) {
            if let Value::Bulk(Some(b)) = v {
                snap.insert(
                    k.clone(),
                    vec![("speed".into(), String::from_utf8_lossy(&b).into_owned())],
                );
            }
        }
        let mut reading = translate(&switch, &namespace, &snap);
        // The translation resolves the name maps again, and says again what they lack.
        for p in reading.problems.drain(..) {
            if !problems.contains(&p) {
                problems.push(p);
            }
        }
        reading.problems = problems
            .into_iter()
            .map(|p| format!("{}: {p}", conn_name(&self.url)))
            .collect();
        Ok(reading)
    }
}

fn conn_name(url: &SonicUrl) -> String {
    url.endpoint.to_string()
}

fn pairs(endpoint: String, key: &str, v: Option<Value>) -> Result<Vec<(String, String)>, RedisError> {
    v.unwrap_or(Value::Array(None))
        .into_pairs()
        .map_err(|m| RedisError::Protocol {
            endpoint,
            message: format!("HGETALL {key}: {m}"),
        })
}

/// A feed of every switch (or namespace) in `urls`, for a [`crate::collect::Collector`]: a
/// server that fails is a problem of the round (counted in
/// `xirang_collector_errors_total`), and is tried again next round; two namespaces that
/// report the same port keep the first and say so.
pub fn feed(urls: Vec<SonicUrl>) -> crate::collect::Feed {
    let names: Vec<String> = urls.iter().map(conn_name).collect();
    let mut readers: Vec<SonicReader> = urls.into_iter().map(SonicReader::new).collect();
    Box::new(move |_ts_ns| {
        let mut round = FeedRound::default();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            match r.read() {
                Ok(mut reading) => {
                    let mut clash = None;
                    // A port (`switch:port`) belongs to the first reader that reports it.
                    let mut owns = |port: String| match seen.entry(port) {
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(i);
                            true
                        }
                        std::collections::hash_map::Entry::Occupied(e) if *e.get() == i => true,
                        std::collections::hash_map::Entry::Occupied(e) => {
                            clash.get_or_insert_with(|| (e.key().clone(), *e.get()));
                            false
                        }
                    };
                    reading
                        .values
                        .retain(|v| owns(v.entity.split('/').next().unwrap_or_default().to_string()));
                    // Its info series too: two with one label set would fail the whole scrape.
                    reading.points.retain(|p| {
                        let label = |k: &str| {
                            p.metric
                                .labels
                                .iter()
                                .find(|(n, _)| *n == k)
                                .map(|(_, v)| v.as_str())
                        };
                        owns(format!(
                            "{}:{}",
                            label("switch").unwrap_or(""),
                            label("port").unwrap_or("")
                        ))
                    });
                    if let Some((port, first)) = clash {
                        round.problems.push(format!(
                            "{}: port {port} was already read from {}; its counters here are left out",
                            names[i], names[first],
                        ));
                    }
                    round.values.append(&mut reading.values);
                    round.points.append(&mut reading.points);
                    round.problems.append(&mut reading.problems);
                }
                Err(e) => round.problems.push(e.to_string()),
            }
        }
        round
    })
}
