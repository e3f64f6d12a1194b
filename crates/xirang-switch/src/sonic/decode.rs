//! JSON → typed tables. Kept apart from the public types so that the field-by-field plumbing
//! (string-encoded numbers, error locations, key expansion) does not bury the data model.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use serde_json::{Map, Value};

use super::{
    BufferBinding, BufferPool, BufferProfile, ConfigDb, DeviceMetadata, ExtraFields, MultiAsic,
    OwnHostSource, PerPortIndex, PfcWdGlobal, PfcWdPort, Port, PortQosMap, QosMap, Queue, Scheduler,
    SonicError, WredProfile, normalize_ref,
};

type Result<T> = std::result::Result<T, SonicError>;

/// Longest rendering of an offending value in an error message: enough to recognise it,
/// short enough that a multi-megabyte string does not flood the terminal.
const MAX_FOUND_CHARS: usize = 60;

/// Tables keyed by port, where a multi-ASIC `<host>|asic<N>|` prefix may precede the port.
const PORT_KEYED_TABLES: [&str; 6] = [
    "QUEUE",
    "BUFFER_QUEUE",
    "BUFFER_PG",
    "PORT_QOS_MAP",
    "PORT",
    "PFC_WD",
];

const PORT_INDEX_EXPECTED: &str = "a key `<port>[,<port>...]|<index or a-b range>`, or multi-ASIC \
    `<host>|asic<N>|<port>[,<port>...]|<index or a-b range>`";
const PORT_LIST_EXPECTED: &str = "a port name or comma-separated port names, optionally prefixed \
    `<host>|asic<N>|` (multi-ASIC)";
const PORT_EXPECTED: &str = "a port name, optionally prefixed `<host>|asic<N>|` (multi-ASIC)";

pub(super) fn parse_document(text: &str) -> Result<ConfigDb> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        let full = e.to_string();
        // serde_json appends the position to its message; it is reported in its own fields.
        let suffix = format!(" at line {line} column {column}");
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
        SonicError::Json {
            line,
            column,
            message,
        }
    })?;
    let Value::Object(tables) = root else {
        return Err(SonicError::NotAnObject {
            found: describe(&root),
        });
    };
    let tables = regroup_flat_keys(tables)?;

    let mut db = ConfigDb::default();
    // The own host's name must be known before any port-keyed table is read.
    if let Some(value) = tables.get("DEVICE_METADATA") {
        db.device_metadata = device_metadata("DEVICE_METADATA", value)?;
    }
    let mut scope = Scope::new(&tables, db.device_metadata.as_ref());
    for (name, value) in tables {
        let t = name.as_str();
        match t {
            "DEVICE_METADATA" => {}
            "PORT" => db.ports = ports(t, &value, &mut scope)?,
            "WRED_PROFILE" => db.wred_profiles = named(t, &value, wred_profile)?,
            "SCHEDULER" => db.schedulers = named(t, &value, scheduler)?,
            "QUEUE" => db.queues = per_port_index(t, &value, queue, &mut scope)?,
            "PORT_QOS_MAP" => db.port_qos_map = port_qos_map(t, &value, &mut scope)?,
            "DSCP_TO_TC_MAP" => db.dscp_to_tc_maps = qos_maps(t, &value)?,
            "TC_TO_QUEUE_MAP" => db.tc_to_queue_maps = qos_maps(t, &value)?,
            "TC_TO_PRIORITY_GROUP_MAP" => db.tc_to_pg_maps = qos_maps(t, &value)?,
            "MAP_PFC_PRIORITY_TO_QUEUE" => db.pfc_priority_to_queue_maps = qos_maps(t, &value)?,
            "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP" => {
                db.pfc_priority_to_pg_maps = qos_maps(t, &value)?;
            }
            "DOT1P_TO_TC_MAP" => db.dot1p_to_tc_maps = qos_maps(t, &value)?,
            "BUFFER_POOL" => db.buffer_pools = named(t, &value, buffer_pool)?,
            "BUFFER_PROFILE" => db.buffer_profiles = named(t, &value, buffer_profile)?,
            "BUFFER_PG" => db.buffer_pgs = per_port_index(t, &value, buffer_binding, &mut scope)?,
            "BUFFER_QUEUE" => {
                db.buffer_queues = per_port_index(t, &value, buffer_binding, &mut scope)?;
            }
            "CABLE_LENGTH" => db.cable_length = cable_length(t, &value)?,
            "PFC_WD" => pfc_wd(t, &value, &mut db, &mut scope)?,
            _ => {
                db.other_tables.insert(name, value);
            }
        }
    }
    db.multi_asic = scope.multi;
    Ok(db)
}

/// Turns the flat Redis-dump form (`{"QUEUE|Ethernet4|0": {...}}`, one top-level key per entry)
/// into the nested config_db.json form (`{"QUEUE": {"Ethernet4|0": {...}}}`). Top-level names
/// without `|` are tables already; the two forms may be mixed, but one entry given both ways is
/// an error rather than a silent pick.
fn regroup_flat_keys(tables: Map<String, Value>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    let mut flat = Vec::new();
    for (name, value) in tables {
        match name.split_once('|') {
            Some((table, key)) if !table.is_empty() && !key.is_empty() => {
                flat.push((table.to_owned(), key.to_owned(), name, value));
            }
            _ => {
                out.insert(name, value);
            }
        }
    }
    for (table, key, name, value) in flat {
        match out
            .entry(table.clone())
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(entries) => {
                if entries.contains_key(&key) {
                    return Err(SonicError::Field {
                        table,
                        key: Some(key),
                        field: None,
                        expected: "one entry per key, not both nested under its table and as a \
                                   top-level `TABLE|key`"
                            .to_owned(),
                        found: describe(&value),
                    });
                }
                entries.insert(key, value);
            }
            // A nested table of the wrong shape: reading it reports that (or keeps it verbatim
            // if unmodelled); the flat entry stays under its own name.
            _ => {
                out.insert(name, value);
            }
        }
    }
    Ok(out)
}

/// `asic<N>` in any case (`Asic0`, `asic1`): the ASIC part of a multi-ASIC key.
fn is_asic_name(s: &str) -> bool {
    // `get` rather than slicing: byte 4 may fall inside a multi-byte character.
    s.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("asic"))
        && s.len() > 4
        && s[4..].bytes().all(|b| b.is_ascii_digit())
}

/// Splits `<host>|<asic>|<rest>` when the second part is an ASIC name; host and rest may be
/// empty (a malformed key the caller reports).
fn split_qualified(key: &str) -> Option<(&str, &str, &str)> {
    let mut parts = key.splitn(3, '|');
    let (host, asic, rest) = (parts.next()?, parts.next()?.trim(), parts.next()?);
    is_asic_name(asic).then_some((host.trim(), asic, rest.trim()))
}

/// A port-keyed entry's key with any `<host>|<asic>|` prefix taken off.
struct LocalKey<'k> {
    /// The key after the prefix (the whole key when there is none).
    rest: &'k str,
    /// `(host, asic)` from the prefix.
    prefix: Option<(&'k str, &'k str)>,
}

/// Decides which host- and ASIC-qualified entries are this switch's own (the rules are on
/// [`MultiAsic`]) and records what was kept and skipped.
struct Scope {
    /// `None` when no port-keyed table has a qualified key.
    multi: Option<MultiAsic>,
}

impl Scope {
    fn new(tables: &Map<String, Value>, metadata: Option<&DeviceMetadata>) -> Scope {
        // Lower-cased host → (spelling, QUEUE entries with a scheduler, keys).
        let mut hosts: BTreeMap<String, (&str, usize, usize)> = BTreeMap::new();
        for table in PORT_KEYED_TABLES {
            let Some(Value::Object(entries)) = tables.get(table) else {
                continue;
            };
            for (key, fields) in entries {
                let Some((host, _, rest)) = split_qualified(key) else {
                    continue;
                };
                if host.is_empty() || rest.is_empty() {
                    continue;
                }
                let slot = hosts.entry(host.to_ascii_lowercase()).or_insert((host, 0, 0));
                slot.2 += 1;
                if table == "QUEUE" && fields.get("scheduler").is_some() {
                    slot.1 += 1;
                }
            }
        }
        if hosts.is_empty() {
            return Scope { multi: None };
        }
        let text = |field: &str| {
            metadata
                .and_then(|m| match field {
                    "hostname" => m.hostname.as_deref(),
                    _ => m.extra.get(field).and_then(Value::as_str),
                })
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let mut notes = Vec::new();
        let (own_host, own_host_source) = if let Some(name) = text("hostname") {
            if !hosts.contains_key(&name.to_ascii_lowercase()) {
                let seen: Vec<String> = hosts.values().map(|h| format!("`{}`", h.0)).collect();
                notes.push(format!(
                    "DEVICE_METADATA|localhost hostname `{name}` is in no host-qualified key \
                     (hosts there: {}), so every such entry was skipped",
                    seen.join(", ")
                ));
            }
            (name, OwnHostSource::DeviceMetadata)
        } else {
            let mut ranked: Vec<(&str, usize, usize)> = hosts.values().copied().collect();
            // Most scheduler-carrying QUEUE entries, then most keys, then first by name.
            ranked.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
            let best = ranked[0];
            if let Some(second) = ranked.get(1) {
                let others: Vec<String> = ranked[1..].iter().map(|h| format!("`{}`", h.0)).collect();
                if second.1 == best.1 {
                    notes.push(format!(
                        "no DEVICE_METADATA|localhost hostname, and hosts `{}` and `{}` have \
                         equally many QUEUE entries with a scheduler ({}): kept `{}` by key \
                         count, then name. This is a guess; skipped {}",
                        best.0,
                        second.0,
                        best.1,
                        best.0,
                        others.join(", ")
                    ));
                } else {
                    notes.push(format!(
                        "no DEVICE_METADATA|localhost hostname: kept host `{}`, which has the \
                         most QUEUE entries with a scheduler ({}; SONiC gives one only to the line \
                         card's own active ports); skipped {}",
                        best.0,
                        best.1,
                        others.join(", ")
                    ));
                }
            }
            (best.0.to_owned(), OwnHostSource::Inferred)
        };
        Scope {
            multi: Some(MultiAsic {
                own_host,
                own_host_source,
                own_asic: text("asic_name"),
                port_asic: BTreeMap::new(),
                skipped: BTreeMap::new(),
                notes,
            }),
        }
    }

    /// Takes any `<host>|asic<N>|` prefix off `e`'s key; a prefix with an empty host or nothing
    /// after it is a malformed key.
    fn split<'k>(e: &Entry<'k>, expected: &str) -> Result<LocalKey<'k>> {
        match split_qualified(e.key) {
            None => Ok(LocalKey {
                rest: e.key,
                prefix: None,
            }),
            Some((host, _, rest)) if host.is_empty() || rest.is_empty() => Err(e.key_error(expected)),
            Some((host, asic, rest)) => Ok(LocalKey {
                rest,
                prefix: Some((host, asic)),
            }),
        }
    }

    /// Whether an entry with `prefix`, for `ports`, is this switch's own; records the ports'
    /// ASIC if so, and the skip if not.
    fn keep(&mut self, prefix: Option<(&str, &str)>, ports: &[&str]) -> bool {
        let (Some((host, asic)), Some(m)) = (prefix, self.multi.as_mut()) else {
            return true;
        };
        let own = host.eq_ignore_ascii_case(&m.own_host)
            && m.own_asic.as_deref().is_none_or(|a| a.eq_ignore_ascii_case(asic));
        if !own {
            *m.skipped.entry(format!("{host}|{asic}")).or_default() += 1;
            return false;
        }
        for port in ports {
            match m.port_asic.get(*port) {
                None => {
                    m.port_asic.insert((*port).to_owned(), asic.to_owned());
                }
                Some(known) if known.eq_ignore_ascii_case(asic) => {}
                Some(known) => {
                    let note = format!(
                        "port `{port}` of host `{host}` appears under ASICs `{known}` and `{asic}`; \
                         front-panel names should be unique per device, so their entries were merged"
                    );
                    if !m.notes.contains(&note) {
                        m.notes.push(note);
                    }
                }
            }
        }
        true
    }
}

/// A short, single-line rendering of a JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Object(m) => format!("an object with {} keys", m.len()),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::String(s) => quote_truncated(s),
        other => other.to_string(),
    }
}

fn quote_truncated(s: &str) -> String {
    // Cut on a char boundary: slicing bytes could split a multi-byte character and panic.
    match s.char_indices().nth(MAX_FOUND_CHARS) {
        Some((cut, _)) => format!("{}…", Value::String(s[..cut].to_owned())),
        None => Value::String(s.to_owned()).to_string(),
    }
}

/// One `TABLE|key` entry with its fields, carrying enough context to build located errors.
struct Entry<'a> {
    table: &'a str,
    key: &'a str,
    fields: &'a Map<String, Value>,
}

fn table_entries<'a>(table: &'a str, value: &'a Value) -> Result<Vec<Entry<'a>>> {
    let Value::Object(entries) = value else {
        return Err(SonicError::Field {
            table: table.to_owned(),
            key: None,
            field: None,
            expected: "an object of entries".to_owned(),
            found: describe(value),
        });
    };
    entries
        .iter()
        .map(|(key, v)| match v {
            Value::Object(fields) => Ok(Entry { table, key, fields }),
            other => Err(SonicError::Field {
                table: table.to_owned(),
                key: Some(key.clone()),
                field: None,
                expected: "an object of fields".to_owned(),
                found: describe(other),
            }),
        })
        .collect()
}

impl Entry<'_> {
    fn error(&self, field: Option<&str>, expected: &str, found: String) -> SonicError {
        SonicError::Field {
            table: self.table.to_owned(),
            key: Some(self.key.to_owned()),
            field: field.map(str::to_owned),
            expected: expected.to_owned(),
            found,
        }
    }

    fn key_error(&self, expected: &str) -> SonicError {
        self.error(None, expected, quote_truncated(self.key))
    }

    fn string(&self, field: &str) -> Result<Option<String>> {
        match self.fields.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(Some(field), "a string", describe(other))),
        }
    }

    fn reference(&self, field: &str) -> Result<Option<String>> {
        Ok(self.string(field)?.map(|s| normalize_ref(&s)))
    }

    /// An unsigned integer. CONFIG_DB stores numbers as strings, but hand-edited files often
    /// use JSON numbers, and both mean the same thing to the switch.
    fn unsigned<T: TryFrom<u64>>(&self, field: &str, expected: &str) -> Result<Option<T>> {
        let Some(v) = self.fields.get(field) else {
            return Ok(None);
        };
        let parsed = match v {
            Value::String(s) => s.trim().parse::<u64>().ok(),
            Value::Number(n) => n.as_u64(),
            _ => None,
        };
        match parsed.and_then(|n| T::try_from(n).ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(self.error(Some(field), expected, describe(v))),
        }
    }

    fn u64(&self, field: &str) -> Result<Option<u64>> {
        self.unsigned(field, "an unsigned integer")
    }

    fn u32(&self, field: &str) -> Result<Option<u32>> {
        self.unsigned(field, "an unsigned integer up to 4294967295")
    }

    fn i8(&self, field: &str) -> Result<Option<i8>> {
        let Some(v) = self.fields.get(field) else {
            return Ok(None);
        };
        let parsed = match v {
            Value::String(s) => s.trim().parse::<i64>().ok(),
            Value::Number(n) => n.as_i64(),
            _ => None,
        };
        match parsed.and_then(|n| i8::try_from(n).ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(self.error(Some(field), "an integer in -128..=127", describe(v))),
        }
    }

    fn flag(&self, field: &str, yes: &str, no: &str) -> Result<Option<bool>> {
        let Some(v) = self.fields.get(field) else {
            return Ok(None);
        };
        match v {
            Value::Bool(b) => Ok(Some(*b)),
            Value::String(s) if s.trim().eq_ignore_ascii_case(yes) => Ok(Some(true)),
            Value::String(s) if s.trim().eq_ignore_ascii_case(no) => Ok(Some(false)),
            other => Err(self.error(Some(field), &format!("\"{yes}\" or \"{no}\""), describe(other))),
        }
    }

    /// A comma-separated list such as `"3,4"`; empty items are skipped because trailing commas
    /// occur in generated configs and carry no meaning.
    fn list<T: std::str::FromStr>(
        &self,
        field: &str,
        expected: &str,
        valid: impl Fn(&T) -> bool,
    ) -> Result<Vec<T>> {
        let Some(v) = self.fields.get(field) else {
            return Ok(Vec::new());
        };
        let Value::String(s) = v else {
            return Err(self.error(Some(field), expected, describe(v)));
        };
        s.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| match item.parse::<T>() {
                Ok(n) if valid(&n) => Ok(n),
                _ => Err(self.error(Some(field), expected, describe(v))),
            })
            .collect()
    }

    fn priorities(&self, field: &str) -> Result<Vec<u8>> {
        let mut p = self.list::<u8>(field, "a comma-separated list of priorities 0-7", |p| *p <= 7)?;
        p.sort_unstable();
        p.dedup();
        Ok(p)
    }

    fn extra(&self, known: &[&str]) -> ExtraFields {
        self.fields
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Splits `Ethernet0,Ethernet4|3-4` (a key, or what follows its multi-ASIC prefix) into its
    /// ports and index range.
    fn port_index_key<'k>(&self, key: &'k str) -> Result<(Vec<&'k str>, RangeInclusive<u8>)> {
        const EXPECTED: &str = PORT_INDEX_EXPECTED;
        let (ports, index) = key.split_once('|').ok_or_else(|| self.key_error(EXPECTED))?;
        let ports = self.port_list(ports, EXPECTED)?;
        let bound = |s: &str| s.trim().parse::<u8>().map_err(|_| self.key_error(EXPECTED));
        let range = match index.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (bound(lo)?, bound(hi)?);
                if lo > hi {
                    return Err(self.key_error(EXPECTED));
                }
                lo..=hi
            }
            None => {
                let i = bound(index)?;
                i..=i
            }
        };
        Ok((ports, range))
    }

    fn port_list<'k>(&self, ports: &'k str, expected: &str) -> Result<Vec<&'k str>> {
        let mut ports: Vec<&str> = ports.split(',').map(str::trim).collect();
        // `|` separates key parts in CONFIG_DB, so it cannot be part of a port name.
        if ports.iter().any(|p| p.is_empty() || p.contains('|')) {
            return Err(self.key_error(expected));
        }
        // A repeated port would be expanded (and cloned into) once per repetition for nothing.
        ports.sort_unstable();
        ports.dedup();
        Ok(ports)
    }
}

fn named<T>(table: &str, value: &Value, decode: fn(&Entry<'_>) -> Result<T>) -> Result<BTreeMap<String, T>> {
    table_entries(table, value)?
        .iter()
        .map(|e| Ok((e.key.to_owned(), decode(e)?)))
        .collect()
}

/// Expands `ports|range` keys. When keys overlap (a multi-port or ranged key plus a narrower
/// one for the same slot), the narrower key wins: that is how operators override a template
/// default, and it makes the result independent of JSON object order.
///
/// Keys may carry a multi-ASIC `<host>|asic<N>|` prefix; other hosts' entries are skipped (see
/// [`MultiAsic`]), after their key is checked, but their fields are not read.
fn per_port_index<T: Clone>(
    table: &str,
    value: &Value,
    decode: fn(&Entry<'_>) -> Result<T>,
    scope: &mut Scope,
) -> Result<PerPortIndex<T>> {
    let entries = table_entries(table, value)?;
    let mut expanded = Vec::with_capacity(entries.len());
    for e in &entries {
        let local = Scope::split(e, PORT_INDEX_EXPECTED)?;
        let (ports, range) = e.port_index_key(local.rest)?;
        if !scope.keep(local.prefix, &ports) {
            continue;
        }
        let slots = ports.len() * range.clone().count();
        expanded.push((slots, e.key, ports, range, decode(e)?));
    }
    expanded.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut out: PerPortIndex<T> = BTreeMap::new();
    for (_, _, ports, range, item) in expanded {
        for port in ports {
            let slots = out.entry(port.to_owned()).or_default();
            for i in range.clone() {
                slots.insert(i, item.clone());
            }
        }
    }
    Ok(out)
}

fn device_metadata(table: &str, value: &Value) -> Result<Option<DeviceMetadata>> {
    let entries = table_entries(table, value)?;
    let Some(e) = entries.iter().find(|e| e.key == "localhost") else {
        return Ok(None);
    };
    Ok(Some(DeviceMetadata {
        hostname: e.string("hostname")?,
        hwsku: e.string("hwsku")?,
        platform: e.string("platform")?,
        device_type: e.string("type")?,
        buffer_model: e.string("buffer_model")?,
        extra: e.extra(&["hostname", "hwsku", "platform", "type", "buffer_model"]),
    }))
}

/// `PORT`: keys are port names, optionally multi-ASIC prefixed (another host's or ASIC's entry
/// is skipped); unprefixed keys are used verbatim, as before.
fn ports(table: &str, value: &Value, scope: &mut Scope) -> Result<BTreeMap<String, Port>> {
    let mut out = BTreeMap::new();
    for e in table_entries(table, value)? {
        let local = Scope::split(&e, PORT_EXPECTED)?;
        if scope.keep(local.prefix, &[local.rest]) {
            out.insert(local.rest.to_owned(), port(&e)?);
        }
    }
    Ok(out)
}

fn port(e: &Entry<'_>) -> Result<Port> {
    Ok(Port {
        admin_status: e.string("admin_status")?,
        speed_mbps: e.u64("speed")?,
        mtu_bytes: e.u32("mtu")?,
        fec: e.string("fec")?,
        lanes: e.list::<u32>("lanes", "a comma-separated list of lane numbers", |_| true)?,
        alias: e.string("alias")?,
        extra: e.extra(&["admin_status", "speed", "mtu", "fec", "lanes", "alias"]),
    })
}

fn wred_profile(e: &Entry<'_>) -> Result<WredProfile> {
    let enable = |f| Ok::<_, SonicError>(e.flag(f, "true", "false")?.unwrap_or(false));
    Ok(WredProfile {
        ecn: e.string("ecn")?,
        green_enable: enable("wred_green_enable")?,
        green_min_bytes: e.u64("green_min_threshold")?,
        green_max_bytes: e.u64("green_max_threshold")?,
        green_drop_probability_pct: e.u32("green_drop_probability")?,
        yellow_enable: enable("wred_yellow_enable")?,
        yellow_min_bytes: e.u64("yellow_min_threshold")?,
        yellow_max_bytes: e.u64("yellow_max_threshold")?,
        yellow_drop_probability_pct: e.u32("yellow_drop_probability")?,
        red_enable: enable("wred_red_enable")?,
        red_min_bytes: e.u64("red_min_threshold")?,
        red_max_bytes: e.u64("red_max_threshold")?,
        red_drop_probability_pct: e.u32("red_drop_probability")?,
        extra: e.extra(&[
            "ecn",
            "wred_green_enable",
            "green_min_threshold",
            "green_max_threshold",
            "green_drop_probability",
            "wred_yellow_enable",
            "yellow_min_threshold",
            "yellow_max_threshold",
            "yellow_drop_probability",
            "wred_red_enable",
            "red_min_threshold",
            "red_max_threshold",
            "red_drop_probability",
        ]),
    })
}

fn scheduler(e: &Entry<'_>) -> Result<Scheduler> {
    Ok(Scheduler {
        kind: e.string("type")?,
        weight: e.u32("weight")?,
        extra: e.extra(&["type", "weight"]),
    })
}

fn queue(e: &Entry<'_>) -> Result<Queue> {
    Ok(Queue {
        scheduler: e.reference("scheduler")?,
        wred_profile: e.reference("wred_profile")?,
        extra: e.extra(&["scheduler", "wred_profile"]),
    })
}

fn port_qos_entry(e: &Entry<'_>) -> Result<PortQosMap> {
    Ok(PortQosMap {
        dscp_to_tc_map: e.reference("dscp_to_tc_map")?,
        tc_to_queue_map: e.reference("tc_to_queue_map")?,
        tc_to_pg_map: e.reference("tc_to_pg_map")?,
        pfc_to_queue_map: e.reference("pfc_to_queue_map")?,
        pfc_to_pg_map: e.reference("pfc_to_pg_map")?,
        pfc_enable: e.priorities("pfc_enable")?,
        pfcwd_sw_enable: e.priorities("pfcwd_sw_enable")?,
        dot1p_to_tc_map: e.reference("dot1p_to_tc_map")?,
        extra: e.extra(&[
            "dscp_to_tc_map",
            "tc_to_queue_map",
            "tc_to_pg_map",
            "pfc_to_queue_map",
            "pfc_to_pg_map",
            "pfc_enable",
            "pfcwd_sw_enable",
            "dot1p_to_tc_map",
        ]),
    })
}

/// Older templates key PORT_QOS_MAP by a comma-joined port list; a single-port key for the
/// same port overrides it (same rule as [`per_port_index`]). Multi-ASIC prefixes are handled as
/// there, although SONiC's own templates write PORT_QOS_MAP with local port names only.
fn port_qos_map(table: &str, value: &Value, scope: &mut Scope) -> Result<BTreeMap<String, PortQosMap>> {
    let entries = table_entries(table, value)?;
    let mut expanded = Vec::with_capacity(entries.len());
    for e in &entries {
        let local = Scope::split(e, PORT_LIST_EXPECTED)?;
        let ports = e.port_list(local.rest, PORT_LIST_EXPECTED)?;
        if !scope.keep(local.prefix, &ports) {
            continue;
        }
        expanded.push((e.key, ports, port_qos_entry(e)?));
    }
    expanded.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(b.0)));
    let mut out = BTreeMap::new();
    for (_, ports, item) in expanded {
        for p in ports {
            out.insert(p.to_owned(), item.clone());
        }
    }
    Ok(out)
}

fn qos_maps(table: &str, value: &Value) -> Result<BTreeMap<String, QosMap>> {
    named(table, value, qos_map)
}

fn qos_map(e: &Entry<'_>) -> Result<QosMap> {
    e.fields
        .iter()
        .map(|(from, to)| {
            let from_n = from
                .trim()
                .parse::<u8>()
                .map_err(|_| e.error(Some(from), "a numeric key 0-255", quote_truncated(from)))?;
            let to_n = e
                .unsigned::<u8>(from, "an integer 0-255")?
                .ok_or_else(|| e.error(Some(from), "an integer 0-255", describe(to)))?;
            Ok((from_n, to_n))
        })
        .collect()
}

fn buffer_pool(e: &Entry<'_>) -> Result<BufferPool> {
    Ok(BufferPool {
        pool_type: e.string("type")?,
        mode: e.string("mode")?,
        size_bytes: e.u64("size")?,
        xoff_bytes: e.u64("xoff")?,
        extra: e.extra(&["type", "mode", "size", "xoff"]),
    })
}

fn buffer_profile(e: &Entry<'_>) -> Result<BufferProfile> {
    Ok(BufferProfile {
        pool: e.reference("pool")?,
        size_bytes: e.u64("size")?,
        dynamic_th: e.i8("dynamic_th")?,
        static_th: e.u64("static_th")?,
        xoff_bytes: e.u64("xoff")?,
        xon_bytes: e.u64("xon")?,
        xon_offset_bytes: e.u64("xon_offset")?,
        extra: e.extra(&[
            "pool",
            "size",
            "dynamic_th",
            "static_th",
            "xoff",
            "xon",
            "xon_offset",
        ]),
    })
}

fn buffer_binding(e: &Entry<'_>) -> Result<BufferBinding> {
    let profile = e.reference("profile")?;
    // `NULL` is the dynamic buffer model's "compute this headroom at runtime" marker, not a
    // profile name; keeping it as a name would make it look like a dangling reference.
    let dynamic = profile.as_deref() == Some("NULL");
    Ok(BufferBinding {
        profile: profile.filter(|_| !dynamic),
        dynamic,
        extra: e.extra(&["profile"]),
    })
}

fn cable_length(table: &str, value: &Value) -> Result<BTreeMap<String, u32>> {
    const EXPECTED: &str = "a cable length such as \"5m\"";
    let mut out = BTreeMap::new();
    for e in table_entries(table, value)? {
        for (port, v) in e.fields {
            let metres = match v {
                Value::String(s) => {
                    let s = s.trim();
                    s.strip_suffix('m').unwrap_or(s).trim().parse::<u32>().ok()
                }
                Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
                _ => None,
            };
            let metres = metres.ok_or_else(|| e.error(Some(port), EXPECTED, describe(v)))?;
            out.insert(port.clone(), metres);
        }
    }
    Ok(out)
}

fn pfc_wd(table: &str, value: &Value, db: &mut ConfigDb, scope: &mut Scope) -> Result<()> {
    for e in table_entries(table, value)? {
        if e.key.eq_ignore_ascii_case("GLOBAL") {
            db.pfc_wd.global = Some(PfcWdGlobal {
                poll_interval_ms: e.u32("POLL_INTERVAL")?,
                big_red_switch: e.flag("BIG_RED_SWITCH", "enable", "disable")?,
                extra: e.extra(&["POLL_INTERVAL", "BIG_RED_SWITCH"]),
            });
        } else {
            let local = Scope::split(&e, PORT_EXPECTED)?;
            if !scope.keep(local.prefix, &[local.rest]) {
                continue;
            }
            let entry = PfcWdPort {
                action: e.string("action")?,
                detection_time_ms: e.u32("detection_time")?,
                restoration_time_ms: e.u32("restoration_time")?,
                extra: e.extra(&["action", "detection_time", "restoration_time"]),
            };
            db.pfc_wd.ports.insert(local.rest.to_owned(), entry);
        }
    }
    Ok(())
}
