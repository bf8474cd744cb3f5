//! Latency recording for the ingest workloads (rockbench, stream): named series of samples,
//! each kept as one histogram over the whole run and one per interval (by the time a sample was
//! taken), a progress line per interval, percentile summaries, JSON, and the two charts
//! (latency over time; latency distribution).

use super::chart::{Chart, Line, Point};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest recordable latency: ten minutes, in microseconds.
const LATENCY_US_MAX: u64 = 600_000_000;
/// Colors of the charts' series, in order.
const COLORS: [&str; 12] = [
    "#2c7fb8", "#e67e22", "#7b1fa2", "#27ae60", "#c0392b", "#9e9e9e", "#17becf", "#8c564b",
    "#bcbd22", "#e377c2", "#1f1f1f", "#ff7f0e",
];

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("histogram bounds")
}

/// Percentiles of one histogram, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Summary {
    pub n: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Summary {
            n: h.len(),
            p50: ms(h.value_at_quantile(0.50)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }

    pub fn json(&self) -> Value {
        json!({"n": self.n, "p50_ms": self.p50, "p95_ms": self.p95, "p99_ms": self.p99, "max_ms": self.max})
    }

    /// `p50 1.2 / p95 3.4 / p99 5.6 / max 7.8 ms`, or `-` without samples.
    pub fn text(&self) -> String {
        if self.n == 0 {
            return "-".into();
        }
        format!(
            "p50 {:.1} / p95 {:.1} / p99 {:.1} / max {:.1} ms",
            self.p50, self.p95, self.p99, self.max
        )
    }
}

struct Series {
    name: String,
    overall: Histogram<u64>,
    intervals: Vec<Histogram<u64>>,
}

/// The latency series of one run, shared by the tasks that record into it.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    interval: Duration,
    series: Arc<Mutex<Vec<Series>>>,
}

impl Recorder {
    /// A recorder with the given series, whose intervals start at `start`.
    pub fn new(names: &[&str], start: Instant, interval: Duration) -> Recorder {
        let series = names
            .iter()
            .map(|n| Series {
                name: n.to_string(),
                overall: histogram(),
                intervals: Vec::new(),
            })
            .collect();
        Recorder {
            start,
            interval,
            series: Arc::new(Mutex::new(series)),
        }
    }

    /// Records `n` samples of `us` microseconds into series `index`, taken at `at`.
    pub fn record_n(&self, index: usize, at: Instant, us: u64, n: u64) {
        if n == 0 {
            return;
        }
        let us = us.clamp(1, LATENCY_US_MAX);
        let slot = (at.saturating_duration_since(self.start).as_micros()
            / self.interval.as_micros().max(1)) as usize;
        let mut all = self.series.lock().expect("recorder lock");
        let s = &mut all[index];
        s.overall.saturating_record_n(us, n);
        while s.intervals.len() <= slot {
            s.intervals.push(histogram());
        }
        s.intervals[slot].saturating_record_n(us, n);
    }

    pub fn record(&self, index: usize, at: Instant, us: u64) {
        self.record_n(index, at, us, 1);
    }

    pub fn overall(&self, index: usize) -> Summary {
        Summary::of(&self.series.lock().expect("recorder lock")[index].overall)
    }

    /// The summary of interval `slot` of series `index`.
    pub fn interval(&self, index: usize, slot: usize) -> Summary {
        let all = self.series.lock().expect("recorder lock");
        all[index]
            .intervals
            .get(slot)
            .map(Summary::of)
            .unwrap_or_default()
    }

    pub fn interval_secs(&self) -> f64 {
        self.interval.as_secs_f64()
    }

    /// Every series: name, overall summary and per-interval summaries.
    pub fn to_json(&self) -> Value {
        let all = self.series.lock().expect("recorder lock");
        let series: Vec<Value> = all
            .iter()
            .map(|s| {
                let intervals: Vec<Value> = s
                    .intervals
                    .iter()
                    .enumerate()
                    .map(|(i, h)| {
                        let mut v = Summary::of(h).json();
                        v["t_s"] = json!(i as f64 * self.interval_secs());
                        v
                    })
                    .collect();
                json!({"name": s.name, "overall": Summary::of(&s.overall).json(), "intervals": intervals})
            })
            .collect();
        json!(series)
    }

    /// p50, p95 and p99 per interval of the series `only` (all when empty) over time (linear
    /// x axis). Series without samples are left out.
    pub fn time_chart(&self, title: &str, subtitle: &str, only: &[usize]) -> Chart {
        let all = self.series.lock().expect("recorder lock");
        let mut lines = Vec::new();
        let chosen = all
            .iter()
            .enumerate()
            .filter(|(i, s)| (only.is_empty() || only.contains(i)) && !s.overall.is_empty());
        for (_, s) in chosen {
            for (q, label) in [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")] {
                let points = s
                    .intervals
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| !h.is_empty())
                    .map(|(i, h)| Point {
                        x: (i + 1) as f64 * self.interval_secs(),
                        y: h.value_at_quantile(q) as f64 / 1000.0,
                        filled: true,
                    })
                    .collect();
                lines.push(Line {
                    name: format!("{} {label}", s.name),
                    color: COLORS[lines.len() % COLORS.len()],
                    points,
                    connect: true,
                });
            }
        }
        Chart {
            title: title.into(),
            subtitle: subtitle.into(),
            x_label: format!(
                "seconds into the run (end of each {} s interval)",
                self.interval_secs()
            ),
            y_label: "latency (ms)".into(),
            lines,
            threshold: None,
            marker: None,
            marker_note: String::new(),
            x_linear: true,
        }
    }

    /// The latency distribution of every series over the whole run: latency against
    /// 1 / (1 - quantile) on logarithmic axes (2 = p50, 10 = p90, 100 = p99, 1000 = p99.9).
    pub fn distribution_chart(&self, title: &str, subtitle: &str) -> Chart {
        let all = self.series.lock().expect("recorder lock");
        let quantiles = [0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999];
        let lines = all
            .iter()
            .filter(|s| !s.overall.is_empty())
            .enumerate()
            .map(|(i, s)| Line {
                name: s.name.clone(),
                color: COLORS[i % COLORS.len()],
                points: quantiles
                    .iter()
                    .map(|&q| Point {
                        x: 1.0 / (1.0 - q),
                        y: s.overall.value_at_quantile(q) as f64 / 1000.0,
                        filled: true,
                    })
                    .collect(),
                connect: true,
            })
            .collect();
        Chart {
            title: title.into(),
            subtitle: subtitle.into(),
            x_label: "1 / (1 - quantile): 2 = p50, 10 = p90, 100 = p99, 1k = p99.9".into(),
            y_label: "latency (ms)".into(),
            lines,
            threshold: None,
            marker: None,
            marker_note: String::new(),
            x_linear: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_interval_and_overall() {
        let start = Instant::now();
        let r = Recorder::new(&["a", "b"], start, Duration::from_secs(1));
        r.record(0, start, 1_000);
        r.record_n(0, start + Duration::from_millis(2500), 4_000, 3);
        r.record(1, start, 0); // clamped to 1 us
        assert_eq!(r.overall(0).n, 4);
        assert_eq!(r.interval(0, 0).n, 1);
        assert_eq!(r.interval(0, 1).n, 0);
        assert_eq!(r.interval(0, 2).n, 3);
        assert!((r.interval(0, 2).p50 - 4.0).abs() < 0.01);
        assert!(r.overall(1).max > 0.0);
        let j = r.to_json();
        assert_eq!(j[0]["intervals"].as_array().unwrap().len(), 3);
        let svg = r.time_chart("t", "s", &[]).to_svg();
        assert!(svg.contains("a p95"));
        let svg = r.distribution_chart("t", "s").to_svg();
        assert!(svg.contains("<polyline"));
    }
}
