//! Latency-by-percentile plots as SVG, one file per scenario with a panel per cell.

use std::fmt::Write as _;

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

/// Latency by percentile, HdrHistogram style: x = log10(1/(1-p)) labelled
/// 0%, 90%, 99%, ...; y = latency on a log scale. Panels stack vertically.
pub fn svg(title: &str, panels: &[Panel]) -> String {
    let (w, ph, top, left, right, bottom) = (820.0, 300.0, 50.0, 80.0, 150.0, 50.0);
    let pw = w - left - right;
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
        let y0 = top + i as f64 * (ph + bottom);
        let inner_h = ph - 30.0;
        let plot_top = y0 + 20.0;
        // Axis ranges.
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
        let yhi = ymax.log10().ceil().max(ylo + 1.0);
        let px = |q: f64| -> f64 {
            let x = if q >= 1.0 {
                xmax
            } else {
                (1.0 / (1.0 - q)).log10().min(xmax)
            };
            left + x / xmax * pw
        };
        let py = |v: f64| -> f64 {
            let y = (v.max(1.0).log10() - ylo) / (yhi - ylo);
            plot_top + inner_h - y * inner_h
        };
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
            left + pw / 2.0,
            y0 + 12.0,
            esc(&p.title)
        );
        let _ = writeln!(
            o,
            r##"<rect x="{left}" y="{plot_top}" width="{pw}" height="{inner_h}" fill="none" stroke="#333"/>"##
        );
        // X grid: 0%, 90%, 99%, ...
        for k in 0..=(xmax as i32) {
            let x = left + k as f64 / xmax * pw;
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
        // Y grid: decades with 2x and 5x marks.
        let mut d = ylo;
        while d <= yhi {
            for m in [1.0, 2.0, 5.0] {
                let v = 10f64.powf(d) * m;
                if v.log10() > yhi + 1e-9 {
                    continue;
                }
                let y = py(v);
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
        // Lines and legend.
        for (j, (name, pts)) in p.lines.iter().enumerate() {
            let color = target_color(name);
            let path: Vec<String> = pts
                .iter()
                .map(|&(q, v)| format!("{:.1},{:.1}", px(q), py(v)))
                .collect();
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            let ly = plot_top + 10.0 + j as f64 * 18.0;
            let lx = left + pw + 15.0;
            let _ = writeln!(
                o,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                esc(name)
            );
        }
    }
    o.push_str("</svg>\n");
    o
}
