//! Reader of perftest bandwidth reports (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`).
//!
//! The result table starts at a header line such as
//! ` #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]`
//! (some builds print fewer columns, bidirectional runs print the header twice) and
//! holds one row of numbers per message size; other lines (warnings such as
//! "Conflicting CPU frequency values detected", separators) may come in between.
//! Columns are found by their names, not their positions. perftest labels its unit
//! MB/sec; the value is kept as printed (gates compare ratios, so the unit cancels).

use thiserror::Error;

/// A perftest report problem.
#[derive(Debug, Error, PartialEq)]
pub enum PerftestError {
    /// No bandwidth table.
    #[error("no perftest bandwidth table: expected a header line with `#bytes` and `BW average[MB/sec]`")]
    NoTable,
    /// A latency report where a bandwidth one was expected.
    #[error("line {0}: this is a latency report (t_min/t_typical), expected a bandwidth test")]
    Latency(usize),
    /// A table without rows.
    #[error("line {0}: bandwidth header without any result row")]
    NoRows(usize),
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// 1-based line.
    pub line: usize,
    /// Message size.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// `BW peak`, in [`Row::unit`], when printed.
    pub bw_peak: Option<f64>,
    /// `BW average`, in [`Row::unit`] (`MB/sec`, or `Gb/sec` with `--report_gbits`).
    pub bw_average: f64,
    /// The unit in the header's brackets (`MB/sec`, `Gb/sec`).
    pub unit: String,
    /// `MsgRate[Mpps]`, when printed.
    pub msg_rate_mpps: Option<f64>,
}

/// Splits a header into column names, joining `BW peak[..]` / `BW average[..]`.
fn columns(header: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut join_next = false;
    for tok in header.split_whitespace() {
        if join_next {
            if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(tok);
            }
            join_next = false;
        } else {
            join_next = tok == "BW";
            out.push(tok.to_string());
        }
    }
    out
}

/// Reads every result row of every bandwidth table in `text`.
pub fn parse(text: &str) -> Result<Vec<Row>, PerftestError> {
    let mut rows = Vec::new();
    let mut cols: Option<(Vec<String>, usize)> = None;
    let mut seen_header = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("#bytes") {
            if t.contains("t_min") || t.contains("t_typical") {
                return Err(PerftestError::Latency(i + 1));
            }
            let c = columns(t);
            if c.iter().any(|c| c.starts_with("BW average")) {
                seen_header.get_or_insert(i + 1);
                cols = Some((c, i + 1));
            }
            continue;
        }
        let Some((c, _)) = &cols else { continue };
        let toks: Vec<&str> = t.split_whitespace().collect();
        if toks.len() != c.len() || toks.iter().any(|x| x.parse::<f64>().is_err()) {
            continue;
        }
        let get = |name: &str| {
            c.iter()
                .position(|x| x.starts_with(name))
                .and_then(|k| toks[k].parse::<f64>().ok())
        };
        let unit = c
            .iter()
            .find(|x| x.starts_with("BW average"))
            .and_then(|x| {
                x.split_once('[')
                    .map(|(_, u)| u.trim_end_matches(']').to_string())
            })
            .unwrap_or_default();
        let (Some(bytes), Some(iters), Some(avg)) = (get("#bytes"), get("#iterations"), get("BW average"))
        else {
            continue;
        };
        rows.push(Row {
            line: i + 1,
            bytes: bytes as u64,
            iterations: iters as u64,
            bw_peak: get("BW peak"),
            bw_average: avg,
            unit,
            msg_rate_mpps: get("MsgRate"),
        });
    }
    match (seen_header, rows.is_empty()) {
        (None, _) => Err(PerftestError::NoTable),
        (Some(l), true) => Err(PerftestError::NoRows(l)),
        _ => Ok(rows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Hand-written in perftest's layout (shared/fixtures holds no perftest capture).
    const WRITE_BW: &str = "\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 Conflicting CPU frequency values detected: 1496.133000 != 1529.788000. CPU Frequency is not max.
 2          5000             4.26               3.88           2.036842
 65536      5000             44326.24            44276.64                  0.708426
---------------------------------------------------------------------------------------
";

    #[test]
    fn reads_rows_by_column_name() {
        let rows = parse(WRITE_BW).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].bytes, 65536);
        assert_eq!(rows[1].bw_average, 44276.64);
        assert_eq!(rows[1].bw_peak, Some(44326.24));
        assert_eq!(rows[1].msg_rate_mpps, Some(0.708426));
        assert_eq!(rows[1].line, 9);
    }

    #[test]
    fn reads_the_short_header() {
        let t = "#bytes       #iterations       BW average[MB/sec]      MsgRate[Mpps]\n1048576      93205             23302.26                0.023302\n";
        let rows = parse(t).unwrap();
        assert_eq!(rows[0].bw_average, 23302.26);
        assert_eq!(rows[0].bw_peak, None);
        assert_eq!(rows[0].unit, "MB/sec");
        let g = "#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n65536 5000 354.1 354.0 0.67\n";
        assert_eq!(parse(g).unwrap()[0].unit, "Gb/sec");
    }

    #[test]
    fn refuses_latency_and_empty() {
        let lat =
            "#bytes #iterations    t_min[usec]    t_typical[usec]    t_avg[usec]\n2 1000 0.81 0.85 0.93\n";
        assert_eq!(parse(lat), Err(PerftestError::Latency(1)));
        assert_eq!(parse("hello\n"), Err(PerftestError::NoTable));
        assert_eq!(
            parse(" #bytes #iterations BW peak[MB/sec] BW average[MB/sec]\n----\n"),
            Err(PerftestError::NoRows(1))
        );
    }
}
