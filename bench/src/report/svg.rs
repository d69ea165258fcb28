//! Latency-by-percentile plots as SVG, one file per scenario with a panel per cell.

use std::fmt::Write as _;

use crate::model::target::{is_baseline, own_name};

/// Each target's colour in every plot.
pub fn target_color(t: &str) -> &'static str {
    match t {
        "fixed" => "#d62728",
        "heap" => "#1f77b4",
        "ring" => "#ff7f0e",
        "busy" => "#8c564b",
        "direct" => "#2ca02c",
        "haproxy" => "#9467bd",
        _ => "#7f7f7f",
    }
}

/// One panel of an SVG: a title and one line per target of (percentile, µs) points.
pub struct Panel {
    pub title: String,
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

// The page's geometry: its width, each panel's height, the margins (the right one holds the
// legend), and the space below each panel.
const WIDTH: f64 = 820.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 50.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const BOTTOM: f64 = 50.0;
/// The plot's width.
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;

/// Latency by percentile, HdrHistogram style: x = log10(1/(1-p)) labelled
/// 0%, 90%, 99%, ...; y = latency on a log scale. Panels stack vertically.
pub fn svg(title: &str, panels: &[Panel]) -> String {
    let (w, ph, top, bottom) = (WIDTH, PANEL_H, TOP, BOTTOM);
    let total_h = top + panels.len() as f64 * (ph + bottom) + 10.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total_h}" viewBox="0 0 {w} {total_h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="16">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    for (i, p) in panels.iter().enumerate() {
        let f = Frame::of(p, top + i as f64 * (ph + bottom));
        f.title_and_box(&mut o, &p.title);
        f.x_grid(&mut o);
        f.y_grid(&mut o);
        f.lines_and_legend(&mut o, p);
    }
    o.push_str("</svg>\n");
    o
}

/// One panel's plot area and axis ranges: x in decades of "1 in N" up to `xmax`, y in
/// decades of µs from `ylo` to `yhi`.
struct Frame {
    y0: f64,
    plot_top: f64,
    inner_h: f64,
    xmax: f64,
    ylo: f64,
    yhi: f64,
}

impl Frame {
    /// The frame of panel `p` whose top is at `y0`: ranges that hold every point.
    fn of(p: &Panel, y0: f64) -> Frame {
        let mut xmax: f64 = 2.0;
        let (mut ymin, mut ymax) = (f64::INFINITY, 0.0f64);
        for (_, pts) in &p.lines {
            for &(q, v) in pts {
                if q < 1.0 {
                    xmax = xmax.max((1.0 / (1.0 - q)).log10());
                }
                ymin = ymin.min(v.max(1.0));
                ymax = ymax.max(v);
            }
        }
        let xmax = xmax.ceil().min(7.0);
        if !ymin.is_finite() {
            ymin = 1.0;
            ymax = 10.0;
        }
        let ylo = ymin.log10().floor();
        Frame {
            y0,
            plot_top: y0 + 20.0,
            inner_h: PANEL_H - 30.0,
            xmax,
            ylo,
            yhi: ymax.log10().ceil().max(ylo + 1.0),
        }
    }

    fn px(&self, q: f64) -> f64 {
        let x = if q >= 1.0 {
            self.xmax
        } else {
            (1.0 / (1.0 - q)).log10().min(self.xmax)
        };
        LEFT + x / self.xmax * PLOT_W
    }

    fn py(&self, v: f64) -> f64 {
        let y = (v.max(1.0).log10() - self.ylo) / (self.yhi - self.ylo);
        self.plot_top + self.inner_h - y * self.inner_h
    }

    fn title_and_box(&self, o: &mut String, title: &str) {
        let (left, pw, plot_top, inner_h) = (LEFT, PLOT_W, self.plot_top, self.inner_h);
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
            left + pw / 2.0,
            self.y0 + 12.0,
            esc(title)
        );
        let _ = writeln!(
            o,
            r##"<rect x="{left}" y="{plot_top}" width="{pw}" height="{inner_h}" fill="none" stroke="#333"/>"##
        );
    }

    /// X grid: 0%, 90%, 99%, ...
    fn x_grid(&self, o: &mut String) {
        let (left, pw, plot_top, inner_h) = (LEFT, PLOT_W, self.plot_top, self.inner_h);
        for k in 0..=(self.xmax as i32) {
            let x = left + k as f64 / self.xmax * pw;
            let label = match k {
                0 => "0%".to_string(),
                1 => "90%".to_string(),
                k => format!("99.{}%", "9".repeat((k - 2) as usize)).replace("99.%", "99%"),
            };
            let _ = writeln!(
                o,
                r##"<line x1="{x}" y1="{plot_top}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"##,
                plot_top + inner_h,
                plot_top + inner_h + 15.0
            );
        }
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">percentile (log "1 in N" scale)</text>"##,
            left + pw / 2.0,
            plot_top + inner_h + 30.0
        );
    }

    /// Y grid: decades with 2x and 5x marks.
    fn y_grid(&self, o: &mut String) {
        let (left, pw) = (LEFT, PLOT_W);
        let mut d = self.ylo;
        while d <= self.yhi {
            for m in [1.0, 2.0, 5.0] {
                let v = 10f64.powf(d) * m;
                if v.log10() > self.yhi + 1e-9 {
                    continue;
                }
                let y = self.py(v);
                let label = if v >= 1e6 {
                    format!("{}s", v / 1e6)
                } else if v >= 1e3 {
                    format!("{}ms", v / 1e3)
                } else {
                    format!("{v}µs")
                };
                let stroke = if m == 1.0 { "#ccc" } else { "#eee" };
                let _ = writeln!(
                    o,
                    r#"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="{stroke}"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"#,
                    left + pw,
                    left - 6.0,
                    y + 4.0
                );
            }
            d += 1.0;
        }
    }

    /// A line per target, and its legend entry right of the plot.
    fn lines_and_legend(&self, o: &mut String, p: &Panel) {
        for (j, (name, pts)) in p.lines.iter().enumerate() {
            // A baseline twin in its target's colour, dashed.
            let color = target_color(own_name(name));
            let dash = if is_baseline(name) {
                r#" stroke-dasharray="6 3""#
            } else {
                ""
            };
            let path: Vec<String> = pts
                .iter()
                .map(|&(q, v)| format!("{:.1},{:.1}", self.px(q), self.py(v)))
                .collect();
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                path.join(" ")
            );
            let ly = self.plot_top + 10.0 + j as f64 * 18.0;
            let lx = LEFT + PLOT_W + 15.0;
            let _ = writeln!(
                o,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                esc(name)
            );
        }
    }
}
