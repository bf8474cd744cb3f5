//! Who merges index runs and when: the merger thread, woken after every checkpoint, and the
//! checkpointer itself once there are [`RUNS_MAX`] runs (so the number of runs a read merges is
//! bounded even when merges fall behind). Several merges may run at once on disjoint stretches
//! of runs; the set of runs being merged ([`Merging`]) keeps them apart.

use std::collections::HashSet;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use redb::ReadableDatabase;

use super::{merge, merge_plan_below, RunCache, RunMeta};
use crate::metrics::Metrics;
use crate::tables::{RUN_BLOCKS, RUN_META};
use crate::StorageError;

/// At this many runs a checkpoint merges before it returns (the writer then waits for it as
/// for any slow checkpoint). Without merges falling behind there are at most three runs per
/// level, a dozen or so.
pub(crate) const RUNS_MAX: usize = 20;

/// The file numbers of the runs being merged right now.
#[derive(Default)]
pub(crate) struct Merging {
    files: Mutex<HashSet<u64>>,
}

/// What merges need, shared by the merger thread and the checkpointer.
pub(crate) struct Merges {
    pub(crate) db: Arc<redb::Database>,
    pub(crate) cache: Arc<RunCache>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) merging: Merging,
}

impl Merges {
    /// Claims the next stretch of runs of a level below `top` to merge and merges it; false if
    /// none is due.
    pub(crate) fn merge_once(&self, top: u32) -> Result<bool, StorageError> {
        // Listing and claiming under one lock: a merge releases its runs only after its last
        // commit, so a list taken here never shows runs another merge has already replaced.
        let (read, inputs, bottom) = {
            let mut files = self
                .merging
                .files
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let read = self.db.begin_read()?;
            let listed = self.cache.load(&read.open_table(RUN_META)?)?;
            self.metrics.set_index_runs(listed.len());
            let Some(plan) = merge_plan_below(&listed, |run| files.contains(&run.file), top) else {
                return Ok(false);
            };
            let bottom = plan.start == 0;
            let inputs: Vec<Arc<RunMeta>> = listed[plan].to_vec();
            files.extend(inputs.iter().map(|r| r.file));
            (read, inputs, bottom)
        };
        let started = Instant::now();
        let result = read
            .open_table(RUN_BLOCKS)
            .map_err(StorageError::from)
            .and_then(|blocks| merge(&self.db, &blocks, &inputs, bottom));
        let mut files = self
            .merging
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for run in &inputs {
            files.remove(&run.file);
        }
        drop(files);
        let merged = result?;
        self.metrics
            .run_merged(merged.entries_in, started.elapsed());
        Ok(true)
    }

    /// A merger thread: merges runs of levels below `top` while such merges are due, then
    /// sleeps until the next checkpoint wakes it; returns when the checkpointer hangs up (the
    /// store is closing) or on the first error, which the caller reports as the store's failure.
    pub(crate) fn run(&self, wake: Receiver<()>, top: u32) -> Result<(), StorageError> {
        while wake.recv().is_ok() {
            while self.merge_once(top)? {}
        }
        Ok(())
    }
}
