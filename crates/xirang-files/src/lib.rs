//! Xirang's file boundary: how every crate reads what the outside world hands it and
//! writes what it produces.
//!
//! Reading ([`read_text`], [`read_text_lossy`], [`read_bytes`], [`open`]):
//! - the size is capped while reading, against a [`Limit`] the format's owner states,
//!   because a size from the metadata means nothing for `/dev/zero`, a pipe or a sysfs
//!   attribute;
//! - opening never blocks: a FIFO is opened non-blocking (a FIFO with no writer then
//!   reads as empty), and a directory, socket or block device is refused with its kind;
//!   [`open_regular`] refuses everything but regular files, for readers that walk
//!   trees they did not choose file by file;
//! - text is UTF-8: the strict reader names the line and column of the first bad byte,
//!   the lossy one (for logs, where a stray byte must not hide the rest) replaces bad
//!   bytes and says on which line the first one was.
//!
//! Databases ([`database`]): what a path holds (nothing, an empty file, an SQLite
//! database and its application id, something else) is read from the header before a
//! store opens it, so no store adds its tables to another program's database or opens
//! a FIFO.
//!
//! Writing ([`write_atomic`], [`OutputDir`]):
//! - a file appears whole or not at all (a temporary file beside it, then a rename);
//! - a path that exists and is not a regular file (a FIFO, a device, a directory) is
//!   refused, never replaced;
//! - an output directory is replaced as a whole, and only when it is absent, empty or
//!   holds nothing but the files its writer owns, so a new run never leaves an old run's
//!   file behind and never mixes its files into someone else's directory.
//!
//! ```
//! use xirang_files::{Limit, read_text, write_atomic};
//!
//! const NOTES: Limit = Limit::new(1 << 20, "notes file");
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("notes.txt");
//! write_atomic(&path, b"line one\nline two\n").unwrap();
//! assert_eq!(read_text(&path, NOTES).unwrap(), "line one\nline two\n");
//! ```

pub mod diag;
mod read;
mod write;

pub use read::{
    Database, Limit, LossyText, ReadError, database, open, open_regular, read_bytes, read_text,
    read_text_lossy, sqlite_immutable_uri, sqlite_writer_may_be_open, utf8,
};
pub use write::{OutputDir, WriteError, replaceable, write_atomic};
