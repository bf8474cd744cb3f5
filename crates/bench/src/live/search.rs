//! The capacity search: per workload, the most active queries sustainable at 1,000 writes/s and
//! the most writes/s sustainable with 1,000 queries. From a start value it doubles until a run
//! fails (halves while the start fails), then bisects between the last pass and the first fail;
//! a bound caps it ("at least X" when the bound passes). Then one run at 80% of the capacity.
//! Each probe is printed as it completes.

use super::probe::{self, Probe, ProbeConfig};
use super::report::{self, Outcome};
use super::{LiveBenchOptions, Workload};
use crate::harness::search::CapacitySearch;
use crate::harness::{durability_name, quiet};
use serde_json::{json, Value};
use std::path::Path;

/// The write rate of the queries series.
pub const FIXED_RATE: u64 = 1_000;
/// The active queries of the writes series.
pub const FIXED_QUERIES: u64 = 1_000;

/// Which parameter a series varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// Active queries, at `FIXED_RATE` writes/s.
    Queries,
    /// Writes per second, with `FIXED_QUERIES` active queries.
    Writes,
}

impl Series {
    pub fn name(self) -> &'static str {
        match self {
            Series::Queries => "queries",
            Series::Writes => "writes",
        }
    }

    /// The run that tests value `x` of this series.
    fn config(self, opts: &LiveBenchOptions, workload: Workload, x: u64, secs: u64) -> ProbeConfig {
        let (queries, rate) = match self {
            Series::Queries => (x, FIXED_RATE),
            Series::Writes => (FIXED_QUERIES, x),
        };
        ProbeConfig {
            workload,
            queries,
            rate,
            secs,
            durability: opts.durability,
            writer: opts.writer,
            grid: opts.grid,
            cell_cpu: opts.cell_cpu,
            p99_max_ms: opts.p99_max_ms,
        }
    }

    /// The varied value of a run.
    pub fn x(self, p: &Probe) -> u64 {
        match self {
            Series::Queries => p.config.queries,
            Series::Writes => p.config.rate,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SearchOptions {
    pub series: Vec<Series>,
    /// Bound of the queries series.
    pub max_queries: u64,
    /// Bound of the writes series.
    pub max_rate: u64,
    /// First value of the queries series; `None`: 25,000 for range, 1,000 for regex and suffix.
    pub start_queries: Option<u64>,
    /// First value of the writes series.
    pub start_rate: u64,
    /// Bisection steps after the doubling.
    pub bisect_steps: u32,
    /// Extra runs of a failing probe; it passes if any run passes (one stall of a shared
    /// machine fails a run, a saturated server fails them all).
    pub retries: u32,
    /// Seconds of writing in the run at 80% of capacity.
    pub final_secs: u64,
}

struct Searcher<'a> {
    opts: &'a LiveBenchOptions,
    workload: Workload,
    series: Series,
    probes: Vec<Probe>,
}

impl Searcher<'_> {
    fn label(&self) -> String {
        match self.opts.grid {
            Some((q, w)) => format!("{}/{} {q}x{w}", self.workload.name(), self.series.name()),
            None => format!("{}/{}", self.workload.name(), self.series.name()),
        }
    }

    /// Runs value `x` on a quiet machine (again, up to `retries` times, while it fails),
    /// prints each run's row; true when a run passes.
    async fn probe(&mut self, x: u64, retries: u32) -> Result<bool, String> {
        for attempt in 0..=retries {
            quiet::wait_for_quiet().await;
            let cfg = self
                .series
                .config(self.opts, self.workload, x, self.opts.secs);
            let p = probe::run(cfg).await?;
            let label = match attempt {
                0 => self.label(),
                n => format!("{} retry {n}", self.label()),
            };
            p.print_row(&label);
            let pass = p.passes();
            self.probes.push(p);
            if pass {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The largest passing value, or `None` when nothing passed.
    async fn capacity(
        &mut self,
        start: u64,
        bound: u64,
        steps: u32,
        retries: u32,
    ) -> Result<Option<u64>, String> {
        let mut search = CapacitySearch::new(start, bound, steps);
        while let Some(x) = search.next() {
            let pass = self.probe(x, retries).await?;
            search.record(x, pass);
        }
        Ok(search.capacity())
    }
}

async fn run_series(
    opts: &LiveBenchOptions,
    s: &SearchOptions,
    workload: Workload,
    series: Series,
) -> Result<Outcome, String> {
    let (start, bound) = match series {
        Series::Queries => (
            s.start_queries.unwrap_or(match workload {
                Workload::Range => 25_000,
                Workload::Regex | Workload::Suffix | Workload::Scan | Workload::Count => 1_000,
            }),
            s.max_queries,
        ),
        Series::Writes => (s.start_rate, s.max_rate),
    };
    let mut searcher = Searcher {
        opts,
        workload,
        series,
        probes: Vec::new(),
    };
    let capacity = searcher
        .capacity(start, bound, s.bisect_steps, s.retries)
        .await?;
    let at_least = capacity == Some(bound);
    let at80 = match capacity {
        Some(c) => {
            let x = ((c as f64 * 0.8).round() as u64).max(1);
            quiet::wait_for_quiet().await;
            let p = probe::run(series.config(opts, workload, x, s.final_secs)).await?;
            p.print_row(&format!("{} 80%", searcher.label()));
            Some(p)
        }
        None => None,
    };
    Ok(Outcome {
        workload,
        series,
        durability: opts.durability,
        probes: searcher.probes,
        capacity,
        at_least,
        at80,
    })
}

/// Runs every requested series of every workload; prints, charts and returns the report.
pub async fn run(opts: &LiveBenchOptions, s: &SearchOptions, out: &Path) -> Result<Value, String> {
    let dur = durability_name(opts.durability);
    println!(
        "capacity search: p99 <= {} ms, achieved rate >= {:.0}% of target, nothing lost; \
         {} s per probe (a failing one runs again up to {} times), {} s at 80%; \
         server durability: {dur}; grid: {}",
        opts.p99_max_ms,
        probe::RATE_SHARE_MIN * 100.0,
        opts.secs,
        s.retries,
        s.final_secs,
        super::grid_name(opts.grid, opts.cell_cpu)
    );
    probe::print_header();
    let dir = out.parent().unwrap_or(Path::new("."));
    let mut outcomes = Vec::new();
    let mut series_json = Vec::new();
    for &workload in &opts.workloads {
        for &series in &s.series {
            let o = run_series(opts, s, workload, series).await?;
            report::print_capacity(&o);
            let grid = match opts.grid {
                Some((q, w)) => format!("-{q}x{w}"),
                None => String::new(),
            };
            let chart = dir.join(format!(
                "live-{}-{}-{dur}{grid}.svg",
                workload.name(),
                series.name()
            ));
            std::fs::write(&chart, o.chart().to_svg())
                .map_err(|e| format!("{}: {e}", chart.display()))?;
            println!("chart written to {}", chart.display());
            series_json.push(o.to_json(&chart));
            outcomes.push(o);
        }
    }
    report::print_summary(&outcomes);
    Ok(json!({
        "benchmark": "live", "mode": "search", "durability": dur,
        "writer": opts.writer.name(),
        "grid": opts.grid.map(|(q, w)| json!({"rows": q, "partitions": w})),
        "cell_cpu": opts.cell_cpu,
        "criteria": {"p99_ms_max": opts.p99_max_ms, "rate_share_min": probe::RATE_SHARE_MIN,
                     "all_delivered": true},
        "options": {"secs": opts.secs, "final_secs": s.final_secs, "max_queries": s.max_queries,
                    "max_rate": s.max_rate, "bisect_steps": s.bisect_steps,
                    "fixed_rate": FIXED_RATE, "fixed_queries": FIXED_QUERIES},
        "series": series_json,
    }))
}
