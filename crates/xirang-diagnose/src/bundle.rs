//! The evidence bundle: one compressed archive with the report, the data it was drawn
//! from (counter windows or logs) and, on a live host, the kernel log lines that matter
//! (mlx5, PCIe AER, RDMA), for root-cause analysis later. Written atomically.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use xirang_host::tree::MemTree;

use crate::finding::{Finding, render_text};

/// Kernel log lines worth keeping (mlx5 driver, PCIe AER, RDMA core): the symptom
/// table's rows 2, 4, 13 and 14 point at them (docs/reference/diagnosis.md §2).
pub const KERNEL_PATTERNS: &[&str] = &[
    "mlx5",
    "AER",
    "PCIe Bus Error",
    "infiniband",
    "ib_core",
    "rdma",
    "Xid",
];

/// The kernel log lines matching [`KERNEL_PATTERNS`], from `dmesg`; an error saying why
/// when the log cannot be read (no permission, no dmesg).
pub fn kernel_log_lines() -> Result<Vec<String>, String> {
    let out = Command::new("dmesg")
        .arg("--ctime")
        .output()
        .map_err(|e| format!("dmesg: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dmesg exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(filter_kernel_lines(&String::from_utf8_lossy(&out.stdout)))
}

/// The lines of a kernel log that match [`KERNEL_PATTERNS`].
pub fn filter_kernel_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| KERNEL_PATTERNS.iter().any(|p| l.contains(p)))
        .map(String::from)
        .collect()
}

/// What goes into a bundle besides the findings.
#[derive(Debug)]
pub struct Contents {
    /// What was diagnosed (`prometheus http://...`, the log names).
    pub source: String,
    /// The command line.
    pub command: String,
    /// Data files: (path inside the archive, bytes).
    pub data: Vec<(String, Vec<u8>)>,
    /// Kernel log lines, or why there are none.
    pub kernel: Result<Vec<String>, String>,
    /// Unix ms when the diagnosis ran.
    pub created_ms: i64,
}

/// Writes the bundle: `manifest.json`, `report.txt`, `findings.json`, the data files,
/// and `kernel.log` when the kernel log could be read.
pub fn write(path: &Path, findings: &[Finding], c: &Contents) -> Result<(), String> {
    let mut t = MemTree::new("bundle");
    let mut files = vec!["manifest.json", "report.txt", "findings.json"];
    t.add_file("report.txt", render_text(findings).into_bytes());
    t.add_file(
        "findings.json",
        serde_json::to_vec_pretty(findings).map_err(|e| e.to_string())?,
    );
    for (p, bytes) in &c.data {
        t.add_file(p, bytes.clone());
        files.push(p);
    }
    let kernel = match &c.kernel {
        Ok(lines) => {
            t.add_file("kernel.log", (lines.join("\n") + "\n").into_bytes());
            files.push("kernel.log");
            json!({"lines": lines.len(), "patterns": KERNEL_PATTERNS})
        }
        Err(why) => json!({"unavailable": why}),
    };
    let manifest = json!({
        "created": xirang_telemetry::time::utc(c.created_ms),
        "command": c.command,
        "source": c.source,
        "findings": findings.len(),
        "files": files,
        "kernel_log": kernel,
        "xirang": env!("CARGO_PKG_VERSION"),
    });
    t.add_file(
        "manifest.json",
        serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?,
    );
    xirang_host::snapshot::write_archive(&t, path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::filter_kernel_lines;

    #[test]
    fn keeps_driver_and_aer_lines_only() {
        let log = "[Mon Dec  1 10:00:00 2026] usb 1-1: new device\n\
                   [Mon Dec  1 10:00:01 2026] mlx5_core 0000:19:00.0: mlx5_cmd_out_err:838: QUERY_VPORT failed\n\
                   [Mon Dec  1 10:00:02 2026] pcieport 0000:00:01.0: AER: Corrected error received: 0000:19:00.0\n\
                   [Mon Dec  1 10:00:03 2026] EXT4-fs (sda1): mounted\n";
        let got = filter_kernel_lines(log);
        assert_eq!(got.len(), 2);
        assert!(got[0].contains("mlx5_core") && got[1].contains("AER"));
    }
}
