//! Storage errors: the one [`StorageError`] enum with stable codes, [`WriteError`] for job
//! tickets, and the single place where redb's error types are classified.

use std::sync::Arc;

/// Everything that can go wrong below the database layer.
///
/// `Clone` because one failed commit is reported to every job of its batch. Each variant has a
/// stable snake_case [`code`](StorageError::code) that the server's error table maps to the wire.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// The operating system failed a read, write, fsync or file-system call.
    #[error("storage I/O error: {0}")]
    Io(#[source] Arc<std::io::Error>),
    /// The file's contents are not a valid redb database (bad checksum, impossible page, ...).
    #[error("storage file is corrupted: {0}")]
    Corrupted(String),
    /// The file was written by a redb whose file format this build cannot read without upgrade.
    #[error("storage file format version {0} needs an upgrade")]
    IncompatibleFormat(u8),
    /// The store was written by a newer Herald whose on-disk format this build does not know
    /// (it might, for example, hold acknowledged writes in a log this build would ignore).
    #[error("storage format {found} was written by a newer Herald; this build reads format {supported} and older")]
    NewerFormat { found: u64, supported: u64 },
    /// Another process (or another `Store` in this one) has the file open.
    #[error("storage file is locked by another process or store")]
    Locked,
    /// The write queue is full; the caller should shed load or retry later.
    #[error("the write queue is full ({0} queued jobs)")]
    Overloaded(usize),
    /// The store is closed, or its writer thread is gone.
    #[error("the store is closed")]
    Closed,
    /// Committing (or preparing to commit) a batch failed; nothing of the batch was written.
    #[error("commit failed: {0}")]
    Commit(String),
    /// A key and value together exceed [`ENTRY_BYTES_MAX`](crate::ENTRY_BYTES_MAX).
    #[error("entry of {bytes} bytes exceeds the limit of {limit} bytes")]
    EntryTooLarge { bytes: usize, limit: usize },
    /// A job panicked; its writes were discarded and the writer carried on.
    #[error("write job panicked: {0}")]
    JobPanicked(String),
    /// `StoreOptions` out of range (a zero bound, for example).
    #[error("invalid store options: {0}")]
    InvalidOptions(String),
    /// redb reported a condition this crate's use of it should make impossible (a bug here).
    #[error("internal storage error: {0}")]
    Internal(String),
    /// The disk is full: the batch was refused before any of it was made durable, and the
    /// store refuses writes until space is freed (then it resumes by itself; `space.rs`).
    /// Reads carry on. Retryable.
    #[error("the disk is full: {0}")]
    Full(String),
    /// The store is a replica that cannot commit writes of its own now: this node is not the
    /// cluster's primary, it was deposed, or the replicated log cannot be reached. Nothing of
    /// the batch was applied; a client retries (on the primary).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl StorageError {
    /// A stable, snake_case identifier for this kind of error.
    pub fn code(&self) -> &'static str {
        match self {
            StorageError::Io(_) => "storage_io",
            StorageError::Corrupted(_) => "storage_corrupted",
            StorageError::IncompatibleFormat(_) | StorageError::NewerFormat { .. } => {
                "storage_incompatible_format"
            }
            StorageError::Locked => "storage_locked",
            StorageError::Overloaded(_) => "overloaded",
            StorageError::Closed => "storage_closed",
            StorageError::Commit(_) => "commit_failed",
            StorageError::EntryTooLarge { .. } => "entry_too_large",
            StorageError::JobPanicked(_) => "job_panicked",
            StorageError::InvalidOptions(_) => "invalid_options",
            StorageError::Internal(_) => "storage_internal",
            StorageError::Unavailable(_) => "unavailable",
            StorageError::Full(_) => "storage_full",
        }
    }
}

impl From<std::io::Error> for StorageError {
    fn from(err: std::io::Error) -> Self {
        StorageError::Io(Arc::new(err))
    }
}

/// The outcome of a job that did not commit: the job's own error, or the store's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError<E> {
    /// The job returned `Err`; none of its writes were applied.
    #[error(transparent)]
    Job(E),
    /// The batch did not commit, the job panicked, or the store closed before running it.
    #[error(transparent)]
    Storage(StorageError),
}

impl<E> WriteError<E> {
    /// The storage error, if this is not the job's own error.
    pub fn storage(&self) -> Option<&StorageError> {
        match self {
            WriteError::Storage(e) => Some(e),
            WriteError::Job(_) => None,
        }
    }
}

/// Classifies any redb error. Every redb error type converts into `redb::Error`; the `From`
/// impls below route each of them here, so the rest of the crate just uses `?`.
pub(crate) fn classify(err: redb::Error) -> StorageError {
    use redb::Error as R;
    match err {
        R::Io(e) => StorageError::Io(Arc::new(e)),
        R::Corrupted(msg) => StorageError::Corrupted(msg),
        R::UpgradeRequired(v) => StorageError::IncompatibleFormat(v),
        R::DatabaseAlreadyOpen => StorageError::Locked,
        R::DatabaseClosed => StorageError::Closed,
        // redb refuses all further work after a failed write to the file.
        R::PreviousIo => StorageError::Io(Arc::new(std::io::Error::other(
            "an earlier I/O error left the file unusable; reopen the store",
        ))),
        R::ValueTooLarge(n) => StorageError::EntryTooLarge {
            bytes: n,
            limit: crate::ENTRY_BYTES_MAX,
        },
        other => StorageError::Internal(other.to_string()),
    }
}

macro_rules! from_redb {
    ($($ty:ty),*) => {$(
        impl From<$ty> for StorageError {
            fn from(err: $ty) -> Self {
                classify(err.into())
            }
        }
    )*};
}

from_redb!(
    redb::Error,
    redb::StorageError,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Commit failures are reported as [`StorageError::Commit`] unless they are I/O or corruption,
/// which keep their own codes so operators can tell a full disk from a bug.
pub(crate) fn commit_error(err: StorageError) -> StorageError {
    match err {
        StorageError::Io(_) | StorageError::Corrupted(_) | StorageError::Closed => err,
        StorageError::Commit(_) | StorageError::Unavailable(_) | StorageError::Full(_) => err,
        other => StorageError::Commit(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_snake_case() {
        let all = [
            StorageError::from(std::io::Error::other("x")),
            StorageError::Corrupted("x".into()),
            StorageError::IncompatibleFormat(2),
            StorageError::Locked,
            StorageError::Overloaded(1),
            StorageError::Closed,
            StorageError::Commit("x".into()),
            StorageError::EntryTooLarge { bytes: 2, limit: 1 },
            StorageError::JobPanicked("x".into()),
            StorageError::InvalidOptions("x".into()),
            StorageError::Internal("x".into()),
            StorageError::Unavailable("x".into()),
            StorageError::Full("x".into()),
        ];
        let mut codes: Vec<_> = all.iter().map(StorageError::code).collect();
        for code in &codes {
            assert!(
                code.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{code}"
            );
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len(), "codes must be distinct");
    }

    #[test]
    fn redb_errors_are_classified() {
        assert_eq!(
            StorageError::from(redb::DatabaseError::DatabaseAlreadyOpen).code(),
            "storage_locked"
        );
        assert_eq!(
            StorageError::from(redb::StorageError::Corrupted("bad".into())).code(),
            "storage_corrupted"
        );
        assert_eq!(
            StorageError::from(redb::StorageError::PreviousIo).code(),
            "storage_io"
        );
        assert_eq!(
            commit_error(StorageError::Internal("x".into())).code(),
            "commit_failed"
        );
        assert_eq!(
            commit_error(StorageError::from(std::io::Error::other("disk"))).code(),
            "storage_io"
        );
    }
}
