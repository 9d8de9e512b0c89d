//! Small SVG pieces the report draws with: escaping, number formats, a colour ramp, a heat
//! map and a bar chart. Everything is written as text; the page needs no script.

use std::fmt::Write as _;

/// `s` with the five XML special characters escaped (for text and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// A count with thousands separators: `1 234 567`.
pub fn num(n: u64) -> String {
    let s = n.to_string();
    let mut o = String::new();
    for (k, c) in s.chars().enumerate() {
        if k > 0 && (s.len() - k).is_multiple_of(3) {
            o.push('\u{202f}');
        }
        o.push(c);
    }
    o
}

/// A large figure in short form, three significant digits: `950`, `12.3k`, `4.56M`, `7.89G`,
/// `1.20e15`.
pub fn short(x: f64) -> String {
    let a = x.abs();
    let sig = |v: f64, unit: &str| {
        let d = if v.abs() >= 100.0 {
            0
        } else if v.abs() >= 10.0 {
            1
        } else {
            2
        };
        format!("{v:.d$}{unit}")
    };
    if a < 1e3 {
        if x.fract() == 0.0 {
            format!("{x:.0}")
        } else {
            sig(x, "")
        }
    } else if a < 1e6 {
        sig(x / 1e3, "k")
    } else if a < 1e9 {
        sig(x / 1e6, "M")
    } else if a < 1e12 {
        sig(x / 1e9, "G")
    } else {
        format!("{x:.2e}")
    }
}

/// Seconds in the unit that reads best: `850 µs`, `12.3 ms`, `1.25 s`.
pub fn secs(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

/// A colour of the sequential ramp (pale yellow through green to dark blue) at `t` in [0, 1].
pub fn ramp(t: f64) -> String {
    const STOPS: [(f64, f64, f64); 5] = [
        (255.0, 247.0, 188.0),
        (161.0, 218.0, 180.0),
        (65.0, 182.0, 196.0),
        (34.0, 94.0, 168.0),
        (8.0, 29.0, 88.0),
    ];
    let t = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let k = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - k as f64;
    let (a, b) = (STOPS[k], STOPS[k + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// One of eight distinct colours for fused group `k`.
pub fn group_colour(k: usize) -> &'static str {
    const C: [&str; 8] = [
        "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2", "#edc948", "#9c755f",
    ];
    C[k % C.len()]
}

/// A square matrix of words between groups of ranks, to be drawn as a heat map.
pub struct Heat {
    /// Labels of the rows (senders).
    pub rows: Vec<String>,
    /// Labels of the columns (receivers).
    pub cols: Vec<String>,
    /// `cells[row][col]`: words from the row's ranks to the column's ranks.
    pub cells: Vec<Vec<u64>>,
}

/// The heat map of `h` as an `<svg class="heatmap">` with `attrs` added to the element: rows
/// are senders, columns receivers, each cell's colour its words on a linear scale to the
/// largest cell (with the figure in its tooltip); empty cells are left blank.
pub fn heat_map(h: &Heat, attrs: &str) -> String {
    let (nr, nc) = (h.rows.len(), h.cols.len());
    let cell = (250.0 / nr.max(nc).max(1) as f64).clamp(4.0, 30.0);
    let lab = h
        .rows
        .iter()
        .chain(&h.cols)
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(1) as f64;
    let left = 30.0 + 6.0 * lab;
    let top = 30.0 + 4.5 * lab;
    let w = left + cell * nc as f64 + 80.0;
    let hgt = top + cell * nr as f64 + 30.0;
    let max = h.cells.iter().flatten().copied().max().unwrap_or(0);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="heatmap" {attrs} width="{w:.0}" height="{hgt:.0}" viewBox="0 0 {w:.0} {hgt:.0}" role="img">"#
    );
    let _ = write!(
        o,
        r##"<rect x="{left}" y="{top}" width="{:.0}" height="{:.0}" fill="#f4f4f4" stroke="#ccc"/>"##,
        cell * nc as f64,
        cell * nr as f64
    );
    let every = label_step(nr.max(nc), cell);
    for (r, row) in h.cells.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            if v == 0 {
                continue;
            }
            let x = left + c as f64 * cell;
            let y = top + r as f64 * cell;
            let _ = write!(
                o,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{cell:.1}" height="{cell:.1}" fill="{}"><title>{} → {}: {} words</title></rect>"#,
                ramp(v as f64 / max.max(1) as f64),
                esc(&h.rows[r]),
                esc(&h.cols[c]),
                num(v)
            );
        }
    }
    for (r, l) in h.rows.iter().enumerate().filter(|(r, _)| r % every == 0) {
        let y = top + (r as f64 + 0.5) * cell + 4.0;
        let _ = write!(
            o,
            r#"<text x="{:.0}" y="{y:.1}" class="tick" text-anchor="end">{}</text>"#,
            left - 4.0,
            esc(l)
        );
    }
    for (c, l) in h.cols.iter().enumerate().filter(|(c, _)| c % every == 0) {
        let x = left + (c as f64 + 0.5) * cell;
        let _ = write!(
            o,
            r#"<text x="{x:.1}" y="{:.0}" class="tick" transform="rotate(-50 {x:.1} {:.0})">{}</text>"#,
            top - 6.0,
            top - 6.0,
            esc(l)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{:.0}" y="14" class="axis" text-anchor="middle">receiving ranks →</text><text x="14" y="{:.0}" class="axis" text-anchor="middle" transform="rotate(-90 14 {:.0})">sending ranks →</text>"#,
        left + cell * nc as f64 / 2.0,
        top + cell * nr as f64 / 2.0,
        top + cell * nr as f64 / 2.0
    );
    if max == 0 {
        let _ = write!(
            o,
            r#"<text x="{:.0}" y="{:.0}" class="axis" text-anchor="middle">nothing crosses ranks</text>"#,
            left + cell * nc as f64 / 2.0,
            top + cell * nr as f64 / 2.0
        );
    } else {
        legend_ramp(&mut o, left + cell * nc as f64 + 12.0, top, max);
    }
    o.push_str("</svg>");
    o
}

/// Every how many rows a label fits at this cell size.
fn label_step(n: usize, cell: f64) -> usize {
    ((12.0 / cell).ceil() as usize).clamp(1, n.max(1))
}

/// A vertical colour legend from 0 to `max` words.
fn legend_ramp(o: &mut String, x: f64, y: f64, max: u64) {
    for k in 0..20 {
        let t = 1.0 - k as f64 / 19.0;
        let _ = write!(
            o,
            r#"<rect x="{x:.0}" y="{:.0}" width="10" height="6" fill="{}"/>"#,
            y + k as f64 * 6.0,
            ramp(t)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{:.0}" y="{:.0}" class="tick">{}</text><text x="{:.0}" y="{:.0}" class="tick">1</text>"#,
        x + 13.0,
        y + 7.0,
        short(max as f64),
        x + 13.0,
        y + 120.0
    );
}

/// One series of a bar chart: per bar the largest value and the smallest (equal when a bar is
/// one rank).
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Fill colour.
    pub colour: &'static str,
    /// Per bar `(min, max)`.
    pub values: Vec<(f64, f64)>,
}

/// A bar chart (`<svg class="bars">`): one group of bars per label, one bar per series
/// (its max; a bar whose min differs shows the min as a darker inner part), and an optional
/// horizontal reference line such as a bound or a budget.
pub fn bar_chart(labels: &[String], series: &[Series], reference: Option<(f64, &str)>) -> String {
    let n = labels.len().max(1);
    let ns = series.len().max(1);
    let slot = (760.0 / n as f64).clamp(6.0, 60.0);
    let bar = (slot * 0.8 / ns as f64).max(2.0);
    let (left, top, ph) = (70.0, 28.0, 180.0);
    let w = left + slot * n as f64 + 20.0;
    let h = top + ph + 70.0;
    let vmax = series
        .iter()
        .flat_map(|s| s.values.iter().map(|v| v.1))
        .chain(reference.map(|r| r.0))
        .fold(0.0, f64::max)
        .max(1e-300);
    let y = |v: f64| top + ph - ph * v / vmax;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="bars" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img">"#
    );
    for k in 0..=4 {
        let v = vmax * k as f64 / 4.0;
        let _ = write!(
            o,
            r##"<line x1="{left}" x2="{:.0}" y1="{:.1}" y2="{:.1}" stroke="#e3e3e3"/><text x="{:.0}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
            w - 20.0,
            y(v),
            y(v),
            left - 4.0,
            y(v) + 4.0,
            short(v)
        );
    }
    for (si, s) in series.iter().enumerate() {
        for (b, &(lo, hi)) in s.values.iter().enumerate() {
            let x = left + b as f64 * slot + slot * 0.1 + si as f64 * bar;
            let _ = write!(
                o,
                r#"<rect x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}" fill="{}" opacity="0.55"><title>{}: {}{}</title></rect>"#,
                y(hi),
                top + ph - y(hi),
                s.colour,
                esc(&labels[b.min(labels.len().saturating_sub(1))]),
                short(hi),
                if lo < hi {
                    format!(" (min {})", short(lo))
                } else {
                    String::new()
                }
            );
            let _ = write!(
                o,
                r#"<rect x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}" fill="{}"/>"#,
                y(lo),
                top + ph - y(lo),
                s.colour
            );
        }
    }
    let every = ((40.0 / slot).ceil() as usize).max(1);
    for (b, l) in labels.iter().enumerate().filter(|(b, _)| b % every == 0) {
        let x = left + (b as f64 + 0.5) * slot;
        let yy = top + ph + 12.0;
        let _ = write!(
            o,
            r#"<text x="{x:.1}" y="{yy:.0}" class="tick" text-anchor="end" transform="rotate(-40 {x:.1} {yy:.0})">{}</text>"#,
            esc(l)
        );
    }
    if let Some((v, name)) = reference {
        let _ = write!(
            o,
            r##"<line x1="{left}" x2="{:.0}" y1="{:.1}" y2="{:.1}" stroke="#c0392b" stroke-width="2" stroke-dasharray="6 3"/><text x="{:.0}" y="{:.1}" class="ref" text-anchor="end">{}</text>"##,
            w - 20.0,
            y(v),
            y(v),
            w - 22.0,
            y(v) - 4.0,
            esc(name)
        );
    }
    let mut lx = left;
    for s in series {
        let _ = write!(
            o,
            r#"<rect x="{lx:.0}" y="6" width="12" height="12" fill="{}"/><text x="{:.0}" y="16" class="tick">{}</text>"#,
            s.colour,
            lx + 16.0,
            esc(&s.name)
        );
        lx += 24.0 + 7.0 * s.name.chars().count() as f64;
    }
    o.push_str("</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formats() {
        assert_eq!(
            esc("ij,jk->ik <&>\"'"),
            "ij,jk-&gt;ik &lt;&amp;&gt;&quot;&#39;"
        );
        assert_eq!(num(1234567), "1\u{202f}234\u{202f}567");
        assert_eq!(num(12), "12");
        assert_eq!(short(950.0), "950");
        assert_eq!(short(12_300.0), "12.3k");
        assert_eq!(short(188_426.0), "188k");
        assert_eq!(short(4.5), "4.50");
        assert_eq!(secs(0.0123), "12.30 ms");
        assert_eq!(ramp(0.0), "#fff7bc");
        assert_eq!(ramp(1.0), "#081d58");
    }

    #[test]
    fn heat_map_draws_only_nonzero_cells() {
        let h = Heat {
            rows: vec!["0".into(), "1".into()],
            cols: vec!["0".into(), "1".into()],
            cells: vec![vec![0, 5], vec![3, 0]],
        };
        let s = heat_map(&h, r#"data-step="1""#);
        assert!(s.starts_with(r#"<svg class="heatmap" data-step="1""#));
        assert_eq!(s.matches("<title>").count(), 2);
        assert!(s.contains("0 → 1: 5 words"));
    }
}
