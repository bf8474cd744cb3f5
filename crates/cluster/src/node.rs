//! One node of a cluster: its shared state (what the log says, this node's role and term),
//! the `Replicator` its store commits through, and the transitions between follower and
//! primary. The threads that drive it are `reader.rs` (the log), `election.rs` (the
//! leadership group) and `members.rs` (node statuses).

use crate::arbiter::{LogState, Primary};
use crate::kafka::{self, Topics, RECORD_BYTES_MAX};
use crate::members::NodeStatus;
use crate::record::Record;
use crate::ClusterOptions;
use herald_db::{Db, DbOptions};
use herald_storage::{Replicator, StorageError};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Its claim is the log's latest: it commits writes.
    Primary,
    /// Another node is the primary; this one applies the log.
    Follower,
    /// No primary is known yet, or this node is taking over.
    Candidate,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
        }
    }
}

/// What a node knows, under one lock (`Shared::state`).
pub(crate) struct NodeState {
    /// What the log says up to `offset`.
    pub(crate) log: LogState,
    /// The next offset of the log topic the reader will read.
    pub(crate) offset: i64,
    /// The log's end as last measured; the reader is caught up when `offset` reaches it.
    pub(crate) high: i64,
    pub(crate) role: Role,
    /// The leadership group assigned this node the leader partition.
    pub(crate) holds_lead: bool,
    /// The epoch of a claim this node wrote and the reader has not reached yet.
    pub(crate) claim_pending: Option<(u64, Instant)>,
    /// No claim before this instant (after losing the primary role to another node).
    pub(crate) claim_after: Instant,
    /// Verdicts on this node's own data records, by index: accepted or not.
    pub(crate) verdicts: BTreeMap<u64, bool>,
    /// The replication index this node's store holds or has been asked to apply.
    pub(crate) applied: u64,
    /// The last Kafka error, if the last attempt failed.
    pub(crate) kafka_error: Option<String>,
}

pub(crate) struct Shared {
    pub(crate) opts: ClusterOptions,
    pub(crate) topics: Topics,
    pub(crate) state: Mutex<NodeState>,
    /// Signalled on every change of `state`.
    pub(crate) changed: Condvar,
    pub(crate) db: OnceLock<Db>,
    pub(crate) producer: ThreadedProducer<Delivery>,
    /// Every node's latest status (`members.rs`).
    pub(crate) peers: Mutex<BTreeMap<String, NodeStatus>>,
    /// When this node last received a fresh status from each other node, with its role and
    /// epoch (`members::primary_alive`).
    pub(crate) seen: Mutex<BTreeMap<String, (Instant, String, u64)>>,
    pub(crate) stop: AtomicBool,
    pub(crate) dir: PathBuf,
}

/// Reports each produced record's delivery to whoever waits for it.
pub(crate) struct Delivery;

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = Box<SyncSender<Result<i64, String>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, reply: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => Ok(message.offset()),
            Err((err, _)) => Err(err.to_string()),
        };
        let _ = reply.try_send(outcome);
    }
}

impl Shared {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn db(&self) -> &Db {
        self.db
            .get()
            .expect("the database is opened before the threads start")
    }

    /// Produces one record and waits for Kafka to have it in every in-sync replica; returns
    /// its offset.
    pub(crate) fn produce(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<i64, String> {
        let (tx, rx) = mpsc::sync_channel(1);
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(tx)).payload(payload);
        if let Some(key) = key {
            record = record.key(key);
        }
        self.producer
            .send(record)
            .map_err(|(e, _)| format!("Kafka refused the record: {e}"))?;
        match rx.recv_timeout(self.opts.write_timeout + Duration::from_secs(1)) {
            Ok(outcome) => outcome,
            Err(_) => Err("Kafka did not confirm the record in time".into()),
        }
    }

    /// Stops being the primary (or a candidate about to be): writes are refused from now on.
    /// `refused`: a batch of this node's own was refused, whose catalog change may be in memory.
    pub(crate) fn step_down(&self, st: &mut NodeState, why: &str, refused: bool) {
        if st.role == Role::Primary {
            eprintln!(
                "herald cluster: node {} steps down: {why}",
                self.opts.node_id
            );
        }
        st.role = if st.log.primary.is_some() {
            Role::Follower
        } else {
            Role::Candidate
        };
        st.verdicts.clear();
        if let Some(db) = self.db.get() {
            db.demoted();
            if refused {
                if let Err(e) = db.reload_derived() {
                    eprintln!("herald cluster: reloading after a refused batch: {e}");
                }
            }
        }
        self.changed.notify_all();
    }
}

/// The store's side of replication: every batch the primary commits waits here until the log
/// has it, durable and accepted.
/// Holds the node weakly: the store (inside the node's database) must not keep the node alive.
pub(crate) struct Commits(pub(crate) std::sync::Weak<Shared>);

impl Replicator for Commits {
    fn replicate(&self, index: u64, record: &[u8]) -> Result<(), StorageError> {
        let unavailable = |why: String| Err(StorageError::Unavailable(why));
        let Some(shared) = self.0.upgrade() else {
            return unavailable("this node has left the cluster".into());
        };
        let epoch = {
            let st = shared.lock();
            if st.role != Role::Primary {
                return unavailable(format!(
                    "node {} is not the primary{}",
                    shared.opts.node_id,
                    st.log
                        .primary
                        .as_ref()
                        .map(|p| format!(" (node {} is)", p.node))
                        .unwrap_or_default()
                ));
            }
            st.log.epoch
        };
        if record.len() > RECORD_BYTES_MAX {
            return unavailable(format!(
                "the batch is {} bytes; the replicated log takes at most {RECORD_BYTES_MAX}",
                record.len()
            ));
        }
        let bytes = Record::Data {
            epoch,
            index,
            batch: record.to_vec(),
        }
        .encode();
        if let Err(e) = shared.produce(&shared.topics.log, None, &bytes) {
            let mut st = shared.lock();
            st.kafka_error = Some(e.clone());
            // The record may still land in the log: step down, so that the reader applies it
            // like any other node's if it is accepted, and refuse the batch here.
            shared.step_down(&mut st, &e, true);
            return unavailable(format!("the replicated log is unreachable: {e}"));
        }
        // Read back: acknowledged only once the reader found it accepted where it landed.
        let deadline = Instant::now() + shared.opts.write_timeout;
        let mut st = shared.lock();
        loop {
            if let Some(accepted) = st.verdicts.remove(&index) {
                if accepted {
                    return Ok(());
                }
                shared.step_down(&mut st, "a newer primary's claim is in the log", true);
                return unavailable("this node was deposed while writing".into());
            }
            if st.role != Role::Primary || st.log.epoch != epoch {
                // The reader passed a newer claim; our record comes after it and is ignored.
                return unavailable("this node was deposed while writing".into());
            }
            let now = Instant::now();
            if now >= deadline {
                shared.step_down(&mut st, "the log did not echo a write in time", true);
                return unavailable("the replicated log did not confirm the write in time".into());
            }
            st = shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

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
                    let aside = dir.join(format!("replaced-{}", crate::members::now_ms()));
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
