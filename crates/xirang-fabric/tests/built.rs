//! `Scenario::build` resolves every name a workload or fault holds, so the simulator looks
//! up none (issue 41, "one model from scenario to simulator").

use std::path::Path;

use xirang_fabric::built::{Ends, WorkloadId};
use xirang_fabric::model::{HostId, NicId};
use xirang_fabric::scenario::{FaultTarget, Scenario};

const TEXT: &str = r#"
[topology.leaf_spine]
leaves = 2
spines = 1
hosts_per_leaf = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
link_delay_ns = 500

[workloads.ar.collective]
op = "all_reduce"
bytes = 1_048_576
hosts = ["h3", "h1"]
stragglers = [{ host = "h1", factor = 2 }, { host = "h1", factor = 5 }]

[workloads.everyone.collective]
op = "all_reduce"
bytes = 1_048_576

[workloads.pairs.flows]
list = [
  { id = "a", src = "h0", dst = "h2", bytes = 1000 },
  { id = "b", src = "h1", dst = "h3", bytes = 1000, after = ["a"] },
  { src = "h2", dst = "h0", bytes = 1000, after = ["b", "a"] },
]

[workloads.perm.permutation]
bytes = 1000

[[faults]]
kind = "single_qp"
target = "pairs"
"#;

fn nic(h: u32) -> NicId {
    // One NIC per generated host, numbered with the hosts.
    NicId(h)
}

#[test]
fn workloads_and_fault_targets_are_ids_after_the_build() {
    let loaded = Scenario::parse(TEXT, Path::new("built.toml"))
        .and_then(|s| s.build(Path::new("built.toml"), Path::new("."), Some(TEXT)))
        .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.workloads.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        names,
        ["ar", "everyone", "pairs", "perm"],
        "name order, as the file's map"
    );
    for (i, w) in loaded.workloads.iter().enumerate() {
        assert_eq!(w.id, WorkloadId(i as u16));
        assert_eq!(Some(&w.spec), loaded.scenario.workloads.get(&w.name));
    }

    let Ends::Collective(ar) = &loaded.workloads[0].ends else {
        panic!("{:?}", loaded.workloads[0].ends)
    };
    assert_eq!(ar.hosts, [HostId(3), HostId(1)], "the listed order");
    assert_eq!(ar.slowdown, [1.0, 5.0], "the largest factor naming the host");
    let Ends::Collective(all) = &loaded.workloads[1].ends else {
        panic!("{:?}", loaded.workloads[1].ends)
    };
    assert_eq!(
        all.hosts,
        (0..4).map(HostId).collect::<Vec<_>>(),
        "no list: every host"
    );

    let Ends::Flows(flows) = &loaded.workloads[2].ends else {
        panic!("{:?}", loaded.workloads[2].ends)
    };
    let got: Vec<(NicId, NicId, Vec<u32>)> = flows.iter().map(|f| (f.src, f.dst, f.after.clone())).collect();
    assert_eq!(
        got,
        [
            (nic(0), nic(2), vec![]),
            (nic(1), nic(3), vec![0]),
            (nic(2), nic(0), vec![1, 0]),
        ]
    );
    assert_eq!(
        loaded.workloads[3].ends,
        Ends::Hosts((0..4).map(nic).collect()),
        "a permutation with no hosts listed runs on every host's first NIC"
    );

    assert_eq!(loaded.faults.len(), 1);
    assert_eq!(loaded.faults[0].target, FaultTarget::Workload(WorkloadId(2)));
}
