//! Predicted seconds of a plan on a [`Machine`]: per step, the busiest rank's time.
//!
//! A move costs what the algorithm MPI uses for its kind costs (Open MPI's tuned fixed
//! decision rules; formulas of Thakur, Rabenseifner and Gropp 2005, see docs/machine.md) plus
//! packing and unpacking at the stream-copy bandwidth. A compute costs, per tree step of the
//! group, its multiply-adds on the busiest rank at the GEMM rate of its shape class. A phase
//! costs its fetches and its compute (their maximum when the fetch is overlapped).

use crate::machine::{Link, Machine};
use crate::{DType, Distribution, GroupPlan, MoveKind, Plan, PlanStep, Volume};
use deinsum_expr::Index;

/// Message-size thresholds (bytes) of Open MPI's tuned fixed decision rules: below them the
/// logarithmic algorithm (recursive doubling, halving, binomial tree) is chosen, above it the
/// ring or pipelined one.
const ALLREDUCE_SMALL: f64 = 10_000.0;
const ALLGATHER_SMALL: f64 = 50_000.0;
const REDUCE_SCATTER_SMALL: f64 = 65_536.0;
const BCAST_SMALL: f64 = 2_048.0;
const REDUCE_SMALL: f64 = 4_096.0;

/// ceil(log2 q) for q >= 1.
fn log2c(q: usize) -> f64 {
    (usize::BITS - q.max(1).saturating_sub(1).leading_zeros()) as f64
}

/// A plan's time model: the machine, the job size and the element type.
pub struct TimeModel<'a> {
    m: &'a Machine,
    procs: usize,
    /// Bytes per second of one rank's memory copies.
    bw: f64,
    /// Bytes per word: the plan's element type's ([`DType::bytes`]).
    wb: f64,
    /// Flops per multiply-add of the element type ([`DType::flops_per_madd`]).
    fpm: f64,
}

impl<'a> TimeModel<'a> {
    /// The model of `m` for a job of `procs` ranks computing in `dtype` (a plan's
    /// [`Plan::dtype`]).
    pub fn new(m: &'a Machine, procs: usize, dtype: DType) -> Self {
        TimeModel {
            m,
            procs,
            bw: m.rank_bandwidth(procs),
            wb: dtype.bytes() as f64,
            fpm: dtype.flops_per_madd(),
        }
    }

    /// The link between the ranks of a fibre that spans `span` consecutive ranks.
    fn link(&self, span: usize) -> &Link {
        if span > self.m.ranks_per_node.max(1) {
            &self.m.inter_node
        } else {
            &self.m.intra_node
        }
    }

    /// Seconds of one move: the collective of `kind` and the copies into and out of the
    /// message buffers.
    pub fn move_seconds(
        &self,
        from: &Distribution,
        to: &Distribution,
        kind: &MoveKind,
        v: &Volume,
    ) -> f64 {
        let wb = self.wb;
        let r = v.max_per_rank as f64 * wb;
        let s = v.max_sent as f64 * wb;
        let pack = (r + s) / self.bw;
        // A reduction reads two words and writes one per word received.
        let gamma = 3.0 / self.bw;
        let g = &from.grid;
        let fibre = |dims: &[usize]| -> (usize, usize) {
            let mut q = 1usize;
            let mut span = 1usize;
            for &d in dims {
                let Some(dim) = g.dims.get(d) else { continue };
                let stride: usize = g.dims[d + 1..].iter().map(|x| x.size).product();
                q *= dim.size;
                span += (dim.size - 1) * stride;
            }
            (q, span)
        };
        let whole = from.grid.size().max(to.grid.size()).min(self.procs).max(1);
        let net = match kind {
            // The executor keeps the block it already holds: nothing is copied.
            MoveKind::Local => return 0.0,
            MoveKind::AllGather { dims } => {
                let (q, span) = fibre(dims);
                let l = self.link(span);
                let msgs = if r * q as f64 / (q as f64 - 1.0).max(1.0) < ALLGATHER_SMALL {
                    log2c(q)
                } else {
                    q as f64 - 1.0
                };
                msgs * l.alpha + r * l.beta
            }
            MoveKind::ReduceScatter { dims } => {
                let (q, span) = fibre(dims);
                let l = self.link(span);
                let total = r * q as f64 / (q as f64 - 1.0).max(1.0);
                let msgs = if total < REDUCE_SCATTER_SMALL {
                    log2c(q)
                } else {
                    q as f64 - 1.0
                };
                msgs * l.alpha + r * (l.beta + gamma)
            }
            MoveKind::AllReduce { dims } => {
                let (q, span) = fibre(dims);
                let l = self.link(span);
                // The plan's words are every partial received; MPI moves the block n.
                let n = r / (q as f64 - 1.0).max(1.0);
                let share = (q as f64 - 1.0) / q as f64;
                if n < ALLREDUCE_SMALL {
                    log2c(q) * (l.alpha + n * (l.beta + gamma))
                } else {
                    2.0 * (q as f64 - 1.0) * l.alpha + 2.0 * share * n * l.beta + share * n * gamma
                }
            }
            MoveKind::Broadcast => {
                let q = to.grid.size().min(self.procs).max(1);
                let l = self.link(q);
                let n = r;
                if n < BCAST_SMALL {
                    log2c(q) * (l.alpha + n * l.beta)
                } else {
                    let share = (q as f64 - 1.0) / q as f64;
                    (log2c(q) + q as f64 - 1.0) * l.alpha + 2.0 * share * n * l.beta
                }
            }
            MoveKind::Reduce => {
                let q = from.grid.size().min(self.procs).max(1);
                let l = self.link(q);
                let n = s;
                if n < REDUCE_SMALL {
                    log2c(q) * (l.alpha + n * (l.beta + gamma))
                } else {
                    let share = (q as f64 - 1.0) / q as f64;
                    2.0 * log2c(q) * l.alpha + 2.0 * share * n * l.beta + share * n * gamma
                }
            }
            MoveKind::Gather => {
                let q = from.grid.size().min(self.procs).max(1);
                let l = self.link(q);
                log2c(q) * l.alpha + r * l.beta
            }
            MoveKind::Permute => {
                let l = self.link(whole);
                l.alpha + r.max(s) * l.beta
            }
            MoveKind::AllToAll => {
                let l = self.link(whole);
                (whole as f64 - 1.0) * l.alpha + r.max(s) * l.beta
            }
        };
        // Ranks that share cores wait for each other's turn to copy their messages.
        (net + pack) / self.m.core_share(self.procs)
    }

    /// Seconds the busiest rank computes group `g` (with `cut`, one phase of it: the phased
    /// index and the phase count).
    pub fn compute_seconds(&self, plan: &Plan, g: &GroupPlan, cut: Option<(Index, usize)>) -> f64 {
        // An index of extent 0 counts as 1 (the model never multiplies by an empty range).
        let local = |c: Index| -> u64 { g.busiest_range(&plan.einsum, c, cut).len().max(1) as u64 };
        let size = |idx: &[Index]| -> f64 { idx.iter().map(|&c| local(c) as f64).product() };
        let threads = self.m.threads_per_rank(self.procs);
        let share = self.m.core_share(self.procs);
        let wb = self.wb;
        let mut t = 0.0;
        for &si in &g.group.steps {
            let Some(step) = plan.tree.steps.get(si) else {
                continue;
            };
            let out = &step.output;
            if step.operand_indices.len() != 2 {
                // A unary step (sum, transpose) streams its operand and result once.
                let words: f64 = step.operand_indices.iter().map(|o| size(o)).sum::<f64>();
                t += (words + size(out)) * wb / self.bw;
                continue;
            }
            let (a, b) = (&step.operand_indices[0], &step.operand_indices[1]);
            let prod = |keep: &dyn Fn(Index) -> bool, from: &[Index]| -> u64 {
                from.iter()
                    .filter(|&&c| keep(c))
                    .map(|&c| local(c))
                    .product()
            };
            let batch = prod(&|c| a.contains(&c) && b.contains(&c), out);
            let m = prod(&|c| a.contains(&c) && !b.contains(&c), out);
            let n = prod(&|c| b.contains(&c) && !a.contains(&c), out);
            let k = prod(&|c| b.contains(&c) && !out.contains(&c), a);
            let mut class_mnk = (m, n, k);
            let madds = (batch * m * n * k) as f64;
            // Layout copies only where the step sums an index: a Hadamard or outer product is
            // written straight in `out`'s order (no GEMM, no permutation), and the small
            // class's rate is measured on such a step, its writes included.
            if a.iter().chain(b).any(|c| !out.contains(c)) {
                // Indices one side alone sums are summed out first, in one pass over it.
                let pre =
                    |x: &[Index], y: &[Index]| x.iter().any(|c| !out.contains(c) && !y.contains(c));
                // An operand whose indices are not batch, then two contiguous runs, is permuted
                // into GEMM layout first (read and write once); so is a result not in `out`'s
                // order.
                let operand = |x: &[Index], y: &[Index]| -> f64 {
                    if pre(x, y) {
                        size(x)
                    } else if gemm_layout(x, y, out) {
                        0.0
                    } else {
                        2.0 * size(x)
                    }
                };
                let result = if out_layout(a, b, out) {
                    0.0
                } else {
                    2.0 * size(out)
                };
                let whole = operand(a, b) + operand(b, a) + result;
                // Or slice by slice, as the executor chooses (`kernels::contract`), when
                // neither operand sums an index alone.
                let sliced = (!pre(a, b) && !pre(b, a))
                    .then(|| {
                        [(a, b), (b, a)]
                            .into_iter()
                            .filter_map(|(x, y)| sliced(x, y, out, &size, madds))
                            .find(|s| s.words < whole)
                    })
                    .flatten();
                let words = match sliced {
                    Some(s) => {
                        class_mnk = s.mnk(&|c| local(c), a, b, out);
                        s.words
                    }
                    None => whole,
                };
                t += words * wb / self.bw;
            }
            t += self.fpm * madds / (self.m.gemm_rate_of(class_mnk, threads, self.procs) * share);
        }
        t
    }

    /// Seconds of every step of `plan`, in order (loads and frees cost nothing: reading the
    /// inputs is not part of the contraction).
    pub fn step_seconds(&self, plan: &Plan) -> Vec<f64> {
        plan.steps
            .iter()
            .map(|s| {
                let t = match s {
                    PlanStep::Load { .. } | PlanStep::Free { .. } => 0.0,
                    PlanStep::Redistribute {
                        from,
                        to,
                        pattern,
                        volume,
                        ..
                    } => self.move_seconds(from, to, pattern, volume),
                    PlanStep::Compute { group } => plan
                        .groups
                        .get(*group)
                        .map_or(0.0, |g| self.compute_seconds(plan, g, None)),
                    PlanStep::ComputePhase {
                        group,
                        fetch,
                        prefetch,
                        ..
                    } => {
                        let moves = |fs: &[crate::Fetch]| -> f64 {
                            fs.iter()
                                .map(|f| self.move_seconds(&f.from, &f.to, &f.pattern, &f.volume))
                                .sum()
                        };
                        let compute = plan.groups.get(*group).map_or(0.0, |g| {
                            let cut = g.phases.as_ref().map(|p| (p.index, p.count));
                            self.compute_seconds(plan, g, cut)
                        });
                        // The phase's own windows come first; the next phase's are in
                        // flight while it computes.
                        moves(fetch)
                            + phase_seconds(
                                moves(prefetch),
                                compute,
                                !prefetch.is_empty() && self.m.copies_hide(self.procs),
                            )
                    }
                };
                // Never NaN nor negative, whatever the figures.
                if t.is_finite() && t > 0.0 {
                    t
                } else {
                    0.0
                }
            })
            .collect()
    }
}

/// The largest operand (words) the executor shares between the slices of a sliced product.
const SLICED_SHARED_MAX_WORDS: f64 = (1u64 << 17) as f64;

/// Fewest multiply-adds per slice of a sliced product.
const SLICED_MIN_MADDS: f64 = (1u64 << 12) as f64;

/// A product run slice by slice along `x`'s leading indices (those leading `out` too, that
/// `y` lacks): `x` and the output are read and written in place, `y` copied once if needed.
struct SlicedForm<'a> {
    lead: &'a [Index],
    /// Words copied (read plus write).
    words: f64,
}

impl SlicedForm<'_> {
    /// The GEMM shape of one slice's product, `(m, n, k)`.
    fn mnk(
        &self,
        local: &dyn Fn(Index) -> u64,
        a: &[Index],
        b: &[Index],
        out: &[Index],
    ) -> (u64, u64, u64) {
        let keep = |c: &Index| !self.lead.contains(c);
        let p = |f: &dyn Fn(&Index) -> bool, from: &[Index]| -> u64 {
            from.iter().filter(|c| f(c)).map(|&c| local(c)).product()
        };
        let m = p(&|c| keep(c) && a.contains(c) && !b.contains(c), out);
        let n = p(&|c| keep(c) && b.contains(c) && !a.contains(c), out);
        let k = p(&|c| !out.contains(c) && b.contains(c), a);
        (m, n, k)
    }
}

/// The sliced form of `x, y -> out` (of `madds` multiply-adds) when the executor can take it:
/// `x`'s leading indices lead `out` and are not `y`'s, `y` is small enough to share, a slice
/// is worth a GEMM call, and a slice reads `x` and writes `out` in place.
fn sliced<'a>(
    x: &'a [Index],
    y: &[Index],
    out: &[Index],
    size: &dyn Fn(&[Index]) -> f64,
    madds: f64,
) -> Option<SlicedForm<'a>> {
    let lead = x
        .iter()
        .zip(out)
        .take_while(|(c, o)| c == o && !y.contains(c))
        .count();
    let count = size(&x[..lead]);
    if lead == 0 || count < 2.0 || size(y) > SLICED_SHARED_MAX_WORDS {
        return None;
    }
    let (xs, os) = (&x[lead..], &out[lead..]);
    if madds / count < SLICED_MIN_MADDS || !gemm_layout(xs, y, os) || !out_layout(xs, y, os) {
        return None;
    }
    // A slice giving the rows but stored transposed is read at faer's slower rate, or the
    // product is turned round and each slice's small result permuted in cache (the executor
    // takes the cheaper): costed as the output written once more.
    let gives_rows = os.first().is_some_and(|c| xs.contains(c) && !y.contains(c));
    let rows_first = xs.first().is_some_and(|c| os.contains(c));
    let turned = if gives_rows && !rows_first {
        size(out)
    } else {
        0.0
    };
    let words = turned
        + if gemm_layout(y, xs, os) {
            0.0
        } else {
            2.0 * size(y)
        };
    Some(SlicedForm {
        lead: &x[..lead],
        words,
    })
}

/// Whether operand `x` (of a product with `y` into `out`) reads as a batch of matrices in
/// place: its batch indices (in both and in `out`) first, then its kept and its summed
/// indices in two contiguous runs, either way round.
fn gemm_layout(x: &[Index], y: &[Index], out: &[Index]) -> bool {
    let label = |c: &Index| -> u8 {
        match (y.contains(c), out.contains(c)) {
            (true, true) => 0,
            (false, _) => 1,
            (true, false) => 2,
        }
    };
    let labels: Vec<u8> = x.iter().map(label).collect();
    let body = &labels[labels.iter().take_while(|&&l| l == 0).count()..];
    // At most one change of label in the body, and no batch index after the prefix.
    !body.contains(&0) && body.windows(2).filter(|w| w[0] != w[1]).count() <= 1
}

/// Whether the product of `a` and `b` lands in `out`'s order without a permutation: batch
/// indices first, then `a`'s kept and `b`'s kept indices in two runs (either way round).
fn out_layout(a: &[Index], b: &[Index], out: &[Index]) -> bool {
    let labels: Vec<u8> = out
        .iter()
        .map(|c| match (a.contains(c), b.contains(c)) {
            (true, true) => 0,
            (true, false) => 1,
            _ => 2,
        })
        .collect();
    let body = &labels[labels.iter().take_while(|&&l| l == 0).count()..];
    !body.contains(&0) && body.windows(2).filter(|w| w[0] != w[1]).count() <= 1
}

/// A phase's time: fetch then compute, or the longer of the two when the fetch is overlapped
/// with the previous phase's compute on a machine where copies hide
/// ([`Machine::copies_hide`]).
pub fn phase_seconds(fetch: f64, compute: f64, overlapped: bool) -> f64 {
    if overlapped {
        fetch.max(compute)
    } else {
        fetch + compute
    }
}

/// Sets `plan.prediction`'s predicted seconds (per step and in total) for machine `m`.
pub fn annotate(plan: &mut Plan, m: &Machine) {
    let steps = TimeModel::new(m, plan.procs, plan.dtype).step_seconds(plan);
    plan.prediction.seconds = steps.iter().sum();
    plan.prediction.step_seconds = steps;
    plan.prediction.machine = m.name.clone();
}
