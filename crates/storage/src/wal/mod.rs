//! The write-ahead log: the durability point of every batch. Record format, the segment files,
//! the writer's appends and syncs, deleting segments a checkpoint covers, and recovery (replay
//! into redb) on open.
//!
//! # Files
//!
//! Segments are files `wal-<first batch, 20 digits>.log` in the store's directory, beside
//! `herald.redb`. The writer appends to one active segment and starts a new one once it holds
//! `wal_segment_bytes`; before it does, it syncs the old one, and after creating the new file it
//! syncs the directory. A closed segment is deleted once a checkpoint covers its last batch.
//!
//! Once the log is in use (its active segment holds [`SPARE_AFTER_BYTES`]), a helper thread
//! prepares the next segment ahead of time: `wal-spare.tmp`, `wal_segment_bytes` of zeros,
//! synced with its size. The next segment is that file renamed, so appends overwrite zeros in
//! place: an `fdatasync` then flushes data only, where a file growing with every record also
//! needs a journal commit of its new size (which on ext4 waits for other files' data in the
//! same journal transaction, here redb's checkpoint writes). A rotation never waits for a spare
//! still being written (it starts a growing segment), and a growing segment is closed early as
//! soon as a spare is ready. Zeros after the last record read as no record, as
//! a torn tail does. A leftover spare (a crash while preparing it) is deleted on open; `close`
//! deletes it too.
//!
//! Segments are recycled: when a durable checkpoint covers a closed segment of at least
//! [`SPARE_AFTER_BYTES`], it is renamed `wal-recycled-<slot>.tmp` (if one of the
//! [`RECYCLED_MAX`] slots is free) instead of being deleted, and the next spare is such a file
//! renamed, not a new file of zeros: writing the zeros cost a visible share of the server's CPU
//! during sustained inserts, and as much disk bandwidth as the log itself (several slots,
//! because at high write rates one durable checkpoint covers several segments). Its old
//! records stay after the new ones until overwritten. They are harmless:
//! every one of them is of a batch the durable checkpoint had covered, and recovery skips every
//! record of a batch at or below redb's checkpoint before looking at anything else (a checkpoint
//! never goes back), so they read like the bytes of a torn tail.
//!
//! # Faults
//!
//! Every file operation goes through the store's [`Vfs`]. A batch is refused with
//! [`StorageError::Full`] before anything is written while the disk is full (`space.rs`: fewer
//! free bytes than the reserve, or an earlier `ENOSPC` not yet followed by a successful probe).
//! A write that fails with `ENOSPC` cuts the active segment back to its last good length and
//! refuses the batch the same way: nothing of it was made durable and the log is as it was, so
//! the store goes on. Any other failure, and every failed sync (whatever its errno: what it
//! failed to write is gone, and a retry would report success), fails the store. A spare is
//! prepared only when it fits beside the reserve, and one that fails is deleted at once.
//!
//! # Records
//!
//! One record per committed batch that wrote something, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `HWAL` |
//! | 4 | CRC-32 of everything after this field (length, numbers and body) |
//! | 8 | body length |
//! | 8 | batch number (1, 2, 3, ... without gaps) |
//! | 8 | synced: the highest batch known durable when this record was written |
//! | n | body: entries `table u8, kind u8 (0 put, 1 delete), key len u32, [value len u32], key, [value]` |
//!
//! # Recovery
//!
//! redb stores the number of the last checkpointed batch in the same transaction as the data.
//! On open, every intact record after it is applied in batch order (the newest entry of each key
//! kept) and written to redb in one transaction, table by table where a checkpoint would write
//! it (`placement.rs`); then the log is deleted. Bytes that are not an intact record (a torn
//! write at the tail) are skipped. A batch may be missing only if no later record says it had
//! been made durable: in fsync mode each record's `synced` is its predecessor, so a missing
//! batch followed by any intact record is corruption ([`StorageError::Corrupted`]), while in
//! no-sync mode unsynced records may reach the disk out of order after a power loss and a hole
//! in them just ends the replay. Each record is checked whole, so a batch applies entirely or
//! not at all.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use redb::ReadableDatabase;

use crate::layer::{Changes, Layer};
use crate::metrics::Metrics;
use crate::placement::write_sorted;
use crate::space::{full_error, Space};
use crate::tables::{Table, TableMap, STATE, STATE_CHECKPOINT, TABLE_COUNT};
use crate::vfs::{is_no_space, Open, VFile, Vfs};
use crate::StorageError;

const MAGIC: [u8; 4] = *b"HWAL";
const HEADER_BYTES: usize = 32;
const PUT: u8 = 0;
const DELETE: u8 = 1;
/// A reused encode buffer larger than this is given back after the batch.
const BUFFER_KEEP_BYTES: usize = 16 << 20;
/// The preallocated next segment (see the module docs); not a segment name.
const SPARE_NAME: &str = "wal-spare.tmp";
/// A retired segment kept to become the next spare (see the module docs); not a segment name.
const RECYCLED_PREFIX: &str = "wal-recycled-";
/// At most this many retired segments are kept to become spares (see the module docs).
const RECYCLED_MAX: usize = 4;
/// The single recycled file of format-3 stores written before there could be several.
const RECYCLED_OLD_NAME: &str = "wal-recycled.tmp";

/// The name of recycled segment `slot` (below [`RECYCLED_MAX`]).
fn recycled_path(dir: &Path, slot: usize) -> PathBuf {
    dir.join(format!("{RECYCLED_PREFIX}{slot}.tmp"))
}
/// A spare is prepared once the active segment holds this much: stores that log little (tests,
/// idle servers) never write one.
pub(crate) const SPARE_AFTER_BYTES: u64 = 1 << 20;

/// Appends `batch`'s record for `changes` to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, batch: u64, synced: u64, changes: &Changes) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 4]); // CRC, filled in below
    out.extend_from_slice(&[0; 8]); // body length, filled in below
    out.extend_from_slice(&batch.to_le_bytes());
    out.extend_from_slice(&synced.to_le_bytes());
    for (table, map) in changes.tables() {
        for (key, value) in map {
            out.push(table.index() as u8);
            out.push(if value.is_some() { PUT } else { DELETE });
            // Entries are at most ENTRY_BYTES_MAX (1 GiB), so each length fits in a u32.
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            if let Some(value) = value {
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            }
            out.extend_from_slice(key);
            if let Some(value) = value {
                out.extend_from_slice(value);
            }
        }
    }
    let body = (out.len() - start - HEADER_BYTES) as u64;
    out[start + 8..start + 16].copy_from_slice(&body.to_le_bytes());
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// An intact record found in a segment.
pub(crate) struct Record<'a> {
    pub(crate) batch: u64,
    pub(crate) synced: u64,
    pub(crate) body: &'a [u8],
    /// Where the next record starts.
    pub(crate) end: usize,
}

fn le_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

/// The intact record at `off`, or `None` if the bytes there are anything else (a torn write,
/// zeros, garbage).
pub(crate) fn parse(data: &[u8], off: usize) -> Option<Record<'_>> {
    let header = data.get(off..off.checked_add(HEADER_BYTES)?)?;
    if header[..4] != MAGIC {
        return None;
    }
    let body_len = usize::try_from(le_u64(&header[8..])).ok()?;
    let end = off.checked_add(HEADER_BYTES)?.checked_add(body_len)?;
    let covered = data.get(off + 8..end)?;
    if crc32fast::hash(covered) != le_u32(&header[4..]) {
        return None;
    }
    Some(Record {
        batch: le_u64(&header[16..]),
        synced: le_u64(&header[24..]),
        body: &data[off + HEADER_BYTES..end],
        end,
    })
}

/// Calls `f` for each entry of a record's body, in order.
pub(crate) fn decode(
    body: &[u8],
    mut f: impl FnMut(Table, &[u8], Option<&[u8]>) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let mut rest = body;
    while !rest.is_empty() {
        let head = take(&mut rest, 2)?;
        let table = *Table::ALL.get(usize::from(head[0])).ok_or_else(malformed)?;
        let kind = head[1];
        let key_len = le_u32(take(&mut rest, 4)?) as usize;
        let value_len = match kind {
            PUT => Some(le_u32(take(&mut rest, 4)?) as usize),
            DELETE => None,
            _ => return Err(malformed()),
        };
        let key = take(&mut rest, key_len)?;
        let value = match value_len {
            Some(n) => Some(take(&mut rest, n)?),
            None => None,
        };
        f(table, key, value)?;
    }
    Ok(())
}

fn take<'b>(rest: &mut &'b [u8], n: usize) -> Result<&'b [u8], StorageError> {
    if rest.len() < n {
        return Err(malformed());
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

/// A record whose checksum holds but whose body does not parse: written by a bug, not a crash.
fn malformed() -> StorageError {
    StorageError::Corrupted("malformed entry in an intact WAL record".into())
}

fn segment_path(dir: &Path, first_batch: u64) -> PathBuf {
    dir.join(format!("wal-{first_batch:020}.log"))
}

/// The store's segment files, oldest first.
pub(crate) fn list_segments(vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for name in vfs.list(dir)? {
        let first = name
            .strip_prefix("wal-")
            .and_then(|n| n.strip_suffix(".log"))
            .filter(|n| n.len() == 20)
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            found.push((first, dir.join(&name)));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// A failed sync is never "disk full", whatever its errno: what it failed to write is lost,
/// and only a reopen (replaying what is durable) gets back to a known state.
fn sync_failed(err: io::Error) -> io::Error {
    io::Error::other(format!(
        "fsync of the write-ahead log failed ({err}): what it was writing may be lost, so the \
         store refuses writes until it is reopened (restart the server), which replays what is \
         durable"
    ))
}

/// The number of the last batch a checkpoint applied to redb (0 for a new store).
pub(crate) fn checkpointed(db: &(impl ReadableDatabase + ?Sized)) -> Result<u64, StorageError> {
    let txn = db.begin_read()?;
    let state = match txn.open_table(STATE) {
        Ok(state) => state,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(err) => return Err(err.into()),
    };
    Ok(state.get(STATE_CHECKPOINT)?.map_or(0, |g| g.value()))
}

/// Replays the log in `dir` into redb after a crash (see the module docs), makes the result
/// durable, deletes the log and returns the number of the last batch now in redb.
pub(crate) fn recover(db: &redb::Database, vfs: &dyn Vfs, dir: &Path) -> Result<u64, StorageError> {
    let checkpointed = checkpointed(db)?;
    let segments = list_segments(vfs, dir)?;
    if segments.is_empty() {
        return Ok(checkpointed);
    }
    let Replay { last, changes, .. } = replay(vfs, &segments, checkpointed)?;
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(true);
    for table in Table::ALL {
        let entries = changes[table.index()].iter();
        write_sorted(
            &txn,
            table,
            entries.map(|(k, v)| (k.as_slice(), v.as_deref())),
        )?;
    }
    txn.open_table(STATE)?.insert(STATE_CHECKPOINT, last)?;
    txn.commit()?;
    for path in &segments {
        vfs.remove_file(path)?;
    }
    vfs.sync_dir(dir)?;
    Ok(last)
}

/// What the log holds after the last checkpoint (see [`replay`]).
pub(crate) struct Replay {
    /// The last batch of the unbroken sequence after the checkpoint.
    pub(crate) last: u64,
    /// The newest entry of each key of those batches, per table.
    pub(crate) changes: [TableMap; TABLE_COUNT],
    /// Intact records replayed, and bytes skipped as not a record (torn tails, zeros, old
    /// records of a recycled segment).
    pub(crate) records: u64,
    pub(crate) skipped_bytes: u64,
}

/// Reads `segments` (oldest first) and gathers every batch after `checkpointed` that the
/// module docs' rules say to replay; the rules' damage is [`StorageError::Corrupted`]. Shared
/// by recovery and `herald check`, so the check judges a log exactly as a restart would.
pub(crate) fn replay(
    vfs: &dyn Vfs,
    segments: &[PathBuf],
    checkpointed: u64,
) -> Result<Replay, StorageError> {
    let mut last = checkpointed;
    let (mut records, mut skipped_bytes) = (0, 0);
    // The newest entry of each key, per table: written like a checkpoint's, after the replay.
    // In memory meanwhile: what the layers held before the crash, plus what non-durable
    // checkpoints had applied since the last durable one (the log keeps both).
    let mut changes: [TableMap; TABLE_COUNT] = Default::default();
    for path in segments {
        let data = vfs.read(path).map_err(|err| {
            StorageError::Corrupted(format!("reading WAL segment {}: {err}", path.display()))
        })?;
        let mut off = 0;
        while off < data.len() {
            let Some(record) = parse(&data, off) else {
                // Not an intact record: skip to the next place one could start.
                let next = next_magic(&data, off + 1);
                skipped_bytes += (next - off) as u64;
                off = next;
                continue;
            };
            off = record.end;
            if record.batch <= checkpointed {
                continue;
            }
            if record.batch == last + 1 {
                records += 1;
                decode(record.body, |table, key, value| {
                    // Newer batches overwrite older ones here.
                    changes[table.index()].insert(key.to_vec(), value.map(<[u8]>::to_vec));
                    Ok(())
                })?;
                last = record.batch;
            } else if record.batch <= last {
                return Err(StorageError::Corrupted(format!(
                    "WAL batch {} appears twice in {}",
                    record.batch,
                    path.display()
                )));
            } else if record.synced > last {
                return Err(StorageError::Corrupted(format!(
                    "WAL batch {} is missing or damaged, but batch {} in {} was logged after it \
                     had been made durable",
                    last + 1,
                    record.batch,
                    path.display()
                )));
            }
            // Otherwise batch `last + 1` never became durable (a torn or unsynced write):
            // it and every batch after it are lost, as their writers were never told
            // otherwise (or, in no-sync mode, were told this could happen).
        }
    }
    Ok(Replay {
        last,
        changes,
        records,
        skipped_bytes,
    })
}

pub(crate) fn next_magic(data: &[u8], from: usize) -> usize {
    data.get(from..)
        .and_then(|rest| rest.windows(MAGIC.len()).position(|w| w == MAGIC))
        .map_or(data.len(), |i| from + i)
}

/// The closed segments that still exist, each with the last batch it holds. The writer adds to
/// it; the checkpointer deletes what a checkpoint covers.
pub(crate) struct Segments {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    closed: Mutex<Vec<(PathBuf, u64)>>,
}

impl Segments {
    pub(crate) fn new(vfs: Arc<dyn Vfs>, dir: &Path) -> Arc<Segments> {
        Arc::new(Segments {
            vfs,
            dir: dir.to_path_buf(),
            closed: Mutex::new(Vec::new()),
        })
    }

    fn close(&self, path: PathBuf, last_batch: u64) {
        let mut closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
        closed.push((path, last_batch));
    }

    /// Deletes a leftover spare and the recycled segments (at close).
    pub(crate) fn remove_stale_spare(&self) -> io::Result<()> {
        remove_stale_spare(&*self.vfs, &self.dir)
    }

    /// Deletes (or keeps as the recycled segment, see the module docs) every closed segment
    /// whose batches are all in redb. A segment that cannot be deleted stays listed for the next
    /// try; recovery skips its records anyway.
    pub(crate) fn delete_covered(&self, checkpointed: u64) -> io::Result<()> {
        let mut closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
        let mut result = Ok(());
        let before = closed.len();
        closed.retain(|(path, last)| {
            if *last > checkpointed {
                return true;
            }
            match retire(&*self.vfs, &self.dir, path) {
                Ok(()) => false,
                Err(err) if err.kind() == io::ErrorKind::NotFound => false,
                Err(err) => {
                    result = Err(err);
                    true
                }
            }
        });
        if closed.len() < before {
            self.vfs.sync_dir(&self.dir)?;
        }
        result
    }
}

/// Removes a segment every batch of which a durable checkpoint covers, or keeps it as the
/// recycled file that a later spare is made of (see the module docs), if a slot is free and
/// the segment is large enough to be worth it.
fn retire(vfs: &dyn Vfs, dir: &Path, path: &Path) -> io::Result<()> {
    let large = vfs.len(path).is_ok_and(|len| len >= SPARE_AFTER_BYTES);
    if large {
        let free = (0..RECYCLED_MAX)
            .map(|slot| recycled_path(dir, slot))
            .find(|p| vfs.len(p).is_err());
        if let Some(recycled) = free {
            return vfs.rename(path, &recycled);
        }
    }
    vfs.remove_file(path)
}

/// Where the writer logs batches.
pub(crate) enum Wal {
    /// In-memory stores: nothing outlives the process, so nothing is logged.
    Off,
    File(WalWriter),
    /// Tests: fails every append while the flag is set, like a disk that broke.
    #[cfg(test)]
    Failing(Arc<std::sync::atomic::AtomicBool>),
}

impl Wal {
    /// Logs `batch`, and makes it durable if `sync`; returns the bytes appended.
    pub(crate) fn append(&mut self, batch: u64, changes: &Changes, sync: bool) -> io::Result<u64> {
        match self {
            Wal::Off => Ok(0),
            Wal::File(writer) => writer.append(batch, changes, sync),
            #[cfg(test)]
            Wal::Failing(fail) => {
                if fail.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(io::Error::other("injected disk failure"));
                }
                Ok(0)
            }
        }
    }

    /// Makes every logged batch durable.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        match self {
            Wal::File(writer) => writer.sync(),
            _ => Ok(()),
        }
    }

    /// At shutdown: syncs, and hands the active segment to the checkpointer for deletion.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        match self {
            Wal::File(writer) => writer.finish(),
            _ => Ok(()),
        }
    }
}

/// The writer thread's side of the log: the active segment.
pub(crate) struct WalWriter {
    vfs: Arc<dyn Vfs>,
    /// The disk-full state: appends are refused (before writing) while it is set.
    space: Arc<Space>,
    dir: PathBuf,
    segments: Arc<Segments>,
    segment_bytes: u64,
    active: Option<Active>,
    buf: Vec<u8>,
    /// The last batch appended, and the last known durable.
    written: u64,
    synced: u64,
    /// The next segment, being zero-filled on a helper thread.
    spare: Option<JoinHandle<io::Result<PathBuf>>>,
    /// A spare could not be written (a full disk, say): segments grow as records are appended,
    /// rather than retrying (and rotating early) every megabyte.
    spare_failed: bool,
}

struct Active {
    file: Box<dyn VFile>,
    path: PathBuf,
    len: u64,
    last_batch: u64,
    /// A renamed spare (zeros to overwrite), not a file that grows with each record.
    preallocated: bool,
}

impl WalWriter {
    /// A writer whose first batch will be `last_batch + 1`; everything up to `last_batch` is
    /// already durable (in redb).
    pub(crate) fn new(
        vfs: Arc<dyn Vfs>,
        space: Arc<Space>,
        segments: Arc<Segments>,
        segment_bytes: u64,
        last_batch: u64,
    ) -> WalWriter {
        WalWriter {
            dir: segments.dir.clone(),
            vfs,
            space,
            segments,
            segment_bytes,
            active: None,
            buf: Vec::new(),
            written: last_batch,
            synced: last_batch,
            spare: None,
            spare_failed: false,
        }
    }

    /// Starts preparing the next segment if none is, once the log is in use; switches from a
    /// growing segment to a ready spare at the next batch.
    fn tend_spare(&mut self) {
        let Some(active) = &self.active else { return };
        if self.spare.is_none()
            && !self.spare_failed
            && active.len >= SPARE_AFTER_BYTES.min(self.segment_bytes)
            && self.space.has_room_for(self.segment_bytes)
        {
            let (dir, bytes) = (self.dir.clone(), self.segment_bytes);
            let vfs = self.vfs.clone();
            self.spare = std::thread::Builder::new()
                .name("herald-wal-spare".into())
                .spawn(move || prepare_spare(&*vfs, &dir, bytes))
                .ok();
        }
    }

    /// Appends (and syncs, if `sync`) `batch`'s record. Fails with an `ENOSPC`-kind error
    /// only when nothing of the record remains and the store may go on (the full state, see
    /// `space.rs`); any other error leaves the log in an unknown state.
    fn append(&mut self, batch: u64, changes: &Changes, sync: bool) -> io::Result<u64> {
        if batch != self.written + 1 {
            // The batch before it was refused for lack of space, and this one read its writes
            // (the writer's pipeline): it is refused too, and the writer renumbers.
            return Err(full_error("an earlier batch was refused: the disk is full"));
        }
        if !self.space.probe() || !self.space.has_room() {
            return Err(full_error("writes are refused until space is freed"));
        }
        match self.append_record(batch, changes, sync) {
            Err(err) if is_no_space(&err) => {
                self.space.ran_out();
                Err(err)
            }
            other => other,
        }
    }

    fn append_record(&mut self, batch: u64, changes: &Changes, sync: bool) -> io::Result<u64> {
        let spare_ready = self.spare.as_ref().is_some_and(JoinHandle::is_finished);
        if self.active.as_ref().is_none_or(|a| {
            a.len >= self.segment_bytes || (!a.preallocated && spare_ready && a.len > 0)
        }) {
            self.rotate(batch)?;
        }
        self.buf.clear();
        encode(&mut self.buf, batch, self.synced, changes);
        let active = self.active.as_mut().expect("a segment is open");
        if let Err(err) = active.file.write_at(active.len, &self.buf) {
            // Leave no partial record behind for a later append to follow. Out of space with
            // the tail cut back, nothing of the record was made durable and the log is as it
            // was: the store refuses writes until space returns. Otherwise it fails.
            let cut = active.file.set_len(active.len);
            return match cut {
                Ok(()) => Err(err),
                Err(cut) => Err(io::Error::other(format!(
                    "{err}; then cutting the log's tail back failed: {cut}"
                ))),
            };
        }
        if sync {
            if let Err(err) = active.file.sync_data() {
                let _ = active.file.set_len(active.len);
                return Err(sync_failed(err));
            }
        }
        let appended = self.buf.len() as u64;
        self.space.spent(appended);
        active.len += appended;
        active.last_batch = batch;
        self.written = batch;
        if sync {
            self.synced = batch;
        }
        if self.buf.capacity() > BUFFER_KEEP_BYTES {
            self.buf = Vec::new();
        }
        self.tend_spare();
        Ok(appended)
    }

    fn sync(&mut self) -> io::Result<()> {
        if let Some(active) = &self.active {
            if self.synced < self.written {
                active.file.sync_data().map_err(sync_failed)?;
            }
        }
        self.synced = self.written;
        Ok(())
    }

    /// Closes the active segment (synced, so only the newest segment can end in a torn
    /// record) and starts a new one whose first record is `first_batch`.
    fn rotate(&mut self, first_batch: u64) -> io::Result<()> {
        self.sync()?;
        if let Some(old) = self.active.take() {
            self.segments.close(old.path, old.last_batch);
        }
        let path = segment_path(&self.dir, first_batch);
        // A prepared spare if one is ready, else a new, empty file (never waiting for a spare
        // still being written: the next batch after it is ready moves into it). A spare that
        // failed only costs the preallocation.
        let ready = self.spare.take_if(|h| h.is_finished());
        let spare = match ready.map(JoinHandle::join) {
            Some(Ok(Ok(spare))) => self.vfs.rename(&spare, &path).is_ok(),
            Some(_) => {
                self.spare_failed = true;
                let _ = remove_stale_spare(&*self.vfs, &self.dir); // whatever part of it was written
                false
            }
            None => false,
        };
        let how = if spare {
            Open::Existing
        } else {
            Open::CreateNew
        };
        let file = self.vfs.open(&path, how)?;
        // The new file's name must be durable before any record in it is acknowledged.
        if let Err(err) = self.vfs.sync_dir(&self.dir) {
            let _ = self.vfs.remove_file(&path);
            return Err(sync_failed(err));
        }
        self.active = Some(Active {
            file,
            path,
            len: 0,
            last_batch: first_batch.saturating_sub(1),
            preallocated: spare,
        });
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.sync()?;
        if let Some(old) = self.active.take() {
            self.segments.close(old.path, old.last_batch);
        }
        if let Some(spare) = self.spare.take() {
            let _ = spare.join(); // ready or failed, the file goes
            remove_stale_spare(&*self.vfs, &self.dir)?;
        }
        Ok(())
    }
}

/// Writes the spare segment: `bytes` of zeros, synced with its size, so that writing into it
/// later changes no file metadata. Returns its path.
fn prepare_spare(vfs: &dyn Vfs, dir: &Path, bytes: u64) -> io::Result<PathBuf> {
    const CHUNK: usize = 1 << 20;
    let path = dir.join(SPARE_NAME);
    // A retired segment is already written to its full size and synced: reuse it.
    for slot in 0..RECYCLED_MAX {
        if vfs.rename(&recycled_path(dir, slot), &path).is_ok() {
            return Ok(path);
        }
    }
    let written = vfs.open(&path, Open::Truncate).and_then(|file| {
        let zeros = vec![0u8; CHUNK];
        let mut written = 0;
        while written < bytes {
            let n = (bytes - written).min(CHUNK as u64) as usize;
            file.write_at(written, &zeros[..n])?;
            written += n as u64;
        }
        file.sync_data()
    });
    if let Err(err) = written {
        // A partial spare would hold the disk's last free bytes until the next rotation, and
        // a checkpoint running out of space meanwhile fails the store.
        let _ = vfs.remove_file(&path);
        return Err(err);
    }
    Ok(path)
}

/// Deletes a spare segment and a recycled one (they hold no record that is not in redb): what
/// a crash left behind, or at close.
pub(crate) fn remove_stale_spare(vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
    let recycled = (0..RECYCLED_MAX).map(|slot| recycled_path(dir, slot));
    let names = [dir.join(SPARE_NAME), dir.join(RECYCLED_OLD_NAME)];
    for path in names.into_iter().chain(recycled) {
        match vfs.remove_file(&path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
    }
    Ok(())
}

/// Hands a batch of a replicated store's own to its replicator, before the local log: only an
/// accepted batch may reach the log (and so ever be replayed here).
fn replicate(
    replicator: &crate::replicator::ReplicatorSlot,
    layer: &Layer,
    record: &mut Vec<u8>,
) -> Result<(), StorageError> {
    let (Some(index), Some(replicator)) = (layer.replicate, replicator.get()) else {
        return Ok(());
    };
    record.clear();
    encode(record, layer.batch, 0, &layer.changes);
    let result = replicator.replicate(index, record);
    if record.capacity() > BUFFER_KEEP_BYTES {
        *record = Vec::new();
    }
    result
}

/// What the writer asks of the log thread.
pub(crate) enum LogRequest {
    /// Log this batch, synced if `sync`.
    Append { layer: Arc<Layer>, sync: bool },
    /// Make everything logged so far durable.
    Sync,
}

/// The log thread: encodes, writes and syncs batches in order, one reply per request, so the
/// writer can run the next batch's jobs while this one is being synced. After the first
/// failure it refuses every later request with that error (what reached the disk after a
/// failed write or fsync is unknown). When the writer hangs up, it syncs and closes the active
/// segment.
pub(crate) struct LogThread {
    pub(crate) requests: SyncSender<LogRequest>,
    pub(crate) replies: Receiver<Result<(), StorageError>>,
    pub(crate) handle: JoinHandle<Result<(), StorageError>>,
}

impl LogThread {
    pub(crate) fn spawn(
        wal: Wal,
        metrics: Arc<Metrics>,
        replicator: crate::replicator::ReplicatorSlot,
    ) -> io::Result<LogThread> {
        // The writer has at most one request outstanding while it prepares the next one.
        let (requests, receiver) = mpsc::sync_channel(2);
        let (sender, replies) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("herald-wal".into())
            .spawn(move || serve(wal, receiver, sender, &metrics, &replicator))?;
        Ok(LogThread {
            requests,
            replies,
            handle,
        })
    }
}

fn serve(
    mut wal: Wal,
    requests: Receiver<LogRequest>,
    replies: Sender<Result<(), StorageError>>,
    metrics: &Metrics,
    replicator: &crate::replicator::ReplicatorSlot,
) -> Result<(), StorageError> {
    let mut failed: Option<StorageError> = None;
    let mut record = Vec::new();
    let on_disk = matches!(wal, Wal::File(_));
    for request in requests {
        let started = Instant::now();
        let result = match &failed {
            Some(err) => Err(err.clone()),
            None => match request {
                LogRequest::Append { layer, sync } => replicate(replicator, &layer, &mut record)
                    .and_then(|()| {
                        wal.append(layer.batch, &layer.changes, sync)
                            .map(|bytes| {
                                metrics.log_appended(bytes);
                                if sync && on_disk {
                                    metrics.log_synced(started.elapsed());
                                }
                            })
                            .map_err(|err| {
                                if is_no_space(&err) {
                                    StorageError::Full(err.to_string())
                                } else {
                                    StorageError::from(err)
                                }
                            })
                    }),
                LogRequest::Sync => wal
                    .sync()
                    .map(|()| {
                        if on_disk {
                            metrics.log_synced(started.elapsed());
                        }
                    })
                    .map_err(StorageError::from),
            },
        };
        match &result {
            // A replica's refusal leaves the log as it was (`replication.rs`), and so does a
            // full disk (`WalWriter::append`), unless the replicated log had already accepted
            // the batch: then this node's log lacks a batch the cluster has, and it stops.
            Err(StorageError::Full(_)) if replicator.get().is_none() => {}
            Err(StorageError::Unavailable(_)) | Ok(()) => {}
            Err(err) => {
                failed.get_or_insert_with(|| err.clone());
            }
        }
        if replies.send(result).is_err() {
            break;
        }
    }
    match failed {
        Some(err) => Err(err),
        None => Ok(wal.finish()?),
    }
}

#[cfg(test)]
mod tests;
