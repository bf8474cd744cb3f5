//! Pruning the commit log to its retention (a count of records and an age), a bounded number
//! of records per commit, starting where the last prune stopped.

use super::codec::record_ts;
use super::log_key;
use crate::error::DbError;
use herald_storage::{Table, WriteTxn};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// Most commit-log records deleted by one commit when pruning (keeps commits short).
pub const LOG_PRUNE_PER_COMMIT_MAX: usize = 64;

/// Once in this many commits the log pruning scans from the log's start (see `prune`).
/// Rare: such a scan passes every record deleted since the last checkpoint in every in-memory
/// layer, which is slow once a fan-out has made a million commits.
pub const LOG_PRUNE_RESCAN_EVERY: u64 = 1 << 20;

/// How much of the log is kept, and where the next prune starts.
#[derive(Debug, Clone)]
pub struct LogRetention {
    /// Records kept, at most (at least 1).
    pub count: u64,
    /// Records older than this are pruned.
    pub age_ms: u64,
    /// Where [`prune`] starts looking. Only the writer thread uses it.
    pub hint: Arc<LogPruneHint>,
}

/// What the last `prune` learned about the oldest retained commit-log record.
#[derive(Debug)]
pub struct LogPruneHint {
    /// The seq at which the next prune starts: the oldest record it last saw kept, or one past
    /// the last it deleted.
    from: AtomicU64,
    /// A commit time no later than that of the record at `from` (and so, commit times never
    /// going back, of every later record) when the last prune stopped at it because it was
    /// kept, else `u64::MAX`. While that time is within the retention age, no record from
    /// `from` on is too old, so a commit can skip the scan and the prune need not read the
    /// record it stops at. (Should the clock go back, a record is kept longer, never pruned
    /// early.)
    kept_ts: AtomicU64,
    /// Set when a job failed after its prune moved the hint (its deletes were undone, so
    /// records below `from` may remain): the next prune scans from the log's start.
    rescan: AtomicBool,
}

impl Default for LogPruneHint {
    fn default() -> LogPruneHint {
        LogPruneHint {
            from: 0.into(),
            kept_ts: u64::MAX.into(),
            rescan: false.into(),
        }
    }
}

impl LogPruneHint {
    /// Makes the next prune scan from the log's start: for a job that fails after
    /// the write path pruned (its undone deletes may leave records below the hint).
    pub(crate) fn request_rescan(&self) {
        self.rescan.store(true, Relaxed);
    }

    /// Moves the hint past records without deleting them, as a job that pruned and then
    /// failed leaves it.
    #[cfg(test)]
    pub(crate) fn skip_ahead(&self, n: u64) {
        self.from.fetch_add(n, Relaxed);
        self.kept_ts.store(u64::MAX, Relaxed);
    }
}

/// Deletes log records beyond the retention count or age, a bounded number per commit.
///
/// It starts at `hint.from`, not at the log's first key: a scan from the start passes every
/// record deleted since the last checkpoint (deletes stay in the in-memory layers until then),
/// and once the log reached its retention count that made every commit slower as the writer
/// fell behind. A hint
/// advanced by a commit that then failed could leave records behind, so after such a failure
/// (`LogPruneHint::request_rescan`), while there is no hint yet, and once every
/// `LOG_PRUNE_RESCAN_EVERY` commits (for a job that panicked) the scan starts at the beginning.
///
/// With a hint, no range is scanned at all: records are keyed by their seq, one per commit, so
/// those at least the retention count old are deleted by key without being read, and the first
/// one younger than that is read by key only to check its age. (A range scan merges every
/// in-memory layer; once past the retention count it would run on every commit and take most
/// of a small commit's time on the writer.)
pub(crate) fn prune(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    now_ms: u64,
    s: &LogRetention,
) -> Result<(), DbError> {
    let prunable =
        |old_seq: u64, ts: u64| seq - old_seq >= s.count || now_ms.saturating_sub(ts) > s.age_ms;
    let rescan = s.hint.rescan.swap(false, Relaxed) || seq.is_multiple_of(LOG_PRUNE_RESCAN_EVERY);
    let from = s.hint.from.load(Relaxed).min(seq);
    if rescan || from == 0 {
        return prune_scan(txn, seq, s, prunable);
    }
    // The record the last prune kept is still kept: nothing after it can go either.
    let kept_ts = s.hint.kept_ts.load(Relaxed);
    if kept_ts != u64::MAX && from < seq && !prunable(from, kept_ts) {
        return Ok(());
    }
    let mut next = from;
    let mut next_kept_ts = u64::MAX;
    let mut deleted = 0;
    while next < seq && deleted < LOG_PRUNE_PER_COMMIT_MAX {
        if seq - next < s.count {
            // Within the count: kept unless too old. Once the log holds its retention count,
            // every commit deletes the oldest record and stops at the next one: it is not read
            // (a read per commit is a measurable share of a core at high commit rates) while
            // `kept_ts`, a lower bound of its commit time, says it is young enough.
            if kept_ts != u64::MAX && !prunable(next, kept_ts) {
                next_kept_ts = kept_ts;
                break;
            }
            let key = log_key(next);
            // No record under this seq (the hint was behind): nothing to delete.
            if let Some(v) = txn.get(Table::Log, &key)? {
                let ts = record_ts(&v);
                if !prunable(next, ts) {
                    next_kept_ts = ts;
                    break;
                }
                txn.delete(Table::Log, key.to_vec());
            }
        } else {
            txn.delete(Table::Log, log_key(next).to_vec());
        }
        next += 1;
        deleted += 1;
    }
    s.hint.from.store(next, Relaxed);
    s.hint.kept_ts.store(next_kept_ts, Relaxed);
    Ok(())
}

/// [`prune`] from the log's first key, reading every record it passes: finds where the log
/// really starts, whatever the hint says.
fn prune_scan(
    txn: &mut WriteTxn<'_>,
    seq: u64,
    s: &LogRetention,
    prunable: impl Fn(u64, u64) -> bool,
) -> Result<(), DbError> {
    let mut doomed = Vec::new();
    let mut next_from = None;
    let mut next_kept_ts = u64::MAX;
    for entry in txn.range(Table::Log, log_key(0).to_vec()..log_key(seq).to_vec())? {
        let (k, v) = entry?;
        let old_seq = u64::from_be_bytes(
            k.as_slice()
                .try_into()
                .map_err(|_| DbError::Corrupt("log key".into()))?,
        );
        let ts = record_ts(&v);
        let keep = !prunable(old_seq, ts);
        if keep || doomed.len() >= LOG_PRUNE_PER_COMMIT_MAX {
            next_from = Some(old_seq);
            if keep {
                next_kept_ts = ts;
            }
            break;
        }
        next_from = Some(old_seq + 1);
        doomed.push(k);
    }
    for k in doomed {
        txn.delete(Table::Log, k);
    }
    if let Some(next) = next_from {
        s.hint.from.store(next, Relaxed);
    }
    s.hint.kept_ts.store(next_kept_ts, Relaxed);
    Ok(())
}
