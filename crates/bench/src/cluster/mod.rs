//! `herald-bench cluster`: Herald's cluster mode (issue 31) on real Kafka brokers and real
//! `herald serve --cluster` processes on loopback, in three parts, each on fresh nodes:
//!
//! 1. [`writes`]: durable write throughput and ack latency, single node vs one cluster node vs
//!    three (to the primary; to a follower once writes are forwarded);
//! 2. [`failover`]: the time from SIGKILLing the primary to the new primary's first ack, over
//!    repeated kills;
//! 3. [`reads`]: range-query capacity on a follower vs the primary, and live-subscription
//!    latency on a follower vs the primary at a fixed write rate;
//! 4. [`grid`]: notification latency of unindexable subscriptions at a fixed load, single node
//!    vs three nodes vs three nodes with the matching grid (issue 32).
//!
//! Everything shares the machine: nodes, brokers (the JVMs of `scripts/kafka`) and this client.
//! Each figure comes with the CPU each of them used and the machine's load average, and
//! `--node-cpus` puts each node in a cgroup v1 CPU quota to stand for a smaller machine.
//! Writes `cluster.json`, `cluster.csv` and `failover.csv` into `--out-dir`.

pub mod failover;
pub mod grid;
pub mod load;
pub mod nodes;
pub mod reads;
pub mod writes;

use herald_cluster::testing::KafkaCluster;
use serde_json::json;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Writes,
    Failover,
    Reads,
    Grid,
}

#[derive(Debug, Clone)]
pub struct ClusterBenchOptions {
    pub parts: Vec<Part>,
    pub brokers: usize,
    pub node_cpus: Option<f64>,
    pub session_timeout_ms: u64,
    /// Seconds of unmeasured writes to warm the broker's JVM up first (0: none).
    pub warmup_secs: u64,
    pub writes: writes::WriteOptions,
    pub failover: failover::FailoverOptions,
    pub reads: reads::ReadOptions,
    pub grid: grid::GridOptions,
    /// Default: `crates/bench/results/<UTC date>-cluster`.
    pub out_dir: Option<PathBuf>,
}

/// What every part needs: the brokers and how to start nodes.
pub struct Ctx {
    kafka: KafkaCluster,
    pub bootstrap: String,
    /// Prefix of this run's cluster names (topics and groups), unique on the brokers.
    pub run_name: String,
    pub replication_factor: usize,
    pub session_timeout_ms: u64,
    pub node_cpus: Option<f64>,
}

impl Ctx {
    /// The brokers' JVM process ids (from `scripts/kafka`'s pid files).
    pub fn kafka_pids(&self) -> Vec<u32> {
        let Some(dir) = self.kafka.dir() else {
            return Vec::new();
        };
        (0..self.kafka.brokers())
            .filter_map(|i| std::fs::read_to_string(dir.join(format!("broker-{i}.pid"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect()
    }
}

/// `/proc/loadavg`'s three averages.
fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut f = text
        .split_whitespace()
        .filter_map(|x| x.parse::<f64>().ok());
    [
        f.next().unwrap_or(0.0),
        f.next().unwrap_or(0.0),
        f.next().unwrap_or(0.0),
    ]
}

/// `YYYY-MM-DD` and `HH:MM` in UTC now.
fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}", rest / 3600, rest % 3600 / 60),
    )
}

/// The commit of the checkout this was built from, if git says.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A machine is busy when its one-minute load average exceeds its cores at the start of a
/// part, or when other processes used more than a quarter of a core during a measurement.
fn busy(load_at_start: f64, others_cores_max: f64) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    load_at_start > cores || others_cores_max > 0.25
}

/// One line of the CSV.
struct CsvRow {
    part: &'static str,
    row: String,
    mode: String,
    ok: u64,
    errors: u64,
    per_sec: f64,
    p50: f64,
    p99: f64,
    max: f64,
    cpu: load::CpuSplit,
}

const CSV_HEADER: &str = "part,row,mode,ok,errors,per_sec,p50_ms,p99_ms,max_ms,nodes_cores,kafka_cores,client_cores,other_cores";

impl CsvRow {
    fn of(part: &'static str, row: &str, mode: &str, r: &load::LoadResult) -> CsvRow {
        CsvRow {
            part,
            row: row.into(),
            mode: mode.into(),
            ok: r.ok,
            errors: r.errors,
            per_sec: r.per_sec(),
            p50: r.ms(0.5),
            p99: r.ms(0.99),
            max: r.max_ms(),
            cpu: r.cpu,
        }
    }

    fn line(&self) -> String {
        let c = &self.cpu;
        format!(
            "{},\"{}\",{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
            self.part,
            self.row,
            self.mode,
            self.ok,
            self.errors,
            self.per_sec,
            self.p50,
            self.p99,
            self.max,
            c.nodes,
            c.kafka,
            c.client,
            c.others
        )
    }
}

fn print_load_row(label: &str, r: &load::LoadResult) {
    let c = &r.cpu;
    println!(
        "  {:<38} {:>10.0} {:>7} {:>8.2} {:>8.2} {:>8.1}   {:>4.2} {:>4.2} {:>4.2} {:>4.2}",
        label,
        r.per_sec(),
        r.errors,
        r.ms(0.5),
        r.ms(0.99),
        r.max_ms(),
        c.nodes,
        c.kafka,
        c.client,
        c.others
    );
}

fn print_load_header(what: &str) {
    println!(
        "  {:<38} {:>10} {:>7} {:>8} {:>8} {:>8}   {:>4} {:>4} {:>4} {:>4}",
        what, "per s", "errors", "p50 ms", "p99 ms", "max ms", "node", "kafk", "clnt", "othr"
    );
}

pub async fn run(opts: ClusterBenchOptions) -> Result<(), String> {
    let (date, time) = utc_now();
    let out_dir = opts.out_dir.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("results")
            .join(format!("{date}-cluster"))
    });
    let load_start = load_average();
    eprintln!(
        "[cluster: starting {} Kafka broker(s); load average {:.2} {:.2} {:.2}]",
        opts.brokers, load_start[0], load_start[1], load_start[2]
    );
    let brokers = opts.brokers;
    let kafka = tokio::task::spawn_blocking(move || KafkaCluster::try_start(brokers))
        .await
        .map_err(|e| e.to_string())??;
    let ctx = Ctx {
        bootstrap: kafka.bootstrap().to_string(),
        kafka,
        run_name: herald_cluster::testing::unique_name("bench"),
        replication_factor: opts.brokers.min(3),
        session_timeout_ms: opts.session_timeout_ms,
        node_cpus: opts.node_cpus,
    };

    let mut report = json!({
        "benchmark": "cluster", "date": date, "time_utc": time, "commit": commit(),
        "machine": {"cores": std::thread::available_parallelism().map_or(1, |n| n.get())},
        "options": {
            "brokers": opts.brokers, "replication_factor": ctx.replication_factor,
            "node_cpus": opts.node_cpus, "session_timeout_ms": opts.session_timeout_ms,
            "durability": "fsync", "warmup_secs": opts.warmup_secs,
            "writes": {"clients": opts.writes.clients, "secs": opts.writes.secs,
                       "search": opts.writes.search, "search_secs": opts.writes.search_secs,
                       "p99_max_ms": writes::P99_MAX_MS},
            "failover": {"kills": opts.failover.kills, "rate": opts.failover.rate,
                         "settle_ms": opts.failover.settle.as_millis() as u64},
            "reads": {"docs": opts.reads.docs, "clients": opts.reads.clients,
                      "secs": opts.reads.secs, "subs": opts.reads.subs,
                      "sub_rate": opts.reads.sub_rate, "sub_secs": opts.reads.sub_secs},
            "grid": {"subs": opts.grid.subs, "rate": opts.grid.rate, "secs": opts.grid.secs,
                     "rows": opts.grid.rows, "partitions": opts.grid.partitions},
        },
    });
    if opts.warmup_secs > 0 {
        writes::warm_up(&ctx, opts.writes.clients, opts.warmup_secs).await?;
    }
    let mut csv = vec![CSV_HEADER.to_string()];
    let mut failover_csv = vec!["kill,killed,new_primary,failover_ms,rejoin_ms".to_string()];
    let mut any_busy = false;

    for part in &opts.parts {
        let la = load_average();
        let started = std::time::Instant::now();
        match part {
            Part::Writes => {
                let rows = writes::run(&ctx, &opts.writes).await?;
                let others = rows.iter().map(|r| r.closed.cpu.others).fold(0.0, f64::max);
                let b = busy(la[0], others);
                any_busy |= b;
                println!(
                    "1. durable 1 KB PUTs, {} clients, {} s each (load average {:.2} at the start{})",
                    opts.writes.clients,
                    opts.writes.secs,
                    la[0],
                    if b { "; busy machine: preliminary" } else { "" }
                );
                for r in &rows {
                    csv.push(CsvRow::of("writes", &r.name, "closed", &r.closed).line());
                    for (rate, p, _) in &r.probes {
                        csv.push(CsvRow::of("writes", &r.name, &format!("rate{rate}"), p).line());
                    }
                }
                report["writes"] = json!({
                    "load_average_at_start": la, "busy": b,
                    "seconds": started.elapsed().as_secs_f64(),
                    "rows": rows.iter().map(writes::WriteRow::json).collect::<Vec<_>>(),
                });
                print_load_header("configuration");
                for r in &rows {
                    print_load_row(&r.name, &r.closed);
                }
                for r in &rows {
                    if let Some((records, seqs)) = r.log {
                        println!(
                            "  {}: {} Kafka records ({:.0}/s), {:.1} writes per record",
                            r.name,
                            crate::harness::thousands(records),
                            records as f64 / r.closed.secs.max(1e-9),
                            seqs as f64 / records.max(1) as f64
                        );
                    }
                }
                for r in rows.iter().filter(|r| !r.probes.is_empty()) {
                    let at = r
                        .probes
                        .iter()
                        .filter(|(rate, _, pass)| *pass && Some(*rate) == r.capacity)
                        .map(|(_, p, _)| p)
                        .next();
                    match (r.capacity, at) {
                        (Some(c), Some(p)) => println!(
                            "  capacity (p99 <= {} ms, rate held): {}: {}/s, p50 {:.2} / p99 {:.2} ms",
                            writes::P99_MAX_MS,
                            r.name,
                            crate::harness::thousands(c),
                            p.ms(0.5),
                            p.ms(0.99)
                        ),
                        _ => println!("  capacity: {}: no probe passed", r.name),
                    }
                }
            }
            Part::Failover => {
                let f = failover::run(&ctx, &opts.failover).await?;
                let b = busy(la[0], 0.0);
                any_busy |= b;
                let h = f.hist();
                let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
                println!(
                    "2. failover over {} SIGKILLs of the primary, {} writes/s background load (load average {:.2} at the start{})",
                    f.kills.len(),
                    opts.failover.rate,
                    la[0],
                    if b { "; busy machine: preliminary" } else { "" }
                );
                println!(
                    "  kill -> first ack by the new primary: p50 {:.0} / p99 {:.0} / max {:.0} ms (min {:.0}); {} without a new primary within {:?}",
                    ms(0.5),
                    ms(0.99),
                    h.max() as f64 / 1000.0,
                    h.min() as f64 / 1000.0,
                    f.timeouts(),
                    opts.failover.timeout
                );
                println!(
                    "  background writes: {} acknowledged, {} failed (during failovers); part took {:.0} s",
                    f.load_ok, f.load_errors, f.secs
                );
                for (i, k) in f.kills.iter().enumerate() {
                    failover_csv.push(format!(
                        "{},{},{},{},{:.1}",
                        i + 1,
                        k.old,
                        k.new.clone().unwrap_or_default(),
                        k.failover.map_or(String::new(), |d| format!(
                            "{:.1}",
                            d.as_secs_f64() * 1000.0
                        )),
                        k.rejoin.as_secs_f64() * 1000.0
                    ));
                }
                let mut v = f.json();
                v["load_average_at_start"] = json!(la);
                v["busy"] = json!(b);
                report["failover"] = v;
            }
            Part::Grid => {
                let rows = grid::run(&ctx, &opts.grid).await?;
                let b = busy(la[0], 0.0);
                any_busy |= b;
                println!(
                    "4. notification latency, {} unindexable subscriptions on one node, {} writes/s \
                     to the primary for {} s (load average {:.2} at the start{})",
                    opts.grid.subs,
                    opts.grid.rate,
                    opts.grid.secs,
                    la[0],
                    if b { "; busy machine: preliminary" } else { "" }
                );
                println!(
                    "  {:<26} {:>9} {:>11} {:>8} {:>8} {:>8} {:>8} {:>10}",
                    "configuration",
                    "writes/s",
                    "delivered",
                    "p50 ms",
                    "p95 ms",
                    "p99 ms",
                    "max ms",
                    "nodes CPU"
                );
                for r in &rows {
                    println!(
                        "  {:<26} {:>9.0} {:>11} {:>8.2} {:>8.2} {:>8.2} {:>8.1} {:>10.2}",
                        r.name,
                        r.acked as f64 / r.write_secs.max(1e-9),
                        format!("{}/{}", r.delivered, r.acked),
                        r.ms(0.5),
                        r.ms(0.95),
                        r.ms(0.99),
                        r.hist.max() as f64 / 1000.0,
                        r.nodes_cpu
                    );
                    csv.push(format!(
                        "grid,\"{}\",rate{},{},{},{:.1},{:.3},{:.3},{:.3},,,,",
                        r.name,
                        opts.grid.rate,
                        r.delivered,
                        r.acked.saturating_sub(r.delivered),
                        r.acked as f64 / r.write_secs.max(1e-9),
                        r.ms(0.5),
                        r.ms(0.99),
                        r.hist.max() as f64 / 1000.0
                    ));
                }
                report["grid"] = json!({
                    "load_average_at_start": la, "busy": b,
                    "seconds": started.elapsed().as_secs_f64(),
                    "rows": rows.iter().map(grid::GridRow::json).collect::<Vec<_>>(),
                });
            }
            Part::Reads => {
                let r = reads::run(&ctx, &opts.reads).await?;
                let others = r
                    .queries
                    .iter()
                    .map(|(_, q)| q.cpu.others)
                    .fold(0.0, f64::max);
                let b = busy(la[0], others);
                any_busy |= b;
                println!(
                    "3. reads: range queries (100 of {} docs), {} clients, {} s each (load average {:.2} at the start{})",
                    opts.reads.docs,
                    opts.reads.clients,
                    opts.reads.secs,
                    la[0],
                    if b { "; busy machine: preliminary" } else { "" }
                );
                print_load_header("queries on");
                for (name, q) in &r.queries {
                    print_load_row(name, q);
                    csv.push(CsvRow::of("reads", name, "closed", q).line());
                }
                println!(
                    "  subscriptions: {} on each side, {:.0} writes/s to the primary ({} acked, {} failed):",
                    opts.reads.subs,
                    r.writes_acked as f64 / r.write_secs.max(1e-9),
                    r.writes_acked,
                    r.write_errors
                );
                for (i, s) in r.subs.iter().enumerate() {
                    let role = if i == 0 { "follower" } else { "primary" };
                    let q = |x: f64| s.hist.value_at_quantile(x) as f64 / 1000.0;
                    println!(
                        "  {:<38} delivered {}/{}: p50 {:.2} / p99 {:.2} / max {:.1} ms",
                        format!("notifications on the {role} ({})", s.node),
                        s.delivered,
                        r.writes_acked,
                        q(0.5),
                        q(0.99),
                        s.hist.max() as f64 / 1000.0
                    );
                    csv.push(format!(
                        "subscriptions,\"{role} ({})\",rate{},{},{},{:.1},{:.3},{:.3},{:.3},,,,",
                        s.node,
                        opts.reads.sub_rate,
                        s.delivered,
                        r.writes_acked.saturating_sub(s.delivered),
                        r.writes_acked as f64 / r.write_secs.max(1e-9),
                        q(0.5),
                        q(0.99),
                        s.hist.max() as f64 / 1000.0
                    ));
                }
                let mut v = r.json();
                v["load_average_at_start"] = json!(la);
                v["busy"] = json!(b);
                v["seconds"] = json!(started.elapsed().as_secs_f64());
                report["reads"] = v;
            }
        }
    }
    let load_end = load_average();
    report["machine"]["load_average_start"] = json!(load_start);
    report["machine"]["load_average_end"] = json!(load_end);
    report["machine"]["busy"] = json!(any_busy);
    println!(
        "load average {:.2} at the start, {:.2} at the end{}; CPU columns: cores used by the nodes, the Kafka broker(s), this client, everything else",
        load_start[0],
        load_end[0],
        if any_busy { ": the machine was busy, the figures are preliminary" } else { "" }
    );
    drop(ctx);

    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let write = |name: &str, text: String| {
        std::fs::write(out_dir.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    write(
        "cluster.json",
        serde_json::to_string_pretty(&report).expect("json"),
    )?;
    write("cluster.csv", csv.join("\n") + "\n")?;
    if opts.parts.contains(&Part::Failover) {
        write("failover.csv", failover_csv.join("\n") + "\n")?;
    }
    println!("results written to {}", out_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let (d, t) = utc_now();
        assert_eq!(d.len(), 10, "{d}");
        assert!(d.starts_with("20"), "{d}");
        assert_eq!(t.len(), 5, "{t}");
    }

    #[test]
    fn a_machine_is_busy_by_load_or_others() {
        assert!(!busy(0.1, 0.0));
        assert!(busy(100.0, 0.0));
        assert!(busy(0.1, 0.5));
    }
}
