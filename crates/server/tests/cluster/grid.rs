//! The matching grid across machines (issue 32): three `herald serve --cluster --grid-rows 2
//! --grid-partitions 2` processes; WebSocket subscribers (sorted, limited, offset and unindexable
//! regex queries) on the two nodes that will survive; one writer of small transactions through
//! the primary; SIGKILL of the third node, which runs grid cells and holds no subscription.
//!
//! The writer is the only one writing, so the test knows the collection at every seq; a
//! subscriber must receive a batch exactly at the seqs where its result changed, its list after
//! each batch must equal the query's result there (`Query::run`, the reference evaluation), with
//! seqs increasing and no reset; and the dead node's cells must run elsewhere within ~10 s.
//! `HERALD_SLOW=1` kills three times (restarting the node in between), writes longer, and uses
//! a 2 x 3 grid: three partitions per row over three nodes give every node one cell per row, so
//! the restarted node runs cells again before the next kill.

use crate::node::{NodeConfig, NodeProc};
use futures_util::{SinkExt, StreamExt};
use herald_cluster::testing::{unique_name, KafkaCluster};
use herald_query::Query;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const COLLECTION: &str = "g";
const QUERIES: &[&str] = &[
    r#"{"sort": {"n": 1}, "limit": 3}"#,
    r#"{"filter": {"n": {"$gte": 3}}, "sort": {"n": -1}, "skip": 1, "limit": 2}"#,
    r#"{"filter": {"s": {"$regex": "7"}}, "sort": {"n": 1}}"#,
    r#"{"filter": {"s": {"$regex": "1$"}}, "sort": {"s": 1}, "skip": 1, "limit": 4}"#,
    r#"{"filter": {"tags": {"$in": ["a", "c"]}}, "sort": {"n": 1}, "skip": 1, "limit": 3}"#,
];
/// How long the cells of a killed node may take to run elsewhere (the session timeout is 3 s).
const MOVE_MAX: Duration = Duration::from_secs(12);

/// The cells each node says it runs, `(node, row, part)`.
async fn cells(http: &reqwest::Client, nodes: &[(usize, String)]) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    for (i, url) in nodes {
        let Ok(Ok((200, status))) = tokio::time::timeout(
            Duration::from_secs(2),
            crate::load::call(
                http,
                reqwest::Method::GET,
                &format!("{url}/v1/cluster"),
                None,
            ),
        )
        .await
        else {
            continue;
        };
        for c in status["grid"]["running"].as_array().into_iter().flatten() {
            out.push((*i, c["row"].as_u64().unwrap(), c["part"].as_u64().unwrap()));
        }
    }
    out
}

/// Whether every one of the `n` cells runs, once.
fn complete(cells: &[(usize, u64, u64)], n: usize) -> bool {
    let distinct: BTreeSet<(u64, u64)> = cells.iter().map(|c| (c.1, c.2)).collect();
    distinct.len() == n && cells.len() == n
}

async fn wait_cells(
    http: &reqwest::Client,
    nodes: &[(usize, String)],
    n: usize,
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if complete(&cells(http, nodes).await, n) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Every message one subscriber received, in order.
type Received = Arc<Mutex<Vec<Value>>>;

async fn subscriber(url: String, qi: usize, got: Received, quit: Arc<AtomicBool>) {
    let ws_url = url.replace("http://", "ws://") + "/v1/ws";
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url.as_str())
        .await
        .expect("a WebSocket");
    let mut sub: Value = serde_json::from_str(QUERIES[qi]).unwrap();
    sub["op"] = json!("subscribe");
    sub["sub"] = json!(format!("q{qi}"));
    sub["collection"] = json!(COLLECTION);
    ws.send(Message::text(sub.to_string())).await.unwrap();
    while !quit.load(Ordering::SeqCst) {
        let Ok(next) = tokio::time::timeout(Duration::from_millis(200), ws.next()).await else {
            continue;
        };
        let Some(Ok(Message::Text(text))) = next else {
            got.lock()
                .unwrap()
                .push(json!({"type": "closed", "why": format!("{next:?}")}));
            return;
        };
        got.lock()
            .unwrap()
            .push(serde_json::from_str(text.as_str()).unwrap());
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The collection after each acknowledged commit: `(seq, documents by id)`.
type History = Vec<(u64, BTreeMap<String, Value>)>;

/// Commits one to three writes through `url` and records the collection after it.
async fn write_one(http: &reqwest::Client, url: &str, rng: &mut Rng, history: &mut History) {
    let mut docs = history.last().map(|h| h.1.clone()).unwrap_or_default();
    let mut writes = Vec::new();
    let mut ids = BTreeSet::new();
    for _ in 0..1 + rng.below(3) {
        let id = format!("d{}", rng.below(24));
        if !ids.insert(id.clone()) {
            continue;
        }
        if docs.contains_key(&id) && rng.below(5) == 0 {
            docs.remove(&id);
            writes.push(json!({"op": "delete", "collection": COLLECTION, "id": id}));
        } else {
            let tags: Vec<&str> = ["a", "b", "c"]
                .into_iter()
                .filter(|_| rng.below(2) == 0)
                .collect();
            let doc =
                json!({"n": rng.below(10), "s": format!("x{}", rng.below(100)), "tags": tags});
            let mut stored = json!({"_id": id});
            for (k, v) in doc.as_object().unwrap() {
                stored[k] = v.clone();
            }
            docs.insert(id.clone(), stored);
            writes.push(json!({"op": "put", "collection": COLLECTION, "id": id, "doc": doc}));
        }
    }
    let body = json!({"writes": writes});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = crate::load::call(
            http,
            reqwest::Method::POST,
            &format!("{url}/v1/commit"),
            Some(body.clone()),
        )
        .await;
        match r {
            Ok((200, reply)) => {
                let seq = reply["seq"].as_u64().expect("a seq");
                history.push((seq, docs));
                return;
            }
            // The writes are not idempotent: only a refusal (nothing applied) is retried.
            Ok((503, _)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => panic!("commit through {url}: {other:?}"),
        }
    }
}

/// The query's result after the last commit at or before `seq`.
fn result_at(query: &Query, history: &History, seq: u64) -> Vec<Value> {
    let at = history.partition_point(|h| h.0 <= seq);
    let docs = if at == 0 {
        BTreeMap::new()
    } else {
        history[at - 1].1.clone()
    };
    query.run(docs.values())
}

/// Checks one subscriber's messages against the history up to `last`; the problems found.
fn check(qi: usize, msgs: &[Value], history: &History, last: u64) -> Vec<String> {
    let query = Query::parse(&serde_json::from_str(QUERIES[qi]).unwrap()).unwrap();
    let mut errors = Vec::new();
    let mut batches = msgs.iter().filter(|m| m["type"] != "heartbeat");
    let Some(initial) = batches.next().filter(|m| m["type"] == "initial") else {
        return vec![format!(
            "query {qi}: no initial result first: {:?}",
            msgs.first()
        )];
    };
    let mut list: Vec<Value> = initial["docs"].as_array().unwrap().clone();
    let mut seq = initial["seq"].as_u64().unwrap();
    if list != result_at(&query, history, seq) {
        errors.push(format!("query {qi}: initial at {seq}: {list:?}"));
    }
    let mut batches = batches.peekable();
    let start = seq;
    for (s, _) in history.iter().filter(|h| h.0 > start && h.0 <= last) {
        let want = result_at(&query, history, *s);
        let before = result_at(&query, history, *s - 1);
        let changed = want != before;
        match batches.peek() {
            Some(m) if m["type"] == "changes" && m["seq"].as_u64() == Some(*s) => {
                if !changed {
                    errors.push(format!("query {qi}: a batch at {s}, where nothing changed"));
                }
                for c in m["changes"].as_array().unwrap() {
                    let old = c["oldIndex"].as_i64().unwrap();
                    let new = c["newIndex"].as_i64().unwrap();
                    if old >= 0 && (old as usize) < list.len() {
                        list.remove(old as usize);
                    }
                    if new >= 0 && (new as usize) <= list.len() {
                        list.insert(new as usize, c["doc"].clone());
                    }
                }
                if list != want {
                    errors.push(format!(
                        "query {qi}: list after the batch at {s}: {list:?}, want {want:?}"
                    ));
                    list = want;
                }
                batches.next();
            }
            Some(m) if m["type"] != "changes" => {
                errors.push(format!("query {qi}: {m}"));
                batches.next();
            }
            _ if changed => errors.push(format!(
                "query {qi}: no batch at {s}, where the result changed"
            )),
            _ => {}
        }
        seq = *s;
    }
    if let Some(m) = batches.next() {
        errors.push(format!("query {qi}: a message after seq {seq}: {m}"));
    }
    errors
}

#[test]
fn grid_subscribers_miss_nothing_when_a_matching_node_is_killed() {
    let slow = std::env::var("HERALD_SLOW").is_ok_and(|v| v == "1");
    let kafka = KafkaCluster::shared();
    let root = std::env::temp_dir().join(unique_name("herald-grid"));
    std::fs::create_dir_all(&root).unwrap();
    let cfg = NodeConfig {
        bootstrap: kafka.bootstrap().to_string(),
        cluster: unique_name("grid"),
        replication_factor: 1,
        session_timeout_ms: 3000,
        write_timeout_ms: 5000,
        grid: Some((2, if slow { 3 } else { 2 })),
    };
    let mut nodes: Vec<NodeProc> = (0..3)
        .map(|i| NodeProc::new(&format!("g{i}"), &root))
        .collect();
    for n in &mut nodes {
        n.spawn(&cfg);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(run(&mut nodes, &cfg, slow))
    }));
    let tails: Vec<String> = nodes
        .iter()
        .map(|n| format!("--- {} ---\n{}", n.id, n.tail().join("\n")))
        .collect();
    for n in &mut nodes {
        n.kill();
    }
    match outcome {
        Ok(Ok(())) => {
            let _ = std::fs::remove_dir_all(&root);
        }
        Ok(Err(why)) => panic!("{why}\nlogs in {}\n{}", root.display(), tails.join("\n")),
        Err(p) => {
            eprintln!("logs in {}\n{}", root.display(), tails.join("\n"));
            std::panic::resume_unwind(p)
        }
    }
}

async fn run(nodes: &mut [NodeProc], cfg: &NodeConfig, slow: bool) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let primary = loop {
        if let Some(p) = (0..3).find(|&i| nodes[i].primary_of().is_some()) {
            break p;
        }
        if Instant::now() > deadline {
            return Err("no primary".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let all: Vec<(usize, String)> = (0..3).map(|i| (i, nodes[i].url())).collect();
    let (rows, parts) = cfg.grid.unwrap();
    let n = (rows * parts) as usize;
    if !wait_cells(&http, &all, n, Duration::from_secs(60)).await {
        return Err(format!(
            "the cells never all ran: {:?}",
            cells(&http, &all).await
        ));
    }
    let running = cells(&http, &all).await;
    let victim = (0..3)
        .find(|&i| i != primary && running.iter().any(|c| c.0 == i))
        .ok_or("no follower runs cells")?;
    let fronts: Vec<(usize, String)> = all.iter().filter(|n| n.0 != victim).cloned().collect();
    eprintln!("grid test: primary g{primary}, cells {running:?}, victim g{victim}");
    let url = nodes[primary].url();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut history: History = Vec::new();
    for _ in 0..20 {
        write_one(&http, &url, &mut rng, &mut history).await;
    }
    let quit = Arc::new(AtomicBool::new(false));
    let mut subs = Vec::new();
    for (i, front) in &fronts {
        for qi in 0..QUERIES.len() {
            let got: Received = Arc::default();
            let task = tokio::spawn(subscriber(front.clone(), qi, got.clone(), quit.clone()));
            subs.push((*i, qi, got, task));
        }
    }
    // The front ends show the cells their subscriptions wait on, and the metrics have them
    // (the engine refreshes its view of the cells every 100 ms).
    for _ in 0..10 {
        write_one(&http, &url, &mut rng, &mut history).await;
    }
    for (i, front) in &fronts {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = crate::load::call(
                &http,
                reqwest::Method::GET,
                &format!("{front}/v1/cluster"),
                None,
            )
            .await?
            .1;
            let metrics = http
                .get(format!("{front}/metrics"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            let waiting = status["grid"]["waiting"].as_array().map_or(0, Vec::len);
            let lag = "herald_grid_cell_lag_seqs{kind=\"waiting\",row=\"0\",part=\"0\"}";
            if waiting == n && metrics.contains(lag) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("g{i} waits on {waiting} cells, not {n}: {status}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let kills = if slow { 3 } else { 1 };
    let per_phase = if slow { 200 } else { 60 };
    for k in 0..kills {
        for _ in 0..per_phase {
            write_one(&http, &url, &mut rng, &mut history).await;
        }
        nodes[victim].kill();
        let killed = Instant::now();
        let mut moved = None;
        for _ in 0..per_phase {
            write_one(&http, &url, &mut rng, &mut history).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            if moved.is_none() && complete(&cells(&http, &fronts).await, n) {
                moved = Some(killed.elapsed());
            }
        }
        if moved.is_none() && wait_cells(&http, &fronts, n, MOVE_MAX).await {
            moved = Some(killed.elapsed());
        }
        let Some(moved) = moved.filter(|m| *m <= MOVE_MAX) else {
            return Err(format!(
                "the killed node's cells did not move within {MOVE_MAX:?}: {:?}",
                cells(&http, &fronts).await
            ));
        };
        eprintln!("grid test: kill {k}: the cells ran elsewhere after {moved:?}");
        if k + 1 < kills {
            nodes[victim].spawn(cfg);
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let c = cells(&http, &all).await;
                if complete(&c, n) && c.iter().any(|c| c.0 == victim) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("the restarted g{victim} runs no cell: {c:?}"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let last = history.last().unwrap().0;
    // Every subscriber catches up: a heartbeat (or batch) at the last seq.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, qi, got, _) in &subs {
        loop {
            let seen = got
                .lock()
                .unwrap()
                .iter()
                .filter_map(|m| m["seq"].as_u64())
                .max()
                .unwrap_or(0);
            if seen >= last {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("g{i} query {qi}: at seq {seen}, not {last}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    quit.store(true, Ordering::SeqCst);
    let mut errors = Vec::new();
    for (i, qi, got, task) in subs {
        let _ = task.await;
        let msgs = got.lock().unwrap();
        let batches = msgs.iter().filter(|m| m["type"] == "changes").count();
        eprintln!("grid test: g{i} query {qi}: {batches} batches");
        errors.extend(
            check(qi, &msgs, &history, last)
                .into_iter()
                .map(|e| format!("g{i} {e}")),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}
