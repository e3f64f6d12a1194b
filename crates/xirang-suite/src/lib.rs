//! The fault-injection suite: every diagnosis rule proven on faults injected in the
//! simulator, which emits the counters real hardware exposes. Each case is a scenario
//! (one fabric, one workload) with zero, one or two faults at different places and
//! loads; the run's sampled counters go through the same rules as production telemetry
//! (`xirang_diagnose::window::diagnose_window`), and the top findings are scored
//! against what was injected.
//!
//! The cases are data: `cases/cases.toml` lists them (the faults as scenario files
//! spell them, with the class and entity the diagnosis must name) and `cases/loads/`
//! holds the scenario fragments their traffic is made of. Both are compiled into the
//! binary, so `xirang diagnose suite` runs anywhere.
//!
//! This crate, not `xirang-diagnose`, depends on the simulator: the rules stay a pure
//! function of telemetry windows and logs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xirang_diagnose::finding::{Class, Severity};
use xirang_diagnose::paths::{FlowPath, VOTE_SOURCE};
use xirang_diagnose::source::{add_links, window_from_samples};
use xirang_diagnose::window::diagnose_window;
use xirang_fabric::scenario::Scenario;

/// Simulated time of every case, µs: the healthy workloads end in under 1 ms.
const RUN_END_US: u32 = 3_000;

/// Counter sampling interval of every case, µs.
const SAMPLE_INTERVAL_US: u32 = 20;

/// The cases file, as compiled in.
pub const CASES_FILE: &str = "cases/cases.toml";

const CASES: &str = include_str!("../cases/cases.toml");

/// The scenario fragments `[loads]` may name, as compiled in (a test checks that this
/// table and `cases/loads/` hold the same files).
pub const LOAD_FRAGMENTS: &[(&str, &str)] = &[
    ("base.toml", include_str!("../cases/loads/base.toml")),
    ("incast.toml", include_str!("../cases/loads/incast.toml")),
    (
        "shallow-buffer.toml",
        include_str!("../cases/loads/shallow-buffer.toml"),
    ),
    ("rail.toml", include_str!("../cases/loads/rail.toml")),
    ("wide.toml", include_str!("../cases/loads/wide.toml")),
    ("wide-far.toml", include_str!("../cases/loads/wide-far.toml")),
];

/// A cases file that does not say what the suite expects.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// Not TOML of the expected shape (the message has the line and key).
    #[error("{file}: {source}")]
    Parse {
        /// The file.
        file: String,
        /// What the parser said.
        source: toml::de::Error,
    },
    /// A case that names something the file does not define.
    #[error("{file}: case `{case}`: {what}")]
    Case {
        /// The file.
        file: String,
        /// The case's name.
        case: String,
        /// What is wrong.
        what: String,
    },
    /// A case whose scenario does not load, or whose run fails a check.
    #[error("{case}: {what}")]
    Run {
        /// The case's name.
        case: String,
        /// What failed.
        what: String,
    },
}

/// What a case injects: the class and entity diagnosis should name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Injected {
    /// The fault's kind, as scenarios spell it.
    pub kind: String,
    /// `[[faults]]` TOML of the fault.
    pub toml: String,
    /// Class diagnosis should say.
    pub class: Class,
    /// Entity diagnosis should name.
    pub entity: String,
    /// The other end of the link, for link faults that both ends report (either name
    /// locates the link).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

impl Injected {
    fn names(&self, class: Class, entity: &str) -> bool {
        class == self.class && (entity == self.entity || self.peer.as_deref() == Some(entity))
    }
}

/// One case.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// Name.
    pub name: String,
    /// Run seed.
    pub seed: u64,
    /// Faults (empty: a healthy run).
    pub faults: Vec<Injected>,
    /// The traffic, as `[loads]` names it.
    pub load: String,
    /// The scenario fragments of the load, concatenated.
    #[serde(skip)]
    load_toml: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    loads: BTreeMap<String, Vec<String>>,
    case: Vec<CaseEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseEntry {
    name: String,
    load: String,
    seed: u64,
    #[serde(default)]
    faults: Vec<FaultEntry>,
}

#[derive(Deserialize)]
struct FaultEntry {
    expect: Expect,
    /// The scenario's `[[faults]]` keys, validated by the scenario loader.
    #[serde(flatten)]
    fault: toml::Table,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    class: Class,
    entity: String,
    #[serde(default)]
    peer: Option<String>,
}

/// Every case of the suite, from the compiled-in cases file.
pub fn cases() -> Result<Vec<Case>, SuiteError> {
    parse_cases(CASES_FILE, CASES, |name| {
        LOAD_FRAGMENTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| *text)
    })
}

/// Parses a cases file; `fragment` gives the text of a load fragment by file name.
pub fn parse_cases<'a>(
    file: &str,
    text: &str,
    fragment: impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<Case>, SuiteError> {
    let parsed: CasesFile = toml::from_str(text).map_err(|source| SuiteError::Parse {
        file: file.to_string(),
        source,
    })?;
    let case_error = |case: &str, what: String| SuiteError::Case {
        file: file.to_string(),
        case: case.to_string(),
        what,
    };
    let mut names = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(parsed.case.len());
    for c in parsed.case {
        if !names.insert(c.name.clone()) {
            return Err(case_error(&c.name, "a second case of this name".into()));
        }
        let parts = parsed.loads.get(&c.load).ok_or_else(|| {
            case_error(
                &c.name,
                format!(
                    "load `{}` is not in [loads] (expected one of: {})",
                    c.load,
                    parsed.loads.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        let mut load_toml = String::new();
        for p in parts {
            let t = fragment(p).ok_or_else(|| {
                case_error(
                    &c.name,
                    format!("load `{}` names `{p}`, which is not in loads/", c.load),
                )
            })?;
            load_toml.push_str(t);
            load_toml.push('\n');
        }
        let mut faults = Vec::with_capacity(c.faults.len());
        for f in c.faults {
            let kind = f
                .fault
                .get("kind")
                .and_then(|k| k.as_str())
                .ok_or_else(|| case_error(&c.name, "a fault without a `kind` string".into()))?
                .to_string();
            let body =
                toml::to_string(&f.fault).map_err(|e| case_error(&c.name, format!("fault `{kind}`: {e}")))?;
            faults.push(Injected {
                kind,
                toml: format!("[[faults]]\n{body}"),
                class: f.expect.class,
                entity: f.expect.entity,
                peer: f.expect.peer,
            });
        }
        out.push(Case {
            name: c.name,
            seed: c.seed,
            faults,
            load: c.load,
            load_toml,
        });
    }
    Ok(out)
}

impl Case {
    /// The scenario the case runs: its load, the run settings and its faults.
    pub fn scenario_toml(&self) -> String {
        // The run stops at 3 ms: a flow whose tail was lost on a down link waits for the
        // 4.3 s ACK timeout (NCCL_IB_TIMEOUT 20), which would only lengthen the window.
        let mut text = format!(
            "{}\n[run]\nseed = {}\nsample_interval_us = {SAMPLE_INTERVAL_US}\nend_us = {RUN_END_US}\n",
            self.load_toml, self.seed
        );
        for f in &self.faults {
            text.push('\n');
            text.push_str(&f.toml);
        }
        text
    }
}

/// How a case went.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// Injected (class, entity) pairs.
    pub injected: Vec<(Class, String)>,
    /// Injected fault kinds.
    pub kinds: Vec<String>,
    /// The findings (rule, class, entity, severity), ranked.
    pub found: Vec<(String, Class, String, Severity)>,
    /// Top-1 class and entity match an injected fault (healthy: no finding above low).
    pub correct: bool,
    /// The finding the degraded flows' path votes joined (corroborating a counter
    /// finding, or `PATH-VOTE` on its own), and whether it names an injected fault.
    pub votes: Option<(String, bool)>,
}

/// Runs one case through the simulator and the rules.
pub fn run_case(c: &Case) -> Result<CaseResult, SuiteError> {
    let fail = |what: String| SuiteError::Run {
        case: c.name.clone(),
        what,
    };
    let text = c.scenario_toml();
    let path = Path::new("suite.toml");
    let loaded = Scenario::parse(&text, path)
        .and_then(|s| s.build(path, Path::new("."), Some(&text)))
        .map_err(|e| fail(e.to_string()))?;
    let r = xirang_sim::simulate(&loaded, &xirang_sim::options(&loaded), &mut |_| {});
    r.check_conservation()
        .map_err(|e| fail(format!("conservation: {e}")))?;
    let samples = r
        .counter_series
        .iter()
        .map(|(t, cv)| ((*t / xirang_sim::time::PS_PER_US) as i64, cv));
    let mut w = window_from_samples(format!("sim {}", c.name), samples);
    // What LLDP and the inventory give in production: the cabling and each port's
    // nominal rate, here from the fabric model.
    add_links(&mut w, &xirang_sim::output::links_csv(&loaded.fabric))
        .map_err(|e| fail(format!("links: {e}")))?;
    // What probes of the flows' own paths give in production (R-Pingmesh's service
    // tracing): each flow's path and how much it slowed.
    w.flows = r
        .flows
        .iter()
        .filter(|f| !f.nvlink && !f.path.is_empty())
        .map(|f| FlowPath {
            src: f.src.clone(),
            dst: f.dst.clone(),
            path: f.path.clone(),
            slowdown: f.slowdown(),
        })
        .collect();
    let findings = diagnose_window(&w);
    let found: Vec<(String, Class, String, Severity)> = findings
        .iter()
        .map(|f| (f.rule.to_string(), f.class, f.entity.clone(), f.severity))
        .collect();
    let injected: Vec<(Class, String)> = c.faults.iter().map(|f| (f.class, f.entity.clone())).collect();
    let correct = if injected.is_empty() {
        findings.iter().all(|f| f.severity == Severity::Low)
    } else {
        // Top-1 names an injected fault, and every injected fault is among the findings.
        findings
            .first()
            .is_some_and(|f| c.faults.iter().any(|i| i.names(f.class, &f.entity)))
            && c.faults
                .iter()
                .all(|i| findings.iter().any(|f| i.names(f.class, &f.entity)))
    };
    let votes = findings
        .iter()
        .find(|f| f.evidence.iter().any(|e| e.source == VOTE_SOURCE))
        .map(|f| {
            let hit = c.faults.iter().any(|i| {
                i.names(f.class, &f.entity)
                    || f.entity
                        .split(" -> ")
                        .any(|e| i.entity == e || i.peer.as_deref() == Some(e))
            });
            (format!("{} {}", f.rule, f.entity), hit)
        });
    Ok(CaseResult {
        votes,
        name: c.name.clone(),
        injected,
        kinds: c.faults.iter().map(|f| f.kind.clone()).collect(),
        found,
        correct,
    })
}

/// Share of faulty runs whose top finding must name the fault (issue 9, acceptance 1).
pub const MIN_ACCURACY: f64 = 0.95;

/// The suite passes: at least [`MIN_ACCURACY`] of the faulty runs located, and every
/// healthy run without a finding above low severity.
pub fn passed(results: &[CaseResult]) -> bool {
    let faulty = results.iter().filter(|r| !r.injected.is_empty()).count();
    let located = results
        .iter()
        .filter(|r| !r.injected.is_empty() && r.correct)
        .count();
    let healthy_clean = results
        .iter()
        .filter(|r| r.injected.is_empty())
        .all(|r| r.correct);
    located as f64 >= MIN_ACCURACY * faulty as f64 && healthy_clean
}

/// The suite's results as the markdown VALIDATION.md holds: the confusion matrix of
/// injected class against top-1 diagnosed class, accuracy, and every case.
pub fn render_markdown(results: &[CaseResult]) -> String {
    let label = |c: Option<Class>| c.map(|c| c.name()).unwrap_or("none (healthy)");
    let mut matrix: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut rows: Vec<&str> = Vec::new();
    let mut cols: Vec<&str> = Vec::new();
    let row_names: Vec<String> = results
        .iter()
        .map(|r| match (r.kinds.as_slice(), r.injected.as_slice()) {
            ([], _) => label(None).to_string(),
            ([k], [(c, _)]) => format!("{k} ({})", c.name()),
            _ => "two faults".to_string(),
        })
        .collect();
    for (r, injected) in results.iter().zip(&row_names) {
        let injected = injected.as_str();
        let got = label(r.found.first().map(|x| x.1));
        *matrix.entry((injected, got)).or_insert(0) += 1;
        if !rows.contains(&injected) {
            rows.push(injected);
        }
        if !cols.contains(&got) {
            cols.push(got);
        }
    }
    // Columns in the classes' own order, "none" last.
    let order = [
        Class::Link,
        Class::Nic,
        Class::SwitchPort,
        Class::Switch,
        Class::HostConfig,
        Class::AppConfig,
    ];
    cols.sort_by_key(|c| order.iter().position(|o| o.name() == *c).unwrap_or(order.len()));
    let mut s = String::new();
    let _ = writeln!(s, "| injected \\ top-1 diagnosed | {} |", cols.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(cols.len()));
    for r in &rows {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| matrix.get(&(*r, *c)).copied().unwrap_or(0).to_string())
            .collect();
        let _ = writeln!(s, "| {r} | {} |", cells.join(" | "));
    }
    let faulty: Vec<&CaseResult> = results.iter().filter(|r| !r.injected.is_empty()).collect();
    let ok = faulty.iter().filter(|r| r.correct).count();
    let healthy_ok = results
        .iter()
        .filter(|r| r.injected.is_empty() && r.correct)
        .count();
    let _ = writeln!(
        s,
        "\nTop-1 class and location correct in {ok} of {} faulty runs ({:.0}%); {healthy_ok} of {} healthy runs without a finding above low severity.\n",
        faulty.len(),
        100.0 * ok as f64 / faulty.len().max(1) as f64,
        results.len() - faulty.len()
    );
    let voted: Vec<&CaseResult> = results.iter().filter(|r| r.votes.is_some()).collect();
    let _ = writeln!(
        s,
        "Path votes of the degraded flows pointed at a place in {} runs: an injected fault's in {}, elsewhere in {} (a hot spot or a fault's consequence; such a vote alone is a low finding).\n",
        voted.len(),
        voted
            .iter()
            .filter(|r| r.votes.as_ref().is_some_and(|v| v.1))
            .count(),
        voted
            .iter()
            .filter(|r| r.votes.as_ref().is_some_and(|v| !v.1))
            .count()
    );
    let _ = writeln!(s, "| case | injected | top findings | path votes | correct |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for r in results {
        let inj: Vec<String> = r
            .injected
            .iter()
            .map(|(c, e)| format!("{} {e}", c.name()))
            .collect();
        let got: Vec<String> = r
            .found
            .iter()
            .take(3)
            .map(|(rule, _, e, sev)| format!("{rule} {e} ({sev:?})"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.name,
            if inj.is_empty() {
                "-".into()
            } else {
                inj.join(", ")
            },
            if got.is_empty() {
                "-".into()
            } else {
                got.join(", ")
            },
            r.votes.as_ref().map_or("-".to_string(), |v| v.0.clone()),
            if r.correct { "yes" } else { "**no**" }
        );
    }
    s
}
