//! History store: round trip, downsampling and retention on a compressed clock, the disk
//! bound, survival of `kill -9`, and refusal of foreign files.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use xirang_monitor::history::{History, HistoryError, MinuteRollup, Point, Resolution, Retention, SeriesKey};

/// 2023-11-14T22:13:20Z, a minute boundary; samples are offset by 3 s so that first/last
/// timestamps are not minute-aligned.
const T0: i64 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000;
const STEP: i64 = 10_000;
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

fn ts_of(i: i64) -> i64 {
    T0 + 3_000 + i * STEP
}

/// `n` series over a few names and label sets, like an agent watching several NICs.
fn fleet(n: usize) -> Vec<SeriesKey> {
    const NAMES: [&str; 5] = [
        "rdma_rx_bytes",
        "rdma_tx_bytes",
        "rdma_cnp_sent",
        "rdma_out_of_sequence",
        "link_util",
    ];
    (0..n)
        .map(|i| {
            let dev = format!("mlx5_{}", i / NAMES.len());
            SeriesKey::new(NAMES[i % NAMES.len()], [("port", "1"), ("device", &dev)])
        })
        .collect()
}

/// Deterministic sample of series `s` at interval `i`: even series are counters
/// (cumulative, integer-valued so sums are exact), odd ones jumpy gauges.
fn sample(s: usize, i: i64) -> f64 {
    if s.is_multiple_of(2) {
        (i * (s as i64 + 1) * 1000 + (i * i) % 7) as f64
    } else {
        let x = (i as u64)
            .wrapping_mul(6364136223846793005)
            .wrapping_add((s as u64).wrapping_mul(1442695040888963407));
        ((x >> 33) % 1000) as f64
    }
}

fn interval(keys: &[SeriesKey], i: i64) -> Vec<(SeriesKey, f64)> {
    keys.iter()
        .enumerate()
        .map(|(s, k)| (k.clone(), sample(s, i)))
        .collect()
}

/// Scratch directory for the compressed-clock runs: on tmpfs when there is one, because
/// those runs do thousands of WAL checkpoints whose fsyncs (milliseconds each on a VM disk)
/// would dominate the test time without changing anything it checks. The kill test uses
/// the ordinary temp dir: process death does not depend on fsync either way.
fn fast_scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

fn raw_points(windows: &[xirang_monitor::history::SeriesWindow], key: &SeriesKey) -> Vec<Point> {
    windows
        .iter()
        .filter(|w| &w.key == key && w.resolution == Resolution::Raw)
        .flat_map(|w| w.points.clone())
        .collect()
}

#[test]
fn append_query_round_trip_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.db");
    let rx0 = SeriesKey::new("rdma_rx_bytes", [("port", "1"), ("device", "mlx5_0")]);
    let rx1 = SeriesKey::new("rdma_rx_bytes", [("device", "mlx5_1"), ("port", "1")]);
    let tx0 = SeriesKey::new("rdma_tx_bytes", [("device", "mlx5_0")]);
    let temp = SeriesKey::new("temperature", Vec::<(String, String)>::new());
    assert_eq!(
        rx0.labels,
        vec![
            ("device".to_string(), "mlx5_0".to_string()),
            ("port".to_string(), "1".to_string())
        ],
        "labels are sorted on construction"
    );
    {
        let mut h = History::open(&path, Retention::default()).unwrap();
        for i in 0..5 {
            let v = i as f64;
            h.append(
                ts_of(i),
                &[
                    (rx0.clone(), 100.0 * v),
                    (rx1.clone(), 200.0 * v),
                    (tx0.clone(), 300.0 * v),
                    (temp.clone(), if i == 2 { f64::NAN } else { 40.0 + v }),
                ],
            )
            .unwrap();
        }
    }
    // Reopen: ids come back from the series table, new appends reuse them.
    let mut h = History::open(&path, Retention::default()).unwrap();
    // Same labels in another order name the same series.
    let rx0_again = SeriesKey::new("rdma_rx_bytes", [("device", "mlx5_0"), ("port", "1")]);
    h.append(ts_of(5), &[(rx0_again, 500.0)]).unwrap();

    let all = h.query(T0, T0 + HOUR, None).unwrap();
    let keys: Vec<_> = all.iter().map(|w| w.key.clone()).collect();
    let mut sorted = vec![rx0.clone(), rx1.clone(), tx0.clone(), temp.clone()];
    sorted.sort();
    assert_eq!(keys, sorted, "one raw window per series, ordered by key");
    assert!(all.iter().all(|w| w.resolution == Resolution::Raw));
    let rx0_points = raw_points(&all, &rx0);
    assert_eq!(
        rx0_points,
        (0..6)
            .map(|i| Point {
                ts_ms: ts_of(i),
                value: 100.0 * i as f64
            })
            .collect::<Vec<_>>()
    );
    let temp_ts: Vec<_> = raw_points(&all, &temp).iter().map(|p| p.ts_ms).collect();
    assert_eq!(
        temp_ts,
        vec![ts_of(0), ts_of(1), ts_of(3), ts_of(4)],
        "NaN is not stored"
    );

    // Bounds are inclusive.
    let mid = h.query(ts_of(1), ts_of(3), Some("rdma_tx_bytes")).unwrap();
    assert_eq!(mid.len(), 1);
    assert_eq!(
        mid[0].points.iter().map(|p| p.value).collect::<Vec<_>>(),
        vec![300.0, 600.0, 900.0]
    );

    let names = |f: Option<&str>| -> Vec<SeriesKey> {
        h.query(T0, T0 + HOUR, f)
            .unwrap()
            .into_iter()
            .map(|w| w.key)
            .collect()
    };
    assert_eq!(names(Some("rdma_rx_bytes")), vec![rx0.clone(), rx1.clone()]);
    assert_eq!(names(Some("rdma_*")), vec![rx0.clone(), rx1, tx0]);
    assert_eq!(names(Some("temp*")), vec![temp]);
    assert_eq!(names(Some("*")).len(), 4);
    assert!(names(Some("rdma")).is_empty(), "exact match, not prefix");
    assert!(names(Some("nothing*")).is_empty());
    assert!(h.query(T0 + HOUR, T0 + 2 * HOUR, None).unwrap().is_empty());
}

/// Three simulated days at 10 s for 50 series, maintained every simulated hour, with raw
/// kept 1 h and minutes 1 day.
#[test]
fn downsampling_and_retention_on_compressed_clock() {
    let dir = fast_scratch_dir();
    let path = dir.path().join("history.db");
    let retention = Retention {
        raw_s: 3600,
        minute_s: 86_400,
        max_bytes: 1 << 30,
    };
    let mut h = History::open(&path, retention).unwrap();
    let keys = fleet(50);
    let intervals = 3 * DAY / STEP;
    let started = Instant::now();
    let mut rolled = 0;
    let mut raw_expired = 0;
    let mut minute_expired = 0;
    for i in 0..intervals {
        h.append(ts_of(i), &interval(&keys, i)).unwrap();
        if (i + 1) % (HOUR / STEP) == 0 {
            let r = h.maintain(ts_of(i) + 1).unwrap();
            rolled += r.raw_rolled_up;
            raw_expired += r.raw_expired;
            minute_expired += r.minute_expired;
            assert!(!r.over_budget);
        }
    }
    let last = intervals - 1;
    let now = ts_of(last) + 1;
    let r = h.maintain(now).unwrap();
    rolled += r.raw_rolled_up;
    raw_expired += r.raw_expired;
    minute_expired += r.minute_expired;
    eprintln!(
        "3 days x 50 series: {:?}, {} raw rolled up, {} raw expired, {} minute rows expired, {} bytes",
        started.elapsed(),
        rolled,
        raw_expired,
        minute_expired,
        h.size_bytes()
    );
    assert!(raw_expired > 0 && minute_expired > 0);

    let windows = h.query(0, i64::MAX, None).unwrap();
    assert_eq!(windows.len(), 100, "a minute and a raw window per series");
    let raw_cutoff = now - HOUR;
    let current_minute = now - now.rem_euclid(MIN);
    // Raw: exactly the samples of the last hour, complete.
    let first_raw = (raw_cutoff - T0 - 3_000 + STEP - 1).div_euclid(STEP);
    for (s, key) in keys.iter().enumerate() {
        let raw = raw_points(&windows, key);
        let expected: Vec<Point> = (first_raw..=last)
            .map(|i| Point {
                ts_ms: ts_of(i),
                value: sample(s, i),
            })
            .collect();
        assert_eq!(raw, expected, "raw of {key}");
    }

    // Minutes: every minute from the minute cutoff to the last completed one, and what
    // the raw data implied, checked exactly for a counter and a gauge.
    let minute_cutoff = now - DAY;
    let first_minute = minute_cutoff + (MIN - minute_cutoff.rem_euclid(MIN)) % MIN;
    for s in [0usize, 1, 49] {
        let rollups = h.query_minutes(0, i64::MAX, Some(&keys[s].name)).unwrap();
        let mine = &rollups.iter().find(|r| r.key == keys[s]).unwrap().minutes;
        let starts: Vec<i64> = mine.iter().map(|m| m.minute_ms).collect();
        let expected_starts: Vec<i64> = (first_minute..current_minute).step_by(MIN as usize).collect();
        assert_eq!(starts, expected_starts, "minutes of {}", keys[s]);
        for m in mine {
            let is: Vec<i64> = (0..=last)
                .filter(|&i| ts_of(i) >= m.minute_ms && ts_of(i) < m.minute_ms + MIN)
                .collect();
            let values: Vec<f64> = is.iter().map(|&i| sample(s, i)).collect();
            let expected = MinuteRollup {
                minute_ms: m.minute_ms,
                first_ts_ms: ts_of(is[0]),
                first: values[0],
                last_ts_ms: ts_of(*is.last().unwrap()),
                last: *values.last().unwrap(),
                min: values.iter().copied().fold(f64::INFINITY, f64::min),
                max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                sum: values.iter().sum(),
                count: 6,
            };
            assert_eq!(*m, expected, "{}", keys[s]);
        }
    }

    // The query joins both resolutions: minute `last` values before the raw span, raw
    // after, and for a counter the values never go back.
    let counter = h.query(now - 2 * HOUR, now, Some("rdma_rx_bytes")).unwrap();
    let minute_w = counter
        .iter()
        .find(|w| w.key == keys[0] && w.resolution == Resolution::Minute)
        .unwrap();
    let raw_w = counter
        .iter()
        .find(|w| w.key == keys[0] && w.resolution == Resolution::Raw)
        .unwrap();
    assert_eq!(minute_w.points.len(), 60);
    assert!(minute_w.points.last().unwrap().ts_ms < raw_w.points[0].ts_ms);
    let joined: Vec<f64> = minute_w
        .points
        .iter()
        .chain(&raw_w.points)
        .map(|p| p.value)
        .collect();
    assert!(joined.windows(2).all(|w| w[0] <= w[1]));
    for p in &minute_w.points {
        let i = (p.ts_ms - T0 - 3_000) / STEP;
        assert_eq!(
            p.value,
            sample(0, i),
            "minute point is the last sample at its real ts"
        );
        assert_eq!(
            (p.ts_ms + STEP).rem_euclid(MIN),
            3_000,
            "last sample of its minute"
        );
    }
}

/// Four simulated days at 10 s for 20 series with a 2 MiB bound: raw alone would need
/// ~4 MiB for a day and minute rows outgrow the bound on the second day, so both trimming
/// phases run.
#[test]
fn size_stays_bounded_and_newest_data_is_kept() {
    const MAX: u64 = 2 << 20;
    // Tolerance after maintain: one interval's worth of rows, rounded up to whole pages
    // (20 samples are ~0.5 KiB; 4 pages of 4 KiB).
    const SLACK: u64 = 16 << 10;
    let dir = fast_scratch_dir();
    let path = dir.path().join("history.db");
    let retention = Retention {
        max_bytes: MAX,
        ..Retention::default()
    };
    let mut h = History::open(&path, retention).unwrap();
    let keys = fleet(20);
    let intervals = 4 * DAY / STEP;
    let started = Instant::now();
    let mut max_after_maintain = 0;
    let mut max_between = 0;
    let (mut raw_trimmed, mut minute_trimmed) = (0, 0);
    for i in 0..intervals {
        h.append(ts_of(i), &interval(&keys, i)).unwrap();
        max_between = max_between.max(h.size_bytes());
        if (i + 1) % (10 * MIN / STEP) == 0 {
            let r = h.maintain(ts_of(i) + 1).unwrap();
            assert_eq!(r.size_bytes, h.size_bytes());
            assert!(
                r.size_bytes <= MAX + SLACK,
                "interval {i}: {} bytes after maintain, bound {MAX}: {r:?}",
                r.size_bytes
            );
            max_after_maintain = max_after_maintain.max(r.size_bytes);
            raw_trimmed += r.raw_trimmed;
            minute_trimmed += r.minute_trimmed;
        }
    }
    eprintln!(
        "4 days x 20 series, 2 MiB bound: {:?}, max {} bytes after maintain, max {} bytes \
         between maintains (every 10 min), {} raw and {} minute rows trimmed",
        started.elapsed(),
        max_after_maintain,
        max_between,
        raw_trimmed,
        minute_trimmed
    );
    assert!(raw_trimmed > 0 && minute_trimmed > 0, "both phases ran");
    // Between maintains the store grows by the appended rows and a WAL capped at 1/16 of
    // the bound.
    assert!(max_between <= MAX + MAX / 4, "{max_between}");

    // What is kept is the newest: a contiguous run of minutes ending at the last completed
    // minute, and raw samples ending at the last interval.
    let last = intervals - 1;
    let now = ts_of(last) + 1;
    let current_minute = now - now.rem_euclid(MIN);
    let rollups = h.query_minutes(0, i64::MAX, None).unwrap();
    assert_eq!(rollups.len(), 20);
    for r in &rollups {
        let starts: Vec<i64> = r.minutes.iter().map(|m| m.minute_ms).collect();
        assert!(starts.windows(2).all(|w| w[1] == w[0] + MIN), "{}", r.key);
        assert_eq!(*starts.last().unwrap(), current_minute - MIN);
        assert!(starts[0] > T0 + DAY, "old minutes were trimmed: {}", starts[0]);
    }
    let recent = h.query(now - 10 * MIN, now, None).unwrap();
    for (s, key) in keys.iter().enumerate() {
        let raw = raw_points(&recent, key);
        assert_eq!(raw.last().unwrap().ts_ms, ts_of(last));
        assert_eq!(raw.last().unwrap().value, sample(s, last));
        assert!(raw.windows(2).all(|w| w[1].ts_ms == w[0].ts_ms + STEP));
    }
}

const CHILD_ENV: &str = "XIRANG_HISTORY_KILL_CHILD_DB";
const KILL_SERIES: usize = 20;

/// Child side of `survives_kill_9`: appends intervals forever, continuing after what the
/// file holds, printing each timestamp once its transaction committed. Does nothing unless
/// started by that test.
#[test]
#[ignore = "child process of survives_kill_9"]
fn kill9_child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut h = History::open(Path::new(&path), Retention::default()).unwrap();
    let keys = fleet(KILL_SERIES);
    let next = h
        .query(0, i64::MAX, Some(&keys[0].name))
        .unwrap()
        .iter()
        .filter(|w| w.key == keys[0])
        .flat_map(|w| w.points.last())
        .map(|p| (p.ts_ms - T0 - 3_000) / STEP + 1)
        .max()
        .unwrap_or(0);
    let mut out = std::io::stdout().lock();
    for i in next.. {
        h.append(ts_of(i), &interval(&keys, i)).unwrap();
        writeln!(out, "committed {}", ts_of(i)).unwrap();
        out.flush().unwrap();
        // Kills also land inside roll-up, vacuum and checkpoint.
        if i % 30 == 29 {
            h.maintain(ts_of(i) + 1).unwrap();
        }
    }
}

/// Every series holds the same timestamps (an interval is all or nothing); returns them.
fn stored_intervals(h: &History, keys: &[SeriesKey]) -> Vec<i64> {
    let windows = h.query(0, i64::MAX, None).unwrap();
    let mut per_series: Vec<Vec<i64>> = Vec::new();
    for (s, key) in keys.iter().enumerate() {
        let raw = raw_points(&windows, key);
        for p in &raw {
            assert_eq!(p.value, sample(s, (p.ts_ms - T0 - 3_000) / STEP));
        }
        per_series.push(raw.iter().map(|p| p.ts_ms).collect());
    }
    assert!(
        per_series.windows(2).all(|w| w[0] == w[1]),
        "a partially written interval is visible"
    );
    per_series.swap_remove(0)
}

#[test]
fn survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.db");
    let keys = fleet(KILL_SERIES);
    let mut reported: BTreeSet<i64> = BTreeSet::new();
    for kill_after in [40usize, 150, 320, 500, 90] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "kill9_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        let mut record = |line: &str| {
            if let Some(ts) = line.strip_prefix("committed ") {
                reported.insert(ts.parse::<i64>().unwrap());
                true
            } else {
                false
            }
        };
        for line in lines.by_ref() {
            if record(&line.unwrap()) {
                seen += 1;
                if seen == kill_after {
                    break;
                }
            }
        }
        // SIGKILL on Unix.
        child.kill().unwrap();
        // Whatever the child printed before dying is still in the pipe.
        for line in lines {
            record(&line.unwrap());
        }
        let status = child.wait().unwrap();
        assert_eq!(seen, kill_after, "child died early: {status:?}");

        let h = History::open(&path, Retention::default()).expect("reopen after kill -9");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        drop(conn);

        let stored = stored_intervals(&h, &keys);
        let n = stored.len() as i64;
        assert_eq!(
            stored,
            (0..n).map(ts_of).collect::<Vec<_>>(),
            "stored intervals are a prefix"
        );
        let reported_max = *reported.last().unwrap();
        assert!(
            reported.iter().all(|ts| stored.binary_search(ts).is_ok()),
            "a reported commit was lost"
        );
        // At most the interval committed but not yet reported when the kill landed.
        assert!(
            *stored.last().unwrap() <= reported_max + STEP,
            "stored up to {}, child reported {reported_max}",
            stored.last().unwrap()
        );
        eprintln!(
            "killed after {kill_after} intervals: {n} stored, last reported {}, {} bytes",
            (reported_max - T0 - 3_000) / STEP,
            h.size_bytes()
        );
        // Appending continues where the child stopped.
        let mut h = h;
        h.append(ts_of(n), &interval(&keys, n)).unwrap();
        reported.insert(ts_of(n));
        assert_eq!(stored_intervals(&h, &keys).len() as i64, n + 1);
    }
}

fn assert_names_path(err: &HistoryError, path: &Path) {
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "error does not name {}: {msg}",
        path.display()
    );
}

#[test]
fn refuses_foreign_files_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();

    // Not SQLite at all; the file is left as it was.
    let text = dir.path().join("notes.db");
    let content = "these are not the samples you are looking for\n".repeat(200);
    std::fs::write(&text, &content).unwrap();
    let err = History::open(&text, Retention::default()).unwrap_err();
    assert!(matches!(err, HistoryError::NotADatabase { .. }), "{err}");
    assert_names_path(&err, &text);
    assert!(err.to_string().contains("not a SQLite database"), "{err}");
    assert_eq!(std::fs::read_to_string(&text).unwrap(), content);

    // SQLite, other schema; refused before switching it to WAL.
    let other = dir.path().join("other.sqlite");
    {
        let conn = rusqlite::Connection::open(&other).unwrap();
        conn.execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'x');",
        )
        .unwrap();
    }
    let err = History::open(&other, Retention::default()).unwrap_err();
    assert!(matches!(err, HistoryError::ForeignDatabase { .. }), "{err}");
    assert_names_path(&err, &other);
    assert!(err.to_string().contains("users"), "{err}");
    let conn = rusqlite::Connection::open(&other).unwrap();
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "delete", "the foreign file was modified");
    drop(conn);

    // Another program's `meta` table.
    let meta = dir.path().join("meta.sqlite");
    rusqlite::Connection::open(&meta)
        .unwrap()
        .execute_batch("CREATE TABLE meta (k INTEGER, v BLOB);")
        .unwrap();
    let err = History::open(&meta, Retention::default()).unwrap_err();
    assert!(matches!(err, HistoryError::ForeignDatabase { .. }), "{err}");
    assert_names_path(&err, &meta);

    // A history of a future schema version.
    let future = dir.path().join("future.db");
    drop(History::open(&future, Retention::default()).unwrap());
    rusqlite::Connection::open(&future)
        .unwrap()
        .execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'", [])
        .unwrap();
    let err = History::open(&future, Retention::default()).unwrap_err();
    assert!(
        matches!(err, HistoryError::UnsupportedVersion { ref found, .. } if found == "99"),
        "{err}"
    );
    assert_names_path(&err, &future);
}

#[test]
fn reports_corruption_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.db");
    {
        let mut h = History::open(&path, Retention::default()).unwrap();
        let keys = fleet(20);
        for i in 0..400 {
            h.append(ts_of(i), &interval(&keys, i)).unwrap();
        }
    }
    // Closing checkpointed everything into the main file; scribble over a B-tree page in
    // the middle (not the header, which would make it "not a database").
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096, "{}", bytes.len());
    let page = bytes.len() / 4096 / 2;
    bytes[page * 4096..page * 4096 + 64].fill(0x5a);
    std::fs::write(&path, &bytes).unwrap();
    let err = History::open(&path, Retention::default()).unwrap_err();
    assert!(matches!(err, HistoryError::Corrupt { .. }), "{err}");
    assert_names_path(&err, &path);
}

#[test]
fn retention_from_toml() {
    let r: Retention = toml::from_str("raw_s = 3600\nmax_bytes = 1048576").unwrap();
    assert_eq!(
        r,
        Retention {
            raw_s: 3600,
            max_bytes: 1 << 20,
            ..Retention::default()
        }
    );
    assert_eq!(Retention::default().raw_s, 86_400);
    assert_eq!(Retention::default().minute_s, 30 * 86_400);
    assert_eq!(Retention::default().max_bytes, 256 << 20);
    assert!(
        toml::from_str::<Retention>("raw = 1").is_err(),
        "typos are rejected"
    );
}
