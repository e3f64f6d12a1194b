//! The trial log: every completed simulation of a tune, in an SQLite file, so that a
//! killed tune resumes without running any of them again.
//!
//! One row per (candidate, rung, seed): the parameters and the run's metrics as JSON.
//! Rows are committed one by one as simulations finish (WAL journal), so a kill at any
//! moment loses at most the runs in progress. The `meta` table identifies the tune (the
//! scenario, its space and the search settings); resuming a different tune is refused.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use thiserror::Error;

use crate::eval::RunMetrics;

/// A trial log problem.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite.
    #[error("trial log {path}: {cause}")]
    Sqlite {
        /// File.
        path: String,
        /// Cause (part of the message, so not a `source`).
        cause: rusqlite::Error,
    },
    /// The file is not a trial log: another program's database, or not a database.
    #[error("{path}: {what}, not a trial log; refusing to touch it (use another --out directory)")]
    Foreign {
        /// File.
        path: String,
        /// What it is.
        what: String,
    },
    /// The log belongs to another tune.
    #[error(
        "trial log {path} belongs to a different tune ({what} differs); use another --out directory or delete it"
    )]
    Mismatch {
        /// File.
        path: String,
        /// What differs.
        what: String,
    },
    /// A log exists and resuming was not asked for.
    #[error("trial log {0} already exists: pass --resume to continue it, or choose another --out directory")]
    Exists(String),
    /// A stored row does not parse.
    #[error("trial log {path}: a stored result does not parse: {message}")]
    Corrupt {
        /// File.
        path: String,
        /// What failed.
        message: String,
    },
}

/// Key of one simulation: candidate (negative for baselines), rung, run seed.
pub type EvalKey = (i64, u32, u64);

/// An open trial log.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: String,
}

/// The SQLite application id of a trial log, `XRTU` in ASCII.
pub const APPLICATION_ID: u32 = u32::from_be_bytes(*b"XRTU");

impl Store {
    /// Opens (`resume`) or creates the log at `path` for the tune identified by `identity`
    /// (name, value pairs).
    pub fn open(path: &Path, resume: bool, identity: &[(&str, String)]) -> Result<Store, StoreError> {
        let p = path.display().to_string();
        let sql = |cause| StoreError::Sqlite {
            path: p.clone(),
            cause,
        };
        let foreign = |what: String| StoreError::Foreign {
            path: p.clone(),
            what,
        };
        // What the file is, before SQLite opens it (opening changes its journal mode).
        let existed = match xirang_files::database(path).map_err(|e| foreign(e.detail()))? {
            xirang_files::Database::Absent => false,
            xirang_files::Database::Empty => true,
            xirang_files::Database::Other => return Err(foreign("not an SQLite database".into())),
            xirang_files::Database::Sqlite { application_id } if application_id == APPLICATION_ID => true,
            xirang_files::Database::Sqlite { application_id: 0 } => {
                // A trial log from before application ids: our two tables and nothing else.
                let ro = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                    .map_err(sql)?;
                let mut names: Vec<String> = ro
                    .prepare(
                        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                    )
                    .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
                    .map_err(sql)?;
                names.sort();
                if names != ["evals", "meta"] {
                    return Err(foreign(format!(
                        "another program's SQLite database (tables: {})",
                        names.join(", ")
                    )));
                }
                true
            }
            xirang_files::Database::Sqlite { application_id } => {
                return Err(foreign(format!(
                    "another program's SQLite database (application id {application_id:#x})"
                )));
            }
        };
        if existed && !resume {
            return Err(StoreError::Exists(p));
        }
        let conn = Connection::open(path).map_err(sql)?;
        conn.pragma_update(None, "application_id", i64::from(APPLICATION_ID))
            .map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS evals (
                 candidate INTEGER NOT NULL, rung INTEGER NOT NULL, seed INTEGER NOT NULL,
                 params TEXT NOT NULL, metrics TEXT NOT NULL, wall_s REAL NOT NULL,
                 PRIMARY KEY (candidate, rung, seed)) WITHOUT ROWID;",
        )
        .map_err(sql)?;
        for (k, v) in identity {
            let stored: Option<String> = conn
                .query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
                .optional()
                .map_err(sql)?;
            match stored {
                Some(s) if s != *v => {
                    return Err(StoreError::Mismatch {
                        path: p,
                        what: (*k).to_string(),
                    });
                }
                Some(_) => {}
                None => {
                    conn.execute("INSERT INTO meta (key, value) VALUES (?1, ?2)", params![k, v])
                        .map_err(sql)?;
                }
            }
        }
        Ok(Store { conn, path: p })
    }

    /// Every stored simulation.
    pub fn load(&self) -> Result<HashMap<EvalKey, RunMetrics>, StoreError> {
        let sql = |cause| StoreError::Sqlite {
            path: self.path.clone(),
            cause,
        };
        let mut st = self
            .conn
            .prepare("SELECT candidate, rung, seed, metrics FROM evals")
            .map_err(sql)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(sql)?;
        let mut out = HashMap::new();
        for row in rows {
            let (c, rung, seed, m) = row.map_err(sql)?;
            let metrics: RunMetrics = serde_json::from_str(&m).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
            out.insert((c, rung, seed as u64), metrics);
        }
        Ok(out)
    }

    /// Records one finished simulation (committed at once).
    pub fn insert(
        &self,
        key: EvalKey,
        params_json: &str,
        m: &RunMetrics,
        wall_s: f64,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(m).expect("metrics serialize");
        self.conn
            .execute(
                "INSERT OR REPLACE INTO evals (candidate, rung, seed, params, metrics, wall_s) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![key.0, key.1, key.2 as i64, params_json, json, wall_s],
            )
            .map_err(|cause| StoreError::Sqlite {
                path: self.path.clone(),
                cause,
            })?;
        Ok(())
    }

    /// Number of stored simulations.
    pub fn count(&self) -> Result<u64, StoreError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM evals", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|cause| StoreError::Sqlite {
                path: self.path.clone(),
                cause,
            })
    }
}
