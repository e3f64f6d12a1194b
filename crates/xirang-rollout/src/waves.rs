//! The planner: which nodes go in which wave, and why.
//!
//! 1. Each node is classified: upgradable (every NIC a target covers runs a version in
//!    its `allowed_from`, at least one is not yet on target), or skipped with the
//!    reason (already on target, no target for its NICs, or a NIC on a version the
//!    upgrade was not qualified from).
//! 2. Canaries cover every (model, current firmware) combination among upgradable NICs
//!    (greedy set cover, spreading over racks), then fill up to the first stage's share.
//! 3. The other stages take nodes in an order interleaved across racks (or switches), up
//!    to each stage's cumulative share.
//! 4. Each stage is packed into waves, first fit, so that no wave holds more than the
//!    limit's share of any rack, switch, rail or job; a stage that cannot fit in one
//!    wave becomes several, and the plan says which limit split it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::fleet::{Domain, DomainKind, Fleet, Node};
use crate::policy::Policy;

/// One NIC to flash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicUpgrade {
    /// RDMA device (`mlx5_0`).
    pub nic: String,
    /// Model as printed (`MT4125/MT_0000000359`).
    pub model: String,
    /// HCA type, for templates.
    pub hca_type: Option<String>,
    /// Board id, for templates.
    pub board_id: Option<String>,
    /// PCI address, for templates.
    pub pci: Option<String>,
    /// Current version.
    pub from: String,
    /// Target version.
    pub to: String,
    /// Image file; for a configuration, its directory.
    pub image: String,
    /// The NIC's interface, for a configuration's templates (`{netdev}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// A switch's unit (its config_db): the tier whose patch it takes. `None` for a
    /// host's NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

impl NicUpgrade {
    /// The tier's patch file of a switch unit (`sonic-leaf.patch.json`).
    pub fn patch_file(&self) -> Option<String> {
        self.tier.as_ref().map(|t| format!("sonic-{t}.patch.json"))
    }
}

/// A node in a wave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedNode {
    /// Host name.
    pub name: String,
    /// Why it is in this wave.
    pub reason: String,
    /// NICs to flash.
    pub nics: Vec<NicUpgrade>,
}

/// One wave: flashed together, then gated together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wave {
    /// 1-based number.
    pub number: usize,
    /// Stage label: `canary`, or the cumulative share (`5%`, `100%`).
    pub stage: String,
    /// Nodes.
    pub nodes: Vec<PlannedNode>,
    /// Why the stage was split, when it was.
    pub note: Option<String>,
    /// The control group its live gates compare it with: nodes of later waves (still
    /// unchanged while this wave soaks, none of their NICs on the target already)
    /// sharing a rack, switch or job with it, else other later nodes (the plan notes
    /// it), as many as the wave has. Empty without live gates, and for the last wave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control: Vec<String>,
}

/// A node that is not upgraded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Host name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// A (model, current firmware) combination and the canary that covers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Combination {
    /// Model.
    pub model: String,
    /// Current version.
    pub from: String,
    /// Target.
    pub to: String,
    /// Upgradable nodes with it.
    pub nodes: usize,
    /// First canary node that has it.
    pub canary: String,
}

/// A rollout plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Nodes in the inventory.
    pub total_nodes: usize,
    /// Waves in order.
    pub waves: Vec<Wave>,
    /// Nodes not upgraded.
    pub skipped: Vec<Skipped>,
    /// Combinations and their canaries.
    pub combinations: Vec<Combination>,
    /// Per-wave caps: domain, its size, most nodes per wave.
    pub caps: Vec<(String, usize, usize)>,
    /// Things the operator should know (limits that could not apply, floors of one).
    pub notes: Vec<String>,
}

type Combo = (String, String);

struct Candidate<'a> {
    node: &'a Node,
    nics: Vec<NicUpgrade>,
    combos: BTreeSet<Combo>,
    group: String,
}

/// The values of a node that would go into its commands and paths, each against its
/// grammar: a node with one that does not fit is skipped, never commanded.
fn bad_values(node: &Node) -> Vec<String> {
    use xirang_host::names::{Kind, check};
    let mut bad = Vec::new();
    if let Err(e) = check(Kind::Hostname, &node.name) {
        bad.push(e.to_string());
    }
    for nic in &node.nics {
        let values = [
            (Kind::RdmaDevice, Some(&nic.name)),
            (Kind::PciAddress, nic.pci.as_ref()),
            (Kind::BoardId, nic.board_id.as_ref()),
            (Kind::HcaType, nic.hca_type.as_ref()),
            (Kind::FwVersion, nic.fw.as_ref()),
            (Kind::Netdev, nic.netdev.as_ref()),
        ];
        for (kind, v) in values {
            if let Some(v) = v
                && let Err(e) = check(kind, v)
            {
                bad.push(format!("{}: {e}", nic.name));
            }
        }
    }
    bad
}

fn classify<'a>(node: &'a Node, policy: &Policy) -> Result<Candidate<'a>, String> {
    let bad = bad_values(node);
    if !bad.is_empty() {
        return Err(format!("refused: {}", bad.join("; ")));
    }
    if let Some(c) = &policy.configuration {
        return classify_config(node, policy, c);
    }
    let mut nics = Vec::new();
    let mut on_target = 0;
    let mut blocked = Vec::new();
    let mut uncovered = 0;
    for nic in &node.nics {
        let Some(t) = policy.target_for(nic) else {
            uncovered += 1;
            continue;
        };
        match nic.fw.as_deref() {
            Some(v) if v == t.target => on_target += 1,
            Some(v) if t.allowed_from.iter().any(|a| a == v) && !missing_values(policy, nic).is_empty() => {
                blocked.push(format!(
                    "{} ({}): {} unknown, needed by the flash/rollback commands",
                    nic.name,
                    nic.model(),
                    missing_values(policy, nic).join(", ")
                ))
            }
            Some(v) if t.allowed_from.iter().any(|a| a == v) => nics.push(NicUpgrade {
                nic: nic.name.clone(),
                model: nic.model(),
                hca_type: nic.hca_type.clone(),
                board_id: nic.board_id.clone(),
                pci: nic.pci.clone(),
                from: v.to_string(),
                to: t.target.clone(),
                image: t.image.clone(),
                netdev: nic.netdev.clone(),
                tier: None,
            }),
            Some(v) => blocked.push(format!(
                "{} ({}) runs {v}, which is not in allowed_from ({}) for target {}",
                nic.name,
                nic.model(),
                t.allowed_from.join(", "),
                t.target
            )),
            None => blocked.push(format!(
                "{} ({}): firmware version unknown (fw_ver unreadable)",
                nic.name,
                nic.model()
            )),
        }
    }
    if !blocked.is_empty() {
        return Err(format!("blocked: {}", blocked.join("; ")));
    }
    if nics.is_empty() {
        return Err(if on_target > 0 {
            format!("already on target ({on_target} NIC(s))")
        } else if uncovered > 0 {
            format!("no target in the policy for its NIC model(s) ({uncovered} NIC(s))")
        } else {
            "no RDMA NIC".into()
        });
    }
    let combos = nics.iter().map(|n| (n.model.clone(), n.from.clone())).collect();
    let group = primary_group(node);
    Ok(Candidate {
        node,
        nics,
        combos,
        group,
    })
}

/// A configuration change: every NIC whose interface shows the knobs moves from its
/// state to the recommendation's; a NIC already there counts as done; a NIC whose knobs
/// cannot be read blocks its node (the script refuses such an interface too).
fn classify_config<'a>(
    node: &'a Node,
    policy: &Policy,
    c: &crate::policy::Configuration,
) -> Result<Candidate<'a>, String> {
    let mut nics = Vec::new();
    let mut blocked = Vec::new();
    let mut on_target = 0;
    let mut uncovered = 0;
    for nic in &node.nics {
        // A device without DCQCN knobs (an InfiniBand port, another vendor's NIC) is
        // not the configuration's to change; a RoCE LAG device's knobs live on each
        // member's interface, of which it names one, so it is refused whole.
        if nic.ecn.is_empty() {
            uncovered += 1;
            continue;
        }
        if nic.name.starts_with("mlx5_bond") {
            blocked.push(format!(
                "{}: a RoCE LAG device: its knobs are per member interface, and a configuration rollout sets one interface per device",
                nic.name
            ));
            continue;
        }
        match crate::config::state(&c.knobs, &nic.ecn) {
            Some(v) if v == c.target => on_target += 1,
            Some(_) if !missing_values(policy, nic).is_empty() => blocked.push(format!(
                "{}: {} unknown, needed by the apply/rollback commands",
                nic.name,
                missing_values(policy, nic).join(", ")
            )),
            Some(v) => nics.push(NicUpgrade {
                nic: nic.name.clone(),
                model: nic.model(),
                hca_type: nic.hca_type.clone(),
                board_id: nic.board_id.clone(),
                pci: nic.pci.clone(),
                from: v,
                to: c.target.clone(),
                image: c.dir.clone(),
                netdev: nic.netdev.clone(),
                tier: None,
            }),
            None => blocked.push(format!(
                "{}: the DCQCN knobs the configuration sets are not all readable on {} (not an mlx5 function under MLNX_OFED?)",
                nic.name,
                nic.netdev.as_deref().unwrap_or("its interface (none found)")
            )),
        }
    }
    if !blocked.is_empty() {
        return Err(format!("blocked: {}", blocked.join("; ")));
    }
    if nics.is_empty() {
        return Err(if on_target > 0 {
            format!("already on the configuration ({on_target} NIC(s))")
        } else if uncovered > 0 {
            format!("no NIC with DCQCN knobs ({uncovered} NIC(s) without them)")
        } else {
            "no RDMA NIC".into()
        });
    }
    // Canaries cover each NIC model; the knobs' states before are many and say
    // nothing about the hardware, so they are not combinations to cover.
    let combos = nics
        .iter()
        .map(|n| (n.model.clone(), "any state".to_string()))
        .collect();
    let group = primary_group(node);
    Ok(Candidate {
        node,
        nics,
        combos,
        group,
    })
}

/// Template values a NIC lacks that the flash or rollback command needs.
fn missing_values(policy: &Policy, nic: &crate::fleet::Nic) -> Vec<&'static str> {
    let c = &policy.commands;
    [
        ("pci", nic.pci.is_none()),
        ("hca_type", nic.hca_type.is_none()),
        ("board_id", nic.board_id.is_none()),
        ("netdev", nic.netdev.is_none()),
    ]
    .into_iter()
    .filter(|(name, missing)| {
        *missing && (c.flash.contains(&format!("{{{name}}}")) || c.rollback.contains(&format!("{{{name}}}")))
    })
    .map(|(name, _)| name)
    .collect()
}

/// The domain nodes are spread over: the rack when known, else the first switch.
fn primary_group(node: &Node) -> String {
    node.domains
        .iter()
        .find(|d| d.kind == DomainKind::Rack)
        .or_else(|| node.domains.iter().find(|d| d.kind == DomainKind::Switch))
        .map(|d| d.to_string())
        .unwrap_or_default()
}

/// Round-robin over groups (sorted by name), nodes in name order within a group.
fn interleave(cands: &[Candidate<'_>]) -> Vec<usize> {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
        groups.entry(c.group.as_str()).or_default().push(i);
    }
    let mut out = Vec::with_capacity(cands.len());
    let lists: Vec<Vec<usize>> = groups.into_values().collect();
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..longest {
        for l in &lists {
            if let Some(&i) = l.get(k) {
                out.push(i);
            }
        }
    }
    out
}

fn pct(share: f64) -> String {
    let p = share * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}%", p.round())
    } else {
        format!("{p:.1}%")
    }
}

/// Plans a rollout of `policy` over `fleet`.
pub fn plan(fleet: &Fleet, policy: &Policy) -> Plan {
    let (cands, mut skipped) = candidates(fleet, policy);
    let order = interleave(&cands);
    let sizes = fleet.domain_sizes();
    let mut notes = unknown_kind_notes(fleet);
    let caps = caps(policy, &sizes, &mut notes);
    let targets = stage_targets(&policy.stages.fractions, cands.len());
    let staging = stage(policy, &cands, &order, &targets);
    let mut waves = pack_waves(policy, &cands, &sizes, &staging);
    let combinations = combinations(policy, &cands, &staging.canary_covers);
    if policy.gates.live.is_some() {
        for n in control_groups(fleet, policy, &mut waves) {
            notes.push(n);
        }
    }
    let mut total_nodes = fleet.nodes.len();
    if let Some(c) = &policy.configuration {
        if c.patches.is_empty() {
            if !c.switches {
                notes.push("switches = false: only the hosts' knobs are rolled out; the configuration's switch patches, if any, are not applied".into());
            }
        } else {
            total_nodes += fleet.switches.len();
            switch_waves(fleet, policy, c, &mut waves, &mut skipped, &mut notes);
            if policy.gates.live.is_none() {
                notes.push("no [gates.live]: the switch waves are judged by their config_db's state, the audit and the soak only".into());
            }
        }
    }
    Plan {
        total_nodes,
        waves,
        skipped,
        combinations,
        caps,
        notes,
    }
}

/// Every node either becomes a candidate or is skipped with its reason, in the
/// inventory's order.
fn candidates<'a>(fleet: &'a Fleet, policy: &Policy) -> (Vec<Candidate<'a>>, Vec<Skipped>) {
    let mut cands = Vec::new();
    let mut skipped = Vec::new();
    for n in &fleet.nodes {
        match classify(n, policy) {
            Ok(c) => cands.push(c),
            Err(reason) => skipped.push(Skipped {
                name: n.name.clone(),
                reason,
            }),
        }
    }
    (cands, skipped)
}

/// A limit on a kind of domain the fleet does not know (no racks named, no cabling)
/// cannot hold: the plan says so rather than look as if it did.
fn unknown_kind_notes(fleet: &Fleet) -> Vec<String> {
    let kinds = fleet.kinds_present();
    let mut notes = Vec::new();
    for k in DomainKind::ALL {
        if !kinds.contains(&k) {
            let why = match k {
                DomainKind::Rack | DomainKind::Job => "fleet.toml names none",
                DomainKind::Switch => "no cabling (topology.toml) given",
                DomainKind::Rail => "no node has an RDMA NIC",
            };
            notes.push(format!(
                "no {} is known ({why}): the {} limit does not apply",
                k.name(),
                k.name()
            ));
        }
    }
    notes
}

/// Each domain's per-wave cap, and a note per kind of the domains so small that the
/// limit's share is under one node (their cap is floored at one).
fn caps(
    policy: &Policy,
    sizes: &BTreeMap<Domain, usize>,
    notes: &mut Vec<String>,
) -> Vec<(String, usize, usize)> {
    let mut caps = Vec::new();
    let mut floored = BTreeMap::<DomainKind, Vec<String>>::new();
    for (d, &size) in sizes {
        let cap = policy.limits.cap(d.kind, size);
        if policy.limits.share(d.kind) * (size as f64) < 1.0 {
            floored.entry(d.kind).or_default().push(d.to_string());
        }
        caps.push((d.to_string(), size, cap));
    }
    for (k, ds) in floored {
        let shown: Vec<&str> = ds.iter().take(5).map(String::as_str).collect();
        notes.push(format!(
            "{} of {} {}(s) are too small for {} of them to be a whole node ({}{}): one node per wave",
            ds.len(),
            sizes.keys().filter(|d| d.kind == k).count(),
            k.name(),
            pct(policy.limits.share(k)),
            shown.join(", "),
            if ds.len() > shown.len() { ", ..." } else { "" }
        ));
    }
    caps
}

/// Stage targets: the cumulative node counts of the stages' shares, the last one
/// every candidate.
fn stage_targets(fr: &[f64], n: usize) -> Vec<usize> {
    let mut targets: Vec<usize> = fr
        .iter()
        .map(|f| ((f * n as f64) - 1e-9).ceil().max(0.0) as usize)
        .collect();
    if let Some(last) = targets.last_mut() {
        *last = n;
    }
    targets
}

/// Which stage each candidate went to, and why.
struct Staging {
    /// Candidates (indices) per stage; stage 0 is the canaries.
    stages: Vec<Vec<usize>>,
    /// Each candidate's stage and the reason it is in it.
    stage_of: Vec<Option<(usize, String)>>,
    /// The canary that first covered each combination.
    canary_covers: BTreeMap<Combo, String>,
}

/// The state the stages are chosen with: a candidate is taken once, and the canaries
/// prefer groups no canary is in yet.
struct Stager<'c, 'a> {
    cands: &'c [Candidate<'a>],
    /// The interleaved order over groups.
    order: &'c [usize],
    chosen: Vec<bool>,
    stage_of: Vec<Option<(usize, String)>>,
    used_groups: BTreeSet<String>,
}

/// Stages the candidates: canaries covering every combination, canaries spread up to
/// the first stage's target, then each later stage in the interleaved order.
fn stage(policy: &Policy, cands: &[Candidate<'_>], order: &[usize], targets: &[usize]) -> Staging {
    let n = cands.len();
    let mut stager = Stager {
        cands,
        order,
        chosen: vec![false; n],
        stage_of: vec![None; n],
        used_groups: BTreeSet::new(),
    };
    let (mut stage0, canary_covers) = stager.cover_combos();
    let canary_target = targets[0].max(policy.stages.min_canaries).min(n);
    stager.spread_canaries(&mut stage0, canary_target);
    let mut stages: Vec<Vec<usize>> = vec![stage0];
    let done = stages[0].len();
    stages.extend(stager.later_stages(&policy.stages.fractions, targets, done));
    Staging {
        stages,
        stage_of: stager.stage_of,
        canary_covers,
    }
}

impl Stager<'_, '_> {
    /// Canaries first cover every combination: greedy set cover, most new combinations
    /// first, then a group no canary is in yet. Returns them and which canary covered
    /// each combination.
    fn cover_combos(&mut self) -> (Vec<usize>, BTreeMap<Combo, String>) {
        let cands = self.cands;
        let mut uncovered: BTreeSet<Combo> = cands.iter().flat_map(|c| c.combos.clone()).collect();
        let mut canary_covers: BTreeMap<Combo, String> = BTreeMap::new();
        let mut stage0: Vec<usize> = Vec::new();
        while !uncovered.is_empty() {
            let mut best: Option<(usize, bool, usize)> = None; // (new combos, fresh group, index)
            for &i in self.order {
                if self.chosen[i] {
                    continue;
                }
                let new = cands[i].combos.intersection(&uncovered).count();
                if new == 0 {
                    continue;
                }
                let fresh = !self.used_groups.contains(&cands[i].group);
                if best.is_none_or(|(bn, bf, _)| (new, fresh) > (bn, bf)) {
                    best = Some((new, fresh, i));
                }
            }
            let Some((_, _, i)) = best else { break };
            self.chosen[i] = true;
            self.used_groups.insert(cands[i].group.clone());
            let covers: Vec<Combo> = cands[i].combos.intersection(&uncovered).cloned().collect();
            for k in &covers {
                uncovered.remove(k);
                canary_covers.insert(k.clone(), cands[i].node.name.clone());
            }
            let what: Vec<String> = covers.iter().map(|(m, v)| format!("{m} {v}")).collect();
            let mut reason = format!("canary: first node with {}", what.join(", "));
            if !cands[i].group.is_empty() {
                let _ = write!(reason, "; {}", cands[i].group);
            }
            self.stage_of[i] = Some((0, reason));
            stage0.push(i);
        }
        (stage0, canary_covers)
    }

    /// Fills the canaries up to `canary_target`: groups no canary is in yet first, then
    /// the interleaved order.
    fn spread_canaries(&mut self, stage0: &mut Vec<usize>, canary_target: usize) {
        let cands = self.cands;
        for pass in 0..2 {
            for &i in self.order {
                if stage0.len() >= canary_target {
                    break;
                }
                if self.chosen[i] || (pass == 0 && self.used_groups.contains(&cands[i].group)) {
                    continue;
                }
                self.chosen[i] = true;
                self.used_groups.insert(cands[i].group.clone());
                let reason = if cands[i].group.is_empty() {
                    "canary: spread over the fleet".to_string()
                } else if pass == 0 {
                    format!("canary: spread, first in {}", cands[i].group)
                } else {
                    format!("canary: spread; {}", cands[i].group)
                };
                self.stage_of[i] = Some((0, reason));
                stage0.push(i);
            }
        }
    }

    /// The stages after the canaries: candidates not yet taken, in the interleaved
    /// order, up to each stage's cumulative target (`done` are staged already).
    fn later_stages(&mut self, fr: &[f64], targets: &[usize], mut done: usize) -> Vec<Vec<usize>> {
        let cands = self.cands;
        let mut stages = Vec::new();
        let mut cursor = 0;
        for (s, &target) in targets.iter().enumerate().skip(1) {
            let mut members = Vec::new();
            while done < target && cursor < self.order.len() {
                let i = self.order[cursor];
                cursor += 1;
                if self.chosen[i] {
                    continue;
                }
                self.chosen[i] = true;
                let mut reason = format!("stage {}", pct(fr[s]));
                if !cands[i].group.is_empty() {
                    let _ = write!(reason, "; {}", cands[i].group);
                }
                self.stage_of[i] = Some((s, reason));
                members.push(i);
                done += 1;
            }
            stages.push(members);
        }
        stages
    }
}

/// Packs each stage into waves under the domains' caps, and says which limits split a
/// stage that did not fit in one wave.
fn pack_waves(
    policy: &Policy,
    cands: &[Candidate<'_>],
    sizes: &BTreeMap<Domain, usize>,
    staging: &Staging,
) -> Vec<Wave> {
    let fr = &policy.stages.fractions;
    let cap_of: BTreeMap<&Domain, usize> = sizes
        .iter()
        .map(|(d, &s)| (d, policy.limits.cap(d.kind, s)))
        .collect();
    let mut waves = Vec::new();
    for (s, members) in staging.stages.iter().enumerate() {
        if members.is_empty() {
            continue;
        }
        let label = if s == 0 { "canary".to_string() } else { pct(fr[s]) };
        let (bins, split_by) = first_fit(cands, members, &cap_of);
        let parts = bins.len();
        for (k, idx) in bins.into_iter().enumerate() {
            let note = (parts > 1).then(|| {
                format!(
                    "stage {label} split into {parts} waves ({} of {parts}) by the per-wave limit on {}",
                    k + 1,
                    split_by
                        .iter()
                        .map(|k| format!("{} ({})", k.name(), pct(policy.limits.share(*k))))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            });
            let mut nodes: Vec<PlannedNode> = idx
                .iter()
                .map(|&i| PlannedNode {
                    name: cands[i].node.name.clone(),
                    reason: staging.stage_of[i]
                        .as_ref()
                        .map(|s| s.1.clone())
                        .unwrap_or_default(),
                    nics: cands[i].nics.clone(),
                })
                .collect();
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            waves.push(Wave {
                number: waves.len() + 1,
                stage: label.clone(),
                nodes,
                note,
                control: Vec::new(),
            });
        }
    }
    waves
}

/// One stage's members, first fit, into waves that hold no more than any domain's cap;
/// and the kinds of domain whose caps made a new wave.
fn first_fit(
    cands: &[Candidate<'_>],
    members: &[usize],
    cap_of: &BTreeMap<&Domain, usize>,
) -> (Vec<Vec<usize>>, BTreeSet<DomainKind>) {
    let mut bins: Vec<(BTreeMap<&Domain, usize>, Vec<usize>)> = Vec::new();
    let mut split_by: BTreeSet<DomainKind> = BTreeSet::new();
    for &i in members {
        let node = cands[i].node;
        let fits = |load: &BTreeMap<&Domain, usize>| {
            node.domains
                .iter()
                .all(|d| load.get(d).copied().unwrap_or(0) < cap_of[d])
        };
        let slot = bins.iter().position(|(load, _)| fits(load));
        let b = match slot {
            Some(b) => b,
            None => {
                if let Some((load, _)) = bins.last() {
                    for d in &node.domains {
                        if load.get(d).copied().unwrap_or(0) >= cap_of[d] {
                            split_by.insert(d.kind);
                        }
                    }
                }
                bins.push((BTreeMap::new(), Vec::new()));
                bins.len() - 1
            }
        };
        for d in &node.domains {
            *bins[b].0.entry(d).or_insert(0) += 1;
        }
        bins[b].1.push(i);
    }
    (bins.into_iter().map(|(_, idx)| idx).collect(), split_by)
}

/// Each (model, current version) combination: its target, how many candidates have
/// it, and the canary that covers it.
fn combinations(
    policy: &Policy,
    cands: &[Candidate<'_>],
    canary_covers: &BTreeMap<Combo, String>,
) -> Vec<Combination> {
    let mut combo_nodes: BTreeMap<Combo, usize> = BTreeMap::new();
    for c in cands {
        for k in &c.combos {
            *combo_nodes.entry(k.clone()).or_insert(0) += 1;
        }
    }
    combo_nodes
        .into_iter()
        .map(|((model, from), nodes)| Combination {
            to: cands
                .iter()
                .flat_map(|c| c.nics.iter())
                .find(|u| u.model == model && (u.from == from || policy.configuration.is_some()))
                .map(|u| u.to.clone())
                .unwrap_or_default(),
            canary: canary_covers
                .get(&(model.clone(), from.clone()))
                .cloned()
                .unwrap_or_default(),
            model,
            from,
            nodes,
        })
        .collect()
}

/// The switch side of a configuration, after every host: per tier from the hosts up, a
/// canary switch, then waves of at most the `switch` limit's share of the tier. Each
/// switch's unit is its config_db, moved from its state to the state its tier's patch
/// puts it in. A switch's control group is the tier's switches of later waves: hosts
/// cannot be one (a host's traffic crosses many switches of a tier).
fn switch_waves(
    fleet: &Fleet,
    policy: &Policy,
    c: &crate::policy::Configuration,
    waves: &mut Vec<Wave>,
    skipped: &mut Vec<Skipped>,
    notes: &mut Vec<String>,
) {
    skip_unpatched_switches(fleet, c, skipped);
    for p in &c.patches {
        let mut members: Vec<PlannedNode> = Vec::new();
        let tier_switches: Vec<&crate::fleet::Switch> = fleet
            .switches
            .iter()
            .filter(|s| s.tier.as_deref() == Some(p.tier.as_str()))
            .collect();
        if tier_switches.is_empty() {
            notes.push(format!(
                "{}: no {} switch in the inventory (switches/ and the cabling's tiers): not applied",
                p.file, p.tier
            ));
            continue;
        }
        for sw in &tier_switches {
            match switch_unit(policy, c, p, sw) {
                Ok(node) => members.push(node),
                Err(reason) => skipped.push(Skipped {
                    name: sw.name.clone(),
                    reason,
                }),
            }
        }
        if members.is_empty() {
            continue;
        }
        tier_waves(policy, p, members, tier_switches.len(), waves, notes);
    }
}

/// The switches no tier's patch applies to: their tier is unknown, or the
/// configuration has no patch for it.
fn skip_unpatched_switches(fleet: &Fleet, c: &crate::policy::Configuration, skipped: &mut Vec<Skipped>) {
    for sw in fleet.switches.iter().filter(|s| s.tier.is_none()) {
        skipped.push(Skipped {
            name: sw.name.clone(),
            reason: "blocked: its tier is unknown (the cabling's [switches] does not name it): no tier's patch is applied to it".into(),
        });
    }
    let patched: BTreeSet<&str> = c.patches.iter().map(|p| p.tier.as_str()).collect();
    for sw in &fleet.switches {
        if let Some(t) = sw.tier.as_deref()
            && !patched.contains(t)
        {
            skipped.push(Skipped {
                name: sw.name.clone(),
                reason: format!("no patch for the {t} tier in the configuration"),
            });
        }
    }
}

/// A switch of the patch's tier as a planned unit (its config_db, from its state to
/// the patched one), or why it is skipped: a bad name, no host cables for the soak to
/// read, a config_db unread or the patch does not fit, or already patched.
fn switch_unit(
    policy: &Policy,
    c: &crate::policy::Configuration,
    p: &crate::config::SwitchPatch,
    sw: &crate::fleet::Switch,
) -> Result<PlannedNode, String> {
    use xirang_host::names::{Kind, check};
    if let Err(e) = check(Kind::Hostname, &sw.name) {
        return Err(format!("refused: {e}"));
    }
    // The soak reads a switch's link errors on the hosts' side of its cables; a
    // switch without host cables (a spine, a core) has none to read, and its
    // soak would fail closed after the patch is on: refused before.
    if policy.gates.soak_s > 0.0 && sw.host_cables == 0 {
        return Err(
            "blocked: no host is cabled to it, so its links' errors cannot be read for the soak gate (switch counters are not read yet); set soak_s = 0 or apply this tier by hand".into(),
        );
    }
    let db = match &sw.db {
        Some(Ok(db)) => db,
        Some(Err(e)) => return Err(format!("blocked: {e}")),
        None => return Err(format!("blocked: {} was not read", sw.source)),
    };
    let from = crate::config::switch_state(p, db);
    let to = match crate::config::switch_after(p, db) {
        Ok(t) => t,
        Err(e) => {
            return Err(format!(
                "blocked: {e} on its config_db ({}): the patch was rendered for other ports or tables",
                sw.source
            ));
        }
    };
    if from == to {
        return Err(format!("already on the configuration ({})", p.file));
    }
    Ok(PlannedNode {
        name: sw.name.clone(),
        reason: String::new(),
        nics: vec![NicUpgrade {
            nic: crate::config::SWITCH_UNIT.into(),
            model: format!("SONiC {}", p.tier),
            hca_type: None,
            board_id: None,
            pci: None,
            from,
            to,
            image: c.dir.clone(),
            netdev: None,
            tier: Some(p.tier.clone()),
        }],
    })
}

/// A tier's units as waves: one canary switch, then at most the `switch` limit's share
/// of the tier's `tier_size` switches per wave; with live gates, each wave's control
/// group is the tier's switches of later waves.
fn tier_waves(
    policy: &Policy,
    p: &crate::config::SwitchPatch,
    mut members: Vec<PlannedNode>,
    tier_size: usize,
    waves: &mut Vec<Wave>,
    notes: &mut Vec<String>,
) {
    let cap = policy.limits.cap(DomainKind::Switch, tier_size);
    let mut rest = members.split_off(1);
    let canary = members;
    let mut groups = vec![canary];
    while !rest.is_empty() {
        let tail = rest.split_off(cap.min(rest.len()));
        groups.push(std::mem::replace(&mut rest, tail));
    }
    let first = waves.len();
    let parts = groups.len();
    for (k, mut nodes) in groups.into_iter().enumerate() {
        let stage = if k == 0 {
            format!("{} canary", p.tier)
        } else {
            format!("{} switches", p.tier)
        };
        for n in &mut nodes {
            n.reason = if k == 0 {
                format!("canary of the {} tier: first {} switch", p.tier, p.tier)
            } else {
                format!(
                    "{} tier: at most {cap} of its {} switches per wave (switch limit {})",
                    p.tier,
                    tier_size,
                    pct(policy.limits.share(DomainKind::Switch))
                )
            };
        }
        waves.push(Wave {
            number: waves.len() + 1,
            stage,
            nodes,
            note: (k == 0).then(|| {
                format!(
                    "the {} tier's patch {} on {} switch(es) in {parts} wave(s), after every host",
                    p.tier, p.file, tier_size
                )
            }),
            control: Vec::new(),
        });
    }
    if policy.gates.live.is_some() {
        notes.push(format!(
            "wave {}: the {} tier's last switches have no unchanged switch of the tier left to compare with: its live gates pass without a comparison (their soak, audit and state still judge it)",
            waves.len(),
            p.tier
        ));
        // The tier's later switches, as many as the wave has.
        for i in first..waves.len() {
            let want = waves[i].nodes.len();
            let control: Vec<String> = waves[i + 1..]
                .iter()
                .flat_map(|w| &w.nodes)
                .map(|n| n.name.clone())
                .take(want)
                .collect();
            waves[i].control = control;
        }
    }
}

/// Fills each wave's control group: the later waves' nodes that share the most racks,
/// switches and jobs with the wave (rails are left out: every host is on every rail),
/// then by name, as many as the wave has nodes.
fn control_groups(fleet: &Fleet, policy: &Policy, waves: &mut [Wave]) -> Vec<String> {
    let mut notes = Vec::new();
    // A node with a NIC already on the target is partly changed: no control.
    let changed: BTreeSet<&str> = fleet
        .nodes
        .iter()
        .filter(|n| {
            n.nics.iter().any(|nic| match &policy.configuration {
                Some(c) => crate::config::state(&c.knobs, &nic.ecn).as_deref() == Some(c.target.as_str()),
                None => policy
                    .target_for(nic)
                    .is_some_and(|t| nic.fw.as_deref() == Some(t.target.as_str())),
            })
        })
        .map(|n| n.name.as_str())
        .collect();
    let domains: BTreeMap<&str, Vec<&Domain>> = fleet
        .nodes
        .iter()
        .map(|n| {
            (
                n.name.as_str(),
                n.domains.iter().filter(|d| d.kind != DomainKind::Rail).collect(),
            )
        })
        .collect();
    for i in 0..waves.len() {
        let mine: BTreeSet<&Domain> = waves[i]
            .nodes
            .iter()
            .flat_map(|n| domains.get(n.name.as_str()).into_iter().flatten().copied())
            .collect();
        let mut later: Vec<(usize, &str)> = waves[i + 1..]
            .iter()
            .flat_map(|w| &w.nodes)
            .map(|n| {
                let shared = domains
                    .get(n.name.as_str())
                    .map_or(0, |d| d.iter().filter(|d| mine.contains(*d)).count());
                (shared, n.name.as_str())
            })
            .filter(|(_, n)| !changed.contains(n))
            .collect();
        // Nodes sharing the most domains first; without any sharing one (no racks,
        // jobs or cabling known), the other later nodes, said in a note.
        later.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        if !later.is_empty() && later[0].0 == 0 {
            notes.push(format!(
                "wave {}: no later node shares a rack, switch or job with it; its control group is taken from other domains",
                waves[i].number
            ));
        }
        let want = waves[i].nodes.len();
        let control: Vec<String> = later.iter().take(want).map(|(_, n)| n.to_string()).collect();
        waves[i].control = control;
    }
    notes
}

impl Plan {
    /// Nodes to upgrade.
    pub fn upgrade_count(&self) -> usize {
        self.waves.iter().map(|w| w.nodes.len()).sum()
    }

    /// The wave a node is in.
    pub fn wave_of(&self, node: &str) -> Option<usize> {
        self.waves
            .iter()
            .find(|w| w.nodes.iter().any(|n| n.name == node))
            .map(|w| w.number)
    }

    /// The plan as text: summary, combinations, limits, then every wave's nodes with
    /// their reasons, then the skipped nodes.
    pub fn render_text(&self, policy: &Policy) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Rollout plan: {} node(s), {} to upgrade in {} wave(s), {} skipped",
            self.total_nodes,
            self.upgrade_count(),
            self.waves.len(),
            self.skipped.len()
        );
        let _ = writeln!(
            s,
            "Limits per wave: {}",
            DomainKind::ALL
                .iter()
                .map(|k| format!("{} {}", k.name(), pct(policy.limits.share(*k))))
                .collect::<Vec<_>>()
                .join(" · ")
        );
        if !self.combinations.is_empty() {
            let _ = writeln!(s, "\nModel / current firmware        target        nodes  canary");
            for c in &self.combinations {
                let _ = writeln!(
                    s,
                    "  {:<30} {:<13} {:>5}  {}",
                    format!("{} {}", c.model, c.from),
                    c.to,
                    c.nodes,
                    c.canary
                );
            }
        }
        for w in &self.waves {
            let _ = writeln!(
                s,
                "\nWave {} ({}): {} node(s){}",
                w.number,
                w.stage,
                w.nodes.len(),
                w.note.as_ref().map(|n| format!(" — {n}")).unwrap_or_default()
            );
            for n in &w.nodes {
                let nics: Vec<String> = n
                    .nics
                    .iter()
                    .map(|u| format!("{} {}→{}", u.nic, u.from, u.to))
                    .collect();
                let _ = writeln!(s, "  {:<12} {}  [{}]", n.name, n.reason, nics.join(", "));
            }
            if !w.control.is_empty() {
                let _ = writeln!(s, "  control group (live gates): {}", w.control.join(", "));
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(s, "\nSkipped:");
            for k in &self.skipped {
                let _ = writeln!(s, "  {:<12} {}", k.name, k.reason);
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\nNotes:");
            for n in &self.notes {
                let _ = writeln!(s, "  - {n}");
            }
        }
        s
    }
}
