//! Reading the planners' small TOML input files with errors that name file and line.

use std::path::Path;

use serde::de::DeserializeOwned;
use thiserror::Error;
use xirang_fabric::diag::{KeyPath, line_of_offset};

/// An input file that could not be read.
#[derive(Debug, Error)]
pub enum InputError {
    /// IO.
    #[error("reading {path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Syntax or a value out of range.
    #[error("{path}:{line}: {message}")]
    Invalid {
        /// File.
        path: String,
        /// 1-based line.
        line: usize,
        /// What was expected.
        message: String,
    },
}

/// A parsed file with its text, for checks that need to point at a key's line.
pub(crate) struct Parsed<'a, T> {
    pub(crate) value: T,
    text: &'a str,
    path: &'a Path,
}

impl<T> Parsed<'_, T> {
    /// An error at the line of `key` (a dotted path such as `layer[3].backward_us`).
    pub(crate) fn error_at(&self, key: &KeyPath, message: String) -> InputError {
        InputError::Invalid {
            path: self.path.display().to_string(),
            line: key.line_in(self.text).unwrap_or(1),
            message,
        }
    }
}

/// Reads a file.
pub(crate) fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|source| InputError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Parses TOML text; a syntax or type error names its line.
pub(crate) fn parse<'a, T: DeserializeOwned>(
    text: &'a str,
    path: &'a Path,
) -> Result<Parsed<'a, T>, InputError> {
    let value = toml::from_str(text).map_err(|e| InputError::Invalid {
        path: path.display().to_string(),
        line: e.span().map_or(1, |s| line_of_offset(text, s.start)),
        message: e.message().to_string(),
    })?;
    Ok(Parsed { value, text, path })
}
