//! Parsers of `ethtool -S`, `ibv_devinfo` and `mlnx_qos` against real captured outputs
//! (`test_data/*/SOURCE.md` names their origin) and against malformed inputs.
//!
//! Expected values were read by eye from the files, not produced by the parser.

use std::fs;
use std::path::Path;

use xirang_host::parse::ParseError;
use xirang_host::parse::ethtool::{self, Direction, EthtoolStats};
use xirang_host::parse::ibv_devinfo::{self, Coded, IbvDevice, IbvPort};
use xirang_host::parse::mlnx_qos::{self, Trust};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data");

fn fixture(kind: &str, file: &str) -> String {
    let path = format!("{DATA}/{kind}/{file}");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Every `.txt` fixture of one kind whose name starts with `prefix`, sorted by name.
fn fixtures(kind: &str, prefix: &str) -> Vec<(String, String)> {
    let dir = Path::new(DATA).join(kind);
    let mut out: Vec<(String, String)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            name.starts_with(prefix).then(|| {
                let text = fs::read_to_string(&p).expect("fixture is UTF-8");
                (name, text)
            })
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no fixtures in {}", dir.display());
    out
}

fn crlf(text: &str) -> String {
    text.replace('\n', "\r\n")
}

/// Replaces each leading run of 8 spaces with a tab, the reverse of what editors do.
fn tabify(text: &str) -> String {
    text.lines()
        .map(|l| {
            let body = l.trim_start_matches(' ');
            let spaces = l.len() - body.len();
            format!("{}{}{}", "\t".repeat(spaces / 8), " ".repeat(spaces % 8), body)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn coded(text: &str, code: u32) -> Option<Coded> {
    Some(Coded {
        text: text.to_string(),
        code: Some(code),
    })
}

fn assert_error(err: ParseError, format: &str, line: usize, expected_contains: &str) {
    assert_eq!(err.format, format, "{err}");
    assert_eq!(err.line, line, "{err}");
    assert!(
        err.expected.contains(expected_contains),
        "expected message `{}` should mention `{expected_contains}`",
        err.expected
    );
}

// ---------------------------------------------------------------- ethtool -S

const CX4LX: &str = "mlx5-cx4lx-fw14.23-ubuntu18.04-ethtool-S.txt";
const CX4LX_OLD: &str = "mlx5-cx4lx-ubuntu16.04-old-driver-ethtool-S.txt";
const CX6DX: &str = "mlx5-cx6dx-100g-xdp-kernel5.15-nonzero-ethtool-S.txt";

/// `(file, number of counters, [(counter, value)], [counters that must be absent])`.
type EthtoolCase = (
    &'static str,
    usize,
    &'static [(&'static str, u64)],
    &'static [&'static str],
);

const ETHTOOL_CASES: &[EthtoolCase] = &[
    (
        CX4LX,
        751,
        &[
            ("rx_packets", 845320277),
            ("rx_bytes", 2195783498134),
            ("rx_mpwqe_filler", 8251861),
            ("rx_cache_reuse", 546395557),
            ("rx_packets_phy", 845715962),
            ("rx_bytes_phy", 2202570777997),
            ("rx_crc_errors_phy", 0),
            ("rx_8192_to_10239_bytes_phy", 141701654),
            ("tx_pci_signal_integrity", 34),
            ("rx_global_pause", 0),
            ("tx_global_pause_duration", 0),
            ("tx15_xmit_more", 5530),
        ],
        &["rx_prio3_pause", "tx_pause_storm_warning_events"],
    ),
    (
        CX6DX,
        101,
        &[
            ("rx_packets", 333854100),
            ("rx_xdp_drop", 3753342954),
            ("rx_out_of_buffer", 990473555),
            ("rx_discards_phy", 58591428329),
            ("tx_discards_phy", 0),
            ("tx_pause_ctrl_phy", 5745055),
            ("tx_mac_control_phy", 5745055),
            ("tx_global_pause", 5745042),
            ("tx_global_pause_duration", 771103810),
            ("rx_prio0_discards", 58591314012),
            ("rx0_xdp_tx_cqes", 87229139),
        ],
        // The poster left out zero counters.
        &["rx_pause_ctrl_phy", "rx_crc_errors_phy", "rx_global_pause"],
    ),
    (
        CX4LX_OLD,
        309,
        &[
            ("rx_packets", 5487361),
            ("tx_bytes", 5813725708),
            ("rx_csum_sw", 461444),
            ("check_seq_err", 0),
            ("pause_ctrl_rx", 0),
            ("in_octets", 1084993260),
            ("crc_align_errors", 0),
            ("p1519to2047octets", 375454),
            ("rx0_packets", 393312),
            ("tx15_0_nop", 7392),
        ],
        &["rx_packets_phy", "rx_crc_errors_phy", "rx_out_of_buffer"],
    ),
];

#[test]
fn ethtool_fixture_values() {
    for &(file, count, present, absent) in ETHTOOL_CASES {
        let text = fixture("ethtool", file);
        let stats = ethtool::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(stats.counters.len(), count, "{file}");
        for &(name, value) in present {
            assert_eq!(stats.get(name), Some(value), "{file}: {name}");
        }
        for &name in absent {
            assert_eq!(stats.get(name), None, "{file}: {name}");
        }
    }
}

#[test]
fn ethtool_every_fixture_parses_with_crlf_and_tabs_alike() {
    for (file, text) in fixtures("ethtool", "") {
        let plain = ethtool::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            ethtool::parse(&crlf(&text)).as_ref(),
            Ok(&plain),
            "{file} with CRLF"
        );
        let indented: String = text.lines().map(|l| format!("\t{}\n", l.trim())).collect();
        assert_eq!(
            ethtool::parse(&indented).as_ref(),
            Ok(&plain),
            "{file} tab-indented"
        );
        assert!(serde_json::to_string(&plain).is_ok());
    }
}

#[test]
fn ethtool_keeps_file_order_and_header_is_optional() {
    let with_header = ethtool::parse(&fixture("ethtool", CX6DX)).expect("parses");
    assert_eq!(
        with_header.counters.first(),
        Some(&("rx_packets".to_string(), 333854100))
    );
    assert_eq!(
        with_header.counters.last(),
        Some(&("rx0_xdp_tx_cqes".to_string(), 87229139))
    );
    // ethq stored its copy without header and indentation.
    let bare = ethtool::parse(&fixture("ethtool", CX4LX)).expect("parses");
    assert_eq!(
        bare.counters.first(),
        Some(&("rx_packets".to_string(), 845320277))
    );
    assert_eq!(bare.counters.last(), Some(&("tx15_xmit_more".to_string(), 5530)));
}

#[test]
fn ethtool_per_priority_counters() {
    let cx4 = ethtool::parse(&fixture("ethtool", CX4LX)).expect("parses");
    assert_eq!(cx4.prio(Direction::Rx, 0, "bytes"), Some(2202570777997));
    assert_eq!(cx4.prio(Direction::Rx, 0, "packets"), Some(845715962));
    assert_eq!(cx4.prio(Direction::Tx, 0, "bytes"), Some(2662454044895));
    assert_eq!(cx4.prio(Direction::Tx, 0, "packets"), Some(896117891));
    assert_eq!(cx4.prio(Direction::Rx, 7, "packets"), Some(0));
    // mlx5 prints per-priority pause counters only for priorities with PFC on.
    assert_eq!(cx4.prio(Direction::Rx, 3, "pause"), None);
    assert_eq!(cx4.prio(Direction::Rx, 8, "bytes"), None);

    let cx6 = ethtool::parse(&fixture("ethtool", CX6DX)).expect("parses");
    assert_eq!(cx6.prio(Direction::Rx, 0, "discards"), Some(58591314012));
    assert_eq!(cx6.prio(Direction::Tx, 0, "bytes"), Some(357288052986));

    // No capture with PFC on has known provenance; this follows mlx5/counters.rst names.
    let pfc = ethtool::parse(
        "NIC statistics:\n     rx_prio3_pause: 12\n     rx_prio3_pause_duration: 3400\n     \
         tx_prio3_pause: 7\n     tx_prio3_pause_duration: 901\n     rx_prio3_buf_discard: 2\n",
    )
    .expect("parses");
    assert_eq!(pfc.prio(Direction::Rx, 3, "pause"), Some(12));
    assert_eq!(pfc.prio(Direction::Rx, 3, "pause_duration"), Some(3400));
    assert_eq!(pfc.prio(Direction::Tx, 3, "pause"), Some(7));
    assert_eq!(pfc.prio(Direction::Tx, 3, "pause_duration"), Some(901));
    assert_eq!(pfc.prio(Direction::Rx, 3, "buf_discard"), Some(2));
    assert_eq!(pfc.prio(Direction::Tx, 3, "buf_discard"), None);
}

#[test]
fn ethtool_phy_errors_new_driver() {
    let cx4 = ethtool::parse(&fixture("ethtool", CX4LX))
        .expect("parses")
        .phy_errors();
    assert_eq!(cx4.rx_crc_errors_phy, Some(0));
    assert_eq!(cx4.rx_symbol_err_phy, Some(0));
    assert_eq!(cx4.rx_pcs_symbol_err_phy, Some(0));
    assert_eq!(cx4.rx_corrected_bits_phy, Some(0));
    assert_eq!(cx4.link_down_events_phy, Some(0));
    assert_eq!(cx4.rx_discards_phy, Some(0));
    assert_eq!(cx4.tx_discards_phy, Some(0));
    assert_eq!(cx4.rx_out_of_buffer, Some(0));
    assert_eq!(cx4.rx_oversize_pkts_phy, Some(0));
    // This kernel (4.15) predates the pause-storm counters.
    assert_eq!(cx4.tx_pause_storm_warning_events, None);
    assert_eq!(cx4.tx_pause_storm_error_events, None);

    let cx6 = ethtool::parse(&fixture("ethtool", CX6DX))
        .expect("parses")
        .phy_errors();
    assert_eq!(cx6.rx_discards_phy, Some(58591428329));
    assert_eq!(cx6.rx_out_of_buffer, Some(990473555));
    assert_eq!(cx6.tx_discards_phy, Some(0));
    // Non-zero-only dump: zero counters are simply missing, not reported as 0.
    assert_eq!(cx6.rx_crc_errors_phy, None);
    assert_eq!(cx6.link_down_events_phy, None);
}

#[test]
fn ethtool_phy_errors_old_driver_maps_old_names() {
    let old = ethtool::parse(&fixture("ethtool", CX4LX_OLD))
        .expect("parses")
        .phy_errors();
    // check_seq_err, symbol_err, in/out_discards, too_long_errors are the same registers.
    assert_eq!(old.rx_crc_errors_phy, Some(0));
    assert_eq!(old.rx_symbol_err_phy, Some(0));
    assert_eq!(old.rx_discards_phy, Some(0));
    assert_eq!(old.tx_discards_phy, Some(0));
    assert_eq!(old.rx_oversize_pkts_phy, Some(0));
    assert_eq!(old.rx_pcs_symbol_err_phy, None);
    assert_eq!(old.rx_corrected_bits_phy, None);
    assert_eq!(old.link_down_events_phy, None);
    assert_eq!(old.rx_out_of_buffer, None);

    let fallback = ethtool::parse("check_seq_err: 5\nsymbol_err: 6\nin_discards: 7\n").expect("parses");
    let phy = fallback.phy_errors();
    assert_eq!(
        (phy.rx_crc_errors_phy, phy.rx_symbol_err_phy, phy.rx_discards_phy),
        (Some(5), Some(6), Some(7))
    );
}

#[test]
fn ethtool_value_edges() {
    let s = ethtool::parse("a: 18446744073709551615\n[0]: rx_ucast_packets: 3\n").expect("parses");
    assert_eq!(s.get("a"), Some(u64::MAX));
    assert_eq!(s.get("[0]: rx_ucast_packets"), Some(3));
    // Blank lines anywhere, header with CRLF.
    let s = EthtoolStats::parse("\r\nNIC statistics:\r\n\r\n  x: 1\r\n\r\n  y: 2\r\n").expect("parses");
    assert_eq!(s.counters, vec![("x".to_string(), 1), ("y".to_string(), 2)]);
}

#[test]
fn ethtool_errors() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 0, "at least one `name: value` counter line"),
        (
            "NIC statistics:\n\n",
            0,
            "at least one `name: value` counter line",
        ),
        ("  \n\t\n", 0, "at least one `name: value` counter line"),
        (
            "NIC statistics:\n     rx_packets: 1\n     rx_bytes 20\n",
            3,
            "`name: value`",
        ),
        ("rx_packets: 1\n\nrx_bytes: -20\n", 3, "unsigned decimal"),
        ("rx_packets: 0x10\n", 1, "unsigned decimal"),
        ("rx_packets: 1.5\n", 1, "unsigned decimal"),
        ("rx_packets:\n", 1, "unsigned decimal"),
        ("rx_packets: 18446744073709551616\n", 1, "64 bits"),
        ("a: 1\n: 5\n", 2, "counter name"),
        // A second header means two dumps were glued together.
        (
            "NIC statistics:\n a: 1\nNIC statistics:\n b: 2\n",
            3,
            "unsigned decimal",
        ),
    ];
    for &(text, line, expected) in cases {
        let err = ethtool::parse(text).expect_err(text);
        assert_error(err, "ethtool -S", line, expected);
    }
    let err = ethtool::parse("x: 1\nrx_bytes 20\n").expect_err("bad line");
    assert_eq!(err.found, "rx_bytes 20");
    assert_eq!(
        err.to_string(),
        "ethtool -S line 2: expected a `name: value` counter line, found `rx_bytes 20`"
    );
}

// ---------------------------------------------------------------- ibv_devinfo

const IBV_2HCA: &str = "cx3-mlx4-ib-2hca-ibv_devinfo.txt";
const IBV_POLLING: &str = "cx3-mlx4-ib-port2-polling-ibv_devinfo-v.txt";
const IBV_VV: &str = "cx6-hdr-ib-2port-one-down-ibv_devinfo-vv.txt";
const IBV_MIXED: &str = "mixed-cx4lx-cx5-cx6-8hca-roce-and-ib-ibv_devinfo.txt";

fn device<'a>(devices: &'a [IbvDevice], hca: &str) -> &'a IbvDevice {
    devices
        .iter()
        .find(|d| d.hca_id == hca)
        .unwrap_or_else(|| panic!("no device {hca}"))
}

fn port<'a>(devices: &'a [IbvDevice], hca: &str, port: u8) -> &'a IbvPort {
    device(devices, hca)
        .port(port)
        .unwrap_or_else(|| panic!("no port {hca}/{port}"))
}

fn extra<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// `(file, hca, fw_ver, vendor_part_id, board_id, phys_port_cnt)` for each device.
const IBV_DEVICES: &[(&str, &str, &str, u32, &str, u8)] = &[
    (IBV_2HCA, "mlx4_1", "2.42.5000", 4099, "MT_1090120019", 2),
    (IBV_2HCA, "mlx4_0", "2.42.5000", 4099, "MT_1090120019", 2),
    (IBV_POLLING, "mlx4_1", "2.42.5000", 4099, "MT_1090120019", 2),
    (IBV_VV, "mlx5_0", "20.37.1700", 4123, "MT_0000000594", 1),
    (IBV_VV, "mlx5_1", "20.37.1700", 4123, "MT_0000000594", 1),
    (IBV_MIXED, "mlx5_6", "16.27.1016", 4120, "MT_0000000011", 1),
    (IBV_MIXED, "mlx5_1", "14.27.1016", 4117, "MT_2420110004", 1),
    (IBV_MIXED, "mlx5_5", "20.30.1004", 4123, "MT_0000000226", 1),
    (IBV_MIXED, "mlx5_2", "16.27.1016", 4119, "MT_0000000011", 1),
];

/// `(file, hca, port, state, state code, active_mtu, sm_lid, port_lid, link_layer)`.
type IbvPortCase = (
    &'static str,
    &'static str,
    u8,
    &'static str,
    u32,
    u32,
    u16,
    u16,
    &'static str,
);

const IBV_PORTS: &[IbvPortCase] = &[
    (IBV_2HCA, "mlx4_1", 1, "PORT_ACTIVE", 4, 4096, 1, 22, "InfiniBand"),
    (IBV_2HCA, "mlx4_1", 2, "PORT_DOWN", 1, 4096, 0, 0, "InfiniBand"),
    (
        IBV_2HCA,
        "mlx4_0",
        1,
        "PORT_ACTIVE",
        4,
        4096,
        18,
        32,
        "InfiniBand",
    ),
    (IBV_2HCA, "mlx4_0", 2, "PORT_DOWN", 1, 4096, 0, 0, "InfiniBand"),
    (IBV_POLLING, "mlx4_1", 2, "PORT_DOWN", 1, 4096, 0, 0, "InfiniBand"),
    (IBV_VV, "mlx5_0", 1, "PORT_ACTIVE", 4, 4096, 1, 4, "InfiniBand"),
    (IBV_VV, "mlx5_1", 1, "PORT_DOWN", 1, 4096, 0, 65535, "InfiniBand"),
    (IBV_MIXED, "mlx5_6", 1, "PORT_DOWN", 1, 1024, 0, 0, "Ethernet"),
    (IBV_MIXED, "mlx5_3", 1, "PORT_ACTIVE", 4, 1024, 0, 0, "Ethernet"),
    (
        IBV_MIXED,
        "mlx5_5",
        1,
        "PORT_ACTIVE",
        4,
        4096,
        4,
        18,
        "InfiniBand",
    ),
    (IBV_MIXED, "mlx5_2", 1, "PORT_ACTIVE", 4, 1024, 0, 0, "Ethernet"),
    (IBV_MIXED, "mlx5_4", 1, "PORT_DOWN", 1, 1024, 0, 0, "Ethernet"),
];

#[test]
fn ibv_devinfo_device_table() {
    for &(file, hca, fw, part, board, nports) in IBV_DEVICES {
        let devices =
            ibv_devinfo::parse(&fixture("ibv_devinfo", file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let d = device(&devices, hca);
        assert_eq!(d.fw_ver.as_deref(), Some(fw), "{file} {hca}");
        assert_eq!(d.vendor_part_id, Some(part), "{file} {hca}");
        assert_eq!(d.board_id.as_deref(), Some(board), "{file} {hca}");
        assert_eq!(d.phys_port_cnt, Some(nports), "{file} {hca}");
        assert_eq!(d.vendor_id, Some(0x02c9), "{file} {hca}");
        assert_eq!(d.transport, coded("InfiniBand", 0), "{file} {hca}");
    }
}

#[test]
fn ibv_devinfo_port_table() {
    for &(file, hca, p, state, code, mtu, sm_lid, lid, ll) in IBV_PORTS {
        let devices =
            ibv_devinfo::parse(&fixture("ibv_devinfo", file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let port = port(&devices, hca, p);
        let at = format!("{file} {hca}/{p}");
        assert_eq!(port.state, coded(state, code), "{at}");
        assert_eq!(port.max_mtu_bytes, Some(4096), "{at}");
        assert_eq!(port.active_mtu_bytes, Some(mtu), "{at}");
        assert_eq!(port.sm_lid, Some(sm_lid), "{at}");
        assert_eq!(port.port_lid, Some(lid), "{at}");
        assert_eq!(port.link_layer.as_deref(), Some(ll), "{at}");
        assert_eq!(extra(&port.extra, "port_lmc"), Some("0x00"), "{at}");
    }
}

#[test]
fn ibv_devinfo_every_fixture_parses_with_crlf_and_tabs_alike() {
    for (file, text) in fixtures("ibv_devinfo", "") {
        let plain = ibv_devinfo::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            ibv_devinfo::parse(&crlf(&text)).as_ref(),
            Ok(&plain),
            "{file} with CRLF"
        );
        assert!(serde_json::to_string(&plain).is_ok());
        for d in &plain {
            assert!(!d.ports.is_empty(), "{file} {}", d.hca_id);
        }
    }
    // The mixed file had its tabs expanded; putting them back must not change anything.
    let spaced = fixture("ibv_devinfo", IBV_MIXED);
    assert!(!spaced.contains('\t'));
    assert_eq!(ibv_devinfo::parse(&tabify(&spaced)), ibv_devinfo::parse(&spaced));
}

#[test]
fn ibv_devinfo_plain_two_hcas() {
    let devices = ibv_devinfo::parse(&fixture("ibv_devinfo", IBV_2HCA)).expect("parses");
    let ids: Vec<&str> = devices.iter().map(|d| d.hca_id.as_str()).collect();
    assert_eq!(ids, ["mlx4_1", "mlx4_0"]);
    let d = &devices[0];
    assert_eq!(d.node_guid.as_deref(), Some("7cfe:9003:00a5:95c0"));
    assert_eq!(d.sys_image_guid.as_deref(), Some("7cfe:9003:00a5:95c3"));
    assert_eq!(d.hw_ver.as_deref(), Some("0x1"));
    assert_eq!(d.ports.iter().map(|p| p.port).collect::<Vec<_>>(), [1, 2]);
    // `Device ports:` is structure, not an attribute.
    assert!(d.extra.is_empty(), "{:?}", d.extra);
    // The plain form has no verbose-only attributes.
    let p1 = &d.ports[0];
    assert_eq!(
        (
            p1.active_width.clone(),
            p1.active_speed.clone(),
            p1.phys_state.clone()
        ),
        (None, None, None)
    );
    assert!(p1.gids.is_empty());
}

#[test]
fn ibv_devinfo_verbose_port_in_polling() {
    let devices = ibv_devinfo::parse(&fixture("ibv_devinfo", IBV_POLLING)).expect("parses");
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    // `-i 2` prints only port 2 although the device has two.
    assert_eq!(d.ports.len(), 1);
    let p = &d.ports[0];
    assert_eq!(p.port, 2);
    assert_eq!(p.state, coded("PORT_DOWN", 1));
    assert_eq!(p.phys_state, coded("POLLING", 2));
    assert_eq!(p.active_width, coded("4X", 2));
    assert_eq!(p.active_speed, coded("2.5 Gbps", 1));
    assert_eq!(p.gids.len(), 1);
    assert_eq!(p.gids[0].index, 0);
    assert_eq!(p.gids[0].gid, "fe80:0000:0000:0000:7cfe:9003:00a5:95c2");
    assert_eq!(p.gids[0].kind, None);
    assert_eq!(extra(&p.extra, "max_vl_num"), Some("8 (4)"));
    assert_eq!(extra(&p.extra, "gid_tbl_len"), Some("128"));

    // MLNX_OFED's odd lines are kept, flag lists joined to their key.
    assert_eq!(extra(&d.extra, "max_qp"), Some("393144"));
    let flags = extra(&d.extra, "device_cap_flags").expect("device_cap_flags");
    assert!(
        flags.starts_with("0x057e9c76 BAD_PKEY_CNTR BAD_QKEY_CNTR"),
        "{flags}"
    );
    assert!(flags.ends_with("XRC Unknown flags: 0x056e8000"), "{flags}");
    let exp = extra(&d.extra, "device_cap_exp_flags").expect("device_cap_exp_flags");
    assert!(exp.ends_with("EXP_MASKED_ATOMICS"), "{exp}");
    assert_eq!(extra(&d.extra, "rc_odp_caps"), Some("NO SUPPORT"));
    assert_eq!(extra(&d.extra, "log atomic arg sizes (mask)"), Some("0x8"));
    assert_eq!(extra(&d.extra, "max fetch and add bit boundary"), Some("64"));
    assert_eq!(extra(&d.extra, "ooo_rc_caps"), Some("0x0"));
    assert_eq!(extra(&d.extra, "Multi-Packet RQ is not supported"), Some(""));
    assert_eq!(extra(&d.extra, "qp_rate_limit_max"), Some("0kbps"));
}

#[test]
fn ibv_devinfo_vv_active_and_down_ports() {
    let devices = ibv_devinfo::parse(&fixture("ibv_devinfo", IBV_VV)).expect("parses");
    assert_eq!(devices.len(), 2);
    let up = port(&devices, "mlx5_0", 1);
    assert_eq!(up.phys_state, coded("LINK_UP", 5));
    assert_eq!(up.active_width, coded("4X", 2));
    assert_eq!(up.active_speed, coded("50.0 Gbps", 64));
    assert_eq!(up.gids.len(), 1);
    assert_eq!(up.gids[0].gid, "fe80:0000:0000:0000:88e9:a4ff:ff25:a462");
    assert_eq!(extra(&up.extra, "subnet_timeout"), Some("18"));
    assert_eq!(extra(&up.extra, "port_cap_flags2"), Some("0x0032"));

    let down = port(&devices, "mlx5_1", 1);
    assert_eq!(down.phys_state, coded("DISABLED", 3));
    assert_eq!(down.active_speed, coded("invalid speed", 0));
    assert_eq!(down.gids[0].gid, "fe80:0000:0000:0000:88e9:a4ff:ff25:a463");

    // Both functions are one adapter.
    let (a, b) = (device(&devices, "mlx5_0"), device(&devices, "mlx5_1"));
    assert_eq!(a.sys_image_guid, b.sys_image_guid);
    assert_ne!(a.node_guid, b.node_guid);
    // rdma-core's -vv device section, including the sub-keys and the blank lines in it.
    assert_eq!(extra(&a.extra, "num_comp_vectors"), Some("63"));
    assert_eq!(extra(&a.extra, "hca_core_clock"), Some("156250kHZ"));
    assert_eq!(extra(&a.extra, "max_cq_period"), Some("4095 us"));
    assert_eq!(extra(&a.extra, "flags"), Some("IBV_TM_CAP_RC"));
    assert_eq!(
        extra(&a.extra, "completion timestamp_mask"),
        Some("0x7fffffffffffffff")
    );
    assert_eq!(
        extra(&a.extra, "maximum available device memory"),
        Some("131072Bytes")
    );
    assert_eq!(
        extra(&a.extra, "general_odp_caps"),
        Some("ODP_SUPPORT ODP_SUPPORT_IMPLICIT")
    );
}

#[test]
fn ibv_devinfo_mixed_roce_and_ib_tab_expanded() {
    let devices = ibv_devinfo::parse(&fixture("ibv_devinfo", IBV_MIXED)).expect("parses");
    let ids: Vec<&str> = devices.iter().map(|d| d.hca_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "mlx5_6", "mlx5_1", "mlx5_3", "mlx5_5", "mlx5_7", "mlx5_0", "mlx5_2", "mlx5_4"
        ]
    );
    let ethernet = devices
        .iter()
        .filter(|d| d.ports[0].link_layer.as_deref() == Some("Ethernet"))
        .count();
    assert_eq!(ethernet, 7);
    let mut active: Vec<&str> = devices
        .iter()
        .filter(|d| d.ports[0].state.as_ref().map(|s| s.text.as_str()) == Some("PORT_ACTIVE"))
        .map(|d| d.hca_id.as_str())
        .collect();
    active.sort_unstable();
    assert_eq!(active, ["mlx5_2", "mlx5_3", "mlx5_5"]);
    // The two ConnectX-5 VFs share the PF's system image GUID.
    for vf in ["mlx5_6", "mlx5_7"] {
        assert_eq!(
            device(&devices, vf).sys_image_guid.as_deref(),
            Some("08c0:eb03:00da:e2e6")
        );
    }
    assert_eq!(
        device(&devices, "mlx5_7").node_guid.as_deref(),
        Some("a202:67ff:fecb:a429")
    );
}

#[test]
fn ibv_devinfo_roce_gid_types() {
    // Synthetic: the GID line format of rdma-core's devinfo.c on an Ethernet port (v1 as hex
    // groups, v2 through inet_ntop); none of the captured files is a verbose RoCE dump.
    let text = "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\
                \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n\
                \t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0e42:a1ff:fe7a:2b8e, RoCE v1\n\
                \t\t\tGID[  1]:\t\tfe80::e42:a1ff:fe7a:2b8e, RoCE v2\n\
                \t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c0a8:0102, RoCE v1\n\
                \t\t\tGID[  3]:\t\t::ffff:192.168.1.2, RoCE v2\n\
                \t\t\tGID[128]:\t\tfe80::1, IB/RoCE v1\n";
    let devices = ibv_devinfo::parse(text).expect("parses");
    let gids: Vec<(u32, &str, Option<&str>)> = devices[0].ports[0]
        .gids
        .iter()
        .map(|g| (g.index, g.gid.as_str(), g.kind.as_deref()))
        .collect();
    assert_eq!(
        gids,
        [
            (0, "fe80:0000:0000:0000:0e42:a1ff:fe7a:2b8e", Some("RoCE v1")),
            (1, "fe80::e42:a1ff:fe7a:2b8e", Some("RoCE v2")),
            (2, "0000:0000:0000:0000:0000:ffff:c0a8:0102", Some("RoCE v1")),
            (3, "::ffff:192.168.1.2", Some("RoCE v2")),
            (128, "fe80::1", Some("IB/RoCE v1")),
        ]
    );
}

#[test]
fn ibv_devinfo_unknown_mtu_text_is_kept() {
    let text = "hca_id: x\n  port: 1\n    max_mtu: invalid MTU (0)\n    active_mtu: 2048 (4)\n";
    let devices = ibv_devinfo::parse(text).expect("parses");
    let p = &devices[0].ports[0];
    assert_eq!(p.max_mtu_bytes, None);
    assert_eq!(extra(&p.extra, "max_mtu"), Some("invalid MTU (0)"));
    assert_eq!(p.active_mtu_bytes, Some(2048));
}

#[test]
fn ibv_devinfo_errors() {
    let cases: &[(&str, usize, &str)] = &[
        ("", 0, "at least one `hca_id:` device"),
        ("\n\n", 0, "at least one `hca_id:` device"),
        ("No IB devices found\n", 1, "`hca_id:`"),
        ("\n\t\tport:\t1\n\t\t\tstate:\tPORT_ACTIVE (4)\n", 2, "`hca_id:`"),
        ("\ttransport:\tInfiniBand (0)\nhca_id:\tmlx5_0\n", 1, "`hca_id:`"),
        ("hca_id:\n", 1, "device name"),
        (
            "hca_id:\tmlx5_0\n\tfw_ver:\t1\n\t\t\tGID[  0]:\t\tfe80::1\n",
            3,
            "`port:`",
        ),
        ("hca_id:\tmlx5_0\n\t\tport:\tone\n", 2, "port number"),
        ("hca_id:\tmlx5_0\n\t\tport:\t256\n", 2, "port number"),
        ("hca_id:\tmlx5_0\n\tvendor_id:\t02c9\n", 2, "hex vendor id"),
        ("hca_id:\tmlx5_0\n\tvendor_part_id:\tMT4123\n", 2, "part id"),
        ("hca_id:\tmlx5_0\n\tphys_port_cnt:\t-1\n", 2, "port count"),
        ("hca_id: a\n\n  port: 1\n    port_lid: 65536\n", 4, "LID"),
        ("hca_id: a\n  port: 1\n    sm_lid: 0x1\n", 3, "LID"),
        ("hca_id: a\n  port: 1\n    GID[x]: fe80::1\n", 3, "GID index"),
        ("hca_id: a\n  port: 1\n    GID[  1]:\n", 3, "a GID"),
    ];
    for &(text, line, expected) in cases {
        let err = ibv_devinfo::parse(text).expect_err(text);
        assert_error(err, "ibv_devinfo", line, expected);
    }
    let err = ibv_devinfo::parse("\t\tport:\t1\n").expect_err("port first");
    assert_eq!(
        err.to_string(),
        "ibv_devinfo line 1: expected an `hca_id:` line starting a device, found `port:\t1`"
    );
}

// ---------------------------------------------------------------- mlnx_qos

const QOS_PRIO3: &str = "mlnx_qos-trust-dscp-pfc-prio3.txt";
const QOS_SCRIPT: &str = "rdma-qos-script-query-pfc-prio5-ecn-cnp_dscp48-tclass160.txt";

#[test]
fn mlnx_qos_every_fixture_parses_with_crlf_alike() {
    for (file, text) in fixtures("mlnx_qos", "mlnx_qos") {
        let plain = mlnx_qos::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(
            mlnx_qos::parse(&crlf(&text)).as_ref(),
            Ok(&plain),
            "{file} with CRLF"
        );
        assert_eq!(
            mlnx_qos::parse(&tabify(&text)).as_ref(),
            Ok(&plain),
            "{file} with tabs"
        );
        assert!(serde_json::to_string(&plain).is_ok());
    }
}

#[test]
fn mlnx_qos_trust_dscp_pfc_prio3() {
    let q = mlnx_qos::parse(&fixture("mlnx_qos", QOS_PRIO3)).expect("parses");
    assert_eq!(q.dcbx_mode.as_deref(), Some("OS controlled"));
    assert_eq!(q.trust, Some(Trust::Dscp));
    assert_eq!(q.cable_len_m, Some(7));
    assert_eq!(
        q.pfc_enabled,
        [false, false, false, true, false, false, false, false]
    );
    assert_eq!(q.pfc_priorities(), [3]);
    assert_eq!(q.pfc_buffer, None);
    assert!(q.extra.is_empty(), "{:?}", q.extra);

    // Default map: DSCP d -> priority d / 8, printed in descending DSCP order per row.
    assert_eq!(q.dscp2prio.len(), 64);
    assert!(q.dscp2prio.windows(2).all(|w| w[0].0 < w[1].0));
    for (dscp, prio) in [
        (0, 0),
        (7, 0),
        (8, 1),
        (24, 3),
        (26, 3),
        (31, 3),
        (46, 5),
        (48, 6),
        (63, 7),
    ] {
        assert_eq!(q.prio_of_dscp(dscp), Some(prio), "dscp {dscp}");
    }
    assert_eq!(q.prio_of_dscp(64), None);

    assert_eq!(q.tcs.len(), 8);
    assert!(
        q.tcs
            .iter()
            .all(|tc| tc.ratelimit == "unlimited" && tc.tsa == "vendor" && tc.bw_pct.is_none())
    );
    // Priorities 0 and 1 swap TCs (802.1Q: priority 0 is the second-lowest class).
    assert_eq!(q.tcs[0].tc, 0);
    assert_eq!(q.tcs[0].priorities, [1]);
    assert_eq!(q.tcs[1].priorities, [0]);
    assert_eq!(q.tc_of_prio(0), Some(1));
    assert_eq!(q.tc_of_prio(3), Some(3));
    assert_eq!(q.tc_of_prio(7), Some(7));
}

#[test]
fn mlnx_qos_script_output_is_not_mlnx_qos_but_its_body_is() {
    let text = fixture("mlnx_qos", QOS_SCRIPT);
    // The script's banner line has no `Key: value` shape.
    let err = mlnx_qos::parse(&text).expect_err("banner");
    assert_error(err, "mlnx_qos", 1, "`Key: value`");

    let body: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let q = mlnx_qos::parse(&body).expect("body parses");
    assert_eq!(q.trust, Some(Trust::Dscp));
    assert_eq!(q.pfc_priorities(), [5]);
    assert_eq!(q.pfc_buffer, Some([0, 0, 0, 0, 0, 1, 0, 0]));
    assert!(q.dscp2prio.is_empty());
    assert!(q.tcs.is_empty());
    assert_eq!(q.dcbx_mode, None);
    assert_eq!(
        q.extra.iter().find(|(k, _)| k == "cma_roce_tos"),
        Some(&("cma_roce_tos".to_string(), "160".to_string()))
    );
    assert_eq!(
        q.extra
            .iter()
            .filter(|(k, _)| k.starts_with("ECN Enabled"))
            .count(),
        16
    );
}

#[test]
fn mlnx_qos_ets_and_pcp_variant() {
    // Synthetic, in the layout of newer MLNX_OFED mlnx_qos with ETS and several
    // priorities per TC.
    let text = "DCBX mode: OS controlled\nPriority trust state: pcp\n\
                Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,\nCable len: 7\n\
                PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n\
                \tenabled     0   0   0   1   1   0   0   0   \n\
                \tbuffer      0   0   0   1   1   0   0   0   \n\
                tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%\n\t priority:  0\n\t priority:  1\n\
                tc: 3 ratelimit: 10.0 Gbps, tsa: ets, bw: 50%\n\t priority:  3\n\t priority:  4\n\
                tc: 6 ratelimit: unlimited, tsa: strict\n\t priority:  6\n";
    let q = mlnx_qos::parse(text).expect("parses");
    assert_eq!(q.trust, Some(Trust::Pcp));
    assert_eq!(q.pfc_priorities(), [3, 4]);
    assert_eq!(q.pfc_buffer, Some([0, 0, 0, 1, 1, 0, 0, 0]));
    assert_eq!(q.tcs.len(), 3);
    assert_eq!(
        (q.tcs[0].bw_pct, q.tcs[0].priorities.as_slice()),
        (Some(50), &[0, 1][..])
    );
    assert_eq!(q.tcs[1].ratelimit, "10.0 Gbps");
    assert_eq!((q.tcs[2].tsa.as_str(), q.tcs[2].bw_pct), ("strict", None));
    assert_eq!(q.tc_of_prio(4), Some(3));
    assert_eq!(q.tc_of_prio(2), None);
    assert_eq!(q.prio_of_dscp(26), None);
    assert_eq!(q.extra[0].0, "Receive buffer size (bytes)");
    // Older releases said "trust mode".
    let old = text.replace("trust state", "trust mode");
    assert_eq!(mlnx_qos::parse(&old).map(|q| q.trust), Ok(Some(Trust::Pcp)));
}

#[test]
fn mlnx_qos_errors() {
    let pfc = "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n\
               \tenabled     0   0   0   1   0   0   0   0\n";
    let cases: Vec<(String, usize, &str)> = vec![
        (String::new(), 0, "`PFC configuration:` section"),
        ("DCBX mode: OS controlled\nPriority trust state: dscp\nCable len: 7\n".into(), 0, "`PFC configuration:`"),
        ("DCBX mode: OS controlled\nPFC configuration:\n".into(), 2, "`enabled` row"),
        ("PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\ntc: 0 ratelimit: unlimited, tsa: vendor\n".into(), 3, "`enabled` row"),
        ("PFC configuration:\n\tenabled     0   0   2   1   0   0   0   0\n".into(), 2, "0 or 1"),
        ("PFC configuration:\n\tenabled     0   0   0   1   0   0   0\n".into(), 2, "8 numbers"),
        ("PFC configuration:\n\tenabled     0   0   0   1   0   0   0   0   0\n".into(), 2, "8 numbers"),
        ("PFC configuration:\n\tpriority    1   2   3   4   5   6   7   8\n".into(), 2, "header row"),
        ("PFC configuration:\n\tenabled     0   0   0   1   0   0   0   0\n\tbuffer 0 0 0 0 0 0 0 x\n".into(), 3, "8 numbers"),
        (format!("{pfc}{pfc}"), 4, "one `PFC configuration:`"),
        (format!("Priority trust state: both\n{pfc}"), 1, "`pcp` or `dscp`"),
        (format!("Cable len: 7m\n{pfc}"), 1, "cable length"),
        (format!("{pfc}\t priority:  3\n"), 4, "`tc:` line before"),
        (format!("{pfc}tc: 0 ratelimit: unlimited, tsa: vendor\n\t priority:  8\n"), 5, "priority 0..7"),
        (format!("{pfc}tc: 8 ratelimit: unlimited, tsa: vendor\n"), 4, "`tc: N"),
        (format!("{pfc}tc: 0 ratelimit: unlimited\n"), 4, "`tc: N"),
        (format!("{pfc}tc: 0 ratelimit: unlimited, tsa: ets, bw: 150%\n"), 4, "`tc: N"),
        (format!("dscp2prio mapping:\n\tprio:0 dscp:07,64,\n{pfc}"), 2, "D 0..63"),
        (format!("dscp2prio mapping:\n\tprio:9 dscp:07,\n{pfc}"), 2, "P 0..7"),
        (format!("dscp2prio mapping:\n\tprio:0 dscp:07,\n\tprio:1 dscp:07,\n{pfc}"), 3, "one priority only"),
        (format!("{pfc}\nsomething odd\n"), 5, "`Key: value`"),
    ];
    for (text, line, expected) in cases {
        let err = mlnx_qos::parse(&text).expect_err(&text);
        assert_error(err, "mlnx_qos", line, expected);
    }
}
