//! Query-core benchmark: filter evaluations per second and sorting, with p50/p99/max.
//!
//! Run: `cargo bench -p herald-query --bench query`. Prints a table and writes JSON to
//! `target/bench-results/query.json` (or `$BENCH_OUT`). Each workload runs in batches; a batch's
//! time divided by its size is one sample, so the percentiles describe batch-to-batch variation
//! (noise from the machine), not single evaluations, which are too short to time one by one.

use herald_query::{Filter, Sort};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Instant;

struct Row {
    name: &'static str,
    unit: &'static str,
    p50: f64,
    p99: f64,
    max: f64,
    per_sec_p50: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

/// Times `batches` batches of `batch` calls of `f`, returning per-call nanoseconds per batch.
fn sample(batches: usize, batch: usize, mut f: impl FnMut(usize) -> bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(batches);
    let mut hits = 0usize;
    for _ in 0..batches {
        let start = Instant::now();
        for i in 0..batch {
            hits += usize::from(f(i));
        }
        out.push(start.elapsed().as_nanos() as f64 / batch as f64);
    }
    black_box(hits);
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

fn row(name: &'static str, unit: &'static str, samples: Vec<f64>, unit_ns: f64) -> Row {
    let p50 = percentile(&samples, 0.5);
    Row {
        name,
        unit,
        p50: p50 / unit_ns,
        p99: percentile(&samples, 0.99) / unit_ns,
        max: samples[samples.len() - 1] / unit_ns,
        per_sec_p50: 1e9 / p50,
    }
}

fn ten_field_doc(rng: &mut StdRng, i: usize) -> Value {
    let city = ["Berlin", "Lagos", "Lima", "Osaka"][rng.gen_range(0..4)];
    json!({
        "_id": format!("doc{i:07}"),
        "random": rng.gen_range(0..1_000_000),
        "name": format!("user {}", rng.gen_range(0..100_000)),
        "email": format!("user{}@example.com", rng.gen_range(0..100_000)),
        "age": rng.gen_range(18..90),
        "score": rng.gen_range(0.0..100.0),
        "active": rng.gen_bool(0.5),
        "city": city,
        "tags": ["a", "b", "c"],
        "address": {"street": "Main St", "zip": rng.gen_range(10000..99999)},
    })
}

fn main() {
    // `cargo bench` passes --bench; ignore arguments.
    let mut rng = StdRng::seed_from_u64(7);
    let docs: Vec<Value> = (0..1024).map(|i| ten_field_doc(&mut rng, i)).collect();
    let mut rows = Vec::new();

    // Many different range filters, as a live-query matcher sees them.
    let ranges: Vec<Filter> = (0..64)
        .map(|k| {
            let i = k * 15_000;
            Filter::parse(&json!({"random": {"$gte": i, "$lt": i + 100_000}})).unwrap()
        })
        .collect();
    let s = sample(300, 200_000, |i| ranges[i & 63].matches(&docs[i & 1023]));
    rows.push(row("filter {random: {$gte, $lt}}", "ns/eval", s, 1.0));

    let or =
        Filter::parse(&json!({"$or": [{"city": "Lima"}, {"age": {"$gt": 80}}, {"tags": "z"}]}))
            .unwrap();
    let s = sample(300, 200_000, |i| or.matches(&docs[i & 1023]));
    rows.push(row("filter 3-clause $or", "ns/eval", s, 1.0));

    let re = Filter::parse(&json!({"email": {"$regex": "^user1[0-9]*@example\\.com$"}})).unwrap();
    let s = sample(300, 100_000, |i| re.matches(&docs[i & 1023]));
    rows.push(row("filter $regex", "ns/eval", s, 1.0));

    let big: Vec<Value> = (0..100_000).map(|i| ten_field_doc(&mut rng, i)).collect();
    let sort = Sort::parse(&json!({"age": 1, "score": -1})).unwrap();
    // The copy to sort and its drop stay outside the timed region.
    let mut net = Vec::new();
    for _ in 0..20 {
        let mut v = big.clone();
        let start = Instant::now();
        sort.sort(&mut v);
        net.push(start.elapsed().as_nanos() as f64);
        black_box(&v);
    }
    net.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if std::env::var("BENCH_DEBUG").is_ok() {
        let t = Instant::now();
        let keys: Vec<Vec<u8>> = big.iter().map(|d| sort.encoded_key(d)).collect();
        eprintln!("keys only: {:?}", t.elapsed());
        black_box(keys);
    }
    rows.push(row(
        "sort 100,000 docs {age:1, score:-1}",
        "ms/sort",
        net,
        1e6,
    ));

    println!(
        "{:<40} {:>10} {:>10} {:>10} {:>10} {:>16}",
        "workload", "unit", "p50", "p99", "max", "ops/s at p50"
    );
    for r in &rows {
        println!(
            "{:<40} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>16.0}",
            r.name, r.unit, r.p50, r.p99, r.max, r.per_sec_p50
        );
    }
    let json_rows: Vec<Value> = rows
        .iter()
        .map(|r| json!({"workload": r.name, "unit": r.unit, "p50": r.p50, "p99": r.p99, "max": r.max, "ops_per_sec_p50": r.per_sec_p50}))
        .collect();
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/bench-results/query.json"
        )
        .to_string()
    });
    if let Some(dir) = std::path::Path::new(&out).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let body = json!({"benchmark": "query", "results": json_rows});
    std::fs::write(&out, serde_json::to_string_pretty(&body).unwrap()).expect("write results");
    println!("results written to {out}");
}
