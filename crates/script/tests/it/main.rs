//! The sandbox's integration tests, one test binary (each binary links the whole crate graph):
//! host calls (`host_calls.rs`), isolation (`isolation.rs`) and resource limits (`limits.rs`),
//! over the mock host in `common/`.

mod common;
mod host_calls;
mod isolation;
mod limits;
