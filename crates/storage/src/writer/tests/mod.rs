//! Tests of the writer through a store, one file per concern.

mod batching;
mod failures;
mod index;
mod lanes;
