//! The simulator's output directory (`xirang sim --out DIR`): the one place that knows
//! its file names, writes it and opens it for reading. `xirang sim` writes it;
//! `xirang monitor --replay` and `xirang diagnose --sim-out` read it. The format of each
//! file is documented in docs/formats/sim-output.md.
//!
//! A directory is written whole or not at all, and replaces a previous run's only when
//! it holds nothing but [`FILES`] ([`xirang_files::OutputDir`]).

use std::path::{Path, PathBuf};

use xirang_files::{Limit, OutputDir, WriteError};

/// Flow completion times, the HPCC simulator's `fct.txt` format.
pub const FCT: &str = "fct.txt";
/// PFC pause and resume events, the HPCC simulator's `pfc.txt` format.
pub const PFC: &str = "pfc.txt";
/// Every flow's result and path (JSON).
pub const FLOWS: &str = "flows.json";
/// Every counter's final value: `entity,counter,value`.
pub const COUNTERS: &str = "counters.csv";
/// The cabling and nominal rates: `port_a,port_b,rate_gbps`.
pub const LINKS: &str = "links.csv";
/// The run's results (JSON), the same for any thread or rank count.
pub const SUMMARY: &str = "summary.json";
/// How the run went (JSON): wall time, speed, partitions.
pub const ENGINE: &str = "engine.json";
/// Sampled link rates (sampled runs only).
pub const RATES: &str = "rates.csv";
/// Sampled queue depths (sampled runs only).
pub const QUEUES: &str = "queues.csv";
/// Sampled counters, changes only: `time_us,entity,counter,value` (sampled runs only).
pub const COUNTERS_SERIES: &str = "counters_series.csv";

/// Answered requests: `end_us,workload,class,latency_us,client,server`, in order of
/// completion.
pub const REQUESTS: &str = "requests.csv";

/// Every file a run writes: a directory holding anything else is not a previous run's.
pub const FILES: [&str; 11] = [
    REQUESTS,
    FCT,
    PFC,
    FLOWS,
    COUNTERS,
    LINKS,
    SUMMARY,
    ENGINE,
    RATES,
    QUEUES,
    COUNTERS_SERIES,
];

/// Largest output file read: a sampled run of a large fabric writes series of hundreds
/// of MB; 4 GiB is the most a reader holds in memory.
pub const FILE_LIMIT: Limit = Limit::new(4 << 30, "simulator output file");

/// What a run writes, rendered.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// [`FCT`].
    pub fct: String,
    /// [`PFC`].
    pub pfc: String,
    /// [`FLOWS`].
    pub flows: String,
    /// [`COUNTERS`].
    pub counters: String,
    /// [`LINKS`].
    pub links: String,
    /// [`SUMMARY`].
    pub summary: String,
    /// [`ENGINE`].
    pub engine: String,
    /// [`REQUESTS`].
    pub requests: String,
    /// The sampled series, when the run was sampled.
    pub series: Option<Series>,
}

/// A sampled run's series.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// [`RATES`].
    pub rates: String,
    /// [`QUEUES`].
    pub queues: String,
    /// [`COUNTERS_SERIES`].
    pub counters: String,
}

/// Starts writing the output directory `dir` (nothing appears there until
/// [`OutputDir::commit`]); refuses a directory that holds anything but a run's files.
pub fn create(dir: &Path) -> Result<OutputDir, WriteError> {
    OutputDir::create(dir, &FILES)
}

/// Writes every file of `c` into `out`. Only a sampled run writes the series; the
/// directory is replaced whole, so a previous sampled run's series cannot pass for this
/// run's.
pub fn write(out: &OutputDir, c: &Contents) -> Result<(), WriteError> {
    for (name, text) in [
        (FCT, &c.fct),
        (PFC, &c.pfc),
        (FLOWS, &c.flows),
        (COUNTERS, &c.counters),
        (LINKS, &c.links),
        (SUMMARY, &c.summary),
        (ENGINE, &c.engine),
        (REQUESTS, &c.requests),
    ] {
        out.write(name, text.as_bytes())?;
    }
    if let Some(s) = &c.series {
        out.write(RATES, s.rates.as_bytes())?;
        out.write(QUEUES, s.queues.as_bytes())?;
        out.write(COUNTERS_SERIES, s.counters.as_bytes())?;
    }
    Ok(())
}

/// An output directory opened for reading.
#[derive(Debug, Clone)]
pub struct SimOut {
    dir: PathBuf,
}

/// A directory that is not a run's output, or a file of it that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SimOutError {
    /// The directory or file.
    pub path: String,
    /// What was expected.
    pub message: String,
}

impl SimOut {
    /// Opens `dir` if it holds a run's counters ([`COUNTERS_SERIES`] or [`COUNTERS`]).
    pub fn open(dir: &Path) -> Result<SimOut, SimOutError> {
        if !is_sim_output(dir) {
            return Err(SimOutError {
                path: dir.display().to_string(),
                message: format!("expected a `xirang sim --out` directory ({COUNTERS_SERIES} or {COUNTERS})"),
            });
        }
        Ok(SimOut {
            dir: dir.to_path_buf(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The run was sampled: it has [`COUNTERS_SERIES`].
    pub fn is_sampled(&self) -> bool {
        self.dir.join(COUNTERS_SERIES).is_file()
    }

    /// The counters: the series of a sampled run, else the final values, with the
    /// file's path and whether its rows carry a time.
    pub fn counters(&self) -> Result<(String, PathBuf, bool), SimOutError> {
        let sampled = self.is_sampled();
        let path = self.dir.join(if sampled { COUNTERS_SERIES } else { COUNTERS });
        let text = read(&path)?;
        Ok((text, path, sampled))
    }

    /// A file the run may have written ([`LINKS`], [`FLOWS`], ...), if present.
    pub fn optional(&self, name: &str) -> Result<Option<(String, PathBuf)>, SimOutError> {
        let path = self.dir.join(name);
        if !path.is_file() {
            return Ok(None);
        }
        Ok(Some((read(&path)?, path)))
    }
}

fn read(path: &Path) -> Result<String, SimOutError> {
    xirang_files::read_text(path, FILE_LIMIT).map_err(|e| SimOutError {
        path: path.display().to_string(),
        message: e.detail(),
    })
}

/// True when `dir` holds simulator output (its counters).
pub fn is_sim_output(dir: &Path) -> bool {
    dir.join(COUNTERS_SERIES).is_file() || dir.join(COUNTERS).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_directory_opens_and_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let out = create(&dir).unwrap();
        let c = Contents {
            counters: "entity,counter,value\nh0/mlx5_0/1,port_xmit_data,7\n".into(),
            links: "port_a,port_b,rate_gbps\n".into(),
            ..Contents::default()
        };
        write(&out, &c).unwrap();
        assert!(SimOut::open(&dir).is_err(), "nothing appears before the commit");
        out.commit().unwrap();
        let s = SimOut::open(&dir).unwrap();
        assert!(!s.is_sampled());
        let (text, path, timed) = s.counters().unwrap();
        assert_eq!(
            (text, path, timed),
            (c.counters.clone(), dir.join(COUNTERS), false)
        );
        assert_eq!(s.optional(LINKS).unwrap().map(|x| x.0), Some(c.links));
        assert_eq!(s.optional(RATES).unwrap(), None);
        // A directory of anything else is refused, by name.
        let e = SimOut::open(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("expected a `xirang sim --out` directory"), "{e}");
    }
}
