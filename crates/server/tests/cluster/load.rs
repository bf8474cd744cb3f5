//! The fault test's load: writers that each own their documents and issue one request at a
//! time (so the test knows every acknowledged value and the at most one write whose outcome is
//! unknown), torn-read probes, and live subscribers that rebuild their window from the
//! messages. Everything talks to random nodes over HTTP and WebSocket.

use futures_util::{SinkExt, StreamExt};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Any one request's limit: above the longest SIGSTOP, so a write in flight on a stopped
/// primary is answered (or refused) after SIGCONT and its answer counted.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
/// How long a transaction is retried (same mutation id) before its outcome is left unknown.
const TX_RETRY_FOR: Duration = Duration::from_secs(60);
/// Bulk lines per request.
const BULK_LINES: usize = 20;
/// The failover probe's request timeout.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Impossible answers kept for the failure message.
const ANOMALIES_KEPT: usize = 10;
/// `p/w{W}-{k}` ids per put writer.
pub const PUT_IDS: u64 = 4;
/// The live query every subscriber runs (and the pull query it is compared with).
pub fn live_query() -> Value {
    json!({"collection": "p", "sort": {"gen": -1}, "limit": 10})
}

/// A failover being timed: when the primary was killed or stopped.
#[derive(Default)]
pub struct Failover {
    pub since: Option<Instant>,
    pub times: Vec<Duration>,
}

/// What the writers know, shared with the checks.
#[derive(Default)]
pub struct Ledger {
    /// `p/{id}`: (last acknowledged gen, highest gen sent).
    pub puts: BTreeMap<String, (u64, u64)>,
    /// Transaction writer `w`: acknowledged ks, and every k sent.
    pub tx_acked: BTreeMap<u64, BTreeSet<u64>>,
    pub tx_sent: BTreeMap<u64, BTreeSet<u64>>,
    /// `bulk/{id}` acknowledged.
    pub bulk_acked: BTreeSet<String>,
    /// `a/{id}` (append writers, aimed at the primary) acknowledged, and every id sent.
    pub append_acked: BTreeSet<String>,
    pub append_sent: BTreeSet<String>,
    pub acks: u64,
    pub refusals: u64,
    /// Torn transactions seen by a probe: (node, docs).
    pub torn: Vec<String>,
    /// Any other impossible answer (the first few), and how many there were.
    pub anomalies: Vec<String>,
    pub anomaly_count: u64,
}

pub struct Load {
    pub urls: Vec<String>,
    /// What each node's stderr announced (which node is the primary).
    pub announced: Vec<Arc<Mutex<crate::node::Announced>>>,
    pub stop: AtomicBool,
    pub ledger: Mutex<Ledger>,
    pub failover: Mutex<Failover>,
    pub http: reqwest::Client,
    pub run: String,
}

impl Load {
    pub fn new(
        urls: Vec<String>,
        announced: Vec<Arc<Mutex<crate::node::Announced>>>,
        run: String,
    ) -> Arc<Load> {
        Arc::new(Load {
            urls,
            announced,
            stop: AtomicBool::new(false),
            ledger: Mutex::default(),
            failover: Mutex::default(),
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .pool_idle_timeout(Duration::from_secs(2))
                .build()
                .unwrap(),
            run,
        })
    }

    /// The node that last announced the highest epoch, stopped or not (a write sent to a
    /// stopped primary is the point).
    fn primary_hint(&self) -> Option<usize> {
        (0..self.announced.len())
            .filter_map(|i| self.announced[i].lock().unwrap().primary_of.map(|e| (e, i)))
            .max()
            .map(|(_, i)| i)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Counts an acknowledgement of a request sent at `sent`: the first one sent after a
    /// failover began ends it.
    fn acked(&self, sent: Instant) {
        self.ledger.lock().unwrap().acks += 1;
        let mut f = self.failover.lock().unwrap();
        if let Some(since) = f.since {
            if sent >= since {
                let took = Instant::now() - since;
                f.times.push(took);
                f.since = None;
            }
        }
    }

    fn refused(&self) {
        self.ledger.lock().unwrap().refusals += 1;
    }

    /// Records an impossible answer (the first `ANOMALIES_KEPT`; all are counted).
    fn anomaly(&self, what: String) {
        let mut l = self.ledger.lock().unwrap();
        l.anomaly_count += 1;
        if l.anomalies.len() < ANOMALIES_KEPT {
            l.anomalies.push(what);
        }
    }
}

/// One request: `Ok((status, body))` for any HTTP answer, `Err` for no answer.
pub async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let mut req = http.request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, body))
}

/// Back-off between refused attempts, so writers do not spin on a cluster without a primary.
async fn pause(rng: &mut StdRng) {
    tokio::time::sleep(Duration::from_millis(rng.gen_range(20..120))).await;
}

/// Rewrites `p/w{W}-{k}` with increasing gens; a refused or unanswered write is tried on up to
/// two other nodes with the same gen, then left unknown (the next gen supersedes it).
pub async fn put_writer(load: Arc<Load>, w: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut gens = [0u64; PUT_IDS as usize];
    while !load.stopping() {
        let k = rng.gen_range(0..PUT_IDS);
        gens[k as usize] += 1;
        let gen = gens[k as usize];
        let id = format!("w{w}-{k}");
        {
            let mut l = load.ledger.lock().unwrap();
            let e = l.puts.entry(id.clone()).or_default();
            e.1 = gen;
        }
        let first = rng.gen_range(0..load.urls.len());
        for attempt in 0..3 {
            let url = &load.urls[(first + attempt) % load.urls.len()];
            let sent = Instant::now();
            let got = call(
                &load.http,
                reqwest::Method::PUT,
                &format!("{url}/v1/docs/p/{id}"),
                Some(json!({"w": w, "k": k, "gen": gen})),
            )
            .await;
            match got {
                Ok((200, _)) => {
                    load.ledger.lock().unwrap().puts.get_mut(&id).unwrap().0 = gen;
                    load.acked(sent);
                    break;
                }
                Ok((503, _)) | Err(_) => {
                    load.refused();
                    pause(&mut rng).await;
                }
                Ok((status, body)) => {
                    load.anomaly(format!("PUT p/{id} on {url}: {status} {body}"));
                    pause(&mut rng).await;
                    break;
                }
            }
        }
    }
}

/// Puts new documents `a/w{W}-{n}`, each once, aimed at the primary: whenever the primary is
/// stopped or killed, this writer has a write in flight on it. Every acknowledged one must be
/// on every node: a deposed primary that acknowledges a write its successor never saw (broken
/// fencing) loses it, and since the id is never written again nothing later can hide that.
pub async fn append_writer(load: Arc<Load>, w: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    while !load.stopping() {
        n += 1;
        let id = format!("w{w}-{n}");
        load.ledger.lock().unwrap().append_sent.insert(id.clone());
        for attempt in 0..3 {
            let node = match load.primary_hint() {
                Some(p) if attempt == 0 => p,
                _ => rng.gen_range(0..load.urls.len()),
            };
            let url = &load.urls[node];
            let sent = Instant::now();
            let got = call(
                &load.http,
                reqwest::Method::PUT,
                &format!("{url}/v1/docs/a/{id}"),
                Some(json!({"w": w, "n": n})),
            )
            .await;
            match got {
                Ok((200, _)) => {
                    load.ledger.lock().unwrap().append_acked.insert(id.clone());
                    load.acked(sent);
                    break;
                }
                Ok((503, _)) | Err(_) => {
                    load.refused();
                    pause(&mut rng).await;
                }
                Ok((status, body)) => {
                    load.anomaly(format!("PUT a/{id} on {url}: {status} {body}"));
                    pause(&mut rng).await;
                    break;
                }
            }
        }
    }
}

/// Times failovers: rewrites `probe/{n}` every 50 ms with a short timeout, through the node
/// that announced the highest epoch (else any), so that it is never stuck on a stopped node
/// the way a writer with a long timeout is. Its acknowledgements count like any other.
pub async fn failover_probe(load: Arc<Load>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0u64;
    while !load.stopping() {
        n += 1;
        let node = load
            .primary_hint()
            .filter(|_| rng.gen_range(0..4) > 0)
            .unwrap_or_else(|| rng.gen_range(0..load.urls.len()));
        let sent = Instant::now();
        let req = load
            .http
            .put(format!("{}/v1/docs/probe/p{}", load.urls[node], n % 8))
            .json(&json!({"n": n}))
            .timeout(PROBE_TIMEOUT)
            .send()
            .await;
        if matches!(&req, Ok(r) if r.status().as_u16() == 200) {
            load.acked(sent);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Transaction k of writer w: `tx/t{w}-a|b|c` to gen k, `$inc` of `tx/n{w}`, and the trigger's
/// source document `src/s{w}-{k}`, atomically, with a mutation id, retried on any node until
/// acknowledged (exactly once), or left unknown after `TX_RETRY_FOR`.
pub async fn tx_writer(load: Arc<Load>, w: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut k = 0u64;
    while !load.stopping() {
        k += 1;
        load.ledger
            .lock()
            .unwrap()
            .tx_sent
            .entry(w)
            .or_default()
            .insert(k);
        let doc = json!({"w": w, "gen": k});
        let body = json!({
            "mutationId": format!("{}-tx-{w}-{k}", load.run),
            "writes": [
                {"op": "put", "collection": "tx", "id": format!("t{w}-a"), "doc": doc},
                {"op": "put", "collection": "tx", "id": format!("t{w}-b"), "doc": doc},
                {"op": "update", "collection": "tx", "id": format!("n{w}"),
                 "update": {"$inc": {"n": 1}, "$set": {"w": w}}, "upsert": true},
                {"op": "put", "collection": "tx", "id": format!("t{w}-c"), "doc": doc},
                {"op": "put", "collection": "src", "id": format!("s{w}-{k}"), "doc": {"w": w, "k": k}},
            ]
        });
        let deadline = Instant::now() + TX_RETRY_FOR;
        // Once the writers stop, a transaction in flight gets a few more tries, then stays
        // unknown.
        let mut after_stop = 0;
        loop {
            let url = &load.urls[rng.gen_range(0..load.urls.len())];
            let sent = Instant::now();
            match call(
                &load.http,
                reqwest::Method::POST,
                &format!("{url}/v1/commit"),
                Some(body.clone()),
            )
            .await
            {
                Ok((200, _)) => {
                    load.ledger
                        .lock()
                        .unwrap()
                        .tx_acked
                        .entry(w)
                        .or_default()
                        .insert(k);
                    load.acked(sent);
                    break;
                }
                Ok((503, _)) | Err(_) => load.refused(),
                Ok((status, body)) => {
                    load.anomaly(format!("commit {w}/{k} on {url}: {status} {body}"));
                    pause(&mut rng).await;
                    break;
                }
            }
            if load.stopping() {
                after_stop += 1;
            }
            if Instant::now() > deadline || after_stop > 20 {
                break;
            }
            pause(&mut rng).await;
        }
    }
}

/// Inserts `bulk/b{w}-{n}` through `/v1/bulk`, `BULK_LINES` a request; lines that failed go
/// into the next request again.
pub async fn bulk_writer(load: Arc<Load>, w: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next = 0u64;
    let mut pending: Vec<String> = Vec::new();
    while !load.stopping() {
        while pending.len() < BULK_LINES {
            pending.push(format!("b{w}-{next}"));
            next += 1;
        }
        let body: String = pending
            .iter()
            .map(|id| {
                json!({"op": "put", "collection": "bulk", "id": id, "doc": {"w": w}}).to_string()
                    + "\n"
            })
            .collect();
        let url = &load.urls[rng.gen_range(0..load.urls.len())];
        let sent = Instant::now();
        let got = load
            .http
            .post(format!("{url}/v1/bulk"))
            .body(body)
            .send()
            .await;
        let answer = match got {
            Ok(r) => {
                let status = r.status().as_u16();
                r.json::<Value>().await.map(|b| (status, b)).ok()
            }
            Err(_) => None,
        };
        match answer {
            Some((200, b)) => {
                let failed: BTreeSet<usize> = b["errors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["line"].as_u64().map(|l| l as usize - 1))
                    .collect();
                if b["failed"].as_u64() != Some(failed.len() as u64) {
                    load.anomaly(format!("bulk on {url}: failed count disagrees: {b}"));
                }
                let mut retry = Vec::new();
                {
                    let mut l = load.ledger.lock().unwrap();
                    for (i, id) in pending.drain(..).enumerate() {
                        if failed.contains(&i) {
                            retry.push(id);
                        } else {
                            l.bulk_acked.insert(id);
                        }
                    }
                }
                if retry.len() < BULK_LINES {
                    load.acked(sent);
                } else {
                    load.refused();
                    pause(&mut rng).await;
                }
                pending = retry;
            }
            Some((503, _)) | None => {
                load.refused();
                pause(&mut rng).await;
            }
            Some((status, b)) => {
                load.anomaly(format!("bulk on {url}: {status} {b}"));
                pause(&mut rng).await;
            }
        }
    }
}

/// Reads every transaction writer's documents in one query on a random node: a snapshot in
/// which `t{w}-a`, `-b` and `-c` differ is a torn transaction.
pub async fn torn_probe(load: Arc<Load>, writers: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !load.stopping() {
        let url = &load.urls[rng.gen_range(0..load.urls.len())];
        let w = rng.gen_range(0..writers);
        if let Ok((200, body)) = call(
            &load.http,
            reqwest::Method::POST,
            &format!("{url}/v1/query"),
            Some(json!({"collection": "tx", "filter": {"w": w}})),
        )
        .await
        {
            if let Some(why) = torn(&body["docs"], w) {
                load.ledger
                    .lock()
                    .unwrap()
                    .torn
                    .push(format!("{url} at seq {}: {why}", body["seq"]));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
    }
}

/// Why writer w's transaction documents in `docs` are torn, if they are.
pub fn torn(docs: &Value, w: u64) -> Option<String> {
    let gen_of = |id: String| {
        docs.as_array()
            .into_iter()
            .flatten()
            .find(|d| d["_id"] == id.as_str())
            .map(|d| d["gen"].as_u64().unwrap_or(0))
            .unwrap_or(0)
    };
    let gens = [
        gen_of(format!("t{w}-a")),
        gen_of(format!("t{w}-b")),
        gen_of(format!("t{w}-c")),
    ];
    (gens[0] != gens[1] || gens[1] != gens[2]).then(|| format!("writer {w}: gens {gens:?}"))
}

/// A live subscriber to `live_query()` on one node over `/v1/ws`: its window, rebuilt from
/// `initial` and `changes`, and the seq it reflects. Reconnects (with `resumeFrom`) whenever
/// its node dies.
#[derive(Default)]
pub struct SubState {
    pub window: Vec<Value>,
    pub seq: u64,
    pub connected: bool,
    pub connects: u64,
    pub resets: u64,
    pub errors: Vec<String>,
}

pub async fn subscriber(
    load: Arc<Load>,
    node: usize,
    state: Arc<Mutex<SubState>>,
    quit: Arc<AtomicBool>,
) {
    let ws_url = load.urls[node].replace("http://", "ws://") + "/v1/ws";
    while !quit.load(Ordering::SeqCst) {
        let Ok(Ok((mut ws, _))) = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(ws_url.as_str()),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut sub = live_query();
        {
            let mut s = state.lock().unwrap();
            s.connects += 1;
            sub["op"] = json!("subscribe");
            sub["sub"] = json!("s");
            if s.connects > 1 && s.seq > 0 {
                sub["resumeFrom"] = json!(s.seq);
            }
        }
        if ws.send(Message::text(sub.to_string())).await.is_err() {
            continue;
        }
        state.lock().unwrap().connected = true;
        loop {
            if quit.load(Ordering::SeqCst) {
                let _ = ws.close(None).await;
                break;
            }
            // Heartbeats come every second on an idle connection: a longer silence is a
            // stopped or dead node.
            let msg = match tokio::time::timeout(Duration::from_secs(3), ws.next()).await {
                Ok(Some(Ok(m))) => m,
                _ => break,
            };
            let Message::Text(text) = msg else { continue };
            let m: Value = match serde_json::from_str(text.as_str()) {
                Ok(m) => m,
                Err(e) => {
                    state
                        .lock()
                        .unwrap()
                        .errors
                        .push(format!("bad message: {e}"));
                    continue;
                }
            };
            let mut s = state.lock().unwrap();
            match m["type"].as_str().unwrap_or("") {
                "initial" => {
                    s.window = m["docs"].as_array().cloned().unwrap_or_default();
                    s.seq = m["seq"].as_u64().unwrap_or(0);
                }
                "changes" => {
                    let seq = m["seq"].as_u64().unwrap_or(0);
                    let prev = s.seq;
                    if seq <= prev {
                        s.errors
                            .push(format!("changes at seq {seq} after seq {prev}"));
                    }
                    for c in m["changes"].as_array().into_iter().flatten() {
                        if let Err(e) = apply_change(&mut s.window, c) {
                            s.errors.push(format!("node {node} seq {seq}: {e}"));
                        }
                    }
                    s.seq = seq;
                }
                "heartbeat" => {
                    let seq = m["seq"].as_u64().unwrap_or(0);
                    s.seq = s.seq.max(seq);
                }
                "reset" => s.resets += 1,
                "error" => {
                    let code = m["code"].as_str().unwrap_or("");
                    s.errors.push(format!("node {node}: {m}"));
                    if !code.is_empty() {
                        break;
                    }
                }
                _ => {}
            }
        }
        state.lock().unwrap().connected = false;
    }
}

fn apply_change(window: &mut Vec<Value>, c: &Value) -> Result<(), String> {
    let old = c["oldIndex"].as_i64().unwrap_or(-1);
    let new = c["newIndex"].as_i64().unwrap_or(-1);
    if old >= 0 {
        if old as usize >= window.len() {
            return Err(format!("remove at {old} of {}: {c}", window.len()));
        }
        window.remove(old as usize);
    }
    if new >= 0 {
        if new as usize > window.len() {
            return Err(format!("insert at {new} of {}: {c}", window.len()));
        }
        window.insert(new as usize, c["doc"].clone());
    }
    Ok(())
}
