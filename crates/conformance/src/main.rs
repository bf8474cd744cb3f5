//! Conformance runner.
fn main() {}
