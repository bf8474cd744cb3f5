//! The [`Replicator`] seam itself (the trait, and the slot the writer and the log thread share),
//! below the modules that use it; `replication.rs` has the rest of replication.

use crate::StorageError;
use std::sync::{Arc, OnceLock};

/// The replicated log a clustered store commits through.
pub trait Replicator: Send + Sync + 'static {
    /// Called on the store's log thread for every batch the store commits on its own, in batch
    /// order, before the batch is written to the local log or seen by any reader. `record` is
    /// the batch's record (what [`apply_record`] takes on another node) and `index` its
    /// replication index. Returns once the record is durable in the replicated log *and*
    /// accepted in the log's order; or [`StorageError::Unavailable`] when it was not (then no
    /// reader anywhere may ever apply it), or another error, which fails the store.
    fn replicate(&self, index: u64, record: &[u8]) -> Result<(), StorageError>;
}

/// The store's [`Replicator`], once set.
pub(crate) type ReplicatorSlot = Arc<OnceLock<Arc<dyn Replicator>>>;
