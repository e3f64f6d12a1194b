//! Parsers of RDMA tool outputs captured as text files (`ethtool -S`, `ibv_devinfo -v`,
//! `nvidia-smi topo -m`, `mlnx_qos -i`, `lspci -vvv`, `iblinkinfo`, `show_gids`).
//!
//! Every parser takes the whole text and returns a typed result or a [`ParseError`] with
//! the 1-based line and what was expected there. Text pasted into issues and mail often
//! has tabs expanded to spaces and CRLF line ends; parsers accept both. None of them
//! panics on any input (`tests/fuzz_counters.rs` and `tests/fuzz_topo.rs` feed them
//! arbitrary bytes and mutated fixtures).

pub mod ethtool;
pub mod iblinkinfo;
pub mod ibv_devinfo;
pub mod lspci;
pub mod mlnx_qos;
pub mod nvidia_topo;
pub mod show_gids;

use std::fmt;

/// A line of a tool's output that is not what the format allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// Which format was being read (`ethtool -S`, `ibv_devinfo`, ...).
    pub format: &'static str,
    /// 1-based line number; 0 when the problem is the text as a whole (e.g. empty).
    pub line: usize,
    /// What the parser expected there.
    pub expected: String,
    /// What it found (truncated to a readable length).
    pub found: String,
}

impl ParseError {
    /// A new error; `found` is cut to 80 characters so binary garbage stays readable.
    pub fn new(format: &'static str, line: usize, expected: impl Into<String>, found: &str) -> Self {
        let found: String = found.chars().take(80).collect();
        ParseError {
            format,
            line,
            expected: expected.into(),
            found,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: expected {}", self.format, self.expected)?;
        } else {
            write!(
                f,
                "{} line {}: expected {}",
                self.format, self.line, self.expected
            )?;
        }
        if !self.found.is_empty() {
            write!(f, ", found `{}`", self.found)?;
        }
        Ok(())
    }
}

/// Lines of `text` with CR stripped, numbered from 1.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
}
