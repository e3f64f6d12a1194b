//! A simulated run served live: rates are the simulated ones at any dilation, passes
//! carry on, levels are not scaled, and counters missing from the series are served as 0.

use xirang_monitor::replay::{Live, Replay};
use xirang_telemetry::CounterValue;

fn cv(entity: &str, name: &str, value: u64) -> CounterValue {
    CounterValue {
        entity: entity.into(),
        name: name.into(),
        value,
    }
}

fn value(v: &[CounterValue], name: &str) -> u64 {
    v.iter().find(|c| c.name == name).unwrap().value
}

#[test]
fn rates_are_the_simulated_ones_and_passes_carry_on() {
    // 1,000 words at 1 µs, 3,000 at 2 µs; the run is 4 µs long. The link rate is a level.
    let replay = Replay {
        rounds: vec![
            (
                1_000,
                vec![
                    cv("h0/mlx5_0/1", "port_xmit_data", 1_000),
                    cv("h0/mlx5_0/1", "rate", 100),
                ],
            ),
            (
                2_000,
                vec![
                    cv("h0/mlx5_0/1", "port_xmit_data", 3_000),
                    cv("h0/mlx5_0/1", "rate", 100),
                ],
            ),
        ],
    };
    let every = [cv("h0/mlx5_0/1", "tx_prio3_pause_duration", 0)];
    let d = 1_000;
    let live = Live::new(replay, &every, 4_000, d).unwrap();
    assert_eq!(live.period_ns(), 4_000);
    // Before the first sample: 0. Within the first pass: the sample, times d.
    assert_eq!(value(&live.values_at(500 * d), "port_xmit_data"), 0);
    assert_eq!(value(&live.values_at(1_500 * d), "port_xmit_data"), 1_000 * d);
    // 2.5 passes in: two whole runs and the sample at 1 µs of the third.
    assert_eq!(
        value(&live.values_at(9_500 * d), "port_xmit_data"),
        (2 * 3_000 + 1_000) * d
    );
    // The average rate over whole passes is the run's: 3,000 words per 4 µs of
    // simulation, per 4 ms of wall time at d = 1000 times d.
    let per_pass = value(&live.values_at(12_000 * d), "port_xmit_data")
        - value(&live.values_at(8_000 * d), "port_xmit_data");
    assert_eq!(per_pass, 3_000 * d);
    // The level is served as it is, and the counter the series never listed is there.
    let v = live.values_at(9_500 * d);
    assert_eq!(value(&v, "rate"), 100);
    assert_eq!(value(&v, "tx_prio3_pause_duration"), 0);
}

#[test]
fn bad_dilations_and_empty_runs_are_refused() {
    let one = Replay {
        rounds: vec![(1, vec![cv("h0/mlx5_0/1", "port_xmit_data", 1)])],
    };
    assert!(
        Live::new(one.clone(), &[], 10, 0)
            .unwrap_err()
            .contains("expected a dilation")
    );
    assert!(
        Live::new(Replay::default(), &[], 10, 10)
            .unwrap_err()
            .contains("no counter samples")
    );
    assert!(Live::new(one, &[], 10, 10).is_ok());
}
