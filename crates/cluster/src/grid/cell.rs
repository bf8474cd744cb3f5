//! One running cell (row q, write partition w) on this node: it matches this node's own
//! commits (every node has every commit, at the same seqs) against the row's views and
//! publishes one record per batch on the matches topic, each with the cumulative claim of
//! `wire::CellRecord`. It runs while the row's consumer group assigns it partition w.
//!
//! Start: the last claim `(P, E)` of the cell on the matches topic (whoever made it: a dead
//! owner, a zombie, this node earlier) says every view registered below E is matched up to P;
//! the cell starts at P with those views, and re-matches `(S, P]` for every later view (S its
//! start seq) before claiming `(P, E')`. Without a claim it starts at its node's seq and
//! re-matches every view. Matching is deterministic given the views and the commits, so the
//! records of two owners of one cell (a zombie's) never disagree.

use crate::grid::views::{CellViews, Match};
use crate::grid::wire::CellRecord;
use crate::grid::GridCtx;
use herald_db::LogRead;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Matches one record carries at most; a longer batch goes in several records, all but the
/// last under the previous claim (which stays true).
pub const MATCHES_PER_RECORD_MAX: usize = 20_000;
/// Commits matched in one batch at most (one record per batch, when nothing is long).
const BATCH_COMMITS_MAX: u64 = 1024;
/// How long an idle cell waits for a commit before it looks for new views again.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// A cell whose row has no view publishes a progress mark at most this often.
const EMPTY_ROW_MARK_EVERY: Duration = Duration::from_secs(5);

/// What a running cell shows in `/metrics` and `GET /v1/cluster`.
pub struct CellState {
    pub row: u32,
    pub part: u32,
    /// The seq the cell has matched and claimed (0 while starting).
    pub seq: AtomicU64,
    /// Views the cell matches.
    pub views: AtomicUsize,
    /// Set to stop the cell (the assignment was revoked, or the node stops).
    pub stop: AtomicBool,
    /// The last error (a commit log that no longer reaches a view's start, Kafka).
    pub error: Mutex<Option<String>>,
}

impl CellState {
    pub fn new(row: u32, part: u32) -> CellState {
        CellState {
            row,
            part,
            seq: AtomicU64::new(0),
            views: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    fn stopped(&self, ctx: &GridCtx) -> bool {
        self.stop.load(Ordering::Acquire) || ctx.shared.stopping()
    }

    fn fail(&self, why: String) {
        eprintln!("herald grid: cell ({}, {}): {why}", self.row, self.part);
        *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }
}

struct Cell<'a> {
    ctx: &'a GridCtx,
    state: &'a CellState,
    views: CellViews,
    /// The seq matched and claimed.
    pos: u64,
    /// The queries-topic offset the last claim covered.
    end: u64,
    /// When the cell last published.
    marked: Instant,
}

pub(crate) fn run(ctx: Arc<GridCtx>, state: Arc<CellState>) {
    let (row, part) = (state.row, state.part);
    while !ctx.registry.wait_caught_up(Duration::from_millis(500)) {
        if state.stopped(&ctx) {
            return;
        }
    }
    let claim = loop {
        if state.stopped(&ctx) {
            return;
        }
        match last_claim(&ctx, row, part) {
            Ok(c) => break c,
            Err(e) => {
                state.fail(e);
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    };
    let db = ctx.shared.db();
    // Positions are the feed's seqs, not `Db::seq`: the commit hook advances the seq before it
    // publishes the commit, so a range read up to `Db::seq` can miss the newest commit (and a
    // claim over it would be false). The engine reads up to the feed's seq too.
    let (pos, end) = claim.unwrap_or((db.feed().last_seq(), 0));
    // Re-matching up to the claim needs this node's commits up to it.
    while db.feed().last_seq() < pos {
        if state.stopped(&ctx) {
            return;
        }
        db.feed().wait_after(db.feed().last_seq(), IDLE_WAIT * 10);
    }
    // The claim covers the views registered below `end`: this node's copy of the views must
    // reach that far before the cell takes them as covered (a view it has not read yet would
    // never be matched, and the claim says it was).
    loop {
        let reg = ctx.registry.lock();
        if reg.end >= end {
            break;
        }
        let _ = ctx
            .registry
            .changed
            .wait_timeout(reg, IDLE_WAIT * 10)
            .unwrap_or_else(|e| e.into_inner());
        if state.stopped(&ctx) {
            return;
        }
    }
    let mut cell = Cell {
        ctx: &ctx,
        state: &state,
        views: CellViews::default(),
        pos,
        end,
        marked: Instant::now(),
    };
    {
        let reg = ctx.registry.lock();
        for (key, r) in &reg.views {
            if r.reg.row == row && r.offset < end {
                cell.views.add(key, &r.reg);
            }
        }
    }
    if std::env::var_os("HERALD_CLUSTER_DEBUG").is_some() {
        eprintln!(
            "herald grid: node {} runs cell ({row}, {part}) from seq {pos}, queries {end}",
            ctx.shared.opts.node_id
        );
    }
    state.seq.store(pos, Ordering::Release);
    while !state.stopped(&ctx) {
        if !cell.learn() {
            return;
        }
        state.views.store(cell.views.len(), Ordering::Release);
        let last = db.feed().last_seq();
        if last > cell.pos {
            if !cell.advance(last.min(cell.pos + BATCH_COMMITS_MAX)) {
                return;
            }
            continue;
        }
        db.feed().wait_after(cell.pos, IDLE_WAIT);
    }
}

impl Cell<'_> {
    /// Takes the views registered since the last claim (and drops removed ones); re-matches
    /// the new ones up to `pos` and claims them. `false` when the cell stopped.
    fn learn(&mut self) -> bool {
        let (row, end) = (self.state.row, self.end);
        let (new_end, fresh) = {
            let reg = self.ctx.registry.lock();
            if reg.end <= end {
                return true;
            }
            self.views.retain(|k| reg.views.contains_key(k));
            let fresh: Vec<(String, crate::grid::wire::Registration)> = reg
                .views
                .iter()
                .filter(|(k, r)| r.reg.row == row && r.offset >= end && !self.views.contains(k))
                .map(|(k, r)| (k.clone(), r.reg.clone()))
                .collect();
            (reg.end, fresh)
        };
        let mut keys = HashSet::new();
        let mut from = u64::MAX;
        for (key, reg) in &fresh {
            if self.views.add(key, reg) {
                keys.insert(key.clone());
                from = from.min(reg.from_seq);
            } else {
                self.state
                    .fail(format!("view {key}: a filter this node cannot parse"));
            }
        }
        if keys.is_empty() {
            // Nothing of this row: the next batch's record carries the new offset.
            self.end = new_end;
            return true;
        }
        let only = self.views.ids(&keys);
        let mut matches = Vec::new();
        let db = self.ctx.shared.db();
        let mut at = from;
        while at < self.pos {
            let upto = self.pos.min(at + BATCH_COMMITS_MAX);
            match db.commits_between(at, upto) {
                Ok(LogRead::Commits(commits)) => {
                    for c in &commits {
                        self.views.matches(
                            c,
                            self.state.part,
                            self.ctx.shape.partitions,
                            Some(&only),
                            &mut matches,
                        );
                    }
                }
                Ok(LogRead::Gone { .. }) => {
                    self.state.fail(format!(
                        "the commit log no longer reaches seq {at}, where a new view starts: \
                         its matches before seq {} are missing",
                        self.pos
                    ));
                    break;
                }
                Err(e) => {
                    self.state.fail(format!("reading commits: {e}"));
                    std::thread::sleep(Duration::from_secs(1));
                    if self.state.stopped(self.ctx) {
                        return false;
                    }
                    continue;
                }
            }
            at = upto;
            if matches.len() >= MATCHES_PER_RECORD_MAX
                && !self.publish(self.pos, self.end, std::mem::take(&mut matches))
            {
                return false;
            }
        }
        self.end = new_end;
        self.publish(self.pos, new_end, matches)
    }

    /// Matches this node's commits up to `upto` and claims them. `false` when stopped.
    fn advance(&mut self, upto: u64) -> bool {
        if self.views.is_empty() {
            // No view in the row: nothing to match, and no front end waits on this cell (one
            // that registers a view gets a claim from `learn`). A mark now and then keeps the
            // last claim near the topic's end for whoever takes the cell over.
            if self.marked.elapsed() >= EMPTY_ROW_MARK_EVERY
                && !self.publish(upto, self.end, Vec::new())
            {
                return false;
            }
            self.pos = upto;
            self.state.seq.store(upto, Ordering::Release);
            return true;
        }
        let db = self.ctx.shared.db();
        let commits = match db.commits_between(self.pos, upto) {
            Ok(LogRead::Commits(c)) => c,
            Ok(LogRead::Gone { .. }) => {
                // This node's own log lost commits the cell has not matched: only when it fell
                // behind retention. The cell cannot claim them; its front ends reset on stall.
                self.state.fail(format!(
                    "the commit log no longer reaches seq {}",
                    self.pos + 1
                ));
                std::thread::sleep(Duration::from_secs(1));
                return !self.state.stopped(self.ctx);
            }
            Err(e) => {
                self.state.fail(format!("reading commits: {e}"));
                std::thread::sleep(Duration::from_secs(1));
                return !self.state.stopped(self.ctx);
            }
        };
        let mut matches = Vec::new();
        for c in &commits {
            self.views.matches(
                c,
                self.state.part,
                self.ctx.shape.partitions,
                None,
                &mut matches,
            );
            if matches.len() >= MATCHES_PER_RECORD_MAX
                && c.seq < upto
                && !self.publish(self.pos, self.end, std::mem::take(&mut matches))
            {
                return false;
            }
        }
        if !self.publish(upto, self.end, matches) {
            return false;
        }
        self.pos = upto;
        self.state.seq.store(upto, Ordering::Release);
        true
    }

    /// Publishes one record, retrying until Kafka takes it (the claim must not be skipped) or
    /// the cell stops.
    fn publish(&mut self, to_seq: u64, queries_end: u64, matches: Vec<Match>) -> bool {
        self.marked = Instant::now();
        let record = CellRecord {
            row: self.state.row,
            part: self.state.part,
            to_seq,
            queries_end,
            matches,
            node: self.ctx.shared.opts.node_id.clone(),
        };
        let bytes = serde_json::to_vec(&record).expect("cell record JSON");
        let key = format!("{}/{}", record.row, record.part);
        loop {
            match self
                .ctx
                .shared
                .produce(&self.ctx.topics.matches, Some(key.as_bytes()), &bytes)
            {
                Ok(_) => return true,
                Err(e) => {
                    self.state.fail(format!("publishing matches: {e}"));
                    if self.state.stopped(self.ctx) {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }
}

/// Records read back at first when looking for a cell's last claim; the window grows fourfold
/// until it finds one or reaches the topic's start.
const CLAIM_SEARCH_FIRST: i64 = 512;

/// The last claim `(to_seq, queries_end)` of cell (row, part) on the matches topic, if any.
fn last_claim(ctx: &GridCtx, row: u32, part: u32) -> Result<Option<(u64, u64)>, String> {
    let what = format!("grid.claims.{row}.{part}");
    let consumer: BaseConsumer = crate::kafka::reader(&ctx.shared.opts, &what)
        .create()
        .map_err(|e| format!("claims consumer: {e}"))?;
    let topic = &ctx.topics.matches;
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .map_err(|e| format!("the matches topic's bounds: {e}"))?;
    let mut to = high;
    let mut window = CLAIM_SEARCH_FIRST;
    while to > low {
        let from = (to - window).max(low);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(from))
            .map_err(|e| e.to_string())?;
        consumer.assign(&tpl).map_err(|e| e.to_string())?;
        let mut found = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if Instant::now() > deadline {
                return Err("reading the matches topic timed out".into());
            }
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    if m.offset() >= to {
                        break;
                    }
                    let r = m
                        .payload()
                        .and_then(|p| serde_json::from_slice::<CellRecord>(p).ok());
                    if let Some(r) = r.filter(|r| r.row == row && r.part == part) {
                        found = Some((r.to_seq, r.queries_end));
                    }
                    if m.offset() + 1 >= to {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(format!("reading the matches topic: {e}")),
                None => {}
            }
        }
        if found.is_some() {
            return Ok(found);
        }
        to = from;
        window = window.saturating_mul(4);
    }
    Ok(None)
}
