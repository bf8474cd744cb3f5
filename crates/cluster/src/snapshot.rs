//! Snapshots: how a new or wiped node, or one that was down longer than the log's retention,
//! starts without the log's beginning. A running node writes every entry of its store at one
//! snapshot, after the log position it last saved ([`write`]); the new node checks the whole
//! file, installs it into an empty store and starts reading the log at that position
//! ([`install`]), skipping the batches the snapshot already holds by replication index. The
//! server moves the bytes (`GET /v1/cluster/snapshot`).
//!
//! Format: `HSNP`, a `u32` length and the JSON of the position; then entries
//! `table u8, key len u32, value len u32, key, value`; then `0xff`, the entry count `u64` and a
//! CRC-32 of everything before it. All numbers little-endian.

use crate::reader::{read_position, save_position, Position};
use herald_db::{Db, DbError};
use herald_storage::{Store, StoreOptions, Table};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

const MAGIC: &[u8; 4] = b"HSNP";
const END: u8 = 0xff;
/// Bytes of entries per storage job while installing.
const INSTALL_JOB_BYTES: usize = 8 << 20;
/// The JSON header is at most this long.
const HEADER_BYTES_MAX: usize = 1 << 20;

/// What a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The replication index of its last batch.
    pub index: u64,
    pub entries: u64,
    pub bytes: u64,
}

struct Crc<W> {
    inner: W,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Crc<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a snapshot of `db` (whose node keeps its log position in `dir`) to `out`.
pub fn write(dir: &Path, db: &Db, out: impl Write) -> Result<SnapshotInfo, String> {
    let position = read_position(dir)
        .ok_or("this node has not saved a log position yet; ask another node".to_string())?;
    let mut out = Crc {
        inner: BufWriter::new(out),
        crc: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let header = serde_json::to_vec(&position).expect("position JSON");
    let io = |e: io::Error| e.to_string();
    out.write_all(MAGIC).map_err(io)?;
    out.write_all(&(header.len() as u32).to_le_bytes())
        .map_err(io)?;
    out.write_all(&header).map_err(io)?;
    let mut entries = 0u64;
    let index = db
        .for_each_entry(
            |table: Table, key: &[u8], value: &[u8]| -> Result<(), Failed> {
                out.write_all(&[table.index() as u8])?;
                out.write_all(&(key.len() as u32).to_le_bytes())?;
                out.write_all(&(value.len() as u32).to_le_bytes())?;
                out.write_all(key)?;
                out.write_all(value)?;
                entries += 1;
                Ok(())
            },
        )
        .map_err(|e| e.0)?;
    if index < position.log.index {
        return Err(format!(
            "the store (batch {index}) is behind its saved position (batch {})",
            position.log.index
        ));
    }
    out.write_all(&[END]).map_err(io)?;
    out.write_all(&entries.to_le_bytes()).map_err(io)?;
    let crc = out.crc.clone().finalize();
    out.inner.write_all(&crc.to_le_bytes()).map_err(io)?;
    out.inner.flush().map_err(io)?;
    Ok(SnapshotInfo {
        index,
        entries,
        bytes: out.bytes + 4,
    })
}

struct Failed(String);

impl From<DbError> for Failed {
    fn from(e: DbError) -> Failed {
        Failed(e.to_string())
    }
}

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Failed {
        Failed(e.to_string())
    }
}

/// Reads a snapshot, calling `entry` for each entry; fails on anything that does not check.
fn read(
    input: impl Read,
    mut entry: impl FnMut(Table, Vec<u8>, Vec<u8>) -> Result<(), String>,
) -> Result<(Position, u64), String> {
    let mut input = BufReader::new(input);
    let mut crc = crc32fast::Hasher::new();
    let mut take = |n: usize, input: &mut BufReader<_>| -> Result<Vec<u8>, String> {
        let mut buf = vec![0; n];
        input
            .read_exact(&mut buf)
            .map_err(|e| format!("the snapshot ends early: {e}"))?;
        crc.update(&buf);
        Ok(buf)
    };
    if take(4, &mut input)? != MAGIC {
        return Err("not a Herald snapshot".into());
    }
    let len = u32::from_le_bytes(take(4, &mut input)?.try_into().expect("4")) as usize;
    if len > HEADER_BYTES_MAX {
        return Err("the snapshot's header is too long".into());
    }
    let position: Position = serde_json::from_slice(&take(len, &mut input)?)
        .map_err(|e| format!("the snapshot's header: {e}"))?;
    let mut count = 0u64;
    loop {
        let tag = take(1, &mut input)?[0];
        if tag == END {
            break;
        }
        let table = *Table::ALL
            .get(usize::from(tag))
            .ok_or("the snapshot names an unknown table")?;
        let k = u32::from_le_bytes(take(4, &mut input)?.try_into().expect("4")) as usize;
        let v = u32::from_le_bytes(take(4, &mut input)?.try_into().expect("4")) as usize;
        if k + v > herald_storage::ENTRY_BYTES_MAX {
            return Err("the snapshot holds an entry over the size limit".into());
        }
        let (key, value) = (take(k, &mut input)?, take(v, &mut input)?);
        entry(table, key, value)?;
        count += 1;
    }
    let declared = u64::from_le_bytes(take(8, &mut input)?.try_into().expect("8"));
    let mut tail = [0u8; 4];
    input
        .read_exact(&mut tail)
        .map_err(|e| format!("the snapshot ends early: {e}"))?;
    if declared != count || crc.finalize() != u32::from_le_bytes(tail) {
        return Err("the snapshot is damaged (count or checksum)".into());
    }
    Ok((position, count))
}

/// Installs the snapshot in `file` as the store in `dir` (which must hold no store), and saves
/// its position. Checks the whole file first, so a damaged one installs nothing.
pub fn install(dir: &Path, file: &Path) -> Result<SnapshotInfo, String> {
    let open = || std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()));
    read(open()?, |_, _, _| Ok(()))?;
    if dir.join(herald_storage::FILE_NAME).exists() {
        return Err(format!("{} already holds a store", dir.display()));
    }
    let store = Store::open(dir, StoreOptions::default()).map_err(|e| e.to_string())?;
    let mut job: Vec<(Table, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut job_bytes = 0;
    let flush = |job: &mut Vec<(Table, Vec<u8>, Vec<u8>)>| -> Result<(), String> {
        let entries = std::mem::take(job);
        store
            .submit(move |txn| {
                for (table, key, value) in entries {
                    txn.put(table, key, value)?;
                }
                Ok::<_, herald_storage::StorageError>(())
            })
            .map_err(|e| e.to_string())?
            .wait()
            .map_err(|e| e.to_string())
    };
    let mut index = 0;
    let (position, entries) = read(open()?, |table, key, value| {
        if table == Table::Meta && key == herald_storage::STAMP_KEY {
            index = herald_storage::decode_u64(&value).map_err(|e| e.to_string())?;
        }
        job_bytes += key.len() + value.len();
        job.push((table, key, value));
        if job_bytes >= INSTALL_JOB_BYTES {
            job_bytes = 0;
            flush(&mut job)?;
        }
        Ok(())
    })?;
    flush(&mut job)?;
    store.close().map_err(|e| e.to_string())?;
    save_position(dir, position.offset, &position.log).map_err(|e| e.to_string())?;
    Ok(SnapshotInfo {
        index,
        entries,
        bytes: std::fs::metadata(file).map_or(0, |m| m.len()),
    })
}
