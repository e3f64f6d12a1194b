//! Fuzz targets as proptest properties (cargo-fuzz needs nightly here): the reader must return
//! `Ok` or `Err` — never panic — on arbitrary bytes, arbitrary JSON under the real table names,
//! and mutated real fixtures. Whatever parses must also serialise, since the CLI prints --json.

use proptest::prelude::*;
use serde_json::{Map, Value};
use xirang_switch::sonic;

const FIXTURES: [&str; 9] = [
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/qos-mellanox4600c-c64.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/qos-arista7260-t1.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/qos-dell6100.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/buffers-mellanox4600c-t1.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/buffers-mellanox4600c-t1-dynamic.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/buffer-arista7260-t1.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/buffers-dell6100.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/qos-arista7800r3-48cq2-lc-voq.json"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/config_db-multiasic-asic0-flat.json"
    )),
];

const PG_LOOKUPS: [&str; 2] = [
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/pg_profile_lookup-mellanox-sn4600c.ini"
    )),
    include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/sonic/pg_profile_lookup-arista-7260cx3-balanced.ini"
    )),
];

const TABLES: [&str; 23] = [
    "DEVICE_METADATA",
    "PORT",
    "WRED_PROFILE",
    "SCHEDULER",
    "QUEUE",
    "PORT_QOS_MAP",
    "DSCP_TO_TC_MAP",
    "TC_TO_QUEUE_MAP",
    "TC_TO_PRIORITY_GROUP_MAP",
    "MAP_PFC_PRIORITY_TO_QUEUE",
    "PFC_PRIORITY_TO_PRIORITY_GROUP_MAP",
    "DOT1P_TO_TC_MAP",
    "BUFFER_POOL",
    "BUFFER_PROFILE",
    "BUFFER_PG",
    "BUFFER_QUEUE",
    "CABLE_LENGTH",
    "PFC_WD",
    "SOME_UNKNOWN_TABLE",
    // The flat Redis-dump form, which is regrouped into the tables above.
    "QUEUE|dut-lc3|Asic0|Ethernet0|3",
    "PORT_QOS_MAP|Ethernet0",
    "PORT|lc1|asic1|Ethernet8",
    "DEVICE_METADATA|localhost",
];

const FIELDS: [&str; 26] = [
    "speed",
    "mtu",
    "lanes",
    "admin_status",
    "ecn",
    "wred_green_enable",
    "green_min_threshold",
    "green_drop_probability",
    "type",
    "weight",
    "scheduler",
    "wred_profile",
    "pfc_enable",
    "pfcwd_sw_enable",
    "dscp_to_tc_map",
    "pool",
    "size",
    "dynamic_th",
    "xoff",
    "profile",
    "detection_time",
    "POLL_INTERVAL",
    "BIG_RED_SWITCH",
    "3",
    "hostname",
    "asic_name",
];

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

/// Strings that look like config_db values often enough to get past the first check.
fn config_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,12}",
        "-?[0-9]{1,4}",
        "[0-9]{1,3}(,[0-9]{1,3}){0,4},?",
        "[0-9]{1,4}m",
        "\\[[A-Z_]{1,12}\\|[a-z_.]{0,8}\\]?",
        Just("NULL".to_owned()),
        Just("true".to_owned()),
        Just("enable".to_owned()),
        "Ethernet[0-9]{1,3}(,Ethernet[0-9]{1,3}){0,2}\\|[0-9]{1,3}(-[0-9]{1,3})?",
        // Multi-ASIC / VoQ keys, including malformed and odd-case ones.
        "(lc[0-9]|é|)\\|[Aa][Ss][Ii][Cc][0-9]{0,2}\\|(Ethernet[0-9]{1,3}(\\|[0-9](-[0-9])?)?)?",
        "asic[0-9]",
        "lc[0-9]",
        any::<String>(),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        config_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((config_string(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An entry shaped like config_db's (`{field: value}`), with real field names.
fn entry() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(
            (
                prop::sample::select(FIELDS.as_slice()),
                prop_oneof![3 => config_string().prop_map(Value::String), 1 => json_value()]
            ),
            0..6
        )
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        json_value(),
    ]
}

fn document() -> impl Strategy<Value = Value> {
    let table = prop_oneof![
        prop::collection::vec((config_string(), entry()), 0..5)
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        json_value(),
    ];
    prop::collection::vec((prop::sample::select(TABLES.as_slice()), table), 0..5)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn check(text: &str) {
    match sonic::parse(text) {
        Ok(db) => {
            serde_json::to_string(&db).expect("a parsed ConfigDb always serialises");
            // Exercise the query helpers on whatever got parsed.
            for port in db.ports.keys().chain(db.port_qos_map.keys()).take(4) {
                let _ = db.pfc_enabled(port);
                let _ = db.dscp_to_tc(port, 26);
                let _ = db.queue_of_tc(port, 3);
                let _ = db.wred_of_queue(port, 3);
                let _ = db.pg_profile(port, 3);
                let _ = db.pfc_wd_on(port);
                let _ = db.port_mtu(port);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Replaces the leaf reached by following `path` (indices taken modulo each container's size).
fn replace_leaf(v: &mut Value, path: &[usize], new: Value) {
    let next = match v {
        Value::Object(m) if !m.is_empty() => {
            let i = path.first().copied().unwrap_or(0) % m.len();
            m.values_mut().nth(i)
        }
        Value::Array(a) if !a.is_empty() => {
            let i = path.first().copied().unwrap_or(0) % a.len();
            a.get_mut(i)
        }
        _ => None,
    };
    match next {
        Some(child) if path.len() > 1 => replace_leaf(child, &path[1..], new),
        Some(child) => *child = new,
        None => *v = new,
    }
}

#[derive(Debug, Clone)]
enum ByteEdit {
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| ByteEdit::Set(p, b)),
        (
            any::<usize>(),
            prop::sample::select(b"{}[]\",:|-0123456789 \\m".as_slice())
        )
            .prop_map(|(p, b)| ByteEdit::Insert(p, b)),
        (any::<usize>(), 1usize..64).prop_map(|(p, n)| ByteEdit::Delete(p, n)),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let text = String::from_utf8_lossy(&bytes);
        check(&text);
        let _ = sonic::parse_pg_profile_lookup(&text);
    }

    #[test]
    fn arbitrary_json_under_real_tables_never_panics(doc in document()) {
        check(&doc.to_string());
    }

    #[test]
    fn mutated_fixture_values_never_panic(
        which in 0..FIXTURES.len(),
        edits in prop::collection::vec((prop::collection::vec(any::<usize>(), 1..5), json_value()), 1..4),
    ) {
        let mut doc: Value = serde_json::from_str(FIXTURES[which]).expect("fixture is JSON");
        for (path, new) in edits {
            replace_leaf(&mut doc, &path, new);
        }
        check(&doc.to_string());
    }

    #[test]
    fn mutated_fixture_bytes_never_panic(
        which in 0..(FIXTURES.len() + PG_LOOKUPS.len()),
        edits in prop::collection::vec(byte_edit(), 1..8),
    ) {
        let source = FIXTURES.get(which).or_else(|| PG_LOOKUPS.get(which - FIXTURES.len()));
        let mut bytes = source.expect("index in range").as_bytes().to_vec();
        for edit in edits {
            let len = bytes.len().max(1);
            match edit {
                ByteEdit::Set(p, b) => {
                    if let Some(slot) = bytes.get_mut(p % len) {
                        *slot = b;
                    }
                }
                ByteEdit::Insert(p, b) => bytes.insert(p % (bytes.len() + 1), b),
                ByteEdit::Delete(p, n) => {
                    let start = p % len;
                    let end = (start + n).min(bytes.len());
                    if start < end {
                        bytes.drain(start..end);
                    }
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        check(&text);
        let _ = sonic::parse_pg_profile_lookup(&text);
    }
}
