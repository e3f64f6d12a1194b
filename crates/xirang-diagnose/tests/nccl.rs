//! nccl-tests diagnosis over the real fixtures (the collective crate's copies of
//! shared/fixtures/nccl-tests) and logs derived from them.

use std::path::PathBuf;

use xirang_diagnose::nccl::{Log, diagnose};
use xirang_diagnose::{Class, Severity};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../xirang-collective/test_data/nccl-tests")
}

fn log(name: &str) -> Log {
    let p = fixtures().join(name);
    Log {
        name: name.to_string(),
        text: std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    }
}

fn rules(logs: &[Log]) -> Vec<(&'static str, String)> {
    diagnose(logs)
        .unwrap()
        .into_iter()
        .map(|f| (f.rule, f.entity))
        .collect()
}

#[test]
fn the_failing_pair_is_flagged_with_the_abort_line() {
    let f = diagnose(&[log("pair-2node-1gpu-network-error.txt")]).unwrap();
    assert_eq!(f.len(), 1, "{f:#?}");
    let f = &f[0];
    assert_eq!(
        (f.rule, f.class, f.severity),
        ("NCCL-ABORT", Class::Link, Severity::High)
    );
    assert_eq!(f.entity, "cnode2-005<->cnode2-016");
    assert_eq!(f.evidence[0].source, "pair-2node-1gpu-network-error.txt:12");
    assert!(
        f.evidence[0]
            .text
            .contains("remote process exited or there was a network error")
    );
    assert!(f.cause.contains("cnode2-016 lost its peer"), "{}", f.cause);
}

#[test]
fn healthy_logs_get_no_finding_and_sockets_are_named() {
    let mut seen = 0;
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".txt") {
            continue;
        }
        seen += 1;
        let got = rules(&[log(&name)]);
        let want: Vec<(&str, String)> = match name.as_str() {
            "pair-2node-1gpu-network-error.txt" => {
                vec![("NCCL-ABORT", "cnode2-005<->cnode2-016".into())]
            }
            "l40s-2node-1gpu-socket-ib-disabled.txt" => vec![(
                "NCCL-SOCKET",
                "nvidiatools-29-workload<->nvidiatools-30-workload".into(),
            )],
            // Its channels say `via NET/IB/1/Shared`, never `/GDRDMA`; the capture's
            // README reports NCCL at about a third of the 400G link while ib_write_bw
            // reached ~370 Gb/s on it (shared/fixtures/nccl-tests/SOURCE.md).
            "sendrecv-2node-1gpu-roce400.txt" => {
                vec![("NCCL-GDR-OFF", "MOC-R4PCC04U35<->MOC-R4PCC04U37".into())]
            }
            _ => vec![],
        };
        assert_eq!(got, want, "{name}");
    }
    assert_eq!(seen, 11);
    let f = diagnose(&[log("l40s-2node-1gpu-socket-ib-disabled.txt")]).unwrap();
    assert_eq!(
        f[0].evidence[0].source,
        "l40s-2node-1gpu-socket-ib-disabled.txt:1"
    );
    assert!(
        f[0].scope.contains("busbw 8.12 GB/s at 8589934592 B"),
        "{}",
        f[0].scope
    );
}

#[test]
fn gpudirect_off_is_read_from_the_channel_lines() {
    let mut l = log("h100-2node-4gpu-hdr-ib-debug-info.txt");
    l.text = l.text.replace("/GDRDMA", "");
    let f = diagnose(&[l]).unwrap();
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0].rule, f[0].class), ("NCCL-GDR-OFF", Class::HostConfig));
    assert!(
        f[0].evidence[0].text.contains("via NET/IB/"),
        "{:?}",
        f[0].evidence
    );
    assert!(f[0].cause.contains("(0 with it)"), "{}", f[0].cause);
}

#[test]
fn gpus_funnelled_through_one_nic_are_named_per_host() {
    let mut l = log("h100-2node-4gpu-hdr-ib-debug-info.txt");
    for k in ["2", "3", "4"] {
        l.text = l.text.replace(&format!("via NET/IB/{k}/"), "via NET/IB/1/");
        l.text = l.text.replace(&format!("via NET/IB/{k}("), "via NET/IB/1(");
    }
    let got = rules(&[l]);
    assert_eq!(
        got,
        vec![
            ("NCCL-NIC-SHARED", "gcn151/NET-IB-1".to_string()),
            ("NCCL-NIC-SHARED", "gcn154/NET-IB-1".to_string()),
        ]
    );
}

/// A pairwise log in nccl-tests' layout (the healthy fixture's header, one row).
fn pair(a: &str, b: &str, busbw: f64) -> Log {
    let algbw = 2.0 * busbw;
    let t_us = 8589934592.0 / (algbw * 1e3);
    Log {
        name: format!("nccl_N2_G1_{a}_{b}.log"),
        text: format!(
            "# nThread 1 nGpus 1 minBytes 33554432 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n#  Rank  0 Group  0 Pid 1 on {a} device  0 [0000:1b:00] NVIDIA H100 80GB HBM3\n#  Rank  1 Group  0 Pid 2 on {b} device  0 [0000:1b:00] NVIDIA H100 80GB HBM3\n#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n  8589934592     536870912    double    none      -1  {t_us:.0}   {algbw:.2}   {busbw:.2}       0  {t_us:.0}   {algbw:.2}   {busbw:.2}    N/A\n# Avg bus bandwidth    : {busbw}\n"
        ),
    }
}

#[test]
fn the_pair_matrix_tells_a_bad_node_from_a_bad_pair() {
    let nodes = ["n1", "n2", "n3", "n4", "n5"];
    let mut logs = Vec::new();
    for (i, a) in nodes.iter().enumerate() {
        for b in &nodes[i + 1..] {
            let bw = if *a == "n5" || *b == "n5" {
                6.5 // n5 is slow with everyone
            } else if (*a, *b) == ("n1", "n3") {
                9.0 // one slow path
            } else {
                13.5
            };
            logs.push(pair(a, b, bw));
        }
    }
    let f = diagnose(&logs).unwrap();
    let got: Vec<(&str, &str, Class)> = f.iter().map(|x| (x.rule, x.entity.as_str(), x.class)).collect();
    assert_eq!(
        got,
        vec![
            ("NCCL-SLOW-NODE", "n5", Class::Nic),
            ("NCCL-SLOW-PAIR", "n1<->n3", Class::Link),
        ]
    );
    assert_eq!(f[0].evidence.len(), 4);
    assert!(
        f[1].cause.starts_with("this pair reaches 67% of the median pair"),
        "{}",
        f[1].cause
    );
    // Healthy matrix: nothing.
    let healthy: Vec<Log> = (0..4)
        .map(|i| pair(nodes[i], nodes[i + 1], 13.4 + i as f64 * 0.05))
        .collect();
    assert!(diagnose(&healthy).unwrap().is_empty());
}

#[test]
fn garbage_is_an_error_or_nothing_never_a_panic() {
    for text in ["", "\0\0\u{fffd}", "# nThread 1\n  8 2 float sum -1 x y z 0\n"] {
        let _ = diagnose(&[Log {
            name: "x".into(),
            text: text.into(),
        }]);
    }
}
