//! NCCL Inspector's JSON-lines files read round by round: records become the Inspector's
//! own series, only what was appended since the last round counts, and rotated,
//! truncated, endless or garbled files cost a bounded read and a named problem.

use std::io::Write as _;
use std::path::Path;

use xirang_monitor::collect::FeedRound;
use xirang_monitor::inspector::InspectorDir;

/// The Inspector README's record (test_data/nccl-inspector), compact, with these values.
fn record(host: &str, rank: u64, time_us: f64, busbw: f64, bytes: u64) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/nccl-inspector/readme-json-coll-record.json"
    );
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["header"]["rank"] = rank.into();
    v["header"]["comm_name"] = "DP Group 0".into();
    v["metadata"]["hostname"] = host.into();
    v["coll_perf"]["coll_exec_time_us"] = time_us.into();
    v["coll_perf"]["coll_busbw_gbs"] = busbw.into();
    v["coll_perf"]["coll_msg_size_bytes"] = bytes.into();
    serde_json::to_string(&v).unwrap() + "\n"
}

fn append(p: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// (metric, node, message_size) -> value.
fn values(r: &FeedRound) -> Vec<(String, String, String, f64)> {
    let mut v: Vec<_> = r
        .points
        .iter()
        .map(|p| {
            let l = |k: &str| p.metric.labels.iter().find(|(n, _)| *n == k).unwrap().1.clone();
            (p.metric.name.clone(), l("node"), l("message_size"), p.value)
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

const GB16: u64 = 17_179_869_184;

#[test]
fn records_become_the_inspectors_series_and_only_new_ones_count() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nccl-inspector-4242");
    std::fs::create_dir(&dir).unwrap();
    let a = dir.join("h1-pid100.log");
    let b = dir.join("h1-pid101.log");
    let mut r = InspectorDir::new(&dir);
    // The files appear after the agent started: read from their start.
    assert!(r.round().points.is_empty());
    append(
        &a,
        &(record("h1", 0, 100.0, 400.0, GB16) + &record("h1", 0, 300.0, 100.0, GB16)),
    );
    append(&b, &record("h1", 1, 200.0, 200.0, GB16));
    append(&dir.join("notes.txt"), "not read\n");
    let round = r.round();
    assert!(round.problems.is_empty(), "{:?}", round.problems);
    let v = values(&round);
    // Both processes of h1 merge (no GPU in the JSON): mean time 200 µs, geometric mean
    // of 400, 100 and 200 GB/s = 200.
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        (v[0].0.as_str(), v[0].1.as_str(), v[0].2.as_str()),
        ("nccl_bus_bandwidth_gbs", "h1", "16-17GB")
    );
    assert!((v[0].3 - 200.0).abs() < 1e-9, "{v:?}");
    assert_eq!(v[1].0, "nccl_collective_exec_time_microseconds");
    assert!((v[1].3 - 200.0).abs() < 1e-9, "{v:?}");
    let labels = &round.points[0].metric.labels;
    for want in [
        ("version", "v5.1"),
        ("slurm_job_id", "4242"),
        ("gpu", "unknown"),
        ("comm_name", "DP Group 0"),
        ("nranks", "8"),
        ("collective", "AllReduce"),
        ("algo_proto", "unknown"),
    ] {
        assert!(
            labels.contains(&(want.0, want.1.to_string())),
            "{want:?} in {labels:?}"
        );
    }
    // Nothing new: no sample (the series vanishes, as the Inspector's own do).
    assert!(r.round().points.is_empty());
    // Then one more record: only it counts.
    append(&a, &record("h1", 0, 50.0, 10.0, GB16));
    let v = values(&r.round());
    assert_eq!(v[1].3, 50.0, "{v:?}");
}

#[test]
fn partial_rotated_and_truncated_files_are_read_once_each() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = dir.join("h2-pid7.jsonl");
    let rec = record("h2", 0, 100.0, 1.0, 1 << 20);
    let (head, tail) = rec.split_at(rec.len() / 2);
    let mut r = InspectorDir::new(dir);
    // The files appear after the agent started: read from their start.
    assert!(r.round().points.is_empty());
    append(&a, head);
    assert!(r.round().points.is_empty(), "half a line is not a record yet");
    append(&a, tail);
    let v = values(&r.round());
    assert_eq!((v[1].2.as_str(), v[1].3), ("1-2MB", 100.0), "{v:?}");
    // Rotated: a new file in its place, shorter than what was read.
    let fresh = dir.join("new.tmp");
    std::fs::write(&fresh, record("h2", 0, 7.0, 1.0, 1 << 20)).unwrap();
    std::fs::rename(&fresh, &a).unwrap();
    assert_eq!(values(&r.round())[1].3, 7.0);
    // Truncated in place, then written again.
    std::fs::File::create(&a).unwrap();
    assert!(r.round().points.is_empty());
    append(&a, &record("h2", 0, 9.0, 1.0, 1 << 20));
    assert_eq!(values(&r.round())[1].3, 9.0);
}

#[test]
fn an_endless_file_is_read_a_bounded_amount_per_round() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("h3-pid1.log");
    // Records of equal length whose times are 1000, 1001, ...: a round's mean says which
    // records it read.
    let n = 2000u64;
    let recs: Vec<String> = (0..n)
        .map(|i| record("h3", 0, (1000 + i) as f64, 1.0, 4096))
        .collect();
    let len = recs[0].len() as u64;
    assert!(recs.iter().all(|r| r.len() as u64 == len));
    let limit = 64 << 10;
    let mut r = InspectorDir::with_limits(tmp.path(), 16, limit, 4096);
    // The files appear after the agent started: read from their start.
    assert!(r.round().points.is_empty());
    append(&a, &recs.concat());
    // The first round reads `limit` bytes: the records that end inside them.
    let k = limit / len;
    let first = values(&r.round());
    assert_eq!(first[1].3, 1000.0 + (k - 1) as f64 / 2.0, "{first:?}");
    // The rest in later rounds, each bounded alike, until nothing is left.
    let mut rounds = 1;
    while !r.round().points.is_empty() {
        rounds += 1;
        assert!(rounds < 1000);
    }
    assert_eq!(
        rounds,
        (n * len).div_ceil(limit),
        "{rounds} rounds of {limit} bytes for {} bytes",
        n * len
    );
}

#[test]
fn garbage_and_overlong_lines_are_problems_and_the_rest_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("h4-pid1.log");
    let mut r = InspectorDir::with_limits(tmp.path(), 16, 1 << 20, 4096);
    // The files appear after the agent started: read from their start.
    assert!(r.round().points.is_empty());
    append(&a, "this is not JSON\n{\"header\":{}}\n");
    append(&a, &"x".repeat(10_000));
    append(&a, "\n");
    append(&a, &record("h4", 0, 5.0, 1.0, 4096));
    let round = r.round();
    let p = round.problems.join("\n");
    assert!(p.contains("a line longer than 4096 bytes"), "{p}");
    assert!(
        p.contains("2 line(s) that are not Inspector records") && p.contains("not JSON"),
        "{p}"
    );
    assert_eq!(values(&round)[1].3, 5.0);
    // A missing directory is a problem, not a panic.
    let round = InspectorDir::new(&tmp.path().join("gone")).round();
    assert!(round.problems[0].contains("gone"), "{:?}", round.problems);
}

#[test]
fn files_there_before_the_agent_are_history_and_only_what_follows_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("h5-pid1.log");
    // Hours of records, the last one still being written.
    let old = record("h5", 0, 999.0, 1.0, 4096);
    append(&a, &(old.repeat(100) + &old[..old.len() / 2]));
    let mut r = InspectorDir::new(tmp.path());
    let first = r.round();
    assert!(
        first.points.is_empty() && first.problems.is_empty(),
        "{:?}",
        first.problems
    );
    // The record being written ends, then a new one: only the new one counts.
    append(&a, &old[old.len() / 2..]);
    append(&a, &record("h5", 0, 7.0, 1.0, 4096));
    let round = r.round();
    assert!(round.problems.is_empty(), "{:?}", round.problems);
    assert_eq!(values(&round)[1].3, 7.0);
}
