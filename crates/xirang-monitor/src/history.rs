//! Local history of sampled counters: an embedded SQLite file with raw samples, 1-minute
//! roll-ups, retention, a disk-size bound and crash safety (WAL).
//!
//! # Layout
//!
//! - `meta(key, value)`: format marker, schema version and the roll-up watermark.
//! - `series(id, name, labels)`: interned series keys (`labels` is the JSON of the sorted
//!   label pairs). Ids come from `AUTOINCREMENT`, so an id is never reused for another key
//!   even after the series is garbage-collected.
//! - `raw(ts, series, value)`, `WITHOUT ROWID`, keyed by **(ts, series)**.
//! - `minute(series, ts, first_ts, first, last_ts, last, min, max, sum, count)`,
//!   `WITHOUT ROWID`, keyed by **(series, ts)** where `ts` is the minute start.
//!
//! The two key orders differ on purpose. Raw rows are written every interval for every
//! series, live only `raw_s` and are read over short recent windows: keyed by time first,
//! each interval appends to the right edge of one B-tree, so a commit dirties a couple of
//! pages instead of one leaf page per series (measured with 400 series: 30 KiB of WAL per
//! interval against 1.9 MiB with (series, ts), for ~8 KiB of data), and retention or size
//! trimming is a prefix delete that frees whole pages. Minute rows are written once per
//! minute in a batch, live `minute_s` (a month) and are read per series over long spans,
//! so (series, ts) makes a month of one counter a single range seek.
//!
//! # Values
//!
//! Counters are stored as their raw cumulative values and gauges as their values; the
//! store does not know which is which. A minute row keeps `min`, `max`, `sum`/`count`
//! (hence the average), and the first and last sample with their real timestamps. For a
//! counter the useful figures are `last` (and `first`): the rate between two points is the
//! difference of cumulative values over the difference of their real timestamps, and a
//! counter reset shows up as a decrease exactly as in the raw data. For a gauge `min`/`max`
//! catch spikes that `last` would hide. A NaN value means "no sample" and is not stored
//! (SQLite would turn it into NULL).
//!
//! # Crash safety
//!
//! Every [`History::append`] is one transaction, so a `kill -9` loses at most the interval
//! being written. See [`History::open`] for what `synchronous=NORMAL` can lose on power
//! failure.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

/// Marker stored in `meta` so that a SQLite file written by something else is refused.
const FORMAT: &str = "xirang-monitor-history";
/// Version of the table layout described in the module docs.
const SCHEMA_VERSION: i64 = 1;
const MINUTE_MS: i64 = 60_000;

/// How long history is kept and how much disk it may use.
///
/// Deserializable so that the agent's TOML config can set it, e.g.
/// `[history] raw_s = 86400  minute_s = 2592000  max_bytes = 268435456`; missing fields
/// take their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retention {
    /// Seconds raw samples are kept (default one day).
    pub raw_s: u64,
    /// Seconds 1-minute roll-ups are kept (default 30 days).
    pub minute_s: u64,
    /// Upper bound on the database plus its WAL, in bytes (default 256 MiB). When it is
    /// exceeded, [`History::maintain`] drops the oldest raw rows first, then the oldest
    /// minute rows.
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            raw_s: 86_400,
            minute_s: 30 * 86_400,
            max_bytes: 256 << 20,
        }
    }
}

/// Identity of one time series: a metric name and its labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SeriesKey {
    /// Metric name, e.g. `rdma_port_rcv_data_bytes`.
    pub name: String,
    /// Label pairs, sorted by name then value (see [`SeriesKey::new`]).
    pub labels: Vec<(String, String)>,
}

impl SeriesKey {
    /// Builds a key, sorting the labels and collapsing identical pairs, so that the same
    /// labels given in any order name the same series.
    pub fn new<N, I, K, V>(name: N, labels: I) -> SeriesKey
    where
        N: Into<String>,
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut labels: Vec<(String, String)> =
            labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        labels.sort();
        labels.dedup();
        SeriesKey {
            name: name.into(),
            labels,
        }
    }
}

impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            f.write_str("{")?;
            for (i, (k, v)) in self.labels.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{k}={v:?}")?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

/// Resolution of the points in a [`SeriesWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Resolution {
    /// Samples as appended.
    Raw,
    /// One point per minute: the last sample of that minute at its real timestamp.
    Minute,
}

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Unix time in milliseconds.
    pub ts_ms: i64,
    /// Sampled value (cumulative for counters).
    pub value: f64,
}

/// Points of one series at one resolution, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesWindow {
    /// The series.
    pub key: SeriesKey,
    /// Points in time order.
    pub points: Vec<Point>,
    /// Whether the points are raw samples or per-minute `last` values.
    pub resolution: Resolution,
}

/// Full 1-minute aggregate of one series, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MinuteRollup {
    /// Start of the minute, Unix milliseconds (a multiple of 60 000).
    pub minute_ms: i64,
    /// Timestamp of the first sample in the minute.
    pub first_ts_ms: i64,
    /// Value of the first sample.
    pub first: f64,
    /// Timestamp of the last sample in the minute.
    pub last_ts_ms: i64,
    /// Value of the last sample (for a counter: the cumulative value at `last_ts_ms`).
    pub last: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Sum of the samples (`sum / count` is the average).
    pub sum: f64,
    /// Number of samples.
    pub count: u64,
}

/// The 1-minute aggregates of one series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesRollups {
    /// The series.
    pub key: SeriesKey,
    /// Minutes in time order.
    pub minutes: Vec<MinuteRollup>,
}

/// What one [`History::maintain`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MaintainReport {
    /// Raw samples aggregated into minute rows.
    pub raw_rolled_up: u64,
    /// Minute rows written (inserted or merged).
    pub minute_rows_written: u64,
    /// Raw rows deleted because they were older than `raw_s`.
    pub raw_expired: u64,
    /// Minute rows deleted because they were older than `minute_s`.
    pub minute_expired: u64,
    /// Raw rows deleted to get under `max_bytes`.
    pub raw_trimmed: u64,
    /// Minute rows deleted to get under `max_bytes`.
    pub minute_trimmed: u64,
    /// Series with no data left that were forgotten.
    pub series_dropped: u64,
    /// Database plus WAL size after maintenance, in bytes.
    pub size_bytes: u64,
    /// True if the size is still above `max_bytes`: nothing deletable was left (only
    /// samples of the current, not yet rolled-up minute remain), or a reader kept the WAL
    /// from being checkpointed, in which case trimming resumes at a later call.
    pub over_budget: bool,
}

/// Errors of the history store; every message names the database file.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A SQLite call failed.
    #[error("history database {path}: {cause}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The SQLite error (part of the message, so not a `source`).
        cause: rusqlite::Error,
    },
    /// The file exists but is not a SQLite database.
    #[error(
        "{path} is not a SQLite database, so it cannot be the monitor history; move it away or point the history path elsewhere"
    )]
    NotADatabase {
        /// The offending file.
        path: PathBuf,
    },
    /// The file is a SQLite database written by something else.
    #[error("{path} is a SQLite database but not a xirang monitor history ({detail}); refusing to touch it")]
    ForeignDatabase {
        /// The offending file.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },
    /// The file is a monitor history of a schema version this build does not know.
    #[error(
        "{path} is a xirang monitor history of schema version {found}, this build reads version {supported}"
    )]
    UnsupportedVersion {
        /// The offending file.
        path: PathBuf,
        /// Version stored in the file.
        found: String,
        /// Version this build reads and writes.
        supported: i64,
    },
    /// The integrity check failed or stored data could not be decoded.
    #[error("history database {path} is corrupt: {detail}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// First problems reported.
        detail: String,
    },
    /// A reader was pointed at something that holds no history yet.
    #[error("{path}: {detail}; the agent writes a history with `xirang monitor --history FILE`")]
    NoHistory {
        /// The file.
        path: PathBuf,
        /// What is there instead: nothing, or an empty file.
        detail: &'static str,
    },
    /// The file system refused WAL mode (e.g. some network file systems).
    #[error("history database {path}: could not enable WAL journal mode (got {mode:?})")]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// Journal mode SQLite kept.
        mode: String,
    },
}

/// The history store. One writer per file (the agent); readers may open the same file.
#[derive(Debug)]
pub struct History {
    conn: Connection,
    path: PathBuf,
    wal_path: PathBuf,
    retention: Retention,
    series_ids: HashMap<SeriesKey, i64>,
    /// False only for a file whose `auto_vacuum` is not incremental (not created by us);
    /// such a file is compacted with a full `VACUUM` instead.
    incremental: bool,
}

const CREATE_SCHEMA: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE series (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    labels TEXT NOT NULL,
    UNIQUE (name, labels)
);
CREATE TABLE raw (
    ts INTEGER NOT NULL,
    series INTEGER NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (ts, series)
) WITHOUT ROWID;
CREATE TABLE minute (
    series INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    first_ts INTEGER NOT NULL,
    first REAL NOT NULL,
    last_ts INTEGER NOT NULL,
    last REAL NOT NULL,
    min REAL NOT NULL,
    max REAL NOT NULL,
    sum REAL NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (series, ts)
) WITHOUT ROWID;
";

/// Aggregates raw rows of `[?1, ?2)` into minute rows. The upsert merge only matters if a
/// minute is rolled up in two parts, which the watermark normally prevents.
const ROLLUP: &str = "
INSERT INTO minute (series, ts, first_ts, first, last_ts, last, min, max, sum, count)
SELECT g.series, g.m, g.f_ts,
       (SELECT value FROM raw r WHERE r.ts = g.f_ts AND r.series = g.series),
       g.l_ts,
       (SELECT value FROM raw r WHERE r.ts = g.l_ts AND r.series = g.series),
       g.mn, g.mx, g.s, g.c
FROM (SELECT series, ts - ((ts % 60000) + 60000) % 60000 AS m,
             min(ts) AS f_ts, max(ts) AS l_ts, min(value) AS mn, max(value) AS mx,
             sum(value) AS s, count(*) AS c
      FROM raw WHERE ts >= ?1 AND ts < ?2 GROUP BY series, m) AS g
WHERE true
ON CONFLICT (series, ts) DO UPDATE SET
    first = CASE WHEN excluded.first_ts < first_ts THEN excluded.first ELSE first END,
    first_ts = min(first_ts, excluded.first_ts),
    last = CASE WHEN excluded.last_ts >= last_ts THEN excluded.last ELSE last END,
    last_ts = max(last_ts, excluded.last_ts),
    min = min(min, excluded.min),
    max = max(max, excluded.max),
    sum = sum + excluded.sum,
    count = count + excluded.count
";

fn floor_minute(ts_ms: i64) -> i64 {
    ts_ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

fn secs_to_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

fn matches_filter(name: &str, filter: Option<&str>) -> bool {
    match filter {
        None => true,
        Some(f) => match f.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == f,
        },
    }
}

impl History {
    /// Opens the history at `path`, creating it if the file does not exist or is empty.
    ///
    /// An existing file must carry this format's marker and schema version, and must pass
    /// `PRAGMA quick_check` (cost proportional to the file size: measured 0.3 s warm and
    /// 1.2 s from a cold cache for 80 MiB, so a few seconds for a full 256 MiB file, paid
    /// once at agent start). Otherwise the file is left untouched and an error naming it is
    /// returned.
    ///
    /// The journal is WAL with `synchronous=NORMAL`: a commit is appended to the WAL in the
    /// OS page cache without an fsync, and the WAL is fsynced at checkpoints. A killed
    /// process loses nothing it committed (the kernel still holds the pages), so `kill -9`
    /// loses at most the interval being written. A power failure or kernel crash can
    /// additionally roll back the transactions committed since the last checkpoint, i.e.
    /// since the last [`History::maintain`] (which checkpoints every time) or WAL
    /// auto-checkpoint, but never corrupts the file. For monitoring history that is a
    /// better trade than an fsync per interval (`FULL`).
    pub fn open(path: &Path, retention: Retention) -> Result<History, HistoryError> {
        let p = path.to_path_buf();
        let sql = |e: rusqlite::Error| sql_error(&p, e);
        // A FIFO or a device is no database, and a non-SQLite file must be refused before
        // SQLite opens it.
        database_kind(path)?;
        let conn = Connection::open(path).map_err(sql)?;
        // A reader (`xirang monitor query`) may hold the file briefly.
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;

        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .map_err(sql)?;
        if tables == 0 {
            // auto_vacuum can only be chosen before the first table exists.
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
                .map_err(sql)?;
            enable_wal(&conn, &p)?;
            let tx =
                rusqlite::Transaction::new_unchecked(&conn, TransactionBehavior::Immediate).map_err(sql)?;
            let again: i64 = tx
                .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
                .map_err(sql)?;
            if again == 0 {
                tx.execute_batch(CREATE_SCHEMA).map_err(sql)?;
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('format', ?1), ('schema_version', ?2)",
                    params![FORMAT, SCHEMA_VERSION.to_string()],
                )
                .map_err(sql)?;
            }
            tx.commit().map_err(sql)?;
        }
        check_format(&conn, &p)?;
        quick_check(&conn, &p)?;
        enable_wal(&conn, &p)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        // Keep the WAL small relative to the bound, since it counts against it: checkpoint
        // after max_bytes/16 of WAL (at most SQLite's default 1000 pages) and truncate the
        // WAL file back to that size after each checkpoint.
        let page_size: i64 = conn
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .map_err(sql)?;
        let wal_pages = (retention.max_bytes / 16 / page_size.max(512) as u64).clamp(8, 1000);
        conn.pragma_update(None, "wal_autocheckpoint", wal_pages as i64)
            .map_err(sql)?;
        conn.pragma_update_and_check(None, "journal_size_limit", wal_pages as i64 * page_size, |r| {
            r.get::<_, i64>(0)
        })
        .map_err(sql)?;
        let auto_vacuum: i64 = conn
            .pragma_query_value(None, "auto_vacuum", |r| r.get(0))
            .map_err(sql)?;

        let mut wal_path = p.clone().into_os_string();
        wal_path.push("-wal");
        Ok(History {
            conn,
            wal_path: PathBuf::from(wal_path),
            path: p,
            retention,
            series_ids: HashMap::new(),
            incremental: auto_vacuum == 2,
        })
    }

    /// Opens a history to read it and nothing else (`diagnose --history`, `monitor
    /// query`): the file, and the directory it is in, are left as they were, byte for
    /// byte and with their times, and a reader needs no write permission on either.
    /// Nothing is created (an absent or empty file is an error, not a new database),
    /// migrated or checkpointed.
    ///
    /// With no `-wal` or `-shm` beside the file (no writer has it open: SQLite removes
    /// both when the last connection closes) the database is opened `immutable`: SQLite
    /// then creates neither, which even a read-only connection to a WAL database
    /// otherwise does. While a writer may be running (either file is there, even an
    /// empty log right after a checkpoint) the file is opened read-only through the
    /// writer's log and shared memory, so a page it writes meanwhile is never misread.
    pub fn open_read_only(path: &Path) -> Result<History, HistoryError> {
        let p = path.to_path_buf();
        let sql = |e: rusqlite::Error| sql_error(&p, e);
        let nothing = match database_kind(path)? {
            xirang_files::Database::Absent => Some("no such file"),
            xirang_files::Database::Empty => Some("an empty file, not a xirang monitor history"),
            _ => None,
        };
        if let Some(detail) = nothing {
            return Err(HistoryError::NoHistory { path: p, detail });
        }
        let mut wal_path = p.clone().into_os_string();
        wal_path.push("-wal");
        let wal_path = PathBuf::from(wal_path);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = if xirang_files::sqlite_writer_may_be_open(path) {
            Connection::open_with_flags(path, flags).map_err(sql)?
        } else {
            Connection::open_with_flags(
                xirang_files::sqlite_immutable_uri(path),
                flags | OpenFlags::SQLITE_OPEN_URI,
            )
            .map_err(sql)?
        };
        conn.busy_timeout(Duration::from_secs(5)).map_err(sql)?;
        check_format(&conn, &p)?;
        quick_check(&conn, &p)?;
        Ok(History {
            conn,
            wal_path,
            path: p,
            retention: Retention::default(),
            series_ids: HashMap::new(),
            incremental: false,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The retention this store enforces.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> HistoryError + '_ {
        |e| sql_error(&self.path, e)
    }

    /// Stores one interval: every `(series, value)` sampled at `ts_ms`, in one transaction.
    ///
    /// A sample for a `(series, ts)` already stored replaces it. NaN values are skipped.
    /// Samples older than the last rolled-up minute are kept raw but not rolled up.
    pub fn append(&mut self, ts_ms: i64, values: &[(SeriesKey, f64)]) -> Result<(), HistoryError> {
        let path = &self.path;
        let sql = |e: rusqlite::Error| sql_error(path, e);
        let cache = &mut self.series_ids;
        let mut added: Vec<SeriesKey> = Vec::new();
        let result = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql)?;
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO raw (ts, series, value) VALUES (?1, ?2, ?3)
                         ON CONFLICT (ts, series) DO UPDATE SET value = excluded.value",
                    )
                    .map_err(sql)?;
                for (key, value) in values {
                    if value.is_nan() {
                        continue;
                    }
                    let id = match cache.get(key) {
                        Some(&id) => id,
                        None => {
                            let id = intern(&tx, key).map_err(sql)?;
                            cache.insert(key.clone(), id);
                            added.push(key.clone());
                            id
                        }
                    };
                    insert.execute(params![ts_ms, id, value]).map_err(sql)?;
                }
            }
            tx.commit().map_err(sql)
        })();
        if result.is_err() {
            // Ids created inside the rolled-back transaction do not exist.
            for key in &added {
                cache.remove(key);
            }
        }
        result
    }

    /// Rolls completed minutes up, applies retention and the size bound, and gives freed
    /// pages back to the file system. Meant to run every minute or so; `now_ms` is the
    /// current time (the tests pass a compressed clock).
    ///
    /// Order: (1) raw samples of minutes before the current one that were not rolled up
    /// yet become minute rows; (2) raw rows older than `raw_s` (but never rows not yet
    /// rolled up) and minute rows older than `minute_s` are deleted; (3) while the database
    /// plus WAL exceeds `max_bytes`, the oldest rolled-up raw rows are deleted, then the
    /// oldest minute rows, in chunks, down to 90% of the bound (the margin keeps the next
    /// calls from trimming again at every interval). Space is reclaimed with
    /// `PRAGMA incremental_vacuum` (the file is created with `auto_vacuum=INCREMENTAL`)
    /// rather than `VACUUM`: `VACUUM` rewrites the whole database into a copy, needing up
    /// to twice the bound on disk and time proportional to the file, whereas the
    /// incremental form only moves the tail pages into free slots and truncates, at the
    /// cost of a pointer-map page per ~800 pages and no defragmentation (the time-ordered
    /// raw table hardly fragments). The WAL is then checkpointed and truncated, so the
    /// reported size is the real footprint.
    pub fn maintain(&mut self, now_ms: i64) -> Result<MaintainReport, HistoryError> {
        let mut report = MaintainReport::default();
        let path = &self.path;
        let sql = |e: rusqlite::Error| sql_error(path, e);
        let current_minute = floor_minute(now_ms);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let mut watermark = read_watermark(&tx).map_err(sql)?;
        let from = match watermark {
            Some(w) => Some(w),
            None => tx
                .query_row("SELECT min(ts) FROM raw", [], |r| r.get::<_, Option<i64>>(0))
                .map_err(sql)?
                .map(floor_minute),
        };
        if let Some(from) = from
            && current_minute > from
        {
            report.raw_rolled_up = tx
                .prepare_cached("SELECT count(*) FROM raw WHERE ts >= ?1 AND ts < ?2")
                .and_then(|mut s| s.query_row(params![from, current_minute], |r| r.get::<_, i64>(0)))
                .map_err(sql)? as u64;
            report.minute_rows_written = tx
                .prepare_cached(ROLLUP)
                .and_then(|mut s| s.execute(params![from, current_minute]))
                .map_err(sql)? as u64;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('rollup_upto', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![current_minute.to_string()],
            )
            .map_err(sql)?;
            watermark = Some(current_minute);
        }

        if let Some(w) = watermark {
            let cutoff = now_ms.saturating_sub(secs_to_ms(self.retention.raw_s)).min(w);
            report.raw_expired = tx
                .execute("DELETE FROM raw WHERE ts < ?1", params![cutoff])
                .map_err(sql)? as u64;
        }
        let minute_cutoff = now_ms.saturating_sub(secs_to_ms(self.retention.minute_s));
        report.minute_expired = delete_minutes_before(&tx, minute_cutoff).map_err(sql)?;

        // Keeps the series table bounded under label churn. A series with raw rows before
        // the watermark has minute rows too (raw is rolled up before it expires), so only
        // the not-yet-rolled-up raw range needs scanning.
        report.series_dropped = tx
            .execute(
                "DELETE FROM series
                 WHERE NOT EXISTS (SELECT 1 FROM minute WHERE minute.series = series.id)
                   AND id NOT IN (SELECT series FROM raw WHERE ts >= ?1)",
                params![watermark.unwrap_or(i64::MIN)],
            )
            .map_err(sql)? as u64;
        tx.commit().map_err(sql)?;
        if report.series_dropped > 0 {
            self.series_ids.clear();
        }

        // If a reader pins the WAL, deleting more would not shrink the files, only lose
        // data: trimming waits for a later call.
        let checkpointed = self.reclaim()?;
        let mut size = self.size_bytes();
        let max = self.retention.max_bytes;
        if size > max && checkpointed {
            let low = max - max / 10;
            // Bounded so that a pathological file cannot spin here forever.
            for _ in 0..200 {
                if size <= low {
                    break;
                }
                let fraction = ((size - low) as f64 / size as f64).max(0.125);
                if !self.trim_once(fraction, &mut report)? {
                    break;
                }
                let checkpointed = self.reclaim()?;
                size = self.size_bytes();
                if !checkpointed {
                    break;
                }
            }
        }
        report.size_bytes = size;
        report.over_budget = size > max;
        Ok(report)
    }

    /// Deletes the oldest `fraction` (by time span, at least a minute) of the rolled-up raw
    /// rows, or if there are none, of the minute rows. Returns false if nothing is left.
    fn trim_once(&self, fraction: f64, report: &mut MaintainReport) -> Result<bool, HistoryError> {
        let sql = self.err();
        let chunk = |lo: i64, hi: i64| ((hi - lo) as f64 * fraction) as i64;
        let watermark = read_watermark(&self.conn).map_err(&sql)?;
        let oldest_raw: Option<i64> = self
            .conn
            .query_row("SELECT min(ts) FROM raw", [], |r| r.get(0))
            .map_err(&sql)?;
        if let (Some(lo), Some(w)) = (oldest_raw, watermark)
            && lo < w
        {
            let cutoff = (lo + chunk(lo, w).max(MINUTE_MS)).min(w);
            report.raw_trimmed += self
                .conn
                .execute("DELETE FROM raw WHERE ts < ?1", params![cutoff])
                .map_err(&sql)? as u64;
            return Ok(true);
        }
        let span: (Option<i64>, Option<i64>) = self
            .conn
            .query_row(
                "SELECT min(lo), max(hi) FROM (
                     SELECT (SELECT min(ts) FROM minute WHERE series = s.id) AS lo,
                            (SELECT max(ts) FROM minute WHERE series = s.id) AS hi
                     FROM series s)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(&sql)?;
        let (Some(lo), Some(hi)) = span else {
            return Ok(false);
        };
        let cutoff = lo + chunk(lo, hi + MINUTE_MS).max(MINUTE_MS);
        let tx =
            rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate).map_err(&sql)?;
        report.minute_trimmed += delete_minutes_before(&tx, cutoff).map_err(&sql)?;
        tx.commit().map_err(&sql)?;
        Ok(true)
    }

    /// Returns freed pages to the file system and folds the WAL into the database. Returns
    /// false if a reader kept the WAL from being fully checkpointed and truncated.
    fn reclaim(&self) -> Result<bool, HistoryError> {
        let sql = self.err();
        if self.incremental {
            // Each step frees one page, so the statement must run to completion.
            let mut stmt = self
                .conn
                .prepare_cached("PRAGMA incremental_vacuum")
                .map_err(&sql)?;
            let mut rows = stmt.query([]).map_err(&sql)?;
            while rows.next().map_err(&sql)?.is_some() {}
        } else {
            self.conn.execute_batch("VACUUM").map_err(&sql)?;
        }
        // TRUNCATE also empties the WAL file, so size_bytes then sees the real footprint.
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(&sql)?;
        Ok(busy == 0)
    }

    /// Bytes on disk: the database file plus its WAL (the fixed 32 KiB `-shm` index is not
    /// counted).
    pub fn size_bytes(&self) -> u64 {
        let wal = std::fs::metadata(&self.wal_path).map_or(0, |m| m.len());
        let db = std::fs::metadata(&self.path)
            .map(|m| m.len())
            .unwrap_or_else(|_| {
                // Only if the file was removed underneath us: fall back to SQLite's view.
                let pages: i64 = self
                    .conn
                    .pragma_query_value(None, "page_count", |r| r.get(0))
                    .unwrap_or(0);
                let page_size: i64 = self
                    .conn
                    .pragma_query_value(None, "page_size", |r| r.get(0))
                    .unwrap_or(0);
                (pages * page_size) as u64
            });
        db + wal
    }

    /// Series whose name matches `name_filter`: `None` or `"*"` for all, `"name"` for an
    /// exact name, `"prefix*"` for names starting with `prefix`.
    fn matching_series(&self, name_filter: Option<&str>) -> Result<Vec<(i64, SeriesKey)>, HistoryError> {
        let sql = self.err();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, name, labels FROM series")
            .map_err(&sql)?;
        let mut rows = stmt.query([]).map_err(&sql)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(&sql)? {
            let name: String = row.get(1).map_err(&sql)?;
            if !matches_filter(&name, name_filter) {
                continue;
            }
            let labels_json: String = row.get(2).map_err(&sql)?;
            let labels: Vec<(String, String)> =
                serde_json::from_str(&labels_json).map_err(|e| HistoryError::Corrupt {
                    path: self.path.clone(),
                    detail: format!("labels of series {name:?} are not valid JSON: {e}"),
                })?;
            out.push((row.get(0).map_err(&sql)?, SeriesKey { name, labels }));
        }
        out.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(out)
    }

    /// The distinct series names stored, sorted.
    pub fn series_names(&self) -> Result<Vec<String>, HistoryError> {
        let sql = self.err();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT name FROM series ORDER BY name")
            .map_err(&sql)?;
        let names = stmt
            .query_map([], |r| r.get(0))
            .map_err(&sql)?
            .collect::<Result<Vec<String>, _>>()
            .map_err(&sql)?;
        Ok(names)
    }

    /// Points of the series matching `name_filter` (see below) with timestamps in
    /// `since_ms..=until_ms`.
    ///
    /// Raw samples are returned where they still exist; for the older span only minute
    /// roll-ups exist, and each minute contributes its **`last`** sample at its real
    /// timestamp. For a counter that is the cumulative value at the end of the minute, so
    /// differences between consecutive points are exact increases over exact elapsed time,
    /// across the minute/raw boundary too. For a gauge it is the last reading; use
    /// [`History::query_minutes`] for min/max/average.
    ///
    /// A series yields up to two windows, the [`Resolution::Minute`] one (older) before the
    /// [`Resolution::Raw`] one; windows are ordered by key and empty ones are omitted.
    /// `name_filter`: `None` or `"*"` for all series, `"name"` for an exact name,
    /// `"prefix*"` for names starting with `prefix`.
    pub fn query(
        &self,
        since_ms: i64,
        until_ms: i64,
        name_filter: Option<&str>,
    ) -> Result<Vec<SeriesWindow>, HistoryError> {
        let sql = self.err();
        let series = self.matching_series(name_filter)?;
        if series.is_empty() || since_ms > until_ms {
            return Ok(Vec::new());
        }
        // Raw rows are only ever deleted as a time prefix, so one boundary holds for every
        // series: from the oldest raw sample on, raw is complete.
        let raw_start: Option<i64> = self
            .conn
            .query_row("SELECT min(ts) FROM raw", [], |r| r.get(0))
            .map_err(&sql)?;
        let mut raw: HashMap<i64, Vec<Point>> = series.iter().map(|(id, _)| (*id, Vec::new())).collect();
        {
            let mut stmt = self
                .conn
                .prepare_cached("SELECT series, ts, value FROM raw WHERE ts >= ?1 AND ts <= ?2 ORDER BY ts")
                .map_err(&sql)?;
            let mut rows = stmt.query(params![since_ms, until_ms]).map_err(&sql)?;
            while let Some(row) = rows.next().map_err(&sql)? {
                let id: i64 = row.get(0).map_err(&sql)?;
                if let Some(points) = raw.get_mut(&id) {
                    points.push(Point {
                        ts_ms: row.get(1).map_err(&sql)?,
                        value: row.get(2).map_err(&sql)?,
                    });
                }
            }
        }
        let minute_until = match raw_start {
            Some(r) => until_ms.min(r - 1),
            None => until_ms,
        };
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT last_ts, last FROM minute
                 WHERE series = ?1 AND ts >= ?2 AND ts <= ?3
                   AND last_ts >= ?4 AND last_ts <= ?3
                 ORDER BY ts",
            )
            .map_err(&sql)?;
        let mut out = Vec::new();
        for (id, key) in series {
            if since_ms <= minute_until {
                let points = stmt
                    .query_map(params![id, floor_minute(since_ms), minute_until, since_ms], |r| {
                        Ok(Point {
                            ts_ms: r.get(0)?,
                            value: r.get(1)?,
                        })
                    })
                    .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                    .map_err(&sql)?;
                if !points.is_empty() {
                    out.push(SeriesWindow {
                        key: key.clone(),
                        points,
                        resolution: Resolution::Minute,
                    });
                }
            }
            let points = raw.remove(&id).unwrap_or_default();
            if !points.is_empty() {
                out.push(SeriesWindow {
                    key,
                    points,
                    resolution: Resolution::Raw,
                });
            }
        }
        Ok(out)
    }

    /// The stored 1-minute aggregates of the series matching `name_filter` (same syntax as
    /// [`History::query`]) whose minute starts in `since_ms..=until_ms`. Series without
    /// minutes in the range are omitted. The current minute is not rolled up until the next
    /// [`History::maintain`] after it ends.
    pub fn query_minutes(
        &self,
        since_ms: i64,
        until_ms: i64,
        name_filter: Option<&str>,
    ) -> Result<Vec<SeriesRollups>, HistoryError> {
        let sql = self.err();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT ts, first_ts, first, last_ts, last, min, max, sum, count FROM minute
                 WHERE series = ?1 AND ts >= ?2 AND ts <= ?3 ORDER BY ts",
            )
            .map_err(&sql)?;
        let mut out = Vec::new();
        for (id, key) in self.matching_series(name_filter)? {
            let minutes = stmt
                .query_map(params![id, since_ms, until_ms], |r| {
                    Ok(MinuteRollup {
                        minute_ms: r.get(0)?,
                        first_ts_ms: r.get(1)?,
                        first: r.get(2)?,
                        last_ts_ms: r.get(3)?,
                        last: r.get(4)?,
                        min: r.get(5)?,
                        max: r.get(6)?,
                        sum: r.get(7)?,
                        count: r.get::<_, i64>(8)? as u64,
                    })
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(&sql)?;
            if !minutes.is_empty() {
                out.push(SeriesRollups { key, minutes });
            }
        }
        Ok(out)
    }
}

fn sql_error(path: &Path, e: rusqlite::Error) -> HistoryError {
    let path = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => HistoryError::NotADatabase { path },
        Some(ErrorCode::DatabaseCorrupt) => HistoryError::Corrupt {
            path,
            detail: e.to_string(),
        },
        _ => HistoryError::Sqlite { path, cause: e },
    }
}

fn enable_wal(conn: &Connection, path: &Path) -> Result<(), HistoryError> {
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| sql_error(path, e))?;
    if mode.eq_ignore_ascii_case("wal") {
        Ok(())
    } else {
        Err(HistoryError::NoWal {
            path: path.to_path_buf(),
            mode,
        })
    }
}

/// What `path` holds, refusing what no history can be: a FIFO or a device, or a file
/// that is not an SQLite database.
fn database_kind(path: &Path) -> Result<xirang_files::Database, HistoryError> {
    match xirang_files::database(path) {
        Err(e) => Err(HistoryError::ForeignDatabase {
            path: path.to_path_buf(),
            detail: e.detail(),
        }),
        Ok(xirang_files::Database::Other) => Err(HistoryError::NotADatabase {
            path: path.to_path_buf(),
        }),
        Ok(kind) => Ok(kind),
    }
}

fn check_format(conn: &Connection, path: &Path) -> Result<(), HistoryError> {
    let sql = |e| sql_error(path, e);
    let foreign = |detail: String| HistoryError::ForeignDatabase {
        path: path.to_path_buf(),
        detail,
    };
    let has_meta: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta')",
            [],
            |r| r.get(0),
        )
        .map_err(sql)?;
    if !has_meta {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name LIMIT 5")
            .map_err(sql)?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql)?;
        return Err(foreign(format!("no meta table; tables: {}", names.join(", "))));
    }
    let get = |key: &str| -> Result<Option<String>, HistoryError> {
        conn.query_row(
            "SELECT CAST(value AS TEXT) FROM meta WHERE key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| match e {
            // A `meta` table of another shape.
            rusqlite::Error::SqliteFailure(..) | rusqlite::Error::SqlInputError { .. } => {
                foreign(format!("unexpected meta table: {e}"))
            }
            e => sql_error(path, e),
        })
    };
    match get("format")? {
        Some(f) if f == FORMAT => {}
        Some(f) => return Err(foreign(format!("format marker is {f:?}"))),
        None => return Err(foreign("no format marker in its meta table".into())),
    }
    let version = get("schema_version")?.unwrap_or_else(|| "(missing)".into());
    if version != SCHEMA_VERSION.to_string() {
        return Err(HistoryError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

fn quick_check(conn: &Connection, path: &Path) -> Result<(), HistoryError> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check(5)")
        .map_err(|e| sql_error(path, e))?;
    let problems = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| sql_error(path, e))?;
    if problems.len() == 1 && problems[0] == "ok" {
        Ok(())
    } else {
        Err(HistoryError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("PRAGMA quick_check: {}", problems.join("; ")),
        })
    }
}

fn read_watermark(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'rollup_upto'",
        [],
        |r| r.get(0),
    )
    .optional()
}

fn intern(conn: &Connection, key: &SeriesKey) -> rusqlite::Result<i64> {
    // Keys built field by field may carry unsorted labels; store the canonical form.
    let labels = if key.labels.is_sorted() {
        serde_json::to_string(&key.labels)
    } else {
        let mut sorted = key.labels.clone();
        sorted.sort();
        sorted.dedup();
        serde_json::to_string(&sorted)
    }
    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    conn.prepare_cached(
        "INSERT INTO series (name, labels) VALUES (?1, ?2)
         ON CONFLICT (name, labels) DO UPDATE SET name = excluded.name
         RETURNING id",
    )?
    .query_row(params![key.name, labels], |r| r.get(0))
}

/// Per series, so that each delete is a range seek on the (series, ts) key instead of a
/// scan of a month of minute rows.
fn delete_minutes_before(conn: &Connection, cutoff: i64) -> rusqlite::Result<u64> {
    let ids = conn
        .prepare_cached("SELECT id FROM series")?
        .query_map([], |r| r.get::<_, i64>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut delete = conn.prepare_cached("DELETE FROM minute WHERE series = ?1 AND ts < ?2")?;
    let mut n = 0;
    for id in ids {
        n += delete.execute(params![id, cutoff])? as u64;
    }
    Ok(n)
}
