//! The NIC layout comparison as `nccl advise` and `tune` print it.

use indicatif::{ProgressBar, ProgressStyle};
use xirang_fabric::Loaded;
use xirang_tune::layout::{Figures, LayoutAdvice, compare};

use crate::cmd::table;

/// A command's JSON result with the layout comparison after its own fields (`nic_layout`,
/// absent when the scenario did not ask), keeping the result's field order.
#[derive(serde::Serialize)]
pub(crate) struct WithLayout<'a, T: serde::Serialize> {
    #[serde(flatten)]
    pub(crate) result: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nic_layout: Option<&'a LayoutAdvice>,
}

/// Healthy runs per layout: the scenario's seed and the next two.
const SEEDS: u64 = 3;

/// Compares the layouts when the scenario asks (its host template sets `aggregate`). A
/// comparison that cannot be made is a warning on stderr, not a failure: the command's own
/// results (NCCL advice, a finished tune) stand without it.
pub(crate) fn if_asked(loaded: &Loaded, quiet: bool) -> Option<LayoutAdvice> {
    let asked = loaded
        .scenario
        .topology
        .host()
        .is_some_and(|h| h.aggregate.is_some());
    if !asked {
        return None;
    }
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} NIC layout: {msg} [{elapsed}]").expect("valid template"),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    };
    let seed = loaded.scenario.run.seed;
    let seeds: Vec<u64> = (0..SEEDS).map(|i| seed.wrapping_add(i)).collect();
    let advice = compare(loaded, &seeds, &mut |m| bar.set_message(m.to_string()));
    bar.finish_and_clear();
    match advice {
        Ok(a) => Some(a),
        Err(e) => {
            eprintln!("warning: NIC layout not compared: {e}");
            None
        }
    }
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "did not finish".to_string(), |v| format!("{v:.1}"))
}

fn down_cell(f: &Figures) -> String {
    match &f.member_down_skipped {
        Some(why) => why.clone(),
        None => cell(f.member_down),
    }
}

/// The comparison as a table with the verdicts under it.
pub(crate) fn render(a: &LayoutAdvice) -> String {
    let mut t = table(&[
        "class",
        "metric",
        "independent",
        "bonded",
        "independent, member down",
        "bonded, member down",
        "recommended",
    ]);
    for c in &a.classes {
        t.add_row(vec![
            c.class.clone(),
            c.metric.label().to_string(),
            cell(c.independent.healthy),
            cell(c.lag.healthy),
            down_cell(&c.independent),
            down_cell(&c.lag),
            c.winner.as_str().to_string(),
        ]);
    }
    let seeds: Vec<String> = a.seeds.iter().map(u64::to_string).collect();
    let mut s = format!(
        "NIC layout: {} ports per host, independent or in bonds of {} (simulated, mean of seeds {}; member down: the port of one of the class's endpoints, from the start, the class alone):\n{t}\n",
        a.ports_per_host,
        a.bond_ports,
        seeds.join(", ")
    );
    for c in &a.classes {
        s.push_str(&format!("  {}: {}, {}\n", c.class, c.winner.as_str(), c.reason));
    }
    s
}

/// Comment lines for an environment or recommendation file.
pub(crate) fn comment(a: &LayoutAdvice) -> String {
    let mut s = format!(
        "# NIC layout, simulated both ways ({} ports per host; bonds of {}):\n",
        a.ports_per_host, a.bond_ports
    );
    for c in &a.classes {
        s.push_str(&format!("#   {}: {}, {}\n", c.class, c.winner.as_str(), c.reason));
    }
    s
}
