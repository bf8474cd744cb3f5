//! Part 3, reads on followers: three nodes with `docs` small documents (loaded through the
//! primary's `/v1/bulk`, then awaited on every node); (a) indexed range queries returning 100
//! documents, closed loop from `clients` connections, on the primary, on a follower and spread
//! over all three; (b) `subs` live subscriptions on a follower and as many on the primary at
//! once, while `rate` writes/s go to the primary: latency from each write's send to its `add`
//! on each side.

use super::load::{self, LoadResult, LoadSpec, Req};
use super::nodes::Nodes;
use super::Ctx;
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Documents a range query returns.
const RANGE: u64 = 100;
/// Bulk lines per request while loading.
const BULK_LINES: u64 = 10_000;
/// How long notifications may trail the last acknowledged write.
const DRAIN_MAX: Duration = Duration::from_secs(10);
/// Subscriptions per WebSocket connection (below the server's per-connection limit).
const SUBS_PER_CONNECTION: u64 = 200;

#[derive(Debug, Clone)]
pub struct ReadOptions {
    pub docs: u64,
    pub clients: usize,
    pub secs: u64,
    pub subs: u64,
    pub sub_rate: u64,
    pub sub_secs: u64,
}

pub struct SubSide {
    pub node: String,
    pub hist: Histogram<u64>,
    pub delivered: u64,
}

pub struct ReadResult {
    pub load_secs: f64,
    pub replicate_secs: f64,
    /// (where, result) for the range queries.
    pub queries: Vec<(String, LoadResult)>,
    pub writes_acked: u64,
    pub write_errors: u64,
    pub write_secs: f64,
    /// Follower first, then the primary.
    pub subs: Vec<SubSide>,
}

impl ReadResult {
    pub fn json(&self) -> Value {
        json!({
            "load_seconds": self.load_secs, "replicated_seconds": self.replicate_secs,
            "range_queries": self.queries.iter().map(|(w, r)| {
                let mut v = r.json();
                v["on"] = json!(w);
                v
            }).collect::<Vec<_>>(),
            "subscriptions": {
                "writes_acked": self.writes_acked, "write_errors": self.write_errors,
                "write_rate": self.writes_acked as f64 / self.write_secs.max(1e-9),
                "sides": self.subs.iter().map(|s| json!({
                    "on": s.node, "delivered": s.delivered,
                    "latency_ms": {"p50": s.hist.value_at_quantile(0.5) as f64 / 1000.0,
                                   "p99": s.hist.value_at_quantile(0.99) as f64 / 1000.0,
                                   "max": s.hist.max() as f64 / 1000.0, "n": s.hist.len()},
                })).collect::<Vec<_>>(),
            },
        })
    }
}

/// Loads `docs` documents `{n, g}` into `range` through `base`'s `/v1/bulk`.
async fn load_docs(client: &reqwest::Client, base: &str, docs: u64) -> Result<(), String> {
    let mut from = 0;
    while from < docs {
        let to = (from + BULK_LINES).min(docs);
        let mut body = String::with_capacity(((to - from) * 90) as usize);
        for i in from..to {
            body.push_str(
                &json!({"op": "put", "collection": "range", "id": format!("r{i:08}"),
                        "doc": {"n": i, "g": i % 100}})
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
        from = to;
    }
    Ok(())
}

/// Waits until every node has document `id` of `range`.
async fn await_everywhere(client: &reqwest::Client, nodes: &Nodes, id: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    for n in &nodes.nodes {
        loop {
            let r = client
                .get(format!("{}/v1/docs/range/{id}", n.base()))
                .send()
                .await;
            if matches!(&r, Ok(r) if r.status() == 200) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("node {} did not apply the loaded documents", n.id));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Subscribes `subs` queries on `collection`, query j filtering with `filter(j)`, on `addr` and
/// returns once every initial result has arrived; the readers then record, for each `add`, the
/// time since its document's `t` (microseconds since `epoch`, stamped by the writer just
/// before sending).
pub(super) async fn subscribe(
    addr: SocketAddr,
    collection: &str,
    filter: impl Fn(u64) -> Value,
    subs: u64,
    epoch: Instant,
    hist: Arc<Mutex<Histogram<u64>>>,
    delivered: Arc<AtomicU64>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let connections = subs.div_ceil(SUBS_PER_CONNECTION).max(1);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(64);
    let mut readers = Vec::new();
    for c in 0..connections {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/ws"))
            .await
            .map_err(|e| e.to_string())?;
        let mine: Vec<u64> = (0..subs)
            .skip(c as usize)
            .step_by(connections as usize)
            .collect();
        for g in &mine {
            let msg = json!({"op": "subscribe", "sub": format!("g{g}"), "collection": collection,
                             "filter": filter(*g)});
            ws.feed(Message::Text(msg.to_string().into()))
                .await
                .map_err(|e| e.to_string())?;
        }
        ws.flush().await.map_err(|e| e.to_string())?;
        let (hist, delivered) = (hist.clone(), delivered.clone());
        let mut ready = Some(ready_tx.clone());
        let mut initials_left = mine.len();
        readers.push(tokio::spawn(async move {
            while let Some(Ok(m)) = ws.next().await {
                let Message::Text(t) = m else { continue };
                let now_us = epoch.elapsed().as_micros() as u64;
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
                            eprintln!("subscriber on {addr}: {v}");
                        }
                    }
                    Some("changes") => {
                        for ch in v["changes"].as_array().into_iter().flatten() {
                            if ch["kind"] != "add" {
                                continue;
                            }
                            if let Some(t) = ch["doc"]["t"].as_u64() {
                                let _ = hist
                                    .lock()
                                    .expect("lock")
                                    .record(now_us.saturating_sub(t).max(1));
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

pub async fn run(ctx: &Ctx, opts: &ReadOptions) -> Result<ReadResult, String> {
    let client = crate::harness::http_client();
    let mut nodes = Nodes::start(3, ctx.node_config(Some("reads"))).await?;
    let p = nodes.primary(&client, Duration::from_secs(60)).await?;
    let f = (p + 1) % 3;
    let (primary, follower) = (nodes.nodes[p].id.clone(), nodes.nodes[f].id.clone());

    eprintln!("[reads: loading {} documents through {primary}]", opts.docs);
    let t = Instant::now();
    load_docs(&client, &nodes.nodes[p].base(), opts.docs).await?;
    let load_secs = t.elapsed().as_secs_f64();
    await_everywhere(
        &client,
        &nodes,
        &format!("r{:08}", opts.docs.saturating_sub(1)),
    )
    .await?;
    let replicate_secs = t.elapsed().as_secs_f64();

    let (pids, kafka) = (nodes.pids(), ctx.kafka_pids());
    let total = opts.docs;
    let make: load::MakeReq = Arc::new(move |i, rng| {
        let lo = rng.u64(0..total.saturating_sub(RANGE).max(1));
        let _ = i;
        Req {
            method: "POST",
            path: "/v1/query".into(),
            body: Some(
                json!({"collection": "range", "filter": {"n": {"$gte": lo, "$lt": lo + RANGE}}})
                    .to_string()
                    .into_bytes(),
            ),
        }
    });
    let want = RANGE.min(total) as usize;
    let check: load::CheckResp = Arc::new(move |r| {
        r.status == 200
            && serde_json::from_slice::<Value>(&r.body)
                .is_ok_and(|v| v["docs"].as_array().map_or(0, Vec::len) == want)
    });
    let mut queries = Vec::new();
    let all: Vec<SocketAddr> = nodes.nodes.iter().map(|n| n.addr).collect();
    for (name, targets) in [
        (format!("primary ({primary})"), vec![nodes.nodes[p].addr]),
        (format!("follower ({follower})"), vec![nodes.nodes[f].addr]),
        ("all 3 nodes".to_string(), all),
    ] {
        eprintln!(
            "[reads: range queries on {name}: {} clients, {} s]",
            opts.clients, opts.secs
        );
        let r = load::run(
            LoadSpec {
                targets,
                connections: opts.clients,
                rate: None,
                secs: opts.secs as f64,
                make: make.clone(),
                check: check.clone(),
            },
            &pids,
            &kafka,
        )
        .await;
        nodes.check_alive()?;
        queries.push((name, r));
    }

    // Subscriptions on the follower and the primary at once, the same writes feeding both.
    eprintln!(
        "[reads: {} subscriptions each on {follower} and {primary}, {} writes/s for {} s]",
        opts.subs, opts.sub_rate, opts.sub_secs
    );
    let epoch = Instant::now();
    let mut sides = Vec::new();
    let mut readers = Vec::new();
    for i in [f, p] {
        let hist = Arc::new(Mutex::new(
            Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram"),
        ));
        let delivered = Arc::new(AtomicU64::new(0));
        readers.extend(
            subscribe(
                nodes.nodes[i].addr,
                "subs",
                |g| json!({"g": g}),
                opts.subs,
                epoch,
                hist.clone(),
                delivered.clone(),
            )
            .await?,
        );
        sides.push((nodes.nodes[i].id.clone(), hist, delivered));
    }
    let subs = opts.subs.max(1);
    let write = load::run(
        LoadSpec {
            targets: vec![nodes.nodes[p].addr],
            connections: 64,
            rate: Some(opts.sub_rate),
            secs: opts.sub_secs as f64,
            make: Arc::new(move |i, _| Req {
                method: "PUT",
                path: format!("/v1/docs/subs/s{i}"),
                body: Some(
                    json!({"g": i % subs, "t": epoch.elapsed().as_micros() as u64})
                        .to_string()
                        .into_bytes(),
                ),
            }),
            check: Arc::new(|r| (200..300).contains(&r.status)),
        },
        &pids,
        &kafka,
    )
    .await;
    let deadline = Instant::now() + DRAIN_MAX;
    while sides
        .iter()
        .any(|(_, _, d)| d.load(Ordering::Relaxed) < write.ok)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in readers {
        r.abort();
    }
    nodes.check_alive()?;
    Ok(ReadResult {
        load_secs,
        replicate_secs,
        queries,
        writes_acked: write.ok,
        write_errors: write.errors,
        write_secs: write.secs,
        subs: sides
            .into_iter()
            .map(|(node, hist, d)| SubSide {
                node,
                hist: hist.lock().expect("lock").clone(),
                delivered: d.load(Ordering::Relaxed),
            })
            .collect(),
    })
}
