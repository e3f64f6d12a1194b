//! The worked examples of `docs/guide/` are run and their output checked, so a guide
//! that no longer tells the truth fails the suite. The format is stated in
//! docs/guide/README.md ("How the examples are tested"): ```console blocks, `$ xirang`
//! commands, their expected stdout, `...` for any lines, `[..]` for any text within a
//! line, `[exit: N]` for a non-zero status.

use std::path::{Path, PathBuf};

use crate::util::root;

/// The repository directories a page's commands may name, linked into its working
/// directory.
const VISIBLE: [&str; 5] = ["scenarios", "models", "monitoring", "crates", "docs"];

/// One `$ xirang ...` line and what it must print.
#[derive(Debug)]
struct Step {
    /// Line of the command in the page.
    line: usize,
    /// Arguments after `xirang`.
    args: Vec<String>,
    /// Expected stdout lines (patterns).
    expected: Vec<String>,
    /// Expected exit status.
    exit: i32,
}

/// Splits a command line on whitespace; single or double quotes group words.
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("unclosed quote in `{s}`"));
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// The steps of a page, in order.
fn steps(page: &str, text: &str) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut in_block = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if !in_block {
            in_block = line.trim_end() == "```console";
            continue;
        }
        if line.trim_end() == "```" {
            in_block = false;
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            let words = split_words(cmd).unwrap_or_else(|e| panic!("{page}:{n}: {e}"));
            assert_eq!(
                words.first().map(String::as_str),
                Some("xirang"),
                "{page}:{n}: a guide command starts with `xirang`"
            );
            out.push(Step {
                line: n,
                args: words[1..].to_vec(),
                expected: Vec::new(),
                exit: 0,
            });
            continue;
        }
        let step = out
            .last_mut()
            .unwrap_or_else(|| panic!("{page}:{n}: output before any command"));
        if let Some(code) = line
            .trim_end()
            .strip_prefix("[exit: ")
            .and_then(|r| r.strip_suffix(']'))
        {
            step.exit = code.parse().unwrap_or_else(|_| panic!("{page}:{n}: `{line}`"));
        } else {
            assert_eq!(step.exit, 0, "{page}:{n}: output after `[exit: N]`");
            step.expected.push(line.trim_end().to_string());
        }
    }
    assert!(!in_block, "{page}: a ```console block is not closed");
    out
}

/// One line against a pattern where `[..]` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

/// Lines against patterns where a `...` line stands for any number of lines.
fn lines_match(patterns: &[String], lines: &[&str]) -> bool {
    match patterns.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p == "..." => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((p, rest)) => lines
            .split_first()
            .is_some_and(|(l, ls)| line_matches(p, l) && lines_match(rest, ls)),
    }
}

/// Runs every step of `docs/guide/<name>` in a fresh directory.
fn check_page(name: &str) {
    let path = root().join("docs/guide").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let steps = steps(name, &text);
    assert!(!steps.is_empty(), "{name}: no worked example");
    let dir = tempfile::tempdir().unwrap();
    for d in VISIBLE {
        std::os::unix::fs::symlink(root().join(d), dir.path().join(d)).unwrap();
    }
    for s in &steps {
        let o = assert_cmd::Command::cargo_bin("xirang")
            .unwrap()
            .current_dir(dir.path())
            .args(&s.args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        let got: Vec<&str> = stdout.lines().map(str::trim_end).collect();
        let mut expected = s.expected.clone();
        while expected.last().is_some_and(String::is_empty) {
            expected.pop();
        }
        let mut got = got;
        while got.last().is_some_and(|l| l.is_empty()) {
            got.pop();
        }
        assert!(
            o.status.code() == Some(s.exit) && lines_match(&expected, &got),
            "docs/guide/{name}:{}: `xirang {}` exited {:?} (expected {})\n--- expected stdout\n{}\n--- stdout\n{}\n--- stderr\n{}",
            s.line,
            s.args.join(" "),
            o.status.code(),
            s.exit,
            expected.join("\n"),
            got.join("\n"),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn the_matcher_takes_what_the_guide_readme_says() {
    assert!(line_matches("took [..] s", "took 0.2 s"));
    assert!(line_matches("[..]", ""));
    assert!(line_matches("a [..] b [..] c", "a x b y b z c"));
    assert!(!line_matches("took [..] s", "took 0.2 ms!"));
    assert!(!line_matches("ab[..]ba", "aba"));
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&p(&["a", "...", "d"]), &["a", "b", "c", "d"]));
    assert!(lines_match(&p(&["a", "...", "d"]), &["a", "d"]));
    assert!(lines_match(&p(&["...", "x", "..."]), &["a", "x", "d"]));
    assert!(!lines_match(&p(&["a", "...", "d"]), &["a", "b", "c"]));
    assert!(!lines_match(&p(&["a"]), &["a", "b"]));
    assert_eq!(
        split_words(r#"sim "my file.toml" --out 'o u t'"#).unwrap(),
        ["sim", "my file.toml", "--out", "o u t"]
    );
    let s = steps("t.md", "text\n```console\n$ xirang a b\nx\n...\n[exit: 1]\n```\n");
    assert_eq!((s.len(), s[0].line, s[0].exit), (1, 3, 1));
    assert_eq!(s[0].expected, ["x", "..."]);
}

/// Every page of the guide has its test below.
const PAGES: [&str; 10] = [
    "simulate.md",
    "serving.md",
    "tune.md",
    "collectives.md",
    "hosts-and-audit.md",
    "monitor.md",
    "diagnose.md",
    "rollout.md",
    "memreg.md",
    "nic-layout.md",
];

#[test]
fn every_guide_page_is_tested_and_listed() {
    let dir = root().join("docs/guide");
    let index = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            (n.ends_with(".md") && n != "README.md").then_some(n)
        })
        .collect();
    on_disk.sort();
    let mut tested: Vec<String> = PAGES.iter().map(|p| p.to_string()).collect();
    tested.sort();
    assert_eq!(on_disk, tested, "docs/guide pages and the tests here differ");
    for p in PAGES {
        assert!(
            index.contains(&format!("]({p})")),
            "docs/guide/README.md does not link {p}"
        );
    }
}

#[test]
fn guide_simulate() {
    check_page("simulate.md");
}

#[test]
fn guide_tune() {
    check_page("tune.md");
}

#[test]
fn guide_collectives() {
    check_page("collectives.md");
}

#[test]
fn guide_hosts_and_audit() {
    check_page("hosts-and-audit.md");
}

#[test]
fn guide_monitor() {
    check_page("monitor.md");
}

#[test]
fn guide_diagnose() {
    check_page("diagnose.md");
}

#[test]
fn guide_rollout() {
    check_page("rollout.md");
}

#[test]
fn guide_memreg() {
    check_page("memreg.md");
}

#[test]
fn guide_nic_layout() {
    check_page("nic-layout.md");
}

/// Every `docs/reference/<file>.md` cited in the repository's sources, scenarios and
/// docs exists: a citation resolves in a clone.
#[test]
fn every_cited_reference_file_is_in_the_repository() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(&p, out);
                }
            } else if [".rs", ".toml", ".md", ".sh", ".yml", ".py"]
                .iter()
                .any(|x| name.ends_with(x))
            {
                out.push(p);
            }
        }
    }
    let root = root();
    let mut files = Vec::new();
    for d in [
        "crates",
        "scenarios",
        "docs",
        "monitoring",
        "scripts",
        "ci",
        "fuzz/seeds",
        "models",
    ] {
        if root.join(d).is_dir() {
            walk(&root.join(d), &mut files);
        }
    }
    for f in std::fs::read_dir(&root).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    const CITED: &str = "docs/reference/";
    let mut cited = 0;
    let mut missing = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (at, _) in text.match_indices(CITED) {
            let rest = &text[at + CITED.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            let name = name.trim_end_matches('.');
            if !name.ends_with(".md") {
                continue;
            }
            cited += 1;
            if !root.join(CITED).join(name).is_file() {
                missing.push(format!("{}: {CITED}{name}", f.display()));
            }
        }
    }
    assert!(
        cited > 50,
        "only {cited} citations found: is the scan looking in the right places?"
    );
    assert!(
        missing.is_empty(),
        "cited but not in the repository:\n{}",
        missing.join("\n")
    );
}

/// docs/formats/series.md names every series calibration and diagnosis read, with its
/// origin: a metric they start reading fails here until the page says where it comes from.
#[test]
fn every_series_read_is_documented_with_its_origin() {
    let page = std::fs::read_to_string(root().join("docs/formats/series.md")).unwrap();
    let mut read: Vec<String> = xirang_calibrate::counters::metric_names();
    read.extend(xirang_diagnose::window::metric_names());
    read.sort();
    read.dedup();
    let missing: Vec<&String> = read
        .iter()
        .filter(|m| !page.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/formats/series.md does not name: {missing:#?}"
    );
}

#[test]
fn guide_serving() {
    check_page("serving.md");
}
