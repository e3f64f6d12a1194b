//! Fuzz targets (proptest, since cargo-fuzz needs nightly) for the `ethtool -S`,
//! `ibv_devinfo` and `mlnx_qos` parsers: arbitrary bytes, arbitrary Unicode and mutated
//! real fixtures must give `Ok` or `Err`, never a panic. Accessors and serialisation of
//! whatever parses are exercised too, since they walk input-derived data.

use proptest::prelude::*;

use xirang_host::parse::ethtool::{self, Direction};
use xirang_host::parse::{ibv_devinfo, mlnx_qos};

macro_rules! data {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/", $path))
    };
}

const ETHTOOL: &[&str] = &[
    data!("ethtool/mlx5-cx4lx-fw14.23-ubuntu18.04-ethtool-S.txt"),
    data!("ethtool/mlx5-cx4lx-ubuntu16.04-old-driver-ethtool-S.txt"),
    data!("ethtool/mlx5-cx6dx-100g-xdp-kernel5.15-nonzero-ethtool-S.txt"),
];

const IBV_DEVINFO: &[&str] = &[
    data!("ibv_devinfo/cx3-mlx4-ib-2hca-ibv_devinfo.txt"),
    data!("ibv_devinfo/cx3-mlx4-ib-port2-polling-ibv_devinfo-v.txt"),
    data!("ibv_devinfo/cx6-hdr-ib-2port-one-down-ibv_devinfo-vv.txt"),
    data!("ibv_devinfo/mixed-cx4lx-cx5-cx6-8hca-roce-and-ib-ibv_devinfo.txt"),
];

const MLNX_QOS: &[&str] = &[
    data!("mlnx_qos/mlnx_qos-trust-dscp-pfc-prio3.txt"),
    data!("mlnx_qos/rdma-qos-script-query-pfc-prio5-ecn-cnp_dscp48-tclass160.txt"),
];

fn run_ethtool(text: &str) {
    if let Ok(stats) = ethtool::parse(text) {
        assert!(!stats.counters.is_empty());
        for (name, _) in &stats.counters {
            assert!(stats.get(name).is_some());
        }
        for prio in [0, 3, 7, u8::MAX] {
            let _ = stats.prio(Direction::Rx, prio, "pause");
            let _ = stats.prio(Direction::Tx, prio, "pause_duration");
        }
        let _ = stats.phy_errors();
        assert!(serde_json::to_string(&stats).is_ok());
    }
}

fn run_ibv_devinfo(text: &str) {
    if let Ok(devices) = ibv_devinfo::parse(text) {
        assert!(!devices.is_empty());
        for d in &devices {
            for p in &d.ports {
                assert_eq!(d.port(p.port).map(|q| q.port), Some(p.port));
            }
        }
        assert!(serde_json::to_string(&devices).is_ok());
    }
}

fn run_mlnx_qos(text: &str) {
    if let Ok(qos) = mlnx_qos::parse(text) {
        assert!(qos.dscp2prio.windows(2).all(|w| w[0].0 < w[1].0));
        for dscp in 0..=u8::MAX {
            let _ = qos.prio_of_dscp(dscp);
        }
        for prio in 0..8 {
            let _ = qos.tc_of_prio(prio);
        }
        assert!(qos.pfc_priorities().len() <= 8);
        assert!(serde_json::to_string(&qos).is_ok());
    }
}

/// One edit of a fixture: `(kind, position, byte)`.
type Mutation = (u8, usize, u8);

/// Applies line deletions/duplications, truncations, byte flips and byte insertions,
/// working on bytes so flips can break UTF-8 (then repaired lossily, as a reader would).
fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for &(kind, pos, byte) in mutations {
        match kind % 5 {
            0 | 1 => {
                let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
                let at = pos % lines.len();
                if kind % 5 == 0 {
                    lines.remove(at);
                } else {
                    let copy = lines[at].clone();
                    lines.insert(at, copy);
                }
                bytes = lines.join(&b'\n');
            }
            2 => bytes.truncate(pos % (bytes.len() + 1)),
            3 => {
                if !bytes.is_empty() {
                    let at = pos % bytes.len();
                    bytes[at] ^= byte.max(1);
                }
            }
            _ => {
                let at = pos % (bytes.len() + 1);
                bytes.insert(at, byte);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..12)
}

fn bytes_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u8>(), 0..2000).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Unicode text biased towards the characters the parsers split on.
fn unicode_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            prop_oneof![
                any::<char>(),
                Just(':'),
                Just('\n'),
                Just('\t'),
                Just(' '),
                Just('('),
                Just(')'),
                Just(','),
                Just('%'),
                Just('['),
                Just(']'),
                proptest::char::range('0', '9'),
            ],
            0..400
        )
        .prop_map(|cs| cs.into_iter().collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ethtool_arbitrary_bytes(text in bytes_text()) {
        run_ethtool(&text);
    }

    #[test]
    fn ethtool_arbitrary_unicode(text in unicode_text()) {
        run_ethtool(&text);
    }

    #[test]
    fn ethtool_mutated_fixtures(which in 0..ETHTOOL.len(), edits in mutations()) {
        run_ethtool(&mutate(ETHTOOL[which], &edits));
    }

    #[test]
    fn ibv_devinfo_arbitrary_bytes(text in bytes_text()) {
        run_ibv_devinfo(&text);
    }

    #[test]
    fn ibv_devinfo_arbitrary_unicode(text in unicode_text()) {
        run_ibv_devinfo(&text);
    }

    #[test]
    fn ibv_devinfo_mutated_fixtures(which in 0..IBV_DEVINFO.len(), edits in mutations()) {
        run_ibv_devinfo(&mutate(IBV_DEVINFO[which], &edits));
    }

    #[test]
    fn mlnx_qos_arbitrary_bytes(text in bytes_text()) {
        run_mlnx_qos(&text);
    }

    #[test]
    fn mlnx_qos_arbitrary_unicode(text in unicode_text()) {
        run_mlnx_qos(&text);
    }

    #[test]
    fn mlnx_qos_mutated_fixtures(which in 0..MLNX_QOS.len(), edits in mutations()) {
        run_mlnx_qos(&mutate(MLNX_QOS[which], &edits));
    }
}

/// The structured prefixes glued onto garbage reach deeper parser states than random
/// text does.
#[test]
fn prefixed_garbage_does_not_panic() {
    let heads = [
        "hca_id:\tx\n\t\tport:\t1\n",
        "hca_id: x\n  port: 1\n      GID[",
        "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n\tenabled 0 0 0 1 0 0 0 0\n",
        "dscp2prio mapping:\n\tprio:",
        "tc: ",
        "NIC statistics:\n",
    ];
    let tails = [
        "",
        ":",
        "(",
        "()",
        "(4294967296)",
        "\u{feff}:é",
        "]:",
        " ,:%",
        "\t\t\t\t\t\u{3000}x",
    ];
    for head in heads {
        for tail in tails {
            let text = format!("{head}{tail}");
            run_ethtool(&text);
            run_ibv_devinfo(&text);
            run_mlnx_qos(&text);
        }
    }
}
