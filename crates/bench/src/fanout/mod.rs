//! `herald-bench fanout`: Twitter's fan-out done three ways (synchronously by the client,
//! through an external queue (Redis + a worker process), and by a trigger on Herald's durable
//! queues), as in the evaluation of "integrated queues for asynchronous triggers", on one
//! machine.
//!
//! Per mode: a fresh `herald serve` child on a temporary directory (fsync group commit by
//! default; `--durability nosync` to compare with Redis's `appendfsync everysec`), the
//! power-law follow graph bulk-loaded, then three phases, each followed by a full drain (every
//! acknowledged tweet's marker received):
//!
//! 1. saturation ([`search`]): open-loop probes, doubling from `--search-start` tweets/s and
//!    then bisecting, find the highest rate whose fan-outs keep up (all done shortly after the
//!    probe's schedule ends); that is the mode's sustained rate;
//! 2. 80% load: an open loop at 0.8 x that rate for `secs`; acknowledgement latency from the
//!    scheduled send time, propagation delay (acknowledgement to marker), CPU per process;
//! 3. burst: 50% -> 200% -> 50% of the sustained rate; per-interval latency and backlog, and
//!    the time the backlog takes to drain after the burst.
//!
//! Prints tables ([`report`]) and writes JSON.

pub mod app;
pub mod load;
pub mod markers;
pub mod procs;
pub mod report;
pub mod rig;
pub mod search;
pub mod stats;
pub mod tracker;
pub mod workload;

use crate::harness::{durability_name, Durability};
use load::{Mode, Step};
use report::{BurstResult, LoadResult, ModeResult, SatResult};
use rig::{run_open_loop, Ran, Rig};
use search::SearchOptions;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;
use workload::Graph;

#[derive(Debug, Clone)]
pub struct FanoutOptions {
    pub modes: Vec<Mode>,
    pub users: usize,
    pub followers_max: usize,
    pub secs: f64,
    /// The saturation search's probes.
    pub search: SearchOptions,
    /// Seconds at 50%, 200% and 50% of the sustained rate.
    pub burst_secs: [f64; 3],
    /// Fan-out concurrency of the queue worker and of the trigger workers.
    pub workers: usize,
    /// The rate the 80% and burst phases are relative to, instead of each mode's measured one.
    pub rate: Option<f64>,
    /// Width of the burst table's intervals.
    pub interval_secs: f64,
    pub drain_timeout: Duration,
    /// Earlier tweets whose timeline entries are bulk-loaded before the phases.
    pub preload_tweets: u64,
    pub seed: u64,
    /// Herald's durability: `fsync` (acknowledged = fsynced) or `nosync` (acknowledged once in
    /// the log file, synced within a second: what Redis's `appendfsync everysec` and
    /// Cassandra's periodic commit-log sync promise).
    pub durability: Durability,
    pub out: std::path::PathBuf,
}

impl FanoutOptions {
    pub fn check(&self) -> Result<(), String> {
        // One trigger task commits every entry and the marker (at most 10,000 writes), and a
        // query returns at most 10,000 documents.
        let limit = herald_db::triggers::TASK_WRITES_MAX - 1;
        if self.followers_max > limit {
            return Err(format!("--followers-max may be at most {limit}"));
        }
        if self.users == 0 || self.workers == 0 || self.modes.is_empty() {
            return Err("--users, --workers and --modes must not be empty or 0".into());
        }
        let s = &self.search;
        if [self.secs, self.interval_secs, s.secs, s.start]
            .iter()
            .any(|v| v.is_nan() || *v <= 0.0)
        {
            return Err(
                "--secs, --interval-secs, --search-secs and --search-start must be positive".into(),
            );
        }
        if s.max < s.start {
            return Err("--search-max must be at least --search-start".into());
        }
        Ok(())
    }
}

async fn run_mode(mode: Mode, opts: &FanoutOptions, graph: &Graph) -> Result<ModeResult, String> {
    let m = mode.name();
    eprintln!(
        "herald-bench fanout: {m}: starting (load graph, processes; herald durability {})",
        durability_name(opts.durability)
    );
    let mut rig = Rig::start(mode, opts, graph).await?;

    let sat = match opts.rate {
        Some(rate) => SatResult {
            rate,
            searched: false,
            probes: Vec::new(),
        },
        None => search::search(&mut rig, mode, opts, graph).await?,
    };
    let rate = sat.rate;
    if rate < 1.0 {
        return Err(format!(
            "{m}: sustained rate {rate:.2}/s is too low to continue"
        ));
    }

    let load_rate = 0.8 * rate;
    eprintln!(
        "herald-bench fanout: {m}: 80% load, {load_rate:.0} tweets/s, {} s",
        opts.secs
    );
    let steps = [Step {
        rate: load_rate,
        secs: opts.secs,
    }];
    let (ran, start_us) =
        run_open_loop(&mut rig, &format!("{m}-load"), opts, graph, &steps).await?;
    let load = LoadResult::from_run(&ran, load_rate, opts.secs, start_us);

    let [a, b, c] = opts.burst_secs;
    eprintln!(
        "herald-bench fanout: {m}: burst {:.0}/s for {a} s, {:.0}/s for {b} s, {:.0}/s for {c} s",
        0.5 * rate,
        2.0 * rate,
        0.5 * rate
    );
    let steps = [
        Step {
            rate: 0.5 * rate,
            secs: a,
        },
        Step {
            rate: 2.0 * rate,
            secs: b,
        },
        Step {
            rate: 0.5 * rate,
            secs: c,
        },
    ];
    let (ran, start_us) =
        run_open_loop(&mut rig, &format!("{m}-burst"), opts, graph, &steps).await?;
    let burst = BurstResult::from_run(&ran, rate, opts.burst_secs, opts.interval_secs, start_us);
    drop(rig);
    Ok(ModeResult {
        mode,
        sat,
        load,
        burst,
    })
}

impl LoadResult {
    fn from_run(ran: &Ran, rate: f64, secs: f64, start_us: u64) -> LoadResult {
        let slots = ran.tracker.slots();
        let tweets = slots.iter().filter(|s| s.ack_us > 0).count() as u64;
        let last_ack = slots.iter().map(|s| s.ack_us).max().unwrap_or(start_us);
        LoadResult {
            rate,
            secs,
            tweets,
            ack_rate: tweets as f64 / ((last_ack.saturating_sub(start_us)) as f64 / 1e6).max(secs),
            ack: stats::ack_from_due(&slots),
            ack_from_send: stats::ack_from_send(&slots),
            propagation: stats::propagation(&slots),
            cpu_per_k: stats::per_thousand(&ran.cpu, tweets),
            drain_secs: ran.drain_secs,
            drained: ran.drained,
            errors: ran.errors + ran.watch_errors,
            wrong: ran.tracker.wrong.load(Ordering::Relaxed),
        }
    }
}

impl BurstResult {
    fn from_run(ran: &Ran, rate: f64, steps: [f64; 3], width: f64, start_us: u64) -> BurstResult {
        let slots = ran.tracker.slots();
        let samples = ran.tracker.samples();
        let us = |s: f64| (s * 1e6) as u64;
        let burst_from = start_us + us(steps[0]);
        let burst_to = burst_from + us(steps[1]);
        let end = samples
            .last()
            .map_or(burst_to, |s| s.t_us)
            .max(burst_to + us(steps[2]));
        let pre = stats::peak_backlog(&samples, start_us, burst_from);
        let in_burst: Vec<_> = slots
            .iter()
            .filter(|s| s.due_us >= burst_from && s.due_us < burst_to)
            .copied()
            .collect();
        let tweets = slots.iter().filter(|s| s.ack_us > 0).count() as u64;
        BurstResult {
            rate,
            steps,
            intervals: stats::intervals(&slots, &samples, start_us, end, us(width)),
            pre_burst_backlog: pre,
            peak_backlog: stats::peak_backlog(&samples, burst_from, end + 1),
            drained_after: stats::drained_after(&samples, burst_to, pre),
            ack_in_burst: stats::ack_from_due(&in_burst),
            ack: stats::ack_from_due(&slots),
            propagation: stats::propagation(&slots),
            cpu_per_k: stats::per_thousand(&ran.cpu, tweets),
            tweets,
            errors: ran.errors + ran.watch_errors,
            wrong: ran.tracker.wrong.load(Ordering::Relaxed),
        }
    }
}

/// Runs the benchmark. SIGINT or SIGTERM stops it and still kills the child processes (the
/// run's future is dropped, and with it every [`Proc`](crate::harness::server::Proc)).
pub async fn run(opts: FanoutOptions) -> Result<(), String> {
    tokio::select! {
        r = run_all(opts) => r,
        _ = herald::shutdown_signal() => Err("interrupted; child processes stopped".into()),
    }
}

async fn run_all(opts: FanoutOptions) -> Result<(), String> {
    opts.check()?;
    let graph = Graph::generate(opts.users, opts.followers_max, opts.seed);
    eprintln!(
        "herald-bench fanout: {} posters, {} accounts, {} follow edges, mean fan-out {:.1}",
        graph.users,
        graph.accounts,
        graph.edges(),
        graph.mean_fanout()
    );
    let mut results = Vec::new();
    for &mode in &opts.modes {
        let r = run_mode(mode, &opts, &graph).await?;
        report::print_mode(&r);
        results.push(r);
    }
    report::print_summary(&results);
    let out = json!({
        "benchmark": "fanout",
        "options": {"modes": opts.modes.iter().map(|m| m.name()).collect::<Vec<_>>(), "users": opts.users,
                    "followersMax": opts.followers_max, "secs": opts.secs,
                    "search": {"start": opts.search.start, "max": opts.search.max, "secs": opts.search.secs, "bisectSteps": opts.search.bisect_steps},
                    "burstSecs": opts.burst_secs, "workers": opts.workers, "rate": opts.rate, "seed": opts.seed, "durability": durability_name(opts.durability),
                    "preloadTweets": opts.preload_tweets},
        "graph": {"posters": graph.users, "accounts": graph.accounts, "edges": graph.edges(), "meanFanout": graph.mean_fanout()},
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "redis": "127.0.0.1 only; --save \"\" --appendonly yes --appendfsync everysec",
        "modes": results.iter().map(ModeResult::json).collect::<Vec<_>>(),
    });
    if let Some(d) = opts.out.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    std::fs::write(&opts.out, serde_json::to_string_pretty(&out).expect("json"))
        .map_err(|e| format!("{}: {e}", opts.out.display()))?;
    println!("results written to {}", opts.out.display());
    Ok(())
}
