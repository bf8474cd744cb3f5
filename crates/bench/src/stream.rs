//! `herald-bench stream`: Herald as the database behind a stream processor, in the four access
//! patterns of the study of databases in stream processing (heatmap workloads):
//!
//! 1. `upserts`: a windowed keyed sink. Every window (1 s) closes with one burst: one `$inc`
//!    upsert (with `$max` of the window number) per cell, `--cells` cells. Latency runs from the
//!    window's close to the upsert's acknowledgement; throughput is upserts per second of burst
//!    (window close to the burst's last acknowledgement).
//! 2. `copy`: a sequential bulk copy of a collection (`source`, preloaded, read in pages along
//!    its indexed `seq` field) into `copy`. Latency runs from a page's read to its writes'
//!    acknowledgement.
//! 3. `reads-repeat`: point reads (`GET`) of a small hot set of `source` (many repeats).
//! 4. `reads-unique`: point reads of every `source` document once, in random order.
//!
//! Both read patterns make as many reads as `source` has documents (`--read-secs` bounds
//! their time), with `--clients` closed-loop readers.
//!
//! Writes go as non-atomic batches of 500 (each write its own transaction, group-committed), or
//! with `--atomic` as one transaction per batch.
//!
//! Each `--subscribers` value gets a fresh server, run with that many live subscriptions (half
//! watch the hottest cells, half the newest copied documents). Every pattern checks itself:
//! the cells' counters add up to the increments sent, the copy holds every source document,
//! every read finds its document.

use crate::harness::record::{Recorder, Summary};
use crate::harness::thousands;
use crate::harness::{durability_name, Durability};
use crate::ingest::client::{self, Acks, Via, Writer, BATCH_WRITES_MAX};
use crate::ingest::{with_server, Output, ServerUsage};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_secs(1);
/// Length of a window of the upsert pattern.
const WINDOW: Duration = Duration::from_secs(1);
/// Writers (connections) the upsert and copy patterns write through.
const WRITERS: usize = 4;
/// Documents per page of the copy pattern.
const COPY_PAGE: u64 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Upserts,
    Copy,
    ReadsRepeat,
    ReadsUnique,
}

impl Pattern {
    pub const ALL: [Pattern; 4] = [
        Pattern::Upserts,
        Pattern::Copy,
        Pattern::ReadsRepeat,
        Pattern::ReadsUnique,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Upserts => "upserts",
            Pattern::Copy => "copy",
            Pattern::ReadsRepeat => "reads-repeat",
            Pattern::ReadsUnique => "reads-unique",
        }
    }

    fn index(self) -> usize {
        Pattern::ALL
            .iter()
            .position(|p| *p == self)
            .expect("listed")
    }
}

#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub patterns: Vec<Pattern>,
    /// One fresh server per value, with this many live subscriptions.
    pub subscribers: Vec<u32>,
    pub cells: u64,
    pub windows: u32,
    /// Documents of `source` (copied by `copy`, read by the read patterns).
    pub source_docs: u64,
    /// Documents of the hot set of `reads-repeat`.
    pub hot_docs: u64,
    /// Longest time of each read pattern (each makes `source_docs` reads).
    pub read_secs: u64,
    /// Concurrent readers.
    pub clients: u32,
    pub via: Via,
    /// Each batch of 500 upserts or copied documents is one transaction (WebSocket only), as a
    /// sink that commits per batch would; otherwise every write is its own.
    pub atomic: bool,
    pub durability: Durability,
    /// The server's `--cache-mib`; `None` leaves its default.
    pub cache_mib: Option<u64>,
    pub seed: u64,
    pub out: Option<PathBuf>,
}

/// What one pattern measured.
pub struct PatternResult {
    pub pattern: Pattern,
    pub tuples: u64,
    /// Seconds the throughput is computed over (burst time for upserts).
    pub secs: f64,
    pub latency: Summary,
    /// `None` when the pattern's own check passed, else what was wrong.
    pub check: Option<String>,
}

impl PatternResult {
    pub fn rate(&self) -> f64 {
        self.tuples as f64 / self.secs.max(1e-9)
    }

    fn to_json(&self) -> Value {
        json!({"pattern": self.pattern.name(), "tuples": self.tuples, "secs": self.secs,
               "tuples_per_sec": self.rate(), "latency": self.latency.json(),
               "check": self.check.clone().unwrap_or_else(|| "ok".into())})
    }
}

/// One server's run: every pattern at one subscriber count.
pub struct RunResult {
    pub subscribers: u32,
    pub patterns: Vec<PatternResult>,
    pub notifications: u64,
    pub peak_rss_kib: Option<u64>,
    /// What the server used over the run, all patterns together.
    pub usage: Option<ServerUsage>,
    pub recorder: Recorder,
}

struct Ctx<'a> {
    opts: &'a StreamOptions,
    addr: std::net::SocketAddr,
    http: reqwest::Client,
    recorder: Recorder,
}

impl Ctx<'_> {
    async fn writers(&self, acks: &Arc<Acks>) -> Result<Vec<Writer>, String> {
        let mut ws = Vec::new();
        for _ in 0..WRITERS {
            let w = Writer::connect(self.addr, self.opts.via, acks.clone()).await?;
            ws.push(w.atomic(self.opts.atomic)?);
        }
        Ok(ws)
    }

    fn acks(&self, p: Pattern) -> Arc<Acks> {
        Acks::new(self.recorder.clone(), p.index())
    }

    async fn upserts(&self) -> Result<PatternResult, String> {
        let p = Pattern::Upserts;
        let acks = self.acks(p);
        let writers = self.writers(&acks).await?;
        let mut rng = StdRng::seed_from_u64(self.opts.seed);
        let (mut sent, mut incs, mut burst_secs) = (0u64, 0u64, 0.0);
        let start = Instant::now();
        for w in 0..self.opts.windows {
            let close = start + WINDOW * (w + 1);
            tokio::time::sleep_until(close.into()).await;
            let t0 = Instant::now().max(close);
            let mut batch = Vec::with_capacity(BATCH_WRITES_MAX);
            let mut next = 0;
            for c in 0..self.opts.cells {
                let k: u64 = rng.gen_range(1..=5);
                incs += k;
                batch.push(format!(
                    r#"{{"op":"update","collection":"cells","id":"cell{c:06}","update":{{"$inc":{{"n":{k}}},"$max":{{"window":{w}}}}},"upsert":true}}"#
                ));
                if batch.len() == BATCH_WRITES_MAX {
                    writers[next % WRITERS]
                        .send_lines(std::mem::take(&mut batch), close)
                        .await?;
                    next += 1;
                }
            }
            if !batch.is_empty() {
                writers[next % WRITERS].send_lines(batch, close).await?;
            }
            sent += self.opts.cells;
            for wr in &writers {
                wr.flush().await;
            }
            burst_secs += t0.elapsed().as_secs_f64();
        }
        let mut total = 0u64;
        let cells = client::count(&self.http, self.addr, "cells", |d| {
            total += d["n"].as_u64().unwrap_or(0);
        })
        .await?;
        let applied = acks.applied.load(Ordering::Relaxed);
        let mut bad = Vec::new();
        if applied != sent {
            bad.push(format!("{applied} of {sent} upserts applied"));
        }
        if cells != self.opts.cells || total != incs {
            bad.push(format!(
                "{cells} cells hold {total}, expected {} cells holding {incs}",
                self.opts.cells
            ));
        }
        Ok(PatternResult {
            pattern: p,
            tuples: applied,
            secs: burst_secs,
            latency: self.recorder.overall(p.index()),
            check: (!bad.is_empty()).then(|| bad.join("; ")),
        })
    }

    /// Loads `source` (untimed): small heatmap-like records with an indexed `seq`.
    async fn preload(&self) -> Result<(), String> {
        let recorder = Recorder::new(&["preload"], Instant::now(), INTERVAL);
        let acks = Acks::new(recorder, 0);
        let w = Writer::connect(self.addr, Via::Bulk, acks.clone()).await?;
        let mut rng = StdRng::seed_from_u64(self.opts.seed ^ 1);
        let n = self.opts.source_docs;
        let mut i = 0;
        while i < n {
            let end = n.min(i + BATCH_WRITES_MAX as u64);
            let batch = (i..end)
                .map(|s| {
                    json!({"op": "put", "collection": "source", "id": format!("s{s:08}"),
                                "doc": {"seq": s, "cell": rng.gen_range(0..1_000_000u64),
                                        "n": rng.gen_range(0..1000), "ts": s * 1000}})
                })
                .collect();
            w.send(batch, Instant::now()).await?;
            i = end;
        }
        w.flush().await;
        let applied = acks.applied.load(Ordering::Relaxed);
        if applied != n {
            return Err(format!(
                "preload: {applied} of {n} source documents applied"
            ));
        }
        Ok(())
    }

    async fn copy(&self) -> Result<PatternResult, String> {
        let p = Pattern::Copy;
        let acks = self.acks(p);
        let writers = self.writers(&acks).await?;
        let start = Instant::now();
        let (mut from, mut page) = (0u64, 0usize);
        while from < self.opts.source_docs {
            let t0 = Instant::now();
            let q = json!({"collection": "source", "filter": {"seq": {"$gte": from, "$lt": from + COPY_PAGE}},
                           "sort": {"seq": 1}});
            let v = client::query(&self.http, self.addr, &q).await?;
            let docs = v["docs"].as_array().cloned().unwrap_or_default();
            if docs.is_empty() {
                break;
            }
            let batch = docs
                .into_iter()
                .map(|d| {
                    format!(
                        r#"{{"op":"put","collection":"copy","id":{},"doc":{d}}}"#,
                        d["_id"]
                    )
                })
                .collect();
            writers[page % WRITERS].send_lines(batch, t0).await?;
            page += 1;
            from += COPY_PAGE;
        }
        for w in &writers {
            w.flush().await;
        }
        let secs = start.elapsed().as_secs_f64();
        let copied = client::count(&self.http, self.addr, "copy", |_| {}).await?;
        let applied = acks.applied.load(Ordering::Relaxed);
        let n = self.opts.source_docs;
        let check = (applied != n || copied != n)
            .then(|| format!("{applied} applied, {copied} in the copy, of {n}"));
        Ok(PatternResult {
            pattern: p,
            tuples: applied,
            secs,
            latency: self.recorder.overall(p.index()),
            check,
        })
    }

    /// Point reads by `clients` closed-loop readers: from the hot set, or each document once.
    async fn reads(&self, p: Pattern) -> Result<PatternResult, String> {
        let n = self.opts.source_docs;
        let mut order: Vec<u64> = (0..n).collect();
        order.shuffle(&mut StdRng::seed_from_u64(self.opts.seed ^ 2));
        let order = Arc::new(order);
        let next = Arc::new(AtomicU64::new(0));
        let (done, missing) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let start = Instant::now();
        let deadline = start + Duration::from_secs(self.opts.read_secs);
        let mut tasks = Vec::new();
        for c in 0..self.opts.clients.max(1) {
            let (http, addr, rec) = (self.http.clone(), self.addr, self.recorder.clone());
            let (order, next, done, missing) =
                (order.clone(), next.clone(), done.clone(), missing.clone());
            let hot = self.opts.hot_docs.clamp(1, n.max(1));
            let mut rng = StdRng::seed_from_u64(self.opts.seed ^ (3 + u64::from(c)));
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    // Both patterns read as many documents as `source` holds (or stop at
                    // `read_secs`), so their rates compare like with like.
                    let Some(&fresh) = order.get(next.fetch_add(1, Ordering::Relaxed) as usize)
                    else {
                        break;
                    };
                    let s = match p {
                        Pattern::ReadsRepeat => rng.gen_range(0..hot),
                        _ => fresh,
                    };
                    let t0 = Instant::now();
                    let r = http
                        .get(format!("http://{addr}/v1/docs/source/s{s:08}"))
                        .send()
                        .await;
                    let ok = match r {
                        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                        _ => false,
                    };
                    let at = Instant::now();
                    if ok {
                        rec.record(p.index(), at, at.duration_since(t0).as_micros() as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        missing.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())?;
        }
        let secs = start.elapsed().as_secs_f64();
        let missing = missing.load(Ordering::Relaxed);
        Ok(PatternResult {
            pattern: p,
            tuples: done.load(Ordering::Relaxed),
            secs,
            latency: self.recorder.overall(p.index()),
            check: (missing > 0).then(|| format!("{missing} reads failed")),
        })
    }
}

/// Subscriptions that count every change they receive.
async fn subscribe_all(
    addr: std::net::SocketAddr,
    n: u32,
    count: &Arc<AtomicU64>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let mut subs = Vec::new();
    for i in 0..n {
        // The range filters let refills walk the sort field's index (see rockbench's query).
        let q = if i % 2 == 0 {
            json!({"collection": "cells", "filter": {"n": {"$gte": 0}}, "sort": {"n": -1}, "limit": 10})
        } else {
            json!({"collection": "copy", "filter": {"seq": {"$gte": 0}}, "sort": {"seq": -1}, "limit": 10})
        };
        let c = count.clone();
        subs.push(
            client::subscribe(addr, q, Arc::new(AtomicU64::new(0)), move |_, _| {
                c.fetch_add(1, Ordering::Relaxed);
            })
            .await?,
        );
    }
    Ok(subs)
}

/// Every pattern on a fresh server with `subscribers` live subscriptions.
async fn run_once(opts: &StreamOptions, subscribers: u32) -> Result<RunResult, String> {
    let (mut r, usage) = with_server(opts.durability, opts.cache_mib, |addr| {
        measure(opts, subscribers, addr)
    })
    .await?;
    r.peak_rss_kib = usage.peak_rss_kib;
    r.usage = Some(usage);
    Ok(r)
}

async fn measure(
    opts: &StreamOptions,
    subscribers: u32,
    addr: std::net::SocketAddr,
) -> Result<RunResult, String> {
    let names: Vec<&str> = Pattern::ALL.iter().map(|p| p.name()).collect();
    let ctx = Ctx {
        opts,
        addr,
        http: crate::harness::http_client(),
        recorder: Recorder::new(&names, Instant::now(), INTERVAL),
    };
    let needs_source = opts.patterns.iter().any(|p| *p != Pattern::Upserts);
    if needs_source {
        eprintln!(
            "[stream] loading {} source documents",
            thousands(opts.source_docs)
        );
        ctx.preload().await?;
    }
    let notifications = Arc::new(AtomicU64::new(0));
    let subs = subscribe_all(addr, subscribers, &notifications).await?;
    let ticker = tokio::spawn(print_progress(ctx.recorder.clone(), subscribers));
    let mut patterns = Vec::new();
    for &p in &opts.patterns {
        let r = match p {
            Pattern::Upserts => ctx.upserts().await?,
            Pattern::Copy => ctx.copy().await?,
            Pattern::ReadsRepeat | Pattern::ReadsUnique => ctx.reads(p).await?,
        };
        eprintln!(
            "[stream, {subscribers} subscribers] {}: {} tuples, {:.0}/s, latency {}{}",
            p.name(),
            thousands(r.tuples),
            r.rate(),
            r.latency.text(),
            r.check
                .as_ref()
                .map(|c| format!("; CHECK FAILED: {c}"))
                .unwrap_or_default()
        );
        patterns.push(r);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    ticker.abort();
    for s in subs {
        s.abort();
    }
    Ok(RunResult {
        subscribers,
        patterns,
        notifications: notifications.load(Ordering::Relaxed),
        peak_rss_kib: None,
        usage: None,
        recorder: ctx.recorder,
    })
}

/// A line per interval: the tuples each pattern completed in it, with their p99.
async fn print_progress(recorder: Recorder, subscribers: u32) {
    let start = tokio::time::Instant::now();
    for i in 1u32.. {
        tokio::time::sleep_until(start + INTERVAL * i).await;
        let slot = i as usize - 1;
        let parts: Vec<String> = Pattern::ALL
            .iter()
            .filter_map(|p| {
                let s = recorder.interval(p.index(), slot);
                (s.n > 0).then(|| format!("{} {}/s p99 {:.1} ms", p.name(), thousands(s.n), s.p99))
            })
            .collect();
        if !parts.is_empty() {
            eprintln!("[stream {i:>3} s, {subscribers} subs] {}", parts.join("  "));
        }
    }
}

pub async fn run(opts: StreamOptions) -> Result<(), String> {
    if opts.via == Via::Stream {
        return Err("stream needs an acknowledgement per batch: use --via ws or bulk".into());
    }
    if opts.patterns.is_empty() || opts.subscribers.is_empty() {
        return Err("--patterns and --subscribers need at least one value".into());
    }
    if opts.cells == 0 || opts.windows == 0 || opts.source_docs == 0 || opts.clients == 0 {
        return Err("--cells, --windows, --source-docs and --clients must be positive".into());
    }
    let out = Output::new(opts.out.clone(), "stream")?;
    println!(
        "stream: {} cells x {} windows, {} source documents, {} readers, via {}{}, durability {}",
        thousands(opts.cells),
        opts.windows,
        thousands(opts.source_docs),
        opts.clients,
        opts.via.name(),
        if opts.atomic {
            " (a transaction per batch)"
        } else {
            ""
        },
        durability_name(opts.durability)
    );
    let mut runs = Vec::new();
    for &s in &opts.subscribers {
        runs.push(run_once(&opts, s).await?);
    }
    println!(
        "\n| pattern | live subscribers | tuples | tuples/s | p50 ms | p99 ms | max ms | check |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &runs {
        for p in &r.patterns {
            println!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} |",
                p.pattern.name(),
                r.subscribers,
                thousands(p.tuples),
                thousands(p.rate() as u64),
                p.latency.p50,
                p.latency.p99,
                p.latency.max,
                p.check.as_deref().unwrap_or("ok")
            );
        }
    }
    println!();
    let mut json_runs = Vec::new();
    for r in &runs {
        println!(
            "{} subscribers: {} notifications received; server peak RSS {}",
            r.subscribers,
            thousands(r.notifications),
            r.peak_rss_kib.map_or("unknown".into(), |k| format!(
                "{:.1} MiB",
                k as f64 / 1024.0
            ))
        );
        if let Some(u) = &r.usage {
            println!("{}", u.text(0));
        }
        let sub = format!(
            "herald-bench stream, {} live subscribers, via {}, durability {}",
            r.subscribers,
            opts.via.name(),
            durability_name(opts.durability)
        );
        let name = format!("subs{}", r.subscribers);
        let t = out.write_chart(
            &format!("{name}-latency"),
            &r.recorder
                .time_chart("Stream patterns: latency over time", &sub, &[]),
        )?;
        let d = out.write_chart(
            &format!("{name}-distribution"),
            &r.recorder
                .distribution_chart("Stream patterns: latency distribution", &sub),
        )?;
        println!("charts: {} {}", t.display(), d.display());
        json_runs.push(json!({
            "subscribers": r.subscribers, "notifications": r.notifications,
            "peak_rss_kib": r.peak_rss_kib,
            // Over every pattern of the run: no single per-tuple figure.
            "cpu": r.usage.map(|u| u.to_json(0)),
            "patterns": r.patterns.iter().map(PatternResult::to_json).collect::<Vec<_>>(),
            "latency": r.recorder.to_json(),
            "charts": {"latency_over_time": t, "distribution": d},
        }));
    }
    out.write_json(&json!({
        "benchmark": "stream",
        "options": {
            "patterns": opts.patterns.iter().map(|p| p.name()).collect::<Vec<_>>(),
            "subscribers": opts.subscribers, "cells": opts.cells, "windows": opts.windows,
            "source_docs": opts.source_docs, "hot_docs": opts.hot_docs, "read_secs": opts.read_secs,
            "clients": opts.clients, "via": opts.via.name(), "atomic": opts.atomic,
            "durability": durability_name(opts.durability), "cache_mib": opts.cache_mib,
        },
        "runs": json_runs,
    }))?;
    let failed: Vec<String> = runs
        .iter()
        .flat_map(|r| r.patterns.iter())
        .filter_map(|p| {
            p.check
                .as_ref()
                .map(|c| format!("{}: {c}", p.pattern.name()))
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("checks failed: {}", failed.join("; ")))
    }
}
