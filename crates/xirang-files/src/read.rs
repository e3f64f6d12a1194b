//! Bounded, non-blocking reads.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

/// The most bytes a file of one format may have, and what to call that format in the
/// message when a file is larger. Each format's owner states its own limit beside its
/// parser, with the reason for the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Largest accepted size.
    pub bytes: u64,
    /// The format, as a message names it ("scenario file", "nccl-tests log").
    pub what: &'static str,
}

impl Limit {
    /// A limit of `bytes` for files of the format `what`.
    pub const fn new(bytes: u64, what: &'static str) -> Self {
        Limit { bytes, what }
    }
}

/// A size in the units a person reads: whole KiB, MiB or GiB where exact.
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
            if self.0 >= 1 << shift && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{} {unit}", self.0 >> shift);
            }
        }
        write!(f, "{} bytes", self.0)
    }
}

/// Why a file could not be read. Messages start with the path (and line, where there is
/// one) and say what was expected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The operating system refused (missing file, permissions, an I/O error).
    #[error("{}: cannot read: {cause}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said. Part of the message, so not a `source`.
        cause: std::io::Error,
    },
    /// Something that is not a file to read: a directory, a socket, a block device (or,
    /// for [`open_regular`], a FIFO or a character device).
    #[error("{}: is a {kind}, expected a file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Longer than the format's limit.
    #[error("{}: larger than the {} a {} may have", path.display(), Size(limit.bytes), limit.what)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit it broke.
        limit: Limit,
    },
    /// Not UTF-8 text.
    #[error("{}:{line}: not UTF-8 text (an invalid byte at column {column})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
        /// 1-based byte column of that byte in its line.
        column: usize,
    },
}

impl ReadError {
    /// The message without the path it starts with, for callers whose own errors name
    /// the file already.
    pub fn detail(&self) -> String {
        match self {
            ReadError::Io { cause, .. } => format!("cannot read: {cause}"),
            ReadError::NotAFile { kind, .. } => format!("is a {kind}, expected a file"),
            ReadError::TooLarge { limit, .. } => {
                format!("larger than the {} a {} may have", Size(limit.bytes), limit.what)
            }
            ReadError::NotUtf8 { line, column, .. } => {
                format!("line {line}: not UTF-8 text (an invalid byte at column {column})")
            }
        }
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::Io { path, .. }
            | ReadError::NotAFile { path, .. }
            | ReadError::TooLarge { path, .. }
            | ReadError::NotUtf8 { path, .. } => path,
        }
    }
}

fn io(path: &Path, cause: std::io::Error) -> ReadError {
    ReadError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

fn kind_of(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_symlink() {
        "symbolic link"
    } else {
        "file"
    }
}

/// Opens without blocking and checks what was opened. Opening a socket fails with
/// ENXIO, so its kind is looked up for the message.
fn open_nonblocking(path: &Path) -> Result<File, ReadError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| match std::fs::metadata(path) {
            Ok(m) if m.file_type().is_socket() => ReadError::NotAFile {
                path: path.to_path_buf(),
                kind: "socket",
            },
            _ => io(path, e),
        })
}

/// Opens a file a user named for reading. Regular files, FIFOs (a pipe from `<(...)`)
/// and character devices (`/dev/stdin`) are accepted; a directory, socket or block
/// device is refused. Opening never waits for a FIFO's writer: with none, the FIFO
/// reads as empty. Reads from the returned file block as usual; cap them with
/// `Read::take` (or use [`read_bytes`]).
pub fn open(path: &Path) -> Result<File, ReadError> {
    let file = open_nonblocking(path)?;
    let ft = file.metadata().map_err(|e| io(path, e))?.file_type();
    if ft.is_file() {
        return Ok(file);
    }
    if ft.is_fifo() || ft.is_char_device() {
        // Reads should wait for data like any reader's; only the open had to not wait.
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| io(path, e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(|e| io(path, e.into()))?;
        return Ok(file);
    }
    Err(ReadError::NotAFile {
        path: path.to_path_buf(),
        kind: kind_of(&ft),
    })
}

/// Opens a regular file and nothing else, without blocking: for readers that walk a
/// tree someone else filled (a copied host tree, an inventory), where a FIFO or a device
/// must be skipped rather than waited on.
pub fn open_regular(path: &Path) -> Result<File, ReadError> {
    let file = open_nonblocking(path)?;
    let ft = file.metadata().map_err(|e| io(path, e))?.file_type();
    if ft.is_file() {
        Ok(file)
    } else {
        Err(ReadError::NotAFile {
            path: path.to_path_buf(),
            kind: kind_of(&ft),
        })
    }
}

/// Reads at most `limit.bytes` from an opened file.
fn read_capped(path: &Path, file: File, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let too_large = || ReadError::TooLarge {
        path: path.to_path_buf(),
        limit,
    };
    // A regular file's size is known up front; the cap below still holds for files that
    // grow while being read and for everything whose size means nothing.
    if let Ok(m) = file.metadata()
        && m.is_file()
        && m.len() > limit.bytes
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit.bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io(path, e))?;
    if bytes.len() as u64 > limit.bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Reads a whole file a user named (see [`open`] for what is accepted), at most
/// `limit.bytes` of it.
pub fn read_bytes(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    read_capped(path, open(path)?, limit)
}

/// Reads a whole file a user named as UTF-8 text, at most `limit.bytes` of it; an
/// invalid byte is an error naming its line and column.
pub fn read_text(path: &Path, limit: Limit) -> Result<String, ReadError> {
    utf8(path, read_bytes(path, limit)?)
}

/// Bytes read from `path` as UTF-8 text, or an error naming the line and column of the
/// first invalid byte.
pub fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| {
        let (line, column) = line_col(e.as_bytes(), e.utf8_error().valid_up_to());
        ReadError::NotUtf8 {
            path: path.to_path_buf(),
            line,
            column,
        }
    })
}

/// Text read with invalid bytes replaced (U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossyText {
    /// The text.
    pub text: String,
    /// 1-based line of the first invalid byte, if there was one.
    pub first_invalid_line: Option<usize>,
}

/// Reads a whole file a user named as text, at most `limit.bytes` of it, replacing
/// invalid UTF-8: for logs, where a stray byte from an interleaved binary write must
/// not hide every line around it.
pub fn read_text_lossy(path: &Path, limit: Limit) -> Result<LossyText, ReadError> {
    let bytes = read_bytes(path, limit)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => LossyText {
            text,
            first_invalid_line: None,
        },
        Err(e) => {
            let line = line_col(e.as_bytes(), e.utf8_error().valid_up_to()).0;
            LossyText {
                text: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                first_invalid_line: Some(line),
            }
        }
    })
}

/// 1-based line and byte column of offset `at`.
fn line_col(bytes: &[u8], at: usize) -> (usize, usize) {
    let before = &bytes[..at.min(bytes.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let start = before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    (line, at - start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(Size(64 << 20).to_string(), "64 MiB");
        assert_eq!(Size(3 << 30).to_string(), "3 GiB");
        assert_eq!(Size(1000).to_string(), "1000 bytes");
    }

    #[test]
    fn line_and_column_are_one_based() {
        assert_eq!(line_col(b"ab\ncd\xff", 5), (2, 3));
        assert_eq!(line_col(b"\xff", 0), (1, 1));
    }
}

/// The SQLite URI that opens `path` immutable (`file:PATH?immutable=1`): SQLite then
/// reads the file without locking it and creates no `-shm` or `-wal` beside it, which
/// a read-only connection to a WAL database otherwise does. Only right when no writer
/// may have the file open ([`sqlite_writer_may_be_open`]). The path is made absolute and
/// percent-encoded where a URI needs it (`?` and `#` end a path, `%` starts an escape).
pub fn sqlite_immutable_uri(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for b in abs.as_os_str().as_encoded_bytes() {
        match b {
            b'?' | b'#' | b'%' => uri.push_str(&format!("%{b:02X}")),
            b if b.is_ascii() && !b.is_ascii_control() => uri.push(*b as char),
            b => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Whether a writer may have `path` open: its write-ahead log or shared-memory index is
/// beside it (SQLite removes both when the last connection closes cleanly). An open
/// writer's log may be empty right after a checkpoint and fill again while a reader
/// reads, so any such file, of any size, means "open through the writer's log", never
/// immutable.
pub fn sqlite_writer_may_be_open(path: &Path) -> bool {
    ["-wal", "-shm"].iter().any(|suffix| {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        std::fs::symlink_metadata(p).is_ok()
    })
}

/// What a path meant to hold an SQLite database holds, judged from the file's header
/// alone, before any SQLite call could create tables in it or change its journal mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// Nothing there yet.
    Absent,
    /// An empty file (a fresh `touch`, or a database SQLite created and never wrote).
    Empty,
    /// An SQLite database, with the application id its creator set (0 when none did).
    Sqlite {
        /// The header's application id.
        application_id: u32,
    },
    /// Something else: a file that does not start with the SQLite header.
    Other,
}

/// Bytes of an SQLite database header. The SQLite file format: a database starts with
/// the 16 bytes `SQLite format 3\0` and its 100-byte header holds, at offset 68, the
/// 4-byte big-endian "application ID" that `PRAGMA application_id` sets.
const SQLITE_HEADER_BYTES: usize = 100;
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const SQLITE_APPLICATION_ID_OFFSET: usize = 68;

/// Reads what `path` holds as a database (see [`Database`]). A FIFO, a device or a
/// directory there is an error: no store may open it.
pub fn database(path: &Path) -> Result<Database, ReadError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Database::Absent),
        Err(e) => return Err(io(path, e)),
        Ok(_) => {}
    }
    let file = open_regular(path)?;
    let mut head = Vec::with_capacity(SQLITE_HEADER_BYTES);
    file.take(SQLITE_HEADER_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| io(path, e))?;
    Ok(if head.is_empty() {
        Database::Empty
    } else if head.len() < SQLITE_HEADER_BYTES || !head.starts_with(SQLITE_MAGIC) {
        Database::Other
    } else {
        let at = SQLITE_APPLICATION_ID_OFFSET;
        Database::Sqlite {
            application_id: u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]),
        }
    })
}
