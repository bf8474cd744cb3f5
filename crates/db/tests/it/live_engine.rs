//! The live-query engine against a real database: random commits race with new subscriptions and
//! resumes; once the engine has caught up, every subscriber's list (initial result plus applied
//! change batches) must equal the pull query, and batch seqs must strictly increase.

use herald_db::live::{LiveEngine, Message, Sink, SubscribeRequest};
use herald_db::{Db, DbOptions, Durability, Write};
use herald_query::Query;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct TestSink {
    pub(crate) conn: u64,
    pub(crate) msgs: Mutex<Vec<Value>>,
}

/// A message as the client reads it (the server's encoding, reduced to what the test checks).
fn json_of(m: &Message) -> Value {
    match m {
        Message::Initial { sub, seq, docs } => {
            let docs: Vec<&Value> = docs.iter().map(|d| &**d).collect();
            json!({"type": "initial", "sub": sub, "seq": seq, "docs": docs})
        }
        Message::Changes { sub, seq, events } => {
            let changes: Vec<Value> = events
                .iter()
                .map(|e| {
                    json!({"kind": e.kind.as_str(), "id": e.id, "oldIndex": e.old_index,
                        "newIndex": e.new_index, "doc": e.doc.as_deref()})
                })
                .collect();
            json!({"type": "changes", "sub": sub, "seq": seq, "changes": changes})
        }
        Message::Reset { sub, reason } => {
            json!({"type": "reset", "sub": sub, "reason": reason.to_string()})
        }
        Message::Error { sub, code, message } => {
            json!({"type": "error", "sub": sub, "code": code, "message": message})
        }
    }
}

impl Sink for TestSink {
    fn send(&self, msg: Message) -> bool {
        self.msgs.lock().unwrap().push(json_of(&msg));
        true
    }
    fn conn(&self) -> u64 {
        self.conn
    }
}

pub(crate) const QUERIES: &[&str] = &[
    r#"{"filter": {}, "sort": {"n": 1}, "limit": 3}"#,
    r#"{"filter": {"n": {"$gte": 3}}, "sort": {"n": -1}, "skip": 1, "limit": 2}"#,
    r#"{"filter": {"$or": [{"tags": "a"}, {"n": {"$lt": 2}}]}}"#,
    r#"{"filter": {"g": 1}, "sort": {"n": 1}, "projection": {"n": 1}}"#,
    r#"{"filter": {"tags": {"$size": 2}}, "sort": {"tags": -1, "n": 1}, "limit": 4}"#,
    r#"{"filter": {"g": 0, "n": {"$gt": 1}}, "sort": {"n": -1}, "limit": 2}"#,
    r#"{"filter": {"tags": {"$in": ["a", "c"]}}, "sort": {"n": 1}, "skip": 1}"#,
    r#"{"filter": {}, "sort": {"n": -1}, "startAfter": [4], "limit": 2}"#,
    r#"{"filter": {"g": 1}, "sort": {"n": 1}, "startAt": [2, "d3"], "endBefore": [5]}"#,
];

/// Rebuilds the client's list from its messages; returns the list and the last seq seen.
pub(crate) fn client_state(msgs: &[Value]) -> (Vec<Value>, u64) {
    let mut list: Vec<(String, Value)> = Vec::new();
    let mut seq = 0;
    for m in msgs {
        match m["type"].as_str().unwrap() {
            "initial" => {
                list = m["docs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| (String::new(), d.clone()))
                    .collect();
                seq = m["seq"].as_u64().unwrap();
            }
            "changes" => {
                let s = m["seq"].as_u64().unwrap();
                assert!(s > seq, "change batches advance: {s} after {seq}");
                seq = s;
                for c in m["changes"].as_array().unwrap() {
                    let old = c["oldIndex"].as_i64().unwrap();
                    let new = c["newIndex"].as_i64().unwrap();
                    if old >= 0 {
                        list.remove(old as usize);
                    }
                    if new >= 0 {
                        list.insert(new as usize, (String::new(), c["doc"].clone()));
                    }
                }
            }
            "reset" => list.clear(),
            "resumed" => {}
            other => panic!("unexpected message {other}: {m}"),
        }
    }
    (list.into_iter().map(|(_, d)| d).collect(), seq)
}

pub(crate) fn subscribe(
    engine: &LiveEngine,
    qi: usize,
    sink: Arc<TestSink>,
    resume_from: Option<u64>,
) {
    let q: Value = serde_json::from_str(QUERIES[qi]).unwrap();
    engine
        .subscribe(SubscribeRequest {
            sub: "s".into(),
            collection: "c".into(),
            query: Query::parse(&q).unwrap(),
            key: format!("c\n{}", QUERIES[qi]),
            resume_from,
            sink,
        })
        .unwrap();
}

/// A fresh database without fsync (the live tests share it).
pub(crate) fn open_db() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        DbOptions {
            durability: Durability::NoSync,
            ..DbOptions::default()
        },
    )
    .unwrap();
    (dir, db)
}

#[test]
fn subscribers_converge_on_the_pull_query_under_racing_writes() {
    let seeds: u64 = std::env::var("HERALD_LIVE_ENGINE_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    for seed in 0..seeds {
        let (_dir, db) = open_db();
        let engine = LiveEngine::start(db.clone());
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sinks: Vec<(Arc<TestSink>, usize)> = Vec::new();
        let mut next_conn = 1;
        for round in 0..300 {
            let writes: Vec<Write> = (0..rng.gen_range(1..4))
                .map(|_| {
                    let id = format!("d{}", rng.gen_range(0..15));
                    if rng.gen_bool(0.2) {
                        Write::Delete { collection: "c".into(), id, if_version: None }
                    } else {
                        let tags: Vec<&str> = ["a", "b", "c"].iter().copied().filter(|_| rng.gen_bool(0.4)).collect();
                        let doc = json!({"n": rng.gen_range(0..6), "g": rng.gen_range(0..2), "tags": tags});
                        Write::Put { collection: "c".into(), id, doc, if_version: None }
                    }
                })
                .collect();
            db.commit(writes).unwrap();
            if round % 20 == 0 {
                let qi = rng.gen_range(0..QUERIES.len());
                let sink = Arc::new(TestSink {
                    conn: next_conn,
                    msgs: Mutex::new(Vec::new()),
                });
                next_conn += 1;
                subscribe(&engine, qi, sink.clone(), None);
                sinks.push((sink, qi));
            }
            if round % 50 == 49 && !sinks.is_empty() {
                // A client reconnects and resumes from the last seq it saw.
                let i = rng.gen_range(0..sinks.len());
                let (old, qi) = sinks[i].clone();
                // One snapshot of what the client had: its list and the seq it reached.
                let had = old.msgs.lock().unwrap().clone();
                let (_, seen) = client_state(&had);
                engine.disconnect(old.conn);
                let mut had = had;
                had.push(json!({"type": "resumed", "from": seen}));
                let sink = Arc::new(TestSink {
                    conn: next_conn,
                    msgs: Mutex::new(had),
                });
                next_conn += 1;
                subscribe(&engine, qi, sink.clone(), Some(seen));
                sinks[i] = (sink, qi);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !engine.is_idle() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(engine.is_idle(), "engine caught up");
        for (sink, qi) in &sinks {
            let msgs = sink.msgs.lock().unwrap().clone();
            let (list, seen) = client_state(&msgs);
            let q = Query::parse(&serde_json::from_str(QUERIES[*qi]).unwrap()).unwrap();
            let want = db.query("c", &q).unwrap().docs;
            assert_eq!(
                list, want,
                "seed {seed} query {} seq {seen} messages {msgs:?}",
                QUERIES[*qi]
            );
        }
        engine.stop();
    }
}

/// A sink that takes its first message (the initial result) and blocks in its second until
/// released: it holds the engine thread in the middle of delivering a commit.
struct GateSink {
    /// (messages seen, released)
    state: Mutex<(usize, bool)>,
    changed: std::sync::Condvar,
}

impl Sink for GateSink {
    fn send(&self, _msg: Message) -> bool {
        let mut state = self.state.lock().unwrap();
        state.0 += 1;
        self.changed.notify_all();
        while state.0 >= 2 && !state.1 {
            state = self.changed.wait(state).unwrap();
        }
        true
    }
    fn conn(&self) -> u64 {
        999
    }
}

#[test]
fn a_subscription_made_while_the_engine_lags_far_behind_gets_the_newest_result() {
    let (_dir, db) = open_db();
    let engine = LiveEngine::start(db.clone());
    let gate = Arc::new(GateSink {
        state: Mutex::new((0, false)),
        changed: std::sync::Condvar::new(),
    });
    let wait_for = |seen: usize| {
        let mut state = gate.state.lock().unwrap();
        while state.0 < seen {
            state = gate
                .changed
                .wait_timeout(state, Duration::from_secs(10))
                .unwrap()
                .0;
        }
    };
    let put = |id: String, n: i64| Write::Put {
        collection: "c".into(),
        id,
        doc: json!({"n": n, "g": 0, "tags": []}),
        if_version: None,
    };
    let q = Query::parse(&json!({"filter": {"g": 0}, "sort": {"n": -1}, "limit": 2})).unwrap();
    engine
        .subscribe(SubscribeRequest {
            sub: "gate".into(),
            collection: "c".into(),
            query: q,
            key: "gate".into(),
            resume_from: None,
            sink: gate.clone(),
        })
        .unwrap();
    wait_for(1);
    // The engine delivers this commit to the gate and stays there.
    db.commit(vec![put("first".into(), 0)]).unwrap();
    wait_for(2);
    // Meanwhile: a subscription, then more changes than a query may return.
    let sink = Arc::new(TestSink {
        conn: 1,
        msgs: Mutex::new(Vec::new()),
    });
    subscribe(&engine, 0, sink.clone(), None);
    let total = herald_db::QUERY_DOCS_MAX + 500;
    for chunk in 0..total / 500 {
        let writes = (0..500)
            .map(|i| {
                let k = chunk * 500 + i + 1;
                put(format!("d{k}"), k as i64)
            })
            .collect();
        db.commit(writes).unwrap();
    }
    // And more commits than the engine reads at once when it catches up.
    for k in 0..1100 {
        db.commit(vec![put(format!("e{k}"), 20_000 + k)]).unwrap();
    }
    // Released, the engine attaches the new subscription before it reads those commits: it is
    // ~11,600 changes behind the newest snapshot then.
    gate.state.lock().unwrap().1 = true;
    gate.changed.notify_all();
    db.commit(vec![put("late".into(), -1)]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !engine.is_idle() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(engine.is_idle(), "engine caught up");
    let msgs = sink.msgs.lock().unwrap().clone();
    assert!(
        msgs.iter().all(|m| m["type"] != "error"),
        "no error: {msgs:?}"
    );
    assert_eq!(msgs[0]["type"], "initial");
    let (list, _) = client_state(&msgs);
    let q = Query::parse(&serde_json::from_str(QUERIES[0]).unwrap()).unwrap();
    assert_eq!(list, db.query("c", &q).unwrap().docs);
    engine.stop();
}
