//! The counter rules over the monitor's own history file.

use xirang_diagnose::source::from_history;
use xirang_diagnose::window::diagnose_window;
use xirang_monitor::history::{History, Retention, SeriesKey};

#[test]
fn a_symbol_error_ramp_in_the_history_is_a_link_finding() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    let t0: i64 = 1_796_130_000_000;
    {
        let mut h = History::open(&path, Retention::default()).unwrap();
        let bad = SeriesKey::new(
            "node_infiniband_symbol_error_total",
            [("device", "mlx5_1"), ("port", "1"), ("host", "h3")],
        );
        let good = SeriesKey::new(
            "node_infiniband_symbol_error_total",
            [("device", "mlx5_0"), ("port", "1"), ("host", "h3")],
        );
        let other = SeriesKey::new(
            "node_infiniband_port_packets_received_total",
            [("device", "mlx5_1"), ("port", "1"), ("host", "h3")],
        );
        for i in 0..120 {
            let ts = t0 + i * 10_000;
            let errs = if i < 60 { 2.0 } else { 2.0 + (i - 60) as f64 * 3.0 };
            h.append(
                ts,
                &[
                    (bad.clone(), errs),
                    (good.clone(), 5.0),
                    (other.clone(), i as f64 * 1e9),
                ],
            )
            .unwrap();
        }
    }
    let w = from_history(&path, t0, t0 + 1_200_000).unwrap();
    assert_eq!(
        w.series.len(),
        2,
        "only the rules' metrics are read: {:?}",
        w.series
    );
    let f = diagnose_window(&w);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0].rule, f[0].entity.as_str()), ("LINK-ERRORS", "h3/mlx5_1/1"));
    assert!(f[0].cause.contains("symbol_error +177"), "{}", f[0].cause);
    // The window before the ramp: nothing.
    let quiet = from_history(&path, t0, t0 + 590_000).unwrap();
    assert!(diagnose_window(&quiet).is_empty());
    // A missing file is an error naming it.
    let e = from_history(&dir.path().join("none.sqlite"), 0, 1).unwrap_err();
    assert!(
        e.to_string()
            .contains("none.sqlite: cannot read: No such file or directory"),
        "{e}"
    );
}
