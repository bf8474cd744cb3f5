//! Trigger workers: the dispatcher thread that reads the durable trigger queues, the bounded
//! pool that runs tasks (JavaScript in the sandbox on blocking threads, webhooks on the async
//! runtime), retries with backoff, and shutdown.
//!
//! The queues themselves, and the exactly-once completion of a task, are the database's
//! (`herald_db::triggers`); this module only decides what runs when. See docs/triggers.md.

pub mod dispatch;
pub mod exec;
pub mod host;
pub mod pool;

use dispatch::{Bell, Dispatcher};
use herald_db::Db;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Default number of tasks run at once.
pub const WORKERS_DEFAULT: usize = 4;
/// Default time a webhook has to answer.
pub const WEBHOOK_TIMEOUT_MS_DEFAULT: u64 = 10_000;

#[derive(Debug, Clone)]
pub struct TriggerOptions {
    /// JavaScript tasks run at once; at least 1. Up to 8 times as many tasks (JavaScript
    /// waiting for its commit, and webhooks) are in flight.
    pub workers: usize,
    pub script: herald_script::Limits,
    pub webhook_timeout: Duration,
    /// First retry delay; doubles per failed attempt, up to `backoff_max_ms` (with jitter).
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
}

impl Default for TriggerOptions {
    fn default() -> Self {
        TriggerOptions {
            workers: WORKERS_DEFAULT,
            script: herald_script::Limits::default(),
            webhook_timeout: Duration::from_millis(WEBHOOK_TIMEOUT_MS_DEFAULT),
            backoff_base_ms: 200,
            backoff_max_ms: 60_000,
        }
    }
}

/// The running trigger workers of one database.
pub struct TriggerService {
    bell: Arc<Bell>,
    thread: Option<JoinHandle<()>>,
    scripts: Arc<pool::ScriptPool>,
}

impl TriggerService {
    /// Starts the dispatcher; it picks up tasks left in the queues by an earlier run at once.
    pub fn start(db: Db, opts: TriggerOptions) -> TriggerService {
        TriggerService::start_in(db, opts, None)
    }

    /// [`start`](TriggerService::start) on a node of a cluster: tasks run only while `cluster`
    /// says this node is the primary.
    pub fn start_in(
        db: Db,
        opts: TriggerOptions,
        cluster: Option<Arc<dyn crate::cluster::ClusterView>>,
    ) -> TriggerService {
        let bell = Arc::new(Bell::default());
        let ring = bell.clone();
        db.triggers().set_listener(move || ring.ring());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let scripts = pool::ScriptPool::start(opts.workers);
        let dispatcher = Dispatcher {
            db,
            bell: bell.clone(),
            opts: Arc::new(TriggerOptions {
                workers: opts.workers.max(1),
                ..opts
            }),
            runtime: tokio::runtime::Handle::current(),
            http: reqwest::Client::new(),
            done_tx,
            done_rx,
            scripts: scripts.clone(),
            cluster,
        };
        let thread = std::thread::Builder::new()
            .name("herald-triggers".into())
            .spawn(move || dispatcher.run())
            .expect("spawn the trigger dispatcher");
        TriggerService {
            bell,
            thread: Some(thread),
            scripts,
        }
    }

    /// Stops dispatching and waits (a few seconds at most) for running tasks. Blocking.
    pub fn stop(&mut self) {
        self.bell.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.scripts.stop();
    }
}

impl Drop for TriggerService {
    fn drop(&mut self) {
        self.bell.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterView, Role};
    use herald_db::triggers::TriggerDef;
    use herald_db::{DbOptions, Durability, Write};
    use serde_json::json;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A node whose role the test switches.
    struct Switch(AtomicBool);

    impl ClusterView for Switch {
        fn role(&self) -> Role {
            match self.0.load(Ordering::Acquire) {
                true => Role::Primary,
                false => Role::Follower,
            }
        }
        fn primary_url(&self) -> Option<String> {
            None
        }
        fn node_id(&self) -> String {
            "n".into()
        }
        fn status(&self) -> herald_protocol::ClusterStatus {
            crate::cluster::single_node_status(String::new(), 0)
        }
    }

    /// A follower leaves its queues alone (the primary's completions arrive by replication);
    /// the same node runs them once it becomes the primary.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_run_only_while_the_node_is_primary() {
        let dir = tempfile::tempdir().unwrap();
        let opts = DbOptions {
            durability: Durability::NoSync,
            ..Default::default()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let def = TriggerDef::parse(
            "t",
            &json!({"collection": "c", "function": "function (e, db) {}"}),
        )
        .unwrap();
        db.put_trigger(def).unwrap();
        db.commit(vec![Write::Put {
            collection: "c".into(),
            id: "a".into(),
            doc: json!({}),
            if_version: None,
        }])
        .unwrap();
        let view = Arc::new(Switch(AtomicBool::new(false)));
        let mut service =
            TriggerService::start_in(db.clone(), Default::default(), Some(view.clone()));
        tokio::time::sleep(Duration::from_millis(600)).await;
        let s = db.trigger_status("t").unwrap();
        assert_eq!((s.pending, s.executed, s.failed), (1, 0, 0));
        view.0.store(true, Ordering::Release);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = db.trigger_status("t").unwrap();
            if s.pending == 0 {
                assert_eq!((s.executed, s.failed, s.dead), (1, 0, 0));
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the task did not run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::task::spawn_blocking(move || service.stop())
            .await
            .unwrap();
    }
}
