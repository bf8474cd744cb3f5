//! `herald-bench live-scaling`: the matching grid's scaling chart and table from the JSON of
//! `herald-bench live --search` runs with different `--grid-rows`/`--grid-partitions` (one
//! file per grid shape): capacity of each series against the number of cells, one line per
//! way of adding cells (rows with one partition, partitions with one row).

use crate::harness::chart::{Chart, Line, Point};
use serde_json::Value;
use std::path::Path;

/// One search's outcome for one grid shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    pub rows: u64,
    pub parts: u64,
    pub workload: String,
    pub series: String,
    pub capacity: Option<u64>,
    pub at_least: bool,
    pub cell_cpu: Option<f64>,
    /// The search's pass bound on p99 latency.
    pub p99_max_ms: Option<f64>,
}

/// The capacities in one `live --search` report (empty when it has no grid).
pub fn capacities(report: &Value) -> Vec<Capacity> {
    let Some(grid) = report.get("grid").filter(|g| !g.is_null()) else {
        return Vec::new();
    };
    let (rows, parts) = (
        grid["rows"].as_u64().unwrap_or(1),
        grid["partitions"].as_u64().unwrap_or(1),
    );
    report["series"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| Capacity {
            rows,
            parts,
            workload: s["workload"].as_str().unwrap_or_default().to_string(),
            series: s["series"].as_str().unwrap_or_default().to_string(),
            capacity: s["capacity"].as_u64(),
            at_least: s["at_least"].as_bool().unwrap_or(false),
            cell_cpu: report["cell_cpu"].as_f64(),
            p99_max_ms: report["criteria"]["p99_ms_max"].as_f64(),
        })
        .collect()
}

/// Reads every `*.json` report in `dir`.
pub fn read_dir(dir: &Path) -> Result<Vec<Capacity>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if v["mode"] == "search" {
            out.extend(capacities(&v));
        }
    }
    out.sort_by(|a, b| {
        (&a.series, a.rows * a.parts, a.rows).cmp(&(&b.series, b.rows * b.parts, b.rows))
    });
    Ok(out)
}

/// Per doubling of cells, the capacity's factor (geometric mean over the doublings present).
pub fn factor_per_doubling(points: &[(u64, u64)]) -> Option<f64> {
    let first = points.iter().min_by_key(|p| p.0)?;
    let last = points.iter().max_by_key(|p| p.0)?;
    if last.0 <= first.0 || first.1 == 0 {
        return None;
    }
    let doublings = (last.0 as f64 / first.0 as f64).log2();
    Some((last.1 as f64 / first.1 as f64).powf(1.0 / doublings))
}

/// The points (cells, capacity) of one series grown one way: `by_rows` keeps one partition.
fn line_points(caps: &[Capacity], series: &str, by_rows: bool) -> Vec<(u64, u64)> {
    caps.iter()
        .filter(|c| c.series == series && if by_rows { c.parts == 1 } else { c.rows == 1 })
        .filter_map(|c| Some((c.rows * c.parts, c.capacity?)))
        .collect()
}

/// The Markdown table: one row per grid shape and series, with the factor over the shape with
/// half the cells grown the same way, then per series and way the mean factor per doubling.
pub fn table(caps: &[Capacity]) -> String {
    let mut out = String::from(
        "| series | grid (rows x partitions) | cells | capacity | vs half the cells |\n\
         |---|---|---|---|---|\n",
    );
    for c in caps {
        let cells = c.rows * c.parts;
        let half = caps.iter().find(|h| {
            h.series == c.series
                && h.rows * h.parts * 2 == cells
                && if c.parts == 1 {
                    h.parts == 1
                } else {
                    h.rows == 1
                }
        });
        let vs = match (half.and_then(|h| h.capacity), c.capacity) {
            (Some(h), Some(x)) if h > 0 => format!("{:.2}x", x as f64 / h as f64),
            _ => String::new(),
        };
        out.push_str(&format!(
            "| {} {} | {}x{} | {} | {}{} | {} |\n",
            c.workload,
            c.series,
            c.rows,
            c.parts,
            cells,
            if c.at_least { ">= " } else { "" },
            c.capacity.map_or("none".into(), crate::harness::thousands),
            vs,
        ));
    }
    let mut series: Vec<&str> = caps.iter().map(|c| c.series.as_str()).collect();
    series.dedup();
    out.push('\n');
    for s in series {
        for (by_rows, way) in [(true, "rows"), (false, "partitions")] {
            if let Some(f) = factor_per_doubling(&line_points(caps, s, by_rows)) {
                out.push_str(&format!(
                    "- {s}, more {way}: {f:.2}x per doubling of cells\n"
                ));
            }
        }
    }
    out
}

/// One chart per series: capacity against cells, by rows and by partitions.
pub fn chart(caps: &[Capacity], series: &str) -> Chart {
    let cpu = caps
        .iter()
        .find_map(|c| c.cell_cpu)
        .map_or("unlimited".to_string(), |c| format!("{c} core"));
    let bound = caps.iter().find_map(|c| c.p99_max_ms).unwrap_or(30.0);
    let line = |name: &str, color, by_rows| Line {
        name: name.into(),
        color,
        connect: true,
        points: line_points(caps, series, by_rows)
            .into_iter()
            .map(|(x, y)| Point {
                x: x as f64,
                y: y as f64,
                filled: true,
            })
            .collect(),
    };
    let what = match series {
        "queries" => "active queries sustained at 1,000 writes/s",
        _ => "writes/s sustained with 1,000 active queries",
    };
    Chart {
        title: format!("Matching grid scaling: {what}"),
        subtitle: format!(
            "scan workload ($or filters: every write tested against every query); each cell \
             limited to {cpu}; p99 <= {bound} ms; 2 cores"
        ),
        x_label: "cells (rows x partitions)".into(),
        y_label: series.to_string(),
        lines: vec![
            line("rows (1 partition)", "#1f77b4", true),
            line("partitions (1 row)", "#e67e22", false),
        ],
        threshold: None,
        marker: None,
        marker_note: String::new(),
        x_linear: false,
    }
}

/// Writes `grid-scaling-<series>.svg` and `grid-scaling.md` into `dir`; prints the table.
pub fn run(dir: &Path) -> Result<(), String> {
    let caps = read_dir(dir)?;
    if caps.is_empty() {
        return Err(format!(
            "no `live --search` reports with a grid in {}",
            dir.display()
        ));
    }
    let mut series: Vec<&str> = caps.iter().map(|c| c.series.as_str()).collect();
    series.dedup();
    for s in series {
        let p = dir.join(format!("grid-scaling-{s}.svg"));
        std::fs::write(&p, chart(&caps, s).to_svg())
            .map_err(|e| format!("{}: {e}", p.display()))?;
        println!("chart written to {}", p.display());
    }
    let t = table(&caps);
    let p = dir.join("grid-scaling.md");
    std::fs::write(&p, &t).map_err(|e| format!("{}: {e}", p.display()))?;
    print!("{t}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn capacities_and_factors() {
        let report = json!({"mode": "search", "grid": {"rows": 2, "partitions": 1},
            "cell_cpu": 0.1, "series": [
                {"workload": "scan", "series": "queries", "capacity": 1800, "at_least": false},
                {"workload": "scan", "series": "writes", "capacity": null, "at_least": false}]});
        let caps = capacities(&report);
        assert_eq!(caps.len(), 2);
        assert_eq!(
            (caps[0].rows, caps[0].parts, caps[0].capacity),
            (2, 1, Some(1800))
        );
        assert_eq!(caps[1].capacity, None);
        assert!(capacities(&json!({"mode": "search", "series": []})).is_empty());
        let f = factor_per_doubling(&[(1, 1000), (2, 1800), (4, 3240)]).unwrap();
        assert!((f - 1.8).abs() < 1e-9, "{f}");
        assert_eq!(factor_per_doubling(&[(1, 1000)]), None);
        let t = table(&caps);
        assert!(t.contains("| scan queries | 2x1 | 2 | 1,800 |"), "{t}");
        let mut two = caps.clone();
        two.push(Capacity {
            rows: 1,
            capacity: Some(1000),
            ..caps[0].clone()
        });
        let t = table(&two);
        assert!(t.contains("| 1,800 | 1.80x |"), "{t}");
        assert!(
            t.contains("- queries, more rows: 1.80x per doubling"),
            "{t}"
        );
    }
}
