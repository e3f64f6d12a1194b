//! Firmware: NICs of one model running different versions (PHY-FW-DRIFT, against the
//! model's most common version, ties to the newest) and versions outside the policy's
//! allowed list for the model (PHY-FW-POLICY). It compares the versions as the host
//! reports them; it must not flash anything (the fix names the command, the rollout runs
//! it).

use std::collections::BTreeMap;

use xirang_host::HostInventory;
use xirang_host::inventory::RdmaDevice;

use super::{Finding, Layer, Severity, devices, ev, majority, model_of};
use crate::cluster::Cluster;

pub(super) fn firmware(c: &Cluster, out: &mut Vec<Finding>) {
    let mut by_model: BTreeMap<String, Vec<(&HostInventory, &RdmaDevice)>> = BTreeMap::new();
    for (h, d) in devices(c) {
        if d.fw_ver.is_some() {
            by_model.entry(model_of(d)).or_default().push((h, d));
        }
    }
    for (model, devs) in &by_model {
        let Some((common, n)) = majority(devs.iter().filter_map(|(_, d)| d.fw_ver.clone())) else {
            continue;
        };
        for (h, d) in devs {
            let fw = d.fw_ver.clone().unwrap_or_default();
            if fw != common {
                out.push(Finding {
                    rule: "PHY-FW-DRIFT",
                    severity: Severity::Warning,
                    layer: Layer::Physical,
                    entity: format!("{}/{}", h.hostname, d.name),
                    message: format!("firmware {fw} where {n} of {} {model} NICs run {common}", devs.len()),
                    evidence: vec![ev(h, &format!("sys/class/infiniband/{}/fw_ver", d.name), &fw)],
                    fix: format!("flash {common} (mlxfwmanager -d {} -i <image> -u) in a staged rollout, then reboot or mlxfwreset", d.pci.as_deref().unwrap_or(&d.name)),
                });
            }
        }
    }
    for (h, d) in devices(c) {
        let Some(fw) = &d.fw_ver else { continue };
        let rule = c.policy.firmware.iter().find(|r| {
            (r.hca_type.is_some() && r.hca_type == d.hca_type)
                || (r.board_id.is_some() && r.board_id == d.board_id)
        });
        if let Some(rule) = rule
            && !rule.allowed.contains(fw)
        {
            out.push(Finding {
                rule: "PHY-FW-POLICY",
                severity: Severity::Error,
                layer: Layer::Physical,
                entity: format!("{}/{}", h.hostname, d.name),
                message: format!(
                    "firmware {fw} is not allowed for {} (allowed: {})",
                    model_of(d),
                    rule.allowed.join(", ")
                ),
                evidence: vec![ev(h, &format!("sys/class/infiniband/{}/fw_ver", d.name), fw)],
                fix: format!(
                    "flash an allowed version ({}) with mlxfwmanager",
                    rule.allowed.first().cloned().unwrap_or_default()
                ),
            });
        }
    }
}
