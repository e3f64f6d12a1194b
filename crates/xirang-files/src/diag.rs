//! Diagnostics for every input file: key paths, line lookup, "did you mean", and serde's
//! messages rewritten as "expected ..., found ...". Every TOML reader parses through
//! [`parse_toml`], so a type error reads the same in a scenario, a policy or a rule file.

use std::fmt;
use std::path::Path;

use serde::Serialize;

/// One segment of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A path into a scenario file, displayed as `topology.leaf_spine.hosts_per_leaf` or
/// `workloads.bg.flows.list[3].dst`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyPath(Vec<Seg>);

impl KeyPath {
    /// The document root.
    pub fn root() -> Self {
        KeyPath(Vec::new())
    }

    /// This path extended by a table key.
    pub fn key(&self, k: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.to_string()));
        p
    }

    /// This path extended by an array index.
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    /// Parses the display form back (used for paths reported by serde).
    pub fn parse(s: &str) -> Self {
        let mut p = KeyPath::root();
        for part in s.split('.').filter(|x| !x.is_empty() && *x != "?") {
            let (key, rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                p = p.key(key);
            }
            for idx in rest.split(['[', ']']).filter(|x| !x.is_empty()) {
                if let Ok(i) = idx.parse() {
                    p = p.index(i);
                }
            }
        }
        p
    }

    /// True for the document root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// Line (1-based) of the deepest element of this path found in `src`, if the text
    /// parses as TOML.
    pub fn line_in(&self, src: &str) -> Option<usize> {
        let doc = toml::de::DeTable::parse(src).ok()?;
        let whole = doc.span();
        let root = toml::de::DeValue::Table(doc.into_inner());
        Some(self.line_in_value(src, &root, whole))
    }

    /// [`KeyPath::line_in`] on a tree already built from `src`.
    fn line_in_value(&self, src: &str, root: &toml::de::DeValue<'_>, whole: std::ops::Range<usize>) -> usize {
        let mut span = whole;
        let mut cur = root;
        for seg in &self.0 {
            let next = match seg {
                Seg::Key(k) => cur.get(k.as_str()),
                Seg::Index(i) => cur.get(*i),
            };
            match next {
                Some(v) => {
                    span = v.span();
                    cur = v.get_ref();
                }
                None => break,
            }
        }
        line_of_offset(src, span.start)
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for s in &self.0 {
            match s {
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

impl Serialize for KeyPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// 1-based line of a byte offset.
pub fn line_of_offset(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Largest source whose lines [`Diagnostics::finish`] looks up: 32 MiB, a 400,000-flow
/// scenario, whose tree takes about 1.3 GB.
pub const LINE_LOOKUP_MAX_BYTES: usize = 32 << 20;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The scenario cannot be used.
    Error,
    /// The scenario works but probably not as meant.
    Warning,
}

/// A problem at a key path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Where.
    pub path: KeyPath,
    /// Line in the file, when known.
    pub line: Option<usize>,
    /// What was expected and what was found.
    pub message: String,
}

impl Diagnostic {
    /// `key.path: message`, or the message alone at the root: what a reader whose error
    /// type carries the file and line itself puts in its message.
    pub fn keyed(&self) -> String {
        if self.path.is_root() {
            self.message.clone()
        } else {
            format!("{}: {}", self.path, self.message)
        }
    }

    /// `file:line: key.path: message` (warnings say so).
    pub fn render(&self, file: &Path) -> String {
        let mut s = file.display().to_string();
        if let Some(l) = self.line {
            s.push_str(&format!(":{l}"));
        }
        s.push_str(": ");
        if self.severity == Severity::Warning {
            s.push_str("warning: ");
        }
        if !self.path.is_root() {
            s.push_str(&format!("{}: ", self.path));
        }
        s.push_str(&self.message);
        s
    }
}

/// A collection of diagnostics.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Records an error.
    pub fn error(&mut self, at: &KeyPath, message: String) {
        self.items.push(Diagnostic {
            severity: Severity::Error,
            path: at.clone(),
            line: None,
            message,
        });
    }

    /// Records a warning.
    pub fn warning(&mut self, at: &KeyPath, message: String) {
        self.items.push(Diagnostic {
            severity: Severity::Warning,
            path: at.clone(),
            line: None,
            message,
        });
    }

    /// Number of errors so far.
    pub fn error_count(&self) -> usize {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    /// Fills in line numbers from the source text and returns the diagnostics.
    ///
    /// The source's TOML tree is built once for all of them, and not at all for a source
    /// above [`LINE_LOOKUP_MAX_BYTES`]: that tree costs about 40 times the text (a
    /// million-flow scenario's took 3 GB), so there the key path alone says where.
    pub fn finish(mut self, src: Option<&str>) -> Vec<Diagnostic> {
        if let Some(src) = src.filter(|s| s.len() <= LINE_LOOKUP_MAX_BYTES)
            && self.items.iter().any(|d| d.line.is_none())
            && let Ok(doc) = toml::de::DeTable::parse(src)
        {
            let whole = doc.span();
            let root = toml::de::DeValue::Table(doc.into_inner());
            for d in &mut self.items {
                if d.line.is_none() {
                    d.line = Some(d.path.line_in_value(src, &root, whole.clone()));
                }
            }
        }
        self.items
    }
}

/// Parses TOML text into `T`. A syntax error, a type error or an unknown key comes back as
/// one [`Diagnostic`] with its line, its key path and the message in the user's words
/// (`expected a non-negative integer, found -1`, not serde's `invalid value: integer
/// `-1`, expected u64`).
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Diagnostic> {
    let invalid = |line: Option<usize>, path: KeyPath, message: String| Diagnostic {
        severity: Severity::Error,
        path,
        line,
        message,
    };
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let line = e.span().map(|s| line_of_offset(text, s.start));
        invalid(line, KeyPath::root(), format!("not valid TOML: {}", e.message()))
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = KeyPath::parse(&e.path().to_string());
        let inner = e.into_inner();
        let message = humanize_serde_message(inner.message());
        // An unknown key is reported at the key itself, not at its table.
        let path = match message.strip_prefix("unknown key `") {
            Some(rest) => {
                let name = rest.split('`').next().unwrap_or_default();
                if path.to_string().ends_with(name) {
                    path
                } else {
                    path.key(name)
                }
            }
            None => path,
        };
        let line = inner
            .span()
            .map(|s| line_of_offset(text, s.start))
            .or_else(|| path.line_in(text));
        invalid(line, path, message)
    })
}

/// A semantic check's message (`key.path: expected ..., found ...`) as a [`Diagnostic`]:
/// the key path is split off the front and its line looked up in `text`.
pub fn keyed_message(text: &str, message: &str) -> Diagnostic {
    let key = message
        .split_once(": ")
        .map(|(k, _)| k)
        .filter(|k| !k.contains(' ') && !k.is_empty());
    let path = key.map(KeyPath::parse).unwrap_or_default();
    let rest = match key {
        Some(k) => &message[k.len() + 2..],
        None => message,
    };
    Diagnostic {
        severity: Severity::Error,
        line: if path.is_root() { None } else { path.line_in(text) },
        path,
        message: rest.to_string(),
    }
}

/// The candidate closest to `name`, if it is close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Rewrites a serde error message into "what was expected, what was found" wording, with
/// a "did you mean" for unknown keys and variants.
pub fn humanize_serde_message(msg: &str) -> String {
    // serde: "unknown field `x`, expected one of `a`, `b`" / "expected `a` or `b`" /
    // "there are no fields"; likewise "unknown variant `x`, ...".
    for (prefix, what) in [("unknown field `", "key"), ("unknown variant `", "kind")] {
        if let Some(rest) = msg.strip_prefix(prefix)
            && let Some((name, tail)) = rest.split_once('`')
        {
            let expected: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
            return match closest(name, expected.iter().copied()) {
                Some(c) => format!("unknown {what} `{name}`; did you mean `{c}`?"),
                None if expected.is_empty() => format!("unknown {what} `{name}`; none are allowed here"),
                None => format!(
                    "unknown {what} `{name}`; expected one of {}",
                    expected
                        .iter()
                        .map(|e| format!("`{e}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
        }
    }
    if let Some(rest) = msg.strip_prefix("missing field `")
        && let Some((name, _)) = rest.split_once('`')
    {
        return format!("missing key `{name}`");
    }
    // "invalid type: string \"x\", expected u32" / "invalid value: integer `-3`, expected u32"
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = msg.strip_prefix(prefix)
            && let Some((found, expected)) = rest.rsplit_once(", expected ")
        {
            return format!(
                "expected {}, found {}",
                expected_words(expected),
                found_words(found)
            );
        }
    }
    msg.to_string()
}

fn expected_words(e: &str) -> String {
    match e {
        // The range, not just the sign: 70,000 is a non-negative integer, and still
        // wrong for a u16.
        "u8" => format!("an integer 0..={}", u8::MAX),
        "u16" => format!("an integer 0..={}", u16::MAX),
        "u32" => format!("an integer 0..={}", u32::MAX),
        "u64" | "usize" => "a non-negative integer".to_string(),
        "i8" => format!("an integer {}..={}", i8::MIN, i8::MAX),
        "i16" => format!("an integer {}..={}", i16::MIN, i16::MAX),
        "i32" => format!("an integer {}..={}", i32::MIN, i32::MAX),
        "i64" => "an integer".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "a boolean" | "bool" => "true or false".to_string(),
        "a string" => "a string".to_string(),
        other => other.to_string(),
    }
}

fn found_words(f: &str) -> String {
    // serde writes `integer `-3``, `string "x"`, `floating point `1.5``.
    let f = f.replace("floating point", "number");
    match f.split_once(' ') {
        Some((kind, v)) if kind == "integer" || kind == "number" => v.trim_matches('`').to_string(),
        _ => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_path_round_trips_through_display() {
        let p = KeyPath::root()
            .key("workloads")
            .key("bg")
            .key("list")
            .index(3)
            .key("dst");
        assert_eq!(p.to_string(), "workloads.bg.list[3].dst");
        assert_eq!(KeyPath::parse(&p.to_string()), p);
    }

    #[test]
    fn finds_lines() {
        let src = "a = 1\n[t]\nx = 2\n[[arr]]\ny = 3\n[[arr]]\ny = 4\n";
        assert_eq!(KeyPath::parse("t.x").line_in(src), Some(3));
        assert_eq!(KeyPath::parse("arr[1].y").line_in(src), Some(7));
        assert_eq!(KeyPath::parse("t.missing").line_in(src), Some(2));
    }

    #[test]
    fn suggests_close_names() {
        assert_eq!(
            humanize_serde_message(
                "unknown field `hosts_per_lef`, expected one of `leaves`, `hosts_per_leaf`"
            ),
            "unknown key `hosts_per_lef`; did you mean `hosts_per_leaf`?"
        );
        assert_eq!(
            humanize_serde_message("invalid value: integer `-3`, expected u32"),
            "expected an integer 0..=4294967295, found -3"
        );
        assert_eq!(
            humanize_serde_message("invalid value: integer `70000`, expected u16"),
            "expected an integer 0..=65535, found 70000"
        );
    }
}
