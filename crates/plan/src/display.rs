//! Text forms of plans, distributions, moves and the planner's choice: what `deinsum plan`
//! prints, kept here so that every front end (CLI, Python, HTML) says the same thing.

use crate::choose::{Choice, Objective};
use crate::{Distribution, Fetch, Grid, MoveKind, Plan, PlanStep, Tensor};
use std::fmt;

/// A distribution in one line, `[i/2 k/2] rep j2 on 4 ranks`, from [`Distribution::display`].
pub struct DistributionDisplay<'a> {
    dist: &'a Distribution,
    indices: &'a [char],
}

impl Distribution {
    /// The one-line form over the tensor's `indices`: split sizes per index, then the
    /// replicating and partial grid dims, then the rank count.
    pub fn display<'a>(&'a self, indices: &'a [char]) -> DistributionDisplay<'a> {
        DistributionDisplay {
            dist: self,
            indices,
        }
    }
}

/// `k2 j3`: grid dims by index and size (those over one rank only).
fn dims_text(grid: &Grid, dims: impl Iterator<Item = usize>) -> Vec<String> {
    dims.filter(|&g| grid.dims[g].size > 1)
        .map(|g| format!("{}{}", grid.dims[g].index, grid.dims[g].size))
        .collect()
}

impl fmt::Display for DistributionDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.dist;
        if d.grid.dims.is_empty() {
            return f.write_str("whole on rank 0");
        }
        let mut used = vec![false; d.grid.dims.len()];
        let parts: Vec<String> = self
            .indices
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
        write!(f, "[{}]", parts.join(" "))?;
        for &g in &d.partial {
            used[g] = true;
        }
        let rep = dims_text(&d.grid, (0..d.grid.dims.len()).filter(|&g| !used[g]));
        if !rep.is_empty() {
            write!(f, " rep {}", rep.join(" "))?;
        }
        let par = dims_text(&d.grid, d.partial.iter().copied());
        if !par.is_empty() {
            write!(f, " partial {}", par.join(" "))?;
        }
        write!(f, " on {} ranks", d.grid.size())
    }
}

/// What a move is, `all-gather along k2`, from [`MoveKind::display`].
pub struct MoveKindDisplay<'a> {
    kind: &'a MoveKind,
    grid: &'a Grid,
}

impl MoveKind {
    /// The move in words, naming the dims of `grid` (the source's) it runs along.
    pub fn display<'a>(&'a self, grid: &'a Grid) -> MoveKindDisplay<'a> {
        MoveKindDisplay { kind: self, grid }
    }
}

impl fmt::Display for MoveKindDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let along = |dims: &[usize]| -> String {
            let names: Vec<String> = dims
                .iter()
                .filter_map(|&g| self.grid.dims.get(g))
                .map(|d| format!("{}{}", d.index, d.size))
                .collect();
            if names.is_empty() {
                String::new()
            } else {
                format!(" along {}", names.join(" "))
            }
        };
        match self.kind {
            MoveKind::Local => f.write_str("local copy"),
            MoveKind::AllGather { dims } => write!(f, "all-gather{}", along(dims)),
            MoveKind::ReduceScatter { dims } => write!(f, "reduce-scatter{}", along(dims)),
            MoveKind::AllReduce { dims } => write!(f, "all-reduce{}", along(dims)),
            MoveKind::Reduce => f.write_str("reduce to one rank"),
            MoveKind::Gather => f.write_str("gather to one rank"),
            MoveKind::Broadcast => f.write_str("broadcast"),
            MoveKind::Permute => f.write_str("permutation"),
            MoveKind::AllToAll => f.write_str("all-to-all"),
        }
    }
}

/// The human-readable plan (what `deinsum plan` prints), from [`Plan::display`].
pub struct PlanDisplay<'a> {
    plan: &'a Plan,
    strategy: &'a str,
}

impl Plan {
    /// The plan as text: header, groups, steps and predicted totals; `strategy` is the path
    /// search's name as asked for (the plan keeps only the path it found).
    pub fn display<'a>(&'a self, strategy: &'a str) -> PlanDisplay<'a> {
        PlanDisplay {
            plan: self,
            strategy,
        }
    }

    /// `T0 (ij)`: a tensor's name and indices (`#id` when unknown).
    fn tensor_label(&self, id: usize) -> String {
        self.tensor(id)
            .map(Tensor::label)
            .unwrap_or_else(|| format!("#{id}"))
    }

    /// A tensor's indices (none when unknown).
    fn tensor_indices(&self, id: usize) -> Vec<char> {
        self.tensor(id)
            .map(|t| t.indices.clone())
            .unwrap_or_default()
    }

    /// Tensor `id`'s distribution `d` in one line.
    fn dist_text(&self, d: &Distribution, id: usize) -> String {
        d.display(&self.tensor_indices(id)).to_string()
    }
}

impl fmt::Display for PlanDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plan = self.plan;
        write_header(f, plan, self.strategy)?;
        for gi in 0..plan.groups.len() {
            write_group(f, plan, gi)?;
        }
        writeln!(f, "steps:")?;
        for (k, s) in plan.steps.iter().enumerate() {
            write_step(f, plan, k, s)?;
        }
        write_totals(f, plan)
    }
}

/// The expression, extents, ranks, budget, where inputs start and the path.
fn write_header(f: &mut fmt::Formatter<'_>, plan: &Plan, strategy: &str) -> fmt::Result {
    let ext = plan.einsum.extent_labels();
    writeln!(
        f,
        "plan for {}   extents {}",
        plan.expression,
        ext.join(",")
    )?;
    writeln!(
        f,
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
            "anywhere (each read where its first use computes, or canonically where that predicts faster)"
        } else {
            "in the canonical distribution (C-order blocks, first index over the ranks)"
        }
    )?;
    writeln!(f, "path ({strategy}): {:?}", plan.path)
}

/// Group `gi`: its steps, grid, SOAP bound and phases.
fn write_group(f: &mut fmt::Formatter<'_>, plan: &Plan, gi: usize) -> fmt::Result {
    let g = &plan.groups[gi];
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
    writeln!(
        f,
        "group {gi}: {}  (steps {})",
        g.group.einsum_string(),
        steps.join("; ")
    )?;
    writeln!(
        f,
        "  grid ({}) on {} ranks; {} admissible grids considered; max multiply-adds/rank {:.0}",
        grid.join(", "),
        g.grid.size(),
        g.candidates_considered,
        g.max_flops_per_rank
    )?;
    writeln!(
        f,
        "  SOAP bound/rank {:.1} (memory-independent {:.1}, memory-dependent {:.1}); predicted moves in and reduction out: {} words on the busiest rank",
        g.bound_memory_independent.max(g.bound_memory_dependent),
        g.bound_memory_independent,
        g.bound_memory_dependent,
        g.predicted_max_per_rank
    )?;
    let Some(ph) = &g.phases else {
        return Ok(());
    };
    if ph.overlap {
        return writeln!(
            f,
            "  in {} phases along {} to overlap communication with computation: {} inputs are fetched window by window from where their move would start, each phase's windows in flight while the phase before computes",
            ph.count,
            ph.index,
            ph.resting.len()
        );
    }
    let copies: usize = g
        .grid
        .dims
        .iter()
        .filter(|d| d.index == ph.index)
        .map(|d| d.size)
        .product();
    writeln!(
        f,
        "  in {} phases along {} (blocks over the memory budget; the summed index is split {} ways, so its partial sums come in {} copies): {} inputs rest without replicas and fetch one window per phase",
        ph.count,
        ph.index,
        copies,
        copies,
        ph.resting.len()
    )?;
    if crate::overlap::is_pipelined(plan, gi) {
        writeln!(
            f,
            "  each phase fetches the next phase's windows while it computes (double buffering)"
        )?;
    }
    Ok(())
}

/// Step `k`, with a move's pattern and words.
fn write_step(f: &mut fmt::Formatter<'_>, plan: &Plan, k: usize, s: &PlanStep) -> fmt::Result {
    match s {
        PlanStep::Load { tensor, dist } => writeln!(
            f,
            "  {k:>3} load {}  {}",
            plan.tensor_label(*tensor),
            plan.dist_text(dist, *tensor)
        ),
        PlanStep::Redistribute {
            tensor,
            from,
            to,
            sum,
            pattern,
            volume,
        } => writeln!(
            f,
            "  {k:>3} {} {}  {}  ->  {}\n        {}, words received: max/rank {}, total {}",
            if *sum { "reduce" } else { "move" },
            plan.tensor_label(*tensor),
            plan.dist_text(from, *tensor),
            plan.dist_text(to, *tensor),
            pattern.display(&from.grid),
            volume.max_per_rank,
            volume.total
        ),
        PlanStep::Compute { group } => writeln!(f, "  {k:>3} compute group {group}"),
        PlanStep::ComputePhase {
            group,
            phase,
            fetch,
            prefetch,
            volume,
        } => {
            let words = format!(
                "words received: max/rank {}, total {}",
                volume.max_per_rank, volume.total
            );
            let what = phase_text(plan, *phase, fetch, prefetch, &words);
            writeln!(f, "  {k:>3} compute group {group} phase {phase}: {what}")
        }
        PlanStep::Free { tensor } => writeln!(f, "  {k:>3} free {}", plan.tensor_label(*tensor)),
    }
}

/// What a phase fetches now and prefetches for the next one, with its `words`.
fn phase_text(
    plan: &Plan,
    phase: usize,
    fetch: &[Fetch],
    prefetch: &[Fetch],
    words: &str,
) -> String {
    let list = |fs: &[Fetch]| {
        let names: Vec<String> = fs.iter().map(|x| plan.tensor_label(x.tensor)).collect();
        let kinds: Vec<String> = fs
            .iter()
            .map(|x| x.pattern.display(&x.from.grid).to_string())
            .collect();
        format!("{} ({}", names.join(", "), kinds.join(", "))
    };
    match (fetch.is_empty(), prefetch.is_empty()) {
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
    }
}

/// The predicted totals, the output and the idle ranks.
fn write_totals(f: &mut fmt::Formatter<'_>, plan: &Plan) -> fmt::Result {
    let p = &plan.prediction;
    writeln!(
        f,
        "predicted words received: max/rank {}, total {} (max sent/rank {})",
        p.max_per_rank, p.total, p.max_sent_per_rank
    )?;
    writeln!(
        f,
        "per-rank I/O (words of a rank's blocks of every group's inputs and output) {}   SOAP per-rank bound {:.1}   ratio {:.3}",
        p.touched_per_rank, p.bound_per_rank, p.ratio
    )?;
    let steps: Vec<String> = p
        .step_seconds
        .iter()
        .enumerate()
        .filter(|(_, &t)| t > 0.0)
        .map(|(k, t)| format!("{k}: {:.3} ms", t * 1e3))
        .collect();
    writeln!(
        f,
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
    )?;
    writeln!(
        f,
        "peak memory: max {} words per rank ({} with message buffers)",
        p.max_peak_memory, p.max_peak_memory_with_buffers
    )?;
    let (out, dist) = &plan.output;
    writeln!(
        f,
        "output {}: {}",
        plan.tensor_label(*out),
        plan.dist_text(dist, *out)
    )?;
    writeln!(
        f,
        "idle ranks: {}",
        plan.idle.clone().unwrap_or_else(|| "none".into())
    )
}

/// The candidate paths weighed, the one kept (`*`) and the runner-up with its margin.
impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.objective {
            Objective::Time => "s predicted",
            Objective::Volume => "words max/rank",
            Objective::Flops => "flops",
        };
        writeln!(
            f,
            "objective {}: {} candidate path(s) planned",
            self.objective.name(),
            self.candidates.len()
        )?;
        for (k, x) in self.candidates.iter().enumerate() {
            writeln!(
                f,
                "  {} {:<8} {:?}  flops {:.4e}  predicted {:.6} s  words max/rank {}",
                if k == self.chosen { "*" } else { " " },
                x.origin,
                x.path,
                x.flops,
                x.seconds,
                x.words
            )?;
        }
        let Some(r) = self.runner_up else {
            return writeln!(f, "runner-up: none (one candidate path)");
        };
        let (a, b) = (self.score(self.chosen), self.score(r));
        let margin = if a > 0.0 { b / a } else { f64::INFINITY };
        writeln!(
            f,
            "runner-up: {} {:?}, {b:.4e} vs {a:.4e} {unit} ({margin:.3}x)",
            self.candidates[r].origin, self.candidates[r].path,
        )
    }
}
