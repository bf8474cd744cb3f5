//! The `herald` command: `herald serve` starts the server on the embedded store.

use clap::{Parser, Subcommand, ValueEnum};
use herald::{serve, shutdown_signal, ServeConfig, CACHE_MIB_MAX, CACHE_MIB_MIN};
use herald_db::live::grid::GRID_DIM_MAX;
use herald_db::{DbOptions, Durability};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// mimalloc: the write path allocates many small buffers; it measured ~10% faster than glibc.
/// Built without transparent huge pages (`no_thp`, workspace Cargo.toml): memory it purged and
/// touched again came back as 2 MiB pages zeroed whole, ~9% of the writer's samples in a
/// trigger fan-out; without them `herald-bench insert-load` used ~8% less CPU per insert (6
/// paired runs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (its index in mimalloc v3's `mi_option_t`, which the Rust
/// bindings do not name).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
/// The purge delay the server runs with: never. With mimalloc's default (1 s) it handed memory
/// the write path had just freed back to the kernel and faulted it in again, zeroed, moments
/// later (~17,000 page faults/s, `clear_page_erms` 13% of the server's samples at 10,000
/// RockBench events/s); without purging, 4 of 4 paired 45 s runs at 20,000 ev/s used 2-7% less
/// CPU per event at the same peak RSS. The memory stays with the process (its peak is bounded by
/// the caches and queues, docs/storage.md); `MIMALLOC_PURGE_DELAY` in the environment overrides.
const PURGE_DELAY_MS: std::ffi::c_long = -1;

extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Sets the allocator's purge delay unless the environment chose one.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's option setter only stores the value; the option exists in the
        // mimalloc linked in (libmimalloc-sys 0.1.49, mimalloc v3), and any thread may call it.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

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

fn durability_of(d: DurabilityArg) -> Durability {
    match d {
        DurabilityArg::Fsync => Durability::Fsync,
        DurabilityArg::Nosync => Durability::NoSync,
    }
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
    /// Verify a stopped server's data directory offline: the write-ahead log, the data file,
    /// index runs and commit-log blocks, and index entries against documents. Prints what it
    /// finds; exits 1 on damage, 2 if it cannot check (no store there, or a server has it
    /// open). See docs/storage.md, "herald check".
    Check {
        /// Data directory.
        #[arg(long, default_value = "./herald-data")]
        data: PathBuf,
    },
    /// Manage API keys on a running server.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Security rules tools.
    #[command(subcommand)]
    Rules(RulesCommand),
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
        /// Disk space kept in reserve beside the data (`reserve.tmp`), in MiB: released when
        /// the disk fills, so that checkpoints and a clean shutdown can still write; writes
        /// resume once twice this much is free again (docs/storage.md, "Faults"). 0: none.
        #[arg(long, default_value_t = herald_storage_reserve_mib())]
        reserve_mib: u64,
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
        /// Live-query matching grid: rows (query partitions, 1-64). Each query is matched by
        /// the cells of one row; rows share the queries out. Giving either grid flag starts the
        /// threaded grid (the other defaults to 1); with neither: one row per core, one
        /// partition (one core: matching on the live engine's thread). See
        /// docs/live-queries.md, "Matching grid". With `--cluster`, the flags start the grid
        /// across the cluster's nodes instead (docs/cluster.md, "Matching grid"): every node
        /// must give the same shape.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=GRID_DIM_MAX as i64))]
        grid_rows: Option<u32>,
        /// Live-query matching grid: write partitions (1-64). Each row has one cell thread per
        /// partition, each matching the changes of its share of the documents.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=GRID_DIM_MAX as i64))]
        grid_partitions: Option<u32>,
        #[command(flatten)]
        cluster: Box<ClusterArgs>,
    },
}

/// Cluster mode (docs/cluster.md); needs a build with `--features cluster`.
#[derive(clap::Args, Debug)]
struct ClusterArgs {
    /// Join a cluster through these Kafka bootstrap servers (`host:port[,host:port...]`).
    /// Without it Herald is a single node.
    #[arg(long, value_name = "KAFKA_SERVERS")]
    cluster: Option<String>,
    /// The cluster's name: the prefix of its Kafka topics and groups.
    #[arg(long, default_value = "herald", requires = "cluster")]
    cluster_name: String,
    /// This node's id, unique in the cluster (default: the listen address).
    #[arg(long, requires = "cluster")]
    node_id: Option<String>,
    /// The URL other nodes reach this node's HTTP API at (default: http://<listen address>).
    #[arg(long, requires = "cluster")]
    advertise_url: Option<String>,
    /// Replication factor of the topics the cluster creates (existing topics keep theirs).
    #[arg(long, default_value_t = 1, requires = "cluster")]
    replication_factor: i32,
    /// How long a dead primary goes unnoticed (the leadership group's session timeout), in
    /// milliseconds; the brokers' group.min.session.timeout.ms must allow it.
    #[arg(long, default_value_t = 3000, requires = "cluster")]
    session_timeout_ms: u64,
    /// How long a write waits for the replicated log before failing with `unavailable`.
    #[arg(long, default_value_t = 5000, requires = "cluster")]
    write_timeout_ms: u64,
}

#[cfg(feature = "cluster")]
fn cluster_options(
    args: ClusterArgs,
    listen: SocketAddr,
    rules: bool,
    grid: Option<(u32, u32)>,
) -> Result<Option<herald_cluster::ClusterOptions>, String> {
    let Some(bootstrap) = args.cluster else {
        if grid.is_some() {
            return Err("--grid-rows and --grid-partitions need --cluster in this build".into());
        }
        return Ok(None);
    };
    if rules {
        return Err(
            "--rules cannot be used with --cluster: install rules with PUT /v1/rules \
                    (any node forwards it to the primary)"
                .into(),
        );
    }
    let node_id = args.node_id.unwrap_or_else(|| listen.to_string());
    let url = args
        .advertise_url
        .unwrap_or_else(|| format!("http://{listen}"));
    let mut opts =
        herald_cluster::ClusterOptions::new(&bootstrap, &args.cluster_name, &node_id, &url);
    opts.replication_factor = args.replication_factor.max(1);
    opts.session_timeout = Duration::from_millis(args.session_timeout_ms.max(500));
    opts.write_timeout = Duration::from_millis(args.write_timeout_ms.max(100));
    opts.grid = grid.map(|(rows, partitions)| herald_cluster::grid::Shape { rows, partitions });
    Ok(Some(opts))
}

#[cfg(not(feature = "cluster"))]
fn cluster_options(
    args: ClusterArgs,
    _listen: SocketAddr,
    _rules: bool,
    grid: Option<(u32, u32)>,
) -> Result<(), String> {
    if grid.is_some() {
        return Err("--grid-rows and --grid-partitions need --cluster in this build".into());
    }
    match args.cluster {
        None => Ok(()),
        Some(_) => Err("this herald was built without cluster mode: build it with \
                        `cargo build --release -p herald --features cluster` (docs/cluster.md)"
            .into()),
    }
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

/// The storage layer's default reserve, in MiB.
const fn herald_storage_reserve_mib() -> u64 {
    herald_db::RESERVE_BYTES >> 20
}

/// `herald check`: prints the report; exits 1 on damage, 2 if the store could not be checked.
fn check_command(data: &std::path::Path) {
    match herald_db::check::check(data) {
        Ok(report) => {
            for note in &report.notes {
                println!("ok: {note}");
            }
            for finding in &report.findings {
                println!("DAMAGED: {}", finding.0);
            }
            if report.is_clean() {
                println!("herald check: {} is intact", data.display());
            } else {
                println!(
                    "herald check: {} finding(s) of damage in {}",
                    report.findings.len(),
                    data.display()
                );
                std::process::exit(1);
            }
        }
        Err(err) => {
            let hint = if err.code() == "storage_locked" {
                " (a server has it open: stop it first)"
            } else {
                ""
            };
            eprintln!("herald check: cannot check {}: {err}{hint}", data.display());
            std::process::exit(2);
        }
    }
}

fn main() {
    tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Command::Check { data } => check_command(&data),
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
            reserve_mib,
            log_retention_count,
            log_retention_secs,
            trigger_workers,
            trigger_time_ms,
            trigger_memory_mib,
            webhook_timeout_ms,
            grid_rows,
            grid_partitions,
            cluster,
        } => {
            // With `--cluster` the grid flags shape the grid across nodes; the node's own
            // matching (for its subscriptions when there is no such grid) takes the default.
            let in_cluster = cluster.cluster.is_some();
            let across = (in_cluster && (grid_rows.is_some() || grid_partitions.is_some()))
                .then(|| (grid_rows.unwrap_or(1), grid_partitions.unwrap_or(1)));
            let (local_rows, local_parts) = if in_cluster {
                (None, None)
            } else {
                (grid_rows, grid_partitions)
            };
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let grid = match herald::grid_config(local_rows, local_parts, cores) {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("herald: {e}");
                    std::process::exit(2);
                }
            };
            #[allow(clippy::let_unit_value)] // `()` in a build without the cluster feature
            let cluster = match cluster_options(*cluster, listen, rules.is_some(), across) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("herald: {e}");
                    std::process::exit(2);
                }
            };
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
                        reserve_bytes: reserve_mib << 20,
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
                grid,
                cluster,
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

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    }

    /// The allocator's purge delay in effect.
    fn purge_delay() -> std::ffi::c_long {
        // SAFETY: reads an option; see `tune_allocator`.
        unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }
    }

    /// Option 15 is mimalloc v3's `purge_delay` (default 1,000 ms), and the server turns
    /// purging off unless the environment chose a delay.
    #[test]
    fn the_allocator_keeps_freed_memory() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay(), 1000, "not mimalloc v3's purge_delay option");
            tune_allocator();
            assert_eq!(purge_delay(), PURGE_DELAY_MS);
        } else {
            let before = purge_delay();
            tune_allocator();
            assert_eq!(purge_delay(), before);
        }
    }
}
