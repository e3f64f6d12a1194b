//! The audit's inputs: names and values read from a host that do not fit their grammar
//! (INPUT-BAD-NAME, each error once per host), and files that could not be read or
//! understood, the cluster's and each host's (INPUT-UNREADABLE). It judges whether a
//! value could be read, not what it says; a value that fails its grammar is shown as
//! evidence, and must never reach a command.

use super::{Finding, Layer, Severity, ev};
use crate::cluster::Cluster;

pub(super) fn inputs(c: &Cluster, out: &mut Vec<Finding>) {
    use xirang_host::names::{Kind, check};
    for h in &c.hosts {
        let mut bad = Vec::new();
        if let Err(e) = check(Kind::Hostname, &h.hostname) {
            bad.push(("etc/hostname".to_string(), e));
        }
        for d in &h.rdma {
            let dir = format!("sys/class/infiniband/{}", d.name);
            if let Err(e) = check(Kind::RdmaDevice, &d.name) {
                bad.push((dir.clone(), e));
            }
            for (file, kind, v) in [
                ("board_id", Kind::BoardId, &d.board_id),
                ("fw_ver", Kind::FwVersion, &d.fw_ver),
                ("hca_type", Kind::HcaType, &d.hca_type),
                ("device (PCI address)", Kind::PciAddress, &d.pci),
            ] {
                if let Some(v) = v
                    && let Err(e) = check(kind, v)
                {
                    bad.push((format!("{dir}/{file}"), e));
                }
            }
            for n in &d.netdevs {
                if let Err(e) = check(Kind::Netdev, n) {
                    bad.push((format!("{dir}/device/net/{n}"), e));
                }
            }
        }
        for n in &h.netdevs {
            if let Err(e) = check(Kind::Netdev, &n.name) {
                bad.push((format!("sys/class/net/{}", n.name), e));
            }
        }
        bad.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = Vec::new();
        bad.retain(|(_, e)| {
            let fresh = !seen.contains(e);
            if fresh {
                seen.push(e.clone());
            }
            fresh
        });
        for (path, e) in bad {
            out.push(Finding {
                rule: "INPUT-BAD-NAME",
                severity: Severity::Error,
                layer: Layer::Inputs,
                entity: h.hostname.clone(),
                message: e.to_string(),
                evidence: vec![ev(h, &path, &e.value)],
                fix: "find out why the host reports it (a misconfigured or compromised node writes its own sysfs and snapshot); the rollout skips the node until it fits".into(),
            });
        }
    }
    for (path, why) in &c.unreadable {
        out.push(Finding {
            rule: "INPUT-UNREADABLE",
            severity: Severity::Error,
            layer: Layer::Inputs,
            entity: path.clone(),
            message: format!("could not be read: {why}"),
            evidence: vec![],
            fix: "recapture it (`xirang host snapshot`, or copy config_db.json again)".into(),
        });
    }
    for h in &c.hosts {
        for p in &h.problems {
            out.push(Finding {
                rule: "INPUT-UNREADABLE",
                severity: Severity::Warning,
                layer: Layer::Inputs,
                entity: h.hostname.clone(),
                message: p.message.clone(),
                evidence: vec![ev(h, &p.path, "unreadable")],
                fix: "recapture the host; values from this file are unknown to the audit".into(),
            });
        }
    }
}
