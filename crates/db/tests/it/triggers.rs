//! Trigger queues on a real store: tasks are queued in the firing commit, completed with
//! their writes atomically (at most once), retried, dead-lettered, re-queued and purged, and
//! survive a reopen.

use herald_db::triggers::{ReadCheck, TaskDone, TaskFailed, TaskId, TriggerDef, TRIGGER_DEPTH_MAX};
use herald_db::{Db, DbError, DbOptions, Durability, Write};
use serde_json::{json, Value};

fn open(dir: &std::path::Path) -> Db {
    Db::open(
        dir,
        DbOptions {
            durability: Durability::NoSync,
            ..DbOptions::default()
        },
    )
    .unwrap()
}

fn put(c: &str, id: &str, doc: Value) -> Write {
    Write::Put {
        collection: c.into(),
        id: id.into(),
        doc,
        if_version: None,
    }
}

fn define(db: &Db, name: &str, body: Value) -> u64 {
    let def = TriggerDef::parse(name, &body).unwrap();
    db.put_trigger(def).unwrap().0.uid
}

fn status(db: &Db, name: &str, what: &str) -> u64 {
    let s = db.trigger_status(name).unwrap();
    match what {
        "pending" => s.pending,
        "dead" => s.dead,
        "executed" => s.executed,
        _ => unreachable!("no counter {what}"),
    }
}

#[test]
fn matching_writes_queue_tasks_in_the_same_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let uid = define(
        &db,
        "fan",
        json!({"collection": "users/*/posts", "on": ["insert"], "filter": {"public": true}, "function": "function (e, db) {}"}),
    );
    db.commit(vec![
        put("users/u1/posts", "p1", json!({"public": true})),
        put("users/u1/posts", "p2", json!({"public": false})),
        put("other", "x", json!({"public": true})),
    ])
    .unwrap();
    // An update is not an insert: no task.
    db.commit(vec![put(
        "users/u1/posts",
        "p1",
        json!({"public": true, "n": 2}),
    )])
    .unwrap();
    let tasks = db.load_tasks(uid, None, 10).unwrap();
    assert_eq!(tasks.len(), 1);
    let (id, task) = &tasks[0];
    assert_eq!(
        (task.id.as_str(), task.op.as_str(), task.depth),
        ("p1", "insert", 1)
    );
    assert_eq!(task.after.as_ref().unwrap()["public"], json!(true));
    assert_eq!(id.seq, 1);
    assert_eq!(status(&db, "fan", "pending"), 1);

    // A transaction that fails queues nothing.
    let failed = db.commit(vec![
        put("users/u2/posts", "p9", json!({"public": true})),
        Write::Insert {
            collection: "users/u1/posts".into(),
            id: Some("p1".into()),
            doc: json!({}),
        },
    ]);
    assert!(matches!(failed, Err(DbError::AlreadyExists { .. })));
    assert_eq!(db.load_tasks(uid, None, 10).unwrap().len(), 1);
}

#[test]
fn completing_applies_writes_once_and_cascades() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let fan = define(&db, "fan", json!({"collection": "tweets", "function": "f"}));
    let count = define(
        &db,
        "count",
        json!({"collection": "timelines", "on": ["insert"], "function": "f"}),
    );
    db.commit(vec![put("tweets", "t1", json!({"by": "a"}))])
        .unwrap();
    let (id, _) = db.load_tasks(fan, None, 1).unwrap().remove(0);
    let done = db
        .complete_task(
            id,
            vec![put("timelines", "b:t1", json!({"t": "t1"}))],
            vec![],
        )
        .unwrap()
        .wait()
        .unwrap();
    assert!(matches!(done, TaskDone::Done(Some(_))));
    assert!(db.get("timelines", "b:t1").unwrap().is_some());
    assert_eq!(status(&db, "fan", "pending"), 0);
    assert_eq!(status(&db, "fan", "executed"), 1);
    // The timeline write fired the second trigger, one level deeper.
    let cascaded = db.load_tasks(count, None, 10).unwrap();
    assert_eq!(cascaded.len(), 1);
    assert_eq!(cascaded[0].1.depth, 2);
    // Running the same task again applies nothing.
    let again = db
        .complete_task(id, vec![put("timelines", "c:t1", json!({}))], vec![])
        .unwrap()
        .wait()
        .unwrap();
    assert!(matches!(again, TaskDone::Gone));
    assert!(db.get("timelines", "c:t1").unwrap().is_none());
}

#[test]
fn a_stale_read_conflicts_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let uid = define(&db, "t", json!({"collection": "a", "function": "f"}));
    db.commit(vec![put("a", "1", json!({}))]).unwrap();
    db.commit(vec![put("counters", "c", json!({"n": 1}))])
        .unwrap();
    let (id, _) = db.load_tasks(uid, None, 1).unwrap().remove(0);
    // The task read counters/c at version 1, but it is at version 2 by the time it commits.
    db.commit(vec![put("counters", "c", json!({"n": 5}))])
        .unwrap();
    let stale = ReadCheck {
        collection: "counters".into(),
        id: "c".into(),
        version: 1,
    };
    let err = db
        .complete_task(id, vec![put("counters", "c", json!({"n": 2}))], vec![stale])
        .unwrap()
        .wait()
        .unwrap_err();
    assert_eq!(DbError::from(err).code(), "task_conflict");
    assert_eq!(db.get("counters", "c").unwrap().unwrap().doc["n"], json!(5));
    assert_eq!(db.load_tasks(uid, None, 10).unwrap().len(), 1);
    // A read of a missing document is version 0.
    let fresh = ReadCheck {
        collection: "counters".into(),
        id: "missing".into(),
        version: 0,
    };
    let ok = db
        .complete_task(id, vec![], vec![fresh])
        .unwrap()
        .wait()
        .unwrap();
    assert!(matches!(ok, TaskDone::Done(None)));
}

#[test]
fn failures_retry_then_dead_letter_and_can_be_requeued_or_purged() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let uid = define(
        &db,
        "t",
        json!({"collection": "a", "maxAttempts": 2, "function": "f"}),
    );
    db.commit(vec![put("a", "1", json!({})), put("a", "2", json!({}))])
        .unwrap();
    let ids: Vec<TaskId> = db
        .load_tasks(uid, None, 10)
        .unwrap()
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    let first = db
        .fail_task(ids[0], "boom".into(), 2, 123)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(first, TaskFailed::Retry { not_before_ms: 123 });
    let task = &db.load_tasks(uid, None, 10).unwrap()[0].1;
    assert_eq!((task.attempts, task.not_before_ms), (1, 123));
    assert_eq!(task.last_error.as_deref(), Some("boom"));
    for id in &ids {
        let r = db
            .fail_task(*id, "bang".into(), 2, 0)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            r,
            if *id == ids[0] {
                TaskFailed::Dead
            } else {
                TaskFailed::Retry { not_before_ms: 0 }
            }
        );
    }
    assert_eq!(
        db.fail_task(ids[1], "x".into(), 2, 0)
            .unwrap()
            .wait()
            .unwrap(),
        TaskFailed::Dead
    );
    assert_eq!(status(&db, "t", "pending"), 0);
    assert_eq!(status(&db, "t", "dead"), 2);
    let dead = db.dead_letters("t", None, 100).unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].task.last_error.as_deref(), Some("bang"));
    let label = dead[0].id.label();
    assert_eq!(db.dead_letters("t", Some(&label), 100).unwrap().len(), 1);
    assert_eq!(
        db.fail_task(ids[0], "x".into(), 2, 0)
            .unwrap()
            .wait()
            .unwrap(),
        TaskFailed::Gone
    );

    assert_eq!(db.retry_dead("t", Some(vec![label])).unwrap(), 1);
    let requeued = db.load_tasks(uid, None, 10).unwrap();
    assert_eq!((requeued.len(), requeued[0].1.attempts), (1, 0));
    assert_eq!(db.purge_dead("t", None).unwrap(), 1);
    assert_eq!(status(&db, "t", "dead"), 0);
    assert_eq!(status(&db, "t", "pending"), 1);
    assert!(db.retry_dead("t", Some(vec!["nope".into()])).is_err());
    assert!(db.dead_letters("missing", None, 1).is_err());
}

#[test]
fn a_cycle_of_triggers_stops_at_the_depth_limit() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let uid = define(&db, "loop", json!({"collection": "a", "function": "f"}));
    db.commit(vec![put("a", "x", json!({"n": 0}))]).unwrap();
    for n in 1..=TRIGGER_DEPTH_MAX {
        let (id, task) = db.load_tasks(uid, None, 1).unwrap().remove(0);
        assert_eq!(task.depth, n);
        let r = db
            .complete_task(id, vec![put("a", "x", json!({"n": n}))], vec![])
            .unwrap()
            .wait();
        if n < TRIGGER_DEPTH_MAX {
            assert!(r.is_ok());
        } else {
            assert_eq!(
                DbError::from(r.unwrap_err()).code(),
                "trigger_depth_exceeded"
            );
            assert_eq!(db.get("a", "x").unwrap().unwrap().doc["n"], json!(n - 1));
        }
    }
}

#[test]
fn definitions_and_queues_survive_reopen_and_delete_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let uid = define(&db, "t", json!({"collection": "a", "function": "f"}));
    db.commit(vec![put("a", "1", json!({})), put("a", "2", json!({}))])
        .unwrap();
    db.close().unwrap();
    let db = open(dir.path());
    assert_eq!(db.triggers().get("t").unwrap().uid, uid);
    assert_eq!(status(&db, "t", "pending"), 2);
    assert!(db
        .trigger_status("t")
        .unwrap()
        .oldest_pending_age_ms
        .is_some());
    // Replacing keeps the queue.
    assert_eq!(
        define(
            &db,
            "t",
            json!({"collection": "a", "on": ["delete"], "function": "g"})
        ),
        uid
    );
    assert_eq!(db.load_tasks(uid, None, 10).unwrap().len(), 2);
    db.delete_trigger("t").unwrap();
    assert_eq!(
        db.delete_trigger("t").unwrap_err().code(),
        "trigger_not_found"
    );
    let again = define(&db, "t", json!({"collection": "a", "function": "f"}));
    assert_ne!(again, uid);
    assert!(db.load_tasks(again, None, 10).unwrap().is_empty());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !db.load_tasks(uid, None, 10).unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "old queue not deleted"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
