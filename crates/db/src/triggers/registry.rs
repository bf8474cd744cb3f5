//! The in-memory set of trigger definitions the write path matches against, with each
//! trigger's counters, and the listener that wakes the task dispatcher.
//!
//! Definitions change only in storage jobs, and the in-memory set is swapped in the job's
//! commit hook, so it always equals what is persisted as of the last commit.

use crate::triggers::def::TriggerDef;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Recent errors kept per trigger for its status.
pub const RECENT_ERRORS_MAX: usize = 16;

/// Counters of one trigger (by uid). Pending and dead counts are exact (counted at open,
/// then kept by commit hooks); executed, failed and retried count since the process started.
#[derive(Debug, Default)]
pub struct TriggerStats {
    pub pending: AtomicI64,
    pub dead: AtomicI64,
    pub executed: AtomicU64,
    pub failed: AtomicU64,
    /// Attempts that conflicted with a concurrent write and were re-run.
    pub conflicts: AtomicU64,
    recent_errors: Mutex<VecDeque<RecentError>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentError {
    pub at_ms: u64,
    pub task: String,
    pub message: String,
}

impl TriggerStats {
    pub fn record_error(&self, at_ms: u64, task: String, message: String) {
        let mut errs = self.recent_errors.lock().expect("errors lock");
        if errs.len() == RECENT_ERRORS_MAX {
            errs.pop_front();
        }
        errs.push_back(RecentError {
            at_ms,
            task,
            message,
        });
    }

    pub fn recent_errors(&self) -> Vec<RecentError> {
        self.recent_errors
            .lock()
            .expect("errors lock")
            .iter()
            .cloned()
            .collect()
    }
}

/// A trigger's definition with its queue and counters (`Db::trigger_status`).
#[derive(Debug, Clone)]
pub struct TriggerStatus {
    pub def: Arc<TriggerDef>,
    pub pending: u64,
    /// Age of the oldest queued task; `None` when the queue is empty.
    pub oldest_pending_age_ms: Option<u64>,
    pub dead: u64,
    pub executed: u64,
    pub failed: u64,
    pub conflicts: u64,
    /// Oldest first, at most [`RECENT_ERRORS_MAX`].
    pub recent_errors: Vec<RecentError>,
}

type Listener = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
pub struct Registry {
    defs: RwLock<Arc<Vec<Arc<TriggerDef>>>>,
    stats: Mutex<HashMap<u64, Arc<TriggerStats>>>,
    listener: RwLock<Option<Listener>>,
    /// Bumped whenever dead letters move back into a queue, possibly behind what a reader of
    /// the queue has already passed.
    requeues: AtomicU64,
}

impl Registry {
    pub(crate) fn new(defs: BTreeMap<String, TriggerDef>) -> Registry {
        let r = Registry::default();
        r.replace(defs.into_values().collect());
        r
    }

    /// The current definitions (a cheap snapshot).
    pub fn defs(&self) -> Arc<Vec<Arc<TriggerDef>>> {
        self.defs.read().expect("triggers lock").clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<TriggerDef>> {
        self.defs().iter().find(|d| d.name == name).cloned()
    }

    pub(crate) fn replace(&self, defs: Vec<TriggerDef>) {
        let defs: Vec<Arc<TriggerDef>> = defs.into_iter().map(Arc::new).collect();
        *self.defs.write().expect("triggers lock") = Arc::new(defs);
    }

    /// The counters of the trigger with this uid (created on first use).
    pub fn stats(&self, uid: u64) -> Arc<TriggerStats> {
        self.stats
            .lock()
            .expect("stats lock")
            .entry(uid)
            .or_default()
            .clone()
    }

    pub(crate) fn forget(&self, uid: u64) {
        self.stats.lock().expect("stats lock").remove(&uid);
    }

    /// Counts newly committed tasks and wakes the dispatcher. Runs in a commit hook.
    pub(crate) fn tasks_committed(&self, uids: &[u64]) {
        if uids.is_empty() {
            return;
        }
        for &uid in uids {
            self.stats(uid).pending.fetch_add(1, Ordering::AcqRel);
        }
        self.wake();
    }

    pub fn requeues(&self) -> u64 {
        self.requeues.load(Ordering::Acquire)
    }

    pub(crate) fn requeued(&self) {
        self.requeues.fetch_add(1, Ordering::AcqRel);
        self.wake();
    }

    /// Calls the listener (if any): queues or definitions changed.
    pub fn wake(&self) {
        let listener = self.listener.read().expect("listener lock").clone();
        if let Some(f) = listener {
            f();
        }
    }

    /// Sets the function called (on the writer thread, so it must be quick and never block)
    /// whenever tasks are committed or trigger definitions change.
    pub fn set_listener(&self, f: impl Fn() + Send + Sync + 'static) {
        *self.listener.write().expect("listener lock") = Some(Arc::new(f));
    }
}
