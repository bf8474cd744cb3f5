//! Client and background jobs through a running writer: batches never mix them, the lanes
//! take turns, a waiting client ends a background batch, heavy jobs wait for the queued clients
//! (the policy itself is tested without threads in `writer/lanes.rs`).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::testing::{memory, put, recorded, stall, visible};
use crate::{StorageError, Store, StoreOptions, Table, Ticket, WriteTxn};

#[test]
fn background_jobs_yield_to_foreground_jobs() {
    // A zero budget: each batch takes its foreground jobs and exactly one background job.
    let store = Store::in_memory(StoreOptions {
        background_batch_ms_max: 0,
        ..StoreOptions::default()
    })
    .unwrap();
    let (order_tx, order) = mpsc::channel();
    let (stalled, release) = stall(&store);
    let job = |name: &'static str| recorded(&order_tx, name);
    let background: Vec<_> = ["b1", "b2", "b3"]
        .into_iter()
        .map(|n| store.submit_background(job(n)).unwrap())
        .collect();
    let foreground = store.submit(job("f1")).unwrap();
    drop(release);
    stalled.wait().unwrap();
    foreground.wait().unwrap();
    for t in background {
        t.wait().unwrap();
    }
    // The stalled batch took one background job when the stall ended; the foreground job,
    // queued after the other two, goes first in the next batch, which takes one more.
    let seen: Vec<&str> = order.try_iter().collect();
    assert_eq!(seen, ["b1", "f1", "b2", "b3"]);
    assert!(["b1", "b2", "b3", "f1"]
        .iter()
        .all(|k| visible(&store, k.as_bytes())));
}

#[test]
fn a_waiting_client_job_ends_the_background_work_of_a_batch_within_its_budget() {
    // A budget no test machine exhausts: without a client job waiting, one batch would take
    // every background job.
    let store = Store::in_memory(StoreOptions {
        background_batch_ms_max: 60_000,
        ..StoreOptions::default()
    })
    .unwrap();
    let (order_tx, order) = mpsc::channel();
    let (client_tx, client_rx) = mpsc::channel::<Ticket<(), StorageError>>();
    let job = |name: &'static str| recorded(&order_tx, name);
    let (stalled, release) = stall(&store);
    let store = Arc::new(store);
    // b1 submits the client job while it runs: the client job waits in the queue when the
    // batch looks for its next background job.
    let b1 = {
        let handle = store.clone();
        let inner = job("b1");
        let f1 = job("f1");
        store
            .submit_background(move |txn: &mut WriteTxn<'_>| {
                client_tx.send(handle.submit(f1).unwrap()).unwrap();
                inner(txn)
            })
            .unwrap()
    };
    let rest: Vec<_> = ["b2", "b3"]
        .into_iter()
        .map(|n| store.submit_background(job(n)).unwrap())
        .collect();
    drop(release);
    stalled.wait().unwrap();
    b1.wait().unwrap();
    client_rx.recv().unwrap().wait().unwrap();
    for t in rest {
        t.wait().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    assert_eq!(seen, ["b1", "f1", "b2", "b3"]);
}

#[test]
fn client_jobs_never_share_a_batch_with_background_jobs_and_the_two_take_turns() {
    let store = memory(1024, 1024);
    let (order_tx, order) = mpsc::channel();
    let job = |name: &'static str| recorded(&order_tx, name);
    let (stalled, release) = stall(&store);
    let before = store.metrics().commits;
    let tickets = vec![
        store.submit_background(job("b1")).unwrap(),
        store.submit_background(job("b2")).unwrap(),
        store.submit(job("f1")).unwrap(),
        store.submit(job("f2")).unwrap(),
    ];
    drop(release);
    stalled.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    // The stalled client batch took no background job; background had the next turn and
    // stopped after one job because clients waited; the clients' batch held both of them
    // and nothing else; then the last background job.
    assert_eq!(seen, ["b1", "f1", "f2", "b2"]);
    // stall (counted before its commit or after, so 3 or 4), [b1], [f1, f2], [b2]
    let batches = store.metrics().commits - before;
    assert!((3..=4).contains(&batches), "{batches} batches");
}

#[test]
fn a_heavy_background_job_runs_after_the_queued_client_jobs_in_a_batch_of_its_own() {
    let store = memory(1024, 1024);
    let (order_tx, order) = mpsc::channel();
    let (stalled, release) = stall(&store);
    let job = |name: &'static str| recorded(&order_tx, name);
    let heavy = store.submit_background_heavy(job("heavy")).unwrap();
    let light = store.submit_background(job("light")).unwrap();
    let client = store.submit(job("client")).unwrap();
    drop(release);
    stalled.wait().unwrap();
    for t in [heavy, light, client] {
        t.wait().unwrap();
    }
    let seen: Vec<&str> = order.try_iter().collect();
    // The heavy job was met first while the stalled batch filled up; the client job, queued
    // meanwhile, still commits before it, in a batch without it.
    let pos = |n: &str| seen.iter().position(|s| *s == n).unwrap();
    assert!(pos("client") < pos("heavy"), "{seen:?}");
}

#[test]
fn background_jobs_never_fill_the_foreground_queue() {
    // Many background jobs while the writer is busy leave the one-slot foreground queue free.
    let store = memory(1024, 1);
    let (stalled, release) = stall(&store);
    let queued: Vec<_> = (0..100u32)
        .map(|i| {
            store
                .submit_background(move |txn| {
                    txn.put(Table::Docs, i.to_be_bytes().to_vec(), b"1".to_vec())
                })
                .unwrap()
        })
        .collect();
    let client = store.try_submit(|_txn| Ok::<(), StorageError>(()));
    assert!(
        client.is_ok(),
        "a client job found the queue full of wake-ups"
    );
    drop(release);
    stalled.wait().unwrap();
    client.unwrap().wait().unwrap();
    for t in queued {
        t.wait().unwrap();
    }
}

#[test]
fn background_jobs_wake_an_idle_writer_and_commit_on_close() {
    let store = memory(1024, 1024);
    let t = store
        .submit_background(|txn| txn.put(Table::Docs, b"bg".to_vec(), b"1".to_vec()))
        .unwrap();
    t.wait_timeout(Duration::from_secs(10))
        .expect("an idle writer picks up a background job")
        .unwrap();
    assert!(visible(&store, b"bg"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let (stalled, release) = stall(&store);
    let queued: Vec<_> = (0..50u32)
        .map(|i| {
            store
                .submit_background(move |txn| {
                    txn.put(Table::Docs, i.to_be_bytes().to_vec(), b"1".to_vec())
                })
                .unwrap()
        })
        .collect();
    drop(release);
    drop(stalled);
    store.close().unwrap();
    for t in queued {
        t.wait().unwrap();
    }
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.read().unwrap().len(Table::Docs).unwrap(), 50);
}

#[test]
fn a_long_heavy_job_does_not_hold_back_the_acknowledgement_of_the_batch_before_it() {
    // On disk, so the client job's batch really waits for a log sync while the writer moves
    // on (the pipelined case).
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let started = std::time::Instant::now();
    let client = put(&store, b"client");
    let heavy = store
        .submit_background_heavy(|txn: &mut WriteTxn<'_>| {
            std::thread::sleep(Duration::from_millis(400));
            txn.put(Table::Docs, b"heavy".to_vec(), b"x".to_vec())
        })
        .unwrap();
    client.wait().unwrap();
    let client_done = started.elapsed();
    heavy.wait().unwrap();
    let heavy_done = started.elapsed();
    assert!(
        client_done + Duration::from_millis(300) < heavy_done,
        "the client's write was acknowledged at {client_done:?}, the heavy job at {heavy_done:?}"
    );
    store.close().unwrap();
}
