//! The recommendation in the forms operators apply: a scenario to load back, a script for
//! the mlx5 DCQCN knobs in sysfs, `mlnx_qos` commands, SONiC config_db patches with a
//! WRED profile per switch tier, and an NCCL environment file. Each starts with what it
//! changes and how to undo it; scripts change nothing unless given `--apply`.
//!
//! Names and units: docs/reference/congestion-control.md §1.5 (sysfs `roce_rp/` and
//! `roce_np/` files), docs/reference/switch-config.md (WRED_PROFILE, QUEUE, `mlnx_qos`, TOS
//! arithmetic), docs/reference/collectives-and-nccl.md §5 (NCCL variables).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;
use xirang_fabric::Loaded;
use xirang_fabric::config::{CcAlgorithm, FabricConfig};
use xirang_fabric::model::Tier;
use xirang_fabric::tune::ParamValue;

use crate::search::TuneResult;

/// One file to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// File name.
    pub name: String,
    /// Content.
    pub text: String,
    /// Mark executable.
    pub executable: bool,
}

/// What every rendering needs to know about the tune.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The tuned scenario.
    pub loaded: &'a Loaded,
    /// The scenario file it came from (for the roll-back note).
    pub source: &'a str,
    /// The recommended configuration.
    pub config: &'a FabricConfig,
    /// Parameter values that differ from the vendor's: (name, vendor, recommended).
    pub changes: Vec<(String, String, String)>,
    /// One line on the measured gain.
    pub verdict: String,
}

/// How many of `values` differ from `vendor`.
fn changes_len(values: &[(String, ParamValue)], vendor: &BTreeMap<&str, &ParamValue>) -> usize {
    values
        .iter()
        .filter(|(n, v)| vendor.get(n.as_str()).is_some_and(|old| *old != v))
        .count()
}

impl<'a> Context<'a> {
    /// The context of a tune result.
    pub fn of(loaded: &'a Loaded, source: &'a str, r: &'a TuneResult) -> Context<'a> {
        let vendor: BTreeMap<&str, &ParamValue> =
            r.vendor_values.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let changes = r
            .recommendation
            .iter()
            .filter_map(|(n, v)| {
                let old = vendor.get(n.as_str())?;
                (*old != v).then(|| (n.clone(), old.to_string(), v.to_string()))
            })
            .collect();
        let verdict = match (&r.verdict, r.gain) {
            (crate::search::Verdict::Recommended, Some(g)) => format!(
                "{} setting(s) of candidate {}, each significantly worse to revert; {} better than the vendor defaults on {} held-out seeds (95 % interval), every guardrail kept",
                changes_len(&r.recommendation, &vendor),
                r.best.map_or("?".to_string(), |b| b.to_string()),
                g.percent(),
                g.n
            ),
            (crate::search::Verdict::NoChangeEarnsItsPlace, _) => {
                "no significant gain: none of the best candidate's changes earns its place within the guardrails: these are the vendor defaults".to_string()
            }
            (crate::search::Verdict::NoSignificantGain, g) => format!(
                "no significant gain over the vendor defaults ({} on the held-out seeds): these are the vendor defaults",
                g.map_or("?".to_string(), |g| g.percent())
            ),
            (crate::search::Verdict::GuardrailBroken { class }, _) => format!(
                "the tuned candidate broke the {class} guardrail on the held-out seeds: these are the vendor defaults"
            ),
            _ => "no candidate beat the vendor defaults within the constraints and guardrails: these are the vendor defaults".to_string(),
        };
        let verdict = match (&r.verdict, r.vendor_violations()) {
            (crate::search::Verdict::Recommended, _) | (_, None) => verdict,
            (_, Some((k, n, first))) => format!(
                "{verdict}; WARNING: the vendor defaults themselves break a constraint on {k} of {n} held-out seeds ({first})"
            ),
        };
        Context {
            loaded,
            source,
            config: &r.config,
            changes,
            verdict,
        }
    }

    fn header(&self, comment: &str, what: &str) -> String {
        let mut s = String::new();
        let name = &self.loaded.scenario.name;
        let _ = writeln!(
            s,
            "{comment} Xirang tune recommendation for scenario `{name}`: {what}"
        );
        let _ = writeln!(s, "{comment} {}", self.verdict);
        s
    }

    /// Classes on each algorithm, by priority.
    fn classes_on(&self, a: CcAlgorithm) -> Vec<(String, u8)> {
        let used: Vec<String> = self
            .loaded
            .scenario
            .workloads
            .values()
            .map(|w| w.class().to_string())
            .collect();
        self.config
            .classes
            .iter()
            .filter(|(n, c)| c.cc == a && used.contains(n))
            .map(|(n, c)| (n.clone(), c.priority))
            .collect()
    }
}

/// Every artifact.
pub fn all(cx: &Context<'_>) -> Vec<Artifact> {
    let mut v = vec![recommendation_toml(cx), mlx5_script(cx), mlnx_qos_script(cx)];
    v.extend(nccl_env(cx));
    v.extend(nccl_tuner_csv(cx));
    v.extend(sonic(cx));
    v
}

/// The collective advisor's environment file for the tuned fabric, with the tuned QPs per
/// connection (the advisor's own choice follows the ECMP width; the tune measured this
/// one). `None` when the scenario has no hosts with NICs to advise on.
pub fn nccl_env(cx: &Context<'_>) -> Option<Artifact> {
    let mut loaded = cx.loaded.clone();
    loaded.scenario.config = cx.config.clone();
    let mut advice = xirang_collective::advise::advise(&loaded).ok()?;
    let qps = cx.config.transport.qps_per_connection;
    if let Some(st) = advice
        .settings
        .iter_mut()
        .find(|st| st.name == "NCCL_IB_QPS_PER_CONNECTION")
    {
        st.value = Some(qps.to_string());
        st.why = format!(
            "{qps} QPs per connection: the tuned value (transport.qps_per_connection), judged in the simulator"
        );
    }
    let mut text = cx.header(
        "#",
        "NCCL environment (from `xirang nccl advise` on the tuned fabric)",
    );
    text.push_str(
        "# Roll back: unset these variables (or do not source this file).
",
    );
    text.push_str(&advice.env_file(&cx.loaded.scenario.name));
    text.push_str(
        "\n# NCCL's example tuner plugin (NVIDIA/nccl ext-tuner/example, built as\n# libnccl-tuner-example.so and found through LD_LIBRARY_PATH; NCCL loads\n# libnccl-tuner-<name>.so for NCCL_TUNER_PLUGIN=<name>, as it does network plugins)\n# takes the algorithm and protocol per collective and size from nccl-tuner.csv.\n# Give the file's path as the job sees it.\nNCCL_TUNER_PLUGIN=example\nNCCL_TUNER_CONFIG_FILE=./nccl-tuner.csv\n",
    );
    Some(Artifact {
        name: "nccl.env".into(),
        text,
        executable: false,
    })
}

/// `nccl-tuner.csv` for NCCL's example tuner plugin: the cost model's algorithm and
/// protocol per collective and size range on the tuned fabric's collective hosts.
pub fn nccl_tuner_csv(cx: &Context<'_>) -> Option<Artifact> {
    let mut loaded = cx.loaded.clone();
    loaded.scenario.config = cx.config.clone();
    let advice = xirang_collective::advise::advise(&loaded).ok()?;
    let p = advice.platform;
    let rows = xirang_collective::tuner_csv::rows(&p);
    let header: Vec<String> = cx
        .header("", "NCCL tuner plugin configuration (NCCL_TUNER_CONFIG_FILE)")
        .lines()
        .map(|l| l.trim_start().to_string())
        .chain([
            format!(
                "The cost model's fastest algorithm and protocol per size range for {} node(s) x {} GPU(s) ({} ranks), network {:.1} GB/s per node; channels left to NCCL.",
                p.nodes,
                p.gpus_per_node,
                p.nodes * p.gpus_per_node,
                p.node_net_gbs
            ),
            "Lines match exactly this node and rank count; other communicators keep NCCL's own choice.".to_string(),
        ])
        .collect();
    Some(Artifact {
        name: "nccl-tuner.csv".into(),
        text: xirang_collective::tuner_csv::render(&header, &rows),
        executable: false,
    })
}

/// The scenario with the recommended configuration: `xirang sim` and `xirang tune` load it.
pub fn recommendation_toml(cx: &Context<'_>) -> Artifact {
    let mut s = cx.header("#", "the tuned configuration, as a scenario");
    s.push_str("#\n# Changes from the vendor defaults (setting: vendor -> recommended):\n");
    if cx.changes.is_empty() {
        s.push_str("#   none\n");
    }
    for (n, a, b) in &cx.changes {
        let _ = writeln!(s, "#   {n}: {a} -> {b}");
    }
    let _ = writeln!(
        s,
        "#\n# Load it back: `xirang sim recommendation.toml` or `xirang tune recommendation.toml`.\n# Roll back: nothing here touches a machine; the previous configuration is `{}`.\n",
        cx.source
    );
    let mut scenario = cx.loaded.scenario.clone();
    scenario.config = cx.config.clone();
    s.push_str(&scenario.to_toml());
    Artifact {
        name: "recommendation.toml".into(),
        text: s,
        executable: false,
    }
}

/// A POSIX shell script that sets the DCQCN knobs of mlx5 NICs through MLNX_OFED's sysfs.
pub fn mlx5_script(cx: &Context<'_>) -> Artifact {
    let dcqcn = cx.classes_on(CcAlgorithm::Dcqcn);
    let timely = cx.classes_on(CcAlgorithm::Timely);
    let mut s = String::from("#!/bin/sh\n");
    s.push_str(&cx.header(
        "#",
        "DCQCN settings for mlx5 NICs (sysfs of the MLNX_OFED driver)",
    ));
    s.push_str("#\n");
    // mlx5 keeps one DCQCN parameter set per port: the first DCQCN class (by name) with
    // the most weight gives it.
    let params = dcqcn
        .first()
        .map(|(n, _)| (n.clone(), cx.config.classes[n].dcqcn));
    match &params {
        Some((class, _)) => {
            let _ = writeln!(
                s,
                "# What it changes, on each interface given: /sys/class/net/IF/ecn/roce_rp/* and roce_np/*\n# (the DCQCN parameters of class `{class}`; mlx5 keeps one set per port), and\n# roce_rp/enable/P, roce_np/enable/P = 1 for the DCQCN classes' priorities: {}.",
                dcqcn
                    .iter()
                    .map(|(n, p)| format!("{p} ({n})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let others: Vec<&String> = dcqcn
                .iter()
                .skip(1)
                .filter(|(n, _)| cx.config.classes[n].dcqcn != cx.config.classes[class].dcqcn)
                .map(|(n, _)| n)
                .collect();
            if !others.is_empty() {
                let _ = writeln!(
                    s,
                    "# NOTE: classes {others:?} were tuned with other DCQCN parameters; a port has one set."
                );
            }
        }
        None => s.push_str("# No traffic class uses DCQCN in the recommendation: nothing to write.\n"),
    }
    for (n, p) in &timely {
        let _ = writeln!(
            s,
            "# NOTE: class `{n}` (priority {p}) was tuned with TIMELY, which mlx5 firmware does not\n#   implement; its priority is left as it is. Deploy it on a stack with RTT-based congestion\n#   control, or tune again with `classes.{n}.cc` fixed to dcqcn."
        );
    }
    for (n, p) in &cx.classes_on(CcAlgorithm::Hpcc) {
        let h = cx.config.classes[n].hpcc;
        let _ = writeln!(
            s,
            "# NOTE: class `{n}` (priority {p}) was tuned with HPCC (eta {}, maxStage {}, AI {} Mbit/s). HPCC\n#   needs in-band network telemetry from every switch on the path and a NIC congestion\n#   control that reads it; the DCQCN knobs written here do not configure it, and its\n#   priority is left as it is. Deploy it only where switches and NICs support INT-based\n#   HPCC, or tune again with `classes.{n}.cc` fixed to dcqcn.",
            h.eta, h.max_stage, h.ai_mbps
        );
    }
    for (n, p) in &cx.classes_on(CcAlgorithm::Dctcp) {
        let d = cx.config.classes[n].dctcp;
        let _ = writeln!(
            s,
            "# NOTE: class `{n}` (priority {p}) was tuned with DCTCP (g {}, AI {} Mbit/s), a host transport's\n#   window control on ECN echoes, which mlx5 firmware does not run; its priority is left as\n#   it is. The switches' step marking is in apply-sonic.sh; the hosts need a transport\n#   that implements DCTCP.",
            d.g, d.ai_mbps
        );
    }
    s.push_str(
        "#\n# Usage:  mlx5-congestion.sh IF...            dry run: prints every change, writes nothing\n#         mlx5-congestion.sh --apply IF...    writes; saves the previous values first\n#         mlx5-congestion.sh --rollback FILE  writes back the values saved in FILE\n# Roll back: --apply saves every value it replaces to mlx5-congestion.rollback (or\n# $XIRANG_ROLLBACK) before writing; run --rollback with that file. It refuses to overwrite\n# an existing rollback file, and refuses an interface without ecn/roce_rp and ecn/roce_np\n# (not an mlx5 physical function under MLNX_OFED).\n# The values take effect at once and last until reboot; mlxconfig makes them permanent.\n\n",
    );
    s.push_str("set -eu\nSYSFS=\"${XIRANG_SYSFS:-/sys}\"\nROLLBACK=\"${XIRANG_ROLLBACK:-mlx5-congestion.rollback}\"\n");
    // The rollback file's argument is a path, not an interface: only the other modes'
    // arguments are checked.
    s.push_str("if [ \"${1:-}\" != \"--rollback\" ]; then\n");
    s.push_str(VALID_IF);
    s.push_str("fi\n\n");
    s.push_str("# knob directory, file, value\nKNOBS='\n");
    if let Some((_, d)) = &params {
        for (k, value) in xirang_fabric::mlx5::values(d, cx.config.cnp.dscp, cx.config.cnp.priority) {
            let _ = writeln!(s, "{} {} {value}", k.dir.name(), k.file);
        }
        for (_, p) in &dcqcn {
            let _ = writeln!(s, "roce_rp enable/{p} 1");
            let _ = writeln!(s, "roce_np enable/{p} 1");
        }
    }
    s.push_str("'\n\n");
    s.push_str(MLX5_BODY);
    Artifact {
        name: "mlx5-congestion.sh".into(),
        text: s,
        executable: true,
    }
}

/// Interface names as `xirang_host::names` admits them (the kernel's dev_valid_name,
/// narrowed to letters, digits and `_ . - @ +`, no leading `-` or `.`, 1-15 bytes): an
/// argument from the operator, often pasted from `ls /sys/class/net`, becomes a path and
/// a tool's argument only when it fits. `LC_ALL=C` makes the bracket ranges and `${#}`
/// byte-wise in every shell.
const VALID_IF: &str = r#"LC_ALL=C
export LC_ALL
valid_if() {
    case $1 in
        ''|-*|.*|*[!A-Za-z0-9_.@+-]*) return 1 ;;
    esac
    [ "${#1}" -le 15 ]
}
first=${1:-}
for IF in "$@"; do
    if [ "$first" = --apply ]; then first=; continue; fi
    first=
    valid_if "$IF" || { printf 'error: %s is not an interface name (expected 1-15 letters, digits or _ . - @ +, not starting with - or .)\n' "$IF" | tr -c '[:print:]\n' '?' >&2; exit 2; }
done
"#;

/// The part of the mlx5 script that does not depend on the recommendation.
const MLX5_BODY: &str = r#"usage() {
    echo "usage: $0 [--apply] IF... | --rollback FILE" >&2
    exit 2
}

if [ "${1:-}" = "--rollback" ]; then
    [ $# -eq 2 ] || usage
    [ -r "$2" ] || { echo "error: cannot read rollback file $2" >&2; exit 2; }
    while IFS='	' read -r path value; do
        [ -n "$path" ] || continue
        # Only the knob files this script writes: a rollback file is data, not a list of
        # paths to overwrite anywhere.
        case $path in
            *..*) echo "error: $2: $path is not a knob path" >&2; exit 2 ;;
            "$SYSFS"/class/net/*/ecn/roce_rp/*|"$SYSFS"/class/net/*/ecn/roce_np/*) ;;
            *) echo "error: $2: $path is not under $SYSFS/class/net/IF/ecn" >&2; exit 2 ;;
        esac
        [ -w "$path" ] || { echo "error: $path is not writable" >&2; exit 1; }
        printf '%s\n' "$value" > "$path"
        echo "restored $path = $value"
    done < "$2"
    exit 0
fi

APPLY=0
if [ "${1:-}" = "--apply" ]; then
    APPLY=1
    shift
fi
[ $# -ge 1 ] || usage

# Check every interface and file before touching any.
for IF in "$@"; do
    for d in roce_rp roce_np; do
        [ -d "$SYSFS/class/net/$IF/ecn/$d" ] || {
            echo "error: $SYSFS/class/net/$IF/ecn/$d does not exist: $IF is not an mlx5 PF under MLNX_OFED" >&2
            exit 2
        }
    done
    while read -r dir file value; do
        [ -n "$dir" ] || continue
        [ -e "$SYSFS/class/net/$IF/ecn/$dir/$file" ] || {
            echo "error: $SYSFS/class/net/$IF/ecn/$dir/$file does not exist (older driver?)" >&2
            exit 2
        }
    done <<EOF
$KNOBS
EOF
done

if [ "$APPLY" = 1 ]; then
    [ ! -e "$ROLLBACK" ] || { echo "error: $ROLLBACK exists; move it away first (it may be the only copy of older values)" >&2; exit 2; }
    : > "$ROLLBACK"
fi
for IF in "$@"; do
    while read -r dir file value; do
        [ -n "$dir" ] || continue
        path="$SYSFS/class/net/$IF/ecn/$dir/$file"
        old=$(cat "$path")
        if [ "$APPLY" = 1 ]; then
            printf '%s\t%s\n' "$path" "$old" >> "$ROLLBACK"
            printf '%s\n' "$value" > "$path"
            echo "$IF $dir/$file: $old -> $value"
        else
            echo "$IF $dir/$file: $old -> $value (dry run)"
        fi
    done <<EOF
$KNOBS
EOF
done
[ "$APPLY" = 1 ] && echo "previous values saved to $ROLLBACK" || echo "dry run: nothing written; pass --apply to write"
"#;

/// `mlnx_qos` commands: DSCP trust, PFC on the lossless priorities, DSCP to priority.
pub fn mlnx_qos_script(cx: &Context<'_>) -> Artifact {
    let cfg = cx.config;
    let mut s = String::from("#!/bin/sh\n");
    s.push_str(&cx.header("#", "host QoS for RoCE with mlnx_qos (MLNX_OFED)"));
    let pfc: Vec<u8> = if cfg.pfc.enabled {
        cfg.pfc.priorities.clone()
    } else {
        Vec::new()
    };
    let bits: Vec<&str> = (0..8u8)
        .map(|p| if pfc.contains(&p) { "1" } else { "0" })
        .collect();
    let _ = writeln!(
        s,
        "#\n# What it changes, on each interface given: trust DSCP; PFC on priorities {:?} only\n# (--pfc {}); DSCP to priority for every traffic class and for CNPs. ECN (DCQCN) per\n# priority is in mlx5-congestion.sh.",
        pfc,
        bits.join(",")
    );
    s.push_str("#\n# Usage:  mlnx_qos.sh IF...          dry run: prints the commands\n#         mlnx_qos.sh --apply IF...  runs them, after saving `mlnx_qos -i IF` to mlnx_qos.before.IF\n# Roll back: mlnx_qos.before.IF holds the settings before; set them again with mlnx_qos\n# (--trust, --pfc, --dscp2prio set/del).\n\nset -eu\n");
    s.push_str(VALID_IF);
    s.push_str("APPLY=0\nif [ \"${1:-}\" = \"--apply\" ]; then APPLY=1; shift; fi\n[ $# -ge 1 ] || { echo \"usage: $0 [--apply] IF...\" >&2; exit 2; }\n");
    s.push_str("run() { if [ \"$APPLY\" = 1 ]; then echo \"+ $*\"; \"$@\"; else echo \"$*\"; fi; }\n");
    s.push_str(
        "for IF in \"$@\"; do\n    [ \"$APPLY\" = 1 ] && mlnx_qos -i \"$IF\" > \"mlnx_qos.before.$IF\"\n",
    );
    s.push_str("    run mlnx_qos -i \"$IF\" --trust dscp\n");
    let _ = writeln!(s, "    run mlnx_qos -i \"$IF\" --pfc {}", bits.join(","));
    for (name, c) in &cfg.classes {
        let _ = writeln!(
            s,
            "    run mlnx_qos -i \"$IF\" --dscp2prio set,{},{}   # class {name}: TOS {}",
            c.dscp,
            c.priority,
            u32::from(c.dscp) << 2
        );
    }
    let _ = writeln!(
        s,
        "    run mlnx_qos -i \"$IF\" --dscp2prio set,{},{}   # CNPs",
        cfg.cnp.dscp, cfg.cnp.priority
    );
    s.push_str("done\n");
    Artifact {
        name: "mlnx_qos.sh".into(),
        text: s,
        executable: true,
    }
}

/// SONiC's name of a switch port: Ethernet0, Ethernet4, ... (four lanes per port).
fn sonic_port(i: usize) -> String {
    format!("Ethernet{}", 4 * i)
}

/// Per switch tier a config_db JSON Patch (`config apply-patch`) with the tier's
/// WRED_PROFILE and its binding to the lossless queues of every port, and a script that
/// checkpoints, applies and says how to roll back.
pub fn sonic(cx: &Context<'_>) -> Vec<Artifact> {
    let cfg = cx.config;
    let fabric = &cx.loaded.fabric;
    let lossless: Vec<u8> = if cfg.pfc.enabled {
        cfg.pfc.priorities.clone()
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    let mut script = String::from("#!/bin/sh\n");
    script.push_str(&cx.header("#", "ECN/WRED on the switches (SONiC config_db patches)"));
    script.push_str("#\n# What it changes, per switch tier (run it on every switch of the tier):\n");
    let tiers: Vec<Tier> = fabric.tiers();
    for t in &tiers {
        let p = cfg.ecn.profile(*t);
        let ports = fabric
            .switches
            .iter()
            .filter(|s| s.tier == *t)
            .map(|s| s.ports.len())
            .max()
            .unwrap_or(0);
        let name = format!("XIRANG_{}", t.as_str().to_ascii_uppercase());
        // WRED_PROFILE values are strings; probability in whole percent.
        let pct = ((p.pmax * 100.0).round() as u64).clamp(1, 100).to_string();
        let mut profile = serde_json::Map::new();
        for color in ["green", "yellow", "red"] {
            profile.insert(format!("wred_{color}_enable"), json!("true"));
            profile.insert(format!("{color}_min_threshold"), json!(p.kmin_bytes.to_string()));
            profile.insert(format!("{color}_max_threshold"), json!(p.kmax_bytes.to_string()));
            profile.insert(format!("{color}_drop_probability"), json!(pct));
        }
        profile.insert(
            "ecn".into(),
            json!(if p.enabled { "ecn_all" } else { "ecn_none" }),
        );
        let mut ops = vec![json!({"op": "add", "path": format!("/WRED_PROFILE/{name}"), "value": profile})];
        for i in 0..ports {
            for q in &lossless {
                ops.push(json!({
                    "op": "add",
                    "path": format!("/QUEUE/{}|{q}/wred_profile", sonic_port(i)),
                    "value": name,
                }));
            }
        }
        let file = format!("sonic-{}.patch.json", t.as_str());
        let _ = writeln!(
            script,
            "#   {}: WRED_PROFILE {name} (Kmin {} B, Kmax {} B, Pmax {pct}%, ECN {}) on queues {:?} of\n#     Ethernet0..{} ({file})",
            t.as_str(),
            p.kmin_bytes,
            p.kmax_bytes,
            if p.enabled { "on" } else { "off" },
            lossless,
            sonic_port(ports.saturating_sub(1)),
        );
        out.push(Artifact {
            name: file,
            text: serde_json::to_string_pretty(&ops).expect("JSON") + "\n",
            executable: false,
        });
    }
    // The tier names a file here: only the tiers rendered.
    let tier_names: Vec<&str> = tiers.iter().map(|t| t.as_str()).collect();
    let tier_check = format!(
        "case $1 in\n    {}) ;;\n    *) echo \"error: unknown tier (expected one of {})\" >&2; exit 2 ;;\nesac\n",
        tier_names.join("|"),
        tier_names.join(", ")
    );
    script.push_str(
        &"#\n# Usage:  apply-sonic.sh TIER           dry run: prints the commands\n#         apply-sonic.sh --apply TIER   checkpoints the running config as xirang-before,\n#                                       then applies sonic-TIER.patch.json\n# Roll back: sudo config rollback xirang-before\n\nset -eu\nAPPLY=0\nif [ \"${1:-}\" = \"--apply\" ]; then APPLY=1; shift; fi\n[ $# -eq 1 ] || { echo \"usage: $0 [--apply] TIER\" >&2; exit 2; }\n{TIER_CHECK}PATCH=\"sonic-$1.patch.json\"\n[ -r \"$PATCH\" ] || { echo \"error: no $PATCH here\" >&2; exit 2; }\nrun() { if [ \"$APPLY\" = 1 ]; then echo \"+ $*\"; \"$@\"; else echo \"$*\"; fi; }\nrun sudo config checkpoint xirang-before\nrun sudo config apply-patch \"$PATCH\"\n[ \"$APPLY\" = 1 ] || echo \"dry run: nothing applied; pass --apply\"\n".replace("{TIER_CHECK}", &tier_check),
    );
    out.push(Artifact {
        name: "apply-sonic.sh".into(),
        text: script,
        executable: true,
    });
    out
}
