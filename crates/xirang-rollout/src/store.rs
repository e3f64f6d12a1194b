//! The rollout's state: an SQLite file holding the plan and policy it was started with
//! (`meta`) and an append-only audit log (`log`). The state is never stored apart from
//! the log: it is the fold of the log's events ([`crate::exec::State`]), so what the
//! log says is what happened, and a kill -9 between two appends loses nothing that
//! was appended.
//!
//! Every append is its own transaction (WAL, `synchronous=FULL`); triggers refuse any
//! UPDATE or DELETE on the log.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::RolloutError;
use crate::event::{Detail, EventKind, StartedDetail};
use crate::policy::Policy;
use crate::waves::Plan;

/// One logged event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Sequence number (1, 2, ...).
    pub seq: i64,
    /// Unix time in milliseconds (the simulation's clock in `simulate`).
    pub ts_ms: i64,
    /// Who: `executor` or `operator`.
    pub actor: String,
    /// What happened.
    pub kind: EventKind,
    /// Wave number, when it concerns one.
    pub wave: Option<usize>,
    /// Node, when it concerns one.
    pub node: Option<String>,
    /// NIC, when it concerns one.
    pub nic: Option<String>,
    /// Details (command, exit status, evidence), in the shape of `kind`.
    pub detail: Detail,
}

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// Who.
    pub actor: &'a str,
    /// What.
    pub kind: EventKind,
    /// Wave.
    pub wave: Option<usize>,
    /// Node.
    pub node: Option<&'a str>,
    /// NIC.
    pub nic: Option<&'a str>,
    /// Details, in the shape of `kind` (checked when appended).
    pub detail: Detail,
}

/// What a rollout was started with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Unique id of this rollout (also written into its start-marker directory, so that
    /// markers of another rollout, or a missing directory, are never trusted).
    pub id: String,
    /// The plan.
    pub plan: Plan,
    /// The policy.
    pub policy: Policy,
    /// Inventory directory (for the command driver), as given at start.
    pub inventory: String,
    /// Policy file, as given at start.
    pub policy_file: String,
}

/// An open state file.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: String,
}

/// The SQLite application id of a rollout state file, `XRRO` in ASCII: set at creation,
/// checked before any other SQLite call on an existing file.
pub const APPLICATION_ID: u32 = u32::from_be_bytes(*b"XRRO");

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    wave INTEGER,
    node TEXT,
    nic TEXT,
    detail TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS log_no_update BEFORE UPDATE ON log
BEGIN SELECT RAISE(ABORT, 'the rollout audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS log_no_delete BEFORE DELETE ON log
BEGIN SELECT RAISE(ABORT, 'the rollout audit log is append-only'); END;
";

impl Store {
    fn err(&self, e: impl ToString) -> RolloutError {
        RolloutError::State {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Whether the file at `path` may be opened as a state file: ours (our application
    /// id, or a state file written before ids were set: id 0 with our `meta` and `log`
    /// tables and nothing else), or, when `fresh` is allowed, nothing yet or an empty
    /// file. Anything else is another program's file and is not touched: opening it with
    /// SQLite would already change its journal mode.
    fn check_owner(path: &Path, fresh: bool) -> Result<(), RolloutError> {
        let p = path.display().to_string();
        let refuse = |what: &str| RolloutError::State {
            path: p.clone(),
            message: format!(
                "{what}, not a rollout state file; refusing to touch it (choose another --state file)"
            ),
        };
        match xirang_files::database(path).map_err(|e| RolloutError::State {
            path: p.clone(),
            message: e.to_string(),
        })? {
            xirang_files::Database::Absent | xirang_files::Database::Empty if fresh => Ok(()),
            xirang_files::Database::Absent => Err(RolloutError::State {
                path: p.clone(),
                message: "no such state file: run `xirang rollout start` first".into(),
            }),
            xirang_files::Database::Empty => Err(refuse("an empty file")),
            xirang_files::Database::Other => Err(refuse("not an SQLite database")),
            xirang_files::Database::Sqlite { application_id } if application_id == APPLICATION_ID => Ok(()),
            xirang_files::Database::Sqlite { application_id: 0 } => {
                let conn = Store::connect_read_only(path)
                    .map_err(|e| refuse(&format!("an unreadable database ({e})")))?;
                let mut names: Vec<String> = conn
                    .prepare(
                        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                    )
                    .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
                    .map_err(|e| refuse(&format!("an unreadable database ({e})")))?;
                names.sort();
                if names == ["log", "meta"] {
                    Ok(())
                } else {
                    Err(refuse(&format!(
                        "another program's SQLite database (tables: {})",
                        names.join(", ")
                    )))
                }
            }
            xirang_files::Database::Sqlite { application_id } => Err(refuse(&format!(
                "another program's SQLite database (application id {application_id:#x})"
            ))),
        }
    }

    /// A connection that reads and writes nothing beside the file: immutable while no
    /// writer has it open (no `-wal` or `-shm` beside it; none is created), else
    /// read-only through the writer's log.
    fn connect_read_only(path: &Path) -> rusqlite::Result<Connection> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = if xirang_files::sqlite_writer_may_be_open(path) {
            Connection::open_with_flags(path, flags)?
        } else {
            Connection::open_with_flags(
                xirang_files::sqlite_immutable_uri(path),
                flags | OpenFlags::SQLITE_OPEN_URI,
            )?
        };
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(conn)
    }

    /// Opens an existing state file to read it (`status`, `log`, dry runs): nothing is
    /// created, migrated or written, and no write permission is needed.
    pub fn open_read_only(path: &Path) -> Result<Store, RolloutError> {
        Store::check_owner(path, false)?;
        let p = path.display().to_string();
        let conn = Store::connect_read_only(path).map_err(|e| RolloutError::State {
            path: p.clone(),
            message: e.to_string(),
        })?;
        Ok(Store { conn, path: p })
    }

    fn connect(path: &Path) -> Result<Store, RolloutError> {
        let p = path.display().to_string();
        let conn = Connection::open(path).map_err(|e| RolloutError::State {
            path: p.clone(),
            message: e.to_string(),
        })?;
        let s = Store { conn, path: p };
        s.conn
            .execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=10000;")
            .map_err(|e| s.err(e))?;
        Ok(s)
    }

    /// An in-memory store (the fleet simulation).
    pub fn in_memory() -> Result<Store, RolloutError> {
        let conn = Connection::open_in_memory().map_err(|e| RolloutError::State {
            path: ":memory:".into(),
            message: e.to_string(),
        })?;
        let s = Store {
            conn,
            path: ":memory:".into(),
        };
        s.conn.execute_batch(SCHEMA).map_err(|e| s.err(e))?;
        Ok(s)
    }

    /// Creates the state file for a new rollout (the plan, the policy and the `started`
    /// event, in one transaction); refuses a file that already holds one.
    pub fn create(path: &Path, meta: &Meta, ts_ms: i64) -> Result<Store, RolloutError> {
        Store::check_owner(path, true)?;
        let s = Store::connect(path)?;
        s.conn.execute_batch(SCHEMA).map_err(|e| s.err(e))?;
        s.conn
            .pragma_update(None, "application_id", APPLICATION_ID as i64)
            .map_err(|e| s.err(e))?;
        let existing: Option<String> = s
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'meta'", [], |r| r.get(0))
            .optional()
            .map_err(|e| s.err(e))?;
        if existing.is_some() {
            return Err(RolloutError::Refused(format!(
                "{} already holds a rollout: use `status`/`advance`/`resume` on it, or choose another --state file",
                s.path
            )));
        }
        s.init(meta, ts_ms)?;
        Ok(s)
    }

    /// Writes the meta row and the `started` event into a fresh store, together.
    pub fn init(&self, meta: &Meta, ts_ms: i64) -> Result<(), RolloutError> {
        let json = serde_json::to_string(meta).map_err(|e| self.err(e))?;
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        self.conn
            .execute("INSERT INTO meta (key, value) VALUES ('meta', ?1)", params![json])
            .map_err(|e| self.err(e))?;
        let p = &meta.plan;
        self.append(
            ts_ms,
            &NewEvent {
                actor: "operator",
                kind: EventKind::Started,
                wave: None,
                node: None,
                nic: None,
                detail: Detail::Started(StartedDetail {
                    id: meta.id.clone(),
                    waves: p.waves.len(),
                    nodes: p.upgrade_count(),
                    skipped: p.skipped.len(),
                    policy: meta.policy_file.clone(),
                    inventory: meta.inventory.clone(),
                }),
            },
        )?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The last sequence number (0 when the log is empty).
    pub fn last_seq(&self) -> Result<i64, RolloutError> {
        self.conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM log", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Events after `seq`.
    pub fn events_since(&self, seq: i64) -> Result<Vec<Event>, RolloutError> {
        self.events_where(seq)
    }

    /// Opens an existing state file.
    pub fn open(path: &Path) -> Result<Store, RolloutError> {
        Store::check_owner(path, false)?;
        let s = Store::connect(path)?;
        s.conn.execute_batch(SCHEMA).map_err(|e| s.err(e))?;
        Ok(s)
    }

    /// The plan and policy the rollout was started with.
    pub fn meta(&self) -> Result<Meta, RolloutError> {
        let json: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'meta'", [], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        let json = json.ok_or_else(|| self.err("holds no rollout (no meta row)"))?;
        serde_json::from_str(&json).map_err(|e| self.err(format!("meta does not parse: {e}")))
    }

    /// Appends one event (its own transaction); returns its sequence number.
    pub fn append(&self, ts_ms: i64, e: &NewEvent<'_>) -> Result<i64, RolloutError> {
        // What is written must read back: a kind with another kind's details would make
        // the whole log unreadable later.
        let detail = e.detail.to_value();
        Detail::parse(e.kind, &detail).map_err(|m| self.err(format!("not appending `{}`: {m}", e.kind)))?;
        self.conn
            .execute(
                "INSERT INTO log (ts_ms, actor, kind, wave, node, nic, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    ts_ms,
                    e.actor,
                    e.kind.name(),
                    e.wave.map(|w| w as i64),
                    e.node,
                    e.nic,
                    detail.to_string()
                ],
            )
            .map_err(|x| self.err(x))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Appends several events in one transaction: all are recorded or none.
    pub fn append_all(&self, ts_ms: i64, events: &[NewEvent<'_>]) -> Result<Vec<i64>, RolloutError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        let mut seqs = Vec::with_capacity(events.len());
        for e in events {
            seqs.push(self.append(ts_ms, e)?);
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(seqs)
    }

    /// Every event in order.
    pub fn events(&self) -> Result<Vec<Event>, RolloutError> {
        self.events_where(0)
    }

    fn events_where(&self, after: i64) -> Result<Vec<Event>, RolloutError> {
        let mut st = self
            .conn
            .prepare("SELECT seq, ts_ms, actor, kind, wave, node, nic, detail FROM log WHERE seq > ?1 ORDER BY seq")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([after], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, String>(7)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, ts_ms, actor, kind, wave, node, nic, detail) = row.map_err(|e| self.err(e))?;
            // Unknown kinds and details of the wrong shape are refused, not skipped: the
            // state is the fold of every row (crate::event).
            let kind = EventKind::parse(&kind).ok_or_else(|| {
                self.err(format!(
                    "log row {seq}: unknown event kind `{kind}` (expected one of: {}); written by a newer xirang, or not by xirang",
                    EventKind::ALL.map(EventKind::name).join(", ")
                ))
            })?;
            let detail: serde_json::Value = serde_json::from_str(&detail)
                .map_err(|e| self.err(format!("log row {seq}: detail does not parse: {e}")))?;
            let detail = Detail::parse(kind, &detail).map_err(|m| self.err(format!("log row {seq}: {m}")))?;
            out.push(Event {
                seq,
                ts_ms,
                actor,
                kind,
                wave: wave.map(|w| w as usize),
                node,
                nic,
                detail,
            });
        }
        Ok(out)
    }

    /// The file's path as given.
    pub fn path(&self) -> &str {
        &self.path
    }
}
