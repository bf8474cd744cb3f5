//! `herald bench http`: the storage/API benchmark. Starts a server on a temporary directory
//! (durable, fsync group commit) on loopback and drives it through real HTTP:
//!
//! 1. durable inserts of ~1 KB documents from `clients` concurrent connections;
//! 2. point reads of random existing documents;
//! 3. an indexed range query returning 100 of `range_docs` documents (loaded through
//!    `/v1/bulk` first).
//!
//! Client and server share the machine's cores, as they would on one small host. Prints a table
//! and writes JSON (p50/p99/max latency, throughput) to `out`.

use hdrhistogram::Histogram;
use herald_db::DbOptions;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct HttpBenchOptions {
    pub clients: usize,
    pub insert_secs: u64,
    pub read_secs: u64,
    pub range_docs: usize,
    pub range_secs: u64,
    pub out: std::path::PathBuf,
}

struct Phase {
    name: String,
    ops: u64,
    min_client_ops: u64,
    errors: u64,
    secs: f64,
    hist: Histogram<u64>,
}

impl Phase {
    fn row(&self) -> Value {
        let us = |q: f64| self.hist.value_at_quantile(q) as f64 / 1000.0;
        json!({
            "phase": self.name, "ops": self.ops, "errors": self.errors, "seconds": self.secs,
            "ops_per_sec": self.ops as f64 / self.secs,
            "latency_ms": {"p50": us(0.5), "p99": us(0.99), "max": self.hist.max() as f64 / 1000.0},
        })
    }
}

fn filler(rng: &mut impl Rng, n: usize) -> String {
    (0..n)
        .map(|_| char::from(b'a' + rng.gen_range(0..26)))
        .collect()
}

/// A document of about 1 KB: nested objects, arrays, text and numbers.
fn kilobyte_doc(rng: &mut impl Rng, i: u64) -> Value {
    json!({
        "n": i,
        "name": filler(rng, 16),
        "address": {"street": filler(rng, 24), "city": filler(rng, 10), "geo": {"lat": rng.gen_range(-90.0..90.0), "lon": rng.gen_range(-180.0..180.0)}},
        "tags": [filler(rng, 6), filler(rng, 6), filler(rng, 6)],
        "score": rng.gen_range(0..1_000_000),
        "text": filler(rng, 700),
    })
}

/// Runs `clients` loops of `op` for `secs`, timing each call.
async fn drive<F, Fut>(name: &str, clients: usize, secs: u64, op: F) -> Phase
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let op = Arc::clone(&op);
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let (mut ops, mut errors, mut k) = (0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                let t = Instant::now();
                let ok = op(c, k).await;
                let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                k += 1;
                if ok {
                    ops += 1
                } else {
                    errors += 1
                }
            }
            (hist, ops, errors)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let (mut ops, mut errors, mut min_client_ops) = (0, 0, u64::MAX);
    for t in tasks {
        let (h, o, e) = t.await.expect("client task");
        hist.add(h).expect("same bounds");
        ops += o;
        errors += e;
        min_client_ops = min_client_ops.min(o);
    }
    Phase {
        name: name.to_string(),
        ops,
        min_client_ops,
        errors,
        secs: start.elapsed().as_secs_f64(),
        hist,
    }
}

/// A server on a temporary directory (durable defaults) on a free loopback port, for benchmarks.
pub struct BenchServer {
    pub addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), String>>,
    _dir: tempfile::TempDir,
}

impl BenchServer {
    pub async fn start() -> Result<BenchServer, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel::<SocketAddr>();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let config = crate::ServeConfig {
            data: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".parse().expect("addr"),
            triggers: Default::default(),
            auth: Default::default(),
            db: DbOptions::default(),
        };
        let task = tokio::spawn(crate::serve(
            config,
            async {
                let _ = stop_rx.await;
            },
            move |a| {
                let _ = addr_tx.send(a);
            },
        ));
        let addr = addr_rx
            .await
            .map_err(|_| "server did not start".to_string())?;
        Ok(BenchServer {
            addr,
            stop,
            task,
            _dir: dir,
        })
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(self) -> Result<(), String> {
        let _ = self.stop.send(());
        self.task.await.map_err(|e| e.to_string())?
    }
}

pub async fn run(opts: HttpBenchOptions) -> Result<(), String> {
    let server = BenchServer::start().await?;
    let addr = server.addr;
    let base = format!("http://{addr}");
    let client = crate::http_client_builder()
        .pool_max_idle_per_host(opts.clients * 2)
        .build()
        .map_err(|e| e.to_string())?;
    let mut phases = Vec::new();

    // 1. Durable inserts of ~1 KB documents.
    let (c, b) = (client.clone(), base.clone());
    phases.push(
        drive(
            "insert 1 KB docs (fsync)",
            opts.clients,
            opts.insert_secs,
            move |cl, k| {
                let (c, b) = (c.clone(), b.clone());
                async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(cl as u64 * 1_000_003 + k);
                    let doc = kilobyte_doc(&mut rng, k);
                    let url = format!("{b}/v1/docs/bench/c{cl}-{k}");
                    matches!(c.put(url).json(&doc).send().await, Ok(r) if r.status().is_success())
                }
            },
        )
        .await,
    );
    // Every client inserted ids c{cl}-0 .. at least this many (the slowest client's count).
    let inserted_per_client = phases[0].min_client_ops.max(1);

    // 2. Point reads of existing documents.
    let (c, b) = (client.clone(), base.clone());
    phases.push(
        drive("point read", opts.clients, opts.read_secs, move |cl, k| {
            let (c, b) = (c.clone(), b.clone());
            async move {
                let id = (k * 7919) % inserted_per_client.max(1);
                let url = format!("{b}/v1/docs/bench/c{cl}-{id}");
                matches!(c.get(url).send().await, Ok(r) if r.status().is_success())
            }
        })
        .await,
    );

    // 3. Load `range_docs` small documents through /v1/bulk, then range queries returning 100.
    let load_start = Instant::now();
    let chunk = 20_000;
    let mut loaded = 0usize;
    while loaded < opts.range_docs {
        let n = chunk.min(opts.range_docs - loaded);
        let mut body = String::with_capacity(n * 100);
        for i in loaded..loaded + n {
            body.push_str(&json!({"op": "put", "collection": "range", "id": format!("r{i:07}"), "doc": {"n": i, "g": i % 100, "s": "x"}}).to_string());
            body.push('\n');
        }
        let resp: Value = client
            .post(format!("{base}/v1/bulk"))
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if resp["failed"].as_u64() != Some(0) {
            return Err(format!("bulk load failed: {resp}"));
        }
        loaded += n;
    }
    let load_secs = load_start.elapsed().as_secs_f64();
    let total = opts.range_docs as u64;
    let (c, b) = (client.clone(), base.clone());
    phases.push(
        drive(&format!("range query, 100 of {total} docs"), 8, opts.range_secs, move |cl, k| {
            let (c, b) = (c.clone(), b.clone());
            async move {
                let lo = (cl as u64 * 104_729 + k * 7_919) % total.saturating_sub(100).max(1);
                let q = json!({"collection": "range", "filter": {"n": {"$gte": lo, "$lt": lo + 100}}});
                match c.post(format!("{b}/v1/query")).json(&q).send().await {
                    Ok(r) if r.status().is_success() => r.json::<Value>().await.map(|v| v["docs"].as_array().map_or(0, Vec::len) == 100).unwrap_or(false),
                    _ => false,
                }
            }
        })
        .await,
    );

    server.stop().await?;

    println!(
        "{:<38} {:>10} {:>8} {:>12} {:>10} {:>10} {:>10}",
        "phase", "ops", "errors", "ops/s", "p50 ms", "p99 ms", "max ms"
    );
    for p in &phases {
        let r = p.row();
        println!(
            "{:<38} {:>10} {:>8} {:>12.0} {:>10.2} {:>10.2} {:>10.2}",
            p.name,
            p.ops,
            p.errors,
            r["ops_per_sec"].as_f64().unwrap_or(0.0),
            r["latency_ms"]["p50"].as_f64().unwrap_or(0.0),
            r["latency_ms"]["p99"].as_f64().unwrap_or(0.0),
            r["latency_ms"]["max"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "bulk load of {} docs: {:.1} s ({:.0} docs/s)",
        opts.range_docs,
        load_secs,
        opts.range_docs as f64 / load_secs
    );
    let report = json!({
        "benchmark": "http", "clients": opts.clients,
        "phases": phases.iter().map(Phase::row).collect::<Vec<_>>(),
        "bulk_load": {"docs": opts.range_docs, "seconds": load_secs, "docs_per_sec": opts.range_docs as f64 / load_secs},
    });
    if let Some(d) = opts.out.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    std::fs::write(
        &opts.out,
        serde_json::to_string_pretty(&report).expect("json"),
    )
    .map_err(|e| e.to_string())?;
    println!("results written to {}", opts.out.display());
    Ok(())
}
