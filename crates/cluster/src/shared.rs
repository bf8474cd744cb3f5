//! What a node's threads share: what the log says, this node's role and its own records'
//! verdicts (`NodeState` under one lock), the Kafka producer, the `Replicator` its store commits
//! through, and stepping down. The threads are `reader.rs` (the log), `election.rs` (the
//! leadership group) and `members.rs` (node statuses); `node.rs` starts them.

use crate::arbiter::LogState;
use crate::kafka::{Topics, RECORD_BYTES_MAX};
use crate::record::Record;
use crate::status::NodeStatus;
pub use crate::status::Role;
use crate::ClusterOptions;
use herald_db::Db;
use herald_storage::{Replicator, StorageError};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

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
        // Verdicts stay: a write waiting for one the reader already gave (its record accepted)
        // must still be acknowledged, or this store would lack a batch every other node
        // applied. They are cleared when this node next becomes primary.
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
