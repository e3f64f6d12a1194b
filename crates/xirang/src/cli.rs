//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Xirang: RDMA fabric tuning and diagnosis for GPU clusters.
///
/// Exit status: 0 when the command ran clean, 1 when it found problems or failed,
/// 2 on a usage error.
#[derive(Debug, Parser)]
#[command(name = "xirang", version, about, long_about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Scenario files: check them, expand generators into explicit lists.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Topology figures and drawings.
    #[command(subcommand)]
    Topo(TopoCmd),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScenarioCmd {
    /// Parse and validate a scenario; report every error with file, line and key path.
    Check(FileArgs),
    /// Print the scenario with its topology expanded into an explicit list (TOML).
    Expand {
        /// Scenario file.
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TopoCmd {
    /// Counts per tier, oversubscription, bisection bandwidth, diameter, ECMP width and
    /// path MTU between two sample hosts, GPU/NIC PCIe affinity.
    Show(FileArgs),
    /// The topology in Graphviz DOT (render with `dot -Tsvg`).
    Dot {
        /// Scenario file.
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub(crate) struct FileArgs {
    /// Scenario file.
    pub(crate) file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}
