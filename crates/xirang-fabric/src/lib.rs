//! Xirang's fabric model: the one description of a GPU cluster's RDMA fabric that every
//! other part of Xirang reads, simulates, tunes, monitors and diagnoses.
//!
//! - [`model`]: hosts (sockets, PCIe switches, GPUs, NICs), switches with tiers, links.
//! - [`config`]: the four layers of configuration (MTU; PFC, ECN, buffers, congestion
//!   control per traffic class; transport; NCCL and memory), with defaults from
//!   `docs/reference/`.
//! - [`topology`]: generators (leaf-spine, fat-tree, rail-optimized), explicit lists and
//!   HPCC topology files.
//! - [`scenario`]: TOML scenario files with precise errors; [`limits`]: the range of
//!   every number they give.
//! - [`mlx5`]: the mlx5 NICs' DCQCN knobs in sysfs (names, units, ranges), one table.
//! - [`routing`]: ECMP path enumeration and path MTU; [`analysis`]: bisection, diameter,
//!   oversubscription.
//!
//! ```
//! use std::path::Path;
//! use xirang_fabric::scenario::Scenario;
//!
//! let text = r#"
//! [topology.fat_tree]
//! k = 4
//! host_rate_gbps = 100
//! fabric_rate_gbps = 100
//! "#;
//! let scenario = Scenario::parse(text, Path::new("example.toml")).unwrap();
//! let loaded = scenario.build(Path::new("example.toml"), Path::new("."), Some(text)).unwrap();
//! let summary = xirang_fabric::analysis::summarize(&loaded.fabric);
//! assert_eq!(summary.hosts, 16);
//! assert!(summary.full_bisection);
//! ```

pub mod analysis;
pub mod built;
pub mod config;
/// Key paths, line lookup and "did you mean": the one vocabulary of every input
/// diagnostic, owned by the file boundary and used here for scenarios.
pub use xirang_files::diag;
pub mod hpcc;
pub mod limits;
pub mod mlx5;
pub mod model;
pub mod partition;
pub mod reference;
pub mod routing;
pub mod scenario;
pub mod settings;
pub mod topology;
pub mod tune;
pub mod units;
pub mod workload;

pub use model::Fabric;
pub use scenario::{Loaded, Scenario, ScenarioError};
