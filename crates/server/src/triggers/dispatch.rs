//! The dispatcher: one thread that reads the trigger queues and hands runnable tasks to a
//! bounded pool of workers, keeping each document's tasks in commit order.
//!
//! Per trigger it holds a window of at most [`WINDOW_MAX`] queued tasks, loaded in queue
//! (= commit) order. A pass walks each window from the front and dispatches a task unless a
//! task for the same document (collection, id) of the same trigger is still in flight, waits
//! for its retry time, or was skipped earlier in this pass: so the tasks of one document run
//! one at a time in commit order, while tasks of different documents run in parallel. Tasks
//! beyond the window wait their turn, so ordering holds across window loads too.
//!
//! The dispatcher never writes; workers complete or fail tasks through the database and report
//! back. At most `workers * IN_FLIGHT_PER_WORKER` tasks are in flight (JavaScript itself runs
//! on at most `workers` threads; a task waiting for its commit holds none), which also bounds
//! the completion channel.

use crate::cluster::{ClusterView, Role};
use crate::triggers::exec::{self, Outcome};
use crate::triggers::pool::ScriptPool;
use crate::triggers::TriggerOptions;
use herald_db::triggers::{Action, Task, TaskId, TriggerDef};
use herald_db::Db;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Most queued tasks held in memory per trigger.
pub const WINDOW_MAX: usize = 1024;
/// Most bytes of queued tasks (stored size, before- and after-images included) held in memory
/// per trigger; at least one task is always held.
pub const WINDOW_BYTES_MAX: usize = 32 << 20;
/// Tasks in flight per worker: a task waiting for its group commit holds no thread, so more
/// tasks than workers can be in flight, and one commit can complete many of them.
pub const IN_FLIGHT_PER_WORKER: usize = 8;
/// Longest the dispatcher sleeps without a wake-up (a safety net; wake-ups are explicit).
const IDLE_WAIT_MS_MAX: u64 = 1000;
/// How often a node that is not the primary looks at its role again (no bell rings on a role
/// change): the delay between a takeover and its first task.
pub const ROLE_POLL_MS: u64 = 200;
/// How often a dispatcher paused by a store that refuses writes (a full disk) looks again.
pub const REFUSED_POLL_MS: u64 = 500;

#[derive(Default)]
struct Signal {
    wake: bool,
    stop: bool,
}

/// Wakes the dispatcher thread (from commit hooks, workers and shutdown).
#[derive(Default)]
pub struct Bell {
    signal: Mutex<Signal>,
    cv: Condvar,
}

impl Bell {
    pub fn ring(&self) {
        self.signal.lock().expect("bell lock").wake = true;
        self.cv.notify_one();
    }

    pub fn stop(&self) {
        self.signal.lock().expect("bell lock").stop = true;
        self.cv.notify_one();
    }

    /// Waits for a ring, a stop or the timeout; returns false once stopped.
    fn wait(&self, timeout: Duration) -> bool {
        let mut s = self.signal.lock().expect("bell lock");
        if !s.wake && !s.stop {
            s = self.cv.wait_timeout(s, timeout).expect("bell lock").0;
        }
        s.wake = false;
        !s.stop
    }
}

pub struct Completion {
    pub uid: u64,
    pub id: TaskId,
    pub outcome: Outcome,
}

struct Window {
    def: Arc<TriggerDef>,
    /// Each task with its stored size.
    tasks: BTreeMap<TaskId, (Task, usize)>,
    bytes: usize,
    /// The last task loaded; the next load starts after it.
    loaded_upto: Option<TaskId>,
    in_flight: HashSet<TaskId>,
}

pub struct Dispatcher {
    pub db: Db,
    pub bell: Arc<Bell>,
    pub opts: Arc<TriggerOptions>,
    pub runtime: tokio::runtime::Handle,
    pub http: reqwest::Client,
    pub done_tx: Sender<Completion>,
    pub done_rx: Receiver<Completion>,
    /// The JavaScript threads: `workers` runs at once. Tasks in flight (running, or waiting for
    /// their commit) may be `IN_FLIGHT_PER_WORKER` times more, so that many tasks share a commit.
    pub scripts: Arc<ScriptPool>,
    /// The cluster this node is part of (`None`: a single node, always the primary).
    pub cluster: Option<Arc<dyn ClusterView>>,
}

impl Dispatcher {
    /// Whether this node may run tasks now: a single node, or the cluster's primary.
    fn is_primary(&self) -> bool {
        self.cluster
            .as_ref()
            .is_none_or(|c| c.role() == Role::Primary)
    }

    pub fn run(self) {
        let mut windows: BTreeMap<u64, Window> = BTreeMap::new();
        let mut in_flight = 0usize;
        let mut requeues = self.db.triggers().requeues();
        let mut start = 0usize;
        let in_flight_max = self.opts.workers * IN_FLIGHT_PER_WORKER;
        loop {
            while let Ok(c) = self.done_rx.try_recv() {
                in_flight -= 1;
                if let Some(w) = windows.get_mut(&c.uid) {
                    w.in_flight.remove(&c.id);
                    match c.outcome {
                        Outcome::Finished => {
                            if let Some((_, size)) = w.tasks.remove(&c.id) {
                                w.bytes -= size;
                            }
                        }
                        Outcome::Retry { not_before_ms } => {
                            if let Some((t, _)) = w.tasks.get_mut(&c.id) {
                                t.attempts += 1;
                                t.not_before_ms = not_before_ms;
                            }
                        }
                        Outcome::Requeue { not_before_ms } => {
                            if let Some((t, _)) = w.tasks.get_mut(&c.id) {
                                t.not_before_ms = not_before_ms;
                            }
                        }
                    }
                }
            }
            // Only the primary runs tasks. Elsewhere the queues change by replication (the
            // primary's completions), so windows are dropped and reloaded on taking over.
            if !self.is_primary() {
                windows.clear();
                if !self.bell.wait(Duration::from_millis(ROLE_POLL_MS)) {
                    break;
                }
                continue;
            }
            // A store that refuses writes (a full disk) cannot record any task's outcome:
            // running tasks would only spend their attempts and call webhooks again and again.
            // Pause until it takes writes (asking probes for freed space, so this also notices
            // when no client writes).
            if self.db.write_refusal().is_some() {
                if !self.bell.wait(Duration::from_millis(REFUSED_POLL_MS)) {
                    break;
                }
                continue;
            }
            // Follow the definitions: new triggers get a window, deleted ones lose theirs,
            // replaced ones run their pending tasks with the new definition.
            let defs = self.db.triggers().defs();
            windows.retain(|uid, _| defs.iter().any(|d| d.uid == *uid));
            for def in defs.iter() {
                windows
                    .entry(def.uid)
                    .or_insert_with(|| Window {
                        def: def.clone(),
                        tasks: BTreeMap::new(),
                        bytes: 0,
                        loaded_upto: None,
                        in_flight: HashSet::new(),
                    })
                    .def = def.clone();
            }
            // Dead letters moved back into a queue may sit before a window's load point.
            let now_requeues = self.db.triggers().requeues();
            if now_requeues != requeues {
                requeues = now_requeues;
                for w in windows.values_mut() {
                    let flying = std::mem::take(&mut w.in_flight);
                    w.tasks.retain(|id, _| flying.contains(id));
                    w.bytes = w.tasks.values().map(|(_, size)| size).sum();
                    w.in_flight = flying;
                    w.loaded_upto = None;
                }
            }
            for (uid, w) in windows.iter_mut() {
                self.refill(*uid, w);
            }
            // Rotate the starting trigger so one busy queue cannot starve the others.
            let mut next_wake = self.db.clock().now_ms() + IDLE_WAIT_MS_MAX;
            let uids: Vec<u64> = windows.keys().copied().collect();
            for k in 0..uids.len() {
                if in_flight >= in_flight_max {
                    break;
                }
                let uid = uids[(start + k) % uids.len()];
                let w = windows.get_mut(&uid).expect("listed");
                let (sent, wake) = self.pass(uid, w, in_flight_max - in_flight);
                in_flight += sent;
                next_wake = next_wake.min(wake);
            }
            start = start.wrapping_add(1);
            let wait = next_wake.saturating_sub(self.db.clock().now_ms()).max(1);
            if !self.bell.wait(Duration::from_millis(wait)) {
                break;
            }
        }
        // Let running tasks finish so they do not outlive the database handle by much; a
        // task cut short is simply run again after a restart (its effects apply once).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while in_flight > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.done_rx.recv_timeout(left) {
                Ok(_) => in_flight -= 1,
                Err(_) => break,
            }
        }
    }

    fn refill(&self, uid: u64, w: &mut Window) {
        if w.tasks.len() >= WINDOW_MAX || w.bytes >= WINDOW_BYTES_MAX {
            return;
        }
        let loaded = self.db.load_tasks_bounded(
            uid,
            w.loaded_upto,
            WINDOW_MAX - w.tasks.len(),
            WINDOW_BYTES_MAX - w.bytes,
        );
        match loaded {
            Ok(loaded) => {
                for (id, task, size) in loaded {
                    w.loaded_upto = Some(id);
                    // A reset window reloads tasks that are still running; keep those as is.
                    if let Entry::Vacant(slot) = w.tasks.entry(id) {
                        slot.insert((task, size));
                        w.bytes += size;
                    }
                }
            }
            Err(e) => eprintln!("herald: reading the queue of trigger {}: {e}", w.def.name),
        }
    }

    /// Dispatches up to `free` runnable tasks of one window; returns how many, and the
    /// earliest retry time of a task it had to skip.
    fn pass(&self, uid: u64, w: &mut Window, free: usize) -> (usize, u64) {
        let now = self.db.clock().now_ms();
        let mut next_wake = u64::MAX;
        let mut blocked: HashSet<(&str, &str)> = HashSet::new();
        let mut chosen = Vec::new();
        for (id, (task, _)) in &w.tasks {
            if chosen.len() >= free {
                break;
            }
            let key = (task.collection.as_str(), task.id.as_str());
            if !blocked.insert(key) {
                continue;
            }
            if w.in_flight.contains(id) {
                continue;
            }
            if task.not_before_ms > now {
                next_wake = next_wake.min(task.not_before_ms);
                continue;
            }
            chosen.push(*id);
        }
        for id in &chosen {
            w.in_flight.insert(*id);
            let task = w.tasks[id].0.clone();
            self.spawn(uid, w.def.clone(), *id, task);
        }
        (chosen.len(), next_wake)
    }

    fn spawn(&self, uid: u64, def: Arc<TriggerDef>, id: TaskId, task: Task) {
        let (db, opts, done, bell) = (
            self.db.clone(),
            self.opts.clone(),
            self.done_tx.clone(),
            self.bell.clone(),
        );
        let report = move |outcome| {
            let _ = done.send(Completion { uid, id, outcome });
            bell.ring();
        };
        match &def.action {
            Action::Function(_) => {
                let scripts = self.scripts.clone();
                self.runtime.spawn(async move {
                    report(exec::run_function(db, def, id, task, opts, scripts).await);
                });
            }
            Action::Webhook { .. } => {
                let http = self.http.clone();
                self.runtime.spawn(async move {
                    report(exec::run_webhook(db, http, def, id, task, opts).await);
                });
            }
        }
    }
}
