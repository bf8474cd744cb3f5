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
/// The merger threads' nice value while runs are few (0 normal, 19 lowest): merges are
/// background work, and threads serving clients run first on a busy machine.
pub(crate) const MERGER_NICE: i32 = 10;
/// From this many runs the merger threads run at normal priority until the runs are back to
/// [`RUNS_CALM`]. At nice 10 on a machine that ingest kept busy (20,000 RockBench events/s on 2
/// cores), two mergers in long merges of large runs got a few percent of a core, the runs reached
/// [`RUNS_MAX`] and writes waited for the checkpointer's own merges for up to a minute; at normal
/// priority all the time, the merges took CPU the write path needed and it fell behind. So the
/// priority rises only as the runs approach the bound.
pub(crate) const RUNS_PRESSED: usize = 15;
/// See [`RUNS_PRESSED`].
pub(crate) const RUNS_CALM: usize = 10;

thread_local! {
    /// The nice value a merger thread last set for itself; `None` on other threads (the
    /// checkpointer's own merges keep its priority).
    static MERGER_PRIORITY: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

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
    /// The runs reached [`RUNS_PRESSED`] and have not yet come back to [`RUNS_CALM`].
    pub(crate) pressed: std::sync::atomic::AtomicBool,
}

/// Sets `pressed` at [`RUNS_PRESSED`] runs and clears it at [`RUNS_CALM`].
fn note_pressure(pressed: &std::sync::atomic::AtomicBool, runs: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    if runs >= RUNS_PRESSED {
        pressed.store(true, Relaxed);
    } else if runs <= RUNS_CALM {
        pressed.store(false, Relaxed);
    }
}

/// See [`Merges::pace`].
fn pace_with(pressed: &std::sync::atomic::AtomicBool) {
    let pressed = pressed.load(std::sync::atomic::Ordering::Relaxed);
    MERGER_PRIORITY.with(|p| {
        let Some(current) = p.get() else { return };
        let wanted = if pressed { 0 } else { MERGER_NICE };
        if wanted != current {
            crate::lower_current_thread_priority(wanted);
            p.set(Some(wanted));
        }
    });
}

impl Merges {
    /// Records how many runs the store has (metrics, and the mergers' priority).
    pub(crate) fn note_runs(&self, runs: usize) {
        self.metrics.set_index_runs(runs);
        note_pressure(&self.pressed, runs);
    }

    /// On a merger thread: its priority for the current pressure (normal while pressed, else
    /// [`MERGER_NICE`]). Elsewhere nothing. Raising a priority needs `CAP_SYS_NICE` (or an
    /// `RLIMIT_NICE` that allows it); without, the thread stays at nice 10.
    pub(crate) fn pace(&self) {
        pace_with(&self.pressed);
    }

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
            self.note_runs(listed.len());
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
            .and_then(|blocks| merge(&self.db, &blocks, &inputs, bottom, &|| self.pace()));
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
    /// Starts at [`MERGER_NICE`] and follows the pressure (see [`RUNS_PRESSED`]).
    pub(crate) fn run(&self, wake: Receiver<()>, top: u32) -> Result<(), StorageError> {
        crate::lower_current_thread_priority(MERGER_NICE);
        MERGER_PRIORITY.with(|p| p.set(Some(MERGER_NICE)));
        while wake.recv().is_ok() {
            self.pace();
            while self.merge_once(top)? {
                self.pace();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    /// The pressure rises at `RUNS_PRESSED` and falls only at `RUNS_CALM`, so the mergers'
    /// priority does not flap as each checkpoint adds a run and each merge removes some.
    #[test]
    fn pressure_has_hysteresis() {
        let pressed = AtomicBool::new(false);
        let note = |runs: usize| {
            note_pressure(&pressed, runs);
            pressed.load(Relaxed)
        };
        assert!(!note(RUNS_PRESSED - 1));
        assert!(note(RUNS_PRESSED));
        assert!(note(RUNS_CALM + 1), "still pressed between the marks");
        assert!(!note(RUNS_CALM));
        assert!(!note(RUNS_PRESSED - 1), "calm until the upper mark again");
    }

    #[cfg(target_os = "linux")]
    fn nice() -> i32 {
        // SAFETY: getpriority has no memory-safety preconditions; who = 0 is this thread.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    /// A merger thread follows the pressure (raising its priority needs privileges: checked
    /// only when running as root); any other thread, such as the checkpointer merging inline,
    /// keeps its own.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_merger_threads_change_priority_with_the_pressure() {
        let pressed = Arc::new(AtomicBool::new(true));
        let p = pressed.clone();
        let other = std::thread::spawn(move || {
            let before = nice();
            pace_with(&p);
            nice() == before
        });
        assert!(
            other.join().unwrap(),
            "a thread that is not a merger keeps its priority"
        );
        let root = unsafe { libc::geteuid() } == 0;
        let merger = std::thread::spawn(move || {
            crate::lower_current_thread_priority(MERGER_NICE);
            MERGER_PRIORITY.with(|c| c.set(Some(MERGER_NICE)));
            pace_with(&pressed);
            let raised = nice();
            pressed.store(false, Relaxed);
            pace_with(&pressed);
            (raised, nice())
        });
        let (raised, lowered) = merger.join().unwrap();
        if root {
            assert_eq!(raised, 0);
        }
        assert_eq!(lowered, MERGER_NICE);
    }
}
