//! `deinsum plan`: build the distributed plan for P ranks and print it (text or JSON).

use deinsum_plan::{Distribution, Grid, MoveKind, Plan, PlanError, PlanOptions, PlanStep};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Arguments of `deinsum plan`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The einsum, such as "ijk,ja,ka,al->il".
    pub expr: String,
    #[command(flatten)]
    pub extents: super::ExtentArgs,
    /// Number of ranks P.
    #[arg(long, value_name = "P")]
    pub procs: usize,
    /// Per-rank memory budget S, in words (elements); unlimited when absent.
    #[arg(long, value_name = "S")]
    pub mem: Option<u64>,
    /// Per-rank cap on the whole process, in words: the tensor data plus each step's message
    /// buffers (the plan's peak with buffers); unlimited when absent.
    #[arg(long = "mem-total", value_name = "W")]
    pub mem_total: Option<u64>,
    /// Path search strategy (as `deinsum path --optimize`).
    #[arg(long = "optimize", value_name = "NAME", default_value = "auto")]
    pub optimize: String,
    /// Plan as if every input already sits in the distribution its group needs (no input moves).
    #[arg(long)]
    pub inputs_in_place: bool,
    /// Also list per-rank figures in the plan (words sent and received per rank, peak memory
    /// per rank): O(P) numbers, left out by default.
    #[arg(long)]
    pub per_rank: bool,
    /// Do not overlap communication with computation: no group is computed in pipelined
    /// phases (the plan as it was before overlap, for A/B runs).
    #[arg(long)]
    pub no_overlap: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    pub format: PlanFormat,
    /// Machine model file (docs/machine.md, written by `deinsum calibrate`) the predicted
    /// seconds are for [default: the built-in model].
    #[arg(long, value_name = "FILE")]
    pub machine: Option<std::path::PathBuf>,
    /// What the planner minimises over its candidate paths: `time` (predicted seconds),
    /// `flops` (the path search's tree as it is) or `volume` (words of the busiest rank).
    #[arg(long, value_name = "OBJ", default_value = "time")]
    pub objective: String,
    /// Also write the plan JSON to this file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Also write the plan as one self-contained HTML page (tree, grids, moves, per-rank
    /// charts) to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
}

/// Output format of `deinsum plan`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// The plan JSON on standard output.
    Json,
    /// Graphviz DOT: the contraction tree (steps clustered by fused group) and the SDG.
    Dot,
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let einsum = super::einsum_from_args(&args.expr, &args.extents)?;
    let opts = PlanOptions {
        procs: args.procs,
        mem: args.mem,
        mem_total: args.mem_total,
        path: deinsum_path::PathOptions::with_strategy(&args.optimize),
        inputs_in_place: args.inputs_in_place,
        per_rank: args.per_rank,
        overlap: !args.no_overlap,
        machine: super::calibrate::load_machine(args.machine.as_deref())?,
        objective: super::calibrate::objective(&args.objective)?,
        ..PlanOptions::default()
    };
    let choice =
        deinsum_plan::choose::choose_within_budget(&einsum, &opts).map_err(|e| match e {
            PlanError::ZeroProcs
            | PlanError::MemoryTooSmall { .. }
            | PlanError::TotalMemoryTooSmall { .. }
            | PlanError::MultiOperandStep { .. } => {
                anyhow::Error::new(super::InputError(e.to_string()))
            }
            // A bad strategy name or an einsum the search cannot take is the caller's.
            PlanError::Path(ref p) if !matches!(p, deinsum_path::PathError::InvalidPath(_)) => {
                anyhow::Error::new(super::InputError(e.to_string()))
            }
            other => anyhow::Error::new(other),
        })?;
    let plan = &choice.plan;
    let json = serde_json::to_string_pretty(plan)?;
    if let Some(path) = &args.output {
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.html {
        let extras = super::html::Extras {
            strategy: Some(args.optimize.clone()),
            predicted_seconds: (!plan.prediction.step_seconds.is_empty())
                .then(|| plan.prediction.step_seconds.clone()),
        };
        super::html::write_file(path, &super::html::plan_page(plan, &extras))?;
    }
    let text = match args.format {
        PlanFormat::Json => format!("{json}\n"),
        PlanFormat::Text => render_text(plan, &args.optimize) + &render_choice(&choice),
        PlanFormat::Dot => render_dot(plan)?,
    };
    let mut out = std::io::stdout().lock();
    match std::io::Write::write_all(&mut out, text.as_bytes()) {
        // A closed pipe (`| head`) is not an error of the plan.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The candidate paths the planner weighed, the one kept and the runner-up with the margin.
pub fn render_choice(c: &deinsum_plan::choose::Choice) -> String {
    let mut o = String::new();
    let unit = match c.objective {
        deinsum_plan::Objective::Time => "s predicted",
        deinsum_plan::Objective::Volume => "words max/rank",
        deinsum_plan::Objective::Flops => "flops",
    };
    let _ = writeln!(
        o,
        "objective {}: {} candidate path(s) planned",
        c.objective.name(),
        c.candidates.len()
    );
    for (k, x) in c.candidates.iter().enumerate() {
        let _ = writeln!(
            o,
            "  {} {:<8} {:?}  flops {:.4e}  predicted {:.6} s  words max/rank {}",
            if k == c.chosen { "*" } else { " " },
            x.origin,
            x.path,
            x.flops,
            x.seconds,
            x.words
        );
    }
    match c.runner_up {
        Some(r) => {
            let (a, b) = (c.score(c.chosen), c.score(r));
            let margin = if a > 0.0 { b / a } else { f64::INFINITY };
            let _ = writeln!(
                o,
                "runner-up: {} {:?}, {} vs {} {} ({:.3}x)",
                c.candidates[r].origin,
                c.candidates[r].path,
                fmt_score(b),
                fmt_score(a),
                unit,
                margin
            );
        }
        None => {
            let _ = writeln!(o, "runner-up: none (one candidate path)");
        }
    }
    o
}

/// A score in a short form (seconds and counts alike).
fn fmt_score(x: f64) -> String {
    format!("{x:.4e}")
}

/// What a move is, in words: `all-gather along k`, `all-to-all`.
pub fn kind_text(kind: &MoveKind, grid: &Grid) -> String {
    let along = |dims: &[usize]| -> String {
        let names: Vec<String> = dims
            .iter()
            .filter_map(|&g| grid.dims.get(g))
            .map(|d| format!("{}{}", d.index, d.size))
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!(" along {}", names.join(" "))
        }
    };
    match kind {
        MoveKind::Local => "local copy".into(),
        MoveKind::AllGather { dims } => format!("all-gather{}", along(dims)),
        MoveKind::ReduceScatter { dims } => format!("reduce-scatter{}", along(dims)),
        MoveKind::AllReduce { dims } => format!("all-reduce{}", along(dims)),
        MoveKind::Reduce => "reduce to one rank".into(),
        MoveKind::Gather => "gather to one rank".into(),
        MoveKind::Broadcast => "broadcast".into(),
        MoveKind::Permute => "permutation".into(),
        MoveKind::AllToAll => "all-to-all".into(),
    }
}

/// A distribution in one line: `[i/2 k/2] rep j2` (split sizes per tensor index, then the
/// replicating and partial grid dims).
pub fn describe(d: &Distribution, indices: &[char]) -> String {
    if d.grid.dims.is_empty() {
        return "whole on rank 0".to_string();
    }
    let mut used = vec![false; d.grid.dims.len()];
    let parts: Vec<String> = indices
        .iter()
        .zip(&d.split)
        .map(|(c, dims)| {
            for &g in dims {
                used[g] = true;
            }
            let sizes: Vec<String> = dims
                .iter()
                .filter(|&&g| d.grid.dims[g].size > 1)
                .map(|&g| d.grid.dims[g].size.to_string())
                .collect();
            match sizes.len() {
                0 => c.to_string(),
                1 => format!("{c}/{}", sizes[0]),
                _ => format!("{c}/({})", sizes.join("*")),
            }
        })
        .collect();
    let mut s = format!("[{}]", parts.join(" "));
    for &g in &d.partial {
        used[g] = true;
    }
    let rep: Vec<String> = (0..d.grid.dims.len())
        .filter(|&g| !used[g] && d.grid.dims[g].size > 1)
        .map(|g| format!("{}{}", d.grid.dims[g].index, d.grid.dims[g].size))
        .collect();
    if !rep.is_empty() {
        let _ = write!(s, " rep {}", rep.join(" "));
    }
    let par: Vec<String> = d
        .partial
        .iter()
        .filter(|&&g| d.grid.dims[g].size > 1)
        .map(|&g| format!("{}{}", d.grid.dims[g].index, d.grid.dims[g].size))
        .collect();
    if !par.is_empty() {
        let _ = write!(s, " partial {}", par.join(" "));
    }
    let _ = write!(s, " on {} ranks", d.grid.size());
    s
}

/// The human-readable plan.
pub fn render_text(plan: &Plan, strategy: &str) -> String {
    let mut o = String::new();
    let ext: Vec<String> = plan
        .einsum
        .extents
        .iter()
        .map(|(c, n)| format!("{c}={n}"))
        .collect();
    let _ = writeln!(
        o,
        "plan for {}   extents {}",
        plan.expression,
        ext.join(",")
    );
    let _ = writeln!(
        o,
        "ranks P = {}, memory per rank {}, inputs {}",
        plan.procs,
        match (plan.mem, plan.mem_total) {
            (Some(s), None) => format!("{s} words"),
            (None, None) => "unlimited".into(),
            (s, Some(t)) => format!(
                "{}, {t} words with message buffers",
                s.map_or("data unlimited".into(), |s| format!("{s} words of data"))
            ),
        },
        if plan.inputs_in_place {
            "in place (already in their groups' distributions)"
        } else {
            "in the canonical distribution (C-order blocks, first index over the ranks)"
        }
    );
    let _ = writeln!(o, "path ({strategy}): {:?}", plan.path);
    render_groups(&mut o, plan);
    render_steps(&mut o, plan);
    render_totals(&mut o, plan);
    o
}

/// The groups: grid, SOAP bound and phases of each.
fn render_groups(o: &mut String, plan: &Plan) {
    for (gi, g) in plan.groups.iter().enumerate() {
        let steps: Vec<String> = g
            .group
            .steps
            .iter()
            .map(|&s| plan.tree.steps[s].einsum_string())
            .collect();
        let grid: Vec<String> = g
            .grid
            .dims
            .iter()
            .map(|d| format!("{}={}", d.index, d.size))
            .collect();
        let _ = writeln!(
            o,
            "group {gi}: {}  (steps {})",
            g.group.einsum_string(),
            steps.join("; ")
        );
        let _ = writeln!(
            o,
            "  grid ({}) on {} ranks; {} admissible grids considered; max multiply-adds/rank {:.0}",
            grid.join(", "),
            g.grid.size(),
            g.candidates_considered,
            g.max_flops_per_rank
        );
        let _ = writeln!(
            o,
            "  SOAP bound/rank {:.1} (memory-independent {:.1}, memory-dependent {:.1}); predicted moves in and reduction out: {} words on the busiest rank",
            g.bound_memory_independent.max(g.bound_memory_dependent),
            g.bound_memory_independent,
            g.bound_memory_dependent,
            g.predicted_max_per_rank
        );
        let pipelined = deinsum_plan::overlap::is_pipelined(plan, gi);
        match &g.phases {
            Some(ph) if ph.overlap => {
                let _ = writeln!(
                    o,
                    "  in {} phases along {} to overlap communication with computation: {} inputs are fetched window by window from where their move would start, each phase's windows in flight while the phase before computes",
                    ph.count,
                    ph.index,
                    ph.resting.len()
                );
            }
            _ => {}
        }
        if let Some(ph) = g.phases.as_ref().filter(|ph| !ph.overlap) {
            let copies: usize = g
                .grid
                .dims
                .iter()
                .filter(|d| d.index == ph.index)
                .map(|d| d.size)
                .product();
            let _ = writeln!(
                o,
                "  in {} phases along {} (blocks over the memory budget; the summed index is split {} ways, so its partial sums come in {} copies): {} inputs rest without replicas and fetch one window per phase",
                ph.count,
                ph.index,
                copies,
                copies,
                ph.resting.len()
            );
            if pipelined {
                let _ = writeln!(
                    o,
                    "  each phase fetches the next phase's windows while it computes (double buffering)"
                );
            }
        }
    }
}

/// The steps in order, with each move's pattern and words.
fn render_steps(o: &mut String, plan: &Plan) {
    let _ = writeln!(o, "steps:");
    let name = |id: usize| tensor_name(plan, id);
    let idx = |id: usize| tensor_indices(plan, id);
    for (k, s) in plan.steps.iter().enumerate() {
        match s {
            PlanStep::Load { tensor, dist } => {
                let _ = writeln!(
                    o,
                    "  {k:>3} load {}  {}",
                    name(*tensor),
                    describe(dist, &idx(*tensor))
                );
            }
            PlanStep::Redistribute {
                tensor,
                from,
                to,
                sum,
                pattern,
                volume,
            } => {
                let _ = writeln!(
                    o,
                    "  {k:>3} {} {}  {}  ->  {}\n        {}, words received: max/rank {}, total {}",
                    if *sum { "reduce" } else { "move" },
                    name(*tensor),
                    describe(from, &idx(*tensor)),
                    describe(to, &idx(*tensor)),
                    kind_text(pattern, &from.grid),
                    volume.max_per_rank,
                    volume.total
                );
            }
            PlanStep::Compute { group } => {
                let _ = writeln!(o, "  {k:>3} compute group {group}");
            }
            PlanStep::ComputePhase {
                group,
                phase,
                fetch,
                prefetch,
                volume,
            } => {
                let list = |fs: &[deinsum_plan::Fetch]| {
                    let names: Vec<String> = fs.iter().map(|f| name(f.tensor)).collect();
                    let kinds: Vec<String> = fs
                        .iter()
                        .map(|f| kind_text(&f.pattern, &f.from.grid))
                        .collect();
                    format!("{} ({}", names.join(", "), kinds.join(", "))
                };
                let words = format!(
                    "words received: max/rank {}, total {}",
                    volume.max_per_rank, volume.total
                );
                let what = match (fetch.is_empty(), prefetch.is_empty()) {
                    (false, true) => format!("fetch {}, {words})", list(fetch)),
                    (true, true) => format!(
                        "its windows were prefetched by phase {}",
                        phase.saturating_sub(1)
                    ),
                    (true, false) => format!(
                        "prefetch {}) for phase {} while computing, {words}",
                        list(prefetch),
                        phase + 1
                    ),
                    (false, _) => format!(
                        "fetch {}); prefetch {}) for phase {} while computing, {words}",
                        list(fetch),
                        list(prefetch),
                        phase + 1
                    ),
                };
                let _ = writeln!(o, "  {k:>3} compute group {group} phase {phase}: {what}");
            }
            PlanStep::Free { tensor } => {
                let _ = writeln!(o, "  {k:>3} free {}", name(*tensor));
            }
        }
    }
}

/// `T0 (ij)`: a tensor's name and indices.
fn tensor_name(plan: &Plan, id: usize) -> String {
    plan.tensor(id)
        .map(|t| format!("{} ({})", t.name, t.indices.iter().collect::<String>()))
        .unwrap_or_else(|| format!("#{id}"))
}

/// A tensor's indices (none when unknown).
fn tensor_indices(plan: &Plan, id: usize) -> Vec<char> {
    plan.tensor(id)
        .map(|t| t.indices.clone())
        .unwrap_or_default()
}

/// The predicted totals, the output and the idle ranks.
fn render_totals(o: &mut String, plan: &Plan) {
    let name = |id: usize| tensor_name(plan, id);
    let idx = |id: usize| tensor_indices(plan, id);
    let p = &plan.prediction;
    let _ = writeln!(
        o,
        "predicted words received: max/rank {}, total {} (max sent/rank {})",
        p.max_per_rank, p.total, p.max_sent_per_rank
    );
    let _ = writeln!(
        o,
        "per-rank I/O (words of a rank's blocks of every group's inputs and output) {}   SOAP per-rank bound {:.1}   ratio {:.3}",
        p.touched_per_rank, p.bound_per_rank, p.ratio
    );
    let steps: Vec<String> = p
        .step_seconds
        .iter()
        .enumerate()
        .filter(|(_, &t)| t > 0.0)
        .map(|(k, t)| format!("{k}: {:.3} ms", t * 1e3))
        .collect();
    let _ = writeln!(
        o,
        "predicted time: {:.6} s on {} (per step {})",
        p.seconds,
        if p.machine.is_empty() {
            "no machine model"
        } else {
            &p.machine
        },
        if steps.is_empty() {
            "-".to_string()
        } else {
            steps.join(", ")
        }
    );
    let _ = writeln!(
        o,
        "peak memory: max {} words per rank ({} with message buffers)",
        p.max_peak_memory, p.max_peak_memory_with_buffers
    );
    let _ = writeln!(
        o,
        "output {}: {}",
        name(plan.output.0),
        describe(&plan.output.1, &idx(plan.output.0))
    );
    let _ = writeln!(
        o,
        "idle ranks: {}",
        plan.idle.clone().unwrap_or_else(|| "none".into())
    );
}

/// The plan's contraction tree and its SDG as two Graphviz digraphs (petgraph's `Dot`): in the
/// tree a vertex per input and per step (its einsum, multiply-adds and fused group), in the
/// SDG a vertex per tensor and an edge per dependency, labelled with the consuming step.
pub fn render_dot(plan: &Plan) -> anyhow::Result<String> {
    use petgraph::dot::{Config, Dot};
    use petgraph::graph::DiGraph;
    let tree = &plan.tree;
    let group_of = |s: usize| plan.groups.iter().position(|g| g.group.steps.contains(&s));
    let mut g: DiGraph<String, String> = DiGraph::new();
    let mut v = Vec::new();
    for (k, idx) in tree.leaf_indices.iter().enumerate() {
        let name: String = idx.iter().collect();
        v.push(g.add_node(format!("input {k}: {name}")));
    }
    for (s, st) in tree.steps.iter().enumerate() {
        let mut all: Vec<char> = st.operand_indices.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        let madds: u128 = all
            .iter()
            .map(|c| tree.extents.get(c).copied().unwrap_or(1) as u128)
            .product();
        let group = group_of(s).map_or(String::from("-"), |k| k.to_string());
        let node = g.add_node(format!(
            "step {s}: {}\n{madds} multiply-adds\nfused group {group}",
            st.einsum_string()
        ));
        for &op in &st.operands {
            g.add_edge(v[op.index()], node, String::new());
        }
        v.push(node);
    }
    let mut out = String::from("// contraction tree (deinsum plan --format dot)\n");
    out.push_str(&format!("{}", Dot::with_config(&g, &[Config::EdgeNoLabel])));
    let sdg = deinsum_soap::Sdg::new(tree).map_err(|e| anyhow::anyhow!("{e}"))?;
    let getter_node = |_, (_, n): (_, &deinsum_soap::SdgNode)| {
        let name: String = n.indices.iter().collect();
        let what = match n.step {
            None => format!("input {}", n.node),
            Some(s) => format!("result of step {s}"),
        };
        format!("label = \"{what}: {name}\"")
    };
    out.push_str("// symbolic directed graph (SDG)\n");
    out.push_str(&format!(
        "{:?}",
        Dot::with_attr_getters(
            sdg.graph(),
            &[Config::NodeNoLabel, Config::EdgeNoLabel],
            &|_, e| format!("label = \"step {}\"", e.weight().step),
            &getter_node,
        )
    ));
    Ok(out)
}
