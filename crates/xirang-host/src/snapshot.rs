//! Snapshots: one gzip-compressed tar archive holding every file and command output the
//! audit reads, so audits run offline anywhere.
//!
//! Layout inside the archive, mirroring the host's `/`:
//! - `sys/...`: the sysfs attributes under `class/infiniband`, `class/net` and
//!   `bus/pci/devices`, at their real paths, with sysfs's symlinks kept as symlinks;
//! - `etc/hostname` and `etc/nccl.conf`;
//! - `commands/<name>.txt`: tool outputs (`ethtool-S-<if>`, `mlnx_qos-i-<if>`,
//!   `ibv_devinfo-v`, `nvidia-smi-topo-m`, `lspci-vvv`, `show_gids`, `iblinkinfo`);
//! - `xirang-snapshot.json`: the [`Manifest`] (host, time, each command's status: a tool
//!   that is not installed is recorded as missing, not fatal).
//!
//! A captured host directory with the same layout reads exactly like a snapshot.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use crate::tree::{DirTree, Kind, MAX_FILE_BYTES, MemTree, Tree, base_name, join};

/// Directory of captured command outputs inside a snapshot or host directory.
pub const COMMANDS_DIR: &str = "commands";
/// The manifest's path inside a snapshot.
pub const MANIFEST: &str = "xirang-snapshot.json";
/// Largest archive contents accepted when loading (guards against decompression bombs).
const MAX_ARCHIVE_BYTES: u64 = 512 * 1024 * 1024;
/// How long one command may run before it is killed and recorded as timed out.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// PCI function attributes the audit reads (docs/reference/linux-rdma-sysfs.md §3).
const PCI_ATTRS: &[&str] = &[
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "sriov_totalvfs",
    "sriov_numvfs",
    "aer_dev_correctable",
    "aer_dev_nonfatal",
    "aer_dev_fatal",
];
/// Entries never descended into: links back up the device tree, power management, and
/// per-queue directories that hold nothing the audit reads.
const SKIP_DIRS: &[&str] = &[
    "subsystem",
    "driver",
    "power",
    "queues",
    "device",
    "firmware_node",
    "iommu_group",
    "iommu",
    "msi_irqs",
    "of_node",
    "ptp",
];

/// What a snapshot holds, written as `xirang-snapshot.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Host name at capture time.
    pub hostname: String,
    /// Capture time, seconds since the Unix epoch.
    pub captured_unix_s: u64,
    /// Root the capture read (`/` on a live host).
    pub root: String,
    /// Every command tried.
    pub commands: Vec<CommandRecord>,
    /// Files that could not be read during capture, with the reason.
    pub unreadable: Vec<(String, String)>,
}

/// One command of a capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// Short name, also the output file's stem (`ethtool-S-eth0`).
    pub name: String,
    /// The command line.
    pub argv: Vec<String>,
    /// `ok`, `missing` (not installed), `failed (exit N)` or `timed out`.
    pub status: String,
}

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// I/O on the archive file.
    #[error("{path}: {cause}")]
    Io {
        /// The archive.
        path: PathBuf,
        /// The error (part of the message, so not a `source`).
        cause: std::io::Error,
    },
    /// The file is not a gzip-compressed tar archive, or is damaged.
    #[error("{path}: not a xirang snapshot (expected a .tar.gz archive): {reason}")]
    Format {
        /// The archive.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

/// Reads a live host (or any root) into memory: the files the audit needs and the tool
/// outputs. `run_commands` false skips the tools (for captures of a copied tree).
pub fn capture(root: &Path, run_commands: bool) -> (MemTree, Manifest) {
    let live = DirTree::new(root);
    let mut c = Capture {
        live: &live,
        out: MemTree::new("snapshot"),
        unreadable: Vec::new(),
    };
    for f in [
        "etc/hostname",
        "proc/sys/kernel/hostname",
        crate::sysfs::NCCL_CONF,
    ] {
        c.copy_file(f);
    }
    for class in ["sys/class/infiniband", "sys/class/net"] {
        for name in live.list(class).unwrap_or_default() {
            c.copy_entry(&join(class, &name), 0);
        }
    }
    // Every PCI function, and the functions behind each netdev and RDMA device (a
    // partial tree may lack them under bus/pci/devices).
    let mut functions: Vec<String> = Vec::new();
    for bdf in live.list("sys/bus/pci/devices").unwrap_or_default() {
        let link = join("sys/bus/pci/devices", &bdf);
        c.copy_link_or_file(&link);
        if let Ok(target) = live.link_target(&link) {
            functions.push(target);
        }
    }
    for class in ["sys/class/infiniband", "sys/class/net"] {
        for name in live.list(class).unwrap_or_default() {
            if let Ok(target) = live.link_target(&format!("{class}/{name}/device")) {
                functions.push(target);
            }
        }
    }
    functions.sort();
    functions.dedup();
    for target in functions {
        c.out.add_dir(&target);
        for a in PCI_ATTRS {
            c.copy_file(&join(&target, a));
        }
    }
    let netdevs: Vec<(String, bool)> = live
        .list("sys/class/net")
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n != "lo")
        .map(|n| {
            let has_rdma = live.exists(&format!("sys/class/net/{n}/device/infiniband"));
            (n, has_rdma)
        })
        .collect();
    // A host directory captured earlier keeps its tool outputs.
    for name in live.list(COMMANDS_DIR).unwrap_or_default() {
        c.copy_file(&join(COMMANDS_DIR, &name));
    }
    let mut commands = Vec::new();
    let mut skipped = Vec::new();
    if run_commands {
        let mut run = |name: String, argv: Vec<&str>| {
            let (status, output) = run_command(&argv);
            if let Some(out) = output {
                c.out.add_file(&format!("{COMMANDS_DIR}/{name}.txt"), out);
            }
            commands.push(CommandRecord {
                name,
                argv: argv.iter().map(|s| s.to_string()).collect(),
                status,
            });
        };
        for (n, has_rdma) in &netdevs {
            // The name becomes a tool's argument and a file name: only when it fits.
            if let Err(e) = crate::names::check(crate::names::Kind::Netdev, n) {
                skipped.push((
                    format!("sys/class/net/{n}"),
                    format!("its tools were not run: {e}"),
                ));
                continue;
            }
            run(format!("ethtool-S-{n}"), vec!["ethtool", "-S", n]);
            if *has_rdma {
                run(format!("mlnx_qos-i-{n}"), vec!["mlnx_qos", "-i", n]);
            }
        }
        run("ibv_devinfo-v".into(), vec!["ibv_devinfo", "-v"]);
        run("nvidia-smi-topo-m".into(), vec!["nvidia-smi", "topo", "-m"]);
        run("lspci-vvv".into(), vec!["lspci", "-vvv"]);
        run("show_gids".into(), vec!["show_gids"]);
        // Fabric-wide on an IB host: each switch port and what it trained at.
        run("iblinkinfo".into(), vec!["iblinkinfo"]);
    }
    c.unreadable.extend(skipped);
    let hostname = c
        .out
        .read_text("etc/hostname")
        .or_else(|_| c.out.read_text("proc/sys/kernel/hostname"))
        .unwrap_or_else(|_| "unknown".into());
    let manifest = Manifest {
        version: 1,
        hostname,
        captured_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        root: root.display().to_string(),
        commands,
        unreadable: c.unreadable,
    };
    let mut out = c.out;
    out.add_file(MANIFEST, serde_json::to_vec_pretty(&manifest).unwrap_or_default());
    (out, manifest)
}

struct Capture<'a> {
    live: &'a DirTree,
    out: MemTree,
    unreadable: Vec<(String, String)>,
}

impl Capture<'_> {
    fn copy_file(&mut self, path: &str) {
        match self.live.read(path) {
            Ok(bytes) => self.out.add_file(path, bytes),
            Err(crate::tree::TreeError::NotFound { .. }) => {}
            Err(e) => self.unreadable.push((path.to_string(), e.to_string())),
        }
    }

    /// Records a symlink as a symlink (and nothing else).
    fn copy_link(&mut self, path: &str) {
        if let Some(Kind::Link(text)) = self.live.lstat(path) {
            self.out.add_link(path, &text);
        }
    }

    /// A symlink, or a flattened one (a file holding the link text), kept as it is.
    fn copy_link_or_file(&mut self, path: &str) {
        match self.live.lstat(path) {
            Some(Kind::Link(text)) => self.out.add_link(path, &text),
            Some(Kind::File) => self.copy_file(path),
            _ => {}
        }
    }

    /// Copies what is at `path`: a link is recorded and its target copied at its real
    /// path (once); a directory is walked; a file is read.
    fn copy_entry(&mut self, path: &str, depth: usize) {
        // class/<x>/<dev>/ports/<p>/gid_attrs/types/<i> is the deepest thing read.
        const MAX_DEPTH: usize = 8;
        if depth > MAX_DEPTH {
            return;
        }
        match self.live.lstat(path) {
            Some(Kind::Link(text)) => {
                self.out.add_link(path, &text);
                if depth == 0
                    && let Ok(target) = self.live.resolve(path)
                    && self.out.lstat(&target).is_none()
                {
                    self.copy_entry(&target, depth + 1);
                }
            }
            Some(Kind::Dir) => {
                self.out.add_dir(path);
                for name in self.live.list_raw(path).unwrap_or_default() {
                    let child = join(path, &name);
                    let is_link = matches!(self.live.lstat(&child), Some(Kind::Link(_)));
                    if is_link {
                        // Links inside a device directory point back up the tree.
                        self.copy_link(&child);
                    } else if SKIP_DIRS.contains(&name.as_str())
                        && matches!(self.live.lstat(&child), Some(Kind::Dir))
                    {
                        continue;
                    } else {
                        self.copy_entry(&child, depth + 1);
                    }
                }
            }
            Some(Kind::File) => self.copy_file(path),
            None => {}
        }
    }
}

/// Runs a command with a timeout; returns its status text and its stdout (when it ran).
fn run_command(argv: &[&str]) -> (String, Option<Vec<u8>>) {
    let Some((prog, args)) = argv.split_first() else {
        return ("failed (empty command)".into(), None);
    };
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ("missing".into(), None),
        Err(e) => return (format!("failed ({e})"), None),
    };
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(MAX_FILE_BYTES).read_to_end(&mut buf);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > COMMAND_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let out = reader.join().unwrap_or_default();
    match status {
        Some(s) if s.success() => ("ok".into(), Some(out)),
        Some(s) => (
            format!(
                "failed (exit {})",
                s.code().map_or("signal".to_string(), |c| c.to_string())
            ),
            Some(out),
        ),
        None => ("timed out".into(), None),
    }
}

/// Writes a tree as a `.tar.gz` archive, atomically: into a temporary file beside
/// `path`, renamed over it only once complete, so a crash never leaves half an archive.
pub fn write_archive(tree: &MemTree, path: &Path) -> Result<(), SnapshotError> {
    let io = |cause| SnapshotError::Io {
        path: path.to_path_buf(),
        cause,
    };
    // Never replace a FIFO, a device or a directory with the archive.
    let path = &xirang_files::replaceable(path).map_err(|e| SnapshotError::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let tmp = path.with_file_name(format!(".{}.tmp", base_name(&path.to_string_lossy())));
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut b = tar::Builder::new(GzEncoder::new(file, Compression::default()));
    b.follow_symlinks(false);
    for (p, kind) in tree.entries() {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        match kind {
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, format!("{p}/"), std::io::empty())
                    .map_err(io)?;
            }
            Kind::Link(text) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, &p, &text).map_err(io)?;
            }
            Kind::File => {
                let data = tree.read_raw(&p).unwrap_or_default();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o444);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, &p, data.as_slice()).map_err(io)?;
            }
        }
    }
    let gz = b.into_inner().map_err(io)?;
    let file = gz.finish().map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)
}

/// Loads a snapshot archive into memory.
pub fn load(path: &Path) -> Result<MemTree, SnapshotError> {
    // A FIFO named as a snapshot must not stall the reader; the archive's size is bounded
    // by what decompressing it may produce (MAX_ARCHIVE_BYTES).
    let file = xirang_files::open(path).map_err(|e| match e {
        xirang_files::ReadError::Io { cause, .. } => SnapshotError::Io {
            path: path.to_path_buf(),
            cause,
        },
        other => SnapshotError::Format {
            path: path.to_path_buf(),
            reason: other.detail(),
        },
    })?;
    load_from(file, path)
}

/// Loads a snapshot archive from any reader (`path` names it in errors and in the tree):
/// what [`load`] does after opening the file, and what the fuzz target drives.
pub fn load_from(reader: impl Read, path: &Path) -> Result<MemTree, SnapshotError> {
    let fmt = |reason: String| SnapshotError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let mut archive = tar::Archive::new(GzDecoder::new(reader).take(MAX_ARCHIVE_BYTES));
    let mut tree = MemTree::new(path.display().to_string());
    let entries = archive.entries().map_err(|e| fmt(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| fmt(e.to_string()))?;
        let name = entry
            .path()
            .map_err(|e| fmt(e.to_string()))?
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        if name.split('/').any(|c| c == "..") {
            return Err(fmt(format!("entry `{name}` climbs out of the archive")));
        }
        match entry.header().entry_type() {
            tar::EntryType::Directory => tree.add_dir(&name),
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| fmt(e.to_string()))?
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default();
                tree.add_link(&name, &target);
            }
            tar::EntryType::Regular => {
                let mut data = Vec::new();
                (&mut entry)
                    .take(MAX_FILE_BYTES + 1)
                    .read_to_end(&mut data)
                    .map_err(|e| fmt(e.to_string()))?;
                if data.len() as u64 > MAX_FILE_BYTES {
                    return Err(fmt(format!(
                        "entry `{name}` is larger than {MAX_FILE_BYTES} bytes"
                    )));
                }
                tree.add_file(&name, data);
            }
            _ => {}
        }
    }
    if tree.lstat(MANIFEST).is_none() {
        return Err(fmt(format!("no {MANIFEST} inside")));
    }
    Ok(tree)
}

/// Opens a host source: a snapshot archive (`.tar.gz`/`.tgz` file) or a directory tree.
pub fn open(path: &Path) -> Result<Box<dyn Tree + Send + Sync>, SnapshotError> {
    if path.is_dir() {
        Ok(Box::new(DirTree::new(path)))
    } else {
        Ok(Box::new(load(path)?))
    }
}
