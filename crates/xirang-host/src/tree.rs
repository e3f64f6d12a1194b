//! A read-only file tree that the host reader walks: a directory on disk (a live `/` or a
//! fixture tree) or the contents of a snapshot archive held in memory.
//!
//! Paths are relative to the tree's root and use `/`. Symbolic links are resolved by the
//! tree itself, component by component, and never outside the root: sysfs is full of
//! relative links (`class/net/IF/device -> ../../../devices/pci0000:00/...`), and a
//! captured tree may hold links that climb above it (crates/xirang-host/test_data/sysfs/SOURCE.md).
//!
//! Some copies of sysfs trees flatten symlinks into small regular files that hold the
//! link text (the fixture copy in crates/xirang-host/test_data/sysfs does). Where the reader expects a
//! link (`device`, `bus/pci/devices/*`), [`Tree::link_target`] accepts such a file too.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest file the reader accepts. sysfs attributes are one page at most; captured
/// command outputs (an `lspci -vvv` of a large server) stay well under this.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Buffer of the first read of a file: a sysfs attribute is at most one page.
const SMALL_READ_BYTES: usize = 4096;

/// Most symlinks followed while resolving one path (the kernel's own limit is 40).
const MAX_LINK_HOPS: usize = 40;

/// Why a path could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// Nothing at that path.
    #[error("{path}: not found")]
    NotFound {
        /// The path, as the tree names it.
        path: String,
    },
    /// The path exists but could not be read (permissions, an I/O error, a directory
    /// where a file was expected, a file larger than [`MAX_FILE_BYTES`]).
    #[error("{path}: {reason}")]
    Unreadable {
        /// The path.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A symlink on the way points outside the tree or loops.
    #[error("{path}: {reason}")]
    BadLink {
        /// The path.
        path: String,
        /// What is wrong with the link.
        reason: String,
    },
}

/// What is at a path, without following a final symlink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink, with its text.
    Link(String),
}

/// A read-only tree of files, directories and symlinks.
pub trait Tree {
    /// What is at `path` (already resolved: no symlink among its parents), not following
    /// a final link. `None` when nothing is there.
    fn lstat(&self, path: &str) -> Option<Kind>;
    /// The bytes of the regular file at `path` (already resolved).
    fn read_raw(&self, path: &str) -> Result<Vec<u8>, TreeError>;
    /// The entries of the directory at `path` (already resolved), sorted.
    fn list_raw(&self, path: &str) -> Result<Vec<String>, TreeError>;
    /// How the tree names itself in messages (`/`, `fixtures/h1`, `h1.tar.gz`).
    fn describe(&self) -> String;

    /// Reads the regular file at `path`, whose directories must already be resolved (a
    /// link among them would be followed by the operating system), without
    /// following a final symlink: a link there is `BadLink`, and the caller falls back to
    /// [`read`](Tree::read). Saves resolving the path component by component, which a
    /// monitoring round would otherwise do for every one of a thousand counters.
    fn read_nofollow(&self, path: &str) -> Result<Vec<u8>, TreeError> {
        match self.lstat(path) {
            None => Err(TreeError::NotFound {
                path: path.to_string(),
            }),
            Some(Kind::Link(_)) => Err(TreeError::BadLink {
                path: path.to_string(),
                reason: "is a symlink".into(),
            }),
            Some(Kind::Dir) => Err(TreeError::Unreadable {
                path: path.to_string(),
                reason: "is a directory, expected a file".into(),
            }),
            Some(Kind::File) => self.read_raw(path),
        }
    }

    /// Marks the end of a sampling round: a tree that keeps files open closes those not
    /// read since the previous call (devices that went away, renamed interfaces).
    fn end_round(&self) {}

    /// Resolves every symlink in `path`, staying inside the tree.
    fn resolve(&self, path: &str) -> Result<String, TreeError> {
        resolve(self, path)
    }

    /// Reads a file, following links.
    fn read(&self, path: &str) -> Result<Vec<u8>, TreeError> {
        let real = self.resolve(path)?;
        match self.lstat(&real) {
            None => Err(TreeError::NotFound {
                path: path.to_string(),
            }),
            Some(Kind::Dir) => Err(TreeError::Unreadable {
                path: path.to_string(),
                reason: "is a directory, expected a file".into(),
            }),
            Some(_) => self.read_raw(&real).map_err(|e| rename(e, path)),
        }
    }

    /// Reads a file as text, trimmed of surrounding whitespace. Invalid UTF-8 is an
    /// error that names the path: sysfs attributes are ASCII.
    fn read_text(&self, path: &str) -> Result<String, TreeError> {
        let bytes = self.read(path)?;
        String::from_utf8(bytes)
            .map(|s| s.trim().to_string())
            .map_err(|_| TreeError::Unreadable {
                path: path.to_string(),
                reason: "not valid UTF-8 text (binary data?)".into(),
            })
    }

    /// Lists a directory, following links; sorted.
    fn list(&self, path: &str) -> Result<Vec<String>, TreeError> {
        let real = self.resolve(path)?;
        match self.lstat(&real) {
            None => Err(TreeError::NotFound {
                path: path.to_string(),
            }),
            Some(Kind::Dir) => self.list_raw(&real).map_err(|e| rename(e, path)),
            Some(_) => Err(TreeError::Unreadable {
                path: path.to_string(),
                reason: "is a file, expected a directory".into(),
            }),
        }
    }

    /// True when something (file, directory or resolvable link) is at `path`.
    fn exists(&self, path: &str) -> bool {
        self.resolve(path).is_ok_and(|p| self.lstat(&p).is_some())
    }

    /// Where the link at `path` points, as a resolved path inside the tree: a real
    /// symlink, or a flattened one (a small file holding a relative link text).
    fn link_target(&self, path: &str) -> Result<String, TreeError> {
        let parent = parent_of(path);
        let parent_real = self.resolve(parent)?;
        let name = &path[parent.len()..].trim_start_matches('/');
        let at = join(&parent_real, name);
        match self.lstat(&at) {
            None => Err(TreeError::NotFound {
                path: path.to_string(),
            }),
            Some(Kind::Link(_)) => self.resolve(&at),
            Some(Kind::Dir) => Ok(at),
            Some(Kind::File) => {
                let text = self.read_text(&at)?;
                if text.starts_with("../") && !text.contains('\n') {
                    let target = normalize(&parent_real, &text).ok_or_else(|| TreeError::BadLink {
                        path: path.to_string(),
                        reason: format!("link `{text}` points outside the tree"),
                    })?;
                    self.resolve(&target)
                } else {
                    Err(TreeError::Unreadable {
                        path: path.to_string(),
                        reason: "expected a symlink".into(),
                    })
                }
            }
        }
    }
}

/// The same error, naming `path` (the path as the caller asked for it).
pub(crate) fn rename(e: TreeError, path: &str) -> TreeError {
    match e {
        TreeError::NotFound { .. } => TreeError::NotFound {
            path: path.to_string(),
        },
        TreeError::Unreadable { reason, .. } => TreeError::Unreadable {
            path: path.to_string(),
            reason,
        },
        TreeError::BadLink { reason, .. } => TreeError::BadLink {
            path: path.to_string(),
            reason,
        },
    }
}

/// The parent of a relative path (`""` for a top-level name).
pub fn parent_of(path: &str) -> &str {
    let path = path.trim_end_matches('/');
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}

/// The last component of a path.
pub fn base_name(path: &str) -> &str {
    let path = path.trim_end_matches('/');
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// `dir/name`, or `name` at the root.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        return name.to_string();
    }
    // Built directly: a sampling round joins a few thousand paths, and `format!` costs
    // several times more.
    let mut s = String::with_capacity(dir.len() + 1 + name.len());
    s.push_str(dir);
    s.push('/');
    s.push_str(name);
    s
}

/// FNV-1a: a fast hash for the short path and name keys of the sampling maps (the
/// standard SipHash is built to resist adversarial keys, which these are not).
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        // FNV-1a 64-bit offset basis.
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // FNV-1a 64-bit prime.
        const PRIME: u64 = 0x0100_0000_01b3;
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(PRIME);
        }
    }
}

/// A `HashMap` keyed with [`Fnv`].
pub type FnvMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

/// `rel` taken from directory `dir`, with `.` and `..` folded. `None` when it climbs
/// above the root. An absolute `rel` is taken from the root of the tree: a tree is a
/// captured `/`.
pub(crate) fn normalize(dir: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = if rel.starts_with('/') {
        Vec::new()
    } else {
        dir.split('/').filter(|c| !c.is_empty()).collect()
    };
    for c in rel.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

fn resolve<T: Tree + ?Sized>(tree: &T, path: &str) -> Result<String, TreeError> {
    let mut hops = 0;
    let mut done: Vec<String> = Vec::new();
    let mut todo: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(String::from)
        .collect();
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                if done.pop().is_none() {
                    return Err(TreeError::BadLink {
                        path: path.to_string(),
                        reason: "climbs above the root".into(),
                    });
                }
                continue;
            }
            _ => {}
        }
        let here = join(&done.join("/"), &c);
        match tree.lstat(&here) {
            Some(Kind::Link(text)) => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(TreeError::BadLink {
                        path: path.to_string(),
                        reason: "too many levels of symbolic links".into(),
                    });
                }
                if text.starts_with('/') {
                    done.clear();
                }
                // A link's text replaces its own component, resolved from its directory.
                for part in text.split('/').filter(|p| !p.is_empty()).rev() {
                    todo.push(part.to_string());
                }
            }
            _ => done.push(c),
        }
    }
    Ok(done.join("/"))
}

/// A directory on disk as a tree. Nothing outside it is ever read.
#[derive(Debug)]
pub struct DirTree {
    root: PathBuf,
    /// Files kept open between reads (see [`DirTree::keeping_files_open`]).
    open: Option<std::sync::Mutex<KeptFiles>>,
    open_cap: usize,
}

/// Files kept open, and one read buffer reused for all of them (a zeroed page per read
/// costs as much as the read).
#[derive(Debug, Default)]
struct KeptFiles {
    /// Open files, each with whether it was read since the last [`Tree::end_round`].
    files: FnvMap<String, (std::fs::File, bool)>,
    buf: Vec<u8>,
}

impl Clone for DirTree {
    fn clone(&self) -> Self {
        DirTree::new(self.root.clone())
    }
}

/// Descriptors left free for everything else when files are kept open.
const FD_HEADROOM: usize = 256;

impl DirTree {
    /// The tree rooted at `root` (`/` for the live host).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirTree {
            root: root.into(),
            open: None,
            open_cap: 0,
        }
    }

    /// A tree that keeps the files it reads open and re-reads them from offset 0: one
    /// system call per counter per round instead of three. Only right where a file's
    /// contents change in place and a replaced file gets a new path or goes away, as
    /// in sysfs: a regular file replaced by a rename would keep being read from its old
    /// copy. [`DirTree::for_sampling`] turns it on only for a sysfs mount.
    pub fn keeping_files_open(root: impl Into<PathBuf>) -> Self {
        // Keep well below the process's descriptor limit.
        let soft = soft_fd_limit().unwrap_or(1024);
        DirTree {
            root: root.into(),
            open: Some(std::sync::Mutex::new(KeptFiles {
                files: FnvMap::default(),
                buf: vec![0; SMALL_READ_BYTES],
            })),
            open_cap: soft.saturating_sub(FD_HEADROOM),
        }
    }

    /// The tree a sampler should use: files kept open when `root/sys` is a sysfs mount
    /// (a live host), plain reads otherwise (fixture and copied trees).
    pub fn for_sampling(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        if is_sysfs(&root.join("sys")) {
            DirTree::keeping_files_open(root)
        } else {
            DirTree::new(root)
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

/// The soft limit on open files, from `/proc/self/limits` ("Max open files  1024  ...").
fn soft_fd_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// True when `p` is a sysfs mount point (`/proc/self/mounts`: device, mount point, type).
fn is_sysfs(p: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(p) else {
        return false;
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 3 && f[2] == "sysfs" && Path::new(f[1]) == real
    })
}

impl DirTree {
    /// Reads through a kept-open descriptor; `None` when the cache is off or full.
    fn read_kept(&self, path: &str) -> Option<Result<Vec<u8>, TreeError>> {
        use std::os::unix::fs::FileExt;
        let cache = self.open.as_ref()?;
        let mut kept = cache.lock().unwrap_or_else(|e| e.into_inner());
        let KeptFiles { files, buf } = &mut *kept;
        // Only sysfs attributes change in place; anything else may be replaced by a rename.
        if !path.starts_with("sys/") {
            return None;
        }
        if let Some((f, used)) = files.get_mut(path) {
            match f.read_at(buf, 0) {
                Ok(n) if n < buf.len() => {
                    *used = true;
                    return Some(Ok(buf[..n].to_vec()));
                }
                // Gone (ENODEV on sysfs when the device left) or large: reopen below.
                _ => {
                    files.remove(path);
                }
            }
        }
        if files.len() >= self.open_cap {
            return None;
        }
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.path(path))
            .ok()
            .filter(is_regular)?;
        match f.read_at(buf, 0) {
            Ok(n) if n < buf.len() => {
                let out = buf[..n].to_vec();
                files.insert(path.to_string(), (f, true));
                Some(Ok(out))
            }
            _ => None,
        }
    }
}

impl Tree for DirTree {
    fn end_round(&self) {
        if let Some(cache) = &self.open {
            let mut kept = cache.lock().unwrap_or_else(|e| e.into_inner());
            kept.files.retain(|_, (_, used)| std::mem::take(used));
        }
    }

    fn lstat(&self, path: &str) -> Option<Kind> {
        let p = self.path(path);
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if meta.file_type().is_symlink() {
            let text = std::fs::read_link(&p).ok()?;
            Some(Kind::Link(text.to_string_lossy().into_owned()))
        } else if meta.is_dir() {
            Some(Kind::Dir)
        } else {
            Some(Kind::File)
        }
    }

    fn read_raw(&self, path: &str) -> Result<Vec<u8>, TreeError> {
        let err = |reason: String| TreeError::Unreadable {
            path: path.to_string(),
            reason,
        };
        // Non-blocking, and regular files only: a FIFO or a device in a copied tree must
        // not stall the reader.
        let file = xirang_files::open_regular(&self.path(path)).map_err(|e| match e {
            xirang_files::ReadError::Io { cause, .. } => err(cause.to_string()),
            other => err(other.detail()),
        })?;
        let mut bytes = Vec::new();
        // sysfs reports a size of 4096 for every attribute, so the limit is enforced
        // while reading rather than from the metadata.
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| err(e.to_string()))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        Ok(bytes)
    }

    fn read_nofollow(&self, path: &str) -> Result<Vec<u8>, TreeError> {
        if let Some(r) = self.read_kept(path) {
            return r;
        }
        use std::os::unix::fs::OpenOptionsExt;
        let err = |reason: String| TreeError::Unreadable {
            path: path.to_string(),
            reason,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.path(path));
        let file = match file {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(TreeError::BadLink {
                    path: path.to_string(),
                    reason: "is a symlink".into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TreeError::NotFound {
                    path: path.to_string(),
                });
            }
            Err(e) => return Err(err(e.to_string())),
        };
        // A FIFO or a device in a copied tree is not an attribute: reading it could block
        // or never end.
        if let Ok(m) = file.metadata()
            && !m.is_file()
            && !m.is_dir()
        {
            return Err(err(format!("is a {}, expected a file", special_kind(&m))));
        }
        // One read of a page-sized buffer takes a whole sysfs attribute; a short read of a
        // regular file means its end. Only longer files take the general path, which
        // also saves the size query `read_to_end` makes first.
        let mut page = [0u8; SMALL_READ_BYTES];
        let mut file = file;
        let n = match file.read(&mut page) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                return Err(err("is a directory, expected a file".into()));
            }
            Err(e) => return Err(err(e.to_string())),
        };
        if n < page.len() {
            return Ok(page[..n].to_vec());
        }
        let mut bytes = page.to_vec();
        if let Err(e) = file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
            return Err(err(e.to_string()));
        }
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        Ok(bytes)
    }

    fn list_raw(&self, path: &str) -> Result<Vec<String>, TreeError> {
        let rd = std::fs::read_dir(self.path(path)).map_err(|e| TreeError::Unreadable {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

fn is_regular(f: &std::fs::File) -> bool {
    f.metadata().is_ok_and(|m| m.is_file())
}

fn special_kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// A tree held in memory: the contents of a snapshot archive.
#[derive(Debug, Clone, Default)]
pub struct MemTree {
    name: String,
    entries: BTreeMap<String, MemEntry>,
}

#[derive(Debug, Clone)]
enum MemEntry {
    File(Vec<u8>),
    Dir,
    Link(String),
}

impl MemTree {
    /// An empty tree named `name` in messages.
    pub fn new(name: impl Into<String>) -> Self {
        MemTree {
            name: name.into(),
            entries: BTreeMap::new(),
        }
    }

    fn add_parents(&mut self, path: &str) {
        let mut p = parent_of(path);
        while !p.is_empty() {
            self.entries.entry(p.to_string()).or_insert(MemEntry::Dir);
            p = parent_of(p);
        }
    }

    /// Adds a file (and its parent directories).
    pub fn add_file(&mut self, path: &str, bytes: Vec<u8>) {
        let path = path.trim_matches('/').to_string();
        self.add_parents(&path);
        self.entries.insert(path, MemEntry::File(bytes));
    }

    /// Adds a symlink with its text.
    pub fn add_link(&mut self, path: &str, text: &str) {
        let path = path.trim_matches('/').to_string();
        self.add_parents(&path);
        self.entries.insert(path, MemEntry::Link(text.to_string()));
    }

    /// Adds an (empty) directory.
    pub fn add_dir(&mut self, path: &str) {
        let path = path.trim_matches('/').to_string();
        if path.is_empty() {
            return;
        }
        self.add_parents(&path);
        self.entries.entry(path).or_insert(MemEntry::Dir);
    }

    /// Removes an entry and everything below it.
    pub fn remove(&mut self, path: &str) {
        let path = path.trim_matches('/');
        let prefix = format!("{path}/");
        self.entries.retain(|k, _| k != path && !k.starts_with(&prefix));
    }

    /// Every entry with its kind, sorted by path (parents before children).
    pub fn entries(&self) -> Vec<(String, Kind)> {
        self.entries
            .iter()
            .map(|(p, e)| {
                let k = match e {
                    MemEntry::File(_) => Kind::File,
                    MemEntry::Dir => Kind::Dir,
                    MemEntry::Link(t) => Kind::Link(t.clone()),
                };
                (p.clone(), k)
            })
            .collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the tree holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Tree for MemTree {
    fn lstat(&self, path: &str) -> Option<Kind> {
        if path.is_empty() {
            return Some(Kind::Dir);
        }
        match self.entries.get(path)? {
            MemEntry::File(_) => Some(Kind::File),
            MemEntry::Dir => Some(Kind::Dir),
            MemEntry::Link(t) => Some(Kind::Link(t.clone())),
        }
    }

    fn read_raw(&self, path: &str) -> Result<Vec<u8>, TreeError> {
        match self.entries.get(path) {
            Some(MemEntry::File(b)) => Ok(b.clone()),
            Some(_) => Err(TreeError::Unreadable {
                path: path.to_string(),
                reason: "not a regular file".into(),
            }),
            None => Err(TreeError::NotFound {
                path: path.to_string(),
            }),
        }
    }

    fn list_raw(&self, path: &str) -> Result<Vec<String>, TreeError> {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        Ok(self
            .entries
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(k, _)| k[prefix.len()..].to_string())
            .collect())
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_inside_and_never_escape() {
        let mut t = MemTree::new("t");
        t.add_file(
            "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/mtu",
            b"9000\n".to_vec(),
        );
        t.add_link(
            "sys/bus/pci/devices/0000:01:00.0",
            "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        );
        t.add_link(
            "sys/class/net/eth0",
            "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
        );
        t.add_link("sys/escape", "../../../etc");
        t.add_link("sys/loop", "loop");
        assert_eq!(t.read_text("sys/class/net/eth0/mtu").unwrap(), "9000");
        assert_eq!(
            t.link_target("sys/bus/pci/devices/0000:01:00.0").unwrap(),
            "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
        );
        assert!(matches!(
            t.resolve("sys/escape/passwd"),
            Err(TreeError::BadLink { .. })
        ));
        assert!(matches!(t.read("sys/loop"), Err(TreeError::BadLink { .. })));
        assert_eq!(t.list("sys/class/net").unwrap(), vec!["eth0".to_string()]);
    }

    #[test]
    fn flattened_links_are_followed() {
        let mut t = MemTree::new("t");
        t.add_file("sys/devices/pci0000:00/0000:00:1f.6/numa_node", b"-1\n".to_vec());
        t.add_file(
            "sys/class/net/eth0/device",
            b"../../../devices/pci0000:00/0000:00:1f.6".to_vec(),
        );
        assert_eq!(
            t.link_target("sys/class/net/eth0/device").unwrap(),
            "sys/devices/pci0000:00/0000:00:1f.6"
        );
    }
}
