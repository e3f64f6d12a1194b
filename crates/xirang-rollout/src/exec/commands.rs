//! The policy's command templates filled for a unit: the values a template may name
//! (`values`), which template applies a unit or puts it back (a NIC's flash and rollback,
//! a switch's patch and its rollback), a command filled for running (refused when a value
//! cannot be one word of it) or for showing, and a node's rollback commands for a report.
//! It must not run or record anything: it only makes command lines.

use std::collections::BTreeMap;

use crate::RolloutError;
use crate::policy::fill;
use crate::store::Meta;
use crate::waves::{NicUpgrade, PlannedNode};

/// Template values for a NIC.
pub fn values(node: &str, u: &NicUpgrade) -> BTreeMap<&'static str, String> {
    let mut v = BTreeMap::new();
    v.insert("node", node.to_string());
    v.insert("nic", u.nic.clone());
    v.insert("pci", u.pci.clone().unwrap_or_default());
    v.insert("hca_type", u.hca_type.clone().unwrap_or_default());
    v.insert("board_id", u.board_id.clone().unwrap_or_default());
    v.insert("image", u.image.clone());
    v.insert("target", u.to.clone());
    v.insert("previous", u.from.clone());
    v.insert("netdev", u.netdev.clone().unwrap_or_default());
    v.insert("dir", u.image.clone());
    if let Some(t) = &u.tier {
        v.insert("tier", t.clone());
        v.insert("patch", u.patch_file().unwrap_or_default());
    }
    v
}

/// The command that applies a unit: a NIC's flash, or a switch's patch.
pub fn apply_template<'p>(policy: &'p crate::policy::Policy, u: &NicUpgrade) -> &'p str {
    match (&u.tier, &policy.commands.switch_apply) {
        (Some(_), Some(t)) => t,
        // A plan with switch units is made only with the switch commands (the policy's
        // check); an empty template refuses to run.
        (Some(_), None) => "",
        (None, _) => &policy.commands.flash,
    }
}

/// The command that puts a unit back.
pub fn rollback_template<'p>(policy: &'p crate::policy::Policy, u: &NicUpgrade) -> &'p str {
    match (&u.tier, &policy.commands.switch_rollback) {
        (Some(_), Some(t)) => t,
        (Some(_), None) => "",
        (None, _) => &policy.commands.rollback,
    }
}

pub(super) fn node_values(node: &str) -> BTreeMap<&'static str, String> {
    let mut v = BTreeMap::new();
    v.insert("node", node.to_string());
    v
}

/// A command filled for running: a value that cannot be one word of it (only a plan
/// made before values were checked against their grammar can hold one) refuses the step.
pub(super) fn command_for(
    template: &str,
    v: &BTreeMap<&'static str, String>,
) -> Result<String, RolloutError> {
    if template.trim().is_empty() {
        return Err(RolloutError::Refused(format!(
            "{}: no command for this step in the policy",
            v.get("node").map_or("", String::as_str)
        )));
    }
    fill(template, v).map_err(|e| {
        RolloutError::Refused(format!(
            "{}: a value cannot be put in the command `{template}`: {e}",
            v.get("node").map_or("", String::as_str)
        ))
    })
}

/// A command filled for showing.
pub(super) fn shown_command(template: &str, v: &BTreeMap<&'static str, String>) -> String {
    fill(template, v).unwrap_or_else(|e| format!("(cannot be run: {e})"))
}

/// The rollback command for every NIC of a node, as shown in a report.
pub fn rollback_commands(meta: &Meta, node: &PlannedNode) -> Vec<String> {
    node.nics
        .iter()
        .map(|u| shown_command(rollback_template(&meta.policy, u), &values(&node.name, u)))
        .collect()
}
