//! `herald-bench http`: the storage/API benchmark. Starts `herald serve` as a
//! child process on a temporary directory (durable, fsync group commit) on loopback and drives
//! it through real HTTP:
//!
//! 1. durable inserts of ~1 KB documents from `clients` concurrent connections;
//! 2. point reads of random existing documents;
//! 3. an indexed range query returning 100 of `range_docs` documents (loaded through
//!    `/v1/bulk` first).
//!
//! Client and server share the machine's cores, as they would on one small host. The clients
//! are [`crate::harness::loadgen`] keep-alive connections (one request at a time each, as `wrk`
//! does), so the client's share of the CPU stays small; each phase reports the server's and the
//! client's CPU per operation (`utime + stime` from /proc) next to throughput and latency.
//! Prints a table and writes JSON (p50/p99/max latency, throughput, CPU) to `out`.

use crate::harness::cpu::self_cpu_secs;
use crate::harness::loadgen::{Conn, Response};
use crate::harness::server::{Server, ServerOptions};
use crate::harness::Durability;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::fmt::Write as _;
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
    /// CPU seconds of the server and of this (client) process during the phase.
    server_cpu: f64,
    client_cpu: f64,
}

impl Phase {
    fn row(&self) -> Value {
        let us = |q: f64| self.hist.value_at_quantile(q) as f64 / 1000.0;
        let per_op = |cpu: f64| cpu * 1e6 / self.ops.max(1) as f64;
        json!({
            "phase": self.name, "ops": self.ops, "errors": self.errors, "seconds": self.secs,
            "ops_per_sec": self.ops as f64 / self.secs,
            "latency_ms": {"p50": us(0.5), "p99": us(0.99), "max": self.hist.max() as f64 / 1000.0},
            "cpu_us_per_op": {"server": per_op(self.server_cpu), "client": per_op(self.client_cpu)},
        })
    }
}

/// `n` random lowercase letters.
fn letters(rng: &mut fastrand::Rng, n: usize, out: &mut String) {
    out.extend((0..n).map(|_| rng.lowercase()));
}

/// A document of about 1 KB as JSON: nested objects, arrays, text and numbers (also what the
/// `cluster` workload writes).
pub fn kilobyte_doc(rng: &mut fastrand::Rng, i: u64) -> Vec<u8> {
    let mut s = String::with_capacity(1100);
    let _ = write!(s, r#"{{"n":{i},"name":""#);
    letters(rng, 16, &mut s);
    s.push_str(r#"","address":{"street":""#);
    letters(rng, 24, &mut s);
    s.push_str(r#"","city":""#);
    letters(rng, 10, &mut s);
    let (lat, lon) = (rng.f64() * 180.0 - 90.0, rng.f64() * 360.0 - 180.0);
    let _ = write!(s, r#"","geo":{{"lat":{lat},"lon":{lon}}}}},"tags":["#);
    for t in 0..3 {
        s.push_str(if t == 0 { "\"" } else { ",\"" });
        letters(rng, 6, &mut s);
        s.push('"');
    }
    let _ = write!(s, r#"],"score":{},"text":""#, rng.u32(0..1_000_000));
    letters(rng, 700, &mut s);
    s.push_str("\"}");
    s.into_bytes()
}

/// One request of a benchmark client.
struct Req {
    method: &'static str,
    path: String,
    body: Option<Vec<u8>>,
}

/// Runs `clients` connections, each sending `make(client, k)` and checking the response with
/// `check` until `secs` have passed; times each request from its send to its whole response.
async fn drive<M, C>(
    name: &str,
    addr: SocketAddr,
    clients: usize,
    secs: u64,
    make: M,
    check: C,
) -> Phase
where
    M: Fn(usize, u64, &mut fastrand::Rng) -> Req + Send + Sync + 'static,
    C: Fn(&Response) -> bool + Send + Sync + 'static,
{
    let (make, check) = (Arc::new(make), Arc::new(check));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (make, check) = (Arc::clone(&make), Arc::clone(&check));
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let mut rng = fastrand::Rng::with_seed(c as u64 * 1_000_003 + 17);
            let mut conn = Conn::new(addr);
            let (mut ops, mut errors, mut k) = (0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                let req = make(c, k, &mut rng);
                let t = Instant::now();
                let result = conn
                    .request(req.method, &req.path, req.body.as_deref())
                    .await;
                let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                k += 1;
                match result {
                    Ok(r) if check(&r) => ops += 1,
                    Ok(r) => {
                        if errors == 0 {
                            eprintln!(
                                "{} {}: {} {}",
                                req.method,
                                req.path,
                                r.status,
                                String::from_utf8_lossy(&r.body)
                            );
                        }
                        errors += 1
                    }
                    Err(e) => {
                        if errors == 0 {
                            eprintln!("{} {}: {e}", req.method, req.path);
                        }
                        errors += 1
                    }
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
        server_cpu: 0.0,
        client_cpu: 0.0,
    }
}

/// Runs a phase and charges it the CPU the server and this process used meanwhile.
async fn measured(
    server: &Server,
    phase: impl std::future::Future<Output = Phase>,
) -> Result<Phase, String> {
    let gone = || "herald serve exited during the benchmark".to_string();
    let (s0, c0) = (server.proc.cpu_secs().ok_or_else(gone)?, self_cpu_secs());
    let mut p = phase.await;
    p.server_cpu = server.proc.cpu_secs().ok_or_else(gone)? - s0;
    p.client_cpu = self_cpu_secs() - c0;
    Ok(p)
}

pub async fn run(opts: HttpBenchOptions) -> Result<(), String> {
    let mut server = Server::start(ServerOptions::new(Durability::Fsync)).await?;
    let (addr, base) = (server.addr, server.base());
    let client = crate::harness::http_client_builder()
        .build()
        .map_err(|e| e.to_string())?;
    let mut phases = Vec::new();

    // 1. Durable inserts of ~1 KB documents.
    phases.push(
        measured(
            &server,
            drive(
                "insert 1 KB docs (fsync)",
                addr,
                opts.clients,
                opts.insert_secs,
                |cl, k, rng| Req {
                    method: "PUT",
                    path: format!("/v1/docs/bench/c{cl}-{k}"),
                    body: Some(kilobyte_doc(rng, k)),
                },
                |r| (200..300).contains(&r.status),
            ),
        )
        .await?,
    );
    // Every client inserted ids c{cl}-0 .. at least this many (the slowest client's count).
    let inserted_per_client = phases[0].min_client_ops.max(1);

    // 2. Point reads of existing documents.
    phases.push(
        measured(
            &server,
            drive(
                "point read",
                addr,
                opts.clients,
                opts.read_secs,
                move |cl, k, _| Req {
                    method: "GET",
                    path: format!("/v1/docs/bench/c{cl}-{}", (k * 7919) % inserted_per_client),
                    body: None,
                },
                |r| r.status == 200,
            ),
        )
        .await?,
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
    phases.push(
        measured(
            &server,
            drive(
                &format!("range query, 100 of {total} docs"),
                addr,
                8,
                opts.range_secs,
                move |cl, k, _| {
                    let lo = (cl as u64 * 104_729 + k * 7_919) % total.saturating_sub(100).max(1);
                    let q = json!({"collection": "range", "filter": {"n": {"$gte": lo, "$lt": lo + 100}}});
                    Req {
                        method: "POST",
                        path: "/v1/query".into(),
                        body: Some(q.to_string().into_bytes()),
                    }
                },
                |r| {
                    r.status == 200
                        && serde_json::from_slice::<Value>(&r.body)
                            .is_ok_and(|v| v["docs"].as_array().map_or(0, Vec::len) == 100)
                },
            ),
        )
        .await?,
    );
    server.proc.check_alive()?;
    drop(server);

    println!(
        "{:<38} {:>10} {:>8} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "phase",
        "ops",
        "errors",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "server us/op",
        "client us/op"
    );
    for p in &phases {
        let r = p.row();
        println!(
            "{:<38} {:>10} {:>8} {:>12.0} {:>10.2} {:>10.2} {:>10.2} {:>12.1} {:>12.1}",
            p.name,
            p.ops,
            p.errors,
            r["ops_per_sec"].as_f64().unwrap_or(0.0),
            r["latency_ms"]["p50"].as_f64().unwrap_or(0.0),
            r["latency_ms"]["p99"].as_f64().unwrap_or(0.0),
            r["latency_ms"]["max"].as_f64().unwrap_or(0.0),
            r["cpu_us_per_op"]["server"].as_f64().unwrap_or(0.0),
            r["cpu_us_per_op"]["client"].as_f64().unwrap_or(0.0)
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
