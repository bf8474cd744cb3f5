//! The application-side fan-out over Herald's HTTP API, shared by the synchronous client and
//! the external-queue worker, and the worker process itself (`herald-bench fanout-worker`):
//! K tasks, each with its own Redis connection, BRPOP a job and fan it out.
//!
//! A fan-out queries the author's followers, then writes one timeline entry per follower with
//! `/v1/commit` in chunks of at most [`COMMIT_WRITES_MAX`] writes, in order, the marker being
//! the last write of the last chunk: once the marker exists, every entry does.

use crate::fanout::workload::{timeline, Tweet, FOLLOWS, MARKERS, TWEETS};
use serde_json::{json, Value};
use std::time::Duration;

/// Writes per `/v1/commit` (Herald's limit).
pub const COMMIT_WRITES_MAX: usize = 500;
/// The Redis list of fan-out jobs.
pub const QUEUE_KEY: &str = "herald:fanout:jobs";
/// How long one BRPOP blocks before the worker polls again.
const BRPOP_SECS: f64 = 1.0;
/// Attempts of one job's fan-out before the worker gives up on it (writes are idempotent puts).
const ATTEMPTS_MAX: u32 = 5;

/// Inserts a tweet (`POST /v1/docs/tweets`); Ok once Herald acknowledged it (durable).
pub async fn insert_tweet(http: &reqwest::Client, base: &str, t: &Tweet) -> Result<(), String> {
    let resp = http
        .post(format!("{base}/v1/docs/{TWEETS}"))
        .json(&t.doc())
        .send()
        .await
        .map_err(|e| format!("insert: {e}"))?;
    if resp.status().as_u16() == 201 {
        Ok(())
    } else {
        let status = resp.status();
        Err(format!(
            "insert: HTTP {status} {}",
            resp.text().await.unwrap_or_default()
        ))
    }
}

async fn post_json(http: &reqwest::Client, url: String, body: &Value) -> Result<Value, String> {
    let resp = http
        .post(&url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let v: Value = resp.json().await.map_err(|e| format!("{url}: {e}"))?;
    if status.is_success() {
        Ok(v)
    } else {
        Err(format!("{url}: HTTP {status} {v}"))
    }
}

/// The writes of one fan-out: an entry per follower, then the marker.
pub fn fanout_writes(t: &Tweet, followers: &[String]) -> Vec<Value> {
    let entry = t.entry();
    let mut writes: Vec<Value> = followers
        .iter()
        .map(|f| json!({"op": "put", "collection": timeline(f), "id": t.id, "doc": entry}))
        .collect();
    writes.push(
        json!({"op": "put", "collection": MARKERS, "id": t.id, "doc": t.marker(followers.len())}),
    );
    writes
}

/// Fans a tweet out through the HTTP API; returns the number of followers.
pub async fn fan_out(http: &reqwest::Client, base: &str, t: &Tweet) -> Result<usize, String> {
    let q = json!({"collection": FOLLOWS, "filter": {"followee": t.by}});
    let found = post_json(http, format!("{base}/v1/query"), &q).await?;
    let followers: Vec<String> = found["docs"]
        .as_array()
        .ok_or("query: no docs")?
        .iter()
        .filter_map(|d| d["follower"].as_str().map(str::to_string))
        .collect();
    let writes = fanout_writes(t, &followers);
    for chunk in writes.chunks(COMMIT_WRITES_MAX) {
        post_json(
            http,
            format!("{base}/v1/commit"),
            &json!({ "writes": chunk }),
        )
        .await?;
    }
    Ok(followers.len())
}

/// A client of Herald's HTTP API with enough idle connections for `concurrency` callers.
pub fn http_client(concurrency: usize) -> Result<reqwest::Client, String> {
    crate::harness::http_client_builder()
        .pool_max_idle_per_host(concurrency.max(1) * 2)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())
}

/// A Redis connection whose replies may take as long as a blocking pop.
pub async fn redis_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| format!("redis {url}: {e}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs_f64(BRPOP_SECS + 10.0)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("redis {url}: {e}"))
}

/// Queues a fan-out job (the tweet document as JSON) at the head of the list.
pub async fn push_job(
    redis: &mut redis::aio::MultiplexedConnection,
    t: &Tweet,
) -> Result<(), String> {
    redis::cmd("LPUSH")
        .arg(QUEUE_KEY)
        .arg(t.doc().to_string())
        .query_async::<u64>(redis)
        .await
        .map(|_| ())
        .map_err(|e| format!("LPUSH: {e}"))
}

/// Options of the worker process.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub herald: String,
    pub redis: String,
    pub concurrency: usize,
}

/// The worker process: `concurrency` loops of BRPOP + fan-out, until stdin closes (the bench
/// holds the other end) or it is killed. A job whose fan-out fails [`ATTEMPTS_MAX`] times is
/// reported and dropped (BRPOP removed it from Redis: this queue is at-most-once per job).
pub async fn run_worker(opts: WorkerOptions) -> Result<(), String> {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let http = http_client(opts.concurrency)?;
    let mut tasks = Vec::new();
    for _ in 0..opts.concurrency.max(1) {
        let mut redis = redis_connection(&opts.redis).await?;
        let (http, base) = (http.clone(), opts.herald.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let popped: Result<Option<(String, String)>, _> = redis::cmd("BRPOP")
                    .arg(QUEUE_KEY)
                    .arg(BRPOP_SECS)
                    .query_async(&mut redis)
                    .await;
                let job = match popped {
                    Ok(Some((_, job))) => job,
                    Ok(None) => continue,
                    Err(e) => {
                        eprintln!("fanout-worker: BRPOP: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let tweet = serde_json::from_str::<Value>(&job)
                    .ok()
                    .and_then(|v| Tweet::from_doc(&v));
                let Some(tweet) = tweet else {
                    eprintln!("fanout-worker: dropping a malformed job: {job}");
                    continue;
                };
                let mut attempt = 1;
                while let Err(e) = fan_out(&http, &base, &tweet).await {
                    if attempt >= ATTEMPTS_MAX {
                        eprintln!("fanout-worker: giving up on {}: {e}", tweet.id);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    attempt += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_the_last_write_of_the_last_chunk() {
        let t = Tweet {
            id: "r-7".into(),
            by: "u1".into(),
            text: "hi".into(),
            ts: 5,
            run: "r-b0".into(),
        };
        let followers: Vec<String> = (0..1000).map(|i| format!("u{i}")).collect();
        let writes = fanout_writes(&t, &followers);
        assert_eq!(writes.len(), 1001);
        let chunks: Vec<_> = writes.chunks(COMMIT_WRITES_MAX).collect();
        assert_eq!(chunks.len(), 3);
        let last = chunks[2].last().unwrap();
        assert_eq!(last["collection"], MARKERS);
        assert_eq!(last["doc"]["followers"], 1000);
        assert_eq!(writes[0]["collection"], "timelines/u0/entries");
        assert_eq!(writes[0]["id"], "r-7");
    }
}
