//! Fault schedules at the database level: random concurrent multi-document transactions on a
//! [`Db`] whose file layer ([`FaultFs`]) fails at random points (ENOSPC, EIO and power cuts at
//! the Nth write, sync, read, rename, allocation, creation, removal or directory sync; sometimes
//! a disk that fills up and is later freed), with a trigger on the collection (every change
//! queues a task in its own commit), some tasks completed, live subscriptions, and sometimes a
//! composite index declared mid-workload (built in background jobs). Then a power
//! loss ("reboot": everything not synced is lost, the log's tail sometimes torn), a reopen, and
//! the checks.
//!
//! Before the reboot, once the live engine has caught up:
//! - every subscriber's list equals the pull query;
//! - every change batch a subscriber received has the seq of an acknowledged transaction, and
//!   every document in its list was written by an acknowledged one (a failed commit is never
//!   published).
//!
//! After the reopen, the same lists are compared with the history: every list a subscriber
//! held (after its initial result and after each batch) equals the query run over the commit
//! log's replay at that seq.
//!
//! And:
//! - the commit log holds every acknowledged transaction at its seq, and each of its records is
//!   exactly one submitted transaction's changes (all or nothing: each transaction writes a
//!   marker document, so a record is matched to the transaction that wrote it);
//! - replaying the commit log gives exactly the documents, and its last record is the seq;
//! - the trigger's queue holds a task for every logged change of the collection except ones
//!   whose completion was attempted, none for a change that is not logged, and none whose
//!   completion was acknowledged;
//! - `herald check` (storage and the database's index invariants) is clean, and the database
//!   takes writes again.
//!
//! `HERALD_DB_FAULT_SCHEDULES` sets how many schedules run (default 60, a few seconds in a
//! debug build; the slow suite runs 5000). A failing schedule prints its seed; rerun it alone
//! with `HERALD_DB_FAULT_SEED=<seed> cargo test -p herald-db --test it fault_schedules` (the
//! workload and the fault plan follow from the seed; the interleaving of threads may not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_db::live::LiveEngine;
use herald_db::triggers::{TaskId, TriggerDef};
use herald_db::{Db, DbOptions, Durability, IndexState, LogRead, QueueFull, StoreOptions, Write};
use herald_query::{Direction, Query};
use herald_storage::{run_schedule, schedule_seeds, Fault, FaultFs, Op};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::live_engine::{client_state, subscribe, TestSink, QUERIES};

const SCHEDULES_ENV: &str = "HERALD_DB_FAULT_SCHEDULES";
const SEED_ENV: &str = "HERALD_DB_FAULT_SEED";
const SCHEDULES_DEFAULT: u64 = 60;
const DIR: &str = "/db";
/// A schedule that has not finished after this long is hung (a bug): the test fails with its
/// seed. Generous: the machine may be loaded.
const SCHEDULE_TIME_MAX: Duration = Duration::from_secs(120);
/// The collection the transactions, the trigger and the subscriptions share.
const COLL: &str = "c";
/// Where each transaction writes its marker document `t<n>`.
const MARKS: &str = "marks";
/// Documents of `COLL` the transactions write: few, so transactions overlap.
const IDS: usize = 12;

const OPS: [Op; 8] = [
    Op::Write,
    Op::Sync,
    Op::Read,
    Op::Rename,
    Op::Allocate,
    Op::Create,
    Op::Remove,
    Op::SyncDir,
];

/// How many operations of each kind a schedule's workload runs, about (so that most planned
/// faults happen).
fn op_reach(op: Op) -> u64 {
    match op {
        Op::Write => 150,
        Op::Sync | Op::Read => 70,
        Op::Allocate => 3,
        Op::Rename => 10,
        Op::Create | Op::Remove | Op::SyncDir => 15,
    }
}

fn options(rng: &mut StdRng) -> DbOptions {
    DbOptions {
        durability: Durability::Fsync,
        store: StoreOptions {
            reserve_bytes: 64 << 10,
            // Small segments: rotations, spares and recycling happen in every schedule.
            wal_segment_bytes: 16 << 10,
            checkpoint_interval_ms: if rng.gen_bool(0.5) { 3_600_000 } else { 5 },
            checkpoint_bytes: if rng.gen_bool(0.5) {
                usize::MAX / 2
            } else {
                8 << 10
            },
            cache_bytes_max: if rng.gen_bool(0.3) { 0 } else { 1 << 20 },
            ..StoreOptions::default()
        },
        ..DbOptions::default()
    }
}

fn open(fs: &FaultFs, options: &DbOptions) -> Result<Db, String> {
    Db::open_on(Path::new(DIR), options.clone(), Arc::new(fs.clone())).map_err(|e| e.to_string())
}

/// One submitted transaction: its number (its marker is `marks/t<n>`) and its writes to
/// `COLL` (distinct ids; `None` is a delete).
#[derive(Clone, Debug)]
struct Txn {
    n: u64,
    writes: Vec<(String, Option<Value>)>,
}

impl Txn {
    fn random(n: u64, rng: &mut StdRng) -> Txn {
        let mut ids: Vec<usize> = (0..IDS).collect();
        let mut writes = Vec::new();
        for _ in 0..rng.gen_range(1..=4) {
            let id = format!("d{}", ids.swap_remove(rng.gen_range(0..ids.len())));
            let doc = (!rng.gen_bool(0.2)).then(|| {
                let tags: Vec<&str> = ["a", "b", "c"]
                    .into_iter()
                    .filter(|_| rng.gen_bool(0.4))
                    .collect();
                json!({"n": rng.gen_range(0..6), "g": rng.gen_range(0..2), "tags": tags,
                    "tx": n, "pad": "x".repeat(rng.gen_range(0..600))})
            });
            writes.push((id, doc));
        }
        Txn { n, writes }
    }

    fn marker(&self) -> String {
        format!("t{}", self.n)
    }

    fn to_writes(&self) -> Vec<Write> {
        let mut out = vec![Write::Put {
            collection: MARKS.into(),
            id: self.marker(),
            doc: json!({"tx": self.n}),
            if_version: None,
        }];
        for (id, doc) in &self.writes {
            out.push(match doc {
                Some(doc) => Write::Put {
                    collection: COLL.into(),
                    id: id.clone(),
                    doc: doc.clone(),
                    if_version: None,
                },
                None => Write::Delete {
                    collection: COLL.into(),
                    id: id.clone(),
                    if_version: None,
                },
            });
        }
        out
    }
}

/// What the workload knows when the power goes.
#[derive(Default)]
struct Record {
    /// Acknowledged transactions by seq.
    acked: BTreeMap<u64, Txn>,
    /// Every submitted transaction by number.
    submitted: BTreeMap<u64, Txn>,
    /// Tasks whose completion was attempted (by seq and document id), and those whose
    /// completion was acknowledged.
    completing: BTreeSet<(u64, String)>,
    completed: BTreeSet<TaskId>,
    outcomes: BTreeMap<String, u64>,
}

/// What a schedule did, for the test's totals.
struct Summary {
    text: String,
    faulted: bool,
    acked: u64,
    failed: u64,
    completed: u64,
}

/// Runs schedule `seed`; `Err` says what went wrong.
fn schedule(seed: u64) -> Result<Summary, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = FaultFs::new(seed);
    let options = options(&mut rng);
    let db = open(&fs, &options).map_err(|e| format!("first open: {e}"))?;
    let def = TriggerDef::parse(
        "t",
        &json!({"collection": COLL, "function": "function (e, db) {}"}),
    )
    .map_err(|e| e.to_string())?;
    let uid = db.put_trigger(def).map_err(|e| e.to_string())?.0.uid;
    let engine = LiveEngine::start(db.clone());
    let mut sinks: Vec<(Arc<TestSink>, usize)> = Vec::new();
    for conn in 0..rng.gen_range(1..=2) {
        let qi = rng.gen_range(0..QUERIES.len());
        let sink = Arc::new(TestSink {
            conn,
            msgs: Mutex::new(Vec::new()),
        });
        subscribe(&engine, qi, sink.clone(), None);
        sinks.push((sink, qi));
    }
    // The fault plan: a few failures at random operations.
    for _ in 0..rng.gen_range(1..=4) {
        let op = OPS[rng.gen_range(0..OPS.len())];
        let fault = match rng.gen_range(0..10) {
            0..=3 => Fault::NoSpace,
            4..=7 => Fault::Io,
            _ => Fault::PowerCut,
        };
        fs.fail(
            op,
            rng.gen_range(1..=op_reach(op)),
            fault,
            rng.gen_bool(0.2),
        );
    }
    let fill_at = rng.gen_bool(0.3).then(|| rng.gen_range(0..30));
    let free_at = rng.gen_range(0..40);
    // Sometimes a composite index, declared mid-workload: its build runs in background jobs
    // under the faults (and resumes after the reopen).
    let index_at = rng.gen_bool(0.5).then(|| rng.gen_range(0..30));
    let mut rec = Record::default();
    let mut next = 0u64;
    for step in 0..30 {
        if fill_at == Some(step) {
            fs.set_capacity(Some(fs.used() + rng.gen_range(0..32 << 10)));
        }
        if step == free_at {
            fs.set_capacity(None);
        }
        if index_at == Some(step) {
            let fields = vec![("g".into(), Direction::Asc), ("n".into(), Direction::Desc)];
            let _ = db.create_index(COLL, "gn", fields);
        }
        if rng.gen_range(0..6) == 0 {
            // A worker completes a queued task (no writes of its own).
            if let Ok(tasks) = db.load_tasks(uid, None, 8) {
                if !tasks.is_empty() {
                    let (id, task) = tasks[rng.gen_range(0..tasks.len())].clone();
                    rec.completing.insert((id.seq, task.id));
                    let done = db
                        .complete_task(id, Vec::new(), Vec::new())
                        .map_err(|e| e.to_string())
                        .and_then(|t| t.wait().map_err(|e| e.to_string()));
                    if done.is_ok() {
                        rec.completed.insert(id);
                    }
                }
            }
            continue;
        }
        // One to four transactions in flight at once.
        let txns: Vec<Txn> = (0..rng.gen_range(1..=4))
            .map(|_| {
                next += 1;
                Txn::random(next, &mut rng)
            })
            .collect();
        let tickets: Vec<_> = txns
            .iter()
            .map(|t| db.submit(t.to_writes(), QueueFull::Block))
            .collect();
        for (txn, ticket) in txns.into_iter().zip(tickets) {
            rec.submitted.insert(txn.n, txn.clone());
            let outcome = match ticket {
                Err(refused) => Err(refused.error),
                Ok(t) => t.wait().map_err(herald_db::DbError::from),
            };
            let key = match outcome {
                Ok(outcome) => {
                    if let Some(old) = rec.acked.insert(outcome.seq, txn.clone()) {
                        return Err(format!(
                            "transactions {} and {} both acknowledged at seq {}",
                            old.n, txn.n, outcome.seq
                        ));
                    }
                    "ok".to_string()
                }
                Err(e) => e.code().to_string(),
            };
            *rec.outcomes.entry(key).or_default() += 1;
        }
    }
    let subscribers = check_subscribers(&db, &engine, &sinks, &rec)?;
    engine.stop();
    drop(engine);
    let tear = rng.gen_bool(0.5);
    let fs = if rng.gen_bool(0.3) {
        // A clean close (which may fail, after a fault) before the power goes.
        let _ = db.close();
        fs.reboot(tear)
    } else {
        let fs = fs.reboot(tear);
        drop(db);
        fs
    };
    // The operator frees space, if the disk was still full.
    fs.set_capacity(None);
    let db = open(&fs, &options).map_err(|e| format!("reopen after the reboot: {e}"))?;
    let history = check_reopened(&db, uid, &rec)?;
    check_history(&history, &subscribers)?;
    db.commit(vec![Write::Put {
        collection: COLL.into(),
        id: "after".into(),
        doc: json!({"n": 1}),
        if_version: None,
    }])
    .map_err(|e| format!("a write after the reopen: {e}"))?;
    // An interrupted index build resumes; the check skips a collection with one under way.
    let deadline = Instant::now() + Duration::from_secs(30);
    while db
        .list_indexes(COLL)
        .map_err(|e| e.to_string())?
        .composite
        .iter()
        .any(|i| i.state == IndexState::Building)
    {
        if Instant::now() > deadline {
            return Err("the index build did not finish after the reopen".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    db.close()
        .map_err(|e| format!("close after the reopen: {e}"))?;
    let report = herald_storage::check(
        Path::new(DIR),
        Arc::new(fs.clone()),
        &mut herald_db::check::check_database,
    )
    .map_err(|e| format!("check: {e}"))?;
    if !report.is_clean() {
        return Err(format!("check found {:?}", report.findings));
    }
    let counts: Vec<(Op, u64)> = OPS.iter().map(|op| (*op, fs.count(*op))).collect();
    let acked = rec.acked.len() as u64;
    Ok(Summary {
        text: format!(
            "{:?}, tasks completed {}, faults injected: {:?}, operations {counts:?}",
            rec.outcomes,
            rec.completed.len(),
            fs.injected()
        ),
        faulted: !fs.injected().is_empty(),
        acked,
        failed: rec.submitted.len() as u64 - acked,
        completed: rec.completed.len() as u64,
    })
}

/// Each subscriber's messages and query, for the checks against the log after the reboot.
type Subscribers = Vec<(Vec<Value>, usize)>;

/// The live checks, before the reboot (see the module docs).
fn check_subscribers(
    db: &Db,
    engine: &LiveEngine,
    sinks: &[(Arc<TestSink>, usize)],
    rec: &Record,
) -> Result<Subscribers, String> {
    let mut subscribers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !engine.is_idle() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    if !engine.is_idle() {
        return Err("the live engine did not catch up".into());
    }
    let acked_tx: BTreeSet<u64> = rec.acked.values().map(|t| t.n).collect();
    for (sink, qi) in sinks {
        let msgs = sink.msgs.lock().unwrap().clone();
        // A subscription the engine ended with an error (a read failed) is over: nothing more
        // to compare.
        if msgs.iter().any(|m| m["type"] == "error") {
            continue;
        }
        for m in &msgs {
            if m["type"] == "changes" {
                let seq = m["seq"].as_u64().unwrap();
                if !rec.acked.contains_key(&seq) {
                    return Err(format!(
                        "a subscriber received a batch at seq {seq}, which no acknowledged \
                         transaction has: {m}"
                    ));
                }
            }
        }
        let (list, seen) = client_state(&msgs);
        for doc in &list {
            if let Some(n) = doc.get("tx").and_then(Value::as_u64) {
                if !acked_tx.contains(&n) {
                    return Err(format!(
                        "a subscriber holds {doc} of unacknowledged transaction {n}"
                    ));
                }
            }
        }
        // The store refuses reads after an I/O error left a file unusable; the history check
        // after the reboot still compares every batch with the log's replay.
        if let Ok(outcome) = db.query(COLL, &query(*qi)) {
            compare(&list, seen, *qi, &outcome.docs)?;
        }
        subscribers.push((msgs, *qi));
    }
    Ok(subscribers)
}

/// Every list a subscriber held (after its initial result and after each change batch)
/// equals the query run over the commit log's replay at that batch's seq.
fn check_history(states: &History, subscribers: &Subscribers) -> Result<(), String> {
    let last = states.last().unwrap().0;
    for (msgs, qi) in subscribers {
        let q = query(*qi);
        for (i, m) in msgs.iter().enumerate() {
            if m["type"] != "initial" && m["type"] != "changes" {
                continue;
            }
            let (list, seq) = client_state(&msgs[..=i]);
            if seq > last {
                return Err(format!(
                    "a subscriber received seq {seq}, after the log's last record {last}"
                ));
            }
            let at = states.partition_point(|(s, _)| *s <= seq) - 1;
            let want = q.run(states[at].1.values());
            if list != want {
                return Err(format!(
                    "subscriber of {} after message {i} (seq {seq}) holds {list:?}, the log's \
                     replay gives {want:?}",
                    QUERIES[*qi]
                ));
            }
        }
    }
    Ok(())
}

fn query(qi: usize) -> Query {
    Query::parse(&serde_json::from_str(QUERIES[qi]).unwrap()).unwrap()
}

fn compare(list: &[Value], seen: u64, qi: usize, want: &[Value]) -> Result<(), String> {
    if list != want {
        return Err(format!(
            "subscriber of {} at seq {seen} holds {list:?}, the pull query gives {want:?}",
            QUERIES[qi]
        ));
    }
    Ok(())
}

/// The collection after each commit of the log, by seq (seq 0: empty).
type History = Vec<(u64, BTreeMap<String, Value>)>;

/// The checks after the reopen (see the module docs); returns the log's history.
fn check_reopened(db: &Db, uid: u64, rec: &Record) -> Result<History, String> {
    let seq = db.seq();
    let log = match db.commits_between(0, seq).map_err(|e| e.to_string())? {
        LogRead::Commits(c) => c,
        LogRead::Gone { after, floor } => {
            return Err(format!(
                "the commit log is gone after {after} (floor {floor:?})"
            ))
        }
    };
    // Every record is one submitted transaction, whole.
    let mut docs: BTreeMap<(String, String), Value> = BTreeMap::new();
    let mut logged: BTreeMap<u64, u64> = BTreeMap::new(); // seq -> transaction
    let mut expected_tasks: BTreeMap<(u64, String), String> = BTreeMap::new();
    let mut last = 0;
    for commit in &log {
        if commit.seq <= last {
            return Err(format!("log seq {} after {last}", commit.seq));
        }
        last = commit.seq;
        let marks: Vec<&herald_db::Change> = commit
            .changes
            .iter()
            .filter(|c| c.collection == MARKS)
            .collect();
        let [mark] = marks[..] else {
            return Err(format!(
                "log record {} has {} markers",
                commit.seq,
                marks.len()
            ));
        };
        let n: u64 = mark.id[1..].parse().map_err(|_| "marker id".to_string())?;
        let txn = rec
            .submitted
            .get(&n)
            .ok_or_else(|| format!("log record {} is of unknown transaction {n}", commit.seq))?;
        logged.insert(commit.seq, n);
        let writes: BTreeMap<&str, &Option<Value>> =
            txn.writes.iter().map(|(id, d)| (id.as_str(), d)).collect();
        for change in &commit.changes {
            let key = (change.collection.clone(), change.id.clone());
            if change.collection == COLL {
                match writes.get(change.id.as_str()) {
                    Some(doc) if **doc == without_id(&change.after) => {}
                    _ => {
                        return Err(format!(
                            "log record {} (transaction {n}) changes {} to {:?}, which the \
                             transaction did not write",
                            commit.seq, change.id, change.after
                        ))
                    }
                }
                let was = docs.get(&key).cloned();
                if was != change.before {
                    return Err(format!(
                        "log record {} has {} before as {:?}, replay has {was:?}",
                        commit.seq, change.id, change.before
                    ));
                }
                expected_tasks.insert(
                    (commit.seq, change.id.clone()),
                    change.op.as_str().to_string(),
                );
            }
            match &change.after {
                Some(doc) => docs.insert(key, doc.clone()),
                None => docs.remove(&key),
            };
        }
        for (id, doc) in &txn.writes {
            let logged_change = commit
                .changes
                .iter()
                .any(|c| c.collection == COLL && &c.id == id);
            // A delete of an absent document changes nothing; every put is a change.
            if doc.is_some() && !logged_change {
                return Err(format!(
                    "log record {} (transaction {n}) lacks its put of {id}",
                    commit.seq
                ));
            }
        }
    }
    if last != seq && !log.is_empty() {
        return Err(format!("the last log record is {last}, the seq {seq}"));
    }
    for (s, txn) in &rec.acked {
        if logged.get(s) != Some(&txn.n) {
            return Err(format!(
                "acknowledged transaction {} at seq {s} is not in the log (it has {:?})",
                txn.n,
                logged.get(s)
            ));
        }
    }
    // The documents are the log's replay.
    let mut keys: BTreeSet<(String, String)> = (0..IDS)
        .map(|i| (COLL.to_string(), format!("d{i}")))
        .collect();
    keys.extend(
        rec.submitted
            .values()
            .map(|t| (MARKS.to_string(), t.marker())),
    );
    for (c, id) in &keys {
        let found = db
            .get(c, id)
            .map_err(|e| format!("get {c}/{id}: {e}"))?
            .map(|d| d.doc);
        let want = docs.get(&(c.clone(), id.clone())).cloned();
        if found != want {
            return Err(format!(
                "{c}/{id} is {found:?}, the log's replay gives {want:?}"
            ));
        }
    }
    // The trigger's queue agrees with the log.
    let tasks = db
        .load_tasks(uid, None, 100_000)
        .map_err(|e| format!("load tasks: {e}"))?;
    let mut queued = BTreeSet::new();
    for (id, task) in &tasks {
        if rec.completed.contains(id) {
            return Err(format!("task {id:?} was completed and is queued again"));
        }
        let key = (id.seq, task.id.clone());
        match expected_tasks.get(&key) {
            Some(op) if *op == task.op => {}
            other => {
                return Err(format!(
                    "task {id:?} ({} {}) has no logged change (log has {other:?})",
                    task.op, task.id
                ))
            }
        }
        queued.insert(key);
    }
    for key in expected_tasks.keys() {
        if !queued.contains(key) && !rec.completing.contains(key) {
            return Err(format!(
                "the logged change of {} at seq {} has no task",
                key.1, key.0
            ));
        }
    }
    // The collection after each commit.
    let mut history: History = vec![(0, BTreeMap::new())];
    for commit in &log {
        let mut state = history.last().unwrap().1.clone();
        for change in commit.changes.iter().filter(|c| c.collection == COLL) {
            match &change.after {
                Some(doc) => state.insert(change.id.clone(), doc.clone()),
                None => state.remove(&change.id),
            };
        }
        history.push((commit.seq, state));
    }
    Ok(history)
}

/// A stored document as it was written: the database adds its `_id`.
fn without_id(doc: &Option<Value>) -> Option<Value> {
    let mut doc = doc.clone();
    if let Some(Value::Object(m)) = &mut doc {
        m.shift_remove("_id");
    }
    doc
}

/// Runs `seed` on its own thread, so that a hang fails the test with the seed.
fn run(seed: u64) -> Result<Summary, String> {
    run_schedule(
        format!("db-schedule-{seed}"),
        SCHEDULE_TIME_MAX,
        move || schedule(seed),
    )
}

#[test]
fn db_fault_schedules_keep_transactions_tasks_and_subscriptions_consistent() {
    let seeds = schedule_seeds(
        "db fault schedules",
        SCHEDULES_ENV,
        SEED_ENV,
        SCHEDULES_DEFAULT,
    );
    let started = Instant::now();
    let (mut passed, mut faulted, mut acked, mut failed, mut completed) = (0u64, 0, 0, 0, 0);
    for &seed in &seeds {
        match run(seed) {
            Ok(summary) => {
                passed += 1;
                faulted += u64::from(summary.faulted);
                acked += summary.acked;
                failed += summary.failed;
                completed += summary.completed;
                if seeds.len() == 1 {
                    eprintln!("seed {seed}: {}", summary.text);
                }
            }
            Err(err) => panic!(
                "db fault schedule {seed} failed: {err}\nrerun it: {SEED_ENV}={seed} cargo test \
                 -p herald-db --test it fault_schedules"
            ),
        }
    }
    eprintln!(
        "db fault schedules: {passed} passed in {:.1} s ({faulted} with an injected fault; \
         transactions: {acked} acknowledged, {failed} failed; {completed} tasks completed)",
        started.elapsed().as_secs_f64()
    );
}

/// An index build that meets a full disk waits and finishes once space returns, without a
/// restart (it used to give up, and the index stayed "building" until the next start).
#[test]
fn an_index_build_that_meets_a_full_disk_finishes_when_space_returns() {
    let fs = FaultFs::new(7);
    let mut options = options(&mut StdRng::seed_from_u64(7));
    options.store.checkpoint_interval_ms = 3_600_000;
    options.store.checkpoint_bytes = usize::MAX / 2;
    let db = open(&fs, &options).unwrap();
    for chunk in 0..10 {
        let writes = (0..200)
            .map(|i| Write::Put {
                collection: "big".into(),
                id: format!("d{chunk}-{i}"),
                doc: json!({"a": i % 7, "b": format!("{chunk}-{i}: a value long enough to fill")}),
                if_version: None,
            })
            .collect();
        db.commit(writes).unwrap();
    }
    // Room for the declaration, not for the build (its entries take about 100 KiB; the store
    // refuses writes once less than its reserve is free). The room the declaration needs
    // depends on the log's segments: grow it until the declaration fits (a refused one
    // changes nothing).
    let building = |db: &Db| {
        db.list_indexes("big")
            .unwrap()
            .composite
            .iter()
            .any(|i| i.state == IndexState::Building)
    };
    let fields = vec![
        ("a".to_string(), Direction::Asc),
        ("b".to_string(), Direction::Asc),
    ];
    let used = fs.used();
    for margin in 1u64.. {
        fs.set_capacity(Some(used + options.store.reserve_bytes + (margin << 12)));
        match db.create_index("big", "ab", fields.clone()) {
            Ok(_) => break,
            // A refused declaration is visible already, and built (`Db::create_index`).
            Err(e) if e.code() == "storage_full" && building(&db) => break,
            Err(e) if e.code() == "storage_full" && margin < 12 => {
                // Writes resume once the store sees room again.
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("declaring the index: {e}"),
        }
    }
    let tiny = || {
        vec![Write::Put {
            collection: "small".into(),
            id: "x".into(),
            doc: json!({}),
            if_version: None,
        }]
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match db.commit(tiny()) {
            Err(e) if e.code() == "storage_full" => break,
            _ if Instant::now() > deadline => panic!("the disk never filled up"),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        building(&db),
        "the build cannot have finished on a full disk"
    );
    fs.set_capacity(None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while building(&db) {
        assert!(
            Instant::now() < deadline,
            "the index is still building 30 s after space returned"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    db.commit(tiny()).unwrap();
    db.close().unwrap();
}
