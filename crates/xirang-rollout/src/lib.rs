//! Xirang rollout: staged (canary, then waves of growing size) rollouts of NIC firmware
//! or of a tuned configuration ([`config`]), with validation gates (including the
//! applications' own metrics against a control group, [`live`]), state and an
//! append-only audit log in SQLite.
//!
//! The flashing itself is the vendor's tool, the configuring the tuner's script: Xirang
//! plans ([`waves`]), gates ([`gates`], [`live`]), sequences and records ([`exec`],
//! [`store`]) and stops. The same executor runs a synthetic fleet in [`simulate`].

pub mod command;
pub mod config;
pub mod event;
pub mod exec;
pub mod fleet;
pub mod gates;
pub mod layout;
pub mod live;
pub mod perftest;
pub mod policy;
pub mod simulate;
pub mod store;
pub mod template;
pub mod waves;

use std::path::{Path, PathBuf};

use thiserror::Error;

pub use fleet::{Domain, DomainKind, Fleet, FleetFile, Nic, Node};
pub use policy::Policy;
pub use waves::{Plan, plan};

/// Everything that can go wrong in this crate.
#[derive(Debug, Error)]
pub enum RolloutError {
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        reason: String,
    },
    /// A file could not be read (missing, not a file, too large, not UTF-8).
    #[error(transparent)]
    Read(Box<xirang_files::ReadError>),
    /// A TOML file does not parse, or a value in it is out of range or inconsistent.
    #[error("{path}:{line}: {message}")]
    Toml {
        /// File.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was expected.
        message: String,
    },
    /// The policy is inconsistent.
    #[error("policy {0}")]
    Policy(String),
    /// The inventory is inconsistent.
    #[error("inventory: {0}")]
    Inventory(String),
    /// The state file.
    #[error("state {path}: {message}")]
    State {
        /// File.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An operation the rollout's state does not allow now.
    #[error("{0}")]
    Refused(String),
}

impl RolloutError {
    pub(crate) fn io(path: &Path, e: impl ToString) -> RolloutError {
        RolloutError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }

    /// A file's problem at a key path, at its line (the first when it has none).
    pub(crate) fn diag(path: &Path, d: &xirang_fabric::diag::Diagnostic) -> RolloutError {
        RolloutError::Toml {
            path: path.to_path_buf(),
            line: d.line.unwrap_or(1),
            message: d.keyed(),
        }
    }
}
