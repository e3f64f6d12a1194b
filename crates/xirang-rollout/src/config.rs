//! Configuration rollouts: the tuner's output (`xirang tune`'s directory) as the change,
//! in place of a firmware image.
//!
//! The host side of a tuned configuration is `mlx5-congestion.sh`, which writes the mlx5
//! DCQCN knobs of each interface it is given (`/sys/class/net/IF/ecn/roce_rp/*`,
//! `roce_np/*`) after saving the values it replaces to a rollback file, and writes them
//! back with `--rollback FILE`. Its `KNOBS` block lists every knob it sets and the value.
//! A NIC's state is a fingerprint of the values those knobs have on its interface, so
//! the firmware executor's whole machinery applies unchanged: the plan moves each NIC
//! from its fingerprint before to the recommendation's, a wave's "firmware" gate checks
//! that every knob reads the recommended value, a rollback is checked by every knob
//! reading its value before again, and a crashed apply is settled by reading the knobs
//! (applied, not started, or halfway: left to the operator), so nothing is applied
//! twice.
//!
//! The switch side is the SONiC config_db JSON Patch per tier (`sonic-TIER.patch.json`,
//! applied by `config apply-patch` after a `config checkpoint`, undone by `config
//! rollback`). A switch is a rollout unit of its own, `config_db`, whose state is a
//! fingerprint of the values at the paths its tier's patch writes: the same machinery
//! applies (read, compare with the target, settle a crash by reading).
//!
//! `nccl.env` is not rolled out: it is read by each job at launch, so it goes with the
//! job's next start, not with a node's waves.

use std::collections::BTreeMap;
use std::path::Path;
use xirang_fabric::mlx5::Dir;

use serde::{Deserialize, Serialize};

use crate::RolloutError;

/// The host script of a tuned configuration.
pub const SCRIPT: &str = "mlx5-congestion.sh";

/// One knob the script sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knob {
    /// `roce_rp` or `roce_np`.
    pub dir: String,
    /// File under it (`rpg_ai_rate`, `enable/4`).
    pub file: String,
    /// Value written.
    pub value: u64,
}

impl Knob {
    /// `roce_rp/rpg_ai_rate`, as [`ecn_values`] keys them.
    pub fn key(&self) -> String {
        format!("{}/{}", self.dir, self.file)
    }
}

/// The knobs of a script's `KNOBS='...'` block (`dir file value` per line). `path`
/// names the file in errors.
pub fn parse_knobs(text: &str, path: &Path) -> Result<Vec<Knob>, RolloutError> {
    let err = |line: usize, message: String| RolloutError::Toml {
        path: path.to_path_buf(),
        line,
        message,
    };
    let Some(start) = text.lines().position(|l| l.trim() == "KNOBS='") else {
        return Err(err(
            1,
            format!("expected a `KNOBS='` block listing the knobs (a {SCRIPT} written by `xirang tune`)"),
        ));
    };
    let mut knobs = Vec::new();
    for (i, line) in text.lines().enumerate().skip(start + 1) {
        let l = line.trim();
        // The script skips blank lines too.
        if l.is_empty() {
            continue;
        }
        if l == "'" {
            if knobs.is_empty() {
                return Err(err(i + 1, "expected at least one knob in the KNOBS block".into()));
            }
            return Ok(knobs);
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let [dir, file, value] = f[..] else {
            return Err(err(
                i + 1,
                format!("expected `roce_rp|roce_np FILE VALUE`, found `{l}`"),
            ));
        };
        let Some(d) = Dir::parse(dir) else {
            return Err(err(i + 1, format!("expected roce_rp or roce_np, found `{dir}`")));
        };
        let ok_file = !file.is_empty()
            && !file.starts_with('/')
            && file.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
            && file
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/');
        if !ok_file {
            return Err(err(i + 1, format!("expected a knob file name, found `{file}`")));
        }
        let value: u64 = value
            .parse()
            .map_err(|_| err(i + 1, format!("expected an unsigned value, found `{value}`")))?;
        // The one knob table says which files mlx5 has and what each takes.
        if let Some(why) = xirang_fabric::mlx5::check(d, file, value) {
            return Err(err(i + 1, why));
        }
        if let Some(k) = knobs.iter().find(|k: &&Knob| k.dir == dir && k.file == file) {
            return Err(err(
                i + 1,
                format!(
                    "{dir} {file} is listed twice ({} and {value}); expected each knob once",
                    k.value
                ),
            ));
        }
        knobs.push(Knob {
            dir: dir.into(),
            file: file.into(),
            value,
        });
    }
    Err(err(
        start + 1,
        "the KNOBS block is not closed by a line `'`".into(),
    ))
}

/// Reads the knobs of `dir/mlx5-congestion.sh`.
pub fn load_knobs(dir: &Path) -> Result<Vec<Knob>, RolloutError> {
    let path = dir.join(SCRIPT);
    let text = xirang_files::read_text(&path, crate::policy::POLICY_LIMIT)
        .map_err(|e| RolloutError::Read(Box::new(e)))?;
    parse_knobs(&text, &path)
}

/// Every DCQCN knob of an interface as the host reader saw it, keyed `roce_rp/FILE`
/// (per-priority enables as `roce_rp/enable/P`, 0 or 1).
pub fn ecn_values(ecn: &xirang_host::inventory::RoceEcn) -> BTreeMap<String, u64> {
    let mut v = BTreeMap::new();
    for (dir, params, enable) in [
        (Dir::Rp.name(), &ecn.rp, &ecn.rp_enable),
        (Dir::Np.name(), &ecn.np, &ecn.np_enable),
    ] {
        for (k, x) in params {
            v.insert(format!("{dir}/{k}"), *x);
        }
        for (p, e) in enable.iter().enumerate() {
            if let Some(e) = e {
                v.insert(format!("{dir}/enable/{p}"), u64::from(*e));
            }
        }
    }
    v
}

/// The rollout unit of a switch: its whole config_db.
pub const SWITCH_UNIT: &str = "config_db";

/// One JSON Patch operation (RFC 6902), as `parse_patch` reads them.
pub type PatchOp = json_patch::PatchOperation;

/// The tuner's switch patches, one file per tier.
const PATCH_PREFIX: &str = "sonic-";
const PATCH_SUFFIX: &str = ".patch.json";

/// One switch tier's patch (`sonic-leaf.patch.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchPatch {
    /// The tier (`leaf`, `spine`, `core`), as the topology names it.
    pub tier: String,
    /// The file name, `{patch}` in the command templates.
    pub file: String,
    /// Its operations (add, replace or remove only: the state after them does not
    /// depend on what was there before).
    pub ops: Vec<json_patch::PatchOperation>,
}

/// Largest switch patch read: a few operations per port and queue of the tier.
pub const PATCH_LIMIT: xirang_files::Limit = xirang_files::Limit::new(16 << 20, "switch patch");

/// Reads every `sonic-TIER.patch.json` of a configuration's directory, sorted by tier
/// from the hosts up (leaf, spine, core).
pub fn load_switch_patches(dir: &Path) -> Result<Vec<SwitchPatch>, RolloutError> {
    let read_dir = std::fs::read_dir(dir).map_err(|e| {
        RolloutError::Inventory(format!("{}: cannot list the configuration: {e}", dir.display()))
    })?;
    let mut out = Vec::new();
    for e in read_dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(tier) = name
            .strip_prefix(PATCH_PREFIX)
            .and_then(|t| t.strip_suffix(PATCH_SUFFIX))
        else {
            continue;
        };
        let path = e.path();
        let Some(tier) = xirang_fabric::model::Tier::ALL
            .into_iter()
            .find(|t| t.as_str() == tier)
        else {
            return Err(RolloutError::Inventory(format!(
                "{}: expected sonic-TIER.patch.json with TIER one of leaf, spine, core",
                path.display()
            )));
        };
        let text =
            xirang_files::read_text(&path, PATCH_LIMIT).map_err(|e| RolloutError::Read(Box::new(e)))?;
        let err = |message: String| RolloutError::Toml {
            path: path.clone(),
            line: 1,
            message,
        };
        let ops = parse_patch(&text, &path)?;
        if ops.is_empty() {
            return Err(err("expected at least one operation".into()));
        }
        for (i, op) in ops.iter().enumerate() {
            // config_db is tables of keys of fields: an array's end (`-`) has no value
            // before or after that a state could compare (a numbered position is
            // refused per switch, where its parent is known to be an array; numbers
            // are also map keys, as in DSCP_TO_TC_MAP).
            if op.path().as_str().ends_with("/-") {
                return Err(err(format!(
                    "operation {i} ({}): expected a table, key or field path, not an array's end",
                    op.path()
                )));
            }
            if !matches!(
                op,
                json_patch::PatchOperation::Add(_)
                    | json_patch::PatchOperation::Replace(_)
                    | json_patch::PatchOperation::Remove(_)
            ) {
                return Err(err(format!(
                    "operation {i} ({}): expected add, replace or remove (what `xirang tune` writes)",
                    op.path()
                )));
            }
        }
        out.push(SwitchPatch {
            tier: tier.as_str().to_string(),
            file: name.clone(),
            ops,
        });
    }
    let rank = |t: &str| {
        xirang_fabric::model::Tier::ALL
            .iter()
            .position(|x| x.as_str() == t)
    };
    out.sort_by_key(|p| rank(&p.tier));
    Ok(out)
}

/// The paths a patch writes, each once, in order.
fn patch_paths(p: &SwitchPatch) -> Vec<&str> {
    let mut seen = std::collections::BTreeSet::new();
    p.ops
        .iter()
        .map(|o| o.path().as_str())
        .filter(|x| seen.insert(*x))
        .collect()
}

/// The state of a switch for a patch: a fingerprint of the value at every path the
/// patch writes (absent ones included).
pub fn switch_state(p: &SwitchPatch, db: &serde_json::Value) -> String {
    let mut s = String::new();
    for path in patch_paths(p) {
        match db.pointer(path) {
            Some(v) => s.push_str(&format!("{path}={v}\n")),
            None => s.push_str(&format!("{path} absent\n")),
        }
    }
    format!("cfg-{:016x}", fnv1a(s.as_bytes()))
}

/// The state the patch puts this switch in (its state after the patch is applied to
/// a copy), or why the patch does not apply to it as it is (a parent missing, a
/// replaced or removed value absent).
pub fn switch_after(p: &SwitchPatch, db: &serde_json::Value) -> Result<String, String> {
    for op in &p.ops {
        let path = op.path().as_str();
        let parent = path.rsplit_once('/').map_or("", |x| x.0);
        if db.pointer(parent).is_some_and(serde_json::Value::is_array) {
            return Err(format!(
                "{}: {path} is a position in an array of this config_db, which has no state to compare",
                p.file
            ));
        }
    }
    let mut copy = db.clone();
    json_patch::patch(&mut copy, &p.ops).map_err(|e| format!("{} does not apply: {e}", p.file))?;
    Ok(switch_state(p, &copy))
}

/// A JSON Patch's operations; `path` names the file in errors.
pub fn parse_patch(text: &str, path: &Path) -> Result<Vec<json_patch::PatchOperation>, RolloutError> {
    serde_json::from_str(text).map_err(|e| RolloutError::Toml {
        path: path.to_path_buf(),
        line: e.line(),
        message: format!("expected a JSON Patch (RFC 6902: a list of {{\"op\", \"path\", \"value\"}}): {e}"),
    })
}

/// Applies a patch to a config_db document, all or nothing (as `config apply-patch`).
pub fn apply_patch(db: &mut serde_json::Value, ops: &[json_patch::PatchOperation]) -> Result<(), String> {
    json_patch::patch(db, ops).map_err(|e| e.to_string())
}

/// Largest config_db read (a 64-port switch's is a few hundred KiB).
pub const CONFIG_DB_LIMIT: xirang_files::Limit = xirang_files::Limit::new(64 << 20, "config_db");

/// A switch's config_db as JSON.
pub fn read_config_db(path: &Path) -> Result<serde_json::Value, String> {
    let text = xirang_files::read_text(path, CONFIG_DB_LIMIT).map_err(|e| e.to_string())?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}:{}: expected config_db JSON: {e}", path.display(), e.line()))
}

/// 64-bit FNV-1a: a stable fingerprint, not a security boundary.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

fn fingerprint<'a>(pairs: impl Iterator<Item = (String, &'a u64)>) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(&format!("{k}={v}\n"));
    }
    format!("cfg-{:016x}", fnv1a(s.as_bytes()))
}

/// The state a NIC is in for the recommendation's knobs: a fingerprint of their values
/// on its interface, `None` when any of them cannot be read.
pub fn state(knobs: &[Knob], values: &BTreeMap<String, u64>) -> Option<String> {
    let mut pairs = Vec::new();
    for k in knobs {
        let key = k.key();
        let v = values.get(&key)?;
        pairs.push((key, v));
    }
    Some(fingerprint(pairs.into_iter()))
}

/// The state the recommendation puts a NIC in.
pub fn target(knobs: &[Knob]) -> String {
    let values: Vec<(String, u64)> = knobs.iter().map(|k| (k.key(), k.value)).collect();
    fingerprint(values.iter().map(|(k, v)| (k.clone(), v)))
}

/// A host's interface for an RDMA device: the netdev on its PCI function, else the
/// first the device lists.
pub fn netdev_of<'a>(
    inv: &'a xirang_host::HostInventory,
    rdma: &str,
) -> Option<&'a xirang_host::inventory::Netdev> {
    inv.netdevs
        .iter()
        .find(|n| n.rdma.as_deref() == Some(rdma))
        .or_else(|| {
            let d = inv.rdma.iter().find(|d| d.name == rdma)?;
            let first = d.netdevs.first()?;
            inv.netdevs.iter().find(|n| &n.name == first)
        })
}

/// The state of every RDMA device of a host (its fingerprint, or `None`).
pub fn states(inv: &xirang_host::HostInventory, knobs: &[Knob]) -> BTreeMap<String, Option<String>> {
    inv.rdma
        .iter()
        .map(|d| {
            let s = netdev_of(inv, &d.name)
                .and_then(|n| n.ecn.as_ref())
                .and_then(|e| state(knobs, &ecn_values(e)));
            (d.name.clone(), s)
        })
        .collect()
}
