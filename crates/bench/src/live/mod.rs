//! `herald-bench live`: the options, the workload and the two modes' top level. Notification
//! latency of live queries under the InvaliDB workload (paper section 6.1): documents have five
//! 10-character strings and five integers, one of them `random`, uniform over
//! `[0, queries * WIDTH)`; range query `i` is `{"random": {"$gte": i * WIDTH, "$lt": (i + 1) *
//! WIDTH}}`, so every write matches exactly one query. The prefix workload subscribes
//! `{"key": {"$regex": "^k0000042x"}}` instead (each write's `key` starts with one query's
//! prefix); the suffix workload `{"rs": {"$regex": ":0000042$"}}`, an unanchored regex as a new
//! user writes it (each write's `rs` ends with one query's number); the count workload
//! subscribes a live aggregation per room (a count and a sum of the documents whose `rk` is the
//! query's number). Latency runs from just before a write is sent until its subscriber has the
//! change.
//!
//! - Explicit mode (`--queries`, `--rates`): one run per configuration, printed as a table.
//! - Search mode (`--search`): per workload, the most active queries sustainable at 1,000
//!   writes/s and the most writes/s sustainable with 1,000 queries (p99 <= 30 ms, rate held,
//!   nothing lost), then a run at 80% of each capacity; one SVG chart per series.
//!
//! Every run starts a fresh `herald serve` process (`harness::server`), subscribes and writes
//! over real WebSocket and HTTP connections (`probe`). `search` finds capacities, `report`
//! prints and charts them.
//! Results (with latency histograms) go to JSON; charts next to it.

mod probe;
pub(crate) mod report;
pub mod scaling;
pub(crate) mod search;

use rand::Rng;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub use crate::harness::{durability_name, Durability};
pub use probe::{Probe, ProbeConfig};
pub use search::{SearchOptions, Series};

/// Width of each range query's interval of `random`.
pub const WIDTH: u64 = 1_000;

/// Which filters the queries use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// InvaliDB's `{"random": {"$gte": i, "$lt": j}}`: served by the range predicate index.
    Range,
    /// `{"key": {"$regex": "^k0000042x"}}`: an anchored literal prefix (the engine's prefix
    /// list: every write is compared with every query's prefix).
    Regex,
    /// `{"rs": {"$regex": ":0000042$"}}`: an unanchored suffix pattern (the example of a
    /// query no value index serves).
    Suffix,
    /// `{"$or": [{"rk": 42}, {"rk": -1}]}`: no structure indexes it, so every write is tested
    /// against every query's filter (the scan list); each write's `rk` is one query's number.
    /// The workload of the matching grid's scaling experiment.
    Scan,
    /// Live aggregations: subscription `q` is the pipeline `[{$match: {rk: q}}, {$group: {_id:
    /// null, n: {$count: {}}, s: {$sum: "$i1"}, last: {$max: "$k"}}}]`, a per-room count and sum
    /// (`last`, the newest write's number, tells which write a change carries).
    Count,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Range => "range",
            Workload::Regex => "regex",
            Workload::Suffix => "suffix",
            Workload::Scan => "scan",
            Workload::Count => "count",
        }
    }

    /// The filter of query `q`.
    pub fn filter(self, q: u64) -> Value {
        match self {
            Workload::Range => {
                let lo = q * WIDTH;
                json!({"random": {"$gte": lo, "$lt": lo + WIDTH}})
            }
            Workload::Regex => json!({"key": {"$regex": format!("^k{q:07}x")}}),
            Workload::Suffix => json!({"rs": {"$regex": format!(":{q:07}$")}}),
            Workload::Scan => json!({"$or": [{"rk": q}, {"rk": -1}]}),
            Workload::Count => json!({"rk": q}),
        }
    }

    /// The pipeline of subscription `q`, for the workloads that aggregate.
    pub fn pipeline(self, q: u64) -> Option<Value> {
        (self == Workload::Count).then(|| {
            json!([{"$match": self.filter(q)}, {"$group": {"_id": null, "n": {"$count": {}},
                "s": {"$sum": "$i1"}, "last": {"$max": "$k"}}}])
        })
    }
}

/// A written document: five 10-letter strings and five integers (`random` decides the range
/// query it matches), plus `key`, whose prefix decides the regex query it matches, `rs`, a
/// word, `:` and a 7-digit number that decides the suffix query it matches, and for the scan
/// and count workloads `rk`, the number of the query it matches.
pub fn document(rng: &mut impl Rng, queries: u64, workload: Workload) -> Value {
    let mut doc = json!({
        "s1": word(rng), "s2": word(rng), "s3": word(rng), "s4": word(rng), "s5": word(rng),
        "i1": rng.gen_range(0..1000), "i2": rng.gen_range(0..1000), "i3": rng.gen_range(0..1000),
        "i4": rng.gen_range(0..1000),
        "random": rng.gen_range(0..queries * WIDTH),
        "key": format!("k{:07}x{}", rng.gen_range(0..queries), word(rng)),
        "rs": format!("{}:{:07}", word(rng), rng.gen_range(0..queries)),
    });
    if matches!(workload, Workload::Scan | Workload::Count) {
        doc["rk"] = json!(rng.gen_range(0..queries));
    }
    doc
}

fn word(rng: &mut impl Rng) -> String {
    (0..10)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

/// How the benchmark's writer sends documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// One HTTP `PUT /v1/docs/...` per document, up to 64 in flight (a fleet of clients).
    Put,
    /// One streamed `POST /v1/bulk` (NDJSON), one line per document, sent at its time; each
    /// line is its own transaction (one producer on one connection).
    Stream,
}

impl WritePath {
    pub fn name(self) -> &'static str {
        match self {
            WritePath::Put => "put",
            WritePath::Stream => "stream",
        }
    }
}

#[derive(Debug, Clone)]
pub struct LiveBenchOptions {
    pub workloads: Vec<Workload>,
    /// Explicit mode: active queries per run.
    pub queries: Vec<u64>,
    /// Explicit mode: writes per second per run.
    pub rates: Vec<u64>,
    /// Seconds of writing per run (each probe of a search too).
    pub secs: u64,
    /// Durability of the server the benchmark starts.
    pub durability: Durability,
    /// How writes are sent.
    pub writer: WritePath,
    /// Capacity search instead of explicit runs.
    pub search: Option<SearchOptions>,
    /// The server's matching grid (`--grid-rows`, `--grid-partitions`); `None`: its default.
    pub grid: Option<(u32, u32)>,
    /// Each matching cell thread limited to this many cores (cgroup v1, root only).
    pub cell_cpu: Option<f64>,
    /// A run passes with p99 latency up to this (`probe::P99_MAX_MS`, 30 ms, by default).
    pub p99_max_ms: f64,
    /// JSON output; `None`: `target/bench-results/live.json` (explicit) or
    /// `live-search-<durability>.json` (search). Charts are written next to it.
    pub out: Option<PathBuf>,
}

pub async fn run(opts: LiveBenchOptions) -> Result<(), String> {
    let dur = durability_name(opts.durability);
    let out = opts.out.clone().unwrap_or_else(|| {
        let name = match opts.search {
            Some(_) => format!("live-search-{dur}.json"),
            None => "live.json".to_string(),
        };
        Path::new("target/bench-results").join(name)
    });
    if let Some(cores) = opts.cell_cpu {
        if !(0.1..=64.0).contains(&cores) {
            return Err(format!(
                "--cell-cpu {cores}: a cell's quota must be between 0.1 core (1 ms per 10 ms, \
                 the kernel's smallest quota at the longest period used) and 64 cores"
            ));
        }
        if let Some(why) = crate::harness::cgroup::unsupported() {
            return Err(why);
        }
        if opts.grid.is_none() {
            return Err(
                "--cell-cpu needs --grid-rows/--grid-partitions (the threaded grid)".into(),
            );
        }
    }
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let report = match &opts.search {
        Some(s) => search::run(&opts, s, &out).await?,
        None => explicit(&opts).await?,
    };
    std::fs::write(&out, serde_json::to_string_pretty(&report).expect("json"))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    println!("results written to {}", out.display());
    Ok(())
}

/// `2x1 (0.25 core per cell)`, or `default`.
pub fn grid_name(grid: Option<(u32, u32)>, cell_cpu: Option<f64>) -> String {
    match (grid, cell_cpu) {
        (None, _) => "server default".into(),
        (Some((q, w)), None) => format!("{q}x{w}"),
        (Some((q, w)), Some(c)) => format!("{q}x{w} ({c} core per cell)"),
    }
}

/// One run per (workload, queries, writes/s), printed as it completes.
async fn explicit(opts: &LiveBenchOptions) -> Result<Value, String> {
    println!(
        "server durability: {}; writes: {}; grid: {}",
        durability_name(opts.durability),
        opts.writer.name(),
        grid_name(opts.grid, opts.cell_cpu)
    );
    probe::print_header();
    let mut runs = Vec::new();
    for &workload in &opts.workloads {
        for &queries in &opts.queries {
            for &rate in &opts.rates {
                crate::harness::quiet::wait_for_quiet().await;
                let p = probe::run(ProbeConfig {
                    workload,
                    queries,
                    rate,
                    secs: opts.secs,
                    durability: opts.durability,
                    writer: opts.writer,
                    grid: opts.grid,
                    cell_cpu: opts.cell_cpu,
                    p99_max_ms: opts.p99_max_ms,
                })
                .await?;
                p.print_row(workload.name());
                runs.push(p.to_json());
            }
        }
    }
    Ok(json!({
        "benchmark": "live", "mode": "explicit",
        "durability": durability_name(opts.durability), "writer": opts.writer.name(),
        "grid": opts.grid.map(|(q, w)| json!({"rows": q, "partitions": w})),
        "cell_cpu": opts.cell_cpu, "runs": runs,
    }))
}
