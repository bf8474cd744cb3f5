//! The log reader: follows the log topic from the node's saved position, runs every record
//! through the arbiter, applies the accepted batches of other primaries to the local store,
//! tells this node's waiting writes their verdict, promotes and demotes the node, claims the
//! primary role when the leadership group gave it the lead and the node has read the whole log,
//! and saves its position.
//!
//! # Position
//!
//! `cluster-position.json` in the data directory holds an offset of the log and the
//! arbiter's state just before it, saved only once the local store holds every batch accepted
//! before that offset. A restarted node resumes there; the batches between it and what the
//! store holds are skipped by replication index. A node without a position starts at offset 0.

use crate::arbiter::{LogState, Verdict};
use crate::record::Record;
use crate::shared::{Role, Shared};
use herald_db::DbError;
use herald_storage::{Applied, Ticket};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const POSITION_FILE: &str = "cluster-position.json";
/// Apply tickets in flight at most (the reader waits for the oldest beyond it).
const APPLYING_MAX: usize = 1024;
/// How often the position is saved and the log's end measured.
const TICK: Duration = Duration::from_millis(250);

/// A place in the log and what the log says before it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Position {
    pub(crate) offset: i64,
    pub(crate) log: LogState,
}

/// The saved position, whatever the store holds.
pub(crate) fn read_position(dir: &Path) -> Option<Position> {
    serde_json::from_slice(&std::fs::read(dir.join(POSITION_FILE)).ok()?).ok()
}

/// The saved position, if any and if the store holds what it says (a store restored or
/// wiped since has none).
pub(crate) fn load_position(dir: &Path, applied: u64) -> Option<(i64, LogState)> {
    let p = read_position(dir)?;
    (p.log.index <= applied).then_some((p.offset, p.log))
}

pub(crate) fn save_position(dir: &Path, offset: i64, log: &LogState) -> std::io::Result<()> {
    let tmp = dir.join(format!("{POSITION_FILE}.tmp"));
    let bytes = serde_json::to_vec(&Position {
        offset,
        log: log.clone(),
    })
    .expect("position JSON");
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(POSITION_FILE))
}

pub(crate) fn run(shared: Arc<Shared>) {
    while !shared.stopping() {
        match follow(&shared) {
            Ok(()) => return,
            Err(e) => {
                eprintln!("herald cluster: log reader: {e}; resuming from the saved position");
                shared.lock().kafka_error = Some(e);
                std::thread::sleep(Duration::from_millis(500));
                resync(&shared);
            }
        }
    }
}

/// Starts over from the saved position (or the beginning) with what the store holds.
fn resync(shared: &Shared) {
    let applied = shared.db().replication_index().unwrap_or(0);
    let (offset, log) = load_position(&shared.dir, applied).unwrap_or_default();
    let mut st = shared.lock();
    st.offset = offset;
    st.log = log;
    st.applied = applied;
    st.verdicts.clear();
    if st.role == Role::Primary {
        shared.step_down(&mut st, "the log reader started over", true);
    }
}

struct Follower {
    consumer: BaseConsumer,
    applying: VecDeque<(u64, Ticket<Applied, DbError>)>,
    /// Positions taken since the last save: (offset, state before it).
    marks: VecDeque<(i64, LogState)>,
    last_tick: Instant,
    last_claim_check: Instant,
}

fn follow(shared: &Arc<Shared>) -> Result<(), String> {
    let consumer: BaseConsumer = crate::kafka::reader(&shared.opts, "log")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let offset = shared.lock().offset;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&shared.topics.log, 0, Offset::Offset(offset))
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
    let mut f = Follower {
        consumer,
        applying: VecDeque::new(),
        marks: VecDeque::new(),
        last_tick: Instant::now() - TICK,
        last_claim_check: Instant::now() - TICK,
    };
    check_reachable(shared, &f.consumer)?;
    while !shared.stopping() {
        if f.last_tick.elapsed() >= TICK {
            f.last_tick = Instant::now();
            tick(shared, &mut f)?;
        }
        match f.consumer.poll(Duration::from_millis(50)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => {
                let mut st = shared.lock();
                st.high = st.high.max(st.offset);
                st.kafka_error = None;
            }
            Some(Err(e)) => {
                shared.lock().kafka_error = Some(e.to_string());
            }
            Some(Ok(message)) => {
                let offset = message.offset();
                let payload = message.payload().unwrap_or_default().to_vec();
                drop(message);
                handle(shared, &mut f, offset, &payload)?;
            }
        }
        reap(shared, &mut f, false)?;
    }
    reap(shared, &mut f, true)?;
    save(shared, &mut f);
    Ok(())
}

/// Fails if the position is no longer in the log (retention removed it): the node must
/// bootstrap from a snapshot.
fn check_reachable(shared: &Shared, consumer: &BaseConsumer) -> Result<(), String> {
    let (low, high) = consumer
        .fetch_watermarks(&shared.topics.log, 0, Duration::from_secs(5))
        .map_err(|e| format!("reading the log's bounds: {e}"))?;
    let mut st = shared.lock();
    st.high = high;
    if st.offset < low {
        return Err(format!(
            "the log starts at offset {low}, after this node's position {}: this node must \
             bootstrap from a snapshot (herald serve --cluster ... --bootstrap-from <node url>)",
            st.offset
        ));
    }
    Ok(())
}

fn handle(
    shared: &Arc<Shared>,
    f: &mut Follower,
    offset: i64,
    payload: &[u8],
) -> Result<(), String> {
    let record = match Record::decode(payload) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("herald cluster: offset {offset} of the log: {e}; skipped");
            shared.lock().offset = offset + 1;
            return Ok(());
        }
    };
    let me = shared.opts.node_id.as_str();
    let mut st = shared.lock();
    if offset < st.offset {
        return Ok(()); // a redelivery after a seek
    }
    if f.marks.back().is_none_or(|(o, _)| offset - o >= 256) {
        f.marks.push_back((offset, st.log.clone()));
    }
    let mine_before = st.role == Role::Primary;
    let my_epoch = st.log.epoch;
    let verdict = st.log.step(&record);
    st.offset = offset + 1;
    st.high = st.high.max(st.offset);
    let mut apply = None;
    match (&record, verdict) {
        (Record::Claim { epoch, node, .. }, Verdict::Elected) => {
            let pending = st.claim_pending.take_if(|(e, _)| e == epoch);
            if node == me && pending.is_some() {
                eprintln!("herald cluster: node {me} is the primary of epoch {epoch}");
                st.role = Role::Primary;
                st.verdicts.clear();
                shared.changed.notify_all();
                let s = shared.clone();
                std::thread::spawn(move || {
                    if let Err(e) = s.db().promoted() {
                        eprintln!("herald cluster: taking over as primary: {e}");
                    }
                });
            } else {
                if mine_before {
                    st.claim_after = Instant::now() + shared.opts.session_timeout;
                    shared.step_down(&mut st, &format!("node {node} claimed epoch {epoch}"), true);
                }
                st.role = Role::Follower;
                shared.changed.notify_all();
            }
        }
        (Record::Claim { epoch, node, .. }, Verdict::StaleClaim) => {
            if node == me && st.claim_pending.is_some_and(|(e, _)| e == *epoch) {
                st.claim_pending = None;
            }
        }
        (
            Record::Data {
                epoch,
                index,
                batch,
            },
            Verdict::Accepted,
        ) => {
            if mine_before && *epoch == my_epoch {
                // Our own write: the store has it pending; its writer waits for this.
                st.verdicts.insert(*index, true);
                st.applied = st.applied.max(*index);
                shared.changed.notify_all();
            } else if *index > st.applied {
                if *index != st.applied + 1 {
                    return Err(format!(
                        "the log's batch {index} follows this store's batch {}; the store lost \
                         batches it had applied (an unsynced tail?)",
                        st.applied
                    ));
                }
                st.applied = *index;
                apply = Some((*index, batch.clone()));
            }
        }
        (Record::Data { epoch, index, .. }, Verdict::StaleEpoch | Verdict::OutOfOrder) => {
            if mine_before && *epoch == my_epoch && *index > st.log.index {
                st.verdicts.insert(*index, false);
                shared.changed.notify_all();
            }
        }
        (_, v) => unreachable!("verdict {v:?} for {record:?}"),
    }
    drop(st);
    if let Some((index, batch)) = apply {
        let ticket = shared
            .db()
            .apply_replicated(batch)
            .map_err(|e| format!("applying batch {index}: {e}"))?;
        f.applying.push_back((index, ticket));
    }
    Ok(())
}

/// Collects finished apply tickets (all of them when `all`, else the done ones, waiting for
/// the oldest beyond `APPLYING_MAX`).
fn reap(shared: &Shared, f: &mut Follower, all: bool) -> Result<(), String> {
    while let Some((index, ticket)) = f.applying.front() {
        let wait = if all || f.applying.len() > APPLYING_MAX {
            shared.opts.write_timeout * 4
        } else {
            Duration::ZERO
        };
        let Some(reply) = ticket.wait_timeout(wait) else {
            if wait.is_zero() {
                return Ok(());
            }
            return Err(format!("batch {index} was not applied in time"));
        };
        let index = *index;
        f.applying.pop_front();
        if let Err(e) = reply {
            return Err(format!("applying batch {index}: {e}"));
        }
    }
    Ok(())
}

fn tick(shared: &Arc<Shared>, f: &mut Follower) -> Result<(), String> {
    {
        // Where the reader is now: saved once the store holds everything before it.
        let st = shared.lock();
        if f.marks.back().is_none_or(|(o, _)| *o < st.offset) {
            f.marks.push_back((st.offset, st.log.clone()));
        }
    }
    save(shared, f);
    maybe_claim(shared, f);
    Ok(())
}

/// Saves the newest mark the store holds everything before.
fn save(shared: &Shared, f: &mut Follower) {
    let Ok(held) = shared.db().replication_index() else {
        return;
    };
    let mut best = None;
    while f.marks.front().is_some_and(|(_, log)| log.index <= held) {
        best = f.marks.pop_front();
    }
    if let Some((offset, log)) = best {
        if let Err(e) = save_position(&shared.dir, offset, &log) {
            eprintln!("herald cluster: saving the log position: {e}");
        }
        // Keep it as the oldest mark, so a later save never goes back.
        f.marks.push_front((offset, log));
    }
}

/// Claims the primary role when this node holds the lead, is not the primary, and has read
/// the log to its end.
fn maybe_claim(shared: &Arc<Shared>, f: &mut Follower) {
    {
        let mut st = shared.lock();
        if let Some((_, at)) = st.claim_pending {
            if at.elapsed() > shared.opts.write_timeout * 2 {
                st.claim_pending = None; // lost; the next check writes another
            } else {
                return;
            }
        }
        if !st.holds_lead || st.role == Role::Primary || Instant::now() < st.claim_after {
            return;
        }
        // The lead moved (a node joined or left) but the primary is alive: keep it.
        let alive = st.log.primary.as_ref().is_some_and(|p| {
            p.node != shared.opts.node_id
                && crate::members::primary_alive(
                    shared,
                    &p.node,
                    st.log.epoch,
                    shared.opts.session_timeout,
                )
        });
        if alive {
            return;
        }
    }
    if f.last_claim_check.elapsed() < Duration::from_millis(100) {
        return;
    }
    f.last_claim_check = Instant::now();
    let high = match f
        .consumer
        .fetch_watermarks(&shared.topics.log, 0, Duration::from_secs(2))
    {
        Ok((_, high)) => high,
        Err(e) => {
            shared.lock().kafka_error = Some(e.to_string());
            return;
        }
    };
    let epoch = {
        let mut st = shared.lock();
        st.high = st.high.max(high);
        if st.offset < high || st.claim_pending.is_some() || st.role == Role::Primary {
            return;
        }
        let epoch = st.log.epoch + 1;
        st.claim_pending = Some((epoch, Instant::now()));
        epoch
    };
    let claim = Record::Claim {
        epoch,
        node: shared.opts.node_id.clone(),
        url: shared.opts.url.clone(),
    };
    if let Err(e) = shared.produce(&shared.topics.log, None, &claim.encode()) {
        let mut st = shared.lock();
        st.claim_pending = None;
        st.kafka_error = Some(e);
    }
}
