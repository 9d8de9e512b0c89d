//! Predicted memory per rank: the blocks each rank holds at every step, with and without the
//! message buffers of the step's moves. Built once per plan (rank-independent), queried per
//! rank, so one rank's peak costs O(steps) and all ranks' O(P · steps).

use crate::fasthash::FastMap;
use crate::moves::{ranges_of, Cursor, Cuts, MoveView};
use crate::{Distribution, GroupPlan, PlanStep, Tensor, TensorId, Window};
use deinsum_path::ContractionTree;
use std::collections::BTreeMap;

/// What ranks hold during one step: blocks (distribution, tensor shape, how many copies) and
/// the moves whose buffers sit beside them.
struct StepHolding {
    /// Index of the step in the plan.
    step: usize,
    /// (index into [`MemoryModel::blocks`], copies).
    blocks: Vec<(usize, u64)>,
    moves: Vec<MoveView>,
}

/// The memory model of a plan.
/// Peak words over the ranks ([`MemoryModel::peaks`]).
#[derive(Default)]
pub(crate) struct Peaks {
    /// Max over ranks of the data's peak.
    pub(crate) max: u64,
    /// Max over ranks of the peak with message buffers.
    pub(crate) max_with_buffers: u64,
    /// Each rank's data peak (empty unless asked for).
    pub(crate) per_rank: Vec<u64>,
    /// Each rank's peak with buffers (empty unless asked for).
    pub(crate) per_rank_with_buffers: Vec<u64>,
}

pub(crate) struct MemoryModel {
    held: Vec<StepHolding>,
    /// The distinct blocks held at some step: an index into `bases` and the phase windows
    /// cut from it; a rank's length of each is taken once.
    blocks: Vec<(usize, Vec<Window>)>,
    /// The distinct distributions without windows (with the tensor's shape) the blocks are
    /// cut from: a rank's ranges of each are taken once.
    bases: Vec<(Distribution, Vec<usize>)>,
    /// Message buffer words per rank of some steps, already counted by the planner.
    buffers: BTreeMap<usize, Buffers>,
    /// Ranks that can hold anything (the largest grid, at most P).
    pub(crate) active: usize,
    /// Ranks that compute in at least one group.
    pub(crate) ranks_used: usize,
}

/// A step's message buffer words per rank: its one move's words as the planner counted
/// them (no dense copy), or several moves' added up.
enum Buffers {
    One(std::sync::Arc<crate::rank_words::RankWords>),
    Dense(Vec<u64>),
}

impl Buffers {
    /// `rank`'s words (0 past the counted ranks).
    fn get(&self, rank: usize) -> u64 {
        match self {
            Buffers::One(w) => w.buffer_of(rank),
            Buffers::Dense(v) => v.get(rank).copied().unwrap_or(0),
        }
    }

    /// The largest words of one rank of `ranks` (0 for none counted).
    fn max_in(&self, ranks: std::ops::Range<usize>) -> u64 {
        match self {
            Buffers::One(w) => w.max_buffer_in(ranks),
            Buffers::Dense(v) => {
                let r = ranks.start.min(v.len())..ranks.end.min(v.len());
                v[r].iter().copied().max().unwrap_or(0)
            }
        }
    }
}

/// Ranks whose blocks and buffer words [`MemoryModel::peaks`] sweeps at once.
const PEAK_CHUNK: usize = 4096;

/// Largest per-index table of ranges a test of equal block lengths builds.
pub(crate) const UNIFORM_TABLE: usize = 1 << 16;

/// The shape of every tensor by id, looked up in O(1) (a scan per lookup made a plan of a few
/// hundred steps quadratic); the first tensor of an id wins. An unknown id is a scalar.
pub(crate) struct Shapes<'a>(FastMap<TensorId, &'a [usize]>);

impl<'a> Shapes<'a> {
    pub(crate) fn new(tensors: &'a [Tensor]) -> Self {
        let mut m = FastMap::with_capacity_and_hasher(tensors.len(), Default::default());
        for t in tensors {
            m.entry(t.id).or_insert(t.shape.as_slice());
        }
        Shapes(m)
    }

    /// The shape of tensor `id` (empty when unknown: a scalar).
    pub(crate) fn of(&self, id: TensorId) -> Vec<usize> {
        self.0.get(&id).map(|s| s.to_vec()).unwrap_or_default()
    }
}

/// The moves whose message buffers sit beside step `s`'s blocks.
fn step_moves(s: &PlanStep, shapes: &Shapes<'_>, procs: usize) -> Vec<MoveView> {
    match s {
        PlanStep::Redistribute {
            tensor,
            from,
            to,
            sum,
            ..
        } => vec![MoveView::new(&shapes.of(*tensor), from, to, *sum, procs)],
        PlanStep::ComputePhase {
            fetch, prefetch, ..
        } => fetch
            .iter()
            .chain(prefetch)
            .map(|f| MoveView::new(&shapes.of(f.tensor), &f.from, &f.to, false, procs))
            .collect(),
        _ => Vec::new(),
    }
}

impl MemoryModel {
    /// Walks `steps` once to learn what is live at each of them.
    pub(crate) fn new(
        steps: &[PlanStep],
        tensors: &[Tensor],
        groups: &[GroupPlan],
        tree: &ContractionTree,
        procs: usize,
    ) -> MemoryModel {
        let shapes = Shapes::new(tensors);
        let shape = |id: TensorId| shapes.of(id);
        let mut active = groups.iter().map(|g| g.grid.size()).max().unwrap_or(1);
        let ranks_used = active.min(procs);
        for s in steps {
            let m = match s {
                PlanStep::Load { dist, .. } => dist.grid.size(),
                PlanStep::Redistribute { from, to, .. } => from.grid.size().max(to.grid.size()),
                _ => 0,
            };
            active = active.max(m);
        }
        let mut held = Vec::new();
        // A block's number: its (distribution, shape) interned once (a hash lookup; `distinct`
        // keeps first-seen order).
        let mut index: FastMap<(Distribution, Vec<usize>), usize> = FastMap::default();
        let mut intern = |d: Distribution, sh: Vec<usize>| -> usize {
            let next = index.len();
            *index.entry((d, sh)).or_insert(next)
        };
        // The live tensors' block numbers, interned when they become live: a step's blocks
        // are these plus its own, not every live block hashed again at every step (which made
        // a plan of hundreds of live tensors quadratic in hashing).
        let mut live: BTreeMap<TensorId, usize> = BTreeMap::new();
        let blocks_of = |live: &BTreeMap<TensorId, usize>| -> Vec<(usize, u64)> {
            live.values().map(|&b| (b, 1u64)).collect()
        };
        // The windows a phase prefetched for the next one: held until that phase is done.
        let mut carried: Vec<(Distribution, Vec<usize>, u64)> = Vec::new();
        for (step, s) in steps.iter().enumerate() {
            let blocks = match s {
                PlanStep::Load { tensor, dist } => {
                    live.insert(*tensor, intern(dist.clone(), shape(*tensor)));
                    blocks_of(&live)
                }
                PlanStep::Redistribute { tensor, to, .. } => {
                    let mut b = blocks_of(&live);
                    let to_block = intern(to.clone(), shape(*tensor));
                    b.push((to_block, 1));
                    live.insert(*tensor, to_block);
                    b
                }
                PlanStep::Compute { group } => {
                    let g = &groups[*group];
                    let mut b = blocks_of(&live);
                    let mut own = Vec::new();
                    compute_blocks(&mut own, g, tree, &[], None);
                    b.extend(own.into_iter().map(|(d, sh, n)| (intern(d, sh), n)));
                    live.insert(g.output.0, intern(g.output.1.clone(), shape(g.output.0)));
                    b
                }
                PlanStep::ComputePhase {
                    group,
                    phase,
                    fetch,
                    prefetch,
                    ..
                } => {
                    let g = &groups[*group];
                    let cut = g.phases.as_ref().map(|ph| (ph.index, ph.count, *phase));
                    let mut b = blocks_of(&live);
                    let window = |f: &crate::Fetch| (f.to.clone(), shape(f.tensor), 1);
                    // This phase's windows (fetched now or prefetched by the previous phase)
                    // and the next phase's beside them: the second buffer.
                    let mut windows: Vec<_> = fetch.iter().map(window).collect();
                    windows.append(&mut carried);
                    let next: Vec<_> = prefetch.iter().map(window).collect();
                    windows.extend(next.iter().cloned());
                    carried = next;
                    let mut own = Vec::new();
                    compute_blocks(&mut own, g, tree, &windows, cut);
                    b.extend(own.into_iter().map(|(d, sh, n)| (intern(d, sh), n)));
                    if cut.is_some_and(|(_, t, p)| p + 1 == t) {
                        live.insert(g.output.0, intern(g.output.1.clone(), shape(g.output.0)));
                    }
                    b
                }
                PlanStep::Free { tensor } => {
                    live.remove(tensor);
                    continue;
                }
            };
            let moves = step_moves(s, &shapes, procs);
            held.push(StepHolding {
                step,
                blocks,
                moves,
            });
        }
        let (bases, blocks) = split_windows(index);
        MemoryModel {
            held,
            blocks,
            bases,
            buffers: BTreeMap::new(),
            active: active.min(procs),
            ranks_used,
        }
    }

    /// The peaks over every rank that can hold data (`0..active`): the maxima always, the
    /// per-rank lists (indexed by rank) only with `per_rank`.
    pub(crate) fn peaks(&self, per_rank: bool) -> Peaks {
        if !per_rank {
            if let Some(p) = self.peaks_by_segments() {
                return p;
            }
        }
        let mut p = Peaks::default();
        // Ranks in chunks: each move's buffer words are swept over a chunk at once, in memory
        // bounded by the chunk; each base's block is walked by a cursor (no per-rank
        // divisions), and a block's length is taken again only when its base's block changed.
        let cuts: Vec<Cuts> = self.bases.iter().map(|(d, sh)| Cuts::new(d, sh)).collect();
        let mut cursors: Vec<Cursor> = cuts.iter().map(|c| Cursor::new(c, 0)).collect();
        let sizes: Vec<usize> = self.bases.iter().map(|(d, _)| d.grid.size()).collect();
        let mut lens = vec![0u64; self.blocks.len()];
        let mut changed = vec![true; self.bases.len()];
        let mut inside = vec![false; self.bases.len()];
        let mut bufs: Vec<Vec<Vec<u64>>> = Vec::new();
        let set = self.buffers_set();
        let mut held = Vec::new();
        for r in 0..self.active {
            let lo = r - r % PEAK_CHUNK;
            if r == lo {
                let hi = (lo + PEAK_CHUNK).min(self.active);
                bufs = self
                    .held
                    .iter()
                    .map(|h| match self.buffers.contains_key(&h.step) {
                        true => Vec::new(),
                        false => h.moves.iter().map(|m| m.buffer_words(lo..hi)).collect(),
                    })
                    .collect();
            }
            for (k, c) in cursors.iter_mut().enumerate() {
                let now_inside = r < sizes[k];
                // Leaving a grid changes the block too (it becomes none).
                let moved = now_inside && c.sync();
                changed[k] = moved || now_inside != inside[k];
                inside[k] = now_inside;
                c.advance();
            }
            if changed.iter().any(|&c| c) {
                for ((bi, window), len) in self.blocks.iter().zip(lens.iter_mut()) {
                    if changed[*bi] {
                        *len = match inside[*bi] {
                            true => block_len(cursors[*bi].ranges(), window),
                            false => 0,
                        };
                    }
                }
                self.held_words(&lens, &mut held);
            }
            let (d, b) = self.peak_from(r, &held, &set, |h| {
                bufs[h].iter().map(|v| v[r - lo]).sum::<u64>()
            });
            p.max = p.max.max(d);
            p.max_with_buffers = p.max_with_buffers.max(b);
            if per_rank {
                p.per_rank.push(d);
                p.per_rank_with_buffers.push(b);
            }
        }
        p
    }

    /// [`Self::peaks`]' maxima when every block has one length on every rank of its grid
    /// (and every step that moves has its buffers set): what a rank holds at a step is then
    /// the same on each segment of ranks between two grids' ends, so the maxima are taken
    /// per segment (the largest buffers of its ranks beside its held words) instead of per
    /// rank. `None` otherwise.
    fn peaks_by_segments(&self) -> Option<Peaks> {
        let set = self.buffers_set();
        if self
            .held
            .iter()
            .zip(&set)
            .any(|(h, b)| b.is_none() && !h.moves.is_empty())
        {
            return None;
        }
        let cuts: Vec<Cuts> = self
            .bases
            .iter()
            .map(|(d, sh)| Cuts::capped(d, sh, UNIFORM_TABLE))
            .collect();
        // Per block, the ranks over which its length stays the same (aligned).
        let runs: Vec<usize> = self
            .blocks
            .iter()
            .map(|(bi, window)| cuts[*bi].length_run(window))
            .collect::<Option<_>>()?;
        let sizes: Vec<usize> = self.bases.iter().map(|(d, _)| d.grid.size()).collect();
        // Segments cost a block length each: beside a sweep rank by rank they pay only when
        // few.
        let segments: usize = self
            .blocks
            .iter()
            .zip(&runs)
            .map(|((bi, _), &run)| sizes[*bi].min(self.active) / run.max(1) + 1)
            .sum();
        if segments.saturating_mul(8) > self.active {
            return None;
        }
        let mut p = Peaks::default();
        let (mut lens, mut held) = (vec![0u64; self.blocks.len()], Vec::new());
        let mut lo = 0;
        while lo < self.active {
            let mut hi = self.active;
            for ((bi, window), (len, &run)) in self.blocks.iter().zip(lens.iter_mut().zip(&runs)) {
                let size = sizes[*bi];
                *len = match lo < size {
                    true => {
                        hi = hi.min(size).min((lo / run + 1) * run);
                        let (d, sh) = &self.bases[*bi];
                        ranges_of(d, lo, sh).map_or(0, |r| block_len(&r, window))
                    }
                    false => 0,
                };
            }
            self.held_words(&lens, &mut held);
            for (&x, b) in held.iter().zip(&set) {
                let bufs = b.map_or(0, |b| b.max_in(lo..hi));
                p.max = p.max.max(x);
                p.max_with_buffers = p.max_with_buffers.max(x + bufs);
            }
            lo = hi;
        }
        Some(p)
    }

    /// Peak words of `rank` over the steps: the data, and the data with message buffers (a
    /// rank's packed sends and its receives exist at once).
    pub(crate) fn of_rank(&self, rank: usize) -> (u64, u64) {
        let base: Vec<Option<crate::Ranges>> = self
            .bases
            .iter()
            .map(|(d, sh)| ranges_of(d, rank, sh))
            .collect();
        let lens: Vec<u64> = self
            .blocks
            .iter()
            .map(|(bi, window)| base[*bi].as_ref().map_or(0, |r| block_len(r, window)))
            .collect();
        let mut held = Vec::new();
        self.held_words(&lens, &mut held);
        self.peak_from(rank, &held, &self.buffers_set(), |h| {
            self.held[h]
                .moves
                .iter()
                .map(|m| {
                    let (s, w) = m.words_of(rank);
                    s + w
                })
                .sum()
        })
    }

    /// The words a rank holds at each held step, given its length of every block.
    fn held_words(&self, lens: &[u64], out: &mut Vec<u64>) {
        out.clear();
        out.extend(
            self.held
                .iter()
                .map(|h| h.blocks.iter().map(|&(i, n)| lens[i] * n).sum::<u64>()),
        );
    }

    /// Per held step, the buffer words per rank set by the planner (if any).
    fn buffers_set(&self) -> Vec<Option<&Buffers>> {
        self.held
            .iter()
            .map(|h| self.buffers.get(&h.step))
            .collect()
    }

    /// [`Self::of_rank`] given the words the rank holds at each held step ([`Self::held_words`]),
    /// the buffers set per held step ([`Self::buffers_set`]) and the buffer words of each held
    /// step's moves (`move_words(held index)`, asked only where no buffers were set).
    fn peak_from(
        &self,
        rank: usize,
        held: &[u64],
        set: &[Option<&Buffers>],
        move_words: impl Fn(usize) -> u64,
    ) -> (u64, u64) {
        let (mut peak, mut peak_buf) = (0u64, 0u64);
        for (hi, (&x, b)) in held.iter().zip(set).enumerate() {
            let bufs: u64 = match b {
                Some(b) => b.get(rank),
                None => move_words(hi),
            };
            peak = peak.max(x);
            peak_buf = peak_buf.max(x + bufs);
        }
        (peak, peak_buf)
    }
}

/// Elements of the block with `ranges`, cut to `window`.
fn block_len(ranges: &[(usize, usize)], window: &[Window]) -> u64 {
    ranges
        .iter()
        .enumerate()
        .map(|(v, &range)| Window::narrow(window, v, range.into()).len() as u64)
        .product()
}

impl MemoryModel {
    /// Takes the message buffer words of every step that moves and has none set from `memo`
    /// (each move's words swept once per choice) instead of sweeping them again.
    pub(crate) fn buffers_from(&mut self, memo: &crate::rank_words::MoveMemo) {
        for h in &self.held {
            if h.moves.is_empty() || self.buffers.contains_key(&h.step) {
                continue;
            }
            if let [m] = &h.moves[..] {
                self.buffers.insert(h.step, Buffers::One(memo.words(m)));
                continue;
            }
            let mut words: Vec<u64> = Vec::new();
            for m in &h.moves {
                let w = memo.words(m);
                if words.len() < w.len() {
                    words.resize(w.len(), 0);
                }
                w.for_each(|r, s, x| words[r] += s + x);
            }
            self.buffers.insert(h.step, Buffers::Dense(words));
        }
    }
}

/// The distinct blocks of `index` (in their index order) as an index into the distinct
/// distributions without windows and the windows cut from them.
#[allow(clippy::type_complexity)]
fn split_windows(
    index: FastMap<(Distribution, Vec<usize>), usize>,
) -> (Vec<(Distribution, Vec<usize>)>, Vec<(usize, Vec<Window>)>) {
    let mut keys = vec![None; index.len()];
    for (key, i) in index {
        keys[i] = Some(key);
    }
    let mut base_index: FastMap<(Distribution, Vec<usize>), usize> = FastMap::default();
    let mut bases = Vec::new();
    let mut blocks = Vec::new();
    for (mut d, sh) in keys.into_iter().flatten() {
        let window = std::mem::take(&mut d.window);
        let next = bases.len();
        let bi = *base_index.entry((d.clone(), sh.clone())).or_insert(next);
        if bi == next {
            bases.push((d, sh));
        }
        blocks.push((bi, window));
    }
    (bases, blocks)
}

/// Adds what a compute (or one phase of it) holds beside the live blocks: the fetched
/// windows (with a prefetch, the next phase's too), the result block (twice after phase 0: the accumulated output and the phase's
/// part) and the group-local intermediates over the rank's box, the phased index cut to the
/// phase's part.
fn compute_blocks(
    out: &mut Vec<(Distribution, Vec<usize>, u64)>,
    g: &GroupPlan,
    tree: &ContractionTree,
    windows: &[(Distribution, Vec<usize>, u64)],
    cut: Option<(deinsum_expr::Index, usize, usize)>,
) {
    let ext = |c: &deinsum_expr::Index| tree.extents.get(c).copied().unwrap_or(1);
    let osh: Vec<usize> = g.group.output.indices.iter().map(ext).collect();
    let result_blocks = if cut.is_some_and(|(_, _, part)| part > 0) {
        2
    } else {
        1
    };
    out.push((g.output.1.clone(), osh, result_blocks));
    out.extend(windows.iter().cloned());
    let inner = g
        .group
        .steps
        .iter()
        .take(g.group.steps.len().saturating_sub(1));
    for &st in inner {
        let o = &tree.steps[st].output;
        let window = match cut {
            Some((ci, t, part)) => o
                .iter()
                .position(|&c| c == ci)
                .map(|dim| Window {
                    dim,
                    parts: t,
                    part,
                })
                .into_iter()
                .collect(),
            None => Vec::new(),
        };
        let d = Distribution {
            grid: g.grid.clone(),
            split: o
                .iter()
                .map(|&c| g.grid.position(c).map(|k| vec![k]).unwrap_or_default())
                .collect(),
            partial: Vec::new(),
            window,
            balanced: false,
        };
        out.push((d, o.iter().map(ext).collect(), 1));
    }
}

impl crate::Plan {
    /// Predicted peak memory of `rank` in words: the tensor data alone, and with the message
    /// buffers of each step.
    pub fn peak_of(&self, rank: usize) -> (u64, u64) {
        MemoryModel::new(
            &self.steps,
            &self.tensors,
            &self.groups,
            &self.tree,
            self.procs,
        )
        .of_rank(rank)
    }
}
