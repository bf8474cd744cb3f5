//! The matching grid across machines, in one process on a real broker: three cluster nodes run
//! a 2 x 3 grid (three write partitions, so a node that joins later can take cells); live-query engines on two of them match through it (`KafkaMatching`); a node
//! that runs cells but holds no subscription leaves under writes, then a new node joins and takes
//! cells (capacity without a restart). Every subscriber's list must
//! equal the pull query at the seq of every batch it received, a batch must come exactly at
//! the seqs where the pull result changed, and the cells must move to the others.

use herald_cluster::grid::{Grid, Shape};
use herald_cluster::testing::{unique_name, KafkaCluster};
use herald_cluster::{ClusterOptions, Node, Role};
use herald_db::live::engine::top_at;
use herald_db::live::{LiveEngine, Message, Sink, SubscribeRequest};
use herald_db::{Db, DbOptions, Write};
use herald_query::Query;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHAPE: Shape = Shape {
    rows: 2,
    partitions: 3,
};
const CELLS: usize = (SHAPE.rows * SHAPE.partitions) as usize;
/// Short, so that a front end gone for good is removed within the test (a front end gives up
/// after half of it without a confirmed renewal: loopback Kafka confirms in milliseconds).
const LEASE: Duration = Duration::from_secs(8);

const QUERIES: &[&str] = &[
    r#"{"filter": {}, "sort": {"n": 1}, "limit": 3}"#,
    r#"{"filter": {"n": {"$gte": 3}}, "sort": {"n": -1}, "skip": 1, "limit": 2}"#,
    r#"{"filter": {"s": {"$regex": "7"}}, "sort": {"n": 1}}"#,
    r#"{"filter": {"s": {"$regex": "1$"}}, "sort": {"s": 1}, "skip": 1, "limit": 4}"#,
    r#"{"filter": {"tags": {"$in": ["a", "c"]}}, "sort": {"n": 1}, "skip": 1, "limit": 3}"#,
    r#"{"filter": {"n": {"$lt": 4}}}"#,
];

struct TestSink {
    conn: u64,
    msgs: Mutex<Vec<Message>>,
}

impl Sink for TestSink {
    fn send(&self, msg: Message) -> bool {
        self.msgs.lock().unwrap().push(msg);
        true
    }
    fn conn(&self) -> u64 {
        self.conn
    }
}

fn start(kafka: &KafkaCluster, cluster: &str, id: &str, dir: &Path) -> (Node, Db) {
    let mut opts = ClusterOptions::new(kafka.bootstrap(), cluster, id, &format!("http://{id}"));
    opts.grid_lease = LEASE;
    Node::start(opts, dir, DbOptions::default()).expect("node starts")
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

/// A transaction of one to three writes (its documents usually in different partitions).
fn transaction(rng: &mut Rng, exists: &mut BTreeSet<String>) -> Vec<Write> {
    let mut writes = Vec::new();
    let mut ids = BTreeSet::new();
    for _ in 0..1 + rng.below(3) {
        let id = format!("d{}", rng.below(24));
        if !ids.insert(id.clone()) {
            continue;
        }
        if exists.contains(&id) && rng.below(5) == 0 {
            exists.remove(&id);
            writes.push(Write::Delete {
                collection: "things".into(),
                id,
                if_version: None,
            });
        } else {
            let tags = ["a", "b", "c"]
                .into_iter()
                .filter(|_| rng.below(2) == 0)
                .collect::<Vec<_>>();
            let doc =
                json!({"n": rng.below(10), "s": format!("x{}", rng.below(100)), "tags": tags});
            exists.insert(id.clone());
            writes.push(Write::Put {
                collection: "things".into(),
                id,
                doc,
                if_version: None,
            });
        }
    }
    writes
}

/// The window a subscriber of `query` should show at `seq`.
fn window_at(db: &Db, query: &Query, seq: u64) -> Vec<Value> {
    let n = query.limit.map(|l| query.skip + l);
    let docs = top_at(db, "things", query, n, seq).unwrap();
    docs.into_iter().skip(query.skip).collect()
}

/// Checks one subscriber: its batches come exactly at the seqs where the pull result changed,
/// and its list after each equals the pull result there. Returns the last seq it reached.
fn check(db: &Db, qi: usize, msgs: &[Message], upto: u64) -> u64 {
    let query = Query::parse(&serde_json::from_str(QUERIES[qi]).unwrap()).unwrap();
    let Some(Message::Initial { seq, docs, .. }) = msgs.first() else {
        panic!("query {qi}: no initial result first: {msgs:?}");
    };
    let mut list: Vec<Value> = docs.iter().map(|d| (**d).clone()).collect();
    let mut at = *seq;
    assert_eq!(
        list,
        window_at(db, &query, at),
        "query {qi}: initial at {at}"
    );
    let mut expected = list.clone();
    let mut batches = msgs[1..].iter().peekable();
    for s in at + 1..=upto {
        let want = window_at(db, &query, s);
        let changed = want != expected;
        match batches.peek() {
            Some(Message::Changes { seq, events, .. }) if *seq == s => {
                assert!(changed, "query {qi}: a batch at {s}, where nothing changed");
                for e in events.iter() {
                    if e.old_index >= 0 {
                        list.remove(e.old_index as usize);
                    }
                    if e.new_index >= 0 {
                        let doc = e.doc.as_deref().expect("a document").clone();
                        list.insert(e.new_index as usize, doc);
                    }
                }
                assert_eq!(list, want, "query {qi}: list after the batch at {s}");
                batches.next();
            }
            Some(m @ (Message::Reset { .. } | Message::Error { .. })) => {
                panic!("query {qi}: {m:?}")
            }
            _ => assert!(
                !changed,
                "query {qi}: no batch at {s}, where the result changed"
            ),
        }
        expected = want;
        at = s;
    }
    at
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn subscribers_on_two_nodes_see_every_change_once_while_a_matching_node_leaves() {
    let kafka = KafkaCluster::shared();
    let cluster = unique_name("grid");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<(Node, Db, Grid)>> = (0..3)
        .map(|i| {
            let (node, db) = start(kafka, &cluster, &format!("n{i}"), dirs[i].path());
            let grid = Grid::start(&node, SHAPE).expect("grid starts");
            Some((node, db, grid))
        })
        .collect();
    // A node asking for another grid is refused.
    {
        let dir = tempfile::tempdir().unwrap();
        let (node, _db) = start(kafka, &cluster, "odd", dir.path());
        let shape = Shape {
            rows: 3,
            partitions: 3,
        };
        let err = Grid::start(&node, shape)
            .err()
            .expect("a mismatch is refused");
        assert!(err.to_string().contains("same grid"), "{err}");
        let shape = Shape {
            rows: 2,
            partitions: 4,
        };
        let err = Grid::start(&node, shape)
            .err()
            .expect("a mismatch is refused");
        assert!(err.to_string().contains("write partitions"), "{err}");
    }
    let cells = |nodes: &[Option<(Node, Db, Grid)>]| -> Vec<(usize, u32, u32)> {
        let mut all = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if let Some((_, _, g)) = n {
                all.extend(g.running().into_iter().map(|c| (i, c.row, c.part)));
            }
        }
        all
    };
    wait_until("every cell running once", Duration::from_secs(60), || {
        let c = cells(&nodes);
        c.len() == CELLS && c.iter().map(|c| (c.1, c.2)).collect::<BTreeSet<_>>().len() == CELLS
    });
    wait_until("a primary", Duration::from_secs(30), || {
        nodes
            .iter()
            .flatten()
            .any(|(n, _, _)| n.role() == Role::Primary)
    });
    let primary = (0..3)
        .find(|&i| nodes[i].as_ref().unwrap().0.role() == Role::Primary)
        .unwrap();
    // The node to lose: one that runs cells, not the primary (whose loss would only add a
    // write failover to the test).
    let c = cells(&nodes);
    let victim = (0..3)
        .find(|&i| i != primary && c.iter().any(|c| c.0 == i))
        .expect("a follower runs cells");
    let fronts: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    eprintln!("primary n{primary}, cells {c:?}, victim n{victim}, front ends {fronts:?}");

    let engines: Vec<(usize, LiveEngine)> = fronts
        .iter()
        .map(|&i| {
            let (_, db, grid) = nodes[i].as_ref().unwrap();
            let front = grid.front_end().expect("front end");
            (i, LiveEngine::start_with(db.clone(), Box::new(front)))
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut exists = BTreeSet::new();
    let write =
        |rng: &mut Rng, exists: &mut BTreeSet<String>, nodes: &[Option<(Node, Db, Grid)>]| {
            let db = &nodes[primary].as_ref().unwrap().1;
            db.commit(transaction(rng, exists)).unwrap().seq
        };
    for _ in 0..20 {
        write(&mut rng, &mut exists, &nodes);
    }
    let mut subs: Vec<(usize, usize, Arc<TestSink>)> = Vec::new();
    for (e, (_, engine)) in engines.iter().enumerate() {
        for (qi, text) in QUERIES.iter().enumerate() {
            let sink = Arc::new(TestSink {
                conn: (e * 100 + qi) as u64,
                msgs: Mutex::new(Vec::new()),
            });
            let q: Value = serde_json::from_str(text).unwrap();
            engine
                .subscribe(SubscribeRequest {
                    sub: format!("q{qi}"),
                    collection: "things".into(),
                    query: Query::parse(&q).unwrap(),
                    key: format!("things\n{text}"),
                    resume_from: None,
                    sink: sink.clone(),
                })
                .unwrap();
            subs.push((e, qi, sink));
        }
    }
    let mut last = 0;
    for _ in 0..60 {
        last = write(&mut rng, &mut exists, &nodes);
    }
    // The matching node leaves (its cells move to the others) while writes go on.
    let cells_before = cells(&nodes);
    let left = Instant::now();
    drop(nodes[victim].take());
    for _ in 0..60 {
        last = write(&mut rng, &mut exists, &nodes);
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_until("the cells moved", Duration::from_secs(20), || {
        let c = cells(&nodes);
        c.iter().map(|c| (c.1, c.2)).collect::<BTreeSet<_>>().len() == CELLS
    });
    eprintln!(
        "cells {cells_before:?} -> {:?} within {:?}",
        cells(&nodes),
        left.elapsed()
    );
    // A new node joins under writes: Kafka hands it cells, so matching capacity grows without
    // restarting anything, and the subscribers still miss nothing.
    let joined_dir = tempfile::tempdir().unwrap();
    let (jnode, jdb) = start(kafka, &cluster, "n3", joined_dir.path());
    let jgrid = Grid::start(&jnode, SHAPE).expect("the joining node's grid starts");
    nodes.push(Some((jnode, jdb, jgrid)));
    let joined = Instant::now();
    for _ in 0..40 {
        last = write(&mut rng, &mut exists, &nodes);
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_until("the new node runs cells", Duration::from_secs(30), || {
        let c = cells(&nodes);
        c.iter().any(|c| c.0 == 3)
            && c.len() == CELLS
            && c.iter().map(|c| (c.1, c.2)).collect::<BTreeSet<_>>().len() == CELLS
    });
    eprintln!(
        "n3 joined: cells {:?} after {:?}",
        cells(&nodes),
        joined.elapsed()
    );
    for _ in 0..20 {
        last = write(&mut rng, &mut exists, &nodes);
    }
    for (i, engine) in &engines {
        wait_until(
            &format!("the engine of n{i} at seq {last}"),
            Duration::from_secs(30),
            || engine.seq() >= last,
        );
    }
    for (e, qi, sink) in &subs {
        let (i, _) = &engines[*e];
        let db = &nodes[*i].as_ref().unwrap().1;
        let msgs = sink.msgs.lock().unwrap();
        let at = check(db, *qi, &msgs, last);
        assert_eq!(at, last);
        eprintln!("n{i} query {qi}: {} batches", msgs.len() - 1);
    }
    for (_, engine) in &engines {
        engine.stop();
    }
    // A stopped engine's views go; a node that died without removing its views removes them
    // when it starts again (here: views of an earlier run of node `a`, written by hand).
    let (a, b) = (engines[0].0, engines[1].0);
    let registered =
        |nodes: &[Option<(Node, Db, Grid)>]| nodes[b].as_ref().unwrap().2.registered_views();
    wait_until(
        "the stopped engines' views removed",
        Duration::from_secs(20),
        || registered(&nodes) == 0,
    );
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka.bootstrap())
        .create()
        .unwrap();
    let topic = format!("{cluster}.grid.queries");
    for i in 0..3 {
        let key = format!("n{a}/1/{i}");
        let value = json!({"collection": "things", "filter": {}, "row": 0, "fromSeq": 0,
                           "node": format!("n{a}")})
        .to_string();
        producer
            .send(BaseRecord::to(&topic).key(&key).payload(&value))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    wait_until(
        "the earlier run's views registered",
        Duration::from_secs(20),
        || registered(&nodes) == 3,
    );
    {
        let (node, _, grid) = nodes[a].as_mut().unwrap();
        grid.stop();
        *grid = Grid::start(node, SHAPE).expect("the grid starts again");
    }
    wait_until(
        "the earlier run's views removed",
        Duration::from_secs(20),
        || registered(&nodes) == 0,
    );
    // A front end that is gone for good (node `ghost` never comes back): its views go once
    // its lease expires, removed by the nodes running the rows' first cells.
    // Taken before sending: a node may read the records before `flush` returns.
    let sent = Instant::now();
    for i in 0..4 {
        let key = format!("ghost/1/{i}");
        let value = json!({"collection": "things", "filter": {"n": i}, "row": i % 2,
                           "fromSeq": 0, "node": "ghost"})
        .to_string();
        producer
            .send(BaseRecord::to(&topic).key(&key).payload(&value))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    wait_until(
        "the ghost's views registered",
        Duration::from_secs(20),
        || registered(&nodes) == 4,
    );
    wait_until(
        "the ghost's views removed after its lease",
        LEASE + Duration::from_secs(30),
        || registered(&nodes) == 0,
    );
    let took = sent.elapsed();
    eprintln!("the ghost's views removed after {took:?}");
    assert!(took >= LEASE, "removed before the lease expired: {took:?}");
}
