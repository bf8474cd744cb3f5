//! [`FaultFs`]: an in-memory [`Vfs`] for tests that fails operations on a script and models
//! what a machine keeps across a power loss.
//!
//! # The model
//!
//! Each file has its current bytes (the page cache) and its durable bytes (the disk). A
//! successful `sync_data` makes the current bytes durable. A failed one drops the pages it
//! failed to write, as Linux does: the file's bytes go back to the durable ones, and a later
//! sync succeeds with nothing to write (so a store that retried the sync and carried on would
//! lose data, which the tests detect). Names are the same: creating, renaming and removing a
//! file changes what a listing sees at once, and what survives a power loss only once the
//! directory is synced. [`FaultFs::reboot`] is the power loss: names and bytes go back to their
//! durable state, and every handle from before it (the old store's file system, files and redb
//! backend) fails from then on with `EIO`, so a store dropped after the reboot changes nothing.
//! A reboot may also tear the write-ahead log: each `wal-` file then keeps its unsynced writes
//! in order, the last one cut at a random byte (pages reaching the disk in order, the last one
//! half written).
//!
//! # The script
//!
//! Operations are counted per kind ([`Op`]). [`FaultFs::fail`] fails the `n`th next operation
//! of a kind (and with `sticky`, every later one until [`FaultFs::heal`]) with `ENOSPC` or
//! `EIO`; a failed write first writes a random prefix of its data (a short write).
//! [`FaultFs::set_capacity`] is a disk of that many bytes: writing or allocating beyond it
//! fails with `ENOSPC` (a write after writing what fits), and freeing space (removing files,
//! raising the capacity) makes writes succeed again. Extending a file with `set_len` is sparse
//! and takes no space, as on Linux file systems (redb grows its file that way). Every failure injected is recorded for the test's message.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::vfs::{Open, VFile, Vfs};

/// A kind of file operation, counted separately for [`FaultFs::fail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Writing bytes to a file (also redb's page writes).
    Write,
    /// `fdatasync` of a file (also redb's commits).
    Sync,
    /// Reading a file (the log at recovery, redb's pages).
    Read,
    Rename,
    /// Growing a file without writing: `set_len` beyond its length, `posix_fallocate`.
    Allocate,
    /// Creating (or truncating) a file.
    Create,
    Remove,
    /// Syncing a directory.
    SyncDir,
}

const OPS: usize = 8;

/// What a failed operation returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `ENOSPC`.
    NoSpace,
    /// `EIO`.
    Io,
    /// The machine loses power as the operation starts: it does not happen, it and every later
    /// operation fail with `EIO`, and [`FaultFs::reboot`] is the only way on.
    PowerCut,
}

impl Fault {
    fn error(self) -> io::Error {
        io::Error::from_raw_os_error(match self {
            Fault::NoSpace => libc::ENOSPC,
            Fault::Io | Fault::PowerCut => libc::EIO,
        })
    }
}

#[derive(Debug)]
struct Rule {
    op: Op,
    /// The count of `op` at which it fires.
    at: u64,
    fault: Fault,
    sticky: bool,
}

#[derive(Debug, Default)]
struct MemFile {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Writes since the last sync, in order (offset, length): what a sync copies to `durable`
    /// and a torn reboot replays.
    unsynced: Vec<(u64, u64)>,
    /// The lowest length the file was cut to since the last sync: a sync copies everything
    /// after it (bytes a later extension zeroed).
    cut_to: Option<u64>,
    /// The bytes that take disk space: up to the furthest byte written or allocated (an
    /// extension by `set_len` is sparse, as on Linux file systems, and takes none).
    allocated: u64,
}

/// How [`State::set_len`] changes a file's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resize {
    /// `VFile::set_len`: truncate or extend, sparse.
    SetLen,
    /// `VFile::allocate`: blocks reserved, never shorter.
    Allocate,
    /// redb's `set_len`: sparse, counted as an allocation for the script.
    Sparse,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    next_id: u64,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    files: HashMap<u64, MemFile>,
    counts: [u64; OPS],
    rules: Vec<Rule>,
    capacity: Option<u64>,
    rng: u64,
    injected: Vec<String>,
}

impl State {
    fn next_random(&mut self) -> u64 {
        // xorshift64*: deterministic per seed, good enough to pick a byte.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Counts one `op` on `what`; the fault to inject, if a rule fires.
    fn check(&mut self, op: Op, what: &Path) -> Option<Fault> {
        self.counts[op as usize] += 1;
        let count = self.counts[op as usize];
        let fired = self
            .rules
            .iter()
            .find(|r| r.op == op && (r.at == count || (r.sticky && r.at <= count)))
            .map(|r| r.fault)?;
        self.injected.push(format!(
            "{op:?} #{count} of {} -> {fired:?}",
            what.display()
        ));
        if fired == Fault::PowerCut {
            // Every handle, the caller's included, is from before the reboot now.
            self.epoch += 1;
        }
        Some(fired)
    }

    /// The allocated bytes of every file a name refers to now (an unlinked file's blocks are
    /// free at once, even though a reboot before the directory sync brings the file back).
    fn used(&self) -> u64 {
        let named: std::collections::HashSet<u64> = self.names.values().copied().collect();
        named
            .iter()
            .filter_map(|id| self.files.get(id))
            .map(|f| f.allocated)
            .sum()
    }

    /// How many bytes a file may grow by before the disk is full.
    fn room(&self) -> u64 {
        self.capacity
            .map_or(u64::MAX, |cap| cap.saturating_sub(self.used()))
    }

    fn file(&mut self, id: u64) -> io::Result<&mut MemFile> {
        self.files
            .get_mut(&id)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn write(&mut self, id: u64, path: &Path, offset: u64, data: &[u8]) -> io::Result<()> {
        let len = self.file(id)?.allocated;
        let end = offset + data.len() as u64;
        let room = self.room();
        let mut fault = self.check(Op::Write, path);
        if fault == Some(Fault::PowerCut) {
            return Err(Fault::PowerCut.error());
        }
        let mut keep = data.len();
        if fault.is_some() {
            keep = (self.next_random() % (data.len() as u64 + 1)) as usize;
        }
        if end > len && end - len > room {
            // A full disk: what fits is written, then ENOSPC.
            keep = keep.min((len + room).saturating_sub(offset) as usize);
            fault.get_or_insert(Fault::NoSpace);
            self.injected
                .push(format!("write of {} past capacity", path.display()));
        }
        let file = self.file(id)?;
        let stop = offset as usize + keep;
        if file.data.len() < stop {
            file.data.resize(stop, 0);
        }
        file.data[offset as usize..stop].copy_from_slice(&data[..keep]);
        if keep > 0 {
            file.unsynced.push((offset, keep as u64));
            file.allocated = file.allocated.max(stop as u64);
        }
        match fault {
            Some(f) => Err(f.error()),
            None => Ok(()),
        }
    }

    fn set_len(&mut self, id: u64, path: &Path, len: u64, how: Resize) -> io::Result<()> {
        let (current, allocated) = {
            let f = self.file(id)?;
            (f.data.len() as u64, f.allocated)
        };
        if len > current || (how == Resize::Allocate && len > allocated) {
            let op = if how == Resize::SetLen {
                Op::Write
            } else {
                Op::Allocate
            };
            if let Some(f) = self.check(op, path) {
                return Err(f.error());
            }
            if how == Resize::Allocate && len - allocated > self.room() {
                self.injected
                    .push(format!("allocating {} past capacity", path.display()));
                return Err(Fault::NoSpace.error());
            }
        }
        let file = self.file(id)?;
        if how == Resize::Allocate {
            file.allocated = file.allocated.max(len);
            if len <= current {
                return Ok(());
            }
        }
        file.data.resize(len as usize, 0);
        file.allocated = file.allocated.min(len);
        file.unsynced.retain(|(off, _)| *off < len);
        file.cut_to = Some(file.cut_to.map_or(len, |c| c.min(len)));
        Ok(())
    }

    fn sync(&mut self, id: u64, path: &Path) -> io::Result<()> {
        let fault = self.check(Op::Sync, path);
        if fault == Some(Fault::PowerCut) {
            // The unsynced writes stay as they were, for a torn reboot to replay.
            return Err(Fault::PowerCut.error());
        }
        let file = self.file(id)?;
        let unsynced = std::mem::take(&mut file.unsynced);
        let cut_to = file.cut_to.take();
        match fault {
            // Linux marks the pages it failed to write clean: their contents are gone.
            Some(f) => {
                file.data = file.durable.clone();
                file.allocated = file.allocated.min(file.data.len() as u64);
                Err(f.error())
            }
            None => {
                // Only what changed is copied: a sync costs what it writes, not the file.
                let MemFile { data, durable, .. } = file;
                let from = cut_to
                    .map_or(durable.len(), |c| c as usize)
                    .min(durable.len());
                durable.resize(data.len(), 0);
                let from = from.min(data.len());
                durable[from..].copy_from_slice(&data[from..]);
                for (off, len) in unsynced {
                    let (a, b) = (off as usize, ((off + len) as usize).min(data.len()));
                    if a < b {
                        durable[a..b].copy_from_slice(&data[a..b]);
                    }
                }
                Ok(())
            }
        }
    }
}

/// An in-memory, fault-injecting file system (see the module docs). Cloning gives another
/// handle on the same files; a handle from before a [`reboot`](FaultFs::reboot) is dead.
#[derive(Debug, Clone)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    epoch: u64,
}

impl FaultFs {
    /// An empty file system; `seed` drives short writes and torn reboots.
    pub fn new(seed: u64) -> FaultFs {
        let state = State {
            rng: seed | 1,
            ..State::default()
        };
        FaultFs {
            state: Arc::new(Mutex::new(state)),
            epoch: 0,
        }
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.epoch != self.epoch {
            // A handle from before the reboot: the old machine's disk is gone.
            return Err(Fault::Io.error());
        }
        Ok(state)
    }

    fn guard(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails the `nth` next `op` (1 is the next one) with `fault`, and every later one too if
    /// `sticky` (until [`heal`](FaultFs::heal)). With several rules for one operation, the
    /// first added wins.
    pub fn fail(&self, op: Op, nth: u64, fault: Fault, sticky: bool) {
        let mut state = self.guard();
        let at = state.counts[op as usize] + nth.max(1);
        state.rules.push(Rule {
            op,
            at,
            fault,
            sticky,
        });
    }

    /// Removes every scripted failure (not the capacity).
    pub fn heal(&self) {
        self.guard().rules.clear();
    }

    /// Makes the disk hold `bytes` in all (`None`: unlimited).
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.guard().capacity = bytes;
    }

    /// The bytes every file holds now.
    pub fn used(&self) -> u64 {
        self.guard().used()
    }

    /// How many operations of kind `op` have run.
    pub fn count(&self, op: Op) -> u64 {
        self.guard().counts[op as usize]
    }

    /// Every failure injected so far, oldest first.
    pub fn injected(&self) -> Vec<String> {
        self.guard().injected.clone()
    }

    /// The names in the file system now.
    pub fn names(&self) -> Vec<PathBuf> {
        self.guard().names.keys().cloned().collect()
    }

    /// Power loss and restart: everything not durable is lost (see the module docs), each
    /// `wal-` file torn if `tear`, every scripted failure removed, and every handle from
    /// before dead. Returns the handle to open the store with again.
    pub fn reboot(&self, tear: bool) -> FaultFs {
        let mut state = self.guard();
        state.epoch += 1;
        state.rules.clear();
        state.names = state.durable_names.clone();
        let live: std::collections::HashSet<u64> = state.names.values().copied().collect();
        state.files.retain(|id, _| live.contains(id));
        let torn: Vec<u64> = state
            .names
            .iter()
            .filter(|(p, _)| {
                tear && p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("wal-"))
            })
            .map(|(_, id)| *id)
            .collect();
        let ids: Vec<u64> = state.files.keys().copied().collect();
        for id in ids {
            let cut = if torn.contains(&id) {
                Some(state.next_random())
            } else {
                None
            };
            let file = state.files.get_mut(&id).expect("listed");
            let mut disk = file.durable.clone();
            if let Some(cut) = cut {
                let writes = std::mem::take(&mut file.unsynced);
                for (i, (off, len)) in writes.iter().enumerate() {
                    let len = if i + 1 == writes.len() {
                        cut % (len + 1)
                    } else {
                        *len
                    };
                    let (from, to) = (*off as usize, (*off + len) as usize);
                    let to = to.min(file.data.len());
                    if from >= to {
                        continue;
                    }
                    if disk.len() < to {
                        disk.resize(to, 0);
                    }
                    disk[from..to].copy_from_slice(&file.data[from..to]);
                }
            }
            file.data = disk.clone();
            file.durable = disk;
            file.unsynced.clear();
            file.cut_to = None;
            file.allocated = file.allocated.min(file.data.len() as u64);
        }
        FaultFs {
            state: self.state.clone(),
            epoch: state.epoch,
        }
    }
}

#[derive(Debug)]
struct FaultFile {
    fs: FaultFs,
    id: u64,
    path: PathBuf,
}

impl VFile for FaultFile {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.fs.lock()?.write(self.id, &self.path, offset, data)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.fs.lock()?.sync(self.id, &self.path)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.fs
            .lock()?
            .set_len(self.id, &self.path, len, Resize::SetLen)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.fs
            .lock()?
            .set_len(self.id, &self.path, len, Resize::Allocate)
    }
}

/// redb's file in a [`FaultFs`]: reads, writes, growth and syncs count and fail like any file's.
#[derive(Debug)]
struct FaultBackend(FaultFile);

impl redb::StorageBackend for FaultBackend {
    fn len(&self) -> io::Result<u64> {
        let mut state = self.0.fs.lock()?;
        Ok(state.file(self.0.id)?.data.len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let mut state = self.0.fs.lock()?;
        if let Some(f) = state.check(Op::Read, &self.0.path) {
            return Err(f.error());
        }
        let data = &state.file(self.0.id)?.data;
        let end = offset as usize + out.len();
        let found = data
            .get(offset as usize..end)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        out.copy_from_slice(found);
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0
            .fs
            .lock()?
            .set_len(self.0.id, &self.0.path, len, Resize::Sparse)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, data)
    }
}

impl Vfs for FaultFs {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        self.lock().map(drop)
    }

    fn open(&self, path: &Path, how: Open) -> io::Result<Box<dyn VFile>> {
        let mut state = self.lock()?;
        let existing = state.names.get(path).copied();
        let id = match (how, existing) {
            (Open::Existing, Some(id)) => id,
            (Open::Existing, None) => return Err(io::ErrorKind::NotFound.into()),
            (Open::CreateNew, Some(_)) => return Err(io::ErrorKind::AlreadyExists.into()),
            (Open::Truncate, Some(id)) => {
                if let Some(f) = state.check(Op::Create, path) {
                    return Err(f.error());
                }
                let file = state.file(id)?;
                file.data.clear();
                file.unsynced.clear();
                file.cut_to = Some(0);
                file.allocated = 0;
                id
            }
            (_, None) => {
                if let Some(f) = state.check(Op::Create, path) {
                    return Err(f.error());
                }
                state.next_id += 1;
                let id = state.next_id;
                state.files.insert(id, MemFile::default());
                state.names.insert(path.to_path_buf(), id);
                id
            }
        };
        Ok(Box::new(FaultFile {
            fs: self.clone(),
            id,
            path: path.to_path_buf(),
        }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut state = self.lock()?;
        let id = *state
            .names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if let Some(f) = state.check(Op::Read, path) {
            return Err(f.error());
        }
        Ok(state.file(id)?.data.clone())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let mut state = self.lock()?;
        let id = *state
            .names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(state.file(id)?.data.len() as u64)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        if !state.names.contains_key(from) {
            return Err(io::ErrorKind::NotFound.into());
        }
        if let Some(f) = state.check(Op::Rename, from) {
            return Err(f.error());
        }
        let id = state.names.remove(from).expect("checked");
        if let Some(old) = state.names.insert(to.to_path_buf(), id) {
            drop_if_unnamed(&mut state, old);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        if !state.names.contains_key(path) {
            return Err(io::ErrorKind::NotFound.into());
        }
        if let Some(f) = state.check(Op::Remove, path) {
            return Err(f.error());
        }
        let id = state.names.remove(path).expect("checked");
        drop_if_unnamed(&mut state, id);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock()?;
        if let Some(f) = state.check(Op::SyncDir, dir) {
            return Err(f.error());
        }
        let State {
            names,
            durable_names,
            ..
        } = &mut *state;
        durable_names.retain(|p, _| p.parent() != Some(dir));
        for (p, id) in names.iter() {
            if p.parent() == Some(dir) {
                durable_names.insert(p.clone(), *id);
            }
        }
        let gone: Vec<u64> = state.files.keys().copied().collect();
        for id in gone {
            drop_if_unnamed(&mut state, id);
        }
        Ok(())
    }

    fn free_bytes(&self, _dir: &Path) -> io::Result<Option<u64>> {
        let state = self.lock()?;
        Ok(state.capacity.map(|_| state.room()))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.lock()?;
        Ok(state
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn redb_backend(
        &self,
        path: &Path,
        writable: bool,
    ) -> io::Result<Box<dyn redb::StorageBackend>> {
        let how = match self.len(path) {
            Ok(_) => Open::Existing,
            Err(_) if writable => Open::CreateNew,
            Err(err) => return Err(err),
        };
        self.open(path, how)?;
        let id = *self.lock()?.names.get(path).expect("just opened");
        Ok(Box::new(FaultBackend(FaultFile {
            fs: self.clone(),
            id,
            path: path.to_path_buf(),
        })))
    }
}

/// A file no name refers to any more is gone (no handle here outlives its name in a way the
/// storage relies on: the log removes only closed segments).
fn drop_if_unnamed(state: &mut State, id: u64) {
    let named =
        state.names.values().any(|&v| v == id) || state.durable_names.values().any(|&v| v == id);
    if !named {
        state.files.remove(&id);
    }
}

/// The seeds a fault-schedule test runs: the one in `$seed_env` alone, else `$count_env`
/// (default `default`) consecutive seeds from a base that changes from run to run, printed so
/// that a run can be repeated.
pub fn schedule_seeds(what: &str, count_env: &str, seed_env: &str, default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var(seed_env) {
        return vec![seed
            .parse()
            .unwrap_or_else(|_| panic!("{seed_env} must be a number, got {seed:?}"))];
    }
    let count = std::env::var(count_env)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    let base = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
            .unwrap_or(0),
    );
    eprintln!("{what}: {count} seeds from {base}");
    (base..base + count).collect()
}

/// Runs one schedule on a thread of its own named `name`, so that a hang fails the test after
/// `max` (with the schedule's seed, which the caller prints) instead of stopping it; a panic is
/// an error too.
pub fn run_schedule<T: Send + 'static>(
    name: String,
    max: std::time::Duration,
    schedule: impl FnOnce() -> Result<T, String> + Send + std::panic::UnwindSafe + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let result =
                std::panic::catch_unwind(schedule).unwrap_or_else(|_| Err("panicked".into()));
            let _ = tx.send(result);
        })
        .expect("a thread");
    rx.recv_timeout(max)
        .unwrap_or_else(|_| Err(format!("hung for {max:?}")))
}
