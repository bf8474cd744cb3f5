//! How documents, index entries and metadata are laid out as bytes in the storage tables. The
//! commit log's record format is `commitlog/codec.rs`'s, the client mutation ids' is
//! `mutations.rs`'s; every other byte format is here.
//!
//! - `docs`:  `collection 0x00 id` -> `version (u64 BE) ++ document JSON`
//! - `index`: `collection 0x00 index-name 0x00 encoded-values ++ id` -> `0xFF ++ len(id)`
//!   (encoded values use `herald_value::encode_key`, prefix-free and order-preserving, so a
//!   range over one index returns documents in value order, ties in id order; the value says
//!   how long the key's id is, see [`index_value`]; entries written before it hold the id)
//! - `index`, collection-group scope: `*/group 0x00 g:index-name 0x00 encoded-values ++ id 0x00
//!   path` -> `0xFF ++ len(id 0x00 path)`, where `path` is the document's full path
//!   (`rooms/r1/messages/m7`): one entry per document of every collection whose last segment
//!   is `group`, unique by the path, ties in (`_id`, path) order (see [`group_suffix`]). No
//!   collection path starts with `*` (`names.rs`), so these keys never mix with a collection's.
//! - `log`:   `seq (u64 BE)` -> `ts (u64 BE) ++` commit record JSON (see `commitlog/`)
//! - `meta`:  `seq` -> last committed seq; `catalog` -> index catalog JSON; `mutation/...` ->
//!   the client mutation ids of recent commits (their format lives in `mutations.rs`)
//!
//! Collection paths, index names and ids never contain 0x00 (validated at the edge), so the
//! separators are unambiguous and `collection 0x00` is an exact prefix.

use crate::error::DbError;
use serde_json::Value;

pub const META_SEQ: &[u8] = b"seq";
pub const META_CATALOG: &[u8] = b"catalog";

pub fn doc_key(collection: &str, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(collection.len() + id.len() + 1);
    k.extend_from_slice(collection.as_bytes());
    k.push(0);
    k.extend_from_slice(id.as_bytes());
    k
}

/// The prefix of every document key of a collection.
pub fn collection_prefix(collection: &str) -> Vec<u8> {
    let mut k = collection.as_bytes().to_vec();
    k.push(0);
    k
}

/// The id part of a document key.
pub fn id_of_doc_key<'a>(key: &'a [u8], collection: &str) -> Result<&'a str, DbError> {
    std::str::from_utf8(&key[collection.len() + 1..])
        .map_err(|_| DbError::Corrupt("document key is not UTF-8".into()))
}

pub fn encode_doc(version: u64, doc: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&version.to_be_bytes());
    serde_json::to_writer(&mut out, doc).expect("serializing a JSON value cannot fail");
    out
}

/// The version of a stored document record, without parsing its JSON.
pub fn doc_version(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

pub fn decode_doc(bytes: &[u8]) -> Result<(u64, Value), DbError> {
    if bytes.len() < 8 {
        return Err(DbError::Corrupt(
            "document record shorter than its version".into(),
        ));
    }
    let version = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
    let doc = serde_json::from_slice(&bytes[8..])
        .map_err(|e| DbError::Corrupt(format!("document JSON: {e}")))?;
    Ok((version, doc))
}

/// The prefix of every entry of one index of one collection.
pub fn index_prefix(collection: &str, index: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(collection.len() + index.len() + 2);
    k.extend_from_slice(collection.as_bytes());
    k.push(0);
    k.extend_from_slice(index.as_bytes());
    k.push(0);
    k
}

/// What a collection group's index entries and live views are filed under: `*/group`.
pub fn group_scope(group: &str) -> String {
    format!("*/{group}")
}

/// The group name of a [`group_scope`] key, or `None` for a collection path.
pub fn scope_group(scope: &str) -> Option<&str> {
    scope.strip_prefix("*/")
}

/// The id part of a group index entry: `id 0x00 collection/id`. Ids hold no 0x00, so these
/// compare by id first, then by full path: the order of a group query's ties.
pub fn group_suffix(collection: &str, id: &str) -> String {
    let mut s = String::with_capacity(2 * id.len() + collection.len() + 2);
    s.push_str(id);
    s.push('\0');
    s.push_str(collection);
    s.push('/');
    s.push_str(id);
    s
}

/// The (collection, id) a group entry's suffix ([`group_suffix`]) names.
pub fn split_group_suffix(suffix: &str) -> Result<(&str, &str), DbError> {
    let path = suffix
        .split_once('\0')
        .map(|(_, p)| p)
        .ok_or_else(|| DbError::Corrupt("group index entry without a path".into()))?;
    path.rsplit_once('/')
        .ok_or_else(|| DbError::Corrupt("group index entry path without an id".into()))
}

/// A full index key: prefix, the encoded values, then the id (which makes the key unique).
pub fn index_key(prefix: &[u8], encoded: &[u8], id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + encoded.len() + id.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(encoded);
    k.extend_from_slice(id.as_bytes());
    k
}

/// The first byte of an index entry's value in the current format. UTF-8 never starts a
/// character with it, so an older entry, whose value is the id itself, cannot start with it.
const INDEX_VALUE_TAG: u8 = 0xFF;

/// The value of the index entry of document `id`: the length of the id the key ends with
/// (LEB128 after [`INDEX_VALUE_TAG`]), two or three bytes. It was the id itself, which the key
/// already holds: ~30 copies of it per RockBench event in the log, the layers and the runs.
pub fn index_value(id: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(4);
    v.push(INDEX_VALUE_TAG);
    let mut n = id.len();
    loop {
        let byte = (n & 0x7F) as u8;
        n >>= 7;
        if n == 0 {
            v.push(byte);
            return v;
        }
        v.push(byte | 0x80);
    }
}

/// The document id of an index entry, from its key and value (either format).
pub fn index_entry_id<'a>(key: &'a [u8], value: &'a [u8]) -> Result<&'a str, DbError> {
    let corrupt = || DbError::Corrupt("index entry id".into());
    let id = match value.split_first() {
        Some((&INDEX_VALUE_TAG, mut rest)) => {
            let mut len = 0usize;
            let mut shift = 0;
            loop {
                let (&byte, tail) = rest.split_first().ok_or_else(corrupt)?;
                rest = tail;
                len |= usize::from(byte & 0x7F)
                    .checked_shl(shift)
                    .ok_or_else(corrupt)?;
                if byte & 0x80 == 0 {
                    break;
                }
                shift += 7;
                if shift > 28 {
                    return Err(corrupt());
                }
            }
            if !rest.is_empty() || len > key.len() {
                return Err(corrupt());
            }
            &key[key.len() - len..]
        }
        _ => value,
    };
    std::str::from_utf8(id).map_err(|_| corrupt())
}

/// The smallest key strictly greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF; prefix.len() + 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn doc_roundtrip_and_prefixes() {
        let d = json!({"_id": "x", "b": 1, "a": [1.5]});
        let (v, back) = decode_doc(&encode_doc(7, &d)).unwrap();
        assert_eq!(v, 7);
        assert_eq!(back.to_string(), d.to_string());
        assert!(doc_key("a", "x").starts_with(&collection_prefix("a")));
        assert!(!doc_key("a/b/c", "x").starts_with(&collection_prefix("a")));
        assert_eq!(prefix_end(b"ab"), b"ac".to_vec());
        assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
    }
}

#[cfg(test)]
mod index_value_tests {
    use super::{index_entry_id, index_key, index_prefix, index_value};

    #[test]
    fn an_index_entry_gives_back_its_id_in_either_format() {
        let prefix = index_prefix("c", "f:a");
        for id in [
            "",
            "x",
            "g0-123456",
            "é",
            &"i".repeat(127),
            &"j".repeat(128),
            &"k".repeat(20_000),
        ] {
            let key = index_key(&prefix, b"\x05value\x00", id);
            let value = index_value(id);
            assert!(value.len() <= 4, "{}", value.len());
            assert_eq!(index_entry_id(&key, &value).unwrap(), id);
            // Entries written before the length format hold the id itself.
            if !id.is_empty() {
                assert_eq!(index_entry_id(&key, id.as_bytes()).unwrap(), id);
            }
        }
    }

    #[test]
    fn a_damaged_index_value_is_an_error_not_a_panic() {
        let key = index_key(&index_prefix("c", "f:a"), b"v", "abc");
        for value in [
            &[0xFF][..],                                 // no length
            &[0xFF, 0x80],                               // length cut short
            &[0xFF, 50],                                 // longer than the key
            &[0xFF, 3, 0],                               // bytes after the length
            &[0xFF, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], // overlong
        ] {
            assert!(index_entry_id(&key, value).is_err(), "{value:?}");
        }
        // An id cut inside a UTF-8 character.
        let key = index_key(&index_prefix("c", "f:a"), b"v", "é");
        assert!(index_entry_id(&key, &[0xFF, 1]).is_err());
    }
}
