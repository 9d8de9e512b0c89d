//! The run's sections of the report: a per-rank timeline of the last timed run, and each
//! step's measured words and time beside the plan's predictions.

use super::svg::{bar_chart, esc, num, secs, Series};
use deinsum_exec::{RunReport, StepKind, StepMeasure};
use deinsum_plan::Plan;
use std::fmt::Write as _;

/// Most rows of the timeline (ranks beyond are left out, and the page says so).
const MAX_ROWS: usize = 256;

/// Colour and legend text of a step kind in the timeline.
fn style(kind: StepKind) -> (&'static str, &'static str) {
    match kind {
        StepKind::Compute => ("#4e79a7", "compute"),
        StepKind::ComputePhase => ("url(#phase)", "compute phase (fetch, then compute)"),
        StepKind::Redistribute => ("#f28e2b", "communication (redistribution)"),
        StepKind::Load => ("#bab0ac", "load (placing the input blocks)"),
        StepKind::Free => ("#d9d9d9", "free"),
    }
}

/// For each rank and moving step, when the last of the rank's senders entered the step (only
/// for P up to [`MAX_ROWS`]: the senders come from each rank's derived transfers).
fn last_sender_start(plan: &Plan, reports: &[RunReport]) -> Vec<Vec<Option<f64>>> {
    let p = reports.len();
    let mut out = vec![vec![None; plan.steps.len()]; p];
    if p > MAX_ROWS {
        return out;
    }
    let start = |q: usize, s: usize| reports.get(q).and_then(|r| r.steps.get(s)).map(|m| m.start);
    for s in 0..plan.steps.len() {
        let views = plan.step_moves(s);
        if views.is_empty() {
            continue;
        }
        for (r, row) in out.iter_mut().enumerate() {
            let last = views
                .iter()
                .flat_map(|v| v.receives(r))
                .filter(|t| t.src != r)
                .filter_map(|t| start(t.src, s))
                .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
            row[s] = last;
        }
    }
    out
}

/// The timeline of the last timed run (`<svg class="timeline">`, one `<g class="timeline-row">`
/// per rank): each step a bar from its start to its end on the rank's clock, which starts when
/// the rank leaves the barrier that begins the run.
pub fn timeline(plan: &Plan, reports: &[RunReport]) -> String {
    let rows = reports.len().min(MAX_ROWS);
    let end = reports
        .iter()
        .flat_map(|r| r.steps.iter().map(|m| m.end))
        .fold(0.0, f64::max)
        .max(1e-9);
    let rh = (480.0 / rows.max(1) as f64).clamp(3.0, 22.0);
    let (left, top, pw) = (70.0, 44.0, 980.0);
    let w = left + pw + 20.0;
    let h = top + rh * rows as f64 + 40.0;
    let x = |t: f64| left + pw * t / end;
    let waits = last_sender_start(plan, reports);
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<svg class="timeline" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img"><defs><pattern id="phase" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#4e79a7"/><rect width="2" height="6" fill="#f28e2b"/></pattern><pattern id="wait" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="5" height="5" fill="#ffffff" fill-opacity="0.35"/><rect width="2" height="5" fill="#333" fill-opacity="0.55"/></pattern></defs>"##
    );
    for k in 0..=5 {
        let t = end * k as f64 / 5.0;
        let _ = write!(
            o,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{:.0}" y2="{:.0}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.0}" class="tick" text-anchor="{}">{}</text>"##,
            x(t),
            x(t),
            top - 4.0,
            top + rh * rows as f64,
            x(t),
            top + rh * rows as f64 + 14.0,
            if k == 5 { "end" } else { "middle" },
            secs(t)
        );
    }
    for (row, rep) in reports.iter().take(rows).enumerate() {
        let y = top + row as f64 * rh;
        let _ = write!(
            o,
            r#"<g class="timeline-row" data-rank="{}"><text x="{:.0}" y="{:.1}" class="tick" text-anchor="end">{}</text>"#,
            rep.rank,
            left - 6.0,
            y + rh * 0.5 + 3.5,
            if rh >= 9.0 || row % ((10.0 / rh).ceil() as usize).max(1) == 0 {
                format!("rank {}", rep.rank)
            } else {
                String::new()
            }
        );
        for m in &rep.steps {
            step_bar(&mut o, plan, m, (x(m.start), x(m.end.max(m.start)), y, rh));
            if m.blocked > 0.0 {
                // Only the total is measured, not where in the step it fell: drawn from the start.
                let _ = write!(
                    o,
                    r##"<rect class="waiting" x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="#222"><title>step {}: rank {} blocked {} of {} waiting for peers (measured)</title></rect>"##,
                    x(m.start),
                    y + rh * 0.6,
                    (x(m.start + m.blocked.min(m.end - m.start)) - x(m.start)).max(0.3),
                    (rh * 0.4 - 1.0).max(1.0),
                    m.step,
                    rep.rank,
                    secs(m.blocked),
                    secs(m.end - m.start)
                );
            }
            let lead = waits
                .get(rep.rank)
                .and_then(|w| w.get(m.step).copied().flatten());
            if let Some(last) = lead.filter(|&l| l > m.start) {
                let _ = write!(
                    o,
                    r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="url(#wait)"><title>step {}: the last of rank {}'s senders entered the step {} after it</title></rect>"#,
                    x(m.start),
                    y + 1.0,
                    (x(last.min(m.end)) - x(m.start)).max(0.0),
                    (rh - 2.0).max(1.0),
                    m.step,
                    rep.rank,
                    secs(last - m.start)
                );
            }
        }
        o.push_str("</g>");
    }
    legend(&mut o, left, 8.0);
    o.push_str("</svg>");
    let mut note = String::from(
        "The last timed run. Each rank's clock starts when it leaves the barrier that begins the \
         run; bars are plan steps. Hatched: the part of a step before the last of the rank's \
         senders entered it — the rank waited, or packed its own sends, during it (derived from \
         the ranks' step starts). Dark band: the time the rank was measured blocked in the step \
         waiting for peers (in-process: parked on a message or a collective; under MPI: blocking \
         receives and waits on point-to-point requests, while MPI's own collectives count as \
         communication), drawn from the step's start since only its total is recorded.",
    );
    if reports.len() > rows {
        let _ = write!(
            note,
            " The first {rows} of {} ranks are drawn, without the hatching.",
            reports.len()
        );
    }
    format!("{o}<p class=\"muted\">{}</p>", esc(&note))
}

/// One step's bar in a timeline row, with its figures in the tooltip.
fn step_bar(o: &mut String, plan: &Plan, m: &StepMeasure, (x0, x1, y, rh): (f64, f64, f64, f64)) {
    let (fill, what) = style(m.kind);
    let tensor = m
        .tensor
        .and_then(|t| plan.tensor(t))
        .map_or(String::new(), |t| format!(" {}", t.name));
    let _ = write!(
        o,
        r#"<rect x="{x0:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{fill}"><title>step {} {}{}: {} → {} ({}), {} words received, {} sent</title></rect>"#,
        y + 1.0,
        (x1 - x0).max(0.3),
        (rh - 2.0).max(1.0),
        m.step,
        what,
        esc(&tensor),
        secs(m.start),
        secs(m.end),
        secs(m.end - m.start),
        num(m.received),
        num(m.sent)
    );
}

/// The timeline's legend.
fn legend(o: &mut String, left: f64, y: f64) {
    let mut x = left;
    let kinds = [
        StepKind::Compute,
        StepKind::ComputePhase,
        StepKind::Redistribute,
        StepKind::Load,
    ];
    for k in kinds {
        let (fill, what) = style(k);
        let _ = write!(
            o,
            r#"<rect x="{x:.0}" y="{y:.0}" width="12" height="12" fill="{fill}"/><text x="{:.0}" y="{:.0}" class="tick">{what}</text>"#,
            x + 16.0,
            y + 10.0
        );
        x += 30.0 + 5.6 * what.len() as f64;
    }
    let _ = write!(
        o,
        r##"<rect x="{x:.0}" y="{y:.0}" width="12" height="12" fill="#f28e2b"/><rect x="{x:.0}" y="{y:.0}" width="12" height="12" fill="url(#wait)"/><text x="{:.0}" y="{:.0}" class="tick">before the last sender entered</text>"##,
        x + 16.0,
        y + 10.0
    );
    // The measured band on a second line: one line overflows the drawing's width.
    let (x, y) = (left, y + 14.0);
    let _ = write!(
        o,
        r##"<rect x="{x:.0}" y="{:.0}" width="12" height="6" fill="#222"/><text x="{:.0}" y="{:.0}" class="tick">waiting (measured)</text>"##,
        y + 6.0,
        x + 16.0,
        y + 10.0
    );
}

/// Per timed run, the slowest rank's time of step `s`: its median and minimum over the runs.
fn step_seconds(reports: &[RunReport], s: usize) -> (f64, f64) {
    let ms: Vec<&StepMeasure> = reports.iter().filter_map(|r| r.steps.get(s)).collect();
    let runs = ms.iter().map(|m| m.samples.len()).max().unwrap_or(0);
    let mut per_run: Vec<f64> = (0..runs)
        .map(|k| {
            ms.iter()
                .filter_map(|m| m.samples.get(k))
                .fold(0.0, |a, &b| f64::max(a, b))
        })
        .collect();
    if per_run.is_empty() {
        per_run.push(ms.iter().map(|m| m.seconds).fold(0.0, f64::max));
    }
    per_run.sort_by(f64::total_cmp);
    let n = per_run.len();
    let median = if n % 2 == 1 {
        per_run[n / 2]
    } else {
        (per_run[n / 2 - 1] + per_run[n / 2]) / 2.0
    };
    (median, per_run[0])
}

/// Each step's measured words and time beside the plan's predictions, as a table and bars.
pub fn versus(plan: &Plan, reports: &[RunReport], predicted: Option<&[f64]>) -> String {
    let mut o = String::from(
        "<table><tr><th>#</th><th>kind</th><th>tensor</th><th>time (median, slowest rank)</th>\
         <th>min</th>",
    );
    if predicted.is_some() {
        o.push_str("<th>predicted time</th>");
    }
    o.push_str(
        "<th>words max/rank measured</th><th>predicted</th><th>words total measured</th>\
         <th>predicted</th><th>every rank as planned</th></tr>",
    );
    let mut labels = Vec::new();
    let (mut meas_w, mut pred_w, mut meas_t, mut pred_t) = (vec![], vec![], vec![], vec![]);
    for (s, step) in plan.steps.iter().enumerate() {
        let ms: Vec<&StepMeasure> = reports.iter().filter_map(|r| r.steps.get(s)).collect();
        let kind = StepKind::of(step);
        let (med, min) = step_seconds(reports, s);
        let mmax = ms.iter().map(|m| m.received).max().unwrap_or(0);
        let mtot: u64 = ms.iter().map(|m| m.received).sum();
        let (pmax, ptot) = step.volume().map_or((0, 0), |v| (v.max_per_rank, v.total));
        let exact = ms
            .iter()
            .all(|m| m.sent == m.predicted_sent && m.received == m.predicted_received);
        let tensor = ms
            .first()
            .and_then(|m| m.tensor)
            .and_then(|t| plan.tensor(t))
            .map_or(String::new(), |t| t.name.clone());
        let _ = write!(
            o,
            "<tr><td class=\"n\">{s}</td><td>{kind}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
            esc(&tensor),
            secs(med),
            secs(min)
        );
        if let Some(p) = predicted {
            let _ = write!(
                o,
                "<td class=\"n\">{}</td>",
                p.get(s).map_or(String::new(), |&x| secs(x))
            );
        }
        let _ = write!(
            o,
            "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            num(mmax),
            num(pmax),
            num(mtot),
            num(ptot),
            if exact { "yes".to_string() } else { "<span class=\"diff\">DIFFERS</span>".into() }
        );
        labels.push(format!("{s} {kind}"));
        meas_w.push((mmax as f64, mmax as f64));
        pred_w.push((pmax as f64, pmax as f64));
        meas_t.push((med * 1e3, med * 1e3));
        let pt = predicted.and_then(|p| p.get(s)).map_or(0.0, |&x| x * 1e3);
        pred_t.push((pt, pt));
    }
    o.push_str("</table>");
    let _ = write!(
        o,
        "<h3>Words received by the busiest rank, per step</h3>{}",
        bar_chart(
            &labels,
            &[
                Series {
                    name: "measured".into(),
                    colour: "#4e79a7",
                    values: meas_w
                },
                Series {
                    name: "predicted".into(),
                    colour: "#f28e2b",
                    values: pred_w
                },
            ],
            None
        )
    );
    let mut series = vec![Series {
        name: "measured [ms]".into(),
        colour: "#4e79a7",
        values: meas_t,
    }];
    if predicted.is_some() {
        series.push(Series {
            name: "predicted [ms]".into(),
            colour: "#76b7b2",
            values: pred_t,
        });
    }
    let _ = write!(
        o,
        "<h3>Time per step (slowest rank, median over the timed runs)</h3>{}<p class=\"muted\">{} \
         timed run(s); {} thread(s) per rank; times on this machine are noisy, ratios between \
         steps of one run are what to read.</p>",
        bar_chart(&labels, &series, None),
        reports
            .first()
            .and_then(|r| r.steps.first())
            .map_or(1, |m| m.samples.len().max(1)),
        reports.first().map_or(1, |r| r.threads.max(1))
    );
    o
}
