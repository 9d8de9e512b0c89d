//! The planner's stages over one fused group at a time: candidate grids and their model
//! figures, the phase fit under a budget, exact scoring of the best few, emission of the
//! steps, and at the end the predictions. [`Planner`] carries what the stages share.

use crate::builder::{
    current, emit_move, phased_dim, plan_move, reduced_distribution, replicas_of, resting_for,
    shape_of, start_of, windowed, Candidate, Move, State, Totals, EXACT_CANDIDATES, EXACT_MAX_GRID,
};
use crate::busiest_len;
use crate::grids;
use crate::memory::MemoryModel;
use crate::memory::Peaks;
use crate::moves::{block_len, ranges_of, MoveView};
use crate::predict::{set_prediction, set_sums, touched};
use crate::rank_words::MoveMemo;
use crate::{
    Distribution, Fetch, Grid, GridDim, GroupPlan, Phases, Plan, PlanError, PlanOptions, PlanStep,
    Prediction, Tensor, TensorId, TensorKind, PLAN_VERSION,
};
use deinsum_expr::{Index, ParsedEinsum};
use deinsum_path::ContractionTree;
use deinsum_soap::FusedGroup;
use std::collections::BTreeMap;

/// Ranks that a group's scheduled grids must hold together for them to be scheduled on the
/// process's pool: below it each schedule takes microseconds, less than handing it over.
const PAR_MIN_GRID_RANKS: usize = 256;

/// The exact schedule of one candidate grid: what the busiest rank receives, the words in
/// total, which candidate, and the moves that bring each input in.
pub(crate) struct Scheduled {
    /// Max over ranks of the words received (inputs in, fetches, output reduction).
    pub(crate) max_per_rank: u64,
    /// Words received over all ranks.
    pub(crate) total: u64,
    /// Index of the candidate.
    pub(crate) candidate: usize,
    /// Per input of the group, its moves.
    pub(crate) moves: Vec<Vec<Move>>,
}

/// One group as the stages see it: its iteration space and what it reads and writes.
pub(crate) struct GroupCtx<'a> {
    gi: usize,
    group: &'a FusedGroup,
    gidx: &'a [Index],
    gext: Vec<usize>,
    out_idx: Vec<Index>,
    /// Positions in `gidx` of the summed indices.
    summed: Vec<usize>,
    /// Index lists of the group-local intermediates.
    inner_outputs: Vec<Vec<Index>>,
}

impl GroupCtx<'_> {
    fn pos(&self, c: Index) -> usize {
        self.gidx.iter().position(|&x| x == c).unwrap_or(0)
    }

    fn positions(&self, idx: &[Index]) -> Vec<usize> {
        idx.iter().map(|&c| self.pos(c)).collect()
    }

    fn grid(&self, sizes: &[usize]) -> Grid {
        Grid {
            dims: self
                .gidx
                .iter()
                .zip(sizes)
                .map(|(&c, &p)| GridDim { index: c, size: p })
                .collect(),
        }
    }

    /// A tensor over `idx` split along its indices' grid dims; with `partial`, partial along
    /// the dims of the summed indices.
    fn dist(&self, grid: &Grid, idx: &[Index], partial: bool) -> Distribution {
        Distribution {
            grid: grid.clone(),
            split: idx.iter().map(|&c| vec![self.pos(c)]).collect(),
            partial: if partial {
                self.summed
                    .iter()
                    .copied()
                    .filter(|&v| grid.dims[v].size > 1)
                    .collect()
            } else {
                Vec::new()
            },
            window: Vec::new(),
            balanced: false,
        }
    }

    /// The largest block of a tensor over `idx` on a grid of `sizes`.
    fn blk(&self, sizes: &[usize], idx: &[Index]) -> u64 {
        idx.iter()
            .map(|&c| {
                let v = self.pos(c);
                busiest_len(self.gext[v], sizes[v]) as u64
            })
            .product()
    }
}

/// What the candidate model needs of one input, once per group.
struct InputInfo {
    /// Where the input is now (`None`: loaded in place).
    from: Option<Distribution>,
    shape: Vec<usize>,
    /// Positions of its indices in the group's.
    pos: Vec<usize>,
    partial_q: usize,
    partial_block: u64,
    /// Rank 0's block where the input is now.
    from_first: Option<crate::Ranges>,
    /// The candidate sizes on which the input already sits in the group's distribution.
    same_grid: Option<Vec<usize>>,
}

/// Tensors with the distribution each is placed in.
type Placed = Vec<(TensorId, Distribution)>;

/// The planner's state between groups.
pub(crate) struct Planner<'a> {
    einsum: &'a ParsedEinsum,
    tree: &'a ContractionTree,
    opts: &'a PlanOptions,
    /// Per-rank words of the moves already swept in this choice.
    memo: &'a MoveMemo,
    tensors: Vec<Tensor>,
    state: BTreeMap<TensorId, State>,
    steps: Vec<PlanStep>,
    groups: Vec<GroupPlan>,
    totals: Totals,
    idle_reasons: Vec<String>,
    /// Groups before `.0` are planned under the tighter budget `.1` (room left for later
    /// groups that found none).
    pub(crate) tight: Option<(usize, u64)>,
    /// Leave the memory part of the prediction (peaks, touched words, bounds) to whoever
    /// keeps the plan ([`crate::predict::complete_memory`]) when no cap needs the peaks.
    pub(crate) defer_memory: bool,
}

impl<'a> Planner<'a> {
    /// Checks the tree against the einsum and registers the inputs.
    pub(crate) fn new(
        einsum: &'a ParsedEinsum,
        tree: &'a ContractionTree,
        opts: &'a PlanOptions,
        memo: &'a MoveMemo,
    ) -> Result<Self, PlanError> {
        if opts.procs == 0 {
            return Err(PlanError::ZeroProcs);
        }
        let ext = einsum.extents();
        let n_in = einsum.num_inputs();
        if tree.num_inputs != n_in || tree.steps.is_empty() {
            return Err(PlanError::Inconsistent(format!(
                "tree has {} inputs and {} steps for an einsum of {} inputs",
                tree.num_inputs,
                tree.steps.len(),
                n_in
            )));
        }
        // Every size the plan multiplies must fit in u64.
        for k in 0..n_in {
            let s = shape_of(einsum.input_indices(k), ext);
            s.iter()
                .try_fold(1u64, |a, &n| a.checked_mul(n as u64))
                .ok_or_else(|| PlanError::Overflow(format!("operand {k} has too many elements")))?;
        }
        let tensors = (0..n_in)
            .map(|k| Tensor {
                id: k,
                name: format!("T{k}"),
                indices: einsum.input_indices(k).to_vec(),
                shape: shape_of(einsum.input_indices(k), ext),
                kind: TensorKind::Input(k),
            })
            .collect();
        Ok(Planner {
            einsum,
            tree,
            opts,
            memo,
            tensors,
            state: (0..n_in).map(|k| (k, State::Unloaded)).collect(),
            steps: Vec::new(),
            groups: Vec::new(),
            totals: Totals::default(),
            idle_reasons: Vec::new(),
            tight: None,
            defer_memory: false,
        })
    }

    /// Plans group `gi` (`last`: the einsum's output follows): every stage in turn. Under a
    /// budget, each scored grid's real peak over the steps it would emit is counted
    /// ([`Self::group_peak`]); a grid over the budget walks more phases or gives way to the
    /// next best.
    pub(crate) fn plan_group(
        &mut self,
        gi: usize,
        group: &FusedGroup,
        last: bool,
    ) -> Result<(), PlanError> {
        let g = self.group_ctx(gi, group)?;
        let (mut pool, mut considered) = self.candidates(&g)?;
        self.fit_phases(&g, &mut pool)?;
        if self.budget(gi).is_some() {
            considered = pool.len();
        }
        let mut least = (u64::MAX, u64::MAX);
        let Some(caps) = self.budget(gi) else {
            let best_full_p = select_best(&mut pool, self.opts.procs);
            let sched = self.score(&g, &pool)?;
            let c = pool[sched.candidate].clone();
            self.accept(&g, &c, sched, best_full_p.as_ref(), considered);
            return Ok(());
        };
        loop {
            let mut cands = pool.clone();
            let best_full_p = select_best(&mut cands, self.opts.procs);
            let idle = best_full_p.as_ref();
            // The scored grids in the exact order, each tried until one fits.
            for sched in self.score_all(&g, &cands) {
                let c = cands[sched.candidate].clone();
                let peak = self.group_peak(&g, &c, &sched.moves, last);
                least = (least.0.min(peak.0), least.1.min(peak.1));
                if fits(peak, caps) {
                    self.accept(&g, &c, sched, idle, considered);
                    return Ok(());
                }
                // The model chose the phases; more of them may bring the real peak within.
                if let Some((ct, sched)) = self.more_phases(&g, &c, caps, last) {
                    self.accept(&g, &ct, sched, idle, considered);
                    return Ok(());
                }
                pool.retain(|p| (&p.sizes, p.phases) != (&c.sizes, c.phases));
            }
            if pool.is_empty() {
                let detail = format!(
                    " (group {gi}: {}; peak over the plan's steps, including input blocks in their starting distribution)",
                    group.einsum_string()
                );
                return Err(if least.0 > caps.0 {
                    PlanError::MemoryTooSmall {
                        budget: caps.0,
                        needed: least.0,
                        detail,
                    }
                } else {
                    PlanError::TotalMemoryTooSmall {
                        budget: caps.1,
                        needed: least.1,
                        detail,
                    }
                });
            }
        }
    }

    /// Notes why ranks idle and emits the chosen grid.
    fn accept(
        &mut self,
        g: &GroupCtx,
        c: &Candidate,
        sched: Scheduled,
        best_full_p: Option<&Candidate>,
        considered: usize,
    ) {
        self.note_idle(g, c, (sched.max_per_rank, sched.total), best_full_p);
        self.emit(g, c, sched, considered);
    }

    /// The caps group `gi` is planned under: (tensor data, data with message buffers), each
    /// `u64::MAX` when not given; `None` without any budget.
    fn budget(&self, gi: usize) -> Option<(u64, u64)> {
        let (mem, total) = (self.opts.mem, self.opts.mem_total);
        if mem.is_none() && total.is_none() {
            return None;
        }
        let (mut s, mut t) = (mem.unwrap_or(u64::MAX), total.unwrap_or(u64::MAX));
        if let Some((k, b)) = self.tight.filter(|&(k, _)| gi < k) {
            let _ = k;
            if mem.is_some() {
                s = s.min(b);
            } else {
                t = t.min(b);
            }
        }
        Some((s, t))
    }

    /// Candidate `c` in the fewest phases beyond its own whose real peak fits `caps`
    /// (bisected: more phases hold smaller windows), with its schedule, if any.
    fn more_phases(
        &self,
        g: &GroupCtx,
        c: &Candidate,
        caps: (u64, u64),
        last: bool,
    ) -> Option<(Candidate, Scheduled)> {
        let (v, from) = match c.phases {
            Some((v, t)) => (v, t + 1),
            None => (phase_index(g, &c.sizes)?, 2),
        };
        let most = busiest_len(g.gext[v], c.sizes[v]).max(2);
        if from > most {
            return None;
        }
        let with = |t: usize| {
            let mut ct = c.clone();
            ct.phases = Some((v, t));
            ct.memory = phase_memory(g, &c.sizes, v, t);
            ct
        };
        // The inputs' moves depend on the phased index, not on the count.
        let moves = self.input_moves(g, &with(most));
        let ok = |t: usize| fits(self.group_peak(g, &with(t), &moves, last), caps);
        if !ok(most) {
            return None;
        }
        let (mut lo, mut hi) = (from, most);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if ok(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let ct = with(lo);
        let sched = self.schedule(g, &ct, 0);
        Some((ct, sched))
    }

    /// The largest peak of any rank (tensor data, and with message buffers) over the steps
    /// group `g` would emit on candidate `c` whose inputs move by `moves`, starting from what
    /// is live now; with `last`, the output's final reduction too. Counted by the plan's own
    /// memory model, with a phased compute in closed form over its count: only phases 0, 1
    /// and the last are laid out, since a rank's window of part `t >= 1` is never larger than
    /// of part 1 (ceil parts shrink) and every phase after 0 holds the same other blocks.
    fn group_peak(
        &self,
        g: &GroupCtx,
        c: &Candidate,
        moves: &[Vec<Move>],
        last: bool,
    ) -> (u64, u64) {
        let procs = self.opts.procs;
        // What is live now enters as loads: every later step holds it too.
        let mut steps: Vec<PlanStep> = self
            .state
            .iter()
            .filter_map(|(&id, s)| match s {
                State::At(d) => Some(PlanStep::Load {
                    tensor: id,
                    dist: d.clone(),
                }),
                State::Unloaded => None,
            })
            .collect();
        let parts: Vec<usize> = match c.phases {
            // Buffers (sends and receives) need not shrink with the part: all phases.
            Some((_, t)) if self.opts.mem_total.is_some() => (0..t).collect(),
            Some((_, t)) => {
                let mut p = vec![0, 1.min(t - 1), t - 1];
                p.dedup();
                p
            }
            None => Vec::new(),
        };
        let mut totals = Totals::default();
        let grid = g.grid(&c.sizes);
        let (inputs, resting) = self.emit_steps(
            g,
            c,
            &grid,
            moves.to_vec(),
            &parts,
            0,
            &mut steps,
            &mut totals,
        );
        let gp = self.group_plan(g, c, grid, inputs, resting, 0, 0);
        if last {
            let (out_id, od) = (gp.output.0, &gp.output.1);
            let oshape = shape_of(&g.out_idx, self.einsum.extents());
            let final_dist = reduced_distribution(od, &oshape);
            for mv in plan_move(&oshape, od, &final_dist, procs, self.memo) {
                emit_move(out_id, mv, &mut totals, &mut steps, self.opts, self.memo);
            }
        }
        let mut memory = MemoryModel::new(
            &steps,
            &self.tensors,
            std::slice::from_ref(&gp),
            self.tree,
            procs,
        );
        memory.buffers_from(self.memo);
        let p = memory.peaks(false);
        (p.max, p.max_with_buffers)
    }

    /// The group as the stages see it; registers its output tensor and checks its accesses.
    fn group_ctx<'g>(
        &mut self,
        gi: usize,
        group: &'g FusedGroup,
    ) -> Result<GroupCtx<'g>, PlanError> {
        let ext = self.einsum.extents();
        let root = self.tree.root().index();
        let out_node = group.output.node;
        let out_idx = group.output.indices.clone();
        if !self.tensors.iter().any(|t| t.id == out_node) {
            let (name, kind) = if out_node == root {
                ("out".to_string(), TensorKind::Output)
            } else {
                (format!("t{out_node}"), TensorKind::Intermediate)
            };
            self.tensors.push(Tensor {
                id: out_node,
                name,
                indices: out_idx.clone(),
                shape: shape_of(&out_idx, ext),
                kind,
            });
        }
        if let Some(a) = group
            .inputs
            .iter()
            .find(|a| !self.state.contains_key(&a.node))
        {
            return Err(PlanError::Inconsistent(format!(
                "group {gi} reads node {} before it is produced",
                a.node
            )));
        }
        let gidx = &group.indices[..];
        let inside = |idx: &[Index]| idx.iter().all(|c| gidx.contains(c));
        if !group
            .inputs
            .iter()
            .chain(std::iter::once(&group.output))
            .all(|a| inside(&a.indices))
        {
            return Err(PlanError::Inconsistent(format!(
                "group {gi} accesses an index outside its iteration space"
            )));
        }
        Ok(GroupCtx {
            gi,
            group,
            gidx,
            gext: shape_of(gidx, ext),
            summed: (0..gidx.len())
                .filter(|&v| !out_idx.contains(&gidx[v]))
                .collect(),
            inner_outputs: group
                .steps
                .iter()
                .take(group.steps.len().saturating_sub(1))
                .map(|&s| self.tree.steps[s].output.clone())
                .collect(),
            out_idx,
        })
    }

    /// What the model needs of each input of the group.
    fn input_infos(&self, g: &GroupCtx) -> Vec<InputInfo> {
        let procs = self.opts.procs;
        g.group
            .inputs
            .iter()
            .map(|a| {
                let shape = shape_of(&a.indices, self.einsum.extents());
                let pos = g.positions(&a.indices);
                let from = match &self.state[&a.node] {
                    State::Unloaded => start_of(&self.tensors[a.node], self.opts, procs),
                    State::At(d) => Some(d.clone()),
                };
                let (partial_q, partial_block) = match &from {
                    Some(d) if d.is_partial() => (
                        d.partial.iter().map(|&k| d.grid.dims[k].size).product(),
                        block_len(d, 0, &shape),
                    ),
                    _ => (1, 0),
                };
                let from_first = from.as_ref().and_then(|d| ranges_of(d, 0, &shape));
                // The input sits in the group's distribution on the grid of these sizes.
                let same_grid = from.as_ref().and_then(|f| {
                    let same = f.partial.is_empty()
                        && f.grid.dims.len() == g.gidx.len()
                        && f.grid.dims.iter().zip(g.gidx).all(|(d, &c)| d.index == c)
                        && f.split
                            .iter()
                            .zip(&pos)
                            .all(|(sp, &v)| sp.len() == 1 && sp[0] == v);
                    same.then(|| f.grid.dims.iter().map(|d| d.size).collect())
                });
                InputInfo {
                    from,
                    shape,
                    pos,
                    partial_q,
                    partial_block,
                    from_first,
                    same_grid,
                }
            })
            .collect()
    }

    /// Stage 1: every enumerated grid with its model figures (words, memory, work, distance
    /// to the SOAP tile), keeping those that balance the work.
    fn candidates(&self, g: &GroupCtx) -> Result<(Vec<Candidate>, usize), PlanError> {
        let infos = self.input_infos(g);
        // Per grid dim, the log of the tile's count along it (what `tile_dist` compares to).
        let tile_ln: Vec<f64> = g
            .gidx
            .iter()
            .zip(&g.gext)
            .map(|(c, &n)| {
                let t = g
                    .group
                    .bound
                    .tile
                    .get(c)
                    .copied()
                    .unwrap_or(n as f64)
                    .max(1.0);
                (n as f64 / t).max(1.0).ln()
            })
            .collect();
        let out_pos = g.positions(&g.out_idx);
        let inner_pos: Vec<Vec<usize>> = g.inner_outputs.iter().map(|o| g.positions(o)).collect();
        let axes = grids::Axes::new(&g.gext, self.opts.procs);
        let slack = self.opts.balance_tolerance;
        let budget = self.budget(g.gi).is_some();
        // Without a budget each grid's floor is taken in the walk (see below).
        let balanced = if budget {
            axes.balanced(slack, |_| 0.0)
        } else {
            let table = FloorTable::new(g, &infos, &out_pos, &axes);
            axes.balanced(slack, |at| table.floor(at))
        };
        let (floors, considered) = (&balanced.values, balanced.count);
        if considered == 0 {
            return Err(PlanError::Inconsistent(format!(
                "group {} has no grid",
                g.gi
            )));
        }
        let grid = |i: usize| balanced.sizes(&axes, i);
        let model_of = |sizes| model(g, &infos, &out_pos, &inner_pos, &tile_ln, sizes);
        if budget {
            // Under a budget every grid may be tried in turn: all are modelled.
            return Ok((
                (0..considered).map(|i| model_of(grid(i))).collect(),
                considered,
            ));
        }
        // Without one only the best EXACT_CANDIDATES by the model and the best grid on all
        // ranks are ever used: grids whose floor on the model's words already exceeds both
        // the EXACT_CANDIDATES-th best words modelled so far and the best on all ranks are
        // not modelled (the floor takes the inputs' lacks on rank 0 alone, so it never
        // exceeds the words). The grids of least floor are modelled first, so that the scan
        // of the rest starts from good incumbents.
        let full = |i: usize| balanced.uses_all(i);
        let seeds = least_floors(floors, full, 2 * EXACT_CANDIDATES);
        let mut bound = Incumbents::default();
        let mut cands = Vec::new();
        let mut visit = |i: usize| {
            let full = full(i);
            if bound.prunes(floors[i], full) {
                return;
            }
            let c = model_of(grid(i));
            bound.add(c.model_comm, full);
            cands.push(c);
        };
        for &i in &seeds {
            visit(i);
        }
        let mut next_seed = {
            let mut s = seeds.clone();
            s.sort_unstable();
            s.into_iter().peekable()
        };
        for i in 0..considered {
            if next_seed.next_if_eq(&i).is_none() {
                visit(i);
            }
        }
        Ok((cands, considered))
    }

    /// Stage 2: under a budget, a grid whose blocks exceed it may still fit when it walks a
    /// summed index in phases (2.5D / SUMMA): the fewest phases that fit are taken; grids
    /// that fit neither way are dropped.
    fn fit_phases(&self, g: &GroupCtx, cands: &mut Vec<Candidate>) -> Result<(), PlanError> {
        let Some(caps) = self.budget(g.gi) else {
            return Ok(());
        };
        // The data is part of the whole: either cap bounds the model's blocks.
        let s = caps.0.min(caps.1);
        for c in cands.iter_mut().filter(|c| c.memory > s) {
            if let Some((v, t, m)) = fewest_phases(g, &c.sizes, s) {
                c.memory = m;
                c.phases = Some((v, t));
            }
        }
        let min_mem = cands.iter().map(|c| c.memory).min().unwrap_or(0);
        cands.retain(|c| c.memory <= s);
        if cands.is_empty() {
            let detail = format!(" (group {}: {})", g.gi, g.group.einsum_string());
            return Err(if caps.0 <= caps.1 {
                PlanError::MemoryTooSmall {
                    budget: caps.0,
                    needed: min_mem,
                    detail,
                }
            } else {
                PlanError::TotalMemoryTooSmall {
                    budget: caps.1,
                    needed: min_mem,
                    detail,
                }
            });
        }
        Ok(())
    }

    /// Stage 3: exact words of the best few candidates (sorted by the model), the busiest
    /// rank first, then the total; the winner keeps its moves.
    fn score(&self, g: &GroupCtx, cands: &[Candidate]) -> Result<Scheduled, PlanError> {
        let mut best: Option<Scheduled> = None;
        for s in self.scheduled(g, cands) {
            if best
                .as_ref()
                .is_none_or(|b| (s.max_per_rank, s.total) < (b.max_per_rank, b.total))
            {
                best = Some(s);
            }
        }
        best.ok_or_else(|| PlanError::Inconsistent(format!("group {}: no grid scheduled", g.gi)))
    }

    /// Every candidate [`Self::score`] schedules, best first (its winner first: ties keep
    /// the model's order).
    fn score_all(&self, g: &GroupCtx, cands: &[Candidate]) -> Vec<Scheduled> {
        let mut all = self.scheduled(g, cands);
        all.sort_by_key(|s| (s.max_per_rank, s.total, s.candidate));
        all
    }

    /// The exact schedules of the first [`EXACT_CANDIDATES`] candidates, in their order,
    /// leaving out those past the first on more than [`EXACT_MAX_GRID`] ranks (scoring is
    /// O(P) each). They are independent: scheduled on all cores (the trees of a choice
    /// already share them, but the last tree planned would otherwise finish alone), unless
    /// their grids hold fewer than [`PAR_MIN_GRID_RANKS`] ranks together.
    fn scheduled(&self, g: &GroupCtx, cands: &[Candidate]) -> Vec<Scheduled> {
        let mut picked = Vec::new();
        let mut ranks = 0usize;
        for (ci, c) in cands.iter().enumerate().take(EXACT_CANDIDATES) {
            let size: usize = c.sizes.iter().product();
            if ci > 0 && size > EXACT_MAX_GRID {
                continue;
            }
            picked.push((ci, c));
            ranks = ranks.saturating_add(size);
            if size > EXACT_MAX_GRID {
                break;
            }
        }
        deinsum_runtime::map_in_order(&picked, ranks >= PAR_MIN_GRID_RANKS, |&(ci, c)| {
            self.schedule(g, c, ci)
        })
    }

    /// The moves that bring each input of the group to where it rests on candidate `c`.
    fn input_moves(&self, g: &GroupCtx, c: &Candidate) -> Vec<Vec<Move>> {
        let grid = g.grid(&c.sizes);
        g.group
            .inputs
            .iter()
            .map(|a| {
                let shape = shape_of(&a.indices, self.einsum.extents());
                let target = resting_for(&grid, g.gidx, &a.indices, c.phases);
                let from = current(&self.state, &self.tensors, self.opts, a.node, &target);
                plan_move(&shape, &from, &target, self.opts.procs, self.memo)
            })
            .collect()
    }

    /// The exact schedule of candidate `ci`: the moves of its inputs, its phase fetches and
    /// the reduction of its output, counted per rank.
    fn schedule(&self, g: &GroupCtx, c: &Candidate, ci: usize) -> Scheduled {
        let (procs, ext) = (self.opts.procs, self.einsum.extents());
        let grid = g.grid(&c.sizes);
        // The received words of every move, added per rank below.
        let mut words: Vec<std::sync::Arc<crate::rank_words::RankWords>> = Vec::new();
        let mut total = 0u64;
        let moves = self.input_moves(g, c);
        for (a, m) in g.group.inputs.iter().zip(&moves) {
            for mv in m {
                words.push(mv.received.clone());
                total += mv.total();
            }
            if let (Some(k), Some((_, t))) = (phased_dim(c.phases, g.gidx, &a.indices), c.phases) {
                let shape = shape_of(&a.indices, ext);
                let target = resting_for(&grid, g.gidx, &a.indices, c.phases);
                let whole = g.dist(&grid, &a.indices, false);
                for part in 0..t {
                    let w = windowed(&whole, k, t, part);
                    let v = self
                        .memo
                        .received(&MoveView::new(&shape, &target, &w, false, procs));
                    total += v.total_received;
                    words.push(v);
                }
            }
        }
        // The reduction of this group's output (scattered over its own grid).
        let od = g.dist(&grid, &g.out_idx, true);
        if od.is_partial() {
            let oshape = shape_of(&g.out_idx, ext);
            let rd = reduced_distribution(&od, &oshape);
            for mv in plan_move(&oshape, &od, &rd, procs, self.memo) {
                words.push(mv.received.clone());
                total += mv.total();
            }
        }
        Scheduled {
            max_per_rank: self.memo.max_of_sum(&words),
            total,
            candidate: ci,
            moves,
        }
    }

    /// Why the chosen grid (its exact words on the busiest rank and in all: `words`) leaves
    /// ranks idle, when it does.
    fn note_idle(
        &mut self,
        g: &GroupCtx,
        c: &Candidate,
        words: (u64, u64),
        best_full_p: Option<&Candidate>,
    ) {
        let procs = self.opts.procs;
        let used: usize = c.sizes.iter().product();
        if used >= procs {
            return;
        }
        let (gi, name) = (g.gi, g.group.einsum_string());
        let max_possible: u128 = g.gext.iter().map(|&n| n as u128).product();
        let why = if max_possible < procs as u128 {
            format!("the extents of group {gi} ({name}) allow at most {max_possible} ranks")
        } else if let Some(f) = best_full_p.filter(|_| procs > EXACT_MAX_GRID) {
            // Grids this large are ranked by the model alone (scoring them is O(P) each).
            let cmp = if c.model_comm < f.model_comm {
                "fewer"
            } else {
                "no more"
            };
            format!(
                "group {gi} ({name}): the grid {:?} on {used} ranks moves {cmp} words by the model ({:.0}) than the best {procs}-rank grid {:?} ({:.0}); grids over {EXACT_MAX_GRID} ranks are not scored exactly",
                c.sizes, c.model_comm, f.sizes, f.model_comm
            )
        } else if let Some(f) = best_full_p {
            // Exact words decide (busiest rank, then all); the model only ranks who is scored.
            let fs = self.schedule(g, f, 0);
            let full = (fs.max_per_rank, fs.total);
            if words <= full {
                let fewer = if words < full { "fewer" } else { "as few" };
                format!(
                    "group {gi} ({name}): the grid {:?} on {used} ranks moves {fewer} words ({} on the busiest rank, {} in all) than the best {procs}-rank grid {:?} ({}, {})",
                    c.sizes, words.0, words.1, f.sizes, full.0, full.1
                )
            } else {
                format!(
                    "group {gi} ({name}): the grid {:?} on {used} ranks ({} words on the busiest rank, {} in all) was chosen among the grids scored exactly; the best {procs}-rank grid {:?} ({}, {}) was not scored (model {:.0} words against {:.0})",
                    c.sizes, words.0, words.1, f.sizes, full.0, full.1, f.model_comm, c.model_comm
                )
            }
        } else {
            format!(
                "group {gi} ({name}): no grid of {procs} ranks balances the work within {:.0}% (or fits the memory budget); {:?} uses {used}",
                self.opts.balance_tolerance * 100.0,
                c.sizes
            )
        };
        self.idle_reasons.push(why);
    }

    /// Stage 4: the steps of the chosen grid — loads, moves, the compute (or its phases with
    /// their fetches), frees — and the group's record.
    fn emit(&mut self, g: &GroupCtx, c: &Candidate, sched: Scheduled, considered: usize) {
        let grid = g.grid(&c.sizes);
        let parts: Vec<usize> = (0..c.phases.map_or(0, |(_, t)| t)).collect();
        let mut steps = std::mem::take(&mut self.steps);
        let mut totals = std::mem::take(&mut self.totals);
        let (inputs, resting) = self.emit_steps(
            g,
            c,
            &grid,
            sched.moves,
            &parts,
            g.gi,
            &mut steps,
            &mut totals,
        );
        (self.steps, self.totals) = (steps, totals);
        for a in &g.group.inputs {
            self.state.remove(&a.node);
        }
        let gp = self.group_plan(g, c, grid, inputs, resting, sched.max_per_rank, considered);
        self.state
            .insert(g.group.output.node, State::At(gp.output.1.clone()));
        self.groups.push(gp);
    }

    /// Appends to `steps` the loads and moves of the group's inputs (`moves`), its compute or
    /// the phases `parts` of it (`gid`: the group index the steps name) and the frees, their
    /// volumes counted into `totals`; returns the inputs' group distributions and, for those
    /// that rest elsewhere between phases, where they rest.
    #[allow(clippy::too_many_arguments)]
    fn emit_steps(
        &self,
        g: &GroupCtx,
        c: &Candidate,
        grid: &Grid,
        moves: Vec<Vec<Move>>,
        parts: &[usize],
        gid: usize,
        steps: &mut Vec<PlanStep>,
        totals: &mut Totals,
    ) -> (Placed, Placed) {
        let mut inputs = Vec::new();
        let mut resting: Vec<(TensorId, Distribution)> = Vec::new();
        for (a, m) in g.group.inputs.iter().zip(moves) {
            let whole = g.dist(grid, &a.indices, false);
            let target = resting_for(grid, g.gidx, &a.indices, c.phases);
            if let State::Unloaded = self.state[&a.node] {
                let d = current(&self.state, &self.tensors, self.opts, a.node, &target);
                steps.push(PlanStep::Load {
                    tensor: a.node,
                    dist: d,
                });
            }
            for mv in m {
                emit_move(a.node, mv, totals, steps, self.opts, self.memo);
            }
            if target != whole {
                resting.push((a.node, target));
            }
            inputs.push((a.node, whole));
        }
        match c.phases {
            None => steps.push(PlanStep::Compute { group: gid }),
            Some(_) => {
                for &part in parts {
                    let step = self.phase_step(g, c, grid, &inputs, part, gid, totals);
                    steps.push(step);
                }
            }
        }
        for a in &g.group.inputs {
            steps.push(PlanStep::Free { tensor: a.node });
        }
        (inputs, resting)
    }

    /// The record of group `g` on candidate `c`.
    #[allow(clippy::too_many_arguments)]
    fn group_plan(
        &self,
        g: &GroupCtx,
        c: &Candidate,
        grid: Grid,
        inputs: Vec<(TensorId, Distribution)>,
        resting: Vec<(TensorId, Distribution)>,
        predicted_max_per_rank: u64,
        considered: usize,
    ) -> GroupPlan {
        let od = g.dist(&grid, &g.out_idx, true);
        let box_ceil: BTreeMap<Index, usize> = g
            .gidx
            .iter()
            .zip(&g.gext)
            .zip(&c.sizes)
            .map(|((&i, &n), &p)| (i, busiest_len(n, p)))
            .collect();
        let flops: f64 = g
            .group
            .steps
            .iter()
            .map(|&s| {
                self.tree.steps[s]
                    .indices()
                    .iter()
                    .map(|i| box_ceil.get(i).copied().unwrap_or(1) as f64)
                    .product::<f64>()
            })
            .sum();
        GroupPlan {
            group: g.group.clone(),
            grid,
            inputs,
            output: (g.group.output.node, od),
            max_flops_per_rank: flops,
            bound_memory_independent: 0.0,
            bound_memory_dependent: 0.0,
            predicted_max_per_rank,
            candidates_considered: considered,
            phases: c.phases.map(|(v, t)| Phases {
                index: g.gidx[v],
                count: t,
                resting,
                overlap: false,
            }),
        }
    }

    /// One phase of a phased compute: the windows every rank
    /// fetches, then the compute.
    #[allow(clippy::too_many_arguments)]
    fn phase_step(
        &self,
        g: &GroupCtx,
        c: &Candidate,
        grid: &Grid,
        inputs: &[(TensorId, Distribution)],
        part: usize,
        gid: usize,
        totals: &mut Totals,
    ) -> PlanStep {
        let procs = self.opts.procs;
        let t = c.phases.map_or(1, |(_, t)| t);
        let mut fetch = Vec::new();
        let mut views = Vec::new();
        for (a, (_, whole)) in g.group.inputs.iter().zip(inputs) {
            let Some(k) = phased_dim(c.phases, g.gidx, &a.indices) else {
                continue;
            };
            let rest = resting_for(grid, g.gidx, &a.indices, c.phases);
            let w = windowed(whole, k, t, part);
            let shape = shape_of(&a.indices, self.einsum.extents());
            views.push(MoveView::new(&shape, &rest, &w, false, procs));
            fetch.push((a.node, rest, w));
        }
        let (each, volume) = totals.tally_each(&views, procs, self.opts.per_rank, self.memo);
        let fetch = fetch
            .into_iter()
            .zip(each)
            .zip(&views)
            .map(|(((tensor, from, to), volume), view)| Fetch {
                tensor,
                pattern: view.kind(volume.total),
                from,
                to,
                volume,
            })
            .collect();
        PlanStep::ComputePhase {
            group: gid,
            phase: part,
            fetch,
            prefetch: Vec::new(),
            volume,
        }
    }

    /// Stage 5: the output's reduction, then the predictions (words, memory, per-rank I/O
    /// against the SOAP bound, idle ranks) and the plan.
    pub(crate) fn finish(mut self, path: Vec<Vec<usize>>) -> Result<Plan, PlanError> {
        let (procs, opts, tree) = (self.opts.procs, self.opts, self.tree);
        let out_id = tree.root().index();
        let Some(State::At(out_dist)) = self.state.get(&out_id).cloned() else {
            return Err(PlanError::Inconsistent(
                "no group produces the einsum's output".into(),
            ));
        };
        let oshape = shape_of(
            &tree.steps[tree.steps.len() - 1].output,
            self.einsum.extents(),
        );
        let final_dist = reduced_distribution(&out_dist, &oshape);
        for mv in plan_move(&oshape, &out_dist, &final_dist, procs, self.memo) {
            emit_move(
                out_id,
                mv,
                &mut self.totals,
                &mut self.steps,
                opts,
                self.memo,
            );
        }
        // Candidates are compared on seconds and words: without caps the peaks wait.
        let defer = self.defer_memory && crate::predict::memory_deferrable(opts);
        let touched_per_rank = match defer {
            true => 0,
            false => touched(&self.groups, &self.tensors, procs),
        };
        let mut memory = MemoryModel::new(&self.steps, &self.tensors, &self.groups, tree, procs);
        if !defer {
            memory.buffers_from(self.memo);
        }
        let ranks_used = memory.ranks_used;
        let peaks = match defer {
            true => Peaks::default(),
            false => memory.peaks(opts.per_rank),
        };
        let (max_peak, max_peak_buf) = (peaks.max, peaks.max_with_buffers);
        if let Some(s) = opts.mem.filter(|&s| max_peak > s) {
            return Err(PlanError::MemoryTooSmall {
                budget: s,
                needed: max_peak,
                detail: " (peak over the plan's steps, including input blocks in their starting distribution and receive buffers)".into(),
            });
        }
        if let Some(t) = opts.mem_total.filter(|&t| max_peak_buf > t) {
            return Err(PlanError::TotalMemoryTooSmall {
                budget: t,
                needed: max_peak_buf,
                detail: " (peak over the plan's steps with message buffers)".into(),
            });
        }
        let idle = (ranks_used < procs).then(|| {
            let why = if self.idle_reasons.is_empty() {
                "no group needs them".to_string()
            } else {
                self.idle_reasons.join("; ")
            };
            format!("{} of {procs} ranks idle: {why}", procs - ranks_used)
        });
        let einsum = self.einsum;
        let expression = format!(
            "{}->{}",
            (0..einsum.num_inputs())
                .map(|k| einsum.input_indices(k).iter().collect::<String>())
                .collect::<Vec<_>>()
                .join(","),
            einsum.output().iter().collect::<String>()
        );
        let mut prediction = Prediction {
            touched_per_rank,
            // Seconds are predicted after planning (crate::time::annotate).
            ..Prediction::default()
        };
        let words = self.totals.sums(opts.per_rank);
        match defer {
            true => set_sums(&mut prediction, words),
            false => set_prediction(&mut prediction, &mut self.groups, words, peaks, procs, opts),
        }
        Ok(Plan {
            version: PLAN_VERSION,
            expression,
            einsum: einsum.clone(),
            procs,
            mem: opts.mem,
            mem_total: opts.mem_total,
            dtype: opts.dtype,
            tree: tree.clone(),
            path,
            tensors: self.tensors,
            groups: self.groups,
            steps: self.steps,
            output: (out_id, final_dist),
            prediction,
            idle,
            ranks_used,
            inputs_in_place: opts.inputs_in_place,
        })
    }
}

/// The branch-and-bound state of [`Planner::candidates`]: the least [`EXACT_CANDIDATES`]
/// model words seen, and the least on all ranks.
struct Incumbents {
    /// The words as bits (words are >= 0, so their bits order as the numbers do); a max-heap.
    best: std::collections::BinaryHeap<u64>,
    best_full: f64,
}

impl Default for Incumbents {
    fn default() -> Self {
        Incumbents {
            best: std::collections::BinaryHeap::new(),
            best_full: f64::INFINITY,
        }
    }
}

impl Incumbents {
    /// Whether a grid whose model words are at least `floor` (`full`: on all ranks) can be
    /// neither among the best [`EXACT_CANDIDATES`] nor the best on all ranks.
    fn prunes(&self, floor: f64, full: bool) -> bool {
        let top = if self.best.len() < EXACT_CANDIDATES {
            f64::INFINITY
        } else {
            f64::from_bits(*self.best.peek().unwrap_or(&u64::MAX))
        };
        floor > top && !(full && floor <= self.best_full)
    }

    /// Counts a modelled grid's words.
    fn add(&mut self, words: f64, full: bool) {
        self.best.push(words.max(0.0).to_bits());
        if self.best.len() > EXACT_CANDIDATES {
            self.best.pop();
        }
        if full {
            self.best_full = self.best_full.min(words);
        }
    }
}

/// The positions of the `k` least `floors`, and of the `k` least among those where `full`
/// holds, once each, by floor then position (floors are >= 0: their bits order as they do).
fn least_floors(floors: &[f64], full: impl Fn(usize) -> bool, k: usize) -> Vec<usize> {
    let mut any = std::collections::BinaryHeap::with_capacity(k + 1);
    let mut on_all = std::collections::BinaryHeap::with_capacity(k + 1);
    for (i, &f) in floors.iter().enumerate() {
        let key = (f.max(0.0).to_bits(), i);
        for (heap, take) in [(&mut any, true), (&mut on_all, false)] {
            if !take && !full(i) {
                continue;
            }
            if heap.len() < k {
                heap.push(key);
            } else if heap.peek().is_some_and(|&top| key < top) {
                heap.pop();
                heap.push(key);
            }
        }
    }
    let mut keys: Vec<(u64, usize)> = any.into_iter().chain(on_all).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter().map(|(_, i)| i).collect()
}

/// A floor on [`model`]'s words for the grid of `sizes`: the same sum in the same order, with
/// each input's lack taken on rank 0 alone (the model takes the larger of ranks 0 and
/// size-1), so it never exceeds the model's words (float addition is monotone). The planner
/// takes it from a [`FloorTable`]; this is the reference the table is tested against.
#[cfg(test)]
fn model_floor(g: &GroupCtx, infos: &[InputInfo], out_pos: &[usize], sizes: &[usize]) -> f64 {
    let mut comm = 0f64;
    for info in infos {
        if info.from.is_none() || info.same_grid.as_deref() == Some(sizes) {
            continue;
        }
        comm += rank_lack(info, sizes, 0, info.from_first.as_ref()) as f64;
        if info.partial_q > 1 {
            let q = info.partial_q;
            comm += info.partial_block as f64 * (q - 1) as f64 / q as f64;
        }
    }
    let ob: u64 = out_pos
        .iter()
        .map(|&v| busiest_len(g.gext[v], sizes[v]) as u64)
        .product();
    let q: usize = g.summed.iter().map(|&v| sizes[v]).product();
    comm + ob as f64 * (q - 1) as f64 / q as f64
}

/// What rank `r` (0, or the grid's last rank: coordinates 0, or sizes-1 everywhere) lacks of
/// its target block of `info` on the grid of `sizes`, given the block `from` it holds now.
fn rank_lack(info: &InputInfo, sizes: &[usize], r: usize, from: Option<&crate::Ranges>) -> u64 {
    let mut t_len = 1u64;
    let mut both = 1u64;
    for (k, (&n, &v)) in info.shape.iter().zip(&info.pos).enumerate() {
        let x = if r == 0 { 0 } else { sizes[v] - 1 };
        let (t, b) = dim_lack(n, sizes[v], x, from.map(|fb| fb[k]));
        t_len *= t;
        both *= b;
    }
    if from.is_some() {
        t_len - both
    } else {
        t_len
    }
}

/// Along one index of extent `n` split in `p`: the length of part `x` (the target) and how
/// much of it the range `from` holds (0 without one).
fn dim_lack(n: usize, p: usize, x: usize, from: Option<(usize, usize)>) -> (u64, u64) {
    let (ts, te) = crate::block_range(0, n, p, x);
    let both = from.map_or(0, |(lo, hi)| te.min(hi).saturating_sub(ts.max(lo)) as u64);
    ((te - ts) as u64, both)
}

/// [`model_floor`] tabled over a group's candidate sizes ([`grids::Axes`]): a grid's floor
/// from its positions among the candidates by products of tabled factors, without a
/// division, in the same order (the same figure, bit for bit).
struct FloorTable {
    /// The inputs that move (those loaded in place contribute nothing).
    inputs: Vec<FloorInput>,
    /// Per output index: its grid dim and its block per candidate size.
    out: Vec<(usize, Vec<u64>)>,
    /// Per summed index: its grid dim and its candidate sizes.
    summed: Vec<(usize, Vec<usize>)>,
}

/// One input of a [`FloorTable`].
struct FloorInput {
    /// Per index of the input: its grid dim and, per candidate size, rank 0's target length
    /// and how much of it rank 0 holds now ([`dim_lack`]).
    dims: Vec<(usize, Vec<(u64, u64)>)>,
    /// Whether rank 0 holds a block of it now.
    held: bool,
    /// The partial-sum term: block and count of partial copies, when it carries partials.
    partial: Option<(u64, usize)>,
    /// The candidate positions of the grid it already sits on, if any.
    same: Option<Vec<u32>>,
}

impl FloorTable {
    fn new(g: &GroupCtx, infos: &[InputInfo], out_pos: &[usize], axes: &grids::Axes) -> Self {
        let inputs = infos
            .iter()
            .filter(|info| info.from.is_some())
            .map(|info| FloorInput {
                dims: info
                    .pos
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| {
                        let held = info.from_first.as_ref().map(|fb| fb[k]);
                        let n = info.shape[k];
                        let per = axes.candidates(v).iter();
                        (v, per.map(|&p| dim_lack(n, p, 0, held)).collect())
                    })
                    .collect(),
                held: info.from_first.is_some(),
                partial: (info.partial_q > 1).then_some((info.partial_block, info.partial_q)),
                // A size that is no candidate is never met: that input never sits in place.
                same: info.same_grid.as_ref().and_then(|sizes| {
                    sizes
                        .iter()
                        .enumerate()
                        .map(|(v, p)| axes.candidates(v).binary_search(p).ok().map(|a| a as u32))
                        .collect()
                }),
            })
            .collect();
        let out = out_pos
            .iter()
            .map(|&v| {
                let n = g.gext[v];
                let per = axes.candidates(v).iter();
                (v, per.map(|&p| busiest_len(n, p) as u64).collect())
            })
            .collect();
        let summed = g
            .summed
            .iter()
            .map(|&v| (v, axes.candidates(v).to_vec()))
            .collect();
        FloorTable {
            inputs,
            out,
            summed,
        }
    }

    /// [`model_floor`] of the grid at candidate positions `at`.
    fn floor(&self, at: &[u32]) -> f64 {
        let mut comm = 0f64;
        for a in &self.inputs {
            if a.same.as_deref() == Some(at) {
                continue;
            }
            let (mut t_len, mut both) = (1u64, 1u64);
            for (v, per) in &a.dims {
                let (t, b) = per[at[*v] as usize];
                t_len *= t;
                both *= b;
            }
            let lack = if a.held { t_len - both } else { t_len };
            comm += lack as f64;
            if let Some((block, q)) = a.partial {
                comm += block as f64 * (q - 1) as f64 / q as f64;
            }
        }
        let ob: u64 = self
            .out
            .iter()
            .map(|(v, per)| per[at[*v] as usize])
            .product();
        let q: usize = self
            .summed
            .iter()
            .map(|(v, per)| per[at[*v] as usize])
            .product();
        comm + ob as f64 * (q - 1) as f64 / q as f64
    }
}

/// Whether a peak (tensor data, with message buffers) is within the caps.
fn fits(peak: (u64, u64), caps: (u64, u64)) -> bool {
    peak.0 <= caps.0 && peak.1 <= caps.1
}

/// The model figures of the grid of `sizes`: what ranks 0 and size-1 lack of their input
/// blocks plus the reduction of the output (words), the blocks held (memory), the busiest
/// box (work) and the distance to the SOAP tile.
fn model(
    g: &GroupCtx,
    infos: &[InputInfo],
    out_pos: &[usize],
    inner_pos: &[Vec<usize>],
    tile_ln: &[f64],
    sizes: Vec<usize>,
) -> Candidate {
    let mut comm = 0f64;
    let mut mem = 0u64;
    // Ceil block of every group index on this grid, and of a tensor over `at`.
    let bs: smallvec::SmallVec<[u64; 12]> = g
        .gext
        .iter()
        .zip(&sizes)
        .map(|(&n, &p)| busiest_len(n, p) as u64)
        .collect();
    let blk_at = |at: &[usize]| -> u64 { at.iter().map(|&v| bs[v]).product() };
    let last = sizes.iter().product::<usize>().saturating_sub(1);
    for info in infos {
        let b = blk_at(&info.pos);
        mem += b;
        let Some(from) = &info.from else { continue };
        if info.same_grid.as_deref() == Some(&sizes[..]) {
            continue;
        }
        // What ranks 0 and size-1 lack of their target block (a sample of the grid): rank 0
        // is at coordinates 0, rank size-1 at sizes-1 everywhere.
        let from_last = ranges_of(from, last, &info.shape);
        let lack = rank_lack(info, &sizes, 0, info.from_first.as_ref()).max(rank_lack(
            info,
            &sizes,
            last,
            from_last.as_ref(),
        ));
        comm += lack as f64;
        if info.partial_q > 1 {
            let q = info.partial_q;
            comm += info.partial_block as f64 * (q - 1) as f64 / q as f64;
        }
    }
    let ob = blk_at(out_pos);
    mem += ob;
    let q: usize = g.summed.iter().map(|&v| sizes[v]).product();
    comm += ob as f64 * (q - 1) as f64 / q as f64;
    for o in inner_pos {
        mem += blk_at(o);
    }
    let work: u128 = g
        .gext
        .iter()
        .zip(&sizes)
        .map(|(&n, &p)| busiest_len(n, p) as u128)
        .product();
    let tile_dist = sizes
        .iter()
        .zip(tile_ln)
        .map(|(&p, &t)| ((p as f64).ln() - t).abs())
        .sum();
    Candidate {
        sizes,
        model_comm: comm,
        memory: mem,
        work,
        tile_dist,
        phases: None,
    }
}

/// The summed index to walk in phases on the grid of `sizes` and the fewest phases whose
/// blocks fit `s` words, with the memory they take (`None` when no phasing fits).
fn fewest_phases(g: &GroupCtx, sizes: &[usize], s: u64) -> Option<(usize, usize, u64)> {
    let v = phase_index(g, sizes)?;
    let mem_at = |t: usize| phase_memory(g, sizes, v, t);
    let (mut lo, mut hi) = (2usize, busiest_len(g.gext[v], sizes[v]).max(2));
    if mem_at(hi) > s {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if mem_at(mid) <= s {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some((v, lo, mem_at(lo)))
}

/// The summed index the grid of `sizes` walks in phases: the one with the largest block
/// among those an input is replicated along (`None`: no input is).
fn phase_index(g: &GroupCtx, sizes: &[usize]) -> Option<usize> {
    let gidx = g.gidx;
    let bv = |v: usize| busiest_len(g.gext[v], sizes[v]);
    g.summed
        .iter()
        .copied()
        .filter(|&v| {
            g.group
                .inputs
                .iter()
                .any(|a| a.indices.contains(&gidx[v]) && replicas_of(sizes, gidx, &a.indices) > 1)
        })
        .max_by_key(|&v| (bv(v), usize::MAX - v))
}

/// The model's memory of the grid of `sizes` walking index `v` in `t` phases.
fn phase_memory(g: &GroupCtx, sizes: &[usize], v: usize, t: usize) -> u64 {
    let gidx = g.gidx;
    let b = busiest_len(g.gext[v], sizes[v]) as u64;
    let mut m = 0u64;
    for a in &g.group.inputs {
        let full = g.blk(sizes, &a.indices);
        if a.indices.contains(&gidx[v]) {
            let rep = replicas_of(sizes, gidx, &a.indices) as u64;
            let others = full / b.max(1);
            m += others * (b.div_ceil(rep) + b.div_ceil(t as u64));
        } else {
            m += full;
        }
    }
    // The accumulated output block and the phase's partial result beside it.
    m += 2 * g.blk(sizes, &g.out_idx);
    for o in &g.inner_outputs {
        let full = g.blk(sizes, o);
        m += if o.contains(&gidx[v]) {
            (full / b.max(1)) * b.div_ceil(t as u64)
        } else {
            full
        };
    }
    m
}

/// The model's order of candidates: fewer words, then less memory, less work, closer to the
/// tile, more ranks, and the sizes themselves (a total order).
fn order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    a.model_comm
        .total_cmp(&b.model_comm)
        .then(a.memory.cmp(&b.memory))
        .then(a.work.cmp(&b.work))
        .then(a.tile_dist.total_cmp(&b.tile_dist))
        .then(
            b.sizes
                .iter()
                .product::<usize>()
                .cmp(&a.sizes.iter().product::<usize>()),
        )
        .then(a.sizes.cmp(&b.sizes))
}

/// Keeps the best [`EXACT_CANDIDATES`] of `cands` in the model's order (selected, then
/// sorted: the order is total, so this is the prefix a full sort gives); returns the best
/// grid on all `procs` ranks, if any (for the idle-ranks message).
fn select_best(cands: &mut Vec<Candidate>, procs: usize) -> Option<Candidate> {
    let best_full_p = cands
        .iter()
        .filter(|c| c.sizes.iter().product::<usize>() == procs)
        .min_by(|a, b| order(a, b))
        .cloned();
    if cands.len() > EXACT_CANDIDATES {
        cands.select_nth_unstable_by(EXACT_CANDIDATES, order);
        cands.truncate(EXACT_CANDIDATES);
    }
    cands.sort_by(order);
    best_full_p
}

#[cfg(test)]
mod tests {
    use super::*;
    use deinsum_expr::{parse, ExtentSpec};

    /// Every grid the walk enumerates for every group of every cheap tree of `expr`: the
    /// tabled floor is [`model_floor`] bit for bit, the floor never exceeds the model's
    /// words, and the walk's floors are the table's.
    fn floors_hold(expr: &str, sizes: &str, procs: usize, in_place: bool) {
        let spec = ExtentSpec::from_flags(Some(sizes), None, None).expect("sizes");
        let einsum = parse(expr, &spec).expect("einsum");
        let opts = PlanOptions {
            procs,
            inputs_in_place: in_place,
            ..Default::default()
        };
        let trees = deinsum_path::candidates::cheapest(&einsum, &opts.path, 4, 4.0).expect("trees");
        let mut checked = 0usize;
        for info in &trees {
            let fusion = deinsum_soap::analyze(&info.tree, crate::analysis_memory(&einsum, &opts))
                .expect("fusion");
            let memo = MoveMemo::default();
            let mut planner = Planner::new(&einsum, &info.tree, &opts, &memo).expect("planner");
            let n = fusion.groups.len();
            for (gi, group) in fusion.groups.iter().enumerate() {
                let g = planner.group_ctx(gi, group).expect("group");
                let infos = planner.input_infos(&g);
                let out_pos = g.positions(&g.out_idx);
                let inner: Vec<Vec<usize>> =
                    g.inner_outputs.iter().map(|o| g.positions(o)).collect();
                let tile = vec![0.0; g.gext.len()];
                let axes = grids::Axes::new(&g.gext, procs);
                let table = FloorTable::new(&g, &infos, &out_pos, &axes);
                let nd = g.gext.len();
                let slack = opts.balance_tolerance;
                let all = grids::enumerate_flat(&g.gext, procs, slack);
                for sizes in all.chunks(nd.max(1)) {
                    let sizes = &sizes[..nd];
                    let at: Vec<u32> = (0..nd)
                        .map(|v| axes.candidates(v).binary_search(&sizes[v]).expect("cand") as u32)
                        .collect();
                    let floor = model_floor(&g, &infos, &out_pos, sizes);
                    assert_eq!(table.floor(&at).to_bits(), floor.to_bits(), "{sizes:?}");
                    let words = model(&g, &infos, &out_pos, &inner, &tile, sizes.to_vec());
                    assert!(floor <= words.model_comm, "{expr} group {gi} {sizes:?}");
                    checked += 1;
                }
                let b = axes.balanced(slack, |at| table.floor(at));
                for (i, &f) in b.values.iter().enumerate() {
                    let sizes = b.sizes(&axes, i);
                    let want = model_floor(&g, &infos, &out_pos, &sizes);
                    assert_eq!(f.to_bits(), want.to_bits());
                }
                planner.plan_group(gi, group, gi + 1 == n).expect("plan");
            }
        }
        assert!(checked > 0);
    }

    #[test]
    fn floor_is_a_lower_bound_of_the_model() {
        floors_hold("ij,jk->ik", "i=30,j=17,k=23", 12, false);
        floors_hold("ijk,ja,ka->ia", "i=20,j=13,k=9,a=5", 24, false);
        floors_hold("ijk,ja,ka->ia", "i=20,j=13,k=9,a=5", 24, true);
        floors_hold("ijk,ia,ja->ka", "i=11,j=7,k=19,a=6", 30, false);
        floors_hold(
            "ijklm,ja,ka,la,ma->ia",
            "i=7,j=6,k=5,l=9,m=4,a=3",
            64,
            false,
        );
        floors_hold(
            "ijklm,jb,kc,ld,me->ibcde",
            "i=6,j=7,k=5,l=6,m=4,b=3,c=2,d=3,e=2",
            48,
            false,
        );
    }
}
