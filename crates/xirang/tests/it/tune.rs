//! `xirang tune` through the binary: artifacts, refusal to overwrite, kill -9 and resume.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{root, run_expect};

const SCENARIO: &str = "crates/xirang-tune/test_data/incast-mice-resume.toml";

/// The result without the fields that describe the invocation rather than the search.
fn comparable(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("result.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("runs");
    o.remove("wall_s");
    v
}

fn rows(db: &std::path::Path) -> u64 {
    let Ok(c) = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return 0;
    };
    c.query_row("SELECT COUNT(*) FROM evals", [], |r| r.get::<_, i64>(0))
        .map_or(0, |n| n as u64)
}

/// Acceptance 3 of the tuner issue: kill -9 during a tune, then `--resume`: no completed
/// run is lost or run again, and the result equals an uninterrupted run's.
#[test]
fn a_killed_tune_resumes_to_the_same_result() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole");
    let (out, _) = run_expect(
        &["tune", SCENARIO, "--out", whole.to_str().unwrap(), "--quiet"],
        0,
    );
    // 54 for the search, the five baselines and the held-out seeds, 12 for the ablation (the
    // vendor and the configurations it tried, on two validation seeds), 18 for the
    // sensitivity sweeps (Kmin's four points and Kmax's five besides the recommended
    // value, on two held-out seeds).
    assert!(
        out.contains("16 candidates, 84 simulations run (0 read from the trial log)"),
        "{out}"
    );

    let cut = tmp.path().join("cut");
    let db = cut.join("trials.sqlite");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("xirang"))
        .current_dir(root())
        .args(["tune", SCENARIO, "--out", cut.to_str().unwrap(), "--quiet"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while rows(&db) < 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the tune never logged 10 runs"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the tune finished before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
    let logged = rows(&db);
    assert!((10..84).contains(&logged), "{logged} runs logged at the kill");

    // Without --resume the log is not overwritten.
    let (_, err) = run_expect(&["tune", SCENARIO, "--out", cut.to_str().unwrap(), "--quiet"], 1);
    assert!(err.contains("already exists: pass --resume"), "{err}");

    let (out, _) = run_expect(
        &[
            "tune",
            SCENARIO,
            "--out",
            cut.to_str().unwrap(),
            "--quiet",
            "--resume",
        ],
        0,
    );
    let ran = 84 - logged;
    assert!(
        out.contains(&format!(
            "16 candidates, {ran} simulations run ({logged} read from the trial log)"
        )),
        "{out}"
    );
    assert_eq!(rows(&db), 84);
    assert_eq!(comparable(&whole), comparable(&cut));
}

#[test]
fn resuming_another_tune_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    run_expect(&["tune", SCENARIO, "--out", dir, "--quiet", "--budget", "4"], 0);
    let (_, err) = run_expect(
        &[
            "tune",
            "crates/xirang-tune/test_data/incast-mice.toml",
            "--out",
            dir,
            "--quiet",
            "--resume",
        ],
        1,
    );
    assert!(
        err.contains("belongs to a different tune (scenario differs)"),
        "{err}"
    );
}

/// Every plot of the report, by name, in page order.
/// The report's plots, in order; the sensitivity sweeps (one per swept setting) come
/// between `pfc` and `correlation`.
const PLOTS: [&str; 7] = [
    "objective",
    "classes",
    "latency",
    "slowdown",
    "queues",
    "rates",
    "pfc",
];
/// Headless window: wide enough for the 960-pixel plots, tall enough for the whole page.
const WINDOW: (u32, u32) = (1024, 9000);

fn chromium() -> std::path::PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .expect("chromium is not installed: scripts/test.sh installs it (Debian package `chromium`)")
}

fn headless(html: &std::path::Path, profile: &std::path::Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .args(extra)
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap()
}

/// Acceptance 5 of the tuner issue: the HTML report renders in headless Chromium and
/// every plot draws: each has SVG shapes, and its box in the screenshot has the colours
/// of drawn series, not only white, grey and black.
#[test]
fn report_renders_in_headless_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tune");
    run_expect(
        &[
            "tune",
            "crates/xirang-tune/test_data/mini-mix.toml",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ],
        0,
    );
    let html = out.join("report.html");
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: nothing to fetch (SVG's xmlns is a name, not a download).
    for fetch in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(!page.contains(fetch), "the report loads something: {fetch}");
    }
    assert!(!page.contains("class=\"error\""), "a plot failed to draw");

    let dom = headless(&html, &tmp.path().join("p1"), &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    let json = dom
        .split("<pre id=\"plot-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no plot check in the rendered page:\n{dom}"));
    let plots: Vec<serde_json::Value> = serde_json::from_str(&json.replace("&quot;", "\"")).unwrap();
    let names: Vec<&str> = plots.iter().map(|p| p["name"].as_str().unwrap()).collect();
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let sweeps: Vec<String> = result["sensitivity"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("sweep {}", s["name"].as_str().unwrap()))
        .collect();
    // Every tier's Kmin and Kmax at least (mini-mix has leaves and spines).
    assert!(sweeps.len() >= 4, "{sweeps:?}");
    let expected: Vec<&str> = PLOTS
        .iter()
        .copied()
        .chain(sweeps.iter().map(String::as_str))
        .chain(["correlation"])
        .collect();
    assert_eq!(names, expected);
    // The page tells the guardrails, intervals, contributions and sweeps apart.
    for heading in [
        "Guardrails on held-out seeds",
        "What each change is worth",
        "How close to a cliff",
    ] {
        assert!(page.contains(heading), "no {heading:?} in the report");
    }

    let png_path = tmp.path().join("report.png");
    let shot = headless(
        &html,
        &tmp.path().join("p2"),
        &[&format!("--screenshot={}", png_path.display())],
    );
    assert!(png_path.exists(), "{}", String::from_utf8_lossy(&shot.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let (w, h) = (info.width as usize, info.height as usize);
    for p in &plots {
        let name = p["name"].as_str().unwrap();
        assert!(p["shapes"].as_u64().unwrap() > 30, "{name}: {p}");
        let (x0, y0) = (
            p["x"].as_f64().unwrap() as usize,
            p["y"].as_f64().unwrap() as usize,
        );
        let (pw, ph) = (
            p["w"].as_f64().unwrap() as usize,
            p["h"].as_f64().unwrap() as usize,
        );
        assert!(y0 + ph <= h && x0 + pw <= w, "{name} lies outside the screenshot");
        let mut coloured = 0;
        for y in y0..y0 + ph {
            for x in x0..x0 + pw {
                let i = (y * w + x) * channels;
                let (r, g, b) = (buf[i], buf[i + 1], buf[i + 2]);
                if r.max(g).max(b) - r.min(g).min(b) > 80 {
                    coloured += 1;
                }
            }
        }
        assert!(
            coloured > 150,
            "{name}: only {coloured} coloured pixels in its box"
        );
    }
}

/// `--time`: the search stops starting brackets once its budget is spent, and the
/// ablation, held-out evaluation and report still run (1 ms: only the first bracket).
#[test]
fn a_time_budget_stops_the_search_and_still_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("t");
    let (out, _) = run_expect(
        &[
            "tune",
            SCENARIO,
            "--out",
            out_dir.to_str().unwrap(),
            "--quiet",
            "--time",
            "1ms",
        ],
        0,
    );
    assert!(
        out.contains(
            "the search stopped after 1 of 4 brackets (4 candidates): its 1 ms time budget was spent"
        ),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("result.json")).unwrap()).unwrap();
    assert_eq!(v["candidates"].as_array().unwrap().len(), 4);
    assert!(v["verdict"]["outcome"].is_string());
    assert!(
        std::fs::read_to_string(out_dir.join("report.html"))
            .unwrap()
            .contains("the search stopped after 1 of 4 brackets")
    );
    let (_, err) = run_expect(
        &[
            "tune",
            SCENARIO,
            "--out",
            tmp.path().join("u").to_str().unwrap(),
            "--time",
            "soon",
        ],
        1,
    );
    assert!(
        err.contains("--time") && err.contains("expected a duration"),
        "{err}"
    );
}

/// Seeds of the check below: apart from the search's (1..), the held-out evaluation's
/// (1,000,001..) and the ablation's (2,000,001..), so that no step of the tune saw them.
const FRESH_SEED_OFFSET: u64 = 3_000_000;

/// Acceptances 1 and 2 of the trust issue on the default scenario (`xirang tune` with no
/// scenario): the recommendation keeps every class's guardrail on the held-out seeds, and
/// every change it keeps is significantly worse to revert on seeds no step of the tune
/// used (paired by seed against the recommendation, 95 % bootstrap interval above zero).
#[test]
fn the_default_recommendation_keeps_its_guardrails_and_only_changes_that_earn_their_place() {
    use rayon::prelude::*;
    use xirang_fabric::tune::{ParamValue, apply};
    use xirang_tune::eval::Evaluator;

    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("default");
    run_expect(&["tune", "--out", out.to_str().unwrap(), "--quiet"], 0);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(r["verdict"]["outcome"], "recommended", "{}", r["verdict"]);
    let guardrails = r["guardrails"].as_array().unwrap();
    assert!(!guardrails.is_empty());
    for g in guardrails {
        assert!(
            g["margin"].as_f64().unwrap() >= 0.0,
            "guardrail broken on the held-out seeds: {g}"
        );
    }

    let loaded = xirang_fabric::scenario::Scenario::load(&root().join("scenarios/default.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let tiers = loaded.fabric.tiers();
    let recommendation: Vec<(String, ParamValue)> =
        serde_json::from_value(r["recommendation"].clone()).unwrap();
    let kept = r["ablation"]["kept"].as_array().unwrap();
    assert!(!kept.is_empty());
    let eval = Evaluator::new(&loaded);
    let vendor = xirang_tune::space::baselines(&loaded)[0].config.clone();
    let seeds: Vec<u64> = (0..u64::from(loaded.scenario.tune.held_out_seeds))
        .map(|i| loaded.scenario.run.seed + FRESH_SEED_OFFSET + i)
        .collect();
    let recommended = apply(&loaded.scenario.config, &tiers, &recommendation).unwrap();
    let mut configs = vec![("recommended".to_string(), recommended)];
    for c in kept {
        let mut values = recommendation.clone();
        for s in c["settings"].as_array().unwrap() {
            let (name, vendor_value, _): (String, ParamValue, ParamValue) =
                serde_json::from_value(s.clone()).unwrap();
            values.iter_mut().find(|(n, _)| *n == name).unwrap().1 = vendor_value;
        }
        configs.push((
            c["name"].as_str().unwrap().to_string(),
            apply(&loaded.scenario.config, &tiers, &values).unwrap(),
        ));
    }
    // The vendor on every fresh seed, then every configuration, each scored against it.
    let refs: Vec<_> = seeds.par_iter().map(|s| eval.run(&vendor, *s, None)).collect();
    let jobs: Vec<(usize, usize)> = (0..configs.len())
        .flat_map(|c| (0..seeds.len()).map(move |s| (c, s)))
        .collect();
    let scores: Vec<f64> = jobs
        .par_iter()
        .map(|(c, s)| {
            let m = eval.run(&configs[*c].1, seeds[*s], Some(refs[*s].sim_us * 10.0));
            eval.score(&m, &refs[*s]).relative
        })
        .collect();
    let of = |c: usize| &scores[c * seeds.len()..(c + 1) * seeds.len()];
    for (c, (name, _)) in configs.iter().enumerate().skip(1) {
        let diffs: Vec<f64> = of(c).iter().zip(of(0)).map(|(a, b)| a - b).collect();
        let cost = xirang_tune::stats::mean_interval(&diffs, 7);
        assert!(
            cost.clearly_above_zero(),
            "reverting {name} is not significantly worse on fresh seeds: {}",
            cost.percent()
        );
    }
}

/// A scenario that sets `aggregate` gets the NIC layout comparison from `tune`: printed,
/// in `--json` as `nic_layout`, written to `nic-layout.json`, and noted in the
/// recommendation and `nccl.env`.
#[test]
fn tune_compares_nic_layouts_when_the_scenario_asks() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t");
    let (text, _) = run_expect(
        &[
            "tune",
            "crates/xirang-tune/test_data/lag-inference-small.toml",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--json",
        ],
        0,
    );
    // The result's own fields come first, in their order; the comparison after them.
    assert!(
        text.starts_with("{\n  \"search_stopped\""),
        "{}",
        &text[..200.min(text.len())]
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = &v["nic_layout"]["classes"][0];
    assert_eq!(c["class"], "inference");
    assert_eq!(c["winner"], "lag", "{c}");
    assert!(
        c["lag"]["member_down"].is_number() && c["independent"]["member_down"].is_null(),
        "{c}"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("nic-layout.json")).unwrap()).unwrap();
    assert_eq!(saved, v["nic_layout"]);
    for f in ["recommendation.toml", "nccl.env"] {
        let text = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(
            text.contains("# NIC layout, simulated both ways") && text.contains("#   inference: lag, "),
            "{f}: {text}"
        );
    }
}

/// `nccl advise --json` carries the comparison as `nic_layout`; without `aggregate` there is
/// none.
#[test]
fn nccl_advise_json_carries_the_layout_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let env = tmp.path().join("nccl.env");
    // Exit 1: the bonded hosts' warning is a finding, as in the text output.
    let (text, _) = run_expect(
        &[
            "nccl",
            "advise",
            "scenarios/nic-layout-inference.toml",
            "--out",
            env.to_str().unwrap(),
            "--json",
        ],
        1,
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["nic_layout"]["classes"][0]["winner"], "lag");
    assert_eq!(v["settings"][0]["value"], "=mlx5_bond_0:1");
    let v = crate::util::run_json(&[
        "nccl",
        "advise",
        "scenarios/default.toml",
        "--out",
        env.to_str().unwrap(),
        "--json",
    ]);
    assert!(v.get("nic_layout").is_none());
}
