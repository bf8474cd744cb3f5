//! The live-query engine: one thread that follows the change feed in seq order, keeps one
//! [`LiveView`] per distinct query (shared by all its subscribers), and sends every subscriber
//! its initial result and then, per commit, the edits of its window.
//!
//! A view maintains a query's window ([`LiveView`]) or a live aggregation (`agg.rs`, subscribed
//! with [`LiveEngine::subscribe_pipeline`]): the same grid registration (the head query's
//! filter), initial result at an exact seq, replay, reset and sharing apply to both. Either
//! watches one collection or a collection group ([`Scope`], `scope.rs`, subscribed with
//! [`LiveEngine::subscribe_group`] or [`LiveEngine::subscribe_group_pipeline`]): a group's
//! view is filed in the grid under `*/group`, gets every change of every collection of the
//! group (by full path, images with `_path`, hidden ones absent) and reads its initial result
//! and refills through `Db::query_group`.
//!
//! Guarantees:
//! - **No write missed or doubled.** A new subscription's initial result is read from the newest
//!   snapshot and then rewound with the commits' before-images to exactly the engine's seq
//!   (`top_at`), so every later commit is applied once, in order.
//! - **One connection, one order.** The engine handles commits one at a time and sends to each
//!   subscriber in that order, so all subscriptions of a connection (one sink) advance together.
//! - **Bounded.** Sinks are bounded queues; a sink that refuses a message (full or closed) loses
//!   every subscription at once and the server closes the connection with a reason, so the client
//!   resumes. Requests wait in a bounded queue.
//! - **Resume.** `resume_from` replays the missed commits from the feed or the commit log; when
//!   the log no longer reaches back, the subscriber gets `reset` and a fresh `initial`.
//!
//! Matching is delegated to a [`Matching`] grid (`live/grid/`): the engine dispatches commits to
//! it in seq order (several in flight when the grid pipelines), collects each commit's matches
//! in the same order and applies them; it is the grid's front end and sorting stage. Views are
//! added to and removed from the grid only when nothing is in flight, so the seq a view starts
//! at is exact for every cell.

use crate::db::check_group_query;
use crate::db::Db;
use crate::error::DbError;
use crate::exec::{group_query, Restrict};
use crate::live::agg::{AggView, Maintained};
use crate::live::diff::ChangeEvent;
use crate::live::feed::Commit;
use crate::live::grid::{CellStatus, GridError, Inline, Matches, Matching};
use crate::live::matcher::ViewId;
use crate::live::message::{Events, Gap, Message, ResetReason};
use crate::live::scope::Scope;
use crate::live::view::{DocChange, LiveView, SLACK_DEFAULT};
use crate::names::check_group;
use herald_query::pipeline::LivePipeline;
use herald_query::Query;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Subscribers of one shared view.
pub const SUBSCRIBERS_PER_VIEW_MAX: usize = 100_000;
/// Subscribe/unsubscribe requests waiting for the engine thread.
pub const REQUESTS_MAX: usize = 65_536;

/// Where a subscriber's messages go: a bounded queue owned by its connection.
pub trait Sink: Send + Sync {
    /// Queues one message; `false` when the queue is full or closed.
    fn send(&self, msg: Message) -> bool;
    /// The connection this sink belongs to.
    fn conn(&self) -> u64;
}

pub struct SubscribeRequest {
    /// The client's id for the subscription, unique within its connection.
    pub sub: String,
    pub collection: String,
    pub query: Query,
    /// Identity for sharing: equal keys share one maintained view.
    pub key: String,
    pub resume_from: Option<u64>,
    pub sink: Arc<dyn Sink>,
}

/// A request for the engine thread; a subscription with a pipeline is a live aggregation
/// whose head query is the request's query.
enum Request {
    Subscribe(Box<SubscribeRequest>, Scope, Option<Arc<LivePipeline>>),
    Unsubscribe { conn: u64, sub: String },
    Disconnect { conn: u64 },
}

struct Subscriber {
    sub: String,
    sink: Arc<dyn Sink>,
}

struct View {
    /// The sharing key (`Engine::by_key` maps it back to this view's id).
    key: String,
    scope: Scope,
    live: Maintained,
    subs: Vec<Subscriber>,
}

struct Shared {
    db: Db,
    requests: Mutex<VecDeque<Request>>,
    stop: AtomicBool,
    seq: AtomicU64,
    /// Requests accepted and requests handled, so callers can wait for quiescence.
    submitted: AtomicU64,
    handled: AtomicU64,
    /// The grid's cells as of the engine's last look (for `/metrics`).
    cells: Mutex<Vec<CellStatus>>,
}

/// Handle to the engine thread; dropping the last handle does not stop it, `stop` does.
#[derive(Clone)]
pub struct LiveEngine {
    shared: Arc<Shared>,
    /// The engine thread, joined by `stop` so its database handle is gone afterwards.
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl LiveEngine {
    /// Starts the engine with matching on its own thread ([`Inline`]).
    pub fn start(db: Db) -> LiveEngine {
        LiveEngine::start_with(db, Box::new(Inline::default()))
    }

    /// Starts the engine with `grid` doing the matching.
    pub fn start_with(db: Db, grid: Box<dyn Matching>) -> LiveEngine {
        let seq = db.seq();
        let shared = Arc::new(Shared {
            db,
            requests: Mutex::new(VecDeque::new()),
            stop: AtomicBool::new(false),
            seq: AtomicU64::new(seq),
            submitted: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            cells: Mutex::new(grid.cells()),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("herald-live".into())
            .spawn(move || {
                Engine {
                    shared: s,
                    views: Vec::new(),
                    free: Vec::new(),
                    by_key: HashMap::new(),
                    grid,
                    ready: VecDeque::new(),
                    dispatched: seq,
                    seq,
                    cells_at: std::time::Instant::now(),
                }
                .run()
            })
            .expect("spawn live engine");
        LiveEngine {
            shared,
            thread: Arc::new(Mutex::new(Some(thread))),
        }
    }

    /// The matching grid's cells, as of the engine's last look (at most ~100 ms old).
    pub fn cells(&self) -> Vec<CellStatus> {
        self.shared.cells.lock().expect("cells lock").clone()
    }

    /// The seq every view has caught up with.
    pub fn seq(&self) -> u64 {
        self.shared.seq.load(Ordering::Acquire)
    }

    fn push(&self, r: Request) -> Result<(), DbError> {
        let mut q = self.shared.requests.lock().expect("requests lock");
        if q.len() >= REQUESTS_MAX {
            return Err(DbError::LimitExceeded(
                "too many pending subscription requests".into(),
            ));
        }
        q.push_back(r);
        self.shared.submitted.fetch_add(1, Ordering::AcqRel);
        drop(q);
        self.shared.db.feed().nudge();
        Ok(())
    }

    pub fn subscribe(&self, req: SubscribeRequest) -> Result<(), DbError> {
        let scope = Scope::Collection(req.collection.clone());
        self.push(Request::Subscribe(Box::new(req), scope, None))
    }

    /// Subscribes to a collection-group query: every collection whose last segment is `group`
    /// (`req.collection` is ignored). Events name documents by full path and documents carry
    /// `_path`; `restrict` (an end user's read rules) decides per collection what is visible.
    /// Views are shared only by equal `req.key`s, so a restricted subscription's key must
    /// identify its reader. A live aggregation over a group is
    /// [`subscribe_group_pipeline`](Self::subscribe_group_pipeline).
    pub fn subscribe_group(
        &self,
        group: &str,
        mut req: SubscribeRequest,
        restrict: Option<Arc<dyn Restrict>>,
    ) -> Result<(), DbError> {
        check_group(group)?;
        check_group_query(&req.query)?;
        let mut view_query = group_query(&req.query);
        view_query.projection = req.query.projection.clone();
        let scope = Scope::group(
            group,
            std::mem::replace(&mut req.query, view_query),
            restrict,
        );
        req.collection = scope.key();
        self.push(Request::Subscribe(Box::new(req), scope, None))
    }

    /// Subscribes to a live aggregation: `req.query` is the pipeline's head query (filter and
    /// sort, with any read rule ANDed in) and `req.key` must identify the pipeline too.
    pub fn subscribe_pipeline(
        &self,
        req: SubscribeRequest,
        pipeline: Arc<LivePipeline>,
    ) -> Result<(), DbError> {
        let scope = Scope::Collection(req.collection.clone());
        self.push(Request::Subscribe(Box::new(req), scope, Some(pipeline)))
    }

    /// Subscribes to a live aggregation over a collection group: `req.query` is the pipeline's
    /// head query (filter and sort, as the subscriber wrote them; `req.collection` is ignored)
    /// and `restrict` (an end user's read rules, the head query ANDed with each collection's
    /// rule) decides per collection which documents are input. The input is the group query's
    /// result: documents with `_path`, in the head's order then `_path` (as
    /// `Db::query_group` returns them to a pull aggregation), so `$first`/`$push` see the same
    /// order. `req.key` must identify the group, the pipeline and (when restricted) the reader.
    pub fn subscribe_group_pipeline(
        &self,
        group: &str,
        mut req: SubscribeRequest,
        restrict: Option<Arc<dyn Restrict>>,
        pipeline: Arc<LivePipeline>,
    ) -> Result<(), DbError> {
        check_group(group)?;
        check_group_query(&req.query)?;
        let view_query = group_query(&req.query);
        let scope = Scope::group(
            group,
            std::mem::replace(&mut req.query, view_query),
            restrict,
        );
        req.collection = scope.key();
        self.push(Request::Subscribe(Box::new(req), scope, Some(pipeline)))
    }

    pub fn unsubscribe(&self, conn: u64, sub: &str) -> Result<(), DbError> {
        self.push(Request::Unsubscribe {
            conn,
            sub: sub.to_string(),
        })
    }

    /// Removes every subscription of a connection (it closed).
    pub fn disconnect(&self, conn: u64) {
        let _ = self.push(Request::Disconnect { conn });
    }

    /// True when every accepted request has been handled and every commit processed.
    pub fn is_idle(&self) -> bool {
        self.shared.handled.load(Ordering::Acquire) == self.shared.submitted.load(Ordering::Acquire)
            && self.seq() >= self.shared.db.seq()
    }

    /// Stops the engine thread and waits for it to end.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.db.feed().nudge();
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            let _ = t.join();
        }
    }
}

struct Engine {
    shared: Arc<Shared>,
    /// Views by id, a slab: the matchers refer to views by these small ids, so matching
    /// allocates nothing per view. Ids of dropped views are reused (`free`).
    views: Vec<Option<View>>,
    free: Vec<ViewId>,
    /// Sharing key -> view id: identical queries share one view.
    by_key: HashMap<String, ViewId>,
    /// Matches commits against the views (the predicate index lives in its cells).
    grid: Box<dyn Matching>,
    /// Commits read from the feed or the log and not yet dispatched to the grid.
    ready: VecDeque<Arc<Commit>>,
    /// The newest seq read into `ready` (or dispatched, or skipped with no view to offer it).
    dispatched: u64,
    /// The newest seq applied to the views and sent: the engine's seq.
    seq: u64,
    /// When `Shared::cells` was last refreshed.
    cells_at: std::time::Instant,
}

/// Commits read (and decoded) at once when the engine catches up or replays a resume: a
/// backlog read whole (up to the retained million commits) held every one's decoded images at
/// once.
const CATCH_UP_COMMITS_MAX: u64 = 1024;

fn reset_msg(sub: &str, reason: ResetReason) -> Message {
    Message::Reset {
        sub: sub.to_string(),
        reason,
    }
}

fn changes_msg(sub: &str, seq: u64, events: Events) -> Message {
    Message::Changes {
        sub: sub.to_string(),
        seq,
        events,
    }
}

impl Engine {
    fn run(mut self) {
        let db = self.shared.db.clone();
        while !self.shared.stop.load(Ordering::Acquire) {
            self.refresh_cells();
            let waiting = self.shared.handled.load(Ordering::Acquire)
                != self.shared.submitted.load(Ordering::Acquire);
            if self.grid.in_flight() == 0 {
                // Requests are handled only with nothing in flight, so a new view's start seq
                // is exact for every cell; commits first, so it starts from the newest state.
                if !waiting {
                    let last = if self.ready.is_empty() {
                        db.feed()
                            .wait_after(self.dispatched, Duration::from_millis(200))
                    } else {
                        self.dispatched
                    };
                    self.read_upto(&db, last);
                }
                if self.grid.in_flight() == 0 {
                    self.handle_requests();
                    continue;
                }
            } else if !waiting {
                // Keep the grid's pipeline full while it works.
                self.read_upto(&db, db.feed().last_seq());
            }
            match self.grid.collect(Duration::from_millis(50)) {
                Ok(Some(m)) => {
                    self.process(&db, &m);
                    self.seq = m.commit.seq;
                    self.shared.seq.store(self.seq, Ordering::Release);
                }
                Ok(None) => {}
                Err(GridError::Lost(_)) => {
                    // Subscribers learn of it through the reset (reason `fellBehind`).
                    self.grid.clear();
                    self.fell_behind(&db, db.feed().last_seq());
                }
            }
        }
    }

    fn refresh_cells(&mut self) {
        if self.cells_at.elapsed() >= Duration::from_millis(100) {
            self.cells_at = std::time::Instant::now();
            *self.shared.cells.lock().expect("cells lock") = self.grid.cells();
        }
    }

    fn handle_requests(&mut self) {
        let requests: Vec<Request> = self
            .shared
            .requests
            .lock()
            .expect("requests lock")
            .drain(..)
            .collect();
        for r in requests {
            self.handle(r);
            self.shared.handled.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Reads the commits up to `last` and dispatches as many as the grid takes. With no view,
    /// nothing is read: there is nothing to deliver (reading and decoding every commit's images
    /// was ~3% of a server's CPU during inserts).
    fn read_upto(&mut self, db: &Db, last: u64) {
        if self.by_key.is_empty() && self.ready.is_empty() && self.grid.in_flight() == 0 {
            if last > self.dispatched {
                self.dispatched = last;
                self.seq = last;
                self.shared.seq.store(last, Ordering::Release);
            }
            return;
        }
        let depth = self.grid.depth().max(1);
        while self.grid.in_flight() < depth {
            if self.ready.is_empty() {
                if self.dispatched >= last {
                    return;
                }
                let upto = last.min(self.dispatched + CATCH_UP_COMMITS_MAX);
                match db.commits_between(self.dispatched, upto) {
                    Ok(crate::LogRead::Commits(commits)) => {
                        self.ready.extend(commits);
                        self.dispatched = upto;
                    }
                    _ => {
                        // Behind the retained log (or it is unreadable): what is in flight
                        // is for views about to be rebuilt.
                        self.grid.clear();
                        self.fell_behind(db, last);
                        return;
                    }
                }
            }
            match self.ready.pop_front() {
                Some(c) => self.grid.dispatch(c),
                None => return,
            }
        }
    }

    fn handle(&mut self, r: Request) {
        match r {
            Request::Subscribe(req, scope, pipeline) => self.subscribe(*req, scope, pipeline),
            Request::Unsubscribe { conn, sub } => {
                self.remove(|s| s.sink.conn() == conn && s.sub == sub)
            }
            Request::Disconnect { conn } => self.remove(|s| s.sink.conn() == conn),
        }
    }

    fn remove(&mut self, mut doomed: impl FnMut(&Subscriber) -> bool) {
        let mut empty = Vec::new();
        for (id, slot) in self.views.iter_mut().enumerate() {
            let Some(v) = slot else { continue };
            v.subs.retain(|s| !doomed(s));
            if v.subs.is_empty() {
                empty.push(id as ViewId);
            }
        }
        for id in empty {
            self.drop_view(id);
        }
    }

    fn drop_view(&mut self, id: ViewId) {
        if let Some(v) = self.views.get_mut(id as usize).and_then(Option::take) {
            self.by_key.remove(&v.key);
            self.free.push(id);
            self.grid.remove_view(id);
        }
    }

    /// The first `n` documents (all when `None`) of `query`'s result at exactly `target`.
    fn top_at(
        db: &Db,
        scope: &Scope,
        query: &Query,
        n: Option<usize>,
        target: u64,
    ) -> Result<Vec<Value>, DbError> {
        top_at_scope(db, scope, query, n, target)
    }

    /// A new view's first result and the seq it is at. With an initial result to send, that is
    /// the newest snapshot, which may be ahead of the engine (the engine then skips the commits
    /// the view already holds): rebuilding the result as of the engine's seq undoes every
    /// change since, and when the engine lags by more than a query may return (a backlog of
    /// 10,000 commits is half a second at 20,000 events/s), that rebuild is refused and the
    /// subscription would fail. A resumed subscription continues from changes replayed up to
    /// the engine's seq, so its view must start exactly there.
    fn first_result(
        &self,
        db: &Db,
        scope: &Scope,
        query: &Query,
        fresh: bool,
    ) -> Result<(Vec<Value>, u64), DbError> {
        let n = Self::fetch_size(query);
        if fresh {
            let (docs, seq) = scope.top(db, query, n)?;
            if seq >= self.seq {
                return Ok((docs, seq));
            }
        }
        Ok((Self::top_at(db, scope, query, n, self.seq)?, self.seq))
    }

    fn fetch_size(query: &Query) -> Option<usize> {
        query.limit.map(|l| query.skip + l + SLACK_DEFAULT + 1)
    }

    fn subscribe(&mut self, req: SubscribeRequest, scope: Scope, plan: Option<Arc<LivePipeline>>) {
        let SubscribeRequest {
            sub,
            collection: _,
            query,
            key,
            resume_from,
            sink,
        } = req;
        // Where a resumed subscriber must be brought to: the engine's seq, or the seq of the
        // view it will share if that view started ahead of the engine (`first_result`).
        let seq = self
            .by_key
            .get(&key)
            .and_then(|&id| self.views[id as usize].as_ref())
            .map_or(self.seq, |v| v.live.seq().max(self.seq));
        let db = self.shared.db.clone();
        if let Some(r) = resume_from.filter(|r| *r != seq) {
            let target = Target {
                scope: &scope,
                query: &query,
                plan: plan.as_ref(),
            };
            match self.replay(&db, target, r, seq, &sub, &*sink) {
                Ok(Replayed::Done) => {}
                Ok(Replayed::Gap(gap)) => {
                    if !sink.send(reset_msg(&sub, ResetReason::Resume { from: r, gap })) {
                        return;
                    }
                    self.attach(&db, sub, scope, query, plan, key, sink, true);
                    return;
                }
                Err(e) => {
                    sink.send(Message::error(&sub, &e));
                    return;
                }
            }
            self.attach(&db, sub, scope, query, plan, key, sink, false);
            return;
        }
        let send_initial = resume_from.is_none();
        self.attach(&db, sub, scope, query, plan, key, sink, send_initial);
    }

    /// Sends the commits after `from` up to `to` as change batches for a private
    /// copy of the view. [`Replayed::Gap`] when that history is not available, and why.
    fn replay(
        &self,
        db: &Db,
        target: Target<'_>,
        from: u64,
        to: u64,
        sub: &str,
        sink: &dyn Sink,
    ) -> Result<Replayed, DbError> {
        let Target { scope, query, plan } = target;
        if from > to {
            return Ok(Replayed::Gap(Gap::Unknown));
        }
        let docs = match Self::top_at(db, scope, query, Self::fetch_size(query), from) {
            Ok(d) => d,
            Err(DbError::LogGone { .. }) => return Ok(Replayed::Gap(Gap::LogGone)),
            // The result as of `from` is rebuilt from today's by undoing every change since;
            // past `QUERY_DOCS_MAX` of them that query is refused. A fresh result (a reset) is
            // then what the subscriber gets, as when the log no longer reaches back; replaying
            // that many changes would cost it more than a new result anyway.
            Err(DbError::LimitExceeded(_)) if query.limit.is_some() => {
                return Ok(Replayed::Gap(Gap::TooMany))
            }
            Err(e) => return Err(e),
        };
        let mut view = match plan {
            None => Maintained::Query(new_view(scope, query.clone(), docs, from)),
            Some(p) => Maintained::Agg(Box::new(AggView::new(
                p.clone(),
                query.clone(),
                docs,
                from,
            )?)),
        };
        let mut at = from;
        while at < to {
            let upto = to.min(at + CATCH_UP_COMMITS_MAX);
            let crate::LogRead::Commits(commits) = db.commits_between(at, upto)? else {
                return Ok(Replayed::Gap(Gap::LogGone));
            };
            for c in commits {
                let events = apply_commit(db, scope, &mut view, &c)?;
                if !events.is_empty() && !sink.send(changes_msg(sub, c.seq, events)) {
                    return Ok(Replayed::Done);
                }
            }
            at = upto;
        }
        Ok(Replayed::Done)
    }

    #[allow(clippy::too_many_arguments)]
    fn attach(
        &mut self,
        db: &Db,
        sub: String,
        scope: Scope,
        query: Query,
        plan: Option<Arc<LivePipeline>>,
        key: String,
        sink: Arc<dyn Sink>,
        send_initial: bool,
    ) {
        let id = match self.by_key.get(&key) {
            Some(&id) => id,
            None => match self.first_result(db, &scope, &query, send_initial) {
                Ok((docs, seq)) => {
                    let live = match &plan {
                        None => Maintained::Query(new_view(&scope, query, docs, seq)),
                        Some(p) => match AggView::new(p.clone(), query, docs, seq) {
                            Ok(a) => Maintained::Agg(Box::new(a)),
                            Err(e) => {
                                sink.send(Message::error(&sub, &e));
                                return;
                            }
                        },
                    };
                    let id = match self.free.pop() {
                        Some(id) => id,
                        None => {
                            self.views.push(None);
                            (self.views.len() - 1) as ViewId
                        }
                    };
                    self.grid
                        .add_view(id, &scope.key(), Arc::new(live.query().filter.clone()));
                    self.by_key.insert(key.clone(), id);
                    self.views[id as usize] = Some(View {
                        key,
                        scope,
                        live,
                        subs: Vec::new(),
                    });
                    id
                }
                // Replayed up to the engine's seq, but the view cannot start there (see
                // `first_result`): a reset and a fresh result, as when the log is gone.
                Err(DbError::LimitExceeded(_)) if !send_initial => {
                    if sink.send(reset_msg(&sub, ResetReason::ReplayBehind)) {
                        self.attach(db, sub, scope, query, plan, key, sink, true);
                    }
                    return;
                }
                Err(e) => {
                    sink.send(Message::error(&sub, &e));
                    return;
                }
            },
        };
        let view = self.views[id as usize].as_mut().expect("a live id");
        if view.subs.len() >= SUBSCRIBERS_PER_VIEW_MAX {
            sink.send(Message::error(
                &sub,
                &DbError::LimitExceeded(format!(
                    "at most {SUBSCRIBERS_PER_VIEW_MAX} subscribers per query"
                )),
            ));
            return;
        }
        if send_initial {
            let initial = Message::Initial {
                sub: sub.clone(),
                seq: view.live.seq(),
                docs: view.live.window_docs(),
            };
            if !sink.send(initial) {
                return;
            }
        }
        view.subs.push(Subscriber { sub, sink });
    }

    /// The engine fell behind the retained log (or the log is unreadable): every subscriber
    /// gets a reset and a fresh result at the newest seq.
    fn fell_behind(&mut self, db: &Db, last: u64) {
        let views = std::mem::take(&mut self.views);
        for id in 0..views.len() {
            self.grid.remove_view(id as ViewId);
        }
        self.free.clear();
        self.by_key.clear();
        self.ready.clear();
        self.dispatched = last;
        self.seq = last;
        self.shared.seq.store(last, Ordering::Release);
        for v in views.into_iter().flatten() {
            for s in v.subs {
                if s.sink.send(reset_msg(&s.sub, ResetReason::FellBehind)) {
                    self.attach(
                        db,
                        s.sub,
                        v.scope.clone(),
                        v.live.query().clone(),
                        v.live.plan().cloned(),
                        v.key.clone(),
                        s.sink,
                        true,
                    );
                }
            }
        }
    }

    /// Applies one commit's matches to the views they touch and sends their events.
    fn process(&mut self, db: &Db, m: &Matches) {
        let mut deliver = Deliver {
            db,
            views: &mut self.views,
            seq: m.commit.seq,
            failed_conns: Vec::new(),
            broken: Vec::new(),
        };
        let mut changes: Vec<DocChange<'_>> = Vec::new();
        for (id, idx) in &m.views {
            let group = match deliver.views.get(*id as usize) {
                Some(Some(v)) => matches!(v.scope, Scope::Group(_)).then(|| v.scope.clone()),
                _ => continue,
            };
            if let Some(scope) = group {
                // A group view knows documents by path, with `_path`, visible ones only.
                let owned = group_changes(&scope, &m.commit, idx.iter().map(|&i| i as usize));
                let refs: Vec<DocChange<'_>> = owned
                    .iter()
                    .map(|(p, b, a)| (p.as_str(), b.as_ref(), a.as_ref()))
                    .collect();
                deliver.call(*id, &refs);
                continue;
            }
            changes.clear();
            changes.extend(idx.iter().filter_map(|&i| {
                let c = m.commit.changes.get(i as usize)?;
                Some((c.id.as_str(), c.before.as_ref(), c.after.as_ref()))
            }));
            deliver.call(*id, &changes);
        }
        let Deliver {
            failed_conns,
            broken,
            ..
        } = deliver;
        for id in broken {
            self.drop_view(id);
        }
        if !failed_conns.is_empty() {
            self.remove(|s| failed_conns.contains(&s.sink.conn()));
        }
    }
}

/// Applies one commit's changes to views and sends their events, collecting the connections
/// that could not take them and the views that failed.
struct Deliver<'a> {
    db: &'a Db,
    views: &'a mut Vec<Option<View>>,
    seq: u64,
    failed_conns: Vec<u64>,
    broken: Vec<ViewId>,
}

impl Deliver<'_> {
    fn call(&mut self, id: ViewId, changes: &[DocChange<'_>]) {
        let seq = self.seq;
        let Some(Some(view)) = self.views.get_mut(id as usize) else {
            return;
        };
        if view.live.seq() >= seq {
            return;
        }
        if !view.live.touched_by(changes) {
            view.live.skip_to(seq);
            return;
        }
        match apply_changes(self.db, &view.scope, &mut view.live, seq, changes) {
            Ok(events) if events.is_empty() => {}
            Ok(events) => {
                // One batch for the view, shared by every subscriber (a reference each).
                for s in &view.subs {
                    if !s.sink.send(changes_msg(&s.sub, seq, events.clone())) {
                        self.failed_conns.push(s.sink.conn());
                    }
                }
            }
            Err(e) => {
                for s in &view.subs {
                    s.sink.send(Message::error(&s.sub, &e));
                }
                self.broken.push(id);
            }
        }
    }
}

/// Applies some changes of one commit to a view: its events, one shared batch.
fn apply_changes(
    db: &Db,
    scope: &Scope,
    view: &mut Maintained,
    seq: u64,
    changes: &[DocChange<'_>],
) -> Result<Events, DbError> {
    let query = view.shared_query();
    let mut refill = |n: usize, s: u64| top_at_scope(db, scope, &query, Some(n), s);
    let events: Vec<ChangeEvent<Arc<Value>>> = view.apply(seq, changes, &mut refill)?;
    Ok(events.into())
}

/// Applies one commit (its changes in `scope`) to a view and renders its events.
fn apply_commit(
    db: &Db,
    scope: &Scope,
    view: &mut Maintained,
    commit: &Commit,
) -> Result<Events, DbError> {
    let owned;
    let changes: Vec<DocChange<'_>> = match scope {
        Scope::Collection(collection) => commit
            .changes
            .iter()
            .filter(|c| c.collection == *collection)
            .map(|c| (c.id.as_str(), c.before.as_ref(), c.after.as_ref()))
            .collect(),
        Scope::Group(_) => {
            owned = group_changes(scope, commit, 0..commit.changes.len());
            owned
                .iter()
                .map(|(p, b, a)| (p.as_str(), b.as_ref(), a.as_ref()))
                .collect()
        }
    };
    if changes.is_empty() {
        return Ok(Events::from([]));
    }
    apply_changes(db, scope, view, commit.seq, &changes)
}

/// The changes at `idx` of a commit that are in a group's scope, as its view sees them: by
/// full path, images with `_path`, hidden images absent.
fn group_changes(
    scope: &Scope,
    commit: &Commit,
    idx: impl Iterator<Item = usize>,
) -> Vec<(String, Option<Value>, Option<Value>)> {
    idx.filter_map(|i| commit.changes.get(i))
        .filter(|c| scope.holds(&c.collection))
        .map(|c| {
            (
                scope.id_of(&c.collection, &c.id),
                scope.image(&c.collection, &c.id, c.before.as_ref()),
                scope.image(&c.collection, &c.id, c.after.as_ref()),
            )
        })
        .collect()
}

/// A query view of `scope` (a group's knows documents by path).
fn new_view(scope: &Scope, query: Query, docs: Vec<Value>, seq: u64) -> LiveView {
    match scope {
        Scope::Collection(_) => LiveView::new(query, SLACK_DEFAULT, docs, seq),
        Scope::Group(_) => LiveView::new_group(query, SLACK_DEFAULT, docs, seq),
    }
}

/// What a replay rebuilds: a query's window, or (with a pipeline) an aggregation over the
/// query's result.
#[derive(Clone, Copy)]
struct Target<'a> {
    scope: &'a Scope,
    query: &'a Query,
    plan: Option<&'a Arc<LivePipeline>>,
}

/// How a resume's replay ended.
enum Replayed {
    /// Every missed commit was sent (or the subscriber went away).
    Done,
    /// The history could not be replayed, for this reason (a `reset` follows).
    Gap(Gap),
}

/// The first `n` documents (unprojected, all when `None`) of the query's result at exactly
/// `target`: read the newest snapshot with `Δ` extra documents, where `Δ` is the number of this
/// collection's document changes committed after `target`, then undo those changes newest
/// first with their before-images. Every document of the first `n` at `target` is either
/// unchanged since (and then ranks at most `n + Δ` now) or restored by the undo.
pub fn top_at(
    db: &Db,
    collection: &str,
    query: &Query,
    n: Option<usize>,
    target: u64,
) -> Result<Vec<Value>, DbError> {
    top_at_scope(
        db,
        &Scope::Collection(collection.to_string()),
        query,
        n,
        target,
    )
}

/// [`top_at`] for a collection or a collection group (whose documents are known by `_path`).
fn top_at_scope(
    db: &Db,
    scope: &Scope,
    query: &Query,
    n: Option<usize>,
    target: u64,
) -> Result<Vec<Value>, DbError> {
    let member = match scope {
        Scope::Collection(_) => "_id",
        Scope::Group(_) => "_path",
    };
    let mut extra = 0usize;
    loop {
        let (docs, seq) = scope.top(db, query, n.map(|n| n + extra))?;
        if seq < target {
            return Err(DbError::Corrupt(format!(
                "snapshot seq {seq} is older than {target}"
            )));
        }
        let commits = db.commits_between(target, seq)?.into_commits()?;
        let delta: usize = commits
            .iter()
            .map(|c| {
                c.changes
                    .iter()
                    .filter(|x| scope.holds(&x.collection))
                    .count()
            })
            .sum();
        if let (Some(limit), true) = (n.map(|n| n + extra), delta > extra) {
            if docs.len() >= limit {
                extra = delta;
                continue;
            }
        }
        let mut items: BTreeMap<Vec<u8>, Value> = BTreeMap::new();
        let mut keys: HashMap<String, Vec<u8>> = HashMap::new();
        let put = |doc: Value,
                   items: &mut BTreeMap<Vec<u8>, Value>,
                   keys: &mut HashMap<String, Vec<u8>>| {
            let key = query.sort.encoded_key(&doc);
            if let Some(id) = doc.get(member).and_then(Value::as_str) {
                keys.insert(id.to_string(), key.clone());
            }
            items.insert(key, doc);
        };
        for d in docs {
            put(d, &mut items, &mut keys);
        }
        for c in commits.iter().rev() {
            for ch in c
                .changes
                .iter()
                .rev()
                .filter(|x| scope.holds(&x.collection))
            {
                if let Some(k) = keys.remove(&scope.id_of(&ch.collection, &ch.id)) {
                    items.remove(&k);
                }
                if let Some(b) = scope.image(&ch.collection, &ch.id, ch.before.as_ref()) {
                    if query.matches(&b) {
                        put(b, &mut items, &mut keys);
                    }
                }
            }
        }
        return Ok(items.into_values().take(n.unwrap_or(usize::MAX)).collect());
    }
}
