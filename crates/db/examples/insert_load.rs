//! Measures durable insert throughput of the database layer alone (no HTTP): `threads` writers
//! commit ~1 KB documents for a few seconds. `cargo run --release -p herald-db --example insert_load`.
//! Environment: `NOSYNC`, `EXEMPT_TEXT`, `EXEMPT_ALL`, `CHECKPOINT_MS` and `CHECKPOINT_MIB` (the
//! storage's checkpoint triggers).

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
    if std::env::var("NOSYNC").is_ok() {
        opts.durability = herald_db::Durability::NoSync;
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
    let deadline = Instant::now() + Duration::from_secs(5);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            let text = text.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let doc = json!({"n": n, "name": "abcdefghijklmnop", "address": {"street": "main street 12345", "city": "lima", "geo": {"lat": 1.5, "lon": 2.5}}, "tags": ["aa", "bb", "cc"], "score": n * 7, "text": text});
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
    println!(
        "{threads} threads: {total} commits in {secs:.1}s = {:.0}/s",
        total as f64 / secs
    );
}
