//! Client mutation ids: the durable memory that makes a retried commit apply exactly once.
//!
//! A client (the SDK's offline queue) gives each commit a `mutationId`. The commit's job first
//! looks the id up; if it is known, the job applies nothing and answers with the recorded
//! outcome (its seq and per-write results). Otherwise the writes are applied and the id is
//! recorded in the same storage transaction, so "applied" and "remembered" are one fact across
//! crashes. Only successful commits are recorded: a failed commit applied nothing, and its retry
//! is judged afresh.
//!
//! Layout, in the `meta` table (see `layout.rs` for the rest):
//! - `mutation/id/<id>` -> `ordinal (u64 BE) ++ ts ms (u64 BE) ++ {"seq","results"}` JSON
//! - `mutation/ord/<ordinal (u64 BE)>` -> `<id>`: recording order, for pruning oldest first
//! - `mutation/next` -> the next ordinal
//!
//! The table is bounded: at most `retained_max` ids and none older than `retention_ms`; each
//! commit prunes at most [`MUTATION_PRUNE_PER_COMMIT_MAX`] of the oldest. A client must not
//! retry a write later than the retention age (the SDK retries within seconds or minutes).

use crate::error::DbError;
use crate::txn::{ChangeOp, WriteResult};
use herald_storage::{Table, WriteTxn};
use serde::{Deserialize, Serialize};

/// Longest accepted mutation id, in bytes.
pub const MUTATION_ID_BYTES_MAX: usize = 128;
/// Mutation ids remembered by default.
pub const MUTATIONS_RETAINED_MAX: u64 = 100_000;
/// How long a mutation id is remembered by default (24 hours).
pub const MUTATION_RETENTION_MS: u64 = 24 * 3600 * 1000;
/// Most records pruned by one commit (keeps commits short).
pub const MUTATION_PRUNE_PER_COMMIT_MAX: usize = 64;

const ID_PREFIX: &[u8] = b"mutation/id/";
const ORD_PREFIX: &[u8] = b"mutation/ord/";
const NEXT_KEY: &[u8] = b"mutation/next";

/// Retention of the mutation-id table.
#[derive(Debug, Clone, Copy)]
pub struct MutationRetention {
    pub retained_max: u64,
    pub retention_ms: u64,
}

impl Default for MutationRetention {
    fn default() -> Self {
        MutationRetention {
            retained_max: MUTATIONS_RETAINED_MAX,
            retention_ms: MUTATION_RETENTION_MS,
        }
    }
}

/// Checks a client-supplied mutation id: 1 to 128 bytes, no control characters.
pub fn check_mutation_id(id: &str) -> Result<(), DbError> {
    if id.is_empty() || id.len() > MUTATION_ID_BYTES_MAX {
        return Err(DbError::BadRequest(format!(
            "mutationId must be 1 to {MUTATION_ID_BYTES_MAX} bytes"
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(DbError::BadRequest(
            "mutationId cannot contain control characters".into(),
        ));
    }
    Ok(())
}

fn id_key(id: &str) -> Vec<u8> {
    let mut k = ID_PREFIX.to_vec();
    k.extend_from_slice(id.as_bytes());
    k
}

fn ord_key(ordinal: u64) -> Vec<u8> {
    let mut k = ORD_PREFIX.to_vec();
    k.extend_from_slice(&ordinal.to_be_bytes());
    k
}

/// The outcome stored under a mutation id (the JSON after its ordinal and time): the commit's
/// seq and, per write, what it did. A storage format: the members and their order are what is
/// on disk.
#[derive(Debug, Serialize, Deserialize)]
struct StoredOutcome {
    seq: u64,
    results: Vec<StoredResult>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredResult {
    /// `null` for a delete of a missing document.
    op: Option<ChangeOp>,
    collection: String,
    id: String,
    version: u64,
}

impl StoredOutcome {
    fn of(seq: u64, results: &[WriteResult]) -> StoredOutcome {
        StoredOutcome {
            seq,
            results: results
                .iter()
                .map(|r| StoredResult {
                    op: r.op,
                    collection: r.collection.clone(),
                    id: r.id.clone(),
                    version: r.version,
                })
                .collect(),
        }
    }
}

/// The outcome recorded for a known mutation id: its seq and results (without documents).
pub(crate) fn lookup(
    txn: &WriteTxn<'_>,
    id: &str,
) -> Result<Option<(u64, Vec<WriteResult>)>, DbError> {
    let Some(bytes) = txn.get(Table::Meta, &id_key(id))? else {
        return Ok(None);
    };
    let body = bytes
        .get(16..)
        .ok_or_else(|| DbError::Corrupt("mutation record too short".into()))?;
    let stored: StoredOutcome = serde_json::from_slice(body)
        .map_err(|e| DbError::Corrupt(format!("mutation record: {e}")))?;
    let results = stored
        .results
        .into_iter()
        .map(|r| WriteResult {
            op: r.op,
            collection: r.collection,
            id: r.id,
            version: r.version,
            record: None,
        })
        .collect();
    Ok(Some((stored.seq, results)))
}

/// Records `id` with the commit's outcome and prunes the oldest records beyond retention.
pub(crate) fn record(
    txn: &mut WriteTxn<'_>,
    id: &str,
    seq: u64,
    results: &[WriteResult],
    now_ms: u64,
    retention: &MutationRetention,
) -> Result<(), DbError> {
    let ordinal = txn.get_u64(Table::Meta, NEXT_KEY)?.unwrap_or(0);
    let mut value = ordinal.to_be_bytes().to_vec();
    value.extend_from_slice(&now_ms.to_be_bytes());
    serde_json::to_writer(&mut value, &StoredOutcome::of(seq, results)).expect("JSON");
    txn.put(Table::Meta, id_key(id), value)?;
    txn.put(Table::Meta, ord_key(ordinal), id.as_bytes().to_vec())?;
    txn.put_u64(Table::Meta, NEXT_KEY.to_vec(), ordinal + 1)?;
    prune(txn, ordinal + 1, now_ms, retention)
}

fn prune(
    txn: &mut WriteTxn<'_>,
    next: u64,
    now_ms: u64,
    retention: &MutationRetention,
) -> Result<(), DbError> {
    let mut doomed = Vec::new();
    for entry in txn.prefix(Table::Meta, ORD_PREFIX)? {
        let (k, id) = entry?;
        let ordinal = k
            .get(ORD_PREFIX.len()..)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| DbError::Corrupt("mutation ordinal key".into()))?;
        let too_many = next - ordinal > retention.retained_max;
        let id = String::from_utf8(id).map_err(|_| DbError::Corrupt("mutation id".into()))?;
        let too_old = !too_many && {
            let ts = txn
                .get(Table::Meta, &id_key(&id))?
                .and_then(|b| {
                    b.get(8..16)
                        .map(|t| u64::from_be_bytes(t.try_into().expect("8")))
                })
                .unwrap_or(0);
            now_ms.saturating_sub(ts) > retention.retention_ms
        };
        if !(too_many || too_old) || doomed.len() >= MUTATION_PRUNE_PER_COMMIT_MAX {
            break;
        }
        doomed.push((k, id));
    }
    for (k, id) in doomed {
        txn.delete(Table::Meta, k);
        txn.delete(Table::Meta, id_key(&id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, DbOptions, Durability, QueueFull, Transaction, Write};
    use herald_query::Update;
    use serde_json::{json, Value};

    fn open(dir: &std::path::Path, retention: MutationRetention) -> Db {
        let options = DbOptions {
            durability: Durability::NoSync,
            mutations: retention,
            ..DbOptions::default()
        };
        Db::open(dir, options).unwrap()
    }

    fn inc(id: &str) -> Vec<Write> {
        vec![Write::Update {
            collection: "c".into(),
            id: id.into(),
            update: Update::parse(&json!({"$inc": {"n": 1}})).unwrap(),
            upsert: true,
            if_version: None,
        }]
    }

    fn send(db: &Db, writes: Vec<Write>, id: &str) -> Result<crate::CommitOutcome, DbError> {
        let txn = Transaction::new(writes).mutation_id(Some(id.into()));
        Ok(db.submit(txn, QueueFull::Refuse)?.wait()?)
    }

    fn n(db: &Db, id: &str) -> Value {
        db.get("c", id)
            .unwrap()
            .map_or(Value::Null, |d| d.doc["n"].clone())
    }

    #[test]
    fn a_retried_mutation_applies_once_and_returns_the_original_result() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), MutationRetention::default());
        let first = send(&db, inc("a"), "m1").unwrap();
        assert!(!first.replayed);
        let again = send(&db, inc("a"), "m1").unwrap();
        assert!(again.replayed);
        assert_eq!(again.seq, first.seq);
        assert_eq!(again.results.len(), 1);
        assert_eq!(again.results[0].version, 1);
        assert_eq!(again.results[0].op, Some(ChangeOp::Insert));
        assert_eq!(n(&db, "a"), json!(1));
        assert_eq!(db.seq(), first.seq, "a replay takes no seq");
        // Another id applies.
        send(&db, inc("a"), "m2").unwrap();
        assert_eq!(n(&db, "a"), json!(2));
        // Remembered across a restart.
        db.close().unwrap();
        let db = open(dir.path(), MutationRetention::default());
        assert!(send(&db, inc("a"), "m1").unwrap().replayed);
        assert!(send(&db, inc("a"), "m2").unwrap().replayed);
        assert_eq!(n(&db, "a"), json!(2));
    }

    #[test]
    fn the_same_id_twice_in_one_batch_applies_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), MutationRetention::default());
        let tickets: Vec<_> = (0..4)
            .map(|_| {
                let txn = Transaction::new(inc("b")).mutation_id(Some("same".into()));
                db.submit(txn, QueueFull::Refuse).unwrap()
            })
            .collect();
        let outcomes: Vec<_> = tickets.into_iter().map(|t| t.wait().unwrap()).collect();
        assert_eq!(outcomes.iter().filter(|o| !o.replayed).count(), 1);
        assert!(outcomes.iter().all(|o| o.seq == outcomes[0].seq));
        assert_eq!(n(&db, "b"), json!(1));
    }

    #[test]
    fn a_failed_commit_is_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), MutationRetention::default());
        let conflict = vec![Write::Delete {
            collection: "c".into(),
            id: "x".into(),
            if_version: Some(3),
        }];
        let err = send(&db, conflict, "m").unwrap_err();
        assert_eq!(err.code(), "version_conflict");
        let ok = send(&db, inc("x"), "m").unwrap();
        assert!(!ok.replayed);
        assert_eq!(n(&db, "x"), json!(1));
    }

    #[test]
    fn retention_bounds_the_table_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let retention = MutationRetention {
            retained_max: 3,
            retention_ms: MUTATION_RETENTION_MS,
        };
        let db = open(dir.path(), retention);
        for i in 0..6 {
            send(&db, inc("r"), &format!("m{i}")).unwrap();
        }
        assert_eq!(n(&db, "r"), json!(6));
        // The three newest are remembered; the oldest are forgotten and apply again.
        for i in 3..6 {
            assert!(
                send(&db, inc("r"), &format!("m{i}")).unwrap().replayed,
                "m{i}"
            );
        }
        assert!(!send(&db, inc("r"), "m0").unwrap().replayed);
        assert_eq!(n(&db, "r"), json!(7));
        // At most `retained_max` records exist.
        let records = db
            .inner
            .store
            .read()
            .unwrap()
            .prefix(Table::Meta, ID_PREFIX)
            .unwrap()
            .count();
        assert_eq!(records, 3);
    }

    #[test]
    fn age_retention_forgets_old_ids() {
        let dir = tempfile::tempdir().unwrap();
        let clock = crate::Clock::manual(1_000);
        let options = DbOptions {
            durability: Durability::NoSync,
            mutations: MutationRetention {
                retained_max: 100,
                retention_ms: 0,
            },
            clock: clock.clone(),
            ..DbOptions::default()
        };
        let db = Db::open(dir.path(), options).unwrap();
        send(&db, inc("t"), "old").unwrap();
        clock.advance(std::time::Duration::from_millis(1));
        // This commit prunes "old" (older than 0 ms) and records "new".
        send(&db, inc("t"), "new").unwrap();
        assert!(!send(&db, inc("t"), "old").unwrap().replayed);
        assert_eq!(n(&db, "t"), json!(3));
    }

    #[test]
    fn bad_ids_are_refused() {
        assert!(check_mutation_id("").is_err());
        assert!(check_mutation_id(&"x".repeat(MUTATION_ID_BYTES_MAX + 1)).is_err());
        assert!(check_mutation_id("a\nb").is_err());
        assert!(check_mutation_id(&"x".repeat(MUTATION_ID_BYTES_MAX)).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), MutationRetention::default());
        let txn = Transaction::new(inc("z")).mutation_id(Some(String::new()));
        let err = db.submit(txn, QueueFull::Refuse).err().unwrap();
        assert_eq!(err.error.code(), "bad_request");
        assert!(
            err.writes.is_none(),
            "an invalid transaction is not handed back"
        );
        assert_eq!(n(&db, "z"), Value::Null);
    }

    /// The stored outcome is byte for byte what the `json!` form wrote before it was a struct
    /// (it is on disk).
    #[test]
    fn the_stored_outcome_format_is_unchanged() {
        let results = vec![
            WriteResult {
                collection: "c/x\"y".into(),
                id: "a".into(),
                op: Some(ChangeOp::Update),
                version: 3,
                record: Some(vec![0; 9]),
            },
            WriteResult {
                collection: "c".into(),
                id: "é".into(),
                op: None,
                version: 0,
                record: None,
            },
        ];
        let old: Vec<Value> = results
            .iter()
            .map(|r| {
                json!({"op": r.op.map(ChangeOp::as_str), "collection": r.collection, "id": r.id,
                       "version": r.version})
            })
            .collect();
        let expected = serde_json::to_vec(&json!({"seq": 12, "results": old})).unwrap();
        let stored = serde_json::to_vec(&StoredOutcome::of(12, &results)).unwrap();
        assert_eq!(
            String::from_utf8(stored.clone()).unwrap(),
            String::from_utf8(expected).unwrap()
        );
        let back: StoredOutcome = serde_json::from_slice(&stored).unwrap();
        assert_eq!(back.seq, 12);
        assert_eq!(back.results[0].op, Some(ChangeOp::Update));
        assert_eq!(back.results[1].op, None);
    }
}
