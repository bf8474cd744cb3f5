//! `ApiError`: every failure of an endpoint, rendered as the protocol's error body
//! `{"error":{"code","message","retryable"}}` with the status of its [`ErrorCode`]. The one
//! place library errors (which carry `&'static str` codes) meet the protocol's codes.

use axum::extract::rejection::PathRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_db::DbError;
use herald_protocol::{ErrorBody, ErrorCode, ProtocolError};

#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Which write of a commit or write request the error is about...
    pub write: Option<usize>,
    /// ...and, for `version_conflict`, the versions expected and found.
    pub versions: Option<(u64, u64)>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            write: None,
            versions: None,
        }
    }

    /// An error with a library crate's code. A code the protocol does not know is an internal
    /// error (a test checks that every code the libraries produce is known).
    pub fn lib(code: &'static str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        match ErrorCode::from_code(code) {
            Some(c) => ApiError::new(c, message),
            None => ApiError::new(ErrorCode::Internal, format!("{code}: {message}")),
        }
    }

    /// The error about write `i` of a commit or request ("write 2: ...").
    pub fn at_write(mut self, i: usize) -> ApiError {
        self.message = format!("write {i}: {}", self.message);
        self.write = Some(i);
        self
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn body(&self) -> ErrorBody {
        let mut b = ErrorBody::new(self.code, self.message.clone());
        b.error.write = self.write.map(|w| w as u64);
        if let Some((expected, actual)) = self.versions {
            b.error.expected = Some(expected);
            b.error.actual = Some(actual);
        }
        b
    }
}

impl From<ProtocolError> for ApiError {
    fn from(e: ProtocolError) -> ApiError {
        ApiError::new(e.code, e.message)
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> ApiError {
        let mut out = ApiError::lib(e.code(), e.to_string());
        if let DbError::VersionConflict {
            index,
            expected,
            actual,
            ..
        } = &e
        {
            out.write = Some(*index);
            out.versions = Some((*expected, *actual));
        }
        out
    }
}

impl<E: Into<DbError>> From<herald_db::WriteFailure<E>> for ApiError {
    fn from(e: herald_db::WriteFailure<E>) -> ApiError {
        DbError::from(e).into()
    }
}

/// A path capture that does not decode (e.g. `%FF`, which is not UTF-8) is `bad_path` JSON, not
/// axum's plain-text rejection.
impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> ApiError {
        ApiError::new(ErrorCode::BadPath, format!("bad path: {e}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut resp = (status, Json(self.body())).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use herald_protocol::ErrorCode;

    /// The string literals in every `fn code(&self) -> &'static str` of a crate's sources: the
    /// codes its errors can produce.
    fn lib_codes(krate: &str) -> Vec<String> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(krate)
            .join("src");
        let mut files = Vec::new();
        walk(&root, &mut files);
        let mut codes = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (at, _) in text.match_indices("fn code(&self) -> &'static str {") {
                // The body: up to the brace that closes it.
                let body = &text[at..];
                let mut depth = 0;
                let mut end = body.len();
                for (i, c) in body.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                for lit in body[..end].split('"').skip(1).step_by(2) {
                    codes.push(lit.to_string());
                }
            }
        }
        codes
    }

    /// Library crates return `&'static str` codes; the server maps them with
    /// `ErrorCode::from_code`, and an unknown one would go out as `internal`.
    #[test]
    fn every_code_the_library_crates_produce_is_a_protocol_code() {
        let mut n = 0;
        for krate in ["db", "query", "storage", "rules", "value"] {
            for code in lib_codes(krate) {
                n += 1;
                assert!(
                    ErrorCode::from_code(&code).is_some(),
                    "crates/{krate} produces '{code}', which herald_protocol::ErrorCode lacks"
                );
            }
        }
        assert!(n > 30, "found only {n} codes: did the sources move?");
    }

    #[test]
    fn the_protocol_and_the_database_agree_on_commit_writes_max() {
        assert_eq!(
            herald_protocol::limits::COMMIT_WRITES_MAX,
            herald_db::COMMIT_WRITES_MAX
        );
    }
}
