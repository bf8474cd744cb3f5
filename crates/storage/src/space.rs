//! Disk space: the store's "disk full" state, the reserve file that lets a checkpoint and a
//! clean shutdown finish on a full disk, and [`RedbFile`], the backend every redb file goes
//! through (the real or the fault-injecting one, wrapped so that running out of space while
//! checkpointing spends the reserve instead of failing the store).
//!
//! # The protocol
//!
//! A store on disk keeps `reserve.tmp`, `StoreOptions::reserve_bytes` of allocated blocks, in
//! its directory. The log enters the full state before the disk is full: a batch finding less
//! than the reserve's size free (`statvfs`, looked at again after a quarter of what was free
//! beyond the reserve has been logged) is refused and the reserve deleted,
//! so that checkpoints of what was committed have twice the reserve to write into (the log
//! alone fills disks; checkpoints write in bursts, and redb refuses its file after any failed
//! write until it is reopened, which would fail the store). A write that fails for lack of
//! space anyway (a log append, or redb's file at a checkpoint) does the same; a redb write that
//! failed is then retried once, in the space just freed. While full, the log refuses every
//! batch with [`StorageError::Full`](crate::StorageError::Full) before writing anything, and
//! probes first: if twice the reserve's size is free (the operator freed room for the reserve
//! and as much again for writes; `statvfs`, or a probe file where that is unknown), it takes
//! the reserve back, clears the state and logs the batch. No restart, no timer. (Retaking just
//! the reserve would succeed in the very space its release freed, and the next write would
//! fill the disk again with no reserve left.)

use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::vfs::{is_no_space, Open, Vfs};

/// The reserve's file name in the store's directory.
pub const RESERVE_NAME: &str = "reserve.tmp";
/// The probe's file name (see the module docs); deleted at once.
const PROBE_NAME: &str = "probe.tmp";

/// The store's disk-space state, shared by the log thread, redb's backend and the store.
#[derive(Debug)]
pub(crate) struct Space {
    vfs: Arc<dyn Vfs>,
    /// `None`: no reserve (an in-memory store, or `reserve_bytes` 0).
    path: Option<PathBuf>,
    bytes: u64,
    /// The reserve file exists with its blocks allocated.
    held: Mutex<bool>,
    full: AtomicBool,
    /// Log bytes that may still be appended before free space is looked at again: a quarter of
    /// what was free beyond the reserve at the last look (the log shares the disk with redb
    /// and other processes), so a busy log costs one `statvfs` per that many bytes, not one
    /// per batch.
    unchecked: AtomicU64,
}

impl Space {
    /// Space for a store in `dir` (`None` in memory); does not touch the disk yet.
    pub(crate) fn new(vfs: Arc<dyn Vfs>, dir: Option<&Path>, bytes: u64) -> Arc<Space> {
        let path = dir.filter(|_| bytes > 0).map(|d| d.join(RESERVE_NAME));
        Arc::new(Space {
            vfs,
            path,
            bytes,
            held: Mutex::new(false),
            full: AtomicBool::new(false),
            unchecked: AtomicU64::new(0),
        })
    }

    /// At open: makes sure the reserve exists. On a full disk the store opens in the full
    /// state (reads work, writes are refused until space returns). A file system that cannot
    /// allocate (another error) just has no reserve: it is a safety margin, not a condition
    /// of opening.
    pub(crate) fn establish(&self) -> io::Result<()> {
        match self.allocate() {
            Err(err) if is_no_space(&err) => {
                self.full.store(true, Ordering::SeqCst);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Creates (or keeps) the reserve file with its blocks allocated.
    fn allocate(&self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        self.allocate_at(path, self.bytes)
    }

    fn allocate_at(&self, path: &Path, bytes: u64) -> io::Result<()> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let how = match self.vfs.len(path) {
            Ok(_) => Open::Existing,
            Err(_) => Open::CreateNew,
        };
        let made = self
            .vfs
            .open(path, how)
            .and_then(|file| file.allocate(bytes));
        let reserve = Some(path) == self.path.as_deref();
        match made {
            Ok(()) => {
                *held |= reserve;
                Ok(())
            }
            Err(err) => {
                // A partly allocated file would hold space for nothing.
                let _ = self.vfs.remove_file(path);
                if reserve {
                    *held = false;
                }
                Err(err)
            }
        }
    }

    /// A write failed for lack of space: enter the full state and free the reserve. Returns
    /// whether space was freed (a write that failed may then be retried once).
    pub(crate) fn ran_out(&self) -> bool {
        self.full.store(true, Ordering::SeqCst);
        self.unchecked.store(0, Ordering::Relaxed);
        let Some(path) = &self.path else {
            return false;
        };
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if !*held {
            return false;
        }
        *held = false;
        self.vfs.remove_file(path).is_ok()
    }

    /// Before a batch is logged: enters the full state if less than the reserve's size is
    /// free (see the module docs). Returns whether the batch may be logged.
    pub(crate) fn has_room(&self) -> bool {
        let Some(path) = &self.path else {
            return true;
        };
        if self.unchecked.load(Ordering::Relaxed) > 0 {
            return true;
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        match self.vfs.free_bytes(dir) {
            Ok(Some(free)) if free < self.bytes => {
                self.ran_out();
                false
            }
            Ok(Some(free)) => {
                self.unchecked
                    .store((free - self.bytes) / 4, Ordering::Relaxed);
                true
            }
            _ => true,
        }
    }

    /// The log appended `bytes` (see [`has_room`](Space::has_room)).
    pub(crate) fn spent(&self, bytes: u64) {
        let _ = self
            .unchecked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left.saturating_sub(bytes))
            });
    }

    /// Whether `bytes` more can be written (a log spare, say) leaving the reserve's size free,
    /// as far as is known.
    pub(crate) fn has_room_for(&self, bytes: u64) -> bool {
        let Some(path) = &self.path else {
            return true;
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        match self.vfs.free_bytes(dir) {
            Ok(Some(free)) => free >= bytes.saturating_add(self.bytes),
            _ => true,
        }
    }

    /// Whether writes are being refused for lack of space.
    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::SeqCst)
    }

    /// While full: tries to take the reserve back; on success the store is no longer full.
    /// Returns whether writes may go ahead.
    pub(crate) fn probe(&self) -> bool {
        if !self.is_full() {
            return true;
        }
        if let Some(path) = &self.path {
            let want = self.bytes.saturating_mul(2);
            let dir = path.parent().unwrap_or(Path::new("."));
            match self.vfs.free_bytes(dir) {
                Ok(Some(free)) if free < want => return false,
                Ok(Some(_)) => {}
                // Unknown: allocate a probe file. (Not the first choice: while it holds the
                // space, a checkpoint writing at the same moment could run out.)
                _ => {
                    let probe = path.with_file_name(PROBE_NAME);
                    let room = self.allocate_at(&probe, want);
                    let _ = self.vfs.remove_file(&probe);
                    if room.is_err() {
                        return false;
                    }
                }
            }
        }
        if self.allocate().is_ok() {
            self.full.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }
}

/// The error a refused batch gets while the disk is full.
pub(crate) fn full_error(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::StorageFull, what.to_owned())
}

/// redb's file: any backend (the real file or a test's), with running out of space handled
/// as the module docs say. Everything else is forwarded as is, the locks included.
#[derive(Debug)]
pub(crate) struct RedbFile {
    pub(crate) inner: Box<dyn redb::StorageBackend>,
    pub(crate) space: Option<Arc<Space>>,
}

impl RedbFile {
    fn retry<T>(&self, op: impl Fn() -> io::Result<T>) -> io::Result<T> {
        match op() {
            Err(err) if is_no_space(&err) => match &self.space {
                Some(space) if space.ran_out() => op(),
                _ => Err(err),
            },
            other => other,
        }
    }
}

type Lock<T> = Result<T, redb::BackendError>;

impl redb::StorageBackend for RedbFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.retry(|| self.inner.set_len(len))
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.retry(|| self.inner.write(offset, data))
    }
    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        self.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        self.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<()> {
        self.inner.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<()> {
        self.inner.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<()> {
        self.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        self.inner.query_lock_range(start, end)
    }
}
