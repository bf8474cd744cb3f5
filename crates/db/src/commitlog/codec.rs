//! The commit-log record's byte format: `ts (u64 BE)` then the JSON record
//! `{"seq","ts","changes":[{"collection","id","op","version","before","after"}]}`, where a
//! missing image is `null`. It is on disk, so it must not change (the tests pin it).

use crate::error::DbError;
use crate::txn::{Change, ChangeOp, Commit};
use herald_value::Value;

/// The reference encoding of the log record (serde, from the documents; test only): the
/// writer's [`encode_record`] must match it byte for byte.
#[cfg(test)]
#[derive(serde::Serialize)]
struct LoggedChange<'a> {
    collection: &'a str,
    id: &'a str,
    op: &'static str,
    version: u64,
    before: &'a Option<Value>,
    after: &'a Option<Value>,
}

#[cfg(test)]
#[derive(serde::Serialize)]
struct LogRecord<'a> {
    seq: u64,
    ts: u64,
    changes: Vec<LoggedChange<'a>>,
}

/// `ts (u64 BE)` then the JSON record `{"seq","ts","changes":[...]}`.
#[cfg(test)]
fn encode_reference(seq: u64, ts: u64, changes: &[Change]) -> Vec<u8> {
    let changes = changes
        .iter()
        .map(|c| LoggedChange {
            collection: &c.collection,
            id: &c.id,
            op: c.op.as_str(),
            version: c.version,
            before: &c.before,
            after: &c.after,
        })
        .collect();
    let mut out = ts.to_be_bytes().to_vec();
    serde_json::to_writer(&mut out, &LogRecord { seq, ts, changes }).expect("JSON");
    out
}

/// The stored records of a change's before- and after-image (`encode_doc`: version ++ JSON).
pub(crate) type StoredImages = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What `encode_reference` writes, with each image's JSON copied from its stored record
/// (which `encode_doc` serialized from the same `Value`, so the bytes are the same).
pub(crate) fn encode_record(
    seq: u64,
    ts: u64,
    changes: &[Change],
    images: &[StoredImages],
) -> Vec<u8> {
    use std::io::Write as _;
    let image_bytes: usize = images
        .iter()
        .map(|(b, a)| b.as_ref().map_or(0, Vec::len) + a.as_ref().map_or(0, Vec::len))
        .sum();
    let mut out = Vec::with_capacity(64 + image_bytes + 96 * changes.len());
    out.extend_from_slice(&ts.to_be_bytes());
    let image = |out: &mut Vec<u8>, stored: &Option<Vec<u8>>| match stored {
        Some(record) => out.extend_from_slice(&record[8..]),
        None => out.extend_from_slice(b"null"),
    };
    write!(out, "{{\"seq\":{seq},\"ts\":{ts},\"changes\":[").expect("Vec");
    for (i, (c, (before, after))) in changes.iter().zip(images).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"collection\":");
        serde_json::to_writer(&mut out, &c.collection).expect("JSON");
        out.extend_from_slice(b",\"id\":");
        serde_json::to_writer(&mut out, &c.id).expect("JSON");
        write!(
            out,
            ",\"op\":\"{}\",\"version\":{},\"before\":",
            c.op.as_str(),
            c.version
        )
        .expect("Vec");
        image(&mut out, before);
        out.extend_from_slice(b",\"after\":");
        image(&mut out, after);
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

/// A record as read back (the `ts` member is not needed: its value leads the record).
#[derive(serde::Deserialize)]
struct StoredRecord {
    seq: u64,
    changes: Vec<StoredChange>,
}

#[derive(serde::Deserialize)]
struct StoredChange {
    collection: String,
    id: String,
    op: ChangeOp,
    version: u64,
    /// `null` (no document) reads as `None`.
    before: Option<Value>,
    after: Option<Value>,
}

/// The JSON of a stored record (after its leading commit time).
fn json_part(record: &[u8]) -> Result<&[u8], DbError> {
    record
        .get(8..)
        .ok_or_else(|| DbError::Corrupt("log record shorter than its time".into()))
}

/// A stored record as JSON.
pub(crate) fn decode_json(record: &[u8]) -> Result<Value, DbError> {
    serde_json::from_slice(json_part(record)?)
        .map_err(|e| DbError::Corrupt(format!("log record: {e}")))
}

/// A stored record as the commit it records (`bytes` 0: it was not measured in memory).
pub(crate) fn decode_commit(record: &[u8]) -> Result<Commit, DbError> {
    let r: StoredRecord = serde_json::from_slice(json_part(record)?)
        .map_err(|e| DbError::Corrupt(format!("log record: {e}")))?;
    let changes = r
        .changes
        .into_iter()
        .map(|c| Change {
            collection: c.collection,
            id: c.id,
            op: c.op,
            version: c.version,
            before: c.before,
            after: c.after,
        })
        .collect();
    Ok(Commit {
        seq: r.seq,
        changes,
        bytes: 0,
    })
}

/// The commit time at the start of a stored record (0 if it is too short to hold one).
pub(crate) fn record_ts(record: &[u8]) -> u64 {
    record
        .get(..8)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The borrowed encoding writes exactly what the `json!` form did (the commit log's format
    /// is on disk, so it must not change).
    #[test]
    fn log_record_format_is_unchanged() {
        let changes = vec![
            Change {
                collection: "c".into(),
                id: "a".into(),
                op: ChangeOp::Update,
                version: 2,
                before: Some(json!({"_id": "a", "n": 1, "z": [1, {"b": null}]})),
                after: Some(json!({"_id": "a", "n": 2})),
            },
            Change {
                collection: "c/x/d".into(),
                id: "b\"q".into(),
                op: ChangeOp::Delete,
                version: 1,
                before: Some(json!({"_id": "b\"q"})),
                after: None,
            },
        ];
        let old: Vec<Value> = changes
            .iter()
            .map(|c| {
                json!({"collection": c.collection, "id": c.id, "op": c.op.as_str(), "version": c.version,
                       "before": c.before, "after": c.after})
            })
            .collect();
        let mut expected = 77u64.to_be_bytes().to_vec();
        serde_json::to_writer(&mut expected, &json!({"seq": 9, "ts": 77, "changes": old})).unwrap();
        assert_eq!(encode_reference(9, 77, &changes), expected);
    }

    /// A record reads back as the commit it was written from (a missing image stays missing).
    #[test]
    fn a_record_decodes_to_its_commit() {
        let changes = vec![Change {
            collection: "c".into(),
            id: "a".into(),
            op: ChangeOp::Insert,
            version: 1,
            before: None,
            after: Some(json!({"_id": "a", "z": 1, "b": [null]})),
        }];
        let commit = decode_commit(&encode_reference(4, 99, &changes)).unwrap();
        assert_eq!(commit.seq, 4);
        let c = &commit.changes[0];
        assert_eq!(
            (c.collection.as_str(), c.id.as_str(), c.op),
            ("c", "a", ChangeOp::Insert)
        );
        assert_eq!(
            (c.version, &c.before, &c.after),
            (1, &None, &changes[0].after)
        );
        assert_eq!(record_ts(&encode_reference(4, 99, &changes)), 99);
        assert!(decode_commit(b"short").is_err());
        let mut unknown_op = 99u64.to_be_bytes().to_vec();
        unknown_op.extend_from_slice(br#"{"seq":4,"ts":99,"changes":[{"collection":"c","id":"a","op":"x","version":1,"before":null,"after":null}]}"#);
        assert!(matches!(
            decode_commit(&unknown_op),
            Err(DbError::Corrupt(_))
        ));
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::from),
            "[a-z\"\\\\\u{0}-\u{1f}\u{e9}\u{1f600}]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::vec(("[a-z\"\u{e9}]{0,4}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The log record built from the stored records is byte for byte the one serialized
        /// from the documents, with the before-image parsed back from its stored record as the
        /// writer does (so serializing a parsed stored document gives back its bytes).
        #[test]
        fn the_record_from_stored_images_is_the_serialized_one(
            before in proptest::option::of(json_value()),
            after in proptest::option::of(json_value()),
            id in "[a-z\"\u{e9}/]{1,6}",
            version in 0u64..u64::MAX,
            seq in 0u64..u64::MAX,
            ts in 0u64..u64::MAX,
        ) {
            let before_stored = before.as_ref().map(|d| crate::layout::encode_doc(version, d));
            let after_stored = after.as_ref().map(|d| crate::layout::encode_doc(version, d));
            let change = Change {
                collection: "c/x\"y".into(),
                id,
                op: ChangeOp::Update,
                version,
                before: before_stored
                    .as_ref()
                    .map(|b| crate::layout::decode_doc(b).unwrap().1),
                after,
            };
            let changes = vec![change.clone(), change];
            let images = vec![
                (before_stored.clone(), after_stored.clone()),
                (before_stored, after_stored),
            ];
            proptest::prop_assert_eq!(
                encode_record(seq, ts, &changes, &images),
                encode_reference(seq, ts, &changes)
            );
        }
    }
}
