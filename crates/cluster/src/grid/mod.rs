//! The matching grid across machines: cluster nodes run the cells of a Q x W grid of live-query
//! matching (query partitions x write partitions), assigned by Kafka consumer groups, and the
//! front ends (the nodes holding subscriptions) collect their views' matches from a topic.
//! docs/cluster.md ("Matching grid") has the argument.
//!
//! Every node is a full replica with every commit, both images and the same seqs, in its own
//! commit log: so a cell reads its node's commits, not a topic of changes. Kafka carries the
//! assignment (`rows.rs`), the active views (`queries.rs`) and the matches (`cell.rs` writes,
//! `front.rs` reads).
//!
//! - `wire.rs`: the records on the grid's topics.
//! - `coverage.rs`: the front end's pure release rule (when a seq's matches are complete).
//! - `queries.rs`: every node's copy of the active views, from the queries topic.
//! - `views.rs`: the views one cell matches.
//! - `cell.rs`: one running cell.
//! - `rows.rs`: the row groups: which cells this node runs.
//! - `lease.rs`: front-end leases, and the removal of views whose front end is gone for good.
//! - `front.rs`: `KafkaMatching`, the engine's `Matching` on a cluster node.

mod cell;
pub mod coverage;
mod front;
pub mod lease;
pub mod queries;
mod rows;
mod views;
pub mod wire;

pub use front::KafkaMatching;
pub use lease::LEASE_DEFAULT;

pub use crate::kafka::GridTopics;
use crate::node::{Node, StartError};
use crate::shared::Shared;
use cell::CellState;
use queries::Registry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
pub use wire::Shape;

/// What the grid's threads share.
pub(crate) struct GridCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) topics: GridTopics,
    pub(crate) shape: Shape,
    pub(crate) registry: Arc<Registry>,
    /// The cells this node runs (for status), as the rows thread last set them.
    pub(crate) cells: Mutex<Vec<Arc<CellState>>>,
    /// The last error of the row groups.
    pub(crate) error: Mutex<Option<String>>,
    pub(crate) stop: AtomicBool,
    /// Distinguishes this run of the node in view keys: keys are never reused across restarts.
    pub(crate) incarnation: u64,
    /// How long a front end's lease lives without renewal (`ClusterOptions::grid_lease`).
    pub(crate) lease_ttl: Duration,
    /// When this node sent its last lease record that Kafka confirmed (the grid's start
    /// before the first).
    lease_renewed: Mutex<Instant>,
}

impl GridCtx {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.shared.stopping()
    }

    fn renewed(&self, sent: Instant) {
        let mut at = self.lease_renewed.lock().unwrap_or_else(|e| e.into_inner());
        *at = (*at).max(sent);
    }

    /// Whether this node's front end must stop trusting the cells now (`lease::lease_lost`).
    pub(crate) fn lease_lost(&self) -> bool {
        let at = *self.lease_renewed.lock().unwrap_or_else(|e| e.into_inner());
        lease::lease_lost(at, Instant::now(), self.lease_ttl)
    }
}

/// A cell this node runs, as `/metrics` and `GET /v1/cluster` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningCell {
    pub row: u32,
    pub part: u32,
    /// The seq the cell has matched and claimed.
    pub seq: u64,
    /// This node's seq minus `seq`: how far the cell is behind.
    pub lag: u64,
    /// Views of its row it matches.
    pub views: usize,
    pub error: Option<String>,
}

/// The grid on one node: its share of the cells, and the queries registry. Dropping it leaves
/// the row groups (the others take its cells at once) and stops its threads.
pub struct Grid {
    ctx: Arc<GridCtx>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// How long a starting node waits to read the queries topic.
const START_WAIT: Duration = Duration::from_secs(20);

impl Grid {
    /// Joins the grid of `node`'s cluster with `shape`: creates the topics if missing, refuses
    /// a shape other nodes do not share, and starts taking cells.
    pub fn start(node: &Node, shape: Shape) -> Result<Grid, StartError> {
        if shape.rows == 0 || shape.partitions == 0 {
            return Err(StartError::Kafka(
                "the grid needs at least one row and one partition".into(),
            ));
        }
        let shared = node.shared.clone();
        let topics = GridTopics::new(&shared.opts.cluster);
        let parts = crate::kafka::ensure_grid_topics(&shared.opts, &topics, shape.partitions)
            .map_err(StartError::Kafka)?;
        if parts != shape.partitions {
            return Err(StartError::Kafka(format!(
                "--grid-partitions {} but the cluster's grid has {parts} write partitions \
                 (topic {}): every node must use the same grid",
                shape.partitions, topics.cells
            )));
        }
        let incarnation = crate::status::now_ms();
        let ctx = Arc::new(GridCtx {
            shared: shared.clone(),
            topics,
            shape,
            registry: Arc::new(Registry::default()),
            cells: Mutex::new(Vec::new()),
            error: Mutex::new(None),
            stop: AtomicBool::new(false),
            incarnation,
            lease_ttl: shared.opts.grid_lease,
            lease_renewed: Mutex::new(Instant::now()),
        });
        let grid = Grid {
            ctx: ctx.clone(),
            threads: Mutex::new(Vec::new()),
        };
        let push = |t| {
            grid.threads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(t)
        };
        let c = ctx.clone();
        push(
            std::thread::Builder::new()
                .name("herald-grid-queries".into())
                .spawn(move || queries::run(c))?,
        );
        if !ctx.registry.wait_caught_up(START_WAIT) {
            let why = ctx.registry.lock().error.clone();
            return Err(StartError::Kafka(format!(
                "could not read the grid's queries topic: {}",
                why.unwrap_or_else(|| "timed out".into())
            )));
        }
        let known = ctx.registry.lock().shape;
        match known {
            Some(s) if s != shape => {
                return Err(StartError::Kafka(format!(
                    "--grid-rows {} --grid-partitions {} but the cluster's grid is {} x {}: \
                     every node must use the same grid",
                    shape.rows, shape.partitions, s.rows, s.partitions
                )))
            }
            Some(_) => {}
            None => {
                let bytes = serde_json::to_vec(&shape).expect("shape JSON");
                shared
                    .produce(
                        &ctx.topics.queries,
                        Some(wire::CONFIG_KEY.as_bytes()),
                        &bytes,
                    )
                    .map_err(StartError::Kafka)?;
            }
        }
        forget_earlier_runs(&ctx);
        let c = ctx.clone();
        push(
            std::thread::Builder::new()
                .name("herald-grid-lease".into())
                .spawn(move || lease::run(c))?,
        );
        let c = ctx.clone();
        push(
            std::thread::Builder::new()
                .name("herald-grid-rows".into())
                .spawn(move || rows::run(c))?,
        );
        Ok(grid)
    }

    pub fn shape(&self) -> Shape {
        self.ctx.shape
    }

    /// The front end for this node's live-query engine.
    pub fn front_end(&self) -> Result<KafkaMatching, StartError> {
        KafkaMatching::start(self.ctx.clone()).map_err(StartError::Kafka)
    }

    /// The cells this node runs now.
    pub fn running(&self) -> Vec<RunningCell> {
        let seq = self.ctx.shared.db().feed().last_seq();
        let mut out: Vec<RunningCell> = self
            .ctx
            .cells
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|c| {
                let at = c.seq.load(Ordering::Acquire);
                RunningCell {
                    row: c.row,
                    part: c.part,
                    seq: at,
                    lag: seq.saturating_sub(at),
                    views: c.views.load(Ordering::Acquire),
                    error: c.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                }
            })
            .collect();
        out.sort_by_key(|c| (c.row, c.part));
        out
    }

    /// Views registered in the whole grid, as this node's copy of the queries topic says.
    pub fn registered_views(&self) -> usize {
        self.ctx.registry.lock().views.len()
    }

    /// The last error of the grid's Kafka clients, if any.
    pub fn error(&self) -> Option<String> {
        let own = self
            .ctx
            .error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        own.or_else(|| self.ctx.registry.lock().error.clone())
    }

    /// Leaves the row groups (the other nodes take this node's cells at once) and stops the
    /// grid's threads; a front end of this grid stops reading too.
    pub fn stop(&self) {
        // Best effort: a lease left behind expires and is removed by another node.
        let own = wire::lease_key(&wire::key_prefix(
            &self.ctx.shared.opts.node_id,
            self.ctx.incarnation,
        ));
        if !self.ctx.stop.load(Ordering::Acquire) {
            let _ = self.ctx.shared.producer.send(
                rdkafka::producer::BaseRecord::<str, [u8], _>::with_opaque_to(
                    &self.ctx.topics.queries,
                    Box::new(std::sync::mpsc::sync_channel(1).0),
                )
                .key(own.as_str()),
            );
        }
        self.ctx.stop.store(true, Ordering::Release);
        self.ctx.registry.changed.notify_all();
        let threads: Vec<JoinHandle<()>> = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Removes the views an earlier run of this node registered (it died without removing them:
/// their subscribers are gone, and the cells would match them forever). Keys carry the node id
/// and the run's incarnation; only one process runs as a node id at a time.
fn forget_earlier_runs(ctx: &GridCtx) {
    let node = &ctx.shared.opts.node_id;
    let mine = wire::key_prefix(node, ctx.incarnation);
    let stale: Vec<String> = ctx
        .registry
        .lock()
        .views
        .iter()
        .filter(|(k, r)| r.reg.node == *node && !k.starts_with(&mine))
        .map(|(k, _)| k.clone())
        .collect();
    // And the lease records of its earlier runs (keys `lease/<node>/<incarnation>/`).
    let earlier_lease = |p: &str| {
        p != mine
            && p.strip_prefix(node.as_str())
                .and_then(|r| r.strip_prefix('/'))
                .and_then(|r| r.strip_suffix('/'))
                .is_some_and(|inc| !inc.is_empty() && inc.bytes().all(|b| b.is_ascii_digit()))
    };
    let leases: Vec<String> = ctx
        .registry
        .lock()
        .seen
        .keys()
        .filter(|p| earlier_lease(p))
        .map(|p| wire::lease_key(p))
        .collect();
    if !stale.is_empty() {
        eprintln!(
            "herald grid: node {node} removes {} views of its earlier runs",
            stale.len()
        );
    }
    let mut waits = Vec::new();
    for key in stale.iter().chain(&leases) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let record = rdkafka::producer::BaseRecord::<str, [u8], _>::with_opaque_to(
            &ctx.topics.queries,
            Box::new(tx),
        )
        .key(key.as_str());
        if ctx.shared.producer.send(record).is_ok() {
            waits.push(rx);
        }
    }
    // Best effort: a tombstone lost now is sent again at the next start.
    let wait = ctx.shared.opts.write_timeout + Duration::from_secs(1);
    for rx in waits {
        let _ = rx.recv_timeout(wait);
    }
}

impl Drop for Grid {
    fn drop(&mut self) {
        self.stop();
    }
}
