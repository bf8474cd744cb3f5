//! `GET /console`: the web console (ts/console), built by esbuild and committed under
//! `crates/server/console/`, embedded in the binary so building the server needs no npm.
//!
//! The assets are public: they hold no data. Everything the console shows it fetches through the
//! API with the token typed into it (an admin key as `Authorization: Bearer`).

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

use crate::api::error::ApiError;
use herald_protocol::ErrorCode;

/// The console's files: name under `/console/`, content type, bytes.
const ASSETS: [(&str, &str, &[u8]); 3] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../console/index.html"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../console/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../../console/console.css"),
    ),
];

fn asset(name: &str) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        // `no-cache`: revalidate, so a new server version is never shown with an old script.
        Some((_, ctype, bytes)) => (
            [(CONTENT_TYPE, *ctype), (CACHE_CONTROL, "no-cache")],
            *bytes,
        )
            .into_response(),
        None => ApiError::new(ErrorCode::RouteNotFound, "no such console file").into_response(),
    }
}

/// `/console` and `/console/`: the page.
pub async fn index() -> Response {
    asset("index.html")
}

/// `/console/{file}`: a script, style sheet or the page.
pub async fn file(Path(name): Path<String>) -> Response {
    asset(&name)
}
