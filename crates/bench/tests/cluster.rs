//! A short run of `herald-bench cluster` on a real Kafka broker and real `herald serve
//! --cluster` nodes (the debug build, built with `--features cluster` by the benchmark): every
//! part completes, every acknowledged write and notification is counted, and the figures are
//! sane. Needs java and mvn like the cluster crate's tests (scripts/kafka installs the broker).

use serde_json::Value;

#[track_caller]
fn latency_sane(l: &Value, what: &str) {
    let (p50, p99, max) = (
        l["p50"].as_f64().unwrap(),
        l["p99"].as_f64().unwrap(),
        l["max"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{what}: {l}");
}

#[test]
fn a_short_cluster_run_completes_every_part() {
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_herald-bench"))
        .args([
            "cluster",
            "--warmup-secs",
            "0",
            "--clients",
            "8",
            "--write-secs",
            "2",
            "--kills",
            "2",
            "--read-docs",
            "2000",
            "--read-clients",
            "2",
            "--read-secs",
            "1",
            "--subs",
            "10",
            "--sub-rate",
            "100",
            "--sub-secs",
            "2",
            "--out-dir",
        ])
        .arg(dir.path())
        .output()
        .expect("run herald-bench");
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "herald-bench cluster failed:\n{text}");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("cluster.json")).unwrap())
            .unwrap();

    // Writes: a single node, one cluster node, three (to the primary and, forwarded, to a
    // follower); no errors, and the cluster rows went through Kafka records.
    let rows = v["writes"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{text}");
    for r in rows {
        let c = &r["closed_loop"];
        assert!(c["ok"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(c["errors"], 0, "{r}");
        latency_sane(&c["latency_ms"], r["config"].as_str().unwrap());
    }
    for r in &rows[1..] {
        let k = &r["kafka_records"];
        assert!(k["records"].as_u64().unwrap() > 0, "{r}");
        assert!(k["writes_per_record"].as_f64().unwrap() >= 1.0, "{r}");
    }

    // Failover: each kill found a new primary, in a plausible time.
    let f = &v["failover"];
    assert_eq!(f["kills"], 2, "{f}");
    assert_eq!(f["timeouts"], 0, "{f}");
    let p50 = f["failover_ms"]["p50"].as_f64().unwrap();
    assert!((100.0..30_000.0).contains(&p50), "{f}");

    // Reads: queries everywhere, and every acknowledged write notified on both sides.
    let reads = &v["reads"];
    for q in reads["range_queries"].as_array().unwrap() {
        assert!(q["ok"].as_u64().unwrap() > 0, "{q}");
        assert_eq!(q["errors"], 0, "{q}");
    }
    let subs = &reads["subscriptions"];
    let acked = subs["writes_acked"].as_u64().unwrap();
    assert!(acked > 0, "{subs}");
    for side in subs["sides"].as_array().unwrap() {
        assert_eq!(side["delivered"].as_u64().unwrap(), acked, "{subs}");
        latency_sane(&side["latency_ms"], "subscriptions");
    }

    let csv = std::fs::read_to_string(dir.path().join("cluster.csv")).unwrap();
    assert!(csv.starts_with("part,row,mode,"), "{csv}");
    assert!(csv.lines().count() >= 1 + 4 + 3 + 2, "{csv}");
    let failovers = std::fs::read_to_string(dir.path().join("failover.csv")).unwrap();
    assert_eq!(failovers.lines().count(), 1 + 2, "{failovers}");
}
