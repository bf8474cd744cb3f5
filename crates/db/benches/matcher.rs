//! Live-query matcher benchmark: what one write costs the predicate index with many
//! unanchored-regex views, against what the scan list cost (one filter evaluation per view).
//!
//! Run: `cargo bench -p herald-db --bench matcher`. Prints a table; no files. Each figure is
//! the median (and max) over batches of a batch's time divided by its size: batch-to-batch
//! variation is the machine's noise, not single probes, which are too short to time one by one.

use herald_db::live::matcher::{Matcher, ViewSet};
use herald_query::Filter;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Instant;

fn word(rng: &mut impl Rng) -> String {
    (0..10)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

/// The bench's suffix workload: query `q` is `":{q:07}$"`, a write's `rs` ends with one.
fn suffix_filter(q: u32) -> Filter {
    Filter::parse(&json!({"rs": {"$regex": format!(":{q:07}$")}})).unwrap()
}

fn image(rng: &mut impl Rng, n: u32) -> Value {
    json!({"s1": word(rng), "i1": rng.gen_range(0..1000), "rs": format!("{}:{:07}", word(rng), rng.gen_range(0..n))})
}

/// Median and max per-call microseconds over `batches` batches of `batch` calls.
fn sample(batches: usize, batch: usize, mut f: impl FnMut(usize) -> usize) -> (f64, f64) {
    let mut out = Vec::with_capacity(batches);
    let mut hits = 0usize;
    for b in 0..batches {
        let start = Instant::now();
        for i in 0..batch {
            hits += f(b * batch + i);
        }
        out.push(start.elapsed().as_nanos() as f64 / batch as f64 / 1000.0);
    }
    black_box(hits);
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (out[out.len() / 2], out[out.len() - 1])
}

fn main() {
    let mut rng = StdRng::seed_from_u64(7);
    println!("| views | what | median | max |");
    println!("|---|---|---|---|");
    for n in [1_000u32, 10_000, 100_000] {
        let filters: Vec<Filter> = (0..n).map(suffix_filter).collect();
        let images: Vec<Value> = (0..1024).map(|_| image(&mut rng, n)).collect();

        // Subscriptions one by one: total time, and the slowest single add (a rebuild).
        let mut m = Matcher::default();
        let mut slowest = 0f64;
        let start = Instant::now();
        for (q, f) in filters.iter().enumerate() {
            let t = Instant::now();
            m.add(q as u32, f);
            slowest = slowest.max(t.elapsed().as_secs_f64() * 1e6);
        }
        let total = start.elapsed().as_secs_f64() * 1e3;
        assert!(m.scanned().is_empty());
        println!("| {n} | add every view, one by one | {total:.1} ms in all | slowest add {slowest:.0} µs |");

        let mut cand = ViewSet::default();
        let (p50, max) = sample(200, 2_000, |i| {
            cand.clear();
            m.probe(&images[i & 1023], &mut cand);
            cand.len()
        });
        println!("| {n} | literal list: probe one image | {p50:.2} µs | {max:.2} µs |");

        // The scan list's floor: every view's filter evaluated against the image.
        let batch = (2_000_000 / n as usize).max(1);
        let (p50, max) = sample(50, batch, |i| {
            let img = &images[i & 1023];
            filters.iter().filter(|f| f.matches(img)).count()
        });
        println!("| {n} | scan list: every filter on one image | {p50:.1} µs | {max:.1} µs |");
    }
}
