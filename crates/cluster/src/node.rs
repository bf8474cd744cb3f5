//! One node of a cluster: [`Node::start`] opens the database as a replica and starts the
//! threads that follow the log, compete for the lead and publish statuses; [`Node::bootstrap`]
//! installs another node's snapshot when the log no longer reaches back; the rest of `Node` is
//! what the server asks of it. Their shared state is `shared.rs`.

use crate::arbiter::{LogState, Primary};
use crate::kafka::{self, Topics};
use crate::shared::{Commits, Delivery, NodeState, Role, Shared};
use crate::status::NodeStatus;
use crate::ClusterOptions;
use herald_db::{Db, DbOptions};
use rdkafka::producer::ThreadedProducer;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fails with [`StartError::NeedsSnapshot`] if the log no longer holds the records after this
/// node's position.
fn check_reachable(shared: &Shared) -> Result<(), StartError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = kafka::reader(&shared.opts, "check")
        .create()
        .map_err(|e| StartError::Kafka(format!("consumer: {e}")))?;
    let (low, _) = consumer
        .fetch_watermarks(&shared.topics.log, 0, Duration::from_secs(10))
        .map_err(|e| StartError::Kafka(format!("reading the log's bounds: {e}")))?;
    let st = shared.lock();
    if st.offset < low {
        return Err(StartError::NeedsSnapshot(format!(
            "the log starts at offset {low} but this node's store ends at offset {} (batch {}): \
             it starts from another node's snapshot",
            st.offset, st.applied
        )));
    }
    Ok(())
}

/// A running cluster node. Dropping it stops its threads (leaving the leadership group, so a
/// primary that shuts down is replaced at once rather than after the session timeout).
pub struct Node {
    pub(crate) shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("Kafka: {0}")]
    Kafka(String),
    #[error(transparent)]
    Db(#[from] herald_db::DbError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The log no longer reaches back to what this node's store holds (or it holds nothing and
    /// the log's beginning is gone): it must start from another node's snapshot
    /// ([`Node::bootstrap`]).
    #[error("{0}")]
    NeedsSnapshot(String),
}

impl Node {
    /// Joins the cluster: creates its topics if missing, opens the database in `dir` as a
    /// replica, and starts following the log (and competing for the primary role).
    pub fn start(
        opts: ClusterOptions,
        dir: &Path,
        db_options: DbOptions,
    ) -> Result<(Node, Db), StartError> {
        let topics = Topics::new(&opts.cluster);
        kafka::ensure_topics(&opts, &topics).map_err(StartError::Kafka)?;
        let producer: ThreadedProducer<Delivery> = kafka::producer(&opts)
            .create_with_context(Delivery)
            .map_err(|e| StartError::Kafka(format!("producer: {e}")))?;
        std::fs::create_dir_all(dir)?;
        let shared = Arc::new(Shared {
            topics,
            state: Mutex::new(NodeState {
                log: LogState::default(),
                offset: 0,
                high: 0,
                role: Role::Candidate,
                holds_lead: false,
                claim_pending: None,
                claim_after: Instant::now(),
                verdicts: BTreeMap::new(),
                applied: 0,
                kafka_error: None,
            }),
            changed: Condvar::new(),
            db: OnceLock::new(),
            producer,
            peers: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(BTreeMap::new()),
            stop: AtomicBool::new(false),
            dir: dir.to_path_buf(),
            opts,
        });
        let db = Db::open_replica(dir, db_options, Arc::new(Commits(Arc::downgrade(&shared))))?;
        {
            let mut st = shared.lock();
            st.applied = db.replication_index()?;
            if let Some((offset, log)) = crate::reader::load_position(dir, st.applied) {
                st.offset = offset;
                st.log = log;
            }
        }
        if let Err(e) = check_reachable(&shared) {
            drop(db);
            return Err(e);
        }
        let _ = shared.db.set(db.clone());
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f)
        };
        let s = shared.clone();
        threads.push(spawn(
            "herald-cluster-log",
            Box::new(move || crate::reader::run(s)),
        )?);
        let s = shared.clone();
        threads.push(spawn(
            "herald-cluster-lead",
            Box::new(move || crate::election::run(s)),
        )?);
        let s = shared.clone();
        threads.push(spawn(
            "herald-cluster-nodes",
            Box::new(move || crate::members::run(s)),
        )?);
        Ok((Node { shared, threads }, db))
    }

    /// Makes `dir` (whose store the log no longer reaches back to, or which is empty) hold a
    /// snapshot of another node: finds the nodes that published a status recently, and calls
    /// `fetch(url, file)` for each until one writes a snapshot of its store into `file`; then
    /// moves the old store aside (`dir/replaced-<time>`) and installs the snapshot. `Node::start`
    /// then starts after it.
    pub fn bootstrap(
        opts: &ClusterOptions,
        dir: &Path,
        mut fetch: impl FnMut(&str, &Path) -> Result<(), String>,
    ) -> Result<crate::snapshot::SnapshotInfo, StartError> {
        let topics = Topics::new(&opts.cluster);
        let peers = crate::members::recent_peers(opts, &topics, Duration::from_secs(5));
        if peers.is_empty() {
            return Err(StartError::Kafka(
                "no other node has published a status recently: nothing to take a snapshot from"
                    .into(),
            ));
        }
        std::fs::create_dir_all(dir)?;
        let file = dir.join("snapshot.tmp");
        let mut errors = Vec::new();
        for url in peers {
            match fetch(&url, &file) {
                Ok(()) => {
                    let aside = dir.join(format!("replaced-{}", crate::status::now_ms()));
                    std::fs::create_dir_all(&aside)?;
                    for entry in std::fs::read_dir(dir)? {
                        let entry = entry?;
                        let name = entry.file_name();
                        let keep = name == "snapshot.tmp"
                            || name.to_string_lossy().starts_with("replaced-");
                        if !keep {
                            std::fs::rename(entry.path(), aside.join(&name))?;
                        }
                    }
                    let info = crate::snapshot::install(dir, &file).map_err(StartError::Kafka);
                    let _ = std::fs::remove_file(&file);
                    let info = info?;
                    eprintln!(
                        "herald cluster: installed a snapshot from {url}: batch {}, {} entries, \
                         {} bytes (the old store is in {})",
                        info.index,
                        info.entries,
                        info.bytes,
                        aside.display()
                    );
                    return Ok(info);
                }
                Err(e) => errors.push(format!("{url}: {e}")),
            }
        }
        Err(StartError::Kafka(format!(
            "no node gave a snapshot: {}",
            errors.join("; ")
        )))
    }

    /// Writes a snapshot of this node's store to `out` (`GET /v1/cluster/snapshot`).
    pub fn write_snapshot(
        &self,
        out: impl std::io::Write,
    ) -> Result<crate::snapshot::SnapshotInfo, String> {
        crate::snapshot::write(&self.shared.dir, self.shared.db(), out)
    }

    pub fn role(&self) -> Role {
        self.shared.lock().role
    }

    pub fn node_id(&self) -> &str {
        &self.shared.opts.node_id
    }

    pub fn cluster(&self) -> &str {
        &self.shared.opts.cluster
    }

    /// The primary as the log says (this node included).
    pub fn primary(&self) -> Option<Primary> {
        self.shared.lock().log.primary.clone()
    }

    /// The current leadership epoch (0 before the first claim).
    pub fn epoch(&self) -> u64 {
        self.shared.lock().log.epoch
    }

    /// The last Kafka error, while the last attempt to reach Kafka failed.
    pub fn kafka_error(&self) -> Option<String> {
        self.shared.lock().kafka_error.clone()
    }

    /// Every node's latest status, this one's fresh.
    pub fn nodes(&self) -> Vec<NodeStatus> {
        let mut nodes = self
            .shared
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let me = crate::members::own_status(&self.shared);
        nodes.insert(me.id.clone(), me);
        nodes.into_values().collect()
    }

    /// Waits until the role is `role` (tests, tools).
    pub fn wait_for_role(&self, role: Role, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        while st.role != role {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Say so first: the others take over without waiting for this node's status to age.
        {
            let mut st = self.shared.lock();
            self.shared.step_down(&mut st, "shutting down", false);
        }
        let me = crate::members::own_status(&self.shared);
        let bytes = serde_json::to_vec(&me).expect("status JSON");
        let key = self.shared.opts.node_id.clone();
        let _ = self
            .shared
            .produce(&self.shared.topics.nodes, Some(key.as_bytes()), &bytes);
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
