//! How documents, index entries, the commit log and metadata are laid out as bytes in the
//! storage tables. The only place that knows the byte formats.
//!
//! - `docs`:  `collection 0x00 id` -> `version (u64 BE) ++ document JSON`
//! - `index`: `collection 0x00 index-name 0x00 encoded-values ++ id` -> `id`
//!   (encoded values use `herald_value::encode_key`, prefix-free and order-preserving, so a
//!   range over one index returns documents in value order, ties in id order)
//! - `log`:   `seq (u64 BE)` -> commit record JSON
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

/// A full index key: prefix, the encoded values, then the id (which makes the key unique).
pub fn index_key(prefix: &[u8], encoded: &[u8], id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + encoded.len() + id.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(encoded);
    k.extend_from_slice(id.as_bytes());
    k
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

pub fn log_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
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
