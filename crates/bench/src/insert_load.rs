//! `herald-bench insert-load`: durable insert throughput of the database layer alone (no HTTP,
//! no server process): `threads` writers commit ~1 KB documents for a few seconds, in this
//! process. Besides the rate it prints the process's CPU time per insert, which other work on
//! the machine disturbs far less than the rate, the storage's counters, and the CPU time of the
//! checkpointer and writer threads.
//!
//! Each option falls back to the environment variable the former `insert_load` example read
//! (`SECS`, `NOSYNC`, `EXEMPT_TEXT`, `EXEMPT_ALL`, `CHECKPOINT_MS`, `CHECKPOINT_MIB`,
//! `DURABLE_MS`, `LOG_RETENTION`, `RANDOM`), so both spellings of a run give the same result.

use crate::harness::cpu::{cpu_secs, self_cpu_secs};
use herald_db::{Db, DbOptions, Write};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct InsertLoadOptions {
    /// Writer threads.
    pub threads: usize,
    /// Seconds of writing.
    pub secs: u64,
    /// Acknowledge before fsync.
    pub nosync: bool,
    /// Exempt the `text` field from automatic indexing.
    pub exempt_text: bool,
    /// Exempt every field from automatic indexing.
    pub exempt_all: bool,
    /// The storage's checkpoint triggers; `None`: the defaults.
    pub checkpoint_ms: Option<u64>,
    pub checkpoint_mib: Option<usize>,
    pub durable_ms: Option<u64>,
    /// Commit-log records kept; `None`: the default.
    pub log_retention: Option<u64>,
    /// Random field values (the shape `herald-bench http` writes) instead of mostly constant ones.
    pub random: bool,
}

/// `name`'s value from the environment, parsed.
pub fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Whether environment variable `name` is set (to anything).
pub fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

pub fn run(o: InsertLoadOptions) -> Result<(), String> {
    let threads = o.threads.max(1);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut opts = DbOptions::default();
    if let Some(ms) = o.checkpoint_ms {
        opts.store.checkpoint_interval_ms = ms;
    }
    if let Some(mib) = o.checkpoint_mib {
        opts.store.checkpoint_bytes = mib << 20;
    }
    if let Some(ms) = o.durable_ms {
        opts.store.durable_checkpoint_interval_ms = ms;
    }
    if o.nosync {
        opts.durability = herald_db::Durability::NoSync;
    }
    if let Some(n) = o.log_retention {
        opts.log_retention_count = n;
    }
    let db = Db::open(dir.path(), opts).map_err(|e| e.to_string())?;
    if o.exempt_text {
        db.set_exemptions("bench", vec!["text".into()])
            .map_err(|e| e.to_string())?;
    }
    if o.exempt_all {
        let all = ["n", "name", "address", "tags", "score", "text"];
        db.set_exemptions("bench", all.iter().map(|s| s.to_string()).collect())
            .map_err(|e| e.to_string())?;
    }
    let text = "x".repeat(700);
    let random = o.random;
    let cpu_start = self_cpu_secs();
    let deadline = Instant::now() + Duration::from_secs(o.secs);
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
    let cpu = self_cpu_secs() - cpu_start;
    println!(
        "{threads} threads: {total} commits in {secs:.1}s = {:.0}/s, {:.1} us CPU per insert",
        total as f64 / secs,
        cpu * 1e6 / total.max(1) as f64
    );
    Ok(())
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
            total += cpu_secs(&path.join("stat").to_string_lossy()).unwrap_or(0.0);
        }
    }
    total
}

fn filler(rng: &mut impl rand::Rng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

/// The document `herald-bench http` inserts: about 1 KB, random values in every field.
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
