//! nccl-tests diagnosis over the real fixtures (the collective crate's copies of
//! shared/fixtures/nccl-tests) and logs derived from them.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;
use xirang_diagnose::Finding;
use xirang_diagnose::nccl::{Hardware, Log, diagnose as diagnose_with};
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

/// Diagnosis with nothing known beyond the logs.
fn diagnose(logs: &[Log]) -> Result<Vec<Finding>, xirang_diagnose::nccl::LogError> {
    diagnose_with(logs, &Hardware::default()).map(|d| d.findings)
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
            .value
            .contains("remote process exited or there was a network error")
    );
    assert!(f.cause.contains("cnode2-016 lost its peer"), "{}", f.cause);
}

#[derive(Deserialize)]
struct Table {
    case: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    files: Vec<String>,
    #[serde(default)]
    nics: Option<u32>,
    #[serde(default)]
    nic_gbps: Option<f64>,
    expect: Vec<(String, String)>,
}

/// Every fixture, with the cause expected per file in test_data/nccl-expected.toml.
#[test]
fn every_fixture_gets_its_cause_and_healthy_logs_get_none() {
    let table: Table = toml::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/test_data/nccl-expected.toml"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut covered = BTreeSet::new();
    for c in &table.case {
        let logs: Vec<Log> = c.files.iter().map(|f| log(f)).collect();
        covered.extend(c.files.iter().cloned());
        let hw = Hardware {
            nics: c.nics,
            nic_gbps: c.nic_gbps,
            platform: None,
        };
        let d = diagnose_with(&logs, &hw).unwrap();
        let mut got: Vec<(String, String)> = d
            .findings
            .iter()
            .map(|f| (f.rule.to_string(), f.entity.clone()))
            .collect();
        got.sort();
        let mut want = c.expect.clone();
        want.sort();
        assert_eq!(got, want, "{:?}: {:#?}", c.files, d.findings);
        // Every finding about bandwidth says where the rows are and how the run stands
        // against the model, or why it was not compared.
        for f in d.findings.iter().filter(|f| f.rule != "NCCL-ABORT") {
            assert!(
                f.evidence.iter().any(|e| e.value.starts_with("model: ")
                    || e.value.starts_with("not compared with the model: ")),
                "{}: {:#?}",
                f.rule,
                f.evidence
            );
        }
    }
    let all: BTreeSet<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    assert_eq!(all, covered, "every fixture needs a row in nccl-expected.toml");
}

#[test]
fn levels_are_judged_against_the_model_only_with_a_rate() {
    let l = log("sendrecv-2node-4gpu-roce400-one-nic.txt");
    let blind = diagnose_with(std::slice::from_ref(&l), &Hardware::default()).unwrap();
    assert_eq!(blind.not_judged.len(), 1, "{:?}", blind.not_judged);
    assert!(
        blind.not_judged[0].contains("NIC rate is unknown"),
        "{:?}",
        blind.not_judged
    );
    // The NIC and k are read from NCCL's lines either way.
    assert!(
        blind.findings[0]
            .cause
            .starts_with("4 local ranks on MOC-R4PCC04U37 share 1 NIC(s) (mlx5_5:1)"),
        "{}",
        blind.findings[0].cause
    );
    let hw = Hardware {
        nic_gbps: Some(400.0),
        ..Hardware::default()
    };
    let d = diagnose_with(&[l], &hw).unwrap();
    assert!(d.not_judged.is_empty(), "{:?}", d.not_judged);
    let f = &d.findings[0];
    // The log does not name its test: sendrecv and broadcast fit its rows (busbw = algbw
    // at 8 ranks) and both are named; the flat ceiling is given against the model.
    assert!(
        f.cause.contains("flat at 5.86 GB/s, 48% of the model"),
        "{}",
        f.cause
    );
    let model = f
        .evidence
        .iter()
        .find(|e| e.value.starts_with("model: "))
        .unwrap();
    assert!(
        model.value.contains("any of Broadcast, SendRecv"),
        "{}",
        model.value
    );
    assert!(model.source.ends_with(":132"), "{}", model.source);
    // The same layout reaching the model is a design, not a fault: the log with its
    // table rows scaled to the model's 12.3 GB/s (x 2.2) has no finding.
    let scaled = log("sendrecv-2node-4gpu-roce400-one-nic.txt");
    let text: String = scaled
        .text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() == 13 && f[0].parse::<u64>().is_ok() && f[5].parse::<f64>().is_ok() {
                let t = |x: &str| format!("{:.0}", x.parse::<f64>().unwrap() / 2.2);
                let b = |x: &str| format!("{:.2}", x.parse::<f64>().unwrap() * 2.2);
                format!(
                    "{} {} {} {} {} {} {} {} {} {} {} {} {}",
                    f[0],
                    f[1],
                    f[2],
                    f[3],
                    f[4],
                    t(f[5]),
                    b(f[6]),
                    b(f[7]),
                    f[8],
                    t(f[9]),
                    b(f[10]),
                    b(f[11]),
                    f[12]
                )
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let fine = diagnose_with(
        &[Log {
            name: "scaled".into(),
            text,
        }],
        &hw,
    )
    .unwrap();
    assert!(fine.findings.is_empty(), "{:#?}", fine.findings);
    // An HDR cluster judged as 400G would be "slow": the rate is what decides.
    let hdr = log("h100-2node-4gpu-hdr-ib-debug-info.txt");
    let at = |g: f64| {
        diagnose_with(
            std::slice::from_ref(&hdr),
            &Hardware {
                nic_gbps: Some(g),
                ..Hardware::default()
            },
        )
        .unwrap()
        .findings
        .into_iter()
        .map(|f| f.rule)
        .collect::<Vec<_>>()
    };
    assert_eq!(at(200.0), Vec::<&str>::new());
    assert_eq!(at(400.0), vec!["NCCL-BELOW-MODEL"]);
}

#[test]
fn a_collapse_names_the_pair_the_rows_and_the_peak() {
    let d = diagnose(&[log("pair-2node-1gpu-collapse-cnode2-001_cnode2-004.txt")]).unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    let f = &d[0];
    assert_eq!((f.class, f.severity), (Class::Link, Severity::High));
    assert!(
        f.cause.starts_with("bandwidth falls as messages grow, from 9.30 GB/s at 128 MiB to 0.90 GB/s at 16 GiB (10% of its own peak) in alltoall_perf and 1 other test(s)"),
        "{}",
        f.cause
    );
    let sources: Vec<&str> = f.evidence.iter().map(|e| e.source.as_str()).collect();
    assert!(
        sources.contains(&"pair-2node-1gpu-collapse-cnode2-001_cnode2-004.txt:21"),
        "{sources:?}"
    );
    assert!(
        sources.contains(&"pair-2node-1gpu-collapse-cnode2-001_cnode2-004.txt:47"),
        "{sources:?}"
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
        f[0].evidence[0].value.contains("via NET/IB/"),
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
    // Not a log at all: an error that says what was expected, never "no fault".
    for text in ["", "\0\0\u{fffd}", "hello\nworld 1 2 3\n"] {
        let e = diagnose(&[Log {
            name: "x".into(),
            text: text.into(),
        }])
        .unwrap_err();
        assert_eq!(e.name, "x");
        assert!(e.message.contains("no nccl-tests result table"), "{text:?}: {e}");
    }
    // A header that is not nccl-tests': an error naming the line and what was expected.
    let e = diagnose(&[Log {
        name: "x".into(),
        text: "# nThread 1\n  8 2 float sum -1 x y z 0\n".into(),
    }])
    .unwrap_err();
    assert!(e.message.starts_with("line 1: expected `step:`"), "{e}");
}
