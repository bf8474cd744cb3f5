//! Trigger crash test: a fan-out trigger's effects happen exactly once even when the server is
//! killed with SIGKILL in the middle of it.
//!
//! Setup: `USERS` users whose follower counts follow a power law (user `i` has about
//! `USERS / (i + 1)` followers: one is followed by everyone, most by a handful), a counter
//! document per user, and a JavaScript trigger on `tweets` that, for each follower, inserts a
//! timeline entry with a generated id and `$inc`s the follower's counter. Neither write is
//! idempotent, so a task applied twice shows as a duplicate entry or an over-count, and a task
//! lost shows as a missing entry.
//!
//! Each cycle starts the real binary on one data directory, lets `WRITERS` clients post tweets
//! from random users for a random 30-300 ms (while the fan-out of earlier tweets runs), then
//! SIGKILLs the server. A fresh server is started, the queue is left to drain, and the test
//! checks that
//!
//! - every acknowledged tweet exists (the one in flight per writer may or may not),
//! - for every tweet of the cycle that exists, each follower of its author has exactly one
//!   timeline entry for it, and no timeline has an entry for a tweet that does not exist,
//! - every counter equals the number of entries its user should have, over all cycles.
//!
//! `HERALD_TRIGGER_CRASH_CYCLES` sets the cycles (default 20; the slow suite runs 1000).
#![cfg(unix)]

#[path = "it/common/mod.rs"]
mod common;

use common::Herald;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CYCLES_ENV: &str = "HERALD_TRIGGER_CRASH_CYCLES";
const CYCLES_DEFAULT: u64 = 20;
const USERS: usize = 60;
const WRITERS: usize = 4;
const WRITE_MS: (u64, u64) = (30, 300);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

const FANOUT: &str = r#"function (event, db) {
    const tweet = event.after;
    const followers = db.query({collection: "follows", filter: {followee: tweet.by}});
    for (const f of followers) {
        db.insert("timelines/" + f.follower + "/entries", {tweet: event.id, cycle: tweet.cycle});
        db.update("counts", f.follower, {$inc: {n: 1}});
    }
}"#;

fn user(i: usize) -> String {
    format!("u{i}")
}

/// Who follows user `i`: the `USERS / (i + 1)` users after it, wrapping around.
fn followers(i: usize) -> Vec<usize> {
    let n = (USERS / (i + 1)).clamp(1, USERS - 1);
    (1..=n).map(|k| (i + k) % USERS).collect()
}

fn start(dir: &Path) -> (Herald, String) {
    let mut h = Herald::spawn(&[
        "serve",
        "--data",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    let addr = h.wait_listening();
    (h, format!("http://{addr}"))
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> Value {
    let mut rb = client.request(method, &url);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = r.status();
    let v: Value = r.json().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    assert!(status.is_success(), "{url}: {status} {v}");
    v
}

async fn setup(client: &reqwest::Client, base: &str) {
    let mut writes = Vec::new();
    for i in 0..USERS {
        writes.push(json!({"op": "put", "collection": "counts", "id": user(i), "doc": {"n": 0}}));
        for f in followers(i) {
            writes.push(json!({"op": "put", "collection": "follows", "id": format!("{}-{}", user(f), user(i)),
                               "doc": {"follower": user(f), "followee": user(i)}}));
        }
    }
    for chunk in writes.chunks(400) {
        call(
            client,
            reqwest::Method::POST,
            format!("{base}/v1/commit"),
            Some(json!({"writes": chunk})),
        )
        .await;
    }
    call(
        client,
        reqwest::Method::PUT,
        format!("{base}/v1/triggers/fanout"),
        Some(json!({"collection": "tweets", "on": ["insert"], "function": FANOUT})),
    )
    .await;
}

struct Posted {
    acked: Vec<String>,
    in_flight: Option<String>,
}

async fn writer(
    client: reqwest::Client,
    base: String,
    cycle: u64,
    w: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Posted {
    let mut acked = Vec::new();
    let mut x = seed | 1;
    for k in 0.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = format!("c{cycle}-w{w}-{k}");
        let by = user((x % USERS as u64) as usize);
        let r = client
            .post(format!("{base}/v1/docs/tweets"))
            .json(&json!({"_id": id, "by": by, "cycle": cycle}))
            .send()
            .await;
        match r {
            Ok(resp) if resp.status() == 201 => acked.push(id),
            _ => {
                return Posted {
                    acked,
                    in_flight: Some(id),
                }
            }
        }
    }
    Posted {
        acked,
        in_flight: None,
    }
}

#[test]
fn fan_out_effects_happen_exactly_once_across_sigkill() {
    let cycles: u64 = std::env::var(CYCLES_ENV)
        .ok()
        .map(|s| s.parse().expect("a number of cycles"))
        .unwrap_or(CYCLES_DEFAULT);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let follower_sets: Vec<Vec<usize>> = (0..USERS).map(followers).collect();
    // Entries each user's counter should account for, over all cycles so far.
    let mut expected_count = vec![0u64; USERS];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut total_tweets = 0usize;
    let started = Instant::now();
    for cycle in 0..=cycles {
        let (mut server, base) = start(dir.path());
        if cycle == 0 {
            rt.block_on(setup(&client, &base));
        }
        // Drain what the previous cycle left, then check it.
        if cycle > 0 {
            rt.block_on(drain(&client, &base));
            let tweets = rt.block_on(check_cycle(
                &client,
                &base,
                cycle,
                &follower_sets,
                &mut expected_count,
            ));
            total_tweets += tweets;
        }
        if cycle == cycles {
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                rt.spawn(writer(
                    client.clone(),
                    base.clone(),
                    cycle + 1,
                    w,
                    seed,
                    stop.clone(),
                ))
            })
            .collect();
        let ms = WRITE_MS.0 + (seed >> 33) % (WRITE_MS.1 - WRITE_MS.0);
        std::thread::sleep(Duration::from_millis(ms));
        let _ = server.child.kill(); // SIGKILL, mid fan-out
        let _ = server.child.wait();
        stop.store(true, Ordering::Release);
        let posted: Vec<Posted> = rt.block_on(async {
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        // Acknowledged tweets must survive; check them after the next start.
        let (mut next, base) = start(dir.path());
        rt.block_on(async {
            for p in &posted {
                for id in &p.acked {
                    let r = client
                        .get(format!("{base}/v1/docs/tweets/{id}"))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(
                        r.status(),
                        200,
                        "acknowledged tweet {id} lost (cycle {cycle})"
                    );
                }
                let _ = &p.in_flight;
            }
        });
        let _ = next.child.kill();
        let _ = next.child.wait();
    }
    println!(
        "trigger crash: {cycles} cycles, {total_tweets} tweets fanned out exactly once in {:?}",
        started.elapsed()
    );
}

async fn drain(client: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let st = call(
            client,
            reqwest::Method::GET,
            format!("{base}/v1/triggers/fanout"),
            None,
        )
        .await;
        assert_eq!(st["dead"], 0, "a fan-out task failed: {st}");
        if st["pending"] == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "the queue did not drain: {st}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks the timelines for the tweets of `cycle`; returns how many tweets that cycle had.
async fn check_cycle(
    client: &reqwest::Client,
    base: &str,
    cycle: u64,
    follower_sets: &[Vec<usize>],
    expected_count: &mut [u64],
) -> usize {
    let q = |collection: String, filter: Value| {
        let client = client.clone();
        let base = base.to_string();
        async move {
            let v = call(
                &client,
                reqwest::Method::POST,
                format!("{base}/v1/query"),
                Some(json!({"collection": collection, "filter": filter})),
            )
            .await;
            v["docs"].as_array().unwrap().clone()
        }
    };
    let tweets = q("tweets".into(), json!({"cycle": cycle})).await;
    let mut want: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for t in &tweets {
        let by: usize = t["by"].as_str().unwrap()[1..].parse().unwrap();
        for &f in &follower_sets[by] {
            want.entry(f)
                .or_default()
                .insert(t["_id"].as_str().unwrap().to_string());
            expected_count[f] += 1;
        }
    }
    for (u, expected) in expected_count.iter().enumerate() {
        let entries = q(
            format!("timelines/{}/entries", user(u)),
            json!({"cycle": cycle}),
        )
        .await;
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        for e in &entries {
            *got.entry(e["tweet"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        let dup: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            dup.is_empty(),
            "cycle {cycle}: duplicated entries in {}: {dup:?}",
            user(u)
        );
        let got: BTreeSet<String> = got.into_keys().collect();
        let want = want.remove(&u).unwrap_or_default();
        assert_eq!(got, want, "cycle {cycle}: timeline of {}", user(u));
        let count = call(
            client,
            reqwest::Method::GET,
            format!("{base}/v1/docs/counts/{}", user(u)),
            None,
        )
        .await;
        assert_eq!(
            count["n"],
            *expected,
            "cycle {cycle}: counter of {}",
            user(u)
        );
    }
    tweets.len()
}
