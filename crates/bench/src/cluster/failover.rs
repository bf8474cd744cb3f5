//! Part 2, failover: three nodes under a light open-loop write load to the primary; `kills`
//! times, SIGKILL the primary and measure until the first write acknowledged after the kill
//! (probes to every surviving node every `PROBE_EVERY`, each write sent after the kill, so the
//! ack comes from the new primary, directly or through a forwarding follower); then restart the
//! killed node on its data and wait until it is back (a caught-up follower in `GET
//! /v1/cluster`, or a fixed settle time on a build without it) before the next kill.

use super::nodes::Nodes;
use super::Ctx;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a probe retries a write on a surviving node.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// How long one probe write may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct FailoverOptions {
    pub kills: u32,
    /// Writes/s of the background load.
    pub rate: u64,
    /// Longest wait for a new primary's first ack.
    pub timeout: Duration,
    /// Wait after a restarted node is back before the next kill.
    pub settle: Duration,
}

pub struct Kill {
    pub old: String,
    pub new: Option<String>,
    /// Kill to first ack after it; `None`: none within the timeout.
    pub failover: Option<Duration>,
    /// Restart to caught-up follower.
    pub rejoin: Duration,
}

pub struct FailoverResult {
    pub kills: Vec<Kill>,
    pub load_ok: u64,
    pub load_errors: u64,
    pub secs: f64,
}

impl FailoverResult {
    pub fn hist(&self) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
        for k in &self.kills {
            if let Some(d) = k.failover {
                let _ = h.record(d.as_micros().max(1) as u64);
            }
        }
        h
    }

    pub fn timeouts(&self) -> usize {
        self.kills.iter().filter(|k| k.failover.is_none()).count()
    }

    pub fn json(&self) -> Value {
        let h = self.hist();
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        json!({
            "kills": self.kills.len(), "timeouts": self.timeouts(),
            "failover_ms": {"p50": ms(0.5), "p99": ms(0.99), "max": h.max() as f64 / 1000.0,
                            "min": h.min() as f64 / 1000.0, "n": h.len()},
            "background_load": {"ok": self.load_ok, "errors": self.load_errors},
            "seconds": self.secs,
            "each": self.kills.iter().map(|k| json!({
                "killed": k.old, "new_primary": k.new,
                "failover_ms": k.failover.map(|d| d.as_secs_f64() * 1000.0),
                "rejoin_ms": k.rejoin.as_secs_f64() * 1000.0,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The first write acknowledged by any of `targets` after now: (when, which target).
async fn first_ack(
    client: &reqwest::Client,
    targets: Vec<(usize, String)>,
    kill: u32,
    timeout: Duration,
) -> Option<(Instant, usize)> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Instant, usize)>(targets.len());
    let mut tasks = Vec::new();
    for (i, base) in targets {
        let (client, tx) = (client.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            for attempt in 0u64.. {
                let url = format!("{base}/v1/docs/failover/k{kill}-n{i}-{attempt}");
                let sent = client
                    .put(url)
                    .json(&json!({"kill": kill, "attempt": attempt}))
                    .timeout(PROBE_TIMEOUT)
                    .send()
                    .await;
                if matches!(&sent, Ok(r) if r.status().is_success()) {
                    let _ = tx.send((Instant::now(), i)).await;
                    return;
                }
                tokio::time::sleep(PROBE_EVERY).await;
            }
        }));
    }
    drop(tx);
    let first = tokio::time::timeout(timeout, rx.recv())
        .await
        .ok()
        .flatten();
    for t in tasks {
        t.abort();
    }
    first
}

pub async fn run(ctx: &Ctx, opts: &FailoverOptions) -> Result<FailoverResult, String> {
    let client = crate::harness::http_client();
    let mut nodes = Nodes::start(3, ctx.node_config(Some("failover"))).await?;
    let mut primary = nodes.primary(&client, Duration::from_secs(60)).await?;
    let start = Instant::now();

    // The background load: `rate` writes/s to whichever node is primary now.
    let target = Arc::new(AtomicUsize::new(primary));
    let (ok, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let bases: Vec<String> = nodes.nodes.iter().map(|n| n.base()).collect();
    let load = {
        let (client, target, ok, errors, bases) = (
            client.clone(),
            target.clone(),
            ok.clone(),
            errors.clone(),
            bases.clone(),
        );
        let every = Duration::from_secs_f64(1.0 / opts.rate.max(1) as f64);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            for k in 0u64.. {
                tick.tick().await;
                let base = &bases[target.load(Ordering::Relaxed)];
                let (client, ok, errors) = (client.clone(), ok.clone(), errors.clone());
                let url = format!("{base}/v1/docs/load/l{k}");
                tokio::spawn(async move {
                    let r = client
                        .put(url)
                        .json(&json!({"k": k}))
                        .timeout(PROBE_TIMEOUT)
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().is_success() => ok.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                });
            }
        })
    };

    let mut kills = Vec::new();
    let result: Result<(), String> = async {
        // Let the load run a moment before the first kill.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for kill in 0..opts.kills {
            let old = nodes.nodes[primary].id.clone();
            let t0 = Instant::now();
            nodes.nodes[primary].kill();
            let survivors: Vec<(usize, String)> = (0..nodes.nodes.len())
                .filter(|i| nodes.nodes[*i].running())
                .map(|i| (i, bases[i].clone()))
                .collect();
            let acked = first_ack(&client, survivors, kill, opts.timeout).await;
            let failover = acked.map(|(t, _)| t.duration_since(t0));
            let new = match acked {
                Some(_) => Some(nodes.primary(&client, Duration::from_secs(30)).await?),
                None => None,
            };
            eprintln!(
                "[failover {}/{}: killed {old}; {}]",
                kill + 1,
                opts.kills,
                match (failover, new) {
                    (Some(d), Some(n)) => format!(
                        "{} acknowledged after {:.0} ms",
                        nodes.nodes[n].id,
                        d.as_secs_f64() * 1000.0
                    ),
                    _ => format!("no ack within {:?}", opts.timeout),
                }
            );
            if let Some(n) = new {
                target.store(n, Ordering::Relaxed);
            }
            let t1 = Instant::now();
            let killed = primary;
            nodes.nodes[killed].start().await?;
            nodes
                .rejoined(&client, killed, Duration::from_secs(60), opts.settle)
                .await?;
            let rejoin = t1.elapsed();
            kills.push(Kill {
                old,
                new: new.map(|n| nodes.nodes[n].id.clone()),
                failover,
                rejoin,
            });
            nodes.check_alive()?;
            tokio::time::sleep(opts.settle).await;
            primary = match new {
                Some(n) => n,
                None => nodes.primary(&client, Duration::from_secs(60)).await?,
            };
            target.store(primary, Ordering::Relaxed);
        }
        Ok(())
    }
    .await;
    load.abort();
    result?;
    Ok(FailoverResult {
        kills,
        load_ok: ok.load(Ordering::Relaxed),
        load_errors: errors.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
    })
}
