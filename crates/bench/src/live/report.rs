//! What a capacity search reports: each series' outcome (its probes, capacity, the run at 80%)
//! as printed lines, Markdown summary tables (capacity against the targets; latency at
//! 80% of capacity in the InvaliDB paper's table 3 format: avg, std. dev., p50, p99, max), JSON,
//! and the series' chart.

use super::probe::{Probe, P99_MAX_MS};
use super::search::{Series, FIXED_QUERIES, FIXED_RATE};
use super::Workload;
use crate::harness::chart::{Chart, Line, Point};
use crate::harness::thousands;
use crate::harness::{durability_name, Durability};
use serde_json::{json, Value};
use std::path::Path;

pub struct Outcome {
    pub workload: Workload,
    pub series: Series,
    pub durability: Durability,
    /// Every probe of the search, in the order run.
    pub probes: Vec<Probe>,
    /// The largest passing value; `None` when nothing passed.
    pub capacity: Option<u64>,
    /// The search bound passed: the capacity is at least `capacity`.
    pub at_least: bool,
    /// The run at 80% of the capacity.
    pub at80: Option<Probe>,
}

/// The target for a series, if it has one.
pub fn target(workload: Workload, series: Series) -> Option<u64> {
    match (workload, series) {
        (Workload::Range, Series::Queries) => Some(100_000),
        (Workload::Range, Series::Writes) => Some(10_000),
        (Workload::Regex, Series::Queries) => Some(10_000),
        (Workload::Regex, Series::Writes) | (Workload::Scan, _) => None,
        (Workload::Suffix, Series::Queries) => Some(10_000),
        (Workload::Suffix, Series::Writes) => None,
        (Workload::Count, Series::Queries) => Some(10_000),
        (Workload::Count, Series::Writes) => Some(5_000),
    }
}

/// What the series varies, at what fixed value.
fn describe(series: Series) -> String {
    match series {
        Series::Queries => format!("active queries at {} writes/s", thousands(FIXED_RATE)),
        Series::Writes => format!("writes/s with {} active queries", thousands(FIXED_QUERIES)),
    }
}

/// A run's load: `192,000 queries at 1,000 writes/s`.
fn load(p: &Probe) -> String {
    format!(
        "{} queries at {} writes/s",
        thousands(p.config.queries),
        thousands(p.config.rate)
    )
}

impl Outcome {
    fn label(&self) -> String {
        format!(
            "{}/{} ({})",
            self.workload.name(),
            self.series.name(),
            durability_name(self.durability)
        )
    }

    /// `at least 400,000`, `240,000` or `none (nothing passed)`.
    pub fn capacity_text(&self) -> String {
        match self.capacity {
            Some(c) if self.at_least => format!("at least {} (the search bound)", thousands(c)),
            Some(c) => thousands(c),
            None => "none (no probe passed)".into(),
        }
    }

    fn verdict(&self) -> &'static str {
        match (target(self.workload, self.series), self.capacity) {
            (None, _) => "no target",
            (Some(t), Some(c)) if c >= t => "met",
            _ => "not met",
        }
    }

    pub fn to_json(&self, chart: &Path) -> Value {
        json!({
            "workload": self.workload.name(), "series": self.series.name(),
            "varies": describe(self.series), "durability": durability_name(self.durability),
            "capacity": self.capacity, "at_least": self.at_least,
            "target": target(self.workload, self.series), "target_verdict": self.verdict(),
            "probes": self.probes.iter().map(Probe::to_json).collect::<Vec<_>>(),
            "at_80_percent": self.at80.as_ref().map(Probe::to_json),
            "chart": chart.display().to_string(),
        })
    }

    /// The series' chart: p50, p99 and max latency of every run against the varied value.
    pub fn chart(&self) -> Chart {
        let bound = self
            .probes
            .first()
            .map_or(P99_MAX_MS, |p| p.config.p99_max_ms);
        // The search's probes are joined by lines; the longer run at 80% stands apart.
        let line = |name: &str, color, runs: &[&Probe], f: fn(&Probe) -> f64| Line {
            name: name.into(),
            color,
            connect: runs.len() == self.probes.len(),
            points: runs
                .iter()
                .filter(|p| !p.hist.is_empty())
                .map(|p| Point {
                    x: self.series.x(p) as f64,
                    y: f(p),
                    filled: p.passes(),
                })
                .collect(),
        };
        let probes: Vec<&Probe> = self.probes.iter().collect();
        let at80: Vec<&Probe> = self.at80.iter().collect();
        let unit = match self.series {
            Series::Queries => "queries",
            Series::Writes => "writes/s",
        };
        Chart {
            title: format!(
                "{} workload: notification latency by {}",
                self.workload.name(),
                describe(self.series)
            ),
            subtitle: format!(
                "herald-bench live --search; server durability {}; writes: {}; one fresh server per run; 2 cores",
                durability_name(self.durability),
                self.probes.first().map_or("put", |p| p.config.writer.name())
            ),
            x_label: describe(self.series),
            y_label: "notification latency (ms)".into(),
            lines: vec![
                line("max", "#9e9e9e", &probes, |p| p.latency().max),
                line("p99", "#e67e22", &probes, |p| p.latency().p99),
                line("p50", "#2c7fb8", &probes, |p| p.latency().p50),
                line("p99 of the run at 80%", "#7b1fa2", &at80, |p| p.latency().p99),
            ],
            threshold: Some((bound, format!("p99 bound {bound} ms"))),
            marker: self.capacity.map(|c| {
                let at = if self.at_least { ">= " } else { "" };
                (c as f64, format!("capacity {at}{} {unit}", thousands(c)))
            }),
            marker_note: "filled marker: the run passed\n(p99 <= 30 ms, rate held,\nnothing lost); open: it failed"
                .into(),
            x_linear: false,
        }
    }
}

/// The end of one series: its capacity and the run at 80% of it.
pub fn print_capacity(o: &Outcome) {
    let target = match target(o.workload, o.series) {
        Some(t) => format!("target >= {}: {}", thousands(t), o.verdict()),
        None => "no target".into(),
    };
    println!(
        "=> {}: capacity {} {} [{target}]; {} probes",
        o.label(),
        o.capacity_text(),
        describe(o.series),
        o.probes.len()
    );
    if let Some(p) = &o.at80 {
        let l = p.latency();
        println!(
            "   at 80%: {}: avg {:.1} ms, std. dev. {:.1}, p50 {:.1}, p99 {:.1}, max {:.1} ({}/{} delivered{})",
            load(p),
            l.mean,
            l.stddev,
            l.p50,
            l.p99,
            l.max,
            p.delivered,
            p.expected,
            p.failure().map(|f| format!("; FAILED: {f}")).unwrap_or_default()
        );
    }
    println!();
}

/// Markdown tables of every series: capacities against targets, then latency at 80%.
pub fn print_summary(outcomes: &[Outcome]) {
    println!("\n| workload | capacity of | server | capacity | issue target | |");
    println!("|---|---|---|---|---|---|");
    for o in outcomes {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            o.workload.name(),
            describe(o.series),
            durability_name(o.durability),
            o.capacity_text(),
            target(o.workload, o.series)
                .map(|t| format!(">= {}", thousands(t)))
                .unwrap_or_else(|| "-".into()),
            o.verdict()
        );
    }
    println!("\nLatency at 80% of capacity, ms (InvaliDB table 3 format, plus p50):\n");
    println!("| workload | load (server) | avg. | std. dev. | p50 | 99% | max. | delivered |");
    println!("|---|---|---|---|---|---|---|---|");
    for o in outcomes {
        let Some(p) = &o.at80 else { continue };
        let l = p.latency();
        println!(
            "| {} | {} ({}) | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} / {} |",
            o.workload.name(),
            load(p),
            durability_name(o.durability),
            l.mean,
            l.stddev,
            l.p50,
            l.p99,
            l.max,
            thousands(p.delivered),
            thousands(p.expected)
        );
    }
    println!();
}
