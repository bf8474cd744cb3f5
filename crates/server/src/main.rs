//! The `herald` command: `herald serve` starts the server on the embedded store.

use clap::{Parser, Subcommand, ValueEnum};
use herald::{serve, shutdown_signal, ServeConfig};
use herald_db::{DbOptions, Durability};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Bounds of `--cache-mib`: below 16 MiB redb would mostly read pages from the file; the upper
/// bound only catches a unit mistake (1 TiB).
const CACHE_MIB_MIN: u64 = 16;
const CACHE_MIB_MAX: u64 = 1 << 20;

/// mimalloc: the write path allocates many small buffers; it measured ~10% faster than glibc.
/// Built without transparent huge pages (`no_thp`, workspace Cargo.toml): memory it purged and
/// touched again came back as 2 MiB pages zeroed whole, ~9% of the writer's samples in a
/// trigger fan-out; without them `insert_load` used ~8% less CPU per insert (6 paired runs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "herald",
    version,
    about = "Herald, a real-time document database"
)]
struct Cli {
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
enum PatternArg {
    Upserts,
    Copy,
    ReadsRepeat,
    ReadsUnique,
}

fn via_of(v: ViaArg) -> herald::bench_ingest::client::Via {
    use herald::bench_ingest::client::Via;
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
enum BenchCommand {
    /// Live-query notification latency under the InvaliDB workload: explicit runs, or with
    /// `--search` the capacity of each workload (p99 <= 30 ms) and latency at 80% of it.
    Live {
        /// Workloads (comma-separated): `range` (InvaliDB's indexable range queries), `regex`
        /// (unindexable `$regex` prefixes).
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
        /// Search mode: seconds of writing in the run at 80% of capacity.
        #[arg(long, default_value_t = 30)]
        final_secs: u64,
        /// JSON output (default: target/bench-results/live.json, or
        /// live-search-<durability>.json with --search); charts are written next to it.
        #[arg(long)]
        out: Option<PathBuf>,
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
    /// The external-queue worker of `bench fanout` (started by it).
    #[command(hide = true)]
    FanoutWorker {
        /// Herald's base URL (http://127.0.0.1:PORT).
        #[arg(long)]
        herald: String,
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
    /// Durable inserts, point reads and an indexed range query through the HTTP API.
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
}

/// Where and how the key commands reach a server.
#[derive(clap::Args)]
struct AdminConn {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:7070")]
    url: String,
    /// File holding an admin key.
    #[arg(long)]
    admin_key_file: PathBuf,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create an API key; prints it (shown only this once) as JSON.
    Create {
        /// `admin` (everything) or `service` (reads and writes bypassing the rules).
        #[arg(long, default_value = "service")]
        role: String,
        /// A label for the key.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        conn: AdminConn,
    },
    /// List the API keys (without secrets).
    List {
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Revoke an API key by id; it fails from the next request on.
    Revoke {
        id: String,
        #[command(flatten)]
        conn: AdminConn,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Run a rules test file (requests with expected allow/deny); prints a table and exits 1 on
    /// any mismatch (format: docs/security.md).
    Test { file: PathBuf },
}

#[derive(Subcommand)]
enum Command {
    /// Manage API keys on a running server.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Security rules tools.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Run a benchmark (prints a table, writes JSON).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Start the server with the embedded store.
    Serve {
        /// Data directory.
        #[arg(long, default_value = "./herald-data")]
        data: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: SocketAddr,
        /// Allow listening on a non-loopback address without authentication, so anyone who can
        /// reach the port can read and write everything. Not needed with authentication.
        #[arg(long)]
        insecure_public: bool,
        /// File holding the bootstrap admin key (turns authentication on).
        #[arg(long)]
        admin_key_file: Option<PathBuf>,
        /// File holding the HS256 secret end-user tokens are signed with (at least 32 bytes).
        #[arg(long)]
        jwt_secret_file: Option<PathBuf>,
        /// PEM file of public keys (Ed25519 for EdDSA, P-256 for ES256) that verify end-user
        /// tokens.
        #[arg(long)]
        jwt_public_keys: Option<PathBuf>,
        /// Security rules to install at start (replacing the stored ones).
        #[arg(long)]
        rules: Option<PathBuf>,
        /// Origins browsers may open WebSockets and event streams from (comma-separated,
        /// e.g. https://app.example.com); default: any.
        #[arg(long, value_delimiter = ',')]
        allowed_origins: Option<Vec<String>>,
        /// When a write is acknowledged.
        #[arg(long, value_enum, default_value = "fsync")]
        durability: DurabilityArg,
        /// Memory for redb's page cache, in MiB: pages read and, up to half of it, pages
        /// written since the last durable checkpoint (docs/storage.md, "The page cache").
        #[arg(
            long,
            default_value_t = (herald_db::CACHE_BYTES_MAX >> 20) as u64,
            value_parser = clap::value_parser!(u64).range(CACHE_MIB_MIN..=CACHE_MIB_MAX)
        )]
        cache_mib: u64,
        /// Commit-log records kept (the window for live-query resume).
        #[arg(long, default_value_t = 1_000_000)]
        log_retention_count: u64,
        /// Commit-log records older than this many seconds are pruned.
        #[arg(long, default_value_t = 86_400)]
        log_retention_secs: u64,
        /// Trigger tasks run at once.
        #[arg(long, default_value_t = herald::triggers::WORKERS_DEFAULT)]
        trigger_workers: usize,
        /// Time limit of one JavaScript trigger invocation, in milliseconds.
        #[arg(long, default_value_t = herald_script::TIME_MS_MAX)]
        trigger_time_ms: u64,
        /// Memory limit of one JavaScript trigger invocation, in MiB.
        #[arg(long, default_value_t = (herald_script::MEMORY_BYTES_MAX >> 20) as u64)]
        trigger_memory_mib: u64,
        /// Time a webhook has to answer, in milliseconds.
        #[arg(long, default_value_t = herald::triggers::WEBHOOK_TIMEOUT_MS_DEFAULT)]
        webhook_timeout_ms: u64,
    },
}

fn read_file(what: &str, path: &PathBuf) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

/// A secret file's contents without surrounding whitespace (a trailing newline is common).
fn read_secret(what: &str, path: &PathBuf) -> Result<Vec<u8>, String> {
    let bytes = read_file(what, path)?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{what} {} is not UTF-8", path.display()))?;
    Ok(text.trim().as_bytes().to_vec())
}

fn auth_options(
    admin_key_file: Option<PathBuf>,
    jwt_secret_file: Option<PathBuf>,
    jwt_public_keys: Option<PathBuf>,
    rules: Option<PathBuf>,
    allowed_origins: Option<Vec<String>>,
) -> Result<herald::auth::AuthOptions, String> {
    let admin_key = match admin_key_file {
        Some(p) => {
            Some(String::from_utf8(read_secret("the admin key file", &p)?).expect("checked UTF-8"))
        }
        None => None,
    };
    let rules = match rules {
        Some(p) => Some(
            herald_rules::Rules::parse_text(&read_file("the rules file", &p)?)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    Ok(herald::auth::AuthOptions {
        admin_key,
        jwt_secret: jwt_secret_file
            .map(|p| read_secret("the JWT secret file", &p))
            .transpose()?,
        jwt_public_keys: jwt_public_keys
            .map(|p| read_file("the public keys file", &p))
            .transpose()?,
        rules,
        allowed_origins,
    })
}

/// `herald keys ...`: calls the key endpoints with an admin key and prints the JSON answer.
async fn keys_command(cmd: KeysCommand) -> Result<(), String> {
    let (conn, method, path, body) = match cmd {
        KeysCommand::Create { role, name, conn } => (
            conn,
            reqwest::Method::POST,
            "/v1/keys".to_string(),
            Some(serde_json::json!({"role": role, "name": name})),
        ),
        KeysCommand::List { conn } => (conn, reqwest::Method::GET, "/v1/keys".to_string(), None),
        KeysCommand::Revoke { id, conn } => (
            conn,
            reqwest::Method::DELETE,
            format!("/v1/keys/{id}"),
            None,
        ),
    };
    let key = String::from_utf8(read_secret("the admin key file", &conn.admin_key_file)?)
        .expect("checked UTF-8");
    let url = format!("{}{path}", conn.url.trim_end_matches('/'));
    let mut req = herald::http_client().request(method, &url).bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: {status}: {text}"));
    }
    let pretty = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(text);
    println!("{pretty}");
    Ok(())
}

/// Runs a benchmark on a fresh runtime; exits 1 with the error if it fails.
fn run_bench(bench: impl std::future::Future<Output = Result<(), String>>) {
    run_async("herald bench", bench)
}

/// Runs `fut` on a fresh runtime; exits 1 with the error (after `label`) if it fails.
fn run_async(label: &str, fut: impl std::future::Future<Output = Result<(), String>>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(fut) {
        eprintln!("{label}: {e}");
        std::process::exit(1);
    }
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(BenchCommand::Live {
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
            final_secs,
            out,
        }) => {
            use herald::bench_live::{
                LiveBenchOptions, SearchOptions, Series, Workload, WritePath,
            };
            let opts = LiveBenchOptions {
                workloads: workload
                    .iter()
                    .map(|w| match w {
                        WorkloadArg::Range => Workload::Range,
                        WorkloadArg::Regex => Workload::Regex,
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
                    final_secs,
                }),
                out,
            };
            run_bench(herald::bench_live::run(opts));
        }
        Command::Bench(BenchCommand::Fanout {
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
        }) => {
            use herald::bench_fanout::{load::Mode, FanoutOptions};
            run_bench(async move {
                let modes = modes
                    .iter()
                    .map(|m| Mode::parse(m.trim()))
                    .collect::<Result<Vec<_>, _>>()?;
                let burst_secs: [f64; 3] = burst_secs
                    .try_into()
                    .map_err(|_| "--burst-secs takes three durations: a,b,c".to_string())?;
                herald::bench_fanout::run(FanoutOptions {
                    modes,
                    users,
                    followers_max,
                    secs,
                    search: herald::bench_fanout::search::SearchOptions {
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
                    durability: match durability {
                        DurabilityArg::Fsync => "fsync",
                        DurabilityArg::Nosync => "nosync",
                    },
                    out,
                })
                .await
            });
        }
        Command::Bench(BenchCommand::FanoutWorker {
            herald,
            redis,
            concurrency,
        }) => {
            run_bench(herald::bench_fanout::fanout::run_worker(
                herald::bench_fanout::fanout::WorkerOptions {
                    herald,
                    redis,
                    concurrency,
                },
            ));
        }
        Command::Bench(BenchCommand::Rockbench {
            rate,
            secs,
            shape,
            overwrite,
            sparse,
            generators,
            via,
            batch_ms,
            pull_ms,
            exempt,
            durability,
            cache_mib,
            search,
            max_rate,
            bisect_steps,
            seed,
            out,
        }) => {
            let opts = herald::bench_ingest::rockbench::RockOptions {
                rate,
                secs,
                shape,
                overwrite,
                sparse,
                generators,
                via: via_of(via),
                batch_ms,
                pull_ms,
                exempt: exempt.into_iter().filter(|e| !e.is_empty()).collect(),
                durability: durability_of(durability),
                cache_mib,
                search,
                max_rate,
                bisect_steps,
                seed,
                out,
            };
            run_bench(herald::bench_ingest::rockbench::run(opts));
        }
        Command::Bench(BenchCommand::Stream {
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
        }) => {
            use herald::bench_ingest::stream::{Pattern, StreamOptions};
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
            run_bench(herald::bench_ingest::stream::run(opts));
        }
        Command::Bench(BenchCommand::Http {
            clients,
            insert_secs,
            read_secs,
            range_docs,
            range_secs,
            out,
        }) => {
            let opts = herald::bench::HttpBenchOptions {
                clients,
                insert_secs,
                read_secs,
                range_docs,
                range_secs,
                out,
            };
            run_bench(herald::bench::run(opts));
        }
        Command::Keys(cmd) => run_async("herald keys", keys_command(cmd)),
        Command::Rules(RulesCommand::Test { file }) => {
            match herald_rules::testfile::run_file(&file) {
                Ok(results) => {
                    print!("{}", herald_rules::testfile::table(&results));
                    if results.iter().any(|r| !r.passed()) {
                        std::process::exit(1);
                    }
                }
                Err(e) => {
                    eprintln!("herald rules test: {e}");
                    std::process::exit(2);
                }
            }
        }
        Command::Serve {
            data,
            listen,
            insecure_public,
            admin_key_file,
            jwt_secret_file,
            jwt_public_keys,
            rules,
            allowed_origins,
            durability,
            cache_mib,
            log_retention_count,
            log_retention_secs,
            trigger_workers,
            trigger_time_ms,
            trigger_memory_mib,
            webhook_timeout_ms,
        } => {
            let auth = match auth_options(
                admin_key_file,
                jwt_secret_file,
                jwt_public_keys,
                rules,
                allowed_origins,
            ) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("herald: {e}");
                    std::process::exit(2);
                }
            };
            if !listen.ip().is_loopback() && !insecure_public && !auth.enabled() {
                eprintln!(
                    "herald: refusing to listen on {listen} without authentication: anyone who can \
                     reach a public address could read and write all data. Configure --admin-key-file \
                     and/or --jwt-secret-file (docs/security.md), listen on 127.0.0.1, or pass \
                     --insecure-public if the network is private and you accept that."
                );
                std::process::exit(2);
            }
            let config = ServeConfig {
                data,
                listen,
                db: DbOptions {
                    durability: durability_of(durability),
                    log_retention_count,
                    log_retention_age: Duration::from_secs(log_retention_secs),
                    store: herald_db::StoreOptions {
                        cache_bytes_max: (cache_mib as usize) << 20,
                        ..Default::default()
                    },
                    ..DbOptions::default()
                },
                triggers: herald::triggers::TriggerOptions {
                    workers: trigger_workers.max(1),
                    script: herald_script::Limits {
                        time_ms_max: trigger_time_ms,
                        memory_bytes_max: (trigger_memory_mib as usize) << 20,
                        ..herald_script::Limits::default()
                    },
                    webhook_timeout: Duration::from_millis(webhook_timeout_ms),
                    ..Default::default()
                },
                auth,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .max_blocking_threads(64)
                .build()
                .expect("tokio runtime");
            let result = runtime.block_on(serve(config, shutdown_signal(), |addr| {
                eprintln!("herald: listening on http://{addr}");
            }));
            if let Err(e) = result {
                eprintln!("herald: {e}");
                std::process::exit(1);
            }
            eprintln!("herald: stopped");
        }
    }
}
