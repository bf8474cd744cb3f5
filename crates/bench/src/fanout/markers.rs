//! [`MarkerWatch`]: learns when each fan-out finished by subscribing (live queries over
//! WebSocket) to the markers in `fanout_done` and recording each marker's `add` in the
//! [`Tracker`].
//!
//! A phase's tweets are split into buckets of [`BUCKET`] consecutive tweets; a tweet's marker
//! carries `run: "{run}-b{bucket}"` and each bucket has its own subscription
//! `{"run": "{run}-b{bucket}"}`. Small subscriptions keep each live view small (a view without
//! a limit rebuilds its whole window on every change it receives, so one view over all of a
//! phase's markers would cost time quadratic in the phase's length). Buckets are subscribed two
//! ahead of the posters, and a marker that is already in a subscription's initial result counts
//! as arriving with that result. At most [`SUBS_PER_CONN`] subscriptions share a connection.

use crate::fanout::tracker::Tracker;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// Tweets per marker subscription.
pub const BUCKET: u64 = 512;
/// Subscriptions per WebSocket connection (the server allows 256).
const SUBS_PER_CONN: u64 = 200;
/// Subscribe messages queued per connection.
const CONN_COMMANDS_MAX: usize = 64;

struct Conns {
    senders: Vec<mpsc::Sender<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub struct MarkerWatch {
    ws_url: String,
    run: String,
    tracker: Arc<Tracker>,
    conns: tokio::sync::Mutex<Conns>,
    /// Buckets subscribed so far (buckets 0 .. this).
    subscribed: AtomicU64,
    /// Initial results received (one per subscription).
    initials: Arc<AtomicU64>,
    pub errors: Arc<AtomicU64>,
}

/// The tweet index `k` of a marker or tweet id `{run}-{k}` of this run.
pub fn tweet_index(run: &str, id: &str) -> Option<u64> {
    id.strip_prefix(run)?.strip_prefix('-')?.parse().ok()
}

impl MarkerWatch {
    /// Starts watching the run's markers: subscribes the first buckets and waits until the
    /// server has answered them, so the first tweets' markers arrive as changes.
    pub async fn start(base: &str, run: &str, tracker: Arc<Tracker>) -> Result<Self, String> {
        let watch = MarkerWatch {
            ws_url: format!("{}/v1/ws", base.replacen("http://", "ws://", 1)),
            run: run.to_string(),
            tracker,
            conns: tokio::sync::Mutex::new(Conns {
                senders: Vec::new(),
                tasks: Vec::new(),
            }),
            subscribed: AtomicU64::new(0),
            initials: Arc::new(AtomicU64::new(0)),
            errors: Arc::new(AtomicU64::new(0)),
        };
        watch.ensure(0).await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while watch.initials.load(Ordering::Acquire) < watch.subscribed.load(Ordering::Acquire) {
            if Instant::now() > deadline || watch.errors.load(Ordering::Relaxed) > 0 {
                return Err("the marker subscriptions did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(watch)
    }

    /// The `run` a tweet's marker carries: its bucket.
    pub fn bucket_run(&self, k: u64) -> String {
        format!("{}-b{}", self.run, k / BUCKET)
    }

    pub fn tweet_id(&self, k: u64) -> String {
        format!("{}-{k}", self.run)
    }

    /// Makes sure tweet `k`'s bucket and the next one are subscribed.
    pub async fn ensure(&self, k: u64) -> Result<(), String> {
        let want = k / BUCKET + 2;
        if self.subscribed.load(Ordering::Acquire) >= want {
            return Ok(());
        }
        let mut conns = self.conns.lock().await;
        while self.subscribed.load(Ordering::Acquire) < want {
            let b = self.subscribed.load(Ordering::Acquire);
            let c = (b / SUBS_PER_CONN) as usize;
            if c >= conns.senders.len() {
                let (tx, task) = self.connect().await?;
                conns.senders.push(tx);
                conns.tasks.push(task);
            }
            let msg = json!({"op": "subscribe", "sub": format!("b{b}"), "collection": crate::fanout::workload::MARKERS,
                             "filter": {"run": format!("{}-b{b}", self.run)}});
            conns.senders[c]
                .send(msg.to_string())
                .await
                .map_err(|_| "a marker connection closed".to_string())?;
            self.subscribed.store(b + 1, Ordering::Release);
        }
        Ok(())
    }

    async fn connect(&self) -> Result<(mpsc::Sender<String>, tokio::task::JoinHandle<()>), String> {
        let (ws, _) = tokio_tungstenite::connect_async(self.ws_url.as_str())
            .await
            .map_err(|e| format!("{}: {e}", self.ws_url))?;
        let (mut sink, mut stream) = ws.split();
        let (tx, mut rx) = mpsc::channel::<String>(CONN_COMMANDS_MAX);
        let (run, tracker, initials, errors) = (
            self.run.clone(),
            self.tracker.clone(),
            self.initials.clone(),
            self.errors.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    cmd = rx.recv() => match cmd {
                        Some(text) => {
                            if sink.send(Message::Text(text.into())).await.is_err() {
                                errors.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                        }
                        None => {
                            let _ = sink.send(Message::Close(None)).await;
                            break;
                        }
                    },
                    msg = stream.next() => match msg {
                        Some(Ok(Message::Text(t))) => {
                            let now = Instant::now();
                            handle(&run, &tracker, &initials, &errors, &t, now);
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            eprintln!("herald-bench: marker connection: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        None => {
                            eprintln!("herald-bench: the server closed a marker connection");
                            errors.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    },
                }
            }
        });
        Ok((tx, task))
    }

    /// Closes the connections.
    pub async fn close(self) {
        let mut conns = self.conns.into_inner();
        conns.senders.clear();
        for t in conns.tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

/// One server message: initial results and `add`s record markers; errors are counted.
fn handle(
    run: &str,
    tracker: &Tracker,
    initials: &AtomicU64,
    errors: &AtomicU64,
    text: &str,
    now: Instant,
) {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let record = |id: &str, doc: &Value| {
        if let Some(k) = tweet_index(run, id) {
            tracker.done(k, now, doc["followers"].as_u64());
        }
    };
    match v["type"].as_str() {
        Some("initial") => {
            for d in v["docs"].as_array().into_iter().flatten() {
                record(d["_id"].as_str().unwrap_or_default(), d);
            }
            initials.fetch_add(1, Ordering::Release);
        }
        Some("changes") => {
            for c in v["changes"].as_array().into_iter().flatten() {
                if c["kind"] == "add" {
                    record(c["id"].as_str().unwrap_or_default(), &c["doc"]);
                }
            }
        }
        Some("error") | Some("reset") => {
            eprintln!("herald-bench: marker subscription: {v}");
            errors.fetch_add(1, Ordering::Relaxed);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_back_to_tweet_indexes() {
        assert_eq!(tweet_index("triggers-sat", "triggers-sat-42"), Some(42));
        assert_eq!(tweet_index("triggers-sat", "triggers-sat2-42"), None);
        assert_eq!(tweet_index("q", "q-x"), None);
    }

    #[test]
    fn adds_and_initial_docs_record_markers() {
        let tracker = Tracker::new(4, vec![2]);
        let now = Instant::now();
        for _ in 0..3 {
            tracker.begin(now, 0);
        }
        let (initials, errors) = (AtomicU64::new(0), AtomicU64::new(0));
        let initial = json!({"type": "initial", "sub": "b0", "seq": 1, "docs": [{"_id": "r-0", "followers": 2}]});
        handle("r", &tracker, &initials, &errors, &initial.to_string(), now);
        let changes = json!({"type": "changes", "sub": "b0", "seq": 2, "changes": [
            {"kind": "add", "id": "r-2", "doc": {"_id": "r-2", "followers": 2}, "oldIndex": -1, "newIndex": 1},
            {"kind": "change", "id": "r-1", "doc": {"_id": "r-1", "followers": 2}, "oldIndex": 0, "newIndex": 0}]});
        handle("r", &tracker, &initials, &errors, &changes.to_string(), now);
        let slots = tracker.slots();
        assert!(slots[0].done_us > 0 && slots[2].done_us > 0);
        assert_eq!(slots[1].done_us, 0, "only adds count");
        assert_eq!(initials.load(Ordering::Relaxed), 1);
        handle(
            "r",
            &tracker,
            &initials,
            &errors,
            r#"{"type":"error","sub":"b1","code":"x"}"#,
            now,
        );
        assert_eq!(errors.load(Ordering::Relaxed), 1);
    }
}
