//! Running one task: a JavaScript function in the worker thread's sandbox, or a webhook POST;
//! then completing it (its writes and its removal, atomically) or recording the failure with
//! an exponential, jittered backoff.

use crate::triggers::host::TaskHost;
use crate::triggers::pool::ScriptPool;
use crate::triggers::TriggerOptions;
use herald_db::triggers::{Action, Task, TaskDone, TaskFailed, TaskId, TriggerDef};
use herald_db::{Db, DbError, Ticket};
use herald_protocol::{TriggerEvent, WebhookCall};
use herald_script::Sandbox;
use rand::Rng;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How often a task that conflicts with concurrent writes is re-run at once before the
/// conflict counts as a failed attempt.
pub const CONFLICT_RERUNS_MAX: u32 = 8;

/// What happened to a dispatched task, for the dispatcher's in-memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Completed, or no longer queued: it leaves the window.
    Finished,
    /// Failed; runs again at this time.
    Retry { not_before_ms: u64 },
    /// Not run to completion through no fault of the task (`unavailable`): runs again at this
    /// time without counting an attempt.
    Requeue { not_before_ms: u64 },
}

/// How a failure of this node rather than of the task reads (`unavailable: ...`): the error
/// code of a commit refused because the node is not (or no longer) the primary.
pub const UNAVAILABLE_PREFIX: &str = "unavailable:";
/// When a task whose completion was `unavailable` is tried again (if this node is primary
/// by then).
pub const UNAVAILABLE_RETRY_MS: u64 = 1000;

thread_local! {
    // One sandbox (one QuickJS runtime) per worker thread: creating a runtime per task would
    // cost more than most tasks. Each run still gets a fresh context.
    static SANDBOX: RefCell<Option<Sandbox>> = const { RefCell::new(None) };
}

/// The delay before attempt `attempts + 1`: base * 2^attempts, capped, with "equal jitter"
/// (half fixed, half random) so failing tasks do not retry in lockstep.
pub fn backoff_ms(attempts: u32, opts: &TriggerOptions) -> u64 {
    let full = opts
        .backoff_base_ms
        .saturating_mul(1u64 << attempts.min(32))
        .min(opts.backoff_max_ms)
        .max(1);
    full / 2 + rand::thread_rng().gen_range(0..=full / 2)
}

/// The `event` a trigger function or webhook receives for a task.
fn trigger_event(task: &Task) -> TriggerEvent {
    TriggerEvent {
        op: task.op.clone(),
        collection: task.collection.clone(),
        id: task.id.clone(),
        before: task.before.clone(),
        after: task.after.clone(),
        seq: task.seq,
    }
}

/// Runs the function in this blocking thread's sandbox and submits the task's completion: its
/// writes, its read checks and its removal from the queue, as one storage job.
fn run_and_submit(
    db: &Db,
    source: &str,
    id: TaskId,
    event: &serde_json::Value,
    opts: &TriggerOptions,
) -> Result<Ticket<TaskDone, DbError>, String> {
    let (writes, reads) = SANDBOX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Sandbox::new(opts.script).map_err(|e| format!("{}: {e}", e.code()))?);
        }
        let sandbox = slot.as_mut().expect("just set");
        let mut host = TaskHost::new(db);
        sandbox.run(source, event, &mut host).map_err(|e| match e {
            // A database call the function let escape: report the database's own code.
            herald_script::ScriptError::Host(h) => format!("{}: {}", h.code, h.message),
            other => format!("{}: {other}", other.code()),
        })?;
        Ok::<_, String>(host.finish())
    })?;
    db.complete_task(id, writes, reads)
        .map_err(|e| format!("{}: {e}", e.code()))
}

/// Runs a function task to the end. The JavaScript runs on one of the pool's low-priority
/// threads; the commit is awaited without holding a thread, so many tasks can share one group
/// commit.
pub async fn run_function(
    db: Db,
    def: Arc<TriggerDef>,
    id: TaskId,
    task: Task,
    opts: Arc<TriggerOptions>,
    scripts: Arc<ScriptPool>,
) -> Outcome {
    let Action::Function(_) = &def.action else {
        unreachable!("run_function is only dispatched for function triggers");
    };
    let event = Arc::new(serde_json::to_value(trigger_event(&task)).expect("an event serializes"));
    for _ in 0..=CONFLICT_RERUNS_MAX {
        let submitted = {
            let (db, def, event, opts) = (db.clone(), def.clone(), event.clone(), opts.clone());
            scripts
                .run(move || {
                    let Action::Function(source) = &def.action else {
                        unreachable!("checked above");
                    };
                    run_and_submit(&db, source, id, &event, &opts)
                })
                .await
                .unwrap_or_else(|| {
                    Err("internal: the task's thread failed or the server is stopping".into())
                })
        };
        let ticket = match submitted {
            Ok(ticket) => ticket,
            Err(message) => return fail_async(db, def, id, task, message, opts).await,
        };
        match ticket.await.map_err(DbError::from) {
            Ok(TaskDone::Done(_)) | Ok(TaskDone::Gone) => return Outcome::Finished,
            Err(DbError::TaskConflict { .. }) => {
                db.triggers()
                    .stats(id.uid)
                    .conflicts
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let message = format!("{}: {e}", e.code());
                return fail_async(db, def, id, task, message, opts).await;
            }
        }
    }
    let message = format!(
        "task_conflict: the documents this task reads kept changing ({} runs)",
        CONFLICT_RERUNS_MAX + 1
    );
    fail_async(db, def, id, task, message, opts).await
}

/// [`fail`] on a blocking thread (recording a failure submits to the store, which may block).
async fn fail_async(
    db: Db,
    def: Arc<TriggerDef>,
    id: TaskId,
    task: Task,
    message: String,
    opts: Arc<TriggerOptions>,
) -> Outcome {
    let clock = db.clock().clone();
    if message.starts_with(UNAVAILABLE_PREFIX) {
        // This node cannot commit (no longer the primary, or the log is unreachable): the
        // task did not fail. It stays queued, unrecorded, for whichever node is primary.
        return Outcome::Requeue {
            not_before_ms: clock.now_ms() + UNAVAILABLE_RETRY_MS,
        };
    }
    tokio::task::spawn_blocking(move || fail(&db, &def, id, &task, message, &opts))
        .await
        .unwrap_or(Outcome::Retry {
            not_before_ms: clock.now_ms() + 1000,
        })
}

/// Posts a webhook task's event (at least once: a crash between the POST and the dequeue
/// repeats it, with the same `Idempotency-Key`).
pub async fn run_webhook(
    db: Db,
    client: reqwest::Client,
    def: Arc<TriggerDef>,
    id: TaskId,
    task: Task,
    opts: Arc<TriggerOptions>,
) -> Outcome {
    let Action::Webhook { url, headers } = &def.action else {
        unreachable!("run_webhook is only dispatched for webhook triggers");
    };
    let body = WebhookCall {
        trigger: def.name.clone(),
        task: id.label(),
        attempt: task.attempts + 1,
        event: trigger_event(&task),
    };
    let mut request = client
        .post(url)
        .timeout(opts.webhook_timeout)
        .header("Idempotency-Key", idempotency_key(&def.name, id))
        .json(&body);
    for (k, v) in headers {
        request = request.header(k.as_str(), v.as_str().unwrap_or_default());
    }
    let failure = match request.send().await {
        Ok(resp) if resp.status().is_success() => {
            match db.complete_task(id, Vec::new(), Vec::new()) {
                Ok(ticket) => match ticket.await {
                    Ok(_) => return Outcome::Finished,
                    Err(e) => {
                        let e = DbError::from(e);
                        format!("{}: {e}", e.code())
                    }
                },
                Err(e) => format!("{}: {e}", e.code()),
            }
        }
        Ok(resp) => format!(
            "webhook_status: {url} answered HTTP {}",
            resp.status().as_u16()
        ),
        Err(e) if e.is_timeout() => format!("webhook_timeout: {url} did not answer in time"),
        Err(e) => format!("webhook_error: {e}"),
    };
    fail_async(db, def, id, task, failure, opts).await
}

/// Stable for the task's whole life (all attempts, restarts and re-queues).
pub fn idempotency_key(trigger: &str, id: TaskId) -> String {
    format!("{trigger}:{}:{}.{}", id.uid, id.seq, id.n)
}

/// Records a failed attempt (blocking).
fn fail(
    db: &Db,
    def: &TriggerDef,
    id: TaskId,
    task: &Task,
    message: String,
    opts: &TriggerOptions,
) -> Outcome {
    let retry_at = db.clock().now_ms() + backoff_ms(task.attempts, opts);
    let recorded = db
        .fail_task(id, message, def.max_attempts, retry_at)
        .and_then(|t| t.wait().map_err(DbError::from));
    match recorded {
        Ok(TaskFailed::Retry { not_before_ms }) => Outcome::Retry { not_before_ms },
        Ok(TaskFailed::Dead) | Ok(TaskFailed::Gone) => Outcome::Finished,
        // The failure could not be recorded (storage trouble): the task is still queued with
        // its old state; try it again after the backoff.
        Err(e) => {
            eprintln!(
                "herald: recording a failure of trigger {} task {}: {e}",
                def.name,
                id.label()
            );
            Outcome::Retry {
                not_before_ms: retry_at,
            }
        }
    }
}
