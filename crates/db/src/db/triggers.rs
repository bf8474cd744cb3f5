//! The database's trigger operations: defining and removing triggers, reading a queue,
//! completing a task (its writes and its removal in one storage transaction), failing it
//! (retry or dead letter), and inspecting, retrying and purging dead letters.

use super::{publish_hook, Db};
use crate::error::DbError;
use crate::known::KnownDocs;
use crate::layout::{doc_key, prefix_end};
use crate::triggers::{
    bad_label, dead_prefix, meta_key, queue_prefix, DeadLetter, ReadCheck, Registry, Task,
    TaskDone, TaskFailed, TaskId, TriggerDef, TriggerStatus, DEAD_CHUNK_MAX, DEAD_LIST_MAX,
    META_TRIGGER_UID, TASK_WRITES_HEAVY, TASK_WRITES_MAX, TRIGGERS_MAX,
};
use crate::txn::Write;
use crate::write::{apply, prepare, ApplyCtx, Encoded};
use herald_storage::{Table, Ticket, WriteTxn};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Db {
    /// The trigger definitions and their counters.
    pub fn triggers(&self) -> &Registry {
        &self.inner.triggers
    }

    /// Creates or replaces a trigger. A replaced trigger keeps its queue (pending tasks run
    /// with the new definition). Returns the stored definition and whether it was created.
    pub fn put_trigger(&self, mut def: TriggerDef) -> Result<(Arc<TriggerDef>, bool), DbError> {
        let inner = Arc::clone(&self.inner);
        let ticket = self.inner.store.submit(move |txn: &mut WriteTxn<'_>| {
            let key = meta_key(&def.name);
            let created = match txn.get(Table::Meta, &key)? {
                Some(old) => {
                    let old: TriggerDef = serde_json::from_slice(&old)
                        .map_err(|e| DbError::Corrupt(format!("trigger definition: {e}")))?;
                    def.uid = old.uid;
                    false
                }
                None => {
                    if inner.triggers.defs().len() >= TRIGGERS_MAX {
                        return Err(DbError::LimitExceeded(format!(
                            "a database may have at most {TRIGGERS_MAX} triggers"
                        )));
                    }
                    def.uid = txn.get_u64(Table::Meta, META_TRIGGER_UID)?.unwrap_or(0) + 1;
                    txn.put_u64(Table::Meta, META_TRIGGER_UID.to_vec(), def.uid)?;
                    true
                }
            };
            txn.put(
                Table::Meta,
                key,
                serde_json::to_vec(&def).expect("trigger JSON"),
            )?;
            let stored = Arc::new(def);
            let (reg, d) = (Arc::clone(&inner), Arc::clone(&stored));
            txn.on_commit(move || {
                let mut defs: Vec<TriggerDef> = reg
                    .triggers
                    .defs()
                    .iter()
                    .filter(|x| x.name != d.name)
                    .map(|x| (**x).clone())
                    .collect();
                defs.push((*d).clone());
                reg.triggers.replace(defs);
                reg.triggers.wake();
            });
            Ok::<_, DbError>((stored, created))
        })?;
        Ok(ticket.wait()?)
    }

    /// Deletes a trigger, its queue and its dead letters (those in the background).
    pub fn delete_trigger(&self, name: &str) -> Result<(), DbError> {
        let inner = Arc::clone(&self.inner);
        let name = name.to_string();
        let uid = self
            .inner
            .store
            .submit(move |txn: &mut WriteTxn<'_>| {
                let key = meta_key(&name);
                let Some(old) = txn.get(Table::Meta, &key)? else {
                    return Err(DbError::TriggerNotFound(name));
                };
                let old: TriggerDef = serde_json::from_slice(&old)
                    .map_err(|e| DbError::Corrupt(format!("trigger definition: {e}")))?;
                txn.delete(Table::Meta, key);
                let uid = old.uid;
                txn.on_commit(move || {
                    let defs = inner.triggers.defs();
                    inner.triggers.replace(
                        defs.iter()
                            .filter(|x| x.uid != uid)
                            .map(|x| (**x).clone())
                            .collect(),
                    );
                    inner.triggers.forget(uid);
                    inner.triggers.wake();
                });
                Ok(uid)
            })?
            .wait()?;
        self.spawn_delete_prefix(Table::Tasks, queue_prefix(uid));
        self.spawn_delete_prefix(Table::Tasks, dead_prefix(uid));
        Ok(())
    }

    fn trigger(&self, name: &str) -> Result<Arc<TriggerDef>, DbError> {
        self.inner
            .triggers
            .get(name)
            .ok_or_else(|| DbError::TriggerNotFound(name.to_string()))
    }

    /// Up to `max` queued tasks of the trigger `uid` in queue order, after `after` if given.
    pub fn load_tasks(
        &self,
        uid: u64,
        after: Option<TaskId>,
        max: usize,
    ) -> Result<Vec<(TaskId, Task)>, DbError> {
        Ok(self
            .load_tasks_bounded(uid, after, max, usize::MAX)?
            .into_iter()
            .map(|(id, task, _)| (id, task))
            .collect())
    }

    /// Like [`load_tasks`](Db::load_tasks), and also stops once the stored size of the tasks
    /// loaded reaches `bytes_max` (at least one task is returned if any is queued). Each task
    /// comes with its stored size.
    pub fn load_tasks_bounded(
        &self,
        uid: u64,
        after: Option<TaskId>,
        max: usize,
        bytes_max: usize,
    ) -> Result<Vec<(TaskId, Task, usize)>, DbError> {
        let read = self.inner.store.read()?;
        let prefix = queue_prefix(uid);
        let start = match after {
            Some(id) => {
                let mut k = id.queue_key();
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        let end = prefix_end(&prefix);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for entry in read.range(Table::Tasks, start.as_slice()..end.as_slice())? {
            if out.len() >= max || (bytes >= bytes_max && !out.is_empty()) {
                break;
            }
            let (k, v) = entry?;
            bytes += v.len();
            out.push((TaskId::from_key(&k)?, Task::decode(&v)?, v.len()));
        }
        Ok(out)
    }

    /// Commits a task's writes and removes it from its queue, atomically. Fails with
    /// `task_conflict` (nothing applied) if a document the task read has changed since.
    /// The writes may fire further triggers, one level deeper.
    pub fn complete_task(
        &self,
        id: TaskId,
        mut writes: Vec<Write>,
        reads: Vec<ReadCheck>,
    ) -> Result<Ticket<TaskDone, DbError>, DbError> {
        let encoded = if writes.is_empty() {
            Vec::new()
        } else {
            prepare(&mut writes, &self.inner.settings.limits, TASK_WRITES_MAX)?
        };
        // Read here, on the task's (low-priority) thread, not on the writer.
        let known = if writes.is_empty() {
            None
        } else {
            Some(KnownDocs::read(
                &self.inner.store,
                &self.inner.catalog,
                &writes,
            )?)
        };
        self.submit_task(id, writes, encoded, reads, known)
    }

    /// [`complete_task`](Db::complete_task) once its writes are prepared and `known` read.
    fn submit_task(
        &self,
        id: TaskId,
        mut writes: Vec<Write>,
        mut encoded: Encoded,
        reads: Vec<ReadCheck>,
        known: Option<KnownDocs>,
    ) -> Result<Ticket<TaskDone, DbError>, DbError> {
        let inner = Arc::clone(&self.inner);
        let heavy = writes.len() > TASK_WRITES_HEAVY;
        // Background: a client's write never waits behind a backlog of trigger tasks.
        let job = move |txn: &mut WriteTxn<'_>| {
            let key = id.queue_key();
            let Some(bytes) = txn.get(Table::Tasks, &key)? else {
                return Ok(TaskDone::Gone);
            };
            let task = Task::decode(&bytes)?;
            for r in &reads {
                let now = txn
                    .get(Table::Docs, &doc_key(&r.collection, &r.id))?
                    .map_or(0, |b| crate::layout::doc_version(&b));
                if now != r.version {
                    return Err(DbError::TaskConflict {
                        collection: r.collection.clone(),
                        id: r.id.clone(),
                    });
                }
            }
            txn.delete(Table::Tasks, key);
            let mut outcome = if writes.is_empty() {
                None
            } else {
                let ctx = ApplyCtx {
                    catalog: &inner.catalog,
                    settings: &inner.settings,
                    triggers: &inner.triggers,
                    depth: task.depth,
                    now_ms: inner.clock.now_ms(),
                    guard: None,
                    known: known.as_ref(),
                    mutation_id: None,
                };
                Some(apply(txn, &mut writes, &mut encoded, &ctx)?)
            };
            let publish = outcome.as_mut().map(|o| publish_hook(&inner, o));
            let db = Arc::clone(&inner);
            txn.on_commit(move || {
                if let Some(p) = publish {
                    p();
                }
                let stats = db.triggers.stats(id.uid);
                stats.pending.fetch_sub(1, Ordering::AcqRel);
                stats.executed.fetch_add(1, Ordering::Relaxed);
            });
            Ok(TaskDone::Done(outcome))
        };
        Ok(if heavy {
            self.inner.store.submit_background_heavy(job)?
        } else {
            self.inner.store.submit_background(job)?
        })
    }

    /// Records a failed attempt: the task is retried at `retry_at_ms`, or, once it has failed
    /// `max_attempts` times, becomes a dead letter that keeps `error`.
    pub fn fail_task(
        &self,
        id: TaskId,
        error: String,
        max_attempts: u32,
        retry_at_ms: u64,
    ) -> Result<Ticket<TaskFailed, DbError>, DbError> {
        let inner = Arc::clone(&self.inner);
        Ok(self
            .inner
            .store
            .submit_background(move |txn: &mut WriteTxn<'_>| {
                let key = id.queue_key();
                let Some(bytes) = txn.get(Table::Tasks, &key)? else {
                    return Ok(TaskFailed::Gone);
                };
                let mut task = Task::decode(&bytes)?;
                task.attempts += 1;
                task.last_error = Some(error.clone());
                let dead = task.attempts >= max_attempts;
                let result = if dead {
                    txn.delete(Table::Tasks, key);
                    txn.put(Table::Tasks, id.dead_key(), task.encode())?;
                    TaskFailed::Dead
                } else {
                    task.not_before_ms = retry_at_ms;
                    txn.put(Table::Tasks, key, task.encode())?;
                    TaskFailed::Retry {
                        not_before_ms: retry_at_ms,
                    }
                };
                txn.on_commit(move || {
                    let stats = inner.triggers.stats(id.uid);
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    stats.record_error(inner.clock.now_ms(), id.label(), error);
                    if dead {
                        stats.pending.fetch_sub(1, Ordering::AcqRel);
                        stats.dead.fetch_add(1, Ordering::AcqRel);
                    }
                });
                Ok(result)
            })?)
    }

    /// Dead letters of a trigger in queue order, after the task label `after` if given.
    pub fn dead_letters(
        &self,
        name: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, DbError> {
        let def = self.trigger(name)?;
        let prefix = dead_prefix(def.uid);
        let start = match after {
            Some(label) => {
                let mut k = TaskId::parse_label(def.uid, label)
                    .ok_or_else(|| bad_label(label))?
                    .dead_key();
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        let end = prefix_end(&prefix);
        let read = self.inner.store.read()?;
        let mut out = Vec::new();
        for entry in read
            .range(Table::Tasks, start.as_slice()..end.as_slice())?
            .take(limit.min(DEAD_LIST_MAX))
        {
            let (k, v) = entry?;
            out.push(DeadLetter {
                id: TaskId::from_key(&k)?,
                task: Task::decode(&v)?,
            });
        }
        Ok(out)
    }

    /// Moves dead letters (all, or those labelled in `ids`) back into the queue with their
    /// attempts reset. Returns how many moved.
    pub fn retry_dead(&self, name: &str, ids: Option<Vec<String>>) -> Result<u64, DbError> {
        self.move_dead(name, ids, true)
    }

    /// Deletes dead letters (all, or those labelled in `ids`). Returns how many.
    pub fn purge_dead(&self, name: &str, ids: Option<Vec<String>>) -> Result<u64, DbError> {
        self.move_dead(name, ids, false)
    }

    fn move_dead(
        &self,
        name: &str,
        ids: Option<Vec<String>>,
        requeue: bool,
    ) -> Result<u64, DbError> {
        let def = self.trigger(name)?;
        let uid = def.uid;
        let mut listed: Option<Vec<TaskId>> = match ids {
            None => None,
            Some(labels) => Some(
                labels
                    .iter()
                    .map(|l| TaskId::parse_label(uid, l).ok_or_else(|| bad_label(l)))
                    .collect::<Result<_, _>>()?,
            ),
        };
        let mut total = 0;
        loop {
            let chunk: Option<Vec<TaskId>> = listed.as_mut().map(|l| {
                let rest = l.split_off(l.len().min(DEAD_CHUNK_MAX));
                std::mem::replace(l, rest)
            });
            let inner = Arc::clone(&self.inner);
            let (moved, more) = self
                .inner
                .store
                .submit(move |txn: &mut WriteTxn<'_>| {
                    let keys: Vec<Vec<u8>> = match &chunk {
                        Some(ids) => ids.iter().map(TaskId::dead_key).collect(),
                        None => txn
                            .prefix(Table::Tasks, &dead_prefix(uid))?
                            .take(DEAD_CHUNK_MAX)
                            .map(|e| e.map(|(k, _)| k))
                            .collect::<Result<_, _>>()?,
                    };
                    let more = chunk.is_none() && keys.len() == DEAD_CHUNK_MAX;
                    let mut moved = 0i64;
                    for key in keys {
                        let Some(bytes) = txn.get(Table::Tasks, &key)? else {
                            continue;
                        };
                        txn.delete(Table::Tasks, key.clone());
                        if requeue {
                            let mut task = Task::decode(&bytes)?;
                            task.attempts = 0;
                            task.not_before_ms = 0;
                            txn.put(
                                Table::Tasks,
                                TaskId::from_key(&key)?.queue_key(),
                                task.encode(),
                            )?;
                        }
                        moved += 1;
                    }
                    txn.on_commit(move || {
                        let stats = inner.triggers.stats(uid);
                        stats.dead.fetch_sub(moved, Ordering::AcqRel);
                        if requeue {
                            stats.pending.fetch_add(moved, Ordering::AcqRel);
                            inner.triggers.requeued();
                        }
                    });
                    Ok::<_, DbError>((moved as u64, more))
                })?
                .wait()?;
            total += moved;
            let listed_left = listed.as_ref().is_some_and(|l| !l.is_empty());
            if !(more || listed_left) {
                return Ok(total);
            }
        }
    }

    /// A trigger's definition with its queue and counters (`GET /v1/triggers/{name}`).
    pub fn trigger_status(&self, name: &str) -> Result<TriggerStatus, DbError> {
        let def = self.trigger(name)?;
        let stats = self.inner.triggers.stats(def.uid);
        let read = self.inner.store.read()?;
        if !self.inner.writable.load(Ordering::Acquire) {
            // A replica that is not the primary: its queues change through replication, not
            // through the hooks that keep the counters.
            crate::triggers::recount(&self.inner.triggers, &read)?;
        }
        let oldest_pending_age_ms = match read.prefix(Table::Tasks, &queue_prefix(def.uid))?.next()
        {
            Some(entry) => {
                let (_, v) = entry?;
                let task = Task::decode(&v)?;
                Some(self.inner.clock.now_ms().saturating_sub(task.created_ms))
            }
            None => None,
        };
        // The counters are kept by commit hooks and may dip below zero for a moment.
        let count = |n: i64| n.max(0) as u64;
        Ok(TriggerStatus {
            pending: count(stats.pending.load(Ordering::Acquire)),
            oldest_pending_age_ms,
            dead: count(stats.dead.load(Ordering::Acquire)),
            executed: stats.executed.load(Ordering::Relaxed),
            failed: stats.failed.load(Ordering::Relaxed),
            conflicts: stats.conflicts.load(Ordering::Relaxed),
            recent_errors: stats.recent_errors(),
            def,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::known::KnownDocs;
    use crate::layout::index_prefix;
    use crate::triggers::TriggerDef;
    use crate::txn::Write;
    use crate::write::prepare;
    use crate::{Db, DbError, DbOptions};
    use herald_storage::Table;
    use serde_json::{json, Value};

    fn put(collection: &str, id: &str, doc: Value) -> Write {
        Write::Put {
            collection: collection.into(),
            id: id.into(),
            doc,
            if_version: None,
        }
    }

    /// A database with a function trigger on collection `a`, and the trigger's uid.
    fn with_trigger(dir: &std::path::Path) -> (Db, u64) {
        let db = Db::open(dir, DbOptions::default()).unwrap();
        let def = TriggerDef::parse("t", &json!({"collection": "a", "function": "f"})).unwrap();
        let uid = db.put_trigger(def).unwrap().0.uid;
        (db, uid)
    }

    /// Index entries a task computed before a catalog change are not used after it.
    #[test]
    fn entries_computed_before_a_catalog_change_are_computed_again() {
        let dir = tempfile::tempdir().unwrap();
        let (db, uid) = with_trigger(dir.path());
        for i in 0..2 {
            db.commit(vec![put("a", &i.to_string(), json!({}))])
                .unwrap();
        }
        let tasks = db.load_tasks(uid, None, 2).unwrap();
        let complete = |task: usize, id: &str, exempt: Option<&str>| {
            let mut writes = vec![put("t", id, json!({"x": 1, "y": 2}))];
            let encoded = prepare(&mut writes, &db.inner.settings.limits, 10).unwrap();
            let known = KnownDocs::read(&db.inner.store, &db.inner.catalog, &writes).unwrap();
            if let Some(path) = exempt {
                db.set_exemptions("t", vec![path.into()]).unwrap();
            }
            db.submit_task(tasks[task].0, writes, encoded, vec![], Some(known))
                .unwrap()
                .wait()
                .unwrap();
        };
        let indexed = |field: &str, id: &str| {
            let prefix = index_prefix("t", &crate::indexer::field_index_name(field));
            let read = db.inner.store.read().unwrap();
            let ids: Vec<Vec<u8>> = read
                .range(Table::Index, prefix.clone()..)
                .unwrap()
                .map(|e| e.unwrap())
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, v)| {
                    crate::layout::index_entry_id(&k, &v)
                        .unwrap()
                        .as_bytes()
                        .to_vec()
                })
                .collect();
            ids.contains(&id.as_bytes().to_vec())
        };
        // No change in between: the entries computed beforehand are the ones written.
        complete(0, "d1", None);
        assert!(indexed("x", "d1") && indexed("y", "d1"));
        // `x` exempted between computing and committing: its entry must not be written.
        complete(1, "d2", Some("x"));
        assert!(!indexed("x", "d2"));
        assert!(indexed("y", "d2"));
    }

    /// A trigger task reads the documents it replaces before it is queued (`KnownDocs`); a
    /// client write committed between that read and the task's commit must still be what the
    /// task's update applies to.
    #[test]
    fn a_task_applies_its_update_to_a_write_committed_after_it_read_the_document() {
        let dir = tempfile::tempdir().unwrap();
        let (db, uid) = with_trigger(dir.path());
        db.commit(vec![put("counters", "c", json!({"n": 1}))])
            .unwrap();
        db.commit(vec![put("a", "1", json!({}))]).unwrap();
        let (id, _) = db.load_tasks(uid, None, 1).unwrap().remove(0);
        // Hold the writer in a background job, so the next batch is a client's.
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let stall = db
            .inner
            .store
            .submit_background(move |_txn| {
                started_tx.send(()).unwrap();
                released.recv().ok();
                Ok::<(), DbError>(())
            })
            .unwrap();
        started.recv().unwrap();
        // The task reads counters/c now (n = 1) and queues behind the stall...
        let inc = Write::Update {
            collection: "counters".into(),
            id: "c".into(),
            update: herald_query::Update::parse(&json!({"$inc": {"n": 10}})).unwrap(),
            upsert: false,
            if_version: None,
        };
        let task = db.complete_task(id, vec![inc], vec![]).unwrap();
        // ...and a client's write commits before it.
        let client = db
            .submit(
                vec![put("counters", "c", json!({"n": 5}))],
                crate::QueueFull::Block,
            )
            .unwrap();
        release.send(()).unwrap();
        stall.wait().unwrap();
        assert_eq!(client.wait().unwrap().results[0].version, 2);
        task.wait().unwrap();
        let c = db.get("counters", "c").unwrap().unwrap();
        assert_eq!((c.version, c.doc["n"].clone()), (3, json!(15)));
    }
}
