//! The transaction vocabulary: what a caller asks to commit ([`Write`], [`Transaction`],
//! [`QueueFull`], [`Guard`]), what a commit did ([`WriteResult`], [`CommitOutcome`]) and what it
//! changed ([`Change`], [`Commit`]).
//!
//! This module is at the bottom of the crate: it depends only on `error` and on `layout` (to
//! read back a stored document record); the write path, the commit log, the feed, the triggers
//! and `Db` all speak it, and it knows none of them.

use crate::error::DbError;
use crate::layout::decode_doc;
use herald_query::Update;
use herald_value::Value;

/// Most writes in one transaction.
pub const COMMIT_WRITES_MAX: usize = 500;

/// One write of a transaction.
#[derive(Debug, Clone)]
pub enum Write {
    /// Create or replace the document.
    Put {
        collection: String,
        id: String,
        doc: Value,
        if_version: Option<u64>,
    },
    /// Create the document; fails if it exists. Without an id, one is generated.
    Insert {
        collection: String,
        id: Option<String>,
        doc: Value,
    },
    /// Apply update operators (or a replacement); with `upsert`, create it when missing.
    Update {
        collection: String,
        id: String,
        update: Update,
        upsert: bool,
        if_version: Option<u64>,
    },
    Delete {
        collection: String,
        id: String,
        if_version: Option<u64>,
    },
}

impl Write {
    /// The collection and document id a prepared write addresses (an insert's id is chosen by
    /// `prepare`, so asking before that is a programmer error).
    pub(crate) fn target(&self) -> (&str, &str) {
        match self {
            Write::Put { collection, id, .. }
            | Write::Update { collection, id, .. }
            | Write::Delete { collection, id, .. } => (collection, id),
            Write::Insert { collection, id, .. } => (collection, id.as_deref().expect("prepared")),
        }
    }

    /// The `ifVersion` precondition, if any (an insert's is "absent", checked on its own).
    pub(crate) fn if_version(&self) -> Option<u64> {
        match self {
            Write::Put { if_version, .. }
            | Write::Update { if_version, .. }
            | Write::Delete { if_version, .. } => *if_version,
            Write::Insert { .. } => None,
        }
    }

    /// The document a put or insert supplies (`None` for updates and deletes).
    pub(crate) fn supplied(&self) -> Option<&Value> {
        match self {
            Write::Put { doc, .. } | Write::Insert { doc, .. } => Some(doc),
            Write::Update { .. } | Write::Delete { .. } => None,
        }
    }
}

/// What is to be committed: the writes, applied all or nothing, with an optional client
/// mutation id (a retry with a remembered id applies nothing and answers with the original
/// outcome, see `mutations.rs`) and an optional [`Guard`]. Built from a `Vec<Write>` and
/// extended with [`mutation_id`](Transaction::mutation_id) and [`guard`](Transaction::guard).
#[derive(Clone)]
pub struct Transaction {
    pub writes: Vec<Write>,
    pub mutation_id: Option<String>,
    pub guard: Option<WriteGuard>,
}

impl Transaction {
    pub fn new(writes: Vec<Write>) -> Transaction {
        Transaction {
            writes,
            mutation_id: None,
            guard: None,
        }
    }

    /// Records the commit under this client mutation id (`None`: none).
    pub fn mutation_id(mut self, id: Option<String>) -> Transaction {
        self.mutation_id = id;
        self
    }

    /// Checks each write with `guard` inside the storage job.
    pub fn guard(mut self, guard: WriteGuard) -> Transaction {
        self.guard = Some(guard);
        self
    }
}

impl From<Vec<Write>> for Transaction {
    fn from(writes: Vec<Write>) -> Transaction {
        Transaction::new(writes)
    }
}

/// What [`Db::submit`](crate::Db::submit) does when the write queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueFull {
    /// Wait for room (for threads that may block).
    Block,
    /// Refuse with `overloaded` and hand the writes back in [`Refused`] (for async callers,
    /// which must not block; bulk ingest retries them later without having cloned them).
    Refuse,
}

/// Why a transaction was not queued. `writes` holds the transaction's writes, prepared
/// (generated ids stay chosen), whenever they passed validation but were not queued (the
/// queue was full, or the store is closing); `None` when the transaction itself is invalid.
#[derive(Debug)]
pub struct Refused {
    pub error: DbError,
    pub writes: Option<Vec<Write>>,
}

impl From<DbError> for Refused {
    fn from(error: DbError) -> Refused {
        Refused {
            error,
            writes: None,
        }
    }
}

impl From<Refused> for DbError {
    fn from(r: Refused) -> DbError {
        r.error
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Refused {}

/// Serialized as its [`as_str`](ChangeOp::as_str) name (stored in the commit log and the
/// mutation-id records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeOp {
    Insert,
    Update,
    Delete,
}

impl ChangeOp {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Insert => "insert",
            ChangeOp::Update => "update",
            ChangeOp::Delete => "delete",
        }
    }
}

/// What one write did. `op` is `None` for a delete of a missing document.
#[derive(Debug, Clone)]
pub struct WriteResult {
    pub collection: String,
    pub id: String,
    pub op: Option<ChangeOp>,
    /// The version after the write (for deletes: the version that was deleted; 0 if none).
    pub version: u64,
    /// The stored record (version ++ JSON) of the document after an update, read with
    /// [`WriteResult::doc`]; `None` after a put, an insert or a delete, whose caller already has
    /// what it wrote. Bytes, not a `Value`: copying them is one allocation on the writer, where
    /// a copied document tree costs one per field and string, for a document only `PATCH`
    /// answers with.
    pub record: Option<Vec<u8>>,
}

impl WriteResult {
    /// The document after an update (see [`WriteResult::record`]).
    pub fn doc(&self) -> Option<Value> {
        let (_, doc) = decode_doc(self.record.as_deref()?).ok()?;
        Some(doc)
    }
}

/// One committed change to one document, as the commit log records it.
#[derive(Debug, Clone)]
pub struct Change {
    pub collection: String,
    pub id: String,
    pub op: ChangeOp,
    pub version: u64,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// One committed transaction, as the feed holds it and the commit log gives it back.
#[derive(Debug, Clone)]
pub struct Commit {
    pub seq: u64,
    pub changes: Vec<Change>,
    /// Approximate memory it holds (its commit record's size; 0 when read back from the log).
    pub bytes: usize,
}

#[derive(Debug, Clone)]
pub struct CommitOutcome {
    /// The commit's seq; for a transaction that changed nothing, the seq it observed.
    pub seq: u64,
    pub results: Vec<WriteResult>,
    /// What the commit changed, for the live-query feed. The commit hook moves them there, so
    /// the outcome a submitter receives has none.
    pub changes: Vec<Change>,
    /// Size of the commit record in bytes (0 when nothing changed): what the commit costs to
    /// hold in memory, for bounding the live-query feed.
    pub record_bytes: usize,
    /// The trigger uid of each task this commit enqueued.
    pub tasks: Vec<u64>,
    /// True when the commit's mutation id was already known: nothing was applied, and `seq` and
    /// `results` (without documents) are those of the original commit.
    pub replayed: bool,
}

impl CommitOutcome {
    pub(crate) fn replayed(seq: u64, results: Vec<WriteResult>) -> CommitOutcome {
        CommitOutcome {
            seq,
            results,
            changes: Vec::new(),
            record_bytes: 0,
            tasks: Vec::new(),
            replayed: true,
        }
    }
}

/// What one write of a transaction did, for a [`Guard`]: the document before and after it
/// (`None`: absent), as computed inside the storage job.
#[derive(Debug, Clone, Copy)]
pub struct WriteEffect<'a> {
    /// The write's position in the transaction.
    pub index: usize,
    pub collection: &'a str,
    pub id: &'a str,
    pub before: Option<&'a Value>,
    pub after: Option<&'a Value>,
    /// The version of `before` (0 when absent).
    pub before_version: u64,
}

/// Checks each write of a transaction inside its storage job, in order: `before` when the
/// stored document a write replaces has been read (before anything else about the write is
/// checked or computed), `after` once its new document is computed. An error fails the whole
/// transaction. Runs on the storage writer thread, so it must be quick and not block.
pub trait Guard: Send + Sync {
    fn before(
        &self,
        index: usize,
        collection: &str,
        id: &str,
        before: Option<&Value>,
        before_version: u64,
    ) -> Result<(), DbError>;
    fn after(&self, effect: &WriteEffect<'_>) -> Result<(), DbError>;
}

/// A shared [`Guard`].
pub type WriteGuard = std::sync::Arc<dyn Guard>;
