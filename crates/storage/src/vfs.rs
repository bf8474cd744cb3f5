//! The file-operations seam: every file operation of a store on disk (the write-ahead log's
//! segments, spares and directory syncs, the redb file's backend, the disk-space reserve)
//! goes through one [`Vfs`]. Production uses [`RealFs`], a direct mapping to the operating
//! system (one virtual call per system call, nothing else); tests use
//! [`FaultFs`](crate::FaultFs), which keeps files in memory, models the page cache and fails
//! operations on a script.

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

/// How [`Vfs::open`] opens a file for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// An existing file, as it is.
    Existing,
    /// A new file; fails if one exists.
    CreateNew,
    /// Created if missing, emptied if not.
    Truncate,
}

/// A file open for writing. Writes are positional, so a handle holds no cursor.
pub trait VFile: Send + Sync + Debug {
    /// Writes all of `data` at `offset`, or fails; a failure may leave any prefix of `data`
    /// written (a short write followed by the error, as `write_all` does).
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// `fdatasync`: the file's data (and its size) are durable once it returns `Ok`. After an
    /// error, what it failed to write is unknown and must not be assumed durable, even if a
    /// later sync succeeds (Linux drops the pages it could not write).
    fn sync_data(&self) -> io::Result<()>;
    /// Truncates or extends (with zeros) the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Reserves disk blocks for the first `len` bytes (`posix_fallocate`): later writes there
    /// cannot fail for lack of space.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Asks the kernel to start writing the file's dirty pages to disk, without waiting.
    /// Without it the pages that non-durable checkpoints write stay in the page cache (the
    /// kernel's own writeback starts only at gigabytes, or after 30 s) until the next durable
    /// checkpoint's `fsync` flushes them all at once: hundreds of megabytes at high ingest
    /// rates, during which the log's own `fdatasync`s queue behind them and every client write
    /// stalls. Started early, the writes spread over the interval. Best effort: an error only
    /// loses that.
    fn start_writeback(&self) {}
}

/// The file system a store's files live in. `Send + Sync`: the writer, log, checkpointer and
/// spare threads share one.
pub trait Vfs: Send + Sync + Debug + 'static {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    fn open(&self, path: &Path, how: Open) -> io::Result<Box<dyn VFile>>;
    /// The whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The file's length (`NotFound` if it does not exist).
    fn len(&self, path: &Path) -> io::Result<u64>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the creations, renames and deletions of names in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The bytes still free for this process on the file system holding `dir`, if known.
    fn free_bytes(&self, dir: &Path) -> io::Result<Option<u64>>;
    /// redb's backend for the file at `path` (created if missing and `writable`); it takes
    /// redb's lock, so a second open of the same file fails while the first is open.
    fn redb_backend(
        &self,
        path: &Path,
        writable: bool,
    ) -> io::Result<Box<dyn redb::StorageBackend>>;
}

/// Whether `err` means the disk (or the user's quota) is full: nothing more can be written
/// until space is freed, but nothing already written is in doubt.
pub fn is_no_space(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::StorageFull
        || err.kind() == io::ErrorKind::QuotaExceeded
        || matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile(File);

impl VFile for RealFile {
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, data, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let len = libc::off_t::try_from(len).map_err(io::Error::other)?;
            // SAFETY: posix_fallocate only reads its integer arguments; the descriptor stays
            // open for the call (borrowed from `self.0`).
            let rc = unsafe { libc::posix_fallocate(self.0.as_raw_fd(), 0, len) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        self.0.set_len(len)
    }
    fn start_writeback(&self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: sync_file_range only reads its integer arguments; the descriptor stays
            // open for the call (borrowed from `self.0`).
            unsafe {
                libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
    }
}

impl Vfs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn open(&self, path: &Path, how: Open) -> io::Result<Box<dyn VFile>> {
        let mut options = OpenOptions::new();
        options.write(true);
        match how {
            Open::Existing => {}
            Open::CreateNew => {
                options.create_new(true);
            }
            Open::Truncate => {
                options.create(true).truncate(true);
            }
        }
        Ok(Box::new(RealFile(options.open(path)?)))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn free_bytes(&self, dir: &Path) -> io::Result<Option<u64>> {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let path =
                std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
            // SAFETY: statvfs writes only into `stat`, which outlives the call; `path` is a
            // valid NUL-terminated string.
            let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
                return Err(io::Error::last_os_error());
            }
            #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
            Ok(Some(
                (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64),
            ))
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(None)
        }
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
    fn redb_backend(
        &self,
        path: &Path,
        writable: bool,
    ) -> io::Result<Box<dyn redb::StorageBackend>> {
        let file = if writable {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?
        } else {
            OpenOptions::new().read(true).open(path)?
        };
        let backend = redb::backends::FileBackend::new(file).map_err(io::Error::other)?;
        Ok(Box::new(backend))
    }
}
