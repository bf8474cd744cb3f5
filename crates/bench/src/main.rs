//! The `herald-bench` command: one subcommand per workload (see `lib.rs`), each printing its
//! table and writing JSON (and charts) under `target/bench-results/` unless `--out` says where.

use clap::{Parser, Subcommand, ValueEnum};
use herald::{CACHE_MIB_MAX, CACHE_MIB_MIN};
use herald_db::Durability;
use std::path::PathBuf;
use std::time::Duration;

/// The same allocator as the `herald` binary, so the in-process `insert-load` and the client
/// side of every workload cost what they would next to the server.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "herald-bench",
    about = "Herald's benchmarks: each starts its own `herald serve` (or, insert-load, the db layer), prints a table and writes JSON"
)]
struct Cli {
    /// The `herald` binary to start (default: `herald` next to this executable, built first
    /// when run by cargo); also `HERALD_BIN`.
    #[arg(long, global = true)]
    herald: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    /// Acknowledge a write only after its group commit is fsynced (default).
    Fsync,
    /// Acknowledge before fsync: a crash may lose about the last second of acknowledged writes.
    Nosync,
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkloadArg {
    Range,
    Regex,
    Suffix,
    Scan,
    /// Live aggregations: a per-room count and sum per subscription.
    Count,
}

#[derive(Clone, Copy, ValueEnum)]
enum WriterArg {
    Put,
    Stream,
}

#[derive(Clone, Copy, ValueEnum)]
enum SeriesArg {
    /// Active queries at 1,000 writes/s.
    Queries,
    /// Writes/s with 1,000 active queries.
    Writes,
}

#[derive(Clone, Copy, ValueEnum)]
enum ViaArg {
    /// WebSocket write requests (`{"op":"write"}` on /v1/ws), one per batch.
    Ws,
    /// POST /v1/bulk (NDJSON), one request per batch.
    Bulk,
    /// One streamed POST /v1/bulk per generator for the whole run (rockbench only).
    Stream,
}

#[derive(Clone, Copy, ValueEnum)]
enum ReaderArg {
    /// No filter, sorted {ts: -1}, limit 1: as users write it.
    Sorted,
    /// A range on ts ({ts: {$gte: 0}}) with the sort.
    Filtered,
    /// Pull with POST /v1/aggregate [{$group: {_id: null, ts: {$max: "$ts"}}}].
    Group,
}

#[derive(Clone, Copy, ValueEnum)]
enum PartArg {
    /// Durable write throughput and ack latency: single node, 1 cluster node, 3 nodes.
    Writes,
    /// Time from SIGKILLing the primary to the new primary's first ack, over repeated kills.
    Failover,
    /// Range queries on a follower vs the primary; subscription latency on each.
    Reads,
    /// Notification latency of unindexable subscriptions: single node, 3 nodes, 3 nodes with
    /// the matching grid.
    Grid,
}

#[derive(Clone, Copy, ValueEnum)]
enum PatternArg {
    Upserts,
    Copy,
    ReadsRepeat,
    ReadsUnique,
}

fn via_of(v: ViaArg) -> herald_bench::ingest::client::Via {
    use herald_bench::ingest::client::Via;
    match v {
        ViaArg::Ws => Via::Ws,
        ViaArg::Bulk => Via::Bulk,
        ViaArg::Stream => Via::Stream,
    }
}

fn durability_of(d: DurabilityArg) -> Durability {
    match d {
        DurabilityArg::Fsync => Durability::Fsync,
        DurabilityArg::Nosync => Durability::NoSync,
    }
}

#[derive(Subcommand)]
enum Command {
    /// Live-query notification latency under the InvaliDB workload: explicit runs, or with
    /// `--search` the capacity of each workload (p99 <= 30 ms) and latency at 80% of it.
    Live {
        /// Workloads (comma-separated): `range` (InvaliDB's indexable range queries), `regex`
        /// (anchored `$regex` prefixes), `suffix` (unanchored `$regex` suffixes, `":0000042$"`),
        /// `scan` (`$or` filters no structure indexes: every write tested against every query).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "range")]
        workload: Vec<WorkloadArg>,
        /// Explicit mode: active queries per run (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        queries: Vec<u64>,
        /// Explicit mode: writes per second per run (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1000")]
        rates: Vec<u64>,
        /// Seconds of writing per run (each probe of a search too).
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Durability of the server the benchmark starts.
        #[arg(long, value_enum, default_value = "fsync")]
        durability: DurabilityArg,
        /// How writes are sent: `put` (one HTTP PUT per document, up to 64 in flight) or
        /// `stream` (one streamed NDJSON `POST /v1/bulk`, a line per document, each its own
        /// transaction).
        #[arg(long, value_enum, default_value = "put")]
        writer: WriterArg,
        /// Search each workload's capacity instead of explicit runs: the most active queries
        /// at 1,000 writes/s and the most writes/s with 1,000 queries, with p99 <= 30 ms, the
        /// write rate held within 5% and every notification delivered; then a run at 80%.
        #[arg(long)]
        search: bool,
        /// Search mode: series to search (comma-separated): `queries`, `writes`.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "queries,writes"
        )]
        series: Vec<SeriesArg>,
        /// Search mode: bound of the queries series.
        #[arg(long, default_value_t = 400_000)]
        max_queries: u64,
        /// Search mode: bound of the writes series (writes/s).
        #[arg(long, default_value_t = 40_000)]
        max_rate: u64,
        /// Search mode: first probe of the queries series (default: 25000 for range, 1000 for
        /// regex).
        #[arg(long)]
        start_queries: Option<u64>,
        /// Search mode: first probe of the writes series (writes/s).
        #[arg(long, default_value_t = 1_000)]
        start_rate: u64,
        /// Search mode: bisection steps between the last pass and the first fail.
        #[arg(long, default_value_t = 4)]
        bisect_steps: u32,
        /// Search mode: a failing probe is run again up to this many times and passes if any
        /// run does. A saturated server fails every time; one stall of the shared machine
        /// (tens of ms, enough to fail a 30 ms p99 over a few seconds) fails one run.
        #[arg(long, default_value_t = 1)]
        retries: u32,
        /// Search mode: seconds of writing in the run at 80% of capacity.
        #[arg(long, default_value_t = 30)]
        final_secs: u64,
        /// The server's live-query matching grid: rows (query partitions); passed to `herald
        /// serve --grid-rows` (with --grid-partitions, default 1). Default: the server's.
        #[arg(long)]
        grid_rows: Option<u32>,
        /// The server's matching grid: write partitions (`herald serve --grid-partitions`).
        #[arg(long)]
        grid_partitions: Option<u32>,
        /// A run passes with p99 notification latency up to this many milliseconds.
        #[arg(long, default_value_t = 30.0)]
        p99_max_ms: f64,
        /// Limit each matching cell thread to this many cores (e.g. 0.25): as root, each goes
        /// into its own cgroup v1 cpu group (CFS quota over a 10 ms period), removed after the
        /// run. Needs --grid-rows or --grid-partitions.
        #[arg(long)]
        cell_cpu: Option<f64>,
        /// JSON output (default: target/bench-results/live.json, or
        /// live-search-<durability>.json with --search); charts are written next to it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The matching grid's scaling chart and table from the JSON of `live --search` runs with
    /// different --grid-rows/--grid-partitions in one directory.
    LiveScaling {
        /// The directory of the reports; the charts and `grid-scaling.md` are written there.
        dir: PathBuf,
    },
    /// Tweet fan-out three ways: synchronous, external queue (Redis + worker), Herald triggers.
    Fanout {
        /// Modes to run, in order (comma-separated): sync, queue, triggers.
        #[arg(long, value_delimiter = ',', default_value = "sync,queue,triggers")]
        modes: Vec<String>,
        /// Posting users u0..u{N-1}.
        #[arg(long, default_value_t = 1000)]
        users: usize,
        /// Followers of u0; user i has about followers_max / (i + 1).
        #[arg(long, default_value_t = 5000)]
        followers_max: usize,
        /// Seconds of the 80% load phase.
        #[arg(long, default_value_t = 15.0)]
        secs: f64,
        /// Saturation search: the first probe's rate (tweets/s); probes double from it while
        /// the fan-outs keep up, then bisect.
        #[arg(long, default_value_t = 100.0)]
        search_start: f64,
        /// Saturation search: no probe above this rate.
        #[arg(long, default_value_t = 5000.0)]
        search_max: f64,
        /// Saturation search: seconds of each probe.
        #[arg(long, default_value_t = 10.0)]
        search_secs: f64,
        /// Saturation search: bisections after the first probe that fell behind.
        #[arg(long, default_value_t = 3)]
        bisect_steps: u32,
        /// Seconds at 50%, 200% and 50% of the sustained rate in the burst phase.
        #[arg(long, value_delimiter = ',', num_args = 1, default_value = "10,30,30")]
        burst_secs: Vec<f64>,
        /// Fan-out concurrency: the queue worker's tasks and Herald's --trigger-workers.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Tweets/s the 80% and burst phases are relative to, instead of searching for each
        /// mode's sustained rate.
        #[arg(long)]
        rate: Option<f64>,
        /// Width of the burst table's intervals, in seconds.
        #[arg(long, default_value_t = 2.0)]
        interval_secs: f64,
        /// Longest wait for a phase's backlog to drain, in seconds.
        #[arg(long, default_value_t = 600)]
        drain_timeout_secs: u64,
        /// Earlier tweets whose timeline entries are bulk-loaded first (so the phases do not
        /// run on an empty, unusually cheap database).
        #[arg(long, default_value_t = 20_000)]
        preload_tweets: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Durability of the Herald server: `fsync` (default) or `nosync` (acknowledged once in
        /// the log file, synced within a second, like Redis's `appendfsync everysec`).
        #[arg(long, value_enum, default_value = "fsync")]
        durability: DurabilityArg,
        #[arg(long, default_value = "target/bench-results/fanout.json")]
        out: PathBuf,
    },
    /// The external-queue worker of `fanout` (started by it).
    #[command(hide = true)]
    FanoutWorker {
        /// Herald's base URL (http://127.0.0.1:PORT).
        #[arg(long)]
        url: String,
        /// Redis URL (redis://127.0.0.1:PORT/).
        #[arg(long)]
        redis: String,
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
    /// RockBench data latency: ~1 KB events written at a fixed or bursty rate while a pull
    /// query and a live subscription measure how soon the newest event is visible.
    Rockbench {
        /// Events per second over all generators (with --search: the first probe).
        #[arg(long, default_value_t = 5_000)]
        rate: u64,
        /// Seconds of writing (per probe with --search).
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Percent of --rate per equal segment of the run (comma-separated): 100 is a fixed
        /// rate, 50,200,50 a burst.
        #[arg(long, value_delimiter = ',', default_value = "100")]
        shape: Vec<f64>,
        /// Share of events (0 to 1) that overwrite an earlier event.
        #[arg(long, default_value_t = 0.0)]
        overwrite: f64,
        /// Share of events (0 to 1) with a sparse or changed schema.
        #[arg(long, default_value_t = 0.0)]
        sparse: f64,
        /// Generator instances, each with its own connection and an equal share of the rate.
        #[arg(long, default_value_t = 2)]
        generators: u32,
        /// How generators write: `ws` (WebSocket write requests), `bulk` (a POST /v1/bulk per
        /// batch) or `stream` (one streamed POST /v1/bulk per generator).
        #[arg(long, value_enum, default_value = "ws")]
        via: ViaArg,
        /// A generator sends what is due every this many milliseconds.
        #[arg(long, default_value_t = 10)]
        batch_ms: u64,
        /// Period of the pull evaluator's query for the newest event time.
        #[arg(long, default_value_t = 100)]
        pull_ms: u64,
        /// How the evaluators ask for the newest event time.
        #[arg(long, value_enum, default_value = "sorted")]
        reader: ReaderArg,
        /// Fields exempted from automatic indexing (comma-separated; empty: none).
        #[arg(long, value_delimiter = ',', default_value = "text")]
        exempt: Vec<String>,
        #[arg(long, value_enum, default_value = "fsync")]
        durability: DurabilityArg,
        /// The server's redb cache (`herald serve --cache-mib`); default: the server's default.
        #[arg(long, value_parser = clap::value_parser!(u64).range(CACHE_MIB_MIN..=CACHE_MIB_MAX))]
        cache_mib: Option<u64>,
        /// Find the highest rate with pull p95 <= 100 ms, then <= 1 s.
        #[arg(long)]
        search: bool,
        /// Search: highest rate tried.
        #[arg(long, default_value_t = 100_000)]
        max_rate: u64,
        /// Search: bisection steps between the last pass and the first fail.
        #[arg(long, default_value_t = 3)]
        bisect_steps: u32,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// JSON output (default: target/bench-results/rockbench.json); charts next to it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Stream-processing patterns: windowed keyed upserts, a sequential bulk copy, point reads
    /// with and without repeats; each with and without live subscribers.
    Stream {
        /// Patterns (comma-separated): upserts, copy, reads-repeat, reads-unique.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "upserts,copy,reads-repeat,reads-unique"
        )]
        patterns: Vec<PatternArg>,
        /// Live subscriptions per run (comma-separated; one fresh server per value).
        #[arg(long, value_delimiter = ',', default_value = "0,8")]
        subscribers: Vec<u32>,
        /// Keyed cells of the upsert pattern (one upsert per cell per window).
        #[arg(long, default_value_t = 10_000)]
        cells: u64,
        /// Windows (one burst each, one per second) of the upsert pattern.
        #[arg(long, default_value_t = 10)]
        windows: u32,
        /// Documents of the source collection (copied; read by the read patterns).
        #[arg(long, default_value_t = 50_000)]
        source_docs: u64,
        /// Hot documents of the reads-repeat pattern.
        #[arg(long, default_value_t = 100)]
        hot_docs: u64,
        /// Longest time of each read pattern, in seconds.
        #[arg(long, default_value_t = 5)]
        read_secs: u64,
        /// Concurrent readers.
        #[arg(long, default_value_t = 16)]
        clients: u32,
        #[arg(long, value_enum, default_value = "ws")]
        via: ViaArg,
        /// Each batch of 500 writes is one transaction (needs --via ws).
        #[arg(long)]
        atomic: bool,
        #[arg(long, value_enum, default_value = "fsync")]
        durability: DurabilityArg,
        /// The server's redb cache (`herald serve --cache-mib`); default: the server's default.
        #[arg(long, value_parser = clap::value_parser!(u64).range(CACHE_MIB_MIN..=CACHE_MIB_MAX))]
        cache_mib: Option<u64>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// JSON output (default: target/bench-results/stream.json); charts next to it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Cluster mode on real Kafka brokers: durable writes (single node vs 1 and 3 cluster
    /// nodes), failover time over repeated SIGKILLs of the primary, reads and subscriptions on
    /// a follower vs the primary. Needs `herald` built with `--features cluster` (done first
    /// when run by cargo), java and mvn (scripts/kafka installs the broker).
    Cluster {
        /// Parts to run, in order (comma-separated): writes, failover, reads, grid.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "writes,failover,reads"
        )]
        parts: Vec<PartArg>,
        /// Kafka brokers to start (1 or 3); the topics' replication factor is the same.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3))]
        brokers: u64,
        /// CPU quota of each node in cores (a cgroup v1 `cpu.cfs_quota_us`, needs root), to
        /// stand for a smaller machine per node; default: no limit.
        #[arg(long)]
        node_cpus: Option<f64>,
        /// The nodes' `--session-timeout-ms`: how long a dead primary goes unnoticed.
        #[arg(long, default_value_t = 3000)]
        session_timeout_ms: u64,
        /// Seconds of unmeasured writes first, so the broker's JVM has compiled its hot code.
        #[arg(long, default_value_t = 10)]
        warmup_secs: u64,
        /// Writes: concurrent clients (closed loop, one request at a time each).
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Writes: seconds per configuration.
        #[arg(long, default_value_t = 10)]
        write_secs: u64,
        /// Writes: also search each cluster configuration's capacity (open loop, ack p99 <=
        /// 50 ms, rate held within 5%, no errors).
        #[arg(long)]
        search: bool,
        /// Search: first probe (writes/s).
        #[arg(long, default_value_t = 2_500)]
        search_start: u64,
        /// Search: highest rate tried.
        #[arg(long, default_value_t = 40_000)]
        search_max: u64,
        /// Search: seconds per probe (a short probe fails on one stall of the shared machine).
        #[arg(long, default_value_t = 10)]
        search_secs: u64,
        /// Search: bisections between the last pass and the first fail.
        #[arg(long, default_value_t = 2)]
        bisect_steps: u32,
        /// Failover: kills of the primary.
        #[arg(long, default_value_t = 20)]
        kills: u32,
        /// Failover: writes/s of the background load.
        #[arg(long, default_value_t = 100)]
        failover_rate: u64,
        /// Failover: longest wait for a new primary, in seconds.
        #[arg(long, default_value_t = 60)]
        failover_timeout_secs: u64,
        /// Failover: pause after the killed node is back, before the next kill, in ms.
        #[arg(long, default_value_t = 500)]
        settle_ms: u64,
        /// Reads: documents loaded for the range queries.
        #[arg(long, default_value_t = 100_000)]
        read_docs: u64,
        /// Reads: concurrent query clients.
        #[arg(long, default_value_t = 8)]
        read_clients: usize,
        /// Reads: seconds per target (primary, follower, all nodes).
        #[arg(long, default_value_t = 5)]
        read_secs: u64,
        /// Reads: live subscriptions on each of a follower and the primary.
        #[arg(long, default_value_t = 100)]
        subs: u64,
        /// Reads: writes/s to the primary while the subscriptions are measured.
        #[arg(long, default_value_t = 1_000)]
        sub_rate: u64,
        /// Reads: seconds of those writes.
        #[arg(long, default_value_t = 10)]
        sub_secs: u64,
        /// Grid: unindexable subscriptions on the measured node.
        #[arg(long, default_value_t = 1_000)]
        grid_subs: u64,
        /// Grid: writes/s to the primary (each matches one subscription); about 80% of the
        /// single node's capacity reads as the paper's table 3.
        #[arg(long, default_value_t = 500)]
        grid_rate: u64,
        /// Grid: seconds of writes per configuration.
        #[arg(long, default_value_t = 10)]
        grid_secs: u64,
        /// Grid: rows (query partitions) of the grid configuration.
        #[arg(long, default_value_t = 2)]
        grid_rows: u32,
        /// Grid: write partitions of the grid configuration.
        #[arg(long, default_value_t = 2)]
        grid_partitions: u32,
        /// Directory of cluster.json, cluster.csv and failover.csv (default:
        /// crates/bench/results/<UTC date>-cluster).
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Durable inserts, point reads and an indexed range query through the HTTP API.
    /// Sorted pages served from indexes: "newest 50 of a room" and "newest 1 overall" on
    /// 1,000,000 chat messages with a composite index (room, ts desc), over HTTP and in-process.
    Planner {
        /// Messages loaded (through /v1/bulk).
        #[arg(long, default_value_t = 1_000_000)]
        docs: usize,
        /// Rooms the messages are spread over.
        #[arg(long, default_value_t = 1_000)]
        rooms: usize,
        /// Seconds of each measured phase.
        #[arg(long, default_value_t = 10)]
        secs: u64,
        #[arg(long, default_value = "target/bench-results/planner.json")]
        out: PathBuf,
    },
    Http {
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        insert_secs: u64,
        #[arg(long, default_value_t = 5)]
        read_secs: u64,
        #[arg(long, default_value_t = 1_000_000)]
        range_docs: usize,
        #[arg(long, default_value_t = 5)]
        range_secs: u64,
        #[arg(long, default_value = "target/bench-results/http.json")]
        out: PathBuf,
    },
    /// Durable inserts of ~1 KB documents into the database layer alone (no HTTP, no server
    /// process): rate, CPU per insert, storage counters. Each option falls back to the
    /// environment variable named in brackets.
    InsertLoad {
        /// Writer threads.
        #[arg(default_value_t = 64)]
        threads: usize,
        /// Seconds of writing [SECS].
        #[arg(long)]
        secs: Option<u64>,
        /// Acknowledge before fsync [NOSYNC].
        #[arg(long)]
        nosync: bool,
        /// Exempt the `text` field from automatic indexing [EXEMPT_TEXT].
        #[arg(long)]
        exempt_text: bool,
        /// Exempt every field from automatic indexing: no index entries [EXEMPT_ALL].
        #[arg(long)]
        exempt_all: bool,
        /// The storage's checkpoint interval in milliseconds [CHECKPOINT_MS].
        #[arg(long)]
        checkpoint_ms: Option<u64>,
        /// The storage's checkpoint size trigger in MiB [CHECKPOINT_MIB].
        #[arg(long)]
        checkpoint_mib: Option<usize>,
        /// The storage's durable checkpoint interval in milliseconds [DURABLE_MS].
        #[arg(long)]
        durable_ms: Option<u64>,
        /// Commit-log records kept [LOG_RETENTION].
        #[arg(long)]
        log_retention: Option<u64>,
        /// Random field values (the documents `http` inserts) instead of mostly constant ones
        /// [RANDOM].
        #[arg(long)]
        random: bool,
    },
}

/// Runs a benchmark on a fresh runtime; exits 1 with the error if it fails.
fn run_bench(bench: impl std::future::Future<Output = Result<(), String>>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(bench) {
        eprintln!("herald-bench: {e}");
        std::process::exit(1);
    }
}

fn main() {
    let cli = Cli::parse();
    if let Some(p) = cli.herald {
        herald_bench::harness::server::set_herald_path(p);
    }
    match cli.command {
        Command::LiveScaling { dir } => {
            if let Err(e) = herald_bench::live::scaling::run(&dir) {
                eprintln!("herald-bench: {e}");
                std::process::exit(1);
            }
        }
        Command::Live {
            workload,
            queries,
            rates,
            secs,
            durability,
            writer,
            search,
            series,
            max_queries,
            max_rate,
            start_queries,
            start_rate,
            bisect_steps,
            retries,
            final_secs,
            grid_rows,
            grid_partitions,
            cell_cpu,
            p99_max_ms,
            out,
        } => {
            use herald_bench::live::{
                LiveBenchOptions, SearchOptions, Series, Workload, WritePath,
            };
            let opts = LiveBenchOptions {
                workloads: workload
                    .iter()
                    .map(|w| match w {
                        WorkloadArg::Range => Workload::Range,
                        WorkloadArg::Regex => Workload::Regex,
                        WorkloadArg::Suffix => Workload::Suffix,
                        WorkloadArg::Scan => Workload::Scan,
                        WorkloadArg::Count => Workload::Count,
                    })
                    .collect(),
                queries,
                rates,
                secs,
                durability: durability_of(durability),
                writer: match writer {
                    WriterArg::Put => WritePath::Put,
                    WriterArg::Stream => WritePath::Stream,
                },
                search: search.then(|| SearchOptions {
                    series: series
                        .iter()
                        .map(|s| match s {
                            SeriesArg::Queries => Series::Queries,
                            SeriesArg::Writes => Series::Writes,
                        })
                        .collect(),
                    max_queries,
                    max_rate,
                    start_queries,
                    start_rate,
                    bisect_steps,
                    retries,
                    final_secs,
                }),
                grid: (grid_rows.is_some() || grid_partitions.is_some())
                    .then(|| (grid_rows.unwrap_or(1), grid_partitions.unwrap_or(1))),
                cell_cpu,
                p99_max_ms,
                out,
            };
            run_bench(herald_bench::live::run(opts));
        }
        Command::Fanout {
            modes,
            users,
            followers_max,
            secs,
            search_start,
            search_max,
            search_secs,
            bisect_steps,
            burst_secs,
            workers,
            rate,
            interval_secs,
            drain_timeout_secs,
            preload_tweets,
            seed,
            durability,
            out,
        } => {
            use herald_bench::fanout::{load::Mode, FanoutOptions};
            run_bench(async move {
                let modes = modes
                    .iter()
                    .map(|m| Mode::parse(m.trim()))
                    .collect::<Result<Vec<_>, _>>()?;
                let burst_secs: [f64; 3] = burst_secs
                    .try_into()
                    .map_err(|_| "--burst-secs takes three durations: a,b,c".to_string())?;
                herald_bench::fanout::run(FanoutOptions {
                    modes,
                    users,
                    followers_max,
                    secs,
                    search: herald_bench::fanout::search::SearchOptions {
                        start: search_start,
                        max: search_max,
                        secs: search_secs,
                        bisect_steps,
                    },
                    burst_secs,
                    workers,
                    rate,
                    interval_secs,
                    drain_timeout: Duration::from_secs(drain_timeout_secs),
                    preload_tweets,
                    seed,
                    durability: durability_of(durability),
                    out,
                })
                .await
            });
        }
        Command::FanoutWorker {
            url,
            redis,
            concurrency,
        } => {
            run_bench(herald_bench::fanout::app::run_worker(
                herald_bench::fanout::app::WorkerOptions {
                    herald: url,
                    redis,
                    concurrency,
                },
            ));
        }
        Command::Rockbench {
            rate,
            secs,
            shape,
            overwrite,
            sparse,
            generators,
            via,
            batch_ms,
            pull_ms,
            reader,
            exempt,
            durability,
            cache_mib,
            search,
            max_rate,
            bisect_steps,
            seed,
            out,
        } => {
            let opts = herald_bench::rockbench::RockOptions {
                rate,
                secs,
                shape,
                overwrite,
                sparse,
                generators,
                via: via_of(via),
                batch_ms,
                pull_ms,
                reader: match reader {
                    ReaderArg::Sorted => herald_bench::rockbench::Reader::Sorted,
                    ReaderArg::Filtered => herald_bench::rockbench::Reader::Filtered,
                    ReaderArg::Group => herald_bench::rockbench::Reader::Group,
                },
                exempt: exempt.into_iter().filter(|e| !e.is_empty()).collect(),
                durability: durability_of(durability),
                cache_mib,
                search,
                max_rate,
                bisect_steps,
                seed,
                out,
            };
            run_bench(herald_bench::rockbench::run(opts));
        }
        Command::Stream {
            patterns,
            subscribers,
            cells,
            windows,
            source_docs,
            hot_docs,
            read_secs,
            clients,
            via,
            atomic,
            durability,
            cache_mib,
            seed,
            out,
        } => {
            use herald_bench::stream::{Pattern, StreamOptions};
            let opts = StreamOptions {
                patterns: patterns
                    .iter()
                    .map(|p| match p {
                        PatternArg::Upserts => Pattern::Upserts,
                        PatternArg::Copy => Pattern::Copy,
                        PatternArg::ReadsRepeat => Pattern::ReadsRepeat,
                        PatternArg::ReadsUnique => Pattern::ReadsUnique,
                    })
                    .collect(),
                subscribers,
                cells,
                windows,
                source_docs,
                hot_docs,
                read_secs,
                clients,
                via: via_of(via),
                atomic,
                durability: durability_of(durability),
                cache_mib,
                seed,
                out,
            };
            run_bench(herald_bench::stream::run(opts));
        }
        Command::Cluster {
            parts,
            brokers,
            node_cpus,
            session_timeout_ms,
            warmup_secs,
            clients,
            write_secs,
            search,
            search_start,
            search_max,
            search_secs,
            bisect_steps,
            kills,
            failover_rate,
            failover_timeout_secs,
            settle_ms,
            read_docs,
            read_clients,
            read_secs,
            subs,
            sub_rate,
            sub_secs,
            grid_subs,
            grid_rate,
            grid_secs,
            grid_rows,
            grid_partitions,
            out_dir,
        } => {
            use herald_bench::cluster::{failover, grid, reads, writes, ClusterBenchOptions, Part};
            herald_bench::harness::server::set_herald_features(&["cluster"]);
            let opts = ClusterBenchOptions {
                parts: parts
                    .iter()
                    .map(|p| match p {
                        PartArg::Writes => Part::Writes,
                        PartArg::Failover => Part::Failover,
                        PartArg::Reads => Part::Reads,
                        PartArg::Grid => Part::Grid,
                    })
                    .collect(),
                brokers: brokers as usize,
                node_cpus,
                session_timeout_ms,
                warmup_secs,
                writes: writes::WriteOptions {
                    clients,
                    secs: write_secs,
                    search,
                    search_start,
                    search_max,
                    search_secs,
                    bisect_steps,
                },
                failover: failover::FailoverOptions {
                    kills,
                    rate: failover_rate,
                    timeout: Duration::from_secs(failover_timeout_secs),
                    settle: Duration::from_millis(settle_ms),
                },
                reads: reads::ReadOptions {
                    docs: read_docs,
                    clients: read_clients,
                    secs: read_secs,
                    subs,
                    sub_rate,
                    sub_secs,
                },
                grid: grid::GridOptions {
                    subs: grid_subs,
                    rate: grid_rate,
                    secs: grid_secs,
                    rows: grid_rows,
                    partitions: grid_partitions,
                },
                out_dir,
            };
            run_bench(herald_bench::cluster::run(opts));
        }
        Command::Planner {
            docs,
            rooms,
            secs,
            out,
        } => {
            let opts = herald_bench::planner::PlannerBenchOptions {
                docs,
                rooms,
                secs,
                out,
            };
            run_bench(herald_bench::planner::run(opts));
        }
        Command::Http {
            clients,
            insert_secs,
            read_secs,
            range_docs,
            range_secs,
            out,
        } => {
            let opts = herald_bench::http::HttpBenchOptions {
                clients,
                insert_secs,
                read_secs,
                range_docs,
                range_secs,
                out,
            };
            run_bench(herald_bench::http::run(opts));
        }
        Command::InsertLoad {
            threads,
            secs,
            nosync,
            exempt_text,
            exempt_all,
            checkpoint_ms,
            checkpoint_mib,
            durable_ms,
            log_retention,
            random,
        } => {
            use herald_bench::insert_load::{env, env_flag, run, InsertLoadOptions};
            let opts = InsertLoadOptions {
                threads,
                secs: secs.or_else(|| env("SECS")).unwrap_or(5),
                nosync: nosync || env_flag("NOSYNC"),
                exempt_text: exempt_text || env_flag("EXEMPT_TEXT"),
                exempt_all: exempt_all || env_flag("EXEMPT_ALL"),
                checkpoint_ms: checkpoint_ms.or_else(|| env("CHECKPOINT_MS")),
                checkpoint_mib: checkpoint_mib.or_else(|| env("CHECKPOINT_MIB")),
                durable_ms: durable_ms.or_else(|| env("DURABLE_MS")),
                log_retention: log_retention.or_else(|| env("LOG_RETENTION")),
                random: random || env_flag("RANDOM"),
            };
            if let Err(e) = run(opts) {
                eprintln!("herald-bench: {e}");
                std::process::exit(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// clap's own consistency checks (a subcommand's option clashing with a global one, ...),
    /// which otherwise fail only when that subcommand runs.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
