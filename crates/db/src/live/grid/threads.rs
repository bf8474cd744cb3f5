//! `Threads`: the matching grid inside one process, Q rows (query partitions) x W write
//! partitions of cell threads, several commits in flight.
//!
//! Every dispatched commit goes to every cell (a bounded queue each; the commits dispatched
//! between two `collect`s travel as one batch, so a burst of small commits costs each cell one
//! wake-up); cell (q, w) matches the changes of write partition w against row q's views and
//! reports them; `collect` hands out the oldest commit once all Q x W cells reported it, each
//! view's change indexes merged over the W partitions. A row's W cells share one `CellMatcher` (behind an `RwLock`: one copy of the
//! predicate index per row, not per cell). The engine changes views only when nothing is in
//! flight, so no cell is reading a row's matcher for a live commit while it changes; cells still
//! busy with commits of a cleared epoch may hold the read lock, and the update waits for them.
//!
//! Ordering: each cell takes its queue in dispatch order, and results are filed by dispatch
//! number, so whatever order cells finish in, `collect` returns commits in dispatch order.
//! `clear` bumps the epoch: results of older epochs are dropped when they arrive.

use super::{CellMatcher, CellStatus, GridError, Matches, Matching};
use crate::live::feed::Commit;
use crate::live::matcher::ViewId;
use herald_query::Filter;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bounds of rows and of write partitions (the server's `--grid-rows`/`--grid-partitions`).
pub const GRID_DIM_MAX: u32 = 64;
/// Bound of the pipeline depth.
pub const GRID_DEPTH_MAX: usize = 1024;
/// The pipeline depth the server uses (see docs/live-queries.md, "Matching grid").
pub const GRID_DEPTH_DEFAULT: usize = 32;

/// The shape of a [`Threads`] grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadsConfig {
    /// Query partitions (1..=64): each view is matched by one row.
    pub rows: u32,
    /// Write partitions (1..=64): each change is matched by one cell of its view's row.
    pub parts: u32,
    /// Commits in flight at once (1..=1024).
    pub depth: usize,
    /// Match on the engine's thread while fewer views than this are registered ([`Adaptive`],
    /// through [`start`](super::start)); 0: always on the cell threads.
    ///
    /// [`Adaptive`]: super::Adaptive
    pub threads_from_views: usize,
    /// Tests only: each cell sleeps a random 0..jitter before matching a commit, so cells finish
    /// out of order. Zero in production.
    pub jitter: Duration,
    /// Tests only: cell (row, part) panics while matching the commit of this seq.
    #[cfg(test)]
    pub panic_at: Option<(u32, u32, u64)>,
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        ThreadsConfig {
            rows: 1,
            parts: 1,
            depth: GRID_DEPTH_DEFAULT,
            threads_from_views: 0,
            jitter: Duration::ZERO,
            #[cfg(test)]
            panic_at: None,
        }
    }
}

impl ThreadsConfig {
    /// Checks the bounds; the message names the offending value.
    pub fn validate(&self) -> Result<(), String> {
        for (what, v) in [("rows", self.rows), ("partitions", self.parts)] {
            if !(1..=GRID_DIM_MAX).contains(&v) {
                return Err(format!(
                    "grid {what} must be between 1 and {GRID_DIM_MAX}, not {v}"
                ));
            }
        }
        if !(1..=GRID_DEPTH_MAX).contains(&self.depth) {
            return Err(format!(
                "grid depth must be between 1 and {GRID_DEPTH_MAX}, not {}",
                self.depth
            ));
        }
        Ok(())
    }
}

/// Consecutive commits for one cell: the commits dispatched since the engine last collected,
/// sent at once so a busy stream of small commits costs one wake-up per batch, not per commit.
struct Job {
    epoch: u64,
    /// Dispatch number of the first commit; the others follow in order.
    first: u64,
    commits: Vec<Arc<Commit>>,
}

/// One commit's matches from one cell, or why it has none (it panicked).
type CellResult = Result<Vec<(ViewId, Vec<u32>)>, String>;

/// One cell's answer for one job: per commit its result.
struct Report {
    epoch: u64,
    first: u64,
    views: Vec<CellResult>,
}

struct Row {
    matcher: Arc<RwLock<CellMatcher>>,
    views: usize,
}

struct Cell {
    row: u32,
    part: u32,
    jobs: SyncSender<Job>,
    /// The newest seq this cell matched.
    seq: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

/// A commit in flight: the cells' answers gathered so far.
struct Pending {
    no: u64,
    commit: Arc<Commit>,
    /// Cells that have not reported yet.
    waiting: usize,
    views: Vec<(ViewId, Vec<u32>)>,
    /// A cell failed on this commit: why.
    lost: Option<String>,
}

/// The in-process matching grid (see the module docs).
pub struct Threads {
    config: ThreadsConfig,
    rows: Vec<Row>,
    cells: Vec<Cell>,
    /// The row each view is matched in.
    view_row: HashMap<ViewId, u32>,
    /// Commits dispatched and not yet collected, oldest first (dispatch numbers consecutive).
    pending: VecDeque<Pending>,
    /// Commits dispatched but not yet sent to the cells (sent by `collect`, or when `depth`
    /// of them wait): the first's dispatch number and the commits.
    unsent: (u64, Vec<Arc<Commit>>),
    reports: Receiver<Report>,
    /// Cloned into cells that are (re)started.
    report_tx: SyncSender<Report>,
    /// Bumped by `clear`; jobs carry it and reports of an older one are dropped.
    epoch: u64,
    /// The next commit's dispatch number.
    next_no: u64,
}

impl Threads {
    /// Starts the Q x W cell threads. Panics if `config` is out of bounds (callers validate).
    pub fn start(config: ThreadsConfig) -> Threads {
        config.validate().expect("a valid grid config");
        let n = (config.rows * config.parts) as usize;
        // Each cell has at most `depth` jobs (batches) queued plus one in hand, so reports
        // never exceed this unless jobs of a cleared epoch are still draining; `flush` then
        // takes reports while it waits, so neither side blocks the other for good.
        let (report_tx, reports) = sync_channel(n * (config.depth + 1));
        let rows = (0..config.rows)
            .map(|_| Row {
                matcher: Arc::default(),
                views: 0,
            })
            .collect();
        let mut grid = Threads {
            config,
            rows,
            cells: Vec::with_capacity(n),
            view_row: HashMap::new(),
            pending: VecDeque::new(),
            unsent: (0, Vec::new()),
            reports,
            report_tx,
            epoch: 0,
            next_no: 0,
        };
        for row in 0..grid.config.rows {
            for part in 0..grid.config.parts {
                let cell = grid.spawn(row, part, Arc::new(AtomicU64::new(0)));
                grid.cells.push(cell);
            }
        }
        grid
    }

    fn spawn(&self, row: u32, part: u32, seq: Arc<AtomicU64>) -> Cell {
        let (jobs, rx) = sync_channel::<Job>(self.config.depth);
        let matcher = Arc::clone(&self.rows[row as usize].matcher);
        let out = self.report_tx.clone();
        let parts = self.config.parts;
        let jitter = self.config.jitter;
        let seq2 = Arc::clone(&seq);
        #[cfg(test)]
        let panic_at = self.config.panic_at;
        let thread = std::thread::Builder::new()
            .name(format!("herald-cell-{row}-{part}"))
            .spawn(move || {
                let mut rng = (!jitter.is_zero()).then(|| {
                    use rand::SeedableRng;
                    rand::rngs::StdRng::seed_from_u64(u64::from(row) << 32 | u64::from(part))
                });
                while let Ok(job) = rx.recv() {
                    let mut views = Vec::with_capacity(job.commits.len());
                    for commit in &job.commits {
                        if let Some(rng) = rng.as_mut() {
                            use rand::Rng;
                            std::thread::sleep(jitter.mul_f64(rng.gen::<f64>()));
                        }
                        // A panic in matching (a bug) is reported, not silent: the engine
                        // would otherwise wait for this cell's answer forever.
                        let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            #[cfg(test)]
                            if panic_at == Some((row, part, commit.seq)) {
                                panic!("cell {row}-{part} told to panic at {}", commit.seq);
                            }
                            // A read guard is not poisoned by a panic; a poisoned lock means
                            // an update panicked, and the matcher is still readable.
                            let m = matcher.read().unwrap_or_else(|e| e.into_inner());
                            m.match_commit(commit, part, parts, None)
                        }))
                        .map_err(|e| {
                            let why = e
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            format!("cell {row}-{part} failed at seq {}: {why}", commit.seq)
                        });
                        views.push(v);
                        seq2.store(commit.seq, Ordering::Release);
                    }
                    let report = Report {
                        epoch: job.epoch,
                        first: job.first,
                        views,
                    };
                    if out.send(report).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn a grid cell");
        Cell {
            row,
            part,
            jobs,
            seq,
            thread: Some(thread),
        }
    }

    /// Files one report into its pending commits; reports of a cleared epoch are dropped.
    fn file(&mut self, r: Report) {
        if r.epoch != self.epoch {
            return;
        }
        let Some(front) = self.pending.front().map(|p| p.no) else {
            return;
        };
        for (no, views) in (r.first..).zip(r.views) {
            let Some(p) = no
                .checked_sub(front)
                .and_then(|i| self.pending.get_mut(i as usize))
            else {
                continue;
            };
            p.waiting = p.waiting.saturating_sub(1);
            match views {
                Ok(v) => p.views.extend(v),
                Err(why) => {
                    p.lost.get_or_insert(why);
                }
            }
        }
    }

    /// Sends the unsent commits to every cell as one job.
    fn flush(&mut self) {
        if self.unsent.1.is_empty() {
            return;
        }
        let (first, commits) = std::mem::take(&mut self.unsent);
        let end = first + commits.len() as u64;
        for i in 0..self.cells.len() {
            let mut job = Job {
                epoch: self.epoch,
                first,
                commits: commits.clone(),
            };
            loop {
                match self.cells[i].jobs.try_send(job) {
                    Ok(()) => break,
                    // The cell still works through commits of a cleared epoch: take reports
                    // meanwhile so the cell never blocks on a full report queue while we
                    // block on its full job queue.
                    Err(TrySendError::Full(j)) => {
                        job = j;
                        self.pump(Duration::from_millis(1));
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        // The cell is gone; `collect` reports these commits lost.
                        let why =
                            format!("cell {}-{} stopped", self.cells[i].row, self.cells[i].part);
                        for p in self.pending.iter_mut() {
                            if (first..end).contains(&p.no) {
                                p.waiting -= 1;
                                p.lost.get_or_insert(why.clone());
                            }
                        }
                        break;
                    }
                }
            }
        }
    }

    /// Waits up to `timeout` for one report and files it; false on timeout.
    fn pump(&mut self, timeout: Duration) -> bool {
        match self.reports.recv_timeout(timeout) {
            Ok(r) => {
                self.file(r);
                true
            }
            // Cannot happen while `self.report_tx` lives.
            Err(RecvTimeoutError::Disconnected) | Err(RecvTimeoutError::Timeout) => false,
        }
    }

    /// A cell thread that is gone (it cannot be, short of an abort inside matching): why.
    fn dead_cell(&self) -> Option<String> {
        self.cells
            .iter()
            .find(|c| c.thread.as_ref().is_none_or(JoinHandle::is_finished))
            .map(|c| format!("cell {}-{} stopped", c.row, c.part))
    }
}

impl Matching for Threads {
    fn add_view(&mut self, id: ViewId, collection: &str, filter: Arc<Filter>) {
        self.remove_view(id);
        // Balance by count: the row with the fewest views (ties: the first).
        let (row, r) = self
            .rows
            .iter_mut()
            .enumerate()
            .min_by_key(|(_, r)| r.views)
            .expect("at least one row");
        r.matcher
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .add(id, collection, filter);
        r.views += 1;
        self.view_row.insert(id, row as u32);
    }

    fn remove_view(&mut self, id: ViewId) {
        if let Some(row) = self.view_row.remove(&id) {
            let r = &mut self.rows[row as usize];
            r.matcher
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id);
            r.views -= 1;
        }
    }

    fn dispatch(&mut self, commit: Arc<Commit>) {
        let no = self.next_no;
        self.next_no += 1;
        self.pending.push_back(Pending {
            no,
            commit: Arc::clone(&commit),
            waiting: self.cells.len(),
            views: Vec::new(),
            lost: None,
        });
        if self.unsent.1.is_empty() {
            self.unsent.0 = no;
        }
        self.unsent.1.push(commit);
        if self.unsent.1.len() >= self.config.depth {
            self.flush();
        }
    }

    fn collect(&mut self, timeout: Duration) -> Result<Option<Matches>, GridError> {
        self.flush();
        let deadline = Instant::now() + timeout;
        loop {
            // Take whatever is already there without waiting.
            while let Ok(r) = self.reports.try_recv() {
                self.file(r);
            }
            let Some(front) = self.pending.front() else {
                return Ok(None);
            };
            if let Some(why) = &front.lost {
                return Err(GridError::Lost(why.clone()));
            }
            if front.waiting == 0 {
                let p = self.pending.pop_front().expect("a front");
                return Ok(Some(Matches {
                    commit: p.commit,
                    views: merge(p.views),
                }));
            }
            let now = Instant::now();
            if now >= deadline {
                if let Some(why) = self.dead_cell() {
                    return Err(GridError::Lost(why));
                }
                return Ok(None);
            }
            self.pump(deadline - now);
        }
    }

    fn clear(&mut self) {
        self.pending.clear();
        self.unsent.1.clear();
        self.epoch += 1;
        // A cell thread that died is started again, so the grid is whole for what follows.
        for i in 0..self.cells.len() {
            if self.cells[i]
                .thread
                .as_ref()
                .is_none_or(JoinHandle::is_finished)
            {
                let (row, part) = (self.cells[i].row, self.cells[i].part);
                let seq = Arc::clone(&self.cells[i].seq);
                let fresh = self.spawn(row, part, seq);
                let old = std::mem::replace(&mut self.cells[i], fresh);
                drop(old);
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn depth(&self) -> usize {
        self.config.depth
    }

    fn cells(&self) -> Vec<CellStatus> {
        self.cells
            .iter()
            .map(|c| CellStatus {
                row: c.row,
                part: c.part,
                seq: c.seq.load(Ordering::Acquire),
                views: self.rows[c.row as usize].views,
                node: None,
            })
            .collect()
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        // The job sender goes with the cell; the thread ends after its current job. Joined by
        // `Threads::drop`, which keeps taking reports so it cannot block on a full queue.
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        let threads: Vec<JoinHandle<()>> = self
            .cells
            .iter_mut()
            .filter_map(|c| c.thread.take())
            .collect();
        // Dropping the senders ends every cell's loop.
        self.cells.clear();
        for t in threads {
            while !t.is_finished() {
                while self.reports.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = t.join();
        }
    }
}

/// One commit's reports merged: per view its change indexes ascending (a view's row reports
/// each of its W partitions separately), views by id.
fn merge(mut views: Vec<(ViewId, Vec<u32>)>) -> Vec<(ViewId, Vec<u32>)> {
    views.sort_unstable_by_key(|(v, _)| *v);
    let mut out: Vec<(ViewId, Vec<u32>)> = Vec::with_capacity(views.len());
    let mut unsorted = false;
    for (v, idx) in views {
        match out.last_mut() {
            Some((last, have)) if *last == v => {
                have.extend(idx);
                unsorted = true;
            }
            _ => out.push((v, idx)),
        }
    }
    if unsorted {
        for (_, idx) in &mut out {
            idx.sort_unstable();
            idx.dedup();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Change, ChangeOp};
    use serde_json::{json, Value};

    fn commit(seq: u64, docs: &[(&str, Option<Value>, Option<Value>)]) -> Arc<Commit> {
        Arc::new(Commit {
            seq,
            changes: docs
                .iter()
                .map(|(id, before, after)| Change {
                    collection: "c".into(),
                    id: (*id).into(),
                    op: ChangeOp::Update,
                    version: 1,
                    before: before.clone(),
                    after: after.clone(),
                })
                .collect(),
            bytes: 0,
        })
    }

    fn filter(v: Value) -> Arc<Filter> {
        Arc::new(Filter::parse(&v).unwrap())
    }

    /// Commits of 1..=6 changes to documents d0..d19 with `a` in 0..5 (deterministic).
    fn commits(n: u64) -> Vec<Arc<Commit>> {
        (1..=n)
            .map(|seq| {
                let k = (seq % 6 + 1) as usize;
                let docs: Vec<(String, Option<Value>, Option<Value>)> = (0..k)
                    .map(|i| {
                        let x = seq * 7 + i as u64 * 13;
                        (
                            format!("d{}", x % 20),
                            (!x.is_multiple_of(3)).then(|| json!({"a": x % 5})),
                            (!x.is_multiple_of(4))
                                .then(|| json!({"a": (x / 5) % 5, "s": format!("k{x}")})),
                        )
                    })
                    .collect();
                let refs: Vec<(&str, Option<Value>, Option<Value>)> = docs
                    .iter()
                    .map(|(id, b, a)| (id.as_str(), b.clone(), a.clone()))
                    .collect();
                commit(seq, &refs)
            })
            .collect()
    }

    fn views() -> Vec<Arc<Filter>> {
        vec![
            filter(json!({"a": 1})),
            filter(json!({"a": {"$gte": 3}})),
            filter(json!({"$or": [{"a": 0}, {"s": {"$regex": "7"}}]})),
            filter(json!({})),
            filter(json!({"a": {"$ne": 2}})),
        ]
    }

    fn reference(fs: &[Arc<Filter>], c: &Commit) -> Vec<(ViewId, Vec<u32>)> {
        let mut one = CellMatcher::default();
        for (i, f) in fs.iter().enumerate() {
            one.add(i as ViewId, "c", f.clone());
        }
        let mut v = one.match_commit(c, 0, 1, None);
        v.sort();
        v
    }

    fn collect_one(g: &mut Threads) -> Matches {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(m) = g.collect(Duration::from_millis(20)).unwrap() {
                return m;
            }
            assert!(Instant::now() < deadline, "a commit's matches within 10 s");
        }
    }

    #[test]
    fn commits_come_back_in_order_with_partitions_merged() {
        for (rows, parts) in [(1, 1), (1, 3), (2, 1), (3, 4)] {
            let mut g = Threads::start(ThreadsConfig {
                rows,
                parts,
                depth: 8,
                jitter: Duration::from_millis(2),
                ..Default::default()
            });
            let fs = views();
            for (i, f) in fs.iter().enumerate() {
                g.add_view(i as ViewId, "c", f.clone());
            }
            let all = commits(40);
            let mut next = 0;
            let mut got = Vec::new();
            while got.len() < all.len() {
                while next < all.len() && g.in_flight() < g.depth() {
                    g.dispatch(all[next].clone());
                    next += 1;
                }
                got.push(collect_one(&mut g));
            }
            assert_eq!(g.in_flight(), 0);
            for (m, c) in got.iter().zip(&all) {
                assert_eq!(m.commit.seq, c.seq, "{rows}x{parts}: dispatch order");
                assert_eq!(m.views, reference(&fs, c), "{rows}x{parts} seq {}", c.seq);
            }
            let cells = g.cells();
            assert_eq!(cells.len(), (rows * parts) as usize);
            assert!(cells.iter().all(|c| c.seq == 40));
            // 5 views over the rows by count: sizes differ by at most one.
            let per_row: Vec<usize> = (0..rows)
                .map(|r| cells.iter().find(|c| c.row == r).unwrap().views)
                .collect();
            assert_eq!(per_row.iter().sum::<usize>(), 5);
            assert!(per_row.iter().max().unwrap() - per_row.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn views_change_from_the_next_commit() {
        let mut g = Threads::start(ThreadsConfig {
            rows: 2,
            parts: 2,
            depth: 4,
            ..Default::default()
        });
        let all = commits(3);
        g.add_view(7, "c", filter(json!({})));
        g.dispatch(all[0].clone());
        let m = collect_one(&mut g);
        assert!(m.views.iter().all(|(v, _)| *v == 7) && !m.views.is_empty());
        g.remove_view(7);
        g.add_view(8, "c", filter(json!({})));
        g.dispatch(all[1].clone());
        let m = collect_one(&mut g);
        assert!(m.views.iter().all(|(v, _)| *v == 8) && !m.views.is_empty());
        g.remove_view(8);
        g.dispatch(all[2].clone());
        assert!(collect_one(&mut g).views.is_empty());
        assert!(g.cells().iter().all(|c| c.views == 0));
    }

    #[test]
    fn cleared_commits_never_come_back() {
        let mut g = Threads::start(ThreadsConfig {
            rows: 2,
            parts: 2,
            depth: 16,
            jitter: Duration::from_millis(3),
            ..Default::default()
        });
        g.add_view(0, "c", filter(json!({})));
        let all = commits(30);
        for c in &all[..16] {
            g.dispatch(c.clone());
        }
        // Some reports of the first batch may be in already, most not.
        let _ = g.collect(Duration::from_millis(2));
        g.clear();
        assert_eq!(g.in_flight(), 0);
        assert!(g.collect(Duration::from_millis(30)).unwrap().is_none());
        for c in &all[16..] {
            g.dispatch(c.clone());
        }
        for c in &all[16..] {
            assert_eq!(collect_one(&mut g).commit.seq, c.seq);
        }
        assert!(g.collect(Duration::from_millis(30)).unwrap().is_none());
    }

    #[test]
    fn a_panicking_cell_is_reported_lost_and_the_grid_goes_on() {
        let mut g = Threads::start(ThreadsConfig {
            rows: 2,
            parts: 2,
            depth: 4,
            panic_at: Some((1, 0, 2)),
            ..Default::default()
        });
        g.add_view(0, "c", filter(json!({})));
        g.add_view(1, "c", filter(json!({})));
        let all = commits(4);
        for c in &all[..3] {
            g.dispatch(c.clone());
        }
        assert_eq!(collect_one(&mut g).commit.seq, 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        let err = loop {
            match g.collect(Duration::from_millis(20)) {
                Err(e) => break e,
                Ok(None) => assert!(Instant::now() < deadline, "lost within 10 s"),
                Ok(Some(m)) => panic!("seq {} collected past a failed cell", m.commit.seq),
            }
        };
        assert!(
            matches!(&err, GridError::Lost(why) if why.contains("cell 1-0")),
            "{err}"
        );
        g.clear();
        g.dispatch(all[3].clone());
        let m = collect_one(&mut g);
        assert_eq!(m.commit.seq, 4);
        assert_eq!(m.views.len(), 2);
    }

    #[test]
    fn merge_sorts_and_dedups_per_view() {
        let got = merge(vec![
            (3, vec![2, 5]),
            (1, vec![0]),
            (3, vec![1, 4]),
            (3, vec![4]),
        ]);
        assert_eq!(got, vec![(1, vec![0]), (3, vec![1, 2, 4, 5])]);
    }

    #[test]
    fn config_bounds() {
        let ok = ThreadsConfig::default();
        assert!(ok.validate().is_ok());
        let bad = ThreadsConfig {
            rows: 0,
            ..ok.clone()
        };
        assert!(bad.validate().unwrap_err().contains("rows"));
        let bad = ThreadsConfig {
            parts: 65,
            ..ok.clone()
        };
        assert!(bad.validate().unwrap_err().contains("partitions"));
        let bad = ThreadsConfig { depth: 0, ..ok };
        assert!(bad.validate().unwrap_err().contains("depth"));
    }
}
