//! `herald bench live`: notification latency of live queries under the InvaliDB workload
//! (paper section 6.1). Documents have five 10-character strings and five integers, one of them
//! `random`, uniform over `[0, queries * WIDTH)`; query `i` is
//! `{"random": {"$gte": i * WIDTH, "$lt": (i + 1) * WIDTH}}`, so every write matches exactly one
//! query. Latency runs from just before a write is sent until its subscriber has the change.
//!
//! For each (queries, writes/s) configuration: start a fresh server (durable writes), subscribe
//! the queries over a few WebSocket connections, write at a fixed rate for the given time, and
//! report delivered/expected, p50, p99, max, mean and standard deviation. Prints a table and
//! writes JSON.

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const WIDTH: u64 = 1_000;
/// Subscriptions per WebSocket connection (below the server's per-connection limit).
const SUBS_PER_CONNECTION: usize = 200;

/// Which filters the queries use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// InvaliDB's `{"random": {"$gte": i, "$lt": j}}`: served by the range predicate index.
    Range,
    /// `{"key": {"$regex": "^k000042x"}}`: no index applies, every write is tested against
    /// every query.
    Regex,
}

#[derive(Debug, Clone)]
pub struct LiveBenchOptions {
    pub workload: Workload,
    pub queries: Vec<usize>,
    pub rates: Vec<u64>,
    pub secs: u64,
    pub out: std::path::PathBuf,
}

fn word(rng: &mut impl Rng) -> String {
    (0..10)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

fn filter_of(workload: Workload, q: usize) -> Value {
    match workload {
        Workload::Range => {
            let lo = q as u64 * WIDTH;
            json!({"random": {"$gte": lo, "$lt": lo + WIDTH}})
        }
        Workload::Regex => json!({"key": {"$regex": format!("^k{q:07}x")}}),
    }
}

async fn run_one(
    workload: Workload,
    queries: usize,
    rate: u64,
    secs: u64,
) -> Result<Value, String> {
    let server = crate::bench::BenchServer::start().await?;
    let addr = server.addr;

    // Subscribe the queries over a few connections; wait for every initial result.
    let sent_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let hist = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram"),
    ));
    let delivered = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let subscribe_start = Instant::now();
    let mut readers = Vec::new();
    let connections = queries.div_ceil(SUBS_PER_CONNECTION).max(1);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(connections);
    for c in 0..connections {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/ws"))
            .await
            .map_err(|e| e.to_string())?;
        let mine: Vec<usize> = (0..queries).filter(|q| q % connections == c).collect();
        for q in &mine {
            let msg = json!({"op": "subscribe", "sub": format!("q{q}"), "collection": "bench", "filter": filter_of(workload, *q)});
            ws.send(Message::Text(msg.to_string().into()))
                .await
                .map_err(|e| e.to_string())?;
        }
        let (sent_at, hist, delivered, ready) = (
            sent_at.clone(),
            hist.clone(),
            delivered.clone(),
            ready_tx.clone(),
        );
        readers.push(tokio::spawn(async move {
            let mut initials = 0usize;
            let mut ready = Some(ready);
            if mine.is_empty() {
                if let Some(r) = ready.take() {
                    let _ = r.send(Ok(())).await;
                }
            }
            while let Some(Ok(m)) = ws.next().await {
                let Message::Text(t) = m else { continue };
                let now = Instant::now();
                let v: Value = match serde_json::from_str(&t) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                match v["type"].as_str() {
                    Some("initial") => {
                        initials += 1;
                        if initials == mine.len() {
                            if let Some(r) = ready.take() {
                                let _ = r.send(Ok(())).await;
                            }
                        }
                    }
                    Some("error") => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(Err(format!("subscription failed: {v}"))).await;
                        }
                    }
                    Some("changes") => {
                        for ch in v["changes"].as_array().into_iter().flatten() {
                            if ch["kind"] != "add" {
                                continue;
                            }
                            let id = ch["id"].as_str().unwrap_or_default();
                            if let Some(t0) = sent_at.lock().expect("lock").remove(id) {
                                let _ = hist
                                    .lock()
                                    .expect("lock")
                                    .record(now.duration_since(t0).as_micros().max(1) as u64);
                                delivered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }));
    }
    drop(ready_tx);
    for _ in 0..connections {
        ready_rx
            .recv()
            .await
            .ok_or("a subscriber connection failed")??;
    }
    let subscribe_secs = subscribe_start.elapsed().as_secs_f64();

    // Write at a fixed rate from several client tasks, each with its own pace.
    let client = reqwest::Client::new();
    let writers = 32usize;
    let per_writer = rate as f64 / writers as f64;
    let total = rate * secs;
    let write_start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (client, sent_at) = (client.clone(), sent_at.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
            let n = (total as usize + writers - 1 - w) / writers;
            let start = Instant::now();
            let mut errors = 0u64;
            for k in 0..n {
                let due = start + Duration::from_secs_f64(k as f64 / per_writer);
                tokio::time::sleep_until(due.into()).await;
                let id = format!("w{w}-{k}");
                let doc = json!({
                    "s1": word(&mut rng), "s2": word(&mut rng), "s3": word(&mut rng), "s4": word(&mut rng), "s5": word(&mut rng),
                    "i1": rng.gen_range(0..1000), "i2": rng.gen_range(0..1000), "i3": rng.gen_range(0..1000), "i4": rng.gen_range(0..1000),
                    "random": rng.gen_range(0..queries as u64 * WIDTH),
                    "key": format!("k{:07}x{}", rng.gen_range(0..queries), word(&mut rng)),
                });
                sent_at.lock().expect("lock").insert(id.clone(), Instant::now());
                let ok = matches!(client.put(format!("http://{addr}/v1/docs/bench/{id}")).json(&doc).send().await, Ok(r) if r.status().is_success());
                if !ok {
                    errors += 1;
                    sent_at.lock().expect("lock").remove(&id);
                }
            }
            errors
        }));
    }
    let mut write_errors = 0;
    for t in tasks {
        write_errors += t.await.map_err(|e| e.to_string())?;
    }
    let write_secs = write_start.elapsed().as_secs_f64();
    // Give the last notifications time to arrive.
    let deadline = Instant::now() + Duration::from_secs(5);
    while delivered.load(std::sync::atomic::Ordering::Relaxed) + write_errors < total
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in readers {
        r.abort();
    }
    let _ = server.stop().await;
    let h = hist.lock().expect("lock");
    let ms = |us: f64| us / 1000.0;
    Ok(json!({
        "workload": format!("{workload:?}").to_lowercase(),
        "queries": queries, "target_writes_per_sec": rate, "seconds": secs,
        "achieved_writes_per_sec": (total - write_errors) as f64 / write_secs,
        "write_errors": write_errors,
        "expected": total - write_errors, "delivered": delivered.load(std::sync::atomic::Ordering::Relaxed),
        "subscribe_seconds": subscribe_secs,
        "latency_ms": {"p50": ms(h.value_at_quantile(0.5) as f64), "p99": ms(h.value_at_quantile(0.99) as f64),
                       "max": ms(h.max() as f64), "mean": ms(h.mean()), "stddev": ms(h.stdev())},
    }))
}

pub async fn run(opts: LiveBenchOptions) -> Result<(), String> {
    let mut rows = Vec::new();
    println!(
        "{:>9} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "queries",
        "writes/s",
        "achieved",
        "expected",
        "delivered",
        "p50 ms",
        "p99 ms",
        "max ms",
        "mean",
        "stddev",
        "subscribe"
    );
    for &q in &opts.queries {
        for &r in &opts.rates {
            let row = run_one(opts.workload, q, r, opts.secs).await?;
            let l = &row["latency_ms"];
            println!(
                "{:>9} {:>9} {:>10.0} {:>10} {:>10} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.1}s",
                q, r, row["achieved_writes_per_sec"].as_f64().unwrap_or(0.0), row["expected"], row["delivered"],
                l["p50"].as_f64().unwrap_or(0.0), l["p99"].as_f64().unwrap_or(0.0), l["max"].as_f64().unwrap_or(0.0),
                l["mean"].as_f64().unwrap_or(0.0), l["stddev"].as_f64().unwrap_or(0.0), row["subscribe_seconds"].as_f64().unwrap_or(0.0)
            );
            rows.push(row);
        }
    }
    if let Some(d) = opts.out.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    std::fs::write(
        &opts.out,
        serde_json::to_string_pretty(&json!({"benchmark": "live", "runs": rows})).expect("json"),
    )
    .map_err(|e| e.to_string())?;
    println!("results written to {}", opts.out.display());
    Ok(())
}
