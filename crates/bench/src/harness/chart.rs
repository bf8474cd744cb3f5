//! Hand-written SVG line charts (no dependency): lines of points on a logarithmic y axis and a
//! logarithmic or linear x axis (time series), an optional horizontal threshold and an optional vertical marker, with a legend. A small
//! writer (`Svg`) emits the elements; `Chart::to_svg` lays them out.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
/// The plot area: left, top, right, bottom.
const PLOT: (f64, f64, f64, f64) = (72.0, 64.0, 580.0, 400.0);
/// Grid lines' color (drawn thinner than the rest).
const GRID: &str = "#e4e4e4";

pub struct Point {
    pub x: f64,
    pub y: f64,
    /// Filled marker (for example: the run passed) or open.
    pub filled: bool,
}

pub struct Line {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<Point>,
    /// Joined by a line (else markers only).
    pub connect: bool,
}

pub struct Chart {
    pub title: String,
    pub subtitle: String,
    pub x_label: String,
    pub y_label: String,
    pub lines: Vec<Line>,
    /// A horizontal line at this y, with its legend text.
    pub threshold: Option<(f64, String)>,
    /// A vertical line at this x, with its legend text.
    pub marker: Option<(f64, String)>,
    /// Legend text explaining filled and open markers.
    pub marker_note: String,
    /// A linear x axis from 0 (time series) instead of a logarithmic one.
    pub x_linear: bool,
}

/// How a legend entry is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Swatch {
    Line,
    Dashed,
    Marker,
}

/// Escapes text for XML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A minimal SVG writer: each method appends one element.
struct Svg {
    out: String,
}

impl Svg {
    fn new(w: f64, h: f64) -> Svg {
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#
        );
        let _ = writeln!(out, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        Svg { out }
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), stroke: &str, dash: bool) {
        let dash = if dash {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let width = if stroke == GRID { 1.0 } else { 1.5 };
        let _ = writeln!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"{dash}/>"#
        );
    }

    fn polyline(&mut self, points: &[(f64, f64)], stroke: &str) {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.out,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="2"/>"#,
            pts.join(" ")
        );
    }

    fn circle(&mut self, (cx, cy): (f64, f64), color: &str, filled: bool) {
        let fill = if filled { color } else { "white" };
        let _ = writeln!(
            self.out,
            r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="4" fill="{fill}" stroke="{color}" stroke-width="1.5"/>"#
        );
    }

    /// Text at (x, y); `anchor` is start, middle or end; `rotate` turns it by -90 degrees.
    fn text(&mut self, (x, y): (f64, f64), s: &str, size: u32, anchor: &str, rotate: bool) {
        let r = if rotate {
            format!(r#" transform="rotate(-90 {x:.1} {y:.1})""#)
        } else {
            String::new()
        };
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}"{r}>{}</text>"#,
            esc(s)
        );
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// A logarithmic (or linear) axis from `lo` to `hi` (both 1-2-5 values) onto pixels `a`..`b`.
struct LogAxis {
    lo: f64,
    hi: f64,
    a: f64,
    b: f64,
    linear: bool,
}

/// The 1-2-5 sequence from the largest value at most `min` to the smallest at least `max`.
fn ticks(min: f64, max: f64) -> Vec<f64> {
    let (min, max) = (min.max(1e-9), max.max(min));
    let mut seq = Vec::new();
    let mut decade = 10f64.powi(min.log10().floor() as i32);
    while seq.last().is_none_or(|&t| t < max * (1.0 - 1e-9)) {
        seq.extend([1.0, 2.0, 5.0].map(|m| decade * m));
        decade *= 10.0;
    }
    let first = seq
        .iter()
        .rposition(|&t| t <= min * (1.0 + 1e-9))
        .unwrap_or(0);
    let last = seq
        .iter()
        .position(|&t| t >= max * (1.0 - 1e-9))
        .unwrap_or(seq.len() - 1);
    seq[first..=last].to_vec()
}

impl LogAxis {
    fn at(&self, v: f64) -> f64 {
        let f = if self.linear {
            (v - self.lo) / (self.hi - self.lo)
        } else {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        };
        self.a + f * (self.b - self.a)
    }
}

/// Ticks of a linear axis from 0: 1-2-5 steps, about 5 to 10 of them.
fn linear_ticks(max: f64) -> Vec<f64> {
    let max = max.max(1e-9);
    let mut step = 10f64.powi(max.log10().floor() as i32 - 1);
    while max / step > 10.0 {
        step *= if (step / 10f64.powi(step.log10().floor() as i32) - 2.0).abs() < 1e-9 {
            2.5
        } else {
            2.0
        };
    }
    let n = (max / step - 1e-9).ceil().max(1.0) as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// `1,500` -> `1.5k`, `400000` -> `400k`, `0.5` -> `0.5`.
pub fn short(v: f64) -> String {
    let (n, unit) = match v {
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    let s = format!("{n:.1}");
    format!("{}{unit}", s.trim_end_matches('0').trim_end_matches('.'))
}

impl Chart {
    pub fn to_svg(&self) -> String {
        let (l, t, r, b) = PLOT;
        let pts = self.lines.iter().flat_map(|s| &s.points);
        let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = pts
            .filter(|p| (self.x_linear || p.x > 0.0) && p.y > 0.0)
            .map(|p| (p.x, p.y))
            .unzip();
        xs.extend(self.marker.as_ref().map(|m| m.0));
        ys.extend(self.threshold.as_ref().map(|th| th.0));
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            if lo.is_finite() {
                (lo, hi.max(lo * 1.5))
            } else {
                (1.0, 10.0)
            }
        };
        let xt = if self.x_linear {
            linear_ticks(range(&xs).1)
        } else {
            ticks(range(&xs).0, range(&xs).1)
        };
        let yt = ticks(range(&ys).0, range(&ys).1);
        let x = LogAxis {
            lo: xt[0],
            hi: xt[xt.len() - 1],
            a: l,
            b: r,
            linear: self.x_linear,
        };
        let y = LogAxis {
            lo: yt[0],
            hi: yt[yt.len() - 1],
            a: b,
            b: t,
            linear: false,
        };

        let mut svg = Svg::new(WIDTH, HEIGHT);
        svg.text((l, 26.0), &self.title, 16, "start", false);
        svg.text((l, 46.0), &self.subtitle, 12, "start", false);
        // Grid and tick labels; with many ticks only the powers of ten are labelled.
        let sparse = |ts: &[f64]| ts.len() > 10;
        for &v in &xt {
            let px = x.at(v);
            svg.line((px, t), (px, b), GRID, false);
            if self.x_linear || !sparse(&xt) || (v.log10().fract()).abs() < 1e-9 {
                svg.text((px, b + 18.0), &short(v), 11, "middle", false);
            }
        }
        for &v in &yt {
            let py = y.at(v);
            svg.line((l, py), (r, py), GRID, false);
            if !sparse(&yt) || (v.log10().fract()).abs() < 1e-9 {
                svg.text((l - 6.0, py + 4.0), &short(v), 11, "end", false);
            }
        }
        svg.line((l, b), (r, b), "#444", false);
        svg.line((l, t), (l, b), "#444", false);
        svg.text(
            ((l + r) / 2.0, b + 40.0),
            &self.x_label,
            12,
            "middle",
            false,
        );
        svg.text((20.0, (t + b) / 2.0), &self.y_label, 12, "middle", true);

        let mut legend: Vec<(&str, String, Swatch)> = Vec::new();
        if let Some((v, label)) = &self.threshold {
            let py = y.at(*v);
            svg.line((l, py), (r, py), "#c0392b", true);
            legend.push(("#c0392b", label.clone(), Swatch::Dashed));
        }
        if let Some((v, label)) = &self.marker {
            let px = x.at(*v);
            svg.line((px, t), (px, b), "#27ae60", true);
            legend.push(("#27ae60", label.clone(), Swatch::Dashed));
        }
        for s in &self.lines {
            let mut p: Vec<&Point> = s
                .points
                .iter()
                .filter(|p| (self.x_linear || p.x > 0.0) && p.y > 0.0)
                .collect();
            p.sort_by(|a, b| a.x.total_cmp(&b.x));
            let xy: Vec<(f64, f64)> = p.iter().map(|p| (x.at(p.x), y.at(p.y))).collect();
            if s.connect {
                svg.polyline(&xy, s.color);
            }
            for (pt, &xy) in p.iter().zip(&xy) {
                svg.circle(xy, s.color, pt.filled);
            }
            legend.push((
                s.color,
                s.name.clone(),
                if s.connect {
                    Swatch::Line
                } else {
                    Swatch::Marker
                },
            ));
        }
        // Legend, right of the plot.
        let lx = r + 18.0;
        for (i, (color, label, swatch)) in legend.iter().enumerate() {
            let ly = t + 8.0 + i as f64 * 22.0;
            match swatch {
                Swatch::Marker => svg.circle((lx + 13.0, ly), color, true),
                s => svg.line((lx, ly), (lx + 26.0, ly), color, *s == Swatch::Dashed),
            }
            svg.text((lx + 32.0, ly + 4.0), label, 11, "start", false);
        }
        let ly = t + 8.0 + legend.len() as f64 * 22.0 + 8.0;
        for (i, part) in self.marker_note.split('\n').enumerate() {
            svg.text((lx, ly + i as f64 * 15.0), part, 10, "start", false);
        }
        svg.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_cover_the_range_in_1_2_5_steps() {
        assert_eq!(ticks(3.0, 40.0), vec![2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(ticks(1000.0, 4000.0), vec![1000.0, 2000.0, 5000.0]);
        assert_eq!(ticks(25_000.0, 400_000.0)[0], 20_000.0);
        assert_eq!(*ticks(25_000.0, 400_000.0).last().unwrap(), 500_000.0);
    }

    #[test]
    fn linear_ticks_start_at_zero_in_round_steps() {
        assert_eq!(
            linear_ticks(10.0),
            (0..=10).map(f64::from).collect::<Vec<_>>()
        );
        assert_eq!(
            linear_ticks(33.0),
            vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0]
        );
        assert_eq!(*linear_ticks(600.0).last().unwrap(), 600.0);
        assert!(linear_ticks(600.0).len() <= 11);
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(400_000.0), "400k");
        assert_eq!(short(0.5), "0.5");
        assert_eq!(short(30.0), "30");
        assert_eq!(short(2_000_000.0), "2M");
    }

    #[test]
    fn renders_escaped_well_formed_svg() {
        let c = Chart {
            title: "a < b & c".into(),
            subtitle: String::new(),
            x_label: "x".into(),
            y_label: "ms".into(),
            lines: vec![Line {
                name: "p99".into(),
                color: "#000",
                points: vec![
                    Point {
                        x: 1000.0,
                        y: 12.0,
                        filled: true,
                    },
                    Point {
                        x: 2000.0,
                        y: 50.0,
                        filled: false,
                    },
                ],
                connect: true,
            }],
            threshold: Some((30.0, "30 ms".into())),
            marker: Some((1500.0, "capacity".into())),
            marker_note: "filled: pass\nopen: fail".into(),
            x_linear: false,
        };
        let s = c.to_svg();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("a &lt; b &amp; c"));
        assert_eq!(s.matches("<circle").count(), 2);
        assert_eq!(s.matches("<polyline").count(), 1);
    }
}
