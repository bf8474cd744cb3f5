//! The records of the replicated log topic (`<cluster>.log`, one partition) and their byte
//! format. Every node reads them in the same order and decides with [`crate::arbiter`] what
//! each one means.
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `HRLG` |
//! | 1 | kind: 1 claim, 2 data |
//! | 8 | epoch (big-endian) |
//! | claim: 2 + n, 2 + m | node id, the node's HTTP URL (length-prefixed UTF-8) |
//! | data: 8, rest | replication index, the storage batch record (`herald_storage::apply_record`) |

use std::fmt;

const MAGIC: [u8; 4] = *b"HRLG";
const CLAIM: u8 = 1;
const DATA: u8 = 2;
/// Node ids and URLs are at most this long (they are in every claim).
pub const NAME_BYTES_MAX: usize = 1024;

/// One record of the log.
#[derive(Clone, PartialEq, Eq)]
pub enum Record {
    /// `node` asks to be the primary of `epoch` (accepted if no claim before it in the log
    /// had this epoch or a higher one).
    Claim {
        epoch: u64,
        node: String,
        url: String,
    },
    /// A storage batch the primary of `epoch` committed, with its replication index.
    Data {
        epoch: u64,
        index: u64,
        batch: Vec<u8>,
    },
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Claim { epoch, node, url } => {
                write!(
                    f,
                    "Claim {{ epoch: {epoch}, node: {node:?}, url: {url:?} }}"
                )
            }
            Record::Data {
                epoch,
                index,
                batch,
            } => write!(
                f,
                "Data {{ epoch: {epoch}, index: {index}, batch: {} bytes }}",
                batch.len()
            ),
        }
    }
}

/// Bytes on the log topic that are not a record this build knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a Herald log record: {0}")]
pub struct BadRecord(pub &'static str);

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&MAGIC);
        match self {
            Record::Claim { epoch, node, url } => {
                out.push(CLAIM);
                out.extend_from_slice(&epoch.to_be_bytes());
                for s in [node, url] {
                    let n = s.len().min(NAME_BYTES_MAX);
                    out.extend_from_slice(&(n as u16).to_be_bytes());
                    out.extend_from_slice(&s.as_bytes()[..n]);
                }
            }
            Record::Data {
                epoch,
                index,
                batch,
            } => {
                out.reserve(batch.len() + 16);
                out.push(DATA);
                out.extend_from_slice(&epoch.to_be_bytes());
                out.extend_from_slice(&index.to_be_bytes());
                out.extend_from_slice(batch);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, BadRecord> {
        let rest = bytes.strip_prefix(&MAGIC).ok_or(BadRecord("no magic"))?;
        let (&kind, rest) = rest.split_first().ok_or(BadRecord("no kind"))?;
        let (epoch, rest) = take_u64(rest)?;
        match kind {
            CLAIM => {
                let (node, rest) = take_str(rest)?;
                let (url, rest) = take_str(rest)?;
                if !rest.is_empty() {
                    return Err(BadRecord("trailing bytes after a claim"));
                }
                Ok(Record::Claim { epoch, node, url })
            }
            DATA => {
                let (index, rest) = take_u64(rest)?;
                Ok(Record::Data {
                    epoch,
                    index,
                    batch: rest.to_vec(),
                })
            }
            _ => Err(BadRecord("unknown kind")),
        }
    }
}

fn take_u64(bytes: &[u8]) -> Result<(u64, &[u8]), BadRecord> {
    if bytes.len() < 8 {
        return Err(BadRecord("truncated number"));
    }
    let (n, rest) = bytes.split_at(8);
    Ok((u64::from_be_bytes(n.try_into().expect("8 bytes")), rest))
}

fn take_str(bytes: &[u8]) -> Result<(String, &[u8]), BadRecord> {
    if bytes.len() < 2 {
        return Err(BadRecord("truncated string length"));
    }
    let n = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    let rest = &bytes[2..];
    if rest.len() < n {
        return Err(BadRecord("truncated string"));
    }
    let s = std::str::from_utf8(&rest[..n]).map_err(|_| BadRecord("string is not UTF-8"))?;
    Ok((s.to_string(), &rest[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let records = [
            Record::Claim {
                epoch: 7,
                node: "n1".into(),
                url: "http://127.0.0.1:7070".into(),
            },
            Record::Data {
                epoch: u64::MAX,
                index: 42,
                batch: vec![1, 2, 3],
            },
            Record::Data {
                epoch: 1,
                index: 1,
                batch: vec![],
            },
        ];
        for r in records {
            let bytes = r.encode();
            assert_eq!(Record::decode(&bytes).unwrap(), r);
            for cut in 0..bytes.len() {
                if let Ok(shorter) = Record::decode(&bytes[..cut]) {
                    // Only a data record's batch may be cut without the framing noticing;
                    // the batch carries its own checksum.
                    assert!(matches!(shorter, Record::Data { .. }), "{shorter:?}");
                }
            }
        }
        assert!(Record::decode(b"HRLG\x09\0\0\0\0\0\0\0\0").is_err());
        assert!(Record::decode(b"nope").is_err());
    }
}
