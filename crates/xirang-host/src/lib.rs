//! Xirang's host reader: what an RDMA host really is, read from a live `/sys` (rooted at
//! any path, so tests point it at fixture trees) or from a snapshot archive, plus parsers
//! of the RDMA tools' text outputs.
//!
//! - [`tree`]: the file tree being read (a directory or a snapshot in memory), with
//!   symlinks resolved inside it and never outside;
//! - [`sysfs`]: `/sys/class/infiniband`, `/sys/class/net`, `/sys/bus/pci` → [`inventory`];
//! - [`pcidevice`]: every function under `/sys/bus/pci/devices`, as node_exporter's
//!   pcidevice collector reads them;
//! - [`snapshot`]: capture a host into one `.tar.gz`, load it back;
//! - [`names`]: the grammar of names and values read from a host, checked before any
//!   becomes a path or an argument;
//! - [`parse`]: `ethtool -S`, `ibv_devinfo -v`, `nvidia-smi topo -m`, `mlnx_qos -i`,
//!   `lspci -vvv` / `-tv`.

pub mod inventory;
pub mod names;
pub mod parse;
pub mod pcidevice;
pub mod snapshot;
pub mod sysfs;
pub mod tree;

use std::path::Path;

pub use inventory::HostInventory;

/// Reads a host from a directory tree (a live `/` or a captured copy) or a snapshot
/// archive.
pub fn read(path: &Path) -> Result<HostInventory, snapshot::SnapshotError> {
    let tree = snapshot::open(path)?;
    Ok(sysfs::read_host(tree.as_ref()))
}
