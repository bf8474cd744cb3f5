//! Herald's benchmark lab. Every workload drives a real `herald serve` child process (the
//! binary built from this workspace) over loopback, so it measures what a deployment runs;
//! `insert_load` alone measures the db layer in-process. The production binary links none of
//! this.
//!
//! - [`harness`]: what every workload shares: the server spawner, CPU sampling, the quiet
//!   machine wait, latency histograms, SVG charts, the capacity search and a lean HTTP client.
//! - One module per workload: [`http`] (inserts, point reads, range queries), [`live`]
//!   (live-query notification latency and capacity), [`planner`] (sorted pages served from
//!   indexes), [`fanout`] (tweet fan-out: sync, Redis
//!   queue, triggers), [`cluster`] (cluster mode on Kafka: writes, failover, follower
//!   reads), [`rockbench`] (data latency under ingestion), [`stream`] (stream
//!   processor access patterns) and [`insert_load`] (db-layer inserts); [`ingest`] holds what
//!   rockbench and stream share.
//!
//! Results and their history: `crates/bench/results/`; the summary: `docs/benchmarks.md`.

pub mod cluster;
pub mod fanout;
pub mod harness;
pub mod http;
pub mod ingest;
pub mod insert_load;
pub mod live;
pub mod planner;
pub mod rockbench;
pub mod stream;

#[cfg(test)]
mod tests {
    /// The production binary stays free of the lab's clients: none of the crates only the
    /// benchmarks use is a normal dependency of `herald` (crates/server).
    #[test]
    fn the_server_does_not_depend_on_benchmark_only_crates() {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/Cargo.toml");
        let text = std::fs::read_to_string(manifest).expect("crates/server/Cargo.toml");
        let deps = text
            .split("[dependencies]")
            .nth(1)
            .expect("a [dependencies] table")
            .split("\n[")
            .next()
            .unwrap_or("");
        for krate in [
            "hdrhistogram",
            "httparse",
            "fastrand",
            "tokio-tungstenite",
            "redis",
        ] {
            assert!(
                !deps.lines().any(|l| l.trim_start().starts_with(krate)),
                "crates/server depends on the benchmark-only crate {krate}"
            );
        }
    }
}
