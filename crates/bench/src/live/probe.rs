//! One measured run: a fresh server, `queries` subscriptions (200 per WebSocket connection), then
//! writes at a fixed rate for `secs`, open loop (each write is sent when it is due, whether or
//! not earlier ones were acknowledged, up to `IN_FLIGHT_MAX` outstanding). Latency runs from
//! just before a write is sent until its subscriber has the `add`. A run passes when p99 <=
//! 30 ms, the achieved write rate is within 5% of the target and every write was acknowledged
//! and notified.

use super::{document, durability_name, Durability, Workload, WritePath};
use crate::harness::cgroup::CellLimits;
use crate::harness::cpu::{self, CpuUse};
use crate::harness::server::{Server, ServerOptions};
use crate::ingest::client::BulkStream;
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Subscriptions per WebSocket connection (below the server's per-connection limit).
const SUBS_PER_CONNECTION: u64 = 200;
/// Writes sent and not yet acknowledged, at most; beyond it the schedule slips (and the
/// achieved rate shows it).
const IN_FLIGHT_MAX: usize = 512;
/// The latency bound of a passing run (by default).
pub const P99_MAX_MS: f64 = 30.0;
/// A passing run achieves at least this share of its target write rate.
pub const RATE_SHARE_MIN: f64 = 0.95;
/// How long notifications may trail the last acknowledged write.
const DRAIN_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct ProbeConfig {
    pub workload: Workload,
    pub queries: u64,
    /// Target writes per second.
    pub rate: u64,
    pub secs: u64,
    pub durability: Durability,
    pub writer: WritePath,
    /// The server's matching grid (rows, partitions); `None`: its default.
    pub grid: Option<(u32, u32)>,
    /// Each cell thread limited to this many cores (`harness::cgroup`).
    pub cell_cpu: Option<f64>,
    /// The latency bound of a passing run (`P99_MAX_MS` unless told).
    pub p99_max_ms: f64,
}

pub struct Probe {
    pub config: ProbeConfig,
    pub achieved: f64,
    pub write_errors: u64,
    /// Acknowledged writes: each must reach exactly one subscriber.
    pub expected: u64,
    pub delivered: u64,
    pub subscribe_secs: f64,
    /// Notification latency in microseconds.
    pub hist: Histogram<u64>,
    /// CPU use during the write phase.
    pub cpu: CpuUse,
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub mean: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Probe {
    pub fn latency(&self) -> Latency {
        let h = &self.hist;
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            mean: h.mean() / 1000.0,
            stddev: h.stdev() / 1000.0,
            p50: ms(h.value_at_quantile(0.5)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }

    /// `None` when the run passes, else why it fails.
    pub fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        let target = self.config.rate as f64;
        if self.achieved < RATE_SHARE_MIN * target {
            why.push(format!("rate {:.0}/{}", self.achieved, self.config.rate));
        }
        if self.write_errors > 0 {
            why.push(format!("{} write errors", self.write_errors));
        }
        if self.delivered < self.expected {
            why.push(format!("lost {}", self.expected - self.delivered));
        }
        if self.hist.is_empty() || self.latency().p99 > self.config.p99_max_ms {
            why.push("p99".into());
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    pub fn passes(&self) -> bool {
        self.failure().is_none()
    }

    pub fn to_json(&self) -> Value {
        let l = self.latency();
        let q = |f: f64| self.hist.value_at_quantile(f) as f64 / 1000.0;
        // Log-2 buckets from 0.25 ms: [upper bound in ms, notifications].
        let buckets: Vec<Value> = self
            .hist
            .iter_log(250, 2.0)
            .map(|v| {
                json!([
                    v.value_iterated_to() as f64 / 1000.0,
                    v.count_since_last_iteration()
                ])
            })
            .collect();
        let c = &self.cpu;
        json!({
            "workload": self.config.workload.name(), "queries": self.config.queries,
            "target_writes_per_sec": self.config.rate, "seconds": self.config.secs,
            "durability": durability_name(self.config.durability),
            "writer": self.config.writer.name(),
            "grid": self.config.grid.map(|(q, w)| json!({"rows": q, "partitions": w})),
            "cell_cpu": self.config.cell_cpu, "p99_max_ms": self.config.p99_max_ms,
            "achieved_writes_per_sec": self.achieved, "write_errors": self.write_errors,
            "expected": self.expected, "delivered": self.delivered,
            "subscribe_seconds": self.subscribe_secs,
            "passed": self.passes(), "failure": self.failure(),
            "latency_ms": {"mean": l.mean, "stddev": l.stddev, "p50": l.p50, "p90": q(0.9),
                           "p99": l.p99, "p99_9": q(0.999), "max": l.max},
            "histogram_ms": buckets,
            "cpu_percent_of_one_core": {"engine": c.engine, "cells": c.cells,
                "storage_writer": c.writer,
                "server_runtime": c.runtime, "server": c.server, "client": c.client,
                "other_processes": c.others},
        })
    }

    pub fn print_row(&self, label: &str) {
        let (l, c) = (self.latency(), &self.cpu);
        println!(
            "{:<22} {:>8} {:>8} {:>8.0} {:>17} {:>7.2} {:>7.2} {:>8.2} {:>7.2} {:>7.2} {:>6.1}s {:>4.0} {:>4.0} {:>4.0} {:>4.0} {:>4.0} {:>4.0}  {}",
            label,
            self.config.queries,
            self.config.rate,
            self.achieved,
            format!("{}/{}", self.delivered, self.expected),
            l.p50,
            l.p99,
            l.max,
            l.mean,
            l.stddev,
            self.subscribe_secs,
            c.engine,
            c.cells,
            c.writer,
            c.server,
            c.client,
            c.others,
            match self.failure() {
                None => "pass".to_string(),
                Some(why) => format!("FAIL ({why})"),
            }
        );
    }
}

pub fn print_header() {
    println!(
        "{:<22} {:>8} {:>8} {:>8} {:>17} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4}  verdict",
        "series", "queries", "writes/s", "achieved", "delivered/expect", "p50 ms", "p99 ms",
        "max ms", "mean", "stddev", "subscr", "eng%", "cel%", "wrt%", "srv%", "cli%", "oth%"
    );
}

type SentAt = Arc<Mutex<Sent>>;

/// Writes sent and not yet notified: when each was sent, and (for aggregations) which
/// subscription's group each feeds.
#[derive(Default)]
struct Sent {
    at: HashMap<u64, Instant>,
    by_query: HashMap<u64, BTreeSet<u64>>,
}

impl Sent {
    fn insert(&mut self, k: u64, query: Option<u64>) {
        self.at.insert(k, Instant::now());
        if let Some(q) = query {
            self.by_query.entry(q).or_default().insert(k);
        }
    }

    fn remove(&mut self, k: u64, query: Option<u64>) -> Option<Instant> {
        if let Some(ks) = query.and_then(|q| self.by_query.get_mut(&q)) {
            ks.remove(&k);
        }
        self.at.remove(&k)
    }

    /// The write an aggregation's change to query `q`'s row stands for, given the row's
    /// newest write number `last`: `last` itself when it is still waiting, else (a write that
    /// committed after a newer one, so the row's `last` did not move) the oldest waiting write
    /// of the query below it.
    fn take_for(&mut self, q: u64, last: u64) -> Option<Instant> {
        let ks = self.by_query.get_mut(&q)?;
        let k = if ks.contains(&last) {
            last
        } else {
            *ks.range(..last).next()?
        };
        self.remove(k, Some(q))
    }
}

/// Subscribes the queries over `ceil(queries / 200)` connections and returns once every
/// initial result has arrived; the reader tasks then record each `add`'s latency.
async fn subscribe(
    cfg: &ProbeConfig,
    addr: std::net::SocketAddr,
    sent_at: &SentAt,
    hist: &Arc<Mutex<Histogram<u64>>>,
    delivered: &Arc<AtomicU64>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let connections = cfg.queries.div_ceil(SUBS_PER_CONNECTION).max(1);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(64);
    let mut readers = Vec::new();
    for c in 0..connections {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/ws"))
            .await
            .map_err(|e| e.to_string())?;
        let mine: Vec<u64> = (0..cfg.queries)
            .skip(c as usize)
            .step_by(connections as usize)
            .collect();
        for q in &mine {
            let msg = match cfg.workload.pipeline(*q) {
                Some(p) => json!({"op": "subscribe", "sub": format!("q{q}"),
                                  "collection": "bench", "pipeline": p}),
                None => json!({"op": "subscribe", "sub": format!("q{q}"), "collection": "bench",
                               "filter": cfg.workload.filter(*q)}),
            };
            ws.feed(Message::Text(msg.to_string().into()))
                .await
                .map_err(|e| e.to_string())?;
        }
        ws.flush().await.map_err(|e| e.to_string())?;
        let (sent_at, hist, delivered) = (sent_at.clone(), hist.clone(), delivered.clone());
        let mut ready = Some(ready_tx.clone());
        let mut initials_left = mine.len();
        let aggregates = cfg.workload.pipeline(0).is_some();
        readers.push(tokio::spawn(async move {
            if initials_left == 0 {
                let _ = ready.take().expect("once").send(Ok(())).await;
            }
            while let Some(Ok(m)) = ws.next().await {
                let Message::Text(t) = m else { continue };
                let now = Instant::now();
                let Ok(v) = serde_json::from_str::<Value>(&t) else {
                    continue;
                };
                match v["type"].as_str() {
                    Some("initial") => {
                        initials_left = initials_left.saturating_sub(1);
                        if initials_left == 0 {
                            if let Some(r) = ready.take() {
                                let _ = r.send(Ok(())).await;
                            }
                        }
                    }
                    Some("error") | Some("reset") => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(Err(format!("subscription failed: {v}"))).await;
                        } else {
                            eprintln!("subscriber: {v}");
                        }
                    }
                    Some("changes") => {
                        for ch in v["changes"].as_array().into_iter().flatten() {
                            // A query's add names the write by its id; an aggregation's row
                            // carries the newest write's number as `last`.
                            let k = match ch["kind"].as_str() {
                                Some("add") if aggregates => ch["doc"]["last"].as_u64(),
                                Some("add") => ch["id"]
                                    .as_str()
                                    .and_then(|id| id.strip_prefix('w'))
                                    .and_then(|k| k.parse().ok()),
                                Some("change") if aggregates => ch["doc"]["last"].as_u64(),
                                _ => None,
                            };
                            let Some(k) = k else {
                                continue;
                            };
                            let query = v["sub"]
                                .as_str()
                                .and_then(|s| s.strip_prefix('q'))
                                .and_then(|q| q.parse::<u64>().ok());
                            let t0 = match query {
                                Some(q) if aggregates => {
                                    sent_at.lock().expect("lock").take_for(q, k)
                                }
                                _ => sent_at.lock().expect("lock").remove(k, None),
                            };
                            if let Some(t0) = t0 {
                                let us = now.duration_since(t0).as_micros().max(1) as u64;
                                let _ = hist.lock().expect("lock").record(us);
                                delivered.fetch_add(1, Ordering::Relaxed);
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
    Ok(readers)
}

/// The aggregation subscription a written document feeds (its `rk`), for the workloads that
/// aggregate.
fn group_of(workload: Workload, doc: &Value) -> Option<u64> {
    workload.pipeline(0).and(doc["rk"].as_u64())
}

/// Writes `rate * secs` documents at `rate` per second, open loop. Returns (acknowledged,
/// errors, seconds from the first send to the last acknowledgement).
async fn write(
    cfg: &ProbeConfig,
    addr: std::net::SocketAddr,
    sent_at: &SentAt,
) -> Result<(u64, u64, f64), String> {
    if cfg.writer == WritePath::Stream {
        return write_stream(cfg, addr, sent_at).await;
    }
    let client = crate::harness::http_client_builder()
        .pool_max_idle_per_host(IN_FLIGHT_MAX)
        .build()
        .map_err(|e| e.to_string())?;
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_MAX));
    let (acked, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let total = cfg.rate * cfg.secs;
    let start = Instant::now();
    let mut k = 0u64;
    while k < total {
        let due = ((start.elapsed().as_secs_f64() * cfg.rate as f64) as u64 + 1).min(total);
        while k < due {
            let slot = slots.clone().acquire_owned().await.expect("semaphore");
            let (client, sent_at, acked, errors) = (
                client.clone(),
                sent_at.clone(),
                acked.clone(),
                errors.clone(),
            );
            let (queries, workload) = (cfg.queries, cfg.workload);
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(k);
                let mut doc = document(&mut rng, queries, workload);
                if workload.pipeline(0).is_some() {
                    doc["k"] = json!(k);
                }
                let url = format!("http://{addr}/v1/docs/bench/w{k}");
                let query = group_of(workload, &doc);
                sent_at.lock().expect("lock").insert(k, query);
                let ok = matches!(client.put(url).json(&doc).send().await,
                                  Ok(r) if r.status().is_success());
                if ok {
                    acked.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    sent_at.lock().expect("lock").remove(k, query);
                }
                drop(slot);
            });
            k += 1;
        }
        if k < total {
            let next = start + Duration::from_secs_f64(k as f64 / cfg.rate as f64);
            tokio::time::sleep_until(next.into()).await;
        }
    }
    let _all = slots
        .acquire_many(IN_FLIGHT_MAX as u32)
        .await
        .expect("semaphore");
    let secs = start.elapsed().as_secs_f64();
    Ok((
        acked.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        secs,
    ))
}

/// Like [`write`], over one streamed `POST /v1/bulk` (`ingest::client::BulkStream`): each
/// document is one NDJSON line, sent at its time (the latency clock starts as it is queued for
/// the socket), each its own transaction on the server.
async fn write_stream(
    cfg: &ProbeConfig,
    addr: std::net::SocketAddr,
    sent_at: &SentAt,
) -> Result<(u64, u64, f64), String> {
    let stream = BulkStream::open(&crate::harness::http_client(), addr);
    let total = cfg.rate * cfg.secs;
    let start = Instant::now();
    let mut k = 0u64;
    while k < total {
        let due = ((start.elapsed().as_secs_f64() * cfg.rate as f64) as u64 + 1).min(total);
        while k < due {
            let mut rng = rand::rngs::StdRng::seed_from_u64(k);
            let mut doc = document(&mut rng, cfg.queries, cfg.workload);
            if cfg.workload.pipeline(0).is_some() {
                doc["k"] = json!(k);
            }
            let mut line = serde_json::to_vec(
                &json!({"op": "put", "collection": "bench", "id": format!("w{k}"), "doc": doc}),
            )
            .map_err(|e| e.to_string())?;
            line.push(b'\n');
            sent_at
                .lock()
                .expect("lock")
                .insert(k, group_of(cfg.workload, &doc));
            stream.send(line).await?;
            k += 1;
        }
        if k < total {
            let next = start + Duration::from_secs_f64(k as f64 / cfg.rate as f64);
            tokio::time::sleep_until(next.into()).await;
        }
    }
    let tally = stream.finish().await?;
    let secs = start.elapsed().as_secs_f64();
    let applied = tally["applied"].as_u64().unwrap_or(0);
    let failed = tally["failed"].as_u64().unwrap_or(0);
    Ok((applied, failed, secs))
}

pub async fn run(cfg: ProbeConfig) -> Result<Probe, String> {
    let server = Server::start(ServerOptions {
        grid: cfg.grid,
        ..ServerOptions::new(cfg.durability)
    })
    .await?;
    eprintln!(
        "[{} queries, {} writes/s: herald serve pid {}]",
        cfg.queries,
        cfg.rate,
        server.pid()
    );
    // The cell threads exist from the start; limited before anything is measured.
    let limits = match cfg.cell_cpu {
        Some(cores) => {
            let (q, w) = cfg.grid.unwrap_or((1, 1));
            Some(CellLimits::apply(server.pid(), (q * w) as usize, cores)?)
        }
        None => None,
    };
    let result = measure(&cfg, &server).await;
    server.kill();
    // The groups can go once the threads are gone.
    drop(limits);
    result
}

async fn measure(cfg: &ProbeConfig, server: &Server) -> Result<Probe, String> {
    let sent_at: SentAt = Arc::new(Mutex::new(Sent::default()));
    let hist = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram"),
    ));
    let delivered = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let readers = subscribe(cfg, server.addr, &sent_at, &hist, &delivered).await?;
    let subscribe_secs = t.elapsed().as_secs_f64();

    let before = cpu::sample(Some(server.pid()));
    let written = write(cfg, server.addr, &sent_at).await;
    let after = cpu::sample(Some(server.pid()));
    let (acked, write_errors, write_secs) = written?;
    // Let the last notifications arrive.
    let deadline = Instant::now() + DRAIN_MAX;
    while delivered.load(Ordering::Relaxed) < acked && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in readers {
        r.abort();
    }
    let hist = hist.lock().expect("lock").clone();
    Ok(Probe {
        config: *cfg,
        achieved: acked as f64 / write_secs,
        write_errors,
        expected: acked,
        delivered: delivered.load(Ordering::Relaxed),
        subscribe_secs,
        hist,
        cpu: cpu::cpu_between(&before, &after),
    })
}
