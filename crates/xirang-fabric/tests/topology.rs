//! Properties of the topology generators and the router.

use std::path::Path;

use proptest::prelude::*;
use xirang_fabric::analysis::summarize;
use xirang_fabric::model::{Fabric, NicId, Node, Tier};
use xirang_fabric::routing::Graph;
use xirang_fabric::scenario::{count, with_topology};
use xirang_fabric::topology::{
    FatTreeSpec, HostTemplate, LeafSpineSpec, RailOptimizedSpec, SpineGroups, TopologySpec,
};

fn build(spec: TopologySpec) -> Fabric {
    let s = with_topology(spec);
    s.build(Path::new("<test>"), Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"))
        .fabric
}

fn fat_tree(k: u32) -> Fabric {
    build(TopologySpec::FatTree(FatTreeSpec {
        k: count(k),
        host_rate_gbps: 100.0,
        fabric_rate_gbps: 100.0,
        link_delay_ns: 1000,
        host: HostTemplate::default(),
    }))
}

fn pod_of(f: &Fabric, nic: NicId, k: u32) -> u32 {
    // Hosts are numbered pod by pod, k^2/4 per pod.
    let host: u32 = f.hosts[f.nics[nic.index()].host.index()].name[1..]
        .parse()
        .unwrap();
    host / (k * k / 4)
}

#[test]
fn fat_tree_counts_and_paths() {
    for k in [4u32, 8, 16] {
        let f = fat_tree(k);
        assert_eq!(f.hosts.len() as u32, k * k * k / 4, "hosts, k={k}");
        assert_eq!(f.switches.len() as u32, 5 * k * k / 4, "switches, k={k}");
        assert_eq!(f.switch_count(Tier::Core) as u32, k * k / 4);
        let s = summarize(&f);
        assert!(s.full_bisection && s.connected, "k={k}");
        assert_eq!(s.diameter_hops, 6);
        let g = Graph::new(&f);
        // Every cross-pod pair of the first host has (k/2)^2 paths; same pod other leaf (k/2).
        let a = NicId(0);
        for b in (1..f.nics.len() as u32).map(NicId) {
            let n = g.count_paths(a, b);
            let expect = if pod_of(&f, b, k) != pod_of(&f, a, k) {
                u128::from(k / 2).pow(2)
            } else if f.attached_switch(a, 0).unwrap().node == f.attached_switch(b, 0).unwrap().node {
                1
            } else {
                u128::from(k / 2)
            };
            assert_eq!(n, expect, "k={k}, h0 -> nic {}", b.0);
        }
    }
}

#[test]
fn ecmp_paths_are_distinct_shortest_and_counted() {
    let f = fat_tree(8);
    let g = Graph::new(&f);
    let paths = g.ecmp_paths(NicId(0), NicId(127), usize::MAX);
    assert_eq!(paths.len(), 16);
    for p in &paths {
        assert_eq!(p.hops.len(), 6);
        assert_eq!(p.mtu_bytes(&f), 9000);
        assert_eq!(p.delay_ns(&f), 6000);
    }
    let mut uniq: Vec<_> = paths
        .iter()
        .map(|p| p.hops.iter().map(|h| h.link).collect::<Vec<_>>())
        .collect();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 16);
}

fn leaf_spine(leaves: u32, spines: u32, hpl: u32, nics: u32, lps: u32) -> Fabric {
    // Oversubscription chosen so that each leaf has `lps` links to every spine.
    let down = f64::from(hpl * nics) * 100.0;
    build(TopologySpec::LeafSpine(LeafSpineSpec {
        leaves: count(leaves),
        spines: count(spines),
        hosts_per_leaf: count(hpl),
        oversubscription: down / f64::from(spines * lps * 100),
        host_rate_gbps: 100.0,
        fabric_rate_gbps: 100.0,
        link_delay_ns: 1000,
        host: HostTemplate::with_pairs(nics),
    }))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn leaf_spine_paths_equal_spine_count(leaves in 2u32..6, spines in 1u32..6, hpl in 1u32..5, nics in 1u32..3, lps in 1u32..3) {
        let f = leaf_spine(leaves, spines, hpl, nics, lps);
        prop_assert_eq!(f.hosts.len() as u32, leaves * hpl);
        let s = summarize(&f);
        prop_assert!(s.connected);
        let g = Graph::new(&f);
        let n = f.nics.len() as u32;
        for a in 0..n {
            for b in 0..n {
                if a == b { continue; }
                let (a, b) = (NicId(a), NicId(b));
                let same_leaf = f.attached_switch(a, 0).unwrap().node == f.attached_switch(b, 0).unwrap().node;
                let expect = if same_leaf { 1 } else { u128::from(spines) * u128::from(lps * lps) };
                prop_assert_eq!(g.count_paths(a, b), expect);
            }
        }
        // One link per leaf-spine pair: the number of paths between leaves is the number of spines.
        if lps == 1 && leaves >= 2 {
            prop_assert_eq!(g.count_paths(NicId(0), NicId(n - 1)), u128::from(spines));
        }
        // Oversubscription as requested.
        let leaf = s.tiers.iter().find(|t| t.tier == Tier::Leaf).unwrap();
        let want = f64::from(hpl * nics) / f64::from(spines * lps);
        prop_assert!((leaf.oversubscription.unwrap() - want).abs() < 1e-9);
    }

    #[test]
    fn rail_optimized_puts_nic_i_on_rail_i(hosts in 1u32..6, rails in 1u32..9, spines in 1u32..4) {
        let f = build(TopologySpec::RailOptimized(RailOptimizedSpec {
            hosts: count(hosts),
            hosts_per_group: None,
            spines: Some(count(spines)),
            radix: None,
            spine_groups: SpineGroups::Rail,
            oversubscription: f64::from(hosts) / f64::from(spines),
            host_rate_gbps: 400.0,
            fabric_rate_gbps: 400.0,
            link_delay_ns: 500,
            host: HostTemplate::with_pairs(rails),
        }));
        prop_assert_eq!(f.switch_count(Tier::Leaf) as u32, rails);
        for h in &f.hosts {
            for (i, nic) in h.nics.iter().enumerate() {
                let leaf = f.attached_switch(*nic, 0).unwrap();
                prop_assert_eq!(&f.node_name(leaf.node), &format!("leaf{i}"));
                // GPU i sits with NIC i.
                prop_assert_eq!(f.gpus[h.gpus[i].index()].pcie_switch, f.nics[nic.index()].pcie_switch);
                prop_assert_eq!(f.nic_for_gpu(h.gpus[i]), Some(*nic));
            }
            // PCIe switches split evenly over the two sockets, socket 0 first.
            let on1 = h.pcie_switches.iter().filter(|p| p.socket == 1).count();
            let on0 = h.pcie_switches.len() - on1;
            prop_assert!(on0 >= 1 && on0.abs_diff(on1) <= 1, "{} on socket 0, {} on socket 1", on0, on1);
            prop_assert!(h.pcie_switches.windows(2).all(|w| w[0].socket <= w[1].socket));
        }
        prop_assert!(summarize(&f).connected);
    }
}

/// A scalable-unit fabric as the reference architectures build it: `hosts` HGX-style
/// hosts (8 GPU/NIC pairs at 400 Gbit/s) on switches of `radix` ports.
fn superpod(hosts: u32, per_su: u32, radix: u32, groups: SpineGroups) -> Result<Fabric, String> {
    let s = with_topology(TopologySpec::RailOptimized(RailOptimizedSpec {
        hosts: count(hosts),
        hosts_per_group: Some(count(per_su)),
        spines: None,
        radix: Some(count(radix)),
        spine_groups: groups,
        oversubscription: 1.0,
        host_rate_gbps: 400.0,
        fabric_rate_gbps: 400.0,
        link_delay_ns: 500,
        host: HostTemplate::with_pairs(8),
    }));
    s.build(Path::new("<test>"), Path::new("."), None)
        .map(|l| l.fabric)
        .map_err(|e| e.to_string())
}

/// Cables by the tiers they join: (host-leaf, leaf-spine, spine-core, any other).
fn cables(f: &Fabric) -> [usize; 4] {
    let tier = |n: Node| match n {
        Node::Nic(_) => None,
        Node::Switch(s) => Some(f.switches[s.index()].tier),
    };
    let mut c = [0; 4];
    for l in &f.links {
        let i = match (tier(l.a.node), tier(l.b.node)) {
            (None, Some(Tier::Leaf)) | (Some(Tier::Leaf), None) => 0,
            (Some(Tier::Leaf), Some(Tier::Spine)) | (Some(Tier::Spine), Some(Tier::Leaf)) => 1,
            (Some(Tier::Spine), Some(Tier::Core)) | (Some(Tier::Core), Some(Tier::Spine)) => 2,
            _ => 3,
        };
        c[i] += 1;
    }
    c
}

/// No switch has more links than ports, every NIC is cabled to a switch, and the switches
/// form one connected graph, so every host reaches every other through switches only.
fn check_radix_and_reach(f: &Fabric, radix: usize) -> Result<(), String> {
    for s in &f.switches {
        let used = s.ports.iter().filter(|p| p.link.is_some()).count();
        if used > radix || s.ports.len() > radix {
            return Err(format!(
                "{} uses {used} of {} ports, radix {radix}",
                s.name,
                s.ports.len()
            ));
        }
    }
    for n in 0..f.nics.len() as u32 {
        if f.attached_switch(NicId(n), 0).is_none() {
            return Err(format!("NIC {n} is not cabled to a switch"));
        }
    }
    let g = Graph::new(f);
    let first = g.index(Node::Switch(xirang_fabric::model::SwitchId(0)));
    let mut seen = vec![false; g.len()];
    let mut stack = vec![first];
    seen[first as usize] = true;
    while let Some(v) = stack.pop() {
        if matches!(g.node(v), Node::Nic(_)) {
            continue;
        }
        for a in g.adj(v) {
            if !seen[a.peer as usize] {
                seen[a.peer as usize] = true;
                stack.push(a.peer);
            }
        }
    }
    match seen.iter().position(|s| !s) {
        Some(i) => Err(format!("{} is unreachable", f.node_name(g.node(i as u32)))),
        None => Ok(()),
    }
}

/// The component counts the DGX SuperPOD reference architectures publish
/// (docs/large-fabrics.md §1): units, leaves, spines, cores, and the cable counts between
/// tiers, which equal the GPU count in a non-blocking fabric.
#[test]
fn scalable_units_give_the_published_component_counts() {
    // (units, leaves, spines, cores): the B200 table, and the H100 table's 1 and 3 units.
    let rows = [
        (1, 8, 4, 0),
        (2, 16, 8, 0),
        (3, 24, 16, 0),
        (4, 32, 16, 0),
        (8, 64, 32, 0),
        (16, 128, 128, 64),
        (32, 256, 256, 128),
        (64, 512, 512, 256),
    ];
    for groups in [SpineGroups::Rail, SpineGroups::Units] {
        for (sus, leaves, spines, cores) in rows {
            let f = superpod(32 * sus, 32, 64, groups).unwrap();
            let gpus = 256 * sus as usize;
            let got = (
                f.switch_count(Tier::Leaf),
                f.switch_count(Tier::Spine),
                f.switch_count(Tier::Core),
            );
            assert_eq!(got, (leaves, spines, cores), "{sus} units, {groups:?}");
            assert_eq!(f.gpus.len(), gpus);
            let want = [gpus, gpus, if cores > 0 { gpus } else { 0 }, 0];
            assert_eq!(cables(&f), want, "cables of {sus} units, {groups:?}");
            check_radix_and_reach(&f, 64).unwrap_or_else(|e| panic!("{sus} units, {groups:?}: {e}"));
        }
    }
}

/// Rail groups keep a rail's traffic off the core: two hosts in different units of one
/// spine group reach each other on rail r through one spine.
#[test]
fn rail_groups_keep_same_rail_traffic_below_the_core() {
    let f = superpod(32 * 16, 32, 64, SpineGroups::Rail).unwrap();
    let g = Graph::new(&f);
    let (a, b) = (f.hosts[0].nics[3], f.hosts[32 * 15].nics[3]);
    let paths = g.ecmp_paths(a, b, 4);
    assert!(!paths.is_empty());
    assert!(
        paths.iter().all(|p| p.hops.len() == 4),
        "NIC, leaf, spine, leaf, NIC"
    );
    // Across rails the path climbs to a core.
    let c = f.hosts[32 * 15].nics[4];
    assert!(g.ecmp_paths(a, c, 4).iter().all(|p| p.hops.len() == 6));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any number of units from 1 to 64, full or with the last one partly filled, on
    /// either grouping: no switch exceeds its radix, every host reaches every other, and
    /// the fabric is non-blocking (as many leaf uplinks as host ports of full units, and
    /// at least as many core links as spine downlinks).
    #[test]
    fn scalable_units_respect_radix_and_connect_every_host(
        sus in 1u32..=64,
        missing in 0u32..32,
        rail in any::<bool>(),
    ) {
        let groups = if rail { SpineGroups::Rail } else { SpineGroups::Units };
        let hosts = (32 * sus - missing).max(1);
        let f = superpod(hosts, 32, 64, groups).map_err(TestCaseError::fail)?;
        prop_assert_eq!(f.hosts.len() as u32, hosts);
        prop_assert_eq!(f.switch_count(Tier::Leaf) as u32, 8 * sus);
        check_radix_and_reach(&f, 64).map_err(TestCaseError::fail)?;
        let [down, up, core, other] = cables(&f);
        prop_assert_eq!(down as u32, 8 * hosts);
        prop_assert_eq!(up as u32, 8 * sus * 32);
        prop_assert_eq!(other, 0);
        prop_assert_eq!(f.switch_count(Tier::Core) > 0, sus > 8);
        if sus > 8 {
            prop_assert!(core >= up);
        }
    }
}

#[test]
fn a_fat_tree_splits_by_pods_and_never_divides_a_host() {
    use xirang_fabric::partition::partition;
    let f = fat_tree(4);
    let p = partition(&f, 2, &[]);
    assert_eq!((p.parts, p.split_above, p.groups), (2, Some(Tier::Core), 4));
    // Two pods each, balanced by ports; only pod-to-core links are cut.
    assert_eq!(p.members[0].hosts, 8);
    assert_eq!(p.members[1].hosts, 8);
    assert!(p.cut_links > 0 && p.lookahead_ns == Some(1000));
    for l in &f.links {
        if p.of(&f, l.a.node) != p.of(&f, l.b.node) {
            let tiers: Vec<_> = [l.a.node, l.b.node]
                .iter()
                .filter_map(|n| match n {
                    Node::Switch(s) => Some(f.switches[s.index()].tier),
                    Node::Nic(_) => None,
                })
                .collect();
            assert!(tiers.contains(&Tier::Core), "cut below the core");
        }
    }
    // One partition asked: nothing is cut.
    let one = partition(&f, 1, &[]);
    assert_eq!((one.parts, one.cut_links, one.lookahead_ns), (1, 0, None));
    // Coupled hosts of different pods share a partition.
    let c = partition(
        &f,
        4,
        &[(xirang_fabric::model::HostId(0), xirang_fabric::model::HostId(15))],
    );
    assert_eq!(c.host_part[0], c.host_part[15]);
}

/// Issue 21: names may hold any text; `topo dot` escapes them so the graph still parses
/// (every quote that delimits a string is unescaped, every other one escaped).
#[test]
fn dot_escapes_quotes_and_backslashes_in_names() {
    let text = std::fs::read_to_string("test_data/scenarios/ok/0001_explicit_two_hosts.toml")
        .unwrap()
        .replace("name = \"a\"", "name = 'a\"b\\c'")
        .replace("a = \"a/mlx5_0\"", "a = 'a\"b\\c/mlx5_0'")
        .replace("name = \"tor0\"", "name = 'tor\"0'")
        .replace("b = \"tor0\"", "b = 'tor\"0'")
        .replace("b = \"tor0:3\"", "b = 'tor\"0:3'")
        .replace("src = \"a\"", "src = 'a\"b\\c'");
    let p = std::path::Path::new("test.toml");
    let l = xirang_fabric::scenario::Scenario::parse(&text, p)
        .and_then(|s| s.build(p, std::path::Path::new("test_data/scenarios/ok"), Some(&text)))
        .unwrap_or_else(|e| panic!("{e}"));
    let dot = xirang_fabric::analysis::to_dot(&l.fabric);
    assert!(dot.contains(r#""a\"b\\c""#), "{dot}");
    assert!(dot.contains(r#""tor\"0""#), "{dot}");
    for line in dot.lines() {
        // Quotes not preceded by an odd run of backslashes delimit strings: an even count.
        let b = line.as_bytes();
        let mut delimiters = 0;
        for (i, &c) in b.iter().enumerate() {
            if c == b'"' {
                let slashes = b[..i].iter().rev().take_while(|&&x| x == b'\\').count();
                delimiters += usize::from(slashes % 2 == 0);
            }
        }
        assert_eq!(delimiters % 2, 0, "unbalanced quotes: {line}");
    }
}

/// A fabric from an HPCC topology file: `attach[h]` is host h's switch (or none), `links`
/// join switches by index.
fn hpcc_fabric(attach: &[Option<usize>], n_switches: usize, links: &[(usize, usize)]) -> Fabric {
    let hosts = attach.len();
    let mut lines = Vec::new();
    for (h, a) in attach.iter().enumerate() {
        if let Some(s) = a {
            lines.push(format!("{h} {} 100Gbps 0.001ms 0", hosts + s));
        }
    }
    for (a, b) in links {
        lines.push(format!("{} {} 100Gbps 0.001ms 0", hosts + a, hosts + b));
    }
    let switches: Vec<String> = (0..n_switches).map(|s| (hosts + s).to_string()).collect();
    let text = format!(
        "{} {} {}\n{}\n{}\n",
        hosts + n_switches,
        n_switches,
        lines.len(),
        switches.join(" "),
        lines.join("\n")
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.txt"), text).unwrap();
    let scenario = "[topology.hpcc]\nfile = \"t.txt\"\n";
    let p = dir.path().join("s.toml");
    xirang_fabric::scenario::Scenario::parse(scenario, &p)
        .and_then(|s| s.build(&p, dir.path(), Some(scenario)))
        .unwrap_or_else(|e| panic!("{e}"))
        .fabric
}

/// Diameter and connectivity the slow, obvious way: a search from every NIC.
fn naive_diameter(f: &Fabric) -> (u32, bool) {
    let g = Graph::new(f);
    let n = f.nics.len() as u32;
    let (mut diameter, mut connected) = (0, true);
    for a in 0..n {
        if g.adj(a).is_empty() {
            return (0, false);
        }
        let d = g.distances_to(a);
        for b in (0..n).filter(|b| *b != a) {
            if d[b as usize] == xirang_fabric::routing::UNREACHABLE {
                connected = false;
            } else {
                diameter = diameter.max(d[b as usize]);
            }
        }
    }
    (diameter, connected)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The word-parallel searches of `summarize` agree with one search per NIC, on random
    /// fabrics with more than 64 attachment switches (two batches), unlinked hosts and
    /// several components.
    #[test]
    fn diameter_and_connectivity_match_a_search_from_every_nic(
        n_switches in 1usize..100,
        attach in prop::collection::vec(prop::option::weighted(0.98, 0usize..100), 2..140),
        links in prop::collection::vec((0usize..100, 0usize..100), 0..220),
    ) {
        let attach: Vec<Option<usize>> = attach.into_iter().map(|a| a.map(|s| s % n_switches)).collect();
        let links: Vec<(usize, usize)> = links
            .into_iter()
            .map(|(a, b)| (a % n_switches, b % n_switches))
            .filter(|(a, b)| a != b)
            .collect();
        let f = hpcc_fabric(&attach, n_switches, &links);
        let s = summarize(&f);
        prop_assert_eq!((s.diameter_hops, s.connected), naive_diameter(&f));
    }
}
