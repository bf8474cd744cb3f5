//! Collection paths and document ids: `rooms/r1/messages` is a collection, `m7` a document in
//! it, `rooms/r1/messages/m7` the document's path. Validated once, at the edge.

use crate::error::DbError;

/// Longest collection path, in bytes.
pub const COLLECTION_PATH_BYTES_MAX: usize = 1024;
/// Most segments in a collection path (`a/b/c` has 3).
pub const COLLECTION_SEGMENTS_MAX: usize = 31;
/// Longest single path segment or document id, in bytes.
pub const SEGMENT_BYTES_MAX: usize = 256;

/// Checks one segment: a collection name or a document id.
pub fn check_segment(s: &str, what: &str) -> Result<(), DbError> {
    let why = if s.is_empty() {
        "is empty"
    } else if s.len() > SEGMENT_BYTES_MAX {
        "is longer than 256 bytes"
    } else if s == "." || s == ".." {
        "cannot be '.' or '..'"
    } else if s.contains('/') {
        "contains '/'"
    } else if s.chars().any(char::is_control) {
        "contains a control character"
    } else if s.starts_with("__") {
        "starts with '__' (reserved)"
    } else if s.contains('*') {
        "contains '*': paths have no wildcards (to query every collection with the same last \
         segment at any depth, such as 'rooms/*/messages', use \"collectionGroup\":\"messages\")"
    } else {
        return Ok(());
    };
    Err(DbError::BadPath(format!(
        "{what} '{}' {why}",
        s.escape_debug()
    )))
}

/// Checks a collection group name: the last segment of the collections it spans
/// (`messages` for `messages`, `rooms/r1/messages`, `a/x/b/y/messages`).
pub fn check_group(group: &str) -> Result<(), DbError> {
    check_segment(group, "collection group name")
}

/// The last segment of a collection path: the group it belongs to.
pub fn group_of(collection: &str) -> &str {
    collection.rsplit('/').next().unwrap_or(collection)
}

/// Checks a collection path such as `rooms/r1/messages` (an odd number of segments).
pub fn check_collection(path: &str) -> Result<(), DbError> {
    if path.len() > COLLECTION_PATH_BYTES_MAX {
        return Err(DbError::BadPath(format!(
            "collection path is longer than {COLLECTION_PATH_BYTES_MAX} bytes"
        )));
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() > COLLECTION_SEGMENTS_MAX {
        return Err(DbError::BadPath(format!(
            "collection path has more than {COLLECTION_SEGMENTS_MAX} segments"
        )));
    }
    if segments.len().is_multiple_of(2) {
        return Err(DbError::BadPath(format!(
            "'{}' names a document, not a collection (a collection path has an odd number of segments)",
            path.escape_debug()
        )));
    }
    for (i, s) in segments.iter().enumerate() {
        check_segment(
            s,
            if i % 2 == 0 {
                "collection name"
            } else {
                "document id"
            },
        )?;
    }
    Ok(())
}

/// Splits a document path `rooms/r1/messages/m7` into (`rooms/r1/messages`, `m7`).
pub fn split_document_path(path: &str) -> Result<(&str, &str), DbError> {
    let (coll, id) = path.rsplit_once('/').ok_or_else(|| {
        DbError::BadPath(format!("'{}' is not a document path", path.escape_debug()))
    })?;
    check_collection(coll)?;
    check_segment(id, "document id")?;
    Ok((coll, id))
}

/// A new document id: 20 random alphanumeric characters (about 119 bits), like Firestore's.
pub fn generate_id() -> String {
    use rand::distributions::Alphanumeric;
    use rand::Rng;
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(20)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(check_collection("rooms").is_ok());
        assert!(check_collection("rooms/r1/messages").is_ok());
        assert!(check_collection("rooms/r1").is_err());
        assert!(check_collection("rooms//m").is_err());
        assert!(check_collection("a/../b").is_err());
        assert!(check_collection("a\u{1}").is_err());
        let e = check_collection("rooms/*/messages")
            .unwrap_err()
            .to_string();
        assert!(e.contains("collectionGroup"), "{e}");
        assert!(check_segment("m*", "document id").is_err());
        assert!(check_group("messages").is_ok());
        assert!(check_group("a/b").is_err());
        assert_eq!(group_of("rooms/r1/messages"), "messages");
        assert_eq!(group_of("messages"), "messages");
        assert_eq!(
            split_document_path("rooms/r1/messages/m7").unwrap(),
            ("rooms/r1/messages", "m7")
        );
        assert!(split_document_path("rooms").is_err());
        assert_eq!(generate_id().len(), 20);
    }
}
