//! Part 1, durable writes: single-document PUTs of ~1 KB from concurrent clients on a single
//! node without `--cluster`, one node with it and three nodes (to the primary, and to a
//! follower when the build forwards writes). Each configuration runs closed loop with
//! `clients` connections (its throughput and ack latency there); with `--search`, the cluster
//! configurations also get the capacity search: the highest open-loop rate held within 5% with
//! ack p99 <= 50 ms and no errors.

use super::load::{self, CheckResp, LoadResult, LoadSpec, MakeReq, Req};
use super::nodes::{NodeConfig, Nodes};
use super::Ctx;
use crate::harness::search::CapacitySearch;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The ack p99 a passing probe of the search stays within (the target).
pub const P99_MAX_MS: f64 = 50.0;
/// A passing probe achieves at least this share of its rate.
const RATE_SHARE_MIN: f64 = 0.95;
/// Connections of an open-loop probe: enough that the rate, not the connections, limits it.
const SEARCH_CONNECTIONS: usize = 256;

#[derive(Debug, Clone)]
pub struct WriteOptions {
    pub clients: usize,
    pub secs: u64,
    pub search: bool,
    pub search_start: u64,
    pub search_max: u64,
    pub search_secs: u64,
    pub bisect_steps: u32,
}

/// One configuration's figures.
pub struct WriteRow {
    pub name: String,
    pub closed: LoadResult,
    /// The search's probes (rate, result, passed) and the capacity found.
    pub probes: Vec<(u64, LoadResult, bool)>,
    pub capacity: Option<u64>,
    /// Over the closed-loop run: Kafka data records the primary published and seqs (writes)
    /// they carried, from `GET /v1/cluster/digest` before and after; `None` on a single node.
    pub log: Option<(u64, u64)>,
}

impl WriteRow {
    pub fn json(&self) -> Value {
        json!({
            "config": self.name,
            "closed_loop": self.closed.json(),
            "kafka_records": self.log.map(|(records, seqs)| json!({
                "records": records, "seqs": seqs,
                "writes_per_record": seqs as f64 / records.max(1) as f64,
                "records_per_sec": records as f64 / self.closed.secs.max(1e-9),
            })),
            "search": (!self.probes.is_empty()).then(|| json!({
                "p99_max_ms": P99_MAX_MS,
                "capacity_per_sec": self.capacity,
                "probes": self.probes.iter().map(|(rate, r, pass)| {
                    let mut v = r.json();
                    v["rate"] = json!(rate);
                    v["passed"] = json!(pass);
                    v
                }).collect::<Vec<_>>(),
            })),
        })
    }
}

fn put_maker(prefix: String) -> MakeReq {
    Arc::new(move |i, rng| Req {
        method: "PUT",
        path: format!("/v1/docs/bench/{prefix}-{i}"),
        body: Some(crate::http::kilobyte_doc(rng, i)),
    })
}

fn acked() -> CheckResp {
    Arc::new(|r| (200..300).contains(&r.status))
}

fn passes(rate: u64, r: &LoadResult) -> bool {
    r.errors == 0 && r.per_sec() >= RATE_SHARE_MIN * rate as f64 && r.ms(0.99) <= P99_MAX_MS
}

/// The primary's replication index and seq (`GET /v1/cluster/digest`; it reads the whole
/// store, so only between measurements).
async fn log_position(client: &reqwest::Client, base: &str) -> Option<(u64, u64)> {
    let v: Value = client
        .get(format!("{base}/v1/cluster/digest"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    Some((v["index"].as_u64()?, v["seq"].as_u64()?))
}

/// Runs one configuration against `target` of `nodes` (`primary`: where the log position is
/// read; `None` for a single node).
async fn measure(
    ctx: &Ctx,
    opts: &WriteOptions,
    name: &str,
    nodes: &mut Nodes,
    (target, primary): (usize, Option<usize>),
    search: bool,
) -> Result<WriteRow, String> {
    let client = crate::harness::http_client();
    let primary_base = primary.map(|p| nodes.nodes[p].base());
    let log_before = match &primary_base {
        Some(b) => log_position(&client, b).await,
        None => None,
    };
    let addr = nodes.nodes[target].addr;
    let pids = nodes.pids();
    let kafka = ctx.kafka_pids();
    let tag = name.split_whitespace().collect::<Vec<_>>().join("_");
    eprintln!(
        "[writes: {name}: {} clients, {} s]",
        opts.clients, opts.secs
    );
    let closed = load::run(
        LoadSpec {
            targets: vec![addr],
            connections: opts.clients,
            rate: None,
            secs: opts.secs as f64,
            make: put_maker(format!("{tag}-closed")),
            check: acked(),
        },
        &pids,
        &kafka,
    )
    .await;
    nodes.check_alive()?;
    let log_after = match &primary_base {
        Some(b) => log_position(&client, b).await,
        None => None,
    };
    let log = match (log_before, log_after) {
        (Some((i0, s0)), Some((i1, s1))) => Some((i1.saturating_sub(i0), s1.saturating_sub(s0))),
        _ => None,
    };
    let mut row = WriteRow {
        name: name.into(),
        closed,
        probes: Vec::new(),
        capacity: None,
        log,
    };
    if search {
        let mut s = CapacitySearch::new(opts.search_start, opts.search_max, opts.bisect_steps);
        while let Some(rate) = s.next() {
            let r = load::run(
                LoadSpec {
                    targets: vec![addr],
                    connections: SEARCH_CONNECTIONS,
                    rate: Some(rate),
                    secs: opts.search_secs as f64,
                    make: put_maker(format!("{tag}-r{rate}")),
                    check: acked(),
                },
                &pids,
                &kafka,
            )
            .await;
            nodes.check_alive()?;
            let pass = passes(rate, &r);
            eprintln!(
                "[writes: {name}: {rate}/s -> {:.0}/s, p99 {:.1} ms, {} errors: {}]",
                r.per_sec(),
                r.ms(0.99),
                r.errors,
                if pass { "pass" } else { "fail" }
            );
            s.record(rate, pass);
            row.probes.push((rate, r, pass));
        }
        row.capacity = s.capacity();
    }
    Ok(row)
}

pub async fn run(ctx: &Ctx, opts: &WriteOptions) -> Result<Vec<WriteRow>, String> {
    let client = crate::harness::http_client();
    let mut rows = Vec::new();

    let mut single = Nodes::start(1, ctx.node_config(None)).await?;
    rows.push(
        measure(
            ctx,
            opts,
            "single node, no --cluster",
            &mut single,
            (0, None),
            false,
        )
        .await?,
    );
    drop(single);

    let mut one = Nodes::start(1, ctx.node_config(Some("w1"))).await?;
    let p = one.primary(&client, Duration::from_secs(60)).await?;
    rows.push(
        measure(
            ctx,
            opts,
            "1 node --cluster",
            &mut one,
            (p, Some(p)),
            opts.search,
        )
        .await?,
    );
    drop(one);

    let mut three = Nodes::start(3, ctx.node_config(Some("w3"))).await?;
    let p = three.primary(&client, Duration::from_secs(60)).await?;
    rows.push(
        measure(
            ctx,
            opts,
            "3 nodes, to the primary",
            &mut three,
            (p, Some(p)),
            opts.search,
        )
        .await?,
    );
    let f = (p + 1) % 3;
    if forwards(&client, &three, f).await {
        rows.push(
            measure(
                ctx,
                opts,
                "3 nodes, to a follower",
                &mut three,
                (f, Some(p)),
                opts.search,
            )
            .await?,
        );
    } else {
        eprintln!("[writes: followers do not forward writes in this build: no follower row]");
    }
    Ok(rows)
}

/// Writes for `secs` through a throwaway one-node cluster, unmeasured: a fresh broker's JVM
/// spends its first tens of seconds compiling (the C1/C2 compiler threads took a quarter of
/// a core in a first measured run), which would be charged to whichever part runs first.
pub async fn warm_up(ctx: &Ctx, clients: usize, secs: u64) -> Result<(), String> {
    let client = crate::harness::http_client();
    let mut one = Nodes::start(1, ctx.node_config(Some("warmup"))).await?;
    let p = one.primary(&client, Duration::from_secs(60)).await?;
    eprintln!("[warm-up: {clients} clients, {secs} s on a one-node cluster, not measured]");
    let r = load::run(
        LoadSpec {
            targets: vec![one.nodes[p].addr],
            connections: clients,
            rate: None,
            secs: secs as f64,
            make: put_maker("warmup".into()),
            check: acked(),
        },
        &one.pids(),
        &ctx.kafka_pids(),
    )
    .await;
    one.check_alive()?;
    eprintln!(
        "[warm-up: {:.0} writes/s, broker {:.2} cores]",
        r.per_sec(),
        r.cpu.kafka
    );
    Ok(())
}

/// Whether follower `f` acknowledges a write (forwarding it to the primary).
pub async fn forwards(client: &reqwest::Client, nodes: &Nodes, f: usize) -> bool {
    let url = format!("{}/v1/docs/benchprobe/forwarded", nodes.nodes[f].base());
    matches!(
        client.put(url).json(&json!({"probe": true})).timeout(Duration::from_secs(5)).send().await,
        Ok(r) if r.status().is_success()
    )
}

impl Ctx {
    /// The node configuration of a part: a single node without `--cluster` when `cluster` is
    /// `None`, else a cluster named after this run and `cluster`.
    /// Each cluster gets a name of its own (a part may run more than once), so no cluster ever
    /// meets another's topics.
    pub fn node_config(&self, cluster: Option<&str>) -> NodeConfig {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        NodeConfig {
            cluster: cluster.map(|c| (self.bootstrap.clone(), format!("{}-{c}{n}", self.run_name))),
            replication_factor: self.replication_factor,
            session_timeout_ms: self.session_timeout_ms,
            cpus: self.node_cpus,
            grid: None,
        }
    }
}
