//! `herald-bench planner`: sorted pages served from indexes (issue 30). Loads `docs` chat
//! messages (`{"room":"rK","ts":i,"text":...}`, `rooms` rooms, `ts` unique) through `/v1/bulk`
//! into a `herald serve` with a composite index `(room asc, ts desc)`, then measures two queries
//! apps write:
//!
//! - "newest 50 of a room": `{"room":"rK"}` sorted `{"ts":-1}`, limit 50, a random room each
//!   time; served by an ordered scan of the composite index;
//! - "newest 1 overall": no filter, sorted `{"ts":-1}`, limit 1; served by an ordered scan of
//!   the automatic `ts` index;
//! - "count of a ts range": `POST /v1/aggregate` `[{$match: {ts: {$gte: s, $lt: s + 100000}}},
//!   {$count: "n"}]` at a random `s`: 100,000 index keys counted, no document read;
//! - "max ts by $group": `[{$group: {_id: null, m: {$max: "$ts"}}}]`, the RockBench reader's
//!   `max(_event_time)`: one entry of the `ts` index.
//!
//! Each runs over HTTP (one keep-alive client, one request at a time: latency, not capacity)
//! and, after the server is stopped, in-process on the same data (`Db::query` timed: the
//! server-side cost without HTTP). `explain` of each (asked over HTTP) gives the plan and the
//! keys examined. Prints a table and writes JSON to `out`.

use crate::harness::loadgen::Conn;
use crate::harness::server::{Server, ServerOptions};
use crate::harness::Durability;
use hdrhistogram::Histogram;
use herald_db::{Db, DbOptions};
use herald_query::pipeline::Pipeline;
use herald_query::Query;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct PlannerBenchOptions {
    pub docs: usize,
    pub rooms: usize,
    /// Seconds of each measured phase.
    pub secs: u64,
    pub out: std::path::PathBuf,
}

/// Keys a counted range spans.
const COUNT_RANGE: usize = 100_000;

/// One query shape: its body for a random number below the room count (or, for a range, below
/// the document count), and the documents every answer has.
struct Shape {
    name: &'static str,
    /// `POST /v1/aggregate` (else `/v1/query`).
    aggregate: bool,
    body: fn(usize) -> Value,
    /// Picks the body's number: `rng`, rooms, docs.
    pick: fn(&mut fastrand::Rng, usize, usize) -> usize,
    limit: usize,
}

fn any_room(rng: &mut fastrand::Rng, rooms: usize, _docs: usize) -> usize {
    rng.usize(0..rooms)
}

fn shapes() -> [Shape; 4] {
    [
        Shape {
            name: "newest 50 of a room",
            aggregate: false,
            body: |room| json!({"collection": "chat", "filter": {"room": format!("r{room}")}, "sort": {"ts": -1}, "limit": 50}),
            pick: any_room,
            limit: 50,
        },
        Shape {
            name: "newest 1 overall",
            aggregate: false,
            body: |_| json!({"collection": "chat", "sort": {"ts": -1}, "limit": 1}),
            pick: any_room,
            limit: 1,
        },
        Shape {
            name: "count of a ts range",
            aggregate: true,
            body: |s| {
                json!({"collection": "chat", "pipeline": [
                {"$match": {"ts": {"$gte": s, "$lt": s + COUNT_RANGE}}}, {"$count": "n"}]})
            },
            pick: |rng, _, docs| rng.usize(0..=docs.saturating_sub(COUNT_RANGE)),
            limit: 1,
        },
        Shape {
            name: "max ts by $group",
            aggregate: true,
            body: |_| {
                json!({"collection": "chat", "pipeline": [
                {"$group": {"_id": null, "m": {"$max": "$ts"}}}]})
            },
            pick: any_room,
            limit: 1,
        },
    ]
}

impl Shape {
    fn path(&self) -> &'static str {
        if self.aggregate {
            "/v1/aggregate"
        } else {
            "/v1/query"
        }
    }
}

fn hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram")
}

fn latency(h: &Histogram<u64>) -> Value {
    let ms = |v: u64| v as f64 / 1000.0;
    json!({"p50": ms(h.value_at_quantile(0.5)), "p99": ms(h.value_at_quantile(0.99)),
           "max": ms(h.max()), "count": h.len()})
}

async fn load(base: &str, opts: &PlannerBenchOptions) -> Result<f64, String> {
    let client = crate::harness::http_client_builder()
        .build()
        .map_err(|e| e.to_string())?;
    let index = json!({"collection": "chat", "name": "room_ts",
        "fields": [{"path": "room", "order": 1}, {"path": "ts", "order": -1}]});
    let r = client
        .post(format!("{base}/v1/indexes"))
        .json(&index)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!(
            "create index: {}",
            r.text().await.unwrap_or_default()
        ));
    }
    let start = Instant::now();
    let chunk = 20_000;
    let mut loaded = 0usize;
    while loaded < opts.docs {
        let n = chunk.min(opts.docs - loaded);
        let mut body = String::with_capacity(n * 120);
        for i in loaded..loaded + n {
            let doc = json!({"room": format!("r{}", i % opts.rooms), "ts": i,
                "text": format!("message {i} of room {}", i % opts.rooms)});
            body.push_str(
                &json!({"op": "put", "collection": "chat", "id": format!("m{i:08}"), "doc": doc})
                    .to_string(),
            );
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
    Ok(start.elapsed().as_secs_f64())
}

/// The plan and keys examined of one query, asked over HTTP with `explain`.
async fn explain(conn: &mut Conn, mut body: Value) -> Result<Value, String> {
    body["explain"] = json!(true);
    let path = if body.get("pipeline").is_some() {
        "/v1/aggregate"
    } else {
        "/v1/query"
    };
    let r = conn
        .request("POST", path, Some(body.to_string().as_bytes()))
        .await?;
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("explain: {} {v}", r.status));
    }
    // An aggregation explains its head query.
    let e = &v["explain"];
    Ok(e.get("query").unwrap_or(e).clone())
}

async fn over_http(
    conn: &mut Conn,
    shape: &Shape,
    opts: &PlannerBenchOptions,
) -> Result<Histogram<u64>, String> {
    let mut h = hist();
    let mut rng = fastrand::Rng::with_seed(7);
    let deadline = Instant::now() + Duration::from_secs(opts.secs);
    while Instant::now() < deadline {
        let body = (shape.body)((shape.pick)(&mut rng, opts.rooms, opts.docs)).to_string();
        let t = Instant::now();
        let r = conn
            .request("POST", shape.path(), Some(body.as_bytes()))
            .await?;
        let _ = h.record(t.elapsed().as_micros().max(1) as u64);
        let n = serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|v| v["docs"].as_array().map(Vec::len));
        if r.status != 200 || n != Some(shape.limit) {
            return Err(format!(
                "{}: status {} with {n:?} docs",
                shape.name, r.status
            ));
        }
    }
    Ok(h)
}

fn in_process(
    db: &Db,
    shape: &Shape,
    opts: &PlannerBenchOptions,
) -> Result<Histogram<u64>, String> {
    let mut h = hist();
    let mut rng = fastrand::Rng::with_seed(11);
    let deadline = Instant::now() + Duration::from_secs(opts.secs);
    while Instant::now() < deadline {
        let mut body = (shape.body)((shape.pick)(&mut rng, opts.rooms, opts.docs));
        if let Some(m) = body.as_object_mut() {
            m.remove("collection");
        }
        let t;
        let docs = if shape.aggregate {
            let p = Pipeline::parse(&body["pipeline"]).map_err(|e| e.to_string())?;
            t = Instant::now();
            db.aggregate("chat", &p, None)
                .map_err(|e| e.to_string())?
                .docs
        } else {
            let q = Query::parse(&body).map_err(|e| e.to_string())?;
            t = Instant::now();
            db.query("chat", &q).map_err(|e| e.to_string())?.docs
        };
        let _ = h.record(t.elapsed().as_micros().max(1) as u64);
        if docs.len() != shape.limit {
            return Err(format!("{}: {} docs", shape.name, docs.len()));
        }
    }
    Ok(h)
}

pub async fn run(opts: PlannerBenchOptions) -> Result<(), String> {
    let server = Server::start(ServerOptions::new(Durability::NoSync)).await?;
    let base = server.base();
    println!("loading {} messages in {} rooms ...", opts.docs, opts.rooms);
    let load_secs = load(&base, &opts).await?;
    println!(
        "loaded in {load_secs:.1} s ({:.0} docs/s)",
        opts.docs as f64 / load_secs
    );
    let mut conn = Conn::new(server.addr);
    let mut rows = Vec::new();
    for shape in shapes() {
        let explained = explain(&mut conn, (shape.body)(opts.rooms / 3)).await?;
        if shape.aggregate && shape.name.starts_with("count") {
            let want = COUNT_RANGE.min(opts.docs - opts.rooms / 3) as u64;
            if explained["returned"].as_u64() != Some(1)
                || explained["keysExamined"].as_u64() != Some(want)
            {
                return Err(format!("{}: explain {explained}", shape.name));
            }
        }
        let http = over_http(&mut conn, &shape, &opts).await?;
        rows.push((shape, explained, http));
    }
    drop(conn);
    let dir = server.kill_keeping_data();
    // The same data in-process: what a query costs the server without HTTP.
    let reopen = Instant::now();
    let db =
        Db::open(&dir.path().join("herald"), DbOptions::default()).map_err(|e| e.to_string())?;
    let reopen_secs = reopen.elapsed().as_secs_f64();
    let mut report_rows = Vec::new();
    println!(
        "{:<22} {:<26} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "query",
        "plan",
        "keys",
        "docs",
        "http p50",
        "http p99",
        "http max",
        "srv p50",
        "srv p99",
        "srv max"
    );
    for (shape, explained, http) in rows {
        let server_side = in_process(&db, &shape, &opts)?;
        let plan = format!(
            "{} {}",
            explained["plan"]["type"].as_str().unwrap_or("?"),
            explained["plan"]["index"].as_str().unwrap_or("")
        );
        let (h, s) = (latency(&http), latency(&server_side));
        println!(
            "{:<22} {:<26} {:>6} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            shape.name,
            plan,
            explained["keysExamined"].as_u64().unwrap_or(0),
            explained["docsExamined"].as_u64().unwrap_or(0),
            h["p50"].as_f64().unwrap_or(0.0),
            h["p99"].as_f64().unwrap_or(0.0),
            h["max"].as_f64().unwrap_or(0.0),
            s["p50"].as_f64().unwrap_or(0.0),
            s["p99"].as_f64().unwrap_or(0.0),
            s["max"].as_f64().unwrap_or(0.0),
        );
        report_rows.push(json!({
            "query": shape.name, "body": (shape.body)(opts.rooms / 3), "explain": explained,
            "http_ms": h, "server_side_ms": s,
        }));
    }
    println!(
        "(latency in ms; server side: Db::query or Db::aggregate in-process on the same data)"
    );
    let report = json!({
        "benchmark": "planner", "docs": opts.docs, "rooms": opts.rooms, "secs_per_phase": opts.secs,
        "bulk_load": {"seconds": load_secs, "docs_per_sec": opts.docs as f64 / load_secs},
        "reopen_seconds": reopen_secs,
        "queries": report_rows,
    });
    drop(db);
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
