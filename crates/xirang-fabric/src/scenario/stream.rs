//! Long explicit flow lists read a piece at a time.
//!
//! The TOML parser builds a tree of spanned values for the whole document before serde
//! sees any of it: about 3 KB per flow of a `{ id = .., src = .., dst = .., bytes = ..,
//! start_us = .. }` line, 40 times the text (BENCHMARKS.md, "Scenario loading"). A
//! generated scenario of a million flows needed 3 GB to check. So a flow list written
//! one inline table per line (as generators and `scenario expand` write it) is cut out
//! of the document and parsed in pieces of [`CHUNK_LINES`] lines, each piece's tree freed
//! before the next; the rest of the document is parsed as before, with the list's lines
//! left blank so every line number stays the same.
//!
//! Only a list whose every line is an element (`{ ... }` or `{ ... },`), a comment or
//! blank is cut; anything else (a multi-line table, a string across lines) is parsed
//! whole. A piece that fails to parse sends the whole document to the ordinary parser,
//! so an error reads exactly as it would without the cut.

use std::ops::Range;

use serde::Deserialize;

use crate::workload::{FlowSpec, Workload};

use super::Scenario;

/// Lines of list elements parsed at once: a few MB of tree, and few enough pieces that
/// the per-piece cost vanishes.
const CHUNK_LINES: usize = 4096;
/// A list shorter than this is parsed with the document: cutting it saves nothing.
const MIN_ELEMENT_LINES: usize = 2 * CHUNK_LINES;

/// A `list = [ ... ]` of `[workloads.NAME.flows]`, by its element lines.
struct ListBody {
    workload: String,
    /// Element lines: the list's length when each holds one flow, as generators write.
    elements: usize,
    /// Byte range of the element lines (from the line after `list = [` to the start of
    /// the line holding the closing `]`).
    bytes: Range<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Piece {
    list: Vec<FlowSpec>,
}

/// The scenario, when `text` has long flow lists that could be read in pieces; `None`
/// when it has none, or when anything about them needs the whole-document parser.
pub(super) fn parse_in_pieces(text: &str) -> Option<Scenario> {
    let lists = long_lists(text);
    if lists.is_empty() {
        return None;
    }
    let mut rest = String::with_capacity(text.len());
    let mut at = 0;
    for l in &lists {
        rest.push_str(&text[at..l.bytes.start]);
        rest.extend(
            text[l.bytes.clone()]
                .bytes()
                .filter(|b| *b == b'\n')
                .map(|_| '\n'),
        );
        at = l.bytes.end;
    }
    rest.push_str(&text[at..]);
    let mut scenario: Scenario = crate::diag::parse_toml(&rest).ok()?;
    drop(rest);
    for l in &lists {
        let Some(Workload::Flows(f)) = scenario.workloads.get_mut(&l.workload) else {
            return None;
        };
        if !f.list.is_empty() {
            return None;
        }
        // Sized once: growing by doubling would hold up to twice the list at the end.
        f.list.reserve_exact(l.elements);
        let body = &text[l.bytes.clone()];
        let mut lines = body.split_inclusive('\n').peekable();
        let mut piece = String::new();
        while lines.peek().is_some() {
            piece.clear();
            piece.push_str("list = [\n");
            for line in lines.by_ref().take(CHUNK_LINES) {
                piece.push_str(line);
            }
            piece.push_str("\n]\n");
            let p: Piece = crate::diag::parse_toml(&piece).ok()?;
            f.list.extend(p.list);
        }
    }
    Some(scenario)
}

/// The long flow lists of `text` that may be cut out, in order.
fn long_lists(text: &str) -> Vec<ListBody> {
    let mut out = Vec::new();
    let mut table: Option<&str> = None;
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        offset += line.len();
        let t = line.trim();
        if t.starts_with('[') {
            table = flows_table(t);
            continue;
        }
        let Some(name) = table else { continue };
        if t.split_whitespace().collect::<String>() != "list=[" {
            continue;
        }
        let body_start = offset;
        let mut elements = 0usize;
        let mut end = None;
        // An element without its comma must be the list's last: pieces parsed apart
        // would not see a missing comma between them.
        let mut open_end = false;
        for line in lines.by_ref() {
            let line_start = offset;
            offset += line.len();
            let t = line.trim();
            if t == "]" {
                end = Some(line_start);
                break;
            }
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if t.starts_with('{') && (t.ends_with('}') || t.ends_with("},")) && !open_end {
                elements += 1;
                open_end = t.ends_with('}');
            } else {
                break;
            }
        }
        table = None;
        if let Some(end) = end
            && elements >= MIN_ELEMENT_LINES
        {
            out.push(ListBody {
                workload: name.to_string(),
                elements,
                bytes: body_start..end,
            });
        }
    }
    out
}

/// `NAME` of a `[workloads.NAME.flows]` header (a bare key), else `None`.
fn flows_table(header: &str) -> Option<&str> {
    let name = header.strip_prefix("[workloads.")?.strip_suffix(".flows]")?;
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        .then_some(name)
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(n: usize, tail: &str) -> String {
        let mut s = String::from(
            "name = \"s\"\n[topology.leaf_spine]\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n\
             host_rate_gbps = 100\nfabric_rate_gbps = 100\n\n[workloads.w.flows]\nclass = \"training\"\nlist = [\n",
        );
        for i in 0..n {
            s.push_str(&format!(
                "  {{ id = \"f{i}\", src = \"h{}\", dst = \"h{}\", bytes = {} }},\n",
                i % 4,
                (i + 1) % 4,
                1000 + i
            ));
            if i % 1000 == 0 {
                s.push_str("  # a comment\n\n");
            }
        }
        s.push_str("]\n");
        s.push_str(tail);
        s
    }

    #[test]
    fn a_long_list_read_in_pieces_equals_the_whole_parse() {
        let text = scenario(MIN_ELEMENT_LINES * 2 + 17, "[run]\nseed = 7\n");
        let whole: Scenario = crate::diag::parse_toml(&text).unwrap();
        let pieces = parse_in_pieces(&text).expect("cut");
        assert_eq!(pieces, whole);
    }

    #[test]
    fn short_or_irregular_lists_are_left_to_the_whole_parse() {
        assert!(parse_in_pieces(&scenario(10, "")).is_none());
        // An element across two lines.
        let text = scenario(MIN_ELEMENT_LINES + 1, "").replacen("bytes = 1000 },", "bytes = 1000\n },", 1);
        assert!(parse_in_pieces(&text).is_none());
        // A comma missing between two elements, wherever the pieces are cut.
        let text = scenario(MIN_ELEMENT_LINES + 1, "").replacen("bytes = 5096 },", "bytes = 5096 }", 1);
        assert!(parse_in_pieces(&text).is_none());
        assert!(crate::diag::parse_toml::<Scenario>(&text).is_err());
        // A bad value inside the list: the whole parse reports it.
        let text = scenario(MIN_ELEMENT_LINES + 1, "").replacen("bytes = 1005 }", "bytes = -1 }", 1);
        assert!(parse_in_pieces(&text).is_none());
    }
}
