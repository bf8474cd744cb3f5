//! The database's integration tests, one test binary (each binary links the whole crate graph,
//! and linking is most of an incremental test build): the database on a real store (`db.rs`),
//! the planner (`planner.rs`) and pull aggregations (`aggregate.rs`),
//! the live-query engine against it (`live_engine.rs`, and over the threaded matching grid in
//! `live_grid.rs`), the live-query model test
//! (`live_model.rs`), live aggregations against the pull pipeline (`live_agg_model.rs`),
//! collection groups (`groups.rs`: every plan against the reference, and live group
//! subscriptions; `group_cursors.rs`: group cursors and paging), trigger queues (`triggers.rs`)
//! and random fault schedules under all of them (`fault_schedules.rs`).
//!
//! The modules' tests run in parallel threads of one process: nothing here may set environment
//! variables or other process-wide state.

mod aggregate;
mod db;
mod fault_schedules;
mod group_aggregate;
mod group_cursors;
mod groups;
mod live_agg_model;
mod live_engine;
mod live_grid;
mod live_model;
mod planner;
mod triggers;
