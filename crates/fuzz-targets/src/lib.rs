//! The fuzz targets' bodies: one function per parser of untrusted input, each checking the
//! invariants that parser must keep on any bytes (no panic; round trips where an encoder
//! exists; an accepted query or update evaluates against a few documents). `fuzz/` (cargo-fuzz,
//! its own workspace) wraps each in a `fuzz_target!`; `tests/regressions.rs` replays
//! `fuzz/regressions/<target>/*` and the seed corpora through the same functions under plain
//! `cargo test`, so CI checks every input that once found a bug without a fuzzer.
//!
//! The checks live here, not in `fuzz/`, so the product's workspace compiles and tests them.

pub mod seeds;
mod storage;
mod text;

pub use storage::{commit_log, log_block, wal};
pub use text::{bulk_line, jwt, query, rules, trigger_def, update, ws_message};

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` binary and the
/// `fuzz/regressions/<name>/` directory) and its check.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order `scripts/fuzz` runs them.
pub const TARGETS: &[Target] = &[
    ("ws_message", ws_message),
    ("bulk_line", bulk_line),
    ("query", query),
    ("update", update),
    ("rules", rules),
    ("trigger_def", trigger_def),
    ("jwt", jwt),
    ("wal", wal),
    ("log_block", log_block),
    ("commit_log", commit_log),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
