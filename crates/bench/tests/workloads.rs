//! Short runs of the workloads that start a server (`rockbench`, `stream`, `http`) whose numbers
//! must be sane: every event sent is acknowledged and committed, percentiles are positive,
//! finite and ordered, CPU figures are plausible, and the charts are drawn.

use serde_json::{json, Value};

/// Runs `herald-bench <args>` (the binary under test; it starts the `herald` built next to it)
/// and returns its JSON output.
fn bench(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run herald-bench");
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "herald-bench {args:?} failed:\n{text}");
    for chart in ["latency", "distribution"].iter().flat_map(|c| {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(move |e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("{c}.svg"))
            })
    }) {
        let svg = std::fs::read_to_string(chart.path()).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
    }
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

/// A latency summary is sane: samples, and percentiles positive, finite and ordered.
#[track_caller]
fn sane(s: &Value, what: &str) {
    assert!(s["n"].as_u64().unwrap() > 0, "{what}: no samples: {s}");
    let q: Vec<f64> = ["p50_ms", "p95_ms", "p99_ms", "max_ms"]
        .iter()
        .map(|k| s[k].as_f64().unwrap_or(f64::NAN))
        .collect();
    assert!(q.iter().all(|v| v.is_finite() && *v > 0.0), "{what}: {s}");
    assert!(
        q.windows(2).all(|w| w[0] <= w[1]),
        "{what}: not ordered: {s}"
    );
}

fn check_rockbench(v: &Value) {
    let r = &v["result"];
    let (sent, applied, counted) = (
        r["sent"].as_u64(),
        r["applied"].as_u64(),
        r["counted"].as_u64(),
    );
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(sent, applied, "every event sent was acknowledged");
    assert_eq!(
        applied, counted,
        "events written = events the server committed"
    );
    let expected = v["options"]["rate"].as_f64().unwrap() * v["options"]["secs"].as_f64().unwrap();
    // A loaded machine may leave a debug build behind its schedule; most events must go out.
    assert!(
        sent.unwrap() as f64 >= expected * 0.5,
        "{sent:?} of {expected}"
    );
    assert!(r["achieved_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["peak_rss_kib"].as_u64().unwrap() > 0);
    // The server's CPU over the run: it parsed and stored events, so some, and no more than
    // the machine has.
    let cpu = &r["cpu"];
    let cores = cpu["server_cores"].as_f64().unwrap();
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(cores > 0.0 && cores <= machine + 0.5, "{cpu}");
    let per_event = cpu["server_cpu_ms_per_event"].as_f64().unwrap();
    assert!(per_event > 0.0 && per_event.is_finite(), "{cpu}");
    assert!(cpu["wall_secs"].as_f64().unwrap() >= v["options"]["secs"].as_f64().unwrap());
    let series = r["latency"].as_array().unwrap();
    sane(&series[0]["overall"], "pull");
    sane(&series[1]["overall"], "live");
    if v["options"]["via"] != "stream" {
        sane(&series[2]["overall"], "write ack");
    }
}

/// A short, low-rate `herald-bench rockbench` with `extra` options, checked for sanity.
fn rockbench(extra: &[&str]) -> Value {
    let mut args = vec![
        "rockbench",
        "--rate",
        "150",
        "--secs",
        "3",
        "--batch-ms",
        "50",
    ];
    args.extend_from_slice(&["--durability", "nosync"]);
    args.extend_from_slice(extra);
    let v = bench(&args);
    check_rockbench(&v);
    v
}

#[test]
fn rockbench_runs_fixed_over_websocket() {
    rockbench(&[]);
}

#[test]
fn rockbench_runs_over_one_streamed_bulk_request_per_generator() {
    rockbench(&["--via", "stream"]);
}

#[test]
fn rockbench_runs_bursty_with_overwrites_and_sparse_schemas_over_bulk() {
    let v = rockbench(&[
        "--shape",
        "50,200,50",
        "--overwrite",
        "0.3",
        "--sparse",
        "0.3",
        "--generators",
        "3",
        "--via",
        "bulk",
        "--cache-mib",
        "32",
    ]);
    assert_eq!(v["options"]["shape_pct"], json!([50.0, 200.0, 50.0]));
    assert_eq!(v["options"]["cache_mib"], json!(32));
    assert_eq!(
        v["result"]["target_per_interval"],
        json!([75.0, 300.0, 75.0])
    );
}

#[test]
fn stream_runs_every_pattern_with_and_without_subscribers() {
    let v = bench(&[
        "stream",
        "--cells",
        "300",
        "--windows",
        "2",
        "--source-docs",
        "1500",
        "--read-secs",
        "30",
        "--clients",
        "4",
        "--subscribers",
        "0,2",
        "--atomic",
        "--durability",
        "nosync",
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(v["options"]["atomic"], true);
    for r in runs {
        let ps = r["patterns"].as_array().unwrap();
        assert_eq!(ps.len(), 4);
        for p in ps {
            assert_eq!(p["check"], "ok", "{p}");
            assert!(p["tuples"].as_u64().unwrap() > 0, "{p}");
            assert!(p["tuples_per_sec"].as_f64().unwrap() > 0.0, "{p}");
            sane(&p["latency"], p["pattern"].as_str().unwrap());
        }
        assert_eq!(ps[0]["tuples"], 600, "300 cells x 2 windows");
        assert_eq!(ps[1]["tuples"], 1500, "the whole source copied");
        assert_eq!(ps[2]["tuples"], 1500, "as many reads as documents");
        assert_eq!(ps[3]["tuples"], 1500, "every document read once");
        assert!(r["peak_rss_kib"].as_u64().unwrap() > 0);
        assert!(r["cpu"]["server_cores"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        runs[1]["notifications"].as_u64().unwrap() > 0,
        "subscribers saw changes"
    );
}

#[test]
fn http_bench_runs_every_phase_with_sane_numbers() {
    let v = bench(&[
        "http",
        "--clients",
        "4",
        "--insert-secs",
        "1",
        "--read-secs",
        "1",
        "--range-docs",
        "500",
        "--range-secs",
        "1",
    ]);
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3, "{v}");
    for p in phases {
        // Point reads fetch documents the insert phase wrote, and range queries must return
        // exactly 100 documents, so errors would show a lost write or a wrong plan.
        assert!(p["ops"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(p["errors"].as_u64(), Some(0), "{p}");
        let l = &p["latency_ms"];
        let q: Vec<f64> = ["p50", "p99", "max"]
            .iter()
            .map(|k| l[k].as_f64().unwrap())
            .collect();
        assert!(q.iter().all(|v| v.is_finite() && *v > 0.0), "{p}");
        assert!(q.windows(2).all(|w| w[0] <= w[1]), "{p}");
        let cpu = &p["cpu_us_per_op"];
        for who in ["server", "client"] {
            let c = cpu[who].as_f64().unwrap();
            assert!(c.is_finite() && c >= 0.0, "{p}");
        }
    }
    assert!(
        v["phases"][0]["cpu_us_per_op"]["server"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert_eq!(v["bulk_load"]["docs"].as_u64(), Some(500));
}
