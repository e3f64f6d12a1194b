//! Reader for the output of nccl-tests (`all_reduce_perf`, `all_gather_perf`, ...,
//! `sendrecv_perf`) and rccl-tests.
//!
//! Real logs are messy: several tests in one file, each with its own `# nThread` header;
//! NCCL `INFO`/`WARN` lines interleaved with the table and sometimes glued into the middle
//! of a result row (nccl-tests prints a row's leading fields before running the size and
//! the timings after, so log lines land in between); MPI and shell noise; `N/A` in the
//! `#wrong` column when a test does not validate; times in exponent form past 1e7 µs.
//! The reader keeps what a table row, a header or a summary line says, skips what is
//! plainly noise, and rejects a line that starts like a result row but is not one, naming
//! the line and what was expected.

use serde::Serialize;
use thiserror::Error;

use crate::cost::Coll;

/// A line that looked like part of the table but could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was found and what was expected.
    pub message: String,
}

/// How the size grows from row to row (`step: 2(factor)` or `step: 1048576(bytes)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Each size is the previous times this.
    Factor(u64),
    /// Each size is the previous plus this many bytes.
    Bytes(u64),
}

/// The `# nThread ...` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Params {
    /// Threads per process.
    pub threads: u32,
    /// GPUs per thread.
    pub gpus: u32,
    /// Smallest size requested.
    pub min_bytes: u64,
    /// Largest size requested.
    pub max_bytes: u64,
    /// Size step.
    pub step: Step,
    /// Warm-up iterations.
    pub warmup_iters: u32,
    /// Timed iterations.
    pub iters: u32,
}

/// One `#  Rank  n Group g Pid p on host device d [bus] model` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rank {
    /// Rank.
    pub rank: u32,
    /// Host name.
    pub host: String,
    /// CUDA device index on the host.
    pub device: u32,
    /// PCI bus id as printed (`0000:1b:00` or `0x1b`).
    pub bus_id: String,
    /// GPU model (`NVIDIA H100 80GB HBM3`); rccl-tests prints none.
    pub gpu: Option<String>,
}

/// One direction of a row: out-of-place or in-place.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measure {
    /// Time per operation, µs.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s.
    pub algbw_gbs: f64,
    /// Bus bandwidth, GB/s.
    pub busbw_gbs: f64,
    /// Elements that failed validation; `None` when the test printed `N/A` (not checked).
    pub wrong: Option<u64>,
}

/// One result row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Line the row starts on.
    pub line: usize,
    /// Buffer size, bytes, as the test defines it.
    pub size_bytes: u64,
    /// Element count.
    pub count: u64,
    /// Data type (`float`, `double`, `bfloat16`, ...).
    pub dtype: String,
    /// Reduction (`sum`, `none`, ...).
    pub redop: String,
    /// Root rank, -1 when the operation has none.
    pub root: i64,
    /// Out-of-place result.
    pub out_of_place: Measure,
    /// In-place result.
    pub in_place: Measure,
}

impl Row {
    /// The better of the two bus bandwidths.
    pub fn busbw_gbs(&self) -> f64 {
        self.out_of_place.busbw_gbs.max(self.in_place.busbw_gbs)
    }

    /// Total elements that failed validation in either placement.
    pub fn wrong(&self) -> u64 {
        self.out_of_place.wrong.unwrap_or(0) + self.in_place.wrong.unwrap_or(0)
    }
}

/// One test run (one `*_perf` invocation).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestRun {
    /// Line the run starts on.
    pub line: usize,
    /// Test name (`all_reduce_perf`), from the `# Collective test starting:` line or the
    /// command line; `None` when the log shows neither.
    pub name: Option<String>,
    /// The collective, from the name or, failing that, inferred from the rows.
    pub collective: Option<Coll>,
    /// The collective was inferred from the rows (bus/algorithm bandwidth ratio and
    /// reduction), not named by the log.
    pub collective_inferred: bool,
    /// The `# nThread` parameters, when printed.
    pub params: Option<Params>,
    /// Ranks listed under `# Using devices` (some logs list only a few).
    pub ranks: Vec<Rank>,
    /// NCCL (or RCCL) version when printed.
    pub nccl_version: Option<String>,
    /// `# Reducing maxBytes to N due to memory limitation`.
    pub max_bytes_reduced_to: Option<u64>,
    /// Result rows in file order.
    pub rows: Vec<Row>,
    /// `# Out of bounds values : N OK|FAILED`.
    pub out_of_bounds: Option<u64>,
    /// `# Avg bus bandwidth : x`.
    pub avg_busbw_gbs: Option<f64>,
    /// Failure lines (`Test NCCL failure ...`, `Test failure ...`) with their line numbers.
    pub failures: Vec<(usize, String)>,
}

impl TestRun {
    /// An empty run of test `name` (`all_reduce_perf`), for writers ([`render`]).
    pub fn default_named(name: &str) -> TestRun {
        let mut r = TestRun::new(0);
        r.name = Some(name.to_string());
        r.collective = Coll::from_test_name(name);
        r
    }

    fn new(line: usize) -> TestRun {
        TestRun {
            line,
            name: None,
            collective: None,
            collective_inferred: false,
            params: None,
            ranks: Vec::new(),
            nccl_version: None,
            max_bytes_reduced_to: None,
            rows: Vec::new(),
            out_of_bounds: None,
            avg_busbw_gbs: None,
            failures: Vec::new(),
        }
    }

    /// Number of ranks: one past the highest rank listed (logs may list only some ranks).
    pub fn nranks(&self) -> Option<u32> {
        self.ranks.iter().map(|r| r.rank + 1).max()
    }

    /// Distinct hosts, in order of first appearance.
    pub fn hosts(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for r in &self.ranks {
            if !v.contains(&r.host.as_str()) {
                v.push(&r.host);
            }
        }
        v
    }

    /// GPU model of the first rank that names one.
    pub fn gpu_model(&self) -> Option<&str> {
        self.ranks.iter().find_map(|r| r.gpu.as_deref())
    }

    /// The largest-size row.
    pub fn largest(&self) -> Option<&Row> {
        self.rows.iter().max_by_key(|r| r.size_bytes)
    }

    /// Total elements that failed validation.
    pub fn wrong(&self) -> u64 {
        self.rows.iter().map(Row::wrong).sum()
    }
}

/// A buffer size as people write it: `16 GiB`, `128 MiB`, `~1.50 GiB` for sizes nccl-tests
/// rounded to a multiple of the element count times the ranks.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", UNITS[u])
    } else {
        format!("~{v:.2} {}", UNITS[u])
    }
}

/// A whole file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Test runs in file order.
    pub tests: Vec<TestRun>,
    /// Lines that were read as noise but deserve a mention (an unfinished row at the end).
    pub warnings: Vec<(usize, String)>,
}

/// Columns in a full row: size count type redop root, then time algbw busbw #wrong twice.
const ROW_FIELDS: usize = 13;
/// Leading fields before the first timing group.
const LEAD_FIELDS: usize = 5;

/// A row being assembled across lines.
struct Pending {
    line: usize,
    fields: Vec<String>,
}

/// Largest log read. nccl-tests logs are tens of KB (the 80-GPU run in
/// test_data is 46 KB with every collective); `NCCL_DEBUG=INFO` adds a few hundred lines
/// per rank, a few MB at a thousand ranks. 64 MiB is well above that and bounds memory.
pub const LOG_LIMIT: xirang_files::Limit = xirang_files::Limit::new(64 << 20, "nccl-tests log");

/// A log's text, read with [`LOG_LIMIT`]. A byte that is not UTF-8 (a binary write
/// interleaved by another rank) is replaced rather than rejecting every line around it;
/// the line of the first one is returned so the caller can say so.
pub fn read_log(path: &std::path::Path) -> Result<xirang_files::LossyText, xirang_files::ReadError> {
    xirang_files::read_text_lossy(path, LOG_LIMIT)
}

/// Writes one test run as nccl-tests prints it: the header with its parameters and
/// ranks, the table (out-of-place then in-place columns, nccl-tests' widths and number
/// formats), the out-of-bounds and average bus bandwidth lines. `note` lines go first, as
/// comments (`# ...`). [`parse`] reads the text back to the same rows.
pub fn render(run: &TestRun, note: &[String]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for n in note {
        let _ = writeln!(s, "# {n}");
    }
    let name = run.name.as_deref().unwrap_or("all_reduce_perf");
    let _ = writeln!(s, "# Collective test starting: {name}");
    if let Some(p) = &run.params {
        let step = match p.step {
            Step::Factor(f) => format!("{f}(factor)"),
            Step::Bytes(b) => format!("{b}(bytes)"),
        };
        let _ = writeln!(
            s,
            "# nThread {} nGpus {} minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} agg iters: 1 validation: 0 graph: 0",
            p.threads, p.gpus, p.min_bytes, p.max_bytes, p.warmup_iters, p.iters
        );
    }
    let _ = writeln!(s, "#\n# Using devices");
    for r in &run.ranks {
        let _ = writeln!(
            s,
            "#  Rank {:>2} Group  0 Pid {:>6} on {:>10} device {:>2} [{}] {}",
            r.rank,
            r.rank,
            r.host,
            r.device,
            r.bus_id,
            r.gpu.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(s, "#");
    let _ = writeln!(
        s,
        "#                                                              out-of-place                       in-place          "
    );
    let _ = writeln!(
        s,
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong "
    );
    let _ = writeln!(
        s,
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "
    );
    let measure = |m: &Measure| {
        let wrong = m.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string());
        format!(
            "  {}  {:>6.2}  {:>6.2}  {wrong:>5}",
            time_field(m.time_us),
            m.algbw_gbs,
            m.busbw_gbs
        )
    };
    for r in &run.rows {
        let _ = writeln!(
            s,
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
            r.size_bytes,
            r.count,
            r.dtype,
            r.redop,
            r.root,
            measure(&r.out_of_place),
            measure(&r.in_place)
        );
    }
    let _ = writeln!(
        s,
        "# Out of bounds values : {} OK",
        run.out_of_bounds.unwrap_or(0)
    );
    if let Some(avg) = run.avg_busbw_gbs {
        let _ = writeln!(s, "# Avg bus bandwidth    : {avg:.3} ");
    }
    let _ = writeln!(s, "#\n# Collective test concluded: {name}\n#");
    s
}

/// A time in nccl-tests' 7 columns: two decimals, then one, then none, then exponent form.
fn time_field(t: f64) -> String {
    if t < 1e4 {
        format!("{t:>7.2}")
    } else if t < 1e5 {
        format!("{t:>7.1}")
    } else if t < 1e7 {
        format!("{t:>7.0}")
    } else {
        format!("{t:>7.1e}")
    }
}

/// Parses a whole nccl-tests or rccl-tests log.
pub fn parse(text: &str) -> Result<Report, ParseError> {
    let mut parser = Parser::default();
    for (i, raw) in text.lines().enumerate() {
        parser.line(i + 1, raw)?;
    }
    Ok(parser.end())
}

/// A log's parse so far: the runs finished and the one open, what the next run will be
/// called, and a result row cut short by log lines.
#[derive(Default)]
struct Parser {
    tests: Vec<TestRun>,
    warnings: Vec<(usize, String)>,
    /// Rows of the open run whose algbw is not size / time: judged when the run ends,
    /// against its other rows.
    suspect: Vec<(usize, String)>,
    cur: Option<TestRun>,
    /// A test name seen on a command line before the test's own header.
    name_hint: Option<String>,
    version_hint: Option<String>,
    pending: Option<Pending>,
    /// The current run was opened by `# Collective test starting:` and has no `# nThread` yet.
    opened_by_name: bool,
}

impl Parser {
    /// The open run, opened at `line` when there is none.
    fn run(&mut self, line: usize) -> &mut TestRun {
        open(&mut self.cur, line, &mut self.name_hint, &mut self.version_hint)
    }

    /// Line `n`: a version in NCCL's log part, then the table part: a header or footer
    /// comment, the rest of a cut row, a row, a failure, a version line, or a command
    /// line naming the test.
    fn line(&mut self, n: usize, raw: &str) -> Result<(), ParseError> {
        let line = raw.trim_end();
        let (table_part, log_part) = split_log(line);
        if let Some(log) = log_part
            && let Some(v) = log.split("NCCL version ").nth(1)
        {
            set_version(&mut self.cur, &mut self.version_hint, v);
        }
        let t = table_part.trim();
        if t.is_empty() {
            return Ok(());
        }
        if let Some(rest) = t.strip_prefix('#') {
            if let Some(p) = self.pending.take() {
                return Err(incomplete(&p));
            }
            return self.comment(n, t, rest.trim());
        }
        if self.pending.is_some() {
            return self.rest_of_row(n, t);
        }
        if looks_like_row(t) {
            let fields: Vec<String> = t.split_whitespace().map(str::to_string).collect();
            if fields.len() >= ROW_FIELDS || log_part.is_none() {
                let row = parse_row(n, &fields)?;
                self.push_row(row, &fields);
            } else {
                self.pending = Some(Pending { line: n, fields });
            }
            return Ok(());
        }
        if row_shaped(t) {
            // A result row whose size or count is not a count (`-1`, `1e-300`): it would
            // otherwise pass for a line of text and vanish without a word.
            let f: Vec<&str> = t.split_whitespace().collect();
            self.warnings.push((
                n,
                format!(
                    "result row ignored: expected the size and count as unsigned integers, found `{}` and `{}`",
                    f[0], f[1]
                ),
            ));
            return Ok(());
        }
        if is_failure(t) {
            self.run(n).failures.push((n, t.to_string()));
            return Ok(());
        }
        if let Some(v) = t
            .strip_prefix("NCCL version ")
            .or_else(|| t.strip_prefix("RCCL version "))
        {
            set_version(&mut self.cur, &mut self.version_hint, v);
            return Ok(());
        }
        // A command line or job script naming the binary (`.../all_reduce_perf -b 8 ...`,
        // `EXEC_CMD=/opt/nccl-tests/bin/all_reduce_perf`).
        if let Some(name) = perf_binary(t) {
            match self.cur.as_mut() {
                Some(c) if c.rows.is_empty() && c.name.is_none() => c.name = Some(name),
                _ => self.name_hint = Some(name),
            }
        }
        Ok(())
    }

    /// A comment line `t` (`rest` after the `#`): the header and footer lines that open
    /// and close runs and carry their parameters, ranks, bounds and averages.
    fn comment(&mut self, n: usize, t: &str, rest: &str) -> Result<(), ParseError> {
        if let Some(name) = rest.strip_prefix("Collective test starting:") {
            finish(
                &mut self.tests,
                self.cur.take(),
                &mut self.warnings,
                &mut self.suspect,
            );
            let mut run = TestRun::new(n);
            run.name = Some(name.trim().to_string());
            run.nccl_version = self.version_hint.take();
            self.cur = Some(run);
            self.opened_by_name = true;
            self.name_hint = None;
        } else if rest.starts_with("nThread") {
            let params = parse_params(rest).map_err(|m| ParseError { line: n, message: m })?;
            if !(self.opened_by_name && self.cur.as_ref().is_some_and(|c| c.params.is_none())) {
                finish(
                    &mut self.tests,
                    self.cur.take(),
                    &mut self.warnings,
                    &mut self.suspect,
                );
                let mut run = TestRun::new(n);
                run.name = self.name_hint.take();
                run.nccl_version = self.version_hint.take();
                self.cur = Some(run);
            }
            self.opened_by_name = false;
            self.cur.as_mut().expect("opened above").params = Some(params);
        } else if let Some(r) = rest.strip_prefix("Rank") {
            let rank = parse_rank(r).map_err(|m| ParseError { line: n, message: m })?;
            self.run(n).ranks.push(rank);
        } else if let Some(r) = rest.strip_prefix("Reducing maxBytes to") {
            let v = r.split_whitespace().next().and_then(|x| x.parse().ok());
            self.run(n).max_bytes_reduced_to = v;
        } else if let Some(r) = rest.strip_prefix("Out of bounds values") {
            let v = r.trim_start_matches([' ', ':']).split_whitespace().next();
            let v = v.and_then(|x| x.parse().ok()).ok_or_else(|| ParseError {
                line: n,
                message: format!("expected `# Out of bounds values : <count> OK`, found `{t}`"),
            })?;
            self.run(n).out_of_bounds = Some(v);
        } else if let Some(r) = rest.strip_prefix("Avg bus bandwidth") {
            let v = r.trim_start_matches([' ', ':']).trim();
            let v = v.parse::<f64>().map_err(|_| ParseError {
                line: n,
                message: format!("expected `# Avg bus bandwidth : <GB/s>`, found `{t}`"),
            })?;
            self.run(n).avg_busbw_gbs = Some(v);
        } else if rest.starts_with("Collective test concluded") {
            finish(
                &mut self.tests,
                self.cur.take(),
                &mut self.warnings,
                &mut self.suspect,
            );
            self.opened_by_name = false;
        } else if let Some(r) = rest.strip_prefix("nccl-tests version") {
            // `# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902`:
            // the library version is the NCCL that ran.
            if let Some(code) = r
                .split_whitespace()
                .find_map(|w| w.strip_prefix("nccl-library="))
                .and_then(|c| c.parse::<u32>().ok())
            {
                // NCCL_VERSION_CODE = major x 10000 + minor x 100 + patch.
                self.version_hint = Some(format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100));
            }
        }
        Ok(())
    }

    /// Line `n` (`t`) while a row interrupted by log lines is pending: a failure ends
    /// it unfinished (with a warning), anything else is more of its fields, and once
    /// it has them all it is a row of its own line.
    fn rest_of_row(&mut self, n: usize, t: &str) -> Result<(), ParseError> {
        let p = self.pending.as_mut().expect("a row is pending");
        if is_failure(t) {
            // The run died in the middle of a size: the row will never be finished.
            self.warnings.push((
                p.line,
                format!(
                    "result row for size {} never finished: the test failed",
                    p.fields[0]
                ),
            ));
            self.pending = None;
            self.run(n).failures.push((n, t.to_string()));
            return Ok(());
        }
        // The rest of a row interrupted by log lines.
        p.fields.extend(t.split_whitespace().map(str::to_string));
        if p.fields.len() >= ROW_FIELDS {
            let p = self.pending.take().expect("pending");
            let row = parse_row(p.line, &p.fields)?;
            self.push_row(row, &p.fields);
        }
        Ok(())
    }

    /// A parsed row joins its run when its numbers agree with each other; a row that
    /// breaks nccl-tests' own arithmetic is an input problem at its line, not a result.
    fn push_row(&mut self, row: Row, fields: &[String]) {
        match row_arithmetic(&row, fields) {
            Ok(None) => self.run(row.line).rows.push(row),
            Ok(Some(why)) => {
                self.suspect.push((row.line, why));
                self.run(row.line).rows.push(row);
            }
            Err(why) => self
                .warnings
                .push((row.line, format!("result row ignored: {why}"))),
        }
    }

    /// The report: a row still pending is a warning, and the open run is finished.
    fn end(mut self) -> Report {
        if let Some(p) = self.pending {
            self.warnings.push((
                p.line,
                format!(
                    "result row for size {} is unfinished at the end of the file",
                    p.fields[0]
                ),
            ));
        }
        finish(&mut self.tests, self.cur, &mut self.warnings, &mut self.suspect);
        self.warnings.sort_by_key(|w| w.0);
        Report {
            tests: self.tests,
            warnings: self.warnings,
        }
    }
}

/// An explicit `NCCL version 2.23.4+cuda12.6` line: belongs to the open run unless that
/// already has its rows (then it announces the next run); it is more precise than the
/// header's library code, so it replaces it.
fn set_version(cur: &mut Option<TestRun>, hint: &mut Option<String>, text: &str) {
    let v = text.split_whitespace().next().unwrap_or("").to_string();
    match cur.as_mut() {
        Some(c) if c.rows.is_empty() => c.nccl_version = Some(v),
        _ => *hint = Some(v),
    }
}

fn is_failure(t: &str) -> bool {
    t.contains("Test NCCL failure") || t.contains("Test failure") || t.contains("Test CUDA failure")
}

fn incomplete(p: &Pending) -> ParseError {
    ParseError {
        line: p.line,
        message: format!(
            "result row has {} fields where {ROW_FIELDS} were expected (size count type redop root, then time algbw busbw #wrong for out-of-place and in-place)",
            p.fields.len()
        ),
    }
}

fn open<'a>(
    cur: &'a mut Option<TestRun>,
    line: usize,
    name_hint: &mut Option<String>,
    version_hint: &mut Option<String>,
) -> &'a mut TestRun {
    cur.get_or_insert_with(|| {
        let mut t = TestRun::new(line);
        t.name = name_hint.take();
        t.nccl_version = version_hint.take();
        t
    })
}

fn finish(
    tests: &mut Vec<TestRun>,
    run: Option<TestRun>,
    warnings: &mut Vec<(usize, String)>,
    suspect: &mut Vec<(usize, String)>,
) {
    let suspect = std::mem::take(suspect);
    let Some(mut run) = run else { return };
    // A row whose algbw is not size / time is an input problem when the run's other
    // rows agree with nccl-tests' formula; when most do not, the log computes its
    // bandwidth otherwise (`-C 1` reports CPU time beside GPU-timed bandwidths, the
    // hypercube test counts (n-1)/n of the size, all_gather logs before nccl-tests'
    // 2020 change divided differently) and no row is singled out.
    if !suspect.is_empty() && suspect.len() * 2 < run.rows.len() {
        run.rows
            .retain(|r| match suspect.iter().find(|(l, _)| *l == r.line) {
                Some((l, why)) => {
                    warnings.push((
                        *l,
                        format!("result row ignored: {why}, as the run's other rows are"),
                    ));
                    false
                }
                None => true,
            });
    }
    if run.rows.is_empty() && run.ranks.is_empty() && run.params.is_none() && run.failures.is_empty() {
        return;
    }
    run.collective = run.name.as_deref().and_then(Coll::from_test_name);
    if run.collective.is_none() {
        run.collective = infer_collective(&run);
        run.collective_inferred = run.collective.is_some();
    }
    bus_arithmetic(&mut run, warnings);
    tests.push(run);
}

/// The half unit of the last digit `tok` was printed with: how far the true value may
/// be from it. nccl-tests prints times with two decimals, then one from 10^4 µs, none
/// from 10^5, and an exponent from 10^7 (`1.0e+07`: 5e5); bandwidths with two decimals.
fn printed_half_unit(tok: &str) -> f64 {
    let (mantissa, exp) = match tok.find(['e', 'E']) {
        Some(i) => (&tok[..i], tok[i + 1..].parse::<i32>().unwrap_or(0)),
        None => (tok, 0),
    };
    let decimals = mantissa.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
    0.5 * 10f64.powi(exp - decimals)
}

/// The smallest time nccl-tests prints other than 0.00: two decimals below 10^4 µs
/// (`time_field`), so anything under half a hundredth is not a printed time.
const MIN_PRINTED_TIME_US: f64 = 0.005;

/// nccl-tests' own arithmetic within one row: each placement's time is above 0 and its
/// algorithm bandwidth is size / time (GB/s = bytes / µs / 1e3), within the rounding
/// of the printed time and bandwidth (twice it, as the bounds of both add up; every
/// row of the fixtures stays within the bound without the factor 2).
fn row_arithmetic(row: &Row, fields: &[String]) -> Result<Option<String>, String> {
    for (which, m, o) in [
        ("out-of-place", &row.out_of_place, LEAD_FIELDS),
        ("in-place", &row.in_place, LEAD_FIELDS + 4),
    ] {
        let (time_tok, algbw_tok) = (fields[o].as_str(), fields[o + 1].as_str());
        if m.time_us < MIN_PRINTED_TIME_US {
            return Err(format!(
                "time {time_tok} us ({which}) for {} bytes: nccl-tests prints no time below 0.01 us, and never times a collective at 0",
                row.size_bytes
            ));
        }
        let computed = row.size_bytes as f64 / m.time_us / 1e3;
        let tol = 2.0 * (printed_half_unit(algbw_tok) + computed * printed_half_unit(time_tok) / m.time_us);
        if (m.algbw_gbs - computed).abs() > tol {
            return Ok(Some(format!(
                "algbw {algbw_tok} GB/s ({which}) is not size / time = {} B / {time_tok} us = {} GB/s",
                row.size_bytes,
                xirang_fabric::limits::Num((computed * 100.0).round() / 100.0)
            )));
        }
    }
    Ok(None)
}

/// The half unit of the last digit nccl-tests prints a bandwidth of `v` GB/s with: it
/// fits six characters (`getFloatStr`), so two decimals below 1,000, one below 10,000,
/// none above.
fn bandwidth_half_unit(v: f64) -> f64 {
    if v < 1_000.0 {
        0.005
    } else if v < 10_000.0 {
        0.05
    } else {
        0.5
    }
}

/// size = count x the type's bytes (x the ranks for the collectives whose count is one
/// rank's share: AllGather, ReduceScatter, AllToAll), judged like the bus factor: only
/// against a majority of the run's rows that agree.
fn count_arithmetic(run: &mut TestRun, c: Coll, n: u32, warnings: &mut Vec<(usize, String)>) {
    let k = match c {
        Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => u64::from(n),
        _ => 1,
    };
    // None: the type is unknown; Some(None): the product is beyond any size.
    let expected =
        |r: &Row| dtype_bytes(&r.dtype).map(|b| r.count.checked_mul(b).and_then(|x| x.checked_mul(k)));
    let bad = |r: &Row| expected(r).is_some_and(|e| e != Some(r.size_bytes));
    let n_bad = run.rows.iter().filter(|r| bad(r)).count();
    let known = run.rows.iter().filter(|r| expected(r).is_some()).count();
    if n_bad == 0 || n_bad * 2 >= known {
        return;
    }
    run.rows.retain(|r| {
        if !bad(r) {
            return true;
        }
        warnings.push((
            r.line,
            format!(
                "result row ignored: size {} B is not count {} x {} B ({}){}, as the run's other rows are",
                r.size_bytes,
                r.count,
                dtype_bytes(&r.dtype).unwrap_or(0),
                r.dtype,
                if k > 1 {
                    format!(" x {k} ranks")
                } else {
                    String::new()
                }
            ),
        ));
        false
    });
}

/// busbw = algbw x the collective's factor at the run's rank count, within the printed
/// rounding. Only judged when most rows of the run agree: the rank count is read from
/// the `# Rank` lines, and a log that lists a few ranks (or a collective told from its
/// name wrongly) would otherwise condemn every row; rows against that majority are
/// input problems and leave the run.
fn bus_arithmetic(run: &mut TestRun, warnings: &mut Vec<(usize, String)>) {
    let (Some(c), Some(n)) = (run.collective, run.nranks()) else {
        return;
    };
    count_arithmetic(run, c, n, warnings);
    let f = c.bus_factor(n);
    let fits = |m: &Measure| {
        (m.busbw_gbs - m.algbw_gbs * f).abs()
            <= 2.0 * (bandwidth_half_unit(m.busbw_gbs) + f * bandwidth_half_unit(m.algbw_gbs))
    };
    let bad = |r: &Row| !(fits(&r.out_of_place) && fits(&r.in_place));
    let n_bad = run.rows.iter().filter(|r| bad(r)).count();
    if n_bad == 0 || n_bad * 2 >= run.rows.len() {
        return;
    }
    run.rows.retain(|r| {
        if !bad(r) {
            return true;
        }
        let m = if fits(&r.out_of_place) { &r.in_place } else { &r.out_of_place };
        warnings.push((
            r.line,
            format!(
                "result row ignored: busbw {:.2} GB/s is not algbw {:.2} x {f:.3} ({c:?}, {n} ranks) = {:.2} GB/s, as the run's other rows are",
                m.busbw_gbs,
                m.algbw_gbs,
                m.algbw_gbs * f
            ),
        ));
        false
    });
}

/// Only AllReduce can be told from its rows alone: a reduction, no root, count x type size
/// = size, and bus/algorithm bandwidth = 2(n-1)/n, which differs from every other
/// collective's factor only beyond two ranks (`sendrecv_perf` also prints `sum`). Other
/// collectives stay unknown.
fn infer_collective(run: &TestRun) -> Option<Coll> {
    let n = run.nranks().filter(|n| *n > 2)?;
    let row = run.rows.iter().rev().find(|r| r.out_of_place.algbw_gbs > 1.0)?;
    let reduces = row.redop != "none" && row.root < 0;
    let whole = dtype_bytes(&row.dtype).is_some_and(|b| b * row.count == row.size_bytes);
    (reduces && whole && bus_factor_fits(row, Coll::AllReduce.bus_factor(n))).then_some(Coll::AllReduce)
}

/// The row's bus/algorithm bandwidth ratio equals `factor` (a collective's at the run's
/// rank count), within the rounding of two printed decimals.
pub fn bus_factor_fits(row: &Row, factor: f64) -> bool {
    let (alg, bus) = (row.out_of_place.algbw_gbs, row.out_of_place.busbw_gbs);
    let tol = 0.01 / alg.min(bus).max(0.01) * 2.0 + 1e-3;
    (bus / alg / factor - 1.0).abs() < tol
}

fn dtype_bytes(t: &str) -> Option<u64> {
    Some(match t {
        "int8" | "uint8" | "char" | "f8e4m3" | "f8e5m2" => 1,
        "half" | "bfloat16" | "float16" => 2,
        "int32" | "uint32" | "int" | "float" | "float32" => 4,
        "int64" | "uint64" | "double" | "float64" => 8,
        _ => return None,
    })
}

/// A name ending in `_perf` (or `_perf_mpi`) anywhere in a non-comment line.
fn perf_binary(t: &str) -> Option<String> {
    t.split(|c: char| c.is_whitespace() || c == '/' || c == '=')
        .find(|w| {
            let w = w.trim_end_matches("_mpi");
            w.ends_with("_perf") && w.len() > 5 && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(str::to_string)
}

/// A row starts with two unsigned integers (size and count).
/// A line with a result row's shape (its field count, numbers in the numeric columns)
/// whichever numbers they are.
fn row_shaped(t: &str) -> bool {
    let f: Vec<&str> = t.split_whitespace().collect();
    f.len() == ROW_FIELDS
        && [0, 1, 4, 5, 6, 7, 9, 10, 11]
            .iter()
            .all(|&i| f[i].parse::<f64>().is_ok() || f[i].eq_ignore_ascii_case("nan"))
}

fn looks_like_row(t: &str) -> bool {
    let mut it = t.split_whitespace();
    let is_uint = |w: Option<&str>| w.is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()));
    is_uint(it.next()) && is_uint(it.next())
}

/// Splits a line into the part that belongs to the table and an NCCL log message
/// (`host:pid:tid [dev] NCCL INFO ...`) glued to it or filling it.
fn split_log(line: &str) -> (&str, Option<&str>) {
    let Some(at) = line.find("] NCCL ").or_else(|| line.find("] RCCL ")) else {
        return (line, None);
    };
    let Some(open_br) = line[..at].rfind('[') else {
        return (line, None);
    };
    // Walk back over `host:pid:tid ` before `[dev]`.
    let before = line[..open_br].trim_end();
    let start = before.rfind(char::is_whitespace).map_or(0, |s| s + 1);
    let tag = &before[start..];
    let mut parts = tag.rsplitn(3, ':');
    let (tid, pid, host) = (parts.next(), parts.next(), parts.next());
    let digits = |s: Option<&str>| s.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    if !(digits(tid) && digits(pid) && host.is_some_and(|h| !h.is_empty())) {
        return (line, None);
    }
    let host = host.expect("checked");
    // A row's root field glued to the host name (`-1gcn151:...`): nccl-tests prints the
    // root right before running the size, and the log line follows without a newline.
    let table = &line[..start];
    if table.split_whitespace().count() == LEAD_FIELDS - 1
        && let Some(root_len) = glued_root(host)
    {
        let end = start + root_len;
        return (&line[..end], Some(&line[end..]));
    }
    (table, Some(&line[start..]))
}

/// Length of a root field (`-1` or a rank) at the start of a glued host name, if any.
fn glued_root(host: &str) -> Option<usize> {
    let b = host.as_bytes();
    let sign = usize::from(b.first() == Some(&b'-'));
    let digits = b[sign..].iter().take_while(|c| c.is_ascii_digit()).count();
    // The shortest reading: -1 (the common case) or a single-digit rank; a hostname that
    // itself starts with digits is ambiguous and the shortest reading keeps the host whole
    // enough to be skipped.
    (digits > 0 && sign + 1 < b.len()).then_some(sign + 1)
}

fn parse_row(line: usize, f: &[String]) -> Result<Row, ParseError> {
    let err = |message: String| ParseError { line, message };
    if f.len() != ROW_FIELDS {
        return Err(err(format!(
            "result row has {} fields where {ROW_FIELDS} were expected (size count type redop root, then time algbw busbw #wrong for out-of-place and in-place)",
            f.len()
        )));
    }
    let uint = |i: usize, what: &str| {
        f[i].parse::<u64>().map_err(|_| {
            err(format!(
                "expected {what} (an unsigned integer) in column {}, found `{}`",
                i + 1,
                f[i]
            ))
        })
    };
    let num = |i: usize, what: &str| {
        f[i].parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| {
                err(format!(
                    "expected {what} (a number) in column {}, found `{}`",
                    i + 1,
                    f[i]
                ))
            })
    };
    let wrong = |i: usize| -> Result<Option<u64>, ParseError> {
        if f[i] == "N/A" {
            Ok(None)
        } else {
            uint(i, "#wrong").map(Some)
        }
    };
    let measure = |o: usize| -> Result<Measure, ParseError> {
        Ok(Measure {
            time_us: num(o, "a time in us")?,
            algbw_gbs: num(o + 1, "algbw in GB/s")?,
            busbw_gbs: num(o + 2, "busbw in GB/s")?,
            wrong: wrong(o + 3)?,
        })
    };
    let root = f[4].parse::<i64>().map_err(|_| {
        err(format!(
            "expected the root rank (an integer) in column 5, found `{}`",
            f[4]
        ))
    })?;
    Ok(Row {
        line,
        size_bytes: uint(0, "the size in bytes")?,
        count: uint(1, "the element count")?,
        dtype: f[2].clone(),
        redop: f[3].clone(),
        root,
        out_of_place: measure(LEAD_FIELDS)?,
        in_place: measure(LEAD_FIELDS + 4)?,
    })
}

/// `nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...`
fn parse_params(rest: &str) -> Result<Params, String> {
    let w: Vec<&str> = rest.split_whitespace().collect();
    let after = |key: &str| -> Result<&str, String> {
        w.iter()
            .position(|x| *x == key)
            .and_then(|i| w.get(i + 1).copied())
            .ok_or_else(|| format!("expected `{key}` in the `# nThread` line"))
    };
    let num = |key: &str| -> Result<u64, String> {
        let v = after(key)?;
        v.parse()
            .map_err(|_| format!("expected a number after `{key}`, found `{v}`"))
    };
    let step_s = after("step:")?;
    let step = if let Some(f) = step_s.strip_suffix("(factor)") {
        Step::Factor(f.parse().map_err(|_| format!("bad step factor `{step_s}`"))?)
    } else if let Some(b) = step_s.strip_suffix("(bytes)") {
        Step::Bytes(b.parse().map_err(|_| format!("bad step increment `{step_s}`"))?)
    } else {
        return Err(format!(
            "expected `step: N(factor)` or `step: N(bytes)`, found `{step_s}`"
        ));
    };
    // `warmup iters: 5 iters: 20`: the first `iters:` is the warm-up's.
    let iters: Vec<u32> = w
        .iter()
        .enumerate()
        .filter(|(_, x)| **x == "iters:")
        .filter_map(|(i, _)| w.get(i + 1).and_then(|v| v.parse().ok()))
        .collect();
    Ok(Params {
        threads: num("nThread")? as u32,
        gpus: num("nGpus")? as u32,
        min_bytes: num("minBytes")?,
        max_bytes: num("maxBytes")?,
        step,
        warmup_iters: iters.first().copied().unwrap_or(0),
        iters: iters.get(1).copied().unwrap_or(0),
    })
}

/// ` 0 Group  0 Pid 4180122 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3`
fn parse_rank(r: &str) -> Result<Rank, String> {
    let w: Vec<&str> = r.split_whitespace().collect();
    let bad = || {
        format!(
            "expected `#  Rank <n> Group <g> Pid <pid> on <host> device <d> [<bus>] <model>`, found `Rank{r}`"
        )
    };
    let rank = w.first().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let on = w.iter().position(|x| *x == "on").ok_or_else(bad)?;
    let host = w.get(on + 1).ok_or_else(bad)?.to_string();
    let dev = w.iter().position(|x| *x == "device").ok_or_else(bad)?;
    let device = w.get(dev + 1).and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let bus = w.get(dev + 2).ok_or_else(bad)?;
    let bus_id = bus.trim_start_matches('[').trim_end_matches(']').to_string();
    let gpu = (w.len() > dev + 3).then(|| w[dev + 3..].join(" "));
    Ok(Rank {
        rank,
        host,
        device,
        bus_id,
        gpu,
    })
}
