//! `ApiError`: every failure of an endpoint, rendered as `{"error":{"code","message"}}` with the
//! status from the protocol crate's table. The one place library errors meet HTTP.

use axum::extract::rejection::PathRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use herald_db::DbError;
use herald_protocol::{error_body, http_status};
use serde_json::{json, Value};

#[derive(Debug)]
pub struct ApiError {
    pub code: &'static str,
    pub message: String,
    pub extra: Option<Value>,
}

impl ApiError {
    pub fn new(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            extra: None,
        }
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(http_status(self.code)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn body(&self) -> Value {
        error_body(self.code, &self.message, self.extra.clone())
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> ApiError {
        let extra = match &e {
            DbError::VersionConflict {
                index,
                expected,
                actual,
                ..
            } => Some(json!({"write": index, "expected": expected, "actual": actual})),
            _ => None,
        };
        ApiError {
            code: e.code(),
            message: e.to_string(),
            extra,
        }
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
        ApiError::new("bad_path", format!("bad path: {e}"))
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
