//! The benchmark clients' connections to the server: a batch writer over `POST /v1/bulk` or
//! WebSocket write requests (at most [`BATCHES_INFLIGHT_MAX`] batches outstanding per writer,
//! so a slow server slows the generator instead of growing its memory), live subscriptions
//! that hand every change to a callback, and pull queries.

use crate::harness::record::Recorder;
use futures_util::{SinkExt, StreamExt};
use herald_protocol::limits::WS_MESSAGE_BYTES_MAX;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::tungstenite::Message;

/// Batches sent and not yet acknowledged, per writer. Generous on purpose: the server's own
/// bound (2,048 writes in flight per WebSocket; TCP backpressure beyond) is what should slow a
/// generator, not this client.
pub const BATCHES_INFLIGHT_MAX: usize = 64;
/// Most writes per batch (the server's limit per WebSocket write request).
pub const BATCH_WRITES_MAX: usize = herald_db::COMMIT_WRITES_MAX;
/// Room for a WebSocket write request's fields around its writes.
const WS_ENVELOPE_BYTES: usize = 96;
/// Errors printed per run; the rest are only counted.
const ERRORS_PRINTED_MAX: u64 = 5;

/// How writes reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `POST /v1/bulk`, one NDJSON request per batch.
    Bulk,
    /// One streamed `POST /v1/bulk` per writer for the whole run: no acknowledgement until the
    /// stream ends, so no acknowledgement latency either.
    Stream,
    /// `{"op":"write"}` requests (non-atomic) on one WebSocket per writer.
    Ws,
}

impl Via {
    pub fn name(self) -> &'static str {
        match self {
            Via::Bulk => "bulk",
            Via::Stream => "stream",
            Via::Ws => "ws",
        }
    }
}

/// Chunks a [`BulkStream`] may have queued ahead of the connection.
const STREAM_CHUNKS_MAX: usize = 1024;

/// One streamed `POST /v1/bulk`: NDJSON chunks go out as they are handed over (a bounded
/// queue ahead of the socket, so a server that stops reading slows the sender), and the
/// server's tally (`{"lines","applied","failed",...}`) comes back when the stream ends.
pub struct BulkStream {
    tx: mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
    request: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
}

impl BulkStream {
    pub fn open(http: &reqwest::Client, addr: SocketAddr) -> BulkStream {
        let (tx, mut rx) = mpsc::channel(STREAM_CHUNKS_MAX);
        let body =
            reqwest::Body::wrap_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        let request = tokio::spawn(
            http.post(format!("http://{addr}/v1/bulk"))
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send(),
        );
        BulkStream { tx, request }
    }

    /// Queues NDJSON lines (each ending in a newline).
    pub async fn send(&self, chunk: Vec<u8>) -> Result<(), String> {
        self.tx
            .send(Ok(chunk))
            .await
            .map_err(|_| "the bulk request ended early".to_string())
    }

    /// Ends the body and returns the server's tally.
    pub async fn finish(self) -> Result<Value, String> {
        drop(self.tx);
        let response = self
            .request
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("bulk request: {e}"))?;
        let tally: Value = response
            .json()
            .await
            .map_err(|e| format!("bulk response: {e}"))?;
        if !tally["applied"].is_u64() {
            return Err(format!("bulk response: {tally}"));
        }
        Ok(tally)
    }
}

/// Serialized writes as NDJSON: one per line.
fn ndjson(lines: &[String]) -> String {
    let mut body = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for l in lines {
        body.push_str(l);
        body.push('\n');
    }
    body
}

/// Write outcomes shared by every writer of a run.
pub struct Acks {
    pub applied: AtomicU64,
    pub failed: AtomicU64,
    errors_printed: AtomicU64,
    /// Where acknowledgement latency goes (series `series`), measured from each batch's `t0`.
    recorder: Recorder,
    series: usize,
}

impl Acks {
    pub fn new(recorder: Recorder, series: usize) -> Arc<Acks> {
        Arc::new(Acks {
            applied: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            errors_printed: AtomicU64::new(0),
            recorder,
            series,
        })
    }

    fn settle(&self, t0: Instant, applied: u64, failed: u64, error: Option<String>) {
        let now = Instant::now();
        let us = now.saturating_duration_since(t0).as_micros() as u64;
        self.recorder.record_n(self.series, now, us, applied);
        self.count(applied, failed, error);
    }

    /// Counts outcomes without a latency (a streamed request's tally at its end).
    fn count(&self, applied: u64, failed: u64, error: Option<String>) {
        self.applied.fetch_add(applied, Ordering::Relaxed);
        self.failed.fetch_add(failed, Ordering::Relaxed);
        if let Some(e) = error {
            if self.errors_printed.fetch_add(1, Ordering::Relaxed) < ERRORS_PRINTED_MAX {
                eprintln!("herald-bench: write error: {e}");
            }
        }
    }
}

/// A batch waiting for its WebSocket reply: when it was due, its size, its slot.
type Waiting = (Instant, u64, OwnedSemaphorePermit);

enum Transport {
    Bulk {
        http: reqwest::Client,
        url: String,
    },
    /// `None` once [`Writer::flush`] ended the stream.
    Stream(tokio::sync::Mutex<Option<BulkStream>>),
    Ws {
        out: mpsc::Sender<String>,
        waiting: Arc<Mutex<VecDeque<Waiting>>>,
        next_req: AtomicU64,
    },
}

/// One writer: sends batches, at most [`BATCHES_INFLIGHT_MAX`] outstanding.
pub struct Writer {
    transport: Transport,
    slots: Arc<Semaphore>,
    acks: Arc<Acks>,
    /// WebSocket only: each batch is one transaction (`"atomic": true`) instead of one per
    /// write.
    atomic: bool,
}

impl Writer {
    pub async fn connect(addr: SocketAddr, via: Via, acks: Arc<Acks>) -> Result<Writer, String> {
        let slots = Arc::new(Semaphore::new(BATCHES_INFLIGHT_MAX));
        let transport = match via {
            Via::Bulk => Transport::Bulk {
                http: crate::harness::http_client(),
                url: format!("http://{addr}/v1/bulk"),
            },
            Via::Stream => Transport::Stream(tokio::sync::Mutex::new(Some(BulkStream::open(
                &crate::harness::http_client(),
                addr,
            )))),
            Via::Ws => {
                let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/ws"))
                    .await
                    .map_err(|e| format!("websocket: {e}"))?;
                let (mut sink, mut stream) = ws.split();
                let (out, mut rx) = mpsc::channel::<String>(BATCHES_INFLIGHT_MAX);
                tokio::spawn(async move {
                    while let Some(text) = rx.recv().await {
                        if sink.send(Message::Text(text.into())).await.is_err() {
                            break;
                        }
                    }
                });
                let waiting: Arc<Mutex<VecDeque<Waiting>>> = Arc::default();
                let (w, acks) = (waiting.clone(), acks.clone());
                tokio::spawn(async move {
                    while let Some(Ok(m)) = stream.next().await {
                        let Message::Text(t) = m else { continue };
                        let Ok(v) = serde_json::from_str::<Value>(&t) else {
                            continue;
                        };
                        if v["type"] == "heartbeat" {
                            continue;
                        }
                        // Replies come in request order.
                        let Some((t0, n, _slot)) = w.lock().expect("lock").pop_front() else {
                            continue;
                        };
                        match v["type"].as_str() {
                            Some("written") => {
                                let results = v["results"].as_array().cloned().unwrap_or_default();
                                let bad = results.iter().filter(|r| r.get("error").is_some());
                                let failed = bad.clone().count() as u64;
                                let first = bad.map(|r| r["error"].to_string()).next();
                                acks.settle(t0, n - failed, failed, first);
                            }
                            _ => acks.settle(t0, 0, n, Some(v.to_string())),
                        }
                    }
                });
                Transport::Ws {
                    out,
                    waiting,
                    next_req: AtomicU64::new(0),
                }
            }
        };
        Ok(Writer {
            transport,
            slots,
            acks,
            atomic: false,
        })
    }

    /// Makes every later batch one atomic transaction (WebSocket writers only).
    pub fn atomic(mut self, atomic: bool) -> Result<Writer, String> {
        if atomic && !matches!(self.transport, Transport::Ws { .. }) {
            return Err("atomic batches need --via ws".into());
        }
        self.atomic = atomic;
        Ok(self)
    }

    /// Sends one batch (at most [`BATCH_WRITES_MAX`] writes in the `/v1/commit` format);
    /// acknowledgement latency is measured from `t0`. See [`Self::send_lines`].
    pub async fn send(&self, writes: Vec<Value>, t0: Instant) -> Result<(), String> {
        self.send_lines(writes.iter().map(Value::to_string).collect(), t0)
            .await
    }

    /// Sends one batch whose writes are already serialized, one JSON object each: the
    /// generators build them as text, so that the client's share of the machine stays small
    /// (serializing a batch through `serde_json::Value` twice cost a stream burst a third of
    /// its time). Waits while the writer has [`BATCHES_INFLIGHT_MAX`] batches outstanding.
    /// Over the WebSocket, a batch whose message would exceed the server's message limit goes
    /// as several requests.
    pub async fn send_lines(&self, lines: Vec<String>, t0: Instant) -> Result<(), String> {
        assert!(lines.len() <= BATCH_WRITES_MAX, "batch over the limit");
        if let Transport::Ws { .. } = self.transport {
            let mut parts = vec![lines];
            while let Some(mut w) = parts.pop() {
                let bytes: usize = w.iter().map(|l| l.len() + 1).sum();
                if bytes + WS_ENVELOPE_BYTES > WS_MESSAGE_BYTES_MAX && w.len() > 1 {
                    let rest = w.split_off(w.len() / 2);
                    parts.push(rest);
                    parts.push(w);
                    continue;
                }
                self.send_one(w, t0).await?;
            }
            return Ok(());
        }
        self.send_one(lines, t0).await
    }

    async fn send_one(&self, lines: Vec<String>, t0: Instant) -> Result<(), String> {
        if let Transport::Stream(stream) = &self.transport {
            let chunk = ndjson(&lines).into_bytes();
            let guard = stream.lock().await;
            let s = guard
                .as_ref()
                .ok_or("the bulk stream is already finished")?;
            return s.send(chunk).await;
        }
        let n = lines.len() as u64;
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        match &self.transport {
            Transport::Stream(_) => unreachable!("handled above"),
            Transport::Bulk { http, url } => {
                let body = ndjson(&lines);
                let (http, url, acks) = (http.clone(), url.clone(), self.acks.clone());
                tokio::spawn(async move {
                    let r = http.post(url).body(body).send().await;
                    let v = match r {
                        Ok(r) => r.json::<Value>().await.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    match v {
                        Ok(v) if v["applied"].is_u64() => {
                            let failed = v["failed"].as_u64().unwrap_or(0);
                            let first = v["errors"].get(0).map(Value::to_string);
                            acks.settle(t0, v["applied"].as_u64().unwrap_or(0), failed, first);
                        }
                        Ok(v) => acks.settle(t0, 0, n, Some(v.to_string())),
                        Err(e) => acks.settle(t0, 0, n, Some(e)),
                    }
                    drop(slot);
                });
            }
            Transport::Ws {
                out,
                waiting,
                next_req,
            } => {
                let req = next_req.fetch_add(1, Ordering::Relaxed);
                let msg = format!(
                    r#"{{"op":"write","req":"{req}","atomic":{},"writes":[{}]}}"#,
                    self.atomic,
                    lines.join(",")
                );
                // Queue the waiter first: the reply cannot overtake it.
                waiting.lock().expect("lock").push_back((t0, n, slot));
                out.send(msg)
                    .await
                    .map_err(|_| "the websocket closed".to_string())?;
            }
        }
        Ok(())
    }

    /// Waits until every batch sent is acknowledged. A streamed writer ends its request here
    /// (and counts its tally); it cannot send afterwards.
    pub async fn flush(&self) {
        if let Transport::Stream(stream) = &self.transport {
            if let Some(s) = stream.lock().await.take() {
                match s.finish().await {
                    Ok(t) => self.acks.count(
                        t["applied"].as_u64().unwrap_or(0),
                        t["failed"].as_u64().unwrap_or(0),
                        t["errors"].get(0).map(Value::to_string),
                    ),
                    Err(e) => self.acks.count(0, 0, Some(e)),
                }
            }
            return;
        }
        let all = self
            .slots
            .acquire_many(BATCHES_INFLIGHT_MAX as u32)
            .await
            .expect("semaphore open");
        drop(all);
    }
}

/// Opens a WebSocket, subscribes `query` (a subscribe message without `op`/`sub`), waits for
/// the initial result and calls `on_change(change, arrival)` for every change of every
/// `changes` message until the task is aborted. When the server closes the connection (a
/// slow consumer, whose outbound queue filled), it reports why on stderr, counts it in
/// `resumes`, reconnects and resumes from the last seq it received, as a client should: the
/// missed batches arrive late, and their latency shows it.
pub async fn subscribe<F>(
    addr: SocketAddr,
    query: Value,
    resumes: Arc<AtomicU64>,
    mut on_change: F,
) -> Result<tokio::task::JoinHandle<()>, String>
where
    F: FnMut(&Value, Instant) + Send + 'static,
{
    let mut ws = open_subscription(addr, &query, None).await?;
    Ok(tokio::spawn(async move {
        let mut last_seq = None;
        loop {
            let closed = loop {
                let m = match ws.next().await {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => break e.to_string(),
                    None => break "closed".to_string(),
                };
                let now = Instant::now();
                let t = match m {
                    Message::Text(t) => t,
                    Message::Close(frame) => {
                        break frame.map_or("closed".into(), |f| f.reason.to_string())
                    }
                    _ => continue,
                };
                let Ok(v) = serde_json::from_str::<Value>(&t) else {
                    continue;
                };
                if let Some(seq) = v["seq"].as_u64() {
                    last_seq = Some(seq);
                }
                match v["type"].as_str() {
                    Some("changes") => {
                        for c in v["changes"].as_array().into_iter().flatten() {
                            on_change(c, now);
                        }
                    }
                    Some("reset") | Some("error") => eprintln!("herald-bench: subscriber: {v}"),
                    _ => {}
                }
            };
            eprintln!(
                "herald-bench: subscriber: the server closed the connection ({closed}); resuming"
            );
            resumes.fetch_add(1, Ordering::Relaxed);
            match open_subscription(addr, &query, last_seq).await {
                Ok(again) => ws = again,
                Err(e) => {
                    eprintln!("herald-bench: subscriber: could not resume: {e}");
                    return;
                }
            }
        }
    }))
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket with `query` subscribed: after its initial result, or, with `resume`, right
/// away (the missed batches follow).
async fn open_subscription(
    addr: SocketAddr,
    query: &Value,
    resume: Option<u64>,
) -> Result<Ws, String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/ws"))
        .await
        .map_err(|e| format!("websocket: {e}"))?;
    let mut msg = query.clone();
    msg["op"] = json!("subscribe");
    msg["sub"] = json!("s");
    if let Some(seq) = resume {
        msg["resumeFrom"] = json!(seq);
    }
    ws.send(Message::Text(msg.to_string().into()))
        .await
        .map_err(|e| e.to_string())?;
    if resume.is_some() {
        return Ok(ws);
    }
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(30), ws.next())
            .await
            .map_err(|_| "no initial result within 30 s".to_string())?;
        let Some(Ok(Message::Text(t))) = m else {
            return Err("the subscription's websocket closed".into());
        };
        let v: Value = serde_json::from_str(&t).map_err(|e| e.to_string())?;
        match v["type"].as_str() {
            Some("initial") => return Ok(ws),
            Some("error") => return Err(format!("subscription failed: {v}")),
            _ => {}
        }
    }
}

/// `POST /v1/query`; the response body.
pub async fn query(http: &reqwest::Client, addr: SocketAddr, q: &Value) -> Result<Value, String> {
    // A body with a pipeline is an aggregation.
    let path = if q.get("pipeline").is_some() {
        "aggregate"
    } else {
        "query"
    };
    let r = http
        .post(format!("http://{addr}/v1/{path}"))
        .json(q)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let ok = r.status().is_success();
    let v: Value = r.json().await.map_err(|e| e.to_string())?;
    if !ok {
        return Err(format!("query {q} failed: {v}"));
    }
    Ok(v)
}

/// The server's last committed seq (`GET /v1/health`).
pub async fn seq(http: &reqwest::Client, addr: SocketAddr) -> Result<u64, String> {
    let v: Value = http
        .get(format!("http://{addr}/v1/health"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    v["seq"].as_u64().ok_or_else(|| format!("health: {v}"))
}

/// Every document id of `collection`, in `_id` order, read in pages (for counting).
pub async fn count(
    http: &reqwest::Client,
    addr: SocketAddr,
    collection: &str,
    mut each: impl FnMut(&Value),
) -> Result<u64, String> {
    const PAGE: u64 = 5_000;
    let (mut n, mut last) = (0u64, None::<String>);
    loop {
        let filter = match &last {
            Some(l) => json!({"_id": {"$gt": l}}),
            None => json!({}),
        };
        let q =
            json!({"collection": collection, "filter": filter, "sort": {"_id": 1}, "limit": PAGE});
        let v = query(http, addr, &q).await?;
        let docs = v["docs"].as_array().cloned().unwrap_or_default();
        for d in &docs {
            each(d);
        }
        n += docs.len() as u64;
        match docs.last() {
            Some(d) if docs.len() as u64 == PAGE => last = d["_id"].as_str().map(str::to_string),
            _ => return Ok(n),
        }
    }
}
