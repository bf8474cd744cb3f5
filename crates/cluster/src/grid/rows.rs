//! Which cells this node runs: for each row q it is a member of the consumer group
//! `<cluster>.grid.row.<q>` on the topic `<cluster>.grid.cells` (W partitions, no records).
//! Kafka's assignment of partition w of row q's group to this node means "run cell (q, w)":
//! a dead node's cells move to the others on the group's failover (the session timeout), and a
//! node that joins takes cells at once. Being assigned is not exclusive in time (a node that
//! lost its cell may still publish for a moment, a zombie); the claim rule makes that harmless.

use crate::grid::cell::{self, CellState};
use crate::grid::GridCtx;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A member of one row's group: keeps the partitions (cells) the group gave this node.
struct RowMember {
    row: u32,
    assigned: Arc<Mutex<BTreeSet<(u32, u32)>>>,
    ctx: Arc<GridCtx>,
}

impl ClientContext for RowMember {}

impl ConsumerContext for RowMember {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut assigned = self.assigned.lock().unwrap_or_else(|e| e.into_inner());
        // Cooperative rebalances report what changed; an eager one revokes all, then assigns.
        match rebalance {
            Rebalance::Assign(tpl) => {
                for e in tpl.elements() {
                    assigned.insert((self.row, e.partition() as u32));
                }
            }
            Rebalance::Revoke(tpl) => {
                for e in tpl.elements() {
                    assigned.remove(&(self.row, e.partition() as u32));
                }
            }
            Rebalance::Error(e) => {
                *self.ctx.error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("row {} group: {e}", self.row));
            }
        }
        if std::env::var_os("HERALD_CLUSTER_DEBUG").is_some() {
            eprintln!(
                "herald grid: node {} row {} rebalance {rebalance:?}",
                self.ctx.shared.opts.node_id, self.row
            );
        }
    }
}

struct Running {
    state: Arc<CellState>,
    thread: JoinHandle<()>,
}

/// Runs the row memberships and this node's cells until the grid stops.
pub(crate) fn run(ctx: Arc<GridCtx>) {
    let assigned = Arc::new(Mutex::new(BTreeSet::new()));
    let mut members: Vec<BaseConsumer<RowMember>> = Vec::new();
    while members.len() < ctx.shape.rows as usize && !ctx.stopping() {
        let row = members.len() as u32;
        let member = RowMember {
            row,
            assigned: assigned.clone(),
            ctx: ctx.clone(),
        };
        let joined = crate::kafka::grid_member(&ctx.shared.opts, row)
            .create_with_context(member)
            .map_err(|e| e.to_string())
            .and_then(|c: BaseConsumer<RowMember>| {
                c.subscribe(&[&ctx.topics.cells])
                    .map(|_| c)
                    .map_err(|e| e.to_string())
            });
        match joined {
            Ok(c) => members.push(c),
            Err(e) => {
                *ctx.error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("joining row {row}'s group: {e}"));
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    let mut running: BTreeMap<(u32, u32), Running> = BTreeMap::new();
    let mut stopping: Vec<Running> = Vec::new();
    while !ctx.stopping() {
        for m in &members {
            // Nothing is ever produced to the topic: polling only serves the group protocol.
            if let Some(Err(e)) = m.poll(Duration::from_millis(30)) {
                *ctx.error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("grid group: {e}"));
            }
        }
        let wanted = assigned.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let gone: Vec<(u32, u32)> = running
            .keys()
            .filter(|c| !wanted.contains(c))
            .copied()
            .collect();
        for c in gone {
            let r = running.remove(&c).expect("a running cell");
            r.state.stop.store(true, Ordering::Release);
            stopping.push(r);
        }
        for &(row, part) in &wanted {
            if running.contains_key(&(row, part)) {
                continue;
            }
            let state = Arc::new(CellState::new(row, part));
            let (c, s) = (ctx.clone(), state.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("herald-cell-{row}-{part}"))
                .spawn(move || cell::run(c, s));
            match spawned {
                Ok(thread) => {
                    running.insert((row, part), Running { state, thread });
                }
                Err(e) => {
                    *ctx.error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("starting cell ({row}, {part}): {e}"));
                }
            }
        }
        stopping.retain(|r| !r.thread.is_finished());
        *ctx.cells.lock().unwrap_or_else(|e| e.into_inner()) =
            running.values().map(|r| r.state.clone()).collect();
    }
    // Leave the groups now, so the others take the cells without waiting for the session
    // timeout; then stop the cells.
    for m in &members {
        m.unsubscribe();
    }
    for r in running.into_values().chain(stopping) {
        r.state.stop.store(true, Ordering::Release);
        let _ = r.thread.join();
    }
    ctx.cells.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
