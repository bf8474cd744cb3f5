//! Measures durable insert throughput of the database layer alone (no HTTP): `threads` writers
//! commit ~1 KB documents for a few seconds. `cargo run --release -p herald-db --example insert_load`.
//! Environment: `NOSYNC`, `EXEMPT_TEXT`, `EXEMPT_ALL`, `CHECKPOINT_MS`, `CHECKPOINT_MIB` and `DURABLE_MS`
//! (the storage's checkpoint triggers), `LOG_RETENTION` (commit-log records kept), `RANDOM` (random field values, the shape `herald bench http`
//! writes, instead of mostly constant ones) and `SECS` (default 5). Besides the rate it prints the
//! process's CPU time per insert, which other work on the machine disturbs far less than the rate,
//! the storage's counters, and the CPU time of the checkpointer and writer threads.

use herald_db::{Db, DbOptions, Write};
use serde_json::json;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = DbOptions::default();
    if let Some(ms) = std::env::var("CHECKPOINT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.store.checkpoint_interval_ms = ms;
    }
    if let Some(mib) = std::env::var("CHECKPOINT_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        opts.store.checkpoint_bytes = mib << 20;
    }
    if let Some(ms) = std::env::var("DURABLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.store.durable_checkpoint_interval_ms = ms;
    }
    if std::env::var("NOSYNC").is_ok() {
        opts.durability = herald_db::Durability::NoSync;
    }
    if let Some(n) = std::env::var("LOG_RETENTION")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        opts.log_retention_count = n;
    }
    let db = Db::open(dir.path(), opts).unwrap();
    if std::env::var("EXEMPT_TEXT").is_ok() {
        db.set_exemptions("bench", vec!["text".into()]).unwrap();
    }
    if std::env::var("EXEMPT_ALL").is_ok() {
        let all = ["n", "name", "address", "tags", "score", "text"];
        db.set_exemptions("bench", all.iter().map(|s| s.to_string()).collect())
            .unwrap();
    }
    let text = "x".repeat(700);
    let random = std::env::var("RANDOM").is_ok();
    let secs: u64 = std::env::var("SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let cpu_start = cpu_seconds();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            let text = text.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut rng = rand::thread_rng();
                while Instant::now() < deadline {
                    let doc = if random {
                        random_doc(&mut rng, n)
                    } else {
                        json!({"n": n, "name": "abcdefghijklmnop", "address": {"street": "main street 12345", "city": "lima", "geo": {"lat": 1.5, "lon": 2.5}}, "tags": ["aa", "bb", "cc"], "score": n * 7, "text": text})
                    };
                    db.commit(vec![Write::Put { collection: "bench".into(), id: format!("t{t}-{n}"), doc, if_version: None }]).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let secs = start.elapsed().as_secs_f64();
    let m = db.storage_metrics();
    println!("{m:?}");
    for name in ["herald-checkpoi", "herald-storage-"] {
        println!("thread {name}: {:.3} s CPU", thread_cpu_seconds(name));
    }
    let cpu = cpu_seconds() - cpu_start;
    println!(
        "{threads} threads: {total} commits in {secs:.1}s = {:.0}/s, {:.1} us CPU per insert",
        total as f64 / secs,
        cpu * 1e6 / total as f64
    );
}

/// User plus system CPU time of this process's threads named `comm` (as `/proc` truncates it).
fn thread_cpu_seconds(comm: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut total = 0.0;
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if name.trim_end() == comm {
            total +=
                stat_cpu_seconds(&std::fs::read_to_string(path.join("stat")).unwrap_or_default());
        }
    }
    total
}

/// User plus system CPU time of this process so far.
fn cpu_seconds() -> f64 {
    stat_cpu_seconds(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// utime + stime of a `/proc/.../stat` line, in seconds.
fn stat_cpu_seconds(stat: &str) -> f64 {
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn filler(rng: &mut impl rand::Rng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

/// The document `herald bench http` inserts: about 1 KB, random values in every field.
fn random_doc(rng: &mut impl rand::Rng, i: u64) -> serde_json::Value {
    json!({
        "n": i,
        "name": filler(rng, 16),
        "address": {"street": filler(rng, 24), "city": filler(rng, 10), "geo": {"lat": rng.gen_range(-90.0..90.0), "lon": rng.gen_range(-180.0..180.0)}},
        "tags": [filler(rng, 6), filler(rng, 6), filler(rng, 6)],
        "score": rng.gen_range(0..1_000_000),
        "text": filler(rng, 700),
    })
}
