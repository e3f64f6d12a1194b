//! SONiC's own mock COUNTERS_DB tables (sonic-utilities `tests/mock_tables`, copied in
//! `test_data/sonic/`) through the reader's translation: every value comes out under
//! the telemetry schema's entity and name, equal to the table's, read from the table
//! itself rather than restated here.

use std::collections::BTreeMap;

use xirang_monitor::sonic::{Snapshot, hash_keys, objects, snapshot_from_json, translate};
use xirang_telemetry::CounterValue;

fn fixture(name: &str) -> Snapshot {
    let path = format!("{}/test_data/sonic/{name}", env!("CARGO_MANIFEST_DIR"));
    snapshot_from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn field<'a>(snap: &'a Snapshot, key: &str, f: &str) -> Option<&'a str> {
    snap.get(key)?
        .iter()
        .find(|(k, _)| k == f)
        .map(|(_, v)| v.as_str())
}

fn by_entity(values: &[CounterValue]) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for v in values {
        assert!(
            m.insert((v.entity.clone(), v.name.clone()), v.value).is_none(),
            "{} {} twice",
            v.entity,
            v.name
        );
    }
    m
}

/// Every port's PFC frames per priority and direction, every queue's ECN marks, drops,
/// packets and watermarks, and the PFC watchdog's state equal the tables'.
fn check(file: &str, switch: &str) -> usize {
    let snap = fixture(file);
    let mut problems = Vec::new();
    let objs = objects(&snap, &mut problems);
    let r = translate(switch, "ns", &snap);
    assert!(
        problems.is_empty() && r.problems.is_empty(),
        "{problems:?} {:?}",
        r.problems
    );
    let got = by_entity(&r.values);
    let mut checked = 0;
    for (port, oid) in &objs.ports {
        let key = format!("COUNTERS:{oid}");
        for p in 0..8 {
            for dir in ["RX", "TX"] {
                let name = format!("SAI_PORT_STAT_PFC_{p}_{dir}_PKTS");
                let want = field(&snap, &key, &name).map(|v| v.parse::<u64>().unwrap());
                assert_eq!(
                    got.get(&(format!("{switch}:{port}"), name.clone())).copied(),
                    want,
                    "{port} {name}"
                );
                checked += want.is_some() as usize;
            }
        }
    }
    for (port, q, oid, _) in &objs.queues {
        let entity = format!("{switch}:{port}/q{q}");
        let key = format!("COUNTERS:{oid}");
        for name in [
            "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
            "SAI_QUEUE_STAT_DROPPED_PACKETS",
            "SAI_QUEUE_STAT_PACKETS",
            "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
        ] {
            let want = field(&snap, &key, name).map(|v| v.parse::<u64>().unwrap());
            assert_eq!(
                got.get(&(entity.clone(), name.to_string())).copied(),
                want,
                "{entity} {name}"
            );
            checked += want.is_some() as usize;
        }
        // The persistent watermark is the simulator's peak occupancy; the user one is kept
        // under its table's name.
        let persistent = field(
            &snap,
            &format!("PERSISTENT_WATERMARKS:{oid}"),
            "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
        );
        assert_eq!(
            got.get(&(entity.clone(), "SAI_QUEUE_STAT_WATERMARK_BYTES".into()))
                .copied(),
            persistent.map(|v| v.parse().unwrap()),
            "{entity}"
        );
        let user = field(
            &snap,
            &format!("USER_WATERMARKS:{oid}"),
            "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
        );
        assert_eq!(
            got.get(&(
                entity.clone(),
                "USER_WATERMARKS/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES".into()
            ))
            .copied(),
            user.map(|v| v.parse().unwrap()),
            "{entity}"
        );
        let stormed = match field(&snap, &key, "PFC_WD_STATUS") {
            Some("stormed") => Some(1),
            Some("operational") => Some(0),
            Some(other) => panic!("{other}"),
            None => None,
        };
        assert_eq!(
            got.get(&(entity.clone(), "PFC_WD_STORMED".into())).copied(),
            stormed,
            "{entity}"
        );
        checked += persistent.is_some() as usize + user.is_some() as usize + stormed.is_some() as usize;
    }
    for (port, pg, oid) in &objs.pgs {
        let entity = format!("{switch}:{port}/pg{pg}");
        for (table, f) in [
            (
                "PERSISTENT_WATERMARKS",
                "SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES",
            ),
            (
                "USER_WATERMARKS",
                "SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES",
            ),
        ] {
            let want = field(&snap, &format!("{table}:{oid}"), f).map(|v| v.parse::<u64>().unwrap());
            assert_eq!(
                got.get(&(entity.clone(), format!("{table}/{f}"))).copied(),
                want,
                "{entity} {f}"
            );
            checked += want.is_some() as usize;
        }
    }
    // The reader asks Redis for the name maps and the hashes `hash_keys` names, nothing
    // else: from those alone the translation is the same.
    let mut asked = Snapshot::new();
    for k in xirang_monitor::sonic::NAME_MAPS
        .iter()
        .map(|m| m.to_string())
        .chain(["COUNTERS_PG_INDEX_MAP".to_string()])
        .chain(hash_keys(&objs))
    {
        if let Some(h) = snap.get(&k) {
            asked.insert(k, h.clone());
        }
    }
    assert!(
        asked.len() < snap.len(),
        "the fixture has more than the reader reads"
    );
    assert_eq!(by_entity(&translate(switch, "ns", &asked).values), got);
    checked
}

#[test]
fn the_single_asic_tables_read_back_value_for_value() {
    let n = check("counters_db.json", "sonic1");
    // 3 ports x 8 priorities x rx/tx of PFC frames, and the queues' counters: the test
    // compared hundreds of values, not none.
    assert!(n > 400, "{n}");
    let r = translate("sonic1", "", &fixture("counters_db.json"));
    let v = by_entity(&r.values);
    // Spot values SOURCE.md names: Ethernet0's PFC RX on priority 3 is 203, TX 213;
    // Ethernet0:3 is stormed, Ethernet4:3 operational.
    assert_eq!(
        v[&("sonic1:Ethernet0".into(), "SAI_PORT_STAT_PFC_3_RX_PKTS".into())],
        203
    );
    assert_eq!(
        v[&("sonic1:Ethernet0".into(), "SAI_PORT_STAT_PFC_3_TX_PKTS".into())],
        213
    );
    assert_eq!(v[&("sonic1:Ethernet0/q3".into(), "PFC_WD_STORMED".into())], 1);
    assert_eq!(v[&("sonic1:Ethernet4/q3".into(), "PFC_WD_STORMED".into())], 0);
    // The PFC history's estimate stands in for the pause time SAI does not report here.
    assert!(v.contains_key(&(
        "sonic1:Ethernet0".into(),
        "SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US".into()
    )));
    assert!(
        !v.keys()
            .any(|(_, n)| n.starts_with("EST_") || n.ends_with("_LAST"))
    );
}

#[test]
fn each_asic_namespace_reads_through_its_own_name_maps() {
    assert!(check("asic0-counters_db.json", "sonic1") > 0);
    assert!(check("asic1-counters_db.json", "sonic1") > 0);
    // asic0's PG map misspells `Enternet0:0`; its PG port map still places them on
    // Ethernet0. asic1 reuses asic0's PG object ids for its own ports.
    let a0 = by_entity(&translate("sonic1", "asic0", &fixture("asic0-counters_db.json")).values);
    let a1 = by_entity(&translate("sonic1", "asic1", &fixture("asic1-counters_db.json")).values);
    assert!(a0.keys().any(|(e, _)| e == "sonic1:Ethernet0/pg0"));
    assert!(!a0.keys().any(|(e, _)| e.contains("Enternet")));
    assert!(a1.keys().any(|(e, _)| e == "sonic1:Ethernet-BP256/pg0"));
    assert!(!a1.keys().any(|(e, _)| e.starts_with("sonic1:Ethernet0")));
}

#[test]
fn garbled_values_are_problems_with_their_key_and_field() {
    let mut snap = fixture("counters_db.json");
    let key = "COUNTERS:oid:0x1000000000012".to_string();
    for (f, v) in snap.get_mut(&key).unwrap() {
        if f == "SAI_PORT_STAT_PFC_3_RX_PKTS" {
            *v = "12abc".into();
        }
    }
    let q = "COUNTERS:oid:0x1500000000035a".to_string();
    for (f, v) in snap.get_mut(&q).unwrap() {
        if f == "PFC_WD_STATUS" {
            *v = "melted".into();
        }
    }
    let r = translate("s", "", &snap);
    assert!(
        r.problems.contains(&format!(
            "{key}: SAI_PORT_STAT_PFC_3_RX_PKTS: expected a decimal counter, found `12abc`"
        )),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems
            .iter()
            .any(|p| p.starts_with(&format!("{q}: PFC_WD_STATUS: expected"))),
        "{:?}",
        r.problems
    );
    assert!(
        !r.values
            .iter()
            .any(|v| v.entity == "s:Ethernet0" && v.name == "SAI_PORT_STAT_PFC_3_RX_PKTS")
    );
}

#[test]
fn urls_parse_and_bad_ones_say_what_was_expected() {
    use xirang_monitor::redis::Endpoint;
    use xirang_monitor::sonic::SonicUrl;
    let u: SonicUrl = "redis://10.0.0.1:6380/5?switch=leaf1&namespace=asic0"
        .parse()
        .unwrap();
    assert_eq!(
        u.endpoint,
        Endpoint::Tcp {
            host: "10.0.0.1".into(),
            port: 6380
        }
    );
    assert_eq!(
        (u.db, u.switch.as_deref(), u.namespace.as_deref()),
        (5, Some("leaf1"), Some("asic0"))
    );
    let u: SonicUrl = "redis://sw1".parse().unwrap();
    assert_eq!(
        (u.db, u.endpoint.to_string()),
        (2, "redis://sw1:6379".to_string())
    );
    let u: SonicUrl = "unix:///var/run/redis0/redis.sock?db=2".parse().unwrap();
    assert_eq!(u.endpoint, Endpoint::Unix("/var/run/redis0/redis.sock".into()));
    let u: SonicUrl = "redis://[::1]:7000".parse().unwrap();
    assert_eq!(u.endpoint.to_string(), "redis://[::1]:7000");
    for (bad, want) in [
        ("http://x", "unknown scheme"),
        ("redis://:6379", "no host"),
        ("redis://h:0", "port `0`"),
        ("redis://h:99999", "port `99999`"),
        ("redis://h/16", "database `16`"),
        ("unix://relative.sock", "not absolute"),
        ("redis://h?color=red", "unknown parameter `color`"),
        ("redis://h?switch=a:b", "contains `:`"),
        ("redis://h?switch=", "has no value"),
    ] {
        let e = bad.parse::<SonicUrl>().unwrap_err();
        assert!(e.contains(want) && e.contains("expected redis://"), "{bad}: {e}");
    }
}
