//! `iblinkinfo` and `show_gids` on real captures (test_data/iblinkinfo, test_data/show_gids;
//! sources in their SOURCE.md).

use xirang_host::parse::{iblinkinfo, show_gids};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/test_data/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn quantum_switch_ports_trained_at_edr_where_hdr_is_possible() {
    let links = iblinkinfo::parse(&read("iblinkinfo/iblinkinfo-quantum-edr-could-be-hdr.txt")).unwrap();
    // 41 ports of one switch; the `ibswitches` lines and prompts before them are not links.
    assert_eq!(links.len(), 41);
    assert!(links.iter().all(|l| l.switch == "Quantum Mellanox Technologies"));
    let degraded: Vec<_> = links.iter().filter(|l| l.could_be.is_some()).collect();
    assert_eq!(
        degraded.iter().map(|l| l.port).collect::<Vec<_>>(),
        [21, 22, 23, 24]
    );
    let p21 = degraded[0];
    assert_eq!(
        (
            p21.width.as_deref(),
            p21.speed_gbps,
            p21.state.as_str(),
            p21.phys_state.as_str()
        ),
        (Some("4X"), Some(25.78125), "Active", "LinkUp")
    );
    assert_eq!(p21.remote.as_deref(), Some("node3 HCA-2"));
    assert_eq!(p21.could_be.as_deref(), Some("Could be 53.125 Gbps"));
    let up: Vec<u32> = links.iter().filter(|l| l.is_up()).map(|l| l.port).collect();
    assert_eq!(up, [21, 22, 23, 24, 40, 41]);
    let p1 = &links[0];
    assert_eq!(
        (
            p1.port,
            p1.state.as_str(),
            p1.phys_state.as_str(),
            p1.width.as_deref()
        ),
        (1, "Down", "Polling", None)
    );
}

#[test]
fn line_mode_names_the_switch_on_every_line() {
    let links = iblinkinfo::parse(&read("iblinkinfo/iblinkinfo-ibsim-could-be-12x-qdr.txt")).unwrap();
    assert_eq!(links.len(), 4);
    assert_eq!(links[0].switch, "hxa-su1-leaf-r1");
    assert_eq!(
        links[0].could_be.as_deref(),
        Some("Could be 12X Could be 10.0 Gbps")
    );
    assert_eq!(links[0].remote.as_deref(), Some("hxa-gpu01 mlx5_0"));
    assert_eq!(
        (links[3].switch.as_str(), links[3].port, links[3].is_up()),
        ("hxa-su2-leaf-r2", 34, false)
    );
    assert_eq!(links[3].could_be, None);
}

#[test]
fn show_gids_space_aligned_and_tabbed() {
    let g = show_gids::parse(&read("show_gids/show_gids-cx6-mlx5_0-6gids-space-aligned.txt")).unwrap();
    assert_eq!(g.len(), 6);
    let v2: Vec<(u16, Option<&str>)> = g
        .iter()
        .filter(|r| r.version == "v2")
        .map(|r| (r.index, r.ipv4.as_deref()))
        .collect();
    assert_eq!(v2, [(1, None), (3, None), (5, Some("172.19.0.60"))]);
    assert_eq!(g[5].netdev.as_deref(), Some("ens1f0"));
    assert_eq!(g[5].sysfs_type(), "RoCE v2");
    let g = show_gids::parse(&read("show_gids/show_gids-sriov-vf-pod-mlx5_3.txt")).unwrap();
    assert_eq!(g.len(), 4);
    assert_eq!((g[3].device.as_str(), g[3].port, g[3].index), ("mlx5_3", 1, 3));
    assert_eq!(
        (g[3].ipv4.as_deref(), g[3].netdev.as_deref()),
        (Some("192.168.10.2"), Some("net1"))
    );
}

#[test]
fn bad_input_names_the_line() {
    let e = show_gids::parse("DEV PORT INDEX GID IPv4 VER DEV\nmlx5_0 x 0 fe80:0:0:0:0:0:0:1 v2 eth0\n")
        .unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.to_string().contains("a port number"), "{e}");
    assert!(show_gids::parse("hello\n").is_err());
    let e = iblinkinfo::parse("  10   21[  ] ==( 4X fast Gbps Active/  LinkUp)==> 40 1[ ] \"n\" ( )\n")
        .unwrap_err();
    assert_eq!(e.line, 1);
    // Nothing that looks like a link: no links, no error.
    assert!(iblinkinfo::parse("random text\n").unwrap().is_empty());
}

mod fuzz {
    //! Whatever the input, the two parsers return `Ok` or `Err`, never panic: arbitrary
    //! text, and the real captures cut and mutated.
    use proptest::prelude::*;
    use xirang_host::parse::{iblinkinfo, show_gids};

    const CAPTURES: [&str; 4] = [
        include_str!("../test_data/iblinkinfo/iblinkinfo-quantum-edr-could-be-hdr.txt"),
        include_str!("../test_data/iblinkinfo/iblinkinfo-ibsim-could-be-12x-qdr.txt"),
        include_str!("../test_data/show_gids/show_gids-cx6-mlx5_0-6gids-space-aligned.txt"),
        include_str!("../test_data/show_gids/show_gids-sriov-vf-pod-mlx5_3.txt"),
    ];

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,300}") {
            let _ = iblinkinfo::parse(&s);
            let _ = show_gids::parse(&s);
        }

        #[test]
        fn mutated_captures_never_panic(which in 0usize..4, cut in 0usize..4000, at in 0usize..4000, junk in "[ =()\\[\\]/\"a-zA-Z0-9.:|-]{0,12}") {
            let text = CAPTURES[which];
            let mut t: String = text.chars().take(cut.min(text.len())).collect();
            let at = at.min(t.chars().count());
            let byte = t.char_indices().nth(at).map_or(t.len(), |(i, _)| i);
            t.insert_str(byte, &junk);
            let _ = iblinkinfo::parse(&t);
            let _ = show_gids::parse(&t);
        }
    }
}
