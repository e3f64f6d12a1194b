//! Prometheus text exposition (format 0.0.4) and OpenMetrics 1.0 of a round.
//!
//! Rendered by hand rather than through a client library's registry: the metric set
//! changes every round (devices come and go, signals appear once there is a delta) and
//! the render has a 2 ms budget (issue 7), so the round's points are written directly,
//! grouped into families in first-seen order.

use std::fmt::Write as _;

use xirang_telemetry::spec::Kind;

use crate::collect::{Point, Round};

/// Content type of the Prometheus text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn escape_label(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn value(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Renders points; `openmetrics` selects OpenMetrics (counter families named without
/// `_total`, `# EOF` at the end).
pub fn render(points: &[&Point], openmetrics: bool) -> String {
    render_at(points, openmetrics, None)
}

/// Renders points stamped with the time they were sampled (`ts_ms`), so a scraper
/// computes rates over sampling times rather than over its own scrape times: the agent
/// samples on its own clock, and a value can be up to one interval old when scraped.
pub fn render_at(points: &[&Point], openmetrics: bool, ts_ms: Option<u64>) -> String {
    let mut out = String::with_capacity(points.len() * 96);
    // Text format: integer milliseconds; OpenMetrics: seconds.
    let stamp = ts_ms.map(|ms| {
        if openmetrics {
            format!("{}.{:03}", ms / 1000, ms % 1000)
        } else {
            ms.to_string()
        }
    });
    // Families in first-seen order, each with its samples.
    let mut order: Vec<&str> = Vec::new();
    let mut families: std::collections::HashMap<&str, Vec<&Point>> = std::collections::HashMap::new();
    for p in points {
        let name = p.metric.name.as_str();
        families
            .entry(name)
            .or_insert_with(|| {
                order.push(name);
                Vec::new()
            })
            .push(p);
    }
    for name in order {
        let samples = &families[name];
        let first = &samples[0].metric;
        let family = if openmetrics && first.kind == Kind::Counter {
            name.strip_suffix("_total").unwrap_or(name)
        } else {
            name
        };
        out.push_str("# HELP ");
        out.push_str(family);
        out.push(' ');
        escape_help(first.help, &mut out);
        out.push_str("\n# TYPE ");
        out.push_str(family);
        out.push_str(match first.kind {
            Kind::Counter => " counter\n",
            Kind::Gauge => " gauge\n",
        });
        for p in samples {
            out.push_str(name);
            if !p.metric.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in p.metric.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(k);
                    out.push_str("=\"");
                    escape_label(v, &mut out);
                    out.push('"');
                }
                out.push('}');
            }
            out.push(' ');
            value(p.value, &mut out);
            if let Some(ms) = &stamp {
                out.push(' ');
                out.push_str(ms);
            }
            out.push('\n');
        }
    }
    if openmetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Renders a round plus extra points (alerts, the agent's own health), unstamped.
pub fn render_round(round: &Round, extra: &[Point], openmetrics: bool) -> String {
    let all: Vec<&Point> = round.points.iter().chain(extra).collect();
    render(&all, openmetrics)
}

/// Renders a round's points stamped with its sampling time, then the extra points
/// (the agent's own figures, alerts) unstamped: they describe the agent now. The extra
/// points' names never collide with a round's, so the two parts are separate families.
pub fn render_round_stamped(round: &Round, extra: &[Point], openmetrics: bool) -> String {
    let pts: Vec<&Point> = round.points.iter().collect();
    let ex: Vec<&Point> = extra.iter().collect();
    let mut text = render_at(&pts, openmetrics, Some(round.ts_ns / 1_000_000));
    if openmetrics {
        // One document: drop the first part's `# EOF`; the second part ends with one.
        text.truncate(text.len() - "# EOF\n".len());
    }
    text.push_str(&render(&ex, openmetrics));
    text
}
