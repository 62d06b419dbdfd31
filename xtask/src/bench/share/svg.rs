//! The plots the share benchmark writes under `docs/` (SVG written by hand).

use anyhow::{Context, Result};
use std::path::Path;
/// A line plot of shares (0–100 %) over time, written by hand.
pub(super) fn write_svg(
    path: &Path,
    title: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    marks: &[(f64, &str)],
) -> Result<()> {
    let (w, h, l, r, t, b) = (800.0, 360.0, 50.0, 20.0, 30.0, 40.0);
    let tmax = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let x = |v: f64| l + (w - l - r) * v / tmax;
    let y = |v: f64| t + (h - t - b) * (1.0 - v.clamp(0.0, 1.0));
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{l}\" y=\"18\" font-size=\"14\">{title}</text>\n"
    );
    for k in 0..=10 {
        let v = k as f64 / 10.0;
        s += &format!(
            "<line x1=\"{l}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}%</text>\n",
            w - r,
            y(v),
            y(v),
            l - 4.0,
            y(v) + 4.0,
            k * 10
        );
    }
    let mut sec = 0.0;
    while sec <= tmax {
        s += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{sec:.0}s</text>\n",
            x(sec),
            h - b + 16.0
        );
        sec += 1.0;
    }
    for (tm, label) in marks {
        s += &format!(
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{t}\" y2=\"{1}\" stroke=\"#999\" stroke-dasharray=\"4 3\"/><text x=\"{2:.1}\" y=\"{3}\">{label}</text>\n",
            x(*tm),
            h - b,
            x(*tm) + 3.0,
            t + 12.0
        );
    }
    for (k, (name, pts)) in series.iter().enumerate() {
        let c = colors[k % colors.len()];
        let d: Vec<String> = pts
            .iter()
            .map(|(a, v)| format!("{:.1},{:.1}", x(*a), y(*v)))
            .collect();
        s += &format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\" fill=\"{c}\">{name}</text>\n",
            d.join(" "),
            w - r - 120.0,
            t + 16.0 + 14.0 * k as f64
        );
    }
    s += "</svg>\n";
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}
