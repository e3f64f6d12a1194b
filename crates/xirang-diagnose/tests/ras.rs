//! NCCL RAS reports (the examples of NCCL's user guide, `test_data/nccl-ras/`) into
//! findings: each gives the finding its text describes, a healthy one none, and the text
//! and JSON forms of one report the same findings.

use xirang_diagnose::finding::render_text;
use xirang_diagnose::ras::{Form, findings, parse};
use xirang_diagnose::{Class, Finding, Severity};

fn read(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/test_data/nccl-ras/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn of(name: &str) -> Vec<Finding> {
    let r = parse(&read(name), name).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.not_understood.is_empty(), "{name}: {:?}", r.not_understood);
    findings(&r)
}

fn rules(f: &[Finding]) -> Vec<(&'static str, String)> {
    f.iter().map(|f| (f.rule, f.entity.clone())).collect()
}

#[test]
fn healthy_reports_give_no_finding() {
    for f in [
        "01-text-job-summary.txt",
        "02-text-communicators-running-ok.txt",
        "09-monitor-text-banner.txt",
    ] {
        assert_eq!(of(f), vec![], "{f}");
    }
}

#[test]
fn a_dead_process_is_found_with_its_host_and_missing_rank() {
    let f = of("07-text-errors-dead-process.txt");
    assert_eq!(rules(&f), vec![("NCCL-RAS-DEAD", "172.16.64.213".to_string())]);
    let d = &f[0];
    assert_eq!((d.class, d.severity), (Class::Nic, Severity::High));
    assert!(
        d.scope.contains("process 3487984 (GPU 5) on 172.16.64.213")
            && d.scope.contains("communicator cf264af53edbe986 misses rank 21"),
        "{}",
        d.scope
    );
    assert_eq!(d.evidence[0].source, "07-text-errors-dead-process.txt:6");
    // The monitor's events say the same of another process, in text and in JSON.
    for m in [
        "10-monitor-text-peer-dead-event.txt",
        "11-monitor-json-peer-dead-event.json",
    ] {
        let f = of(m);
        assert_eq!(
            rules(&f),
            vec![("NCCL-RAS-DEAD", "172.16.64.245".to_string())],
            "{m}"
        );
        assert!(
            f[0].scope.contains("process 1524345 (GPU 1) on 172.16.64.245"),
            "{m}: {}",
            f[0].scope
        );
    }
}

#[test]
fn an_incomplete_report_names_the_silent_process_and_the_timeouts() {
    let f = of("06-text-incomplete-with-timeout-warning.txt");
    assert_eq!(
        rules(&f),
        vec![
            ("NCCL-RAS-UNREACHABLE", "172.16.64.213".to_string()),
            ("NCCL-RAS-TIMEOUT", "RAS network".to_string())
        ]
    );
    assert!(f[1].cause.contains("2 communication timeouts"), "{}", f[1].cause);
    assert!(f[1].scope.contains("2.05 s"));
    // The JSON document's missing rank, unresponsive but not yet dead.
    let f = of("08-status-json.json");
    assert_eq!(
        rules(&f),
        vec![("NCCL-RAS-UNREACHABLE", "172.16.64.245".to_string())]
    );
}

#[test]
fn ranks_behind_are_the_straggler_on_their_host() {
    let f = of("04-text-warnings-mismatch-collective-counts.txt");
    assert_eq!(rules(&f), vec![("NCCL-RAS-BEHIND", "172.16.64.210".to_string())]);
    let b = &f[0];
    assert!(b.cause.starts_with("6 ranks of communicator 27a079b828ff1a75 launched collective operations only up to 6649 while others reached 6650"), "{}", b.cause);
    for r in [0, 2, 3, 4, 5, 7] {
        assert!(b.scope.contains(&format!("rank {r} ")), "{}", b.scope);
    }
    assert!(!b.scope.contains("rank 1 "), "{}", b.scope);
}

#[test]
fn mismatched_states_and_a_bare_group_flag_are_found() {
    let f = of("05-text-init-finalize-status-mismatch.txt");
    assert_eq!(
        rules(&f),
        vec![("NCCL-RAS-STATUS", "communicator 9e17999afaa87dbb".to_string())]
    );
    assert!(
        f[0].cause.contains("26 UNKNOWN, 4 RUNNING, 2 FINALIZE"),
        "{}",
        f[0].cause
    );
    assert!(
        f[0].scope
            .contains("rank 20 (process 3500075, GPU 4) on 172.16.64.213 (FINALIZE)"),
        "{}",
        f[0].scope
    );
    let f = of("03-text-communicators-running-mismatch.txt");
    assert_eq!(rules(&f), vec![("NCCL-RAS-GROUP", "group 0".to_string())]);
    assert!(f[0].cause.contains("MISMATCH"));
}

/// Everything but where the evidence was read.
fn judged(f: &[Finding]) -> Vec<String> {
    f.iter()
        .map(|f| {
            format!(
                "{} {:?} {} {:?} {} {} {} {:?}",
                f.rule, f.class, f.entity, f.severity, f.cause, f.confidence, f.scope, f.advice
            )
        })
        .collect()
}

#[test]
fn the_text_and_json_forms_of_one_report_give_the_same_findings() {
    for (text, json) in [
        ("pair-04-as-text.txt", "pair-04-as-json.json"),
        ("pair-08-as-text.txt", "08-status-json.json"),
    ] {
        let t = parse(&read(text), text).unwrap();
        let j = parse(&read(json), json).unwrap();
        assert_eq!((t.form, j.form), (Form::Text, Form::Json));
        let (ft, fj) = (findings(&t), findings(&j));
        assert!(!ft.is_empty(), "{text}");
        assert_eq!(judged(&ft), judged(&fj), "{text} vs {json}");
    }
    // The per-operation wording names the operation.
    assert!(
        of("pair-04-as-text.txt")[0]
            .cause
            .contains("AllReduce operations only up to 6649")
    );
}

#[test]
fn a_report_renders_as_the_other_diagnoses_do() {
    insta::assert_snapshot!(render_text(&of("07-text-errors-dead-process.txt")));
}

#[test]
fn bad_input_says_where_and_what_was_expected() {
    for (text, want) in [
        ("", "empty: expected an NCCL RAS report"),
        (
            "hello world\nthis is not RAS\n",
            "x:1: `hello world`: expected an NCCL RAS report",
        ),
        ("{\"communicators\": 5}", "x:1: communicators: invalid type"),
        ("{\"a\": 1}", "x:1: an object with neither `communicators`"),
        ("{\"event\": \"PEER_DEAD\"", "x:1: EOF while parsing"),
        (
            "\n\n{\"communicators\": [{\"hash\": 1}]}",
            "x:3: communicators[0].hash: invalid type",
        ),
    ] {
        let e = parse(text, "x").unwrap_err().to_string();
        assert!(e.starts_with(want) || e.contains(want), "{text:?}: {e}");
    }
    let huge = " ".repeat(xirang_diagnose::ras::MAX_REPORT_BYTES + 1);
    assert!(parse(&huge, "x").unwrap_err().to_string().contains("more than"));
}
