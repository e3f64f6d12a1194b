//! `pg_profile_lookup.ini`: the per-HWSKU table buffermgrd uses (static buffer model) to create
//! `pg_lossless_<speed>_<cable>_profile` from a port's speed and cable length. The audit needs
//! it because such configs list no lossless BUFFER_PG profiles at all: they appear at runtime.

use std::path::Path;

use serde::Serialize;

use super::SonicError;

/// One row of a `pg_profile_lookup.ini`: the lossless PG profile for a speed and cable length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PgProfileLookup {
    /// Port speed in Mb/s.
    pub speed_mbps: u64,
    /// Cable length in metres.
    pub cable_m: u32,
    /// Reserved PG buffer in bytes (`size`).
    pub size_bytes: u64,
    /// XON threshold in bytes.
    pub xon_bytes: u64,
    /// XOFF headroom in bytes.
    pub xoff_bytes: u64,
    /// `dynamic_th` of the generated profile.
    pub threshold: i8,
    /// `xon_offset` in bytes, for platforms whose table has that seventh column.
    pub xon_offset_bytes: Option<u64>,
}

/// Parses a `pg_profile_lookup.ini` (whitespace-separated columns
/// `speed cable size xon xoff threshold [xon_offset]`, `#` comments).
pub fn parse_pg_profile_lookup(text: &str) -> Result<Vec<PgProfileLookup>, SonicError> {
    let mut rows = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let err = |expected: &str| SonicError::PgLookup {
            line,
            expected: expected.to_owned(),
            found: content.chars().take(80).collect(),
        };
        let cols: Vec<&str> = content.split_whitespace().collect();
        if !(6..=7).contains(&cols.len()) {
            return Err(err(
                "6 or 7 columns: speed cable size xon xoff threshold [xon_offset]",
            ));
        }
        let num = |idx: usize, what: &str| cols[idx].parse::<u64>().map_err(|_| err(what));
        let cable_m = cols[1]
            .strip_suffix('m')
            .unwrap_or(cols[1])
            .parse::<u32>()
            .map_err(|_| err("a cable length such as 5m in column 2"))?;
        rows.push(PgProfileLookup {
            speed_mbps: num(0, "a speed in Mb/s in column 1")?,
            cable_m,
            size_bytes: num(2, "a size in bytes in column 3")?,
            xon_bytes: num(3, "an xon in bytes in column 4")?,
            xoff_bytes: num(4, "an xoff in bytes in column 5")?,
            threshold: cols[5]
                .parse::<i8>()
                .map_err(|_| err("a threshold in -128..=127 in column 6"))?,
            xon_offset_bytes: match cols.get(6) {
                Some(_) => Some(num(6, "an xon_offset in bytes in column 7")?),
                None => None,
            },
        });
    }
    Ok(rows)
}

/// Reads and parses a `pg_profile_lookup.ini`; errors are prefixed with `path`.
pub fn load_pg_profile_lookup(path: &Path) -> Result<Vec<PgProfileLookup>, SonicError> {
    let text = xirang_files::read_text(path, super::CONFIG_DB_LIMIT)?;
    parse_pg_profile_lookup(&text).map_err(|e| SonicError::InFile {
        path: path.to_path_buf(),
        inner: Box::new(e),
    })
}

/// The row for `speed_mbps` and `cable_m`, as buffermgrd would pick it (exact match only:
/// it does not interpolate, and a missing row means no lossless profile gets created).
pub fn find_pg_profile(rows: &[PgProfileLookup], speed_mbps: u64, cable_m: u32) -> Option<&PgProfileLookup> {
    rows.iter()
        .find(|r| r.speed_mbps == speed_mbps && r.cable_m == cable_m)
}
