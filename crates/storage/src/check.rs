//! `herald check`'s storage half: offline verification of a closed store. It opens redb read
//! only (redb's lock makes it fail with [`StorageError::Locked`] while a server has the store
//! open), judges the write-ahead log with recovery's own rules (`wal::replay`), then reads
//! every entry of every table through a snapshot of redb plus the log's batches, which decodes
//! every index-run block and commit-log block (checksums included). The database layer adds
//! its checks (index entries against documents) through the `more` callback. Nothing is
//! written.

use std::path::Path;
use std::sync::Arc;

use crate::layer::{Base, Changes, Filter, Layer, Snapshot};
use crate::read::ReadTxn;
use crate::runs::RunCache;
use crate::space::RedbFile;
use crate::store::FILE_NAME;
use crate::tables::Table;
use crate::vfs::Vfs;
use crate::wal::{checkpointed, list_segments, replay};
use crate::StorageError;

/// A database open for reading, read-only or (after a repair) not.
trait Readable: redb::ReadableDatabase {}
impl<T: redb::ReadableDatabase> Readable for T {}

/// One thing found damaged: what (a file, table or key) and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding(pub String);

/// What a check found: damage, and notes on what was checked.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

impl Report {
    /// Records damage.
    pub fn damaged(&mut self, what: impl Into<String>) {
        self.findings.push(Finding(what.into()));
    }

    /// Records what was checked.
    pub fn note(&mut self, what: impl Into<String>) {
        self.notes.push(what.into());
    }

    /// Nothing damaged.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Checks the store in `dir` (see the module docs). `Err` means it could not be checked at all
/// (no store there, locked by a running server, redb's file unreadable); damage found while
/// checking is in the [`Report`].
pub fn check(
    dir: &Path,
    vfs: Arc<dyn Vfs>,
    more: &mut dyn FnMut(&ReadTxn, &mut Report),
) -> Result<Report, StorageError> {
    let mut report = Report::default();
    let path = dir.join(FILE_NAME);
    vfs.len(&path)?;
    let backend = RedbFile {
        inner: vfs.redb_backend(&path, false)?,
        space: None,
    };
    let db: Box<dyn Readable> = match redb::Builder::new().open_read_only_with_backend(backend) {
        Ok(db) => Box::new(db),
        Err(redb::DatabaseError::RepairAborted) => {
            // Not closed cleanly (a crash): redb must repair its allocator state first, as any
            // open would. That writes redb's file, never the data or the log.
            report.note(format!(
                "{FILE_NAME} was not closed cleanly: redb repaired it"
            ));
            let backend = RedbFile {
                inner: vfs.redb_backend(&path, true)?,
                space: None,
            };
            Box::new(redb::Builder::new().create_with_backend(backend)?)
        }
        Err(err) => return Err(err.into()),
    };
    let db = &*db;
    let checkpointed = checkpointed(db)?;
    report.note(format!(
        "{FILE_NAME}: checkpointed through batch {checkpointed}"
    ));
    let segments = list_segments(&*vfs, dir)?;
    let mut layers = Vec::new();
    match replay(&*vfs, &segments, checkpointed) {
        Ok(mut found) => {
            report.note(format!(
                "write-ahead log: {} segment(s), {} record(s) to replay (batches {}..={}), {} \
                 byte(s) of torn or stale tail skipped",
                segments.len(),
                found.records,
                checkpointed + 1,
                found.last,
                found.skipped_bytes
            ));
            if found.last > checkpointed {
                let mut changes = Changes::default();
                for table in Table::ALL {
                    *changes.table_mut(table) = std::mem::take(&mut found.changes[table.index()]);
                }
                layers.push(Arc::new(Layer::new(found.last, changes)));
            }
        }
        Err(err) => report.damaged(format!("write-ahead log: {err}")),
    }
    let base = Base::open(db, &RunCache::default())?;
    let txn = ReadTxn::new(Arc::new(Snapshot {
        base: Arc::new(base),
        layers,
        filter: Arc::new(Filter::new(1)),
        covered: 0,
    }));
    for table in Table::ALL {
        let mut entries = 0u64;
        let scanned = txn.range::<&[u8]>(table, ..).and_then(|range| {
            for item in range {
                item?;
                entries += 1;
            }
            Ok(())
        });
        match scanned {
            Ok(()) => report.note(format!("table {}: {entries} entries read", table.name())),
            Err(err) => report.damaged(format!(
                "table {}: reading failed after {entries} entries: {err}",
                table.name()
            )),
        }
    }
    more(&txn, &mut report);
    Ok(report)
}
