//! One mode's rig and one phase's run: the processes (Herald, and for the queue mode
//! redis-server and the worker), the graph loaded, the trigger defined, and [`run_phase`],
//! which gives a phase a fresh tracker and marker watch, runs its driver, waits for the drain
//! and measures each process's CPU from the start to the end of the drain.

use crate::fanout::load::{self, Mode, Phase, Target};
use crate::fanout::markers::MarkerWatch;
use crate::fanout::procs;
use crate::fanout::tracker::Tracker;
use crate::fanout::workload::{self, Graph};
use crate::fanout::{app, FanoutOptions};
use crate::harness::server::{Proc, Server, ServerOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most tweets one phase may post.
const PHASE_TWEETS_MAX: usize = 4_000_000;

/// Everything running for one mode; dropping it kills the processes.
pub struct Rig {
    // Fields drop in this order: the worker before the Redis it reads, both before Herald.
    pub worker: Option<Proc>,
    pub redis: Option<Proc>,
    pub server: Server,
    pub target: Arc<Target>,
    /// redis-server's directory.
    _dir: tempfile::TempDir,
}

impl Rig {
    pub async fn start(mode: Mode, opts: &FanoutOptions, graph: &Graph) -> Result<Rig, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let server = Server::start(ServerOptions {
            trigger_workers: Some(opts.workers),
            ..ServerOptions::new(opts.durability)
        })
        .await?;
        let base = server.base();
        let http = app::http_client(load::INFLIGHT_MAX)?;
        graph.load(&http, &base).await?;
        if opts.preload_tweets > 0 {
            let entries = graph
                .preload(&http, &base, opts.preload_tweets, opts.seed)
                .await?;
            eprintln!(
                "herald-bench fanout: {}: preloaded {entries} timeline entries ({} earlier tweets)",
                mode.name(),
                opts.preload_tweets
            );
        }
        let (mut redis, mut worker, mut conn) = (None, None, None);
        if mode == Mode::Queue {
            let rdir = dir.path().join("redis");
            std::fs::create_dir_all(&rdir).map_err(|e| e.to_string())?;
            let (p, url) = procs::spawn_redis(&rdir).await?;
            redis = Some(p);
            conn = Some(app::redis_connection(&url).await?);
            worker = Some(procs::spawn_worker(&base, &url, opts.workers)?);
        }
        if mode == Mode::Triggers {
            let resp = http
                .put(format!("{base}/v1/triggers/fanout"))
                .json(&workload::trigger_def())
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("defining the trigger: HTTP {}", resp.status()));
            }
        }
        let target = Arc::new(Target {
            mode,
            http,
            base,
            redis: conn,
        });
        Ok(Rig {
            server,
            redis,
            worker,
            target,
            _dir: dir,
        })
    }

    pub fn procs(&self) -> Vec<&Proc> {
        let mut v = vec![&self.server.proc];
        v.extend(self.redis.iter());
        v.extend(self.worker.iter());
        v
    }

    pub fn check_alive(&mut self) -> Result<(), String> {
        self.server.proc.check_alive()?;
        if let Some(p) = self.redis.as_mut() {
            p.check_alive()?;
        }
        if let Some(p) = self.worker.as_mut() {
            p.check_alive()?;
        }
        Ok(())
    }
}

/// What one phase left behind.
pub struct Ran {
    pub tracker: Arc<Tracker>,
    pub cpu: Vec<(String, f64)>,
    pub drain_secs: f64,
    pub drained: bool,
    pub errors: u64,
    pub watch_errors: u64,
}

/// Runs one phase: a fresh tracker and marker watch under run id `run`, the driver, then the
/// drain; CPU is measured from the start to the end of the drain.
pub async fn run_phase<F, Fut>(
    rig: &Rig,
    run: &str,
    opts: &FanoutOptions,
    graph: &Graph,
    driver: F,
) -> Result<(Ran, Fut::Output), String>
where
    F: FnOnce(Arc<Phase>) -> Fut,
    Fut: std::future::Future,
{
    let expected = graph.followers.iter().map(Vec::len).collect();
    let tracker = Arc::new(Tracker::new(PHASE_TWEETS_MAX, expected));
    let watch = MarkerWatch::start(&rig.target.base, run, tracker.clone()).await?;
    let phase = Arc::new(Phase {
        target: rig.target.clone(),
        tracker: tracker.clone(),
        watch: Arc::new(watch),
        users: graph.users,
        seed: opts.seed ^ run.bytes().fold(0u64, |h, b| h.wrapping_mul(31) ^ b as u64),
        errors: AtomicU64::new(0),
    });
    let sampler = tracker.start_sampler();
    let cpu0 = procs::snapshot(&rig.procs());
    let out = driver(phase.clone()).await;
    let (drain_secs, drained) = tracker.wait_drained(opts.drain_timeout).await;
    let cpu = procs::used(&cpu0, &procs::snapshot(&rig.procs()));
    tracker.sample();
    sampler.abort();
    let watch_errors = phase.watch.errors.load(Ordering::Relaxed);
    let errors = phase.errors.load(Ordering::Relaxed);
    if let Ok(p) = Arc::try_unwrap(phase) {
        if let Ok(w) = Arc::try_unwrap(p.watch) {
            w.close().await;
        }
    }
    if !drained {
        let c = tracker.counts();
        eprintln!(
            "herald-bench: {run}: not drained after {:.0} s ({} acked, {} markers)",
            drain_secs, c.acked, c.done
        );
    }
    Ok((
        Ran {
            tracker,
            cpu,
            drain_secs,
            drained,
            errors,
            watch_errors,
        },
        out,
    ))
}

/// An open-loop phase on the schedule `steps` ([`run_phase`] with [`load::open_loop`]), then a
/// check that every process survived it. Returns what it left and the schedule's start.
pub async fn run_open_loop(
    rig: &mut Rig,
    run: &str,
    opts: &FanoutOptions,
    graph: &Graph,
    steps: &[load::Step],
) -> Result<(Ran, u64), String> {
    let steps = steps.to_vec();
    let (ran, start_us) = run_phase(rig, run, opts, graph, |p| async move {
        load::open_loop(&p, &steps).await
    })
    .await?;
    rig.check_alive()?;
    Ok((ran, start_us))
}
