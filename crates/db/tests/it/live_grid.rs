//! Model test of the live-query engine over the threaded matching grid: random grid shapes
//! (rows, write partitions, pipeline depth, cell jitter so cells finish out of order), random
//! queries (equality, range, `$or`, unanchored `$regex`, sort + skip + small limits) and random
//! commits (multi-document transactions, deletes) while subscriptions come, go and resume.
//! Some scenarios run the adaptive grid (inline below a few views, threaded above), so matching
//! changes sides while subscriptions come and go. The test is the only writer, so the pull result right after each commit is the result at
//! that seq; at the end every subscriber's messages are replayed and after **every** batch its
//! list must equal the pull result at the batch's seq. `HERALD_LIVE_GRID_SEEDS` sets the number
//! of scenarios (seeds 0..n). The same model runs over collection-group subscriptions, with
//! writes across the group's collections.

use crate::live_engine::open_db;
use herald_db::live::grid::{self, ThreadsConfig};
use herald_db::live::{LiveEngine, Message, Sink, SubscribeRequest};
use herald_db::Write;
use herald_query::Query;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a connection received, in order: (sub, message).
struct TestSink {
    conn: u64,
    msgs: Mutex<Vec<(String, Message)>>,
}

impl Sink for TestSink {
    fn send(&self, msg: Message) -> bool {
        let sub = match &msg {
            Message::Initial { sub, .. }
            | Message::Changes { sub, .. }
            | Message::Reset { sub, .. }
            | Message::Error { sub, .. } => sub.clone(),
        };
        self.msgs.lock().unwrap().push((sub, msg));
        true
    }
    fn conn(&self) -> u64 {
        self.conn
    }
}

/// One subscription as the client sees it: its query, its list and the last seq it saw.
#[derive(Clone)]
struct Client {
    qi: usize,
    list: Vec<Value>,
    seq: u64,
    /// Still subscribed (not unsubscribed by the test).
    live: bool,
}

fn random_query(rng: &mut StdRng) -> Value {
    let filter = match rng.gen_range(0..6) {
        0 => json!({"g": rng.gen_range(0..3)}),
        1 => json!({"n": {"$gte": rng.gen_range(0..6)}}),
        2 => json!({"$or": [{"g": rng.gen_range(0..3)}, {"n": {"$lt": rng.gen_range(0..4)}}]}),
        3 => {
            let re = ["a", "b", "ab", "c.a"][rng.gen_range(0..4)];
            json!({"s": {"$regex": re}})
        }
        4 => json!({"$or": [{"s": {"$regex": "b"}}, {"n": rng.gen_range(0..6)}]}),
        _ => json!({}),
    };
    let mut q = serde_json::Map::new();
    q.insert("filter".into(), filter);
    if rng.gen_bool(0.7) {
        let dir = if rng.gen_bool(0.5) { 1 } else { -1 };
        q.insert("sort".into(), json!({"n": dir}));
        // Small limits and skips: the window runs short and refills often.
        q.insert("limit".into(), json!(rng.gen_range(1..4)));
        if rng.gen_bool(0.5) {
            q.insert("skip".into(), json!(rng.gen_range(1..3)));
        }
    }
    Value::Object(q)
}

/// Collections of collection group `c` at several depths, and two that are not in it.
const GROUP_COLLS: &[&str] = &["c", "r/a/c", "r/b/c", "x/y/z/w/c", "cc", "r/a/d"];

fn random_writes(rng: &mut StdRng, group: bool) -> Vec<Write> {
    (0..rng.gen_range(1..5))
        .map(|_| {
            let id = format!("d{}", rng.gen_range(0..20));
            let collection = match group {
                true => GROUP_COLLS[rng.gen_range(0..GROUP_COLLS.len())].to_string(),
                false => "c".to_string(),
            };
            if rng.gen_bool(0.25) {
                Write::Delete {
                    collection,
                    id,
                    if_version: None,
                }
            } else {
                let s: String = (0..rng.gen_range(0..4))
                    .map(|_| ['a', 'b', 'c'][rng.gen_range(0..3)])
                    .collect();
                let doc = json!({"n": rng.gen_range(0..6), "g": rng.gen_range(0..3), "s": s});
                Write::Put {
                    collection,
                    id,
                    doc,
                    if_version: None,
                }
            }
        })
        .collect()
}

/// Applies one message to a client, checking it against the pull results by seq.
fn apply(c: &mut Client, msg: &Message, pulls: &[BTreeMap<u64, Vec<Value>>], ctx: &str) {
    let want = |seq: u64| {
        pulls[c.qi]
            .get(&seq)
            .unwrap_or_else(|| panic!("{ctx}: no pull result recorded at seq {seq}"))
    };
    match msg {
        Message::Initial { seq, docs, .. } => {
            c.list = docs.iter().map(|d| (**d).clone()).collect();
            c.seq = *seq;
            assert_eq!(&c.list, want(*seq), "{ctx}: initial at seq {seq}");
        }
        Message::Changes { seq, events, .. } => {
            assert!(*seq > c.seq, "{ctx}: batch seq {seq} after {}", c.seq);
            c.seq = *seq;
            for e in events.iter() {
                if e.old_index >= 0 {
                    c.list.remove(e.old_index as usize);
                }
                if e.new_index >= 0 {
                    let doc = e.doc.as_deref().cloned().unwrap_or(Value::Null);
                    c.list.insert(e.new_index as usize, doc);
                }
            }
            assert_eq!(&c.list, want(*seq), "{ctx}: after the batch at seq {seq}");
        }
        Message::Reset { .. } => c.list.clear(),
        Message::Error { code, message, .. } => panic!("{ctx}: error {code}: {message}"),
    }
}

/// Replays what one connection received into its clients, checking every message; batches of
/// a connection come in seq order (a resumed connection's replays run per subscription, one
/// after the other, so only a fresh connection is checked across its subscriptions).
fn check(
    sink: &TestSink,
    subs: &mut HashMap<String, Client>,
    resumed: bool,
    pulls: &[BTreeMap<u64, Vec<Value>>],
    shape: &str,
) {
    let mut batch_seq = 0;
    for (sub, msg) in sink.msgs.lock().unwrap().iter() {
        let ctx = format!("{shape} conn {} sub {sub}", sink.conn);
        if let (Message::Changes { seq, .. }, false) = (msg, resumed) {
            assert!(*seq >= batch_seq, "{ctx}: batch {seq} after {batch_seq}");
            batch_seq = *seq;
        }
        apply(subs.get_mut(sub).expect("a known sub"), msg, pulls, &ctx);
    }
}

#[test]
fn subscribers_follow_the_pull_result_at_every_batch_over_the_threaded_grid() {
    model(false, 32);
}

/// The same over collection-group subscriptions: writes land in collections of the group `c`
/// at several depths (and in two that are not), pulls are group queries, and subscriptions
/// come, go and resume as group subscriptions.
#[test]
fn group_subscribers_follow_the_pull_result_at_every_batch_over_the_threaded_grid() {
    model(true, 16);
}

fn model(group: bool, default_seeds: u64) {
    let seeds: u64 = std::env::var("HERALD_LIVE_GRID_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_seeds);
    for seed in 0..seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = ThreadsConfig {
            rows: rng.gen_range(1..=4),
            parts: rng.gen_range(1..=4),
            depth: [1, 2, 8, 32][rng.gen_range(0..4)],
            // Some scenarios use the adaptive grid with a low threshold, so matching moves
            // between the engine's thread and the cells as subscriptions come and go.
            threads_from_views: [0, 0, 2, 3][rng.gen_range(0..4)],
            jitter: Duration::from_micros([0, 300, 1500][rng.gen_range(0..3)]),
        };
        let shape = format!("seed {seed} grid {config:?} group {group}");
        let (_dir, db) = open_db();
        let engine = LiveEngine::start_with(db.clone(), grid::start(config));
        let queries: Vec<Value> = (0..8).map(|_| random_query(&mut rng)).collect();
        let parsed: Vec<Query> = queries.iter().map(|q| Query::parse(q).unwrap()).collect();
        let mut pulls: Vec<BTreeMap<u64, Vec<Value>>> = vec![BTreeMap::new(); queries.len()];
        let record = |pulls: &mut Vec<BTreeMap<u64, Vec<Value>>>| {
            for (i, q) in parsed.iter().enumerate() {
                let out = match group {
                    true => db.query_group("c", q, None).unwrap(),
                    false => db.query("c", q).unwrap(),
                };
                pulls[i].insert(out.seq, out.docs);
            }
        };
        record(&mut pulls);
        // Open connections: sink, its subscriptions (sub name -> client state), and whether it
        // resumed subscriptions of a dropped one.
        let mut conns: Vec<(Arc<TestSink>, HashMap<String, Client>, bool)> = Vec::new();
        let mut next_conn = 1;
        let mut next_sub = 0;
        let subscribe = |engine: &LiveEngine,
                         sink: &Arc<TestSink>,
                         sub: &str,
                         qi: usize,
                         resume_from: Option<u64>| {
            let req = SubscribeRequest {
                sub: sub.into(),
                collection: "c".into(),
                query: Query::parse(&queries[qi]).unwrap(),
                key: format!("c\n{group}\n{}", queries[qi]),
                resume_from,
                sink: sink.clone() as Arc<dyn Sink>,
            };
            match group {
                true => engine.subscribe_group("c", req, None).unwrap(),
                false => engine.subscribe(req).unwrap(),
            }
        };
        for _ in 0..150 {
            let out = db.commit(random_writes(&mut rng, group)).unwrap();
            record(&mut pulls);
            assert!(pulls[0].contains_key(&out.seq));
            match rng.gen_range(0..12) {
                // A new connection with one to three subscriptions.
                0 | 1 => {
                    let sink = Arc::new(TestSink {
                        conn: next_conn,
                        msgs: Mutex::new(Vec::new()),
                    });
                    next_conn += 1;
                    let mut subs = HashMap::new();
                    for _ in 0..rng.gen_range(1..=3) {
                        let qi = rng.gen_range(0..queries.len());
                        let sub = format!("s{next_sub}");
                        next_sub += 1;
                        subscribe(&engine, &sink, &sub, qi, None);
                        subs.insert(
                            sub,
                            Client {
                                qi,
                                list: Vec::new(),
                                seq: 0,
                                live: true,
                            },
                        );
                    }
                    conns.push((sink, subs, false));
                }
                // One subscription goes.
                2 if !conns.is_empty() => {
                    let i = rng.gen_range(0..conns.len());
                    let (sink, subs, _) = &mut conns[i];
                    if let Some(sub) = subs.keys().next().cloned() {
                        engine.unsubscribe(sink.conn, &sub).unwrap();
                        subs.get_mut(&sub).unwrap().live = false;
                    }
                }
                // A connection drops and its client resumes every subscription on a new one,
                // each from the last seq it saw (wait for the engine so what it saw is known).
                3 if !conns.is_empty() => {
                    let i = rng.gen_range(0..conns.len());
                    let (old, mut subs, resumed) = conns.swap_remove(i);
                    engine.disconnect(old.conn);
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !engine.is_idle() {
                        assert!(Instant::now() < deadline, "{shape}: engine idle");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    check(&old, &mut subs, resumed, &pulls, &shape);
                    let sink = Arc::new(TestSink {
                        conn: next_conn,
                        msgs: Mutex::new(Vec::new()),
                    });
                    next_conn += 1;
                    subs.retain(|_, c| c.live);
                    for (sub, c) in &subs {
                        subscribe(&engine, &sink, sub, c.qi, Some(c.seq));
                    }
                    // The new connection's check starts from the state the client had.
                    conns.push((sink, subs, true));
                }
                _ => {}
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !engine.is_idle() {
            assert!(Instant::now() < deadline, "{shape}: engine caught up");
            std::thread::sleep(Duration::from_millis(2));
        }
        let last = db.seq();
        for (sink, mut subs, resumed) in conns {
            check(&sink, &mut subs, resumed, &pulls, &shape);
            for (sub, c) in subs.iter().filter(|(_, c)| c.live) {
                assert_eq!(
                    &c.list,
                    pulls[c.qi].get(&last).unwrap(),
                    "{shape} conn {} sub {sub}: final list (query {})",
                    sink.conn,
                    queries[c.qi]
                );
            }
        }
        engine.stop();
    }
}
