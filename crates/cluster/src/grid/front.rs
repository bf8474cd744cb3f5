//! `KafkaMatching`: the live-query engine's [`Matching`] on a cluster node with a grid. It
//! registers the engine's views on the queries topic, reads the cells' records from the matches
//! topic (a thread, from the topic's end when it started: every record that can concern a view
//! registered later comes after), and releases a commit's matches once every cell of every row
//! holding its views has claimed that seq (`coverage.rs`).
//!
//! A view's start seq is the seq before the first commit dispatched after `add_view`: the
//! engine adds views only with nothing in flight, so every later commit is the view's, and the
//! registration is published (and its offset known) before that commit is dispatched.

use crate::grid::coverage::Coverage;
use crate::grid::wire::{key_prefix, view_key, CellRecord, Registration};
use crate::grid::GridCtx;
use herald_db::live::grid::{CellStatus, GridError, Matches, Matching};
use herald_db::live::matcher::ViewId;
use herald_db::live::Commit;
use herald_query::Filter;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseRecord;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Matches a front end buffers at most (read, not yet released); past it the front end gives
/// up and the engine resets its subscribers.
pub const BUFFERED_MATCHES_MAX: usize = 1_000_000;
/// Commits in flight at most (dispatched, not yet complete).
pub const IN_FLIGHT_MAX: usize = 1024;
/// How long the oldest commit may wait for the cells before the front end gives up (a cell
/// nobody runs, a node whose log no longer reaches a view's start).
pub const STALL_MAX: Duration = Duration::from_secs(30);

/// What the engine's thread and the matches reader share.
struct Front {
    state: Mutex<FrontState>,
    changed: Condvar,
    stop: AtomicBool,
}

struct FrontState {
    coverage: Coverage,
    /// Per cell, the node of the last record read (for status).
    nodes: BTreeMap<(u32, u32), String>,
    error: Option<String>,
}

impl Front {
    fn lock(&self) -> MutexGuard<'_, FrontState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A view added and not yet registered (that happens when the next commit is dispatched).
struct Pending {
    id: ViewId,
    collection: String,
    filter: Arc<Filter>,
}

pub struct KafkaMatching {
    ctx: Arc<GridCtx>,
    front: Arc<Front>,
    reader: Option<JoinHandle<()>>,
    /// Local id -> (global key, row).
    keys: HashMap<ViewId, (String, u32)>,
    pending: Vec<Pending>,
    in_flight: VecDeque<Arc<Commit>>,
    /// Keys handed out by this front end.
    counter: u64,
    /// When the oldest commit in flight started to wait.
    waiting_since: Option<Instant>,
    /// Per registered key, its offset on the queries topic.
    offsets: HashMap<String, u64>,
    /// When the front end last checked that its views are still registered.
    checked: Instant,
}

impl KafkaMatching {
    pub(crate) fn start(ctx: Arc<GridCtx>) -> Result<KafkaMatching, String> {
        let consumer: BaseConsumer = crate::kafka::reader(&ctx.shared.opts, "grid.matches")
            .create()
            .map_err(|e| format!("matches consumer: {e}"))?;
        let topic = ctx.topics.matches.clone();
        let (_, high) = consumer
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .map_err(|e| format!("the matches topic's end: {e}"))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(high))
            .map_err(|e| e.to_string())?;
        consumer.assign(&tpl).map_err(|e| e.to_string())?;
        let prefix = key_prefix(&ctx.shared.opts.node_id, ctx.incarnation);
        let shape = ctx.shape;
        let front = Arc::new(Front {
            state: Mutex::new(FrontState {
                coverage: Coverage::new(
                    shape.rows,
                    shape.partitions,
                    prefix,
                    BUFFERED_MATCHES_MAX,
                    0,
                ),
                nodes: BTreeMap::new(),
                error: None,
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let f = front.clone();
        let c = ctx.clone();
        let reader = std::thread::Builder::new()
            .name("herald-grid-matches".into())
            .spawn(move || read_matches(c, f, consumer))
            .map_err(|e| e.to_string())?;
        Ok(KafkaMatching {
            ctx,
            front,
            reader: Some(reader),
            keys: HashMap::new(),
            pending: Vec::new(),
            in_flight: VecDeque::new(),
            counter: 0,
            waiting_since: None,
            offsets: HashMap::new(),
            checked: Instant::now(),
        })
    }

    /// The row for a new view: the one holding fewest of this front end's views.
    fn row_for_new(&self) -> u32 {
        let mut counts = vec![0usize; self.ctx.shape.rows as usize];
        for (_, row) in self.keys.values() {
            counts[*row as usize] += 1;
        }
        (0..self.ctx.shape.rows)
            .min_by_key(|r| counts[*r as usize])
            .unwrap_or(0)
    }

    /// Publishes the pending views' registrations, starting after `from`, and waits for their
    /// offsets.
    fn register_pending(&mut self, from: u64) {
        let mut waits = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            let key = view_key(
                &self.ctx.shared.opts.node_id,
                self.ctx.incarnation,
                self.counter,
            );
            self.counter += 1;
            let row = self.row_for_new();
            self.keys.insert(p.id, (key.clone(), row));
            self.front.lock().coverage.register(&key, p.id, row, from);
            let reg = Registration {
                collection: p.collection,
                filter: p.filter.source().clone(),
                row,
                from_seq: from,
                node: self.ctx.shared.opts.node_id.clone(),
            };
            let bytes = serde_json::to_vec(&reg).expect("registration JSON");
            waits.push((key.clone(), self.send(&key, Some(&bytes))));
        }
        let deadline = Instant::now() + self.ctx.shared.opts.write_timeout + Duration::from_secs(1);
        for (key, rx) in waits {
            let outcome = match rx {
                Ok(rx) => rx
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    .unwrap_or_else(|_| Err("Kafka did not confirm in time".into())),
                Err(e) => Err(e),
            };
            let mut st = self.front.lock();
            match outcome {
                Ok(offset) => {
                    st.coverage.registered(&key, offset.max(0) as u64);
                    self.offsets.insert(key, offset.max(0) as u64);
                }
                Err(e) => st.error = Some(format!("registering a view: {e}")),
            }
        }
    }

    /// Fails when the cells may no longer match this front end's views (`lease.rs`): this
    /// node could not renew its lease for half the lease time, or one of its views was
    /// removed by another node. Checked at most once a second.
    fn check_lease(&mut self) -> Result<(), GridError> {
        if self.checked.elapsed() < Duration::from_secs(1) {
            return Ok(());
        }
        self.checked = Instant::now();
        if self.ctx.lease_lost() {
            return Err(GridError::Lost(format!(
                "this node could not renew its grid lease for {} s: other nodes may remove its \
                 views",
                (self.ctx.lease_ttl / 2).as_secs()
            )));
        }
        let reg = self.ctx.registry.lock();
        let gone = self
            .offsets
            .iter()
            .find(|(key, offset)| **offset < reg.end && !reg.views.contains_key(*key));
        if let Some((key, _)) = gone {
            return Err(GridError::Lost(format!(
                "view {key} was removed from the grid by another node (its lease expired)"
            )));
        }
        Ok(())
    }

    /// Sends a record to the queries topic; the receiver gets its offset.
    fn send(
        &self,
        key: &str,
        payload: Option<&[u8]>,
    ) -> Result<mpsc::Receiver<Result<i64, String>>, String> {
        let (tx, rx) = mpsc::sync_channel(1);
        let mut record =
            BaseRecord::with_opaque_to(&self.ctx.topics.queries, Box::new(tx)).key(key);
        if let Some(p) = payload {
            record = record.payload(p);
        }
        self.ctx
            .shared
            .producer
            .send(record)
            .map_err(|(e, _)| format!("Kafka refused the record: {e}"))?;
        Ok(rx)
    }
}

impl Matching for KafkaMatching {
    fn add_view(&mut self, id: ViewId, collection: &str, filter: Arc<Filter>) {
        self.remove_view(id);
        self.pending.push(Pending {
            id,
            collection: collection.to_string(),
            filter,
        });
    }

    fn remove_view(&mut self, id: ViewId) {
        self.pending.retain(|p| p.id != id);
        if let Some((key, _)) = self.keys.remove(&id) {
            self.offsets.remove(&key);
            self.front.lock().coverage.remove(&key);
            // The tombstone only saves the cells work: the front end already ignores the key.
            let _ = self.send(&key, None);
        }
    }

    fn dispatch(&mut self, commit: Arc<Commit>) {
        if !self.pending.is_empty() {
            self.register_pending(commit.seq.saturating_sub(1));
        }
        self.in_flight.push_back(commit);
    }

    fn collect(&mut self, timeout: Duration) -> Result<Option<Matches>, GridError> {
        let Some(seq) = self.in_flight.front().map(|c| c.seq) else {
            return Ok(None);
        };
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        self.check_lease()?;
        let deadline = Instant::now() + timeout;
        let mut st = self.front.lock();
        loop {
            if let Some(o) = st.coverage.overflow() {
                let why = format!("{o:?}");
                st.coverage.reset(seq);
                return Err(GridError::Lost(why));
            }
            if let Some(e) = st.error.take() {
                return Err(GridError::Lost(e));
            }
            if st.coverage.complete(seq) {
                let views = st.coverage.release(seq);
                drop(st);
                self.waiting_since = None;
                let commit = self.in_flight.pop_front().expect("a commit in flight");
                return Ok(Some(Matches { commit, views }));
            }
            if since.elapsed() > STALL_MAX {
                return Err(GridError::Lost(format!(
                    "the cells did not claim seq {seq} within {} s",
                    STALL_MAX.as_secs()
                )));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            st = self
                .front
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn clear(&mut self) {
        self.in_flight.clear();
        self.waiting_since = None;
    }

    fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn depth(&self) -> usize {
        IN_FLIGHT_MAX
    }

    fn cells(&self) -> Vec<CellStatus> {
        let mut st = self.front.lock();
        let mut views = vec![0usize; self.ctx.shape.rows as usize];
        for (_, row) in self.keys.values() {
            views[*row as usize] += 1;
        }
        let mut out = Vec::new();
        let needs = st.coverage.needs().clone();
        for (row, need) in needs {
            for part in 0..self.ctx.shape.partitions {
                let seq = need
                    .and_then(|n| st.coverage.claimed(row, part, n))
                    .unwrap_or(0);
                out.push(CellStatus {
                    row,
                    part,
                    seq,
                    views: views[row as usize],
                    node: st.nodes.get(&(row, part)).cloned(),
                });
            }
        }
        out
    }
}

impl Drop for KafkaMatching {
    fn drop(&mut self) {
        // The engine stopped: its views go (best effort; a node that dies without this removes
        // them when it starts again, `Grid::start`).
        for (key, _) in self.keys.values() {
            let _ = self.send(key, None);
        }
        self.front.stop.store(true, Ordering::Release);
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}

/// Reads the matches topic into the coverage until the front end or the grid stops.
fn read_matches(ctx: Arc<GridCtx>, front: Arc<Front>, consumer: BaseConsumer) {
    while !front.stop.load(Ordering::Acquire) && !ctx.stopping() {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                // Without views nothing read now can serve: a claim made before a view was
                // registered never covers it. So records are not even parsed then.
                if !front.lock().coverage.has_views() {
                    continue;
                }
                let Some(r) = m
                    .payload()
                    .and_then(|p| serde_json::from_slice::<CellRecord>(p).ok())
                else {
                    continue;
                };
                let mut st = front.lock();
                st.coverage.record(&r);
                st.nodes.insert((r.row, r.part), r.node);
                drop(st);
                front.changed.notify_all();
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => {
                // The consumer retries by itself; the stall bound covers a lasting failure.
                if std::env::var_os("HERALD_CLUSTER_DEBUG").is_some() {
                    eprintln!("herald grid: reading matches: {e}");
                }
            }
        }
    }
}
