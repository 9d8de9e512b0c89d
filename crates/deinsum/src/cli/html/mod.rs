//! `--html FILE`: a plan (and a run of it) as one self-contained HTML page, inline SVG and CSS,
//! no script and nothing fetched. It reads for P from 1 to 10⁶: beyond a few dozen ranks the
//! per-rank pictures group consecutive ranks into blocks, and beyond a few thousand they
//! evaluate a stated sample of ranks (every figure drawn is exact for the ranks it is about).

mod plan_view;
pub mod ranks;
mod run_view;
pub mod svg;

use deinsum_exec::RunReport;
use deinsum_plan::{Plan, PlanStep};
use std::fmt::Write as _;
use svg::{esc, num, secs, short};

pub use plan_view::{grid_svg, move_heat, moves, MoveRef};

/// What a page shows besides the plan.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// The path strategy the plan was made with (shown in the header), if known.
    pub strategy: Option<String>,
    /// Predicted seconds of each plan step (a machine model's), when the plan has them; the
    /// predicted-time section is left out without them.
    pub predicted_seconds: Option<Vec<f64>>,
}

/// The page of a plan: header, tree, groups with their grids, moves with their heat maps,
/// per-rank charts, and the predicted time per step when [`Extras::predicted_seconds`] is set.
pub fn plan_page(plan: &Plan, extras: &Extras) -> String {
    let mut body = header(plan, extras);
    body.push_str(&plan_sections(plan, extras));
    page(&format!("deinsum plan: {}", plan.expression), &body)
}

/// The page of a run: the plan's page with the run's timeline and its measured figures beside
/// the predicted ones first. `reports` are every rank's, in rank order.
pub fn run_page(plan: &Plan, extras: &Extras, reports: &[RunReport]) -> String {
    let mut body = header(plan, extras);
    let _ = write!(
        body,
        "<section id=\"timeline\"><h2>Run: timeline</h2>{}</section><section id=\"measured\"><h2>Run: measured against \
         predicted</h2>{}</section>",
        run_view::timeline(plan, reports),
        run_view::versus(plan, reports, extras.predicted_seconds.as_deref())
    );
    body.push_str(&plan_sections(plan, extras));
    page(&format!("deinsum run: {}", plan.expression), &body)
}

/// Writes `html` to `path`; the error names the file.
pub fn write_file(path: &std::path::Path, html: &str) -> anyhow::Result<()> {
    std::fs::write(path, html).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// The sections every page has.
fn plan_sections(plan: &Plan, extras: &Extras) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<section id=\"tree\"><h2>Contraction tree and fused groups</h2><div class=\"scroll\">{}</div>{}\
         </section><section id=\"groups\"><h2>Groups: process grids and blocks</h2>{}</section>\
         <section id=\"moves\"><h2>Moves</h2><p class=\"muted\">Each move's kind is the collective it is; \
         the heat map gives the words each sending rank (row) sends each receiving rank \
         (column).</p>{}</section><section id=\"per-rank\"><h2>Per rank</h2>{}</section>",
        plan_view::tree(plan),
        steps_table(plan, extras),
        plan_view::groups(plan),
        plan_view::moves_section(plan),
        plan_view::per_rank(plan)
    );
    if let Some(t) = &extras.predicted_seconds {
        o.push_str(&predicted_time(plan, t));
    }
    o
}

/// The title block and the plan's totals.
fn header(plan: &Plan, extras: &Extras) -> String {
    let ext = plan.einsum.extent_labels();
    let p = &plan.prediction;
    let mut o = String::new();
    let _ = write!(
        o,
        "<header><h1><code>{}</code></h1><p>extents {} · P = {} ranks ({} compute) · memory per \
         rank {}{} · {} fused group(s), {} steps</p></header><section class=\"cards\">",
        esc(&plan.expression),
        esc(&ext.join(", ")),
        num(plan.procs as u64),
        num(plan.ranks_used as u64),
        plan.mem
            .map_or("unlimited".into(), |m| format!("{} words", num(m))),
        extras
            .strategy
            .as_ref()
            .map_or(String::new(), |s| format!(" · path {}", esc(s))),
        plan.groups.len(),
        plan.steps.len()
    );
    let cards = [
        ("words received, busiest rank", num(p.max_per_rank)),
        ("words moved, all ranks", num(p.total)),
        ("per-rank I/O / SOAP bound", format!("{:.3}", p.ratio)),
        ("peak memory per rank", num(p.max_peak_memory)),
    ];
    for (k, v) in cards {
        let _ = write!(
            o,
            "<div class=\"card\"><div class=\"v\">{v}</div><div class=\"k\">{k}</div></div>"
        );
    }
    o.push_str("</section>");
    if let Some(idle) = &plan.idle {
        let _ = write!(o, "<p class=\"muted\">idle ranks: {}</p>", esc(idle));
    }
    o
}

/// The steps of the plan in order with their einsum, FLOPs (compute steps) and words.
fn steps_table(plan: &Plan, extras: &Extras) -> String {
    let mut o = String::from(
        "<table><tr><th>#</th><th>step</th><th>tensor / group</th><th>what</th>\
         <th>words max/rank</th><th>words total</th>",
    );
    let times = extras.predicted_seconds.as_deref();
    if times.is_some() {
        o.push_str("<th>predicted time</th>");
    }
    o.push_str("</tr>");
    let name = |id: usize| plan.tensor(id).map_or(format!("#{id}"), |t| t.name.clone());
    for (k, s) in plan.steps.iter().enumerate() {
        let (kind, what, who) = match s {
            PlanStep::Load { tensor, .. } => ("load", String::new(), name(*tensor)),
            PlanStep::Redistribute {
                tensor,
                pattern,
                from,
                sum,
                ..
            } => (
                if *sum { "reduce" } else { "move" },
                pattern.display(&from.grid).to_string(),
                name(*tensor),
            ),
            PlanStep::Compute { group } => (
                "compute",
                group_einsum(plan, *group),
                format!("group {group}"),
            ),
            PlanStep::ComputePhase { group, phase, .. } => (
                "compute phase",
                format!("phase {phase}: {}", group_einsum(plan, *group)),
                format!("group {group}"),
            ),
            PlanStep::Free { tensor } => ("free", String::new(), name(*tensor)),
        };
        let (mx, tot) = s.volume().map_or((String::new(), String::new()), |v| {
            (num(v.max_per_rank), num(v.total))
        });
        let _ = write!(
            o,
            "<tr><td class=\"n\">{k}</td><td>{kind}</td><td>{}</td><td>{}</td><td class=\"n\">{mx}</td><td class=\"n\">{tot}</td>",
            esc(&who),
            esc(&what)
        );
        if let Some(t) = times {
            let _ = write!(
                o,
                "<td class=\"n\">{}</td>",
                t.get(k).map_or(String::new(), |&x| secs(x))
            );
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>");
    o
}

/// A group's einsum with its FLOPs: `ijk,ja,ka->ia (1.2M FLOPs)`.
fn group_einsum(plan: &Plan, group: usize) -> String {
    plan.groups.get(group).map_or(String::new(), |g| {
        format!(
            "{} ({} multiply-adds)",
            g.group.einsum_string(),
            short(g.group.volume)
        )
    })
}

/// The predicted time of each step as bars.
fn predicted_time(plan: &Plan, t: &[f64]) -> String {
    let labels: Vec<String> = (0..plan.steps.len()).map(|k| format!("step {k}")).collect();
    let values: Vec<(f64, f64)> = (0..plan.steps.len())
        .map(|k| t.get(k).map_or((0.0, 0.0), |&x| (x * 1e3, x * 1e3)))
        .collect();
    format!(
        "<section id=\"predicted-time\"><h2>Predicted time per step</h2>{}<p class=\"muted\">milliseconds, from the \
         plan's machine model; {} in all.</p></section>",
        svg::bar_chart(
            &labels,
            &[svg::Series {
                name: "predicted [ms]".into(),
                colour: "#76b7b2",
                values
            }],
            None
        ),
        secs(t.iter().sum())
    )
}

/// The page around `body`, with its style sheet.
fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{}</style></head>\
         <body>{body}<footer>deinsum {} · self-contained page: inline SVG and CSS, no script</footer>\
         </body></html>\n",
        esc(title),
        STYLE,
        env!("CARGO_PKG_VERSION")
    )
}

/// The page's style sheet.
const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;margin:0 auto;\
max-width:1180px;padding:16px 24px;background:#fafafa}\
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:2px solid #4e79a7;padding-bottom:4px;\
margin-top:28px}h3{font-size:15px;margin:18px 0 6px}code{font-family:ui-monospace,Menlo,Consolas,monospace;\
background:#eef1f5;padding:1px 4px;border-radius:3px}\
section{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:4px 18px 14px;margin:14px 0}\
.cards{display:flex;gap:12px;flex-wrap:wrap;background:none;border:none;padding:0}\
.card{background:#fff;border:1px solid #e3e3e3;border-radius:8px;padding:10px 16px;min-width:180px}\
.card .v{font-size:20px;font-weight:600}.card .k{color:#666;font-size:12px}\
.muted{color:#666;font-size:12.5px}.scroll{overflow-x:auto}\
.row{display:flex;gap:20px;flex-wrap:wrap;align-items:flex-start}\
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border-bottom:1px solid #eee;\
padding:3px 8px;text-align:left}th{background:#f3f5f8}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px}\
.group{border-top:1px dashed #ddd;padding-top:4px}\
.moves{display:flex;flex-wrap:wrap;gap:14px}.move{border:1px solid #eee;border-radius:6px;\
padding:0 12px 6px;width:345px}.move h3{font-size:13.5px}.small{font-size:12.5px;margin:4px 0}\
svg text{font-family:system-ui,sans-serif}svg .tick{font-size:10px;fill:#555}\
svg .axis{font-size:11.5px;fill:#333}svg .ref{font-size:11px;fill:#c0392b}\
svg .node{font-size:11px;fill:#222}svg .nodehead{font-size:11px;font-weight:600;fill:#222}\
.diff{color:#c0392b;font-weight:600}footer{color:#888;font-size:12px;margin:20px 0}";
