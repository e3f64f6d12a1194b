//! Reading the planners' small TOML input files with errors that name file and line.

use std::path::Path;

use serde::de::DeserializeOwned;
use thiserror::Error;
use xirang_fabric::diag::KeyPath;

/// An input file that could not be read.
#[derive(Debug, Error)]
pub enum InputError {
    /// The file could not be read (missing, not a file, too large, not UTF-8).
    #[error(transparent)]
    Read(#[from] xirang_files::ReadError),
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

/// Largest planner input read (model and serving descriptions are a few KB).
pub const INPUT_LIMIT: xirang_files::Limit = xirang_files::Limit::new(16 << 20, "planner input file");

/// Reads a file.
pub(crate) fn read(path: &Path) -> Result<String, InputError> {
    Ok(xirang_files::read_text(path, INPUT_LIMIT)?)
}

/// Parses TOML text; a syntax or type error names its line.
pub(crate) fn parse<'a, T: DeserializeOwned>(
    text: &'a str,
    path: &'a Path,
) -> Result<Parsed<'a, T>, InputError> {
    let value = xirang_fabric::diag::parse_toml(text).map_err(|d| InputError::Invalid {
        path: path.display().to_string(),
        line: d.line.unwrap_or(1),
        message: d.keyed(),
    })?;
    Ok(Parsed { value, text, path })
}
