//! Crash test: every write the store acknowledged survives a SIGKILL at a random moment, and
//! the store reopens cleanly with every multi-table job applied whole or not at all.
//!
//! The test re-runs its own binary as a child process (selected by `HERALD_CRASH_CHILD_DIR`)
//! that writes through the store from several threads and prints `ACK i` after each ticket
//! resolves. The parent kills it, reopens the store and checks. Some cycles leave the crashed
//! file unchecked, so that the next child opens (and repairs) a crashed file and may itself be
//! killed during that repair.
//!
//! Each cycle's child checkpoints on one of three schedules ([`Checkpoints`]): never (every
//! acknowledged write is then only in the write-ahead log when the kill lands, spread over
//! several small segments, so reopening must replay it), very often (kills land before,
//! during and after checkpoints and segment deletions, with the writer held back by the
//! memory bound), or by the defaults. After each check the store is closed, which must leave
//! no log behind.
//!
//! A second test runs the child in no-sync mode and checks that only the writes of about the
//! last `nosync_lag_ms_max` can be lost.
//!
//! `HERALD_CRASH_CYCLES` sets the number of cycles of the first test (default 20, a few
//! seconds).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use herald_storage::{encode_u64, Durability, StorageError, Store, StoreOptions, Table};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const CHILD_DIR_ENV: &str = "HERALD_CRASH_CHILD_DIR";
const CHILD_CYCLE_ENV: &str = "HERALD_CRASH_CHILD_CYCLE";
const CYCLES_ENV: &str = "HERALD_CRASH_CYCLES";
const CHILD_NOSYNC_ENV: &str = "HERALD_CRASH_CHILD_NOSYNC";
const CHILD_CHECKPOINTS_ENV: &str = "HERALD_CRASH_CHILD_CHECKPOINTS";
const CYCLES_DEFAULT: u32 = 20;
/// The no-sync child's bound on how long a commit stays volatile.
const NOSYNC_LAG_MS: u64 = 50;
/// In no-sync mode, writes acknowledged this long before the kill must have survived: the lag
/// plus ample time for the batch in flight, on a loaded two-core machine.
const NOSYNC_MARGIN: Duration = Duration::from_millis(700);
/// Concurrent submitters in the child, so batches hold several jobs.
const CHILD_WRITERS: u64 = 4;
/// A child that is never killed (the parent died) stops on its own after this long.
const CHILD_LIFETIME_MAX: Duration = Duration::from_secs(120);
/// How many acknowledged writes of earlier cycles each check samples.
const OLD_SAMPLE: usize = 500;
const COUNT_KEY: &[u8] = b"count";
/// The log keeps this many newest records: each job deletes the one this far behind it, as the
/// database's retention does, so the log's floor is crash-tested too.
const LOG_KEEP: u64 = 1000;

fn doc_key(cycle: u32, i: u64) -> Vec<u8> {
    [&cycle.to_be_bytes()[..], &i.to_be_bytes()].concat()
}

/// Mostly small values, and every 50th larger than a 4 KiB page so overflow pages are in play.
fn doc_value(cycle: u32, i: u64) -> Vec<u8> {
    let len = if i.is_multiple_of(50) {
        5000
    } else {
        16 + (i * 37 % 200) as usize
    };
    format!("{cycle}:{i};").bytes().cycle().take(len).collect()
}

/// When a child checkpoints its write-ahead log into redb.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Checkpoints {
    /// Never while it runs: everything acknowledged is in the log and in memory only.
    Never,
    /// After every few kilobytes or millisecond, with a small memory bound and log segments;
    /// most checkpoints are not durable (one every 20 ms is), so kills land between them.
    Often,
    /// The store's defaults.
    Default,
}

impl Checkpoints {
    const ALL: [Checkpoints; 3] = [Checkpoints::Never, Checkpoints::Often, Checkpoints::Default];

    fn name(self) -> &'static str {
        match self {
            Checkpoints::Never => "never",
            Checkpoints::Often => "often",
            Checkpoints::Default => "default",
        }
    }

    fn options(self, options: StoreOptions) -> StoreOptions {
        match self {
            Checkpoints::Never => StoreOptions {
                checkpoint_interval_ms: 3_600_000,
                checkpoint_bytes: 1 << 40,
                layers_bytes_max: 1 << 40,
                wal_segment_bytes: 256 << 10,
                ..options
            },
            Checkpoints::Often => StoreOptions {
                checkpoint_interval_ms: 1,
                durable_checkpoint_interval_ms: 20,
                checkpoint_bytes: 16 << 10,
                layers_bytes_max: 256 << 10,
                wal_segment_bytes: 32 << 10,
                ..options
            },
            Checkpoints::Default => options,
        }
    }
}

/// The child process: writes until killed. A no-op in a normal test run.
#[test]
fn crash_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let cycle: u32 = std::env::var(CHILD_CYCLE_ENV).unwrap().parse().unwrap();
    let options = if std::env::var_os(CHILD_NOSYNC_ENV).is_some() {
        StoreOptions {
            durability: Durability::NoSync,
            nosync_lag_ms_max: NOSYNC_LAG_MS,
            ..StoreOptions::default()
        }
    } else {
        StoreOptions::default()
    };
    let checkpoints = match std::env::var(CHILD_CHECKPOINTS_ENV).as_deref() {
        Ok("never") => Checkpoints::Never,
        Ok("often") => Checkpoints::Often,
        _ => Checkpoints::Default,
    };
    let store = Store::open(Path::new(&dir), checkpoints.options(options)).unwrap();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for writer in 0..CHILD_WRITERS {
            let store = &store;
            scope.spawn(move || {
                for n in 0.. {
                    let i = n * CHILD_WRITERS + writer;
                    let (key, value) = (doc_key(cycle, i), doc_value(cycle, i));
                    // One job touches three tables; the parent checks they always agree.
                    let ticket = store
                        .submit(move |txn| {
                            let seq = txn.get_u64(Table::Meta, COUNT_KEY)?.unwrap_or(0) + 1;
                            txn.put(Table::Docs, key.clone(), value)?;
                            // Index entries live in runs: one per document, and one that
                            // moves (put the new, delete the old) so deletes cross merges.
                            txn.put(Table::Index, [b"d".as_slice(), &key].concat(), key.clone())?;
                            txn.put(Table::Index, moving_key(seq), key.clone())?;
                            txn.delete(Table::Index, moving_key(seq - 1));
                            txn.put(Table::Log, encode_u64(seq), key)?;
                            if seq > LOG_KEEP {
                                txn.delete(Table::Log, encode_u64(seq - LOG_KEEP));
                            }
                            txn.put_u64(Table::Meta, COUNT_KEY, seq)?;
                            Ok::<_, StorageError>(())
                        })
                        .unwrap();
                    ticket.wait().unwrap();
                    // Written straight to fd 1 (not through the test harness's capture), one
                    // whole line per write, so the parent reads exactly what was acknowledged.
                    let mut out = std::io::stdout().lock();
                    if writeln!(out, "ACK {i}").and_then(|()| out.flush()).is_err()
                        || started.elapsed() > CHILD_LIFETIME_MAX
                    {
                        std::process::exit(0);
                    }
                }
            });
        }
    });
}

/// The index key that moves to the newest seq with every job.
fn moving_key(seq: u64) -> Vec<u8> {
    [b"m".as_slice(), &encode_u64(seq)].concat()
}

/// How a cycle kills its child.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// After the first acknowledgement plus a random delay: mid-commit or mid-fsync.
    Writing(Duration),
    /// A few milliseconds after spawning: during startup or while redb repairs the file.
    Opening(Duration),
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    if std::env::var_os(CHILD_DIR_ENV).is_some() {
        return;
    }
    let cycles: u32 = std::env::var(CYCLES_ENV)
        .ok()
        .map(|v| v.parse().expect("HERALD_CRASH_CYCLES must be a number"))
        .unwrap_or(CYCLES_DEFAULT);
    let seed: u64 = rand::random();
    eprintln!("crash test: {cycles} cycles, seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();

    let mut checked: Vec<(u32, u64)> = Vec::new();
    let mut unchecked: Vec<(u32, u64)> = Vec::new();
    let mut previous_unchecked = false;
    for cycle in 0..cycles {
        // Only a child that opens a crashed file has a repair to be killed in.
        let kill = if previous_unchecked && rng.gen_bool(0.5) {
            Kill::Opening(Duration::from_millis(rng.gen_range(0..20)))
        } else {
            Kill::Writing(Duration::from_millis(rng.gen_range(0..100)))
        };
        let checkpoints = *Checkpoints::ALL.choose(&mut rng).unwrap();
        let (acks, _) = run_child(dir.path(), cycle, kill, false, checkpoints);
        if checkpoints == Checkpoints::Never && !acks.is_empty() {
            // What the child acknowledged exists only in its log: reopening must replay it.
            assert!(
                !wal_segments(dir.path()).is_empty(),
                "cycle {cycle}: no write-ahead log after acknowledged writes"
            );
        }
        unchecked.extend(acks.into_iter().map(|(i, _)| (cycle, i)));
        previous_unchecked = cycle + 1 < cycles && rng.gen_bool(0.3);
        if !previous_unchecked {
            check(dir.path(), &unchecked, &checked, &mut rng, cycle);
            checked.append(&mut unchecked);
        }
    }
    eprintln!(
        "crash test: {} acknowledged writes checked in {:.1?}",
        checked.len(),
        started.elapsed()
    );
    assert!(!checked.is_empty(), "no child ever acknowledged a write");
}

/// No-sync mode may lose recent acknowledged writes, but only those of about the last
/// `nosync_lag_ms_max`, and the file still reopens cleanly with whole jobs only.
#[test]
fn nosync_crash_loses_only_the_last_lag() {
    if std::env::var_os(CHILD_DIR_ENV).is_some() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(rand::random());
    let dir = tempfile::tempdir().unwrap();
    let mut checked: Vec<(u32, u64)> = Vec::new();
    for cycle in 0..2 {
        let run = NOSYNC_MARGIN + Duration::from_millis(500);
        let (acks, killed) = run_child(
            dir.path(),
            cycle,
            Kill::Writing(run),
            true,
            Checkpoints::Default,
        );
        let old: Vec<(u32, u64)> = acks
            .iter()
            .filter(|(_, at)| killed.duration_since(*at) > NOSYNC_MARGIN)
            .map(|&(i, _)| (cycle, i))
            .collect();
        assert!(
            !old.is_empty(),
            "the child acknowledged nothing early enough to check"
        );
        check(dir.path(), &old, &checked, &mut rng, cycle);
        checked.extend(old);
    }
}

/// Runs one child until `kill` says and kills it with SIGKILL. Returns what it acknowledged,
/// each with when the parent read it, and when the kill was sent.
fn run_child(
    dir: &Path,
    cycle: u32,
    kill: Kill,
    nosync: bool,
    checkpoints: Checkpoints,
) -> (Vec<(u64, Instant)>, Instant) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "crash_child_writer",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_CYCLE_ENV, cycle.to_string())
        .env(CHILD_CHECKPOINTS_ENV, checkpoints.name());
    if nosync {
        command.env(CHILD_NOSYNC_ENV, "1");
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (acks_tx, acks) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        // A line cut short by the kill has no newline and was never a complete acknowledgement.
        while lines.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
            if let Some(i) = line.strip_prefix("ACK ") {
                let i = i.trim_end().parse::<u64>().unwrap();
                acks_tx.send((i, Instant::now())).unwrap();
            }
            line.clear();
        }
    });
    let mut received = Vec::new();
    match kill {
        Kill::Writing(delay) => {
            let first = acks.recv_timeout(Duration::from_secs(30));
            received.push(first.expect("the child acknowledged nothing within 30 s"));
            std::thread::sleep(delay);
        }
        Kill::Opening(delay) => std::thread::sleep(delay),
    }
    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    received.extend(acks.try_iter());
    (received, killed)
}

/// Reopens the store and checks every write acknowledged since the last check, a sample of
/// older ones, and that the three tables each job writes agree.
fn check(dir: &Path, fresh: &[(u32, u64)], older: &[(u32, u64)], rng: &mut StdRng, cycle: u32) {
    let store = Store::open(dir, StoreOptions::default())
        .unwrap_or_else(|e| panic!("cycle {cycle}: the store does not reopen after SIGKILL: {e}"));
    let read = store.read().unwrap();
    let sample = older.choose_multiple(rng, OLD_SAMPLE);
    for &(c, i) in fresh.iter().chain(sample) {
        let found = read.get(Table::Docs, &doc_key(c, i)).unwrap();
        assert!(
            found.as_deref() == Some(doc_value(c, i).as_slice()),
            "cycle {cycle}: write {i} of cycle {c} was acknowledged but is {}",
            if found.is_some() { "wrong" } else { "missing" }
        );
    }
    // Every job wrote a doc, a log entry and the counter together: they must agree exactly,
    // and the log must be gap-free (its newest `LOG_KEEP` keys, every one of them).
    let count = read.get_u64(Table::Meta, COUNT_KEY).unwrap().unwrap_or(0);
    assert_eq!(
        read.len(Table::Docs).unwrap(),
        count,
        "cycle {cycle}: docs vs counter"
    );
    assert_eq!(
        read.len(Table::Log).unwrap(),
        count.min(LOG_KEEP),
        "cycle {cycle}: log vs counter"
    );
    let indexed = read.prefix(Table::Index, b"d").unwrap();
    let mut indexed_count = 0u64;
    for entry in indexed {
        let (key, value) = entry.unwrap();
        assert_eq!(&key[1..], value.as_slice(), "cycle {cycle}: index entry");
        indexed_count += 1;
    }
    assert_eq!(
        indexed_count, count,
        "cycle {cycle}: index entries vs counter"
    );
    let moving: Vec<_> = read
        .prefix(Table::Index, b"m")
        .unwrap()
        .map(|e| e.unwrap().0)
        .collect();
    let expected = if count > 0 {
        vec![moving_key(count)]
    } else {
        Vec::new()
    };
    assert_eq!(moving, expected, "cycle {cycle}: the moving index entry");
    if count > 0 {
        let mut log = read.range::<&[u8]>(Table::Log, ..).unwrap();
        let first = log.next().unwrap().unwrap().0;
        let last = log.next_back().unwrap().unwrap().0;
        assert_eq!(
            (first, last),
            (
                encode_u64(count.saturating_sub(LOG_KEEP) + 1).to_vec(),
                encode_u64(count).to_vec()
            )
        );
    }
    let acked = (fresh.len() + older.len()) as u64;
    assert!(
        count >= acked,
        "cycle {cycle}: {acked} acknowledged but only {count} stored"
    );
    drop(read);
    store.close().unwrap();
    // A clean close checkpoints everything and deletes the write-ahead log.
    let logs = wal_segments(dir);
    assert!(logs.is_empty(), "cycle {cycle}: close left {logs:?}");
}

/// The write-ahead-log segment files in `dir`.
fn wal_segments(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("wal-"))
        .collect()
}
