//! The byte format of an index run: blocks of prefix-compressed entries ([`BlockWriter`],
//! [`BlockCursor`]) and a run's metadata record ([`RunMeta::encode`], [`RunMeta::decode`]).
//!
//! A block is a sequence of entries, each: varint bytes shared with the previous key, varint
//! bytes not shared, those bytes, then varint `0` for a delete or `n + 1` followed by an
//! `n`-byte value. The first entry of a block shares nothing, so a block decodes on its own.
//! Index keys are long and share most of their bytes with their neighbours (collection, index
//! id, field path), so this is what keeps runs small.

use crate::StorageError;

/// A block holds at most this many bytes (unless one entry alone is larger): small enough that
/// positioning a scan inside one (decoding from its start) costs a few microseconds, large
/// enough that the in-memory block index stays ~1/300 of the run.
///
/// Just under 16 KiB, so that the redb leaf holding a block (its 12-byte key, the leaf's header)
/// fits a 16 KiB page: redb sizes pages in powers of two, and a value of 16,384 bytes or more
/// gets a 32 KiB page. Blocks used to be closed once they reached 16 KiB (so they were all a
/// little over it); measured with redb alone, storing 16,384-byte values wrote 4.0 times their
/// bytes to the file, 16,340-byte values 1.01 times.
/// (Unit tests use tiny blocks so that every run spans many.)
pub(crate) const BLOCK_BYTES: usize = if cfg!(test) { 64 } else { (16 << 10) - 256 };

/// What one entry of a run says about its key: `Some(value)` or a delete.
pub(crate) type RunValue = Option<Vec<u8>>;

/// An entry borrowed from a block being decoded.
pub(crate) type EntryRef<'c> = (&'c [u8], Option<&'c [u8]>);

pub(crate) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The bytes [`put_varint`] writes for `n`.
fn varint_len(n: u64) -> usize {
    (64 - (n | 1).leading_zeros() as usize).div_ceil(7)
}

fn get_varint(data: &[u8], pos: &mut usize) -> Result<u64, StorageError> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *data
            .get(*pos)
            .ok_or_else(|| corrupt("a varint runs past the end"))?;
        *pos += 1;
        n |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(corrupt("a varint is longer than 10 bytes"))
}

fn get_len(data: &[u8], pos: &mut usize) -> Result<usize, StorageError> {
    usize::try_from(get_varint(data, pos)?).map_err(|_| corrupt("a length does not fit"))
}

fn get_bytes<'d>(data: &'d [u8], pos: &mut usize, len: usize) -> Result<&'d [u8], StorageError> {
    let end = pos
        .checked_add(len)
        .filter(|&end| end <= data.len())
        .ok_or_else(|| corrupt("an entry runs past the end of its block"))?;
    let bytes = &data[*pos..end];
    *pos = end;
    Ok(bytes)
}

pub(crate) fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupted(format!("index run: {what}"))
}

/// The number of leading bytes `a` and `b` share, eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= len {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < len && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Builds one block at a time.
#[derive(Default)]
pub(crate) struct BlockWriter {
    buf: Vec<u8>,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockWriter {
    /// Appends an entry; keys must come in strictly increasing order within a run.
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let shared = if self.entries == 0 {
            0
        } else {
            common_prefix(key, &self.last_key)
        };
        self.append(key, shared, value);
    }

    /// Appends an entry if the block is empty or the entry keeps it within [`BLOCK_BYTES`];
    /// returns whether it did. [`would_overflow`](Self::would_overflow) and then
    /// [`push`](Self::push) in one, with one comparison of the key with the last one.
    pub(crate) fn push_if_fits(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        if self.entries == 0 {
            self.append(key, 0, value);
            return true;
        }
        let shared = common_prefix(key, &self.last_key);
        if self.buf.len() + encoded_len(key.len(), shared, value) > BLOCK_BYTES {
            return false;
        }
        self.append(key, shared, value);
        true
    }

    fn append(&mut self, key: &[u8], shared: usize, value: Option<&[u8]>) {
        debug_assert!(self.entries == 0 || key > self.last_key.as_slice());
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        self.buf.extend_from_slice(&key[shared..]);
        match value {
            None => put_varint(&mut self.buf, 0),
            Some(value) => {
                put_varint(&mut self.buf, value.len() as u64 + 1);
                self.buf.extend_from_slice(value);
            }
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
    }

    /// Whether appending this entry would take a non-empty block over [`BLOCK_BYTES`].
    #[cfg(test)]
    pub(crate) fn would_overflow(&self, key: &[u8], value: Option<&[u8]>) -> bool {
        if self.entries == 0 {
            return false;
        }
        let shared = common_prefix(key, &self.last_key);
        self.buf.len() + encoded_len(key.len(), shared, value) > BLOCK_BYTES
    }

    /// The block's size so far.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The finished block's bytes; the writer starts the next one with a buffer of a block's size
    /// (grown from empty, it was reallocated a dozen times per block).
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.entries = 0;
        self.last_key.clear();
        std::mem::replace(&mut self.buf, Vec::with_capacity(BLOCK_BYTES))
    }

    /// The last key pushed, which the writer may take (it is forgotten by [`take`](Self::take)
    /// anyway).
    pub(crate) fn last_key_mut(&mut self) -> &mut Vec<u8> {
        &mut self.last_key
    }
}

/// The bytes an entry takes in a block after a key sharing `shared` bytes with it.
fn encoded_len(key_len: usize, shared: usize, value: Option<&[u8]>) -> usize {
    let unshared = key_len - shared;
    let value_len = value.map_or(0, |v| v.len() + varint_len(v.len() as u64 + 1));
    varint_len(shared as u64) + varint_len(unshared as u64) + unshared + value_len.max(1)
}

/// Decodes a block's entries in order, one at a time, reusing one key buffer.
pub(crate) struct BlockCursor {
    data: Vec<u8>,
    pos: usize,
    key: Vec<u8>,
    /// Where the current entry's value lies in `data`; `None` for a delete.
    value: Option<(usize, usize)>,
}

impl BlockCursor {
    pub(crate) fn new(data: Vec<u8>) -> BlockCursor {
        BlockCursor {
            data,
            pos: 0,
            key: Vec::new(),
            value: None,
        }
    }

    /// Moves to the next entry; false at the end of the block.
    pub(crate) fn advance(&mut self) -> Result<bool, StorageError> {
        if self.pos >= self.data.len() {
            return Ok(false);
        }
        let data = &self.data;
        let mut pos = self.pos;
        let shared = get_len(data, &mut pos)?;
        let unshared = get_len(data, &mut pos)?;
        if shared > self.key.len() {
            return Err(corrupt("a key shares more bytes than the previous key has"));
        }
        self.key.truncate(shared);
        self.key
            .extend_from_slice(get_bytes(data, &mut pos, unshared)?);
        let tag = get_len(data, &mut pos)?;
        self.value = match tag {
            0 => None,
            n => {
                let start = pos;
                get_bytes(data, &mut pos, n - 1)?;
                Some((start, pos))
            }
        };
        self.pos = pos;
        Ok(true)
    }

    /// The current entry's key (after a successful [`advance`](BlockCursor::advance)).
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// The current entry's value, `None` for a delete.
    pub(crate) fn value(&self) -> Option<&[u8]> {
        self.value.map(|(start, end)| &self.data[start..end])
    }

    /// The next entry's key (valid until the next call) and value, or `None` at the end.
    pub(crate) fn next_entry(&mut self) -> Result<Option<EntryRef<'_>>, StorageError> {
        if !self.advance()? {
            return Ok(None);
        }
        Ok(Some((self.key(), self.value())))
    }

    /// Every remaining entry, owned.
    pub(crate) fn rest(&mut self) -> Result<Vec<(Vec<u8>, RunValue)>, StorageError> {
        let mut out = Vec::new();
        while let Some((key, value)) = self.next_entry()? {
            out.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        }
        Ok(out)
    }
}

/// What the store keeps about one run, in memory and in the run table: where its blocks are
/// and the first key of each (to find the block that holds a key by binary search).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunMeta {
    /// The run's place in the age order: a newer run's entries hide an older one's.
    pub(crate) order: u64,
    /// The number its blocks are stored under (unique; a merged run gets a new one).
    pub(crate) file: u64,
    /// Merges combine runs of one level into one run of the next.
    pub(crate) level: u32,
    /// Entries (puts and deletes) in the run.
    pub(crate) entries: u64,
    /// Bytes of its blocks.
    pub(crate) bytes: u64,
    /// The first key of every block, in block order.
    pub(crate) first_keys: Vec<Vec<u8>>,
    /// The run's largest key.
    pub(crate) last_key: Vec<u8>,
}

const META_VERSION: u8 = 1;

impl RunMeta {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![META_VERSION];
        for n in [self.file, u64::from(self.level), self.entries, self.bytes] {
            put_varint(&mut out, n);
        }
        put_varint(&mut out, self.first_keys.len() as u64);
        for key in self
            .first_keys
            .iter()
            .chain(std::iter::once(&self.last_key))
        {
            put_varint(&mut out, key.len() as u64);
            out.extend_from_slice(key);
        }
        out
    }

    /// The `file` field alone, to find a run's metadata in a cache without decoding all of it.
    pub(crate) fn decode_file(data: &[u8]) -> Result<u64, StorageError> {
        if data.first() != Some(&META_VERSION) {
            return Err(corrupt("unknown run metadata version"));
        }
        get_varint(data, &mut 1)
    }

    pub(crate) fn decode(order: u64, data: &[u8]) -> Result<RunMeta, StorageError> {
        let file = Self::decode_file(data)?;
        let mut pos = 1;
        get_varint(data, &mut pos)?;
        let level = u32::try_from(get_varint(data, &mut pos)?)
            .map_err(|_| corrupt("a run's level does not fit"))?;
        let entries = get_varint(data, &mut pos)?;
        let bytes = get_varint(data, &mut pos)?;
        let blocks = get_len(data, &mut pos)?;
        if blocks == 0 || blocks > data.len() {
            return Err(corrupt("a run has an impossible number of blocks"));
        }
        let mut first_keys = Vec::with_capacity(blocks);
        for _ in 0..blocks {
            let len = get_len(data, &mut pos)?;
            first_keys.push(get_bytes(data, &mut pos, len)?.to_vec());
        }
        let len = get_len(data, &mut pos)?;
        let last_key = get_bytes(data, &mut pos, len)?.to_vec();
        if pos != data.len() {
            return Err(corrupt("run metadata has trailing bytes"));
        }
        Ok(RunMeta {
            order,
            file,
            level,
            entries,
            bytes,
            first_keys,
            last_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefixes_are_counted_exactly() {
        let naive = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let keys: [&[u8]; 7] = [
            b"",
            b"a",
            b"abcdefgh",
            b"abcdefghi",
            b"abcdefgz",
            b"abcdefghijklmnopq",
            b"abcdefghijklmnopr",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(common_prefix(a, b), naive(a, b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn blocks_round_trip_with_shared_prefixes_and_deletes() {
        let mut w = BlockWriter::default();
        let entries: Vec<(Vec<u8>, RunValue)> = vec![
            (b"a".to_vec(), Some(b"1".to_vec())),
            (b"abc".to_vec(), None),
            (b"abd".to_vec(), Some(Vec::new())),
            (b"b".to_vec(), Some(vec![7; 300])),
        ];
        for (k, v) in &entries {
            w.push(k, v.as_deref());
        }
        let mut cursor = BlockCursor::new(w.take());
        assert_eq!(cursor.rest().unwrap(), entries);
        assert!(w.is_empty());
    }

    #[test]
    fn varint_len_is_what_put_varint_writes() {
        for n in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            assert_eq!(varint_len(n), out.len(), "{n}");
        }
    }

    /// `would_overflow` (and so `push_if_fits`) predicts exactly whether an entry takes the
    /// block over `BLOCK_BYTES` (an estimate that erred high would waste block space, one that
    /// erred low would make blocks that spill into redb's next page size).
    #[test]
    fn would_overflow_is_exact() {
        let mut w = BlockWriter::default();
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut counter = 0u64;
        for _ in 0..5_000 {
            // Strictly increasing keys sharing prefixes of varying length.
            let scale = 4 * next(8);
            counter += 1 + next(1 << scale);
            let mut key = b"collection/index/".to_vec();
            key.extend_from_slice(&counter.to_be_bytes());
            key.extend((0..next(40)).map(|_| b'a' + next(26) as u8));
            let value = match next(4) {
                0 => None,
                1 => Some(vec![1; next(200) as usize]),
                _ => Some(Vec::new()),
            };
            let predicted = w.would_overflow(&key, value.as_deref());
            // `push_if_fits` refuses exactly those entries and leaves the block as it was.
            let mut fits = BlockWriter {
                buf: w.buf.clone(),
                last_key: w.last_key.clone(),
                entries: w.entries,
            };
            assert_eq!(fits.push_if_fits(&key, value.as_deref()), !predicted);
            let before = w.len();
            let was_empty = w.is_empty();
            w.push(&key, value.as_deref());
            if predicted {
                assert_eq!(fits.buf.len(), before);
            } else {
                assert_eq!(fits.buf, w.buf);
            }
            assert_eq!(
                predicted,
                !was_empty && w.len() > BLOCK_BYTES,
                "{before} -> {}",
                w.len()
            );
            if predicted {
                // As the run writer does: the entry starts the next block.
                w.take();
                w.push(&key, value.as_deref());
            }
            if w.len() >= BLOCK_BYTES {
                w.take();
            }
        }
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        let mut w = BlockWriter::default();
        w.push(b"key-one", Some(b"value"));
        w.push(b"key-two", None);
        let block = w.take();
        for cut in 0..block.len() {
            let _ = BlockCursor::new(block[..cut].to_vec()).rest();
        }
        let mut bad = block.clone();
        bad[0] = 9; // the first key claims to share bytes with nothing
        assert_eq!(
            BlockCursor::new(bad).rest().unwrap_err().code(),
            "storage_corrupted"
        );
    }

    #[test]
    fn metadata_round_trips() {
        let meta = RunMeta {
            order: 9,
            file: 12,
            level: 2,
            entries: 1000,
            bytes: 40_000,
            first_keys: vec![b"a".to_vec(), b"m".to_vec()],
            last_key: b"z".to_vec(),
        };
        let bytes = meta.encode();
        assert_eq!(RunMeta::decode_file(&bytes).unwrap(), 12);
        assert_eq!(RunMeta::decode(9, &bytes).unwrap(), meta);
        assert!(RunMeta::decode(9, &bytes[..bytes.len() - 1]).is_err());
    }
}
