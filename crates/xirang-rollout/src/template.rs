//! Command templates: the operator's shell line with placeholders, and the values read
//! from hosts that fill them.
//!
//! The template is trusted (the operator wrote it); the values are not (a host writes its
//! own snapshot, so a PCI address can be `0000:01:00.0;reboot`). Substituting a quoted
//! value into the template's text is not enough: inside the template's own quotes a
//! quoted value closes them, and a command handed to `ssh` or `sh -c` is parsed once more
//! by the shell at the other end. So the template is parsed here, at policy load, into
//! words and operators (the subset of POSIX shell grammar that command templates need,
//! XCU 2.3-2.7), and rendered again with every word that holds a value quoted as one
//! word. The argument that `ssh` passes to the remote shell, and the command string of
//! `sh -c`, are themselves parsed as command lines and rendered the same way, then
//! quoted as one word for the shell that hands them on, as many levels deep as they
//! nest. What the local shell, the remote shell and the program finally see is the
//! template's structure with each value as data, whatever its bytes.
//!
//! Not supported in templates, refused at load with the column: parameter and command
//! expansion (`$`, backquotes), globs (`* ? [` outside quotes), `~`, here-documents and
//! `case`'s `;;`. They would mean something different once words are re-quoted; a
//! template that needs them calls a script instead.

use std::collections::BTreeMap;

/// A template or value that cannot become a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template does not parse.
    #[error("column {column}: {what}")]
    Syntax {
        /// 1-based character column in the template.
        column: usize,
        /// What is wrong and what was expected.
        what: String,
    },
    /// A value cannot be placed where the template puts it.
    #[error("{{{name}}} = {value:?}: {what}")]
    Value {
        /// Placeholder.
        name: String,
        /// The value, as read.
        value: String,
        /// Why it cannot be used.
        what: String,
    },
}

/// One input item: a character of the template (with its column) or a placeholder.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Char(char, usize),
    Ph(String, usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// Text; `quoted` when it was inside quotes or escaped.
    Lit {
        text: String,
        /// Each character's column in the template (for errors at nested levels).
        cols: Vec<usize>,
        quoted: bool,
    },
    Ph(String, usize),
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Word {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(Word),
    /// A control operator (`&& || ; | & ( )` or a newline) or a redirection operator
    /// (`> >> < >& <& <> >|`, optionally after a file descriptor number).
    Op(String),
}

impl Word {
    fn push_lit(&mut self, c: char, column: usize, quoted: bool) {
        if let Some(Part::Lit {
            text,
            cols,
            quoted: q,
        }) = self.parts.last_mut()
            && *q == quoted
        {
            text.push(c);
            cols.push(column);
            return;
        }
        self.parts.push(Part::Lit {
            text: c.to_string(),
            cols: vec![column],
            quoted,
        });
    }

    fn push_ph(&mut self, name: &str, column: usize) {
        self.parts.push(Part::Ph(name.to_string(), column));
    }

    fn open_quote(&mut self) {
        // An empty '' or "" still makes a word.
        self.parts.push(Part::Lit {
            text: String::new(),
            cols: Vec::new(),
            quoted: true,
        });
    }

    /// The word's text when it holds no placeholder.
    fn literal(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit { text, .. } => s.push_str(text),
                Part::Ph(..) => return None,
            }
        }
        Some(s)
    }

    fn all_unquoted(&self) -> bool {
        self.parts
            .iter()
            .all(|p| matches!(p, Part::Lit { quoted: false, .. }))
    }

    /// The word's characters and placeholders after quote removal: what the program
    /// receiving it sees, and what a shell it hands the word to parses again.
    fn items(&self) -> Vec<Item> {
        let mut out = Vec::new();
        for p in &self.parts {
            match p {
                Part::Lit { text, cols, .. } => {
                    out.extend(text.chars().zip(cols).map(|(c, k)| Item::Char(c, *k)))
                }
                Part::Ph(n, k) => out.push(Item::Ph(n.clone(), *k)),
            }
        }
        out
    }

    /// The word with its values, after quote removal.
    fn value(&self, values: &BTreeMap<&str, String>) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit { text, .. } => s.push_str(text),
                Part::Ph(n, _) => s.push_str(values.get(n.as_str()).map_or("", String::as_str)),
            }
        }
        s
    }
}

/// Splits a template's text into characters and the placeholders named in `known`
/// (`{name}`; any other brace is text).
fn items_of(template: &str, known: &[&str]) -> Vec<Item> {
    let chars: Vec<char> = template.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '{'
            && let Some(len) = chars[i + 1..].iter().position(|&c| c == '}')
        {
            let name: String = chars[i + 1..i + 1 + len].iter().collect();
            if known.contains(&name.as_str()) {
                out.push(Item::Ph(name, i + 1));
                i += len + 2;
                continue;
            }
        }
        out.push(Item::Char(chars[i], i + 1));
        i += 1;
    }
    out
}

fn syntax(column: usize, what: impl Into<String>) -> TemplateError {
    TemplateError::Syntax {
        column,
        what: what.into(),
    }
}

fn col(it: &Item) -> usize {
    match it {
        Item::Char(_, c) | Item::Ph(_, c) => *c,
    }
}

/// Operators, longest first so that `&&` is not read as two `&`.
const OPERATORS: &[&str] = &[
    "&&", "||", ">>", ">&", "<&", "<>", ">|", "|", "&", ";", "<", ">", "(", ")",
];

/// Tokenizes a command line (XCU 2.3 token recognition, without expansions).
fn lex(items: &[Item]) -> Result<Vec<Tok>, TemplateError> {
    let mut toks = Vec::new();
    let mut cur: Option<Word> = None;
    let mut i = 0;
    while i < items.len() {
        let c = match &items[i] {
            Item::Ph(name, k) => {
                cur.get_or_insert_with(Word::default).push_ph(name, *k);
                i += 1;
                continue;
            }
            Item::Char(c, _) => *c,
        };
        let column = col(&items[i]);
        match c {
            ' ' | '\t' => {
                flush(&mut cur, &mut toks);
                i += 1;
            }
            '\n' => {
                flush(&mut cur, &mut toks);
                toks.push(Tok::Op("\n".into()));
                i += 1;
            }
            '#' if cur.is_none() => {
                while i < items.len() && items[i] != Item::Char('\n', col(&items[i])) {
                    i += 1;
                }
            }
            '\'' => i = single_quoted(items, i, cur.get_or_insert_with(Word::default), column)?,
            '"' => i = double_quoted(items, i, cur.get_or_insert_with(Word::default), column)?,
            '\\' => match items.get(i + 1) {
                Some(Item::Char('\n', _)) => i += 2,
                Some(Item::Char(e, k)) => {
                    cur.get_or_insert_with(Word::default).push_lit(*e, *k, true);
                    i += 2;
                }
                Some(Item::Ph(..)) => {
                    return Err(syntax(
                        column,
                        "a backslash before a placeholder; remove it (values are quoted by Xirang)",
                    ));
                }
                None => return Err(syntax(column, "a backslash at the end of the template")),
            },
            '$' | '`' => {
                return Err(syntax(
                    column,
                    "shell expansion (`$` or a backquote) is not supported in templates: values come from placeholders; call a script for anything else",
                ));
            }
            '*' | '?' | '[' => {
                return Err(syntax(
                    column,
                    format!(
                        "`{c}` outside quotes is a glob, which templates do not support; quote it to mean the character"
                    ),
                ));
            }
            '~' if cur.is_none() => {
                return Err(syntax(
                    column,
                    "`~` at the start of a word (home directory expansion) is not supported; write the path",
                ));
            }
            '&' | '|' | ';' | '<' | '>' | '(' | ')' => {
                i = operator(items, i, c, column, &mut cur, &mut toks)?;
            }
            _ => {
                cur.get_or_insert_with(Word::default).push_lit(c, column, false);
                i += 1;
            }
        }
    }
    flush(&mut cur, &mut toks);
    Ok(toks)
}

/// Ends the word being read, if any: it becomes a token.
fn flush(cur: &mut Option<Word>, toks: &mut Vec<Tok>) {
    if let Some(w) = cur.take() {
        toks.push(Tok::Word(w));
    }
}

/// A single-quoted string from its opening quote at `open` (at `column`) into `w`: all
/// text up to the closing quote, placeholders kept. Returns the index after the closing
/// quote.
fn single_quoted(items: &[Item], open: usize, w: &mut Word, column: usize) -> Result<usize, TemplateError> {
    w.open_quote();
    let mut i = open + 1;
    loop {
        match items.get(i) {
            None => return Err(syntax(column, "a single quote that is never closed")),
            Some(Item::Char('\'', _)) => break,
            Some(Item::Char(ch, k)) => w.push_lit(*ch, *k, true),
            Some(Item::Ph(n, k)) => w.push_ph(n, *k),
        }
        i += 1;
    }
    Ok(i + 1)
}

/// A double-quoted string from its opening quote at `open` (at `column`) into `w`: text
/// and placeholders up to the closing quote, with the backslash escapes of double quotes
/// and no expansion. Returns the index after the closing quote.
fn double_quoted(items: &[Item], open: usize, w: &mut Word, column: usize) -> Result<usize, TemplateError> {
    w.open_quote();
    let mut i = open + 1;
    loop {
        match items.get(i) {
            None => return Err(syntax(column, "a double quote that is never closed")),
            Some(Item::Char('"', _)) => break,
            Some(Item::Char('\\', _)) => match items.get(i + 1) {
                // XCU 2.2.3: inside double quotes a backslash escapes only these.
                Some(Item::Char(e @ ('$' | '`' | '"' | '\\'), k)) => {
                    w.push_lit(*e, *k, true);
                    i += 1;
                }
                Some(Item::Char('\n', _)) => i += 1,
                _ => w.push_lit('\\', col(&items[i]), true),
            },
            Some(it @ Item::Char('$' | '`', _)) => {
                return Err(syntax(
                    col(it),
                    "shell expansion (`$` or a backquote) is not supported in templates: values come from placeholders; call a script for anything else",
                ));
            }
            Some(Item::Char(ch, k)) => w.push_lit(*ch, *k, true),
            Some(Item::Ph(n, k)) => w.push_ph(n, *k),
        }
        i += 1;
    }
    Ok(i + 1)
}

/// The control or redirection operator starting at `i` (with `c`, at `column`), with the
/// descriptor digits of the word before it (`2>`) and after a `>&` or `<&`; `;;` and
/// here-documents are refused. Ends the word before it; returns the index after it.
fn operator(
    items: &[Item],
    mut i: usize,
    c: char,
    column: usize,
    cur: &mut Option<Word>,
    toks: &mut Vec<Tok>,
) -> Result<usize, TemplateError> {
    let rest: String = items[i..]
        .iter()
        .take(2)
        .map_while(|it| match it {
            Item::Char(ch, _) => Some(*ch),
            Item::Ph(..) => None,
        })
        .collect();
    if rest.starts_with(";;") {
        return Err(syntax(column, "`;;` (case) is not supported in templates"));
    }
    if rest.starts_with("<<") {
        return Err(syntax(
            column,
            "here-documents (`<<`) are not supported in templates",
        ));
    }
    let op = OPERATORS
        .iter()
        .find(|o| rest.starts_with(**o))
        .expect("every operator character starts an operator");
    let mut text = String::new();
    // A word of digits right before `<` or `>` is the redirected descriptor.
    if matches!(c, '<' | '>')
        && let Some(w) = &cur
        && w.all_unquoted()
        && w.literal()
            .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    {
        text = w.literal().unwrap_or_default();
        *cur = None;
    }
    flush(cur, toks);
    text.push_str(op);
    i += op.chars().count();
    if matches!(*op, ">&" | "<&") {
        while let Some(Item::Char(d, _)) = items.get(i)
            && (d.is_ascii_digit() || *d == '-')
        {
            text.push(*d);
            i += 1;
        }
    }
    toks.push(Tok::Op(text));
    Ok(i)
}

fn is_redirect(op: &str) -> bool {
    op.contains('<') || op.contains('>')
}

/// `ssh` options that take an argument (OpenSSH ssh(1) SYNOPSIS).
const SSH_OPTS_WITH_ARG: &str = "BbcDEeFIiJLlmOopQRSWw";

/// Shells whose `-c` argument is a command line.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash"];

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

fn is_assignment(w: &Word) -> bool {
    match w.parts.first() {
        Some(Part::Lit {
            text, quoted: false, ..
        }) => match text.find('=') {
            Some(eq) if eq > 0 => {
                let name = &text[..eq];
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            }
            _ => false,
        },
        _ => false,
    }
}

/// How one simple command's words are treated.
enum Special {
    None,
    /// `ssh`: the destination word and the first word of the remote command (the rest
    /// of the words are joined to it, as ssh joins them).
    Ssh {
        dest: usize,
        remote: Option<usize>,
    },
    /// `sh -c STRING`: the word that is the command string.
    ShellC {
        string: usize,
    },
}

/// Skips the prefix commands that run the next word as a command (`sudo`, `env`,
/// `timeout`, `nice`, `nohup`, `exec`, `command`) and returns where the real command is.
fn command_word(argv: &[&Word], mut k: usize) -> usize {
    while k < argv.len() && is_assignment(argv[k]) {
        k += 1;
    }
    while let Some(name) = argv.get(k).and_then(|w| w.literal()) {
        let takes_arg: &str = match basename(&name) {
            "sudo" => "ugCDhprtU",
            "timeout" => "sk",
            "nice" => "n",
            "env" => "uSC",
            "nohup" | "exec" | "command" => "",
            _ => break,
        };
        let prog = basename(&name).to_string();
        k += 1;
        while let Some(w) = argv.get(k).and_then(|w| w.literal()) {
            if prog == "env" && is_assignment(argv[k]) {
                k += 1;
                continue;
            }
            if w == "--" {
                k += 1;
                break;
            }
            if !w.starts_with('-') || w.len() < 2 {
                break;
            }
            k += 1;
            if w.len() == 2 && takes_arg.contains(&w[1..]) {
                k += 1;
            }
        }
        if prog == "timeout" {
            // The duration.
            k += 1;
        }
    }
    k
}

fn special(argv: &[&Word]) -> Special {
    let k = command_word(argv, 0);
    let Some(name) = argv.get(k).and_then(|w| w.literal()) else {
        return Special::None;
    };
    let prog = basename(&name);
    if prog == "ssh" {
        let mut j = k + 1;
        while j < argv.len() {
            let Some(w) = argv[j].literal() else { break };
            if w == "--" {
                j += 1;
                break;
            }
            if !w.starts_with('-') || w.len() < 2 {
                break;
            }
            // A cluster of flags; the first one that takes an argument takes the rest
            // of the word or, when nothing is left, the next word.
            let flags: Vec<char> = w[1..].chars().collect();
            let mut skip_next = false;
            for (f, ch) in flags.iter().enumerate() {
                if SSH_OPTS_WITH_ARG.contains(*ch) {
                    skip_next = f + 1 == flags.len();
                    break;
                }
            }
            j += if skip_next { 2 } else { 1 };
        }
        if j >= argv.len() {
            return Special::None;
        }
        return Special::Ssh {
            dest: j,
            remote: (j + 1 < argv.len()).then_some(j + 1),
        };
    }
    if SHELLS.contains(&prog) {
        let mut j = k + 1;
        let mut has_c = false;
        while let Some(w) = argv.get(j).and_then(|w| w.literal()) {
            if !(w.starts_with('-') || w.starts_with('+')) || w.len() < 2 {
                break;
            }
            if w == "--" {
                j += 1;
                break;
            }
            has_c |= w.starts_with('-') && w[1..].contains('c');
            // `-o option` takes the next word.
            j += if w[1..].ends_with('o') { 2 } else { 1 };
        }
        if has_c && j < argv.len() {
            return Special::ShellC { string: j };
        }
    }
    Special::None
}

/// Quotes a value as one word for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn render_word(w: &Word, values: &BTreeMap<&str, String>) -> String {
    if w.literal().is_some() && w.all_unquoted() {
        // The template's own text, as written: keeps keywords (`{`, `!`) and assignments.
        return w.literal().unwrap_or_default();
    }
    if is_assignment(w)
        && let Some(Part::Lit { text, .. }) = w.parts.first()
    {
        let eq = text.find('=').unwrap_or(0);
        let v = w.value(values);
        return format!("{}{}", &text[..=eq], shell_quote(&v[eq + 1..]));
    }
    shell_quote(&w.value(values))
}

fn first_placeholder(w: &Word) -> Option<&str> {
    w.parts.iter().find_map(|p| match p {
        Part::Ph(n, _) => Some(n.as_str()),
        Part::Lit { .. } => None,
    })
}

/// Renders tokens as a command line for a POSIX shell.
fn render(toks: &[Tok], values: &BTreeMap<&str, String>) -> Result<String, TemplateError> {
    let mut out = String::new();
    let mut start = 0;
    while start < toks.len() {
        // One simple command: up to the next control operator.
        let end = toks[start..]
            .iter()
            .position(|t| matches!(t, Tok::Op(o) if !is_redirect(o)))
            .map_or(toks.len(), |p| start + p);
        let cmd = &toks[start..end];
        // Argument words: those that are not a redirection's target.
        let mut argv_idx = Vec::new();
        let mut after_redirect = false;
        for (i, t) in cmd.iter().enumerate() {
            match t {
                Tok::Op(_) => after_redirect = true,
                Tok::Word(_) if after_redirect => after_redirect = false,
                Tok::Word(_) => argv_idx.push(i),
            }
        }
        let argv: Vec<&Word> = argv_idx
            .iter()
            .map(|&i| match &cmd[i] {
                Tok::Word(w) => w,
                Tok::Op(_) => unreachable!("argument indices point at words"),
            })
            .collect();
        let sp = special(&argv);
        let mut words: Vec<String> = Vec::new();
        for (i, t) in cmd.iter().enumerate() {
            let w = match t {
                Tok::Op(o) => {
                    words.push(o.clone());
                    continue;
                }
                Tok::Word(w) => w,
            };
            let a = argv_idx.iter().position(|&x| x == i);
            match (&sp, a) {
                (Special::Ssh { dest, .. }, Some(a)) if a == *dest => {
                    let v = w.value(values);
                    if v.starts_with('-')
                        && let Some(name) = first_placeholder(w)
                    {
                        return Err(TemplateError::Value {
                            name: name.to_string(),
                            value: values.get(name).cloned().unwrap_or_default(),
                            what: "ssh would read a destination starting with `-` as an option".into(),
                        });
                    }
                    words.push(render_word(w, values));
                }
                (Special::Ssh { remote: Some(r), .. }, Some(a)) if a == *r => {
                    // ssh joins its remaining arguments with spaces and the remote shell
                    // parses the result: parse it here as that shell will, render it,
                    // and pass it as one argument.
                    let mut items = Vec::new();
                    for (k, w) in argv[*r..].iter().enumerate() {
                        if k > 0 {
                            items.push(Item::Char(' ', 0));
                        }
                        items.extend(w.items());
                    }
                    let inner = render(&lex(&items)?, values)?;
                    words.push(shell_quote(&inner));
                }
                (Special::Ssh { remote: Some(r), .. }, Some(a)) if a > *r => {}
                (Special::ShellC { string }, Some(a)) if a == *string => {
                    let inner = render(&lex(&w.items())?, values)?;
                    words.push(shell_quote(&inner));
                }
                _ => words.push(render_word(w, values)),
            }
        }
        out.push_str(&words.join(" "));
        if let Some(Tok::Op(o)) = toks.get(end) {
            if o == "\n" {
                out.push('\n');
            } else {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push(' ');
                }
                out.push_str(o);
                out.push(' ');
            }
        }
        start = end + 1;
    }
    Ok(out.trim_end_matches(' ').to_string())
}

/// A parsed command template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    toks: Vec<Tok>,
}

impl Template {
    /// Parses `text` with the placeholders in `known`. Every nested command line (what
    /// `ssh` and `sh -c` hand to a shell) is parsed too, so a template that would fail
    /// only at the other end fails here.
    pub fn parse(text: &str, known: &[&str]) -> Result<Template, TemplateError> {
        let toks = lex(&items_of(text, known))?;
        let t = Template { toks };
        // Rendering with empty values parses every nested level.
        t.render(&BTreeMap::new())?;
        Ok(t)
    }

    /// The command line for `sh -c` with `values` in place: each value is one word (or
    /// part of the word the template puts it in) at every level it reaches, whatever it
    /// contains. A value with a NUL byte cannot be an argument and is refused.
    pub fn render(&self, values: &BTreeMap<&str, String>) -> Result<String, TemplateError> {
        for (name, v) in values {
            if v.contains('\0') {
                return Err(TemplateError::Value {
                    name: name.to_string(),
                    value: v.clone(),
                    what: "a NUL byte cannot be part of a command argument".into(),
                });
            }
        }
        render(&self.toks, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &[&str] = &["node", "pci", "image"];

    fn vals(pairs: &[(&'static str, &str)]) -> BTreeMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn a_value_inside_the_templates_single_quotes_stays_one_word_at_both_ends() {
        let t = Template::parse(
            "ssh {node} 'mlxfwmanager -d {pci} -u -y && mlxfwreset -d {pci} reset'",
            K,
        )
        .unwrap();
        let line = t
            .render(&vals(&[("node", "n1"), ("pci", "0000:01:00.0;echo INJECTED")]))
            .unwrap();
        assert_eq!(
            line,
            r#"ssh n1 'mlxfwmanager -d '\''0000:01:00.0;echo INJECTED'\'' -u -y && mlxfwreset -d '\''0000:01:00.0;echo INJECTED'\'' reset'"#
        );
    }

    #[test]
    fn templates_without_values_keep_their_meaning() {
        let t = Template::parse("X=1 sh ./a.sh {node} > out.txt 2>&1 && { echo ok; }", K).unwrap();
        assert_eq!(
            t.render(&vals(&[("node", "h 1")])).unwrap(),
            "X=1 sh ./a.sh 'h 1' > out.txt 2>&1 && { echo ok ; }"
        );
    }

    #[test]
    fn unsupported_shell_is_refused_with_its_column() {
        for (t, column) in [
            ("echo $HOME", 6),
            ("ssh {node} 'a `b`'", 15),
            ("ls *.bin", 4),
            ("echo 'x", 6),
            ("cat <<EOF", 5),
        ] {
            match Template::parse(t, K) {
                Err(TemplateError::Syntax { column: c, .. }) => assert_eq!(c, column, "{t}"),
                other => panic!("{t}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_ssh_destination_that_reads_as_an_option_is_refused() {
        let t = Template::parse("ssh {node} true", K).unwrap();
        assert!(matches!(
            t.render(&vals(&[("node", "-oProxyCommand=x")])),
            Err(TemplateError::Value { .. })
        ));
        assert!(t.render(&vals(&[("node", "a\0b")])).is_err());
    }
}
