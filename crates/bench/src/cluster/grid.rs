//! Part 4, notification latency across machines (issue 32; the format of InvaliDB's table 3):
//! `subs` live subscriptions with unindexable queries (`{"s": {"$regex": "-<j>$"}}`, unanchored,
//! so no predicate index places them) on one node while `rate` writes/s go to the primary, each
//! write matching exactly one subscription; latency from each write's send to its `add`. Three
//! configurations, each on fresh nodes: a single node; three cluster nodes, the subscriptions on
//! a follower that matches them itself; three cluster nodes with the matching grid
//! (`--grid-rows`/`--grid-partitions`), the follower only the front end.
//!
//! The load is the same for every configuration (`--grid-rate`): choose it at about 80% of the
//! single node's capacity for `subs` such queries (`herald-bench live`) to read the table as
//! the paper's "at 80% load".

use super::load::{self, LoadSpec, Req};
use super::nodes::Nodes;
use super::Ctx;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long notifications may trail the last acknowledged write.
const DRAIN_MAX: Duration = Duration::from_secs(15);
/// Unmeasured writes (one every 100 ms) between subscribing and measuring.
const SETTLE_WRITES: u64 = 20;

#[derive(Debug, Clone)]
pub struct GridOptions {
    pub subs: u64,
    pub rate: u64,
    pub secs: u64,
    pub rows: u32,
    pub partitions: u32,
}

/// One configuration's notifications.
pub struct GridRow {
    pub name: String,
    pub acked: u64,
    pub errors: u64,
    pub write_secs: f64,
    pub delivered: u64,
    /// Microseconds from a write's send to its `add`.
    pub hist: Histogram<u64>,
    /// CPU of all nodes over the writes, in cores.
    pub nodes_cpu: f64,
}

impl GridRow {
    pub fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn json(&self) -> Value {
        json!({
            "configuration": self.name, "acked": self.acked, "errors": self.errors,
            "writes_per_sec": self.acked as f64 / self.write_secs.max(1e-9),
            "delivered": self.delivered, "nodes_cpu_cores": self.nodes_cpu,
            "latency_ms": {"p50": self.ms(0.5), "p95": self.ms(0.95), "p99": self.ms(0.99),
                           "max": self.hist.max() as f64 / 1000.0, "n": self.hist.len()},
        })
    }
}

pub async fn run(ctx: &Ctx, opts: &GridOptions) -> Result<Vec<GridRow>, String> {
    let grid = format!("3 nodes, grid {} x {}", opts.rows, opts.partitions);
    // (name, nodes, grid shape)
    let configs = [
        ("single node".to_string(), 1, None),
        ("3 nodes, no grid".to_string(), 3, None),
        (grid, 3, Some((opts.rows, opts.partitions))),
    ];
    let mut rows = Vec::new();
    for (name, n, shape) in configs {
        let mut cfg = ctx.node_config((n > 1).then_some("grid"));
        cfg.grid = shape;
        rows.push(one(ctx, opts, name, n, cfg).await?);
    }
    Ok(rows)
}

async fn one(
    ctx: &Ctx,
    opts: &GridOptions,
    name: String,
    n: usize,
    cfg: super::nodes::NodeConfig,
) -> Result<GridRow, String> {
    let client = crate::harness::http_client();
    let mut nodes = Nodes::start(n, cfg).await?;
    let p = nodes.primary(&client, Duration::from_secs(60)).await?;
    let f = (p + 1) % n;
    eprintln!(
        "[grid: {name}: {} subscriptions on {}, {} writes/s to {} for {} s]",
        opts.subs, nodes.nodes[f].id, opts.rate, nodes.nodes[p].id, opts.secs
    );
    let epoch = Instant::now();
    let hist = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram"),
    ));
    let delivered = Arc::new(AtomicU64::new(0));
    let readers = super::reads::subscribe(
        nodes.nodes[f].addr,
        "gq",
        |j| json!({"s": {"$regex": format!("-{j}$")}}),
        opts.subs,
        epoch,
        hist.clone(),
        delivered.clone(),
    )
    .await?;
    // Settle, unmeasured: a few commits to another collection (with the grid, the views are
    // registered before the first commit after they were added, and the cells learn them),
    // then a pause, so the figures are of the steady state.
    let base = nodes.nodes[p].base();
    for i in 0..SETTLE_WRITES {
        client
            .put(format!("{base}/v1/docs/gq_settle/s{i}"))
            .json(&json!({"i": i}))
            .send()
            .await
            .map_err(|e| format!("settling: {e}"))?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (pids, kafka) = (nodes.pids(), ctx.kafka_pids());
    let subs = opts.subs.max(1);
    let cpu_before = nodes.cpu_secs();
    let write = load::run(
        LoadSpec {
            targets: vec![nodes.nodes[p].addr],
            connections: 64,
            rate: Some(opts.rate),
            secs: opts.secs as f64,
            make: Arc::new(move |i, _| {
                Req {
                method: "PUT",
                path: format!("/v1/docs/gq/w{i}"),
                body: Some(
                    json!({"s": format!("k-{}", i % subs), "t": epoch.elapsed().as_micros() as u64})
                        .to_string()
                        .into_bytes(),
                ),
            }
            }),
            check: Arc::new(|r| (200..300).contains(&r.status)),
        },
        &pids,
        &kafka,
    )
    .await;
    let nodes_cpu = (nodes.cpu_secs() - cpu_before) / write.secs.max(1e-9);
    let deadline = Instant::now() + DRAIN_MAX;
    while delivered.load(Ordering::Relaxed) < write.ok && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in readers {
        r.abort();
    }
    nodes.check_alive()?;
    let hist = hist.lock().expect("lock").clone();
    Ok(GridRow {
        name,
        acked: write.ok,
        errors: write.errors,
        write_secs: write.secs,
        delivered: delivered.load(Ordering::Relaxed),
        hist,
        nodes_cpu,
    })
}
