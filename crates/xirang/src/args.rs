//! What more than one command does with its arguments: the scenario a `--scenario` names
//! and the platform of its hosts, and the checks of flags several commands share. Kept
//! apart so that no command imports another command's helper.

use std::path::Path;

use anyhow::{Context, Result, bail};
use xirang_collective::cost::Platform;
use xirang_fabric::Loaded;
use xirang_fabric::scenario::Scenario;

/// The hosts a scenario describes (its first host), as the cost model sees them.
pub(crate) fn host_platform(s: &Path) -> Result<Platform> {
    let loaded = crate::cmd::load(s)?;
    Platform::of_fabric(&loaded.fabric, &loaded.scenario.config, &[], 0)
        .with_context(|| format!("{}: the scenario has no hosts", s.display()))
}

/// The scenario (given or built-in) and the platform of its data-parallel group, with a
/// line that says which.
pub(crate) fn scenario_platform(path: Option<&Path>) -> Result<(Loaded, Platform, String)> {
    let loaded = match path {
        Some(p) => crate::cmd::load(p)?,
        None => Scenario::builtin_default().context("the built-in default scenario")?,
    };
    let (platform, what) =
        Platform::of_scenario(&loaded).context("the scenario has no hosts to run a collective on")?;
    let desc = format!(
        "{} ({what}: {} x {} GPUs, network {:.1} GB/s per node)",
        loaded.scenario.name, platform.nodes, platform.gpus_per_node, platform.node_net_gbs
    );
    Ok((loaded, platform, desc))
}

/// `--nics` and `--nic-gbps` within what a fabric can hold.
pub(crate) fn check_nics(nics: Option<u32>, nic_gbps: Option<f64>) -> Result<()> {
    let max_nics = xirang_fabric::limits::MAX_DEVICES_PER_HOST;
    if let Some(n) = nics
        && !(1..=max_nics).contains(&n)
    {
        bail!("--nics: expected 1..={max_nics} NICs per node, found {n}");
    }
    if let Some(g) = nic_gbps
        && !xirang_fabric::limits::link_rate_ok(g)
    {
        bail!(
            "--nic-gbps: {}, found {}",
            xirang_fabric::limits::link_rate_expected(),
            xirang_fabric::limits::Num(g)
        );
    }
    Ok(())
}
