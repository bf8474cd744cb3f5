//! Decoding a message into its type, with the stable error code a bad one gets.
//!
//! The types refuse unknown members themselves (`#[serde(deny_unknown_fields)]`); what this
//! module adds is the classification: not JSON is `bad_json` (or `document_too_deep` past the
//! parser's recursion limit), the wrong shape is the type's [`Decode::BAD`] code, an unknown
//! member its [`Decode::UNKNOWN`] code, and a value out of range what [`Decode::check`] says.
//! Members that hold a filter, sort, projection or update stay `serde_json::Value`: the server
//! parses them with herald-query, which has their codes.

use crate::error::ErrorCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;

/// Why a message was refused, with its stable code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
}

impl ProtocolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ProtocolError {
        ProtocolError {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ProtocolError {}

/// A message type of the protocol, decoded with stable error codes.
pub trait Decode: DeserializeOwned {
    /// What the message is, for error messages ("a query", "a write").
    const WHAT: &'static str;
    /// The code of a message of the wrong shape.
    const BAD: ErrorCode = ErrorCode::BadRequest;
    /// The code of a message with a member the type does not know.
    const UNKNOWN: ErrorCode = Self::BAD;
    /// The code of a message that is JSON but not an object.
    const NOT_OBJECT: ErrorCode = ErrorCode::BadRequest;

    /// Checks what serde cannot (lengths, ranges); run after every successful decode.
    fn check(&self) -> Result<(), ProtocolError> {
        Ok(())
    }

    /// Decodes JSON text.
    fn decode(bytes: &[u8]) -> Result<Self, ProtocolError> {
        match first_byte(bytes) {
            Some(b'{') => {}
            // Not an object: say what it is (or that it is not JSON).
            _ => {
                let v = parse_value(bytes)?;
                return Err(not_object::<Self>(&v));
            }
        }
        let out: Self = serde_json::from_slice(bytes).map_err(|e| {
            // A streaming decode meets a wrong member before a syntax error further on; bad
            // JSON is reported as such, whatever else is wrong (only on this error path is the
            // text read twice).
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Err(syntax_error) => syntax(syntax_error),
                Ok(_) => classify::<Self>(e),
            }
        })?;
        out.check()?;
        Ok(out)
    }

    /// Decodes a parsed value (the fixtures, SSE parameters).
    fn decode_value(v: Value) -> Result<Self, ProtocolError> {
        if !v.is_object() {
            return Err(not_object::<Self>(&v));
        }
        // Through text: raw members (`WriteItem`) are only read from text.
        let text = serde_json::to_vec(&v).expect("a Value serializes");
        Self::decode(&text)
    }
}

fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// Parses any JSON value, `bad_json` or `document_too_deep` when it is not valid JSON.
pub fn parse_value(bytes: &[u8]) -> Result<Value, ProtocolError> {
    serde_json::from_slice(bytes).map_err(syntax)
}

fn syntax(e: serde_json::Error) -> ProtocolError {
    // Valid JSON that nests deeper than the parser's recursion limit (128, twice the document
    // limit) is too deep, as a shallower too-deep document is.
    if e.to_string().starts_with("recursion limit exceeded") {
        ProtocolError::new(
            ErrorCode::DocumentTooDeep,
            format!("nests deeper than the document limit: {e}"),
        )
    } else {
        ProtocolError::new(ErrorCode::BadJson, format!("not valid JSON: {e}"))
    }
}

fn not_object<T: Decode>(v: &Value) -> ProtocolError {
    ProtocolError::new(
        T::NOT_OBJECT,
        format!("{} must be a JSON object, got {}", T::WHAT, kind(v)),
    )
}

/// The error of a decode of text that *is* valid JSON: always a shape error. (serde_json says
/// `Syntax` for some shape errors too, such as a number where an enum's string belongs.)
fn classify<T: Decode>(e: serde_json::Error) -> ProtocolError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => syntax(e),
        Category::Syntax | Category::Eof if e.to_string().starts_with("recursion limit") => {
            syntax(e)
        }
        Category::Syntax | Category::Eof | Category::Data => {
            let text = e.to_string();
            // The position is of little use in a one-line message and reads oddly inside the
            // "expected ..." part.
            let text = match (e.line(), text.rfind(" at line ")) {
                (1.., Some(at)) => text[..at].to_string(),
                _ => text,
            };
            // serde's wording for a member the type does not declare: "unknown field `x`,
            // expected ...", said here as "unknown query member 'x' (expected ...)".
            match text
                .strip_prefix("unknown field `")
                .and_then(|rest| rest.split_once("`, "))
            {
                Some((name, expected)) => {
                    let noun = T::WHAT.trim_start_matches("an ").trim_start_matches("a ");
                    ProtocolError::new(
                        T::UNKNOWN,
                        format!("unknown {noun} member '{name}' ({expected})"),
                    )
                }
                None => ProtocolError::new(T::BAD, format!("{}: {text}", T::WHAT)),
            }
        }
    }
}

/// A value's JSON type, for messages ("got an array").
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `deserialize_with` functions that name their member in the error ("'explain': invalid type:
/// string \"x\", expected a boolean"): serde's own messages do not say which member was wrong.
macro_rules! members {
    ($($f:ident: $name:literal => $ty:ty;)*) => {
        $(
            pub(crate) fn $f<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                <$ty as serde::Deserialize>::deserialize(d)
                    .map_err(|e| <D::Error as serde::de::Error>::custom(format_args!("'{}': {}", $name, e)))
            }
        )*
    };
}
pub(crate) use members;

/// A member that may be `null` but must be told from an absent one (`doc: null` is a document
/// the database refuses, not a missing document).
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}
// The error body is decoded like any message (the SDK's tests and clients read it back); its
// impl lives here so that `error` stays below `decode`.
impl Decode for crate::error::ErrorBody {
    const WHAT: &'static str = "an error body";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replies::IndexInfo;

    /// Valid JSON of the wrong shape is the type's code, never `bad_json`, even where
    /// serde_json calls the error a syntax error (a number where an enum's string belongs).
    #[test]
    fn valid_json_of_the_wrong_shape_is_not_bad_json() {
        let e = IndexInfo::decode(br#"{"name":"i","fields":[],"state":1}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
        let e = IndexInfo::decode(br#"{"name":"i","fields":[],"state":"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadJson, "{e}");
        let e = IndexInfo::decode(br#"{"name":"i","fields":[],"state":"sleeping"}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    }
}
