//! The request load of the cluster benchmark and what it costs: `connections` keep-alive
//! connections spread over target nodes, closed loop (each sends its next request as soon as
//! the last is answered) or open loop at a rate (request i is due at start + i / rate; its
//! latency runs from when it was due, so a server that falls behind shows it), and the CPU the
//! nodes, the Kafka brokers, this client and everything else used meanwhile.

use crate::harness::cpu;
use crate::harness::loadgen::{Conn, Response};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One request: method, path, body.
pub struct Req {
    pub method: &'static str,
    pub path: String,
    pub body: Option<Vec<u8>>,
}

pub type MakeReq = Arc<dyn Fn(u64, &mut fastrand::Rng) -> Req + Send + Sync>;
pub type CheckResp = Arc<dyn Fn(&Response) -> bool + Send + Sync>;

/// What a load run did.
pub struct LoadResult {
    pub ok: u64,
    pub errors: u64,
    pub secs: f64,
    /// Latency in microseconds (from due time in open loop, from send in closed loop).
    pub hist: Histogram<u64>,
    /// The slowest request of each second of the run (by when it was due), in microseconds:
    /// where a tail comes from (one stall, or every second).
    pub max_per_sec: Vec<u64>,
    pub cpu: CpuSplit,
}

impl LoadResult {
    pub fn per_sec(&self) -> f64 {
        self.ok as f64 / self.secs.max(1e-9)
    }

    pub fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn max_ms(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    pub fn json(&self) -> Value {
        json!({
            "ok": self.ok, "errors": self.errors, "seconds": self.secs,
            "per_sec": self.per_sec(),
            "latency_ms": {"p50": self.ms(0.5), "p99": self.ms(0.99), "max": self.max_ms(),
                           "n": self.hist.len()},
            "cpu_cores": self.cpu.json(),
            "max_ms_per_second": self.max_per_sec.iter().map(|us| *us as f64 / 1000.0).collect::<Vec<_>>(),
            "cpu_us_per_op": {"nodes": self.cpu.nodes * self.secs * 1e6 / self.ok.max(1) as f64,
                              "kafka": self.cpu.kafka * self.secs * 1e6 / self.ok.max(1) as f64},
        })
    }
}

/// CPU use over a run, in cores (1.0 = one core busy the whole time).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSplit {
    pub nodes: f64,
    pub kafka: f64,
    pub client: f64,
    /// Everything else on the machine (other engineers' builds and tests).
    pub others: f64,
}

impl CpuSplit {
    pub fn json(&self) -> Value {
        json!({"nodes": self.nodes, "kafka": self.kafka, "client": self.client, "others": self.others})
    }
}

fn pid_cpu(pid: u32) -> f64 {
    cpu::cpu_secs(&format!("/proc/{pid}/stat")).unwrap_or(0.0)
}

/// CPU counters at one instant: of the given node and broker processes, this process, the
/// machine.
pub struct CpuMark {
    sample: cpu::CpuSample,
    nodes: f64,
    kafka: f64,
}

impl CpuMark {
    pub fn now(node_pids: &[u32], kafka_pids: &[u32]) -> CpuMark {
        CpuMark {
            sample: cpu::sample(None),
            nodes: node_pids.iter().map(|p| pid_cpu(*p)).sum(),
            kafka: kafka_pids.iter().map(|p| pid_cpu(*p)).sum(),
        }
    }

    /// Use from `self` to `later`. A node killed in between makes `nodes` an undercount.
    pub fn until(&self, later: &CpuMark) -> CpuSplit {
        let u = cpu::cpu_between(&self.sample, &later.sample);
        let secs = later
            .sample
            .at
            .duration_since(self.sample.at)
            .as_secs_f64()
            .max(1e-3);
        let nodes = (later.nodes - self.nodes).max(0.0) / secs;
        let kafka = (later.kafka - self.kafka).max(0.0) / secs;
        CpuSplit {
            nodes,
            kafka,
            client: u.client / 100.0,
            others: (u.others / 100.0 - nodes - kafka).max(0.0),
        }
    }
}

/// How to drive a load.
pub struct LoadSpec {
    pub targets: Vec<SocketAddr>,
    pub connections: usize,
    /// Requests per second over all connections; `None`: closed loop.
    pub rate: Option<u64>,
    pub secs: f64,
    pub make: MakeReq,
    pub check: CheckResp,
}

/// Runs the load; `node_pids` and `kafka_pids` are charged the CPU they use meanwhile.
pub async fn run(spec: LoadSpec, node_pids: &[u32], kafka_pids: &[u32]) -> LoadResult {
    let before = CpuMark::now(node_pids, kafka_pids);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(spec.secs);
    let next = Arc::new(AtomicU64::new(0));
    let reported = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..spec.connections {
        let addr = spec.targets[c % spec.targets.len()];
        let (make, check, next, reported) = (
            spec.make.clone(),
            spec.check.clone(),
            next.clone(),
            reported.clone(),
        );
        let rate = spec.rate;
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
            let mut rng = fastrand::Rng::with_seed(c as u64 * 1_000_003 + 17);
            let mut conn = Conn::new(addr);
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut max_per_sec: Vec<u64> = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let due = match rate {
                    Some(r) => start + Duration::from_secs_f64(i as f64 / r as f64),
                    None => Instant::now(),
                };
                if due >= deadline || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                let req = make(i, &mut rng);
                let result = conn
                    .request(req.method, &req.path, req.body.as_deref())
                    .await;
                let us = due.elapsed().as_micros().max(1) as u64;
                let _ = hist.record(us);
                let second = due.saturating_duration_since(start).as_secs() as usize;
                if max_per_sec.len() <= second {
                    max_per_sec.resize(second + 1, 0);
                }
                max_per_sec[second] = max_per_sec[second].max(us);
                let good = matches!(&result, Ok(r) if check(r));
                if good {
                    ok += 1;
                    continue;
                }
                errors += 1;
                // The first few failures say why; the count says how many.
                if reported.fetch_add(1, Ordering::Relaxed) < 3 {
                    match result {
                        Ok(r) => eprintln!(
                            "{} {} on {addr}: {} {}",
                            req.method,
                            req.path,
                            r.status,
                            String::from_utf8_lossy(&r.body)
                        ),
                        Err(e) => eprintln!("{} {} on {addr}: {e}", req.method, req.path),
                    }
                }
            }
            (hist, ok, errors, max_per_sec)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
    let (mut ok, mut errors) = (0, 0);
    let mut max_per_sec: Vec<u64> = Vec::new();
    for t in tasks {
        let (h, o, e, m) = t.await.expect("load task");
        hist.add(h).expect("same bounds");
        if max_per_sec.len() < m.len() {
            max_per_sec.resize(m.len(), 0);
        }
        for (a, b) in max_per_sec.iter_mut().zip(m) {
            *a = (*a).max(b);
        }
        ok += o;
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    let after = CpuMark::now(node_pids, kafka_pids);
    LoadResult {
        ok,
        errors,
        secs,
        hist,
        max_per_sec,
        cpu: before.until(&after),
    }
}
