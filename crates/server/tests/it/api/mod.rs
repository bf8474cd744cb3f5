//! HTTP integration tests of the `/v1` API against a real server on a real socket: the happy
//! paths of every endpoint, the bad inputs (each a 4xx JSON error that changes nothing), the
//! error-code table, the CLI's public-address guard and graceful shutdown of the binary.
//!
//! Every response goes through `common::Resp::new`, which fails the test if an error response
//! is not JSON or carries a code that is not in `herald_protocol::ErrorCode` with that status.
//!
//! One file per part: `happy.rs` (every endpoint's happy path), `bad_input.rs`
//! (bad inputs and the error-code table), `binary.rs` (the `herald` binary itself), `console.rs`
//! (the web console's routes, the collections list, the notification latency metric).

mod aggregate;
mod bad_input;
mod binary;
mod console;
mod happy;
mod mutations;

use crate::common::{self, seen_codes, table_status, Herald, Resp, Server};
use herald_db::{DbOptions, Durability};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// An object nested `depth` levels deep (`{}` is depth 1).
fn nested_object(depth: usize) -> Value {
    let mut v = json!({});
    for _ in 1..depth {
        v = json!({ "a": v });
    }
    v
}

/// An object whose `a` member is an array nested so that the whole document is `depth` deep.
fn nested_array_doc(depth: usize) -> Value {
    let mut v = json!([]);
    for _ in 2..depth {
        v = json!([v]);
    }
    json!({ "a": v })
}

fn is_generated_id(id: &str) -> bool {
    id.len() == 20 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}
