//! `xirang`: a thin command line over the Xirang crates. Parsing, glue, printing and exit
//! codes live here; everything testable lives in the libraries.

mod args;
mod audit;
mod bench;
mod calibrate;
mod cli;
mod cmd;
mod diagnose;
mod host;
mod layout;
mod memreg;
mod monitor;
#[cfg(feature = "mpi")]
mod mpi;
mod nccl;
mod plan;
mod rollout;
mod serving;
mod sim;
mod tune;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Exit status for a clean run.
const EXIT_OK: u8 = 0;
/// Exit status when the command found problems or failed.
const EXIT_FINDINGS: u8 = 1;

/// What a command reports back to `main`.
pub(crate) enum Outcome {
    /// Everything fine.
    Clean,
    /// The command ran and found problems (invalid scenario, failed check).
    Findings,
}

fn main() -> ExitCode {
    // clap exits with status 2 on usage errors by itself.
    let args = cli::Cli::parse();
    match cmd::run(args) {
        Ok(Outcome::Clean) => ExitCode::from(EXIT_OK),
        Ok(Outcome::Findings) => ExitCode::from(EXIT_FINDINGS),
        Err(e) => {
            // A closed pipe (`xirang ... | head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::from(EXIT_OK);
            }
            let _ = writeln!(std::io::stderr(), "error: {}", chain_message(&e));
            ExitCode::from(EXIT_FINDINGS)
        }
    }
}

/// The error and its causes, joined by `: ` as anyhow's `{:#}` does, but with a cause
/// left out when the message before it already says it: many errors put their cause in
/// their own message and return it as their `source` too, which would print it twice.
fn chain_message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
