//! Experiment (not part of Herald): the CPU each ~1 KB document of `herald-bench http` costs
//! when checkpointed into redb (copy-on-write B-tree, as Herald's checkpointer does) or into
//! fjall (an LSM-tree), with the same entries: the document (1,000 bytes), its commit-log record
//! (1,100 bytes, sequential key) and 11 index entries with random keys (10 of ~12 bytes, one of
//! ~700: the indexed free-text field). Batches of `per_ckpt` documents, every `durable_every`th
//! one synced. Prints cumulative process CPU (all threads) per document every 50 checkpoints.
//!
//! Usage: `cargo run --release -- <redb|fjall|none> <docs> <per_ckpt> <durable_every>`,
//! e.g. `... fjall 2000000 2600 10` (2,600 documents = 200 ms of 13,000 inserts/s, durable
//! every 2 s, as Herald's defaults). `none` only generates the entries (the baseline to
//! subtract). Results: crates/bench/results/history.md, "Where the CPU of a durable insert goes
//! now, and three things tried (2026-11-24)".

use rand::{Rng, SeedableRng};
use std::time::Instant;

fn cpu() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    (u.ru_utime.tv_sec + u.ru_stime.tv_sec) as f64
        + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) as f64 / 1e6
}
fn rs(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.gen_range(b'a'..=b'z')).collect()
}

// one doc's entries: (table, key, value)
fn entries(rng: &mut impl Rng, i: u64) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
    let id = format!("c{}-{}", i % 64, i / 64).into_bytes();
    let mut v = Vec::new();
    let mut dk = b"bench\0".to_vec();
    dk.extend(&id);
    v.push((0, dk, rs(rng, 1000)));
    v.push((2, i.to_be_bytes().to_vec(), rs(rng, 1100)));
    for f in 0..11u8 {
        let len = if f == 10 { 700 } else { 12 };
        let mut k = b"bench\0f".to_vec();
        k.push(b'0' + f);
        k.push(0);
        k.extend(rs(rng, len));
        k.extend(&id);
        v.push((1, k, id.clone()));
    }
    v
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let engine = args[1].clone();
    let n: u64 = args[2].parse().unwrap();
    let per_ckpt: u64 = args[3].parse().unwrap();
    let durable_every: u64 = args[4].parse().unwrap();
    let dir = tempfile_dir();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let t0 = Instant::now();
    let c0 = cpu();
    let report = |i: u64, t0: &Instant, c0: f64| {
        let c = cpu() - c0;
        eprintln!(
            "{engine} {i} docs wall {:.1}s cpu {:.1}s  {:.1} us cpu/doc",
            t0.elapsed().as_secs_f64(),
            c,
            c * 1e6 / i as f64
        );
    };
    if engine == "none" {
        let mut i = 0;
        let mut all = Vec::new();
        while i < n {
            for _ in 0..per_ckpt {
                all.extend(entries(&mut rng, i));
                i += 1;
            }
            all.sort();
            all.clear();
        }
        report(i, &t0, c0);
    } else if engine == "redb" {
        let db = redb::Builder::new()
            .set_cache_size(1 << 30)
            .create(dir.join("x.redb"))
            .unwrap();
        let defs = [
            redb::TableDefinition::<&[u8], &[u8]>::new("docs"),
            redb::TableDefinition::new("index"),
            redb::TableDefinition::new("log"),
        ];
        let mut i = 0;
        let mut ck = 0;
        while i < n {
            let mut txn = db.begin_write().unwrap();
            ck += 1;
            txn.set_durability(if ck % durable_every == 0 {
                redb::Durability::Immediate
            } else {
                redb::Durability::None
            })
            .unwrap();
            {
                let mut t: Vec<_> = defs.iter().map(|d| txn.open_table(*d).unwrap()).collect();
                let mut all = Vec::new();
                for _ in 0..per_ckpt {
                    all.extend(entries(&mut rng, i));
                    i += 1;
                }
                all.sort();
                for (tb, k, v) in &all {
                    t[*tb].insert(k.as_slice(), v.as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
            if ck % 50 == 0 {
                report(i, &t0, c0);
            }
        }
        report(i, &t0, c0);
    } else {
        let db = fjall::Database::builder(dir.join("fj"))
            .cache_size(256 << 20)
            .manual_journal_persist(true)
            .open()
            .unwrap();
        let ks: Vec<_> = ["docs", "index", "log"]
            .iter()
            .map(|nm| {
                db.keyspace(nm, || {
                    fjall::KeyspaceCreateOptions::default()
                        .data_block_compression_policy(fjall::config::CompressionPolicy::disabled())
                })
                .unwrap()
            })
            .collect();
        let mut i = 0;
        let mut ck = 0;
        while i < n {
            ck += 1;
            let mut b = db.batch();
            for _ in 0..per_ckpt {
                for (tb, k, v) in entries(&mut rng, i) {
                    b.insert(&ks[tb], k, v);
                }
                i += 1;
            }
            b.commit().unwrap();
            if ck % durable_every == 0 {
                db.persist(fjall::PersistMode::SyncAll).unwrap();
            }
            if ck % 50 == 0 {
                report(i, &t0, c0);
            }
        }
        report(i, &t0, c0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory under the system's temporary directory (removed at the end of a run).
fn tempfile_dir() -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("lsm-vs-redb-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}
