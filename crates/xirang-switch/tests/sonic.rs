//! SONiC config_db reader against real sonic-buildimage sample outputs (test_data/sonic,
//! see SOURCE.md there) plus small hand-written documents for what the fixtures lack.

use std::path::Path;

use xirang_switch::sonic::{
    self, Color, ConfigDb, OwnHostSource, SonicError, find_pg_profile, load_pg_profile_lookup, normalize_ref,
};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/sonic");

fn fixture(name: &str) -> ConfigDb {
    let path = Path::new(DIR).join(name);
    match sonic::load(&path) {
        Ok(db) => db,
        Err(e) => panic!("{e}"),
    }
}

fn parse_ok(text: &str) -> ConfigDb {
    match sonic::parse(text) {
        Ok(db) => db,
        Err(e) => panic!("{e}"),
    }
}

fn parse_err(text: &str) -> String {
    match sonic::parse(text) {
        Ok(db) => panic!("expected an error, parsed {db:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_fixture_parses_and_serialises() {
    let mut n = 0;
    for entry in std::fs::read_dir(DIR).expect("test_data/sonic exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let db = sonic::load(&path).unwrap_or_else(|e| panic!("{e}"));
            // The CLI prints --json: tuple-keyed maps would fail only at this point.
            serde_json::to_string(&db).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert_eq!(n, 9);
}

#[test]
fn single_asic_fixtures_have_no_multi_asic_section() {
    for name in [
        "qos-mellanox4600c-c64.json",
        "qos-arista7260-t1.json",
        "qos-dell6100.json",
        "buffers-mellanox4600c-t1.json",
        "buffers-mellanox4600c-t1-dynamic.json",
        "buffer-arista7260-t1.json",
        "buffers-dell6100.json",
    ] {
        let db = fixture(name);
        assert_eq!(db.multi_asic, None, "{name}");
        // Nothing new in the --json output of a single-ASIC switch.
        let json = serde_json::to_value(&db).expect("serialises");
        assert!(json.get("multi_asic").is_none(), "{name}");
        assert!(db.other_tables.keys().all(|t| !t.contains('|')), "{name}");
    }
}

#[test]
fn voq_line_card_keeps_its_own_ports_only() {
    let db = fixture("qos-arista7800r3-48cq2-lc-voq.json");
    let m = db.multi_asic.as_ref().expect("host-qualified keys");
    // No DEVICE_METADATA in this file: dut-lc3 is the card whose QUEUE entries have schedulers.
    assert_eq!(m.own_host, "dut-lc3");
    assert_eq!(m.own_host_source, OwnHostSource::Inferred);
    assert_eq!(m.own_asic, None);
    assert_eq!(m.skipped.len(), 2);
    assert_eq!(m.skipped["dut-lc4|Asic0"], 96);
    assert_eq!(m.skipped["dut-lc5|Asic0"], 96);
    assert_eq!(m.port_asic.len(), 48);
    assert!(m.port_asic.values().all(|a| a == "Asic0"));
    assert_eq!(m.notes.len(), 1, "{:?}", m.notes);
    assert!(m.notes[0].contains("kept host `dut-lc3`"), "{}", m.notes[0]);
    assert!(m.notes[0].contains("(315;"), "{}", m.notes[0]);

    // 48 ports, not 3 × 48: remote cards' ports share the local names (Ethernet0..188), so
    // merging them would also have overwritten the local queues 3 and 4 below.
    assert_eq!(db.queues.len(), 48);
    let q3 = &db.queues["Ethernet0"][&3];
    assert_eq!(q3.scheduler.as_deref(), Some("scheduler.1"));
    assert_eq!(q3.wred_profile.as_deref(), Some("AZURE_LOSSLESS"));
    assert_eq!(
        db.queues["Ethernet0"].keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 5, 6]
    );
    let w = db.wred_of_queue("Ethernet0", 4).expect("WRED on queue 4");
    assert_eq!(w.ecn.as_deref(), Some("ecn_all"));
    assert_eq!(
        (w.green_min_bytes, w.green_max_bytes),
        (Some(2_000_000), Some(10_000_000))
    );
    assert_eq!(w.red_drop_probability_pct, Some(5));
    assert!(w.marks_ecn_green());
    assert!(db.wred_of_queue("Ethernet188", 3).is_some());
    assert!(db.wred_of_queue("Ethernet0", 0).is_none());
    assert_eq!(
        db.scheduler_of_queue("Ethernet0", 3).and_then(|s| s.weight),
        Some(15)
    );
    assert_eq!(
        db.scheduler_of_queue("Ethernet0", 0).and_then(|s| s.weight),
        Some(14)
    );
    // An inactive local port: WRED on 3/4, no scheduler and no other queues.
    let e160 = &db.queues["Ethernet160"];
    assert_eq!(e160.keys().copied().collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(e160[&3].scheduler, None);
    assert_eq!(e160[&3].wred_profile.as_deref(), Some("AZURE_LOSSLESS"));

    // PORT_QOS_MAP keeps local port names.
    assert_eq!(db.port_qos_map.len(), 46);
    assert_eq!(db.pfc_enabled("Ethernet0"), vec![3, 4]);
    assert!(db.pfc_enabled("Ethernet160").is_empty());
    assert_eq!(db.dscp_to_tc("Ethernet0", 3), Some(3));
    assert_eq!(db.dscp_to_tc("Ethernet0", 48), Some(6));
    assert_eq!(db.queue_of_tc("Ethernet0", 4), Some(4));
    assert!(db.ports.is_empty() && db.buffer_queues.is_empty());

    let json = serde_json::to_value(&db).expect("serialises");
    assert_eq!(json["multi_asic"]["own_host_source"], "Inferred");
}

#[test]
fn voq_hostname_selects_the_host_and_asic_name_the_asic() {
    // Key shapes as in buffers_config.j2 / qos_config.j2 for a VoQ chassis (lower-case `asic1`
    // as in GCU patches): every line card's system ports are listed, the own card's first.
    let doc = r#"{
        "DEVICE_METADATA": {"localhost": {"hostname": "ixre-egl-board33", "asic_name": "asic1"}},
        "BUFFER_PROFILE": {"egress_lossless_profile": {"pool": "egress_lossless_pool", "size": "0"}},
        "BUFFER_QUEUE": {
            "ixre-egl-board33|asic1|Ethernet200|3-4": {"profile": "egress_lossless_profile"},
            "ixre-egl-board33|asic1|Ethernet200|0-2": {"profile": "egress_lossy_profile"},
            "ixre-egl-board33|asic0|Ethernet0|3-4": {"profile": "egress_lossless_profile"},
            "ixre-egl-board34|Asic1|Ethernet300|3-4": {"profile": "egress_lossless_profile"}},
        "QUEUE": {
            "IXRE-EGL-BOARD33|ASIC1|Ethernet200|3": {"scheduler": "scheduler.1", "wred_profile": "AZURE_LOSSLESS"},
            "ixre-egl-board34|Asic1|Ethernet300|3": {"wred_profile": "AZURE_LOSSLESS"},
            "Ethernet208|3": {"wred_profile": "AZURE_LOSSLESS"}},
        "BUFFER_PG": {"Ethernet200|3-4": {"profile": "NULL"}},
        "PORT_QOS_MAP": {"Ethernet200": {"pfc_enable": "3,4"}, "global": {"dscp_to_tc_map": "AZURE"}},
        "PORT": {"ixre-egl-board33|asic1|Ethernet200": {"speed": "400000"}, "Ethernet208": {"mtu": "9100"}},
        "PFC_WD": {"ixre-egl-board33|asic1|Ethernet200": {"action": "drop"}, "GLOBAL": {"POLL_INTERVAL": "200"}}
    }"#;
    let db = parse_ok(doc);
    let m = db.multi_asic.as_ref().expect("qualified keys");
    assert_eq!(m.own_host, "ixre-egl-board33");
    assert_eq!(m.own_host_source, OwnHostSource::DeviceMetadata);
    assert_eq!(m.own_asic.as_deref(), Some("asic1"));
    // The own host's asic0 entry is another namespace's: skipped like the other card's.
    assert_eq!(m.skipped["ixre-egl-board33|asic0"], 1);
    assert_eq!(m.skipped["ixre-egl-board34|Asic1"], 2);
    assert_eq!(m.port_asic["Ethernet200"], "asic1");
    assert!(m.notes.is_empty(), "{:?}", m.notes);

    assert_eq!(
        db.buffer_queues.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["Ethernet200"]
    );
    assert_eq!(
        db.buffer_queues["Ethernet200"]
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        db.queue_profile("Ethernet200", 4).and_then(|p| p.size_bytes),
        Some(0)
    );
    assert_eq!(
        db.queues.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["Ethernet200", "Ethernet208"]
    );
    assert_eq!(
        db.queues["Ethernet200"][&3].scheduler.as_deref(),
        Some("scheduler.1")
    );
    assert!(db.buffer_pgs["Ethernet200"][&3].dynamic);
    assert_eq!(db.pfc_enabled("Ethernet200"), vec![3, 4]);
    assert_eq!(db.ports["Ethernet200"].speed_mbps, Some(400_000));
    assert_eq!(db.port_mtu("Ethernet208"), Some(9100));
    assert!(db.pfc_wd_on("Ethernet200"));
    assert_eq!(
        db.pfc_wd.global.as_ref().and_then(|g| g.poll_interval_ms),
        Some(200)
    );
}

#[test]
fn voq_unmatched_hostname_and_host_ties_are_noted() {
    let db = parse_ok(
        r#"{"DEVICE_METADATA": {"localhost": {"hostname": "lc9"}},
            "QUEUE": {"lc1|Asic0|Ethernet0|3": {"scheduler": "s"}, "lc2|Asic0|Ethernet0|3": {"wred_profile": "w"}}}"#,
    );
    let m = db.multi_asic.as_ref().expect("qualified keys");
    assert_eq!(m.own_host, "lc9");
    assert!(db.queues.is_empty());
    assert_eq!(m.skipped.values().sum::<usize>(), 2);
    assert!(
        m.notes[0].contains("hostname `lc9` is in no host-qualified key"),
        "{:?}",
        m.notes
    );

    // Without a hostname and with nothing to tell the hosts apart, the pick is said to be a guess.
    let db = parse_ok(
        r#"{"QUEUE": {"lc2|Asic0|Ethernet0|3": {"wred_profile": "w"}, "lc1|Asic0|Ethernet0|3": {"wred_profile": "w"}}}"#,
    );
    let m = db.multi_asic.as_ref().expect("qualified keys");
    assert_eq!(m.own_host, "lc1");
    assert_eq!(m.own_host_source, OwnHostSource::Inferred);
    assert_eq!(m.skipped["lc2|Asic0"], 1);
    assert!(m.notes[0].contains("This is a guess"), "{:?}", m.notes);

    // One host and no hostname: kept without comment.
    let db = parse_ok(r#"{"BUFFER_QUEUE": {"lc1|asic0|Ethernet0|3-4": {"profile": "p"}}}"#);
    let m = db.multi_asic.as_ref().expect("qualified keys");
    assert_eq!((m.own_host.as_str(), m.notes.len()), ("lc1", 0));
    assert_eq!(db.buffer_queues["Ethernet0"].len(), 2);
}

#[test]
fn malformed_multi_asic_keys_name_table_and_key() {
    assert_eq!(
        parse_err(r#"{"QUEUE": {"dut|Asic0|": {"wred_profile": "AZURE_LOSSLESS"}}}"#),
        r#"QUEUE|dut|Asic0|: expected a key `<port>[,<port>...]|<index or a-b range>`, or multi-ASIC `<host>|asic<N>|<port>[,<port>...]|<index or a-b range>`, found "dut|Asic0|""#
    );
    assert!(
        parse_err(r#"{"BUFFER_QUEUE": {"|asic1|Ethernet0|3-4": {"profile": "p"}}}"#)
            .starts_with("BUFFER_QUEUE||asic1|Ethernet0|3-4: expected a key")
    );
    // Host and ASIC but no queue index.
    assert!(
        parse_err(r#"{"QUEUE": {"dut|Asic0|Ethernet0": {}}}"#)
            .starts_with("QUEUE|dut|Asic0|Ethernet0: expected a key")
    );
    // Checked even though another host's entry would be skipped.
    let device = r#""DEVICE_METADATA": {"localhost": {"hostname": "dut"}}"#;
    assert!(
        parse_err(&format!(
            r#"{{{device}, "QUEUE": {{"other|Asic0|Ethernet0|x": {{}}}}}}"#
        ))
        .starts_with("QUEUE|other|Asic0|Ethernet0|x: expected a key")
    );
    // `Asic` without a number is not an ASIC name: the key is read as unprefixed, and fails.
    assert!(
        parse_err(r#"{"QUEUE": {"dut|Asic|Ethernet0|3": {}}}"#).starts_with("QUEUE|dut|Asic|Ethernet0|3: ")
    );
    assert_eq!(
        parse_err(r#"{"PORT_QOS_MAP": {"dut|asic0|": {"pfc_enable": "3,4"}}}"#),
        r#"PORT_QOS_MAP|dut|asic0|: expected a port name or comma-separated port names, optionally prefixed `<host>|asic<N>|` (multi-ASIC), found "dut|asic0|""#
    );
    // `|` cannot be part of a port name.
    assert!(
        parse_err(r#"{"PORT_QOS_MAP": {"Ethernet0|3": {"pfc_enable": "3,4"}}}"#)
            .starts_with("PORT_QOS_MAP|Ethernet0|3: expected a port name")
    );
    assert!(
        parse_err(r#"{"PORT": {"dut|Asic0|": {}}}"#)
            .starts_with("PORT|dut|Asic0|: expected a port name, optionally prefixed")
    );
}

#[test]
fn flat_redis_dump_form_reads_like_nested() {
    let db = fixture("config_db-multiasic-asic0-flat.json");
    let md = db.device_metadata.as_ref().expect("DEVICE_METADATA|localhost");
    assert_eq!(md.hostname.as_deref(), Some("sonic"));
    assert_eq!(md.extra["asic_name"], "asic0");
    assert_eq!(md.device_type.as_deref(), Some("LeafRouter"));
    // Keys carry no host or ASIC: the namespace is the file.
    assert_eq!(db.multi_asic, None);

    assert_eq!(
        db.ports.keys().map(String::as_str).collect::<Vec<_>>(),
        vec![
            "Ethernet-BP0",
            "Ethernet-BP4",
            "Ethernet0",
            "Ethernet16",
            "Ethernet20",
            "Ethernet4"
        ]
    );
    assert_eq!(db.ports["Ethernet0"].speed_mbps, Some(40_000));
    assert_eq!(db.ports["Ethernet-BP0"].extra["role"], "Int");
    assert_eq!(db.port_mtu("Ethernet4"), Some(9100));

    assert_eq!(db.pfc_wd.ports.len(), 4);
    assert!(db.pfc_wd_on("Ethernet-BP4"));
    let g = db.pfc_wd.global.as_ref().expect("PFC_WD|GLOBAL");
    assert_eq!((g.poll_interval_ms, g.big_red_switch), (Some(199), Some(true)));
    assert_eq!(db.pfc_wd.ports["Ethernet0"].detection_time_ms, Some(200));

    assert_eq!(db.port_qos_map.len(), 7);
    assert!(db.port_qos_map.values().all(|m| m.pfc_enable == [3, 4]));

    // `[SCHEDULAR|scheduler.0]` (sic) normalises like any bracketed reference.
    assert_eq!(
        db.queues["Ethernet4"][&0].scheduler.as_deref(),
        Some("scheduler.0")
    );
    let w = db.wred_of_queue("Ethernet4", 1).expect("QUEUE|Ethernet4|1 WRED");
    assert_eq!(
        (w.green_min_bytes, w.green_max_bytes),
        (Some(1_048_576), Some(2_097_152))
    );
    assert!(!w.green_enable, "no wred_green_enable in this mock");
    assert_eq!(
        db.buffer_pools["ingress_lossless_pool_hbm"].size_bytes,
        Some(139_458_240)
    );
    assert_eq!(
        db.buffer_profiles["ingress_lossless_profile_hbm"].static_th,
        Some(12_121_212)
    );

    // Unmodelled tables are regrouped too.
    assert_eq!(db.other_tables["VLAN"]["Vlan1000"]["vlanid"], "1000");
    assert_eq!(db.other_tables["VLAN"].as_object().map(|v| v.len()), Some(4));
    assert_eq!(
        db.other_tables["VLAN_INTERFACE"]["Vlan1000|192.168.0.1/21"]["NULL"],
        "NULL"
    );
    assert!(db.other_tables.keys().all(|t| !t.contains('|')));
}

#[test]
fn flat_and_nested_forms_mix_but_not_for_one_entry() {
    let db = parse_ok(
        r#"{"PORT_QOS_MAP": {"Ethernet0": {"pfc_enable": "3,4"}},
            "PORT_QOS_MAP|global": {"dscp_to_tc_map": "AZURE"},
            "DSCP_TO_TC_MAP|AZURE": {"26": "3"}}"#,
    );
    assert_eq!(db.pfc_enabled("Ethernet0"), vec![3, 4]);
    assert_eq!(db.dscp_to_tc("Ethernet0", 26), Some(3));
    assert_eq!(
        parse_err(r#"{"QUEUE": {"Ethernet0|3": {}}, "QUEUE|Ethernet0|3": {"scheduler": "s"}}"#),
        "QUEUE|Ethernet0|3: expected one entry per key, not both nested under its table and as a \
         top-level `TABLE|key`, found an object with 1 keys"
    );
}

#[test]
fn mellanox_qos_wred_profile() {
    let db = fixture("qos-mellanox4600c-c64.json");
    let w = &db.wred_profiles["AZURE_LOSSLESS"];
    assert_eq!(w.ecn.as_deref(), Some("ecn_all"));
    assert!(w.green_enable && w.yellow_enable && w.red_enable);
    assert_eq!(w.green_min_bytes, Some(2_000_000));
    assert_eq!(w.green_max_bytes, Some(10_000_000));
    assert_eq!(w.green_drop_probability_pct, Some(5));
    assert_eq!(w.yellow_min_bytes, Some(2_000_000));
    assert_eq!(w.red_max_bytes, Some(10_000_000));
    assert_eq!(w.red_drop_probability_pct, Some(5));
    assert!(w.marks_ecn_green());
    assert!(w.marks_ecn(Color::Red));
}

#[test]
fn mellanox_qos_queues_and_schedulers() {
    let db = fixture("qos-mellanox4600c-c64.json");
    assert_eq!(db.queues.len(), 28);
    assert!(db.queues.values().all(|q| q.len() == 8));
    let q3 = &db.queues["Ethernet0"][&3];
    assert_eq!(q3.scheduler.as_deref(), Some("scheduler.1"));
    assert_eq!(q3.wred_profile.as_deref(), Some("AZURE_LOSSLESS"));
    assert!(db.wred_of_queue("Ethernet0", 4).is_some());
    assert!(db.wred_of_queue("Ethernet0", 0).is_none());
    // Uplinks keep queues 2 and 6 lossy; the other ports make them lossless (dual-ToR).
    assert!(db.wred_of_queue("Ethernet0", 2).is_none());
    assert!(db.wred_of_queue("Ethernet136", 2).is_some());
    assert!(db.wred_of_queue("Ethernet136", 6).is_some());
    let s1 = db.scheduler_of_queue("Ethernet0", 3).expect("scheduler.1");
    assert_eq!((s1.kind.as_deref(), s1.weight), (Some("DWRR"), Some(15)));
    let s0 = db.scheduler_of_queue("Ethernet0", 0).expect("scheduler.0");
    assert_eq!(s0.weight, Some(14));
}

#[test]
fn mellanox_qos_pfc_enable_per_port() {
    let db = fixture("qos-mellanox4600c-c64.json");
    assert_eq!(db.port_qos_map.len(), 29);
    for uplink in [
        "Ethernet0",
        "Ethernet4",
        "Ethernet16",
        "Ethernet20",
        "Ethernet64",
        "Ethernet68",
        "Ethernet80",
        "Ethernet84",
    ] {
        assert_eq!(db.pfc_enabled(uplink), vec![3, 4], "{uplink}");
        assert_eq!(
            db.port_qos_map[uplink].dscp_to_tc_map.as_deref(),
            Some("AZURE_UPLINK")
        );
    }
    assert_eq!(db.pfc_enabled("Ethernet136"), vec![2, 3, 4, 6]);
    // SOURCE.md says pfcwd_sw_enable matches pfc_enable; the file says "3,4" everywhere.
    assert_eq!(db.port_qos_map["Ethernet136"].pfcwd_sw_enable, vec![3, 4]);
    let with_extra = db.port_qos_map.values().filter(|m| m.pfc_enable == [2, 3, 4, 6]);
    assert_eq!(with_extra.count(), 20);
    assert_eq!(db.pfc_enabled("global"), Vec::<u8>::new());
    assert_eq!(db.pfc_enabled("Ethernet999"), Vec::<u8>::new());
    // No PFC_WD table in a rendered qos.json: pfcwd_sw_enable alone does not start it.
    assert!(!db.pfc_wd_on("Ethernet0"));
}

#[test]
fn mellanox_qos_maps() {
    let db = fixture("qos-mellanox4600c-c64.json");
    let azure = &db.dscp_to_tc_maps["AZURE"];
    assert_eq!(azure.len(), 64);
    assert_eq!(azure[&3], 3);
    assert_eq!(azure[&4], 4);
    assert_eq!(azure[&46], 5);
    assert_eq!(azure[&48], 7);
    assert_eq!(azure[&8], 0);
    assert_eq!(azure[&26], 1);
    // Per-port map first: DSCP 2 is lossless TC 2 only on non-uplink ports.
    assert_eq!(db.dscp_to_tc("Ethernet136", 2), Some(2));
    assert_eq!(db.dscp_to_tc("Ethernet0", 2), Some(1));
    // Unknown port: the `global` binding applies.
    assert_eq!(db.dscp_to_tc("Ethernet999", 6), Some(6));
    assert_eq!(db.dscp_to_tc("Ethernet0", 64), None);
    assert_eq!(db.queue_of_tc("Ethernet0", 3), Some(3));
    assert_eq!(db.queue_of_tc("Ethernet999", 3), None);
    assert_eq!(db.pg_of_tc("Ethernet0", 3), Some(3));
    assert_eq!(db.pg_of_tc("Ethernet0", 6), Some(6));
    assert_eq!(db.pg_of_tc("Ethernet0", 7), Some(0));
    assert_eq!(db.pfc_priority_to_queue_maps["AZURE"][&4], 4);
}

#[test]
fn mellanox_static_buffers() {
    let db = fixture("buffers-mellanox4600c-t1.json");
    let ingress = &db.buffer_pools["ingress_lossless_pool"];
    assert_eq!(ingress.size_bytes, Some(44_130_304));
    assert_eq!(ingress.xoff_bytes, Some(8_790_016));
    assert_eq!(ingress.pool_type.as_deref(), Some("ingress"));
    assert_eq!(ingress.mode.as_deref(), Some("dynamic"));
    assert_eq!(
        db.buffer_pools["egress_lossless_pool"].size_bytes,
        Some(60_817_392)
    );
    assert_eq!(db.buffer_pools["egress_lossy_pool"].size_bytes, Some(44_130_304));
    assert_eq!(db.buffer_pools["ingress_zero_pool"].size_bytes, Some(0));

    let p = &db.buffer_profiles;
    assert_eq!(p["ingress_lossless_profile"].dynamic_th, Some(7));
    assert_eq!(p["ingress_lossy_profile"].dynamic_th, Some(3));
    assert_eq!(p["egress_lossless_zero_profile"].dynamic_th, Some(-8));
    assert_eq!(p["ingress_lossy_pg_zero_profile"].static_th, Some(0));
    assert_eq!(p["egress_lossy_profile"].size_bytes, Some(9216));
    assert_eq!(
        p["egress_lossy_profile"].pool.as_deref(),
        Some("egress_lossy_pool")
    );
    // Lossless PG profiles are created at runtime from pg_profile_lookup.ini: none here.
    assert!(p.values().all(|prof| !prof.is_lossless()));

    assert!(db.buffer_pgs.values().all(|pgs| pgs.keys().eq([&0])));
    let lossy = db.pg_profile("Ethernet0", 0).expect("PG 0 profile");
    assert_eq!(lossy.dynamic_th, Some(3));
    assert_eq!(
        db.buffer_pgs["Ethernet8"][&0].profile.as_deref(),
        Some("ingress_lossy_pg_zero_profile")
    );
    assert!(db.pg_profile("Ethernet0", 3).is_none());

    // `Ethernet0|3-4` expands to two queues.
    assert_eq!(
        db.queue_profile("Ethernet0", 3).and_then(|q| q.dynamic_th),
        Some(7)
    );
    assert_eq!(db.buffer_queues["Ethernet0"].len(), 8);
    assert_eq!(
        db.buffer_queues["Ethernet136"][&6].profile.as_deref(),
        Some("egress_lossless_profile")
    );

    assert_eq!(db.cable_length.len(), 64);
    assert_eq!(db.cable_length["Ethernet0"], 300);
    assert_eq!(db.cable_length["Ethernet8"], 5);
    assert_eq!(db.cable_length["Ethernet136"], 40);
    assert!(db.other_tables.contains_key("BUFFER_PORT_INGRESS_PROFILE_LIST"));
}

#[test]
fn mellanox_dynamic_buffers() {
    let db = fixture("buffers-mellanox4600c-t1-dynamic.json");
    assert_eq!(db.buffer_pools["ingress_lossless_pool"].size_bytes, None);
    assert_eq!(db.buffer_pools["egress_lossy_pool"].size_bytes, None);
    assert_eq!(
        db.buffer_pools["egress_lossless_pool"].size_bytes,
        Some(60_817_392)
    );

    let pg3 = &db.buffer_pgs["Ethernet0"][&3];
    assert!(pg3.dynamic);
    assert_eq!(pg3.profile, None);
    assert!(db.buffer_pgs["Ethernet0"][&4].dynamic);
    assert!(!db.buffer_pgs["Ethernet0"].contains_key(&2));
    assert!(db.pg_profile("Ethernet0", 3).is_none());
    assert!(!db.buffer_pgs["Ethernet0"][&0].dynamic);
    // `Ethernet136|2-4` and `Ethernet136|6`.
    let e136: Vec<u8> = db.buffer_pgs["Ethernet136"]
        .iter()
        .filter(|(_, b)| b.dynamic)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(e136, vec![2, 3, 4, 6]);

    let lossless_pattern = &db.other_tables["LOSSLESS_TRAFFIC_PATTERN"]["AZURE"];
    assert_eq!(lossless_pattern["mtu"], "1024");
    assert_eq!(
        db.other_tables["DEFAULT_LOSSLESS_BUFFER_PARAMETER"]["AZURE"]["default_dynamic_th"],
        "0"
    );
}

#[test]
fn arista_qos_and_buffers() {
    let db = fixture("qos-arista7260-t1.json");
    let w = &db.wred_profiles["AZURE_LOSSLESS"];
    assert_eq!(
        (w.green_min_bytes, w.green_max_bytes),
        (Some(2_000_000), Some(10_000_000))
    );
    assert_eq!(
        (w.yellow_min_bytes, w.yellow_max_bytes),
        (Some(1_048_576), Some(2_097_152))
    );
    assert_eq!(
        (w.red_min_bytes, w.red_max_bytes),
        (Some(1_048_576), Some(2_097_152))
    );
    assert_eq!(db.pfc_enabled("Ethernet0"), vec![3, 4]);
    assert_eq!(db.pfc_enabled("Ethernet252"), vec![2, 3, 4, 6]);
    assert_eq!(db.dscp_to_tc("Ethernet0", 48), Some(7));

    let db = fixture("buffer-arista7260-t1.json");
    let ingress = &db.buffer_pools["ingress_lossless_pool"];
    assert_eq!(
        (ingress.size_bytes, ingress.xoff_bytes),
        (Some(33_262_528), Some(8_965_632))
    );
    assert_eq!(
        db.buffer_pools["egress_lossless_pool"].size_bytes,
        Some(43_481_152)
    );
    assert_eq!(
        db.buffer_pools["egress_lossless_pool"].mode.as_deref(),
        Some("static")
    );
    assert_eq!(db.buffer_pools["egress_lossy_pool"].size_bytes, Some(26_610_688));
    let lossy_pg = db.pg_profile("Ethernet0", 0).expect("PG 0");
    // static_th larger than the pool it draws from (33262528): as rendered upstream.
    assert_eq!(lossy_pg.static_th, Some(44_302_336));
    assert_eq!(lossy_pg.dynamic_th, None);
    assert_eq!(db.buffer_profiles["egress_lossy_profile"].dynamic_th, Some(-1));
    assert_eq!(db.buffer_profiles["egress_lossy_profile"].size_bytes, Some(1664));
    // `Ethernet136|0-1`, `|2-4`, `|5`, `|6`, `|7`.
    let lossless_queues: Vec<u8> = db.buffer_queues["Ethernet136"]
        .iter()
        .filter(|(_, b)| b.profile.as_deref() == Some("egress_lossless_profile"))
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(lossless_queues, vec![2, 3, 4, 6]);
    assert_eq!(db.cable_length.len(), 66);
    assert_eq!(db.cable_length["Ethernet0"], 300);
    assert_eq!(db.cable_length["Ethernet136"], 40);
}

#[test]
fn dell_qos_and_buffers() {
    let db = fixture("qos-dell6100.json");
    let w = &db.wred_profiles["AZURE_LOSSLESS"];
    assert_eq!(
        (w.green_min_bytes, w.green_max_bytes),
        (Some(250_000), Some(2_097_152))
    );
    assert_eq!(
        (w.yellow_min_bytes, w.red_max_bytes),
        (Some(1_048_576), Some(2_097_152))
    );
    assert!(
        db.port_qos_map
            .iter()
            .all(|(p, m)| p == "global" || m.pfc_enable == [3, 4])
    );
    assert_eq!(db.port_qos_map.len(), 45);
    // Unlike the Mellanox/Arista templates: CNP DSCP 48 → TC 6, DSCP 5 → TC 2.
    assert_eq!(db.dscp_to_tc("Ethernet0", 48), Some(6));
    assert_eq!(db.dscp_to_tc("Ethernet0", 5), Some(2));
    assert_eq!(db.pg_of_tc("Ethernet1", 7), Some(7));
    // Queue 7 is not configured at all on this platform.
    assert_eq!(
        db.queues["Ethernet0"].keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 5, 6]
    );

    let db = fixture("buffers-dell6100.json");
    let ingress = &db.buffer_pools["ingress_lossless_pool"];
    assert_eq!(
        (ingress.size_bytes, ingress.xoff_bytes),
        (Some(10_875_072), Some(4_194_112))
    );
    assert_eq!(
        db.buffer_pools["egress_lossless_pool"].size_bytes,
        Some(15_982_720)
    );
    assert_eq!(
        db.buffer_profiles["egress_lossless_profile"].static_th,
        Some(15_982_720)
    );
    assert_eq!(
        db.buffer_profiles["egress_lossless_profile"].size_bytes,
        Some(1518)
    );
    assert!(db.cable_length.values().all(|m| *m == 5));
    assert_eq!(db.cable_length.len(), 66);
    assert_eq!(db.buffer_queues["Ethernet0"].len(), 7);
}

#[test]
fn pg_profile_lookup_tables() {
    let mlnx = load_pg_profile_lookup(&Path::new(DIR).join("pg_profile_lookup-mellanox-sn4600c.ini"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mlnx.len(), 20);
    let r = find_pg_profile(&mlnx, 100_000, 5).expect("100G 5m");
    assert_eq!(
        (r.size_bytes, r.xon_bytes, r.xoff_bytes, r.threshold),
        (19456, 19456, 59392, 0)
    );
    assert_eq!(r.xon_offset_bytes, None);
    assert_eq!(
        find_pg_profile(&mlnx, 100_000, 40).map(|r| r.xoff_bytes),
        Some(66560)
    );
    assert_eq!(
        find_pg_profile(&mlnx, 100_000, 2000).map(|r| r.xoff_bytes),
        Some(234_496)
    );
    assert!(find_pg_profile(&mlnx, 400_000, 5).is_none());

    let arista =
        load_pg_profile_lookup(&Path::new(DIR).join("pg_profile_lookup-arista-7260cx3-balanced.ini"))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(arista.len(), 9);
    let r = find_pg_profile(&arista, 100_000, 300).expect("100G 300m");
    assert_eq!((r.size_bytes, r.xon_bytes, r.xoff_bytes), (1248, 1248, 101_088));
    assert_eq!(r.xon_offset_bytes, Some(2496));
    assert_eq!(
        find_pg_profile(&arista, 40_000, 5).map(|r| r.xoff_bytes),
        Some(29536)
    );
}

#[test]
fn pg_profile_lookup_errors_name_the_line() {
    let e = sonic::parse_pg_profile_lookup("# header\n100000 5m 1 2 3 0\n100000 5m x 2 3 0\n")
        .expect_err("bad size");
    assert_eq!(
        e.to_string(),
        "line 3: expected a size in bytes in column 3, found 100000 5m x 2 3 0"
    );
    assert!(sonic::parse_pg_profile_lookup("1 2 3").is_err());
}

#[test]
fn multi_port_keys_expand_and_narrower_keys_win() {
    let db = parse_ok(
        r#"{
        "BUFFER_PROFILE": {"pg_lossless_100000_40m_profile": {"pool": "[BUFFER_POOL|ingress_lossless_pool]",
            "size": "1248", "dynamic_th": "-3", "xoff": "177632", "xon": "2288", "xon_offset": "2496"},
            "ingress_lossy_profile": {"pool": "ingress_lossless_pool", "size": "0", "dynamic_th": "3"}},
        "BUFFER_PG": {"Ethernet0,Ethernet4,Ethernet8|3-4": {"profile": "[BUFFER_PROFILE|pg_lossless_100000_40m_profile]"},
                      "Ethernet4|4": {"profile": "ingress_lossy_profile"},
                      "Ethernet0, Ethernet4|0": {"profile": "ingress_lossy_profile"}},
        "QUEUE": {"Ethernet0,Ethernet4|3": {"scheduler": "[SCHEDULER|scheduler.1]", "wred_profile": "[WRED_PROFILE|AZURE_LOSSLESS]"}},
        "PORT_QOS_MAP": {"Ethernet0,Ethernet4": {"pfc_enable": "3,4", "dscp_to_tc_map": "[DSCP_TO_TC_MAP|AZURE]"},
                         "Ethernet4": {"pfc_enable": "3"}}
    }"#,
    );
    let pgs = &db.buffer_pgs;
    assert_eq!(pgs.len(), 3);
    assert_eq!(
        pgs["Ethernet0"].keys().copied().collect::<Vec<_>>(),
        vec![0, 3, 4]
    );
    assert_eq!(pgs["Ethernet8"].keys().copied().collect::<Vec<_>>(), vec![3, 4]);
    let lossless = db.pg_profile("Ethernet8", 4).expect("lossless PG");
    assert!(lossless.is_lossless());
    assert_eq!(lossless.xoff_bytes, Some(177_632));
    assert_eq!(lossless.xon_bytes, Some(2288));
    assert_eq!(lossless.xon_offset_bytes, Some(2496));
    assert_eq!(lossless.size_bytes, Some(1248));
    assert_eq!(lossless.dynamic_th, Some(-3));
    assert_eq!(lossless.pool.as_deref(), Some("ingress_lossless_pool"));
    assert!(db.pg_profile("Ethernet4", 3).is_some_and(|p| p.is_lossless()));
    assert!(db.pg_profile("Ethernet4", 4).is_some_and(|p| !p.is_lossless()));

    assert_eq!(
        db.queues["Ethernet4"][&3].scheduler.as_deref(),
        Some("scheduler.1")
    );
    assert_eq!(
        db.queues["Ethernet0"][&3].wred_profile.as_deref(),
        Some("AZURE_LOSSLESS")
    );
    assert_eq!(db.pfc_enabled("Ethernet0"), vec![3, 4]);
    assert_eq!(db.pfc_enabled("Ethernet4"), vec![3]);
    assert_eq!(
        db.port_qos_map["Ethernet0"].dscp_to_tc_map.as_deref(),
        Some("AZURE")
    );
}

#[test]
fn reference_example_port_pfcwd_metadata() {
    let db = parse_ok(
        r#"{
        "DEVICE_METADATA": {"localhost": {"hostname": "leaf1", "hwsku": "Mellanox-SN4600C-C64",
            "buffer_model": "dynamic", "type": "LeafRouter", "mac": "00:11:22:33:44:55"}},
        "PORT": {"Ethernet8": {"admin_status": "up", "speed": "400000", "mtu": "9100", "fec": "rs",
            "lanes": "9,10,11,12,13,14,15,16", "alias": "etp3", "autoneg": "off"}},
        "PFC_WD": {"GLOBAL": {"POLL_INTERVAL": "200", "BIG_RED_SWITCH": "disable"},
                   "Ethernet8": {"action": "drop", "detection_time": "200", "restoration_time": "400"}},
        "SCHEDULER": {"sched_cnp": {"type": "STRICT"}},
        "DOT1P_TO_TC_MAP": {"AZURE": {"3": "3"}},
        "VLAN": {"Vlan1000": {"vlanid": "1000"}}
    }"#,
    );
    let md = db.device_metadata.as_ref().expect("metadata");
    assert_eq!(md.hostname.as_deref(), Some("leaf1"));
    assert_eq!(md.hwsku.as_deref(), Some("Mellanox-SN4600C-C64"));
    assert_eq!(md.buffer_model.as_deref(), Some("dynamic"));
    assert_eq!(md.device_type.as_deref(), Some("LeafRouter"));
    assert_eq!(md.extra["mac"], "00:11:22:33:44:55");

    let p = &db.ports["Ethernet8"];
    assert_eq!(p.speed_mbps, Some(400_000));
    assert_eq!(p.lanes, vec![9, 10, 11, 12, 13, 14, 15, 16]);
    assert_eq!(p.fec.as_deref(), Some("rs"));
    assert_eq!(p.alias.as_deref(), Some("etp3"));
    assert_eq!(p.extra["autoneg"], "off");
    assert_eq!(db.port_mtu("Ethernet8"), Some(9100));
    assert_eq!(db.port_mtu("Ethernet0"), None);

    let g = db.pfc_wd.global.as_ref().expect("GLOBAL");
    assert_eq!((g.poll_interval_ms, g.big_red_switch), (Some(200), Some(false)));
    assert!(db.pfc_wd_on("Ethernet8"));
    assert!(!db.pfc_wd_on("Ethernet0"));
    assert!(!db.pfc_wd_on("GLOBAL"));
    let wd = &db.pfc_wd.ports["Ethernet8"];
    assert_eq!(wd.action.as_deref(), Some("drop"));
    assert_eq!(
        (wd.detection_time_ms, wd.restoration_time_ms),
        (Some(200), Some(400))
    );

    assert_eq!(db.schedulers["sched_cnp"].kind.as_deref(), Some("STRICT"));
    assert_eq!(db.dot1p_to_tc_maps["AZURE"][&3], 3);
    assert_eq!(db.other_tables["VLAN"]["Vlan1000"]["vlanid"], "1000");
    let json = serde_json::to_value(&db).expect("serialises");
    assert_eq!(json["schedulers"]["sched_cnp"]["type"], "STRICT");
}

#[test]
fn ecn_marking_needs_colour_enabled_and_covered() {
    let db = parse_ok(
        r#"{"WRED_PROFILE": {
            "gy": {"wred_green_enable": "true", "wred_yellow_enable": "true", "ecn": "ecn_green_yellow"},
            "off": {"wred_green_enable": "false", "ecn": "ecn_all"},
            "none": {"wred_green_enable": "true", "ecn": "ecn_none"},
            "noecn": {"wred_green_enable": "true", "green_min_threshold": 100}}}"#,
    );
    let w = &db.wred_profiles;
    assert!(w["gy"].marks_ecn_green() && w["gy"].marks_ecn(Color::Yellow));
    assert!(!w["gy"].marks_ecn(Color::Red));
    assert!(!w["off"].marks_ecn_green());
    assert!(!w["none"].marks_ecn_green());
    assert!(!w["noecn"].marks_ecn_green());
    // JSON numbers are accepted for numeric fields.
    assert_eq!(w["noecn"].green_min_bytes, Some(100));
}

#[test]
fn references_are_normalised() {
    assert_eq!(
        normalize_ref("[BUFFER_PROFILE|pg_lossless_100000_5m_profile]"),
        "pg_lossless_100000_5m_profile"
    );
    assert_eq!(normalize_ref("AZURE"), "AZURE");
    assert_eq!(normalize_ref(" [DSCP_TO_TC_MAP|AZURE] "), "AZURE");
}

#[test]
fn invalid_json_reports_line_and_column() {
    // Column 33 is the `}` after the trailing comma on line 3.
    let text = "{\n  \"PORT\": {\n    \"Ethernet0\": {\"mtu\": \"9100\",}\n  }\n}";
    let err = sonic::parse(text).expect_err("trailing comma");
    match &err {
        SonicError::Json { line, column, .. } => assert_eq!((*line, *column), (3, 33)),
        other => panic!("wrong variant: {other:?}"),
    }
    assert!(
        err.to_string().starts_with("invalid JSON at line 3, column 33: "),
        "{err}"
    );
    assert!(
        !err.to_string().ends_with("column 33"),
        "position not repeated: {err}"
    );
}

#[test]
fn wrong_field_type_names_table_key_and_field() {
    assert_eq!(
        parse_err(r#"{"WRED_PROFILE": {"AZURE_LOSSLESS": {"green_min_threshold": "2MB"}}}"#),
        r#"WRED_PROFILE|AZURE_LOSSLESS.green_min_threshold: expected an unsigned integer, found "2MB""#
    );
    assert_eq!(
        parse_err(r#"{"QUEUE": {"Ethernet0|3": {"scheduler": ["a"]}}}"#),
        "QUEUE|Ethernet0|3.scheduler: expected a string, found an array of 1 items"
    );
    assert_eq!(
        parse_err(r#"{"PORT": {"Ethernet0": {"mtu": "-1"}}}"#),
        r#"PORT|Ethernet0.mtu: expected an unsigned integer up to 4294967295, found "-1""#
    );
    assert_eq!(
        parse_err(r#"{"BUFFER_PROFILE": {"p": {"dynamic_th": "200"}}}"#),
        r#"BUFFER_PROFILE|p.dynamic_th: expected an integer in -128..=127, found "200""#
    );
    assert_eq!(
        parse_err(r#"{"PORT_QOS_MAP": {"Ethernet0": {"pfc_enable": "3,9"}}}"#),
        r#"PORT_QOS_MAP|Ethernet0.pfc_enable: expected a comma-separated list of priorities 0-7, found "3,9""#
    );
    assert_eq!(
        parse_err(r#"{"WRED_PROFILE": {"w": {"wred_green_enable": "yes"}}}"#),
        r#"WRED_PROFILE|w.wred_green_enable: expected "true" or "false", found "yes""#
    );
    assert_eq!(
        parse_err(r#"{"DSCP_TO_TC_MAP": {"AZURE": {"26": "x"}}}"#),
        r#"DSCP_TO_TC_MAP|AZURE.26: expected an integer 0-255, found "x""#
    );
    assert_eq!(
        parse_err(r#"{"CABLE_LENGTH": {"AZURE": {"Ethernet0": "5 metres"}}}"#),
        r#"CABLE_LENGTH|AZURE.Ethernet0: expected a cable length such as "5m", found "5 metres""#
    );
}

#[test]
fn wrong_shapes_name_the_table_or_key() {
    assert_eq!(
        parse_err("[1, 2]"),
        "top level: expected a JSON object of config_db tables, found an array of 2 items"
    );
    assert_eq!(
        parse_err(r#"{"PORT": "x"}"#),
        r#"PORT: expected an object of entries, found "x""#
    );
    assert_eq!(
        parse_err(r#"{"PORT": {"Ethernet0": null}}"#),
        "PORT|Ethernet0: expected an object of fields, found null"
    );
    assert_eq!(
        parse_err(r#"{"BUFFER_PG": {"Ethernet0|4-3": {"profile": "p"}}}"#),
        r#"BUFFER_PG|Ethernet0|4-3: expected a key `<port>[,<port>...]|<index or a-b range>`, or multi-ASIC `<host>|asic<N>|<port>[,<port>...]|<index or a-b range>`, found "Ethernet0|4-3""#
    );
    assert!(parse_err(r#"{"QUEUE": {"Ethernet0": {}}}"#).starts_with("QUEUE|Ethernet0: expected a key"));
    assert!(parse_err(r#"{"QUEUE": {",Ethernet0|3": {}}}"#).starts_with("QUEUE|,Ethernet0|3: "));
    // Unknown tables of any shape are not our business.
    assert!(sonic::parse(r#"{"SOMETHING_NEW": 5, "VLAN": []}"#).is_ok());
}

#[test]
fn long_values_are_truncated_in_errors() {
    let long = "é".repeat(500);
    let msg = parse_err(&format!(r#"{{"PORT": {{"Ethernet0": {{"mtu": "{long}"}}}}}}"#));
    assert!(msg.chars().count() < 150, "{msg}");
    assert!(msg.ends_with('…'), "{msg}");
}

#[test]
fn load_prefixes_the_path() {
    let missing = Path::new(DIR).join("no-such-file.json");
    let err = sonic::load(&missing).expect_err("missing file");
    assert!(
        err.to_string().starts_with(&missing.display().to_string()),
        "{err}"
    );

    let path = std::env::temp_dir().join(format!("xirang-switch-bad-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"PORT": {"Ethernet0": {"speed": "fast"}}}"#).expect("write temp file");
    let err = sonic::load(&path).expect_err("bad speed");
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        err.to_string(),
        format!(
            r#"{}: PORT|Ethernet0.speed: expected an unsigned integer, found "fast""#,
            path.display()
        )
    );
}
