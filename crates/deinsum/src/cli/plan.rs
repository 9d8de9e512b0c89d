//! `deinsum plan`: build the distributed plan for P ranks and print it (text or JSON).

use deinsum_plan::{Plan, PlanError, PlanOptions};
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
    /// Inputs can be read in any layout: each is read where its first use computes, or
    /// canonically where that predicts faster (never predicted slower than
    /// --inputs-canonical). The default; the flag is kept for scripts that give it.
    #[arg(long)]
    pub inputs_in_place: bool,
    /// Start every input in the canonical distribution (C-order blocks, first index over the
    /// ranks) and plan its moves from there, as plans did before inputs were read where they
    /// compute (for A/B comparisons).
    #[arg(long, conflicts_with = "inputs_in_place")]
    pub inputs_canonical: bool,
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
        inputs_in_place: !args.inputs_canonical,
        per_rank: args.per_rank,
        overlap: !args.no_overlap,
        machine: super::calibrate::load_machine(args.machine.as_deref())?,
        objective: super::calibrate::objective(&args.objective)?,
        ..PlanOptions::default()
    };
    let choose =
        |e: &deinsum_expr::ParsedEinsum| deinsum_plan::choose::choose_within_budget(e, &opts);
    let plan_error = |e: PlanError| match e {
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
    };
    let choice = if crate::empty::has_empty_extent(&einsum) {
        // An empty extent: the plan of its extent-1 skeleton, with nothing moving.
        crate::empty::choose_empty::<crate::Error>(&einsum, choose).map_err(|e| match e {
            crate::Error::Plan(p) => plan_error(p),
            other => anyhow::Error::new(super::InputError(other.to_string())),
        })?
    } else {
        choose(&einsum).map_err(plan_error)?
    };
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
        PlanFormat::Text => format!("{}{choice}", plan.display(&args.optimize)),
        PlanFormat::Dot => render_dot(plan)?,
    };
    let mut out = std::io::stdout().lock();
    match std::io::Write::write_all(&mut out, text.as_bytes()) {
        // A closed pipe (`| head`) is not an error of the plan.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The candidate paths the planner weighed, the one kept and the runner-up with the margin
/// (the [`Display`](std::fmt::Display) of [`deinsum_plan::choose::Choice`]).
pub fn render_choice(c: &deinsum_plan::choose::Choice) -> String {
    c.to_string()
}

/// The human-readable plan ([`Plan::display`]); the Python binding prints it too.
pub fn render_text(plan: &Plan, strategy: &str) -> String {
    plan.display(strategy).to_string()
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
