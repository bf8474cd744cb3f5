//! Server crash test: a write acknowledged with 2xx survives SIGKILL of `herald serve`,
//! transactions are all-or-nothing across crashes, and the commit log has no gap, with `seq`
//! continuing after every restart.
//!
//! Each cycle starts the real binary on one data directory, runs concurrent writers over HTTP
//! for a random 20-300 ms, then SIGKILLs the server. Every writer owns its documents and issues
//! one request at a time, so the test knows each document's exact acknowledged state, and at
//! most one request per writer (the one in flight at the kill) is unknown. Writers mix
//!
//! - `PUT crash/w{W}-{k}` with `{"w","k","gen"}` (a few ids per writer, rewritten, so versions
//!   climb across cycles),
//! - `POST /v1/commit` setting `crash/t{W}-a`, `-b`, `-c` to `{"gen"}`, sometimes with an
//!   `$inc` of the writer's counter `crash/n{W}` in the same transaction,
//! - `PATCH crash/n{W}?upsert=true` with `{"$inc":{"n":1}}`.
//!
//! After the kill (and, in some cycles, a second server killed 0-40 ms into its start, possibly
//! while it repairs the crashed file) the test opens the directory with `herald_db::Db` and
//! checks that
//!
//! - every document is exactly in its last acknowledged state, or in the state of that writer's
//!   one in-flight request; anything older is a lost acknowledged write,
//! - the three transaction documents have the same version and gen (never torn), and a
//!   transaction that carried the counter `$inc` applied both or neither,
//! - the commit log holds every record from the last verified seq (or the oldest retained one)
//!   to `Db::seq()`, consecutive, each record's `seq` field matching its key, and reaches back at
//!   least the retention count; `Db::seq()` is at least every acknowledged seq, each
//!   acknowledged write's record lists exactly its changes, no two acknowledged writes share a
//!   seq, and the cycle added exactly one record per acknowledged (or applied in-flight) write,
//!   the last of which agrees with the stored document versions,
//! - after the restart `/v1/health` reports the same seq, and the next cycle's writes get seqs
//!   above it (checked at the next crash).
//!
//! The server runs with the default durability (fsync) and a small `--log-retention-count`, so
//! log pruning runs in most cycles and the data file stays small; at the end the whole retained
//! log is checked once more.
//!
//! `HERALD_CRASH_CYCLES` sets the number of cycles (default 50);
//! `HERALD_CRASH_SEED` replays a run's random choices (timings still vary). On failure the data
//! directory is kept and its path is in the message.
#![cfg(unix)]

use herald_db::{Db, DbOptions};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CYCLES_ENV: &str = "HERALD_CRASH_CYCLES";
const SEED_ENV: &str = "HERALD_CRASH_SEED";
const CYCLES_DEFAULT: u64 = 50;
/// Concurrent writers, each with one request in flight at a time.
const WRITERS: usize = 8;
/// `crash/w{W}-{k}` ids per writer; few, so each is rewritten often.
const PUT_IDS: u64 = 4;
/// How long the writers run before the kill: uniform in this range, in milliseconds.
const WRITE_MS: (u64, u64) = (20, 300);
/// One cycle in this many also starts a server on the crashed directory and kills it within
/// `STARTUP_KILL_MS_MAX`, before the check.
const STARTUP_KILL_ONE_IN: u64 = 6;
const STARTUP_KILL_MS_MAX: u64 = 40;
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const WRITERS_STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// The server's `--log-retention-count`. Small, so pruning runs (and is crashed) in most cycles,
/// and the data file stops growing: a 1000-cycle run with the default retention of a million
/// records would grow the file all along, and opening it, which the test does twice per cycle,
/// takes time in proportion.
const LOG_RETENTION: u64 = 2000;
const COLLECTION: &str = "crash";
/// Violations listed in a failure message (all are counted).
const VIOLATIONS_SHOWN: usize = 25;
/// Server stderr lines kept for failure messages.
const STDERR_LINES_MAX: usize = 200;

mod server;
use server::{Rng, Server};

/// A document's state as the test knows it: version (0 = absent), the value the test tracks
/// (`gen`, or `n` for the counter), and the seq that acknowledged it (0 when the state was read
/// by the last check rather than acknowledged in this cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    version: u64,
    value: u64,
    seq: u64,
}

impl Slot {
    fn next(self, value: u64, seq: u64) -> Slot {
        Slot {
            version: self.version + 1,
            value,
            seq,
        }
    }
}

const ABSENT: Slot = Slot {
    version: 0,
    value: 0,
    seq: 0,
};

/// Everything one writer knows about its documents.
#[derive(Debug, Clone)]
struct Model {
    w: usize,
    /// The last gen issued by this writer (gens are unique per writer across the run).
    gen: u64,
    puts: Vec<Slot>,
    /// `t{W}-a/b/c`, always written together.
    txn: Slot,
    /// `n{W}`, value = n.
    counter: Slot,
}

impl Model {
    fn new(w: usize) -> Model {
        Model {
            w,
            gen: 0,
            puts: vec![ABSENT; PUT_IDS as usize],
            txn: ABSENT,
            counter: ABSENT,
        }
    }
}

fn put_id(w: usize, k: u64) -> String {
    format!("w{w}-{k}")
}

fn txn_id(w: usize, part: &str) -> String {
    format!("t{w}-{part}")
}

fn counter_id(w: usize) -> String {
    format!("n{w}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Put { k: u64, gen: u64 },
    Txn { gen: u64, inc: bool },
    Inc,
}

/// An acknowledged write: its seq and the (id, version) changes its commit must record.
#[derive(Debug, Clone)]
struct Ack {
    w: usize,
    op: Op,
    seq: u64,
    changes: BTreeSet<(String, u64)>,
}

struct WriterOutcome {
    model: Model,
    acks: Vec<Ack>,
    /// The request in flight when the server died, with its error.
    maybe: Option<(Op, String)>,
    violations: Vec<String>,
}

fn number(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// The `(id, version)` of a write result or a commit-log change (`""`, 0 where missing).
fn id_version(v: &Value) -> (String, u64) {
    let id = v.get("id").and_then(Value::as_str).unwrap_or("");
    (id.to_string(), number(v, "version").unwrap_or(0))
}

/// Sends one op; `Err` is any failure to get a complete response (the op may or may not have
/// been applied).
async fn send(
    client: &reqwest::Client,
    base: &str,
    w: usize,
    op: Op,
) -> Result<(u16, Value), String> {
    let request = match op {
        Op::Put { k, gen } => client
            .put(format!("{base}/v1/docs/{COLLECTION}/{}", put_id(w, k)))
            .json(&json!({"w": w, "k": k, "gen": gen})),
        Op::Txn { gen, inc } => {
            let mut writes: Vec<Value> = ["a", "b", "c"]
                .iter()
                .map(|p| json!({"op": "put", "collection": COLLECTION, "id": txn_id(w, p), "doc": {"gen": gen}}))
                .collect();
            if inc {
                writes.push(
                    json!({"op": "update", "collection": COLLECTION, "id": counter_id(w),
                                   "update": {"$inc": {"n": 1}}, "upsert": true}),
                );
            }
            client
                .post(format!("{base}/v1/commit"))
                .json(&json!({ "writes": writes }))
        }
        Op::Inc => client
            .patch(format!(
                "{base}/v1/docs/{COLLECTION}/{}?upsert=true",
                counter_id(w)
            ))
            .json(&json!({"$inc": {"n": 1}})),
    };
    let response = request.send().await.map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let body = response
        .json::<Value>()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok((status, body))
}

/// Checks an acknowledged response against the model, advances the model and returns the ack.
fn acknowledge(model: &mut Model, op: Op, body: &Value) -> Result<Ack, String> {
    let w = model.w;
    let seq = number(body, "seq").ok_or("no seq in the response")?;
    let mut changes = BTreeSet::new();
    match op {
        Op::Put { k, gen } => {
            let id = put_id(w, k);
            let slot = &mut model.puts[k as usize];
            let version = number(body, "version").ok_or("no version in the response")?;
            if body.get("id") != Some(&json!(id)) || version != slot.version + 1 {
                return Err(format!(
                    "PUT {COLLECTION}/{id}: expected id {id} version {}, got {body}",
                    slot.version + 1
                ));
            }
            *slot = slot.next(gen, seq);
            changes.insert((id, version));
        }
        Op::Txn { gen, inc } => {
            let results = body
                .get("results")
                .and_then(Value::as_array)
                .ok_or("no results in the commit response")?;
            let mut expected = vec![
                (txn_id(w, "a"), model.txn.version + 1),
                (txn_id(w, "b"), model.txn.version + 1),
                (txn_id(w, "c"), model.txn.version + 1),
            ];
            if inc {
                expected.push((counter_id(w), model.counter.version + 1));
            }
            let got: Vec<(String, u64)> = results.iter().map(id_version).collect();
            if got != expected {
                return Err(format!(
                    "commit gen {gen}: expected (id, version) results {expected:?}, got {body}"
                ));
            }
            model.txn = model.txn.next(gen, seq);
            if inc {
                model.counter = model.counter.next(model.counter.value + 1, seq);
            }
            changes.extend(expected);
        }
        Op::Inc => {
            let id = counter_id(w);
            let version = number(body, "version").ok_or("no version in the response")?;
            let n = body.get("doc").and_then(|d| number(d, "n"));
            let want = model.counter.next(model.counter.value + 1, seq);
            if version != want.version || n != Some(want.value) {
                return Err(format!(
                    "PATCH {COLLECTION}/{id}: expected version {} n {}, got {body}",
                    want.version, want.value
                ));
            }
            model.counter = want;
            changes.insert((id, version));
        }
    }
    Ok(Ack {
        w,
        op,
        seq,
        changes,
    })
}

/// One writer: issues ops one at a time until `stop` or the first failed request.
async fn writer(
    client: reqwest::Client,
    base: String,
    mut model: Model,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
) -> WriterOutcome {
    let mut acks = Vec::new();
    let mut violations = Vec::new();
    let mut maybe = None;
    while !stop.load(Ordering::Acquire) {
        model.gen += 1;
        let gen = model.gen;
        let op = match rng.below(10) {
            0..=5 => Op::Put {
                k: rng.below(PUT_IDS),
                gen,
            },
            6 | 7 => Op::Txn {
                gen,
                inc: rng.below(3) == 0,
            },
            _ => Op::Inc,
        };
        match send(&client, &base, model.w, op).await {
            Ok((status, body)) if (200..300).contains(&status) => {
                match acknowledge(&mut model, op, &body) {
                    Ok(ack) => acks.push(ack),
                    Err(e) => {
                        violations.push(format!("writer {}: bad response: {e}", model.w));
                        break;
                    }
                }
            }
            Ok((status, body)) => {
                violations.push(format!(
                    "writer {}: {op:?} failed with {status}: {body}",
                    model.w
                ));
                break;
            }
            Err(e) => {
                maybe = Some((op, e));
                break;
            }
        }
    }
    WriterOutcome {
        model,
        acks,
        maybe,
        violations,
    }
}

/// What the checks carry from cycle to cycle.
struct LogState {
    /// The highest seq verified (in the log and by `/v1/health` after the restart).
    verified: u64,
    /// The oldest seq the log retained at the last check.
    first: Option<u64>,
}

/// Reads a document as (version, tracked field), (0, 0) when absent.
fn read_slot(db: &Db, id: &str, field: &str) -> Result<(u64, u64, Value), String> {
    match db.get(COLLECTION, id) {
        Ok(Some(d)) => {
            let value = number(&d.doc, field).unwrap_or(u64::MAX);
            Ok((d.version, value, d.doc))
        }
        Ok(None) => Ok((0, 0, Value::Null)),
        Err(e) => Err(format!("reading {COLLECTION}/{id}: {e}")),
    }
}

/// Compares a stored (version, value) with the acknowledged slot and the optional in-flight
/// outcome. Returns whether the in-flight write is the one found, or a violation.
fn judge(
    what: &str,
    found: (u64, u64),
    acked: Slot,
    in_flight: Option<(u64, u64)>,
    field: &str,
) -> Result<bool, String> {
    if found == (acked.version, acked.value) {
        return Ok(false);
    }
    if Some(found) == in_flight {
        return Ok(true);
    }
    let ack = if acked.version == 0 {
        "absent (never acknowledged)".to_string()
    } else if acked.seq == 0 {
        format!(
            "version {} {field} {} (state found by the previous check)",
            acked.version, acked.value
        )
    } else {
        format!(
            "version {} {field} {} (acknowledged at seq {})",
            acked.version, acked.value, acked.seq
        )
    };
    let alt = match in_flight {
        Some((v, x)) => format!(" or version {v} {field} {x} (the unacknowledged request)"),
        None => String::new(),
    };
    let kind = if found.0 < acked.version || (found.0 == acked.version && found.1 != acked.value) {
        "ACKNOWLEDGED WRITE LOST"
    } else {
        "unexpected state"
    };
    let found = match found {
        (0, _) => "the document absent".to_string(),
        (v, u64::MAX) => format!("version {v} without {field}"),
        (v, x) => format!("version {v} {field} {x}"),
    };
    Err(format!(
        "{kind}: {COLLECTION}/{what}: expected {ack}{alt}, found {found}"
    ))
}

/// Checks one writer's documents; reconciles its model with what is stored. Returns whether its
/// in-flight write was applied. Records the stored versions in `versions`.
fn check_writer(
    db: &Db,
    out: &mut WriterOutcome,
    versions: &mut HashMap<String, u64>,
    violations: &mut Vec<String>,
) -> Result<bool, String> {
    let m = &mut out.model;
    let w = m.w;
    let maybe = out.maybe.as_ref().map(|(op, _)| *op);
    let mut applied = false;

    for k in 0..PUT_IDS {
        let id = put_id(w, k);
        let (version, gen, doc) = read_slot(db, &id, "gen")?;
        versions.insert(id.clone(), version);
        let acked = m.puts[k as usize];
        let in_flight = match maybe {
            Some(Op::Put { k: mk, gen: g }) if mk == k => Some((acked.version + 1, g)),
            _ => None,
        };
        match judge(&id, (version, gen), acked, in_flight, "gen") {
            Ok(a) => applied |= a,
            Err(e) => violations.push(e),
        }
        if version > 0 && (number(&doc, "w") != Some(w as u64) || number(&doc, "k") != Some(k)) {
            violations.push(format!(
                "{COLLECTION}/{id}: stored body {doc} does not belong to writer {w} k {k}"
            ));
        }
        m.puts[k as usize] = Slot {
            version,
            value: gen,
            seq: 0,
        };
    }

    let mut parts = Vec::new();
    for p in ["a", "b", "c"] {
        let id = txn_id(w, p);
        let (version, gen, _) = read_slot(db, &id, "gen")?;
        versions.insert(id.clone(), version);
        parts.push((id, version, gen));
    }
    if parts
        .iter()
        .any(|(_, v, g)| (*v, *g) != (parts[0].1, parts[0].2))
    {
        violations.push(format!(
            "TORN TRANSACTION: writer {w}: (id, version, gen) = {parts:?}"
        ));
    }
    let txn_found = (parts[0].1, parts[0].2);
    let txn_in_flight = match maybe {
        Some(Op::Txn { gen, .. }) => Some((m.txn.version + 1, gen)),
        _ => None,
    };
    let txn_applied = match judge(
        &format!("{}/b/c", txn_id(w, "a")),
        txn_found,
        m.txn,
        txn_in_flight,
        "gen",
    ) {
        Ok(a) => a,
        Err(e) => {
            violations.push(e);
            false
        }
    };

    let cid = counter_id(w);
    let (cversion, n, _) = read_slot(db, &cid, "n")?;
    versions.insert(cid.clone(), cversion);
    let counter_in_flight = match maybe {
        Some(Op::Inc) | Some(Op::Txn { inc: true, .. }) => {
            Some((m.counter.version + 1, m.counter.value + 1))
        }
        _ => None,
    };
    let counter_applied = match judge(&cid, (cversion, n), m.counter, counter_in_flight, "n") {
        Ok(a) => a,
        Err(e) => {
            violations.push(e);
            false
        }
    };
    if let Some(Op::Txn { gen, inc: true }) = maybe {
        if txn_applied != counter_applied {
            violations.push(format!(
                "TORN TRANSACTION: writer {w}: the unacknowledged commit gen {gen} applied to \
                 {}/b/c: {txn_applied}, but its $inc of {COLLECTION}/{cid}: {counter_applied}",
                txn_id(w, "a")
            ));
        }
    }
    applied |= txn_applied || counter_applied;

    m.txn = Slot {
        version: txn_found.0,
        value: txn_found.1,
        seq: 0,
    };
    m.counter = Slot {
        version: cversion,
        value: n,
        seq: 0,
    };
    Ok(applied)
}

/// The checks after a crash, on the closed server's directory. Returns the violations.
fn check(dir: &Path, outcomes: &mut [WriterOutcome], state: &mut LogState) -> Vec<String> {
    let mut violations = Vec::new();
    let db = match Db::open(dir, DbOptions::default()) {
        Ok(db) => db,
        Err(e) => return vec![format!("cannot open the crashed database: {e}")],
    };
    if let Err(e) = check_open(&db, outcomes, state, &mut violations) {
        violations.push(e);
    }
    if let Err(e) = db.close() {
        violations.push(format!("closing the checked database: {e}"));
    }
    violations
}

fn check_open(
    db: &Db,
    outcomes: &mut [WriterOutcome],
    state: &mut LogState,
    violations: &mut Vec<String>,
) -> Result<(), String> {
    let before = state.verified;
    let hi = db.seq();

    // Documents: exact acknowledged state, or the one in-flight write per writer.
    let mut versions = HashMap::new();
    let mut applied_in_flight = 0;
    for out in outcomes.iter_mut() {
        if check_writer(db, out, &mut versions, violations)? {
            applied_in_flight += 1;
        }
    }

    // seq: never behind an acknowledgment or an earlier check. Listed first: it counts the
    // lost acknowledged writes, where the document checks name the documents.
    let acks: Vec<&Ack> = outcomes.iter().flat_map(|o| o.acks.iter()).collect();
    let lost: Vec<&&Ack> = acks.iter().filter(|a| a.seq > hi).collect();
    if let Some(top) = lost.iter().max_by_key(|a| a.seq) {
        violations.insert(
            0,
            format!(
                "ACKNOWLEDGED WRITES LOST: {} of the cycle's {} acknowledged writes have a seq above \
                 Db::seq() = {hi}, up to writer {} {:?} acknowledged at seq {}",
                lost.len(),
                acks.len(),
                top.w,
                top.op,
                top.seq
            ),
        );
    }
    if hi < before {
        violations.push(format!(
            "seq went back: Db::seq() is {hi}, an earlier check verified {before}"
        ));
        return Ok(());
    }

    // The log: the retained records reach back far enough, and every record from the last
    // verified seq (or the first retained one) to seq() is there.
    let first = log_first_checked(db, hi, violations)?;
    state.first = first;
    let records = match first {
        Some(f) => log_records(db, before.max(f), hi, violations)?,
        None => BTreeMap::new(),
    };

    // This cycle's records: one per acknowledged or applied in-flight write, nothing else.
    let added = hi - before;
    let expected = acks.len() as u64 + applied_in_flight;
    if added != expected {
        violations.push(format!(
            "the cycle added {added} commit-log records (seq {before} -> {hi}), but {} writes were \
             acknowledged and {applied_in_flight} unacknowledged ones applied",
            acks.len()
        ));
    }
    let mut seen: HashMap<u64, &Ack> = HashMap::new();
    for ack in &acks {
        if ack.seq <= before {
            violations.push(format!(
                "SEQ DID NOT CONTINUE: writer {} was acknowledged {:?} at seq {}, not above the \
                 seq {before} the restarted server started from",
                ack.w, ack.op, ack.seq
            ));
        }
        if let Some(other) = seen.insert(ack.seq, ack) {
            violations.push(format!(
                "two acknowledged writes share seq {}: writer {} {:?} and writer {} {:?}",
                ack.seq, other.w, other.op, ack.w, ack.op
            ));
        }
        let Some(record) = records.get(&ack.seq) else {
            continue; // reported above (seq beyond seq(), or a gap)
        };
        let logged: BTreeSet<(String, u64)> = record
            .get("changes")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter(|c| c.get("collection") == Some(&json!(COLLECTION)))
                    .map(id_version)
                    .collect()
            })
            .unwrap_or_default();
        if logged != ack.changes {
            violations.push(format!(
                "the log record at seq {} has changes {logged:?}, but writer {} was acknowledged \
                 {:?} with {:?}",
                ack.seq, ack.w, ack.op, ack.changes
            ));
        }
    }

    // The newest logged version of each document is the stored one.
    let mut last_logged: HashMap<String, u64> = HashMap::new();
    for (_, r) in records.range(before + 1..) {
        for c in r
            .get("changes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(id), Some(v)) = (c.get("id").and_then(Value::as_str), number(c, "version"))
            {
                last_logged.insert(id.to_string(), v);
            }
        }
    }
    for (id, v) in last_logged {
        let stored = versions.get(&id).copied();
        if stored != Some(v) {
            violations.push(format!(
                "the log's newest change to {COLLECTION}/{id} has version {v}, the store has {stored:?}"
            ));
        }
    }

    state.verified = hi;
    Ok(())
}

/// `Db::log_first()`, checked against seq(): the log is empty only when nothing was committed,
/// and pruning keeps at least the last `LOG_RETENTION` records.
fn log_first_checked(
    db: &Db,
    hi: u64,
    violations: &mut Vec<String>,
) -> Result<Option<u64>, String> {
    let first = db.log_first().map_err(|e| format!("log_first: {e}"))?;
    let keep_from = hi.saturating_sub(LOG_RETENTION) + 1;
    match first {
        None if hi > 0 => violations.push(format!("the commit log is empty but Db::seq() is {hi}")),
        Some(f) if hi == 0 || f > keep_from => violations.push(format!(
            "LOG GAP: the commit log starts at seq {f}, but with seq() {hi} and retention \
             {LOG_RETENTION} it must reach back to seq {keep_from}"
        )),
        _ => {}
    }
    Ok(first)
}

/// The commit-log records with seq in `[lo, hi]`, checked to be all there. Records come back in
/// key order, so with exactly hi-lo+1 of them the i-th has key lo+i, and its "seq" field must
/// say so.
fn log_records(
    db: &Db,
    lo: u64,
    hi: u64,
    violations: &mut Vec<String>,
) -> Result<BTreeMap<u64, Value>, String> {
    let mut records = BTreeMap::new();
    if hi < lo {
        return Ok(records);
    }
    let range = db
        .log_range(lo, hi)
        .map_err(|e| format!("log_range({lo}, {hi}): {e}"))?;
    if range.len() as u64 != hi - lo + 1 {
        let have: Vec<u64> = range.iter().filter_map(|r| number(r, "seq")).collect();
        let missing: Vec<u64> = (lo..=hi).filter(|s| !have.contains(s)).take(20).collect();
        violations.push(format!(
            "LOG GAP: log_range({lo}, {hi}) returned {} records, expected {}; missing seqs \
             (first 20): {missing:?}",
            range.len(),
            hi - lo + 1
        ));
        return Ok(records);
    }
    for (i, r) in range.into_iter().enumerate() {
        let key = lo + i as u64;
        if number(&r, "seq") != Some(key) {
            violations.push(format!(
                "the log record with key {key} says seq {:?}",
                r.get("seq")
            ));
        }
        records.insert(key, r);
    }
    Ok(records)
}

/// The whole retained log, once at the end: log_first() to seq(), all there and consecutive.
/// Returns the violations and the first retained seq.
fn check_whole_log(dir: &Path) -> (Vec<String>, Option<u64>) {
    let db = Db::open(dir, DbOptions::default()).expect("open the database for the final check");
    let hi = db.seq();
    let mut violations = Vec::new();
    let first = match log_first_checked(&db, hi, &mut violations) {
        Ok(first) => first,
        Err(e) => {
            violations.push(e);
            None
        }
    };
    if let Some(f) = first {
        if let Err(e) = log_records(&db, f, hi, &mut violations) {
            violations.push(e);
        }
    }
    if let Err(e) = db.close() {
        violations.push(format!("closing the database: {e}"));
    }
    (violations, first)
}

fn fail(cycle: u64, seed: u64, dir: tempfile::TempDir, violations: &[String]) -> ! {
    let path = dir.keep();
    let shown: Vec<&str> = violations
        .iter()
        .take(VIOLATIONS_SHOWN)
        .map(String::as_str)
        .collect();
    panic!(
        "crash test failed in cycle {cycle} ({SEED_ENV}={seed}, data kept in {}): {} violation(s):\n  {}{}",
        path.display(),
        violations.len(),
        shown.join("\n  "),
        if violations.len() > VIOLATIONS_SHOWN {
            format!("\n  ... and {} more", violations.len() - VIOLATIONS_SHOWN)
        } else {
            String::new()
        }
    );
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let cycles: u64 = std::env::var(CYCLES_ENV)
        .ok()
        .map(|s| s.parse().expect("HERALD_CRASH_CYCLES must be a number"))
        .unwrap_or(CYCLES_DEFAULT);
    let seed: u64 = std::env::var(SEED_ENV)
        .ok()
        .map(|s| s.parse().expect("HERALD_CRASH_SEED must be a number"))
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut rng = Rng::new(seed);
    let dir = tempfile::Builder::new()
        .prefix("herald-crash-")
        .tempdir()
        .expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("crash: {cycles} cycles, {WRITERS} writers, {SEED_ENV}={seed}");

    let started = Instant::now();
    let mut models: Vec<Model> = (0..WRITERS).map(Model::new).collect();
    let mut state = LogState {
        verified: 0,
        first: None,
    };
    let (mut acked, mut puts, mut txns, mut incs) = (0u64, 0u64, 0u64, 0u64);
    let (mut in_flight, mut startup_kills) = (0u64, 0u64);

    for cycle in 1..=cycles {
        let mut server = Server::spawn(dir.path());
        let addr = server.wait_listening();
        let base = format!("http://{addr}");
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("HTTP client");

        // The restarted server continues from exactly the seq the last check verified.
        let health = runtime.block_on(async {
            let r = client.get(format!("{base}/v1/health")).send().await?;
            r.json::<Value>().await
        });
        match health {
            Ok(h) if number(&h, "seq") == Some(state.verified) => {}
            other => fail(
                cycle,
                seed,
                dir,
                &[format!(
                    "SEQ DID NOT CONTINUE: after the restart /v1/health returned {other:?}, expected seq {}",
                    state.verified
                )],
            ),
        }

        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = models
            .iter()
            .map(|m| {
                runtime.spawn(writer(
                    client.clone(),
                    base.clone(),
                    m.clone(),
                    Rng::new(rng.next()),
                    Arc::clone(&stop),
                ))
            })
            .collect();
        let write_ms = WRITE_MS.0 + rng.below(WRITE_MS.1 - WRITE_MS.0 + 1);
        std::thread::sleep(Duration::from_millis(write_ms));
        stop.store(true, Ordering::Release);
        let mut violations: Vec<String> = server.kill().into_iter().collect();
        drop(server);

        let mut outcomes: Vec<WriterOutcome> = runtime.block_on(async {
            let all = futures_util::future::join_all(tasks);
            tokio::time::timeout(WRITERS_STOP_TIMEOUT, all)
                .await
                .expect("writers stop once the server is dead")
                .into_iter()
                .map(|r| r.expect("writer task"))
                .collect()
        });
        drop(client);
        for o in &mut outcomes {
            violations.append(&mut o.violations);
        }

        // Sometimes kill a second server early in its start, possibly while it repairs the
        // crashed file; the check below then sees what that left.
        if rng.below(STARTUP_KILL_ONE_IN) == 0 {
            startup_kills += 1;
            let mut early = Server::spawn(dir.path());
            std::thread::sleep(Duration::from_millis(rng.below(STARTUP_KILL_MS_MAX + 1)));
            violations.extend(early.kill());
        }

        violations.extend(check(dir.path(), &mut outcomes, &mut state));
        if !violations.is_empty() {
            fail(cycle, seed, dir, &violations);
        }

        for o in &outcomes {
            acked += o.acks.len() as u64;
            for a in &o.acks {
                match a.op {
                    Op::Put { .. } => puts += 1,
                    Op::Txn { .. } => txns += 1,
                    Op::Inc => incs += 1,
                }
            }
            in_flight += u64::from(o.maybe.is_some());
        }
        models = outcomes.into_iter().map(|o| o.model).collect();

        if cycle % 10 == 0 || cycle == cycles {
            println!(
                "crash: cycle {cycle}/{cycles}: {acked} writes acknowledged ({puts} puts, {txns} commits, \
                 {incs} patches), {in_flight} in flight at a kill, log seq {}..={}, {startup_kills} startup kills, {:.1}s",
                state.first.unwrap_or(0),
                state.verified,
                started.elapsed().as_secs_f64()
            );
        }
    }

    let (violations, first) = check_whole_log(dir.path());
    if !violations.is_empty() {
        fail(cycles, seed, dir, &violations);
    }
    println!(
        "crash: passed {cycles} cycles in {:.1}s: {acked} acknowledged writes all durable, \
         commit log gap-free from seq {} to {}",
        started.elapsed().as_secs_f64(),
        first.unwrap_or(0),
        state.verified
    );
}
