//! Committing a client transaction: [`Db::submit`] validates it on the caller's thread, queues
//! one storage job that applies it (`write::apply`), and returns a ticket that resolves once the
//! commit is durable (or failed). [`Db::commit`] is the blocking shorthand.

use super::{publish_hook, Db};
use crate::error::DbError;
use crate::mutations::check_mutation_id;
use crate::txn::{CommitOutcome, QueueFull, Refused, Transaction, Write, COMMIT_WRITES_MAX};
use crate::write::{apply, prepare, ApplyCtx};
use herald_storage::{Ticket, WriteTxn};
use std::sync::{Arc, Mutex};

impl Db {
    /// Queues an atomic transaction; the ticket resolves once it is durable (or failed).
    ///
    /// `full` says what to do when the write queue is full: wait ([`QueueFull::Block`]) or
    /// refuse with `overloaded` ([`QueueFull::Refuse`], for async callers, which must not
    /// block). A refused transaction hands its writes back in [`Refused::writes`], prepared
    /// (generated ids stay chosen) and never cloned, so a caller that retries later (bulk
    /// ingest) need not copy them before trying.
    ///
    /// With a mutation id already recorded by an earlier commit (within retention), nothing is
    /// applied and the ticket resolves to that commit's seq and results with `replayed: true`
    /// (a replay is not checked by the guard again: it was when it applied). With a guard, each
    /// write is checked inside the storage job on the exact stored document it replaces and
    /// the document it computes; an error fails the whole transaction (nothing applied, no seq
    /// consumed). The server's security rules use this.
    pub fn submit(
        &self,
        txn: impl Into<Transaction>,
        full: QueueFull,
    ) -> Result<Ticket<CommitOutcome, DbError>, Refused> {
        let Transaction {
            mut writes,
            mutation_id,
            guard,
        } = txn.into();
        if let Some(id) = &mutation_id {
            check_mutation_id(id)?;
        }
        let mut encoded = prepare(&mut writes, &self.inner.settings.limits, COMMIT_WRITES_MAX)?;
        // The writes wait in a slot the job empties when it runs, so they are never cloned: the
        // job owns them once it runs, and a refused job (dropped unrun) leaves them for us.
        let slot = Arc::new(Mutex::new(Some(writes)));
        let job_slot = Arc::clone(&slot);
        let inner = Arc::clone(&self.inner);
        let job = move |txn: &mut WriteTxn<'_>| {
            let mut writes = job_slot
                .lock()
                .expect("writes slot")
                .take()
                .expect("a job runs at most once");
            let ctx = ApplyCtx {
                catalog: &inner.catalog,
                settings: &inner.settings,
                triggers: &inner.triggers,
                depth: 0,
                now_ms: inner.clock.now_ms(),
                guard: guard.as_deref(),
                known: None,
                mutation_id: mutation_id.as_deref(),
            };
            let mut outcome = apply(txn, &mut writes, &mut encoded, &ctx)?;
            if !outcome.replayed {
                // Hooks run in commit order on the writer thread, so the feed sees seqs in
                // order.
                txn.on_commit(publish_hook(&inner, &mut outcome));
            }
            Ok(outcome)
        };
        let queued = match full {
            QueueFull::Block => self.inner.store.submit(job),
            QueueFull::Refuse => self.inner.store.try_submit(job),
        };
        queued.map_err(|e| Refused {
            error: e.into(),
            writes: slot.lock().expect("writes slot").take(),
        })
    }

    /// Commits the writes as one transaction and waits until it is durable (blocking while the
    /// write queue is full).
    pub fn commit(&self, writes: Vec<Write>) -> Result<CommitOutcome, DbError> {
        Ok(self.submit(writes, QueueFull::Block)?.wait()?)
    }
}
