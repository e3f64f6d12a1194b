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

fn run(words_at_2us: u64, requests: &str) -> Live {
    let replay = Replay {
        rounds: vec![
            (1_000, vec![cv("h0/mlx5_0/1", "port_xmit_data", words_at_2us / 2)]),
            (2_000, vec![cv("h0/mlx5_0/1", "port_xmit_data", words_at_2us)]),
        ],
    };
    Live::new(replay, &[], 4_000, 1)
        .unwrap()
        .with_requests(requests, "requests.csv")
        .unwrap()
}

fn bucket(points: &[xirang_monitor::collect::Point], node: &str, le: &str) -> f64 {
    points
        .iter()
        .find(|p| {
            p.metric.name == "xirang_service_request_seconds_bucket"
                && p.metric.labels.contains(&("node", node.to_string()))
                && p.metric.labels.contains(&("le", le.to_string()))
        })
        .map_or(f64::NAN, |p| p.value)
}

#[test]
fn a_replaced_run_carries_the_counters_on() {
    use xirang_monitor::replay::Spliced;
    // Requests labelled by the host that answered them.
    let a = run(
        3_000,
        "end_us,workload,class,latency_us,client,server\n1.5,s,inference,50,h1/mlx5_0,h5/mlx5_0\n",
    );
    let b = run(
        1_000,
        "end_us,workload,class,latency_us,client,server\n1.5,s,inference,500,h1/mlx5_0,h6/mlx5_0\n",
    );
    let mut s = Spliced::new(a);
    // 1.25 passes of the first run: 3,000 words and its request, then the second pass's
    // sample at 1 µs (1,500 words) and not yet its request (at 1.5 µs).
    let (before, pb) = s.at(5_000);
    assert_eq!(value(&before, "port_xmit_data"), 4_500);
    assert_eq!(bucket(&pb, "h5", "+Inf"), 1.0);
    s.replace(b, 5_000);
    let (now, pn) = s.at(5_000);
    assert_eq!(value(&now, "port_xmit_data"), 4_500, "no jump at the change");
    assert_eq!(bucket(&pn, "h5", "+Inf"), 1.0, "a series the new run lacks stays");
    // One pass of the new run later: its 1,000 words and its one request on.
    let (later, pl) = s.at(9_000);
    assert_eq!(value(&later, "port_xmit_data"), 5_500);
    assert_eq!(bucket(&pl, "h6", "+Inf"), 1.0);
    assert_eq!(
        bucket(&pl, "h6", "0.00032"),
        0.0,
        "500 µs is above the 320 µs bucket"
    );
    assert_eq!(bucket(&pl, "h5", "+Inf"), 1.0);
}
