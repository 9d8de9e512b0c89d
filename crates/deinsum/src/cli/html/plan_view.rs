//! The plan's sections of the report: the contraction tree with its fused groups, each
//! group's process grid and the blocks one rank holds, each move with a heat map of its words,
//! and the per-rank words, I/O and memory.

use super::ranks::{fold, sample, sample_note, Buckets};
use super::svg::{bar_chart, esc, group_colour, heat_map, num, short, Heat, Series};
use deinsum_path::{NodeId, StepId};
use deinsum_plan::{block_len, Grid, Interval, MoveView, Plan, PlanStep};
use std::fmt::Write as _;

/// Most rows and columns of a heat map, and most bars of a per-rank chart.
const MAX_CELLS: usize = 48;
/// Up to this P a heat map sums the derived transfers of every receiving rank; beyond it the
/// columns are one sampled receiver per block.
const HEAT_ALL_RECEIVERS: usize = 4096;

/// Node id → fused group of the step it is (`None` for inputs).
fn group_of(plan: &Plan, step: usize) -> Option<usize> {
    plan.groups
        .iter()
        .position(|g| g.group.steps.contains(&step))
}

/// The contraction tree as an SVG: inputs at the bottom, each step a box (its einsum and
/// FLOPs) coloured by its fused group, the root at the top.
pub fn tree(plan: &Plan) -> String {
    let t = &plan.tree;
    let n = t.num_inputs;
    let total = t.num_nodes();
    let mut x = vec![0.0f64; total];
    let mut depth = vec![0usize; total];
    let mut next = 0.0;
    if !t.steps.is_empty() {
        place(plan, t.root(), 0, &mut next, &mut x, &mut depth);
    } else {
        for (k, xk) in x.iter_mut().enumerate() {
            *xk = k as f64;
        }
        next = n as f64;
    }
    let flops = deinsum_path::evaluate(&plan.einsum, t.clone(), &deinsum_path::Flops, "plan");
    let levels = depth.iter().copied().max().unwrap_or(0) + 1;
    let (bw, bh, dx, dy) = (176.0, 50.0, 190.0, 84.0);
    let w = (next.max(1.0)) * dx + 20.0;
    let h = levels as f64 * dy + 20.0;
    let cx = |id: NodeId| 10.0 + x[id.index()] * dx + dx / 2.0;
    let cy = |id: NodeId| 10.0 + depth[id.index()] as f64 * dy + bh / 2.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="tree" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" role="img">"#
    );
    for (s, st) in t.steps.iter().enumerate() {
        let made = t.node_of(StepId(s));
        for &c in &st.operands {
            let _ = write!(
                o,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#999"/>"##,
                cx(made),
                cy(made) + bh / 2.0,
                cx(c),
                cy(c) - bh / 2.0
            );
        }
    }
    for k in 0..n {
        let idx: String = t.leaf_indices[k].iter().collect();
        let shape: Vec<String> = t.leaf_indices[k]
            .iter()
            .map(|c| t.extents.get(c).copied().unwrap_or(1).to_string())
            .collect();
        let name = plan.tensor(k).map_or(format!("T{k}"), |t| t.name.clone());
        node(
            &mut o,
            (cx(NodeId(k)) - bw / 2.0, cy(NodeId(k)) - bh / 2.0, bw, bh),
            "#ffffff",
            &[format!("{name} ({idx})"), shape.join("×")],
        );
    }
    for (s, st) in t.steps.iter().enumerate() {
        let g = group_of(plan, s);
        let f = flops.steps.get(s).map_or(0.0, |i| i.flops.as_f64());
        let fill = g.map_or("#dddddd", group_colour);
        let made = t.node_of(StepId(s));
        node(
            &mut o,
            (cx(made) - bw / 2.0, cy(made) - bh / 2.0, bw, bh),
            fill,
            &[
                format!(
                    "step {s} · group {}",
                    g.map_or("-".into(), |g| g.to_string())
                ),
                st.einsum_string(),
                format!("{} FLOPs", short(f)),
            ],
        );
    }
    o.push_str("</svg>");
    o
}

/// Places node `id` and its subtree: leaves left to right, a step above the middle of its
/// operands.
fn place(plan: &Plan, id: NodeId, d: usize, next: &mut f64, x: &mut [f64], depth: &mut [usize]) {
    depth[id.index()] = d;
    let Some(step) = plan.tree.step_of(id) else {
        x[id.index()] = *next;
        *next += 1.0;
        return;
    };
    let ops = &plan.tree.steps[step.index()].operands;
    for &c in ops {
        place(plan, c, d + 1, next, x, depth);
    }
    x[id.index()] = ops.iter().map(|c| x[c.index()]).sum::<f64>() / ops.len().max(1) as f64;
}

/// A box with lines of text (the first bold), long lines cut with their whole text in the
/// tooltip.
fn node(o: &mut String, (x, y, w, h): (f64, f64, f64, f64), fill: &str, lines: &[String]) {
    let full = lines.join("\n");
    let _ = write!(
        o,
        r##"<g><title>{}</title><rect x="{x:.1}" y="{y:.1}" width="{w:.0}" height="{h:.0}" rx="6" fill="{fill}" fill-opacity="0.25" stroke="{}" stroke-width="1.5"/>"##,
        esc(&full),
        if fill == "#ffffff" { "#888" } else { fill }
    );
    for (k, l) in lines.iter().enumerate() {
        let cut: String = if l.chars().count() > 26 {
            l.chars().take(25).chain(std::iter::once('…')).collect()
        } else {
            l.clone()
        };
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="{}">{}</text>"#,
            x + w / 2.0,
            y + 15.0 + 14.0 * k as f64,
            if k == 0 { "nodehead" } else { "node" },
            esc(&cut)
        );
    }
    o.push_str("</g>");
}

/// Most rows and columns of cells a grid drawing shows.
const GRID_CELLS: usize = 32;

/// The rank a group's drawing highlights: the middle of the drawn part of its grid.
fn marked_rank(grid: &Grid) -> usize {
    let (rows, cols, _) = grid_shape(grid);
    let r = (rows / 2).min(GRID_CELLS / 2);
    let c = (cols / 2).min(GRID_CELLS / 2);
    r * cols + c
}

/// The grid drawn as rows × columns: the first `h` dims make the rows, the rest the columns,
/// `h` chosen so that the two are closest in size.
fn grid_shape(grid: &Grid) -> (usize, usize, usize) {
    let nd = grid.dims.len();
    let mut best = (1, grid.size(), 0);
    let mut best_gap = f64::INFINITY;
    for h in 0..=nd {
        let r: usize = grid.dims[..h].iter().map(|d| d.size).product();
        let c: usize = grid.dims[h..].iter().map(|d| d.size).product();
        let gap = ((r as f64).ln() - (c as f64).ln()).abs();
        if gap < best_gap - 1e-9 {
            best_gap = gap;
            best = (r, c, h);
        }
    }
    best
}

/// Group `k`'s process grid (`<svg class="grid">`): a cell per rank (at most 32 × 32 drawn),
/// rows and columns named by their indices and sizes, rank `mark` highlighted.
pub fn grid_svg(k: usize, grid: &Grid, mark: usize) -> String {
    let (rows, cols, h) = grid_shape(grid);
    let (rr, cc) = (rows.min(GRID_CELLS), cols.min(GRID_CELLS));
    let cell = (320.0 / rr.max(cc) as f64).clamp(8.0, 40.0);
    let rows_text = grid.dims[..h]
        .iter()
        .map(|d| format!("{}={}", d.index, d.size).len() + 3)
        .sum::<usize>();
    let left = (60.0 + 6.5 * rows_text as f64).max(110.0);
    let top = 46.0;
    let w = left + cell * cc as f64 + 30.0;
    let hh = top + cell * rr as f64 + 40.0;
    let name = |dims: &[deinsum_plan::GridDim]| -> String {
        let v: Vec<String> = dims
            .iter()
            .map(|d| format!("{}={}", d.index, d.size))
            .collect();
        if v.is_empty() {
            "1".into()
        } else {
            v.join(" × ")
        }
    };
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="grid" data-group="{k}" width="{w:.0}" height="{hh:.0}" viewBox="0 0 {w:.0} {hh:.0}" role="img">"#
    );
    let (mr, mc) = (mark / cols, mark % cols);
    for r in 0..rr {
        for c in 0..cc {
            let rank = r * cols + c;
            let fill = if (r, c) == (mr, mc) {
                group_colour(k)
            } else {
                "#eef1f5"
            };
            let _ = write!(
                o,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}" stroke="#fff"><title>rank {rank} {:?}</title></rect>"##,
                left + c as f64 * cell,
                top + r as f64 * cell,
                cell,
                cell,
                grid.coords(rank).unwrap_or_default()
            );
        }
    }
    let more = |n: usize, m: usize| {
        if n > m {
            format!(" ({m} of {n} drawn)")
        } else {
            String::new()
        }
    };
    let _ = write!(
        o,
        r#"<text x="{left}" y="18" class="axis">columns: {}{}</text><text x="{}" y="{:.0}" class="axis" text-anchor="end">rows: {}</text><text x="{}" y="{:.0}" class="tick" text-anchor="end">{}</text>"#,
        esc(&name(&grid.dims[h..])),
        more(cols, cc),
        left - 6.0,
        top + 12.0,
        esc(&name(&grid.dims[..h])),
        left - 6.0,
        top + 26.0,
        more(rows, rr).trim()
    );
    let _ = write!(
        o,
        r#"<text x="{left}" y="{:.0}" class="tick">highlighted: rank {mark}, coordinates {:?}</text>"#,
        top + cell * rr as f64 + 18.0,
        grid.coords(mark).unwrap_or_default()
    );
    o.push_str("</svg>");
    o
}

/// One section per fused group: its steps, grid drawing, figures, and the blocks the
/// highlighted rank holds.
pub fn groups(plan: &Plan) -> String {
    let mut o = String::new();
    for (k, g) in plan.groups.iter().enumerate() {
        let mark = marked_rank(&g.grid);
        let steps: Vec<String> = g
            .group
            .steps
            .iter()
            .map(|&s| format!("step {s}: {}", plan.tree.steps[s].einsum_string()))
            .collect();
        let _ = write!(
            o,
            r#"<div class="group"><h3><span class="swatch" style="background:{}"></span>group {k}: <code>{}</code></h3><p class="muted">{}</p><div class="row">{}<div>"#,
            group_colour(k),
            esc(&g.group.einsum_string()),
            esc(&steps.join("; ")),
            grid_svg(k, &g.grid, mark)
        );
        let splits: Vec<String> = g
            .grid
            .dims
            .iter()
            .filter(|d| d.size > 1)
            .map(|d| {
                let n = plan.einsum.extent(d.index);
                let b = Interval::new(0, n).max_block_len(d.size);
                format!("{} = {n} in {} blocks of {b}", d.index, d.size)
            })
            .collect();
        let _ = write!(
            o,
            "<p>grid on {} of {} ranks; {}; {} admissible grids considered</p>\
             <p>multiply-adds on the busiest rank {}; SOAP bound per rank {} (memory-independent {}, \
             memory-dependent {}); words received by the busiest rank for this group {}</p>",
            g.grid.size(),
            plan.procs,
            if splits.is_empty() { "no index split".into() } else { esc(&splits.join(", ")) },
            g.candidates_considered,
            short(g.max_flops_per_rank),
            short(g.bound_memory_independent.max(g.bound_memory_dependent)),
            short(g.bound_memory_independent),
            short(g.bound_memory_dependent),
            num(g.predicted_max_per_rank)
        );
        if let Some(ph) = &g.phases {
            let _ = write!(
                o,
                "<p>computed in {} phases along <code>{}</code> (2.5D: {} inputs rest without \
                 replicas and fetch one window per phase)</p>",
                ph.count,
                ph.index,
                ph.resting.len()
            );
        }
        o.push_str(&block_table(plan, g, mark));
        o.push_str("</div></div></div>");
    }
    o
}

/// The blocks rank `mark` holds of a group's inputs and output, with its iteration box.
fn block_table(plan: &Plan, g: &deinsum_plan::GroupPlan, mark: usize) -> String {
    let mut o = String::new();
    let idx = &g.group.indices;
    let ranges = g
        .iteration_box(&plan.einsum, mark, None)
        .unwrap_or_else(|| {
            let whole = |&c| Interval::new(0, plan.einsum.extent(c));
            idx.iter().map(whole).collect()
        });
    let bx: Vec<String> = idx
        .iter()
        .zip(ranges)
        .map(|(c, r)| format!("{c} ∈ [{}, {})", r.start, r.end))
        .collect();
    let _ = write!(
        o,
        "<p>rank {mark}'s iteration box: {}</p><table><tr><th>tensor</th><th>distribution</th>\
         <th>block of rank {mark}</th><th>words</th></tr>",
        esc(&bx.join(", "))
    );
    let rows = g
        .inputs
        .iter()
        .map(|(t, d)| (t, d, "in"))
        .chain(std::iter::once((&g.output.0, &g.output.1, "out")));
    for (tid, d, role) in rows {
        let Some(t) = plan.tensor(*tid) else { continue };
        let b = d.block(mark, &t.shape);
        let ranges = b.as_ref().map_or("none".into(), |b| {
            b.ranges
                .iter()
                .zip(&t.indices)
                .map(|(&(s, e), c)| format!("{c} [{s}, {e})"))
                .collect::<Vec<_>>()
                .join(" × ")
        });
        let _ = write!(
            o,
            "<tr><td>{} {} <code>{}</code></td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            role,
            esc(&t.name),
            t.indices.iter().collect::<String>(),
            esc(&d.display(&t.indices).to_string()),
            esc(&ranges),
            num(b.map_or(0, |b| b.len()))
        );
    }
    o.push_str("</table>");
    o
}

/// Every move of the plan: `(step, move of the step, tensor, pattern, from, to, volume)`.
pub struct MoveRef<'a> {
    /// The step.
    pub step: usize,
    /// Position among the step's moves.
    pub index: usize,
    /// Tensor moved.
    pub tensor: usize,
    /// Its kind.
    pub pattern: &'a deinsum_plan::MoveKind,
    /// Source distribution.
    pub from: &'a deinsum_plan::Distribution,
    /// Target distribution.
    pub to: &'a deinsum_plan::Distribution,
    /// Predicted words.
    pub volume: &'a deinsum_plan::Volume,
    /// A reduction (partial sums added).
    pub sum: bool,
}

/// The moves of the plan in step order.
pub fn moves(plan: &Plan) -> Vec<MoveRef<'_>> {
    let mut out = Vec::new();
    for (s, st) in plan.steps.iter().enumerate() {
        match st {
            PlanStep::Redistribute {
                tensor,
                from,
                to,
                sum,
                pattern,
                volume,
            } => out.push(MoveRef {
                step: s,
                index: 0,
                tensor: *tensor,
                pattern,
                from,
                to,
                volume,
                sum: *sum,
            }),
            PlanStep::ComputePhase { fetch, .. } => {
                for (k, f) in fetch.iter().enumerate() {
                    out.push(MoveRef {
                        step: s,
                        index: k,
                        tensor: f.tensor,
                        pattern: &f.pattern,
                        from: &f.from,
                        to: &f.to,
                        volume: &f.volume,
                        sum: false,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Words of a transfer.
fn transfer_words(t: &deinsum_plan::Transfer) -> u64 {
    t.boxes.iter().map(|b| b.len()).sum()
}

/// The heat map of one move and how it was aggregated: derived transfers of every receiver
/// (per rank, or summed over blocks of ranks), or beyond [`HEAT_ALL_RECEIVERS`] ranks of one
/// sampled receiver per block.
pub fn move_heat(plan: &Plan, view: &MoveView) -> (Heat, String) {
    let p = plan.procs;
    let b = Buckets::new(p, MAX_CELLS);
    let mut cells = vec![vec![0u64; b.n]; b.n];
    let all = p <= HEAT_ALL_RECEIVERS;
    let receivers: Vec<usize> = if all {
        (0..p).collect()
    } else {
        (0..b.n).map(|k| b.range(k).0).collect()
    };
    for &d in &receivers {
        for t in view.receives(d).iter().filter(|t| t.src != d) {
            cells[b.of(t.src)][b.of(d)] += transfer_words(t);
        }
    }
    let note = if all {
        format!(
            "Exact words of every transfer (derived from the move), {}; a rank's copies to \
             itself are not drawn.",
            b.describe()
        )
    } else {
        format!(
            "Rows: sending ranks, {}. Columns: one receiving rank per block (its first rank, \
             sampled: {p} ranks are too many to derive every receiver), with the exact words it \
             receives from each block of senders.",
            b.describe()
        )
    };
    let cols = if all {
        b.labels()
    } else {
        receivers.iter().map(|r| r.to_string()).collect()
    };
    (
        Heat {
            rows: b.labels(),
            cols,
            cells,
        },
        note,
    )
}

/// One section per move: its kind, distributions, words and heat map; how the heat maps
/// aggregate is said once when it is the same for all.
pub fn moves_section(plan: &Plan) -> String {
    let list = moves(plan);
    if list.is_empty() {
        return "<p>This plan moves no data between ranks.</p>".into();
    }
    let mut cards = Vec::new();
    let mut views: Vec<(usize, Vec<MoveView>)> = Vec::new();
    for m in &list {
        if views.last().map(|v| v.0) != Some(m.step) {
            views.push((m.step, plan.step_moves(m.step)));
        }
        let Some(view) = views.last().and_then(|v| v.1.get(m.index)) else {
            continue;
        };
        let t = plan.tensor(m.tensor);
        let idx = t.map(|t| t.indices.clone()).unwrap_or_default();
        let name = t.map_or(format!("#{}", m.tensor), |t| t.name.clone());
        let what = if m.sum {
            "reduce"
        } else if matches!(plan.steps[m.step], PlanStep::ComputePhase { .. }) {
            "fetch"
        } else {
            "move"
        };
        let (heat, note) = move_heat(plan, view);
        let card = format!(
            r#"<div class="move"><h3>step {}: {what} <code>{} ({})</code><br>{}</h3><p class="small">{} →<br>{}</p><p class="small">words received: busiest rank {}, all ranks {}; busiest sender {}</p>{}"#,
            m.step,
            esc(&name),
            idx.iter().collect::<String>(),
            esc(&m.pattern.display(&m.from.grid).to_string()),
            esc(&m.from.display(&idx).to_string()),
            esc(&m.to.display(&idx).to_string()),
            num(m.volume.max_per_rank),
            num(m.volume.total),
            num(m.volume.max_sent),
            heat_map(
                &heat,
                &format!(r#"data-step="{}" data-move="{}""#, m.step, m.index)
            ),
        );
        cards.push((card, note));
    }
    let same = cards.windows(2).all(|w| w[0].1 == w[1].1);
    let mut o = String::new();
    if let (true, Some((_, note))) = (same, cards.first()) {
        let _ = write!(o, "<p class=\"muted\">{}</p>", esc(note));
    }
    o.push_str("<div class=\"moves\">");
    for (card, note) in &cards {
        o.push_str(card);
        if !same {
            let _ = write!(o, "<p class=\"muted\">{}</p>", esc(note));
        }
        o.push_str("</div>");
    }
    o.push_str("</div>");
    o
}

/// Ranks whose figures the words and I/O charts evaluate at most (closed forms, one per move
/// and group); beyond it a sample.
const CHART_ALL_RANKS: usize = 1 << 16;
/// The same for the memory chart (a rank's peak walks the steps).
const MEMORY_ALL_RANKS: usize = 256;

/// Bars of words per rank (predicted), per-rank I/O against the SOAP bound, and memory per
/// rank against the budget.
pub fn per_rank(plan: &Plan) -> String {
    let b = Buckets::new(plan.procs, MAX_CELLS);
    let labels = b.labels();
    let mut o = String::new();
    let (ranks, all) = sample(&b, CHART_ALL_RANKS, 8);
    let views: Vec<MoveView> = (0..plan.steps.len())
        .flat_map(|s| plan.step_moves(s))
        .collect();
    let words = |r: usize| -> (u64, u64) {
        views.iter().fold((0, 0), |(s, v), m| {
            let (a, b) = m.words_of(r);
            (s + a, v + b)
        })
    };
    let recv = fold(&b, &ranks, |r| words(r).1 as f64);
    let sent = fold(&b, &ranks, |r| words(r).0 as f64);
    let _ = write!(
        o,
        "<h3>Words per rank (predicted, all steps)</h3>{}<p class=\"muted\">{}. Busiest rank: \
         {} words received, {} sent.</p>",
        bar_chart(
            &labels,
            &[
                Series {
                    name: "received".into(),
                    colour: "#4e79a7",
                    values: recv
                },
                Series {
                    name: "sent".into(),
                    colour: "#f28e2b",
                    values: sent
                },
            ],
            None
        ),
        esc(&sample_note(&b, all, 8)),
        num(plan.prediction.max_per_rank),
        num(plan.prediction.max_sent_per_rank)
    );
    let touched = |r: usize| -> f64 {
        let mut w = 0u64;
        for g in &plan.groups {
            for (tid, d) in g.inputs.iter().chain(std::iter::once(&g.output)) {
                if let Some(t) = plan.tensor(*tid) {
                    w += block_len(d, r, &t.shape);
                }
            }
        }
        w as f64
    };
    let io = fold(&b, &ranks, touched);
    let p = &plan.prediction;
    let _ = write!(
        o,
        "<h3>Per-rank I/O against the SOAP bound</h3>{}<p class=\"muted\">Words of a rank's \
         blocks of every group's inputs and output, summed over groups: what it must hold to do \
         its share. Busiest rank {} against the lower bound {} (ratio {:.3}). {}.</p>",
        bar_chart(
            &labels,
            &[Series {
                name: "I/O per rank".into(),
                colour: "#59a14f",
                values: io
            }],
            Some((p.bound_per_rank, "SOAP per-rank bound"))
        ),
        num(p.touched_per_rank),
        short(p.bound_per_rank),
        p.ratio,
        esc(&sample_note(&b, all, 8))
    );
    o.push_str(&memory_chart(plan, &b, &labels));
    o
}

/// Memory per rank (predicted peak, with and without message buffers) against the budget.
fn memory_chart(plan: &Plan, b: &Buckets, labels: &[String]) -> String {
    let (ranks, all) = sample(b, MEMORY_ALL_RANKS, 4);
    let peaks: Vec<(usize, (u64, u64))> = ranks.iter().map(|&r| (r, plan.peak_of(r))).collect();
    let look = |r: usize| peaks.iter().find(|x| x.0 == r).map_or((0, 0), |x| x.1);
    let data = fold(b, &ranks, |r| look(r).0 as f64);
    let bufs = fold(b, &ranks, |r| look(r).1 as f64);
    let p = &plan.prediction;
    format!(
        "<h3>Memory per rank against the budget</h3>{}<p class=\"muted\">Predicted peak words \
         held at once (tensor data; with the message buffers of the exchange beside it). \
         Busiest rank {} ({} with buffers){}. {}.</p>",
        bar_chart(
            labels,
            &[
                Series {
                    name: "peak (data)".into(),
                    colour: "#b07aa1",
                    values: data
                },
                Series {
                    name: "with buffers".into(),
                    colour: "#9c755f",
                    values: bufs
                },
            ],
            plan.mem.map(|m| (m as f64, "budget S"))
        ),
        num(p.max_peak_memory),
        num(p.max_peak_memory_with_buffers),
        plan.mem
            .map(|m| format!("; budget {} words per rank", num(m)))
            .unwrap_or_else(|| "; no budget given".into()),
        esc(&sample_note(b, all, 4))
    )
}
