//! Model test of live aggregations through the engine on a real database: random collections
//! (mixed types, missing fields, numbers of every kind), random pipelines of the supported
//! shape (several accumulators, compound keys, pre-group $match/$project/$unwind/$sort,
//! post-group $match/$sort/$skip/$limit/$project/$count) and random commits (inserts, updates,
//! deletes, multi-document transactions), with resumes along the way. After EVERY commit the
//! rows a client builds from the initial result and the change batches (applied by id and
//! position) equal `Pipeline::run` over the pull query at that seq, and seqs increase.
//! The group variant does the same over a collection group (ids repeated across its
//! collections, pipelines over `_path`, with and without a per-collection read restriction,
//! resumes from older seqs) against the pull aggregation over `Db::query_group`.
//! `HERALD_SLOW=1` runs 200 scenarios instead of 12.

use crate::live_engine::{open_db, TestSink};
use herald_db::live::{LiveEngine, SubscribeRequest};
use herald_db::{Db, Write};
use herald_query::pipeline::{row_id, LivePipeline, Pipeline};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn scenarios() -> u64 {
    if std::env::var_os("HERALD_SLOW").is_some() {
        200
    } else {
        12
    }
}

fn pick<'a>(rng: &mut StdRng, from: &'a [Value]) -> &'a Value {
    &from[rng.gen_range(0..from.len())]
}

/// A random pipeline of the shape live aggregations maintain.
fn pipeline(rng: &mut StdRng) -> Value {
    let mut stages = Vec::new();
    if rng.gen_bool(0.5) {
        stages.push(json!({"$match": pick(rng, &[
            json!({"n": {"$gte": 0}}), json!({"k": {"$exists": true}}),
            json!({"$or": [{"j": 1}, {"m": {"$type": "number"}}]}),
        ])}));
    }
    if rng.gen_bool(0.3) {
        stages.push(json!({"$sort": pick(rng, &[json!({"m": -1}), json!({"n": 1, "j": -1})])}));
    }
    if rng.gen_bool(0.3) {
        stages.push(json!({"$unwind": "$tags"}));
    }
    if rng.gen_bool(0.2) {
        stages.push(json!({"$project": {"k": 1, "n": 1, "m": 1, "j": 1, "tags": 1}}));
    }
    if rng.gen_bool(0.2) {
        stages.push(json!({"$match": {"n": {"$type": "number"}}}));
    }
    if rng.gen_bool(0.1) {
        stages.push(json!({"$count": "total"}));
    } else {
        let accs = [
            ("c", json!({"$count": {}})),
            ("s", json!({"$sum": "$n"})),
            ("one", json!({"$sum": 1})),
            ("a", json!({"$avg": "$n"})),
            ("lo", json!({"$min": "$n"})),
            ("hi", json!({"$max": "$m"})),
            ("f", json!({"$first": "$m"})),
            ("l", json!({"$last": "$n"})),
            ("p", json!({"$push": "$j"})),
            ("u", json!({"$addToSet": "$n"})),
        ];
        let mut g = serde_json::Map::new();
        g.insert(
            "_id".into(),
            pick(
                rng,
                &[
                    json!("$k"),
                    json!({"k": "$k", "j": "$j"}),
                    json!(null),
                    json!("$j"),
                ],
            )
            .clone(),
        );
        for (name, spec) in &accs {
            if rng.gen_bool(0.4) {
                g.insert(name.to_string(), spec.clone());
            }
        }
        stages.push(json!({"$group": g}));
        if rng.gen_bool(0.3) {
            stages.push(json!({"$match": {"_id": {"$ne": null}}}));
        }
        if rng.gen_bool(0.4) {
            stages.push(json!({"$sort": pick(rng, &[json!({"c": -1}), json!({"_id": -1}), json!({"s": 1})])}));
        }
        if rng.gen_bool(0.3) {
            stages.push(json!({"$skip": 1}));
        }
        if rng.gen_bool(0.3) {
            stages.push(json!({"$limit": 2}));
        }
        if rng.gen_bool(0.2) {
            stages.push(json!({"$project": {"c": 1, "s": 1}}));
        }
        if rng.gen_bool(0.1) {
            stages.push(json!({"$count": "groups"}));
        }
    }
    Value::Array(stages)
}

fn value(rng: &mut StdRng) -> Option<Value> {
    Some(match rng.gen_range(0..10) {
        0 => return None,
        1 => Value::Null,
        2 | 3 => json!(rng.gen_range(0..3)),
        4 => json!(rng.gen_range(0..3) as f64),
        5 => json!(rng.gen_range(0..4) as f64 * 0.1 + 0.05),
        6 => json!(["a", "b"][rng.gen_range(0..2)]),
        7 => json!(i64::MAX - rng.gen_range(0..2)),
        8 => json!({"x": rng.gen_range(0..2)}),
        _ => json!(-1),
    })
}

fn doc(rng: &mut StdRng) -> Value {
    let mut m = serde_json::Map::new();
    for f in ["k", "j", "n", "m"] {
        if let Some(v) = value(rng) {
            m.insert(f.into(), v);
        }
    }
    let tags: Vec<Value> = (0..rng.gen_range(0..3))
        .map(|_| json!(rng.gen_range(0..3)))
        .collect();
    m.insert("tags".into(), Value::Array(tags));
    Value::Object(m)
}

fn pull(db: &Db, p: &Pipeline) -> (Vec<Value>, u64) {
    let (q, covered) = p.head_query(herald_db::QUERY_DOCS_MAX);
    let out = db.query("c", &q).unwrap();
    (p.run_from(covered, out.docs).unwrap(), out.seq)
}

/// The client's rows from its messages, applied by id and position like an SDK does.
fn client_rows(msgs: &[Value]) -> (Vec<Value>, u64) {
    let mut list: Vec<(String, Value)> = Vec::new();
    let mut seq = 0;
    for m in msgs {
        match m["type"].as_str().unwrap() {
            "initial" => {
                list = m["docs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| (row_id(d), d.clone()))
                    .collect();
                seq = m["seq"].as_u64().unwrap();
            }
            "changes" => {
                let s = m["seq"].as_u64().unwrap();
                assert!(s > seq, "change batches advance: {s} after {seq}");
                seq = s;
                for c in m["changes"].as_array().unwrap() {
                    let id = c["id"].as_str().unwrap();
                    let old = c["oldIndex"].as_i64().unwrap();
                    let new = c["newIndex"].as_i64().unwrap();
                    if old >= 0 {
                        let (had, _) = list.remove(old as usize);
                        assert_eq!(had, id, "the event's id is the row at oldIndex");
                    }
                    if new >= 0 {
                        assert_eq!(id, row_id(&c["doc"]), "the event's id is its row's");
                        list.insert(new as usize, (id.to_string(), c["doc"].clone()));
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

fn subscribe(engine: &LiveEngine, spec: &Value, sink: Arc<TestSink>, resume_from: Option<u64>) {
    let p = Pipeline::parse(spec).unwrap();
    let plan = Arc::new(LivePipeline::new(p).unwrap());
    let req = SubscribeRequest {
        sub: "s".into(),
        collection: "c".into(),
        query: plan.head().clone(),
        key: format!("agg\nc\n{spec}"),
        resume_from,
        sink,
    };
    engine.subscribe_pipeline(req, plan).unwrap();
}

fn wait_idle(engine: &LiveEngine) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !engine.is_idle() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(engine.is_idle(), "engine caught up");
}

#[test]
fn live_aggregations_equal_the_pull_pipeline_after_every_commit() {
    for seed in 0..scenarios() {
        let (_dir, db) = open_db();
        let engine = LiveEngine::start(db.clone());
        let mut rng = StdRng::seed_from_u64(seed);
        let specs: Vec<Value> = (0..3).map(|_| pipeline(&mut rng)).collect();
        let mut sinks: Vec<Arc<TestSink>> = Vec::new();
        let mut conn = 1;
        let new_sink = |conn: &mut u64, msgs: Vec<Value>| {
            *conn += 1;
            Arc::new(TestSink {
                conn: *conn,
                msgs: Mutex::new(msgs),
            })
        };
        for (i, spec) in specs.iter().enumerate() {
            let s = new_sink(&mut conn, Vec::new());
            subscribe(&engine, spec, s.clone(), None);
            sinks.push(s);
            if i == 0 {
                db.commit(vec![Write::Put {
                    collection: "c".into(),
                    id: "seed".into(),
                    doc: doc(&mut rng),
                    if_version: None,
                }])
                .unwrap();
            }
        }
        for round in 0..40 {
            let writes: Vec<Write> = (0..rng.gen_range(1..4))
                .map(|_| {
                    let id = format!("d{}", rng.gen_range(0..10));
                    if rng.gen_bool(0.25) {
                        Write::Delete {
                            collection: "c".into(),
                            id,
                            if_version: None,
                        }
                    } else {
                        Write::Put {
                            collection: "c".into(),
                            id,
                            doc: doc(&mut rng),
                            if_version: None,
                        }
                    }
                })
                .collect();
            // Several writes of one id in a transaction would be refused: keep the first.
            let mut seen = std::collections::HashSet::new();
            let writes: Vec<Write> = writes
                .into_iter()
                .filter(|w| match w {
                    Write::Put { id, .. } | Write::Delete { id, .. } => seen.insert(id.clone()),
                    _ => true,
                })
                .collect();
            let _ = db.commit(writes);
            if round % 15 == 14 {
                // A client reconnects and resumes from the last seq it saw.
                let i = rng.gen_range(0..sinks.len());
                let mut had = sinks[i].msgs.lock().unwrap().clone();
                let (_, seen) = client_rows(&had);
                engine.disconnect(sinks[i].conn);
                had.push(json!({"type": "resumed", "from": seen}));
                let s = new_sink(&mut conn, had);
                subscribe(&engine, &specs[i], s.clone(), Some(seen));
                sinks[i] = s;
            }
            wait_idle(&engine);
            for (spec, sink) in specs.iter().zip(&sinks) {
                let msgs = sink.msgs.lock().unwrap().clone();
                let (rows, seq) = client_rows(&msgs);
                let (want, at) = pull(&db, &Pipeline::parse(spec).unwrap());
                assert!(seq <= at);
                assert_eq!(
                    rows.iter().map(Value::to_string).collect::<Vec<_>>(),
                    want.iter().map(Value::to_string).collect::<Vec<_>>(),
                    "seed {seed} round {round} pipeline {spec} messages {msgs:?}"
                );
            }
        }
        engine.stop();
    }
}

#[test]
fn an_input_growing_past_query_docs_max_ends_the_subscription_like_pull() {
    let (_dir, db) = open_db();
    let engine = LiveEngine::start(db.clone());
    let spec = json!([{"$match": {"big": true}}, {"$count": "n"}]);
    let sink = Arc::new(TestSink {
        conn: 1,
        msgs: Mutex::new(Vec::new()),
    });
    subscribe(&engine, &spec, sink.clone(), None);
    let put = |i: usize| Write::Put {
        collection: "c".into(),
        id: format!("b{i:05}"),
        doc: json!({"big": true}),
        if_version: None,
    };
    let max = herald_db::QUERY_DOCS_MAX;
    for chunk in (0..max).collect::<Vec<_>>().chunks(500) {
        db.commit(chunk.iter().map(|&i| put(i)).collect()).unwrap();
    }
    wait_idle(&engine);
    let (rows, _) = client_rows(&sink.msgs.lock().unwrap());
    assert_eq!(rows, vec![json!({"n": max})]);
    db.commit(vec![put(max)]).unwrap();
    wait_idle(&engine);
    let msgs = sink.msgs.lock().unwrap().clone();
    let last = msgs.last().unwrap();
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("error"), &json!("result_too_large"))
    );
    // The pull aggregation refuses the same input with the same code.
    let p = Pipeline::parse(&spec).unwrap();
    let (q, _) = p.head_query(max);
    assert_eq!(db.query("c", &q).unwrap_err().code(), "result_too_large");
    engine.stop();
}

/// Collections of group `messages` at several depths (ids repeat across them), and one that
/// is not in it.
const GROUP_COLLS: &[&str] = &[
    "messages",
    "rooms/r0/messages",
    "rooms/r1/messages",
    "a/x/b/y/messages",
    "rooms/r0/other",
];

/// Pipelines that read `_path` (grouping by it, ordering by it, collecting it), and ones over
/// ids that repeat across the group's collections.
const GROUP_PIPELINES: &[&str] = &[
    r#"[{"$group": {"_id": "$_path", "c": {"$count": {}}, "s": {"$sum": "$n"}}}]"#,
    r#"[{"$match": {"n": {"$gte": 0}}}, {"$sort": {"n": 1}},
        {"$group": {"_id": "$k", "f": {"$first": "$_path"}, "p": {"$push": "$_path"},
                    "l": {"$last": "$_path"}}}]"#,
    r#"[{"$sort": {"m": -1}},
        {"$group": {"_id": null, "lo": {"$min": "$_path"}, "hi": {"$max": "$n"},
                    "a": {"$avg": "$n"}, "f": {"$first": "$_path"}}}]"#,
    r#"[{"$project": {"_path": 1, "n": 1}},
        {"$group": {"_id": {"p": "$_path", "n": "$n"}, "c": {"$sum": 1}}},
        {"$sort": {"c": -1}}, {"$limit": 3}]"#,
    r#"[{"$match": {"k": {"$exists": true}}}, {"$count": "total"}]"#,
    r#"[{"$group": {"_id": "$_id", "c": {"$count": {}}, "paths": {"$push": "$_path"},
                    "s": {"$sum": "$m"}}}, {"$match": {"c": {"$gte": 2}}}]"#,
];

/// An end user's read rules as the server applies them to a group: nothing of
/// `rooms/r1/messages`, elsewhere only documents with `n != 1`, ANDed into the head query.
struct Rule {
    head: herald_query::Query,
    filter: Value,
}

impl herald_db::Restrict for Rule {
    fn query_for(&self, collection: &str) -> Option<herald_query::Query> {
        if collection == "rooms/r1/messages" {
            return None;
        }
        let f = json!({"filter": {"$and": [self.filter, {"n": {"$ne": 1}}]}});
        let mut q = self.head.clone();
        q.filter = herald_query::Query::parse(&f).unwrap().filter;
        Some(q)
    }
}

fn group_rule(spec: &Value) -> Rule {
    let plan = LivePipeline::new(Pipeline::parse(spec).unwrap()).unwrap();
    Rule {
        head: plan.head().clone(),
        filter: spec[0].get("$match").cloned().unwrap_or(json!({})),
    }
}

/// The pull aggregation over the group at the newest seq, as `POST /v1/aggregate` runs it.
fn pull_group(db: &Db, spec: &Value, restricted: bool) -> (Vec<Value>, u64) {
    let p = Pipeline::parse(spec).unwrap();
    let (q, covered) = p.head_query(herald_db::QUERY_DOCS_MAX);
    let rule = restricted.then(|| group_rule(spec));
    let out = db
        .query_group(
            "messages",
            &q,
            rule.as_ref().map(|r| r as &dyn herald_db::Restrict),
        )
        .unwrap();
    (p.run_from(covered, out.docs).unwrap(), out.seq)
}

fn subscribe_group(
    engine: &LiveEngine,
    spec: &Value,
    restricted: bool,
    sink: Arc<TestSink>,
    resume_from: Option<u64>,
) {
    let plan = Arc::new(LivePipeline::new(Pipeline::parse(spec).unwrap()).unwrap());
    let restrict = restricted.then(|| Arc::new(group_rule(spec)) as Arc<dyn herald_db::Restrict>);
    let req = SubscribeRequest {
        sub: "s".into(),
        collection: String::new(),
        query: plan.head().clone(),
        key: format!("agg\n*/messages\n{spec}\n{restricted}"),
        resume_from,
        sink,
    };
    engine
        .subscribe_group_pipeline("messages", req, restrict, plan)
        .unwrap();
}

/// The messages up to and including the change batch of seq `at` (or the initial at it).
fn upto_seq(msgs: &[Value], at: u64) -> Vec<Value> {
    let end = msgs
        .iter()
        .rposition(|m| m["seq"].as_u64().is_some_and(|s| s <= at) && m["type"] != "heartbeat")
        .map_or(0, |i| i + 1);
    msgs[..end].to_vec()
}

/// Live aggregations over a collection group, with and without an end user's read rules,
/// equal the pull aggregation over the group after every commit: random writes across the
/// group's collections (ids repeated across them, deletes, documents moving in and out of the
/// head `$match` and of the reader's view), a collection created midway, and resumes from the
/// last seen seq and from an older one; inline matching and the threaded grid.
#[test]
fn live_group_aggregations_equal_the_pull_pipeline_after_every_commit() {
    for seed in 0..scenarios() {
        let (_dir, db) = open_db();
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        // Odd seeds match on a threaded grid (group views are filed under `*/messages` there).
        let engine = match seed % 2 {
            0 => LiveEngine::start(db.clone()),
            _ => {
                use herald_db::live::grid::{Threads, ThreadsConfig};
                let config = ThreadsConfig {
                    rows: rng.gen_range(1..=2),
                    parts: rng.gen_range(1..=2),
                    depth: [1, 8][rng.gen_range(0..2)],
                    threads_from_views: 0,
                    jitter: Duration::from_micros(0),
                };
                LiveEngine::start_with(db.clone(), Box::new(Threads::start(config)))
            }
        };
        let mut specs: Vec<Value> = (0..2)
            .map(|_| {
                let text = GROUP_PIPELINES[rng.gen_range(0..GROUP_PIPELINES.len())];
                serde_json::from_str(text).unwrap()
            })
            .collect();
        specs.push(pipeline(&mut rng));
        let mut subs: Vec<(Value, bool, Arc<TestSink>)> = Vec::new();
        let mut conn = 1;
        let new_sink = |conn: &mut u64, msgs: Vec<Value>| {
            *conn += 1;
            Arc::new(TestSink {
                conn: *conn,
                msgs: Mutex::new(msgs),
            })
        };
        for spec in &specs {
            for restricted in [false, true] {
                let s = new_sink(&mut conn, Vec::new());
                subscribe_group(&engine, spec, restricted, s.clone(), None);
                subs.push((spec.clone(), restricted, s));
            }
        }
        for round in 0..40 {
            let mut seen = std::collections::HashSet::new();
            let writes: Vec<Write> = (0..rng.gen_range(1..5))
                .filter_map(|_| {
                    let collection = GROUP_COLLS[rng.gen_range(0..GROUP_COLLS.len())].to_string();
                    let id = format!("d{}", rng.gen_range(0..5));
                    if !seen.insert((collection.clone(), id.clone())) {
                        return None;
                    }
                    Some(if rng.gen_bool(0.25) {
                        Write::Delete {
                            collection,
                            id,
                            if_version: None,
                        }
                    } else {
                        Write::Put {
                            collection,
                            id,
                            doc: doc(&mut rng),
                            if_version: None,
                        }
                    })
                })
                .collect();
            let _ = db.commit(writes);
            if round == 20 {
                // A collection of the group created after the subscriptions.
                db.commit(vec![Write::Put {
                    collection: "late/l1/messages".into(),
                    id: "d1".into(),
                    doc: doc(&mut rng),
                    if_version: None,
                }])
                .unwrap();
            }
            if round % 10 == 9 {
                // A client reconnects and resumes: from the last seq it saw, or from an older
                // one (its list as of that seq, the later batches dropped).
                let i = rng.gen_range(0..subs.len());
                let (spec, restricted, sink) = subs[i].clone();
                let all = sink.msgs.lock().unwrap().clone();
                let (_, last) = client_rows(&all);
                let from = if rng.gen_bool(0.5) {
                    last
                } else {
                    let seqs: Vec<u64> = all.iter().filter_map(|m| m["seq"].as_u64()).collect();
                    seqs[rng.gen_range(0..seqs.len())]
                };
                let mut had = upto_seq(&all, from);
                let (_, from) = client_rows(&had);
                engine.disconnect(sink.conn);
                had.push(json!({"type": "resumed", "from": from}));
                let s = new_sink(&mut conn, had);
                subscribe_group(&engine, &spec, restricted, s.clone(), Some(from));
                subs[i].2 = s;
            }
            wait_idle(&engine);
            for (spec, restricted, sink) in &subs {
                let msgs = sink.msgs.lock().unwrap().clone();
                let (rows, seq) = client_rows(&msgs);
                let (want, at) = pull_group(&db, spec, *restricted);
                assert!(seq <= at);
                assert_eq!(
                    rows.iter().map(Value::to_string).collect::<Vec<_>>(),
                    want.iter().map(Value::to_string).collect::<Vec<_>>(),
                    "seed {seed} round {round} pipeline {spec} restricted {restricted} \
                     messages {msgs:?}"
                );
            }
        }
        engine.stop();
    }
}

/// Over a group the input is capped as for a collection: a subscription whose head query
/// grows past `QUERY_DOCS_MAX` ends with `result_too_large`, and one made past it is refused
/// with the code the pull aggregation over the group gets.
#[test]
fn a_group_input_past_query_docs_max_is_refused_like_pull() {
    let (_dir, db) = open_db();
    let engine = LiveEngine::start(db.clone());
    let spec = json!([{"$match": {"big": true}}, {"$count": "n"}]);
    let sink = |conn| {
        Arc::new(TestSink {
            conn,
            msgs: Mutex::new(Vec::new()),
        })
    };
    let put = |i: usize| Write::Put {
        collection: ["messages", "rooms/r1/messages"][i % 2].into(),
        id: format!("b{i:05}"),
        doc: json!({"big": true}),
        if_version: None,
    };
    let max = herald_db::QUERY_DOCS_MAX;
    for chunk in (0..max).collect::<Vec<_>>().chunks(500) {
        db.commit(chunk.iter().map(|&i| put(i)).collect()).unwrap();
    }
    let first = sink(1);
    subscribe_group(&engine, &spec, false, first.clone(), None);
    wait_idle(&engine);
    let (rows, _) = client_rows(&first.msgs.lock().unwrap());
    assert_eq!(rows, vec![json!({"n": max})]);
    db.commit(vec![put(max)]).unwrap();
    wait_idle(&engine);
    let code = |s: &TestSink| {
        let msgs = s.msgs.lock().unwrap();
        let last = msgs.last().unwrap().clone();
        (
            last["type"].as_str().map(str::to_string),
            last["code"].clone(),
        )
    };
    let refused = (Some("error".to_string()), json!("result_too_large"));
    assert_eq!(code(&first), refused);
    let late = sink(2);
    subscribe_group(&engine, &spec, false, late.clone(), None);
    wait_idle(&engine);
    assert_eq!(code(&late), refused);
    let p = Pipeline::parse(&spec).unwrap();
    let (q, _) = p.head_query(max);
    let e = db.query_group("messages", &q, None).unwrap_err();
    assert_eq!(e.code(), "result_too_large");
    engine.stop();
}
