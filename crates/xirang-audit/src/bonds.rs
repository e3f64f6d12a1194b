//! Rules on several NIC ports per host: Linux bonds, RoCE LAG, and the layout the tools
//! recommended (docs/reference/nic-aggregation.md).

use xirang_fabric::topology::Aggregate;
use xirang_host::inventory::{Bond, HostInventory, ROCE_LAG_BOND_MODES, pci_card};

use crate::cluster::Cluster;
use crate::rules::{Finding, Layer, Severity, ev};

/// NCCL's default QPs per connection (docs/reference/nic-aggregation.md §3).
const NCCL_DEFAULT_QPS_PER_CONNECTION: u32 = 1;

fn bond_file(b: &Bond, f: &str) -> String {
    format!("sys/class/net/{}/bonding/{f}", b.name)
}

fn named(c: &Option<xirang_host::inventory::CodedState>) -> String {
    c.as_ref()
        .map_or("unreadable".to_string(), |c| format!("{} {}", c.name, c.code))
}

/// Runs the rules.
pub fn check(c: &Cluster, out: &mut Vec<Finding>) {
    for h in &c.hosts {
        for b in &h.bonds {
            member_down(h, b, out);
            carries_rdma(h, b, out);
        }
        nccl_qps(h, out);
        if let Some(want) = c.policy.nic_layout {
            layout(h, want, out);
        }
    }
}

fn member_down(h: &HostInventory, b: &Bond, out: &mut Vec<Finding>) {
    // A member whose state could not be read is not called down (the read problem is
    // reported on its own).
    let down: Vec<_> = b
        .members
        .iter()
        .filter(|m| m.mii_status.is_some() && !m.is_up())
        .collect();
    if down.is_empty() {
        return;
    }
    let up = b.members.len() - down.len();
    let consequence = match &b.roce_lag {
        Some(lag) => format!(
            "{lag} has moved their queue pairs to the remaining member(s), which now carry all of its traffic"
        ),
        None if !b.rdma_devices.is_empty() => format!(
            "RDMA runs on the per-card devices ({}), which do not fail over: queue pairs on the down port fail",
            b.rdma_devices.join(", ")
        ),
        None => "traffic hashed to the down members moves to the others".to_string(),
    };
    out.push(Finding {
        rule: "PHY-BOND-MEMBER-DOWN",
        // RDMA on the bond loses bandwidth or queue pairs; other traffic only bandwidth.
        severity: if b.rdma_devices.is_empty() {
            Severity::Warning
        } else {
            Severity::Error
        },
        layer: Layer::Physical,
        entity: format!("{}/{}", h.hostname, b.name),
        message: format!(
            "{} runs on {up} of {} members: {} down; {consequence}",
            b.name,
            b.members.len(),
            down.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")
        ),
        evidence: down
            .iter()
            .map(|m| {
                ev(
                    h,
                    &format!("sys/class/net/{}/bonding_slave/mii_status", m.name),
                    format!(
                        "{} (link failures: {})",
                        m.mii_status.as_deref().unwrap_or("unreadable"),
                        m.link_failure_count.map_or("unknown".into(), |n| n.to_string())
                    ),
                )
            })
            .collect(),
        fix: format!(
            "check the cable and switch port of {} (`ethtool {}`); the bond takes the member back when its link is up",
            down[0].name, down[0].name
        ),
    });
}

/// A bond RDMA uses: whether mlx5 made it a RoCE LAG, and whether its policy spreads
/// queue pairs.
fn carries_rdma(h: &HostInventory, b: &Bond, out: &mut Vec<Finding>) {
    if b.rdma_devices.is_empty() || b.members.len() < 2 {
        return;
    }
    let entity = format!("{}/{}", h.hostname, b.name);
    let mode_ev = ev(h, &bond_file(b, "mode"), named(&b.mode));
    if b.roce_lag.is_none() && b.members.len() > 1 {
        let cards: std::collections::BTreeSet<&str> = b
            .members
            .iter()
            .filter_map(|m| m.pci.as_deref().map(pci_card))
            .collect();
        let mode_ok = b
            .mode
            .as_ref()
            .is_some_and(|m| ROCE_LAG_BOND_MODES.contains(&m.code));
        let why = if cards.len() > 1 {
            format!(
                "its members are ports of {} different cards ({}), and RoCE LAG joins the ports of one card only",
                cards.len(),
                cards.iter().copied().collect::<Vec<_>>().join(", ")
            )
        } else if !mode_ok {
            format!(
                "its mode {} is not one RoCE LAG accepts (active-backup, balance-xor, 802.3ad)",
                named(&b.mode)
            )
        } else {
            "the RDMA devices were not joined (SR-IOV VFs or switchdev mode prevent RoCE LAG)".to_string()
        };
        let mut evidence = vec![mode_ev];
        evidence.extend(b.members.iter().map(|m| {
            ev(
                h,
                &format!("sys/class/net/{}/device", m.name),
                m.pci.as_deref().unwrap_or("no PCI function"),
            )
        }));
        evidence.push(ev(
            h,
            "sys/class/infiniband/*/ports/1/gid_attrs/ndevs",
            format!("{} use {}", b.rdma_devices.join(", "), b.name),
        ));
        out.push(Finding {
            rule: "NET-BOND-NO-LAG",
            severity: Severity::Warning,
            layer: Layer::Network,
            entity: entity.clone(),
            message: format!(
                "RDMA uses {}'s addresses through separate devices ({}) because {why}: each queue pair stays on its device's port, so the bond neither spreads RDMA traffic nor fails it over",
                b.name,
                b.rdma_devices.join(", ")
            ),
            evidence,
            fix: "bond the two ports of one dual-port card (mode 802.3ad, xmit_hash_policy layer3+4) to get one mlx5_bond device, or give each port its own address and let NCCL use the ports as separate devices".to_string(),
        });
        return;
    }
    match b.spreads_qps() {
        Some(false) if b.mode.as_ref().is_some_and(|m| m.code == ACTIVE_BACKUP) => out.push(Finding {
            rule: "NET-BOND-HASH",
            severity: Severity::Info,
            layer: Layer::Network,
            entity,
            message: format!(
                "{} is active-backup: one member carries all RDMA traffic, the other waits for a failure",
                b.name
            ),
            evidence: vec![mode_ev],
            fix: format!(
                "for bandwidth as well as failover: `ip link set {} type bond mode 802.3ad xmit_hash_policy layer3+4` (with LACP on the switch ports)",
                b.name
            ),
        }),
        Some(false) => out.push(Finding {
            rule: "NET-BOND-HASH",
            severity: Severity::Warning,
            layer: Layer::Network,
            entity,
            message: format!(
                "{}'s transmit hash policy {} ignores UDP ports, so every RoCE queue pair between two hosts hashes to the same member: one port carries a host pair's traffic while the other idles",
                b.name,
                named(&b.xmit_hash_policy)
            ),
            evidence: vec![mode_ev, ev(h, &bond_file(b, "xmit_hash_policy"), named(&b.xmit_hash_policy))],
            fix: format!(
                "`echo layer3+4 > /sys/class/net/{}/bonding/xmit_hash_policy` (or `xmit_hash_policy=layer3+4` in the bond's configuration): RoCE v2 queue pairs differ in UDP source port",
                b.name
            ),
        }),
        _ => {}
    }
}

/// `bonding/mode` number of active-backup.
const ACTIVE_BACKUP: u8 = 1;

/// NCCL on a RoCE LAG device with fewer QPs per connection than the bond has members.
fn nccl_qps(h: &HostInventory, out: &mut Vec<Finding>) {
    let Some(set) = h.nccl_conf.get("NCCL_IB_QPS_PER_CONNECTION") else {
        return;
    };
    // A value NCCL would not read as a number says nothing we can judge.
    let Ok(qps) = set.parse::<u32>() else {
        return;
    };
    let qps = qps.max(NCCL_DEFAULT_QPS_PER_CONNECTION);
    for b in h.bonds.iter().filter(|b| b.roce_lag.is_some()) {
        let members = b.members.len() as u32;
        if qps >= members {
            continue;
        }
        let lag = b.roce_lag.as_deref().unwrap_or_default();
        // NCCL_IB_HCA naming other devices, or excluding this one (`^`): NCCL does not
        // use it (docs/reference/collectives-and-nccl.md §5).
        if let Some(hca) = h.nccl_conf.get("NCCL_IB_HCA") {
            let used = match hca.strip_prefix('^') {
                Some(excluded) => !excluded.contains(lag),
                None => hca.contains(lag),
            };
            if !used {
                continue;
            }
        }
        out.push(Finding {
            rule: "APP-BOND-NCCL-QPS",
            severity: Severity::Warning,
            layer: Layer::Application,
            entity: format!("{}/{lag}", h.hostname),
            message: format!(
                "NCCL runs {qps} queue pair(s) per connection on {lag}, a bond of {members} ports: a queue pair never uses more than one port, so each connection gets at most {qps} of them"
            ),
            evidence: vec![ev(h, "etc/nccl.conf", format!("NCCL_IB_QPS_PER_CONNECTION={set}"))],
            fix: format!(
                "set NCCL_IB_QPS_PER_CONNECTION={members} (or more) with NCCL_IB_SPLIT_DATA_ON_QPS=0 in /etc/nccl.conf, or expose the ports as separate devices"
            ),
        });
    }
}

/// The host's layout against the one the policy says was recommended.
fn layout(h: &HostInventory, want: Aggregate, out: &mut Vec<Finding>) {
    let lags: Vec<&Bond> = h.bonds.iter().filter(|b| b.roce_lag.is_some()).collect();
    let roce: Vec<&str> = h
        .rdma
        .iter()
        .filter(|d| d.ports.iter().any(|p| p.is_roce()))
        .map(|d| d.name.as_str())
        .collect();
    let (has, evidence) = match (want, lags.as_slice()) {
        (Aggregate::Independent, [first, ..]) => (
            "RoCE LAG bonds",
            ev(
                h,
                &bond_file(first, "slaves"),
                format!(
                    "{} over {}",
                    first.roce_lag.as_deref().unwrap_or_default(),
                    first
                        .members
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            ),
        ),
        (Aggregate::Lag, []) if roce.len() > 1 => (
            "independent ports",
            ev(
                h,
                "sys/class/infiniband",
                format!("{} RoCE devices: {}", roce.len(), roce.join(", ")),
            ),
        ),
        _ => return,
    };
    out.push(Finding {
        rule: "NET-NIC-LAYOUT",
        severity: Severity::Warning,
        layer: Layer::Network,
        entity: h.hostname.clone(),
        message: format!(
            "{} uses {has}, where the policy's nic_layout (the simulated recommendation) is `{}`",
            h.hostname,
            want.as_str()
        ),
        evidence: vec![evidence],
        fix: match want {
            Aggregate::Independent => "release the bond's members (`ip link set <port> nomaster`) so each port is its own RDMA device, and list them in NCCL_IB_HCA".to_string(),
            Aggregate::Lag => "bond the two ports of each dual-port card (mode 802.3ad, xmit_hash_policy layer3+4) into one mlx5_bond device, or re-run `xirang nccl advise` if the workload changed".to_string(),
        },
    });
}
