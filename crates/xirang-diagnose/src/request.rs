//! One diagnosis of counters, end to end: a [`Request`] (where the window comes from,
//! how far back, the inventory) in, a [`Report`] (the window, ranked findings, what the
//! inventory added, what an evidence bundle holds) out. `xirang diagnose` is this call
//! plus printing.

use std::path::{Path, PathBuf};

use thiserror::Error;
use xirang_audit::cluster::{Cluster, INVENTORY_FILE_LIMIT, POLICY_FILE, SWITCHES_DIR, TOPOLOGY_FILE};

use crate::finding::{Finding, rank};
use crate::source::{self, SourceError};
use crate::window::{Window, diagnose_window};

/// Where the counters come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The monitoring agent's SQLite history.
    History(PathBuf),
    /// A Prometheus server's HTTP API (base URL).
    Prometheus(String),
    /// A `xirang sim --out` directory (the whole run, not a window of wall time).
    SimOut(PathBuf),
}

/// A diagnosis to run.
#[derive(Debug, Clone)]
pub struct Request {
    /// Where the counters come from.
    pub source: Source,
    /// The window's end, Unix ms (live sources).
    pub now_ms: i64,
    /// The window's length, ms (live sources).
    pub since_ms: i64,
    /// The inventory directory (docs/formats/inventory.md): cabling and configured port
    /// speeds for the window, the audit's findings for the report.
    pub inventory: Option<PathBuf>,
}

/// What the inventory added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryAdded {
    /// The directory.
    pub dir: PathBuf,
    /// Hosts read.
    pub hosts: usize,
    /// Switches read.
    pub switches: usize,
    /// Links added to the window.
    pub links: usize,
}

/// A diagnosis that could not run.
#[derive(Debug, Error)]
pub enum RequestError {
    /// The counters could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The source holds no counters for the window: "no fault found" is only said
    /// about data that was there.
    #[error("{from}: no counters{window}: nothing to diagnose")]
    Empty {
        /// The source as the window names it.
        from: String,
        /// ` in the last …` for live sources.
        window: String,
    },
    /// The inventory directory does not load.
    #[error("--inventory {dir}: {message}")]
    Inventory {
        /// The directory.
        dir: String,
        /// What failed.
        message: String,
    },
    /// A file of the inventory or the window could not be put into the bundle.
    #[error("bundle: {0}")]
    Bundle(String),
}

/// The outcome of a [`Request`].
#[derive(Debug)]
pub struct Report {
    /// The window the rules read (with the inventory's links and rates).
    pub window: Window,
    /// Findings, ranked (the audit's configuration findings merged in with an
    /// inventory).
    pub findings: Vec<Finding>,
    /// What the inventory added.
    pub inventory: Option<InventoryAdded>,
    cluster: Option<Cluster>,
}

/// Reads the window, adds the inventory, runs the rules and ranks the findings.
pub fn diagnose(req: &Request) -> Result<Report, RequestError> {
    let from_ms = req.now_ms - req.since_ms;
    let mut window = match &req.source {
        Source::History(h) => source::from_history(h, from_ms, req.now_ms)?,
        Source::Prometheus(url) => source::from_prometheus(url, from_ms, req.now_ms)?,
        Source::SimOut(dir) => source::from_sim_out(dir)?,
    };
    if window.series.is_empty() {
        return Err(RequestError::Empty {
            from: window.source.clone(),
            window: if window.relative {
                String::new()
            } else {
                format!(" in the last {} s", req.since_ms as f64 / 1e3)
            },
        });
    }
    let (cluster, inventory) = match &req.inventory {
        Some(dir) => {
            let c = Cluster::load_dir(dir).map_err(|e| RequestError::Inventory {
                dir: dir.display().to_string(),
                message: e.to_string(),
            })?;
            let links = crate::inventory_join::apply(&mut window, &c);
            let added = InventoryAdded {
                dir: dir.clone(),
                hosts: c.hosts.len(),
                switches: c.switches.len(),
                links,
            };
            (Some(c), Some(added))
        }
        None => (None, None),
    };
    let mut findings = diagnose_window(&window);
    crate::impact::attach(&window, &mut findings);
    if let Some(c) = &cluster {
        crate::inventory_join::merge_audit(&mut findings, c);
        rank(&mut findings);
    }
    Ok(Report {
        window,
        findings,
        inventory,
        cluster,
    })
}

impl Report {
    /// The data files of an evidence bundle (path inside the archive, bytes): the
    /// window, and with an inventory its audit, its cabling and policy files and the
    /// configuration of every switch a finding names.
    pub fn bundle_data(&self) -> Result<Vec<(String, Vec<u8>)>, RequestError> {
        let json = |e: serde_json::Error| RequestError::Bundle(e.to_string());
        let mut data = vec![(
            "window.json".to_string(),
            serde_json::to_vec(&self.window).map_err(json)?,
        )];
        if let (Some(c), Some(added)) = (&self.cluster, &self.inventory) {
            data.push((
                "inventory/audit.json".into(),
                serde_json::to_vec_pretty(&xirang_audit::audit(c)).map_err(json)?,
            ));
            let mut files: Vec<(String, PathBuf)> = vec![
                (
                    format!("inventory/{TOPOLOGY_FILE}"),
                    added.dir.join(TOPOLOGY_FILE),
                ),
                (format!("inventory/{POLICY_FILE}"), added.dir.join(POLICY_FILE)),
            ];
            for s in &c.switches {
                if self
                    .findings
                    .iter()
                    .any(|f| f.entity.split(':').next() == Some(s.name.as_str()))
                {
                    files.push((
                        format!("inventory/{SWITCHES_DIR}/{}.json", s.name),
                        PathBuf::from(&s.source),
                    ));
                }
            }
            for (name, f) in files.iter().filter(|(_, f)| Path::new(f).is_file()) {
                // The inventory's own limit: these are the files it was read from.
                let bytes = xirang_files::read_bytes(f, INVENTORY_FILE_LIMIT)
                    .map_err(|e| RequestError::Bundle(e.to_string()))?;
                data.push((name.clone(), bytes));
            }
        }
        Ok(data)
    }
}
