//! Atomic writes that never replace what Xirang did not create.

use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Why a result could not be written. Messages start with the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The operating system refused.
    #[error("{}: cannot write: {cause}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said. Part of the message, so not a `source`.
        cause: std::io::Error,
    },
    /// The path is something a file must not replace.
    #[error("{}: is a {kind}; refusing to replace it with a file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// An output directory that holds files its writer does not own.
    #[error(
        "{}: holds {} this command does not write ({}); give a new or empty directory",
        path.display(),
        if names.len() == 1 { "a file" } else { "files" },
        names.iter().take(5).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            + if names.len() > 5 { ", ..." } else { "" }
    )]
    ForeignDir {
        /// The directory.
        path: PathBuf,
        /// The entries that are not the writer's, sorted.
        names: Vec<String>,
    },
}

fn io(path: &Path, cause: std::io::Error) -> WriteError {
    WriteError::Io {
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
    } else {
        "file"
    }
}

/// Where a write to `path` lands: `path` itself, or the file a symbolic link at `path`
/// points to (replacing the link with a file would silently cut it). Anything but a
/// regular file or nothing is refused. For writers that stream into a temporary file
/// and rename it over the result themselves.
pub fn replaceable(path: &Path) -> Result<PathBuf, WriteError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path.to_path_buf()),
        Err(e) => Err(io(path, e)),
        Ok(m) if m.file_type().is_file() => Ok(path.to_path_buf()),
        Ok(m) if m.file_type().is_symlink() => match std::fs::metadata(path) {
            Ok(t) if t.file_type().is_file() => std::fs::canonicalize(path).map_err(|e| io(path, e)),
            Ok(t) => Err(WriteError::NotAFile {
                path: path.to_path_buf(),
                kind: kind_of(&t.file_type()),
            }),
            // A dangling link: create what it names.
            Err(_) => {
                let target = std::fs::read_link(path).map_err(|e| io(path, e))?;
                Ok(path.parent().unwrap_or(Path::new(".")).join(target))
            }
        },
        Ok(m) => Err(WriteError::NotAFile {
            path: path.to_path_buf(),
            kind: kind_of(&m.file_type()),
        }),
    }
}

/// Writes `bytes` to `path` so that a reader sees the old file or the whole new one,
/// never a part: a temporary file beside it, flushed to disk, then renamed over it. A
/// path that is a FIFO, a device or a directory is refused; a symbolic link is followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let dest = replaceable(path)?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = dest.file_name().ok_or_else(|| WriteError::NotAFile {
        path: path.to_path_buf(),
        kind: "directory",
    })?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| io(&tmp, e))?;
        f.sync_data().map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &dest).map_err(|e| io(path, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// An output directory written as a whole: files go to a private staging directory
/// beside the target, and [`OutputDir::commit`] swaps it in, so readers see the previous
/// run's directory or this one's, never a mix. Dropped without a commit, the staging
/// directory is removed and the target is left as it was.
#[derive(Debug)]
pub struct OutputDir {
    target: PathBuf,
    staging: PathBuf,
    committed: bool,
}

impl OutputDir {
    /// Prepares to write the directory `target`. It must be absent, empty, or hold only
    /// entries named in `own` (a previous run of the same writer, possibly with the
    /// `.NAME...tmp` leftovers of a killed one); anything else is someone else's
    /// directory and is refused, before any work is done.
    pub fn create(target: &Path, own: &[&str]) -> Result<Self, WriteError> {
        let target = match std::fs::symlink_metadata(target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => target.to_path_buf(),
            Err(e) => return Err(io(target, e)),
            Ok(_) => {
                let m = std::fs::metadata(target).map_err(|e| io(target, e))?;
                if !m.is_dir() {
                    return Err(WriteError::NotAFile {
                        path: target.to_path_buf(),
                        kind: kind_of(&m.file_type()),
                    });
                }
                let mut foreign = Vec::new();
                for entry in std::fs::read_dir(target).map_err(|e| io(target, e))? {
                    let entry = entry.map_err(|e| io(target, e))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let leftover = name
                        .strip_prefix('.')
                        .and_then(|n| n.strip_suffix(".tmp"))
                        .is_some_and(|n| own.iter().any(|o| n.starts_with(o)));
                    if !own.contains(&name.as_str()) && !leftover {
                        foreign.push(name);
                    }
                }
                if !foreign.is_empty() {
                    foreign.sort();
                    return Err(WriteError::ForeignDir {
                        path: target.to_path_buf(),
                        names: foreign,
                    });
                }
                // Swap the directory itself, not a link to it.
                std::fs::canonicalize(target).map_err(|e| io(target, e))?
            }
        };
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| io(&parent, e))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".to_string());
        let staging = parent.join(format!(".{name}.partial.{}", std::process::id()));
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(|e| io(&staging, e))?;
        }
        std::fs::create_dir(&staging).map_err(|e| io(&staging, e))?;
        Ok(OutputDir {
            target,
            staging,
            committed: false,
        })
    }

    /// The directory this run's output becomes.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Writes one file of the output.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
        let path = self.staging.join(name);
        std::fs::write(&path, bytes).map_err(|e| io(&self.target.join(name), e))
    }

    /// Replaces the target with everything written, as a whole. The old directory's
    /// files all go: none can pass for this run's.
    pub fn commit(mut self) -> Result<PathBuf, WriteError> {
        let sync = |p: &Path| {
            std::fs::File::open(p)
                .and_then(|d| d.sync_all())
                .map_err(|e| io(p, e))
        };
        for entry in std::fs::read_dir(&self.staging).map_err(|e| io(&self.staging, e))? {
            let entry = entry.map_err(|e| io(&self.staging, e))?;
            sync(&entry.path())?;
        }
        if self.target.exists() {
            // One atomic exchange where the file system has it; else move the old
            // directory aside first (a reader may then briefly find no directory, never a
            // mixed one).
            let exchanged = rustix::fs::renameat_with(
                rustix::fs::CWD,
                &self.staging,
                rustix::fs::CWD,
                &self.target,
                rustix::fs::RenameFlags::EXCHANGE,
            );
            if exchanged.is_err() {
                let aside = self.staging.with_extension("old");
                std::fs::rename(&self.target, &aside).map_err(|e| io(&self.target, e))?;
                std::fs::rename(&self.staging, &self.target).map_err(|e| io(&self.target, e))?;
                std::fs::rename(&aside, &self.staging).map_err(|e| io(&self.target, e))?;
            }
            std::fs::remove_dir_all(&self.staging).map_err(|e| io(&self.staging, e))?;
        } else {
            std::fs::rename(&self.staging, &self.target).map_err(|e| io(&self.target, e))?;
        }
        self.committed = true;
        Ok(self.target.clone())
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}
