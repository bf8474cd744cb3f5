//! Document limits: nesting depth and encoded size, checked before anything is stored.

use serde_json::Value;

/// Default largest document, in bytes of compact JSON.
pub const DOC_BYTES_MAX: usize = 1024 * 1024;
/// Default deepest nesting of objects and arrays (the top-level document is depth 1).
pub const DOC_DEPTH_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocumentLimits {
    pub bytes_max: usize,
    pub depth_max: usize,
}

impl Default for DocumentLimits {
    fn default() -> Self {
        DocumentLimits {
            bytes_max: DOC_BYTES_MAX,
            depth_max: DOC_DEPTH_MAX,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("a document must be a JSON object")]
    NotAnObject,
    #[error("document nests deeper than {0} levels")]
    TooDeep(usize),
    #[error("document is {size} bytes, over the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("field name '{0}' is not allowed: {1}")]
    BadFieldName(String, &'static str),
}

/// Checks that `doc` is an object within the depth and size limits, with storable field names.
/// Field names may not be empty, contain '.' or NUL, or start with '$' (those would be ambiguous
/// with paths and operators).
pub fn check_document(doc: &Value, limits: &DocumentLimits) -> Result<(), DocumentError> {
    if !doc.is_object() {
        return Err(DocumentError::NotAnObject);
    }
    let size = walk(doc, 1, limits.depth_max)?;
    if size > limits.bytes_max {
        return Err(DocumentError::TooLarge {
            size,
            max: limits.bytes_max,
        });
    }
    Ok(())
}

/// Returns an upper-bound estimate of the compact JSON size (strings counted without escapes).
fn walk(v: &Value, depth: usize, depth_max: usize) -> Result<usize, DocumentError> {
    match v {
        Value::Null => Ok(4),
        Value::Bool(_) => Ok(5),
        Value::Number(_) => Ok(20),
        Value::String(s) => Ok(s.len() + 2),
        Value::Array(items) => {
            if depth > depth_max {
                return Err(DocumentError::TooDeep(depth_max));
            }
            let mut n = 2;
            for item in items {
                n += 1 + walk(item, depth + 1, depth_max)?;
            }
            Ok(n)
        }
        Value::Object(map) => {
            if depth > depth_max {
                return Err(DocumentError::TooDeep(depth_max));
            }
            let mut n = 2;
            for (k, item) in map {
                check_field_name(k)?;
                n += k.len() + 4 + walk(item, depth + 1, depth_max)?;
            }
            Ok(n)
        }
    }
}

fn check_field_name(k: &str) -> Result<(), DocumentError> {
    let why = if k.is_empty() {
        "empty"
    } else if k.starts_with('$') {
        "starts with '$'"
    } else if k.contains('.') {
        "contains '.'"
    } else if k.contains('\0') {
        "contains NUL"
    } else {
        return Ok(());
    };
    Err(DocumentError::BadFieldName(k.to_string(), why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_limit() {
        let limits = DocumentLimits {
            bytes_max: 1 << 20,
            depth_max: 3,
        };
        assert!(check_document(&json!({"a": {"b": [1]}}), &limits).is_ok());
        assert_eq!(
            check_document(&json!({"a": {"b": [[1]]}}), &limits),
            Err(DocumentError::TooDeep(3))
        );
    }

    #[test]
    fn size_limit_and_names() {
        let limits = DocumentLimits {
            bytes_max: 100,
            depth_max: 8,
        };
        assert!(matches!(
            check_document(&json!({"a": "x".repeat(200)}), &limits),
            Err(DocumentError::TooLarge { .. })
        ));
        assert_eq!(
            check_document(&json!([1]), &limits),
            Err(DocumentError::NotAnObject)
        );
        assert!(matches!(
            check_document(&json!({"a": {"$set": 1}}), &limits),
            Err(DocumentError::BadFieldName(..))
        ));
        assert!(matches!(
            check_document(&json!({"a.b": 1}), &limits),
            Err(DocumentError::BadFieldName(..))
        ));
    }
}
